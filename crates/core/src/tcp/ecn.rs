//! Explicit Congestion Notification (RFC 3168), as Linux does it
//! (`tcp_ecn`: 1 requests it on outgoing connections and accepts it on
//! incoming ones, 2, the default, only accepts it).
//!
//! - Setup: an ECN-setup SYN carries ECE and CWR (its retransmissions
//!   neither, RFC 3168 6.1.1.1's fallback, Linux `tcp_ecn_fallback`); the
//!   SYN-ACK that agrees carries ECE alone. A listener agrees to a SYN with
//!   ECE and CWR whose datagram is not ECT (Linux `tcp_ecn_create_request`).
//! - The sender marks its new data segments ECT(0); pure ACKs, window
//!   probes, retransmissions and SYNs go out Not-ECT (`tcp_ecn_send`).
//! - The receiver of a CE-marked data segment sets ECE on every segment it
//!   sends until a data segment with CWR arrives, and ACKs at once for a
//!   while (`__tcp_ecn_check_ce`, `tcp_ecn_accept_cwr`).
//! - The sender of data that gets an ECE reduces its window once per
//!   window of data: it enters the CWR state (`tcp_enter_cwr`): ssthresh
//!   from the congestion controller, cwnd brought down to it by PRR on each
//!   ACK (`tcp_cwnd_reduction`), until SND.UNA passes what was sent when it
//!   started; and it sets CWR on its next new data segment. Fast recovery
//!   and the retransmission timeout set CWR too (their reduction is the
//!   one the receiver's ECE asks for).

use ustack_wire::tcp::{SeqNum, TcpRepr};

use super::conn::Connection;
use super::prr::{Prr, ReductionBound};
use super::recovery::PrrWindow;
use crate::time::Instant;

/// The ECT(0) codepoint (RFC 3168 5), what Linux's senders use.
pub(crate) const ECT0: u8 = 2;
/// The CE codepoint.
pub(crate) const CE: u8 = 3;

/// Linux `tcp_ecn` (`net.ipv4.tcp_ecn`, RFC 3168 mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EcnMode {
    /// 0: never use ECN.
    Off,
    /// 1: request ECN on outgoing connections, accept it on incoming ones.
    On,
    /// 2: accept ECN when an incoming connection requests it, never
    /// request it (Linux's default).
    #[default]
    Passive,
}

/// A connection's ECN flags (Linux `ecn_flags`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Ecn(u8);

impl Ecn {
    /// ECN is on for this connection (`TCP_ECN_OK`); on an active open,
    /// from the ECN-setup SYN until a SYN-ACK that does not agree.
    const OK: u8 = 1;
    /// Set CWR on the next new data segment (`TCP_ECN_QUEUE_CWR`).
    const QUEUE_CWR: u8 = 2;
    /// A CE mark arrived: echo ECE until the peer's CWR
    /// (`TCP_ECN_DEMAND_CWR`).
    const DEMAND_CWR: u8 = 4;
    /// An ECT or CE datagram arrived (`TCP_ECN_SEEN`).
    const SEEN: u8 = 8;

    fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }
    fn set(&mut self, f: u8, on: bool) {
        if on {
            self.0 |= f;
        } else {
            self.0 &= !f;
        }
    }
}

/// The ECN state of a connection that uses ECN (boxed in the connection,
/// absent for one that does not: an idle connection stays small).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct EcnState {
    flags: Ecn,
    /// The CWR state going on, if any.
    cwr: Option<Cwr>,
}

/// The CWR state (Linux `TCP_CA_CWR`): a window reduction for an ECE,
/// without loss recovery.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cwr {
    /// Linux `high_seq`: the state ends once SND.UNA is past it.
    pub(super) high: SeqNum,
    /// PRR towards the new ssthresh, and the window it grants.
    pub(super) prr: PrrWindow,
}

impl Connection {
    fn ecn_flags(&self) -> Ecn {
        self.ecn.as_deref().map_or(Ecn::default(), |e| e.flags)
    }

    fn ecn_has(&self, f: u8) -> bool {
        self.ecn_flags().has(f)
    }

    /// Set or clear a flag; clearing OK forgets everything (the rest
    /// means nothing without it).
    fn ecn_set(&mut self, f: u8, on: bool) {
        if f == Ecn::OK && !on {
            self.ecn = None;
        } else if on {
            self.ecn.get_or_insert_with(Box::default).flags.set(f, true);
        } else if let Some(e) = self.ecn.as_deref_mut() {
            e.flags.set(f, false);
        }
    }

    /// The CWR state going on, if any.
    pub(super) fn cwr(&self) -> Option<&Cwr> {
        self.ecn.as_deref()?.cwr.as_ref()
    }

    pub(super) fn cwr_mut(&mut self) -> Option<&mut Cwr> {
        self.ecn.as_deref_mut()?.cwr.as_mut()
    }

