//! ustack's address services against the Linux kernel over a TAP device
//! inside a private network namespace created (and always removed) by the
//! test: the kernel (accept_ra=2) takes an address in the advertised
//! prefix by SLAAC, a default route via ustack's link-local address and
//! the advertised MTU; busybox's `udhcpc` gets 10.0.2.15/24, the router
//! and the DNS server from ustack's DHCPv4 server; `dhcpcd` gets fd00::100,
//! the DNS server and the domain search list from ustack's DHCPv6 server.
//! Needs root, /dev/net/tun, busybox and dhcpcd (`scripts/deps.sh`
//! installs them); if they are missing the test fails loudly. dhcpcd runs
//! with a configuration and script of the test's (no resolv.conf hook) and
//! its files for the test's interface are removed afterwards.

mod common;

use common::kernel::{ip, run, NetNs};

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use ustack_net::core::{link_local, AddressServices, Dhcpv4Config, Dhcpv6Config, RouterConfig};
use ustack_net::Net;

const GW4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const DNS4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
const GUEST4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
const PREFIX: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0);
const DNS6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);
const GUEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100);

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

/// What dhcpcd leaves on the host for one interface (its lease, control
/// sockets, and the DUID file if the test created it), removed on drop.
struct DhcpcdFiles {
    paths: Vec<std::path::PathBuf>,
}

impl DhcpcdFiles {
    fn new(tap: &str) -> DhcpcdFiles {
        let mut paths: Vec<std::path::PathBuf> = [
            format!("/var/lib/dhcpcd/{tap}.lease6"),
            format!("/run/dhcpcd/{tap}-6.sock"),
            format!("/run/dhcpcd/{tap}-6.unpriv.sock"),
            format!("/run/dhcpcd/{tap}-6.pid"),
        ]
        .into_iter()
        .map(Into::into)
        .collect();
        let duid = std::path::PathBuf::from("/var/lib/dhcpcd/duid");
        if !duid.exists() {
            paths.push(duid);
        }
        DhcpcdFiles { paths }
    }
}

impl Drop for DhcpcdFiles {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A child process stopped (and reaped) when dropped, also on a panic:
/// SIGTERM, so that dhcpcd ends its helper processes and removes its files,
/// then SIGKILL if it is still there after 5 s.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0.id()) {
            // SAFETY: kill(2) on our own child, which is not reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let gone = wait_for(Duration::from_secs(5), || self.0.try_wait().ok().flatten());
        if gone.is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
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
    let tap = ns.tap(&tap_name, false);
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

#[test]
fn dhcpcd_gets_an_ipv6_address_and_dns_from_ustacks_dhcpv6_server() {
    let ns = NetNs::new("dh6");
    let tap_name = format!("ustkd{}", std::process::id() % 10_000_000);
    let tap = ns.tap(&tap_name, false);
    ns.sysctl(&format!("net/ipv6/conf/{tap_name}/accept_ra"), "2");
    let mut cfg = common::config(GW4, 0x0d);
    cfg.mtu = 1500;
    let net = Net::start(cfg, Box::new(tap), common::opts("ustack-dh6")).expect("start");
    let mut svc = services();
    if let Some(r) = svc.router.as_mut() {
        // M: addresses by DHCPv6 (the client starts a Solicit).
        r.managed = true;
        r.other = true;
    }
    let mut d6 = Dhcpv6Config::new(GUEST6);
    d6.dns = vec![DNS6];
    d6.domains = vec!["example.test".into()];
    svc.dhcpv6 = Some(d6);
    let now = net.now();
    net.with_stack(|s| s.set_address_services(now, svc))
        .expect("services");
    ip(&["-n", &ns.name, "link", "set", &tap_name, "up"]);

    let dir = TempDir::new("dhcpcd");
    let script = dir.0.join("script.sh");
    let got = dir.0.join("env");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$reason\" in BOUND6|REBOOT6|RENEW6) env | sort > {}.tmp && mv {}.tmp {} ;; esac\nexit 0\n",
            got.display(),
            got.display(),
            got.display()
        ),
    )
    .expect("write script");
    assert!(run("chmod", &["755", &script.to_string_lossy()])
        .status
        .success());
    let conf = dir.0.join("dhcpcd.conf");
    std::fs::write(
        &conf,
        format!(
            "ipv6only\nnoipv4ll\nnohook resolv.conf\nscript {}\nia_na 1\n",
            script.display()
        ),
    )
    .expect("write conf");
    let _files = DhcpcdFiles::new(&tap_name);
    // In the foreground (-B) rather than one-shot: with -1, dhcpcd may exit
    // once the router advertisement has configured the link, before the
    // leased address has passed DAD, and so before it runs the BOUND6 hook
    // (seen when ustack's Reply comes before its Advertisement). The test
    // waits for the hook's file instead, and stops dhcpcd itself.
    let log_path = dir.0.join("dhcpcd.log");
    let log_file = File::create(&log_path).expect("dhcpcd log");
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.name, "dhcpcd", "-f"])
        .arg(&conf)
        .args(["-B", "-t", "20", &tap_name])
        .stdout(log_file.try_clone().expect("log fd"))
        .stderr(log_file)
        .spawn()
        .expect("run dhcpcd (scripts/deps.sh installs it)");
    let mut dhcpcd = KillOnDrop(child);
    let lease = format!("new_dhcp6_ia_na1_ia_addr1={GUEST6}");
    let env = wait_for(common::PATIENCE, || {
        if let Ok(Some(st)) = dhcpcd.0.try_wait() {
            return Some(Err(st));
        }
        std::fs::read_to_string(&got)
            .ok()
            .filter(|e| e.contains(&lease))
            .map(Ok)
    });
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let env = match env {
        Some(Ok(env)) => env,
        Some(Err(st)) => panic!("dhcpcd exited ({st}) without a lease:\n{log}"),
        None => panic!(
            "no {GUEST6} in dhcpcd's lease within {:?}:\n{}\n{log}",
            common::PATIENCE,
            std::fs::read_to_string(&got).unwrap_or_default()
        ),
    };
    assert!(
        env.contains(&format!("new_dhcp6_name_servers={DNS6}")),
        "no DNS server in dhcpcd's lease:\n{env}"
    );
    assert!(
        env.contains("new_dhcp6_domain_search=example.test"),
        "no domain search list:\n{env}"
    );
    let v6 = ip(&["-n", &ns.name, "-6", "addr", "show", "dev", &tap_name]);
    assert!(v6.contains(&format!("inet6 {GUEST6}/128")), "{v6}");
    let c = net.counters();
    assert!(c.dhcp6.InSolicits >= 1 && c.dhcp6.InRequests + c.dhcp6.InSolicits >= 2);
    assert!(c.dhcp6.OutReplies >= 1, "{:?}", c.dhcp6);
    assert_eq!(c.dhcp6.InErrors + c.dhcp6.InDiscards, 0, "{:?}", c.dhcp6);
}
