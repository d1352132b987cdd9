//! Transparent mode over IPv6: a guest on fd00::/64 routes everything
//! through the engine (fd00::2); SYNs, datagrams and echo requests to any
//! unicast IPv6 destination surface to the application, whose answers come
//! "from" that destination.

mod stack_util;

use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};

use stack_util::*;
use ustack_core::time::Instant;
use ustack_core::{Refuse, Stack, TransparentConfig};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv4::DstUnreachable as Unreach4;
use ustack_wire::icmpv6::{DstUnreachable, Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Cidr, Ipv6Packet, Ipv6Repr};
use ustack_wire::ndisc::{NdiscOption, NdiscOptions, NdiscRepr};
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

const GW6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const GUEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100);
const FAR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const GUEST_MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 0]);

fn frame6(src: Ipv6Addr, dst: Ipv6Addr, nh: IpProtocol, hop: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + payload.len()];
    EthernetRepr {
        src: GUEST_MAC,
        dst: B_MAC,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        src,
        dst,
        next_header: nh,
        payload_len: payload.len(),
        hop_limit: hop,
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

fn syn_bytes(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq: SeqNum(1000),
        syn: true,
        window: 64000,
        max_seg_size: Some(1440),
        ..TcpRepr::default()
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut TcpPacket::new_unchecked(&mut b[..]), src, dst, true);
    b
}

/// What the stack sent: (IPv6 header, payload).
fn sent(out: &[Vec<u8>]) -> Vec<(Ipv6Repr, Vec<u8>)> {
    out.iter()
        .filter_map(|f| {
            let eth = EthernetFrame::new_checked(&f[..]).ok()?;
            let e = EthernetRepr::parse(&eth).ok()?;
            if e.ethertype != EtherType::Ipv6 {
                return None;
            }
            assert_eq!(e.dst, GUEST_MAC);
            let p = Ipv6Packet::new_checked(&f[14..]).ok()?;
            let r = Ipv6Repr::parse(&p).ok()?;
            Some((r, p.payload().to_vec()))
        })
        .collect()
}

fn receive(s: &mut Stack, now: Instant, f: &[u8]) -> Vec<(Ipv6Repr, Vec<u8>)> {
    let mut out = Vec::new();
    s.receive(now, f, &mut |x| out.push(x.to_vec()));
    s.poll(now, &mut |x| out.push(x.to_vec()));
    sent(&out)
}

fn flush(s: &mut Stack, now: Instant) -> Vec<(Ipv6Repr, Vec<u8>)> {
    let mut out = Vec::new();
    s.poll(now, &mut |x| out.push(x.to_vec()));
    sent(&out)
}

/// The engine of `ustack run`: transparent, owning fd00::2 and fd00::3,
/// with the guest's MAC learned from its solicitation of the gateway.
fn world() -> (Stack, Instant) {
    let now = Instant::from_secs(1);
    let mut s = Stack::new_transparent(config(B_MAC, B_IP, 2), TransparentConfig::default(), now);
    for a in [GW6, Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3)] {
        s.add_ipv6_address(Ipv6Cidr {
            address: a,
            prefix_len: 64,
        })
        .unwrap();
    }
    s.poll(now, &mut |_| {});
    let mut opts = [0u8; 8];
    NdiscOption::SourceLinkLayerAddr(&GUEST_MAC.0)
        .emit(&mut opts)
        .unwrap();
    let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target: GW6,
        options: NdiscOptions::new_checked(&opts).unwrap(),
    });
    let dst = solicited_node(GW6);
    let mut f = frame6(
        GUEST6,
        dst,
        IpProtocol::ICMPV6,
        255,
        &icmp6_bytes(GUEST6, dst, &ns),
    );
    f[0..6].copy_from_slice(&[0x33, 0x33, 0xff, 0, 0, 2]);
    let na = receive(&mut s, now, &f);
    assert_eq!(na.len(), 1, "the gateway's address is advertised");
    (s, now)
}

