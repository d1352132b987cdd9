//! The connection (a TCB): its state and fields grouped by concern,
//! constructors and the handshake's option negotiation, getters, settings
//! and the application's calls (send, recv, shutdown, close, abort). Every
//! state change goes through [`Connection::set_state`].

use std::net::SocketAddrV4;

use ustack_wire::tcp::{SeqNum, TcpRepr, MAX_WINDOW_SHIFT};

use super::ack::{Cong, Snd};
use super::cc::{CcAlgorithm, CongestionControl};
use super::ecn::EcnState;
use super::input::{AckState, Rcv};
use super::mtu::Mtup;
use super::pacing::Pacer;
use super::rack::Rack;
use super::recovery::{Recovery, Rtx, Tlp};
use super::recv::RecvQueue;
use super::rtt::RttEstimator;
use super::sack::Scoreboard;
use super::send::SendQueue;
use super::timers::Timers;
use super::{KeepAlive, State, TcpConfig, TcpCounters, TcpError};
use crate::time::{Duration, Instant};

/// A snapshot for `ss`-like views.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConnInfo {
    pub state: State,
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    pub send_queue: usize,
    pub recv_queue: usize,
    pub can_recv: bool,
    pub can_send: bool,
    pub pending_error: Option<TcpError>,
    pub srtt: Option<Duration>,
    pub rttvar: Duration,
    pub rto: Duration,
    /// The congestion window the sender obeys now (during fast recovery
    /// PRR's: pipe plus what the last ACK allowed).
    pub cwnd: usize,
    pub ssthresh: usize,
    /// The congestion control algorithm (`cubic`, `newreno`).
    pub congestion_control: &'static str,
    /// In fast recovery (or the recovery after a retransmission timeout).
    pub in_recovery: bool,
    /// Pacing rate in bytes per second; None when not pacing.
    pub pacing_rate: Option<u64>,
    pub smss: usize,
    pub snd_wnd: usize,
    pub rcv_wnd: usize,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub timestamps: bool,
    pub sack: bool,
    pub retransmits: u32,
    /// Bytes of send and receive buffer storage held (grows on demand up to
    /// the configured sizes; see [`Connection::buffer_memory`]).
    pub buffer_memory: usize,
    /// The send buffer's size now (autotuned up to `snd_buf`; what
    /// `send_queue` fills, Linux's `skmem` `tb`).
    pub send_buffer: usize,
    /// Bytes queued and never sent (Linux `tcpi_notsent_bytes`).
    pub notsent: usize,
    /// Linux's congestion-avoidance state (`tcpi_ca_state`): 0 Open,
    /// 1 Disorder (SACKs or duplicate ACKs seen), 2 CWR (reducing the
    /// window for an ECN echo), 3 Recovery, 4 Loss.
    pub ca_state: u8,
    /// Segments sent and not cumulatively acknowledged (`tcpi_unacked`).
    pub unacked_segs: usize,
    /// Of those, SACKed (`tcpi_sacked`).
    pub sacked_segs: usize,
    /// Deemed lost and not SACKed, retransmitted since or not
    /// (`tcpi_lost`, Linux `lost_out`).
    pub lost_segs: usize,
    /// Retransmitted and still in flight (`tcpi_retrans`).
    pub retrans_segs: usize,
    /// Retransmission timeouts in a row (`tcpi_retransmits`).
    pub rto_retries: u32,
    /// Backoff exponent of the RTO or of the probe timer (`tcpi_backoff`,
    /// Linux `icsk_backoff`, which both share).
    pub backoff: u32,
    /// Window or resource probes in a row without an answer
    /// (`tcpi_probes`, Linux `icsk_probes_out`).
    pub probes: u32,
    /// The MSS we advertised (`tcpi_advmss`).
    pub adv_mss: usize,
    /// Our estimate of the peer's segment size (`tcpi_rcv_mss`).
    pub rcv_mss: usize,
    /// RACK's reordering degree in segments (`tcpi_reordering`; 3 until
    /// reordering is seen).
    pub reordering: u32,
    /// Times reordering was seen (`tcpi_reord_seen`).
    pub reord_seen: u32,
    /// When data last came in (or, before any, the last segment:
    /// `tcpi_last_data_recv` counts from the handshake).
    pub last_data_recv_at: Instant,
    /// When any segment last came in (`tcpi_last_ack_recv`).
    pub last_recv_at: Instant,
    /// How many bytes Linux puts in one skb of a write (`tcp_send_mss`'s
    /// size goal: half the largest window the peer offered, in whole
    /// MSS, at most 64 KB): the socket layer's model of the send buffer.
    pub size_goal: usize,
    /// The largest window the peer has offered (Linux `max_window`): a
    /// write pushes (`forced_push`) once it passes half of it.
    pub max_snd_wnd: usize,
    /// Time with data queued (`tcpi_busy_time`), of which limited by the
    /// peer's window (`tcpi_rwnd_limited`) or by the send buffer
    /// (`tcpi_sndbuf_limited`): Linux's chronographs (`tcp_chrono_*`).
    pub busy_time: Duration,
    pub rwnd_limited: Duration,
    pub sndbuf_limited: Duration,
    /// `tcpi_bytes_acked`: bytes (sequence space, our SYN and FIN
    /// included) the peer acknowledged cumulatively.
    pub bytes_acked: u64,
    /// `tcpi_bytes_received`: bytes (and the peer's FIN) received in order.
    pub bytes_received: u64,
    /// `tcpi_bytes_sent`: payload bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// `tcpi_bytes_retrans`: payload bytes retransmitted.
    pub bytes_retrans: u64,
    /// `tcpi_segs_out`, `tcpi_segs_in`: segments sent and received (data,
    /// retransmissions, pure ACKs; a super-segment as its segments).
    pub segs_out: u32,
    pub segs_in: u32,
    /// `tcpi_data_segs_out`, `tcpi_data_segs_in`: those carrying data.
    pub data_segs_out: u32,
    pub data_segs_in: u32,
    /// `tcpi_delivered`: segments delivered to the peer (acknowledged or
    /// SACKed), SYN and FIN included.
    pub delivered: u32,
    /// `tcpi_delivery_rate` (bytes per second, 0 before the first valid
    /// sample) and `tcpi_delivery_rate_app_limited`: the last delivery
    /// rate sample Linux's sampler keeps (`tcp_rate_gen`).
    pub delivery_rate: u64,
    pub delivery_rate_app_limited: bool,
    /// ECN is on (`TCPI_OPT_ECN`).
    pub ecn: bool,
    /// An ECT or CE datagram arrived (`TCPI_OPT_ECN_SEEN`).
    pub ecn_seen: bool,
}

