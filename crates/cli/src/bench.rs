//! `ustack bench`: ustack over TAP against the Linux kernel over veth, in
//! one run, with the same client tools on the kernel side for both.
//!
//! - ustack: runs in this process (host namespace) on a TAP whose kernel
//!   side is moved into a namespace the bench creates; the clients run in
//!   that namespace, so every packet crosses the TAP.
//! - kernel: two new namespaces joined by a veth pair; `ustack kserve`
//!   (the same service code on kernel sockets) in one, the clients in the other.
//!
//! Clients: ping(8) for ICMP RTT, `ustack kclient` (kernel sockets) for TCP
//! 1-byte request/response and bulk transfers in both directions, over IPv4
//! and (bulk only) over IPv6.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV6};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use ustack_net::core::Limits;
use ustack_net::dev::packet::{PacketConfig, PacketRing, RingVersion};
use ustack_wire::ipv6::Ipv6Cidr;

use crate::evloop::{EventLoop, LoopStats};
use crate::serve::LoopPlacement;
use crate::server::Service;

use crate::netns::{in_netns, in_ns, ip, veth_pair, Helper, Namespaces};
use crate::setup::{self, Cidr, NetArgs};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// ICMP echo requests per side.
    #[arg(long, default_value_t = 200)]
    pub pings: u32,
    /// TCP 1-byte round trips per side.
    #[arg(long, default_value_t = 2000)]
    pub round_trips: u64,
    /// Seconds per bulk transfer (each direction, each side).
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Busy-poll ustack's device for this many microseconds after activity.
    #[arg(long, value_name = "US")]
    pub busy_poll: Option<u64>,
    /// Run ustack's services on a thread of their own, as `serve
    /// --services-thread` does, instead of on the stack thread.
    #[arg(long)]
    pub services_thread: bool,
    /// Measure ustack with its TAP opened without the virtio-net header
    /// (no checksum offload, no TSO/GSO: one MTU per frame).
    #[arg(long)]
    pub no_offload: bool,
    /// Also measure ustack on an AF_PACKET socket with a memory-mapped ring
    /// (TPACKET_V3 and TPACKET_V2, with the virtio-net header) attached to
    /// one end of a veth pair whose other end holds the kernel peer, in the
    /// same run as the TAP: ICMP, TCP RR and bulk both ways, with the ratio
    /// ring / TAP.
    #[arg(long)]
    pub packet: bool,
    /// Repeat the whole comparison N times (fresh namespaces each time) and
    /// print the median of each figure, the median of the per-run ratios and
    /// every run's ratio: figures swing widely on a shared machine, the
    /// ratio of ustack and kernel measured in the same run far less.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub runs: u32,
    /// The name under which each ustack the comparison runs registers its
    /// control endpoint while it is measured (`ustack ps`, `ss`, `nstat`,
    /// `capture --stack NAME`); default `bench-PID`. Not for `--scale` or
    /// `--cc`, whose stacks have none.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub scale: crate::scale::ScaleArgs,
    #[command(flatten)]
    pub cc: crate::bench_cc::CcArgs,
}

#[derive(Serialize, Debug)]
pub struct Row {
    pub test: String,
    pub ustack: f64,
    pub kernel: f64,
    pub unit: String,
    /// ustack / kernel (with `--runs`: the median of the per-run ratios).
    pub ratio: f64,
    /// With `--runs` above 1: each run's ratio, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratios: Vec<f64>,
}

/// The median of `v` (NaN for none; NaNs sort last).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Rows of several runs (same tests in the same order) folded into one:
/// median figures, median ratio, every run's ratio.
fn combine(runs: &[Vec<Row>]) -> Vec<Row> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    if runs.len() == 1 {
        return runs[0]
            .iter()
            .map(|r| Row {
                test: r.test.clone(),
                ustack: r.ustack,
                kernel: r.kernel,
                unit: r.unit.clone(),
                ratio: r.ratio,
                ratios: Vec::new(),
            })
            .collect();
    }
    first
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let col = |f: fn(&Row) -> f64| -> Vec<f64> {
                runs.iter().filter_map(|run| run.get(i)).map(f).collect()
            };
            let ratios = col(|r| r.ratio);
            Row {
                test: r.test.clone(),
                ustack: median(col(|r| r.ustack)),
                kernel: median(col(|r| r.kernel)),
                unit: r.unit.clone(),
                ratio: median(ratios.clone()),
                ratios,
            }
        })
        .collect()
}

