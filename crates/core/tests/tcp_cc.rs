//! Congestion control through a whole connection: the algorithm choice
//! (CUBIC by default, NewReno per connection or per stack), PRR (RFC 6937)
//! driven by real ACK processing (SACK scoreboard, RACK), and pacing. The
//! peer is played by hand, segment by segment; the formulas themselves are
//! tested against the RFCs' values in `cc.rs`, `cubic.rs`, `hystart.rs`,
//! `prr.rs` and `pacing.rs`.

use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_core::tcp::{CcAlgorithm, Connection, State, TcpConfig, TcpCounters, TcpShared};
use ustack_core::time::{Duration, Instant};
use ustack_core::{Config, Limits, Stack};
use ustack_wire::ethernet::MacAddr;
use ustack_wire::ipv4::Ipv4Cidr;
use ustack_wire::tcp::{SeqNum, TcpRepr};

const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000);
const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
const ISS: u32 = 1000;
const IRS: u32 = 5000;
const MSS: u32 = 1000;
/// The handshake's (and every later exchange's) round trip.
const RTT: Duration = Duration::from_millis(100);

/// What `dispatch` emitted: (seq, payload length).
fn dispatch(c: &mut Connection, now: Instant, ctr: &mut TcpCounters) -> Vec<(u32, usize)> {
    let mut out = Vec::new();
    c.dispatch(now, ctr, &mut TcpShared::default(), &mut |r| {
        out.push((r.seq.0, r.payload.len()));
        true
    });
    out
}

fn peer(ack: u32, sack: Option<(u32, u32)>) -> TcpRepr<'static> {
    TcpRepr {
        src_port: REMOTE.port(),
        dst_port: LOCAL.port(),
        seq: SeqNum(IRS + 1),
        ack: Some(SeqNum(ack)),
        window: u16::MAX,
        sack_ranges: [sack.map(|(l, r)| (SeqNum(l), SeqNum(r))), None, None, None],
        ..TcpRepr::default()
    }
}

/// A sender with MSS 1000, SACK, no timestamps, a peer window of 8 MB and
/// a handshake RTT of 100 ms, established at `RTT`.
fn sender(cfg: TcpConfig, ctr: &mut TcpCounters) -> Connection {
    let cfg = TcpConfig {
        timestamps: false,
        sack: true,
        window_scale: true,
        snd_buf: 1 << 20,
        ..cfg
    };
    let mut c = Connection::connect(&cfg, LOCAL, REMOTE, SeqNum(ISS), 1460, Instant::ZERO);
    assert_eq!(dispatch(&mut c, Instant::ZERO, ctr).len(), 1, "the SYN");
    let synack = TcpRepr {
        syn: true,
        seq: SeqNum(IRS),
        max_seg_size: Some(MSS as u16),
        window_scale: Some(7),
        sack_permitted: true,
        ..peer(ISS + 1, None)
    };
    let now = Instant::ZERO + RTT;
    c.process(now, &synack, ctr, &mut TcpShared::default());
    assert_eq!(c.state(), State::Established);
    dispatch(&mut c, now, ctr);
    assert_eq!(c.srtt(), Some(RTT));
    c
}

/// RFC 6937 3.1's first example through a connection: cwnd = FlightSize =
/// 20 segments, segment 0 is lost, the ACKs of segments 1..19 come back
/// (SACKing them). Limited transmit sends a new segment on the first two;
/// RACK deems segment 0 lost on the third (three segments SACKed, RFC 8985
/// DupThresh) and fast recovery starts with ssthresh = 20 / 2 = 10 (the
/// limited-transmit segments not counted, RFC 5681 3.2) and RecoverFS =
/// 22. From then on PRR decides what each ACK lets out: one segment for
/// every two delivered until pipe reaches ssthresh, then what keeps it
/// there (`prr.rs` checks the RFC's own rows and this variant of them).
#[test]
fn prr_spreads_the_single_loss_reduction_over_the_round_trip() {
    let mut ctr = TcpCounters::default();
    let cfg = TcpConfig {
        initial_cwnd: 20,
        congestion_control: CcAlgorithm::NewReno,
        pacing: false,
        ..TcpConfig::default()
    };
    let mut c = sender(cfg, &mut ctr);
    assert_eq!(c.send(&vec![7u8; 60 * MSS as usize]).unwrap(), 60_000);
    let t0 = Instant::ZERO + RTT;
    let first = dispatch(&mut c, t0, &mut ctr);
    assert_eq!(first.len(), 20, "cwnd = 20 segments");
    assert!(first.iter().all(|&(_, n)| n == MSS as usize));
    let una = ISS + 1;
    let seg = |i: u32| una + i * MSS;
    let mut max = seg(20);
    let now = t0 + RTT;
    let mut sent = Vec::new();
    for k in 1..=19u32 {
        c.process(
            now,
            &peer(una, Some((seg(1), seg(k + 1)))),
            &mut ctr,
            &mut TcpShared::default(),
        );
        let out = dispatch(&mut c, now, &mut ctr);
        let mut what = String::new();
        for &(s, n) in &out {
            if n == 0 {
                continue;
            }
            if s == una {
                what.push('R');
            } else {
                assert_eq!(s, max, "ack {k}: new data in order");
                max += n as u32;
                what.push('N');
            }
        }
        sent.push(what);
        if k == 3 {
            assert_eq!(ctr.TCPFastRetrans, 1, "recovery starts on the third");
            assert_eq!(c.ssthresh(), 10 * MSS as usize);
        }
    }
    assert_eq!(
        sent,
        ["N", "N", "R", "", "N", "", "N", "", "N", "", "N", "", "", "N", "", "N", "", "", "N"]
    );
    assert_eq!(ctr.RetransSegs, 1);
    // The repair arrives: a full ACK ends recovery; NewReno's cwnd is
    // "min (ssthresh, max(FlightSize, SMSS) + SMSS)" (RFC 6582 3.2 (3)),
    // with nothing left in flight two segments.
    let later = now + RTT;
    c.process(later, &peer(max, None), &mut ctr, &mut TcpShared::default());
    assert!(!c.info().in_recovery);
    assert_eq!(c.cwnd(), 2 * MSS as usize);
}

