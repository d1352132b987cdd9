//! Linux TAP device (`/dev/net/tun` with `IFF_TAP | IFF_NO_PI`), non-blocking,
//! plus [`HostSide`] to configure the kernel's end of the link without
//! shelling out (ioctls on an `AF_INET` socket; netlink to change namespace).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use crate::Device;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `TUN_F_CSUM`: we accept partial checksums from the kernel.
pub const TUN_F_CSUM: libc::c_ulong = 0x01;
/// `TUN_F_TSO4`: TCP/IPv4 GSO super-frames.
pub const TUN_F_TSO4: libc::c_ulong = 0x02;
/// `TUN_F_TSO6`: TCP/IPv6 GSO super-frames.
pub const TUN_F_TSO6: libc::c_ulong = 0x04;
/// `TUN_F_USO4` / `TUN_F_USO6` (Linux 6.2+, only together): UDP GSO
/// super-datagrams, which the stack cuts into datagrams.
pub const TUN_F_USO4: libc::c_ulong = 0x20;
pub const TUN_F_USO6: libc::c_ulong = 0x40;
/// Checksum offload and TCP GSO over both IP versions.
const TUN_OFFLOADS: libc::c_ulong = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
const TUN_USO: libc::c_ulong = TUN_F_USO4 | TUN_F_USO6;

/// Set the offloads ustack takes from the kernel on a TAP opened with
/// `IFF_VNET_HDR`: checksum offload and TCP GSO over IPv4 and IPv6
/// (`TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6`), and UDP GSO where the kernel
/// has it (an older kernel refuses the USO flags: retried without).
/// Returns whether USO is on.
pub fn set_tap_offloads(fd: std::os::fd::RawFd) -> io::Result<bool> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; the caller owns `fd`.
    let r = unsafe { libc::ioctl(fd, TUNSETOFFLOAD as _, TUN_OFFLOADS | TUN_USO) };
    if r == 0 {
        return Ok(true);
    }
    // SAFETY: as above.
    let r = unsafe { libc::ioctl(fd, TUNSETOFFLOAD as _, TUN_OFFLOADS) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(false)
}

const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
const SIOCSIFADDR: libc::c_ulong = 0x8916;
const SIOCSIFNETMASK: libc::c_ulong = 0x891c;
const SIOCGIFMTU: libc::c_ulong = 0x8921;
const SIOCSIFMTU: libc::c_ulong = 0x8922;
const SIOCGIFHWADDR: libc::c_ulong = 0x8927;

/// Longest interface name (IFNAMSIZ - 1 for the terminating NUL).
pub const MAX_NAME_LEN: usize = 15;

/// `struct ifreq`: a 16-byte name followed by a 24-byte union.
#[repr(C, align(8))]
struct IfReq {
    name: [u8; 16],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> IfReq {
        let mut req = IfReq {
            name: [0; 16],
            data: [0; 24],
        };
        let bytes = name.as_bytes();
        let n = bytes.len().min(MAX_NAME_LEN);
        req.name[..n].copy_from_slice(&bytes[..n]);
        req
    }
    fn name(&self) -> String {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.name.len());
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
    fn set_short(&mut self, v: libc::c_short) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }
    fn short(&self) -> libc::c_short {
        libc::c_short::from_ne_bytes([self.data[0], self.data[1]])
    }
    fn set_int(&mut self, v: libc::c_int) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }
    fn int(&self) -> libc::c_int {
        libc::c_int::from_ne_bytes([self.data[0], self.data[1], self.data[2], self.data[3]])
    }
    /// Store a `struct sockaddr_in` (family, port 0, address).
    fn set_ipv4(&mut self, addr: Ipv4Addr) {
        self.data = [0; 24];
        let family = libc::AF_INET as libc::sa_family_t;
        self.data[..2].copy_from_slice(&family.to_ne_bytes());
        self.data[4..8].copy_from_slice(&addr.octets());
    }
}

