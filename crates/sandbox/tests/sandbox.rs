//! Privileged tests: each creates its own namespaces through the library (the
//! `ustack run` path) and checks what the command sees and what is left after.

use std::ffi::OsString;
use std::net::Ipv4Addr;

use ustack_dev::Device;
use ustack_sandbox::{attach, Sandbox, SandboxConfig, SandboxIpv6, UserNs};

fn args(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn run(cfg: &SandboxConfig, cmd: &[&str]) -> i32 {
    let mut sb = match Sandbox::spawn(cfg, &args(cmd)) {
        Ok(sb) => sb,
        Err(e) => panic!("spawn failed (this test needs root and /dev/net/tun): {e}"),
    };
    let tap = sb.take_tap();
    assert!(tap.is_some(), "TAP descriptor passed back");
    if let Err(e) = sb.start() {
        panic!("start: {e}");
    }
    let code = sb.wait();
    drop(tap);
    match code {
        Ok(c) => c,
        Err(e) => panic!("wait: {e}"),
    }
}

#[test]
fn command_sees_eth0_with_the_guest_address_and_route() {
    let cfg = SandboxConfig::default();
    let script = "ip -4 -o addr show dev eth0 | grep -q 'inet 10.0.2.15/24' || exit 1; \
                  ip route | grep -q '^default via 10.0.2.2 dev eth0' || exit 2; \
                  ip -o link show dev eth0 | grep -q 'mtu 1500' || exit 3; \
                  ip -o link show dev lo | grep -q 'UP' || exit 4; \
                  n=$(ip -o link | wc -l); [ \"$n\" = 2 ] || exit 5; exit 0";
    assert_eq!(run(&cfg, &["sh", "-c", script]), 0);
}

#[test]
fn flags_override_address_mtu_and_name() {
    let cfg = SandboxConfig {
        tap_name: format!("g{}", std::process::id() % 100000),
        mtu: 9000,
        addr: Ipv4Addr::new(192, 168, 77, 9),
        prefix_len: 16,
        gateway: Some(Ipv4Addr::new(192, 168, 0, 1)),
        dns: None,
        userns: UserNs::Auto,
        offload: true,
        ipv6: Some(SandboxIpv6 {
            addr: "fd00:77::9".parse().unwrap(),
            prefix_len: 64,
            gateway: Some("fd00:77::1".parse().unwrap()),
            dns: None,
        }),
    };
    // The IPv6 address is usable at once (no DAD: not tentative), the
    // link-local one stays.
    let script = format!(
        "ip -4 -o addr show dev {n} | grep -q 'inet 192.168.77.9/16' || exit 1; \
         ip route | grep -q '^default via 192.168.0.1 dev {n}' || exit 2; \
         ip -o link show dev {n} | grep -q 'mtu 9000' || exit 3; \
         ip -6 -o addr show dev {n} | grep 'inet6 fd00:77::9/64' | grep -qv tentative || exit 4; \
         ip -6 -o addr show dev {n} | grep -q 'inet6 fe80::' || exit 5; \
         ip -6 route | grep -q '^default via fd00:77::1 dev {n}' || exit 6; exit 0",
        n = cfg.tap_name
    );
    assert_eq!(run(&cfg, &["sh", "-c", &script]), 0);
}

#[test]
fn exit_codes_pass_through_shell_style() {
    let cfg = SandboxConfig::default();
    assert_eq!(run(&cfg, &["sh", "-c", "exit 7"]), 7);
    assert_eq!(run(&cfg, &["true"]), 0);
    assert_eq!(run(&cfg, &["sh", "-c", "kill -TERM $$"]), 128 + 15);
}

#[test]
fn missing_program_is_an_error_not_a_hang() {
    let cfg = SandboxConfig::default();
    let mut sb = match Sandbox::spawn(&cfg, &args(&["/nonexistent/ustack-no-such-cmd"])) {
        Ok(sb) => sb,
        Err(e) => panic!("spawn: {e}"),
    };
    match sb.start() {
        Ok(()) => panic!("exec of a missing program succeeded"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}"),
    }
}

#[test]
fn resolv_conf_is_private_to_the_command() {
    let before = std::fs::read("/etc/resolv.conf").unwrap_or_default();
    let cfg = SandboxConfig::default();
    // Ours only (none of the host's): the IPv4 one, then the IPv6 one.
    let script = "grep -q '^nameserver 10.0.2.3$' /etc/resolv.conf || exit 1; \
                  [ \"$(grep '^nameserver' /etc/resolv.conf | tr '\\n' ' ')\" = \
                    'nameserver 10.0.2.3 nameserver fd00::3 ' ] || exit 2; exit 0";
    assert_eq!(run(&cfg, &["sh", "-c", script]), 0);
    let after = std::fs::read("/etc/resolv.conf").unwrap_or_default();
    assert_eq!(before, after, "host resolv.conf unchanged");
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("ustack-resolv-{}-", std::process::id())))
                .collect()
        })
        .unwrap_or_default();
    // Other tests in this process may be mid-spawn; ours is gone once run() returned.
    assert!(leftovers.len() <= 2, "temp files left: {leftovers:?}");
}

#[test]
fn rootless_user_namespace_maps_us_to_root() {
    let cfg = SandboxConfig {
        userns: UserNs::Always,
        ..SandboxConfig::default()
    };
    let script = "[ \"$(id -u)\" = 0 ] || exit 1; grep -q ' 0 ' /proc/self/uid_map || exit 2; \
                  ip -4 -o addr show dev eth0 | grep -q 10.0.2.15 || exit 3; \
                  grep -q '^nameserver 10.0.2.3$' /etc/resolv.conf || exit 4; exit 0";
    assert_eq!(run(&cfg, &["sh", "-c", script]), 0);
}

#[test]
fn attach_opens_a_tap_inside_an_existing_namespace() {
    // A sandboxed `sleep` provides a namespace; we open a second TAP in it.
    let cfg = SandboxConfig {
        dns: None,
        ..SandboxConfig::default()
    };
    let mut sb = match Sandbox::spawn(&cfg, &args(&["sleep", "5"])) {
        Ok(sb) => sb,
        Err(e) => panic!("spawn: {e}"),
    };
    if let Err(e) = sb.start() {
        panic!("start: {e}");
    }
    let path = std::path::PathBuf::from(format!("/proc/{}/ns/net", sb.pid()));
    let name = format!("at{}", std::process::id() % 100000);
    // Not there yet: an error that says how to make it, and nothing made.
    let err = attach::open_tap_in_netns(&path, &name, true).expect_err("a missing TAP opened");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("in namespace /proc/"), "{err}");
    let made = std::process::Command::new("nsenter")
        .arg(format!("--net={}", path.display()))
        .args(["ip", "tuntap", "add", "dev", &name, "mode", "tap"])
        .status()
        .expect("run nsenter");
    assert!(made.success(), "ip tuntap add in the namespace: {made}");
    let tap = attach::open_tap_in_netns(&path, &name, true);
    assert!(tap.is_ok(), "{:?}", tap.err());
    // With the virtio-net header and the offloads.
    assert!(tap.as_ref().is_ok_and(|t| t.offloads().vnet_hdr));
    // It exists inside the namespace, not in ours.
    let here = std::path::Path::new("/sys/class/net").join(&name).exists();
    assert!(!here, "TAP must not appear in the host namespace");
    assert_eq!(tap.as_ref().map(|t| t.mtu()).ok(), Some(1500));
    let _ = sb.signal(libc::SIGKILL);
    assert_eq!(sb.wait().ok(), Some(128 + 9));
}
