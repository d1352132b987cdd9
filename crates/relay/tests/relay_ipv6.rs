//! The relay's IPv6 side with a scripted fake guest and real host sockets
//! on the loopback (no traffic leaves the machine): the gateway fd00::2
//! leads to the host's ::1, fd00::3:53 to the host's resolver, special
//! destinations are refused, `--no-ipv6` refuses everything IPv6.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, UdpSocket};
use std::time::Duration;

use ustack_relay::testing::FakeGuest;
use ustack_relay::{Refusal, Relay, RelayConfig, Unreachable};

const GUEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100);
const GW6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const DNS6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);

fn relay(cfg: RelayConfig) -> Relay<FakeGuest> {
    match Relay::new(FakeGuest::new(), cfg) {
        Ok(r) => r,
        Err(e) => panic!("relay: {e}"),
    }
}

/// Step the relay until `cond` holds (bounded: 2 s).
fn spin(r: &mut Relay<FakeGuest>, mut cond: impl FnMut(&mut Relay<FakeGuest>) -> bool) -> bool {
    for _ in 0..400 {
        if cond(r) {
            return true;
        }
        if let Err(e) = r.step(Some(Duration::from_millis(5))) {
            panic!("step: {e}");
        }
    }
    cond(r)
}

fn v6(ip: Ipv6Addr, port: u16) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0))
}

#[test]
fn tcp_to_the_ipv6_gateway_reaches_host_ipv6_loopback() {
    let l = TcpListener::bind("[::1]:0").unwrap_or_else(|e| panic!("bind [::1]: {e}"));
    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
    let mut r = relay(RelayConfig::default());
    let syn = r.guest_mut().syn(v6(GUEST6, 40000), v6(GW6, port));
    assert!(spin(&mut r, |r| r.guest().conn_of(syn).is_some()));
    let c = r.guest().conn_of(syn).unwrap_or_else(|| panic!("no conn"));
    let (mut host, peer) = l.accept().unwrap_or_else(|e| panic!("accept: {e}"));
    assert_eq!(peer.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    host.set_read_timeout(Some(Duration::from_secs(2))).ok();
    r.guest_mut().write(c, b"over ipv6");
    r.guest_mut().fin(c);
    let mut got = Vec::new();
    assert!(spin(&mut r, |r| r.stats().bytes_guest_to_host == 9));
    host.read_to_end(&mut got)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(got, b"over ipv6");
    host.write_all(b"back")
        .unwrap_or_else(|e| panic!("write: {e}"));
    drop(host);
    assert!(spin(&mut r, |r| r
        .guest()
        .conn(c)
        .is_some_and(|k| k.released)));
    assert_eq!(
        r.guest().conn(c).map(|k| k.received.clone()),
        Some(b"back".to_vec())
    );
    assert_eq!(r.stats().tcp_opened, 1);
}

#[test]
fn special_ipv6_destinations_are_refused() {
    let l = TcpListener::bind("[::1]:0").unwrap_or_else(|e| panic!("bind [::1]: {e}"));
    let closed = l.local_addr().map(|a| a.port()).unwrap_or(0);
    drop(l);
    let mut r = relay(RelayConfig::default());
    let cases = [
        (v6(GW6, closed), Refusal::Reset),
        (v6(DNS6, 80), Refusal::Unreachable(Unreachable::Port)),
        (
            v6("ff02::1".parse().unwrap_or(GW6), 80),
            Refusal::Unreachable(Unreachable::AdminProhibited),
        ),
        (
            v6("fe80::1".parse().unwrap_or(GW6), 80),
            Refusal::Unreachable(Unreachable::AdminProhibited),
        ),
        (
            v6("::ffff:1.2.3.4".parse().unwrap_or(GW6), 80),
            Refusal::Unreachable(Unreachable::AdminProhibited),
        ),
        (
            v6(Ipv6Addr::LOCALHOST, 80),
            Refusal::Unreachable(Unreachable::AdminProhibited),
        ),
        (
            v6(GUEST6, 80),
            Refusal::Unreachable(Unreachable::AdminProhibited),
        ),
    ];
    let ids: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, (dst, _))| r.guest_mut().syn(v6(GUEST6, 41000 + i as u16), *dst))
        .collect();
    assert!(spin(&mut r, |r| r.guest().refused.len() == cases.len()));
    let refused = r.guest().refused.clone();
    for (id, (dst, how)) in ids.iter().zip(cases.iter()) {
        assert!(refused.contains(&(*id, *how)), "{dst}: {refused:?}");
    }
}

