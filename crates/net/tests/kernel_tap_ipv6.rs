//! ustack's IPv6 against the Linux kernel over a TAP device inside a
//! private network namespace created (and always removed) by the test:
//! the kernel pings ustack (Neighbor Discovery both ways, echo), finds it
//! REACHABLE in its neighbour table, UDP datagrams cross both ways
//! byte-exact, and TCP over IPv6 connects both ways and carries 10 MB each
//! way byte-exact. Needs root and /dev/net/tun; if they are missing the
//! test fails loudly.

mod common;

use common::kernel::{ip, run, NetNs};

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::thread;

use ustack_net::dev::tap::Tap;
use ustack_net::{Net, TcpListener, TcpStream, UdpSocket};
use ustack_wire::ipv6::Ipv6Cidr;

const KERNEL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1);
const USTACK6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2);
const USTACK_MAC: &str = "02:00:00:00:00:0b";

/// Create the TAP inside the namespace, give the kernel end KERNEL6/64
/// (no DAD: usable at once) and bring it up.
fn tap_in(ns: &NetNs) -> (Tap, String) {
    let tap_name = format!("ustk6{}", std::process::id() % 10_000_000);
    let tap = ns.tap(&tap_name, false);
    ns.up(&tap_name, &format!("{KERNEL6}/64"), true);
    (tap, tap_name)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn the_kernel_pings_and_exchanges_udp_with_ustack_over_ipv6() {
    let ns = NetNs::new("v6");
    let (tap, tap_name) = tap_in(&ns);
    let mut cfg = common::config(Ipv4Addr::new(10, 214, 0, 2), 0x0b);
    cfg.mtu = 1500;
    let net = Net::start(cfg, Box::new(tap), common::opts("ustack-tap6")).expect("start");
    net.with_stack(|s| {
        s.add_ipv6_address(Ipv6Cidr {
            address: USTACK6,
            prefix_len: 64,
        })
    })
    .expect("add address");

    // The kernel pings ustack: its NS for ustack's address is answered
    // (solicited-node multicast), then the echo requests are.
    for size in ["56", "1452"] {
        let out = ns.exec(&[
            "ping",
            "-6",
            "-n",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "5",
            "-s",
            size,
            &USTACK6.to_string(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ping -s {size} failed:\n{text}");
        assert!(
            text.contains("3 packets transmitted, 3 received"),
            "ping -s {size}:\n{text}"
        );
        assert!(
            text.contains(&format!(
                "{} bytes from {USTACK6}",
                8 + size.parse::<usize>().unwrap_or(0)
            )),
            "ping -s {size}: reply size:\n{text}"
        );
    }
    // The kernel's neighbour entry for ustack was confirmed by ustack's
    // solicited advertisement.
    let out = run(
        "ip",
        &["-n", &ns.name, "-6", "neigh", "show", "dev", &tap_name],
    );
    let neigh = String::from_utf8_lossy(&out.stdout);
    let line = neigh
        .lines()
        .find(|l| l.starts_with(&format!("{USTACK6} ")))
        .unwrap_or_else(|| panic!("no neighbour entry for ustack:\n{neigh}"));
    assert!(
        line.contains(&format!("lladdr {USTACK_MAC}")) && line.contains("REACHABLE"),
        "kernel neighbour entry: {line}"
    );
    let c = net.counters();
    assert!(c.icmp6.InNeighborSolicits >= 1);
    assert!(c.icmp6.OutNeighborAdvertisements >= 1);
    assert_eq!(c.icmp6.InEchos, 6);
    assert_eq!(c.icmp6.OutEchoReplies, 6);

    // UDP, kernel -> ustack -> kernel, byte-exact, the largest datagram
    // one 1500-byte frame carries included; ustack's side is a blocking
    // `ustack_net::UdpSocket` bound to an IPv6 address.
    let ustack_sock = UdpSocket::bind(&net, "[::]:7200").expect("ustack udp6 bind");
    ustack_sock
        .set_read_timeout(Some(common::PATIENCE))
        .expect("timeout");
    assert_eq!(
        ustack_sock.local_addr().expect("local addr"),
        SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 7200, 0, 0).into()
    );
    let kernel_sock = ns
        .run(|| std::net::UdpSocket::bind(SocketAddrV6::new(KERNEL6, 7100, 0, 0)))
        .join()
        .expect("bind thread")
        .expect("kernel udp bind");
    kernel_sock
        .set_read_timeout(Some(common::PATIENCE))
        .expect("timeout");
    let kernel_addr: SocketAddr = SocketAddrV6::new(KERNEL6, 7100, 0, 0).into();
    for (i, len) in [1usize, 1000, 1452].into_iter().enumerate() {
        let to_ustack = pattern(len, i as u8);
        kernel_sock
            .send_to(&to_ustack, SocketAddrV6::new(USTACK6, 7200, 0, 0))
            .expect("kernel send");
        let mut buf = vec![0u8; 2048];
        let (n, from) = ustack_sock.recv_from(&mut buf).expect("ustack recv");
        assert_eq!(&buf[..n], &to_ustack[..], "kernel -> ustack, {len} bytes");
        assert_eq!(from, kernel_addr);
        let to_kernel = pattern(len, 100 + i as u8);
        assert_eq!(ustack_sock.send_to(&to_kernel, from).expect("send"), len);
        let (n, from) = kernel_sock.recv_from(&mut buf).expect("kernel recv");
        assert_eq!(&buf[..n], &to_kernel[..], "ustack -> kernel, {len} bytes");
        assert_eq!(from, SocketAddrV6::new(USTACK6, 7200, 0, 0).into());
    }
    // A connected IPv6 socket: send/recv without addresses.
    let connected = UdpSocket::bind(&net, (USTACK6, 0)).expect("bind connected");
    connected.connect(kernel_addr).expect("connect");
    connected
        .set_read_timeout(Some(common::PATIENCE))
        .expect("timeout");
    assert_eq!(connected.peer_addr().expect("peer"), kernel_addr);
    connected.send(b"connected").expect("send");
    let mut buf = [0u8; 64];
    let (n, from) = kernel_sock.recv_from(&mut buf).expect("kernel recv");
    assert_eq!(&buf[..n], b"connected");
    kernel_sock.send_to(b"reply", from).expect("kernel reply");
    let n = connected.recv(&mut buf).expect("recv connected");
    assert_eq!(&buf[..n], b"reply");
    // TCP over IPv6 to a port with no listener: the connect is refused at
    // once (RST), not left to time out.
    let refused = ns
        .run(|| {
            std::net::TcpStream::connect_timeout(
                &SocketAddrV6::new(USTACK6, 80, 0, 0).into(),
                common::PATIENCE,
            )
        })
        .join()
        .expect("connect thread");
    assert_eq!(
        refused.map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionRefused)
    );
    let c = net.counters();
    assert_eq!(c.udp6.InDatagrams, 4);
    assert_eq!(c.udp6.OutDatagrams, 4);
    assert_eq!(c.udp6.InErrors, 0);
    net.shutdown();
}

/// Start ustack on a TAP in a fresh namespace with USTACK6/64.
fn start6(tag: &str) -> (NetNs, Net) {
    let ns = NetNs::new(tag);
    let (tap, _) = tap_in(&ns);
    let mut cfg = common::config(Ipv4Addr::new(10, 215, 0, 2), 0x0c);
    cfg.mtu = 1500;
    let net = Net::start(cfg, Box::new(tap), common::opts("ustack-tcp6")).expect("start");
    net.with_stack(|s| {
        s.add_ipv6_address(Ipv6Cidr {
            address: USTACK6,
            prefix_len: 64,
        })
    })
    .expect("add address");
    (ns, net)
}

/// Write `data` then shut down the write half, on a thread; read to the
/// end on this one; the bytes read.
fn exchange<S>(s: S, data: Vec<u8>) -> Vec<u8>
where
    S: Read + Write + Send + 'static,
    S: TryCloneShut,
{
    let w = s.clone_shut();
    let writer = thread::spawn(move || {
        let mut w = w;
        w.write_all_then_shut(&data);
    });
    let mut s = s;
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read to the end");
    writer.join().expect("writer");
    got
}

/// The two stream types' `try_clone` and write-side `shutdown`.
trait TryCloneShut: Sized {
    fn clone_shut(&self) -> Self;
    fn write_all_then_shut(&mut self, data: &[u8]);
}

impl TryCloneShut for TcpStream {
    fn clone_shut(&self) -> Self {
        self.try_clone().expect("clone")
    }
    fn write_all_then_shut(&mut self, data: &[u8]) {
        self.write_all(data).expect("ustack write");
        self.shutdown(std::net::Shutdown::Write).expect("shutdown");
    }
}

impl TryCloneShut for std::net::TcpStream {
    fn clone_shut(&self) -> Self {
        self.try_clone().expect("clone")
    }
    fn write_all_then_shut(&mut self, data: &[u8]) {
        self.write_all(data).expect("kernel write");
        self.shutdown(std::net::Shutdown::Write).expect("shutdown");
    }
}

const TEN_MB: usize = 10 << 20;

#[test]
fn the_kernel_and_ustack_carry_10_mb_each_way_over_tcp6() {
    let (ns, net) = start6("t6");

    // The kernel connects to ustack's IPv6 listener.
    let listener = TcpListener::bind(&net, "[::]:8080").expect("ustack bind");
    assert_eq!(
        listener.local_addr().expect("local"),
        SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 8080, 0, 0).into()
    );
    let up = pattern(TEN_MB, 1);
    let down = pattern(TEN_MB, 2);
    let (up2, down2) = (up.clone(), down.clone());
    let kernel = ns.run(move || {
        let s = std::net::TcpStream::connect_timeout(
            &SocketAddrV6::new(USTACK6, 8080, 0, 0).into(),
            common::PATIENCE,
        )
        .expect("kernel connect");
        let local = s.local_addr().expect("kernel local");
        let got = exchange(s, up2);
        (local, got)
    });
    let (conn, peer) = listener.accept().expect("accept");
    assert_eq!(
        conn.local_addr().expect("local"),
        SocketAddrV6::new(USTACK6, 8080, 0, 0).into()
    );
    let got = exchange(conn, down2);
    let (kernel_local, kernel_got) = kernel.join().expect("kernel thread");
    assert_eq!(peer, kernel_local);
    assert!(got == up, "kernel -> ustack: 10 MB byte-exact");
    assert!(kernel_got == down, "ustack -> kernel: 10 MB byte-exact");

    // ustack connects to a kernel listener.
    let kl = ns
        .run(|| std::net::TcpListener::bind(SocketAddrV6::new(KERNEL6, 7300, 0, 0)))
        .join()
        .expect("bind thread")
        .expect("kernel listen");
    let (up2, down2) = (up.clone(), down.clone());
    let kernel = thread::spawn(move || {
        let (s, _) = kl.accept().expect("kernel accept");
        exchange(s, down2)
    });
    let conn =
        TcpStream::connect(&net, SocketAddrV6::new(KERNEL6, 7300, 0, 0)).expect("ustack connect");
    assert_eq!(
        conn.peer_addr().expect("peer"),
        SocketAddrV6::new(KERNEL6, 7300, 0, 0).into()
    );
    let got = exchange(conn, up2);
    let kernel_got = kernel.join().expect("kernel thread");
    assert!(got == down, "kernel -> ustack: 10 MB byte-exact");
    assert!(kernel_got == up, "ustack -> kernel: 10 MB byte-exact");

    let c = net.counters();
    assert_eq!(c.tcp.InCsumErrors, 0);
    assert_eq!(c.tcp.ActiveOpens, 1);
    assert_eq!(c.tcp.PassiveOpens, 1);
    net.shutdown();
}

/// Fragments both ways with the kernel: `ping -6 -s 8000` (8008-byte echo
/// requests the kernel fragments, ustack reassembles; replies ustack
/// fragments, the kernel reassembles and checks byte by byte), and UDP
/// datagrams of 8000 and 60000 bytes each way, byte-exact.
#[test]
fn the_kernel_and_ustack_fragment_and_reassemble_ipv6_both_ways() {
    let (ns, net) = start6("v6frag");
    let out = ns.exec(&[
        "ping",
        "-6",
        "-n",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "5",
        "-s",
        "8000",
        &USTACK6.to_string(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ping -s 8000 failed:\n{text}");
    assert!(
        text.contains("3 packets transmitted, 3 received"),
        "ping -s 8000:\n{text}"
    );
    assert!(
        text.contains(&format!("8008 bytes from {USTACK6}")),
        "reply size:\n{text}"
    );
    // ping compares every byte of the reply with what it sent.
    assert!(!text.contains("wrong data"), "ping -s 8000:\n{text}");
    let c = net.counters();
    assert_eq!(c.icmp6.OutEchoReplies, 3);
    assert!(c.ip6.ReasmOKs >= 3, "{:?}", c.ip6);
    assert_eq!(c.ip6.FragOKs, 3, "{:?}", c.ip6);
    assert_eq!(c.ip6.FragCreates, 18, "8008 bytes in six pieces each");
    assert_eq!(c.ip6.ReasmFails, 0);

    let ustack_sock = UdpSocket::bind(&net, "[::]:7300").expect("ustack udp6 bind");
    ustack_sock
        .set_read_timeout(Some(common::PATIENCE))
        .expect("timeout");
    let kernel_sock = ns
        .run(|| std::net::UdpSocket::bind(SocketAddrV6::new(KERNEL6, 7301, 0, 0)))
        .join()
        .expect("bind thread")
        .expect("kernel udp bind");
    kernel_sock
        .set_read_timeout(Some(common::PATIENCE))
        .expect("timeout");
    for (i, len) in [8000usize, 60_000].into_iter().enumerate() {
        let to_ustack = pattern(len, 7 + i as u8);
        kernel_sock
            .send_to(&to_ustack, SocketAddrV6::new(USTACK6, 7300, 0, 0))
            .expect("kernel send");
        let mut buf = vec![0u8; 65536];
        let (n, from) = ustack_sock.recv_from(&mut buf).expect("ustack recv");
        assert_eq!(&buf[..n], &to_ustack[..], "kernel -> ustack, {len} bytes");
        let to_kernel = pattern(len, 77 + i as u8);
        assert_eq!(ustack_sock.send_to(&to_kernel, from).expect("send"), len);
        let (n, _) = kernel_sock.recv_from(&mut buf).expect("kernel recv");
        assert_eq!(&buf[..n], &to_kernel[..], "ustack -> kernel, {len} bytes");
    }
    net.shutdown();
}

/// Duplicate address detection against the kernel, both ways: the kernel
/// trying to take ustack's address gets ustack's advertisement and marks
/// it `dadfailed`; ustack, with DAD on, trying to take the kernel's
/// address gets the kernel's advertisement and refuses it, while its
/// other addresses pass detection and are used.
#[test]
fn ustack_and_the_kernel_detect_duplicate_addresses_both_ways() {
    let ns = NetNs::new("v6dad");
    let (tap, tap_name) = tap_in(&ns);
    let mut cfg = common::config(Ipv4Addr::new(10, 216, 0, 2), 0x0d);
    cfg.mtu = 1500;
    let net = Net::start(cfg, Box::new(tap), common::opts("ustack-dad6")).expect("start");
    net.with_stack(|s| {
        s.add_ipv6_address(Ipv6Cidr {
            address: USTACK6,
            prefix_len: 64,
        })
    })
    .expect("add address");
    let wait = |what: &str, cond: &dyn Fn() -> bool| {
        for _ in 0..200 {
            if cond() {
                return;
            }
            thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}");
    };
    // The kernel claims USTACK6 (with DAD): ustack defends it.
    ip(&[
        "-n",
        &ns.name,
        "addr",
        "add",
        &format!("{USTACK6}/64"),
        "dev",
        &tap_name,
    ]);
    wait("the kernel's dadfailed", &|| {
        let out = run(
            "ip",
            &["-n", &ns.name, "-6", "addr", "show", "dev", &tap_name],
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.contains(&USTACK6.to_string()) && l.contains("dadfailed"))
    });
    assert!(net.counters().link.InFrames > 0);
    // ustack turns DAD on (its addresses go tentative again) and claims
    // the kernel's KERNEL6 as well.
    let now = net.now();
    net.with_stack(|s| {
        s.set_ipv6_host(
            now,
            ustack_net::core::Ipv6HostConfig {
                dad_transmits: 1,
                ..Default::default()
            },
        );
        s.add_ipv6_address(Ipv6Cidr {
            address: KERNEL6,
            prefix_len: 64,
        })
    })
    .expect("add KERNEL6");
    wait("ustack's DAD", &|| {
        net.with_stack(|s| s.ipv6_tentative_addresses().is_empty())
    });
    let (dups, addrs) = net.with_stack(|s| {
        let a: Vec<Ipv6Addr> = s.ipv6_addresses().iter().map(|c| c.address).collect();
        (s.ipv6_duplicate_addresses().to_vec(), a)
    });
    assert_eq!(dups, vec![KERNEL6]);
    assert!(addrs.contains(&USTACK6), "{addrs:?}");
    assert!(!addrs.contains(&KERNEL6), "{addrs:?}");
    let c = net.counters();
    assert_eq!(c.ip6.DadDuplicates, 1);
    assert!(c.icmp6.OutMLDv2Reports >= 1);
    net.shutdown();
}
