//! The two measurements of many connections held open:
//!
//! * established: N idle connections to the server's echo port (several
//!   client processes, several source addresses): the time of each step of
//!   10,000, the server process's RSS, and 1-byte request/response latency
//!   of one more connection with none and with N idle ones;
//! * `ustack run` flows: N connections from inside the sandbox to a server
//!   on the host's loopback, one after another: the time of each 1,000,
//!   then the relay's CPU time over an idle window. The kernel peer is the
//!   same client in a namespace joined to the host by veth.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::procs::{check_interrupted, Group};
use super::sweeps::{outcome, ratio, split};
use super::sys;
use super::topo::{args, pinned, Ctx, HostVeth, KernelPeer, UstackPeer};
use crate::netns::in_ns;

/// Sockets one client process holds at most (the limit is 20,000 descriptors).
const PER_PROC: usize = 18_000;

/// How the connections were opened.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Opening {
    pub requested: usize,
    pub opened: u64,
    pub failed: u64,
    pub errors: BTreeMap<String, u64>,
    /// Why a client stopped early (too many failures, time limit).
    pub gave_up: Vec<String>,
    pub seconds: f64,
    /// Connections per step.
    pub step: usize,
    /// Seconds each step of `step` connections took, in order.
    pub step_seconds: Vec<f64>,
    /// The last step's time over the first's.
    pub last_over_first: Option<f64>,
    /// The slowest step's time over the fastest's.
    pub max_over_min: Option<f64>,
    /// Connections still open when released, and the ones the server closed.
    pub alive: u64,
    pub dropped: u64,
}

/// The step of the per-step times: `big` once there are two of them, else a tenth.
fn step_for(n: usize, big: usize) -> usize {
    if n >= 2 * big {
        big
    } else {
        (n / 10).max(1)
    }
}

/// Start the `hold` clients (`cmds`), let them open `step`-sized steps of
/// connections together, run `held` (given the clients' pids) while they
/// hold them, then release.
fn open_and_hold<T>(
    cmds: Vec<(String, Command)>,
    requested: usize,
    step: usize,
    held: impl FnOnce(&[u32]) -> Result<T>,
) -> Result<(Opening, T)> {
    let mut g = Group::default();
    for (name, cmd) in cmds {
        g.spawn(name, cmd)?;
    }
    let n = g.procs.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ready = 0;
    while ready < n {
        let l = g.next(deadline, "the clients to start")?;
        if l.json().is_some_and(|v| v["ready"] == true) {
            ready += 1;
        }
    }
    let (t0, t0_ns) = (Instant::now(), sys::monotonic_ns());
    for p in &mut g.procs {
        p.send("go")?;
    }
    // When the client says it reached a count (its clock is ours), else
    // when its line arrived here.
    let when = |v: &serde_json::Value, at: Instant| match v["t_ns"].as_u64() {
        Some(ns) => ns.saturating_sub(t0_ns) as f64 / 1e9,
        None => (at - t0).as_secs_f64(),
    };
    let mut o = Opening {
        requested,
        step,
        ..Opening::default()
    };
    let mut counts = vec![0u64; n];
    let mut fails = vec![0u64; n];
    let mut done = vec![false; n];
    let mut reached = Vec::new();
    // The clients give up on their own after 600 s.
    let deadline = t0 + Duration::from_secs(700);
    let mut said = t0;
    while done.iter().any(|d| !d) {
        if said.elapsed() >= Duration::from_secs(10) {
            said = Instant::now();
            eprintln!(
                "      {} open, {} failed after {:.0} s",
                counts.iter().sum::<u64>(),
                fails.iter().sum::<u64>(),
                t0.elapsed().as_secs_f64()
            );
        }
        let Some(l) = g.poll((Instant::now() + Duration::from_secs(1)).min(deadline))? else {
            if Instant::now() >= deadline {
                bail!("the connections did not open within 700 s");
            }
            continue;
        };
        let Some(v) = l.json() else { continue };
        let Some(k) = v["opened"].as_u64() else {
            continue;
        };
        counts[l.proc] = k;
        fails[l.proc] = v["failed"].as_u64().unwrap_or(0);
        let total: u64 = counts.iter().sum();
        while (reached.len() as u64 + 1) * step as u64 <= total {
            // Lines of different clients may arrive out of order.
            let last = reached.last().copied().unwrap_or(0.0);
            reached.push(when(&v, l.at).max(last));
        }
        if v["done"] == true {
            done[l.proc] = true;
            o.failed += v["failed"].as_u64().unwrap_or(0);
            for (k, c) in v["errors"].as_object().into_iter().flatten() {
                *o.errors.entry(k.clone()).or_default() += c.as_u64().unwrap_or(0);
            }
            if let Some(why) = v["gave_up"].as_str() {
                o.gave_up.push(format!("client #{}: {why}", l.proc));
            }
            o.seconds = when(&v, l.at);
        }
    }
    o.opened = counts.iter().sum();
    o.step_seconds = reached
        .iter()
        .scan(0.0, |prev, &t| {
            let d = t - *prev;
            *prev = t;
            Some(d)
        })
        .collect();
    if o.step_seconds.len() >= 2 {
        let s = &o.step_seconds;
        o.last_over_first = ratio(s.last().copied(), s.first().copied());
        let (lo, hi) = s
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
        o.max_over_min = ratio(Some(hi), Some(lo));
    }
    let pids: Vec<u32> = g.procs.iter().map(|p| p.pid()).collect();
    let t = held(&pids)?;
    for p in &mut g.procs {
        p.close_stdin();
    }
    for l in g.wait_all(
        Instant::now() + Duration::from_secs(120),
        "the clients to let go",
    )? {
        if let Some(v) = l.json().filter(|v| v["released"] == true) {
            o.alive += v["alive"].as_u64().unwrap_or(0);
            o.dropped += v["dropped"].as_u64().unwrap_or(0);
        }
    }
    Ok((o, t))
}

