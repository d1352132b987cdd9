//! The send side: the send buffer and the decision of how much to send now
//! (Nagle, sender-side silly window syndrome avoidance).

use std::collections::VecDeque;

use ustack_wire::tcp::SeqNum;

use super::sendbuf::SendBuf;

/// Bytes the application queued, from the oldest unacknowledged byte on.
/// `seq` is the sequence number of the first byte held; a FIN, once queued,
/// sits right after the last byte.
#[derive(Debug, Clone)]
pub(crate) struct SendQueue {
    pub(crate) buf: SendBuf,
    pub(crate) seq: SeqNum,
    pub(crate) fin_queued: bool,
    /// Marks in the queued data, not yet acknowledged (see [`Marks`]).
    /// Boxed and absent until used: most connections never have one, and
    /// an idle connection must stay small (8 bytes here, not 64).
    pub(crate) marks: Option<Box<Marks>>,
}

/// Positions in the send queue that Linux's skbs would carry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Marks {
    /// Ends of records written with `MSG_EOR`: no segment carries bytes
    /// from both sides of one (Linux's `eor` skbs).
    pub(crate) eor: VecDeque<SeqNum>,
    /// Ends of skbs that Linux's `tcp_sendmsg` marked with PSH in the
    /// middle of a write (`forced_push` -> `tcp_mark_push`): the segment
    /// ending there carries PSH, sent or resent.
    pub(crate) push: VecDeque<SeqNum>,
}

/// Most marks of each kind kept (a bound on memory; later ones are lost).
const MAX_MARKS: usize = 4096;

impl SendQueue {
    pub(crate) fn new(capacity: usize, first: SeqNum) -> Self {
        SendQueue {
            buf: SendBuf::new(capacity),
            seq: first,
            fin_queued: false,
            marks: None,
        }
    }

    /// Mark the end of the data queued so far as the end of a record.
    pub(crate) fn mark_record_end(&mut self) {
        let end = self.seq + self.buf.len();
        let marks = &mut self.marks.get_or_insert_with(Default::default).eor;
        if marks.back() != Some(&end) && marks.len() < MAX_MARKS {
            marks.push_back(end);
        }
    }

    /// The first record end after `seq`, if any.
    pub(crate) fn record_end_after(&self, seq: SeqNum) -> Option<SeqNum> {
        self.marks.as_ref()?.eor.iter().copied().find(|m| m.gt(seq))
    }

    /// `seq` ends a record (`MSG_EOR`).
    pub(crate) fn is_record_end(&self, seq: SeqNum) -> bool {
        self.marks.as_ref().is_some_and(|m| m.eor.contains(&seq))
    }

    /// Linux `tcp_mark_push` in the middle of a write: the skb that ends
    /// where the queued data ends now carries PSH.
    pub(crate) fn mark_push(&mut self) {
        let end = self.seq + self.buf.len();
        let marks = &mut self.marks.get_or_insert_with(Default::default).push;
        if marks.back() != Some(&end) && marks.len() < MAX_MARKS {
            marks.push_back(end);
        }
    }

    /// Drop the last push mark if it lies at or after `from` (the skb
    /// that carried it grew, or a new write into it cleared it).
    pub(crate) fn retract_push_mark(&mut self, from: SeqNum) {
        if let Some(m) = self.marks.as_mut() {
            if m.push.back().is_some_and(|e| e.ge(from)) {
                m.push.pop_back();
            }
        }
        self.drop_empty_marks();
    }

    /// `seq` ends an skb marked with PSH mid-write.
    pub(crate) fn is_push_mark(&self, seq: SeqNum) -> bool {
        self.marks.as_ref().is_some_and(|m| m.push.contains(&seq))
    }

    fn drop_empty_marks(&mut self) {
        if self
            .marks
            .as_ref()
            .is_some_and(|m| m.eor.is_empty() && m.push.is_empty())
        {
            self.marks = None;
        }
    }

    /// Sequence number of the FIN (valid once `fin_queued`).
    pub(crate) fn fin_seq(&self) -> SeqNum {
        self.seq + self.buf.len()
    }

