//! The interface: addresses, routing (connected prefix + default route), the
//! IPv4 output path with fragmentation, and Ethernet/ARP framing. Frames are
//! built in one reusable scratch buffer and handed to `tx`.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr, ARP_LEN};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use ustack_wire::tcp::{TcpPacket, TcpRepr};

use crate::arp::{ArpCache, Lookup};
use crate::counters::{IpCounters, LinkCounters};
use crate::pmtu::PmtuCache;
use crate::time::Instant;

/// Default TTL (Linux `ip_default_ttl`).
pub const DEFAULT_TTL: u8 = 64;

/// Where a datagram goes on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextHop {
    Broadcast,
    Neighbour(Ipv4Addr),
}

/// Why the IP layer could not send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxError {
    NoRoute,
    /// DF set (or the payload exceeds 65515 bytes) and it does not fit the MTU.
    TooLarge,
}

/// The fields of an outgoing IPv4 header the upper layer chooses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpOut {
    pub dst: Ipv4Addr,
    pub protocol: IpProtocol,
    pub dont_frag: bool,
}

/// Token bucket for ICMP errors (Linux `icmp_msgs_per_sec` / `icmp_msgs_burst`).
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    /// In millionths of a token.
    micro_tokens: u64,
    rate_per_sec: u64,
    burst: u64,
    last: Instant,
}

impl TokenBucket {
    pub(crate) fn new(rate_per_sec: u32, burst: u32, now: Instant) -> Self {
        TokenBucket {
            micro_tokens: u64::from(burst) * 1_000_000,
            rate_per_sec: u64::from(rate_per_sec),
            burst: u64::from(burst),
            last: now,
        }
    }

    pub(crate) fn take(&mut self, now: Instant) -> bool {
        let elapsed = (now - self.last).as_micros().min(u128::from(u32::MAX)) as u64;
        self.last = self.last.max(now);
        self.micro_tokens =
            (self.micro_tokens + elapsed * self.rate_per_sec).min(self.burst * 1_000_000);
        if self.micro_tokens >= 1_000_000 {
            self.micro_tokens -= 1_000_000;
            true
        } else {
            false
        }
    }
}

pub(crate) struct Iface {
    pub mac: MacAddr,
    pub cidr: Ipv4Cidr,
    pub gateway: Option<Ipv4Addr>,
    /// IP MTU.
    pub mtu: usize,
    pub arp: ArpCache,
    /// Path MTUs learned per destination (`pmtu.rs`).
    pub pmtu: PmtuCache,
    /// Transparent mode (see `transparent.rs`): every unicast destination
    /// is on-link.
    pub transparent: bool,
    /// Scratch buffer for the frame being built; only grows. The frame is
    /// `frame[..frame_len]`.
    frame: Vec<u8>,
    frame_len: usize,
    ident: u16,
}

impl Iface {
    pub(crate) fn new(
        mac: MacAddr,
        cidr: Ipv4Cidr,
        gateway: Option<Ipv4Addr>,
        mtu: usize,
        arp: ArpCache,
        pmtu: PmtuCache,
        ident: u16,
    ) -> Self {
        // RFC 791: "Every internet module must be able to forward a datagram
        // of 68 octets without further fragmentation."
        let mtu = mtu.clamp(68, 65535);
        Iface {
            mac,
            cidr,
            gateway,
            mtu,
            arp,
            pmtu,
            transparent: false,
            frame: Vec::with_capacity(ETHERNET_HEADER_LEN + mtu),
            frame_len: 0,
            ident,
        }
    }

    pub(crate) fn addr(&self) -> Ipv4Addr {
        self.cidr.address
    }

    /// Limited (255.255.255.255) or directed broadcast of our prefix.
    pub(crate) fn is_broadcast(&self, a: Ipv4Addr) -> bool {
        a.is_broadcast() || self.cidr.broadcast() == Some(a)
    }

    /// RFC 1122 3.2.1.3: addresses that do not name a single host.
    pub(crate) fn is_martian_source(&self, a: Ipv4Addr) -> bool {
        a.is_unspecified()
            || a.is_loopback()
            || a.is_multicast()
            || self.is_broadcast(a)
            || u32::from(a) >> 28 == 0xf
    }

    /// Connected prefix first, then the default route.
    pub(crate) fn route(&self, dst: Ipv4Addr) -> Option<NextHop> {
        if dst.is_unspecified() || dst.is_multicast() || dst.is_loopback() || dst == self.addr() {
            return None;
        }
        if self.is_broadcast(dst) {
            return Some(NextHop::Broadcast);
        }
        if self.cidr.contains(dst) || self.transparent {
            return Some(NextHop::Neighbour(dst));
        }
        self.gateway.map(NextHop::Neighbour)
    }

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    /// Apply the upper layer's reachability advice about destinations to
    /// the neighbour entries of their next hops.
    pub(crate) fn neighbour_advice(
        &mut self,
        now: Instant,
        advice: impl Iterator<Item = (Ipv4Addr, crate::tcp::NeighbourAdvice)>,
    ) {
        for (dst, adv) in advice {
            let Some(NextHop::Neighbour(hop)) = self.route(dst) else {
                continue;
            };
            if adv.confirm {
                self.arp.confirm(now, hop);
            }
            if adv.suspect {
                self.arp.suspect(now, hop);
            }
        }
    }