/// One TCP connection (a TCB), sans-IO. Its fields are grouped by concern,
/// each group mostly worked on by one file of this module; data that means
/// something only in some states lives in those states (`Phase`) or in the
/// loss recovery episode (`Recovery`).
#[derive(Debug, Clone)]
pub struct Connection {
    pub(super) cfg: Params,
    /// The state and the data only some states have.
    pub(super) st: Phase,
    pub(super) local: SocketAddrV4,
    pub(super) remote: SocketAddrV4,
    pub(super) passive: bool,
    /// Send sequence space and buffer (`ack.rs`, `output.rs`).
    pub(super) snd: Snd,
    /// Receive sequence space and buffer (`input.rs`).
    pub(super) rcv: Rcv,
    /// Negotiated options (`conn.rs`).
    pub(super) opt: Negotiated,
    /// ACK generation (`input.rs`, `output.rs`).
    pub(super) ack: AckState,
    /// RTT, RTO, scoreboard, RACK (`recovery.rs`, `ack.rs`).
    pub(super) rtx: Rtx,
    /// Tail loss probe (`recovery.rs`).
    pub(super) tlp: Tlp,
    /// Congestion control (`ack.rs`).
    pub(super) cong: Cong,
    /// The loss recovery episode going on, if any (`recovery.rs`); boxed,
    /// as an idle connection has none.
    pub(super) recovery: Option<Box<Recovery>>,
    /// ECN (`ecn.rs`): what was negotiated, what to signal, the CWR
    /// state; boxed, and only for a connection that uses ECN.
    pub(super) ecn: Option<Box<EcnState>>,
    /// Persist, keep-alive, idle clock (`timers.rs`).
    pub(super) timers: Timers,
    /// Path MTU probing, once on (`mtu.rs`): boxed, as few connections
    /// ever need it.
    pub(super) mtup: Option<Box<Mtup>>,
    pub(super) app: App,
    pub(super) rst: Rst,
    pub(super) report: Report,
    /// Linux's per-connection counters (`tcp_info`).
    pub(super) stats: Stats,
    /// Where the sender's time goes (`Connection::update_chrono`): boxed,
    /// and absent until the connection first queues data, as an idle
    /// connection must stay small.
    pub(super) chrono: Option<Box<Chrono>>,
}

/// Per-connection counters with the meaning Linux gives them in
/// `struct tcp_info` (RFC 4898's names in brackets). Sequence space is
/// counted where Linux counts it: `bytes_acked` takes our SYN (active
/// open) and FIN, `bytes_received` the peer's FIN. Segment counts count a
/// TSO or GRO super-segment as the segments it stands for.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stats {
    /// `tcpi_bytes_acked` (tcpEStatsAppHCThruOctetsAcked): how far SND.UNA
    /// has moved.
    pub(super) bytes_acked: u64,
    /// `tcpi_bytes_received` (tcpEStatsAppHCThruOctetsReceived): how far
    /// RCV.NXT has moved past the peer's SYN.
    pub(super) bytes_received: u64,
    /// `tcpi_bytes_sent` (tcpEStatsPerfHCDataOctetsOut): payload bytes
    /// sent, retransmissions included.
    pub(super) bytes_sent: u64,
    /// `tcpi_bytes_retrans` (tcpEStatsPerfOctetsRetrans).
    pub(super) bytes_retrans: u64,
    /// `tcpi_segs_out` (tcpEStatsPerfSegsOut): every segment sent (data,
    /// retransmissions, pure ACKs, probes, RST), not the SYN-ACKs of a
    /// passive open (Linux sends those from the request socket).
    pub(super) segs_out: u32,
    /// `tcpi_segs_in` (tcpEStatsPerfSegsIn): every segment received.
    pub(super) segs_in: u32,
    /// `tcpi_data_segs_out` (tcpEStatsDataSegsOut): those with payload.
    pub(super) data_segs_out: u32,
    /// `tcpi_data_segs_in` (tcpEStatsDataSegsIn).
    pub(super) data_segs_in: u32,
    /// `tcpi_delivered`: segments delivered (cumulatively acknowledged or
    /// SACKed), our SYN and FIN included.
    pub(super) delivered: u32,
    /// Linux's delivery-rate sampler (`tcp_rate.c`): the delivered count
    /// that ends an application-limited stretch (`app_limited`, 0: none),
    /// the last sample kept (`rate_delivered` segments in
    /// `rate_interval_us`, `rate_app_limited`), the send time of the
    /// latest segment delivered (`first_tx_mstamp`) and the time of the
    /// last delivery (`delivered_mstamp`).
    pub(super) app_limited: u32,
    pub(super) rate_delivered: u32,
    pub(super) rate_interval_us: u32,
    pub(super) rate_app_limited: bool,
    pub(super) first_tx: Instant,
    pub(super) delivered_at: Option<Instant>,
}

/// Linux `tcp_skb_pcount`: the segments `len` bytes make at `mss`.
pub(super) fn pcount(len: usize, mss: usize) -> u32 {
    u32::try_from(len.div_ceil(mss.max(1)).max(1)).unwrap_or(u32::MAX)
}

/// Linux's chronographs (`tcp_chrono_start`/`tcp_chrono_stop`): the time
/// spent with data queued, split by what limited the sender, in
/// milliseconds (Linux counts jiffies).
#[derive(Debug, Clone, Copy)]
pub(super) struct Chrono {
    /// What is being timed now (`CHRONO_*`), since `start`.
    kind: u8,
    start: Instant,
    /// Milliseconds spent busy, rwnd-limited, sndbuf-limited.
    stat: [u32; 3],
    /// The application is waiting for send-buffer space (Linux
    /// `SOCK_NOSPACE`), as the socket layer reports it.
    pub(super) nospace: bool,
}

/// `tcp_chrono` values, in Linux's order of precedence.
const CHRONO_NONE: u8 = 0;
const CHRONO_BUSY: u8 = 1;
const CHRONO_RWND: u8 = 2;
const CHRONO_SNDBUF: u8 = 3;

impl Chrono {
    fn new(now: Instant) -> Chrono {
        Chrono {
            kind: CHRONO_NONE,
            start: now,
            stat: [0; 3],
            nospace: false,
        }
    }

    /// Linux `tcp_chrono_set`: close the running interval, open `kind`'s.
    fn set(&mut self, now: Instant, kind: u8) {
        if let Some(s) = usize::from(self.kind)
            .checked_sub(1)
            .and_then(|i| self.stat.get_mut(i))
        {
            *s = s.saturating_add(ms_between(self.start, now));
        }
        self.start = now;
        self.kind = kind;
    }

    /// The totals as of `now`: (busy, rwnd-limited, sndbuf-limited);
    /// busy counts all three, as Linux's `tcpi_busy_time` does.
    fn totals(&self, now: Instant) -> (Duration, Duration, Duration) {
        let mut st = self.stat;
        if let Some(s) = usize::from(self.kind)
            .checked_sub(1)
            .and_then(|i| st.get_mut(i))
        {
            *s = s.saturating_add(ms_between(self.start, now));
        }
        let ms = |v: u32| Duration::from_millis(u64::from(v));
        let busy = st.iter().map(|v| u64::from(*v)).sum::<u64>();
        (Duration::from_millis(busy), ms(st[1]), ms(st[2]))
    }
}

/// Whole milliseconds between two instants as a clock ticking each
/// millisecond counts them (Linux's jiffies).
fn ms_between(a: Instant, b: Instant) -> u32 {
    u32::try_from(b.total_millis().saturating_sub(a.total_millis())).unwrap_or(u32::MAX)
}

