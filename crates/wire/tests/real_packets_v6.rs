//! Byte-level tests of the IPv6 formats against frames captured with
//! tcpdump from Linux 6.x in private network namespaces: host A
//! (02:00:00:00:00:01, fe80::ff:fe00:1, fd00::1) and router R
//! (02:00:00:00:00:02, fe80::ff:fe00:2, fd00::2) running dnsmasq 2.90
//! (router advertisements, DHCPv6, DHCPv4), with a 1280-byte MTU link from
//! R on to B (fd01::3). Captured on R's side of the A-R veth with transmit
//! checksum offload off. Frames in `tests/data/*.bin`:
//!
//! - `mld_report_*`, `ndp_ns_dad`, `ndp_rs`: A (and R) bringing the link up;
//! - `ndp_ns`, `ndp_na`, `icmpv6_echo_*`: `ping -6 -c 1 -p 41424344 fd00::2`;
//! - `ipv6_frag*`: `ping -6 -s 1600 fd00::2`;
//! - `icmpv6_packet_too_big`: `ping -6 -M do -s 1400 fd01::3`;
//! - `icmpv6_time_exceeded`: `ping -6 -t 1 fd01::3`;
//! - `ipv6_udp`, `icmpv6_port_unreachable`: `socat - UDP6:[fd00::2]:9`;
//! - `ipv6_dstopts_unknown` (sent from a packet socket: a Destination
//!   Options header with option type 0x88) and R's `icmpv6_param_problem`;
//! - `ndp_ra`: dnsmasq's answer to A's router solicitation;
//! - `ndp_redirect`: from a second pair of namespaces (A fd00::1, R fd00::2
//!   and fd02::2/64 on the same link, forwarding): A pings fd02::3 through R,
//!   which forwards out the link it came in on and redirects A to fd02::3;
//! - `dhcpv6_*`, `dhcpv4_*`: see `dhcp_packets.rs`.

use std::net::Ipv6Addr;

use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{DstUnreachable, Icmpv6Packet, Icmpv6Repr, ParamProblem, TimeExceeded};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use ustack_wire::ipv6ext::{
    ChainItem, ChainLimits, ExtHeaderKind, Ipv6ExtHeader, Ipv6HeaderChain, Ipv6OptionRepr,
    Ipv6OptionsRepr, UnknownOptionAction,
};
use ustack_wire::mld::{record_type, MldRepr, ALL_MLDV2_ROUTERS};
use ustack_wire::ndisc::{na_flags, prefix_flags, ra_flags, NdiscOption, NdiscRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};
use ustack_wire::Error;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_R: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

fn a() -> Ipv6Addr {
    "fd00::1".parse().unwrap()
}
fn r() -> Ipv6Addr {
    "fd00::2".parse().unwrap()
}
fn ll_a() -> Ipv6Addr {
    "fe80::ff:fe00:1".parse().unwrap()
}
fn ll_r() -> Ipv6Addr {
    "fe80::ff:fe00:2".parse().unwrap()
}

const ECHO_REQUEST: &[u8] = include_bytes!("data/icmpv6_echo_request.bin");
const ECHO_REPLY: &[u8] = include_bytes!("data/icmpv6_echo_reply.bin");
const FRAG1: &[u8] = include_bytes!("data/ipv6_frag1.bin");
const FRAG2: &[u8] = include_bytes!("data/ipv6_frag2.bin");
const TOO_BIG: &[u8] = include_bytes!("data/icmpv6_packet_too_big.bin");
const TIME_EXCEEDED: &[u8] = include_bytes!("data/icmpv6_time_exceeded.bin");
const UDP: &[u8] = include_bytes!("data/ipv6_udp.bin");
const PORT_UNREACHABLE: &[u8] = include_bytes!("data/icmpv6_port_unreachable.bin");
const DSTOPTS: &[u8] = include_bytes!("data/ipv6_dstopts_unknown.bin");
const PARAM_PROBLEM: &[u8] = include_bytes!("data/icmpv6_param_problem.bin");
const NS: &[u8] = include_bytes!("data/ndp_ns.bin");
const NS_DAD: &[u8] = include_bytes!("data/ndp_ns_dad.bin");
const NA: &[u8] = include_bytes!("data/ndp_na.bin");
const RS: &[u8] = include_bytes!("data/ndp_rs.bin");
const RA: &[u8] = include_bytes!("data/ndp_ra.bin");
const REDIRECT: &[u8] = include_bytes!("data/ndp_redirect.bin");
const MLD1: &[u8] = include_bytes!("data/mld_report_1.bin");
const MLD5: &[u8] = include_bytes!("data/mld_report_5.bin");
const MLD6: &[u8] = include_bytes!("data/mld_report_6.bin");

