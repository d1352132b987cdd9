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
//! Each job over IPv4 and over IPv6 (`--family 4|6|both`, default both):
//! over IPv6 the servers listen on the host's `::1`, which ustack's and
//! slirp4netns's gateway fd00::2 and pasta's copy of the host's IPv6
//! default gateway lead to (slirp4netns with its experimental
//! `--enable-ipv6`); with both, each tool's IPv6 figure over its IPv4 one
//! in the same run.
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
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
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
    /// Also measure ustack's iperf3 jobs with the control endpoint
    /// disabled (`ustack run --no-control`), and the ratio of the usual run
    /// (control endpoint registered, idle) to that.
    #[arg(long)]
    pub control_off: bool,
    /// IP versions to measure: 4, 6 or both (both: each job over IPv4 and
    /// then over IPv6 in the same sandbox, and the ratio IPv6 / IPv4 of
    /// each tool in the same run).
    #[arg(long, value_enum, default_value = "both")]
    pub family: Family,
    /// (internal) Run the ping-pong client against IP:PORT and print JSON.
    #[arg(long, hide = true, value_name = "IP:PORT")]
    pub rr_client: Option<SocketAddr>,
}

/// Which IP versions `run-bench` measures.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    #[value(name = "4")]
    V4,
    #[value(name = "6")]
    V6,
    Both,
}

impl Family {
    fn v4(self) -> bool {
        self != Family::V6
    }
    fn v6(self) -> bool {
        self != Family::V4
    }
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
    fn start(addr: IpAddr, msg_size: usize) -> anyhow::Result<Servers> {
        let iperf_port = free_port(addr)?;
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
    // Before any thread: Ctrl-C or SIGTERM removes the namespaces and stops
    // the sandboxes and peers instead of leaving them behind.
    crate::termination::clean_up_on_termination()
        .context("cannot set up the clean-up on SIGINT/SIGTERM")?;
    let exe = std::env::current_exe().context("cannot find the ustack binary")?;
    let loopback = Loopback {
        v4: match args.family.v4() {
            true => Some(Servers::start(Ipv4Addr::LOCALHOST.into(), args.msg_size)?),
            false => None,
        },
        v6: match args.family.v6() {
            true => Some(
                Servers::start(Ipv6Addr::LOCALHOST.into(), args.msg_size)
                    .context("the IPv6 jobs need the host's ::1 (or use --family 4)")?,
            ),
            false => None,
        },
    };

    let mut all = true;
    for (i, &mtu) in args.mtus.iter().enumerate() {
        let mut results: Vec<(Tool, ToolRuns)> = args
            .tools
            .iter()
            .map(|&t| (t, ToolRuns::default()))
            .collect();
        for run in 1..=args.runs {
            for (tool, r) in results.iter_mut() {
                if r.gave_up {
                    r.runs.push(None);
                    continue;
                }
                if !args.json {
                    eprintln!(
                        "measuring {} at MTU {mtu} (run {run}/{}) ...",
                        tool.name(),
                        args.runs
                    );
                }
                match measure(*tool, mtu, &exe, &args, &loopback) {
                    Ok(f) => r.runs.push(Some(f)),
                    Err(e) => {
                        eprintln!("{} (run {run}): {e:#}", tool.name());
                        // A tool that has never completed a run cannot
                        // run here (not installed, no namespace): it is
                        // not tried again. One that has keeps its runs.
                        r.gave_up = r.completed() == 0;
                        r.runs.push(None);
                        r.errors.push((run, format!("{e:#}")));
                    }
                }
            }
        }
        if i > 0 && !args.json {
            println!();
        }
        print_results(&args, mtu, &results);
        all &= results.iter().all(|(_, r)| r.errors.is_empty());
    }
    Ok(if all { 0 } else { 1 })
}

/// One tool's runs at one MTU: each run's figures in order (`None` for a
/// run that failed or was not tried), and the errors.
#[derive(Default)]
struct ToolRuns {
    runs: Vec<Option<Figures>>,
    errors: Vec<(u32, String)>,
    /// Failed before completing any run: not tried again.
    gave_up: bool,
}

impl ToolRuns {
    fn completed(&self) -> usize {
        self.runs.iter().flatten().count()
    }
}

/// The servers on the host's loopback, per IP version asked for.
struct Loopback {
    v4: Option<Servers>,
    v6: Option<Servers>,
}

/// What one tool achieved in one run, per IP version.
#[derive(Debug, Clone, Copy)]
struct Figures {
    v4: Option<FamilyFigures>,
    v6: Option<FamilyFigures>,
    /// With a capture running (`--capture`, ustack only), over the first
    /// IP version measured (IPv6 only with `--family 6`).
    up_capture: Option<Captured>,
    down_capture: Option<Captured>,
    /// With the control endpoint disabled (`--control-off`, ustack only),
    /// over the same IP version as the capture rows.
    up_no_control: Option<Measured>,
    down_no_control: Option<Measured>,
}

/// An iperf3 job's throughput and the relay's CPU time per GB moved.
#[derive(Debug, Clone, Copy)]
struct Measured {
    gbps: f64,
    cpu_per_gb: Option<f64>,
}

/// The jobs over one IP version.
#[derive(Debug, Clone, Copy)]
struct FamilyFigures {
    up_gbps: f64,
    down_gbps: f64,
    rr_avg_us: f64,
    rr_p99_us: f64,
    /// Relay CPU seconds per GB moved (ustack only).
    up_cpu_per_gb: Option<f64>,
    down_cpu_per_gb: Option<f64>,
}

impl Figures {
    /// The figures the capture rows compare with: those of the IP version
    /// the capture ran over.
    fn captured_family(&self) -> Option<FamilyFigures> {
        self.v4.or(self.v6)
    }
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
        gateway: Option<Ipv4Addr>,
        gateway6: Option<Ipv6Addr>,
    },
    /// `ip netns exec NAME CMD` in a namespace joined to the host by a veth
    /// pair: the kernel with no user-mode networking. Its servers listen
    /// on the host end (the host's loopback is not reachable over veth).
    Kernel {
        ns: Netns,
        servers: Option<Servers>,
        servers6: Option<Servers>,
    },
}