/// The connection's state (RFC 9293 3.3.2) with the data that exists only
/// in some states (as netstack3 keeps it in its state enum's variants):
/// no other state can read or leave behind a stale TIME-WAIT deadline, an
/// orphan's FIN-WAIT-2 deadline or the handshake's IRS. (No LISTEN: a
/// listener is the socket table's, not a connection.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Closed,
    SynSent,
    SynReceived {
        /// The peer's initial sequence number: a SYN carrying it again is
        /// a retransmission (our SYN-ACK was lost) or a simultaneous open.
        irs: SeqNum,
    },
    Established,
    FinWait1,
    FinWait2 {
        /// When the application has closed: the end of the wait for the
        /// peer's FIN (Linux `tcp_fin_timeout`).
        orphan_until: Option<Instant>,
    },
    CloseWait,
    Closing,
    LastAck,
    TimeWait {
        /// End of the 2*MSL wait (RFC 9293 3.6.1).
        until: Instant,
    },
}

impl Phase {
    fn state(self) -> State {
        match self {
            Phase::Closed => State::Closed,
            Phase::SynSent => State::SynSent,
            Phase::SynReceived { .. } => State::SynReceived,
            Phase::Established => State::Established,
            Phase::FinWait1 => State::FinWait1,
            Phase::FinWait2 { .. } => State::FinWait2,
            Phase::CloseWait => State::CloseWait,
            Phase::Closing => State::Closing,
            Phase::LastAck => State::LastAck,
            Phase::TimeWait { .. } => State::TimeWait,
        }
    }

    /// The deadline of the state itself (TIME-WAIT, orphaned FIN-WAIT-2).
    pub(super) fn deadline(self) -> Option<Instant> {
        match self {
            Phase::TimeWait { until } => Some(until),
            Phase::FinWait2 { orphan_until } => orphan_until,
            _ => None,
        }
    }
}

/// A duration kept in 32 bits, in milliseconds (saturating at 49 days):
/// what [`Params`] holds, so that an idle connection stays small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ms(u32);

impl Ms {
    pub(super) fn new(d: Duration) -> Ms {
        Ms(u32::try_from(d.as_millis()).unwrap_or(u32::MAX))
    }

    pub(super) fn get(self) -> Duration {
        Duration::from_millis(u64::from(self.0))
    }
}

/// The tunables of [`TcpConfig`] a connection still needs once it exists
/// (the rest went into its buffers, estimator and options when it was
/// created): a copy of these, not of the whole configuration, is what
/// every connection holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Params {
    pub(super) time_wait: Ms,
    pub(super) delayed_ack: Ms,
    pub(super) fin_wait2_timeout: Ms,
    pub(super) max_rto: Ms,
    pub(super) ooo_limit: usize,
    pub(super) initial_cwnd: u32,
    /// The send buffer's ceiling (autotuning grows it up to this).
    pub(super) snd_buf_max: usize,
    pub(super) congestion_control: CcAlgorithm,
    pub(super) pacing: bool,
    /// `TcpConfig::nagle_minshall`.
    pub(super) nagle_minshall: bool,
    pub(super) max_retries: u32,
    pub(super) syn_retries: u32,
    pub(super) synack_retries: u32,
    pub(super) window_scale: bool,
    pub(super) timestamps: bool,
    pub(super) sack: bool,
    pub(super) mtu_probing: super::MtuProbing,
    pub(super) base_mss: u16,
    pub(super) mtu_probe_floor: u16,
    /// `TcpConfig::user_mss` (Linux `TCP_MAXSEG`).
    pub(super) user_mss: Option<u16>,
    pub(super) rfc1337: bool,
    /// `TcpConfig::min_tso_segs` (at least 1).
    pub(super) min_tso_segs: u8,
    /// `TcpConfig::slow_start_after_idle`.
    pub(super) slow_start_after_idle: bool,
}

impl Params {
    fn new(cfg: &TcpConfig) -> Params {
        Params {
            user_mss: cfg.user_mss,
            rfc1337: cfg.rfc1337,
            time_wait: Ms::new(cfg.time_wait),
            delayed_ack: Ms::new(cfg.delayed_ack),
            fin_wait2_timeout: Ms::new(cfg.fin_wait2_timeout),
            max_rto: Ms::new(cfg.max_rto),
            ooo_limit: cfg.ooo_limit,
            initial_cwnd: cfg.initial_cwnd,
            snd_buf_max: cfg.snd_buf.max(1),
            congestion_control: cfg.congestion_control,
            pacing: cfg.pacing,
            nagle_minshall: cfg.nagle_minshall,
            max_retries: cfg.max_retries,
            syn_retries: cfg.syn_retries,
            synack_retries: cfg.synack_retries,
            window_scale: cfg.window_scale,
            timestamps: cfg.timestamps,
            sack: cfg.sack,
            mtu_probing: cfg.mtu_probing,
            base_mss: cfg.base_mss,
            mtu_probe_floor: cfg.mtu_probe_floor,
            min_tso_segs: cfg.min_tso_segs.max(1),
            slow_start_after_idle: cfg.slow_start_after_idle,
        }
    }
}

/// Options negotiated in the handshake, and what they carry.
#[derive(Debug, Clone)]
pub(super) struct Negotiated {
    pub(super) adv_mss: u16,
    /// The MSS the path allows: the route's at first, lowered by ICMP
    /// "fragmentation needed" (RFC 1191, `mtu.rs`). Path MTU = this + 40.
    /// (u16s: a connection's footprint is budgeted, see `mtu.rs`.)
    pub(super) route_mss: u16,
    /// The MSS the peer announced (536 without the option).
    pub(super) peer_mss: u16,
    /// The effective send MSS: the smaller of the two (and of the probing
    /// search's floor, `mtu.rs`). Payload = this less TCP options.
    pub(super) smss: u16,
    /// Where a route change stands (see `RouteSync`).
    pub(super) route_sync: super::mtu::RouteSync,
    pub(super) ws: bool,
    pub(super) snd_wscale: u8,
    pub(super) rcv_wscale: u8,
    pub(super) ts: bool,
    pub(super) sack: bool,
    pub(super) ts_offset: u32,
    pub(super) ts_recent: u32,
    pub(super) ts_recent_at: Instant,
}

/// Application-facing state and settings.
#[derive(Debug, Clone)]
pub(super) struct App {
    pub(super) error: Option<TcpError>,
    /// An ICMP error reported when the connection times out.
    pub(super) soft_error: Option<TcpError>,
    /// The application closed its handle (orphan).
    pub(super) closed: bool,
    pub(super) linger_zero: bool,
    pub(super) nodelay: bool,
    /// `TCP_CORK`: only full-sized segments leave (and what the persist
    /// timer pushes after an RTO, Linux's ceiling).
    pub(super) cork: bool,
    /// The last write had `MSG_MORE`: its partial tail is held until an
    /// ACK, a write without it, or the persist timer (the cork ceiling).
    pub(super) more: bool,
    /// The last write had `MSG_MORE`: its tail is not marked PSH (until a
    /// write without it).
    pub(super) unmarked_tail: bool,
    /// `TCP_NODELAY` turned on: push what cork or Nagle held, once.
    pub(super) push_now: bool,
    /// The next `dispatch` sends at most one packet of new data (Linux
    /// `tcp_push_one`).
    pub(super) push_one: bool,
}