/// One table row (the name `name_w` wide, figures `fig_w`), and with
/// several runs each run's ratio in brackets.
fn print_row(r: &Row, name_w: usize, fig_w: usize, many: bool) {
    // CPU seconds per GB are small numbers: more digits.
    let p = if r.unit == "s/GB" { 3 } else { 1 };
    let runs = if many {
        let each: Vec<String> = r.ratios.iter().map(|x| format!("{x:.2}")).collect();
        format!("  ({})", each.join(" "))
    } else {
        String::new()
    };
    println!(
        "{:<name_w$} {:>fig_w$.p$} {:>fig_w$.p$} {:<7} {:>8.2}{runs}",
        r.test, r.ustack, r.kernel, r.unit, r.ratio
    );
}

/// Average RTT in µs from ping(8)'s summary line.
fn ping_avg_us(ns: &str, target: Ipv4Addr, count: u32) -> Result<f64> {
    let out = in_ns(
        ns,
        "ping",
        &[
            "-q",
            "-c",
            &count.to_string(),
            "-i",
            "0.002",
            "-W",
            "2",
            &target.to_string(),
        ],
    )?;
    let line = out
        .lines()
        .find(|l| l.starts_with("rtt") || l.starts_with("round-trip"))
        .with_context(|| format!("no rtt line in ping output: {out}"))?;
    let nums = line
        .split('=')
        .nth(1)
        .map(|s| s.trim().trim_end_matches("ms").trim().to_string())
        .unwrap_or_default();
    let avg: f64 = nums
        .split('/')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("cannot parse '{line}'"))?;
    Ok(avg * 1000.0)
}

fn kclient(exe: &Path, ns: &str, test: &str, host: IpAddr, a: &BenchArgs) -> Result<f64> {
    let exe = exe.to_string_lossy();
    let out = in_ns(
        ns,
        &exe,
        &[
            "kclient",
            test,
            &host.to_string(),
            "--count",
            &a.round_trips.to_string(),
            "--seconds",
            &a.seconds.to_string(),
        ],
    )?;
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).with_context(|| format!("kclient output: {out}"))?;
    v.get("value")
        .and_then(|x| x.as_f64())
        .with_context(|| format!("kclient output: {out}"))
}

#[derive(Default)]
struct Measured {
    icmp_us: f64,
    rr_us: f64,
    to_mbps: f64,
    from_mbps: f64,
    /// CPU time of this process (ustack's threads, when ustack runs in it)
    /// per GB moved, in each bulk direction.
    to_cpu_s_per_gb: f64,
    from_cpu_s_per_gb: f64,
}

