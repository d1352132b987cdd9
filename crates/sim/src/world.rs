//! The simulated world: two stacks, one impaired link, a virtual clock that
//! jumps to the next event, and the applications of every connection.

use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ustack_core::tcp::{State, TcpConfig, TcpError};
use ustack_core::time::Instant;
use ustack_core::{Config, Counters, Limits, Stack, TcpHandle};
use ustack_dev::memlink::{self, LinkCounters, MemPort};
use ustack_dev::pcap::PcapWriter;
use ustack_dev::wrap::summarize;
use ustack_dev::{Device, ETHERNET_HEADER_LEN};
use ustack_wire::ethernet::MacAddr;
use ustack_wire::ipv4::Ipv4Cidr;
use ustack_wire::ipv6::Ipv6Cidr;

use crate::scenario::{AppPlan, Ending, IpMode, Scenario};
use crate::stream;

/// Port every simulated server listens on.
pub const SERVER_PORT: u16 = 5000;
/// Client of connection `c` binds local port `CLIENT_PORT_BASE + c`.
pub const CLIENT_PORT_BASE: u16 = 40000;
const TRACE_LEN: usize = 48;
const TRACE_BYTES: usize = 80;
/// Iterations of the event loop at one instant before declaring a livelock.
const MAX_SAME_INSTANT: u32 = 20_000;
/// Socket calls of one kind in one application step (each moves at least
/// one byte, so this only trips on an engine that loops).
const MAX_CALLS_PER_STEP: usize = 1_000_000;
/// Total iterations of the event loop.
const MAX_ITERATIONS: u64 = 5_000_000;

/// Extra, non-semantic options of a run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Write `<dir>/<family>-<seed>-{a,b}.pcap` (`<family>-<seed>-<ip>-…`
    /// for IPv6 and dual-stack scenarios): the frames each host sent and
    /// received (virtual timestamps).
    pub pcap_dir: Option<PathBuf>,
}

/// Summary of a successful run.
#[derive(Debug, Clone)]
pub struct Report {
    /// Virtual time when everything was closed and released.
    pub virtual_time: Duration,
    /// Virtual time when the last application closed its socket.
    pub apps_done_at: Duration,
    pub iterations: u64,
    pub bytes_delivered: u64,
    pub ab: LinkCounters,
    pub ba: LinkCounters,
    pub retrans_segs: u64,
    /// The largest IPv4 and IPv6 packet sent (IP header included; 0 when
    /// none), never above the MTU.
    pub largest_packet: [usize; 2],
    /// Each host's counters at the end (A, B): what the engines dropped
    /// and why (`tcp.InCsumErrors`, ...), per family (`ip`, `ip6`).
    pub counters: [Counters; 2],
}

/// A run that broke a property.
#[derive(Debug, Clone)]
pub struct Failure {
    pub family: crate::Family,
    pub ip: IpMode,
    pub seed: u64,
    pub at: Duration,
    pub what: String,
    /// Application view of every endpoint.
    pub endpoints: Vec<String>,
    /// The last frames on the link.
    pub trace: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = match self.ip {
            IpMode::V4 => String::new(),
            m => format!(" {m}"),
        };
        writeln!(
            f,
            "simulation {} seed {}{ip} failed at {:?}: {}",
            self.family, self.seed, self.at, self.what
        )?;
        writeln!(f, "endpoints:")?;
        for e in &self.endpoints {
            writeln!(f, "  {e}")?;
        }
        writeln!(f, "last frames (time, sender):")?;
        for t in &self.trace {
            writeln!(f, "  {t}")?;
        }
        write!(
            f,
            "replay: USTACK_SIM_REPLAY='{} {}{ip}' cargo test -p ustack-sim --test props replay",
            self.family, self.seed
        )
    }
}

struct TraceRing {
    frames: VecDeque<(Instant, u8, usize, [u8; TRACE_BYTES])>,
    /// The largest IPv4 and IPv6 packet (without the Ethernet header)
    /// either host sent.
    largest: [usize; 2],
}

