//! ustack against the Linux kernel over a TAP device inside a private network
//! namespace created (and always removed) by the test. Needs root and
//! /dev/net/tun; if they are missing the test fails loudly.

mod common;

use common::kernel::NetNs;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::thread;
use std::time::Duration;

use ustack_net::dev::tap::Tap;
use ustack_net::{Net, TcpListener, TcpStream};

const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
const USTACK_IP: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);

/// The TAP's name (in a namespace of the test's own).
fn tap_name() -> String {
    format!("ustk{}", std::process::id() % 100_000_000)
}

/// Create the TAP inside the namespace (the host never sees it), give the
/// kernel end KERNEL_IP/24 and bring it up.
fn tap_in(ns: &NetNs) -> Tap {
    let tap_name = tap_name();
    let tap = ns.tap(&tap_name, false);
    ns.up(&tap_name, &format!("{KERNEL_IP}/24"), false);
    tap
}

/// The TAP's interface deleted under a running stack (by an operator, or
/// by a sandboxed guest that owns it): the stack stops and says why
/// (`Net::failure`), and a thread blocked in `accept` gets an error,
/// instead of the stack thread retrying the dead device for ever.
#[test]
fn a_deleted_tap_stops_the_stack_and_says_why() {
    let ns = NetNs::new("gone");
    let tap = tap_in(&ns);
    let net = Net::start(
        common::config(USTACK_IP, 9),
        Box::new(tap),
        common::opts("ustack-gone"),
    )
    .expect("start");
    assert!(net.is_running());
    assert!(net.failure().is_none());
    let listener = TcpListener::bind(&net, SocketAddrV4::new(USTACK_IP, 7100)).expect("bind");
    let acceptor = thread::spawn(move || listener.accept().map(|(_, peer)| peer));

    common::kernel::ip(&["-n", &ns.name, "link", "del", &tap_name()]);
    let t0 = std::time::Instant::now();
    while net.is_running() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the stack still runs 10 s after its TAP was deleted"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let why = net
        .failure()
        .expect("a stack that stopped on its own says why");
    assert!(why.to_string().contains("the device is gone"), "{why}");
    let accepted = acceptor.join().expect("acceptor thread");
    assert!(
        accepted.is_err(),
        "accept after the device went away: {accepted:?}"
    );
    // An orderly shutdown afterwards is harmless.
    net.shutdown();
    assert!(net.failure().is_some());
}

#[test]
fn ustack_talks_tcp_and_icmp_with_the_linux_kernel() {
    let ns = NetNs::new("net");
    let tap = tap_in(&ns);

    // Kernel side: a std::net echo server inside the namespace.
    let listener = ns
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(KERNEL_IP, 7007)))
        .join()
        .expect("bind thread")
        .expect("kernel bind");
    let kernel_echo = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("kernel accept");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("t");
        let mut buf = [0u8; 65536];
        let mut total = 0usize;
        loop {
            let n = s.read(&mut buf).expect("kernel read");
            if n == 0 {
                break;
            }
            total += n;
            s.write_all(&buf[..n]).expect("kernel write");
        }
        total
    });

    let net = Net::start(
        common::config(USTACK_IP, 9),
        Box::new(tap),
        common::opts("ustack-tap"),
    )
    .expect("start");

    // ICMP: the kernel answers our echo request.
    let mut replied = false;
    for seq in 0..5 {
        if let Some(r) = net
            .ping(KERNEL_IP, seq, b"ustack", Duration::from_secs(1))
            .expect("ping")
        {
            assert_eq!(r.reply.from, KERNEL_IP);
            replied = true;
            break;
        }
    }
    assert!(replied, "the kernel never answered ping");

    // TCP: ustack connects to the kernel's echo server; 1 MB round trip.
    let mut s =
        TcpStream::connect(&net, SocketAddrV4::new(KERNEL_IP, 7007)).expect("connect to kernel");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("t");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let writer = {
        let s = s.try_clone().expect("clone");
        let data = data.clone();
        thread::spawn(move || {
            (&s).write_all(&data).expect("write");
            s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        })
    };
    let mut back = Vec::new();
    s.read_to_end(&mut back).expect("read echo");
    writer.join().expect("writer");
    assert_eq!(back.len(), data.len());
    assert!(back == data, "echoed bytes differ");
    assert_eq!(kernel_echo.join().expect("kernel echo"), data.len());

    // And the other way round: the kernel connects to a ustack listener.
    let ul = TcpListener::bind(&net, SocketAddrV4::new(USTACK_IP, 8080)).expect("ustack bind");
    let kernel_client = ns.run(|| {
        let mut c = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::V4(SocketAddrV4::new(USTACK_IP, 8080)),
            Duration::from_secs(10),
        )?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        c.write_all(b"hello from linux")?;
        c.shutdown(std::net::Shutdown::Write)?;
        let mut v = Vec::new();
        c.read_to_end(&mut v)?;
        Ok::<_, std::io::Error>(v)
    });
    let (mut conn, peer) = ul.accept().expect("accept kernel connection");
    assert_eq!(peer.ip(), std::net::IpAddr::V4(KERNEL_IP));
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("t");
    let mut got = Vec::new();
    conn.read_to_end(&mut got).expect("read from kernel");
    assert_eq!(got, b"hello from linux");
    conn.write_all(b"hello from ustack")
        .expect("write to kernel");
    drop(conn);
    let reply = kernel_client
        .join()
        .expect("kernel client")
        .expect("kernel client io");
    assert_eq!(reply, b"hello from ustack");

    net.shutdown();
}
