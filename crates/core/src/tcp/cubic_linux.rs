//! CUBIC's window growth as Linux computes it (`net/ipv4/tcp_cubic.c`:
//! `bictcp_update`, `cubictcp_recalc_ssthresh`, `cubictcp_cwnd_event`,
//! with `tcp_cong_avoid_ai` from `tcp_cong.c`), modelled in our own code:
//! windows in segments, time in jiffies, the cubic function in units of
//! 1/1024 s (`BICTCP_HZ`), all integer, with Linux's roundings.
//!
//! How it differs from RFC 9438's real-valued model (`cubic.rs` keeps that
//! one for the `cubic-hystart++` variant):
//!
//! - cwnd does not follow the target directly: the target sets `cnt`, the
//!   number of segments to acknowledge per one-segment increase, and
//!   `tcp_cong_avoid_ai` counts acknowledged segments (`snd_cwnd_cnt`) up
//!   to it; `cnt` is at least 2 (cwnd grows at most 1.5 times per RTT).
//! - The target is W_cubic one minimum RTT (`delay_min`, rounded up to a
//!   jiffy) ahead, not one smoothed RTT.
//! - TCP friendliness: the Reno estimate (`tcp_cwnd`) grows by one segment
//!   per `cwnd * 15 / 8` segments acknowledged (alpha = 8/15 = 0.533, the
//!   integer form of 3 (1 - beta) / (1 + beta)); when it is ahead of cwnd
//!   it only caps `cnt` at cwnd / (tcp_cwnd - cwnd): cwnd reaches the
//!   estimate through `snd_cwnd_cnt`, later than RFC 9438's cwnd = W_est.
//! - `cnt` is recomputed at most once a jiffy, and when cwnd has not
//!   changed at most every HZ/32 jiffies (the segments acknowledged in
//!   between still count for the Reno estimate).
//! - No loss seen since the last reset (`last_max_cwnd` 0: the start, or
//!   after a retransmission timeout): at least 5% growth per RTT (`cnt` at
//!   most 20).
//! - beta = 717/1024; fast convergence W_max = cwnd * (1024 + 717) / 2048.
//! - The epoch starts at the first ACK in congestion avoidance; sending
//!   after the pipe went empty shifts it by the time since the last send
//!   (`CA_EVENT_TX_START`), so idle time is not on the curve.

use crate::time::Instant;

/// The kernel's tick rate (`CONFIG_HZ`): 250 on the Linux the packetdrill
/// baseline runs against (Linux 6.18 here), the time unit of `epoch_start`,
/// `last_time` and the cubic function's clock (`tcp_jiffies32`).
pub(crate) const HZ: u32 = 250;
const US_PER_JIFFY: u32 = 1_000_000 / HZ;
/// `BICTCP_HZ`: the cubic function's time unit is 2^-10 s.
const BICTCP_HZ: u32 = 10;
/// `beta` = 717/1024 (`BICTCP_BETA_SCALE`).
const BETA: u64 = 717;
const BETA_SCALE: u64 = 1024;
/// `bic_scale`: C = 41/1024 * 10 = 0.4.
const BIC_SCALE: u64 = 41;
/// `beta_scale` = 8 * (1024 + 717) / 3 / (1024 - 717) = 15 (integer
/// division): the Reno estimate grows a segment per cwnd * 15 / 8 acked.
const FRIENDLY_SCALE: u64 = 8 * (BETA_SCALE + BETA) / 3 / (BETA_SCALE - BETA);
/// `cube_rtt_scale` = bic_scale * 10 = 410 (C * 1024).
const CUBE_RTT_SCALE: u128 = (BIC_SCALE * 10) as u128;
/// `cube_factor` = 2^40 / 410: K^3 in (2^-10 s)^3 per segment of W_max -
/// cwnd.
const CUBE_FACTOR: u64 = (1 << (10 + 3 * BICTCP_HZ)) / (BIC_SCALE * 10);

/// `tcp_jiffies32` at `now` (wrapping, as the kernel's).
pub(crate) fn jiffies(now: Instant) -> u32 {
    (now.total_micros() / u64::from(US_PER_JIFFY)) as u32
}

/// `usecs_to_jiffies` (rounds up).
fn usecs_to_jiffies(us: u32) -> u32 {
    us.div_ceil(US_PER_JIFFY)
}

