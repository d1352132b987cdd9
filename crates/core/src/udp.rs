//! UDP sockets (RFC 768): the socket table, bounded receive queues and
//! ephemeral port choice. Packet I/O lives in `stack.rs`.

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddrV4, SocketAddrV6};

/// The socket addresses of one family a UDP table holds (IPv4 sockets and
/// IPv6 sockets live in two tables of the same code).
pub trait UdpAddr: Copy + Eq + std::fmt::Debug {
    /// Same address, another port.
    fn with_port(self, port: u16) -> Self;
    fn port(&self) -> u16;
    fn ip_is_unspecified(&self) -> bool;
    /// The address bytes (for the ephemeral-port hash).
    fn ip_bytes(&self) -> Vec<u8>;
    /// Set in the index of every handle of this family's table, so that a
    /// handle names one socket across both tables.
    const HANDLE_TAG: u32;
}

impl UdpAddr for SocketAddrV4 {
    const HANDLE_TAG: u32 = 0;
    fn with_port(self, port: u16) -> Self {
        SocketAddrV4::new(*self.ip(), port)
    }
    fn port(&self) -> u16 {
        SocketAddrV4::port(self)
    }
    fn ip_is_unspecified(&self) -> bool {
        self.ip().is_unspecified()
    }
    fn ip_bytes(&self) -> Vec<u8> {
        self.ip().octets().to_vec()
    }
}

impl UdpAddr for SocketAddrV6 {
    const HANDLE_TAG: u32 = 1 << 31;
    fn with_port(self, port: u16) -> Self {
        SocketAddrV6::new(*self.ip(), port, 0, self.scope_id())
    }
    fn port(&self) -> u16 {
        SocketAddrV6::port(self)
    }
    fn ip_is_unspecified(&self) -> bool {
        self.ip().is_unspecified()
    }
    fn ip_bytes(&self) -> Vec<u8> {
        self.ip().octets().to_vec()
    }
}

use crate::error::{BindError, UdpError};
use crate::hash::{keyed_hash, KeyedState};

/// First and last ephemeral port (Linux `ip_local_port_range` default).
pub const EPHEMERAL_FIRST: u16 = 32768;
pub const EPHEMERAL_LAST: u16 = 60999;

/// A UDP socket handle: a small Copy id. Stale handles give
/// `UdpError::InvalidHandle`, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpHandle {
    index: u32,
    generation: u32,
}

/// What `Stack::udp_status` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpStatus<A = SocketAddrV4> {
    pub local: A,
    pub remote: Option<A>,
    /// A datagram or an error is waiting.
    pub can_recv: bool,
    pub pending_error: Option<UdpError>,
    /// Bytes of payload queued for receive.
    pub recv_queue: usize,
    /// Datagrams queued for receive.
    pub recv_datagrams: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct UdpSocket<A = SocketAddrV4> {
    pub local: A,
    pub remote: Option<A>,
    rx_data: VecDeque<u8>,
    rx_meta: VecDeque<(usize, A)>,
    pub pending_error: Option<UdpError>,
    /// Queued in the table's event list.
    ev_queued: bool,
}

#[derive(Debug, Clone)]
struct Slot<A> {
    generation: u32,
    socket: Option<UdpSocket<A>>,
}

/// Outcome of offering a datagram to a socket.
pub(crate) enum Deliver {
    Queued,
    QueueFull,
}

#[derive(Debug, Clone)]
pub(crate) struct UdpTable<A = SocketAddrV4> {
    slots: Vec<Slot<A>>,
    free: Vec<u32>,
    by_port: HashMap<u16, u32, KeyedState>,
    max_sockets: usize,
    rcvbuf_bytes: usize,
    rcvbuf_datagrams: usize,
    secret: [u8; 16],
    next_ephemeral: u32,
    /// Sockets that received a datagram or an error since the last
    /// `take_events`.
    events: Vec<UdpHandle>,
}

