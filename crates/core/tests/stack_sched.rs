//! The TCP scheduler and the readiness events: work per event does not grow
//! with the number of connections held, `poll_at` is the earliest deadline,
//! and `take_events` reports exactly the sockets that gained something.

mod stack_util;

use std::net::SocketAddrV4;

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{Limits, Readiness, SocketEvent, TcpError, TcpHandle};

fn big_limits() -> Limits {
    Limits {
        max_tcp_sockets: 50_000,
        max_syn_backlog: 4096,
        ..Limits::default()
    }
}

fn net_with_limits() -> Net {
    let mut ca = config(A_MAC, A_IP, 1);
    let mut cb = config(B_MAC, B_IP, 2);
    ca.limits = big_limits();
    cb.limits = big_limits();
    let mut n = Net::with_configs(ca, cb);
    n.keep_log = false;
    n
}

/// Open `count` connections from A to B's port 80 and accept them all.
fn open(n: &mut Net, listener: TcpHandle, count: usize) -> Vec<(TcpHandle, TcpHandle)> {
    let mut clients = Vec::with_capacity(count);
    for _ in 0..count {
        let c =
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap();
        clients.push(c);
    }
    let mut servers = Vec::with_capacity(count);
    assert!(n.run_until(Duration::from_secs(10), |n| {
        while let Ok(Some(s)) = n.b.tcp_accept(listener) {
            servers.push(s);
        }
        servers.len() == count
    }));
    for &c in &clients {
        assert_eq!(n.a.tcp_status(c).unwrap().state, State::Established);
    }
    // Let delayed ACKs and the like settle.
    n.advance(Duration::from_secs(1));
    clients.into_iter().zip(servers).collect()
}

fn drain_events(s: &mut ustack_core::Stack) -> Vec<SocketEvent> {
    let mut v = Vec::new();
    s.take_events(&mut |e| v.push(e));
    v
}

/// Connections looked at by `poll` on both stacks, and dispatches, for one
/// 1-byte exchange on the first pair.
fn work_for_one_exchange(n: &mut Net, pairs: &[(TcpHandle, TcpHandle)]) -> (u64, u64) {
    let work = |n: &Net| {
        let (a, b) = (n.a.tcp_sched_stats(), n.b.tcp_sched_stats());
        (a.visits + b.visits, a.dispatches + b.dispatches)
    };
    let before = work(n);
    let (c, s) = pairs[0];
    assert_eq!(n.a.tcp_send(c, b"x"), Ok(1));
    let mut buf = [0u8; 8];
    assert!(
        n.run_until(Duration::from_secs(2), |n| n.b.tcp_recv(s, &mut buf)
            == Ok(1))
    );
    assert_eq!(n.b.tcp_send(s, b"y"), Ok(1));
    assert!(
        n.run_until(Duration::from_secs(2), |n| n.a.tcp_recv(c, &mut buf)
            == Ok(1))
    );
    n.pump();
    let after = work(n);
    (after.0 - before.0, after.1 - before.1)
}

#[test]
fn work_per_exchange_does_not_grow_with_idle_connections() {
    let mut small = net_with_limits();
    let l = small
        .b
        .tcp_listen(SocketAddrV4::new(0.into(), 80), 4096)
        .unwrap();
    let few = open(&mut small, l, 10);
    let w_small = work_for_one_exchange(&mut small, &few);

    let mut big = net_with_limits();
    let l = big
        .b
        .tcp_listen(SocketAddrV4::new(0.into(), 80), 4096)
        .unwrap();
    let many = open(&mut big, l, 3000);
    let w_big = work_for_one_exchange(&mut big, &many);

    // The same exchange costs the same whether 10 or 3,000 idle
    // connections are held (a scan would look at all of them).
    assert!(w_small.0 > 0 && w_small.1 > 0);
    assert_eq!(
        w_small, w_big,
        "(visits, dispatches) for one exchange: {w_small:?} with 10 connections, {w_big:?} with 3000"
    );
    // Idle connections have nothing on the ready list and at most a few
    // heap entries each.
    let st = big.b.tcp_sched_stats();
    assert_eq!(st.ready, 0);
    assert!(st.timers <= 2 * 3001 + 64, "{st:?}");
}

#[test]
fn idle_connections_sleep_until_their_own_deadline() {
    let mut n = net_with_limits();
    let l =
        n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 4096)
            .unwrap();
    let pairs = open(&mut n, l, 200);
    // Nothing is due on idle connections without keep-alive (the next
    // deadline, if any, is the neighbour cache's, a minute away).
    n.pump();
    let now = n.now;
    let b_next = n.b.poll_at();
    assert!(
        b_next.is_none_or(|t| t >= now + Duration::from_secs(50)),
        "idle connections need no wake-up: {b_next:?} at {now:?}"
    );
    // Keep-alive on three connections at different intervals: the stack's
    // next deadline is the earliest of them, and only that one probes.
    // (`open` left them idle for one second: keep-alive counts from the
    // last segment received.)
    let now = now - Duration::from_secs(1);
    for (k, secs) in [(7usize, 30u64), (50, 20), (120, 40)] {
        n.b.tcp_set_keepalive(pairs[k].1, Some(Duration::from_secs(secs)))
            .unwrap();
    }
    n.pump();
    let at = n.b.poll_at().expect("a keep-alive deadline");
    assert_eq!(at, now + Duration::from_secs(20));
    let before = n.b.tcp_sched_stats().dispatches;
    let ka_before = counter(&n.b, "TcpExt", "TCPKeepAlive");
    n.now = at;
    n.pump();
    assert_eq!(counter(&n.b, "TcpExt", "TCPKeepAlive"), ka_before + 1);
    let spent = n.b.tcp_sched_stats().dispatches - before;
    assert!(
        spent <= 3,
        "a keep-alive probe dispatched {spent} connections"
    );
    assert_eq!(n.b.poll_at(), Some(now + Duration::from_secs(30)));
}

