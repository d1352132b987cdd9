//! `ustack run` over IPv6 end to end with the real engine: programs in the
//! sandbox (fd00::100/64, gateway fd00::2, nameserver fd00::3) talk to
//! servers on the host's [::1] through the relay, and host clients reach
//! servers in the sandbox through `-p` forwards. Needs root and
//! /dev/net/tun; traffic stays on the host's loopback and the sandbox's
//! link.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use ustack_relay::cli::RunReport;

mod common;
use common::hardened;
use common::{body_byte, dns_server_with, http_server_on, Helper, TempFile, DNS_AAAA};

fn ustack_run(v: &[&str]) -> RunReport {
    match hardened::run_report(v) {
        Ok(r) => r,
        Err(e) => panic!("ustack run {v:?}: {e:#}"),
    }
}

/// A port on `ip` nobody listens on (TCP).
fn closed_port(ip: &str) -> u16 {
    let l = TcpListener::bind((ip, 0)).expect("bind");
    l.local_addr().expect("addr").port()
}

/// Accept one connection on `l` in a thread running `f` on it. If the
/// command ended without connecting, [`unblock`] makes the accept return.
fn serve_one<T: Send + 'static>(
    l: TcpListener,
    f: impl FnOnce(TcpStream, SocketAddr) -> T + Send + 'static,
) -> thread::JoinHandle<std::io::Result<T>> {
    thread::spawn(move || {
        let (c, peer) = l.accept()?;
        c.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(f(c, peer))
    })
}

/// Connect to a listener once so that a thread blocked in `accept` ends.
fn unblock<T>(h: &thread::JoinHandle<T>, at: SocketAddr) {
    if !h.is_finished() {
        let _ = TcpStream::connect_timeout(&at, Duration::from_secs(2));
    }
}

