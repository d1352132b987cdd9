//! The interface: addresses, routing (connected prefix + default route), the
//! IPv4 output path with fragmentation, and Ethernet/ARP framing. Frames are
//! built in one reusable scratch buffer and handed to `tx`.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr, ARP_LEN};
use ustack_wire::checksum;
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use ustack_wire::tcp::{TcpPacket, TcpRepr};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr, VNET_HDR_LEN};

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

/// What the link does with our frames (`Stack::set_link_offload`): a
/// device opened with a virtio-net header (a TAP with `IFF_VNET_HDR`) takes
/// partial checksums and TCP/IPv4 GSO super-frames, and gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkOffload {
    /// Every frame, both ways, starts with a virtio-net header.
    pub vnet_hdr: bool,
    /// We may send TCP/IPv4 GSO super-frames (up to 64 KB) for the other
    /// side to segment (needs `vnet_hdr` and `tx_csum`).
    pub tso4: bool,
    /// We may leave TCP checksums partial (the pseudo-header sum) for the
    /// other side to complete (needs `vnet_hdr`).
    pub tx_csum: bool,
}

impl LinkOffload {
    /// Whether TCP segments larger than the MTU may be sent as GSO frames.
    pub fn tso(&self) -> bool {
        self.vnet_hdr && self.tso4 && self.tx_csum
    }
    fn partial_csum(&self) -> bool {
        self.vnet_hdr && self.tx_csum
    }
    /// Bytes in front of each frame.
    pub(crate) fn hdr_len(&self) -> usize {
        if self.vnet_hdr {
            VNET_HDR_LEN
        } else {
            0
        }
    }
}

