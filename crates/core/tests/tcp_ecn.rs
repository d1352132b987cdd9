//! Explicit Congestion Notification (RFC 3168) through whole connections,
//! as Linux does it (`net.ipv4.tcp_ecn`): the ECN-setup SYN and SYN-ACK,
//! ECT(0) on new data only, the receiver's ECE until CWR, the sender's CWR
//! state (one reduction per window, PRR, CWR on the next new data).

use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_core::tcp::{Connection, EcnMode, State, TcpConfig, TcpCounters, TcpShared};
use ustack_core::time::{Duration, Instant};
use ustack_wire::tcp::{SeqNum, TcpRepr};

const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);
const ISS: u32 = 1000;
const IRS: u32 = 5000;
const MSS: usize = 1000;
const RTT: Duration = Duration::from_millis(100);
const ECT0: u8 = 2;
const CE: u8 = 3;

/// What went out: (seq offset from ISS + 1, payload length, ECE, CWR,
/// SYN, IP ECN codepoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Out {
    off: u32,
    len: usize,
    ece: bool,
    cwr: bool,
    syn: bool,
    ip_ecn: u8,
}

fn dispatch(c: &mut Connection, now: Instant, ctr: &mut TcpCounters) -> Vec<Out> {
    let mut out = Vec::new();
    c.dispatch(now, ctr, &mut TcpShared::default(), &mut |r| {
        out.push(Out {
            off: r.seq.0.wrapping_sub(ISS + 1),
            len: r.payload.len(),
            ece: r.ece,
            cwr: r.cwr,
            syn: r.syn,
            ip_ecn: r.ip_ecn,
        });
        true
    });
    out
}

/// A segment from the peer: `seq` and `ack` as offsets from IRS + 1 and
/// ISS + 1.
fn peer(seq: u32, ack: u32, payload: &'static [u8]) -> TcpRepr<'static> {
    TcpRepr {
        src_port: REMOTE.port(),
        dst_port: LOCAL.port(),
        seq: SeqNum(IRS + 1 + seq),
        ack: Some(SeqNum(ISS + 1 + ack)),
        window: 1000,
        payload,
        ..TcpRepr::default()
    }
}

fn syn(ece: bool, cwr: bool, ip_ecn: u8) -> TcpRepr<'static> {
    TcpRepr {
        src_port: REMOTE.port(),
        dst_port: LOCAL.port(),
        seq: SeqNum(IRS),
        syn: true,
        ece,
        cwr,
        ip_ecn,
        window: 65535,
        max_seg_size: Some(MSS as u16),
        window_scale: Some(7),
        sack_permitted: true,
        ..TcpRepr::default()
    }
}

fn cfg(ecn: EcnMode) -> TcpConfig {
    TcpConfig {
        timestamps: false,
        pacing: false,
        ecn,
        ..TcpConfig::default()
    }
}

/// A passive connection accepting `syn`, established after a 100 ms RTT;
/// returns it and its SYN-ACK.
fn accepted(cfg: &TcpConfig, s: &TcpRepr, ctr: &mut TcpCounters) -> (Connection, Out) {
    let mut c = Connection::accept(cfg, LOCAL, REMOTE, s, SeqNum(ISS), 1460, Instant::ZERO);
    let out = dispatch(&mut c, Instant::ZERO, ctr);
    assert_eq!(out.len(), 1);
    c.process(
        Instant::ZERO + RTT,
        &peer(0, 0, b""),
        ctr,
        &mut TcpShared::default(),
    );
    assert_eq!(c.state(), State::Established);
    (c, out[0])
}

#[test]
fn a_listener_agrees_to_an_ecn_setup_syn() {
    let mut ctr = TcpCounters::default();
    for mode in [EcnMode::Passive, EcnMode::On] {
        let (c, synack) = accepted(&cfg(mode), &syn(true, true, 0), &mut ctr);
        assert!(synack.syn && synack.ece && !synack.cwr && synack.ip_ecn == 0);
        assert!(c.ecn());
    }
    // Not with tcp_ecn = 0, not for a SYN marked ECT, not for a SYN that
    // is no ECN-setup SYN.
    for (mode, s) in [
        (EcnMode::Off, syn(true, true, 0)),
        (EcnMode::Passive, syn(true, true, ECT0)),
        (EcnMode::Passive, syn(true, false, 0)),
        (EcnMode::Passive, syn(false, false, 0)),
    ] {
        let (c, synack) = accepted(&cfg(mode), &s, &mut ctr);
        assert!(!synack.ece && !synack.cwr, "{mode:?} {s:?}");
        assert!(!c.ecn());
    }
}

