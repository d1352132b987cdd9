//! IPv6 fragments (RFC 8200 4.5: fragmentation on send, reassembly with
//! RFC 5722 overlaps, RFC 6946 atomic fragments, RFC 7112 first
//! fragments, the 60-second timeout and hard limits), Packet Too Big
//! (RFC 8201, validated against the connection) and ICMPv6 errors reaching
//! sockets, and the ICMPv6 error bucket apart from ICMPv4's.

mod stack_util;

use std::net::{Ipv6Addr, SocketAddrV4, SocketAddrV6};

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::{Duration, Instant};
use ustack_core::{ReasmLimits, Stack, TcpError, TcpHandle, UdpError};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{
    DstUnreachable, Icmpv6Packet, Icmpv6Repr, ParamProblem, TimeExceeded, ICMPV6_ERROR_MAX_LEN,
};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Packet, Ipv6Repr};
use ustack_wire::ipv6ext::Ipv6FragmentRepr;
use ustack_wire::ndisc::{NdiscOption, NdiscOptions, NdiscRepr};
use ustack_wire::tcp::TcpPacket;
use ustack_wire::udp::{UdpPacket, UdpRepr};

fn c(s: &Stack, group: &str, name: &str) -> u64 {
    counter(s, group, name)
}

/// Stack B alone with fd00::2/64 that knows the peer's MAC.
fn stack_b(cfg: impl FnOnce(&mut ustack_core::Config)) -> (Stack, Instant) {
    let now = Instant::from_secs(1);
    let mut conf = config(B_MAC, B_IP, 2);
    cfg(&mut conf);
    let mut s = Stack::new(conf, now);
    s.add_ipv6_address(cidr(B6)).unwrap();
    s.poll(now, &mut |_| {});
    let mut opts = [0u8; 8];
    NdiscOption::SourceLinkLayerAddr(&PEER_MAC.0)
        .emit(&mut opts)
        .unwrap();
    let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target: B6,
        options: NdiscOptions::new_checked(&opts).unwrap(),
    });
    let g = solicited_node(B6);
    let f = frame6(g, IpProtocol::ICMPV6, 255, &icmp6_bytes(PEER6, g, &ns));
    assert_eq!(receive(&mut s, now, &f).len(), 1);
    (s, now)
}

/// A frame from the peer to `dst` with `payload` after the fixed header.
fn frame6(dst: Ipv6Addr, next_header: IpProtocol, hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + payload.len()];
    let dst_mac = if dst.is_multicast() {
        let o = dst.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    } else {
        B_MAC
    };
    EthernetRepr {
        src: PEER_MAC,
        dst: dst_mac,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        src: PEER6,
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

/// A fragment of `whole` (the fragmentable part) from the peer to B.
fn frag(ident: u32, offset: usize, more: bool, next: IpProtocol, chunk: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 8];
    Ipv6FragmentRepr {
        next_header: next,
        frag_offset: offset as u16,
        more_frags: more,
        ident,
    }
    .emit(&mut p)
    .unwrap();
    p.extend_from_slice(chunk);
    frame6(B6, IpProtocol::IPV6_FRAG, 64, &p)
}

/// (IPv6 header, payload) of every IPv6 frame in `out`.
fn sent(out: &[Vec<u8>]) -> Vec<(Ipv6Repr, Vec<u8>)> {
    out.iter()
        .filter_map(|f| {
            let eth = EthernetFrame::new_checked(&f[..]).ok()?;
            if EthernetRepr::parse(&eth).ok()?.ethertype != EtherType::Ipv6 {
                return None;
            }
            let p = Ipv6Packet::new_checked(&f[14..]).ok()?;
            Some((Ipv6Repr::parse(&p).ok()?, p.payload().to_vec()))
        })
        .collect()
}

fn receive(s: &mut Stack, now: Instant, f: &[u8]) -> Vec<(Ipv6Repr, Vec<u8>)> {
    let mut out = Vec::new();
    s.receive(now, f, &mut |x| out.push(x.to_vec()));
    s.poll(now, &mut |x| out.push(x.to_vec()));
    sent(&out)
}