/// The kernel sandbox's veth addresses: the host end, the namespace end.
const KERNEL_V4: (Ipv4Addr, Ipv4Addr) =
    (Ipv4Addr::new(10, 231, 0, 1), Ipv4Addr::new(10, 231, 0, 2));
const KERNEL_V6: (Ipv6Addr, Ipv6Addr) = (
    Ipv6Addr::new(0xfd31, 0, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0xfd31, 0, 0, 0, 0, 0, 0, 2),
);
/// slirp4netns's IPv6 gateway (libslirp's default), which leads to the
/// host's `::1` as 10.0.2.2 leads to 127.0.0.1 (the namespace's default
/// route points at its link-local address instead).
const SLIRP_GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
/// `ustack run`'s gateways (its defaults).
const USTACK_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const USTACK_GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

impl Sandbox {
    fn start(
        tool: Tool,
        mtu: u32,
        exe: &std::path::Path,
        msg_size: usize,
        extra: &[String],
        family: Family,
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
                ip(&[
                    "link", "add", &host, "mtu", &mtu_s, "type", "veth", "peer", "name", &guest,
                ])?;
                // Deleting the namespace takes the peer and so the pair with it.
                ip(&["link", "set", &guest, "netns", &ns.0])?;
                ip(&["-n", &ns.0, "link", "set", "lo", "up"])?;
                ip(&["-n", &ns.0, "link", "set", &guest, "mtu", &mtu_s])?;
                let (h4, g4) = (format!("{}/24", KERNEL_V4.0), format!("{}/24", KERNEL_V4.1));
                let (h6, g6) = (format!("{}/64", KERNEL_V6.0), format!("{}/64", KERNEL_V6.1));
                if family.v4() {
                    ip(&["addr", "add", &h4, "dev", &host])?;
                    ip(&["-n", &ns.0, "addr", "add", &g4, "dev", &guest])?;
                }
                if family.v6() {
                    // No duplicate address detection: usable at once.
                    ip(&["-6", "addr", "add", &h6, "dev", &host, "nodad"])?;
                    ip(&[
                        "-n", &ns.0, "-6", "addr", "add", &g6, "dev", &guest, "nodad",
                    ])?;
                }
                ip(&["link", "set", &host, "up"])?;
                ip(&["-n", &ns.0, "link", "set", &guest, "up"])?;
                let mut servers = None;
                let mut servers6 = None;
                if family.v4() {
                    let gw = KERNEL_V4.0.to_string();
                    ip(&["-n", &ns.0, "route", "add", "default", "via", &gw])?;
                    servers = Some(Servers::start(KERNEL_V4.0.into(), msg_size)?);
                }
                if family.v6() {
                    let gw = KERNEL_V6.0.to_string();
                    ip(&["-n", &ns.0, "-6", "route", "add", "default", "via", &gw])?;
                    servers6 = Some(Servers::start(KERNEL_V6.0.into(), msg_size)?);
                }
                Ok(Sandbox::Kernel {
                    ns,
                    servers,
                    servers6,
                })
            }
            Tool::Pasta => {
                let ns = Netns::add(format!("ustk-bench-pasta-{pid}"))?;
                let mut c = Command::new("pasta");
                c.args(["--config-net", "--mtu", &mtu_s, "--netns", &ns.path()])
                    .args(["-f", "--runas", "0"]);
                if !family.v6() {
                    c.arg("--ipv4-only");
                }
                if !family.v4() {
                    c.arg("--ipv6-only");
                }
                let server = Reaped(
                    c.stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("cannot start pasta (is it installed?)")?,
                );
                // pasta copies the host's default gateways; TCP to either
                // reaches the host's loopback (127.0.0.1 or ::1).
                let gateway = match family.v4() {
                    true => Some(wait_default_route(&ns.0, "-4")?),
                    false => None,
                };
                let gateway6 = match family.v6() {
                    true => {
                        let gw = wait_default_route(&ns.0, "-6").context(
                            "pasta gives IPv6 only where the host has an IPv6 default route",
                        )?;
                        wait_ipv6_address(&ns.0)?;
                        Some(gw)
                    }
                    false => None,
                };
                Ok(Sandbox::Netns {
                    server,
                    ns,
                    gateway,
                    gateway6,
                })
            }
            Tool::Slirp4netns => {
                let ns = Netns::add(format!("ustk-bench-slirp-{pid}"))?;
                let mut c = Command::new("slirp4netns");
                c.args([
                    "--configure",
                    "--mtu",
                    &mtu_s,
                    "--netns-type=path",
                    &ns.path(),
                ]);
                if family.v6() {
                    c.arg("--enable-ipv6");
                }
                let server = Reaped(
                    c.arg("tap0")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("cannot start slirp4netns (is it installed?)")?,
                );
                let gateway = Some(wait_default_route(&ns.0, "-4")?);
                let gateway6 = match family.v6() {
                    true => {
                        // Its address comes from a router advertisement.
                        wait_ipv6_address(&ns.0)?;
                        Some(SLIRP_GATEWAY6)
                    }
                    false => None,
                };
                Ok(Sandbox::Netns {
                    server,
                    ns,
                    gateway,
                    gateway6,
                })
            }
        }
    }

    /// The address inside that reaches the host-side servers of IP version
    /// `v6` (the host's 127.0.0.1 or ::1 for the user-mode tools).
    fn gateway(&self, v6: bool) -> Option<IpAddr> {
        match (self, v6) {
            (Sandbox::Ustack { .. }, false) => Some(USTACK_GATEWAY.into()),
            (Sandbox::Ustack { .. }, true) => Some(USTACK_GATEWAY6.into()),
            (Sandbox::Netns { gateway, .. }, false) => gateway.map(IpAddr::from),
            (Sandbox::Netns { gateway6, .. }, true) => gateway6.map(IpAddr::from),
            (Sandbox::Kernel { servers, .. }, false) => {
                servers.as_ref().map(|_| KERNEL_V4.0.into())
            }
            (Sandbox::Kernel { servers6, .. }, true) => {
                servers6.as_ref().map(|_| KERNEL_V6.0.into())
            }
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
    loopback: &Loopback,
) -> anyhow::Result<Figures> {
    let mut sb = Sandbox::start(
        tool,
        mtu,
        exe,
        args.msg_size,
        &args.ustack_args,
        args.family,
    )?;
    let secs = args.seconds.max(1);
    let limit = Duration::from_secs(secs + 30);
    let ustack = matches!(sb, Sandbox::Ustack { .. });
    let mut figures = Figures {
        v4: None,
        v6: None,
        up_capture: None,
        down_capture: None,
        up_no_control: None,
        down_no_control: None,
    };
    for v6 in [false, true] {
        if !(if v6 {
            args.family.v6()
        } else {
            args.family.v4()
        }) {
            continue;
        }
        let servers = match (&sb, v6) {
            (Sandbox::Kernel { servers, .. }, false) => servers.as_ref(),
            (Sandbox::Kernel { servers6, .. }, true) => servers6.as_ref(),
            (_, false) => loopback.v4.as_ref(),
            (_, true) => loopback.v6.as_ref(),
        };
        let (Some(servers), Some(gw)) = (servers, sb.gateway(v6)) else {
            bail!("no IPv{} path to the host", if v6 { 6 } else { 4 });
        };
        let (iperf_port, rr_port) = (servers.iperf_port, servers.rr_port);
        let iperf = |reverse: bool| -> Vec<String> {
            let mut v: Vec<String> = vec![
                "iperf3".into(),
                "-c".into(),
                gw.to_string(),
                "-p".into(),
                iperf_port.to_string(),
                "-t".into(),
                secs.to_string(),
                "-J".into(),
            ];
            if reverse {
                v.push("-R".into());
            }
            v
        };
        // The capture rows are about the IPv4 jobs (the first family asked).
        let capture = match (&sb, args.capture && figures.up_capture.is_none()) {
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
        // The control endpoint disabled: the same job right after, in a
        // `ustack run --no-control` of its own.
        let no_control = match (&sb, args.control_off && figures.up_no_control.is_none()) {
            (Sandbox::Ustack { exe, mtu, extra }, true) => {
                let mut extra = extra.clone();
                extra.push("--no-control".into());
                Some(Sandbox::Ustack {
                    exe: exe.clone(),
                    mtu: *mtu,
                    extra,
                })
            }
            _ => None,
        };
        let mut no_control = no_control;
        let mut without_control = |reverse: bool| -> anyhow::Result<Option<Measured>> {
            match no_control.as_mut() {
                Some(sb) => {
                    let r = iperf_job(sb, &iperf(reverse), limit)?;
                    Ok(Some(Measured {
                        gbps: iperf_gbps(&r.out)?,
                        cpu_per_gb: cpu_per_gb(r.cpu, &r.out),
                    }))
                }
                None => Ok(None),
            }
        };
        let up = iperf_job(&mut sb, &iperf(false), limit)?;
        let up_capture = captured(false)?;
        let up_no_control = without_control(false)?;
        let down = iperf_job(&mut sb, &iperf(true), limit)?;
        let down_capture = captured(true)?;
        let down_no_control = without_control(true)?;
        let rr_cmd: Vec<String> = vec![
            exe.to_string_lossy().into_owned(),
            "run-bench".into(),
            "--rr-client".into(),
            SocketAddr::new(gw, rr_port).to_string(),
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
        let f = FamilyFigures {
            up_gbps: iperf_gbps(&up.out)?,
            down_gbps: iperf_gbps(&down.out)?,
            up_cpu_per_gb: cpu_per_gb(up.cpu, &up.out).filter(|_| ustack),
            down_cpu_per_gb: cpu_per_gb(down.cpu, &down.out).filter(|_| ustack),
            rr_avg_us: num("avg_us")?,
            rr_p99_us: num("p99_us")?,
        };
        if up_capture.is_some() {
            figures.up_capture = up_capture;
            figures.down_capture = down_capture;
        }
        if up_no_control.is_some() {
            figures.up_no_control = up_no_control;
            figures.down_no_control = down_no_control;
        }
        if v6 {
            figures.v6 = Some(f);
        } else {
            figures.v4 = Some(f);
        }
    }
    Ok(figures)
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

/// `get(u) / get(o)` for each run (by index) that both `u` and `o`
/// completed: a failed run of either leaves its round out rather than
/// pairing the runs that follow with the wrong rounds.
fn ratios_per_run(
    u: &[Option<Figures>],
    o: &[Option<Figures>],
    get: fn(&Figures) -> Option<f64>,
) -> Vec<f64> {
    u.iter()
        .zip(o)
        .filter_map(|(u, o)| {
            let (u, o) = (get(u.as_ref()?)?, get(o.as_ref()?)?);
            (o > 0.0).then(|| u / o)
        })
        .collect()
}

/// Attempts of an iperf3 client that found the server busy.
const IPERF_BUSY_TRIES: u32 = 20;
/// Pause between them.
const IPERF_BUSY_PAUSE: Duration = Duration::from_millis(100);

/// Run an iperf3 client (`cmd`) in `sb`, again while the server answers
/// that it is busy: `iperf3 -s` runs one test at a time and can still be
/// closing the previous client's when the next connects (the client
/// then reports "the server is busy running a test. try again later").
/// Bounded: after [`IPERF_BUSY_TRIES`] attempts, the last answer stands.
fn iperf_job(sb: &mut Sandbox, cmd: &[String], limit: Duration) -> anyhow::Result<Finished> {
    let mut tries = 1;
    loop {
        let r = sb.output(cmd, limit)?;
        if tries >= IPERF_BUSY_TRIES || !iperf_server_busy(&r.out) {
            return Ok(r);
        }
        tries += 1;
        std::thread::sleep(IPERF_BUSY_PAUSE);
    }
}

/// Whether iperf3's JSON output (`json`) says the server was busy.
fn iperf_server_busy(json: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v["error"].as_str().map(|e| e.contains("server is busy")))
        .unwrap_or(false)
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

/// The jobs over IPv4.
const ROWS: &[Row] = &[
    Row {
        key: "tcp_sandbox_to_host",
        label: "TCP sandbox -> host (iperf3)",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| Some(f.v4?.up_gbps),
    },
    Row {
        key: "tcp_host_to_sandbox",
        label: "TCP host -> sandbox (iperf3 -R)",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| Some(f.v4?.down_gbps),
    },
    Row {
        key: "tcp_rr_avg",
        label: "TCP request/response RTT, avg",
        unit: "us",
        higher_is_better: false,
        get: |f| Some(f.v4?.rr_avg_us),
    },
    Row {
        key: "tcp_rr_p99",
        label: "TCP request/response RTT, p99",
        unit: "us",
        higher_is_better: false,
        get: |f| Some(f.v4?.rr_p99_us),
    },
];

/// The same jobs over IPv6 (the host's `::1` through each tool's IPv6
/// gateway).
const ROWS6: &[Row] = &[
    Row {
        key: "tcp6_sandbox_to_host",
        label: "TCP6 sandbox -> host (iperf3)",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| Some(f.v6?.up_gbps),
    },
    Row {
        key: "tcp6_host_to_sandbox",
        label: "TCP6 host -> sandbox (iperf3 -R)",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| Some(f.v6?.down_gbps),
    },
    Row {
        key: "tcp6_rr_avg",
        label: "TCP6 request/response RTT, avg",
        unit: "us",
        higher_is_better: false,
        get: |f| Some(f.v6?.rr_avg_us),
    },
    Row {
        key: "tcp6_rr_p99",
        label: "TCP6 request/response RTT, p99",
        unit: "us",
        higher_is_better: false,
        get: |f| Some(f.v6?.rr_p99_us),
    },
];

/// With both IP versions: each tool's IPv6 figure over its IPv4 figure in
/// the same run (the median of the runs' ratios), and for ustack the
/// relay's CPU time per byte moved (steadier than throughput on a machine
/// shared with other work).
const FAMILY_RATIO_ROWS: &[Row] = &[
    Row {
        key: "tcp6_over_tcp4_sandbox_to_host",
        label: "IPv6/IPv4 sandbox -> host",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.v6?.up_gbps / f.v4?.up_gbps),
    },
    Row {
        key: "tcp6_over_tcp4_host_to_sandbox",
        label: "IPv6/IPv4 host -> sandbox",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.v6?.down_gbps / f.v4?.down_gbps),
    },
    Row {
        key: "tcp6_over_tcp4_rr_avg",
        label: "IPv6/IPv4 request/response avg",
        unit: "x",
        higher_is_better: false,
        get: |f| Some(f.v6?.rr_avg_us / f.v4?.rr_avg_us),
    },
    Row {
        key: "tcp6_over_tcp4_cpu_per_byte_sandbox_to_host",
        label: "IPv6/IPv4 relay CPU/byte, up",
        unit: "x",
        higher_is_better: false,
        get: |f| Some(f.v6?.up_cpu_per_gb? / f.v4?.up_cpu_per_gb?),
    },
    Row {
        key: "tcp6_over_tcp4_cpu_per_byte_host_to_sandbox",
        label: "IPv6/IPv4 relay CPU/byte, down",
        unit: "x",
        higher_is_better: false,
        get: |f| Some(f.v6?.down_cpu_per_gb? / f.v4?.down_cpu_per_gb?),
    },
];

/// The rows of the jobs `family` asks for (before `--capture`'s).
fn rows_for(family: Family) -> Vec<&'static Row> {
    let mut rows: Vec<&Row> = Vec::new();
    if family.v4() {
        rows.extend(ROWS);
    }
    if family.v6() {
        rows.extend(ROWS6);
    }
    if family == Family::Both {
        rows.extend(FAMILY_RATIO_ROWS);
    }
    rows
}

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
        get: |f| Some(f.up_capture?.gbps / f.captured_family()?.up_gbps),
    },
    Row {
        key: "tcp_sandbox_to_host_capture_cpu_ratio",
        label: "  relay CPU per byte, off / on",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.captured_family()?.up_cpu_per_gb? / f.up_capture?.cpu_per_gb?),
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
        get: |f| Some(f.down_capture?.gbps / f.captured_family()?.down_gbps),
    },
    Row {
        key: "tcp_host_to_sandbox_capture_cpu_ratio",
        label: "  relay CPU per byte, off / on",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.captured_family()?.down_cpu_per_gb? / f.down_capture?.cpu_per_gb?),
    },
    Row {
        key: "tcp_host_to_sandbox_capture_dropped",
        label: "  frames the capture lost",
        unit: "%",
        higher_is_better: false,
        get: |f| f.down_capture.map(Captured::dropped_pct),
    },
];