/// User + system CPU time of this process so far.
fn process_cpu() -> f64 {
    // SAFETY: getrusage fills the struct we pass; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One bulk transfer: (Mbit/s, this process's CPU seconds per GB moved).
fn bulk(exe: &Path, ns: &str, test: &str, target: IpAddr, a: &BenchArgs) -> Result<(f64, f64)> {
    let c0 = process_cpu();
    let mbps = kclient(exe, ns, test, target, a)?;
    let cpu = process_cpu() - c0;
    let gb = mbps * a.seconds / 8000.0;
    Ok((mbps, if gb > 0.0 { cpu / gb } else { f64::NAN }))
}

fn measure(exe: &Path, ns: &str, target: Ipv4Addr, a: &BenchArgs) -> Result<Measured> {
    eprintln!("  ICMP echo x{} ...", a.pings);
    let icmp_us = ping_avg_us(ns, target, a.pings)?;
    eprintln!("  TCP 1-byte request/response x{} ...", a.round_trips);
    let rr_us = kclient(exe, ns, "rr", target.into(), a)?;
    let mut m = measure_bulk(exe, ns, target.into(), a)?;
    m.icmp_us = icmp_us;
    m.rr_us = rr_us;
    Ok(m)
}

fn measure_bulk(exe: &Path, ns: &str, target: IpAddr, a: &BenchArgs) -> Result<Measured> {
    eprintln!("  TCP bulk to the stack, {} s ...", a.seconds);
    let (to_mbps, to_cpu_s_per_gb) = bulk(exe, ns, "send", target, a)?;
    eprintln!("  TCP bulk from the stack, {} s ...", a.seconds);
    let (from_mbps, from_cpu_s_per_gb) = bulk(exe, ns, "recv", target, a)?;
    Ok(Measured {
        to_mbps,
        from_mbps,
        to_cpu_s_per_gb,
        from_cpu_s_per_gb,
        ..Measured::default()
    })
}

/// ustack on a [`PacketRing`] of `version` attached to one end of a veth
/// pair (in a namespace of its own, so the host's kernel never sees it)
/// whose other end, in the peer namespace, holds the clients.
fn measure_packet(
    exe: &Path,
    nss: &mut Namespaces,
    pid: &str,
    version: RingVersion,
    a: &BenchArgs,
) -> Result<Measured> {
    let tag = match version {
        RingVersion::V2 => "2",
        RingVersion::V3 => "3",
    };
    let ns_s = format!("ubr{tag}s{pid}");
    let ns_k = format!("ubr{tag}k{pid}");
    let dev_s = format!("ubr{tag}x{pid}");
    let dev_k = format!("ubr{tag}y{pid}");
    nss.add(&ns_s)?;
    nss.add(&ns_k)?;
    ip(&[
        "link", "add", &dev_s, "netns", &ns_s, "type", "veth", "peer", "name", &dev_k, "netns",
        &ns_k,
    ])?;
    ip(&["-n", &ns_k, "addr", "add", "10.80.0.1/24", "dev", &dev_k])?;
    ip(&["-n", &ns_k, "link", "set", &dev_k, "up"])?;
    ip(&["-n", &ns_s, "link", "set", &dev_s, "up"])?;
    let cfg = PacketConfig::new(version, true, 1500);
    let name = dev_s.clone();
    let ring = in_netns(&ns_s, move || PacketRing::open(&name, cfg))?
        .with_context(|| format!("cannot open an AF_PACKET ring on {dev_s}"))?;
    let args = NetArgs {
        tap: None,
        addr: Cidr {
            addr: Ipv4Addr::new(10, 80, 0, 2),
            prefix: 24,
        },
        host_addr: Cidr {
            addr: Ipv4Addr::new(10, 80, 0, 1),
            prefix: 24,
        },
        gateway: None,
        addr6: Vec::new(),
        host_addr6: ustack_wire::ipv6::Ipv6Cidr {
            address: std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1),
            prefix_len: 64,
        },
        // The bench's rows are IPv4: the link as before.
        no_ipv6: true,
        mtu: 1500,
        netns: None,
        pcap: None,
        busy_poll: a.busy_poll,
        no_offload: false,
        no_gro: false,
        congestion_control: Default::default(),
        impair: setup::ImpairArgs::default(),
    };
    let up = setup::start_stack(&args, dev_s.clone(), Box::new(ring), Limits::default())?;
    services(&up.net, args.addr.addr, a)?;
    eprintln!("ustack over an AF_PACKET {version:?} ring on veth {dev_s} (peer in netns {ns_k}):");
    let ctl = control(a, &up)?;
    let m = measure(exe, &ns_k, args.addr.addr, a);
    drop(ctl);
    up.finish();
    m
}

/// The control endpoint of the stack `up` while it is measured, under
/// `--name` (set by `run`). Dropped before the stack stops (it holds a
/// handle of it); the next stack registers under the same name.
fn control(a: &BenchArgs, up: &setup::Up) -> Result<ustack_ctl::Control> {
    let name = a.name.as_deref().unwrap_or("bench");
    let provider = Arc::new(
        ustack_ctl::NetProvider::new(up.net.clone(), &up.tap).with_capture(up.hub.clone()),
    );
    ustack_ctl::Control::start(name, "bench", provider).map_err(anyhow::Error::msg)
}

