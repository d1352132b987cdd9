//! Pacing: data leaves at a rate derived from cwnd and the smoothed RTT
//! instead of in line-rate bursts of a whole window, so a window's worth
//! of data does not overrun a bottleneck's queue (as Linux paces, with
//! `fq` or its internal pacing, `tcp_update_pacing_rate`).
//!
//! The rate is a gain times cwnd / SRTT: 200% in slow start (while cwnd <
//! ssthresh / 2, so slow start can still double cwnd each round) and 120%
//! after. Segments leave in bursts of about 1 ms of data at that rate and
//! at least two segments (Linux's TSO autosizing, `tcp_tso_autosize` with
//! `sk_pacing_shift` 10), so a connection needs one timer per burst, not
//! per segment; the next burst may leave once the previous one's bytes
//! have had their time at the rate. Unlike Linux, bursts are not capped at
//! 64 KB (a GSO segment's limit, which our MSS-sized segments do not
//! have): the runtime's timers have millisecond resolution, so a burst
//! must carry at least a millisecond's data, or a fast sender (above ~500
//! Mbit/s) would be held to 64 KB per timer tick. Where a millisecond's
//! data exceeds cwnd (RTTs below ~1.2 ms: a LAN, a TAP) pacing never holds
//! anything back. The first nine
//! segments go unpaced (as `sch_fq` does not pace a flow's first ten, and
//! Linux's EDT pacing, `tcp_update_skb_after_send`, paces from the
//! packet that brings `data_segs_out` to ten), and
//! with no RTT measured yet, or an RTT of zero, nothing is paced.

use crate::time::{Duration, Instant};

/// Linux `tcp_pacing_ss_ratio`: 200%.
pub(crate) const SS_GAIN_PCT: u128 = 200;
/// Linux `tcp_pacing_ca_ratio`: 120%.
pub(crate) const CA_GAIN_PCT: u128 = 120;
/// About this much data at the pacing rate goes in one burst.
pub(crate) const BURST_TIME: Duration = Duration::from_millis(1);
/// Bursts carry at least this many segments (Linux `tcp_min_tso_segs`).
pub(crate) const MIN_BURST_SEGS: usize = 2;
/// Data segments sent before pacing starts.
pub(crate) const UNPACED_SEGS: u32 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pacer {
    pub(crate) enabled: bool,
    /// `next` holds: the earliest time the next burst may leave (Linux
    /// `tcp_wstamp_ns`). A flag and a plain Instant, not an Option: every
    /// connection carries this (`Connection` stays within 1 KB).
    gated: bool,
    next: Instant,
    /// Data segments sent so far (saturating).
    segs_out: u32,
    /// The burst being sent (bytes, segments).
    burst_bytes: u32,
    burst_segs: u32,
}

impl Pacer {
    pub(crate) fn new(enabled: bool) -> Pacer {
        Pacer {
            enabled,
            gated: false,
            next: Instant::ZERO,
            segs_out: 0,
            burst_bytes: 0,
            burst_segs: 0,
        }
    }

