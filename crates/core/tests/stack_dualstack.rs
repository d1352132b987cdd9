//! Dual-stack listeners: an IPv6 listener bound to `[::]:p` takes IPv4
//! connections too, whose addresses the API reports as IPv4-mapped
//! (`::ffff:a.b.c.d`), unless `IPV6_V6ONLY` is set; the bind conflicts
//! follow Linux (`[::]:p` and `0.0.0.0:p` together only when the IPv6 one
//! is v6only); a connect to an IPv4-mapped address runs over IPv4.

mod stack_util;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{BindError, TcpError, TcpHandle};

fn any6(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)
}

fn any4(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)
}

fn mapped(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(ip.to_ipv6_mapped(), port, 0, 0))
}

/// Connect A to `dst`; B accepts on `l`: the client and server handles,
/// or `None` if B accepted nothing in time.
fn connect(n: &mut Net, l: TcpHandle, dst: SocketAddr) -> Option<(TcpHandle, TcpHandle)> {
    let c = n.a.tcp_connect_addr(n.now, dst, None).unwrap();
    let mut server = None;
    let ok = n.run_until(Duration::from_secs(5), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(l).unwrap();
        }
        (server.is_some() && n.a.tcp_status(c).unwrap().state == State::Established)
            || n.a.tcp_status(c).unwrap().pending_error.is_some()
    });
    (ok && server.is_some()).then(|| (c, server.unwrap()))
}

/// A's connect to `dst` is refused (RST).
fn refused(n: &mut Net, dst: SocketAddr) {
    let c = n.a.tcp_connect_addr(n.now, dst, None).unwrap();
    assert!(n.run_until(Duration::from_secs(5), |n| {
        n.a.tcp_status(c).unwrap().pending_error.is_some()
    }));
    assert_eq!(
        n.a.tcp_status(c).unwrap().pending_error,
        Some(TcpError::ConnectionRefused),
        "connect to {dst}"
    );
}

#[test]
fn dual_stack_listener_accepts_ipv4_as_mapped_addresses() {
    let mut n = net6();
    let l = n.b.tcp_listen6(any6(80), 8).unwrap();
    assert_eq!(n.b.tcp_v6only(l), Ok(false));
    // An IPv4 client: plain IPv4 on the wire and at the client.
    let (c, s) = connect(&mut n, l, SocketAddrV4::new(B_IP, 80).into()).unwrap();
    let (cl, cr) = n.a.tcp_addrs(c).unwrap();
    assert_eq!(cr, SocketAddr::from(SocketAddrV4::new(B_IP, 80)));
    assert_eq!(cl.ip(), IpAddr::V4(A_IP));
    // The server's socket is IPv6 and sees IPv4-mapped addresses.
    let want = (mapped(B_IP, 80), mapped(A_IP, cl.port()));
    assert_eq!(n.b.tcp_addrs(s).unwrap(), want);
    let st = n.b.tcp_status(s).unwrap();
    assert_eq!((st.local, st.remote), want);
    let row = n.b.tcp_sockets().into_iter().find(|i| i.remote == want.1);
    assert_eq!(
        row.map(|i| (i.state, i.local)),
        Some((State::Established, want.0))
    );
    // Byte-exact both ways (the reverse direction swaps the roles).
    let data: Vec<u8> = (0..300_000).map(|i| (i % 251) as u8).collect();
    assert!(transfer(&mut n, c, s, &data, Duration::from_secs(30)) == Some(data.clone()));
    assert!(n.b.tcp_send(s, b"back over IPv4").unwrap() > 0);
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    assert!(n.run_until(Duration::from_secs(5), |n| {
        if let Ok(k) = n.a.tcp_recv(c, &mut buf) {
            got.extend_from_slice(&buf[..k]);
        }
        got.len() >= 14
    }));
    assert_eq!(&got, b"back over IPv4");
    assert_eq!(counter(&n.b, "Tcp", "PassiveOpens"), 1);

    // The same listener still takes IPv6 connections, seen as such.
    let (c6, s6) = connect(&mut n, l, SocketAddrV6::new(B6, 80, 0, 0).into()).unwrap();
    let (cl6, _) = n.a.tcp_addrs(c6).unwrap();
    assert_eq!(
        n.b.tcp_addrs(s6).unwrap(),
        (SocketAddrV6::new(B6, 80, 0, 0).into(), cl6)
    );
    assert_eq!(counter(&n.b, "Tcp", "PassiveOpens"), 2);
}

