//! IPv6 through `ustack serve`, `ping`, `get` and `ss` against the Linux
//! kernel: serve's default addresses (ustack fd77::2/64, the kernel side
//! fd77::1/64), every service over IPv6 from the kernel's tools and Rust
//! clients on kernel sockets in a private namespace, IPv4 clients on the
//! same dual-stack listeners, and `ustack ss -n` showing the addresses.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

fn rows(v: &serde_json::Value) -> Vec<(String, String, String)> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("state"), s("local"), s("peer"))
        })
        .collect()
}

#[test]
fn every_serve_service_over_ipv6() {
    let ns = NetNs::new();
    let srv = Serve::start(&ns, &[]);
    assert!(
        srv.banner.contains("fd77::2"),
        "banner without the IPv6 address: {}",
        srv.banner
    );
    wait_ipv6_up(&ns);
    // The kernel side has its default address.
    let addrs = ns.sh(&format!("ip -6 addr show dev {}", srv.tap));
    assert!(
        String::from_utf8_lossy(&addrs.stdout).contains("fd77::1/64"),
        "{}",
        String::from_utf8_lossy(&addrs.stdout)
    );

    // HTTP with curl -g over IPv6, byte-exact (issue 15's 100 MB), and the
    // status page.
    let n = 100_000_000u64;
    let out = ns.sh(&format!(
        "set -o pipefail; curl -6 -gsS --fail --max-time 120 'http://[{USTACK_IP6}]/bytes/{n}' | sha256sum"
    ));
    assert!(
        out.status.success(),
        "curl -6 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        got.split_whitespace().next(),
        Some(pattern_sha256(n).as_str())
    );
    let out = ns.sh(&format!(
        "curl -gsS --fail --max-time 10 'http://[{USTACK_IP6}]:80/'"
    ));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ustack: a user-space TCP/IP stack"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Echo (100 MB of random data), discard and chargen over IPv6, from
    // Rust clients on kernel sockets in the namespace; UDP echo over IPv6.
    let client = ns.spawn(|| {
        echo_transfer(v6(7), 100 << 20, 66);

        let mut d = connect(v6(9));
        d.write_all(&random_block(9, 1 << 20))
            .expect("discard write");
        d.shutdown(Shutdown::Write).expect("shutdown");
        d.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut rest = Vec::new();
        d.read_to_end(&mut rest).expect("discard closes");
        assert!(rest.is_empty(), "discard answered {} bytes", rest.len());

        let mut c = connect(v6(19));
        c.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut line = vec![0u8; 74];
        c.read_exact(&mut line).expect("chargen line");
        // RFC 864's first line: 72 characters from ' ' and CR LF.
        let want: Vec<u8> = (0..72u8).map(|i| b' ' + i).chain(*b"\r\n").collect();
        assert_eq!(line, want, "chargen over IPv6");

        let u = UdpSocket::bind("[::]:0").expect("udp bind");
        u.set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let mut echoed = None;
        for _ in 0..20 {
            u.send_to(b"udp over ipv6", v6(7)).expect("send_to");
            if let Ok((k, from)) = u.recv_from(&mut buf) {
                echoed = Some((buf[..k].to_vec(), from));
                break;
            }
        }
        let (data, from) = echoed.expect("no UDP echo over IPv6");
        assert_eq!((data.as_slice(), from), (&b"udp over ipv6"[..], v6(7)));
    });
    client.join().expect("IPv6 clients");

    // The same listeners take IPv4 (dual-stack): a kernel IPv4 client.
    let client = ns.spawn(|| echo_transfer(SocketAddrV4::new(USTACK_IP, 7), 1 << 20, 4));
    client.join().expect("IPv4 client");
    let out = ns.sh(&format!(
        "set -o pipefail; curl -4 -sS --fail --max-time 20 http://{USTACK_IP}/bytes/100000 | sha256sum"
    ));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&pattern_sha256(100_000)));
    srv.stop_clean();
}

