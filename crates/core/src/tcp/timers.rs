//! Timers: when the connection next needs `dispatch` ([`Connection::poll_at`],
//! O(1) when nothing is due), running the expired ones (delayed ACK, RTO,
//! RACK, TLP, persist, keep-alive, TIME-WAIT, FIN-WAIT-2), giving up.

use super::conn::{Connection, Phase};
use super::{KeepAlive, State, TcpCounters, TcpError};
use crate::time::Instant;

/// Other timers and the idle clock.
#[derive(Debug, Clone)]
pub(super) struct Timers {
    pub(super) persist_at: Option<Instant>,
    pub(super) persist_backoff: u32,
    /// Persist timer expiry with an open window: send despite SWS
    /// avoidance (RFC 1122 4.2.3.4 (4)).
    pub(super) force_send: bool,
    /// A zero-window or keep-alive probe is due.
    pub(super) probe_pending: bool,
    /// Persist probes in a row that got no ACK.
    pub(super) probes_out: u32,
    pub(super) keepalive: Option<KeepAlive>,
    pub(super) ka_probes: u32,
    pub(super) last_rcv_at: Instant,
    pub(super) last_send_at: Instant,
    /// `emit` refused a segment: try again then.
    pub(super) tx_retry_at: Option<Instant>,
}

impl Connection {
    /// When `dispatch` must next be called; `Instant::ZERO` means now.
    /// Called after every touch of a connection, so its cost does not
    /// depend on how much is in flight: the scoreboard keeps RFC 6675's
    /// pipe and the lost segments' count as they change (`sack.rs`), the
    /// receive queue's SACK blocks are at most 32 ranges.
    pub fn poll_at(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        let retry = self.timers.tx_retry_at.unwrap_or(Instant::ZERO);
        if self.has_immediate_work() {
            min(Some(retry));
        } else if self.has_data_to_send() {
            // Data that pacing holds until its next burst (the head's
            // retransmission on entering recovery is never held).
            let gate = match self.recovery.as_deref() {
                Some(r) if r.rtx_head_now => None,
                _ => self.cong.pacer.gate(),
            };
            min(Some(retry.max(gate.unwrap_or(Instant::ZERO))));
        }
        min(self.next_timer_at());
        t
    }