/// `--control-off`'s rows (ustack only): each iperf3 job with the control
/// endpoint disabled, and the ratio of the usual run (endpoint registered
/// and idle) to it, in throughput and in the relay's CPU time per byte.
const CONTROL_ROWS: &[Row] = &[
    Row {
        key: "tcp_sandbox_to_host_no_control",
        label: "TCP sandbox -> host, control off",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| f.up_no_control.map(|c| c.gbps),
    },
    Row {
        key: "tcp_sandbox_to_host_control_idle_ratio",
        label: "  control idle / off (same run)",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.captured_family()?.up_gbps / f.up_no_control?.gbps),
    },
    Row {
        key: "tcp_sandbox_to_host_control_idle_cpu_ratio",
        label: "  relay CPU per byte, off / idle",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.up_no_control?.cpu_per_gb? / f.captured_family()?.up_cpu_per_gb?),
    },
    Row {
        key: "tcp_host_to_sandbox_no_control",
        label: "TCP host -> sandbox, control off",
        unit: "Gbit/s",
        higher_is_better: true,
        get: |f| f.down_no_control.map(|c| c.gbps),
    },
    Row {
        key: "tcp_host_to_sandbox_control_idle_ratio",
        label: "  control idle / off (same run)",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.captured_family()?.down_gbps / f.down_no_control?.gbps),
    },
    Row {
        key: "tcp_host_to_sandbox_control_idle_cpu_ratio",
        label: "  relay CPU per byte, off / idle",
        unit: "x",
        higher_is_better: true,
        get: |f| Some(f.down_no_control?.cpu_per_gb? / f.captured_family()?.down_cpu_per_gb?),
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

fn print_results(args: &RunBenchArgs, mtu: u32, results: &[(Tool, ToolRuns)]) {
    // Each run's figures (`None`: that run failed), if any run completed.
    let slots = |tool: Tool| -> Option<&Vec<Option<Figures>>> {
        results
            .iter()
            .find(|(t, _)| *t == tool)
            .map(|(_, r)| &r.runs)
            .filter(|r| r.iter().any(Option::is_some))
    };
    // The completed runs' figures.
    let runs =
        |tool: Tool| -> Option<Vec<&Figures>> { slots(tool).map(|r| r.iter().flatten().collect()) };
    let value = |tool: Tool, row: &Row| -> Option<f64> {
        median(runs(tool)?.into_iter().filter_map(row.get).collect())
    };
    let job_rows = rows_for(args.family);
    let rows: Vec<&Row> = job_rows
        .iter()
        .copied()
        .chain(if args.capture { CAPTURE_ROWS } else { &[] })
        .chain(if args.control_off { CONTROL_ROWS } else { &[] })
        .collect();
    // Ratio of ustack to `other` in each round both completed.
    let per_run = |row: &Row, other: Tool| -> Vec<f64> {
        match (slots(Tool::Ustack), slots(other)) {
            (Some(u), Some(o)) => ratios_per_run(u, o, row.get),
            _ => Vec::new(),
        }
    };
    // (None for the rows that are already ratios.)
    let ratio = |row: &Row, other: Tool| -> Option<f64> {
        if row.unit == "x" {
            return None;
        }
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
                        .map(|r| r.into_iter().filter_map(row.get).collect())
                        .unwrap_or_default();
                    m.insert(format!("{}_runs", tool.name()), all.into());
                }
                let failed = results
                    .iter()
                    .find(|(t, _)| t == tool)
                    .map_or(0, |(_, r)| r.errors.len());
                m.insert(format!("{}_failed_runs", tool.name()), failed.into());
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
    let fmt_ratio = |row: &Row, other: Tool| match row.unit {
        "x" => "-".to_string(),
        _ => fmt(ratio(row, other), ""),
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
            fmt_ratio(row, Tool::Pasta),
            fmt_ratio(row, Tool::Slirp4netns),
            fmt_ratio(row, Tool::Kernel),
        );
    }
    if args.runs > 1 {
        for other in [Tool::Pasta, Tool::Slirp4netns, Tool::Kernel] {
            if runs(other).is_none() || runs(Tool::Ustack).is_none() {
                continue;
            }
            println!("ustack/{} in each run:", other.name());
            for row in job_rows.iter().filter(|r| r.unit != "x") {
                let r: Vec<String> = per_run(row, other)
                    .iter()
                    .map(|v| format!("{v:.2}"))
                    .collect();
                println!("  {:<32} {}", row.label, r.join(", "));
            }
        }
    }
    let ratio_sets = [
        (
            args.control_off,
            "the control endpoint idle against disabled",
            CONTROL_ROWS,
        ),
        (
            args.capture,
            "a capture running against without",
            CAPTURE_ROWS,
        ),
    ];
    for (on, what, rows) in ratio_sets {
        let Some(u) = runs(Tool::Ustack).filter(|_| on && args.runs > 1) else {
            continue;
        };
        println!("ustack with {what}, in each run:");
        for row in rows.iter().filter(|r| r.unit == "x") {
            let r: Vec<String> = u
                .iter()
                .copied()
                .filter_map(row.get)
                .map(|v| format!("{v:.2}"))
                .collect();
            println!("  {:<40} {}", row.key, r.join(", "));
        }
    }
    for (tool, r) in results {
        for (run, e) in &r.errors {
            println!("({} run {run} failed: {e})", tool.name());
        }
        if r.gave_up {
            println!("({}: no run completed; not tried again)", tool.name());
        } else if !r.errors.is_empty() {
            println!(
                "({}: figures from the {} of {} runs that completed; a ratio in each \
                 run only where both tools completed it)",
                tool.name(),
                r.completed(),
                args.runs
            );
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
    if args.family.v6() {
        println!(
            "(TCP6: the host's ::1 through the IPv6 gateway: ustack fd00::2, pasta the \
             host's IPv6 default gateway, slirp4netns fd00::2 with --enable-ipv6 \
             (experimental there); kernel: the veth's IPv6 host end; IPv6/IPv4: each \
             tool's IPv6 figure over its IPv4 one in the same run, throughput > 1 and \
             latency < 1 = IPv6 faster; relay CPU/byte (ustack) < 1 = IPv6 cheaper)"
        );
    }
}

// ------------------------------------------------------------ ping-pong

/// The client inside the sandbox: one connection, one message in flight,
/// for `seconds`; prints `{"count","avg_us","p50_us","p99_us"}`.
fn rr_client(server: SocketAddr, seconds: u64, size: usize) -> anyhow::Result<i32> {
    let size = size.clamp(1, 65536);
    let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(10))
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

/// Echo server on `addr` (the host's loopback) for the ping-pong client:
/// messages of `size` bytes, one thread per connection. Stops when the
/// guard is dropped.
fn rr_server(addr: IpAddr, size: usize) -> anyhow::Result<(u16, Stopper)> {
    let size = size.clamp(1, 65536);
    let l = TcpListener::bind(SocketAddr::new(addr, 0)).context("bind the echo server")?;
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
        crate::termination::add_netns(&name).context("cannot create a network namespace")?;
        Ok(Netns(name))
    }
    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        crate::termination::delete_netns(&self.0);
    }
}