    /// Drop data acknowledged up to `ack`; returns data bytes acknowledged.
    pub(crate) fn ack_to(&mut self, ack: SeqNum) -> usize {
        if ack.le(self.seq) {
            return 0;
        }
        let n = (ack.wrapping_sub(self.seq) as usize).min(self.buf.len());
        self.buf.consume(n);
        self.seq += n;
        if let Some(m) = self.marks.as_mut() {
            for marks in [&mut m.eor, &mut m.push] {
                while marks.front().is_some_and(|m| m.le(self.seq)) {
                    marks.pop_front();
                }
            }
        }
        self.drop_empty_marks();
        n
    }
}

/// What the window and buffer allow for one segment of new data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendCheck {
    /// Bytes that could go in this segment.
    pub(crate) len: usize,
    /// Bytes queued and not yet sent from this position.
    pub(crate) avail: usize,
    /// Full-sized segment payload.
    pub(crate) max_payload: usize,
    /// Nothing unacknowledged is in flight.
    pub(crate) idle: bool,
    /// A segment shorter than the MSS is in flight (Linux
    /// `tcp_minshall_check`).
    pub(crate) small_in_flight: bool,
    pub(crate) nodelay: bool,
    /// A FIN follows the data (the application closed: push everything).
    pub(crate) fin_queued: bool,
    /// Largest window the peer ever offered.
    pub(crate) max_snd_wnd: usize,
    /// `TCP_CORK` or `MSG_MORE`: only full-sized segments (or the FIN).
    pub(crate) corked: bool,
}

/// RFC 1122 4.2.3.4 (sender SWS avoidance, with Nagle's algorithm, RFC 896,
/// as the bracketed condition): "send data ... (1) if a maximum-sized segment
/// can be sent, i.e, if: min(D,U) >= Eff.snd.MSS; (2) or if the data is
/// pushed and all queued data can be sent now, i.e., if: [SND.NXT = SND.UNA
/// and] PUSHED and D <= U; (3) or if at least a fraction Fs of the maximum
/// window can be sent, i.e., if: [SND.NXT = SND.UNA and] min(D,U) >= Fs *
/// Max(SND.WND); (4) or if data is PUSHed and the override timeout occurs."
/// Every write is treated as pushed (as sockets do); (4) is the persist
/// timer's `force` in the caller. With `TcpConfig::nagle_minshall` the
/// bracketed condition is Minshall's variant, as Linux's
/// (`tcp_nagle_check`): a short segment waits only while an earlier short
/// segment is unacknowledged (`small_in_flight`), not whenever anything
/// is.
pub(crate) fn sws_allows(c: &SendCheck) -> bool {
    if c.len == 0 {
        return false;
    }
    if c.corked && !c.fin_queued {
        return c.len >= c.max_payload;
    }
    let nagle_ok = c.nodelay || c.idle || c.fin_queued || !c.small_in_flight;
    c.len >= c.max_payload
        || (c.len == c.avail && nagle_ok)
        || (c.len >= c.max_snd_wnd / 2 && c.max_snd_wnd > 0 && nagle_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(len: usize, avail: usize, idle: bool, nodelay: bool) -> SendCheck {
        SendCheck {
            len,
            avail,
            max_payload: 1000,
            idle,
            small_in_flight: !idle,
            nodelay,
            fin_queued: false,
            max_snd_wnd: 64_000,
            corked: false,
        }
    }

    #[test]
    fn nagle_holds_small_segment_while_data_in_flight() {
        assert!(
            sws_allows(&check(1000, 5000, false, false)),
            "full segment always goes"
        );
        assert!(
            !sws_allows(&check(10, 10, false, false)),
            "Nagle holds a runt"
        );
        assert!(
            sws_allows(&check(10, 10, true, false)),
            "idle connection sends"
        );
        assert!(sws_allows(&check(10, 10, false, true)), "nodelay sends");
        assert!(
            !sws_allows(&check(10, 5000, true, true)),
            "window-limited runt waits (SWS)"
        );
    }

    #[test]
    fn send_queue_acks() {
        let mut q = SendQueue::new(100, SeqNum(u32::MAX - 2));
        assert_eq!(q.buf.push(b"hello"), 5);
        assert_eq!(q.fin_seq(), SeqNum(2));
        assert_eq!(q.ack_to(SeqNum(u32::MAX)), 2);
        assert_eq!(q.ack_to(SeqNum(100)), 3);
        assert_eq!(q.seq, SeqNum(2));
    }
}
