//! The C ABI: socket calls on a shared [`Host`], with blocking.
//!
//! Every function takes the context first (`void *ctx`, a [`Ctx`]) and then
//! the arguments of the libc call it stands for, returns what that call
//! returns, and sets `errno` on failure. The signatures are those of
//! packetdrill's `struct packetdrill_interface`, so an adapter can store
//! these functions in it directly; an `LD_PRELOAD` library wraps them with
//! the global context.
//!
//! Blocking: a call on a descriptor without `O_NONBLOCK` that would block
//! waits on the context's condition variable until another thread feeds
//! the host (a frame, a clock advance, a socket call), then tries again;
//! `SO_RCVTIMEO`/`SO_SNDTIMEO` and `poll`/`epoll_wait` timeouts count on the
//! host's clock. On a virtual clock ([`Ctx::new_virtual`]) time moves only
//! when some thread moves it; a blocked caller that sees nobody else call
//! for [`IDLE_ADVANCE`] of real time concludes it is alone and moves the
//! clock itself to the next timer or its deadline, so a blocking call never
//! waits for a clock nobody drives.
//!
//! # Safety
//!
//! The pointers passed must be valid as for the libc call (a buffer of
//! `len` bytes, a `sockaddr` of `addrlen` bytes, ...). A null `ctx` or a
//! null required pointer is `EFAULT`, never a crash.

use std::ffi::c_void;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use libc::{
    c_int, c_long, c_ulong, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t, ssize_t,
};
use ustack_core::time::{Duration, Instant};

use crate::{Errno, Host, SockResult};

/// Real time a blocked caller waits for another thread before moving a
/// virtual clock itself.
pub const IDLE_ADVANCE: std::time::Duration = std::time::Duration::from_millis(400);

/// Rounds of [`IDLE_ADVANCE`] a blocked caller on a virtual clock waits
/// with no timer to move to and nobody else calling before it gives up
/// with `EINTR`: nothing can ever wake it (Linux would block forever).
pub const IDLE_GIVE_UP: u32 = 10;

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woke {
    Changed,
    Deadline,
    /// Virtual clock, nothing pending, nobody calling.
    Stuck,
}

/// A host shared between threads: the `void *ctx` of every function here.
pub struct Ctx {
    host: Mutex<Host>,
    cond: Condvar,
    virtual_clock: bool,
}

impl Ctx {
    /// A context whose clock moves only by [`Host::advance_to`] (or a lone
    /// blocked caller, see the module docs).
    pub fn new_virtual(host: Host) -> Ctx {
        Ctx {
            host: Mutex::new(host),
            cond: Condvar::new(),
            virtual_clock: true,
        }
    }

    /// The host, locked.
    pub fn lock(&self) -> MutexGuard<'_, Host> {
        self.host.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wake blocked callers after changing the host through [`Ctx::lock`].
    pub fn notify(&self) {
        self.cond.notify_all();
    }