/// `hold` client commands for `count` connections over processes of at
/// most [`PER_PROC`] sockets; `wrap` turns scale-client arguments into a
/// command (in a namespace, or inside `ustack run`).
fn hold_cmds(
    count: usize,
    target: &str,
    sources: &[std::net::Ipv4Addr],
    window: usize,
    step: usize,
    wrap: impl Fn(&[String]) -> Command,
) -> Vec<(String, Command)> {
    let shares = split(count, count.div_ceil(PER_PROC));
    let procs = shares.len();
    let window = (window / procs).max(1);
    let report = (step / 20 / procs).max(1);
    let srcs: Vec<String> = sources.iter().map(|a| a.to_string()).collect();
    shares
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let mut a = args(&["scale-client", "hold", "--target", target]);
            a.extend(args(&[
                "--count",
                &n.to_string(),
                "--window",
                &window.to_string(),
                "--report-every",
                &report.to_string(),
                "--max-failures",
                &(n / 100 + 100).to_string(),
            ]));
            if !srcs.is_empty() {
                a.push("--sources".into());
                a.push(srcs.join(","));
            }
            (format!("hold client #{i}"), wrap(&a))
        })
        .collect()
}

fn sum_rss(pids: &[u32]) -> Result<u64> {
    pids.iter()
        .map(|&p| sys::rss_bytes(p).with_context(|| format!("cannot read the RSS of process {p}")))
        .sum()
}

fn sum_cpu(pids: &[u32]) -> Result<f64> {
    pids.iter()
        .map(|&p| {
            sys::cpu_time(p)
                .map(|d| d.as_secs_f64())
                .with_context(|| format!("cannot read the CPU time of process {p}"))
        })
        .sum()
}

// ------------------------------------------------------------ established

/// 1-byte request/response latency of one connection.
#[derive(Serialize, Debug, Clone)]
pub struct Rr {
    pub mean_us: f64,
    pub p99_us: f64,
    pub count: u64,
}

/// `ustack run-bench --rr-client` (one connection, one byte at a time) for 2 s.
fn rr(ctx: &Ctx, ns: &str, target: &str) -> Result<Rr> {
    let out = in_ns(
        ns,
        &ctx.exe.to_string_lossy(),
        &[
            "run-bench",
            "--rr-client",
            target,
            "--seconds",
            "2",
            "--msg-size",
            "1",
        ],
    )?;
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .with_context(|| format!("rr client printed '{}'", out.trim()))?;
    Ok(Rr {
        mean_us: v["avg_us"].as_f64().context("no avg_us")?,
        p99_us: v["p99_us"].as_f64().context("no p99_us")?,
        count: v["count"].as_u64().unwrap_or(0),
    })
}

