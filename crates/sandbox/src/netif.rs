//! Interface setup inside the sandbox's network namespace: loopback up, the
//! TAP created with its address, netmask, MTU, and the default route.
//!
//! Everything here is called in the forked child before `exec`, so it uses
//! only system calls on pre-built values: no allocation, no locks.

use std::io;
use std::os::fd::RawFd;

use crate::sys::cvt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
const SIOCSIFADDR: libc::c_ulong = 0x8916;
const SIOCSIFNETMASK: libc::c_ulong = 0x891c;
const SIOCGIFMTU: libc::c_ulong = 0x8921;
const SIOCSIFMTU: libc::c_ulong = 0x8922;
const SIOCADDRT: libc::c_ulong = 0x890b;
const RTF_UP: libc::c_ushort = 0x0001;
const RTF_GATEWAY: libc::c_ushort = 0x0002;

/// `struct ifreq`: a 16-byte name followed by a 24-byte union.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(crate) struct IfReq {
    pub(crate) name: [u8; 16],
    pub(crate) data: [u8; 24],
}

impl IfReq {
    pub(crate) fn new(name: &[u8; 16]) -> IfReq {
        IfReq {
            name: *name,
            data: [0; 24],
        }
    }
    fn set_short(&mut self, v: libc::c_short) {
        self.data = [0; 24];
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }
    fn short(&self) -> libc::c_short {
        libc::c_short::from_ne_bytes([self.data[0], self.data[1]])
    }
    fn set_int(&mut self, v: libc::c_int) {
        self.data = [0; 24];
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }
    fn set_ipv4(&mut self, addr: [u8; 4]) {
        self.data = [0; 24];
        let family = libc::AF_INET as libc::sa_family_t;
        self.data[..2].copy_from_slice(&family.to_ne_bytes());
        self.data[4..8].copy_from_slice(&addr);
    }
}

/// glibc/Linux `struct rtentry` (for `SIOCADDRT`).
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: libc::sockaddr,
    rt_gateway: libc::sockaddr,
    rt_genmask: libc::sockaddr,
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_pad4: *mut libc::c_void,
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

fn sockaddr_v4(addr: [u8; 4]) -> libc::sockaddr {
    // SAFETY: sockaddr is plain old data; all-zero is valid.
    let mut sa: libc::sockaddr = unsafe { std::mem::zeroed() };
    sa.sa_family = libc::AF_INET as libc::sa_family_t;
    // sockaddr_in: port (2 bytes) then address (4 bytes) in sa_data.
    for (i, b) in addr.iter().enumerate() {
        sa.sa_data[2 + i] = *b as libc::c_char;
    }
    sa
}

fn ioctl_ifreq(fd: RawFd, req: libc::c_ulong, ifr: &mut IfReq) -> io::Result<()> {
    // SAFETY: `ifr` is a valid, aligned 40-byte `struct ifreq` for the duration
    // of the call; every request used reads/writes only within it.
    cvt(unsafe { libc::ioctl(fd, req as _, ifr as *mut IfReq) }).map(|_| ())
}

/// An `AF_INET` datagram socket used as an ioctl handle in the current netns.
pub(crate) fn ctl_socket() -> io::Result<RawFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

/// Set `IFF_UP` on interface `name`.
pub(crate) fn set_up(ctl: RawFd, name: &[u8; 16]) -> io::Result<()> {
    let mut req = IfReq::new(name);
    ioctl_ifreq(ctl, SIOCGIFFLAGS, &mut req)?;
    let flags = req.short() | libc::IFF_UP as libc::c_short;
    req.set_short(flags);
    ioctl_ifreq(ctl, SIOCSIFFLAGS, &mut req)
}

