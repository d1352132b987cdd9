//! `ustack ping`: ICMP echo from ustack, printed like ping(8).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;

use crate::setup::{self, NetArgs};
use crate::signals;

#[derive(Args, Debug)]
pub struct PingArgs {
    #[command(flatten)]
    pub net: NetArgs,
    /// Stop after sending COUNT requests [default: until interrupted].
    #[arg(short = 'c', long = "count", value_name = "COUNT")]
    pub count: Option<u32>,
    /// Payload bytes per request (ICMP data; 8 bytes of ICMP header are
    /// added). Over IPv6 the packet must fit the MTU (no fragments yet).
    #[arg(short = 's', long = "size", default_value_t = 56, value_parser = clap::value_parser!(u16).range(0..=65507))]
    pub size: u16,
    /// Seconds between requests.
    #[arg(short = 'i', long = "interval", default_value_t = 1.0)]
    pub interval: f64,
    /// Seconds to wait for each reply.
    #[arg(short = 'W', long = "timeout", default_value_t = 2.0)]
    pub timeout: f64,
    /// Host to ping: an IPv4 or IPv6 address (ICMPv6 echo for IPv6, e.g.
    /// fd77::1, the kernel side's default; names are not resolved).
    pub host: IpAddr,
}

fn secs(what: &str, v: f64) -> Result<Duration> {
    if !v.is_finite() || !(0.0..=3600.0).contains(&v) {
        bail!("{what} must be between 0 and 3600 seconds, not {v}");
    }
    Ok(Duration::from_secs_f64(v))
}

pub fn run(args: PingArgs) -> Result<i32> {
    let interval = secs("--interval", args.interval)?;
    let timeout = secs("--timeout", args.timeout)?;
    setup::check_reachable(&args.net, args.host)?;
    let default_tap = format!("ustk{}", std::process::id() % 100_000_000);
    let up = setup::bring_up(&args.net, &default_tap)?;
    let payload: Vec<u8> = (0..usize::from(args.size))
        .map(|i| (i % 256) as u8)
        .collect();
    match args.host {
        IpAddr::V4(_) => println!(
            "PING {host} ({host}) {} ({}) bytes of data (from {} via TAP {}).",
            args.size,
            usize::from(args.size) + 28,
            up.addr.addr,
            up.tap,
            host = args.host
        ),
        // ping(8) over IPv6: "PING fd77::1 (fd77::1) 56 data bytes".
        IpAddr::V6(h6) => println!(
            "PING {h6} ({h6}) {} data bytes (from {} via TAP {}).",
            args.size,
            up.net.with_stack(|s| s.ipv6_source_for(h6)),
            up.tap,
        ),
    }
    let start = Instant::now();
    let mut sent = 0u32;
    let mut received = 0u32;
    let mut rtts: Vec<f64> = Vec::new();
    let mut interrupted = false;
    let mut seq: u16 = 1;
    while args.count.is_none_or(|c| sent < c) {
        let t0 = Instant::now();
        sent += 1;
        match up.net.ping(args.host, seq, &payload, timeout) {
            Ok(Some(r)) => {
                received += 1;
                let ms = r.rtt.as_secs_f64() * 1e3;
                rtts.push(ms);
                println!(
                    "{} bytes from {}: icmp_seq={} ttl={} time={:.3} ms",
                    r.reply.len + 8,
                    r.reply.from,
                    r.reply.seq,
                    r.reply.ttl,
                    ms
                );
            }
            Ok(None) => println!("no reply from {} for icmp_seq={seq}", args.host),
            Err(e) => println!("{}: icmp_seq={seq}: {e}", args.host),
        }
        seq = seq.wrapping_add(1);
        if args.count.is_some_and(|c| sent >= c) {
            break;
        }
        let left = interval.saturating_sub(t0.elapsed());
        if signals::wait_termination(Some(left)).is_some() {
            interrupted = true;
            break;
        }
    }
    // A signal that came during the last wait for a reply.
    if !interrupted && signals::wait_termination(Some(Duration::ZERO)).is_some() {
        tracing::debug!("interrupted");
    }
    let elapsed = start.elapsed();
    println!("\n--- {} ping statistics ---", args.host);
    let loss = if sent == 0 {
        0.0
    } else {
        100.0 * f64::from(sent - received) / f64::from(sent)
    };
    println!(
        "{sent} packets transmitted, {received} received, {loss:.0}% packet loss, time {}ms",
        elapsed.as_millis()
    );
    if !rtts.is_empty() {
        let min = rtts.iter().copied().fold(f64::INFINITY, f64::min);
        let max = rtts.iter().copied().fold(0.0, f64::max);
        let avg = rtts.iter().sum::<f64>() / rtts.len() as f64;
        let mdev =
            (rtts.iter().map(|r| (r - avg) * (r - avg)).sum::<f64>() / rtts.len() as f64).sqrt();
        println!("rtt min/avg/max/mdev = {min:.3}/{avg:.3}/{max:.3}/{mdev:.3} ms");
    }
    up.finish();
    Ok(if received > 0 { 0 } else { 1 })
}