/// Resets owed.
#[derive(Debug, Default, Clone)]
pub(super) struct Rst {
    /// Abort: send <SEQ=SND.NXT><CTL=RST> and close.
    pub(super) pending: bool,
    /// The abort is a close with unread data or linger 0 (TCPAbortOnClose).
    pub(super) on_close: bool,
    /// A reset answering an unacceptable segment: (SEQ, ACK).
    pub(super) reply: Option<(SeqNum, Option<SeqNum>)>,
}

/// What has been reported to the counters and the neighbour cache.
#[derive(Debug, Default, Clone)]
pub(super) struct Report {
    /// ActiveOpens/PassiveOpens was counted.
    pub(super) open_counted: bool,
    /// Counted in CurrEstab.
    pub(super) in_estab: bool,
    pub(super) advice: NeighbourAdvice,
}

/// What a connection learned about reachability of its peer's next hop
/// since the last [`Connection::take_neighbour_advice`], for the neighbour
/// cache (Linux `dst_confirm` / `dst_negative_advice`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighbourAdvice {
    /// Forward progress: an ACK advanced SND.UNA.
    pub confirm: bool,
    /// No progress: the retransmission timer expired. Newer than `confirm`
    /// when both are set.
    pub suspect: bool,
}

/// RFC 9293 3.7.1: "If an MSS Option is not received at connection
/// setup, TCP implementations MUST assume a default send MSS of 536".
pub(super) const DEFAULT_MSS: usize = 536;

/// The window shift we offer for a receive buffer of `buf` bytes.
pub(super) fn window_shift_for(buf: usize) -> u8 {
    let mut s = 0u8;
    while s < MAX_WINDOW_SHIFT && (buf >> s) > 0xffff {
        s += 1;
    }
    s
}

/// The MSS we advertise on a route whose MSS is `route_mss`.
pub(super) fn adv_mss_for(cfg: &TcpConfig, route_mss: u16) -> u16 {
    cfg.mss
        .min(cfg.user_mss.unwrap_or(u16::MAX))
        .min(route_mss.max(64))
        .max(64)
}

/// The offset added to our TSvals (RFC 7323 5.4), derived from the ISS so
/// that a SYN cookie's connection (`syncookie.rs`) finds again the offset
/// its stateless SYN-ACK used.
pub(super) fn ts_offset_for(iss: SeqNum) -> u32 {
    iss.0.rotate_left(13) ^ 0x5a5a_5a5a
}

impl Connection {
    fn new(
        cfg: &TcpConfig,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: SeqNum,
        route_mss: u16,
        now: Instant,
        st: Phase,
    ) -> Connection {
        let adv_mss = adv_mss_for(cfg, route_mss);
        let route_mss = route_mss.max(64);
        let smss = (DEFAULT_MSS as u16).min(route_mss);
        Connection {
            cfg: Params::new(cfg),
            // A connection starts in SYN-RECEIVED only from a listener.
            passive: matches!(st, Phase::SynReceived { .. }),
            st,
            local,
            remote,
            snd: Snd {
                iss,
                una: iss,
                syn_acked: false,
                nxt: iss,
                max: iss,
                wnd: 0,
                wl1: SeqNum(0),
                wl2: iss,
                sml: iss,
                max_wnd: 0,
                queue: SendQueue::new(cfg.snd_buf_initial.clamp(1, cfg.snd_buf.max(1)), iss + 1u32),
                skb_phase: 0,
            },
            rcv: Rcv {
                nxt: SeqNum(0),
                adv: SeqNum(0),
                queue: RecvQueue::new(cfg.rcv_buf.max(1)),
                fin: None,
                fin_received: false,
                urg: None,
                urg_inline: false,
            },
            opt: Negotiated {
                adv_mss,
                route_mss,
                peer_mss: DEFAULT_MSS as u16,
                smss,
                route_sync: super::mtu::RouteSync::Current,
                ws: false,
                snd_wscale: 0,
                rcv_wscale: 0,
                ts: false,
                sack: false,
                ts_offset: ts_offset_for(iss),
                ts_recent: 0,
                ts_recent_at: now,
            },
            ack: AckState {
                now: false,
                delay_at: None,
                unacked: 0,
                last_data_at: None,
                last_sent: SeqNum(0),
                dsack: None,
                rcv_mss: DEFAULT_MSS.min(usize::from(adv_mss)),
                last_oow_at: None,
                last_challenge_at: None,
                quick: 0,
                pingpong: false,
                pushed: 0,
            },
            rtx: Rtx {
                rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
                rto_at: None,
                retries: 0,
                total: 0,
                rtt_probe: None,
                dupacks: 0,
                last_recover: None,
                scoreboard: Scoreboard::default(),
                rack: Rack::new(iss),
                rack_at: None,
                user_timeout: None,
                stall_since: None,
            },
            tlp: Tlp::default(),
            cong: Cong {
                cc: cfg
                    .congestion_control
                    .build(cfg.initial_cwnd, usize::from(smss), cfg.pacing),
                limited: false,
                max_flight: 0,
                usage_seq: None,
                pacer: Pacer::new(cfg.pacing),
            },
            recovery: None,
            ecn: None,
            timers: Timers {
                persist_at: None,
                persist_backoff: 0,
                force_send: false,
                probe_pending: false,
                probes_out: 0,
                keepalive: cfg.keepalive,
                ka_probes: 0,
                last_rcv_at: now,
                last_send_at: now,
                tx_retry_at: None,
            },
            mtup: None,
            app: App {
                cork: false,
                more: false,
                unmarked_tail: false,
                push_now: false,
                push_one: false,
                error: None,
                soft_error: None,
                closed: false,
                linger_zero: false,
                nodelay: cfg.nodelay,
            },
            rst: Rst::default(),
            report: Report::default(),
            stats: Stats::default(),
            chrono: None,
        }
    }

    /// Active open: the connection starts in SYN-SENT and sends its SYN on
    /// the next `dispatch`.
    pub fn connect(
        cfg: &TcpConfig,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: SeqNum,
        route_mss: u16,
        now: Instant,
    ) -> Connection {
        let mut c = Connection::new(cfg, local, remote, iss, route_mss, now, Phase::SynSent);
        c.ecn_request(cfg.ecn);
        c.opt.rcv_wscale = if cfg.window_scale {
            window_shift_for(cfg.rcv_buf)
        } else {
            0
        };
        c
    }

