//! IPv6 in the engine: addresses, the header chain (RFC 8200), Neighbor
//! Discovery (RFC 4861), ICMPv6 echo and errors (RFC 4443), UDP over IPv6.

mod stack_util;

use std::net::{Ipv6Addr, SocketAddrV6};

use stack_util::*;
use ustack_core::time::{Duration, Instant};
use ustack_core::{link_local, Stack, UdpError, ALL_NODES};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{
    DstUnreachable, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, ParamProblem, ICMPV6_ERROR_MAX_LEN,
};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Packet, Ipv6Repr};
use ustack_wire::ndisc::{na_flags, NdiscOption, NdiscOptions, NdiscRepr};
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

/// Stack B alone, with fd00::2/64, announcements already sent.
fn stack_b() -> (Stack, Instant) {
    let now = Instant::from_secs(1);
    let mut s = Stack::new(config(B_MAC, B_IP, 2), now);
    s.add_ipv6_address(cidr(B6)).unwrap();
    s.poll(now, &mut |_| {});
    (s, now)
}

/// An IPv6 frame from the peer, with `payload` after the fixed header
/// (extension headers included in it when `next_header` says so).
fn frame6(
    dst_mac: MacAddr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next_header: IpProtocol,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + payload.len()];
    EthernetRepr {
        src: PEER_MAC,
        dst: dst_mac,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        src,
        dst,
        next_header,
        payload_len: payload.len(),
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    f[54..].copy_from_slice(payload);
    f
}

fn icmp6_bytes(src: Ipv6Addr, dst: Ipv6Addr, repr: &Icmpv6Repr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut b[..]));
    b
}

fn ns_bytes(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, sll: Option<MacAddr>) -> Vec<u8> {
    let mut opts = [0u8; 8];
    let mac = sll.map(|m| m.0);
    let options = match &mac {
        Some(m) => {
            NdiscOption::SourceLinkLayerAddr(m).emit(&mut opts).unwrap();
            NdiscOptions::new_checked(&opts).unwrap()
        }
        None => NdiscOptions::default(),
    };
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { target, options });
    icmp6_bytes(src, dst, &repr)
}

fn udp6_bytes(src: Ipv6Addr, dst: Ipv6Addr, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8 + data.len()];
    b[8..].copy_from_slice(data);
    UdpRepr {
        src_port: 4000,
        dst_port: dport,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut b[..]),
        src,
        dst,
        data.len(),
        true,
    );
    b
}

/// What the stack sent back: (Ethernet destination, IPv6 header, payload).
fn sent(out: &[Vec<u8>]) -> Vec<(MacAddr, Ipv6Repr, Vec<u8>)> {
    out.iter()
        .filter_map(|f| {
            let eth = EthernetFrame::new_checked(&f[..]).ok()?;
            let e = EthernetRepr::parse(&eth).ok()?;
            if e.ethertype != EtherType::Ipv6 {
                return None;
            }
            let p = Ipv6Packet::new_checked(&f[14..]).ok()?;
            let r = Ipv6Repr::parse(&p).ok()?;
            Some((e.dst, r, p.payload().to_vec()))
        })
        .collect()
}

fn receive(s: &mut Stack, now: Instant, f: &[u8]) -> Vec<(MacAddr, Ipv6Repr, Vec<u8>)> {
    let mut out = Vec::new();
    s.receive(now, f, &mut |x| out.push(x.to_vec()));
    s.poll(now, &mut |x| out.push(x.to_vec()));
    sent(&out)
}

fn c(s: &Stack, group: &str, name: &str) -> u64 {
    counter(s, group, name)
}

/// Teach B the peer's MAC (a valid NS with the source link-layer option).
fn introduce_peer(s: &mut Stack, now: Instant) {
    let ns = ns_bytes(PEER6, solicited_node(B6), B6, Some(PEER_MAC));
    let f = frame6(
        MacAddr([0x33, 0x33, 0xff, 0, 0, 2]),
        PEER6,
        solicited_node(B6),
        IpProtocol::ICMPV6,
        255,
        &ns,
    );
    assert_eq!(receive(s, now, &f).len(), 1);
}

#[test]
fn link_local_address_is_formed_from_the_mac_as_linux_does() {
    let ll = link_local(MacAddr([2, 0, 0, 0, 0, 1]));
    assert_eq!(ll.address, "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(ll.prefix_len, 64);
    let ll = link_local(MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]));
    assert_eq!(
        ll.address,
        "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
    );
    let (s, _) = stack_b();
    assert_eq!(s.ipv6_addresses()[0], link_local(B_MAC));
    assert_eq!(s.ipv6_addresses()[1], cidr(B6));
}

#[test]
fn bad_addresses_are_refused() {
    let (mut s, _) = stack_b();
    assert!(s.add_ipv6_address(cidr(B6)).is_err());
    assert!(s.add_ipv6_address(cidr(ALL_NODES)).is_err());
    assert!(s.add_ipv6_address(cidr(Ipv6Addr::UNSPECIFIED)).is_err());
    assert!(s.add_ipv6_address(cidr(Ipv6Addr::LOCALHOST)).is_err());
}

