//! Congestion control behind a trait: CUBIC as Linux's (its HyStart and
//! its window growth, in `cubic.rs`, `cubic_linux.rs` and `hystart.rs`),
//! the default, CUBIC per RFC 9438 with RFC 9406's HyStart++, and NewReno
//! (RFC 5681, RFC 6582), selectable per stack ([`TcpConfig`]) and per
//! connection ([`Connection::set_congestion_algorithm`]).
//!
//! The controller owns cwnd and ssthresh outside loss recovery. During fast
//! recovery the connection paces what it sends by PRR (RFC 6937, `prr.rs`)
//! towards the ssthresh the controller chose; the controller is told when
//! recovery starts, ends, or turns out spurious.
//!
//! [`TcpConfig`]: super::TcpConfig
//! [`Connection::set_congestion_algorithm`]: super::Connection::set_congestion_algorithm

use core::fmt::{self, Debug};
use core::str::FromStr;

use ustack_wire::tcp::SeqNum;

use super::cubic::{Cubic, CubicPrior};
use crate::time::{Duration, Instant};

/// RFC 5681 3.1: "The initial value of ssthresh SHOULD be set arbitrarily
/// high (e.g., to the size of the largest possible advertised window)".
pub(crate) const INITIAL_SSTHRESH: usize = usize::MAX / 2;

/// The congestion control algorithms built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CcAlgorithm {
    /// CUBIC as Linux's `tcp_cubic` (its HyStart, its congestion
    /// avoidance arithmetic): Linux's default.
    #[default]
    Cubic,
    /// NewReno (RFC 5681 and RFC 6582; Linux's `reno`).
    NewReno,
    /// CUBIC as RFC 9438 specifies it (cwnd follows W_cubic and W_est per
    /// ACK), with RFC 9406's HyStart++ (Conservative Slow Start) ending
    /// the initial slow start instead of Linux's HyStart.
    CubicHyStartPlusPlus,
}

impl CcAlgorithm {
    pub const ALL: [CcAlgorithm; 3] = [
        CcAlgorithm::Cubic,
        CcAlgorithm::NewReno,
        CcAlgorithm::CubicHyStartPlusPlus,
    ];

    /// The name Linux gives it (`ss -i`, `TCP_CONGESTION`), NewReno aside.
    pub fn name(self) -> &'static str {
        match self {
            CcAlgorithm::Cubic => "cubic",
            CcAlgorithm::NewReno => "newreno",
            CcAlgorithm::CubicHyStartPlusPlus => "cubic-hystart++",
        }
    }

    /// A controller in its initial state: cwnd = `initial_segments` *
    /// `mss` (at least one segment), ssthresh arbitrarily high. `paced`:
    /// the connection paces its sends (HyStart's ACK train then may span
    /// the whole minimum RTT).
    pub fn build(
        self,
        initial_segments: u32,
        mss: usize,
        paced: bool,
    ) -> Box<dyn CongestionControl> {
        match self {
            CcAlgorithm::Cubic => Box::new(Cubic::new(initial_segments, mss, paced)),
            CcAlgorithm::NewReno => Box::new(NewReno::new(initial_segments, mss)),
            CcAlgorithm::CubicHyStartPlusPlus => {
                Box::new(Cubic::with_hystart_pp(initial_segments, mss, paced))
            }
        }
    }
}

impl fmt::Display for CcAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown algorithm name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown congestion control '{}' (known: cubic, newreno, cubic-hystart++)",
            self.0
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for CcAlgorithm {
    type Err = UnknownAlgorithm;
    /// `cubic`, `newreno` (or Linux's `reno`), any case.
    fn from_str(s: &str) -> Result<CcAlgorithm, UnknownAlgorithm> {
        match s.to_ascii_lowercase().as_str() {
            "cubic" => Ok(CcAlgorithm::Cubic),
            "newreno" | "reno" => Ok(CcAlgorithm::NewReno),
            "cubic-hystart++" | "cubic-hspp" => Ok(CcAlgorithm::CubicHyStartPlusPlus),
            _ => Err(UnknownAlgorithm(s.to_string())),
        }
    }
}

/// What one ACK that acknowledged new data tells the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckSample {
    pub now: Instant,
    /// Bytes newly acknowledged cumulatively (RFC 5681 "N").
    pub acked: usize,
    /// The sender MSS (payload bytes of a full segment).
    pub mss: usize,
    /// SND.UNA after this ACK.
    pub una: SeqNum,
    /// The highest sequence number sent so far (SND.NXT in HyStart's
    /// rounds; SND.MAX here, as SND.NXT rewinds on a timeout).
    pub snd_nxt: SeqNum,
    /// The round-trip time of the most recently sent, never retransmitted
    /// segment this ACK delivered (cumulatively or by SACK), if any.
    pub rtt: Option<Duration>,
    /// The smoothed RTT (RFC 6298), once measured.
    pub srtt: Option<Duration>,
    /// Was cwnd what limited the sender in the current window of data
    /// (RFC 7661)? An application-limited sender must not grow cwnd
    /// (RFC 5681 3.1, RFC 9438 5.8).
    pub cwnd_limited: bool,
    /// This ACK ended fast recovery (`on_exit_recovery` came first).
    /// Linux's CUBIC counts it, as `tcp_cong_control` runs in the Open
    /// state; NewReno's exit (RFC 6582 3.2) sets cwnd and no more.
    pub ends_recovery: bool,
}

