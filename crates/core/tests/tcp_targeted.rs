//! Targeted TCP behaviours, each on the simulated link.

#![allow(clippy::field_reassign_with_default)]

mod tcp_common;

use tcp_common::*;
use ustack_core::tcp::{Connection, State, TcpConfig, TcpError, TcpShared};
use ustack_core::time::{Duration, Instant};
use ustack_wire::tcp::{SeqNum, TcpRepr};

fn net_with(ca: TcpConfig, cb: TcpConfig, delay_ms: u64) -> Net {
    Net::with_delay(ca, cb, delay_ms, 7)
}

fn cfg() -> TcpConfig {
    TcpConfig::default()
}

#[test]
fn handshake_counts_and_negotiates() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    assert_eq!(n.a.ctr.ActiveOpens, 1);
    assert_eq!(n.b.ctr.PassiveOpens, 1);
    assert_eq!(n.a.ctr.CurrEstab, 1);
    let i = n.a.conn().info();
    assert!(i.timestamps && i.sack);
    assert_eq!(i.smss, 1460);
    assert_eq!(i.rcv_wscale, 3, "256 KiB buffer needs shift 3");
    assert!(i.srtt.is_some());
}

#[test]
fn simultaneous_open() {
    let ca = cfg();
    let a = End::client(ca.clone(), 100, Instant::ZERO);
    let mut b = End::client(ca, 900_000, Instant::ZERO);
    // B actively opens towards A at the same time.
    b.addr = B_ADDR;
    b.peer = A_ADDR;
    b.conn = Some(Connection::connect(
        &b.cfg,
        B_ADDR,
        A_ADDR,
        SeqNum(900_000),
        1460,
        Instant::ZERO,
    ));
    let mut n = Net::new(a, b, 1);
    n.ab.imp.delay = Duration::from_millis(10);
    n.ba.imp.delay = Duration::from_millis(10);
    n.keep_log = true;
    n.run_until(Instant::from_secs(3));
    assert_eq!(n.a.state(), State::Established);
    assert_eq!(n.b.state(), State::Established);
    let synacks = n
        .logged()
        .iter()
        .filter(|(_, r)| r.syn && r.ack.is_some())
        .count();
    assert_eq!(
        synacks, 2,
        "each side answers the crossing SYN with SYN-ACK"
    );
    n.a.conn().send(b"ping").unwrap();
    n.run_until(Instant::from_secs(4));
    assert_eq!(read_all(n.b.conn()), b"ping");
}

#[test]
fn simultaneous_close() {
    let mut n = net_with(cfg(), cfg(), 10);
    n.establish();
    n.a.conn().close();
    n.b.conn().close();
    assert_eq!(n.a.state(), State::FinWait1);
    let t = n.now + Duration::from_secs(2);
    n.run_until(t);
    // Both FINs crossed: CLOSING then TIME-WAIT on both sides.
    assert_eq!(n.a.state(), State::TimeWait);
    assert_eq!(n.b.state(), State::TimeWait);
    assert_eq!(n.a.ctr.CurrEstab, 0);
    let t = n.now + Duration::from_secs(61);
    n.run_until(t);
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(n.b.state(), State::Closed);
}

#[test]
fn half_close_keeps_other_direction_open() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    n.a.conn().send(b"request").unwrap();
    n.a.conn().shutdown();
    assert_eq!(n.a.conn().send(b"x"), Err(TcpError::BrokenPipe));
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(read_all(n.b.conn()), b"request");
    assert_eq!(n.b.conn().recv(&mut [0u8; 4]), Ok(0), "EOF");
    assert_eq!(n.b.state(), State::CloseWait);
    assert_eq!(n.a.state(), State::FinWait2);
    n.b.conn().send(b"response").unwrap();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(read_all(n.a.conn()), b"response");
    n.b.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.b.state(), State::Closed);
    assert_eq!(n.a.state(), State::TimeWait);
}