#[test]
fn neighbour_solicitation_is_answered_with_a_solicited_override_advert() {
    let (mut s, now) = stack_b();
    let ns = ns_bytes(PEER6, solicited_node(B6), B6, Some(PEER_MAC));
    let f = frame6(
        MacAddr([0x33, 0x33, 0xff, 0, 0, 2]),
        PEER6,
        solicited_node(B6),
        IpProtocol::ICMPV6,
        255,
        &ns,
    );
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    let (mac, ip, body) = &out[0];
    assert_eq!(*mac, PEER_MAC);
    assert_eq!((ip.src, ip.dst, ip.hop_limit), (B6, PEER6, 255));
    let p = Icmpv6Packet::new_checked(&body[..]).unwrap();
    match Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap() {
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags,
            target,
            options,
        }) => {
            assert_eq!(flags, na_flags::SOLICITED | na_flags::OVERRIDE);
            assert_eq!(target, B6);
            assert_eq!(options.target_ll_addr(), Some(&B_MAC.0[..]));
        }
        other => panic!("expected an NA, got {other:?}"),
    }
    // The solicitation taught B the peer's MAC.
    assert_eq!(s.neighbour6(now, PEER6), Some(PEER_MAC));
    assert_eq!(c(&s, "Icmp6", "InNeighborSolicits"), 1);
    assert_eq!(c(&s, "Icmp6", "OutNeighborAdvertisements"), 1);
}

#[test]
fn dad_probe_for_our_address_is_answered_to_all_nodes() {
    let (mut s, now) = stack_b();
    let g = solicited_node(B6);
    let ns = ns_bytes(Ipv6Addr::UNSPECIFIED, g, B6, None);
    let f = frame6(
        MacAddr([0x33, 0x33, 0xff, 0, 0, 2]),
        Ipv6Addr::UNSPECIFIED,
        g,
        IpProtocol::ICMPV6,
        255,
        &ns,
    );
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, MacAddr([0x33, 0x33, 0, 0, 0, 1]));
    assert_eq!(out[0].1.dst, ALL_NODES);
    // Solicited clear, Override set.
    assert_eq!(out[0].2[4], na_flags::OVERRIDE);
    // A DAD probe with a source link-layer option is invalid.
    let ns = ns_bytes(Ipv6Addr::UNSPECIFIED, g, B6, Some(PEER_MAC));
    let f = frame6(
        MacAddr([0x33, 0x33, 0xff, 0, 0, 2]),
        Ipv6Addr::UNSPECIFIED,
        g,
        IpProtocol::ICMPV6,
        255,
        &ns,
    );
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Ndisc", "Invalid"), 1);
}

#[test]
fn invalid_neighbour_discovery_is_dropped_and_counted() {
    let (mut s, now) = stack_b();
    let g = solicited_node(B6);
    let gmac = MacAddr([0x33, 0x33, 0xff, 0, 0, 2]);
    // Hop limit not 255: forwarded, so not from the link.
    let ns = ns_bytes(PEER6, g, B6, Some(PEER_MAC));
    let f = frame6(gmac, PEER6, g, IpProtocol::ICMPV6, 64, &ns);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Ndisc", "Invalid"), 1);
    // Code 1.
    let mut bad = ns.clone();
    bad[1] = 1;
    let ck = {
        bad[2] = 0;
        bad[3] = 0;
        let mut p = Icmpv6Packet::new_unchecked(&mut bad[..]);
        p.fill_checksum(&PEER6, &g);
        p.checksum()
    };
    assert_ne!(ck, 0);
    let f = frame6(gmac, PEER6, g, IpProtocol::ICMPV6, 255, &bad);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Ndisc", "Invalid"), 2);
    // A zero-length option.
    let mut bad = ns.clone();
    bad[25] = 0;
    Icmpv6Packet::new_unchecked(&mut bad[..]).fill_checksum(&PEER6, &g);
    let f = frame6(gmac, PEER6, g, IpProtocol::ICMPV6, 255, &bad);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Ndisc", "Invalid"), 3);
    // Too short for an NS (ICMP length below 24).
    let mut bad = ns[..16].to_vec();
    Icmpv6Packet::new_unchecked(&mut bad[..]).fill_checksum(&PEER6, &g);
    let f = frame6(gmac, PEER6, g, IpProtocol::ICMPV6, 255, &bad);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Ndisc", "Invalid"), 4);
    // A multicast target.
    let ns = ns_bytes(PEER6, g, ALL_NODES, Some(PEER_MAC));
    let f = frame6(gmac, PEER6, g, IpProtocol::ICMPV6, 255, &ns);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Ndisc", "Invalid"), 5);
    assert_eq!(c(&s, "Icmp6", "OutNeighborAdvertisements"), 0);
    assert_eq!(s.neighbour6(now, PEER6), None);
}

