//! Dual-stack listeners through the std-shaped API, two stacks on one
//! in-process link: `TcpListener::bind("[::]:p")` takes IPv4 connections
//! with IPv4-mapped peers unless `set_only_v6`/`bind_only_v6`; the bind
//! conflicts follow Linux; `TcpStream::connect` to `::ffff:a.b.c.d` runs
//! over IPv4.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::thread;

use ustack_net::{Net, TcpListener, TcpStream};
use ustack_wire::ipv6::Ipv6Cidr;

use common::{pair, A_IP, B_IP};

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

fn add6(n: &Net, a: Ipv6Addr) {
    n.with_stack(|s| {
        s.add_ipv6_address(Ipv6Cidr {
            address: a,
            prefix_len: 64,
        })
    })
    .expect("add IPv6 address");
}

fn mapped(ip: std::net::Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(ip.to_ipv6_mapped(), port, 0, 0))
}

/// Connect from `a` to `dst`, accept on `l`, echo a line through: the
/// client stream and the accepted stream with its reported peer.
fn roundtrip(a: &Net, l: &TcpListener, dst: SocketAddr) -> (TcpStream, TcpStream, SocketAddr) {
    let a = a.clone();
    let client = thread::spawn(move || {
        let mut c = TcpStream::connect(&a, dst).expect("connect");
        c.write_all(b"hello dual stack").expect("write");
        let mut back = [0u8; 16];
        c.read_exact(&mut back).expect("read echo");
        assert_eq!(&back, b"hello dual stack");
        c
    });
    let (mut s, peer) = l.accept().expect("accept");
    let mut buf = [0u8; 16];
    s.read_exact(&mut buf).expect("read");
    s.write_all(&buf).expect("echo");
    let c = client.join().expect("client thread");
    (c, s, peer)
}

#[test]
fn dual_stack_listener_sees_ipv4_peers_as_mapped() {
    let (a, b) = pair();
    add6(&a, A6);
    add6(&b, B6);
    let l = TcpListener::bind(&b, "[::]:80").expect("bind [::]:80");
    assert!(!l.only_v6().expect("only_v6"));
    // An IPv4 client.
    let (c, s, peer) = roundtrip(&a, &l, SocketAddrV4::new(B_IP, 80).into());
    let cl = c.local_addr().expect("client local");
    assert_eq!(cl.ip(), IpAddr::V4(A_IP));
    assert_eq!(peer, mapped(A_IP, cl.port()));
    assert_eq!(s.peer_addr().expect("peer"), peer);
    assert_eq!(s.local_addr().expect("local"), mapped(B_IP, 80));
    // The socket table shows the mapped addresses too.
    let rows = b.sockets();
    assert!(
        rows.iter()
            .any(|r| r.local == mapped(B_IP, 80) && r.remote == peer),
        "{rows:?}"
    );
    // An IPv6 client on the same listener.
    let (c6, _s6, peer6) = roundtrip(&a, &l, SocketAddrV6::new(B6, 80, 0, 0).into());
    assert_eq!(peer6, c6.local_addr().expect("local6"));
    assert_eq!(peer6.ip(), IpAddr::V6(A6));
    // 0.0.0.0:80 conflicts with the dual-stack listener.
    assert_eq!(
        TcpListener::bind(&b, "0.0.0.0:80")
            .expect_err("conflict")
            .kind(),
        ErrorKind::AddrInUse
    );
}

