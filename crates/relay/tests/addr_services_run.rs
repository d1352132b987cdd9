//! `ustack run` serves addresses to its guest (issue 15 item 5): the
//! sandbox's kernel forms a fd00::/64 address by SLAAC from ustack's router
//! advertisements and routes through ustack's link-local address; a DHCP
//! client in the sandbox (busybox `udhcpc`) gets a lease, and not with
//! `--no-dhcp`. Needs root, /dev/net/tun and busybox (`scripts/deps.sh`);
//! a missing prerequisite fails the test loudly.

use std::net::Ipv4Addr;

use ustack_relay::cli::{guest_config, run};

mod common;
use common::args;

fn ustack_run(v: &[&str]) -> i32 {
    match run(args(v)) {
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
