//! The per-connection counters of `TcpConnInfo` (Linux's `tcp_info`:
//! `tcpi_bytes_acked`, `tcpi_segs_out`, ...) over whole transfers, held to
//! what the wire and the other end saw. The exact values of short
//! exchanges, checked against Linux itself, are in the packetdrill scripts
//! `tests/packetdrill/stats/`.

mod tcp_common;

use tcp_common::*;
use ustack_core::tcp::{TcpConfig, TcpConnInfo};
use ustack_core::time::Duration;

const TOTAL: usize = 200_000;

/// Queue `TOTAL` bytes on the client and run until the server has read
/// them all (bounded in virtual time).
fn transfer(n: &mut Net) -> usize {
    let data: Vec<u8> = (0..TOTAL).map(|i| pattern(1, i)).collect();
    let mut sent = 0;
    let mut got = 0;
    let end = n.now + Duration::from_secs(120);
    while got < TOTAL && n.now < end {
        if sent < TOTAL {
            sent += n.a.conn().send(&data[sent..]).unwrap_or(0);
        }
        let t = n.now + Duration::from_millis(5);
        n.run_until(t);
        got += read_all(n.b.conn()).len();
    }
    got
}

fn infos(n: &mut Net) -> (TcpConnInfo, TcpConnInfo) {
    (n.a.conn().info(), n.b.conn().info())
}

#[test]
fn counters_match_both_ends_on_a_clean_path() {
    let c = TcpConfig::default();
    let mut n = Net::with_delay(c.clone(), c, 5, 1);
    n.establish();
    let (a, b) = infos(&mut n);
    // The handshake: the client sent SYN and ACK, the server counts the
    // SYN and the ACK, not its SYN-ACK (Linux's request socket sends it).
    assert_eq!((a.segs_out, a.segs_in), (2, 1));
    assert_eq!((b.segs_out, b.segs_in), (0, 2));
    assert_eq!((a.bytes_acked, b.bytes_acked), (1, 0), "SYN, not SYN-ACK");
    assert_eq!((a.delivered, b.delivered), (1, 1));

    n.keep_log = true;
    assert_eq!(transfer(&mut n), TOTAL);
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    let (a, b) = infos(&mut n);
    let wire_ab = n.log.iter().filter(|(ab, _)| *ab).count() as u32;
    let wire_ba = n.log.iter().filter(|(ab, _)| !*ab).count() as u32;
    assert_eq!(a.bytes_acked, 1 + TOTAL as u64);
    assert_eq!(b.bytes_received, TOTAL as u64);
    assert_eq!(a.bytes_sent, TOTAL as u64);
    assert_eq!(a.bytes_retrans, 0);
    assert_eq!(b.bytes_sent, 0);
    // Nothing lost: every segment one end sent, the other received.
    assert_eq!(a.segs_out, 2 + wire_ab);
    assert_eq!(b.segs_in, 2 + wire_ab);
    assert_eq!(b.segs_out, wire_ba);
    assert_eq!(a.segs_in, 1 + wire_ba);
    assert_eq!(a.data_segs_out, b.data_segs_in);
    assert_eq!(a.data_segs_out as usize, TOTAL.div_ceil(a.smss - 12));
    assert_eq!(b.data_segs_out, 0);
    assert_eq!(a.delivered, 1 + a.data_segs_out);
    // A delivery rate was sampled: segments of `smss - 12` bytes over at
    // least the 10 ms RTT, so at most the window's worth per RTT.
    let per_rtt = a.delivery_rate / 100;
    assert!(a.delivery_rate > 0, "no delivery rate sample");
    assert!(
        per_rtt <= TOTAL as u64,
        "delivery rate {} B/s: more than the whole transfer per RTT",
        a.delivery_rate
    );
    assert_eq!(b.delivery_rate, 0, "the receiver sent no data");

    // FINs: each end's acknowledged and received in sequence space.
    n.a.conn().close();
    n.b.conn().close();
    let t = n.now + Duration::from_secs(1);
    n.run_until(t);
    let (a, b) = infos(&mut n);
    assert_eq!(a.bytes_acked, 2 + TOTAL as u64);
    assert_eq!(b.bytes_acked, 1);
    assert_eq!(b.bytes_received, 1 + TOTAL as u64);
    assert_eq!(a.bytes_received, 1);
    assert_eq!(a.delivered, 2 + a.data_segs_out);
}

#[test]
fn retransmissions_count_in_segments_and_bytes() {
    let c = TcpConfig::default();
    let mut n = Net::with_delay(c.clone(), c, 5, 7);
    n.establish();
    n.ab.imp.loss = 0.03;
    assert_eq!(transfer(&mut n), TOTAL);
    n.ab.imp.loss = 0.0;
    let t = n.now + Duration::from_secs(5);
    n.run_until(t);
    let (a, b) = infos(&mut n);
    assert!(a.bytes_retrans > 0, "3% loss: something was resent");
    assert_eq!(a.bytes_sent, TOTAL as u64 + a.bytes_retrans);
    assert_eq!(a.bytes_acked, 1 + TOTAL as u64);
    assert_eq!(b.bytes_received, TOTAL as u64);
    // What was lost was sent but never received.
    assert!(a.data_segs_out > b.data_segs_in);
    assert!(a.segs_out > b.segs_in);
    // Every segment delivered once, however often it was sent.
    assert_eq!(a.delivered, 1 + TOTAL.div_ceil(a.smss - 12) as u32);
    assert!(a.retransmits > 0);
}