/// Inject a segment from B's side into A directly.
fn inject_to_a(n: &mut Net, r: &TcpRepr) {
    let bytes = to_bytes(r, *B_ADDR.ip(), *A_ADDR.ip());
    let mut out = Vec::new();
    let now = n.now;
    n.a.receive(now, &bytes, &mut out);
}

fn b_seg(_n: &mut Net) -> TcpRepr<'static> {
    TcpRepr {
        src_port: B_ADDR.port(),
        dst_port: A_ADDR.port(),
        window: 1000,
        ..TcpRepr::default()
    }
}

/// A's RCV.NXT and SND.NXT, read from the ACK it sends.
fn a_next(n: &mut Net) -> (SeqNum, SeqNum) {
    let (r, s, _) = a_next_ts(n);
    (r, s)
}

/// Also A's TS.Recent (the TSecr it echoes).
fn a_next_ts(n: &mut Net) -> (SeqNum, SeqNum, u32) {
    n.keep_log = true;
    n.log.clear();
    // Provoke an ACK: a keep-alive-style old segment.
    n.a.conn().set_keepalive(None);
    let mut out = Vec::new();
    let now = n.now;
    let c = n.a.conn.as_mut().unwrap();
    // An out-of-window empty segment makes A answer with an ACK.
    let probe = TcpRepr {
        src_port: B_ADDR.port(),
        dst_port: A_ADDR.port(),
        seq: SeqNum(0x4000_0000),
        ack: None,
        ..TcpRepr::default()
    };
    c.process(now, &probe, &mut n.a.ctr, &mut n.a.shared);
    c.dispatch(now, &mut n.a.ctr, &mut n.a.shared, &mut |r| {
        out.push((r.ack.unwrap(), r.seq, r.timestamp.map_or(0, |t| t.1)));
        true
    });
    out[0]
}

#[test]
fn rst_in_established_resets() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    let (rcv_nxt, _) = a_next(&mut n);
    // Out-of-window RST: ignored.
    let mut r = b_seg(&mut n);
    r.rst = true;
    r.seq = rcv_nxt + 10_000_000usize;
    inject_to_a(&mut n, &r);
    assert_eq!(n.a.state(), State::Established);
    // In-window but not exact: challenge ACK (RFC 5961).
    r.seq = rcv_nxt + 10usize;
    inject_to_a(&mut n, &r);
    assert_eq!(n.a.state(), State::Established);
    assert_eq!(n.a.ctr.TCPChallengeACK, 1);
    // Exact: reset.
    r.seq = rcv_nxt;
    inject_to_a(&mut n, &r);
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(
        n.a.conn().recv(&mut [0u8; 8]),
        Err(TcpError::ConnectionReset)
    );
    assert_eq!(n.a.conn().send(b"x"), Err(TcpError::ConnectionReset));
    assert_eq!(n.a.ctr.EstabResets, 1);
    assert_eq!(n.a.ctr.CurrEstab, 0);
}

#[test]
fn syn_in_established_gets_challenge_ack() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    let (rcv_nxt, _) = a_next(&mut n);
    let mut r = b_seg(&mut n);
    r.syn = true;
    r.seq = rcv_nxt;
    inject_to_a(&mut n, &r);
    assert_eq!(n.a.state(), State::Established);
    assert_eq!(n.a.ctr.TCPChallengeACK, 1);
}

#[test]
fn rst_refuses_connect_and_closed_port() {
    // No listener on B: B answers the SYN with RST/ACK.
    let a = End::client(cfg(), 1_000, Instant::ZERO);
    let mut b = End::server(cfg(), 1);
    b.listening = false;
    let mut n = Net::new(a, b, 3);
    n.ab.imp.delay = Duration::from_millis(1);
    n.run_until(Instant::from_secs(1));
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(
        n.a.conn().pending_error(),
        Some(TcpError::ConnectionRefused)
    );
    assert_eq!(n.a.ctr.AttemptFails, 1);
    assert_eq!(n.b.ctr.OutRsts, 1);
}

