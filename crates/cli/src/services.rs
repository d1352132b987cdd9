//! The classic small services (RFC 862 echo, RFC 863 discard, RFC 864 chargen)
//! and the deterministic byte pattern served by `/bytes/N`.
//!
//! Everything here is generic over `Read`/`Write`, so the same code runs on
//! ustack sockets, on kernel `std::net` sockets (unit tests, the bench's
//! kernel peer) or on in-memory buffers.

use std::io::{self, ErrorKind, Read, Write};
use std::sync::OnceLock;

/// Size of the buffers the services use per connection.
pub const CHUNK: usize = 64 * 1024;

/// A stream whose received bytes can be thrown away. The default reads
/// them into the caller's scratch buffer; ustack's sockets drop them from
/// the receive buffer without copying them anywhere
/// ([`ustack_net::TcpStream::read_with`]).
pub trait Skip: Read {
    /// Consume what the stream has now, like `read` (`Ok(0)` at the end of
    /// the stream, `WouldBlock` when nothing is there yet).
    fn skip(&mut self, scratch: &mut [u8]) -> io::Result<usize> {
        self.read(scratch)
    }

    /// Send nothing more (a FIN after what is queued), reading on: for a
    /// close that must not be a reset while the peer still sends. The
    /// default, for streams without one, does nothing.
    fn shutdown_write(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Skip for &ustack_net::TcpStream {
    fn skip(&mut self, _scratch: &mut [u8]) -> io::Result<usize> {
        self.read_with(|a, b| a.len() + b.len())
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl Skip for ustack_net::TcpStream {
    fn skip(&mut self, scratch: &mut [u8]) -> io::Result<usize> {
        (&*self).skip(scratch)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        (&*self).shutdown_write()
    }
}

impl Skip for std::net::TcpStream {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

/// Whether a read or write error means "try again later".
fn would_block(e: &io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock
}

/// Write as much of `data` as `stream` takes now; returns the count
/// (short when the stream said `WouldBlock`).
fn write_some<W: Write>(stream: &mut W, data: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while let Some(rest) = data.get(done..).filter(|r| !r.is_empty()) {
        match stream.write(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if would_block(&e) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// RFC 862 echo as a state machine: "Once a connection is established any
/// data received is sent back. This continues until the calling user
/// terminates the connection." Bytes read are written back at once from
/// the caller's scratch buffer; only what the stream does not take yet is
/// kept (reading stops until it is gone), so an idle connection holds no
/// buffer.
#[derive(Debug, Default)]
pub struct Echo {
    held: Vec<u8>,
    held_pos: usize,
    total: u64,
}

impl Echo {
    /// Make progress; `Ok(Some(bytes echoed))` once the peer finished
    /// sending and everything went back, `Ok(None)` at `WouldBlock`.
    pub fn drive<S: Read + Write>(
        &mut self,
        stream: &mut S,
        scratch: &mut [u8],
    ) -> io::Result<Option<u64>> {
        loop {
            if self.held_pos < self.held.len() {
                let rest = self.held.get(self.held_pos..).unwrap_or(&[]);
                self.held_pos += write_some(stream, rest)?;
                if self.held_pos < self.held.len() {
                    return Ok(None);
                }
                self.held = Vec::new();
                self.held_pos = 0;
            }
            let n = match stream.read(scratch) {
                Ok(0) => {
                    stream.flush()?;
                    return Ok(Some(self.total));
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(e),
            };
            self.total += n as u64;
            let data = scratch.get(..n).unwrap_or(&[]);
            let w = write_some(stream, data)?;
            if w < n {
                self.held = data.get(w..).unwrap_or(&[]).to_vec();
                self.held_pos = 0;
            }
        }
    }
}

/// RFC 863 discard as a state machine: "Once a connection is established
/// any data received is thrown away. No response is sent."
#[derive(Debug, Default)]
pub struct Discard {
    total: u64,
}

impl Discard {
    /// Make progress; `Ok(Some(bytes discarded))` at end of stream,
    /// `Ok(None)` at `WouldBlock`.
    pub fn drive<S: Skip>(
        &mut self,
        stream: &mut S,
        scratch: &mut [u8],
    ) -> io::Result<Option<u64>> {
        loop {
            match stream.skip(scratch) {
                Ok(0) => return Ok(Some(self.total)),
                Ok(n) => self.total += n as u64,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Printable ASCII characters used by chargen (RFC 864: "the 95 printing
/// characters").
const PRINTABLE: usize = 95;
/// RFC 864: "72 character lines of the ASCII printing characters".
const LINE_CHARS: usize = 72;
/// One line plus CR LF.
const LINE_LEN: usize = LINE_CHARS + 2;
/// The pattern repeats after 95 lines.
pub const CHARGEN_CYCLE: usize = PRINTABLE * LINE_LEN;

/// One full cycle of the RFC 864 pattern: line `k` holds the 72 printable
/// characters starting at the `k`-th one (wrapping), followed by CR LF.
pub fn chargen_cycle() -> &'static [u8] {
    static CYCLE: OnceLock<Vec<u8>> = OnceLock::new();
    CYCLE.get_or_init(|| {
        let mut v = Vec::with_capacity(CHARGEN_CYCLE);
        for line in 0..PRINTABLE {
            for c in 0..LINE_CHARS {
                // 32 ..= 126 are the printing characters.
                v.push(b' ' + ((line + c) % PRINTABLE) as u8);
            }
            v.extend_from_slice(b"\r\n");
        }
        v
    })
}

/// Several cycles of the chargen pattern in one buffer, so each write is large.
fn chargen_block() -> &'static [u8] {
    static BLOCK: OnceLock<Vec<u8>> = OnceLock::new();
    BLOCK.get_or_init(|| {
        let reps = CHUNK / CHARGEN_CYCLE + 1;
        chargen_cycle()
            .iter()
            .copied()
            .cycle()
            .take(reps * CHARGEN_CYCLE)
            .collect()
    })
}

/// RFC 864 chargen as a state machine: "Once a connection is established
/// the server is to send a continual stream of data ... until the calling
/// user terminates the connection." At most `limit` bytes (None = until
/// the peer goes away; a reset or broken pipe then counts as the normal
/// end).
#[derive(Debug, Default)]
pub struct Chargen {
    sent: u64,
    limit: Option<u64>,
}

impl Chargen {
    pub fn new(limit: Option<u64>) -> Self {
        Chargen { sent: 0, limit }
    }

    /// Make progress; `Ok(Some(bytes sent))` at the end, `Ok(None)` at
    /// `WouldBlock`.
    pub fn drive<W: Write>(&mut self, stream: &mut W) -> io::Result<Option<u64>> {
        let big = chargen_block();
        loop {
            let offset = (self.sent % CHARGEN_CYCLE as u64) as usize;
            let mut want = big.len() - offset;
            if let Some(limit) = self.limit {
                let left = limit.saturating_sub(self.sent);
                if left == 0 {
                    return Ok(Some(self.sent));
                }
                want = want.min(usize::try_from(left).unwrap_or(usize::MAX));
            }
            let slice = big.get(offset..offset + want).unwrap_or(&[]);
            match stream.write(slice) {
                Ok(0) => return Ok(Some(self.sent)),
                Ok(n) => self.sent += n as u64,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => return Ok(None),
                Err(e)
                    if self.limit.is_none()
                        && matches!(
                            e.kind(),
                            ErrorKind::BrokenPipe
                                | ErrorKind::ConnectionReset
                                | ErrorKind::ConnectionAborted
                        ) =>
                {
                    return Ok(Some(self.sent))
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Period of the `/bytes/N` pattern: byte `i` of the body is `(i % 251) as u8`.
/// 251 is prime, so the pattern does not line up with any power-of-two
/// buffer or segment size and a misplaced chunk is detected.
pub const PATTERN_PERIOD: usize = 251;

/// A buffer of whole pattern periods (about 64 KB) starting at pattern byte 0.
fn pattern_block() -> &'static [u8] {
    static BLOCK: OnceLock<Vec<u8>> = OnceLock::new();
    BLOCK.get_or_init(|| {
        let periods = CHUNK / PATTERN_PERIOD;
        (0..periods * PATTERN_PERIOD)
            .map(|i| (i % PATTERN_PERIOD) as u8)
            .collect()
    })
}

/// `len` bytes of the pattern (starting at byte 0) to write, resumable
/// across `WouldBlock`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pattern {
    left: u64,
    sent: u64,
}

impl Pattern {
    pub fn new(len: u64) -> Self {
        Pattern { left: len, sent: 0 }
    }

    /// Write what `w` takes; `Ok(true)` once all `len` bytes are written,
    /// `Ok(false)` at `WouldBlock`.
    pub fn drive<W: Write>(&mut self, w: &mut W) -> io::Result<bool> {
        let block = pattern_block();
        while self.left > 0 {
            // The block holds whole periods: slicing it at the offset into
            // the period continues the pattern.
            let off = (self.sent % PATTERN_PERIOD as u64) as usize;
            let room = block.len().saturating_sub(off);
            let n = usize::try_from(self.left).unwrap_or(usize::MAX).min(room);
            match w.write(block.get(off..off + n).unwrap_or(&[])) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(k) => {
                    self.left -= k as u64;
                    self.sent += k as u64;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if would_block(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drive a state machine on a blocking stream to its end (a `WouldBlock`
    /// there is a timeout, reported as such).
    fn to_end(r: io::Result<Option<u64>>) -> io::Result<u64> {
        r?.ok_or_else(|| ErrorKind::WouldBlock.into())
    }

    /// RFC 862 echo on a blocking stream. Returns the number of bytes echoed.
    fn echo<S: Read + Write>(stream: &mut S) -> io::Result<u64> {
        let mut scratch = vec![0u8; CHUNK];
        to_end(Echo::default().drive(stream, &mut scratch))
    }

    /// RFC 863 discard on a blocking stream. Returns the number of bytes discarded.
    fn discard<S: Skip>(stream: &mut S) -> io::Result<u64> {
        let mut scratch = vec![0u8; CHUNK];
        to_end(Discard::default().drive(stream, &mut scratch))
    }

    /// RFC 864 chargen on a blocking stream. Returns bytes sent.
    fn chargen<W: Write>(stream: &mut W, limit: Option<u64>) -> io::Result<u64> {
        to_end(Chargen::new(limit).drive(stream))
    }

    use std::net::{TcpListener, TcpStream};
    use std::thread;

    #[test]
    fn chargen_cycle_matches_rfc864_sample() {
        let c = chargen_cycle();
        assert_eq!(c.len(), CHARGEN_CYCLE);
        // RFC 864 sample first line: !"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\]^_`abcdefg
        // (the RFC's sample starts at '!'; ours starts at ' ', the first printing char).
        assert_eq!(&c[..8], b" !\"#$%&'");
        assert_eq!(&c[72..74], b"\r\n");
        // Second line is shifted by one.
        assert_eq!(&c[74..77], b"!\"#");
        // Last line starts at '~' and wraps to ' '.
        let last = &c[94 * 74..];
        assert_eq!(&last[..3], b"~ !");
        assert!(c
            .iter()
            .all(|&b| (32..=126).contains(&b) || b == b'\r' || b == b'\n'));
    }

    #[test]
    fn chargen_limit_and_continuity() {
        let mut out = Vec::new();
        let n = chargen(&mut out, Some(3 * CHARGEN_CYCLE as u64 + 17)).unwrap();
        assert_eq!(n as usize, out.len());
        assert_eq!(out.len(), 3 * CHARGEN_CYCLE + 17);
        let c = chargen_cycle();
        for (i, b) in out.iter().enumerate() {
            assert_eq!(*b, c[i % CHARGEN_CYCLE], "byte {i}");
        }
    }

    #[test]
    fn pattern_write_is_exact() {
        for len in [0u64, 1, 250, 251, 252, 65_535, 200_001] {
            let mut out = Vec::new();
            assert!(Pattern::new(len).drive(&mut out).unwrap());
            assert_eq!(out.len() as u64, len);
            for (i, b) in out.iter().enumerate() {
                assert_eq!(*b, (i % 251) as u8, "len {len} byte {i}");
            }
        }
    }

    #[test]
    fn echo_and_discard_over_kernel_tcp() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let srv = thread::spawn(move || {
            let echoed = {
                let (mut s, _) = l.accept().unwrap();
                echo(&mut s).unwrap()
            };
            let (mut s2, _) = l.accept().unwrap();
            let discarded = discard(&mut s2).unwrap();
            (echoed, discarded)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let mut c2 = c.try_clone().unwrap();
        let data2 = data.clone();
        let w = thread::spawn(move || {
            c2.write_all(&data2).unwrap();
            c2.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        w.join().unwrap();
        assert_eq!(back, data);
        let mut d = TcpStream::connect(addr).unwrap();
        d.write_all(&data[..12345]).unwrap();
        drop(d);
        let (e, dis) = srv.join().unwrap();
        assert_eq!(e, 300_000);
        assert_eq!(dis, 12345);
    }

    #[test]
    fn chargen_over_kernel_tcp_until_peer_closes() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let srv = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            chargen(&mut s, None)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let mut got = vec![0u8; 100_000];
        c.read_exact(&mut got).unwrap();
        drop(c);
        let sent = srv.join().unwrap().unwrap();
        assert!(sent >= 100_000);
        let cyc = chargen_cycle();
        for (i, b) in got.iter().enumerate() {
            assert_eq!(*b, cyc[i % CHARGEN_CYCLE]);
        }
    }
}
