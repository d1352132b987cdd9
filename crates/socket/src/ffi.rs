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
//! Determinism on a virtual clock: the outcome of a run must not depend on
//! how fast threads get scheduled, so a thread about to move the clock
//! first waits in [`Ctx::settle`] (with no real-time limit) until
//!
//! - every blocked caller has looked at the host since its last change
//!   (a read that the last packet completed returns at this time), and
//! - every caller whose blocking call returned after waiting has called
//!   again (packetdrill reads the clock right after a blocking call
//!   returns to time it: the clock must not move in between).
//!
//! The real-time fallback of a lone blocked caller applies only when nobody
//! else can move the clock: no thread is about to call, none owes a call
//! after a return, and no other thread that has called is runnable (a
//! thread merely starved of CPU is runnable, so load cannot trigger it).
//!
//! # Safety
//!
//! The pointers passed must be valid as for the libc call (a buffer of
//! `len` bytes, a `sockaddr` of `addrlen` bytes, ...). A null `ctx` or a
//! null required pointer is `EFAULT`, never a crash.

use std::ffi::c_void;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;

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
    /// Virtual clock: threads that called, with their kernel thread ids
    /// (see [`Ctx::others_runnable`]), and which of them returned from a
    /// blocking call after waiting and have not called since. Locked only
    /// while holding `host`.
    threads: Mutex<Threads>,
    /// Threads between asking for `host` and getting it.
    coming: AtomicUsize,
    /// Callers waiting in [`Ctx::settle`] (for tests).
    settling: AtomicUsize,
}

#[derive(Default)]
struct Threads {
    /// (thread, its kernel thread id).
    known: Vec<(ThreadId, libc::pid_t)>,
    /// Returned from a blocking call after waiting; not called since.
    owed: Vec<ThreadId>,
}

/// Longest real time [`Ctx::settle`] waits for a caller that returned
/// from a blocking call to call again. Not a timing fallback (packetdrill
/// calls again at once): only a guard against a caller that never does.
const OWED_GUARD: std::time::Duration = std::time::Duration::from_secs(20);

thread_local! {
    static TID: libc::pid_t = {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    };
}

/// Is kernel thread `tid` of this process running or runnable?
fn runnable(tid: libc::pid_t) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    // "tid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|st| st == "R")
}

impl Ctx {
    /// A context whose clock moves only by [`Host::advance_to`] (or a lone
    /// blocked caller, see the module docs).
    pub fn new_virtual(host: Host) -> Ctx {
        Ctx {
            host: Mutex::new(host),
            cond: Condvar::new(),
            virtual_clock: true,
            threads: Mutex::new(Threads::default()),
            coming: AtomicUsize::new(0),
            settling: AtomicUsize::new(0),
        }
    }