/// Linux's `cubic_root`: a 64-entry estimate of the cube root's leading
/// bits, then one Newton-Raphson step (average error about 0.2%). Kept
/// bit for bit so that K, and so the window, is the kernel's.
pub(crate) fn cubic_root(a: u64) -> u32 {
    // For x in 0..64, about cbrt(x << 18) - 1 (tcp_cubic.c's table).
    const V: [u8; 64] = [
        0, 54, 54, 54, 118, 118, 118, 118, 123, 129, 134, 138, 143, 147, 151, 156, 157, 161, 164,
        168, 170, 173, 176, 179, 181, 185, 187, 190, 192, 194, 197, 199, 200, 202, 204, 206, 209,
        211, 213, 215, 217, 219, 221, 222, 224, 225, 227, 229, 231, 232, 234, 236, 237, 239, 240,
        242, 244, 245, 246, 248, 250, 251, 252, 254,
    ];
    let v = |i: u64| u32::from(V.get(i as usize).copied().unwrap_or(254));
    // fls64: the 1-based index of the highest set bit, 0 for 0.
    let b = 64 - a.leading_zeros();
    if b < 7 {
        return (v(a) + 35) >> 6;
    }
    let b = ((b * 84) >> 8) - 1;
    let shift = a >> (b * 3);
    let x = ((v(shift) + 10) << b) >> 6;
    let x = u64::from(x.max(2));
    let x = 2 * x + a / (x * (x - 1));
    ((x * 341) >> 10) as u32
}

/// Linux's `struct bictcp` (the fields the window growth uses) and the
/// connection's `snd_cwnd_cnt`. Windows in segments, times in jiffies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Bictcp {
    /// `cnt`: segments to acknowledge per one-segment cwnd increase.
    pub(crate) cnt: u32,
    /// `last_max_cwnd`: W_max (0: no loss since the last reset).
    pub(crate) last_max_cwnd: u32,
    /// `last_cwnd`, `last_time`: cwnd and time of the last recomputation.
    last_cwnd: u32,
    last_time: u32,
    /// `bic_origin_point`: the curve's plateau.
    pub(crate) origin: u32,
    /// `bic_K`, in 2^-10 s.
    pub(crate) k: u32,
    /// `epoch_start` (None: Linux's 0, the next ACK starts an epoch).
    pub(crate) epoch_start: Option<u32>,
    /// `ack_cnt`: segments acknowledged towards the Reno estimate.
    ack_cnt: u32,
    /// `tcp_cwnd`: the Reno estimate.
    pub(crate) tcp_cwnd: u32,
    /// The connection's `snd_cwnd_cnt` (`tcp_cong_avoid_ai`'s count).
    pub(crate) cwnd_cnt: u32,
}

impl Bictcp {
    /// `cubictcp_recalc_ssthresh`: a congestion event at `cwnd` segments
    /// ends the epoch and sets W_max (fast convergence: a loss below the
    /// last W_max lowers it to cwnd * (1 + beta) / 2); the new ssthresh,
    /// cwnd * beta, at least 2.
    pub(crate) fn recalc_ssthresh(&mut self, cwnd: u32) -> u32 {
        self.epoch_start = None;
        let c = u64::from(cwnd);
        let w_max = if cwnd < self.last_max_cwnd {
            c * (BETA_SCALE + BETA) / (2 * BETA_SCALE)
        } else {
            c
        };
        self.last_max_cwnd = u32::try_from(w_max).unwrap_or(u32::MAX);
        u32::try_from(c * BETA / BETA_SCALE)
            .unwrap_or(u32::MAX)
            .max(2)
    }

    /// Within a second of the epoch's start (`cubictcp_acked` then
    /// ignores RTT samples).
    pub(crate) fn quiet(&self, now: u32) -> bool {
        self.epoch_start
            .is_some_and(|e| (now.wrapping_sub(e) as i32) < HZ as i32)
    }

    /// `cubictcp_cwnd_event(CA_EVENT_TX_START)`: data goes out with
    /// nothing in flight; `last_send` is when data last went out. The
    /// epoch moves forward by the idle time, never past now.
    pub(crate) fn tx_start(&mut self, now: u32, last_send: u32) {
        let delta = now.wrapping_sub(last_send) as i32;
        if let Some(e) = self.epoch_start {
            if delta > 0 {
                let e = e.wrapping_add(delta as u32);
                // `after(epoch_start, now)`
                let e = if (e.wrapping_sub(now) as i32) > 0 {
                    now
                } else {
                    e
                };
                self.epoch_start = Some(e);
            }
        }
    }