#[test]
fn syn_to_any_ipv6_destination_is_held_then_accepted() {
    let (mut s, now) = world();
    let syn = syn_bytes(GUEST6, FAR6, 40000, 443);
    assert!(receive(
        &mut s,
        now,
        &frame6(GUEST6, FAR6, IpProtocol::Tcp, 64, &syn)
    )
    .is_empty());
    let p = s.tcp_next_pending_syn().expect("held");
    assert_eq!(p.local, SocketAddr::V6(SocketAddrV6::new(FAR6, 443, 0, 0)));
    assert_eq!(
        p.remote,
        SocketAddr::V6(SocketAddrV6::new(GUEST6, 40000, 0, 0))
    );
    // A retransmission is absorbed silently.
    assert!(receive(
        &mut s,
        now,
        &frame6(GUEST6, FAR6, IpProtocol::Tcp, 64, &syn)
    )
    .is_empty());
    assert!(s.tcp_next_pending_syn().is_none());
    let h = s.tcp_accept_pending(now, p.id).unwrap();
    let out = flush(&mut s, now);
    assert_eq!(out.len(), 1);
    let (ip, tcp) = &out[0];
    assert_eq!(
        (ip.src, ip.dst, ip.next_header),
        (FAR6, GUEST6, IpProtocol::Tcp)
    );
    let seg = TcpRepr::parse(
        &TcpPacket::new_checked(&tcp[..]).unwrap(),
        FAR6,
        GUEST6,
        true,
    )
    .unwrap();
    assert!(seg.syn && seg.ack == Some(SeqNum(1001)));
    // RFC 8200 headers: the MSS offered is 20 bytes less than IPv4's.
    assert_eq!(seg.max_seg_size, Some(1500 - 60));
    let (l, r) = s.tcp_addrs(h).unwrap();
    assert_eq!((l, r), (p.local, p.remote));
}

