//! Multi-process tests: ping-pong across processes, SIGKILL of a peer in the middle of
//! every blocking call, cross-process vcopy (COPY1/COPY2), crash recovery, stress.

mod common;
use common::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use ustack_ipc::{Domain, DomainConfig, Error, Message, MsgKind, WaitMode, ANY};

const MODES: [WaitMode; 3] = [WaitMode::Adaptive, WaitMode::Spin, WaitMode::Block];

#[test]
fn cross_process_sendrec_in_every_wait_mode() {
    let d = domain("mp-pp", 4);
    for mode in MODES {
        let dc = d.0.clone();
        let child = ChildGuard(fork_child(move || {
            let Ok(mut s) = dc.bind_as(1, "server") else {
                return 2;
            };
            s.set_wait_mode(mode);
            for _ in 0..2000 {
                let Ok(m) = s.receive(ANY) else { return 3 };
                if s.send(m.source, &Message::new(2).with_u64(0, m.u64_at(0) + 1))
                    .is_err()
                {
                    return 4;
                }
            }
            0
        }));
        let mut c = d.bind("client").unwrap();
        c.set_wait_mode(mode);
        let sid = d.endpoint_of_slot(1);
        assert!(wait_bound(&d, 2));
        for i in 0..2000u64 {
            let r = c.sendrec(sid, &Message::new(1).with_u64(0, i)).unwrap();
            assert_eq!((r.u64_at(0), r.source), (i + 1, sid));
        }
        assert_eq!(wait_child(child.0, Duration::from_secs(10)), 0);
        std::mem::forget(child);
    }
}

/// A process whose first thread has exited while another serves shows state `Z` in
/// `/proc/<pid>/stat`. Its endpoint must not be taken for dead: a client blocked in
/// `sendrec` (in every wait mode) gets its replies, `ls` shows it alive, and only when
/// the process really ends does the client get `DeadEndpoint`.
#[test]
fn a_server_whose_main_thread_exited_is_not_dead() {
    let d = domain("mp-zl", 4);
    let dc = d.0.clone();
    let child = ChildGuard(fork_child(move || {
        std::thread::spawn(move || {
            let code = (|| {
                let mut s = dc.bind_as(1, "server").ok()?;
                s.set_wait_mode(WaitMode::Block);
                loop {
                    let m = s.receive(ANY).ok()?;
                    if m.mtype == 9 {
                        // End the process 50 ms into the client's sendrec.
                        std::thread::sleep(Duration::from_millis(50));
                        return Some(0);
                    }
                    // Long enough for the client's liveness checks (every 10 ms) to run
                    // many times while it waits.
                    std::thread::sleep(Duration::from_millis(150));
                    s.send(m.source, &Message::new(2).with_u64(0, m.u64_at(0) + 1))
                        .ok()?;
                }
            })()
            .unwrap_or(3);
            // SAFETY: ends the whole child process from its last thread.
            unsafe { libc::_exit(code) };
        });
        // SAFETY: ends this (the first) thread only; the server thread lives on.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
        4
    }));
    let sid = d.endpoint_of_slot(1);
    assert!(wait_bound(&d, 1));
    let state = std::fs::read_to_string(format!("/proc/{}/stat", child.0)).unwrap_or_default();
    assert!(
        state.contains(") Z "),
        "expected a zombie first thread: {state}"
    );
    let mut c = d.bind("client").unwrap();
    for (i, mode) in MODES.into_iter().enumerate() {
        c.set_wait_mode(mode);
        let r = c.sendrec(sid, &Message::new(1).with_u64(0, i as u64));
        assert_eq!(r.map(|m| m.u64_at(0)), Ok(i as u64 + 1), "{mode:?}");
    }
    assert!(d.info().endpoints.iter().all(|e| e.alive));
    // Now the process ends for real, 50 ms into a sendrec: the caller learns it promptly.
    let t0 = Instant::now();
    assert_eq!(
        c.sendrec(sid, &Message::new(9)).map(|m| m.mtype),
        Err(Error::DeadEndpoint)
    );
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(150),
        "DeadEndpoint after {took:?}"
    );
    assert_eq!(wait_child(child.0, Duration::from_secs(10)), 0);
    std::mem::forget(child);
}

