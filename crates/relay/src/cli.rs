//! `ustack run` and `ustack attach`: argument types and entry points the
//! `ustack` binary calls (`Run(RunArgs)` → [`run`], `Attach(AttachArgs)` → [`attach`]).

use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use std::sync::Arc;
use ustack_core::tcp::CcAlgorithm;
use ustack_dev::live::{CaptureHub, Tapped};
use ustack_dev::pcap::Capture;
use ustack_dev::Device;
use ustack_sandbox::{attach as sb_attach, signals, Sandbox, SandboxConfig, SandboxIpv6, UserNs};
use ustack_wire::ipv6::Ipv6Cidr;

use crate::core_guest::{CoreGuest, CoreGuestConfig};
use crate::dns;
use crate::guest::GuestStack;
use crate::limits::{Limits, Timeouts};
use crate::portfwd::PortForward;
use crate::relay::{Relay, RelayConfig, Stop};
use crate::stats::Stats;

/// An IPv4 address with prefix length, `A.B.C.D/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s.split_once('/').unwrap_or((s, "24"));
        let addr = a.parse().map_err(|_| format!("bad address {a:?}"))?;
        let prefix_len = p
            .parse::<u8>()
            .ok()
            .filter(|p| (1..=30).contains(p))
            .ok_or_else(|| format!("bad prefix length {p:?} (1..=30)"))?;
        Ok(Cidr { addr, prefix_len })
    }
}

/// An IPv6 address with prefix length, `ADDR/N` (default /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr6 {
    pub addr: Ipv6Addr,
    pub prefix_len: u8,
}

impl std::str::FromStr for Cidr6 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s.split_once('/').unwrap_or((s, "64"));
        let addr: Ipv6Addr = a.parse().map_err(|_| format!("bad IPv6 address {a:?}"))?;
        if addr.is_unspecified() || addr.is_multicast() || addr.is_loopback() {
            return Err(format!("{addr} is not a unicast address"));
        }
        let prefix_len = p
            .parse::<u8>()
            .ok()
            .filter(|p| (1..=127).contains(p))
            .ok_or_else(|| format!("bad prefix length {p:?} (1..=127)"))?;
        Ok(Cidr6 { addr, prefix_len })
    }
}

/// Relay options shared by `run` and `attach`.
#[derive(clap::Args, Debug, Clone)]
pub struct RelayArgs {
    /// Guest address and prefix.
    #[arg(long, default_value = "10.0.2.15/24")]
    pub addr: Cidr,
    /// Gateway address (answers ping; connections to it go to the host's 127.0.0.1).
    #[arg(long, default_value = "10.0.2.2")]
    pub gateway: Ipv4Addr,
    /// Guest-visible DNS server, forwarded to the host's resolver.
    #[arg(long, default_value = "10.0.2.3")]
    pub dns: Ipv4Addr,
    /// Where DNS sent to the guest-visible nameservers goes (default: the
    /// first usable nameserver of the host's /etc/resolv.conf, IPv4 or
    /// IPv6, port 53); `[ADDR6]:PORT` for an IPv6 resolver.
    #[arg(long, value_name = "IP:PORT")]
    pub dns_upstream: Option<std::net::SocketAddr>,
    /// Do not map the gateway to the host's loopback.
    #[arg(long)]
    pub no_map_gateway: bool,
    /// Guest IPv6 address and prefix (`ustack run` configures it on the
    /// guest's interface, without DAD; inbound IPv6 forwards go to it).
    #[arg(long, value_name = "ADDR/N", default_value = "fd00::100/64")]
    pub addr6: Cidr6,
    /// IPv6 gateway address (answers ping; connections to it go to the
    /// host's ::1; the guest's default route).
    #[arg(long, value_name = "ADDR", default_value = "fd00::2")]
    pub gateway6: Ipv6Addr,
    /// Guest-visible IPv6 DNS server, forwarded to the host's resolver
    /// (listed after the IPv4 one in the guest's resolv.conf).
    #[arg(long, value_name = "ADDR", default_value = "fd00::3")]
    pub dns6: Ipv6Addr,
    /// No IPv6: the guest gets no IPv6 address or route (no router
    /// advertisements or DHCPv6 either), and flows to IPv6 destinations are
    /// refused.
    #[arg(long)]
    pub no_ipv6: bool,
    /// Forward a host port to the guest: [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp] (repeatable).
    /// An IPv6 HOSTIP in brackets ([::1]:8080:80) reaches the guest over IPv6; without
    /// HOSTIP, 127.0.0.1 and ::1 listen and the guest is reached over IPv4.
    #[arg(short = 'p', long = "publish", value_name = "SPEC")]
    pub publish: Vec<PortForward>,
    /// Maximum concurrent flows [default: 16384, or fewer if the descriptor
    /// limit (ulimit -n) cannot hold that many host sockets].
    #[arg(long, value_name = "N")]
    pub max_flows: Option<usize>,
    /// Maximum half-open TCP connections (host connect pending). A guest
    /// SYN beyond it waits up to 1 s for one to complete (at most four
    /// per slot wait), then is refused.
    #[arg(long, default_value_t = Limits::default().max_half_open)]
    pub max_half_open: usize,
    /// Bytes buffered per flow and direction (the guest-side TCP send and
    /// receive buffer sizes).
    #[arg(long, default_value_t = Limits::default().flow_buffer)]
    pub flow_buffer: usize,
    /// The most a flow's host -> guest buffer grows to: it starts at
    /// --flow-buffer and grows with the guest connection's congestion
    /// window (send-buffer autotuning); at most --flow-buffer keeps it fixed.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().flow_buffer_max)]
    pub flow_buffer_max: usize,
    /// Bytes buffered in all flows together.
    #[arg(long, default_value_t = Limits::default().total_buffer)]
    pub total_buffer: usize,
    /// New flows per second.
    #[arg(long, default_value_t = Limits::default().new_flows_per_sec)]
    pub flow_rate: u32,
    /// Idle timeout of established TCP flows, seconds.
    #[arg(long, default_value_t = Timeouts::default().tcp_idle.as_secs())]
    pub tcp_idle_timeout: u64,
    /// Idle timeout of UDP flows, seconds.
    #[arg(long, default_value_t = Timeouts::default().udp_idle.as_secs())]
    pub udp_idle_timeout: u64,
    /// Print a summary of the relay's counters on exit (stderr).
    #[arg(long)]
    pub stats: bool,
    /// Register the control endpoint under NAME, for `ustack ps`, `ss`,
    /// `nstat` and `sysctl --stack NAME` (default: run-PID / attach-PID).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Register no control endpoint: `ustack ps`, `ss`, `nstat`, `sysctl`,
    /// `capture` and `ports` cannot reach this relay (and `--metrics`,
    /// which reads through it, is refused).
    #[arg(long, conflicts_with_all = ["name", "metrics"])]
    pub no_control: bool,
    /// Serve the counters in Prometheus' text format at
    /// http://ADDR:PORT/metrics. The guest can never reach it (connections
    /// from the guest to it are refused, also through the gateway).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Open the TAP without the virtio-net header: no checksum offload and
    /// no TSO/GSO, so every frame is at most one MTU both ways (by default
    /// the guest's kernel hands over 64 KB segments whatever the MTU).
    #[arg(long)]
    pub no_offload: bool,
    /// After activity, poll for events without sleeping for up to this many
    /// microseconds before blocking: lower request/response latency, one
    /// CPU kept busy while traffic flows (Linux's net.core.busy_poll).
    #[arg(long, value_name = "US")]
    pub busy_poll: Option<u64>,
    /// TCP congestion control of the guest-side connections: cubic (RFC
    /// 9438 with Linux's HyStart, the default), cubic-hystart++ (RFC 9406's
    /// HyStart++ instead) or newreno (RFC 6582), like Linux's
    /// net.ipv4.tcp_congestion_control.
    #[arg(long, value_name = "ALG", default_value_t = CcAlgorithm::default())]
    pub congestion_control: CcAlgorithm,
    /// Hand every TCP segment from the guest to the stack as it came,
    /// without coalescing consecutive ones first (software GRO, on by
    /// default; the environment variable USTACK_GRO=off does the same).
    #[arg(long)]
    pub no_gro: bool,
    /// Send no IPv6 router advertisements (by default the guest gets a
    /// fd00::/64 address by SLAAC, a default route and the DNS server
    /// fd00::3 from them).
    #[arg(long)]
    pub no_ra: bool,
    /// Run no DHCPv4 server (by default a guest's DHCP client gets the
    /// --addr address, the --gateway and the --dns server).
    #[arg(long)]
    pub no_dhcp: bool,
    /// Run no DHCPv6 server (by default it gives fd00::100 and the DNS
    /// server fd00::3 to guests that ask).
    #[arg(long)]
    pub no_dhcpv6: bool,
    /// Capture the guest side to a pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
}