fn check_name(name: &str) -> io::Result<()> {
    let bad = name.len() > MAX_NAME_LEN
        || name == "."
        || name == ".."
        || name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace());
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "invalid interface name {name:?}: at most {MAX_NAME_LEN} bytes, \
                 no '/', ':', whitespace or NUL"
            ),
        ));
    }
    Ok(())
}

/// `ioctl(fd, req, ifreq)`.
fn ifreq_ioctl(fd: RawFd, req: libc::c_ulong, ifr: &mut IfReq) -> io::Result<()> {
    // SAFETY: `ifr` is a valid, properly aligned `struct ifreq` (40 bytes) that
    // lives across the call; every request used here reads/writes only within it.
    let rc = unsafe { libc::ioctl(fd, req as _, ifr as *mut IfReq) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Read one Ethernet frame from a non-blocking TAP descriptor (`IFF_NO_PI`:
/// one read is one frame). `Ok(None)` when no frame is queued; `EINTR` is
/// retried. Shared by [`Tap`] and other holders of a TAP descriptor (the
/// sandbox's, received from its child).
pub fn read_frame(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; `fd` is a
        // live descriptor borrowed for the duration of the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Write one Ethernet frame to a TAP descriptor; `EINTR` is retried. Every
/// other error is returned as is, including `EIO`, which the kernel gives
/// while the interface is down (see [`is_link_down`]): what to do then is the
/// caller's policy ([`Tap`] reports it, the sandbox drops the frame). A write
/// to a TAP takes the whole frame or fails; a shorter count, which the
/// kernel never gives, is an error rather than a frame taken as sent.
pub fn write_frame(fd: BorrowedFd<'_>, frame: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `frame` is valid for reads of `frame.len()` bytes; `fd` is a
        // live descriptor borrowed for the duration of the call.
        let n = unsafe { libc::write(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
        if n >= 0 {
            return check_whole(n, frame.len());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Write one Ethernet frame given as consecutive parts (the frame is their
/// concatenation) to a TAP descriptor with one `writev`, so that the parts
/// are copied only once, by the kernel: what [`write_frame`] does for the
/// concatenation, with the same errors. A single part, or a frame of no
/// bytes, goes through [`write_frame`]; more than [`crate::IOV_MAX`] parts
/// (more than `writev` takes) are gathered and written with it.
pub fn write_frame_vectored(fd: BorrowedFd<'_>, parts: &[&[u8]]) -> io::Result<()> {
    let len = crate::parts_len(parts);
    match parts {
        [one] => return write_frame(fd, one),
        _ if len == 0 => return write_frame(fd, &[]),
        _ if parts.len() > crate::IOV_MAX => return write_frame(fd, &parts.concat()),
        _ => {}
    }
    crate::with_iovecs(parts, |iov| {
        // At most IOV_MAX (checked above).
        let count = libc::c_int::try_from(iov.len()).unwrap_or(libc::c_int::MAX);
        loop {
            // SAFETY: `IoSlice` is ABI-compatible with `struct iovec` on
            // Unix (std guarantees it); each of the `count` entries points to
            // a part borrowed for the duration of the call, valid for reads
            // of its length. `fd` is a live descriptor borrowed likewise.
            let n = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr().cast(), count) };
            if n >= 0 {
                return check_whole(n, len);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    })
}

/// The result of a write of a `len`-byte frame that returned `n >= 0`.
fn check_whole(n: isize, len: usize) -> io::Result<()> {
    if usize::try_from(n).is_ok_and(|n| n == len) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "short write to a TAP: {n} of {len} bytes (the frame is lost)"
        )))
    }
}

/// Whether an error from [`write_frame`] means the TAP interface is down
/// (`EIO`).
pub fn is_link_down(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EIO)
}

/// A Linux TAP device opened non-blocking with `IFF_TAP | IFF_NO_PI`: each
/// read/write is exactly one Ethernet frame.
///
/// The device is not persistent: closing the descriptor (dropping the `Tap`)
/// removes the interface.
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
    mtu: usize,
    vnet: bool,
    uso: bool,
}

impl Tap {
    /// Create (or attach to) the TAP interface `name`. An empty name lets the
    /// kernel pick one (`tap0`, ...); a name with `%d` is a template.
    pub fn create(name: &str) -> io::Result<Tap> {
        Self::create_with(name, false)
    }

    /// [`Tap::create`]; with `vnet`, every frame carries a virtio-net
    /// header (`IFF_VNET_HDR`) and the kernel side gets checksum offload
    /// and TSO/GSO (`TUNSETOFFLOAD`): it then sends 64 KB super-frames with
    /// partial checksums, and takes them (see [`crate::Offloads`]).
    pub fn create_with(name: &str, vnet: bool) -> io::Result<Tap> {
        check_name(name)?;
        let path = CString::new("/dev/net/tun").map_err(io::Error::other)?;
        // SAFETY: `path` is a valid NUL-terminated string; open has no other
        // memory preconditions. The returned fd is checked before use.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => io::Error::new(
                    io::ErrorKind::NotFound,
                    "no /dev/net/tun: load the tun module or run in a container with the device",
                ),
                Some(libc::EACCES) | Some(libc::EPERM) => io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "permission denied opening /dev/net/tun: run as root or with CAP_NET_ADMIN",
                ),
                _ => io::Error::new(e.kind(), format!("cannot open /dev/net/tun: {e}")),
            });
        }
        // SAFETY: `raw` is a freshly opened descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq::new(name);
        let vnet_flag = if vnet { IFF_VNET_HDR } else { 0 };
        req.set_short(IFF_TAP | IFF_NO_PI | vnet_flag);
        if let Err(e) = ifreq_ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) {
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "permission denied creating TAP {name}: run as root or with CAP_NET_ADMIN"
                    ),
                ),
                Some(libc::EBUSY) => io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("TAP name {name} is in use"),
                ),
                Some(libc::EINVAL) => io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cannot create TAP {name}: the name belongs to a non-TAP interface or is invalid"),
                ),
                _ => io::Error::new(e.kind(), format!("cannot create TAP {name}: {e}")),
            });
        }
        let name = req.name();
        let mut uso = false;
        if vnet {
            uso = set_tap_offloads(fd.as_raw_fd()).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot set offloads on TAP {name}: {e}"))
            })?;
        }
        let mtu = HostSide::new(&name).and_then(|h| h.mtu()).unwrap_or(1500);
        Ok(Tap {
            fd,
            name,
            mtu,
            vnet,
            uso,
        })
    }

    /// Whether the kernel took `TUN_F_USO4 | TUN_F_USO6` (Linux 6.2+): it
    /// may then hand us UDP GSO super-datagrams over either IP version.
    /// Always false without the virtio-net header.
    pub fn uso(&self) -> bool {
        self.uso
    }

    /// The interface name the kernel gave the device.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle to configure the kernel side of this TAP (in the caller's
    /// current network namespace).
    pub fn host(&self) -> io::Result<HostSide> {
        HostSide::new(&self.name)
    }

    /// Set the interface MTU (kernel side) and the MTU this device reports.
    pub fn set_mtu(&mut self, mtu: usize) -> io::Result<()> {
        self.host()?.set_mtu(mtu)?;
        self.mtu = mtu;
        Ok(())
    }

    /// A write error as the runtime understands it: `EIO` (the interface
    /// is down) becomes `NotConnected` with a hint.
    fn tx_error(&self, e: io::Error) -> io::Error {
        if is_link_down(&e) {
            io::Error::new(
                io::ErrorKind::NotConnected,
                format!("TAP {} is down (EIO): bring the interface up", self.name),
            )
        } else {
            e
        }
    }
}

