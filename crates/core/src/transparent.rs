//! Transparent mode: the `Stack` plays the whole outside world for one guest
//! on the link (user-mode networking, as slirp/passt do).
//!
//! With [`Stack::new_transparent`]:
//! * ARP requests for any address but the guest's own are answered with our
//!   MAC, so the guest reaches every on-link address through us.
//! * IPv4 datagrams to any unicast destination are accepted (we never forward).
//! * Every destination is on-link: replies "from 93.184.216.34" go straight
//!   to the guest's MAC.
//! * A TCP SYN to an address/port without listener is *held*
//!   ([`Stack::tcp_pending_syns`]) until the application accepts it
//!   ([`Stack::tcp_accept_pending`], the handshake then completes) or refuses
//!   it ([`Stack::tcp_refuse_pending`], RST or ICMP unreachable).
//! * `tcp_connect` may use any local address (inbound port forwards).
//! * UDP to any address lands on one catch-all socket ([`Stack::udp_bind_any`]);
//!   replies may come from any address ([`Stack::udp_send_from`]).
//! * ICMP echo requests to any address are queued for the application
//!   ([`Stack::icmp_echo_request_recv`]) instead of being answered;
//!   replies and unreachables can come from any address.
//! * IPv6 likewise: packets to any unicast destination are accepted (the
//!   guest routes them through one of our addresses, e.g. its default
//!   router; Neighbor Discovery is answered for our own addresses only),
//!   and held SYNs, catch-all datagrams and echo requests carry IPv6
//!   addresses (`SocketAddr`/`IpAddr`). IPv4 flows keep their own maps.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ustack_wire::arp::{ArpOperation, ArpRepr};
use ustack_wire::icmpv4::{DstUnreachable, Icmpv4Packet, Icmpv4Repr};
use ustack_wire::icmpv6::{DstUnreachable as DstUnreachable6, Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::Ipv4Repr;
use ustack_wire::ipv6::{Ipv6Repr, IPV6_HEADER_LEN};
use ustack_wire::tcp::TcpRepr;
use ustack_wire::udp::{UdpPacket, UdpRepr, UDP_HEADER_LEN};

use crate::error::{BindError, IcmpError, UdpError};
use crate::hash::KeyedState;
use crate::iface::{Ip6Out, IpOut, TxError, DEFAULT_HOP_LIMIT, DEFAULT_TTL};
use crate::stack::{Config, Stack};
use crate::tcp::{rst_for_unmatched, TcpError};
use crate::tcp_table::{TcpHandle, Tuple};
use crate::time::{Duration, Instant};

/// Tunables of transparent mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransparentConfig {
    /// The guest's address, if known: ARP requests for it are never
    /// answered (the guest's own duplicate-address checks must not see a
    /// conflict).
    pub guest: Option<Ipv4Addr>,
    /// Held SYNs; beyond it the oldest is dropped silently.
    pub max_pending_syns: usize,
    /// A held SYN nobody decided about is dropped silently after this.
    pub pending_syn_timeout: Duration,
    /// Echo requests queued for the application (oldest dropped).
    pub echo_queue: usize,
    /// Payload bytes queued for the application (echo requests and, per
    /// queue, catch-all UDP datagrams).
    pub queue_bytes: usize,
    /// Datagrams queued on the catch-all UDP socket.
    pub udp_datagrams: usize,
}

impl Default for TransparentConfig {
    fn default() -> Self {
        TransparentConfig {
            guest: None,
            max_pending_syns: 1024,
            pending_syn_timeout: Duration::from_secs(75),
            echo_queue: 1024,
            queue_bytes: 4 << 20,
            udp_datagrams: 4096,
        }
    }
}

/// Identifies a held SYN. Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PendingSynId(u64);

/// A connection attempt awaiting the application's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingSyn {
    pub id: PendingSynId,
    /// Where the guest wants to go (our side of the connection).
    pub local: SocketAddr,
    /// The guest's end (same family as `local`).
    pub remote: SocketAddr,
}

/// How to refuse a held SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refuse {
    /// RST|ACK: "connection refused".
    Rst,
    /// ICMP destination unreachable with this code, quoting the SYN.
    IcmpUnreachable(DstUnreachable),
}

/// The catch-all UDP socket of transparent mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpAnyHandle(u32);

/// An echo request the guest sent to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRequestInfo {
    /// The guest's address and where the request went (same family: an
    /// ICMPv6 echo request for IPv6 addresses).
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ident: u16,
    pub seq: u16,
    /// Payload bytes (without the 8-byte ICMP header); the copy given to
    /// `icmp_echo_request_recv` is truncated to its buffer.
    pub len: usize,
    /// TTL or hop limit.
    pub ttl: u8,
}

/// Counters of transparent mode (diagnostics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransparentCounters {
    pub syns_held: u64,
    /// Retransmitted SYNs (or other segments) for a held SYN, dropped.
    pub syns_absorbed: u64,
    /// Held SYNs dropped because the table was full or they expired.
    pub syns_dropped: u64,
    pub syns_accepted: u64,
    pub syns_refused: u64,
    pub echo_dropped: u64,
    pub udp_dropped: u64,
}

#[derive(Clone)]
struct Held {
    tuple: Tuple,
    syn: TcpRepr<'static>,
}

/// Datagrams in one byte ring plus metadata (no allocation per datagram).
#[derive(Clone)]
struct DgramQueue<M> {
    data: VecDeque<u8>,
    meta: VecDeque<(usize, M)>,
    max_bytes: usize,
    max_items: usize,
}

impl<M> DgramQueue<M> {
    fn new(max_bytes: usize, max_items: usize) -> Self {
        DgramQueue {
            data: VecDeque::new(),
            meta: VecDeque::new(),
            max_bytes,
            max_items,
        }
    }

