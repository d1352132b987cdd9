//! The connection: state machine and segment arrival processing
//! (RFC 9293 3.10), timers, and segment emission.

use std::net::SocketAddrV4;

use ustack_wire::tcp::{SeqNum, TcpRepr, MAX_WINDOW_SHIFT};

use super::cc::{CongestionControl, NewReno};
use super::rack::Rack;
use super::recv::RecvQueue;
use super::rtt::RttEstimator;
use super::sack::Scoreboard;
use super::send::{sws_allows, SendCheck, SendQueue};
use super::{KeepAlive, State, TcpConfig, TcpCounters, TcpError};
use crate::time::{Duration, Instant};

/// Most segments one `dispatch` call emits (bounded work per poll).
const MAX_BURST: usize = 64;
/// RFC 9293 3.7.1: "If an MSS Option is not received at connection
/// setup, TCP implementations MUST assume a default send MSS of 536".
const DEFAULT_MSS: usize = 536;
/// RFC 7323 5.5: TS.Recent is invalid after 24 days of idleness.
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);
/// Least interval between ACKs answering unacceptable segments without
/// data (Linux `tcp_invalid_ratelimit`).
const OOW_ACK_INTERVAL: Duration = Duration::from_millis(500);
/// When `emit` refuses a segment, retry this much later.
const TX_RETRY: Duration = Duration::from_millis(10);
/// RFC 8985 7.2 "WCDelAckT": the worst-case delayed-ACK time added to the
/// probe timeout when only one segment is in flight.
const WC_DEL_ACK: Duration = Duration::from_millis(200);
/// Least probe timeout (Linux `TCP_TIMEOUT_MIN`, 2 jiffies).
const MIN_PTO: Duration = Duration::from_millis(10);

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

/// Our TSval at `t` (RFC 7323 timestamps in milliseconds plus an offset).
fn ts_at(t: Instant, offset: u32) -> u32 {
    (t.total_millis() as u32).wrapping_add(offset)
}

/// The ACK's TSecr predates `xmit` (it echoes an earlier transmission).
fn echo_before(ecr: Option<u32>, xmit: Instant, offset: u32) -> bool {
    ecr.is_some_and(|e| (e.wrapping_sub(ts_at(xmit, offset)) as i32) < 0)
}

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
    pub cwnd: usize,
    pub ssthresh: usize,
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
}

/// One TCP connection (a TCB), sans-IO. Its fields are grouped by concern,
/// and each group is mostly worked on by one file of this module; data that
/// means something only in some states lives in those states ([`Phase`]) or
/// in the loss recovery episode ([`Recovery`]).
#[derive(Debug)]
pub struct Connection {
    pub(super) cfg: TcpConfig,
    /// The state and the data only some states have.
    pub(super) st: Phase,
    pub(super) local: SocketAddrV4,
    pub(super) remote: SocketAddrV4,
    pub(super) passive: bool,
    pub(super) snd: Snd,
    pub(super) rcv: Rcv,
    pub(super) opt: Negotiated,
    pub(super) ack: AckState,
    pub(super) rtx: Rtx,
    pub(super) tlp: Tlp,
    pub(super) cong: Cong,
    /// The loss recovery episode going on, if any.
    pub(super) recovery: Option<Recovery>,
    pub(super) timers: Timers,
    pub(super) app: App,
    pub(super) rst: Rst,
    pub(super) report: Report,
    pub(super) scratch: Vec<u8>,
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
    pub(super) fn state(self) -> State {
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

/// Send sequence space (RFC 9293 3.3.1) and the send buffer. `max` is the
/// highest sequence number sent; `nxt` rewinds to SND.UNA on timeout.
#[derive(Debug)]
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
    pub(super) max_wnd: usize,
    pub(super) queue: SendQueue,
}

/// Receive sequence space and the receive buffer.
#[derive(Debug)]
pub(super) struct Rcv {
    pub(super) nxt: SeqNum,
    /// Right edge of the window we advertised.
    pub(super) adv: SeqNum,
    pub(super) queue: RecvQueue,
    /// The peer's FIN, received ahead of missing data.
    pub(super) fin: Option<SeqNum>,
    pub(super) fin_received: bool,
}

/// Options negotiated in the handshake, and what they carry.
#[derive(Debug)]
pub(super) struct Negotiated {
    pub(super) adv_mss: u16,
    pub(super) route_mss: usize,
    pub(super) smss: usize,
    pub(super) ws: bool,
    pub(super) snd_wscale: u8,
    pub(super) rcv_wscale: u8,
    pub(super) ts: bool,
    pub(super) sack: bool,
    pub(super) ts_offset: u32,
    pub(super) ts_recent: u32,
    pub(super) ts_recent_at: Instant,
}

/// ACK generation.
#[derive(Debug)]
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
}

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

/// Congestion control and how much of cwnd was used.
#[derive(Debug)]
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
}

/// Other timers and the idle clock.
#[derive(Debug)]
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