#[test]
fn tcp_to_host_ipv6_loopback_through_the_gateway_both_ways_byte_exact() {
    let (up_len, down_len) = (3 << 20, 4 << 20);
    let up_file = TempFile::new("v6-up.bin");
    let down_file = TempFile::new("v6-down.bin");
    let up: Vec<u8> = (0..up_len).map(|i| body_byte(i * 7)).collect();
    std::fs::write(up_file.as_path(), &up).expect("write upload file");
    let l = TcpListener::bind("[::1]:0").expect("bind [::1] (the host needs IPv6 loopback)");
    let at = l.local_addr().expect("addr");
    let server = serve_one(l, move |mut c, peer| {
        let mut got = Vec::new();
        let r = c.read_to_end(&mut got);
        let down: Vec<u8> = (0..down_len).map(body_byte).collect();
        let w = c.write_all(&down);
        (got, peer, r.is_ok() && w.is_ok())
    });
    let target = format!("TCP6:[fd00::2]:{}", at.port());
    let script = format!(
        "socat -t 30 -T 60 - {target} < {} > {}",
        up_file.path(),
        down_file.path()
    );
    let t0 = Instant::now();
    let report = ustack_run(&["--", "sh", "-c", &script]);
    unblock(&server, at);
    let (got, peer, io_ok) = match server.join().expect("server thread") {
        Ok(x) => x,
        Err(e) => panic!("accept: {e}"),
    };
    assert_eq!(report.code, 0, "socat exit status");
    assert!(io_ok, "server I/O");
    // The relay's host socket is an IPv6 one on the loopback.
    assert_eq!(peer.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    assert_eq!(got.len(), up_len, "bytes uploaded");
    assert!(got == up, "upload differs");
    let down = std::fs::read(down_file.as_path()).expect("download file");
    assert_eq!(down.len(), down_len, "bytes downloaded");
    if let Some(i) = (0..down_len).find(|&i| down[i] != body_byte(i)) {
        panic!("downloaded byte {i} differs");
    }
    assert_eq!(report.stats.tcp_opened, 1);
    assert_eq!(report.stats.bytes_guest_to_host, up_len as u64);
    assert_eq!(report.stats.bytes_host_to_guest, down_len as u64);
    eprintln!(
        "{up_len} + {down_len} bytes over IPv6 through the relay in {:?}",
        t0.elapsed()
    );
}

#[test]
fn curl_g_downloads_from_the_hosts_ipv6_loopback_byte_exact() {
    // What a user types: curl's -g for the bracketed literal, the gateway
    // fd00::2 standing for the host's ::1, at the default MTU and at 1500
    // (where the guest's TSO and ustack's super-frames matter).
    let len = 16 << 20;
    let (port, _srv) = http_server_on("::1", len);
    for mtu in ["65520", "1500"] {
        let out = TempFile::new(&format!("e2e-curl6-{mtu}.bin"));
        let path = out.path();
        let url = format!("http://[fd00::2]:{port}/file");
        let r = ustack_run(&[
            "--mtu",
            mtu,
            "--",
            "curl",
            "-g",
            "-s",
            "--max-time",
            "60",
            "-o",
            &path,
            &url,
        ]);
        assert_eq!(r.code, 0, "curl -g exit status (MTU {mtu})");
        let got = std::fs::read(out.as_path()).expect("curl output");
        assert_eq!(got.len(), len, "MTU {mtu}");
        if let Some(i) = (0..len).find(|&i| got[i] != body_byte(i)) {
            panic!("byte {i} differs (MTU {mtu})");
        }
        assert!(r.engine_counter("Ip6InReceives") > 0, "not over IPv6");
        if mtu == "1500" {
            assert!(r.engine_counter("LinkOutGsoFrames") > 0, "no super-frames");
        }
    }
}

#[test]
fn closed_host_ipv6_port_is_refused_fast() {
    let port = closed_port("::1");
    let url = format!("http://[fd00::2]:{port}/");
    let t0 = Instant::now();
    let r = ustack_run(&["--", "curl", "-s", "--max-time", "10", &url]);
    assert_eq!(r.code, 7, "curl: couldn't connect (connection refused)");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(r.stats.tcp_refused_rst, 1);
}

/// A UDP echo server on [::1]; stops when dropped.
fn udp6_echo() -> (u16, Helper) {
    let s = UdpSocket::bind("[::1]:0").expect("bind [::1]");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let port = s.local_addr().expect("addr").port();
    let helper = Helper::spawn(move |stop| {
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::SeqCst) {
            if let Ok((n, peer)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], peer);
            }
        }
    });
    (port, helper)
}

#[test]
fn udp_echo_over_ipv6() {
    let (port, _echo) = udp6_echo();
    let py = format!(
        "import socket, sys\n\
         s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
         s.settimeout(10)\n\
         for i in range(3):\n\
         \x20   m = b'udp6-%d' % i\n\
         \x20   s.sendto(m, ('fd00::2', {port}))\n\
         \x20   d, a = s.recvfrom(100)\n\
         \x20   if d != m or a[0] != 'fd00::2' or a[1] != {port}: sys.exit(1)\n"
    );
    let r = ustack_run(&["--", "python3", "-c", &py]);
    assert_eq!(r.code, 0, "python3 exit status");
    assert_eq!(r.stats.udp_flows, 1);
    assert_eq!(r.stats.udp_datagrams_out, 3);
    assert_eq!(r.stats.udp_datagrams_in, 3);
}

/// A UDP datagram from the host larger than the guest's link MTU reaches
/// the guest in IPv6 fragments, as one over IPv4 does (before, the engine
/// refused to send any IPv6 datagram beyond the MTU: the echo of a 9,000
/// byte datagram at `--mtu 1500`, or of a 65,527 byte one at the default
/// MTU, never came back and counted as a relay UDP error).
#[test]
fn udp_datagrams_larger_than_the_mtu_reach_the_guest_over_ipv6() {
    let s = UdpSocket::bind("[::1]:0").expect("bind [::1]");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let port = s.local_addr().expect("addr").port();
    let _echo = Helper::spawn(move |stop| {
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::SeqCst) {
            if let Ok((n, peer)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], peer);
            }
        }
    });
    let py = format!(
        "import socket, sys\n\
         s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)\n\
         s.settimeout(10)\n\
         s.connect(('fd00::2', {port}))\n\
         for size in (1000, 1500, 9000, 30000, 65527):\n\
         \x20   m = bytes((size + j * 7) % 251 for j in range(size))\n\
         \x20   s.send(m)\n\
         \x20   if s.recv(65536) != m: sys.exit(1)\n"
    );
    for mtu in ["1500", "65520"] {
        let r = ustack_run(&["--mtu", mtu, "--", "python3", "-c", &py]);
        assert_eq!(r.code, 0, "python3 exit status at --mtu {mtu}");
        assert_eq!(r.stats.udp_datagrams_in, 5, "at --mtu {mtu}");
        assert_eq!(r.stats.udp_errors, 0, "at --mtu {mtu}");
        assert!(r.engine_counter("Ip6FragCreates") > 0, "at --mtu {mtu}");
    }
}

