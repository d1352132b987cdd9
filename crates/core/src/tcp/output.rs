//! Emission: what `dispatch` sends (SYN, RST, retransmissions, loss
//! probes, new data within the windows and Nagle, FIN, window probes,
//! ACKs), and how a segment is built (window to advertise, SACK blocks,
//! timestamps).

use bytes::Bytes;
use ustack_wire::tcp::{SeqNum, TcpRepr};

use super::conn::{Connection, Phase};
use super::send::{sws_allows, SendCheck};
use super::{State, TcpCounters, TcpError, TcpShared};
use crate::time::{Duration, Instant};

/// Most segments one `dispatch` call emits (bounded work per poll).
const MAX_BURST: usize = 64;

/// Linux `TCP_RESOURCE_PROBE_INTERVAL`: how often a sender whose data the
/// link's queue dropped tries again (see [`Connection::blocked`]).
const RESOURCE_PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Smallest payload sent by reference rather than copied into the frame
/// (when the caller takes frames that way, `TcpShared::zero_copy`): below
/// it the copy costs less than the references.
const ZERO_COPY_MIN: usize = 1024;

/// The emit callback of [`Connection::dispatch_ext`]: a segment and, when
/// its payload is carried by reference, the payload as pieces of the send
/// buffer (the segment's own payload is then empty). Returns false if the
/// segment could not be sent now.
pub type EmitExt<'a> = dyn FnMut(&TcpRepr, &[Bytes]) -> bool + 'a;

/// Where `dispatch` puts data segments: the caller's `emit`, and the
/// table's scratch buffer to gather a payload copied from more than one
/// chunk of the send buffer.
struct Sink<'a, 'e> {
    emit: &'a mut EmitExt<'e>,
    scratch: &'a mut Vec<u8>,
    /// Data payloads of at least [`ZERO_COPY_MIN`] bytes go by reference,
    /// collected here.
    zero_copy: bool,
    refs: &'a mut Vec<Bytes>,
    /// Largest TSO super-segment payload (0: one MSS per segment).
    tso_max: usize,
    /// The link's queue drops every datagram (`Stack::set_local_drop`).
    local_drop: bool,
}

impl Connection {
    /// Emit everything due at `now`: SYN, data (within cwnd, the peer window
    /// and Nagle), FIN, ACKs, RST, probes and retransmissions. `emit`
    /// returns false if the segment could not be sent now; we try again
    /// a little later. Work per call is bounded. `shared`: what the
    /// connections of one table share (a scratch buffer here).
    pub fn dispatch(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        shared: &mut TcpShared,
        emit: &mut dyn FnMut(&TcpRepr) -> bool,
    ) {
        // Every payload in the segment itself: this caller takes no
        // references.
        let zero_copy = std::mem::replace(&mut shared.zero_copy, false);
        self.dispatch_ext(now, ctr, shared, &mut |r, _| emit(r));
        shared.zero_copy = zero_copy;
    }

    /// [`Connection::dispatch`] for a caller that may take a data
    /// segment's payload by reference to the send buffer (when
    /// `shared.zero_copy` is on): the frame it builds holds the bytes
    /// however the buffer changes afterwards.
    pub fn dispatch_ext(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        shared: &mut TcpShared,
        emit: &mut EmitExt<'_>,
    ) {
        self.route_sync_before_pass();
        let before = self.stats.segs_out;
        self.dispatch_pass(now, ctr, shared, emit);
        self.route_sync_after_pass(self.stats.segs_out != before);
    }

