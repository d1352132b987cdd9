//! IPv6 fragments in (RFC 8200 4.5 reassembly, with RFC 5722 overlaps,
//! RFC 6946 atomic fragments and RFC 7112 incomplete first fragments) and
//! ICMPv6 errors to the transport: Packet Too Big (RFC 8201, validated
//! against the connection as RFC 5927 asks for IPv4), destination
//! unreachable, time exceeded and parameter problem as Linux's
//! `tcp_v6_err`/`udpv6_err` report them.

use std::net::{Ipv6Addr, SocketAddrV6};

use ustack_wire::icmpv6::{DstUnreachable, ParamProblem, ICMPV6_ERROR_MAX_LEN, ICMPV6_HEADER_LEN};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{Ipv6Repr, IPV6_HEADER_LEN};
use ustack_wire::ipv6ext::{
    ChainError, ChainItem, ChainLimits, Ipv6FragmentRepr, Ipv6HeaderChain, FRAGMENT_HEADER_LEN,
};
use ustack_wire::tcp::SeqNum;

use crate::error::UdpError;
use crate::frag::{Head6, Key6, Reasm};
use crate::ip6::Icmp6Err;
use crate::pmtu::IPV6_MIN_MTU;
use crate::stack::Stack;
use crate::tcp::IcmpUnreachable;
use crate::time::Instant;

/// An ICMPv6 error about a packet we sent, as the transport sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Icmp6Report {
    Unreachable(DstUnreachable),
    PacketTooBig(u32),
    TimeExceeded,
    ParamProblem,
}

/// The smallest upper-layer header a first fragment must hold whole
/// (RFC 7112; Linux `ipv6_frag_thdr_truncated` counts the same).
fn upper_header_len(p: IpProtocol) -> usize {
    match p {
        IpProtocol::Tcp => 20,
        IpProtocol::Udp | IpProtocol::ICMPV6 => 8,
        _ => 0,
    }
}

/// Offset of the Next Header field that names the header at `at` (the
/// fixed header's, 6, or the first octet of the header before it).
fn next_header_field(packet: &[u8], at: usize) -> Option<usize> {
    if at == IPV6_HEADER_LEN {
        return Some(6);
    }
    let first = IpProtocol::from(*packet.get(6)?);
    let rest = packet.get(IPV6_HEADER_LEN..)?;
    for item in Ipv6HeaderChain::new(first, rest, ChainLimits::default()) {
        match item {
            Ok(ChainItem::Ext(h)) if h.offset + h.bytes.len() == at => return Some(h.offset),
            Ok(ChainItem::Ext(_)) => {}
            _ => return None,
        }
    }
    None
}

impl Stack {
    /// Frame bytes (virtio-net, Ethernet and IPv6 headers included) an IPv6
    /// payload of `len` bytes to `dst` takes, fragments counted.
    pub(crate) fn frames_bytes6(&self, now: Instant, dst: Ipv6Addr, len: usize) -> usize {
        let mtu = self.iface.path_mtu6(now, dst);
        let hdrs = 14 + IPV6_HEADER_LEN + self.iface.offload.hdr_len();
        if IPV6_HEADER_LEN + len <= mtu {
            return len + hdrs;
        }
        let per = (mtu.saturating_sub(IPV6_HEADER_LEN + FRAGMENT_HEADER_LEN) & !7).max(8);
        let n = len.div_ceil(per).max(1);
        len + n * (hdrs + FRAGMENT_HEADER_LEN)
    }

    /// The path MTU to an IPv6 destination learned from a Packet Too Big
    /// (RFC 8201), if one is still valid.
    pub fn path_mtu6(&self, now: Instant, dst: Ipv6Addr) -> Option<usize> {
        self.iface.pmtu.get(now, dst)
    }

    /// Bytes held by IPv6 reassembly.
    pub fn reassembly_memory6(&self) -> usize {
        self.reasm6.mem()
    }

    /// IPv6 datagrams being reassembled.
    pub fn reassembly_datagrams6(&self) -> usize {
        self.reasm6.len()
    }

