//! Urgent data, receive side (RFC 9293 3.8.5, 3.10.7.4 "sixth, check the
//! URG bit"), with Linux's socket semantics: the urgent pointer marks one
//! octet, which leaves the stream (it is read with `MSG_OOB`), and a read
//! never crosses the mark.
//!
//! RFC 9293 3.8.5: "the urgent pointer points to the sequence number of
//! the octet following the urgent data" (MUST-62), and "A TCP
//! implementation MUST support a sequence of urgent data of any length"
//! (MUST-31) and "MUST inform the application layer asynchronously
//! whenever it receives an urgent pointer and there was previously no
//! pending urgent data" (MUST-32). As Linux (and BSD) do, the last urgent
//! octet, the one before the pointer, is the out-of-band byte; the reads
//! of the ordinary stream stop in front of it (the "mark") and then skip
//! it (Linux `tcp_recvmsg` without `SO_OOBINLINE`), while `splice`
//! (Linux `tcp_read_sock`) stops at the mark without skipping. With
//! `SO_OOBINLINE` the octet stays in the stream: reads still stop in
//! front of the mark, and read on through it from there.

use ustack_wire::tcp::SeqNum;

use super::conn::Connection;
use super::State;
use super::TcpError;

/// Pending urgent data (Linux `urg_seq` and `urg_data`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Urgent {
    /// The out-of-band octet's sequence number (the urgent pointer less
    /// one, Linux `urg_seq`).
    seq: SeqNum,
    /// The octet, once received (Linux `TCP_URG_VALID`); None while the
    /// pointer points ahead of the data (`TCP_URG_NOTYET`).
    byte: Option<u8>,
    /// Already read with `MSG_OOB` (Linux `TCP_URG_READ`).
    read: bool,
}

/// Why `MSG_OOB` read nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OobError {
    /// No urgent data, or it was read already (Linux: EINVAL).
    None,
    /// The pointer came, its octet not yet (Linux: EAGAIN; such a read
    /// never blocks).
    NotYet,
    /// The stream ended first (Linux: 0).
    Eof,
}

impl Connection {
    /// Sequence number of the next octet the application reads (Linux
    /// `copied_seq`).
    fn read_seq(&self) -> SeqNum {
        let fin = usize::from(self.rcv.fin_received);
        self.rcv.nxt - (self.rcv.queue.ring.len() + fin)
    }

    /// RFC 9293 3.10.7.4, sixth, ESTABLISHED, FIN-WAIT-1, FIN-WAIT-2: "If
    /// the URG bit is set, RCV.UP <- max(RCV.UP,SEG.UP), and signal the
    /// user that the remote side has urgent data if the urgent pointer
    /// (RCV.UP) is in advance of the data consumed." Then, as Linux
    /// `tcp_urg`, take the out-of-band octet if this segment carries it.
    pub(super) fn check_urgent(&mut self, seq: SeqNum, up: Option<u16>, payload: &[u8]) {
        if let Some(up) = up {
            if matches!(
                self.state(),
                State::Established | State::FinWait1 | State::FinWait2
            ) {
                self.new_urgent_pointer(seq, up);
            }
        }
        if let Some(u) = &mut self.rcv.urg {
            if u.byte.is_none() {
                let off = u.seq.wrapping_sub(seq) as usize;
                if let Some(&b) = payload.get(off) {
                    u.byte = Some(b);
                }
            }
        }
    }

    /// Linux `tcp_check_urg` (with `tcp_stdurg` off, its default): the
    /// out-of-band octet is the one before the pointer. A pointer of 0 is
    /// ignored, as BSD ignores it (`th_urp` must be nonzero): it would
    /// say that urgent data ended before the segment that carries it
    /// (Linux takes SEG.SEQ's octet as urgent then).
    fn new_urgent_pointer(&mut self, seq: SeqNum, up: u16) {
        if up == 0 {
            return;
        }
        let ptr = seq + usize::from(up - 1);
        let copied = self.read_seq();
        // "Ignore urgent data that we've already seen and read", and do
        // not replay a pointer to data already received.
        if copied.gt(ptr) || ptr.lt(self.rcv.nxt) {
            return;
        }
        // A newer pointer only.
        if self.rcv.urg.is_some_and(|u| !ptr.gt(u.seq)) {
            return;
        }
        // The previous out-of-band octet is next to read: it leaves the
        // stream now, or the reads would return it as data.
        if self.rcv.urg.is_some_and(|u| u.seq == copied)
            && !self.rcv.urg_inline
            && copied != self.rcv.nxt
        {
            self.skip_oob_octet();
        }
        self.rcv.urg = Some(Urgent {
            seq: ptr,
            byte: None,
            read: false,
        });
    }

    /// Drop the out-of-band octet at the head of the readable data.
    fn skip_oob_octet(&mut self) {
        let before = self.rcv_wnd_available();
        self.rcv
            .queue
            .ring
            .read_with(|a, b| (a.len() + b.len()).min(1));
        self.maybe_window_update(before);
    }

