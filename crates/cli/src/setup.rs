//! Bringing up ustack on a TAP device: the options shared by `serve`, `ping`
//! and `get`, the kernel side's configuration (in this namespace or moved
//! into another one), optional capture, and the runtime.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Args;

use ustack_net::core::{
    tcp::{CcAlgorithm, TcpConfig},
    Config, Limits,
};
use ustack_net::dev::live::{CaptureHub, Tapped};
use ustack_net::dev::netem::{ImpairSpec, Netem, NetemConfig, NetemCounters};
use ustack_net::dev::{pcap::Capture, tap::Tap, Device, FrameBatch};
use ustack_net::{Net, RuntimeOptions};
use ustack_wire::ethernet::MacAddr;
use ustack_wire::ipv4::Ipv4Cidr;
use ustack_wire::ipv6::Ipv6Cidr;

/// An IPv4 address with prefix length, parsed with a message people understand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}' is not ADDRESS/PREFIX (e.g. 10.77.0.2/24)"))?;
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("'{a}' is not an IPv4 address (in '{s}')"))?;
        let prefix: u8 = p
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| format!("'{p}' is not a prefix length 0..=32 (in '{s}')"))?;
        if addr.is_unspecified() || addr.is_multicast() || addr.is_broadcast() {
            return Err(format!("'{addr}' cannot be an interface address"));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Cidr {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        };
        u32::from(ip) & mask == u32::from(self.addr) & mask
    }
}

/// Options shared by the commands that bring up a stack on a TAP device.
#[derive(Args, Clone, Debug)]
pub struct NetArgs {
    /// TAP device to create [default: ustk0 for serve, ustk<pid> otherwise].
    #[arg(long, value_name = "NAME")]
    pub tap: Option<String>,
    /// ustack's own address and prefix.
    #[arg(long, value_name = "A/P", default_value = "10.77.0.2/24")]
    pub addr: Cidr,
    /// Address and prefix given to the kernel side of the TAP.
    #[arg(long, value_name = "A/P", default_value = "10.77.0.1/24")]
    pub host_addr: Cidr,
    /// Default gateway for destinations outside --addr's prefix.
    #[arg(long, value_name = "IP")]
    pub gateway: Option<Ipv4Addr>,
    /// ustack's static IPv6 address and on-link prefix (repeatable),
    /// besides the link-local one it forms from its MAC.
    #[arg(long, value_name = "A/P", default_value = "fd77::2/64", value_parser = parse_cidr6)]
    pub addr6: Vec<Ipv6Cidr>,
    /// IPv6 address and prefix given to the kernel side of the TAP
    /// (added without duplicate address detection, usable at once).
    #[arg(long, value_name = "A/P", default_value = "fd77::1/64", value_parser = parse_cidr6)]
    pub host_addr6: Ipv6Cidr,
    /// No IPv6 addresses on either side (ustack keeps only its link-local
    /// address; services listen on IPv4 only).
    #[arg(long, conflicts_with_all = ["addr6", "host_addr6"])]
    pub no_ipv6: bool,
    /// IP MTU of the link (both sides).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..=65521))]
    pub mtu: u16,
    /// Move the kernel side of the TAP into this existing network namespace
    /// (`ip netns add NAME`) and configure --host-addr there.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Write every frame in and out to this pcap file (`tcpdump -r` reads it).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Busy-poll the device for this many microseconds after activity
    /// (lower latency, more CPU).
    #[arg(long, value_name = "US")]
    pub busy_poll: Option<u64>,
    /// Open the TAP without the virtio-net header: no checksum offload and
    /// no TSO/GSO, every frame at most one MTU both ways (by default the
    /// kernel and ustack exchange 64 KB TCP super-frames whatever the MTU).
    #[arg(long)]
    pub no_offload: bool,
    /// Hand every received TCP segment to TCP input as it came, without
    /// coalescing consecutive ones of a burst first (software GRO, on by
    /// default; the environment variable USTACK_GRO=off does the same).
    #[arg(long)]
    pub no_gro: bool,
    /// TCP congestion control: cubic (RFC 9438 with Linux's HyStart, the
    /// default), cubic-hystart++ (RFC 9406's HyStart++ instead) or newreno
    /// (RFC 6582), like Linux's net.ipv4.tcp_congestion_control.
    #[arg(long, value_name = "ALG", default_value_t = CcAlgorithm::default())]
    pub congestion_control: CcAlgorithm,
    #[command(flatten)]
    pub impair: ImpairArgs,
}

