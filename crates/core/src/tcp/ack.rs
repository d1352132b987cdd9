//! The sender's side of an arriving ACK: SACK information, SND.UNA,
//! RTT samples, leaving recovery, the send window update (RFC 9293
//! 3.10.7.4), our FIN acknowledged; congestion window growth and its
//! validation (RFC 5681, RFC 7661).

use ustack_wire::tcp::{SeqNum, TcpRepr};

use super::cc::{AckSample, CongestionControl};
use super::conn::{Connection, Phase};
use super::pacing::Pacer;
use super::send::SendQueue;
use super::shared::ChallengeAckLimit;
use super::{State, TcpCounters};
use crate::time::{Duration, Instant};

/// Send sequence space (RFC 9293 3.3.1) and the send buffer. `max` is the
/// highest sequence number sent; `nxt` rewinds to SND.UNA on timeout.
#[derive(Debug, Clone)]
pub(super) struct Snd {
    pub(super) iss: SeqNum,
    pub(super) una: SeqNum,
    /// Our SYN has been acknowledged (SND.UNA once passed ISS). A flag, not
    /// `una > iss`: sequence comparisons are modulo 2^32, and after
    /// 2^31 bytes SND.UNA compares as *before* ISS again.
    pub(super) syn_acked: bool,
    pub(super) nxt: SeqNum,
    pub(super) max: SeqNum,
    pub(super) wnd: usize,
    pub(super) wl1: SeqNum,
    pub(super) wl2: SeqNum,
    /// The end of the last segment of new data sent shorter than the MSS
    /// (Linux `snd_sml`, for Minshall's variant of Nagle: `send.rs`).
    pub(super) sml: SeqNum,
    pub(super) max_wnd: usize,
    pub(super) queue: SendQueue,
    /// Where Linux's skbs begin (`tcp_sendmsg` fills skbs of `size_goal`
    /// bytes): at the first data byte, and again where a write starts
    /// with everything before it sent (the write queue is empty then, so
    /// the write opens a new skb). Kept as that point's offset from the
    /// first data byte modulo the size goal of the time (a u16: the goal
    /// is at most 64 KB, and the connection's size is budgeted). Linux
    /// 6.10 and later may also move data from the next unsent skb into
    /// the one going out (`tcp_grow_skb`), which is not modelled.
    pub(super) skb_phase: u16,
}

/// Congestion control and how much of cwnd was used.
#[derive(Debug, Clone)]
pub(super) struct Cong {
    pub(super) cc: Box<dyn CongestionControl>,
    /// Was cwnd the limit on sending in the current window of data
    /// (Linux `is_cwnd_limited`, RFC 7661 "cwnd-limited")?
    pub(super) limited: bool,
    /// Most bytes in flight in the current window (Linux `max_packets_out`).
    pub(super) max_flight: usize,
    /// End of the current window for the two above (Linux
    /// `cwnd_usage_seq`); None once SND.UNA has reached it.
    pub(super) usage_seq: Option<SeqNum>,
    /// Pacing (`pacing.rs`, `output.rs`).
    pub(super) pacer: Pacer,
}

/// Our TSval at `t` (RFC 7323 timestamps in milliseconds plus an offset).
fn ts_at(t: Instant, offset: u32) -> u32 {
    (t.total_millis() as u32).wrapping_add(offset)
}

/// The ACK's TSecr predates `xmit` (it echoes an earlier transmission).
fn echo_before(ecr: Option<u32>, xmit: Instant, offset: u32) -> bool {
    ecr.is_some_and(|e| (e.wrapping_sub(ts_at(xmit, offset)) as i32) < 0)
}