    /// A fragment that is not atomic (its Fragment header at `frag_at`):
    /// the checks of RFC 8200 4.5 and RFC 7112, then the reassembly table;
    /// a completed datagram goes through the receive path again, without
    /// its Fragment header.
    pub(crate) fn receive_fragment6(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        packet: &[u8],
        frag_at: usize,
        f: Ipv6FragmentRepr,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        // A device offload that claims to have segmented a fragment is a
        // bad header, as for other non-TCP/UDP packets.
        if self.rx_gso_size.is_some() || self.rx_udp_gso.is_some() {
            self.counters.link.InVnetErrors += 1;
            return;
        }
        let Some(data) = packet.get(frag_at + FRAGMENT_HEADER_LEN..) else {
            self.counters.ip6.InHdrErrors += 1;
            return;
        };
        let unfrag = frag_at - IPV6_HEADER_LEN;
        let offset = usize::from(f.frag_offset);
        // RFC 8200 4.5: "If the length of a fragment ... is not a multiple
        // of 8 octets and the M flag of that fragment is 1, then that
        // fragment must be discarded and an ICMP Parameter Problem, Code
        // 0, message should be sent ... pointing to the Payload Length
        // field".
        if f.more_frags && (data.is_empty() || !data.len().is_multiple_of(8)) {
            self.counters.ip6.InHdrErrors += 1;
            let err = Icmp6Err::Param(ParamProblem::ErroneousHeaderField, 4);
            self.send_icmp6_error(now, ip, packet, err, false, tx);
            return;
        }
        // "If the length and offset of a fragment are such that the
        // Payload Length of the packet reassembled from that fragment would
        // exceed 65,535 octets ... pointing to the Fragment Offset field".
        let max_payload = usize::from(u16::MAX) - unfrag;
        if offset + data.len() > max_payload {
            self.counters.ip6.InHdrErrors += 1;
            let ptr = (frag_at + 2) as u32;
            let err = Icmp6Err::Param(ParamProblem::ErroneousHeaderField, ptr);
            self.send_icmp6_error(now, ip, packet, err, false, tx);
            return;
        }
        let mut first = None;
        if offset == 0 {
            // RFC 7112 / RFC 8200 4.5: "If the first fragment does not
            // include all headers through an Upper-Layer header, then that
            // fragment should be discarded and an ICMP Parameter Problem,
            // Code 3, message should be sent ... with the Pointer field
            // set to zero."
            let mut complete = false;
            for item in Ipv6HeaderChain::new(f.next_header, data, ChainLimits::default()) {
                match item {
                    Ok(ChainItem::Upper { protocol, offset }) => {
                        let at = offset - IPV6_HEADER_LEN;
                        complete = at + upper_header_len(protocol) <= data.len();
                    }
                    Err(ChainError::Truncated { .. }) => complete = false,
                    // Other faults are found again, and answered, when the
                    // whole datagram is walked.
                    Err(_) => complete = true,
                    Ok(_) => {}
                }
            }
            if !complete {
                self.counters.ip6.InHdrErrors += 1;
                let err = Icmp6Err::Param(ParamProblem::IncompleteHeaderChain, 0);
                self.send_icmp6_error(now, ip, packet, err, false, tx);
                return;
            }
            let Some(nh_field) = next_header_field(packet, frag_at) else {
                self.counters.ip6.InHdrErrors += 1;
                return;
            };
            // The unfragmentable part whole, and what an ICMPv6 time
            // exceeded may quote.
            let quote = ICMPV6_ERROR_MAX_LEN - ICMPV6_HEADER_LEN;
            let keep = packet.len().min(quote.max(frag_at + FRAGMENT_HEADER_LEN));
            first = Some(Head6 {
                header: *ip,
                packet: packet.get(..keep).unwrap_or(packet).to_vec(),
                frag_at,
                nh_field,
                next_header: f.next_header.into(),
            });
        }
        let key = Key6 {
            src: ip.src,
            dst: ip.dst,
            ident: f.ident,
        };
        let more = f.more_frags;
        let ctr = &mut self.counters.ip6;
        let r = self
            .reasm6
            .insert_frag(now, key, offset, more, data, max_payload, first, ctr);
        let Reasm::Complete(head, buf) = r else {
            return;
        };
        let Some(unfrag_bytes) = head.packet.get(..head.frag_at) else {
            return;
        };
        let mut whole = Vec::with_capacity(unfrag_bytes.len() + buf.len());
        whole.extend_from_slice(unfrag_bytes);
        whole.extend_from_slice(&buf);
        let payload_len = u16::try_from(whole.len() - IPV6_HEADER_LEN).unwrap_or(u16::MAX);
        if let Some(b) = whole.get_mut(head.nh_field) {
            *b = head.next_header;
        }
        if let Some(b) = whole.get_mut(4..6) {
            b.copy_from_slice(&payload_len.to_be_bytes());
        }
        // Checksum offload covers whole frames, not reassemblies.
        self.rx_csum_ok = false;
        self.input_ipv6(now, &whole, true, tx);
    }