    /// Passive open from a listener's received SYN: the connection starts in
    /// SYN-RECEIVED and sends its SYN-ACK on the next `dispatch`. Data in the
    /// SYN is not accepted (no TCP Fast Open); the peer retransmits it.
    pub fn accept(
        cfg: &TcpConfig,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        syn: &TcpRepr,
        iss: SeqNum,
        route_mss: u16,
        now: Instant,
    ) -> Connection {
        let st = Phase::SynReceived { irs: syn.seq };
        let mut c = Connection::new(cfg, local, remote, iss, route_mss, now, st);
        c.negotiate(syn, now);
        c.ecn_accept_syn(cfg.ecn, syn);
        // Linux's child socket counts the SYN (`tcp_create_openreq_child`).
        c.stats.segs_in = 1;
        c.rcv.nxt = syn.seq + 1u32;
        c.snd.wnd = usize::from(syn.window);
        c.snd.max_wnd = c.snd.wnd;
        c.snd.wl1 = syn.seq;
        c.snd.wl2 = iss;
        c
    }

    /// Take the options of the peer's SYN (RFC 9293 3.7.1, RFC 7323, RFC 2018).
    pub(super) fn negotiate(&mut self, syn: &TcpRepr, now: Instant) {
        // MSS: "the TCP sender MUST use ... the minimum of the received MSS
        // option ... and the path MTU-derived value".
        let peer = syn.max_seg_size.unwrap_or(DEFAULT_MSS as u16).max(64);
        // Linux `mss_clamp`: TCP_MAXSEG bounds what we send as well.
        self.opt.peer_mss = peer.min(self.cfg.user_mss.unwrap_or(u16::MAX).max(64));
        // Linux `tcp_mtup_init` with `tcp_mtu_probing` 2: an active open
        // starts probing before it syncs the MSS (`tcp_connect_init`), so
        // its MSS starts at the search floor; a passive one syncs first
        // (`tcp_v4_syn_recv_sock`), so its MSS is the path's until the
        // next sync. Both then search up to the peer's MSS
        // (`tcp_init_transfer`: `mss_clamp` + 40), which the path's MTU
        // caps at the next sync.
        let probing = self.cfg.mtu_probing == super::MtuProbing::Always;
        if probing && !self.passive {
            self.mtup = Some(Box::new(Mtup::new(
                self.cfg.base_mss,
                self.path_ceiling(),
                now,
            )));
        }
        self.sync_mss();
        if probing {
            let ceiling = usize::from(self.opt.peer_mss) + super::mtu::HEADERS;
            self.mtup = Some(Box::new(Mtup::new(self.cfg.base_mss, ceiling, now)));
        }
        // RFC 7323 2.2: "If a TCP receives a <SYN> segment containing a
        // Window Scale option, it SHOULD send its own Window Scale option
        // in the <SYN,ACK> segment"; scaling is on only if both sent one.
        match (self.cfg.window_scale, syn.window_scale) {
            (true, Some(s)) => {
                self.opt.ws = true;
                self.opt.snd_wscale = s.min(MAX_WINDOW_SHIFT);
                // The configured receive buffer (`rcv_buf`, at least 1).
                self.opt.rcv_wscale = window_shift_for(self.rcv.queue.ring.capacity());
            }
            _ => {
                self.opt.ws = false;
                self.opt.snd_wscale = 0;
                self.opt.rcv_wscale = 0;
            }
        }
        self.opt.sack = self.cfg.sack && syn.sack_permitted;
        match (self.cfg.timestamps, syn.timestamp) {
            (true, Some((tsval, _))) => {
                self.opt.ts = true;
                self.opt.ts_recent = tsval;
                self.opt.ts_recent_at = now;
            }
            _ => self.opt.ts = false,
        }
        self.cong.cc = self.cfg.congestion_control.build(
            self.cfg.initial_cwnd,
            self.max_payload_base(),
            self.cfg.pacing,
        );
    }

    /// SND.MAX: the highest sequence number sent (plus one).
    pub fn snd_max(&self) -> SeqNum {
        self.snd.max
    }

    pub fn state(&self) -> State {
        self.st.state()
    }

    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    pub fn remote(&self) -> SocketAddrV4 {
        self.remote
    }

    /// Created by a listener (passive open).
    pub fn is_passive(&self) -> bool {
        self.passive
    }

    /// Bytes queued by the application and not yet acknowledged.
    pub fn send_queue(&self) -> usize {
        self.snd.queue.buf.len()
    }

    /// Bytes received in order and not yet read.
    pub fn recv_queue(&self) -> usize {
        self.rcv.queue.ring.len()
    }

    /// Bytes of buffer storage this connection holds (send plus receive
    /// ring). The rings start empty and grow by doubling as data is
    /// buffered, never past `snd_buf`/`rcv_buf`; windows and
    /// [`Connection::send_capacity`] are computed from the configured sizes.
    pub fn buffer_memory(&self) -> usize {
        self.snd.queue.buf.allocated() + self.rcv.queue.ring.allocated()
    }

