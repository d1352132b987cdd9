//! ustack's address services against the Linux kernel over a TAP device
//! inside a private network namespace created (and always removed) by the
//! test: the kernel (accept_ra=2) takes an address in the advertised
//! prefix by SLAAC, a default route via ustack's link-local address and
//! the advertised MTU; busybox's `udhcpc` gets 10.0.2.15/24, the router
//! and the DNS server from ustack's DHCPv4 server. Needs root,
//! /dev/net/tun and busybox (`scripts/deps.sh` installs it); if they are
//! missing the test fails loudly.

mod common;

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use ustack_net::core::{link_local, AddressServices, Dhcpv4Config, RouterConfig};
use ustack_net::dev::tap::Tap;
use ustack_net::Net;

const GW4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const DNS4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
const GUEST4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
const PREFIX: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0);
const DNS6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"))
}

fn ip(args: &[&str]) -> String {
    let out = run("ip", args);
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace that is deleted on drop (also when the test panics).
struct NetNs {
    name: String,
}

impl NetNs {
    fn new(tag: &str) -> NetNs {
        let name = format!("ustk-{tag}-{}", std::process::id());
        let _ = run("ip", &["netns", "del", &name]);
        ip(&["netns", "add", &name]);
        NetNs { name }
    }

    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.name);
        let file = File::open(&path).expect("open netns");
        thread::spawn(move || {
            // SAFETY: setns on a valid namespace fd; it changes only the
            // network namespace of this (new, private) thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }

    fn exec(&self, args: &[&str]) -> Output {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Write a sysctl of the namespace.
    fn sysctl(&self, path: &str, value: &str) {
        let cmd = format!("echo {value} > /proc/sys/{path}");
        let out = self.exec(&["sh", "-c", &cmd]);
        assert!(out.status.success(), "{cmd}: {out:?}");
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// A temporary directory removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("ustack-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Poll `f` until it returns `Some` or `limit` passes (bounded; each try
/// looks at observable state).
fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

fn services() -> AddressServices {
    let mut ra = RouterConfig::new(PREFIX);
    ra.rdnss = vec![DNS6];
    ra.mtu = Some(1400);
    let mut d4 = Dhcpv4Config::new(GW4, 24, GUEST4);
    d4.dns = vec![DNS4];
    AddressServices {
        router: Some(ra),
        dhcpv4: Some(d4),
        dhcpv6: None,
    }
}

#[test]
fn the_kernel_configures_itself_from_ustacks_ra_and_dhcp() {
    let ns = NetNs::new("addr");
    let tap_name = format!("ustka{}", std::process::id() % 10_000_000);
    let name = tap_name.clone();
    let tap = ns
        .run(move || Tap::create(&name))
        .join()
        .expect("tap thread")
        .expect("create TAP (root and /dev/net/tun needed)");
    // The kernel end is a host taking router advertisements (2: even if
    // forwarding were on).
    ns.sysctl(&format!("net/ipv6/conf/{tap_name}/accept_ra"), "2");
    ns.sysctl(&format!("net/ipv6/conf/{tap_name}/autoconf"), "1");

    let mut cfg = common::config(GW4, 0x0c);
    cfg.mtu = 1500;
    let ustack_ll = link_local(cfg.mac).address;
    let net = Net::start(cfg, Box::new(tap), common::opts("ustack-addr")).expect("start");
    let now = net.now();
    net.with_stack(|s| s.set_address_services(now, services()))
        .expect("services");
    ip(&["-n", &ns.name, "link", "set", &tap_name, "up"]);

    // SLAAC: an address in fd00::/64 that passed DAD (not tentative).
    let addr = wait_for(common::PATIENCE, || {
        let out = ip(&["-n", &ns.name, "-6", "addr", "show", "dev", &tap_name]);
        out.lines()
            .find(|l| l.contains("inet6 fd00::") && !l.contains("tentative"))
            .map(str::to_owned)
    });
    let addrs = ip(&["-n", &ns.name, "-6", "addr", "show", "dev", &tap_name]);
    let addr = addr.unwrap_or_else(|| panic!("no SLAAC address in fd00::/64:\n{addrs}"));
    assert!(addr.contains("/64") && addr.contains("dynamic"), "{addr}");
    // The default route via ustack's link-local address (RA lifetime).
    let route = wait_for(common::PATIENCE, || {
        let r = ip(&["-n", &ns.name, "-6", "route", "show", "default"]);
        r.contains(&format!("via {ustack_ll} dev {tap_name}"))
            .then_some(r)
    });
    let routes = ip(&["-n", &ns.name, "-6", "route"]);
    assert!(
        route.is_some(),
        "no default route via {ustack_ll}:\n{routes}"
    );
    // The MTU option: the kernel's IPv6 MTU on the link follows it.
    let out = ns.exec(&["cat", &format!("/proc/sys/net/ipv6/conf/{tap_name}/mtu")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1400");
    let c = net.counters();
    assert!(c.icmp6.OutRouterAdvertisements >= 1);

    // DHCPv4 with busybox's udhcpc; its script applies the lease and
    // writes what it got.
    let dir = TempDir::new("udhcpc");
    let script = dir.0.join("script.sh");
    let got = dir.0.join("lease");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             [ \"$1\" = bound ] || exit 0\n\
             echo \"ip=$ip subnet=$subnet router=$router dns=$dns lease=$lease serverid=$serverid\" > {}\n\
             ip addr add \"$ip/$subnet\" dev \"$interface\"\n\
             ip route add default via \"$router\" dev \"$interface\"\n",
            got.display()
        ),
    )
    .expect("write script");
    let chmod = run("chmod", &["755", &script.to_string_lossy()]);
    assert!(chmod.status.success());
    let out = ns.exec(&[
        "busybox",
        "udhcpc",
        "-i",
        &tap_name,
        "-f",
        "-q",
        "-n",
        "-t",
        "5",
        "-T",
        "2",
        "-s",
        &script.to_string_lossy(),
    ]);
    assert!(
        out.status.success(),
        "udhcpc failed (busybox installed?): {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lease = std::fs::read_to_string(&got).unwrap_or_default();
    assert_eq!(
        lease.trim(),
        "ip=10.0.2.15 subnet=255.255.255.0 router=10.0.2.2 dns=10.0.2.3 lease=86400 \
         serverid=10.0.2.2",
        "udhcpc output: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v4 = ip(&["-n", &ns.name, "-4", "addr", "show", "dev", &tap_name]);
    assert!(v4.contains("inet 10.0.2.15/24"), "{v4}");
    let r4 = ip(&["-n", &ns.name, "-4", "route", "show", "default"]);
    assert!(r4.contains("via 10.0.2.2"), "{r4}");
    // The address works: the kernel pings ustack over it.
    let out = ns.exec(&["ping", "-n", "-c", "1", "-W", "5", &GW4.to_string()]);
    assert!(out.status.success(), "ping 10.0.2.2: {out:?}");
    let c = net.counters();
    assert!(
        c.dhcp.InDiscovers >= 1 && c.dhcp.OutOffers >= 1,
        "{:?}",
        c.dhcp
    );
    assert!(
        c.dhcp.InRequests >= 1 && c.dhcp.OutAcks >= 1,
        "{:?}",
        c.dhcp
    );
    assert_eq!(c.dhcp.InErrors, 0);
}
