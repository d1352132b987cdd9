//! Unit tests for engine bugs the deterministic simulation (`crates/sim`)
//! found; each names the seeds in `crates/sim/tests/regressions.txt` it
//! distils. The peer is played by hand, segment by segment.

use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_core::tcp::{CcAlgorithm, Connection, State, TcpConfig, TcpCounters, TcpShared};
use ustack_core::time::{Duration, Instant};
use ustack_wire::tcp::{SeqNum, TcpRepr};

const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000);
const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
const ISS: u32 = 1000;
const IRS: u32 = 5000;

fn cfg() -> TcpConfig {
    TcpConfig {
        timestamps: false,
        sack: false,
        window_scale: false,
        ..TcpConfig::default()
    }
}

/// Everything `dispatch` emits at `now`, as (seq, ack, payload len, fin, rst, window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Out {
    seq: SeqNum,
    ack: Option<SeqNum>,
    len: usize,
    fin: bool,
    rst: bool,
    window: u16,
}

fn dispatch(c: &mut Connection, now: Instant, ctr: &mut TcpCounters) -> Vec<Out> {
    let mut out = Vec::new();
    // A connection driven alone: a scratch of its own per call.
    c.dispatch(now, ctr, &mut TcpShared::default(), &mut |r| {
        out.push(Out {
            seq: r.seq,
            ack: r.ack,
            len: r.payload.len(),
            fin: r.fin,
            rst: r.rst,
            window: r.window,
        });
        true
    });
    out
}

/// `c.process`, for a connection driven alone: what a stack's connections
/// share (the challenge ACK budget, a scratch buffer) is its own, per call.
fn process(c: &mut Connection, now: Instant, seg: &TcpRepr, ctr: &mut TcpCounters) {
    c.process(now, seg, ctr, &mut TcpShared::default());
}

/// A segment from the peer.
fn peer(seq: u32, ack: u32, window: u16) -> TcpRepr<'static> {
    TcpRepr {
        src_port: REMOTE.port(),
        dst_port: LOCAL.port(),
        seq: SeqNum(seq),
        ack: Some(SeqNum(ack)),
        window,
        ..TcpRepr::default()
    }
}

/// An active open completed by hand with the peer offering `window`.
fn established(window: u16, ctr: &mut TcpCounters) -> Connection {
    let now = Instant::ZERO;
    let mut c = Connection::connect(&cfg(), LOCAL, REMOTE, SeqNum(ISS), 1460, now);
    let syn = dispatch(&mut c, now, ctr);
    assert_eq!(syn.len(), 1);
    let synack = TcpRepr {
        syn: true,
        max_seg_size: Some(1460),
        ..peer(IRS, ISS + 1, window)
    };
    process(&mut c, now, &synack, ctr);
    let ack = dispatch(&mut c, now, ctr);
    assert_eq!(ack.len(), 1, "the handshake's ACK");
    assert_eq!(c.state(), State::Established);
    c
}

/// Run `c` by its own `poll_at` until `until`, collecting what it emits.
fn run(c: &mut Connection, from: Instant, until: Instant, ctr: &mut TcpCounters) -> Vec<Out> {
    let mut out = Vec::new();
    let mut now = from;
    for _ in 0..10_000 {
        let Some(at) = c.poll_at() else { break };
        let at = at.max(now);
        if at > until {
            break;
        }
        now = at;
        out.extend(dispatch(c, now, ctr));
    }
    out
}

/// `mixed 21`, `reorder 547/901/956`, `lossy 253/184/288`, `corrupt
/// 267/661`, `mixed 587`: the application queues data while the peer's
/// window is zero and nothing is in flight. `send` must leave the
/// connection with a timer (the persist timer), and the timer must probe
/// the window; a late window update then lets the data go.
#[test]
fn send_into_zero_window_arms_persist_timer() {
    let mut ctr = TcpCounters::default();
    let mut c = established(0, &mut ctr);
    assert_eq!(c.poll_at(), None, "idle, nothing queued");
    assert_eq!(c.send(b"hello world").unwrap(), 11);
    let at = c
        .poll_at()
        .expect("queued data into a zero window needs a timer");
    // Probes come with exponential backoff and never stop while unanswered
    // for fewer than max_retries.
    let out = run(&mut c, Instant::ZERO, Instant::from_secs(20), &mut ctr);
    assert!(at <= Instant::from_secs(1));
    let probes: Vec<_> = out.iter().filter(|o| o.seq == SeqNum(ISS)).collect();
    assert!(probes.len() >= 3, "window probes: {out:?}");
    assert!(out.iter().all(|o| o.len == 0), "no data into a zero window");
    assert!(ctr.TCPWinProbe >= 3);
    assert!(c.poll_at().is_some(), "still probing");
    // The peer answers a probe with an open window: the data goes.
    let now = Instant::from_secs(20);
    process(&mut c, now, &peer(IRS + 1, ISS + 1, 4096), &mut ctr);
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(
        out.iter().any(|o| o.seq == SeqNum(ISS + 1) && o.len == 11),
        "{out:?}"
    );
}

