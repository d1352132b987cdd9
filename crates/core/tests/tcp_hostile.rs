//! Hostile input: arbitrary bytes through the TCP parser and arbitrary
//! (well-formed but nonsensical) segments into connections in every state
//! must never panic, and must never make a connection emit unbounded output.

#![allow(clippy::field_reassign_with_default)]

mod tcp_common;

use proptest::prelude::*;
use tcp_common::{to_bytes, End, Net, Rng, A_ADDR, B_ADDR};
use ustack_core::tcp::{Connection, TcpConfig, TcpCounters, TcpShared};
use ustack_core::time::{Duration, Instant};
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        if let Ok(p) = TcpPacket::new_checked(&bytes[..]) {
            let _ = p.options();
            let _ = p.payload();
            if let Ok(r) = TcpRepr::parse(&p, *A_ADDR.ip(), *B_ADDR.ip(), false) {
                // Whatever parses re-emits and re-parses to the same value.
                let out = to_bytes(&r, *A_ADDR.ip(), *B_ADDR.ip());
                let q = TcpRepr::parse(&TcpPacket::new_checked(&out[..]).unwrap(), *A_ADDR.ip(), *B_ADDR.ip(), true).unwrap();
                prop_assert_eq!(q.seq, r.seq);
                prop_assert_eq!(q.payload, r.payload);
                prop_assert_eq!(q.timestamp, r.timestamp);
            }
        }
    }
}

fn random_seg<'d>(
    rng: &mut Rng,
    base_seq: SeqNum,
    base_ack: SeqNum,
    data: &'d [u8],
) -> TcpRepr<'d> {
    let near = |rng: &mut Rng, s: SeqNum| -> SeqNum {
        match rng.below(3) {
            0 => s + rng.below(70_000) as usize,
            1 => s - rng.below(70_000) as usize,
            _ => SeqNum(rng.next_u64() as u32),
        }
    };
    let mut ranges = [None; 4];
    for r in ranges.iter_mut().take(rng.below(5) as usize) {
        let l = near(rng, base_ack);
        *r = Some((l, l + rng.below(5000) as usize));
    }
    TcpRepr {
        src_port: B_ADDR.port(),
        dst_port: A_ADDR.port(),
        seq: near(rng, base_seq),
        ack: if rng.chance(0.9) {
            Some(near(rng, base_ack))
        } else {
            None
        },
        syn: rng.chance(0.1),
        fin: rng.chance(0.1),
        rst: rng.chance(0.1),
        psh: rng.chance(0.5),
        window: rng.below(65536) as u16,
        max_seg_size: if rng.chance(0.1) {
            Some(rng.below(65536) as u16)
        } else {
            None
        },
        window_scale: if rng.chance(0.1) {
            Some(rng.below(20) as u8)
        } else {
            None
        },
        sack_permitted: rng.chance(0.1),
        sack_ranges: ranges,
        timestamp: if rng.chance(0.7) {
            Some((rng.next_u64() as u32, rng.next_u64() as u32))
        } else {
            None
        },
        payload: &data[..rng.below(data.len() as u64) as usize],
        ..TcpRepr::default()
    }
}

#[test]
fn random_segments_never_panic_in_any_state() {
    let data = vec![0xabu8; 3000];
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        // Drive a real connection to a random point, then fire garbage at A.
        let mut cfg = TcpConfig::default();
        cfg.rcv_buf = 1000 + rng.below(100_000) as usize;
        let a = End::client(cfg.clone(), rng.next_u64() as u32, Instant::ZERO);
        let b = End::server(cfg, rng.next_u64() as u32);
        let mut n = Net::new(a, b, seed);
        n.ab.imp.delay = Duration::from_millis(5);
        n.ba.imp.delay = Duration::from_millis(5);
        let stop = Instant::from_millis(rng.below(100));
        n.run_until(stop);
        if rng.chance(0.5) {
            let _ = n.a.conn().send(&data[..100]);
        }
        match rng.below(4) {
            0 => n.a.conn().close(),
            1 => n.a.conn().shutdown(),
            _ => {}
        }
        let t = n.now + Duration::from_millis(rng.below(50));
        n.run_until(t);
        let a = n.a.conn.as_mut().unwrap();
        let mut ctr = TcpCounters::default();
        let mut shared = TcpShared::default();
        let mut now = n.now;
        let base_seq = SeqNum(rng.next_u64() as u32);
        let base_ack = SeqNum(rng.next_u64() as u32);
        for _ in 0..300 {
            let seg = random_seg(&mut rng, base_seq, base_ack, &data);
            a.process(now, &seg, &mut ctr, &mut shared);
            let mut emitted = 0;
            a.dispatch(now, &mut ctr, &mut shared, &mut |_| {
                emitted += 1;
                true
            });
            assert!(emitted <= 70, "bounded work per dispatch");
            let mut buf = [0u8; 512];
            let _ = a.recv(&mut buf);
            if let Some(t) = a.poll_at() {
                now = now.max(t);
            }
            now += Duration::from_millis(rng.below(300));
        }
        let _ = Connection::info(a);
    }
}

