//! `Poller::run_on_stack_thread`: a handler run by the stack thread itself
//! (no thread of its own, no wake-up per event), as `ustack serve` runs
//! its services.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ustack_net::{Poller, TcpListener, TcpStream};

use common::{pair, A_IP, PATIENCE};

/// Wait (bounded) until `cond` holds, polling the condition.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// An echo server for one connection at a time, driven by events.
struct Echo {
    listener: TcpListener,
    conns: Vec<TcpStream>,
    /// Names of the threads the handler ran on.
    threads: Arc<Mutex<Vec<String>>>,
}

impl Echo {
    fn handle(&mut self, p: &Poller, events: &[ustack_net::PollEvent]) {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        {
            let mut t = self.threads.lock().expect("lock");
            if !t.contains(&name) {
                t.push(name);
            }
        }
        for ev in events {
            if ev.token == 0 {
                while let Ok((s, _)) = self.listener.accept() {
                    s.set_nonblocking(true).expect("nb");
                    p.register(&s, 1 + self.conns.len() as u64)
                        .expect("register");
                    self.conns.push(s);
                }
                continue;
            }
            let Some(s) = self.conns.get(ev.token as usize - 1) else {
                continue;
            };
            // Echo until the socket has nothing more or no room.
            let mut buf = [0u8; 16384];
            loop {
                let n = match (&*s).read(&mut buf) {
                    Ok(0) => {
                        let _ = s.shutdown(Shutdown::Write);
                        break;
                    }
                    Ok(n) => n,
                    Err(_) => break,
                };
                let mut off = 0;
                while off < n {
                    match (&*s).write(&buf[off..n]) {
                        Ok(k) => off += k,
                        // No room: the rest stays unsent and the client
                        // side notices a short echo (the test keeps its
                        // writes within the send buffer).
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("echo write: {e}"),
                    }
                }
            }
        }
    }
}

#[test]
fn stack_thread_serves_a_connection_byte_exact() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, SocketAddrV4::new(A_IP, 7)).expect("bind");
    listener.set_nonblocking(true).expect("nb");
    let p = a.poller();
    p.register(&listener, 0).expect("register");
    let threads = Arc::new(Mutex::new(Vec::new()));
    let mut echo = Echo {
        listener,
        conns: Vec::new(),
        threads: threads.clone(),
    };
    p.run_on_stack_thread(move |p, ev| echo.handle(p, ev))
        .expect("hand over");

    let c = TcpStream::connect(&b, SocketAddrV4::new(A_IP, 7)).expect("connect");
    // Many small exchanges (each one a request and its response), then a
    // larger block, all echoed byte for byte.
    for i in 0..200u32 {
        let msg = i.to_be_bytes();
        (&c).write_all(&msg).expect("write");
        let mut back = [0u8; 4];
        (&c).read_exact(&mut back).expect("read");
        assert_eq!(back, msg, "exchange {i}");
    }
    let block: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    (&c).write_all(&block).expect("write block");
    let mut back = vec![0u8; block.len()];
    (&c).read_exact(&mut back).expect("read block");
    assert!(back == block, "block echoed byte-exact");
    c.shutdown(Shutdown::Write).expect("shutdown");
    let mut rest = Vec::new();
    (&c).read_to_end(&mut rest).expect("eof");
    assert!(rest.is_empty());

    // Every event ran on A's stack thread, none on a thread of ours.
    let t = threads.lock().expect("lock").clone();
    assert_eq!(t, vec!["ustack-a".to_string()]);
    a.shutdown();
}

#[test]
fn only_one_poller_runs_on_the_stack_thread() {
    let (a, _b) = pair();
    a.poller()
        .run_on_stack_thread(|_, _| {})
        .expect("first hand over");
    let e = a
        .poller()
        .run_on_stack_thread(|_, _| {})
        .expect_err("second refused");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    a.shutdown();
    let e = a
        .poller()
        .run_on_stack_thread(|_, _| {})
        .expect_err("stopped");
    assert_eq!(e.kind(), ErrorKind::NotConnected);
}