impl RelayArgs {
    /// `--max-flows`, or the default.
    pub fn max_flows(&self) -> usize {
        self.max_flows.unwrap_or(Limits::default().max_flows)
    }

    /// Options that cannot work together: the guest's address (IPv4 and
    /// IPv6) must be a host address of its prefix and not one the engine
    /// owns, the gateway must be another host address on that prefix (the
    /// guest's default route goes through it), and the nameserver must be
    /// neither (the gateway's mapping to the host's loopback would take its
    /// queries).
    pub fn check(&self) -> Result<(), String> {
        let a = self.addr;
        let mask = u32::MAX
            .checked_shl(32 - u32::from(a.prefix_len))
            .unwrap_or(0);
        let net = u32::from(a.addr) & mask;
        // A unicast address of the prefix, neither its network nor its
        // broadcast address (the prefix is at most /30).
        let host_on_prefix = |x: Ipv4Addr| {
            let v = u32::from(x);
            v & mask == net && v != net && v != net | !mask
        };
        let unicast = |x: Ipv4Addr| {
            !(x.is_unspecified() || x.is_multicast() || x.is_broadcast() || x.is_loopback())
        };
        if !unicast(a.addr) || !host_on_prefix(a.addr) {
            return Err(format!(
                "--addr {} is not a host address of {}/{}",
                a.addr,
                Ipv4Addr::from(net),
                a.prefix_len
            ));
        }
        if self.gateway == a.addr {
            return Err(format!("--gateway {} is the guest's address", self.gateway));
        }
        if !host_on_prefix(self.gateway) {
            return Err(format!(
                "--gateway {} is not a host address on the guest's prefix {}/{}",
                self.gateway,
                Ipv4Addr::from(net),
                a.prefix_len
            ));
        }
        if self.dns == a.addr {
            return Err(format!("--dns {} is the guest's address", self.dns));
        }
        if self.dns == self.gateway {
            return Err(format!(
                "--dns {} is the gateway's address (choose another, e.g. the default 10.0.2.3)",
                self.dns
            ));
        }
        if !unicast(self.dns) {
            return Err(format!("--dns {} is not a unicast address", self.dns));
        }
        if self.no_ipv6 {
            return Ok(());
        }
        let a = self.addr6;
        if a.addr == self.gateway6 || a.addr == self.dns6 {
            return Err(format!(
                "--addr6 {} is the IPv6 gateway's or nameserver's address",
                a.addr
            ));
        }
        if self.dns6 == self.gateway6 {
            return Err(format!(
                "--dns6 {} is the IPv6 gateway's address (choose another, e.g. the default fd00::3)",
                self.dns6
            ));
        }
        let on_prefix = |x: Ipv6Addr| {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(a.prefix_len))
                .unwrap_or(0);
            u128::from(x) & mask == u128::from(a.addr) & mask
        };
        if !on_prefix(self.gateway6) {
            return Err(format!(
                "--gateway6 {} is not on the guest's prefix {}/{}",
                self.gateway6, a.addr, a.prefix_len
            ));
        }
        Ok(())
    }

    /// The relay configuration these options describe.
    pub fn relay_config(&self) -> RelayConfig {
        RelayConfig {
            guest_addr: self.addr.addr,
            gateway: self.gateway,
            gateway_to_loopback: !self.no_map_gateway,
            dns: Some(self.dns),
            host_dns: self.dns_upstream.unwrap_or_else(dns::host_resolver),
            guest_addr6: (!self.no_ipv6).then_some(self.addr6.addr),
            gateway6: self.gateway6,
            dns6: (!self.no_ipv6).then_some(self.dns6),
            limits: Limits {
                max_flows: self.max_flows(),
                max_half_open: self.max_half_open,
                flow_buffer: self.flow_buffer,
                flow_buffer_max: self.flow_buffer_max,
                total_buffer: self.total_buffer,
                new_flows_per_sec: self.flow_rate,
            },
            timeouts: Timeouts {
                tcp_idle: Duration::from_secs(self.tcp_idle_timeout),
                udp_idle: Duration::from_secs(self.udp_idle_timeout),
                ..Timeouts::default()
            },
            forwards: self.publish.clone(),
            icmp_ping_sockets: true,
            busy_poll: self.busy_poll.map(Duration::from_micros),
            deny: Vec::new(),
        }
    }
}