    fn dispatch_pass(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        shared: &mut TcpShared,
        emit: &mut EmitExt<'_>,
    ) {
        let probe = shared.probe;
        let mut out = Sink {
            emit,
            scratch: &mut shared.scratch,
            zero_copy: shared.zero_copy,
            refs: &mut shared.refs,
            tso_max: shared.tso_max,
            local_drop: shared.local_drop,
        };
        let out = &mut out;
        self.sync_estab(ctr);
        self.run_timers(now, ctr);
        if self.timers.tx_retry_at.is_some_and(|t| now < t) {
            return;
        }
        self.timers.tx_retry_at = None;

        if let Some((seq, ack)) = self.rst.reply {
            let r = TcpRepr {
                src_port: self.local.port(),
                dst_port: self.remote.port(),
                seq,
                ack,
                rst: true,
                ..TcpRepr::default()
            };
            // A RST that cannot leave (no route) is dropped, as Linux
            // drops one `ip_send_unicast_reply` cannot route.
            if (out.emit)(&r, &[]) {
                ctr.OutSegs += 1;
                ctr.OutRsts += 1;
            } else {
                self.refused();
            }
            self.rst.reply = None;
        }
        if matches!(self.state(), State::Closed | State::Listen) {
            return;
        }

        if self.rst.pending {
            // RFC 9293 3.10.4 ABORT: "Send a reset segment:
            // <SEQ=SND.NXT><CTL=RST>" (Linux also sets ACK).
            let mut r = self.base_repr(now, self.snd.max);
            r.rst = true;
            r.window = 0;
            r.sack_ranges = [None; 4];
            // A failed emit drops the RST: the peer will learn by its own RST.
            if (out.emit)(&r, &[]) {
                ctr.OutSegs += 1;
                ctr.OutRsts += 1;
                self.stats.segs_out = self.stats.segs_out.wrapping_add(1);
            }
            if matches!(self.state(), State::Established | State::CloseWait) {
                ctr.EstabResets += 1;
            }
            if self.rst.on_close {
                ctr.TCPAbortOnClose += 1;
            }
            self.rst.pending = false;
            self.set_state(Phase::Closed, Some(ctr));
            return;
        }

        if self.syn_needed() {
            let syn_ack = self.state() == State::SynReceived;
            let is_rtx = self.snd.max != self.snd.iss;
            let window = self.advertise_window(true);
            // RFC 3168 6.1.1: an ECN-setup SYN, or the SYN-ACK agreeing.
            let (ece, cwr) = if syn_ack {
                (self.ecn_synack_ece(), false)
            } else {
                self.ecn_syn_flags(is_rtx)
            };
            let r = TcpRepr {
                src_port: self.local.port(),
                dst_port: self.remote.port(),
                seq: self.snd.iss,
                ack: if syn_ack { Some(self.rcv.nxt) } else { None },
                syn: true,
                ece,
                cwr,
                window,
                max_seg_size: Some(self.opt.adv_mss),
                window_scale: if (syn_ack && self.opt.ws) || (!syn_ack && self.cfg.window_scale) {
                    Some(self.opt.rcv_wscale)
                } else {
                    None
                },
                sack_permitted: if syn_ack {
                    self.opt.sack
                } else {
                    self.cfg.sack
                },
                timestamp: if (syn_ack && self.opt.ts) || (!syn_ack && self.cfg.timestamps) {
                    Some((
                        self.ts_now(now),
                        if syn_ack { self.opt.ts_recent } else { 0 },
                    ))
                } else {
                    None
                },
                ..TcpRepr::default()
            };
            // A SYN that cannot leave (no route) still counts as sent,
            // as in Linux's `tcp_connect` and the request socket's timer:
            // the retransmission timer, backed off, tries again and gives
            // up after `tcp_syn_retries` (`tcp_synack_retries`), where
            // retrying at once would spin for ever.
            let sent = (out.emit)(&r, &[]);
            if sent {
                self.sent_ack(ctr, now);
            } else {
                self.refused();
            }
            if !self.report.open_counted {
                self.report.open_counted = true;
                if self.passive {
                    ctr.PassiveOpens += 1;
                } else {
                    ctr.ActiveOpens += 1;
                }
            }
            if !sent {
                // (Karn: no RTT sample from a SYN that did not leave.)
                self.rtx.rtt_probe = None;
            } else if is_rtx {
                ctr.RetransSegs += 1;
                self.rtx.total += 1;
            } else {
                self.rtx.rtt_probe = Some((self.snd.iss, now));
            }
            self.snd.nxt = self.snd.iss + 1u32;
            self.snd.max = self.snd.max.max(self.snd.nxt);
            self.arm_rto(now);
            if !sent {
                return self.wait_for_timers(now);
            }
        }

        // Pacing (`pacing.rs`): data leaves in bursts of about a
        // millisecond at the pacing rate; the budget is what the current
        // burst may still carry.
        let rate = self.pacing_rate();
        let mss = self.max_payload_base();

        // Retransmissions of segments deemed lost (RACK, RTO, or three
        // duplicate ACKs without SACK), within cwnd (RFC 6675 5 (C)). The
        // head's retransmission on entering recovery is not held back by
        // pacing either.
        //
        // Linux retransmits skb by skb (`tcp_xmit_retransmit_queue`): the
        // lost segments in a row up to the end of their skb, at most what
        // cwnd leaves (`segs`) and the TSO autosizing's count, go as one
        // packet, with PSH (`__tcp_transmit_skb` forces it on a packet of
        // more than one segment) on its last segment.
        let mut rtx_left = 0usize;
        let mut rtx_pkt = 0usize;
        for _ in 0..MAX_BURST {
            if !self.rtx_due() {
                break;
            }
            let forced = self.recovery.as_ref().is_some_and(|r| r.rtx_head_now);
            if !forced && self.cong.pacer.budget(now, rate, mss) == 0 {
                break;
            }
            let Some((s, e)) = self.rtx.scoreboard.first_lost() else {
                break;
            };
            if rtx_left == 0 {
                let maxp = self.max_payload().max(1);
                let room = (self.send_cwnd().saturating_sub(self.pipe()) / maxp).max(1);
                let max = room.min(self.linux_tso_segs()).max(1);
                rtx_pkt = self.rtx.scoreboard.lost_run(max).max(1);
                rtx_left = rtx_pkt;
            }
            rtx_left -= 1;
            let psh = rtx_left == 0 && rtx_pkt > 1;
            if !self.retransmit(now, ctr, out, s, e, false, psh) {
                return self.blocked(now, out.local_drop);
            }
            self.clear_rtx_head_now();
        }
        // Nothing (left) to retransmit: the head was repaired otherwise.
        self.clear_rtx_head_now();

        // RFC 8985 7.3: the loss probe. "If a previously unsent segment
        // exists AND the receive window allows new data to be sent:
        // Transmit that new segment ... Otherwise ... retransmit the
        // highest-sequence segment sent so far".
        if self.tlp.pending {
            self.tlp.pending = false;
            if self.can_send_data_state() && self.snd.una != self.snd.max {
                let sent = if let Some((seq, n, fin)) = self.next_segment(true, true, 0, false) {
                    if !self.send_segment(now, ctr, out, seq, n, fin) {
                        self.tlp.pending = true;
                        return self.blocked(now, out.local_drop);
                    }
                    self.snd.nxt = self.snd.max;
                    Some(false)
                } else if let Some((s, e)) = self.rtx.scoreboard.last_unsacked() {
                    if !self.retransmit(now, ctr, out, s, e, true, false) {
                        self.tlp.pending = true;
                        return self.blocked(now, out.local_drop);
                    }
                    Some(true)
                } else {
                    None
                };
                if let Some(was_rtx) = sent {
                    ctr.TCPLossProbes += 1;
                    self.tlp.end = Some((self.snd.max, was_rtx));
                    // "the sender MUST re-arm the RTO timer".
                    self.rtx.rto_at = Some(self.rto_deadline(now));
                }
            }
            // Nothing probed: the RTO, which the probe stood in for.
            if self.rtx.rto_at.is_none() && self.snd.una != self.snd.max {
                self.arm_rto(now);
            }
        }

        let mut sent_new = false;
        // RFC 4821: a path MTU probe, ahead of the new data (`mtu.rs`).
        if let Some((seq, n)) = self.mtu_probe_due(now, probe) {
            if !self.send_segment(now, ctr, out, seq, n, false) {
                return self.blocked(now, out.local_drop);
            }
            self.snd.nxt = self.snd.max;
            self.mtu_probe_sent(seq, n);
            sent_new = true;
        }
        // Where PSH falls (Linux, `__tcp_transmit_skb`): "Force a PSH flag
        // on all (GSO) packets to expedite GRO flush at receiver", i.e. on
        // every packet of more than one segment, which the link or GSO
        // then cuts into segments of which the last keeps it. A packet of
        // one segment carries PSH only if its skb does (the end of a write,
        // `send_segment_psh`). So here: the segments of one packet Linux
        // would build (`linux_packet_max`), and PSH on the last of each
        // that holds two or more. With TSO, one segment is one packet.
        let mut pkt = 0usize;
        let mut pkt_max = 0usize;
        // The packet being built started with nothing in flight.
        let mut pkt_idle = false;
        for _ in 0..MAX_BURST {
            if self.cong.pacer.budget(now, rate, mss) == 0 {
                break;
            }
            let force = self.timers.force_send;
            if pkt == 0 {
                if self.snd.una == self.snd.max
                    && self.next_segment(force, false, 0, false).is_some()
                {
                    // Linux restarts cwnd after idle before the packet is
                    // sized (`tcp_slow_start_after_idle_check`, when the
                    // application queues data or the window opens).
                    self.restart_after_idle(now);
                }
                pkt_max = self.linux_packet_max();
                pkt_idle = self.snd.una == self.snd.max;
            }
            // Linux's packets are pieces of its skbs (`tso_fragment` only
            // splits): none spans the end of one the write was cut into
            // (`size_goal`, counted from the first data byte or from where
            // a write found everything before it sent, `Snd::skb_phase`).
            let goal = self.size_goal().max(1);
            let to_skb_end = {
                let start = self.snd.max.wrapping_sub(self.snd.iss + 1u32) as usize;
                let phase = usize::from(self.snd.skb_phase) % goal;
                goal - (start % goal + goal - phase) % goal
            };
            let tso_cap = if out.tso_max > 0 {
                out.tso_max.min(pkt_max.saturating_sub(pkt)).min(to_skb_end)
            } else {
                0
            };
            let Some((seq, n, fin)) = self.next_segment(force, false, tso_cap, pkt_idle) else {
                break;
            };
            self.timers.force_send = false;
            pkt += n;
            let ends = pkt >= pkt_max
                || n >= to_skb_end
                || self.burst_ends_after(seq, n, pkt_idle)
                || self.cong.pacer.budget(now, rate, mss) <= n + usize::from(fin)
                || self.snd.queue.record_end_after(seq) == Some(seq + n)
                || self.snd.queue.is_push_mark(seq + n);
            // A push by the persist timer (the cork ceiling) is marked too.
            let psh = force || (ends && pkt > self.max_payload());
            if !self.send_segment_psh(now, ctr, out, seq, n, fin, psh) {
                self.timers.force_send = force;
                return self.blocked(now, out.local_drop);
            }
            self.snd.nxt = self.snd.max;
            sent_new = true;
            if !ends {
                self.rtx.scoreboard.continue_packet();
            }
            if ends {
                pkt = 0;
                // Linux `tcp_push_one`: one packet, no more.
                if self.app.push_one {
                    break;
                }
            }
        }
        self.app.push_one = false;
        self.timers.force_send = false;
        // A TCP_NODELAY push is one-shot.
        self.app.push_now = false;
        // The burst ends when its budget is spent or nothing more may go;
        // one cut short by MAX_BURST goes on at the next dispatch (now:
        // the connection still has work), not after a pacing gap.
        let spent = self.cong.pacer.budget(now, rate, mss) == 0;
        let more = self.rtx_due() || self.next_segment(false, false, 0, false).is_some();
        let paced = spent && more;
        if spent || !more {
            self.cong.pacer.end_burst(now, rate);
        }
        if self.can_send_data_state() && self.snd.una != self.snd.max {
            self.cwnd_validate(paced);
        }
        if sent_new && self.tlp.end.is_none() {
            // RFC 8985 7.2: "start or restart a loss probe PTO timer after
            // transmitting new data".
            self.schedule_tlp(now);
        }

        // Persist timer: unsent data, nothing in flight, window too small.
        if self.persist_needed() {
            let d = self.probe0_interval(now, self.rtx.rtt.rto());
            self.timers.persist_at = Some(now + d);
        } else if !self.has_unsent() {
            self.timers.persist_at = None;
        }

        if self.timers.probe_pending && self.is_synchronized() {
            // A window or keep-alive probe that cannot leave (no route) is
            // lost like one the network dropped: the timer that sent it
            // counted it and tries again, backed off (Linux
            // `tcp_send_probe0` with an error from `tcp_write_wakeup`).
            let r = self.base_repr(now, self.snd.una - 1usize);
            self.timers.probe_pending = false;
            if (out.emit)(&r, &[]) {
                self.sent_ack(ctr, now);
            } else {
                self.refused();
            }
        }

        if self.ack.now {
            // An ACK that cannot leave is dropped (Linux `tcp_send_ack`
            // ignores the transmit error); the next segment carries it.
            let r = self.base_repr(now, self.snd.max);
            if (out.emit)(&r, &[]) {
                self.sent_ack(ctr, now);
            } else {
                self.refused();
            }
        }
    }

