//! Segment arrival (RFC 9293 3.10.7): the acceptability test, PAWS
//! (RFC 7323), RST and SYN checks with RFC 5961's challenge ACKs, SYN-SENT,
//! segment text and FIN; the receive window; ICMP errors for the
//! connection.

use ustack_wire::tcp::{SeqNum, TcpRepr};

use super::conn::{Connection, Phase};
use super::recv::RecvQueue;
use super::shared::ChallengeAckLimit;
use super::{State, TcpCounters, TcpError, TcpShared};
use crate::time::{Duration, Instant};

/// RFC 7323 5.5: TS.Recent is invalid after 24 days of idleness.
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// Least interval between ACKs answering unacceptable segments without
/// data (Linux `tcp_invalid_ratelimit`).
const OOW_ACK_INTERVAL: Duration = Duration::from_millis(500);

/// ICMP errors relevant to a connection (RFC 1122 4.2.3.9, RFC 5927).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpUnreachable {
    NetUnreachable,
    HostUnreachable,
    ProtoUnreachable,
    PortUnreachable,
    /// Fragmentation needed and DF set; the next-hop MTU (0 if unknown).
    FragRequired {
        mtu: u16,
    },
    AdminProhibited,
    Other,
}

/// Receive sequence space and the receive buffer.
#[derive(Debug, Clone)]
pub(super) struct Rcv {
    pub(super) nxt: SeqNum,
    /// Right edge of the window we advertised.
    pub(super) adv: SeqNum,
    pub(super) queue: RecvQueue,
    /// The peer's FIN, received ahead of missing data.
    pub(super) fin: Option<SeqNum>,
    pub(super) fin_received: bool,
    /// Pending urgent data (`urgent.rs`).
    pub(super) urg: Option<super::urgent::Urgent>,
    /// `SO_OOBINLINE`: the out-of-band octet stays in the stream.
    pub(super) urg_inline: bool,
}

/// ACK generation.
#[derive(Debug, Clone)]
pub(super) struct AckState {
    pub(super) now: bool,
    pub(super) delay_at: Option<Instant>,
    pub(super) unacked: usize,
    pub(super) last_data_at: Option<Instant>,
    /// RCV.NXT in our last ACK ("Last.ACK.sent", RFC 7323 4.3).
    pub(super) last_sent: SeqNum,
    /// RFC 2883 D-SACK block for our next ACK.
    pub(super) dsack: Option<(SeqNum, SeqNum)>,
    /// The peer's full segment size, as far as seen (Linux `rcv_mss`).
    pub(super) rcv_mss: usize,
    /// Last ACK sent in answer to an unacceptable segment without data.
    pub(super) last_oow_at: Option<Instant>,
    /// Last challenge ACK sent (RFC 5961).
    pub(super) last_challenge_at: Option<Instant>,
    /// Quick-ACK budget (Linux `icsk_ack.quick`): ACKs still sent at once,
    /// granted at the first data and after an idle period.
    pub(super) quick: u32,
    /// Interactive (Linux pingpong mode): we answered data within the
    /// delayed-ACK time, so ACKs wait to ride on our replies.
    pub(super) pingpong: bool,
    /// Segments shorter than the peer's full size arrived since our last
    /// ACK: 1 one, 2 more (Linux `ICSK_ACK_PUSHED`, `ICSK_ACK_PUSHED2`).
    /// A read that empties the receive buffer then sends the delayed ACK
    /// at once (`tcp_cleanup_rbuf`).
    pub(super) pushed: u8,
}

/// Linux `TCP_MAX_QUICKACKS`.
const MAX_QUICKACKS: usize = 16;

impl Connection {
    /// Process one segment addressed to this connection. `shared`: what
    /// the connections of one table share (the stack-wide challenge ACK
    /// budget here).
    pub fn process(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        ctr: &mut TcpCounters,
        shared: &mut TcpShared,
    ) {
        self.process_gso(now, seg, seg.payload.len(), ctr, shared);
    }