#[test]
fn ss_shows_ipv6_connections_with_their_addresses() {
    let ns = NetNs::new();
    let name = format!("ss6-{}", unique());
    let srv = Serve::start(&ns, &["--name", &name]);
    wait_ipv6_up(&ns);
    // Hold an IPv6 and an IPv4 connection to the echo service.
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    let (port_tx, port_rx) = mpsc::channel();
    let holder = ns.spawn(move || {
        let mut held = Vec::new();
        for a in [v6(7), SocketAddr::V4(SocketAddrV4::new(USTACK_IP, 7))] {
            let mut s: TcpStream = connect(a);
            s.set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            s.write_all(b"ping").expect("write");
            let mut b = [0u8; 4];
            s.read_exact(&mut b).expect("echo");
            port_tx
                .send(s.local_addr().expect("local").port())
                .expect("report");
            held.push(s);
        }
        let _ = hold_rx.recv();
    });
    let p6: u16 = port_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("IPv6 connection");
    let p4: u16 = port_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("IPv4 connection");

    // ss -n, as the kernel's prints it: [fd77::2]:7 and [fd77::1]:PORT.
    let out = ustack(&["ss", "-n", "--stack", &name]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains(&format!("[{KERNEL_IP6}]:{p6}")))
        .unwrap_or_else(|| panic!("no IPv6 connection in ss -n:\n{text}"));
    assert!(
        line.starts_with("ESTAB") && line.contains(&format!("[{USTACK_IP6}]:7")),
        "{line}"
    );
    // The IPv4 one through the dual-stack listener: IPv4-mapped, as Linux.
    assert!(
        text.contains(&format!("[::ffff:{KERNEL_IP}]:{p4}")),
        "no IPv4-mapped connection in ss -n:\n{text}"
    );
    // Listeners: dual-stack `*:PORT`.
    let l = rows(&json(&["ss", "-ln", "--json", "--stack", &name]));
    for p in ["*:7", "*:9", "*:19", "*:80"] {
        assert!(
            l.iter()
                .any(|(st, local, peer)| st == "LISTEN" && local == p && peer == "*:*"),
            "{l:?}"
        );
    }
    // -i: the TCP fields on the IPv6 row (MSS = 1500 - 60).
    let ti = json(&["ss", "-ti", "--json", "--stack", &name]);
    let row = ti
        .as_array()
        .expect("array")
        .iter()
        .find(|r| r["peer"] == format!("[{KERNEL_IP6}]:{p6}").as_str())
        .unwrap_or_else(|| panic!("{ti}"));
    assert_eq!(row["info"]["mss"].as_u64(), Some(1440), "{row}");
    assert_eq!(row["info"]["bytes_received"].as_u64(), Some(4), "{row}");
    // Filters with IPv6 addresses; -6 and -4.
    let f = rows(&json(&[
        "ss",
        "--json",
        "--stack",
        &name,
        "dst",
        &KERNEL_IP6.to_string(),
    ]));
    assert_eq!(f.len(), 1, "{f:?}");
    let f = rows(&json(&[
        "ss",
        "--json",
        "--stack",
        &name,
        "src",
        &format!("[{USTACK_IP6}]:7"),
    ]));
    assert_eq!(f.len(), 1, "{f:?}");
    let f = rows(&json(&[
        "ss",
        "--json",
        "--stack",
        &name,
        "dst",
        "fd77::/64",
        "dport",
        "=",
        &format!(":{p6}"),
    ]));
    assert_eq!(f.len(), 1, "{f:?}");
    let f = rows(&json(&[
        "ss",
        "--json",
        "--stack",
        &name,
        "dst",
        &KERNEL_IP.to_string(),
    ]));
    assert_eq!(
        f.len(),
        1,
        "the IPv4-mapped peer matches its IPv4 address: {f:?}"
    );
    let six = rows(&json(&["ss", "-6", "--json", "--stack", &name]));
    assert_eq!(six.len(), 2, "{six:?}");
    let four = rows(&json(&["ss", "-4", "--json", "--stack", &name]));
    assert!(
        four.is_empty(),
        "serve's TCP sockets are all IPv6: {four:?}"
    );
    let udp4 = rows(&json(&["ss", "-u", "-a", "-4", "--json", "--stack", &name]));
    assert_eq!(
        udp4,
        vec![(
            "UNCONN".into(),
            format!("{USTACK_IP}:7"),
            "0.0.0.0:*".into()
        )]
    );
    let bad = ustack(&["ss", "--stack", &name, "dst", "fd77::zz"]);
    assert!(!bad.status.success());
    drop(hold_tx);
    holder.join().expect("holder");
    srv.stop_clean();
}

