//! packetdrill adapter: ustack as a shared library for packetdrill's
//! `--so_filename` mode, so Linux's own TCP test scripts run against it.
//!
//! packetdrill loads this library and calls `packetdrill_interface_init`,
//! which fills `struct packetdrill_interface` (packetdrill.h): the socket
//! calls go to [`ustack_socket::ffi`] (the same C ABI the `LD_PRELOAD`
//! library uses), packets go in and out as IP datagrams through
//! `netdev_send`/`netdev_receive`, and `usleep`/`gettimeofday` run a
//! virtual clock:
//!
//! - `usleep(n)` moves the clock `n` µs on, firing the engine's timers at
//!   their own times on the way, so every packet carries the time it left.
//! - `netdev_receive` hands out the next packet the engine sent; with none
//!   queued it moves the clock to the engine's next timer and looks again
//!   (what the kernel's timers would have done while packetdrill waited).
//!   With no timer left it reports an empty packet, which packetdrill
//!   rejects: the script expected a packet the stack will never send.
//! - `gettimeofday` reads the clock and moves it 1 µs, so packetdrill's
//!   final busy-wait before an event ends.
//!
//! A script runs deterministically, as fast as the CPU allows, and
//! unaffected by the machine's load. The host side of the link answers
//! ARP itself; the engine sees an Ethernet link with a peer MAC address.
//!
//! `net.ipv4.tcp_*` sysctls (which the scripts set with backtick shell
//! lines, in the private network namespace the runner gives each script)
//! are read at every `socket()` and configure the engine the same way, see
//! [`ustack_socket::sysctl`].
//!
//! With packetdrill's `--mss=N` (on its command line or among the script's
//! option lines), packetdrill cooks each inbound TCP packet as a GSO packet
//! of `gso_size` N, which its `netdev_send` hands over without the size:
//! the adapter cuts such a datagram into its wire segments (as Linux's
//! `tcp_gso_segment`) and gives them to the stack together, whose GRO takes
//! them in as one segment of N-byte pieces, as Linux takes the GSO skb.
//!
//! packetdrill calls libc's `sendfile` on the live descriptors (the call is
//! not in the interface): the preloaded adapter answers it for its own.
//!
//! `--so_flags` may give `ip=A.B.C.D/LEN` (default `192.168.0.1/16`, what
//! packetdrill's IPv4 runs use as `--local_ip`), `ip6=ADDR/LEN` (an IPv6
//! address for `--ip_version=ipv6` runs, none by default; see [`ip6`])
//! and `mtu=N` (1500).
//!
//! packetdrill's `%{ python }%` blocks read `TCP_INFO` with the libc
//! `getsockopt` on the descriptor, outside the interface: when this library
//! is also `LD_PRELOAD`ed into packetdrill, its exported `getsockopt`
//! answers for our descriptors and passes every other call to libc.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

use libc::{
    iovec, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval, timezone,
};
use ustack_core::tcp::TcpConfig;
use ustack_core::time::{Duration, Instant};
use ustack_core::{Config, Limits};
use ustack_socket::ffi::{self, Ctx};
use ustack_socket::sysctl::{self, Tunables};
use ustack_socket::Host;
use ustack_wire::ethernet::MacAddr;
use ustack_wire::ipv4::Ipv4Cidr;
use ustack_wire::ipv6::Ipv6Cidr;

pub mod ip6;

pub mod qdisc;

pub mod route;

/// The engine's MAC address and the one it sees for every peer.
const OUR_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
const ETH_HDR: usize = 14;
/// The virtual clock's start: far from zero so that no time computation
/// in packetdrill or the engine meets an edge.
const EPOCH_MICROS: u64 = 1_000_000_000_000;
/// Our first descriptor: far above what packetdrill opens for itself
/// (script, `/proc` files), so the numbers never meet (packetdrill maps
/// the script's descriptors to whatever we return).
pub const FD_BASE: i32 = 1000;
/// Most timers `netdev_receive` fires looking for one packet.
const MAX_TIMERS_PER_RECEIVE: usize = 100_000;

type Sock3 = unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int) -> c_int;
type Addr = unsafe extern "C" fn(*mut c_void, c_int, *const sockaddr, socklen_t) -> c_int;
type AddrOut = unsafe extern "C" fn(*mut c_void, c_int, *mut sockaddr, *mut socklen_t) -> c_int;
type Fd1 = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type Fd2 = unsafe extern "C" fn(*mut c_void, c_int, c_int) -> c_int;
type Read = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, size_t) -> ssize_t;
type Readv = unsafe extern "C" fn(*mut c_void, c_int, *const iovec, c_int) -> ssize_t;
type Recv = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, size_t, c_int) -> ssize_t;
type RecvFrom = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    *mut c_void,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
type RecvMsg = unsafe extern "C" fn(*mut c_void, c_int, *mut msghdr, c_int) -> ssize_t;
type Write = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, size_t) -> ssize_t;
type Send = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, size_t, c_int) -> ssize_t;
type SendTo = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    *const c_void,
    size_t,
    c_int,
    *const sockaddr,
    socklen_t,
) -> ssize_t;
type SendMsg = unsafe extern "C" fn(*mut c_void, c_int, *const msghdr, c_int) -> ssize_t;
type Variadic = unsafe extern "C" fn(*mut c_void, c_int, c_int, ...) -> c_int;
type VariadicUl = unsafe extern "C" fn(*mut c_void, c_int, libc::c_ulong, ...) -> c_int;
type GetOpt =
    unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