#[test]
fn echo_requests_get_replies_to_unicast_and_all_nodes() {
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    for len in [0usize, 56, 1452] {
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let req = Icmpv6Repr::EchoRequest {
            ident: 7,
            seq_no: len as u16,
            data: &data,
        };
        let f = frame6(
            B_MAC,
            PEER6,
            B6,
            IpProtocol::ICMPV6,
            64,
            &icmp6_bytes(PEER6, B6, &req),
        );
        let out = receive(&mut s, now, &f);
        assert_eq!(out.len(), 1, "payload {len}");
        let (mac, ip, body) = &out[0];
        assert_eq!((*mac, ip.src, ip.dst), (PEER_MAC, B6, PEER6));
        let p = Icmpv6Packet::new_checked(&body[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap(),
            Icmpv6Repr::EchoReply {
                ident: 7,
                seq_no: len as u16,
                data: &data
            }
        );
    }
    // To all-nodes: answered from a unicast address of ours (RFC 4443 4.2).
    let req = Icmpv6Repr::EchoRequest {
        ident: 8,
        seq_no: 1,
        data: b"x",
    };
    let f = frame6(
        MacAddr([0x33, 0x33, 0, 0, 0, 1]),
        PEER6,
        ALL_NODES,
        IpProtocol::ICMPV6,
        64,
        &icmp6_bytes(PEER6, ALL_NODES, &req),
    );
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.src, B6);
    assert_eq!(c(&s, "Icmp6", "InEchos"), 4);
    assert_eq!(c(&s, "Icmp6", "OutEchoReplies"), 4);
    // A bad checksum is counted, not answered.
    let mut b = icmp6_bytes(PEER6, B6, &req);
    b[2] ^= 1;
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::ICMPV6, 64, &b);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Icmp6", "InCsumErrors"), 1);
    assert_eq!(c(&s, "Icmp6", "InErrors"), 1);
    // Another node's address or an unjoined group: not ours (the first an
    // address error, the second dropped silently, as Linux does).
    let delivered = c(&s, "Ip6", "InDelivers");
    let mcast = c(&s, "Ip6", "InMcastPkts");
    for (mac, dst) in [
        (B_MAC, PEER6),
        (
            MacAddr([0x33, 0x33, 0, 0, 0, 2]),
            Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2),
        ),
    ] {
        let f = frame6(
            mac,
            PEER6,
            dst,
            IpProtocol::ICMPV6,
            64,
            &icmp6_bytes(PEER6, dst, &req),
        );
        assert!(receive(&mut s, now, &f).is_empty());
    }
    assert_eq!(c(&s, "Ip6", "InAddrErrors"), 1);
    assert_eq!(c(&s, "Ip6", "InMcastPkts"), mcast + 1);
    assert_eq!(c(&s, "Ip6", "InDelivers"), delivered);
}

#[test]
fn udp_to_a_closed_port_gets_a_rate_limited_port_unreachable() {
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    let u = udp6_bytes(PEER6, B6, 9999, &[0xab; 2000][..1400]);
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Udp, 64, &u);
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    let (_, ip, body) = &out[0];
    assert!(body.len() <= ICMPV6_ERROR_MAX_LEN);
    let p = Icmpv6Packet::new_checked(&body[..]).unwrap();
    match Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap() {
        Icmpv6Repr::DstUnreachable {
            reason,
            header,
            data,
        } => {
            assert_eq!(reason, DstUnreachable::PortUnreachable);
            assert_eq!((header.src, header.dst), (PEER6, B6));
            assert_eq!(data, &u[..data.len()]);
            // Cut to fit the minimum MTU.
            assert_eq!(40 + 8 + 40 + data.len(), 1280);
        }
        other => panic!("expected port unreachable, got {other:?}"),
    }
    // The token bucket (burst 50 by default) bounds the answers.
    let mut answered = 1;
    for _ in 0..100 {
        answered += receive(&mut s, now, &f).len();
    }
    assert_eq!(answered, 50);
    assert_eq!(c(&s, "Udp6", "NoPorts"), 101);
    assert_eq!(c(&s, "Icmp6", "OutRateLimited"), 51);
    assert_eq!(c(&s, "Icmp6", "OutDestUnreachs"), 50);
    // Not in answer to a multicast destination.
    let u = udp6_bytes(PEER6, ALL_NODES, 9999, b"x");
    let later = now + Duration::from_secs(10);
    let f = frame6(
        MacAddr([0x33, 0x33, 0, 0, 0, 1]),
        PEER6,
        ALL_NODES,
        IpProtocol::Udp,
        64,
        &u,
    );
    // (The neighbour entry, used and unconfirmed, may be probed meanwhile.)
    let out = receive(&mut s, later, &f);
    assert!(
        out.iter()
            .all(|(_, _, b)| b[0] == u8::from(Icmpv6Message::NeighborSolicit)),
        "{out:?}"
    );
    assert_eq!(c(&s, "Icmp6", "OutDestUnreachs"), 50);
}

#[test]
fn udp_zero_checksum_is_dropped() {
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    let h = s
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 53, 0, 0))
        .unwrap();
    let mut u = udp6_bytes(PEER6, B6, 53, b"hi");
    u[6] = 0;
    u[7] = 0;
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Udp, 64, &u);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Udp6", "InErrors"), 1);
    let mut buf = [0u8; 8];
    assert_eq!(s.udp6_recv_from(h, &mut buf), Err(UdpError::WouldBlock));
    // The same with its checksum is delivered.
    let u = udp6_bytes(PEER6, B6, 53, b"hi");
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Udp, 64, &u);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(
        s.udp6_recv_from(h, &mut buf),
        Ok((2, SocketAddrV6::new(PEER6, 4000, 0, 0)))
    );
    assert_eq!(c(&s, "Udp6", "InDatagrams"), 1);
}