/// UDP GSO over IPv6: a guest socket with `UDP_SEGMENT` (103) hands its
/// kernel one 8,000-byte super-datagram, which reaches ustack as one
/// `GSO_UDP_L4` frame (the TAP takes USO); the host's echo on [::1] must
/// get eight 1,000-byte datagrams, and the guest every one back byte-exact
/// (before, the catch-all socket took the super-datagram whole: the echo
/// got one 8,000-byte datagram).
#[test]
fn udp_gso_over_ipv6_arrives_as_its_datagrams() {
    let s = UdpSocket::bind("[::1]:0").expect("bind [::1]");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let port = s.local_addr().expect("addr").port();
    let lens = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = lens.clone();
    let _echo = Helper::spawn(move |stop| {
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::SeqCst) {
            if let Ok((n, peer)) = s.recv_from(&mut buf) {
                if let Ok(mut l) = seen.lock() {
                    l.push(n);
                }
                let _ = s.send_to(&buf[..n], peer);
            }
        }
    });
    let py = format!(
        "import socket, sys\n\
         n, size = 8, 1000\n\
         chunk = lambda k: bytes([k]) + bytes((k * 13 + j * 7) % 251 for j in range(1, size))\n\
         s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
         s.settimeout(10)\n\
         s.setsockopt(socket.SOL_UDP, 103, size)\n\
         s.sendto(b''.join(chunk(k) for k in range(n)), ('fd00::2', {port}))\n\
         got = set()\n\
         for i in range(n):\n\
         \x20   d, a = s.recvfrom(65536)\n\
         \x20   if not d or d[0] >= n or d != chunk(d[0]) or a[1] != {port}: sys.exit(1)\n\
         \x20   got.add(d[0])\n\
         if len(got) != n: sys.exit(2)\n"
    );
    let r = ustack_run(&["--", "python3", "-c", &py]);
    assert_eq!(r.code, 0, "python3 exit status");
    let lens = lens.lock().expect("lens").clone();
    assert_eq!(lens, vec![1000; 8], "datagram sizes at the host");
    assert_eq!(r.stats.udp_datagrams_out, 8);
    assert_eq!(r.stats.udp_datagrams_in, 8);
    // It came as one super-frame (USO needs Linux 6.2+ on the host) and
    // was cut by the engine.
    assert_eq!(r.engine_counter("LinkInGsoFrames"), 1);
    assert_eq!(r.engine_counter("LinkInVnetErrors"), 0);
    assert_eq!(r.engine_counter("Udp6InDatagrams"), 8);
}

#[test]
fn ping6_the_gateway() {
    let r = ustack_run(&[
        "--", "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "fd00::2",
    ]);
    assert_eq!(r.code, 0, "ping -6 exit status");
    assert_eq!(r.stats.icmp_echo_gateway, 3);
    assert!(r.engine_counter("Icmp6OutEchoReplies") >= 3);
}