#[test]
fn rst_in_syn_received_and_close_wait_and_fin_wait() {
    // SYN-RECEIVED: a RST with the right sequence number drops the embryo.
    let a = End::client(cfg(), 1_000, Instant::ZERO);
    let b = End::server(cfg(), 77);
    let mut n = Net::new(a, b, 4);
    n.ab.imp.delay = Duration::from_millis(1);
    n.ba.blackhole = true;
    n.run_until(Instant::from_millis(10));
    assert_eq!(n.b.state(), State::SynReceived);
    let rst = TcpRepr {
        src_port: A_ADDR.port(),
        dst_port: B_ADDR.port(),
        seq: SeqNum(1_001),
        rst: true,
        ..TcpRepr::default()
    };
    let mut ctr = n.b.ctr.clone();
    n.b.conn().process(
        Instant::from_millis(10),
        &rst,
        &mut ctr,
        &mut TcpShared::default(),
    );
    assert_eq!(n.b.state(), State::Closed);

    // CLOSE-WAIT and FIN-WAIT-2.
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    n.a.conn().shutdown();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.b.state(), State::CloseWait);
    assert_eq!(n.a.state(), State::FinWait2);
    n.b.conn().abort();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.b.state(), State::Closed);
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(n.a.conn().pending_error(), Some(TcpError::ConnectionReset));
    assert_eq!(n.b.ctr.EstabResets, 1, "abort from CLOSE-WAIT counts");
    assert_eq!(n.b.ctr.OutRsts, 1);
}

#[test]
fn close_with_unread_data_sends_rst() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    n.a.conn().send(b"unread").unwrap();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.b.conn().recv_queue(), 6);
    n.b.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.b.state(), State::Closed);
    assert_eq!(n.b.ctr.TCPAbortOnClose, 1);
    assert_eq!(n.a.conn().pending_error(), Some(TcpError::ConnectionReset));
}

#[test]
fn linger_zero_close_sends_rst() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    n.a.conn().set_linger_zero(true);
    n.a.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(n.b.state(), State::Closed);
    assert_eq!(n.a.ctr.OutRsts, 1);
}

#[test]
fn zero_window_probe_and_recovery() {
    let mut cb = cfg();
    cb.rcv_buf = 4096;
    let mut n = net_with(cfg(), cb, 5);
    n.establish();
    let data: Vec<u8> = (0..20_000).map(|i| pattern(9, i)).collect();
    let sent = n.a.conn().send(&data).unwrap();
    assert_eq!(sent, 20_000);
    // Long enough for more than max_retries (15) probes at the 120 s cap.
    let t = n.now + Duration::from_secs(3600);
    n.run_until(t);
    // B never read: the window is closed and A probes.
    assert_eq!(n.b.conn().recv_queue(), 4096);
    assert!(n.a.ctr.TCPWinProbe > 20, "probes: {}", n.a.ctr.TCPWinProbe);
    assert_eq!(n.a.state(), State::Established, "probes answered: no abort");
    assert_eq!(n.a.ctr.TCPAbortOnTimeout, 0);
    // Read everything; window updates let the rest flow.
    let mut got = Vec::new();
    for _ in 0..200 {
        got.extend(read_all(n.b.conn()));
        let t = n.now + Duration::from_millis(500);
        n.run_until(t);
        if got.len() == data.len() {
            break;
        }
    }
    assert_eq!(got, data);
}