/// `ustack run [OPTIONS] -- CMD [ARGS...]`
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Name of the TAP inside the namespace.
    #[arg(long, default_value = "eth0")]
    pub tap: String,
    /// (tests) After giving up privileges, make a system call the seccomp
    /// filter forbids, to show the relay is stopped and the call named.
    #[arg(long, hide = true)]
    pub seccomp_selftest: bool,
    /// The guest's interface MTU (default 65520, as pasta uses). With the TAP's
    /// virtio-net offloads (the default; see --no-offload) the guest's kernel hands
    /// ustack 64 KB TCP segments whatever the MTU, and ustack sends it 64 KB
    /// super-frames with checksums left to the kernel; 1500 mimics an Ethernet
    /// link (what a VM or container usually has) at almost no cost. At
    /// least 1280 (IPv6's minimum) unless --no-ipv6, then 576.
    #[arg(long, default_value_t = 65520, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(576..=65520), usize::from))]
    pub mtu: usize,
    /// Leave the host's /etc/resolv.conf visible to the command.
    #[arg(long)]
    pub no_resolv_conf: bool,
    /// Create a user namespace even when running as root.
    #[arg(long)]
    pub userns: bool,
    /// The user (and group) the relay, which parses the command's packets,
    /// runs as once the sandbox, its TAP and the listeners exist. Default
    /// when started as root: the invoking user (sudo's SUDO_UID/SUDO_GID,
    /// or the real user of a set-user-ID ustack), else nobody:nogroup.
    /// Names or numbers; `--run-as root` keeps root. The command itself
    /// runs as before (root, or in its user namespace).
    #[arg(long, value_name = "USER[:GROUP]")]
    pub run_as: Option<String>,
    #[command(flatten)]
    pub relay: RelayArgs,
    /// The command (default: $SHELL or /bin/sh). Every word from its
    /// first on is the command's, options included; a word before it that
    /// looks like an option must be one of `run`'s (after `--`, anything).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

impl RunArgs {
    /// [`RelayArgs::check`], and an MTU IPv6 can use unless IPv6 is off:
    /// the sandbox's kernel refuses IPv6 on a link below 1280 bytes.
    pub fn check(&self) -> Result<(), String> {
        self.relay.check()?;
        if !self.relay.no_ipv6 && self.mtu < IPV6_MIN_MTU {
            return Err(format!(
                "--mtu {} is below IPv6's minimum link MTU, {IPV6_MIN_MTU} (RFC 8200 5): \
                 add --no-ipv6 for a smaller one",
                self.mtu
            ));
        }
        Ok(())
    }
}

/// RFC 8200 5: "every link in the Internet [must] have an MTU of 1280
/// octets or greater".
const IPV6_MIN_MTU: usize = 1280;

/// `ustack attach --netns PATH | --tap NAME`
#[derive(clap::Args, Debug, Clone)]
pub struct AttachArgs {
    /// Network namespace to serve (e.g. /run/netns/NAME or /proc/PID/ns/net).
    #[arg(long, value_name = "PATH")]
    pub netns: Option<PathBuf>,
    /// TAP to serve, which must exist (in --netns if given, else in
    /// ustack's namespace; e.g. made with `ip tuntap add dev NAME mode tap`).
    #[arg(long, default_value = "eth0")]
    pub tap: String,
    #[command(flatten)]
    pub relay: RelayArgs,
}

/// Builds the guest-side engine for a device.
pub type GuestFactory<G> = dyn FnOnce(Box<dyn Device + Send>, &RelayArgs, usize) -> io::Result<G>;

/// The default engine: `ustack_core::Stack` in transparent mode on the
/// device, driven by the relay's own loop (see [`crate::core_guest`]).
pub fn default_guest(
    dev: Box<dyn Device + Send>,
    args: &RelayArgs,
    mtu: usize,
) -> io::Result<CoreGuest> {
    CoreGuest::new(dev, guest_config(args, mtu))
}

/// The guest-side engine's configuration from the command line.
pub fn guest_config(args: &RelayArgs, mtu: usize) -> CoreGuestConfig {
    let mut cfg = CoreGuestConfig::new(args.addr.addr, args.gateway, args.addr.prefix_len, mtu);
    // The relay keeps no queues: what a flow buffers per direction is the
    // guest-side connection's receive buffer (guest -> host) and send
    // buffer (host -> guest). Their size is the per-flow limit, so that the
    // stack's own readiness (send space after full) is what wakes a flow
    // held back by it. The send buffer starts at --flow-buffer and grows
    // with cwnd up to --flow-buffer-max (autotuning).
    cfg.tcp.congestion_control = args.congestion_control;
    cfg.tcp.snd_buf_initial = args.flow_buffer.max(1);
    cfg.tcp.snd_buf = args.flow_buffer_max.max(cfg.tcp.snd_buf_initial);
    cfg.tcp.rcv_buf = args.flow_buffer.max(1);
    cfg.gro = !args.no_gro && !gro_off_by_env();
    // The engine owns the gateway's and the nameserver's IPv6 addresses on
    // the guest's prefix (Neighbor Discovery answers for them).
    if !args.no_ipv6 {
        let p = args.addr6.prefix_len;
        for a in [args.gateway6, args.dns6] {
            let cidr = Ipv6Cidr {
                address: a,
                prefix_len: p,
            };
            if !cfg.addrs6.contains(&cidr) {
                cfg.addrs6.push(cidr);
            }
        }
    }
    // --no-ipv6 turns the IPv6 services off too.
    let on = crate::addr_services::ServiceSwitches {
        ra: !args.no_ra && !args.no_ipv6,
        dhcpv4: !args.no_dhcp,
        dhcpv6: !args.no_dhcpv6 && !args.no_ipv6,
    };
    let (a, gw) = (args.addr, args.gateway);
    let v6 = crate::addr_services::Guest6 {
        addr: args.addr6.addr,
        prefix_len: args.addr6.prefix_len,
        dns: args.dns6,
    };
    cfg.services =
        crate::addr_services::guest_services(on, a.addr, gw, a.prefix_len, args.dns, v6, mtu);
    // Room for every flow plus connections still closing (TIME-WAIT).
    cfg.limits.max_tcp_sockets = cfg
        .limits
        .max_tcp_sockets
        .max(args.max_flows().saturating_add(16_384));
    cfg
}