    /// The host, locked. On a virtual clock this also marks the calling
    /// thread as having called (see [`Ctx::settle`]).
    pub fn lock(&self) -> MutexGuard<'_, Host> {
        if !self.virtual_clock {
            return self.host.lock().unwrap_or_else(PoisonError::into_inner);
        }
        self.coming.fetch_add(1, Ordering::SeqCst);
        let g = self.host.lock().unwrap_or_else(PoisonError::into_inner);
        self.coming.fetch_sub(1, Ordering::SeqCst);
        let me = std::thread::current().id();
        let paid = {
            let mut t = self.threads();
            if !t.known.iter().any(|k| k.0 == me) {
                t.known.push((me, TID.with(|t| *t)));
            }
            let before = t.owed.len();
            t.owed.retain(|o| *o != me);
            t.owed.len() != before
        };
        if paid {
            // Someone may be settling: tell it we called.
            self.cond.notify_all();
        }
        g
    }

    /// The thread table; call only while holding `host`.
    fn threads(&self) -> MutexGuard<'_, Threads> {
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Is some other thread (that has called before) runnable? Such a
    /// thread will call again: a blocked caller must not take its silence
    /// for idleness.
    fn others_runnable(&self) -> bool {
        let me = std::thread::current().id();
        let tids: Vec<libc::pid_t> = self
            .threads()
            .known
            .iter()
            .filter(|k| k.0 != me)
            .map(|k| k.1)
            .collect();
        tids.into_iter().any(runnable)
    }

    /// Could another thread still move the clock or change the host? If
    /// so a blocked caller keeps waiting instead of moving the clock.
    fn someone_coming(&self) -> bool {
        self.coming.load(Ordering::SeqCst) > 0
            || !self.threads().owed.is_empty()
            || self.others_runnable()
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
                if self.someone_coming() {
                    // Not alone: whoever it is will change the host or
                    // move the clock; look again after it did.
                    continue;
                }
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
    /// this time, not after the clock moved on), and let every caller whose
    /// blocking call returned after waiting call again (packetdrill reads
    /// the time a blocking call returned right after it returns).
    ///
    /// No real-time limit applies to blocked callers: each one is woken
    /// here and looks as soon as it runs. A returned caller that never
    /// calls again is let go after a long guard ([`OWED_GUARD`]).
    pub fn settle<'a>(&'a self, mut g: MutexGuard<'a, Host>) -> MutexGuard<'a, Host> {
        if !self.virtual_clock {
            return g;
        }
        let start = std::time::Instant::now();
        loop {
            let behind = g.waiters_behind();
            let owed = !self.threads().owed.is_empty();
            if !behind && (!owed || start.elapsed() >= OWED_GUARD) {
                break;
            }
            self.settling.fetch_add(1, Ordering::SeqCst);
            self.cond.notify_all();
            let (g2, _) = self
                .cond
                .wait_timeout(g, std::time::Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner);
            self.settling.fetch_sub(1, Ordering::SeqCst);
            g = g2;
        }
        g
    }

    /// After moving a virtual clock: let every blocked caller the move
    /// completed return and call again ([`Ctx::settle`]), then wait (in
    /// real time, up to `guard`) until no other thread that has called
    /// this library is running: one that returned from a blocking call
    /// may have more to do outside it before the caller goes on.
    /// packetdrill's syscall thread, for one, records an `accept`'s new
    /// descriptor under packetdrill's own lock, which its main thread
    /// takes again as soon as `usleep` returns; had the main thread won,
    /// a `%{ python }%` block at the next event read `TCP_INFO` from a
    /// socket without its descriptor.
    pub fn quiesce<'a>(
        &'a self,
        g: MutexGuard<'a, Host>,
        guard: std::time::Duration,
    ) -> MutexGuard<'a, Host> {
        if !self.virtual_clock {
            return g;
        }
        let g = self.settle(g);
        drop(g);
        let start = std::time::Instant::now();
        while self.others_runnable() && start.elapsed() < guard {
            std::thread::yield_now();
        }
        self.lock()
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
        let mut waited = false;
        let r = loop {
            let r = op(&mut g);
            match r {
                Err(libc::EAGAIN) if !nonblock && g.is_blocking(fd) => {
                    let (g2, woke) = self.wait(g, deadline);
                    g = g2;
                    waited = true;
                    match woke {
                        Woke::Changed => {}
                        Woke::Deadline => break Err(libc::EAGAIN),
                        Woke::Stuck => break Err(libc::EINTR),
                    }
                }
                r => break r,
            }
        };
        if waited && self.virtual_clock {
            // Others went on while we waited: the clock must not move
            // before we call again (and so read the time we returned at).
            let me = std::thread::current().id();
            let mut t = self.threads();
            if !t.owed.contains(&me) {
                t.owed.push(me);
            }
        }
        drop(g);
        self.cond.notify_all();
        r
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

/// The smallest `sockaddr_in6` Linux takes (`SIN6_LEN_RFC2133`: without
/// `sin6_scope_id`).
const SIN6_LEN_RFC2133: usize = 24;

