//! `ustack run-bench`: user-mode networking for a sandboxed command,
//! ustack against `pasta` and `slirp4netns`, on the same jobs in one run:
//!
//! * TCP sandbox → host: `iperf3 -c GATEWAY` inside, `iperf3 -s` on the
//!   host's 127.0.0.1 (each tool maps its gateway address to the host's
//!   loopback);
//! * TCP host → sandbox: the same with `-R` (the host-side server sends;
//!   no port forwarding involved);
//! * TCP request/response latency: a ping-pong client inside (this binary,
//!   `run-bench --rr-client`, the same for all three) against an echo
//!   server on the host's loopback, N-byte messages, one at a time.
//!
//! With `--capture`, ustack's two iperf3 jobs are measured again in the
//! same run with a live capture of every whole frame running
//! (`ustack capture -w /dev/null`), next to the ratio to the same run
//! without it.
//!
//! Each at every guest MTU asked for (`--mtus`, default 65520 and 1500: a
//! container or VM with a 1500-byte MTU must not pay full price), and next
//! to the kernel itself as the no-isolation ceiling: the same commands in a
//! namespace joined to the host by a veth pair (servers on the host end).
//!
//! Needs root (`ip netns`), `iperf3`, `pasta` and `slirp4netns`. Every
//! namespace and process it creates is removed on exit or error.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

/// `ustack run-bench [--json] [--seconds N]`
#[derive(clap::Args, Debug, Clone)]
pub struct RunBenchArgs {
    /// Print one JSON object per row (JSON Lines) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seconds per measurement (each iperf3 run and the latency run).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Message size of the request/response test, bytes.
    #[arg(long, default_value_t = 14)]
    pub msg_size: usize,
    /// Which tools to measure (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ustack,pasta,slirp4netns,kernel"
    )]
    pub tools: Vec<Tool>,
    /// Guest MTUs to measure each tool at (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "65520,1500",
          value_parser = clap::value_parser!(u32).range(1280..=65520))]
    pub mtus: Vec<u32>,
    /// Measure every tool this many times, interleaved (run 1 of each
    /// tool, then run 2, ...), and report the median of each figure, plus
    /// the ratio of each run to the other tools' run in the same round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Extra option for `ustack run` (repeatable), e.g.
    /// `--ustack-arg=--busy-poll=50` or `--ustack-arg=--no-offload`.
    #[arg(long = "ustack-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub ustack_args: Vec<String>,
    /// Also measure ustack's iperf3 jobs with a live capture of every whole
    /// frame running (`ustack capture -w /dev/null`), and the ratio to the
    /// same run without.
    #[arg(long)]
    pub capture: bool,
    /// (internal) Run the ping-pong client against IP:PORT and print JSON.
    #[arg(long, hide = true, value_name = "IP:PORT")]
    pub rr_client: Option<SocketAddrV4>,
}

/// A user-mode networking tool under test (and the kernel as the ceiling).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Ustack,
    Pasta,
    #[value(name = "slirp4netns")]
    Slirp4netns,
    /// No user-mode networking: a veth pair to the host (no isolation).
    Kernel,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Ustack => "ustack",
            Tool::Pasta => "pasta",
            Tool::Slirp4netns => "slirp4netns",
            Tool::Kernel => "kernel",
        }
    }
}

/// The host-side servers the sandboxed clients talk to.
struct Servers {
    iperf_port: u16,
    rr_port: u16,
    _iperf: Reaped,
    _rr: Stopper,
}