    /// Largest TCP MSS for this interface (MTU - 40).
    pub(crate) fn route_mss(&self) -> u16 {
        u16::try_from(self.mtu.saturating_sub(40)).unwrap_or(u16::MAX)
    }

    /// The MSS a new TCP connection to `dst` starts with: the interface's,
    /// or less if the path MTU cache knows better (RFC 1191).
    pub(crate) fn route_mss_to(&self, now: Instant, dst: Ipv4Addr) -> u16 {
        self.pmtu.mss(now, dst, self.route_mss())
    }

    fn start_frame(&mut self, ip_len: usize) {
        self.start_frame_overwritten(ip_len);
        let len = self.frame_len;
        if let Some(rest) = self.frame.get_mut(ETHERNET_HEADER_LEN..len) {
            rest.fill(0);
        }
    }

    /// Like [`Iface::start_frame`] without zeroing what the previous frame
    /// left in the scratch buffer (a 64 KB memset per segment at MTU
    /// 65520): only for callers whose emitters write every byte of the
    /// frame (IPv4 `emit` sets every header field; TCP `emit` every header
    /// field, pads the options with EOL and copies the whole payload).
    fn start_frame_overwritten(&mut self, ip_len: usize) {
        let len = ETHERNET_HEADER_LEN + ip_len;
        if self.frame.len() < len {
            self.frame.resize(len, 0);
        }
        self.frame_len = len;
        let eth = EthernetRepr {
            src: self.mac,
            dst: MacAddr::BROADCAST,
            ethertype: EtherType::Ipv4,
        };
        eth.emit(&mut EthernetFrame::new_unchecked(self.frame_mut()));
    }

    /// The frame being built.
    fn frame(&self) -> &[u8] {
        self.frame.get(..self.frame_len).unwrap_or(&[])
    }

    fn frame_mut(&mut self) -> &mut [u8] {
        let len = self.frame_len;
        self.frame.get_mut(..len).unwrap_or(&mut [])
    }

    /// The IP part of the frame being built.
    fn ip_buf(&mut self) -> &mut [u8] {
        self.frame_mut()
            .get_mut(ETHERNET_HEADER_LEN..)
            .unwrap_or(&mut [])
    }

    /// Send one IPv4 datagram carrying `payload`, fragmenting it when it
    /// exceeds the MTU and DF is clear.
    pub(crate) fn send_ip(
        &mut self,
        now: Instant,
        ip: &mut IpCounters,
        link: &mut LinkCounters,
        out: IpOut,
        payload: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        let src = self.addr();
        self.send_ip_from(now, ip, link, src, out, payload, tx)
    }