/// `USTACK_GRO=off` (or `0`, `no`, `false`): no receive coalescing.
pub fn gro_off_by_env() -> bool {
    std::env::var("USTACK_GRO").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "off" | "0" | "no" | "false"
        )
    })
}

/// The guest device as the engine uses it: recorded to `--pcap` if given,
/// and tapped for live captures (`ustack capture`) into the returned hub.
fn wrap_pcap<D: Device + Send + 'static>(
    dev: D,
    pcap: &Option<PathBuf>,
) -> io::Result<(Box<dyn Device + Send>, Arc<CaptureHub>)> {
    let dev: Box<dyn Device + Send> = match pcap {
        Some(path) => Box::new(Capture::to_file(dev, path)?),
        None => Box::new(dev),
    };
    let hub = CaptureHub::new();
    Ok((Box::new(Tapped::new(dev, hub.clone())), hub))
}

/// `ustack run`: returns the command's exit code (signal N → 128+N).
/// Leaves the calling process's privileges as they are (tests, embedding);
/// the `ustack` binary uses [`run_hardened`].
pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    run_report_inner(args, Box::new(default_guest), false).map(|r| r.code)
}

/// `ustack run` as the `ustack` binary does it: once the sandbox, its TAP
/// and the host listeners exist, the process gives up the privileges it no
/// longer needs (`harden.rs`), for the rest of its life.
pub fn run_hardened(args: RunArgs) -> anyhow::Result<i32> {
    run_report_inner(args, Box::new(default_guest), true).map(|r| r.code)
}

/// `ustack run` with a given guest-side engine (tests use a fake one).
pub fn run_with<G: GuestStack>(
    args: RunArgs,
    make_guest: Box<GuestFactory<G>>,
) -> anyhow::Result<i32> {
    run_report_with(args, make_guest).map(|r| r.code)
}

/// How `ustack-run-hardened` starts the line with its report.
pub const REPORT_PREFIX: &str = "ustack-run-hardened report: ";
/// How `ustack-run-hardened` starts the line with its error.
pub const ERROR_PREFIX: &str = "ustack-run-hardened error: ";

/// What one `ustack run` did: the command's exit code and the relay's and
/// the guest-side engine's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The command's exit code (signal N → 128+N; 127 not found, 126 not executable).
    pub code: i32,
    /// The relay's counters at exit (what `--stats` prints).
    pub stats: Stats,
    /// The guest-side engine's counters at exit, by `nstat` name
    /// (`IpInCsumErrors`, ...), as `ustack nstat` shows them.
    pub engine: Vec<(String, u64)>,
}

impl RunReport {
    /// One engine counter by `nstat` name (0 if the engine has no such counter).
    pub fn engine_counter(&self, name: &str) -> u64 {
        self.engine
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }
}