/// Ethernet and the IPv6 header: the repr and the IPv6 packet bytes.
fn ipv6(frame: &[u8]) -> (EthernetRepr, Ipv6Repr, &[u8]) {
    let f = EthernetFrame::new_checked(frame).unwrap();
    let e = EthernetRepr::parse(&f).unwrap();
    assert_eq!(e.ethertype, EtherType::Ipv6);
    let bytes = f.payload_ref();
    let p = Ipv6Packet::new_checked(bytes).unwrap();
    let ip = Ipv6Repr::parse(&p).unwrap();
    // The fixed header re-emits to the same bytes.
    let mut h = [0u8; IPV6_HEADER_LEN];
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut h[..]));
    assert_eq!(&h[..], &bytes[..IPV6_HEADER_LEN]);
    (e, ip, bytes)
}

/// Walk the chain to the upper layer: its protocol and bytes.
fn upper(bytes: &[u8]) -> (IpProtocol, &[u8]) {
    let p = Ipv6Packet::new_checked(bytes).unwrap();
    let s = Ipv6HeaderChain::from_packet(&p, ChainLimits::default())
        .walk()
        .unwrap();
    let end = IPV6_HEADER_LEN + usize::from(p.payload_len());
    (s.upper, &bytes[s.offset..end])
}

/// Parse an ICMPv6 message (checksum verified), re-emit it, compare bytes.
fn icmp<'a>(ip: &Ipv6Repr, msg: &'a [u8]) -> Icmpv6Repr<'a> {
    let p = Icmpv6Packet::new_checked(msg).unwrap();
    assert!(p.verify_checksum(&ip.src, &ip.dst));
    let repr = Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(
        &ip.src,
        &ip.dst,
        &mut Icmpv6Packet::new_unchecked(&mut out[..]),
    );
    assert_eq!(out, msg, "{repr}");
    // Any single flipped bit breaks the checksum.
    let mut bad = msg.to_vec();
    bad[msg.len() / 2] ^= 0x10;
    let q = Icmpv6Packet::new_checked(&bad[..]).unwrap();
    assert_eq!(
        Icmpv6Repr::parse(&q, &ip.src, &ip.dst, true),
        Err(Error::Checksum)
    );
    // Every truncation is an error or a shorter message, never a panic.
    for n in 0..msg.len() {
        if let Ok(q) = Icmpv6Packet::new_checked(&msg[..n]) {
            let _ = Icmpv6Repr::parse(&q, &ip.src, &ip.dst, false);
        }
    }
    repr
}

#[test]
fn echo_request_and_reply() {
    let (e, ip, bytes) = ipv6(ECHO_REQUEST);
    assert_eq!((e.src, e.dst), (MAC_A, MAC_R));
    assert_eq!((ip.src, ip.dst, ip.hop_limit), (a(), r(), 64));
    let (proto, msg) = upper(bytes);
    assert_eq!(proto, IpProtocol::ICMPV6);
    let Icmpv6Repr::EchoRequest {
        ident,
        seq_no,
        data,
    } = icmp(&ip, msg)
    else {
        panic!("echo request expected");
    };
    assert_eq!(seq_no, 1);
    assert_eq!(data.len(), 56);
    assert_eq!(&data[16..20], b"ABCD");
    let (_, ip2, bytes2) = ipv6(ECHO_REPLY);
    let (_, msg2) = upper(bytes2);
    assert_eq!(
        icmp(&ip2, msg2),
        Icmpv6Repr::EchoReply {
            ident,
            seq_no,
            data
        }
    );
}