/// Link impairments applied in user space at the TAP boundary.
#[derive(Args, Clone, Debug, Default)]
pub struct ImpairArgs {
    /// Impair both directions at the TAP like `tc netem` (for kernels without
    /// the netem qdisc): SPEC is comma-separated KEY=VALUE from loss=P,
    /// duplicate=P, reorder=P, corrupt=P (P a percentage, e.g. 5%),
    /// delay=D, jitter=D (e.g. 10ms, 500us), rate=R (e.g. 100mbit),
    /// limit=FRAMES, seed=N. Example:
    /// loss=5%,delay=10ms,reorder=25%,duplicate=1%. As in netem, reorder=P
    /// sends P of the frames at once while the rest wait the delay. Frames
    /// from the kernel are impaired before ustack sees them, frames from
    /// ustack before the kernel sees them; --pcap records ustack's view.
    #[arg(long, value_name = "SPEC", verbatim_doc_comment)]
    pub impair: Option<ImpairSpec>,
    /// Impair only frames from the kernel to ustack (overrides --impair for
    /// that direction).
    #[arg(long, value_name = "SPEC")]
    pub impair_rx: Option<ImpairSpec>,
    /// Impair only frames from ustack to the kernel (overrides --impair for
    /// that direction).
    #[arg(long, value_name = "SPEC")]
    pub impair_tx: Option<ImpairSpec>,
}

/// The resolved impairments: per direction, and the seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Impairments {
    pub rx: NetemConfig,
    pub tx: NetemConfig,
    pub seed: u64,
}

impl ImpairArgs {
    /// `None` when no impairment is asked for. The seed is the first one
    /// given (--impair-rx, --impair-tx, then --impair), else `random_seed`.
    pub fn resolve(&self, random_seed: impl FnOnce() -> u64) -> Option<Impairments> {
        let rx = self.impair_rx.as_ref().or(self.impair.as_ref());
        let tx = self.impair_tx.as_ref().or(self.impair.as_ref());
        if rx.is_none() && tx.is_none() {
            return None;
        }
        let seed = [&self.impair_rx, &self.impair_tx, &self.impair]
            .into_iter()
            .flatten()
            .find_map(|s| s.seed)
            .unwrap_or_else(random_seed);
        let cfg = |s: Option<&ImpairSpec>| s.map(|s| s.config.clone()).unwrap_or_default();
        Some(Impairments {
            rx: cfg(rx),
            tx: cfg(tx),
            seed,
        })
    }
}

fn describe(c: &NetemConfig) -> String {
    if c.is_identity() {
        return "none".to_string();
    }
    let mut parts = Vec::new();
    let pct = |x: f64| format!("{}%", (x * 1e6).round() / 1e4);
    for (name, p) in [
        ("loss", c.loss),
        ("duplicate", c.duplicate),
        ("reorder", c.reorder),
        ("corrupt", c.corrupt),
    ] {
        if p > 0.0 {
            parts.push(format!("{name}={}", pct(p)));
        }
    }
    if !c.delay.is_zero() {
        parts.push(format!("delay={:?}", c.delay));
    }
    if !c.jitter.is_zero() {
        parts.push(format!("jitter={:?}", c.jitter));
    }
    if let Some(r) = c.rate_bps {
        parts.push(format!("rate={r}bit"));
    }
    parts.join(",")
}

/// A device shared with the command so the capture can be flushed at exit.
struct SharedDev<D>(Arc<Mutex<D>>);

impl<D: Device> SharedDev<D> {
    fn with<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }
}