/// `serve`'s services on ustack's `ip` (IPv4 only), placed as `a` says.
fn services(net: &ustack_net::Net, ip: Ipv4Addr, a: &BenchArgs) -> Result<()> {
    let placement = LoopPlacement::from_flag(a.services_thread);
    crate::serve::start_services(net, ip, false, 1024, placement)?;
    Ok(())
}

/// ustack's IPv6 address in the bench (the kernel's end: fd00:78::1).
const USTACK6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 2);

/// Discard and chargen on ustack's `ip`, served by `serve`'s event loop
/// as `serve` runs it (it ends when the stack stops).
fn start_bulk_services6(
    net: &ustack_net::Net,
    ip: Ipv6Addr,
    placement: LoopPlacement,
) -> Result<()> {
    let mut listeners = Vec::new();
    for svc in [Service::Discard, Service::Chargen] {
        let addr = SocketAddrV6::new(ip, svc.port(), 0, 0);
        let l = ustack_net::TcpListener::bind_with_backlog(net, addr, 128)
            .with_context(|| format!("cannot listen on {addr}"))?;
        listeners.push((l, svc));
    }
    let page: crate::server::PageFn = Arc::new(String::new);
    let stats = Arc::new(LoopStats::default());
    let poller = net.poller();
    let ev = EventLoop::new(&poller, listeners, Vec::new(), 64, page, stats)
        .context("cannot start the IPv6 event loop")?;
    crate::serve::start_event_loop(poller, ev, "serve6", placement)
}

/// `ustack kserve --bind BIND` in namespace `ns`, once it says it is ready;
/// stopped when the returned helper drops.
fn kserve(exe: &Path, ns: &str, bind: &str) -> Result<Helper> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(["kserve", "--bind", bind])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the kernel-side server")?;
    let stdout = child.stdout.take();
    let server = Helper(child);
    let (tx, rx) = mpsc::channel();
    if let Some(out) = stdout {
        std::thread::spawn(move || {
            let mut l = String::new();
            let _ = BufReader::new(out).read_line(&mut l);
            let _ = tx.send(l);
        });
    }
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(l) if l.trim() == "ready" => Ok(server),
        _ => bail!("the kernel-side server on {bind} did not start"),
    }
}

pub fn run(mut a: BenchArgs) -> Result<i32> {
    if let Some(n) = &a.name {
        ustack_ctl::check_name(n).map_err(anyhow::Error::msg)?;
    }
    if a.scale.scale {
        // (It catches SIGINT/SIGTERM itself and unwinds through its guards.)
        return crate::scale::run(&a.scale, a.json);
    }
    ustack_relay::termination::clean_up_on_termination()
        .context("cannot set up the clean-up on SIGINT/SIGTERM")?;
    if a.cc.cc {
        return crate::bench_cc::run(&a.cc, a.json);
    }
    if !(0.1..=600.0).contains(&a.seconds) {
        bail!("--seconds must be between 0.1 and 600");
    }
    if a.packet && a.no_offload {
        bail!(
            "--packet measures the ring with the virtio-net header only (a veth sends GSO \
             frames): drop --no-offload"
        );
    }
    if !(1..=50).contains(&a.runs) {
        bail!("--runs must be between 1 and 50");
    }
    // One name for every stack of every run (one at a time).
    a.name = Some(
        a.name
            .take()
            .unwrap_or_else(|| ustack_ctl::default_name("bench")),
    );
    let exe = std::env::current_exe().context("cannot find the ustack executable")?;
    let pid = std::process::id() % 100_000;
    let mut runs = Vec::new();
    let mut ring_runs = Vec::new();
    for i in 0..a.runs {
        // Names unique per run: a namespace deleted at the end of one run
        // may still be going away when the next starts.
        let id = if a.runs > 1 {
            eprintln!("== run {} of {}", i + 1, a.runs);
            format!("{pid}r{i}")
        } else {
            pid.to_string()
        };
        let (rows, ring_rows) = one_run(&exe, &id, &a)?;
        runs.push(rows);
        ring_runs.push(ring_rows);
    }
    print_rows(&a, &combine(&runs), &combine(&ring_runs))?;
    Ok(0)
}