#[test]
fn sack_blocks_reflect_holes() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    let (_, _) = a_next(&mut n);
    // Learn B's view: B's rcv_nxt from the ACK B sends.
    let mut out = Vec::new();
    let now = n.now;
    let b = n.b.conn.as_mut().unwrap();
    let probe = TcpRepr {
        src_port: A_ADDR.port(),
        dst_port: B_ADDR.port(),
        seq: SeqNum(0x4000_0000),
        ..TcpRepr::default()
    };
    b.process(now, &probe, &mut n.b.ctr, &mut n.b.shared);
    b.dispatch(now, &mut n.b.ctr, &mut n.b.shared, &mut |r| {
        out.push((r.ack.unwrap(), r.seq, r.timestamp));
        true
    });
    let (rcv_nxt, b_seq, ts) = out[0];
    let ts = ts.map(|(v, _)| (v, v));
    let seg = |off: usize, len: usize| TcpRepr {
        src_port: A_ADDR.port(),
        dst_port: B_ADDR.port(),
        seq: rcv_nxt + off,
        ack: Some(b_seq),
        window: 1000,
        timestamp: ts.map(|(_, e)| (u32::MAX / 2, e)),
        payload: &[7u8; 2000][..len],
        ..TcpRepr::default()
    };
    let mut acks = Vec::new();
    for (off, len) in [(1000, 500), (3000, 500)] {
        let b = n.b.conn.as_mut().unwrap();
        b.process(now, &seg(off, len), &mut n.b.ctr, &mut n.b.shared);
        b.dispatch(now, &mut n.b.ctr, &mut n.b.shared, &mut |r| {
            acks.push((r.ack.unwrap(), r.sack_ranges));
            true
        });
    }
    assert_eq!(acks.len(), 2, "out-of-order segments are acked at once");
    let (ack, sacks) = acks[1];
    assert_eq!(ack, rcv_nxt);
    assert_eq!(
        sacks[0],
        Some((rcv_nxt + 3000usize, rcv_nxt + 3500usize)),
        "newest first"
    );
    assert_eq!(sacks[1], Some((rcv_nxt + 1000usize, rcv_nxt + 1500usize)));
    assert_eq!(sacks[2], None);
    assert_eq!(n.b.ctr.TCPOFOQueue, 2);
    // Fill the first hole: cumulative ACK jumps, one block left.
    acks.clear();
    let b = n.b.conn.as_mut().unwrap();
    b.process(now, &seg(0, 1000), &mut n.b.ctr, &mut n.b.shared);
    b.dispatch(now, &mut n.b.ctr, &mut n.b.shared, &mut |r| {
        acks.push((r.ack.unwrap(), r.sack_ranges));
        true
    });
    assert_eq!(acks[0].0, rcv_nxt + 1500usize);
    assert_eq!(
        acks[0].1[0],
        Some((rcv_nxt + 3000usize, rcv_nxt + 3500usize))
    );
    assert_eq!(acks[0].1[1], None);
}

#[test]
fn karn_no_sample_from_retransmitted_syn() {
    let mut ca = cfg();
    ca.timestamps = false;
    let mut n = net_with(ca.clone(), ca, 20);
    n.ab.blackhole = true;
    n.run_until(Instant::from_millis(500));
    n.ab.blackhole = false;
    n.run_until(Instant::from_secs(3));
    assert_eq!(n.a.state(), State::Established);
    assert_eq!(n.a.ctr.TCPTimeouts, 1);
    assert_eq!(n.a.ctr.RetransSegs, 1);
    assert_eq!(
        n.a.conn().srtt(),
        None,
        "Karn: the retransmitted SYN is not timed"
    );
    // A later, non-retransmitted segment gives a sample of ~40 ms.
    n.a.conn().send(b"x").unwrap();
    n.run_until(Instant::from_secs(4));
    let srtt = n.a.conn().srtt().expect("sampled");
    assert!(
        srtt >= Duration::from_millis(40) && srtt < Duration::from_millis(100),
        "{srtt:?}"
    );
}

#[test]
fn data_retry_limit_aborts_with_timed_out() {
    let mut ca = cfg();
    ca.max_retries = 4;
    let mut n = net_with(ca, cfg(), 5);
    n.establish();
    n.ab.blackhole = true;
    n.a.conn().send(b"lost forever").unwrap();
    let t = n.now + Duration::from_secs(600);
    n.run_until(t);
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(n.a.conn().pending_error(), Some(TcpError::TimedOut));
    assert_eq!(n.a.ctr.TCPAbortOnTimeout, 1);
    assert_eq!(n.a.ctr.TCPTimeouts, 4);
    assert_eq!(n.a.ctr.CurrEstab, 0);
}