type SetOpt =
    unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
type Poll = unsafe extern "C" fn(*mut c_void, *mut pollfd, nfds_t, c_int) -> c_int;
type NetSend = unsafe extern "C" fn(*mut c_void, *const c_void, size_t) -> c_int;
type NetRecv = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut size_t, *mut i64) -> c_int;
type Usleep = unsafe extern "C" fn(*mut c_void, libc::useconds_t) -> c_int;
type Gettimeofday = unsafe extern "C" fn(*mut c_void, *mut timeval, *mut timezone) -> c_int;
type EpollCreate = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type EpollCtl =
    unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
type EpollWait =
    unsafe extern "C" fn(*mut c_void, c_int, *mut libc::epoll_event, c_int, c_int) -> c_int;
type Pipe = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
type Splice = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    *mut libc::loff_t,
    c_int,
    *mut libc::loff_t,
    size_t,
    libc::c_uint,
) -> ssize_t;

/// `struct packetdrill_interface` (packetdrill.h), field for field.
#[repr(C)]
pub struct PacketdrillInterface {
    pub userdata: *mut c_void,
    pub free: Option<unsafe extern "C" fn(*mut c_void)>,
    pub socket: Option<Sock3>,
    pub bind: Option<Addr>,
    pub listen: Option<Fd2>,
    pub accept: Option<AddrOut>,
    pub connect: Option<Addr>,
    pub read: Option<Read>,
    pub readv: Option<Readv>,
    pub recv: Option<Recv>,
    pub recvfrom: Option<RecvFrom>,
    pub recvmsg: Option<RecvMsg>,
    pub write: Option<Write>,
    pub writev: Option<Readv>,
    pub send: Option<Send>,
    pub sendto: Option<SendTo>,
    pub sendmsg: Option<SendMsg>,
    pub fcntl: Option<Variadic>,
    pub ioctl: Option<VariadicUl>,
    pub close: Option<Fd1>,
    pub shutdown: Option<Fd2>,
    pub getsockopt: Option<GetOpt>,
    pub setsockopt: Option<SetOpt>,
    pub poll: Option<Poll>,
    pub netdev_send: Option<NetSend>,
    pub netdev_receive: Option<NetRecv>,
    pub usleep: Option<Usleep>,
    pub gettimeofday: Option<Gettimeofday>,
    pub epoll_create: Option<EpollCreate>,
    pub epoll_ctl: Option<EpollCtl>,
    pub epoll_wait: Option<EpollWait>,
    pub pipe: Option<Pipe>,
    pub splice: Option<Splice>,
}

/// The instance packetdrill runs (one per process), for the exported
/// `getsockopt` that packetdrill's code blocks reach through libc.
static CURRENT: AtomicPtr<Ctx> = AtomicPtr::new(std::ptr::null_mut());

/// `tun0`'s root qdisc drops every datagram (see [`qdisc`]), as of the
/// last look.
static LOCAL_DROP: AtomicBool = AtomicBool::new(false);

/// Look at `tun0`'s root qdisc (a script's `tc qdisc` line may have
/// changed it since the last event) and tell the engine whether its
/// datagrams leave (Linux: `NET_XMIT_DROP` from a full queue).
fn sync_local_drop(h: &mut Host) {
    static WATCH: OnceLock<Option<qdisc::Watch>> = OnceLock::new();
    let mut first = false;
    let watch = WATCH.get_or_init(|| {
        first = true;
        qdisc::Watch::new()
    });
    // Without a subscription, look every time.
    let look = first || watch.as_ref().is_none_or(|w| w.changed());
    if !look {
        return;
    }
    let on = qdisc::tun0_drops_all();
    if LOCAL_DROP.swap(on, Ordering::Relaxed) != on {
        h.set_local_drop(on);
    }
}

/// The script's remote address (packetdrill's `--remote_ip`), whose
/// route's metrics the engine follows (see [`route`]).
static REMOTE: OnceLock<Option<IpAddr>> = OnceLock::new();

/// Look at the namespace's route to the remote address (a script's `ip
/// route` line may have changed it since the last event) and give the
/// engine its metrics, as a kernel socket's route would carry them.
fn sync_route(h: &mut Host) {
    static WATCH: OnceLock<Option<qdisc::Watch>> = OnceLock::new();
    let Some(remote) = *REMOTE.get_or_init(|| None) else {
        return;
    };
    let mut first = false;
    let watch = WATCH.get_or_init(|| {
        first = true;
        qdisc::Watch::groups(route::RTMGRP_IPV4_ROUTE | route::RTMGRP_IPV6_ROUTE)
    });
    let look = first || watch.as_ref().is_none_or(|w| w.changed());
    if look {
        h.set_route_metrics(remote, route::metrics_to(remote));
    }
}

