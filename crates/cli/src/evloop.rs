//! `ustack serve`'s server: one event loop over a [`Poller`] serves every
//! connection of every service (echo, discard, chargen, HTTP) and UDP echo.
//! No thread per connection: a connection costs its [`Session`] (a few
//! dozen bytes while idle) and its entry here; the cost of an event does not
//! depend on how many connections are held.

use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ustack_net::{PollEvent, Poller, TcpListener, TcpStream, UdpSocket};

use crate::server::{PageFn, Service, Session};
use crate::services;

/// Tokens below this name listeners (index) and the UDP socket; connection
/// `i` of the slab has token `CONN_BASE + i`.
const CONN_BASE: u64 = 1 << 16;
/// UDP socket `i` has token `UDP_TOKEN - i` (listeners count up from 0).
const UDP_TOKEN: u64 = CONN_BASE - 1;
/// Connections accepted per listener event before others get a turn.
const ACCEPT_BURST: usize = 256;

/// Counters shared with the status page and the caller.
#[derive(Debug, Default)]
pub struct LoopStats {
    /// Connections being served now.
    pub active: AtomicUsize,
    /// Connections accepted so far.
    pub accepted: AtomicU64,
    /// Connections closed at once because `max_connections` were served.
    pub refused: AtomicU64,
}

struct Conn {
    stream: TcpStream,
    session: Session,
    service: Service,
}

/// The event loop's state (the [`Poller`] it is driven by is passed in:
/// owned by its own thread in [`run`](EventLoop::run), or by the stack
/// thread with [`Poller::run_on_stack_thread`]).
pub struct EventLoop {
    listeners: Vec<(TcpListener, Service)>,
    udp: Vec<UdpSocket>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    max_connections: usize,
    page: PageFn,
    stats: Arc<LoopStats>,
    scratch: Vec<u8>,
}

impl EventLoop {
    /// Serve `listeners` (one service each) and UDP echo on each of `udp`
    /// (one per family), at most `max_connections` TCP connections at once.
    pub fn new(
        poller: &Poller,
        listeners: Vec<(TcpListener, Service)>,
        udp: Vec<UdpSocket>,
        max_connections: usize,
        page: PageFn,
        stats: Arc<LoopStats>,
    ) -> io::Result<EventLoop> {
        for (i, (l, _)) in listeners.iter().enumerate() {
            l.set_nonblocking(true)?;
            poller.register(l, i as u64)?;
        }
        if listeners.len() + udp.len() > 1024 {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "too many listening sockets",
            ));
        }
        for (i, u) in udp.iter().enumerate() {
            u.set_nonblocking(true)?;
            poller.register(u, UDP_TOKEN - i as u64)?;
        }
        Ok(EventLoop {
            listeners,
            udp,
            conns: Vec::new(),
            free: Vec::new(),
            max_connections,
            page,
            stats,
            scratch: vec![0u8; services::CHUNK],
        })
    }

    /// Run on a thread of its own until the stack stops (the poller then
    /// fails).
    pub fn run(&mut self, poller: &Poller) -> io::Error {
        let mut events: Vec<PollEvent> = Vec::with_capacity(1024);
        loop {
            events.clear();
            if let Err(e) = poller.wait(&mut events, None) {
                return e;
            }
            self.handle(poller, &events);
        }
    }

    /// Serve one batch of events.
    pub fn handle(&mut self, poller: &Poller, events: &[PollEvent]) {
        for ev in events {
            let udp_first = UDP_TOKEN + 1 - self.udp.len() as u64;
            match ev.token {
                t if (udp_first..=UDP_TOKEN).contains(&t) => {
                    self.on_udp(poller, (UDP_TOKEN - t) as usize)
                }
                t if t < CONN_BASE => self.on_listener(poller, t as usize),
                t => self.on_conn((t - CONN_BASE) as usize),
            }
        }
    }

    fn on_listener(&mut self, poller: &Poller, idx: usize) {
        for _ in 0..ACCEPT_BURST {
            let Some((l, service)) = self.listeners.get(idx) else {
                return;
            };
            let service = *service;
            let (stream, peer) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
                    ) =>
                {
                    // The connection died before we took it.
                    continue;
                }
                Err(e) => {
                    tracing::warn!(service = service.name(), "accept failed: {e}");
                    return;
                }
            };
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let active = self.stats.active.load(Ordering::Relaxed);
            if active >= self.max_connections {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(service = service.name(), %peer, "too many connections ({active}); closing");
                continue;
            }
            if let Err(e) = self.adopt(poller, stream, service) {
                tracing::warn!(service = service.name(), %peer, "cannot serve: {e}");
            }
        }
        // More may be waiting: the listener got no new event for them, so
        // come back to it after the other events of this round.
        if let Some((l, _)) = self.listeners.get(idx) {
            let _ = poller.register(l, idx as u64);
        }
    }

    fn adopt(&mut self, poller: &Poller, stream: TcpStream, service: Service) -> io::Result<()> {
        stream.set_nonblocking(true)?;
        let _ = stream.set_nodelay(true);
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        // Registering reports the connection at once (it is writable).
        if let Err(e) = poller.register(&stream, CONN_BASE + i as u64) {
            self.free.push(i);
            return Err(e);
        }
        if let Some(slot) = self.conns.get_mut(i) {
            *slot = Some(Conn {
                stream,
                session: Session::new(service),
                service,
            });
        }
        self.stats.active.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(service = service.name(), "connection");
        Ok(())
    }

    fn on_conn(&mut self, i: usize) {
        let Some(Some(c)) = self.conns.get_mut(i) else {
            // A late event for a connection already gone.
            return;
        };
        let r = c
            .session
            .drive(&mut &c.stream, &mut self.scratch, &*self.page);
        let service = c.service;
        match r {
            Ok(None) => return,
            Ok(Some(what)) => tracing::debug!(service = service.name(), "closed: {what}"),
            Err(e) => tracing::debug!(service = service.name(), "ended: {e}"),
        }
        // Dropping the stream closes it (FIN after what was written) and
        // deregisters it.
        if let Some(slot) = self.conns.get_mut(i) {
            *slot = None;
        }
        self.free.push(i);
        self.stats.active.fetch_sub(1, Ordering::Relaxed);
    }

    /// RFC 862 UDP echo: "When a datagram is received, the data from it is
    /// sent back in an answering datagram."
    fn on_udp(&mut self, poller: &Poller, idx: usize) {
        let Some(u) = self.udp.get(idx) else { return };
        // Bounded: a flood must not keep the loop from its connections.
        for _ in 0..ACCEPT_BURST {
            match u.recv_from(&mut self.scratch) {
                Ok((n, from)) => {
                    let data = self.scratch.get(..n).unwrap_or(&[]);
                    if let Err(e) = u.send_to(data, from) {
                        tracing::debug!(%from, "udp echo reply failed: {e}");
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => {
                    tracing::debug!("udp echo: {e}");
                    return;
                }
            }
        }
        // Datagrams left: look again after the other events.
        let _ = poller.register(u, UDP_TOKEN - idx as u64);
    }
}
