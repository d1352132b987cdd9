//! `Stack: Clone`: a clone is an independent copy of the whole state. Fed
//! the same calls, a clone emits byte for byte the frames the original
//! emits, whether it was taken of a fresh stack or in the middle of a
//! connection; and what happens to a clone does not touch the original.
//! (The fuzz targets set a stack up once and clone it for every input.)

mod stack_util;

use std::net::SocketAddrV4;

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{Stack, TcpHandle};

/// Two wired stacks whose A and B are the given ones (a fresh `Net`
/// otherwise), at `now` of `from`.
fn net_with(a: Stack, b: Stack, from: &Net) -> Net {
    let mut n = Net::new();
    n.a = a;
    n.b = b;
    n.now = from.now;
    n
}

/// A connection A -> B:80 through the handshake: (client, server).
fn connect(n: &mut Net) -> (TcpHandle, TcpHandle) {
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(5), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(l).unwrap();
        }
        server.is_some() && n.a.tcp_status(c).unwrap().state == State::Established
    }));
    (c, server.unwrap())
}

/// What a scenario produced: every frame each way, the bytes received and
/// the counters of both stacks.
type Trace = (Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<u8>, String, String);

fn counters(s: &Stack) -> String {
    s.counters()
        .iter()
        .map(|(g, k, v)| format!("{g}:{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 300 KB A -> B with one frame in 50 lost (retransmissions, SACK, RTO
/// timers and congestion control all run), then a close.
fn transfer_and_close(n: &mut Net, c: TcpHandle, s: TcpHandle) -> Trace {
    let mut k = 0u32;
    n.filter_ab = Some(Box::new(move |_f: &[u8]| {
        k += 1;
        !k.is_multiple_of(50)
    }));
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let got = transfer(n, c, s, &data, Duration::from_secs(60)).expect("transfer");
    assert_eq!(got, data);
    n.a.tcp_close(c);
    n.b.tcp_close(s);
    n.advance(Duration::from_secs(130));
    (
        std::mem::take(&mut n.log_ab),
        std::mem::take(&mut n.log_ba),
        got,
        counters(&n.a),
        counters(&n.b),
    )
}

#[test]
fn a_clone_of_a_fresh_stack_behaves_like_a_fresh_stack() {
    let mut fresh = Net::new();
    let base = Net::new();
    let mut cloned = net_with(base.a.clone(), base.b.clone(), &base);
    drop(base);
    let (c1, s1) = connect(&mut fresh);
    let (c2, s2) = connect(&mut cloned);
    let t1 = transfer_and_close(&mut fresh, c1, s1);
    let t2 = transfer_and_close(&mut cloned, c2, s2);
    assert!(!t1.0.is_empty() && !t1.1.is_empty());
    assert_eq!(
        t1, t2,
        "a clone of a fresh stack diverged from a fresh stack"
    );
}

#[test]
fn a_clone_mid_connection_continues_identically_and_independently() {
    let mut orig = Net::new();
    let (c, s) = connect(&mut orig);
    // Some data in flight and unread when the copy is taken.
    assert_eq!(orig.a.tcp_send(c, &[7u8; 5000]).unwrap(), 5000);
    orig.pump();
    orig.log_ab.clear();
    orig.log_ba.clear();
    let mut copy = net_with(orig.a.clone(), orig.b.clone(), &orig);
    // The same handles name the same connections in the copy.
    let mut buf = [0u8; 8192];
    assert_eq!(copy.b.tcp_recv(s, &mut buf).unwrap(), 5000);
    assert_eq!(orig.b.tcp_recv(s, &mut buf).unwrap(), 5000);

    // Independence: a third copy aborts its connections; the others are
    // untouched by it.
    let mut aborted = orig.a.clone();
    aborted.tcp_abort(c);
    assert!(aborted.tcp_status(c).is_err());
    assert_eq!(orig.a.tcp_status(c).unwrap().state, State::Established);
    assert_eq!(copy.a.tcp_status(c).unwrap().state, State::Established);

    let t1 = transfer_and_close(&mut orig, c, s);
    let t2 = transfer_and_close(&mut copy, c, s);
    assert!(t1.0.len() > 100, "the transfer ran");
    assert_eq!(t1, t2, "a clone taken mid-connection diverged");
}