/// The same after `shutdown`: data + FIN queued behind a zero window
/// (`mixed 587`: FIN-WAIT-1 with data queued and no timer).
#[test]
fn shutdown_behind_zero_window_keeps_a_timer() {
    let mut ctr = TcpCounters::default();
    let mut c = established(0, &mut ctr);
    assert_eq!(c.send(&[7u8; 3000]).unwrap(), 3000);
    c.close();
    assert_eq!(c.state(), State::FinWait1);
    assert!(c.poll_at().is_some());
    let out = run(&mut c, Instant::ZERO, Instant::from_secs(10), &mut ctr);
    assert!(out.iter().any(|o| o.seq == SeqNum(ISS)), "probe: {out:?}");
    assert!(c.poll_at().is_some());
}

/// `reorder 118`: a stale "win 0" ACK (same SEG.SEQ and SEG.ACK) arrives
/// after the newer "win 4096" update. Like Linux, an update with the same
/// SEG.SEQ and SEG.ACK may only open the window, so the data still goes.
#[test]
fn reordered_stale_zero_window_does_not_close_the_window() {
    let mut ctr = TcpCounters::default();
    let mut c = established(4096, &mut ctr);
    let now = Instant::from_millis(10);
    process(&mut c, now, &peer(IRS + 1, ISS + 1, 4096), &mut ctr);
    process(&mut c, now, &peer(IRS + 1, ISS + 1, 0), &mut ctr);
    assert_eq!(c.info().snd_wnd, 4096, "the stale zero window is ignored");
    assert_eq!(c.send(&[1u8; 1000]).unwrap(), 1000);
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(out.iter().any(|o| o.len == 1000), "{out:?}");
    // A newer ACK (higher SEG.ACK) may still close the window.
    process(&mut c, now, &peer(IRS + 1, ISS + 1001, 0), &mut ctr);
    assert_eq!(c.info().snd_wnd, 0);
}

/// `mixed 500`, `corrupt 883/840/899`, `mixed 638/719/853/1396`: a
/// corrupted ARP reply left a wrong MAC in the neighbour cache. The
/// connection tells the neighbour layer about progress (an ACK advancing
/// SND.UNA confirms the path) and about its absence (a retransmission
/// timeout is negative advice, which makes the cache re-probe the entry).
#[test]
fn connection_gives_neighbour_advice() {
    let mut ctr = TcpCounters::default();
    let now = Instant::ZERO;
    let mut c = Connection::connect(&cfg(), LOCAL, REMOTE, SeqNum(ISS), 1460, now);
    assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 1, "SYN");
    assert_eq!(c.take_neighbour_advice(), Default::default());
    // The SYN's retransmission timer fires: negative advice.
    let rto = c.poll_at().expect("SYN timer");
    let out = dispatch(&mut c, rto, &mut ctr);
    assert_eq!(out.len(), 1, "SYN retransmitted");
    let adv = c.take_neighbour_advice();
    assert!(adv.suspect && !adv.confirm);
    assert_eq!(c.take_neighbour_advice(), Default::default(), "taken");
    // The SYN-ACK acknowledges our SYN: forward progress.
    let synack = TcpRepr {
        syn: true,
        ..peer(IRS, ISS + 1, 4096)
    };
    process(&mut c, rto, &synack, &mut ctr);
    assert!(c.take_neighbour_advice().confirm);
    dispatch(&mut c, rto, &mut ctr);
    assert_eq!(c.send(b"abc").unwrap(), 3);
    dispatch(&mut c, rto, &mut ctr);
    // A duplicate ACK is no progress.
    process(&mut c, rto, &peer(IRS + 1, ISS + 1, 4096), &mut ctr);
    assert!(!c.take_neighbour_advice().confirm);
    process(&mut c, rto, &peer(IRS + 1, ISS + 4, 4096), &mut ctr);
    assert!(c.take_neighbour_advice().confirm);
}