#[test]
fn syn_retry_limit_and_backoff() {
    let mut ca = cfg();
    ca.syn_retries = 3;
    let mut n = net_with(ca, cfg(), 5);
    n.ab.blackhole = true;
    n.keep_log = true;
    n.run_until(Instant::from_secs(60));
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(n.a.conn().pending_error(), Some(TcpError::TimedOut));
    assert_eq!(n.a.ctr.AttemptFails, 1);
    // SYNs at 0, 1, 3, 7 s; give-up at 15 s.
    assert_eq!(n.logged().iter().filter(|(_, r)| r.syn).count(), 4);
}

#[test]
fn time_wait_expiry_and_reuse() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    n.a.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    n.b.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.a.state(), State::TimeWait);
    assert_eq!(n.b.state(), State::Closed);
    let (_, _, ts_recent) = a_next_ts(&mut n);
    let tw = n.a.conn.as_ref().unwrap();
    let syn = |seq: u32, ts: Option<(u32, u32)>| TcpRepr {
        src_port: B_ADDR.port(),
        dst_port: A_ADDR.port(),
        seq: SeqNum(seq),
        syn: true,
        timestamp: ts,
        ..TcpRepr::default()
    };
    // Timestamps in use: reuse iff TSval is newer than TS.Recent.
    let old = Some((ts_recent.wrapping_sub(5), 0));
    let new = Some((ts_recent.wrapping_add(5), 0));
    // Even a higher sequence number does not help with an old timestamp.
    assert!(!tw.accepts_reuse_syn(&syn(0x7000_0000, old)));
    assert!(tw.accepts_reuse_syn(&syn(1, new)));
    assert!(!tw.accepts_reuse_syn(&TcpRepr {
        ack: Some(SeqNum(1)),
        ..syn(1, new)
    }));
    // Expiry after 2*MSL (60 s).
    let t = n.now + Duration::from_secs(59);
    n.run_until(t);
    assert_eq!(n.a.state(), State::TimeWait);
    let t = n.now + Duration::from_secs(2);
    n.run_until(t);
    assert_eq!(n.a.state(), State::Closed);
}

#[test]
fn time_wait_reuse_without_timestamps_uses_sequence() {
    let mut c = cfg();
    c.timestamps = false;
    let mut n = net_with(c.clone(), c, 5);
    n.establish();
    n.a.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    n.b.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    assert_eq!(n.a.state(), State::TimeWait);
    // B's ISS is 5_000_000: SYN and FIN used 5_000_000 and 5_000_001.
    let tw = n.a.conn.as_ref().unwrap();
    let syn = |seq: u32| TcpRepr {
        src_port: B_ADDR.port(),
        dst_port: A_ADDR.port(),
        seq: SeqNum(seq),
        syn: true,
        ..TcpRepr::default()
    };
    assert!(tw.accepts_reuse_syn(&syn(5_000_002 + 100_000)));
    assert!(!tw.accepts_reuse_syn(&syn(5_000_000)));
    // The harness demux lets the new SYN replace the TIME-WAIT connection.
    let bytes = to_bytes(&syn(6_000_000), *B_ADDR.ip(), *A_ADDR.ip());
    let mut out = Vec::new();
    let now = n.now;
    n.a.listening = true;
    n.a.receive(now, &bytes, &mut out);
    assert_eq!(n.a.state(), State::SynReceived);
}

#[test]
fn paws_drops_old_timestamp() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    let (rcv_nxt, a_seq, ts_recent) = a_next_ts(&mut n);
    let before = n.a.conn().recv_queue();
    let seg = TcpRepr {
        src_port: B_ADDR.port(),
        dst_port: A_ADDR.port(),
        seq: rcv_nxt,
        ack: Some(a_seq),
        window: 1000,
        timestamp: Some((ts_recent.wrapping_sub(1000), 0)), // older than TS.Recent
        payload: b"stale",
        ..TcpRepr::default()
    };
    inject_to_a(&mut n, &seg);
    assert_eq!(n.a.ctr.PAWSEstab, 1);
    assert_eq!(
        n.a.conn().recv_queue(),
        before,
        "PAWS-rejected data is not delivered"
    );
}