#[test]
fn dns_aaaa_through_the_ipv6_nameserver() {
    let (port, _dns) = dns_server_with(true);
    let upstream = format!("127.0.0.1:{port}");
    // A raw AAAA query to fd00::3 (the resolver library would ask the
    // IPv4 nameserver first), then the library's lookup, whose AAAA
    // answer comes through the host's resolver as well.
    let py = "import socket, struct, sys\n\
              name = b''.join(bytes([len(p)]) + p for p in b'ustack-e2e.example'.split(b'.'))\n\
              q = struct.pack('>HHHHHH', 0x1234, 0x0100, 1, 0, 0, 0) + name + b'\\0' + struct.pack('>HH', 28, 1)\n\
              s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
              s.settimeout(10)\n\
              s.sendto(q, ('fd00::3', 53))\n\
              r, a = s.recvfrom(512)\n\
              want = socket.inet_pton(socket.AF_INET6, sys.argv[1])\n\
              sys.exit(0 if r[:2] == b'\\x12\\x34' and r.endswith(want) and a[0] == 'fd00::3' else 1)\n";
    let want = DNS_AAAA.to_string();
    let script = format!(
        "python3 -c \"$0\" {want} && getent ahostsv6 ustack-e2e.example | grep -q '^{want} '"
    );
    let r = ustack_run(&["--dns-upstream", &upstream, "--", "sh", "-c", &script, py]);
    assert_eq!(r.code, 0);
    assert!(r.stats.dns_queries >= 2, "{}", r.stats.dns_queries);
}

/// `-p SPEC` to a server in the sandbox listening on `listen` (an IPv6 or
/// IPv4 wildcard); a host client connects to `connect_ip`. The guest's
/// server tells the host it listens by connecting to a host listener
/// first (no polling), then echoes one connection and checks its peer is
/// `want_peer`.
fn forward_to_guest(spec_host: &str, connect_ip: &str, listen: &str, want_peer: &str) {
    let host_port = closed_port(connect_ip);
    let spec = format!("{spec_host}{host_port}:80");
    let ready = TcpListener::bind("127.0.0.1:0").expect("bind");
    let ready_at = ready.local_addr().expect("addr");
    let target = SocketAddr::new(connect_ip.parse().expect("address"), host_port);
    let client = serve_one(ready, move |_c, _peer| -> Result<Vec<u8>, String> {
        let mut c = TcpStream::connect_timeout(&target, Duration::from_secs(5))
            .map_err(|e| format!("connect {target}: {e}"))?;
        let _ = c.set_read_timeout(Some(Duration::from_secs(20)));
        let msg = b"hello through the IPv6 forward\n";
        c.write_all(msg).map_err(|e| e.to_string())?;
        c.shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        c.read_to_end(&mut got).map_err(|e| e.to_string())?;
        Ok(got)
    });
    let family = if listen.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let py = format!(
        "import socket, sys\n\
         s = socket.socket(socket.{family})\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         if socket.{family} == socket.AF_INET6: s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n\
         s.bind(('{listen}', 80))\n\
         s.listen(1)\n\
         socket.create_connection(('10.0.2.2', {ready}), timeout=10).close()\n\
         s.settimeout(20)\n\
         c, a = s.accept()\n\
         c.settimeout(20)\n\
         d = b''\n\
         while True:\n\
         \x20   b = c.recv(4096)\n\
         \x20   if not b: break\n\
         \x20   d += b\n\
         c.sendall(d)\n\
         c.close()\n\
         sys.exit(0 if a[0] == '{want_peer}' else 3)\n",
        ready = ready_at.port()
    );
    let r = ustack_run(&["-p", &spec, "--", "python3", "-c", &py]);
    unblock(&client, ready_at);
    let got = client.join().expect("client thread");
    assert_eq!(r.code, 0, "guest server exit status (3: wrong peer)");
    assert_eq!(
        got.ok(),
        Some(Ok(b"hello through the IPv6 forward\n".to_vec()))
    );
    assert_eq!(r.stats.tcp_inbound, 1);
}

#[test]
fn ipv6_forward_reaches_an_ipv6_listener_in_the_sandbox() {
    // An IPv6 host address: the guest is reached over IPv6, from fd00::2.
    forward_to_guest("[::1]:", "::1", "::", "fd00::2");
}