/// `defaults_bulk_both_ways` (crates/sim/tests/cases.rs): in FIN-WAIT-2 the
/// peer's last data segment and FIN arrive; entering TIME-WAIT cleared the
/// pending ACK, so the FIN was acknowledged only ~200 ms later when the
/// peer retransmitted. RFC 9293 3.10.7.4: "advance RCV.NXT over the FIN,
/// and send an acknowledgment for the FIN" -- at once.
#[test]
fn fin_received_in_fin_wait_2_is_acked_at_once() {
    let mut ctr = TcpCounters::default();
    let mut c = established(4096, &mut ctr);
    c.shutdown();
    let now = Instant::from_millis(10);
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(
        out.iter().any(|o| o.fin && o.seq == SeqNum(ISS + 1)),
        "{out:?}"
    );
    process(&mut c, now, &peer(IRS + 1, ISS + 2, 4096), &mut ctr);
    assert_eq!(c.state(), State::FinWait2);
    let _ = dispatch(&mut c, now, &mut ctr);
    // Data (one segment: alone it would only arm the delayed ACK) + FIN.
    let data = TcpRepr {
        payload: &[5u8; 100],
        fin: true,
        ..peer(IRS + 1, ISS + 2, 4096)
    };
    process(&mut c, now, &data, &mut ctr);
    assert_eq!(c.state(), State::TimeWait);
    let out = dispatch(&mut c, now, &mut ctr);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        out[0].ack,
        Some(SeqNum(IRS + 102)),
        "acks the data and the FIN"
    );
}

/// `lossy 21110`: both peers had filled each other's window (with a hole),
/// so each one's ACK carried SEG.SEQ = RCV.NXT + RCV.WND of the other. Each
/// found the other's ACK unacceptable and answered it with an ACK: an ACK
/// loop until the connection timed out. Like Linux, a segment without data
/// at exactly the right edge is acceptable, and ACKs answering unacceptable
/// segments without data are rate-limited.
#[test]
fn no_ack_loop_at_the_right_window_edge() {
    let mut ctr = TcpCounters::default();
    let mut c = established(4096, &mut ctr);
    let now = Instant::from_millis(10);
    // Our advertised window (no window scaling): RCV.NXT + the window field.
    let out = dispatch(&mut c, now, &mut ctr);
    assert!(out.is_empty());
    assert_eq!(c.send(b"x").unwrap(), 1);
    let out = dispatch(&mut c, now, &mut ctr);
    let wnd = u32::from(out[0].window);
    // A pure ACK exactly at the right edge: accepted, no answer.
    process(&mut c, now, &peer(IRS + 1 + wnd, ISS + 2, 4096), &mut ctr);
    assert!(dispatch(&mut c, now, &mut ctr).is_empty());
    assert_eq!(c.send_queue(), 0, "its ACK was processed");
    // Beyond the edge: answered once, then rate-limited.
    process(&mut c, now, &peer(IRS + 2 + wnd, ISS + 2, 4096), &mut ctr);
    assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 1);
    for _ in 0..10 {
        process(&mut c, now, &peer(IRS + 2 + wnd, ISS + 2, 4096), &mut ctr);
        assert!(dispatch(&mut c, now, &mut ctr).is_empty());
    }
    let later = now + ustack_core::time::Duration::from_millis(600);
    process(&mut c, later, &peer(IRS + 2 + wnd, ISS + 2, 4096), &mut ctr);
    assert_eq!(dispatch(&mut c, later, &mut ctr).len(), 1);
    // Data that is not acceptable is always answered (not an ACK loop).
    let old = TcpRepr {
        payload: b"zz",
        ..peer(IRS - 10, ISS + 2, 4096)
    };
    process(&mut c, later, &old, &mut ctr);
    assert_eq!(dispatch(&mut c, later, &mut ctr).len(), 1);
}