    /// Wait for a change (or `deadline` on the host's clock).
    fn wait<'a>(
        &'a self,
        mut g: MutexGuard<'a, Host>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, Host>, Woke) {
        let gen = g.generation();
        // Registered as having looked at the host as of `gen`: a thread
        // about to move the clock waits in `settle` until we have looked
        // again after its last change.
        let id = g.waiter_enter(gen);
        // Someone may be settling: tell it we looked.
        self.cond.notify_all();
        let (mut g, woke) = self.wait_inner(g, gen, deadline);
        g.waiter_leave(id);
        (g, woke)
    }

    fn wait_inner<'a>(
        &'a self,
        mut g: MutexGuard<'a, Host>,
        gen: u64,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, Host>, Woke) {
        let mut idle = 0;
        loop {
            if deadline.is_some_and(|d| g.now() >= d) {
                return (g, Woke::Deadline);
            }
            let (g2, to) = self
                .cond
                .wait_timeout(g, IDLE_ADVANCE)
                .unwrap_or_else(PoisonError::into_inner);
            g = g2;
            if g.generation() != gen {
                return (g, Woke::Changed);
            }
            if to.timed_out() && self.virtual_clock {
                let next = [g.next_timer(), deadline].into_iter().flatten().min();
                if let Some(t) = next {
                    g.advance_to(t);
                    self.cond.notify_all();
                    let expired = deadline.is_some_and(|d| g.now() >= d);
                    return (
                        g,
                        if expired {
                            Woke::Deadline
                        } else {
                            Woke::Changed
                        },
                    );
                }
                idle += 1;
                if idle >= IDLE_GIVE_UP {
                    return (g, Woke::Stuck);
                }
            }
        }
    }

    /// Before moving a virtual clock: let every blocked caller look at the
    /// host as it is now (a read that the last packet completed returns at
    /// this time, not after the clock moved on), for at most about a second
    /// of real time.
    pub fn settle<'a>(&'a self, mut g: MutexGuard<'a, Host>) -> MutexGuard<'a, Host> {
        let start = std::time::Instant::now();
        while g.waiters_behind() && start.elapsed() < std::time::Duration::from_secs(1) {
            self.cond.notify_all();
            let (g2, _) = self
                .cond
                .wait_timeout(g, std::time::Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner);
            g = g2;
        }
        g
    }

    /// Run `op` until it does not block (`EAGAIN` on a blocking `fd`), the
    /// timeout passes (`EAGAIN`), or it fails.
    fn blocking<T>(
        &self,
        fd: i32,
        nonblock: bool,
        timeout: Option<Duration>,
        mut op: impl FnMut(&mut Host) -> SockResult<T>,
    ) -> SockResult<T> {
        let mut g = self.lock();
        let deadline = timeout.map(|d| g.now() + d);
        loop {
            let r = op(&mut g);
            match r {
                Err(libc::EAGAIN) if !nonblock && g.is_blocking(fd) => {
                    let (g2, woke) = self.wait(g, deadline);
                    g = g2;
                    match woke {
                        Woke::Changed => {}
                        Woke::Deadline => return Err(libc::EAGAIN),
                        Woke::Stuck => return Err(libc::EINTR),
                    }
                }
                r => {
                    drop(g);
                    self.cond.notify_all();
                    return r;
                }
            }
        }
    }
}

fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn ret_int(r: SockResult<i32>) -> c_int {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn ret_size(r: SockResult<usize>) -> ssize_t {
    match r {
        Ok(v) => v as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// # Safety
/// `ctx` is null or a live `Ctx`.
unsafe fn ctx<'a>(p: *mut c_void) -> SockResult<&'a Ctx> {
    // SAFETY: the caller passes a pointer made by `ustack_ctx_*`/`Box::into_raw`.
    unsafe { (p as *const Ctx).as_ref() }.ok_or(libc::EFAULT)
}

/// # Safety
/// `addr` points to `len` readable bytes (or is null).
unsafe fn read_sockaddr(addr: *const sockaddr, len: socklen_t) -> SockResult<SocketAddrV4> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least sizeof(sockaddr_in) readable bytes, checked above.
    let sin = unsafe { std::ptr::read_unaligned(addr as *const libc::sockaddr_in) };
    if c_int::from(sin.sin_family) != libc::AF_INET {
        return Err(libc::EAFNOSUPPORT);
    }
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
        u16::from_be(sin.sin_port),
    ))
}

/// # Safety
/// `addr`/`len` null or valid for writing (`*len` bytes at `addr`).
unsafe fn write_sockaddr(a: SocketAddrV4, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let full = std::mem::size_of::<libc::sockaddr_in>();
    // SAFETY: the caller's buffer holds *len bytes; we copy at most that and
    // report the full length, as the kernel does.
    unsafe {
        let n = (*len as usize).min(full);
        std::ptr::copy_nonoverlapping(&sin as *const _ as *const u8, addr as *mut u8, n);
        *len = full as socklen_t;
    }
}

/// The iovecs of a call as slices.
///
/// # Safety
/// `iov` holds `n` valid iovecs.
unsafe fn iovecs<'a>(iov: *const iovec, n: c_int) -> SockResult<&'a [iovec]> {
    if !(0..=1024).contains(&n) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller passes n iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, n as usize) })
}

// ----------------------------------------------------------------------
// Receive and send, shared by the read/recv/write/send families
// ----------------------------------------------------------------------

