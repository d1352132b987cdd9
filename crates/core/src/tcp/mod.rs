//! TCP (RFC 9293), sans-IO: one [`Connection`] per connection; the `Stack`
//! owns the demultiplexing table and the listeners.
//!
//! Split by concern (as gVisor splits `snd`, `rcv`, `sack_recovery`,
//! `rack`, `timer`): one [`Connection`] struct whose fields are grouped by
//! concern, and one file per concern working on its groups.
//!
//! | file | concern |
//! | --- | --- |
//! | `conn.rs` | the connection: fields by concern, per-state data, constructors, getters, settings, the application's calls, `set_state` |
//! | `input.rs` | segment arrival (RFC 9293 3.10.7): acceptability, PAWS, RST/SYN checks (RFC 5961), SYN-SENT, text, FIN; the receive window; ICMP |
//! | `ack.rs` | an ACK for the sender: SACK, SND.UNA, RTT samples, delivered data, the send window update, our FIN acknowledged; cwnd growth and validation |
//! | `recovery.rs` | loss recovery: fast recovery with PRR, undo (RFC 3708), RACK detection, tail loss probes, the retransmission timeout |
//! | `timers.rs` | `poll_at`, running expired timers (delayed ACK, persist, keep-alive, TIME-WAIT, FIN-WAIT-2), giving up |
//! | `output.rs` | `dispatch`: SYN, RST, retransmissions, probes, data and FIN within the windows and the pacing budget, ACKs; building segments |
//! | `send.rs` | send buffer, segmentation decisions: Nagle, sender SWS avoidance |
//! | `recv.rs` | receive buffer, out-of-order reassembly, SACK blocks |
//! | `sack.rs` | the sender's scoreboard: segments sent, SACKed, lost, with running totals (RFC 2018, RFC 6675) |
//! | `rack.rs` | time-based loss detection, RACK (RFC 8985) |
//! | `rtt.rs` | RTT estimation and the retransmission timer (RFC 6298) |
//! | `cc.rs` | congestion control behind a trait, the algorithm choice; NewReno (RFC 5681, RFC 6582) |
//! | `cubic.rs` | CUBIC (RFC 9438), the default, in integer arithmetic |
//! | `hystart.rs` | HyStart (Linux's delay test): CUBIC's slow start exit |
//! | `prr.rs` | Proportional Rate Reduction (RFC 6937): what fast recovery sends per ACK |
//! | `ecn.rs` | Explicit Congestion Notification (RFC 3168): negotiation, ECT marks, the ECE echo, the CWR state |
//! | `pacing.rs` | pacing rate and bursts (Linux's internal pacing and TSO autosizing) |
//! | `isn.rs` | initial sequence numbers (RFC 6528) |
//! | `syncookie.rs` | SYN cookies (RFC 4987), Linux's encoding; a connection from a cookie |
//! | `mtu.rs` | the path MTU: ICMP "fragmentation needed" (RFC 1191), retransmitting what was too large, black-hole detection and probing (RFC 4821), the effective MSS |
//! | `shared.rs` | what a table's connections share ([`TcpShared`]) |
//! | `ring.rs` | the byte ring both buffers are built on |
//!
//! ## Counters: who counts what
//!
//! The `Stack` counts, for every TCP segment it receives, `InSegs`; for a
//! checksum failure `InCsumErrors` and `InErrs`; for other malformed
//! segments `InErrs`; and for the segments it sends itself (the RSTs from
//! [`rst_for_unmatched`]) `OutSegs` and `OutRsts`. A [`Connection`] counts
//! everything else: its own `OutSegs`/`OutRsts`/`RetransSegs` (only for
//! segments `emit` accepted), `ActiveOpens`, `PassiveOpens`, `AttemptFails`,
//! `EstabResets`, `CurrEstab` and the `TcpExt` extras.

mod ack;
mod cc;
mod conn;
mod cubic;
mod cubic_linux;
mod ecn;
mod hystart;
mod hystart_pp;
mod input;
mod isn;
mod mtu;
mod output;
mod pacing;
mod prr;
mod rack;
mod rate;
mod recovery;
mod recv;
mod ring;
mod rtt;
mod sack;
mod send;
mod sendbuf;
pub use sendbuf::SEND_CHUNK_MAX;
mod shared;
mod syncookie;
mod timers;
mod urgent;

