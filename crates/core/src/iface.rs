//! The interface: addresses, routing (connected prefix + default route), the
//! IPv4 output path with fragmentation, and Ethernet/ARP framing. Frames are
//! built in one reusable scratch buffer and handed to `tx`.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr};

use bytes::Bytes;

use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr, ARP_LEN};
use ustack_wire::checksum;
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
use ustack_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use ustack_wire::ipv6::{solicited_node, Ipv6Cidr, Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use ustack_wire::ipv6ext::{Ipv6FragmentRepr, FRAGMENT_HEADER_LEN};
use ustack_wire::ndisc::{na_flags, NdiscOption, NdiscOptions, NdiscRepr};
use ustack_wire::tcp::{TcpPacket, TcpRepr};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr, VNET_HDR_LEN};

use crate::arp::{ArpCache, ArpRequest, Lookup};
use crate::counters::{Counters, Icmp6Counters, IpCounters, LinkCounters};
use crate::hash::KeyedState;
use crate::pmtu::PmtuCache;
use crate::time::Instant;
use crate::txown::{ext_len, gather, take_whole, TxOwned};

/// Default hop limit of IPv6 packets (Linux `hop_limit`, 64).
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// The link-local address Linux forms from a MAC (RFC 4291 2.5.1 /
/// appendix A, modified EUI-64: `02:00:00:00:00:01` gives
/// `fe80::ff:fe00:1`).
pub fn link_local(mac: MacAddr) -> Ipv6Cidr {
    let m = mac.0;
    let a = Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ]);
    Ipv6Cidr {
        address: a,
        prefix_len: 64,
    }
}

/// The Ethernet multicast address of an IPv6 multicast group (RFC 2464 7:
/// 33:33 and the group's last four octets).
pub fn ipv6_multicast_mac(group: Ipv6Addr) -> MacAddr {
    let o = group.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The fields of an outgoing IPv6 header the upper layer chooses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ip6Out {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: IpProtocol,
    pub hop_limit: u8,
}

/// Default TTL (Linux `ip_default_ttl`).
pub const DEFAULT_TTL: u8 = 64;

/// Where a datagram goes on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextHop {
    Broadcast,
    Neighbour(Ipv4Addr),
}

/// Where an IPv6 packet goes on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextHop6 {
    Multicast(MacAddr),
    Neighbour(Ipv6Addr),
}

/// fe80::/10 (`Ipv6Addr::is_unicast_link_local` is not stable everywhere).
pub(crate) fn is_link_local6(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
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
/// partial checksums and TCP GSO super-frames, and gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkOffload {
    /// Every frame, both ways, starts with a virtio-net header.
    pub vnet_hdr: bool,
    /// We may send TCP/IPv4 GSO super-frames (up to 64 KB) for the other
    /// side to segment (needs `vnet_hdr` and `tx_csum`). Connections build
    /// segments larger than the MTU only with this on.
    pub tso4: bool,
    /// We may send TCP/IPv6 GSO super-frames (`GSO_TCPV6`, needs
    /// `vnet_hdr` and `tx_csum`); without it an IPv6 super-segment is cut
    /// into MTU-sized segments in software.
    pub tso6: bool,
    /// We may leave TCP checksums partial (the pseudo-header sum) for the
    /// other side to complete (needs `vnet_hdr`).
    pub tx_csum: bool,
}