#[test]
fn fragments_walk() {
    let (_, ip, bytes) = ipv6(FRAG1);
    assert_eq!(ip.next_header, IpProtocol::IPV6_FRAG);
    let p = Ipv6Packet::new_checked(bytes).unwrap();
    let s = Ipv6HeaderChain::from_packet(&p, ChainLimits::default())
        .walk()
        .unwrap();
    let (f, at) = s.fragment.unwrap();
    assert_eq!(
        (s.upper, s.offset, s.headers, at),
        (IpProtocol::ICMPV6, 48, 1, 40)
    );
    assert_eq!((f.frag_offset, f.more_frags), (0, true));
    assert!(!s.fragment_data);
    let (_, _, bytes) = ipv6(FRAG2);
    let p = Ipv6Packet::new_checked(bytes).unwrap();
    let s = Ipv6HeaderChain::from_packet(&p, ChainLimits::default())
        .walk()
        .unwrap();
    let (f2, _) = s.fragment.unwrap();
    assert!(s.fragment_data);
    assert_eq!(
        (f2.frag_offset, f2.more_frags, f2.ident),
        (1448, false, f.ident)
    );
    // 1448 + 160 bytes make the 1608-byte ICMPv6 message.
    assert_eq!(bytes.len() - s.offset, 160);
}

#[test]
fn packet_too_big() {
    let (_, ip, bytes) = ipv6(TOO_BIG);
    assert_eq!(bytes.len(), 1280, "RFC 4443 2.4 (c): fits the minimum MTU");
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::PacketTooBig { mtu, header, data } = icmp(&ip, msg) else {
        panic!("packet too big expected");
    };
    assert_eq!(mtu, 1280);
    assert_eq!(header.dst, "fd01::3".parse::<Ipv6Addr>().unwrap());
    assert_eq!(header.payload_len, 1408);
    assert_eq!(data.len(), 1280 - 40 - 8 - 40);
}

#[test]
fn time_exceeded_and_port_unreachable() {
    let (_, ip, bytes) = ipv6(TIME_EXCEEDED);
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::TimeExceeded { reason, header, .. } = icmp(&ip, msg) else {
        panic!("time exceeded expected");
    };
    assert_eq!(reason, TimeExceeded::HopLimitExceeded);
    assert_eq!(header.hop_limit, 1);
    // The UDP datagram and R's answer quoting it.
    let (_, uip, ubytes) = ipv6(UDP);
    let (proto, dgram) = upper(ubytes);
    assert_eq!(proto, IpProtocol::Udp);
    let u = UdpPacket::new_checked(dgram).unwrap();
    assert!(u.verify_checksum(uip.src, uip.dst));
    let urepr = UdpRepr::parse(&u, uip.src, uip.dst, true).unwrap();
    assert_eq!(urepr.dst_port, 9);
    let mut out = dgram.to_vec();
    let mut q = UdpPacket::new_unchecked(&mut out[..]);
    urepr.emit(&mut q, uip.src, uip.dst, 2, true);
    assert_eq!(out, dgram);
    let mut bad = dgram.to_vec();
    bad[9] ^= 1;
    let u = UdpPacket::new_checked(&bad[..]).unwrap();
    assert_eq!(
        UdpRepr::parse(&u, uip.src, uip.dst, true),
        Err(Error::Checksum)
    );
    let (_, ip, bytes) = ipv6(PORT_UNREACHABLE);
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::DstUnreachable {
        reason,
        header,
        data,
    } = icmp(&ip, msg)
    else {
        panic!("unreachable expected");
    };
    assert_eq!(reason, DstUnreachable::PortUnreachable);
    assert_eq!(header, uip);
    assert_eq!(data, dgram);
}

#[test]
fn unknown_option_and_parameter_problem() {
    let (_, ip, bytes) = ipv6(DSTOPTS);
    assert_eq!(ip.next_header, IpProtocol::IPV6_OPTS);
    let p = Ipv6Packet::new_checked(bytes).unwrap();
    let items: Vec<_> = Ipv6HeaderChain::from_packet(&p, ChainLimits::default())
        .collect::<Result<_, _>>()
        .unwrap();
    let ChainItem::Ext(h) = items[0] else {
        panic!("extension header expected");
    };
    assert_eq!(h.kind, ExtHeaderKind::DestinationOptions);
    let opts: Vec<_> = h.options().unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(opts[0].option_type, 0x88);
    assert_eq!(opts[0].action(), UnknownOptionAction::DiscardAndReport);
    assert_eq!(Ipv6OptionRepr::parse(&opts[1]), Ok(Ipv6OptionRepr::PadN(0)));
    let pointer = h.option_pointer(&opts[0]);
    // Linux's answer points at the same octet.
    let (_, pip, pbytes) = ipv6(PARAM_PROBLEM);
    let (_, msg) = upper(pbytes);
    let Icmpv6Repr::ParamProblem {
        reason,
        pointer: their,
        header,
        data,
    } = icmp(&pip, msg)
    else {
        panic!("parameter problem expected");
    };
    assert_eq!(reason, ParamProblem::UnrecognizedOption);
    assert_eq!(their as usize, pointer);
    assert_eq!(header, ip);
    assert_eq!(data, &bytes[IPV6_HEADER_LEN..]);
    // The options header re-emits to the same bytes.
    let eh = Ipv6ExtHeader::new_checked(&bytes[40..48]).unwrap();
    let o = Ipv6OptionsRepr::parse(&eh).unwrap();
    let mut out = [0u8; 8];
    o.emit(&mut Ipv6ExtHeader::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &bytes[40..48]);
}