/// `ustack run` stalled host->guest downloads after exactly 2 GiB: "our
/// SYN was acknowledged" was tested as SND.UNA > ISS, a comparison modulo
/// 2^32 that turns false once SND.UNA is 2^31 bytes past ISS, and from
/// then on no data could be sent. A sender must keep going past 2^31 (and
/// 2^32) bytes.
#[test]
fn sender_keeps_sending_past_two_gibibytes() {
    let mut ctr = TcpCounters::default();
    let now = Instant::ZERO;
    let mss: u16 = 65_000;
    let mut c = Connection::connect(&cfg(), LOCAL, REMOTE, SeqNum(ISS), 65_535, now);
    assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 1, "the SYN");
    let synack = TcpRepr {
        syn: true,
        max_seg_size: Some(mss),
        ..peer(IRS, ISS + 1, u16::MAX)
    };
    process(&mut c, now, &synack, &mut ctr);
    assert_eq!(
        dispatch(&mut c, now, &mut ctr).len(),
        1,
        "the handshake's ACK"
    );
    let chunk = vec![0x5au8; usize::from(mss)];
    let target: u64 = (1u64 << 32) + 4 * u64::from(mss);
    let mut acked: u64 = 0;
    while acked < target {
        assert_eq!(c.send(&chunk).unwrap(), chunk.len(), "after {acked} bytes");
        let out = dispatch(&mut c, now, &mut ctr);
        let sent: usize = out.iter().map(|o| o.len).sum();
        assert_eq!(
            sent,
            chunk.len(),
            "no data sent after {acked} bytes acked: {out:?}"
        );
        acked += sent as u64;
        let ack = ISS.wrapping_add(1).wrapping_add(acked as u32);
        process(&mut c, now, &peer(IRS + 1, ack, u16::MAX), &mut ctr);
    }
    assert_eq!(c.state(), State::Established);
}

/// A bulk sender with window scaling (so several 65000-byte segments fit
/// in the peer's window) and a peer that acknowledges by hand.
struct Bulk {
    c: Connection,
    ctr: TcpCounters,
    /// Absolute sequence numbers of SND.UNA and SND.MAX as the peer sees them.
    una: u32,
    max: u32,
    chunk: Vec<u8>,
    now: Instant,
}

const BULK_MSS: u16 = 65_000;

impl Bulk {
    fn new(sack: bool) -> Bulk {
        Bulk::with(sack, CcAlgorithm::default(), 1 << 20)
    }