    /// `bictcp_update`: `acked` segments were acknowledged at `cwnd`
    /// segments (congestion avoidance); recompute `cnt`. `delay_min_us`:
    /// the least RTT since the last reset (0: none).
    pub(crate) fn update(&mut self, cwnd: u32, acked: u32, now: u32, delay_min_us: u32) {
        self.ack_cnt = self.ack_cnt.wrapping_add(acked);
        if self.last_cwnd == cwnd && (now.wrapping_sub(self.last_time) as i32) <= (HZ / 32) as i32 {
            return;
        }
        // `cnt` changes at most once a jiffy (an epoch's start excepted).
        if !(self.epoch_start.is_some() && now == self.last_time) {
            self.last_cwnd = cwnd;
            self.last_time = now;
            self.cubic_cnt(cwnd, acked, now, delay_min_us);
        }
        self.friendliness(cwnd);
        // At most one segment per two acknowledged: 1.5x per RTT.
        self.cnt = self.cnt.max(2);
    }

    /// The cubic function's `cnt` (and the epoch's start).
    fn cubic_cnt(&mut self, cwnd: u32, acked: u32, now: u32, delay_min_us: u32) {
        let epoch = match self.epoch_start {
            Some(e) => e,
            None => {
                self.epoch_start = Some(now);
                self.ack_cnt = acked;
                self.tcp_cwnd = cwnd;
                if self.last_max_cwnd <= cwnd {
                    self.k = 0;
                    self.origin = cwnd;
                } else {
                    let a = CUBE_FACTOR.saturating_mul(u64::from(self.last_max_cwnd - cwnd));
                    self.k = cubic_root(a);
                    self.origin = self.last_max_cwnd;
                }
                now
            }
        };
        // t: time since the epoch's start plus the minimum RTT, in 2^-10 s.
        let elapsed = u64::from((now.wrapping_sub(epoch) as i32).max(0) as u32);
        let t =
            ((elapsed + u64::from(usecs_to_jiffies(delay_min_us))) << BICTCP_HZ) / u64::from(HZ);
        let k = u64::from(self.k);
        let offs = u128::from(t.abs_diff(k));
        // C * (t - K)^3 in segments (Linux's 64-bit product wraps beyond
        // about 340 s from K; this saturates instead).
        let delta = (CUBE_RTT_SCALE * offs * offs * offs) >> (10 + 3 * BICTCP_HZ);
        let delta = u32::try_from(delta).unwrap_or(u32::MAX);
        let target = if t < k {
            self.origin.saturating_sub(delta)
        } else {
            self.origin.saturating_add(delta)
        };
        self.cnt = if target > cwnd {
            cwnd / (target - cwnd)
        } else {
            // A very small increase.
            cwnd.saturating_mul(100)
        };
        // Before any loss the bandwidth is unknown: at least 5% per RTT.
        if self.last_max_cwnd == 0 && self.cnt > 20 {
            self.cnt = 20;
        }
    }

    /// TCP friendliness: the Reno estimate grows a segment per cwnd * 15/8
    /// acknowledged; ahead of cwnd, it caps `cnt`.
    fn friendliness(&mut self, cwnd: u32) {
        let delta = u32::try_from((u64::from(cwnd) * FRIENDLY_SCALE) >> 3)
            .unwrap_or(u32::MAX)
            .max(1);
        // Linux: `while (ack_cnt > delta) { ack_cnt -= delta; tcp_cwnd++; }`
        if self.ack_cnt > delta {
            let n = (self.ack_cnt - 1) / delta;
            self.ack_cnt -= n * delta;
            self.tcp_cwnd = self.tcp_cwnd.saturating_add(n);
        }
        if self.tcp_cwnd > cwnd {
            let max_cnt = cwnd / (self.tcp_cwnd - cwnd);
            self.cnt = self.cnt.min(max_cnt);
        }
    }