/// A Destination Options header carrying one option of type `t`, then UDP.
fn with_dest_option(t: u8, udp: &[u8]) -> Vec<u8> {
    // Next Header UDP, length 0 (8 bytes): option t, 4 bytes of data.
    let mut b = vec![17, 0, t, 4, 0, 0, 0, 0];
    b.extend_from_slice(udp);
    b
}

#[test]
fn unknown_options_are_handled_as_their_type_says() {
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    let udp = udp6_bytes(PEER6, B6, 9999, b"x");
    let dest_opts = IpProtocol::Unknown(60);
    // 00: skipped, the UDP layer answers port unreachable.
    let f = frame6(
        B_MAC,
        PEER6,
        B6,
        dest_opts,
        64,
        &with_dest_option(0x1e, &udp),
    );
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].2[0], u8::from(Icmpv6Message::DstUnreachable));
    // 01: silently discarded.
    let f = frame6(
        B_MAC,
        PEER6,
        B6,
        dest_opts,
        64,
        &with_dest_option(0x5e, &udp),
    );
    assert!(receive(&mut s, now, &f).is_empty());
    // 10: Parameter Problem code 2 pointing at the option type (40 + 2).
    for t in [0x9e, 0xde] {
        let f = frame6(B_MAC, PEER6, B6, dest_opts, 64, &with_dest_option(t, &udp));
        let out = receive(&mut s, now, &f);
        assert_eq!(out.len(), 1, "type {t:#x}");
        let (_, ip, body) = &out[0];
        let p = Icmpv6Packet::new_checked(&body[..]).unwrap();
        match Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap() {
            Icmpv6Repr::ParamProblem {
                reason, pointer, ..
            } => {
                assert_eq!(reason, ParamProblem::UnrecognizedOption);
                assert_eq!(pointer, 42);
            }
            other => panic!("expected a parameter problem, got {other:?}"),
        }
    }
    // To a multicast destination: 10 still reports, 11 does not.
    let udp = udp6_bytes(PEER6, ALL_NODES, 9999, b"x");
    let mmac = MacAddr([0x33, 0x33, 0, 0, 0, 1]);
    let f = frame6(
        mmac,
        PEER6,
        ALL_NODES,
        dest_opts,
        64,
        &with_dest_option(0x9e, &udp),
    );
    assert_eq!(receive(&mut s, now, &f).len(), 1);
    let f = frame6(
        mmac,
        PEER6,
        ALL_NODES,
        dest_opts,
        64,
        &with_dest_option(0xde, &udp),
    );
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Icmp6", "OutParmProblems"), 3);
}

#[test]
fn unknown_next_header_and_long_chains() {
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    // Next Header 200 in the fixed header: code 1, pointer 6.
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Unknown(200), 64, &[0u8; 8]);
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    let (_, ip, body) = &out[0];
    let p = Icmpv6Packet::new_checked(&body[..]).unwrap();
    match Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap() {
        Icmpv6Repr::ParamProblem {
            reason, pointer, ..
        } => {
            assert_eq!(reason, ParamProblem::UnrecognizedNextHeader);
            assert_eq!(pointer, 6);
        }
        other => panic!("expected a parameter problem, got {other:?}"),
    }
    assert_eq!(c(&s, "Ip6", "InUnknownProtos"), 1);
    // 100 Destination Options headers: the walk stops after 16, no ICMP.
    let mut chain = Vec::new();
    for _ in 0..100 {
        chain.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    }
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Unknown(60), 64, &chain);
    assert!(receive(&mut s, now, &f).is_empty());
    assert_eq!(c(&s, "Ip6", "InHdrErrors"), 1);
    // A routing header with segments left: code 0 at the routing type.
    let mut rh = vec![17, 2, 0, 1, 0, 0, 0, 0];
    rh.extend_from_slice(&B6.octets());
    rh.extend_from_slice(&udp6_bytes(PEER6, B6, 9999, b"x"));
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Unknown(43), 64, &rh);
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0].2[..2], &[4, 0]);
    assert_eq!(&out[0].2[4..8], &42u32.to_be_bytes());
    // Truncated headers and garbage: counted, never a panic.
    for n in 0..60 {
        let f = frame6(B_MAC, PEER6, B6, IpProtocol::Unknown(0), 64, &chain[..n]);
        let _ = receive(&mut s, now, &f);
    }
}