#[derive(Serialize, Debug, Clone)]
pub struct EstablishedSide {
    pub opening: Opening,
    /// Server processes measured (kernel: SO_REUSEPORT processes).
    pub server_processes: usize,
    pub rss_before: u64,
    pub rss_after: u64,
    /// (after - before) / connections opened.
    pub rss_per_connection: Option<f64>,
    pub rr_idle_none: Option<Rr>,
    pub rr_idle_all: Option<Rr>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rr_errors: Vec<String>,
    /// RR mean with N idle / with none.
    pub rr_ratio: Option<f64>,
}

fn rr_or_note(r: Result<Rr>, what: &str, notes: &mut Vec<String>) -> Result<Option<Rr>> {
    check_interrupted()?;
    Ok(match r {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("    request/response {what} failed: {e:#}");
            notes.push(format!("{what}: {e:#}"));
            None
        }
    })
}

/// The measurement against one server: `pids` are its processes, `check`
/// fails when it died.
fn established_side(
    ctx: &Ctx,
    ns: &str,
    target: std::net::Ipv4Addr,
    sources: &[std::net::Ipv4Addr],
    n: usize,
    pids: &[u32],
    mut check: impl FnMut() -> Result<()>,
) -> Result<EstablishedSide> {
    let echo = format!("{target}:7");
    let mut notes = Vec::new();
    eprintln!("    request/response with no idle connection ...");
    let rr0 = rr_or_note(rr(ctx, ns, &echo), "with no idle connection", &mut notes)?;
    let rss_before = sum_rss(pids)?;
    let step = step_for(n, 10_000);
    eprintln!("    opening {n} connections ...");
    let cmds = hold_cmds(n, &echo, sources, 64, step, |a| ctx.in_ns(ns, a));
    let (opening, (rss_after, rr_n)) = open_and_hold(cmds, n, step, |_| {
        check()?;
        let rss = sum_rss(pids)?;
        eprintln!("    request/response with the connections idle ...");
        let r = rr_or_note(rr(ctx, ns, &echo), "with the connections idle", &mut notes)?;
        Ok((rss, r))
    })?;
    check()?;
    let rss_per_connection = (opening.opened > 0)
        .then(|| (rss_after as f64 - rss_before as f64) / opening.opened as f64);
    Ok(EstablishedSide {
        server_processes: pids.len(),
        rss_before,
        rss_after,
        rss_per_connection,
        rr_ratio: ratio(
            rr_n.as_ref().map(|r| r.mean_us),
            rr0.as_ref().map(|r| r.mean_us),
        ),
        rr_idle_none: rr0,
        rr_idle_all: rr_n,
        rr_errors: notes,
        opening,
    })
}

#[derive(Serialize, Debug, Clone)]
pub struct Established {
    pub connections: usize,
    /// How ustack serve was told its connection limit.
    pub max_connections: String,
    pub ustack: Option<EstablishedSide>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ustack_error: Option<String>,
    pub kernel: Option<EstablishedSide>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_error: Option<String>,
}

/// Today's `ustack serve` serves at most this many connections at once
/// (crates/cli/src/server.rs MAX_CONNECTIONS) unless told otherwise.
pub const SERVE_DEFAULT_MAX: usize = 1024;

/// The serve options for `connections` at once, and what was decided.
pub fn max_connections_args(ctx: &Ctx, connections: usize) -> Result<(Vec<String>, String)> {
    if connections <= SERVE_DEFAULT_MAX {
        return Ok((vec![], "not needed".into()));
    }
    if super::topo::serve_has_flag(ctx, "--max-connections")? {
        let v = connections.to_string();
        return Ok((
            args(&["--max-connections", &v]),
            format!("--max-connections {v}"),
        ));
    }
    let note = format!(
        "REFUSED: this ustack serve has no --max-connections, so it serves at most {SERVE_DEFAULT_MAX} \
         connections at once and closes the rest (see 'dropped')"
    );
    eprintln!("  note: {note}");
    Ok((vec![], note))
}

