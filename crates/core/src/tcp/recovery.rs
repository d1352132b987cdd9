//! Loss recovery: entering fast recovery (RFC 6675, RFC 6582), undoing
//! a spurious one (RFC 3708), RACK detection (RFC 8985 6), tail loss probes
//! (RFC 8985 7) and the retransmission timeout (RFC 6298, RFC 5681 3.1).

use ustack_wire::tcp::SeqNum;

use super::conn::Connection;
use super::rack::Rack;
use super::rtt::RttEstimator;
use super::sack::Scoreboard;
use super::{State, TcpCounters};
use crate::time::{Duration, Instant};

/// RFC 8985 7.2 "WCDelAckT": the worst-case delayed-ACK time added to the
/// probe timeout when only one segment is in flight.
const WC_DEL_ACK: Duration = Duration::from_millis(200);

/// Least probe timeout (Linux `TCP_TIMEOUT_MIN`, 2 jiffies).
const MIN_PTO: Duration = Duration::from_millis(10);

/// Retransmission: RTT, the retransmission timer, the scoreboard and loss
/// detection.
#[derive(Debug)]
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
}

/// What to restore if a window reduction turns out spurious (RFC 3708).
#[derive(Debug, Clone, Copy)]
pub(super) struct Undo {
    pub(super) prior_cwnd: usize,
    pub(super) prior_ssthresh: usize,
    /// Our TSval on the first retransmission of the episode (Linux
    /// `retrans_stamp`).
    pub(super) retrans_ts: Option<u32>,
}

/// Tail loss probe (RFC 8985 7).
#[derive(Debug, Default)]
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
    /// episode (RFC 6675 5 step 4, RFC 8985 "enter fast recovery").
    pub(super) fn enter_recovery(&mut self, ctr: &mut TcpCounters) {
        if self.mtu_probe_lost(ctr) {
            return; // a path MTU probe was lost, not congestion (`mtu.rs`)
        }
        let mss = self.max_payload_base();
        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
        let undo = Undo {
            prior_cwnd: self.cong.cc.cwnd(),
            prior_ssthresh: self.cong.cc.ssthresh(),
            retrans_ts: None,
        };
        self.cong.cc.on_enter_recovery(flight, mss);
        self.recovery = Some(Recovery {
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
        });
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
    pub(super) fn try_undo(&mut self, ecr: Option<u32>, ctr: &mut TcpCounters) {
        let (Some(r), Some(ecr)) = (self.recovery, ecr) else {
            return;
        };
        let Some(rts) = r.undo.retrans_ts else {
            return;
        };
        if (ecr.wrapping_sub(rts) as i32) >= 0 || self.rtx.scoreboard.retrans_out() {
            return;
        }
        self.cong
            .cc
            .on_undo(r.undo.prior_cwnd, r.undo.prior_ssthresh);
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
    /// recovery when it marks something lost.
    pub(super) fn rack_detect(&mut self, now: Instant, ctr: &mut TcpCounters) {
        let srtt = self.rtx.rtt.srtt().unwrap_or_else(|| self.rtx.rtt.rto());
        let reo = self.rtx.rack.reo_wnd(
            self.recovery.is_some(),
            self.rtx.scoreboard.sacked_count(),
            srtt,
        );
        let (marked, at) = self.rtx.rack.detect(&mut self.rtx.scoreboard, now, reo);
        self.rtx.rack_at = at;
        if marked && self.recovery.is_none() {
            self.enter_recovery(ctr);
        }
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
        let mut pto = (srtt * 2).max(MIN_PTO);
        if self.snd.max.wrapping_sub(self.snd.una) as usize <= self.max_payload_base() {
            pto += WC_DEL_ACK;
        }
        let at = now + pto;
        if self.rtx.rto_at.is_some_and(|r| at >= r) {
            return;
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
        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
        // Remember what to restore should the timeout prove spurious
        // (RFC 3708); inside fast recovery, the state from before it.
        let undo = match self.recovery {
            Some(r) => r.undo,
            None => Undo {
                prior_cwnd: self.cong.cc.cwnd(),
                prior_ssthresh: self.cong.cc.ssthresh(),
                retrans_ts: None,
            },
        };
        self.cong.cc.on_timeout(flight, self.max_payload_base());
        self.rtx.rtt.backoff();
        self.recovery = Some(Recovery {
            recover: self.snd.max,
            in_loss: true,
            rtx_head_now: false,
            undo,
        });
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
        let _ = now;
    }
}