    pub(super) fn syn_needed(&self) -> bool {
        matches!(self.state(), State::SynSent | State::SynReceived) && self.snd.nxt == self.snd.iss
    }

    pub(super) fn can_send_data_state(&self) -> bool {
        self.snd.syn_acked
            && matches!(
                self.state(),
                State::Established
                    | State::CloseWait
                    | State::FinWait1
                    | State::Closing
                    | State::LastAck
            )
    }

    /// A segment deemed lost may be retransmitted now (RFC 6675 5
    /// (C): "If cwnd - pipe >= 1 SMSS" ... NextSeg rule 1).
    pub(super) fn rtx_due(&self) -> bool {
        if !self.can_send_data_state() {
            return false;
        }
        let Some((s, _)) = self.rtx.scoreboard.first_lost() else {
            return false;
        };
        (s == self.snd.una || s.lt(self.snd.una + self.snd.wnd))
            && (self.recovery.as_ref().is_some_and(|r| r.rtx_head_now)
                || self.pipe() < self.send_cwnd())
    }

    /// The next segment of new data (or the FIN) to send now: (seq, len,
    /// fin). `probe`: a tail loss probe, which ignores cwnd (RFC 8985 7.3).
    /// `tso_max`: with a link that segments TCP itself (TSO), one segment
    /// may carry up to that many bytes, in whole MSS-sized pieces but for
    /// the last (0: one MSS). `idle_packet`: the segment continues a packet
    /// (`linux_packet_max`) that started with nothing in flight; Linux
    /// applies Nagle once to the whole packet (`tcp_mss_split_point`, with
    /// `packets_out` as it was before it), so its partial last segment goes
    /// with it.
    pub(super) fn next_segment(
        &self,
        force: bool,
        probe: bool,
        tso_max: usize,
        idle_packet: bool,
    ) -> Option<(SeqNum, usize, bool)> {
        if !self.can_send_data_state() {
            return None;
        }
        let mut seq = self.snd.max;
        if seq.lt(self.snd.queue.seq) {
            seq = self.snd.queue.seq;
        }
        let off = seq.wrapping_sub(self.snd.queue.seq) as usize;
        let qlen = self.snd.queue.buf.len();
        if off > qlen {
            return None;
        }
        let mut avail = qlen - off;
        // A record written with MSG_EOR ends its segment.
        if let Some(mark) = self.snd.queue.record_end_after(seq) {
            avail = avail.min(mark.wrapping_sub(seq) as usize);
        }
        let fin_pending = self.snd.queue.fin_queued && avail == qlen - off;
        if avail == 0 && !fin_pending {
            return None;
        }
        let flight = seq.wrapping_sub(self.snd.una) as usize;
        let wnd_room = self.snd.wnd.saturating_sub(flight);
        let cwnd_room = if probe {
            usize::MAX
        } else {
            self.send_cwnd().saturating_sub(self.pipe())
        };
        let maxp = self.max_payload();
        // A TSO super-segment: several MSS at once, cut by the link.
        let seg_max = if tso_max > maxp {
            tso_max / maxp * maxp
        } else {
            maxp
        };
        let n = avail.min(seg_max).min(wnd_room).min(cwnd_room);
        // RFC 9293: the FIN occupies one sequence number inside the window.
        let fin = fin_pending && n == avail && (n < wnd_room || force) && cwnd_room > 0;
        if n == 0 && !fin {
            return None;
        }
        if !force && !probe && n > 0 {
            let check = SendCheck {
                len: n,
                avail,
                max_payload: maxp,
                idle: idle_packet || self.snd.max == self.snd.una,
                // RFC 896 (the default) holds a short segment whenever
                // data is in flight, Minshall's variant only behind a
                // short one.
                small_in_flight: !self.cfg.nagle_minshall
                    || (self.snd.sml.gt(self.snd.una) && self.snd.sml.le(self.snd.max)),
                // Linux applies Nagle to the last skb only: a record
                // (MSG_EOR) with data queued behind it goes out whole.
                nodelay: self.app.nodelay || avail < qlen - off,
                fin_queued: fin_pending,
                max_snd_wnd: self.snd.max_wnd,
                corked: self.corked() && !self.app.push_now,
            };
            if !sws_allows(&check) {
                return None;
            }
        }
        Some((seq, n, fin))
    }

