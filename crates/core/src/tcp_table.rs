//! The TCP socket table: demultiplexing by 4-tuple, listeners with bounded
//! SYN and accept queues, ephemeral ports (RFC 6056), reaping of finished
//! connections. The per-connection protocol lives in `tcp/`.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_wire::tcp::TcpRepr;

use crate::counters::TcpStackCounters;
use crate::hash::{keyed_hash, KeyedState};
use crate::tcp::TcpShared;
use crate::tcp::{Connection, Isn, NeighbourAdvice, State, TcpConfig, TcpCounters, TcpError};
use crate::time::Instant;
use crate::udp::{EPHEMERAL_FIRST, EPHEMERAL_LAST};
use crate::{BindError, ConnectError};

/// A TCP socket handle: a small Copy id. Stale handles give
/// `TcpError::InvalidHandle`, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpHandle {
    index: u32,
    generation: u32,
}

/// What `Stack::tcp_status` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpStatus {
    pub state: State,
    pub local: SocketAddrV4,
    /// Unspecified (0.0.0.0:0) for a listener.
    pub remote: SocketAddrV4,
    /// Data, EOF or an error is waiting (a read will not block).
    pub can_recv: bool,
    /// Send buffer space is available (a write will not block).
    pub can_send: bool,
    /// Bytes queued for sending (not yet acknowledged).
    pub send_queue: usize,
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
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
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

struct Listener {
    local: SocketAddrV4,
    backlog: usize,
    /// Children still in SYN-RECEIVED.
    syn_queue: usize,
    accept: VecDeque<TcpHandle>,
}

struct Conn {
    conn: Connection,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    owner: Owner,
    /// Still present in the demux map.
    in_map: bool,
    /// Opened by `connect` (holds its local port in `active_ports`).
    active_open: bool,
}

enum Sock {
    Listener(Listener),
    Conn(Box<Conn>),
}

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
    /// Dropped (listener overflow, RST to a listener ...).
    Dropped,
}