    /// `tcp_cong_avoid_ai(tp, cnt, acked)`: cwnd (segments) after `acked`
    /// more segments were acknowledged.
    pub(crate) fn avoid_ai(&mut self, cwnd: u32, acked: u32) -> u32 {
        let w = self.cnt.max(1);
        let mut cwnd = cwnd;
        // Credits accumulated at a higher `cnt` are applied gently.
        if self.cwnd_cnt >= w {
            self.cwnd_cnt = 0;
            cwnd = cwnd.saturating_add(1);
        }
        self.cwnd_cnt = self.cwnd_cnt.saturating_add(acked);
        if self.cwnd_cnt >= w {
            let n = self.cwnd_cnt / w;
            self.cwnd_cnt -= n * w;
            cwnd = cwnd.saturating_add(n);
        }
        cwnd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants as tcp_cubic.c's `cubictcp_register` computes them.
    #[test]
    fn constants() {
        assert_eq!(FRIENDLY_SCALE, 15);
        assert_eq!(CUBE_RTT_SCALE, 410);
        // 2^40 / 410 = 2681735677.5...
        assert_eq!(CUBE_FACTOR, 2_681_735_677);
    }

    /// `cubic_root` against exact cube roots: Linux's table-and-one-step
    /// result, worked by hand for a few inputs, and within 1% elsewhere.
    #[test]
    fn cubic_root_is_linuxs() {
        // a < 64: (v[a] + 35) >> 6: a = 0 -> 0, 1 -> (54+35)>>6 = 1,
        // 8 -> (123+35)>>6 = 2, 27 -> (187+35)>>6 = 3, 63 -> (254+35)>>6 = 4.
        assert_eq!(cubic_root(0), 0);
        assert_eq!(cubic_root(1), 1);
        assert_eq!(cubic_root(8), 2);
        assert_eq!(cubic_root(27), 3);
        assert_eq!(cubic_root(63), 4);
        // a = 1000: fls 10, b = (10*84 >> 8) - 1 = 2, shift = 1000 >> 6 =
        // 15, x = ((156 + 10) << 2) >> 6 = 10; x = 2*10 + 1000/(10*9) = 31,
        // (31 * 341) >> 10 = 10.
        assert_eq!(cubic_root(1000), 10);
        // a = 100: fls 7, b = (7*84 >> 8) - 1 = 1, shift = 100 >> 3 = 12,
        // x = ((143 + 10) << 1) >> 6 = 4; x = 8 + 100/(4*3) = 16, (16 *
        // 341) >> 10 = 5 (the exact root is 4.64: small inputs are rough).
        assert_eq!(cubic_root(100), 5);
        // W_max - cwnd = 30 segments (W_max 100, beta 0.7): a = 30 *
        // 2681735677 = 80452070310, fls 37, b = (37*84 >> 8) - 1 = 11,
        // shift = a >> 33 = 9, x = ((129 + 10) << 11) >> 6 = 4448;
        // x = 8896 + a / (4448 * 4447) = 8896 + 4067 = 12963; (12963 *
        // 341) >> 10 = 4316: K = 4316/1024 s = 4.215 s (RFC 9438's exact
        // cbrt(30 / 0.4) = 4.217 s).
        assert_eq!(cubic_root(30 * CUBE_FACTOR), 4316);
        for a in [12_345u64, 1 << 30, 987_654_321_012, 1 << 50] {
            let r = cubic_root(a) as f64;
            let exact = (a as f64).cbrt();
            assert!((r - exact).abs() / exact < 0.01, "{a}: {r} vs {exact}");
        }
    }

    /// Fast convergence and the reduction: 717/1024.
    #[test]
    fn recalc_ssthresh() {
        let mut b = Bictcp::default();
        // 100 * 717 / 1024 = 70.02 -> 70; W_max = 100.
        assert_eq!(b.recalc_ssthresh(100), 70);
        assert_eq!(b.last_max_cwnd, 100);
        // A loss at 80 < 100: W_max = 80 * 1741 / 2048 = 68.0 -> 68;
        // ssthresh 80 * 717 / 1024 = 56.01 -> 56.
        assert_eq!(b.recalc_ssthresh(80), 56);
        assert_eq!(b.last_max_cwnd, 68);
        // The floor: 2 * 717 / 1024 = 1 -> 2.
        assert_eq!(b.recalc_ssthresh(2), 2);
        assert_eq!(b.epoch_start, None);
    }

    /// After a timeout (state reset, W_max 0) with cwnd 7: the cubic
    /// target stays at cwnd (K = 0, origin 7, 100 ms ahead adds
    /// 410 * 102^3 >> 40 = 0), so cnt = 700 capped to 20; the Reno
    /// estimate grows a segment per 7 * 15 >> 3 = 13 acked: at the 14th
    /// (ack_cnt 14 > 13) it is 8 and caps cnt at 7 / (8 - 7) = 7. With
    /// `cnt` recomputed only every HZ/32 jiffies, as in
    /// cubic-rto-ss-ca-cwnd-bump.pkt (ACKs 100 ms apart, then 2 ms).
    #[test]
    fn reno_estimate_caps_cnt_after_timeout() {
        let mut b = Bictcp::default();
        let delay_min = 100_000;
        let mut now = 1000;
        b.update(7, 1, now, delay_min);
        assert_eq!((b.cnt, b.k, b.origin, b.tcp_cwnd), (20, 0, 7, 7));
        assert_eq!(b.avoid_ai(7, 1), 7);
        // Thirteen more ACKs, each of a segment: 12 within 28 ms of the
        // last recomputation (no new cnt), one 100 ms on at the 14th.
        let mut cwnd = 7;
        for i in 2..=15u32 {
            now += if i % 7 == 2 { 25 } else { 1 };
            b.update(cwnd, 1, now, delay_min);
            cwnd = b.avoid_ai(cwnd, 1);
            if i < 9 {
                assert_eq!((b.cnt, cwnd), (20, 7), "ACK {i}");
            }
        }
        // The 9th ACK (i = 9, 100 ms on) recomputed: ack_cnt 9 <= 13, cnt
        // 20; the 15th is within 28 ms of it: cnt still 20, cwnd_cnt 15.
        assert_eq!((b.cnt, cwnd, b.cwnd_cnt), (20, 7, 15));
        // The 16th, 100 ms on: ack_cnt 16 > 13: tcp_cwnd 8, cnt 7; the
        // 15 credits count at once: cwnd 8.
        now += 25;
        b.update(cwnd, 1, now, delay_min);
        assert_eq!((b.tcp_cwnd, b.cnt), (8, 7));
        assert_eq!(b.avoid_ai(cwnd, 1), 8);
        assert_eq!(b.cwnd_cnt, 1);
    }

    /// After a loss at W_max = 100 (ssthresh 70), K = 4316/1024 s: on a
    /// 100 ms path cwnd follows the curve, back at about W_max at K.
    #[test]
    fn concave_growth_to_w_max() {
        let mut b = Bictcp::default();
        b.recalc_ssthresh(100);
        let mut cwnd = 70u32;
        let mut now = 0u32;
        // 100 ms rounds (25 jiffies), one ACK per segment.
        let mut at_k = None;
        while now < 2 * 1054 {
            // A round acknowledges the window it started with.
            let round = cwnd;
            for _ in 0..round {
                b.update(cwnd, 1, now, 100_000);
                cwnd = b.avoid_ai(cwnd, 1);
            }
            now += 25;
            // K = 4316/1024 s = 1053.7 jiffies.
            if at_k.is_none() && now >= 1054 {
                at_k = Some(cwnd);
            }
        }
        assert_eq!(b.k, 4316);
        let at_k = at_k.unwrap_or(0);
        assert!((99..=101).contains(&at_k), "at K: {at_k}");
        // At 2K: W_max + (W_max - 70) = 130, within a round's growth.
        assert!((128..=134).contains(&cwnd), "at 2K: {cwnd}");
    }

    /// cnt is at least 2: far above the curve cwnd grows at most 1.5x
    /// per round.
    #[test]
    fn growth_at_most_one_and_a_half_per_round() {
        let mut b = Bictcp::default();
        b.recalc_ssthresh(10);
        let mut cwnd = 7u32;
        b.update(cwnd, 1, 0, 100_000);
        // A minute later the curve is far above.
        let start = cwnd;
        for _ in 0..start {
            b.update(cwnd, 1, 15_000, 100_000);
            cwnd = b.avoid_ai(cwnd, 1);
        }
        assert_eq!(b.cnt, 2);
        assert!(cwnd <= start + start / 2 + 1, "{cwnd}");
    }

    /// Idle time shifts the epoch (`CA_EVENT_TX_START`), never past now.
    #[test]
    fn tx_start_shifts_the_epoch() {
        let mut b = Bictcp::default();
        b.tx_start(500, 100);
        assert_eq!(b.epoch_start, None, "no epoch: nothing to shift");
        b.epoch_start = Some(1000);
        b.tx_start(1300, 1200);
        assert_eq!(b.epoch_start, Some(1100));
        b.tx_start(1300, 1300);
        assert_eq!(b.epoch_start, Some(1100), "no idle time");
        b.tx_start(2000, 1000);
        assert_eq!(b.epoch_start, Some(2000), "not after now");
    }
}