#[test]
fn serve_without_ipv6() {
    let ns = NetNs::new();
    let name = format!("no6-{}", unique());
    let srv = Serve::start(&ns, &["--no-ipv6", "--name", &name]);
    assert!(!srv.banner.contains("fd77"), "{}", srv.banner);
    // IPv4 listeners on ustack's address, as before; no IPv6 UDP socket.
    let l = rows(&json(&["ss", "-lu", "-t", "--json", "--stack", &name]));
    assert!(
        l.iter()
            .all(|(_, local, _)| local.starts_with("10.77.0.2:")),
        "{l:?}"
    );
    assert_eq!(l.len(), 5, "{l:?}");
    let addrs = ns.sh(&format!("ip -6 addr show dev {}", srv.tap));
    assert!(!String::from_utf8_lossy(&addrs.stdout).contains("fd77"));
    srv.stop_clean();
}

fn ustack_on_tap(ns: &NetNs, args: &[&str]) -> Output {
    let tap = format!("ut{}", unique());
    Command::new(BIN)
        .args([args[0], "--tap", &tap, "--netns", &ns.name])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .expect("run ustack")
}

#[test]
fn ustack_ping_and_get_over_ipv6() {
    let ns = NetNs::new();
    let out = ustack_on_tap(&ns, &["ping", "-c", "3", "-i", "0.2", "fd77::1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("PING fd77::1 (fd77::1) 56 data bytes"),
        "{text}"
    );
    assert!(
        text.contains("3 packets transmitted, 3 received, 0% packet loss"),
        "{text}"
    );
    assert!(
        text.contains("64 bytes from fd77::1: icmp_seq=1 ttl=64"),
        "{text}"
    );
    // Off the prefix, and with IPv6 off: refused before any network work.
    let out = ustack_on_tap(&ns, &["ping", "-c", "1", "2001:db8::1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("network unreachable"));
    let out = ustack_on_tap(&ns, &["ping", "--no-ipv6", "-c", "1", "fd77::1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-ipv6"));

    // get from a kernel HTTP server listening on [::]:8080.
    let dir = TempDir::new("get6");
    let data = random_block(6, 8 << 20);
    std::fs::write(dir.join("big.bin"), &data).expect("write file");
    let _srv = kernel_http_server(&ns, dir.path(), "::");
    let outfile = dir.join("out.bin");
    let out = ustack_on_tap(
        &ns,
        &[
            "get",
            "-o",
            outfile.to_str().expect("utf-8 path"),
            "http://[fd77::1]:8080/big.bin",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ustack get over IPv6 failed: {err}");
    assert!(
        err.contains(&format!("received {} bytes", data.len())),
        "{err}"
    );
    let got = std::fs::read(&outfile).expect("read output");
    assert!(got == data, "downloaded file differs ({} bytes)", got.len());
    let out = ustack_on_tap(&ns, &["get", "http://[fd77::1]:8081/"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("connection refused"));
}

#[test]
fn two_hundred_concurrent_ipv6_connections() {
    let ns = NetNs::new();
    let srv = Serve::start(&ns, &[]);
    wait_ipv6_up(&ns);
    let ok = ns
        .spawn(|| {
            // Open all 200 first, so they really are concurrent.
            let mut conns: Vec<_> = (0..200).map(|_| connect(v6(7))).collect();
            for (i, c) in conns.iter_mut().enumerate() {
                c.set_read_timeout(Some(Duration::from_secs(30)))
                    .expect("timeout");
                c.write_all(&random_block(i as u64 + 1, 4000))
                    .expect("write");
            }
            let mut ok = 0;
            for (i, c) in conns.iter_mut().enumerate() {
                let mut back = vec![0u8; 4000];
                c.read_exact(&mut back).expect("echo back");
                assert_eq!(back, random_block(i as u64 + 1, 4000), "connection {i}");
                ok += 1;
            }
            ok
        })
        .join()
        .expect("clients");
    assert_eq!(ok, 200);
    srv.stop_clean();
}
