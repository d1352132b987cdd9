//! HyStartPP++ (RFC 9406), for `CcAlgorithm::CubicHyStartPlusPlus`: leave
//! slow start when the round-trip time starts
//! to grow, before the window overshoots the path, through a few rounds
//! of Conservative Slow Start (CSS) that undo the exit if the delay
//! increase was only jitter.
//!
//! RFC 9406 4.2: "An implementation SHOULD use HyStartPP++ only for the
//! initial slow start (when the ssthresh is at its initial value of
//! arbitrarily high per [RFC5681]) and fall back to using standard slow
//! start for the remainder of the connection lifetime." The controller
//! (`cubic.rs`) asks this only while ssthresh is at its initial value.
//!
//! The default CUBIC ends slow start as Linux does instead (`hystart.rs`:
//! Linux's HyStartPP, whose delay test ends it at once, without CSS), which
//! the packetdrill scripts encode; this RFC variant is selectable.

use ustack_wire::tcp::SeqNum;

use crate::time::Duration;

/// RFC 9406 4.3: "MIN_RTT_THRESH = 4 msec".
pub(crate) const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
/// RFC 9406 4.3: "MAX_RTT_THRESH = 16 msec".
pub(crate) const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
/// RFC 9406 4.3: "MIN_RTT_DIVISOR = 8".
pub(crate) const MIN_RTT_DIVISOR: u32 = 8;
/// RFC 9406 4.3: "N_RTT_SAMPLE = 8".
pub(crate) const N_RTT_SAMPLE: u32 = 8;
/// RFC 9406 4.3: "CSS_GROWTH_DIVISOR = 4".
pub(crate) const CSS_GROWTH_DIVISOR: usize = 4;
/// RFC 9406 4.3: "CSS_ROUNDS = 5".
pub(crate) const CSS_ROUNDS: u32 = 5;
/// RFC 9406 4.3: "L = infinity if paced, L = 8 if non-paced". We use
/// infinity in both cases, as Linux does (`tcp_slow_start` adds every
/// segment acknowledged): a non-paced sender's ACK covering ten segments
/// grows cwnd by ten, which Linux's own tests (packetdrill's slow_start
/// and cubic scripts) expect.
pub(crate) const NON_PACED_L: usize = usize::MAX;

/// What an ACK in slow start decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go on (in standard slow start or in CSS).
    Continue,
    /// "If CSS_ROUNDS rounds are complete, enter congestion avoidance by
    /// setting the ssthresh to the current cwnd."
    EnterCongestionAvoidance,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HyStartPP {
    /// "windowEnd": the round ends when it is acknowledged.
    window_end: Option<SeqNum>,
    /// "lastRoundMinRTT", "currentRoundMinRTT" (None = infinity).
    last_round_min: Option<Duration>,
    current_round_min: Option<Duration>,
    /// "rttSampleCount".
    samples: u32,
    /// "cssBaselineMinRtt": Some while in CSS.
    css_baseline: Option<Duration>,
    /// CSS rounds completed (the partial round CSS started in counts).
    css_rounds: u32,
    /// RFC 9406 4.3 "L", in segments (`usize::MAX`: infinity).
    limit: usize,
}

impl HyStartPP {
    pub(crate) fn new(paced: bool) -> HyStartPP {
        HyStartPP {
            window_end: None,
            last_round_min: None,
            current_round_min: None,
            samples: 0,
            css_baseline: None,
            css_rounds: 0,
            // "A paced TCP implementation SHOULD use L = infinity. Burst
            // concerns are mitigated by pacing, and this setting allows for
            // optimal cwnd growth on modern networks."
            limit: if paced { usize::MAX } else { NON_PACED_L },
        }
    }

    /// In Conservative Slow Start.
    pub(crate) fn in_css(&self) -> bool {
        self.css_baseline.is_some()
    }

    /// The cwnd increase for an ACK of `acked` new bytes in slow start.
    pub(crate) fn growth(&self, acked: usize, mss: usize) -> usize {
        // "For each arriving ACK in slow start, where N is the number of
        // previously unacknowledged bytes acknowledged in the arriving ACK:
        // Update the cwnd: cwnd = cwnd + min(N, L * SMSS)"
        let n = acked.min(self.limit.saturating_mul(mss));
        if self.in_css() {
            // "For each arriving ACK in CSS ...: cwnd = cwnd + (min(N, L *
            // SMSS) / CSS_GROWTH_DIVISOR)"
            n / CSS_GROWTH_DIVISOR
        } else {
            n
        }
    }