/// An active open with `mode`: its SYN, and the connection once the peer
/// answered with a SYN-ACK carrying `ece`/`cwr`.
fn connected(mode: EcnMode, ece: bool, cwr: bool, ctr: &mut TcpCounters) -> (Connection, Out) {
    let mut c = Connection::connect(&cfg(mode), LOCAL, REMOTE, SeqNum(ISS), 1460, Instant::ZERO);
    let out = dispatch(&mut c, Instant::ZERO, ctr);
    let synack = TcpRepr {
        ack: Some(SeqNum(ISS + 1)),
        ece,
        cwr,
        ..syn(false, false, 0)
    };
    c.process(Instant::ZERO + RTT, &synack, ctr, &mut TcpShared::default());
    assert_eq!(c.state(), State::Established);
    (c, out[0])
}

#[test]
fn tcp_ecn_1_requests_ecn_and_a_syn_ack_with_ece_alone_agrees() {
    let mut ctr = TcpCounters::default();
    let (c, s) = connected(EcnMode::On, true, false, &mut ctr);
    assert!(s.syn && s.ece && s.cwr && s.ip_ecn == 0);
    assert!(c.ecn());
    for (ece, cwr) in [(false, false), (true, true), (false, true)] {
        let (c, _) = connected(EcnMode::On, ece, cwr, &mut ctr);
        assert!(!c.ecn(), "SYN-ACK ece {ece} cwr {cwr}");
    }
    // tcp_ecn = 2 (the default) does not request it.
    let (c, s) = connected(EcnMode::Passive, true, false, &mut ctr);
    assert!(!s.ece && !s.cwr);
    assert!(!c.ecn());
}

#[test]
fn a_retransmitted_syn_carries_no_ecn_flags() {
    let mut ctr = TcpCounters::default();
    let mut c = Connection::connect(
        &cfg(EcnMode::On),
        LOCAL,
        REMOTE,
        SeqNum(ISS),
        1460,
        Instant::ZERO,
    );
    let first = dispatch(&mut c, Instant::ZERO, &mut ctr);
    assert!(first[0].ece && first[0].cwr);
    let again = dispatch(&mut c, Instant::ZERO + Duration::from_secs(1), &mut ctr);
    assert_eq!(again.len(), 1);
    assert!(again[0].syn && !again[0].ece && !again[0].cwr);
}

/// An ECN connection with the peer's window open (10 segments of cwnd).
fn ecn_sender(ctr: &mut TcpCounters) -> Connection {
    accepted(&cfg(EcnMode::Passive), &syn(true, true, 0), ctr).0
}

#[test]
fn only_new_data_is_ect0() {
    let mut ctr = TcpCounters::default();
    let mut c = ecn_sender(&mut ctr);
    let mut now = Instant::ZERO + RTT;
    c.send(&[0; 2000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|o| o.ip_ecn == ECT0 && !o.cwr && !o.ece));
    // The peer's data gets a pure ACK: Not-ECT.
    now += RTT;
    c.process(
        now,
        &peer(0, 2000, b"hello"),
        &mut ctr,
        &mut TcpShared::default(),
    );
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].len, out[0].ip_ecn), (0, 0));
    // A retransmission (the timeout's) is Not-ECT.
    c.send(&[0; 1000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!((out[0].off, out[0].ip_ecn), (2000, ECT0));
    let out = dispatch(&mut c, now + Duration::from_secs(2), &mut ctr);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].off, out[0].len, out[0].ip_ecn), (2000, 1000, 0));
}

#[test]
fn ce_is_echoed_with_ece_until_cwr() {
    let mut ctr = TcpCounters::default();
    let mut c = ecn_sender(&mut ctr);
    let mut now = Instant::ZERO + RTT;
    let mut shared = TcpShared::default();
    let data = |seq: u32, ip_ecn: u8, cwr: bool| TcpRepr {
        ip_ecn,
        cwr,
        ..peer(seq, 0, &[7; 100])
    };
    // ECT(0) data: nothing to echo.
    c.process(now, &data(0, ECT0, false), &mut ctr, &mut shared);
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(!out[0].ece);
    assert!(c.info().ecn_seen);
    // CE: ECE at once, and on every segment until CWR.
    now += Duration::from_millis(10);
    c.process(now, &data(100, CE, false), &mut ctr, &mut shared);
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.len(), 1, "acknowledged at once");
    assert!(out[0].ece && out[0].ip_ecn == 0);
    now += Duration::from_millis(10);
    c.process(now, &data(200, ECT0, false), &mut ctr, &mut shared);
    c.send(&[1; 500]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(out.iter().all(|o| o.ece));
    assert!(out.iter().any(|o| o.len == 500 && o.ip_ecn == ECT0));
    // CWR ends it; the CWR segment is acknowledged at once.
    now += Duration::from_millis(10);
    let cwr = TcpRepr {
        ack: Some(SeqNum(ISS + 1 + 500)),
        ..data(300, ECT0, true)
    };
    c.process(now, &cwr, &mut ctr, &mut shared);
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.len(), 1);
    assert!(!out[0].ece);
    // A CWR and a CE on one segment: the CE wins (it is newer).
    now += Duration::from_millis(10);
    let both = TcpRepr {
        ack: Some(SeqNum(ISS + 1 + 500)),
        ..data(400, CE, true)
    };
    c.process(now, &both, &mut ctr, &mut shared);
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(out[0].ece);
}

