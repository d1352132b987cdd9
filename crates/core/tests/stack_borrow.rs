//! The borrowing socket calls: `tcp_send_with` lends the send buffer's
//! free space and `tcp_recv_with` the readable data, each as up to two
//! slices of the ring, with the side effects of `tcp_send`/`tcp_recv`
//! (transmission scheduled, window updates, readiness events) and the
//! stack's running total of buffered bytes kept in step.

mod stack_util;

use std::net::SocketAddrV4;

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{SocketEvent, TcpError, TcpHandle};

fn established(n: &mut Net, listener: TcpHandle, client: TcpHandle) -> TcpHandle {
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(5), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(listener).ok().flatten();
        }
        server.is_some() && n.a.tcp_status(client).map(|s| s.state).ok() == Some(State::Established)
    }));
    server.unwrap_or_else(|| panic!("no connection accepted"))
}

/// A connection from A to B:80 with small buffers, so that a transfer
/// wraps the rings many times and the window must reopen after reads.
fn small_buffers_pair() -> (Net, TcpHandle, TcpHandle) {
    let mut ca = config(A_MAC, A_IP, 1);
    let mut cb = config(B_MAC, B_IP, 2);
    for c in [&mut ca, &mut cb] {
        c.tcp.snd_buf = 20_000;
        c.tcp.rcv_buf = 12_000;
    }
    let mut n = Net::with_configs(ca, cb);
    n.keep_log = false;
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let s = established(&mut n, l, c);
    (n, c, s)
}

/// Copy from `src` into `a` then `b`; the count.
fn fill(src: &[u8], a: &mut [u8], b: &mut [u8]) -> usize {
    let na = a.len().min(src.len());
    a[..na].copy_from_slice(&src[..na]);
    let nb = b.len().min(src.len() - na);
    b[..nb].copy_from_slice(&src[na..na + nb]);
    na + nb
}

fn held(s: &ustack_core::Stack, h: TcpHandle) -> usize {
    s.tcp_status(h)
        .map(|st| st.send_queue + st.recv_queue)
        .unwrap_or(0)
}

