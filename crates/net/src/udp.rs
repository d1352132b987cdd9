//! Blocking UDP sockets shaped like `std::net::UdpSocket`.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use ustack_core::{UdpError, UdpHandle};

use crate::error::IntoIoError;
use crate::runtime::{Interest, Net, SockKey, Source, SourceKey};

struct UdpInner {
    net: Net,
    handle: UdpHandle,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
    nonblocking: AtomicBool,
}

impl Drop for UdpInner {
    fn drop(&mut self) {
        let h = self.handle;
        self.net
            .shared()
            .op_release(SockKey::Udp(h), |s, _, _| s.udp_close(h));
    }
}

/// A UDP socket (like `std::net::UdpSocket`). Clones share the socket.
#[derive(Clone)]
pub struct UdpSocket {
    inner: Arc<UdpInner>,
}

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("local", &self.local_addr().ok())
            .finish()
    }
}

fn get(m: &Mutex<Option<Duration>>) -> Option<Duration> {
    *m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn set(m: &Mutex<Option<Duration>>, d: Option<Duration>) -> io::Result<()> {
    if d == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        ));
    }
    *m.lock().unwrap_or_else(PoisonError::into_inner) = d;
    Ok(())
}

impl UdpSocket {
    /// Bind to `addr` (port 0 = ephemeral), IPv4 or IPv6 (one socket per
    /// family: an IPv6 socket does not see IPv4 traffic, as with
    /// `IPV6_V6ONLY`).
    pub fn bind(net: &Net, addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match net.shared().op(|s, _, _| s.udp_bind_addr(a)) {
                Ok(handle) => {
                    return Ok(UdpSocket {
                        inner: Arc::new(UdpInner {
                            net: net.clone(),
                            handle,
                            read_timeout: Mutex::new(None),
                            write_timeout: Mutex::new(None),
                            nonblocking: AtomicBool::new(false),
                        }),
                    })
                }
                Err(e) => last = Some(e.into_io()),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::InvalidInput.into()))
    }

    /// The stack handle (for [`Net::with_stack`]).
    pub fn handle(&self) -> UdpHandle {
        self.inner.handle
    }

    /// The first address `addr` resolves to in the socket's family.
    fn resolve(&self, addr: impl ToSocketAddrs) -> io::Result<SocketAddr> {
        let v6 = self.local_addr()?.is_ipv6();
        addr.to_socket_addrs()?
            .find(|a| a.is_ipv6() == v6)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    if v6 {
                        "no IPv6 address to use"
                    } else {
                        "no IPv4 address to use"
                    },
                )
            })
    }

    /// Send one datagram to `addr` (the first address of the socket's
    /// family it resolves to).
    pub fn send_to(&self, buf: &[u8], addr: impl ToSocketAddrs) -> io::Result<usize> {
        let dst = self.resolve(addr)?;
        self.send_with(|s, now, h, _tx| s.udp_send_to_addr(now, h, buf, dst))
    }

    /// Send one datagram to the connected peer.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.send_with(|s, now, h, _tx| s.udp_send_addr(now, h, buf))
    }

    fn send_with(
        &self,
        mut f: impl FnMut(
            &mut ustack_core::Stack,
            ustack_core::time::Instant,
            UdpHandle,
            &mut dyn FnMut(&[u8]),
        ) -> Result<usize, UdpError>,
    ) -> io::Result<usize> {
        let u = &self.inner;
        let h = u.handle;
        let nonblocking = u.nonblocking.load(Ordering::Relaxed);
        let timeout = get(&u.write_timeout);
        u.net.shared().block_on(
            Interest::Any,
            nonblocking,
            timeout,
            io::ErrorKind::WouldBlock,
            |g, now| match g.with_tx(|s, tx| f(s, now, h, tx)) {
                Ok(n) => Poll::Ready(Ok(n)),
                Err(UdpError::WouldBlock) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e.into_io())),
            },
        )
    }

    /// Receive one datagram (truncated to `buf`) and its source.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let u = &self.inner;
        let h = u.handle;
        let nonblocking = u.nonblocking.load(Ordering::Relaxed);
        let timeout = get(&u.read_timeout);
        u.net.shared().block_on(
            Interest::UdpRecv(h),
            nonblocking,
            timeout,
            io::ErrorKind::WouldBlock,
            |g, _| match g.stack.udp_recv_from_addr(h, buf) {
                Ok((n, from)) => Poll::Ready(Ok((n, from))),
                Err(UdpError::WouldBlock) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e.into_io())),
            },
        )
    }

    /// Receive one datagram from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_from(buf).map(|(n, _)| n)
    }

    /// Set the default destination and only accept datagrams from it.
    pub fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        let dst = self.resolve(addr)?;
        let h = self.inner.handle;
        self.inner
            .net
            .shared()
            .op(|s, _, _| s.udp_connect_addr(h, dst))
            .map_err(|e| e.into_io())
    }

    fn status(&self) -> io::Result<ustack_core::UdpStatus<SocketAddr>> {
        let h = self.inner.handle;
        self.inner
            .net
            .shared()
            .op(|s, _, _| s.udp_status_addr(h))
            .map_err(|e| e.into_io())
    }

    /// The local address (with the real port if bound to 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.status()?.local)
    }

    /// The connected peer; `NotConnected` if not connected.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.status()?
            .remote
            .ok_or_else(|| io::ErrorKind::NotConnected.into())
    }

    /// Timeout for blocking receives (`WouldBlock` when it passes, as Linux's EAGAIN).
    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        set(&self.inner.read_timeout, d)
    }

    /// Timeout for blocking sends.
    pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        set(&self.inner.write_timeout, d)
    }

    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(get(&self.inner.read_timeout))
    }

    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(get(&self.inner.write_timeout))
    }

    /// In non-blocking mode operations give `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.inner.nonblocking.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Take the pending error (`SO_ERROR`-like).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        Ok(self.status()?.pending_error.map(|e| e.into_io()))
    }

    /// Another handle to the same socket.
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        Ok(self.clone())
    }
}

impl Source for UdpSocket {
    fn source_key(&self) -> SourceKey {
        SourceKey(SockKey::Udp(self.inner.handle))
    }
}
