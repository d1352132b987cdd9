//! The `Poller` (edge-triggered readiness for many sockets from one thread)
//! and the runtime's cost per event with many connections held.

mod common;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use ustack_net::{PollEvent, Poller, TcpListener, TcpStream, UdpSocket};

use common::{pair, A_IP, B_IP, PATIENCE};

fn sa(ip: std::net::Ipv4Addr, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(ip, port)
}

/// Wait (bounded) for an event with `token`; returns its readiness.
fn wait_for(p: &Poller, token: u64) -> ustack_net::Readiness {
    let deadline = Instant::now() + PATIENCE;
    let mut ev = Vec::new();
    loop {
        ev.clear();
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no event for token {token}");
        p.wait(&mut ev, Some(left)).expect("wait");
        if let Some(e) = ev.iter().find(|e| e.token == token) {
            return e.readiness;
        }
    }
}

#[test]
fn poller_reports_accept_connect_data_and_eof() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 80)).expect("bind");
    listener.set_nonblocking(true).expect("nb");
    let pa = a.poller();
    pa.register(&listener, 1).expect("register");
    // Nothing yet: a short wait times out with no event.
    let mut ev = Vec::new();
    assert_eq!(
        pa.wait(&mut ev, Some(Duration::from_millis(20)))
            .expect("wait"),
        0
    );

    let client = TcpStream::connect(&b, sa(A_IP, 80)).expect("connect");
    assert!(wait_for(&pa, 1).is_readable(), "listener readable");
    let (server, _) = listener.accept().expect("accept");
    assert_eq!(
        listener.accept().expect_err("one connection").kind(),
        ErrorKind::WouldBlock
    );
    server.set_nonblocking(true).expect("nb");
    pa.register(&server, 2).expect("register");
    // Registering a connected socket reports it writable at once.
    let r = wait_for(&pa, 2);
    assert!(
        r.is_writable() && r.is_connected() && !r.is_readable(),
        "{r:?}"
    );
    // A socket belongs to one poller.
    let other = a.poller();
    assert_eq!(
        other.register(&server, 9).expect_err("taken").kind(),
        ErrorKind::AlreadyExists
    );

    (&client).write_all(b"ping").expect("write");
    assert!(wait_for(&pa, 2).is_readable());
    let mut buf = [0u8; 16];
    assert_eq!((&server).read(&mut buf).expect("read"), 4);
    assert_eq!(
        (&server).read(&mut buf).expect_err("drained").kind(),
        ErrorKind::WouldBlock
    );
    // Drained and nothing new: no event.
    ev.clear();
    assert_eq!(
        pa.wait(&mut ev, Some(Duration::from_millis(20)))
            .expect("wait"),
        0
    );

    client
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    assert!(wait_for(&pa, 2).is_readable());
    assert_eq!((&server).read(&mut buf).expect("eof"), 0);

    // Dropping a registered socket deregisters it: the other poller may
    // take the listener's place afterwards.
    drop(server);
    drop(listener);
    let l2 = TcpListener::bind(&a, sa(A_IP, 81)).expect("bind");
    other.register(&l2, 3).expect("free poller");
}

#[test]
fn poller_reports_writable_after_a_full_buffer() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 80)).expect("bind");
    let client = TcpStream::connect(&b, sa(A_IP, 80)).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    client.set_nonblocking(true).expect("nb");
    let pb = b.poller();
    pb.register(&client, 7).expect("register");
    assert!(wait_for(&pb, 7).is_writable());
    // Fill the send buffer (the peer does not read).
    let chunk = vec![1u8; 65536];
    let mut sent = 0usize;
    loop {
        match (&client).write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("write: {e}"),
        }
        assert!(sent < 64 << 20, "the send buffer never filled");
    }
    // The peer reads: space opens, and the poller says so.
    let reader = std::thread::spawn(move || {
        let mut got = 0usize;
        let mut buf = vec![0u8; 65536];
        server.set_read_timeout(Some(PATIENCE)).expect("t");
        while got < sent {
            got += (&server).read(&mut buf).expect("read");
        }
        got
    });
    // (Events that arrived while the buffer was being filled report the
    // readiness at collection time: wait for the one that says writable.)
    let deadline = Instant::now() + PATIENCE;
    while !wait_for(&pb, 7).is_writable() {
        assert!(Instant::now() < deadline, "never writable again");
    }
    assert!(reader.join().expect("reader") >= sent);
}

#[test]
fn poller_reports_udp_datagrams() {
    let (a, b) = pair();
    let u = UdpSocket::bind(&a, sa(A_IP, 5000)).expect("bind");
    u.set_nonblocking(true).expect("nb");
    let p = a.poller();
    p.register(&u, 5).expect("register");
    // A UDP socket is writable at once.
    let r = wait_for(&p, 5);
    assert!(r.is_writable() && !r.is_readable(), "{r:?}");
    let peer = UdpSocket::bind(&b, sa(B_IP, 0)).expect("bind");
    peer.send_to(b"hi", sa(A_IP, 5000)).expect("send");
    assert!(wait_for(&p, 5).is_readable());
    let mut buf = [0u8; 8];
    assert_eq!(u.recv_from(&mut buf).expect("recv").0, 2);
}

/// One thread serves many connections through a poller; a transfer on one
/// of them wakes the poller for that connection only, however many idle
/// connections are registered.
#[test]
fn events_per_transfer_do_not_grow_with_idle_connections() {
    const IDLE: usize = 600;
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 7)).expect("bind");
    let p = a.poller();
    let mut servers = HashMap::new();
    let mut clients = Vec::new();
    for i in 0..IDLE {
        let c = TcpStream::connect(&b, sa(A_IP, 7)).expect("connect");
        let (s, _) = listener.accept().expect("accept");
        s.set_nonblocking(true).expect("nb");
        p.register(&s, i as u64).expect("register");
        servers.insert(i as u64, s);
        clients.push(c);
    }
    // Take the registration events (each socket is writable).
    let mut ev: Vec<PollEvent> = Vec::new();
    while p
        .wait(&mut ev, Some(Duration::from_millis(50)))
        .expect("wait")
        > 0
    {}
    assert_eq!(ev.len(), IDLE, "one registration event per socket");

    let before = a.runtime_stats();
    let mut busy = &clients[IDLE / 2];
    busy.set_read_timeout(Some(PATIENCE)).expect("t");
    let mut buf = [0u8; 4096];
    let mut seen = HashMap::new();
    for round in 0..50u8 {
        busy.write_all(&[round; 100]).expect("write");
        // Echo whatever the poller reports.
        let mut echoed = 0;
        while echoed < 100 {
            ev.clear();
            p.wait(&mut ev, Some(PATIENCE)).expect("wait");
            for e in &ev {
                *seen.entry(e.token).or_insert(0) += 1;
                let mut s = &servers[&e.token];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            s.write_all(&buf[..n]).expect("echo");
                            echoed += n;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("read: {e}"),
                    }
                }
            }
        }
        let mut back = [0u8; 100];
        busy.read_exact(&mut back).expect("echo back");
        assert_eq!(back, [round; 100]);
    }
    let after = a.runtime_stats();
    // Only the busy connection was reported.
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen.contains_key(&((IDLE / 2) as u64)));
    // And the runtime took events for it only: a few per round trip, not
    // one per registered connection.
    let events = after.events - before.events;
    assert!(
        events < 50 * 8,
        "{events} readiness events for 50 round trips with {IDLE} idle connections"
    );
}