    /// Readable octets in front of the urgent mark, if one is pending
    /// (Linux reads stop there while `urg_data` is set).
    pub fn urgent_mark(&self) -> Option<usize> {
        let u = self.rcv.urg?;
        let off = u.seq.diff(self.read_seq());
        usize::try_from(off).ok()
    }

    /// Forget urgent data the reads went past (Linux `tcp_recvmsg`: "if
    /// (tp->urg_data && after(tp->copied_seq, tp->urg_seq)) urg_data = 0").
    pub(super) fn forget_passed_urgent(&mut self) {
        if self.rcv.urg.is_some() && self.urgent_mark().is_none() {
            self.rcv.urg = None;
        }
    }

    /// Before a read of the ordinary stream: at the mark, the out-of-band
    /// octet leaves the stream (Linux `tcp_recvmsg` without
    /// `SO_OOBINLINE`). Returns how many octets the read may take.
    pub(super) fn urgent_read_limit(&mut self) -> usize {
        match self.urgent_mark() {
            Some(0) if self.rcv.urg_inline => usize::MAX,
            Some(0) if !self.rcv.queue.ring.is_empty() => {
                self.skip_oob_octet();
                self.forget_passed_urgent();
                usize::MAX
            }
            m => m.unwrap_or(usize::MAX),
        }
    }

    /// `SO_OOBINLINE`.
    pub fn set_oob_inline(&mut self, on: bool) {
        self.rcv.urg_inline = on;
    }

    /// Copy readable data without consuming it (`MSG_PEEK`): up to the
    /// mark, or past the out-of-band octet when at it (Linux skips it on a
    /// peek too, without consuming it). `Ok(0)` at end of stream.
    pub fn peek(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        let (from, limit) = match self.urgent_mark() {
            Some(0) if self.rcv.urg_inline => (0, usize::MAX),
            Some(0) => (1, usize::MAX),
            Some(n) => (0, n),
            None => (0, usize::MAX),
        };
        if self.rcv.queue.ring.len() > from {
            let n = buf.len().min(limit);
            return Ok(self.rcv.queue.ring.peek(from, &mut buf[..n]));
        }
        // Nothing (or only the out-of-band octet) to read.
        self.read_end()
    }

    /// Read up to the urgent mark without skipping the out-of-band octet
    /// (Linux `tcp_read_sock`, what `splice` reads with): `f` is lent the
    /// readable octets in front of the mark, as by
    /// [`Connection::recv_with`]; `Ok(0)` without calling `f` at the mark
    /// (Linux: "Stop reading if we hit a patch of urgent data").
    pub fn read_to_mark_with(
        &mut self,
        f: impl FnOnce(&[u8], &[u8]) -> usize,
    ) -> Result<usize, TcpError> {
        if self.urgent_mark() == Some(0) && !self.rcv.queue.ring.is_empty() {
            return Ok(0);
        }
        if self.rcv.queue.ring.is_empty() {
            return self.read_end();
        }
        let limit = self.urgent_mark().unwrap_or(usize::MAX);
        let before = self.rcv_wnd_available();
        let n = self
            .rcv
            .queue
            .ring
            .read_with(|a, b| lend_limited(a, b, limit, f));
        self.maybe_window_update(before);
        Ok(n)
    }

    /// `recv(MSG_OOB)` (Linux `tcp_recv_urg`): the out-of-band octet, once;
    /// `peek` leaves it to be read again.
    pub fn recv_oob(&mut self, peek: bool) -> Result<u8, OobError> {
        if self.rcv.urg_inline {
            // "No URG data to read" (Linux: EINVAL with SO_OOBINLINE).
            return Err(OobError::None);
        }
        match &mut self.rcv.urg {
            Some(u) if !u.read => match u.byte {
                Some(b) => {
                    u.read |= !peek;
                    Ok(b)
                }
                None if self.rcv.fin_received => Err(OobError::Eof),
                None => Err(OobError::NotYet),
            },
            _ => Err(OobError::None),
        }
    }

    /// `SIOCATMARK`: the next octet to read is the out-of-band one.
    pub fn at_urgent_mark(&self) -> bool {
        self.urgent_mark() == Some(0)
    }
}

/// Lend `f` at most `limit` octets of `a` then `b` (where `b` continues
/// `a`); returns what `f` consumed, at most what it was lent.
pub(super) fn lend_limited(
    a: &[u8],
    b: &[u8],
    limit: usize,
    f: impl FnOnce(&[u8], &[u8]) -> usize,
) -> usize {
    let (a, b) = if limit < a.len() {
        (a.get(..limit).unwrap_or(a), &[][..])
    } else {
        (a, b.get(..limit - a.len()).unwrap_or(b))
    };
    f(a, b).min(a.len() + b.len())
}