impl RunReport {
    /// The report as one line of JSON: `{"code":N,"stats":{"RelayTcpOpened":N,
    /// ...},"engine":{"IpInReceives":N,...}}` (relay counters by their
    /// `nstat` names, as [`Stats::named`]).
    pub fn to_json(&self) -> String {
        let stats: serde_json::Map<String, serde_json::Value> = self
            .stats
            .named()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.into()))
            .collect();
        let engine: serde_json::Map<String, serde_json::Value> = self
            .engine
            .iter()
            .map(|(n, v)| (n.clone(), (*v).into()))
            .collect();
        serde_json::json!({ "code": self.code, "stats": stats, "engine": engine }).to_string()
    }

    /// A report [`RunReport::to_json`] wrote. Unknown relay counters are
    /// an error (the writer and the reader disagree).
    pub fn from_json(text: &str) -> Result<RunReport, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let code = v["code"]
            .as_i64()
            .and_then(|c| i32::try_from(c).ok())
            .ok_or("no exit code")?;
        let mut stats = Stats::default();
        for (n, x) in v["stats"].as_object().ok_or("no relay counters")? {
            let x = x.as_u64().ok_or_else(|| format!("{n}: not a counter"))?;
            if !stats.set_named(n, x) {
                return Err(format!("unknown relay counter {n}"));
            }
        }
        let engine = v["engine"]
            .as_object()
            .ok_or("no engine counters")?
            .iter()
            .map(|(n, x)| {
                Ok((
                    n.clone(),
                    x.as_u64().ok_or_else(|| format!("{n}: not a counter"))?,
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(RunReport {
            code,
            stats,
            engine,
        })
    }
}

/// `ustack run` with the default engine, returning the counters too.
pub fn run_report(args: RunArgs) -> anyhow::Result<RunReport> {
    run_report_with(args, Box::new(default_guest))
}

/// `ustack run` as the binary does it ([`run_hardened`]: privileges given
/// up once set up), returning the counters too. Process-wide: the calling
/// process must be single-threaded and gives up its privileges for good
/// (the hardened test runner, `ustack-run-hardened`, calls it).
pub fn run_hardened_report(args: RunArgs) -> anyhow::Result<RunReport> {
    run_report_inner(args, Box::new(default_guest), true)
}

/// `ustack run` with a given engine, returning the counters too.
pub fn run_report_with<G: GuestStack>(
    args: RunArgs,
    make_guest: Box<GuestFactory<G>>,
) -> anyhow::Result<RunReport> {
    run_report_inner(args, make_guest, false)
}

fn run_report_inner<G: GuestStack>(
    args: RunArgs,
    make_guest: Box<GuestFactory<G>>,
    harden: bool,
) -> anyhow::Result<RunReport> {
    let cfg = SandboxConfig {
        tap_name: args.tap.clone(),
        mtu: args.mtu,
        addr: args.relay.addr.addr,
        prefix_len: args.relay.addr.prefix_len,
        gateway: Some(args.relay.gateway),
        dns: if args.no_resolv_conf {
            None
        } else {
            Some(args.relay.dns)
        },
        userns: if args.userns {
            UserNs::Always
        } else {
            UserNs::Auto
        },
        offload: !args.relay.no_offload,
        ipv6: (!args.relay.no_ipv6).then_some(SandboxIpv6 {
            addr: args.relay.addr6.addr,
            prefix_len: args.relay.addr6.prefix_len,
            gateway: Some(args.relay.gateway6),
            dns: Some(args.relay.dns6),
        }),
    };
    args.check().map_err(|e| anyhow!("ustack run: {e}"))?;
    if let Some(n) = &args.relay.name {
        ustack_ctl::check_name(n).map_err(|e| anyhow!("ustack run: {e}"))?;
    }
    // Who the relay becomes (looked up now: the user databases may need
    // files and sockets the hardened relay no longer opens).
    let run_as = if harden {
        crate::harden::RunAs::choose(args.run_as.as_deref())
            .map_err(|e| anyhow!("ustack run: --run-as: {e}"))?
    } else {
        None
    };
    // Descriptors the process was started with (beyond stdio): the command
    // inherits them; the hardened relay then lets go of them.
    let inherited = if harden {
        crate::harden::open_descriptors()
    } else {
        Vec::new()
    };
    let mut sandbox =
        Sandbox::spawn(&cfg, &args.cmd).context("ustack run: cannot create the sandbox")?;
    if harden {
        crate::harden::close_descriptors(&inherited);
    }
    // After the fork: the command keeps the descriptor limit it was given.
    let mut args = args;
    check_descriptors("ustack run", &mut args.relay);
    let tap = sandbox
        .take_tap()
        .ok_or_else(|| anyhow!("sandbox passed no TAP"))?;
    if !args.relay.no_offload && !tap.offloads().vnet_hdr {
        tracing::warn!(
            "ustack run: the kernel refused the TAP's virtio-net header or offloads; \
             running without them (segments cut and checksummed in software)"
        );
    }
    let (dev, hub) = wrap_pcap(tap, &args.relay.pcap).context("cannot open the pcap file")?;
    let guest = make_guest(dev, &args.relay, args.mtu).context("ustack run: guest-side engine")?;
    // The control endpoint's file, made by the present user (root, or the
    // rootless user) and given to whoever started ustack (sudo's user); it
    // is served only once the privileges are gone.
    let reg = Registration::new_unless_off(&args.relay, "run").context("ustack run")?;
    if harden {
        if let Some(reg) = &reg {
            reg.give_to_invoking_user().context("ustack run")?;
            // A relay that becomes another user than the file's cannot
            // remove it when it ends: the sandbox's init, which keeps its
            // privileges, does when the command ends.
            let owner = std::fs::metadata(reg.path()).map(|m| m.uid()).ok();
            if run_as.is_some_and(|to| Some(to.uid) != owner) {
                sandbox
                    .remove_at_exit(reg.path())
                    .context("ustack run: sandbox")?;
            }
        }
        crate::harden::harden(run_as).context("ustack run: giving up privileges")?;
        if args.seccomp_selftest {
            crate::harden::selftest_forbidden_call();
        }
    }
    let (mut relay, control) =
        Operations::relay(reg, &args.relay, hub, guest).context("ustack run")?;
    // Through the sandbox's init: the relay may no longer signal the
    // command itself (it runs as another user once hardened).
    let fwd = signals::forward_to_sandbox(&sandbox).context("installing signal forwarding")?;
    match sandbox.start() {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            eprintln!("ustack run: {e}");
            return Ok(RunReport {
                code: 127,
                stats: *relay.stats(),
                engine: relay.guest().ctl_counters(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            eprintln!("ustack run: {e}");
            return Ok(RunReport {
                code: 126,
                stats: *relay.stats(),
                engine: relay.guest().ctl_counters(),
            });
        }
        Err(e) => return Err(e).context("ustack run: cannot start the command"),
    }
    let mut served = relay.run_until(Some(sandbox.exit_fd()), None);
    if matches!(served, Ok(Stop::StopFd)) {
        // The command is gone, but its kernel may still be sending what its
        // closed sockets had queued (the end of an upload, FINs).
        let drain = args.relay.relay_config().timeouts.exit_drain;
        served = relay.drain(drain);
    }
    // The command deleted its own interface (it may: the namespace is its
    // own). That ends its network, not a failure of ours: say so, and let
    // the command's own status stand.
    if matches!(served, Ok(Stop::GuestGone)) {
        eprintln!(
            "ustack run: the sandbox's interface {} was deleted; the command has no network any more",
            args.tap
        );
    }
    let code = sandbox.wait().context("waiting for the command")?;
    drop(control);
    relay.shutdown();
    let stats = *relay.stats();
    let engine = relay.guest().ctl_counters();
    if args.relay.stats {
        eprint!("{stats}");
    }
    drop(relay);
    drop(fwd);
    drop(sandbox);
    if let Err(e) = served {
        bail!("ustack run: relay failed: {e}");
    }
    Ok(RunReport {
        code,
        stats,
        engine,
    })
}

/// The operator's side of a relay: the control endpoint (crates/ctl) under
/// `--name` or `MODE-PID`, and the `--metrics` endpoint.
struct Operations {
    mode: &'static str,
    pending: ustack_ctl::PendingControl,
    link: crate::control::ControlLink,
    provider: Arc<dyn ustack_ctl::Provider>,
    metrics: Option<ustack_ctl::Metrics>,
}

/// What `attach` returns: dropped when the relay stops.
struct Running {
    _control: ustack_ctl::Control,
    _metrics: Option<ustack_ctl::Metrics>,
}

/// The control endpoint registered (its file exists), nothing started yet:
/// made before the relay gives up its privileges, started after.
struct Registration {
    name: String,
    mode: &'static str,
    pending: ustack_ctl::PendingControl,
}

impl Registration {
    /// The registration, or none with `--no-control`.
    fn new_unless_off(args: &RelayArgs, mode: &'static str) -> anyhow::Result<Option<Self>> {
        if args.no_control {
            return Ok(None);
        }
        Self::new(args, mode).map(Some)
    }

    fn new(args: &RelayArgs, mode: &'static str) -> anyhow::Result<Self> {
        let name = args
            .name
            .clone()
            .unwrap_or_else(|| ustack_ctl::default_name(mode));
        let pending = ustack_ctl::Control::create(&name).map_err(|e| anyhow!(e))?;
        Ok(Registration {
            name,
            mode,
            pending,
        })
    }

    /// The control endpoint's shared-memory file.
    fn path(&self) -> &std::path::Path {
        self.pending.path()
    }

    /// When root runs on behalf of another user (sudo, set-user-ID), the
    /// control endpoint is that user's (and root's, as always): chown its
    /// file (mode 0600) to them.
    fn give_to_invoking_user(&self) -> anyhow::Result<()> {
        if let Some(u) = crate::harden::invoking_user() {
            std::os::unix::fs::chown(self.path(), Some(u.uid), Some(u.gid))
                .with_context(|| format!("giving the control endpoint to user {}", u.uid))?;
        }
        Ok(())
    }

    /// The control link and the metrics endpoint (its listener and thread).
    fn start(self, args: &RelayArgs, hub: Arc<CaptureHub>) -> anyhow::Result<Operations> {
        let (link, provider) = crate::control::link(hub).context("control endpoint")?;
        let provider: Arc<dyn ustack_ctl::Provider> = Arc::new(provider);
        let metrics = match args.metrics {
            Some(a) => Some(
                ustack_ctl::Metrics::start(a, &self.name, provider.clone())
                    .map_err(|e| anyhow!(e))?,
            ),
            None => None,
        };
        Ok(Operations {
            mode: self.mode,
            pending: self.pending,
            link,
            provider,
            metrics,
        })
    }
}

impl Operations {
    /// The relay on `guest`, answering the control endpoint `reg` if any
    /// (none: `--no-control`).
    fn relay<G: GuestStack>(
        reg: Option<Registration>,
        args: &RelayArgs,
        hub: Arc<CaptureHub>,
        guest: G,
    ) -> anyhow::Result<(Relay<G>, Option<Running>)> {
        let Some(reg) = reg else {
            let relay = Relay::new(guest, args.relay_config()).context("relay")?;
            return Ok((relay, None));
        };
        let ops = reg.start(args, hub)?;
        let mut relay = Relay::new(guest, ops.relay_config(args)).context("relay")?;
        let control = ops.attach(&mut relay)?;
        Ok((relay, Some(control)))
    }

    /// The relay's configuration, with the metrics endpoint out of the
    /// guest's reach.
    fn relay_config(&self, args: &RelayArgs) -> RelayConfig {
        let mut cfg = args.relay_config();
        if let Some(m) = &self.metrics {
            cfg.deny.push(m.addr());
        }
        cfg
    }

    /// Let the relay answer the control endpoint, and open it.
    fn attach<G: GuestStack>(self, relay: &mut Relay<G>) -> anyhow::Result<Running> {
        relay.set_control(self.link).context("control endpoint")?;
        let control = self
            .pending
            .serve(self.mode, self.provider)
            .map_err(|e| anyhow!(e))?;
        Ok(Running {
            _control: control,
            _metrics: self.metrics,
        })
    }
}

/// Descriptors the relay keeps besides one per flow (epoll, the TAP,
/// listeners, the command's pipes, pcap).
const FD_RESERVE: u64 = 64;

/// Raise the descriptor limit to the hard limit. If the flow limit still
/// cannot be reached (flows beyond the descriptors would fail as socket
/// errors instead of being refused by the flow limit): a default flow limit
/// is lowered to fit, a `--max-flows` given explicitly is kept with a
/// warning.
fn check_descriptors(who: &str, relay: &mut RelayArgs) {
    let max_flows = relay.max_flows();
    let limit = match crate::sys::raise_nofile() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{who}: warning: cannot read the descriptor limit: {e}");
            return;
        }
    };
    if (max_flows as u64).saturating_add(FD_RESERVE) <= limit {
        return;
    }
    let fits = usize::try_from(limit.saturating_sub(FD_RESERVE))
        .unwrap_or(usize::MAX)
        .max(1);
    if relay.max_flows.is_some() {
        eprintln!(
            "{who}: warning: --max-flows {max_flows} needs about {} descriptors but the limit \
             is {limit} (ulimit -n); flows beyond ~{fits} will be refused",
            max_flows as u64 + FD_RESERVE,
        );
    } else {
        tracing::debug!("descriptor limit {limit}: at most {fits} flows");
        relay.max_flows = Some(fits);
    }
}

/// `ustack attach`: serve an existing namespace/TAP until SIGINT or
/// SIGTERM, then stop cleanly (the final router advertisement, the
/// control endpoint's file removed) and return 0. Blocks those signals in
/// the calling thread: call it before spawning threads. Leaves the calling
/// process's privileges as they are; the `ustack` binary uses
/// [`attach_hardened`].
pub fn attach(args: AttachArgs) -> anyhow::Result<i32> {
    attach_until_signal(args, false)
}

/// `ustack attach` as the binary does it: privileges given up once set up,
/// as [`run_hardened`]; stops on SIGINT/SIGTERM as [`attach`].
pub fn attach_hardened(args: AttachArgs) -> anyhow::Result<i32> {
    attach_until_signal(args, true)
}

fn attach_until_signal(args: AttachArgs, harden: bool) -> anyhow::Result<i32> {
    // Hardening (in attach_inner) closes the descriptors the process was
    // started with, but keeps this one.
    let stop = crate::termination::termination_fd()
        .context("ustack attach: cannot wait for SIGINT/SIGTERM")?;
    attach_inner(
        args,
        Box::new(default_guest),
        Some(stop.as_raw_fd()),
        harden,
    )
}

/// [`attach_hardened`] that also stops when `stop_fd` (one of the standard
/// descriptors: hardening closes the others it was started with) is
/// readable.
pub fn attach_hardened_until(args: AttachArgs, stop_fd: std::os::fd::RawFd) -> anyhow::Result<i32> {
    attach_inner(args, Box::new(default_guest), Some(stop_fd), true)
}

/// `ustack attach` with a given engine; stops when `stop_fd` is readable (or SIGINT/SIGTERM).
/// Leaves the calling process's privileges as they are.
pub fn attach_with<G: GuestStack>(
    args: AttachArgs,
    make_guest: Box<GuestFactory<G>>,
    stop_fd: Option<std::os::fd::RawFd>,
) -> anyhow::Result<i32> {
    attach_inner(args, make_guest, stop_fd, false)
}

/// How often `attach --netns PATH` looks whether PATH still leads to the
/// namespace it serves.
const NETNS_WATCH_EVERY: Duration = Duration::from_secs(1);

fn attach_inner<G: GuestStack>(
    args: AttachArgs,
    make_guest: Box<GuestFactory<G>>,
    stop_fd: Option<std::os::fd::RawFd>,
    harden: bool,
) -> anyhow::Result<i32> {
    if harden {
        // No command to inherit them: the descriptors we were started with
        // (stdio aside, and the stop descriptor) go at once.
        let keep = stop_fd.unwrap_or(-1);
        let open = crate::harden::open_descriptors();
        crate::harden::close_descriptors(
            &open
                .into_iter()
                .filter(|&fd| fd != keep)
                .collect::<Vec<_>>(),
        );
    }
    let mut args = args;
    args.relay
        .check()
        .map_err(|e| anyhow!("ustack attach: {e}"))?;
    check_descriptors("ustack attach", &mut args.relay);
    let tap = match &args.netns {
        Some(ns) => sb_attach::open_tap_in_netns(ns, &args.tap, !args.relay.no_offload),
        None => sb_attach::open_tap(&args.tap, !args.relay.no_offload),
    }
    .with_context(|| format!("ustack attach: cannot open TAP {}", args.tap))?;
    // What the namespace's path stands for now, to stop once it no longer
    // does (noted while privileges allow looking).
    let watch = match &args.netns {
        Some(ns) => Some(
            crate::netns_watch::NetnsWatch::new(ns)
                .with_context(|| format!("ustack attach: cannot watch {}", ns.display()))?,
        ),
        None => None,
    };
    let mtu = tap.mtu();
    let (dev, hub) = wrap_pcap(tap, &args.relay.pcap).context("cannot open the pcap file")?;
    let guest = make_guest(dev, &args.relay, mtu).context("ustack attach: guest-side engine")?;
    let reg = Registration::new_unless_off(&args.relay, "attach").context("ustack attach")?;
    if harden {
        crate::harden::harden(None).context("ustack attach: giving up privileges")?;
    }
    let (mut relay, control) =
        Operations::relay(reg, &args.relay, hub, guest).context("ustack attach")?;
    let watching = match watch {
        Some(w) => {
            let w = w
                .start(NETNS_WATCH_EVERY)
                .context("ustack attach: watching the namespace")?;
            relay
                .stop_also_on(w.fd())
                .context("ustack attach: watching the namespace")?;
            Some(w)
        }
        None => None,
    };
    let served = relay.run_until(stop_fd, None);
    if matches!(served, Ok(Stop::GuestGone)) {
        eprintln!("ustack attach: TAP {} was deleted: stopping", args.tap);
    }
    if let (Some(w), Some(ns)) = (&watching, &args.netns) {
        if w.fired() {
            eprintln!(
                "ustack attach: the namespace {} is gone: stopping",
                ns.display()
            );
        }
    }
    drop(watching);
    drop(control);
    relay.shutdown();
    // The namespace and its TAP outlive us: tell the guest we are no
    // longer its router (best effort: the TAP may be gone already).
    if let Err(e) = relay.guest_mut().withdraw_services(Instant::now()) {
        tracing::debug!("final router advertisement: {e}");
    }
    if args.relay.stats {
        eprint!("{}", relay.stats());
    }
    served.context("ustack attach: relay failed")?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct T {
        #[command(subcommand)]
        c: C,
    }
    #[derive(clap::Subcommand, Debug)]
    enum C {
        Run(RunArgs),
        Attach(AttachArgs),
    }

    #[test]
    fn run_args_parse_with_command_after_double_dash() {
        let t = T::try_parse_from([
            "ustack",
            "run",
            "--mtu",
            "9000",
            "-p",
            "8080:80",
            "-p",
            "0.0.0.0:53:53/udp",
            "--stats",
            "--",
            "sh",
            "-c",
            "exit 3",
        ]);
        let Ok(T { c: C::Run(r) }) = t else {
            panic!("parse failed: {t:?}")
        };
        assert_eq!(r.mtu, 9000);
        assert_eq!(r.relay.publish.len(), 2);
        assert!(r.relay.stats);
        assert_eq!(
            r.cmd,
            vec![OsString::from("sh"), "-c".into(), "exit 3".into()]
        );
        assert_eq!(
            r.relay.addr,
            Cidr {
                addr: Ipv4Addr::new(10, 0, 2, 15),
                prefix_len: 24
            }
        );
        assert_eq!(r.relay.max_flows(), 16_384);
        assert_eq!(r.relay.congestion_control, CcAlgorithm::Cubic);
        assert_eq!(r.relay.busy_poll, None);
        assert_eq!(r.relay.relay_config().busy_poll, None);
    }

    #[test]
    fn tcp_tuning_options_reach_the_relay() {
        let t = T::try_parse_from([
            "ustack",
            "run",
            "--congestion-control",
            "reno",
            "--busy-poll",
            "50",
            "--",
            "true",
        ]);
        let Ok(T { c: C::Run(r) }) = t else {
            panic!("parse failed: {t:?}")
        };
        assert_eq!(r.relay.congestion_control, CcAlgorithm::NewReno);
        assert_eq!(
            r.relay.relay_config().busy_poll,
            Some(Duration::from_micros(50))
        );
        // Defaults: the host -> guest buffer autotunes from 256 KiB to 4 MiB.
        let g = guest_config(&r.relay, 1500);
        assert_eq!(g.tcp.congestion_control, CcAlgorithm::NewReno);
        assert_eq!((g.tcp.snd_buf_initial, g.tcp.snd_buf), (256 << 10, 4 << 20));
        assert_eq!(g.tcp.rcv_buf, 256 << 10);
        let t = T::try_parse_from([
            "ustack",
            "run",
            "--flow-buffer",
            "65536",
            "--flow-buffer-max",
            "1000",
            "--",
            "true",
        ]);
        let Ok(T { c: C::Run(r) }) = t else {
            panic!("parse failed: {t:?}")
        };
        // A ceiling below the start: a fixed buffer.
        let g = guest_config(&r.relay, 1500);
        assert_eq!((g.tcp.snd_buf_initial, g.tcp.snd_buf), (65536, 65536));
        assert_eq!(g.tcp.rcv_buf, 65536);
        let bad = T::try_parse_from(["ustack", "run", "--congestion-control", "bbr", "--", "x"]);
        let err = bad.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("known: cubic, newreno"), "{err}");
    }

    #[test]
    fn a_run_report_survives_its_json() {
        let stats = Stats {
            bytes_guest_to_host: 300_000,
            tcp_opened: 2,
            ..Stats::default()
        };
        let r = RunReport {
            code: 7,
            stats,
            engine: vec![("IpInReceives".into(), 5), ("TcpInSegs".into(), 9)],
        };
        assert_eq!(RunReport::from_json(&r.to_json()), Ok(r));
        assert!(
            RunReport::from_json(r#"{"code":0,"stats":{"RelayNope":1},"engine":{}}"#)
                .is_err_and(|e| e.contains("RelayNope"))
        );
        assert!(RunReport::from_json("{}").is_err());
    }

    #[test]
    fn attach_args_and_bad_values() {
        let t = T::try_parse_from([
            "ustack",
            "attach",
            "--netns",
            "/run/netns/x",
            "--tap",
            "tap0",
        ]);
        assert!(matches!(t, Ok(T { c: C::Attach(_) })));
        assert!(T::try_parse_from(["ustack", "run", "-p", "nope", "--", "true"]).is_err());
        assert!(T::try_parse_from(["ustack", "run", "--addr", "10.0.2.15/33"]).is_err());
    }

    /// IPv4 choices that cannot work are refused before anything starts,
    /// as the IPv6 ones are (and an MTU below IPv6's minimum with IPv6
    /// on, which failed with "configuring the TAP's IPv6 address and
    /// route: Invalid argument"): before, `--gateway 10.0.2.15` (the guest's
    /// own address) or `--addr 10.0.2.255/24` (its prefix's broadcast
    /// address) ran with a guest that could reach nothing, `--dns
    /// 10.0.2.2` sent every DNS query to the host's 127.0.0.1:53 instead
    /// of its resolver (the gateway's mapping came first), and `--gateway
    /// 10.9.9.9` failed deep in the sandbox's set-up ("adding the default
    /// route: Network is unreachable").
    #[test]
    fn inconsistent_ipv4_addresses_are_refused() {
        let check = |v: &[&str]| -> Result<(), String> {
            let mut all = vec!["ustack", "run"];
            all.extend_from_slice(v);
            all.extend_from_slice(&["--", "true"]);
            match T::try_parse_from(&all) {
                Ok(T { c: C::Run(r) }) => r.relay.check(),
                other => panic!("parse {all:?}: {other:?}"),
            }
        };
        for (bad, why) in [
            (
                &["--gateway", "10.0.2.15"][..],
                "--gateway 10.0.2.15 is the guest's",
            ),
            (
                &["--gateway", "10.9.9.9"],
                "--gateway 10.9.9.9 is not a host address on",
            ),
            (&["--gateway", "10.0.2.255"], "--gateway 10.0.2.255 is not"),
            (&["--gateway", "10.0.2.0"], "--gateway 10.0.2.0 is not"),
            (&["--addr", "10.0.2.255/24"], "--addr 10.0.2.255 is not"),
            (&["--addr", "10.0.2.0/24"], "--addr 10.0.2.0 is not"),
            (&["--addr", "0.0.0.0/24"], "--addr 0.0.0.0 is not"),
            (&["--addr", "224.0.0.5/24"], "--addr 224.0.0.5 is not"),
            (&["--addr", "127.0.0.5/8"], "--addr 127.0.0.5 is not"),
            (&["--dns", "10.0.2.15"], "--dns 10.0.2.15 is the guest's"),
            (&["--dns", "10.0.2.2"], "--dns 10.0.2.2 is the gateway's"),
            (&["--dns", "0.0.0.0"], "--dns 0.0.0.0 is not"),
            (
                &["--dns6", "fd00::2"],
                "--dns6 fd00::2 is the IPv6 gateway's",
            ),
        ] {
            match check(bad) {
                Ok(()) => panic!("{bad:?} accepted"),
                Err(e) => assert!(e.contains(why), "{bad:?}: {e}"),
            }
        }
        // IPv6 needs a link MTU of 1280 bytes at least.
        let run_check = |v: &[&str]| -> Result<(), String> {
            let mut all = vec!["ustack", "run"];
            all.extend_from_slice(v);
            all.extend_from_slice(&["--", "true"]);
            match T::try_parse_from(&all) {
                Ok(T { c: C::Run(r) }) => r.check(),
                other => panic!("parse {all:?}: {other:?}"),
            }
        };
        let e = run_check(&["--mtu", "1000"]).err().unwrap_or_default();
        assert!(e.contains("--mtu 1000 is below IPv6's minimum"), "{e}");
        assert_eq!(run_check(&["--mtu", "1000", "--no-ipv6"]), Ok(()));
        assert_eq!(run_check(&["--mtu", "1280"]), Ok(()));
        assert!(run_check(&["--gateway", "10.0.2.15"]).is_err());
        for good in [
            &[][..],
            &[
                "--addr",
                "192.168.5.10/24",
                "--gateway",
                "192.168.5.1",
                "--dns",
                "192.168.5.3",
            ],
            // A nameserver off the prefix (reached through the gateway).
            &["--dns", "1.1.1.1"],
            &["--addr", "10.0.0.2/30", "--gateway", "10.0.0.1"],
            &["--no-ipv6", "--dns6", "fd00::2"],
        ] {
            assert_eq!(check(good), Ok(()), "{good:?}");
        }
    }

    /// An option `run` does not know is an error, as for every other
    /// subcommand, not the command to run: `ustack run --mtu9000 -- curl`
    /// used to try to execute `--mtu9000` and fail with "No such file or
    /// directory" (exit 127). After the first word of the command every
    /// word is the command's, options included; after `--` too.
    #[test]
    fn an_unknown_option_is_an_error_not_the_command() {
        for v in [
            &["ustack", "run", "--bogus", "--", "true"][..],
            &["ustack", "run", "--bogus"],
            &["ustack", "run", "-x", "true"],
            &["ustack", "run", "--mtu9000", "--", "curl"],
        ] {
            let t = T::try_parse_from(v);
            let err = t.err().map(|e| e.kind());
            assert_eq!(err, Some(clap::error::ErrorKind::UnknownArgument), "{v:?}");
        }
        let cmd = |v: &[&str]| match T::try_parse_from(v) {
            Ok(T { c: C::Run(r) }) => r.cmd,
            other => panic!("parse {v:?}: {other:?}"),
        };
        assert_eq!(
            cmd(&["ustack", "run", "ls", "-l", "--all"]),
            ["ls", "-l", "--all"]
        );
        assert_eq!(
            cmd(&["ustack", "run", "--stats", "--", "--weird-name", "-v"]),
            ["--weird-name", "-v"]
        );
        assert_eq!(
            cmd(&["ustack", "run", "-p", "8080:80", "sh", "-c", "exit 3"]),
            ["sh", "-c", "exit 3"]
        );
        assert_eq!(cmd(&["ustack", "run", "--", "-"]), ["-"]);
        assert!(cmd(&["ustack", "run", "--stats"]).is_empty());
    }
}