    /// Data (or a FIN) queued and not yet sent.
    pub(super) fn has_unsent(&self) -> bool {
        self.can_send_data_state()
            && (self.snd.queue.buf.len() > self.snd.max.wrapping_sub(self.snd.queue.seq) as usize
                || (self.snd.queue.fin_queued && self.snd.max.le(self.snd.queue.fin_seq())))
    }

    /// Retransmit (the start of) the lost segment `[s, e)`; `tail`: send
    /// its last full segment instead (a loss probe); `psh`: it ends a
    /// packet of several segments. False if `emit` refused.
    #[allow(clippy::too_many_arguments)]
    fn retransmit(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        out: &mut Sink,
        s: SeqNum,
        e: SeqNum,
        tail: bool,
        psh: bool,
    ) -> bool {
        let fin_seq = self.snd.queue.fin_seq();
        let has_fin = self.snd.queue.fin_queued && e.gt(fin_seq);
        let data_end = if has_fin { fin_seq } else { e };
        let data_len = if s.lt(data_end) {
            data_end.wrapping_sub(s) as usize
        } else {
            0
        };
        let maxp = self.max_payload();
        let (start, n) = if tail && data_len > maxp {
            (data_end - maxp, maxp)
        } else {
            (s, data_len.min(maxp))
        };
        let fin = has_fin && start + n == fin_seq;
        if n == 0 && !fin {
            // Nothing left to send for it (cannot happen): drop the mark.
            self.rtx.scoreboard.retransmitted(s, e, now);
            return true;
        }
        if !self.send_segment_psh(now, ctr, out, start, n, fin, psh) {
            return false;
        }
        let end = start + n + usize::from(fin);
        self.rtx.scoreboard.retransmitted(start, end, now);
        // Linux `tcp_rate_skb_sent` for the retransmission.
        let tx = self.rate_tx(now);
        self.rtx.scoreboard.stamp_tx(start, end, tx);
        let ts = self.ts_now(now);
        if let Some(r) = self.recovery.as_mut() {
            if r.undo.retrans_ts.is_none() {
                r.undo.retrans_ts = Some(ts);
            }
        }
        true
    }

