//! RTT estimation and the retransmission timeout (RFC 6298).

use crate::time::Duration;

/// RFC 6298 estimator: SRTT, RTTVAR and RTO with exponential backoff.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    backoff: u32,
    min_rto: Duration,
    max_rto: Duration,
}

/// Clock granularity G (we measure in microseconds; Linux uses 1 ms).
const G: Duration = Duration::from_millis(1);

impl RttEstimator {
    /// RFC 6298 2.1: "Until a round-trip time (RTT) measurement has been
    /// made for a segment sent between the sender and receiver, the sender
    /// SHOULD set RTO <- 1 second".
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            rto: initial_rto.clamp(min_rto, max_rto.max(min_rto)),
            backoff: 0,
            min_rto,
            max_rto: max_rto.max(min_rto),
        }
    }

    /// Feed one RTT sample (the caller applies Karn's rule).
    pub fn sample(&mut self, r: Duration) {
        match self.srtt {
            // RFC 6298 2.2: "SRTT <- R, RTTVAR <- R/2,
            // RTO <- SRTT + max (G, K*RTTVAR) where K = 4."
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            // RFC 6298 2.3: "RTTVAR <- (1 - beta) * RTTVAR + beta * |SRTT - R'|
            // SRTT <- (1 - alpha) * SRTT + alpha * R'" with alpha=1/8, beta=1/4.
            Some(srtt) => {
                let delta = srtt.abs_diff(r);
                self.rttvar = (self.rttvar * 3) / 4 + delta / 4;
                self.srtt = Some((srtt * 7) / 8 + r / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        // RFC 6298 2.4/2.5: RTO below 1 s rounded up; we follow Linux,
        // which floors the variance term instead (`rttvar_us` is at least
        // `tcp_rto_min`, 200 ms): RTO = SRTT + max(4 * RTTVAR, min_rto), so
        // a 100 ms path gets 300 ms, not 250. "A maximum value MAY be placed
        // on RTO provided it is at least 60 seconds."
        self.rto = (srtt + G.max(self.rttvar * 4).max(self.min_rto)).min(self.max_rto);
        // RFC 6298 5: a new sample after backoff collapses the backoff.
        self.backoff = 0;
    }

    /// The current RTO including backoff.
    pub fn rto(&self) -> Duration {
        let mut r = self.rto;
        for _ in 0..self.backoff.min(32) {
            r = r.saturating_mul(2);
            if r >= self.max_rto {
                return self.max_rto;
            }
        }
        r.min(self.max_rto)
    }

    /// RFC 6298 5.5: "The host MUST set RTO <- RTO * 2 ("back off the timer")."
    pub fn backoff(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// Take back one [`RttEstimator::backoff`] (a timeout whose
    /// retransmission never left).
    pub fn unbackoff(&mut self) {
        self.backoff = self.backoff.saturating_sub(1);
    }

    /// Timeouts the RTO is backed off by.
    pub fn backoff_count(&self) -> u32 {
        self.backoff
    }

    /// Forget the backoff (an ACK for new data arrived).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(120),
        )
    }

    #[test]
    fn first_sample_and_smoothing() {
        let mut e = est();
        assert_eq!(e.rto(), Duration::from_secs(1));
        e.sample(Duration::from_millis(100));
        // 100 + 4*50 = 300 ms
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.sample(Duration::from_millis(100));
        // rttvar = 37.5, srtt = 100: 4 * rttvar = 150 < 200 -> 300 ms
        // (RFC 6298 alone would give 250 ms; Linux floors the variance).
        assert_eq!(e.rto(), Duration::from_millis(300));
        for _ in 0..50 {
            e.sample(Duration::from_millis(10));
        }
        let srtt = e.srtt().unwrap();
        assert!(srtt < Duration::from_millis(11));
        assert_eq!(
            e.rto(),
            srtt + Duration::from_millis(200),
            "variance floored at min_rto"
        );
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut e = est();
        e.backoff();
        assert_eq!(e.rto(), Duration::from_secs(2));
        for _ in 0..20 {
            e.backoff();
        }
        assert_eq!(e.rto(), Duration::from_secs(120));
        e.sample(Duration::from_millis(100));
        assert_eq!(e.rto(), Duration::from_millis(300));
    }
}
