//! The TCP socket table: demultiplexing by 4-tuple, listeners with bounded
//! SYN and accept queues, ephemeral ports (RFC 6056), reaping of finished
//! connections, the timer structure and the readiness events. The
//! per-connection protocol lives in `tcp/`.
//!
//! # Cost per event
//!
//! Nothing here visits every connection on the hot path. Each connection
//! keeps one next deadline ([`Connection::poll_at`]), recomputed whenever
//! the connection is touched (a segment, a dispatch, a socket call):
//!
//! - a deadline in the future goes into a binary heap of `(deadline, slot,
//!   generation)`. Entries are never removed: a connection remembers the
//!   earliest entry it has in the heap (`sched`), a later deadline leaves
//!   that entry in place (it fires early, the connection is looked at and
//!   re-filed at its real deadline), an earlier one adds a new entry, and
//!   entries of freed or re-filed connections are skipped when they surface.
//!   The heap is compacted when stale entries outnumber live connections.
//! - a connection with work now (an ACK due, data to send, a state change)
//!   goes on the ready list (once: a flag marks it queued).
//!
//! `poll` takes the due heap entries and then the ready list, at most a
//! budget of dispatches per call; `poll_at` is the head of the ready list
//! or of the heap. The alternative, a hashed timer wheel, has O(1) insertion
//! but needs a tick: TCP's deadlines range from 10 ms (probe timeouts) to
//! 2 hours (keep-alive), and the heap's O(log n) costs ~17 comparisons at
//! 100,000 connections while the lazy re-filing above keeps most deadline
//! changes (the RTO restarted by every ACK moves later) off the heap.
//!
//! Application-visible changes (readable, writable, connected, closed, a
//! connection to accept) are queued as readiness events, like epoll's ready
//! list: [`TcpTable::take_events`] hands over the sockets that changed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use bytes::Bytes;
use ustack_wire::tcp::TcpRepr;

use crate::counters::TcpStackCounters;
use crate::hash::{keyed_hash, KeyedState};
use crate::pmtu::PmtuCache;
use crate::tcp::{restore_cookie, CookieJar, SynCookies, TcpShared, SYNCOOKIE_VALID};
use crate::tcp::{
    Connection, Isn, NeighbourAdvice, State, TcpConfig, TcpConnInfo, TcpCounters, TcpError,
};
use crate::time::Instant;
use crate::udp::{EPHEMERAL_FIRST, EPHEMERAL_LAST};
use crate::{BindError, ConnectError};

/// How the table's connections transmit: a segment from `local` to
/// `remote`, its payload by reference when not in the segment (see
/// `Connection::dispatch_ext`), and the send MSS (to cut a TSO
/// super-segment). Returns false if the segment could not be sent now.
pub(crate) type TableEmit<'a> =
    dyn FnMut(SocketAddr, SocketAddr, &TcpRepr, &[Bytes], usize) -> bool + 'a;

/// A TCP socket handle: a small Copy id. Stale handles give
/// `TcpError::InvalidHandle`, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpHandle {
    index: u32,
    generation: u32,
}

/// A socket's readiness, as `epoll` would report it. A set of flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Readiness(u8);

impl Readiness {
    /// No flag.
    pub const NONE: Readiness = Readiness(0);
    /// A read will not block: data, end of stream, an error (connections);
    /// a connection waiting in the accept queue (listeners).
    pub const READABLE: Readiness = Readiness(1);
    /// A write will not block: the connection is established (or closing
    /// with send space left) and has send-buffer space, or has an error.
    pub const WRITABLE: Readiness = Readiness(2);
    /// The handshake has completed (at some point).
    pub const CONNECTED: Readiness = Readiness(4);
    /// The connection is over: CLOSED, or an error is pending.
    pub const CLOSED: Readiness = Readiness(8);

    pub fn contains(self, other: Readiness) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn is_readable(self) -> bool {
        self.contains(Readiness::READABLE)
    }
    pub fn is_writable(self) -> bool {
        self.contains(Readiness::WRITABLE)
    }
    pub fn is_connected(self) -> bool {
        self.contains(Readiness::CONNECTED)
    }
    pub fn is_closed(self) -> bool {
        self.contains(Readiness::CLOSED)
    }
    /// Flags set in `self` and not in `before`.
    pub fn gained(self, before: Readiness) -> Readiness {
        Readiness(self.0 & !before.0)
    }
}

impl std::ops::BitOr for Readiness {
    type Output = Readiness;
    fn bitor(self, o: Readiness) -> Readiness {
        Readiness(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for Readiness {
    fn bitor_assign(&mut self, o: Readiness) {
        self.0 |= o.0;
    }
}

/// The readiness of a connection (see [`Readiness`] for each flag).
fn conn_readiness(c: &Connection) -> Readiness {
    let mut r = Readiness::NONE;
    let state = c.state();
    let error = c.pending_error().is_some();
    if c.can_recv() {
        r |= Readiness::READABLE;
    }
    if c.is_synchronized() {
        r |= Readiness::CONNECTED;
    }
    // Like Linux's tcp_poll: no EPOLLOUT before the handshake completes.
    if error || (c.is_synchronized() && c.can_send()) {
        r |= Readiness::WRITABLE;
    }
    if error || state == State::Closed {
        r |= Readiness::CLOSED;
    }
    r
}

/// The TCP scheduler's state (`Stack::tcp_sched_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpSchedStats {
    /// Connections on the ready list (work now).
    pub ready: usize,
    /// Entries in the timer heap (live and not yet skipped stale ones;
    /// kept below twice the sockets held plus a constant).
    pub timers: usize,
    /// Connection dispatches so far (each runs one connection's timers and
    /// output): a poll costs one per connection due, none per idle one.
    pub dispatches: u64,
    /// Connections `poll` has looked at so far (heap entries and ready-list
    /// entries taken): what a scan of the table would make proportional to
    /// the connections held.
    pub visits: u64,
}

/// What `Stack::tcp_status` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpStatus {
    pub state: State,
    /// In the socket's family: an IPv6 socket's IPv4 peers (a dual-stack
    /// listener's children, a connect to `::ffff:a.b.c.d`) appear as
    /// IPv4-mapped IPv6 addresses, as Linux reports them.
    pub local: SocketAddr,
    /// Unspecified (port 0) for a listener.
    pub remote: SocketAddr,
    /// Data, EOF or an error is waiting (a read will not block).
    pub can_recv: bool,
    /// Send buffer space is available (a write will not block).
    pub can_send: bool,
    /// Bytes queued for sending (not yet acknowledged).
    pub send_queue: usize,
    /// The send buffer's size now (autotuned; 0 for a listener): a send
    /// may queue `send_buffer - send_queue` bytes.
    pub send_buffer: usize,
    /// Bytes received, not yet read.
    pub recv_queue: usize,
    pub pending_error: Option<TcpError>,
    /// Listener: a connection is waiting in the accept queue.
    pub accept_ready: bool,
}

/// One row of the `ss`-like socket view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpInfo {
    pub state: State,
    /// As in [`TcpStatus`]: the socket's own family, IPv4 peers of an
    /// IPv6 socket as IPv4-mapped addresses.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Listener: accept queue length; connection: bytes received, unread.
    pub recv_queue: usize,
    /// Listener: backlog; connection: bytes unacknowledged or unsent.
    pub send_queue: usize,
    /// Smoothed RTT in microseconds, if measured.
    pub srtt_us: Option<u64>,
    /// Congestion window in bytes.
    pub cwnd: usize,
    /// The application has closed its handle (orphan).
    pub orphan: bool,
    /// An IPv6 listener with `IPV6_V6ONLY` (`ss` prints an unspecified
    /// IPv6 address as `*` only for a dual-stack socket).
    pub v6only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Child of a listener, not yet accepted (in the SYN queue or the
    /// accept queue).
    Listener { listener: TcpHandle, queued: bool },
    /// The application holds the handle.
    App,
    /// The application closed the handle; reaped when the connection ends.
    Released,
}

#[derive(Clone)]
struct Listener {
    local: SocketAddrV4,
    /// An IPv6 listener (`local` then holds only the port). It takes
    /// IPv6 SYNs, and IPv4 ones too when bound to `::` without
    /// `v6only` (a dual-stack listener, whose IPv4 children are seen as
    /// IPv4-mapped addresses); an IPv4 listener takes IPv4 SYNs only.
    local6: Option<SocketAddrV6>,
    /// `IPV6_V6ONLY` (IPv6 listeners only).
    v6only: bool,
    backlog: usize,
    /// Children still in SYN-RECEIVED.
    syn_queue: usize,
    accept: VecDeque<TcpHandle>,
    /// Children in SYN-RECEIVED that point at this listener (for `close`).
    embryos: Vec<TcpHandle>,
    /// Queued in the table's event list.
    ev_queued: bool,
    /// When this listener last answered a SYN with a cookie (Linux keeps
    /// it in the listener's `ts_recent_stamp`): only then, and for two
    /// minutes, are unmatched ACKs checked as cookies.
    last_cookie_at: Option<Instant>,
}

#[derive(Clone)]
struct Conn {
    conn: Connection,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    /// An IPv6 connection's addresses (`local` and `remote` then hold
    /// only the ports: see [`Tuple::ports_view`]).
    /// Boxed: IPv4 connections pay 8 bytes for it, not 60.
    v6: Option<Box<(SocketAddrV6, SocketAddrV6)>>,
    /// An IPv4 connection of an IPv6 socket (a dual-stack listener's
    /// child, or a connect to an IPv4-mapped address): the API sees its
    /// addresses as IPv4-mapped IPv6 ones; the wire is plain IPv4.
    mapped: bool,
    owner: Owner,
    /// Still present in the demux map.
    in_map: bool,
    /// Opened by `connect` (holds its local port in `active_ports`).
    active_open: bool,
    /// The earliest deadline this connection has in the timer heap.
    sched: Option<Instant>,
    /// Queued on the ready list.
    in_ready: bool,
    /// Queued in the event list.
    ev_queued: bool,
    /// Readiness and receive-queue length when last looked at (events are
    /// raised for flags gained and for new data).
    ev_bits: Readiness,
    ev_recv: usize,
    /// Send plus receive queue when last looked at (the table's `buffered`).
    held: usize,
}

impl Conn {
    /// The addresses the application sees (IPv4-mapped when `mapped`).
    fn api_addrs(&self) -> (SocketAddr, SocketAddr) {
        let (l, r) = self.tuple().addrs();
        if self.mapped {
            (mapped(l), mapped(r))
        } else {
            (l, r)
        }
    }