fn parse_icmp(src: Ipv6Addr, dst: Ipv6Addr, b: &[u8]) -> Icmpv6Repr<'_> {
    let p = Icmpv6Packet::new_checked(b).unwrap();
    match Icmpv6Repr::parse(&p, &src, &dst, true) {
        Ok(r) => r,
        Err(e) => panic!("{e:?} parsing {} bytes {:?}", b.len(), &b[..8]),
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn udp_larger_than_the_mtu_goes_in_fragments_and_comes_back_whole() {
    let mut n = net6();
    let srv = n.b.udp6_bind(SocketAddrV6::new(B6, 7, 0, 0)).unwrap();
    let cli = n.a.udp6_bind(SocketAddrV6::new(A6, 5000, 0, 0)).unwrap();
    let data = pattern(8000);
    let dst = SocketAddrV6::new(B6, 7, 0, 0);
    assert_eq!(n.a.udp6_send_to(n.now, cli, &data, dst), Ok(8000));
    n.pump();
    let mut buf = vec![0u8; 70_000];
    let (len, from) = n.b.udp6_recv_from(srv, &mut buf).unwrap();
    assert_eq!(&buf[..len], &data[..], "byte-exact after reassembly");
    assert_eq!(from, SocketAddrV6::new(A6, 5000, 0, 0));
    // On the wire: fragments within the 1500-byte MTU, a Fragment header
    // right after the fixed header, 8-byte multiples but the last, one
    // identification.
    let frags: Vec<_> = sent(&n.log_ab)
        .into_iter()
        .filter(|(ip, _)| ip.next_header == IpProtocol::IPV6_FRAG)
        .collect();
    assert_eq!(frags.len(), 6, "8008 bytes in 1448-byte pieces");
    let mut idents = Vec::new();
    let mut next_off = 0;
    for (i, (ip, p)) in frags.iter().enumerate() {
        assert!(40 + p.len() <= 1500);
        let fh = Ipv6FragmentRepr::parse(p).unwrap();
        assert_eq!(fh.next_header, IpProtocol::Udp);
        assert_eq!(usize::from(fh.frag_offset), next_off);
        assert_eq!(fh.more_frags, i + 1 < frags.len());
        if fh.more_frags {
            assert_eq!((p.len() - 8) % 8, 0);
        }
        next_off += p.len() - 8;
        idents.push(fh.ident);
        assert_eq!(ip.src, A6);
    }
    assert_eq!(next_off, 8008);
    assert!(idents.iter().all(|&i| i == idents[0]));
    assert_eq!(c(&n.a, "Ip6", "FragOKs"), 1);
    assert_eq!(c(&n.a, "Ip6", "FragCreates"), 6);
    assert_eq!(c(&n.b, "Ip6", "ReasmReqds"), 6);
    assert_eq!(c(&n.b, "Ip6", "ReasmOKs"), 1);
    assert_eq!(c(&n.b, "Ip6", "ReasmFails"), 0);
    assert_eq!(c(&n.b, "Udp6", "InDatagrams"), 1);
    assert_eq!(n.b.reassembly_datagrams6(), 0);
    assert_eq!(n.b.reassembly_memory6(), 0);

    // And back, the largest UDP datagram IPv6 carries.
    let big = pattern(65_527);
    assert_eq!(n.b.udp6_send_to(n.now, srv, &big, from), Ok(65_527));
    n.pump();
    let (len, _) = n.a.udp6_recv_from(cli, &mut buf).unwrap();
    assert_eq!(&buf[..len], &big[..]);
    assert_eq!(
        n.b.udp6_send_to(n.now, srv, &pattern(65_528), from),
        Err(UdpError::TooLarge)
    );
    // A new datagram has another identification (RFC 7739: not a
    // counter a peer can predict; here, at least not the same).
    n.a.udp6_send_to(n.now, cli, &data, dst).unwrap();
    n.pump();
    let last = sent(&n.log_ab)
        .into_iter()
        .rev()
        .find(|(ip, _)| ip.next_header == IpProtocol::IPV6_FRAG)
        .unwrap();
    let id2 = Ipv6FragmentRepr::parse(&last.1).unwrap().ident;
    assert_ne!(id2, idents[0]);
    assert_ne!(id2, idents[0].wrapping_add(1));
}

#[test]
fn out_of_order_and_duplicate_fragments_reassemble() {
    let (mut s, now) = stack_b(|_| {});
    let h = s.udp6_bind(SocketAddrV6::new(B6, 9, 0, 0)).unwrap();
    let udp = udp6_bytes(PEER6, B6, 9, &pattern(3000));
    let parts = [
        (1200, &udp[1200..2400]),
        (2400, &udp[2400..]),
        (0, &udp[..1200]),
    ];
    for (i, (off, chunk)) in parts.iter().enumerate() {
        let more = *off != 2400;
        let f = frag(0x1234, *off, more, IpProtocol::Udp, chunk);
        if i == 0 {
            // A duplicate of a piece is ignored.
            assert!(receive(&mut s, now, &f).is_empty());
        }
        assert!(receive(&mut s, now, &f).is_empty());
    }
    let mut buf = vec![0u8; 4000];
    let (len, _) = s.udp6_recv_from(h, &mut buf).unwrap();
    assert_eq!(&buf[..len], &pattern(3000)[..]);
    assert_eq!(c(&s, "Ip6", "ReasmOKs"), 1);
    assert_eq!(c(&s, "Ip6", "ReasmReqds"), 4);
}

#[test]
fn overlapping_fragments_drop_the_whole_datagram() {
    let (mut s, now) = stack_b(|_| {});
    let h = s.udp6_bind(SocketAddrV6::new(B6, 9, 0, 0)).unwrap();
    let udp = udp6_bytes(PEER6, B6, 9, &pattern(40));
    // [0, 16) then [8, 24): overlap (RFC 5722: drop the datagram and any
    // of its fragments still to come).
    assert!(receive(&mut s, now, &frag(7, 0, true, IpProtocol::Udp, &udp[..16])).is_empty());
    assert!(receive(&mut s, now, &frag(7, 8, true, IpProtocol::Udp, &udp[8..24])).is_empty());
    assert_eq!(c(&s, "Ip6", "ReasmFails"), 1);
    // The pieces that would have completed it change nothing.
    assert!(receive(
        &mut s,
        now,
        &frag(7, 16, false, IpProtocol::Udp, &udp[16..])
    )
    .is_empty());
    assert!(receive(&mut s, now, &frag(7, 0, true, IpProtocol::Udp, &udp[..16])).is_empty());
    let mut buf = [0u8; 64];
    assert_eq!(s.udp6_recv_from(h, &mut buf), Err(UdpError::WouldBlock));
    assert_eq!(c(&s, "Ip6", "ReasmOKs"), 0);
    assert_eq!(c(&s, "Ip6", "ReasmFails"), 1, "counted once per datagram");
    // A dead datagram sends no time exceeded when it goes.
    let mut out = Vec::new();
    s.poll(now + Duration::from_secs(61), &mut |f| out.push(f.to_vec()));
    assert!(sent(&out).is_empty());
    assert_eq!(s.reassembly_datagrams6(), 0);
}

#[test]
fn atomic_fragment_is_processed_as_a_whole_packet() {
    let (mut s, now) = stack_b(|_| {});
    let h = s.udp6_bind(SocketAddrV6::new(B6, 9, 0, 0)).unwrap();
    let udp = udp6_bytes(PEER6, B6, 9, b"atomic");
    // Another datagram with the same identification is being reassembled:
    // the atomic fragment must not join it (RFC 6946 4).
    let other = udp6_bytes(PEER6, B6, 9, &pattern(64));
    assert!(receive(
        &mut s,
        now,
        &frag(5, 0, true, IpProtocol::Udp, &other[..32])
    )
    .is_empty());
    assert!(receive(&mut s, now, &frag(5, 0, false, IpProtocol::Udp, &udp)).is_empty());
    let mut buf = [0u8; 64];
    let (len, _) = s.udp6_recv_from(h, &mut buf).unwrap();
    assert_eq!(&buf[..len], b"atomic");
    assert_eq!(c(&s, "Ip6", "ReasmReqds"), 1);
    assert_eq!(s.reassembly_datagrams6(), 1);
}

#[test]
fn bad_fragments_get_parameter_problems() {
    let (mut s, now) = stack_b(|_| {});
    let _h = s.udp6_bind(SocketAddrV6::new(B6, 9, 0, 0)).unwrap();
    let udp = udp6_bytes(PEER6, B6, 9, &pattern(40));
    // M set and 12 bytes: code 0 pointing at the Payload Length.
    let f = frag(1, 0, true, IpProtocol::Udp, &udp[..12]);
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1);
    match parse_icmp(B6, PEER6, &out[0].1) {
        Icmpv6Repr::ParamProblem {
            reason, pointer, ..
        } => assert_eq!((reason, pointer), (ParamProblem::ErroneousHeaderField, 4)),
        other => panic!("{other:?}"),
    }
    // Past 65535 bytes once reassembled: code 0 at the Fragment Offset.
    let f = frag(2, 65528, false, IpProtocol::Udp, &udp[..16]);
    let out = receive(&mut s, now, &f);
    match parse_icmp(B6, PEER6, &out[0].1) {
        Icmpv6Repr::ParamProblem {
            reason, pointer, ..
        } => assert_eq!((reason, pointer), (ParamProblem::ErroneousHeaderField, 42)),
        other => panic!("{other:?}"),
    }
    // A first fragment that ends inside the TCP header (RFC 7112): code 3,
    // pointer 0.
    let f = frag(3, 0, true, IpProtocol::Tcp, &[0u8; 16]);
    let out = receive(&mut s, now, &f);
    match parse_icmp(B6, PEER6, &out[0].1) {
        Icmpv6Repr::ParamProblem {
            reason, pointer, ..
        } => assert_eq!((reason, pointer), (ParamProblem::IncompleteHeaderChain, 0)),
        other => panic!("{other:?}"),
    }
    // ... and one that ends inside a Destination Options header.
    let mut dopt = vec![IpProtocol::Udp.into(), 1, 1, 12];
    dopt.extend_from_slice(&[0u8; 12]);
    let f = frag(4, 0, true, IpProtocol::IPV6_OPTS, &dopt[..8]);
    let out = receive(&mut s, now, &f);
    match parse_icmp(B6, PEER6, &out[0].1) {
        Icmpv6Repr::ParamProblem { reason, .. } => {
            assert_eq!(reason, ParamProblem::IncompleteHeaderChain)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c(&s, "Ip6", "InHdrErrors"), 4);
    assert_eq!(c(&s, "Icmp6", "OutParmProblems"), 4);
    assert_eq!(s.reassembly_datagrams6(), 0, "none of them was kept");
}

#[test]
fn timeout_sends_time_exceeded_only_with_the_first_fragment() {
    let (mut s, now) = stack_b(|_| {});
    let udp = udp6_bytes(PEER6, B6, 9, &pattern(3000));
    // Datagram 1: the first fragment only. Datagram 2: a later one only.
    assert!(receive(
        &mut s,
        now,
        &frag(1, 0, true, IpProtocol::Udp, &udp[..1200])
    )
    .is_empty());
    assert!(receive(
        &mut s,
        now,
        &frag(2, 1200, true, IpProtocol::Udp, &udp[..8])
    )
    .is_empty());
    assert_eq!(s.reassembly_datagrams6(), 2);
    let mut out = Vec::new();
    s.poll(now + Duration::from_millis(59_999), &mut |f| {
        out.push(f.to_vec())
    });
    assert!(out.is_empty(), "RFC 8200: 60 seconds");
    assert_eq!(s.poll_at(), Some(now + Duration::from_secs(60)));
    s.poll(now + Duration::from_secs(60), &mut |f| out.push(f.to_vec()));
    // The peer's neighbour entry has aged out meanwhile: the error waits
    // for its advertisement.
    let mut tll = [0u8; 8];
    NdiscOption::TargetLinkLayerAddr(&PEER_MAC.0)
        .emit(&mut tll)
        .unwrap();
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: ustack_wire::ndisc::na_flags::SOLICITED | ustack_wire::ndisc::na_flags::OVERRIDE,
        target: PEER6,
        options: NdiscOptions::new_checked(&tll).unwrap(),
    });
    let f = frame6(B6, IpProtocol::ICMPV6, 255, &icmp6_bytes(PEER6, B6, &na));
    let t = now + Duration::from_secs(60);
    s.receive(t, &f, &mut |f| out.push(f.to_vec()));
    let out: Vec<_> = sent(&out)
        .into_iter()
        .filter(|(_, p)| p.first().is_some_and(|&t| t < 128))
        .collect();
    assert_eq!(out.len(), 1);
    match parse_icmp(B6, PEER6, &out[0].1) {
        Icmpv6Repr::TimeExceeded {
            reason,
            header,
            data,
        } => {
            assert_eq!(reason, TimeExceeded::FragReassemblyExceeded);
            assert_eq!((header.src, header.dst), (PEER6, B6));
            assert_eq!(header.next_header, IpProtocol::IPV6_FRAG);
            // As much of the first fragment as fits in 1280 bytes.
            assert_eq!(8 + 40 + data.len(), ICMPV6_ERROR_MAX_LEN);
            assert_eq!(&data[8..40], &udp[..32]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c(&s, "Ip6", "ReasmTimeout"), 2);
    assert_eq!(c(&s, "Ip6", "ReasmFails"), 2);
    assert_eq!(c(&s, "Icmp6", "OutTimeExcds"), 1);
    assert_eq!(s.reassembly_datagrams6(), 0);
    assert_eq!(s.reassembly_memory6(), 0);
}

#[test]
fn reassembly_is_bounded_in_datagrams_and_memory() {
    let (mut s, mut now) = stack_b(|c| {
        c.limits.reasm6 = ReasmLimits {
            max_datagrams: 32,
            mem_limit: 64 * 1024,
            ..ReasmLimits::ipv6()
        };
    });
    let chunk = pattern(1400 & !7);
    for i in 0..2000u32 {
        let off = 8 + (i as usize % 40) * 8;
        let _ = receive(&mut s, now, &frag(i, off, true, IpProtocol::Udp, &chunk));
        assert!(s.reassembly_datagrams6() <= 32);
        assert!(s.reassembly_memory6() <= 64 * 1024);
        now += Duration::from_millis(1);
    }
    assert!(c(&s, "Ip6", "ReasmFails") >= 2000 - 32);
    // One datagram of many small pieces stops at 64 fragments.
    let (mut s, now) = stack_b(|_| {});
    for k in 0..100usize {
        let _ = receive(
            &mut s,
            now,
            &frag(9, 8 + k * 8, true, IpProtocol::Udp, &[0; 8]),
        );
    }
    assert_eq!(c(&s, "Ip6", "ReasmFails"), 1);
    assert!(s.reassembly_memory6() < 4096);
}

/// Packet Too Big from a router for the packet `quoted` (IPv6 header and
/// payload as A sent it), to A.
fn ptb_to_a(mtu: u32, quoted: &[u8]) -> Vec<u8> {
    let (header, data) = Ipv6Repr::parse_quoted(quoted).unwrap();
    let room = ICMPV6_ERROR_MAX_LEN - 48;
    let repr = Icmpv6Repr::PacketTooBig {
        mtu,
        header,
        data: &data[..data.len().min(room)],
    };
    let router = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xfe);
    let body = icmp6_bytes(router, A6, &repr);
    let mut f = vec![0u8; 54 + body.len()];
    EthernetRepr {
        src: B_MAC,
        dst: A_MAC,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        src: router,
        dst: A6,
        next_header: IpProtocol::ICMPV6,
        payload_len: body.len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    f[54..].copy_from_slice(&body);
    f
}

fn establish6(n: &mut Net) -> (TcpHandle, TcpHandle) {
    let l = n.b.tcp_listen6(SocketAddrV6::new(B6, 80, 0, 0), 8).unwrap();
    let cl =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 80, 0, 0), None)
            .unwrap();
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(10), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(l).unwrap();
        }
        server.is_some() && n.a.tcp_status(cl).unwrap().state == State::Established
    }));
    (cl, server.unwrap())
}

