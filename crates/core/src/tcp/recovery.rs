//! Loss recovery: entering fast recovery (RFC 6675, RFC 6582), undoing
//! a spurious one (RFC 3708), RACK detection (RFC 8985 6), tail loss probes
//! (RFC 8985 7) and the retransmission timeout (RFC 6298, RFC 5681 3.1).

use ustack_wire::tcp::SeqNum;

use super::cc::CcSnapshot;
use super::conn::Connection;
use super::prr::{Prr, ReductionBound};
use super::rack::Rack;
use super::rtt::RttEstimator;
use super::sack::Scoreboard;
use super::{State, TcpCounters};
use crate::time::{Duration, Instant};

/// RFC 8985 7.2 "WCDelAckT": the worst-case delayed-ACK time added to the
/// probe timeout when only one segment is in flight (Linux adds
/// `tcp_rto_min_us`, 200 ms).
const WC_DEL_ACK: Duration = Duration::from_millis(200);

/// Linux `TCP_TIMEOUT_MIN_US`: the slack added to the probe timeout
/// with more than one segment in flight, and to the RACK reordering
/// timer (`tcp_schedule_loss_probe`, `tcp_rack_mark_lost`).
const TIMEOUT_MIN: Duration = Duration::from_millis(2);

/// Retransmission: RTT, the retransmission timer, the scoreboard and loss
/// detection.
#[derive(Debug, Clone)]
pub(super) struct Rtx {
    pub(super) rtt: RttEstimator,
    pub(super) rto_at: Option<Instant>,
    /// Retransmission timeouts in a row (SYN, SYN-ACK or data).
    pub(super) retries: u32,
    pub(super) total: u32,
    /// The one segment timed for an RTT sample (the SYN, or data when
    /// timestamps are off): its sequence number and when it was sent.
    pub(super) rtt_probe: Option<(SeqNum, Instant)>,
    /// Duplicate ACKs in a row (loss detection without SACK).
    pub(super) dupacks: u32,
    /// "recover" of the last episode, until SND.UNA passes it (RFC 6582).
    pub(super) last_recover: Option<SeqNum>,
    pub(super) scoreboard: Scoreboard,
    pub(super) rack: Rack,
    /// RACK reordering timer (RFC 8985 6.3).
    pub(super) rack_at: Option<Instant>,
    /// `TCP_USER_TIMEOUT` (RFC 5482): give up when data stays
    /// unacknowledged this long. None: `max_retries` decides.
    pub(super) user_timeout: Option<super::conn::Ms>,
    /// Since when SND.UNA has not moved with data outstanding (about when
    /// the oldest unacknowledged segment was first sent).
    pub(super) stall_since: Option<Instant>,
}

/// A loss recovery episode: fast recovery (RFC 6675, RFC 6582) or, after
/// a retransmission timeout, RTO recovery. It exists only while one is
/// going on, so nothing of it can outlive its episode.
#[derive(Debug, Clone, Copy)]
pub(super) struct Recovery {
    /// "recover" (RFC 6582 / RFC 6675): the episode ends when SND.UNA
    /// reaches it.
    pub(super) recover: SeqNum,
    /// Entered by the retransmission timer (Linux `TCP_CA_Loss`), not by
    /// loss detection.
    pub(super) in_loss: bool,
    /// The first lost segment must be retransmitted at the next dispatch
    /// whatever cwnd - pipe says: set on entering fast recovery (RFC 5681
    /// 3.2 step 3, RFC 6675 5 (4.3), Linux PRR's one segment on a new
    /// loss) and on a NewReno partial ACK (RFC 6582 3.2 (5)).
    pub(super) rtx_head_now: bool,
    /// What to restore if the episode turns out spurious.
    pub(super) undo: Undo,
    /// Fast recovery's Proportional Rate Reduction (RFC 6937); None in
    /// the recovery after a retransmission timeout, which slow-starts.
    pub(super) prr: Option<PrrWindow>,
}

/// PRR's state and the window it grants: RFC 6675's pipe after the last
/// ACK plus that ACK's sndcnt (how Linux applies PRR, `tcp_cwnd_reduction`:
/// `snd_cwnd = tcp_packets_in_flight + sndcnt`), so the sender's usual
/// "cwnd - pipe" test lets exactly sndcnt bytes go until the next ACK.
#[derive(Debug, Clone, Copy)]
pub(super) struct PrrWindow {
    pub(super) prr: Prr,
    pub(super) cwnd: usize,
}

