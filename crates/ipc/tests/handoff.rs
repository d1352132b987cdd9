//! Block-mode hand-off replies (`Endpoint::set_handoff`): a `sendrec` caller waits in a
//! seccomp user-notification trap and the replier's answer hands its CPU over. Checks that
//! replies really go that way, that a trapped caller still learns promptly of a dead peer
//! or an ended domain, and that it falls back to doorbells where it cannot trap or the
//! replier cannot reach its listener.

mod common;
use common::*;
use std::time::{Duration, Instant};
use ustack_ipc::{debug, Error, Message, WaitMode, ANY};

/// The tests of this binary read the process-wide hand-off counter: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Can this process use hand-offs: Linux 6.6 or later (for the CPU hand-over flag) and
/// allowed to install a seccomp filter (CAP_SYS_ADMIN, as root, or no_new_privs)?
fn handoff_expected() -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel
        .trim()
        .split(['.', '-'])
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let (major, minor) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    // SAFETY: geteuid and prctl(PR_GET_NO_NEW_PRIVS) have no pointer arguments.
    let allowed =
        unsafe { libc::geteuid() == 0 || libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 };
    (major, minor) >= (6, 6) && allowed
}

fn cpu() -> u64 {
    // SAFETY: sched_getcpu has no arguments.
    unsafe { libc::sched_getcpu() as u64 }
}

/// `n` `sendrec` round trips of type `ty` to endpoint 0 (the servers here), each reply
/// checked (request + 1).
fn round_trips(c: &mut ustack_ipc::Endpoint, n: u64, ty: u16) -> Result<(), String> {
    for i in 0..n {
        let r = c.sendrec(0, &Message::new(ty).with_u64(0, i));
        if r.map(|m| m.u64_at(0)) != Ok(i + 1) {
            return Err(format!("round trip {i}: {r:?}"));
        }
    }
    Ok(())
}