/// A controller's state before a window reduction, to restore if the
/// reduction turns out spurious (RFC 3708, RFC 9438 4.9). `cwnd` and
/// `ssthresh` are every controller's; CUBIC adds its own variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcSnapshot {
    pub cwnd: usize,
    pub ssthresh: usize,
    pub(crate) cubic: Option<CubicPrior>,
}

impl CcSnapshot {
    pub fn new(cwnd: usize, ssthresh: usize) -> CcSnapshot {
        CcSnapshot {
            cwnd,
            ssthresh,
            cubic: None,
        }
    }
}

/// A congestion controller. Sizes are in bytes; `mss` is the sender MSS.
/// Time comes in as arguments (the engine never reads a clock).
pub trait CongestionControl: Debug + Send {
    /// A short name (`cubic`, `newreno`) for diagnostics.
    fn name(&self) -> &'static str;
    fn cwnd(&self) -> usize;
    fn ssthresh(&self) -> usize;
    /// New data was cumulatively acknowledged outside fast recovery (in
    /// slow start, congestion avoidance, or the slow start after an RTO).
    fn on_ack(&mut self, ack: &AckSample);
    /// The state to restore should the next reduction prove spurious.
    fn snapshot(&self) -> CcSnapshot;
    /// Loss detected (RACK, three duplicate ACKs without SACK, a repaired
    /// tail loss): reduce ssthresh and cwnd for this episode; `flight` is
    /// the bytes outstanding (RFC 5681 FlightSize). During fast recovery
    /// the sender follows PRR (RFC 6937) towards the new ssthresh.
    fn on_enter_recovery(&mut self, now: Instant, flight: usize, mss: usize);
    /// The reduction was spurious (RFC 3708 / Eifel, DSACK): restore what
    /// `prior` holds, as far as the algorithm wants.
    fn on_undo(&mut self, now: Instant, prior: &CcSnapshot);
    /// A full ACK ends fast recovery; `flight` is what remains outstanding.
    fn on_exit_recovery(&mut self, now: Instant, flight: usize, mss: usize);
    /// The retransmission timer expired with `flight` bytes out;
    /// `repeated`: it expired again for a segment it already resent (RFC
    /// 5681 3.1: then "the value of ssthresh is held constant").
    fn on_timeout(&mut self, now: Instant, flight: usize, mss: usize, repeated: bool);
    /// Restart after an idle period longer than an RTO (RFC 5681 4.1).
    fn on_idle(&mut self, now: Instant, mss: usize);
    /// New data goes out with nothing in flight (Linux
    /// `CA_EVENT_TX_START`); `last_send` is when the connection last sent.
    fn on_tx_start(&mut self, _now: Instant, _last_send: Instant) {}
    /// Take over another controller's window when a live connection
    /// switches algorithms (as Linux's `TCP_CONGESTION` keeps `snd_cwnd`
    /// and `snd_ssthresh`).
    fn set_window(&mut self, cwnd: usize, ssthresh: usize);
    /// A boxed copy of this controller (for [`Clone`] of a connection, and so
    /// of a whole `Stack`).
    fn clone_box(&self) -> Box<dyn CongestionControl>;
}

impl Clone for Box<dyn CongestionControl> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
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
            ssthresh: INITIAL_SSTHRESH,
            ca_acked: 0,
            initial_segments,
        }
    }
}

