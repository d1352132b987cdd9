//! `ustack run` end to end with the real engine (ustack-core in transparent
//! mode behind the sandbox's TAP): real programs inside the namespace talk
//! to servers on the host's loopback through the relay. Needs root and
//! /dev/net/tun; a missing prerequisite fails the test loudly.
//!
//! Every `ustack run` and `ustack attach` here is hardened as the `ustack`
//! binary's (its own process, privileges given up, seccomp): see
//! `common/hardened.rs`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ustack_relay::cli::RunReport;

mod common;
use common::hardened::{self, HardenedRun};
use common::{body_byte, dns_server, http_server, Helper, TempFile};

fn ustack_run(v: &[&str]) -> i32 {
    match hardened::run(v) {
        Ok(c) => c,
        Err(e) => panic!("ustack run {v:?}: {e:#}"),
    }
}

/// `ustack run` returning the exit code and the engine's counters.
fn ustack_run_report(v: &[&str]) -> RunReport {
    match hardened::run_report(v) {
        Ok(r) => r,
        Err(e) => panic!("ustack run {v:?}: {e:#}"),
    }
}

/// A port on 127.0.0.1 nobody listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[test]
fn exit_status_passes_through() {
    assert_eq!(ustack_run(&["--", "sh", "-c", "exit 7"]), 7);
}

#[test]
fn curl_downloads_10mb_from_host_loopback_byte_exact() {
    download(10 << 20, &[]);
}

/// `curl` in the sandbox downloads `len` bytes from the host's loopback
/// (`ustack run FLAGS -- curl ...`); every byte checked. Returns the run's
/// counters.
fn download(len: usize, flags: &[&str]) -> RunReport {
    let (port, _srv) = http_server(len);
    let out = TempFile::new(&format!("e2e-curl-{len}{}.bin", flags.len()));
    let path = out.path();
    let url = format!("http://10.0.2.2:{port}/file");
    let t0 = Instant::now();
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["--", "curl", "-s", "--max-time", "60", "-o", &path, &url]);
    let report = ustack_run_report(&args);
    let took = t0.elapsed();
    assert_eq!(report.code, 0, "curl exit status");
    let got = std::fs::read(out.as_path()).expect("curl output");
    assert_eq!(got.len(), len);
    if let Some(i) = (0..len).find(|&i| got[i] != body_byte(i)) {
        panic!("byte {i} differs");
    }
    eprintln!("{len} bytes through the relay ({flags:?}) in {took:?}");
    report
}

/// 100 MB each way through `ustack run`, with the TAP's offloads (the
/// default: the guest's kernel hands over 64 KB segments) and without. At a
/// guest MTU of 1500, where the offloads matter: at the default 65520 a
/// segment fits a frame anyway.
#[test]
fn hundred_megabytes_both_ways_with_and_without_offloads() {
    for flags in [
        &["--mtu", "1500"][..],
        &["--mtu", "1500", "--no-offload"][..],
    ] {
        let down = download(100 << 20, flags);
        let up = upload(100 << 20, flags);
        // With offloads the data crosses the TAP in 64 KB super-frames both
        // ways (ustack's TSO towards the guest, the guest's TSO towards
        // ustack); without them, never.
        let (out, inn) = (
            down.engine_counter("LinkOutGsoFrames"),
            up.engine_counter("LinkInGsoFrames"),
        );
        // The download's data left the relay by reference to the send
        // buffers (zero-copy transmit) when the TAP completes checksums.
        let zero_copy = down.engine_counter("LinkOutZeroCopyFrames");
        if !flags.contains(&"--no-offload") {
            assert!(out > 0, "no GSO super-frame sent to the guest");
            assert!(inn > 0, "no GSO super-frame received from the guest");
            assert!(zero_copy > 0, "no frame sent by reference");
        } else {
            assert_eq!((out, inn), (0, 0), "GSO frames with --no-offload");
            assert_eq!(zero_copy, 0, "frames by reference with --no-offload");
            assert_eq!(up.engine_counter("LinkOutGsoFrames"), 0);
            assert_eq!(down.engine_counter("LinkInGsoFrames"), 0);
        }
    }
}