#[derive(Clone)]
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
    /// `frame[..frame_len]` (behind its virtio-net header, if the link has
    /// one).
    frame: Vec<u8>,
    frame_len: usize,
    ident: u16,
    pub(crate) offload: LinkOffload,
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
            offload: LinkOffload::default(),
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
        let ip_at = self.offload.hdr_len() + ETHERNET_HEADER_LEN;
        if let Some(rest) = self.frame.get_mut(ip_at..len) {
            rest.fill(0);
        }
    }

    /// Like [`Iface::start_frame`] without zeroing what the previous frame
    /// left in the scratch buffer (a 64 KB memset per segment at MTU
    /// 65520): only for callers whose emitters write every byte of the
    /// frame (IPv4 `emit` sets every header field; TCP `emit` every header
    /// field, pads the options with EOL and copies the whole payload).
    fn start_frame_overwritten(&mut self, ip_len: usize) {
        let hdr = self.offload.hdr_len();
        let len = hdr + ETHERNET_HEADER_LEN + ip_len;
        if self.frame.len() < len {
            self.frame.resize(len, 0);
        }
        self.frame_len = len;
        if hdr > 0 {
            // A plain frame until the TCP output says otherwise.
            VnetRepr::NONE.emit(self.frame_mut());
        }
        let eth = EthernetRepr {
            src: self.mac,
            dst: MacAddr::BROADCAST,
            ethertype: EtherType::Ipv4,
        };
        eth.emit(&mut EthernetFrame::new_unchecked(self.eth_mut()));
    }

    /// The frame being built, with its virtio-net header if any.
    fn frame(&self) -> &[u8] {
        self.frame.get(..self.frame_len).unwrap_or(&[])
    }

    fn frame_mut(&mut self) -> &mut [u8] {
        let len = self.frame_len;
        self.frame.get_mut(..len).unwrap_or(&mut [])
    }

    /// The Ethernet frame being built (after the virtio-net header).
    fn eth_mut(&mut self) -> &mut [u8] {
        let hdr = self.offload.hdr_len();
        self.frame_mut().get_mut(hdr..).unwrap_or(&mut [])
    }

    /// The IP part of the frame being built.
    fn ip_buf(&mut self) -> &mut [u8] {
        self.eth_mut()
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
    ///
    /// A segment larger than the MTU goes out as one TCP/IPv4 GSO
    /// super-frame if the link takes them, to be cut into segments of at
    /// most `smss` bytes (the connection's send MSS: options included, as
    /// RFC 6691 counts). With checksum offload the TCP checksum is left
    /// partial (the pseudo-header sum, `NEEDS_CSUM`) for the other side to
    /// complete.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_tcp_from(
        &mut self,
        now: Instant,
        ip: &mut IpCounters,
        link: &mut LinkCounters,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        seg: &TcpRepr,
        smss: usize,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        ip.OutRequests += 1;
        let Some(hop) = self.route(dst) else {
            ip.OutNoRoutes += 1;
            return Err(TxError::NoRoute);
        };
        let tcp_len = seg.buffer_len();
        let tcp_hdr = seg.header_len();
        // Payload per wire segment: within the MTU and the peer's MSS.
        let gso_size = self
            .mtu
            .saturating_sub(IPV4_HEADER_LEN + tcp_hdr)
            .min(smss.saturating_sub(tcp_hdr.saturating_sub(20)));
        let gso = IPV4_HEADER_LEN + tcp_len > self.mtu;
        if gso
            && (!self.offload.tso()
                || gso_size == 0
                || IPV4_HEADER_LEN + tcp_len > usize::from(u16::MAX))
        {
            ip.FragFails += 1;
            return Err(TxError::TooLarge);
        }
        let repr = Ipv4Repr {
            src,
            dst,
            protocol: IpProtocol::Tcp,
            payload_len: tcp_len,
            ttl: DEFAULT_TTL,
            // RFC 3168: the ECN codepoint the connection chose (ECT(0) on
            // its new data once ECN is on).
            dscp_ecn: seg.ip_ecn & 3,
            ident: self.next_ident(),
            dont_frag: !self.pmtu.locked(now, dst),
            more_frags: false,
            frag_offset: 0,
        };
        self.start_frame_overwritten(IPV4_HEADER_LEN + tcp_len);
        let partial = self.offload.partial_csum();
        let ip_buf = self.ip_buf();
        let (hdr, body) = ip_buf.split_at_mut(IPV4_HEADER_LEN);
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut hdr[..]), true);
        seg.emit(
            &mut TcpPacket::new_unchecked(&mut body[..]),
            src,
            dst,
            !partial,
        );
        if partial {
            // CHECKSUM_PARTIAL: the field holds the pseudo-header sum (not
            // complemented); the one's-complement sum of the TCP header and
            // data is added by whoever completes it.
            let pseudo = checksum::pseudo_header_v4(
                src,
                dst,
                IpProtocol::Tcp.into(),
                u16::try_from(tcp_len).unwrap_or(u16::MAX),
            );
            TcpPacket::new_unchecked(&mut body[..]).set_checksum(checksum::fold(pseudo));
            let vnet = VnetRepr {
                csum: Csum::Partial {
                    start: (ETHERNET_HEADER_LEN + IPV4_HEADER_LEN) as u16,
                    offset: 16,
                },
                gso: if gso {
                    Gso::TcpV4 {
                        size: u16::try_from(gso_size).unwrap_or(u16::MAX),
                        // CWR on the first segment only (Linux
                        // `SKB_GSO_TCP_ECN`).
                        ecn: seg.cwr,
                    }
                } else {
                    Gso::None
                },
                hdr_len: (ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + tcp_hdr) as u16,
            };
            vnet.emit(self.frame_mut());
            if gso {
                link.OutGsoFrames += 1;
            }
        }
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
        EthernetFrame::new_unchecked(self.eth_mut()).set_dst_addr(target);
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
        let hdr = self.offload.hdr_len();
        for mut f in queue {
            if let Some(eth) = f.get_mut(hdr..).filter(|e| e.len() >= ETHERNET_HEADER_LEN) {
                EthernetFrame::new_unchecked(eth).set_dst_addr(mac);
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
        // 14 + 28 = 42; pad to the 60-byte Ethernet minimum as Linux does
        // (behind a virtio-net header, all zero: nothing to offload).
        let mut whole = [0u8; VNET_HDR_LEN + 60];
        let hdr = self.offload.hdr_len();
        let Some(buf) = whole.get_mut(VNET_HDR_LEN - hdr..) else {
            return;
        };
        let eth = EthernetRepr {
            src: self.mac,
            dst: eth_dst,
            ethertype: EtherType::Arp,
        };
        eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[hdr..]));
        let arp = ArpRepr {
            operation: op,
            sender_mac: self.mac,
            sender_ip,
            target_mac,
            target_ip,
        };
        arp.emit(&mut ArpPacket::new_unchecked(
            &mut buf[hdr + ETHERNET_HEADER_LEN..hdr + ETHERNET_HEADER_LEN + ARP_LEN],
        ));
        if op == ArpOperation::Reply {
            link.ArpOutReplies += 1;
        }
        link.OutFrames += 1;
        tx(buf);
    }
}