/// The gateway of `ip route show default`'s output, if any.
fn default_via<A: std::str::FromStr>(text: &str) -> Option<A> {
    text.split_whitespace()
        .skip_while(|w| *w != "via")
        .nth(1)
        .and_then(|a| a.parse().ok())
}

/// Wait (10 s at most) until the namespace has a default route of the IP
/// version of `A` (`-4` or `-6`); its gateway.
fn wait_default_route<A: std::str::FromStr>(ns: &str, family: &str) -> anyhow::Result<A> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let out = Command::new("ip")
            .args(["-n", ns, family, "route", "show", "default"])
            .output()
            .context("cannot run ip")?;
        if let Some(gw) = default_via(&String::from_utf8_lossy(&out.stdout)) {
            return Ok(gw);
        }
        thread::sleep(Duration::from_millis(50));
    }
    bail!("namespace {ns} got no {family} default route within 10 s")
}

/// Wait (10 s at most) until the namespace has a global IPv6 address that
/// is no longer tentative (duplicate address detection done: before, the
/// kernel would not use it as a source).
fn wait_ipv6_address(ns: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let out = Command::new("ip")
            .args([
                "-n",
                ns,
                "-6",
                "addr",
                "show",
                "scope",
                "global",
                "-tentative",
            ])
            .output()
            .context("cannot run ip")?;
        if String::from_utf8_lossy(&out.stdout).contains("inet6 ") {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(50));
    }
    bail!("namespace {ns} got no usable global IPv6 address within 10 s")
}

