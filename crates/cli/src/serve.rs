//! `ustack serve`: the classic services and an HTTP server on ustack.

use std::fmt::Write as _;
use std::io;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use anyhow::{Context, Result};
use clap::Args;
use ustack_net::core::Limits;

use crate::evloop::{EventLoop, LoopStats};
use crate::server::{self, Datagram, Listener, Service};
use crate::setup::{self, NetArgs};
use crate::signals;

/// Connections `ustack serve` serves at once by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 200_000;
/// Accept backlog of each service (Linux's `SOMAXCONN`).
const BACKLOG: usize = 4096;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub net: NetArgs,
    /// TCP connections served at once over all services; more are closed
    /// as soon as they are accepted. The stack's table is sized for this
    /// many plus 65,536 (connections closing, TIME-WAIT, handshakes).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = parse_max_connections)]
    pub max_connections: usize,
    /// Register the stack's control endpoint under NAME, for `ustack ps`,
    /// `ss`, `nstat` and `sysctl --stack NAME` (default: serve-PID).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Serve the counters in Prometheus' text format at
    /// http://ADDR:PORT/metrics (on the host's sockets, not ustack's).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Run the services on a thread of their own instead of on the stack
    /// thread. By default the stack thread serves them itself after each
    /// pass over the device (no wake-up of another thread per event: lower
    /// latency, less CPU); a thread of their own runs them in parallel with
    /// the stack, which pays off only for services heavy on CPU with cores
    /// to spare.
    #[arg(long)]
    pub services_thread: bool,
}

/// Where the services' event loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoopPlacement {
    /// On the stack thread (`Poller::run_on_stack_thread`).
    #[default]
    StackThread,
    /// On a thread of its own, woken per event.
    OwnThread,
}

impl LoopPlacement {
    /// `--services-thread` given or not.
    pub fn from_flag(services_thread: bool) -> LoopPlacement {
        if services_thread {
            LoopPlacement::OwnThread
        } else {
            LoopPlacement::StackThread
        }
    }
}

fn parse_max_connections(s: &str) -> std::result::Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of connections"))?;
    if !(1..=4_000_000).contains(&n) {
        return Err(format!("{n} is out of range (1 to 4000000)"));
    }
    Ok(n)
}

/// The stack limits `ustack serve` needs for `max_connections`.
pub fn serve_limits(max_connections: usize) -> Limits {
    Limits {
        max_tcp_sockets: max_connections.saturating_add(65_536),
        // A full accept backlog can arrive at once: keep that many
        // half-open ones (bounded by the table); SYN cookies answer the
        // SYNs beyond them, as Linux's do.
        max_syn_backlog: BACKLOG,
        ..Limits::default()
    }
}

impl Listener for ustack_net::TcpListener {
    type Stream = ustack_net::TcpStream;
    fn accept(&self) -> io::Result<(Self::Stream, SocketAddr)> {
        let (s, a) = ustack_net::TcpListener::accept(self)?;
        let _ = s.set_nodelay(true);
        Ok((s, a))
    }
}

impl Datagram for ustack_net::UdpSocket {
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        ustack_net::UdpSocket::recv_from(self, buf)
    }
    fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        ustack_net::UdpSocket::send_to(self, buf, to)
    }
}

/// The `/` page: what this is, and the stack's counters (non-zero ones).
fn status_page(net: &ustack_net::Net, stats: &LoopStats) -> String {
    let mut s = String::with_capacity(4096);
    let _ = writeln!(s, "ustack: a user-space TCP/IP stack\n");
    let _ = writeln!(
        s,
        "services: echo tcp+udp/7, discard tcp/9, chargen tcp/19, http tcp/80"
    );
    let _ = writeln!(s, "/bytes/N returns N bytes where byte i = (i % 251)\n");
    let _ = writeln!(
        s,
        "open service connections: {} (accepted {}, refused at the limit {})",
        stats.active.load(Ordering::Relaxed),
        stats.accepted.load(Ordering::Relaxed),
        stats.refused.load(Ordering::Relaxed),
    );
    let st = net.runtime_stats();
    let _ = writeln!(
        s,
        "device: rx_frames {} tx_frames {} tx_would_block {} tx_backlog_drops {}\n",
        st.rx_frames, st.tx_frames, st.tx_would_block, st.tx_backlog_drops
    );
    let _ = writeln!(s, "counters (non-zero):");
    for (group, name, value) in net.counters().iter() {
        if value != 0 {
            let _ = writeln!(s, "  {:<32} {value}", format!("{group}{name}"));
        }
    }
    s
}

