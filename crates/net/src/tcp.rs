//! Blocking TCP sockets shaped like `std::net::{TcpListener, TcpStream}`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use ustack_core::tcp::State;
use ustack_core::{TcpError, TcpHandle};

use crate::error::{socket_addrs, IntoIoError};
use crate::runtime::{Interest, Net, SockKey, Source, SourceKey};

/// Listen backlog used by [`TcpListener::bind`] (Linux's `SOMAXCONN`).
pub const DEFAULT_BACKLOG: usize = 4096;

fn lock_opt(m: &Mutex<Option<Duration>>) -> Option<Duration> {
    *m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn set_timeout(m: &Mutex<Option<Duration>>, d: Option<Duration>) -> io::Result<()> {
    // std (and Linux through std) refuses a zero timeout.
    if d == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        ));
    }
    *m.lock().unwrap_or_else(PoisonError::into_inner) = d;
    Ok(())
}

// ---------------------------------------------------------------- listener

struct ListenerInner {
    net: Net,
    handle: TcpHandle,
    nonblocking: AtomicBool,
}

impl Drop for ListenerInner {
    fn drop(&mut self) {
        let h = self.handle;
        self.net
            .shared()
            .op_release(SockKey::Tcp(h), |s, _, _tx| s.tcp_close(h));
    }
}

/// A TCP socket listening for connections (like `std::net::TcpListener`).
/// Dropping the last clone closes it; connections not yet accepted are reset.
#[derive(Clone)]
pub struct TcpListener {
    inner: Arc<ListenerInner>,
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("local", &self.local_addr().ok())
            .finish()
    }
}

impl TcpListener {
    /// Listen on `addr` (port 0 = an ephemeral port), IPv4 or IPv6. An
    /// IPv6 listener on `[::]:p` is dual-stack, as on Linux by default: it
    /// accepts IPv4 connections too, whose peers appear as IPv4-mapped
    /// addresses (`::ffff:a.b.c.d`), and it conflicts (`AddrInUse`) with an
    /// IPv4 listener on the same port; see
    /// [`bind_only_v6`](Self::bind_only_v6) and
    /// [`set_only_v6`](Self::set_only_v6). The first address that binds
    /// wins, as with `std`.
    pub fn bind(net: &Net, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        Self::bind_with_backlog(net, addr, DEFAULT_BACKLOG)
    }

    /// [`bind`](Self::bind) with an explicit accept backlog.
    pub fn bind_with_backlog(
        net: &Net,
        addr: impl ToSocketAddrs,
        backlog: usize,
    ) -> io::Result<TcpListener> {
        Self::bind_opts(net, addr, backlog, false)
    }

    /// [`bind`](Self::bind) with `IPV6_V6ONLY` set on IPv6 addresses: the
    /// listener takes IPv6 connections only, and an IPv4 listener may
    /// share its port (an IPv4 address binds as with `bind`).
    pub fn bind_only_v6(net: &Net, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        Self::bind_opts(net, addr, DEFAULT_BACKLOG, true)
    }

    fn bind_opts(
        net: &Net,
        addr: impl ToSocketAddrs,
        backlog: usize,
        v6only: bool,
    ) -> io::Result<TcpListener> {
        let mut last = None;
        for a in socket_addrs(addr)? {
            let r = net.shared().op(|s, _, _tx| match a {
                SocketAddr::V6(a6) if v6only => s.tcp_listen6_v6only(a6, backlog),
                a => s.tcp_listen_addr(a, backlog),
            });
            match r {
                Ok(handle) => {
                    return Ok(TcpListener {
                        inner: Arc::new(ListenerInner {
                            net: net.clone(),
                            handle,
                            nonblocking: AtomicBool::new(false),
                        }),
                    })
                }
                Err(e) => last = Some(e.into_io()),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::InvalidInput.into()))
    }