    pub(crate) fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
        if !on {
            self.gated = false;
        }
    }

    fn next_at(&self) -> Option<Instant> {
        self.gated.then_some(self.next)
    }

    fn set_next_at(&mut self, at: Option<Instant>) {
        self.gated = at.is_some();
        self.next = at.unwrap_or(Instant::ZERO);
    }

    /// The pacing rate in bytes per second for `cwnd` (and `flight`: Linux
    /// paces at max(cwnd, packets_out) / SRTT), or None when nothing is
    /// paced (no RTT yet, or zero).
    pub(crate) fn rate(
        cwnd: usize,
        ssthresh: usize,
        flight: usize,
        srtt: Option<Duration>,
    ) -> Option<u64> {
        let srtt_us = srtt?.as_micros();
        if srtt_us == 0 {
            return None;
        }
        // Linux: "In Slow Start [1], set sk_pacing_rate to 200 % the
        // current rate. In Congestion Avoidance phase, set it to 120 % the
        // current rate. [1] : Normal Slow Start condition is (tp->snd_cwnd
        // < tp->snd_ssthresh) If snd_cwnd >= (tp->snd_ssthresh / 2), we are
        // approaching end of slow start and should slow down."
        let gain = if cwnd < ssthresh / 2 {
            SS_GAIN_PCT
        } else {
            CA_GAIN_PCT
        };
        let bytes = cwnd.max(flight) as u128 * gain * 1_000_000 / (100 * srtt_us);
        Some(u64::try_from(bytes).unwrap_or(u64::MAX).max(1))
    }

    /// The bytes one burst carries at `rate`.
    pub(crate) fn burst(rate: u64, mss: usize) -> usize {
        let per_burst = u128::from(rate) * BURST_TIME.as_micros() / 1_000_000;
        let min = MIN_BURST_SEGS * mss.max(1);
        usize::try_from(per_burst).unwrap_or(usize::MAX).max(min)
    }

    /// Is the connection past its unpaced start and paced at all?
    fn active(&self) -> bool {
        self.enabled && self.segs_out >= UNPACED_SEGS
    }

    /// When data may leave next, if pacing holds it until then.
    pub(crate) fn gate(&self) -> Option<Instant> {
        self.next_at().filter(|_| self.active())
    }

    /// The bytes this `dispatch` may send at `now` (`usize::MAX`: no
    /// limit); a burst already begun in this dispatch counts against it.
    pub(crate) fn budget(&self, now: Instant, rate: Option<u64>, mss: usize) -> usize {
        let Some(rate) = rate.filter(|_| self.active()) else {
            return usize::MAX;
        };
        if self.next_at().is_some_and(|t| now < t) && self.burst_segs == 0 {
            return 0;
        }
        Pacer::burst(rate, mss).saturating_sub(self.burst_bytes as usize)
    }

    /// A data segment (or a FIN) of `len` sequence numbers went out.
    pub(crate) fn on_sent(&mut self, len: usize) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        self.burst_bytes = self.burst_bytes.saturating_add(len);
        self.burst_segs = self.burst_segs.saturating_add(1);
    }

    /// The burst sent at `now` is over: the next may leave when its bytes
    /// have had their time at `rate`. Like Linux
    /// (`tcp_update_skb_after_send`), a burst that left late gets up to
    /// half its time back: "take into account OS jitter". With the
    /// runtime's millisecond timers (`epoll_wait`) and bursts of a
    /// millisecond's data, that keeps ~96% of the rate: a wait rounded up
    /// to the next millisecond is mostly given back to the next burst.
    pub(crate) fn end_burst(&mut self, now: Instant, rate: Option<u64>) {
        let (bytes, segs) = (self.burst_bytes, self.burst_segs);
        self.burst_bytes = 0;
        self.burst_segs = 0;
        if segs == 0 {
            return;
        }
        self.segs_out = self.segs_out.saturating_add(segs);
        // Linux paces a packet once `data_segs_out`, counting it, reaches
        // ten: the burst that ends the unpaced start is paced for its
        // segments from the tenth on.
        let paced_segs = self.segs_out.saturating_sub(UNPACED_SEGS - 1).min(segs);
        let Some(rate) = rate.filter(|_| self.enabled && paced_segs > 0) else {
            self.set_next_at(None);
            return;
        };
        let bytes = u64::from(bytes) * u64::from(paced_segs) / u64::from(segs);
        let len_us =
            u64::try_from(u128::from(bytes) * 1_000_000 / u128::from(rate)).unwrap_or(u64::MAX);
        let prior = self.next_at().unwrap_or(now);
        let start = prior.max(now);
        let credit = start.saturating_duration_since(prior).as_micros();
        let credit = u64::try_from(credit).unwrap_or(u64::MAX).min(len_us / 2);
        self.set_next_at(Some(start + Duration::from_micros(len_us - credit)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1448;

    #[test]
    fn rate_is_gain_times_cwnd_over_srtt() {
        let srtt = Some(Duration::from_millis(20));
        // CA: 100 segments per 20 ms at 120%.
        let r = Pacer::rate(100 * MSS, 50 * MSS, 0, srtt).unwrap();
        assert_eq!(r, (100 * MSS * 120 / 100 * 50) as u64);
        // Slow start (cwnd < ssthresh / 2): 200%.
        let r = Pacer::rate(10 * MSS, 1 << 40, 0, srtt).unwrap();
        assert_eq!(r, (10 * MSS * 2 * 50) as u64);
        // The flight counts when above cwnd (after a cwnd reduction).
        assert_eq!(
            Pacer::rate(10 * MSS, 10 * MSS, 20 * MSS, srtt),
            Pacer::rate(20 * MSS, 10 * MSS, 0, srtt)
        );
        assert_eq!(Pacer::rate(10 * MSS, 10, 0, None), None);
        assert_eq!(Pacer::rate(10 * MSS, 10, 0, Some(Duration::ZERO)), None);
    }

    #[test]
    fn bursts_are_a_millisecond_and_at_least_two_segments() {
        // 100 Mbit/s: 12.5 KB per ms.
        assert_eq!(Pacer::burst(12_500_000, MSS), 12_500);
        assert_eq!(Pacer::burst(100_000, MSS), 2 * MSS);
        // 10 Gbit/s: 1.25 MB (no 64 KB cap: one timer tick's worth).
        assert_eq!(Pacer::burst(1_250_000_000, MSS), 1_250_000);
    }

    /// After ten unpaced segments, bursts leave one burst time apart at
    /// the rate; a late start is credited up to half a burst.
    #[test]
    fn bursts_are_spaced_by_their_time_at_the_rate() {
        let mut p = Pacer::new(true);
        let rate = Some(12_500_000); // 100 Mbit/s
        let t0 = Instant::from_secs(1);
        assert_eq!(p.budget(t0, rate, MSS), usize::MAX, "the first ten");
        // A burst within the first nine sets no gate.
        let mut q = Pacer::new(true);
        for _ in 0..9 {
            q.on_sent(MSS);
        }
        q.end_burst(t0, rate);
        assert_eq!(q.gate(), None, "nine unpaced segments");
        for _ in 0..10 {
            p.on_sent(MSS);
        }
        p.end_burst(t0, rate);
        // Linux paces the packet that brings `data_segs_out` to ten: the
        // tenth segment's 1448 bytes at 12.5 MB/s, 115 us.
        let t1 = t0 + Duration::from_micros(115);
        assert_eq!(p.gate(), Some(t1), "the tenth segment is paced");
        assert_eq!(p.budget(t1 - Duration::from_micros(1), rate, MSS), 0);
        let b = p.budget(t1, rate, MSS);
        assert_eq!(b, 12_500);
        for _ in 0..8 {
            p.on_sent(MSS);
        }
        assert_eq!(p.budget(t1, rate, MSS), 12_500 - 8 * MSS);
        p.on_sent(MSS);
        assert_eq!(p.budget(t1, rate, MSS), 0, "a segment may overshoot");
        p.end_burst(t1, rate);
        // 9 * 1448 bytes at 12.5 MB/s: 1042 us.
        let next = t1 + Duration::from_micros(1042);
        assert_eq!(p.gate(), Some(next));
        assert_eq!(p.budget(next - Duration::from_micros(1), rate, MSS), 0);
        assert_eq!(p.budget(next, rate, MSS), 12_500);
        // Sent 300 us late: 300 us of credit.
        let late = next + Duration::from_micros(300);
        for _ in 0..9 {
            p.on_sent(MSS);
        }
        p.end_burst(late, rate);
        assert_eq!(p.gate(), Some(late + Duration::from_micros(1042 - 300)));
        // Disabled: no gate, no budget.
        p.set_enabled(false);
        assert_eq!(p.gate(), None);
        assert_eq!(p.budget(late, rate, MSS), usize::MAX);
    }
}
