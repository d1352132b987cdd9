//! The path MTU as a connection sees it: ICMP "fragmentation needed"
//! (RFC 1191, validated as RFC 5927 asks), the retransmission at once of
//! what was too large (Linux `tcp_simple_retransmit`), black-hole
//! detection and probing for a larger MTU (RFC 4821, as Linux's
//! `tcp_mtu_probing`), and the effective send MSS (Linux `tcp_sync_mss`).
//!
//! # Probing (RFC 4821), the subset of Linux we implement
//!
//! RFC 2923 2.1: a path that drops large datagrams without sending ICMP
//! (a "black hole") stalls a connection forever: its retransmissions are
//! as large as what was lost. RFC 4821 lets TCP find the MTU itself.
//! As Linux:
//!
//! - *Black hole detection* (Linux `tcp_write_timeout` ->
//!   `tcp_mtu_probing`, with `tcp_mtu_probing` >= 1): RFC 1122 4.2.3.5
//!   "when the number of transmissions of the same segment reaches a
//!   threshold R1, pass negative advice" with R1 = 3 (Linux
//!   `tcp_retries1`): at the fourth retransmission timeout in a row,
//!   probing is turned on, which caps the MSS at the search floor
//!   (`base_mss`, 1024: MTU 1064); each later timeout of the same series
//!   halves the floor, down to `mtu_probe_floor`. (Linux turns R1 into
//!   the time 3 timeouts backed off from 200 ms take, 3 s; with a 200 ms
//!   RTO that is the same fourth timeout.)
//! - *Search*: a binary search between `search_low` (works) and
//!   `search_high` (the peer's MSS + 40, or the path MTU): when the
//!   sender has at least the probe plus four more segments of new data,
//!   cwnd of at least 11 segments with room for two, no loss recovery
//!   and no SACK blocks of its own to send, it sends one segment sized to
//!   the middle of the range (Linux `tcp_mtu_probe`). Acknowledged: the
//!   floor rises to it and so does the MSS (`TCPMTUPSuccess`). Lost (loss
//!   detection finds it first in line): the ceiling falls below it, the
//!   probe is sent again cut to the MSS without a congestion response
//!   (`TCPMTUPFail`, Linux's "MTU probe failure: don't reduce cwnd").
//!   Lost by a timeout: the same. The search stops when the range is
//!   narrower than `probe_threshold` (8 bytes) and starts again after
//!   `probe_interval` (10 minutes).
//!
//! Left out: Linux builds the probe by merging queued buffers and lowers
//! cwnd by one packet while it is out (our cwnd counts bytes, so the
//! probe's bytes count as they are); Linux raises an existing
//! connection's MSS again when the route's learned MTU expires (ours
//! keep an ICMP-lowered MSS; probing, if on, searches below it).

use ustack_wire::tcp::SeqNum;

use super::conn::Connection;
use super::recovery::{Recovery, Undo};
use super::shared::ProbeTunables;
use super::TcpCounters;
use crate::pmtu::MIN_PMTU;
use crate::time::Instant;

/// IPv4 and TCP headers without options: MSS = MTU - 40.
pub(super) const HEADERS: usize = 40;

/// A route change as a Linux socket meets it: the change makes the
/// socket's cached route obsolete; the next transmission looks the route
/// up again (`__sk_dst_check` in `ip_queue_xmit`), and the next
/// `tcp_current_mss` after that finds the route's MTU differs from the one
/// the MSS was computed for (`icsk_pmtu_cookie`) and syncs the MSS. So
/// what is sent in the pass that first uses the new route still has the
/// old segment size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RouteSync {
    /// The MSS follows the route.
    Current,
    /// The route changed; nothing has been sent on the new one yet.
    Changed,
    /// Sent on the new route; the MSS syncs at the next send pass.
    Attached,
}

/// Linux `tcp_min_snd_mss`.
const MIN_SND_MSS: usize = 48;

/// RFC 1122 4.2.3.5 R1 (Linux `tcp_retries1`): retransmission timeouts in
/// a row after which a black hole is suspected.
const R1: u32 = 3;

/// Segments the probe must be followed by (Linux: `tp->reordering + 1`,
/// with the default reordering of 3), so that its loss is detected by
/// duplicate ACKs or SACKs rather than by a timeout.
const PROBE_FOLLOWERS: usize = 4;

/// Least cwnd, in segments, to probe with (Linux: 11).
const PROBE_MIN_CWND: usize = 11;