impl Device for Tap {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        read_frame(self.fd.as_fd(), buf)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        write_frame(self.fd.as_fd(), frame).map_err(|e| self.tx_error(e))
    }

    /// One `writev` of the parts ([`write_frame_vectored`]).
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        write_frame_vectored(self.fd.as_fd(), parts).map_err(|e| self.tx_error(e))
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> Option<[u8; 6]> {
        None
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn offloads(&self) -> crate::Offloads {
        crate::Offloads {
            vnet_hdr: self.vnet,
            tso4: self.vnet,
            tso6: self.vnet,
            tx_csum: self.vnet,
        }
    }

    /// A second descriptor of the same TAP (`dup`: the same open file, so
    /// the same queue, non-blocking mode and readiness): the kernel lets one
    /// thread read it while another writes the first.
    fn split_rx(&mut self) -> Option<Box<dyn crate::RxHalf>> {
        let fd = self.fd.try_clone().ok()?;
        Some(Box::new(TapRx { fd }))
    }
}

/// The receive half of a [`Tap`] ([`Device::split_rx`]).
struct TapRx {
    fd: OwnedFd,
}

impl crate::RxHalf for TapRx {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        read_frame(self.fd.as_fd(), buf)
    }
}

/// Kernel-side configuration of a network interface by name, in the network
/// namespace of the calling thread.
#[derive(Debug)]
pub struct HostSide {
    name: String,
    sock: OwnedFd,
}

