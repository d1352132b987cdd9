//! The whole `ustack run` path (sandbox + relay loop + exit status) with the
//! fake guest engine in this process, and the same checks through the
//! hardened relay with the real engine (`ustack-run-hardened`, as the
//! `ustack` binary runs it). Needs root and /dev/net/tun.

use ustack_relay::cli::run_with;
use ustack_relay::testing::FakeGuest;

mod common;
use common::{args, hardened};

fn run(v: &[&str]) -> i32 {
    let code = run_in_process(v);
    // The same through the hardened relay (privileges dropped, seccomp).
    match hardened::run(v) {
        Ok(c) => assert_eq!(c, code, "hardened run of {v:?}"),
        Err(e) => panic!("hardened run of {v:?}: {e:#}"),
    }
    code
}

fn run_in_process(v: &[&str]) -> i32 {
    match run_with(
        args(v),
        Box::new(|dev, _a, _mtu| {
            // Keep the TAP open: closing it removes the interface.
            let mut g = FakeGuest::new();
            g.keep.push(Box::new(dev));
            Ok(g)
        }),
    ) {
        Ok(c) => c,
        Err(e) => panic!("run: {e:#}"),
    }
}

#[test]
fn exit_status_passes_through() {
    assert_eq!(run(&["--", "sh", "-c", "exit 7"]), 7);
    assert_eq!(run(&["--stats", "--", "true"]), 0);
    assert_eq!(run(&["--", "sh", "-c", "kill -KILL $$"]), 128 + 9);
}

#[test]
fn missing_command_gives_127() {
    assert_eq!(run(&["--", "/nonexistent/ustack-missing"]), 127);
}

#[test]
fn flags_reach_the_sandbox() {
    let script = "ip -4 -o addr show dev veth9 | grep -q 'inet 172.16.5.20/24' || exit 1; \
                  ip route | grep -q '^default via 172.16.5.1' || exit 2; \
                  ip -o link show dev veth9 | grep -q 'mtu 1400' || exit 3; \
                  grep -q '^nameserver 172.16.5.3$' /etc/resolv.conf || exit 4; exit 0";
    let code = run(&[
        "--tap",
        "veth9",
        "--mtu",
        "1400",
        "--addr",
        "172.16.5.20/24",
        "--gateway",
        "172.16.5.1",
        "--dns",
        "172.16.5.3",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code, 0);
}

#[test]
fn pcap_file_is_created() {
    let path = std::env::temp_dir().join(format!("ustack-run-test-{}.pcap", std::process::id()));
    let p = path.to_string_lossy().into_owned();
    assert_eq!(run(&["--pcap", &p, "--", "true"]), 0);
    let meta = std::fs::metadata(&path);
    let _ = std::fs::remove_file(&path);
    assert!(
        meta.map(|m| m.len() >= 24).unwrap_or(false),
        "pcap header written"
    );
}