/// When the path MTU is probed (Linux `tcp_mtu_probing`).
///
/// The default is Linux's, `Off`. `OnBlackHole` would rescue connections
/// across a path that drops large datagrams and filters the ICMP errors
/// (RFC 2923 2.1), which otherwise stall for good, and costs nothing where
/// timeouts are rare. But timeouts in a row are also what heavy random
/// loss looks like: the simulation soak (3000 seeds per family) found
/// links losing about 30% each way where "black hole detection" fired
/// again and again, each time halving the MSS (RFC 4821 7.7: "Upon
/// additional successive timeouts, search_low and eff_pmtu SHOULD be
/// halved"; Linux alike) down to 48, while the probes that would raise
/// it need a loss-free window of 11 segments that such a link never
/// gives: 40 KB then took over an hour (`mixed 2245`, `mixed 1829` with
/// `Always`). A stack that knows its paths have black holes turns it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MtuProbing {
    /// Linux 0 (the default): never.
    #[default]
    Off,
    /// Linux 1: from the moment a black hole is suspected (R1
    /// retransmission timeouts in a row).
    OnBlackHole,
    /// Linux 2: always, from the first segment (starting at `base_mss`).
    Always,
}

/// Probing state (Linux `icsk_mtup`), once probing is on; MTUs are IP
/// datagram sizes. Boxed in the connection (`size_of::<Connection>()` is
/// budgeted and few connections ever probe).
#[derive(Debug, Clone)]
pub(super) struct Mtup {
    /// Known to work (Linux `search_low`).
    search_low: usize,
    /// Known (or presumed) not to (Linux `search_high`).
    search_high: usize,
    /// The outstanding probe `[start, end)` and the MTU it tests.
    probe: Option<(SeqNum, SeqNum, usize)>,
    /// When the current search started (Linux `probe_timestamp`).
    stamp: Instant,
}

impl Mtup {
    /// Linux `tcp_mtup_init`: from `base_mss` up to `ceiling` (an MTU).
    pub(super) fn new(base_mss: u16, ceiling: usize, now: Instant) -> Mtup {
        Mtup {
            search_low: usize::from(base_mss) + HEADERS,
            search_high: ceiling,
            probe: None,
            stamp: now,
        }
    }
}

impl Connection {
    /// The path of this connection was found to carry `mtu` bytes (in
    /// IPv4 terms, headers of 40) by a report another connection to the
    /// same destination validated: as Linux, whose sockets all read the
    /// route's lowered MTU (`dst_mtu` in `tcp_current_mss`).
    pub(crate) fn path_mtu_reduced(&mut self, mtu: u16) {
        self.on_frag_needed(mtu);
    }

    /// The route to the peer changed (`Stack::set_route_metrics`): its
    /// path now carries `mss` + 40 bytes. See [`RouteSync`].
    pub(crate) fn route_changed(&mut self, mss: u16) {
        let mss = mss.max(64);
        if mss == self.opt.route_mss {
            return;
        }
        self.opt.route_mss = mss;
        if self.opt.route_sync == RouteSync::Current {
            self.opt.route_sync = RouteSync::Changed;
        }
    }

    /// A new connection takes what its route configures: the MSS to
    /// announce (Linux `tcp_mss_clamp(tp, dst_metric_advmss(dst))`) and the
    /// initial congestion window (`tcp_init_cwnd`).
    pub(crate) fn apply_route(&mut self, m: Option<crate::RouteMetrics>) {
        let Some(m) = m else {
            return;
        };
        if let Some(a) = m.advmss {
            self.opt.adv_mss = a.min(self.cfg.user_mss.unwrap_or(u16::MAX)).max(64);
            self.ack.rcv_mss = super::conn::DEFAULT_MSS.min(usize::from(self.opt.adv_mss));
        }
        if let Some(n) = m.initcwnd.filter(|&n| n > 0) {
            self.cfg.initial_cwnd = n;
            self.cong.cc =
                self.cfg
                    .congestion_control
                    .build(n, self.max_payload_base(), self.cfg.pacing);
        }
    }

    /// At the start of a send pass (Linux `tcp_current_mss`): a route
    /// that changed and has carried a segment since sets the MSS now.
    pub(super) fn route_sync_before_pass(&mut self) {
        if self.opt.route_sync == RouteSync::Attached {
            self.opt.route_sync = RouteSync::Current;
            self.sync_mss();
        }
    }