// ----- RFC 5961 7: challenge ACKs are rate-limited ---------------------------

mod stack_util;

/// A TCP segment A -> B as an Ethernet frame.
fn frame_a_to_b(seg: &TcpRepr) -> Vec<u8> {
    stack_util::tcp_frame_to_b(stack_util::A_IP, seg)
}

/// `n` established connections A -> B port 80; for each, A's port and the
/// sequence number B expects next (RCV.NXT), from A's last segment.
fn established_pairs(n: &mut stack_util::Net, count: usize) -> Vec<(u16, SeqNum)> {
    use std::net::{Ipv4Addr, SocketAddrV4};
    use ustack_core::tcp::State;
    let l =
        n.b.tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80), 4096)
            .unwrap();
    let mut out = Vec::new();
    for _ in 0..count {
        let c =
            n.a.tcp_connect(n.now, SocketAddrV4::new(stack_util::B_IP, 80), None)
                .unwrap();
        n.pump();
        assert_eq!(n.a.tcp_status(c).unwrap().state, State::Established);
        assert!(n.b.tcp_accept(l).unwrap().is_some());
        let port = n.a.tcp_status(c).unwrap().local.port();
        // A's last segment (the handshake's ACK) carries A's SND.NXT.
        let (_, tcp) = n
            .log_ab
            .iter()
            .rev()
            .filter_map(|f| stack_util::parse_ip(f))
            .find(|(_, t)| u16::from_be_bytes([t[0], t[1]]) == port)
            .expect("A's ACK");
        out.push((
            port,
            SeqNum(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]])),
        ));
    }
    out
}

/// B's pure ACKs (no SYN, RST or data) on the wire since `from`.
fn acks_from_b(n: &stack_util::Net, from: usize) -> usize {
    n.log_ba
        .get(from..)
        .unwrap_or(&[])
        .iter()
        .filter_map(|f| stack_util::parse_ip(f))
        .filter(|(ip, t)| ip.protocol == ustack_wire::ip::IpProtocol::Tcp && t.len() >= 20)
        .filter(|(_, t)| t[13] & 0x07 == 0 && t.len() == usize::from(t[12] >> 4) * 4)
        .count()
}

/// RFC 5961 3.2 (an in-window RST not at RCV.NXT) and 4.2 (a SYN in a
/// synchronized state) answer with a challenge ACK, and RFC 5961 7 asks
/// for "an ACK throttling mechanism": otherwise every spoofed segment
/// makes the connection send one (a reflector, and the raw material of ACK
/// storms). Like Linux (`tcp_send_challenge_ack`), each connection first
/// sends at most one per 500 ms (`tcp_invalid_ratelimit`), counting the
/// others as `TCPACKSkippedChallenge`.
#[test]
fn challenge_acks_are_rate_limited_per_connection() {
    let mut n = stack_util::Net::new();
    let pairs = established_pairs(&mut n, 1);
    let (port, rcv_nxt) = pairs[0];
    let rsts = 20usize;
    let syns = 20usize;
    let from = n.log_ba.len();
    for i in 0..rsts + syns {
        let rst = i < rsts;
        let seg = TcpRepr {
            src_port: port,
            dst_port: 80,
            // In the window, not RCV.NXT (an exact RST would reset).
            seq: rcv_nxt + (1 + i),
            rst,
            syn: !rst,
            window: 1000,
            ..TcpRepr::default()
        };
        n.inject_to_b(&frame_a_to_b(&seg));
    }
    let sent = acks_from_b(&n, from);
    assert_eq!(sent, 1, "one challenge ACK per 500 ms, not one per segment");
    let counted = stack_util::counter(&n.b, "TcpExt", "TCPChallengeACK");
    let skipped = stack_util::counter(&n.b, "TcpExt", "TCPACKSkippedChallenge");
    assert_eq!((counted, skipped), (1, (rsts + syns - 1) as u64));
    // The connection survived all of it, and half a second later it
    // answers again.
    n.advance(ustack_core::time::Duration::from_millis(500));
    let from = n.log_ba.len();
    let seg = TcpRepr {
        src_port: port,
        dst_port: 80,
        seq: rcv_nxt,
        syn: true,
        window: 1000,
        ..TcpRepr::default()
    };
    n.inject_to_b(&frame_a_to_b(&seg));
    assert_eq!(acks_from_b(&n, from), 1);
    assert_eq!(stack_util::counter(&n.b, "TcpExt", "TCPChallengeACK"), 2);
    assert_eq!(stack_util::counter(&n.b, "Tcp", "CurrEstab"), 1);
}