    fn tuple(&self) -> Tuple {
        match self.v6.as_deref() {
            Some(&(l, r)) => Tuple::V6(l, r),
            None => Tuple::V4(self.local, self.remote),
        }
    }

    fn new(
        conn: Connection,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        owner: Owner,
        active_open: bool,
    ) -> Conn {
        Conn {
            conn,
            local,
            remote,
            v6: None,
            mapped: false,
            owner,
            in_map: true,
            active_open,
            sched: None,
            in_ready: false,
            ev_queued: false,
            ev_bits: Readiness::NONE,
            ev_recv: 0,
            held: 0,
        }
    }
}

/// `a` as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) if it is IPv4.
fn mapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(v4) => {
            SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
        }
        v6 => v6,
    }
}

impl Listener {
    /// Whether this listener takes IPv4 SYNs: an IPv4 one, or an IPv6 one
    /// bound to `::` (or an IPv4-mapped address) without `IPV6_V6ONLY`.
    fn takes_v4(&self) -> bool {
        match self.local6 {
            None => true,
            Some(l6) => {
                !self.v6only && (l6.ip().is_unspecified() || l6.ip().to_ipv4_mapped().is_some())
            }
        }
    }

    fn addrs(&self) -> (SocketAddr, SocketAddr) {
        match self.local6 {
            Some(l6) => (
                SocketAddr::V6(l6),
                SocketAddr::V6(SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, 0, 0, 0)),
            ),
            None => (
                SocketAddr::V4(self.local),
                SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            ),
        }
    }
}

/// The listeners on one port: at most one of each family, and both only
/// when the IPv6 one is `IPV6_V6ONLY` (Linux's bind conflict rule for
/// wildcard addresses). Slot indexes; `NONE` for none.
#[derive(Debug, Clone, Copy)]
struct PortListeners {
    v4: u32,
    v6: u32,
}

impl PortListeners {
    const NONE: u32 = u32::MAX;
    fn get(&self, v6: bool) -> Option<u32> {
        let i = if v6 { self.v6 } else { self.v4 };
        (i != Self::NONE).then_some(i)
    }
}

/// A timer heap entry: `(deadline, slot index, slot generation)`.
type TimerEntry = Reverse<(Instant, u32, u32)>;

/// File connection `c` (slot `at`) by its next deadline: on the ready list
/// if it has work now, in the heap if its deadline is earlier than the
/// entry it already has there (see the module docs).
fn file(
    c: &mut Conn,
    at: (u32, u32),
    now: Instant,
    ready: &mut VecDeque<(u32, u32)>,
    timers: &mut BinaryHeap<TimerEntry>,
) {
    match c.conn.poll_at() {
        Some(t) if t <= now && !c.in_ready => {
            c.in_ready = true;
            ready.push_back(at);
        }
        Some(t) if t <= now => {}
        Some(t) if c.sched.is_none_or(|s| t < s) => {
            c.sched = Some(t);
            timers.push(Reverse((t, at.0, at.1)));
        }
        _ => {}
    }
}

#[derive(Clone)]
enum Sock {
    Listener(Listener),
    Conn(Box<Conn>),
}

#[derive(Clone)]
struct Slot {
    generation: u32,
    sock: Option<Sock>,
}

/// What to do with a received segment after demultiplexing.
pub(crate) enum Demux {
    /// Processed by a connection (dispatch it now).
    Conn(usize),
    /// No socket: answer with this RST (if any).
    Unmatched,
    /// Answer with this segment from the table itself (a SYN-ACK carrying
    /// a SYN cookie).
    Reply(TcpRepr<'static>),
    /// Dropped (listener overflow, RST to a listener ...).
    Dropped,
}

/// A connection's addresses, `(local, remote)`, in either family. IPv4
/// flows keep their own demux map keyed by the 12-byte tuple as before;
/// IPv6 flows have a second map, so IPv4 lookups hash no more than they did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tuple {
    V4(SocketAddrV4, SocketAddrV4),
    V6(SocketAddrV6, SocketAddrV6),
}

impl Tuple {
    fn local_port(&self) -> u16 {
        match self {
            Tuple::V4(l, _) => l.port(),
            Tuple::V6(l, _) => l.port(),
        }
    }

    fn is_v6(&self) -> bool {
        matches!(self, Tuple::V6(..))
    }

    fn with_local_port(self, port: u16) -> Tuple {
        match self {
            Tuple::V4(l, r) => Tuple::V4(SocketAddrV4::new(*l.ip(), port), r),
            Tuple::V6(l, r) => Tuple::V6(SocketAddrV6::new(*l.ip(), port, 0, l.scope_id()), r),
        }
    }

    /// The pair `Connection` takes (it uses only the ports): the tuple
    /// itself for IPv4; for IPv6 the ports with unspecified addresses.
    /// The remote address.
    fn remote_ip(&self) -> IpAddr {
        match self {
            Tuple::V4(_, r) => IpAddr::V4(*r.ip()),
            Tuple::V6(_, r) => IpAddr::V6(*r.ip()),
        }
    }

    fn ports_view(&self) -> (SocketAddrV4, SocketAddrV4) {
        match self {
            Tuple::V4(l, r) => (*l, *r),
            Tuple::V6(l, r) => (
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, l.port()),
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, r.port()),
            ),
        }
    }

    /// The pair the ISN generator and the SYN cookies hash: the tuple
    /// itself for IPv4; for IPv6 the ports with each address replaced by a
    /// keyed 32-bit hash of it, so both stay keyed functions of the whole
    /// IPv6 4-tuple.
    fn key_view(&self, secret: &[u8; 16]) -> (SocketAddrV4, SocketAddrV4) {
        match self {
            Tuple::V4(l, r) => (*l, *r),
            Tuple::V6(l, r) => {
                let fold = |a: &SocketAddrV6| {
                    let h = keyed_hash(secret, 0x7463_7036, &a.ip().octets()) as u32;
                    SocketAddrV4::new(Ipv4Addr::from(h), a.port())
                };
                (fold(l), fold(r))
            }
        }
    }

    /// The addresses as the emitter takes them.
    pub(crate) fn addrs(&self) -> (SocketAddr, SocketAddr) {
        match self {
            Tuple::V4(l, r) => (SocketAddr::V4(*l), SocketAddr::V4(*r)),
            Tuple::V6(l, r) => (SocketAddr::V6(*l), SocketAddr::V6(*r)),
        }
    }
}