fn do_recv(c: &Ctx, fd: i32, bufs: &[iovec], flags: c_int) -> SockResult<usize> {
    let total: usize = bufs.iter().map(|v| v.iov_len).sum();
    let peek = flags & libc::MSG_PEEK != 0;
    let nonblock = flags & libc::MSG_DONTWAIT != 0;
    let waitall = flags & libc::MSG_WAITALL != 0 && !peek;
    let timeout = c.lock().timeout(fd, false);
    let mut scratch = vec![0u8; total.min(1 << 20)];
    let mut got = 0usize;
    loop {
        let want = scratch.len() - got;
        let r = c.blocking(fd, nonblock, timeout, |h| {
            if want == 0 {
                return Ok(0);
            }
            h.recv(fd, &mut scratch[got..], peek)
        });
        match r {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                if !waitall || got >= scratch.len() {
                    break;
                }
            }
            Err(e) if got > 0 && e == libc::EAGAIN => break,
            Err(_) if got > 0 => break,
            Err(e) => return Err(e),
        }
    }
    // Scatter into the caller's buffers.
    let mut off = 0;
    for v in bufs {
        if off >= got {
            break;
        }
        let n = v.iov_len.min(got - off);
        if n > 0 {
            if v.iov_base.is_null() {
                return Err(libc::EFAULT);
            }
            // SAFETY: iov_base holds iov_len writable bytes (caller's contract).
            unsafe {
                std::ptr::copy_nonoverlapping(scratch[off..].as_ptr(), v.iov_base as *mut u8, n);
            }
        }
        off += n;
    }
    Ok(got)
}

fn do_send(c: &Ctx, fd: i32, bufs: &[iovec], flags: c_int) -> SockResult<usize> {
    let mut data = Vec::new();
    for v in bufs {
        if v.iov_len == 0 {
            continue;
        }
        if v.iov_base.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: iov_base holds iov_len readable bytes (caller's contract).
        data.extend_from_slice(unsafe {
            std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
        });
    }
    let nonblock = flags & libc::MSG_DONTWAIT != 0;
    let more = flags & libc::MSG_MORE != 0;
    let timeout = c.lock().timeout(fd, true);
    let mut sent = 0usize;
    // A writer that waited for room goes on only once it is woken (Linux
    // `sk_stream_wait_memory`), not as soon as one skb fits. The whole
    // write runs in one `blocking` call, so that between a partial send
    // and the wait for more room the writer never lets go of the host
    // unregistered (a packet could come and go unseen by it).
    let mut waited = false;
    let r = c.blocking(fd, nonblock, timeout, |h| loop {
        if waited && h.send_waits(fd) {
            return Err(libc::EAGAIN);
        }
        waited = true;
        match h.send_more(fd, &data[sent..], more) {
            Ok(n) => {
                sent += n;
                if sent >= data.len() && flags & libc::MSG_EOR != 0 {
                    h.mark_record_end(fd);
                }
                // Linux's blocking send returns once everything is queued.
                if sent >= data.len() || nonblock || !h.is_blocking(fd) || n == 0 {
                    return Ok(sent);
                }
            }
            // Room for none: wait (or, non-blocking, report what went).
            Err(libc::EAGAIN) if sent > 0 && (nonblock || !h.is_blocking(fd)) => return Ok(sent),
            Err(libc::EAGAIN) => return Err(libc::EAGAIN),
            Err(_) if sent > 0 => return Ok(sent),
            Err(e) => return Err(e),
        }
    });
    match r {
        // A timeout (SO_SNDTIMEO) or an error after part of the data.
        Err(_) if sent > 0 => Ok(sent),
        r => r,
    }
}

fn one_buf(buf: *mut c_void, len: size_t) -> iovec {
    iovec {
        iov_base: buf,
        iov_len: len,
    }
}

// ----------------------------------------------------------------------
// The calls
// ----------------------------------------------------------------------

/// `socket(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_socket(
    ctx: *mut c_void,
    domain: c_int,
    ty: c_int,
    protocol: c_int,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let r = c.lock().socket(domain, ty, protocol);
        r
    }))
}

/// `bind(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_bind(
    ctx: *mut c_void,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let mut h = c.lock();
        if !h.is_fd(fd) {
            return Err(libc::EBADF);
        }
        // SAFETY: forwarded caller contract.
        let a = unsafe { read_sockaddr(addr, len) }?;
        h.bind(fd, a).map(|()| 0)
    }))
}

/// `listen(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_listen(ctx: *mut c_void, fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let r = c.lock().listen(fd, backlog).map(|()| 0);
        c.notify();
        r
    }))
}

/// `accept(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_accept(
    ctx: *mut c_void,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe { ustack_accept4(ctx, fd, addr, len, 0) }
}