#[test]
fn udp_over_ipv6_between_two_stacks_resolves_neighbours() {
    let mut n = net6();
    let srv = n.b.udp6_bind(SocketAddrV6::new(B6, 7, 0, 0)).unwrap();
    let cli =
        n.a.udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
            .unwrap();
    let cport = n.a.udp6_status(cli).unwrap().local.port();
    let dst = SocketAddrV6::new(B6, 7, 0, 0);
    assert_eq!(n.a.udp6_send_to(n.now, cli, b"hello6", dst), Ok(6));
    n.pump();
    let mut buf = [0u8; 64];
    let (len, from) = n.b.udp6_recv_from(srv, &mut buf).unwrap();
    assert_eq!(&buf[..len], b"hello6");
    assert_eq!(from, SocketAddrV6::new(A6, cport, 0, 0));
    n.b.udp6_send_to(n.now, srv, b"back", from).unwrap();
    n.pump();
    let (len, from) = n.a.udp6_recv_from(cli, &mut buf).unwrap();
    assert_eq!((&buf[..len], from), (&b"back"[..], dst));
    assert_eq!(n.a.neighbour6(n.now, B6), Some(B_MAC));
    assert_eq!(n.b.neighbour6(n.now, A6), Some(A_MAC));
    assert_eq!(c(&n.a, "Icmp6", "OutNeighborSolicits"), 1);
    assert_eq!(c(&n.b, "Icmp6", "OutNeighborAdvertisements"), 1);
    assert_eq!(c(&n.a, "Ndisc", "Resolved"), 1);
    assert_eq!(c(&n.a, "Udp6", "OutDatagrams"), 1);
    assert_eq!(c(&n.b, "Udp6", "InDatagrams"), 1);
    assert!(c(&n.b, "Ip6", "InDelivers") >= 2);
    // Link-local addresses work the same way.
    let lla = link_local(A_MAC).address;
    let llb = link_local(B_MAC).address;
    let cli2 = n.a.udp6_bind(SocketAddrV6::new(lla, 5555, 0, 0)).unwrap();
    let srv2 =
        n.b.udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 8, 0, 0))
            .unwrap();
    n.a.udp6_send_to(n.now, cli2, b"ll", SocketAddrV6::new(llb, 8, 0, 0))
        .unwrap();
    n.pump();
    let (len, from) = n.b.udp6_recv_from(srv2, &mut buf).unwrap();
    assert_eq!(
        (&buf[..len], from),
        (&b"ll"[..], SocketAddrV6::new(lla, 5555, 0, 0))
    );
    // Binding an address that is not ours fails.
    assert!(n.a.udp6_bind(SocketAddrV6::new(B6, 9, 0, 0)).is_err());
    // No route off-link (no IPv6 default router).
    let far = SocketAddrV6::new("2001:db8::1".parse().unwrap(), 9, 0, 0);
    assert_eq!(
        n.a.udp6_send_to(n.now, cli, b"x", far),
        Err(UdpError::NoRoute)
    );
    assert_eq!(c(&n.a, "Ip6", "OutNoRoutes"), 1);
}

#[test]
fn unanswered_resolution_gives_up_after_three_solicitations() {
    let mut n = net6();
    let cli =
        n.a.udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
            .unwrap();
    let nobody = SocketAddrV6::new("fd00::77".parse().unwrap(), 9, 0, 0);
    for _ in 0..3 {
        n.a.udp6_send_to(n.now, cli, b"lost", nobody).unwrap();
    }
    n.run_until(Duration::from_secs(10), |n| c(&n.a, "Ndisc", "Failed") == 1);
    assert_eq!(c(&n.a, "Ndisc", "Failed"), 1);
    assert_eq!(c(&n.a, "Icmp6", "OutNeighborSolicits"), 3);
    assert_eq!(c(&n.a, "Ndisc", "UnresolvedDiscards"), 3);
    assert_eq!(n.a.neighbour6(n.now, *nobody.ip()), None);
}

#[test]
fn udp_handles_name_one_socket_across_both_families() {
    use std::net::{SocketAddr, SocketAddrV4};
    use ustack_core::SocketEvent;
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    // Port 53 in each family: two port spaces, two distinct handles.
    let h4 = s.udp_bind(SocketAddrV4::new(0.into(), 53)).unwrap();
    let h6 = s
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 53, 0, 0))
        .unwrap();
    assert_ne!(h4, h6);
    assert_eq!(s.udp6_status(h4), Err(UdpError::InvalidHandle));
    assert_eq!(s.udp_status(h6), Err(UdpError::InvalidHandle));
    assert!(s.udp_status_addr(h4).unwrap().local.is_ipv4());
    assert!(s.udp_status_addr(h6).unwrap().local.is_ipv6());
    let v4: SocketAddr = SocketAddrV4::new(A_IP, 9).into();
    let v6: SocketAddr = SocketAddrV6::new(PEER6, 9, 0, 0).into();
    assert_eq!(
        s.udp_send_to_addr(now, h6, b"x", v4),
        Err(UdpError::InvalidAddress)
    );
    assert_eq!(
        s.udp_send_to_addr(now, h4, b"x", v6),
        Err(UdpError::InvalidAddress)
    );
    assert_eq!(s.udp_send_to_addr(now, h6, b"x", v6), Ok(1));
    let mut out = Vec::new();
    s.poll(now, &mut |f| out.push(f.to_vec()));
    assert_eq!(sent(&out).len(), 1);
    // A datagram for the IPv6 socket raises its event.
    let mut events = Vec::new();
    s.take_events(&mut |e| events.push(e));
    let u = udp6_bytes(PEER6, B6, 53, b"ev");
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Udp, 64, &u);
    assert!(receive(&mut s, now, &f).is_empty());
    let mut events = Vec::new();
    s.take_events(&mut |e| events.push(e));
    assert_eq!(events, vec![SocketEvent::Udp(h6)]);
    let mut buf = [0u8; 8];
    assert_eq!(
        s.udp_recv_from_addr(h6, &mut buf),
        Ok((2, SocketAddrV6::new(PEER6, 4000, 0, 0).into()))
    );
    // Connected: sends without an address, filters other peers.
    s.udp_connect_addr(h6, v6).unwrap();
    assert_eq!(s.udp_send_addr(now, h6, b"yz"), Ok(2));
    let mut out = Vec::new();
    s.poll(now, &mut |f| out.push(f.to_vec()));
    assert_eq!(sent(&out)[0].1.dst, PEER6);
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Udp, 64, &u);
    // From port 4000, not the connected 9: no socket takes it.
    assert_eq!(receive(&mut s, now, &f).len(), 1);
    // Closing through the common call closes the IPv6 socket only.
    s.udp_close(h6);
    assert_eq!(s.udp6_status(h6), Err(UdpError::InvalidHandle));
    assert!(s.udp_status(h4).is_ok());
}