    fn with(sack: bool, congestion_control: CcAlgorithm, snd_buf: usize) -> Bulk {
        let mut ctr = TcpCounters::default();
        let now = Instant::ZERO;
        let cfg = TcpConfig {
            sack,
            window_scale: true,
            snd_buf,
            congestion_control,
            ..cfg()
        };
        let mut c = Connection::connect(&cfg, LOCAL, REMOTE, SeqNum(ISS), 65_535, now);
        assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 1, "the SYN");
        let synack = TcpRepr {
            syn: true,
            max_seg_size: Some(BULK_MSS),
            window_scale: Some(7),
            sack_permitted: sack,
            ..peer(IRS, ISS + 1, u16::MAX)
        };
        process(&mut c, now, &synack, &mut ctr);
        assert_eq!(dispatch(&mut c, now, &mut ctr).len(), 1, "handshake ACK");
        Bulk {
            c,
            ctr,
            una: ISS + 1,
            max: ISS + 1,
            chunk: vec![0x5a; usize::from(BULK_MSS)],
            now,
        }
    }

    /// Dispatch and note the highest sequence number sent.
    fn dispatch(&mut self) -> Vec<Out> {
        let out = dispatch(&mut self.c, self.now, &mut self.ctr);
        for o in &out {
            let end = o.seq.0.wrapping_add(o.len as u32);
            if SeqNum(end).gt(SeqNum(self.max)) {
                self.max = end;
            }
        }
        out
    }

    fn ack(&mut self, ack: u32) {
        self.ack_sack(ack, None);
    }

    fn ack_sack(&mut self, ack: u32, sack: Option<(u32, u32)>) {
        let seg = TcpRepr {
            sack_ranges: [sack.map(|(l, r)| (SeqNum(l), SeqNum(r))), None, None, None],
            ..peer(IRS + 1, ack, u16::MAX)
        };
        process(&mut self.c, self.now, &seg, &mut self.ctr);
        if SeqNum(ack).gt(SeqNum(self.una)) {
            self.una = ack;
        }
    }

    /// Send and have acknowledged at least `bytes` more, a send buffer
    /// full at a time; panics if the sender stops making progress.
    fn push(&mut self, bytes: u64) {
        let mut done = 0u64;
        while done < bytes {
            self.now += Duration::from_millis(1);
            while self.c.send(&self.chunk).unwrap() > 0 {}
            let before = self.una;
            self.dispatch();
            let max = self.max;
            self.ack(max);
            let moved = max.wrapping_sub(before);
            assert!(moved > 0, "no progress after {done} bytes");
            done += u64::from(moved);
        }
        // Drain what is still queued, so the send buffer ends empty.
        for _ in 0..1000 {
            if self.dispatch().iter().all(|o| o.len == 0) {
                break;
            }
            let max = self.max;
            self.ack(max);
        }
        assert_eq!(self.una, self.max, "drained");
    }

    /// Queue `n` segments, send them, then send three duplicate ACKs for
    /// the first; true if that fast-retransmits it. Ends with everything
    /// acknowledged.
    fn dupacks_retransmit(&mut self, n: usize) -> bool {
        for _ in 0..n {
            assert_eq!(self.c.send(&self.chunk).unwrap(), self.chunk.len());
        }
        let una = self.una;
        let first = self.dispatch();
        assert!(
            !first.is_empty() && first[0].seq == SeqNum(una),
            "{first:?}"
        );
        let mut rtx = false;
        for _ in 0..3 {
            self.ack(una);
            rtx |= self
                .dispatch()
                .iter()
                .any(|o| o.seq == SeqNum(una) && o.len > 0);
        }
        let max = self.max;
        self.ack(max);
        self.dispatch();
        rtx
    }

    /// Like `dupacks_retransmit`, but the duplicate ACKs SACK the later
    /// segments (RFC 6675 / RACK loss detection).
    fn sack_retransmit(&mut self, n: usize) -> bool {
        for _ in 0..n {
            assert_eq!(self.c.send(&self.chunk).unwrap(), self.chunk.len());
        }
        let una = self.una;
        let first = self.dispatch();
        assert!(
            !first.is_empty() && first[0].seq == SeqNum(una),
            "{first:?}"
        );
        self.now += Duration::from_millis(1);
        let mss = u32::from(BULK_MSS);
        let left = una.wrapping_add(mss);
        let mut rtx = false;
        for k in 1..n as u32 {
            self.ack_sack(una, Some((left, una.wrapping_add((k + 1) * mss))));
            rtx |= self
                .dispatch()
                .iter()
                .any(|o| o.seq == SeqNum(una) && o.len > 0);
        }
        let max = self.max;
        self.ack(max);
        self.dispatch();
        rtx
    }

    /// `n` segments go out and nothing comes back: the retransmission
    /// timer must resend the first.
    fn rto_retransmit(&mut self, n: usize) -> bool {
        for _ in 0..n {
            assert_eq!(self.c.send(&self.chunk).unwrap(), self.chunk.len());
        }
        let una = self.una;
        self.dispatch();
        self.now += Duration::from_secs(3);
        let rtx = self
            .dispatch()
            .iter()
            .any(|o| o.seq == SeqNum(una) && o.len > 0);
        let max = self.max;
        self.ack(max);
        self.push(1);
        rtx
    }
}

/// NewReno's "recover" (RFC 6582) must not go stale: after a fast
/// recovery and 2^31 more bytes, the modulo-2^32 comparison "ACK >
/// recover" flipped and three duplicate ACKs no longer started fast
/// retransmit (only an RTO repaired a loss).
#[test]
fn fast_retransmit_still_works_past_two_gibibytes_after_a_recovery() {
    let mut b = Bulk::new(false);
    b.push(1 << 20);
    assert!(b.dupacks_retransmit(4), "the first fast retransmit");
    assert_eq!(b.ctr.TCPTimeouts, 0);
    b.push((1u64 << 31) + (1 << 20));
    assert!(
        b.dupacks_retransmit(4),
        "fast retransmit after 2^31 bytes past the last recovery"
    );
    assert_eq!(b.ctr.TCPTimeouts, 0);
    b.push(1 << 20);
    assert_eq!(b.c.state(), State::Established);
}

