//! `ustack bench --cc` (hidden): goodput of CUBIC against NewReno on an
//! impaired path, and with `--cc-tap` against the Linux kernel's CUBIC.
//!
//! 1. Simulation (deterministic, virtual time): two ustack engines over the
//!    in-memory link of `crates/sim` (`crates/dev/src/memlink.rs`), 100
//!    Mbit/s each way, 10 ms one-way delay (20 ms RTT), 250 frames in
//!    flight per direction (83 in propagation, a queue of ~1 BDP), and
//!    random loss per frame in both directions: 1% (the path), then
//!    0.1%, 0.01% and none for context. One bulk transfer per seed; the
//!    same seeds (so the same link draws) for both algorithms; goodput =
//!    bytes delivered / (last byte read - connect), aggregated over seeds.
//!    On a 20 ms path CUBIC stays in its Reno-friendly region (RFC 9438
//!    4.3), where it is designed to match Reno's average window, 1.22 /
//!    sqrt(p) segments: expect ratios near 1.
//! 2. TAP (`--cc-tap`, real time, root): the sender is ustack's chargen in
//!    this process, behind a TAP impaired by `--impair
//!    loss=1%,delay=10ms,rate=100mbit,limit=250` (both directions); the
//!    receiver is `ustack kclient recv` on the kernel's sockets in a
//!    namespace. The kernel peer: a chargen-like sender on the kernel's
//!    sockets with TCP_CONGESTION cubic in one namespace, the same client
//!    in another, joined
//!    by two TAPs between which this process forwards frames through the
//!    same user-space impairment (`Netem`, same configuration, same timer
//!    resolution as ustack's runtime): this kernel has no `sch_netem`, and
//!    a veth pair cannot be impaired from user space.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use ustack_net::core::tcp::{CcAlgorithm, TcpConfig};
use ustack_net::core::{Config, Limits};
use ustack_net::dev::memlink::Impairments;
use ustack_net::dev::netem::{ImpairSpec, Netem};
use ustack_net::dev::tap::Tap;
use ustack_net::dev::Device;
use ustack_net::{Net, RuntimeOptions};
use ustack_sim::{AppPlan, ConnPlan, Ending, Family, Scenario};
use ustack_wire::ethernet::MacAddr;
use ustack_wire::ipv4::Ipv4Cidr;

use crate::netns::{in_ns, ip, Namespaces};

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Congestion control benchmark (--cc)")]
pub struct CcArgs {
    /// Compare congestion control: CUBIC against NewReno on impaired paths
    /// (deterministic simulation); with --cc-tap also over a TAP against
    /// the kernel's CUBIC.
    #[arg(long)]
    pub cc: bool,
    /// Simulated transfers (seeds) per algorithm and path.
    #[arg(
        id = "cc_seeds",
        value_name = "N",
        long = "cc-seeds",
        default_value_t = 10
    )]
    pub seeds: u64,
    /// Megabytes per simulated transfer.
    #[arg(
        id = "cc_mbytes",
        value_name = "MB",
        long = "cc-mbytes",
        default_value_t = 20
    )]
    pub mbytes: u64,
    /// Also measure over a real impaired TAP: ustack (CUBIC, NewReno)
    /// against the kernel's CUBIC (needs root).
    #[arg(id = "cc_tap", long = "cc-tap")]
    pub tap: bool,
    /// Seconds per TAP transfer.
    #[arg(
        id = "cc_seconds",
        value_name = "S",
        long = "cc-seconds",
        default_value_t = 20.0
    )]
    pub seconds: f64,
    /// TAP transfers per peer (the table shows their mean).
    #[arg(
        id = "cc_runs",
        value_name = "N",
        long = "cc-runs",
        default_value_t = 1
    )]
    pub runs: u32,
}

/// The path, as a `--impair` specification (each direction).
const TAP_SPEC: &str = "loss=1%,delay=10ms,rate=100mbit,limit=250";
const RATE_BPS: u64 = 100_000_000;
const ONE_WAY: Duration = Duration::from_millis(10);
/// Frames in flight per direction: 83 in 10 ms of propagation at 100
/// Mbit/s, and a queue of about one bandwidth-delay product.
const QUEUE_LIMIT: usize = 250;

/// A simulated path: name, loss per frame, one-way delay, frames in flight.
struct SimPath {
    name: &'static str,
    loss: f64,
    one_way: Duration,
    queue_limit: usize,
}