    /// Queue a datagram; `drop_oldest` makes room instead of refusing.
    /// Returns how many datagrams were dropped (including this one when refused).
    fn push(&mut self, m: M, bytes: &[u8], drop_oldest: bool) -> u64 {
        if bytes.len() > self.max_bytes || self.max_items == 0 {
            return 1;
        }
        let mut dropped = 0;
        while self.meta.len() >= self.max_items || self.data.len() + bytes.len() > self.max_bytes {
            if !drop_oldest {
                return 1;
            }
            let Some((n, _)) = self.meta.pop_front() else {
                break;
            };
            self.data.drain(..n.min(self.data.len()));
            dropped += 1;
        }
        self.data.extend(bytes);
        self.meta.push_back((bytes.len(), m));
        dropped
    }

    /// Pop one datagram into `buf` (truncated); returns its full length.
    fn pop(&mut self, buf: &mut [u8]) -> Option<(usize, M)> {
        let (len, m) = self.meta.pop_front()?;
        let len = len.min(self.data.len());
        for (d, s) in buf.iter_mut().zip(self.data.drain(..len)) {
            *d = s;
        }
        Some((len, m))
    }
}

/// Transparent-mode state owned by the `Stack`.
#[derive(Clone)]
pub(crate) struct Transparent {
    cfg: TransparentConfig,
    held: HashMap<u64, Held, KeyedState>,
    by_tuple: HashMap<(SocketAddrV4, SocketAddrV4), u64, KeyedState>,
    /// IPv6 held SYNs by tuple (IPv4 lookups hash no more than before).
    by_tuple6: HashMap<(SocketAddrV6, SocketAddrV6), u64, KeyedState>,
    /// Held SYN ids in arrival order with their expiry (may hold ids
    /// already decided; skipped lazily).
    order: VecDeque<(u64, Instant)>,
    /// Held SYNs not yet reported to the application.
    fresh: VecDeque<u64>,
    /// A SYN was held since the last `take_events` (an event is due).
    syn_event: bool,
    next_id: u64,
    udp_any: Option<(u32, DgramQueue<(SocketAddr, SocketAddr)>)>,
    udp_generation: u32,
    echo: DgramQueue<EchoRequestInfo>,
    counters: TransparentCounters,
}

impl Transparent {
    fn new(cfg: TransparentConfig, secret: &[u8; 16]) -> Self {
        let echo = DgramQueue::new(cfg.queue_bytes, cfg.echo_queue);
        Transparent {
            held: HashMap::with_hasher(KeyedState::new(secret, 0x7470_0001)),
            by_tuple: HashMap::with_hasher(KeyedState::new(secret, 0x7470_0002)),
            by_tuple6: HashMap::with_hasher(KeyedState::new(secret, 0x7470_0003)),
            order: VecDeque::new(),
            fresh: VecDeque::new(),
            syn_event: false,
            next_id: 1,
            udp_any: None,
            udp_generation: 0,
            echo,
            counters: TransparentCounters::default(),
            cfg,
        }
    }

    fn remove(&mut self, id: u64) -> Option<Held> {
        let h = self.held.remove(&id)?;
        match h.tuple {
            Tuple::V4(l, r) => self.by_tuple.remove(&(l, r)),
            Tuple::V6(l, r) => self.by_tuple6.remove(&(l, r)),
        };
        // Keep the side queues proportional to the live set.
        let bound = 2 * self.cfg.max_pending_syns + 16;
        if self.order.len() > bound {
            let held = &self.held;
            self.order.retain(|(i, _)| held.contains_key(i));
        }
        if self.fresh.len() > bound {
            let held = &self.held;
            self.fresh.retain(|i| held.contains_key(i));
        }
        Some(h)
    }

    fn lookup(&self, t: &Tuple) -> Option<u64> {
        match t {
            Tuple::V4(l, r) => self.by_tuple.get(&(*l, *r)).copied(),
            Tuple::V6(l, r) => self.by_tuple6.get(&(*l, *r)).copied(),
        }
    }

    fn hold(&mut self, now: Instant, tuple: Tuple, syn: &TcpRepr) {
        if self.cfg.max_pending_syns == 0 {
            self.counters.syns_dropped += 1;
            return;
        }
        while self.held.len() >= self.cfg.max_pending_syns {
            let Some((old, _)) = self.order.pop_front() else {
                break;
            };
            if self.remove(old).is_some() {
                self.counters.syns_dropped += 1;
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.held.insert(
            id,
            Held {
                tuple,
                syn: owned_syn(syn),
            },
        );
        match tuple {
            Tuple::V4(l, r) => self.by_tuple.insert((l, r), id),
            Tuple::V6(l, r) => self.by_tuple6.insert((l, r), id),
        };
        self.order
            .push_back((id, now + self.cfg.pending_syn_timeout));
        self.fresh.push_back(id);
        self.syn_event = true;
        self.counters.syns_held += 1;
    }
}

/// The SYN without its payload (data on a SYN is not kept; the guest
/// retransmits it after the handshake), detached from the packet buffer.
fn owned_syn(s: &TcpRepr) -> TcpRepr<'static> {
    TcpRepr {
        src_port: s.src_port,
        dst_port: s.dst_port,
        seq: s.seq,
        ack: s.ack,
        syn: s.syn,
        fin: false,
        rst: s.rst,
        psh: false,
        ece: s.ece,
        cwr: s.cwr,
        window: s.window,
        max_seg_size: s.max_seg_size,
        window_scale: s.window_scale,
        sack_permitted: s.sack_permitted,
        sack_ranges: s.sack_ranges,
        timestamp: s.timestamp,
        urgent: None,
        payload: &[],
        ip_ecn: s.ip_ecn,
    }
}

/// Transparent mode accepts datagrams to (and sends from) any unicast address.
pub(crate) fn is_unicast(a: Ipv4Addr) -> bool {
    !(a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback())
}

/// The IPv6 twin of [`is_unicast`] (IPv4-mapped addresses are not ours to
/// play either: no dual-stack translation).
pub(crate) fn is_unicast6(a: Ipv6Addr) -> bool {
    !(a.is_unspecified() || a.is_multicast() || a.is_loopback() || a.to_ipv4_mapped().is_some())
}

impl Stack {
    /// Create a stack in transparent mode (see the module docs). `config.addr`
    /// is the gateway's address and prefix: the address our ARP requests and
    /// ICMP errors of our own come from. `config.gateway` is ignored.
    pub fn new_transparent(config: Config, tcfg: TransparentConfig, now: Instant) -> Stack {
        let secret = config.secret;
        let mut s = Stack::new(config, now);
        s.iface.transparent = true;
        s.iface.gateway = None;
        s.transparent = Some(Box::new(Transparent::new(tcfg, &secret)));
        s
    }