fn free_port(addr: IpAddr) -> anyhow::Result<u16> {
    let l = TcpListener::bind(SocketAddr::new(addr, 0))
        .with_context(|| format!("cannot bind {addr}"))?;
    Ok(l.local_addr()?.port())
}

/// The start of the line of `/proc/net/tcp` (IPv4) or `/proc/net/tcp6`
/// (IPv6) for a socket listening on `addr`:`port`: its file and the text.
/// An address is written there as the hex of each 32-bit word of its
/// in-memory (network order) bytes read as a native integer.
fn listening_needle(addr: IpAddr, port: u16) -> (&'static str, String) {
    let words = |o: &[u8]| -> String {
        o.chunks_exact(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect()
    };
    let (file, hex, any) = match addr {
        IpAddr::V4(a) => ("/proc/net/tcp", words(&a.octets()), "0".repeat(8)),
        IpAddr::V6(a) => ("/proc/net/tcp6", words(&a.octets()), "0".repeat(32)),
    };
    (file, format!("{hex}:{port:04X} {any}:0000 0A"))
}

/// Wait (10 s at most) until something listens on `addr`:`port`.
fn wait_listening_on(addr: IpAddr, port: u16) -> anyhow::Result<()> {
    let (file, needle) = listening_needle(addr, port);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::fs::read_to_string(file).is_ok_and(|t| t.contains(&needle)) {
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
        // iperf3 3.12 exits 0 with this when another test still runs.
        let busy = r#"{"start":{},"error":"the server is busy running a test. try again later"}"#;
        assert!(iperf_server_busy(busy));
        assert!(!iperf_server_busy(r#"{"error":"unable to connect"}"#));
        assert!(!iperf_server_busy(ok));
        assert!(!iperf_server_busy("not json"));
    }

    /// A run that failed for one tool leaves that round out of the
    /// per-run ratios; the rounds after it stay paired with their own.
    #[test]
    fn per_run_ratios_skip_a_failed_round_and_keep_the_rest_aligned() {
        let fig = |up: f64| {
            Some(Figures {
                v4: Some(FamilyFigures {
                    up_gbps: up,
                    down_gbps: 1.0,
                    rr_avg_us: 1.0,
                    rr_p99_us: 1.0,
                    up_cpu_per_gb: None,
                    down_cpu_per_gb: None,
                }),
                v6: None,
                up_capture: None,
                down_capture: None,
                up_no_control: None,
                down_no_control: None,
            })
        };
        let up = |f: &Figures| Some(f.v4?.up_gbps);
        let ustack = [fig(10.0), fig(20.0), fig(30.0), None];
        let pasta = [fig(1.0), None, fig(3.0), fig(4.0)];
        assert_eq!(ratios_per_run(&ustack, &pasta, up), vec![10.0, 10.0]);
        assert!(ratios_per_run(&ustack, &[None, None], up).is_empty());
    }

    #[test]
    fn ping_pong_client_against_the_echo_server() {
        let lo = IpAddr::from(Ipv4Addr::LOCALHOST);
        let (port, _srv) = rr_server(lo, 14).unwrap_or_else(|e| panic!("{e}"));
        let r = rr_client(SocketAddr::new(lo, port), 1, 14);
        assert_eq!(r.ok(), Some(0));
    }

    #[test]
    fn ping_pong_client_against_the_echo_server_over_ipv6() {
        let lo = IpAddr::from(Ipv6Addr::LOCALHOST);
        let (port, _srv) = rr_server(lo, 14).unwrap_or_else(|e| panic!("{e}"));
        // The form the harness passes to the client inside the sandbox.
        let at: SocketAddr = format!("[::1]:{port}")
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rr_client(at, 1, 14).ok(), Some(0));
    }

    #[test]
    fn family_flag_parses_and_selects_rows() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: RunBenchArgs,
        }
        let family = |v: &[&str]| {
            Cli::try_parse_from(std::iter::once("run-bench").chain(v.iter().copied()))
                .map(|c| c.a.family)
                .ok()
        };
        assert_eq!(family(&[]), Some(Family::Both));
        assert_eq!(family(&["--family", "4"]), Some(Family::V4));
        assert_eq!(family(&["--family=6"]), Some(Family::V6));
        assert_eq!(family(&["--family", "both"]), Some(Family::Both));
        assert_eq!(family(&["--family", "5"]), None);
        let keys = |f: Family| -> Vec<&str> { rows_for(f).iter().map(|r| r.key).collect() };
        assert_eq!(
            keys(Family::V4),
            [
                "tcp_sandbox_to_host",
                "tcp_host_to_sandbox",
                "tcp_rr_avg",
                "tcp_rr_p99"
            ]
        );
        assert_eq!(
            keys(Family::V6),
            [
                "tcp6_sandbox_to_host",
                "tcp6_host_to_sandbox",
                "tcp6_rr_avg",
                "tcp6_rr_p99"
            ]
        );
        let both = keys(Family::Both);
        assert_eq!(both.len(), 13);
        assert_eq!(both[8], "tcp6_over_tcp4_sandbox_to_host");
    }

    fn family_figures(up: f64, down: f64, rr: f64) -> FamilyFigures {
        FamilyFigures {
            up_gbps: up,
            down_gbps: down,
            rr_avg_us: rr,
            rr_p99_us: 2.0 * rr,
            up_cpu_per_gb: None,
            down_cpu_per_gb: None,
        }
    }

    #[test]
    fn control_rows_are_idle_over_off() {
        let f = Figures {
            v4: Some(FamilyFigures {
                up_cpu_per_gb: Some(2.0),
                down_cpu_per_gb: Some(4.0),
                ..family_figures(9.0, 12.0, 50.0)
            }),
            v6: None,
            up_capture: None,
            down_capture: None,
            up_no_control: Some(Measured {
                gbps: 10.0,
                cpu_per_gb: Some(1.8),
            }),
            down_no_control: Some(Measured {
                gbps: 12.0,
                cpu_per_gb: None,
            }),
        };
        let get = |key: &str| {
            CONTROL_ROWS
                .iter()
                .find(|r| r.key == key)
                .and_then(|r| (r.get)(&f))
        };
        let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() < 1e-9);
        assert!(near(get("tcp_sandbox_to_host_no_control"), 10.0));
        assert!(near(get("tcp_sandbox_to_host_control_idle_ratio"), 0.9));
        assert!(near(get("tcp_sandbox_to_host_control_idle_cpu_ratio"), 0.9));
        assert!(near(get("tcp_host_to_sandbox_control_idle_ratio"), 1.0));
        assert_eq!(get("tcp_host_to_sandbox_control_idle_cpu_ratio"), None);
    }

    #[test]
    fn ipv6_over_ipv4_rows_and_absent_families() {
        let both = Figures {
            v4: Some(family_figures(20.0, 25.0, 70.0)),
            v6: Some(family_figures(18.0, 25.0, 77.0)),
            up_capture: None,
            down_capture: None,
            up_no_control: None,
            down_no_control: None,
        };
        let get = |key: &str, f: &Figures| {
            rows_for(Family::Both)
                .iter()
                .find(|r| r.key == key)
                .and_then(|r| (r.get)(f))
        };
        let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() < 1e-9);
        assert!(near(get("tcp6_sandbox_to_host", &both), 18.0));
        assert!(near(get("tcp6_rr_p99", &both), 154.0));
        assert!(near(get("tcp6_over_tcp4_sandbox_to_host", &both), 0.9));
        assert!(near(get("tcp6_over_tcp4_host_to_sandbox", &both), 1.0));
        assert!(near(get("tcp6_over_tcp4_rr_avg", &both), 1.1));
        // CPU per byte: ustack only (the others have no relay figure).
        assert_eq!(
            get("tcp6_over_tcp4_cpu_per_byte_sandbox_to_host", &both),
            None
        );
        let cpu = |up, down| FamilyFigures {
            up_cpu_per_gb: Some(up),
            down_cpu_per_gb: Some(down),
            ..family_figures(1.0, 1.0, 1.0)
        };
        let ustack = Figures {
            v4: Some(cpu(0.5, 0.4)),
            v6: Some(cpu(0.55, 0.4)),
            ..both
        };
        assert!(near(
            get("tcp6_over_tcp4_cpu_per_byte_sandbox_to_host", &ustack),
            1.1
        ));
        assert!(near(
            get("tcp6_over_tcp4_cpu_per_byte_host_to_sandbox", &ustack),
            1.0
        ));
        // A tool measured over IPv4 only has no IPv6 figures and no ratio.
        let v4_only = Figures { v6: None, ..both };
        assert_eq!(get("tcp6_sandbox_to_host", &v4_only), None);
        assert_eq!(get("tcp6_over_tcp4_rr_avg", &v4_only), None);
        assert!(near(get("tcp_sandbox_to_host", &v4_only), 20.0));
    }

    #[test]
    fn proc_net_tcp_lines_of_listeners() {
        let (file, n) = listening_needle(Ipv4Addr::LOCALHOST.into(), 5201);
        assert_eq!(file, "/proc/net/tcp");
        let lo = u32::from_ne_bytes([127, 0, 0, 1]);
        assert_eq!(n, format!("{lo:08X}:1451 00000000:0000 0A"));
        let (file, n) = listening_needle(Ipv6Addr::LOCALHOST.into(), 5201);
        assert_eq!(file, "/proc/net/tcp6");
        let one = u32::from_ne_bytes([0, 0, 0, 1]);
        assert_eq!(
            n,
            format!(
                "{}{one:08X}:1451 {}:0000 0A",
                "0".repeat(24),
                "0".repeat(32)
            )
        );
        // Against the kernel's own table: a listener on [::1].
        let l = TcpListener::bind("[::1]:0").unwrap_or_else(|e| panic!("{e}"));
        let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
        assert!(wait_listening_on(Ipv6Addr::LOCALHOST.into(), port).is_ok());
    }

    #[test]
    fn default_route_gateways() {
        let v4 = "default via 10.0.2.2 dev tap0 proto static\n";
        assert_eq!(
            default_via::<Ipv4Addr>(v4),
            Some(Ipv4Addr::new(10, 0, 2, 2))
        );
        let v6 = "default via fd00::1 dev eth0 metric 1024 pref medium\n";
        assert_eq!(
            default_via::<Ipv6Addr>(v6),
            Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1))
        );
        assert_eq!(default_via::<Ipv6Addr>(""), None);
        assert_eq!(default_via::<Ipv6Addr>("default dev eth0"), None);
        assert_eq!(default_via::<Ipv4Addr>(v6), None);
    }
}
