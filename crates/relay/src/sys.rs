//! epoll and non-blocking host sockets (libc). Public for the `ustack`
//! binary's benchmark load generators, which drive kernel sockets the same
//! way.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn cvt_size(rc: libc::ssize_t) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

pub const EV_IN: u32 = libc::EPOLLIN as u32;
pub const EV_OUT: u32 = libc::EPOLLOUT as u32;
pub const EV_ERR: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
pub const EV_RDHUP: u32 = libc::EPOLLRDHUP as u32;
/// Urgent data (TCP's out-of-band mark) is waiting.
pub const EV_PRI: u32 = libc::EPOLLPRI as u32;
pub const EV_ET: u32 = libc::EPOLLET as u32;

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; result checked.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fresh descriptor owned by nobody else.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(|_| ())
    }

    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) })
            .map(|_| ())
    }

    pub fn delete(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: `ev` is valid (ignored by DEL on modern kernels).
        unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Wait up to `timeout` (None = forever); fills `out` with (token, events).
    pub fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
        out: &mut Vec<(u64, u32)>,
    ) -> io::Result<()> {
        out.clear();
        let ms = match timeout {
            None => -1,
            Some(d) => {
                // Round up so we never wake before the deadline.
                let ms = d.as_micros().div_ceil(1000);
                i32::try_from(ms).unwrap_or(i32::MAX)
            }
        };
        let max = i32::try_from(events.len()).unwrap_or(i32::MAX);
        // SAFETY: `events` is valid for `max` entries.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e);
        }
        for ev in events.iter().take(n as usize) {
            let (tok, evs) = (ev.u64, ev.events);
            out.push((tok, evs));
        }
        Ok(())
    }
}

/// A socket address in the kernel's form, with its length.
fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for
            // any sockaddr type.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The address the kernel filled in (`None`: another family).
fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn addr_or_err(ss: &libc::sockaddr_storage) -> io::Result<SocketAddr> {
    from_sockaddr(ss).ok_or_else(|| io::Error::from(io::ErrorKind::Unsupported))
}

/// A non-blocking, close-on-exec IPv4 socket.
pub fn socket(ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    socket_in(libc::AF_INET, ty, proto)
}

/// A non-blocking, close-on-exec socket of `addr`'s family.
pub fn socket_for(addr: &SocketAddr, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    socket_in(domain, ty, proto)
}

fn socket_in(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; result checked.
    let fd =
        cvt(unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Start a non-blocking connect. `Ok(true)` = connected already.
pub fn connect(fd: &OwnedFd, to: impl Into<SocketAddr>) -> io::Result<bool> {
    let (sa, len) = sockaddr(to.into());
    // SAFETY: `sa` is a valid sockaddr of length `len`.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok(false)
    } else {
        Err(e)
    }
}

pub fn bind(fd: &OwnedFd, at: impl Into<SocketAddr>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: valid option pointer and length.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    let (sa, len) = sockaddr(at.into());
    // SAFETY: `sa` is a valid sockaddr of length `len`.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_storage).cast(),
            len,
        )
    })
    .map(|_| ())
}

pub fn listen(fd: &OwnedFd, backlog: i32) -> io::Result<()> {
    // SAFETY: plain syscall.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) }).map(|_| ())
}