#[test]
fn neighbor_solicitation_and_advertisement() {
    let (_, ip, bytes) = ipv6(NS);
    assert_eq!(ip.hop_limit, 255);
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { target, options }) = icmp(&ip, msg) else {
        panic!("NS expected");
    };
    assert_eq!(target, r());
    assert_eq!(ip.dst, ustack_wire::ipv6::solicited_node(r()));
    assert_eq!(
        options.source_ll_addr().and_then(NdiscOption::mac),
        Some(MAC_A)
    );
    let (_, ip, bytes) = ipv6(NA);
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags,
        target,
        options,
    }) = icmp(&ip, msg)
    else {
        panic!("NA expected");
    };
    assert_eq!(target, r());
    assert_eq!(
        flags,
        na_flags::ROUTER | na_flags::SOLICITED | na_flags::OVERRIDE
    );
    assert_eq!(
        options.target_ll_addr().and_then(NdiscOption::mac),
        Some(MAC_R)
    );
    // Duplicate address detection: unspecified source, and an RFC 7527
    // nonce option (type 14) this module does not know: skipped.
    let (_, ip, bytes) = ipv6(NS_DAD);
    assert!(ip.src.is_unspecified());
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { target, options }) = icmp(&ip, msg) else {
        panic!("NS expected");
    };
    assert_eq!(target, ll_a());
    assert_eq!(options.source_ll_addr(), None);
    assert!(matches!(
        options.iter().next(),
        Some(NdiscOption::Unknown {
            option_type: 14,
            data
        }) if data.len() == 6
    ));
}

#[test]
fn router_solicitation_and_advertisement() {
    let (_, ip, bytes) = ipv6(RS);
    assert_eq!((ip.src, ip.dst), (ll_a(), "ff02::2".parse().unwrap()));
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit { options }) = icmp(&ip, msg) else {
        panic!("RS expected");
    };
    assert_eq!(options.source_ll_addr(), Some(&MAC_A.0[..]));
    let (_, ip, bytes) = ipv6(RA);
    assert_eq!((ip.src, ip.dst, ip.hop_limit), (ll_r(), ll_a(), 255));
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
        hop_limit,
        flags,
        router_lifetime,
        reachable_time,
        retrans_time,
        options,
    }) = icmp(&ip, msg)
    else {
        panic!("RA expected");
    };
    assert_eq!((hop_limit, router_lifetime), (64, 1800));
    assert_eq!(flags & (ra_flags::MANAGED | ra_flags::OTHER), 0xc0);
    assert_eq!((reachable_time, retrans_time), (0, 0));
    let p: Vec<_> = options.prefixes().collect();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].prefix, "fd00::".parse::<Ipv6Addr>().unwrap());
    assert_eq!(p[0].prefix_len, 64);
    assert_eq!(p[0].flags, prefix_flags::ON_LINK);
    assert_eq!((p[0].valid_lifetime, p[0].preferred_lifetime), (3600, 3600));
    assert_eq!(options.mtu(), Some(1500));
    assert_eq!(options.source_ll_addr(), Some(&MAC_R.0[..]));
    let rdnss: Vec<_> = options
        .iter()
        .filter_map(|o| match o {
            NdiscOption::Rdnss { lifetime, servers } => Some((lifetime, servers)),
            _ => None,
        })
        .collect();
    assert_eq!(rdnss.len(), 1);
    assert_eq!(rdnss[0].0, 3600);
    assert_eq!(
        rdnss[0].1.iter().collect::<Vec<_>>(),
        ["fd00::53".parse::<Ipv6Addr>().unwrap()]
    );
    // A zero-length option anywhere makes the RA invalid.
    let mut bad = msg.to_vec();
    bad[17] = 0;
    assert_eq!(NdiscRepr::parse(&bad), Err(Error::Malformed));
}