/// `accept4(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_accept4(
    ctx: *mut c_void,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let (nfd, peer) = c.blocking(fd, false, None, |h| h.accept(fd, flags))?;
        // SAFETY: forwarded caller contract.
        unsafe { write_sockaddr(peer, addr, len) };
        Ok(nfd)
    }))
}

/// `connect(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_connect(
    ctx: *mut c_void,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let r = {
            let mut h = c.lock();
            if !h.is_fd(fd) {
                return Err(libc::EBADF);
            }
            // SAFETY: forwarded caller contract.
            let a = unsafe { read_sockaddr(addr, len) }?;
            let r = h.connect(fd, a);
            let blocking = h.is_blocking(fd);
            (r, blocking)
        };
        c.notify();
        match r {
            (Err(libc::EINPROGRESS), true) => {
                let timeout = c.lock().timeout(fd, true);
                match c.blocking(fd, false, timeout, |h| h.connect_done(fd)) {
                    Ok(()) => Ok(0),
                    // A timed-out blocking connect (SO_SNDTIMEO).
                    Err(libc::EAGAIN) => Err(libc::EINPROGRESS),
                    // connect reports the error: SO_ERROR is clear after.
                    Err(e) => Err(c.lock().consume_so_error(fd).unwrap_or(e)),
                }
            }
            (r, _) => r.map(|()| 0),
        }
    }))
}

/// `read(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_read(
    ctx: *mut c_void,
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    unsafe { ustack_recv(ctx, fd, buf, count, 0) }
}

/// `readv(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_readv(
    ctx: *mut c_void,
    fd: c_int,
    iov: *const iovec,
    n: c_int,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        // SAFETY: forwarded caller contract.
        let v = unsafe { iovecs(iov, n) }?;
        do_recv(c, fd, v, 0)
    }))
}

/// `recv(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_recv(
    ctx: *mut c_void,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        do_recv(c, fd, &[one_buf(buf, len)], flags)
    }))
}

/// `recvfrom(2)`: the source address is the peer's.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_recvfrom(
    ctx: *mut c_void,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    let n = unsafe { ustack_recv(ctx, fd, buf, len, flags) };
    if n >= 0 && !addr.is_null() {
        // SAFETY: forwarded caller contract.
        if let Ok(c) = unsafe { self::ctx(ctx) } {
            if let Ok(p) = c.lock().peer_addr(fd) {
                // SAFETY: forwarded caller contract.
                unsafe { write_sockaddr(p, addr, alen) };
            }
        }
    }
    n
}

/// `recvmsg(2)`; with `TCP_INQ` on, a `TCP_CM_INQ` control message tells
/// the bytes left to read.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_recvmsg(
    ctx: *mut c_void,
    fd: c_int,
    msg: *mut msghdr,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        // SAFETY: forwarded caller contract.
        let m = unsafe { msg.as_mut() }.ok_or(libc::EFAULT)?;
        // SAFETY: forwarded caller contract.
        let v = unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }?;
        let n = do_recv(c, fd, v, flags)?;
        m.msg_flags = 0;
        let (inq_on, left) = {
            let h = c.lock();
            (
                h.sock(fd).map(|s| s.opts.inq).unwrap_or(false),
                h.inq_hint(fd),
            )
        };
        #[allow(clippy::unnecessary_cast)] // msg_controllen is not usize on every libc
        let space = m.msg_controllen as usize;
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let need = unsafe { libc::CMSG_SPACE(4) } as usize;
        if inq_on && !m.msg_control.is_null() && space >= need {
            // SAFETY: msg_control holds msg_controllen bytes (checked >= need).
            unsafe {
                let cm = libc::CMSG_FIRSTHDR(m);
                if let Some(cm) = cm.as_mut() {
                    cm.cmsg_level = libc::SOL_TCP;
                    cm.cmsg_type = libc::TCP_CM_INQ;
                    cm.cmsg_len = libc::CMSG_LEN(4) as _;
                    let v = i32::try_from(left).unwrap_or(i32::MAX);
                    std::ptr::write_unaligned(libc::CMSG_DATA(cm) as *mut i32, v);
                }
            }
            m.msg_controllen = need as _;
        } else {
            m.msg_controllen = 0;
        }
        if !m.msg_name.is_null() {
            m.msg_namelen = 0;
        }
        Ok(n)
    }))
}