pub(crate) struct TcpTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    conns: HashMap<(SocketAddrV4, SocketAddrV4), u32, KeyedState>,
    listeners: HashMap<u16, u32, KeyedState>,
    /// Local ports held by active opens (for `listen` conflicts).
    active_ports: HashMap<u16, u32, KeyedState>,
    live: usize,
    isn: Isn,
    cfg: TcpConfig,
    route_mss: u16,
    max_sockets: usize,
    max_syn_backlog: usize,
    secret: [u8; 16],
    next_ephemeral: u32,
    rr_cursor: usize,
    /// `poll` ran out of budget with connections still due.
    pub(crate) more_work: bool,
    /// Reachability advice from dispatched connections, per remote address,
    /// for the neighbour cache (drained by the Stack; reused, no per-packet
    /// allocation once grown).
    pub(crate) advice: Vec<(Ipv4Addr, NeighbourAdvice)>,
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
            listeners: HashMap::with_hasher(hasher),
            active_ports: HashMap::with_hasher(hasher),
            live: 0,
            isn: Isn::new(secret),
            cfg,
            route_mss,
            max_sockets,
            max_syn_backlog,
            secret,
            next_ephemeral: 0,
            rr_cursor: 0,
            more_work: false,
            advice: Vec::new(),
            shared,
        }
    }

    /// Sockets of all kinds in the table (listeners, connections, orphans).
    pub(crate) fn len(&self) -> usize {
        self.live
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
                self.listeners.remove(&l.local.port());
            }
            Sock::Conn(c) => {
                if c.in_map {
                    self.conns.remove(&(c.local, c.remote));
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

    pub(crate) fn listen(
        &mut self,
        local: SocketAddrV4,
        backlog: usize,
    ) -> Result<TcpHandle, BindError> {
        if self.live >= self.max_sockets {
            return Err(BindError::Exhausted);
        }
        let port = if local.port() == 0 {
            self.pick_listen_port().ok_or(BindError::Exhausted)?
        } else {
            local.port()
        };
        if self.listeners.contains_key(&port) || self.active_ports.contains_key(&port) {
            return Err(BindError::AddrInUse);
        }
        let local = SocketAddrV4::new(*local.ip(), port);
        // Linux caps the backlog at somaxconn (4096) and treats 0 as 1.
        let backlog = backlog.clamp(1, 4096);
        let l = Listener {
            local,
            backlog,
            syn_queue: 0,
            accept: VecDeque::new(),
        };
        let h = self.alloc(Sock::Listener(l)).ok_or(BindError::Exhausted)?;
        self.listeners.insert(port, h.index);
        Ok(h)
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
        }
        Ok(Some(child))
    }

    /// RFC 6056 algorithm 3 ("Simple Hash-Based Port Selection"):
    /// `offset = F(local_IP, remote_IP, remote_port, secret_key)`,
    /// `port = min_ephemeral + (offset + next_ephemeral + i) % num_ephemeral`,
    /// probing until the 4-tuple is free.
    pub(crate) fn connect(
        &mut self,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
    ) -> Result<TcpHandle, ConnectError> {
        if self.live >= self.max_sockets {
            return Err(ConnectError::Exhausted);
        }
        let port = if local.port() != 0 {
            if self.conns.contains_key(&(local, remote))
                || self.listeners.contains_key(&local.port())
            {
                return Err(ConnectError::AddrInUse);
            }
            local.port()
        } else {
            let n = u32::from(EPHEMERAL_LAST - EPHEMERAL_FIRST) + 1;
            let mut key = [0u8; 10];
            key[..4].copy_from_slice(&local.ip().octets());
            key[4..8].copy_from_slice(&remote.ip().octets());
            key[8..].copy_from_slice(&remote.port().to_be_bytes());
            let offset = keyed_hash(&self.secret, 0x7463_7000, &key) as u32;
            let mut found = None;
            for i in 0..n {
                let p = (u32::from(EPHEMERAL_FIRST)
                    + offset.wrapping_add(self.next_ephemeral).wrapping_add(i) % n)
                    as u16;
                let cand = SocketAddrV4::new(*local.ip(), p);
                if !self.conns.contains_key(&(cand, remote)) && !self.listeners.contains_key(&p) {
                    self.next_ephemeral = self.next_ephemeral.wrapping_add(i + 1);
                    found = Some(p);
                    break;
                }
            }
            found.ok_or(ConnectError::Exhausted)?
        };
        let local = SocketAddrV4::new(*local.ip(), port);
        let iss = self.isn.generate(local, remote, now);
        let conn = Connection::connect(&self.cfg, local, remote, iss, self.route_mss, now);
        let c = Conn {
            conn,
            local,
            remote,
            owner: Owner::App,
            in_map: true,
            active_open: true,
        };
        let h = self
            .alloc(Sock::Conn(Box::new(c)))
            .ok_or(ConnectError::Exhausted)?;
        self.conns.insert((local, remote), h.index);
        *self.active_ports.entry(port).or_insert(0) += 1;
        Ok(h)
    }

    /// Release the handle: a listener stops (unaccepted children are
    /// reset); a connection is closed gracefully and reaped when done.
    pub(crate) fn close(&mut self, h: TcpHandle, abort: bool) {
        let Ok(sock) = self.sock_mut(h) else { return };
        match sock {
            Sock::Listener(l) => {
                let mut children: Vec<TcpHandle> = l.accept.drain(..).collect();
                // Children still in the SYN queue point at this listener too.
                for (i, slot) in self.slots.iter().enumerate() {
                    if let Some(Sock::Conn(c)) = &slot.sock {
                        if matches!(c.owner, Owner::Listener { listener, queued: false } if listener == h)
                        {
                            children.push(TcpHandle {
                                index: i as u32,
                                generation: slot.generation,
                            });
                        }
                    }
                }
                for child in children {
                    if let Ok(Sock::Conn(c)) = self.sock_mut(child) {
                        c.conn.abort();
                        c.owner = Owner::Released;
                    }
                }
                self.free_slot(h.index as usize);
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
                self.after_activity(h.index as usize);
            }
        }
    }

    pub(crate) fn status(&self, h: TcpHandle) -> Result<TcpStatus, TcpError> {
        match self.sock(h)? {
            Sock::Listener(l) => Ok(TcpStatus {
                state: State::Listen,
                local: l.local,
                remote: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
                can_recv: !l.accept.is_empty(),
                can_send: false,
                send_queue: 0,
                recv_queue: 0,
                pending_error: None,
                accept_ready: !l.accept.is_empty(),
            }),
            Sock::Conn(c) if c.owner == Owner::App => {
                let i = c.conn.info();
                Ok(TcpStatus {
                    state: c.conn.state(),
                    local: c.local,
                    remote: c.remote,
                    can_recv: i.can_recv,
                    can_send: i.can_send,
                    send_queue: i.send_queue,
                    recv_queue: i.recv_queue,
                    pending_error: i.pending_error,
                    accept_ready: false,
                })
            }
            Sock::Conn(_) => Err(TcpError::InvalidHandle),
        }
    }

    pub(crate) fn sockets(&self) -> Vec<TcpInfo> {
        let mut v = Vec::with_capacity(self.live);
        for slot in &self.slots {
            match &slot.sock {
                Some(Sock::Listener(l)) => v.push(TcpInfo {
                    state: State::Listen,
                    local: l.local,
                    remote: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
                    recv_queue: l.accept.len(),
                    send_queue: l.backlog,
                    srtt_us: None,
                    cwnd: 0,
                    orphan: false,
                }),
                Some(Sock::Conn(c)) => {
                    let i = c.conn.info();
                    v.push(TcpInfo {
                        state: c.conn.state(),
                        local: c.local,
                        remote: c.remote,
                        recv_queue: i.recv_queue,
                        send_queue: i.send_queue,
                        srtt_us: i.srtt.map(|d| d.as_micros() as u64),
                        cwnd: i.cwnd,
                        orphan: c.owner == Owner::Released,
                    })
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
    /// listener) and let it process the segment.
    pub(crate) fn input(
        &mut self,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        seg: &TcpRepr,
        ctr: &mut TcpCounters,
        ext: &mut TcpStackCounters,
    ) -> Demux {
        if let Some(&idx) = self.conns.get(&(local, remote)) {
            let idx = idx as usize;
            let reuse = match self.slots.get(idx).and_then(|s| s.sock.as_ref()) {
                Some(Sock::Conn(c)) => {
                    c.conn.state() == State::TimeWait
                        && seg.syn
                        && seg.ack.is_none()
                        && self.listeners.contains_key(&local.port())
                        && c.conn.accepts_reuse_syn(seg)
                }
                _ => false,
            };
            if !reuse {
                if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut())
                {
                    c.conn.process(now, seg, ctr, &mut self.shared);
                }
                return Demux::Conn(idx);
            }
            // RFC 9293 3.6.1: a SYN acceptable to a TIME-WAIT connection
            // reopens it; drop the old control block and fall to the listener.
            self.detach(idx);
        }
        let Some(&lidx) = self.listeners.get(&local.port()) else {
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
            return Demux::Unmatched;
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
        // Bounded backlog, as Linux without syncookies: a full SYN queue
        // (half-open connections, at most min(backlog, tcp_max_syn_backlog))
        // drops the SYN (TCPReqQFullDrop), so does a full accept queue
        // (ListenOverflows); both count ListenDrops.
        if syn_queue >= backlog.min(self.max_syn_backlog) || self.live >= self.max_sockets {
            ext.TCPReqQFullDrop += 1;
            ext.ListenDrops += 1;
            return Demux::Dropped;
        }
        if accept_len >= backlog {
            ext.ListenOverflows += 1;
            ext.ListenDrops += 1;
            return Demux::Dropped;
        }
        let iss = self.isn.generate(local, remote, now);
        let conn = Connection::accept(&self.cfg, local, remote, seg, iss, self.route_mss, now);
        let c = Conn {
            conn,
            local,
            remote,
            owner: Owner::Listener {
                listener: lh,
                queued: false,
            },
            in_map: true,
            active_open: false,
        };
        let Some(h) = self.alloc(Sock::Conn(Box::new(c))) else {
            ext.ListenDrops += 1;
            return Demux::Dropped;
        };
        self.conns.insert((local, remote), h.index);
        if let Ok(Sock::Listener(l)) = self.sock_mut(lh) {
            l.syn_queue += 1;
        }
        Demux::Conn(h.index as usize)
    }

    /// Remove a connection from the demux map and free it (TIME-WAIT reuse).
    fn detach(&mut self, idx: usize) {
        if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
            if c.owner == Owner::App {
                // The application still holds it: only unhook it.
                self.conns.remove(&(c.local, c.remote));
                c.in_map = false;
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
    ) -> Option<usize> {
        let idx = *self.conns.get(&(local, remote))? as usize;
        if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
            f(&mut c.conn);
        }
        Some(idx)
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
        emit: &mut dyn FnMut(SocketAddrV4, SocketAddrV4, &TcpRepr) -> bool,
    ) {
        if let Some(Some(Sock::Conn(c))) = self.slots.get_mut(idx).map(|s| s.sock.as_mut()) {
            let (local, remote) = (c.local, c.remote);
            c.conn.dispatch(now, ctr, &mut self.shared, &mut |seg| {
                emit(local, remote, seg)
            });
            let adv = c.conn.take_neighbour_advice();
            if adv != NeighbourAdvice::default() {
                self.advice.push((*remote.ip(), adv));
            }
        }
        self.after_activity(idx);
    }

    /// Move established children to the accept queue; reap finished ones.
    pub(crate) fn after_activity(&mut self, idx: usize) {
        let Some(h) = self.handle_of(idx) else { return };
        let (state, owner) = match self.sock(h) {
            Ok(Sock::Conn(c)) => (c.conn.state(), c.owner),
            _ => return,
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
                    l.accept.retain(|x| *x != h);
                }
                self.free_slot(idx);
            }
            Owner::Released if state == State::Closed => self.free_slot(idx),
            Owner::App if state == State::Closed => {
                // Unhook from the demux so the 4-tuple can be reused; the
                // application learns the outcome from `tcp_status`/`tcp_recv`.
                if let Ok(Sock::Conn(c)) = self.sock_mut(h) {
                    if c.in_map {
                        c.in_map = false;
                        let key = (c.local, c.remote);
                        self.conns.remove(&key);
                    }
                }
            }
            _ => {}
        }
    }

    /// Dispatch connections whose timers are due, at most `budget` of them,
    /// round-robin so a flood of busy connections cannot starve the rest.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        budget: usize,
        ctr: &mut TcpCounters,
        emit: &mut dyn FnMut(SocketAddrV4, SocketAddrV4, &TcpRepr) -> bool,
    ) {
        let n = self.slots.len();
        let mut done = 0;
        self.more_work = false;
        for k in 0..n {
            let idx = (self.rr_cursor + k) % n;
            let due = match self.slots.get(idx).and_then(|s| s.sock.as_ref()) {
                Some(Sock::Conn(c)) => c.conn.poll_at().is_some_and(|t| t <= now),
                _ => false,
            };
            if !due {
                continue;
            }
            if done >= budget {
                self.rr_cursor = idx;
                self.more_work = true;
                return;
            }
            self.dispatch(idx, now, ctr, emit);
            done += 1;
        }
        if n > 0 {
            self.rr_cursor = (self.rr_cursor + 1) % n;
        }
    }

    pub(crate) fn poll_at(&self, now_hint: Instant) -> Option<Instant> {
        if self.more_work {
            return Some(now_hint);
        }
        self.slots
            .iter()
            .filter_map(|s| match &s.sock {
                Some(Sock::Conn(c)) => c.conn.poll_at(),
                _ => None,
            })
            .min()
    }
}

/// Hooks for transparent mode (`transparent.rs`).
impl TcpTable {
    /// Whether a SYN `remote -> local` should be held for the application:
    /// no listener on the port and no connection on the 4-tuple (a
    /// TIME-WAIT connection that accepts the SYN as a new incarnation, RFC
    /// 9293 3.6.1, is dropped to make way).
    pub(crate) fn syn_unclaimed(
        &mut self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        seg: &TcpRepr,
    ) -> bool {
        if self.listeners.contains_key(&local.port()) {
            return false;
        }
        let Some(&idx) = self.conns.get(&(local, remote)) else {
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
    /// SYN"); the SYN|ACK goes out on the next poll.
    pub(crate) fn adopt_syn(
        &mut self,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        syn: &TcpRepr,
    ) -> Result<TcpHandle, TcpError> {
        if self.live >= self.max_sockets || self.conns.contains_key(&(local, remote)) {
            return Err(TcpError::InvalidState);
        }
        let iss = self.isn.generate(local, remote, now);
        let conn = Connection::accept(&self.cfg, local, remote, syn, iss, self.route_mss, now);
        let c = Conn {
            conn,
            local,
            remote,
            owner: Owner::App,
            in_map: true,
            active_open: false,
        };
        let h = self
            .alloc(Sock::Conn(Box::new(c)))
            .ok_or(TcpError::InvalidState)?;
        self.conns.insert((local, remote), h.index);
        Ok(h)
    }
}