/// The address a `bind`/`connect` on a socket of `family` passes, checked
/// as Linux checks it: too short for the family's `sockaddr` is `EINVAL`,
/// another family `EAFNOSUPPORT`.
///
/// # Safety
/// `addr` points to `len` readable bytes (or is null).
unsafe fn read_sockaddr(
    addr: *const sockaddr,
    len: socklen_t,
    family: c_int,
) -> SockResult<SocketAddr> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    if family == libc::AF_INET6 {
        if (len as usize) < SIN6_LEN_RFC2133 {
            return Err(libc::EINVAL);
        }
        let mut sin6 = zeroed_sin6();
        let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_in6>());
        // SAFETY: `addr` holds `len` >= n readable bytes; `sin6` has room
        // for n (at most its size); the rest stays zero (the scope id).
        unsafe {
            std::ptr::copy_nonoverlapping(addr as *const u8, &mut sin6 as *mut _ as *mut u8, n)
        };
        if c_int::from(sin6.sin6_family) != libc::AF_INET6 {
            return Err(libc::EAFNOSUPPORT);
        }
        return Ok(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(sin6.sin6_addr.s6_addr),
            u16::from_be(sin6.sin6_port),
            u32::from_be(sin6.sin6_flowinfo),
            sin6.sin6_scope_id,
        )));
    }
    if (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least sizeof(sockaddr_in) readable bytes, checked above.
    let sin = unsafe { std::ptr::read_unaligned(addr as *const libc::sockaddr_in) };
    if c_int::from(sin.sin_family) != libc::AF_INET {
        return Err(libc::EAFNOSUPPORT);
    }
    Ok(SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
        u16::from_be(sin.sin_port),
    )))
}

/// An all-zero `sockaddr_in6`.
fn zeroed_sin6() -> libc::sockaddr_in6 {
    libc::sockaddr_in6 {
        sin6_family: 0,
        sin6_port: 0,
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr { s6_addr: [0; 16] },
        sin6_scope_id: 0,
    }
}

/// Copy `sa` (`size` bytes) to the caller's buffer: at most `*len` bytes,
/// and `*len` set to the full size, as the kernel does.
///
/// # Safety
/// `addr`/`len` non-null and valid for writing (`*len` bytes at `addr`);
/// `sa` points to `size` readable bytes.
unsafe fn copy_out(sa: *const u8, size: usize, addr: *mut sockaddr, len: *mut socklen_t) {
    // SAFETY: the caller's contract.
    unsafe {
        let n = (*len as usize).min(size);
        std::ptr::copy_nonoverlapping(sa, addr as *mut u8, n);
        *len = size as socklen_t;
    }
}