#[derive(Clone)]
pub(crate) struct TcpTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    conns: HashMap<(SocketAddrV4, SocketAddrV4), u32, KeyedState>,
    /// IPv6 connections (see [`Tuple`]).
    conns6: HashMap<(SocketAddrV6, SocketAddrV6), u32, KeyedState>,
    listeners: HashMap<u16, PortListeners, KeyedState>,
    /// Local ports held by active opens (for `listen` conflicts).
    active_ports: HashMap<u16, u32, KeyedState>,
    live: usize,
    /// Sum of every connection's `held` (`Stack::tcp_buffered`).
    buffered: usize,
    isn: Isn,
    /// SYN cookies' keyed hashes.
    cookies: CookieJar,
    cfg: TcpConfig,
    /// The interface's MSS (a destination's may be lower, `PmtuCache`).
    route_mss: u16,
    /// A lower MSS for IPv6 connections when a Router Advertisement gave
    /// the link a smaller IPv6 MTU (`u16::MAX`: none).
    route_mss6: u16,
    max_sockets: usize,
    max_syn_backlog: usize,
    secret: [u8; 16],
    next_ephemeral: u32,
    /// Future deadlines (see the module docs).
    timers: BinaryHeap<TimerEntry>,
    /// Connections with work now, `(index, generation)`, each at most once.
    ready: VecDeque<(u32, u32)>,
    /// Sockets whose readiness changed since the last `take_events`.
    events: Vec<TcpHandle>,
    /// The latest time the table was told about.
    now: Instant,
    /// Connections dispatched / looked at by `poll` so far (diagnostics).
    dispatches: u64,
    visits: u64,
    /// Reachability advice from dispatched connections, per remote address,
    /// for the neighbour cache (drained by the Stack; reused, no per-packet
    /// allocation once grown).
    pub(crate) advice: Vec<(Ipv4Addr, NeighbourAdvice)>,
    /// The same for IPv6 connections' remote addresses.
    pub(crate) advice6: Vec<(std::net::Ipv6Addr, NeighbourAdvice)>,
    /// What the connections share while they run.
    shared: TcpShared,
}

impl TcpTable {
    pub(crate) fn new(
        cfg: TcpConfig,
        secret: [u8; 16],
        route_mss: u16,
        max_sockets: usize,
        max_syn_backlog: usize,
        hasher: KeyedState,
    ) -> Self {
        let shared = TcpShared::new(&cfg, secret);
        TcpTable {
            slots: Vec::new(),
            free: Vec::new(),
            conns: HashMap::with_hasher(hasher),
            conns6: HashMap::with_hasher(hasher),
            listeners: HashMap::with_hasher(hasher),
            active_ports: HashMap::with_hasher(hasher),
            live: 0,
            buffered: 0,
            isn: Isn::new(secret),
            cookies: CookieJar::new(secret),
            cfg,
            route_mss,
            route_mss6: u16::MAX,
            max_sockets,
            max_syn_backlog,
            secret,
            next_ephemeral: 0,
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            events: Vec::new(),
            now: Instant::ZERO,
            dispatches: 0,
            visits: 0,
            advice: Vec::new(),
            advice6: Vec::new(),
            shared,
        }
    }

    /// Sockets of all kinds in the table (listeners, connections, orphans).
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Bytes queued or received and unread in every connection.
    pub(crate) fn buffered(&self) -> usize {
        self.buffered
    }