/// Valid IPv6 frames to B of every kind the receive path handles.
fn corpus6() -> Vec<Vec<u8>> {
    let g = solicited_node(B6);
    let gmac = MacAddr([0x33, 0x33, 0xff, 0, 0, 2]);
    let echo = Icmpv6Repr::EchoRequest {
        ident: 1,
        seq_no: 2,
        data: &[9u8; 300],
    };
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: na_flags::SOLICITED,
        target: PEER6,
        options: NdiscOptions::default(),
    });
    let udp = udp6_bytes(PEER6, B6, 9999, b"corpus");
    let mut rh = vec![17, 2, 0, 1, 0, 0, 0, 0];
    rh.extend_from_slice(&B6.octets());
    rh.extend_from_slice(&udp);
    let mut frag = vec![17, 0, 0, 0, 0, 0, 0, 7];
    frag.extend_from_slice(&udp);
    vec![
        frame6(
            gmac,
            PEER6,
            g,
            IpProtocol::ICMPV6,
            255,
            &ns_bytes(PEER6, g, B6, Some(PEER_MAC)),
        ),
        frame6(
            B_MAC,
            PEER6,
            B6,
            IpProtocol::ICMPV6,
            64,
            &icmp6_bytes(PEER6, B6, &echo),
        ),
        frame6(
            B_MAC,
            PEER6,
            B6,
            IpProtocol::ICMPV6,
            255,
            &icmp6_bytes(PEER6, B6, &na),
        ),
        frame6(B_MAC, PEER6, B6, IpProtocol::Udp, 64, &udp),
        frame6(
            B_MAC,
            PEER6,
            B6,
            IpProtocol::Unknown(60),
            64,
            &with_dest_option(0x9e, &udp),
        ),
        frame6(B_MAC, PEER6, B6, IpProtocol::Unknown(43), 64, &rh),
        frame6(B_MAC, PEER6, B6, IpProtocol::Unknown(44), 64, &frag),
        frame6(B_MAC, PEER6, B6, IpProtocol::Tcp, 64, &syn_bytes(None)),
    ]
}

/// Refill the upper-layer checksum of a frame whose fixed header names
/// ICMPv6 or UDP directly, so mutations reach past the checksum.
fn repair6(f: &mut [u8]) {
    let Ok(p) = Ipv6Packet::new_checked(&f[14..]) else {
        return;
    };
    let (src, dst, nh) = (p.src_addr(), p.dst_addr(), p.next_header());
    let end = 54 + usize::from(p.payload_len());
    let Some(body) = f.get_mut(54..end) else {
        return;
    };
    match nh {
        IpProtocol::ICMPV6 if body.len() >= 8 => {
            Icmpv6Packet::new_unchecked(&mut body[..]).fill_checksum(&src, &dst)
        }
        IpProtocol::Udp => {
            if let Ok(mut u) = UdpPacket::new_checked(&mut body[..]) {
                u.fill_checksum(src, dst)
            }
        }
        _ => {}
    }
}

/// Every frame B emits is well-formed IPv6 (or ARP) from B.
fn check_out(f: &[u8]) {
    let eth = EthernetFrame::new_checked(f).expect("emitted Ethernet");
    let e = EthernetRepr::parse(&eth).expect("emitted Ethernet repr");
    assert_eq!(e.src, B_MAC);
    if e.ethertype != EtherType::Ipv6 {
        return;
    }
    let p = Ipv6Packet::new_checked(&f[14..]).expect("emitted IPv6");
    let ip = Ipv6Repr::parse(&p).expect("emitted IPv6 repr");
    assert!(ip.src == B6 || ip.src == link_local(B_MAC).address);
    assert!(!ip.dst.is_unspecified());
    assert!(f.len() <= 1514);
    match ip.next_header {
        IpProtocol::ICMPV6 => {
            let c = Icmpv6Packet::new_checked(p.payload()).expect("emitted ICMPv6");
            assert!(c.verify_checksum(&ip.src, &ip.dst));
        }
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(p.payload()).expect("emitted UDP");
            assert!(u.verify_checksum(ip.src, ip.dst));
        }
        IpProtocol::Tcp => {
            let t = TcpPacket::new_checked(p.payload()).expect("emitted TCP");
            let r = TcpRepr::parse(&t, ip.src, ip.dst, true).expect("emitted TCP repr");
            assert!(r.rst);
        }
        other => panic!("emitted next header {other:?}"),
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        /// Mutated IPv6 frames (checksums repaired) never panic the stack,
        /// and whatever it sends back is well-formed.
        #[test]
        fn mutated_ipv6_frames_never_panic(
            picks in prop::collection::vec((0usize..8, prop::collection::vec((any::<u16>(), any::<u8>()), 0..6), any::<u16>()), 1..12)
        ) {
            let corpus = corpus6();
            let (mut s, mut now) = stack_b();
            for (i, muts, cut) in picks {
                let mut f = corpus[i].clone();
                for (at, v) in muts {
                    let at = 14 + usize::from(at) % (f.len() - 14);
                    f[at] = v;
                }
                let keep = 14 + usize::from(cut) % (f.len() - 13);
                if cut % 4 == 0 {
                    f.truncate(keep);
                }
                if cut % 3 != 0 {
                    repair6(&mut f);
                }
                let mut out = Vec::new();
                s.receive(now, &f, &mut |x| out.push(x.to_vec()));
                now += Duration::from_millis(u64::from(cut % 2000));
                s.poll(now, &mut |x| out.push(x.to_vec()));
                for o in &out {
                    check_out(o);
                }
            }
        }
    }
}