impl TraceRing {
    fn record(&mut self, now: Instant, side: u8, frame: &[u8]) {
        let family = match frame.get(12..14) {
            Some([0x08, 0x00]) => Some(0),
            Some([0x86, 0xdd]) => Some(1),
            _ => None,
        };
        if let Some(f) = family {
            let len = frame.len().saturating_sub(ETHERNET_HEADER_LEN);
            self.largest[f] = self.largest[f].max(len);
        }
        if self.frames.len() >= TRACE_LEN {
            self.frames.pop_front();
        }
        let mut head = [0u8; TRACE_BYTES];
        let n = frame.len().min(TRACE_BYTES);
        head[..n].copy_from_slice(&frame[..n]);
        self.frames.push_back((now, side, frame.len(), head));
    }

    fn render(&self) -> Vec<String> {
        self.frames
            .iter()
            .map(|(t, side, len, head)| {
                let n = (*len).min(TRACE_BYTES);
                let name = if *side == 0 { "A" } else { "B" };
                format!("{t:?} {name}: {}", summarize(&head[..n]))
            })
            .collect()
    }
}

struct Host {
    stack: Stack,
    port: MemPort,
    listener: TcpHandle,
    pcap: Option<PcapWriter<File>>,
}

struct Endpoint {
    conn: usize,
    client: bool,
    /// 0 = host A, 1 = host B.
    side: usize,
    plan: AppPlan,
    handle: Option<TcpHandle>,
    started: bool,
    tx_key: u64,
    tx_done: u64,
    rx_key: u64,
    rx_total: u64,
    rx_done: u64,
    shut: bool,
    eof: bool,
    closed: bool,
    paused_until: Option<Instant>,
    last_state: Option<State>,
}

impl Endpoint {
    fn describe(&self, hosts: &[Host; 2]) -> String {
        let status = self
            .handle
            .map(|h| match hosts[self.side].stack.tcp_status(h) {
                Ok(s) => format!(
                    "{:?} sendq {} recvq {} err {:?}",
                    s.state, s.send_queue, s.recv_queue, s.pending_error
                ),
                Err(e) => format!("status error {e}"),
            })
            .unwrap_or_else(|| "no handle".into());
        format!(
            "conn {} {} on {}: sent {}/{} recv {}/{} shut {} eof {} closed {} paused {:?} [{status}] (last state {:?})",
            self.conn,
            if self.client { "client" } else { "server" },
            if self.side == 0 { "A" } else { "B" },
            self.tx_done,
            self.plan.bytes,
            self.rx_done,
            self.rx_total,
            self.shut,
            self.eof,
            self.closed,
            self.paused_until,
            self.last_state,
        )
    }
}

fn to_instant(d: Duration) -> Instant {
    // Round up: an event at 1.0005 ms must not be polled at 1.000 ms forever.
    let micros = d.as_nanos().div_ceil(1000);
    Instant::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

fn to_duration(t: Instant) -> Duration {
    Duration::from_micros(t.total_micros())
}

fn ip(side: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, 1 + side as u8)
}

fn ip6(side: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1 + side as u16)
}

/// `a` as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
fn mapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(a) => {
            SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
        }
        v6 => v6,
    }
}

/// Host `side`'s address for a connection of the given family.
fn addr(side: usize, ipv6: bool, port: u16) -> SocketAddr {
    if ipv6 {
        SocketAddr::V6(SocketAddrV6::new(ip6(side), port, 0, 0))
    } else {
        SocketAddr::V4(SocketAddrV4::new(ip(side), port))
    }
}