    /// Does the burst end after `[seq, seq + n)`: the queue is empty,
    /// Nagle holds the rest (not within a packet that started idle, see
    /// `next_segment`), or cwnd or the peer's window leaves less than a
    /// segment?
    fn burst_ends_after(&self, seq: SeqNum, n: usize, idle_packet: bool) -> bool {
        let off = seq.wrapping_sub(self.snd.queue.seq) as usize;
        let avail = self.snd.queue.buf.len().saturating_sub(off + n);
        let cwnd_room = self.send_cwnd().saturating_sub(self.pipe() + n);
        let flight = (seq + n).wrapping_sub(self.snd.una) as usize;
        let wnd_room = self.snd.wnd.saturating_sub(flight);
        let maxp = self.max_payload();
        // Nagle holds a partial rest while this segment is in flight.
        let nagle_holds =
            avail < maxp && !self.app.nodelay && !self.snd.queue.fin_queued && !idle_packet;
        avail == 0 || nagle_holds || cwnd_room < maxp.min(avail) || wnd_room < maxp.min(avail)
    }

    /// The largest packet Linux's `tcp_write_xmit` would build now: at
    /// most half of cwnd and what cwnd leaves (`tcp_cwnd_test`: "ensure we
    /// have at least 2 GSO packets in flight"), and at most the TSO
    /// autosizing's count (`linux_tso_segs`); whole segments.
    fn linux_packet_max(&self) -> usize {
        let maxp = self.max_payload().max(1);
        let cwnd = self.send_cwnd();
        let half = (cwnd / maxp / 2).max(1);
        let room = cwnd.saturating_sub(self.pipe()) / maxp;
        half.min(room).min(self.linux_tso_segs()).max(1) * maxp
    }

    /// Linux's `tcp_tso_autosize`: about a millisecond of data at the
    /// pacing rate (`sk_pacing_rate >> sk_pacing_shift`, shift 10), plus
    /// up to 64 KB more on short paths (`gso_max_size >> (min_rtt_us >>
    /// tcp_tso_rtt_log)`, log 9), at most 64 KB, in segments, and never
    /// fewer than `tcp_min_tso_segs`. Linux computes the pacing rate
    /// whether or not anything paces.
    pub(super) fn linux_tso_segs(&self) -> usize {
        const GSO_MAX_SIZE: u64 = 65_536;
        let maxp = self.max_payload().max(1);
        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
        let rate = super::pacing::Pacer::rate(
            self.send_cwnd(),
            self.cong.cc.ssthresh(),
            flight,
            self.rtx.rtt.srtt(),
        );
        // No RTT yet: Linux's rate is still unlimited (~0UL).
        let mut bytes = rate.map_or(u64::MAX, |r| r >> 10);
        if let Some(m) = self.rtx.rack.min_rtt() {
            let r = m.as_micros() >> 9;
            if r < 64 {
                bytes = bytes.saturating_add(GSO_MAX_SIZE >> r);
            }
        }
        let segs = usize::try_from(bytes.min(GSO_MAX_SIZE)).unwrap_or(usize::MAX) / maxp;
        segs.max(usize::from(self.cfg.min_tso_segs))
    }

    /// RFC 5681 4.1 (Linux `tcp_cwnd_restart`): sending again after more
    /// than an RTO with nothing in flight restarts cwnd, unless
    /// `tcp_slow_start_after_idle` is off (Linux
    /// `tcp_slow_start_after_idle_check`).
    fn restart_after_idle(&mut self, now: Instant) {
        if self.cfg.slow_start_after_idle
            && self.snd.max == self.snd.una
            && now.saturating_duration_since(self.timers.last_send_at) > self.rtx.rtt.rto()
        {
            self.cong.cc.on_idle(now, self.max_payload_base());
        }
    }