pub fn local_addr(fd: &OwnedFd) -> io::Result<SocketAddr> {
    // SAFETY: zeroed sockaddr_storage is valid; length matches.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: valid out-pointers.
    cvt(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut sa as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    addr_or_err(&sa)
}

/// The peer a connected socket is connected to.
pub fn peer_addr(fd: &OwnedFd) -> io::Result<SocketAddr> {
    // SAFETY: zeroed sockaddr_storage is valid; length matches.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: valid out-pointers.
    cvt(unsafe {
        libc::getpeername(
            fd.as_raw_fd(),
            (&mut sa as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    addr_or_err(&sa)
}

/// Every IPv4 and IPv6 address of the host's interfaces (empty if they
/// cannot be listed).
pub fn host_addrs() -> Vec<IpAddr> {
    let mut v = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return v;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until
        // freeifaddrs; `ifa_addr` is null or points to a sockaddr whose
        // family says its type.
        unsafe {
            let a = (*p).ifa_addr;
            if !a.is_null() && i32::from((*a).sa_family) == libc::AF_INET {
                let sin = &*(a as *const libc::sockaddr_in);
                v.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if !a.is_null() && i32::from((*a).sa_family) == libc::AF_INET6 {
                let sin6 = &*(a as *const libc::sockaddr_in6);
                v.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
            p = (*p).ifa_next;
        }
    }
    // SAFETY: the list getifaddrs allocated, freed once.
    unsafe { libc::freeifaddrs(head) };
    v
}

/// A non-blocking, close-on-exec `eventfd` (a doorbell for another thread).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd has no pointer arguments.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: a descriptor we just created and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Ring an `eventfd`.
pub fn eventfd_ring(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64; an error (counter full) is
    // harmless: the reader is already due to wake.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Clear an `eventfd`'s counter.
pub fn eventfd_clear(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a valid u64; EAGAIN (nothing rung) is fine.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// Accept one connection (non-blocking, close-on-exec).
pub fn accept(fd: &OwnedFd) -> io::Result<(OwnedFd, SocketAddr)> {
    // SAFETY: zeroed sockaddr_storage is valid; length matches.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: valid out-pointers.
    let c = cvt(unsafe {
        libc::accept4(
            fd.as_raw_fd(),
            (&mut sa as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: fresh descriptor.
    let c = unsafe { OwnedFd::from_raw_fd(c) };
    Ok((c, addr_or_err(&sa)?))
}

/// Pending socket error (SO_ERROR), cleared by reading.
pub fn take_error(fd: &OwnedFd) -> io::Result<Option<io::Error>> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid out-pointers.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(if v == 0 {
        None
    } else {
        Some(io::Error::from_raw_os_error(v))
    })
}

pub fn send(fd: &OwnedFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` valid for reads.
    cvt_size(unsafe {
        libc::send(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    })
}

/// `send(2)` of `a` then `b` in one call (`sendmsg` with two iovecs when
/// `b` is not empty): the two halves of a wrapped ring buffer.
pub fn send2(fd: &OwnedFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    if b.is_empty() {
        return send(fd, a);
    }
    let mut iov = [
        libc::iovec {
            iov_base: a.as_ptr().cast_mut().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr().cast_mut().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: zeroed msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at two iovecs over `a` and `b`, valid for reads
    // for the call (sendmsg does not write through them).
    cvt_size(unsafe {
        libc::sendmsg(
            fd.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    })
}

/// `recv(2)` into `a` then `b` in one call (`recvmsg` with two iovecs when
/// `b` is not empty): the two halves of a ring buffer's wrapped free space.
pub fn recv2(fd: &OwnedFd, a: &mut [u8], b: &mut [u8]) -> io::Result<usize> {
    if b.is_empty() {
        return recv(fd, a);
    }
    let mut iov = [
        libc::iovec {
            iov_base: a.as_mut_ptr().cast(),
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        },
    ];
    // SAFETY: zeroed msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at two iovecs over `a` and `b`, valid for
    // writes for the call.
    cvt_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) })
}

pub fn send_to(fd: &OwnedFd, data: &[u8], to: impl Into<SocketAddr>) -> io::Result<usize> {
    let (sa, len) = sockaddr(to.into());
    // SAFETY: `data` valid for reads; `sa` a valid sockaddr of `len`.
    cvt_size(unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            (&sa as *const libc::sockaddr_storage).cast(),
            len,
        )
    })
}

pub fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` valid for writes.
    cvt_size(unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    })
}

pub fn recv_from(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
    // SAFETY: zeroed sockaddr_storage is valid; length matches.
    let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: valid buffers and out-pointers.
    let n = cvt_size(unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
            (&mut sa as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    Ok((n, addr_or_err(&sa)?))
}

pub fn shutdown_write(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain syscall.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) }).map(|_| ())
}

/// Make the next close send RST (SO_LINGER with zero timeout).
pub fn set_linger_zero(fd: &OwnedFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: valid option pointer and length.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// An integer socket option (`setsockopt(fd, level, name, &value)`).
pub fn set_int_opt(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: valid option pointer and length.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

pub fn set_nodelay(fd: &OwnedFd) {
    let one: libc::c_int = 1;
    // SAFETY: valid option pointer and length.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Raise the soft RLIMIT_NOFILE to the hard limit; returns the new soft
/// limit. A relay holds one descriptor per flow: the soft default (often
/// 1024) would refuse flows long before `--max-flows`.
pub fn raise_nofile() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit the kernel fills in.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) })?;
    if r.rlim_cur < r.rlim_max {
        r.rlim_cur = r.rlim_max;
        // SAFETY: `r` is a valid rlimit, only read by the kernel.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) })?;
    }
    Ok(r.rlim_cur)
}
