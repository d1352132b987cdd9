//! UDP through two wired `Stack`s.

mod stack_util;

use std::net::SocketAddrV4;

use stack_util::*;
use ustack_core::time::Duration;
use ustack_core::{BindError, UdpError, EPHEMERAL_FIRST, EPHEMERAL_LAST};
use ustack_wire::ip::IpProtocol;
use ustack_wire::udp::{UdpPacket, UdpRepr};

#[test]
fn udp_echo() {
    let mut n = Net::new();
    let srv = n.b.udp_bind(SocketAddrV4::new(B_IP, 7)).unwrap();
    let cli = n.a.udp_bind(SocketAddrV4::new(0.into(), 0)).unwrap();
    let cport = n.a.udp_status(cli).unwrap().local.port();
    assert!((EPHEMERAL_FIRST..=EPHEMERAL_LAST).contains(&cport));
    let dst = SocketAddrV4::new(B_IP, 7);
    assert_eq!(n.a.udp_send_to(n.now, cli, b"hello", dst).unwrap(), 5);
    n.pump();
    let mut buf = [0u8; 64];
    let (len, from) = n.b.udp_recv_from(srv, &mut buf).unwrap();
    assert_eq!(&buf[..len], b"hello");
    assert_eq!(from, SocketAddrV4::new(A_IP, cport));
    n.b.udp_send_to(n.now, srv, &buf[..len], from).unwrap();
    n.pump();
    let (len, from) = n.a.udp_recv_from(cli, &mut buf).unwrap();
    assert_eq!((&buf[..len], from), (&b"hello"[..], dst));
    assert_eq!(n.a.udp_recv_from(cli, &mut buf), Err(UdpError::WouldBlock));
    assert_eq!(n.b.counters().udp.InDatagrams, 1);
    assert_eq!(n.a.counters().udp.OutDatagrams, 1);
}

#[test]
fn large_datagram_is_fragmented_and_reassembled() {
    let mut n = Net::new();
    let srv = n.b.udp_bind(SocketAddrV4::new(0.into(), 5000)).unwrap();
    let cli = n.a.udp_bind(SocketAddrV4::new(0.into(), 0)).unwrap();
    let data: Vec<u8> = (0..60000u32).map(|i| (i % 251) as u8).collect();
    n.a.udp_send_to(n.now, cli, &data, SocketAddrV4::new(B_IP, 5000))
        .unwrap();
    n.pump();
    let mut buf = vec![0u8; 70000];
    let (len, _) = n.b.udp_recv_from(srv, &mut buf).unwrap();
    assert_eq!(&buf[..len], &data[..]);
    assert!(n.a.counters().ip.FragCreates >= 41);
    let too_big = vec![0u8; 65508];
    assert_eq!(
        n.a.udp_send_to(n.now, cli, &too_big, SocketAddrV4::new(B_IP, 5000)),
        Err(UdpError::TooLarge)
    );
}

#[test]
fn port_unreachable_gives_connection_refused_once_on_connected_socket() {
    let mut n = Net::new();
    let cli = n.a.udp_bind(SocketAddrV4::new(0.into(), 0)).unwrap();
    n.a.udp_connect(cli, SocketAddrV4::new(B_IP, 9999)).unwrap();
    n.a.udp_send(n.now, cli, b"anyone?").unwrap();
    n.pump();
    assert_eq!(n.b.counters().udp.NoPorts, 1);
    assert_eq!(n.b.counters().icmp.OutDestUnreachs, 1);
    assert!(n.a.udp_status(cli).unwrap().can_recv);
    let mut buf = [0u8; 16];
    assert_eq!(
        n.a.udp_recv_from(cli, &mut buf),
        Err(UdpError::ConnectionRefused)
    );
    assert_eq!(n.a.udp_recv_from(cli, &mut buf), Err(UdpError::WouldBlock));
    // An unconnected socket does not get the error (Linux without IP_RECVERR).
    let free = n.a.udp_bind(SocketAddrV4::new(0.into(), 0)).unwrap();
    n.a.udp_send_to(n.now, free, b"x", SocketAddrV4::new(B_IP, 9998))
        .unwrap();
    n.advance(Duration::from_millis(1));
    assert_eq!(n.a.counters().icmp.InDestUnreachs, 2);
    assert_eq!(n.a.udp_recv_from(free, &mut buf), Err(UdpError::WouldBlock));
}

