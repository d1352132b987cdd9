//! RACK: time-based loss detection (RFC 8985 section 6). A segment is
//! deemed lost when a segment sent sufficiently later has been delivered;
//! "sufficiently" is the reordering window.

use ustack_wire::tcp::SeqNum;

use super::sack::{Scoreboard, Seg};
use crate::time::{Duration, Instant};

/// RFC 8985 constants: "DupThresh" (3) for the pre-reordering behaviour.
const DUP_THRESH: usize = 3;
/// Largest multiplier of min_RTT/4 the window grows to after DSACKs.
const MAX_REO_STEPS: u32 = 256;

#[derive(Debug, Clone)]
pub(crate) struct Rack {
    /// RFC 8985 "RACK.xmit_ts", "RACK.end_seq", "RACK.rtt" of the most
    /// recently sent segment that has been delivered.
    xmit: Option<Instant>,
    end: SeqNum,
    rtt: Duration,
    /// "RACK.fack": the highest end sequence delivered.
    fack: SeqNum,
    /// "RACK.min_RTT" (over the connection's lifetime; RFC 8985 suggests
    /// a windowed minimum, which this simplifies).
    min_rtt: Option<Duration>,
    /// "RACK.reordering_seen".
    pub(crate) reordering_seen: bool,
    /// "RACK.reo_wnd_mult".
    reo_steps: u32,
    /// "RACK.dsack_round": no further growth until SND.UNA passes this.
    dsack_round: Option<SeqNum>,
}

impl Rack {
    pub(crate) fn new(iss: SeqNum) -> Rack {
        Rack {
            xmit: None,
            end: iss,
            rtt: Duration::ZERO,
            fack: iss,
            min_rtt: None,
            reordering_seen: false,
            reo_steps: 1,
            dsack_round: None,
        }
    }

    /// "RACK.min_RTT", if any sample was taken.
    pub(crate) fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    pub(crate) fn on_rtt_sample(&mut self, r: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
    }

    /// RFC 8985 6.2 steps 1-3 for one delivered (ACKed or SACKed) segment.
    /// `echo_before_xmit`: the ACK's TSecr predates the segment's last
    /// transmission (so it was triggered by an earlier copy).
    pub(crate) fn on_delivered(&mut self, seg: &Seg, now: Instant, echo_before_xmit: bool) {
        let rtt = now.saturating_duration_since(seg.xmit);
        // Step 3 (before the ambiguity test, as the RFC's reordering
        // detection concerns never-retransmitted segments only):
        // "If Segment.end_seq < RACK.fack and Segment.retransmitted is
        // FALSE, set RACK.reordering_seen to TRUE."
        if !seg.rtx && seg.end.lt(self.fack) {
            self.reordering_seen = true;
        }
        self.fack = self.fack.max(seg.end);
        // Step 2: "If Segment.retransmitted is TRUE and either ...
        // ACK.ts_option.echo_reply < Segment.xmit_ts [or] Now -
        // Segment.xmit_ts < RACK.min_RTT ... return" (ambiguous).
        if seg.rtx && (echo_before_xmit || self.min_rtt.is_some_and(|m| rtt < m)) {
            return;
        }
        // "RACK.rtt = Segment's RTT; if the segment was sent later (ties
        // broken by end sequence), update RACK.xmit_ts and RACK.end_seq."
        let newer = match self.xmit {
            None => true,
            Some(x) => seg.xmit > x || (seg.xmit == x && seg.end.gt(self.end)),
        };
        if newer {
            self.rtt = rtt;
            self.xmit = Some(seg.xmit);
            self.end = seg.end;
        }
    }

    /// SND.UNA advanced (call on every ACK that moves it). RFC 8985 6.2
    /// step 4: "If RACK.dsack_round is not None AND SND.UNA >=
    /// RACK.dsack_round: RACK.dsack_round = None". Done here, not when the
    /// next DSACK arrives: that may be 2^31 bytes later, when the
    /// modulo-2^32 comparison has flipped and a stale round would block
    /// all further growth of the window. RACK.fack follows SND.UNA for
    /// the same reason (everything below SND.UNA was delivered).
    pub(crate) fn on_ack(&mut self, snd_una: SeqNum) {
        if self.dsack_round.is_some_and(|r| snd_una.ge(r)) {
            self.dsack_round = None;
        }
        self.fack = self.fack.max(snd_una);
    }

    /// A DSACK arrived (RFC 8985 6.2 step 4): widen the window, once per
    /// round trip: "If ACK has a DSACK option AND RACK.dsack_round is
    /// None: RACK.reo_wnd_mult += 1, RACK.dsack_round = SND.NXT".
    pub(crate) fn on_dsack(&mut self, snd_una: SeqNum, snd_max: SeqNum) {
        self.reordering_seen = true;
        if self.dsack_round.is_some_and(|r| snd_una.lt(r)) {
            return;
        }
        self.dsack_round = Some(snd_max);
        self.reo_steps = (self.reo_steps + 1).min(MAX_REO_STEPS);
    }

