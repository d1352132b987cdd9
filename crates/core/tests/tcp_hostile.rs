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
        let mut shared = TcpShared::new();
        let mut now = n.now;
        let base_seq = SeqNum(rng.next_u64() as u32);
        let base_ack = SeqNum(rng.next_u64() as u32);
        for _ in 0..300 {
            let seg = random_seg(&mut rng, base_seq, base_ack, &data);
            a.process(now, &seg, &mut ctr);
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