    fn alloc(&mut self, sock: Sock) -> Option<TcpHandle> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(Slot {
                    generation: 0,
                    sock: None,
                });
                i
            }
        };
        let slot = self.slots.get_mut(index as usize)?;
        slot.sock = Some(sock);
        self.live += 1;
        Some(TcpHandle {
            index,
            generation: slot.generation,
        })
    }

    fn free_slot(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let Some(sock) = slot.sock.take() else { return };
        slot.generation = slot.generation.wrapping_add(1);
        self.live -= 1;
        self.free.push(index as u32);
        match sock {
            Sock::Listener(l) => {
                let port = l.local.port();
                if let Some(e) = self.listeners.get_mut(&port) {
                    let me = index as u32;
                    if e.v4 == me {
                        e.v4 = PortListeners::NONE;
                    }
                    if e.v6 == me {
                        e.v6 = PortListeners::NONE;
                    }
                    if e.v4 == PortListeners::NONE && e.v6 == PortListeners::NONE {
                        self.listeners.remove(&port);
                    }
                }
            }
            Sock::Conn(c) => {
                self.buffered = self.buffered.saturating_sub(c.held);
                if c.in_map {
                    match c.v6 {
                        Some(k) => self.conns6.remove(&*k),
                        None => self.conns.remove(&(c.local, c.remote)),
                    };
                }
                if c.active_open {
                    if let Some(n) = self.active_ports.get_mut(&c.local.port()) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            self.active_ports.remove(&c.local.port());
                        }
                    }
                }
            }
        }
    }

    fn handle_of(&self, index: usize) -> Option<TcpHandle> {
        let slot = self.slots.get(index)?;
        slot.sock.as_ref()?;
        Some(TcpHandle {
            index: index as u32,
            generation: slot.generation,
        })
    }

    fn sock(&self, h: TcpHandle) -> Result<&Sock, TcpError> {
        self.slots
            .get(h.index as usize)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.sock.as_ref())
            .ok_or(TcpError::InvalidHandle)
    }

    fn sock_mut(&mut self, h: TcpHandle) -> Result<&mut Sock, TcpError> {
        self.slots
            .get_mut(h.index as usize)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.sock.as_mut())
            .ok_or(TcpError::InvalidHandle)
    }

    /// The application's connection behind `h` (not a listener, not released).
    pub(crate) fn conn_mut(&mut self, h: TcpHandle) -> Result<&mut Connection, TcpError> {
        match self.sock_mut(h)? {
            Sock::Conn(c) if c.owner == Owner::App => Ok(&mut c.conn),
            Sock::Conn(_) => Err(TcpError::InvalidHandle),
            Sock::Listener(_) => Err(TcpError::InvalidState),
        }
    }

    // ------------------------------------------------------------------
    // Application operations
    // ------------------------------------------------------------------

    /// The configuration new connections (and listeners' children) take
    /// from now on; connections already open keep theirs. The stack-wide
    /// tunables (challenge-ACK budget, MTU-probe tunables) change at once.
    pub(crate) fn set_config(&mut self, cfg: TcpConfig) {
        self.shared.challenge.set_limit(cfg.challenge_ack_limit);
        self.shared.probe.threshold = usize::from(cfg.probe_threshold);
        self.shared.probe.interval = cfg.probe_interval;
        self.cfg = cfg;
    }

    /// Whether `seg` on `t` asks a listener for a new connection: a SYN
    /// (no ACK, no RST) on no connection, to a port with a listener.
    pub(crate) fn is_conn_request(&self, t: &Tuple, seg: &TcpRepr) -> bool {
        seg.syn
            && seg.ack.is_none()
            && !seg.rst
            && self.lookup(t).is_none()
            && self.listener_for(t.local_port(), t.is_v6()).is_some()
    }

    /// The connection on `t`, if any.
    fn lookup(&self, t: &Tuple) -> Option<u32> {
        match t {
            Tuple::V4(l, r) => self.conns.get(&(*l, *r)).copied(),
            Tuple::V6(l, r) => self.conns6.get(&(*l, *r)).copied(),
        }
    }

    fn map_insert(&mut self, t: Tuple, idx: u32) {
        match t {
            Tuple::V4(l, r) => self.conns.insert((l, r), idx),
            Tuple::V6(l, r) => self.conns6.insert((l, r), idx),
        };
    }

    fn map_remove(&mut self, t: &Tuple) {
        match t {
            Tuple::V4(l, r) => self.conns.remove(&(*l, *r)),
            Tuple::V6(l, r) => self.conns6.remove(&(*l, *r)),
        };
    }

    /// A new connection entry for `t` (IPv6 addresses kept beside it).
    fn new_conn(&self, conn: Connection, t: Tuple, owner: Owner, active_open: bool) -> Conn {
        let (l, r) = t.ports_view();
        let mut c = Conn::new(conn, l, r, owner, active_open);
        if let Tuple::V6(l6, r6) = t {
            c.v6 = Some(Box::new((l6, r6)));
        }
        c
    }

    /// The MSS of a new connection's route: the path MTU cache's for IPv4;
    /// for IPv6 the interface's less the 20 more bytes of its header.
    fn route_mss_for(&self, now: Instant, t: &Tuple, pmtu: &PmtuCache) -> u16 {
        match t {
            Tuple::V4(_, r) => pmtu.mss(now, *r.ip(), self.route_mss),
            Tuple::V6(_, r) => {
                let link = self.route_mss.saturating_sub(20).min(self.route_mss6);
                pmtu.mss(now, *r.ip(), link.max(64))
            }
        }
    }

    /// A socket's addresses, `(local, remote)` (remote unspecified for a
    /// listener), in its own family.
    pub(crate) fn addrs(&self, h: TcpHandle) -> Result<(SocketAddr, SocketAddr), TcpError> {
        match self.sock(h)? {
            Sock::Listener(l) => Ok(l.addrs()),
            Sock::Conn(c) => Ok(c.api_addrs()),
        }
    }

    pub(crate) fn listen(
        &mut self,
        local: SocketAddrV4,
        backlog: usize,
    ) -> Result<TcpHandle, BindError> {
        self.listen_any(SocketAddr::V4(local), backlog, false)
    }

    /// Whether a listener of family `v6` (with `v6only`) may join the
    /// listeners already on `port`, as Linux's bind conflict rules for
    /// wildcard addresses have it: one per family, and an IPv4 one beside
    /// an IPv6 one only if the IPv6 one is `IPV6_V6ONLY`.
    fn listen_conflict(&self, port: u16, v6: bool, v6only: bool) -> bool {
        if self.active_ports.contains_key(&port) {
            return true;
        }
        let Some(e) = self.listeners.get(&port) else {
            return false;
        };
        if e.get(v6).is_some() {
            return true;
        }
        match e.get(!v6) {
            None => false,
            // Adding IPv6 beside IPv4: only as v6only.
            Some(_) if v6 => !v6only,
            // Adding IPv4 beside IPv6: only if that one is v6only.
            Some(i) => !matches!(
                self.slots.get(i as usize).and_then(|s| s.sock.as_ref()),
                Some(Sock::Listener(l)) if l.v6only
            ),
        }
    }

    /// Listen on `local` in its family (see [`TcpTable::listen_conflict`]
    /// for who may share a port).
    pub(crate) fn listen_any(
        &mut self,
        local: SocketAddr,
        backlog: usize,
        v6only: bool,
    ) -> Result<TcpHandle, BindError> {
        if self.live >= self.max_sockets {
            return Err(BindError::Exhausted);
        }
        let port = if local.port() == 0 {
            self.pick_listen_port().ok_or(BindError::Exhausted)?
        } else {
            local.port()
        };
        let v6 = local.is_ipv6();
        if self.listen_conflict(port, v6, v6only) {
            return Err(BindError::AddrInUse);
        }
        let (local, local6) = match local {
            SocketAddr::V4(l) => (SocketAddrV4::new(*l.ip(), port), None),
            SocketAddr::V6(l) => (
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port),
                Some(SocketAddrV6::new(*l.ip(), port, 0, l.scope_id())),
            ),
        };
        // Linux caps the backlog at somaxconn (4096) and treats 0 as 1.
        let backlog = backlog.clamp(1, 4096);
        let l = Listener {
            local,
            local6,
            v6only: v6only && v6,
            backlog,
            syn_queue: 0,
            accept: VecDeque::new(),
            embryos: Vec::new(),
            ev_queued: false,
            last_cookie_at: None,
        };
        let h = self.alloc(Sock::Listener(l)).ok_or(BindError::Exhausted)?;
        let e = self.listeners.entry(port).or_insert(PortListeners {
            v4: PortListeners::NONE,
            v6: PortListeners::NONE,
        });
        if v6 {
            e.v6 = h.index;
        } else {
            e.v4 = h.index;
        }
        Ok(h)
    }

    /// Set `IPV6_V6ONLY` on IPv6 listener `h`. Turning it off fails with
    /// `InvalidState` (EINVAL, what Linux answers for the option on a
    /// bound socket) while an IPv4 listener shares the port: the two
    /// would conflict as at bind time.
    pub(crate) fn set_v6only(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        let port = match self.sock(h)? {
            Sock::Listener(l) if l.local6.is_some() => l.local.port(),
            _ => return Err(TcpError::InvalidState),
        };
        let v4_too = self
            .listeners
            .get(&port)
            .is_some_and(|e| e.get(false).is_some());
        if !on && v4_too {
            return Err(TcpError::InvalidState);
        }
        if let Ok(Sock::Listener(l)) = self.sock_mut(h) {
            l.v6only = on;
        }
        Ok(())
    }

    /// `IPV6_V6ONLY` of listener `h` (false for an IPv4 one).
    pub(crate) fn v6only(&self, h: TcpHandle) -> Result<bool, TcpError> {
        match self.sock(h)? {
            Sock::Listener(l) => Ok(l.v6only),
            Sock::Conn(_) => Err(TcpError::InvalidState),
        }
    }

    /// The listener for a SYN of tuple `t` on `port`: its family's, else
    /// (IPv4) a dual-stack IPv6 one. Returns the slot index and whether
    /// the child is an IPv4 connection of an IPv6 socket.
    fn listener_for(&self, port: u16, v6: bool) -> Option<(u32, bool)> {
        let e = self.listeners.get(&port)?;
        if let Some(i) = e.get(v6) {
            return Some((i, false));
        }
        if v6 {
            return None;
        }
        let i = e.get(true)?;
        match self.slots.get(i as usize).and_then(|s| s.sock.as_ref()) {
            Some(Sock::Listener(l)) if l.takes_v4() => Some((i, true)),
            _ => None,
        }
    }

    fn pick_listen_port(&mut self) -> Option<u16> {
        let n = u32::from(EPHEMERAL_LAST - EPHEMERAL_FIRST) + 1;
        let offset = keyed_hash(&self.secret, 0x6c69_7374, &[]) as u32;
        (0..n)
            .map(|i| {
                (u32::from(EPHEMERAL_FIRST)
                    + offset.wrapping_add(self.next_ephemeral).wrapping_add(i) % n)
                    as u16
            })
            .find(|p| !self.listeners.contains_key(p) && !self.active_ports.contains_key(p))
    }

    pub(crate) fn accept(&mut self, h: TcpHandle) -> Result<Option<TcpHandle>, TcpError> {
        let child = match self.sock_mut(h)? {
            Sock::Listener(l) => l.accept.pop_front(),
            Sock::Conn(_) => return Err(TcpError::InvalidState),
        };
        let Some(child) = child else { return Ok(None) };
        if let Ok(Sock::Conn(c)) = self.sock_mut(child) {
            c.owner = Owner::App;
            // The application looks at a new socket itself: events are for
            // what changes from now on.
            c.ev_bits = conn_readiness(&c.conn);
            c.ev_recv = c.conn.recv_queue();
        }
        Ok(Some(child))
    }

    /// RFC 6056 algorithm 3 ("Simple Hash-Based Port Selection"):
    /// `offset = F(local_IP, remote_IP, remote_port, secret_key)`,
    /// `port = min_ephemeral + (offset + next_ephemeral + i) % num_ephemeral`,
    /// probing until the 4-tuple is free.
    /// `route_mss`: the MSS of the path to `remote` (RFC 1191: what the
    /// path MTU cache knows, else the interface's).
    pub(crate) fn connect(
        &mut self,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        route_mss: u16,
    ) -> Result<TcpHandle, ConnectError> {
        self.connect_any(now, Tuple::V4(local, remote), route_mss)
    }

    /// `connect` in either family (`t`: local, remote).
    pub(crate) fn connect_any(
        &mut self,
        now: Instant,
        t: Tuple,
        route_mss: u16,
    ) -> Result<TcpHandle, ConnectError> {
        if self.live >= self.max_sockets {
            return Err(ConnectError::Exhausted);
        }
        let lport = t.local_port();
        let port = if lport != 0 {
            if self.lookup(&t).is_some() || self.listeners.contains_key(&lport) {
                return Err(ConnectError::AddrInUse);
            }
            lport
        } else {
            let n = u32::from(EPHEMERAL_LAST - EPHEMERAL_FIRST) + 1;
            let offset = match &t {
                Tuple::V4(local, remote) => {
                    let mut key = [0u8; 10];
                    key[..4].copy_from_slice(&local.ip().octets());
                    key[4..8].copy_from_slice(&remote.ip().octets());
                    key[8..].copy_from_slice(&remote.port().to_be_bytes());
                    keyed_hash(&self.secret, 0x7463_7000, &key) as u32
                }
                Tuple::V6(local, remote) => {
                    let mut key = [0u8; 34];
                    key[..16].copy_from_slice(&local.ip().octets());
                    key[16..32].copy_from_slice(&remote.ip().octets());
                    key[32..].copy_from_slice(&remote.port().to_be_bytes());
                    keyed_hash(&self.secret, 0x7463_7000, &key) as u32
                }
            };
            let mut found = None;
            for i in 0..n {
                let p = (u32::from(EPHEMERAL_FIRST)
                    + offset.wrapping_add(self.next_ephemeral).wrapping_add(i) % n)
                    as u16;
                let cand = t.with_local_port(p);
                if self.lookup(&cand).is_none() && !self.listeners.contains_key(&p) {
                    self.next_ephemeral = self.next_ephemeral.wrapping_add(i + 1);
                    found = Some(p);
                    break;
                }
            }
            found.ok_or(ConnectError::Exhausted)?
        };
        let t = t.with_local_port(port);
        let (kl, kr) = t.key_view(&self.secret);
        let iss = self.isn.generate(kl, kr, now);
        let (local, remote) = t.ports_view();
        let conn = Connection::connect(&self.cfg, local, remote, iss, route_mss, now);
        let c = self.new_conn(conn, t, Owner::App, true);
        let h = self
            .alloc(Sock::Conn(Box::new(c)))
            .ok_or(ConnectError::Exhausted)?;
        self.map_insert(t, h.index);
        *self.active_ports.entry(port).or_insert(0) += 1;
        self.now = self.now.max(now);
        // The SYN goes out on the next poll.
        self.touched(h.index as usize);
        Ok(h)
    }

    /// Mark connection `h` as an IPv4 connection of an IPv6 socket (a
    /// connect to an IPv4-mapped address): its addresses are reported
    /// IPv4-mapped.
    pub(crate) fn set_mapped(&mut self, h: TcpHandle) {
        if let Ok(Sock::Conn(c)) = self.sock_mut(h) {
            c.mapped = true;
        }
    }

    /// Release the handle: a listener stops (unaccepted children are
    /// reset); a connection is closed gracefully and reaped when done.
    pub(crate) fn close(&mut self, h: TcpHandle, abort: bool) {
        let Ok(sock) = self.sock_mut(h) else { return };
        match sock {
            Sock::Listener(l) => {
                // Children in the accept queue, and those still in the SYN
                // queue (the embryo list may hold stale handles: checked).
                let mut children: Vec<TcpHandle> = l.accept.drain(..).collect();
                children.append(&mut l.embryos);
                self.free_slot(h.index as usize);
                for child in children {
                    let ours = match self.sock_mut(child) {
                        Ok(Sock::Conn(c)) => match c.owner {
                            Owner::Listener { listener, .. } if listener == h => {
                                c.conn.abort();
                                c.owner = Owner::Released;
                                true
                            }
                            _ => false,
                        },
                        _ => false,
                    };
                    if ours {
                        self.touched(child.index as usize);
                    }
                }
            }
            Sock::Conn(c) => {
                if c.owner != Owner::App {
                    return;
                }
                if abort {
                    c.conn.abort();
                } else {
                    c.conn.close();
                }
                c.owner = Owner::Released;
                self.touched(h.index as usize);
            }
        }
    }

    /// The connection's own view (`ss -i`, Linux `TCP_INFO`).
    pub(crate) fn conn_info(&self, h: TcpHandle) -> Result<TcpConnInfo, TcpError> {
        match self.sock(h)? {
            Sock::Conn(c) if c.owner == Owner::App => Ok(c.conn.info_at(self.now)),
            Sock::Conn(_) => Err(TcpError::InvalidHandle),
            Sock::Listener(_) => Err(TcpError::InvalidState),
        }
    }

    pub(crate) fn status(&self, h: TcpHandle) -> Result<TcpStatus, TcpError> {
        match self.sock(h)? {
            Sock::Listener(l) => Ok(TcpStatus {
                state: State::Listen,
                local: l.addrs().0,
                remote: l.addrs().1,
                can_recv: !l.accept.is_empty(),
                can_send: false,
                send_queue: 0,
                send_buffer: 0,
                recv_queue: 0,
                pending_error: None,
                accept_ready: !l.accept.is_empty(),
            }),
            Sock::Conn(c) if c.owner == Owner::App => {
                let i = c.conn.info();
                let (local, remote) = c.api_addrs();
                Ok(TcpStatus {
                    state: c.conn.state(),
                    local,
                    remote,
                    can_recv: i.can_recv,
                    can_send: i.can_send,
                    send_queue: i.send_queue,
                    send_buffer: i.send_buffer,
                    recv_queue: i.recv_queue,
                    pending_error: i.pending_error,
                    accept_ready: false,
                })
            }
            Sock::Conn(_) => Err(TcpError::InvalidHandle),
        }
    }

    pub(crate) fn sockets(&self) -> Vec<TcpInfo> {
        self.sockets_with(|_| ())
            .into_iter()
            .map(|(_, t, _)| t)
            .collect()
    }

    /// Every socket with its handle and, for connections, `detail` of its
    /// connection.
    pub(crate) fn sockets_with<D>(
        &self,
        mut detail: impl FnMut(&TcpConnInfo) -> D,
    ) -> Vec<(TcpHandle, TcpInfo, Option<D>)> {
        let mut v = Vec::with_capacity(self.live);
        for (index, slot) in self.slots.iter().enumerate() {
            let h = TcpHandle {
                index: index as u32,
                generation: slot.generation,
            };
            match &slot.sock {
                Some(Sock::Listener(l)) => v.push((
                    h,
                    TcpInfo {
                        state: State::Listen,
                        local: l.addrs().0,
                        remote: l.addrs().1,
                        recv_queue: l.accept.len(),
                        send_queue: l.backlog,
                        srtt_us: None,
                        cwnd: 0,
                        orphan: false,
                        v6only: l.v6only,
                    },
                    None,
                )),
                Some(Sock::Conn(c)) => {
                    let i = c.conn.info();
                    let (local, remote) = c.api_addrs();
                    v.push((
                        h,
                        TcpInfo {
                            state: c.conn.state(),
                            local,
                            remote,
                            recv_queue: i.recv_queue,
                            send_queue: i.send_queue,
                            srtt_us: i.srtt.map(|d| d.as_micros() as u64),
                            cwnd: i.cwnd,
                            orphan: c.owner == Owner::Released,
                            v6only: false,
                        },
                        Some(detail(&i)),
                    ))
                }
                None => {}
            }
        }
        v
    }

    // ------------------------------------------------------------------
    // Segment arrival
    // ------------------------------------------------------------------

    /// Find the connection for `seg` (creating a child for a SYN to a
    /// listener) and let it process the segment. `gso_size`: the payload
    /// size of each wire segment `seg` stands for (see
    /// [`Connection::process_gso`]). `pmtu`: the path MTUs known, for the
    /// MSS of a connection created.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn input(
        &mut self,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        seg: &TcpRepr,
        gso_size: usize,
        ctr: &mut TcpCounters,
        ext: &mut TcpStackCounters,
        pmtu: &PmtuCache,
    ) -> Demux {
        let t = Tuple::V4(local, remote);
        self.input_any(now, t, seg, gso_size, ctr, ext, pmtu)
    }

    /// [`TcpTable::input`] in either family.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn input_any(
        &mut self,
        now: Instant,
        t: Tuple,
        seg: &TcpRepr,
        gso_size: usize,
        ctr: &mut TcpCounters,
        ext: &mut TcpStackCounters,
        pmtu: &PmtuCache,
    ) -> Demux {
        self.now = self.now.max(now);
        let lport = t.local_port();
        // Reopening a TIME-WAIT connection: the new ISS (Linux
        // `tcp_timewait_state_process`: the old SND.NXT + 65535 + 2, so the
        // new connection's sequence space starts above the old one's).
        let mut reuse_iss = None;
        if let Some(idx) = self.lookup(&t) {
            let idx = idx as usize;
            let reuse = match self.slots.get(idx).and_then(|s| s.sock.as_ref()) {
                Some(Sock::Conn(c)) => {
                    let ok = c.conn.state() == State::TimeWait
                        && seg.syn
                        && seg.ack.is_none()
                        && self.listener_for(lport, t.is_v6()).is_some()
                        && c.conn.accepts_reuse_syn(seg);
                    if ok {
                        reuse_iss = Some(c.conn.snd_max() + 65_537u32);
                    }
                    ok
                }
                _ => false,
            };
            if !reuse {
                if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut())
                {
                    c.conn
                        .process_gso(now, seg, gso_size, ctr, &mut self.shared);
                }
                return Demux::Conn(idx);
            }
            // RFC 9293 3.6.1: a SYN acceptable to a TIME-WAIT connection
            // reopens it; drop the old control block and fall to the listener.
            self.detach(idx);
        }
        let Some((lidx, mapped)) = self.listener_for(lport, t.is_v6()) else {
            return Demux::Unmatched;
        };
        // RFC 9293 3.10.7.2 (LISTEN): "first check for an RST ... An incoming
        // RST segment could not be valid since it could not have been sent in
        // response to anything sent by this incarnation of the connection. An
        // incoming RST should be ignored." "second check for an ACK ... Any
        // acknowledgment is bad if it arrives on a connection still in the
        // LISTEN state. An acceptable reset segment should be formed for any
        // arriving ACK-bearing segment."
        if seg.rst {
            return Demux::Dropped;
        }
        if seg.ack.is_some() {
            if seg.syn {
                return Demux::Unmatched;
            }
            let route_mss = self.route_mss_for(now, &t, pmtu);
            return self.cookie_ack(
                now,
                (lidx as usize, mapped),
                t,
                seg,
                gso_size,
                route_mss,
                ctr,
                ext,
            );
        }
        if !seg.syn {
            // "fourth other data or control ... drop the segment and return".
            return Demux::Dropped;
        }
        let Some(lh) = self.handle_of(lidx as usize) else {
            return Demux::Unmatched;
        };
        let (syn_queue, accept_len, backlog) = match self.sock(lh) {
            Ok(Sock::Listener(l)) => (l.syn_queue, l.accept.len(), l.backlog),
            _ => return Demux::Unmatched,
        };
        // Bounded backlog, as Linux (`tcp_conn_request`): a full SYN queue
        // (half-open connections, at most min(backlog, tcp_max_syn_backlog),
        // or a full socket table) is answered with a SYN cookie when
        // cookies are on (TCPReqQFullDoCookies), else the SYN is dropped
        // (TCPReqQFullDrop). RFC 4987 3.6: "SYN cookies ... [allow] the
        // server to avoid the need to store any state ... until the
        // three-way handshake is completed." A full accept queue drops
        // the SYN either way (ListenOverflows), as Linux does: a cookie's
        // connection would find it full too. Drops count ListenDrops.
        let full = syn_queue >= backlog.min(self.max_syn_backlog) || self.live >= self.max_sockets;
        let want_cookie = match self.cfg.syncookies {
            SynCookies::Off => false,
            SynCookies::WhenNeeded => full,
            SynCookies::Always => true,
        };
        if full && !want_cookie {
            ext.TCPReqQFullDrop += 1;
            ext.ListenDrops += 1;
            return Demux::Dropped;
        }
        if want_cookie {
            ext.TCPReqQFullDoCookies += 1;
        }
        if accept_len >= backlog {
            ext.ListenOverflows += 1;
            ext.ListenDrops += 1;
            return Demux::Dropped;
        }
        let route_mss = self.route_mss_for(now, &t, pmtu);
        let (kl, kr) = t.key_view(&self.secret);
        if want_cookie {
            let reply = self.cookies.syn_ack(&self.cfg, kl, kr, seg, route_mss, now);
            if let Ok(Sock::Listener(l)) = self.sock_mut(lh) {
                l.last_cookie_at = Some(now);
            }
            ext.SyncookiesSent += 1;
            return Demux::Reply(reply);
        }
        let iss = reuse_iss.unwrap_or_else(|| self.isn.generate(kl, kr, now));
        let (local, remote) = t.ports_view();
        let mut conn = Connection::accept(&self.cfg, local, remote, seg, iss, route_mss, now);
        conn.apply_route(pmtu.metrics(t.remote_ip()));
        let owner = Owner::Listener {
            listener: lh,
            queued: false,
        };
        let mut c = self.new_conn(conn, t, owner, false);
        c.mapped = mapped;
        let Some(h) = self.alloc(Sock::Conn(Box::new(c))) else {
            ext.ListenDrops += 1;
            return Demux::Dropped;
        };
        self.map_insert(t, h.index);
        if let Ok(Sock::Listener(l)) = self.sock_mut(lh) {
            l.syn_queue += 1;
            l.embryos.push(h);
            // Forget embryos that have grown up or died once they
            // outnumber the live ones (amortised O(1) per child).
            if l.embryos.len() > 2 * l.syn_queue + 16 {
                let embryos = std::mem::take(&mut l.embryos);
                let keep: Vec<TcpHandle> = embryos
                    .into_iter()
                    .filter(|e| {
                        self.slots
                            .get(e.index as usize)
                            .filter(|s| s.generation == e.generation)
                            .and_then(|s| s.sock.as_ref())
                            .is_some_and(|s| matches!(s, Sock::Conn(c) if c.owner == owner))
                    })
                    .collect();
                if let Ok(Sock::Listener(l)) = self.sock_mut(lh) {
                    l.embryos = keep;
                }
            }
        }
        Demux::Conn(h.index as usize)
    }

    /// An ACK (without SYN or RST) to listener `lidx` that matched no
    /// connection: the final ACK of a handshake answered with a SYN cookie?
    /// As Linux's `cookie_v4_check`: checked only while the listener has
    /// sent cookies in the last two minutes (else, and when the options it
    /// restores contradict ours, RST as RFC 9293 3.10.7.2 says for an ACK
    /// in LISTEN); an invalid cookie counts SyncookiesFailed and is
    /// answered with RST; a valid one creates the connection in
    /// ESTABLISHED, straight into the accept queue, unless that queue is
    /// full (ListenOverflows: dropped without an answer, as Linux does; the
    /// peer's next segment carries the same cookie).
    #[allow(clippy::too_many_arguments)]
    fn cookie_ack(
        &mut self,
        now: Instant,
        (lidx, mapped): (usize, bool),
        t: Tuple,
        seg: &TcpRepr,
        gso_size: usize,
        route_mss: u16,
        ctr: &mut TcpCounters,
        ext: &mut TcpStackCounters,
    ) -> Demux {
        let Some(lh) = self.handle_of(lidx) else {
            return Demux::Unmatched;
        };
        let (recent, accept_len, backlog) = match self.sock(lh) {
            Ok(Sock::Listener(l)) => (
                l.last_cookie_at
                    .is_some_and(|t| now.saturating_duration_since(t) < SYNCOOKIE_VALID),
                l.accept.len(),
                l.backlog,
            ),
            _ => return Demux::Unmatched,
        };
        let Some(ack) = seg.ack else {
            return Demux::Unmatched;
        };
        if self.cfg.syncookies == SynCookies::Off || !recent {
            return Demux::Unmatched;
        }
        let (kl, kr) = t.key_view(&self.secret);
        let (local, remote) = t.ports_view();
        let Some(mss) = self
            .cookies
            .check(kl, kr, seg.seq - 1usize, ack - 1usize, now)
        else {
            ext.SyncookiesFailed += 1;
            return Demux::Unmatched;
        };
        ext.SyncookiesRecv += 1;
        let Some(restored) = restore_cookie(&self.cfg, seg, mss) else {
            return Demux::Unmatched;
        };
        if accept_len >= backlog {
            ext.ListenOverflows += 1;
            ext.ListenDrops += 1;
            return Demux::Dropped;
        }
        if self.live >= self.max_sockets {
            ext.ListenDrops += 1;
            return Demux::Dropped;
        }
        let conn =
            Connection::from_cookie(&self.cfg, local, remote, seg, restored, route_mss, now, ctr);
        let owner = Owner::Listener {
            listener: lh,
            queued: true,
        };
        let mut c = self.new_conn(conn, t, owner, false);
        c.mapped = mapped;
        let Some(h) = self.alloc(Sock::Conn(Box::new(c))) else {
            ext.ListenDrops += 1;
            return Demux::Dropped;
        };
        self.map_insert(t, h.index);
        if let Ok(Sock::Listener(l)) = self.sock_mut(lh) {
            l.accept.push_back(h);
            if !l.ev_queued {
                l.ev_queued = true;
                self.events.push(lh);
            }
        }
        // The ACK may carry data or a FIN: the connection takes it now.
        if let Some(Some(Sock::Conn(c))) = self
            .slots
            .get_mut(h.index as usize)
            .map(|s| s.sock.as_mut())
        {
            c.conn
                .process_gso(now, seg, gso_size, ctr, &mut self.shared);
        }
        Demux::Conn(h.index as usize)
    }

    /// Remove a connection from the demux map and free it (TIME-WAIT reuse).
    fn detach(&mut self, idx: usize) {
        if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
            if c.owner == Owner::App {
                // The application still holds it: only unhook it.
                c.in_map = false;
                let t = c.tuple();
                self.map_remove(&t);
                return;
            }
        }
        self.free_slot(idx);
    }

    /// Deliver an ICMP destination unreachable to the connection it quotes.
    pub(crate) fn icmp(
        &mut self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        f: impl FnOnce(&mut Connection),
    ) {
        let Some(&idx) = self.conns.get(&(local, remote)) else {
            return;
        };
        let idx = idx as usize;
        if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
            f(&mut c.conn);
        }
        self.touched(idx);
    }

    /// The IPv6 link MTU a Router Advertisement set: new IPv6 connections
    /// take an MSS within it.
    pub(crate) fn set_route_mss6(&mut self, mss: u16) {
        self.route_mss6 = mss;
    }

    /// Every IPv6 connection to `remote` learns that the path carries
    /// `mtu4` bytes (IPv4 terms: the connection counts 40 bytes of
    /// headers); those whose segments no longer fit send again.
    pub(crate) fn mtu_reduced6(&mut self, remote: std::net::Ipv6Addr, mtu4: u16) {
        let idxs: Vec<u32> = self
            .conns6
            .iter()
            .filter(|((_, r), _)| *r.ip() == remote)
            .map(|(_, &i)| i)
            .collect();
        for idx in idxs {
            let idx = idx as usize;
            if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
                c.conn.path_mtu_reduced(mtu4);
            }
            self.touched(idx);
        }
    }

    /// The route to `remote` changed (`Stack::set_route_metrics`): every
    /// connection to it takes the route's MSS (Linux: the socket's cached
    /// `dst` is obsolete; see `Connection::route_changed`).
    pub(crate) fn route_changed(&mut self, now: Instant, remote: IpAddr, pmtu: &PmtuCache) {
        let idxs: Vec<(u32, Tuple)> = match remote {
            IpAddr::V4(r) => self
                .conns
                .iter()
                .filter(|((_, rem), _)| *rem.ip() == r)
                .map(|(&(l, rem), &i)| (i, Tuple::V4(l, rem)))
                .collect(),
            IpAddr::V6(r) => self
                .conns6
                .iter()
                .filter(|((_, rem), _)| *rem.ip() == r)
                .map(|(&(l, rem), &i)| (i, Tuple::V6(l, rem)))
                .collect(),
        };
        for (idx, t) in idxs {
            let mss = self.route_mss_for(now, &t, pmtu);
            let idx = idx as usize;
            if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
                c.conn.route_changed(mss);
            }
            self.touched(idx);
        }
    }

    /// [`TcpTable::icmp`] for an IPv6 connection.
    pub(crate) fn icmp6(
        &mut self,
        local: SocketAddrV6,
        remote: SocketAddrV6,
        f: impl FnOnce(&mut Connection),
    ) {
        let Some(&idx) = self.conns6.get(&(local, remote)) else {
            return;
        };
        let idx = idx as usize;
        if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
            f(&mut c.conn);
        }
        self.touched(idx);
    }

    /// Run an application operation on the connection behind `h`, then
    /// re-file it (its deadline, readiness and lifecycle may have changed).
    pub(crate) fn with_conn<R>(
        &mut self,
        h: TcpHandle,
        f: impl FnOnce(&mut Connection) -> R,
    ) -> Result<R, TcpError> {
        let r = f(self.conn_mut(h)?);
        self.touched(h.index as usize);
        Ok(r)
    }

    // ------------------------------------------------------------------
    // Output and lifecycle
    // ------------------------------------------------------------------

    /// Let connection `idx` send what it has.
    pub(crate) fn dispatch(
        &mut self,
        idx: usize,
        now: Instant,
        ctr: &mut TcpCounters,
        emit: &mut TableEmit<'_>,
    ) {
        self.now = self.now.max(now);
        self.dispatches += 1;
        if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
            let (local, remote) = c.tuple().addrs();
            // The send MSS, for cutting a TSO super-segment on the wire.
            let smss = c.conn.mss();
            c.conn
                .dispatch_ext(now, ctr, &mut self.shared, &mut |seg, ext| {
                    emit(local, remote, seg, ext, smss)
                });
            c.conn.update_chrono(now);
            let adv = c.conn.take_neighbour_advice();
            if adv != NeighbourAdvice::default() {
                match c.v6.as_deref() {
                    None => self.advice.push((*c.remote.ip(), adv)),
                    Some((_, r)) => self.advice6.push((*r.ip(), adv)),
                }
            }
        }
        self.touched(idx);
    }

    /// Move established children to the accept queue; reap finished ones.
    /// Returns false when the slot no longer holds a connection.
    fn after_activity(&mut self, idx: usize) -> bool {
        let Some(h) = self.handle_of(idx) else {
            return false;
        };
        let (state, owner) = match self.sock(h) {
            Ok(Sock::Conn(c)) => (c.conn.state(), c.owner),
            _ => return false,
        };
        let synchronized = !matches!(
            state,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        );
        match owner {
            Owner::Listener {
                listener,
                queued: false,
            } if synchronized || state == State::Closed => {
                let mut promote = false;
                if let Ok(Sock::Listener(l)) = self.sock_mut(listener) {
                    l.syn_queue = l.syn_queue.saturating_sub(1);
                    if state != State::Closed {
                        l.accept.push_back(h);
                        promote = true;
                        if !l.ev_queued {
                            l.ev_queued = true;
                            self.events.push(listener);
                        }
                    }
                }
                if promote {
                    if let Ok(Sock::Conn(c)) = self.sock_mut(h) {
                        c.owner = Owner::Listener {
                            listener,
                            queued: true,
                        };
                    }
                } else {
                    // Listener gone, or the handshake failed: nobody owns it.
                    if state == State::Closed {
                        self.free_slot(idx);
                        return false;
                    } else if let Ok(Sock::Conn(c)) = self.sock_mut(h) {
                        c.owner = Owner::Released;
                    }
                }
            }
            Owner::Listener {
                listener,
                queued: true,
            } if state == State::Closed => {
                if let Ok(Sock::Listener(l)) = self.sock_mut(listener) {
                    // Rare (a reset before accept): O(accept queue) is fine.
                    l.accept.retain(|x| *x != h);
                }
                self.free_slot(idx);
                return false;
            }
            Owner::Released if state == State::Closed => {
                self.free_slot(idx);
                return false;
            }
            Owner::App if state == State::Closed => {
                // Unhook from the demux so the 4-tuple can be reused; the
                // application learns the outcome from `tcp_status`/`tcp_recv`.
                if let Ok(Sock::Conn(c)) = self.sock_mut(h) {
                    if c.in_map {
                        c.in_map = false;
                        let t = c.tuple();
                        self.map_remove(&t);
                    }
                }
            }
            _ => {}
        }
        true
    }

    /// Connection `idx` was touched (a segment, a dispatch, an application
    /// call): settle its lifecycle, re-file its deadline, and raise a
    /// readiness event if the application can now do something it could
    /// not before. O(1) amortised (O(log n) when it adds a heap entry).
    pub(crate) fn touched(&mut self, idx: usize) {
        if !self.after_activity(idx) {
            return;
        }
        let now = self.now;
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        let generation = slot.generation;
        let Some(Sock::Conn(c)) = slot.sock.as_mut() else {
            return;
        };
        // Every change to a connection's queues ends here (segment input,
        // dispatch, socket calls): keep the table's total in step.
        let held = c.conn.send_queue() + c.conn.recv_queue();
        self.buffered = (self.buffered + held).saturating_sub(c.held);
        c.held = held;
        file(
            c,
            (idx as u32, generation),
            now,
            &mut self.ready,
            &mut self.timers,
        );
        // Readiness (only sockets the application holds have a reader).
        if c.owner == Owner::App {
            let bits = conn_readiness(&c.conn);
            let recv = c.conn.recv_queue();
            let news = !bits.gained(c.ev_bits).is_empty() || recv > c.ev_recv;
            c.ev_bits = bits;
            c.ev_recv = recv;
            if news && !c.ev_queued {
                c.ev_queued = true;
                self.events.push(TcpHandle {
                    index: idx as u32,
                    generation,
                });
            }
        }
        self.compact_timers();
    }

    /// Drop stale heap entries once they outnumber the live connections
    /// (amortised O(1) per entry pushed).
    fn compact_timers(&mut self) {
        if self.timers.len() <= 2 * self.live + 64 {
            return;
        }
        let slots = &self.slots;
        self.timers.retain(|Reverse((t, idx, generation))| {
            slots
                .get(*idx as usize)
                .filter(|s| s.generation == *generation)
                .and_then(|s| s.sock.as_ref())
                .is_some_and(|s| matches!(s, Sock::Conn(c) if c.sched == Some(*t)))
        });
    }

    /// The connection a heap or ready-list entry refers to, if still there.
    fn live_conn(&mut self, idx: u32, generation: u32) -> Option<&mut Conn> {
        live_conn(&mut self.slots, idx, generation)
    }
}