/// A socket call on another thread that raises an event for the stack
/// thread's poller wakes the stack thread at once, not at its next own
/// deadline (an idle connection may have none).
#[test]
fn another_threads_call_wakes_the_stack_thread() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, SocketAddrV4::new(A_IP, 9)).expect("bind");
    let c = TcpStream::connect(&b, SocketAddrV4::new(A_IP, 9)).expect("connect");
    let (s, _) = listener.accept().expect("accept");
    s.set_nonblocking(true).expect("nb");
    let p = a.poller();
    p.register(&s, 5).expect("register");
    // Stack time of each event for token 5.
    let seen: Arc<Mutex<Vec<ustack_net::core::time::Instant>>> = Arc::default();
    let seen2 = seen.clone();
    let net = a.clone();
    p.run_on_stack_thread(move |_, ev| {
        if ev.iter().any(|e| e.token == 5) {
            seen2.lock().expect("lock").push(net.now());
        }
    })
    .expect("hand over");
    // Registering a connected socket reports it writable at once.
    wait_until("the first event", || !seen.lock().expect("lock").is_empty());
    let before = seen.lock().expect("lock").len();
    // Quiet now. Shut down the read half from this thread: it reports the
    // socket again, as to any thread waiting on it.
    let due = a.with_stack(|st| st.poll_at());
    let asked = a.now();
    s.shutdown(Shutdown::Read).expect("shutdown");
    wait_until("the event of another thread's call", || {
        seen.lock().expect("lock").len() > before
    });
    let at = seen
        .lock()
        .expect("lock")
        .get(before)
        .copied()
        .expect("event");
    // The stack thread ran the handler before anything of its own was due
    // (a frame or a deadline): the call woke it.
    if let Some(due) = due {
        assert!(
            at < due,
            "event handled at {at:?}, only when the stack's own deadline {due:?} came (asked at {asked:?})"
        );
    }
    drop(c);
    a.shutdown();
}

/// Owned by the handler: notes when the stack thread drops it.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn blocking_calls_on_the_stack_thread_do_not_hang_and_shutdown_drops_the_handler() {
    let (a, b) = pair();
    let listener = TcpListener::bind(&a, SocketAddrV4::new(A_IP, 13)).expect("bind");
    listener.set_nonblocking(true).expect("nb");
    let p = a.poller();
    p.register(&listener, 0).expect("register");
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let results: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let res2 = results.clone();
    let net = a.clone();
    p.run_on_stack_thread(move |p, ev| {
        let _keep = &flag;
        if !ev.iter().any(|e| e.token == 0) {
            return;
        }
        let Ok((s, _)) = listener.accept() else {
            return;
        };
        // A blocking read with nothing to read: would wait for this very
        // thread, so it fails at once instead.
        s.set_nonblocking(false).expect("blocking");
        let mut buf = [0u8; 8];
        let r = (&s).read(&mut buf).map_err(|e| e.kind());
        // So does waiting on a poller.
        let mut evs = Vec::new();
        let w = p.wait(&mut evs, None).map_err(|e| e.kind());
        res2.lock().expect("lock").push(format!("{r:?} {w:?}"));
        // Stopping the runtime from its own thread does not deadlock.
        net.shutdown();
    })
    .expect("hand over");
    let _c = TcpStream::connect(&b, SocketAddrV4::new(A_IP, 13)).expect("connect");
    wait_until("the handler to stop the runtime", || !a.is_running());
    assert_eq!(
        results.lock().expect("lock").clone(),
        vec!["Err(WouldBlock) Ok(0)".to_string()]
    );
    // The handler went with the stack thread, and everything it owned.
    wait_until("the handler to be dropped", || {
        dropped.load(Ordering::SeqCst)
    });
    a.shutdown();
}

/// Many sockets with news at once reach the handler in bounded rounds (the
/// stack thread reads the device between them), and none is lost.
#[test]
fn many_events_come_in_bounded_rounds() {
    let (a, _b) = pair();
    let p = a.poller();
    let n = 3000u64;
    let mut socks = Vec::new();
    for i in 0..n {
        let u = ustack_net::UdpSocket::bind(&a, SocketAddrV4::new(A_IP, 20_000 + i as u16))
            .expect("bind");
        // A UDP socket is writable: registering reports it at once.
        p.register(&u, i).expect("register");
        socks.push(u);
    }
    let rounds: Arc<Mutex<Vec<Vec<u64>>>> = Arc::default();
    let r2 = rounds.clone();
    p.run_on_stack_thread(move |_, ev| {
        let _keep = &socks;
        r2.lock()
            .expect("lock")
            .push(ev.iter().map(|e| e.token).collect());
    })
    .expect("hand over");
    let total = || {
        rounds
            .lock()
            .expect("lock")
            .iter()
            .map(Vec::len)
            .sum::<usize>()
    };
    wait_until("every socket's event", || total() >= n as usize);
    let r = rounds.lock().expect("lock").clone();
    let mut seen: Vec<u64> = r.iter().flatten().copied().collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), n as usize, "each socket reported");
    assert_eq!(total(), n as usize, "each once");
    let largest = r.iter().map(Vec::len).max().unwrap_or(0);
    assert!(
        largest <= 1024 && r.len() >= 3,
        "rounds of {:?} events",
        r.iter().map(Vec::len).collect::<Vec<_>>()
    );
    a.shutdown();
}