/// One comparison: ustack on the TAP (with and without offloads), on the
/// rings if asked, then the kernel over veth. Everything it creates is
/// named after `pid` and gone when it returns.
fn one_run(exe: &Path, pid: &str, a: &BenchArgs) -> Result<(Vec<Row>, Vec<Row>)> {
    let ns_u = format!("ubu{pid}");
    let ns_a = format!("uba{pid}");
    let ns_b = format!("ubb{pid}");
    let mut nss = Namespaces::default();

    // ustack side.
    nss.add(&ns_u)?;
    let args = NetArgs {
        tap: Some(format!("ubt{pid}")),
        addr: Cidr {
            addr: Ipv4Addr::new(10, 78, 0, 2),
            prefix: 24,
        },
        host_addr: Cidr {
            addr: Ipv4Addr::new(10, 78, 0, 1),
            prefix: 24,
        },
        gateway: None,
        addr6: Vec::new(),
        host_addr6: ustack_wire::ipv6::Ipv6Cidr {
            address: std::net::Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1),
            prefix_len: 64,
        },
        // The bench's rows are IPv4: the link as before.
        no_ipv6: true,
        mtu: 1500,
        netns: Some(ns_u.clone()),
        pcap: None,
        busy_poll: a.busy_poll,
        no_offload: a.no_offload,
        no_gro: false,
        congestion_control: Default::default(),
        impair: setup::ImpairArgs::default(),
    };
    let up = setup::bring_up(&args, "")?;
    services(&up.net, args.addr.addr, a)?;
    eprintln!("ustack over TAP {} (peer in netns {ns_u}):", up.tap);
    let ctl = control(a, &up)?;
    let u = measure(exe, &ns_u, args.addr.addr, a);
    drop(ctl);
    up.finish();
    let u = u?;
    // The same bulk transfers over IPv6, on a ustack of their own with the
    // same options (its TAP's kernel end gets fd00:78::1/64 from the setup;
    // discard and chargen on fd00:78::2).
    let u6 = {
        let ns_6 = format!("ub6{pid}");
        nss.add(&ns_6)?;
        let args = NetArgs {
            tap: Some(format!("ub6t{pid}")),
            netns: Some(ns_6.clone()),
            addr6: vec![Ipv6Cidr {
                address: USTACK6,
                prefix_len: 64,
            }],
            host_addr6: Ipv6Cidr {
                address: Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 1),
                prefix_len: 64,
            },
            no_ipv6: false,
            ..args.clone()
        };
        let up = setup::bring_up(&args, "")?;
        let tap = up.tap.clone();
        if up.host_addr6.is_none() {
            bail!("the kernel side of {tap} has no IPv6 address");
        }
        // Should duplicate address detection be on, the address is
        // tentative (not bindable) for a second or two (RFC 4862 5.4).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !up
            .net
            .with_stack(|s| s.ipv6_tentative_addresses().is_empty())
        {
            if std::time::Instant::now() > deadline {
                bail!("{USTACK6} still tentative after 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        start_bulk_services6(
            &up.net,
            USTACK6,
            LoopPlacement::from_flag(a.services_thread),
        )?;
        eprintln!("ustack over TAP {tap} over IPv6:");
        let ctl = control(a, &up)?;
        let m = measure_bulk(exe, &ns_6, USTACK6.into(), a);
        drop(ctl);
        up.finish();
        m?
    };
    // The same bulk transfers without the TAP's offloads (one MTU per
    // frame, checksums in software): what the offloads are worth.
    let plain = if a.no_offload {
        None
    } else {
        let ns_p = format!("ubp{pid}");
        nss.add(&ns_p)?;
        let args = NetArgs {
            tap: Some(format!("ubq{pid}")),
            netns: Some(ns_p.clone()),
            no_offload: true,
            ..args
        };
        let up = setup::bring_up(&args, "")?;
        services(&up.net, args.addr.addr, a)?;
        eprintln!("ustack over TAP {} without offloads:", up.tap);
        let ctl = control(a, &up)?;
        let p = measure_bulk(exe, &ns_p, args.addr.addr.into(), a);
        drop(ctl);
        up.finish();
        Some(p?)
    };

    // The AF_PACKET rings, right after the TAP.
    let mut rings = Vec::new();
    if a.packet {
        for v in [RingVersion::V3, RingVersion::V2] {
            rings.push((v, measure_packet(exe, &mut nss, pid, v, a)?));
        }
    }

    // Kernel side: veth between two namespaces.
    nss.add(&ns_a)?;
    nss.add(&ns_b)?;
    veth_pair(
        [&ns_a, "ubva", "10.79.0.1/24"],
        [&ns_b, "ubvb", "10.79.0.2/24"],
    )?;
    let _server = kserve(exe, &ns_b, "10.79.0.2")?;
    eprintln!("kernel over veth ({ns_a} -> {ns_b}):");
    let k = measure(exe, &ns_a, Ipv4Addr::new(10, 79, 0, 2), a)?;
    // And over IPv6: the same services on fd00:79::2.
    ip(&[
        "-n",
        &ns_a,
        "-6",
        "addr",
        "add",
        "fd00:79::1/64",
        "dev",
        "ubva",
        "nodad",
    ])?;
    ip(&[
        "-n",
        &ns_b,
        "-6",
        "addr",
        "add",
        "fd00:79::2/64",
        "dev",
        "ubvb",
        "nodad",
    ])?;
    let k6_addr = Ipv6Addr::new(0xfd00, 0x79, 0, 0, 0, 0, 0, 2);
    let _server6 = kserve(exe, &ns_b, &k6_addr.to_string())?;
    eprintln!("kernel over veth over IPv6:");
    let k6 = measure_bulk(exe, &ns_a, k6_addr.into(), a)?;

    let row = |test: &str, us: f64, kv: f64, unit: &str| Row {
        test: test.to_string(),
        ustack: us,
        kernel: kv,
        unit: unit.to_string(),
        ratio: if kv > 0.0 { us / kv } else { f64::NAN },
        ratios: Vec::new(),
    };
    let mut rows = vec![
        row("icmp_echo_rtt", u.icmp_us, k.icmp_us, "us"),
        row("tcp_rr_1byte", u.rr_us, k.rr_us, "us"),
        row("tcp_bulk_to_stack", u.to_mbps, k.to_mbps, "Mbit/s"),
        row("tcp_bulk_from_stack", u.from_mbps, k.from_mbps, "Mbit/s"),
        row("tcp6_bulk_to_stack", u6.to_mbps, k6.to_mbps, "Mbit/s"),
        row("tcp6_bulk_from_stack", u6.from_mbps, k6.from_mbps, "Mbit/s"),
    ];
    // ustack's CPU time per GB; the kernel's work is not a process's, so
    // the kernel column holds ustack's figure without offloads (ratio =
    // with / without: the saving).
    if let Some(p) = &plain {
        rows.extend([
            row(
                "tcp_bulk_to_stack_no_offload",
                p.to_mbps,
                k.to_mbps,
                "Mbit/s",
            ),
            row(
                "tcp_bulk_from_stack_no_offload",
                p.from_mbps,
                k.from_mbps,
                "Mbit/s",
            ),
            row(
                "cpu_per_gb_to_stack",
                u.to_cpu_s_per_gb,
                p.to_cpu_s_per_gb,
                "s/GB",
            ),
            row(
                "cpu_per_gb_from_stack",
                u.from_cpu_s_per_gb,
                p.from_cpu_s_per_gb,
                "s/GB",
            ),
        ]);
    }
    // Ring / TAP: the "kernel" column holds the TAP's figure.
    let ring_rows: Vec<Row> = rings
        .iter()
        .flat_map(|(v, p)| {
            let t = format!("{v:?}").to_lowercase();
            [
                row(
                    &format!("packet_{t}_icmp_echo_rtt"),
                    p.icmp_us,
                    u.icmp_us,
                    "us",
                ),
                row(&format!("packet_{t}_tcp_rr_1byte"), p.rr_us, u.rr_us, "us"),
                row(
                    &format!("packet_{t}_tcp_bulk_to_stack"),
                    p.to_mbps,
                    u.to_mbps,
                    "Mbit/s",
                ),
                row(
                    &format!("packet_{t}_tcp_bulk_from_stack"),
                    p.from_mbps,
                    u.from_mbps,
                    "Mbit/s",
                ),
                row(
                    &format!("packet_{t}_cpu_per_gb_to_stack"),
                    p.to_cpu_s_per_gb,
                    u.to_cpu_s_per_gb,
                    "s/GB",
                ),
                row(
                    &format!("packet_{t}_cpu_per_gb_from_stack"),
                    p.from_cpu_s_per_gb,
                    u.from_cpu_s_per_gb,
                    "s/GB",
                ),
            ]
        })
        .collect();
    Ok((rows, ring_rows))
}