impl Connection {
    /// ACK processing for synchronized states; false = drop the segment.
    /// `wl_seq`: the sequence number the window update takes as SEG.SEQ
    /// (`seg.seq`, or for a coalesced segment its last wire segment's).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn process_ack(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        ack: SeqNum,
        wl_seq: SeqNum,
        ctr: &mut TcpCounters,
        limit: &mut ChallengeAckLimit,
    ) -> bool {
        // MSG_MORE held data back only from the transmission its write
        // started (Linux `tcp_push` with TCP_NAGLE_CORK); what an ACK lets
        // go is sent by Nagle's rules.
        self.app.more = false;
        // "If the ACK acks something not yet sent (SEG.ACK > SND.NXT), then
        // send an ACK, drop the segment, and return." RFC 5961 5.2 makes
        // this ACK one of its challenge ACKs (SEG.ACK outside "(SND.UNA -
        // MAX.SND.WND) =< SEG.ACK =< SND.NXT" ... "MUST be discarded and an
        // ACK sent back"), so it is throttled as they are (section 7): a
        // spoofer cannot make us answer every forged segment. (Linux drops
        // such segments without an answer.)
        if ack.gt(self.snd.max) {
            self.challenge_ack(now, ctr, limit);
            return false;
        }
        // RFC 5961 5.2: an ACK older than SND.UNA - MAX.SND.WND is bogus:
        // "send an ACK" (a challenge ACK, throttled as the others).
        if ack.lt(self.snd.una - self.snd.max_wnd.max(1)) {
            self.challenge_ack(now, ctr, limit);
            return false;
        }
        self.timers.probes_out = 0;
        let new_wnd = usize::from(seg.window) << self.opt.snd_wscale;
        let ecr = match (self.opt.ts, seg.timestamp) {
            (true, Some((_, e))) if e != 0 => Some(e),
            _ => None,
        };
        let una_before = self.snd.una;
        // The receiver saw congestion (RFC 3168 6.1.2, `ecn.rs`).
        let ece = self.ecn_echoed(seg, ack);
        let off = self.opt.ts_offset;
        // RFC 6937 "DeliveredData = change_in(snd.una) + change_in(SACKd)":
        // the SACKed bytes and duplicate ACKs before this ACK.
        let sacked_before = self.rtx.scoreboard.sacked_bytes();
        let dupacks_before = self.rtx.dupacks;
        // Reordering (Linux `tcp_sacktag_one`, `tcp_clean_rtx_queue`): a
        // never-retransmitted segment delivered below the forward-most
        // SACKed sequence from before this ACK arrived late.
        let prior_fack = self.rtx.scoreboard.highest_sack().unwrap_or(self.snd.una);
        let note_reord = |reord: &mut Option<SeqNum>, s: &super::sack::Seg| {
            if !s.rtx && s.start.lt(prior_fack) && reord.is_none_or(|r| s.start.lt(r)) {
                *reord = Some(s.start);
            }
        };
        // The RTT of the most recently sent never-retransmitted segment
        // this ACK delivers (HyStart's per-ACK sample, Linux `rtt_us`).
        let mut ack_rtt: Option<Duration> = None;
        // Segments this ACK delivers (`tcpi_delivered`).
        let mut delivered_segs = 0u32;
        let dmss = self.max_payload_base();
        // The delivery-rate sample this ACK gives (`rate.rs`).
        let mut rs = super::rate::RateSample::default();
        let conn_first_tx = self.stats.first_tx;
        let mut sample = |s: &super::sack::Seg| {
            delivered_segs = delivered_segs.wrapping_add(super::conn::pcount(s.len(), dmss));
            rs.delivered(s, conn_first_tx);
            if !s.rtx {
                let r = now.saturating_duration_since(s.xmit);
                ack_rtt = Some(ack_rtt.map_or(r, |m: Duration| m.min(r)));
            }
        };
        // SACK information (RFC 2018) before the cumulative ACK moves.
        let mut dsack = false;
        if self.opt.sack {
            let blocks = seg.sack_ranges;
            let second = blocks.get(1).copied().flatten();
            let mss = self.max_payload_base();
            let rack = &mut self.rtx.rack;
            let mut sorted = blocks;
            if let Some(Some((l, r))) = sorted.first().copied() {
                // RFC 2883 4: "If the first SACK block ... is covered by
                // the cumulative acknowledgement field ... or if the
                // first block is covered by the second, it is a D-SACK".
                if r.le(ack) || second.is_some_and(|(l2, r2)| l.ge(l2) && r.le(r2)) {
                    dsack = true;
                    sorted[0] = None;
                }
            }
            // In sequence order, as Linux (`tcp_sacktag_write_queue`)
            // walks them: RACK keeps the RTT of the last segment it is
            // told about.
            let una = self.snd.una;
            sorted.sort_by_key(|b| b.map(|(l, _)| l.wrapping_sub(una)));
            let mut reord = None;
            for &(l, r) in sorted.iter().flatten() {
                self.rtx.scoreboard.sack_whole(l, r, mss, &mut |s| {
                    rack.on_delivered(s, now, echo_before(ecr, s.xmit, off));
                    sample(s);
                    note_reord(&mut reord, s);
                });
            }
            if let Some(low) = reord {
                let fack = self.rtx.scoreboard.highest_sack().unwrap_or(self.snd.una);
                let mss = self.max_payload_base();
                self.rtx.rack.check_reordering(low, fack, mss);
            }
        }
        if dsack {
            ctr.TCPDSACKRecv += 1;
            self.rtx.rack.on_dsack(self.snd.una, self.snd.max);
        }
        let mut newly_lost = false;
        let mut ended_fast_recovery = false;
        // In the CWR state of an ECN echo (`ecn.rs`) at this ACK.
        let mut no_growth_cwr = self.cwr().is_some();
        // Linux's `seq_rtt_us` (`tcp_clean_rtx_queue`): the send time of
        // the oldest segment this ACK newly acknowledges cumulatively,
        // void if it acknowledges a retransmission (Karn).
        let mut first_ackt: Option<Instant> = None;
        let mut rtx_acked = false;
        if ack.gt(self.snd.una) {
            // Forward progress confirms the path (Linux tcp_ack -> dst_confirm).
            self.report.advice.confirm = true;
            self.snd.queue.ack_to(ack);
            // `tcpi_bytes_acked`: how far SND.UNA moves; Linux's passive
            // child starts past its SYN-ACK.
            let mut moved = u64::from(ack.wrapping_sub(self.snd.una));
            if !self.snd.syn_acked && ack.gt(self.snd.iss) {
                // The first advance of SND.UNA (within 2^31 of ISS).
                self.snd.syn_acked = true;
                // Our SYN (or SYN-ACK) is delivered (Linux counts the
                // SYN-ACK's in `tcp_rcv_state_process`).
                self.stats.delivered += 1;
                if self.passive && self.snd.una == self.snd.iss {
                    moved -= 1;
                }
            }
            self.stats.bytes_acked += moved;
            self.snd.una = ack;
            // SND.UNA moved: the user timeout restarts (if data remains).
            self.rtx.stall_since = (ack != self.snd.max).then_some(now);
            if self.snd.nxt.lt(ack) {
                self.snd.nxt = ack;
            }
            {
                let mss = self.max_payload_base();
                let rack = &mut self.rtx.rack;
                let mut reord = None;
                self.rtx.scoreboard.ack(ack, &mut |s| {
                    rack.on_delivered(s, now, echo_before(ecr, s.xmit, off));
                    sample(s);
                    note_reord(&mut reord, s);
                    if s.rtx {
                        rtx_acked = true;
                    } else if first_ackt.is_none() {
                        first_ackt = Some(s.xmit);
                    }
                });
                rack.on_ack(ack);
                if let Some(low) = reord {
                    let fack = self.rtx.scoreboard.highest_sack().unwrap_or(ack);
                    rack.check_reordering(low, fack, mss);
                }
            }
            // RTT measurement, in Linux's order (`tcp_ack_update_rtt`): on
            // every ACK, from the send time of the oldest segment it newly
            // acknowledges, in microseconds, unless a retransmitted one is
            // among them (Karn); else from TSecr (RFC 7323 4.1), which
            // counts whole milliseconds (a sub-millisecond path would read
            // as 0 or 1 ms); the one timed segment as the last resort.
            let mut sampled = false;
            if let (Some(t), false) = (first_ackt, rtx_acked) {
                let d = now.saturating_duration_since(t);
                self.rtx.rtt.sample(d);
                self.rtx.rack.on_rtt_sample(d);
                sampled = true;
            }
            if let (false, Some(ecr)) = (sampled, ecr) {
                let ms = self.ts_now(now).wrapping_sub(ecr);
                if ms < 60_000 {
                    let d = Duration::from_millis(u64::from(ms));
                    self.rtx.rtt.sample(d);
                    self.rtx.rack.on_rtt_sample(d);
                    sampled = true;
                }
            }
            if let Some((seq, t)) = self.rtx.rtt_probe {
                if ack.gt(seq) {
                    if !sampled {
                        let d = now.saturating_duration_since(t);
                        self.rtx.rtt.sample(d);
                        self.rtx.rack.on_rtt_sample(d);
                    }
                    self.rtx.rtt_probe = None;
                }
            }
            self.rtx.retries = 0;
            self.rtx.rtt.reset_backoff();
            self.timers.persist_backoff = 0;
            let mss = self.max_payload_base();
            self.try_undo(now, ecr, ctr);
            // ECN (`ecn.rs`): the CWR state may end here; while in it the
            // window does not grow (below).
            no_growth_cwr = self.ecn_cwr_exit(now);
            match self.recovery.as_deref().copied() {
                Some(r) if ack.ge(r.recover) => {
                    // Full acknowledgment: leave recovery.
                    if !r.in_loss {
                        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
                        self.cong.cc.on_exit_recovery(now, flight, mss);
                        ended_fast_recovery = true;
                    }
                    self.recovery = None;
                    self.rtx.last_recover = Some(r.recover);
                }
                // After an RTO the window slow-starts again (RFC 5681 3.1)
                // while the lost segments go out: below.
                Some(r) if !r.in_loss && !self.opt.sack => {
                    // RFC 6582 3.2 (5) partial ACK: "retransmit the first
                    // unacknowledged segment".
                    self.rtx.scoreboard.mark_head_lost();
                    newly_lost = true;
                    if let Some(r) = self.recovery.as_mut() {
                        r.rtx_head_now = true;
                    }
                }
                Some(_) | None => {}
            }
            if self.cong.usage_seq.is_some_and(|s| self.snd.una.ge(s)) {
                self.cong.usage_seq = None;
            }
            // RFC 6582 3.2 (2): fast retransmit is allowed again once "the
            // cumulative acknowledgment field covers more than recover".
            // Once SND.UNA is past it, every later ACK is too: forget it,
            // or the modulo-2^32 comparison flips after 2^31 more bytes
            // and disables fast retransmit until an RTO.
            if self.rtx.last_recover.is_some_and(|r| self.snd.una.gt(r)) {
                self.rtx.last_recover = None;
            }
            self.rtx.dupacks = 0;
            // RFC 6298 5.2/5.3: stop the timer when all is acked, else restart.
            self.rtx.rto_at = if self.snd.una == self.snd.max {
                None
            } else {
                Some(now + self.rtx.rtt.rto())
            };
        } else if ack == self.snd.una
            && seg.payload.is_empty()
            && !seg.syn
            && !seg.fin
            && new_wnd == self.snd.wnd
            && self.snd.max != self.snd.una
        {
            // RFC 5681 2: a duplicate ACK.
            self.rtx.dupacks += 1;
            // Without SACK, RFC 5681 3.2 / RFC 6582: the third duplicate
            // ACK starts fast retransmit, if "the cumulative acknowledgment
            // field covers more than recover". With SACK, RACK decides.
            if !self.opt.sack
                && self.recovery.is_none()
                && self.rtx.dupacks == 3
                && self.rtx.last_recover.is_none_or(|r| ack.gt(r))
            {
                self.rtx.scoreboard.mark_head_lost();
                newly_lost = true;
                self.enter_recovery(now, ctr);
            }
        }
        // RFC 8985 7.4: was the tail loss probe repairing a loss?
        if let Some((end, was_rtx)) = self.tlp.end {
            if ack.ge(end) {
                if was_rtx && !dsack && ack.gt(una_before) {
                    // 7.4.2: "the TLP episode ... repaired a loss": the
                    // congestion controller must react.
                    ctr.TCPLossProbeRecovery += 1;
                    // Linux `tcp_process_tlp_ack`: a window reduction,
                    // signalled with CWR.
                    self.ecn_queue_cwr();
                    if self.recovery.is_none() {
                        let mss = self.max_payload_base();
                        let cwnd = self.cong.cc.cwnd();
                        self.cong.cc.on_enter_recovery(now, cwnd, mss);
                    }
                }
                self.tlp.end = None;
            } else if was_rtx && dsack {
                // 7.4.1: the original and the probe both arrived.
                self.tlp.end = None;
            }
        }
        // RFC 8985 6.2 step 5: time-based loss detection.
        if self.can_send_data_state() && !self.rtx.scoreboard.is_empty() {
            newly_lost |= self.rack_detect(now, ctr);
        } else {
            self.rtx.rack_at = None;
        }
        // No loss found: an ECE starts the CWR state (`ecn.rs`).
        if ece {
            self.ecn_enter_cwr(now);
        }
        // Congestion window growth, after loss detection as Linux does it
        // (`tcp_cong_control` after `tcp_fastretrans_alert`): not in fast
        // recovery (PRR rules there, also when this ACK started it) nor in
        // the CWR state of an ECN echo (`ecn.rs`: while in it, or about to
        // enter it, the window does not grow), by the data this ACK
        // delivered (cumulatively acknowledged and not SACKed before, or
        // newly SACKed: `acked_sacked`; without SACK, less what duplicate
        // ACKs already counted, `tcp_newly_delivered`), when it advanced
        // SND.UNA -- or, once reordering beyond DupThresh was seen, also
        // when it only SACKed (`tcp_may_raise_cwnd`). The ACK that ends
        // fast recovery ends the reduction (`on_exit_recovery`), then goes
        // to the controller marked as such: Linux's CUBIC counts it (the
        // state is Open again when `tcp_cong_control` runs; it starts the
        // next epoch), NewReno (RFC 6582's exit) and RFC 9438's CUBIC do
        // not.
        self.stats.delivered = self.stats.delivered.wrapping_add(delivered_segs);
        self.rate_gen(now, delivered_segs, rs);
        if !ack.lt(una_before)
            && !no_growth_cwr
            && !ece
            && self.recovery.as_ref().is_none_or(|r| r.in_loss)
        {
            let advanced = self.snd.una.wrapping_sub(una_before) as usize;
            let mss = self.max_payload_base();
            let delivered = if self.opt.sack {
                (advanced + self.rtx.scoreboard.sacked_bytes()).saturating_sub(sacked_before)
            } else {
                advanced
                    .saturating_sub(dupacks_before as usize * mss)
                    .max(mss.min(advanced))
            };
            let may_raise = advanced > 0
                || (self.rtx.rack.reordering > super::rack::DUP_THRESH as u32 && delivered > 0);
            if may_raise && delivered > 0 {
                self.grow_cwnd(now, delivered, ack_rtt, ended_fast_recovery);
            }
        }
        // RFC 6937: what fast recovery (or the CWR state, `ecn.rs`) may
        // send in answer to this ACK. Not on one below SND.UNA
        // (reordered): Linux (`tcp_ack`'s "old_ack") takes its SACK
        // information and marks losses, but leaves cwnd as the last
        // in-order ACK set it, so what it newly SACKed makes room under
        // that window.
        let in_cwr = self.cwr().is_some();
        if (in_cwr || self.recovery.as_ref().is_some_and(|r| r.prr.is_some()))
            && !ack.lt(una_before)
        {
            let advanced = self.snd.una.wrapping_sub(una_before) as usize;
            let delivered = if self.opt.sack {
                // "DeliveredData = change_in(snd.una) + change_in(SACKd)"
                (advanced + self.rtx.scoreboard.sacked_bytes()).saturating_sub(sacked_before)
            } else if advanced == 0 {
                // "In recovery without SACK, DeliveredData is estimated to
                // be 1 SMSS on duplicate acknowledgement, and on a
                // subsequent partial or full ACK, DeliveredData is
                // estimated to be the change in snd.una, minus 1 SMSS for
                // each preceding duplicate ACK."
                usize::from(self.rtx.dupacks > dupacks_before) * self.max_payload_base()
            } else {
                advanced.saturating_sub(dupacks_before as usize * self.max_payload_base())
            };
            if in_cwr {
                self.ecn_prr_on_ack(delivered, advanced > 0);
            } else {
                self.prr_on_ack(delivered, advanced > 0, newly_lost);
            }
        }
        if ack.gt(una_before) {
            // 7.2: "start or restart a loss probe PTO timer ... upon
            // receiving an ACK that cumulatively acknowledges new data".
            self.schedule_tlp(now);
        }
        // Window update: "If SND.WL1 < SEG.SEQ or (SND.WL1 = SEG.SEQ and
        // SND.WL2 =< SEG.ACK), set SND.WND <- SEG.WND, set SND.WL1 <-
        // SEG.SEQ, and set SND.WL2 <- SEG.ACK."
        // Like Linux (tcp_may_update_window), a segment with the same
        // SEG.SEQ and SEG.ACK as the last update may only open the window:
        // otherwise a reordered, stale "win 0" ACK overrides the newer
        // window update and the sender waits for the persist timer.
        if self.snd.wl1.lt(wl_seq)
            || (self.snd.wl1 == wl_seq
                && (self.snd.wl2.lt(ack) || (self.snd.wl2 == ack && new_wnd >= self.snd.wnd)))
        {
            self.snd.wnd = new_wnd;
            self.snd.wl1 = wl_seq;
            self.snd.wl2 = ack;
            self.snd.max_wnd = self.snd.max_wnd.max(new_wnd);
            if new_wnd > 0 {
                self.timers.persist_at = None;
            }
        }
        // State transitions on our FIN being acknowledged.
        if self.fin_acked() {
            match self.state() {
                // "In addition to the processing for the ESTABLISHED state, if
                // the FIN segment is now acknowledged, then enter FIN-WAIT-2".
                State::FinWait1 => {
                    let orphan_until = self
                        .app
                        .closed
                        .then(|| now + self.cfg.fin_wait2_timeout.get());
                    self.set_state(Phase::FinWait2 { orphan_until }, Some(ctr));
                }
                // "if the ACK acknowledges our FIN, then enter the TIME-WAIT state"
                State::Closing => self.set_state(self.time_wait(), Some(ctr)),
                // "If our FIN is now acknowledged, delete the TCB, enter the
                // CLOSED state, and return."
                State::LastAck => {
                    self.set_state(Phase::Closed, Some(ctr));
                    return false;
                }
                _ => {}
            }
        }
        true
    }

    /// RFC 6675 "pipe": bytes believed in the network. Without SACK,
    /// each duplicate ACK stands for a segment that left it (so new data
    /// may go out, RFC 3042 limited transmit).
    pub(super) fn pipe(&self) -> usize {
        let p = self.rtx.scoreboard.pipe();
        if self.opt.sack {
            p
        } else {
            p.saturating_sub(self.rtx.dupacks as usize * self.max_payload_base())
        }
    }

    pub(super) fn fin_acked(&self) -> bool {
        self.snd.queue.fin_queued && self.snd.una.gt(self.snd.queue.fin_seq())
    }

    /// RFC 7661 4.1 / RFC 5681 3.1: "the congestion window ... can only
    /// be increased when the sender is cwnd-limited"; RFC 7661 3: a sender
    /// is cwnd-limited when "FlightSize >= cwnd" (here: less than a full
    /// segment of room). Like Linux (`tcp_is_cwnd_limited`), in slow start
    /// cwnd may also grow up to twice the most that was in flight in the
    /// last window, so it keeps ahead of an application that ramps up.
    /// Without this an application-limited sender grew cwnd without bound.
    fn grow_cwnd(
        &mut self,
        now: Instant,
        acked: usize,
        rtt: Option<Duration>,
        ends_recovery: bool,
    ) {
        let cwnd = self.cong.cc.cwnd();
        let limited = self.cong.limited
            || (cwnd < self.cong.cc.ssthresh() && cwnd < self.cong.max_flight.saturating_mul(2));
        let sample = AckSample {
            now,
            acked,
            mss: self.max_payload_base(),
            una: self.snd.una,
            snd_nxt: self.snd.max,
            rtt,
            srtt: self.rtx.rtt.srtt(),
            cwnd_limited: limited,
            ends_recovery,
        };
        self.cong.cc.on_ack(&sample);
        self.expand_sndbuf();
    }

    /// Send-buffer autotuning (Linux `tcp_sndbuf_expand`): room for twice
    /// the congestion window, so that the application can keep a window
    /// in flight and the next one queued; it only grows, up to the
    /// configured ceiling. Storage is allocated only as data is queued.
    fn expand_sndbuf(&mut self) {
        let ring = &mut self.snd.queue.buf;
        let max = self.cfg.snd_buf_max;
        if ring.capacity() < max {
            let want = self.cong.cc.cwnd().saturating_mul(2).min(max);
            ring.grow_capacity(want);
        }
    }

    /// After a transmission attempt: record whether cwnd was the limit and
    /// the most in flight, per window of data (Linux `tcp_cwnd_validate`).
    /// `paced`: pacing held back data that cwnd allowed. That sender is
    /// limited by cwnd too (the pacing rate is cwnd / SRTT): only the
    /// application's own pauses must keep cwnd from growing.
    pub(super) fn cwnd_validate(&mut self, paced: bool) {
        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
        let limited =
            paced || self.send_cwnd().saturating_sub(self.pipe()) < self.max_payload_base();
        if self.cong.usage_seq.is_none()
            || limited
            || (!self.cong.limited && flight > self.cong.max_flight)
        {
            self.cong.limited = limited;
            self.cong.max_flight = flight;
            self.cong.usage_seq = Some(self.snd.max);
        }
    }
}