/// A Block-mode server thread in this process answering `sendrec`s with (request + 1,
/// its CPU) until a request of type 99; over requests of type 2 it first waits until
/// their client is seen asleep (in its trap, or on a doorbell), so that the client is
/// surely waiting when the reply comes. (A fixed pause of 200 µs was not enough on a
/// loaded machine: a client still on its way to the trap got its reply directly.)
fn spawn_server(d: &ustack_ipc::Domain) -> std::thread::JoinHandle<()> {
    let dc = d.clone();
    let mut s = dc.bind_as(0, "server").unwrap();
    s.set_wait_mode(WaitMode::Block);
    std::thread::spawn(move || loop {
        let m = s.receive(ANY).unwrap();
        if m.mtype == 2 {
            // Bounded: a client that never sleeps gets its reply after 5 s and the
            // test fails on its counts instead of hanging.
            let t0 = Instant::now();
            while debug::trap_state(&dc, m.source).is_none_or(|(_, sl)| sl == 0)
                && t0.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        let r = Message::new(1)
            .with_u64(0, m.u64_at(0) + 1)
            .with_u64(1, cpu());
        s.send(m.source, &r).unwrap();
        if m.mtype == 99 {
            return;
        }
    })
}

#[test]
fn replies_are_handed_off_to_a_client_process() {
    let _serial = serial();
    let expected = handoff_expected();
    let d = domain("ho-rt", 4);
    let server = spawn_server(&d);
    const N: u64 = 3000;
    const SLOW: u64 = 300;
    let before = debug::handoffs();
    let dc = d.0.clone();
    let child = fork_child(move || {
        let mut c = dc.bind_as(1, "client").unwrap();
        c.set_wait_mode(WaitMode::Block);
        if c.set_handoff(true) != expected {
            return 2;
        }
        // Fast round trips: often the reply is there before we trap (the woken server
        // ran first on our CPU); every reply must be right.
        if round_trips(&mut c, N, 1).is_err() {
            return 3;
        }
        // Slow ones: we are trapped when each reply comes, and a hand-off resumes us on
        // the replier's CPU.
        let mut same = 0;
        for i in 0..SLOW {
            let r = c.sendrec(0, &Message::new(2).with_u64(0, i)).unwrap();
            if r.u64_at(0) != i + 1 {
                return 3;
            }
            same += u64::from(r.u64_at(1) == cpu());
        }
        c.sendrec(0, &Message::new(99)).unwrap();
        if expected && same < SLOW * 9 / 10 {
            eprintln!("client resumed on the server's CPU in {same} of {SLOW} slow round trips");
            return 4;
        }
        0
    });
    let _guard = ChildGuard(child);
    assert_eq!(wait_child(child, Duration::from_secs(60)), 0);
    std::mem::forget(_guard);
    server.join().unwrap();
    let answered = debug::handoffs() - before;
    if expected {
        // At least every slow reply was a hand-off (the replier answered the trap; a
        // broken answer would leave it to the client's watchdog, which does not count).
        assert!(answered >= SLOW, "only {answered} replies were hand-offs");
    } else {
        assert_eq!(answered, 0);
    }
}

/// A thread that uses hand-offs forks: the child inherits its filter and a copy of its
/// listener. The child closes that copy, cannot install a listener of its own while the
/// parent's is open (the kernel allows one per chain of filters), and so uses its
/// doorbells: its round trips all succeed, and the parent's hand-offs go on.
#[test]
fn a_forked_child_of_a_handoff_thread_uses_doorbells() {
    let _serial = serial();
    let d = domain("ho-fork", 4);
    let server = spawn_server(&d);
    let dc = d.0.clone();
    let mut c = dc.bind_as(1, "parent").unwrap();
    let t = std::thread::spawn(move || {
        let r = forked_child_run(&dc, &mut c);
        // Whatever happened: stop the server.
        let _ = c.sendrec(0, &Message::new(99));
        r
    });
    let r = t.join().unwrap();
    server.join().unwrap();
    assert_eq!(r, Ok(()));
}

fn forked_child_run(dc: &ustack_ipc::Domain, c: &mut ustack_ipc::Endpoint) -> Result<(), String> {
    let expected = handoff_expected();
    c.set_wait_mode(WaitMode::Block);
    if c.set_handoff(true) != expected {
        return Err("set_handoff in the parent".into());
    }
    let before = debug::handoffs();
    round_trips(c, 20, 2)?;
    // A fast round trip: the server has counted the last slow reply when it answers.
    round_trips(c, 1, 1)?;
    if expected && debug::handoffs() - before < 20 {
        return Err("the replies before the fork were not hand-offs".into());
    }
    let listener = debug::trap_state(dc, 1).map_or(-1, |(fd, _)| fd);
    if expected != (listener >= 0) {
        return Err(format!("parent's listener {listener}"));
    }
    let dcc = dc.clone();
    let child = fork_child(move || {
        // SAFETY: F_GETFD on a descriptor number; no memory is passed.
        if listener >= 0 && unsafe { libc::fcntl(listener, libc::F_GETFD) } != -1 {
            return 2; // the parent's listener is still open here
        }
        let Ok(mut k) = dcc.bind_as(2, "child") else {
            return 3;
        };
        k.set_wait_mode(WaitMode::Block);
        if k.set_handoff(true) {
            return 4; // a listener of its own while the parent's is open?
        }
        let t0 = Instant::now();
        if round_trips(&mut k, 300, 1).is_err() {
            return 5;
        }
        if t0.elapsed() > Duration::from_secs(5) {
            return 6;
        }
        0
    });
    let guard = ChildGuard(child);
    let code = wait_child(child, Duration::from_secs(30));
    std::mem::forget(guard);
    if code != 0 {
        return Err(format!("child exited with {code}"));
    }
    let before = debug::handoffs();
    round_trips(c, 20, 2)?;
    round_trips(c, 1, 1)?;
    if expected && debug::handoffs() - before < 20 {
        return Err("the parent's replies stopped being hand-offs".into());
    }
    Ok(())
}

/// A client thread that may run on one CPU only cannot be moved by a hand-off: it waits
/// for its reply on its eventfd doorbell (the cheaper sleep), and gets it.
#[test]
fn a_client_pinned_to_one_cpu_sleeps_on_its_doorbell() {
    let _serial = serial();
    let d = domain("ho-pin", 4);
    let mut s = d.bind_as(0, "server").unwrap();
    s.set_wait_mode(WaitMode::Block);
    let dc = d.0.clone();
    let client = std::thread::spawn(move || {
        pin_to_one_cpu();
        let mut c = dc.bind_as(1, "client").unwrap();
        c.set_wait_mode(WaitMode::Block);
        c.set_handoff(true);
        c.sendrec(0, &Message::new(7)).map(|m| m.u64_at(0))
    });
    let m = s.receive(ANY).unwrap();
    // 2: asleep on the eventfd doorbell (4 would be a trap).
    let asleep = eventually(Duration::from_secs(5), || {
        debug::trap_state(&d, 1).is_some_and(|(_, sl)| sl != 0)
    });
    let state = debug::trap_state(&d, 1);
    s.send(m.source, &Message::new(1).with_u64(0, 42)).unwrap();
    assert_eq!(client.join().unwrap(), Ok(42));
    assert!(asleep);
    assert_eq!(state.map(|(_, sl)| sl), Some(2), "{state:?}");
}

/// `USTACK_IPC_HANDOFF=1` in the environment switches hand-offs on for endpoints bound
/// from then on, without `set_handoff`; `0` leaves them off.
#[test]
fn the_environment_switches_handoffs_on() {
    let _serial = serial();
    let expected = handoff_expected();
    for (value, on) in [("1", true), ("0", false)] {
        let d = domain("ho-env", 4);
        let server = spawn_server(&d);
        let before = debug::handoffs();
        let dc = d.0.clone();
        let child = fork_child(move || {
            // SAFETY: a forked child has a single thread: nothing reads the environment
            // concurrently.
            unsafe { std::env::set_var(ustack_ipc::HANDOFF_ENV, value) };
            let mut c = dc.bind_as(1, "client").unwrap();
            c.set_wait_mode(WaitMode::Block);
            if round_trips(&mut c, 50, 2).is_err() {
                return 3;
            }
            c.sendrec(0, &Message::new(99)).map_or(4, |_| 0)
        });
        let guard = ChildGuard(child);
        assert_eq!(wait_child(child, Duration::from_secs(30)), 0);
        std::mem::forget(guard);
        server.join().unwrap();
        let answered = debug::handoffs() - before;
        if on && expected {
            assert!(answered >= 50, "{value}: only {answered} hand-offs");
        } else {
            assert_eq!(answered, 0, "{value}");
        }
    }
}

/// A client thread in hand-off mode sends a request the server never answers (if
/// `taken`, the server takes it; else it stays in the client's outbox, and the client
/// waits for the reply in its trap from the start); `disturb` then does something to the
/// server side. Returns what the client's `sendrec` returned and how long after `disturb`
/// it did.
fn trapped_client(
    tag: &str,
    disturb: impl FnOnce(&ustack_ipc::Domain, &mut Option<ustack_ipc::Endpoint>),
    server_in_child: bool,
    taken: bool,
) -> (Result<Message, Error>, Duration) {
    let expected = handoff_expected();
    let d = domain(tag, 4);
    let mut server = None;
    let mut child = ChildGuard(0);
    if server_in_child {
        let dc = d.0.clone();
        child.0 = fork_child(move || {
            let mut s = dc.bind_as(0, "server").unwrap();
            s.set_wait_mode(WaitMode::Block);
            if taken {
                let _ = s.receive(ANY);
            }
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        assert!(eventually(Duration::from_secs(5), || d.has_live_endpoints()));
    } else {
        let mut s = d.bind_as(0, "server").unwrap();
        s.set_wait_mode(WaitMode::Block);
        server = Some(s);
    }
    let dc = d.0.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = dc.bind_as(1, "client").unwrap();
        c.set_wait_mode(WaitMode::Block);
        let can = c.set_handoff(true);
        let r = c.sendrec(0, &Message::new(7));
        let _ = tx.send((can, r, Instant::now()));
    });
    if let Some(s) = server.as_mut().filter(|_| taken) {
        assert_eq!(s.receive(ANY).unwrap().mtype, 7);
    }
    // Wait until the client is trapped (or, without hand-offs, asleep).
    let want = if expected { 4 } else { 0 };
    assert!(
        eventually(Duration::from_secs(5), || {
            debug::trap_state(&d, 1)
                .is_some_and(|(_, sl)| if want == 4 { sl == 4 } else { sl != 0 })
        }),
        "client never went to sleep: {:?}",
        debug::trap_state(&d, 1)
    );
    std::thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    if server_in_child {
        kill(child.0);
    }
    disturb(&d.0, &mut server);
    let (can, r, done) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the client is still waiting 5 s later");
    assert_eq!(can, expected);
    (r, done.saturating_duration_since(t0))
}

#[test]
fn a_trapped_client_learns_at_once_that_the_server_process_was_killed() {
    let _serial = serial();
    let (r, took) = trapped_client("ho-kill", |_, _| {}, true, true);
    assert_eq!(r.err(), Some(Error::DeadEndpoint));
    assert!(took < Duration::from_millis(100), "took {took:?}");
}

#[test]
fn a_trapped_client_learns_at_once_that_the_server_unbound() {
    let _serial = serial();
    let (r, took) = trapped_client("ho-unbind", |_, s| drop(s.take()), false, true);
    assert_eq!(r.err(), Some(Error::DeadEndpoint));
    assert!(took < Duration::from_millis(100), "took {took:?}");
}

#[test]
fn a_trapped_client_learns_at_once_that_the_domain_ended() {
    let _serial = serial();
    let (r, took) = trapped_client("ho-end", |d, _| d.end().unwrap(), false, true);
    assert_eq!(r.err(), Some(Error::DomainEnded));
    assert!(took < Duration::from_millis(100), "took {took:?}");
}

/// The same three events while the request still waits in the client's outbox (the
/// server never took it), where the client already waits in its trap.
#[test]
fn a_client_trapped_before_its_request_was_taken_learns_at_once_of_trouble() {
    let _serial = serial();
    let (r, took) = trapped_client("ho-kill2", |_, _| {}, true, false);
    assert_eq!(
        (r.err(), took < Duration::from_millis(100)),
        (Some(Error::DeadEndpoint), true),
        "kill: {took:?}"
    );
    let (r, took) = trapped_client("ho-unbind2", |_, s| drop(s.take()), false, false);
    assert_eq!(
        (r.err(), took < Duration::from_millis(100)),
        (Some(Error::DeadEndpoint), true),
        "unbind: {took:?}"
    );
    let (r, took) = trapped_client("ho-end2", |d, _| d.end().unwrap(), false, false);
    assert_eq!(
        (r.err(), took < Duration::from_millis(100)),
        (Some(Error::DomainEnded), true),
        "end: {took:?}"
    );
}

#[test]
fn a_client_that_may_not_install_a_filter_uses_its_doorbells() {
    let _serial = serial();
    let d = domain("ho-nofilter", 4);
    let server = spawn_server(&d);
    let dc = d.0.clone();
    let child = fork_child(move || {
        if !forbid_syscall(libc::SYS_seccomp) {
            return 2;
        }
        let mut c = dc.bind_as(1, "client").unwrap();
        c.set_wait_mode(WaitMode::Block);
        if c.set_handoff(true) {
            return 3;
        }
        if round_trips(&mut c, 200, 1).is_err() {
            return 4;
        }
        c.sendrec(0, &Message::new(99)).unwrap();
        0
    });
    let _guard = ChildGuard(child);
    assert_eq!(wait_child(child, Duration::from_secs(30)), 0);
    std::mem::forget(_guard);
    server.join().unwrap();
    assert_eq!(debug::trap_state(&d, 1).map(|t| t.0), Some(-1));
}

#[test]
fn a_server_that_cannot_reach_the_listener_makes_the_client_use_its_doorbells() {
    let _serial = serial();
    let expected = handoff_expected();
    let d = domain("ho-noreach", 4);
    // The server runs in a child that may not take descriptors from other processes.
    let dc = d.0.clone();
    let child = fork_child(move || {
        if !forbid_syscall(libc::SYS_pidfd_getfd) {
            return 2;
        }
        let mut s = dc.bind_as(0, "server").unwrap();
        s.set_wait_mode(WaitMode::Block);
        loop {
            let Ok(m) = s.receive(ANY) else { return 3 };
            if s.send(m.source, &Message::new(1).with_u64(0, m.u64_at(0) + 1))
                .is_err()
            {
                return 4;
            }
            if m.mtype == 99 {
                return 0;
            }
        }
    });
    let _guard = ChildGuard(child);
    assert!(eventually(Duration::from_secs(5), || d.has_live_endpoints()));
    let mut c = d.bind_as(1, "client").unwrap();
    c.set_wait_mode(WaitMode::Block);
    assert_eq!(c.set_handoff(true), expected);
    let t0 = Instant::now();
    assert_eq!(round_trips(&mut c, 300, 1), Ok(()));
    // The first reply waits for the client's watchdog (one period); then no more traps.
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t0.elapsed()
    );
    c.sendrec(0, &Message::new(99)).unwrap();
    assert_eq!(wait_child(child, Duration::from_secs(10)), 0);
    std::mem::forget(_guard);
    let want = if expected { -2 } else { -1 };
    assert_eq!(debug::trap_state(&d, 1).map(|t| t.0), Some(want));
}
