//! The runtime and the std::net-shaped API, with two stacks joined by a
//! real-time in-process link (a SOCK_SEQPACKET socketpair).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4};
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use ustack_net::{TcpListener, TcpStream, UdpSocket};

use common::{pair, A_IP, B_IP, PATIENCE};

fn sa(ip: std::net::Ipv4Addr, port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(ip, port)
}

/// Deterministic pseudo-random bytes (xorshift) so both ends can agree.
fn fill(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let b = state.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

#[test]
fn tcp_echo_with_several_client_threads() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 7)).expect("bind");
    assert_eq!(
        listener.local_addr().expect("local"),
        SocketAddr::V4(sa(A_IP, 7))
    );
    const CLIENTS: usize = 4;
    let server = thread::spawn(move || {
        let mut handlers = Vec::new();
        for _ in 0..CLIENTS {
            let (s, peer) = listener.accept().expect("accept");
            assert_eq!(peer.ip(), std::net::IpAddr::V4(B_IP));
            handlers.push(thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut s = s;
                loop {
                    let n = s.read(&mut buf).expect("server read");
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).expect("server write");
                }
            }));
        }
        for h in handlers {
            h.join().expect("handler");
        }
    });
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let b = b.clone();
        clients.push(thread::spawn(move || {
            let mut s = TcpStream::connect(&b, sa(A_IP, 7)).expect("connect");
            s.set_read_timeout(Some(PATIENCE)).expect("timeout");
            assert_eq!(s.peer_addr().expect("peer"), SocketAddr::V4(sa(A_IP, 7)));
            for i in 0..50u32 {
                let msg = format!(
                    "client {c} message {i} {}",
                    "x".repeat((i as usize * 37) % 1000)
                );
                s.write_all(msg.as_bytes()).expect("client write");
                let mut back = vec![0u8; msg.len()];
                s.read_exact(&mut back).expect("client read");
                assert_eq!(back, msg.as_bytes());
            }
            s.shutdown(Shutdown::Write).expect("shutdown");
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).expect("eof");
            assert!(rest.is_empty());
        }));
    }
    for c in clients {
        c.join().expect("client thread");
    }
    server.join().expect("server thread");
    let ctr = b.counters();
    assert!(
        ctr.tcp.ActiveOpens >= CLIENTS as u64,
        "ActiveOpens = {}",
        ctr.tcp.ActiveOpens
    );
}

#[test]
fn large_transfer_both_ways_with_hash_check() {
    const LEN: usize = 20 << 20;
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 5001)).expect("bind");
    // Server: receive LEN bytes, hashing; meanwhile send LEN bytes of its own.
    let server = thread::spawn(move || {
        let (s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let tx = s.try_clone().expect("clone");
        let sender = thread::spawn(move || {
            let mut state = 0xfeed_u64;
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 60_000];
            let mut left = LEN;
            let mut w = &tx;
            while left > 0 {
                let n = left.min(buf.len());
                fill(&mut buf[..n], &mut state);
                hasher.update(&buf[..n]);
                w.write_all(&buf[..n]).expect("server write");
                left -= n;
            }
            tx.shutdown(Shutdown::Write).expect("shutdown");
            hasher.finalize().to_vec()
        });
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 100_000];
        let mut total = 0;
        let mut r = &s;
        loop {
            let n = r.read(&mut buf).expect("server read");
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            total += n;
        }
        (
            total,
            hasher.finalize().to_vec(),
            sender.join().expect("sender"),
        )
    });

    let s = TcpStream::connect(&b, sa(A_IP, 5001)).expect("connect");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let tx = s.try_clone().expect("clone");
    let started = Instant::now();
    let sender = thread::spawn(move || {
        let mut state = 0x1234_5678_u64;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 40_000];
        let mut left = LEN;
        while left > 0 {
            let n = left.min(buf.len());
            fill(&mut buf[..n], &mut state);
            hasher.update(&buf[..n]);
            (&tx).write_all(&buf[..n]).expect("client write");
            left -= n;
        }
        tx.shutdown(Shutdown::Write).expect("shutdown");
        hasher.finalize().to_vec()
    });
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 70_000];
    let mut total = 0;
    loop {
        let n = (&s).read(&mut buf).expect("client read");
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n;
    }
    let client_sent = sender.join().expect("client sender");
    let (server_got, server_hash, server_sent) = server.join().expect("server");
    let elapsed = started.elapsed();
    assert_eq!(server_got, LEN);
    assert_eq!(total, LEN);
    assert_eq!(server_hash, client_sent, "client -> server bytes differ");
    assert_eq!(
        hasher.finalize().to_vec(),
        server_sent,
        "server -> client bytes differ"
    );
    eprintln!(
        "2 x {} MB in {:?} ({:.0} Mbit/s each way)",
        LEN >> 20,
        elapsed,
        (LEN as f64 * 8.0) / elapsed.as_secs_f64() / 1e6
    );
}