#[test]
fn readiness_events_report_what_changed_once() {
    let mut n = net_with_limits();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 16).unwrap();
    drain_events(&mut n.b);
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    n.pump();
    // B: the listener has a connection to accept.
    let ev = drain_events(&mut n.b);
    assert_eq!(ev, vec![SocketEvent::Tcp(l, Readiness::READABLE)]);
    // A: the connection became connected and writable.
    let ev = drain_events(&mut n.a);
    assert_eq!(
        ev,
        vec![SocketEvent::Tcp(
            c,
            Readiness::CONNECTED | Readiness::WRITABLE
        )]
    );
    let s = n.b.tcp_accept(l).unwrap().unwrap();
    // Nothing new: no events.
    n.pump();
    assert!(drain_events(&mut n.b).is_empty());

    // Data: one event per arrival of new data, even while still readable.
    n.a.tcp_send(c, b"hello").unwrap();
    n.pump();
    let rw = Readiness::CONNECTED | Readiness::WRITABLE | Readiness::READABLE;
    assert_eq!(drain_events(&mut n.b), vec![SocketEvent::Tcp(s, rw)]);
    n.a.tcp_send(c, b" world").unwrap();
    n.pump();
    assert_eq!(drain_events(&mut n.b), vec![SocketEvent::Tcp(s, rw)]);
    // Reading is the application's own doing: no event for it.
    let mut buf = [0u8; 64];
    assert_eq!(n.b.tcp_recv(s, &mut buf), Ok(11));
    n.pump();
    assert!(drain_events(&mut n.b).is_empty());

    // End of stream: readable again.
    n.a.tcp_shutdown(c).unwrap();
    n.pump();
    assert_eq!(drain_events(&mut n.b), vec![SocketEvent::Tcp(s, rw)]);
    assert_eq!(n.b.tcp_recv(s, &mut buf), Ok(0));

    // A reset: closed (and readable/writable with the error).
    n.b.tcp_abort(s);
    n.pump();
    let ev = drain_events(&mut n.a);
    assert_eq!(ev.len(), 1);
    let SocketEvent::Tcp(h, r) = ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(h, c);
    assert!(r.is_closed() && r.is_readable(), "{r:?}");
    assert_eq!(n.a.tcp_recv(c, &mut buf), Err(TcpError::ConnectionReset));
    // The aborted handle on B is gone: no event for it.
    assert!(drain_events(&mut n.b).is_empty());
}

#[test]
fn refused_connect_and_udp_raise_events() {
    let mut n = net_with_limits();
    drain_events(&mut n.a);
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 81), None)
            .unwrap();
    n.pump();
    let ev = drain_events(&mut n.a);
    assert_eq!(ev.len(), 1, "{ev:?}");
    let SocketEvent::Tcp(h, r) = ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(h, c);
    assert!(r.is_closed() && !r.is_connected(), "{r:?}");

    let u = n.b.udp_bind(SocketAddrV4::new(0.into(), 5353)).unwrap();
    let ua = n.a.udp_bind(SocketAddrV4::new(0.into(), 0)).unwrap();
    n.a.udp_send_to(n.now, ua, b"one", SocketAddrV4::new(B_IP, 5353))
        .unwrap();
    n.a.udp_send_to(n.now, ua, b"two", SocketAddrV4::new(B_IP, 5353))
        .unwrap();
    n.pump();
    // Two datagrams, one event (the socket is queued once).
    assert_eq!(drain_events(&mut n.b), vec![SocketEvent::Udp(u)]);
    assert!(drain_events(&mut n.b).is_empty());
}

#[test]
fn full_backlog_of_4096_is_accepted_without_drops() {
    let mut n = net_with_limits();
    let l =
        n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 4096)
            .unwrap();
    // 4096 SYNs arrive at once; the application accepts only afterwards.
    let mut clients = Vec::new();
    for _ in 0..4096 {
        clients.push(
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap(),
        );
    }
    n.pump();
    let mut accepted = 0;
    while let Ok(Some(_)) = n.b.tcp_accept(l) {
        accepted += 1;
    }
    assert_eq!(accepted, 4096);
    assert_eq!(counter(&n.b, "TcpExt", "ListenDrops"), 0);
    for c in clients {
        assert_eq!(n.a.tcp_status(c).unwrap().state, State::Established);
    }
}