#[test]
fn a_transfer_through_borrowed_buffers_is_byte_exact() {
    let (mut n, c, s) = small_buffers_pair();
    let total = 300_000;
    let data: Vec<u8> = (0..total).map(|i| (i * 31 % 251) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::with_capacity(total);
    let mut closed = false;
    let mut eof = false;
    let mut step = 0usize;
    // The receive ring lent both halves of its wrapped data at least once;
    // the send buffer (chunks, never wrapped) lent one slice, and lent
    // less than asked at the end of a chunk at least once.
    let (mut send_short, mut recv_wrapped) = (false, false);
    let ok = n.run_until(Duration::from_secs(120), |n| {
        step += 1;
        while sent < total {
            // Odd sizes, so that the ring's halves split anywhere.
            let max = 1 + (step * 7919) % 9000;
            let mut called = false;
            let r = n.a.tcp_send_with(c, max, |x, y| {
                called = true;
                assert!(x.len() + y.len() <= max, "lent no more than asked");
                assert!(!x.is_empty(), "the first slice carries the space");
                assert!(y.is_empty(), "the send buffer lends one slice");
                send_short |= x.len() < max && sent + x.len() < total;
                fill(&data[sent..], x, y)
            });
            match r {
                Ok(0) => {
                    assert!(!called, "full: the closure is not called");
                    break;
                }
                Ok(k) => sent += k,
                Err(e) => panic!("send_with: {e}"),
            }
        }
        if sent == total && !closed {
            n.a.tcp_shutdown(c).unwrap();
            closed = true;
        }
        // Every few rounds the reader takes nothing although data is
        // there (a host socket that is full): nothing is lost.
        let refuse = step.is_multiple_of(5);
        loop {
            let mut called = false;
            let r = n.b.tcp_recv_with(s, |x, y| {
                called = true;
                assert!(!x.is_empty(), "called only with data");
                recv_wrapped |= !y.is_empty();
                if refuse {
                    return 0;
                }
                // Take a prefix that may end in either slice.
                let want = (x.len() + y.len()).min(1 + (step * 104_729) % 7000);
                got.extend_from_slice(&x[..want.min(x.len())]);
                got.extend_from_slice(&y[..want.saturating_sub(x.len())]);
                want
            });
            match r {
                Ok(0) if !called => {
                    eof = true;
                    return true;
                }
                Ok(0) => return false,
                Ok(_) => {}
                Err(TcpError::WouldBlock) => {
                    assert!(!called);
                    return false;
                }
                Err(e) => panic!("recv_with: {e}"),
            }
        }
    });
    assert!(ok && eof, "EOF reached (got {} of {total})", got.len());
    assert!(got == data, "every byte once and in order");
    assert!(
        send_short,
        "the send buffer lent less than asked, and was asked again"
    );
    assert!(recv_wrapped, "the receive ring lent its data in two slices");
    // Everything acknowledged and read: nothing is held any more.
    n.advance(Duration::from_millis(500));
    assert_eq!(n.a.tcp_buffered(), 0);
    assert_eq!(n.b.tcp_buffered(), 0);
}

#[test]
fn borrowing_calls_have_the_side_effects_of_send_and_recv() {
    let (mut n, c, s) = small_buffers_pair();
    n.a.take_events(&mut |_| {});
    n.b.take_events(&mut |_| {});
    // Fill A's send buffer through the borrowing call: it is scheduled to
    // transmit (poll_at now) and data reaches B, which reports it.
    let mut queued = 0;
    loop {
        match n.a.tcp_send_with(c, usize::MAX, |x, y| {
            x.fill(1);
            y.fill(1);
            x.len() + y.len()
        }) {
            Ok(0) => break,
            Ok(k) => queued += k,
            Err(e) => panic!("send_with: {e}"),
        }
    }
    assert_eq!(
        queued, 20_000,
        "the whole configured buffer, storage grown on the way"
    );
    assert!(
        n.a.poll_at().is_some_and(|t| t <= n.now),
        "output scheduled"
    );
    assert_eq!(n.a.tcp_buffered(), held(&n.a, c));
    n.pump();
    let mut readable = false;
    n.b.take_events(&mut |e| {
        if let SocketEvent::Tcp(h, r) = e {
            readable |= h == s && r.is_readable();
        }
    });
    assert!(readable, "B reported its new data");
    // B's window (12,000 bytes, rounded down to whole segments) is full:
    // A is stuck until B reads.
    let st = n.b.tcp_status(s).unwrap();
    assert!(st.recv_queue > 10_000, "{}", st.recv_queue);
    assert_eq!(n.b.tcp_buffered(), st.recv_queue);
    // A holds what B has not acknowledged yet (at least what B could not
    // take; B's ACK of the rest may be delayed).
    assert_eq!(n.a.tcp_buffered(), held(&n.a, c));
    assert!(n.a.tcp_buffered() >= 20_000 - st.recv_queue);
    // Reading through the borrowing call opens the window (a window
    // update goes out), A's queue drains, and A reports send space (the
    // events since A's buffer was full).
    let mut total = 0;
    assert!(n.run_until(Duration::from_secs(10), |n| {
        while let Ok(k) = n.b.tcp_recv_with(s, |x, y| x.len() + y.len()) {
            if k == 0 {
                break;
            }
            total += k;
        }
        total == 20_000
    }));
    let mut writable = false;
    n.a.take_events(&mut |e| {
        if let SocketEvent::Tcp(h, r) = e {
            writable |= h == c && r.is_writable();
        }
    });
    assert!(writable, "A reported send space after its buffer was full");
    n.advance(Duration::from_millis(500));
    assert_eq!(n.a.tcp_buffered(), 0, "acknowledged");
    assert_eq!(n.b.tcp_buffered(), 0, "read");
}

#[test]
fn borrowing_calls_report_the_errors_of_send_and_recv() {
    let (mut n, c, s) = small_buffers_pair();
    // Nothing to read yet: WouldBlock, closure not called.
    assert_eq!(
        n.b.tcp_recv_with(s, |_, _| panic!("no data")),
        Err(TcpError::WouldBlock)
    );
    // max 0: nothing lent.
    assert_eq!(n.a.tcp_send_with(c, 0, |_, _| panic!("max 0")), Ok(0));
    // After shutdown: BrokenPipe without calling the closure.
    n.a.tcp_send_with(c, 5, |x, _| fill(b"bytes", x, &mut []))
        .unwrap();
    n.a.tcp_shutdown(c).unwrap();
    assert_eq!(
        n.a.tcp_send_with(c, 10, |_, _| panic!("shut down")),
        Err(TcpError::BrokenPipe)
    );
    n.advance(Duration::from_millis(100));
    // B gets the bytes, then end of stream (Ok(0), closure not called).
    let mut got = Vec::new();
    assert_eq!(
        n.b.tcp_recv_with(s, |x, y| {
            got.extend_from_slice(x);
            got.extend_from_slice(y);
            x.len() + y.len()
        }),
        Ok(5)
    );
    assert_eq!(got, b"bytes");
    assert_eq!(n.b.tcp_recv_with(s, |_, _| panic!("at EOF")), Ok(0));
    // A stale handle.
    n.b.tcp_abort(s);
    assert_eq!(
        n.b.tcp_recv_with(s, |_, _| panic!("stale")),
        Err(TcpError::InvalidHandle)
    );
    assert_eq!(
        n.b.tcp_send_with(s, 10, |_, _| panic!("stale")),
        Err(TcpError::InvalidHandle)
    );
}

#[test]
fn buffered_total_follows_queues_and_released_connections() {
    let (mut n, c, s) = small_buffers_pair();
    // B does not read: 3,000 bytes sit in its receive buffer.
    n.a.tcp_send(c, &[7u8; 3000]).unwrap();
    n.advance(Duration::from_millis(100));
    assert_eq!(n.b.tcp_buffered(), 3000);
    assert_eq!(n.a.tcp_buffered(), 0, "acknowledged");
    // A queues more while B's side is gone: A holds it until it gives up.
    n.b.tcp_abort(s);
    n.pump();
    assert_eq!(
        n.b.tcp_socket_count(),
        1,
        "only the listener: the connection was reaped"
    );
    assert_eq!(
        n.b.tcp_buffered(),
        0,
        "the reaped connection's bytes went with it"
    );
    let _ = n.a.tcp_send(c, &[8u8; 1000]);
    n.advance(Duration::from_millis(100));
    assert_eq!(n.a.tcp_buffered(), held(&n.a, c));
    n.a.tcp_abort(c);
    assert_eq!(n.a.tcp_buffered(), 0);
}