#[test]
fn window_scaling_allows_more_than_64k_in_flight() {
    let mut c = cfg();
    c.rcv_buf = 1 << 20;
    // A fixed 1 MB send buffer, so that one send queues everything.
    c.snd_buf = 1 << 20;
    c.snd_buf_initial = 1 << 20;
    let mut n = net_with(c.clone(), c, 50);
    n.keep_log = true;
    n.establish();
    let data: Vec<u8> = (0..(1usize << 20)).map(|i| pattern(3, i)).collect();
    assert_eq!(n.a.conn().send(&data).unwrap(), 1 << 20);
    let mut got = Vec::new();
    for _ in 0..400 {
        let t = n.now + Duration::from_millis(10);
        n.run_until(t);
        got.extend(read_all(n.b.conn()));
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data, "all data arrives");
    let mut max_ack = SeqNum(0);
    let mut have_ack = false;
    let mut max_flight = 0i64;
    for (a_to_b, r) in n.logged() {
        if a_to_b && !r.payload.is_empty() && have_ack {
            let end = r.seq + r.payload.len();
            max_flight = max_flight.max(i64::from(end - max_ack));
        } else if !a_to_b {
            if let Some(a) = r.ack {
                if !have_ack || a.gt(max_ack) {
                    max_ack = a;
                    have_ack = true;
                }
            }
        }
    }
    assert!(max_flight > 65_535, "max flight {max_flight}");
    assert!(n.a.conn().info().snd_wnd > 65_535);
}

fn small_writes_segments(nodelay: bool) -> usize {
    let mut c = cfg();
    c.nodelay = nodelay;
    let mut n = net_with(c, cfg(), 20);
    n.establish();
    n.keep_log = true;
    n.log.clear();
    for _ in 0..5 {
        n.a.conn().send(b"tiny").unwrap();
        n.step();
    }
    n.logged()
        .iter()
        .filter(|(d, r)| *d && !r.payload.is_empty())
        .count()
}

#[test]
fn nagle_vs_nodelay() {
    // Nagle: one runt in flight, the rest held until its ACK.
    assert_eq!(small_writes_segments(false), 1);
    assert_eq!(small_writes_segments(true), 5);
}

#[test]
fn delayed_ack_and_every_second_segment() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    // Linux quick-ack: the first segments of a connection (up to 16) are
    // acknowledged at once, none by the delayed-ACK timer.
    n.a.conn().set_nodelay(true);
    let start = n.b.ctr.DelayedACKs;
    for i in 0..20 {
        n.a.conn().send(b"q").unwrap();
        let t = n.now + Duration::from_millis(5);
        n.run_until(t);
        if i < 8 {
            assert_eq!(n.b.ctr.DelayedACKs, start, "segment {i} quick-acked");
        }
    }
    let t = n.now + Duration::from_millis(100);
    n.run_until(t);
    // Out of quick-ack mode, one small segment is acked after the delay.
    let before = n.b.ctr.DelayedACKs;
    assert!(before > start, "the budget is spent");
    n.a.conn().send(b"two").unwrap();
    let t = n.now + Duration::from_millis(100);
    n.run_until(t);
    assert_eq!(n.b.ctr.DelayedACKs, before + 1);
    // Many full segments: roughly one ACK per two segments.
    n.keep_log = true;
    n.log.clear();
    let data = vec![1u8; 1448 * 20];
    n.a.conn().send(&data).unwrap();
    let t = n.now + Duration::from_millis(500);
    n.run_until(t);
    let segs = n
        .logged()
        .iter()
        .filter(|(d, r)| *d && !r.payload.is_empty())
        .count();
    let acks = n
        .logged()
        .iter()
        .filter(|(d, r)| !*d && r.payload.is_empty())
        .count();
    assert_eq!(segs, 20);
    assert!((9..=11).contains(&acks), "acks {acks}");
}

