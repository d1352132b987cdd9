//! The relay engine: guest flows terminated by a [`GuestStack`] are relayed
//! through ordinary host sockets driven by one epoll loop.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::guest::{
    ConnError, ConnId, EchoRequest, GuestStack, PendingSyn, Refusal, SynId, Unreachable,
};
use crate::limits::{Limits, Timeouts, TokenBucket};
use crate::portfwd::{PortForward, Proto};
use crate::stats::Stats;
use crate::sys::{self, Epoll, EV_ERR, EV_ET, EV_IN, EV_OUT, EV_PRI, EV_RDHUP};

/// How the relay maps the guest's view of the world onto the host.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The guest's address (target of inbound forwards). Default 10.0.2.15.
    pub guest_addr: Ipv4Addr,
    /// The gateway; answers ping, and connections to it go to the host's
    /// 127.0.0.1 (when `gateway_to_loopback`). Default 10.0.2.2.
    pub gateway: Ipv4Addr,
    pub gateway_to_loopback: bool,
    /// Guest-visible nameserver (default 10.0.2.3); port 53 goes to `host_dns`.
    pub dns: Option<Ipv4Addr>,
    pub host_dns: SocketAddr,
    /// The guest's IPv6 address (target of inbound IPv6 forwards; default
    /// fd00::100). None: IPv6 is off, flows to IPv6 destinations are
    /// refused.
    pub guest_addr6: Option<Ipv6Addr>,
    /// The gateway's IPv6 address (default fd00::2): as `gateway`, answers
    /// ping and leads to the host's ::1 (when `gateway_to_loopback`).
    pub gateway6: Ipv6Addr,
    /// Guest-visible IPv6 nameserver (default fd00::3); port 53 goes to
    /// `host_dns` as for the IPv4 one.
    pub dns6: Option<Ipv6Addr>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub forwards: Vec<PortForward>,
    /// Relay ICMP echo to other hosts through unprivileged ping sockets.
    pub icmp_ping_sockets: bool,
    /// After activity, poll for events without sleeping for up to this
    /// long before blocking (like Linux's `net.core.busy_poll`): lower
    /// request/response latency, one CPU kept busy while traffic flows.
    /// None (the default) sleeps at once.
    pub busy_poll: Option<Duration>,
    /// Host sockets the guest may never reach (the metrics endpoint): an
    /// unspecified address stands for the loopback and every address of
    /// the host; a loopback target of either family with a denied port is
    /// refused.
    pub deny: Vec<SocketAddr>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            guest_addr: Ipv4Addr::new(10, 0, 2, 15),
            gateway: Ipv4Addr::new(10, 0, 2, 2),
            gateway_to_loopback: true,
            dns: Some(Ipv4Addr::new(10, 0, 2, 3)),
            host_dns: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53),
            guest_addr6: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100)),
            gateway6: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            dns6: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3)),
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            forwards: Vec::new(),
            icmp_ping_sockets: true,
            busy_poll: None,
            deny: Vec::new(),
        }
    }
}

const TOKEN_GUEST: u64 = 0;
const TOKEN_STOP: u64 = 1;
/// The control endpoint's doorbell (`set_control`).
const TOKEN_CONTROL: u64 = 2;
const TOKEN_LISTENER0: u64 = 16;
const FIRST_FLOW: u64 = 1 << 20;
const SCRATCH: usize = 64 * 1024;
/// Rounds of "guest to host, host to guest" per pump of one flow before
/// other flows get their turn (the flow stays dirty if it could go on).
const PUMP_PASSES: usize = 8;
/// How long a guest SYN that found every half-open slot taken waits for
/// one to free up before it is refused (the guest's first SYN
/// retransmission comes after 1 s).
const SYN_WAIT: Duration = Duration::from_secs(1);
/// How many SYNs may wait so, per half-open slot.
const SYN_WAIT_PER_SLOT: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TcpPhase {
    /// Guest SYN held; host connect in progress.
    HostConnecting(SynId),
    /// Inbound forward: host peer accepted; guest handshake in progress.
    GuestConnecting,
    Established,
}

/// A TCP flow holds no bytes of its own: guest to host, the guest stack's
/// receive buffer is lent to `send(2)` on the host socket; host to guest,
/// its send buffer is lent to `recv(2)` (see [`Relay::pump_tcp`]).
#[derive(Debug)]
struct TcpFlow {
    phase: TcpPhase,
    conn: Option<ConnId>,
    readable: bool,
    writable: bool,
    /// The host socket reported the peer's FIN, a hang-up, an error or
    /// urgent data (EPOLLRDHUP, EPOLLHUP, EPOLLERR, EPOLLPRI): read it until
    /// it says so itself.
    /// Before that, a read that leaves room means the socket is empty, and
    /// the next data or FIN comes with a new edge (EPOLLET), which saves
    /// the read that would find nothing (one system call per exchange of a
    /// request/response flow).
    host_hup: bool,
    guest_eof: bool,
    host_eof: bool,
    host_wr_shut: bool,
    guest_shut: bool,
    /// Queued in the relay's dirty list (to be pumped this iteration).
    dirty: bool,
    /// Waiting for the buffer budget (global, or the flow's own below the
    /// guest's send buffer) to free up.
    cap_blocked: bool,
}

impl TcpFlow {
    fn new(phase: TcpPhase, conn: Option<ConnId>, host_ready: bool) -> TcpFlow {
        TcpFlow {
            phase,
            conn,
            readable: host_ready,
            writable: host_ready,
            host_hup: false,
            guest_eof: false,
            host_eof: false,
            host_wr_shut: false,
            guest_shut: false,
            dirty: false,
            cap_blocked: false,
        }
    }
}

#[derive(Debug)]
enum Kind {
    Tcp(Box<TcpFlow>),
    /// Outbound UDP flow: own connected socket; replies appear from `dst`.
    Udp {
        guest: SocketAddr,
        dst: SocketAddr,
        /// Payload length of the latest datagram relayed to the host: the
        /// one an ICMP error the host socket reports most likely answers
        /// (quoted in the unreachable the guest gets for it).
        last_len: usize,
    },
    /// Inbound UDP forward: replies go out of listener `listener` to `peer`.
    UdpIn {
        listener: usize,
        peer: SocketAddr,
        guest: SocketAddr,
        apparent: SocketAddr,
    },
    /// ICMP echo through a ping socket.
    Icmp {
        guest: IpAddr,
        dst: IpAddr,
        ident: u16,
    },
}

#[derive(Debug)]
struct Flow {
    kind: Kind,
    sock: Option<OwnedFd>,
    started: Instant,
    last_active: Instant,
}

#[derive(Debug)]
struct Listener {
    fwd: PortForward,
    sock: OwnedFd,
    /// Connections through it reach the guest over IPv6.
    guest_v6: bool,
}

/// Why [`Relay::run_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The stop descriptor became readable (e.g. the sandboxed command exited).
    StopFd,
    /// The iteration/time bound was reached.
    Bound,
    /// The guest's device is gone for good: its interface was deleted
    /// (reads of the TAP answer `EBADFD`). Nothing more can be relayed.
    GuestGone,
}

/// Whether an error of the relay's step says the guest's device is gone
/// for good (a TAP whose interface was deleted answers `EBADFD`).
fn guest_gone(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EBADFD)
}

/// The relay over a guest-side stack `G`.
pub struct Relay<G: GuestStack> {
    guest: G,
    cfg: RelayConfig,
    epoll: Epoll,
    flows: HashMap<u64, Flow>,
    udp_index: HashMap<(SocketAddr, SocketAddr), u64>,
    udp_in_index: HashMap<(usize, SocketAddr), u64>,
    icmp_index: HashMap<(IpAddr, IpAddr, u16), u64>,
    /// Port-forward listeners; a removed one leaves `None` (its index is
    /// its epoll token and inbound UDP flows refer to it).
    listeners: Vec<Option<Listener>>,
    stats: Stats,
    bucket: TokenBucket,
    half_open: usize,
    /// Guest SYNs waiting for a half-open slot, oldest first, each with
    /// the time it is refused if none has freed up by then.
    syn_wait: VecDeque<(PendingSyn, Instant)>,
    next_id: u64,
    scratch: Vec<u8>,
    /// An echo request on its way to a ping socket (header and data).
    echo_out: Vec<u8>,
    ping_allowed: Option<bool>,
    events: Vec<libc::epoll_event>,
    ready: Vec<(u64, u32)>,
    next_udp_in_port: u16,
    /// Guest connection -> flow id (for the guest's readiness events).
    conn_flow: HashMap<ConnId, u64>,
    /// TCP flows to pump in this iteration (each flagged `dirty`).
    dirty: Vec<u64>,
    /// TCP flows waiting for the buffer budget (flagged `cap_blocked`).
    cap_blocked: Vec<u64>,
    /// Scratch for the guest's events.
    conn_events: Vec<ConnId>,
    /// Flow deadlines (idle, connect, half-closed), lazily: an entry that
    /// fires early is re-filed at the flow's real deadline.
    expiry: BinaryHeap<Reverse<(Instant, u64)>>,
    /// When the last wait found events (for `RelayConfig::busy_poll`).
    last_active: Instant,
    /// The control endpoint's queries (`set_control`).
    control: Option<crate::control::ControlLink>,
    /// The host's own addresses (for `RelayConfig::deny`).
    host_addrs: Vec<IpAddr>,
}