use core::fmt;
use std::io::ErrorKind;

use crate::time::Duration;
use ustack_wire::tcp::{SeqNum, TcpRepr};

pub use cc::{AckSample, CcAlgorithm, CcSnapshot, CongestionControl, NewReno, UnknownAlgorithm};
pub use conn::{Connection, NeighbourAdvice, TcpConnInfo};
pub use cubic::Cubic;
pub use ecn::EcnMode;
pub use input::IcmpUnreachable;
pub use isn::Isn;
pub use mtu::MtuProbing;
pub use output::EmitExt;
pub use rtt::RttEstimator;
pub use shared::TcpShared;
pub use syncookie::SynCookies;
pub(crate) use syncookie::{restore as restore_cookie, CookieJar, SYNCOOKIE_VALID};
pub use urgent::OobError;

/// TCP states (RFC 9293 3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Closed,
    Listen,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl State {
    /// Linux `ss` spelling.
    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECV",
            State::Established => "ESTAB",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a TCP operation failed; each variant maps to one Linux errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpError {
    /// EBADF: the handle is closed or was never valid.
    InvalidHandle,
    /// EAGAIN: nothing to read / no buffer space right now.
    WouldBlock,
    /// ENOTCONN.
    NotConnected,
    /// ECONNREFUSED: RST in answer to our SYN, or ICMP port unreachable.
    ConnectionRefused,
    /// ECONNRESET: the peer reset an established connection.
    ConnectionReset,
    /// ECONNABORTED: aborted locally.
    ConnectionAborted,
    /// ETIMEDOUT: retransmissions or keep-alive probes went unanswered.
    TimedOut,
    /// EHOSTUNREACH: ICMP host/net unreachable (reported at timeout).
    HostUnreachable,
    /// EPIPE: write after shutdown.
    BrokenPipe,
    /// EINVAL: the operation is not valid in this state (e.g. on a listener).
    InvalidState,
}

impl TcpError {
    pub fn errno_kind(&self) -> ErrorKind {
        match self {
            TcpError::InvalidHandle => ErrorKind::InvalidInput,
            TcpError::WouldBlock => ErrorKind::WouldBlock,
            TcpError::NotConnected => ErrorKind::NotConnected,
            TcpError::ConnectionRefused => ErrorKind::ConnectionRefused,
            TcpError::ConnectionReset => ErrorKind::ConnectionReset,
            TcpError::ConnectionAborted => ErrorKind::ConnectionAborted,
            TcpError::TimedOut => ErrorKind::TimedOut,
            TcpError::HostUnreachable => ErrorKind::HostUnreachable,
            TcpError::BrokenPipe => ErrorKind::BrokenPipe,
            TcpError::InvalidState => ErrorKind::InvalidInput,
        }
    }
}

impl fmt::Display for TcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TcpError::InvalidHandle => "invalid TCP handle",
            TcpError::WouldBlock => "operation would block",
            TcpError::NotConnected => "socket not connected",
            TcpError::ConnectionRefused => "connection refused",
            TcpError::ConnectionReset => "connection reset by peer",
            TcpError::ConnectionAborted => "connection aborted",
            TcpError::TimedOut => "connection timed out",
            TcpError::HostUnreachable => "no route to host",
            TcpError::BrokenPipe => "broken pipe",
            TcpError::InvalidState => "invalid argument",
        })
    }
}

impl std::error::Error for TcpError {}

/// Keep-alive parameters (Linux `tcp_keepalive_time/intvl/probes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepAlive {
    /// Idle time before the first probe (Linux: 7200 s).
    pub idle: Duration,
    /// Time between unanswered probes (Linux: 75 s).
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped (Linux: 9).
    pub count: u32,
}

impl Default for KeepAlive {
    fn default() -> Self {
        KeepAlive {
            idle: Duration::from_secs(7200),
            interval: Duration::from_secs(75),
            count: 9,
        }
    }
}