/// packetdrill's `--mss` (0: none): the `gso_size` with which it cooks its
/// inbound TCP packets as GSO packets (netdev.c, `local_netdev_send`).
static GSO_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Adapter options from `--so_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub mtu: usize,
    pub ip6: Option<Ipv6Cidr>,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags {
            addr: Ipv4Addr::new(192, 168, 0, 1),
            prefix_len: 16,
            mtu: 1500,
            ip6: None,
        }
    }
}

/// Parse `--so_flags` (`ip=A.B.C.D/LEN,mtu=N`, separated by commas or
/// spaces). Unknown or malformed words are an error.
pub fn parse_flags(s: &str) -> Result<Flags, String> {
    let mut f = Flags::default();
    for w in s.split([',', ' ']).filter(|w| !w.is_empty()) {
        match w.split_once('=') {
            Some(("ip", v)) => {
                let (a, l) = v.split_once('/').unwrap_or((v, "16"));
                f.addr = a.parse().map_err(|_| format!("bad address in {w:?}"))?;
                f.prefix_len = l
                    .parse()
                    .ok()
                    .filter(|l| *l <= 32)
                    .ok_or_else(|| format!("bad prefix length in {w:?}"))?;
            }
            Some(("ip6", v)) => f.ip6 = Some(ip6::parse_cidr6(v)?),
            Some(("mtu", v)) => {
                f.mtu = v
                    .parse()
                    .ok()
                    .filter(|m| (576..=65535).contains(m))
                    .ok_or_else(|| format!("bad mtu in {w:?}"))?;
            }
            _ => {
                return Err(format!(
                    "unknown so_flags word {w:?} (known: ip=A.B.C.D/LEN, ip6=ADDR/LEN, mtu=N)"
                ))
            }
        }
    }
    Ok(f)
}

/// The engine defaults a Linux 6.x host has before any sysctl: what the
/// scripts assume beyond the tunables they set.
pub fn linux_tcp_defaults() -> TcpConfig {
    TcpConfig {
        // Linux paces only for BBR or with the fq qdisc; a script that
        // installs fq gets it (`tunables`).
        pacing: false,
        // Linux's Nagle (Minshall's) and its ACK on a read that empties
        // the buffer after a short segment.
        nagle_minshall: true,
        ..TcpConfig::default()
    }
}

fn tunables() -> Tunables {
    let base = Tunables {
        tcp: linux_tcp_defaults(),
        ..Default::default()
    };
    let mut t = sysctl::read_dir(Path::new("/proc/sys/net/ipv4"), base);
    // With fq as tun0's root qdisc Linux paces every flow at its
    // sk_pacing_rate (`SK_PACING_FQ`), which the engine's pacing models.
    t.tcp.pacing = qdisc::fq_installed();
    t
}

/// A host configured for packetdrill's IPv4 runs.
pub fn new_host(flags: Flags) -> Host {
    let t = tunables();
    let gw =
        u32::from(flags.addr) & !0u32.checked_shr(u32::from(flags.prefix_len)).unwrap_or(0) | 0xfe;
    let cfg = Config {
        mac: MacAddr(OUR_MAC),
        addr: Ipv4Cidr {
            address: flags.addr,
            prefix_len: flags.prefix_len,
        },
        // Remote addresses are off-link (192.0.2.1 for 192.168.0.1/16):
        // route them through a gateway whose ARP the adapter answers.
        gateway: Some(Ipv4Addr::from(if gw == u32::from(flags.addr) {
            gw ^ 1
        } else {
            gw
        })),
        mtu: flags.mtu,
        tcp: t.tcp.clone(),
        limits: Limits::default(),
        secret: *b"ustack-packetdri",
        seed: 0x7061_636b_6574,
    };
    let mut h = Host::new(cfg, Instant::from_micros(EPOCH_MICROS));
    if let Some(c) = flags.ip6 {
        // parse_cidr6 took only interface addresses, and a new host has
        // room: this cannot fail.
        if let Err(e) = h.add_ipv6_address(c) {
            eprintln!("ustack-packetdrill: ip6={}: {e}", c.address);
        }
    }
    h.set_tunables(t);
    h.set_fd_base(FD_BASE);
    h
}

/// # Safety
/// `p` is the userdata given to packetdrill (a live `Ctx`) or null.
unsafe fn ctx<'a>(p: *mut c_void) -> Option<&'a Ctx> {
    // SAFETY: packetdrill passes back the pointer `init` stored.
    unsafe { (p as *const Ctx).as_ref() }
}

unsafe extern "C" fn pd_free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    let _ = CURRENT.compare_exchange(
        p as *mut Ctx,
        std::ptr::null_mut(),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    // SAFETY: made by Box::into_raw in init; packetdrill frees it once.
    drop(unsafe { Box::from_raw(p as *mut Ctx) });
}

unsafe extern "C" fn pd_socket(p: *mut c_void, domain: c_int, ty: c_int, proto: c_int) -> c_int {
    // SAFETY: packetdrill's userdata.
    if let Some(c) = unsafe { ctx(p) } {
        // The script's sysctl lines have run by now: take them. (Read
        // before locking: reading files calls `close`, which we interpose.)
        let t = tunables();
        let mut h = c.lock();
        h.set_tunables(t);
        sync_route(&mut h);
    }
    // SAFETY: forwarded.
    unsafe { ffi::ustack_socket(p, domain, ty, proto) }
}

/// Inject an IP datagram from packetdrill.
unsafe extern "C" fn pd_netdev_send(p: *mut c_void, buf: *const c_void, count: size_t) -> c_int {
    // SAFETY: packetdrill's userdata.
    let Some(c) = (unsafe { ctx(p) }) else {
        return -1;
    };
    if buf.is_null() || count == 0 || count > 65535 {
        return -1;
    }
    // SAFETY: packetdrill passes `count` readable bytes.
    let ip = unsafe { std::slice::from_raw_parts(buf as *const u8, count) };
    let gso = GSO_SIZE.load(Ordering::Relaxed);
    sync_route(&mut c.lock());
    match gso_segments(ip, gso).or_else(|| ip6::gso_segments(ip, gso)) {
        // A GSO packet (packetdrill's --mss): its wire segments, received
        // together, which the stack's GRO takes in as Linux takes the GSO
        // skb from its tun device, one segment of gso_size-sized pieces.
        Some(segs) => {
            let frames: Vec<Vec<u8>> = segs.iter().map(|s| eth_frame(s)).collect();
            c.lock().link_input_burst(&frames);
        }
        None => c.lock().link_input(&eth_frame(ip)),
    }
    c.notify();
    0
}

/// `ip` in an Ethernet frame from the peer.
fn eth_frame(ip: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(ETH_HDR + ip.len());
    frame.extend_from_slice(&OUR_MAC);
    frame.extend_from_slice(&PEER_MAC);
    let ethertype = match ip.first().map(|b| b >> 4) {
        Some(6) => ip6::ETHERTYPE_IPV6,
        _ => 0x0800,
    };
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(ip);
    frame
}

/// packetdrill's options for this run: its command line, then the option
/// lines of the script it runs (the script's leading `--` lines; comments
/// and blank lines may come between), which take precedence.
fn packetdrill_args() -> Vec<String> {
    let Ok(cmdline) = std::fs::read("/proc/self/cmdline") else {
        return Vec::new();
    };
    let mut args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if let Some(script) = args.iter().rev().find(|a| a.ends_with(".pkt")) {
        if let Ok(text) = std::fs::read_to_string(script) {
            let mut lines = Vec::new();
            for l in text.lines().map(str::trim) {
                if l.is_empty() || l.starts_with("//") {
                    continue;
                }
                if !l.starts_with("--") {
                    break;
                }
                lines.push(l.to_string());
            }
            args.extend(lines);
        }
    }
    args
}

/// The last value of packetdrill option `name` (`--name=VALUE`) in `args`.
fn option_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .rev()
        .find_map(|a| a.strip_prefix("--")?.strip_prefix(name)?.strip_prefix('='))
        .map(str::trim)
}

/// packetdrill's `--mss` for this run, else 0.
fn packetdrill_mss(args: &[String]) -> usize {
    option_value(args, "mss")
        .and_then(|v| v.parse().ok())
        .filter(|m| (1..=65535).contains(m))
        .unwrap_or(0)
}

/// packetdrill's `--remote_ip` for this run (without a prefix length), or
/// its default for the IP version (config.c: 192.0.2.1, 2001:DB8::1).
fn packetdrill_remote(args: &[String]) -> Option<IpAddr> {
    match option_value(args, "remote_ip") {
        Some(v) => v.split('/').next()?.parse().ok(),
        None if option_value(args, "ip_version") == Some("ipv6") => {
            Some(IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1u16]))
        }
        None => Some(IpAddr::from([192, 0, 2, 1])),
    }
}

/// The wire segments of an IPv4 TCP datagram carrying more than `gso`
/// bytes of payload, cut as Linux's `tcp_gso_segment` cuts a GSO skb:
/// `gso`-sized pieces, sequence numbers advanced, IP IDs counting up,
/// CWR on the first only, FIN and PSH on the last only, checksums
/// recomputed. None if `gso` is 0 or the datagram is not such a packet.
fn gso_segments(ip: &[u8], gso: usize) -> Option<Vec<Vec<u8>>> {
    use ustack_wire::checksum::{checksum, checksum_with, pseudo_header_v4};
    if gso == 0 || ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ihl < 20 || total > ip.len() || total < ihl + 20 {
        return None;
    }
    let tcp = &ip[ihl..total];
    let thl = usize::from(tcp[12] >> 4) * 4;
    if thl < 20 || thl > tcp.len() {
        return None;
    }
    let payload = &tcp[thl..];
    if payload.len() <= gso {
        return None;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let id = u16::from_be_bytes([ip[4], ip[5]]);
    let n = payload.len().div_ceil(gso);
    let mut out = Vec::with_capacity(n);
    for (i, piece) in payload.chunks(gso).enumerate() {
        let mut seg = Vec::with_capacity(ihl + thl + piece.len());
        seg.extend_from_slice(&ip[..ihl]);
        seg.extend_from_slice(&tcp[..thl]);
        seg.extend_from_slice(piece);
        let len = u16::try_from(seg.len()).ok()?;
        seg[2..4].copy_from_slice(&len.to_be_bytes());
        seg[4..6].copy_from_slice(&id.wrapping_add(i as u16).to_be_bytes());
        seg[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(&seg[..ihl]);
        seg[10..12].copy_from_slice(&c.to_be_bytes());
        let t = &mut seg[ihl..];
        let s = seq.wrapping_add((i * gso) as u32);
        t[4..8].copy_from_slice(&s.to_be_bytes());
        // FIN 0x01, PSH 0x08 on the last; CWR 0x80 on the first.
        if i + 1 < n {
            t[13] &= !(0x01 | 0x08);
        }
        if i > 0 {
            t[13] &= !0x80;
        }
        t[16..18].copy_from_slice(&[0, 0]);
        let tl = u16::try_from(t.len()).ok()?;
        let c = checksum_with(pseudo_header_v4(src, dst, 6, tl), t);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        out.push(seg);
    }
    Some(out)
}

/// An ARP reply to a request in `frame` (the peer owns every address).
fn arp_reply(frame: &[u8]) -> Option<Vec<u8>> {
    let a = frame.get(ETH_HDR..ETH_HDR + 28)?;
    // Ethernet/IPv4 request.
    if a[0..2] != [0, 1] || a[2..4] != [8, 0] || a[4] != 6 || a[5] != 4 || a[6..8] != [0, 1] {
        return None;
    }
    let (sha, spa, tpa) = (&a[8..14], &a[14..18], &a[24..28]);
    let mut r = Vec::with_capacity(42);
    r.extend_from_slice(sha);
    r.extend_from_slice(&PEER_MAC);
    r.extend_from_slice(&0x0806u16.to_be_bytes());
    r.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    r.extend_from_slice(&PEER_MAC);
    r.extend_from_slice(tpa);
    r.extend_from_slice(sha);
    r.extend_from_slice(spa);
    Some(r)
}

/// The next IP datagram the engine sent, moving the clock to the engine's
/// timers while none is queued.
unsafe extern "C" fn pd_netdev_receive(
    p: *mut c_void,
    buf: *mut c_void,
    count: *mut size_t,
    time: *mut i64,
) -> c_int {
    // SAFETY: packetdrill's userdata.
    let Some(c) = (unsafe { ctx(p) }) else {
        return -1;
    };
    if buf.is_null() || count.is_null() || time.is_null() {
        return -1;
    }
    // SAFETY: packetdrill passes a size_t with the buffer's size.
    let room = unsafe { *count };
    let mut h = c.settle(c.lock());
    sync_local_drop(&mut h);
    sync_route(&mut h);
    let mut timers = 0;
    loop {
        while let Some((at, frame)) = h.link_output() {
            if LOCAL_DROP.load(Ordering::Relaxed) {
                // The qdisc drops it.
                continue;
            }
            let deliver = match frame.get(12..14) {
                Some([0x08, 0x06]) => {
                    if let Some(r) = arp_reply(&frame) {
                        h.link_input(&r);
                    }
                    false
                }
                Some([0x08, 0x00]) => true,
                // IPv6: Neighbor Solicitations answered here, link control
                // kept from packetdrill (see ip6.rs).
                Some([0x86, 0xdd]) => match ip6::neighbour_advert(&frame, PEER_MAC) {
                    Some(r) => {
                        h.link_input(&r);
                        false
                    }
                    None => !ip6::is_link_control(&frame[ETH_HDR..]),
                },
                _ => false,
            };
            if deliver {
                let ip = &frame[ETH_HDR..];
                let n = ip.len().min(room);
                // SAFETY: buf holds `room` writable bytes; n <= room.
                unsafe {
                    std::ptr::copy_nonoverlapping(ip.as_ptr(), buf as *mut u8, n);
                    *count = n;
                    *time = at.total_micros() as i64;
                }
                drop(h);
                c.notify();
                return 0;
            }
        }
        let next = h.next_timer();
        match next {
            Some(t) if timers < MAX_TIMERS_PER_RECEIVE => {
                timers += 1;
                h = c.settle(h);
                let t = t.max(h.now());
                h.advance_to(t);
            }
            _ => {
                // Nothing will ever leave: an empty packet fails the script.
                // SAFETY: as above.
                unsafe {
                    *count = 0;
                    *time = h.now().total_micros() as i64;
                }
                drop(h);
                c.notify();
                return 0;
            }
        }
    }
}

unsafe extern "C" fn pd_usleep(p: *mut c_void, usec: libc::useconds_t) -> c_int {
    // SAFETY: packetdrill's userdata.
    let Some(c) = (unsafe { ctx(p) }) else {
        return -1;
    };
    {
        let mut h = c.settle(c.lock());
        sync_local_drop(&mut h);
        sync_route(&mut h);
        let t = h.now() + Duration::from_micros(u64::from(usec));
        h.advance_to(t);
        c.notify();
        // What the move completed is done before packetdrill's main
        // thread goes on (see `Ctx::quiesce`).
        drop(c.quiesce(h, QUIESCE_GUARD));
    }
    c.notify();
    0
}

/// Longest real time `usleep` waits for packetdrill's other thread to
/// finish what a completed blocking call left it to do (a guard, not a
/// timing: it finishes in microseconds).
const QUIESCE_GUARD: std::time::Duration = std::time::Duration::from_millis(500);

unsafe extern "C" fn pd_gettimeofday(
    p: *mut c_void,
    tv: *mut timeval,
    _tz: *mut timezone,
) -> c_int {
    // SAFETY: packetdrill's userdata.
    let Some(c) = (unsafe { ctx(p) }) else {
        return -1;
    };
    let us = {
        let mut h = c.settle(c.lock());
        sync_local_drop(&mut h);
        sync_route(&mut h);
        let now = h.now();
        h.advance_to(now + Duration::from_micros(1));
        now.total_micros()
    };
    c.notify();
    // SAFETY: packetdrill passes a timeval (or null).
    if let Some(tv) = unsafe { tv.as_mut() } {
        tv.tv_sec = (us / 1_000_000) as libc::time_t;
        tv.tv_usec = (us % 1_000_000) as libc::suseconds_t;
    }
    0
}

/// `splice`: packetdrill's interface passes each offset as a pointer to
/// the script's value, a `NULL` there as a pointer to 0
/// (`run_system_call.c`), where the kernel gets the `NULL` itself; the
/// call goes on with `NULL` for those, as the kernel sees it.
unsafe extern "C" fn pd_splice(
    p: *mut c_void,
    fd_in: c_int,
    off_in: *mut libc::loff_t,
    fd_out: c_int,
    off_out: *mut libc::loff_t,
    len: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    // SAFETY: packetdrill passes null or a pointer to its s64.
    let null_if_zero = |o: *mut libc::loff_t| match unsafe { o.as_ref() } {
        Some(0) | None => std::ptr::null_mut(),
        Some(_) => o,
    };
    let (off_in, off_out) = (null_if_zero(off_in), null_if_zero(off_out));
    // SAFETY: forwarded.
    unsafe { ffi::ustack_splice(p, fd_in, off_in, fd_out, off_out, len, flags) }
}

/// packetdrill's entry point.
///
/// # Safety
/// `ifc` points to a `struct packetdrill_interface`; `flags` is null or a
/// C string.
#[no_mangle]
pub unsafe extern "C" fn packetdrill_interface_init(
    flags: *const c_char,
    ifc: *mut PacketdrillInterface,
) {
    // SAFETY: packetdrill passes its struct.
    let Some(ifc) = (unsafe { ifc.as_mut() }) else {
        return;
    };
    let text = if flags.is_null() {
        String::new()
    } else {
        // SAFETY: a C string from packetdrill's command line.
        unsafe { CStr::from_ptr(flags) }
            .to_string_lossy()
            .into_owned()
    };
    let f = match parse_flags(&text) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("ustack-packetdrill: {e}");
            std::process::exit(2);
        }
    };
    let args = packetdrill_args();
    GSO_SIZE.store(packetdrill_mss(&args), Ordering::Relaxed);
    let _ = REMOTE.set(packetdrill_remote(&args));
    let ctx = Box::into_raw(Box::new(Ctx::new_virtual(new_host(f))));
    CURRENT.store(ctx, Ordering::Release);
    // SAFETY: the ffi functions have exactly packetdrill's signatures except
    // the variadic fcntl/ioctl, which take their one integer or pointer
    // argument as a fixed parameter: on the System V x86-64 and AArch64
    // ABIs a variadic call passes it in the same register.
    unsafe {
        *ifc = PacketdrillInterface {
            userdata: ctx as *mut c_void,
            free: Some(pd_free),
            socket: Some(pd_socket),
            bind: Some(ffi::ustack_bind),
            listen: Some(ffi::ustack_listen),
            accept: Some(ffi::ustack_accept),
            connect: Some(ffi::ustack_connect),
            read: Some(ffi::ustack_read),
            readv: Some(ffi::ustack_readv),
            recv: Some(ffi::ustack_recv),
            recvfrom: Some(ffi::ustack_recvfrom),
            recvmsg: Some(ffi::ustack_recvmsg),
            write: Some(ffi::ustack_write),
            writev: Some(ffi::ustack_writev),
            send: Some(ffi::ustack_send),
            sendto: Some(ffi::ustack_sendto),
            sendmsg: Some(ffi::ustack_sendmsg),
            fcntl: Some(std::mem::transmute::<
                unsafe extern "C" fn(*mut c_void, c_int, c_int, libc::c_long) -> c_int,
                Variadic,
            >(ffi::ustack_fcntl)),
            ioctl: Some(std::mem::transmute::<
                unsafe extern "C" fn(*mut c_void, c_int, libc::c_ulong, *mut c_void) -> c_int,
                VariadicUl,
            >(ffi::ustack_ioctl)),
            close: Some(ffi::ustack_close),
            shutdown: Some(ffi::ustack_shutdown),
            getsockopt: Some(ffi::ustack_getsockopt),
            setsockopt: Some(ffi::ustack_setsockopt),
            poll: Some(ffi::ustack_poll),
            netdev_send: Some(pd_netdev_send),
            netdev_receive: Some(pd_netdev_receive),
            usleep: Some(pd_usleep),
            gettimeofday: Some(pd_gettimeofday),
            epoll_create: Some(ffi::ustack_epoll_create),
            epoll_ctl: Some(ffi::ustack_epoll_ctl),
            epoll_wait: Some(ffi::ustack_epoll_wait),
            pipe: Some(ffi::ustack_pipe),
            splice: Some(pd_splice),
        };
    }
}

/// The running instance, as the `ctx` of the ffi calls, if `fd` is one of
/// its descriptors (the interposed libc calls below serve only those).
fn instance_owning(fd: c_int) -> Option<*mut c_void> {
    let cur = CURRENT.load(Ordering::Acquire);
    // SAFETY: CURRENT is null or the live instance (cleared before free).
    let c = unsafe { cur.as_ref() }?;
    c.lock().is_fd(fd).then_some(cur as *mut c_void)
}

/// libc's `getsockopt`, for descriptors that are not ours.
type LibcGetsockopt =
    unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;

/// `getsockopt(2)` interposed when this library is `LD_PRELOAD`ed into
/// packetdrill: answers for the running instance's descriptors (what the
/// `%{ python }%` blocks ask, `TCP_INFO` and friends) and passes anything
/// else to libc.
///
/// # Safety
/// As `getsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    if let Some(cur) = instance_owning(fd) {
        // SAFETY: forwarded.
        return unsafe { ffi::ustack_getsockopt(cur, fd, level, name, val, len) };
    }
    // SAFETY: dlsym with RTLD_NEXT and a C string; the symbol is libc's
    // getsockopt with this signature.
    unsafe {
        let sym = libc::dlsym(libc::RTLD_NEXT, c"getsockopt".as_ptr());
        if sym.is_null() {
            *libc::__errno_location() = libc::ENOSYS;
            return -1;
        }
        let real: LibcGetsockopt = std::mem::transmute::<*mut c_void, LibcGetsockopt>(sym);
        real(fd, level, name, val, len)
    }
}