    /// RFC 8985 6.2 step 4, "RACK.reo_wnd": zero (aggressive, like
    /// DupThresh) while no reordering was seen and either recovery is on
    /// or DupThresh segments are SACKed; else min_RTT/4 times the
    /// multiplier, at most SRTT.
    pub(crate) fn reo_wnd(&self, in_recovery: bool, sacked: usize, srtt: Duration) -> Duration {
        if !self.reordering_seen && (in_recovery || sacked >= DUP_THRESH) {
            return Duration::ZERO;
        }
        // A path that reorders by jumping the queue (netem's `reorder`)
        // shows a min_RTT near zero, which would leave no window at all and
        // make DSACK-driven growth useless: the base is at least SRTT/2.
        let base = self.min_rtt.unwrap_or(srtt).max(srtt / 2) / 4;
        base.saturating_mul(self.reo_steps).min(srtt)
    }

    /// RFC 8985 6.2 step 5 (RACK_detect_loss): mark every segment sent
    /// before the most recently delivered one whose time is up. Returns
    /// whether anything was marked and when to look again (the RACK
    /// reordering timer), if some segment is still within the window.
    pub(crate) fn detect(
        &self,
        sb: &mut Scoreboard,
        now: Instant,
        reo_wnd: Duration,
    ) -> (bool, Option<Instant>) {
        let Some(rx) = self.xmit else {
            return (false, None);
        };
        let mut timeout: Option<Instant> = None;
        let mut lost: [SeqNum; 16] = [SeqNum(0); 16];
        let mut marked = false;
        loop {
            let mut k = 0;
            for s in sb.iter() {
                if s.sacked || s.lost {
                    continue;
                }
                // "RACK_sent_after(RACK.xmit_ts, RACK.end_seq,
                // Segment.xmit_ts, Segment.end_seq)". The sequence number
                // breaks ties of original transmissions, which leave in
                // sequence order; not of a retransmission, which may have
                // left after a later segment sent at the same instant
                // (several exchanges within one clock tick): deeming it
                // lost then retransmits it again at once.
                let before = s.xmit < rx || (s.xmit == rx && s.end.lt(self.end) && !s.rtx);
                if !before {
                    continue;
                }
                // "remaining = Segment.xmit_ts + RACK.rtt + RACK.reo_wnd - Now"
                let due = s.xmit + self.rtt + reo_wnd;
                if due <= now {
                    if let Some(slot) = lost.get_mut(k) {
                        *slot = s.start;
                        k += 1;
                    }
                } else {
                    timeout = Some(timeout.map_or(due, |t| t.min(due)));
                }
            }
            for &seq in lost.get(..k).unwrap_or(&[]) {
                sb.mark_lost(seq);
            }
            marked |= k > 0;
            // The batch was full: look again for more.
            if k < lost.len() {
                break;
            }
            timeout = None;
        }
        (marked, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_older_segment_after_reordering_window() {
        let t = Instant::from_millis;
        let mut sb = Scoreboard::default();
        sb.push(SeqNum(0), SeqNum(100), t(0));
        sb.push(SeqNum(100), SeqNum(200), t(1));
        let mut rack = Rack::new(SeqNum(0));
        rack.on_rtt_sample(Duration::from_millis(20));
        // The second segment is SACKed at 21 ms (RTT 20 ms).
        let mut d = Vec::new();
        sb.sack(SeqNum(100), SeqNum(200), &mut |s| d.push(*s));
        for s in &d {
            rack.on_delivered(s, t(21), false);
        }
        assert!(!rack.reordering_seen);
        let w = rack.reo_wnd(false, sb.sacked_count(), Duration::from_millis(20));
        assert_eq!(w, Duration::from_millis(5), "min_RTT/4");
        let (m, at) = rack.detect(&mut sb, t(21), w);
        assert!(!m);
        assert_eq!(at, Some(t(25)), "xmit 0 + rtt 20 + reo_wnd 5");
        let (m, at) = rack.detect(&mut sb, t(25), w);
        assert!(m && at.is_none());
        assert_eq!(sb.first_lost(), Some((SeqNum(0), SeqNum(100))));
        // Delivering the older one afterwards shows reordering.
        let mut d = Vec::new();
        sb.ack(SeqNum(100), &mut |s| d.push(*s));
        for s in &d {
            rack.on_delivered(s, t(26), false);
        }
        assert!(rack.reordering_seen);
    }

    #[test]
    fn dsack_round_does_not_go_stale_after_two_gibibytes() {
        let mut rack = Rack::new(SeqNum(0));
        rack.on_dsack(SeqNum(0), SeqNum(10_000));
        assert_eq!(rack.reo_steps, 2);
        // A second DSACK within the same round does not widen again.
        rack.on_dsack(SeqNum(5_000), SeqNum(20_000));
        assert_eq!(rack.reo_steps, 2);
        // The connection moves on, ACK by ACK, by more than 2^31 bytes
        // (sequence numbers wrap) without another DSACK.
        let mut una = SeqNum(0);
        for _ in 0..(1u32 << 11) + 4 {
            una += 1usize << 20;
            rack.on_ack(una);
        }
        // A new round: this DSACK must widen the window again. With the
        // marker left at 10_000, SND.UNA would compare as before it.
        assert!(
            una.lt(SeqNum(10_000)),
            "the test's premise: comparison flipped"
        );
        rack.on_dsack(una, una + 50_000usize);
        assert_eq!(rack.reo_steps, 3);
        rack.on_dsack(una + 1_000usize, una + 60_000usize);
        assert_eq!(rack.reo_steps, 3, "once per round");
        rack.on_ack(una + 50_000usize);
        rack.on_dsack(una + 50_000usize, una + 90_000usize);
        assert_eq!(rack.reo_steps, 4, "SND.UNA reached the round's end");
    }
}