    /// Free space in the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.snd.queue.buf.free()
    }

    /// The send buffer's size now: `snd_buf_initial`, grown with cwnd up to
    /// `snd_buf` (autotuning); what `send_capacity` is measured against.
    pub fn send_buffer_size(&self) -> usize {
        self.snd.queue.buf.capacity()
    }

    /// A `recv` would not block: data, end of stream, or an error.
    pub fn can_recv(&self) -> bool {
        !self.rcv.queue.ring.is_empty()
            || self.rcv.fin_received
            || self.app.error.is_some()
            || (self.state() == State::Closed && self.report.open_counted)
    }

    /// A `send` would not block: buffer space in a sending state, or an error.
    pub fn can_send(&self) -> bool {
        self.app.error.is_some()
            || (matches!(
                self.state(),
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            ) && !self.snd.queue.fin_queued
                && self.snd.queue.buf.free() > 0)
    }

    /// The error that ended (or is ending) the connection, if any.
    pub fn pending_error(&self) -> Option<TcpError> {
        self.app.error
    }

    /// Take the error (like `SO_ERROR`).
    pub fn take_error(&mut self) -> Option<TcpError> {
        self.app.error.take()
    }

    /// Connection reached ESTABLISHED at some point (or is there).
    pub fn is_synchronized(&self) -> bool {
        !matches!(
            self.state(),
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    /// End of stream was received and everything before it read.
    pub fn is_eof(&self) -> bool {
        self.rcv.fin_received && self.rcv.queue.ring.is_empty()
    }

    pub fn srtt(&self) -> Option<Duration> {
        self.rtx.rtt.srtt()
    }

    pub fn rto(&self) -> Duration {
        self.rtx.rtt.rto()
    }

    /// The congestion window the sender obeys now: the controller's, or
    /// during fast recovery PRR's (RFC 6937).
    pub fn cwnd(&self) -> usize {
        self.send_cwnd()
    }

    pub fn ssthresh(&self) -> usize {
        self.cong.cc.ssthresh()
    }

    /// The congestion control algorithm's name (`cubic`, `newreno`).
    pub fn congestion_algorithm(&self) -> &'static str {
        self.cong.cc.name()
    }

    /// Pacing rate in bytes per second now; None when not pacing (off, or
    /// no RTT measured yet).
    pub fn pacing_rate(&self) -> Option<u64> {
        if !self.cong.pacer.enabled {
            return None;
        }
        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
        super::pacing::Pacer::rate(
            self.send_cwnd(),
            self.cong.cc.ssthresh(),
            flight,
            self.rtx.rtt.srtt(),
        )
    }

    /// The effective send MSS.
    pub fn mss(&self) -> usize {
        usize::from(self.opt.smss)
    }

    pub fn nodelay(&self) -> bool {
        self.app.nodelay
    }

    /// Take (and clear) the reachability advice gathered since the last call.
    pub fn take_neighbour_advice(&mut self) -> NeighbourAdvice {
        std::mem::take(&mut self.report.advice)
    }

    pub fn info(&self) -> TcpConnInfo {
        let totals = self.rtx.scoreboard.totals();
        let (busy_time, rwnd_limited, sndbuf_limited) = self
            .chrono
            .as_ref()
            .map_or_else(Default::default, |c| c.totals(c.start));
        TcpConnInfo {
            state: self.state(),
            local: self.local,
            remote: self.remote,
            send_queue: self.send_queue(),
            recv_queue: self.recv_queue(),
            can_recv: self.can_recv(),
            can_send: self.can_send(),
            pending_error: self.app.error,
            srtt: self.rtx.rtt.srtt(),
            rttvar: self.rtx.rtt.rttvar(),
            rto: self.rtx.rtt.rto(),
            cwnd: self.send_cwnd(),
            ssthresh: self.cong.cc.ssthresh(),
            congestion_control: self.cong.cc.name(),
            in_recovery: self.recovery.is_some(),
            pacing_rate: self.pacing_rate(),
            smss: usize::from(self.opt.smss),
            snd_wnd: self.snd.wnd,
            rcv_wnd: self.rcv_wnd(),
            snd_wscale: self.opt.snd_wscale,
            rcv_wscale: self.opt.rcv_wscale,
            timestamps: self.opt.ts,
            sack: self.opt.sack,
            retransmits: self.rtx.total,
            buffer_memory: self.buffer_memory(),
            send_buffer: self.send_buffer_size(),
            notsent: self.notsent(),
            ca_state: self.ca_state(),
            unacked_segs: self.rtx.scoreboard.seg_count(),
            sacked_segs: totals.sacked as usize,
            lost_segs: totals.lost_out as usize,
            retrans_segs: totals.retrans_out as usize,
            rto_retries: self.rtx.retries,
            probes: self.timers.probes_out,
            backoff: self
                .rtx
                .rtt
                .backoff_count()
                .saturating_add(self.timers.persist_backoff),
            adv_mss: usize::from(self.opt.adv_mss),
            rcv_mss: self.ack.rcv_mss,
            reordering: self.rtx.rack.reordering,
            reord_seen: self.rtx.rack.reord_seen,
            last_data_recv_at: self.ack.last_data_at.unwrap_or(self.timers.last_rcv_at),
            last_recv_at: self.timers.last_rcv_at,
            size_goal: self.size_goal(),
            max_snd_wnd: self.snd.max_wnd,
            bytes_acked: self.stats.bytes_acked,
            bytes_received: self.stats.bytes_received,
            bytes_sent: self.stats.bytes_sent,
            bytes_retrans: self.stats.bytes_retrans,
            segs_out: self.stats.segs_out,
            segs_in: self.stats.segs_in,
            data_segs_out: self.stats.data_segs_out,
            data_segs_in: self.stats.data_segs_in,
            delivered: self.stats.delivered,
            delivery_rate: self.delivery_rate(),
            delivery_rate_app_limited: self.stats.rate_app_limited,
            busy_time,
            rwnd_limited,
            sndbuf_limited,
            ecn: self.ecn(),
            ecn_seen: self.ecn_seen(),
        }
    }

    /// [`Connection::info`] with the chronographs' running interval
    /// counted up to `now`.
    pub fn info_at(&self, now: Instant) -> TcpConnInfo {
        let mut i = self.info();
        if let Some(c) = &self.chrono {
            (i.busy_time, i.rwnd_limited, i.sndbuf_limited) = c.totals(now);
        }
        i
    }

    /// Linux's size goal for one skb of a write (`tcp_xmit_size_goal`
    /// with `tcp_bound_to_half_wnd`): half the largest window the peer
    /// offered (all of it when under 536 bytes), at most 64 KB (the GSO
    /// limit), in whole MSS, at least one.
    pub(super) fn size_goal(&self) -> usize {
        let mss = self.max_payload_base();
        let wnd = self.snd.max_wnd;
        let half = if wnd > 536 { wnd / 2 } else { wnd };
        let cap = if half > 0 { half.min(65_536) } else { 65_536 };
        (cap / mss).max(1) * mss
    }

    /// The application waits for send-buffer space (Linux `SOCK_NOSPACE`,
    /// set when a write finds the buffer full, cleared when the buffer
    /// has room again): the send-buffer-limited chronograph's condition.
    pub fn set_send_blocked(&mut self, on: bool) {
        if on || self.chrono.is_some() {
            // Nothing is timed yet: the start is set when something is.
            let c = self
                .chrono
                .get_or_insert_with(|| Box::new(Chrono::new(Instant::ZERO)));
            c.nospace = on;
        }
    }

    /// Linux's chronographs after a transmission attempt (where Linux
    /// calls `tcp_chrono_start`/`tcp_chrono_stop`): busy from the moment
    /// data is queued until everything is acknowledged; limited by the
    /// peer's window while the next new segment does not fit in it with
    /// congestion window to spare (`tcp_write_xmit`); limited by the send
    /// buffer while everything queued is sent, the congestion window is
    /// not the limit and the application waits for space
    /// (`tcp_cwnd_validate`), until it has space (`tcp_check_space`).
    pub(crate) fn update_chrono(&mut self, now: Instant) {
        let queued = self.send_queue() > 0;
        if !queued && self.chrono.is_none() {
            return;
        }
        let ch = self
            .chrono
            .get_or_insert_with(|| Box::new(Chrono::new(now)));
        if !queued {
            if ch.kind != CHRONO_NONE {
                ch.set(now, CHRONO_NONE);
            }
            return;
        }
        if ch.kind == CHRONO_NONE {
            ch.set(now, CHRONO_BUSY);
        }
        let nospace = ch.nospace;
        let notsent = self.notsent();
        let cwnd_room = self.send_cwnd().saturating_sub(self.pipe());
        let rwnd_limited = notsent > 0 && self.can_send_data_state() && cwnd_room > 0 && {
            let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
            let room = self.snd.wnd.saturating_sub(flight);
            room < notsent.min(self.max_payload_base())
        };
        if rwnd_limited {
            self.chrono_start(now, CHRONO_RWND);
        } else {
            self.chrono_stop(now, CHRONO_RWND);
        }
        let sending = matches!(self.state(), State::Established | State::CloseWait);
        if nospace {
            if notsent == 0 && sending && cwnd_room >= self.max_payload_base() {
                self.chrono_start(now, CHRONO_SNDBUF);
            }
        } else {
            self.chrono_stop(now, CHRONO_SNDBUF);
        }
    }

    /// Linux `tcp_chrono_start`: a more interesting condition takes over.
    fn chrono_start(&mut self, now: Instant, kind: u8) {
        if let Some(c) = &mut self.chrono {
            if kind > c.kind {
                c.set(now, kind);
            }
        }
    }

    /// Linux `tcp_chrono_stop`: back to busy (or idle with nothing queued)
    /// if `kind` is what is being timed.
    fn chrono_stop(&mut self, now: Instant, kind: u8) {
        let empty = self.send_queue() == 0;
        if let Some(c) = &mut self.chrono {
            if empty {
                c.set(now, CHRONO_NONE);
            } else if kind == c.kind {
                c.set(now, CHRONO_BUSY);
            }
        }
    }

    /// Bytes queued and not yet sent once.
    fn notsent(&self) -> usize {
        let sent = self.snd.max.0.wrapping_sub(self.snd.una.0) as usize;
        // SND.MAX counts a SYN or FIN, which are not queued bytes.
        self.send_queue().saturating_sub(sent)
    }

    /// Linux's `icsk_ca_state` for `tcpi_ca_state`.
    fn ca_state(&self) -> u8 {
        match &self.recovery {
            Some(r) if r.in_loss => 4,
            Some(_) => 3,
            None if self.cwr().is_some() => 2,
            None if self.rtx.dupacks > 0 || self.rtx.scoreboard.totals().sacked > 0 => 1,
            None => 0,
        }
    }

    pub fn set_nodelay(&mut self, on: bool) {
        self.app.nodelay = on;
        if on {
            // Linux: setting TCP_NODELAY pushes what is pending (a cork or
            // MSG_MORE held), once.
            self.app.push_now = true;
        }
    }

    /// `TCP_LINGER2` (Linux): how long an orphaned connection waits in
    /// FIN-WAIT-2 for the peer's FIN.
    pub fn set_fin_wait2_timeout(&mut self, t: Duration) {
        self.cfg.fin_wait2_timeout = Ms::new(t);
    }

    /// `TCP_USER_TIMEOUT` (RFC 5482): abort when data stays unacknowledged
    /// this long; zero restores the default (retry count).
    pub fn set_user_timeout(&mut self, t: Duration) {
        self.rtx.user_timeout = (!t.is_zero()).then_some(Ms::new(t));
    }

    /// `MSG_EOR` (Linux): what is queued so far ends a record; later data
    /// never shares a segment with it.
    pub fn mark_record_end(&mut self) {
        self.snd.queue.mark_record_end();
    }

    /// `TCP_CORK`: hold partial segments while on; turning it off pushes.
    pub fn set_cork(&mut self, on: bool) {
        self.app.cork = on;
    }

    /// `MSG_MORE` for the next write: hold its partial tail (and leave it
    /// unmarked by PSH) until a write without it.
    pub fn set_more(&mut self, on: bool) {
        self.app.more = on;
        self.app.unmarked_tail = on;
        if on {
            // A push asked for before this write is spent: this one holds.
            self.app.push_now = false;
        }
    }

    /// The data queued so far is not the end of a write (more of it
    /// follows): leave the last queued byte's segment unmarked by PSH
    /// while on. For a socket layer that transmits part of a write before
    /// queueing the rest (Linux `tcp_push_one`).
    pub fn set_write_continues(&mut self, on: bool) {
        self.app.unmarked_tail = on || self.app.more;
    }

    /// Linux `tcp_mark_push` in the middle of a write (`forced_push`: more
    /// than half the peer's largest window written since the last push):
    /// the skb ending where the queued data ends now carries PSH. For a
    /// socket layer that models Linux's skbs.
    pub fn mark_push(&mut self) {
        self.snd.queue.mark_push();
    }

    /// The skb that carried the last [`Connection::mark_push`] grew past
    /// it, or a new write into it cleared it (Linux clears PSH on the
    /// skb a write starts appending to): the mark goes, unless sent.
    pub fn retract_push_mark(&mut self) {
        let from = self.snd.max;
        self.snd.queue.retract_push_mark(from);
    }

    /// The next transmission sends one packet of new data at most (Linux
    /// `tcp_push_one`, when a write fills the skb at the head of the
    /// unsent data).
    pub fn set_push_one(&mut self) {
        self.app.push_one = true;
    }

    /// Partial segments held back (`TCP_CORK` or `MSG_MORE`).
    pub(super) fn corked(&self) -> bool {
        self.app.cork || self.app.more
    }

    /// `SO_KEEPALIVE` with idle time and probe interval both `interval`
    /// and Linux's 9 probes; `None` turns keep-alive off.
    pub fn set_keepalive(&mut self, interval: Option<Duration>) {
        self.set_keepalive_params(interval.map(|d| KeepAlive {
            idle: d,
            interval: d,
            count: KeepAlive::default().count,
        }));
    }

    /// Keep-alive with full parameters.
    pub fn set_keepalive_params(&mut self, ka: Option<KeepAlive>) {
        self.timers.keepalive = ka;
        self.timers.ka_probes = 0;
    }

    /// `SO_LINGER` with a zero timeout: `close` sends RST.
    pub fn set_linger_zero(&mut self, on: bool) {
        self.app.linger_zero = on;
    }

    /// Replace the congestion controller (e.g. for experiments). Before
    /// the handshake completes, the configured algorithm replaces it again
    /// (the MSS is known only then); use
    /// [`Connection::set_congestion_algorithm`] for a built-in one.
    pub fn set_congestion_control(&mut self, cc: Box<dyn CongestionControl>) {
        self.cong.cc = cc;
    }

    /// Use `alg` from now on (Linux `TCP_CONGESTION`). Before the
    /// handshake completes the controller starts afresh; on a live
    /// connection the new one takes over cwnd and ssthresh.
    pub fn set_congestion_algorithm(&mut self, alg: CcAlgorithm) {
        self.cfg.congestion_control = alg;
        let mut cc = alg.build(
            self.cfg.initial_cwnd,
            self.max_payload_base(),
            self.cfg.pacing,
        );
        if self.is_synchronized() {
            cc.set_window(self.cong.cc.cwnd(), self.cong.cc.ssthresh());
        }
        self.cong.cc = cc;
    }

    /// Pace data segments (see [`TcpConfig::pacing`]) or not.
    pub fn set_pacing(&mut self, on: bool) {
        self.cfg.pacing = on;
        self.cong.pacer.set_enabled(on);
    }

    /// Queue data; `Ok(0)` when the buffer is full.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, TcpError> {
        self.check_send()?;
        self.check_app_limited();
        self.note_write_start();
        Ok(self.snd.queue.buf.push(data))
    }

    /// A write that finds everything queued already sent opens a new skb
    /// on Linux (`tcp_sendmsg`: the write queue is empty, nothing to fill
    /// up): the skbs it is cut into count from here ([`Snd::skb_phase`]).
    fn note_write_start(&mut self) {
        let end = self.snd.queue.seq + self.snd.queue.buf.len();
        if self.snd.max == end {
            let goal = self.size_goal().max(1);
            let off = end.wrapping_sub(self.snd.iss + 1u32) as usize;
            self.snd.skb_phase = u16::try_from(off % goal).unwrap_or(0);
        }
    }

    /// Queue data written in place: `f` is lent up to `max` bytes of free
    /// send-buffer space as two slices (the send buffer lends the rest of
    /// its current chunk, so the second is empty), fills a prefix of the
    /// first then the second, and returns how many bytes it wrote; they are
    /// queued as if passed to [`Connection::send`]. `Ok(0)` without calling
    /// `f` when the buffer is full or `max` is 0. The buffer's storage
    /// grows in chunks as it is used (see `SendBuf::write_with`), so `f` may
    /// be lent less than `max` although there is room: call again for the
    /// rest.
    pub fn send_with(
        &mut self,
        max: usize,
        f: impl FnOnce(&mut [u8], &mut [u8]) -> usize,
    ) -> Result<usize, TcpError> {
        self.check_send()?;
        self.check_app_limited();
        self.note_write_start();
        Ok(self.snd.queue.buf.write_with(max, f))
    }

    /// Whether the application may queue data now (the errors of `send`).
    fn check_send(&self) -> Result<(), TcpError> {
        if let Some(e) = self.app.error {
            return Err(e);
        }
        if self.snd.queue.fin_queued {
            return Err(TcpError::BrokenPipe);
        }
        match self.state() {
            State::SynSent | State::SynReceived | State::Established | State::CloseWait => Ok(()),
            State::Closed | State::Listen => Err(TcpError::NotConnected),
            _ => Err(TcpError::BrokenPipe),
        }
    }

    /// Read in-order data; `Ok(0)` at end of stream; `WouldBlock` when empty.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        self.recv_with(|a, b| {
            let mut n = 0;
            for src in [a, b] {
                let Some(rest) = buf.get_mut(n..) else { break };
                let k = src.len().min(rest.len());
                if let (Some(dst), Some(src)) = (rest.get_mut(..k), src.get(..k)) {
                    dst.copy_from_slice(src);
                }
                n += k;
            }
            n
        })
    }

    /// Read in-order data in place: `f` is lent the readable bytes as two
    /// slices (the second non-empty only where they wrap around the ring),
    /// consumes a prefix (of the first, then the second) and returns its
    /// length; those bytes are dropped from the buffer and the window opens
    /// as after [`Connection::recv`]. Returns what `f` consumed (it may be
    /// 0). Without readable data `f` is not called: `Ok(0)` at end of
    /// stream, else `WouldBlock` or the connection's error, as `recv`.
    ///
    /// A read stops in front of the urgent mark, and one that starts at it
    /// skips the out-of-band octet (see `urgent.rs`).
    pub fn recv_with(&mut self, f: impl FnOnce(&[u8], &[u8]) -> usize) -> Result<usize, TcpError> {
        let limit = self.urgent_read_limit();
        if !self.rcv.queue.ring.is_empty() {
            let before = self.rcv_wnd_available();
            let n = self
                .rcv
                .queue
                .ring
                .read_with(|a, b| super::urgent::lend_limited(a, b, limit, f));
            self.maybe_window_update(before);
            self.forget_passed_urgent();
            return Ok(n);
        }
        self.read_end()
    }

    /// The result of a read that found nothing readable: `Ok(0)` at end of
    /// stream, else `WouldBlock` or the connection's error.
    pub(super) fn read_end(&self) -> Result<usize, TcpError> {
        if self.rcv.fin_received {
            return Ok(0);
        }
        if let Some(e) = self.app.error {
            return Err(e);
        }
        match self.state() {
            State::Closed | State::Listen => Err(TcpError::NotConnected),
            _ => Err(TcpError::WouldBlock),
        }
    }

    /// Half-close: send FIN after the queued data (RFC 9293 3.10.4 CLOSE on
    /// the sending side). Further `send` calls fail with `BrokenPipe`.
    pub fn shutdown(&mut self) {
        match self.state() {
            State::SynSent | State::SynReceived => self.snd.queue.fin_queued = true,
            // "Queue this until all preceding SENDs have been segmentized,
            // then form a FIN segment and send it. In any case, enter
            // FIN-WAIT-1 state."
            State::Established => {
                self.snd.queue.fin_queued = true;
                self.set_state(Phase::FinWait1, None);
            }
            // "Queue this request until all preceding SENDs have been
            // segmentized; then send a FIN segment, enter LAST-ACK state."
            State::CloseWait => {
                self.snd.queue.fin_queued = true;
                self.set_state(Phase::LastAck, None);
            }
            _ => {}
        }
    }

    /// Close: release the connection to finish on its own. Unread data or
    /// linger-0 turns this into an abort (RST), as Linux does (RFC 2525 2.17).
    pub fn close(&mut self) {
        self.app.closed = true;
        match self.state() {
            State::Closed | State::Listen | State::TimeWait => {}
            State::SynSent => self.set_state(Phase::Closed, None),
            _ if self.app.linger_zero || !self.rcv.queue.ring.is_empty() => {
                self.abort_with(true);
            }
            State::SynReceived => self.abort_with(false),
            _ => {
                self.shutdown();
                let until = self.timers.last_rcv_at + self.cfg.fin_wait2_timeout.get();
                if let Phase::FinWait2 { orphan_until } = &mut self.st {
                    *orphan_until = Some(until);
                }
            }
        }
    }

    /// Abort: RST now (in synchronized states) and close.
    pub fn abort(&mut self) {
        self.app.closed = true;
        match self.state() {
            State::Closed | State::Listen | State::TimeWait | State::SynSent => {
                self.set_state(Phase::Closed, None);
            }
            _ => self.abort_with(false),
        }
    }

    fn abort_with(&mut self, on_close: bool) {
        self.rst.pending = true;
        self.rst.on_close = on_close;
    }

    /// Every state change goes through here. `ctr`: the counters, when the
    /// caller has them (segment arrival, dispatch); an application call
    /// has none, and `CurrEstab` follows at the connection's next touch
    /// (`sync_estab` at the start of `process` and `dispatch`).
    pub(super) fn set_state(&mut self, next: Phase, ctr: Option<&mut TcpCounters>) {
        self.st = next;
        if let Some(ctr) = ctr {
            self.sync_estab(ctr);
        }
        // TIME-WAIT: "turn off the other timers" (its own deadline is in
        // the state); CLOSED: nothing is left to time.
        if matches!(next, Phase::TimeWait { .. } | Phase::Closed) {
            self.clear_timers();
        }
    }

    /// TIME-WAIT from now on (2*MSL, RFC 9293 3.6.1).
    pub(super) fn time_wait(&self) -> Phase {
        Phase::TimeWait {
            until: self.now_hint() + self.cfg.time_wait.get(),
        }
    }

    /// Keep `CurrEstab` ("the number of TCP connections for which the
    /// current state is either ESTABLISHED or CLOSE-WAIT", RFC 4022) in
    /// step with the state, also after application calls that change it.
    pub(super) fn sync_estab(&mut self, ctr: &mut TcpCounters) {
        let is = matches!(self.state(), State::Established | State::CloseWait);
        if is != self.report.in_estab {
            if is {
                ctr.CurrEstab += 1;
            } else {
                ctr.CurrEstab = ctr.CurrEstab.saturating_sub(1);
            }
            self.report.in_estab = is;
        }
    }
}