    fn take_cwr(&mut self) -> Option<Cwr> {
        self.ecn.as_deref_mut()?.cwr.take()
    }

    /// An ECT or CE datagram arrived (`TCPI_OPT_ECN_SEEN`).
    pub(super) fn ecn_seen(&self) -> bool {
        self.ecn_has(Ecn::SEEN)
    }

    /// An active open with `tcp_ecn` = `mode`: ECN is requested with 1
    /// (`tcp_ecn_send_syn`).
    pub(super) fn ecn_request(&mut self, mode: EcnMode) {
        self.ecn_set(Ecn::OK, mode == EcnMode::On);
    }

    /// Our SYN (not a SYN-ACK) is about to go out: ECE and CWR on the first
    /// one if ECN is requested; none on a retransmission
    /// (`tcp_ecn_clear_syn`), though ECN stays requested in case the peer
    /// saw the first.
    pub(super) fn ecn_syn_flags(&self, retransmission: bool) -> (bool, bool) {
        let on = self.ecn() && !retransmission;
        (on, on)
    }

    /// The peer's SYN-ACK (or SYN, in a simultaneous open) arrived in
    /// SYN-SENT: ECN stays on if it agrees (`tcp_ecn_rcv_synack`: ECE
    /// without CWR; `tcp_ecn_rcv_syn`: ECE and CWR).
    pub(super) fn ecn_rcv_syn_sent(&mut self, seg: &TcpRepr) {
        let agrees = if seg.ack.is_some() {
            seg.ece && !seg.cwr
        } else {
            seg.ece && seg.cwr
        };
        if !agrees {
            self.ecn_set(Ecn::OK, false);
        }
    }

    /// A listener's SYN (`tcp_ecn_create_request`): an ECN-setup SYN (ECE
    /// and CWR) in a Not-ECT datagram, and `tcp_ecn` (`mode`) not 0.
    pub(super) fn ecn_accept_syn(&mut self, mode: EcnMode, syn: &TcpRepr) {
        let ok = mode != EcnMode::Off && syn.ece && syn.cwr && syn.ip_ecn == 0;
        self.ecn_set(Ecn::OK, ok);
    }

    /// ECE on our SYN-ACK: ECN agreed (`tcp_ecn_make_synack`).
    pub(super) fn ecn_synack_ece(&self) -> bool {
        self.ecn()
    }

    /// ECN is on for this connection.
    pub fn ecn(&self) -> bool {
        self.ecn_has(Ecn::OK)
    }

    /// ECE on a segment we send (not a SYN): a CE mark is waiting for the
    /// peer's CWR.
    pub(super) fn ecn_ece(&self) -> bool {
        self.ecn_has(Ecn::OK) && self.ecn_has(Ecn::DEMAND_CWR)
    }

    /// The IP ECN codepoint and CWR of a segment about to go out at `seq`
    /// with `n` bytes of data: ECT(0) on new data, and CWR on the first
    /// new data segment after a reduction (`tcp_ecn_send`). The caller
    /// reports with [`Connection::ecn_sent`] whether it went out.
    pub(super) fn ecn_data(&self, seq: SeqNum, n: usize) -> (u8, bool) {
        if self.ecn() && n > 0 && !seq.lt(self.snd.max) {
            (ECT0, self.ecn_has(Ecn::QUEUE_CWR))
        } else {
            (0, false)
        }
    }

    /// A segment with CWR went out: the reduction is signalled.
    pub(super) fn ecn_sent(&mut self, cwr: bool) {
        if cwr {
            self.ecn_set(Ecn::QUEUE_CWR, false);
        }
    }

    /// Our window was reduced (fast recovery, a retransmission timeout, a
    /// repaired tail loss): set CWR on the next new data segment
    /// (`tcp_ecn_queue_cwr`).
    pub(super) fn ecn_queue_cwr(&mut self) {
        if self.ecn() {
            self.ecn_set(Ecn::QUEUE_CWR, true);
        }
    }

    /// A data segment arrived in order of processing (before its data is
    /// queued): the peer's CWR ends our ECE (`tcp_ecn_accept_cwr`) and is
    /// acknowledged at once.
    pub(super) fn ecn_accept_cwr(&mut self, seg: &TcpRepr) {
        if self.ecn() && seg.cwr {
            self.ecn_set(Ecn::DEMAND_CWR, false);
            self.ack.now = true;
        }
    }

    /// New data was accepted (in order or not) from a datagram marked
    /// `ip_ecn` (`__tcp_ecn_check_ce`): CE starts the ECE echo and, as
    /// the sender's window may be small, two immediate ACKs; Not-ECT after
    /// ECT was seen gets them too ("Insure that GCN will not continue to
    /// mark packets").
    pub(super) fn ecn_check_ce(&mut self, ip_ecn: u8) {
        if !self.ecn() {
            return;
        }
        match ip_ecn & 3 {
            0 => {
                if self.ecn_seen() {
                    self.quickack(2);
                }
            }
            CE => {
                if !self.ecn_has(Ecn::DEMAND_CWR) {
                    self.quickack(2);
                    self.ecn_set(Ecn::DEMAND_CWR, true);
                }
                self.ecn_set(Ecn::SEEN, true);
            }
            _ => self.ecn_set(Ecn::SEEN, true),
        }
    }

