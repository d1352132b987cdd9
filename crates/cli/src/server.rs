//! Runs the classic services on any socket implementation: ustack's sockets
//! for `ustack serve` (from one event loop, see `evloop.rs`), kernel
//! `std::net` sockets for the bench's kernel peer and for tests (one thread
//! per connection, bounded by [`MAX_CONNECTIONS`]). Each service is a
//! [`Session`], a state machine that runs on blocking and non-blocking
//! streams alike.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use crate::{http, services};

/// Connections served at once (over all services); more are closed at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// A listening TCP socket (std::net-like).
pub trait Listener: Send + 'static {
    type Stream: Read + Write + services::Skip + Send + 'static;
    fn accept(&self) -> io::Result<(Self::Stream, SocketAddr)>;
}

/// A bound UDP socket (std::net-like).
pub trait Datagram: Send + 'static {
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)>;
    fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize>;
}

impl Listener for std::net::TcpListener {
    type Stream = std::net::TcpStream;
    fn accept(&self) -> io::Result<(Self::Stream, SocketAddr)> {
        let (s, a) = std::net::TcpListener::accept(self)?;
        let _ = s.set_nodelay(true);
        Ok((s, a))
    }
}

impl Datagram for std::net::UdpSocket {
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        std::net::UdpSocket::recv_from(self, buf)
    }
    fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        std::net::UdpSocket::send_to(self, buf, to)
    }
}

/// Which service a listener runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Echo,
    Discard,
    Chargen,
    Http,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::Echo => "echo",
            Service::Discard => "discard",
            Service::Chargen => "chargen",
            Service::Http => "http",
        }
    }

    pub fn port(self) -> u16 {
        match self {
            Service::Echo => 7,
            Service::Discard => 9,
            Service::Chargen => 19,
            Service::Http => 80,
        }
    }
}

/// Renders the `/` page.
pub type PageFn = Arc<dyn Fn() -> String + Send + Sync>;

/// One connection's service, as a state machine over a stream.
#[derive(Debug)]
pub enum Session {
    Echo(services::Echo),
    Discard(services::Discard),
    Chargen(services::Chargen),
    Http(Box<http::HttpSession>),
}

impl Session {
    pub fn new(service: Service) -> Session {
        match service {
            Service::Echo => Session::Echo(services::Echo::default()),
            Service::Discard => Session::Discard(services::Discard::default()),
            Service::Chargen => Session::Chargen(services::Chargen::new(None)),
            Service::Http => Session::Http(Box::default()),
        }
    }

    /// Make as much progress as `stream` allows (`scratch` is a buffer the
    /// caller lends for reads). `Ok(Some(summary))` when the service is
    /// finished with the connection, `Ok(None)` when the stream said
    /// `WouldBlock` (a non-blocking stream, or a timeout).
    pub fn drive<S: Read + Write + services::Skip>(
        &mut self,
        stream: &mut S,
        scratch: &mut [u8],
        page: &dyn Fn() -> String,
    ) -> io::Result<Option<String>> {
        Ok(match self {
            Session::Echo(e) => e
                .drive(stream, scratch)?
                .map(|n| format!("{n} bytes echoed")),
            Session::Discard(d) => d
                .drive(stream, scratch)?
                .map(|n| format!("{n} bytes discarded")),
            Session::Chargen(c) => c.drive(stream)?.map(|n| format!("{n} bytes sent")),
            Session::Http(h) => h.drive(stream, page)?.map(|n| format!("{n} requests")),
        })
    }
}

struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn take_slot(active: &Arc<AtomicUsize>) -> Option<Slot> {
    let prev = active.fetch_add(1, Ordering::AcqRel);
    if prev >= MAX_CONNECTIONS {
        active.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    Some(Slot(active.clone()))
}

/// Accept connections on `listener` forever, serving `service` on each in its
/// own thread. Returns only if `accept` fails for good.
pub fn run_tcp<L: Listener>(
    listener: L,
    service: Service,
    page: PageFn,
    active: Arc<AtomicUsize>,
) -> io::Error {
    loop {
        let (mut stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                continue
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) =>
            {
                // The connection died before we took it; keep listening.
                continue;
            }
            Err(e) => {
                tracing::debug!(service = service.name(), "accept ended: {e}");
                return e;
            }
        };
        let Some(slot) = take_slot(&active) else {
            tracing::warn!(service = service.name(), %peer, "too many connections; closing");
            continue;
        };
        let page = page.clone();
        let spawned = thread::Builder::new()
            .name(format!("{}-{peer}", service.name()))
            .stack_size(256 * 1024)
            .spawn(move || {
                let _slot = slot;
                tracing::debug!(service = service.name(), %peer, "connection");
                let mut scratch = vec![0u8; services::CHUNK];
                let r = Session::new(service).drive(&mut stream, &mut scratch, &*page);
                match r {
                    Ok(Some(what)) => {
                        tracing::debug!(service = service.name(), %peer, "closed: {what}")
                    }
                    Ok(None) => tracing::debug!(service = service.name(), %peer, "timed out"),
                    Err(e) => tracing::debug!(service = service.name(), %peer, "ended: {e}"),
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot spawn a connection thread: {e}");
        }
    }
}

/// RFC 862 UDP echo: "When a datagram is received, the data from it is sent
/// back in an answering datagram." Runs until the socket fails.
pub fn run_udp_echo<D: Datagram>(sock: D) -> io::Error {
    let mut buf = vec![0u8; 65536];
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                if let Err(e) = sock.send_to(buf.get(..n).unwrap_or(&[]), from) {
                    tracing::debug!(%from, "udp echo reply failed: {e}");
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::WouldBlock
                        | io::ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => {
                tracing::debug!("udp echo ended: {e}");
                return e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::time::Duration;

    #[test]
    fn services_run_on_kernel_sockets() {
        let active = Arc::new(AtomicUsize::new(0));
        let page: PageFn = Arc::new(|| "hello page\n".to_string());
        let mut addrs = Vec::new();
        for svc in [Service::Echo, Service::Http, Service::Chargen] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            addrs.push(l.local_addr().unwrap());
            let (p, a) = (page.clone(), active.clone());
            thread::spawn(move || run_tcp(l, svc, p, a));
        }
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let uaddr = u.local_addr().unwrap();
        thread::spawn(move || run_udp_echo(u));

        // 50 concurrent echo connections.
        let hs: Vec<_> = (0..50u8)
            .map(|k| {
                let a = addrs[0];
                thread::spawn(move || {
                    let mut s = TcpStream::connect(a).unwrap();
                    let msg = vec![k; 1000];
                    s.write_all(&msg).unwrap();
                    let mut back = vec![0; 1000];
                    s.read_exact(&mut back).unwrap();
                    assert_eq!(back, msg);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }

        let url: http::Url = format!("http://{}/", addrs[1]).parse().unwrap();
        let mut body = Vec::new();
        let r = http::get(TcpStream::connect(addrs[1]).unwrap(), &url, &mut body).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(body, b"hello page\n");

        let mut c = TcpStream::connect(addrs[2]).unwrap();
        let mut got = vec![0; 200];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got[..], &services::chargen_cycle()[..200]);

        let cu = UdpSocket::bind("127.0.0.1:0").unwrap();
        cu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        cu.send_to(b"ping!", uaddr).unwrap();
        let mut b = [0u8; 16];
        let (n, from) = cu.recv_from(&mut b).unwrap();
        assert_eq!(&b[..n], b"ping!");
        assert_eq!(from, uaddr);
    }

    /// An in-memory stream that hands out input and takes output a few
    /// bytes at a time, saying `WouldBlock` on every other call: what a
    /// non-blocking socket under load does.
    struct Choppy {
        input: Vec<u8>,
        pos: usize,
        output: Vec<u8>,
        calls: u64,
        /// Give EOF once the input is consumed.
        eof: bool,
    }

    impl Choppy {
        fn tick(&mut self) -> bool {
            self.calls += 1;
            self.calls.is_multiple_of(2)
        }
    }

    impl Read for Choppy {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.tick() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let rest = &self.input[self.pos..];
            if rest.is_empty() {
                return if self.eof {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            let n = rest.len().min(buf.len()).min(7);
            buf[..n].copy_from_slice(&rest[..n]);
            self.pos += n;
            Ok(n)
        }
    }

    impl services::Skip for Choppy {}

    impl Write for Choppy {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.tick() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(1000);
            self.output.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Drive a session until it finishes (bounded).
    fn run_choppy(service: Service, input: &[u8]) -> (String, Vec<u8>) {
        let mut s = Choppy {
            input: input.to_vec(),
            pos: 0,
            output: Vec::new(),
            calls: 0,
            eof: true,
        };
        let mut session = Session::new(service);
        let mut scratch = vec![0u8; 64];
        for _ in 0..1_000_000 {
            if let Some(what) = session
                .drive(&mut s, &mut scratch, &|| "page\n".to_string())
                .unwrap()
            {
                return (what, s.output);
            }
        }
        panic!("session never finished");
    }

    #[test]
    fn sessions_make_progress_across_would_block() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 13) as u8).collect();
        let (what, out) = run_choppy(Service::Echo, &data);
        assert_eq!(out, data, "echo is byte-exact");
        assert_eq!(what, "50000 bytes echoed");
        let (what, out) = run_choppy(Service::Discard, &data);
        assert!(out.is_empty());
        assert_eq!(what, "50000 bytes discarded");
        // Two pipelined requests, a body to discard in between, then close.
        let req = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /bytes/70000 HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let (what, out) = run_choppy(Service::Http, req);
        assert_eq!(what, "3 requests");
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 405 "), "{text:.80}");
        let body_at = text.find("application/octet-stream").unwrap();
        let start = body_at + text[body_at..].find("\r\n\r\n").unwrap() + 4;
        for i in 0..70_000usize {
            assert_eq!(out[start + i], (i % 251) as u8, "pattern byte {i}");
        }
        assert!(text.ends_with("page\n"), "{}", &text[text.len() - 40..]);
        // Chargen with a limit stops exactly there.
        let mut s = Choppy {
            input: Vec::new(),
            pos: 0,
            output: Vec::new(),
            calls: 0,
            eof: false,
        };
        let mut c = services::Chargen::new(Some(12_345));
        let mut done = None;
        for _ in 0..100_000 {
            done = c.drive(&mut s).unwrap();
            if done.is_some() {
                break;
            }
        }
        assert_eq!(done, Some(12_345));
        assert_eq!(s.output.len(), 12_345);
    }

    #[test]
    fn connection_slots_are_bounded() {
        let active = Arc::new(AtomicUsize::new(0));
        let slots: Vec<_> = (0..MAX_CONNECTIONS)
            .map(|_| take_slot(&active).unwrap())
            .collect();
        assert!(take_slot(&active).is_none());
        drop(slots);
        assert_eq!(active.load(Ordering::Acquire), 0);
        assert!(take_slot(&active).is_some());
    }
}
