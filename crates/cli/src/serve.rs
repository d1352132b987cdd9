//! `ustack serve`: the classic services and an HTTP server on ustack.

use std::fmt::Write as _;
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use anyhow::{Context, Result};
use clap::Args;

use crate::server::{self, Datagram, Listener, Service};
use crate::setup::{self, NetArgs};
use crate::signals;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub net: NetArgs,
}

fn v4(a: SocketAddr) -> io::Result<SocketAddrV4> {
    match a {
        SocketAddr::V4(a) => Ok(a),
        SocketAddr::V6(_) => Err(io::Error::other("unexpected IPv6 address")),
    }
}

impl Listener for ustack_net::TcpListener {
    type Stream = ustack_net::TcpStream;
    fn accept(&self) -> io::Result<(Self::Stream, SocketAddrV4)> {
        let (s, a) = ustack_net::TcpListener::accept(self)?;
        let _ = s.set_nodelay(true);
        Ok((s, v4(a)?))
    }
}

impl Datagram for ustack_net::UdpSocket {
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddrV4)> {
        let (n, a) = ustack_net::UdpSocket::recv_from(self, buf)?;
        Ok((n, v4(a)?))
    }
    fn send_to(&self, buf: &[u8], to: SocketAddrV4) -> io::Result<usize> {
        ustack_net::UdpSocket::send_to(self, buf, to)
    }
}

/// The `/` page: what this is, and the stack's counters (non-zero ones).
fn status_page(net: &ustack_net::Net, active: &AtomicUsize) -> String {
    let mut s = String::with_capacity(4096);
    let _ = writeln!(s, "ustack: a user-space TCP/IP stack\n");
    let _ = writeln!(
        s,
        "services: echo tcp+udp/7, discard tcp/9, chargen tcp/19, http tcp/80"
    );
    let _ = writeln!(s, "/bytes/N returns N bytes where byte i = (i % 251)\n");
    let _ = writeln!(
        s,
        "open service connections: {}",
        active.load(Ordering::Relaxed)
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

/// Start echo (TCP and UDP), discard, chargen and HTTP on `ip`, each on
/// its own accept thread.
pub fn start_services(net: &ustack_net::Net, ip: std::net::Ipv4Addr) -> Result<()> {
    let active = Arc::new(AtomicUsize::new(0));
    let page: server::PageFn = {
        let net = net.clone();
        let active = active.clone();
        Arc::new(move || status_page(&net, &active))
    };
    for svc in [
        Service::Echo,
        Service::Discard,
        Service::Chargen,
        Service::Http,
    ] {
        let addr = SocketAddrV4::new(ip, svc.port());
        let l = ustack_net::TcpListener::bind_with_backlog(net, addr, 256)
            .with_context(|| format!("cannot listen on {addr} ({})", svc.name()))?;
        let (p, a) = (page.clone(), active.clone());
        thread::Builder::new()
            .name(format!("accept-{}", svc.name()))
            .spawn(move || server::run_tcp(l, svc, p, a))
            .context("cannot start a service thread")?;
    }
    let uaddr = SocketAddrV4::new(ip, Service::Echo.port());
    let u = ustack_net::UdpSocket::bind(net, uaddr)
        .with_context(|| format!("cannot bind UDP {uaddr}"))?;
    thread::Builder::new()
        .name("udp-echo".into())
        .spawn(move || server::run_udp_echo(u))
        .context("cannot start the UDP echo thread")?;
    Ok(())
}

pub fn run(args: ServeArgs) -> Result<i32> {
    let up = setup::bring_up(&args.net, "ustk0")?;
    let ip = up.addr.addr;
    start_services(&up.net, ip)?;

    let where_ = match &up.netns {
        Some(ns) => format!(" (kernel side {} in netns {ns})", up.host_addr),
        None => format!(" (kernel side {})", up.host_addr),
    };
    let prefix = up
        .netns
        .as_ref()
        .map(|ns| format!("ip netns exec {ns} "))
        .unwrap_or_default();
    println!(
        "ustack serving on {ip} via TAP {}{where_}; try: {prefix}ping {ip}, {prefix}curl http://{ip}/, {prefix}socat - TCP:{ip}:7",
        up.tap
    );
    if let Some(p) = &args.net.pcap {
        println!("capturing to {}", p.display());
    }
    use std::io::Write as _;
    let _ = std::io::stdout().flush();

    let sig = signals::wait_termination(None);
    tracing::info!("signal {sig:?}: shutting down");
    up.finish();
    eprintln!(
        "ustack: stopped (TAP {} goes away as the process exits)",
        up.tap
    );
    Ok(0)
}