impl HostSide {
    /// A configuration handle for interface `name` (not checked to exist).
    pub fn new(name: &str) -> io::Result<HostSide> {
        check_name(name)?;
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(HostSide {
            name: name.to_owned(),
            sock,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn ioctl(&self, what: &str, req: libc::c_ulong, ifr: &mut IfReq) -> io::Result<()> {
        ifreq_ioctl(self.sock.as_raw_fd(), req, ifr).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => ": run as root or with CAP_NET_ADMIN",
                Some(libc::ENODEV) => ": no such interface in this network namespace",
                _ => "",
            };
            io::Error::new(e.kind(), format!("{what} on {}: {e}{hint}", self.name))
        })
    }

    /// Set the interface's IPv4 address and prefix length (netmask).
    pub fn set_ipv4(&self, addr: Ipv4Addr, prefix_len: u8) -> io::Result<()> {
        if prefix_len > 32 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("prefix length {prefix_len} > 32"),
            ));
        }
        let mut req = IfReq::new(&self.name);
        req.set_ipv4(addr);
        self.ioctl("setting address", SIOCSIFADDR, &mut req)?;
        let mask = if prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix_len))
        };
        let mut req = IfReq::new(&self.name);
        req.set_ipv4(Ipv4Addr::from(mask));
        self.ioctl("setting netmask", SIOCSIFNETMASK, &mut req)
    }

    /// The interface MTU.
    pub fn mtu(&self) -> io::Result<usize> {
        let mut req = IfReq::new(&self.name);
        self.ioctl("reading MTU", SIOCGIFMTU, &mut req)?;
        Ok(usize::try_from(req.int()).unwrap_or(0))
    }

    /// Set the interface MTU.
    pub fn set_mtu(&self, mtu: usize) -> io::Result<()> {
        let v = libc::c_int::try_from(mtu)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "MTU too large"))?;
        let mut req = IfReq::new(&self.name);
        req.set_int(v);
        self.ioctl("setting MTU", SIOCSIFMTU, &mut req)
    }

    /// Whether the interface is administratively up.
    pub fn is_up(&self) -> io::Result<bool> {
        let mut req = IfReq::new(&self.name);
        self.ioctl("reading flags", SIOCGIFFLAGS, &mut req)?;
        Ok(libc::c_int::from(req.short()) & libc::IFF_UP != 0)
    }

    /// Bring the interface up or down.
    pub fn set_up(&self, up: bool) -> io::Result<()> {
        let mut req = IfReq::new(&self.name);
        self.ioctl("reading flags", SIOCGIFFLAGS, &mut req)?;
        let mut flags = libc::c_int::from(req.short());
        if up {
            flags |= libc::IFF_UP;
        } else {
            flags &= !libc::IFF_UP;
        }
        req.set_short(flags as libc::c_short);
        self.ioctl("setting flags", SIOCSIFFLAGS, &mut req)
    }

    /// The kernel side's MAC address.
    pub fn mac(&self) -> io::Result<[u8; 6]> {
        let mut req = IfReq::new(&self.name);
        self.ioctl("reading MAC", SIOCGIFHWADDR, &mut req)?;
        // struct sockaddr: 2-byte family then sa_data.
        let mut mac = [0; 6];
        mac.copy_from_slice(&req.data[2..8]);
        Ok(mac)
    }

    /// Move the interface into the network namespace referred to by `ns_fd`
    /// (an open `/proc/PID/ns/net` or `/run/netns/NAME`), via netlink
    /// `RTM_NEWLINK` with `IFLA_NET_NS_FD`.
    pub fn move_to_netns_fd(&self, ns_fd: RawFd) -> io::Result<()> {
        let fd = u32::try_from(ns_fd)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "negative namespace fd"))?;
        self.netlink_set_ns(IFLA_NET_NS_FD, fd)
    }

    /// Move the interface into the network namespace of process `pid`.
    pub fn move_to_netns_of_pid(&self, pid: u32) -> io::Result<()> {
        self.netlink_set_ns(IFLA_NET_NS_PID, pid)
    }

    /// Move the interface into the named namespace created by `ip netns add NAME`.
    pub fn move_to_netns_named(&self, ns: &str) -> io::Result<()> {
        check_name(ns).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid namespace name {ns:?}"),
            )
        })?;
        let path = Path::new("/run/netns").join(ns);
        let f = File::open(&path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot open network namespace {}: {e} (create it with `ip netns add {ns}`)",
                    path.display()
                ),
            )
        })?;
        self.move_to_netns_fd(f.as_raw_fd())
    }

    fn netlink_set_ns(&self, attr: u16, value: u32) -> io::Result<()> {
        let cname = CString::new(self.name.as_str()).map_err(io::Error::other)?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if index == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface {} in this network namespace", self.name),
            ));
        }
        // nlmsghdr (16) + ifinfomsg (16) + rtattr (4) + u32 (4)
        let mut msg = [0u8; 40];
        msg[0..4].copy_from_slice(&40u32.to_ne_bytes());
        msg[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
        msg[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        msg[8..12].copy_from_slice(&1u32.to_ne_bytes()); // seq
        msg[16] = libc::AF_UNSPEC as u8; // ifi_family
        msg[20..24].copy_from_slice(&(index as i32).to_ne_bytes());
        msg[32..34].copy_from_slice(&8u16.to_ne_bytes());
        msg[34..36].copy_from_slice(&attr.to_ne_bytes());
        msg[36..40].copy_from_slice(&value.to_ne_bytes());

        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor owned by nobody else.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: `msg` is valid for reads of its length. Sending to the kernel
        // (no address: the socket's default destination is the kernel).
        let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut reply = [0u8; 512];
        // SAFETY: `reply` is valid for writes of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        let ty = reply.get(4..6).map(|b| u16::from_ne_bytes([b[0], b[1]]));
        let err = reply
            .get(16..20)
            .filter(|_| n >= 20)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        match (ty, err) {
            (Some(NLMSG_ERROR), Some(0)) => Ok(()),
            (Some(NLMSG_ERROR), Some(code)) => {
                let e = io::Error::from_raw_os_error(-code);
                let hint = match -code {
                    libc::EPERM => ": run as root or with CAP_NET_ADMIN",
                    libc::EEXIST => {
                        ": that namespace has an interface of this name already \
                         (another ustack serving it? choose another --tap)"
                    }
                    _ => "",
                };
                Err(io::Error::new(
                    e.kind(),
                    format!(
                        "moving {} to another network namespace: {e}{hint}",
                        self.name
                    ),
                ))
            }
            _ => Err(io::Error::other("unexpected netlink reply")),
        }
    }
}

const RTM_NEWLINK: u16 = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const IFLA_NET_NS_PID: u16 = 19;
const IFLA_NET_NS_FD: u16 = 28;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(check_name("ustk0").is_ok());
        assert!(check_name("").is_ok());
        assert!(check_name("a-very-long-name-x").is_err());
        assert!(check_name("a/b").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name("..").is_err());
    }

    #[test]
    fn ifreq_layout() {
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
        let r = IfReq::new("abc");
        assert_eq!(r.name(), "abc");
    }
}