/// Per-connection tunables; `Default` is Linux-like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// Largest MSS we advertise (further clamped by the route MSS).
    pub mss: u16,
    /// Linux `TCP_MAXSEG`: a clamp on the MSS sent *and* advertised
    /// (`mss_clamp`); None: the peer's and the path's only.
    pub user_mss: Option<u16>,
    /// RFC 1337 (Linux `tcp_rfc1337`): a RST does not end TIME-WAIT
    /// ("TIME-WAIT assassination"). Off by default, as on Linux.
    pub rfc1337: bool,
    /// Receive buffer bytes (also the largest window we offer).
    pub rcv_buf: usize,
    /// Send buffer bytes: the most the send buffer grows to (Linux
    /// `tcp_wmem[2]`: 4 MB).
    pub snd_buf: usize,
    /// Send buffer bytes to begin with (at most `snd_buf`). The buffer
    /// then grows with the congestion window, to twice its bytes, up to
    /// `snd_buf` (send-buffer autotuning, Linux `tcp_sndbuf_expand`): a
    /// fast path gets a buffer covering its bandwidth-delay product, a slow
    /// one does not hold megabytes of an application's data. Equal to
    /// `snd_buf`: a fixed buffer (what setting `SO_SNDBUF` does on Linux).
    pub snd_buf_initial: usize,
    /// TIME-WAIT duration, 2*MSL (Linux: 60 s).
    pub time_wait: Duration,
    /// Delayed-ACK timeout (RFC 1122 4.2.3.2: "MUST be less than 0.5 s";
    /// RFC 5681: at most 500 ms; Linux uses 40 ms .. 200 ms).
    pub delayed_ack: Duration,
    /// RTO before any RTT sample (RFC 6298 2.1: 1 s).
    pub initial_rto: Duration,
    /// Lower bound on the RTO (Linux `TCP_RTO_MIN`: 200 ms).
    pub min_rto: Duration,
    /// Upper bound on the RTO (Linux `TCP_RTO_MAX`: 120 s).
    pub max_rto: Duration,
    /// Data retransmissions before giving up (Linux `tcp_retries2` = 15).
    pub max_retries: u32,
    /// SYN retransmissions before giving up (Linux `tcp_syn_retries` = 6).
    pub syn_retries: u32,
    /// SYN-ACK retransmissions before giving up (Linux `tcp_synack_retries` = 5).
    pub synack_retries: u32,
    /// Disable Nagle's algorithm (`TCP_NODELAY`); Linux default false.
    pub nodelay: bool,
    /// Keep-alive (`SO_KEEPALIVE`); off by default.
    pub keepalive: Option<KeepAlive>,
    /// Offer window scaling (RFC 7323).
    pub window_scale: bool,
    /// Offer timestamps (RFC 7323).
    pub timestamps: bool,
    /// Offer SACK (RFC 2018).
    pub sack: bool,
    /// Most out-of-order bytes held for reassembly (bounded by `rcv_buf` too).
    pub ooo_limit: usize,
    /// Initial congestion window in segments (RFC 6928: 10).
    pub initial_cwnd: u32,
    /// The congestion control algorithm of new connections (Linux
    /// `tcp_congestion_control`; default CUBIC, like Linux). Per
    /// connection: [`Connection::set_congestion_algorithm`].
    pub congestion_control: CcAlgorithm,
    /// Pace data segments at a multiple of cwnd / SRTT (200% in slow
    /// start, 120% after) in bursts of about a millisecond, as Linux's
    /// internal pacing does with `fq`; default on.
    pub pacing: bool,
    /// Nagle as Linux's (`tcp_nagle_check`): Minshall's variant, where a
    /// short segment waits only while an earlier short segment is
    /// unacknowledged, not whenever data is in flight; with it the
    /// receiver's half, Linux's ACK at once when a read empties the
    /// buffer after a short segment (`tcp_cleanup_rbuf`,
    /// `ICSK_ACK_PUSHED`), without which a bulk sender's short tail in
    /// flight draws a tail loss probe against the delayed ACK. Default
    /// off (RFC 896's Nagle, RFC 1122 4.2.3.4): with our pacing, the
    /// extra ACKs cost a paced bulk transfer on a short clean path about
    /// 3% more time (crates/sim's `pacing_costs_bulk_transfers_little`:
    /// 0.212 s against 0.206 s), not yet understood.
    pub nagle_minshall: bool,
    /// How long an orphaned (closed by the application) connection may stay
    /// in FIN-WAIT-2 (Linux `tcp_fin_timeout` = 60 s).
    pub fin_wait2_timeout: Duration,
    /// Challenge ACKs (RFC 5961 3.2, 4.2, 5.2) the whole stack sends per
    /// second on average, after each connection's own limit of one per
    /// 500 ms (RFC 5961 7 "ACK throttling"); `u32::MAX`: no stack-wide
    /// limit. Linux's `tcp_challenge_ack_limit`: 100 at first, 1000 from
    /// 4.7 (with the budget randomized, as here, after CVE-2016-5696
    /// showed a shared counter lets an off-path attacker infer sequence
    /// numbers); since 6.0 it is per network namespace and defaults to
    /// INT_MAX, i.e. off, leaving the per-socket limit alone, because even
    /// a randomized shared budget is a side channel. We keep the classic
    /// 1000 as a bound on what a flood of spoofed segments over many
    /// connections can make the stack send.
    pub challenge_ack_limit: u32,
    /// SYN cookies (RFC 4987; Linux `tcp_syncookies`, default 1 = when
    /// the listener's SYN queue is full). See [`SynCookies`].
    pub syncookies: SynCookies,
    /// Packetization-layer path MTU discovery (RFC 4821; Linux
    /// `tcp_mtu_probing`). Default off, as Linux's (see [`MtuProbing`]
    /// for why not "on black-hole detection").
    pub mtu_probing: MtuProbing,
    /// Where probing starts, and the MSS a suspected black hole falls
    /// back to (Linux `tcp_base_mss`: 1024).
    pub base_mss: u16,
    /// Smallest MSS black-hole detection may fall to (Linux
    /// `tcp_mtu_probe_floor`: 48).
    pub mtu_probe_floor: u16,
    /// Probing stops when the search range is narrower than this many
    /// bytes (Linux `tcp_probe_threshold`: 8).
    pub probe_threshold: u16,
    /// A finished search starts again after this long (Linux
    /// `tcp_probe_interval`: 600 s).
    pub probe_interval: Duration,
    /// The fewest segments Linux puts in one TSO/GSO packet however slow
    /// the pacing rate (Linux `tcp_min_tso_segs`: 2). It shapes where PSH
    /// falls in a burst (every multi-segment packet of Linux carries it),
    /// and how large TSO super-segments are.
    pub min_tso_segs: u8,
    /// Explicit Congestion Notification (RFC 3168; Linux `tcp_ecn`):
    /// request it on active opens, accept it on passive ones, or neither.
    /// Default: accept only, as Linux (`tcp_ecn` = 2).
    pub ecn: EcnMode,
    /// Restart cwnd after an idle period longer than the RTO (RFC 5681
    /// 4.1; Linux `tcp_slow_start_after_idle`, default 1). Off, the window
    /// survives the pause (packetdrill's `defaults.sh` turns it off).
    pub slow_start_after_idle: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1460,
            user_mss: None,
            rfc1337: false,
            rcv_buf: 256 * 1024,
            snd_buf: 4 * 1024 * 1024,
            snd_buf_initial: 256 * 1024,
            time_wait: Duration::from_secs(60),
            delayed_ack: Duration::from_millis(40),
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(120),
            max_retries: 15,
            syn_retries: 6,
            synack_retries: 5,
            nodelay: false,
            keepalive: None,
            window_scale: true,
            timestamps: true,
            sack: true,
            ooo_limit: 256 * 1024,
            initial_cwnd: 10,
            congestion_control: CcAlgorithm::Cubic,
            pacing: true,
            nagle_minshall: false,
            fin_wait2_timeout: Duration::from_secs(60),
            challenge_ack_limit: 1000,
            syncookies: SynCookies::WhenNeeded,
            mtu_probing: MtuProbing::Off,
            base_mss: 1024,
            mtu_probe_floor: 48,
            probe_threshold: 8,
            probe_interval: Duration::from_secs(600),
            min_tso_segs: 2,
            ecn: EcnMode::Passive,
            slow_start_after_idle: true,
        }
    }
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// TCP counters with the Linux names (`/proc/net/snmp` `Tcp:` and
        /// `/proc/net/netstat` `TcpExt:`). See the module docs for who
        /// counts which.
        #[allow(non_snake_case)]
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct TcpCounters {
            $(pub $name: u64,)*
        }

        impl TcpCounters {
            /// `(name, value)` pairs in declaration order, for printing.
            pub fn counters_list(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters!(
    ActiveOpens,
    PassiveOpens,
    AttemptFails,
    EstabResets,
    CurrEstab,
    InSegs,
    OutSegs,
    RetransSegs,
    InErrs,
    OutRsts,
    InCsumErrors,
    DelayedACKs,
    TCPTimeouts,
    TCPFastRetrans,
    TCPLossProbes,
    TCPLossProbeRecovery,
    TCPDSACKRecv,
    TCPDSACKOldSent,
    TCPDSACKOfoSent,
    TCPFullUndo,
    TCPLossUndo,
    TCPSackRecovery,
    TCPRenoRecovery,
    TCPOFOQueue,
    TCPOFODrop,
    TCPAbortOnTimeout,
    TCPAbortOnData,
    TCPAbortOnClose,
    TCPChallengeACK,
    PAWSEstab,
    TCPWinProbe,
    TCPKeepAlive,
    OutOfWindowIcmps,
    TCPACKSkippedChallenge,
    TCPMTUPFail,
    TCPMTUPSuccess,
);

/// The RST to answer a segment that matched no connection, if any
/// (RFC 9293 3.10.7.1): "If the state is CLOSED (i.e., TCB does not exist)
/// then all data in the incoming segment is discarded. An incoming segment
/// containing a RST is discarded. An incoming segment not containing a RST
/// causes a RST to be sent in response. The acknowledgment and sequence field
/// values are selected to make the reset sequence acceptable to the TCP
/// endpoint that sent the offending segment. If the ACK bit is off, sequence
/// number zero is used, <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>. If the
/// ACK bit is on, <SEQ=SEG.ACK><CTL=RST>."
pub fn rst_for_unmatched(seg: &TcpRepr) -> Option<TcpRepr<'static>> {
    if seg.rst {
        return None;
    }
    let mut r = TcpRepr {
        src_port: seg.dst_port,
        dst_port: seg.src_port,
        rst: true,
        ..TcpRepr::default()
    };
    match seg.ack {
        Some(ack) => r.seq = ack,
        None => {
            r.seq = SeqNum(0);
            r.ack = Some(seg.seq + seg.seq_len());
        }
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rst_for_unmatched_follows_rfc() {
        let syn = TcpRepr {
            src_port: 1000,
            dst_port: 80,
            seq: SeqNum(77),
            syn: true,
            payload: b"ab",
            ..TcpRepr::default()
        };
        let r = rst_for_unmatched(&syn).unwrap();
        assert!(r.rst);
        assert_eq!((r.src_port, r.dst_port), (80, 1000));
        assert_eq!(r.seq, SeqNum(0));
        assert_eq!(r.ack, Some(SeqNum(80)));
        let ack = TcpRepr {
            syn: false,
            ack: Some(SeqNum(5)),
            payload: &[],
            ..syn
        };
        let r = rst_for_unmatched(&ack).unwrap();
        assert_eq!((r.seq, r.ack), (SeqNum(5), None));
        let rst = TcpRepr { rst: true, ..ack };
        assert!(rst_for_unmatched(&rst).is_none());
    }

    #[test]
    fn counters_list_has_linux_names() {
        let c = TcpCounters {
            InSegs: 3,
            ..TcpCounters::default()
        };
        let l = c.counters_list();
        assert!(l.contains(&("InSegs", 3)));
        assert!(l.iter().any(|(n, _)| *n == "TCPAbortOnTimeout"));
    }
}