/// RFC 7661 / RFC 5681: cwnd grows only while it limits the sender. An
/// application that writes one segment per round trip left cwnd growing
/// by a segment per ACK for ever (1.8e9 bytes seen), so a later burst
/// was sent at line rate into the network with no congestion feedback.
#[test]
fn cwnd_grows_only_when_cwnd_limited() {
    let mut ctr = TcpCounters::default();
    let now = Instant::ZERO;
    let mut c = established(u16::MAX, &mut ctr);
    let initial = c.cwnd();
    assert_eq!(initial, 10 * 1460);
    let mut una = ISS + 1;
    let seg = [0x33u8; 1460];
    for i in 0..2000 {
        assert_eq!(c.send(&seg).unwrap(), seg.len());
        let out = dispatch(&mut c, now, &mut ctr);
        assert_eq!(out.iter().map(|o| o.len).sum::<usize>(), 1460, "round {i}");
        una = una.wrapping_add(1460);
        process(&mut c, now, &peer(IRS + 1, una, u16::MAX), &mut ctr);
    }
    assert!(
        c.cwnd() <= initial,
        "application-limited: cwnd {} grew past the initial {initial}",
        c.cwnd()
    );
    // A sender with more to send than cwnd allows: slow start grows it.
    let bulk = vec![0x44u8; 64 * 1024];
    for _ in 0..5 {
        c.send(&bulk).unwrap();
        let out = dispatch(&mut c, now, &mut ctr);
        let sent: usize = out.iter().map(|o| o.len).sum();
        assert!(sent > 0);
        una = una.wrapping_add(sent as u32);
        process(&mut c, now, &peer(IRS + 1, una, u16::MAX), &mut ctr);
    }
    assert!(
        c.cwnd() >= 2 * initial,
        "cwnd-limited slow start: cwnd {} did not grow from {initial}",
        c.cwnd()
    );
}

/// The whole sequence space, for each kind of loss detection: a sender
/// with (and without) SACK moves more than 2^32 bytes with loss episodes
/// repaired by fast retransmit (three duplicate ACKs, or SACK blocks) and
/// by the retransmission timer spread over it, some of them 2^31 bytes
/// apart. Every episode must be repaired the same way as the first, and
/// data must keep flowing: a sequence number stored at one episode and
/// compared (modulo 2^32) at a later one would flip sign somewhere.
#[test]
fn loss_recovery_keeps_working_across_a_full_sequence_wrap() {
    const M: u64 = 1 << 20;
    const HALF: u64 = 1 << 31;
    // (bytes before the episode, repaired by the RTO?)
    let plan = [
        (64 * M, false),
        (HALF + 64 * M, false),
        (64 * M, true),
        (HALF + 64 * M, false),
        (64 * M, false),
        (128 * M, true),
        (64 * M, false),
        (300 * M, true),
    ];
    let total: u64 = plan.iter().map(|p| p.0).sum();
    assert!(total > 1 << 32);
    for sack in [false, true] {
        let mut b = Bulk::new(sack);
        let mut sent: u64 = 0;
        for (episode, &(gap, rto)) in plan.iter().enumerate() {
            b.push(gap);
            sent += gap;
            let timeouts = b.ctr.TCPTimeouts;
            let ok = match (rto, sack) {
                (true, _) => b.rto_retransmit(3),
                (false, true) => b.sack_retransmit(4),
                (false, false) => b.dupacks_retransmit(4),
            };
            assert!(
                ok,
                "sack {sack}: episode {episode} after {sent} bytes not repaired"
            );
            assert_eq!(
                b.ctr.TCPTimeouts,
                timeouts + u64::from(rto),
                "sack {sack}: episode {episode} after {sent} bytes: timeouts"
            );
        }
        b.push(M);
        assert_eq!(b.c.state(), State::Established, "sack {sack}");
    }
}