pub fn established(ctx: &Ctx, n: usize) -> Result<Established> {
    if n == 0 {
        bail!("--established must be at least 1");
    }
    let sources = n.div_ceil(super::topo::PER_SOURCE);
    let (extra, max_note) = max_connections_args(ctx, n + 100)?;
    let mut res = Established {
        connections: n,
        max_connections: max_note,
        ustack: None,
        ustack_error: None,
        kernel: None,
        kernel_error: None,
    };
    eprintln!("established connections, ustack serve ...");
    let u = UstackPeer::start(ctx, "e", &extra, sources).and_then(|mut u| {
        let pids = u.pids();
        let (ns, addr, srcs) = (u.client_ns.clone(), u.addr, u.sources.clone());
        established_side(ctx, &ns, addr, &srcs, n, &pids, || u.serve.check_failed())
    });
    (res.ustack, res.ustack_error) = outcome(u)?;
    eprintln!("established connections, kernel ...");
    let servers = (n + 1000).div_ceil(15_000);
    let k = KernelPeer::start(ctx, "e", servers, sources).and_then(|mut k| {
        let pids = k.pids();
        let (ns, addr, srcs) = (k.client_ns.clone(), k.addr, k.sources.clone());
        established_side(ctx, &ns, addr, &srcs, n, &pids, || k.servers.check_failed())
    });
    (res.kernel, res.kernel_error) = outcome(k)?;
    Ok(res)
}

// ------------------------------------------------------------ run flows

#[derive(Serialize, Debug, Clone)]
pub struct FlowsSide {
    pub opening: Opening,
    pub idle_seconds: f64,
    /// utime + stime of the `ustack run` process (the relay) over the idle
    /// window; none for the kernel (its work is not a process's).
    pub relay_cpu_seconds: Option<f64>,
    pub relay_rss: Option<u64>,
    /// The host-side echo server's CPU time over the idle window.
    pub server_cpu_seconds: f64,
}

#[derive(Serialize, Debug, Clone)]
pub struct Flows {
    pub flows: usize,
    /// Connections to one destination after which Linux's connect() slows
    /// down on the client side: half the ephemeral port range (it tries
    /// the even ports first and scans them all before an odd one).
    pub port_cliff: usize,
    pub ustack: Option<FlowsSide>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ustack_error: Option<String>,
    pub kernel: Option<FlowsSide>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_error: Option<String>,
}