    /// Reassembly timeouts: RFC 8200 4.5, "If insufficient fragments are
    /// received to complete reassembly of a packet within 60 seconds ...
    /// If the first fragment (i.e., the one with a Fragment Offset of
    /// zero) has been received, an ICMP Time Exceeded -- Fragment
    /// Reassembly Time Exceeded message should be sent".
    pub(crate) fn poll_reasm6(&mut self, now: Instant, tx: &mut dyn FnMut(&[u8])) {
        let mut expired = std::mem::take(&mut self.reasm6_expired);
        self.reasm6.poll(now, &mut self.counters.ip6, &mut expired);
        for h in expired.drain(..) {
            self.send_icmp6_error(
                now,
                &h.header,
                &h.packet,
                Icmp6Err::FragTimeExceeded,
                false,
                tx,
            );
        }
        self.reasm6_expired = expired;
    }

    pub(crate) fn reasm6_poll_at(&self) -> Option<Instant> {
        self.reasm6.poll_at()
    }

    /// An ICMPv6 error quoting `header` and `data` (the start of its
    /// payload): find the socket it is about and tell it.
    pub(crate) fn icmp6_error_to_transport(
        &mut self,
        now: Instant,
        report: Icmp6Report,
        header: &Ipv6Repr,
        data: &[u8],
    ) {
        // The quoted packet must be one we sent.
        if !self.iface.has_addr6(header.src) {
            return;
        }
        // Past any extension header (our own fragments carry one) to the
        // transport header; a non-first fragment names no port.
        let mut upper = None;
        for item in Ipv6HeaderChain::new(header.next_header, data, ChainLimits::default()) {
            if let Ok(ChainItem::Upper { protocol, offset }) = item {
                upper = Some((protocol, offset - IPV6_HEADER_LEN));
            }
        }
        let Some((protocol, at)) = upper else {
            return;
        };
        let Some(th) = data.get(at..) else { return };
        let (Some(sp), Some(dp)) = (th.get(0..2), th.get(2..4)) else {
            return;
        };
        let local_port = u16::from_be_bytes([sp[0], sp[1]]);
        let remote = SocketAddrV6::new(header.dst, u16::from_be_bytes([dp[0], dp[1]]), 0, 0);
        let local = SocketAddrV6::new(header.src, local_port, 0, 0);
        match protocol {
            IpProtocol::Udp => self.udp6_icmp_error(now, report, local, remote),
            IpProtocol::Tcp => {
                // The quoted sequence number is checked against the
                // connection (RFC 5927 4.1; Linux `tcp_v6_err`).
                let Some(&[a, b, c, d]) = th.get(4..8) else {
                    return;
                };
                let seq = SeqNum(u32::from_be_bytes([a, b, c, d]));
                self.tcp6_icmp_error(now, report, local, remote, seq);
            }
            _ => {
                // An echo of ours or another protocol: a Packet Too Big
                // still teaches the path (RFC 8201 4 asks the node to
                // reduce its estimate for the destination).
                if let Icmp6Report::PacketTooBig(mtu) = report {
                    self.learn_pmtu6(now, header.dst, mtu);
                }
            }
        }
    }

    fn learn_pmtu6(&mut self, now: Instant, dst: Ipv6Addr, mtu: u32) -> usize {
        let link_mtu = self.iface.mtu;
        self.iface.pmtu.update(now, dst, mtu, link_mtu)
    }