#[test]
fn read_timeout_gives_would_block_like_linux() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 80)).expect("bind");
    let client = TcpStream::connect(&b, sa(A_IP, 80)).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    client
        .set_read_timeout(Some(Duration::from_millis(150)))
        .expect("set");
    assert_eq!(
        client.read_timeout().expect("get"),
        Some(Duration::from_millis(150))
    );
    let t = Instant::now();
    let err = (&client).read(&mut [0u8; 16]).expect_err("nothing to read");
    let waited = t.elapsed();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert!(
        waited >= Duration::from_millis(150),
        "returned after {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "returned after {waited:?}");
    // Data arriving later is still read normally.
    (&server).write_all(b"late").expect("write");
    let mut buf = [0u8; 4];
    (&client).read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"late");
    assert_eq!(
        client
            .set_read_timeout(Some(Duration::ZERO))
            .expect_err("zero")
            .kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn write_timeout_when_peer_does_not_read() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 81)).expect("bind");
    let client = TcpStream::connect(&b, sa(A_IP, 81)).expect("connect");
    let (_server, _) = listener.accept().expect("accept");
    client
        .set_write_timeout(Some(Duration::from_millis(200)))
        .expect("set");
    let chunk = vec![7u8; 256 * 1024];
    let t = Instant::now();
    let mut total = 0usize;
    let mut saw_would_block = false;
    for _ in 0..200 {
        match (&client).write(&chunk) {
            Ok(n) => {
                assert!(n > 0);
                total += n;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                saw_would_block = true;
                break;
            }
        }
    }
    assert!(saw_would_block, "wrote {total} bytes without blocking");
    assert!(total > 0);
    assert!(t.elapsed() < PATIENCE);
}

#[test]
fn nonblocking_sockets_give_would_block() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 82)).expect("bind");
    listener.set_nonblocking(true).expect("nb");
    assert_eq!(
        listener.accept().expect_err("no connection yet").kind(),
        ErrorKind::WouldBlock
    );
    let client = TcpStream::connect(&b, sa(A_IP, 82)).expect("connect");
    // The handshake is done on B's side; A may still be finishing it.
    let deadline = Instant::now() + PATIENCE;
    let server = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    client.set_nonblocking(true).expect("nb");
    let t = Instant::now();
    assert_eq!(
        (&client).read(&mut [0u8; 8]).expect_err("empty").kind(),
        ErrorKind::WouldBlock
    );
    assert!(t.elapsed() < Duration::from_millis(100));
    (&server).write_all(b"ping").expect("write");
    let deadline = Instant::now() + PATIENCE;
    let mut buf = [0u8; 8];
    let n = loop {
        match (&client).read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("read: {e}"),
        }
    };
    assert_eq!(&buf[..n], b"ping");
}

#[test]
fn connection_refused_without_listener() {
    let (_a, b) = pair();
    let t = Instant::now();
    let err = TcpStream::connect(&b, sa(A_IP, 9)).expect_err("nobody listens");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert!(t.elapsed() < PATIENCE);
}