/// RFC 5681 3.2 step 3: on the third duplicate ACK "The lost segment
/// starting at SND.UNA MUST be retransmitted"; RFC 6675 5 (4.3) likewise
/// retransmits the first lost segment on entering recovery, and Linux PRR
/// (RFC 6937) always sends one segment then. With a full, cwnd-limited
/// flight and more data queued, cwnd (halved to ssthresh) stays below
/// pipe, so the retransmission was held back until more duplicate ACKs
/// arrived, or until the RTO. It must go out at the dispatch right after
/// recovery starts, alone (pipe still above cwnd: no new data): three
/// duplicate ACKs without SACK; with SACK, as soon as RACK (RFC 8985)
/// deems the head lost, at the latest with the third SACKed segment
/// (DupThresh), with or without time passing before the SACKs.
///
/// For both algorithms. This harness acknowledges each flight at once, so
/// in slow start cwnd grows to twice whatever limits the flight (the send
/// buffer here): CUBIC's paced slow start (RFC 9406's L = infinity) gets
/// there in the first megabyte. Loss episodes first end its slow start
/// and bring cwnd below the buffer (each to 0.7 cwnd, as Linux reduces
/// it), so that cwnd, not the buffer, limits the flight below.
#[test]
fn entering_recovery_retransmits_snd_una_at_once() {
    // (SACK, time passes between sending and the ACKs)
    let cases = [(false, true), (false, false), (true, false), (true, true)];
    for (alg, (sack, wait)) in CcAlgorithm::ALL
        .into_iter()
        .flat_map(|a| cases.into_iter().map(move |c| (a, c)))
    {
        let case = format!("{alg}, sack {sack}, wait {wait}");
        let mut b = Bulk::with(sack, alg, 1 << 20);
        b.push(1 << 20);
        // Both CUBICs (Linux's HyStart or RFC 9406's HyStart++).
        if alg != CcAlgorithm::NewReno {
            for episode in 0.. {
                assert!(
                    episode < 4,
                    "{case}: cwnd {} stays above the buffer",
                    b.c.cwnd()
                );
                let ended = if sack {
                    b.sack_retransmit(4)
                } else {
                    b.dupacks_retransmit(4)
                };
                assert!(ended, "{case}: loss episode {episode}");
                // Past its "recover" (RFC 6582), in congestion avoidance.
                b.push(1);
                if b.c.cwnd() < 1 << 20 {
                    break;
                }
            }
        }
        let fast_retrans = b.ctr.TCPFastRetrans;
        while b.c.send(&b.chunk).unwrap() > 0 {}
        let una = b.una;
        b.now += Duration::from_millis(1);
        let mut first = 0;
        loop {
            let n: usize = b.dispatch().iter().map(|o| o.len).sum();
            if n == 0 {
                break;
            }
            first += n;
        }
        assert!(first > 0, "{case}");
        assert!(
            b.c.cwnd() < first + usize::from(BULK_MSS),
            "{case}: cwnd {} limits the flight {first}",
            b.c.cwnd()
        );
        let queued = b.c.send_queue();
        assert!(
            queued > first + 2 * usize::from(BULK_MSS),
            "{case}: the send buffer ({queued}) must hold well more than the flight ({first})"
        );
        if wait {
            b.now += Duration::from_millis(1);
        }
        let mss = u32::from(BULK_MSS);
        let mut rtx_at = None;
        let mut entered_at = None;
        for k in 1..=3u32 {
            let max_before = b.max;
            let fast = b.ctr.TCPFastRetrans;
            if sack {
                let sacked = (una.wrapping_add(mss), una.wrapping_add((k + 1) * mss));
                b.ack_sack(una, Some(sacked));
            } else {
                b.ack(una);
            }
            if b.ctr.TCPFastRetrans > fast {
                entered_at = Some(k);
            }
            let out = b.dispatch();
            let rtx: Vec<_> = out
                .iter()
                .filter(|o| o.seq == SeqNum(una) && o.len > 0)
                .collect();
            if !rtx.is_empty() {
                assert_eq!(rtx.len(), 1, "{case}: {out:?}");
                assert_eq!(rtx_at, None, "{case}: retransmitted twice");
                rtx_at = Some(k);
                // Pipe rules still apply after it: cwnd = FlightSize/2 <
                // pipe, so no new data goes with it.
                assert!(
                    out.iter().all(|o| o.len == 0
                        || o.seq == SeqNum(una)
                        || o.seq.lt(SeqNum(max_before))),
                    "{case}: new data in recovery beyond pipe: {out:?}"
                );
            }
        }
        let Some(enter) = entered_at else {
            panic!("{case}: recovery did not start");
        };
        if !sack {
            assert_eq!(enter, 3, "{case}: the third duplicate ACK");
        }
        assert_eq!(
            rtx_at,
            Some(enter),
            "{case}: SND.UNA must be retransmitted as recovery starts"
        );
        assert!(
            b.c.cwnd() < first,
            "{case}: cwnd {} was reduced below the flight {first}",
            b.c.cwnd()
        );
        assert_eq!(b.ctr.TCPTimeouts, 0, "{case}");
        assert_eq!(b.ctr.TCPFastRetrans, fast_retrans + 1, "{case}");
        // The repair is acknowledged: everything flows again.
        let max = b.max;
        b.ack(max);
        b.push(1 << 20);
        assert_eq!(b.ctr.TCPTimeouts, 0, "{case}");
        assert_eq!(b.c.state(), State::Established, "{case}");
    }
}