/// Most port-forward listeners a relay holds at once.
const MAX_FORWARDS: usize = 4096;

/// The bound (and, for TCP, listening) host sockets for `fwd`, each with
/// whether it reaches the guest over IPv6. The implicit ::1 of a forward
/// without a host address is skipped where the host has no IPv6.
fn open_listeners(fwd: &PortForward) -> io::Result<Vec<(OwnedFd, bool)>> {
    let ty = match fwd.proto {
        Proto::Tcp => libc::SOCK_STREAM,
        Proto::Udp => libc::SOCK_DGRAM,
    };
    let mut out = Vec::new();
    for (ip, guest_v6) in fwd.binds() {
        let at = SocketAddr::new(ip, fwd.host_port);
        let implicit = fwd.host_ip.is_none() && ip.is_ipv6();
        let opened = sys::socket_for(&at, ty, 0).and_then(|sock| {
            if ip.is_ipv6() {
                // `[::]` is IPv6 only, beside a `0.0.0.0` forward of the
                // same port (as pasta and Docker bind the two).
                sys::set_int_opt(&sock, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
            }
            sys::bind(&sock, at)?;
            if fwd.proto == Proto::Tcp {
                sys::listen(&sock, 128)?;
            }
            Ok(sock)
        });
        match opened {
            Ok(sock) => out.push((sock, guest_v6)),
            Err(e)
                if implicit
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL)
                    ) => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("port forward {fwd}: cannot bind {at}: {e}"),
                ))
            }
        }
    }
    Ok(out)
}

/// Whether `ip` is a guest-visible nameserver.
fn is_dns(cfg: &RelayConfig, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => Some(a) == cfg.dns,
        IpAddr::V6(a) => Some(a) == cfg.dns6,
    }
}

/// What a host UDP socket's error tells the guest: ICMP destination
/// unreachable with this code, or nothing (not an ICMP error).
fn udp_unreachable_for(e: &io::Error) -> Option<Unreachable> {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => Some(Unreachable::Port),
        Some(libc::ENETUNREACH) => Some(Unreachable::Net),
        Some(libc::EHOSTUNREACH) | Some(libc::EHOSTDOWN) => Some(Unreachable::Host),
        Some(libc::EACCES) | Some(libc::EPERM) => Some(Unreachable::AdminProhibited),
        _ => None,
    }
}

/// `ports remove f` found nothing to remove among the listeners'
/// forwards `here`: say so, naming what `f`'s host port does forward, so
/// that a wrong guest port is told apart from a wrong host port. A
/// forward listens on 127.0.0.1 and ::1, in slots that need not be next
/// to each other (slots are reused): each is named once.
fn no_such_forward<'a>(f: &PortForward, here: impl Iterator<Item = &'a PortForward>) -> String {
    let proto = match f.proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    };
    let there: std::collections::BTreeSet<String> = here
        .filter(|h| h.proto == f.proto && h.host_port == f.host_port)
        .map(|h| h.to_string())
        .collect();
    if there.is_empty() {
        format!("no port forward on host port {}/{proto}", f.host_port)
    } else {
        let there: Vec<String> = there.into_iter().collect();
        format!(
            "no port forward {f}; host port {}/{proto} forwards {}",
            f.host_port,
            there.join(", ")
        )
    }
}

fn unreachable_for(e: &io::Error) -> Refusal {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => Refusal::Reset,
        Some(libc::ENETUNREACH) => Refusal::Unreachable(Unreachable::Net),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            Refusal::Unreachable(Unreachable::AdminProhibited)
        }
        Some(libc::EHOSTUNREACH) | Some(libc::ETIMEDOUT) | Some(libc::EHOSTDOWN) => {
            Refusal::Unreachable(Unreachable::Host)
        }
        _ => Refusal::Reset,
    }
}

impl<G: GuestStack> Relay<G> {
    /// A relay over `guest`; binds the port-forward listeners.
    pub fn new(guest: G, cfg: RelayConfig) -> io::Result<Relay<G>> {
        let epoll = Epoll::new()?;
        if let Some(fd) = guest.raw_fd() {
            epoll.add(fd, EV_IN, TOKEN_GUEST)?;
        }
        let mut listeners = Vec::new();
        for fwd in &cfg.forwards {
            for (sock, guest_v6) in open_listeners(fwd)? {
                let token = TOKEN_LISTENER0 + listeners.len() as u64;
                epoll.add(sock.as_raw_fd(), EV_IN, token)?;
                listeners.push(Some(Listener {
                    fwd: *fwd,
                    sock,
                    guest_v6,
                }));
            }
        }
        let bucket = TokenBucket::new(cfg.limits.new_flows_per_sec);
        let cfg_has_deny = !cfg.deny.is_empty();
        Ok(Relay {
            guest,
            cfg,
            epoll,
            flows: HashMap::new(),
            udp_index: HashMap::new(),
            udp_in_index: HashMap::new(),
            icmp_index: HashMap::new(),
            listeners,
            stats: Stats::default(),
            bucket,
            half_open: 0,
            syn_wait: VecDeque::new(),
            next_id: FIRST_FLOW,
            scratch: vec![0; SCRATCH],
            echo_out: Vec::new(),
            ping_allowed: None,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
            ready: Vec::with_capacity(256),
            next_udp_in_port: 0,
            conn_flow: HashMap::new(),
            dirty: Vec::new(),
            cap_blocked: Vec::new(),
            conn_events: Vec::new(),
            expiry: BinaryHeap::new(),
            last_active: Instant::now(),
            control: None,
            host_addrs: if cfg_has_deny {
                sys::host_addrs()
            } else {
                Vec::new()
            },
        })
    }

    /// Answer the control endpoint's queries arriving on `link` (see
    /// `control.rs`) between iterations.
    pub fn set_control(&mut self, link: crate::control::ControlLink) -> io::Result<()> {
        self.epoll.add(link.bell_fd(), EV_IN, TOKEN_CONTROL)?;
        self.control = Some(link);
        Ok(())
    }

    /// Answer every query the control endpoint posted.
    fn serve_control(&mut self) {
        use crate::control::{Answer, Query};
        let Some(link) = &self.control else {
            return;
        };
        sys::eventfd_clear(link.bell_fd());
        let queries: Vec<_> = link.rx.try_iter().collect();
        for (q, reply) in queries {
            let a = match q {
                Query::Devices => Answer::Devices(self.guest.ctl_devices()),
                Query::Sockets(detail) => Answer::Sockets(self.ctl_sockets(detail)),
                Query::Counters => {
                    let mut c = self.guest.ctl_counters();
                    c.extend(
                        self.stats
                            .named()
                            .into_iter()
                            .map(|(n, v)| (n.to_string(), v)),
                    );
                    Answer::Counters(c)
                }
                Query::Tunables => Answer::Tunables(self.guest.ctl_tunables().map(Box::new)),
                Query::SetTunables(t) => Answer::Set(self.guest.ctl_set_tunables(*t)),
                Query::Ports { add, remove } => Answer::Ports(self.ctl_ports(add, remove)),
            };
            // The asker may have given up (timed out): its answer is dropped.
            let _ = reply.try_send(a);
        }
    }

    /// `ustack ports [add|remove]`.
    fn ctl_ports(
        &mut self,
        add: Option<String>,
        remove: Option<String>,
    ) -> Result<Vec<String>, String> {
        if let Some(spec) = add {
            let f: PortForward = spec.parse()?;
            self.add_forward(f).map_err(|e| e.to_string())?;
        }
        if let Some(spec) = remove {
            let f: PortForward = spec.parse()?;
            if !self.remove_forward(&f) {
                let here = self.listeners.iter().flatten().map(|l| &l.fwd);
                return Err(no_such_forward(&f, here));
            }
        }
        Ok(self
            .forwards()
            .into_iter()
            .map(|(f, a)| format!("{f} (listening on {a})"))
            .collect())
    }