    /// Whether this stack is in transparent mode.
    pub fn is_transparent(&self) -> bool {
        self.transparent.is_some()
    }

    /// Counters of transparent mode (zero otherwise).
    pub fn transparent_counters(&self) -> TransparentCounters {
        self.transparent
            .as_ref()
            .map(|t| t.counters)
            .unwrap_or_default()
    }

    // ------------------------------------------------------------------
    // Input hooks (called from the receive path)
    // ------------------------------------------------------------------

    /// ARP in transparent mode: answer for every address but the guest's.
    pub(crate) fn transparent_arp(
        &mut self,
        now: Instant,
        arp: &ArpRepr,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let Some(t) = self.transparent.as_deref() else {
            return;
        };
        let guest = t.cfg.guest;
        let me = self.iface.addr();
        let link = &mut self.counters.link;
        let probe = arp.sender_ip.is_unspecified();
        if !arp.sender_mac.is_unicast()
            || (!probe && self.iface.is_martian_source(arp.sender_ip))
            || arp.sender_mac == self.iface.mac
        {
            link.ArpInvalid += 1;
            return;
        }
        let target = arp.target_ip;
        // RFC 826 answers for "the target protocol address" when it is
        // ours; here every address but the guest's is ours. Never answer a
        // gratuitous ARP (target = sender) and answer an RFC 5227 probe
        // (sender 0.0.0.0, the prober's candidate address as target) only
        // for the gateway address, so the guest's checks see no conflict.
        let answer = arp.operation == ArpOperation::Request
            && target != arp.sender_ip
            && Some(target) != guest
            && is_unicast(target)
            && (!probe || target == me);
        if !probe && Some(arp.sender_ip) != Some(me) {
            if let Some(queue) = self.iface.arp.learn(
                now,
                arp.sender_ip,
                arp.sender_mac,
                answer || target == me,
                link,
            ) {
                self.iface.flush_queue(queue, arp.sender_mac, link, tx);
            }
        }
        if answer {
            self.iface.send_arp_from(
                ArpOperation::Reply,
                arp.sender_mac,
                arp.sender_mac,
                arp.sender_ip,
                target,
                link,
                tx,
            );
        }
    }

    /// Queue an echo request for the application instead of answering it.
    pub(crate) fn transparent_echo_request(
        &mut self,
        ip: &Ipv4Repr,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) {
        let Some(t) = self.transparent.as_deref_mut() else {
            return;
        };
        let info = EchoRequestInfo {
            src: IpAddr::V4(ip.src),
            dst: IpAddr::V4(ip.dst),
            ident,
            seq,
            len: data.len(),
            ttl: ip.ttl,
        };
        t.counters.echo_dropped += t.echo.push(info, data, true);
    }

    /// UDP in transparent mode: datagrams no bound socket claims go to the
    /// catch-all socket. Returns true when the datagram was taken.
    pub(crate) fn transparent_udp_input(
        &mut self,
        ip: &Ipv4Repr,
        repr: &UdpRepr,
        data: &[u8],
    ) -> bool {
        let Some(t) = self.transparent.as_deref_mut() else {
            return false;
        };
        let Some((_, q)) = t.udp_any.as_mut() else {
            return false;
        };
        let from = SocketAddrV4::new(ip.src, repr.src_port);
        let to = SocketAddrV4::new(ip.dst, repr.dst_port);
        // A socket bound to the port on 0.0.0.0 or on this very address keeps it.
        if self
            .udp
            .lookup_mut(from, repr.dst_port, false)
            .is_some_and(|s| s.local.ip().is_unspecified() || *s.local.ip() == ip.dst)
        {
            return false;
        }
        let c = &mut self.counters.udp;
        if q.push((SocketAddr::V4(from), SocketAddr::V4(to)), data, false) == 0 {
            c.InDatagrams += 1;
        } else {
            c.RcvbufErrors += 1;
            c.InErrors += 1;
            t.counters.udp_dropped += 1;
        }
        true
    }

    /// TCP in transparent mode: hold SYNs nobody listens for and absorb
    /// segments for held ones. Returns true when the segment was taken.
    pub(crate) fn transparent_tcp_input(
        &mut self,
        now: Instant,
        tuple: Tuple,
        seg: &TcpRepr,
    ) -> bool {
        let Some(t) = self.transparent.as_deref_mut() else {
            return false;
        };
        if let Some(id) = t.lookup(&tuple) {
            // A retransmitted SYN while the decision is pending: stay
            // silent (no RST, no SYN|ACK). A SYN with another ISN is a new
            // attempt on the same 4-tuple: answer that one when accepted.
            if seg.syn && seg.ack.is_none() && !seg.rst {
                if let Some(h) = t.held.get_mut(&id) {
                    h.syn = owned_syn(seg);
                }
            }
            t.counters.syns_absorbed += 1;
            return true;
        }
        let local_ok = match &tuple {
            Tuple::V4(l, _) => is_unicast(*l.ip()),
            Tuple::V6(l, _) => is_unicast6(*l.ip()),
        };
        if !seg.syn || seg.ack.is_some() || seg.rst || !local_ok {
            return false;
        }
        if !self.tcp.syn_unclaimed(&tuple, seg) {
            return false;
        }
        t.hold(now, tuple, seg);
        true
    }

    pub(crate) fn transparent_poll(&mut self, now: Instant) {
        let Some(t) = self.transparent.as_deref_mut() else {
            return;
        };
        while let Some(&(id, expires)) = t.order.front() {
            if expires > now {
                break;
            }
            t.order.pop_front();
            if t.remove(id).is_some() {
                t.counters.syns_dropped += 1;
            }
        }
    }