/// A's TCP data segments to B in the log, as (IPv6 packet bytes, seq, len).
fn a_data_segments(n: &Net) -> Vec<(Vec<u8>, u32, usize)> {
    n.log_ab
        .iter()
        .filter_map(|f| {
            let p = Ipv6Packet::new_checked(f.get(14..)?).ok()?;
            if p.next_header() != IpProtocol::Tcp {
                return None;
            }
            let t = TcpPacket::new_checked(p.payload()).ok()?;
            let len = t.payload().len();
            (len > 0).then(|| (f[14..].to_vec(), t.seq_number().0, len))
        })
        .collect()
}

#[test]
fn packet_too_big_lowers_the_mss_of_the_connection_and_retransmits() {
    let mut n = net6();
    let (cl, sv) = establish6(&mut n);
    assert_eq!(n.a.tcp_info(cl).unwrap().smss, 1440);
    // Another connection to the same destination, idle.
    let other =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 80, 0, 0), None)
            .unwrap();
    n.pump();
    assert_eq!(n.a.tcp_info(other).unwrap().smss, 1440);
    // B stops hearing A: data stays in flight.
    n.filter_ab = Some(Box::new(|f| {
        Ipv6Packet::new_checked(&f[14..]).map_or(true, |p| p.payload_len() < 100)
    }));
    let data = pattern(20_000);
    n.a.tcp_send(cl, &data).unwrap();
    n.pump();
    let segs = a_data_segments(&n);
    assert!(!segs.is_empty());
    let (pkt, _, _) = segs[0].clone();
    let before = c(&n.a, "Tcp", "RetransSegs");
    // A report quoting a sequence number outside SND.UNA..SND.NXT is
    // dropped (RFC 5927 4.1), whatever it says.
    let mut stale = pkt.clone();
    let seq_at = 40 + 4;
    let bogus =
        u32::from_be_bytes(stale[seq_at..seq_at + 4].try_into().unwrap()).wrapping_add(1 << 30);
    stale[seq_at..seq_at + 4].copy_from_slice(&bogus.to_be_bytes());
    let f = ptb_to_a(1300, &stale);
    n.a.receive(n.now, &f, &mut |_| {});
    assert_eq!(n.a.tcp_info(cl).unwrap().smss, 1440);
    assert_eq!(n.a.path_mtu6(n.now, B6), None);
    assert_eq!(c(&n.a, "TcpExt", "OutOfWindowIcmps"), 1);
    // A valid one: the MSS follows the path (1300 - 60), what no longer
    // fits is sent again at once, and the path MTU is remembered.
    let f = ptb_to_a(1300, &pkt);
    n.a.receive(n.now, &f, &mut |_| {});
    assert_eq!(n.a.tcp_info(cl).unwrap().smss, 1240);
    assert_eq!(n.a.tcp_info(other).unwrap().smss, 1240, "same path");
    assert_eq!(n.a.path_mtu6(n.now, B6), Some(1300));
    assert_eq!(c(&n.a, "Icmp6", "InPktTooBigs"), 2);
    n.log_ab.clear();
    n.filter_ab = None;
    n.pump();
    assert!(c(&n.a, "Tcp", "RetransSegs") > before);
    for f in &n.log_ab {
        assert!(
            f.len() - 14 <= 1300,
            "{} bytes on a 1300-byte path",
            f.len() - 14
        );
    }
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    assert!(n.run_until(Duration::from_secs(30), |n| {
        while let Ok(k) = n.b.tcp_recv(sv, &mut buf) {
            if k == 0 {
                break;
            }
            got.extend_from_slice(&buf[..k]);
        }
        got.len() == data.len()
    }));
    assert_eq!(got, data);
    // Below 1280 is taken as 1280 (RFC 8201 4); a new connection to B
    // starts with the MSS the path allows.
    n.filter_ab = Some(Box::new(|f| {
        Ipv6Packet::new_checked(&f[14..]).map_or(true, |p| p.payload_len() < 100)
    }));
    n.log_ab.clear();
    n.a.tcp_send(cl, &data[..5000]).unwrap();
    n.pump();
    let (pkt, _, _) = a_data_segments(&n)[0].clone();
    n.a.receive(n.now, &ptb_to_a(600, &pkt), &mut |_| {});
    assert_eq!(n.a.path_mtu6(n.now, B6), Some(1280));
    assert_eq!(n.a.tcp_info(cl).unwrap().smss, 1220);
    n.filter_ab = None;
    let cl2 =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 80, 0, 0), None)
            .unwrap();
    n.pump();
    assert_eq!(n.a.tcp_status(cl2).unwrap().state, State::Established);
    assert_eq!(n.a.tcp_info(cl2).unwrap().smss, 1220);
}

