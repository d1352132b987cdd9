//! `ustack ping`: ICMP echo from ustack, printed like ping(8).

use std::collections::VecDeque;
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
    /// Stop after sending COUNT requests (at least 1) [default: until
    /// interrupted].
    #[arg(short = 'c', long = "count", value_name = "COUNT",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub count: Option<u32>,
    /// Payload bytes per request (ICMP data; 8 bytes of ICMP header are
    /// added; larger than the MTU allows, the request is fragmented).
    #[arg(short = 's', long = "size", default_value_t = 56, value_parser = clap::value_parser!(u16).range(0..=65507))]
    pub size: u16,
    /// Seconds between requests, whether the replies came or not, as
    /// ping(8) (0: the next as soon as the reply or the timeout comes).
    #[arg(short = 'i', long = "interval", default_value_t = 1.0)]
    pub interval: f64,
    /// Seconds to wait for each reply.
    #[arg(short = 'W', long = "timeout", default_value_t = 2.0)]
    pub timeout: f64,
    /// Host to ping: an IPv4 or IPv6 address (ICMPv6 echo for IPv6, e.g.
    /// fd77::1, the kernel side's default; names are not resolved).
    pub host: IpAddr,
}

/// Requests in flight at most (half the 16-bit sequence space).
const MAX_IN_FLIGHT: usize = 1 << 15;

/// The longest a wait for replies goes without looking for SIGINT/SIGTERM.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

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
    let host = args.host;
    let start = Instant::now();
    let mut sent = 0u32;
    let mut received = 0u32;
    let mut rtts: Vec<f64> = Vec::new();
    let mut seq: u16 = 1;
    // Requests in flight: sequence number, the stack's time it left, and
    // when to give up on it. As ping(8), a request leaves every interval
    // whether the previous one was answered or not (an interval of 0:
    // once nothing is in flight), and Ctrl-C stops it at once, also while
    // replies are awaited.
    let mut in_flight: VecDeque<(u16, ustack_net::core::time::Instant, Instant)> = VecDeque::new();
    let mut next_send = Instant::now();
    loop {
        let now = Instant::now();
        let more = args.count.is_none_or(|c| sent < c);
        if more && now >= next_send && (!interval.is_zero() || in_flight.is_empty()) {
            // Sequence numbers are 16 bits: with this many in flight the
            // oldest is given up on before its number comes round again
            // (and a tiny -i with a long -W holds no more than this).
            if in_flight.len() >= MAX_IN_FLIGHT {
                if let Some((s, _, _)) = in_flight.pop_front() {
                    println!("no reply from {host} for icmp_seq={s}");
                }
            }
            sent += 1;
            match up.net.echo_request(host, seq, &payload) {
                Ok(at) => in_flight.push_back((seq, at, now + timeout)),
                Err(e) => println!("{host}: icmp_seq={seq}: {e}"),
            }
            seq = seq.wrapping_add(1);
            next_send = now + interval;
            continue;
        }
        while let Some(&(s, _, give_up)) = in_flight.front() {
            if give_up > now {
                break;
            }
            println!("no reply from {host} for icmp_seq={s}");
            in_flight.pop_front();
        }
        if !more && in_flight.is_empty() {
            break;
        }
        // Wait for the next event: a reply, a request due, a request given
        // up on, or a signal (looked for at least every SIGNAL_CHECK).
        let mut until = now + SIGNAL_CHECK;
        if more && (!interval.is_zero() || in_flight.is_empty()) {
            until = until.min(next_send);
        }
        if let Some(&(_, _, give_up)) = in_flight.front() {
            until = until.min(give_up);
        }
        let wait = until.saturating_duration_since(now);
        let signal_wait = if in_flight.is_empty() {
            wait
        } else {
            match up.net.echo_reply(host, None, wait) {
                Ok(Some(r)) => {
                    // A reply to a request given up on, or a duplicate, is
                    // not counted.
                    if let Some(i) = in_flight.iter().position(|f| f.0 == r.seq) {
                        let (_, at, _) = in_flight.remove(i).unwrap_or((r.seq, r.at, now));
                        received += 1;
                        let ms = r.at.saturating_duration_since(at).as_secs_f64() * 1e3;
                        rtts.push(ms);
                        println!(
                            "{} bytes from {}: icmp_seq={} ttl={} time={:.3} ms",
                            r.len + 8,
                            r.from,
                            r.seq,
                            r.ttl,
                            ms
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    println!("{host}: {e}");
                    break;
                }
            }
            Duration::ZERO
        };
        if signals::wait_termination(Some(signal_wait)).is_some() {
            break;
        }
    }
    let elapsed = start.elapsed();
    println!("\n--- {host} ping statistics ---");
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