/// RFC 5961 5.2: a segment acknowledging data never sent is answered with
/// an ACK, and that ACK is a challenge ACK too: throttled, so spoofed
/// segments cannot make the stack answer each of them.
#[test]
fn acks_for_unsent_data_are_answered_at_the_challenge_rate() {
    let mut n = stack_util::Net::new();
    let pairs = established_pairs(&mut n, 1);
    let (port, rcv_nxt) = pairs[0];
    // B's SND.NXT: the sequence number after B's last segment.
    let (_, last) = n
        .log_ba
        .iter()
        .rev()
        .filter_map(|f| stack_util::parse_ip(f))
        .find(|(ip, _)| ip.protocol == ustack_wire::ip::IpProtocol::Tcp)
        .expect("B sent TCP");
    let b_seq = u32::from_be_bytes([last[4], last[5], last[6], last[7]]);
    let from = n.log_ba.len();
    for i in 0..30u32 {
        let seg = TcpRepr {
            src_port: port,
            dst_port: 80,
            seq: rcv_nxt,
            // Ahead of anything B sent (SEG.ACK > SND.NXT).
            ack: Some(SeqNum(b_seq.wrapping_add(100_000 + i))),
            window: 1000,
            ..TcpRepr::default()
        };
        n.inject_to_b(&frame_a_to_b(&seg));
    }
    assert_eq!(acks_from_b(&n, from), 1, "one answer per 500 ms");
    assert_eq!(
        stack_util::counter(&n.b, "TcpExt", "TCPACKSkippedChallenge"),
        29
    );
    assert_eq!(stack_util::counter(&n.b, "Tcp", "CurrEstab"), 1);
}

/// Then the stack-wide budget (Linux `tcp_challenge_ack_limit`, here
/// `TcpConfig::challenge_ack_limit`): spoofed segments spread over many
/// connections get at most limit*3/2 challenge ACKs a second in all (the
/// budget is drawn between limit/2 and limit*3/2 each second).
#[test]
fn challenge_acks_are_rate_limited_stack_wide() {
    let mut cb = stack_util::config(stack_util::B_MAC, stack_util::B_IP, 2);
    cb.tcp.challenge_ack_limit = 10;
    let mut n = stack_util::Net::with_configs(
        stack_util::config(stack_util::A_MAC, stack_util::A_IP, 1),
        cb,
    );
    let pairs = established_pairs(&mut n, 60);
    // Start at the beginning of a second: all of it in one budget.
    let next = n.now.total_micros() / 1_000_000 + 1;
    n.advance(ustack_core::time::Instant::from_secs(next).saturating_duration_since(n.now));
    let spoof_all = |n: &mut stack_util::Net| {
        let from = n.log_ba.len();
        for &(port, rcv_nxt) in &pairs {
            let seg = TcpRepr {
                src_port: port,
                dst_port: 80,
                seq: rcv_nxt,
                syn: true,
                window: 1000,
                ..TcpRepr::default()
            };
            n.inject_to_b(&frame_a_to_b(&seg));
        }
        acks_from_b(n, from)
    };
    let first = spoof_all(&mut n);
    assert!(
        (5..=14).contains(&first),
        "at most 3/2 of the limit in one second: {first}"
    );
    let skipped = stack_util::counter(&n.b, "TcpExt", "TCPACKSkippedChallenge");
    assert_eq!(skipped, 60 - first as u64);
    assert_eq!(
        stack_util::counter(&n.b, "TcpExt", "TCPChallengeACK"),
        first as u64
    );
    // A second later (and past each connection's 500 ms): a new budget.
    n.advance(ustack_core::time::Duration::from_secs(1));
    let second = spoof_all(&mut n);
    assert!((5..=14).contains(&second), "{second}");
    assert_eq!(stack_util::counter(&n.b, "Tcp", "CurrEstab"), 60);
}