/// # Safety
/// `addr`/`len` null or valid for writing (`*len` bytes at `addr`).
unsafe fn write_sockaddr(a: SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            let size = std::mem::size_of::<libc::sockaddr_in>();
            // SAFETY: checked non-null above; the caller's buffer contract.
            unsafe { copy_out(&sin as *const _ as *const u8, size, addr, len) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            let size = std::mem::size_of::<libc::sockaddr_in6>();
            // SAFETY: checked non-null above; the caller's buffer contract.
            unsafe { copy_out(&sin6 as *const _ as *const u8, size, addr, len) };
        }
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
    if flags & libc::MSG_OOB != 0 {
        // The out-of-band octet (Linux `tcp_recv_urg`), which never waits.
        let Some(b) = c.lock().recv_oob(fd, peek)? else {
            return Ok(0);
        };
        let Some(v) = bufs.iter().find(|v| v.iov_len > 0) else {
            return Ok(0);
        };
        if v.iov_base.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: iov_base holds iov_len >= 1 writable bytes (caller's contract).
        unsafe { *(v.iov_base as *mut u8) = b };
        return Ok(1);
    }
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
        let a = unsafe { read_sockaddr(addr, len, h.family(fd)?) }?;
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
            let a = unsafe { read_sockaddr(addr, len, h.family(fd)?) }?;
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
    if let Some(r) = unsafe { pipe_io(ctx, fd, buf as *mut u8, count, false) } {
        return r;
    }
    // SAFETY: forwarded caller contract.
    unsafe { ustack_recv(ctx, fd, buf, count, 0) }
}

/// `read(2)`/`write(2)` on a pipe end of [`ustack_pipe`]; None if `fd` is
/// not one.
///
/// # Safety
/// See the module docs; `buf` holds `count` bytes (writable for a read).
unsafe fn pipe_io(
    ctx: *mut c_void,
    fd: c_int,
    buf: *mut u8,
    count: size_t,
    write: bool,
) -> Option<ssize_t> {
    // SAFETY: forwarded caller contract.
    let c = unsafe { self::ctx(ctx) }.ok()?;
    let mut h = c.lock();
    if !h.is_pipe(fd) {
        return None;
    }
    if buf.is_null() && count > 0 {
        return Some(ret_size(Err(libc::EFAULT)));
    }
    let count = count.min(crate::pipe::PIPE_SIZE);
    let r = if count == 0 {
        Ok(0)
    } else if write {
        // SAFETY: buf holds count readable bytes (caller's contract).
        let data = unsafe { std::slice::from_raw_parts(buf as *const u8, count) };
        h.pipe_write(fd, data)
    } else {
        // SAFETY: buf holds count writable bytes (caller's contract).
        let out = unsafe { std::slice::from_raw_parts_mut(buf, count) };
        h.pipe_read(fd, out)
    };
    Some(ret_size(r))
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
    if let Some(r) = unsafe { pipe_io(ctx, fd, buf as *mut u8, count, true) } {
        return r;
    }
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

/// Bytes `ustack_sendfile` reads from the file per send.
const SENDFILE_CHUNK: usize = 64 * 1024;

/// Read up to `want` bytes of kernel descriptor `fd` at `pos` into `buf`.
fn read_file(fd: c_int, buf: &mut Vec<u8>, want: usize, pos: libc::off_t) -> SockResult<()> {
    buf.resize(want, 0);
    // SAFETY: buf holds `want` writable bytes; fd is the caller's kernel
    // descriptor.
    let got = unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut c_void, want, pos) };
    match usize::try_from(got) {
        Ok(n) => {
            buf.truncate(n);
            Ok(())
        }
        Err(_) => {
            buf.clear();
            // SAFETY: errno is thread-local.
            Err(unsafe { *libc::__errno_location() })
        }
    }
}

/// `sendfile(2)` from a kernel file descriptor `in_fd` (read with libc's
/// `pread`) to our socket `out_fd`. As
/// Linux's `do_splice_direct`: every chunk goes with `MSG_MORE` while more
/// data follows, and the end of the file or of `count` pushes the rest
/// (`splice_eof` -> `tcp_splice_eof`); a blocking socket takes everything
/// up to `count` or the end of the file, a non-blocking one what fits; the
/// file offset (`*offset`, or the file position when `offset` is null)
/// moves on by what was sent.
///
/// # Safety
/// See the module docs; `offset` is null or points to an `off_t`.
#[no_mangle]
pub unsafe extern "C" fn ustack_sendfile(
    ctx: *mut c_void,
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        if !c.lock().is_fd(out_fd) {
            return Err(libc::EBADF);
        }
        // SAFETY: caller's contract: null or a valid off_t.
        let given = unsafe { offset.as_ref() }.copied();
        let base = match given {
            Some(o) if o < 0 => return Err(libc::EINVAL),
            Some(o) => o,
            // SAFETY: plain lseek on the caller's descriptor.
            None => match unsafe { libc::lseek(in_fd, 0, libc::SEEK_CUR) } {
                p if p >= 0 => p,
                // SAFETY: errno is thread-local.
                _ => return Err(unsafe { *libc::__errno_location() }),
            },
        };
        // Linux's MAX_RW_COUNT.
        let count = count.min(0x7fff_f000);
        let (sent, err) = sendfile_chunks(c, out_fd, in_fd, base, count);
        let end = base + sent as libc::off_t;
        if given.is_some() {
            // SAFETY: caller's contract: a valid off_t.
            unsafe { *offset = end };
        } else {
            // SAFETY: plain lseek on the caller's descriptor.
            unsafe { libc::lseek(in_fd, end, libc::SEEK_SET) };
        }
        match err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(sent),
        }
    }))
}