    /// [`process`](Self::process) for a segment that stands for several
    /// on the wire, each of `gso_size` payload bytes (the last one may be
    /// shorter): a GSO super-frame the link handed over whole, or
    /// consecutive segments coalesced on receive (GRO). Processed as one
    /// segment, as Linux processes a GRO'd skb, except that the peer's
    /// segment size (Linux `rcv_mss`, which decides what "full-sized" means
    /// for RFC 5681's ACK of every second segment) is learned from
    /// `gso_size`, not from the whole payload: Linux's
    /// `tcp_measure_rcv_mss` reads `gso_size` the same way. The delayed-ACK
    /// rule counts bytes, so a super-segment of two or more full segments
    /// is acknowledged at once, like the last two of its wire segments.
    pub fn process_gso(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        gso_size: usize,
        ctr: &mut TcpCounters,
        shared: &mut TcpShared,
    ) {
        self.sync_estab(ctr);
        self.count_in(seg, gso_size);
        self.process_inner(now, seg, gso_size, ctr, &mut shared.challenge);
        self.mtu_probe_acked(ctr);
        self.sync_estab(ctr);
    }

    /// `tcpi_segs_in`, `tcpi_data_segs_in` (Linux `tcp_segs_in`): every
    /// segment that reaches the connection, a super-segment as the
    /// segments it stands for; but not a passive open's repeated SYNs,
    /// which Linux's request socket takes.
    fn count_in(&mut self, seg: &TcpRepr, gso_size: usize) {
        if matches!(self.state(), State::Closed | State::Listen)
            || (self.passive && seg.syn && self.state() == State::SynReceived)
        {
            return;
        }
        let n = seg.payload.len();
        let segs = if n > gso_size {
            super::conn::pcount(n, gso_size)
        } else {
            1
        };
        self.stats.segs_in = self.stats.segs_in.wrapping_add(segs);
        if n > 0 {
            self.stats.data_segs_in = self.stats.data_segs_in.wrapping_add(segs);
        }
    }

    fn process_inner(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        gso_size: usize,
        ctr: &mut TcpCounters,
        limit: &mut ChallengeAckLimit,
    ) {
        match self.state() {
            State::Closed | State::Listen => return,
            State::SynSent => {
                self.timers.last_rcv_at = now;
                self.process_syn_sent(now, seg, ctr);
                return;
            }
            _ => {}
        }
        if self.rst.pending {
            return;
        }
        self.timers.last_rcv_at = self.timers.last_rcv_at.max(now);
        self.timers.ka_probes = 0;

        // Simultaneous open / lost SYN-ACK (RFC 9293 3.10.7.4 SYN-RECEIVED):
        // the peer's SYN again, or its SYN-ACK.
        let mut seg = *seg;
        let irs = match self.st {
            Phase::SynReceived { irs } => Some(irs),
            _ => None,
        };
        if irs == Some(seg.seq) && seg.syn && !seg.rst {
            if seg.ack.is_none() {
                // Our SYN-ACK was lost: send it again.
                self.snd.nxt = self.snd.iss;
                return;
            }
            seg.syn = false;
            seg.seq += 1u32;
            // The SYN-ACK of a simultaneous open repeats the peer's SYN:
            // acknowledge it (as Linux does), which also completes the
            // peer's side of the handshake.
            self.ack.now = true;
        }

        // RFC 7323 5.3 PAWS: "If there is a Timestamps option in the
        // arriving segment, SEG.TSval < TS.Recent, TS.Recent is valid, and
        // if the RST bit is not set, then treat the arriving segment as not
        // acceptable: Send an acknowledgment in reply ... and drop".
        if self.opt.ts && !seg.rst {
            if let Some((tsval, _)) = seg.timestamp {
                let valid = now.saturating_duration_since(self.opt.ts_recent_at) < PAWS_IDLE;
                if valid
                    && (tsval.wrapping_sub(self.opt.ts_recent) as i32) < 0
                    && !self.disordered_ack(&seg, tsval)
                {
                    ctr.PAWSEstab += 1;
                    self.oow_ack(now, seg.seq_len());
                    return;
                }
            }
        }

        // First: check sequence number (RFC 9293 3.10.7.4).
        let seg_len = seg.seq_len();
        let wnd = self.rcv_wnd();
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seg.seq == self.rcv.nxt,
            // RFC 9293: "RCV.NXT =< SEG.SEQ < RCV.NXT+RCV.WND". Like Linux
            // (tcp_sequence), a segment without data exactly at the right
            // edge is accepted too: it is what a peer that filled our
            // window sends as its ACK, and refusing it makes two such
            // peers answer each other's ACKs with ACKs forever.
            (0, _) => {
                seg.seq.in_range(self.rcv.nxt, self.rcv.nxt + wnd) || seg.seq == self.rcv.nxt + wnd
            }
            (_, 0) => false,
            (_, _) => {
                seg.seq.in_range(self.rcv.nxt, self.rcv.nxt + wnd)
                    || (seg.seq + (seg_len - 1)).in_range(self.rcv.nxt, self.rcv.nxt + wnd)
            }
        };
        let mut ack_only = false;
        if !acceptable {
            if seg.rst {
                return;
            }
            // "If the RCV.WND is zero, no segments will be acceptable, but
            // special allowance should be made to accept valid ACKs, URGs,
            // and RSTs."
            if wnd == 0 && seg.seq == self.rcv.nxt {
                ack_only = true;
            } else {
                // A duplicate of data we have: report it (RFC 2883 D-SACK)
                // so the sender can tell its retransmission was spurious.
                let end = seg.seq + seg.payload.len();
                if self.opt.sack && !seg.payload.is_empty() && end.le(self.rcv.nxt) {
                    self.ack.dsack = Some((seg.seq, end));
                    ctr.TCPDSACKOldSent += 1;
                }
                // "If an incoming segment is not acceptable, an
                // acknowledgment should be sent in reply".
                self.oow_ack(now, seg_len);
                if self.state() == State::TimeWait && seg.fin {
                    self.restart_time_wait(now);
                }
                return;
            }
        }

