//! The sender's scoreboard (RFC 6675 terms, RFC 8985 per-segment state):
//! every segment sent and not yet cumulatively acknowledged, with when it
//! was (re)sent, whether the receiver SACKed it (RFC 2018) and whether it
//! is deemed lost. Segments are kept in sequence order; SACK blocks and
//! retransmissions split them where their edges fall inside one.

use std::collections::VecDeque;

use ustack_wire::tcp::SeqNum;

use crate::time::Instant;

/// One transmitted segment `[start, end)` (a FIN counts as one sequence number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seg {
    pub(crate) start: SeqNum,
    pub(crate) end: SeqNum,
    /// When it was last (re)transmitted (RFC 8985 "Segment.xmit_ts").
    pub(crate) xmit: Instant,
    /// Retransmitted at least once (RFC 8985 "Segment.retransmitted").
    pub(crate) rtx: bool,
    /// Reported held by the receiver.
    pub(crate) sacked: bool,
    /// Deemed lost and not retransmitted since (Linux `TCPCB_LOST`).
    pub(crate) lost: bool,
}

impl Seg {
    pub(crate) fn len(&self) -> usize {
        self.end.wrapping_sub(self.start) as usize
    }
    /// RFC 6675 "pipe": sent, neither SACKed nor deemed lost (a
    /// retransmission of a lost segment clears `lost` and counts again).
    fn in_flight(&self) -> bool {
        !self.sacked && !self.lost
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Scoreboard {
    segs: VecDeque<Seg>,
}

impl Scoreboard {
    pub(crate) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Seg> + '_ {
        self.segs.iter()
    }

    /// New data `[start, end)` went out at `now` (always at the top).
    pub(crate) fn push(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
        if !start.lt(end) {
            return;
        }
        if let Some(last) = self.segs.back() {
            if !start.ge(last.end) {
                return;
            }
        }
        self.segs.push_back(Seg {
            start,
            end,
            xmit: now,
            rtx: false,
            sacked: false,
            lost: false,
        });
    }

    /// Split the segment that `seq` falls strictly inside, if any.
    fn split_at(&mut self, seq: SeqNum) {
        let Some(i) = self
            .segs
            .iter()
            .position(|s| s.start.lt(seq) && seq.lt(s.end))
        else {
            return;
        };
        if let Some(s) = self.segs.get_mut(i) {
            let mut upper = *s;
            s.end = seq;
            upper.start = seq;
            self.segs.insert(i + 1, upper);
        }
    }

    /// The cumulative ACK moved to `una`: drop what it covers, calling
    /// `delivered` for each segment newly delivered by it (not SACKed before).
    pub(crate) fn ack(&mut self, una: SeqNum, delivered: &mut dyn FnMut(&Seg)) {
        while let Some(s) = self.segs.front_mut() {
            if s.end.le(una) {
                if !s.sacked {
                    delivered(s);
                }
                self.segs.pop_front();
            } else {
                if s.start.lt(una) {
                    s.start = una;
                }
                break;
            }
        }
    }

    /// RFC 2018: the receiver holds `[left, right)`. Calls `delivered` for
    /// each segment newly SACKed; returns the bytes newly SACKed.
    pub(crate) fn sack(
        &mut self,
        left: SeqNum,
        right: SeqNum,
        delivered: &mut dyn FnMut(&Seg),
    ) -> usize {
        let (Some(first), Some(last)) = (self.segs.front(), self.segs.back()) else {
            return 0;
        };
        let left = left.max(first.start);
        let right = right.min(last.end);
        if !left.lt(right) {
            return 0;
        }
        self.split_at(left);
        self.split_at(right);
        let mut n = 0;
        for s in self.segs.iter_mut() {
            if s.start.ge(right) {
                break;
            }
            if s.start.ge(left) && s.end.le(right) && !s.sacked {
                s.sacked = true;
                s.lost = false;
                n += s.len();
                delivered(s);
            }
        }
        n
    }

    /// RFC 6675 pipe: bytes sent and still believed in the network.
    pub(crate) fn pipe(&self) -> usize {
        self.segs
            .iter()
            .filter(|s| s.in_flight())
            .map(Seg::len)
            .sum()
    }

    /// Segments SACKed (for RFC 8985's DupThresh test).
    pub(crate) fn sacked_count(&self) -> usize {
        self.segs.iter().filter(|s| s.sacked).count()
    }

    pub(crate) fn any_sacked(&self) -> bool {
        self.segs.iter().any(|s| s.sacked)
    }

    /// The first segment deemed lost (RFC 6675 NextSeg rule 1, with
    /// "lost" decided by RACK or the RTO).
    pub(crate) fn first_lost(&self) -> Option<(SeqNum, SeqNum)> {
        self.segs
            .iter()
            .find(|s| s.lost && !s.sacked)
            .map(|s| (s.start, s.end))
    }

    /// The highest segment not SACKed (the tail loss probe's retransmission).
    pub(crate) fn last_unsacked(&self) -> Option<(SeqNum, SeqNum)> {
        self.segs
            .iter()
            .rev()
            .find(|s| !s.sacked)
            .map(|s| (s.start, s.end))
    }

    /// `[start, end)` was retransmitted at `now`.
    pub(crate) fn retransmitted(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
        self.split_at(start);
        self.split_at(end);
        for s in self.segs.iter_mut() {
            if s.start.ge(end) {
                break;
            }
            if s.start.ge(start) {
                s.xmit = now;
                s.rtx = true;
                s.lost = false;
            }
        }
    }

    /// Mark a segment lost (RACK).
    pub(crate) fn mark_lost(&mut self, start: SeqNum) {
        if let Some(s) = self.segs.iter_mut().find(|s| s.start == start) {
            if !s.sacked {
                s.lost = true;
            }
        }
    }

    /// RFC 6582 without SACK: the first unacknowledged segment is lost.
    pub(crate) fn mark_head_lost(&mut self) {
        if let Some(s) = self.segs.front_mut() {
            if !s.sacked {
                s.lost = true;
            }
        }
    }

    /// Retransmission timeout: everything not SACKed is deemed lost. Like
    /// Linux (and RFC 6675 5.1: the sender "SHOULD" not resend SACKed
    /// data), the SACK information is kept.
    pub(crate) fn mark_all_lost(&mut self) {
        for s in self.segs.iter_mut() {
            if !s.sacked {
                s.lost = true;
            }
        }
    }

    /// Undo after a spurious retransmission: nothing is deemed lost.
    pub(crate) fn clear_lost(&mut self) {
        for s in self.segs.iter_mut() {
            s.lost = false;
        }
    }

    /// A retransmission is still outstanding (Linux `retrans_out`).
    pub(crate) fn retrans_out(&self) -> bool {
        self.segs.iter().any(|s| s.rtx && s.in_flight())
    }

    /// Forget the SACK state (the receiver may renege, RFC 2018 8).
    pub(crate) fn forget_sacks(&mut self) {
        for s in self.segs.iter_mut() {
            s.sacked = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn sack_splits_and_pipe_counts() {
        let mut s = Scoreboard::default();
        for i in 0..5u32 {
            s.push(
                SeqNum(100 + i * 100),
                SeqNum(200 + i * 100),
                t(u64::from(i)),
            );
        }
        assert_eq!(s.pipe(), 500);
        let mut seen = Vec::new();
        // A block with an edge inside a segment splits it.
        let n = s.sack(SeqNum(250), SeqNum(400), &mut |g| seen.push(g.start));
        assert_eq!(n, 150);
        assert_eq!(seen, vec![SeqNum(250), SeqNum(300)]);
        assert_eq!(s.pipe(), 350);
        assert_eq!(s.sacked_count(), 2);
        // Duplicate report: nothing new.
        assert_eq!(s.sack(SeqNum(250), SeqNum(400), &mut |_| {}), 0);
        s.mark_lost(SeqNum(100));
        assert_eq!(s.first_lost(), Some((SeqNum(100), SeqNum(200))));
        assert_eq!(s.pipe(), 250);
        s.retransmitted(SeqNum(100), SeqNum(200), t(50));
        assert!(s.retrans_out());
        assert_eq!(s.first_lost(), None);
        assert_eq!(s.last_unsacked(), Some((SeqNum(500), SeqNum(600))));
        let mut acked = Vec::new();
        s.ack(SeqNum(420), &mut |g| acked.push((g.start, g.rtx)));
        // 250..400 was SACKed before: not delivered again.
        assert_eq!(acked, vec![(SeqNum(100), true), (SeqNum(200), false)]);
        assert_eq!(s.iter().next().map(|g| g.start), Some(SeqNum(420)));
        s.mark_all_lost();
        assert_eq!(s.pipe(), 0);
        s.clear_lost();
        assert_eq!(s.pipe(), 180);
    }
}