impl LinkOffload {
    /// Whether TCP segments larger than the MTU may be sent as GSO frames.
    pub fn tso(&self) -> bool {
        self.vnet_hdr && self.tso4 && self.tx_csum
    }
    /// Whether TCP/IPv6 segments larger than the MTU may be sent as GSO
    /// frames.
    pub fn tso6(&self) -> bool {
        self.vnet_hdr && self.tso6 && self.tx_csum
    }
    pub(crate) fn partial_csum(&self) -> bool {
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
    /// Our IPv6 addresses: the link-local one from the MAC (EUI-64) first,
    /// then the static ones (`Stack::add_ipv6_address`).
    pub addrs6: Vec<Ipv6Cidr>,
    /// The IPv6 neighbour cache (RFC 4861 Neighbor Discovery), the same
    /// structure as ARP's.
    pub nd: ArpCache<Ipv6Addr>,
    /// Path MTUs learned per destination (`pmtu.rs`).
    pub pmtu: PmtuCache,
    /// Our IPv6 addresses still under duplicate address detection
    /// (`ip6_host.rs`): not used, only their solicited-node groups heard.
    pub tentative6: Vec<Ipv6Cidr>,
    /// Default routers from Router Advertisements, with the end of their
    /// lifetime (`ip6_host.rs`, RFC 4861 6.3.4); the first is used.
    pub routers6: Vec<(Ipv6Addr, Instant)>,
    /// On-link prefixes from Router Advertisements and when they expire
    /// (`None` = infinite).
    pub onlink6: Vec<(Ipv6Cidr, Option<Instant>)>,
    /// The link MTU a Router Advertisement set for IPv6 (RFC 4861 4.6.4).
    pub ra_mtu6: Option<usize>,
    /// Destinations that valid Redirects sent to a better first hop (RFC
    /// 4861 8.3: the Destination Cache's redirected entries); bounded,
    /// kept by `ip6_host.rs`.
    pub redirects6: Vec<Redirect6>,
    /// Transparent mode (see `transparent.rs`): every unicast destination
    /// is on-link.
    pub transparent: bool,
    /// The TTL of the IPv4 packets we originate (Linux `ip_default_ttl`;
    /// [`DEFAULT_TTL`] until changed).
    pub ttl: u8,
    /// Scratch buffer for the frame being built; only grows. The frame is
    /// `frame[..frame_len]` (behind its virtio-net header, if the link has
    /// one).
    frame: Vec<u8>,
    frame_len: usize,
    ident: u16,
    pub(crate) offload: LinkOffload,
    /// Frames handed out by ownership (`txown.rs`), when on.
    pub(crate) tx_owned: TxOwned,
    /// Keys the IPv6 Fragment Identification (RFC 7739: unpredictable);
    /// set from the stack's secret.
    pub(crate) frag6_key: KeyedState,
    /// Datagrams fragmented so far (hashed with the addresses).
    frag6_seq: u64,
}

/// A destination a Redirect sent elsewhere (RFC 4861 8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect6 {
    /// The ICMP Destination Address.
    pub dst: Ipv6Addr,
    /// The ICMP Target Address: the new first hop.
    pub next_hop: Ipv6Addr,
    /// The router that sent the Redirect: the entry goes with it.
    pub router: Ipv6Addr,
    /// When the entry expires unless a new Redirect renews it.
    pub until: Instant,
}

impl Iface {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        mac: MacAddr,
        cidr: Ipv4Cidr,
        gateway: Option<Ipv4Addr>,
        mtu: usize,
        arp: ArpCache,
        nd: ArpCache<Ipv6Addr>,
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
            addrs6: vec![link_local(mac)],
            nd,
            pmtu,
            tentative6: Vec::new(),
            routers6: Vec::new(),
            onlink6: Vec::new(),
            ra_mtu6: None,
            redirects6: Vec::new(),
            transparent: false,
            ttl: DEFAULT_TTL,
            frame: Vec::with_capacity(ETHERNET_HEADER_LEN + mtu),
            frame_len: 0,
            ident,
            offload: LinkOffload::default(),
            tx_owned: TxOwned::default(),
            frag6_key: KeyedState::new(&[0; 16], 0),
            frag6_seq: 0,
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