impl<D: Device> Device for SharedDev<D> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.with(|d| d.recv(buf))
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.with(|d| d.send(frame))
    }
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        self.with(|d| d.send_vectored(parts))
    }
    fn recv_batch(&mut self, batch: &mut FrameBatch) -> io::Result<usize> {
        self.with(|d| d.recv_batch(batch))
    }
    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        self.with(|d| d.send_batch(frames))
    }
    fn mtu(&self) -> usize {
        self.with(|d| d.mtu())
    }
    fn mac(&self) -> Option<[u8; 6]> {
        self.with(|d| d.mac())
    }
    fn raw_fd(&self) -> Option<RawFd> {
        self.with(|d| d.raw_fd())
    }
    fn next_deadline(&self) -> Option<std::time::Instant> {
        self.with(|d| d.next_deadline())
    }
    fn poll_deferred(&mut self) -> io::Result<()> {
        self.with(|d| d.poll_deferred())
    }
    fn offloads(&self) -> ustack_net::dev::Offloads {
        self.with(|d| d.offloads())
    }
}

/// The device chain with a capture on top (shared so `finish` can flush it).
type Captured = Capture<Box<dyn Device + Send>>;

/// A running stack on a TAP.
pub struct Up {
    pub net: Net,
    pub tap: String,
    pub addr: Cidr,
    pub host_addr: Cidr,
    /// ustack's static IPv6 addresses (none with --no-ipv6).
    pub addr6: Vec<Ipv6Cidr>,
    /// The kernel side's IPv6 address, if it was given one.
    pub host_addr6: Option<Ipv6Cidr>,
    pub netns: Option<String>,
    /// Live captures (`ustack capture`) take frames from here.
    pub hub: Arc<CaptureHub>,
    capture: Option<Arc<Mutex<Captured>>>,
    impaired: Option<NetemCounters>,
}

impl Up {
    /// Stop the stack and flush the capture. The TAP disappears when the
    /// process exits (it is not persistent).
    pub fn finish(&self) {
        self.net.shutdown();
        if let Some(c) = &self.impaired {
            eprintln!("ustack: impaired rx (kernel -> ustack): {}", c.rx());
            eprintln!("ustack: impaired tx (ustack -> kernel): {}", c.tx());
        }
        if let Some(c) = &self.capture {
            let mut g = c.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = g.flush() {
                eprintln!("ustack: flushing the capture failed: {e}");
            }
        }
    }
}

/// Random bytes from getrandom(2), or a clock/pid mix if it fails.
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // SAFETY: getrandom writes at most b.len() bytes into the valid buffer b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if usize::try_from(n).ok() != Some(N) {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let x = (t ^ u128::from(std::process::id())).to_le_bytes();
        for (d, s) in b.iter_mut().zip(x.iter().cycle()) {
            *d = *s;
        }
    }
    b
}

/// A locally administered unicast MAC, different per process.
fn our_mac() -> MacAddr {
    let b: [u8; 4] = random_bytes();
    MacAddr([0x02, 0x75, b[0], b[1], b[2], b[3]])
}

/// Create the TAP, configure the kernel side and start ustack on it.
pub fn bring_up(args: &NetArgs, default_tap: &str) -> Result<Up> {
    bring_up_with(args, default_tap, Limits::default())
}