#[test]
fn packet_too_big_makes_later_udp_datagrams_fragment_at_the_path_mtu() {
    let mut n = net6();
    let _srv = n.b.udp6_bind(SocketAddrV6::new(B6, 7, 0, 0)).unwrap();
    let cli = n.a.udp6_bind(SocketAddrV6::new(A6, 5000, 0, 0)).unwrap();
    let dst = SocketAddrV6::new(B6, 7, 0, 0);
    n.a.udp6_send_to(n.now, cli, &pattern(1400), dst).unwrap();
    n.pump();
    let first = n
        .log_ab
        .iter()
        .rev()
        .find(|f| f.len() > 1400)
        .unwrap()
        .clone();
    assert_eq!(c(&n.a, "Ip6", "FragOKs"), 0);
    n.a.receive(n.now, &ptb_to_a(1280, &first[14..]), &mut |_| {});
    assert_eq!(n.a.path_mtu6(n.now, B6), Some(1280));
    n.log_ab.clear();
    n.a.udp6_send_to(n.now, cli, &pattern(1400), dst).unwrap();
    n.pump();
    let frags: Vec<_> = sent(&n.log_ab)
        .into_iter()
        .filter(|(ip, _)| ip.next_header == IpProtocol::IPV6_FRAG)
        .collect();
    assert_eq!(frags.len(), 2);
    assert!(frags.iter().all(|(_, p)| 40 + p.len() <= 1280));
    assert_eq!(c(&n.a, "Ip6", "FragOKs"), 1);
    // A report about a port no socket of ours sends from teaches nothing.
    let mut other = first[14..].to_vec();
    other[40..42].copy_from_slice(&6000u16.to_be_bytes());
    let c_dst = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);
    other[24..40].copy_from_slice(&c_dst.octets());
    n.a.receive(n.now, &ptb_to_a(1280, &other), &mut |_| {});
    assert_eq!(n.a.path_mtu6(n.now, c_dst), None);
}