#[test]
fn no_ipv6_refuses_every_ipv6_flow_and_ping() {
    let l = TcpListener::bind("[::1]:0").unwrap_or_else(|e| panic!("bind [::1]: {e}"));
    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
    let mut r = relay(RelayConfig {
        guest_addr6: None,
        dns6: None,
        ..RelayConfig::default()
    });
    let s = r.guest_mut().syn(v6(GUEST6, 40000), v6(GW6, port));
    r.guest_mut().ping(GUEST6, GW6, 7, 1, b"x");
    r.guest_mut().send_udp(v6(GUEST6, 5353), v6(DNS6, 53), b"q");
    assert!(spin(&mut r, |r| r.guest().refused.len() == 1
        && r.guest().unreachables.len() == 1));
    assert_eq!(
        r.guest().refused,
        vec![(s, Refusal::Unreachable(Unreachable::AdminProhibited))]
    );
    assert!(r.guest().echo_replies.is_empty());
    assert_eq!(r.stats().udp_flows, 0);
    assert_eq!(r.stats().udp_errors, 1);
}

#[test]
fn udp_to_the_ipv6_nameserver_and_gateway_and_ping6() {
    let dns = UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    dns.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let dns_addr = dns.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let echo = UdpSocket::bind("[::1]:0").unwrap_or_else(|e| panic!("{e}"));
    echo.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let echo_port = echo.local_addr().map(|a| a.port()).unwrap_or(0);
    let mut r = relay(RelayConfig {
        host_dns: dns_addr,
        ..RelayConfig::default()
    });
    let g = v6(GUEST6, 5353);
    r.guest_mut().send_udp(g, v6(DNS6, 53), b"query6");
    r.guest_mut().send_udp(g, v6(GW6, echo_port), b"ping");
    r.guest_mut().ping(GUEST6, GW6, 9, 4, b"abc");
    let _ = spin(&mut r, |r| r.stats().udp_datagrams_out == 2);
    let mut buf = [0u8; 64];
    let (n, from) = dns.recv_from(&mut buf).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&buf[..n], b"query6");
    dns.send_to(b"answer6", from)
        .unwrap_or_else(|e| panic!("{e}"));
    let (n, from) = echo.recv_from(&mut buf).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&buf[..n], b"ping");
    assert_eq!(from.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    echo.send_to(b"pong", from)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(spin(&mut r, |r| r.guest().udp_out.len() == 2));
    let out = r.guest().udp_out.clone();
    assert!(
        out.contains(&(v6(DNS6, 53), g, b"answer6".to_vec())),
        "{out:?}"
    );
    assert!(
        out.contains(&(v6(GW6, echo_port), g, b"pong".to_vec())),
        "{out:?}"
    );
    assert_eq!(r.stats().dns_queries, 1);
    assert_eq!(
        r.guest().echo_replies,
        vec![(GW6.into(), GUEST6.into(), 9, 4, b"abc".to_vec())]
    );
}