    /// The engine's sockets, each relayed connection with its host socket.
    /// The socket table for `ss`: the guest engine's TCP sockets, each
    /// relayed connection with its host socket, then the relayed UDP flows
    /// (the engine takes UDP on one transparent socket, so they come from
    /// the flow table), oriented as the TCP rows: local is the address the
    /// guest talks to, peer the guest's.
    fn ctl_sockets(&self, detail: bool) -> Vec<ustack_ctl::SocketEntry> {
        let host_of = |s: &OwnedFd| {
            let local = sys::local_addr(s).map_or_else(|_| "?".into(), |a| a.to_string());
            let peer = sys::peer_addr(s).map_or_else(|_| "?".into(), |a| a.to_string());
            format!("{local}->{peer}")
        };
        let mut v: Vec<ustack_ctl::SocketEntry> = self
            .guest
            .ctl_sockets(detail)
            .into_iter()
            .map(|(mut e, conn)| {
                let sock = conn
                    .and_then(|c| self.conn_flow.get(&c))
                    .and_then(|id| self.flows.get(id))
                    .and_then(|f| f.sock.as_ref());
                e.host = sock.map(host_of);
                e
            })
            .collect();
        let mut udp: Vec<ustack_ctl::SocketEntry> = self
            .flows
            .values()
            .filter_map(|f| {
                let (local, peer, host) = match &f.kind {
                    // Its own connected host socket.
                    Kind::Udp { guest, dst, .. } => (*dst, *guest, f.sock.as_ref().map(host_of)),
                    // Inbound through a forward: replies leave by the listener.
                    Kind::UdpIn {
                        listener,
                        peer,
                        guest,
                        apparent,
                    } => {
                        let l = self.listeners.get(*listener).and_then(Option::as_ref);
                        let host = l.map(|l| {
                            let a = sys::local_addr(&l.sock)
                                .map_or_else(|_| "?".into(), |a| a.to_string());
                            format!("{a}->{peer}")
                        });
                        (*apparent, *guest, host)
                    }
                    _ => return None,
                };
                Some(ustack_ctl::SocketEntry {
                    proto: "udp".into(),
                    state: "ESTAB".into(),
                    recv_q: 0,
                    send_q: 0,
                    local: local.to_string(),
                    peer: peer.to_string(),
                    orphan: false,
                    info: None,
                    host,
                })
            })
            .collect();
        udp.sort_by(|a, b| (&a.local, &a.peer).cmp(&(&b.local, &b.peer)));
        v.extend(udp);
        v
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    pub fn guest(&self) -> &G {
        &self.guest
    }
    pub fn guest_mut(&mut self) -> &mut G {
        &mut self.guest
    }
    /// Flows currently held.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }
    /// Bytes the flows hold: what the guest sent and the host socket has
    /// not taken yet, plus what the host sent and the guest has not
    /// acknowledged yet — all of it in the guest stack's TCP buffers (the
    /// relay keeps no queues of its own), as [`GuestStack::tcp_buffered`]
    /// reports it.
    pub fn buffered(&self) -> usize {
        self.guest.tcp_buffered()
    }
    /// Local addresses of the port-forward listeners (useful with port 0).
    pub fn listener_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .flatten()
            .filter_map(|l| sys::local_addr(&l.sock).ok())
            .collect()
    }

    /// The port forwards in force, each with the address it listens on.
    pub fn forwards(&self) -> Vec<(PortForward, SocketAddr)> {
        self.listeners
            .iter()
            .flatten()
            .map(|l| {
                let ip = l.fwd.host_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
                let a = sys::local_addr(&l.sock).unwrap_or(SocketAddr::new(ip, l.fwd.host_port));
                (l.fwd, a)
            })
            .collect()
    }