/// The connection in slot `idx` if its generation is still `generation`.
fn live_conn(slots: &mut [Slot], idx: u32, generation: u32) -> Option<&mut Conn> {
    {
        let slot = slots.get_mut(idx as usize)?;
        if slot.generation != generation {
            return None;
        }
        match slot.sock.as_mut()? {
            Sock::Conn(c) => Some(c),
            Sock::Listener(_) => None,
        }
    }
}

impl TcpTable {
    /// Dispatch the connections that are due: first move the heap entries
    /// whose deadline has come to the ready list (re-filing those whose
    /// deadline moved later), then dispatch from the ready list, at most
    /// `budget` connections, in FIFO order so a flood of busy connections
    /// cannot starve the rest. Work is proportional to the connections due,
    /// not to the connections held.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        budget: usize,
        ctr: &mut TcpCounters,
        emit: &mut TableEmit<'_>,
    ) {
        self.now = self.now.max(now);
        // Bounded: a mass expiry is spread over several calls (`poll_at`
        // stays in the past meanwhile).
        let mut moves = budget.saturating_mul(4).max(1);
        while let Some(&Reverse((t, idx, generation))) = self.timers.peek() {
            if t > now || moves == 0 {
                break;
            }
            moves -= 1;
            self.timers.pop();
            self.visits += 1;
            let Some(c) = live_conn(&mut self.slots, idx, generation) else {
                continue;
            };
            if c.sched != Some(t) {
                // A stale entry: the connection has an earlier one (already
                // handled) or was re-filed.
                continue;
            }
            c.sched = None;
            file(c, (idx, generation), now, &mut self.ready, &mut self.timers);
        }
        // Each connection that was ready at the start is dispatched once;
        // one that still has work afterwards (a burst cut short) goes to
        // the back of the list for the next call.
        let mut todo = self.ready.len().min(budget);
        while todo > 0 {
            let Some((idx, generation)) = self.ready.pop_front() else {
                break;
            };
            self.visits += 1;
            let Some(c) = self.live_conn(idx, generation) else {
                continue;
            };
            c.in_ready = false;
            self.dispatch(idx as usize, now, ctr, emit);
            todo -= 1;
        }
        self.clean_timer_head();
    }

    /// Pop stale entries off the top of the heap so `poll_at` does not
    /// report a deadline nobody has.
    fn clean_timer_head(&mut self) {
        while let Some(&Reverse((t, idx, generation))) = self.timers.peek() {
            match self.live_conn(idx, generation) {
                Some(c) if c.sched == Some(t) => break,
                _ => {
                    self.timers.pop();
                }
            }
        }
    }

    /// When `poll` must next run: now if a connection is ready, else the
    /// earliest heap entry. O(1).
    pub(crate) fn poll_at(&self, now_hint: Instant) -> Option<Instant> {
        if !self.ready.is_empty() {
            return Some(now_hint.min(self.now));
        }
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Whether the link takes TCP/IPv4 GSO super-frames: connections then
    /// send up to 64 KB per segment (the link cuts them into MSS-sized ones).
    pub(crate) fn set_tso(&mut self, on: bool) {
        // An IPv4 datagram's largest payload, less the largest TCP header.
        self.shared.tso_max = if on { 65_535 - 20 - 60 } else { 0 };
    }

    /// TCP payloads by reference in the frames (see
    /// `Connection::dispatch_ext`).
    pub(crate) fn set_zero_copy(&mut self, on: bool) {
        self.shared.zero_copy = on;
    }

    /// See [`crate::Stack::set_local_drop`]. Turning it off lets the
    /// connections that were waiting for the queue send at once (Linux's
    /// senders wait for their probe timer; ours need not).
    pub(crate) fn set_local_drop(&mut self, on: bool) {
        self.shared.local_drop = on;
    }

    /// The scheduler's state (diagnostics and tests).
    pub(crate) fn sched_stats(&self) -> TcpSchedStats {
        TcpSchedStats {
            ready: self.ready.len(),
            timers: self.timers.len(),
            dispatches: self.dispatches,
            visits: self.visits,
        }
    }

    /// Hand over the sockets whose readiness changed since the last call,
    /// with their readiness now. Stale handles (sockets closed since) are
    /// skipped.
    pub(crate) fn take_events(&mut self, out: &mut dyn FnMut(TcpHandle, Readiness)) {
        let events = std::mem::take(&mut self.events);
        for h in &events {
            let Some(slot) = self
                .slots
                .get_mut(h.index as usize)
                .filter(|s| s.generation == h.generation)
            else {
                continue;
            };
            match slot.sock.as_mut() {
                Some(Sock::Conn(c)) => {
                    c.ev_queued = false;
                    if c.owner == Owner::App {
                        out(*h, conn_readiness(&c.conn));
                    }
                }
                Some(Sock::Listener(l)) => {
                    l.ev_queued = false;
                    let r = if l.accept.is_empty() {
                        Readiness::NONE
                    } else {
                        Readiness::READABLE
                    };
                    out(*h, r);
                }
                None => {}
            }
        }
        // Give the buffer back (no allocation in steady state).
        let mut events = events;
        events.clear();
        if self.events.is_empty() {
            self.events = events;
        }
    }

    /// The readiness of the socket behind `h` now.
    pub(crate) fn readiness(&self, h: TcpHandle) -> Result<Readiness, TcpError> {
        match self.sock(h)? {
            Sock::Listener(l) => Ok(if l.accept.is_empty() {
                Readiness::NONE
            } else {
                Readiness::READABLE
            }),
            Sock::Conn(c) if c.owner == Owner::App => Ok(conn_readiness(&c.conn)),
            Sock::Conn(_) => Err(TcpError::InvalidHandle),
        }
    }
}