#[test]
fn redirect() {
    let (_, ip, bytes) = ipv6(REDIRECT);
    assert_eq!((ip.src, ip.dst, ip.hop_limit), (ll_r(), a(), 255));
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::Ndisc(NdiscRepr::Redirect {
        target,
        dest,
        options,
    }) = icmp(&ip, msg)
    else {
        panic!("redirect expected");
    };
    let c: Ipv6Addr = "fd02::3".parse().unwrap();
    assert_eq!((target, dest), (c, c));
    // The redirected header quotes A's echo request to fd02::3.
    let quoted = options
        .iter()
        .find_map(|o| match o {
            NdiscOption::RedirectedHeader(d) => Some(d),
            _ => None,
        })
        .unwrap();
    let (q, data) = Ipv6Repr::parse_quoted(quoted).unwrap();
    assert_eq!((q.src, q.dst, q.next_header), (a(), c, IpProtocol::ICMPV6));
    assert_eq!(data[0], 128);
}

#[test]
fn mldv2_reports() {
    for (frame, n) in [(MLD1, 1), (MLD5, 5), (MLD6, 6)] {
        let (_, ip, bytes) = ipv6(frame);
        assert_eq!(ip.dst, ALL_MLDV2_ROUTERS);
        assert_eq!((ip.hop_limit, ip.next_header), (1, IpProtocol::HOP_BY_HOP));
        // Hop-by-Hop with a Router Alert for MLD (value 0), then ICMPv6.
        let p = Ipv6Packet::new_checked(bytes).unwrap();
        let mut chain = Ipv6HeaderChain::from_packet(&p, ChainLimits::default());
        let Some(Ok(ChainItem::Ext(h))) = chain.next() else {
            panic!("hop-by-hop expected");
        };
        assert_eq!(h.kind, ExtHeaderKind::HopByHop);
        let first = h.options().unwrap().next().unwrap().unwrap();
        assert_eq!(
            Ipv6OptionRepr::parse(&first),
            Ok(Ipv6OptionRepr::RouterAlert(0))
        );
        let (proto, msg) = upper(bytes);
        assert_eq!(proto, IpProtocol::ICMPV6);
        let Icmpv6Repr::Mld(MldRepr::Report { records }) = icmp(&ip, msg) else {
            panic!("MLDv2 report expected");
        };
        assert_eq!(records.count(), n);
        let all: Vec<_> = records.iter().collect();
        assert_eq!(all.len(), usize::from(n));
        for r in &all {
            assert_eq!(r.record_type, record_type::CHANGE_TO_EXCLUDE);
            assert!(r.mcast_addr.is_multicast());
            assert!(r.sources.is_empty());
        }
    }
    let (_, ip, bytes) = ipv6(MLD1);
    let (_, msg) = upper(bytes);
    let Icmpv6Repr::Mld(MldRepr::Report { records }) = icmp(&ip, msg) else {
        panic!("report expected");
    };
    assert_eq!(
        records.iter().next().unwrap().mcast_addr,
        "ff02::1:ff00:1".parse::<Ipv6Addr>().unwrap()
    );
    // A record count larger than the records present.
    let mut bad = msg.to_vec();
    bad[7] = 2;
    assert_eq!(MldRepr::parse(&bad), Err(Error::Truncated));
}

#[test]
fn every_truncation_of_every_frame_is_an_error_not_a_panic() {
    for frame in [
        ECHO_REQUEST,
        FRAG1,
        FRAG2,
        TOO_BIG,
        TIME_EXCEEDED,
        UDP,
        PORT_UNREACHABLE,
        DSTOPTS,
        PARAM_PROBLEM,
        NS,
        NS_DAD,
        NA,
        RS,
        RA,
        REDIRECT,
        MLD1,
        MLD6,
    ] {
        let ip = &frame[14..];
        for n in 0..ip.len() {
            match Ipv6Packet::new_checked(&ip[..n]) {
                Ok(p) => panic!("{n} of {} accepted: {:?}", ip.len(), Ipv6Repr::parse(&p)),
                Err(e) => assert_eq!(e, Error::Truncated),
            }
            let _ = Ipv6Repr::parse_quoted(&ip[..n]);
            let s = Ipv6HeaderChain::new(
                IpProtocol::from(ip[6]),
                &ip[40.min(n)..n],
                ChainLimits::default(),
            );
            let _ = s.walk();
        }
    }
}
