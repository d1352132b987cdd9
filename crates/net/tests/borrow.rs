//! `TcpStream::read_with` / `write_with`: reading and writing in place in
//! the connection's buffers (no staging buffer), with the blocking,
//! non-blocking, timeout and error behaviour of `read`/`write`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddrV4};
use std::thread;
use std::time::{Duration, Instant};

use ustack_net::{Net, TcpListener, TcpStream};

use common::{pair_with, A_IP, PATIENCE};
use ustack_net::core::tcp::TcpConfig;

/// Byte `i` of the test stream.
fn byte(i: usize) -> u8 {
    (i.wrapping_mul(31) % 251) as u8
}

/// A connected (client on B, server on A) pair of streams; the nets are
/// returned so that they outlive the streams. The send buffer is fixed at
/// 256 KiB (no autotuning), so that 8 MiB turn the rings many times and
/// lending meets the wrap point for certain.
fn connected(port: u16) -> (Net, Net, TcpStream, TcpStream) {
    let tcp = TcpConfig {
        snd_buf: 256 << 10,
        snd_buf_initial: 256 << 10,
        ..TcpConfig::default()
    };
    let (a, b) = pair_with(tcp);
    let listener = TcpListener::bind(&a, SocketAddrV4::new(A_IP, port)).expect("bind");
    let client = TcpStream::connect(&b, SocketAddrV4::new(A_IP, port)).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    for s in [&client, &server] {
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        s.set_write_timeout(Some(PATIENCE)).expect("timeout");
    }
    (a, b, client, server)
}

#[test]
fn bulk_transfer_through_borrowed_buffers_is_byte_exact() {
    let (_a, _b, client, server) = connected(90);
    const TOTAL: usize = 8 << 20;
    let writer = thread::spawn(move || {
        let mut sent = 0;
        // The send buffer lends the rest of its current chunk: one slice,
        // less than asked at a chunk's end, and the writer comes back.
        let mut short = false;
        let mut calls = 0u64;
        while sent < TOTAL {
            // Odd sizes, so that chunk ends fall anywhere in a write.
            let max = (TOTAL - sent).min(1 + (calls as usize * 7919) % 100_000);
            calls += 1;
            let n = client
                .write_with(max, |x, y| {
                    assert!(x.len() + y.len() <= max);
                    assert!(y.is_empty(), "the send buffer lends one slice");
                    short |= x.len() < max;
                    for (k, slot) in x.iter_mut().chain(y.iter_mut()).enumerate() {
                        *slot = byte(sent + k);
                    }
                    x.len() + y.len()
                })
                .expect("write_with");
            assert!(n > 0, "a blocking write_with waits for space");
            sent += n;
        }
        client.shutdown(Shutdown::Write).expect("shutdown");
        (short, client)
    });
    let mut got = 0usize;
    let mut wrapped = false;
    let mut calls = 0u64;
    loop {
        let mut called = false;
        let mut bad = None;
        // Take odd-sized prefixes, sometimes ending in the second slice.
        let want = 1 + (calls as usize * 104_729) % 70_000;
        calls += 1;
        let n = server
            .read_with(|x, y| {
                called = true;
                wrapped |= !y.is_empty();
                let take = want.min(x.len() + y.len());
                for (k, &v) in x.iter().chain(y.iter()).take(take).enumerate() {
                    if v != byte(got + k) && bad.is_none() {
                        bad = Some(got + k);
                    }
                }
                take
            })
            .expect("read_with");
        assert_eq!(bad, None, "stream offset of the first wrong byte");
        if n == 0 {
            assert!(!called, "end of stream: the closure is not called");
            break;
        }
        got += n;
    }
    assert_eq!(got, TOTAL);
    let (writer_short, _client) = writer.join().expect("writer");
    assert!(
        writer_short,
        "the send buffer lent less than asked at a chunk's end"
    );
    assert!(wrapped, "the receive ring lent wrapped data");
}