#[test]
fn connect_timeout_to_silent_host() {
    let (_a, b) = pair();
    // 10.0.0.99 is on-link but nobody answers ARP.
    let target = SocketAddr::V4(sa(std::net::Ipv4Addr::new(10, 0, 0, 99), 80));
    let t = Instant::now();
    let err =
        TcpStream::connect_timeout(&b, &target, Duration::from_millis(300)).expect_err("silent");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(
        TcpStream::connect_timeout(&b, &target, Duration::ZERO)
            .expect_err("zero")
            .kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn shutdown_write_gives_peer_eof_and_half_close_works() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 83)).expect("bind");
    let mut client = TcpStream::connect(&b, sa(A_IP, 83)).expect("connect");
    let (mut server, _) = listener.accept().expect("accept");
    server.set_read_timeout(Some(PATIENCE)).expect("t");
    client.set_read_timeout(Some(PATIENCE)).expect("t");
    client.write_all(b"hello").expect("write");
    client.shutdown(Shutdown::Write).expect("shutdown");
    assert_eq!(
        client.write(b"more").expect_err("after shutdown").kind(),
        ErrorKind::BrokenPipe
    );
    let mut got = Vec::new();
    server.read_to_end(&mut got).expect("read to EOF");
    assert_eq!(got, b"hello");
    // The other direction still works.
    server.write_all(b"bye").expect("server write");
    drop(server);
    let mut back = Vec::new();
    client.read_to_end(&mut back).expect("client EOF");
    assert_eq!(back, b"bye");
}

#[test]
fn shutdown_read_makes_blocked_reader_return_eof() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 84)).expect("bind");
    let client = TcpStream::connect(&b, sa(A_IP, 84)).expect("connect");
    let (_server, _) = listener.accept().expect("accept");
    let reader = client.try_clone().expect("clone");
    let t = thread::spawn(move || (&reader).read(&mut [0u8; 8]));
    thread::sleep(Duration::from_millis(100));
    client.shutdown(Shutdown::Read).expect("shutdown read");
    let n = t.join().expect("reader").expect("read");
    assert_eq!(n, 0);
}

#[test]
fn drop_after_write_still_delivers_everything() {
    const LEN: usize = 2 << 20;
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 85)).expect("bind");
    let reader = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(PATIENCE)).expect("t");
        let mut v = Vec::new();
        s.read_to_end(&mut v).expect("read to EOF");
        v
    });
    let mut data = vec![0u8; LEN];
    fill(&mut data, &mut 99);
    let mut s = TcpStream::connect(&b, sa(A_IP, 85)).expect("connect");
    s.write_all(&data).expect("write");
    drop(s);
    let got = reader.join().expect("reader");
    assert_eq!(got.len(), LEN);
    assert!(got == data, "data differs");
}

#[test]
fn listener_drop_refuses_new_connections() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 86)).expect("bind");
    let first = TcpStream::connect(&b, sa(A_IP, 86)).expect("connect while listening");
    drop(listener);
    let err = TcpStream::connect(&b, sa(A_IP, 86)).expect_err("listener is gone");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    drop(first);
    // The port is free again.
    let again = TcpListener::bind(&a, sa(A_IP, 86)).expect("rebind");
    drop(again);
}

#[test]
fn bind_errors_map_like_linux() {
    let (a, _b) = pair();
    let _l = TcpListener::bind(&a, sa(A_IP, 90)).expect("bind");
    assert_eq!(
        TcpListener::bind(&a, sa(A_IP, 90)).expect_err("dup").kind(),
        ErrorKind::AddrInUse
    );
    let foreign = sa(std::net::Ipv4Addr::new(192, 0, 2, 1), 91);
    assert_eq!(
        TcpListener::bind(&a, foreign).expect_err("not ours").kind(),
        ErrorKind::AddrNotAvailable
    );
    let _u = UdpSocket::bind(&a, sa(A_IP, 90)).expect("udp shares the number");
    assert_eq!(
        UdpSocket::bind(&a, sa(A_IP, 90)).expect_err("dup").kind(),
        ErrorKind::AddrInUse
    );
    let eph = TcpListener::bind(&a, sa(A_IP, 0)).expect("ephemeral");
    assert_ne!(eph.local_addr().expect("addr").port(), 0);
}

