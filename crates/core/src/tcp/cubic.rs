//! CUBIC, two ways:
//!
//! - `cubic`, the default: Linux's CUBIC. HyStart (`hystart.rs`) ends slow
//!   start, and congestion avoidance grows cwnd as Linux's `tcp_cubic.c`
//!   does (`cubic_linux.rs`: `cnt` ACKs per segment, the Reno estimate
//!   capping `cnt`, jiffies, beta 717/1024), so that ustack's windows are
//!   the kernel's, ACK for ACK (the packetdrill scripts check them). Two
//!   deliberate differences, both outside the growth: ssthresh is beta =
//!   717/1024 of the window to the byte (Linux floors it to whole
//!   segments), and an undo while cwnd is below prior_cwnd also restores
//!   CUBIC's state (RFC 9438 4.9.2; Linux restores cwnd and ssthresh
//!   only); see `linux_ssthresh` and `on_undo` for why.
//! - `cubic-hystart++`: RFC 9438's model (below) with RFC 9406's HyStart++
//!   ending slow start; the documented RFC variant.
//!
//! The RFC 9438 model: all integer (no floating point): windows in bytes, times in
//! microseconds, the cubic function in 128-bit integers and K by an
//! integer cube root, so a run gives the same windows on every platform
//! (the simulation depends on it). The constants are exact fractions:
//! C = 0.4 = 2/5, beta_cubic = 0.7 = 7/10, alpha_cubic = 3 * (1 - 0.7) /
//! (1 + 0.7) = 9/17, the fast convergence factor (1 + beta_cubic) / 2 =
//! 17/20. W_est is kept in 1/65536ths of a byte, and cwnd's per-ACK
//! increments of (target - cwnd) / cwnd accumulate their remainders, so
//! no growth is lost to rounding.
//!
//! RFC 9438 counts windows in segments; here W_max, W_est, cwnd and
//! target are bytes and the formulas are scaled by the sender MSS:
//! W_cubic(t) = C * SMSS * (t - K)^3 + W_max, K = cbrt((W_max -
//! cwnd_epoch) / (C * SMSS)).

use super::cc::{AckSample, CcSnapshot, CongestionControl, INITIAL_SSTHRESH};
use super::cubic_linux::{jiffies, Bictcp};
use super::hystart::{HyStart, Round, Verdict};
use super::hystart_pp::{self, HyStartPP};
use crate::time::{Duration, Instant};

/// RFC 9438's C, "the aggressiveness of window increase", 0.4 segments
/// per second cubed, as C_NUM / C_DEN.
const C_NUM: i128 = 2;
const C_DEN: i128 = 5;
/// RFC 9438 4.6: "The parameter beta_cubic SHOULD be set to 0.7".
const BETA_NUM: usize = 7;
const BETA_DEN: usize = 10;
/// RFC 9438 4.3 Figure 3: "alpha_cubic = 3 * (1 - beta_cubic) / (1 +
/// beta_cubic)" = 0.9 / 1.7.
const ALPHA_NUM: u128 = 9;
const ALPHA_DEN: u128 = 17;
/// RFC 9438 4.7: "W_max = cwnd * (1 + beta_cubic) / 2".
const FAST_CONVERGENCE_NUM: usize = 17;
const FAST_CONVERGENCE_DEN: usize = 20;
/// W_est's fixed point: 1/65536 byte.
const WEST_SHIFT: u32 = 16;
/// Microseconds per second, cubed (the cubic function's time unit).
const US3_PER_S3: i128 = 1_000_000_000_000_000_000;
/// |t - K| is clamped to this (about 2.4 hours): the cube stays far
/// inside 128 bits and the window far beyond any buffer.
const MAX_DT_US: i128 = 1 << 33;