/// The loop of [`ustack_sendfile`], reading at `base` on: bytes sent, and
/// the error that ended it early. Each chunk is read before the one ahead
/// of it is sent, so the last one goes without `MSG_MORE`.
fn sendfile_chunks(
    c: &Ctx,
    out_fd: c_int,
    in_fd: c_int,
    base: libc::off_t,
    count: usize,
) -> (usize, Option<Errno>) {
    let chunk = SENDFILE_CHUNK.min(count);
    let mut cur = Vec::new();
    let mut next = Vec::new();
    if let Err(e) = read_file(in_fd, &mut cur, chunk, base) {
        return (0, Some(e));
    }
    let mut sent = 0usize;
    let mut err = None;
    while !cur.is_empty() {
        let after = sent + cur.len();
        let ahead = chunk.min(count - after);
        next.clear();
        if ahead > 0 {
            // A failed read ends the call after this chunk (reported if
            // nothing was sent).
            if let Err(e) = read_file(in_fd, &mut next, ahead, base + after as libc::off_t) {
                err = Some(e);
            }
        }
        let more = if next.is_empty() { 0 } else { libc::MSG_MORE };
        let buf = one_buf(cur.as_mut_ptr() as *mut c_void, cur.len());
        match do_send(c, out_fd, &[buf], more) {
            Ok(n) => {
                sent += n;
                if n < cur.len() {
                    break;
                }
            }
            Err(e) => return (sent, Some(e)),
        }
        std::mem::swap(&mut cur, &mut next);
    }
    (sent, err)
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

/// `ioctl(2)`: `FIONREAD`/`SIOCINQ`, `SIOCOUTQ`, `SIOCOUTQNSD`, `SIOCATMARK`,
/// `FIONBIO`.
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
            0x8905 /* SIOCATMARK */ => usize::from(h.at_mark(fd)?),
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

/// `pipe(2)`: a pipe between two descriptors of this layer (see
/// [`crate::pipe`]).
///
/// # Safety
/// See the module docs; `fds` points to two `int`s.
#[no_mangle]
pub unsafe extern "C" fn ustack_pipe(ctx: *mut c_void, fds: *mut c_int) -> c_int {
    // SAFETY: forwarded caller contract.
    ret_int(unsafe { self::ctx(ctx) }.and_then(|c| {
        if fds.is_null() {
            return Err(libc::EFAULT);
        }
        let (r, w) = c.lock().pipe();
        // SAFETY: fds points to two ints (caller's contract).
        unsafe {
            *fds = r;
            *fds.add(1) = w;
        }
        Ok(0)
    }))
}

/// `splice(2)` from a socket into a pipe of [`ustack_pipe`] (Linux
/// `tcp_splice_read`): what is readable in front of the urgent mark, at
/// most `len` bytes; a blocking socket waits until there is some (or the
/// mark, or the end of the stream), unless `SPLICE_F_NONBLOCK`. Other
/// directions: `EINVAL`; offsets (meaningless for both): `ESPIPE`.
///
/// # Safety
/// See the module docs.
#[no_mangle]
pub unsafe extern "C" fn ustack_splice(
    ctx: *mut c_void,
    fd_in: c_int,
    off_in: *mut libc::loff_t,
    fd_out: c_int,
    off_out: *mut libc::loff_t,
    len: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    ret_size(unsafe { self::ctx(ctx) }.and_then(|c| {
        {
            let h = c.lock();
            if !h.is_fd(fd_in) || !h.is_fd(fd_out) {
                return Err(libc::EBADF);
            }
            if h.is_pipe(fd_in) || !h.is_pipe(fd_out) {
                return Err(libc::EINVAL);
            }
        }
        if !off_in.is_null() || !off_out.is_null() {
            return Err(libc::ESPIPE);
        }
        let len = len.min(0x7fff_f000);
        let nonblock = flags & libc::SPLICE_F_NONBLOCK != 0;
        let timeout = c.lock().timeout(fd_in, false);
        c.blocking(fd_in, nonblock, timeout, |h| {
            h.splice_to_pipe(fd_in, fd_out, len)
        })
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

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::sync::mpsc;
    use std::thread;

    use ustack_core::time::{Duration, Instant};
    use ustack_core::{Config, Limits};
    use ustack_wire::ethernet::MacAddr;
    use ustack_wire::ipv4::Ipv4Cidr;

    use super::*;
    use crate::TcpConfig;

    fn host(n: u8) -> Host {
        let cfg = Config {
            mac: MacAddr([2, 0, 0, 0, 0, n]),
            addr: Ipv4Cidr {
                address: Ipv4Addr::new(10, 0, 0, n),
                prefix_len: 24,
            },
            gateway: None,
            mtu: 1500,
            tcp: TcpConfig::default(),
            limits: Limits::default(),
            secret: [n; 16],
            seed: u64::from(n),
        };
        Host::new(cfg, Instant::ZERO)
    }

    /// Move frames between the context's host and `b` until quiet.
    fn pump(c: &Ctx, b: &mut Host) {
        for _ in 0..1000 {
            let mut moved = false;
            {
                let mut a = c.lock();
                while let Some((_, f)) = a.link_output() {
                    b.link_input(&f);
                    moved = true;
                }
                while let Some((_, f)) = b.link_output() {
                    a.link_input(&f);
                    moved = true;
                }
            }
            c.notify();
            if !moved {
                break;
            }
        }
    }

    /// A virtual context with a blocking socket connected to a peer `b`:
    /// (context, its socket, the peer, the peer's socket).
    fn connected() -> (Ctx, i32, Host, i32) {
        let c = Ctx::new_virtual(host(1));
        let mut b = host(2);
        let l = b
            .socket(libc::AF_INET, libc::SOCK_STREAM, 0)
            .expect("socket");
        b.bind(l, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80).into())
            .expect("bind");
        b.listen(l, 5).expect("listen");
        let fd = c
            .lock()
            .socket(libc::AF_INET, libc::SOCK_STREAM, 0)
            .expect("socket");
        let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
        assert_eq!(c.lock().connect(fd, peer.into()), Err(libc::EINPROGRESS));
        pump(&c, &mut b);
        assert_eq!(c.lock().connect_done(fd), Ok(()));
        let (s, _) = b.accept(l, 0).expect("accept");
        (c, fd, b, s)
    }

    /// `bind`/`connect` check the address as Linux does for the socket's
    /// family: too short for it is EINVAL, another family EAFNOSUPPORT;
    /// a `sockaddr_in6` without its scope id (24 bytes) is taken.
    #[test]
    fn sockaddr_lengths_and_families_as_linux() {
        let c = Ctx::new_virtual(host(1));
        let p = &c as *const Ctx as *mut c_void;
        let six = c
            .lock()
            .socket(libc::AF_INET6, libc::SOCK_STREAM, 0)
            .expect("socket");
        let four = c
            .lock()
            .socket(libc::AF_INET, libc::SOCK_STREAM, 0)
            .expect("socket");
        let mut sin6 = zeroed_sin6();
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_port = 8080u16.to_be();
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 8080u16.to_be(),
            sin_addr: libc::in_addr { s_addr: 0 },
            sin_zero: [0; 8],
        };
        let a6 = &sin6 as *const _ as *const sockaddr;
        let a4 = &sin as *const _ as *const sockaddr;
        // SAFETY: __errno_location returns this thread's errno slot.
        let errno = || unsafe { *libc::__errno_location() };
        // SAFETY: the addresses point to live structs at least `len` long
        // (sin6 is 28 bytes; 16 for sin).
        unsafe {
            assert_eq!(ustack_bind(p, six, a4, 16), -1);
            assert_eq!(errno(), libc::EINVAL, "sockaddr_in on AF_INET6");
            assert_eq!(ustack_bind(p, six, a6, 23), -1);
            assert_eq!(errno(), libc::EINVAL, "shorter than SIN6_LEN_RFC2133");
            let mut wrong = sin6;
            wrong.sin6_family = libc::AF_INET as libc::sa_family_t;
            assert_eq!(
                ustack_bind(p, six, &wrong as *const _ as *const sockaddr, 28),
                -1
            );
            assert_eq!(errno(), libc::EAFNOSUPPORT);
            assert_eq!(ustack_bind(p, four, a6, 28), -1);
            assert_eq!(errno(), libc::EAFNOSUPPORT, "sockaddr_in6 on AF_INET");
            assert_eq!(ustack_connect(p, six, a4, 16), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(ustack_bind(p, six, a6, 24), 0);
            let mut out = zeroed_sin6();
            let mut len = std::mem::size_of::<libc::sockaddr_in6>() as socklen_t;
            let o = &mut out as *mut _ as *mut sockaddr;
            assert_eq!(ustack_getsockname(p, six, o, &mut len), 0);
            assert_eq!(len, 28);
            assert_eq!(c_int::from(out.sin6_family), libc::AF_INET6);
            assert_eq!(u16::from_be(out.sin6_port), 8080);
            // A short buffer gets what fits and the full length.
            let mut small = [0u8; 8];
            let mut len = 8;
            assert_eq!(
                ustack_getsockname(p, six, small.as_mut_ptr() as *mut sockaddr, &mut len),
                0
            );
            assert_eq!(len, 28);
            assert_eq!(
                u16::from_ne_bytes([small[0], small[1]]),
                libc::AF_INET6 as u16
            );
        }
    }

    /// Wait until `c` has a blocked caller (spinning, not sleeping).
    fn until_blocked(c: &Ctx) {
        while c.lock().waiters.is_empty() {
            thread::yield_now();
        }
    }

    fn recv(c: &Ctx, fd: i32, n: usize) -> isize {
        let mut buf = vec![0u8; n];
        let p = c as *const Ctx as *mut c_void;
        // SAFETY: `p` is a live Ctx, `buf` holds `n` writable bytes.
        unsafe { ustack_recv(p, fd, buf.as_mut_ptr() as *mut c_void, n, 0) }
    }

    /// The race packetdrill lost under load: a blocked read completes
    /// when data arrives at t0; before its thread reads the clock (to time
    /// the call's return) another thread moves the clock on. The clock
    /// must wait for the returned caller, however late it runs.
    #[test]
    fn clock_waits_for_a_returned_caller_to_call_again() {
        let (c, fd, mut b, s) = connected();
        let t0 = c.lock().now();
        thread::scope(|sc| {
            let (returned_tx, returned_rx) = mpsc::channel();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let cr = &c;
            let reader = sc.spawn(move || {
                let c = cr;
                let n = recv(c, fd, 5);
                returned_tx.send(n).expect("send");
                // The injected delay: the reader is slow to run again.
                go_rx.recv().expect("recv");
                // packetdrill's end_syscall: read the time of the return.
                c.lock().now()
            });
            until_blocked(&c);
            assert_eq!(b.send(s, b"hello"), Ok(5));
            pump(&c, &mut b);
            assert_eq!(returned_rx.recv().expect("recv"), 5);

            // The main thread moves on: usleep(20 ms).
            let mover = sc.spawn(|| {
                let mut h = c.settle(c.lock());
                let t = h.now() + Duration::from_millis(20);
                h.advance_to(t);
                drop(h);
                c.notify();
            });
            // Let the mover get as far as it can before the reader runs.
            while c.settling.load(Ordering::SeqCst) == 0 && !mover.is_finished() {
                thread::yield_now();
            }
            go_tx.send(()).expect("send");
            let t1 = reader.join().expect("reader");
            mover.join().expect("mover");
            assert_eq!(t1, t0, "the read returned at t0");
        });
        assert_eq!(c.lock().now(), t0 + Duration::from_millis(20));
    }

    /// A blocked caller is let look at every change before the clock
    /// moves: a write that an ACK completes returns at the ACK's time.
    #[test]
    fn clock_waits_for_a_blocked_caller_to_look() {
        let (c, fd, mut b, s) = connected();
        thread::scope(|sc| {
            let reader = sc.spawn(|| {
                let n = recv(&c, fd, 5);
                (n, c.lock().now())
            });
            until_blocked(&c);
            assert_eq!(b.send(s, b"hello"), Ok(5));
            // Inject, then at once move the clock, with no pause between.
            {
                let mut a = c.lock();
                while let Some((_, f)) = b.link_output() {
                    a.link_input(&f);
                }
            }
            c.notify();
            let t0 = {
                let mut h = c.settle(c.lock());
                let t0 = h.now();
                h.advance_to(t0 + Duration::from_millis(20));
                t0
            };
            c.notify();
            let (n, t1) = reader.join().expect("reader");
            assert_eq!(n, 5);
            assert_eq!(t1, t0);
        });
    }

    /// Alone, a blocked caller still moves the clock: to its deadline
    /// (`SO_RCVTIMEO`) here, returning `EAGAIN` at exactly that time.
    #[test]
    fn lone_blocked_caller_moves_the_clock_to_its_deadline() {
        let (c, fd, _b, _s) = connected();
        rcvtimeo(&c, fd, 3);
        let t0 = c.lock().now();
        // Nobody else calls (this thread is the only one that ever did).
        assert_eq!(recv(&c, fd, 5), -1);
        // SAFETY: this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EAGAIN);
        assert!(c.lock().now() >= t0 + Duration::from_secs(3));
    }

    /// Set `SO_RCVTIMEO` on `fd`.
    fn rcvtimeo(c: &Ctx, fd: i32, secs: libc::time_t) {
        let tv = libc::timeval {
            tv_sec: secs,
            tv_usec: 0,
        };
        let p = c as *const Ctx as *mut c_void;
        // SAFETY: a live Ctx and a timeval of the size given.
        let r = unsafe {
            ustack_setsockopt(
                p,
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const c_void,
                std::mem::size_of::<libc::timeval>() as socklen_t,
            )
        };
        assert_eq!(r, 0);
    }

    /// A blocked caller does not take another thread's silence for
    /// idleness while that thread is runnable (starved of CPU, say): only
    /// once it is gone does the caller move the clock itself.
    #[test]
    fn no_idle_advance_while_another_caller_is_runnable() {
        let (c, fd, _b, _s) = connected();
        rcvtimeo(&c, fd, 3);
        let t0 = c.lock().now();
        thread::scope(|sc| {
            let reader = sc.spawn(|| recv(&c, fd, 5));
            until_blocked(&c);
            // A thread that has called, then stays runnable without
            // calling for several rounds of IDLE_ADVANCE.
            let busy = sc.spawn(|| {
                drop(c.lock());
                let start = std::time::Instant::now();
                while start.elapsed() < 3 * IDLE_ADVANCE {
                    thread::yield_now();
                }
                c.lock().now()
            });
            assert_eq!(busy.join().expect("busy"), t0, "the clock stood still");
            // Alone now: the reader moves the clock to its deadline.
            assert_eq!(reader.join().expect("reader"), -1);
        });
        assert!(c.lock().now() >= t0 + Duration::from_secs(3));
    }
}