    /// Wait for a connection; returns it with the peer's address.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let l = &self.inner;
        let nonblocking = l.nonblocking.load(Ordering::Relaxed);
        let h = l.net.shared().block_on(
            Interest::TcpAccept(l.handle),
            nonblocking,
            None,
            io::ErrorKind::WouldBlock,
            |g, _| match g.stack.tcp_accept(l.handle) {
                Ok(Some(h)) => Poll::Ready(Ok(h)),
                Ok(None) | Err(TcpError::WouldBlock) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e.into_io())),
            },
        )?;
        let stream = TcpStream::from_handle(&l.net, h);
        let peer = stream.peer_addr()?;
        Ok((stream, peer))
    }

    /// An endless iterator over [`accept`](Self::accept)ed streams.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The address the listener is bound to (with the real port if it was 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        let l = &self.inner;
        let st = l
            .net
            .shared()
            .op(|s, _, _tx| s.tcp_addrs(l.handle))
            .map_err(|e| e.into_io())?;
        Ok(st.0)
    }

    /// In non-blocking mode `accept` gives `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.inner.nonblocking.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Set `IPV6_V6ONLY` on an IPv6 listener (as `std`'s `set_only_v6`):
    /// on, it stops taking IPv4 connections. Turning it off while an IPv4
    /// listener holds the port, or on an IPv4 listener, is `InvalidInput`
    /// (EINVAL).
    pub fn set_only_v6(&self, on: bool) -> io::Result<()> {
        let l = &self.inner;
        l.net
            .shared()
            .op(|s, _, _tx| s.tcp_set_v6only(l.handle, on))
            .map_err(|e| e.into_io())
    }

    /// `IPV6_V6ONLY` (false for an IPv4 listener).
    pub fn only_v6(&self) -> io::Result<bool> {
        let l = &self.inner;
        l.net
            .shared()
            .op(|s, _, _tx| s.tcp_v6only(l.handle))
            .map_err(|e| e.into_io())
    }

    /// Another handle to the same listener.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        Ok(self.clone())
    }

    /// The stack handle (for [`Net::with_stack`]).
    pub fn handle(&self) -> TcpHandle {
        self.inner.handle
    }
}

/// Iterator returned by [`TcpListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

// ---------------------------------------------------------------- stream

struct StreamInner {
    net: Net,
    handle: TcpHandle,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
    nonblocking: AtomicBool,
    nodelay: AtomicBool,
    read_shut: AtomicBool,
    /// The handle was released by `abort`; never touch it again.
    released: AtomicBool,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if !self.released.load(Ordering::Acquire) {
            let h = self.handle;
            self.net
                .shared()
                .op_release(SockKey::Tcp(h), |s, _, _tx| s.tcp_close(h));
        }
    }
}

/// A TCP connection (like `std::net::TcpStream`). Clones (and
/// [`try_clone`](Self::try_clone)) share the connection and its options, as
/// `dup`ed descriptors do; dropping the last one closes it gracefully: data
/// already written is still delivered, then FIN.
#[derive(Clone)]
pub struct TcpStream {
    inner: Arc<StreamInner>,
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("local", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .finish()
    }
}

/// Whether a connection in `state` has finished its handshake.
fn is_synchronized(state: State) -> bool {
    !matches!(
        state,
        State::Closed | State::Listen | State::SynSent | State::SynReceived
    )
}

impl TcpStream {
    fn from_handle(net: &Net, handle: TcpHandle) -> TcpStream {
        let nodelay = net.shared().lock().stack.config().tcp.nodelay;
        TcpStream {
            inner: Arc::new(StreamInner {
                net: net.clone(),
                handle,
                read_timeout: Mutex::new(None),
                write_timeout: Mutex::new(None),
                nonblocking: AtomicBool::new(false),
                nodelay: AtomicBool::new(nodelay),
                read_shut: AtomicBool::new(false),
                released: AtomicBool::new(false),
            }),
        }
    }