/// Hooks for transparent mode (`transparent.rs`).
impl TcpTable {
    /// Whether a SYN `remote -> local` should be held for the application:
    /// no listener on the port and no connection on the 4-tuple (a
    /// TIME-WAIT connection that accepts the SYN as a new incarnation, RFC
    /// 9293 3.6.1, is dropped to make way).
    pub(crate) fn syn_unclaimed(&mut self, t: &Tuple, seg: &TcpRepr) -> bool {
        // A listener that takes this SYN (of its family, or dual-stack).
        if self.listener_for(t.local_port(), t.is_v6()).is_some() {
            return false;
        }
        let Some(idx) = self.lookup(t) else {
            return true;
        };
        let idx = idx as usize;
        let reuse = match self.slots.get(idx).and_then(|s| s.sock.as_ref()) {
            Some(Sock::Conn(c)) => {
                c.conn.state() == State::TimeWait && c.conn.accepts_reuse_syn(seg)
            }
            _ => false,
        };
        if reuse {
            self.detach(idx);
        }
        reuse
    }

    /// Create an application-owned connection in SYN-RECEIVED from a SYN
    /// held earlier (RFC 9293 3.10.7.2, LISTEN state, "third check for a
    /// SYN"); the SYN|ACK goes out on the next poll. Either family.
    pub(crate) fn adopt_syn(
        &mut self,
        now: Instant,
        t: Tuple,
        syn: &TcpRepr,
        route_mss: u16,
    ) -> Result<TcpHandle, TcpError> {
        if self.live >= self.max_sockets || self.lookup(&t).is_some() {
            return Err(TcpError::InvalidState);
        }
        let (kl, kr) = t.key_view(&self.secret);
        let iss = self.isn.generate(kl, kr, now);
        let (local, remote) = t.ports_view();
        let conn = Connection::accept(&self.cfg, local, remote, syn, iss, route_mss, now);
        let c = self.new_conn(conn, t, Owner::App, false);
        let h = self
            .alloc(Sock::Conn(Box::new(c)))
            .ok_or(TcpError::InvalidState)?;
        self.map_insert(t, h.index);
        self.now = self.now.max(now);
        // The SYN|ACK goes out on the next poll.
        self.touched(h.index as usize);
        Ok(h)
    }
}
