//! `ustack run` serves addresses to its guest (issue 15 item 5): the
//! sandbox's kernel forms a fd00::/64 address by SLAAC from ustack's router
//! advertisements and routes through ustack's link-local address; a DHCP
//! client in the sandbox (busybox `udhcpc`) gets a lease, and not with
//! `--no-dhcp`. Needs root, /dev/net/tun and busybox (`scripts/deps.sh`);
//! a missing prerequisite fails the test loudly.

use std::net::Ipv4Addr;

use ustack_relay::cli::guest_config;

mod common;
use common::{args, hardened, TempFile};

/// `ustack run ARGS`, hardened as the `ustack` binary's (its own process;
/// see `common/hardened.rs`).
fn ustack_run(v: &[&str]) -> i32 {
    match hardened::run(v) {
        Ok(c) => c,
        Err(e) => panic!("ustack run {v:?}: {e:#}"),
    }
}

/// ustack's link-local address (EUI-64 of 52:55:0a:00:02:02).
const GATEWAY_LL: &str = "fe80::5055:aff:fe00:202";

#[test]
fn the_guest_forms_a_slaac_address_and_routes_via_ustack() {
    // Poll the guest's own view (bounded: 200 x 0.1 s), print it on failure.
    let script = format!(
        "for i in $(seq 200); do \
           ip -6 addr show dev eth0 | grep -q 'inet6 fd00::.*/64 scope global dynamic' && \
           ip -6 route show default | grep -q 'via {GATEWAY_LL} dev eth0' && exit 0; \
           sleep 0.1; \
         done; ip -6 addr; ip -6 route; exit 1"
    );
    assert_eq!(ustack_run(&["--", "sh", "-c", &script]), 0);
}

#[test]
fn a_dhcp_client_gets_a_lease_unless_dhcp_is_off() {
    // -n: exit with failure if no lease; -s /bin/true: leave eth0 as it is.
    let udhcpc = "busybox udhcpc -i eth0 -f -q -n -t 3 -T 1 -s /bin/true";
    assert_eq!(ustack_run(&["--", "sh", "-c", udhcpc]), 0, "lease");
    assert_ne!(
        ustack_run(&["--no-dhcp", "--", "sh", "-c", udhcpc]),
        0,
        "no lease with --no-dhcp"
    );
}