fn na_frame(flags: u8, mac: MacAddr) -> Vec<u8> {
    let mut opts = [0u8; 8];
    NdiscOption::TargetLinkLayerAddr(&mac.0)
        .emit(&mut opts)
        .unwrap();
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags,
        target: PEER6,
        options: NdiscOptions::new_checked(&opts).unwrap(),
    });
    frame6(
        B_MAC,
        PEER6,
        B6,
        IpProtocol::ICMPV6,
        255,
        &icmp6_bytes(PEER6, B6, &na),
    )
}

#[test]
fn solicitation_learned_entries_are_stale_and_probed_when_used() {
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    // Used at once (RFC 4861 7.2.3: STALE, usable).
    let req = Icmpv6Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data: b"p",
    };
    let f = frame6(
        B_MAC,
        PEER6,
        B6,
        IpProtocol::ICMPV6,
        64,
        &icmp6_bytes(PEER6, B6, &req),
    );
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, PEER_MAC);
    // DELAY_FIRST_PROBE_TIME later without a confirmation: a unicast NS.
    let t = now + Duration::from_secs(5);
    let mut out = Vec::new();
    s.poll(t, &mut |x| out.push(x.to_vec()));
    let out = sent(&out);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].0, out[0].1.dst, out[0].1.hop_limit),
        (PEER_MAC, PEER6, 255)
    );
    assert_eq!(out[0].2[0], u8::from(Icmpv6Message::NeighborSolicit));
    assert_eq!(&out[0].2[8..24], &PEER6.octets());
    // A solicited advertisement confirms: no more probes.
    assert!(receive(&mut s, t, &na_frame(na_flags::SOLICITED, PEER_MAC)).is_empty());
    for secs in 6..12 {
        let mut out = Vec::new();
        s.poll(now + Duration::from_secs(secs), &mut |x| {
            out.push(x.to_vec())
        });
        assert!(sent(&out).is_empty(), "probe at {secs} s");
    }
    // Override clear and another address: the entry keeps its MAC
    // (RFC 4861 7.2.5); with Override set it changes.
    let other = MacAddr([2, 0, 0, 0, 0, 0x42]);
    let t = now + Duration::from_secs(12);
    assert!(receive(&mut s, t, &na_frame(na_flags::SOLICITED, other)).is_empty());
    assert_eq!(s.neighbour6(t, PEER6), Some(PEER_MAC));
    assert_eq!(c(&s, "Ndisc", "Contradictions"), 1);
    let o = na_flags::SOLICITED | na_flags::OVERRIDE;
    assert!(receive(&mut s, t, &na_frame(o, other)).is_empty());
    assert_eq!(s.neighbour6(t, PEER6), Some(other));
    // An advertisement for a neighbour we never asked about creates nothing.
    let (mut s2, now2) = stack_b();
    assert!(receive(&mut s2, now2, &na_frame(o, other)).is_empty());
    assert_eq!(s2.neighbour6(now2, PEER6), None);
}

#[test]
fn solicitation_learned_entries_outlive_a_poll_until_gc_stale_time() {
    // The peer resolves us (its NS teaches us its MAC, STALE), and its
    // traffic follows a moment later: the entry must still be there, as
    // Linux keeps an unused neighbour `gc_stale_time` (60 s) after its
    // creation. It was collected at the first poll, so every new peer
    // cost a resolution round trip. (A clock well past reachable_time:
    // near its origin the backdated confirmation hid the bug.)
    let now = Instant::from_secs(1000);
    let mut s = Stack::new(config(B_MAC, B_IP, 2), now);
    s.add_ipv6_address(cidr(B6)).unwrap();
    s.poll(now, &mut |_| {});
    introduce_peer(&mut s, now);
    let t = now + Duration::from_secs(1);
    let mut out = Vec::new();
    s.poll(t, &mut |x| out.push(x.to_vec()));
    assert!(sent(&out).is_empty());
    assert_eq!(s.neighbour6(t, PEER6), Some(PEER_MAC));
    // Unused for longer than gc_stale_time: collected.
    let late = now + Duration::from_secs(61);
    let mut out = Vec::new();
    s.poll(late, &mut |x| out.push(x.to_vec()));
    assert_eq!(s.neighbour6(late, PEER6), None);
}