    /// Whether a SYN was held since the last call (cleared).
    pub(crate) fn take_pending_syn_event(&mut self) -> bool {
        self.transparent
            .as_deref_mut()
            .is_some_and(|t| std::mem::take(&mut t.syn_event))
    }

    pub(crate) fn transparent_poll_at(&self) -> Option<Instant> {
        self.transparent
            .as_deref()
            .and_then(|t| t.order.front().map(|&(_, at)| at))
    }

    // ------------------------------------------------------------------
    // TCP: held SYNs
    // ------------------------------------------------------------------

    /// The next held SYN not reported yet (each is reported once).
    pub fn tcp_next_pending_syn(&mut self) -> Option<PendingSyn> {
        let t = self.transparent.as_deref_mut()?;
        while let Some(id) = t.fresh.pop_front() {
            if let Some(h) = t.held.get(&id) {
                let (local, remote) = h.tuple.addrs();
                return Some(PendingSyn {
                    id: PendingSynId(id),
                    local,
                    remote,
                });
            }
        }
        None
    }

    /// Held SYNs not reported yet (drained).
    pub fn tcp_pending_syns(&mut self) -> impl Iterator<Item = PendingSyn> + '_ {
        std::iter::from_fn(move || self.tcp_next_pending_syn())
    }

    /// Number of SYNs currently held (diagnostics).
    pub fn tcp_pending_syn_count(&self) -> usize {
        self.transparent.as_deref().map_or(0, |t| t.held.len())
    }

    /// Complete the handshake of a held SYN: the connection starts in
    /// SYN-RECEIVED and its SYN|ACK goes out on the next `poll`. The handle
    /// behaves like one from `tcp_accept`. A stale id (decided, expired or
    /// dropped) gives `InvalidHandle`.
    pub fn tcp_accept_pending(
        &mut self,
        now: Instant,
        id: PendingSynId,
    ) -> Result<TcpHandle, TcpError> {
        let t = self
            .transparent
            .as_deref_mut()
            .ok_or(TcpError::InvalidHandle)?;
        let h = t.remove(id.0).ok_or(TcpError::InvalidHandle)?;
        t.counters.syns_accepted += 1;
        self.last_now = self.last_now.max(now);
        let route_mss = match &h.tuple {
            Tuple::V4(_, r) => self.iface.route_mss_to(now, *r.ip()),
            // The 20 more bytes of the IPv6 header (as `tcp_connect6`).
            Tuple::V6(..) => self.iface.route_mss().saturating_sub(20).max(64),
        };
        self.tcp.adopt_syn(now, h.tuple, &h.syn, route_mss)
    }

    /// Refuse a held SYN: RST|ACK (RFC 9293 3.10.7.1: "If the ACK bit is
    /// off, sequence number zero is used, <SEQ=0><ACK=SEG.SEQ+SEG.LEN>
    /// <CTL=RST,ACK>"), or an ICMP destination unreachable quoting the SYN,
    /// from the address the guest tried. Goes out on the next `poll`; a
    /// stale id is ignored.
    pub fn tcp_refuse_pending(&mut self, now: Instant, id: PendingSynId, how: Refuse) {
        let Some(t) = self.transparent.as_deref_mut() else {
            return;
        };
        let Some(h) = t.remove(id.0) else { return };
        t.counters.syns_refused += 1;
        let (l4, r4) = match h.tuple {
            Tuple::V4(l, r) => (l, r),
            Tuple::V6(l, r) => return self.refuse_pending6(now, *l.ip(), *r.ip(), &h.syn, how),
        };
        match how {
            Refuse::Rst => {
                let Some(rst) = rst_for_unmatched(&h.syn) else {
                    return;
                };
                if !self.txq.has_room(self.frames_bytes(rst.buffer_len())) {
                    return;
                }
                let q = &mut self.txq;
                let r = self.iface.send_tcp_from(
                    now,
                    &mut self.counters.ip,
                    &mut self.counters.link,
                    *l4.ip(),
                    *r4.ip(),
                    &rst,
                    &[],
                    0,
                    &mut |f| q.push(now, f),
                );
                if r.is_ok() {
                    self.counters.tcp.OutSegs += 1;
                    self.counters.tcp.OutRsts += 1;
                }
            }
            Refuse::IcmpUnreachable(reason) => {
                // RFC 792: "the internet header plus the first 64 bits of
                // the original datagram's data" — ports and sequence number.
                let quoted = quoted_syn(&h.syn);
                let header = quoted_header(*r4.ip(), *l4.ip(), IpProtocol::Tcp, h.syn.header_len());
                let repr = Icmpv4Repr::DstUnreachable {
                    reason,
                    next_hop_mtu: 0,
                    header,
                    data: &quoted,
                };
                if self.queue_icmp_from(now, *l4.ip(), *r4.ip(), &repr).is_ok() {
                    self.counters.icmp.OutDestUnreachs += 1;
                }
            }
        }
    }

    /// [`Stack::tcp_refuse_pending`] for an IPv6 SYN: RST|ACK, or ICMPv6
    /// destination unreachable (RFC 4443 3.1) with the IPv4 code's
    /// equivalent, quoting the SYN's header and first 8 bytes (the ports
    /// and sequence number, all a receiver needs to find its socket).
    fn refuse_pending6(
        &mut self,
        now: Instant,
        local: Ipv6Addr,
        remote: Ipv6Addr,
        syn: &TcpRepr,
        how: Refuse,
    ) {
        match how {
            Refuse::Rst => {
                let Some(rst) = rst_for_unmatched(syn) else {
                    return;
                };
                if !self.txq.has_room(self.frames_bytes(rst.buffer_len() + 20)) {
                    return;
                }
                let q = &mut self.txq;
                let r = self.iface.send_tcp6_from(
                    now,
                    &mut self.counters,
                    local,
                    remote,
                    &rst,
                    &[],
                    0,
                    &mut |f| q.push(now, f),
                );
                if r.is_ok() {
                    self.counters.tcp.OutSegs += 1;
                    self.counters.tcp.OutRsts += 1;
                }
            }
            Refuse::IcmpUnreachable(reason) => {
                let quoted = quoted_syn(syn);
                let header = Ipv6Repr {
                    src: remote,
                    dst: local,
                    next_header: IpProtocol::Tcp,
                    payload_len: syn.header_len(),
                    hop_limit: DEFAULT_HOP_LIMIT,
                    traffic_class: 0,
                    flow_label: 0,
                };
                let repr = Icmpv6Repr::DstUnreachable {
                    reason: unreachable6(reason),
                    header,
                    data: &quoted,
                };
                if self.queue_icmp6_from(now, local, remote, &repr).is_ok() {
                    self.counters.icmp6.OutDestUnreachs += 1;
                }
            }
        }
    }

