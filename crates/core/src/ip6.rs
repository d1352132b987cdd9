//! IPv6 input (RFC 8200), Neighbor Discovery for addresses (RFC 4861:
//! solicitations answered, advertisements learned, the neighbour cache of
//! `arp.rs` used for sending), ICMPv6 echo and errors (RFC 4443) and UDP
//! over IPv6. Counters carry Linux's `/proc/net/snmp6` names.

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

use ustack_wire::ethernet::MacAddr;
use ustack_wire::icmpv6::{
    DstUnreachable, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, ParamProblem, ICMPV6_ERROR_MAX_LEN,
    ICMPV6_HEADER_LEN,
};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Cidr, Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use ustack_wire::ipv6ext::{
    option_type, ChainError, ChainItem, ChainLimits, ExtHeaderKind, Ipv6HeaderChain,
    UnknownOptionAction,
};
use ustack_wire::ndisc::{na_flags, NdiscOptions, NdiscRepr};
use ustack_wire::Error as WireError;

use crate::error::{BindError, UdpError};
use crate::iface::{ipv6_multicast_mac, Ip6Out, TxError, DEFAULT_HOP_LIMIT};
use crate::ip6_frag::Icmp6Report;
use crate::stack::Stack;
use crate::time::Instant;
use crate::udp::{Deliver, UdpHandle, UdpStatus, UdpTable};

/// Most IPv6 addresses one interface holds (link-local included).
pub const MAX_IPV6_ADDRESSES: usize = 16;

/// The all-nodes multicast group (RFC 4291 2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Why an address could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv6AddrError {
    /// Multicast, unspecified, loopback or IPv4-mapped: not an interface
    /// address.
    Invalid,
    /// Already configured.
    Exists,
    /// [`MAX_IPV6_ADDRESSES`] reached.
    Full,
}

impl std::fmt::Display for Ipv6AddrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ipv6AddrError::Invalid => "not a unicast interface address",
            Ipv6AddrError::Exists => "address already configured",
            Ipv6AddrError::Full => "too many IPv6 addresses",
        })
    }
}

impl std::error::Error for Ipv6AddrError {}

/// An ICMPv6 error to send about a received packet.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Icmp6Err {
    Unreachable(DstUnreachable),
    /// Parameter Problem with the offset of the offending octet.
    Param(ParamProblem, u32),
    /// Time Exceeded, fragment reassembly time exceeded (code 1).
    FragTimeExceeded,
}

/// RFC 4443 2.4 (e.1): whether `packet` carries an ICMPv6 error message
/// (or an ICMPv6 message whose type cannot be read), found past any
/// extension headers as Linux's `is_ineligible` finds it
/// (`ipv6_skip_exthdr`): an error behind a Destination Options or Routing
/// header is still an error, and answering it could start an error storm
/// between two nodes.
fn is_icmp6_error(ip: &Ipv6Repr, packet: &[u8]) -> bool {
    let rest = packet.get(IPV6_HEADER_LEN..).unwrap_or(&[]);
    for item in Ipv6HeaderChain::new(ip.next_header, rest, ChainLimits::default()) {
        if let Ok(ChainItem::Upper {
            protocol: IpProtocol::ICMPV6,
            offset,
        }) = item
        {
            return packet.get(offset).is_none_or(|&t| t < 128);
        }
    }
    false
}

impl Stack {
    /// Add a static IPv6 address (and its on-link prefix). The link-local
    /// address formed from the MAC (EUI-64) is always there. Static
    /// addresses are usable at once (no duplicate address detection, as
    /// Linux's `nodad`) unless [`Stack::set_ipv6_host`] turned DAD on:
    /// then the address is tentative until detection ends.
    pub fn add_ipv6_address(&mut self, cidr: Ipv6Cidr) -> Result<(), Ipv6AddrError> {
        let a = cidr.address;
        let mapped = a.to_ipv4_mapped().is_some();
        if a.is_multicast() || a.is_unspecified() || a.is_loopback() || mapped {
            return Err(Ipv6AddrError::Invalid);
        }
        if self.iface.has_addr6(a) || self.iface.tentative6.iter().any(|c| c.address == a) {
            return Err(Ipv6AddrError::Exists);
        }
        if self.iface.addrs6.len() + self.iface.tentative6.len() >= MAX_IPV6_ADDRESSES {
            return Err(Ipv6AddrError::Full);
        }
        if self.dad_enabled() {
            self.start_dad(self.last_now, cidr);
            return Ok(());
        }
        self.iface.addrs6.push(cidr);
        Ok(())
    }

    /// Our IPv6 addresses, the link-local one first.
    pub fn ipv6_addresses(&self) -> &[Ipv6Cidr] {
        &self.iface.addrs6
    }

    /// The MAC currently cached for the IPv6 neighbour `ip`, if resolved.
    pub fn neighbour6(&self, now: Instant, ip: Ipv6Addr) -> Option<MacAddr> {
        self.iface.nd.peek(now, ip)
    }

    // ------------------------------------------------------------------
    // Receive path
    // ------------------------------------------------------------------