fn print_rows(a: &BenchArgs, rows: &[Row], ring_rows: &[Row]) -> Result<()> {
    let many = a.runs > 1;
    if a.json {
        let all: Vec<&Row> = rows.iter().chain(ring_rows.iter()).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        println!(
            "{:<30} {:>12} {:>12} {:<7} {:>8}",
            "test", "ustack", "kernel", "unit", "ratio"
        );
        for r in rows {
            print_row(r, 30, 12, many);
        }
        let services = if a.services_thread {
            "services on a thread of their own"
        } else {
            "services on the stack thread"
        };
        println!(
            "(ustack: TAP, {services}, peer = kernel in a namespace; kernel: veth between two namespaces; ratio = ustack/kernel)"
        );
        if many {
            println!(
                "(medians of {} runs; in brackets each run's ratio, in order)",
                a.runs
            );
        }
        if !a.no_offload {
            println!(
                "(cpu_per_gb rows: ustack's CPU seconds per GB with offloads | without them | ratio)"
            );
        }
        if !ring_rows.is_empty() {
            println!();
            println!(
                "{:<36} {:>10} {:>10} {:<7} {:>8}",
                "test", "ring", "tap", "unit", "ratio"
            );
            for r in ring_rows {
                print_row(r, 36, 10, many);
            }
            println!(
                "(ustack on an AF_PACKET ring on a veth end vs on the TAP, both with the \
                 virtio-net header; ratio = ring/tap; in JSON the tap figure is the kernel field)"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(test: &str, us: f64, k: f64) -> Row {
        Row {
            test: test.into(),
            ustack: us,
            kernel: k,
            unit: "x".into(),
            ratio: us / k,
            ratios: Vec::new(),
        }
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn runs_fold_into_medians_and_keep_each_ratio() {
        let runs = vec![
            vec![row("a", 1.0, 2.0), row("b", 9.0, 3.0)],
            vec![row("a", 3.0, 2.0), row("b", 6.0, 6.0)],
            vec![row("a", 2.0, 8.0), row("b", 3.0, 1.0)],
        ];
        let c = combine(&runs);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].ustack, c[0].kernel), (2.0, 2.0));
        assert_eq!(c[0].ratios, vec![0.5, 1.5, 0.25]);
        // The median of the per-run ratios, not the ratio of the medians.
        assert_eq!(c[0].ratio, 0.5);
        assert_eq!(c[1].ratios, vec![3.0, 1.0, 3.0]);
        assert_eq!(c[1].ratio, 3.0);
        // One run: as measured, no per-run list.
        let one = combine(&runs[..1]);
        assert_eq!(one[0].ratio, 0.5);
        assert!(one[0].ratios.is_empty());
    }
}