        // Second: check the RST bit (RFC 5961 3.2): "If the RST bit is set
        // and the sequence number exactly matches the next expected sequence
        // number (RCV.NXT), then TCP MUST reset the connection ... [else if
        // within the window] TCP MUST send an ACK (challenge ACK)".
        if seg.rst {
            if seg.seq == self.rcv.nxt {
                self.on_reset(ctr);
            } else {
                self.challenge_ack(now, ctr, limit);
            }
            return;
        }

        // Fourth: check the SYN bit (RFC 5961 4.2): "the TCP MUST send an
        // ACK (challenge ACK) to the remote peer" and drop the segment.
        if seg.syn {
            self.challenge_ack(now, ctr, limit);
            return;
        }

        // Fifth: check the ACK field. "if the ACK bit is off, drop the
        // segment and return".
        let Some(ack) = seg.ack else {
            return;
        };
        if self.state() == State::SynReceived {
            // "If SND.UNA < SEG.ACK =< SND.NXT, then enter ESTABLISHED state
            // ... If the segment acknowledgment is not acceptable, form a
            // reset segment <SEQ=SEG.ACK><CTL=RST> and send it."
            if ack.gt(self.snd.una) && ack.le(self.snd.max) {
                self.established(ctr);
                self.snd.wnd = usize::from(seg.window) << self.opt.snd_wscale;
                // Linux (`tcp_create_openreq_child`): the largest window
                // starts from this ACK's, not the SYN's unscaled one.
                self.snd.max_wnd = self.snd.wnd;
                self.snd.wl1 = seg.seq;
                self.snd.wl2 = ack;
            } else {
                self.rst.reply = Some((ack, None));
                return;
            }
        }
        // The SEG.SEQ of the window update: for a segment standing for
        // several, that of the last one, where processing them one by one
        // would leave SND.WL1 (they all carry the same ACK and window).
        // Linux takes the GRO'd skb's first sequence number instead, which
        // lets a reordered older segment update the window afterwards.
        let wl_seq = match seg.payload.len() {
            n if gso_size > 0 && n > gso_size => seg.seq + (n - 1) / gso_size * gso_size,
            _ => seg.seq,
        };
        if !self.process_ack(now, &seg, ack, wl_seq, ctr, limit) {
            return;
        }
        if self.state() == State::Closed {
            return;
        }
        // Sixth: check the URG bit (a zero window still lets it through:
        // "special allowance should be made to accept valid ACKs, URGs").
        if seg.urgent.is_some() || self.rcv.urg.is_some() {
            self.check_urgent(seg.seq, seg.urgent, seg.payload);
        }
        if ack_only {
            self.ack.now = true;
            return;
        }