    /// After a send pass that sent `sent` segments.
    pub(super) fn route_sync_after_pass(&mut self, sent: bool) {
        if sent && self.opt.route_sync == RouteSync::Changed {
            self.opt.route_sync = RouteSync::Attached;
        }
    }

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
        let mss = u16::try_from(mtu - HEADERS).unwrap_or(u16::MAX);
        if mss >= self.opt.route_mss {
            // Not smaller than what we use: stale, or about a segment
            // that was too large for another reason (IP options).
            return;
        }
        self.opt.route_mss = mss;
        // A probe larger than the path cannot succeed (the ICMP may be
        // about it): forget it, the ceiling is the path now.
        if let Some(m) = self.mtup.as_deref_mut() {
            m.probe = None;
        }
        let before = self.opt.smss;
        self.sync_mss();
        if self.opt.smss < before {
            self.simple_retransmit();
        }
    }

    /// The largest MTU the search may try: the peer's MSS or the path's,
    /// plus headers (Linux `mss_clamp` + 40, capped by `tcp_sync_mss`).
    pub(super) fn path_ceiling(&self) -> usize {
        usize::from(self.opt.peer_mss.min(self.opt.route_mss)) + HEADERS
    }

    /// Linux `tcp_sync_mss`: the effective send MSS from the peer's MSS,
    /// the path's, and while probing the search's floor.
    pub(super) fn sync_mss(&mut self) {
        let ceiling = self.path_ceiling();
        let mut mss = ceiling - HEADERS;
        if let Some(m) = self.mtup.as_deref_mut() {
            m.search_high = m.search_high.min(ceiling);
            mss = mss.min(m.search_low.saturating_sub(HEADERS));
        }
        // Linux `tcp_min_snd_mss` (48): never less, whatever a peer says.
        self.opt.smss = u16::try_from(mss.max(MIN_SND_MSS)).unwrap_or(u16::MAX);
    }

    /// A retransmission timeout (after `on_rto` counted it in
    /// `rtx.retries`): an outstanding probe failed, and R1 timeouts in a
    /// row suggest a black hole (Linux `tcp_write_timeout` ->
    /// `tcp_mtu_probing`).
    pub(super) fn mtu_on_rto(&mut self, now: Instant, ctr: &mut TcpCounters) {
        let una = self.snd.una;
        if let Some(m) = self.mtup.as_deref_mut() {
            if let Some((start, _, mtu)) = m.probe.take() {
                if start == una {
                    m.search_high = mtu - 1;
                    ctr.TCPMTUPFail += 1;
                }
            }
        }
        if self.cfg.mtu_probing == MtuProbing::Off
            || self.rtx.retries <= R1
            || !self.can_send_data_state()
        {
            return;
        }
        let floor = usize::from(self.cfg.mtu_probe_floor).max(MIN_SND_MSS);
        let base = usize::from(self.cfg.base_mss);
        match self.mtup.as_deref_mut() {
            // "Black hole detection": probing on, the MSS capped at the
            // search floor.
            None => {
                let m = Mtup::new(self.cfg.base_mss, self.path_ceiling(), now);
                self.mtup = Some(Box::new(m));
            }
            // Still nothing gets through: halve the floor.
            Some(m) => {
                let mss = (m.search_low.saturating_sub(HEADERS) >> 1)
                    .min(base)
                    .max(floor);
                m.search_low = mss + HEADERS;
            }
        }
        self.sync_mss();
    }

    /// Linux `tcp_mtu_probe`: the probe to send now, `(seq, payload)`, if
    /// one is due (see the module docs for the conditions).
    pub(super) fn mtu_probe_due(
        &mut self,
        now: Instant,
        tun: ProbeTunables,
    ) -> Option<(SeqNum, usize)> {
        let (low, high) = match self.mtup.as_deref() {
            Some(m) if m.probe.is_none() => (m.search_low, m.search_high),
            _ => return None,
        };
        if self.recovery.is_some()
            || !self.can_send_data_state()
            || self.ack.dsack.is_some()
            || self.rcv.queue.has_out_of_order()
        {
            return None;
        }
        let mss = self.max_payload_base();
        let cwnd = self.cong.cc.cwnd();
        if cwnd < PROBE_MIN_CWND * mss {
            return None;
        }
        let smss = usize::from(self.opt.smss);
        let opts = smss - mss;
        let probe_mtu = (low + high) / 2;
        if probe_mtu > high
            || high.saturating_sub(low) < tun.threshold
            || probe_mtu <= smss + HEADERS
        {
            self.mtu_check_reprobe(now, tun);
            return None;
        }
        let payload = probe_mtu - HEADERS - opts;
        let needed = payload + PROBE_FOLLOWERS * mss;
        let seq = if self.snd.max.lt(self.snd.queue.seq) {
            self.snd.queue.seq
        } else {
            self.snd.max
        };
        let sent = seq.wrapping_sub(self.snd.queue.seq) as usize;
        let unsent = self.snd.queue.buf.len().saturating_sub(sent);
        if unsent < needed
            || self.snd.wnd < needed
            || (seq + needed).gt(self.snd.una + self.snd.wnd)
            || self.pipe() + 2 * mss > cwnd
        {
            return None;
        }
        Some((seq, payload))
    }

    /// The probe `[seq, seq + len)` went out.
    pub(super) fn mtu_probe_sent(&mut self, seq: SeqNum, len: usize) {
        let opts = usize::from(self.opt.smss) - self.max_payload_base();
        if let Some(m) = self.mtup.as_deref_mut() {
            m.probe = Some((seq, seq + len, len + opts + HEADERS));
        }
    }

    /// After an ACK: the probe arrived if SND.UNA covers it (Linux
    /// `tcp_mtup_probe_success`): the floor rises to it, so does the MSS.
    pub(super) fn mtu_probe_acked(&mut self, ctr: &mut TcpCounters) {
        let una = self.snd.una;
        let Some(m) = self.mtup.as_deref_mut() else {
            return;
        };
        let Some((_, end, mtu)) = m.probe else {
            return;
        };
        if !una.ge(end) {
            return;
        }
        m.probe = None;
        m.search_low = mtu;
        self.sync_mss();
        ctr.TCPMTUPSuccess += 1;
    }

    /// Loss detection is about to start fast recovery. If the probe is the
    /// first segment lost (Linux: `snd_una == probe_seq_start`), it is the
    /// probe that failed, not the network that is congested: "MTU probe
    /// failure: don't reduce cwnd" — lower the ceiling and send it again
    /// cut to the MSS (`simple_retransmit`). Returns true when it was so
    /// (no fast recovery then). Any other loss voids the probe.
    pub(super) fn mtu_probe_lost(&mut self, ctr: &mut TcpCounters) -> bool {
        let una = self.snd.una;
        let Some(m) = self.mtup.as_deref_mut() else {
            return false;
        };
        let Some((start, _, mtu)) = m.probe.take() else {
            return false;
        };
        if start != una {
            return false;
        }
        m.search_high = mtu - 1;
        ctr.TCPMTUPFail += 1;
        self.simple_retransmit();
        self.recovery.is_some()
    }

    /// Linux `tcp_mtu_check_reprobe`: a finished search starts again after
    /// `probe_interval`, from the MSS in use up to the peer's.
    fn mtu_check_reprobe(&mut self, now: Instant, tun: ProbeTunables) {
        let ceiling = self.path_ceiling();
        let low = usize::from(self.opt.smss) + HEADERS;
        let Some(m) = self.mtup.as_deref_mut() else {
            return;
        };
        if now.saturating_duration_since(m.stamp) < tun.interval {
            return;
        }
        m.search_high = ceiling;
        m.search_low = low;
        m.stamp = now;
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
            .filter(|s| !s.sacked)
            .filter(|s| s.len() - usize::from(Some(s.end) == fin_end) > max)
            .map(|s| (s.start, s.lost))
            .collect();
        if too_big.is_empty() {
            return;
        }
        // Whatever probe is out is among them, or no longer larger.
        if let Some(m) = self.mtup.as_deref_mut() {
            m.probe = None;
        }
        for (start, lost) in too_big {
            if !lost {
                self.rtx.scoreboard.mark_lost(start);
            }
        }
        match self.recovery.as_mut() {
            Some(r) => {
                r.in_loss = true;
                r.prr = None; // the loss state's window, as Linux
                r.recover = self.snd.max;
                r.rtx_head_now = true;
            }
            None => {
                // As Linux's `tcp_simple_retransmit`: the loss state
                // without a window reduction, so no PRR either.
                self.recovery = Some(Box::new(Recovery {
                    recover: self.snd.max,
                    in_loss: true,
                    rtx_head_now: true,
                    undo: Undo {
                        prior: self.cong.cc.snapshot(),
                        retrans_ts: None,
                    },
                    prr: None,
                }));
            }
        }
        self.rtx.last_recover = Some(self.snd.max);
        self.rtx.dupacks = 0;
        self.tlp.at = None;
        self.tlp.pending = false;
        self.tlp.end = None;
    }
}
