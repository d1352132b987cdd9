//! RACK: time-based loss detection (RFC 8985 section 6). A segment is
//! deemed lost when a segment sent sufficiently later has been delivered;
//! "sufficiently" is the reordering window.

use ustack_wire::tcp::SeqNum;

use super::sack::{Scoreboard, Seg};
use crate::time::{Duration, Instant};

/// RFC 8985 constants: "DupThresh" (3) for the pre-reordering behaviour.
pub(crate) const DUP_THRESH: usize = 3;
/// Largest multiplier of min_RTT/4 the window grows to after DSACKs.
const MAX_REO_STEPS: u32 = 256;
/// Linux `tcp_max_reordering`: the reordering degree's ceiling.
const MAX_REORDERING: u32 = 300;

#[derive(Debug, Clone)]
pub(crate) struct Rack {
    /// RFC 8985 "RACK.xmit_ts", "RACK.end_seq", "RACK.rtt" of the most
    /// recently sent segment that has been delivered.
    xmit: Option<Instant>,
    end: SeqNum,
    /// "RACK.rtt" in µs (see `min_rtt`).
    rtt: u32,
    /// "RACK.min_RTT" (over the connection's lifetime; RFC 8985 suggests
    /// a windowed minimum, which this simplifies), in µs: a `Duration`
    /// would take the connection past its size budget.
    min_rtt: Option<u32>,
    /// "RACK.reordering_seen".
    pub(crate) reordering_seen: bool,
    /// The reordering degree in segments (Linux `tp->reordering`,
    /// `tcpi_reordering`): 3 (DupThresh, Linux's `tcp_reordering`) until
    /// more is seen.
    pub(crate) reordering: u32,
    /// Times reordering was seen (Linux `reord_seen`, `tcpi_reord_seen`).
    pub(crate) reord_seen: u32,
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
            rtt: 0,
            min_rtt: None,
            reordering_seen: false,
            reordering: DUP_THRESH as u32,
            reord_seen: 0,
            reo_steps: 1,
            dsack_round: None,
        }
    }

    /// "RACK.min_RTT", if any sample was taken.
    pub(crate) fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt.map(|m| Duration::from_micros(u64::from(m)))
    }

    pub(crate) fn on_rtt_sample(&mut self, r: Duration) {
        let r_us = u32::try_from(r.as_micros()).unwrap_or(u32::MAX);
        self.min_rtt = Some(self.min_rtt.map_or(r_us, |m| m.min(r_us)));
    }

    /// RFC 8985 6.2 steps 1-3 for one delivered (ACKed or SACKed) segment.
    /// `echo_before_xmit`: the ACK's TSecr predates the segment's last
    /// transmission (so it was triggered by an earlier copy).
    pub(crate) fn on_delivered(&mut self, seg: &Seg, now: Instant, echo_before_xmit: bool) {
        let rtt = now.saturating_duration_since(seg.xmit);
        // Step 2: "If Segment.retransmitted is TRUE and either ...
        // ACK.ts_option.echo_reply < Segment.xmit_ts [or] Now -
        // Segment.xmit_ts < RACK.min_RTT ... return" (ambiguous).
        if seg.rtx
            && (echo_before_xmit
                || self
                    .min_rtt
                    .is_some_and(|m| rtt < Duration::from_micros(u64::from(m))))
        {
            return;
        }
        // "RACK.rtt = Segment's RTT"; then "if RACK_sent_after(...)" (the
        // segment was sent later, ties broken by end sequence) "update
        // RACK.xmit_ts and RACK.end_seq". RACK.rtt takes every
        // unambiguous sample, whether or not the segment was the latest
        // sent: Linux (`tcp_rack_advance`) walks the newly SACKed, then
        // the cumulatively acknowledged segments in sequence order, and
        // keeps the RTT of the last one, an original transmission acked
        // after an earlier-sent retransmission included.
        self.rtt = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
        let newer = match self.xmit {
            None => true,
            Some(x) => seg.xmit > x || (seg.xmit == x && seg.end.gt(self.end)),
        };
        if newer {
            self.xmit = Some(seg.xmit);
            self.end = seg.end;
        }
    }

    /// SND.UNA advanced (call on every ACK that moves it). RFC 8985 6.2
    /// step 4: "If RACK.dsack_round is not None AND SND.UNA >=
    /// RACK.dsack_round: RACK.dsack_round = None". Done here, not when the
    /// next DSACK arrives: that may be 2^31 bytes later, when the
    /// modulo-2^32 comparison has flipped and a stale round would block
    /// all further growth of the window.
    pub(crate) fn on_ack(&mut self, snd_una: SeqNum) {
        if self.dsack_round.is_some_and(|r| snd_una.ge(r)) {
            self.dsack_round = None;
        }
    }

    /// RFC 8985 6.2 step 3 ("If Segment.end_seq < RACK.fack and
    /// Segment.retransmitted is FALSE, set RACK.reordering_seen to
    /// TRUE") as Linux does it (`tcp_check_sack_reordering`), once per
    /// ACK for what it SACKed and once for what it cumulatively
    /// acknowledged: `low` is the lowest start of a never-retransmitted
    /// segment it delivered below the forward-most SACKed sequence from
    /// before it, `fack` that sequence now (the end of the highest
    /// SACKed segment, or SND.UNA). The degree is how far, in segments.
    pub(crate) fn check_reordering(&mut self, low: SeqNum, fack: SeqNum, mss: usize) {
        if !low.lt(fack) {
            return;
        }
        let metric = fack.wrapping_sub(low) as usize;
        let mss = mss.max(1);
        if metric > self.reordering as usize * mss {
            let segs = u32::try_from(metric.div_ceil(mss)).unwrap_or(u32::MAX);
            self.reordering = segs.min(MAX_REORDERING);
        }
        self.reord_seen = self.reord_seen.saturating_add(1);
        self.reordering_seen = true;
    }

    /// A retransmission timeout in the Open or Disorder state with
    /// DupThresh segments SACKed: the degree was over-estimated (Linux
    /// `tcp_enter_loss`).
    pub(crate) fn on_rto_in_disorder(&mut self, sacked: usize) {
        if sacked >= DUP_THRESH {
            self.reordering = self.reordering.min(DUP_THRESH as u32);
        }
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
        let base = self
            .min_rtt
            .map_or(srtt, |m| Duration::from_micros(u64::from(m)))
            .max(srtt / 2)
            / 4;
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
                let due = s.xmit + Duration::from_micros(u64::from(self.rtt)) + reo_wnd;
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
        // Delivering the older one afterwards shows reordering: it lies
        // below the highest SACKed sequence (200) from before the ACK.
        let fack = sb.highest_sack().unwrap_or(SeqNum(0));
        assert_eq!(fack, SeqNum(200));
        let mut d = Vec::new();
        sb.ack(SeqNum(100), &mut |s| d.push(*s));
        for s in &d {
            rack.on_delivered(s, t(26), false);
        }
        let low = d.iter().find(|s| !s.rtx).map(|s| s.start);
        assert_eq!(low, Some(SeqNum(0)));
        rack.check_reordering(SeqNum(0), fack, 100);
        assert!(rack.reordering_seen);
        assert_eq!((rack.reord_seen, rack.reordering), (1, 3), "2 segments");
        rack.check_reordering(SeqNum(100), SeqNum(1_000), 100);
        assert_eq!((rack.reord_seen, rack.reordering), (2, 9), "9 segments");
        rack.check_reordering(SeqNum(1_000), SeqNum(1_000), 100);
        assert_eq!(rack.reord_seen, 2, "not below: no reordering");
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