#[test]
fn plain_forward_also_listens_on_ipv6_loopback_and_reaches_the_guest_over_ipv4() {
    // No host address: 127.0.0.1 and ::1; the guest (listening on IPv4
    // only) sees the connection from 10.0.2.2 as before IPv6.
    forward_to_guest("", "::1", "0.0.0.0", "10.0.2.2");
}

#[test]
fn no_ipv6_leaves_the_sandbox_without_ipv6_addresses() {
    let script = "! ip -6 addr show dev eth0 | grep -q fd00 && \
                  [ $(grep -c '^nameserver' /etc/resolv.conf) = 1 ] && \
                  ! ip -6 route | grep -q default";
    let r = ustack_run(&["--no-ipv6", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0);
}

/// A network namespace made by `ip netns add`, deleted when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

fn ip(args: &[&str]) {
    let st = std::process::Command::new("ip")
        .args(args)
        .status()
        .expect("run ip");
    assert!(st.success(), "ip {args:?} failed");
}

/// Poll `f` every 50 ms until it holds or `limit` passes.
fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn attach_serves_ipv6_in_an_existing_namespace() {
    // The namespace is configured by its owner, as for IPv4: the same
    // addresses `ustack run` gives its sandbox.
    let name = format!("ustk-att6-{}", std::process::id());
    ip(&["netns", "add", &name]);
    let ns = Netns(name);
    ip(&["-n", &ns.0, "tuntap", "add", "mode", "tap", "name", "tap0"]);
    ip(&["-n", &ns.0, "link", "set", "tap0", "up"]);
    ip(&[
        "-n",
        &ns.0,
        "-6",
        "addr",
        "add",
        "fd00::100/64",
        "dev",
        "tap0",
        "nodad",
    ]);
    ip(&[
        "-n", &ns.0, "-6", "route", "add", "default", "via", "fd00::2",
    ]);

    let l = TcpListener::bind("[::1]:0").expect("bind [::1]");
    let at = l.local_addr().expect("addr");
    let len = 200_000;
    let server = serve_one(l, move |mut c, peer| {
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
        let body: Vec<u8> = (0..len).map(body_byte).collect();
        let head = format!("HTTP/1.0 200 OK\r\nContent-Length: {len}\r\n\r\n");
        let _ = c.write_all(head.as_bytes());
        let _ = c.write_all(&body);
        peer
    });
    let netns = format!("/run/netns/{}", ns.0);
    // Hardened, as `ustack attach` runs (killed if the test fails first).
    let relay = match hardened::Attach::spawn(&["--netns", &netns, "--tap", "tap0"]) {
        Ok(a) => a,
        Err(e) => panic!("ustack attach: {e:#}"),
    };
    let url = format!("http://[fd00::2]:{}/x", at.port());
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.0,
            "curl",
            "-s",
            "--max-time",
            "10",
            &url,
        ])
        .output()
        .expect("curl in the namespace");
    // The namespace's kernel takes ustack's router advertisements (a
    // default route learnt from them, `proto ra`)...
    let ra_route = || {
        let out = std::process::Command::new("ip")
            .args(["-n", &ns.0, "-6", "route", "show", "default"])
            .output()
            .expect("ip route");
        String::from_utf8_lossy(&out.stdout).contains("proto ra")
    };
    let learnt = wait_until(Duration::from_secs(15), ra_route);
    // Stop the relay whatever happened.
    let served = relay.stop();
    // ... and drops that route when ustack leaves (its final
    // advertisement with Router Lifetime zero), not 30 minutes later.
    let dropped = wait_until(Duration::from_secs(5), || !ra_route());
    unblock(&server, at);
    let peer = server.join().expect("server thread").expect("accept");
    assert_eq!(served, Ok(0));
    assert!(out.status.success(), "curl: {:?}", out.status);
    assert!(
        learnt,
        "no default route from ustack's router advertisements"
    );
    assert!(dropped, "the RA default route outlived ustack");
    assert_eq!(peer.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    assert_eq!(out.stdout.len(), len);
    assert!(out
        .stdout
        .iter()
        .enumerate()
        .all(|(i, b)| *b == body_byte(i)));
}