    /// Linux `udpv6_err`: a Packet Too Big about a socket of ours lowers
    /// the path MTU (later datagrams go in fragments that fit); errors
    /// reach a connected socket as `icmpv6_err_convert` says.
    fn udp6_icmp_error(
        &mut self,
        now: Instant,
        report: Icmp6Report,
        local: SocketAddrV6,
        remote: SocketAddrV6,
    ) {
        if let Icmp6Report::PacketTooBig(mtu) = report {
            // Some socket must own the port the packet came from.
            if self.udp6.lookup_mut(remote, local.port(), false).is_some()
                || self
                    .udp6
                    .lookup_connected_mut(local.port(), remote)
                    .is_some()
            {
                self.learn_pmtu6(now, *remote.ip(), mtu);
            }
            return;
        }
        let Some(sock) = self.udp6.lookup_connected_mut(local.port(), remote) else {
            return;
        };
        if sock.local.ip() != local.ip() && !sock.local.ip().is_unspecified() {
            return;
        }
        sock.pending_error = match report {
            Icmp6Report::Unreachable(DstUnreachable::PortUnreachable) => {
                Some(UdpError::ConnectionRefused)
            }
            _ => Some(UdpError::NoRoute),
        };
        self.udp6.notify_port(local.port());
    }

    /// Linux `tcp_v6_err`: the report must quote a sequence number in
    /// flight. Packet Too Big lowers the connection's MSS (the path MTU
    /// less 60, never below 1280 - 60) and retransmits what no longer
    /// fits, the other connections to the destination do the same, and
    /// every new one starts with it;
    /// port unreachable aborts an opening connection (ECONNREFUSED), the
    /// others are soft errors (EHOSTUNREACH) as for IPv4.
    fn tcp6_icmp_error(
        &mut self,
        now: Instant,
        report: Icmp6Report,
        local: SocketAddrV6,
        remote: SocketAddrV6,
        seq: SeqNum,
    ) {
        let kind = match report {
            Icmp6Report::PacketTooBig(mtu) => {
                let mtu = usize::try_from(mtu)
                    .unwrap_or(usize::MAX)
                    .clamp(IPV6_MIN_MTU, self.iface.mtu.max(IPV6_MIN_MTU));
                // The connection counts IPv4's 40 bytes of headers: give it
                // the IPv4 MTU with the same room for payload.
                let mtu4 = u16::try_from(mtu - 20).unwrap_or(u16::MAX);
                IcmpUnreachable::FragRequired { mtu: mtu4 }
            }
            Icmp6Report::Unreachable(DstUnreachable::PortUnreachable) => {
                IcmpUnreachable::PortUnreachable
            }
            Icmp6Report::Unreachable(DstUnreachable::NoRoute) => IcmpUnreachable::NetUnreachable,
            Icmp6Report::Unreachable(
                DstUnreachable::AdminProhibited
                | DstUnreachable::FailedPolicy
                | DstUnreachable::RejectRoute,
            ) => IcmpUnreachable::AdminProhibited,
            Icmp6Report::Unreachable(_) | Icmp6Report::TimeExceeded => {
                IcmpUnreachable::HostUnreachable
            }
            Icmp6Report::ParamProblem => IcmpUnreachable::Other,
        };
        let ctr = &mut self.counters.tcp;
        let mut valid = false;
        self.tcp.icmp6(local, remote, |c| {
            valid = c.on_icmp_unreachable(now, kind, seq, ctr);
        });
        // RFC 8201 / RFC 5927 4.1: a report the connection validated
        // teaches the path MTU to new connections to this destination.
        if valid {
            if let (Icmp6Report::PacketTooBig(mtu), IcmpUnreachable::FragRequired { mtu: mtu4 }) =
                (report, kind)
            {
                self.learn_pmtu6(now, *remote.ip(), mtu);
                // The other connections to the destination use the same
                // path (Linux: the route's MTU, read on every send).
                self.tcp.mtu_reduced6(*remote.ip(), mtu4);
            }
        }
    }
}
