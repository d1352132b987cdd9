//! The path MTU as a connection sees it: ICMP "fragmentation needed"
//! (RFC 1191, validated as RFC 5927 asks), the retransmission at once of
//! what was too large (Linux `tcp_simple_retransmit`), and the effective
//! send MSS (Linux `tcp_sync_mss`).

use super::conn::Connection;
use super::recovery::{Recovery, Undo};
use crate::pmtu::MIN_PMTU;

/// IPv4 and TCP headers without options: MSS = MTU - 40.
const HEADERS: usize = 40;

impl Connection {
    /// A validated ICMP "fragmentation needed" reports a next-hop MTU of
    /// `mtu` (0: the router did not say). RFC 1191 6.1: "When a Datagram
    /// Too Big message is received, [TCP] should reduce its estimate of
    /// the PMTU ... to the value in the Next-Hop MTU field", and "TCP
    /// performance [suffers] ... unless it retransmits immediately"; RFC
    /// 1191 3: "the source host ... MUST NOT increase its estimate of the
    /// Path MTU in response to the contents of a Datagram Too Big message."
    /// As Linux (`__ip_rt_update_pmtu`, `ip_rt_min_pmtu`), a report below
    /// 552 (or none) is taken as 552 (MSS 512): the Stack then clears DF
    /// towards that destination (`crate::pmtu`), and a forged report
    /// cannot shrink segments further than that.
    pub(super) fn on_frag_needed(&mut self, mtu: u16) {
        let mtu = usize::from(mtu).max(MIN_PMTU);
        let mss = mtu - HEADERS;
        if mss >= self.opt.route_mss {
            // Not smaller than what we use: stale, or about a segment
            // that was too large for another reason (IP options).
            return;
        }
        self.opt.route_mss = mss;
        let before = self.opt.smss;
        self.sync_mss();
        if self.opt.smss < before {
            self.simple_retransmit();
        }
    }

    /// Linux `tcp_sync_mss`: the effective send MSS from the peer's MSS
    /// and the path's.
    pub(super) fn sync_mss(&mut self) {
        let mss = self.opt.peer_mss.min(self.opt.route_mss);
        // Linux `tcp_min_snd_mss` (48): never less, whatever a peer says.
        self.opt.smss = mss.max(48);
    }

    /// Linux `tcp_simple_retransmit` after the MSS shrank: the segments in
    /// flight larger than the new MSS cannot have arrived; mark them lost
    /// and send them again now (re-cut to the new size by `retransmit`),
    /// without waiting for the RTO. "Don't muck with the congestion
    /// window here. Reason is that we do not increase amount of _data_ in
    /// network, but units changed": the congestion window stays, the
    /// connection goes into the loss state (Linux `TCP_CA_Loss`) until
    /// what is in flight now is acknowledged.
    pub(super) fn simple_retransmit(&mut self) {
        if !self.can_send_data_state() {
            return;
        }
        let max = self.max_payload_base();
        let fin_end = self
            .snd
            .queue
            .fin_queued
            .then(|| self.snd.queue.fin_seq() + 1u32);
        let too_big: Vec<_> = self
            .rtx
            .scoreboard
            .iter()
            .filter(|s| !s.sacked && !s.lost)
            .filter(|s| s.len() - usize::from(Some(s.end) == fin_end) > max)
            .map(|s| s.start)
            .collect();
        if too_big.is_empty() {
            return;
        }
        for start in too_big {
            self.rtx.scoreboard.mark_lost(start);
        }
        match self.recovery.as_mut() {
            Some(r) => {
                r.in_loss = true;
                r.recover = self.snd.max;
                r.rtx_head_now = true;
            }
            None => {
                self.recovery = Some(Recovery {
                    recover: self.snd.max,
                    in_loss: true,
                    rtx_head_now: true,
                    undo: Undo {
                        prior_cwnd: self.cong.cc.cwnd(),
                        prior_ssthresh: self.cong.cc.ssthresh(),
                        retrans_ts: None,
                    },
                });
            }
        }
        self.rtx.last_recover = Some(self.snd.max);
        self.rtx.dupacks = 0;
        self.tlp.at = None;
        self.tlp.pending = false;
        self.tlp.end = None;
    }
}