#[test]
fn a_host_without_an_ipv6_route_gives_the_guest_network_unreachable() {
    // The relay runs in a namespace of its own without any route (as a
    // host without IPv6 connectivity); the guest in another one.
    let pid = std::process::id();
    let host = Netns(format!("ustk-noroute-{pid}"));
    ip(&["netns", "add", &host.0]);
    ip(&["-n", &host.0, "link", "set", "lo", "up"]);
    let guest = Netns(format!("ustk-guest6-{pid}"));
    ip(&["netns", "add", &guest.0]);
    ip(&[
        "-n", &guest.0, "tuntap", "add", "mode", "tap", "name", "tap0",
    ]);
    ip(&["-n", &guest.0, "link", "set", "tap0", "up"]);
    ip(&[
        "-n",
        &guest.0,
        "-6",
        "addr",
        "add",
        "fd00::100/64",
        "dev",
        "tap0",
        "nodad",
    ]);
    ip(&[
        "-n", &guest.0, "-6", "route", "add", "default", "via", "fd00::2",
    ]);

    let guest_ns = format!("/run/netns/{}", guest.0);
    // Hardened, as `ustack attach` runs, in the host namespace without routes.
    let relay = match hardened::Attach::spawn_in(&host.0, &["--netns", &guest_ns, "--tap", "tap0"])
    {
        Ok(a) => a,
        Err(e) => panic!("ustack attach: {e:#}"),
    };
    // The guest's connect fails at once with ENETUNREACH (ICMPv6 no route
    // to destination, RFC 4443 3.1 code 0), not after a timeout.
    let py = "import errno, socket, sys, time\n\
              t = time.monotonic()\n\
              try:\n\
              \x20   socket.create_connection(('2001:db8::1', 80), timeout=10)\n\
              \x20   sys.exit(1)\n\
              except OSError as e:\n\
              \x20   print(errno.errorcode.get(e.errno, e.errno), round(time.monotonic() - t, 3))\n\
              \x20   sys.exit(0 if e.errno == errno.ENETUNREACH else 2)\n";
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &guest.0, "python3", "-c", py])
        .output()
        .expect("python3 in the namespace");
    let served = relay.stop();
    assert_eq!(served, Ok(0));
    let said = String::from_utf8_lossy(&out.stdout);
    eprintln!("the guest's connect: {}", said.trim());
    assert_eq!(out.status.code(), Some(0), "guest saw: {said}");
}

#[test]
fn conflicting_ipv6_options_are_refused_before_anything_starts() {
    for (bad, why) in [
        (
            &["--addr6", "fd00::2/64", "--", "true"][..],
            "--addr6 fd00::2 is",
        ),
        (
            &["--gateway6", "fd01::2", "--", "true"][..],
            "--gateway6 fd01::2 is not",
        ),
    ] {
        match hardened::run_report(bad) {
            Ok(r) => panic!("{bad:?} ran (exit {})", r.code),
            Err(e) => assert!(format!("{e:#}").contains(why), "{bad:?}: {e:#}"),
        }
    }
    // A consistent choice of one's own runs.
    let r = ustack_run(&[
        "--addr6",
        "fd42::10/64",
        "--gateway6",
        "fd42::1",
        "--dns6",
        "fd42::53",
        "--",
        "sh",
        "-c",
        "ip -6 route | grep -q '^default via fd42::1' && grep -q '^nameserver fd42::53$' /etc/resolv.conf && ping -6 -c 1 -W 2 fd42::1 > /dev/null || exit 1; \
         for i in $(seq 100); do ip -6 addr show | grep -q 'inet6 fd42::.*/64 .*dynamic' && break; sleep 0.1; done; \
         ip -6 addr show | grep -q 'inet6 fd42::.*/64 .*dynamic' || exit 2; \
         ip -6 addr show | grep -q 'inet6 fd00:' && exit 3; exit 0",
    ]);
    // 2: the router advertisements did not carry --addr6's prefix (no
    // SLAAC address in it); 3: they advertised the default fd00::/64.
    assert_eq!(r.code, 0);
}
