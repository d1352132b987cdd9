//! The two sweeps of seed 003 (GoNet), ustack and the kernel point by point
//! in the same run:
//!
//! * Figure 3: 1, 10, 100, 1000 concurrent pingers, mean and p99 RTT;
//! * Figure 4: 1, 10, 100, 1000 concurrent clients that each connect, send
//!   4 KB to discard (port 9) and close, again and again: connections per
//!   second and Mbit/s.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::procs::{check_interrupted, Group};
use super::topo::{args, Ctx, KernelPeer, UstackPeer};

/// Spread `n` over `parts` (the first ones get the remainder).
pub fn split(n: usize, parts: usize) -> Vec<usize> {
    let parts = parts.clamp(1, n.max(1));
    (0..parts)
        .map(|i| n / parts + usize::from(i < n % parts))
        .collect()
}

/// Run one `scale-client` process per argument list in `ns` to the end;
/// the last JSON line of each.
fn run_clients(
    ctx: &Ctx,
    ns: &str,
    per_proc: Vec<Vec<String>>,
    limit: Duration,
) -> Result<Vec<serde_json::Value>> {
    let mut g = Group::default();
    for (i, a) in per_proc.iter().enumerate() {
        let mut v = args(&["scale-client"]);
        v.extend_from_slice(a);
        g.spawn(format!("{} client #{i}", a[0]), ctx.in_ns(ns, &v))?;
    }
    let lines = g.wait_all(Instant::now() + limit, "the clients")?;
    (0..per_proc.len())
        .map(|i| {
            lines
                .iter()
                .rev()
                .filter(|l| l.proc == i)
                .find_map(|l| l.json())
                .with_context(|| format!("client #{i} printed no result"))
        })
        .collect()
}