/// [`bring_up`] with the stack's resource limits given.
pub fn bring_up_with(args: &NetArgs, default_tap: &str, limits: Limits) -> Result<Up> {
    check_addresses(args)?;
    let name = args.tap.clone().unwrap_or_else(|| default_tap.to_string());
    if name.is_empty() || name.len() > 15 || name.contains('/') || name.contains(' ') {
        bail!("'{name}' is not a valid interface name (1 to 15 characters, no '/' or spaces)");
    }
    if let Some(ns) = &args.netns {
        let path = std::path::Path::new("/run/netns").join(ns);
        if !path.exists() {
            bail!("network namespace '{ns}' does not exist (create it with `ip netns add {ns}`)");
        }
    }
    // A kernel that refuses the virtio-net header or the offloads: a plain
    // TAP (segments cut and checksummed in software), as `attach` does.
    let mut tap = match Tap::create_with(&name, !args.no_offload) {
        Ok(tap) => tap,
        Err(e) if !args.no_offload && e.kind() != io::ErrorKind::PermissionDenied => {
            let tap = Tap::create_with(&name, false)
                .with_context(|| format!("cannot create TAP device {name}"))?;
            tracing::warn!("TAP {name}: {e}; running without offloads");
            tap
        }
        Err(e) => return Err(e).with_context(|| format!("cannot create TAP device {name}")),
    };
    let name = tap.name().to_string();
    tap.set_mtu(usize::from(args.mtu))
        .with_context(|| format!("cannot set the MTU of {name}"))?;
    let host_addr = args.host_addr;
    match &args.netns {
        Some(ns) => {
            tap.host()
                .and_then(|h| h.move_to_netns_named(ns))
                .with_context(|| format!("cannot move {name} into network namespace {ns}"))?;
            crate::netns::ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &host_addr.to_string(),
                "dev",
                &name,
            ])?;
            crate::netns::ip(&["-n", ns, "link", "set", &name, "up"])?;
        }
        None => {
            let h = tap
                .host()
                .context("cannot configure the TAP's kernel side")?;
            h.set_ipv4(host_addr.addr, host_addr.prefix).map_err(|e| {
                if e.kind() == io::ErrorKind::AddrInUse {
                    anyhow::anyhow!("address {host_addr} is already in use on this host: {e}")
                } else {
                    anyhow::Error::new(e)
                        .context(format!("cannot give {name} the address {host_addr}"))
                }
            })?;
            h.set_up(true)
                .with_context(|| format!("cannot bring {name} up"))?;
        }
    }

    let mut host_addr6 = None;
    if !args.no_ipv6 {
        // Without DAD the address is usable at once (a fresh TAP of our
        // own: no one else can hold it). A host with IPv6 disabled keeps
        // IPv4 working: a warning, not an error.
        let a6 = args.host_addr6.to_string();
        let mut cmd = vec!["-6", "addr", "add", &a6, "dev", &name, "nodad"];
        if let Some(ns) = &args.netns {
            cmd.splice(0..0, ["-n", ns.as_str()]);
        }
        match crate::netns::ip(&cmd) {
            Ok(()) => host_addr6 = Some(args.host_addr6),
            Err(e) => eprintln!(
                "ustack: cannot give the kernel side of {name} the address {a6} ({e:#}); \
                 IPv6 between the kernel and ustack will not work (--no-ipv6 turns it off)"
            ),
        }
    }

    let mut up = start_stack(args, name, Box::new(tap), limits)?;
    up.host_addr6 = host_addr6;
    Ok(up)
}

/// Refuse addresses the link cannot work with, before anything is
/// created: ustack and the kernel side sharing an address (IPv4 or IPv6),
/// a gateway off the link or ustack's own address (Linux refuses both as
/// a route's next hop). Warn about a kernel side outside ustack's prefix.
pub fn check_addresses(args: &NetArgs) -> Result<()> {
    if args.addr.addr == args.host_addr.addr {
        bail!(
            "--addr and --host-addr are both {}: ustack and the kernel need different addresses",
            args.addr.addr
        );
    }
    if !args.addr.contains(args.host_addr.addr) {
        tracing::warn!(
            "--host-addr {} is outside --addr {}: they cannot talk directly",
            args.host_addr,
            args.addr
        );
    }
    if let Some(g) = args.gateway {
        if g == args.addr.addr {
            bail!("--gateway {g} is ustack's own address (--addr): a gateway is another host");
        }
        if !args.addr.contains(g) {
            bail!(
                "--gateway {g} is outside --addr {}: ustack could not reach it (a gateway is on the link)",
                args.addr
            );
        }
    }
    if !args.no_ipv6 {
        let host6 = args.host_addr6.address;
        if args.addr6.iter().any(|a| a.address == host6) {
            bail!(
                "--addr6 and --host-addr6 are both {host6}: ustack and the kernel need different addresses"
            );
        }
        if !args.addr6.iter().any(|a| a.contains(host6)) {
            tracing::warn!(
                "--host-addr6 {} is outside every --addr6 prefix: they cannot talk directly",
                args.host_addr6
            );
        }
    }
    Ok(())
}