        // RFC 7323 4.3: "If SEG.TSval >= TS.Recent and SEG.SEQ <=
        // Last.ACK.sent then SEG.TSval is copied to TS.Recent".
        if self.opt.ts {
            if let Some((tsval, _)) = seg.timestamp {
                if (tsval.wrapping_sub(self.opt.ts_recent) as i32) >= 0
                    && seg.seq.le(self.ack.last_sent)
                {
                    self.opt.ts_recent = tsval;
                    self.opt.ts_recent_at = now;
                }
            }
        }

        // Seventh: process the segment text.
        self.process_text(now, &seg, gso_size, ctr);
        if self.state() == State::Closed || self.rst.pending {
            return;
        }

        // Eighth: check the FIN bit.
        if seg.fin && self.rcv.fin.is_none() && !self.rcv.fin_received {
            let fin_seq = seg.seq + seg.payload.len();
            if fin_seq.ge(self.rcv.nxt) && self.accepted_whole(&seg) {
                self.rcv.fin = Some(fin_seq);
            }
        }
        if self.state() == State::TimeWait && seg.fin {
            // "Remain in the TIME-WAIT state. Restart the 2 MSL time-wait
            // timeout." and acknowledge.
            self.ack.now = true;
            self.restart_time_wait(now);
        }
        self.check_fin(now, ctr);
    }

    /// Like Linux (`tcp_disordered_ack`), a pure duplicate ACK that fails
    /// PAWS only because the network reordered it is accepted: it carries
    /// SACK information and cannot corrupt anything. RFC 7323 5.3 R1 still
    /// applies to everything else (data, window updates, new ACKs).
    fn disordered_ack(&self, seg: &TcpRepr, tsval: u32) -> bool {
        let Some(ack) = seg.ack else {
            return false;
        };
        let new_wnd = usize::from(seg.window) << self.opt.snd_wscale;
        // Would this segment update the window (Linux tcp_may_update_window)?
        let updates_window = self.snd.wl1.lt(seg.seq)
            || (self.snd.wl1 == seg.seq && (new_wnd > self.snd.wnd || new_wnd == 0));
        let age_ms = u64::from(self.opt.ts_recent.wrapping_sub(tsval));
        seg.payload.is_empty()
            && !seg.syn
            && !seg.fin
            && seg.seq == self.rcv.nxt
            && ack == self.snd.una
            && !updates_window
            && age_ms <= self.rtx.rtt.rto().as_millis() as u64
    }

    /// Answer an unacceptable segment with an ACK. Like Linux
    /// (`tcp_oow_rate_limited`, `tcp_invalid_ratelimit` = 500 ms), answers
    /// to segments without data are rate-limited: they are what ACK loops
    /// are made of (RFC 5961 10: "implementations SHOULD ... rate-limit
    /// the challenge ACKs").
    fn oow_ack(&mut self, now: Instant, seg_len: usize) {
        if seg_len == 0 {
            if self
                .ack
                .last_oow_at
                .is_some_and(|t| now.saturating_duration_since(t) < OOW_ACK_INTERVAL)
            {
                return;
            }
            self.ack.last_oow_at = Some(now);
        }
        self.ack.now = true;
    }

    /// Send a challenge ACK (RFC 5961 3.2, 4.2, 5.2) unless throttled.
    /// RFC 5961 7: "An implementation SHOULD include an ACK throttling
    /// mechanism to be conservative." As Linux (`tcp_send_challenge_ack`):
    /// first the connection's own limit, one per `tcp_invalid_ratelimit`
    /// (500 ms), then the stack-wide budget. Linux keeps one timestamp for
    /// this and for the answers to unacceptable segments (`oow_ack`); we
    /// keep one each, so that a stream of out-of-window segments (a
    /// spoofer's, or reordering) cannot hold back the challenge ACK a
    /// peer that sent a slightly wrong RST needs to reset the connection
    /// (RFC 5961 3.2), at the cost of at most two ACKs per 500 ms. Linux
    /// counts only the per-connection skips as `TCPACKSkippedChallenge`;
    /// we count both kinds, so that every challenge ACK not sent shows.
    pub(super) fn challenge_ack(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        limit: &mut ChallengeAckLimit,
    ) {
        if self
            .ack
            .last_challenge_at
            .is_some_and(|t| now.saturating_duration_since(t) < OOW_ACK_INTERVAL)
        {
            ctr.TCPACKSkippedChallenge += 1;
            return;
        }
        self.ack.last_challenge_at = Some(now);
        if !limit.take(now) {
            ctr.TCPACKSkippedChallenge += 1;
            return;
        }
        ctr.TCPChallengeACK += 1;
        self.ack.now = true;
    }

    fn accepted_whole(&self, seg: &TcpRepr) -> bool {
        // The FIN is only acceptable if all data before it fits the window.
        let end = seg.seq + seg.payload.len();
        let right = self.rcv.nxt + self.rcv.queue.free();
        end.le(right)
    }

    fn restart_time_wait(&mut self, now: Instant) {
        if let Phase::TimeWait { until } = &mut self.st {
            *until = now + self.cfg.time_wait.get();
        }
    }

    fn established(&mut self, ctr: &mut TcpCounters) {
        if self.snd.queue.fin_queued {
            self.set_state(Phase::FinWait1, Some(ctr));
        } else {
            self.set_state(Phase::Established, Some(ctr));
        }
    }

    fn on_reset(&mut self, ctr: &mut TcpCounters) {
        if self.state() == State::TimeWait && self.cfg.rfc1337 {
            // RFC 1337 "TIME-WAIT assassination": ignore the RST.
            return;
        }
        match self.state() {
            State::SynReceived => {
                // "If this connection was initiated with a passive OPEN ...
                // return this connection to LISTEN state"; the Stack drops
                // the embryonic connection. Active (simultaneous) open:
                // "connection refused".
                ctr.AttemptFails += 1;
                self.app.error = Some(TcpError::ConnectionRefused);
            }
            State::Established | State::CloseWait => {
                ctr.EstabResets += 1;
                self.app.error = Some(TcpError::ConnectionReset);
            }
            State::FinWait1 | State::FinWait2 => {
                self.app.error = Some(TcpError::ConnectionReset);
            }
            _ => {}
        }
        self.set_state(Phase::Closed, Some(ctr));
    }

    fn process_syn_sent(&mut self, now: Instant, seg: &TcpRepr, ctr: &mut TcpCounters) {
        // RFC 9293 3.10.7.3. "If SEG.ACK =< ISS or SEG.ACK > SND.NXT, send a
        // reset (unless the RST bit is set, if so drop the segment)".
        if let Some(ack) = seg.ack {
            if ack.le(self.snd.iss) || ack.gt(self.snd.max) {
                if !seg.rst {
                    self.rst.reply = Some((ack, None));
                }
                // Linux: the peer may hold an old connection and have
                // dropped our SYN for it; retransmit the SYN at once (once:
                // `TCP_TIMEOUT_MIN` while nothing was retransmitted yet).
                if self.rtx.retries == 0 {
                    self.rtx.rto_at = Some(now + crate::time::Duration::from_millis(2));
                }
                return;
            }
        }
        if seg.rst {
            // "If the ACK was acceptable, then signal to the user 'error:
            // connection reset', drop the segment, enter CLOSED state".
            if seg.ack.is_some() {
                ctr.AttemptFails += 1;
                self.app.error = Some(TcpError::ConnectionRefused);
                self.set_state(Phase::Closed, Some(ctr));
            }
            return;
        }
        if !seg.syn {
            return;
        }
        self.negotiate(seg, now);
        self.ecn_rcv_syn_sent(seg);
        self.rcv.nxt = seg.seq + 1u32;
        self.snd.wnd = usize::from(seg.window);
        self.snd.max_wnd = self.snd.wnd;
        self.snd.wl1 = seg.seq;
        if let Some(ack) = seg.ack {
            self.snd.wl2 = ack;
            // Our SYN is acknowledged, and delivered.
            self.stats.bytes_acked += u64::from(ack.wrapping_sub(self.snd.una));
            self.stats.delivered += 1;
            self.snd.una = ack;
            self.snd.syn_acked = true;
            self.report.advice.confirm = true;
            if self.snd.nxt.lt(ack) {
                self.snd.nxt = ack;
            }
            // Karn's rule: only time the SYN if it was not retransmitted.
            if let Some((_, t)) = self.rtx.rtt_probe.take() {
                self.rtx.rtt.sample(now.saturating_duration_since(t));
            }
            self.rtx.retries = 0;
            self.rtx.rto_at = None;
            // "If SND.UNA > ISS (our SYN has been ACKed), change the
            // connection state to ESTABLISHED, form an ACK segment ... and
            // send it."
            self.established(ctr);
            self.ack.now = true;
            self.ack.last_sent = self.rcv.nxt;
            if !seg.payload.is_empty() || seg.fin {
                let mut rest = *seg;
                rest.syn = false;
                rest.seq = self.rcv.nxt;
                self.process_text(now, &rest, rest.payload.len(), ctr);
                if rest.fin && self.accepted_whole(&rest) {
                    self.rcv.fin = Some(rest.seq + rest.payload.len());
                }
                self.check_fin(now, ctr);
            }
        } else {
            // Simultaneous open: "enter SYN-RECEIVED, form a SYN,ACK segment
            // <SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK> and send it".
            self.set_state(Phase::SynReceived { irs: seg.seq }, Some(ctr));
            self.snd.nxt = self.snd.iss;
            self.rtx.rtt_probe = None;
        }
    }

    /// The segment's data; `gso_size`: the size of each wire segment it
    /// stands for (its payload length unless coalesced, see
    /// [`process_gso`](Self::process_gso)).
    fn process_text(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        gso_size: usize,
        ctr: &mut TcpCounters,
    ) {
        if seg.payload.is_empty() {
            return;
        }
        if !matches!(
            self.state(),
            State::Established | State::FinWait1 | State::FinWait2
        ) {
            // "This should not occur since a FIN has been received from the
            // remote side. Ignore the segment text."
            return;
        }
        // RFC 3168 6.1.3: the peer's CWR ends our ECE (duplicates too).
        self.ecn_accept_cwr(seg);
        let end = seg.seq + seg.payload.len();
        if end.le(self.rcv.nxt) {
            // RFC 2883 4: "the receiver ... reports [duplicate segments]
            // in the first SACK block" (D-SACK).
            if self.opt.sack {
                self.ack.dsack = Some((seg.seq, end));
                ctr.TCPDSACKOldSent += 1;
            }
            self.ack.now = true;
            return;
        }
        if self.app.closed {
            // Linux: data for a socket the application closed is answered
            // with RST (TCPAbortOnData, RFC 2525 2.17).
            // Linux `tcp_reset` then `tcp_v4_send_reset`: the RST answers
            // the segment (<SEQ=SEG.ACK><CTL=RST>), and the connection is
            // gone.
            ctr.TCPAbortOnData += 1;
            match seg.ack {
                Some(ack) => {
                    self.rst.reply = Some((ack, None));
                    self.set_state(Phase::Closed, Some(ctr));
                }
                None => self.rst.pending = true,
            }
            return;
        }
        // RFC 2883 4: a duplicate of data held out of order is reported in
        // a D-SACK block too.
        if self.opt.sack && seg.seq.gt(self.rcv.nxt) {
            let max = if self.opt.ts { 3 } else { 4 };
            let held = self
                .rcv
                .queue
                .sack_blocks(self.rcv.nxt, max)
                .into_iter()
                .flatten()
                .any(|(l, r)| !seg.seq.lt(l) && !end.gt(r));
            if held {
                self.ack.dsack = Some((seg.seq, end));
                ctr.TCPDSACKOfoSent += 1;
            }
        }
        // Trim what we already have.
        let (off, data) = if seg.seq.lt(self.rcv.nxt) {
            if self.opt.sack {
                self.ack.dsack = Some((seg.seq, self.rcv.nxt));
                ctr.TCPDSACKOldSent += 1;
            }
            let skip = self.rcv.nxt.wrapping_sub(seg.seq) as usize;
            (0, seg.payload.get(skip..).unwrap_or(&[]))
        } else {
            (seg.seq.wrapping_sub(self.rcv.nxt) as usize, seg.payload)
        };
        let had_ooo = self.rcv.queue.has_out_of_order();
        let ins = self.rcv.queue.insert(off, data, self.cfg.ooo_limit.max(1));
        // RFC 3168 6.1.3: a CE mark on new data, in order or not.
        self.ecn_check_ce(seg.ip_ecn);
        if ins.out_of_order {
            // RFC 5681 4.2: "an out-of-order data segment SHOULD be
            // acknowledged immediately".
            ctr.TCPOFOQueue += 1;
            self.ack.now = true;
            return;
        }
        self.rcv.nxt += ins.advanced;
        self.stats.bytes_received += ins.advanced as u64;
        // Quick-ack: filling a hole (RFC 5681 4.2 "if the segment fills in
        // all or part of a gap"), or the first data after an idle period
        // longer than the RTO (Linux quick-ack mode).
        let first = self.ack.last_data_at.is_none();
        let idle = match self.ack.last_data_at {
            None => true,
            Some(t) => now.saturating_duration_since(t) > self.rtx.rtt.rto(),
        };
        self.ack.last_data_at = Some(now);
        self.ack.unacked += ins.advanced;
        // Estimate the peer's full segment size from what it sends (as
        // Linux's rcv_mss does) to recognise "full-sized" segments; for a
        // super-segment, from the size of the wire segments it stands for.
        let wire_seg = gso_size.clamp(1, seg.payload.len().max(1));
        if self.cfg.nagle_minshall && wire_seg < self.ack.rcv_mss {
            // Linux `tcp_measure_rcv_mss`: a short segment.
            self.ack.pushed = (self.ack.pushed + 1).min(2);
        }
        self.ack.rcv_mss = self
            .ack
            .rcv_mss
            .max(wire_seg.min(usize::from(self.opt.adv_mss)));
        if first {
            // Linux `tcp_incr_quickack` at the first data: ACK at once for
            // a while, about half a window's worth of segments (2 to 16),
            // so a sender in slow start is not held back by delayed ACKs.
            // (Linux grants it again after a gap longer than the RTO; here
            // that costs loss recovery: twice the RTOs in
            // tcp_loss_recovery's netem runs. After a gap the first segment
            // is still acknowledged at once, below.)
            let q = (self.rcv_wnd() / (2 * self.ack.rcv_mss.max(1))).clamp(2, MAX_QUICKACKS);
            self.ack.quick = self.ack.quick.max(q as u32);
        }
        let quick = self.ack.quick > 0 && !self.ack.pingpong;
        if had_ooo || idle || ins.advanced == 0 || quick {
            self.ack.now = true;
        } else if self.ack.unacked >= 2 * self.ack.rcv_mss {
            // RFC 5681 4.2: "an ACK SHOULD be generated for at least every
            // second full-sized segment".
            self.ack.now = true;
        } else if self.ack.delay_at.is_none() {
            // RFC 1122 4.2.3.2 delayed ACK.
            self.ack.delay_at = Some(now + self.cfg.delayed_ack.get());
        }
    }

    fn check_fin(&mut self, now: Instant, ctr: &mut TcpCounters) {
        let Some(fin) = self.rcv.fin else {
            return;
        };
        if fin != self.rcv.nxt {
            return;
        }
        self.rcv.fin = None;
        self.rcv.fin_received = true;
        // "advance RCV.NXT over the FIN, and send an acknowledgment for the FIN."
        self.rcv.nxt += 1u32;
        self.stats.bytes_received += 1;
        self.ack.now = true;
        let _ = now;
        match self.state() {
            State::SynReceived | State::Established => self.set_state(Phase::CloseWait, Some(ctr)),
            // "If our FIN has been ACKed (perhaps in this segment), then enter
            // TIME-WAIT, start the time-wait timer, turn off the other timers;
            // otherwise, enter the CLOSING state."
            State::FinWait1 => {
                if self.fin_acked() {
                    self.set_state(self.time_wait(), Some(ctr));
                } else {
                    self.set_state(Phase::Closing, Some(ctr));
                }
            }
            State::FinWait2 => self.set_state(self.time_wait(), Some(ctr)),
            _ => {}
        }
        // Entering TIME-WAIT clears the timers and pending ACK: the FIN's
        // acknowledgment must still go out now, not when the peer's
        // retransmission of the FIN provokes it.
        self.ack.now = true;
    }

    /// Does this TIME-WAIT connection allow a new SYN to reuse the 4-tuple?
    /// RFC 9293 3.6.1 / RFC 6191: with timestamps, "if the TSval of the
    /// SYN is larger than TS.Recent"; without, if "the SYN's sequence
    /// number is larger than the last sequence number seen".
    pub fn accepts_reuse_syn(&self, seg: &TcpRepr) -> bool {
        if self.state() != State::TimeWait || !seg.syn || seg.ack.is_some() || seg.rst {
            return false;
        }
        match (self.opt.ts, seg.timestamp) {
            (true, Some((tsval, _))) => tsval.wrapping_sub(self.opt.ts_recent) as i32 > 0,
            _ => seg.seq.gt(self.rcv.nxt),
        }
    }

    /// An ICMP destination unreachable quoting one of our segments, whose
    /// sequence number is `seq`. RFC 1122 4.2.3.9: soft errors (net/host
    /// unreachable) "MUST NOT" abort; like Linux, port/protocol
    /// unreachable is a hard error only while the connection is being
    /// opened; "fragmentation needed" lowers the MSS (`mtu.rs`). Returns
    /// whether the error passed the sequence number check (only then may
    /// the Stack remember a path MTU it reports).
    pub fn on_icmp_unreachable(
        &mut self,
        _now: Instant,
        kind: IcmpUnreachable,
        seq: SeqNum,
        ctr: &mut TcpCounters,
    ) -> bool {
        self.sync_estab(ctr);
        // RFC 5927 4.1: "TCP SHOULD check that the TCP sequence number
        // contained in the payload of the ICMP error message is within the
        // range SND.UNA =< SEG.SEQ < SND.NXT" (SND.NXT: the highest sent,
        // ours never rewinds past it). Like Linux (`tcp_v4_err`), any other
        // is dropped and counted: it cannot be about a segment in flight,
        // and a blind attacker must now guess a sequence number in the
        // window as well as the 4-tuple to abort a connection being opened
        // or to lower its MSS (RFC 5927 5, 7).
        if !seq.in_range(self.snd.una, self.snd.max) {
            ctr.OutOfWindowIcmps += 1;
            return false;
        }
        match kind {
            IcmpUnreachable::PortUnreachable | IcmpUnreachable::ProtoUnreachable => {
                if self.state() == State::SynSent {
                    // Linux (tcp_done): an open that fails counts.
                    ctr.AttemptFails += 1;
                    self.app.error = Some(TcpError::ConnectionRefused);
                    self.set_state(Phase::Closed, Some(ctr));
                } else {
                    self.app.soft_error = Some(TcpError::ConnectionRefused);
                }
            }
            IcmpUnreachable::NetUnreachable
            | IcmpUnreachable::HostUnreachable
            | IcmpUnreachable::AdminProhibited
            | IcmpUnreachable::Other => self.app.soft_error = Some(TcpError::HostUnreachable),
            IcmpUnreachable::FragRequired { mtu } => self.on_frag_needed(mtu),
        }
        true
    }

    pub(super) fn rcv_wnd(&self) -> usize {
        if self.rcv.adv.gt(self.rcv.nxt) {
            self.rcv.adv.wrapping_sub(self.rcv.nxt) as usize
        } else {
            0
        }
    }

    pub(super) fn rcv_wnd_available(&self) -> usize {
        let max = if self.opt.ws {
            0xffff_usize << self.opt.rcv_wscale
        } else {
            0xffff
        };
        self.rcv.queue.free().min(max)
    }

    /// After the application read: RFC 1122 4.2.3.3 receiver SWS avoidance
    /// decides whether the opened window is worth an update.
    pub(super) fn maybe_window_update(&mut self, _before: usize) {
        if !self.is_synchronized() || self.rcv.fin_received {
            return;
        }
        // Linux `tcp_cleanup_rbuf`: "If this read emptied read buffer, we
        // send ACK, if connection is not bidirectional, user drained
        // receive buffer and there was a small segment in queue."
        if self.ack.delay_at.is_some()
            && self.rcv.queue.ring.is_empty()
            && (self.ack.pushed >= 2 || (self.ack.pushed == 1 && !self.ack.pingpong))
        {
            self.ack.now = true;
        }
        let cur = self.rcv_wnd();
        let now_avail = self.rcv_wnd_available();
        let thresh = (self.rcv.queue.ring.capacity() / 2).min(usize::from(self.opt.adv_mss));
        if now_avail >= cur + thresh && cur < self.rcv.queue.ring.capacity() / 2 {
            self.ack.now = true;
        }
    }
}