/// Application-facing state and settings.
#[derive(Debug)]
pub(super) struct App {
    pub(super) error: Option<TcpError>,
    /// An ICMP error reported when the connection times out.
    pub(super) soft_error: Option<TcpError>,
    /// The application closed its handle (orphan).
    pub(super) closed: bool,
    pub(super) linger_zero: bool,
    pub(super) nodelay: bool,
}

/// Resets owed.
#[derive(Debug, Default)]
pub(super) struct Rst {
    /// Abort: send <SEQ=SND.NXT><CTL=RST> and close.
    pub(super) pending: bool,
    /// The abort is a close with unread data or linger 0 (TCPAbortOnClose).
    pub(super) on_close: bool,
    /// A reset answering an unacceptable segment: (SEQ, ACK).
    pub(super) reply: Option<(SeqNum, Option<SeqNum>)>,
}

/// What has been reported to the counters and the neighbour cache.
#[derive(Debug, Default)]
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

fn window_shift_for(buf: usize) -> u8 {
    let mut s = 0u8;
    while s < MAX_WINDOW_SHIFT && (buf >> s) > 0xffff {
        s += 1;
    }
    s
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
        let route_mss = usize::from(route_mss.max(64));
        let adv_mss = cfg.mss.min(route_mss as u16).max(64);
        let smss = DEFAULT_MSS.min(route_mss);
        Connection {
            cfg: cfg.clone(),
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
                max_wnd: 0,
                queue: SendQueue::new(cfg.snd_buf.max(1), iss + 1u32),
            },
            rcv: Rcv {
                nxt: SeqNum(0),
                adv: SeqNum(0),
                queue: RecvQueue::new(cfg.rcv_buf.max(1)),
                fin: None,
                fin_received: false,
            },
            opt: Negotiated {
                adv_mss,
                route_mss,
                smss,
                ws: false,
                snd_wscale: 0,
                rcv_wscale: 0,
                ts: false,
                sack: false,
                ts_offset: iss.0.rotate_left(13) ^ 0x5a5a_5a5a,
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
            },
            tlp: Tlp::default(),
            cong: Cong {
                cc: Box::new(NewReno::new(cfg.initial_cwnd, smss)),
                limited: false,
                max_flight: 0,
                usage_seq: None,
            },
            recovery: None,
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
            app: App {
                error: None,
                soft_error: None,
                closed: false,
                linger_zero: false,
                nodelay: cfg.nodelay,
            },
            rst: Rst::default(),
            report: Report::default(),
            scratch: vec![0u8; route_mss.max(usize::from(adv_mss))],
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
        c.rcv.nxt = syn.seq + 1u32;
        c.snd.wnd = usize::from(syn.window);
        c.snd.max_wnd = c.snd.wnd;
        c.snd.wl1 = syn.seq;
        c.snd.wl2 = iss;
        c
    }

    /// Take the options of the peer's SYN (RFC 9293 3.7.1, RFC 7323, RFC 2018).
    fn negotiate(&mut self, syn: &TcpRepr, now: Instant) {
        // MSS: "the TCP sender MUST use ... the minimum of the received MSS
        // option ... and the path MTU-derived value".
        let peer = syn.max_seg_size.map_or(DEFAULT_MSS, usize::from).max(64);
        self.opt.smss = peer.min(self.opt.route_mss);
        // RFC 7323 2.2: "If a TCP receives a <SYN> segment containing a
        // Window Scale option, it SHOULD send its own Window Scale option
        // in the <SYN,ACK> segment"; scaling is on only if both sent one.
        match (self.cfg.window_scale, syn.window_scale) {
            (true, Some(s)) => {
                self.opt.ws = true;
                self.opt.snd_wscale = s.min(MAX_WINDOW_SHIFT);
                self.opt.rcv_wscale = window_shift_for(self.cfg.rcv_buf);
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
        self.cong.cc = Box::new(NewReno::new(self.cfg.initial_cwnd, self.max_payload_base()));
    }

    // ----- status getters -------------------------------------------------

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
        self.snd.queue.ring.len()
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
        self.snd.queue.ring.allocated() + self.rcv.queue.ring.allocated()
    }
    /// Free space in the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.snd.queue.ring.free()
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
                && self.snd.queue.ring.free() > 0)
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
    pub fn cwnd(&self) -> usize {
        self.cong.cc.cwnd()
    }
    /// The effective send MSS.
    pub fn mss(&self) -> usize {
        self.opt.smss
    }
    pub fn nodelay(&self) -> bool {
        self.app.nodelay
    }
    /// Take (and clear) the reachability advice gathered since the last call.
    pub fn take_neighbour_advice(&mut self) -> NeighbourAdvice {
        std::mem::take(&mut self.report.advice)
    }
    pub fn info(&self) -> TcpConnInfo {
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
            cwnd: self.cong.cc.cwnd(),
            ssthresh: self.cong.cc.ssthresh(),
            smss: self.opt.smss,
            snd_wnd: self.snd.wnd,
            rcv_wnd: self.rcv_wnd(),
            snd_wscale: self.opt.snd_wscale,
            rcv_wscale: self.opt.rcv_wscale,
            timestamps: self.opt.ts,
            sack: self.opt.sack,
            retransmits: self.rtx.total,
            buffer_memory: self.buffer_memory(),
        }
    }

    // ----- settings -------------------------------------------------------

    pub fn set_nodelay(&mut self, on: bool) {
        self.app.nodelay = on;
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
    /// Replace the congestion controller (e.g. for experiments).
    pub fn set_congestion_control(&mut self, cc: Box<dyn CongestionControl>) {
        self.cong.cc = cc;
    }

    // ----- application calls ---------------------------------------------

    /// Queue data; `Ok(0)` when the buffer is full.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, TcpError> {
        if let Some(e) = self.app.error {
            return Err(e);
        }
        if self.snd.queue.fin_queued {
            return Err(TcpError::BrokenPipe);
        }
        match self.state() {
            State::SynSent | State::SynReceived | State::Established | State::CloseWait => {
                Ok(self.snd.queue.ring.push(data))
            }
            State::Closed | State::Listen => Err(TcpError::NotConnected),
            _ => Err(TcpError::BrokenPipe),
        }
    }

    /// Read in-order data; `Ok(0)` at end of stream; `WouldBlock` when empty.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        if !self.rcv.queue.ring.is_empty() {
            let before = self.rcv_wnd_available();
            let n = self.rcv.queue.ring.pop(buf);
            self.maybe_window_update(before);
            return Ok(n);
        }
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
                let until = self.timers.last_rcv_at + self.cfg.fin_wait2_timeout;
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

    /// An ICMP destination unreachable quoting one of our segments.
    /// RFC 1122 4.2.3.9: soft errors (net/host unreachable) "MUST NOT"
    /// abort; like Linux, port/protocol unreachable is a hard error only
    /// while the connection is being opened.
    pub fn on_icmp_unreachable(&mut self, _now: Instant, kind: IcmpUnreachable) {
        match kind {
            IcmpUnreachable::PortUnreachable | IcmpUnreachable::ProtoUnreachable => {
                if self.state() == State::SynSent {
                    self.app.error = Some(TcpError::ConnectionRefused);
                    self.set_state(Phase::Closed, None);
                } else {
                    self.app.soft_error = Some(TcpError::ConnectionRefused);
                }
            }
            IcmpUnreachable::NetUnreachable
            | IcmpUnreachable::HostUnreachable
            | IcmpUnreachable::AdminProhibited
            | IcmpUnreachable::Other => self.app.soft_error = Some(TcpError::HostUnreachable),
            IcmpUnreachable::FragRequired { mtu } => {
                // RFC 1191: lower the MSS to fit the reported MTU.
                let m = usize::from(mtu).saturating_sub(40);
                if m >= DEFAULT_MSS && m < self.opt.smss {
                    self.opt.smss = m;
                    self.opt.route_mss = m;
                }
            }
        }
    }

    // ----- helpers --------------------------------------------------------

    fn clear_timers(&mut self) {
        self.rtx.rto_at = None;
        self.timers.persist_at = None;
        self.ack.delay_at = None;
        self.ack.now = false;
        self.rtx.rack_at = None;
        self.tlp.at = None;
        self.tlp.pending = false;
        self.timers.probe_pending = false;
    }

    /// Keep `CurrEstab` ("the number of TCP connections for which the
    /// current state is either ESTABLISHED or CLOSE-WAIT", RFC 4022) in
    /// step with the state, also after application calls that change it.
    fn sync_estab(&mut self, ctr: &mut TcpCounters) {
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

    /// Every state change goes through here. `ctr`: the counters, when the
    /// caller has them (segment arrival, dispatch); an application call
    /// has none, and `CurrEstab` follows at the connection's next touch
    /// (`sync_estab` at the start of `process` and `dispatch`).
    fn set_state(&mut self, next: Phase, ctr: Option<&mut TcpCounters>) {
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
    fn time_wait(&self) -> Phase {
        Phase::TimeWait {
            until: self.now_hint() + self.cfg.time_wait,
        }
    }

    /// The last time we were told about (timers are set relative to it).
    fn now_hint(&self) -> Instant {
        self.timers.last_rcv_at.max(self.timers.last_send_at)
    }

    fn rcv_wnd(&self) -> usize {
        if self.rcv.adv.gt(self.rcv.nxt) {
            self.rcv.adv.wrapping_sub(self.rcv.nxt) as usize
        } else {
            0
        }
    }

    fn rcv_wnd_available(&self) -> usize {
        let max = if self.opt.ws {
            0xffff_usize << self.opt.rcv_wscale
        } else {
            0xffff
        };
        self.rcv.queue.free().min(max)
    }

    /// After the application read: RFC 1122 4.2.3.3 receiver SWS avoidance
    /// decides whether the opened window is worth an update.
    fn maybe_window_update(&mut self, _before: usize) {
        if !self.is_synchronized() || self.rcv.fin_received {
            return;
        }
        let cur = self.rcv_wnd();
        let now_avail = self.rcv_wnd_available();
        let thresh = (self.rcv.queue.ring.capacity() / 2).min(usize::from(self.opt.adv_mss));
        if now_avail >= cur + thresh && cur < self.rcv.queue.ring.capacity() / 2 {
            self.ack.now = true;
        }
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

    fn ts_now(&self, now: Instant) -> u32 {
        (now.total_millis() as u32).wrapping_add(self.opt.ts_offset)
    }

    /// Largest payload given the negotiated MSS and our timestamp option.
    fn max_payload_base(&self) -> usize {
        let ts = if self.opt.ts { 12 } else { 0 };
        self.opt.smss.saturating_sub(ts).max(1)
    }

    fn sack_blocks(&self) -> [Option<(SeqNum, SeqNum)>; 4] {
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
            ..TcpRepr::default()
        }
    }

    fn sent_ack(&mut self, ctr: &mut TcpCounters, now: Instant) {
        self.ack.now = false;
        self.ack.dsack = None;
        self.ack.delay_at = None;
        self.ack.unacked = 0;
        self.ack.last_sent = self.rcv.nxt;
        self.timers.last_send_at = now;
        ctr.OutSegs += 1;
    }

    fn arm_rto(&mut self, now: Instant) {
        if self.rtx.rto_at.is_none() {
            self.rtx.rto_at = Some(now + self.rtx.rtt.rto());
        }
    }

    fn can_send_data_state(&self) -> bool {
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

    fn fin_acked(&self) -> bool {
        self.snd.queue.fin_queued && self.snd.una.gt(self.snd.queue.fin_seq())
    }

    /// RFC 6675 "pipe": bytes believed in the network. Without SACK,
    /// each duplicate ACK stands for a segment that left it (so new data
    /// may go out, RFC 3042 limited transmit).
    fn pipe(&self) -> usize {
        let p = self.rtx.scoreboard.pipe();
        if self.opt.sack {
            p
        } else {
            p.saturating_sub(self.rtx.dupacks as usize * self.max_payload_base())
        }
    }

    /// A segment deemed lost may be retransmitted now (RFC 6675 5
    /// (C): "If cwnd - pipe >= 1 SMSS" ... NextSeg rule 1).
    fn rtx_due(&self) -> bool {
        if !self.can_send_data_state() {
            return false;
        }
        let Some((s, _)) = self.rtx.scoreboard.first_lost() else {
            return false;
        };
        (s == self.snd.una || s.lt(self.snd.una + self.snd.wnd))
            && (self.recovery.is_some_and(|r| r.rtx_head_now) || self.pipe() < self.cong.cc.cwnd())
    }

    /// The next segment of new data (or the FIN) to send now: (seq, len,
    /// fin). `probe`: a tail loss probe, which ignores cwnd (RFC 8985 7.3).
    fn next_segment(&self, force: bool, probe: bool) -> Option<(SeqNum, usize, bool)> {
        if !self.can_send_data_state() {
            return None;
        }
        let mut seq = self.snd.max;
        if seq.lt(self.snd.queue.seq) {
            seq = self.snd.queue.seq;
        }
        let off = seq.wrapping_sub(self.snd.queue.seq) as usize;
        let qlen = self.snd.queue.ring.len();
        if off > qlen {
            return None;
        }
        let avail = qlen - off;
        let fin_pending = self.snd.queue.fin_queued;
        if avail == 0 && !fin_pending {
            return None;
        }
        let flight = seq.wrapping_sub(self.snd.una) as usize;
        let wnd_room = self.snd.wnd.saturating_sub(flight);
        let cwnd_room = if probe {
            usize::MAX
        } else {
            self.cong.cc.cwnd().saturating_sub(self.pipe())
        };
        let maxp = self.max_payload();
        let n = avail.min(maxp).min(wnd_room).min(cwnd_room);
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
                idle: self.snd.max == self.snd.una,
                nodelay: self.app.nodelay,
                fin_queued: fin_pending,
                max_snd_wnd: self.snd.max_wnd,
            };
            if !sws_allows(&check) {
                return None;
            }
        }
        Some((seq, n, fin))
    }

    /// Data (or a FIN) queued and not yet sent.
    fn has_unsent(&self) -> bool {
        self.can_send_data_state()
            && (self.snd.queue.ring.len() > self.snd.max.wrapping_sub(self.snd.queue.seq) as usize
                || (self.snd.queue.fin_queued && self.snd.max.le(self.snd.queue.fin_seq())))
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
    fn persist_needed(&self) -> bool {
        self.timers.persist_at.is_none()
            && self.rtx.rto_at.is_none()
            && self.snd.max == self.snd.una
            && self.has_unsent()
            && self.next_segment(false, false).is_none()
    }

    fn syn_needed(&self) -> bool {
        matches!(self.state(), State::SynSent | State::SynReceived) && self.snd.nxt == self.snd.iss
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
            || self.rtx_due()
            || self.next_segment(self.timers.force_send, false).is_some()
            // An application `send` into a closed window: `dispatch` must
            // run to arm the persist timer.
            || self.persist_needed()
    }

    /// When `dispatch` must next be called; `Instant::ZERO` means now.
    pub fn poll_at(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        if self.has_immediate_work() {
            min(Some(self.timers.tx_retry_at.unwrap_or(Instant::ZERO)));
        }
        if !matches!(self.state(), State::Closed | State::Listen) {
            min(self.rtx.rto_at);
            min(self.rtx.rack_at);
            min(self.tlp.at);
            min(self.timers.persist_at);
            min(self.ack.delay_at);
            min(self.st.deadline());
            min(self.keepalive_at());
        }
        t
    }

    fn keepalive_at(&self) -> Option<Instant> {
        let ka = self.timers.keepalive?;
        if !matches!(self.state(), State::Established | State::CloseWait) {
            return None;
        }
        Some(self.timers.last_rcv_at + ka.idle + ka.interval.saturating_mul(self.timers.ka_probes))
    }

    // ----- segment arrival -------------------------------------------------

    /// Process one segment addressed to this connection.
    pub fn process(&mut self, now: Instant, seg: &TcpRepr, ctr: &mut TcpCounters) {
        self.sync_estab(ctr);
        self.process_inner(now, seg, ctr);
        self.sync_estab(ctr);
    }

    fn process_inner(&mut self, now: Instant, seg: &TcpRepr, ctr: &mut TcpCounters) {
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
                ctr.TCPChallengeACK += 1;
                self.ack.now = true;
            }
            return;
        }

        // Fourth: check the SYN bit (RFC 5961 4.2): "the TCP MUST send an
        // ACK (challenge ACK) to the remote peer" and drop the segment.
        if seg.syn {
            ctr.TCPChallengeACK += 1;
            self.ack.now = true;
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
                self.snd.max_wnd = self.snd.max_wnd.max(self.snd.wnd);
                self.snd.wl1 = seg.seq;
                self.snd.wl2 = ack;
            } else {
                self.rst.reply = Some((ack, None));
                return;
            }
        }
        if !self.process_ack(now, &seg, ack, ctr) {
            return;
        }
        if self.state() == State::Closed {
            return;
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
        self.process_text(now, &seg, ctr);
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

    fn accepted_whole(&self, seg: &TcpRepr) -> bool {
        // The FIN is only acceptable if all data before it fits the window.
        let end = seg.seq + seg.payload.len();
        let right = self.rcv.nxt + self.rcv.queue.free();
        end.le(right)
    }

    fn restart_time_wait(&mut self, now: Instant) {
        if let Phase::TimeWait { until } = &mut self.st {
            *until = now + self.cfg.time_wait;
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
        self.rcv.nxt = seg.seq + 1u32;
        self.snd.wnd = usize::from(seg.window);
        self.snd.max_wnd = self.snd.wnd;
        self.snd.wl1 = seg.seq;
        if let Some(ack) = seg.ack {
            self.snd.wl2 = ack;
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
                self.process_text(now, &rest, ctr);
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

    /// ACK processing for synchronized states; false = drop the segment.
    fn process_ack(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        ack: SeqNum,
        ctr: &mut TcpCounters,
    ) -> bool {
        // "If the ACK acks something not yet sent (SEG.ACK > SND.NXT), then
        // send an ACK, drop the segment, and return."
        if ack.gt(self.snd.max) {
            self.ack.now = true;
            return false;
        }
        // RFC 5961 5.2: an ACK older than SND.UNA - MAX.SND.WND is bogus.
        if ack.lt(self.snd.una - self.snd.max_wnd.max(1)) {
            ctr.TCPChallengeACK += 1;
            self.ack.now = true;
            return false;
        }
        self.timers.probes_out = 0;
        let new_wnd = usize::from(seg.window) << self.opt.snd_wscale;
        let ecr = match (self.opt.ts, seg.timestamp) {
            (true, Some((_, e))) if e != 0 => Some(e),
            _ => None,
        };
        let una_before = self.snd.una;
        let off = self.opt.ts_offset;
        // SACK information (RFC 2018) before the cumulative ACK moves.
        let mut dsack = false;
        if self.opt.sack {
            let blocks = seg.sack_ranges;
            let second = blocks.get(1).copied().flatten();
            let rack = &mut self.rtx.rack;
            for (i, &(l, r)) in blocks.iter().flatten().enumerate() {
                // RFC 2883 4: "If the first SACK block ... is covered by
                // the cumulative acknowledgement field ... or if the
                // first block is covered by the second, it is a D-SACK".
                if i == 0 && (r.le(ack) || second.is_some_and(|(l2, r2)| l.ge(l2) && r.le(r2))) {
                    dsack = true;
                    continue;
                }
                self.rtx.scoreboard.sack(l, r, &mut |s| {
                    rack.on_delivered(s, now, echo_before(ecr, s.xmit, off));
                });
            }
        }
        if dsack {
            ctr.TCPDSACKRecv += 1;
            self.rtx.rack.on_dsack(self.snd.una, self.snd.max);
        }
        if ack.gt(self.snd.una) {
            // Forward progress confirms the path (Linux tcp_ack -> dst_confirm).
            self.report.advice.confirm = true;
            let acked_seq = ack.wrapping_sub(self.snd.una) as usize;
            self.snd.queue.ack_to(ack);
            if !self.snd.syn_acked && ack.gt(self.snd.iss) {
                // The first advance of SND.UNA (within 2^31 of ISS).
                self.snd.syn_acked = true;
            }
            self.snd.una = ack;
            if self.snd.nxt.lt(ack) {
                self.snd.nxt = ack;
            }
            {
                let rack = &mut self.rtx.rack;
                self.rtx.scoreboard.ack(ack, &mut |s| {
                    rack.on_delivered(s, now, echo_before(ecr, s.xmit, off));
                });
                rack.on_ack(ack);
            }
            // RTT measurement: RFC 7323 4.1 from TSecr, else one timed
            // segment, never a retransmitted one (Karn).
            let mut sampled = false;
            if let Some(ecr) = ecr {
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
            self.try_undo(ecr, ctr);
            match self.recovery {
                Some(r) if ack.ge(r.recover) => {
                    // Full acknowledgment: leave recovery.
                    if r.in_loss {
                        self.grow_cwnd(acked_seq, mss);
                    } else {
                        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
                        self.cong.cc.on_exit_recovery(flight, mss);
                    }
                    self.recovery = None;
                    self.rtx.last_recover = Some(r.recover);
                }
                Some(r) => {
                    if r.in_loss {
                        // After an RTO the window slow-starts again
                        // (RFC 5681 3.1) while the lost segments go out.
                        self.grow_cwnd(acked_seq, mss);
                    } else if !self.opt.sack {
                        // RFC 6582 3.2 (5) partial ACK: "retransmit the
                        // first unacknowledged segment".
                        self.rtx.scoreboard.mark_head_lost();
                        if let Some(r) = self.recovery.as_mut() {
                            r.rtx_head_now = true;
                        }
                    }
                }
                None => self.grow_cwnd(acked_seq, mss),
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
                self.enter_recovery(ctr);
            }
        }
        // RFC 8985 7.4: was the tail loss probe repairing a loss?
        if let Some((end, was_rtx)) = self.tlp.end {
            if ack.ge(end) {
                if was_rtx && !dsack && ack.gt(una_before) {
                    // 7.4.2: "the TLP episode ... repaired a loss": the
                    // congestion controller must react.
                    ctr.TCPLossProbeRecovery += 1;
                    if self.recovery.is_none() {
                        let mss = self.max_payload_base();
                        let cwnd = self.cong.cc.cwnd();
                        self.cong.cc.on_enter_recovery(cwnd, mss);
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
            self.rack_detect(now, ctr);
        } else {
            self.rtx.rack_at = None;
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
        if self.snd.wl1.lt(seg.seq)
            || (self.snd.wl1 == seg.seq
                && (self.snd.wl2.lt(ack) || (self.snd.wl2 == ack && new_wnd >= self.snd.wnd)))
        {
            self.snd.wnd = new_wnd;
            self.snd.wl1 = seg.seq;
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
                    let orphan_until = self.app.closed.then(|| now + self.cfg.fin_wait2_timeout);
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

    fn process_text(&mut self, now: Instant, seg: &TcpRepr, ctr: &mut TcpCounters) {
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
            ctr.TCPAbortOnData += 1;
            self.rst.pending = true;
            return;
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
        if ins.out_of_order {
            // RFC 5681 4.2: "an out-of-order data segment SHOULD be
            // acknowledged immediately".
            ctr.TCPOFOQueue += 1;
            self.ack.now = true;
            return;
        }
        self.rcv.nxt += ins.advanced;
        // Quick-ack: filling a hole (RFC 5681 4.2 "if the segment fills in
        // all or part of a gap"), or the first data after an idle period
        // longer than the RTO (Linux quick-ack mode).
        let idle = match self.ack.last_data_at {
            None => true,
            Some(t) => now.saturating_duration_since(t) > self.rtx.rtt.rto(),
        };
        self.ack.last_data_at = Some(now);
        self.ack.unacked += ins.advanced;
        // Estimate the peer's full segment size from what it sends (as
        // Linux's rcv_mss does) to recognise "full-sized" segments.
        self.ack.rcv_mss = self
            .ack
            .rcv_mss
            .max(seg.payload.len().min(usize::from(self.opt.adv_mss)));
        if had_ooo || idle || ins.advanced == 0 {
            self.ack.now = true;
        } else if self.ack.unacked >= 2 * self.ack.rcv_mss {
            // RFC 5681 4.2: "an ACK SHOULD be generated for at least every
            // second full-sized segment".
            self.ack.now = true;
        } else if self.ack.delay_at.is_none() {
            // RFC 1122 4.2.3.2 delayed ACK.
            self.ack.delay_at = Some(now + self.cfg.delayed_ack);
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

    // ----- loss recovery (RFC 6675, RFC 8985, RFC 3708) ---------------------

    /// Loss detected outside recovery: reduce the window once for this
    /// episode (RFC 6675 5 step 4, RFC 8985 "enter fast recovery").
    fn enter_recovery(&mut self, ctr: &mut TcpCounters) {
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
    fn try_undo(&mut self, ecr: Option<u32>, ctr: &mut TcpCounters) {
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
    fn clear_rtx_head_now(&mut self) {
        if let Some(r) = self.recovery.as_mut() {
            r.rtx_head_now = false;
        }
    }

    /// Run RACK's loss detection; arms the reordering timer and enters
    /// recovery when it marks something lost.
    fn rack_detect(&mut self, now: Instant, ctr: &mut TcpCounters) {
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
    fn schedule_tlp(&mut self, now: Instant) {
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

    /// Retransmit (the start of) the lost segment `[s, e)`; `tail`: send
    /// its last full segment instead (a loss probe). False if `emit` refused.
    #[allow(clippy::too_many_arguments)]
    fn retransmit(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        emit: &mut dyn FnMut(&TcpRepr) -> bool,
        s: SeqNum,
        e: SeqNum,
        tail: bool,
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
        if !self.send_segment(now, ctr, emit, start, n, fin) {
            return false;
        }
        self.rtx
            .scoreboard
            .retransmitted(start, start + n + usize::from(fin), now);
        let ts = self.ts_now(now);
        if let Some(r) = self.recovery.as_mut() {
            if r.undo.retrans_ts.is_none() {
                r.undo.retrans_ts = Some(ts);
            }
        }
        true
    }

    // ----- timers -----------------------------------------------------------

    fn run_timers(&mut self, now: Instant, ctr: &mut TcpCounters) {
        // The end of TIME-WAIT, or of an orphan's wait in FIN-WAIT-2.
        if self.st.deadline().is_some_and(|t| now >= t) {
            self.set_state(Phase::Closed, Some(ctr));
            return;
        }
        if self.ack.delay_at.is_some_and(|t| now >= t) {
            self.ack.delay_at = None;
            ctr.DelayedACKs += 1;
            self.ack.now = true;
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
                self.rack_detect(now, ctr);
            }
        }
        if self.tlp.at.is_some_and(|t| now >= t) {
            self.tlp.at = None;
            if self.recovery.is_none() && self.snd.una != self.snd.max {
                self.tlp.pending = true;
            }
        }
        if self.timers.persist_at.is_some_and(|t| now >= t) {
            self.timers.persist_at = None;
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
                } else if self.snd.una == self.snd.max && self.snd.queue.ring.is_empty() {
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

    fn time_out(&mut self, ctr: &mut TcpCounters) {
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

    /// RFC 6298 5.4-5.6 on expiry: retransmit the earliest unacknowledged
    /// segment, back off the timer; RFC 5681 3.1 collapse cwnd.
    fn on_rto(&mut self, now: Instant, ctr: &mut TcpCounters) {
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

    // ----- emission -------------------------------------------------------

    /// Emit everything due at `now`: SYN, data (within cwnd, the peer window
    /// and Nagle), FIN, ACKs, RST, probes and retransmissions. `emit`
    /// returns false if the segment could not be sent now; we try again
    /// a little later. Work per call is bounded.
    pub fn dispatch(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        emit: &mut dyn FnMut(&TcpRepr) -> bool,
    ) {
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
            if !emit(&r) {
                return self.blocked(now);
            }
            self.rst.reply = None;
            ctr.OutSegs += 1;
            ctr.OutRsts += 1;
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
            if emit(&r) {
                ctr.OutSegs += 1;
                ctr.OutRsts += 1;
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
            let r = TcpRepr {
                src_port: self.local.port(),
                dst_port: self.remote.port(),
                seq: self.snd.iss,
                ack: if syn_ack { Some(self.rcv.nxt) } else { None },
                syn: true,
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
            if !emit(&r) {
                return self.blocked(now);
            }
            self.sent_ack(ctr, now);
            if !self.report.open_counted {
                self.report.open_counted = true;
                if self.passive {
                    ctr.PassiveOpens += 1;
                } else {
                    ctr.ActiveOpens += 1;
                }
            }
            if is_rtx {
                ctr.RetransSegs += 1;
                self.rtx.total += 1;
            } else {
                self.rtx.rtt_probe = Some((self.snd.iss, now));
            }
            self.snd.nxt = self.snd.iss + 1u32;
            self.snd.max = self.snd.max.max(self.snd.nxt);
            self.arm_rto(now);
        }

        // Retransmissions of segments deemed lost (RACK, RTO, or three
        // duplicate ACKs without SACK), within cwnd (RFC 6675 5 (C)).
        for _ in 0..MAX_BURST {
            if !self.rtx_due() {
                break;
            }
            let Some((s, e)) = self.rtx.scoreboard.first_lost() else {
                break;
            };
            if !self.retransmit(now, ctr, emit, s, e, false) {
                return self.blocked(now);
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
                let sent = if let Some((seq, n, fin)) = self.next_segment(true, true) {
                    if !self.send_segment(now, ctr, emit, seq, n, fin) {
                        self.tlp.pending = true;
                        return self.blocked(now);
                    }
                    self.snd.nxt = self.snd.max;
                    Some(false)
                } else if let Some((s, e)) = self.rtx.scoreboard.last_unsacked() {
                    if !self.retransmit(now, ctr, emit, s, e, true) {
                        self.tlp.pending = true;
                        return self.blocked(now);
                    }
                    Some(true)
                } else {
                    None
                };
                if let Some(was_rtx) = sent {
                    ctr.TCPLossProbes += 1;
                    self.tlp.end = Some((self.snd.max, was_rtx));
                    // "the sender MUST re-arm the RTO timer".
                    self.rtx.rto_at = Some(now + self.rtx.rtt.rto());
                }
            }
        }

        let mut sent_new = false;
        for _ in 0..MAX_BURST {
            let force = self.timers.force_send;
            let Some((seq, n, fin)) = self.next_segment(force, false) else {
                break;
            };
            self.timers.force_send = false;
            if !self.send_segment(now, ctr, emit, seq, n, fin) {
                self.timers.force_send = force;
                return self.blocked(now);
            }
            self.snd.nxt = self.snd.max;
            sent_new = true;
        }
        self.timers.force_send = false;
        if self.can_send_data_state() && self.snd.una != self.snd.max {
            self.cwnd_validate();
        }
        if sent_new && self.tlp.end.is_none() {
            // RFC 8985 7.2: "start or restart a loss probe PTO timer after
            // transmitting new data".
            self.schedule_tlp(now);
        }

        // Persist timer: unsent data, nothing in flight, window too small.
        if self.persist_needed() {
            let mut d = self.rtx.rtt.rto();
            for _ in 0..self.timers.persist_backoff.min(16) {
                d = d.saturating_mul(2);
            }
            self.timers.persist_at = Some(now + d.min(self.cfg.max_rto));
        } else if !self.has_unsent() {
            self.timers.persist_at = None;
        }

        if self.timers.probe_pending && self.is_synchronized() {
            let r = self.base_repr(now, self.snd.una - 1usize);
            if !emit(&r) {
                return self.blocked(now);
            }
            self.timers.probe_pending = false;
            self.sent_ack(ctr, now);
        }

        if self.ack.now {
            let r = self.base_repr(now, self.snd.max);
            if !emit(&r) {
                return self.blocked(now);
            }
            self.sent_ack(ctr, now);
        }
    }

    /// RFC 7661 4.1 / RFC 5681 3.1: "the congestion window ... can only
    /// be increased when the sender is cwnd-limited"; RFC 7661 3: a sender
    /// is cwnd-limited when "FlightSize >= cwnd" (here: less than a full
    /// segment of room). Like Linux (`tcp_is_cwnd_limited`), in slow start
    /// cwnd may also grow up to twice the most that was in flight in the
    /// last window, so it keeps ahead of an application that ramps up.
    /// Without this an application-limited sender grew cwnd without bound.
    fn grow_cwnd(&mut self, acked: usize, mss: usize) {
        let cwnd = self.cong.cc.cwnd();
        let limited = self.cong.limited
            || (cwnd < self.cong.cc.ssthresh() && cwnd < self.cong.max_flight.saturating_mul(2));
        if limited {
            self.cong.cc.on_ack(acked, mss);
        }
    }

    /// After a transmission attempt: record whether cwnd was the limit and
    /// the most in flight, per window of data (Linux `tcp_cwnd_validate`).
    fn cwnd_validate(&mut self) {
        let flight = self.snd.max.wrapping_sub(self.snd.una) as usize;
        let limited = self.cong.cc.cwnd().saturating_sub(self.pipe()) < self.max_payload_base();
        if self.cong.usage_seq.is_none()
            || limited
            || (!self.cong.limited && flight > self.cong.max_flight)
        {
            self.cong.limited = limited;
            self.cong.max_flight = flight;
            self.cong.usage_seq = Some(self.snd.max);
        }
    }

    fn blocked(&mut self, now: Instant) {
        self.timers.tx_retry_at = Some(now + TX_RETRY);
    }

    /// Emit one data/FIN segment at `seq`; false if `emit` refused it.
    fn send_segment(
        &mut self,
        now: Instant,
        ctr: &mut TcpCounters,
        emit: &mut dyn FnMut(&TcpRepr) -> bool,
        seq: SeqNum,
        n: usize,
        fin: bool,
    ) -> bool {
        let mut r = self.base_repr(now, seq);
        let off = seq.wrapping_sub(self.snd.queue.seq) as usize;
        r.fin = fin;
        r.psh = n > 0 && off + n == self.snd.queue.ring.len();
        let ok = {
            let contiguous = self.snd.queue.ring.contiguous(off, n);
            let payload: &[u8] = if contiguous.len() == n {
                contiguous
            } else {
                if self.scratch.len() < n {
                    self.scratch.resize(n, 0);
                }
                let buf = self.scratch.get_mut(..n).unwrap_or(&mut []);
                let got = self.snd.queue.ring.peek(off, buf);
                self.scratch.get(..got).unwrap_or(&[])
            };
            let seg = TcpRepr { payload, ..r };
            emit(&seg)
        };
        if !ok {
            return false;
        }
        if self.snd.max == self.snd.una
            && now.saturating_duration_since(self.timers.last_send_at) > self.rtx.rtt.rto()
        {
            // RFC 5681 4.1: restart after idle.
            self.cong.cc.on_idle(self.max_payload_base());
        }
        self.sent_ack(ctr, now);
        let end = seq + n + usize::from(fin);
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
        }
        self.snd.max = self.snd.max.max(end);
        self.arm_rto(now);
        true
    }
}