/// Start kserve-epoll in the host's namespace on `bind`, any free port.
/// The host's epoll echo server, pinned to CPU `cpu`.
fn host_server(ctx: &Ctx, bind: &str, cpu: usize) -> Result<(Group, u16)> {
    let mut g = Group::default();
    let cmd = ctx.here(&args(&["kserve-epoll", "--bind", bind, "--echo-port", "0"]));
    g.spawn("host echo server", pinned(cpu, cmd))?;
    let l = g.next(
        Instant::now() + Duration::from_secs(20),
        "the host echo server",
    )?;
    let port = l
        .json()
        .and_then(|v| v["echo"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .with_context(|| format!("host echo server printed '{}'", l.text))?;
    Ok((g, port))
}

/// Open the flows, then measure CPU time over the idle window. With
/// `relay`, the client process is `ustack run`: the relay itself.
fn flows_side(
    n: usize,
    idle: Duration,
    cmds: Vec<(String, Command)>,
    server: &mut Group,
    relay: bool,
) -> Result<FlowsSide> {
    let step = step_for(n, 1000);
    let server_pids: Vec<u32> = server.procs.iter().map(|p| p.pid()).collect();
    let (opening, side) = open_and_hold(cmds, n, step, |clients| {
        server.check_failed()?;
        let relay = if relay {
            clients.first().copied()
        } else {
            None
        };
        eprintln!("    all open; idle for {:.0} s ...", idle.as_secs_f64());
        let r0 = relay.map(|p| sum_cpu(&[p])).transpose()?;
        let s0 = sum_cpu(&server_pids)?;
        let t0 = Instant::now();
        // A measurement window, not a wait for some state.
        while t0.elapsed() < idle {
            check_interrupted()?;
            std::thread::sleep(Duration::from_millis(50).min(idle.saturating_sub(t0.elapsed())));
        }
        let secs = t0.elapsed().as_secs_f64();
        let r1 = relay.map(|p| sum_cpu(&[p])).transpose()?;
        let s1 = sum_cpu(&server_pids)?;
        Ok(FlowsSide {
            opening: Opening::default(),
            idle_seconds: secs,
            relay_cpu_seconds: r0.zip(r1).map(|(a, b)| b - a),
            relay_rss: relay.map(sys::rss_bytes).transpose()?,
            server_cpu_seconds: s1 - s0,
        })
    })?;
    server.check_failed()?;
    Ok(FlowsSide { opening, ..side })
}

/// Half the smaller of the host's ephemeral port range and the default one
/// (new namespaces, the sandbox's among them, start with the default):
/// past that many connections to one destination, Linux's connect() has
/// used every even port and scans them all for each new one (measured here:
/// with a 4,000-port range, 2.8 ms per 250 connects up to 2,000, then
/// 24 ms). Both sides of the `run` measurement hit it.
fn port_cliff() -> usize {
    const DEFAULT: usize = 60999 - 32768 + 1;
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| {
            let mut it = t.split_whitespace().map(|v| v.parse::<usize>().ok());
            match (it.next().flatten(), it.next().flatten()) {
                (Some(lo), Some(hi)) if hi >= lo => Some(hi - lo + 1),
                _ => None,
            }
        })
        .unwrap_or(DEFAULT);
    host.min(DEFAULT) / 2
}

/// The slowest step's time over the fastest's among the steps that end at
/// or before `limit` connections (`None` with fewer than two such steps).
pub fn flatness_before(o: &Opening, limit: usize) -> Option<f64> {
    let n = (limit / o.step.max(1)).min(o.step_seconds.len());
    let s = o.step_seconds.get(..n)?;
    if s.len() < 2 {
        return None;
    }
    let (lo, hi) = s
        .iter()
        .fold((f64::MAX, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    ratio(Some(hi), Some(lo))
}

pub fn run_flows(ctx: &Ctx, n: usize, idle: Duration) -> Result<Flows> {
    if n == 0 || n > PER_PROC {
        bail!(
            "--run-flows must be 1..={PER_PROC}: the host server and the relay hold a descriptor per flow"
        );
    }
    let mut res = Flows {
        flows: n,
        port_cliff: port_cliff(),
        ustack: None,
        ustack_error: None,
        kernel: None,
        kernel_error: None,
    };
    let step = step_for(n, 1000);
    // Placement: the client on CPU 1, everything else (the relay, the host
    // server) on CPU 0, on both sides. Left to the scheduler, the relay and
    // the client share a CPU in some steps and not in others, and a connect
    // takes about 35 or 80 µs accordingly: the steps would differ by 2x for
    // reasons that have nothing to do with the flows held.
    eprintln!("ustack run flows: {n} from the sandbox to a server on the host's loopback ...");
    let u = host_server(ctx, "127.0.0.1", 0).and_then(|(mut server, port)| {
        // The relay's flow limit and new-flow rate limit (1000/s) are lifted:
        // this times the stack, not the policy.
        let flows = (n + 64).to_string();
        let wrap = |a: &[String]| {
            let mut v = args(&["run", "--max-flows", &flows, "--flow-rate", "1000000", "--"]);
            v.extend(args(&["taskset", "-c", "1"]));
            v.push(ctx.exe.to_string_lossy().into_owned());
            v.extend_from_slice(a);
            pinned(0, ctx.here(&v))
        };
        let cmds = hold_cmds(n, &format!("10.0.2.2:{port}"), &[], 1, step, wrap);
        flows_side(n, idle, cmds, &mut server, true)
    });
    (res.ustack, res.ustack_error) = outcome(u)?;
    eprintln!("kernel flows: {n} from a namespace to a server on the host side of a veth ...");
    let k = HostVeth::start(ctx).and_then(|veth| {
        let (mut server, port) = host_server(ctx, &veth.host_addr.to_string(), 0)?;
        let target = format!("{}:{port}", veth.host_addr);
        let cmds = hold_cmds(n, &target, &[], 1, step, |a| {
            pinned(1, ctx.in_ns(&veth.ns, a))
        });
        let r = flows_side(n, idle, cmds, &mut server, false);
        drop(server);
        drop(veth);
        r
    });
    (res.kernel, res.kernel_error) = outcome(k)?;
    Ok(res)
}