const SIM_PATHS: [SimPath; 4] = [
    SimPath {
        name: "1% loss, 20 ms RTT",
        loss: 0.01,
        one_way: ONE_WAY,
        queue_limit: QUEUE_LIMIT,
    },
    SimPath {
        name: "0.1% loss, 20 ms RTT",
        loss: 0.001,
        one_way: ONE_WAY,
        queue_limit: QUEUE_LIMIT,
    },
    SimPath {
        name: "0.01% loss, 20 ms RTT",
        loss: 0.0001,
        one_way: ONE_WAY,
        queue_limit: QUEUE_LIMIT,
    },
    SimPath {
        name: "no loss, 20 ms RTT",
        loss: 0.0,
        one_way: ONE_WAY,
        queue_limit: QUEUE_LIMIT,
    },
];

/// Buffers large enough that the window, not the buffer, limits.
const BUF: usize = 4 << 20;

#[derive(Serialize, Debug, Clone)]
pub struct SimRow {
    pub path: String,
    pub loss: f64,
    pub cubic_mbps: f64,
    pub newreno_mbps: f64,
    /// CUBIC / NewReno.
    pub ratio: f64,
    pub seeds: u64,
    pub bytes: u64,
    pub cubic_retrans: u64,
    pub newreno_retrans: u64,
}

#[derive(Serialize, Debug, Clone)]
pub struct TapRow {
    pub sender: String,
    pub mbps: Vec<f64>,
    pub mean_mbps: f64,
}

#[derive(Serialize, Debug)]
struct Report {
    sim: Vec<SimRow>,
    tap: Vec<TapRow>,
}

fn app(bytes: u64) -> AppPlan {
    AppPlan {
        bytes,
        max_write: 65536,
        max_read: 65536,
        pause_prob: 0.0,
        max_pause: Duration::ZERO,
        ending: Ending::ShutdownThenClose,
        nodelay: false,
    }
}

/// One bulk transfer from host A to host B over `path`.
fn scenario(seed: u64, path: &SimPath, alg: CcAlgorithm, bytes: u64) -> Scenario {
    let mut sc = Scenario::generate(Family::Clean, seed);
    let link = Impairments {
        loss: path.loss,
        delay: path.one_way,
        rate_bps: Some(RATE_BPS),
        queue_limit: path.queue_limit,
        ..Impairments::none()
    };
    sc.ab = link.clone();
    sc.ba = link;
    let tcp = TcpConfig {
        congestion_control: alg,
        rcv_buf: BUF,
        snd_buf: BUF,
        ..TcpConfig::default()
    };
    sc.tcp_a = tcp.clone();
    sc.tcp_b = tcp;
    sc.mtu = 1500;
    sc.conns = vec![ConnPlan {
        client_on_a: true,
        start: Duration::from_millis(1),
        ipv6: false,
        client: app(bytes),
        server: app(0),
    }];
    sc
}

/// (seconds, retransmissions) summed over the seeds.
fn simulate(path: &SimPath, alg: CcAlgorithm, seeds: u64, bytes: u64) -> Result<(f64, u64)> {
    let mut secs = 0.0;
    let mut retrans = 0;
    for seed in 0..seeds {
        let sc = scenario(seed, path, alg, bytes);
        let start = sc.conns[0].start;
        let r = ustack_sim::run(&sc).map_err(|f| anyhow::anyhow!("simulation failed: {f}"))?;
        if r.bytes_delivered != bytes {
            bail!("seed {seed}: {} of {bytes} bytes", r.bytes_delivered);
        }
        secs += r.apps_done_at.saturating_sub(start).as_secs_f64();
        retrans += r.retrans_segs;
    }
    Ok((secs, retrans))
}

fn sim_rows(a: &CcArgs) -> Result<Vec<SimRow>> {
    let bytes = a.mbytes.max(1) * 1_000_000;
    let seeds = a.seeds.max(1);
    let mut rows = Vec::new();
    for path in &SIM_PATHS {
        eprintln!(
            "  simulated {}: {seeds} x {} MB per algorithm ...",
            path.name, a.mbytes
        );
        let (c_secs, c_rtx) = simulate(path, CcAlgorithm::Cubic, seeds, bytes)?;
        let (r_secs, r_rtx) = simulate(path, CcAlgorithm::NewReno, seeds, bytes)?;
        let mbps = |secs: f64| (bytes * seeds) as f64 * 8.0 / secs / 1e6;
        let (cubic, newreno) = (mbps(c_secs), mbps(r_secs));
        rows.push(SimRow {
            path: format!("{}, 100 Mbit/s", path.name),
            loss: path.loss,
            cubic_mbps: cubic,
            newreno_mbps: newreno,
            ratio: cubic / newreno,
            seeds,
            bytes,
            cubic_retrans: c_rtx,
            newreno_retrans: r_rtx,
        });
    }
    Ok(rows)
}