/// An ACK from the peer for `ack` bytes, with ECE or not.
fn ack(ack: u32, ece: bool) -> TcpRepr<'static> {
    TcpRepr {
        ece,
        ..peer(0, ack, b"")
    }
}

#[test]
fn ece_reduces_the_window_once_per_window_and_cwr_follows() {
    let mut ctr = TcpCounters::default();
    let mut c = ecn_sender(&mut ctr);
    let mut shared = TcpShared::default();
    let mut now = Instant::ZERO + RTT;
    c.send(&[0; 4000]).unwrap();
    assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 4);
    assert_eq!(c.cwnd(), 10 * MSS);
    // ECE: the CWR state; CUBIC's ssthresh 7; PRR with 3 in flight and 1
    // delivered (SND.UNA advanced): 3 + 2.
    now += RTT;
    c.process(now, &ack(1000, true), &mut ctr, &mut shared);
    let i = c.info();
    assert_eq!((i.ca_state, i.ssthresh / MSS, i.cwnd / MSS), (2, 7, 5));
    // CWR on the first new data segment only.
    c.send(&[0; 3000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(
        out.iter().map(|o| (o.off, o.cwr)).collect::<Vec<_>>(),
        [(4000, true), (5000, false)]
    );
    // Another ECE within the window: nothing more.
    now += RTT;
    c.process(now, &ack(4000, true), &mut ctr, &mut shared);
    let i = c.info();
    assert_eq!((i.ca_state, i.ssthresh / MSS, i.cwnd / MSS), (2, 7, 6));
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(out.iter().all(|o| !o.cwr));
    // SND.UNA past what was sent when it began: over, cwnd = ssthresh.
    now += RTT;
    c.process(now, &ack(7000, false), &mut ctr, &mut shared);
    let i = c.info();
    assert_eq!((i.ca_state, i.cwnd / MSS), (0, 7));
    // A later ECE starts a new reduction.
    c.send(&[0; 4000]).unwrap();
    dispatch(&mut c, now, &mut ctr);
    now += RTT;
    c.process(now, &ack(8000, true), &mut ctr, &mut shared);
    let i = c.info();
    assert_eq!(i.ca_state, 2);
    assert!(i.ssthresh < 7 * MSS, "{}", i.ssthresh);
}

#[test]
fn ece_without_ecn_is_ignored() {
    let mut ctr = TcpCounters::default();
    let (mut c, _) = accepted(&cfg(EcnMode::Off), &syn(true, true, 0), &mut ctr);
    let now = Instant::ZERO + RTT;
    c.send(&[0; 4000]).unwrap();
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(out.iter().all(|o| o.ip_ecn == 0));
    c.process(
        now + RTT,
        &ack(1000, true),
        &mut ctr,
        &mut TcpShared::default(),
    );
    assert_eq!(c.info().ca_state, 0);
    assert_eq!(c.cwnd(), 10 * MSS, "not reduced");
}

#[test]
fn fast_recovery_inside_the_cwr_state_keeps_its_reduction() {
    let mut ctr = TcpCounters::default();
    let mut c = ecn_sender(&mut ctr);
    let mut shared = TcpShared::default();
    let mut now = Instant::ZERO + RTT;
    c.send(&[0; 10_000]).unwrap();
    assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 10);
    now += RTT;
    c.process(now, &ack(1000, true), &mut ctr, &mut shared);
    assert_eq!((c.info().ca_state, c.ssthresh() / MSS), (2, 7));
    // The second segment is lost: three SACKed after it (RFC 8985's
    // DupThresh) start fast recovery, which goes on with the CWR state's
    // reduction (Linux tcp_enter_recovery reduces only outside one).
    for end in [3000, 4000, 5000] {
        let sacked = TcpRepr {
            sack_ranges: [
                Some((SeqNum(ISS + 1 + 2000), SeqNum(ISS + 1 + end))),
                None,
                None,
                None,
            ],
            ..ack(1000, true)
        };
        c.process(now, &sacked, &mut ctr, &mut shared);
    }
    let i = c.info();
    assert_eq!((i.ca_state, i.ssthresh / MSS), (3, 7));
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!((out[0].off, out[0].ip_ecn), (1000, 0), "the retransmission");
}