/// A SYN (or, with `ack`, a bare ACK) from the peer to B6:80.
/// A bare SYN (no options) from `src`:40000 to `dst`:80.
fn bare_syn(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let seg = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: SeqNum(1000),
        syn: true,
        window: 65535,
        ..TcpRepr::default()
    };
    let mut b = vec![0u8; seg.buffer_len()];
    seg.emit(&mut TcpPacket::new_unchecked(&mut b[..]), src, dst, true);
    b
}

fn syn_bytes(ack: Option<u32>) -> Vec<u8> {
    let seg = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: SeqNum(1000),
        ack: ack.map(SeqNum),
        syn: ack.is_none(),
        window: 65535,
        max_seg_size: Some(1440),
        ..TcpRepr::default()
    };
    let mut b = vec![0u8; seg.buffer_len()];
    seg.emit(&mut TcpPacket::new_unchecked(&mut b[..]), PEER6, B6, true);
    b
}

#[test]
fn tcp_to_a_multicast_group_is_dropped_without_an_answer() {
    // Found by stack_receive's IPv6 operations: a SYN to our solicited-node
    // group was answered with a RST (or, to a listener's port, a SYN|ACK)
    // whose source was the group address.
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    let _l = s
        .tcp_listen6(
            std::net::SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0),
            4,
        )
        .unwrap();
    let group = solicited_node(B6);
    for dst in [group, "ff02::1".parse().unwrap()] {
        let b = bare_syn(PEER6, dst);
        let o = dst.octets();
        let mac = MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]]);
        let f = frame6(mac, PEER6, dst, IpProtocol::Tcp, 64, &b);
        assert!(
            receive(&mut s, now, &f).is_empty(),
            "answered a SYN to {dst}"
        );
    }
    assert_eq!(c(&s, "Ip6", "InAddrErrors"), 2);
    assert_eq!(c(&s, "Tcp", "OutRsts"), 0);
}

#[test]
fn syn_from_a_source_with_no_route_back_is_dropped() {
    // Found by stack_receive (its inputs spent most of their time on it): a
    // SYN from `::`, or from an off-link address while no router is known,
    // made a SYN-RECEIVED child whose SYN-ACK could never leave; it retried
    // every 10 ms for ever and held a backlog slot. Linux's
    // `tcp_conn_request` drops such a SYN when `route_req` finds no route
    // (ListenDrops).
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    let _l = s
        .tcp_listen6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0), 4)
        .unwrap();
    let before = s.tcp_socket_count();
    let off_link: Ipv6Addr = "2001:db8:77::1".parse().unwrap();
    for src in [Ipv6Addr::UNSPECIFIED, off_link] {
        let b = bare_syn(src, B6);
        let f = frame6(B_MAC, src, B6, IpProtocol::Tcp, 64, &b);
        assert!(
            receive(&mut s, now, &f).is_empty(),
            "answered a SYN from {src}"
        );
        assert_eq!(s.tcp_socket_count(), before, "a child for a SYN from {src}");
    }
    assert_eq!(c(&s, "TcpExt", "ListenDrops"), 2);
    // Nothing left to do: no retry timer runs.
    assert!(s.poll_at().is_none_or(|t| t > now + Duration::from_secs(1)));
    // A SYN from the on-link peer still gets its SYN-ACK.
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Tcp, 64, &syn_bytes(None));
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    assert_eq!(s.tcp_socket_count(), before + 1);
}

#[test]
fn tcp_over_ipv6_is_refused_with_a_reset() {
    let (mut s, now) = stack_b();
    introduce_peer(&mut s, now);
    for (ack, want_seq, want_ack) in [(None, 0, Some(1001)), (Some(777), 777, None)] {
        let f = frame6(B_MAC, PEER6, B6, IpProtocol::Tcp, 64, &syn_bytes(ack));
        let out = receive(&mut s, now, &f);
        assert_eq!(out.len(), 1);
        let (_, ip, body) = &out[0];
        assert_eq!((ip.src, ip.dst), (B6, PEER6));
        let t = TcpPacket::new_checked(&body[..]).unwrap();
        let r = TcpRepr::parse(&t, ip.src, ip.dst, true).unwrap();
        assert!(r.rst && !r.syn);
        assert_eq!((r.src_port, r.dst_port), (80, 40000));
        assert_eq!(r.seq, SeqNum(want_seq));
        assert_eq!(r.ack, want_ack.map(SeqNum));
    }
    assert_eq!(c(&s, "Tcp", "OutRsts"), 2);
    // A RST is not answered.
    let rst = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: SeqNum(5),
        rst: true,
        ..TcpRepr::default()
    };
    let mut b = vec![0u8; rst.buffer_len()];
    rst.emit(&mut TcpPacket::new_unchecked(&mut b[..]), PEER6, B6, true);
    let f = frame6(B_MAC, PEER6, B6, IpProtocol::Tcp, 64, &b);
    assert!(receive(&mut s, now, &f).is_empty());
}
