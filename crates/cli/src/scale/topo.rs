//! The two peers under test and the namespaces around them. Every name
//! carries this process's id; the guards (declared after the processes, so
//! dropped after them) delete what was made, also on error and Ctrl-C.
//!
//! * ustack: `ustack serve --netns C --tap T` as its own process (so that
//!   its RSS and CPU time can be read from /proc), the clients in C on the
//!   TAP's kernel side: 10.80.0.1 plus source addresses 10.80.0.11.. .
//! * kernel: namespaces S and C joined by a veth pair, `ustack kserve-epoll`
//!   in S (10.81.0.2), the same clients in C (10.81.0.1, 10.81.0.11..).
//! * `ustack run` flows: the kernel peer is a namespace joined to the host
//!   by a veth pair (10.82.X.1 on the host side, 10.82.X.2 inside).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::procs::Group;
use crate::netns::{ip, sysctl, veth_pair, Link, Namespaces};

/// What every part needs: the binary and a tag for unique names.
pub struct Ctx {
    pub exe: PathBuf,
    pub pid: u32,
}

impl Ctx {
    /// A name unique to this run: `uss` + role + pid (at most 15 characters
    /// for interfaces: roles have at most 4 letters, pids at most 7 digits).
    pub fn name(&self, role: &str) -> String {
        format!("uss{role}{}", self.pid)
    }

    /// `ip netns exec NS <this binary> ARGS...`.
    pub fn in_ns(&self, ns: &str, args: &[String]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(&self.exe).args(args);
        c
    }

    /// `<this binary> ARGS...` in the host's namespace.
    pub fn here(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args);
        c
    }
}

/// `cmd` run on CPU `cpu` only (through taskset(1)), when the machine has
/// more than one CPU; otherwise `cmd` as it is. Children inherit it.
pub fn pinned(cpu: usize, cmd: Command) -> Command {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return cmd;
    }
    let mut c = Command::new("taskset");
    c.arg("-c")
        .arg((cpu % cpus).to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

/// Arguments from string slices.
pub fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A client namespace's settings: ICMP datagram sockets for root (ping(8)'s
/// way, so many pingers need no raw sockets), and TIME-WAIT ports reusable
/// after a second (the connection sweep closes thousands per second).
fn client_sysctls(ns: &str) -> Result<()> {
    sysctl(ns, "net.ipv4.ping_group_range", "0 2147483647")?;
    sysctl(ns, "net.ipv4.tcp_tw_reuse", "1")
}

/// Connections per client source address. One address has ~28,000
/// ephemeral ports per destination, but the kernel's search for a free one
/// (in connect) slows down sharply as they fill: at 20,000 per address the
/// clients' connects took 20 s per 10,000 beyond 70,000 connections; at
/// 5,000 per address 100,000 open in under 3 s.
pub const PER_SOURCE: usize = 5_000;

/// Extra client addresses `prefix.11`, `prefix.12`, ... on `dev` in `ns`.
fn add_sources(ns: &str, dev: &str, prefix: [u8; 3], n: usize) -> Result<Vec<Ipv4Addr>> {
    if n > 200 {
        bail!("{n} source addresses are more than a /24 holds");
    }
    (0..n)
        .map(|i| {
            let a = Ipv4Addr::new(prefix[0], prefix[1], prefix[2], 11 + i as u8);
            ip(&["-n", ns, "addr", "add", &format!("{a}/24"), "dev", dev])?;
            Ok(a)
        })
        .collect()
}

/// Wait until `target` accepts TCP connections from `ns` (the probe
/// retries for up to 20 s), while `servers` must stay up.
fn wait_accepting(ctx: &Ctx, servers: &mut Group, ns: &str, target: &str) -> Result<()> {
    let mut probe = Group::default();
    probe.spawn(
        format!("probe of {target}"),
        ctx.in_ns(ns, &args(&["scale-client", "probe", "--target", target])),
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for p in &mut servers.procs {
            if let Some(st) = p.try_exit() {
                bail!(
                    "{} exited ({st}) before it served: {}",
                    p.name,
                    p.stderr_tail()
                );
            }
        }
        let line = probe
            .poll((Instant::now() + Duration::from_millis(100)).min(deadline))
            .with_context(|| format!("{target} never accepted a connection"))?;
        if line.and_then(|l| l.json()).is_some_and(|v| v["ok"] == true) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{target} did not accept connections within 30 s");
        }
    }
}

/// Whether this `ustack serve` accepts `flag` (it lists it in --help).
pub fn serve_has_flag(ctx: &Ctx, flag: &str) -> Result<bool> {
    let out = Command::new(&ctx.exe)
        .args(["serve", "--help"])
        .output()
        .context("cannot run ustack serve --help")?;
    Ok(String::from_utf8_lossy(&out.stdout).contains(flag))
}

