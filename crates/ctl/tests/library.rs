//! A program built on `ustack_net` opts in to being operated with one call
//! (`Control::for_net`), and `ustack ps/ss/nstat/sysctl`'s client sees it.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use ustack_ctl::{Client, Control, Request, Response};
use ustack_net::core::Config;
use ustack_net::dev::memlink::{pair, Impairments};
use ustack_net::{Net, RuntimeOptions, TcpListener};

fn config(ip: Ipv4Addr, mac_last: u8) -> Config {
    Config {
        mac: ustack_wire::ethernet::MacAddr([0x02, 0, 0, 0, 0x42, mac_last]),
        addr: ustack_wire::ipv4::Ipv4Cidr::new(ip, 24).expect("prefix"),
        gateway: None,
        mtu: 1500,
        tcp: ustack_net::core::tcp::TcpConfig::default(),
        limits: ustack_net::core::Limits::default(),
        secret: [0; 16],
        seed: 0,
    }
}

#[test]
fn a_library_stack_is_operated_after_one_call() {
    let (port, _peer) = pair(Impairments::none(), Impairments::none(), 7);
    let ip = Ipv4Addr::new(10, 42, 0, 1);
    let net = Net::start(config(ip, 1), Box::new(port), RuntimeOptions::default())
        .expect("start the stack");
    let _l = TcpListener::bind(&net, SocketAddrV4::new(ip, 8080)).expect("listen");
    let name = format!("lib-{}", std::process::id());
    let ctl = Control::for_net(&name, &net, "mem0").expect("register");
    assert!(ustack_ctl::list().contains(&name), "not listed");

    let mut c = Client::connect(&name).expect("connect");
    let info = c.info().expect("info");
    assert_eq!(info.mode, "net");
    assert_eq!(info.pid, std::process::id());
    assert_eq!(info.devices.len(), 1);
    assert_eq!(info.devices[0].name, "mem0");
    assert!(info.devices[0].addrs.contains(&"10.42.0.1/24".to_string()));
    let socks = match c.call(&Request::Sockets { detail: false }) {
        Ok(Response::Sockets { sockets }) => sockets,
        other => panic!("sockets: {other:?}"),
    };
    let want = SocketAddr::from((ip, 8080)).to_string();
    assert!(
        socks.iter().any(|s| s.state == "LISTEN" && s.local == want),
        "{socks:?}"
    );
    // A tunable changed live reaches the stack; a bad one is refused and
    // changes nothing.
    let set = |c: &mut Client, v: &str| {
        c.call(&Request::SysctlSet {
            assignments: vec![("net.ipv4.tcp_sack".into(), v.into())],
        })
    };
    match set(&mut c, "0") {
        Ok(Response::Sysctl { .. }) => {}
        other => panic!("set: {other:?}"),
    }
    assert!(!net.with_stack(|s| s.config().tcp.sack));
    match set(&mut c, "maybe") {
        Ok(Response::Error { .. }) | Err(_) => {}
        other => panic!("a bad value was taken: {other:?}"),
    }
    assert!(!net.with_stack(|s| s.config().tcp.sack));
    match c.call(&Request::Counters { update: false }) {
        Ok(Response::Counters { counters }) => assert!(!counters.is_empty()),
        other => panic!("counters: {other:?}"),
    }

    // Dropping the handle unregisters the name.
    drop(c);
    drop(ctl);
    assert!(!ustack_ctl::list().contains(&name), "still listed");
    assert!(Client::connect(&name).is_err());
}

#[test]
fn ps_counts_tcp_sockets_only_in_its_tcp_column() {
    // `ustack ps` prints `tcp_sockets` under TCP and `established` under
    // ESTAB: a UDP socket (serve's echo, run's relayed flows, which are
    // ESTAB when connected) is neither.
    let (port, _peer) = pair(Impairments::none(), Impairments::none(), 8);
    let ip = Ipv4Addr::new(10, 42, 0, 1);
    let net = Net::start(config(ip, 2), Box::new(port), RuntimeOptions::default())
        .expect("start the stack");
    let _l = TcpListener::bind(&net, SocketAddrV4::new(ip, 8080)).expect("listen");
    let _u = ustack_net::UdpSocket::bind(&net, SocketAddrV4::new(ip, 7)).expect("udp");
    let connected = ustack_net::UdpSocket::bind(&net, SocketAddrV4::new(ip, 5353)).expect("udp");
    connected
        .connect(SocketAddrV4::new(Ipv4Addr::new(10, 42, 0, 2), 53))
        .expect("connect");
    let name = format!("libps-{}", std::process::id());
    let _ctl = Control::for_net(&name, &net, "mem0").expect("register");
    let mut c = Client::connect(&name).expect("connect");
    let socks = match c.call(&Request::Sockets { detail: false }) {
        Ok(Response::Sockets { sockets }) => sockets,
        other => panic!("sockets: {other:?}"),
    };
    assert!(
        socks.iter().any(|s| s.proto == "udp" && s.state == "ESTAB"),
        "{socks:?}"
    );
    let info = c.info().expect("info");
    assert_eq!(info.tcp_sockets, 1, "{socks:?}");
    assert_eq!(info.established, 0, "{socks:?}");
}