    /// Add a port forward while running (`ustack ports add`); the first
    /// address it listens on.
    pub fn add_forward(&mut self, fwd: PortForward) -> io::Result<SocketAddr> {
        // Two forwards of one port may listen on the two families
        // (`0.0.0.0:P` and `[::]:P`), not twice on one.
        let same = |l: &Listener| {
            let overlap = match (l.fwd.host_ip, fwd.host_ip) {
                (Some(a), Some(b)) => a.is_ipv6() == b.is_ipv6(),
                _ => true,
            };
            l.fwd.proto == fwd.proto
                && l.fwd.host_port == fwd.host_port
                && fwd.host_port != 0
                && overlap
        };
        if self.listeners.iter().flatten().any(same) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("port forward {fwd}: host port already forwarded"),
            ));
        }
        // Listeners in force; a removed one leaves its slot (and epoll
        // token) free for the next.
        if self.listeners.iter().flatten().count() >= MAX_FORWARDS {
            return Err(io::Error::other(format!(
                "port forward {fwd}: at most {MAX_FORWARDS} forwards per run"
            )));
        }
        let mut first = None;
        for (sock, guest_v6) in open_listeners(&fwd)? {
            let idx = match self.listeners.iter().position(Option::is_none) {
                Some(i) => i,
                None => {
                    self.listeners.push(None);
                    self.listeners.len() - 1
                }
            };
            let token = TOKEN_LISTENER0 + idx as u64;
            self.epoll.add(sock.as_raw_fd(), EV_IN, token)?;
            let a = sys::local_addr(&sock)?;
            first.get_or_insert(a);
            if let Some(slot) = self.listeners.get_mut(idx) {
                *slot = Some(Listener {
                    fwd,
                    sock,
                    guest_v6,
                });
            }
        }
        first.ok_or_else(|| io::Error::other(format!("port forward {fwd}: nothing to bind")))
    }

    /// Remove the port forward listening on `fwd`'s host port to its
    /// guest port (and protocol; and host address when `fwd` names one
    /// other than an unspecified one): every socket it listens on.
    /// Connections it made stay. False if there is none.
    pub fn remove_forward(&mut self, fwd: &PortForward) -> bool {
        let hit = |l: &Listener| {
            l.fwd.proto == fwd.proto
                && l.fwd.host_port == fwd.host_port
                && l.fwd.guest_port == fwd.guest_port
                && match fwd.host_ip {
                    None => true,
                    Some(ip) => ip.is_unspecified() || l.fwd.host_ip == Some(ip),
                }
        };
        let mut removed = false;
        for slot in self.listeners.iter_mut() {
            if slot.as_ref().is_some_and(hit) {
                if let Some(l) = slot.take() {
                    self.epoll.delete(l.sock.as_raw_fd());
                    removed = true;
                }
            }
        }
        removed
    }

    /// Stop [`Relay::run_until`] also when `fd` is readable (as its own
    /// stop descriptor; `fd` must outlive the relay's use of it).
    pub fn stop_also_on(&mut self, fd: RawFd) -> io::Result<()> {
        self.epoll.add(fd, EV_IN, TOKEN_STOP)
    }

    /// Run until `stop_fd` is readable, `max_time` has passed, or the
    /// guest's device is gone ([`Stop::GuestGone`]).
    pub fn run_until(
        &mut self,
        stop_fd: Option<RawFd>,
        max_time: Option<Duration>,
    ) -> io::Result<Stop> {
        if let Some(fd) = stop_fd {
            self.epoll.add(fd, EV_IN, TOKEN_STOP)?;
        }
        let start = Instant::now();
        let result = loop {
            let now = Instant::now();
            if let Some(m) = max_time {
                if now.saturating_duration_since(start) >= m {
                    break Ok(Stop::Bound);
                }
            }
            let mut timeout = self.next_timeout(now);
            if let Some(m) = max_time {
                timeout = timeout.min(m.saturating_sub(now.saturating_duration_since(start)));
            }
            match self.step(Some(timeout)) {
                Ok(true) => break Ok(Stop::StopFd),
                Ok(false) => {}
                Err(e) if guest_gone(&e) => break Ok(Stop::GuestGone),
                Err(e) => break Err(e),
            }
        };
        if let Some(fd) = stop_fd {
            self.epoll.delete(fd);
        }
        result
    }

    /// One iteration: wait for host events (up to `timeout`), then serve the
    /// guest and every flow. Returns true if the stop descriptor fired.
    pub fn step(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut ready = std::mem::take(&mut self.ready);
        let r = self.wait(timeout, &mut ready);
        let mut stop = false;
        let now = Instant::now();
        // Read the guest's device only when epoll says it is readable (or
        // on a timeout, for timers): a wake-up for a host socket would
        // otherwise cost a read(2) that finds nothing. The descriptor is
        // level-triggered, so frames left behind are reported again.
        let guest_rx = ready.is_empty() || ready.iter().any(|&(t, _)| t == TOKEN_GUEST);
        let mut control = false;
        if r.is_ok() {
            for &(token, ev) in &ready {
                match token {
                    TOKEN_GUEST => {}
                    TOKEN_STOP => stop = true,
                    TOKEN_CONTROL => control = true,
                    t if (TOKEN_LISTENER0..FIRST_FLOW).contains(&t) => {
                        self.on_listener(now, (t - TOKEN_LISTENER0) as usize)
                    }
                    id => self.on_host_event(now, id, ev),
                }
            }
        }
        self.ready = ready;
        r?;
        self.service_with(now, guest_rx)?;
        if control {
            self.serve_control();
        }
        Ok(stop)
    }

    /// Wait for events up to `timeout`: with `busy_poll`, first poll
    /// without sleeping while the last activity is recent enough.
    fn wait(&mut self, timeout: Option<Duration>, ready: &mut Vec<(u64, u32)>) -> io::Result<()> {
        if let Some(spin) = self.cfg.busy_poll {
            let start = Instant::now();
            let until = self.last_active + spin;
            let limit = timeout.map(|t| start + t);
            while Instant::now() < until && limit.is_none_or(|l| Instant::now() < l) {
                self.epoll
                    .wait(&mut self.events, Some(Duration::ZERO), ready)?;
                if !ready.is_empty() {
                    self.last_active = Instant::now();
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            if limit.is_some_and(|l| Instant::now() >= l) {
                return Ok(());
            }
        }
        let r = self.epoll.wait(&mut self.events, timeout, ready);
        if !ready.is_empty() {
            self.last_active = Instant::now();
        }
        r
    }

    /// How long the loop may sleep: until the guest's next timer, the next
    /// flow deadline, at once if flows are waiting to be pumped, and at most
    /// a second.
    fn next_timeout(&self, now: Instant) -> Duration {
        if !self.dirty.is_empty() {
            return Duration::ZERO;
        }
        let mut timeout = Duration::from_secs(1);
        if let Some(at) = self.guest.poll_at() {
            timeout = timeout.min(at.saturating_duration_since(now));
        }
        if let Some(Reverse((at, _))) = self.expiry.peek() {
            timeout = timeout.min(at.saturating_duration_since(now));
        }
        if let Some((_, at)) = self.syn_wait.front() {
            timeout = timeout.min(at.saturating_duration_since(now));
        }
        timeout
    }

    /// Queue TCP flow `id` to be pumped in this iteration (once).
    fn mark_dirty(&mut self, id: u64) {
        if let Some(Flow {
            kind: Kind::Tcp(t), ..
        }) = self.flows.get_mut(&id)
        {
            if !t.dirty {
                t.dirty = true;
                self.dirty.push(id);
            }
        }
    }

    /// Serve the guest: poll it, take new flows, pump the TCP flows that
    /// have something to do (events from the guest or the host), reap.
    pub fn service(&mut self, now: Instant) -> io::Result<()> {
        self.service_with(now, true)
    }

    /// [`Relay::service`]; `guest_rx` = take frames from the guest's device
    /// (otherwise only transmit and run timers).
    fn service_with(&mut self, now: Instant, guest_rx: bool) -> io::Result<()> {
        if guest_rx || self.guest.raw_fd().is_none() {
            self.guest.poll(now)?;
        } else {
            self.guest.flush(now)?;
        }
        self.serve_syn_wait(now);
        while let Some(syn) = self.guest.tcp_next_syn() {
            self.on_syn(now, syn);
        }
        loop {
            let mut buf = std::mem::take(&mut self.scratch);
            let d = self.guest.udp_recv(&mut buf);
            if let Some(d) = d {
                let data = buf.get(..d.len.min(buf.len())).unwrap_or(&[]);
                self.on_guest_datagram(now, d.src, d.dst, data);
            }
            self.scratch = buf;
            if d.is_none() {
                break;
            }
        }
        loop {
            let mut buf = std::mem::take(&mut self.scratch);
            let r = self.guest.icmp_echo_recv(&mut buf);
            if let Some(req) = r {
                let data = buf.get(..req.len.min(buf.len())).unwrap_or(&[]);
                self.on_echo(now, &req, data);
            }
            self.scratch = buf;
            if r.is_none() {
                break;
            }
        }
        // Only the flows with news: guest events, host events (marked by
        // `on_host_event`), flows waiting for the buffer budget once it
        // frees up. A guest that cannot tell gets every flow pumped.
        let mut evs = std::mem::take(&mut self.conn_events);
        if self.guest.take_conn_events(&mut evs) {
            for c in evs.drain(..) {
                if let Some(&id) = self.conn_flow.get(&c) {
                    self.mark_dirty(id);
                }
            }
        } else {
            let ids: Vec<u64> = self
                .flows
                .iter()
                .filter(|(_, f)| matches!(f.kind, Kind::Tcp(_)))
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                self.mark_dirty(id);
            }
        }
        self.conn_events = evs;
        // Flows held back by the budgets: revisited once the relay is out
        // of memory pressure (below half the global budget; see pump_tcp).
        if !self.cap_blocked.is_empty() && self.buffered() < self.cfg.limits.total_buffer / 2 {
            for id in std::mem::take(&mut self.cap_blocked) {
                if let Some(Flow {
                    kind: Kind::Tcp(t), ..
                }) = self.flows.get_mut(&id)
                {
                    t.cap_blocked = false;
                }
                self.mark_dirty(id);
            }
        }
        let dirty = std::mem::take(&mut self.dirty);
        for &id in &dirty {
            if let Some(Flow {
                kind: Kind::Tcp(t), ..
            }) = self.flows.get_mut(&id)
            {
                t.dirty = false;
            }
        }
        for &id in &dirty {
            self.pump_tcp(now, id);
        }
        self.reap(now);
        // Send what the flows queued; new guest frames wait for the next
        // iteration (the guest descriptor stays readable, so it comes at once).
        self.guest.flush(now)?;
        self.stats.peak_flows = self.stats.peak_flows.max(self.flows.len() as u64);
        self.stats.peak_buffered = self.stats.peak_buffered.max(self.buffered() as u64);
        Ok(())
    }

    /// Keep serving (at most `max`) until every TCP flow has finished on
    /// the guest side: the guest sent its FIN (or reset) and everything it
    /// sent was written to the host. Used after the command exited: its
    /// kernel still sends what closed sockets had queued. `Stop::Bound`
    /// when done (or `max` passed), [`Stop::GuestGone`] if the guest's
    /// device went away meanwhile.
    pub fn drain(&mut self, max: Duration) -> io::Result<Stop> {
        let start = Instant::now();
        loop {
            if self.guest_side_finished() {
                return Ok(Stop::Bound);
            }
            let left = max.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(Stop::Bound);
            }
            let timeout = left
                .min(Duration::from_millis(50))
                .min(self.next_timeout(Instant::now()));
            match self.step(Some(timeout)) {
                Ok(_) => {}
                Err(e) if guest_gone(&e) => return Ok(Stop::GuestGone),
                Err(e) => return Err(e),
            }
        }
    }

    /// No TCP flow can still carry data from the guest to the host.
    fn guest_side_finished(&self) -> bool {
        self.flows.values().all(|f| match &f.kind {
            Kind::Tcp(t) => match t.phase {
                // The guest's EOF is seen once everything before it was
                // taken by the host socket.
                TcpPhase::Established => t.guest_eof,
                TcpPhase::HostConnecting(_) | TcpPhase::GuestConnecting => true,
            },
            _ => true,
        })
    }

    /// Tear everything down. Flows whose guest side finished cleanly (FIN
    /// relayed to the host as `shutdown(SHUT_WR)`) close the host socket
    /// gracefully; all others are reset on both sides.
    pub fn shutdown(&mut self) {
        let ids: Vec<u64> = self.flows.keys().copied().collect();
        for id in ids {
            let graceful = self.flows.get(&id).is_some_and(|f| match &f.kind {
                Kind::Tcp(t) => t.host_wr_shut,
                _ => false,
            });
            if graceful {
                if let Some(Kind::Tcp(t)) = self.flows.get(&id).map(|f| &f.kind) {
                    if let Some(c) = t.conn {
                        self.guest.tcp_abort(c);
                    }
                }
                self.stats.tcp_closed += 1;
                self.remove_flow(id);
            } else {
                self.abort_flow(Instant::now(), id, true);
            }
        }
    }

    fn alloc_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Admission control for a new flow; counts the refusal.
    fn admit(&mut self, now: Instant, half_open: bool) -> bool {
        let l = self.cfg.limits;
        if self.flows.len() >= l.max_flows {
            self.stats.limit_flows += 1;
            return false;
        }
        if half_open && self.half_open >= l.max_half_open {
            self.stats.limit_half_open += 1;
            return false;
        }
        if self.buffered() >= l.total_buffer {
            self.stats.limit_buffer += 1;
            return false;
        }
        if !self.bucket.take(now) {
            self.stats.limit_rate += 1;
            return false;
        }
        true
    }

    /// Where a guest destination goes on the host; `Err` = unreachable.
    fn map_dst(&self, dst: SocketAddr) -> Result<SocketAddr, Unreachable> {
        let t = self.map_dst_inner(dst)?;
        let denied = self.cfg.deny.iter().any(|d| {
            d.port() == t.port()
                && (d.ip() == t.ip()
                    || t.ip().is_loopback()
                    || (d.ip().is_unspecified() && self.host_addrs.contains(&t.ip())))
        });
        if denied {
            return Err(Unreachable::AdminProhibited);
        }
        Ok(t)
    }

    fn map_dst_inner(&self, dst: SocketAddr) -> Result<SocketAddr, Unreachable> {
        let dst = match dst {
            SocketAddr::V4(d) => d,
            SocketAddr::V6(d) => return self.map_dst6(d),
        };
        let ip = *dst.ip();
        if ip == self.cfg.gateway {
            return if self.cfg.gateway_to_loopback {
                Ok(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::LOCALHOST,
                    dst.port(),
                )))
            } else {
                Err(Unreachable::AdminProhibited)
            };
        }
        if Some(ip) == self.cfg.dns {
            return if dst.port() == 53 {
                Ok(self.cfg.host_dns)
            } else {
                Err(Unreachable::Port)
            };
        }
        if ip.is_unspecified()
            || ip.is_broadcast()
            || ip.is_multicast()
            || ip.is_loopback()
            || ip == self.cfg.guest_addr
        {
            return Err(Unreachable::AdminProhibited);
        }
        if dst.port() == 0 {
            return Err(Unreachable::Port);
        }
        Ok(SocketAddr::V4(dst))
    }

    /// [`Relay::map_dst`] for an IPv6 destination: the gateway leads to
    /// the host's ::1, the nameserver to the host's resolver; link-local,
    /// IPv4-mapped and the guest's own addresses are not relayed.
    fn map_dst6(&self, dst: SocketAddrV6) -> Result<SocketAddr, Unreachable> {
        let Some(guest6) = self.cfg.guest_addr6 else {
            return Err(Unreachable::AdminProhibited);
        };
        let ip = *dst.ip();
        if ip == self.cfg.gateway6 {
            return if self.cfg.gateway_to_loopback {
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::LOCALHOST,
                    dst.port(),
                    0,
                    0,
                )))
            } else {
                Err(Unreachable::AdminProhibited)
            };
        }
        if Some(ip) == self.cfg.dns6 {
            return if dst.port() == 53 {
                Ok(self.cfg.host_dns)
            } else {
                Err(Unreachable::Port)
            };
        }
        let link_local = ip.segments()[0] & 0xffc0 == 0xfe80;
        if ip.is_unspecified()
            || ip.is_multicast()
            || ip.is_loopback()
            || link_local
            || ip.to_ipv4_mapped().is_some()
            || ip == guest6
        {
            return Err(Unreachable::AdminProhibited);
        }
        if dst.port() == 0 {
            return Err(Unreachable::Port);
        }
        Ok(SocketAddr::V6(SocketAddrV6::new(ip, dst.port(), 0, 0)))
    }

    /// Whether `ip` is one of the addresses the relay itself answers ping
    /// for (the gateway and the nameserver).
    fn is_gateway(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => a == self.cfg.gateway,
            IpAddr::V6(a) => self.cfg.guest_addr6.is_some() && a == self.cfg.gateway6,
        }
    }

    // ---------------------------------------------------------------- TCP

    /// A new guest SYN: opened at once while a half-open slot is free
    /// (and none waits before it), else it waits for one (`SYN_WAIT`, at
    /// most `SYN_WAIT_PER_SLOT` per slot): a burst of connects beyond the
    /// limit, to hosts that answer, is served as slots free up within the
    /// next iterations instead of being reset.
    fn on_syn(&mut self, now: Instant, syn: PendingSyn) {
        let l = &self.cfg.limits;
        let full = self.half_open >= l.max_half_open || !self.syn_wait.is_empty();
        if full
            && self.flows.len() < l.max_flows
            && self.syn_wait.len() < l.max_half_open.saturating_mul(SYN_WAIT_PER_SLOT)
            && self.map_dst(syn.dst).is_ok()
        {
            self.syn_wait.push_back((syn, now + SYN_WAIT));
            return;
        }
        self.open_syn(now, syn);
    }

    /// Open the waiting SYNs that have a half-open slot now, oldest first;
    /// refuse those that waited `SYN_WAIT` in vain (counted as the
    /// half-open limit's).
    fn serve_syn_wait(&mut self, now: Instant) {
        while let Some(&(syn, deadline)) = self.syn_wait.front() {
            if self.half_open < self.cfg.limits.max_half_open || deadline <= now {
                self.syn_wait.pop_front();
                self.open_syn(now, syn);
            } else {
                break;
            }
        }
    }

    fn open_syn(&mut self, now: Instant, syn: PendingSyn) {
        let target = match self.map_dst(syn.dst) {
            Ok(t) => t,
            Err(how) => {
                self.guest
                    .tcp_refuse(now, syn.id, Refusal::Unreachable(how));
                self.stats.tcp_refused_unreachable += 1;
                return;
            }
        };
        if !self.admit(now, true) {
            self.guest.tcp_refuse(now, syn.id, Refusal::Reset);
            self.stats.tcp_refused_rst += 1;
            return;
        }
        let sock = match sys::socket_for(&target, libc::SOCK_STREAM, 0) {
            Ok(s) => s,
            Err(_) => {
                self.guest.tcp_refuse(now, syn.id, Refusal::Reset);
                self.stats.tcp_refused_rst += 1;
                return;
            }
        };
        sys::set_nodelay(&sock);
        if let Err(e) = sys::connect(&sock, target) {
            let how = unreachable_for(&e);
            self.refuse(now, syn.id, how);
            return;
        }
        let id = self.alloc_id();
        if self
            .epoll
            .add(
                sock.as_raw_fd(),
                EV_IN | EV_OUT | EV_RDHUP | EV_PRI | EV_ET,
                id,
            )
            .is_err()
        {
            self.refuse(now, syn.id, Refusal::Reset);
            return;
        }
        self.half_open += 1;
        self.flows.insert(
            id,
            Flow {
                kind: Kind::Tcp(Box::new(TcpFlow::new(
                    TcpPhase::HostConnecting(syn.id),
                    None,
                    false,
                ))),
                sock: Some(sock),
                started: now,
                last_active: now,
            },
        );
        self.file_expiry(id);
    }

    fn refuse(&mut self, now: Instant, syn: SynId, how: Refusal) {
        self.guest.tcp_refuse(now, syn, how);
        match how {
            Refusal::Reset => self.stats.tcp_refused_rst += 1,
            Refusal::Unreachable(_) => self.stats.tcp_refused_unreachable += 1,
        }
    }

    fn on_listener(&mut self, now: Instant, idx: usize) {
        let Some(l) = self.listeners.get(idx).and_then(Option::as_ref) else {
            return;
        };
        let fwd = l.fwd;
        let guest_v6 = l.guest_v6;
        match fwd.proto {
            Proto::Tcp => {
                for _ in 0..64 {
                    let Some(l) = self.listeners.get(idx).and_then(Option::as_ref) else {
                        return;
                    };
                    let (sock, peer) = match sys::accept(&l.sock) {
                        Ok(x) => x,
                        Err(_) => return,
                    };
                    self.on_inbound_tcp(now, fwd, guest_v6, sock, peer);
                }
            }
            Proto::Udp => {
                for _ in 0..64 {
                    let Some(l) = self.listeners.get(idx).and_then(Option::as_ref) else {
                        return;
                    };
                    let mut buf = std::mem::take(&mut self.scratch);
                    let r = sys::recv_from(&l.sock, &mut buf);
                    if let Ok((n, peer)) = r {
                        let data = buf.get(..n).unwrap_or(&[]);
                        self.on_inbound_udp(now, idx, fwd, guest_v6, peer, data);
                    }
                    self.scratch = buf;
                    if r.is_err() {
                        return;
                    }
                }
            }
        }
    }

    fn on_inbound_tcp(
        &mut self,
        now: Instant,
        fwd: PortForward,
        guest_v6: bool,
        sock: OwnedFd,
        peer: SocketAddr,
    ) {
        if !self.admit(now, true) {
            sys::set_linger_zero(&sock);
            return;
        }
        let (from, to) = self.inbound_ends(guest_v6, peer.port(), fwd.guest_port);
        let conn = match self.guest.tcp_connect(now, from, to) {
            Ok(c) => c,
            Err(_) => {
                sys::set_linger_zero(&sock);
                return;
            }
        };
        sys::set_nodelay(&sock);
        let id = self.alloc_id();
        if self
            .epoll
            .add(
                sock.as_raw_fd(),
                EV_IN | EV_OUT | EV_RDHUP | EV_PRI | EV_ET,
                id,
            )
            .is_err()
        {
            self.guest.tcp_abort(conn);
            sys::set_linger_zero(&sock);
            return;
        }
        self.half_open += 1;
        self.stats.tcp_inbound += 1;
        self.flows.insert(
            id,
            Flow {
                kind: Kind::Tcp(Box::new(TcpFlow::new(
                    TcpPhase::GuestConnecting,
                    Some(conn),
                    true,
                ))),
                sock: Some(sock),
                started: now,
                last_active: now,
            },
        );
        self.conn_flow.insert(conn, id);
        self.file_expiry(id);
        self.mark_dirty(id);
    }

    fn on_host_event(&mut self, now: Instant, id: u64, ev: u32) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        match &mut flow.kind {
            Kind::Tcp(t) => {
                if ev & (EV_IN | EV_RDHUP | EV_ERR | EV_PRI) != 0 {
                    t.readable = true;
                }
                // Urgent data too: recv(2) stops short at its mark while
                // more data waits behind it, with no new edge.
                if ev & (EV_RDHUP | EV_ERR | EV_PRI) != 0 {
                    t.host_hup = true;
                }
                if ev & (EV_OUT | EV_ERR) != 0 {
                    t.writable = true;
                }
                if let TcpPhase::HostConnecting(syn) = t.phase {
                    if ev & (EV_OUT | EV_ERR) != 0 {
                        self.finish_connect(now, id, syn);
                    }
                }
                self.mark_dirty(id);
            }
            Kind::Udp { .. } => self.on_udp_readable(now, id),
            Kind::Icmp { .. } => self.on_icmp_readable(now, id),
            Kind::UdpIn { .. } => {}
        }
    }

    fn finish_connect(&mut self, now: Instant, id: u64, syn: SynId) {
        let Some(flow) = self.flows.get(&id) else {
            return;
        };
        let err = match &flow.sock {
            Some(s) => sys::take_error(s).unwrap_or_else(Some),
            None => Some(io::Error::from_raw_os_error(libc::EBADF)),
        };
        if let Some(e) = err {
            let how = unreachable_for(&e);
            self.remove_flow(id);
            self.refuse(now, syn, how);
            return;
        }
        match self.guest.tcp_accept(now, syn) {
            Ok(conn) => {
                self.half_open = self.half_open.saturating_sub(1);
                self.stats.tcp_opened += 1;
                if let Some(Flow {
                    kind: Kind::Tcp(t),
                    last_active,
                    ..
                }) = self.flows.get_mut(&id)
                {
                    t.conn = Some(conn);
                    t.phase = TcpPhase::Established;
                    *last_active = now;
                }
                self.conn_flow.insert(conn, id);
                // The idle deadline may come before the connect deadline
                // the flow was filed at.
                self.file_expiry(id);
                self.mark_dirty(id);
            }
            Err(_) => {
                // The guest gave up (e.g. its SYN timed out): drop the host side.
                self.abort_flow(now, id, false);
            }
        }
    }

    /// Move bytes both ways for one TCP flow and handle its state changes.
    /// Called when the guest or the host side has news; it moves data
    /// until neither side makes progress (bounded: a flow that still could
    /// stays dirty for the next iteration), since the sides will not report
    /// again what they reported already.
    ///
    /// Each byte is copied once in user space: guest to host, the guest
    /// stack lends the data in its receive buffer to `send(2)` (two slices
    /// when the ring wraps: `sendmsg`) and drops what the kernel took; host
    /// to guest, it lends free space in its send buffer to `recv(2)`
    /// (`recvmsg`), which the stack then sends from. Back-pressure is the
    /// buffers themselves: a full receive buffer closes the guest's window,
    /// a full send buffer (or the flow's or the global budget) stops reads
    /// from the host socket.
    fn pump_tcp(&mut self, now: Instant, id: u64) {
        let limits = self.cfg.limits;
        let flow_cap = limits.flow_buffer_max.max(limits.flow_buffer);
        let total_cap = limits.total_buffer;
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        let Kind::Tcp(t) = &mut flow.kind else { return };
        let Some(sock) = &flow.sock else { return };
        let Some(conn) = t.conn else { return };
        let st = self.guest.tcp_state(conn);
        if t.phase == TcpPhase::GuestConnecting {
            if st.established {
                t.phase = TcpPhase::Established;
                self.half_open = self.half_open.saturating_sub(1);
                self.stats.tcp_opened += 1;
                // As for an outbound flow: the idle deadline may come first.
                let at = flow.last_active + self.cfg.timeouts.tcp_idle;
                self.expiry.push(Reverse((at, id)));
            } else if st.error.is_some() || st.closed {
                self.abort_flow(now, id, false);
                return;
            } else {
                return;
            }
        }
        if t.phase != TcpPhase::Established {
            return;
        }
        if let Some(err) = st.error {
            if err == ConnError::Reset {
                self.stats.tcp_reset_by_guest += 1;
            }
            self.abort_flow(now, id, false);
            return;
        }
        let half_closed_before = t.guest_eof || t.host_eof;
        let mut moved = false;
        let mut host_reset = false;
        let mut cap_blocked = false;
        let mut again = false;
        // What the guest's send buffer holds for this flow and the room it
        // has left: during the pump they change only by what is queued here
        // (acknowledgements come in with the guest's `poll`).
        let mut queued = st.send_queue;
        let mut space = st.send_space;

        for pass in 0..PUMP_PASSES {
            let mut progress = false;
            // guest -> host: the guest's receive buffer straight to send(2).
            while !t.guest_eof && !host_reset {
                let writable = t.writable;
                let mut called = false;
                let mut err = None;
                let mut offered = 0;
                let r = self.guest.tcp_recv_with(conn, &mut |a, b| {
                    called = true;
                    // Not writable: take nothing (no system call), but the
                    // call still tells the end of stream apart.
                    if !writable {
                        return 0;
                    }
                    offered = a.len() + b.len();
                    match sys::send2(sock, a, b) {
                        Ok(n) => n,
                        Err(e) => {
                            err = Some(e);
                            0
                        }
                    }
                });
                match r {
                    // No data and the closure not called: the guest's FIN.
                    Ok(0) if !called => {
                        t.guest_eof = true;
                        progress = true;
                    }
                    Ok(n) => {
                        if n > 0 {
                            self.stats.bytes_guest_to_host += n as u64;
                            moved = true;
                            progress = true;
                        }
                        match err.map(|e| e.kind()) {
                            // A short write fills the socket's buffer: its
                            // room comes back with an EPOLLOUT edge.
                            None if n > 0 && n < offered => {
                                t.writable = false;
                                break;
                            }
                            None if n > 0 => {}
                            // Not writable.
                            None => break,
                            Some(io::ErrorKind::WouldBlock) => {
                                t.writable = false;
                                break;
                            }
                            Some(io::ErrorKind::Interrupted) => {}
                            Some(_) => host_reset = true,
                        }
                    }
                    // Nothing yet (or an error `tcp_state` reports next time).
                    Err(_) => break,
                }
            }
            if t.guest_eof && !t.host_wr_shut && !host_reset {
                // guest FIN -> shutdown(SHUT_WR) on the host socket.
                let _ = sys::shutdown_write(sock);
                t.host_wr_shut = true;
            }

            // host -> guest: recv(2) straight into the guest's send buffer.
            while t.readable && !t.host_eof && !host_reset {
                let buffered = self.guest.tcp_buffered();
                let global = total_cap.saturating_sub(buffered);
                // Memory pressure (Linux's tcp_memory_pressure, which stops
                // send buffers from growing): a flow holds up to
                // --flow-buffer whatever the others do, and grows beyond it
                // (up to --flow-buffer-max) only into what is left below
                // half the global budget, so a few fast flows cannot take
                // the whole budget and shut new flows out.
                let headroom = (total_cap / 2).saturating_sub(buffered);
                let cap = limits
                    .flow_buffer
                    .max(flow_cap.min(queued.saturating_add(headroom)));
                let room = cap.saturating_sub(queued).min(global).min(space);
                if room == 0 {
                    // A full send buffer is reported by the guest when it
                    // has room again; the budgets are not: wait for them in
                    // the cap-blocked list.
                    cap_blocked |= space > 0;
                    break;
                }
                let mut called = false;
                let mut eof = false;
                let mut err = None;
                let mut offered = 0;
                let r = self.guest.tcp_send_with(conn, room, &mut |a, b| {
                    called = true;
                    offered = a.len() + b.len();
                    match sys::recv2(sock, a, b) {
                        Ok(0) => {
                            eof = true;
                            0
                        }
                        Ok(n) => n,
                        Err(e) => {
                            err = Some(e);
                            0
                        }
                    }
                });
                match r {
                    Ok(n) if called => {
                        queued += n;
                        space = space.saturating_sub(n);
                        if n > 0 {
                            self.stats.bytes_host_to_guest += n as u64;
                            moved = true;
                            progress = true;
                        }
                        if eof {
                            t.host_eof = true;
                            progress = true;
                        }
                        match err.map(|e| e.kind()) {
                            // A short read empties the socket (TCP's recvmsg
                            // takes all it has): wait for the next edge.
                            None if n > 0 && n < offered && !t.host_hup => {
                                t.readable = false;
                            }
                            None | Some(io::ErrorKind::Interrupted) => {}
                            Some(io::ErrorKind::WouldBlock) => t.readable = false,
                            Some(_) => host_reset = true,
                        }
                    }
                    // The guest's send buffer is full after all.
                    Ok(_) => {
                        space = 0;
                        break;
                    }
                    // It cannot take data (its state says why next time).
                    Err(_) => break,
                }
            }
            if host_reset || !progress {
                break;
            }
            if pass + 1 == PUMP_PASSES {
                again = true;
            }
        }
        if host_reset {
            // Host reset (or write failed): reset the guest side too.
            self.stats.tcp_reset_by_host += 1;
            self.abort_flow(now, id, false);
            return;
        }
        if t.host_eof && !t.guest_shut {
            // host FIN -> FIN to the guest after the queued data.
            self.guest.tcp_shutdown(conn);
            t.guest_shut = true;
        }
        if moved {
            flow.last_active = now;
        }
        let done = t.guest_eof && t.host_eof && t.host_wr_shut && t.guest_shut;
        if done || st.closed {
            self.guest.tcp_close(conn);
            self.stats.tcp_closed += 1;
            self.remove_flow(id);
            return;
        }
        if cap_blocked && !t.cap_blocked {
            t.cap_blocked = true;
            self.cap_blocked.push(id);
        }
        let half_closed = t.guest_eof || t.host_eof;
        if half_closed && !half_closed_before {
            // The half-closed timeout may be earlier than the idle one.
            self.file_expiry(id);
        }
        if again {
            self.mark_dirty(id);
        }
    }

    /// End a flow abnormally: RST on both sides.
    fn abort_flow(&mut self, now: Instant, id: u64, guest_too: bool) {
        let _ = (now, guest_too);
        if let Some(flow) = self.flows.get(&id) {
            if let Kind::Tcp(t) = &flow.kind {
                if let Some(s) = &flow.sock {
                    sys::set_linger_zero(s);
                }
                if let Some(c) = t.conn {
                    self.guest.tcp_abort(c);
                }
                if let TcpPhase::HostConnecting(syn) = t.phase {
                    self.guest.tcp_refuse(now, syn, Refusal::Reset);
                }
            }
        }
        self.remove_flow(id);
    }

    fn remove_flow(&mut self, id: u64) {
        let Some(flow) = self.flows.remove(&id) else {
            return;
        };
        if let Some(s) = &flow.sock {
            self.epoll.delete(s.as_raw_fd());
        }
        match &flow.kind {
            Kind::Tcp(t) => {
                if let Some(c) = t.conn {
                    self.conn_flow.remove(&c);
                }
                if matches!(
                    t.phase,
                    TcpPhase::HostConnecting(_) | TcpPhase::GuestConnecting
                ) {
                    self.half_open = self.half_open.saturating_sub(1);
                }
            }
            Kind::Udp { guest, dst, .. } => {
                self.udp_index.remove(&(*guest, *dst));
            }
            Kind::UdpIn {
                listener,
                peer,
                guest,
                apparent,
            } => {
                self.udp_in_index.remove(&(*listener, *peer));
                self.udp_index.remove(&(*guest, *apparent));
            }
            Kind::Icmp { guest, dst, ident } => {
                self.icmp_index.remove(&(*guest, *dst, *ident));
            }
        }
    }

    /// When flow `id` expires: its connect deadline while connecting, else
    /// the idle limit of its kind after its last activity.
    fn deadline(&self, f: &Flow) -> Instant {
        let to = self.cfg.timeouts;
        match &f.kind {
            Kind::Tcp(t) => match t.phase {
                TcpPhase::HostConnecting(_) | TcpPhase::GuestConnecting => {
                    f.started + to.tcp_connect
                }
                TcpPhase::Established if t.guest_eof || t.host_eof => {
                    f.last_active + to.tcp_half_closed
                }
                TcpPhase::Established => f.last_active + to.tcp_idle,
            },
            Kind::Udp { .. } | Kind::UdpIn { .. } => f.last_active + to.udp_idle,
            Kind::Icmp { .. } => f.last_active + to.icmp_idle,
        }
    }

    /// File flow `id` in the expiry heap at its current deadline.
    fn file_expiry(&mut self, id: u64) {
        if let Some(f) = self.flows.get(&id) {
            let at = self.deadline(f);
            self.expiry.push(Reverse((at, id)));
        }
    }

    /// Expire the flows whose deadline has come. Work is proportional to
    /// the heap entries that come due (each flow's entry comes due at most
    /// once per idle period), not to the flows held.
    fn reap(&mut self, now: Instant) {
        let mut expired = Vec::new();
        while let Some(&Reverse((at, id))) = self.expiry.peek() {
            if at > now {
                break;
            }
            self.expiry.pop();
            let Some(f) = self.flows.get(&id) else {
                continue;
            };
            let real = self.deadline(f);
            if real > now {
                // Active since: re-file at the real deadline.
                self.expiry.push(Reverse((real, id)));
                continue;
            }
            let connecting = matches!(
                &f.kind,
                Kind::Tcp(t) if matches!(t.phase, TcpPhase::HostConnecting(_) | TcpPhase::GuestConnecting)
            );
            expired.push((id, connecting));
        }
        // Stale entries (flows gone) are dropped as they come due; keep the
        // heap from growing past a few entries per flow meanwhile.
        if self.expiry.len() > 2 * self.flows.len() + 1024 {
            let flows = &self.flows;
            self.expiry
                .retain(|Reverse((_, id))| flows.contains_key(id));
        }
        for (id, connect_timeout) in expired {
            let kind = self.flows.get(&id).map(|f| match &f.kind {
                Kind::Tcp(t) => Some(t.phase),
                _ => None,
            });
            match kind {
                Some(Some(TcpPhase::HostConnecting(syn))) if connect_timeout => {
                    self.stats.tcp_connect_timeouts += 1;
                    self.remove_flow(id);
                    self.refuse(now, syn, Refusal::Unreachable(Unreachable::Host));
                }
                Some(Some(_)) => {
                    if connect_timeout {
                        self.stats.tcp_connect_timeouts += 1;
                    } else {
                        self.stats.tcp_idle_reaped += 1;
                    }
                    self.abort_flow(now, id, true);
                }
                Some(None) => {
                    self.stats.udp_idle_reaped += 1;
                    self.remove_flow(id);
                }
                None => {}
            }
        }
    }

    // ---------------------------------------------------------------- UDP

    fn on_guest_datagram(&mut self, now: Instant, src: SocketAddr, dst: SocketAddr, data: &[u8]) {
        if let Some(&id) = self.udp_index.get(&(src, dst)) {
            self.udp_forward_existing(now, id, data);
            return;
        }
        let target = match self.map_dst(dst) {
            Ok(t) => t,
            Err(how) => {
                self.stats.udp_errors += 1;
                self.guest.udp_unreachable(now, dst, src, data.len(), how);
                return;
            }
        };
        if !self.admit(now, false) {
            return;
        }
        let sock = match sys::socket_for(&target, libc::SOCK_DGRAM, 0) {
            Ok(s) => s,
            Err(_) => {
                self.stats.udp_errors += 1;
                return;
            }
        };
        if let Err(e) = sys::connect(&sock, target) {
            self.stats.udp_errors += 1;
            if let Some(how) = udp_unreachable_for(&e) {
                self.guest.udp_unreachable(now, dst, src, data.len(), how);
            }
            return;
        }
        let id = self.alloc_id();
        if self.epoll.add(sock.as_raw_fd(), EV_IN, id).is_err() {
            self.stats.udp_errors += 1;
            return;
        }
        self.stats.udp_flows += 1;
        self.flows.insert(
            id,
            Flow {
                kind: Kind::Udp {
                    guest: src,
                    dst,
                    last_len: data.len(),
                },
                sock: Some(sock),
                started: now,
                last_active: now,
            },
        );
        self.udp_index.insert((src, dst), id);
        self.file_expiry(id);
        self.udp_forward_existing(now, id, data);
    }

    fn udp_forward_existing(&mut self, now: Instant, id: u64, data: &[u8]) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        let mut ends = None;
        let r = match &mut flow.kind {
            Kind::Udp {
                dst,
                guest,
                last_len,
            } => {
                if is_dns(&self.cfg, dst.ip()) {
                    self.stats.dns_queries += 1;
                }
                *last_len = data.len();
                ends = Some((*dst, *guest));
                flow.sock.as_ref().map(|s| sys::send(s, data))
            }
            Kind::UdpIn { listener, peer, .. } => self
                .listeners
                .get(*listener)
                .and_then(Option::as_ref)
                .map(|l| sys::send_to(&l.sock, data, *peer)),
            _ => None,
        };
        match r {
            Some(Ok(_)) => {
                self.stats.udp_datagrams_out += 1;
                self.stats.bytes_guest_to_host += data.len() as u64;
                flow.last_active = now;
            }
            // An ICMP error for an earlier datagram, reported by this send
            // (which it made fail): the guest hears of it all the same.
            Some(Err(e)) => {
                self.stats.udp_errors += 1;
                if let (Some((dst, guest)), Some(how)) = (ends, udp_unreachable_for(&e)) {
                    self.guest.udp_unreachable(now, dst, guest, data.len(), how);
                }
            }
            None => self.stats.udp_errors += 1,
        }
    }

    fn on_udp_readable(&mut self, now: Instant, id: u64) {
        for _ in 0..64 {
            let Some(flow) = self.flows.get_mut(&id) else {
                return;
            };
            let (
                Kind::Udp {
                    guest,
                    dst,
                    last_len,
                },
                Some(sock),
            ) = (&flow.kind, &flow.sock)
            else {
                return;
            };
            let (guest, dst, last_len) = (*guest, *dst, *last_len);
            let mut buf = std::mem::take(&mut self.scratch);
            let r = sys::recv(sock, &mut buf);
            let mut again = false;
            match r {
                Ok(n) => {
                    flow.last_active = now;
                    let data = buf.get(..n).unwrap_or(&[]);
                    if self.guest.udp_send(now, dst, guest, data).is_ok() {
                        self.stats.udp_datagrams_in += 1;
                        self.stats.bytes_host_to_guest += n as u64;
                    } else {
                        self.stats.udp_errors += 1;
                    }
                    again = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // ICMP errors (port unreachable...) surface here: count
                // them and pass them on, so that the guest's connected
                // socket fails as it would against the host itself.
                Err(e) => {
                    self.stats.udp_errors += 1;
                    if let Some(how) = udp_unreachable_for(&e) {
                        self.guest.udp_unreachable(now, dst, guest, last_len, how);
                    }
                    again = true;
                }
            }
            self.scratch = buf;
            if !again {
                return;
            }
        }
    }

    /// The guest-side ends of an inbound forward: `(from, to)`, the
    /// gateway's `peer_port` to the guest's `guest_port`, over IPv6 when
    /// the listener says so and IPv6 is on.
    fn inbound_ends(
        &self,
        guest_v6: bool,
        peer_port: u16,
        guest_port: u16,
    ) -> (SocketAddr, SocketAddr) {
        match self.cfg.guest_addr6 {
            Some(g6) if guest_v6 => (
                SocketAddr::V6(SocketAddrV6::new(self.cfg.gateway6, peer_port, 0, 0)),
                SocketAddr::V6(SocketAddrV6::new(g6, guest_port, 0, 0)),
            ),
            _ => (
                SocketAddr::V4(SocketAddrV4::new(self.cfg.gateway, peer_port)),
                SocketAddr::V4(SocketAddrV4::new(self.cfg.guest_addr, guest_port)),
            ),
        }
    }

    fn on_inbound_udp(
        &mut self,
        now: Instant,
        listener: usize,
        fwd: PortForward,
        guest_v6: bool,
        peer: SocketAddr,
        data: &[u8],
    ) {
        let (gw, guest) = self.inbound_ends(guest_v6, peer.port(), fwd.guest_port);
        let id = match self.udp_in_index.get(&(listener, peer)) {
            Some(&id) => id,
            None => {
                if !self.admit(now, false) {
                    return;
                }
                // The guest sees the datagram from gateway:port; pick a port
                // not used by another inbound flow to this guest port.
                let mut apparent = gw;
                let mut tries = 0u32;
                while self.udp_index.contains_key(&(guest, apparent)) && tries < 1000 {
                    self.next_udp_in_port = self.next_udp_in_port.wrapping_add(1).max(1024);
                    apparent.set_port(self.next_udp_in_port);
                    tries += 1;
                }
                if self.udp_index.contains_key(&(guest, apparent)) {
                    self.stats.udp_errors += 1;
                    return;
                }
                let id = self.alloc_id();
                self.flows.insert(
                    id,
                    Flow {
                        kind: Kind::UdpIn {
                            listener,
                            peer,
                            guest,
                            apparent,
                        },
                        sock: None,
                        started: now,
                        last_active: now,
                    },
                );
                self.udp_in_index.insert((listener, peer), id);
                self.udp_index.insert((guest, apparent), id);
                self.stats.udp_inbound_flows += 1;
                self.file_expiry(id);
                id
            }
        };
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        let Kind::UdpIn { apparent, .. } = flow.kind else {
            return;
        };
        flow.last_active = now;
        if self.guest.udp_send(now, apparent, guest, data).is_ok() {
            self.stats.udp_datagrams_in += 1;
            self.stats.bytes_host_to_guest += data.len() as u64;
        } else {
            self.stats.udp_errors += 1;
        }
    }

    // ---------------------------------------------------------------- ICMP

    fn on_echo(&mut self, now: Instant, req: &EchoRequest, data: &[u8]) {
        if self.is_gateway(req.dst) || is_dns(&self.cfg, req.dst) {
            self.stats.icmp_echo_gateway += 1;
            let _ = self
                .guest
                .icmp_echo_reply(now, req.dst, req.src, req.ident, req.seq, data);
            return;
        }
        let dst_ok = self.map_dst(SocketAddr::new(req.dst, 1)).is_ok();
        let key = (req.src, req.dst, req.ident);
        let id = match self.icmp_index.get(&key) {
            Some(&id) => Some(id),
            None if dst_ok && self.cfg.icmp_ping_sockets && self.ping_allowed != Some(false) => {
                if !self.admit(now, false) {
                    return;
                }
                self.open_ping(now, req)
            }
            None => None,
        };
        let Some(id) = id else {
            self.stats.icmp_unreachable += 1;
            let how = if dst_ok {
                Unreachable::AdminProhibited
            } else {
                Unreachable::Host
            };
            self.guest.icmp_echo_unreachable(now, req, data, how);
            return;
        };
        // ICMP echo header (type 8, ICMPv6 128; code 0, checksum and
        // identifier filled by the kernel for ping sockets), then the data.
        // (Built in a buffer of its own: `data` lies in `scratch`, which the
        // caller holds while the guest's requests are read.)
        let ty = if req.dst.is_ipv6() { 128 } else { 8 };
        let mut pkt = std::mem::take(&mut self.echo_out);
        pkt.clear();
        pkt.extend_from_slice(&[ty, 0, 0, 0, 0, 0, (req.seq >> 8) as u8, req.seq as u8]);
        pkt.extend_from_slice(data);
        let ok = self
            .flows
            .get_mut(&id)
            .and_then(|f| {
                f.last_active = now;
                f.sock.as_ref()
            })
            .map(|s| sys::send(s, &pkt).is_ok())
            .unwrap_or(false);
        self.echo_out = pkt;
        if ok {
            self.stats.icmp_echo_relayed += 1;
        } else {
            self.stats.icmp_unreachable += 1;
            self.guest
                .icmp_echo_unreachable(now, req, data, Unreachable::Host);
        }
    }

    fn open_ping(&mut self, now: Instant, req: &EchoRequest) -> Option<u64> {
        let to = SocketAddr::new(req.dst, 0);
        let proto = if to.is_ipv6() {
            libc::IPPROTO_ICMPV6
        } else {
            libc::IPPROTO_ICMP
        };
        let sock = match sys::socket_for(&to, libc::SOCK_DGRAM, proto) {
            Ok(s) => s,
            Err(_) => {
                // net.ipv4.ping_group_range does not include us.
                self.ping_allowed = Some(false);
                return None;
            }
        };
        self.ping_allowed = Some(true);
        sys::connect(&sock, to).ok()?;
        let id = self.alloc_id();
        self.epoll.add(sock.as_raw_fd(), EV_IN, id).ok()?;
        self.flows.insert(
            id,
            Flow {
                kind: Kind::Icmp {
                    guest: req.src,
                    dst: req.dst,
                    ident: req.ident,
                },
                sock: Some(sock),
                started: now,
                last_active: now,
            },
        );
        self.icmp_index.insert((req.src, req.dst, req.ident), id);
        self.file_expiry(id);
        Some(id)
    }

    fn on_icmp_readable(&mut self, now: Instant, id: u64) {
        for _ in 0..64 {
            let Some(flow) = self.flows.get_mut(&id) else {
                return;
            };
            let (Kind::Icmp { guest, dst, ident }, Some(sock)) = (&flow.kind, &flow.sock) else {
                return;
            };
            let (guest, dst, ident) = (*guest, *dst, *ident);
            let mut buf = std::mem::take(&mut self.scratch);
            let r = sys::recv(sock, &mut buf);
            let mut again = false;
            if let Ok(n) = r {
                again = true;
                flow.last_active = now;
                // Ping sockets return the ICMP message without the IP
                // header: an echo reply is type 0 (ICMPv6: 129), code 0.
                let reply_type = if dst.is_ipv6() { 129u8 } else { 0 };
                let is_reply = buf.get(..2) == Some(&[reply_type, 0][..]);
                let seq = buf
                    .get(6..8)
                    .and_then(|s| <[u8; 2]>::try_from(s).ok())
                    .map(u16::from_be_bytes);
                if let (true, Some(seq)) = (is_reply, seq) {
                    let data = buf.get(8..n).unwrap_or(&[]);
                    if self
                        .guest
                        .icmp_echo_reply(now, dst, guest, ident, seq, data)
                        .is_ok()
                    {
                        self.stats.icmp_echo_replies += 1;
                    }
                }
            }
            self.scratch = buf;
            if !again {
                return;
            }
        }
    }
}

impl<G: GuestStack> Drop for Relay<G> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_forward_names_what_its_host_port_forwards_once() {
        let fwd = |host_port, guest_port| PortForward {
            host_ip: None,
            host_port,
            guest_port,
            proto: Proto::Tcp,
        };
        // 18080:80's two listeners (127.0.0.1, ::1) in slots apart, with
        // another forward of host port 18080 (on another address) and one
        // of another port between them.
        let other = PortForward {
            host_ip: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
            ..fwd(18080, 90)
        };
        let here = [fwd(18080, 80), fwd(9000, 90), other, fwd(18080, 80)];
        let m = no_such_forward(&fwd(18080, 81), here.iter());
        let mut named = [fwd(18080, 80).to_string(), other.to_string()];
        named.sort();
        assert_eq!(
            m,
            format!(
                "no port forward {}; host port 18080/tcp forwards {}",
                fwd(18080, 81),
                named.join(", ")
            )
        );
        let m = no_such_forward(&fwd(7, 7), here.iter());
        assert_eq!(m, "no port forward on host port 7/tcp");
    }
}