type LibcClose = unsafe extern "C" fn(c_int) -> c_int;

/// `close(2)` interposed when this library is `LD_PRELOAD`ed into
/// packetdrill: at the end of a script packetdrill closes every socket
/// with libc's `close` on the descriptor the interface gave it; ours go to
/// the instance, anything else to libc.
///
/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if let Some(cur) = instance_owning(fd) {
        // SAFETY: forwarded.
        return unsafe { ffi::ustack_close(cur, fd) };
    }
    // SAFETY: dlsym with RTLD_NEXT and a C string; the symbol is libc's
    // close with this signature.
    unsafe {
        let sym = libc::dlsym(libc::RTLD_NEXT, c"close".as_ptr());
        if sym.is_null() {
            return libc::syscall(libc::SYS_close, fd) as c_int;
        }
        let real: LibcClose = std::mem::transmute::<*mut c_void, LibcClose>(sym);
        real(fd)
    }
}

type LibcSendfile = unsafe extern "C" fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t;

/// `sendfile(2)` interposed when this library is `LD_PRELOAD`ed into
/// packetdrill: packetdrill's `sendfile` calls libc on the live
/// descriptors (the call is not in `struct packetdrill_interface`); to one
/// of our sockets it goes to [`ffi::ustack_sendfile`], which reads the
/// kernel file and sends on the socket; anything else to libc.
///
/// # Safety
/// As `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { interposed_sendfile(c"sendfile", out_fd, in_fd, offset, count) }
}