    // ------------------------------------------------------------------
    // UDP: the catch-all socket
    // ------------------------------------------------------------------

    /// Open the catch-all UDP socket: it receives every datagram to any
    /// address and port that no bound socket claims. One per stack
    /// (`AddrInUse` otherwise); `AddrNotAvailable` outside transparent mode.
    pub fn udp_bind_any(&mut self) -> Result<UdpAnyHandle, BindError> {
        let t = self
            .transparent
            .as_deref_mut()
            .ok_or(BindError::AddrNotAvailable)?;
        if t.udp_any.is_some() {
            return Err(BindError::AddrInUse);
        }
        t.udp_generation = t.udp_generation.wrapping_add(1);
        let q = DgramQueue::new(t.cfg.queue_bytes, t.cfg.udp_datagrams);
        t.udp_any = Some((t.udp_generation, q));
        Ok(UdpAnyHandle(t.udp_generation))
    }

    /// Close the catch-all socket (stale handles are ignored).
    pub fn udp_close_any(&mut self, h: UdpAnyHandle) {
        if let Some(t) = self.transparent.as_deref_mut() {
            if t.udp_any.as_ref().is_some_and(|(g, _)| *g == h.0) {
                t.udp_any = None;
            }
        }
    }

    /// One datagram from the catch-all socket, truncated to `buf`:
    /// `(length copied, source, destination)`. `WouldBlock` when empty.
    pub fn udp_recv_from_to(
        &mut self,
        h: UdpAnyHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddr, SocketAddr), UdpError> {
        let q = self.udp_any_queue(h)?;
        let (len, (src, dst)) = q.pop(buf).ok_or(UdpError::WouldBlock)?;
        Ok((len.min(buf.len()), src, dst))
    }

    fn udp_any_queue(
        &mut self,
        h: UdpAnyHandle,
    ) -> Result<&mut DgramQueue<(SocketAddr, SocketAddr)>, UdpError> {
        match self
            .transparent
            .as_deref_mut()
            .and_then(|t| t.udp_any.as_mut())
        {
            Some((g, q)) if *g == h.0 => Ok(q),
            _ => Err(UdpError::InvalidHandle),
        }
    }

    /// Send a datagram to the guest appearing to come from `src` (any
    /// unicast address; both of one family). Goes out on the next `poll`.
    pub fn udp_send_from(
        &mut self,
        now: Instant,
        h: UdpAnyHandle,
        data: &[u8],
        src: impl Into<SocketAddr>,
        dst: impl Into<SocketAddr>,
    ) -> Result<usize, UdpError> {
        match (src.into(), dst.into()) {
            (SocketAddr::V4(s), SocketAddr::V4(d)) => self.udp_send_from4(now, h, data, s, d),
            (SocketAddr::V6(s), SocketAddr::V6(d)) => self.udp_send_from6(now, h, data, s, d),
            _ => {
                self.udp_any_queue(h)?;
                Err(UdpError::InvalidAddress)
            }
        }
    }

    fn udp_send_from6(
        &mut self,
        now: Instant,
        h: UdpAnyHandle,
        data: &[u8],
        src: SocketAddrV6,
        dst: SocketAddrV6,
    ) -> Result<usize, UdpError> {
        self.udp_any_queue(h)?;
        if !is_unicast6(*src.ip()) || src.port() == 0 || dst.port() == 0 || !is_unicast6(*dst.ip())
        {
            return Err(UdpError::InvalidAddress);
        }
        // Larger than the MTU it goes in fragments (`Iface::send_ip6`), as
        // `udp6_send_to`'s and IPv4's do; more than 65535 bytes of UDP
        // cannot be said in the header.
        if UDP_HEADER_LEN + data.len() > usize::from(u16::MAX) {
            return Err(UdpError::TooLarge);
        }
        let scratch = self.udp_datagram(*src.ip(), *dst.ip(), src.port(), dst.port(), data);
        let r = self.queue_ip6_from(now, *src.ip(), *dst.ip(), IpProtocol::Udp, &scratch);
        self.scratch = scratch;
        let c = &mut self.counters.udp6;
        udp_sent(r, data.len(), &mut c.OutDatagrams, &mut c.SndbufErrors)
    }

    fn udp_send_from4(
        &mut self,
        now: Instant,
        h: UdpAnyHandle,
        data: &[u8],
        src: SocketAddrV4,
        dst: SocketAddrV4,
    ) -> Result<usize, UdpError> {
        self.udp_any_queue(h)?;
        if !is_unicast(*src.ip())
            || self.iface.is_martian_source(*src.ip())
            || src.port() == 0
            || dst.port() == 0
            || !is_unicast(*dst.ip())
        {
            return Err(UdpError::InvalidAddress);
        }
        if data.len() > 65535 - 20 - UDP_HEADER_LEN {
            return Err(UdpError::TooLarge);
        }
        let scratch = self.udp_datagram(*src.ip(), *dst.ip(), src.port(), dst.port(), data);
        let r = self.queue_ip_from(now, *src.ip(), *dst.ip(), IpProtocol::Udp, &scratch);
        self.scratch = scratch;
        let c = &mut self.counters.udp;
        udp_sent(r, data.len(), &mut c.OutDatagrams, &mut c.SndbufErrors)
    }