/// `ustack kclient recv` in `ns` against `host`'s chargen: Mbit/s.
fn kclient_recv(exe: &Path, ns: &str, host: Ipv4Addr, seconds: f64) -> Result<f64> {
    let out = in_ns(
        ns,
        &exe.to_string_lossy(),
        &[
            "kclient",
            "recv",
            &host.to_string(),
            "--seconds",
            &seconds.to_string(),
        ],
    )?;
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).with_context(|| format!("kclient output: {out}"))?;
    v.get("value")
        .and_then(|x| x.as_f64())
        .with_context(|| format!("kclient output: {out}"))
}

/// A TAP whose kernel side is in `ns` with `addr` (up), MTU 1500.
fn tap_in(name: &str, ns: &str, addr: &str) -> Result<Tap> {
    let mut tap = Tap::create(name).with_context(|| format!("cannot create TAP {name}"))?;
    tap.set_mtu(1500)?;
    tap.host()
        .and_then(|h| h.move_to_netns_named(ns))
        .with_context(|| format!("cannot move {name} into {ns}"))?;
    ip(&["-n", ns, "addr", "add", addr, "dev", name])?;
    ip(&["-n", ns, "link", "set", name, "up"])?;
    Ok(tap)
}

/// ustack (algorithm `alg`) sending over the impaired TAP to the kernel.
fn ustack_over_tap(exe: &Path, alg: CcAlgorithm, a: &CcArgs, seed: u64) -> Result<f64> {
    let pid = std::process::id() % 100_000;
    let ns = format!("ucu{pid}");
    let mut nss = Namespaces::default();
    nss.add(&ns)?;
    let tap = tap_in(&format!("uct{pid}"), &ns, "10.81.0.1/24")?;
    let spec: ImpairSpec = TAP_SPEC.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let device = Netem::new(tap, spec.config.clone(), spec.config, seed);
    let counters = device.counters();
    let addr = Ipv4Addr::new(10, 81, 0, 2);
    let p = pid.to_be_bytes();
    let config = Config {
        mac: MacAddr([0x02, 0x75, 0xcc, p[1], p[2], p[3]]),
        addr: Ipv4Cidr::new(addr, 24).map_err(|_| anyhow::anyhow!("bad prefix"))?,
        gateway: None,
        mtu: 1500,
        tcp: TcpConfig {
            congestion_control: alg,
            snd_buf: BUF,
            rcv_buf: BUF,
            ..TcpConfig::default()
        },
        limits: Limits::default(),
        // Zero: drawn from getrandom by the runtime.
        secret: [0; 16],
        seed: 0,
    };
    let net = Net::start(config, Box::new(device), RuntimeOptions::default())
        .context("cannot start the stack")?;
    crate::serve::start_services(&net, addr, false, 64, Default::default())?;
    let r = kclient_recv(exe, &ns, addr, a.seconds);
    net.shutdown();
    eprintln!("    impaired tx (ustack -> kernel): {}", counters.tx());
    r
}