/// `sendfile64`, the same call under glibc's large-file name.
///
/// # Safety
/// As `sendfile(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { interposed_sendfile(c"sendfile64", out_fd, in_fd, offset, count) }
}

/// # Safety
/// As `sendfile(2)`; `name` is libc's symbol for it.
unsafe fn interposed_sendfile(
    name: &CStr,
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    if let Some(cur) = instance_owning(out_fd) {
        // SAFETY: forwarded.
        return unsafe { ffi::ustack_sendfile(cur, out_fd, in_fd, offset, count) };
    }
    // SAFETY: dlsym with RTLD_NEXT and a C string; the symbol is libc's
    // sendfile with this signature (off_t is 64-bit on LP64).
    unsafe {
        let sym = libc::dlsym(libc::RTLD_NEXT, name.as_ptr());
        if sym.is_null() {
            *libc::__errno_location() = libc::ENOSYS;
            return -1;
        }
        let real: LibcSendfile = std::mem::transmute::<*mut c_void, LibcSendfile>(sym);
        real(out_fd, in_fd, offset, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_refuse() {
        assert_eq!(parse_flags("").unwrap(), Flags::default());
        let f = parse_flags("ip=10.1.2.3/24,mtu=9000").unwrap();
        assert_eq!(f.addr, Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!((f.prefix_len, f.mtu), (24, 9000));
        assert!(parse_flags("ip=10.1.2.300").is_err());
        assert!(parse_flags("mtu=10").is_err());
        assert!(parse_flags("bogus").is_err());
        let f = parse_flags("ip6=fd3d:a0b:17d6::1/16,mtu=1520").unwrap();
        assert_eq!(
            f.ip6,
            Some(ip6::parse_cidr6("fd3d:a0b:17d6::1/16").unwrap())
        );
        assert_eq!(f.mtu, 1520);
        assert!(parse_flags("ip6=fd00::1/200").is_err());
    }

    /// An IPv4 TCP datagram from 192.0.2.1:8080 to 192.168.0.1:80.
    fn datagram(seq: u32, flags: u8, payload: usize) -> Vec<u8> {
        use ustack_wire::checksum::{checksum, checksum_with, pseudo_header_v4};
        let total = 40 + payload;
        let mut d = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ];
        d.extend_from_slice(&[192, 0, 2, 1, 192, 168, 0, 1]);
        d.extend_from_slice(&8080u16.to_be_bytes());
        d.extend_from_slice(&80u16.to_be_bytes());
        d.extend_from_slice(&seq.to_be_bytes());
        d.extend_from_slice(&7u32.to_be_bytes());
        d.extend_from_slice(&[0x50, flags, 1, 0, 0, 0, 0, 0]);
        d.extend((0..payload).map(|i| i as u8));
        let c = checksum(&d[..20]);
        d[10..12].copy_from_slice(&c.to_be_bytes());
        let c = checksum_with(
            pseudo_header_v4(
                Ipv4Addr::new(192, 0, 2, 1),
                Ipv4Addr::new(192, 168, 0, 1),
                6,
                (20 + payload) as u16,
            ),
            &d[20..],
        );
        d[36..38].copy_from_slice(&c.to_be_bytes());
        d
    }

    #[test]
    fn gso_packets_are_cut_as_linux_cuts_them() {
        use ustack_wire::checksum::{checksum, checksum_with, pseudo_header_v4};
        // PSH|ACK|CWR, 2500 bytes, gso_size 1000: 1000, 1000, 500.
        let d = datagram(1000, 0x80 | 0x10 | 0x08, 2500);
        assert!(gso_segments(&d, 0).is_none(), "no --mss: as it came");
        assert!(gso_segments(&d, 2500).is_none(), "not more than gso_size");
        assert!(gso_segments(&d[..30], 1000).is_none(), "truncated");
        let segs = gso_segments(&d, 1000).unwrap();
        assert_eq!(segs.len(), 3);
        let mut data = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let len = usize::from(u16::from_be_bytes([s[2], s[3]]));
            assert_eq!(len, s.len());
            assert_eq!(len - 40, if i < 2 { 1000 } else { 500 });
            assert_eq!(u16::from_be_bytes([s[4], s[5]]), 0x1234 + i as u16);
            assert_eq!(checksum(&s[..20]), 0, "IP checksum");
            let ph = pseudo_header_v4(
                Ipv4Addr::new(192, 0, 2, 1),
                Ipv4Addr::new(192, 168, 0, 1),
                6,
                (len - 20) as u16,
            );
            assert_eq!(checksum_with(ph, &s[20..]), 0, "TCP checksum");
            let seq = u32::from_be_bytes([s[24], s[25], s[26], s[27]]);
            assert_eq!(seq, 1000 + 1000 * i as u32);
            let flags = s[33];
            assert_eq!(flags & 0x10, 0x10, "ACK on all");
            assert_eq!(flags & 0x08 != 0, i == 2, "PSH on the last only");
            assert_eq!(flags & 0x80 != 0, i == 0, "CWR on the first only");
            data.extend_from_slice(&s[40..]);
        }
        assert_eq!(data, &d[40..]);
        // Not TCP: as it came.
        let mut udp = d.clone();
        udp[9] = 17;
        assert!(gso_segments(&udp, 1000).is_none());
    }

    #[test]
    fn arp_requests_are_answered_for_any_address() {
        let mut req = vec![0xff; 6];
        req.extend_from_slice(&OUR_MAC);
        req.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        req.extend_from_slice(&OUR_MAC);
        req.extend_from_slice(&[192, 168, 0, 1]);
        req.extend_from_slice(&[0; 6]);
        req.extend_from_slice(&[192, 168, 0, 254]);
        let r = arp_reply(&req).unwrap();
        assert_eq!(&r[..6], &OUR_MAC);
        assert_eq!(&r[20..22], &[0, 2]);
        assert_eq!(&r[28..32], &[192, 168, 0, 254]);
        assert!(arp_reply(&req[..30]).is_none());
    }
}