/// What to restore if a window reduction turns out spurious (RFC 3708,
/// RFC 9438 4.9).
#[derive(Debug, Clone, Copy)]
pub(super) struct Undo {
    /// The controller's state before the reduction.
    pub(super) prior: CcSnapshot,
    /// Our TSval on the first retransmission of the episode (Linux
    /// `retrans_stamp`).
    pub(super) retrans_ts: Option<u32>,
}

/// Tail loss probe (RFC 8985 7).
#[derive(Debug, Default, Clone)]
pub(super) struct Tlp {
    /// The probe timer.
    pub(super) at: Option<Instant>,
    /// A probe is due now.
    pub(super) pending: bool,
    /// Outstanding probe: (SND.MAX after it, was a retransmission).
    pub(super) end: Option<(SeqNum, bool)>,
}

impl Connection {
    /// Loss detected outside recovery: reduce the window once for this
    /// episode (RFC 6675 5 step 4, RFC 8985 "enter fast recovery"), and
    /// start PRR (RFC 6937 3): "At the beginning of recovery, initialize
    /// the PRR state. This assumes a modern congestion control algorithm,
    /// CongCtrlAlg(), that might set ssthresh to something other than
    /// FlightSize/2: ssthresh = CongCtrlAlg() // Target cwnd after
    /// recovery; prr_delivered = 0; prr_out = 0; RecoverFS =
    /// snd.nxt-snd.una // FlightSize at the start of recovery".
    pub(super) fn enter_recovery(&mut self, now: Instant, ctr: &mut TcpCounters) {
        if self.mtu_probe_lost(ctr) {
            return; // a path MTU probe was lost, not congestion (`mtu.rs`)
        }
        let mss = self.max_payload_base();
        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
        let undo = Undo {
            prior: self.cong.cc.snapshot(),
            retrans_ts: None,
        };
        // An ECN window reduction going on goes on (`ecn.rs`).
        let prr = match self.ecn_take_cwr() {
            Some(w) => w,
            None => {
                self.cong
                    .cc
                    .on_enter_recovery(now, self.reduction_base(flight), mss);
                PrrWindow {
                    prr: Prr::new(flight, self.cong.cc.ssthresh()),
                    // Until an ACK brings sndcnt: nothing but the head's
                    // retransmission (`rtx_head_now`).
                    cwnd: self.pipe(),
                }
            }
        };
        self.recovery = Some(Box::new(Recovery {
            recover: self.snd.max,
            in_loss: false,
            // RFC 5681 3.2 step 3: "The lost segment starting at SND.UNA
            // MUST be retransmitted"; RFC 6675 5 (4.3): "Retransmit the
            // first data segment presumed dropped -- the segment starting
            // with sequence number HighACK + 1". At once, even while pipe
            // > cwnd = ssthresh, as Linux PRR (RFC 6937) sends at least
            // one segment when one was newly lost (tcp_cwnd_reduction);
            // after it, the pipe rules.
            rtx_head_now: true,
            undo,
            prr: Some(prr),
        }));
        self.tlp.at = None;
        self.tlp.pending = false;
        ctr.TCPFastRetrans += 1;
        if self.opt.sack && self.rtx.scoreboard.any_sacked() {
            ctr.TCPSackRecovery += 1;
        } else {
            ctr.TCPRenoRecovery += 1;
        }
    }

    /// RFC 3708 / Eifel (RFC 3522) detection with timestamps, as Linux's
    /// `tcp_packet_delayed`: an ACK that advances SND.UNA while echoing a
    /// TSval older than our first retransmission was caused by an original
    /// transmission, so the retransmissions were spurious. With no
    /// retransmission still outstanding, undo the reduction.
    pub(super) fn try_undo(&mut self, now: Instant, ecr: Option<u32>, ctr: &mut TcpCounters) {
        let (Some(r), Some(ecr)) = (self.recovery.as_deref().copied(), ecr) else {
            return;
        };
        let Some(rts) = r.undo.retrans_ts else {
            return;
        };
        if (ecr.wrapping_sub(rts) as i32) >= 0 || self.rtx.scoreboard.retrans_out() {
            return;
        }
        self.cong.cc.on_undo(now, &r.undo.prior);
        self.rtx.scoreboard.clear_lost();
        if r.in_loss {
            ctr.TCPLossUndo += 1;
        } else {
            ctr.TCPFullUndo += 1;
        }
        self.recovery = None;
        self.rtx.rack_at = None;
    }