/// Open `/dev/net/tun` and attach/create the TAP `name` (`IFF_TAP|IFF_NO_PI`,
/// and with `vnet` `IFF_VNET_HDR` plus checksum and TSO offloads),
/// non-blocking and close-on-exec. Only system calls: safe between `fork`
/// and `exec`.
pub(crate) fn open_tap(name: &[u8; 16], vnet: bool) -> io::Result<RawFd> {
    const PATH: &[u8] = b"/dev/net/tun\0";
    // SAFETY: PATH is NUL-terminated; the result is checked.
    let fd = cvt(unsafe {
        libc::open(
            PATH.as_ptr().cast(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    })?;
    let mut req = IfReq::new(name);
    let vnet_flag = if vnet { IFF_VNET_HDR } else { 0 };
    req.set_short(IFF_TAP | IFF_NO_PI | vnet_flag);
    if let Err(e) = ioctl_ifreq(fd, TUNSETIFF, &mut req) {
        // SAFETY: `fd` was opened above and is not used after this.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    if vnet {
        // Checksum offload, TSO/GSO and USO for the guest's kernel: it
        // then hands ustack 64 KB super-frames with partial checksums.
        if let Err(e) = ustack_dev::tap::set_tap_offloads(fd) {
            // SAFETY: `fd` was opened above and is not used after this.
            unsafe { libc::close(fd) };
            return Err(e);
        }
    }
    Ok(fd)
}

/// The MTU of interface `name`.
pub(crate) fn get_mtu(ctl: RawFd, name: &[u8; 16]) -> io::Result<usize> {
    let mut req = IfReq::new(name);
    ioctl_ifreq(ctl, SIOCGIFMTU, &mut req)?;
    let mtu = libc::c_int::from_ne_bytes([req.data[0], req.data[1], req.data[2], req.data[3]]);
    Ok(usize::try_from(mtu).unwrap_or(1500))
}

/// Address, netmask and MTU of interface `name`.
pub(crate) fn configure(
    ctl: RawFd,
    name: &[u8; 16],
    addr: [u8; 4],
    netmask: [u8; 4],
    mtu: i32,
) -> io::Result<()> {
    let mut req = IfReq::new(name);
    req.set_int(mtu);
    ioctl_ifreq(ctl, SIOCSIFMTU, &mut req)?;
    req.set_ipv4(addr);
    ioctl_ifreq(ctl, SIOCSIFADDR, &mut req)?;
    req.set_ipv4(netmask);
    ioctl_ifreq(ctl, SIOCSIFNETMASK, &mut req)
}

/// `ip route add default via gateway dev name`.
pub(crate) fn add_default_route(ctl: RawFd, name: &[u8; 16], gateway: [u8; 4]) -> io::Result<()> {
    let mut dev = *name;
    let mut rt = RtEntry {
        rt_pad1: 0,
        rt_dst: sockaddr_v4([0; 4]),
        rt_gateway: sockaddr_v4(gateway),
        rt_genmask: sockaddr_v4([0; 4]),
        rt_flags: RTF_UP | RTF_GATEWAY,
        rt_pad2: 0,
        rt_pad3: 0,
        rt_pad4: std::ptr::null_mut(),
        rt_metric: 0,
        rt_dev: dev.as_mut_ptr().cast(),
        rt_mtu: 0,
        rt_window: 0,
        rt_irtt: 0,
    };
    // SAFETY: `rt` is a valid `struct rtentry`; `rt_dev` points at the
    // NUL-terminated name in `dev`, which outlives the call.
    cvt(unsafe { libc::ioctl(ctl, SIOCADDRT as _, &mut rt as *mut RtEntry) }).map(|_| ())
}

/// Linux `struct in6_rtmsg` (for `SIOCADDRT` on an `AF_INET6` socket; the
/// libc crate keeps its fields private).
#[repr(C)]
struct In6RtMsg {
    dst: [u8; 16],
    src: [u8; 16],
    gateway: [u8; 16],
    rt_type: u32,
    dst_len: u16,
    src_len: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

const SIOCGIFINDEX: libc::c_ulong = 0x8933;

/// An `AF_INET6` datagram socket used as an ioctl handle in the current
/// netns (`EAFNOSUPPORT` when the kernel has no IPv6).
pub(crate) fn ctl_socket6() -> io::Result<RawFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    cvt(unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

fn ifindex(ctl: RawFd, name: &[u8; 16]) -> io::Result<libc::c_int> {
    let mut req = IfReq::new(name);
    ioctl_ifreq(ctl, SIOCGIFINDEX, &mut req)?;
    Ok(libc::c_int::from_ne_bytes([
        req.data[0],
        req.data[1],
        req.data[2],
        req.data[3],
    ]))
}

/// `ip -6 addr add ADDR/PREFIX dev name` (`ctl` an `AF_INET6` socket).
pub(crate) fn add_address6(
    ctl: RawFd,
    name: &[u8; 16],
    addr: [u8; 16],
    prefix_len: u8,
) -> io::Result<()> {
    let req = libc::in6_ifreq {
        ifr6_addr: libc::in6_addr { s6_addr: addr },
        ifr6_prefixlen: u32::from(prefix_len),
        ifr6_ifindex: ifindex(ctl, name)?,
    };
    // SAFETY: `req` is a valid `struct in6_ifreq` for the duration of the
    // call, which only reads it.
    cvt(unsafe { libc::ioctl(ctl, SIOCSIFADDR as _, &req as *const libc::in6_ifreq) }).map(|_| ())
}

/// `ip -6 route add default via gateway dev name` (`ctl` an `AF_INET6`
/// socket).
pub(crate) fn add_default_route6(ctl: RawFd, name: &[u8; 16], gateway: [u8; 16]) -> io::Result<()> {
    let mut rt = In6RtMsg {
        dst: [0; 16],
        src: [0; 16],
        gateway,
        rt_type: 0,
        dst_len: 0,
        src_len: 0,
        metric: 1,
        info: 0,
        flags: u32::from(RTF_UP | RTF_GATEWAY),
        ifindex: ifindex(ctl, name)?,
    };
    // SAFETY: `rt` is a valid `struct in6_rtmsg` for the duration of the
    // call.
    cvt(unsafe { libc::ioctl(ctl, SIOCADDRT as _, &mut rt as *mut In6RtMsg) }).map(|_| ())
}

/// Wait (at most `tries` times `step_ms`) until the IPv6 address `addr`
/// is usable: a socket can bind to it. The kernel keeps a new address
/// tentative until it sees the link ready (its link-watch event runs
/// asynchronously, later under load), even without DAD; a program
/// started before then finds no usable source address (Linux then picks
/// `::1`, whose packets the other end rightly drops). Returns whether it
/// became usable. Only system calls: safe between `fork` and `exec`.
pub(crate) fn wait_address6_usable(addr: [u8; 16], tries: u32, step_ms: u64) -> bool {
    // SAFETY: plain socket(2) call; the result is checked.
    let Ok(fd) =
        cvt(unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
    else {
        return false;
    };
    // SAFETY: sockaddr_in6 is plain old data; all-zero is valid.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    sa.sin6_addr.s6_addr = addr;
    let mut ok = false;
    for _ in 0..tries {
        // SAFETY: `sa` is a valid sockaddr_in6 of the given length.
        let rc = unsafe {
            libc::bind(
                fd,
                (&sa as *const libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            ok = true;
            break;
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: (step_ms * 1_000_000) as libc::c_long,
        };
        // SAFETY: `ts` is a valid timespec; the remainder is not wanted.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
    // SAFETY: `fd` was opened above and is not used after this.
    unsafe { libc::close(fd) };
    ok
}

/// Write `value` to the (NUL-terminated) `path`, e.g. a sysctl file.
/// Only system calls: safe between `fork` and `exec`.
pub(crate) fn write_sysctl(path: &[u8], value: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated (built before the fork); the
    // result is checked.
    let fd = cvt(unsafe { libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC) })?;
    // SAFETY: `value` is valid for reads of its length.
    let n = unsafe { libc::write(fd, value.as_ptr().cast(), value.len()) };
    let e = io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is not used after this.
    unsafe { libc::close(fd) };
    if n < 0 {
        return Err(e);
    }
    Ok(())
}

/// Encode an interface name as a NUL-padded 16-byte array, checking it.
pub fn encode_ifname(name: &str) -> io::Result<[u8; 16]> {
    let bytes = name.as_bytes();
    let bad = bytes.is_empty()
        || bytes.len() > 15
        || name == "."
        || name == ".."
        || bytes
            .iter()
            .any(|&b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace());
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name {name:?}: 1-15 bytes, no '/', ':', whitespace or NUL"),
        ));
    }
    let mut out = [0u8; 16];
    out[..bytes.len()].copy_from_slice(bytes);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_encoding_checks() {
        let n = encode_ifname("eth0").map_err(|e| e.to_string());
        assert_eq!(n.as_ref().map(|a| &a[..5]), Ok(&b"eth0\0"[..]));
        assert!(encode_ifname("").is_err());
        assert!(encode_ifname("a/b").is_err());
        assert!(encode_ifname("abcdefghijklmnop").is_err());
        assert!(encode_ifname("abcdefghijklmno").is_ok());
    }

    #[test]
    fn rtentry_has_the_kernel_layout() {
        // x86_64/aarch64 glibc: sizeof(struct rtentry) == 120.
        if std::mem::size_of::<usize>() == 8 {
            assert_eq!(std::mem::size_of::<RtEntry>(), 120);
            // linux/ipv6_route.h: sizeof(struct in6_rtmsg) == 80.
            assert_eq!(std::mem::size_of::<In6RtMsg>(), 80);
        }
    }
}