#[test]
fn an_ipv6_host_resolver_answers_both_guest_nameservers() {
    // A host whose resolv.conf names only IPv6 servers: queries to the
    // guest's IPv4 (10.0.2.3) and IPv6 (fd00::3) nameservers both reach it.
    let dns = UdpSocket::bind("[::1]:0").unwrap_or_else(|e| panic!("{e}"));
    dns.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let mut r = relay(RelayConfig {
        host_dns: dns.local_addr().unwrap_or_else(|e| panic!("{e}")),
        ..RelayConfig::default()
    });
    let dns4 = SocketAddr::from(([10, 0, 2, 3], 53));
    let g4 = SocketAddr::from(([10, 0, 2, 15], 5300));
    let g6 = v6(GUEST6, 5353);
    r.guest_mut().send_udp(g4, dns4, b"query4");
    r.guest_mut().send_udp(g6, v6(DNS6, 53), b"query6");
    let _ = spin(&mut r, |r| r.stats().udp_datagrams_out == 2);
    let mut buf = [0u8; 64];
    for _ in 0..2 {
        let (n, from) = dns.recv_from(&mut buf).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        let answer = [b"answer-".as_slice(), &buf[..n]].concat();
        dns.send_to(&answer, from).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(spin(&mut r, |r| r.guest().udp_out.len() == 2));
    let out = r.guest().udp_out.clone();
    assert!(
        out.contains(&(dns4, g4, b"answer-query4".to_vec())),
        "{out:?}"
    );
    assert!(
        out.contains(&(v6(DNS6, 53), g6, b"answer-query6".to_vec())),
        "{out:?}"
    );
    assert_eq!(r.stats().dns_queries, 2);
}

#[test]
fn denied_host_ports_are_closed_on_both_loopbacks() {
    let l = TcpListener::bind("[::1]:0").unwrap_or_else(|e| panic!("bind [::1]: {e}"));
    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
    // The metrics endpoint on 127.0.0.1:PORT: the same port on ::1 (a
    // dual-stack socket could be it) is out of reach too.
    let mut r = relay(RelayConfig {
        deny: vec![SocketAddr::from(([127, 0, 0, 1], port))],
        ..RelayConfig::default()
    });
    let s = r.guest_mut().syn(v6(GUEST6, 40000), v6(GW6, port));
    assert!(spin(&mut r, |r| r.guest().refused.len() == 1));
    assert_eq!(
        r.guest().refused,
        vec![(s, Refusal::Unreachable(Unreachable::AdminProhibited))]
    );
}

#[test]
fn ipv6_port_forwards_reach_the_guest_over_ipv6_and_plain_ones_over_ipv4() {
    use std::io::Read as _;
    use std::net::{Ipv4Addr, TcpStream};
    use ustack_relay::{PortForward, Proto};

    let fwd = |host_ip: Option<IpAddr>, guest_port, proto| PortForward {
        host_ip,
        host_port: 0,
        guest_port,
        proto,
    };
    let mut r = relay(RelayConfig {
        forwards: vec![
            fwd(Some(Ipv6Addr::LOCALHOST.into()), 8080, Proto::Tcp),
            fwd(Some(Ipv6Addr::LOCALHOST.into()), 5353, Proto::Udp),
        ],
        ..RelayConfig::default()
    });
    let addrs = r.listener_addrs();
    assert_eq!(addrs.len(), 2);
    assert!(addrs
        .iter()
        .all(|a| a.ip() == IpAddr::V6(Ipv6Addr::LOCALHOST)));

    // TCP: the guest sees [fd00::2]:PEERPORT -> [fd00::100]:8080.
    let mut peer = TcpStream::connect(addrs[0]).unwrap_or_else(|e| panic!("connect: {e}"));
    peer.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let peer_port = peer.local_addr().map(|a| a.port()).unwrap_or(0);
    assert!(spin(&mut r, |r| !r.guest().conns.is_empty()));
    let (&c, k) = r
        .guest()
        .conns
        .iter()
        .next()
        .unwrap_or_else(|| panic!("conn"));
    assert_eq!(k.to, Some(v6(GUEST6, 8080)));
    assert_eq!(k.from, Some(v6(GW6, peer_port)));
    r.guest_mut().write(c, b"hi6");
    r.guest_mut().fin(c);
    let _ = spin(&mut r, |r| r.stats().bytes_guest_to_host >= 3);
    let mut got = Vec::new();
    let _ = peer.read_to_end(&mut got);
    assert_eq!(got, b"hi6");

    // UDP: the same, and the reply leaves by the listener.
    let u = UdpSocket::bind("[::1]:0").unwrap_or_else(|e| panic!("{e}"));
    u.set_read_timeout(Some(Duration::from_secs(2))).ok();
    u.send_to(b"q6", addrs[1]).unwrap_or_else(|e| panic!("{e}"));
    assert!(spin(&mut r, |r| !r.guest().udp_out.is_empty()));
    let (src, dst, data) = r.guest().udp_out[0].clone();
    assert_eq!((dst, data.as_slice()), (v6(GUEST6, 5353), &b"q6"[..]));
    assert_eq!(src.ip(), IpAddr::V6(GW6));
    r.guest_mut().send_udp(v6(GUEST6, 5353), src, b"a6");
    let _ = r.step(Some(Duration::from_millis(1)));
    let mut buf = [0u8; 8];
    let (n, from) = u.recv_from(&mut buf).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((&buf[..n], from), (&b"a6"[..], addrs[1]));

    // A forward without a host address listens on both loopbacks and
    // reaches the guest over IPv4 from either; `ports remove` by port
    // takes both listeners.
    let plain = PortForward {
        host_ip: None,
        host_port: 0,
        guest_port: 9090,
        proto: Proto::Tcp,
    };
    let first = r.add_forward(plain).unwrap_or_else(|e| panic!("add: {e}"));
    assert_eq!(first.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    let listening: Vec<SocketAddr> = r
        .forwards()
        .into_iter()
        .filter(|(f, _)| *f == plain)
        .map(|(_, a)| a)
        .collect();
    assert_eq!(listening.len(), 2, "{listening:?}");
    let on6 = listening
        .iter()
        .find(|a| a.is_ipv6())
        .copied()
        .unwrap_or_else(|| panic!("no ::1 listener: {listening:?}"));
    let _c6 = TcpStream::connect(on6).unwrap_or_else(|e| panic!("connect: {e}"));
    assert!(spin(&mut r, |r| r
        .guest()
        .conns
        .values()
        .any(|k| k.to.is_some_and(|t| t.port() == 9090))));
    let k = r
        .guest()
        .conns
        .values()
        .find(|k| k.to.is_some_and(|t| t.port() == 9090))
        .cloned()
        .unwrap_or_default();
    assert_eq!(k.to, Some(SocketAddr::from(([10, 0, 2, 15], 9090))));
    assert!(r.remove_forward(&plain));
    assert!(r.forwards().iter().all(|(f, _)| *f != plain));
}