/// The parent blocks in `call` on a child; the child is SIGKILLed 30 ms later; the call
/// must fail with DeadEndpoint well under 100 ms after the kill.
fn kill_during(
    tag: &str,
    mode: WaitMode,
    child_receives_first: bool,
    call: impl FnOnce(&mut ustack_ipc::Endpoint, i32) -> Error,
) {
    let d = domain(tag, 4);
    let dc = d.0.clone();
    let child = ChildGuard(fork_child(move || {
        let Ok(mut e) = dc.bind_as(1, "victim") else {
            return 2;
        };
        if child_receives_first {
            // Take the request, then hang without replying.
            let _ = e.receive(ANY);
        }
        std::thread::sleep(Duration::from_secs(30));
        0
    }));
    assert!(wait_bound(&d, 1));
    let mut me = d.bind("survivor").unwrap();
    me.set_wait_mode(mode);
    let pid = child.0;
    let returned = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r2 = returned.clone();
    let what = format!("{tag} {mode:?}");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        kill(pid);
        let at = Instant::now();
        // A call that never notices the death would hang the test run: fail loudly.
        while !r2.load(std::sync::atomic::Ordering::SeqCst) {
            if at.elapsed() > Duration::from_secs(10) {
                eprintln!("{what}: call still blocked 10 s after its peer was killed");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        at
    });
    let err = call(&mut me, d.endpoint_of_slot(1));
    let done = Instant::now();
    returned.store(true, std::sync::atomic::Ordering::SeqCst);
    let killed = killer.join().unwrap();
    assert_eq!(err, Error::DeadEndpoint, "{tag} {mode:?}");
    let lat = done.saturating_duration_since(killed);
    assert!(
        lat < Duration::from_millis(100),
        "{tag} {mode:?}: dead endpoint after {lat:?}"
    );
    drop(child);
    // The dead slot is reclaimed and can be bound again.
    d.reclaim_dead();
    let left: Vec<String> = d.info().endpoints.into_iter().map(|e| e.name).collect();
    assert_eq!(left, vec!["survivor".to_string()]);
    assert!(d.bind_as(1, "new").is_ok());
}

#[test]
fn sigkill_peer_during_send() {
    for mode in MODES {
        kill_during("k-send", mode, false, |e, p| {
            e.send(p, &Message::new(1)).unwrap_err()
        });
    }
}

#[test]
fn sigkill_peer_during_receive() {
    for mode in MODES {
        kill_during("k-recv", mode, false, |e, p| e.receive(p).unwrap_err());
    }
}

#[test]
fn sigkill_peer_during_sendrec() {
    for mode in MODES {
        kill_during("k-srec", mode, true, |e, p| {
            e.sendrec(p, &Message::new(1)).unwrap_err()
        });
        kill_during("k-srec2", mode, false, |e, p| {
            e.sendrec_timeout(p, &Message::new(1), Duration::from_secs(20))
                .unwrap_err()
        });
    }
}

#[test]
fn sigkill_blocked_sender_and_receiver_leave_no_trace() {
    let d = domain("k-blocked", 4);
    let mut me = d.bind_as(0, "parent").unwrap();
    let (dc, dc2) = (d.0.clone(), d.0.clone());
    let c1 = ChildGuard(fork_child(move || {
        let Ok(mut e) = dc.bind_as(1, "sender") else {
            return 2;
        };
        let _ = e.send(0, &Message::new(7));
        0
    }));
    let c2 = ChildGuard(fork_child(move || {
        let Ok(mut e) = dc2.bind_as(2, "receiver") else {
            return 2;
        };
        let _ = e.receive(ANY);
        0
    }));
    assert!(eventually(Duration::from_secs(5), || {
        let i = d.info();
        i.endpoints
            .iter()
            .any(|e| e.state.starts_with("sending to"))
            && i.endpoints.iter().any(|e| e.state == "receiving from ANY")
    }));
    drop(c1);
    drop(c2);
    assert_eq!(
        me.send(d.endpoint_of_slot(2), &Message::new(1)),
        Err(Error::DeadEndpoint)
    );
    assert_eq!(
        me.receive(d.endpoint_of_slot(1)).map(|m| m.source),
        Err(Error::DeadEndpoint)
    );
    d.reclaim_dead();
    assert_eq!(
        me.try_receive(ANY),
        Err(Error::WouldBlock),
        "a dead sender's message is dropped"
    );
    assert_eq!(d.info().endpoints.len(), 1);
}

#[test]
fn domain_recreated_after_creator_crash() {
    let name = unique("crash");
    let n2 = name.clone();
    let child = fork_child(move || {
        let Ok(d) = Domain::create(&n2, DomainConfig::default()) else {
            return 2;
        };
        let Ok(mut e) = d.bind("crasher") else {
            return 3;
        };
        let _ = e.receive(ANY);
        0
    });
    assert!(eventually(Duration::from_secs(5), || Domain::open(&name)
        .map(|d| d.info().endpoints.len() == 1)
        .unwrap_or(false)));
    kill(child);
    assert_eq!(wait_child(child, Duration::from_secs(5)), -libc::SIGKILL);
    let d =
        DomGuard(Domain::create(&name, DomainConfig::default()).expect("re-create after crash"));
    assert!(d.info().endpoints.is_empty());
}