    /// `send_ip` with an explicit source address (transparent mode).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_ip_from(
        &mut self,
        now: Instant,
        ip: &mut IpCounters,
        link: &mut LinkCounters,
        src: Ipv4Addr,
        out: IpOut,
        payload: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        ip.OutRequests += 1;
        let Some(hop) = self.route(out.dst) else {
            ip.OutNoRoutes += 1;
            return Err(TxError::NoRoute);
        };
        if payload.len() > 65535 - IPV4_HEADER_LEN {
            ip.OutDiscards += 1;
            return Err(TxError::TooLarge);
        }
        let mut repr = Ipv4Repr {
            src,
            dst: out.dst,
            protocol: out.protocol,
            payload_len: payload.len(),
            ttl: DEFAULT_TTL,
            dscp_ecn: 0,
            ident: self.next_ident(),
            dont_frag: out.dont_frag,
            more_frags: false,
            frag_offset: 0,
        };
        if IPV4_HEADER_LEN + payload.len() <= self.mtu {
            self.emit_ip(&repr, payload);
            self.transmit(now, hop, link, tx);
            return Ok(());
        }
        if out.dont_frag {
            // RFC 791: "If the Don't Fragment flag (DF) bit is set, then
            // internet fragmentation of this datagram is NOT permitted".
            ip.FragFails += 1;
            return Err(TxError::TooLarge);
        }
        // RFC 791 fragmentation: each fragment but the last carries a
        // multiple of 8 octets; MF set on all but the last.
        let max = (self.mtu - IPV4_HEADER_LEN) & !7;
        let mut offset = 0usize;
        for chunk in payload.chunks(max) {
            repr.payload_len = chunk.len();
            repr.frag_offset = offset as u16;
            repr.more_frags = offset + chunk.len() < payload.len();
            self.emit_ip(&repr, chunk);
            self.transmit(now, hop, link, tx);
            ip.FragCreates += 1;
            offset += chunk.len();
        }
        ip.FragOKs += 1;
        Ok(())
    }

    fn emit_ip(&mut self, repr: &Ipv4Repr, payload: &[u8]) {
        self.start_frame(IPV4_HEADER_LEN + payload.len());
        let ip_buf = self.ip_buf();
        let (hdr, body) = ip_buf.split_at_mut(IPV4_HEADER_LEN);
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut hdr[..]), true);
        body.copy_from_slice(payload);
    }

    /// Send a TCP segment from `src` (our address, or any address in
    /// transparent mode). RFC 1191 3: "the source host ... [sets] the DF
    /// bit in the IP header" of every datagram, so that a router too
    /// small for it answers with "fragmentation needed"; the MSS keeps
    /// segments within the MTU. Except, as Linux, towards a destination
    /// whose path MTU is below 552 (a locked entry, `pmtu.rs`): there the
    /// routers may fragment.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_tcp_from(
        &mut self,
        now: Instant,
        ip: &mut IpCounters,
        link: &mut LinkCounters,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        seg: &TcpRepr,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        ip.OutRequests += 1;
        let Some(hop) = self.route(dst) else {
            ip.OutNoRoutes += 1;
            return Err(TxError::NoRoute);
        };
        let tcp_len = seg.buffer_len();
        if IPV4_HEADER_LEN + tcp_len > self.mtu {
            ip.FragFails += 1;
            return Err(TxError::TooLarge);
        }
        let repr = Ipv4Repr {
            src,
            dst,
            protocol: IpProtocol::Tcp,
            payload_len: tcp_len,
            ttl: DEFAULT_TTL,
            dscp_ecn: 0,
            ident: self.next_ident(),
            dont_frag: !self.pmtu.locked(now, dst),
            more_frags: false,
            frag_offset: 0,
        };
        self.start_frame_overwritten(IPV4_HEADER_LEN + tcp_len);
        let ip_buf = self.ip_buf();
        let (hdr, body) = ip_buf.split_at_mut(IPV4_HEADER_LEN);
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut hdr[..]), true);
        seg.emit(&mut TcpPacket::new_unchecked(&mut body[..]), src, dst, true);
        self.transmit(now, hop, link, tx);
        Ok(())
    }

    /// Hand the frame in the scratch buffer to the link, resolving the
    /// neighbour's MAC or queueing the frame until ARP answers.
    fn transmit(
        &mut self,
        now: Instant,
        hop: NextHop,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let target = match hop {
            NextHop::Broadcast => MacAddr::BROADCAST,
            NextHop::Neighbour(ip) => match self.arp.lookup(now, ip) {
                Lookup::Found(mac) => mac,
                Lookup::Missing => {
                    let frame = self.frame.get(..self.frame_len).unwrap_or(&[]);
                    if self.arp.enqueue(now, ip, frame, link) {
                        self.send_arp(
                            ArpOperation::Request,
                            MacAddr::BROADCAST,
                            MacAddr::UNSPECIFIED,
                            ip,
                            link,
                            tx,
                        );
                    }
                    return;
                }
            },
        };
        EthernetFrame::new_unchecked(self.frame_mut()).set_dst_addr(target);
        link.OutFrames += 1;
        tx(self.frame());
    }

    /// Send frames that waited for `mac`.
    pub(crate) fn flush_queue(
        &mut self,
        queue: VecDeque<Vec<u8>>,
        mac: MacAddr,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        for mut f in queue {
            if f.len() >= ETHERNET_HEADER_LEN {
                EthernetFrame::new_unchecked(&mut f[..]).set_dst_addr(mac);
                link.OutFrames += 1;
                tx(&f);
            }
        }
    }

    /// Emit an ARP packet (built on the stack, no allocation).
    pub(crate) fn send_arp(
        &mut self,
        op: ArpOperation,
        eth_dst: MacAddr,
        target_mac: MacAddr,
        target_ip: Ipv4Addr,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let me = self.addr();
        self.send_arp_from(op, eth_dst, target_mac, target_ip, me, link, tx);
    }

    /// `send_arp` with an explicit sender protocol address (transparent
    /// mode answers for every address).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_arp_from(
        &mut self,
        op: ArpOperation,
        eth_dst: MacAddr,
        target_mac: MacAddr,
        target_ip: Ipv4Addr,
        sender_ip: Ipv4Addr,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        // 14 + 28 = 42; pad to the 60-byte Ethernet minimum as Linux does.
        let mut buf = [0u8; 60];
        let eth = EthernetRepr {
            src: self.mac,
            dst: eth_dst,
            ethertype: EtherType::Arp,
        };
        eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        let arp = ArpRepr {
            operation: op,
            sender_mac: self.mac,
            sender_ip,
            target_mac,
            target_ip,
        };
        arp.emit(&mut ArpPacket::new_unchecked(
            &mut buf[ETHERNET_HEADER_LEN..ETHERNET_HEADER_LEN + ARP_LEN],
        ));
        if op == ArpOperation::Reply {
            link.ArpOutReplies += 1;
        }
        link.OutFrames += 1;
        tx(&buf);
    }
}