/// `--addr6`/`--host-addr6`: `ADDRESS/PREFIX` (a bare address is /128),
/// with messages that say what is wrong.
fn parse_cidr6(s: &str) -> Result<Ipv6Cidr, String> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: std::net::Ipv6Addr = a
        .parse()
        .map_err(|_| format!("'{a}' is not an IPv6 address (in '{s}')"))?;
    let prefix = match p {
        None => 128,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 128)
            .ok_or_else(|| format!("'{p}' is not a prefix length 0..=128 (in '{s}')"))?,
    };
    Ipv6Cidr::new(addr, prefix).map_err(|e| format!("'{s}': {e}"))
}

/// Whether `ip` can be reached on the link configured by `args` (IPv4:
/// inside --addr or through --gateway; IPv6: inside an --addr6 prefix or
/// link-local, there being no IPv6 router), else why not.
pub fn check_reachable(args: &NetArgs, ip: std::net::IpAddr) -> Result<()> {
    match ip {
        std::net::IpAddr::V4(v4) => {
            if !args.addr.contains(v4) && args.gateway.is_none() {
                bail!(
                    "{v4}: network unreachable (not in {} and no --gateway given)",
                    args.addr
                );
            }
        }
        std::net::IpAddr::V6(v6) => {
            if v6.to_ipv4_mapped().is_some() {
                bail!("{v6}: an IPv4-mapped address; use the IPv4 address itself");
            }
            let link_local = v6.segments()[0] & 0xffc0 == 0xfe80;
            if !link_local && (args.no_ipv6 || !args.addr6.iter().any(|c| c.contains(v6))) {
                let have: Vec<String> = if args.no_ipv6 {
                    Vec::new()
                } else {
                    args.addr6.iter().map(ToString::to_string).collect()
                };
                bail!(
                    "{v6}: network unreachable (not in {}; ustack has no IPv6 router)",
                    if have.is_empty() {
                        "any IPv6 prefix of ustack (--no-ipv6)".to_string()
                    } else {
                        have.join(", ")
                    }
                );
            }
        }
    }
    Ok(())
}