impl<A: UdpAddr> UdpTable<A> {
    pub(crate) fn new(
        max_sockets: usize,
        rcvbuf_bytes: usize,
        rcvbuf_datagrams: usize,
        secret: [u8; 16],
        hasher: KeyedState,
    ) -> Self {
        UdpTable {
            slots: Vec::new(),
            free: Vec::new(),
            by_port: HashMap::with_hasher(hasher),
            max_sockets,
            rcvbuf_bytes,
            rcvbuf_datagrams,
            secret,
            next_ephemeral: 0,
            events: Vec::new(),
        }
    }

    /// The socket bound to `port` received something: raise an event.
    pub(crate) fn notify_port(&mut self, port: u16) {
        let Some(&idx) = self.by_port.get(&port) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return;
        };
        let generation = slot.generation;
        if let Some(s) = slot.socket.as_mut() {
            if !s.ev_queued {
                s.ev_queued = true;
                self.events.push(UdpHandle {
                    index: idx | A::HANDLE_TAG,
                    generation,
                });
            }
        }
    }

    /// Hand over the sockets with news since the last call.
    pub(crate) fn take_events(&mut self, out: &mut dyn FnMut(UdpHandle)) {
        let mut events = std::mem::take(&mut self.events);
        for h in &events {
            if let Ok(s) = self.get_mut(*h) {
                s.ev_queued = false;
                out(*h);
            }
        }
        events.clear();
        if self.events.is_empty() {
            self.events = events;
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.by_port.len()
    }

    /// Every open socket's status (`ss -u`).
    pub(crate) fn statuses(&self) -> Vec<UdpStatus<A>> {
        self.slots
            .iter()
            .filter_map(|s| s.socket.as_ref().map(UdpSocket::status))
            .collect()
    }

    /// The slot a handle of this table names (`InvalidHandle` for the
    /// other family's handles).
    fn slot_index(h: UdpHandle) -> Result<usize, UdpError> {
        if h.index & (1 << 31) != A::HANDLE_TAG {
            return Err(UdpError::InvalidHandle);
        }
        Ok((h.index & !(1 << 31)) as usize)
    }

    /// Whether `h` is a handle of this table's family.
    pub(crate) fn owns(h: UdpHandle) -> bool {
        h.index & (1 << 31) == A::HANDLE_TAG
    }

    pub(crate) fn get(&self, h: UdpHandle) -> Result<&UdpSocket<A>, UdpError> {
        self.slots
            .get(Self::slot_index(h)?)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.socket.as_ref())
            .ok_or(UdpError::InvalidHandle)
    }

    pub(crate) fn get_mut(&mut self, h: UdpHandle) -> Result<&mut UdpSocket<A>, UdpError> {
        self.slots
            .get_mut(Self::slot_index(h)?)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.socket.as_mut())
            .ok_or(UdpError::InvalidHandle)
    }

    /// Bind `local` (`port == 0` = pick an ephemeral port). The address must
    /// be unspecified or `our_addr` (checked by the caller).
    pub(crate) fn bind(&mut self, local: A) -> Result<UdpHandle, BindError> {
        if self.by_port.len() >= self.max_sockets {
            return Err(BindError::Exhausted);
        }
        let port = if local.port() == 0 {
            self.pick_ephemeral(&local)?
        } else if self.by_port.contains_key(&local.port()) {
            // One address per interface: any two binds of a port conflict
            // (no SO_REUSEADDR/SO_REUSEPORT semantics).
            return Err(BindError::AddrInUse);
        } else {
            local.port()
        };
        let socket = UdpSocket {
            local: local.with_port(port),
            remote: None,
            rx_data: VecDeque::new(),
            rx_meta: VecDeque::new(),
            pending_error: None,
            ev_queued: false,
        };
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|i| i & (1 << 31) == 0)
                    .ok_or(BindError::Exhausted)?;
                self.slots.push(Slot {
                    generation: 0,
                    socket: None,
                });
                i
            }
        };
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return Err(BindError::Exhausted);
        };
        slot.socket = Some(socket);
        self.by_port.insert(port, index);
        Ok(UdpHandle {
            index: index | A::HANDLE_TAG,
            generation: slot.generation,
        })
    }

    /// RFC 6056 algorithm 3-like: start at a keyed hash of the local address
    /// plus a moving counter, probe sequentially for a free port.
    fn pick_ephemeral(&mut self, local: &A) -> Result<u16, BindError> {
        let n = u32::from(EPHEMERAL_LAST - EPHEMERAL_FIRST) + 1;
        let offset = keyed_hash(&self.secret, 0x7564_7000, &local.ip_bytes()) as u32;
        for i in 0..n {
            let p = EPHEMERAL_FIRST as u32
                + (offset.wrapping_add(self.next_ephemeral).wrapping_add(i) % n);
            let port = p as u16;
            if !self.by_port.contains_key(&port) {
                self.next_ephemeral = self.next_ephemeral.wrapping_add(i + 1);
                return Ok(port);
            }
        }
        Err(BindError::Exhausted)
    }

    pub(crate) fn close(&mut self, h: UdpHandle) {
        let Ok(i) = Self::slot_index(h) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if slot.generation != h.generation {
            return;
        }
        if let Some(s) = slot.socket.take() {
            self.by_port.remove(&s.local.port());
            slot.generation = slot.generation.wrapping_add(1);
            self.free.push(i as u32);
        }
    }

    /// The socket that should receive a datagram `src -> dst:port`
    /// (`broadcast` = dst was a broadcast address).
    pub(crate) fn lookup_mut(
        &mut self,
        src: A,
        dst_port: u16,
        broadcast: bool,
    ) -> Option<&mut UdpSocket<A>> {
        let idx = *self.by_port.get(&dst_port)?;
        let s = self.slots.get_mut(idx as usize)?.socket.as_mut()?;
        // A connected socket only accepts its peer; a socket bound to our
        // unicast address does not see broadcasts (Linux behaviour).
        if s.remote.is_some_and(|r| r != src) || (broadcast && !s.local.ip_is_unspecified()) {
            return None;
        }
        Some(s)
    }

    /// The connected socket matching an ICMP error about `local -> remote`.
    pub(crate) fn lookup_connected_mut(
        &mut self,
        local_port: u16,
        remote: A,
    ) -> Option<&mut UdpSocket<A>> {
        let idx = *self.by_port.get(&local_port)?;
        let s = self.slots.get_mut(idx as usize)?.socket.as_mut()?;
        (s.remote == Some(remote)).then_some(s)
    }

    pub(crate) fn limits(&self) -> (usize, usize) {
        (self.rcvbuf_bytes, self.rcvbuf_datagrams)
    }
}