#[test]
fn connected_socket_filters_other_sources() {
    let mut n = Net::new();
    let srv = n.b.udp_bind(SocketAddrV4::new(0.into(), 53)).unwrap();
    n.b.udp_connect(srv, SocketAddrV4::new(A_IP, 1111)).unwrap();
    let other = n.a.udp_bind(SocketAddrV4::new(0.into(), 2222)).unwrap();
    n.a.udp_send_to(n.now, other, b"x", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    n.pump();
    let mut buf = [0u8; 4];
    assert_eq!(n.b.udp_recv_from(srv, &mut buf), Err(UdpError::WouldBlock));
    assert_eq!(n.b.counters().udp.NoPorts, 1);
    let peer = n.a.udp_bind(SocketAddrV4::new(0.into(), 1111)).unwrap();
    n.a.udp_send_to(n.now, peer, b"y", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    n.pump();
    assert_eq!(n.b.udp_recv_from(srv, &mut buf).unwrap().0, 1);
}

#[test]
fn bind_conflicts_and_stale_handles() {
    let mut n = Net::new();
    let h = n.a.udp_bind(SocketAddrV4::new(0.into(), 1000)).unwrap();
    assert_eq!(
        n.a.udp_bind(SocketAddrV4::new(A_IP, 1000)),
        Err(BindError::AddrInUse)
    );
    assert_eq!(
        n.a.udp_bind(SocketAddrV4::new(B_IP, 1001)),
        Err(BindError::AddrNotAvailable)
    );
    n.a.udp_close(h);
    let mut buf = [0u8; 1];
    assert_eq!(n.a.udp_recv_from(h, &mut buf), Err(UdpError::InvalidHandle));
    let h2 = n.a.udp_bind(SocketAddrV4::new(0.into(), 1000)).unwrap();
    assert_ne!(h, h2, "the reused slot has a new generation");
    assert_eq!(n.a.udp_status(h), Err(UdpError::InvalidHandle));
    n.a.udp_close(h); // stale close is ignored
    assert!(n.a.udp_status(h2).is_ok());
    assert_eq!(n.a.udp_send(n.now, h2, b"x"), Err(UdpError::NotConnected));
}

#[test]
fn receive_queue_is_bounded() {
    let mut n = Net::new();
    let srv = n.b.udp_bind(SocketAddrV4::new(0.into(), 9)).unwrap();
    let cli = n.a.udp_bind(SocketAddrV4::new(0.into(), 0)).unwrap();
    let data = vec![1u8; 1000];
    for _ in 0..300 {
        n.a.udp_send_to(n.now, cli, &data, SocketAddrV4::new(B_IP, 9))
            .unwrap();
        n.pump();
    }
    let st = n.b.udp_status(srv).unwrap();
    assert_eq!(st.recv_datagrams, 212);
    let c = &n.b.counters().udp;
    assert_eq!((c.InDatagrams, c.RcvbufErrors, c.InErrors), (212, 88, 88));
}

#[test]
fn bad_udp_checksum_is_counted_and_dropped() {
    let mut n = Net::new();
    let srv = n.b.udp_bind(SocketAddrV4::new(0.into(), 9)).unwrap();
    n.a.icmp_echo_send(n.now, B_IP, 1, 1, b"warm").unwrap();
    n.pump();
    let mut seg = vec![0u8; 8 + 4];
    seg[8..].copy_from_slice(b"data");
    UdpRepr {
        src_port: 1234,
        dst_port: 9,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut seg[..]),
        A_IP,
        B_IP,
        4,
        true,
    );
    let mut bad = seg.clone();
    bad[9] ^= 1;
    n.inject_to_b(&ip_frame(&ip_repr(IpProtocol::Udp, 1, 0, false), &bad));
    assert_eq!(n.b.counters().udp.InCsumErrors, 1);
    assert_eq!(n.b.counters().udp.InErrors, 1);
    n.inject_to_b(&ip_frame(&ip_repr(IpProtocol::Udp, 2, 0, false), &seg));
    let mut buf = [0u8; 8];
    assert_eq!(n.b.udp_recv_from(srv, &mut buf).unwrap().0, 4);
    // Checksum 0 means "none" (RFC 768) and is accepted.
    let mut nock = seg.clone();
    nock[6] = 0;
    nock[7] = 0;
    n.inject_to_b(&ip_frame(&ip_repr(IpProtocol::Udp, 3, 0, false), &nock));
    assert_eq!(n.b.counters().udp.InDatagrams, 2);
}
