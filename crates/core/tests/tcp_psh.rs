//! Where PSH falls in a burst, as Linux places it: on every packet of more
//! than one segment (Linux `__tcp_transmit_skb` forces it "on all (GSO)
//! packets to expedite GRO flush at receiver"), whose size `tcp_write_xmit`
//! bounds by half of cwnd and by TSO autosizing (about a millisecond at the
//! pacing rate, never fewer than `tcp_min_tso_segs`), and on a packet of
//! one segment only when it ends a write. Without TSO the engine sends one
//! segment at a time, and the last segment of each such packet carries it.
//! Also the ACK side of Linux's accounting that the same upstream scripts
//! check: SACK blocks mark whole segments only, and cwnd grows by what an
//! ACK newly delivered.

use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_core::tcp::{Connection, State, TcpConfig, TcpCounters, TcpShared};
use ustack_core::time::{Duration, Instant};
use ustack_wire::tcp::{SeqNum, TcpRepr};

const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000);
const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
const ISS: u32 = 1000;
const IRS: u32 = 5000;
const MSS: u32 = 1000;
const RTT: Duration = Duration::from_millis(100);

/// What `dispatch` emitted: (offset of the first byte from ISS + 1, payload
/// length, PSH).
fn dispatch(c: &mut Connection, now: Instant, ctr: &mut TcpCounters) -> Vec<(u32, usize, bool)> {
    let mut out = Vec::new();
    c.dispatch(now, ctr, &mut TcpShared::default(), &mut |r| {
        if !r.payload.is_empty() {
            out.push((r.seq.0.wrapping_sub(ISS + 1), r.payload.len(), r.psh));
        }
        true
    });
    out
}

fn peer(ack: u32, sack: Option<(u32, u32)>) -> TcpRepr<'static> {
    TcpRepr {
        src_port: REMOTE.port(),
        dst_port: LOCAL.port(),
        seq: SeqNum(IRS + 1),
        ack: Some(SeqNum(ISS + 1 + ack)),
        window: u16::MAX,
        sack_ranges: [
            sack.map(|(l, r)| (SeqNum(ISS + 1 + l), SeqNum(ISS + 1 + r))),
            None,
            None,
            None,
        ],
        ..TcpRepr::default()
    }
}

/// An established sender: MSS 1000, no timestamps, a handshake RTT of
/// 100 ms (so Linux's pacing rate is low and its TSO packets hold
/// `tcp_min_tso_segs` segments), pacing off.
fn sender(cfg: TcpConfig, sack: bool, ctr: &mut TcpCounters) -> Connection {
    let cfg = TcpConfig {
        timestamps: false,
        sack,
        window_scale: true,
        snd_buf: 1 << 20,
        pacing: false,
        ..cfg
    };
    let mut c = Connection::connect(&cfg, LOCAL, REMOTE, SeqNum(ISS), 1460, Instant::ZERO);
    dispatch(&mut c, Instant::ZERO, ctr);
    let synack = TcpRepr {
        syn: true,
        seq: SeqNum(IRS),
        ack: Some(SeqNum(ISS + 1)),
        max_seg_size: Some(MSS as u16),
        window_scale: Some(7),
        sack_permitted: sack,
        ..peer(0, None)
    };
    c.process(Instant::ZERO + RTT, &synack, ctr, &mut TcpShared::default());
    assert_eq!(c.state(), State::Established);
    // The window scaled from here on (so that later ACKs can be duplicates).
    c.process(
        Instant::ZERO + RTT,
        &peer(0, None),
        ctr,
        &mut TcpShared::default(),
    );
    dispatch(&mut c, Instant::ZERO + RTT, ctr);
    c
}

/// The PSH bits of a burst, one per segment.
fn pshs(segs: &[(u32, usize, bool)]) -> Vec<bool> {
    segs.iter().map(|s| s.2).collect()
}

#[test]
fn psh_on_the_last_segment_of_each_two_segment_packet() {
    let mut ctr = TcpCounters::default();
    let mut c = sender(TcpConfig::default(), true, &mut ctr);
    let now = Instant::ZERO + RTT;
    assert_eq!(c.send(&[0; 20_000]).unwrap(), 20_000);
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.len(), 10, "the initial window");
    // A 100 ms path: Linux's TSO packets hold two segments.
    let want: Vec<bool> = (1..=10).map(|i| i % 2 == 0).collect();
    assert_eq!(pshs(&out), want);
}