    /// Linux `tcp_enter_quickack_mode(sk, n)`: the next `n` ACKs (about)
    /// go at once, and pingpong mode ends.
    fn quickack(&mut self, n: u32) {
        let per_half = (self.rcv_wnd() / (2 * self.ack.rcv_mss.max(1))) as u32;
        let q = if per_half == 0 { 2 } else { per_half }.min(n);
        self.ack.quick = self.ack.quick.max(q);
        self.ack.pingpong = false;
    }

    /// The ACK `seg` (acknowledging `ack`) echoes congestion: ECE, not on
    /// a SYN, not older than SND.UNA (`tcp_ecn_rcv_ecn_echo`).
    pub(super) fn ecn_echoed(&self, seg: &TcpRepr, ack: SeqNum) -> bool {
        seg.ece && !seg.syn && self.ecn() && !ack.lt(self.snd.una)
    }

    /// SND.UNA moved: the CWR state ends once it is past `high` (cwnd =
    /// ssthresh, `tcp_end_cwnd_reduction`: "CWR is to be held something
    /// *above* high_seq is ACKed for CWR bit to reach receiver"). True if
    /// it goes on.
    pub(super) fn ecn_cwr_exit(&mut self, now: Instant) -> bool {
        if self.cwr().is_some_and(|c| self.snd.una.gt(c.high)) {
            self.take_cwr();
            let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
            let mss = self.max_payload_base();
            self.cong.cc.on_exit_recovery(now, flight, mss);
        }
        self.cwr().is_some()
    }

    /// An ECE found no reduction going on (no loss recovery, no CWR state):
    /// enter the CWR state (`tcp_try_to_open` -> `tcp_enter_cwr`).
    pub(super) fn ecn_enter_cwr(&mut self, now: Instant) {
        if self.recovery.is_some() || self.cwr().is_some() || !self.ecn() {
            return;
        }
        // Linux `tcp_init_cwnd_reduction`: ssthresh from the controller's
        // `ssthresh()`, which works on cwnd; PRR's `prior_cwnd` is cwnd.
        let mss = self.max_payload_base();
        let cwnd = self.cong.cc.cwnd();
        self.cong.cc.on_enter_recovery(now, cwnd, mss);
        let cwr = Cwr {
            high: self.snd.max,
            prr: PrrWindow {
                prr: Prr::new(cwnd, self.cong.cc.ssthresh()),
                // Until this ACK's sndcnt (`ecn_prr_on_ack`).
                cwnd: self.pipe(),
            },
        };
        if let Some(e) = self.ecn.as_deref_mut() {
            e.cwr = Some(cwr);
        }
        self.ecn_queue_cwr();
    }

    /// PRR on an ACK in the CWR state (as `prr_on_ack` in fast recovery;
    /// Linux runs the same `tcp_cwnd_reduction` in both).
    pub(super) fn ecn_prr_on_ack(&mut self, delivered: usize, una_advanced: bool) {
        if delivered == 0 {
            return;
        }
        let pipe = self.pipe();
        let mss = self.max_payload_base();
        let Some(c) = self.cwr_mut() else {
            return;
        };
        let bound = if una_advanced {
            ReductionBound::SlowStart
        } else {
            ReductionBound::Conservative
        };
        let (sndcnt, _) = c.prr.prr.on_ack(delivered, pipe, mss, bound);
        c.prr.cwnd = pipe.saturating_add(sndcnt);
    }

    /// Fast recovery starts: a CWR state going on hands over its reduction
    /// (Linux `tcp_enter_recovery` reduces only outside one), else the
    /// new reduction is signalled with CWR.
    pub(super) fn ecn_take_cwr(&mut self) -> Option<PrrWindow> {
        match self.take_cwr() {
            Some(c) => Some(c.prr),
            None => {
                self.ecn_queue_cwr();
                None
            }
        }
    }

    /// The retransmission timer expired: the CWR state ends (Loss). True if
    /// it was reducing for data still unacknowledged, in which case Linux
    /// (`tcp_enter_loss`) does not reduce ssthresh again. CWR is queued,
    /// even in SYN-SENT (as Linux's `tcp_enter_loss` does for a SYN: the
    /// first data then carries CWR if ECN is agreed), but not for a
    /// SYN-ACK (Linux retransmits that from the request, not the socket).
    pub(super) fn ecn_on_rto(&mut self) -> bool {
        if self.state() != super::State::SynReceived {
            self.ecn_queue_cwr();
        }
        let una = self.snd.una;
        self.take_cwr().is_some_and(|c| c.high.gt(una))
    }
}