    /// "At the start of each round during standard slow start [RFC5681]
    /// and CSS, initialize the variables used to compute the last round's
    /// and current round's minimum RTT: lastRoundMinRTT =
    /// currentRoundMinRTT; currentRoundMinRTT = infinity; rttSampleCount = 0"
    fn start_round(&mut self, snd_nxt: SeqNum) {
        // "Define windowEnd as a sequence number initialized to SND.NXT.
        // When windowEnd is ACKed, the current round ends and windowEnd is
        // set to SND.NXT."
        self.window_end = Some(snd_nxt);
        self.last_round_min = self.current_round_min;
        self.current_round_min = None;
        self.samples = 0;
    }

    /// One ACK in slow start (standard or CSS): `una` is SND.UNA after it,
    /// `snd_nxt` the highest sequence sent, `rtt` its RTT sample if any.
    pub(crate) fn on_ack(
        &mut self,
        una: SeqNum,
        snd_nxt: SeqNum,
        rtt: Option<Duration>,
    ) -> Verdict {
        if self.window_end.is_none() {
            self.start_round(snd_nxt);
        }
        // "Keep track of the minimum observed RTT: currentRoundMinRTT =
        // min(currentRoundMinRTT, currRTT); rttSampleCount += 1"
        if let Some(r) = rtt {
            self.current_round_min = Some(self.current_round_min.map_or(r, |m| m.min(r)));
            self.samples += 1;
        }
        let enough = self.samples >= N_RTT_SAMPLE;
        if let Some(baseline) = self.css_baseline {
            // "For CSS rounds where at least N_RTT_SAMPLE RTT samples have
            // been obtained, check to see if the current round's minRTT
            // drops below baseline (cssBaselineMinRtt) indicating that slow
            // start exit was spurious: if (currentRoundMinRTT <
            // cssBaselineMinRtt) cssBaselineMinRtt = infinity; resume slow
            // start including HyStartPP++"
            if enough && self.current_round_min.is_some_and(|m| m < baseline) {
                self.css_baseline = None;
                self.css_rounds = 0;
            }
        } else if let (true, Some(cur), Some(last)) =
            (enough, self.current_round_min, self.last_round_min)
        {
            // "For rounds where at least N_RTT_SAMPLE RTT samples have been
            // obtained and currentRoundMinRTT and lastRoundMinRTT are
            // valid, check to see if delay increase triggers slow start
            // exit: RttThresh = max(MIN_RTT_THRESH, min(lastRoundMinRTT /
            // MIN_RTT_DIVISOR, MAX_RTT_THRESH)); if (currentRoundMinRTT >=
            // (lastRoundMinRTT + RttThresh)) cssBaselineMinRtt =
            // currentRoundMinRTT; exit slow start and enter CSS"
            let thresh = (last / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH);
            if cur >= last + thresh {
                self.css_baseline = Some(cur);
                self.css_rounds = 0;
            }
        }
        if self.window_end.is_some_and(|w| una.ge(w)) {
            if self.in_css() {
                // "CSS lasts at most CSS_ROUNDS rounds. If the transition
                // into CSS happens in the middle of a round, that partial
                // round counts towards the limit."
                self.css_rounds += 1;
                if self.css_rounds >= CSS_ROUNDS {
                    self.css_baseline = None;
                    self.css_rounds = 0;
                    self.window_end = None;
                    return Verdict::EnterCongestionAvoidance;
                }
            }
            self.start_round(snd_nxt);
        }
        Verdict::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    /// Drive one round: `acks` ACKs each with RTT `rtt`, the last one
    /// acknowledging the round's end. Returns the verdicts.
    fn round(h: &mut HyStartPP, seq: &mut u32, acks: u32, rtt: Duration) -> Vec<Verdict> {
        let end = h.window_end.map_or(*seq, |w| w.0);
        let step = (end.wrapping_sub(*seq) / acks).max(1);
        let mut out = Vec::new();
        for i in 1..=acks {
            let una = if i == acks {
                end
            } else {
                seq.wrapping_add(step * i)
            };
            // A new round's end: the data sent meanwhile (a doubling).
            let nxt = end.wrapping_add(2 * acks * MSS as u32);
            out.push(h.on_ack(SeqNum(una), SeqNum(nxt), Some(rtt)));
        }
        *seq = end;
        out
    }

    fn started(rtt: Duration) -> (HyStartPP, u32) {
        let mut h = HyStartPP::new(true);
        let mut seq = 0u32;
        // The first ACK opens the first round.
        h.on_ack(SeqNum(0), SeqNum(10 * MSS as u32), Some(rtt));
        round(&mut h, &mut seq, 10, rtt);
        (h, seq)
    }

    #[test]
    fn growth_is_not_limited_and_divided_in_css() {
        let paced = HyStartPP::new(true);
        assert_eq!(paced.growth(20 * MSS, MSS), 20 * MSS, "L = infinity");
        // Linux's L (not RFC 9406's 8 for a non-paced sender): every
        // segment acknowledged counts.
        let mut unpaced = HyStartPP::new(false);
        assert_eq!(
            unpaced.growth(20 * MSS, MSS),
            20 * MSS,
            "L = infinity, as Linux"
        );
        unpaced.css_baseline = Some(Duration::from_millis(50));
        assert_eq!(unpaced.growth(20 * MSS, MSS), 5 * MSS, "CSS: / 4");
        assert_eq!(unpaced.growth(1000, MSS), 250);
    }

    /// RttThresh = max(4 ms, min(lastRoundMinRTT / 8, 16 ms)): with a 40 ms
    /// base RTT, 5 ms. A round whose minimum RTT is 44.9 ms stays in slow
    /// start, one at 45 ms exits to CSS after its eighth sample (not
    /// before), and five rounds of CSS end slow start.
    #[test]
    fn exits_on_rtt_increase_then_css_rounds_end_slow_start() {
        let base = Duration::from_millis(40);
        let (mut h, mut seq) = started(base);
        round(&mut h, &mut seq, 10, Duration::from_micros(44_900));
        assert!(!h.in_css(), "below the threshold");
        // A round at the base RTT again (lastRoundMinRTT becomes 40 ms).
        round(&mut h, &mut seq, 10, base);
        assert!(!h.in_css());
        // The next round: 45 ms = 40 + 40/8.
        let end = h.window_end.unwrap().0;
        let high = Duration::from_millis(45);
        for i in 1..=7u32 {
            h.on_ack(SeqNum(seq + i), SeqNum(end + 100_000), Some(high));
            assert!(!h.in_css(), "only {i} samples");
        }
        h.on_ack(SeqNum(seq + 8), SeqNum(end + 100_000), Some(high));
        assert!(h.in_css(), "the eighth sample exits to CSS");
        assert_eq!(h.css_baseline, Some(high));
        // That partial round counts: it and four more end slow start.
        let v = h.on_ack(SeqNum(end), SeqNum(end + 100_000), Some(high));
        assert_eq!(v, Verdict::Continue);
        seq = end;
        for r in 2..=5 {
            let v = round(&mut h, &mut seq, 10, high);
            let last = *v.last().unwrap();
            if r < 5 {
                assert_eq!(last, Verdict::Continue, "CSS round {r}");
                assert!(h.in_css());
            } else {
                assert_eq!(last, Verdict::EnterCongestionAvoidance);
            }
        }
    }

    /// Thresholds are clamped to 4..16 ms: a 10 ms path exits at +4 ms (not
    /// +1.25), a 400 ms path at +16 ms (not +50).
    #[test]
    fn rtt_threshold_is_clamped() {
        for (base, below, at) in [(10u64, 13_900u64, 14_000u64), (400, 415_900, 416_000)] {
            let b = Duration::from_millis(base);
            let (mut h, mut seq) = started(b);
            round(&mut h, &mut seq, 10, Duration::from_micros(below));
            assert!(!h.in_css(), "base {base} ms: +{} us", below - base * 1000);
            round(&mut h, &mut seq, 10, b);
            round(&mut h, &mut seq, 10, Duration::from_micros(at));
            assert!(h.in_css(), "base {base} ms: +{} us", at - base * 1000);
        }
    }

    /// CSS was entered on jitter: a round whose minimum RTT drops below the
    /// baseline resumes standard slow start (and its growth).
    #[test]
    fn css_is_left_when_rtt_drops_below_baseline() {
        let base = Duration::from_millis(40);
        let (mut h, mut seq) = started(base);
        round(&mut h, &mut seq, 10, Duration::from_millis(50));
        assert!(h.in_css());
        assert_eq!(h.growth(4 * MSS, MSS), MSS);
        let v = round(&mut h, &mut seq, 10, Duration::from_millis(41));
        assert!(v.iter().all(|&v| v == Verdict::Continue));
        assert!(!h.in_css(), "resumed slow start");
        assert_eq!(h.growth(4 * MSS, MSS), 4 * MSS);
    }

    /// Too few samples in a round never exit (delayed ACKs on a small
    /// window), whatever the RTT.
    #[test]
    fn few_samples_never_exit() {
        let (mut h, mut seq) = started(Duration::from_millis(40));
        for _ in 0..10 {
            round(&mut h, &mut seq, 7, Duration::from_millis(200));
            assert!(!h.in_css());
        }
    }
}