/// RFC 6937 3.1's second example: the first 15 segments are lost, only
/// the ACKs of 15..19 return. Pipe falls to 4, far below ssthresh: the
/// reduction bound decides. Like Linux (and RFC 9937), an ACK that does
/// not advance SND.UNA gets the conservative bound, so each ACK releases
/// one retransmission: the RFC's PRR-CRB row ("R R R", pipe 4 4 4).
#[test]
fn prr_burst_loss_follows_the_conservative_bound() {
    let mut ctr = TcpCounters::default();
    let cfg = TcpConfig {
        initial_cwnd: 20,
        congestion_control: CcAlgorithm::NewReno,
        pacing: false,
        ..TcpConfig::default()
    };
    let mut c = sender(cfg, &mut ctr);
    c.send(&vec![7u8; 60 * MSS as usize]).unwrap();
    let t0 = Instant::ZERO + RTT;
    assert_eq!(dispatch(&mut c, t0, &mut ctr).len(), 20);
    let una = ISS + 1;
    let seg = |i: u32| una + i * MSS;
    let now = t0 + RTT;
    let mut rows = Vec::new();
    for k in 15..=19u32 {
        c.process(
            now,
            &peer(una, Some((seg(15), seg(k + 1)))),
            &mut ctr,
            &mut TcpShared::default(),
        );
        let out: Vec<_> = dispatch(&mut c, now, &mut ctr)
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect();
        let rtx = out
            .iter()
            .filter(|&&(s, _)| s.wrapping_sub(una) < 15 * MSS)
            .count();
        rows.push((out.len() - rtx, rtx));
    }
    // (new, retransmitted) per ACK: "sent: N N R R R".
    assert_eq!(rows, [(1, 0), (1, 0), (0, 1), (0, 1), (0, 1)]);
    assert_eq!(ctr.TCPFastRetrans, 1);
}

/// CUBIC is the default; NewReno per connection (before or after the
/// handshake, keeping the window) and per stack.
#[test]
fn algorithm_is_chosen_per_stack_and_per_connection() {
    assert_eq!(TcpConfig::default().congestion_control, CcAlgorithm::Cubic);
    assert!(TcpConfig::default().pacing);
    let mut ctr = TcpCounters::default();
    let mut c = sender(TcpConfig::default(), &mut ctr);
    assert_eq!(c.congestion_algorithm(), "cubic");
    assert_eq!(c.info().congestion_control, "cubic");
    let (cwnd, ssthresh) = (c.cwnd(), c.ssthresh());
    c.set_congestion_algorithm(CcAlgorithm::NewReno);
    assert_eq!(c.congestion_algorithm(), "newreno");
    assert_eq!((c.cwnd(), c.ssthresh()), (cwnd, ssthresh), "window kept");
    let reno = TcpConfig {
        congestion_control: CcAlgorithm::NewReno,
        ..TcpConfig::default()
    };
    let c = sender(reno, &mut ctr);
    assert_eq!(c.congestion_algorithm(), "newreno");
    // Chosen before the handshake: the handshake keeps the choice.
    let mut c = Connection::connect(
        &TcpConfig::default(),
        LOCAL,
        REMOTE,
        SeqNum(ISS),
        1460,
        Instant::ZERO,
    );
    c.set_congestion_algorithm(CcAlgorithm::NewReno);
    dispatch(&mut c, Instant::ZERO, &mut ctr);
    let synack = TcpRepr {
        syn: true,
        seq: SeqNum(IRS),
        max_seg_size: Some(MSS as u16),
        ..peer(ISS + 1, None)
    };
    c.process(
        Instant::ZERO + RTT,
        &synack,
        &mut ctr,
        &mut TcpShared::default(),
    );
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.congestion_algorithm(), "newreno");
    assert_eq!(c.cwnd(), 10 * MSS as usize, "IW with the negotiated MSS");
}