impl<A: UdpAddr> UdpSocket<A> {
    pub(crate) fn deliver(&mut self, from: A, data: &[u8], limits: (usize, usize)) -> Deliver {
        let (bytes, datagrams) = limits;
        if self.rx_meta.len() >= datagrams || self.rx_data.len() + data.len() > bytes {
            return Deliver::QueueFull;
        }
        self.rx_data.extend(data);
        self.rx_meta.push_back((data.len(), from));
        Deliver::Queued
    }

    /// Pop one datagram into `buf` (truncated to `buf.len()`, the rest of the
    /// datagram discarded, as `recvfrom` without MSG_TRUNC does). A pending
    /// error is reported first, once.
    pub(crate) fn recv(&mut self, buf: &mut [u8]) -> Result<(usize, A), UdpError> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        let Some((len, from)) = self.rx_meta.pop_front() else {
            return Err(UdpError::WouldBlock);
        };
        let n = len.min(buf.len());
        for (d, s) in buf.iter_mut().zip(self.rx_data.drain(..len)) {
            *d = s;
        }
        Ok((n, from))
    }

    pub(crate) fn status(&self) -> UdpStatus<A> {
        UdpStatus {
            local: self.local,
            remote: self.remote,
            can_recv: !self.rx_meta.is_empty() || self.pending_error.is_some(),
            pending_error: self.pending_error,
            recv_queue: self.rx_data.len(),
            recv_datagrams: self.rx_meta.len(),
        }
    }
}