    /// The head's immediate retransmission is done (or moot).
    pub(super) fn clear_rtx_head_now(&mut self) {
        if let Some(r) = self.recovery.as_mut() {
            r.rtx_head_now = false;
        }
    }

    /// Run RACK's loss detection; arms the reordering timer and enters
    /// recovery when it marks something lost (then true).
    pub(super) fn rack_detect(&mut self, now: Instant, ctr: &mut TcpCounters) -> bool {
        let srtt = self.rtx.rtt.srtt().unwrap_or_else(|| self.rtx.rtt.rto());
        let reo = self.rtx.rack.reo_wnd(
            self.recovery.is_some(),
            self.rtx.scoreboard.sacked_count(),
            srtt,
        );
        let (marked, at) = self.rtx.rack.detect(&mut self.rtx.scoreboard, now, reo);
        // Linux `tcp_rack_mark_lost`: the timer for the remaining time plus
        // TCP_TIMEOUT_MIN_US.
        self.rtx.rack_at = at.map(|t| t + TIMEOUT_MIN);
        if marked && self.recovery.is_none() {
            self.enter_recovery(now, ctr);
        }
        marked
    }

    /// The window a reduction starts from: cwnd, as Linux has it (the
    /// controllers' `ssthresh` hooks, `tcp_reno_ssthresh` and
    /// `cubictcp_recalc_ssthresh`, take `snd_cwnd`), not the FlightSize:
    /// RFC 9438 4.6 allows it with cwnd validation (RFC 7661), which
    /// `ack.rs` does, so an application-limited sender's cwnd did not
    /// grow past what it used. RFC 5681 3.2's "additional data sent in
    /// limited transmit MUST NOT be included" holds the same way: what
    /// SACKs clocked out beyond cwnd does not count. (A sender that went
    /// quiet for a while and lost its one segment to the timer keeps
    /// beta times the window it had, as Linux does.)
    fn reduction_base(&self, _flight: usize) -> usize {
        self.send_cwnd()
    }

    /// The window the sender obeys: the controller's, or in fast recovery
    /// the one PRR granted.
    pub(super) fn send_cwnd(&self) -> usize {
        match self.recovery.as_ref().and_then(|r| r.prr) {
            Some(w) => w.cwnd,
            // The CWR state's PRR (ECN, `ecn.rs`).
            None => self.cwr().map_or(self.cong.cc.cwnd(), |c| c.prr.cwnd),
        }
    }

    /// RFC 6937 3, "On every ACK during recovery compute: DeliveredData =
    /// change_in(snd.una) + change_in(SACKd); prr_delivered +=
    /// DeliveredData; pipe = (RFC 6675 pipe algorithm)" and sndcnt; the
    /// sender may then send sndcnt bytes. Which reduction bound: RFC 6937
    /// recommends PRR-SSRB; like Linux since 4.2 (and RFC 9937, which
    /// obsoletes RFC 6937), the slow start bound applies only on an ACK
    /// that advances SND.UNA and marks no new loss, the conservative one
    /// otherwise, so that a burst of losses is not answered with bursts
    /// while the losses are still being found. An ACK that delivered
    /// nothing changes nothing (Linux).
    pub(super) fn prr_on_ack(&mut self, delivered: usize, una_advanced: bool, newly_lost: bool) {
        if delivered == 0 {
            return;
        }
        let pipe = self.pipe();
        let mss = self.max_payload_base();
        let Some(w) = self.recovery.as_mut().and_then(|r| r.prr.as_mut()) else {
            return;
        };
        let bound = if una_advanced && !newly_lost {
            ReductionBound::SlowStart
        } else {
            ReductionBound::Conservative
        };
        let (sndcnt, _) = w.prr.on_ack(delivered, pipe, mss, bound);
        w.cwnd = pipe.saturating_add(sndcnt);
    }

