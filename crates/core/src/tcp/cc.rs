//! Congestion control behind a trait; NewReno (RFC 5681, RFC 6582).

use core::fmt::Debug;

/// A congestion controller. Sizes are in bytes; `mss` is the sender MSS.
pub trait CongestionControl: Debug + Send {
    fn cwnd(&self) -> usize;
    fn ssthresh(&self) -> usize;
    /// New data was cumulatively acknowledged outside recovery.
    fn on_ack(&mut self, acked: usize, mss: usize);
    /// Three duplicate ACKs: entering fast recovery with `flight` bytes out.
    fn on_enter_recovery(&mut self, flight: usize, mss: usize);
    /// A further duplicate ACK during fast recovery.
    fn on_dupack(&mut self, mss: usize);
    /// A partial ACK (RFC 6582) acknowledging `acked` bytes.
    fn on_partial_ack(&mut self, acked: usize, mss: usize);
    /// A full ACK ends recovery; `flight` is what remains outstanding.
    fn on_exit_recovery(&mut self, flight: usize, mss: usize);
    /// The retransmission timer expired with `flight` bytes out.
    fn on_timeout(&mut self, flight: usize, mss: usize);
    /// Restart after an idle period longer than an RTO (RFC 5681 4.1).
    fn on_idle(&mut self, mss: usize);
}

/// NewReno.
#[derive(Debug, Clone)]
pub struct NewReno {
    cwnd: usize,
    ssthresh: usize,
    /// Bytes acked since the last cwnd increase in congestion avoidance.
    ca_acked: usize,
    initial_segments: usize,
}

impl NewReno {
    /// RFC 5681 3.1: "The initial value of ssthresh SHOULD be set
    /// arbitrarily high"; the initial window is `initial_segments` (RFC 6928: 10).
    pub fn new(initial_segments: u32, mss: usize) -> Self {
        let initial_segments = (initial_segments as usize).max(1);
        NewReno {
            cwnd: initial_segments * mss,
            ssthresh: usize::MAX / 2,
            ca_acked: 0,
            initial_segments,
        }
    }
}

impl CongestionControl for NewReno {
    fn cwnd(&self) -> usize {
        self.cwnd
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn on_ack(&mut self, acked: usize, mss: usize) {
        if self.cwnd < self.ssthresh {
            // RFC 5681 3.1 slow start, with Appropriate Byte Counting
            // (RFC 3465, L = 2*SMSS): "cwnd += min (N, SMSS)" generalised.
            self.cwnd += acked.min(2 * mss);
        } else {
            // RFC 5681 3.1 congestion avoidance: "cwnd += SMSS*SMSS/cwnd"
            // per ACK, done as byte counting: +SMSS per cwnd bytes acked.
            self.ca_acked += acked;
            if self.ca_acked >= self.cwnd {
                self.ca_acked -= self.cwnd;
                self.cwnd += mss;
            }
        }
    }

    fn on_enter_recovery(&mut self, flight: usize, mss: usize) {
        // RFC 5681 3.2 (2): "ssthresh = max (FlightSize / 2, 2*SMSS)";
        // (3): "cwnd = ssthresh + 3*SMSS".
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh + 3 * mss;
        self.ca_acked = 0;
    }

    fn on_dupack(&mut self, mss: usize) {
        // RFC 5681 3.2 (4): "For each additional duplicate ACK received
        // (after the third), cwnd MUST be incremented by SMSS."
        self.cwnd += mss;
    }

    fn on_partial_ack(&mut self, acked: usize, mss: usize) {
        // RFC 6582 3.2 (5): "deflate the congestion window by the amount of
        // new data acknowledged by the cumulative acknowledgment field. If
        // the partial ACK acknowledges at least one SMSS of new data, then
        // add back SMSS bytes to the congestion window."
        self.cwnd = self.cwnd.saturating_sub(acked);
        if acked >= mss {
            self.cwnd += mss;
        }
        self.cwnd = self.cwnd.max(mss);
    }

    fn on_exit_recovery(&mut self, flight: usize, mss: usize) {
        // RFC 6582 3.2 (3) option (1): "Set cwnd to min (ssthresh,
        // max(FlightSize, SMSS) + SMSS)".
        self.cwnd = self.ssthresh.min(flight.max(mss) + mss);
    }

    fn on_timeout(&mut self, flight: usize, mss: usize) {
        // RFC 5681 3.1 (4): "ssthresh = max (FlightSize / 2, 2*SMSS)" and
        // "the congestion window ... MUST be set to ... 1 full-sized segment".
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = mss;
        self.ca_acked = 0;
    }

    fn on_idle(&mut self, mss: usize) {
        // RFC 5681 4.1: "cwnd = min(RW, cwnd)" with RW = min(IW, cwnd).
        self.cwnd = self.cwnd.min(self.initial_segments * mss);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_avoidance() {
        let mss = 1000;
        let mut c = NewReno::new(10, mss);
        assert_eq!(c.cwnd(), 10_000);
        c.on_ack(1000, mss);
        assert_eq!(c.cwnd(), 11_000);
        c.on_timeout(20_000, mss);
        assert_eq!((c.cwnd(), c.ssthresh()), (1000, 10_000));
        for _ in 0..9 {
            c.on_ack(1000, mss);
        }
        assert_eq!(c.cwnd(), 10_000);
        // Congestion avoidance: one MSS per cwnd of acked bytes.
        for _ in 0..10 {
            c.on_ack(1000, mss);
        }
        assert_eq!(c.cwnd(), 11_000);
    }

    #[test]
    fn fast_recovery_inflation_and_deflation() {
        let mss = 1000;
        let mut c = NewReno::new(10, mss);
        c.on_enter_recovery(10_000, mss);
        assert_eq!((c.ssthresh(), c.cwnd()), (5000, 8000));
        c.on_dupack(mss);
        assert_eq!(c.cwnd(), 9000);
        c.on_partial_ack(3000, mss);
        assert_eq!(c.cwnd(), 7000);
        c.on_exit_recovery(2000, mss);
        assert_eq!(c.cwnd(), 3000);
    }
}