#[test]
fn read_with_waits_like_read_and_keeps_what_is_not_taken() {
    let (_a, _b, client, server) = connected(91);
    // Non-blocking: WouldBlock, closure not called.
    server.set_nonblocking(true).expect("nb");
    let err = server
        .read_with(|_, _| panic!("no data"))
        .expect_err("empty");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    // Blocking with a timeout: WouldBlock after the timeout.
    server.set_nonblocking(false).expect("nb");
    server
        .set_read_timeout(Some(Duration::from_millis(150)))
        .expect("timeout");
    let t = Instant::now();
    let err = server
        .read_with(|_, _| panic!("no data"))
        .expect_err("timeout");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert!(t.elapsed() >= Duration::from_millis(150));
    server.set_read_timeout(Some(PATIENCE)).expect("timeout");
    // A blocked read_with returns when data arrives.
    (&client).write_all(b"hello world").expect("write");
    let mut seen = Vec::new();
    // Taking nothing leaves the data in place.
    let n = server
        .read_with(|x, y| {
            seen.extend_from_slice(x);
            seen.extend_from_slice(y);
            0
        })
        .expect("read_with");
    assert_eq!(n, 0);
    assert!(b"hello world".starts_with(&seen) && !seen.is_empty());
    // Taking a prefix; the rest is read normally.
    let n = server
        .read_with(|x, _| {
            assert_eq!(&x[..5], b"hello");
            5
        })
        .expect("read_with");
    assert_eq!(n, 5);
    let mut rest = [0u8; 6];
    (&server).read_exact(&mut rest).expect("read");
    assert_eq!(&rest, b" world");
    // End of stream: Ok(0) without calling the closure, again and again.
    client.shutdown(Shutdown::Write).expect("shutdown");
    for _ in 0..2 {
        assert_eq!(server.read_with(|_, _| panic!("at EOF")).expect("eof"), 0);
    }
}

#[test]
fn write_with_waits_for_space_and_reports_errors_like_write() {
    let (_a, _b, client, server) = connected(92);
    assert_eq!(
        client.write_with(0, |_, _| panic!("max 0")).expect("max 0"),
        0
    );
    // The peer reads nothing: fill every buffer on the way until a
    // non-blocking write_with gives WouldBlock, without calling the closure.
    client.set_nonblocking(true).expect("nb");
    let mut total = 0usize;
    let mut saw_would_block = false;
    for _ in 0..100_000 {
        let mut called = false;
        match client.write_with(usize::MAX, |x: &mut [u8], y: &mut [u8]| {
            called = true;
            x.fill(9);
            y.fill(9);
            total += x.len() + y.len();
            x.len() + y.len()
        }) {
            Ok(n) => assert!(n > 0 && called, "space was lent and filled"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                assert!(!called, "no space: the closure is not called");
                saw_would_block = true;
                break;
            }
        }
    }
    assert!(saw_would_block, "wrote {total} bytes without blocking");
    // Blocking with a timeout: once nothing more fits (ACKs of what the
    // peer's window took may still free a little), WouldBlock after it.
    client.set_nonblocking(false).expect("nb");
    client
        .set_write_timeout(Some(Duration::from_millis(150)))
        .expect("timeout");
    let mut timed_out = false;
    for _ in 0..200 {
        let t = Instant::now();
        let mut called = false;
        match client.write_with(usize::MAX, |x: &mut [u8], y: &mut [u8]| {
            called = true;
            x.fill(9);
            y.fill(9);
            total += x.len() + y.len();
            x.len() + y.len()
        }) {
            Ok(n) => assert!(n > 0 && called),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                assert!(!called);
                assert!(t.elapsed() >= Duration::from_millis(150));
                timed_out = true;
                break;
            }
        }
    }
    assert!(timed_out, "wrote {total} bytes without timing out");
    // A blocked write_with proceeds once the peer reads.
    client.set_write_timeout(Some(PATIENCE)).expect("timeout");
    let reader = thread::spawn(move || {
        let mut sink = Vec::new();
        (&server).read_to_end(&mut sink).expect("read");
        sink
    });
    let n = client
        .write_with(4, |x, y| {
            let mut k = 0;
            for (slot, v) in x.iter_mut().chain(y.iter_mut()).zip(b"tail") {
                *slot = *v;
                k += 1;
            }
            k
        })
        .expect("write_with");
    assert_eq!(n, 4);
    // After shutdown(Write): BrokenPipe, closure not called.
    client.shutdown(Shutdown::Write).expect("shutdown");
    let err = client
        .write_with(10, |_, _| panic!("shut down"))
        .expect_err("broken pipe");
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
    let sink = reader.join().expect("reader");
    assert_eq!(sink.len(), total + 4);
    assert!(sink[..total].iter().all(|&b| b == 9));
    assert_eq!(&sink[total..], b"tail");
}