#[test]
fn only_v6_listeners_share_the_port_with_ipv4() {
    let (a, b) = pair();
    add6(&a, A6);
    add6(&b, B6);
    let l6 = TcpListener::bind(&b, "[::]:81").expect("bind [::]:81");
    l6.set_only_v6(true).expect("set_only_v6");
    assert!(l6.only_v6().expect("only_v6"));
    assert_eq!(
        TcpStream::connect(&a, SocketAddrV4::new(B_IP, 81))
            .expect_err("v6only refuses IPv4")
            .kind(),
        ErrorKind::ConnectionRefused
    );
    let l4 = TcpListener::bind(&b, "0.0.0.0:81").expect("beside a v6only one");
    assert_eq!(
        l6.set_only_v6(false).expect_err("would conflict").kind(),
        ErrorKind::InvalidInput
    );
    let (_, _, p4) = roundtrip(&a, &l4, SocketAddrV4::new(B_IP, 81).into());
    assert_eq!(p4.ip(), IpAddr::V4(A_IP));
    let (_, _, p6) = roundtrip(&a, &l6, SocketAddrV6::new(B6, 81, 0, 0).into());
    assert_eq!(p6.ip(), IpAddr::V6(A6));

    // bind_only_v6 does it at bind time, in either order.
    let l4 = TcpListener::bind(&b, "0.0.0.0:82").expect("bind v4");
    assert_eq!(
        TcpListener::bind(&b, "[::]:82")
            .expect_err("dual conflicts")
            .kind(),
        ErrorKind::AddrInUse
    );
    let l6 = TcpListener::bind_only_v6(&b, "[::]:82").expect("bind_only_v6");
    assert!(l6.only_v6().expect("only_v6"));
    // A client connecting to an IPv4-mapped address: IPv4 on the wire
    // (the IPv4 listener takes it), mapped addresses at the client.
    let (c, _, p) = roundtrip(&a, &l4, mapped(B_IP, 82));
    assert_eq!(c.peer_addr().expect("peer"), mapped(B_IP, 82));
    assert_eq!(c.local_addr().expect("local"), mapped(A_IP, p.port()));
    assert_eq!(p.ip(), IpAddr::V4(A_IP));
}

#[test]
fn ping_an_ipv6_address() {
    let (a, b) = pair();
    add6(&a, A6);
    add6(&b, B6);
    let r = a
        .ping(B6, 1, b"ustack ping6", std::time::Duration::from_secs(5))
        .expect("ping6")
        .expect("a reply");
    assert_eq!(r.reply.from, IpAddr::V6(B6));
    assert_eq!((r.reply.seq, r.reply.len), (1, 12));
    assert_eq!(r.reply.ttl, 64);
    // IPv4 still works the same way.
    let r = a
        .ping(B_IP, 2, b"v4", std::time::Duration::from_secs(5))
        .expect("ping")
        .expect("a reply");
    assert_eq!(r.reply.from, IpAddr::V4(B_IP));
    let c = b.counters();
    assert_eq!(c.get("Icmp6", "InEchos"), Some(1));
    assert_eq!(c.get("Icmp6", "OutEchoReplies"), Some(1));
    // Off-link without a router: no route.
    let far: Ipv6Addr = "2001:db8::1".parse().expect("address");
    assert_eq!(
        a.ping(far, 3, b"x", std::time::Duration::from_secs(1))
            .expect_err("no route")
            .kind(),
        ErrorKind::HostUnreachable
    );
}

#[test]
fn ipv6_udp_sockets_are_v6only() {
    let (a, b) = pair();
    add6(&a, A6);
    add6(&b, B6);
    let u = ustack_net::UdpSocket::bind(&a, "[::]:0").expect("bind");
    let to = mapped(B_IP, 7);
    let e = u.send_to(b"x", to).expect_err("mapped destination");
    assert_eq!(e.kind(), ErrorKind::HostUnreachable, "{e}");
    assert!(u.connect(to).is_err());
    // Its own family still works, and an IPv4 socket may share the port.
    let port = u.local_addr().expect("local").port();
    let _u4 = ustack_net::UdpSocket::bind(&a, SocketAddrV4::new(A_IP, port)).expect("v4 beside");
    let peer = ustack_net::UdpSocket::bind(&b, "[::]:7").expect("bind peer");
    u.send_to(b"v6", SocketAddrV6::new(B6, 7, 0, 0))
        .expect("send over IPv6");
    peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 8];
    let (n, from) = peer.recv_from(&mut buf).expect("datagram");
    assert_eq!((&buf[..n], from.ip()), (&b"v6"[..], IpAddr::V6(A6)));
}