/// Start ustack on `device` (already created and attached; `name` is what
/// messages call it) with `args`' address, MTU, busy polling, impairments
/// and capture.
pub fn start_stack(
    args: &NetArgs,
    name: String,
    device: Box<dyn Device + Send>,
    limits: Limits,
) -> Result<Up> {
    let host_addr = args.host_addr;
    let config = Config {
        mac: our_mac(),
        addr: Ipv4Cidr::new(args.addr.addr, args.addr.prefix)
            .map_err(|_| anyhow::anyhow!("bad prefix in --addr {}", args.addr))?,
        gateway: args.gateway,
        mtu: usize::from(args.mtu),
        tcp: TcpConfig {
            congestion_control: args.congestion_control,
            ..TcpConfig::default()
        },
        limits,
        // Zero = drawn from getrandom by the runtime.
        secret: [0; 16],
        seed: 0,
    };
    let opts = RuntimeOptions {
        busy_poll: args.busy_poll.map(std::time::Duration::from_micros),
        ..RuntimeOptions::default()
    };
    // Device, then impairments, then capture: the pcap shows what ustack sees.
    let mut impaired = None;
    let device: Box<dyn Device + Send> = match args
        .impair
        .resolve(|| u64::from_ne_bytes(random_bytes()))
    {
        Some(imp) => {
            eprintln!(
                "ustack: impairing frames at {name}: rx (kernel -> ustack) {}; tx (ustack -> kernel) {}; seed={}",
                describe(&imp.rx),
                describe(&imp.tx),
                imp.seed
            );
            let netem = Netem::new(device, imp.rx, imp.tx, imp.seed);
            impaired = Some(netem.counters());
            Box::new(netem)
        }
        None => device,
    };
    let (device, capture): (Box<dyn Device + Send>, _) = match &args.pcap {
        Some(path) => {
            let cap = Capture::to_file(device, path)
                .with_context(|| format!("cannot capture to {}", path.display()))?;
            let shared = Arc::new(Mutex::new(cap));
            (Box::new(SharedDev(shared.clone())), Some(shared))
        }
        None => (device, None),
    };
    // Outermost: live capture (`ustack capture`), what ustack sees, as --pcap.
    let hub = CaptureHub::new();
    let device: Box<dyn Device + Send> = Box::new(Tapped::new(device, hub.clone()));
    let net = Net::start(config, device, opts).context("cannot start the stack")?;
    let addr6: &[Ipv6Cidr] = if args.no_ipv6 { &[] } else { &args.addr6 };
    for a in addr6 {
        if let Err(e) = net.with_stack(|s| s.add_ipv6_address(*a)) {
            net.shutdown();
            bail!("--addr6 {a}: {e}");
        }
    }
    // --no-gro, or USTACK_GRO=off for commands without the flag: for
    // measuring what receive coalescing is worth.
    if args.no_gro || ustack_relay::cli::gro_off_by_env() {
        net.with_stack(|s| s.set_gro(false));
    }
    Ok(Up {
        net,
        tap: name,
        addr: args.addr,
        host_addr,
        addr6: addr6.to_vec(),
        host_addr6: None,
        netns: args.netns.clone(),
        hub,
        capture,
        impaired,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parsing_and_messages() {
        let c: Cidr = "10.77.0.2/24".parse().unwrap();
        assert_eq!(c.addr, Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(c.prefix, 24);
        assert!(c.contains(Ipv4Addr::new(10, 77, 0, 200)));
        assert!(!c.contains(Ipv4Addr::new(10, 77, 1, 1)));
        let z: Cidr = "10.0.0.1/0".parse().unwrap();
        assert!(z.contains(Ipv4Addr::new(192, 168, 1, 1)));
        assert!("10.77.0.2"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("ADDRESS/PREFIX"));
        assert!("10.77.0.2/33"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("prefix length"));
        assert!("10.77.0/24"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("not an IPv4"));
        assert!("0.0.0.0/8".parse::<Cidr>().is_err());
        assert!("224.0.0.1/8".parse::<Cidr>().is_err());
    }

    #[derive(clap::Parser)]
    struct T {
        #[command(flatten)]
        net: NetArgs,
    }

    fn parse(args: &[&str]) -> Result<NetArgs, clap::Error> {
        use clap::Parser;
        T::try_parse_from(std::iter::once("t").chain(args.iter().copied())).map(|t| t.net)
    }

    #[test]
    fn impair_options_resolve_per_direction() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.impair.resolve(|| 1), None);
        let a = parse(&["--impair", "loss=5%,delay=10ms,reorder=25%,duplicate=1%"]).unwrap();
        let r = a.impair.resolve(|| 99).unwrap();
        assert_eq!(r.rx, r.tx);
        assert_eq!(r.seed, 99, "random seed when none given");
        assert!((r.rx.loss - 0.05).abs() < 1e-12);
        assert_eq!(
            describe(&r.rx),
            "loss=5%,duplicate=1%,reorder=25%,delay=10ms"
        );
        let a = parse(&["--impair", "loss=5%,seed=7", "--impair-tx", "delay=1ms"]).unwrap();
        let r = a.impair.resolve(|| 99).unwrap();
        assert_eq!(r.seed, 7);
        assert!((r.rx.loss - 0.05).abs() < 1e-12);
        assert_eq!(r.tx.loss, 0.0);
        assert_eq!(r.tx.delay, std::time::Duration::from_millis(1));
        let a = parse(&["--impair-rx", "corrupt=1%"]).unwrap();
        let r = a.impair.resolve(|| 3).unwrap();
        assert!(r.tx.is_identity());
        assert_eq!(describe(&r.tx), "none");
    }

    #[test]
    fn impair_parse_errors_are_clear() {
        let e = parse(&["--impair", "loss=5"]).err().unwrap().to_string();
        assert!(e.contains("--impair") && e.contains("percentage"), "{e}");
        let e = parse(&["--impair", "lag=5ms"]).err().unwrap().to_string();
        assert!(e.contains("unknown impairment 'lag'"), "{e}");
        let e = parse(&["--impair-tx", "reorder=25%"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("reorder needs a delay"), "{e}");
    }

    #[test]
    fn ipv6_defaults_flags_and_reachability() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.addr6, vec!["fd77::2/64".parse::<Ipv6Cidr>().unwrap()]);
        assert_eq!(a.host_addr6, "fd77::1/64".parse::<Ipv6Cidr>().unwrap());
        assert!(!a.no_ipv6);
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(check_reachable(&a, ip("fd77::1")).is_ok());
        assert!(check_reachable(&a, ip("fe80::1")).is_ok());
        assert!(check_reachable(&a, ip("10.77.0.1")).is_ok());
        let e = check_reachable(&a, ip("2001:db8::1"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fd77::2/64") && e.contains("no IPv6 router"),
            "{e}"
        );
        assert!(check_reachable(&a, ip("::ffff:10.77.0.1")).is_err());
        let a = parse(&["--addr6", "fd00:1::2/64", "--host-addr6", "fd00:1::1/64"]).unwrap();
        assert!(check_reachable(&a, ip("fd00:1::1")).is_ok());
        assert!(check_reachable(&a, ip("fd77::1")).is_err());
        let a = parse(&["--no-ipv6"]).unwrap();
        assert!(a.no_ipv6);
        let e = check_reachable(&a, ip("fd77::1")).unwrap_err().to_string();
        assert!(e.contains("--no-ipv6"), "{e}");
        assert!(parse(&["--no-ipv6", "--addr6", "fd00::2/64"]).is_err());
        assert!(parse(&["--no-ipv6", "--host-addr6", "fd00::1/64"]).is_err());
    }

    #[test]
    fn addresses_the_link_cannot_use_are_refused_before_any_work() {
        // As for IPv4, ustack and the kernel cannot share an IPv6 address
        // (both answered Neighbor Solicitations for it); a gateway must
        // be on the link and not ustack itself (Linux: "Nexthop has
        // invalid gateway"); a prefix length past 128 is named as such
        // (it was "malformed packet").
        let e = |args: &[&str]| {
            check_addresses(&parse(args).unwrap())
                .unwrap_err()
                .to_string()
        };
        assert!(check_addresses(&parse(&[]).unwrap()).is_ok());
        assert!(check_addresses(&parse(&["--gateway", "10.77.0.1"]).unwrap()).is_ok());
        let m = e(&["--addr", "10.77.0.1/24"]);
        assert!(
            m.contains("--addr and --host-addr are both 10.77.0.1"),
            "{m}"
        );
        let m = e(&["--host-addr6", "fd77::2/64"]);
        assert!(
            m.contains("--addr6 and --host-addr6 are both fd77::2"),
            "{m}"
        );
        let m = e(&["--gateway", "10.99.0.1"]);
        assert!(
            m.contains("--gateway 10.99.0.1 is outside --addr 10.77.0.2/24"),
            "{m}"
        );
        let m = e(&["--gateway", "10.77.0.2"]);
        assert!(
            m.contains("--gateway 10.77.0.2 is ustack's own address"),
            "{m}"
        );
        // --no-ipv6: no IPv6 address to compare.
        assert!(check_addresses(&parse(&["--no-ipv6"]).unwrap()).is_ok());
        let m = parse(&["--addr6", "fd77::2/129"])
            .err()
            .unwrap()
            .to_string();
        assert!(m.contains("'129' is not a prefix length 0..=128"), "{m}");
        let m = parse(&["--host-addr6", "fd77::zz/64"])
            .err()
            .unwrap()
            .to_string();
        assert!(m.contains("'fd77::zz' is not an IPv6 address"), "{m}");
    }

    #[test]
    fn macs_are_local_unicast() {
        let m = our_mac();
        assert_eq!(m.0[0], 0x02);
        assert!(m.is_unicast());
    }
}
