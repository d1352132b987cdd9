//! The sender's scoreboard (RFC 6675 terms, RFC 8985 per-segment state):
//! every segment sent and not yet cumulatively acknowledged, with when it
//! was (re)sent, whether the receiver SACKed it (RFC 2018) and whether it
//! is deemed lost. Segments are kept in sequence order; SACK blocks and
//! retransmissions split them where their edges fall inside one.
//!
//! The totals the sender asks for on every ACK and every `poll_at` (RFC
//! 6675 "pipe", the SACKed and lost segments, retransmissions in flight)
//! are kept up to date as segments change, never recomputed by a scan: a
//! connection with thousands of segments in flight answers them in O(1).
//! The first lost segment is found from a hint (no lost segment lies
//! before it), so looking for it costs nothing when nothing is lost and
//! amortised O(1) per segment while recovery walks the losses in order.
//! Lookups by sequence number are binary searches (the segments are sorted
//! and span less than 2^31, so offsets from the first one compare like
//! sequence numbers).

use std::cell::Cell;
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
    /// Deemed lost and not retransmitted since (Linux `TCPCB_LOST`
    /// without `TCPCB_SACKED_RETRANS`).
    pub(crate) lost: bool,
    /// Retransmitted after it was deemed lost, that retransmission not
    /// known lost (Linux `TCPCB_LOST | TCPCB_SACKED_RETRANS`): Linux still
    /// counts it in `lost_out`, `tcpi_lost`.
    pub(crate) lost_rtx: bool,
    /// Ends a Linux skb: the last segment of a packet as Linux sent it
    /// (`tso_fragment` cuts skbs where packets end), or of a piece a SACK
    /// or a retransmission split off (`tcp_fragment`). Linux retransmits
    /// skb by skb.
    pub(crate) skb_end: bool,
    /// The delivery-rate state when it was last sent (Linux's
    /// `TCP_SKB_CB(skb)->tx`, `tcp_rate_skb_sent`).
    pub(crate) tx: RateTx,
}

/// What Linux's rate sampler (`tcp_rate.c`) records with each
/// transmission: the connection's delivered count then, and (as
/// microseconds before the transmission, to keep a segment small) the
/// start of its send phase and the time of the last delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RateTx {
    /// Set by a transmission (Linux `tx.delivered_mstamp != 0`); cleared
    /// once the segment gave its sample.
    pub(crate) valid: bool,
    pub(crate) app_limited: bool,
    pub(crate) delivered: u32,
    /// `xmit - tx.first_tx_mstamp`, µs.
    pub(crate) first_tx_ago: u32,
    /// `xmit - tx.delivered_mstamp`, µs.
    pub(crate) delivered_ago: u32,
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

/// Totals over the scoreboard's segments, kept up to date by every change
/// (Linux keeps `packets_out`, `sacked_out`, `lost_out`, `retrans_out` the
/// same way).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// RFC 6675 "pipe": bytes of segments neither SACKed nor deemed lost.
    pub(crate) pipe: usize,
    /// Bytes SACKed.
    pub(crate) sacked_bytes: usize,
    /// Segments SACKed. (Segment counts are 32-bit, as Linux's are: an
    /// idle connection's footprint counts every byte.)
    pub(crate) sacked: u32,
    /// Segments deemed lost (and not SACKed).
    pub(crate) lost: u32,
    /// Retransmitted segments still in flight (Linux `retrans_out`).
    pub(crate) retrans_out: u32,
    /// Segments deemed lost, retransmitted since or not (Linux
    /// `lost_out`, `tcpi_lost`).
    pub(crate) lost_out: u32,
}

impl Totals {
    fn add(&mut self, s: &Seg) {
        if s.in_flight() {
            self.pipe += s.len();
            if s.rtx {
                self.retrans_out += 1;
            }
        }
        if s.sacked {
            self.sacked += 1;
            self.sacked_bytes += s.len();
        } else if s.lost {
            self.lost += 1;
        }
        if !s.sacked && (s.lost || s.lost_rtx) {
            self.lost_out += 1;
        }
    }