#[test]
fn v6only_listener_refuses_ipv4_and_shares_its_port() {
    let mut n = net6();
    let l6 = n.b.tcp_listen6_v6only(any6(80), 8).unwrap();
    assert_eq!(n.b.tcp_v6only(l6), Ok(true));
    refused(&mut n, SocketAddrV4::new(B_IP, 80).into());
    // An IPv4 listener may join a v6only one on the port; each takes its
    // own family.
    let l4 = n.b.tcp_listen(any4(80), 8).unwrap();
    let (_, s4) = connect(&mut n, l4, SocketAddrV4::new(B_IP, 80).into()).unwrap();
    assert_eq!(n.b.tcp_addrs(s4).unwrap().1.ip(), IpAddr::V4(A_IP));
    let (_, s6) = connect(&mut n, l6, SocketAddrV6::new(B6, 80, 0, 0).into()).unwrap();
    assert_eq!(n.b.tcp_addrs(s6).unwrap().1.ip(), IpAddr::V6(A6));
    assert_eq!(n.b.tcp_accept(l4), Ok(None));
    assert_eq!(n.b.tcp_accept(l6), Ok(None));

    // Clearing v6only while the IPv4 listener is there is refused (the
    // two would conflict); once it is closed, the IPv6 listener takes
    // IPv4 again.
    assert_eq!(n.b.tcp_set_v6only(l6, false), Err(TcpError::InvalidState));
    assert_eq!(n.b.tcp_set_v6only(l4, true), Err(TcpError::InvalidState));
    n.b.tcp_close(l4);
    assert_eq!(n.b.tcp_set_v6only(l6, false), Ok(()));
    let (_, s) = connect(&mut n, l6, SocketAddrV4::new(B_IP, 80).into()).unwrap();
    assert_eq!(n.b.tcp_addrs(s).unwrap().0, mapped(B_IP, 80));
    // And setting it again turns IPv4 away.
    assert_eq!(n.b.tcp_set_v6only(l6, true), Ok(()));
    refused(&mut n, SocketAddrV4::new(B_IP, 80).into());
}

#[test]
fn bind_conflicts_follow_linux() {
    let mut n = net6();
    let s = &mut n.b;
    // [::]:p (dual-stack) and 0.0.0.0:p conflict, in either order.
    let d = s.tcp_listen6(any6(80), 8).unwrap();
    assert_eq!(s.tcp_listen(any4(80), 8), Err(BindError::AddrInUse));
    assert_eq!(
        s.tcp_listen(SocketAddrV4::new(B_IP, 80), 8),
        Err(BindError::AddrInUse)
    );
    let four = s.tcp_listen(any4(81), 8).unwrap();
    assert_eq!(s.tcp_listen6(any6(81), 8), Err(BindError::AddrInUse));
    // Unless the IPv6 one is v6only.
    let v6only = s.tcp_listen6_v6only(any6(81), 8).unwrap();
    // One listener per port and family.
    assert_eq!(s.tcp_listen6_v6only(any6(81), 8), Err(BindError::AddrInUse));
    assert_eq!(s.tcp_listen6_v6only(any6(80), 8), Err(BindError::AddrInUse));
    assert_eq!(s.tcp_listen(any4(81), 8), Err(BindError::AddrInUse));
    // Closing frees the family's slot only.
    s.tcp_close(four);
    assert_eq!(s.tcp_listen6(any6(81), 8), Err(BindError::AddrInUse));
    let four = s.tcp_listen(any4(81), 8).unwrap();
    s.tcp_close(v6only);
    s.tcp_close(four);
    let again = s.tcp_listen6(any6(81), 8).unwrap();
    s.tcp_close(d);
    s.tcp_listen(any4(80), 8).unwrap();
    // A listener on a specific IPv6 address takes IPv6 only (Linux: an
    // IPv4 SYN cannot match it), but still holds the port against a
    // dual-stack bind.
    s.tcp_close(again);
    let l = s.tcp_listen6(SocketAddrV6::new(B6, 81, 0, 0), 8).unwrap();
    assert_eq!(s.tcp_listen6(any6(81), 8), Err(BindError::AddrInUse));
    refused(&mut n, SocketAddrV4::new(B_IP, 81).into());
    assert!(connect(&mut n, l, SocketAddrV6::new(B6, 81, 0, 0).into()).is_some());
    // An IPv4-mapped bind must be an address of ours.
    assert_eq!(
        n.b.tcp_listen6(
            SocketAddrV6::new(Ipv4Addr::new(10, 9, 9, 9).to_ipv6_mapped(), 82, 0, 0),
            8
        ),
        Err(BindError::AddrNotAvailable)
    );
}

#[test]
fn connect_to_an_ipv4_mapped_address_runs_over_ipv4() {
    let mut n = net6();
    let l = n.b.tcp_listen(any4(81), 8).unwrap();
    let dst = mapped(B_IP, 81);
    let (c, s) = connect(&mut n, l, dst).unwrap();
    let (cl, cr) = n.a.tcp_addrs(c).unwrap();
    assert_eq!(cr, dst);
    let SocketAddr::V6(cl6) = cl else {
        panic!("local {cl} is not IPv4-mapped")
    };
    assert_eq!(cl6.ip().to_ipv4_mapped(), Some(A_IP));
    // The server (an IPv4 socket) sees plain IPv4.
    assert_eq!(
        n.b.tcp_addrs(s).unwrap(),
        (
            SocketAddrV4::new(B_IP, 81).into(),
            SocketAddrV4::new(A_IP, cl6.port()).into()
        )
    );
    let data = vec![7u8; 100_000];
    assert!(transfer(&mut n, c, s, &data, Duration::from_secs(10)) == Some(data.clone()));
    // The frames were IPv4 (the IPv6 counters saw no TCP).
    assert_eq!(counter(&n.a, "Ip6", "OutRequests"), 0);
    // A mapped destination with a non-mapped IPv6 source is invalid.
    assert!(n
        .a
        .tcp_connect6(
            n.now,
            SocketAddrV6::new(B_IP.to_ipv6_mapped(), 81, 0, 0),
            Some(SocketAddrV6::new(A6, 0, 0, 0))
        )
        .is_err());
}
