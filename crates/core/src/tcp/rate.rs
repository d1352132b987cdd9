//! Delivery-rate sampling as Linux does it (`net/ipv4/tcp_rate.c`, after
//! draft-cheng-iccrg-delivery-rate-estimation): every transmission records
//! the connection's delivered count and the times its sample will need;
//! every ACK takes the most recently sent segment it delivers and turns
//! "segments delivered since that one was sent" over the longer of its send
//! and ACK phases into a rate; the last sample kept is `tcpi_delivery_rate`.

use ustack_wire::tcp::SeqNum;

use super::conn::Connection;
use super::sack::{RateTx, Seg};
use crate::time::Instant;

/// Microseconds from `earlier` to `later`, saturating at `u32::MAX`.
fn us(later: Instant, earlier: Instant) -> u32 {
    u32::try_from(later.saturating_duration_since(earlier).as_micros()).unwrap_or(u32::MAX)
}

/// One ACK's sample in the making (Linux `struct rate_sample`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RateSample {
    /// The delivered count and the last delivery's time when the sample's
    /// segment was sent (`prior_delivered`, `prior_mstamp`).
    prior: Option<(u32, Instant)>,
    /// Its send phase (`interval_us`, until `rate_gen` widens it).
    interval_us: u32,
    app_limited: bool,
    last_end: SeqNum,
    /// The send time of the most recently sent segment delivered so far
    /// (Linux updates `tp->first_tx_mstamp` as it goes).
    first_tx: Option<Instant>,
}

impl RateSample {
    /// Linux `tcp_rate_skb_delivered`: segment `s` was just acknowledged
    /// or SACKed; the most recently sent of those gives the sample.
    pub(super) fn delivered(&mut self, s: &Seg, conn_first_tx: Instant) {
        if !s.tx.valid {
            return;
        }
        let first_tx = self.first_tx.unwrap_or(conn_first_tx);
        let later = s.xmit > first_tx || (s.xmit == first_tx && s.end.gt(self.last_end));
        if self.prior.is_none() || later {
            let delivered_at = s
                .xmit
                .checked_sub(crate::time::Duration::from_micros(u64::from(
                    s.tx.delivered_ago,
                )))
                .unwrap_or(Instant::ZERO);
            self.prior = Some((s.tx.delivered, delivered_at));
            self.app_limited = s.tx.app_limited;
            self.last_end = s.end;
            self.first_tx = Some(s.xmit);
            self.interval_us = s.tx.first_tx_ago;
        }
    }
}

impl Connection {
    /// Linux `tcp_rate_skb_sent`, before a segment goes out: with nothing
    /// in flight a new send phase starts now; the state to record with it.
    pub(super) fn rate_tx(&mut self, now: Instant) -> RateTx {
        let st = &mut self.stats;
        if self.snd.una == self.snd.max {
            st.first_tx = now;
            st.delivered_at = Some(now);
        }
        RateTx {
            valid: true,
            app_limited: st.app_limited != 0,
            delivered: st.delivered,
            first_tx_ago: us(now, st.first_tx),
            delivered_ago: us(now, st.delivered_at.unwrap_or(now)),
        }
    }

    /// Linux `tcp_rate_check_app_limited`, as a write begins: less than a
    /// segment unsent, cwnd not the limit and no lost segment waiting for
    /// its retransmission: the samples until what is in flight now is
    /// delivered may show the application's pace, not the path's.
    pub(super) fn check_app_limited(&mut self) {
        let mss = self.max_payload_base().max(1);
        let queued = self.snd.queue.buf.len();
        let sent = self.snd.max.wrapping_sub(self.snd.queue.seq) as usize;
        let unsent = queued.saturating_sub(sent);
        let totals = self.rtx.scoreboard.totals();
        let in_flight = self.pipe().div_ceil(mss);
        if unsent < mss
            && in_flight < self.send_cwnd() / mss
            && totals.lost_out <= totals.retrans_out
        {
            let in_flight = u32::try_from(in_flight).unwrap_or(u32::MAX);
            self.stats.app_limited = self.stats.delivered.wrapping_add(in_flight).max(1);
        }
    }

    /// Linux `tcp_rate_gen`, once an ACK's deliveries are counted
    /// (`delivered_now` segments): keep the sample if it is valid (not
    /// shorter than the minimum RTT) and either not application-limited
    /// or faster than the last one kept.
    pub(super) fn rate_gen(&mut self, now: Instant, delivered_now: u32, rs: RateSample) {
        let min_rtt = self.rtx.rack.min_rtt();
        let st = &mut self.stats;
        if let Some(t) = rs.first_tx {
            st.first_tx = t;
        }
        if st.app_limited != 0 && (st.delivered.wrapping_sub(st.app_limited) as i32) > 0 {
            st.app_limited = 0;
        }
        if delivered_now > 0 {
            st.delivered_at = Some(now);
        }
        let Some((prior_delivered, prior_at)) = rs.prior else {
            return;
        };
        let delivered = st.delivered.wrapping_sub(prior_delivered);
        let interval = rs.interval_us.max(us(now, prior_at));
        // No minimum RTT yet: Linux's is ~0U, which every interval is under.
        let Some(min_rtt) = min_rtt else {
            return;
        };
        if u128::from(interval) < min_rtt.as_micros() {
            return;
        }
        if !rs.app_limited
            || u64::from(delivered) * u64::from(st.rate_interval_us)
                >= u64::from(st.rate_delivered) * u64::from(interval)
        {
            st.rate_delivered = delivered;
            st.rate_interval_us = interval;
            st.rate_app_limited = rs.app_limited;
        }
    }

    /// `tcpi_delivery_rate`: the last sample kept, in bytes per second
    /// (segments of `mss_cache` bytes).
    pub(super) fn delivery_rate(&self) -> u64 {
        let st = &self.stats;
        if st.rate_delivered == 0 || st.rate_interval_us == 0 {
            return 0;
        }
        let mss = self.max_payload_base() as u64;
        u64::from(st.rate_delivered) * mss * 1_000_000 / u64::from(st.rate_interval_us)
    }
}