    /// Connect to `addr`, trying each address (IPv4 or IPv6) in turn like `std`.
    /// Blocks until the handshake completes or fails (`ConnectionRefused`,
    /// `TimedOut` after the SYN retries, `HostUnreachable`, ...).
    pub fn connect(net: &Net, addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let mut last = None;
        for a in socket_addrs(addr)? {
            match Self::connect_inner(net, a, None, None) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::InvalidInput.into()))
    }

    /// Connect with a deadline; `TimedOut` when it passes (the half-open
    /// connection is aborted). A zero timeout is `InvalidInput`, as in `std`.
    pub fn connect_timeout(
        net: &Net,
        addr: &SocketAddr,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        Self::connect_inner(net, *addr, None, Some(timeout))
    }

    /// Connect from a given local address (port 0 = ephemeral).
    pub fn connect_from(
        net: &Net,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        timeout: Option<Duration>,
    ) -> io::Result<TcpStream> {
        Self::connect_inner(
            net,
            SocketAddr::V4(remote),
            Some(SocketAddr::V4(local)),
            timeout,
        )
    }

    fn connect_inner(
        net: &Net,
        remote: SocketAddr,
        local: Option<SocketAddr>,
        timeout: Option<Duration>,
    ) -> io::Result<TcpStream> {
        let h = net
            .shared()
            .op(|s, now, _tx| s.tcp_connect_addr(now, remote, local))
            .map_err(|e| e.into_io())?;
        let stream = TcpStream::from_handle(net, h);
        let r = net.shared().block_on(
            Interest::TcpConnect(h),
            false,
            timeout,
            io::ErrorKind::TimedOut,
            |g, _| match g.stack.tcp_status(h) {
                Err(e) => Poll::Ready(Err(e.into_io())),
                Ok(st) => {
                    if let Some(e) = st.pending_error {
                        Poll::Ready(Err(e.into_io()))
                    } else if is_synchronized(st.state) {
                        Poll::Ready(Ok(()))
                    } else if st.state == State::Closed {
                        Poll::Ready(Err(io::ErrorKind::ConnectionRefused.into()))
                    } else {
                        Poll::Pending
                    }
                }
            },
        );
        match r {
            Ok(()) => Ok(stream),
            Err(e) => {
                // A failed or abandoned attempt must not linger half-open.
                stream.abort();
                Err(e)
            }
        }
    }

    /// The stack handle (for [`Net::with_stack`]).
    pub fn handle(&self) -> TcpHandle {
        self.inner.handle
    }

    fn status(&self) -> io::Result<ustack_core::TcpStatus> {
        let s = &self.inner;
        if s.released.load(Ordering::Acquire) {
            return Err(io::ErrorKind::NotConnected.into());
        }
        s.net
            .shared()
            .op(|st, _, _tx| st.tcp_status(s.handle))
            .map_err(|e| e.into_io())
    }

    /// The remote address; `NotConnected` once the connection is gone.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        let st = self.status()?;
        if st.state == State::Closed || st.state == State::Listen {
            return Err(io::ErrorKind::NotConnected.into());
        }
        Ok(self.addrs()?.1)
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addrs()?.0)
    }

    /// `(local, remote)` in the connection's own family.
    fn addrs(&self) -> io::Result<(SocketAddr, SocketAddr)> {
        let s = &self.inner;
        if s.released.load(Ordering::Acquire) {
            return Err(io::ErrorKind::NotConnected.into());
        }
        s.net
            .shared()
            .op(|st, _, _tx| st.tcp_addrs(s.handle))
            .map_err(|e| e.into_io())
    }

    /// Shut down the read half (reads then return EOF), the write half
    /// (FIN after the queued data; writes then fail with `BrokenPipe`), or both.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let s = &self.inner;
        if s.released.load(Ordering::Acquire) {
            return Err(io::ErrorKind::NotConnected.into());
        }
        let h = s.handle;
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            s.read_shut.store(true, Ordering::Release);
        }
        s.net
            .shared()
            .op_on(SockKey::Tcp(h), |st, _, _tx| {
                // Linux: shutdown(2) on a socket that is not connected (here:
                // reset, refused or timed out) is ENOTCONN.
                if st.tcp_status(h)?.state == State::Closed {
                    return Err(TcpError::NotConnected);
                }
                if matches!(how, Shutdown::Write | Shutdown::Both) {
                    st.tcp_shutdown(h)?;
                }
                Ok(())
            })
            .map_err(|e: TcpError| e.into_io())
    }

    /// Disable (true) or enable Nagle's algorithm.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        let s = &self.inner;
        let h = s.handle;
        s.net
            .shared()
            .op(|st, _, _tx| st.tcp_set_nodelay(h, on))
            .map_err(|e| e.into_io())?;
        s.nodelay.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether Nagle's algorithm is disabled (as last set through this API).
    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(self.inner.nodelay.load(Ordering::Relaxed))
    }

    /// Timeout for blocking reads; a read that times out gives `WouldBlock`
    /// (EAGAIN), as on Linux. `Some(0)` is `InvalidInput`.
    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        set_timeout(&self.inner.read_timeout, d)
    }

    /// Timeout for blocking writes (`WouldBlock` if nothing could be written).
    pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        set_timeout(&self.inner.write_timeout, d)
    }

    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(lock_opt(&self.inner.read_timeout))
    }

    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(lock_opt(&self.inner.write_timeout))
    }

    /// In non-blocking mode reads and writes give `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.inner.nonblocking.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// `SO_LINGER {on, 0}`: closing then sends RST instead of FIN.
    pub fn set_linger_zero(&self, on: bool) -> io::Result<()> {
        let s = &self.inner;
        let h = s.handle;
        s.net
            .shared()
            .op(|st, _, _tx| st.tcp_set_linger_zero(h, on))
            .map_err(|e| e.into_io())
    }

    /// Send RST now and release the connection; every clone then fails with
    /// `NotConnected`.
    pub fn abort(&self) {
        let s = &self.inner;
        if !s.released.swap(true, Ordering::AcqRel) {
            let h = s.handle;
            s.net
                .shared()
                .op_release(SockKey::Tcp(h), |st, _, _tx| st.tcp_abort(h));
        }
    }

    /// Take the pending error of the connection, if any (`SO_ERROR`-like).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        Ok(self.status()?.pending_error.map(|e| e.into_io()))
    }

    /// Another handle to the same connection (shares options, like `dup`).
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(self.clone())
    }

    /// Read without a staging buffer: `f` is lent the received bytes as two
    /// slices (the second non-empty only where they wrap around the
    /// connection's receive ring), consumes a prefix (of the first, then the
    /// second) and returns its length; those bytes leave the buffer and the
    /// window opens as after [`Read::read`]. Returns what `f` consumed
    /// (clamped to what it was lent).
    ///
    /// Blocks like `read` until data or the end of stream is there (in
    /// non-blocking mode: `WouldBlock`; after the read timeout:
    /// `WouldBlock`). `Ok(0)` at end of stream, without calling `f`; `f`
    /// consuming nothing also gives `Ok(0)` (the data stays for the next
    /// read), so a caller whose `f` may take nothing tells the two apart by
    /// whether `f` ran. `f` is called at most once.
    ///
    /// `f` runs with the stack's lock held: it must not block (no blocking
    /// I/O, no waiting on another thread that uses this `Net`) and must not
    /// call into this `Net` (that would deadlock); every other socket of
    /// the `Net` waits while it runs. Writing the bytes to a file or a
    /// non-blocking descriptor, hashing or parsing them are what it is for:
    /// each byte is then copied once between the wire and its destination.
    pub fn read_with<F>(&self, f: F) -> io::Result<usize>
    where
        F: FnOnce(&[u8], &[u8]) -> usize,
    {
        let s = &self.inner;
        if s.released.load(Ordering::Acquire) {
            return Err(io::ErrorKind::NotConnected.into());
        }
        let h = s.handle;
        let nonblocking = s.nonblocking.load(Ordering::Relaxed);
        let timeout = lock_opt(&s.read_timeout);
        let mut f = Some(f);
        s.net.shared().block_on(
            Interest::TcpRead(h),
            nonblocking,
            timeout,
            io::ErrorKind::WouldBlock,
            |g, _| {
                if s.read_shut.load(Ordering::Acquire) || s.released.load(Ordering::Acquire) {
                    return Poll::Ready(Ok(0));
                }
                match g
                    .stack
                    .tcp_recv_with(h, |a, b| f.take().map_or(0, |f| f(a, b)))
                {
                    Ok(n) => Poll::Ready(Ok(n)),
                    Err(TcpError::WouldBlock) => Poll::Pending,
                    Err(e) => Poll::Ready(Err(e.into_io())),
                }
            },
        )
    }

    /// Write without a staging buffer: `f` is lent up to `max` bytes of free
    /// space in the connection's send buffer as two slices (the second is
    /// empty: the buffer lends the rest of its current chunk), fills a prefix
    /// of the first then the second and returns how many bytes it wrote;
    /// they are sent as if passed to [`Write::write`]. Returns that count
    /// (clamped to what was lent).
    ///
    /// Blocks until there is send space (in non-blocking mode:
    /// `WouldBlock`; after the write timeout: `WouldBlock`), then calls `f`
    /// once: like a short `write`, it may be lent less than `max` although
    /// more would fit later (the buffer's storage grows as it is used), so
    /// a writer of more calls again. `Ok(0)` without calling `f` when `max`
    /// is 0. Errors as `write` (`BrokenPipe` after `shutdown(Write)`, the
    /// connection's error).
    ///
    /// `f` runs with the stack's lock held: it must not block and must not
    /// call into this `Net` (see [`TcpStream::read_with`]). Reading from a
    /// file or a non-blocking descriptor into the lent space, or producing
    /// the bytes there, copies each byte once on its way to the wire.
    pub fn write_with<F>(&self, max: usize, f: F) -> io::Result<usize>
    where
        F: FnOnce(&mut [u8], &mut [u8]) -> usize,
    {
        let s = &self.inner;
        if max == 0 {
            return Ok(0);
        }
        if s.released.load(Ordering::Acquire) {
            return Err(io::ErrorKind::NotConnected.into());
        }
        let h = s.handle;
        let nonblocking = s.nonblocking.load(Ordering::Relaxed);
        let timeout = lock_opt(&s.write_timeout);
        let mut f = Some(f);
        s.net.shared().block_on(
            Interest::TcpWrite(h),
            nonblocking,
            timeout,
            io::ErrorKind::WouldBlock,
            |g, _| {
                if s.released.load(Ordering::Acquire) {
                    return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
                }
                let r = g
                    .stack
                    .tcp_send_with(h, max, |a, b| f.take().map_or(0, |f| f(a, b)));
                match r {
                    // `f` ran (it is taken when called): done, whatever it wrote.
                    Ok(n) if f.is_none() => Poll::Ready(Ok(n)),
                    Ok(_) | Err(TcpError::WouldBlock) => Poll::Pending,
                    Err(e) => Poll::Ready(Err(e.into_io())),
                }
            },
        )
    }

    fn do_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let s = &self.inner;
        if buf.is_empty() {
            return Ok(0);
        }
        if s.released.load(Ordering::Acquire) {
            return Err(io::ErrorKind::NotConnected.into());
        }
        let h = s.handle;
        let nonblocking = s.nonblocking.load(Ordering::Relaxed);
        let timeout = lock_opt(&s.read_timeout);
        s.net.shared().block_on(
            Interest::TcpRead(h),
            nonblocking,
            timeout,
            io::ErrorKind::WouldBlock,
            |g, _| {
                if s.read_shut.load(Ordering::Acquire) || s.released.load(Ordering::Acquire) {
                    return Poll::Ready(Ok(0));
                }
                match g.stack.tcp_recv(h, buf) {
                    Ok(n) => Poll::Ready(Ok(n)),
                    Err(TcpError::WouldBlock) => Poll::Pending,
                    Err(e) => Poll::Ready(Err(e.into_io())),
                }
            },
        )
    }

    fn do_write(&self, buf: &[u8]) -> io::Result<usize> {
        let s = &self.inner;
        if buf.is_empty() {
            return Ok(0);
        }
        if s.released.load(Ordering::Acquire) {
            return Err(io::ErrorKind::NotConnected.into());
        }
        let h = s.handle;
        let nonblocking = s.nonblocking.load(Ordering::Relaxed);
        let timeout = lock_opt(&s.write_timeout);
        let mut written = 0usize;
        // A blocking write waits until everything is queued, like Linux's
        // send(2) on a blocking socket; a timeout or error after a partial
        // write reports the partial count.
        let r = s.net.shared().block_on(
            Interest::TcpWrite(h),
            nonblocking,
            timeout,
            io::ErrorKind::WouldBlock,
            |g, _| {
                if s.released.load(Ordering::Acquire) {
                    return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
                }
                while let Some(rest) = buf.get(written..).filter(|r| !r.is_empty()) {
                    match g.stack.tcp_send(h, rest) {
                        Ok(0) | Err(TcpError::WouldBlock) => {
                            return if written > 0 && nonblocking {
                                Poll::Ready(Ok(()))
                            } else {
                                Poll::Pending
                            }
                        }
                        Ok(n) => written += n,
                        Err(e) => return Poll::Ready(Err(e.into_io())),
                    }
                }
                Poll::Ready(Ok(()))
            },
        );
        match r {
            Ok(()) => Ok(written),
            Err(_) if written > 0 => Ok(written),
            Err(e) => Err(e),
        }
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.do_read(buf)
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.do_read(buf)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.do_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.do_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for TcpListener {
    fn source_key(&self) -> SourceKey {
        SourceKey(SockKey::Tcp(self.inner.handle))
    }
}

impl Source for TcpStream {
    fn source_key(&self) -> SourceKey {
        SourceKey(SockKey::Tcp(self.inner.handle))
    }
}