    /// RFC 8985 7.2: arm the probe timeout when it can help: SACK is on,
    /// no recovery is going on, no probe is outstanding, data is in flight.
    /// "PTO = 2 * SRTT"; "If FlightSize is equal to one segment ... PTO +=
    /// WCDelAckT"; never later than the RTO.
    pub(super) fn schedule_tlp(&mut self, now: Instant) {
        self.tlp.at = None;
        if !self.opt.sack
            || self.recovery.is_some()
            || self.tlp.end.is_some()
            || self.tlp.pending
            || self.snd.una == self.snd.max
            || !self.can_send_data_state()
        {
            return;
        }
        let Some(srtt) = self.rtx.rtt.srtt() else {
            return;
        };
        // Linux `tcp_schedule_loss_probe`: "Probe timeout is 2*rtt. Add
        // minimum RTO to account for delayed ack when there's one
        // outstanding packet", else TCP_TIMEOUT_MIN_US. (RFC 8985 7.2 has
        // max(PTO, 10 ms) instead of the 2 ms.)
        let one = self.snd.max.wrapping_sub(self.snd.una) as usize <= self.max_payload_base();
        let pto = srtt * 2 + if one { WC_DEL_ACK } else { TIMEOUT_MIN };
        let mut at = now + pto;
        // Linux (`tcp_schedule_loss_probe`): "If the RTO formula yields an
        // earlier time, then use that time" -- the probe takes the
        // retransmission timer's place and re-arms it when sent (a lone
        // FIN or small segment is probed at the RTO, and the RTO proper
        // comes one RTO later, not backed off).
        if let Some(r) = self.rtx.rto_at {
            if at >= r {
                at = r;
                self.rtx.rto_at = None;
            }
        }
        self.tlp.at = Some(at);
    }

    /// RFC 6298 5.4-5.6 on expiry: retransmit the earliest unacknowledged
    /// segment, back off the timer; RFC 5681 3.1 collapse cwnd.
    pub(super) fn on_rto(&mut self, now: Instant, ctr: &mut TcpCounters) {
        if self.snd.una == self.snd.max {
            return;
        }
        self.rtx.retries += 1;
        if self.user_timed_out(now) {
            self.time_out(ctr);
            return;
        }
        let limit = match self.state() {
            State::SynSent => self.cfg.syn_retries,
            State::SynReceived => self.cfg.synack_retries,
            _ => self.cfg.max_retries,
        };
        if self.rtx.retries > limit {
            self.time_out(ctr);
            return;
        }
        ctr.TCPTimeouts += 1;
        // Black-hole detection (`mtu.rs`).
        self.mtu_on_rto(now, ctr);
        // Negative advice (Linux tcp_write_timeout -> dst_negative_advice):
        // the neighbour mapping may be wrong, have it re-validated.
        self.report.advice.suspect = true;
        let flight = self.reduction_base(self.snd.max.wrapping_sub(self.snd.una) as usize);
        // Remember what to restore should the timeout prove spurious
        // (RFC 3708); inside fast recovery, the state from before it.
        let undo = match self.recovery.as_deref() {
            Some(r) => r.undo,
            None => Undo {
                prior: self.cong.cc.snapshot(),
                retrans_ts: None,
            },
        };
        // RFC 5681 3.1: a timeout "for a segment [that] has already been
        // retransmitted by the retransmission timer" holds ssthresh. So
        // does one in the middle of fast recovery, which reduced it for
        // this episode already (Linux `tcp_enter_loss` recomputes it only
        // from Open or Disorder, or once the recovery point is passed),
        // and one inside an ECN reduction (`ecn.rs`).
        let repeated = self.ecn_on_rto()
            || self.rtx.retries > 1
            || self.recovery.as_ref().is_some_and(|r| !r.in_loss);
        if self.recovery.is_none() {
            let sacked = self.rtx.scoreboard.sacked_count();
            self.rtx.rack.on_rto_in_disorder(sacked);
        }
        self.cong
            .cc
            .on_timeout(now, flight, self.max_payload_base(), repeated);
        self.rtx.rtt.backoff();
        self.recovery = Some(Box::new(Recovery {
            recover: self.snd.max,
            in_loss: true,
            rtx_head_now: false,
            undo,
            prr: None,
        }));
        self.rtx.last_recover = Some(self.snd.max);
        self.rtx.dupacks = 0;
        self.tlp.at = None;
        self.tlp.pending = false;
        self.tlp.end = None;
        self.rtx.rack_at = None;
        // Karn: no sample from anything sent before the retransmission.
        self.rtx.rtt_probe = None;
        if self.can_send_data_state() {
            // A SACKed segment at SND.UNA means the receiver reneged
            // (RFC 2018 8): forget the SACK state, as Linux does.
            if self.rtx.scoreboard.iter().next().is_some_and(|s| s.sacked) {
                self.rtx.scoreboard.forget_sacks();
            }
            // RFC 6298 5.4 "Retransmit the earliest segment that has not
            // been acknowledged", then the rest as cwnd opens, skipping
            // what the receiver SACKed (RFC 6675 5.1).
            self.rtx.scoreboard.mark_all_lost();
        } else {
            // SYN or SYN-ACK: send it again.
            self.snd.nxt = self.snd.una;
        }
    }
}