/// `write(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_write(
    ctx: *mut c_void,
    fd: c_int,
    buf: *const c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    unsafe { ustack_send(ctx, fd, buf, count, 0) }
}

/// `writev(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_writev(
    ctx: *mut c_void,
    fd: c_int,
    iov: *const iovec,
    n: c_int,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        // SAFETY: forwarded caller contract.
        let v = unsafe { iovecs(iov, n) }?;
        do_send(c, fd, v, 0)
    }))
}

/// `send(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_send(
    ctx: *mut c_void,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        do_send(c, fd, &[one_buf(buf as *mut c_void, len)], flags)
    }))
}

/// `sendto(2)`: a TCP socket ignores the address once connected.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_sendto(
    ctx: *mut c_void,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    _addr: *const sockaddr,
    _alen: socklen_t,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    unsafe { ustack_send(ctx, fd, buf, len, flags) }
}

/// `sendmsg(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_sendmsg(
    ctx: *mut c_void,
    fd: c_int,
    msg: *const msghdr,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        // SAFETY: forwarded caller contract.
        let m = unsafe { msg.as_ref() }.ok_or(libc::EFAULT)?;
        // SAFETY: forwarded caller contract.
        let v = unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }?;
        do_send(c, fd, v, flags)
    }))
}

/// `fcntl(2)` for `F_GETFL`, `F_SETFL`, `F_GETFD`, `F_SETFD`. The third
/// argument is read as an integer (the libc call is variadic; on the
/// System V x86-64 and AArch64 ABIs an integer argument is passed the same
/// way either way).
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_fcntl(
    ctx: *mut c_void,
    fd: c_int,
    cmd: c_int,
    arg: c_long,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let mut h = c.lock();
        match cmd {
            libc::F_GETFL => h.get_flags(fd),
            libc::F_SETFL => h.set_flags(fd, arg as c_int).map(|()| 0),
            libc::F_GETFD | libc::F_SETFD => h.get_flags(fd).map(|_| 0),
            _ => Err(libc::EINVAL),
        }
    }))
}

/// `ioctl(2)`: `FIONREAD`/`SIOCINQ`, `SIOCOUTQ`, `SIOCOUTQNSD`, `FIONBIO`.
///
/// # Safety
/// See the module docs; `arg` points to an `int`.
#[no_mangle]
pub unsafe extern "C" fn ustack_ioctl(
    ctx: *mut c_void,
    fd: c_int,
    request: c_ulong,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let mut h = c.lock();
        let p = arg as *mut c_int;
        if p.is_null() {
            return Err(libc::EFAULT);
        }
        let v = match request {
            libc::FIONREAD => h.queued(fd, false)?,
            libc::TIOCOUTQ => h.queued(fd, true)?,
            0x894B /* SIOCOUTQNSD */ => h.notsent(fd),
            libc::FIONBIO => {
                // SAFETY: arg points to an int (caller's contract).
                let on = unsafe { *p } != 0;
                let fl = h.get_flags(fd)?;
                h.set_flags(fd, if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK })?;
                return Ok(0);
            }
            _ => return Err(libc::ENOTTY),
        };
        // SAFETY: arg points to an int (caller's contract).
        unsafe { *p = c_int::try_from(v).unwrap_or(c_int::MAX) };
        Ok(0)
    }))
}

/// `close(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_close(ctx: *mut c_void, fd: c_int) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let r = c.lock().close(fd).map(|()| 0);
        c.notify();
        r
    }))
}

/// `shutdown(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_shutdown(ctx: *mut c_void, fd: c_int, how: c_int) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let r = c.lock().shutdown(fd, how).map(|()| 0);
        c.notify();
        r
    }))
}

/// `getsockopt(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_getsockopt(
    ctx: *mut c_void,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        if len.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: len is valid (checked non-null; caller's contract).
        let room = unsafe { *len };
        if (room as i32) < 0 {
            return Err(libc::EINVAL);
        }
        let bytes = c.lock().getsockopt(fd, level, name)?;
        let n = bytes.len().min(room as usize);
        if n > 0 {
            if val.is_null() {
                return Err(libc::EFAULT);
            }
            // SAFETY: val holds *len writable bytes (caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), val as *mut u8, n) };
        }
        // SAFETY: as above.
        unsafe { *len = n as socklen_t };
        Ok(0)
    }))
}

