//! Congestion control behind a trait; NewReno (RFC 5681, RFC 6582).

use core::fmt::Debug;

/// A congestion controller. Sizes are in bytes; `mss` is the sender MSS.
pub trait CongestionControl: Debug + Send {
    fn cwnd(&self) -> usize;
    fn ssthresh(&self) -> usize;
    /// New data was cumulatively acknowledged outside recovery.
    fn on_ack(&mut self, acked: usize, mss: usize);
    /// Loss detected (RACK, or three duplicate ACKs without SACK):
    /// entering fast recovery with `flight` bytes out. During recovery the
    /// sender keeps RFC 6675's pipe below cwnd.
    fn on_enter_recovery(&mut self, flight: usize, mss: usize);
    /// The reduction was spurious (RFC 3708 / Eifel, DSACK): restore the
    /// state from before it.
    fn on_undo(&mut self, prior_cwnd: usize, prior_ssthresh: usize);
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
        // RFC 6675 5 (4.2): "ssthresh = cwnd = (FlightSize / 2)" (with
        // RFC 5681's floor of 2*SMSS). No window inflation: the pipe
        // estimate accounts for what left the network.
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh;
        self.ca_acked = 0;
    }

    fn on_undo(&mut self, prior_cwnd: usize, prior_ssthresh: usize) {
        // RFC 3708 / Linux tcp_undo_cwnd_reduction: back to where we were.
        self.cwnd = self.cwnd.max(prior_cwnd);
        self.ssthresh = self.ssthresh.max(prior_ssthresh);
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
    fn fast_recovery_and_undo() {
        let mss = 1000;
        let mut c = NewReno::new(10, mss);
        c.on_enter_recovery(10_000, mss);
        assert_eq!((c.ssthresh(), c.cwnd()), (5000, 5000));
        c.on_exit_recovery(2000, mss);
        assert_eq!(c.cwnd(), 3000);
        c.on_undo(10_000, usize::MAX / 2);
        assert_eq!((c.cwnd(), c.ssthresh()), (10_000, usize::MAX / 2));
    }
}