#[test]
fn fast_retransmit_on_three_dupacks() {
    let mut n = net_with(cfg(), cfg(), 10);
    n.establish();
    // Drop exactly one data segment: the first one after establishment.
    n.keep_log = true;
    let data = vec![5u8; 1448 * 10];
    n.a.conn().send(&data).unwrap();
    // Let the first segment go out and drop it from the pipe.
    n.step();
    assert!(!n.ab.q.is_empty());
    n.ab.q.pop_front();
    let t = n.now + Duration::from_millis(150);
    n.run_until(t);
    assert_eq!(n.a.ctr.TCPFastRetrans, 1);
    assert_eq!(n.a.ctr.TCPTimeouts, 0, "recovered without RTO");
    assert_eq!(n.a.ctr.TCPSackRecovery, 1);
    assert_eq!(read_all(n.b.conn()).len(), data.len());
}

#[test]
fn keepalive_times_out_dead_peer() {
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    n.a.conn().set_keepalive(Some(Duration::from_secs(10)));
    let t = n.now + Duration::from_secs(35);
    n.run_until(t);
    assert_eq!(
        n.a.state(),
        State::Established,
        "answered probes keep it up"
    );
    assert!(n.a.ctr.TCPKeepAlive >= 2);
    n.ab.blackhole = true;
    let t = n.now + Duration::from_secs(200);
    n.run_until(t);
    assert_eq!(n.a.state(), State::Closed);
    assert_eq!(n.a.conn().pending_error(), Some(TcpError::TimedOut));
}

#[test]
fn zero_delay_link_handshake() {
    let a = End::client(cfg(), u32::MAX - 1, Instant::ZERO);
    let b = End::server(cfg(), u32::MAX);
    let mut n = Net::new(a, b, 9);
    n.run_until(Instant::from_millis(10));
    assert_eq!(n.a.state(), State::Established);
    // Sequence numbers wrap right away on both sides.
    n.a.conn().send(b"wrap").unwrap();
    n.b.conn().send(b"around").unwrap();
    n.run_until(Instant::from_millis(500));
    assert_eq!(read_all(n.b.conn()), b"wrap");
    assert_eq!(read_all(n.a.conn()), b"around");
}

#[test]
fn rtt_sampled_on_every_ack_without_timestamps() {
    // Linux (`tcp_clean_rtx_queue`'s `seq_rtt_us`) times every ACK from
    // the send time of the oldest segment it newly acknowledges, not one
    // segment per round trip: the pacing rate and TSO autosizing follow.
    let mut ca = cfg();
    ca.timestamps = false;
    let mut n = net_with(ca.clone(), ca, 10);
    n.establish();
    let before = n.a.conn().srtt().expect("handshake sampled");
    assert!(before < Duration::from_millis(25), "{before:?}");
    // x (two segments, acked at once) goes out on the 20 ms path; y (a
    // full segment, so Nagle does not hold it), sent while x is still in
    // flight, on a 160 ms one. Only y's ACK can show the longer path;
    // timing one segment per round trip misses it.
    n.a.conn().send(&[7u8; 2920]).unwrap();
    let t = n.now + Duration::from_millis(1);
    n.run_until(t);
    n.ab.imp.delay = Duration::from_millis(150);
    n.a.conn().send(&[9u8; 1460]).unwrap();
    let t = n.now + Duration::from_millis(500);
    n.run_until(t);
    let srtt = n.a.conn().srtt().expect("sampled");
    assert!(
        srtt > Duration::from_millis(35),
        "y's ACK not timed: {srtt:?}"
    );
}

