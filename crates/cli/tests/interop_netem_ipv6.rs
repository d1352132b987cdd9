//! The impaired-link interop of `interop_netem.rs` over IPv6: the same
//! impairments (5% loss, 10 ms delay, 25% reordering, 1% duplication, each
//! way, applied by `ustack serve --impair` at the TAP boundary since this
//! kernel has no netem qdisc) between serve's default fd77::2/64 and the
//! kernel's fd77::1/64 in a private namespace: `curl -6` and random data
//! through the echo port byte-exact at the IPv4 test's sizes, `ping -6`
//! with fragments, UDP echo with socat, 200 concurrent connections, `ustack
//! get` as the IPv6 client, and 100 MB each way with and without the TAP's
//! offloads. Seeds are fixed so a failure can be replayed with the same
//! decisions per frame.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn transfers_under_impairment_over_ipv6() {
    let t0 = Instant::now();
    let ns = NetNs::new();
    let srv = Serve::start(&ns, &["--impair", &impair_arg(62)]);
    wait_ipv6_up(&ns);

    ping_fragments_impaired(&ns, USTACK_IP6.into());

    // The IPv4 test's sizes: 4 MiB by HTTP, 2 MiB through the echo port.
    let n = 4 << 20;
    let secs = curl6_bytes(&ns, n, 120);
    eprintln!("impaired IPv6: curl -6 {} MiB in {secs:.1} s", n >> 20);
    let n = 2 << 20;
    let secs = ns
        .spawn(move || echo_transfer(v6(7), n, 78))
        .join()
        .expect("echo client");
    eprintln!("impaired IPv6: echo {} MiB in {secs:.1} s", n >> 20);

    let err = srv.stop_clean();
    assert_impaired(&err);
    eprintln!(
        "impaired IPv6: transfers took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// One datagram to serve's UDP echo port over IPv6 with socat; what came
/// back (empty if the datagram or its echo was lost).
fn socat_udp6_echo(ns: &NetNs, payload: &[u8]) -> Vec<u8> {
    let mut child = ns
        .cmd("socat")
        // After stdin's end, wait 1 s for the echo (10 ms each way).
        .args(["-t", "1", "-", &format!("UDP6:[{USTACK_IP6}]:7")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run socat (install socat)");
    let mut stdin = child.stdin.take().expect("socat stdin");
    stdin.write_all(payload).expect("write to socat");
    drop(stdin);
    let out = child.wait_with_output().expect("socat");
    assert!(
        out.status.success(),
        "socat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn udp_echo_under_impairment_over_ipv6() {
    let ns = NetNs::new();
    let srv = Serve::start(&ns, &["--impair", &impair_arg(63)]);
    wait_ipv6_up(&ns);
    // 20 datagrams from 1 byte to 1232 (the most IPv6 carries unfragmented
    // on a 1280-byte path), random contents; a lost one is sent again.
    let mut tries = 0;
    let mut duplicated = 0;
    for i in 0..20u64 {
        let len = [1, 64, 512, 1232][(i % 4) as usize];
        let payload = random_block(100 + i, len);
        let back = loop {
            tries += 1;
            assert!(tries <= 60, "too many UDP echoes lost ({tries} sends)");
            let back = socat_udp6_echo(&ns, &payload);
            if !back.is_empty() {
                break back;
            }
        };
        // Exactly the datagram; a duplicated one comes back twice.
        let copies = back.len() / len;
        assert!(
            back.len() % len == 0
                && (1..=2).contains(&copies)
                && back.chunks(len).all(|c| c == payload),
            "datagram {i} ({len} bytes) came back as {} bytes that differ",
            back.len()
        );
        duplicated += copies - 1;
    }
    eprintln!("impaired IPv6: 20 UDP echoes in {tries} sends, {duplicated} duplicated");
    let err = srv.stop_clean();
    for dir in ["rx", "tx"] {
        let c = impair_counters(&err, dir);
        assert!(c.get("frames").copied().unwrap_or(0) >= 20, "{dir}: {c:?}");
    }
}

#[test]
fn two_hundred_concurrent_ipv6_connections_under_impairment() {
    const N: usize = 200;
    const LEN: usize = 4000;
    let t0 = Instant::now();
    let ns = NetNs::new();
    let srv = Serve::start(&ns, &["--impair", &impair_arg(64)]);
    wait_ipv6_up(&ns);
    let ok = ns
        .spawn(|| {
            // Connect all 200 at once (threads made here share this
            // thread's namespace): a lost SYN or SYN-ACK costs its
            // connection a retransmission timeout, not the others.
            let connecting: Vec<_> = (0..N).map(|_| thread::spawn(|| connect(v6(7)))).collect();
            let mut conns: Vec<TcpStream> = connecting
                .into_iter()
                .map(|h| h.join().expect("connect"))
                .collect();
            // All open at once, then data on every one.
            for (i, c) in conns.iter_mut().enumerate() {
                c.set_read_timeout(Some(Duration::from_secs(60)))
                    .expect("timeout");
                c.write_all(&random_block(i as u64 + 1, LEN))
                    .expect("write");
            }
            let mut ok = 0;
            for (i, c) in conns.iter_mut().enumerate() {
                let mut back = vec![0u8; LEN];
                c.read_exact(&mut back).expect("echo back");
                assert!(
                    back == random_block(i as u64 + 1, LEN),
                    "connection {i}: echo differs"
                );
                ok += 1;
            }
            ok
        })
        .join()
        .expect("clients");
    assert_eq!(ok, N);
    let err = srv.stop_clean();
    assert_impaired(&err);
    eprintln!(
        "impaired IPv6: {N} concurrent connections took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn ustack_get_under_impairment_over_ipv6() {
    // ustack as the IPv6 client: `ustack get` from a kernel HTTP server on
    // [::]:8080, through the same impairments, without offloads (every
    // frame one MTU, so the impairments hit segments one by one).
    let t0 = Instant::now();
    let ns = NetNs::new();
    let dir = TempDir::new("netem6");
    let data = random_block(19, 3 << 20);
    std::fs::write(dir.join("f.bin"), &data).expect("write file");
    let _server = kernel_http_server(&ns, dir.path(), "::");
    let tap = format!("ut{}", unique());
    let outfile = dir.join("out.bin");
    let out = Command::new(BIN)
        .args(["get", "--tap", &tap, "--netns", &ns.name])
        .args(["--no-offload", "--impair", &impair_arg(65)])
        .arg("-o")
        .arg(&outfile)
        .arg(format!("http://[{KERNEL_IP6}]:8080/f.bin"))
        .output()
        .expect("ustack get");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let got = std::fs::read(&outfile).expect("download");
    assert_eq!(got.len(), data.len(), "download length differs");
    assert!(got == data, "download differs");
    assert_impaired(&err);
    eprintln!(
        "impaired IPv6: get test took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// 100 MB each way over IPv6 through a lightly impaired link, with the
/// TAP's offloads (64 KB TSO super-frames over IPv6, each lost, reordered or
/// duplicated whole) and without (one MTU per frame): byte-exact in both.
#[test]
fn hundred_megabytes_both_ways_impaired_over_ipv6_with_and_without_offloads() {
    hundred_megabytes_impaired_with_and_without_offloads(true, 70);
}