#[test]
fn closed_host_port_is_refused_fast() {
    let port = closed_port();
    let url = format!("http://10.0.2.2:{port}/");
    let t0 = Instant::now();
    let code = ustack_run(&["--", "curl", "-s", "--max-time", "10", &url]);
    assert_eq!(code, 7, "curl: couldn't connect (connection refused)");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// A datagram to a host port nobody listens on: the guest's connected
/// socket gets ECONNREFUSED from the ICMP port unreachable the relay
/// passes on, as against the host itself, over IPv4 and IPv6, and so does
/// one to the nameserver on a port other than 53 (before, nothing came
/// back: `recv` waited for its timeout, and a resolver pointed at a dead
/// upstream waited out every retry).
#[test]
fn udp_to_a_closed_host_port_is_refused_at_once() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port();
    let port6 = UdpSocket::bind("[::1]:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port on [::1]")
        .port();
    let py = format!(
        "import socket, sys, time\n\
         for fam, dst in ((socket.AF_INET, ('10.0.2.2', {port})), (socket.AF_INET6, ('fd00::2', {port6})),\n\
         \x20                (socket.AF_INET, ('10.0.2.3', 54))):\n\
         \x20   s = socket.socket(fam, socket.SOCK_DGRAM)\n\
         \x20   s.settimeout(5)\n\
         \x20   s.connect(dst)\n\
         \x20   s.send(b'anyone?')\n\
         \x20   try:\n\
         \x20       s.recv(100)\n\
         \x20       sys.exit(1)\n\
         \x20   except ConnectionRefusedError:\n\
         \x20       pass\n\
         \x20   except socket.timeout:\n\
         \x20       sys.exit(2)\n"
    );
    let t0 = Instant::now();
    let r = ustack_run_report(&["--", "python3", "-c", &py]);
    assert_eq!(
        r.code, 0,
        "python3 exit status (1: an answer, 2: no refusal)"
    );
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert_eq!(r.engine_counter("IcmpOutDestUnreachs"), 2);
    assert_eq!(r.engine_counter("Icmp6OutDestUnreachs"), 1);
}

/// 500 connects at once from the sandbox to a server on the host's
/// loopback, beyond the 256 half-open slots: every one connects (before,
/// 15 to 57 of them were reset, the limit being hit before any host
/// connect could be seen to complete).
#[test]
fn a_burst_of_connects_beyond_the_half_open_limit_all_connect() {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    // SAFETY: re-listening on our own listening socket only changes its backlog.
    let rc = unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 1024) };
    assert_eq!(rc, 0, "listen");
    l.set_nonblocking(true).expect("nonblocking");
    let _acceptor = Helper::spawn(move |stop| {
        let mut held = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            match l.accept() {
                Ok((c, _)) => held.push(c),
                Err(_) => thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    let py = format!(
        "import socket, select, sys, time\n\
         n = 500\n\
         socks = [socket.socket() for _ in range(n)]\n\
         for s in socks:\n\
         \x20   s.setblocking(False)\n\
         \x20   s.connect_ex(('10.0.2.2', {port}))\n\
         by_fd = {{s.fileno(): s for s in socks}}\n\
         p = select.epoll()\n\
         for s in socks:\n\
         \x20   p.register(s.fileno(), select.EPOLLOUT)\n\
         done, refused, end = 0, 0, time.monotonic() + 20\n\
         while done < n and time.monotonic() < end:\n\
         \x20   for fd, ev in p.poll(1):\n\
         \x20       p.unregister(fd)\n\
         \x20       done += 1\n\
         \x20       if by_fd[fd].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):\n\
         \x20           refused += 1\n\
         print(done, refused)\n\
         sys.exit(0 if (done, refused) == (n, 0) else 1)\n"
    );
    let r = ustack_run_report(&["--stats", "--", "python3", "-c", &py]);
    assert_eq!(r.code, 0, "python3 exit status (1: not all connected)");
    assert_eq!(r.stats.limit_half_open, 0);
    assert_eq!(r.stats.tcp_refused_rst, 0);
}

#[test]
fn ping_the_gateway() {
    let code = ustack_run(&["--", "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.0.2.2"]);
    assert_eq!(code, 0);
}

#[test]
fn dns_through_the_guest_visible_nameserver() {
    let (port, _dns) = dns_server();
    let upstream = format!("127.0.0.1:{port}");
    let code = ustack_run(&[
        "--dns-upstream",
        &upstream,
        "--",
        "sh",
        "-c",
        "getent ahostsv4 ustack-e2e.example | grep -q '^10\\.1\\.2\\.3 '",
    ]);
    assert_eq!(code, 0);
}

#[test]
fn port_forward_reaches_a_server_in_the_sandbox() {
    let host_port = closed_port();
    let spec = format!("127.0.0.1:{host_port}:80");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let client = thread::spawn(move || -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut last = String::new();
        while Instant::now() < deadline && !s2.load(Ordering::SeqCst) {
            let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, host_port);
            match TcpStream::connect_timeout(&addr.into(), Duration::from_secs(2)) {
                Ok(mut c) => {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                    let msg = b"hello through the forward\n";
                    let mut got = Vec::new();
                    if c.write_all(msg).is_ok()
                        && c.shutdown(std::net::Shutdown::Write).is_ok()
                        && c.read_to_end(&mut got).is_ok()
                        && got == msg
                    {
                        return Ok(got);
                    }
                    last = format!("got {got:?}");
                }
                Err(e) => last = e.to_string(),
            }
            thread::sleep(Duration::from_millis(200));
        }
        Err(last)
    });
    let code = ustack_run(&[
        "-p",
        &spec,
        "--",
        "timeout",
        "25",
        "socat",
        "TCP-LISTEN:80,reuseaddr",
        "EXEC:cat",
    ]);
    stop.store(true, Ordering::SeqCst);
    let got = client.join().expect("client thread");
    assert_eq!(code, 0, "socat exit status");
    assert_eq!(got, Ok(b"hello through the forward\n".to_vec()));
}