/// An executable `sh` script in the temporary directory running `body`
/// (then `exit 0`), for a DHCP client to call with its lease.
fn hook_script(tag: &str, body: &str) -> TempFile {
    use std::os::unix::fs::PermissionsExt;
    let f = TempFile::new(tag);
    std::fs::write(f.as_path(), format!("#!/bin/sh\n{body}\nexit 0\n")).expect("write hook");
    std::fs::set_permissions(f.as_path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod hook");
    f
}

#[test]
fn the_dhcp_lease_carries_the_address_router_dns_and_mask() {
    // udhcpc hands its lease to the script in the environment.
    let env = TempFile::new("udhcpc-lease.env");
    let script = hook_script(
        "udhcpc-hook.sh",
        &format!(
            "[ \"$1\" = bound ] && echo \"ip=$ip router=$router dns=$dns subnet=$subnet\" > {}",
            env.path()
        ),
    );
    let udhcpc = format!(
        "busybox udhcpc -i eth0 -f -q -n -t 3 -T 1 -s {}",
        script.path()
    );
    assert_eq!(ustack_run(&["--", "sh", "-c", &udhcpc]), 0, "lease");
    let got = std::fs::read_to_string(env.as_path()).expect("the hook ran");
    assert_eq!(
        got.trim(),
        "ip=10.0.2.15 router=10.0.2.2 dns=10.0.2.3 subnet=255.255.255.0"
    );
    // --addr and --dns move them.
    let _ = std::fs::remove_file(env.as_path());
    let code = ustack_run(&[
        "--addr",
        "10.0.2.20/24",
        "--dns",
        "10.0.2.4",
        "--",
        "sh",
        "-c",
        &udhcpc,
    ]);
    assert_eq!(code, 0, "lease");
    let got = std::fs::read_to_string(env.as_path()).expect("the hook ran");
    assert_eq!(
        got.trim(),
        "ip=10.0.2.20 router=10.0.2.2 dns=10.0.2.4 subnet=255.255.255.0"
    );
}

/// What dhcpcd leaves on the host for interface `ifname` (its files live on
/// the host's file system, which the sandbox shares), removed on drop.
struct DhcpcdFiles(Vec<std::path::PathBuf>);

impl DhcpcdFiles {
    fn new(ifname: &str) -> DhcpcdFiles {
        let mut v: Vec<std::path::PathBuf> = [
            format!("/var/lib/dhcpcd/{ifname}.lease6"),
            format!("/run/dhcpcd/{ifname}-6.sock"),
            format!("/run/dhcpcd/{ifname}-6.unpriv.sock"),
            format!("/run/dhcpcd/{ifname}-6.pid"),
        ]
        .into_iter()
        .map(Into::into)
        .collect();
        let duid = std::path::PathBuf::from("/var/lib/dhcpcd/duid");
        if !duid.exists() {
            v.push(duid);
        }
        DhcpcdFiles(v)
    }
}

impl Drop for DhcpcdFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn dhcpcd_in_the_sandbox_takes_its_ipv6_address_and_dns_by_dhcpv6() {
    // A guest whose init runs a DHCPv6 client (a VM, a container image):
    // dhcpcd, on an interface named for this test so that its files never
    // meet the host's, asks ustack's DHCPv6 server for an address (IA_NA).
    let ifname = format!("ud6{}", std::process::id() % 1_000_000);
    let _files = DhcpcdFiles::new(&ifname);
    let env = TempFile::new("dhcpcd-lease.env");
    let conf = TempFile::new("dhcpcd.conf");
    let hook = hook_script(
        "dhcpcd-hook.sh",
        &format!(
            "case \"$reason\" in BOUND6|REBOOT6|RENEW6) env | sort > {0}.tmp && mv {0}.tmp {0} ;; esac",
            env.path()
        ),
    );
    std::fs::write(
        conf.as_path(),
        format!(
            "ipv6only\nnoipv4ll\nnohook resolv.conf\nscript {}\nia_na 1\n",
            hook.path()
        ),
    )
    .expect("write conf");
    // In the foreground (-B), stopped once the hook wrote the lease
    // (bounded: 300 x 0.1 s); under `timeout`, which passes the SIGTERM on
    // and kills a dhcpcd still there after 60 s (once a run waited 600 s
    // for one that did not end).
    let cmd = format!(
        "timeout -k 5 60 dhcpcd -f {conf} -B -t 20 {ifname} >/dev/null 2>&1 & pid=$!; \
         for i in $(seq 300); do [ -s {env} ] && break; sleep 0.1; done; \
         kill $pid; wait $pid; [ -s {env} ]",
        conf = conf.path(),
        env = env.path()
    );
    let r = match hardened::run_report(&["--tap", &ifname, "--", "sh", "-c", &cmd]) {
        Ok(r) => r,
        Err(e) => panic!("ustack run: {e:#}"),
    };
    let lease = std::fs::read_to_string(env.as_path()).unwrap_or_default();
    assert_eq!(r.code, 0, "no lease from dhcpcd:\n{lease}");
    let d6 = guest_config(&args(&["--", "true"]).relay, 1500)
        .services
        .dhcpv6
        .expect("DHCPv6 on by default");
    assert!(
        lease.contains(&format!("new_dhcp6_ia_na1_ia_addr1={}", d6.first)),
        "{lease}"
    );
    assert!(
        lease.contains(&format!("new_dhcp6_name_servers={}", d6.dns[0])),
        "{lease}"
    );
    assert!(r.engine_counter("Dhcp6OutReplies") >= 1);
    assert_eq!(
        r.engine_counter("Dhcp6InErrors") + r.engine_counter("Dhcp6InDiscards"),
        0
    );
}

#[test]
fn the_flags_turn_each_service_off() {
    let cfg = |v: &[&str]| guest_config(&args(v).relay, 1500).services;
    let all = cfg(&["--", "true"]);
    assert!(all.router.is_some() && all.dhcpv4.is_some() && all.dhcpv6.is_some());
    let d4 = all
        .dhcpv4
        .as_ref()
        .map(|d| (d.pool_start, d.router, d.dns.clone()));
    let want = (
        Ipv4Addr::new(10, 0, 2, 15),
        Some(Ipv4Addr::new(10, 0, 2, 2)),
        vec![Ipv4Addr::new(10, 0, 2, 3)],
    );
    assert_eq!(d4, Some(want));
    let s = cfg(&["--no-ra", "--", "true"]);
    assert!(s.router.is_none() && s.dhcpv4.is_some() && s.dhcpv6.is_some());
    let s = cfg(&["--no-dhcp", "--", "true"]);
    assert!(s.router.is_some() && s.dhcpv4.is_none() && s.dhcpv6.is_some());
    let s = cfg(&["--no-dhcpv6", "--", "true"]);
    assert!(s.router.is_some() && s.dhcpv4.is_some() && s.dhcpv6.is_none());
    // Without DHCPv6 the RA does not send guests to it (O flag).
    assert_eq!(s.router.map(|r| r.other), Some(false));
    // --addr and --dns reach the DHCPv4 server.
    let s = cfg(&["--addr", "10.0.2.20/24", "--dns", "10.0.2.4", "--", "true"]);
    let d4 = s.dhcpv4.map(|d| (d.pool_start, d.dns));
    assert_eq!(
        d4,
        Some((
            Ipv4Addr::new(10, 0, 2, 20),
            vec![Ipv4Addr::new(10, 0, 2, 4)]
        ))
    );
}