    /// The earliest of the connection's timers, if one runs.
    pub(super) fn next_timer_at(&self) -> Option<Instant> {
        if matches!(self.state(), State::Closed | State::Listen) {
            return None;
        }
        [
            self.rtx.rto_at,
            self.rtx.rack_at,
            self.tlp.at,
            self.timers.persist_at,
            self.ack.delay_at,
            self.st.deadline(),
            self.keepalive_at(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn has_immediate_work(&self) -> bool {
        if self.rst.reply.is_some() {
            return true;
        }
        if matches!(self.state(), State::Closed | State::Listen) {
            return false;
        }
        self.rst.pending
            || self.ack.now
            || self.timers.probe_pending
            || self.syn_needed()
            || self.tlp.pending
            // An application `send` into a closed window: `dispatch` must
            // run to arm the persist timer.
            || self.persist_needed()
    }

    /// Retransmissions or new data the windows allow now (pacing aside).
    fn has_data_to_send(&self) -> bool {
        if matches!(self.state(), State::Closed | State::Listen) {
            return false;
        }
        self.rtx_due()
            || self
                .next_segment(self.timers.force_send, false, 0, false)
                .is_some()
    }

    /// Unsent data, nothing in flight, no timer running and the window (or
    /// SWS avoidance) holds the data back: the persist timer must be armed.
    /// RFC 9293 3.8.6.1: "The sending TCP must regularly transmit at least
    /// one octet of new data (if available), or retransmit to the receiving
    /// TCP even if the send window is zero, in order to "probe" the window.
    /// This retransmission is essential to guarantee that when either TCP
    /// has a zero window the reopening of the window will be reliably
    /// reported to the other." RFC 1122 4.2.2.17: "A TCP MAY keep its
    /// offered receive window closed indefinitely. As long as the receiving
    /// TCP continues to send acknowledgments in response to the probe
    /// segments, the sending TCP MUST allow the connection to stay open."
    pub(super) fn persist_needed(&self) -> bool {
        self.timers.persist_at.is_none()
            && self.rtx.rto_at.is_none()
            && self.snd.max == self.snd.una
            && self.has_unsent()
            && self.next_segment(false, false, 0, false).is_none()
    }

    fn keepalive_at(&self) -> Option<Instant> {
        let ka = self.timers.keepalive?;
        if !matches!(self.state(), State::Established | State::CloseWait) {
            return None;
        }
        Some(self.timers.last_rcv_at + ka.idle + ka.interval.saturating_mul(self.timers.ka_probes))
    }

    pub(super) fn run_timers(&mut self, now: Instant, ctr: &mut TcpCounters) {
        // The end of TIME-WAIT, or of an orphan's wait in FIN-WAIT-2.
        if self.st.deadline().is_some_and(|t| now >= t) {
            self.set_state(Phase::Closed, Some(ctr));
            return;
        }
        if self.ack.delay_at.is_some_and(|t| now >= t) {
            self.ack.delay_at = None;
            ctr.DelayedACKs += 1;
            self.ack.now = true;
            // Linux: a delayed ACK that found no reply to ride on ends
            // interactive (pingpong) mode.
            self.ack.pingpong = false;
        }
        if self.rtx.rto_at.is_some_and(|t| now >= t) {
            self.rtx.rto_at = None;
            self.on_rto(now, ctr);
            if self.state() == State::Closed {
                return;
            }
        }
        if self.rtx.rack_at.is_some_and(|t| now >= t) {
            // RFC 8985 6.3: "When the reordering timer expires: RACK_detect_loss()".
            self.rtx.rack_at = None;
            if self.can_send_data_state() {
                let entering = self.recovery.is_none();
                if self.rack_detect(now, ctr) && entering {
                    // Linux (`tcp_rack_reo_timeout`): recovery entered
                    // from the timer counts one segment delivered for
                    // PRR (`tcp_cwnd_reduction(sk, 1, newly_lost, 0)`),
                    // which lets the retransmission go.
                    let mss = self.max_payload_base();
                    self.prr_on_ack(mss, false, true);
                }
            }
        }
        if self.tlp.at.is_some_and(|t| now >= t) {
            self.tlp.at = None;
            if self.recovery.is_none() && self.snd.una != self.snd.max {
                self.tlp.pending = true;
            } else if self.snd.una != self.snd.max {
                // The probe stood in for the RTO: the RTO again.
                self.arm_rto(now);
            }
        }
        if self.timers.persist_at.is_some_and(|t| now >= t) {
            self.timers.persist_at = None;
            // Linux `tcp_probe_timer`: TCP_USER_TIMEOUT counts from the
            // first probe (`icsk_probes_tstamp`; Linux keeps it until the
            // window opens, here until an ACK resets the probe count).
            if self.timers.probes_out == 0 {
                self.rtx.stall_since = Some(now);
            } else if self.user_timed_out(now) {
                self.time_out(ctr);
                return;
            }
            self.timers.persist_backoff += 1;
            self.timers.probes_out += 1;
            // Like Linux, give up only after this many probes in a row got
            // no ACK at all (an answered probe resets the count).
            if self.timers.probes_out > self.cfg.max_retries.max(1) {
                self.time_out(ctr);
                return;
            }
            if self.snd.wnd == 0 {
                // Zero-window probe (RFC 9293 3.8.6.1), Linux style: an old
                // sequence number so the receiver answers with an ACK.
                ctr.TCPWinProbe += 1;
                self.timers.probe_pending = true;
            } else {
                // RFC 1122 4.2.3.4 (4): the override timeout.
                self.timers.force_send = true;
            }
        }
        if let (Some(at), Some(ka)) = (self.keepalive_at(), self.timers.keepalive) {
            if now >= at {
                if self.timers.ka_probes >= ka.count {
                    self.app.error = Some(TcpError::TimedOut);
                    ctr.TCPAbortOnTimeout += 1;
                    self.rst.pending = true;
                } else if self.snd.una == self.snd.max && self.snd.queue.buf.is_empty() {
                    ctr.TCPKeepAlive += 1;
                    self.timers.ka_probes += 1;
                    self.timers.probe_pending = true;
                } else {
                    // Data outstanding: retransmissions cover liveness.
                    self.timers.last_rcv_at = now;
                }
            }
        }
    }

    pub(super) fn time_out(&mut self, ctr: &mut TcpCounters) {
        ctr.TCPAbortOnTimeout += 1;
        if matches!(self.state(), State::SynSent | State::SynReceived) {
            ctr.AttemptFails += 1;
        }
        if matches!(self.state(), State::Established | State::CloseWait) {
            ctr.EstabResets += 1;
        }
        let e = match self.app.soft_error {
            Some(TcpError::HostUnreachable) => TcpError::HostUnreachable,
            Some(TcpError::ConnectionRefused) if self.state() == State::SynSent => {
                TcpError::ConnectionRefused
            }
            _ => TcpError::TimedOut,
        };
        self.app.error = Some(e);
        self.set_state(Phase::Closed, Some(ctr));
    }

    pub(super) fn arm_rto(&mut self, now: Instant) {
        if self.rtx.rto_at.is_none() {
            self.rtx.rto_at = Some(self.rto_deadline(now));
        }
    }

    /// When a retransmission timer started now fires: after the RTO, or
    /// at the user timeout if that comes first (Linux
    /// `tcp_clamp_rto_to_user_timeout`).
    pub(super) fn rto_deadline(&self, now: Instant) -> Instant {
        let at = now + self.rtx.rtt.rto();
        match (self.rtx.user_timeout, self.rtx.stall_since) {
            (Some(ut), Some(t0)) => at.min((t0 + ut.get()).max(now)),
            _ => at,
        }
    }

    /// RFC 5482: data has been unacknowledged for the user timeout.
    pub(super) fn user_timed_out(&self, now: Instant) -> bool {
        match (self.rtx.user_timeout, self.rtx.stall_since) {
            (Some(ut), Some(t0)) => now >= t0 + ut.get(),
            _ => false,
        }
    }

    pub(super) fn clear_timers(&mut self) {
        self.rtx.rto_at = None;
        self.timers.persist_at = None;
        self.ack.delay_at = None;
        self.ack.now = false;
        self.rtx.rack_at = None;
        self.tlp.at = None;
        self.tlp.pending = false;
        self.timers.probe_pending = false;
    }

    /// The last time we were told about (timers are set relative to it).
    pub(super) fn now_hint(&self) -> Instant {
        self.timers.last_rcv_at.max(self.timers.last_send_at)
    }
}