#[test]
fn rtt_sampled_in_microseconds_with_timestamps() {
    // Linux (`tcp_ack_update_rtt`) takes the send-time sample, in
    // microseconds, before the TSecr one, which counts whole milliseconds:
    // on a 300 µs path the smoothed RTT must read about 300 µs, not 0 or
    // 1 ms. Timestamps on (the default) on both ends; two full segments
    // (1448 bytes each beside the timestamp option) a round, acknowledged
    // at once; the clock stepped 100 µs at a time.
    let mut n = net_with(cfg(), cfg(), 0);
    n.ab.imp.delay = Duration::from_micros(150);
    n.ba.imp.delay = Duration::from_micros(150);
    n.establish();
    assert!(n.a.conn().info().timestamps);
    for _ in 0..20 {
        n.a.conn().send(&[5u8; 2 * 1448]).unwrap();
        for _ in 0..30 {
            let t = n.now + Duration::from_micros(100);
            n.run_until(t);
        }
        read_all(n.b.conn());
    }
    let srtt = n.a.conn().srtt().expect("sampled");
    assert!(
        srtt >= Duration::from_micros(250) && srtt <= Duration::from_micros(600),
        "srtt {srtt:?} on a 300 µs path"
    );
}

/// Urgent data (RFC 9293 3.8.5, Linux semantics): the octet before the
/// urgent pointer is out of band; reads stop at it and skip it, `splice`'s
/// read stops there for good, `MSG_OOB` reads it once.
#[test]
fn urgent_octet_is_out_of_band() {
    use ustack_core::tcp::OobError;
    let mut n = net_with(cfg(), cfg(), 5);
    n.establish();
    let (rcv_nxt, snd_nxt) = a_next(&mut n);
    assert_eq!(n.a.conn().recv_oob(false), Err(OobError::None));
    let mut r = b_seg(&mut n);
    r.seq = rcv_nxt;
    r.ack = Some(snd_nxt);
    r.urgent = Some(10);
    r.payload = b"0123456789";
    inject_to_a(&mut n, &r);
    let c = n.a.conn();
    let mut buf = [0u8; 100];
    assert_eq!(c.peek(&mut buf), Ok(9));
    // splice's read: up to the mark, then 0 while the octet waits.
    assert_eq!(c.read_to_mark_with(|a, _| a.len().min(4)), Ok(4));
    assert_eq!(c.recv(&mut buf), Ok(5));
    assert_eq!(&buf[..5], b"45678");
    assert!(c.at_urgent_mark());
    assert_eq!(c.read_to_mark_with(|a, _| a.len()), Ok(0));
    assert_eq!(c.recv_oob(true), Ok(b'9'));
    assert_eq!(c.recv_oob(false), Ok(b'9'));
    assert_eq!(c.recv_oob(false), Err(OobError::None));
    // The octet is not part of the stream.
    assert_eq!(c.recv(&mut buf), Err(TcpError::WouldBlock));
    assert!(!c.at_urgent_mark());

    // A pointer ahead of the data: the octet is not there yet.
    let mut r = b_seg(&mut n);
    r.seq = rcv_nxt + 10usize;
    r.ack = Some(snd_nxt);
    r.urgent = Some(8);
    r.payload = b"abcd";
    inject_to_a(&mut n, &r);
    let c = n.a.conn();
    assert_eq!(c.recv_oob(false), Err(OobError::NotYet));
    assert_eq!(c.recv(&mut buf), Ok(4));
    let mut r = b_seg(&mut n);
    r.seq = rcv_nxt + 14usize;
    r.ack = Some(snd_nxt);
    r.payload = b"efghij";
    inject_to_a(&mut n, &r);
    let c = n.a.conn();
    assert_eq!(c.peek(&mut buf), Ok(3));
    assert_eq!(&buf[..3], b"efg");
    assert_eq!(c.recv(&mut buf), Ok(3));
    // A peek at the mark skips the octet without consuming it.
    assert_eq!(c.peek(&mut buf), Ok(2));
    assert_eq!(&buf[..2], b"ij");
    assert_eq!(c.recv_oob(true), Ok(b'h'));
    assert_eq!(c.recv(&mut buf), Ok(2), "the octet 'h' skipped");
    assert_eq!(&buf[..2], b"ij");
    // Passed unread: gone.
    assert_eq!(c.recv_oob(false), Err(OobError::None));
}