fn stack_config(side: usize, tcp: &TcpConfig, mtu: usize, seed: u64) -> Config {
    let mut secret = [0u8; 16];
    secret[..8].copy_from_slice(&stream::mix(seed ^ side as u64).to_le_bytes());
    secret[8..].copy_from_slice(&stream::mix(seed.wrapping_add(99 + side as u64)).to_le_bytes());
    Config {
        mac: MacAddr([0x02, 0, 0, 0, 0, 1 + side as u8]),
        addr: Ipv4Cidr {
            address: ip(side),
            prefix_len: 24,
        },
        gateway: None,
        mtu,
        tcp: tcp.clone(),
        limits: Limits::default(),
        secret,
        seed: stream::mix(seed ^ (0x5eed << side)),
    }
}

struct World {
    sc: Scenario,
    /// The listeners are dual-stack `[::]:SERVER_PORT`: IPv4 peers are
    /// reported as IPv4-mapped addresses.
    dual_listeners: bool,
    now: Instant,
    hosts: [Host; 2],
    eps: Vec<Endpoint>,
    rng: ChaCha8Rng,
    trace: TraceRing,
    rxbuf: Vec<u8>,
    iobuf: Vec<u8>,
    bytes_delivered: u64,
}

type Fail = String;

impl World {
    fn new(sc: &Scenario, opts: &RunOptions) -> Result<World, Fail> {
        let (pa, pb) = memlink::pair(sc.ab.clone(), sc.ba.clone(), sc.seed);
        let now = Instant::ZERO;
        let mut hosts = Vec::with_capacity(2);
        let any_v6 = sc.conns.iter().any(|c| c.ipv6);
        let any_v4 = sc.conns.iter().any(|c| !c.ipv6);
        let dual_listeners = any_v6 && any_v4;
        for (side, port) in [pa, pb].into_iter().enumerate() {
            let tcp = if side == 0 { &sc.tcp_a } else { &sc.tcp_b };
            let mut stack = Stack::new(stack_config(side, tcp, sc.mtu, sc.seed), now);
            // IPv6 only when a connection uses it, so that IPv4 scenarios
            // run exactly as they did before IPv6 was simulated.
            if any_v6 {
                stack
                    .add_ipv6_address(Ipv6Cidr {
                        address: ip6(side),
                        prefix_len: 64,
                    })
                    .map_err(|e| format!("add_ipv6_address on host {side}: {e:?}"))?;
            }
            let local = if dual_listeners {
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, SERVER_PORT, 0, 0))
            } else {
                addr(side, any_v6, SERVER_PORT)
            };
            let listener = stack
                .tcp_listen_addr(local, 64)
                .map_err(|e| format!("tcp_listen on host {side} {local}: {e}"))?;
            let pcap = match &opts.pcap_dir {
                Some(dir) => {
                    let ip = match sc.ip {
                        IpMode::V4 => String::new(),
                        m => format!("-{m}"),
                    };
                    let path = dir.join(format!(
                        "{}-{}{ip}-{}.pcap",
                        sc.family,
                        sc.seed,
                        if side == 0 { "a" } else { "b" }
                    ));
                    Some(PcapWriter::create(&path).map_err(|e| e.to_string())?)
                }
                None => None,
            };
            hosts.push(Host {
                stack,
                port: port.with_mtu(sc.mtu),
                listener,
                pcap,
            });
        }
        let hosts: [Host; 2] = hosts.try_into().map_err(|_| "two hosts".to_string())?;
        let mut eps = Vec::with_capacity(sc.conns.len() * 2);
        for (c, plan) in sc.conns.iter().enumerate() {
            let ckey = stream::mix(sc.seed ^ ((c as u64) << 32) ^ 1);
            let skey = stream::mix(sc.seed ^ ((c as u64) << 32) ^ 2);
            let cside = if plan.client_on_a { 0 } else { 1 };
            for client in [true, false] {
                let (p, side, tx_key, rx_key, rx_total) = if client {
                    (&plan.client, cside, ckey, skey, plan.server.bytes)
                } else {
                    (&plan.server, 1 - cside, skey, ckey, plan.client.bytes)
                };
                eps.push(Endpoint {
                    conn: c,
                    client,
                    side,
                    plan: p.clone(),
                    handle: None,
                    started: false,
                    tx_key,
                    tx_done: 0,
                    rx_key,
                    rx_total,
                    rx_done: 0,
                    shut: false,
                    eof: false,
                    closed: false,
                    paused_until: None,
                    last_state: None,
                });
            }
        }
        Ok(World {
            sc: sc.clone(),
            dual_listeners,
            now,
            hosts,
            eps,
            rng: ChaCha8Rng::seed_from_u64(sc.seed.wrapping_mul(3) ^ 0xa99),
            trace: TraceRing {
                frames: VecDeque::with_capacity(TRACE_LEN),
                largest: [0; 2],
            },
            rxbuf: vec![0; 65536 + 64],
            iobuf: vec![0; 65536],
            bytes_delivered: 0,
        })
    }

    /// Deliver due frames and run both stacks' timers at `now`.
    fn network(&mut self) -> Result<(), Fail> {
        let now = self.now;
        let World {
            hosts,
            trace,
            rxbuf,
            ..
        } = self;
        for (side, host) in hosts.iter_mut().enumerate() {
            host.port.set_now(to_duration(now));
            let Host {
                stack, port, pcap, ..
            } = host;
            let mut frames = 0;
            while let Ok(Some(n)) = port.recv(rxbuf) {
                let frame = rxbuf.get(..n).unwrap_or_default();
                if let Some(p) = pcap.as_mut() {
                    let _ = p.write_frame(to_duration(now), frame);
                }
                stack.receive(now, frame, &mut |f| emit(trace, pcap, port, now, side, f));
                frames += 1;
                if frames > 100_000 {
                    return Err("more than 100000 frames at one instant".into());
                }
            }
            Self::poll_host(now, side, stack, port, pcap, trace);
        }
        Ok(())
    }

    fn poll_host(
        now: Instant,
        side: usize,
        stack: &mut Stack,
        port: &mut MemPort,
        pcap: &mut Option<PcapWriter<File>>,
        trace: &mut TraceRing,
    ) {
        for _ in 0..64 {
            stack.poll(now, &mut |f| emit(trace, pcap, port, now, side, f));
            if stack.poll_at().is_none_or(|t| t > now) {
                break;
            }
        }
    }

    fn poll_all(&mut self) {
        let now = self.now;
        let World { hosts, trace, .. } = self;
        for (side, host) in hosts.iter_mut().enumerate() {
            let Host {
                stack, port, pcap, ..
            } = host;
            Self::poll_host(now, side, stack, port, pcap, trace);
        }
    }

    /// Accept pending connections on both listeners and match them to plans.
    fn accept(&mut self) -> Result<(), Fail> {
        for side in 0..2 {
            loop {
                let host = &mut self.hosts[side];
                let h = match host.stack.tcp_accept(host.listener) {
                    Ok(Some(h)) => h,
                    Ok(None) => break,
                    Err(e) => return Err(format!("tcp_accept on host {side}: {e}")),
                };
                let st = host
                    .stack
                    .tcp_status(h)
                    .map_err(|e| format!("tcp_status of accepted socket: {e}"))?;
                let remote = st.remote;
                let conn = remote
                    .port()
                    .checked_sub(CLIENT_PORT_BASE)
                    .map(usize::from)
                    .filter(|&c| c < self.sc.conns.len())
                    .ok_or_else(|| {
                        format!("host {side} accepted a connection from unexpected {remote:?}")
                    })?;
                let ep = &mut self.eps[2 * conn + 1];
                if ep.side != side || ep.handle.is_some() || ep.closed {
                    return Err(format!(
                        "conn {conn}: unexpected second accept on host {side} from {remote:?}"
                    ));
                }
                let peer = if self.sc.conns[conn].ipv6 {
                    IpAddr::V6(ip6(1 - side))
                } else if self.dual_listeners {
                    IpAddr::V6(ip(1 - side).to_ipv6_mapped())
                } else {
                    IpAddr::V4(ip(1 - side))
                };
                if remote.ip() != peer {
                    return Err(format!(
                        "conn {conn}: accepted from wrong address {remote:?}"
                    ));
                }
                if ep.plan.nodelay {
                    host.stack
                        .tcp_set_nodelay(h, true)
                        .map_err(|e| format!("set_nodelay: {e}"))?;
                }
                ep.handle = Some(h);
                ep.started = true;
            }
        }
        Ok(())
    }

    /// Run every application that is not paused.
    fn apps(&mut self) -> Result<(), Fail> {
        for i in 0..self.eps.len() {
            self.app_step(i)?;
        }
        Ok(())
    }

    fn app_step(&mut self, i: usize) -> Result<(), Fail> {
        let now = self.now;
        let World {
            hosts,
            eps,
            rng,
            iobuf,
            sc,
            bytes_delivered,
            dual_listeners,
            ..
        } = self;
        let ep = &mut eps[i];
        if ep.closed {
            return Ok(());
        }
        if let Some(t) = ep.paused_until {
            if t > now {
                return Ok(());
            }
            ep.paused_until = None;
        }
        let side = ep.side;
        let stack = &mut hosts[side].stack;
        let conn = ep.conn;
        let err = |what: &str, e: TcpError| {
            format!(
                "conn {conn} {}: {what}: {e:?}",
                if ep.client { "client" } else { "server" }
            )
        };
        if ep.client && !ep.started {
            let start = to_instant(sc.conns[conn].start);
            if now < start {
                return Ok(());
            }
            let v6 = sc.conns[conn].ipv6;
            let mut remote = addr(1 - side, v6, SERVER_PORT);
            let mut local = addr(side, v6, CLIENT_PORT_BASE + conn as u16);
            // Dual stack: about half the IPv4 clients are IPv6 sockets
            // connecting to IPv4-mapped addresses (IPv4 on the wire).
            if !v6 && *dual_listeners && stream::mix(sc.seed ^ conn as u64 ^ 0x6d61_7070) & 1 == 1 {
                remote = mapped(remote);
                local = mapped(local);
            }
            let h = stack
                .tcp_connect_addr(now, remote, Some(local))
                .map_err(|e| format!("conn {conn}: tcp_connect to {remote}: {e}"))?;
            // The socket reports its peer in its own family, as connected.
            match stack.tcp_addrs(h) {
                Ok((_, r)) if r == remote => {}
                other => {
                    return Err(format!(
                        "conn {conn}: connected to {remote}, addrs {other:?}"
                    ))
                }
            }
            if ep.plan.nodelay {
                stack
                    .tcp_set_nodelay(h, true)
                    .map_err(|e| err("set_nodelay", e))?;
            }
            ep.handle = Some(h);
            ep.started = true;
            return Ok(());
        }
        let Some(h) = ep.handle else { return Ok(()) };
        let st = stack.tcp_status(h).map_err(|e| err("tcp_status", e))?;
        ep.last_state = Some(st.state);
        if let Some(e) = st.pending_error {
            return Err(err("connection error", e));
        }
        if matches!(st.state, State::SynSent | State::SynReceived) {
            return Ok(());
        }
        // A socket may reach Closed (LAST-ACK acknowledged) with data still
        // unread: as on Linux, that data and then EOF remain readable.

        // Write until the send buffer is full (an event-driven application;
        // slowness comes from pauses, not from doing a little per wake-up).
        for _ in 0..MAX_CALLS_PER_STEP {
            let remaining = ep.plan.bytes - ep.tx_done;
            if ep.shut || remaining == 0 {
                break;
            }
            let max = (ep.plan.max_write as u64)
                .min(remaining)
                .min(iobuf.len() as u64) as usize;
            let len = rng.gen_range(1..=max);
            let buf = &mut iobuf[..len];
            stream::fill(ep.tx_key, ep.tx_done, buf);
            match stack.tcp_send(h, buf) {
                Ok(0) | Err(TcpError::WouldBlock) => break,
                Ok(n) if n <= len => ep.tx_done += n as u64,
                Ok(n) => return Err(format!("conn {conn}: tcp_send accepted {n} of {len} bytes")),
                Err(e) => return Err(err("tcp_send", e)),
            }
        }
        if ep.plan.ending == Ending::ShutdownThenClose && !ep.shut && ep.tx_done == ep.plan.bytes {
            stack.tcp_shutdown(h).map_err(|e| err("tcp_shutdown", e))?;
            ep.shut = true;
        }

        // Read until nothing is left.
        for _ in 0..MAX_CALLS_PER_STEP {
            if ep.eof {
                break;
            }
            let len = rng.gen_range(1..=ep.plan.max_read.min(iobuf.len()));
            match stack.tcp_recv(h, &mut iobuf[..len]) {
                Ok(0) => {
                    if ep.rx_done != ep.rx_total {
                        return Err(format!(
                            "conn {conn}: EOF after {} of {} bytes",
                            ep.rx_done, ep.rx_total
                        ));
                    }
                    ep.eof = true;
                }
                Ok(n) if n <= len => {
                    let data = &iobuf[..n];
                    if ep.rx_done + n as u64 > ep.rx_total {
                        return Err(format!(
                            "conn {conn}: received {} bytes, more than the {} sent",
                            ep.rx_done + n as u64,
                            ep.rx_total
                        ));
                    }
                    if let Some(off) = stream::first_mismatch(ep.rx_key, ep.rx_done, data) {
                        return Err(format!(
                            "conn {conn}: data mismatch at stream offset {} (read of {n} bytes at {})",
                            ep.rx_done + off as u64,
                            ep.rx_done
                        ));
                    }
                    ep.rx_done += n as u64;
                    *bytes_delivered += n as u64;
                }
                Ok(n) => return Err(format!("conn {conn}: tcp_recv returned {n} > buffer {len}")),
                Err(TcpError::WouldBlock) => break,
                Err(e) => return Err(err("tcp_recv", e)),
            }
        }

        // Close.
        let done = match ep.plan.ending {
            Ending::ShutdownThenClose => ep.shut && ep.eof,
            Ending::Close => ep.tx_done == ep.plan.bytes && ep.rx_done == ep.rx_total,
        };
        if done {
            stack.tcp_close(h);
            ep.closed = true;
            ep.handle = None;
            return Ok(());
        }
        if ep.plan.pause_prob > 0.0 && rng.gen_bool(ep.plan.pause_prob.min(1.0)) {
            let max = u64::try_from(ep.plan.max_pause.as_micros()).unwrap_or(u64::MAX);
            ep.paused_until = Some(now + Duration::from_micros(rng.gen_range(0..=max)));
        }
        Ok(())
    }

    fn apps_done(&self) -> bool {
        self.eps.iter().all(|e| e.closed)
    }

    /// The next instant something can happen.
    fn next_event(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for h in &self.hosts {
            consider(h.stack.poll_at());
        }
        consider(self.hosts[0].port.next_event().map(to_instant));
        for e in &self.eps {
            if e.closed {
                continue;
            }
            consider(e.paused_until);
            if e.client && !e.started {
                consider(Some(to_instant(self.sc.conns[e.conn].start)));
            }
        }
        next
    }

    fn run(&mut self) -> Result<Report, Fail> {
        let mut iterations = 0u64;
        let mut same_instant = 0u32;
        let mut apps_done_at = None;
        let max_time = to_instant(self.sc.max_time);
        loop {
            iterations += 1;
            if iterations > MAX_ITERATIONS {
                return Err(format!("more than {MAX_ITERATIONS} event-loop iterations"));
            }
            self.network()?;
            self.accept()?;
            self.apps()?;
            // Let what the applications queued leave at this instant.
            self.poll_all();
            if apps_done_at.is_none() && self.apps_done() {
                apps_done_at = Some(self.now);
            }
            let Some(next) = self.next_event() else {
                if apps_done_at.is_some() {
                    break;
                }
                return Err("deadlock: nothing scheduled but applications are not done".into());
            };
            if next <= self.now {
                same_instant += 1;
                if same_instant > MAX_SAME_INSTANT {
                    return Err(format!(
                        "livelock: {MAX_SAME_INSTANT} iterations without time advancing"
                    ));
                }
            } else {
                same_instant = 0;
                self.now = next;
            }
            if self.now > max_time {
                return Err(format!(
                    "not finished within {:?} of virtual time",
                    self.sc.max_time
                ));
            }
        }
        // Everything closed and quiet: only the listeners may remain.
        for (f, name) in ["IPv4", "IPv6"].into_iter().enumerate() {
            // The link refuses (and counts, below) frames above its MTU;
            // this names the family whose packets did not fit, headers (20
            // or 40 bytes) included.
            if self.trace.largest[f] > self.sc.mtu {
                return Err(format!(
                    "an {name} packet of {} bytes exceeds the {}-byte MTU",
                    self.trace.largest[f], self.sc.mtu
                ));
            }
        }
        for (side, host) in self.hosts.iter().enumerate() {
            for info in host.stack.tcp_sockets() {
                if info.state != State::Listen {
                    return Err(format!(
                        "host {side}: socket left behind after the run: {info:?}"
                    ));
                }
            }
            let oversize = host.port.tx_counters().oversize;
            if oversize > 0 {
                return Err(format!(
                    "host {side} sent {oversize} frames larger than the MTU"
                ));
            }
        }
        for e in &self.eps {
            if e.rx_done != e.rx_total || e.tx_done != e.plan.bytes {
                return Err(format!("conn {}: incomplete transfer", e.conn));
            }
        }
        let retrans = self
            .hosts
            .iter()
            .map(|h| h.stack.counters().tcp.RetransSegs)
            .sum();
        Ok(Report {
            virtual_time: to_duration(self.now),
            apps_done_at: to_duration(apps_done_at.unwrap_or(self.now)),
            iterations,
            bytes_delivered: self.bytes_delivered,
            ab: self.hosts[0].port.tx_counters(),
            ba: self.hosts[1].port.tx_counters(),
            retrans_segs: retrans,
            largest_packet: self.trace.largest,
            counters: [
                self.hosts[0].stack.counters().clone(),
                self.hosts[1].stack.counters().clone(),
            ],
        })
    }

    fn failure(&self, what: String) -> Failure {
        Failure {
            family: self.sc.family,
            ip: self.sc.ip,
            seed: self.sc.seed,
            at: to_duration(self.now),
            what,
            endpoints: self.eps.iter().map(|e| e.describe(&self.hosts)).collect(),
            trace: self.trace.render(),
        }
    }
}