#[test]
fn vcopy_copy1_and_copy2_across_processes() {
    let d = domain("mp-copy", 4);
    let size = 4usize << 20;
    let spawn_holder = |slot: u32, fill: u8| {
        let dc = d.0.clone();
        ChildGuard(fork_child(move || {
            let Ok(mut e) = dc.bind_as(slot as i32, "holder") else {
                return 2;
            };
            let mut buf = vec![fill; size];
            // Tell the parent where the buffer is, then wait for "check" requests.
            let m = Message::new(1).with_u64(0, buf.as_mut_ptr() as usize as u64);
            if e.send(0, &m).is_err() {
                return 3;
            }
            loop {
                let Ok(m) = e.receive(0) else { return 0 };
                // Reply with a checksum of the buffer.
                let sum: u64 = buf
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| (i as u64 % 251) * b as u64)
                    .sum();
                if e.send(
                    0,
                    &Message::new(2).with_u64(0, sum).with_u64(1, m.u64_at(0)),
                )
                .is_err()
                {
                    return 4;
                }
            }
        }))
    };
    let mut me = d.bind_as(0, "parent").unwrap();
    let c1 = spawn_holder(1, 0);
    let c2 = spawn_holder(2, 0);
    let mut addr = HashMap::new();
    for _ in 0..2 {
        let m = me.receive(ANY).unwrap();
        addr.insert(m.source, m.u64_at(0) as usize);
    }
    let (e1, e2) = (d.endpoint_of_slot(1), d.endpoint_of_slot(2));
    let (a1, a2) = (addr[&e1], addr[&e2]);
    let src: Vec<u8> = (0..size).map(|i| (i % 13) as u8 + 1).collect();
    let want: u64 = src
        .iter()
        .enumerate()
        .map(|(i, &b)| (i as u64 % 251) * b as u64)
        .sum();
    let checksum = |me: &mut ustack_ipc::Endpoint, ep: i32| {
        me.sendrec(ep, &Message::new(9)).unwrap().u64_at(0)
    };
    assert_ne!(checksum(&mut me, e1), want);
    // COPY1, caller is the source.
    me.vcopy(me.id(), src.as_ptr() as usize, e1, a1, size)
        .unwrap();
    assert_eq!(checksum(&mut me, e1), want);
    // COPY2: the parent asks for a copy from child 1 to child 2.
    me.vcopy(e1, a1, e2, a2, size).unwrap();
    assert_eq!(checksum(&mut me, e2), want);
    // COPY1, caller is the destination.
    let mut back = vec![0u8; size];
    me.vcopy(e2, a2, me.id(), back.as_mut_ptr() as usize, size)
        .unwrap();
    assert!(back == src);
    // Bad ranges in a foreign process give errors, and both processes survive.
    assert_eq!(
        me.vcopy(me.id(), src.as_ptr() as usize, e1, 4096, 100),
        Err(Error::BadAddress)
    );
    assert_eq!(
        me.vcopy(e1, 4096, me.id(), back.as_mut_ptr() as usize, 100),
        Err(Error::BadAddress)
    );
    assert_eq!(me.vcopy(e1, 8, e2, a2, 100), Err(Error::BadAddress));
    assert_eq!(checksum(&mut me, e1), want);
    assert_eq!(checksum(&mut me, e2), want);
    drop(c1);
    drop(c2);
    assert_eq!(
        me.vcopy(e1, a1, me.id(), back.as_mut_ptr() as usize, 10),
        Err(Error::DeadEndpoint)
    );
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const KIND_PLAIN: u64 = 1;
const KIND_REQ: u64 = 2;
const KIND_DONE: u64 = 3;