#[test]
fn packets_hold_half_of_cwnd_at_most() {
    let mut ctr = TcpCounters::default();
    let cfg = TcpConfig {
        min_tso_segs: 10,
        ..TcpConfig::default()
    };
    let mut c = sender(cfg, true, &mut ctr);
    let now = Instant::ZERO + RTT;
    c.send(&[0; 26_000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    // Linux: `P. 1:5001(5000)`, `P. 5001:10001(5000)`.
    let want: Vec<bool> = (1..=10).map(|i| i % 5 == 0).collect();
    assert_eq!(pshs(&out), want);
}

#[test]
fn a_one_segment_packet_is_pushed_only_at_the_end_of_a_write() {
    let mut ctr = TcpCounters::default();
    let mut c = sender(TcpConfig::default(), true, &mut ctr);
    let now = Instant::ZERO + RTT;
    // Five segments: packets of 2, 2 and 1; the last ends the write.
    c.send(&[0; 5_000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(pshs(&out), [false, true, false, true, true]);
    // Eleven segments, cwnd ten: the tenth ends a two-segment packet,
    // the eleventh waits.
    let mut c = sender(TcpConfig::default(), true, &mut ctr);
    c.send(&[0; 11_000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.len(), 10);
    assert!(out[9].2);
    // One more segment allowed by an ACK of one: a packet of one segment
    // that is not the end of the write goes without PSH.
    c.process(
        now + RTT,
        &peer(1000, None),
        &mut ctr,
        &mut TcpShared::default(),
    );
    let out = dispatch(&mut c, now + RTT, &mut ctr);
    assert_eq!(out.iter().map(|s| s.0).collect::<Vec<_>>(), [10_000]);
    assert!(out[0].2, "the last byte written is pushed");
}

/// A sender whose cwnd grew to at least 20 segments (10,000 bytes sent
/// and acknowledged), then 2 s idle: the connection and the time now.
fn grown_then_idle(cfg: TcpConfig, ctr: &mut TcpCounters) -> (Connection, Instant) {
    let mut c = sender(cfg, true, ctr);
    let mut now = Instant::ZERO + RTT;
    c.send(&[0; 10_000]).unwrap();
    dispatch(&mut c, now, ctr);
    now += RTT;
    c.process(now, &peer(10_000, None), ctr, &mut TcpShared::default());
    dispatch(&mut c, now, ctr);
    assert!(c.cwnd() >= 20 * MSS as usize);
    (c, now + Duration::from_secs(2))
}

#[test]
fn idle_restart_shrinks_the_packet_before_it_is_sized() {
    let mut ctr = TcpCounters::default();
    let cfg = TcpConfig {
        min_tso_segs: 10,
        ..TcpConfig::default()
    };
    let (mut c, now) = grown_then_idle(cfg, &mut ctr);
    c.send(&[0; 20_000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(c.cwnd(), 10 * MSS as usize, "restarted");
    // Half of the restarted window per packet: PSH every five segments.
    assert_eq!(out.len(), 10);
    let want: Vec<bool> = (1..=10).map(|i| i % 5 == 0).collect();
    assert_eq!(pshs(&out), want);
}

/// `tcp_slow_start_after_idle` = 0 (packetdrill's `defaults.sh`): the
/// window survives the pause, as on Linux (cubic-bulk-166k-idle-restart.pkt
/// sends a 36-segment window again after 4 s idle, Linux 6.18 too).
#[test]
fn no_restart_after_idle_when_the_tunable_is_off() {
    let mut ctr = TcpCounters::default();
    let cfg = TcpConfig {
        slow_start_after_idle: false,
        ..TcpConfig::default()
    };
    let (mut c, now) = grown_then_idle(cfg, &mut ctr);
    let cwnd = c.cwnd();
    c.send(&[0; 30_000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(c.cwnd(), cwnd, "not restarted");
    let sent: usize = out.iter().map(|s| s.1).sum();
    assert_eq!(sent, cwnd, "a whole window goes out at once");
}

/// Linux cuts a write into skbs of `size_goal` bytes, and a write that
/// finds everything before it sent starts a new skb (the write queue is
/// empty): packets, pieces of skbs, count from there, not from the first
/// byte of the connection.
#[test]
fn a_write_after_everything_was_sent_starts_a_new_skb() {
    let mut ctr = TcpCounters::default();
    let cfg = TcpConfig {
        timestamps: false,
        window_scale: false,
        pacing: false,
        ..TcpConfig::default()
    };
    let mut c = Connection::connect(&cfg, LOCAL, REMOTE, SeqNum(ISS), 1460, Instant::ZERO);
    dispatch(&mut c, Instant::ZERO, &mut ctr);
    // A peer window of 20000 bytes: skbs of half of it, 10 segments.
    let small = |ack: u32| TcpRepr {
        window: 20_000,
        ..peer(ack, None)
    };
    let synack = TcpRepr {
        syn: true,
        seq: SeqNum(IRS),
        ack: Some(SeqNum(ISS + 1)),
        max_seg_size: Some(MSS as u16),
        sack_permitted: true,
        ..small(0)
    };
    let mut now = Instant::ZERO + RTT;
    c.process(now, &synack, &mut ctr, &mut TcpShared::default());
    dispatch(&mut c, now, &mut ctr);
    c.send(&[0; 5_000]).unwrap();
    assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 5);
    now += RTT;
    c.process(now, &small(5_000), &mut ctr, &mut TcpShared::default());
    dispatch(&mut c, now, &mut ctr);
    // The next write's skbs: 5001..15001 and 15001..25001. Packets of two
    // segments (a 100 ms path) from 5001 on, none cut at 10001.
    c.send(&[0; 20_000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.first().map(|s| s.0), Some(5_000));
    assert_eq!(out.len(), 10, "cwnd 10 (5 segments out did not fill it)");
    let want: Vec<bool> = (1..=10).map(|i| i % 2 == 0).collect();
    assert_eq!(pshs(&out), want);
}

#[test]
fn sack_of_part_of_a_segment_marks_nothing() {
    let mut ctr = TcpCounters::default();
    let mut c = sender(TcpConfig::default(), true, &mut ctr);
    let now = Instant::ZERO + RTT;
    c.send(&[0; 4_000]).unwrap();
    assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 4);
    // The receiver SACKs the last byte only (Linux: tcp_match_skb_to_sack
    // marks whole MSS pieces): nothing is SACKed, nothing deemed lost.
    let t = now + RTT;
    c.process(
        t,
        &peer(0, Some((3_999, 4_000))),
        &mut ctr,
        &mut TcpShared::default(),
    );
    assert_eq!(c.info().sacked_segs, 0);
    // A block over part of the third and all of the fourth: the fourth.
    c.process(
        t,
        &peer(0, Some((2_500, 4_000))),
        &mut ctr,
        &mut TcpShared::default(),
    );
    assert_eq!(c.info().sacked_segs, 1);
    assert_eq!(c.info().lost_segs, 0);
}

#[test]
fn cwnd_grows_by_what_an_ack_newly_delivers() {
    for sack in [true, false] {
        let mut ctr = TcpCounters::default();
        let mut c = sender(TcpConfig::default(), sack, &mut ctr);
        let mut now = Instant::ZERO + RTT;
        c.send(&[0; 15_000]).unwrap();
        assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 10);
        // Two duplicate ACKs (SACKing the second and third segments), each
        // answered by limited transmit, then the first segment arrives.
        for (i, end) in [(1u32, 2_000u32), (2, 3_000)] {
            now += Duration::from_millis(10);
            let blk = sack.then_some((1_000, end));
            c.process(now, &peer(0, blk), &mut ctr, &mut TcpShared::default());
            let out = dispatch(&mut c, now, &mut ctr);
            assert_eq!(out.len(), 1, "limited transmit {i}");
        }
        assert_eq!(c.cwnd(), 10 * MSS as usize);
        now += Duration::from_millis(10);
        c.process(now, &peer(3_000, None), &mut ctr, &mut TcpShared::default());
        // Linux: "one packet newly acked ... slow start cwnd from 10 to 11".
        assert_eq!(c.cwnd(), 11 * MSS as usize, "sack {sack}");
        let out = dispatch(&mut c, now, &mut ctr);
        assert_eq!(out.len(), 2, "11 - 9 in flight");
        assert!(out[1].2, "a two-segment packet");
    }
}