    fn remove(&mut self, s: &Seg) {
        // Saturating: a bookkeeping bug must not wrap to "2^64 bytes in
        // flight" in a release build; debug builds recount after every
        // change and catch it (`Scoreboard::check`).
        if s.in_flight() {
            self.pipe = self.pipe.saturating_sub(s.len());
            if s.rtx {
                self.retrans_out = self.retrans_out.saturating_sub(1);
            }
        }
        if s.sacked {
            self.sacked = self.sacked.saturating_sub(1);
            self.sacked_bytes = self.sacked_bytes.saturating_sub(s.len());
        } else if s.lost {
            self.lost = self.lost.saturating_sub(1);
        }
        if !s.sacked && (s.lost || s.lost_rtx) {
            self.lost_out = self.lost_out.saturating_sub(1);
        }
    }

    /// Change `s` by `f`, keeping the totals right.
    fn update(&mut self, s: &mut Seg, f: impl FnOnce(&mut Seg)) {
        self.remove(s);
        f(s);
        self.add(s);
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Scoreboard {
    segs: VecDeque<Seg>,
    totals: Totals,
    /// No segment before this index is deemed lost (a lower bound on the
    /// first lost one's index; `first_lost` moves it forward as it looks).
    lost_hint: Cell<usize>,
    /// The end of the highest SACKed segment (Linux
    /// `tcp_highest_sack_seq`, the forward-most SACKed sequence), None
    /// when nothing is SACKed.
    highest_sack: Option<SeqNum>,
}

impl Scoreboard {
    pub(crate) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Segments sent and not yet cumulatively acknowledged.
    pub(crate) fn seg_count(&self) -> usize {
        self.segs.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Seg> + '_ {
        self.segs.iter()
    }

    /// The totals (RFC 6675 pipe, SACKed, lost, retransmitted).
    pub(crate) fn totals(&self) -> Totals {
        self.totals
    }

    /// The totals recomputed by a scan (what `totals` must always equal).
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn recount(&self) -> Totals {
        let mut t = Totals::default();
        for s in &self.segs {
            t.add(s);
        }
        t
    }

    /// Debug builds: the kept totals equal a recount and the lost hint is
    /// a lower bound. O(segments), so only with debug assertions.
    fn check(&self) {
        #[cfg(debug_assertions)]
        {
            debug_assert_eq!(self.totals, self.recount(), "scoreboard totals");
            let hint = self.lost_hint.get().min(self.segs.len());
            debug_assert!(
                !self.segs.range(..hint).any(|s| s.lost && !s.sacked),
                "a lost segment before the hint"
            );
            debug_assert_eq!(
                self.highest_sack,
                self.segs.iter().rev().find(|s| s.sacked).map(|s| s.end),
                "highest SACKed segment"
            );
        }
    }

    /// Offsets from the first segment's start order the segments (they
    /// span less than 2^31, so offsets compare as sequence numbers do).
    fn base(&self) -> SeqNum {
        self.segs.front().map_or(SeqNum(0), |s| s.start)
    }

    /// Offset of the last segment's end: the span of the scoreboard.
    fn span(&self) -> u32 {
        self.segs
            .back()
            .map_or(0, |s| s.end.wrapping_sub(self.base()))
    }

    /// Index of the first segment that starts at or after offset `o`.
    fn first_starting_at(&self, o: u32) -> usize {
        let base = self.base();
        self.segs
            .partition_point(|s| s.start.wrapping_sub(base) < o)
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
        let s = Seg {
            start,
            end,
            xmit: now,
            rtx: false,
            sacked: false,
            lost: false,
            lost_rtx: false,
            skb_end: true,
            tx: RateTx::default(),
        };
        self.totals.add(&s);
        self.segs.push_back(s);
        self.check();
    }

    /// Split the segment that `seq` falls strictly inside, if any.
    fn split_at(&mut self, seq: SeqNum) {
        // A segment holds `seq` strictly inside (in modular terms) only if
        // `seq`'s offset lies strictly between its start's and its end's:
        // the first segment ending after that offset is the only candidate.
        let base = self.base();
        let o = seq.wrapping_sub(base);
        let i = self.segs.partition_point(|s| s.end.wrapping_sub(base) <= o);
        let Some(s) = self.segs.get_mut(i) else {
            return;
        };
        if s.start.wrapping_sub(base) >= o {
            return;
        }
        // Both halves keep the flags: the byte totals stay, the segment
        // counts gain one.
        let mut upper = *s;
        self.totals.update(s, |s| {
            s.end = seq;
            s.skb_end = true;
        });
        upper.start = seq;
        self.totals.add(&upper);
        self.segs.insert(i + 1, upper);
        if self.lost_hint.get() > i {
            self.lost_hint.set(self.lost_hint.get() + 1);
        }
    }

    /// The cumulative ACK moved to `una`: drop what it covers, calling
    /// `delivered` for each segment newly delivered by it (not SACKed before).
    pub(crate) fn ack(&mut self, una: SeqNum, delivered: &mut dyn FnMut(&Seg)) {
        let mut popped = 0;
        while let Some(s) = self.segs.front_mut() {
            if s.end.le(una) {
                if !s.sacked {
                    delivered(s);
                }
                self.totals.remove(s);
                self.segs.pop_front();
                popped += 1;
            } else {
                if s.start.lt(una) {
                    self.totals.update(s, |s| s.start = una);
                }
                break;
            }
        }
        self.lost_hint
            .set(self.lost_hint.get().saturating_sub(popped));
        if self.totals.sacked == 0 {
            self.highest_sack = None;
        }
        self.check();
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
        let Scoreboard {
            segs,
            totals,
            highest_sack,
            ..
        } = self;
        let mut n = 0;
        let mut mark = |s: &mut Seg| {
            if !s.sacked {
                if highest_sack.is_none_or(|h| s.end.gt(h)) {
                    *highest_sack = Some(s.end);
                }
                totals.update(s, |s| {
                    s.sacked = true;
                    s.lost = false;
                    s.lost_rtx = false;
                });
                n += s.len();
                delivered(s);
            }
        };
        let base = segs.front().map_or(left, |s| s.start);
        let span = segs.back().map_or(0, |s| s.end.wrapping_sub(base));
        let (lo, hi) = (left.wrapping_sub(base), right.wrapping_sub(base));
        if lo <= span && hi <= span {
            // Within the scoreboard: the segments from `left` on.
            let from = segs.partition_point(|s| s.start.wrapping_sub(base) < lo);
            for s in segs.range_mut(from..) {
                if s.start.wrapping_sub(base) >= hi {
                    break;
                }
                if s.end.wrapping_sub(base) <= hi {
                    mark(s);
                }
            }
        } else {
            // A block the clamping above let through with an edge more
            // than 2^31 away: compare as sequence numbers, from the start.
            for s in segs.iter_mut() {
                if s.start.ge(right) {
                    break;
                }
                if s.start.ge(left) && s.end.le(right) {
                    mark(s);
                }
            }
        }
        self.check();
        n
    }

    /// [`Scoreboard::sack`] in whole segments of `mss` bytes, as Linux
    /// marks them (`tcp_match_skb_to_sack`): an edge of the block that
    /// falls inside a segment moves inward to an MSS boundary counted from
    /// that segment's start, so a block covering part of a single-MSS
    /// segment (a receiver SACKing its last byte, say) marks nothing.
    pub(crate) fn sack_whole(
        &mut self,
        left: SeqNum,
        right: SeqNum,
        mss: usize,
        delivered: &mut dyn FnMut(&Seg),
    ) -> usize {
        let (Some(first), Some(last)) = (self.segs.front(), self.segs.back()) else {
            return 0;
        };
        let left = left.max(first.start);
        let right = right.min(last.end);
        if !left.lt(right) || right.wrapping_sub(left) > self.span() {
            return self.sack(left, right, delivered);
        }
        let left = self.inward(left, mss, true);
        let right = self.inward(right, mss, false);
        if !left.lt(right) {
            return 0;
        }
        self.sack(left, right, delivered)
    }

    /// `seq` moved to a multiple of `mss` from the start of the segment it
    /// falls strictly inside (up, or down), or left as it is.
    fn inward(&self, seq: SeqNum, mss: usize, up: bool) -> SeqNum {
        let base = self.base();
        let o = seq.wrapping_sub(base);
        let i = self.segs.partition_point(|s| s.end.wrapping_sub(base) <= o);
        let Some(s) = self.segs.get(i) else {
            return seq;
        };
        let into = seq.wrapping_sub(s.start);
        if s.start.wrapping_sub(base) >= o || into as usize >= s.len() {
            return seq;
        }
        let mss = u32::try_from(mss.max(1)).unwrap_or(u32::MAX);
        let whole = if up {
            into.div_ceil(mss).saturating_mul(mss)
        } else {
            into / mss * mss
        };
        if whole as usize >= s.len() {
            s.end
        } else {
            s.start + whole
        }
    }

    /// RFC 6675 pipe: bytes sent and still believed in the network.
    pub(crate) fn pipe(&self) -> usize {
        self.totals.pipe
    }

    /// Segments SACKed (for RFC 8985's DupThresh test).
    pub(crate) fn sacked_count(&self) -> usize {
        self.totals.sacked as usize
    }

    /// Bytes SACKed (RFC 6937 "SACKd").
    pub(crate) fn sacked_bytes(&self) -> usize {
        self.totals.sacked_bytes
    }

    pub(crate) fn any_sacked(&self) -> bool {
        self.totals.sacked_bytes > 0
    }

    /// The end of the highest SACKed segment (Linux
    /// `tcp_highest_sack_seq`, the reference for reordering), None when
    /// nothing is SACKed. O(1).
    pub(crate) fn highest_sack(&self) -> Option<SeqNum> {
        self.highest_sack
    }

    /// The first segment deemed lost (RFC 6675 NextSeg rule 1, with
    /// "lost" decided by RACK or the RTO). O(1) when nothing is lost.
    pub(crate) fn first_lost(&self) -> Option<(SeqNum, SeqNum)> {
        if self.totals.lost == 0 {
            return None;
        }
        let from = self.lost_hint.get().min(self.segs.len());
        let found = self
            .segs
            .range(from..)
            .position(|s| s.lost && !s.sacked)
            .map(|k| from + k)
            .or_else(|| {
                debug_assert!(false, "lost segments, none after the hint");
                self.segs.iter().position(|s| s.lost && !s.sacked)
            })?;
        self.lost_hint.set(found);
        self.segs.get(found).map(|s| (s.start, s.end))
    }

    /// `[start, end)` was just (re)sent with the rate state `tx` (Linux
    /// `tcp_rate_skb_sent`).
    pub(crate) fn stamp_tx(&mut self, start: SeqNum, end: SeqNum, tx: RateTx) {
        let base = self.base();
        let (lo, hi) = (start.wrapping_sub(base), end.wrapping_sub(base));
        if lo > self.span() || hi > self.span() {
            return;
        }
        let from = self.first_starting_at(lo);
        for s in self.segs.range_mut(from..) {
            if s.end.wrapping_sub(base) > hi {
                break;
            }
            s.tx = tx;
        }
    }

    /// The last segment sent does not end its packet: the next one goes in
    /// the same (Linux's skb, see [`Seg::skb_end`]).
    pub(crate) fn continue_packet(&mut self) {
        if let Some(s) = self.segs.back_mut() {
            s.skb_end = false;
        }
    }

    /// Linux retransmits lost data skb by skb: how many segments, from the
    /// first lost one and at most `max`, are lost (and not SACKed) in a
    /// row up to the end of its skb.
    pub(crate) fn lost_run(&self, max: usize) -> usize {
        if self.first_lost().is_none() {
            return 0;
        }
        let from = self.lost_hint.get().min(self.segs.len());
        let mut n = 0;
        for s in self.segs.range(from..) {
            if n >= max || !s.lost || s.sacked {
                break;
            }
            n += 1;
            if s.skb_end {
                break;
            }
        }
        n
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
        let (lo, hi) = (
            start.wrapping_sub(self.base()),
            end.wrapping_sub(self.base()),
        );
        let span = self.span();
        let from = if lo <= span && hi <= span {
            self.first_starting_at(lo)
        } else {
            0
        };
        let Scoreboard { segs, totals, .. } = self;
        for s in segs.range_mut(from..) {
            if s.start.ge(end) {
                break;
            }
            if s.start.ge(start) {
                totals.update(s, |s| {
                    s.xmit = now;
                    s.rtx = true;
                    s.lost_rtx |= s.lost;
                    s.lost = false;
                });
            }
        }
        self.check();
    }

    /// Mark a segment lost (RACK).
    pub(crate) fn mark_lost(&mut self, start: SeqNum) {
        let i = self.first_starting_at(start.wrapping_sub(self.base()));
        let Scoreboard {
            segs,
            totals,
            lost_hint,
            ..
        } = self;
        if let Some(s) = segs.get_mut(i).filter(|s| s.start == start) {
            if !s.sacked {
                totals.update(s, |s| s.lost = true);
                lost_hint.set(lost_hint.get().min(i));
            }
        }
        self.check();
    }

    /// RFC 6582 without SACK: the first unacknowledged segment is lost.
    pub(crate) fn mark_head_lost(&mut self) {
        if let Some(s) = self.segs.front_mut() {
            if !s.sacked {
                self.totals.update(s, |s| s.lost = true);
                self.lost_hint.set(0);
            }
        }
        self.check();
    }

    /// Retransmission timeout: everything not SACKed is deemed lost. Like
    /// Linux (and RFC 6675 5.1: the sender "SHOULD" not resend SACKed
    /// data), the SACK information is kept.
    pub(crate) fn mark_all_lost(&mut self) {
        let Scoreboard { segs, totals, .. } = self;
        for s in segs.iter_mut() {
            if !s.sacked {
                totals.update(s, |s| s.lost = true);
            }
        }
        self.lost_hint.set(0);
        self.check();
    }

    /// Undo after a spurious retransmission: nothing is deemed lost.
    pub(crate) fn clear_lost(&mut self) {
        let Scoreboard { segs, totals, .. } = self;
        for s in segs.iter_mut() {
            if s.lost || s.lost_rtx {
                totals.update(s, |s| {
                    s.lost = false;
                    s.lost_rtx = false;
                });
            }
        }
        self.check();
    }

    /// A retransmission is still outstanding (Linux `retrans_out`).
    pub(crate) fn retrans_out(&self) -> bool {
        self.totals.retrans_out > 0
    }

    /// Forget the SACK state (the receiver may renege, RFC 2018 8).
    pub(crate) fn forget_sacks(&mut self) {
        self.highest_sack = None;
        let Scoreboard { segs, totals, .. } = self;
        for s in segs.iter_mut() {
            if s.sacked {
                totals.update(s, |s| s.sacked = false);
            }
        }
        self.check();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// sack-route-refresh-ip-tos.pkt's retransmissions: packets of two
    /// segments, the ACK and SACK blocks cutting them; Linux resends skb
    /// by skb.
    #[test]
    fn lost_runs_stop_at_skb_ends_and_sacked_segments() {
        let mut s = Scoreboard::default();
        // Five packets of two segments each: [0,200) ... [800,1000).
        for i in 0..10u32 {
            s.push(SeqNum(i * 100), SeqNum(i * 100 + 100), t(0));
            if i % 2 == 0 {
                s.continue_packet();
            }
        }
        assert_eq!(s.lost_run(10), 0, "nothing lost");
        s.ack(SeqNum(100), &mut |_| {});
        s.sack(SeqNum(300), SeqNum(400), &mut |_| {});
        s.sack(SeqNum(600), SeqNum(1000), &mut |_| {});
        s.mark_all_lost();
        // [100,200) ends its packet; [200,300) ends where a SACK begins;
        // [400,600) is a whole packet of two.
        assert_eq!(s.lost_run(10), 1);
        s.retransmitted(SeqNum(100), SeqNum(200), t(1));
        assert_eq!(s.lost_run(10), 1);
        s.retransmitted(SeqNum(200), SeqNum(300), t(1));
        assert_eq!(s.lost_run(10), 2);
        assert_eq!(s.lost_run(1), 1, "capped by cwnd");
        // A split inside a segment ends an skb there (`tcp_fragment`).
        s.retransmitted(SeqNum(400), SeqNum(450), t(1));
        assert_eq!(s.first_lost(), Some((SeqNum(450), SeqNum(500))));
        assert_eq!(s.lost_run(10), 2);
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
        assert_eq!(s.totals(), s.recount());
    }

    #[test]
    fn totals_follow_every_change() {
        let mut s = Scoreboard::default();
        let base = u32::MAX - 250; // the sequence numbers wrap
        for i in 0..6u32 {
            let a = SeqNum(base.wrapping_add(i * 100));
            s.push(a, a + 100usize, t(u64::from(i)));
        }
        let at = |o: u32| SeqNum(base.wrapping_add(o));
        let want = |pipe, sacked_bytes, sacked, lost, retrans_out, lost_out| Totals {
            pipe,
            sacked_bytes,
            sacked,
            lost,
            retrans_out,
            lost_out,
        };
        assert_eq!(s.totals(), want(600, 0, 0, 0, 0, 0));
        s.sack(at(150), at(350), &mut |_| {});
        assert_eq!(s.totals(), want(400, 200, 3, 0, 0, 0), "split in three");
        s.mark_lost(at(0));
        s.mark_lost(at(100));
        s.mark_lost(at(150)); // SACKed: stays SACKed, not lost
        assert_eq!(s.totals(), want(250, 200, 3, 2, 0, 2));
        assert_eq!(s.first_lost(), Some((at(0), at(100))));
        s.retransmitted(at(0), at(50), t(10));
        // Linux's lost_out still counts the retransmitted half.
        assert_eq!(s.totals(), want(300, 200, 3, 2, 1, 3), "half retransmitted");
        assert_eq!(s.first_lost(), Some((at(50), at(100))));
        s.retransmitted(at(50), at(100), t(11));
        assert_eq!(s.first_lost(), Some((at(100), at(150))));
        s.forget_sacks();
        assert_eq!(s.totals(), want(550, 0, 0, 1, 2, 3));
        s.mark_all_lost();
        assert_eq!(s.totals(), want(0, 0, 0, 9, 0, 9));
        assert_eq!(s.first_lost(), Some((at(0), at(50))));
        s.ack(at(120), &mut |_| {});
        assert_eq!(
            s.totals(),
            want(0, 0, 0, 7, 0, 7),
            "two popped, one trimmed"
        );
        assert_eq!(s.first_lost(), Some((at(120), at(150))));
        s.clear_lost();
        assert_eq!(s.totals(), want(480, 0, 0, 0, 0, 0));
        assert_eq!(s.first_lost(), None);
        s.mark_head_lost();
        assert_eq!(s.totals(), want(450, 0, 0, 1, 0, 1));
        s.ack(at(600), &mut |_| {});
        assert_eq!(s.totals(), Totals::default());
        assert!(s.is_empty());
    }

    /// The scoreboard as it was before the totals were kept: every query
    /// a scan. The property test holds the real one to it.
    #[derive(Default)]
    struct Reference {
        segs: VecDeque<Seg>,
    }

    impl Reference {
        fn push(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
            if !start.lt(end) || self.segs.back().is_some_and(|l| !start.ge(l.end)) {
                return;
            }
            self.segs.push_back(Seg {
                start,
                end,
                xmit: now,
                rtx: false,
                sacked: false,
                lost: false,
                lost_rtx: false,
                skb_end: true,
                tx: RateTx::default(),
            });
        }
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
                s.skb_end = true;
                upper.start = seq;
                self.segs.insert(i + 1, upper);
            }
        }
        fn ack(&mut self, una: SeqNum, delivered: &mut Vec<Seg>) {
            while let Some(s) = self.segs.front_mut() {
                if s.end.le(una) {
                    if !s.sacked {
                        delivered.push(*s);
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
        fn sack(&mut self, left: SeqNum, right: SeqNum, delivered: &mut Vec<Seg>) -> usize {
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
                    s.lost_rtx = false;
                    n += s.len();
                    delivered.push(*s);
                }
            }
            n
        }
        fn pipe(&self) -> usize {
            self.segs
                .iter()
                .filter(|s| s.in_flight())
                .map(Seg::len)
                .sum()
        }
        fn first_lost(&self) -> Option<(SeqNum, SeqNum)> {
            self.segs
                .iter()
                .find(|s| s.lost && !s.sacked)
                .map(|s| (s.start, s.end))
        }
        fn retransmitted(&mut self, start: SeqNum, end: SeqNum, now: Instant) {
            self.split_at(start);
            self.split_at(end);
            for s in self.segs.iter_mut() {
                if s.start.ge(end) {
                    break;
                }
                if s.start.ge(start) {
                    s.xmit = now;
                    s.rtx = true;
                    s.lost_rtx |= s.lost;
                    s.lost = false;
                }
            }
        }
        fn mark_lost(&mut self, start: SeqNum) {
            if let Some(s) = self.segs.iter_mut().find(|s| s.start == start) {
                if !s.sacked {
                    s.lost = true;
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// New data of this length, after a gap of this many bytes.
        Push(u32, u32),
        /// Cumulative ACK this far into the scoreboard (past its end too).
        Ack(u32),
        /// SACK block by offsets from the first segment.
        Sack(u32, u32),
        /// SACK block anywhere in sequence space (hostile).
        SackRaw(u32, u32),
        /// Retransmit the first lost segment, or part of it.
        RetransmitFirstLost(u32),
        Retransmit(u32, u32),
        /// Mark the k-th segment (modulo the count) lost, or a raw start.
        MarkLost(usize),
        MarkLostRaw(u32),
        MarkHeadLost,
        MarkAllLost,
        ClearLost,
        ForgetSacks,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u32..3000, prop_oneof![5 => Just(0u32), 1 => 0u32..100])
                .prop_map(|(l, g)| Op::Push(l, g)),
            2 => (0u32..20_000).prop_map(Op::Ack),
            4 => (0u32..20_000, 0u32..20_000).prop_map(|(a, b)| Op::Sack(a, b)),
            1 => (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Op::SackRaw(a, b)),
            3 => (0u32..3000).prop_map(Op::RetransmitFirstLost),
            1 => (0u32..20_000, 0u32..20_000).prop_map(|(a, b)| Op::Retransmit(a, b)),
            3 => (0usize..64).prop_map(Op::MarkLost),
            1 => any::<u32>().prop_map(Op::MarkLostRaw),
            1 => Just(Op::MarkHeadLost),
            1 => Just(Op::MarkAllLost),
            1 => Just(Op::ClearLost),
            1 => Just(Op::ForgetSacks),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            // Failing cases are printed, not written into the source tree.
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Random sequences of changes: the kept totals always equal a
        /// recount, and every answer equals the scanning reference's.
        #[test]
        fn totals_equal_a_recount(
            base in prop_oneof![Just(0u32), Just(u32::MAX - 10_000), any::<u32>()],
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let mut s = Scoreboard::default();
            let mut r = Reference::default();
            let mut top = SeqNum(base);
            for (k, op) in ops.into_iter().enumerate() {
                let now = t(k as u64);
                let first = r.segs.front().map_or(top, |s| s.start);
                let at = |o: u32| first + o as usize;
                let (mut d1, mut d2) = (Vec::new(), Vec::new());
                match op {
                    Op::Push(len, gap) => {
                        let a = top + gap as usize;
                        top = a + len as usize;
                        s.push(a, top, now);
                        r.push(a, top, now);
                    }
                    Op::Ack(o) => {
                        s.ack(at(o), &mut |g| d1.push(*g));
                        r.ack(at(o), &mut d2);
                    }
                    Op::Sack(a, b) => {
                        let n1 = s.sack(at(a), at(b), &mut |g| d1.push(*g));
                        let n2 = r.sack(at(a), at(b), &mut d2);
                        prop_assert_eq!(n1, n2);
                    }
                    Op::SackRaw(a, b) => {
                        let n1 = s.sack(SeqNum(a), SeqNum(b), &mut |g| d1.push(*g));
                        let n2 = r.sack(SeqNum(a), SeqNum(b), &mut d2);
                        prop_assert_eq!(n1, n2);
                    }
                    Op::RetransmitFirstLost(len) => {
                        if let Some((a, e)) = r.first_lost() {
                            let e = e.min(a + len.max(1) as usize);
                            s.retransmitted(a, e, now);
                            r.retransmitted(a, e, now);
                        }
                    }
                    Op::Retransmit(a, b) => {
                        s.retransmitted(at(a), at(b), now);
                        r.retransmitted(at(a), at(b), now);
                    }
                    Op::MarkLost(i) => {
                        if !r.segs.is_empty() {
                            let st = r.segs[i % r.segs.len()].start;
                            s.mark_lost(st);
                            r.mark_lost(st);
                        }
                    }
                    Op::MarkLostRaw(x) => {
                        s.mark_lost(SeqNum(x));
                        r.mark_lost(SeqNum(x));
                    }
                    Op::MarkHeadLost => {
                        s.mark_head_lost();
                        if let Some(g) = r.segs.front_mut() {
                            if !g.sacked {
                                g.lost = true;
                            }
                        }
                    }
                    Op::MarkAllLost => {
                        s.mark_all_lost();
                        r.segs.iter_mut().filter(|g| !g.sacked).for_each(|g| g.lost = true);
                    }
                    Op::ClearLost => {
                        s.clear_lost();
                        r.segs.iter_mut().for_each(|g| {
                            g.lost = false;
                            g.lost_rtx = false;
                        });
                    }
                    Op::ForgetSacks => {
                        s.forget_sacks();
                        r.segs.iter_mut().for_each(|g| g.sacked = false);
                    }
                }
                prop_assert_eq!(d1, d2, "delivered segments");
                prop_assert_eq!(s.totals(), s.recount());
                prop_assert!(s.iter().eq(r.segs.iter()), "segments");
                prop_assert_eq!(s.pipe(), r.pipe());
                prop_assert_eq!(s.sacked_count(), r.segs.iter().filter(|g| g.sacked).count());
                prop_assert_eq!(s.any_sacked(), r.segs.iter().any(|g| g.sacked));
                prop_assert_eq!(
                    s.highest_sack(),
                    r.segs.iter().rev().find(|g| g.sacked).map(|g| g.end)
                );
                prop_assert_eq!(
                    s.retrans_out(),
                    r.segs.iter().any(|g| g.rtx && g.in_flight())
                );
                prop_assert_eq!(s.first_lost(), r.first_lost());
                prop_assert_eq!(
                    s.last_unsacked(),
                    r.segs.iter().rev().find(|g| !g.sacked).map(|g| (g.start, g.end))
                );
            }
        }
    }
}