/// The Stack's calls: `tcp_set_congestion_control`, `tcp_set_pacing`,
/// `tcp_info`.
#[test]
fn stack_sets_algorithm_and_pacing_per_socket() {
    let cfg = Config {
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        addr: Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24).unwrap(),
        gateway: None,
        mtu: 1500,
        tcp: TcpConfig::default(),
        limits: Limits::default(),
        secret: [1; 16],
        seed: 1,
    };
    let mut s = Stack::new(cfg, Instant::ZERO);
    let h = s
        .tcp_connect(
            Instant::ZERO,
            SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80),
            None,
        )
        .unwrap();
    assert_eq!(s.tcp_info(h).unwrap().congestion_control, "cubic");
    s.tcp_set_congestion_control(h, CcAlgorithm::NewReno)
        .unwrap();
    s.tcp_set_pacing(h, false).unwrap();
    let i = s.tcp_info(h).unwrap();
    assert_eq!(i.congestion_control, "newreno");
    assert_eq!(i.pacing_rate, None);
    let l = s
        .tcp_listen(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80), 8)
        .unwrap();
    assert!(s.tcp_set_congestion_control(l, CcAlgorithm::Cubic).is_err());
    s.tcp_close(h);
    assert!(s.tcp_info(h).is_err(), "stale handle");
}

/// With an RTT measured, data leaves in paced bursts: 200% of cwnd / SRTT
/// in slow start, a burst of about 1 ms of data but at least two
/// segments, the next burst when the last one's bytes have had their time
/// at that rate, announced by `poll_at`. Without pacing the whole window
/// leaves at once.
#[test]
fn pacing_spreads_a_window_over_the_round_trip() {
    for pacing in [true, false] {
        let mut ctr = TcpCounters::default();
        let cfg = TcpConfig {
            pacing,
            ..TcpConfig::default()
        };
        let mut c = sender(cfg, &mut ctr);
        c.send(&vec![1u8; 200 * MSS as usize]).unwrap();
        let mut now = Instant::ZERO + RTT;
        // The initial window goes unpaced (the first ten segments).
        let iw = dispatch(&mut c, now, &mut ctr);
        assert_eq!(iw.len(), 10);
        // Its ACK: slow start doubles cwnd to 20 segments, paced or not
        // (every segment acknowledged counts, as in Linux).
        now += RTT;
        c.process(
            now,
            &peer(ISS + 1 + 10 * MSS, None),
            &mut ctr,
            &mut TcpShared::default(),
        );
        let window = 20;
        assert_eq!(c.cwnd(), window * MSS as usize);
        let mut times = Vec::new();
        let mut sent = 0;
        for _ in 0..100 {
            let n = dispatch(&mut c, now, &mut ctr).len();
            if n > 0 {
                times.push((now, n));
                sent += n;
            }
            if sent >= window {
                break;
            }
            now = c.poll_at().expect("paced data needs a timer").max(now);
        }
        assert_eq!(sent, window, "pacing {pacing}: the window goes out");
        if !pacing {
            assert_eq!(times.len(), 1, "all at once: {times:?}");
            assert_eq!(c.pacing_rate(), None);
            continue;
        }
        // 2 * 20 segments per 100 ms = 400 KB/s: a millisecond is 400
        // bytes, so bursts of two segments, 5 ms apart. The first goes
        // 2.5 ms after the one before: the initial window's tenth segment
        // was paced (Linux paces from the packet that brings
        // `data_segs_out` to ten), and a burst that leaves later than its
        // time gets up to half its own time back (`tcp_update_skb_after_send`,
        // what slow_start/slow-start-fq-ack-per-2pkt.pkt checks).
        assert_eq!(c.pacing_rate(), Some(400_000));
        assert_eq!(times.len(), 10, "{times:?}");
        for (i, w) in times.windows(2).enumerate() {
            assert_eq!(w[0].1, 2);
            let gap = if i == 0 { 2500 } else { 5000 };
            assert_eq!(
                w[1].0.saturating_duration_since(w[0].0),
                Duration::from_micros(gap),
                "{times:?}"
            );
        }
    }
}