impl Servers {
    /// iperf3 and the echo server, both bound to `addr`.
    fn start(addr: Ipv4Addr, msg_size: usize) -> anyhow::Result<Servers> {
        let iperf_port = free_port()?;
        let iperf = Reaped(
            Command::new("iperf3")
                .args(["-s", "-B", &addr.to_string(), "-p", &iperf_port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot start iperf3 -s (is iperf3 installed?)")?,
        );
        wait_listening_on(addr, iperf_port)?;
        let (rr_port, rr) = rr_server(addr, msg_size)?;
        Ok(Servers {
            iperf_port,
            rr_port,
            _iperf: iperf,
            _rr: rr,
        })
    }
}

/// Entry point of `ustack run-bench`.
pub fn run(args: RunBenchArgs) -> anyhow::Result<i32> {
    if let Some(server) = args.rr_client {
        return rr_client(server, args.seconds, args.msg_size);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("run-bench needs root (it creates network namespaces for pasta and slirp4netns)");
    }
    let exe = std::env::current_exe().context("cannot find the ustack binary")?;
    let loopback = Servers::start(Ipv4Addr::LOCALHOST, args.msg_size)?;

    let mut all = true;
    for (i, &mtu) in args.mtus.iter().enumerate() {
        let mut results: Vec<(Tool, Result<Vec<Figures>, String>)> =
            args.tools.iter().map(|&t| (t, Ok(Vec::new()))).collect();
        for run in 1..=args.runs {
            for (tool, r) in results.iter_mut() {
                let Ok(runs) = r else { continue };
                if !args.json {
                    eprintln!(
                        "measuring {} at MTU {mtu} (run {run}/{}) ...",
                        tool.name(),
                        args.runs
                    );
                }
                match measure(*tool, mtu, &exe, &args, &loopback) {
                    Ok(f) => runs.push(f),
                    Err(e) => {
                        eprintln!("{}: {e:#}", tool.name());
                        *r = Err(format!("{e:#}"));
                    }
                }
            }
        }
        if i > 0 && !args.json {
            println!();
        }
        print_results(&args, mtu, &results);
        all &= results.iter().all(|(_, r)| r.is_ok());
    }
    Ok(if all { 0 } else { 1 })
}

/// What one tool achieved.
#[derive(Debug, Clone, Copy)]
struct Figures {
    up_gbps: f64,
    down_gbps: f64,
    rr_avg_us: f64,
    rr_p99_us: f64,
    /// Relay CPU seconds per GB moved (ustack only).
    up_cpu_per_gb: Option<f64>,
    down_cpu_per_gb: Option<f64>,
    /// With a capture running (`--capture`, ustack only).
    up_capture: Option<Captured>,
    down_capture: Option<Captured>,
}

/// An iperf3 job measured with a live capture of every frame running.
#[derive(Debug, Clone, Copy)]
struct Captured {
    gbps: f64,
    /// What the capture wrote, and what the stack dropped for it.
    frames: u64,
    dropped: u64,
    /// CPU seconds of the relay and the capture's reader per GB moved.
    cpu_per_gb: Option<f64>,
}

/// Runs commands inside one tool's sandbox.
enum Sandbox {
    /// `ustack run --mtu M -- CMD` per command.
    Ustack {
        exe: PathBuf,
        mtu: u32,
        extra: Vec<String>,
    },
    /// `ip netns exec NAME CMD` in a namespace served by a running tool.
    /// (The tool is stopped before its namespace is deleted: fields drop in order.)
    Netns {
        server: Reaped,
        ns: Netns,
        gateway: Ipv4Addr,
    },
    /// `ip netns exec NAME CMD` in a namespace joined to the host by a veth
    /// pair: the kernel with no user-mode networking. Its servers listen
    /// on the host end (the host's loopback is not reachable over veth).
    Kernel {
        ns: Netns,
        servers: Servers,
        host_end: Ipv4Addr,
    },
}

impl Sandbox {
    fn start(
        tool: Tool,
        mtu: u32,
        exe: &std::path::Path,
        msg_size: usize,
        extra: &[String],
    ) -> anyhow::Result<Sandbox> {
        let pid = std::process::id();
        let mtu_s = mtu.to_string();
        match tool {
            Tool::Ustack => Ok(Sandbox::Ustack {
                exe: exe.to_path_buf(),
                mtu,
                extra: extra.to_vec(),
            }),
            Tool::Kernel => {
                let ns = Netns::add(format!("ustk-bench-kern-{pid}"))?;
                let (host, guest) = (format!("ukh{pid}"), format!("ukg{pid}"));
                let host_end = Ipv4Addr::new(10, 231, 0, 1);
                ip(&[
                    "link", "add", &host, "mtu", &mtu_s, "type", "veth", "peer", "name", &guest,
                ])?;
                // Deleting the namespace takes the peer and so the pair with it.
                ip(&["link", "set", &guest, "netns", &ns.0])?;
                ip(&["addr", "add", "10.231.0.1/24", "dev", &host])?;
                ip(&["link", "set", &host, "up"])?;
                ip(&["-n", &ns.0, "link", "set", "lo", "up"])?;
                ip(&["-n", &ns.0, "link", "set", &guest, "mtu", &mtu_s])?;
                ip(&["-n", &ns.0, "addr", "add", "10.231.0.2/24", "dev", &guest])?;
                ip(&["-n", &ns.0, "link", "set", &guest, "up"])?;
                ip(&["-n", &ns.0, "route", "add", "default", "via", "10.231.0.1"])?;
                let servers = Servers::start(host_end, msg_size)?;
                Ok(Sandbox::Kernel {
                    ns,
                    servers,
                    host_end,
                })
            }
            Tool::Pasta => {
                let ns = Netns::add(format!("ustk-bench-pasta-{pid}"))?;
                let server = Reaped(
                    Command::new("pasta")
                        .args(["--config-net", "--mtu", &mtu_s, "--netns", &ns.path()])
                        .args(["-f", "--runas", "0"])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("cannot start pasta (is it installed?)")?,
                );
                let gateway = wait_default_route(&ns.0)?;
                Ok(Sandbox::Netns {
                    server,
                    ns,
                    gateway,
                })
            }
            Tool::Slirp4netns => {
                let ns = Netns::add(format!("ustk-bench-slirp-{pid}"))?;
                let server = Reaped(
                    Command::new("slirp4netns")
                        .args([
                            "--configure",
                            "--mtu",
                            &mtu_s,
                            "--netns-type=path",
                            &ns.path(),
                        ])
                        .arg("tap0")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("cannot start slirp4netns (is it installed?)")?,
                );
                let gateway = wait_default_route(&ns.0)?;
                Ok(Sandbox::Netns {
                    server,
                    ns,
                    gateway,
                })
            }
        }
    }

    /// The address inside that reaches the host-side servers (the host's
    /// 127.0.0.1 for the user-mode tools).
    fn gateway(&self) -> Ipv4Addr {
        match self {
            Sandbox::Ustack { .. } => Ipv4Addr::new(10, 0, 2, 2),
            Sandbox::Netns { gateway, .. } => *gateway,
            Sandbox::Kernel { host_end, .. } => *host_end,
        }
    }

    /// Run `cmd` inside, bounded to `limit`; its stdout (and CPU time).
    fn output(&mut self, cmd: &[String], limit: Duration) -> anyhow::Result<Finished> {
        let mut c = match self {
            Sandbox::Ustack { exe, mtu, extra } => {
                let mut c = Command::new(exe);
                c.args(["run", "--mtu", &mtu.to_string()])
                    .args(extra.iter())
                    .arg("--")
                    .args(cmd);
                c
            }
            Sandbox::Kernel { ns, .. } => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.0]).args(cmd);
                c
            }
            Sandbox::Netns { server, ns, .. } => {
                if let Ok(Some(st)) = server.0.try_wait() {
                    bail!("the tool serving the namespace exited: {st}");
                }
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.0]).args(cmd);
                c
            }
        };
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {cmd:?}"))?;
        let mut child = Reaped(child);
        finish(&mut child, cmd, limit, None)
    }
}