    /// [`Iface::neighbour_advice`] for IPv6 destinations (RFC 4861 7.3.1:
    /// "hints from upper-layer protocols" confirm reachability).
    pub(crate) fn neighbour_advice6(
        &mut self,
        now: Instant,
        advice: impl Iterator<Item = (Ipv6Addr, crate::tcp::NeighbourAdvice)>,
    ) {
        for (dst, adv) in advice {
            let Some(NextHop6::Neighbour(hop)) = self.route6(dst) else {
                continue;
            };
            if adv.confirm {
                self.nd.confirm(now, hop);
            }
            if adv.suspect {
                self.nd.suspect(now, hop);
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
        self.tx_owned.cur_ext.clear();
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

    /// The frame being built, with its virtio-net header if any (its
    /// headers, when the payload is by reference), and its payload pieces.
    pub(crate) fn frame_and_payload(&mut self) -> (&[u8], &mut Vec<Bytes>) {
        let head = self.frame.get(..self.frame_len).unwrap_or(&[]);
        (head, &mut self.tx_owned.cur_ext)
    }

    /// Length of the frame being built.
    pub(crate) fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Put `buf` in place of the scratch buffer and return the one it held
    /// (its frame is `[..frame_len()]`).
    pub(crate) fn replace_scratch(&mut self, buf: Vec<u8>) -> Vec<u8> {
        std::mem::replace(&mut self.frame, buf)
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
            ttl: self.ttl,
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
        ext: &[Bytes],
        smss: usize,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        if !ext.is_empty() && !self.offload.partial_csum() {
            // The checksum is ours to compute: over one payload.
            let payload = gather(seg.payload, ext);
            let whole = TcpRepr {
                payload: &payload,
                ..*seg
            };
            return self.send_tcp_from(now, ip, link, src, dst, &whole, &[], smss, tx);
        }
        ip.OutRequests += 1;
        let Some(hop) = self.route(dst) else {
            ip.OutNoRoutes += 1;
            return Err(TxError::NoRoute);
        };
        let ext_len = ext_len(ext);
        let tcp_len = seg.buffer_len() + ext_len;
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
            ttl: self.ttl,
            // RFC 3168: the ECN codepoint the connection chose (ECT(0) on
            // its new data once ECN is on).
            dscp_ecn: seg.ip_ecn & 3,
            ident: self.next_ident(),
            dont_frag: !self.pmtu.locked(now, dst),
            more_frags: false,
            frag_offset: 0,
        };
        // Headers only when the payload is by reference.
        self.start_frame_overwritten(IPV4_HEADER_LEN + tcp_len - ext_len);
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
        self.set_frame_payload(ext);
        self.transmit(now, hop, link, tx);
        Ok(())
    }

    /// Send a TCP segment over IPv6 from `src` to `dst`: the IPv6 twin of
    /// [`Iface::send_tcp_from`]. A segment larger than the MTU (a TSO
    /// super-segment the connection built because the link takes GSO
    /// frames) goes out as one TCP/IPv6 GSO super-frame (`GSO_TCPV6`, the
    /// checksum partial over the IPv6 pseudo-header) if the link takes
    /// them, to be cut into segments of at most `smss` bytes; otherwise it
    /// is cut here into segments of at most `smss` payload bytes and the
    /// MTU: PSH and FIN on the last, CWR on the first. With checksum
    /// offload the TCP checksum is left partial (the IPv6 pseudo-header
    /// sum).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_tcp6_from(
        &mut self,
        now: Instant,
        c: &mut Counters,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        seg: &TcpRepr,
        ext: &[Bytes],
        smss: usize,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        let tcp_len = seg.buffer_len() + ext_len(ext);
        let one = IPV6_HEADER_LEN + tcp_len <= self.mtu
            || (self.offload.tso6() && tcp_len <= usize::from(u16::MAX));
        let whole_here = self.offload.partial_csum() && one;
        if !ext.is_empty() && !whole_here {
            // The checksum is ours to compute, or the segment is cut here:
            // over one payload.
            let payload = gather(seg.payload, ext);
            let whole = TcpRepr {
                payload: &payload,
                ..*seg
            };
            return self.send_tcp6_from(now, c, src, dst, &whole, &[], smss, tx);
        }
        if IPV6_HEADER_LEN + tcp_len <= self.mtu {
            return self.send_tcp6_one(now, c, src, dst, seg, ext, None, tx);
        }
        let tcp_hdr = seg.header_len();
        let per = self
            .mtu
            .saturating_sub(IPV6_HEADER_LEN + tcp_hdr)
            .min(smss.saturating_sub(tcp_hdr.saturating_sub(20)));
        if per == 0 {
            c.ip6.OutRequests += 1;
            c.ip6.OutDiscards += 1;
            return Err(TxError::TooLarge);
        }
        // The IPv6 payload length is 16 bits (no jumbograms).
        if self.offload.tso6() && tcp_len <= usize::from(u16::MAX) {
            return self.send_tcp6_one(now, c, src, dst, seg, ext, Some(per), tx);
        }
        let n = seg.payload.len();
        let mut off = 0;
        while off < n {
            let end = (off + per).min(n);
            let last = end == n;
            let piece = TcpRepr {
                seq: seg.seq + off,
                payload: seg.payload.get(off..end).unwrap_or(&[]),
                fin: seg.fin && last,
                psh: seg.psh && last,
                cwr: seg.cwr && off == 0,
                ..*seg
            };
            self.send_tcp6_one(now, c, src, dst, &piece, &[], None, tx)?;
            off = end;
        }
        Ok(())
    }

    /// One TCP/IPv6 segment, built in place: within the MTU, or with
    /// `gso` (the payload per wire segment) a GSO super-frame.
    #[allow(clippy::too_many_arguments)]
    fn send_tcp6_one(
        &mut self,
        now: Instant,
        c: &mut Counters,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        seg: &TcpRepr,
        ext: &[Bytes],
        gso: Option<usize>,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        c.ip6.OutRequests += 1;
        let Some(hop) = self.route6(dst) else {
            c.ip6.OutNoRoutes += 1;
            return Err(TxError::NoRoute);
        };
        let ext_len = ext_len(ext);
        let tcp_len = seg.buffer_len() + ext_len;
        let too_large = match gso {
            None => IPV6_HEADER_LEN + tcp_len > self.mtu,
            Some(_) => !self.offload.tso6() || tcp_len > usize::from(u16::MAX),
        };
        if too_large {
            c.ip6.OutDiscards += 1;
            return Err(TxError::TooLarge);
        }
        let repr = Ipv6Repr {
            src,
            dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_len,
            hop_limit: DEFAULT_HOP_LIMIT,
            // RFC 3168: the ECN codepoint in the Traffic Class's low bits.
            traffic_class: seg.ip_ecn & 3,
            flow_label: 0,
        };
        // Every byte is written below (IPv6 and TCP emit every field); the
        // headers only when the payload is by reference.
        self.start_frame_overwritten(IPV6_HEADER_LEN + tcp_len - ext_len);
        EthernetFrame::new_unchecked(self.eth_mut()).set_ethertype(EtherType::Ipv6);
        let partial = self.offload.partial_csum();
        let ip_buf = self.ip_buf();
        let (hdr, body) = ip_buf.split_at_mut(IPV6_HEADER_LEN);
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut hdr[..]));
        seg.emit(
            &mut TcpPacket::new_unchecked(&mut body[..]),
            src,
            dst,
            !partial,
        );
        if partial {
            // CHECKSUM_PARTIAL over the IPv6 pseudo-header (RFC 8200 8.1:
            // the upper-layer length of the whole super-segment; whoever
            // segments it adjusts the sum per segment, as Linux's
            // `tcp6_gso_segment` does).
            let pseudo = checksum::pseudo_header_v6(
                &src,
                &dst,
                IpProtocol::Tcp.into(),
                u32::try_from(tcp_len).unwrap_or(u32::MAX),
            );
            TcpPacket::new_unchecked(&mut body[..]).set_checksum(checksum::fold(pseudo));
            let vnet = VnetRepr {
                csum: Csum::Partial {
                    start: (ETHERNET_HEADER_LEN + IPV6_HEADER_LEN) as u16,
                    offset: 16,
                },
                gso: match gso {
                    Some(size) => Gso::TcpV6 {
                        size: u16::try_from(size).unwrap_or(u16::MAX),
                        // CWR on the first segment only (Linux
                        // `SKB_GSO_TCP_ECN`).
                        ecn: seg.cwr,
                    },
                    None => Gso::None,
                },
                hdr_len: (ETHERNET_HEADER_LEN + IPV6_HEADER_LEN + seg.header_len()) as u16,
            };
            vnet.emit(self.frame_mut());
            if gso.is_some() {
                c.link.OutGsoFrames += 1;
            }
        }
        self.set_frame_payload(ext);
        self.transmit6(now, hop, &mut c.icmp6, &mut c.nd, &mut c.link, tx);
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
                    // Queued whole: the payload's references go now.
                    let head = self.frame.get(..self.frame_len).unwrap_or(&[]);
                    let frame = take_whole(head, &mut self.tx_owned.cur_ext);
                    if self.arp.enqueue(now, ip, &frame, link) {
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
        if !self.tx_owned.cur_ext.is_empty() {
            link.OutZeroCopyFrames += 1;
        }
        self.emit_scratch(tx);
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
                self.emit_vec(f, tx);
            }
        }
    }

    /// Whether `a` is one of our IPv6 unicast addresses.
    pub(crate) fn has_addr6(&self, a: Ipv6Addr) -> bool {
        self.addrs6.iter().any(|c| c.address == a)
    }

    /// Whether a packet to `a` is for us: one of our addresses, the
    /// all-nodes group or the solicited-node group of one of our addresses
    /// (RFC 4291 2.8: the groups every node joins).
    pub(crate) fn accepts6(&self, a: Ipv6Addr) -> bool {
        if a.is_multicast() {
            a == Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1)
                || self.addrs6.iter().any(|c| solicited_node(c.address) == a)
                || self
                    .tentative6
                    .iter()
                    .any(|c| solicited_node(c.address) == a)
        } else {
            // Transparent mode plays every unicast destination.
            self.has_addr6(a) || (self.transparent && crate::transparent::is_unicast6(a))
        }
    }

    /// The source address for a packet to `dst` (RFC 6724, reduced to what
    /// one interface needs): an address of ours on `dst`'s prefix, else a
    /// global one for a global destination, else the link-local one.
    pub(crate) fn source6(&self, dst: Ipv6Addr) -> Ipv6Addr {
        let link_local = self.addrs6.first().map(|c| c.address);
        if let Some(c) = self.addrs6.iter().find(|c| c.contains(dst)) {
            return c.address;
        }
        if is_link_local6(dst) || dst.is_multicast() {
            if let Some(a) = link_local {
                return a;
            }
        }
        self.addrs6
            .iter()
            .find(|c| !is_link_local6(c.address))
            .or(self.addrs6.first())
            .map(|c| c.address)
            .unwrap_or(Ipv6Addr::UNSPECIFIED)
    }

    /// Where a packet to `dst` goes on the link: on-link prefixes (the
    /// link-local one, our addresses' and those Router Advertisements
    /// announce) and multicast directly, the rest through the default
    /// router if Router Advertisements gave one (RFC 4861 5.2).
    pub(crate) fn route6(&self, dst: Ipv6Addr) -> Option<NextHop6> {
        if dst.is_unspecified() || dst.is_loopback() || self.has_addr6(dst) {
            return None;
        }
        if dst.is_multicast() {
            return Some(NextHop6::Multicast(ipv6_multicast_mac(dst)));
        }
        if is_link_local6(dst) || self.addrs6.iter().any(|c| c.contains(dst)) {
            return Some(NextHop6::Neighbour(dst));
        }
        if self.onlink6.iter().any(|(p, _)| p.contains(dst)) {
            return Some(NextHop6::Neighbour(dst));
        }
        // RFC 4861 8.3: a redirected destination goes to the first hop the
        // Redirect named (a better router, or the destination itself).
        if let Some(r) = self.redirects6.iter().find(|r| r.dst == dst) {
            return Some(NextHop6::Neighbour(r.next_hop));
        }
        self.routers6.first().map(|&(r, _)| NextHop6::Neighbour(r))
    }

    /// The MTU of the path to `dst`: the link's, or less if a Packet Too
    /// Big taught it (RFC 8201; never below 1280).
    pub(crate) fn path_mtu6(&self, now: Instant, dst: Ipv6Addr) -> usize {
        let link = self.ra_mtu6.map_or(self.mtu, |m| m.min(self.mtu));
        match self.pmtu.get(now, dst) {
            Some(m) => m.min(link),
            None => link,
        }
    }

    /// Send one IPv6 packet carrying `payload`; larger than the path MTU
    /// it goes in fragments (RFC 8200 4.5: the source fragments, with a
    /// Fragment header after the fixed header since the engine adds no
    /// other extension header to a packet it may fragment). More than
    /// 65535 bytes is `TooLarge`.
    pub(crate) fn send_ip6(
        &mut self,
        now: Instant,
        c: &mut Counters,
        out: Ip6Out,
        payload: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        let ip6 = &mut c.ip6;
        ip6.OutRequests += 1;
        let Some(hop) = self.route6(out.dst) else {
            ip6.OutNoRoutes += 1;
            return Err(TxError::NoRoute);
        };
        if payload.len() > usize::from(u16::MAX) {
            ip6.OutDiscards += 1;
            ip6.FragFails += 1;
            return Err(TxError::TooLarge);
        }
        if out.dst.is_multicast() {
            ip6.OutMcastPkts += 1;
        }
        let mtu = self.path_mtu6(now, out.dst);
        if IPV6_HEADER_LEN + payload.len() <= mtu {
            self.emit_ip6(&out, payload);
            self.transmit6(now, hop, &mut c.icmp6, &mut c.nd, &mut c.link, tx);
            return Ok(());
        }
        // Each fragment but the last carries a multiple of 8 octets
        // (RFC 8200 4.5); the MTU is at least 1280, so there is room.
        let per = mtu.saturating_sub(IPV6_HEADER_LEN + FRAGMENT_HEADER_LEN) & !7;
        if per == 0 {
            c.ip6.OutDiscards += 1;
            c.ip6.FragFails += 1;
            return Err(TxError::TooLarge);
        }
        let ident = self.frag6_ident(out.src, out.dst);
        let frag_out = Ip6Out {
            next_header: IpProtocol::IPV6_FRAG,
            ..out
        };
        let mut offset = 0usize;
        for chunk in payload.chunks(per) {
            let more = offset + chunk.len() < payload.len();
            let fh = Ipv6FragmentRepr {
                next_header: out.next_header,
                frag_offset: u16::try_from(offset).unwrap_or(0),
                more_frags: more,
                ident,
            };
            self.emit_ip6_with(&frag_out, FRAGMENT_HEADER_LEN + chunk.len(), |b| {
                let (h, d) = b.split_at_mut(FRAGMENT_HEADER_LEN);
                let _ = fh.emit(h);
                d.copy_from_slice(chunk);
            });
            self.transmit6(now, hop, &mut c.icmp6, &mut c.nd, &mut c.link, tx);
            c.ip6.FragCreates += 1;
            offset += chunk.len();
        }
        c.ip6.FragOKs += 1;
        Ok(())
    }

    /// RFC 7739 5: an unpredictable Fragment Identification (a keyed hash
    /// of the addresses and a counter, as RFC 7739 5.3 describes).
    fn frag6_ident(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> u32 {
        use std::hash::{BuildHasher, Hasher};
        self.frag6_seq = self.frag6_seq.wrapping_add(1);
        let mut h = self.frag6_key.build_hasher();
        h.write(&src.octets());
        h.write(&dst.octets());
        h.write_u64(self.frag6_seq);
        h.finish() as u32
    }

    /// [`Iface::emit_ip6`] with the payload written by `fill`.
    fn emit_ip6_with(&mut self, out: &Ip6Out, len: usize, fill: impl FnOnce(&mut [u8])) {
        self.start_frame_overwritten(IPV6_HEADER_LEN + len);
        EthernetFrame::new_unchecked(self.eth_mut()).set_ethertype(EtherType::Ipv6);
        let repr = Ipv6Repr {
            src: out.src,
            dst: out.dst,
            next_header: out.next_header,
            payload_len: len,
            hop_limit: out.hop_limit,
            traffic_class: 0,
            flow_label: 0,
        };
        let ip_buf = self.ip_buf();
        let (hdr, body) = ip_buf.split_at_mut(IPV6_HEADER_LEN);
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut hdr[..]));
        if let Some(b) = body.get_mut(..len) {
            fill(b);
        }
    }

    fn emit_ip6(&mut self, out: &Ip6Out, payload: &[u8]) {
        self.start_frame(IPV6_HEADER_LEN + payload.len());
        EthernetFrame::new_unchecked(self.eth_mut()).set_ethertype(EtherType::Ipv6);
        let repr = Ipv6Repr {
            src: out.src,
            dst: out.dst,
            next_header: out.next_header,
            payload_len: payload.len(),
            hop_limit: out.hop_limit,
            traffic_class: 0,
            flow_label: 0,
        };
        let ip_buf = self.ip_buf();
        let (hdr, body) = ip_buf.split_at_mut(IPV6_HEADER_LEN);
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut hdr[..]));
        body.copy_from_slice(payload);
    }

    /// Hand the IPv6 frame in the scratch buffer to the link, resolving
    /// the neighbour (RFC 4861 7.2.2: queue the packet and send a Neighbor
    /// Solicitation) when its link-layer address is not known.
    fn transmit6(
        &mut self,
        now: Instant,
        hop: NextHop6,
        icmp6: &mut Icmp6Counters,
        nd: &mut LinkCounters,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let target = match hop {
            NextHop6::Multicast(mac) => mac,
            NextHop6::Neighbour(ip) => match self.nd.lookup(now, ip) {
                Lookup::Found(mac) => mac,
                Lookup::Missing => {
                    let head = self.frame.get(..self.frame_len).unwrap_or(&[]);
                    let frame = take_whole(head, &mut self.tx_owned.cur_ext);
                    if self.nd.enqueue(now, ip, &frame, nd) {
                        let req = ArpRequest {
                            target: ip,
                            unicast: None,
                        };
                        self.send_ns(req, icmp6, link, tx);
                    }
                    return;
                }
            },
        };
        EthernetFrame::new_unchecked(self.eth_mut()).set_dst_addr(target);
        link.OutFrames += 1;
        if !self.tx_owned.cur_ext.is_empty() {
            link.OutZeroCopyFrames += 1;
        }
        self.emit_scratch(tx);
    }

    /// Send a Neighbor Solicitation for `req.target`: to its
    /// solicited-node group, or unicast to the cached MAC when re-validating
    /// (RFC 4861 7.2.2 / 7.3.3), with our link-layer address (built on the
    /// stack, no allocation).
    pub(crate) fn send_ns(
        &mut self,
        req: ArpRequest<Ipv6Addr>,
        icmp6: &mut Icmp6Counters,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let (dst, mac) = match req.unicast {
            Some(mac) => (req.target, mac),
            None => {
                let g = solicited_node(req.target);
                (g, ipv6_multicast_mac(g))
            }
        };
        let src = self.source6(req.target);
        let mut opts = [0u8; 8];
        let mac_bytes = self.mac.0;
        if NdiscOption::SourceLinkLayerAddr(&mac_bytes)
            .emit(&mut opts)
            .is_err()
        {
            return;
        }
        let Ok(options) = NdiscOptions::new_checked(&opts) else {
            return;
        };
        let msg = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target: req.target,
            options,
        });
        self.send_nd(src, dst, mac, &msg, link, tx);
        icmp6.OutMsgs += 1;
        icmp6.OutNeighborSolicits += 1;
    }

    /// Send a Neighbor Advertisement for our address `target` to `dst`
    /// (at `mac`) with our link-layer address (RFC 4861 7.2.4).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_na(
        &mut self,
        target: Ipv6Addr,
        dst: Ipv6Addr,
        mac: MacAddr,
        solicited: bool,
        icmp6: &mut Icmp6Counters,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let mut opts = [0u8; 8];
        let mac_bytes = self.mac.0;
        if NdiscOption::TargetLinkLayerAddr(&mac_bytes)
            .emit(&mut opts)
            .is_err()
        {
            return;
        }
        let Ok(options) = NdiscOptions::new_checked(&opts) else {
            return;
        };
        // Not a router; "Override flag SHOULD be set" for an address of
        // ours that is not anycast; Solicited when answering a unicast-
        // sourced solicitation.
        let flags = if solicited {
            na_flags::SOLICITED | na_flags::OVERRIDE
        } else {
            na_flags::OVERRIDE
        };
        let msg = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags,
            target,
            options,
        });
        self.send_nd(target, dst, mac, &msg, link, tx);
        icmp6.OutMsgs += 1;
        icmp6.OutNeighborAdvertisements += 1;
    }

    /// Emit a Neighbor Discovery message (hop limit 255, RFC 4861 7.1)
    /// straight to `mac`: ND never waits for ND.
    pub(crate) fn send_nd(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        mac: MacAddr,
        msg: &Icmpv6Repr<'_>,
        link: &mut LinkCounters,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        // NS/NA with one 8-byte option: 32 bytes.
        let mut body = [0u8; 32];
        let len = msg.buffer_len();
        let Some(b) = body.get_mut(..len) else {
            return;
        };
        msg.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut b[..]));
        let out = Ip6Out {
            src,
            dst,
            next_header: IpProtocol::ICMPV6,
            hop_limit: 255,
        };
        self.emit_ip6(&out, &body[..len]);
        EthernetFrame::new_unchecked(self.eth_mut()).set_dst_addr(mac);
        link.OutFrames += 1;
        self.emit_scratch(tx);
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
        self.emit_copy(buf, tx);
    }
}