    /// Emit one data/FIN segment at `seq`; false if `emit` refused it.
    fn send_segment(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        out: &mut Sink,
        seq: SeqNum,
        n: usize,
        fin: bool,
    ) -> bool {
        self.send_segment_psh(now, ctr, out, seq, n, fin, false)
    }

    /// [`Connection::send_segment`], with PSH set also where `psh` says
    /// (it is always set on the segment carrying the last queued byte).
    #[allow(clippy::too_many_arguments)]
    fn send_segment_psh(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        out: &mut Sink,
        seq: SeqNum,
        n: usize,
        fin: bool,
        psh: bool,
    ) -> bool {
        if out.local_drop {
            // Linux `tcp_transmit_skb` fails (`NET_XMIT_DROP`): the
            // segment did not leave, nothing about it changes.
            return false;
        }
        if n > 0
            && !seq.lt(self.snd.max)
            && self
                .ack
                .last_data_at
                .is_some_and(|t| now.saturating_duration_since(t) < self.cfg.delayed_ack.get())
        {
            // Linux `tcp_event_data_sent`: new data within the delayed-ACK
            // time of the peer's: an exchange, enter pingpong mode.
            self.ack.pingpong = true;
        }
        let mut r = self.base_repr(now, seq);
        let off = seq.wrapping_sub(self.snd.queue.seq) as usize;
        r.fin = fin;
        // The last queued byte is pushed unless MSG_MORE left it unmarked.
        let tail = off + n == self.snd.queue.buf.len() && !self.app.unmarked_tail;
        // The end of a record (MSG_EOR) was the end of a write: pushed;
        // so is the end of an skb Linux marked in the middle of a write
        // (`forced_push`), however often it is sent.
        let marked = n > 0
            && (self.snd.queue.is_record_end(seq + n) || self.snd.queue.is_push_mark(seq + n));
        let tail = tail || marked;
        r.psh = n > 0 && (psh || tail);
        if n > 0 && !seq.lt(self.snd.max) && n < self.max_payload() {
            // Linux `tcp_minshall_update`: new data shorter than the MSS.
            self.snd.sml = seq + n;
        }
        // RFC 3168 6.1.2: ECT(0) on new data (not on retransmissions), and
        // CWR on the first after a window reduction.
        let (ip_ecn, cwr) = self.ecn_data(seq, n);
        r.ip_ecn = ip_ecn;
        r.cwr = cwr;
        let ok = if out.zero_copy && n >= ZERO_COPY_MIN {
            out.refs.clear();
            let got = self.snd.queue.buf.slices(off, n, out.refs);
            debug_assert_eq!(got, n);
            let ok = (out.emit)(&r, out.refs);
            // The frame holds its own references; drop the table's.
            out.refs.clear();
            ok
        } else {
            let contiguous = self.snd.queue.buf.contiguous(off, n);
            let payload: &[u8] = if contiguous.len() == n {
                contiguous
            } else {
                if out.scratch.len() < n {
                    out.scratch.resize(n, 0);
                }
                let buf = out.scratch.get_mut(..n).unwrap_or(&mut []);
                let got = self.snd.queue.buf.peek(off, buf);
                out.scratch.get(..got).unwrap_or(&[])
            };
            let seg = TcpRepr { payload, ..r };
            (out.emit)(&seg, &[])
        };
        if !ok {
            return false;
        }
        if !seq.lt(self.snd.max) && self.snd.una == self.snd.max && (n > 0 || fin) {
            // Data went out with nothing outstanding: the user timeout
            // counts from here, and probing is over (Linux
            // `tcp_send_probe0` once `packets_out`).
            self.rtx.stall_since = Some(now);
            self.timers.probes_out = 0;
        }
        self.ecn_sent(cwr);
        // (A no-op if `dispatch` restarted cwnd before sizing the packet.)
        self.restart_after_idle(now);
        if n > 0 && self.snd.max == self.snd.una {
            // Linux `tcp_event_data_sent`: CUBIC moves its epoch past the
            // time nothing was sent.
            self.cong.cc.on_tx_start(now, self.timers.last_send_at);
        }
        self.sent_ack(ctr, now);
        // Linux counts a TSO segment as the segments it stands for
        // (`tcp_skb_pcount`), as the wire carries them.
        let pcount = n.div_ceil(self.max_payload().max(1)).max(1);
        ctr.OutSegs += (pcount - 1) as u64;
        if n > 0 {
            let segs = u32::try_from(pcount).unwrap_or(u32::MAX);
            let st = &mut self.stats;
            st.segs_out = st.segs_out.wrapping_add(segs - 1);
            st.data_segs_out = st.data_segs_out.wrapping_add(segs);
            st.bytes_sent += n as u64;
            if seq.lt(self.snd.max) {
                st.bytes_retrans += n as u64;
            }
        }
        let end = seq + n + usize::from(fin);
        let len = n + usize::from(fin);
        self.cong.pacer.on_sent(len);
        // RFC 6937: "On any data transmission or retransmission: prr_out
        // += (data sent)".
        if let Some(w) = self.recovery.as_mut().and_then(|r| r.prr.as_mut()) {
            w.prr.on_sent(len);
        } else if let Some(c) = self.cwr_mut() {
            c.prr.prr.on_sent(len);
        }
        let tx = self.rate_tx(now);
        if seq.lt(self.snd.max) {
            ctr.RetransSegs += 1;
            self.rtx.total += 1;
            // Karn: a retransmission covering the timed segment voids it.
            if let Some((t, _)) = self.rtx.rtt_probe {
                if t.ge(seq) && t.lt(end) {
                    self.rtx.rtt_probe = None;
                }
            }
        } else {
            if self.rtx.rtt_probe.is_none() && !self.opt.ts && n > 0 {
                self.rtx.rtt_probe = Some((seq, now));
            }
            self.rtx.scoreboard.push(seq, end, now);
            self.rtx.scoreboard.stamp_tx(seq, end, tx);
        }
        self.snd.max = self.snd.max.max(end);
        self.arm_rto(now);
        true
    }