    /// A UDP header and `data` in the scratch buffer (taken: the caller
    /// puts it back), with the checksum over either family's
    /// pseudo-header (mandatory over IPv6, RFC 8200 8.1; always sent over
    /// IPv4).
    fn udp_datagram<A: ustack_wire::checksum::PseudoHeader>(
        &mut self,
        src: A,
        dst: A,
        sport: u16,
        dport: u16,
        data: &[u8],
    ) -> Vec<u8> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(UDP_HEADER_LEN + data.len(), 0);
        if let Some(p) = scratch.get_mut(UDP_HEADER_LEN..) {
            p.copy_from_slice(data);
        }
        let repr = UdpRepr {
            src_port: sport,
            dst_port: dport,
        };
        repr.emit(
            &mut UdpPacket::new_unchecked(&mut scratch[..]),
            src,
            dst,
            data.len(),
            true,
        );
        scratch
    }

    // ------------------------------------------------------------------
    // ICMP echo to anywhere
    // ------------------------------------------------------------------

    /// The next echo request the guest sent (to any address), its payload
    /// copied into `buf` (truncated).
    pub fn icmp_echo_request_recv(&mut self, buf: &mut [u8]) -> Option<EchoRequestInfo> {
        let t = self.transparent.as_deref_mut()?;
        t.echo.pop(buf).map(|(_, info)| info)
    }

    /// Send an echo reply from `from` to `to` (RFC 792: "The data received
    /// in the echo message must be returned in the echo reply message").
    /// Both of one family (ICMPv6 for IPv6 addresses, RFC 4443 4.2).
    pub fn icmp_echo_reply_from(
        &mut self,
        now: Instant,
        from: impl Into<IpAddr>,
        to: impl Into<IpAddr>,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) -> Result<(), IcmpError> {
        let (from, to) = match (from.into(), to.into()) {
            (IpAddr::V4(f), IpAddr::V4(t)) => (f, t),
            (IpAddr::V6(f), IpAddr::V6(t)) if is_unicast6(f) && is_unicast6(t) => {
                let repr = Icmpv6Repr::EchoReply {
                    ident,
                    seq_no: seq,
                    data,
                };
                self.queue_icmp6_from(now, f, t, &repr)?;
                self.counters.icmp6.OutEchoReplies += 1;
                return Ok(());
            }
            _ => return Err(IcmpError::InvalidAddress),
        };
        if !is_unicast(from) || !is_unicast(to) {
            return Err(IcmpError::InvalidAddress);
        }
        let repr = Icmpv4Repr::EchoReply {
            ident,
            seq_no: seq,
            data,
        };
        self.queue_icmp_from(now, from, to, &repr)?;
        self.counters.icmp.OutEchoReps += 1;
        Ok(())
    }

    /// Answer an echo request (`to` → `from`, with `ident`, `seq`, `data`)
    /// with ICMP destination unreachable `code` from `from`.
    #[allow(clippy::too_many_arguments)]
    /// For IPv6 addresses: ICMPv6 destination unreachable with the
    /// equivalent code, quoting the echo request.
    pub fn icmp_unreachable_for_echo(
        &mut self,
        now: Instant,
        from: impl Into<IpAddr>,
        to: impl Into<IpAddr>,
        ident: u16,
        seq: u16,
        data: &[u8],
        code: DstUnreachable,
    ) -> Result<(), IcmpError> {
        let (from, to) = match (from.into(), to.into()) {
            (IpAddr::V4(f), IpAddr::V4(t)) => (f, t),
            (IpAddr::V6(f), IpAddr::V6(t)) if is_unicast6(f) && is_unicast6(t) => {
                return self.icmp6_unreachable_for_echo(now, f, t, ident, seq, data, code);
            }
            _ => return Err(IcmpError::InvalidAddress),
        };
        if !is_unicast(from) || !is_unicast(to) {
            return Err(IcmpError::InvalidAddress);
        }
        // Rebuild the request's ICMP header (with its checksum) to quote it.
        let req = Icmpv4Repr::EchoRequest {
            ident,
            seq_no: seq,
            data,
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(req.buffer_len(), 0);
        req.emit(&mut Icmpv4Packet::new_unchecked(&mut scratch[..]));
        let mut quoted = [0u8; 8];
        if let Some(h) = scratch.get(..8) {
            quoted.copy_from_slice(h);
        }
        self.scratch = scratch;
        let header = quoted_header(to, from, IpProtocol::Icmp, req.buffer_len());
        self.queue_unreachable(now, from, to, code, header, &quoted)
    }

    /// Send ICMP destination unreachable `code` from `from` to `to`,
    /// quoting `header` (the datagram `to` sent to `from`) and `data`.
    fn queue_unreachable(
        &mut self,
        now: Instant,
        from: Ipv4Addr,
        to: Ipv4Addr,
        code: DstUnreachable,
        header: Ipv4Repr,
        data: &[u8],
    ) -> Result<(), IcmpError> {
        let repr = Icmpv4Repr::DstUnreachable {
            reason: code,
            next_hop_mtu: 0,
            header,
            data,
        };
        self.queue_icmp_from(now, from, to, &repr)?;
        self.counters.icmp.OutDestUnreachs += 1;
        Ok(())
    }

    /// ICMPv6 destination unreachable with `code`'s equivalent from `from`
    /// to `to`, quoting the IPv6 header of the packet `to` sent to `from`
    /// (`next_header`, `payload_len`) and `data`.
    #[allow(clippy::too_many_arguments)]
    fn queue_unreachable6(
        &mut self,
        now: Instant,
        from: Ipv6Addr,
        to: Ipv6Addr,
        code: DstUnreachable,
        next_header: IpProtocol,
        payload_len: usize,
        data: &[u8],
    ) -> Result<(), IcmpError> {
        let header = Ipv6Repr {
            src: to,
            dst: from,
            next_header,
            payload_len,
            hop_limit: DEFAULT_HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
        };
        let repr = Icmpv6Repr::DstUnreachable {
            reason: unreachable6(code),
            header,
            data,
        };
        self.queue_icmp6_from(now, from, to, &repr)?;
        self.counters.icmp6.OutDestUnreachs += 1;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn icmp6_unreachable_for_echo(
        &mut self,
        now: Instant,
        from: Ipv6Addr,
        to: Ipv6Addr,
        ident: u16,
        seq: u16,
        data: &[u8],
        code: DstUnreachable,
    ) -> Result<(), IcmpError> {
        // Rebuild the request (with its checksum) to quote it: RFC 4443
        // 3.1 "as much of invoking packet as possible" within the minimum
        // MTU.
        let req = Icmpv6Repr::EchoRequest {
            ident,
            seq_no: seq,
            data,
        };
        let room = ustack_wire::icmpv6::ICMPV6_ERROR_MAX_LEN
            - ustack_wire::icmpv6::ICMPV6_HEADER_LEN
            - IPV6_HEADER_LEN;
        let mut quoted = vec![0u8; req.buffer_len()];
        req.emit(
            &to,
            &from,
            &mut Icmpv6Packet::new_unchecked(&mut quoted[..]),
        );
        quoted.truncate(room);
        let len = req.buffer_len();
        self.queue_unreachable6(now, from, to, code, IpProtocol::ICMPV6, len, &quoted)
    }

    /// Tell the guest that a datagram it sent from `to` to `from` cannot
    /// be delivered: ICMP destination unreachable `code` (port
    /// unreachable when the host's socket learned that nobody listens)
    /// from `from`, quoting the datagram's IP and UDP headers (RFC 792,
    /// RFC 1122 3.2.2.1: the guest's kernel finds the socket by them and
    /// reports ECONNREFUSED on a connected one). `len` is the datagram's
    /// payload length, for the quoted lengths; its bytes are not needed
    /// (the quoted UDP checksum is left zero: "no checksum"). Over IPv6,
    /// ICMPv6 with the equivalent code (RFC 4443 3.1).
    pub fn udp_unreachable_from(
        &mut self,
        now: Instant,
        from: SocketAddr,
        to: SocketAddr,
        len: usize,
        code: DstUnreachable,
    ) -> Result<(), IcmpError> {
        let udp_len = UDP_HEADER_LEN + len;
        let mut quoted = [0u8; UDP_HEADER_LEN];
        quoted[0..2].copy_from_slice(&to.port().to_be_bytes());
        quoted[2..4].copy_from_slice(&from.port().to_be_bytes());
        quoted[4..6].copy_from_slice(&u16::try_from(udp_len).unwrap_or(u16::MAX).to_be_bytes());
        match (from.ip(), to.ip()) {
            (IpAddr::V4(f), IpAddr::V4(t)) => {
                if !is_unicast(f) || !is_unicast(t) {
                    return Err(IcmpError::InvalidAddress);
                }
                // An error the stack originates: rate-limited as its own
                // are (RFC 1812 4.3.2.8), so that a guest's flood to
                // closed ports is not answered datagram for datagram.
                if !self.icmp_bucket.take(now) {
                    self.counters.icmp.OutRateLimited += 1;
                    return Err(IcmpError::Exhausted);
                }
                let header = quoted_header(t, f, IpProtocol::Udp, udp_len);
                self.queue_unreachable(now, f, t, code, header, &quoted)
            }
            (IpAddr::V6(f), IpAddr::V6(t)) if is_unicast6(f) && is_unicast6(t) => {
                // RFC 4443 2.4 (f).
                if !self.icmp6_bucket.take(now) {
                    self.counters.icmp6.OutRateLimited += 1;
                    return Err(IcmpError::Exhausted);
                }
                self.queue_unreachable6(now, f, t, code, IpProtocol::Udp, udp_len, &quoted)
            }
            _ => Err(IcmpError::InvalidAddress),
        }
    }

    // ------------------------------------------------------------------
    // IPv6 input hooks (called from `ip6.rs`)
    // ------------------------------------------------------------------

    /// Queue an ICMPv6 echo request to a unicast address for the
    /// application instead of answering it. Returns true when taken.
    pub(crate) fn transparent_echo_request6(
        &mut self,
        ip: &Ipv6Repr,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) -> bool {
        let Some(t) = self.transparent.as_deref_mut() else {
            return false;
        };
        if !is_unicast6(ip.dst) {
            return false;
        }
        let info = EchoRequestInfo {
            src: IpAddr::V6(ip.src),
            dst: IpAddr::V6(ip.dst),
            ident,
            seq,
            len: data.len(),
            ttl: ip.hop_limit,
        };
        t.counters.echo_dropped += t.echo.push(info, data, true);
        true
    }

    /// UDP over IPv6 that no bound socket took: to the catch-all socket
    /// when the destination is unicast. Returns true when taken.
    pub(crate) fn transparent_udp6_input(
        &mut self,
        ip: &Ipv6Repr,
        src_port: u16,
        dst_port: u16,
        data: &[u8],
    ) -> bool {
        let Some(t) = self.transparent.as_deref_mut() else {
            return false;
        };
        let Some((_, q)) = t.udp_any.as_mut() else {
            return false;
        };
        if !is_unicast6(ip.dst) || dst_port == 0 {
            return false;
        }
        let from = SocketAddr::V6(SocketAddrV6::new(ip.src, src_port, 0, 0));
        let to = SocketAddr::V6(SocketAddrV6::new(ip.dst, dst_port, 0, 0));
        let c = &mut self.counters.udp6;
        if q.push((from, to), data, false) == 0 {
            c.InDatagrams += 1;
        } else {
            c.RcvbufErrors += 1;
            c.InErrors += 1;
            t.counters.udp_dropped += 1;
        }
        true
    }

    /// A TCP segment over IPv6 for transparent mode (see
    /// [`Stack::transparent_tcp_input`]).
    pub(crate) fn transparent_tcp_input6(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        seg: &TcpRepr,
    ) -> bool {
        if self.transparent.is_none() {
            return false;
        }
        let t = Tuple::V6(
            SocketAddrV6::new(ip.dst, seg.dst_port, 0, 0),
            SocketAddrV6::new(ip.src, seg.src_port, 0, 0),
        );
        self.transparent_tcp_input(now, t, seg)
    }

    // ------------------------------------------------------------------
    // Output helpers
    // ------------------------------------------------------------------

    fn queue_icmp6_from(
        &mut self,
        now: Instant,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        repr: &Icmpv6Repr,
    ) -> Result<(), IcmpError> {
        if repr.buffer_len() > 65535 - IPV6_HEADER_LEN {
            return Err(IcmpError::TooLarge);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(repr.buffer_len(), 0);
        repr.emit(
            &src,
            &dst,
            &mut Icmpv6Packet::new_unchecked(&mut scratch[..]),
        );
        let r = self.queue_ip6_from(now, src, dst, IpProtocol::ICMPV6, &scratch);
        self.scratch = scratch;
        match r {
            Ok(()) => {
                self.counters.icmp6.OutMsgs += 1;
                Ok(())
            }
            Err(e) => {
                self.counters.icmp6.OutErrors += 1;
                Err(match e {
                    QueueError::Full => IcmpError::Exhausted,
                    QueueError::Tx(TxError::NoRoute) => IcmpError::NoRoute,
                    QueueError::Tx(TxError::TooLarge) => IcmpError::TooLarge,
                })
            }
        }
    }

    /// Send an IPv6 packet with source `src` into the frame queue.
    fn queue_ip6_from(
        &mut self,
        now: Instant,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        next_header: IpProtocol,
        payload: &[u8],
    ) -> Result<(), QueueError> {
        if !self
            .txq
            .has_room(self.frames_bytes6(now, dst, payload.len()))
        {
            return Err(QueueError::Full);
        }
        self.last_now = self.last_now.max(now);
        let out = Ip6Out {
            src,
            dst,
            next_header,
            hop_limit: DEFAULT_HOP_LIMIT,
        };
        let q = &mut self.txq;
        self.iface
            .send_ip6(now, &mut self.counters, out, payload, &mut |f| {
                q.push(now, f)
            })
            .map_err(QueueError::Tx)
    }

    fn queue_icmp_from(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        repr: &Icmpv4Repr,
    ) -> Result<(), IcmpError> {
        if repr.buffer_len() > 65535 - 20 {
            return Err(IcmpError::TooLarge);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(repr.buffer_len(), 0);
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut scratch[..]));
        let r = self.queue_ip_from(now, src, dst, IpProtocol::Icmp, &scratch);
        self.scratch = scratch;
        match r {
            Ok(()) => {
                self.counters.icmp.OutMsgs += 1;
                Ok(())
            }
            Err(e) => {
                self.counters.icmp.OutErrors += 1;
                Err(match e {
                    QueueError::Full => IcmpError::Exhausted,
                    QueueError::Tx(TxError::NoRoute) => IcmpError::NoRoute,
                    QueueError::Tx(TxError::TooLarge) => IcmpError::TooLarge,
                })
            }
        }
    }

    /// Send an IP datagram with source `src` into the frame queue flushed by `poll`.
    fn queue_ip_from(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: IpProtocol,
        payload: &[u8],
    ) -> Result<(), QueueError> {
        if !self.txq.has_room(self.frames_bytes(payload.len())) {
            return Err(QueueError::Full);
        }
        self.last_now = self.last_now.max(now);
        let out = IpOut {
            dst,
            protocol,
            dont_frag: false,
        };
        let q = &mut self.txq;
        self.iface
            .send_ip_from(
                now,
                &mut self.counters.ip,
                &mut self.counters.link,
                src,
                out,
                payload,
                &mut |f| q.push(now, f),
            )
            .map_err(QueueError::Tx)
    }
}

enum QueueError {
    Full,
    Tx(TxError),
}

/// The IPv4 header of a datagram we quote in an ICMP error.
fn quoted_header(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, len: usize) -> Ipv4Repr {
    Ipv4Repr {
        src,
        dst,
        protocol,
        payload_len: len,
        ttl: DEFAULT_TTL,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
}

/// The first 8 bytes of a SYN (ports and sequence number) to quote in an
/// ICMP error.
fn quoted_syn(syn: &TcpRepr) -> [u8; 8] {
    let mut quoted = [0u8; 8];
    quoted[0..2].copy_from_slice(&syn.src_port.to_be_bytes());
    quoted[2..4].copy_from_slice(&syn.dst_port.to_be_bytes());
    quoted[4..8].copy_from_slice(&syn.seq.0.to_be_bytes());
    quoted
}

/// The ICMPv6 destination-unreachable code for an ICMPv4 one (as Linux's
/// NAT64-free mapping of errno: no route, address unreachable,
/// administratively prohibited, port unreachable).
fn unreachable6(code: DstUnreachable) -> DstUnreachable6 {
    match code {
        DstUnreachable::NetUnreachable => DstUnreachable6::NoRoute,
        DstUnreachable::PortUnreachable | DstUnreachable::ProtoUnreachable => {
            DstUnreachable6::PortUnreachable
        }
        DstUnreachable::NetProhibited
        | DstUnreachable::HostProhibited
        | DstUnreachable::AdminProhibited => DstUnreachable6::AdminProhibited,
        _ => DstUnreachable6::AddrUnreachable,
    }
}

/// What queueing a datagram of `len` bytes means for the sender, counted
/// in the family's `OutDatagrams` or `SndbufErrors`.
fn udp_sent(
    r: Result<(), QueueError>,
    len: usize,
    out: &mut u64,
    sndbuf: &mut u64,
) -> Result<usize, UdpError> {
    match r {
        Ok(()) => {
            *out += 1;
            Ok(len)
        }
        Err(QueueError::Full) => {
            *sndbuf += 1;
            Err(UdpError::Exhausted)
        }
        Err(QueueError::Tx(TxError::NoRoute)) => Err(UdpError::NoRoute),
        Err(QueueError::Tx(TxError::TooLarge)) => Err(UdpError::TooLarge),
    }
}