/// A hardened `ustack run ARGS`; fails the test if it cannot run.
fn ustack_run_full(v: &[&str]) -> HardenedRun {
    match hardened::run_full(v) {
        Ok(r) => r,
        Err(e) => panic!("ustack run {v:?}: {e:#}"),
    }
}

#[test]
fn an_idle_guest_costs_no_cpu() {
    // The guest's kernel sends its own chatter (ARP, maybe IPv6 router
    // solicitations); the loop must sleep between events, not spin. The
    // CPU time is the whole relay process's (set-up and every thread).
    let r = ustack_run_full(&["--", "sleep", "2"]);
    assert_eq!(r.report.code, 0);
    let used = r.cpu;
    assert!(
        used < Duration::from_millis(300),
        "relay used {used:?} of CPU in 2 s idle"
    );
}

/// Busy polling spins only after activity: an idle guest (whose kernel
/// still sends a frame now and then) costs no more than a bounded window
/// per event, not a CPU.
#[test]
fn busy_poll_spins_only_after_activity() {
    let r = ustack_run_full(&["--busy-poll", "200", "--", "sleep", "2"]);
    assert_eq!(r.report.code, 0);
    let used = r.cpu;
    assert!(
        used < Duration::from_millis(300),
        "relay used {used:?} of CPU in 2 s idle with --busy-poll 200"
    );
}