    pub(crate) fn receive_ipv6(&mut self, now: Instant, bytes: &[u8], tx: &mut dyn FnMut(&[u8])) {
        self.counters.ip6.InReceives += 1;
        self.input_ipv6(now, bytes, false, tx);
    }

    /// The receive path proper; `reassembled`: `bytes` is a datagram
    /// rebuilt from fragments (`ip6_frag.rs`).
    pub(crate) fn input_ipv6(
        &mut self,
        now: Instant,
        bytes: &[u8],
        reassembled: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let c = &mut self.counters.ip6;
        let pkt = match Ipv6Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(_) => {
                if bytes.len() >= IPV6_HEADER_LEN {
                    c.InTruncatedPkts += 1;
                } else {
                    c.InHdrErrors += 1;
                }
                return;
            }
        };
        let Ok(ip) = Ipv6Repr::parse(&pkt) else {
            c.InHdrErrors += 1;
            return;
        };
        // The packet without link-layer padding.
        let packet = bytes
            .get(..IPV6_HEADER_LEN + ip.payload_len)
            .unwrap_or(bytes);
        if ip.dst.is_multicast() {
            c.InMcastPkts += 1;
        }
        if !self.iface.accepts6(ip.dst) && !crate::addr_services::accepts6(&self.services, ip.dst) {
            // RFC 8200 / RFC 4291: not ours and we do not forward. A group
            // we have not joined is dropped silently, as Linux does
            // (`ip6_mc_input`: counted in InMcastPkts only): on a TAP every
            // neighbour's MLD reports, solicitations and the like reach us,
            // which a NIC's multicast filter would have kept away, and are
            // no error.
            if !ip.dst.is_multicast() {
                c.InAddrErrors += 1;
            }
            return;
        }
        // RFC 4291 2.7: "Multicast addresses must not be used as source
        // addresses"; our own address coming back is a loop.
        if ip.src.is_multicast() || self.iface.has_addr6(ip.src) || ip.src.is_loopback() {
            c.InAddrErrors += 1;
            return;
        }
        let chain = Ipv6HeaderChain::from_packet(&pkt, ChainLimits::default());
        let mut upper = None;
        // A Fragment header was met (or this is a reassembly): RFC 6980
        // for Neighbor Discovery.
        let mut fragmented = reassembled;
        for item in chain {
            match item {
                Ok(ChainItem::Ext(h)) => match h.kind {
                    ExtHeaderKind::HopByHop | ExtHeaderKind::DestinationOptions => {
                        let Some(opts) = h.options() else { continue };
                        for o in opts {
                            let Ok(o) = o else {
                                // An option running past its header.
                                self.counters.ip6.InHdrErrors += 1;
                                return;
                            };
                            // Pad1, PadN and Router Alert (RFC 2711, for
                            // MLD) are known; the rest is acted on as the
                            // option type's two high bits say (RFC 8200 4.2).
                            if matches!(
                                o.option_type,
                                option_type::PAD1 | option_type::PADN | option_type::ROUTER_ALERT
                            ) {
                                continue;
                            }
                            let report = match o.action() {
                                UnknownOptionAction::Skip => continue,
                                UnknownOptionAction::Discard => false,
                                UnknownOptionAction::DiscardAndReport => true,
                                UnknownOptionAction::DiscardAndReportUnlessMulticast => {
                                    !ip.dst.is_multicast()
                                }
                            };
                            self.counters.ip6.InHdrErrors += 1;
                            if report {
                                let ptr = h.option_pointer(&o) as u32;
                                let err = Icmp6Err::Param(ParamProblem::UnrecognizedOption, ptr);
                                self.send_icmp6_error(now, &ip, packet, err, true, tx);
                            }
                            return;
                        }
                    }
                    ExtHeaderKind::Routing => {
                        let Some(r) = h.routing() else {
                            self.counters.ip6.InHdrErrors += 1;
                            return;
                        };
                        // RFC 8200 4.4: with Segments Left zero, "ignore the
                        // Routing header"; otherwise an unrecognised type
                        // (type 0 included, RFC 5095) is a Parameter
                        // Problem code 0 at the Routing Type field.
                        if r.segments_left != 0 {
                            self.counters.ip6.InHdrErrors += 1;
                            let ptr = (h.offset + 2) as u32;
                            let err = Icmp6Err::Param(ParamProblem::ErroneousHeaderField, ptr);
                            self.send_icmp6_error(now, &ip, packet, err, false, tx);
                            return;
                        }
                    }
                    ExtHeaderKind::Fragment => {
                        let Some(f) = h.fragment() else {
                            self.counters.ip6.InHdrErrors += 1;
                            return;
                        };
                        // RFC 6946: an atomic fragment is processed as a
                        // whole packet; others go to reassembly
                        // (`ip6_frag.rs`), once: a fragment inside a
                        // reassembled datagram is dropped.
                        fragmented = true;
                        if !f.is_atomic() {
                            if reassembled {
                                self.counters.ip6.ReasmFails += 1;
                                return;
                            }
                            self.receive_fragment6(now, &ip, packet, h.offset, f, tx);
                            return;
                        }
                    }
                    ExtHeaderKind::Authentication | ExtHeaderKind::Uniform(_) => {}
                },
                Ok(ChainItem::Upper { protocol, offset }) => upper = Some((protocol, offset)),
                Ok(ChainItem::FragmentData { .. }) => {
                    self.counters.ip6.ReasmFails += 1;
                    return;
                }
                Err(ChainError::UnknownHeader { pointer, .. }) => {
                    // RFC 8200 4: "discard the packet and send an ICMP
                    // Parameter Problem message ... Code value of 1".
                    self.counters.ip6.InUnknownProtos += 1;
                    let err = Icmp6Err::Param(ParamProblem::UnrecognizedNextHeader, pointer as u32);
                    self.send_icmp6_error(now, &ip, packet, err, false, tx);
                    return;
                }
                Err(ChainError::HopByHopNotFirst { pointer }) => {
                    // Linux counts it as an unknown protocol: no handler
                    // takes Next Header 0 past the fixed header.
                    self.counters.ip6.InUnknownProtos += 1;
                    let err = Icmp6Err::Param(ParamProblem::UnrecognizedNextHeader, pointer as u32);
                    self.send_icmp6_error(now, &ip, packet, err, false, tx);
                    return;
                }
                Err(ChainError::Truncated { .. }) => {
                    self.counters.ip6.InTruncatedPkts += 1;
                    return;
                }
                // Bounded walk: more headers than any real packet carries.
                Err(ChainError::TooManyHeaders | ChainError::TooLong) => {
                    self.counters.ip6.InHdrErrors += 1;
                    return;
                }
            }
        }
        let Some((protocol, offset)) = upper else {
            self.counters.ip6.InHdrErrors += 1;
            return;
        };
        let body = packet.get(offset..).unwrap_or(&[]);
        // A GSO type in the virtio-net header that does not match the
        // transport (TCP GSO on UDP, USO on TCP, either on anything else)
        // is a bad header, as for IPv4 (`Stack::deliver`).
        let gso_mismatch = match protocol {
            IpProtocol::Tcp => self.rx_udp_gso.is_some(),
            IpProtocol::Udp => self.rx_gso_size.is_some(),
            _ => self.rx_gso_size.is_some() || self.rx_udp_gso.is_some(),
        };
        if gso_mismatch {
            self.counters.link.InVnetErrors += 1;
            return;
        }
        match protocol {
            IpProtocol::ICMPV6 => {
                self.counters.ip6.InDelivers += 1;
                self.receive_icmpv6(now, &ip, packet, body, fragmented, tx);
            }
            IpProtocol::Udp => {
                self.counters.ip6.InDelivers += 1;
                self.receive_udp6(now, &ip, packet, body, tx);
            }
            // No Next Header (59): nothing to deliver.
            IpProtocol::IPV6_NO_NEXT => {}
            IpProtocol::Tcp => {
                // TCP is unicast only (Linux `tcp_v6_rcv` drops what is not
                // PACKET_HOST): no answer, no RST from a group address.
                if ip.dst.is_multicast() {
                    self.counters.ip6.InAddrErrors += 1;
                    return;
                }
                self.counters.ip6.InDelivers += 1;
                self.receive_tcp6(now, &ip, body, tx);
            }
            _ => self.counters.ip6.InUnknownProtos += 1,
        }
    }

    fn receive_icmpv6(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        packet: &[u8],
        body: &[u8],
        fragmented: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let c = &mut self.counters.icmp6;
        c.InMsgs += 1;
        let Ok(pkt) = Icmpv6Packet::new_checked(body) else {
            c.InErrors += 1;
            return;
        };
        let repr = match Icmpv6Repr::parse(&pkt, &ip.src, &ip.dst, true) {
            Ok(r) => r,
            // RFC 4443 2.4 (b)/(c): unknown informational messages are
            // dropped; unknown errors have no upper layer to go to here.
            Err(WireError::Unsupported) => return,
            Err(e) => {
                if e == WireError::Checksum {
                    c.InCsumErrors += 1;
                } else if matches!(
                    pkt.msg_type(),
                    Icmpv6Message::RouterSolicit
                        | Icmpv6Message::RouterAdvert
                        | Icmpv6Message::NeighborSolicit
                        | Icmpv6Message::NeighborAdvert
                        | Icmpv6Message::Redirect
                ) {
                    // RFC 4861 6.1.1/6.1.2/7.1.1/7.1.2/8.1: code, length,
                    // an option running past the end or of length zero.
                    self.counters.nd.ArpInvalid += 1;
                }
                c.InErrors += 1;
                return;
            }
        };
        match repr {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                c.InEchos += 1;
                // Transparent mode: the application answers (or relays).
                if self.transparent_echo_request6(ip, ident, seq_no, data) {
                    return;
                }
                // RFC 4443 4.2: "An Echo Reply SHOULD be sent in response to
                // an Echo Request message sent to an IPv6 multicast
                // address. The source address of the reply MUST be a
                // unicast address belonging to the interface" (Linux
                // `icmp_echo_ignore_multicast` = 0 answers).
                let src = if ip.dst.is_multicast() {
                    self.iface.source6(ip.src)
                } else {
                    ip.dst
                };
                let reply = Icmpv6Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                if self.send_icmp6(now, src, ip.src, &reply, tx).is_ok() {
                    self.counters.icmp6.OutEchoReplies += 1;
                }
            }
            Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                c.InEchoReplies += 1;
                self.record_echo6(now, ip.src, ip.hop_limit, ident, seq_no, data.len());
            }
            Icmpv6Repr::DstUnreachable {
                reason,
                header,
                data,
            } => {
                c.InDestUnreachs += 1;
                let r = Icmp6Report::Unreachable(reason);
                self.icmp6_error_to_transport(now, r, &header, data);
            }
            Icmpv6Repr::PacketTooBig { mtu, header, data } => {
                c.InPktTooBigs += 1;
                let r = Icmp6Report::PacketTooBig(mtu);
                self.icmp6_error_to_transport(now, r, &header, data);
            }
            Icmpv6Repr::TimeExceeded { header, data, .. } => {
                c.InTimeExcds += 1;
                let r = Icmp6Report::TimeExceeded;
                self.icmp6_error_to_transport(now, r, &header, data);
            }
            Icmpv6Repr::ParamProblem { header, data, .. } => {
                c.InParmProblems += 1;
                let r = Icmp6Report::ParamProblem;
                self.icmp6_error_to_transport(now, r, &header, data);
            }
            Icmpv6Repr::Mld(m) => match pkt.msg_type() {
                Icmpv6Message::MldQuery => {
                    c.InGroupMembQueries += 1;
                    self.receive_mld(now, ip, &m);
                }
                _ => c.InMLDv2Reports += 1,
            },
            Icmpv6Repr::Ndisc(nd) => self.receive_ndisc(now, ip, packet, &nd, fragmented, tx),
        }
    }

    fn receive_ndisc(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        _packet: &[u8],
        nd: &NdiscRepr<'_>,
        fragmented: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let c = &mut self.counters.icmp6;
        match nd {
            NdiscRepr::RouterSolicit { .. } => c.InRouterSolicits += 1,
            NdiscRepr::RouterAdvert { .. } => c.InRouterAdvertisements += 1,
            NdiscRepr::Redirect { .. } => c.InRedirects += 1,
            NdiscRepr::NeighborSolicit { .. } => c.InNeighborSolicits += 1,
            NdiscRepr::NeighborAdvert { .. } => c.InNeighborAdvertisements += 1,
        }
        let ndc = &mut self.counters.nd;
        // RFC 4861 6.1.1/6.1.2/7.1.1/7.1.2/8.1, for every message: "The IP
        // Hop Limit field has a value of 255" (it was not forwarded, so it
        // comes from the link) — code and lengths were checked by the
        // parse. RFC 6980 5: "A node MUST silently ignore any IPv6 packets
        // that contain ND messages and that are fragmented" (Linux
        // `ndisc_suppress_frag_ndisc`, atomic fragments included).
        if ip.hop_limit != 255 || fragmented {
            ndc.ArpInvalid += 1;
            return;
        }
        match nd {
            NdiscRepr::RouterSolicit { options } => {
                self.receive_rs(now, ip, *options, tx);
                return;
            }
            NdiscRepr::RouterAdvert { .. } => {
                self.receive_ra(now, ip, nd);
                return;
            }
            NdiscRepr::Redirect { .. } => {
                self.receive_redirect(now, ip, nd);
                return;
            }
            _ => {}
        }
        let ndc = &mut self.counters.nd;
        match *nd {
            NdiscRepr::NeighborSolicit { target, options } => {
                ndc.ArpInRequests += 1;
                let sll = options.source_ll_addr();
                // "Target Address is not a multicast address"; from the
                // unspecified address (DAD), "the IP destination address is
                // a solicited-node multicast address" and "there is no
                // source link-layer address option".
                if target.is_multicast()
                    || (ip.src.is_unspecified()
                        && (sll.is_some() || ip.dst != solicited_node(target)))
                {
                    ndc.ArpInvalid += 1;
                    return;
                }
                let sll_mac = match sll {
                    Some(b) => match ustack_wire::ndisc::NdiscOption::mac(b) {
                        Some(m) if m.is_unicast() => Some(m),
                        _ => {
                            ndc.ArpInvalid += 1;
                            return;
                        }
                    },
                    None => None,
                };
                // A tentative address of ours (RFC 4862 5.4.3).
                if self.dad_ns(ip, target) {
                    return;
                }
                let ndc = &mut self.counters.nd;
                if !self.iface.has_addr6(target) {
                    // Not one of ours: nothing to answer (we proxy nothing).
                    return;
                }
                if ip.src.is_unspecified() {
                    // RFC 4861 7.2.4: answer a DAD probe for our address to
                    // all-nodes, Solicited clear (someone is trying to take
                    // it; our address stays ours).
                    ndc.ArpConflicts += 1;
                    let mac = ipv6_multicast_mac(ALL_NODES);
                    let (icmp6, link) = (&mut self.counters.icmp6, &mut self.counters.link);
                    self.iface
                        .send_na(target, ALL_NODES, mac, false, icmp6, link, tx);
                    return;
                }
                // RFC 4861 7.2.3: the source link-layer address creates or
                // updates the sender's entry (Linux `neigh_update`).
                if let Some(mac) = sll_mac {
                    let learned = self
                        .iface
                        .nd
                        .learn_nd(now, ip.src, mac, true, false, true, ndc);
                    if let Some(queue) = learned {
                        self.iface
                            .flush_queue(queue, mac, &mut self.counters.link, tx);
                    }
                }
                // "send a Neighbor Advertisement ... to the source address
                // of the solicitation", Solicited and Override set.
                let dst_mac = match sll_mac.or_else(|| self.iface.nd.peek(now, ip.src)) {
                    Some(m) => m,
                    None => {
                        // Unicast NS without the option and no cache entry:
                        // answering needs resolution first (RFC 4861 7.2.4).
                        // Send through the resolving path.
                        self.send_na_resolving(now, target, ip.src, tx);
                        return;
                    }
                };
                let (icmp6, link) = (&mut self.counters.icmp6, &mut self.counters.link);
                self.iface
                    .send_na(target, ip.src, dst_mac, true, icmp6, link, tx);
            }
            NdiscRepr::NeighborAdvert {
                flags,
                target,
                options,
            } => {
                ndc.ArpInReplies += 1;
                // "Target Address is not a multicast address"; "If the IP
                // Destination Address is a multicast address the Solicited
                // flag is zero."
                if target.is_multicast()
                    || (ip.dst.is_multicast() && flags & na_flags::SOLICITED != 0)
                {
                    ndc.ArpInvalid += 1;
                    return;
                }
                if self.dad_na(target) {
                    return;
                }
                let ndc = &mut self.counters.nd;
                if self.iface.has_addr6(target) {
                    // Someone else advertises our address.
                    ndc.ArpConflicts += 1;
                    return;
                }
                let tll = options
                    .target_ll_addr()
                    .and_then(ustack_wire::ndisc::NdiscOption::mac);
                let Some(mac) = tll.filter(MacAddr::is_unicast) else {
                    // Without the option an advertisement only confirms an
                    // entry we have (RFC 4861 7.2.5).
                    if flags & na_flags::SOLICITED != 0 {
                        self.iface.nd.confirm(now, target);
                    }
                    return;
                };
                // RFC 4861 7.2.5: an advertisement never creates an entry;
                // it completes an INCOMPLETE one (and the queued packets
                // go), and updates or confirms a resolved one as its S and
                // O flags say.
                let solicited = flags & na_flags::SOLICITED != 0;
                let override_ = flags & na_flags::OVERRIDE != 0;
                let learned = self
                    .iface
                    .nd
                    .learn_nd(now, target, mac, false, solicited, override_, ndc);
                if let Some(queue) = learned {
                    self.iface
                        .flush_queue(queue, mac, &mut self.counters.link, tx);
                }
            }
            _ => {}
        }
    }

    /// Answer a solicitation whose sender's link-layer address we do not
    /// know: the advertisement waits in the neighbour queue.
    fn send_na_resolving(
        &mut self,
        now: Instant,
        target: Ipv6Addr,
        dst: Ipv6Addr,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let mut opts = [0u8; 8];
        let mac = self.iface.mac.0;
        if ustack_wire::ndisc::NdiscOption::TargetLinkLayerAddr(&mac)
            .emit(&mut opts)
            .is_err()
        {
            return;
        }
        let Ok(options) = NdiscOptions::new_checked(&opts) else {
            return;
        };
        let msg = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags: na_flags::SOLICITED | na_flags::OVERRIDE,
            target,
            options,
        });
        let mut buf = [0u8; 32];
        let len = msg.buffer_len();
        let Some(b) = buf.get_mut(..len) else { return };
        msg.emit(&target, &dst, &mut Icmpv6Packet::new_unchecked(&mut b[..]));
        let out = Ip6Out {
            src: target,
            dst,
            next_header: IpProtocol::ICMPV6,
            hop_limit: 255,
        };
        let c = &mut self.counters;
        if self.iface.send_ip6(now, c, out, b, tx).is_ok() {
            c.icmp6.OutMsgs += 1;
            c.icmp6.OutNeighborAdvertisements += 1;
        }
    }

    /// A TCP segment over IPv6: parsed and checksum-checked (the IPv6
    /// pseudo-header), then to the same demux as IPv4's (its connection,
    /// a listener, or a RST for a closed port). Counted in `Tcp` as Linux
    /// counts both families there.
    fn receive_tcp6(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        body: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let c = &mut self.counters.tcp;
        let Ok(pkt) = ustack_wire::tcp::TcpPacket::new_checked(body) else {
            c.InErrs += 1;
            return;
        };
        // A GSO super-frame counts as the segments it stands for (as
        // `receive_tcp` counts one over IPv4).
        let data = body.len().saturating_sub(pkt.header_len());
        c.InSegs += match self.rx_gso_size {
            Some(g) if g > 0 => data.div_ceil(g).max(1) as u64,
            _ => 1,
        };
        let seg = match ustack_wire::tcp::TcpRepr::parse(&pkt, ip.src, ip.dst, !self.rx_csum_ok) {
            Ok(s) => s,
            Err(e) => {
                if e == WireError::Checksum {
                    c.InCsumErrors += 1;
                }
                c.InErrs += 1;
                return;
            }
        };
        // A GSO super-frame from the link stands for segments of the size
        // its virtio-net header gives.
        let gso_size = self.rx_gso_size.unwrap_or(seg.payload.len());
        self.tcp_segment_input6(now, ip, &seg, gso_size, tx);
    }

    fn receive_udp6(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        packet: &[u8],
        body: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let c = &mut self.counters.udp6;
        let Ok(pkt) = ustack_wire::udp::UdpPacket::new_checked(body) else {
            c.InErrors += 1;
            return;
        };
        // RFC 8200 8.1: "IPv6 receivers must discard UDP packets containing
        // a zero checksum".
        if pkt.checksum() == 0 {
            c.InErrors += 1;
            return;
        }
        let repr = match ustack_wire::udp::UdpRepr::parse(&pkt, ip.src, ip.dst, !self.rx_csum_ok) {
            Ok(r) => r,
            Err(e) => {
                if e == WireError::Checksum {
                    c.InCsumErrors += 1;
                }
                c.InErrors += 1;
                return;
            }
        };
        let from = SocketAddrV6::new(ip.src, repr.src_port, 0, 0);
        if self.dhcp6_input(now, ip, repr.src_port, repr.dst_port, pkt.payload_ref(), tx) {
            return;
        }
        let data = pkt.payload_ref();
        // A USO super-datagram is delivered as the datagrams it stands for
        // (`size` bytes each, the last one perhaps shorter), as over IPv4.
        let size = match self.rx_udp_gso {
            Some(size) if size > 0 && !data.is_empty() => size,
            _ => data.len().max(1),
        };
        let mut taken = false;
        for d in data.chunks(size) {
            if !self.udp6_deliver(ip.dst, repr.dst_port, from, d) {
                break;
            }
            taken = true;
        }
        if data.is_empty() {
            taken = self.udp6_deliver(ip.dst, repr.dst_port, from, data);
        }
        if taken {
            return;
        }
        // Transparent mode: the catch-all socket takes the rest, a USO
        // super-datagram as the datagrams it stands for (as over IPv4).
        if data.is_empty() {
            taken = self.transparent_udp6_input(ip, repr.src_port, repr.dst_port, data);
        }
        for d in data.chunks(size) {
            taken |= self.transparent_udp6_input(ip, repr.src_port, repr.dst_port, d);
        }
        if taken {
            return;
        }
        self.counters.udp6.NoPorts += 1;
        // RFC 4443 3.1: port unreachable (code 4), not for multicast.
        let err = Icmp6Err::Unreachable(DstUnreachable::PortUnreachable);
        self.send_icmp6_error(now, ip, packet, err, false, tx);
    }

    // ------------------------------------------------------------------
    // ICMPv6 output
    // ------------------------------------------------------------------

    /// Build `repr` in the scratch buffer and send it from `src` to `dst`.
    pub(crate) fn send_icmp6(
        &mut self,
        now: Instant,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        repr: &Icmpv6Repr<'_>,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(repr.buffer_len(), 0);
        repr.emit(
            &src,
            &dst,
            &mut Icmpv6Packet::new_unchecked(&mut scratch[..]),
        );
        let out = Ip6Out {
            src,
            dst,
            next_header: IpProtocol::ICMPV6,
            hop_limit: DEFAULT_HOP_LIMIT,
        };
        let c = &mut self.counters;
        let r = self.iface.send_ip6(now, c, out, &scratch, tx);
        self.scratch = scratch;
        match r {
            Ok(()) => self.counters.icmp6.OutMsgs += 1,
            Err(_) => self.counters.icmp6.OutErrors += 1,
        }
        r
    }

    /// Send an ICMPv6 error about `packet` (the whole invoking packet)
    /// unless RFC 4443 2.4 (e) forbids it or the rate limit is exhausted.
    /// `to_multicast_ok`: the Parameter Problem code 2 case that is sent
    /// "regardless of whether or not the packet's Destination Address was a
    /// multicast address".
    pub(crate) fn send_icmp6_error(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        packet: &[u8],
        err: Icmp6Err,
        to_multicast_ok: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        // RFC 4443 2.4 (e): not in answer to "(e.1) An ICMPv6 error
        // message", (e.2/e.3) a packet to a multicast address (with the
        // exceptions above), (e.6) a packet whose source "does not uniquely
        // identify a single node" (unspecified, multicast).
        if ip.src.is_unspecified() || ip.src.is_multicast() {
            return;
        }
        if ip.dst.is_multicast() && !to_multicast_ok {
            return;
        }
        if is_icmp6_error(ip, packet) {
            return;
        }
        // RFC 4443 2.4 (f): rate-limited (a bucket apart from ICMPv4's).
        if !self.icmp6_bucket.take(now) {
            self.counters.icmp6.OutRateLimited += 1;
            return;
        }
        // "as much of invoking packet as possible without the ICMPv6
        // packet exceeding the minimum IPv6 MTU".
        let room = ICMPV6_ERROR_MAX_LEN - ICMPV6_HEADER_LEN - IPV6_HEADER_LEN;
        let rest = packet.get(IPV6_HEADER_LEN..).unwrap_or(&[]);
        let data = rest.get(..room).unwrap_or(rest);
        let repr = match err {
            Icmp6Err::Unreachable(reason) => Icmpv6Repr::DstUnreachable {
                reason,
                header: *ip,
                data,
            },
            Icmp6Err::Param(reason, pointer) => Icmpv6Repr::ParamProblem {
                reason,
                pointer,
                header: *ip,
                data,
            },
            Icmp6Err::FragTimeExceeded => Icmpv6Repr::TimeExceeded {
                reason: ustack_wire::icmpv6::TimeExceeded::FragReassemblyExceeded,
                header: *ip,
                data,
            },
        };
        let src = if ip.dst.is_multicast() {
            self.iface.source6(ip.src)
        } else {
            ip.dst
        };
        if self.send_icmp6(now, src, ip.src, &repr, tx).is_ok() {
            match err {
                Icmp6Err::Unreachable(_) => self.counters.icmp6.OutDestUnreachs += 1,
                Icmp6Err::Param(..) => self.counters.icmp6.OutParmProblems += 1,
                Icmp6Err::FragTimeExceeded => self.counters.icmp6.OutTimeExcds += 1,
            }
        }
    }

    // ------------------------------------------------------------------
    // UDP over IPv6
    // ------------------------------------------------------------------

    /// Offer a datagram to the socket bound to `port`; false = no socket.
    fn udp6_deliver(&mut self, dst: Ipv6Addr, port: u16, from: SocketAddrV6, data: &[u8]) -> bool {
        let limits = self.udp6.limits();
        let Some(sock) = self.udp6.lookup_mut(from, port, dst.is_multicast()) else {
            return false;
        };
        if !sock.local.ip().is_unspecified() && *sock.local.ip() != dst {
            return false;
        }
        let c = &mut self.counters.udp6;
        match sock.deliver(from, data, limits) {
            Deliver::Queued => {
                c.InDatagrams += 1;
                self.udp6.notify_port(port);
            }
            Deliver::QueueFull => {
                c.RcvbufErrors += 1;
                c.InErrors += 1;
            }
        }
        true
    }

    /// Bind a UDP socket over IPv6 (`port == 0` = ephemeral) to one of our
    /// addresses or `::`.
    pub fn udp6_bind(&mut self, local: SocketAddrV6) -> Result<UdpHandle, BindError> {
        if !local.ip().is_unspecified() && !self.iface.has_addr6(*local.ip()) {
            return Err(BindError::AddrNotAvailable);
        }
        self.udp6.bind(local)
    }

    /// Send one datagram to `remote` (the IPv6 pseudo-header checksum is
    /// always filled, RFC 8200 8.1). Larger than the path MTU it goes in
    /// fragments (`Iface::send_ip6`); more than 65535 bytes of UDP is
    /// `TooLarge`. The frames go out on the next `poll`.
    pub fn udp6_send_to(
        &mut self,
        now: Instant,
        h: UdpHandle,
        data: &[u8],
        remote: SocketAddrV6,
    ) -> Result<usize, UdpError> {
        let local = self.udp6.get(h)?.local;
        let dst = *remote.ip();
        if remote.port() == 0 || dst.is_unspecified() {
            return Err(UdpError::InvalidAddress);
        }
        let len = ustack_wire::udp::UDP_HEADER_LEN + data.len();
        if len > usize::from(u16::MAX) {
            return Err(UdpError::TooLarge);
        }
        if !self.txq.has_room(self.frames_bytes6(now, dst, len)) {
            self.counters.udp6.SndbufErrors += 1;
            return Err(UdpError::Exhausted);
        }
        let src = if local.ip().is_unspecified() {
            self.iface.source6(dst)
        } else {
            *local.ip()
        };
        if src.is_unspecified() {
            return Err(UdpError::NoRoute);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(len, 0);
        if let Some(p) = scratch.get_mut(ustack_wire::udp::UDP_HEADER_LEN..) {
            p.copy_from_slice(data);
        }
        let repr = ustack_wire::udp::UdpRepr {
            src_port: local.port(),
            dst_port: remote.port(),
        };
        repr.emit(
            &mut ustack_wire::udp::UdpPacket::new_unchecked(&mut scratch[..]),
            src,
            dst,
            data.len(),
            true,
        );
        let out = Ip6Out {
            src,
            dst,
            next_header: IpProtocol::Udp,
            hop_limit: DEFAULT_HOP_LIMIT,
        };
        let q = &mut self.txq;
        let c = &mut self.counters;
        let r = self
            .iface
            .send_ip6(now, c, out, &scratch, &mut |f| q.push(now, f));
        self.scratch = scratch;
        match r {
            Ok(()) => {
                self.counters.udp6.OutDatagrams += 1;
                Ok(data.len())
            }
            Err(TxError::NoRoute) => Err(UdpError::NoRoute),
            Err(TxError::TooLarge) => Err(UdpError::TooLarge),
        }
    }

    /// Receive one datagram (truncated to `buf`). `WouldBlock` when empty.
    pub fn udp6_recv_from(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddrV6), UdpError> {
        self.udp6.get_mut(h)?.recv(buf)
    }

    pub fn udp6_status(&self, h: UdpHandle) -> Result<UdpStatus<SocketAddrV6>, UdpError> {
        Ok(self.udp6.get(h)?.status())
    }

    /// Close the socket; the handle becomes invalid.
    pub fn udp6_close(&mut self, h: UdpHandle) {
        self.udp6.close(h);
    }

    /// Fix the peer of an IPv6 socket: filters incoming datagrams and
    /// enables sending without an address.
    pub fn udp6_connect(&mut self, h: UdpHandle, remote: SocketAddrV6) -> Result<(), UdpError> {
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(UdpError::InvalidAddress);
        }
        if self.iface.route6(*remote.ip()).is_none() {
            self.udp6.get(h)?;
            return Err(UdpError::NoRoute);
        }
        let s = self.udp6.get_mut(h)?;
        s.remote = Some(remote);
        s.pending_error = None;
        Ok(())
    }

    // ------------------------------------------------------------------
    // UDP of either family, with `SocketAddr`s (a handle names one
    // socket across both tables)
    // ------------------------------------------------------------------

    /// Bind a UDP socket of the address's family.
    pub fn udp_bind_addr(&mut self, local: SocketAddr) -> Result<UdpHandle, BindError> {
        match local {
            SocketAddr::V4(a) => self.udp_bind(a),
            SocketAddr::V6(a) => self.udp6_bind(a),
        }
    }

    /// The status of a socket of either family.
    pub fn udp_status_addr(&self, h: UdpHandle) -> Result<UdpStatus<SocketAddr>, UdpError> {
        if UdpTable::<SocketAddrV6>::owns(h) {
            let s = self.udp6.get(h)?.status();
            return Ok(UdpStatus {
                local: s.local.into(),
                remote: s.remote.map(SocketAddr::V6),
                can_recv: s.can_recv,
                pending_error: s.pending_error,
                recv_queue: s.recv_queue,
                recv_datagrams: s.recv_datagrams,
            });
        }
        let s = self.udp_status(h)?;
        Ok(UdpStatus {
            local: s.local.into(),
            remote: s.remote.map(SocketAddr::V4),
            can_recv: s.can_recv,
            pending_error: s.pending_error,
            recv_queue: s.recv_queue,
            recv_datagrams: s.recv_datagrams,
        })
    }

    /// Receive on a socket of either family.
    pub fn udp_recv_from_addr(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddr), UdpError> {
        if UdpTable::<SocketAddrV6>::owns(h) {
            return self
                .udp6_recv_from(h, buf)
                .map(|(n, a)| (n, SocketAddr::V6(a)));
        }
        self.udp_recv_from(h, buf)
            .map(|(n, a)| (n, SocketAddr::V4(a)))
    }

    /// Send on a socket of either family; the destination must be of the
    /// socket's family (IPv6 UDP sockets act as `IPV6_V6ONLY`: an
    /// IPv4-mapped destination is `NoRoute`).
    pub fn udp_send_to_addr(
        &mut self,
        now: Instant,
        h: UdpHandle,
        data: &[u8],
        remote: SocketAddr,
    ) -> Result<usize, UdpError> {
        match (UdpTable::<SocketAddrV6>::owns(h), remote) {
            // IPv6 UDP sockets are V6ONLY: no IPv4-mapped destinations
            // (Linux: ENETUNREACH).
            (true, SocketAddr::V6(r)) if r.ip().to_ipv4_mapped().is_some() => {
                Err(UdpError::NoRoute)
            }
            (true, SocketAddr::V6(r)) => self.udp6_send_to(now, h, data, r),
            (false, SocketAddr::V4(r)) => self.udp_send_to(now, h, data, r),
            _ => Err(UdpError::InvalidAddress),
        }
    }

    /// Connect a socket of either family (same family as the socket).
    pub fn udp_connect_addr(&mut self, h: UdpHandle, remote: SocketAddr) -> Result<(), UdpError> {
        match (UdpTable::<SocketAddrV6>::owns(h), remote) {
            (true, SocketAddr::V6(r)) if r.ip().to_ipv4_mapped().is_some() => {
                Err(UdpError::NoRoute)
            }
            (true, SocketAddr::V6(r)) => self.udp6_connect(h, r),
            (false, SocketAddr::V4(r)) => self.udp_connect(h, r),
            _ => Err(UdpError::InvalidAddress),
        }
    }

    /// Send on a connected socket of either family. A pending error is
    /// reported first (once).
    pub fn udp_send_addr(
        &mut self,
        now: Instant,
        h: UdpHandle,
        data: &[u8],
    ) -> Result<usize, UdpError> {
        if !UdpTable::<SocketAddrV6>::owns(h) {
            return self.udp_send(now, h, data);
        }
        let s = self.udp6.get_mut(h)?;
        let remote = s.remote.ok_or(UdpError::NotConnected)?;
        if let Some(e) = s.pending_error.take() {
            return Err(e);
        }
        self.udp6_send_to(now, h, data, remote)
    }
}