/// `setsockopt(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_setsockopt(
    ctx: *mut c_void,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let bytes: &[u8] = if len == 0 {
            &[]
        } else if val.is_null() {
            return Err(libc::EFAULT);
        } else {
            // SAFETY: val holds len readable bytes (caller's contract).
            unsafe { std::slice::from_raw_parts(val as *const u8, len as usize) }
        };
        let r = c.lock().setsockopt(fd, level, name, bytes).map(|()| 0);
        c.notify();
        r
    }))
}

/// `getsockname(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_getsockname(
    ctx: *mut c_void,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let a = c.lock().local_addr(fd)?;
        // SAFETY: forwarded caller contract.
        unsafe { write_sockaddr(a, addr, len) };
        Ok(0)
    }))
}

/// `getpeername(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_getpeername(
    ctx: *mut c_void,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let a = c.lock().peer_addr(fd)?;
        // SAFETY: forwarded caller contract.
        unsafe { write_sockaddr(a, addr, len) };
        Ok(0)
    }))
}

/// A `poll`/`epoll_wait` timeout in milliseconds (negative: none).
fn ms_timeout(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// Wait (on the host's clock) until `ready` finds something or `timeout`.
fn wait_ready<T>(
    c: &Ctx,
    timeout: Option<Duration>,
    mut ready: impl FnMut(&mut Host) -> SockResult<Option<T>>,
) -> SockResult<Option<T>> {
    let mut g = c.lock();
    let deadline = timeout.map(|d| g.now() + d);
    loop {
        if let Some(v) = ready(&mut g)? {
            return Ok(Some(v));
        }
        if deadline.is_some_and(|d| g.now() >= d) {
            return Ok(None);
        }
        let (g2, woke) = c.wait(g, deadline);
        g = g2;
        match woke {
            Woke::Changed => {}
            Woke::Deadline => return ready(&mut g),
            Woke::Stuck => return Err(libc::EINTR),
        }
    }
}

/// `poll(2)` over our descriptors (others get `POLLNVAL`).
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_poll(
    ctx: *mut c_void,
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        if nfds > 4096 {
            return Err(libc::EINVAL);
        }
        let list: &mut [pollfd] = if nfds == 0 {
            &mut []
        } else if fds.is_null() {
            return Err(libc::EFAULT);
        } else {
            // SAFETY: fds holds nfds entries (caller's contract).
            unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
        };
        let r = wait_ready(c, ms_timeout(timeout), |h| {
            let mut n = 0;
            for p in list.iter_mut() {
                p.revents = 0;
                if p.fd < 0 {
                    continue;
                }
                let always = crate::POLLERR | crate::POLLHUP | libc::POLLNVAL as u32;
                let bits = h.readiness(p.fd) & (p.events as u16 as u32 | always);
                p.revents = bits as i16;
                if bits != 0 {
                    n += 1;
                }
            }
            Ok((n > 0).then_some(n))
        })?;
        Ok(r.unwrap_or(0))
    }))
}

/// `epoll_create(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_epoll_create(ctx: *mut c_void, size: c_int) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        if size <= 0 {
            return Err(libc::EINVAL);
        }
        Ok(c.lock().epoll_create())
    }))
}

/// `epoll_ctl(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_epoll_ctl(
    ctx: *mut c_void,
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        let (events, data) = if op == libc::EPOLL_CTL_DEL {
            (0, 0)
        } else {
            // SAFETY: ev points to an epoll_event (caller's contract).
            let e = unsafe { ev.as_ref() }.ok_or(libc::EFAULT)?;
            (e.events, e.u64)
        };
        let r = c.lock().epoll_ctl(epfd, op, fd, events, data).map(|()| 0);
        r
    }))
}

/// `epoll_wait(2)`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_epoll_wait(
    ctx: *mut c_void,
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        if max <= 0 {
            return Err(libc::EINVAL);
        }
        if events.is_null() {
            return Err(libc::EFAULT);
        }
        let ready = wait_ready(c, ms_timeout(timeout), |h| {
            let v = h.epoll_ready(epfd, max as usize)?;
            Ok((!v.is_empty()).then_some(v))
        })?
        .unwrap_or_default();
        for (i, (ev, data)) in ready.iter().enumerate() {
            // SAFETY: events holds max entries (caller's contract), i < max.
            unsafe {
                events.add(i).write_unaligned(libc::epoll_event {
                    events: *ev,
                    u64: *data,
                })
            };
        }
        Ok(ready.len() as c_int)
    }))
}