#[test]
fn icmpv6_errors_reach_connected_udp_and_opening_tcp() {
    let mut n = net6();
    // UDP: B has nothing on port 7, its port unreachable reaches A's
    // connected socket as ECONNREFUSED on the next send.
    let cli = n.a.udp6_bind(SocketAddrV6::new(A6, 5000, 0, 0)).unwrap();
    n.a.udp6_connect(cli, SocketAddrV6::new(B6, 7, 0, 0))
        .unwrap();
    n.a.udp_send_addr(n.now, cli, b"anyone?").unwrap();
    n.pump();
    assert_eq!(c(&n.b, "Icmp6", "OutDestUnreachs"), 1);
    assert_eq!(
        n.a.udp_send_addr(n.now, cli, b"again"),
        Err(UdpError::ConnectionRefused)
    );
    assert_eq!(n.a.udp_send_addr(n.now, cli, b"again"), Ok(5));
    // TCP: a SYN answered by an administratively prohibited is a soft
    // error (the connection keeps trying, as Linux), a port unreachable
    // aborts it with ECONNREFUSED.
    n.filter_ab = Some(Box::new(|_| false));
    let h =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 81, 0, 0), None)
            .unwrap();
    n.pump();
    let syn = n.log_ab.last().unwrap()[14..].to_vec();
    let unreach = |reason, quoted: &[u8]| {
        let (header, data) = Ipv6Repr::parse_quoted(quoted).unwrap();
        let repr = Icmpv6Repr::DstUnreachable {
            reason,
            header,
            data,
        };
        let body = icmp6_bytes(B6, A6, &repr);
        let mut f = vec![0u8; 54 + body.len()];
        EthernetRepr {
            src: B_MAC,
            dst: A_MAC,
            ethertype: EtherType::Ipv6,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
        Ipv6Repr {
            src: B6,
            dst: A6,
            next_header: IpProtocol::ICMPV6,
            payload_len: body.len(),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
        f[54..].copy_from_slice(&body);
        f
    };
    n.a.receive(
        n.now,
        &unreach(DstUnreachable::AdminProhibited, &syn),
        &mut |_| {},
    );
    assert_eq!(n.a.tcp_status(h).unwrap().state, State::SynSent);
    n.a.receive(
        n.now,
        &unreach(DstUnreachable::PortUnreachable, &syn),
        &mut |_| {},
    );
    let st = n.a.tcp_status(h).unwrap();
    assert_eq!(st.pending_error, Some(TcpError::ConnectionRefused));
    assert_eq!(c(&n.a, "Icmp6", "InDestUnreachs"), 3);
}

#[test]
fn icmpv6_errors_have_a_rate_limit_apart_from_icmpv4() {
    let (mut s, now) = stack_b(|c| {
        c.limits.icmp_error_rate = 1;
        c.limits.icmp_error_burst = 2;
    });
    // Empty the ICMPv4 bucket with UDP to closed IPv4 ports.
    let src = std::net::Ipv4Addr::new(10, 0, 0, 9);
    for _ in 0..4 {
        let repr = ustack_wire::ipv4::Ipv4Repr {
            src,
            dst: B_IP,
            protocol: IpProtocol::Udp,
            payload_len: 12,
            ttl: 64,
            dscp_ecn: 0,
            ident: 1,
            dont_frag: false,
            more_frags: false,
            frag_offset: 0,
        };
        let mut u = vec![0u8; 12];
        UdpRepr {
            src_port: 1,
            dst_port: 9,
        }
        .emit(
            &mut UdpPacket::new_unchecked(&mut u[..]),
            src,
            B_IP,
            4,
            true,
        );
        let f = frame(PEER_MAC, B_MAC, &repr, &u);
        s.receive(now, &f, &mut |_| {});
    }
    assert_eq!(c(&s, "Icmp", "OutRateLimited"), 2);
    // ICMPv6 still has its burst.
    for _ in 0..3 {
        let udp = udp6_bytes(PEER6, B6, 9, b"x");
        let _ = receive(&mut s, now, &frame6(B6, IpProtocol::Udp, 64, &udp));
    }
    assert_eq!(c(&s, "Icmp6", "OutDestUnreachs"), 2);
    assert_eq!(c(&s, "Icmp6", "OutRateLimited"), 1);
    let _ = SocketAddrV4::new(B_IP, 0);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Fragments of two datagrams (first, middle, last of each, and an
    /// overlapping piece), the frames mutated.
    fn corpus() -> Vec<Vec<u8>> {
        let udp = udp6_bytes(PEER6, B6, 9, &pattern(2000));
        let mut v = Vec::new();
        for id in [11u32, 12] {
            v.push(frag(id, 0, true, IpProtocol::Udp, &udp[..800]));
            v.push(frag(id, 800, true, IpProtocol::Udp, &udp[800..1600]));
            v.push(frag(id, 1600, false, IpProtocol::Udp, &udp[1600..]));
            v.push(frag(id, 400, true, IpProtocol::Udp, &udp[400..1200]));
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever fragments come, in whatever order, mutated or cut:
        /// no panic, memory within the limit, every frame sent back
        /// well-formed.
        #[test]
        fn mutated_fragments_never_panic_and_stay_bounded(
            picks in prop::collection::vec((0usize..8, prop::collection::vec((any::<u16>(), any::<u8>()), 0..4), any::<u16>()), 1..24)
        ) {
            let corpus = corpus();
            let (mut s, mut now) = stack_b(|c| {
                c.limits.reasm6 = ReasmLimits {
                    mem_limit: 16 * 1024,
                    max_datagrams: 4,
                    ..ReasmLimits::ipv6()
                };
            });
            let h = s.udp6_bind(SocketAddrV6::new(B6, 9, 0, 0)).unwrap();
            for (i, muts, cut) in picks {
                let mut f = corpus[i].clone();
                for (at, v) in muts {
                    let at = 14 + usize::from(at) % (f.len() - 14);
                    f[at] = v;
                }
                if cut % 5 == 0 {
                    let keep = 14 + usize::from(cut) % (f.len() - 13);
                    f.truncate(keep);
                }
                let mut out = Vec::new();
                s.receive(now, &f, &mut |x| out.push(x.to_vec()));
                now += Duration::from_millis(u64::from(cut % 20_000));
                s.poll(now, &mut |x| out.push(x.to_vec()));
                prop_assert!(s.reassembly_memory6() <= 16 * 1024);
                prop_assert!(s.reassembly_datagrams6() <= 4);
                for (ip, p) in sent(&out) {
                    prop_assert_eq!(ip.src, B6);
                    prop_assert!(40 + p.len() <= 1500);
                    if ip.next_header == IpProtocol::ICMPV6 {
                        let c = Icmpv6Packet::new_checked(&p[..]).unwrap();
                        prop_assert!(c.verify_checksum(&ip.src, &ip.dst));
                    }
                }
                let mut buf = vec![0u8; 4096];
                // (Whatever was delivered passed the UDP checksum.)
                while s.udp6_recv_from(h, &mut buf).is_ok() {}
            }
        }
    }
}