/// Forward frames between two TAPs until `stop`, through `netem` around
/// the first (its rx impairs A -> B, its tx B -> A). Sleeps in poll(2)
/// with a millisecond timeout, as ustack's runtime does in epoll.
fn forward(mut a: Netem<Tap>, mut b: Tap, stop: Arc<AtomicBool>) {
    let (fa, fb) = (a.raw_fd(), b.raw_fd());
    let mut buf = vec![0u8; 65536 + 64];
    while !stop.load(Ordering::Relaxed) {
        let _ = a.poll_deferred();
        while let Ok(Some(n)) = a.recv(&mut buf) {
            if let Some(f) = buf.get(..n) {
                let _ = b.send(f);
            }
        }
        while let Ok(Some(n)) = b.recv(&mut buf) {
            if let Some(f) = buf.get(..n) {
                let _ = a.send(f);
            }
        }
        let timeout = a.next_deadline().map_or(10, |t| {
            let d = t.saturating_duration_since(std::time::Instant::now());
            i32::try_from(d.as_micros().div_ceil(1000).min(10)).unwrap_or(10)
        });
        let mut fds = [fa, fb].map(|fd| libc::pollfd {
            fd: fd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: `fds` is a valid array of two pollfd for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
    }
}

/// TCP_CONGESTION of a kernel socket, as set or as read back.
fn tcp_congestion(fd: RawFd, set: Option<&str>) -> std::io::Result<String> {
    if let Some(name) = set {
        let len = libc::socklen_t::try_from(name.len()).unwrap_or(0);
        // SAFETY: `name` is valid for `len` bytes for the call; fd is an
        // open socket.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                name.as_ptr().cast(),
                len,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let mut buf = [0u8; 16];
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(0);
    // SAFETY: `buf` is writable for `len` bytes, `len` is a valid pointer.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = usize::try_from(len).unwrap_or(0).min(buf.len());
    let name = buf.get(..n).unwrap_or(&[]);
    Ok(String::from_utf8_lossy(name)
        .trim_end_matches('\0')
        .to_string())
}

/// A chargen-like sender on the kernel's sockets in namespace `ns`, with
/// TCP_CONGESTION set to cubic on the listener (this host's default is
/// bbr, and a namespace may not choose an algorithm outside
/// `tcp_allowed_congestion_control`; a socket of a CAP_NET_ADMIN process
/// may). Serves one connection until the client goes away; returns once
/// listening, with the algorithm the accepted socket will report.
fn kernel_sender(ns: &str, bind: SocketAddrV4) -> Result<mpsc::Receiver<String>> {
    let path = Path::new("/run/netns").join(ns);
    let (ready_tx, ready_rx) = mpsc::channel::<std::result::Result<(), String>>();
    let (cc_tx, cc_rx) = mpsc::channel::<String>();
    std::thread::Builder::new()
        .name("ustack-cc-sender".into())
        .spawn(move || {
            let setup = || -> std::io::Result<TcpListener> {
                let f = std::fs::File::open(&path)?;
                // SAFETY: setns on a namespace fd we own; it moves only
                // this thread, which lives for this sender alone.
                if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let l = TcpListener::bind(bind)?;
                tcp_congestion(l.as_raw_fd(), Some("cubic"))?;
                Ok(l)
            };
            let l = match setup() {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            let Ok((mut s, _)) = l.accept() else { return };
            let cc = tcp_congestion(s.as_raw_fd(), None).unwrap_or_else(|e| e.to_string());
            let _ = cc_tx.send(cc);
            let chunk: Vec<u8> = (0..65536u32).map(|i| b' ' + (i % 95) as u8).collect();
            while s.write_all(&chunk).is_ok() {}
        })
        .context("cannot start the kernel-side sender")?;
    match ready_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => Ok(cc_rx),
        Ok(Err(e)) => bail!("kernel-side sender in {ns}: {e}"),
        Err(_) => bail!("the kernel-side sender did not start"),
    }
}

/// The kernel's CUBIC sending through the same impairment.
fn kernel_over_taps(exe: &Path, a: &CcArgs, seed: u64) -> Result<f64> {
    let pid = std::process::id() % 100_000;
    let (ns_a, ns_b) = (format!("uca{pid}"), format!("ucb{pid}"));
    let mut nss = Namespaces::default();
    nss.add(&ns_a)?;
    nss.add(&ns_b)?;
    let tap_a = tap_in(&format!("ucta{pid}"), &ns_a, "10.82.0.1/24")?;
    let tap_b = tap_in(&format!("uctb{pid}"), &ns_b, "10.82.0.2/24")?;
    let spec: ImpairSpec = TAP_SPEC.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let netem = Netem::new(tap_a, spec.config.clone(), spec.config, seed);
    let counters = netem.counters();
    let stop = Arc::new(AtomicBool::new(false));
    let fwd = {
        let stop = stop.clone();
        std::thread::spawn(move || forward(netem, tap_b, stop))
    };
    let server = Ipv4Addr::new(10, 82, 0, 2);
    let result = kernel_sender(&ns_b, SocketAddrV4::new(server, 19)).and_then(|cc| {
        let r = kclient_recv(exe, &ns_a, server, a.seconds);
        if let Ok(name) = cc.recv_timeout(Duration::from_secs(1)) {
            eprintln!("    kernel sender's congestion control: {name}");
            if name != "cubic" {
                bail!("the kernel sender runs {name}, not cubic");
            }
        }
        r
    });
    stop.store(true, Ordering::Relaxed);
    let _ = fwd.join();
    eprintln!(
        "    impaired A -> B (kernel receiver -> sender): {}",
        counters.rx()
    );
    eprintln!(
        "    impaired B -> A (kernel sender -> receiver): {}",
        counters.tx()
    );
    result
}

fn tap_rows(a: &CcArgs) -> Result<Vec<TapRow>> {
    if !(1.0..=600.0).contains(&a.seconds) {
        bail!("--cc-seconds must be between 1 and 600");
    }
    let exe = std::env::current_exe().context("cannot find the ustack executable")?;
    let mut rows: Vec<TapRow> = ["ustack CUBIC", "ustack NewReno", "kernel CUBIC"]
        .iter()
        .map(|s| TapRow {
            sender: s.to_string(),
            mbps: Vec::new(),
            mean_mbps: 0.0,
        })
        .collect();
    for run in 0..a.runs.max(1) {
        let seed = 0x6363 + u64::from(run);
        for (i, alg) in [CcAlgorithm::Cubic, CcAlgorithm::NewReno]
            .into_iter()
            .enumerate()
        {
            eprintln!("  TAP run {run}: ustack {alg}, {} s ...", a.seconds);
            let v = ustack_over_tap(&exe, alg, a, seed)?;
            rows[i].mbps.push(v);
        }
        eprintln!("  TAP run {run}: kernel cubic, {} s ...", a.seconds);
        let v = kernel_over_taps(&exe, a, seed)?;
        rows[2].mbps.push(v);
    }
    for r in &mut rows {
        r.mean_mbps = r.mbps.iter().sum::<f64>() / r.mbps.len().max(1) as f64;
    }
    Ok(rows)
}

pub fn run(a: &CcArgs, json: bool) -> Result<i32> {
    eprintln!("congestion control, CUBIC vs NewReno:");
    let sim = sim_rows(a)?;
    let tap = if a.tap { tap_rows(a)? } else { Vec::new() };
    if json {
        println!("{}", serde_json::to_string_pretty(&Report { sim, tap })?);
        return Ok(0);
    }
    println!(
        "{:<40} {:>12} {:>14} {:>8}",
        "simulated path (per direction)", "CUBIC Mbit/s", "NewReno Mbit/s", "ratio"
    );
    for r in &sim {
        println!(
            "{:<40} {:>12.2} {:>14.2} {:>8.2}",
            r.path, r.cubic_mbps, r.newreno_mbps, r.ratio
        );
    }
    if let Some(r) = sim.first() {
        println!(
            "({} seeds x {} MB per cell, same seeds for both; ratio = CUBIC / NewReno)",
            r.seeds,
            r.bytes / 1_000_000
        );
    }
    if !tap.is_empty() {
        println!();
        println!("over TAP, --impair {TAP_SPEC} each way:");
        let kernel = tap.last().map_or(f64::NAN, |k| k.mean_mbps);
        println!(
            "{:<16} {:>10} {:>12}  runs",
            "sender", "Mbit/s", "vs kernel"
        );
        for r in &tap {
            let runs: Vec<String> = r.mbps.iter().map(|v| format!("{v:.2}")).collect();
            println!(
                "{:<16} {:>10.2} {:>12.2}  {}",
                r.sender,
                r.mean_mbps,
                r.mean_mbps / kernel,
                runs.join(" ")
            );
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulated comparison is deterministic: the same seeds give the
    /// same seconds, and both algorithms deliver everything.
    #[test]
    fn simulated_goodput_is_deterministic() {
        let path = &SIM_PATHS[0];
        let a = simulate(path, CcAlgorithm::Cubic, 2, 1_000_000).unwrap();
        let b = simulate(path, CcAlgorithm::Cubic, 2, 1_000_000).unwrap();
        assert_eq!(a, b);
        let r = simulate(path, CcAlgorithm::NewReno, 2, 1_000_000).unwrap();
        assert!(r.0 > 0.0);
    }

    #[test]
    fn tap_spec_parses() {
        let s: ImpairSpec = TAP_SPEC.parse().unwrap();
        assert_eq!(s.config.rate_bps, Some(RATE_BPS));
        assert_eq!(s.config.delay, ONE_WAY);
        assert_eq!(s.config.limit, QUEUE_LIMIT);
        assert!((s.config.loss - 0.01).abs() < 1e-12);
    }
}