/// Start echo (TCP and UDP), discard, chargen and HTTP on `ip`, all served
/// by one event loop (placed as `placement` says), at most
/// `max_connections` TCP connections at once. With `ipv6`, over both
/// families: each TCP service on one dual-stack listener `[::]:PORT` (IPv4
/// clients appear with IPv4-mapped addresses, as on Linux), UDP echo on
/// `ip:7` and `[::]:7`.
pub fn start_services(
    net: &ustack_net::Net,
    ip: std::net::Ipv4Addr,
    ipv6: bool,
    max_connections: usize,
    placement: LoopPlacement,
) -> Result<Arc<LoopStats>> {
    let stats = Arc::new(LoopStats::default());
    let page: server::PageFn = {
        let net = net.clone();
        let stats = stats.clone();
        Arc::new(move || status_page(&net, &stats))
    };
    let mut listeners = Vec::new();
    for svc in [
        Service::Echo,
        Service::Discard,
        Service::Chargen,
        Service::Http,
    ] {
        let addr = if ipv6 {
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, svc.port(), 0, 0))
        } else {
            SocketAddr::V4(SocketAddrV4::new(ip, svc.port()))
        };
        let l = ustack_net::TcpListener::bind_with_backlog(net, addr, BACKLOG)
            .with_context(|| format!("cannot listen on {addr} ({})", svc.name()))?;
        listeners.push((l, svc));
    }
    let mut udp = Vec::new();
    let mut uaddrs = vec![SocketAddr::V4(SocketAddrV4::new(ip, Service::Echo.port()))];
    if ipv6 {
        uaddrs.push(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::UNSPECIFIED,
            Service::Echo.port(),
            0,
            0,
        )));
    }
    for uaddr in uaddrs {
        let u = ustack_net::UdpSocket::bind(net, uaddr)
            .with_context(|| format!("cannot bind UDP {uaddr}"))?;
        udp.push(u);
    }
    let poller = net.poller();
    let ev = EventLoop::new(
        &poller,
        listeners,
        udp,
        max_connections,
        page,
        stats.clone(),
    )
    .context("cannot start the event loop")?;
    start_event_loop(poller, ev, "serve", placement)?;
    Ok(stats)
}

/// Run `ev` on `poller`'s events: on the stack thread itself
/// (`Poller::run_on_stack_thread`: no wake-up of another thread per
/// event), or on a thread of its own named `name`. Either way it ends when
/// the stack stops.
pub fn start_event_loop(
    poller: ustack_net::Poller,
    mut ev: EventLoop,
    name: &str,
    placement: LoopPlacement,
) -> Result<()> {
    match placement {
        LoopPlacement::OwnThread => {
            thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let e = ev.run(&poller);
                    tracing::debug!("event loop ended: {e}");
                })
                .with_context(|| format!("cannot start the {name} event-loop thread"))?;
            Ok(())
        }
        LoopPlacement::StackThread => poller
            .run_on_stack_thread(move |p, events| ev.handle(p, events))
            .with_context(|| format!("cannot run the {name} event loop on the stack thread")),
    }
}

pub fn run(args: ServeArgs) -> Result<i32> {
    if let Some(n) = &args.name {
        ustack_ctl::check_name(n).map_err(anyhow::Error::msg)?;
    }
    let limits = serve_limits(args.max_connections);
    let up = setup::bring_up_with(&args.net, "ustk0", limits)?;
    let ip = up.addr.addr;
    let ipv6 = !args.net.no_ipv6;
    start_services(
        &up.net,
        ip,
        ipv6,
        args.max_connections,
        LoopPlacement::from_flag(args.services_thread),
    )?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| ustack_ctl::default_name("serve"));
    let provider = Arc::new(
        ustack_ctl::NetProvider::new(up.net.clone(), &up.tap).with_capture(up.hub.clone()),
    );
    let metrics = match args.metrics {
        Some(a) => Some(
            ustack_ctl::Metrics::start(a, &name, provider.clone()).map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let control =
        ustack_ctl::Control::start(&name, "serve", provider).map_err(anyhow::Error::msg)?;

    let kernel_side = match up.host_addr6 {
        Some(h6) => format!("{} and {h6}", up.host_addr),
        None => up.host_addr.to_string(),
    };
    let where_ = match &up.netns {
        Some(ns) => format!(" (kernel side {kernel_side} in netns {ns})"),
        None => format!(" (kernel side {kernel_side})"),
    };
    let prefix = up
        .netns
        .as_ref()
        .map(|ns| format!("ip netns exec {ns} "))
        .unwrap_or_default();
    let ours = std::iter::once(ip.to_string())
        .chain(up.addr6.iter().map(|a| a.address.to_string()))
        .collect::<Vec<_>>()
        .join(" and ");
    println!(
        "ustack serving on {ours} via TAP {}{where_}; try: {prefix}ping {ip}, {prefix}curl http://{ip}/, {prefix}socat - TCP:{ip}:7",
        up.tap
    );
    if let Some(a6) = up.addr6.first().map(|a| a.address) {
        println!(
            "over IPv6: {prefix}ping -6 {a6}, {prefix}curl -g 'http://[{a6}]/', {prefix}socat - TCP6:[{a6}]:7"
        );
    }
    if let Some(p) = &args.net.pcap {
        println!("capturing to {}", p.display());
    }
    println!(
        "control endpoint {name:?}: ustack ps, ustack ss --stack {name}, ustack nstat, ustack sysctl"
    );
    if let Some(m) = &metrics {
        println!("metrics: http://{}/metrics", m.addr());
    }
    use std::io::Write as _;
    let _ = std::io::stdout().flush();

    // Until a signal, or the stack stopping on its own: its TAP deleted
    // (`Net::failure` says so), or a panic on the stack thread, which runs
    // the services (its message is on stderr).
    let sig = loop {
        if let Some(sig) = signals::wait_termination(Some(std::time::Duration::from_secs(1))) {
            break Some(sig);
        }
        if !up.net.is_running() {
            break None;
        }
    };
    let Some(sig) = sig else {
        let why = up.net.failure();
        drop(control);
        drop(metrics);
        up.finish();
        match why {
            Some(e) => eprintln!("ustack: TAP {}: {e}; the stack stopped, exiting", up.tap),
            None => eprintln!("ustack: the stack stopped unexpectedly; exiting"),
        }
        return Ok(1);
    };
    tracing::info!("signal {sig}: shutting down");
    drop(control);
    drop(metrics);
    up.finish();
    eprintln!(
        "ustack: stopped (TAP {} goes away as the process exits)",
        up.tap
    );
    Ok(0)
}