fn num(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

/// Mean and 99th percentile of samples in ns, in µs.
pub fn mean_p99_us(mut ns: Vec<u64>) -> (f64, f64) {
    if ns.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    ns.sort_unstable();
    let mean = ns.iter().map(|&x| x as f64).sum::<f64>() / ns.len() as f64;
    let i = (ns.len() * 99).div_ceil(100).saturating_sub(1);
    (mean / 1e3, ns[i.min(ns.len() - 1)] as f64 / 1e3)
}

/// ustack / kernel, when both are there.
pub fn ratio(u: Option<f64>, k: Option<f64>) -> Option<f64> {
    match (u, k) {
        (Some(u), Some(k)) if k > 0.0 && u.is_finite() => Some(u / k),
        _ => None,
    }
}

/// One side's result (at one point), or why there is none; Ctrl-C ends all.
pub fn outcome<T>(r: Result<T>) -> Result<(Option<T>, Option<String>)> {
    check_interrupted()?;
    Ok(match r {
        Ok(v) => (Some(v), None),
        Err(e) => {
            eprintln!("    failed: {e:#}");
            (None, Some(format!("{e:#}")))
        }
    })
}

// ------------------------------------------------------------------ ping

#[derive(Serialize, Debug, Clone)]
pub struct PingPoint {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub errors: u64,
    pub mean_us: f64,
    pub p99_us: f64,
}

#[derive(Serialize, Debug, Clone)]
pub struct PingRow {
    pub pingers: usize,
    pub ustack: Option<PingPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ustack_error: Option<String>,
    pub kernel: Option<PingPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_error: Option<String>,
    /// ustack / kernel, mean RTT.
    pub ratio_mean: Option<f64>,
    pub ratio_p99: Option<f64>,
}

/// Pingers per client process.
const PINGERS_PER_PROC: usize = 500;

fn ping_point(
    ctx: &Ctx,
    ns: &str,
    target: Ipv4Addr,
    pingers: usize,
    seconds: f64,
) -> Result<PingPoint> {
    let per_proc = split(pingers, pingers.div_ceil(PINGERS_PER_PROC))
        .into_iter()
        .map(|n| {
            args(&[
                "ping",
                "--target",
                &target.to_string(),
                "--pingers",
                &n.to_string(),
                "--interval-ms",
                "200",
                "--seconds",
                &seconds.to_string(),
            ])
        })
        .collect();
    let res = run_clients(ctx, ns, per_proc, Duration::from_secs_f64(seconds + 30.0))?;
    let mut rtts = Vec::new();
    let mut p = PingPoint {
        sent: 0,
        received: 0,
        lost: 0,
        errors: 0,
        mean_us: 0.0,
        p99_us: 0.0,
    };
    for r in &res {
        p.sent += num(r, "sent") as u64;
        p.received += num(r, "received") as u64;
        p.lost += num(r, "lost") as u64;
        p.errors += num(r, "errors") as u64;
        rtts.extend(
            r["rtt_ns"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_u64()),
        );
    }
    if rtts.is_empty() {
        bail!(
            "no echo reply at all ({} sent, {} lost, {} errors)",
            p.sent,
            p.lost,
            p.errors
        );
    }
    (p.mean_us, p.p99_us) = mean_p99_us(rtts);
    Ok(p)
}

pub fn ping_sweep(ctx: &Ctx, points: &[usize], seconds: f64) -> Result<Vec<PingRow>> {
    eprintln!("ping sweep: starting ustack serve and the kernel pair ...");
    let mut u = UstackPeer::start(ctx, "p", &[], 0)?;
    let k = KernelPeer::start(ctx, "p", 0, 0)?;
    let mut rows = Vec::new();
    for &n in points {
        eprintln!("  {n} pingers, {seconds} s: ustack ...");
        let (us, ue) = outcome(
            u.serve
                .check_failed()
                .and_then(|_| ping_point(ctx, &u.client_ns, u.addr, n, seconds)),
        )?;
        eprintln!("  {n} pingers, {seconds} s: kernel ...");
        let (ks, ke) = outcome(ping_point(ctx, &k.client_ns, k.addr, n, seconds))?;
        rows.push(PingRow {
            pingers: n,
            ratio_mean: ratio(
                us.as_ref().map(|p| p.mean_us),
                ks.as_ref().map(|p| p.mean_us),
            ),
            ratio_p99: ratio(us.as_ref().map(|p| p.p99_us), ks.as_ref().map(|p| p.p99_us)),
            ustack: us,
            ustack_error: ue,
            kernel: ks,
            kernel_error: ke,
        });
    }
    Ok(rows)
}

// ------------------------------------------------------------------ conns

/// Bytes each connection of the connection sweep sends.
pub const CONN_BYTES: usize = 4096;

/// Client source addresses of the connection sweep.
const CONN_SOURCES: usize = 20;

#[derive(Serialize, Debug, Clone)]
pub struct ConnPoint {
    pub completed: u64,
    pub seconds: f64,
    pub conns_per_s: f64,
    pub mbit_per_s: f64,
    pub failed: u64,
    pub errors: BTreeMap<String, u64>,
}

#[derive(Serialize, Debug, Clone)]
pub struct ConnRow {
    pub clients: usize,
    pub ustack: Option<ConnPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ustack_error: Option<String>,
    pub kernel: Option<ConnPoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_error: Option<String>,
    /// ustack / kernel, connections per second (= Mbit/s ratio).
    pub ratio: Option<f64>,
}

fn conn_point(
    ctx: &Ctx,
    ns: &str,
    target: Ipv4Addr,
    sources: &[Ipv4Addr],
    clients: usize,
    seconds: f64,
) -> Result<ConnPoint> {
    let srcs: Vec<String> = sources.iter().map(|a| a.to_string()).collect();
    // Two processes (one per core) from 10 clients up.
    let procs = if clients >= 10 { 2 } else { 1 };
    let per_proc = split(clients, procs)
        .into_iter()
        .map(|n| {
            let mut a = args(&[
                "conns",
                "--target",
                &format!("{target}:9"),
                "--clients",
                &n.to_string(),
                "--bytes",
                &CONN_BYTES.to_string(),
                "--seconds",
                &seconds.to_string(),
            ]);
            if !srcs.is_empty() {
                a.push("--sources".into());
                a.push(srcs.join(","));
            }
            a
        })
        .collect();
    let res = run_clients(ctx, ns, per_proc, Duration::from_secs_f64(seconds + 30.0))?;
    let mut p = ConnPoint {
        completed: 0,
        seconds: 0.0,
        conns_per_s: 0.0,
        mbit_per_s: 0.0,
        failed: 0,
        errors: BTreeMap::new(),
    };
    let mut bytes = 0.0;
    for r in &res {
        p.completed += num(r, "completed") as u64;
        bytes += num(r, "bytes");
        p.failed += num(r, "failed") as u64;
        p.seconds = p.seconds.max(num(r, "seconds"));
        for (k, v) in r["errors"].as_object().into_iter().flatten() {
            *p.errors.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
        }
    }
    if p.seconds > 0.0 {
        p.conns_per_s = p.completed as f64 / p.seconds;
        p.mbit_per_s = bytes * 8.0 / p.seconds / 1e6;
    }
    if p.completed == 0 {
        bail!(
            "no connection completed ({} failed: {:?})",
            p.failed,
            p.errors
        );
    }
    Ok(p)
}

/// `serve_extra`: options for ustack serve (--max-connections when needed).
pub fn conn_sweep(
    ctx: &Ctx,
    points: &[usize],
    seconds: f64,
    serve_extra: &[String],
) -> Result<Vec<ConnRow>> {
    // The clients close first, so every connection leaves a TIME-WAIT port
    // behind for a second (tcp_tw_reuse): spread them over source addresses
    // so that finding a free port stays cheap at tens of thousands per second.
    eprintln!("connection sweep: starting ustack serve and the kernel pair ...");
    let mut u = UstackPeer::start(ctx, "c", serve_extra, CONN_SOURCES)?;
    let k = KernelPeer::start(ctx, "c", 1, CONN_SOURCES)?;
    let mut rows = Vec::new();
    for &n in points {
        eprintln!("  {n} clients, {seconds} s: ustack ...");
        let (us, ue) = outcome(
            u.serve
                .check_failed()
                .and_then(|_| conn_point(ctx, &u.client_ns, u.addr, &u.sources, n, seconds)),
        )?;
        eprintln!("  {n} clients, {seconds} s: kernel ...");
        let (ks, ke) = outcome(conn_point(
            ctx,
            &k.client_ns,
            k.addr,
            &k.sources,
            n,
            seconds,
        ))?;
        rows.push(ConnRow {
            clients: n,
            ratio: ratio(
                us.as_ref().map(|p| p.conns_per_s),
                ks.as_ref().map(|p| p.conns_per_s),
            ),
            ustack: us,
            ustack_error: ue,
            kernel: ks,
            kernel_error: ke,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_spreads_the_remainder() {
        assert_eq!(split(1000, 2), [500, 500]);
        assert_eq!(split(7, 3), [3, 2, 2]);
        assert_eq!(split(1, 2), [1]);
        assert_eq!(split(0, 3), [0]);
    }

    #[test]
    fn mean_and_p99() {
        let (m, p) = mean_p99_us((1..=100).map(|x| x * 1000).collect());
        assert!((m - 50.5).abs() < 1e-9);
        assert_eq!(p, 99.0);
        let (m, p) = mean_p99_us(vec![5000]);
        assert_eq!((m, p), (5.0, 5.0));
        assert!(mean_p99_us(vec![]).0.is_nan());
        assert_eq!(ratio(Some(2.0), Some(4.0)), Some(0.5));
        assert_eq!(ratio(Some(2.0), None), None);
        assert_eq!(ratio(Some(2.0), Some(0.0)), None);
    }
}