fn measure(
    tool: Tool,
    mtu: u32,
    exe: &std::path::Path,
    args: &RunBenchArgs,
    loopback: &Servers,
) -> anyhow::Result<Figures> {
    let mut sb = Sandbox::start(tool, mtu, exe, args.msg_size, &args.ustack_args)?;
    let (iperf_port, rr_port) = match &sb {
        Sandbox::Kernel { servers, .. } => (servers.iperf_port, servers.rr_port),
        _ => (loopback.iperf_port, loopback.rr_port),
    };
    let gw = sb.gateway().to_string();
    let secs = args.seconds.max(1);
    let limit = Duration::from_secs(secs + 30);
    let iperf = |reverse: bool| -> Vec<String> {
        let mut v: Vec<String> = [
            "iperf3",
            "-c",
            &gw,
            "-p",
            &iperf_port.to_string(),
            "-t",
            &secs.to_string(),
            "-J",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if reverse {
            v.push("-R".into());
        }
        v
    };
    let capture = match (&sb, args.capture) {
        (Sandbox::Ustack { exe, mtu, extra }, true) => Some((exe.clone(), *mtu, extra.clone())),
        _ => None,
    };
    let captured = |reverse: bool| -> anyhow::Result<Option<Captured>> {
        match &capture {
            Some((exe, mtu, extra)) => {
                with_capture(exe, *mtu, extra, &iperf(reverse), limit).map(Some)
            }
            None => Ok(None),
        }
    };
    let ustack = matches!(sb, Sandbox::Ustack { .. });
    let up = sb.output(&iperf(false), limit)?;
    let up_capture = captured(false)?;
    let down = sb.output(&iperf(true), limit)?;
    let down_capture = captured(true)?;
    let rr_cmd: Vec<String> = vec![
        exe.to_string_lossy().into_owned(),
        "run-bench".into(),
        "--rr-client".into(),
        format!("{gw}:{rr_port}"),
        "--seconds".into(),
        secs.to_string(),
        "--msg-size".into(),
        args.msg_size.to_string(),
    ];
    let rr: serde_json::Value = serde_json::from_str(sb.output(&rr_cmd, limit)?.out.trim())
        .context("ping-pong client output")?;
    let num = |k: &str| {
        rr[k]
            .as_f64()
            .ok_or_else(|| anyhow!("ping-pong client printed no {k}"))
    };
    Ok(Figures {
        up_gbps: iperf_gbps(&up.out)?,
        down_gbps: iperf_gbps(&down.out)?,
        up_cpu_per_gb: cpu_per_gb(up.cpu, &up.out).filter(|_| ustack),
        down_cpu_per_gb: cpu_per_gb(down.cpu, &down.out).filter(|_| ustack),
        rr_avg_us: num("avg_us")?,
        rr_p99_us: num("p99_us")?,
        up_capture,
        down_capture,
    })
}

/// Run `cmd` (an iperf3 client) in `ustack run` with `ustack capture -w
/// /dev/null` of every whole frame running from before it starts: the
/// command waits on a FIFO the harness opens once the capture is on.
fn with_capture(
    exe: &std::path::Path,
    mtu: u32,
    extra: &[String],
    cmd: &[String],
    limit: Duration,
) -> anyhow::Result<Captured> {
    use std::io::BufRead;
    use std::os::unix::ffi::OsStrExt;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let name = format!("run-bench-{pid}-{n}");
    let dir = TempDir(std::env::temp_dir().join(format!("ustack-{name}")));
    std::fs::create_dir_all(&dir.0).context("temp dir")?;
    let fifo = dir.0.join("go");
    let c_fifo = std::ffi::CString::new(fifo.as_os_str().as_bytes())?;
    // SAFETY: mkfifo with a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) } != 0 {
        bail!(
            "mkfifo {}: {}",
            fifo.display(),
            std::io::Error::last_os_error()
        );
    }
    let mut run = Reaped(
        Command::new(exe)
            .args(["run", "--name", &name, "--mtu", &mtu.to_string()])
            .args(extra)
            .args(["--", "sh", "-c", "read -r _ < \"$0\" && exec \"$@\""])
            .arg(&fifo)
            .args(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start ustack run")?,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ustack_ctl::list().contains(&name) {
        if let Some(st) = run.0.try_wait()? {
            bail!("ustack run exited before its control endpoint appeared: {st}");
        }
        if Instant::now() >= deadline {
            bail!("ustack run's control endpoint {name:?} did not appear");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let mut cap = Reaped(
        Command::new(exe)
            .args(["capture", "--stack", &name, "-w", "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start ustack capture")?,
    );
    let mut cap_err = std::io::BufReader::new(
        cap.0
            .stderr
            .take()
            .ok_or_else(|| anyhow!("capture stderr"))?,
    );
    let mut line = String::new();
    cap_err.read_line(&mut line)?;
    if !line.contains("listening") {
        bail!("ustack capture: {}", line.trim());
    }
    // The command starts once the capture is on.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .and_then(|mut f| f.write_all(b"go\n"))
        .context("cannot start the command")?;
    let f = finish(&mut run, cmd, limit, Some(cap.0.id()))?;
    // The capture ends with the stack; its last line tells what it saw.
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut cap_err, &mut rest);
    let _ = cap.0.wait();
    let tally = rest
        .lines()
        .find_map(|l| {
            let (f, d) = l.split_once(" frames captured, ")?;
            let d = d.split(' ').next()?;
            Some((f.trim().parse().ok()?, d.parse().ok()?))
        })
        .ok_or_else(|| anyhow!("ustack capture printed no summary: {}", rest.trim()))?;
    Ok(Captured {
        gbps: iperf_gbps(&f.out)?,
        frames: tally.0,
        dropped: tally.1,
        cpu_per_gb: cpu_per_gb(f.cpu + f.also_cpu, &f.out),
    })
}

/// A directory removed (with what is in it) when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a finished command printed, and the CPU time its process (all its
/// threads, not its children: for `ustack run`, the relay) and the process
/// `also` (if any) had used when last looked at, just before they ended.
struct Finished {
    out: String,
    cpu: Duration,
    also_cpu: Duration,
}

/// CPU time used so far by the threads of process `pid` (from
/// /proc/PID/task/*/schedstat, nanoseconds on a CPU).
fn cpu_time(pid: u32) -> Option<Duration> {
    let mut ns = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        ns += s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(Duration::from_nanos(ns))
}

/// Wait (at most `limit`) for `child` running `cmd` to succeed; its stdout
/// and CPU time (sampled every 20 ms while it runs), and that of `also`.
fn finish(
    child: &mut Reaped,
    cmd: &[String],
    limit: Duration,
    also: Option<u32>,
) -> anyhow::Result<Finished> {
    let deadline = Instant::now() + limit;
    let pid = child.0.id();
    let (mut cpu, mut also_cpu) = (Duration::ZERO, Duration::ZERO);
    let status = loop {
        cpu = cpu_time(pid).unwrap_or(cpu).max(cpu);
        if let Some(a) = also {
            also_cpu = cpu_time(a).unwrap_or(also_cpu).max(also_cpu);
        }
        if let Some(st) = child.0.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            bail!("{cmd:?} did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.0.stdout.take() {
        o.read_to_string(&mut out)?;
    }
    if let Some(mut e) = child.0.stderr.take() {
        e.read_to_string(&mut err)?;
    }
    if !status.success() {
        bail!("{cmd:?}: {status}: {}", err.trim());
    }
    Ok(Finished { out, cpu, also_cpu })
}

/// Relay CPU seconds per GB that iperf3 (JSON `json`) moved.
fn cpu_per_gb(cpu: Duration, json: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let bytes = v["end"]["sum_received"]["bytes"].as_f64()?;
    (bytes > 0.0).then(|| cpu.as_secs_f64() / (bytes / 1e9))
}

fn iperf_gbps(json: &str) -> anyhow::Result<f64> {
    let v: serde_json::Value = serde_json::from_str(json).context("iperf3 -J output")?;
    if let Some(e) = v["error"].as_str() {
        bail!("iperf3: {e}");
    }
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e9)
        .ok_or_else(|| anyhow!("iperf3 -J output has no end.sum_received"))
}

struct Row {
    key: &'static str,
    label: &'static str,
    unit: &'static str,
    higher_is_better: bool,
    get: fn(&Figures) -> Option<f64>,
}

const ROWS: &[Row] = &[
    Row {
        key: "tcp_sandbox_to_host",
        label: "TCP sandbox -> host (iperf3)",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| Some(f.up_gbps),
    },
    Row {
        key: "tcp_host_to_sandbox",
        label: "TCP host -> sandbox (iperf3 -R)",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| Some(f.down_gbps),
    },
    Row {
        key: "tcp_rr_avg",
        label: "TCP request/response RTT, avg",
        unit: "us",
        higher_is_better: false,
        get: |f| Some(f.rr_avg_us),
    },
    Row {
        key: "tcp_rr_p99",
        label: "TCP request/response RTT, p99",
        unit: "us",
        higher_is_better: false,
        get: |f| Some(f.rr_p99_us),
    },
];

/// `--capture`'s rows (ustack only): each iperf3 job with a capture of
/// every whole frame running, its ratio to the same run without, the ratio
/// of the relay's CPU time per byte without to with (the capture's reader
/// counted in: on a machine shared with other work, where throughput swings
/// with the load, what a relay-bound transfer would lose), and the share of
/// frames the stack dropped for the reader.
const CAPTURE_ROWS: &[Row] = &[
    Row {
        key: "tcp_sandbox_to_host_capture",
        label: "TCP sandbox -> host, capture on",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| f.up_capture.map(|c| c.gbps),
    },
    Row {
        key: "tcp_sandbox_to_host_capture_ratio",
        label: "  capture on / off (same run)",
        unit: "x",
        higher_is_better: true,
        get: |f| f.up_capture.map(|c| c.gbps / f.up_gbps),
    },
    Row {
        key: "tcp_sandbox_to_host_capture_cpu_ratio",
        label: "  relay CPU per byte, off / on",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.up_cpu_per_gb? / f.up_capture?.cpu_per_gb?),
    },
    Row {
        key: "tcp_sandbox_to_host_capture_dropped",
        label: "  frames the capture lost",
        unit: "%",
        higher_is_better: false,
        get: |f| f.up_capture.map(Captured::dropped_pct),
    },
    Row {
        key: "tcp_host_to_sandbox_capture",
        label: "TCP host -> sandbox, capture on",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| f.down_capture.map(|c| c.gbps),
    },
    Row {
        key: "tcp_host_to_sandbox_capture_ratio",
        label: "  capture on / off (same run)",
        unit: "x",
        higher_is_better: true,
        get: |f| f.down_capture.map(|c| c.gbps / f.down_gbps),
    },
    Row {
        key: "tcp_host_to_sandbox_capture_cpu_ratio",
        label: "  relay CPU per byte, off / on",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.down_cpu_per_gb? / f.down_capture?.cpu_per_gb?),
    },
    Row {
        key: "tcp_host_to_sandbox_capture_dropped",
        label: "  frames the capture lost",
        unit: "%",
        higher_is_better: false,
        get: |f| f.down_capture.map(Captured::dropped_pct),
    },
];

impl Captured {
    fn dropped_pct(self) -> f64 {
        let all = self.frames + self.dropped;
        if all == 0 {
            0.0
        } else {
            100.0 * self.dropped as f64 / all as f64
        }
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn print_results(args: &RunBenchArgs, mtu: u32, results: &[(Tool, Result<Vec<Figures>, String>)]) {
    let runs = |tool: Tool| -> Option<&Vec<Figures>> {
        results
            .iter()
            .find(|(t, _)| *t == tool)
            .and_then(|(_, r)| r.as_ref().ok())
    };
    let value = |tool: Tool, row: &Row| -> Option<f64> {
        median(runs(tool)?.iter().filter_map(row.get).collect())
    };
    let rows: Vec<&Row> = ROWS
        .iter()
        .chain(if args.capture { CAPTURE_ROWS } else { &[] })
        .collect();
    // Ratio of ustack to `other` in each round.
    let per_run = |row: &Row, other: Tool| -> Vec<f64> {
        match (runs(Tool::Ustack), runs(other)) {
            (Some(u), Some(o)) => u
                .iter()
                .zip(o)
                .filter_map(|(u, o)| match ((row.get)(u), (row.get)(o)) {
                    (Some(u), Some(o)) if o > 0.0 => Some(u / o),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let ratio = |row: &Row, other: Tool| -> Option<f64> {
        let u = value(Tool::Ustack, row)?;
        let o = value(other, row)?;
        (o > 0.0).then_some(u / o)
    };
    if args.json {
        for row in &rows {
            let mut m = serde_json::Map::new();
            m.insert("metric".into(), row.key.into());
            m.insert("mtu".into(), mtu.into());
            m.insert("unit".into(), row.unit.into());
            let better = if row.higher_is_better {
                "higher"
            } else {
                "lower"
            };
            m.insert("better".into(), better.into());
            m.insert("msg_size".into(), args.msg_size.into());
            m.insert("seconds".into(), args.seconds.into());
            m.insert("runs".into(), args.runs.into());
            for (tool, _) in results {
                let v = value(*tool, row).map_or(serde_json::Value::Null, |v| v.into());
                m.insert(tool.name().into(), v);
                if args.runs > 1 {
                    let all: Vec<f64> = runs(*tool)
                        .map(|r| r.iter().filter_map(row.get).collect())
                        .unwrap_or_default();
                    m.insert(format!("{}_runs", tool.name()), all.into());
                }
            }
            for other in [Tool::Pasta, Tool::Slirp4netns, Tool::Kernel] {
                let v = ratio(row, other).map_or(serde_json::Value::Null, |v| v.into());
                m.insert(format!("ustack_over_{}", other.name()), v);
            }
            println!("{}", serde_json::Value::Object(m));
        }
        return;
    }
    let fmt = |v: Option<f64>, unit: &str| match v {
        Some(v) if unit == "us" || unit == "%" => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
        None => "n/a".to_string(),
    };
    println!("guest MTU {mtu}");
    println!(
        "{:<34} {:>7} {:>9} {:>9} {:>11} {:>9} {:>13} {:>18} {:>14}",
        "job",
        "unit",
        "ustack",
        "pasta",
        "slirp4netns",
        "kernel",
        "ustack/pasta",
        "ustack/slirp4netns",
        "ustack/kernel"
    );
    for row in &rows {
        println!(
            "{:<34} {:>7} {:>9} {:>9} {:>11} {:>9} {:>13} {:>18} {:>14}",
            row.label,
            row.unit,
            fmt(value(Tool::Ustack, row), row.unit),
            fmt(value(Tool::Pasta, row), row.unit),
            fmt(value(Tool::Slirp4netns, row), row.unit),
            fmt(value(Tool::Kernel, row), row.unit),
            fmt(ratio(row, Tool::Pasta), ""),
            fmt(ratio(row, Tool::Slirp4netns), ""),
            fmt(ratio(row, Tool::Kernel), ""),
        );
    }
    if args.runs > 1 {
        for other in [Tool::Pasta, Tool::Slirp4netns, Tool::Kernel] {
            if runs(other).is_none() || runs(Tool::Ustack).is_none() {
                continue;
            }
            println!("ustack/{} in each run:", other.name());
            for row in ROWS {
                let r: Vec<String> = per_run(row, other)
                    .iter()
                    .map(|v| format!("{v:.2}"))
                    .collect();
                println!("  {:<32} {}", row.label, r.join(", "));
            }
        }
    }
    if args.capture && args.runs > 1 {
        if let Some(u) = runs(Tool::Ustack) {
            println!("ustack with a capture running against without, in each run:");
            for row in CAPTURE_ROWS.iter().filter(|r| r.unit == "x") {
                let r: Vec<String> = u
                    .iter()
                    .filter_map(row.get)
                    .map(|v| format!("{v:.2}"))
                    .collect();
                println!("  {:<40} {}", row.key, r.join(", "));
            }
        }
    }
    println!(
        "(throughput: ratio > 1 = ustack faster; latency: ratio < 1 = ustack faster; \
         {} s per run, {}-byte messages; {}; kernel = a veth pair to the host, no isolation)",
        args.seconds,
        args.msg_size,
        if args.runs > 1 {
            format!("median of {} interleaved runs", args.runs)
        } else {
            "one run".to_string()
        }
    );
}

// ------------------------------------------------------------ ping-pong

/// The client inside the sandbox: one connection, one message in flight,
/// for `seconds`; prints `{"count","avg_us","p50_us","p99_us"}`.
fn rr_client(server: SocketAddrV4, seconds: u64, size: usize) -> anyhow::Result<i32> {
    let size = size.clamp(1, 65536);
    let mut s = TcpStream::connect_timeout(&server.into(), Duration::from_secs(10))
        .with_context(|| format!("connect {server}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let msg = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    // Warm up (ARP, windows, caches).
    for _ in 0..200 {
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
    }
    let mut samples: Vec<u32> = Vec::with_capacity(1 << 16);
    let end = Instant::now() + Duration::from_secs(seconds.max(1));
    while Instant::now() < end && samples.len() < 10_000_000 {
        let t = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
        let ns = t.elapsed().as_nanos();
        samples.push(u32::try_from(ns).unwrap_or(u32::MAX));
    }
    if back != msg {
        bail!("echo differs");
    }
    if samples.is_empty() {
        bail!("no round trips");
    }
    let total: u64 = samples.iter().map(|&n| u64::from(n)).sum();
    let avg_us = total as f64 / samples.len() as f64 / 1000.0;
    samples.sort_unstable();
    let pct = |p: usize| -> f64 {
        let i = (samples.len() * p / 100).min(samples.len() - 1);
        samples
            .get(i)
            .copied()
            .map_or(0.0, |n| f64::from(n) / 1000.0)
    };
    println!(
        "{{\"count\":{},\"avg_us\":{avg_us:.3},\"p50_us\":{:.3},\"p99_us\":{:.3}}}",
        samples.len(),
        pct(50),
        pct(99)
    );
    Ok(0)
}

/// Echo server on 127.0.0.1 for the ping-pong client: messages of `size`
/// bytes, one thread per connection. Stops when the guard is dropped.
fn rr_server(addr: Ipv4Addr, size: usize) -> anyhow::Result<(u16, Stopper)> {
    let size = size.clamp(1, 65536);
    let l = TcpListener::bind(SocketAddrV4::new(addr, 0)).context("bind the echo server")?;
    l.set_nonblocking(true)?;
    let port = l.local_addr()?.port();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let join = thread::spawn(move || {
        while !s2.load(Ordering::SeqCst) {
            let Ok((mut c, _)) = l.accept() else {
                thread::sleep(Duration::from_millis(10));
                continue;
            };
            let s3 = s2.clone();
            thread::spawn(move || {
                let _ = c.set_nonblocking(false);
                let _ = c.set_nodelay(true);
                let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = vec![0u8; size];
                while !s3.load(Ordering::SeqCst) {
                    match c.read_exact(&mut buf) {
                        Ok(()) => {
                            if c.write_all(&buf).is_err() {
                                return;
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => return,
                    }
                }
            });
        }
    });
    Ok((
        port,
        Stopper {
            stop,
            join: Some(join),
        },
    ))
}

// ------------------------------------------------------------ helpers

/// Stops a helper thread when dropped.
struct Stopper {
    stop: Arc<AtomicBool>,
    join: Option<thread::JoinHandle<()>>,
}

impl Drop for Stopper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// A child process killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A network namespace made with `ip netns add`, deleted when dropped.
struct Netns(String);

impl Netns {
    fn add(name: String) -> anyhow::Result<Netns> {
        let st = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .context("cannot run ip")?;
        if !st.success() {
            bail!("ip netns add {name} failed");
        }
        Ok(Netns(name))
    }
    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

/// Wait (10 s at most) until the namespace has a default route; its gateway.
fn wait_default_route(ns: &str) -> anyhow::Result<Ipv4Addr> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let out = Command::new("ip")
            .args(["-n", ns, "-4", "route", "show", "default"])
            .output()
            .context("cannot run ip")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let gw = text
            .split_whitespace()
            .skip_while(|w| *w != "via")
            .nth(1)
            .and_then(|a| a.parse().ok());
        if let Some(gw) = gw {
            return Ok(gw);
        }
        thread::sleep(Duration::from_millis(50));
    }
    bail!("namespace {ns} got no default route within 10 s")
}

fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Wait (10 s at most) until something listens on `addr`:`port` (from
/// `/proc/net/tcp`, where an IPv4 address is written as the hex of its
/// in-memory (network order) bytes read as a native integer).
fn wait_listening_on(addr: Ipv4Addr, port: u16) -> anyhow::Result<()> {
    let hex = u32::from_ne_bytes(addr.octets());
    let needle = format!("{hex:08X}:{port:04X} 00000000:0000 0A");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| t.contains(&needle)) {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(20));
    }
    bail!("iperf3 -s is not listening on {addr}:{port} after 10 s")
}

/// Run ip(8); its stderr becomes the error.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run ip(8) (install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf_json_parsing() {
        let ok = r#"{"end":{"sum_received":{"bits_per_second":2.5e9,"bytes":1}}}"#;
        assert!((iperf_gbps(ok).unwrap_or(0.0) - 2.5).abs() < 1e-9);
        assert!(iperf_gbps(r#"{"error":"unable to connect"}"#).is_err());
        assert!(iperf_gbps("not json").is_err());
        assert!(iperf_gbps(r#"{"end":{}}"#).is_err());
    }

    #[test]
    fn ping_pong_client_against_the_echo_server() {
        let (port, _srv) = rr_server(Ipv4Addr::LOCALHOST, 14).unwrap_or_else(|e| panic!("{e}"));
        let r = rr_client(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), 1, 14);
        assert_eq!(r.ok(), Some(0));
    }
}