    /// `emit` refused a data segment: `local_drop`, because the link's
    /// queue drops everything (see `crate::Stack::set_local_drop`; Linux's
    /// `tcp_transmit_skb` returning `NET_XMIT_DROP`, a positive error);
    /// otherwise because the route to the peer is gone (a negative error,
    /// `-EHOSTUNREACH`). Either way the segment did not leave and stays
    /// unsent (Linux: `tcp_write_xmit` stops at the skb it failed to
    /// send), and the connection's timers, not a retry loop, decide when
    /// to try again, so that one whose route never comes back times out.
    fn blocked(&mut self, now: Instant, local_drop: bool) {
        if !local_drop {
            self.refused();
        }
        // With data in flight the RTO (or RACK, TLP) timer goes on. With
        // none, the probe timer (`tcp_check_probe_timer`:
        // `tcp_probe0_base`, the RTO but at least 200 ms), whose expiries
        // count towards `tcp_retries2`.
        if self.snd.una == self.snd.max && self.timers.persist_at.is_none() {
            let base = self.rtx.rtt.rto().max(Duration::from_millis(200));
            let d = if self.timers.probes_out == 0 {
                base
            } else if local_drop {
                // The probe that expiry counted met the full queue:
                // `tcp_send_probe0`'s `TCP_RESOURCE_PROBE_INTERVAL`,
                // without backoff (Linux backs off only for a probe that
                // left).
                self.timers.persist_backoff = self.timers.persist_backoff.saturating_sub(1);
                self.clamp_probe0_to_user_timeout(now, RESOURCE_PROBE_INTERVAL)
            } else {
                // A probe the route refused is backed off like one that
                // left (`tcp_send_probe0`, `err <= 0`).
                self.probe0_interval(now, base)
            };
            self.timers.persist_at = Some(now + d);
        } else if self.snd.una != self.snd.max && self.rtx.rto_at.is_none() {
            if local_drop && self.recovery.as_ref().is_some_and(|r| r.in_loss) {
                // The retransmission of a timeout met the full queue
                // (Linux `tcp_retransmit_timer`, a positive error): the
                // timer again in 500 ms, not backed off. The timeout still
                // counts as a retry (Linux's `icsk_retransmits` too):
                // tcp_retries2 of them end the connection, after about
                // 8 s where Linux's time-based `tcp_write_timeout` waits
                // the backed-off time.
                self.rtx.rtt.unbackoff();
                self.rtx.rto_at = Some(now + RESOURCE_PROBE_INTERVAL);
            } else {
                // (Refused by the route: the timer backed off as usual.)
                self.arm_rto(now);
            }
        }
        // Nothing to try before a timer fires (an ACK's arrival does not
        // retry here, as it does in Linux's `tcp_data_snd_check`).
        self.wait_for_timers(now);
    }

    /// The probe timer's interval: `base` doubled for each probe sent
    /// without answer, up to `tcp_retries2` doublings (Linux
    /// `tcp_send_probe0` stops there) and the largest RTO, and no later
    /// than the user timeout.
    fn probe0_interval(&self, now: Instant, base: Duration) -> Duration {
        let mut d = base;
        for _ in 0..self
            .timers
            .persist_backoff
            .min(self.cfg.max_retries)
            .min(16)
        {
            d = d.saturating_mul(2);
        }
        self.clamp_probe0_to_user_timeout(now, d.min(self.cfg.max_rto.get()))
    }

    /// Linux `tcp_clamp_probe0_to_user_timeout`: once probing, the next
    /// probe timer fires no later than TCP_USER_TIMEOUT after the first
    /// probe (at least 2 ms from now, `TCP_TIMEOUT_MIN`), where the timer
    /// gives up.
    fn clamp_probe0_to_user_timeout(&self, now: Instant, d: Duration) -> Duration {
        match (self.rtx.user_timeout, self.rtx.stall_since) {
            (Some(ut), Some(t0)) if self.timers.probes_out > 0 => {
                let left = (t0 + ut.get()).saturating_duration_since(now);
                d.min(left.max(Duration::from_millis(2)))
            }
            _ => d,
        }
    }