#[test]
fn udp_echo_and_timeouts() {
    let (a, b) = pair();
    let server = UdpSocket::bind(&a, sa(A_IP, 53)).expect("bind");
    let echo = thread::spawn(move || {
        server.set_read_timeout(Some(PATIENCE)).expect("t");
        for _ in 0..10 {
            let mut buf = [0u8; 2048];
            let (n, from) = server.recv_from(&mut buf).expect("recv");
            server.send_to(&buf[..n], from).expect("send back");
        }
    });
    let client = UdpSocket::bind(&b, sa(B_IP, 0)).expect("bind client");
    let port = client.local_addr().expect("addr").port();
    assert_ne!(port, 0);
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("t");
    for i in 0..5u8 {
        let msg = vec![i; 100 + usize::from(i) * 200];
        client.send_to(&msg, sa(A_IP, 53)).expect("send");
        let mut buf = [0u8; 2048];
        let (n, from) = client.recv_from(&mut buf).expect("recv");
        assert_eq!(from, SocketAddr::V4(sa(A_IP, 53)));
        assert_eq!(&buf[..n], &msg[..]);
    }
    client.connect(sa(A_IP, 53)).expect("connect");
    assert_eq!(
        client.peer_addr().expect("peer"),
        SocketAddr::V4(sa(A_IP, 53))
    );
    for i in 0..5u8 {
        client.send(&[i; 10]).expect("send");
        let mut buf = [0u8; 64];
        let n = client.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], &[i; 10]);
    }
    echo.join().expect("echo");
    client
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("t");
    let t = Instant::now();
    assert_eq!(
        client.recv(&mut [0u8; 8]).expect_err("nothing").kind(),
        ErrorKind::WouldBlock
    );
    assert!(t.elapsed() >= Duration::from_millis(100));
    client.set_nonblocking(true).expect("nb");
    assert_eq!(
        client.recv(&mut [0u8; 8]).expect_err("nothing").kind(),
        ErrorKind::WouldBlock
    );
}

#[test]
fn ping_counters_and_socket_table() {
    let (a, b) = pair();
    let reply = b
        .ping(A_IP, 1, b"hello ping", Duration::from_secs(5))
        .expect("ping")
        .expect("a reply");
    assert_eq!(reply.reply.from, A_IP);
    assert_eq!(reply.reply.seq, 1);
    assert!(reply.rtt < Duration::from_secs(5));
    let none = b
        .ping(
            std::net::Ipv4Addr::new(10, 0, 0, 77),
            2,
            b"x",
            Duration::from_millis(200),
        )
        .expect("ping");
    assert!(none.is_none());
    assert!(a.counters().icmp.InEchos >= 1);
    assert!(b.counters().icmp.InEchoReps >= 1);

    let _l = TcpListener::bind(&a, sa(A_IP, 22)).expect("bind");
    let _c = TcpStream::connect(&b, sa(A_IP, 22)).expect("connect");
    assert!(a.sockets().len() >= 2, "listener and connection are listed");
    assert!(b.runtime_stats().rx_frames > 0);
}

#[test]
fn net_shutdown_wakes_blocked_threads() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 87)).expect("bind");
    let waiter = thread::spawn(move || listener.accept().map(|_| ()));
    thread::sleep(Duration::from_millis(100));
    a.shutdown();
    let r = waiter.join().expect("waiter");
    assert!(r.is_err());
    assert!(!a.is_running());
    assert!(b.is_running());
}

#[test]
fn abort_resets_the_peer_and_nodelay_round_trips() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 88)).expect("bind");
    let client = TcpStream::connect(&b, sa(A_IP, 88)).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    assert!(!client.nodelay().expect("get"));
    client.set_nodelay(true).expect("set");
    assert!(client.nodelay().expect("get"));
    let clone = client.try_clone().expect("clone");
    server.set_read_timeout(Some(PATIENCE)).expect("t");
    client.abort();
    let err = (&server).read(&mut [0u8; 8]).expect_err("reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    assert_eq!(
        (&clone).write(b"x").expect_err("gone").kind(),
        ErrorKind::NotConnected
    );
    assert_eq!(
        clone.peer_addr().expect_err("gone").kind(),
        ErrorKind::NotConnected
    );
}