/// Client threads in several processes do a random mix of operations against server
/// threads; every message carries a per-(client, server) sequence number, so the servers
/// detect any lost or duplicated message (timed-out sends must not be delivered).
#[test]
fn stress_random_mix_processes_and_threads() {
    const SERVERS: u32 = 3;
    const PROCS: u32 = 4;
    const THREADS: u32 = 3;
    const OPS: u32 = 2000;
    let d = domain("stress", 32);
    let t0 = Instant::now();
    let mut servers = vec![];
    for s in 0..SERVERS {
        let mut e = d.bind_as(s as i32, "server").unwrap();
        e.set_wait_mode(MODES[s as usize % MODES.len()]);
        servers.push(std::thread::spawn(move || -> Result<(u64, u64), String> {
            let mut next: HashMap<i32, u64> = HashMap::new();
            let (mut done, mut msgs, mut notes) = (0, 0u64, 0u64);
            let start = Instant::now();
            while done < PROCS * THREADS {
                if start.elapsed() > Duration::from_secs(40) {
                    return Err("server timed out".into());
                }
                let m = match e.receive_timeout(ANY, Duration::from_millis(100)) {
                    Ok(m) => m,
                    Err(Error::TimedOut) => continue,
                    Err(x) => return Err(format!("receive: {x}")),
                };
                if m.is_notify() {
                    notes += 1;
                    continue;
                }
                let exp = next.entry(m.source).or_insert(0);
                match m.u64_at(0) {
                    KIND_PLAIN | KIND_REQ => {
                        if m.u64_at(1) != *exp {
                            return Err(format!(
                                "from {}: seq {} expected {}",
                                m.source,
                                m.u64_at(1),
                                exp
                            ));
                        }
                        *exp += 1;
                        msgs += 1;
                        if m.u64_at(0) == KIND_REQ {
                            if m.kind() != MsgKind::SendRec {
                                return Err("request not marked sendrec".into());
                            }
                            e.try_send(m.source, &Message::new(0).with_u64(0, m.u64_at(1) * 3))
                                .map_err(|x| format!("reply: {x}"))?;
                            if m.u64_at(1) % 7 == 0 {
                                e.notify(m.source).map_err(|x| format!("notify: {x}"))?;
                            }
                        }
                    }
                    KIND_DONE => {
                        if m.u64_at(1) != *exp {
                            return Err(format!(
                                "from {}: sent {} received {}",
                                m.source,
                                m.u64_at(1),
                                exp
                            ));
                        }
                        done += 1;
                    }
                    k => return Err(format!("bad kind {k}")),
                }
            }
            Ok((msgs, notes))
        }));
    }
    let mut kids = vec![];
    for p in 0..PROCS {
        let dc = d.0.clone();
        kids.push(fork_child(move || {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    let dc = dc.clone();
                    std::thread::spawn(move || -> i32 {
                        let mut rng =
                            Rng(0x9E37_79B9_7F4A_7C15
                                ^ (((p * 16 + t) as u64 + 1) * 0x1234_5678_9abc));
                        let Ok(mut e) = dc.bind("client") else {
                            return 10;
                        };
                        e.set_wait_mode(MODES[(rng.next() % 3) as usize]);
                        let mut seq = [0u64; SERVERS as usize];
                        for _ in 0..OPS {
                            let s = (rng.next() % SERVERS as u64) as usize;
                            let dst = s as i32;
                            let msg =
                                |k: u64, q: u64| Message::new(0).with_u64(0, k).with_u64(1, q);
                            match rng.next() % 10 {
                                0..=3 => match e.sendrec(dst, &msg(KIND_REQ, seq[s])) {
                                    Ok(r) if r.u64_at(0) == seq[s] * 3 && !r.is_notify() => {
                                        seq[s] += 1
                                    }
                                    _ => return 11,
                                },
                                4 | 5 => match e.send(dst, &msg(KIND_PLAIN, seq[s])) {
                                    Ok(()) => seq[s] += 1,
                                    Err(_) => return 12,
                                },
                                6 => match e.send_timeout(
                                    dst,
                                    &msg(KIND_PLAIN, seq[s]),
                                    Duration::from_micros(rng.next() % 300),
                                ) {
                                    Ok(()) => seq[s] += 1,
                                    Err(Error::TimedOut) | Err(Error::WouldBlock) => {}
                                    Err(_) => return 13,
                                },
                                7 => match e.try_send(dst, &msg(KIND_PLAIN, seq[s])) {
                                    Ok(()) => seq[s] += 1,
                                    Err(Error::WouldBlock) => {}
                                    Err(_) => return 14,
                                },
                                8 => {
                                    if e.notify(dst).is_err() {
                                        return 15;
                                    }
                                }
                                _ => match e.receive_timeout(ANY, Duration::from_micros(100)) {
                                    Ok(m) if m.is_notify() => {}
                                    Err(Error::TimedOut) => {}
                                    _ => return 16,
                                },
                            }
                        }
                        for (s, q) in seq.iter().enumerate() {
                            if e.send(s as i32, &msg_done(*q)).is_err() {
                                return 17;
                            }
                        }
                        0
                    })
                })
                .collect();
            let mut rc = 0;
            for t in threads {
                let r = t.join().unwrap_or(99);
                if r != 0 {
                    rc = r;
                }
            }
            rc
        }));
    }
    let guards: Vec<ChildGuard> = kids.iter().map(|&k| ChildGuard(k)).collect();
    for &k in &kids {
        assert_eq!(
            wait_child(k, Duration::from_secs(60)),
            0,
            "client process failed"
        );
    }
    std::mem::forget(guards);
    let mut total = 0;
    for s in servers {
        let (msgs, _notes) = s.join().unwrap().unwrap();
        total += msgs;
    }
    assert!(
        total > (PROCS * THREADS * OPS / 2) as u64,
        "only {total} messages"
    );
    assert!(t0.elapsed() < Duration::from_secs(60));
}

fn msg_done(q: u64) -> Message {
    Message::new(0).with_u64(0, KIND_DONE).with_u64(1, q)
}