    /// A segment carrying our current ACK, window and options.
    fn base_repr(&mut self, now: Instant, seq: SeqNum) -> TcpRepr<'static> {
        let synchronized = !matches!(self.state(), State::SynSent);
        let window = self.advertise_window(false);
        TcpRepr {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            seq,
            ack: if synchronized {
                Some(self.rcv.nxt)
            } else {
                None
            },
            window,
            timestamp: if self.opt.ts {
                Some((self.ts_now(now), self.opt.ts_recent))
            } else {
                None
            },
            sack_ranges: self.sack_blocks(),
            // RFC 3168 6.1.3: ECE on every segment until the peer's CWR.
            ece: self.ecn_ece(),
            ..TcpRepr::default()
        }
    }

    fn sent_ack(&mut self, ctr: &mut TcpCounters, now: Instant) {
        self.ack_state_sent();
        self.timers.last_send_at = now;
        ctr.OutSegs += 1;
        // Linux sends a passive open's SYN-ACKs from the request socket:
        // not the connection's segments.
        if !(self.passive && self.state() == State::SynReceived) {
            self.stats.segs_out = self.stats.segs_out.wrapping_add(1);
        }
    }

    /// A segment carrying our ACK was handed to the link (Linux
    /// `tcp_event_ack_sent`, which `__tcp_transmit_skb` calls before the
    /// transmit, so also for one the route refused).
    fn ack_state_sent(&mut self) {
        if self.ack.unacked > 0 || self.ack.delay_at.is_some() {
            self.ack.quick = self.ack.quick.saturating_sub(1);
        }
        self.ack.now = false;
        self.ack.dsack = None;
        self.ack.delay_at = None;
        self.ack.unacked = 0;
        self.ack.pushed = 0;
        self.ack.last_sent = self.rcv.nxt;
    }

    /// `emit` refused a segment: the route to the peer is gone (or the
    /// segment does not fit it). Linux (`inet_sk_rebuild_header`) keeps
    /// the failure as the socket's soft error, reported if the
    /// connection then times out.
    fn refused(&mut self) {
        self.ack_state_sent();
        if self.app.soft_error.is_none() {
            self.app.soft_error = Some(TcpError::HostUnreachable);
        }
    }

    /// Nothing more to try before a timer fires.
    fn wait_for_timers(&mut self, now: Instant) {
        let next = self
            .next_timer_at()
            .unwrap_or(now + RESOURCE_PROBE_INTERVAL);
        self.timers.tx_retry_at = Some(next.max(now + Duration::from_micros(1)));
    }

    /// The window to advertise; records the right edge. RFC 1122 4.2.3.3:
    /// "The suggested SWS avoidance algorithm for the receiver is to keep
    /// RCV.NXT+RCV.WND fixed until the reduction satisfies: RCV.BUFF -
    /// RCV.USER - RCV.WND >= min( Fr * RCV.BUFF, Eff.snd.MSS )".
    fn advertise_window(&mut self, syn: bool) -> u16 {
        let avail = self.rcv_wnd_available();
        let cur = self.rcv_wnd();
        let thresh = (self.rcv.queue.ring.capacity() / 2).min(usize::from(self.opt.adv_mss));
        let mut win = if avail > cur && avail - cur < thresh {
            cur
        } else {
            avail
        };
        // Never shrink the window (RFC 9293 3.8.6.2.2 "SHOULD NOT shrink").
        win = win.max(cur);
        if syn {
            // RFC 7323 2.2: "The window field in a segment where the SYN bit
            // is set MUST NOT be scaled".
            let w = win.min(0xffff);
            self.rcv.adv = self.rcv.nxt + w;
            return w as u16;
        }
        let shift = if self.opt.ws { self.opt.rcv_wscale } else { 0 };
        // Round up so the advertised edge never moves left (Linux does too).
        let field = win.div_ceil(1usize << shift).min(0xffff);
        let w = field << shift;
        if self.rcv.nxt.gt(self.rcv.adv) || (self.rcv.nxt + w).gt(self.rcv.adv) {
            self.rcv.adv = self.rcv.nxt + w;
        }
        field as u16
    }

    fn sack_blocks(&self) -> [Option<(SeqNum, SeqNum)>; 4] {
        let mut b = self.sack_blocks_data();
        // A FIN received out of order is held too: the block that ends at
        // it covers it (as Linux's, whose skb carries the FIN).
        if let Some(fin) = self.rcv.fin {
            for (_, r) in b.iter_mut().flatten() {
                if *r == fin {
                    *r = fin + 1u32;
                }
            }
        }
        b
    }

    fn sack_blocks_data(&self) -> [Option<(SeqNum, SeqNum)>; 4] {
        if !self.opt.sack {
            return [None; 4];
        }
        let max = if self.opt.ts { 3 } else { 4 };
        let Some(d) = self.ack.dsack else {
            if self.rcv.queue.has_out_of_order() {
                return self.rcv.queue.sack_blocks(self.rcv.nxt, max);
            }
            return [None; 4];
        };
        // RFC 2883 4: "If the D-SACK block reports a duplicate contiguous
        // sequence from a (possibly larger) block of data in the
        // receiver's data queue above the cumulative acknowledgement, then
        // the second SACK block ... SHOULD specify this (possibly larger)
        // block"; the D-SACK block itself goes first.
        let mut out = [None; 4];
        let rest = if self.rcv.queue.has_out_of_order() {
            self.rcv.queue.sack_blocks(self.rcv.nxt, max - 1)
        } else {
            [None; 4]
        };
        let mut blocks = core::iter::once(Some(d)).chain(rest);
        for o in out.iter_mut() {
            *o = blocks.next().flatten();
        }
        out
    }

    fn max_payload(&self) -> usize {
        let n = self.sack_blocks().iter().flatten().count();
        let sack = if n > 0 { 4 + 8 * n } else { 0 };
        self.max_payload_base().saturating_sub(sack).max(1)
    }

    /// Largest payload given the negotiated MSS and our timestamp option.
    pub(super) fn max_payload_base(&self) -> usize {
        let ts = if self.opt.ts { 12 } else { 0 };
        usize::from(self.opt.smss).saturating_sub(ts).max(1)
    }

    pub(super) fn ts_now(&self, now: Instant) -> u32 {
        (now.total_millis() as u32).wrapping_add(self.opt.ts_offset)
    }
}