fn emit(
    trace: &mut TraceRing,
    pcap: &mut Option<PcapWriter<File>>,
    port: &mut MemPort,
    now: Instant,
    side: usize,
    frame: &[u8],
) {
    trace.record(now, side as u8, frame);
    if let Some(p) = pcap.as_mut() {
        let _ = p.write_frame(to_duration(now), frame);
    }
    // Oversized frames are refused and counted; checked at the end of the run.
    let _ = port.send(frame);
}

/// Run a scenario; `Err` describes the first property it broke.
pub fn run(sc: &Scenario) -> Result<Report, Failure> {
    run_with(sc, &RunOptions::default())
}

/// [`run`] with extra options (captures).
pub fn run_with(sc: &Scenario, opts: &RunOptions) -> Result<Report, Failure> {
    let mut world = match World::new(sc, opts) {
        Ok(w) => w,
        Err(what) => {
            return Err(Failure {
                family: sc.family,
                ip: sc.ip,
                seed: sc.seed,
                at: Duration::ZERO,
                what,
                endpoints: Vec::new(),
                trace: Vec::new(),
            })
        }
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| world.run()));
    match outcome {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(what)) => Err(world.failure(what)),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            let mut what = String::new();
            let _ = write!(what, "panic: {msg}");
            Err(world.failure(what))
        }
    }
}