/// `ustack serve` on a TAP into a client namespace.
pub struct UstackPeer {
    pub serve: Group,
    pub client_ns: String,
    pub addr: Ipv4Addr,
    pub sources: Vec<Ipv4Addr>,
    _ns: Namespaces,
}

impl UstackPeer {
    /// `tag` tells the parts apart; `extra` are serve options (e.g.
    /// `--max-connections N`); `sources` extra client addresses.
    pub fn start(ctx: &Ctx, tag: &str, extra: &[String], sources: usize) -> Result<UstackPeer> {
        let mut nss = Namespaces::default();
        let ns = ctx.name(&format!("u{tag}"));
        nss.add(&ns)?;
        client_sysctls(&ns)?;
        let tap = ctx.name(&format!("t{tag}"));
        let addr = Ipv4Addr::new(10, 80, 0, 2);
        let mut serve_args = args(&[
            "serve",
            "--netns",
            &ns,
            "--tap",
            &tap,
            "--addr",
            "10.80.0.2/24",
            "--host-addr",
            "10.80.0.1/24",
        ]);
        serve_args.extend_from_slice(extra);
        let mut serve = Group::default();
        serve.spawn("ustack serve", ctx.here(&serve_args))?;
        wait_accepting(ctx, &mut serve, &ns, &format!("{addr}:7"))?;
        let sources = add_sources(&ns, &tap, [10, 80, 0], sources)?;
        Ok(UstackPeer {
            serve,
            client_ns: ns,
            addr,
            sources,
            _ns: nss,
        })
    }

    pub fn pids(&self) -> Vec<u32> {
        self.serve.procs.iter().map(|p| p.pid()).collect()
    }
}

/// Kernel servers in one namespace, clients in another, joined by veth.
pub struct KernelPeer {
    pub servers: Group,
    pub client_ns: String,
    pub addr: Ipv4Addr,
    pub sources: Vec<Ipv4Addr>,
    _ns: Namespaces,
}

impl KernelPeer {
    /// `servers` kserve-epoll processes sharing echo (and discard) with
    /// SO_REUSEPORT; 0 for none (the kernel answers pings itself).
    pub fn start(ctx: &Ctx, tag: &str, servers: usize, sources: usize) -> Result<KernelPeer> {
        let mut nss = Namespaces::default();
        let (ns_s, ns_c) = (ctx.name(&format!("s{tag}")), ctx.name(&format!("c{tag}")));
        nss.add(&ns_s)?;
        nss.add(&ns_c)?;
        client_sysctls(&ns_c)?;
        veth_pair([&ns_s, "vs", "10.81.0.2/24"], [&ns_c, "vc", "10.81.0.1/24"])?;
        let addr = Ipv4Addr::new(10, 81, 0, 2);
        let mut group = Group::default();
        for i in 0..servers {
            group.spawn(
                format!("kserve-epoll #{i}"),
                ctx.in_ns(
                    &ns_s,
                    &args(&[
                        "kserve-epoll",
                        "--bind",
                        "10.81.0.2",
                        "--discard-port",
                        "9",
                        "--reuseport",
                    ]),
                ),
            )?;
        }
        for _ in 0..servers {
            let l = group.next(
                Instant::now() + Duration::from_secs(20),
                "kserve-epoll to listen",
            )?;
            if !l.json().is_some_and(|v| v["ready"] == true) {
                bail!(
                    "kserve-epoll printed '{}' instead of its ready line",
                    l.text
                );
            }
        }
        let sources = add_sources(&ns_c, "vc", [10, 81, 0], sources)?;
        Ok(KernelPeer {
            servers: group,
            client_ns: ns_c,
            addr,
            sources,
            _ns: nss,
        })
    }

    pub fn pids(&self) -> Vec<u32> {
        self.servers.procs.iter().map(|p| p.pid()).collect()
    }
}

/// A namespace joined to the host by veth: the kernel peer of `ustack run`.
pub struct HostVeth {
    pub ns: String,
    /// The host side's address (servers bind it).
    pub host_addr: Ipv4Addr,
    _link: Link,
    _ns: Namespaces,
}

impl HostVeth {
    pub fn start(ctx: &Ctx) -> Result<HostVeth> {
        let mut nss = Namespaces::default();
        let ns = ctx.name("r");
        nss.add(&ns)?;
        client_sysctls(&ns)?;
        let host_if = ctx.name("h");
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", "vr", "netns", &ns,
        ])?;
        let link = Link(host_if.clone());
        // A /24 of its own per run, so that two runs do not share a route.
        let x = (ctx.pid % 250) as u8;
        let host_addr = Ipv4Addr::new(10, 82, x, 1);
        ip(&["addr", "add", &format!("{host_addr}/24"), "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("10.82.{x}.2/24"),
            "dev",
            "vr",
        ])?;
        ip(&["-n", &ns, "link", "set", "vr", "up"])?;
        Ok(HostVeth {
            ns,
            host_addr,
            _link: link,
            _ns: nss,
        })
    }
}