impl CongestionControl for NewReno {
    fn name(&self) -> &'static str {
        CcAlgorithm::NewReno.name()
    }

    fn cwnd(&self) -> usize {
        self.cwnd
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn on_ack(&mut self, ack: &AckSample) {
        if !ack.cwnd_limited || ack.ends_recovery {
            return;
        }
        let (acked, mss) = (ack.acked, ack.mss);
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

    fn snapshot(&self) -> CcSnapshot {
        CcSnapshot::new(self.cwnd, self.ssthresh)
    }

    fn on_enter_recovery(&mut self, _now: Instant, flight: usize, mss: usize) {
        // RFC 6675 5 (4.2): "ssthresh = cwnd = (FlightSize / 2)" (with
        // RFC 5681's floor of 2*SMSS). No window inflation: the pipe
        // estimate accounts for what left the network.
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh;
        self.ca_acked = 0;
    }

    fn on_undo(&mut self, _now: Instant, prior: &CcSnapshot) {
        // RFC 3708 / Linux tcp_undo_cwnd_reduction: back to where we were.
        self.cwnd = self.cwnd.max(prior.cwnd);
        self.ssthresh = self.ssthresh.max(prior.ssthresh);
    }

    fn on_exit_recovery(&mut self, _now: Instant, flight: usize, mss: usize) {
        // RFC 6582 3.2 (3) option (1): "Set cwnd to min (ssthresh,
        // max(FlightSize, SMSS) + SMSS)".
        self.cwnd = self.ssthresh.min(flight.max(mss) + mss);
    }

    fn on_timeout(&mut self, _now: Instant, flight: usize, mss: usize, repeated: bool) {
        // RFC 5681 3.1 (4): "ssthresh = max (FlightSize / 2, 2*SMSS)" and
        // "the congestion window ... MUST be set to ... 1 full-sized segment".
        if !repeated {
            self.ssthresh = (flight / 2).max(2 * mss);
        }
        self.cwnd = mss;
        self.ca_acked = 0;
    }

    fn on_idle(&mut self, _now: Instant, mss: usize) {
        // RFC 5681 4.1: "cwnd = min(RW, cwnd)" with RW = min(IW, cwnd).
        self.cwnd = self.cwnd.min(self.initial_segments * mss);
    }

    fn set_window(&mut self, cwnd: usize, ssthresh: usize) {
        self.cwnd = cwnd.max(1);
        self.ssthresh = ssthresh.max(1);
        self.ca_acked = 0;
    }

    fn clone_box(&self) -> Box<dyn CongestionControl> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn ack(acked: usize, mss: usize) -> AckSample {
        AckSample {
            now: Instant::ZERO,
            acked,
            mss,
            una: SeqNum(0),
            snd_nxt: SeqNum(0),
            rtt: None,
            srtt: None,
            cwnd_limited: true,
            ends_recovery: false,
        }
    }

    #[test]
    fn slow_start_then_avoidance() {
        let mss = 1000;
        let t = Instant::ZERO;
        let mut c = NewReno::new(10, mss);
        assert_eq!(c.cwnd(), 10_000);
        c.on_ack(&ack(1000, mss));
        assert_eq!(c.cwnd(), 11_000);
        c.on_timeout(t, 20_000, mss, false);
        assert_eq!((c.cwnd(), c.ssthresh()), (1000, 10_000));
        // A repeated timeout holds ssthresh (RFC 5681 3.1).
        c.on_timeout(t, 4_000, mss, true);
        assert_eq!((c.cwnd(), c.ssthresh()), (1000, 10_000));
        for _ in 0..9 {
            c.on_ack(&ack(1000, mss));
        }
        assert_eq!(c.cwnd(), 10_000);
        // Congestion avoidance: one MSS per cwnd of acked bytes.
        for _ in 0..10 {
            c.on_ack(&ack(1000, mss));
        }
        assert_eq!(c.cwnd(), 11_000);
        // Application-limited ACKs do not grow it.
        for _ in 0..100 {
            c.on_ack(&AckSample {
                cwnd_limited: false,
                ..ack(1000, mss)
            });
        }
        assert_eq!(c.cwnd(), 11_000);
    }

    #[test]
    fn fast_recovery_and_undo() {
        let mss = 1000;
        let t = Instant::ZERO;
        let mut c = NewReno::new(10, mss);
        let prior = c.snapshot();
        c.on_enter_recovery(t, 10_000, mss);
        assert_eq!((c.ssthresh(), c.cwnd()), (5000, 5000));
        c.on_exit_recovery(t, 2000, mss);
        assert_eq!(c.cwnd(), 3000);
        c.on_undo(t, &prior);
        assert_eq!((c.cwnd(), c.ssthresh()), (10_000, INITIAL_SSTHRESH));
    }

    #[test]
    fn algorithm_names_parse_and_build() {
        assert_eq!(CcAlgorithm::default(), CcAlgorithm::Cubic);
        for a in CcAlgorithm::ALL {
            assert_eq!(a.name().parse::<CcAlgorithm>(), Ok(a));
            let c = a.build(10, 1460, true);
            assert_eq!(c.name(), a.name());
            assert_eq!(c.cwnd(), 14_600);
            assert_eq!(c.ssthresh(), INITIAL_SSTHRESH);
        }
        assert_eq!("Reno".parse::<CcAlgorithm>(), Ok(CcAlgorithm::NewReno));
        let e = "bbr".parse::<CcAlgorithm>().unwrap_err();
        assert!(e.to_string().contains("'bbr'"), "{e}");
    }
}