/// The largest `r` with `r^3 <= x`.
fn icbrt(x: u128) -> u128 {
    let (mut lo, mut hi) = (0u128, 1u128 << 43);
    // (2^43)^3 = 2^129 > u128::MAX >= x: the root is below 2^43.
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let cube = mid.checked_mul(mid).and_then(|s| s.checked_mul(mid));
        if cube.is_some_and(|c| c <= x) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// RFC 9438 4.2 Figure 2: "K = cubic_root((W_max - cwnd_epoch) / C)",
/// in microseconds; windows in bytes (so divided by C * SMSS); 0 when
/// cwnd_epoch is not below W_max.
pub(crate) fn k_micros(w_max: usize, cwnd_epoch: usize, mss: usize) -> u64 {
    if w_max <= cwnd_epoch || mss == 0 {
        return 0;
    }
    let diff = (w_max - cwnd_epoch) as u128;
    // (diff / SMSS) / C seconds^3 = diff * C_DEN / (C_NUM * SMSS) * 10^18 us^3.
    let x = diff
        .saturating_mul(C_DEN as u128)
        .saturating_mul(US3_PER_S3 as u128)
        / (C_NUM as u128 * mss as u128);
    u64::try_from(icbrt(x)).unwrap_or(u64::MAX)
}

/// RFC 9438 4.2 Figure 1: "W_cubic(t) = C * (t - K)^3 + W_max", in bytes
/// (times SMSS), with `t` and `K` in microseconds.
pub(crate) fn w_cubic(t_us: u64, k_us: u64, w_max: usize, mss: usize) -> usize {
    let d = (i128::from(t_us) - i128::from(k_us)).clamp(-MAX_DT_US, MAX_DT_US);
    let delta = C_NUM * d * d * d * mss as i128 / (C_DEN * US3_PER_S3);
    let w = (w_max as i128).saturating_add(delta);
    usize::try_from(w.clamp(0, INITIAL_SSTHRESH as i128)).unwrap_or(0)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// CUBIC's own variables, saved before a congestion event so that a
/// spurious one can be undone (RFC 9438 4.9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CubicPrior {
    w_max: usize,
    k_us: u64,
    epoch: Option<Instant>,
    cwnd_epoch: usize,
    w_est: u64,
    cwnd_prior: usize,
    after_timeout: bool,
    /// Linux's state (`cubic`).
    bic: Bictcp,
}

/// CUBIC congestion control: Linux's (the default) or RFC 9438's (with
/// HyStart++).
#[derive(Debug, Clone)]
pub struct Cubic {
    /// Linux's congestion avoidance state (`struct bictcp`), in segments
    /// and jiffies; unused in the RFC 9438 variant.
    bic: Bictcp,
    /// Acknowledged bytes short of a segment, carried to the next ACK
    /// (Linux counts segments).
    acked_rem: usize,
    cwnd: usize,
    ssthresh: usize,
    initial_segments: usize,
    hystart: HyStart,
    /// RFC 9406's HyStart++ in place of Linux's HyStart
    /// (`CcAlgorithm::CubicHyStartPlusPlus`), boxed: rarely chosen.
    hspp: Option<Box<HyStartPP>>,
    /// RFC 9438 "W_max": "Size of cwnd in segments just before cwnd was
    /// reduced in the last congestion event when fast convergence is
    /// disabled (same as cwnd_prior on a congestion event). However, if
    /// fast convergence is enabled, W_max may be further reduced".
    w_max: usize,
    /// "cwnd_prior": cwnd before the last reduction (alpha_cubic's switch).
    cwnd_prior: usize,
    /// "K", in microseconds.
    k_us: u64,
    /// "epoch_start": the start of the current congestion avoidance
    /// stage; None until the stage starts (at the first ACK in it).
    epoch: Option<Instant>,
    /// "cwnd_epoch".
    cwnd_epoch: usize,
    /// "W_est", in 1/65536 byte.
    w_est: u64,
    /// Sum of (target - cwnd) * acked not yet turned into cwnd bytes.
    grow_acc: u128,
    /// The last congestion event was a timeout (RFC 9438 4.8).
    after_timeout: bool,
    /// Since when ACKs came while the sender was application-limited.
    app_limited_since: Option<Instant>,
}

impl Cubic {
    /// An ACK in congestion avoidance (cwnd at or above ssthresh).
    fn on_ack_avoidance(&mut self, ack: &AckSample, mss: usize) {
        let _ = mss;
        if !ack.cwnd_limited {
            // RFC 9438 5.8: "CUBIC does not increase its congestion window
            // size if a flow is currently limited by the application";
            // 4.2: "The elapsed time t in Figure 1 MUST NOT include periods
            // during which cwnd has not been updated due to
            // application-limited behavior".
            if self.epoch.is_some() && self.app_limited_since.is_none() {
                self.app_limited_since = Some(ack.now);
            }
            return;
        }
        if let (Some(since), Some(epoch)) = (self.app_limited_since.take(), self.epoch) {
            self.epoch = Some(epoch + ack.now.saturating_duration_since(since));
        }
        self.congestion_avoidance(ack);
    }

    /// CUBIC with RFC 9406's HyStart++ ending the initial slow start
    /// (Conservative Slow Start included) instead of Linux's HyStart.
    pub(crate) fn with_hystart_pp(initial_segments: u32, mss: usize, paced: bool) -> Cubic {
        let mut c = Cubic::new(initial_segments, mss, paced);
        c.hspp = Some(Box::new(HyStartPP::new(paced)));
        c
    }

    #[cfg(test)]
    pub(crate) fn in_css(&self) -> bool {
        self.hspp.as_ref().is_some_and(|h| h.in_css())
    }

    /// cwnd = `initial_segments` * `mss`; ssthresh arbitrarily high (RFC
    /// 5681 3.1); `paced`: the sender paces (HyStart's ACK train allowance).
    pub fn new(initial_segments: u32, mss: usize, paced: bool) -> Cubic {
        let initial_segments = (initial_segments as usize).max(1);
        Cubic {
            bic: Bictcp::default(),
            acked_rem: 0,
            cwnd: initial_segments * mss.max(1),
            ssthresh: INITIAL_SSTHRESH,
            initial_segments,
            hystart: HyStart::new(paced),
            hspp: None,
            w_max: 0,
            cwnd_prior: 0,
            k_us: 0,
            epoch: None,
            cwnd_epoch: 0,
            w_est: 0,
            grow_acc: 0,
            after_timeout: false,
            app_limited_since: None,
        }
    }

    /// Linux's growth (`cubic`), not RFC 9438's (`cubic-hystart++`).
    fn linux(&self) -> bool {
        self.hspp.is_none()
    }

    /// Linux `cubictcp_cong_avoid` after slow start: `acked` bytes (the
    /// part of the ACK slow start did not use) in congestion avoidance:
    /// `bictcp_update`, then `tcp_cong_avoid_ai`, in segments.
    fn linux_avoid(&mut self, now: Instant, acked: usize, mss: usize) {
        let total = self.acked_rem.saturating_add(acked);
        self.acked_rem = total % mss;
        let acked = u32::try_from(total / mss).unwrap_or(u32::MAX);
        if acked == 0 {
            return;
        }
        let segs = u32::try_from(self.cwnd / mss).unwrap_or(u32::MAX).max(1);
        let delay_min = self.hystart.delay_min_us().unwrap_or(0);
        self.bic.update(segs, acked, jiffies(now), delay_min);
        let grown = self.bic.avoid_ai(segs, acked).saturating_sub(segs) as usize;
        self.cwnd = self
            .cwnd
            .saturating_add(grown.saturating_mul(mss))
            .min(INITIAL_SSTHRESH);
    }

    /// `cubictcp_recalc_ssthresh` on a window of `flight` bytes (`segs`
    /// whole segments): W_max and the epoch as Linux sets them; ssthresh
    /// beta = 717/1024 of the window, kept to the byte (Linux: whole
    /// segments, floored). At the few-segment windows of heavy loss the
    /// floor took up to a segment from every reduction (3 of a 5-segment
    /// window where 3.5 is 0.7 of it), which cost a fifth of the goodput
    /// at 5% loss (tests/tcp_loss_recovery.rs); tcpi_snd_ssthresh, which
    /// counts whole segments, reads the same either way.
    fn linux_ssthresh(bic: &mut Bictcp, segs: u32, flight: usize, mss: usize) -> usize {
        let floor = bic.recalc_ssthresh(segs) as usize * mss;
        let bytes = u64::try_from(flight).unwrap_or(u64::MAX) / 1024 * 717
            + u64::try_from(flight % 1024).unwrap_or(0) * 717 / 1024;
        usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .max(floor)
            .max(2 * mss)
    }

    /// Linux's state, for tests.
    #[cfg(test)]
    pub(crate) fn bic(&self) -> &Bictcp {
        &self.bic
    }

    /// K of the current congestion avoidance stage.
    #[cfg(test)]
    pub(crate) fn k(&self) -> Duration {
        Duration::from_micros(self.k_us)
    }

    #[cfg(test)]
    pub(crate) fn w_max(&self) -> usize {
        self.w_max
    }

    pub(crate) fn w_est(&self) -> usize {
        (self.w_est >> WEST_SHIFT) as usize
    }

    /// The start of a congestion avoidance stage (at its first ACK).
    fn start_epoch(&mut self, now: Instant, mss: usize) {
        self.epoch = Some(now);
        self.cwnd_epoch = self.cwnd;
        if self.after_timeout || self.w_max <= self.cwnd {
            // RFC 9438 4.8: "During the first congestion avoidance stage
            // after a timeout, CUBIC increases its congestion window size
            // using Figure 1, where t is the elapsed time since the
            // beginning of the current congestion avoidance stage, K is set
            // to 0, and W_max is set to the congestion window size at the
            // beginning of the current congestion avoidance stage." The
            // same when no congestion event set W_max above cwnd (slow
            // start ended by HyStart, or cwnd grew past it), as Linux.
            self.k_us = 0;
            self.w_max = self.cwnd;
        } else {
            self.k_us = k_micros(self.w_max, self.cwnd, mss);
        }
        // RFC 9438 4.3: "W_est is set equal to cwnd_epoch at the start of
        // the congestion avoidance stage." (4.8: likewise after a timeout.)
        self.w_est = (self.cwnd as u64) << WEST_SHIFT;
        self.grow_acc = 0;
        self.after_timeout = false;
    }

    fn congestion_avoidance(&mut self, ack: &AckSample) {
        let mss = ack.mss.max(1);
        let now = ack.now;
        let epoch = match self.epoch {
            Some(e) => e,
            None => {
                self.start_epoch(now, mss);
                now
            }
        };
        let cwnd = self.cwnd.max(1);
        // RFC 9438 4.3 Figure 4: "W_est = W_est + alpha_cubic *
        // segments_acked / cwnd" (in bytes: alpha * acked * SMSS / cwnd).
        // "Once W_est has grown to reach the cwnd at the time of most
        // recently setting ssthresh -- that is, W_est >= cwnd_prior -- the
        // sender SHOULD set alpha_cubic to 1 to ensure that it can achieve
        // the same congestion window increment rate as Reno, which uses
        // AIMD(1, 0.5)."
        let (an, ad) = if self.w_est() >= self.cwnd_prior {
            (1, 1)
        } else {
            (ALPHA_NUM, ALPHA_DEN)
        };
        let inc = (an * ack.acked as u128 * mss as u128) << WEST_SHIFT;
        let inc = inc / (ad * cwnd as u128);
        self.w_est = self
            .w_est
            .saturating_add(u64::try_from(inc).unwrap_or(u64::MAX));
        // "t is the elapsed time in seconds from the beginning of the
        // current congestion avoidance stage".
        let t = micros(now.saturating_duration_since(epoch));
        let w_est = self.w_est();
        // "When receiving a new ACK in congestion avoidance (where cwnd
        // could be greater than or less than W_max), CUBIC checks whether
        // W_cubic(t) is less than W_est. If so, CUBIC is in the
        // Reno-friendly region and cwnd SHOULD be set to W_est at each
        // reception of a new ACK." (Never lowered: W_est is behind cwnd
        // only if the cubic function took cwnd there.)
        if w_cubic(t, self.k_us, self.w_max, mss) < w_est {
            self.cwnd = self.cwnd.max(w_est);
            return;
        }
        // RFC 9438 4.2: "CUBIC computes the target congestion window size
        // after the next RTT using Figure 1 as follows, where RTT is the
        // smoothed round-trip time. ... target = cwnd if W_cubic(t + RTT)
        // < cwnd; 1.5 * cwnd if W_cubic(t + RTT) > 1.5 * cwnd;
        // W_cubic(t + RTT) otherwise".
        let rtt = ack.srtt.map_or(0, micros);
        let target = w_cubic(t.saturating_add(rtt), self.k_us, self.w_max, mss)
            .clamp(cwnd, cwnd.saturating_add(cwnd / 2));
        // 4.4 (concave) and 4.5 (convex): "cwnd MUST be incremented by
        // (target - cwnd) / cwnd for each received new ACK" -- per
        // acknowledged segment, i.e. (target - cwnd) * acked / cwnd bytes
        // (byte counting; Linux counts acknowledged packets).
        self.grow_acc += (target - cwnd) as u128 * ack.acked as u128;
        let grow = self.grow_acc / cwnd as u128;
        self.grow_acc %= cwnd as u128;
        self.cwnd = self
            .cwnd
            .saturating_add(usize::try_from(grow).unwrap_or(usize::MAX))
            .min(INITIAL_SSTHRESH);
    }

    /// RFC 9438 4.7 "Fast Convergence" and the state every congestion
    /// event saves (4.6 "cwnd_prior = cwnd").
    fn remember_prior(&mut self) {
        // "if cwnd < W_max and fast convergence enabled, further reduce
        // W_max: W_max = cwnd * (1 + beta_cubic) / 2; otherwise, remember
        // cwnd before reduction: W_max = cwnd"
        self.w_max = if self.cwnd < self.w_max {
            self.cwnd.saturating_mul(FAST_CONVERGENCE_NUM) / FAST_CONVERGENCE_DEN
        } else {
            self.cwnd
        };
        self.cwnd_prior = self.cwnd;
    }

    /// RFC 9438 4.6: "ssthresh = flight_size * beta_cubic", at least two
    /// segments ("ssthresh = max(ssthresh, 2)").
    fn reduced_ssthresh(flight: usize, mss: usize) -> usize {
        (flight.saturating_mul(BETA_NUM) / BETA_DEN).max(2 * mss)
    }
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        if self.hspp.is_some() {
            "cubic-hystart++"
        } else {
            "cubic"
        }
    }

    fn cwnd(&self) -> usize {
        self.cwnd
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn on_ack(&mut self, ack: &AckSample) {
        let mss = ack.mss.max(1);
        if let Some(pp) = self.hspp.as_deref_mut() {
            if ack.ends_recovery {
                // RFC 9438's stage starts at the next ACK.
                return;
            }
            if self.cwnd < self.ssthresh {
                let initial = self.ssthresh == INITIAL_SSTHRESH;
                if !ack.cwnd_limited {
                    return;
                }
                let grow = pp.growth(ack.acked, mss);
                let room = self.ssthresh - self.cwnd;
                self.cwnd += grow.min(room);
                if initial
                    && pp.on_ack(ack.una, ack.snd_nxt, ack.rtt)
                        == hystart_pp::Verdict::EnterCongestionAvoidance
                {
                    // RFC 9406 4.2: "If CSS_ROUNDS rounds are complete,
                    // enter congestion avoidance by setting the ssthresh to
                    // the current cwnd."
                    self.ssthresh = self.cwnd;
                }
                return;
            }
            return self.on_ack_avoidance(ack, mss);
        }
        // Linux `cubictcp_acked` (before the window grows for this ACK,
        // cwnd-limited or not): the RTT sample, unless the congestion
        // avoidance epoch started less than a second (HZ jiffies) ago
        // (right after a recovery); in slow start, HyStart may end it:
        // ssthresh = cwnd.
        if let Some(rtt) = ack.rtt {
            let quiet = self.bic.quiet(jiffies(ack.now));
            if !quiet {
                self.hystart.on_rtt(rtt);
                if self.cwnd < self.ssthresh {
                    // The pacing rate Linux computes in slow start (200%
                    // of cwnd per SRTT), for the ACK train's allowance.
                    let rate = ack.srtt.filter(|d| !d.is_zero()).map(|d| {
                        let r = self.cwnd as u128 * 2 * 1_000_000 / d.as_micros().max(1);
                        u64::try_from(r).unwrap_or(u64::MAX)
                    });
                    let round = Round {
                        now: ack.now,
                        una: ack.una,
                        snd_nxt: ack.snd_nxt,
                        rtt,
                        cwnd_segs: self.cwnd / mss,
                        rate,
                    };
                    if self.hystart.on_ack(&round) == Verdict::EnterCongestionAvoidance {
                        self.ssthresh = self.cwnd;
                    }
                }
            }
        }
        // Linux `cubictcp_cong_avoid`: nothing grows while the sender is
        // not cwnd-limited (`tcp_is_cwnd_limited`).
        if !ack.cwnd_limited {
            return;
        }
        let mut acked = ack.acked;
        if self.cwnd < self.ssthresh {
            // `tcp_slow_start`: up to ssthresh; what is left of the ACK
            // counts in congestion avoidance.
            let grow = self.hystart.growth(acked, mss);
            let room = self.ssthresh - self.cwnd;
            self.cwnd += grow.min(room);
            acked = grow.saturating_sub(room);
            if acked == 0 {
                return;
            }
        }
        self.linux_avoid(ack.now, acked, mss);
    }

    fn snapshot(&self) -> CcSnapshot {
        // RFC 9438 4.9.2: "a CUBIC implementation MAY save the current
        // value of the following variables before the congestion window is
        // reduced: prior_cwnd = cwnd, prior_ssthresh = ssthresh,
        // prior_W_max = W_max, prior_K = K, prior_epoch_start =
        // epoch_start, prior_W_est = W_est".
        CcSnapshot {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            cubic: Some(CubicPrior {
                w_max: self.w_max,
                k_us: self.k_us,
                epoch: self.epoch,
                cwnd_epoch: self.cwnd_epoch,
                w_est: self.w_est,
                cwnd_prior: self.cwnd_prior,
                after_timeout: self.after_timeout,
                bic: self.bic,
            }),
        }
    }

    fn on_enter_recovery(&mut self, _now: Instant, flight: usize, mss: usize) {
        let mss = mss.max(1);
        if self.linux() {
            // `tcp_init_cwnd_reduction`: ssthresh from the CA's
            // `cubictcp_recalc_ssthresh` (on snd_cwnd, which is what the
            // connection passes), `snd_cwnd_cnt` = 0; PRR then paces the
            // reduction and cwnd ends at ssthresh.
            let segs = u32::try_from(flight / mss).unwrap_or(u32::MAX);
            self.ssthresh = Self::linux_ssthresh(&mut self.bic, segs, flight, mss);
            self.cwnd = self.ssthresh;
            self.bic.cwnd_cnt = 0;
            return;
        }
        self.remember_prior();
        // RFC 9438 4.6: "ssthresh = flight_size * beta_cubic ...
        // cwnd_prior = cwnd ... cwnd = max(ssthresh, 2) ... ssthresh =
        // max(ssthresh, 2)" ("the sender MUST reduce cwnd and ssthresh
        // immediately upon entering loss recovery"; PRR spreads what it
        // sends over the recovery).
        self.ssthresh = Self::reduced_ssthresh(flight, mss);
        self.cwnd = self.ssthresh;
        self.epoch = None;
        self.app_limited_since = None;
    }

    fn on_undo(&mut self, _now: Instant, prior: &CcSnapshot) {
        // RFC 9438 4.9.2: "CUBIC MAY restore the original values of the
        // above-mentioned variables as follows if the current cwnd is lower
        // than prior_cwnd. ... In rare cases, when the detection happens
        // long after a spurious fast retransmit event and the current cwnd
        // is already higher than prior_cwnd, CUBIC SHOULD continue to use
        // the current and the most recent values of these variables."
        if self.linux() {
            // Linux `tcp_undo_cwnd_reduction`: cwnd = max(cwnd,
            // prior_cwnd) (`tcp_reno_undo_cwnd`, CUBIC's), ssthresh back
            // up if it was higher. Linux leaves CUBIC's own state as the
            // reduction left it (W_max lowered, a new epoch at the next
            // ACK, starting from the plateau); here, as RFC 9438 4.9.2
            // allows, while cwnd is still below prior_cwnd the state before
            // the reduction comes back too (W_max, K, the epoch, the Reno
            // estimate, cnt): spurious episodes are common under
            // reordering (tests/tcp_loss_recovery.rs), and restarting the
            // curve at each cost a third of the goodput there.
            if self.cwnd < prior.cwnd {
                if let Some(p) = prior.cubic {
                    self.bic = p.bic;
                }
            }
            self.cwnd = self.cwnd.max(prior.cwnd);
            self.ssthresh = self.ssthresh.max(prior.ssthresh);
            return;
        }
        if self.cwnd >= prior.cwnd {
            return;
        }
        self.cwnd = prior.cwnd;
        self.ssthresh = prior.ssthresh;
        if let Some(p) = prior.cubic {
            self.w_max = p.w_max;
            self.k_us = p.k_us;
            self.epoch = p.epoch;
            self.cwnd_epoch = p.cwnd_epoch;
            self.w_est = p.w_est;
            self.cwnd_prior = p.cwnd_prior;
            self.after_timeout = p.after_timeout;
        } else {
            self.epoch = None;
        }
        self.grow_acc = 0;
        self.app_limited_since = None;
    }

    fn on_exit_recovery(&mut self, _now: Instant, _flight: usize, _mss: usize) {
        // The end of the reduction (Linux tcp_end_cwnd_reduction): PRR
        // brought the flight to ssthresh; cwnd is ssthresh, and the next
        // ACK starts the congestion avoidance stage.
        self.cwnd = self.ssthresh;
        self.epoch = None;
    }

    fn on_timeout(&mut self, _now: Instant, flight: usize, mss: usize, repeated: bool) {
        if self.linux() {
            // `tcp_enter_loss`: ssthresh from `cubictcp_recalc_ssthresh`
            // (unless the timer fired again for the same loss), cwnd one
            // segment here (the connection's choice), `snd_cwnd_cnt` = 0;
            // then `cubictcp_state(TCP_CA_Loss)` resets CUBIC (W_max,
            // epoch, the Reno estimate, the minimum RTT) and HyStart.
            let mss = mss.max(1);
            if !repeated {
                let segs = u32::try_from(flight / mss).unwrap_or(u32::MAX);
                self.ssthresh = Self::linux_ssthresh(&mut self.bic, segs, flight, mss);
            }
            self.bic = Bictcp::default();
            self.acked_rem = 0;
            self.cwnd = mss;
            self.hystart.reset();
            return;
        }
        // RFC 9438 4.8: "In the case of a timeout, CUBIC follows Reno to
        // reduce cwnd [RFC5681] but sets ssthresh using beta_cubic (same as
        // in Section 4.6)". W_max and K are set when the next congestion
        // avoidance stage starts (`start_epoch`).
        if !repeated {
            self.cwnd_prior = self.cwnd;
            self.ssthresh = Self::reduced_ssthresh(flight, mss);
        }
        self.cwnd = mss.max(1);
        self.epoch = None;
        self.after_timeout = true;
        self.app_limited_since = None;
        // Linux (`cubictcp_state` on TCP_CA_Loss): HyStart starts afresh.
        self.hystart.reset();
    }

    fn on_idle(&mut self, _now: Instant, mss: usize) {
        // RFC 5681 4.1: "cwnd = min(RW, cwnd)" with RW = min(IW, cwnd); the
        // idle time is no part of the next stage's t (RFC 9438 5.8; Linux:
        // `on_tx_start` shifts the epoch, which a restart leaves alone).
        self.cwnd = self.cwnd.min(self.initial_segments * mss.max(1));
        if !self.linux() {
            self.epoch = None;
        }
        self.app_limited_since = None;
    }

    fn on_tx_start(&mut self, now: Instant, last_send: Instant) {
        if self.linux() {
            self.bic.tx_start(jiffies(now), jiffies(last_send));
        }
    }

    fn set_window(&mut self, cwnd: usize, ssthresh: usize) {
        self.cwnd = cwnd.max(1);
        self.ssthresh = ssthresh.max(1);
        self.epoch = None;
        // Linux `tcp_set_congestion_control` starts the new CA afresh
        // (`cubictcp_init`).
        self.bic = Bictcp::default();
        self.acked_rem = 0;
    }

    fn clone_box(&self) -> Box<dyn CongestionControl> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ustack_wire::tcp::SeqNum;

    const MSS: usize = 1000;

    fn ack_at(now: Instant, acked: usize, srtt_ms: u64) -> AckSample {
        AckSample {
            now,
            acked,
            mss: MSS,
            una: SeqNum(0),
            snd_nxt: SeqNum(0),
            rtt: None,
            srtt: Some(Duration::from_millis(srtt_ms)),
            cwnd_limited: true,
            ends_recovery: false,
        }
    }

    /// The RFC 9438 model, as `cubic-hystart++` runs it (the tests of
    /// RFC 9438's values below use it; `Cubic::new`, Linux's growth, has
    /// its own tests further down and in `cubic_linux.rs`).
    fn rfc(initial_segments: u32) -> Cubic {
        Cubic::with_hystart_pp(initial_segments, MSS, true)
    }

    #[test]
    fn integer_cube_root() {
        for x in [
            0u128,
            1,
            7,
            8,
            26,
            27,
            1_000_000,
            u64::MAX as u128,
            u128::MAX,
        ] {
            let r = icbrt(x);
            assert!(r * r * r <= x, "{x}");
            let n = r + 1;
            assert!(
                n.checked_mul(n)
                    .and_then(|s| s.checked_mul(n))
                    .is_none_or(|c| c > x),
                "{x}"
            );
        }
        assert_eq!(icbrt(75_000_000_000_000_000_000), 4_217_163);
    }

    /// RFC 9438 4.2 Figure 2 with W_max = 100 segments, beta_cubic = 0.7
    /// (so cwnd_epoch = 70): K = cbrt(100 * (1 - 0.7) / 0.4) = cbrt(75) =
    /// 4.2171633 s; W_cubic(0) = cwnd_epoch, W_cubic(K) = W_max,
    /// W_cubic(2K) = W_max + (W_max - cwnd_epoch); W_cubic(1 s) =
    /// 0.4 * (1 - 4.2171633)^3 + 100 = 86.6811... segments.
    #[test]
    fn k_and_w_cubic_match_rfc_9438_figures() {
        let (w_max, epoch) = (100 * MSS, 70 * MSS);
        let k = k_micros(w_max, epoch, MSS);
        assert_eq!(k, 4_217_163, "K = cbrt(75) s");
        assert!(w_cubic(0, k, w_max, MSS).abs_diff(epoch) <= 1);
        assert_eq!(w_cubic(k, k, w_max, MSS), w_max);
        assert!(w_cubic(2 * k, k, w_max, MSS).abs_diff(130 * MSS) <= 1);
        // 0.4 * (-3.2171633)^3 = -13.3188...: 86.6811 segments.
        assert_eq!(w_cubic(1_000_000, k, w_max, MSS), 86_681);
        // The curve is concave before K and convex after, and monotonic.
        let mut last = 0;
        for t in (0..10_000_000).step_by(100_000) {
            let w = w_cubic(t, k, w_max, MSS);
            assert!(w >= last, "t {t}");
            last = w;
        }
        // K scales with the cube root of the reduction: W_max = 1000
        // segments, cwnd_epoch = 700: K = cbrt(750) = 9.0856 s.
        assert_eq!(k_micros(1000 * MSS, 700 * MSS, MSS), 9_085_602);
        assert_eq!(k_micros(70 * MSS, 100 * MSS, MSS), 0);
    }

    /// One loss at cwnd = W_max = 100 segments: ssthresh = cwnd = 70
    /// segments (beta_cubic), W_max = 100, and the congestion avoidance
    /// stage starts with K = 4.217 s.
    #[test]
    fn loss_reduces_by_beta_and_sets_k() {
        let t0 = Instant::from_secs(10);
        let mut c = rfc(10);
        c.set_window(100 * MSS, INITIAL_SSTHRESH);
        c.on_enter_recovery(t0, 100 * MSS, MSS);
        assert_eq!((c.cwnd(), c.ssthresh()), (70 * MSS, 70 * MSS));
        assert_eq!(c.w_max(), 100 * MSS);
        c.on_exit_recovery(t0, 70 * MSS, MSS);
        c.on_ack(&ack_at(t0, MSS, 100));
        assert_eq!(c.k(), Duration::from_micros(4_217_163));
        // The floor: two segments.
        let mut small = rfc(2);
        small.on_enter_recovery(t0, MSS, MSS);
        assert_eq!((small.cwnd(), small.ssthresh()), (2 * MSS, 2 * MSS));
    }

    /// RFC 9438 4.7: a loss while cwnd < W_max (the available bandwidth
    /// shrank) releases bandwidth: W_max = cwnd * (1 + 0.7) / 2. With
    /// W_max = 100 and cwnd = 80 segments: W_max = 68, and K = cbrt((68 -
    /// 56) / 0.4) = cbrt(30) = 3.1072 s.
    #[test]
    fn fast_convergence() {
        let t0 = Instant::from_secs(1);
        let mut c = rfc(10);
        c.set_window(100 * MSS, INITIAL_SSTHRESH);
        c.on_enter_recovery(t0, 100 * MSS, MSS);
        assert_eq!(c.w_max(), 100 * MSS);
        c.set_window(80 * MSS, c.ssthresh());
        c.on_enter_recovery(t0, 80 * MSS, MSS);
        assert_eq!(c.w_max(), 68 * MSS);
        assert_eq!(c.cwnd(), 56 * MSS);
        c.on_exit_recovery(t0, 56 * MSS, MSS);
        c.on_ack(&ack_at(t0, MSS, 100));
        assert_eq!(c.k(), Duration::from_micros(3_107_232));
        // A loss at cwnd >= W_max: W_max = cwnd (no fast convergence).
        c.set_window(90 * MSS, c.ssthresh());
        c.on_enter_recovery(t0, 90 * MSS, MSS);
        assert_eq!(c.w_max(), 90 * MSS);
    }

    /// RFC 9438 4.3: W_est starts at cwnd_epoch and grows by alpha_cubic =
    /// 9/17 = 0.5294 segment per cwnd of acknowledged data until it
    /// reaches cwnd_prior, then by 1 (Reno's rate). On a short RTT path
    /// W_cubic stays below W_est: cwnd = W_est (the Reno-friendly region).
    #[test]
    fn reno_friendly_region() {
        let t0 = Instant::from_secs(100);
        let mut c = rfc(10);
        c.set_window(10 * MSS, INITIAL_SSTHRESH);
        c.on_enter_recovery(t0, 10 * MSS, MSS);
        c.on_exit_recovery(t0, 7 * MSS, MSS);
        assert_eq!(c.cwnd(), 7 * MSS);
        // W_max = 10 segments: K = cbrt(3 / 0.4) = 1.957 s. With a 1 ms
        // RTT, a round of ACKs (cwnd of them, one segment each) takes 1 ms
        // and W_cubic barely moves: W_est rules.
        let mut now = t0;
        let mut rounds = Vec::new();
        for _ in 0..12 {
            // A round: one cwnd of data acknowledged, a segment per ACK.
            let mut left = c.cwnd();
            while left > 0 {
                let a = left.min(MSS);
                c.on_ack(&ack_at(now, a, 1));
                left -= a;
            }
            now += Duration::from_millis(1);
            rounds.push((c.cwnd(), c.w_est()));
        }
        // First round: W_est = 7 + 9/17 * (7 acks * 1 seg / ~7 segs).
        let (cwnd1, west1) = rounds[0];
        assert_eq!(cwnd1, west1, "cwnd = W_est");
        let alpha_round = (cwnd1 - 7 * MSS) as f64 / MSS as f64;
        assert!((alpha_round - 9.0 / 17.0).abs() < 0.04, "{alpha_round}");
        // Below cwnd_prior (10 segments) it takes 3 / 0.53 ~= 6 rounds to
        // regain the 3 segments; beyond, one segment per round.
        let at_prior = rounds.iter().position(|&(c, _)| c >= 10 * MSS).unwrap();
        assert!((5..=6).contains(&at_prior), "{rounds:?}");
        let (a, b) = (rounds[at_prior + 2].0, rounds[at_prior + 3].0);
        let per_round = (b - a) as f64 / MSS as f64;
        assert!(
            (per_round - 1.0).abs() < 0.05,
            "alpha 1 past cwnd_prior: {per_round}"
        );
    }

    /// Concave and convex regions: on a long RTT the cubic function is
    /// ahead of W_est and cwnd follows the target W_cubic(t + RTT): after
    /// K seconds of ACKs it is back at W_max, after 2K at twice the
    /// reduction above it.
    #[test]
    fn cubic_growth_follows_the_curve() {
        let t0 = Instant::from_secs(1000);
        let mut c = rfc(10);
        c.set_window(100 * MSS, INITIAL_SSTHRESH);
        c.on_enter_recovery(t0, 100 * MSS, MSS);
        c.on_exit_recovery(t0, 70 * MSS, MSS);
        let rtt = 100u64;
        let mut now = t0;
        let k = Duration::from_micros(4_217_163);
        let mut at_k = None;
        while now < t0 + k * 2 {
            let segs = c.cwnd() / MSS;
            for _ in 0..segs {
                c.on_ack(&ack_at(now, MSS, rtt));
            }
            now += Duration::from_millis(rtt);
            if at_k.is_none() && now >= t0 + k {
                at_k = Some(c.cwnd());
            }
        }
        // Per round, cwnd reaches the target W_cubic(t + RTT) of its start.
        let at_k = at_k.unwrap() as f64 / MSS as f64;
        assert!((at_k - 100.0).abs() < 1.0, "at K: {at_k}");
        let end = c.cwnd() as f64 / MSS as f64;
        assert!((end - 130.0).abs() < 2.0, "at 2K: {end}");
        assert!(c.w_est() < c.cwnd(), "not the Reno-friendly region");
    }

    /// The target is capped at 1.5 cwnd per RTT: far in the convex region
    /// cwnd grows at most 50% a round.
    #[test]
    fn target_is_capped_at_one_and_a_half_cwnd() {
        let t0 = Instant::from_secs(5);
        let mut c = rfc(10);
        c.set_window(10 * MSS, 10 * MSS);
        c.on_ack(&ack_at(t0, MSS, 100));
        // 60 s later W_cubic is enormous; one round of ACKs.
        let later = t0 + Duration::from_secs(60);
        let before = c.cwnd();
        for _ in 0..before / MSS {
            c.on_ack(&ack_at(later, MSS, 100));
        }
        assert!(
            c.cwnd() <= before + before / 2 + MSS,
            "{} from {before}",
            c.cwnd()
        );
        assert!(
            c.cwnd() >= before + before / 3,
            "{} from {before}",
            c.cwnd()
        );
    }

    /// RFC 9438 4.8: after a timeout cwnd = 1 segment, ssthresh =
    /// 0.7 * FlightSize; the next congestion avoidance stage has K = 0
    /// and W_max = cwnd_epoch. A repeated timeout holds ssthresh.
    #[test]
    fn timeout() {
        let t0 = Instant::from_secs(3);
        let mut c = rfc(10);
        c.set_window(50 * MSS, INITIAL_SSTHRESH);
        c.on_timeout(t0, 40 * MSS, MSS, false);
        assert_eq!((c.cwnd(), c.ssthresh()), (MSS, 28 * MSS));
        c.on_timeout(t0, 40 * MSS, MSS, true);
        assert_eq!((c.cwnd(), c.ssthresh()), (MSS, 28 * MSS));
        // Slow start to ssthresh, then the stage starts: K = 0.
        let mut now = t0;
        while c.cwnd() < c.ssthresh() {
            now += Duration::from_millis(10);
            c.on_ack(&ack_at(now, MSS, 10));
        }
        assert_eq!(c.cwnd(), 28 * MSS);
        c.on_ack(&ack_at(now, MSS, 10));
        assert_eq!(c.k(), Duration::ZERO);
        assert_eq!(c.w_max(), 28 * MSS);
    }

    /// RFC 9438 4.9.2: a spurious reduction is undone, CUBIC's variables
    /// included, when cwnd is still below prior_cwnd; not when it is
    /// already above.
    #[test]
    fn undo_restores_the_prior_state() {
        let t0 = Instant::from_secs(7);
        let mut c = rfc(10);
        c.set_window(60 * MSS, 50 * MSS);
        c.on_ack(&ack_at(t0, MSS, 50));
        let prior = c.snapshot();
        c.on_enter_recovery(t0 + Duration::from_secs(1), 60 * MSS, MSS);
        assert_eq!(c.cwnd(), 42 * MSS);
        c.on_undo(t0 + Duration::from_secs(1), &prior);
        assert_eq!(c.snapshot(), prior);
        // Too late: cwnd already grew past prior_cwnd.
        let prior = c.snapshot();
        c.on_timeout(t0 + Duration::from_secs(2), 60 * MSS, MSS, false);
        c.set_window(70 * MSS, c.ssthresh());
        c.on_undo(t0 + Duration::from_secs(2), &prior);
        assert_eq!(c.cwnd(), 70 * MSS);
        assert_ne!(c.ssthresh(), prior.ssthresh);
    }

    /// RFC 9438 5.8: ACKs while application-limited neither grow cwnd nor
    /// count as time on the curve.
    #[test]
    fn application_limited_time_is_not_on_the_curve() {
        let t0 = Instant::from_secs(1);
        let run = |pause: bool| {
            let mut c = rfc(10);
            c.set_window(100 * MSS, INITIAL_SSTHRESH);
            c.on_enter_recovery(t0, 100 * MSS, MSS);
            c.on_exit_recovery(t0, 70 * MSS, MSS);
            let mut now = t0;
            c.on_ack(&ack_at(now, MSS, 100));
            if pause {
                for _ in 0..100 {
                    now += Duration::from_millis(100);
                    let mut a = ack_at(now, MSS, 100);
                    a.cwnd_limited = false;
                    c.on_ack(&a);
                }
            }
            let before = c.cwnd();
            for _ in 0..20 {
                now += Duration::from_millis(100);
                for _ in 0..c.cwnd() / MSS {
                    c.on_ack(&ack_at(now, MSS, 100));
                }
            }
            (before, c.cwnd())
        };
        let (b0, a0) = run(false);
        let (b1, a1) = run(true);
        assert_eq!(b0, b1, "no growth while application-limited");
        assert!(a0.abs_diff(a1) <= 2 * MSS, "same curve: {a0} vs {a1}");
    }

    /// Linux's growth (`cubic`): cubic-rto-ss-ca-cwnd-bump.pkt's ACKs
    /// after its timeout, through the controller: ssthresh 10 * 717/1024
    /// = 7; slow start from one segment to 7; then congestion avoidance
    /// with W_max reset (cnt 20) until the Reno estimate, a segment per
    /// 7 * 15/8 = 13 acked, reaches 8 at the 16th ACK (the 14th came
    /// within HZ/32 of the last recomputation): cwnd 8 there, not before.
    #[test]
    fn linux_growth_after_timeout() {
        let mut c = Cubic::new(10, MSS, true);
        assert_eq!(c.name(), "cubic");
        let t0 = Instant::from_secs(1);
        c.on_timeout(t0, 10 * MSS, MSS, false);
        // 10000 * 717 / 1024 = 7001.9 bytes: 7 segments (tcpi_snd_ssthresh).
        assert_eq!((c.cwnd(), c.ssthresh()), (MSS, 7001));
        let mut now = t0;
        let ack = |now: Instant| AckSample {
            rtt: Some(Duration::from_millis(100)),
            ..ack_at(now, MSS, 100)
        };
        // The script's rhythm: an ACK 100 ms after the last, then 2 ms
        // apart; slow start to 7.
        let gaps = [100, 100, 2, 98, 2, 2];
        for g in gaps {
            now += Duration::from_millis(g);
            c.on_ack(&ack(now));
        }
        assert_eq!(c.cwnd() / MSS, 7);
        // Congestion avoidance: ACKs of 8001 .. 23001 (16 of them).
        let gaps = [2, 98, 2, 2, 2, 2, 2, 2, 98, 2, 2, 2, 2, 2, 2, 98];
        for (i, g) in gaps.into_iter().enumerate() {
            now += Duration::from_millis(g);
            c.on_ack(&ack(now));
            let want = if i < 15 { 7 } else { 8 };
            assert_eq!(c.cwnd() / MSS, want, "ACK {}", i + 1);
        }
        let b = c.bic();
        assert_eq!((b.tcp_cwnd, b.cnt, b.last_max_cwnd), (8, 7, 0));
    }

    /// Linux's reduction (`cubic`): beta = 717/1024 on the window (kept
    /// to the byte: 100000 * 717 / 1024 = 70019.5), W_max in segments with
    /// fast convergence W_max = cwnd * 1741/2048; the
    /// epoch after it has K = cubic_root(2^40/410 * (W_max - cwnd)) in
    /// 2^-10 s (4316 for W_max 100, cwnd 70: 4.215 s, the RFC's 4.217).
    #[test]
    fn linux_reduction_and_k() {
        let t0 = Instant::from_secs(10);
        let mut c = Cubic::new(10, MSS, true);
        c.set_window(100 * MSS, INITIAL_SSTHRESH);
        c.on_enter_recovery(t0, 100 * MSS, MSS);
        assert_eq!((c.cwnd(), c.ssthresh()), (70_019, 70_019));
        c.on_exit_recovery(t0, 70 * MSS, MSS);
        c.on_ack(&ack_at(t0, MSS, 100));
        assert_eq!((c.bic().k, c.bic().origin), (4316, 100));
        // Fast convergence: a loss at 80 < W_max 100: W_max 68, cwnd
        // 80000 * 717 / 1024 = 56015.6.
        c.set_window(80 * MSS, c.ssthresh());
        c.bic.last_max_cwnd = 100;
        c.on_enter_recovery(t0, 80 * MSS, MSS);
        assert_eq!((c.cwnd(), c.bic().last_max_cwnd), (56_015, 68));
        // The floor: two segments.
        let mut small = Cubic::new(2, MSS, true);
        small.on_enter_recovery(t0, MSS, MSS);
        assert_eq!((small.cwnd(), small.ssthresh()), (2 * MSS, 2 * MSS));
    }

    /// The ACK that ends fast recovery starts Linux's epoch (`cubic`:
    /// `tcp_cong_control` runs in the Open state); RFC 9438's stage starts
    /// at the next ACK.
    #[test]
    fn ack_ending_recovery_starts_linuxs_epoch() {
        let t0 = Instant::from_secs(3);
        let ending = AckSample {
            ends_recovery: true,
            ..ack_at(t0, MSS, 100)
        };
        let mut c = Cubic::new(10, MSS, true);
        c.set_window(20 * MSS, INITIAL_SSTHRESH);
        c.on_enter_recovery(t0, 20 * MSS, MSS);
        c.on_exit_recovery(t0, 0, MSS);
        c.on_ack(&ending);
        let b = c.bic();
        assert_eq!((b.epoch_start.is_some(), b.cwnd_cnt, b.cnt), (true, 1, 14));
        let mut r = rfc(10);
        r.set_window(20 * MSS, INITIAL_SSTHRESH);
        r.on_enter_recovery(t0, 20 * MSS, MSS);
        r.on_exit_recovery(t0, 0, MSS);
        r.on_ack(&ending);
        assert_eq!(r.epoch, None);
    }

    /// Undo (`cubic`): cwnd = max(cwnd, prior), ssthresh back up (Linux),
    /// and, while cwnd is below prior_cwnd, CUBIC's state (RFC 9438
    /// 4.9.2).
    #[test]
    fn linux_undo() {
        let t0 = Instant::from_secs(7);
        let mut c = Cubic::new(10, MSS, true);
        c.set_window(60 * MSS, 50 * MSS);
        let prior = c.snapshot();
        c.on_enter_recovery(t0, 60 * MSS, MSS);
        // 60000 * 717 / 1024 = 42011.7.
        assert_eq!((c.cwnd(), c.ssthresh()), (42_011, 42_011));
        assert_eq!(c.bic().last_max_cwnd, 60);
        c.on_undo(t0, &prior);
        assert_eq!((c.cwnd(), c.ssthresh()), (60 * MSS, 50 * MSS));
        // Below prior_cwnd: CUBIC's state before the reduction is back.
        assert_eq!(c.bic().last_max_cwnd, 0);
        // Already above: cwnd stays, ssthresh still comes back.
        c.on_enter_recovery(t0, 60 * MSS, MSS);
        c.set_window(70 * MSS, 42 * MSS);
        c.on_undo(t0, &prior);
        assert_eq!((c.cwnd(), c.ssthresh()), (70 * MSS, 50 * MSS));
    }

    /// Linux (`cubic`): idle time before sending with nothing in flight
    /// moves the epoch (`CA_EVENT_TX_START`): after 10 s of silence the
    /// window grows as if they had not passed.
    #[test]
    fn linux_idle_time_is_not_on_the_curve() {
        let t0 = Instant::from_secs(1);
        let run = |idle: bool| {
            let mut c = Cubic::new(10, MSS, true);
            c.set_window(100 * MSS, INITIAL_SSTHRESH);
            c.on_enter_recovery(t0, 100 * MSS, MSS);
            c.on_exit_recovery(t0, 70 * MSS, MSS);
            let mut now = t0;
            c.on_ack(&ack_at(now, MSS, 100));
            if idle {
                let last = now;
                now += Duration::from_secs(10);
                c.on_tx_start(now, last);
            }
            for _ in 0..20 {
                now += Duration::from_millis(100);
                for _ in 0..c.cwnd() / MSS {
                    c.on_ack(&ack_at(now, MSS, 100));
                }
            }
            c.cwnd()
        };
        let (busy, idle) = (run(false), run(true));
        assert!(busy.abs_diff(idle) <= MSS, "{busy} vs {idle}");
        // Without the shift the curve would be 10 s on, far above W_max.
        assert!(idle < 100 * MSS, "{idle}");
    }

    /// Slow start over a path whose RTT is 40 ms, rising by 10 ms a round
    /// from round 5 (a queue building), each round's segments acked one by
    /// one: the round slow start ended in and cwnd then (None: it never
    /// did in 20 rounds).
    fn rising_rtt_rounds(c: &mut Cubic) -> Option<(u32, usize)> {
        let mut now = Instant::ZERO;
        let mut una = 0u32;
        let mut exit_cwnd = None;
        for round in 0..20u32 {
            let segs = c.cwnd() / MSS;
            let end = una + segs as u32 * MSS as u32;
            // RTT 40 ms, rising by 10 ms a round from round 5 (a queue).
            let rtt = Duration::from_millis(40 + 10 * u64::from(round.saturating_sub(5)));
            now += rtt;
            for i in 1..=segs as u32 {
                let a = AckSample {
                    una: SeqNum(una + i * MSS as u32),
                    snd_nxt: SeqNum(end + 2 * i * MSS as u32),
                    rtt: Some(rtt),
                    ..ack_at(now, MSS, 40)
                };
                c.on_ack(&a);
                if c.ssthresh() != INITIAL_SSTHRESH {
                    exit_cwnd = Some((round, c.cwnd()));
                    break;
                }
            }
            una = end;
            if exit_cwnd.is_some() {
                break;
            }
        }
        exit_cwnd
    }

    /// HyStart ends the initial slow start on an RTT increase: ssthresh
    /// becomes cwnd in the round the RTT rose (after eight samples of it),
    /// well before a loss would.
    #[test]
    fn hystart_ends_slow_start() {
        let mut c = Cubic::new(10, MSS, true);
        let exit_cwnd = rising_rtt_rounds(&mut c);
        let (round, cwnd) = exit_cwnd.expect("HyStart ended slow start");
        // Round 6: 50 ms > 40 ms + 5 ms. ssthresh is cwnd before this
        // ACK, which then counts towards congestion avoidance.
        assert_eq!(round, 6);
        assert!(c.ssthresh() <= cwnd && cwnd - c.ssthresh() < MSS);
    }

    /// With HyStart++ (RFC 9406), slow start ends on an RTT increase after
    /// Conservative Slow Start: ssthresh becomes cwnd well before a loss.
    #[test]
    fn hystart_pp_ends_slow_start_after_css() {
        let mut c = Cubic::with_hystart_pp(10, MSS, true);
        let exit_cwnd = rising_rtt_rounds(&mut c);
        let (round, cwnd) = exit_cwnd.expect("HyStart++ ended slow start");
        // CSS entered in round 6, five CSS rounds growing by 1/4.
        assert!((9..=12).contains(&round), "round {round}");
        assert_eq!(c.ssthresh(), cwnd);
        assert!(!c.in_css());
    }
}