#[test]
fn linger_zero_close_resets_the_peer() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 89)).expect("bind");
    let client = TcpStream::connect(&b, sa(A_IP, 89)).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_read_timeout(Some(PATIENCE)).expect("t");
    client.set_linger_zero(true).expect("linger");
    drop(client);
    let err = (&server).read(&mut [0u8; 8]).expect_err("reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
}

/// Idle blocked readers must not be woken for every packet of someone
/// else's transfer (targeted wake-ups, not a broadcast).
#[test]
fn idle_blocked_readers_are_not_woken_by_other_traffic() {
    const IDLE: usize = 16;
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, sa(A_IP, 90)).expect("bind");
    let mut idle_servers = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..IDLE {
        let c = TcpStream::connect(&b, sa(A_IP, 90)).expect("connect");
        let (s, _) = listener.accept().expect("accept");
        idle_servers.push(s);
        let r = c.try_clone().expect("clone");
        readers.push((c, thread::spawn(move || (&r).read(&mut [0u8; 8]))));
    }
    thread::sleep(Duration::from_millis(50));
    let before = b.runtime_stats();
    // Busy connection: 4 MB from A to B.
    let busy_client = TcpStream::connect(&b, sa(A_IP, 90)).expect("connect");
    let (busy_server, _) = listener.accept().expect("accept");
    let writer = thread::spawn(move || {
        let data = vec![5u8; 4 << 20];
        (&busy_server).write_all(&data).expect("write");
    });
    busy_client.set_read_timeout(Some(PATIENCE)).expect("t");
    let mut got = 0;
    let mut buf = vec![0u8; 65536];
    while got < 4 << 20 {
        got += (&busy_client).read(&mut buf).expect("read");
    }
    writer.join().expect("writer");
    let after = b.runtime_stats();
    let loops = after.loops - before.loops;
    let wakeups = after.wakeups - before.wakeups;
    assert!(loops > 10, "the transfer took {loops} stack loops");
    // A broadcast would cost IDLE wake-ups per loop; targeted costs about one.
    assert!(wakeups < loops * 3, "{wakeups} wake-ups for {loops} loops");
    // The idle readers are still blocked, then see EOF when their peers close.
    drop(idle_servers);
    for (c, r) in readers {
        assert_eq!(r.join().expect("reader").expect("EOF"), 0);
        drop(c);
    }
}

#[test]
fn busy_poll_and_contract_spelling_start() {
    let (da, db) = common::seqpacket_pair().expect("socketpair");
    let a = ustack_net::Runtime::start(common::config(A_IP, 1), Box::new(da)).expect("start A");
    let opts = ustack_net::RuntimeOptions {
        busy_poll: Some(Duration::from_millis(2)),
        rx_batch: 4,
        ..common::opts("ustack-busy")
    };
    let b = ustack_net::Net::start(common::config(B_IP, 2), Box::new(db), opts).expect("start B");
    let listener = TcpListener::bind(&a, sa(A_IP, 7)).expect("bind");
    let mut c = TcpStream::connect(&b, sa(A_IP, 7)).expect("connect");
    let (mut s, _) = listener.accept().expect("accept");
    c.set_read_timeout(Some(PATIENCE)).expect("t");
    s.set_read_timeout(Some(PATIENCE)).expect("t");
    for i in 0..100u32 {
        c.write_all(&i.to_be_bytes()).expect("write");
        let mut v = [0u8; 4];
        s.read_exact(&mut v).expect("read");
        s.write_all(&v).expect("echo");
        c.read_exact(&mut v).expect("read back");
        assert_eq!(u32::from_be_bytes(v), i);
    }
    assert!(format!("{a:?}").contains("10.0.0.1"));
}

#[test]
fn broken_device_does_not_spin_the_stack_thread() {
    let (a, b) = pair();
    // Closing A's end makes B's fd permanently readable with an error.
    drop(a);
    thread::sleep(Duration::from_millis(50));
    let before = b.runtime_stats();
    thread::sleep(Duration::from_millis(300));
    let after = b.runtime_stats();
    assert!(
        after.rx_errors > before.rx_errors,
        "the broken link is noticed"
    );
    let loops = after.loops - before.loops;
    assert!(
        loops < 100,
        "{loops} loops in 300 ms: the stack thread spins"
    );
    assert!(b.is_running());
}