#[test]
fn refused_ipv6_syns_get_rst_or_icmpv6_unreachable_from_the_destination() {
    let (mut s, now) = world();
    for (port, how) in [
        (1u16, Refuse::Rst),
        (2, Refuse::IcmpUnreachable(Unreach4::HostUnreachable)),
        (3, Refuse::IcmpUnreachable(Unreach4::NetUnreachable)),
    ] {
        let syn = syn_bytes(GUEST6, FAR6, 40000 + port, port);
        receive(
            &mut s,
            now,
            &frame6(GUEST6, FAR6, IpProtocol::Tcp, 64, &syn),
        );
        let p = s.tcp_next_pending_syn().expect("held");
        s.tcp_refuse_pending(now, p.id, how);
        let out = flush(&mut s, now);
        assert_eq!(out.len(), 1, "{how:?}");
        let (ip, body) = &out[0];
        assert_eq!((ip.src, ip.dst), (FAR6, GUEST6));
        match how {
            Refuse::Rst => {
                let seg = TcpRepr::parse(
                    &TcpPacket::new_checked(&body[..]).unwrap(),
                    FAR6,
                    GUEST6,
                    true,
                )
                .unwrap();
                assert!(seg.rst && seg.ack == Some(SeqNum(1001)));
            }
            Refuse::IcmpUnreachable(code) => {
                let pkt = Icmpv6Packet::new_checked(&body[..]).unwrap();
                match Icmpv6Repr::parse(&pkt, &FAR6, &GUEST6, true).unwrap() {
                    Icmpv6Repr::DstUnreachable {
                        reason,
                        header,
                        data,
                    } => {
                        let want = if code == Unreach4::NetUnreachable {
                            DstUnreachable::NoRoute
                        } else {
                            DstUnreachable::AddrUnreachable
                        };
                        assert_eq!(reason, want);
                        assert_eq!((header.src, header.dst), (GUEST6, FAR6));
                        assert_eq!(&data[0..2], &(40000 + port).to_be_bytes());
                        assert_eq!(&data[2..4], &port.to_be_bytes());
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }
    assert_eq!(counter(&s, "Icmp6", "OutDestUnreachs"), 2);
}

#[test]
fn udp_to_any_ipv6_destination_lands_on_the_catch_all_socket() {
    let (mut s, now) = world();
    let any = s.udp_bind_any().unwrap();
    let mut b = vec![0u8; 8 + 5];
    b[8..].copy_from_slice(b"query");
    UdpRepr {
        src_port: 5353,
        dst_port: 53,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut b[..]),
        GUEST6,
        FAR6,
        5,
        true,
    );
    assert!(receive(&mut s, now, &frame6(GUEST6, FAR6, IpProtocol::Udp, 64, &b)).is_empty());
    let mut buf = [0u8; 64];
    let (n, src, dst) = s.udp_recv_from_to(any, &mut buf).unwrap();
    let guest = SocketAddr::V6(SocketAddrV6::new(GUEST6, 5353, 0, 0));
    let far = SocketAddr::V6(SocketAddrV6::new(FAR6, 53, 0, 0));
    assert_eq!((&buf[..n], src, dst), (&b"query"[..], guest, far));
    s.udp_send_from(now, any, b"answer", far, guest).unwrap();
    let out = flush(&mut s, now);
    assert_eq!(out.len(), 1);
    let (ip, body) = &out[0];
    assert_eq!((ip.src, ip.dst), (FAR6, GUEST6));
    let pkt = UdpPacket::new_checked(&body[..]).unwrap();
    let r = UdpRepr::parse(&pkt, FAR6, GUEST6, true).unwrap();
    assert_eq!((r.src_port, r.dst_port), (53, 5353));
    assert_eq!(pkt.payload_ref(), b"answer");
    // Families must match.
    let v4 = SocketAddr::from(([10, 0, 2, 3], 53));
    assert!(s.udp_send_from(now, any, b"x", v4, guest).is_err());
}

/// A datagram for the guest larger than the link MTU (1500 here) leaves
/// in fragments (RFC 8200 4.5) that put it back together, as the IPv4
/// catch-all's do; before, `udp_send_from` refused it with `TooLarge`.
#[test]
fn a_datagram_larger_than_the_mtu_goes_to_the_guest_in_fragments() {
    use ustack_wire::ipv6ext::Ipv6FragmentRepr;
    let (mut s, now) = world();
    let any = s.udp_bind_any().unwrap();
    let guest = SocketAddr::V6(SocketAddrV6::new(GUEST6, 5353, 0, 0));
    let far = SocketAddr::V6(SocketAddrV6::new(FAR6, 53, 0, 0));
    let data: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(s.udp_send_from(now, any, &data, far, guest), Ok(data.len()));
    let out = flush(&mut s, now);
    assert_eq!(out.len(), 3, "4008 bytes of UDP in 1448-byte fragments");
    let mut whole = Vec::new();
    for (i, (ip, body)) in out.iter().enumerate() {
        assert_eq!((ip.src, ip.dst), (FAR6, GUEST6));
        assert_eq!(ip.next_header, IpProtocol::IPV6_FRAG);
        assert!(40 + body.len() <= 1500);
        let fh = Ipv6FragmentRepr::parse(body).unwrap();
        assert_eq!(fh.next_header, IpProtocol::Udp);
        assert_eq!(usize::from(fh.frag_offset), whole.len());
        assert_eq!(fh.more_frags, i < 2);
        whole.extend_from_slice(&body[8..]);
    }
    let pkt = UdpPacket::new_checked(&whole[..]).unwrap();
    let r = UdpRepr::parse(&pkt, FAR6, GUEST6, true).unwrap();
    assert_eq!((r.src_port, r.dst_port), (53, 5353));
    assert_eq!(pkt.payload_ref(), &data[..]);
    assert_eq!(counter(&s, "Ip6", "FragCreates"), 3);
    // More than a UDP length can say is refused.
    let big = vec![0u8; 65_528];
    assert!(s.udp_send_from(now, any, &big, far, guest).is_err());
}

#[test]
fn echo_requests_to_any_ipv6_address_surface_and_replies_come_from_it() {
    let (mut s, now) = world();
    for (dst, seq) in [(FAR6, 1u16), (GW6, 2)] {
        let req = Icmpv6Repr::EchoRequest {
            ident: 9,
            seq_no: seq,
            data: b"ping6",
        };
        let f = frame6(
            GUEST6,
            dst,
            IpProtocol::ICMPV6,
            64,
            &icmp6_bytes(GUEST6, dst, &req),
        );
        assert!(
            receive(&mut s, now, &f).is_empty(),
            "not answered by itself"
        );
    }
    let mut buf = [0u8; 64];
    let r1 = s.icmp_echo_request_recv(&mut buf).unwrap();
    assert_eq!(
        (r1.src, r1.dst, r1.ident, r1.seq),
        (IpAddr::V6(GUEST6), IpAddr::V6(FAR6), 9, 1)
    );
    assert_eq!(&buf[..r1.len], b"ping6");
    let r2 = s.icmp_echo_request_recv(&mut buf).unwrap();
    assert_eq!(r2.dst, IpAddr::V6(GW6));
    s.icmp_echo_reply_from(now, FAR6, GUEST6, 9, 1, b"ping6")
        .unwrap();
    s.icmp_unreachable_for_echo(now, GW6, GUEST6, 9, 2, b"ping6", Unreach4::AdminProhibited)
        .unwrap();
    let out = flush(&mut s, now);
    assert_eq!(out.len(), 2);
    let reply = Icmpv6Repr::parse(
        &Icmpv6Packet::new_checked(&out[0].1[..]).unwrap(),
        &FAR6,
        &GUEST6,
        true,
    )
    .unwrap();
    assert_eq!(
        reply,
        Icmpv6Repr::EchoReply {
            ident: 9,
            seq_no: 1,
            data: b"ping6"
        }
    );
    assert_eq!(out[0].0.src, FAR6);
    match Icmpv6Repr::parse(
        &Icmpv6Packet::new_checked(&out[1].1[..]).unwrap(),
        &GW6,
        &GUEST6,
        true,
    )
    .unwrap()
    {
        Icmpv6Repr::DstUnreachable { reason, header, .. } => {
            assert_eq!(reason, DstUnreachable::AdminProhibited);
            assert_eq!((header.src, header.dst), (GUEST6, GW6));
        }
        other => panic!("{other:?}"),
    }
    // Mixed families are refused.
    assert!(s
        .icmp_echo_reply_from(now, FAR6, std::net::Ipv4Addr::new(10, 0, 2, 15), 9, 1, b"")
        .is_err());
}