/// The relay's tuning options change how it works, not what it delivers:
/// NewReno and busy polling, bytes checked both ways.
#[test]
fn transfers_with_newreno_and_busy_poll_are_byte_exact() {
    let flags = ["--congestion-control", "newreno", "--busy-poll", "100"];
    download(20 << 20, &flags);
    upload(20 << 20, &flags);
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

#[test]
fn attach_serves_an_existing_namespace() {
    let name = format!("ustk-att-{}", std::process::id());
    ip(&["netns", "add", &name]);
    let ns = Netns(name);
    ip(&["-n", &ns.0, "tuntap", "add", "mode", "tap", "name", "tap0"]);
    ip(&["-n", &ns.0, "addr", "add", "10.0.2.15/24", "dev", "tap0"]);
    ip(&["-n", &ns.0, "link", "set", "tap0", "up"]);
    ip(&["-n", &ns.0, "route", "add", "default", "via", "10.0.2.2"]);

    let (port, _srv) = http_server(100_000);
    let netns = format!("/run/netns/{}", ns.0);
    // Hardened, as `ustack attach` runs (killed if the test fails first).
    let server = match hardened::Attach::spawn(&["--netns", &netns, "--tap", "tap0"]) {
        Ok(a) => a,
        Err(e) => panic!("ustack attach: {e:#}"),
    };
    let url = format!("http://10.0.2.2:{port}/x");
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
    // Stop the relay whatever happened.
    let served = server.stop();
    assert_eq!(served, Ok(0));
    assert!(out.status.success(), "curl: {:?}", out.status);
    assert_eq!(out.stdout.len(), 100_000);
    assert!(out
        .stdout
        .iter()
        .enumerate()
        .all(|(i, b)| *b == body_byte(i)));
}

/// `attach` stops by itself once the namespace it serves is gone: its
/// name deleted (`ip netns del`), as pasta does. Before, the TAP's
/// descriptor kept the namespace alive and `attach` served it for ever.
#[test]
fn attach_stops_when_its_namespace_is_deleted() {
    let name = format!("ustk-attgone-{}", std::process::id());
    ip(&["netns", "add", &name]);
    let ns = Netns(name);
    ip(&["-n", &ns.0, "tuntap", "add", "mode", "tap", "name", "tap0"]);
    ip(&["-n", &ns.0, "link", "set", "tap0", "up"]);
    let netns = format!("/run/netns/{}", ns.0);
    let mut server = match hardened::Attach::spawn(&["--netns", &netns, "--tap", "tap0"]) {
        Ok(a) => a,
        Err(e) => panic!("ustack attach: {e:#}"),
    };
    assert!(
        server.ended_within(Duration::from_millis(300)).is_none(),
        "attach ended before the namespace was deleted"
    );
    ip(&["netns", "del", &ns.0]);
    std::mem::forget(ns);
    // It looks every second: 10 s is plenty.
    let ended = server.ended_within(Duration::from_secs(10));
    let stopped = ended.is_some();
    let code = ended.unwrap_or_else(|| server.stop());
    assert!(stopped, "attach still serving 10 s after `ip netns del`");
    assert_eq!(code, Ok(0));
}

/// Its TAP deleted (`ip link del` in the namespace): attach says so and
/// stops with status 0, as when its namespace goes, instead of "relay
/// failed: File descriptor in bad state".
#[test]
fn attach_stops_when_its_tap_is_deleted() {
    let name = format!("ustk-attdel-{}", std::process::id());
    ip(&["netns", "add", &name]);
    let ns = Netns(name);
    ip(&["-n", &ns.0, "tuntap", "add", "mode", "tap", "name", "tap0"]);
    ip(&["-n", &ns.0, "link", "set", "tap0", "up"]);
    let netns = format!("/run/netns/{}", ns.0);
    let mut server = match hardened::Attach::spawn(&["--netns", &netns, "--tap", "tap0"]) {
        Ok(a) => a,
        Err(e) => panic!("ustack attach: {e:#}"),
    };
    ip(&["-n", &ns.0, "link", "del", "tap0"]);
    let ended = server.ended_within(Duration::from_secs(10));
    let stopped = ended.is_some();
    let code = ended.unwrap_or_else(|| server.stop());
    assert!(
        stopped,
        "attach still serving 10 s after its TAP was deleted"
    );
    assert_eq!(code, Ok(0));
}

#[test]
fn upload_from_the_sandbox_to_host_loopback_byte_exact() {
    upload(5 << 20, &[]);
}

/// `socat` in the sandbox uploads `len` bytes to the host's loopback
/// (`ustack run FLAGS -- socat ...`); every byte checked. Returns the run's
/// counters.
fn upload(len: usize, flags: &[&str]) -> RunReport {
    let file = TempFile::new(&format!("e2e-upload-{len}{}.bin", flags.len()));
    let data: Vec<u8> = (0..len).map(|i| body_byte(i * 3)).collect();
    std::fs::write(file.as_path(), &data).expect("write upload file");
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let sink = thread::spawn(move || -> std::io::Result<Vec<u8>> {
        l.set_nonblocking(true)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut c = loop {
            match l.accept() {
                Ok((c, _)) => break c,
                Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(e),
            }
        };
        c.set_nonblocking(false)?;
        c.set_read_timeout(Some(Duration::from_secs(20)))?;
        let mut got = Vec::new();
        c.read_to_end(&mut got)?;
        Ok(got)
    });
    let src = format!("FILE:{}", file.path());
    let dst = format!("TCP:10.0.2.2:{port}");
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["--", "socat", "-u", &src, &dst]);
    let report = ustack_run_report(&args);
    assert_eq!(report.code, 0, "socat exit status");
    let got = sink.join().expect("sink thread").expect("sink");
    assert_eq!(got.len(), len);
    assert!(got == data, "uploaded bytes differ");
    report
}
