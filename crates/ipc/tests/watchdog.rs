//! The per-process watchdog thread: started when an endpoint sleeps without a timeout,
//! gone again after about a second without sleepers (its own test binary, so that no
//! other test keeps it busy).

mod common;
use common::*;
use std::time::Duration;
use ustack_ipc::{Message, WaitMode, ANY};

/// The tests of this binary share the process's one watchdog: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn watch_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("comm"))
                        .map(|c| c.trim() == "ustack-ipc-watc")
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn watchdog_runs_while_endpoints_sleep_and_exits_when_idle() {
    let _serial = serial();
    let d = domain("wd", 4);
    // (A previous test's watchdog exits within about a second.)
    assert!(eventually(Duration::from_secs(5), || watch_threads() == 0));
    let mut a = d.bind("a").unwrap();
    let aid = a.id();
    a.set_wait_mode(WaitMode::Block);
    let dc = d.0.clone();
    let t = std::thread::spawn(move || {
        let mut b = dc.bind("b").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let n = watch_threads();
        b.send(aid, &Message::new(5)).unwrap();
        n
    });
    assert_eq!(a.receive(ANY).unwrap().mtype, 5);
    assert_eq!(t.join().unwrap(), 1, "one watchdog while a sleeps");
    // Idle: the thread exits after about a second.
    assert!(
        eventually(Duration::from_secs(5), || watch_threads() == 0),
        "watchdog still running"
    );
    // And comes back for the next sleeper (a sleep with a deadline arms it too).
    let t0 = std::time::Instant::now();
    assert!(a.receive_timeout(ANY, Duration::from_millis(50)).is_err());
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert_eq!(watch_threads(), 1);
}

/// What keeps the waker from fetching the sleeper's doorbell.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Block {
    Nothing,
    /// A seccomp filter makes `pidfd_getfd` fail with EPERM.
    Permission,
    /// The waker's descriptor limit is reached (EMFILE).
    NoDescriptors,
}

/// A Block-mode server in its own thread (pinned to one CPU if `pinned`) and a Block-mode
/// client in a child process (kept from fetching doorbells as `block` says) do `n` round
/// trips. Returns how long they took, the server's doorbells afterwards and how
/// `ustack ipc ls` shows them.
fn block_round_trips(
    tag: &str,
    n: u64,
    pinned: bool,
    block: Block,
) -> (Duration, (i32, i32), String) {
    let d = domain(tag, 4);
    let dc = d.0.clone();
    let server = std::thread::spawn(move || {
        if pinned {
            pin_to_one_cpu();
        }
        let mut me = dc.bind_as(0, "server").unwrap();
        me.set_wait_mode(WaitMode::Block);
        let t0 = std::time::Instant::now();
        for i in 0..n {
            let m = me.receive(ANY).unwrap();
            assert_eq!(m.u64_at(0), i);
            me.send(m.source, &Message::new(2).with_u64(0, i + 1))
                .unwrap();
        }
        let took = t0.elapsed();
        let shown = dc
            .info()
            .endpoints
            .into_iter()
            .find(|e| e.slot == 0)
            .map(|e| e.doorbell)
            .unwrap_or_default();
        (took, ustack_ipc::debug::doorbells(&dc, 0).unwrap(), shown)
    });
    let dc = d.0.clone();
    let child = ChildGuard(fork_child(move || {
        let Ok(mut e) = dc.bind_as(1, "client") else {
            return 3;
        };
        e.set_wait_mode(WaitMode::Block);
        let ok = match block {
            Block::Nothing => true,
            Block::Permission => forbid_syscall(libc::SYS_pidfd_getfd),
            Block::NoDescriptors => ustack_ipc::debug::use_up_descriptors(),
        };
        if !ok {
            return 2;
        }
        // Let the server fall asleep on its doorbell first.
        std::thread::sleep(Duration::from_millis(50));
        for i in 0..n {
            match e.sendrec(0, &Message::new(1).with_u64(0, i)) {
                Ok(r) if r.u64_at(0) == i + 1 => {}
                other => {
                    eprintln!("client sendrec {i}: {other:?}");
                    return 4;
                }
            }
        }
        0
    }));
    let pid = child.0;
    std::mem::forget(child);
    assert_eq!(wait_child(pid, Duration::from_secs(20)), 0);
    server.join().expect("server")
}

/// A sleeper that may run on one CPU only sleeps on its eventfd (the cheapest wake-up;
/// no placement to influence), any other on its pipe (whose wake-up carries the
/// scheduler's "sync" hint); both are reached across processes.
#[test]
fn doorbell_kind_follows_affinity() {
    let _serial = serial();
    let (_, (efd, pipe), shown) = block_round_trips("bell-one", 300, true, Block::Nothing);
    assert!(efd >= 0 && pipe == -1, "pinned: eventfd {efd}, pipe {pipe}");
    assert_eq!(shown, "eventfd");
    let (_, (efd, pipe), shown) = block_round_trips("bell-free", 300, false, Block::Nothing);
    assert_eq!(shown, "pipe");
    assert!(
        efd == -1 && pipe >= 0,
        "unpinned: eventfd {efd}, pipe {pipe}"
    );
}

/// A waker that cannot reach a Block-mode sleeper's doorbell (no permission for
/// `pidfd_getfd`, or no descriptor left) loses no message: the sleeper's watchdog rings it, and the sleeper goes
/// back to the futex for later sleeps, so round trips stay fast. For both kinds of
/// doorbell.
#[test]
fn unreachable_doorbell_falls_back_to_the_futex() {
    let _serial = serial();
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f2 = finished.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(30));
        if !f2.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("doorbell fallback test still blocked after 30 s");
            std::process::abort();
        }
    });
    const N: u64 = 300;
    for (pinned, block) in [
        (false, Block::Permission),
        (true, Block::Permission),
        (false, Block::NoDescriptors),
    ] {
        let (took, (efd, _), shown) = block_round_trips("bell-fb", N, pinned, block);
        assert_eq!(shown, "refused");
        assert_eq!(
            efd, -2,
            "the refused waker marks the sleeper (pinned: {pinned}, {block:?})"
        );
        // With a lost wake-up per message (each rescued by the watchdog after ~10 ms)
        // this would take seconds.
        assert!(
            took < Duration::from_secs(1),
            "{N} round trips took {took:?} (pinned: {pinned}, {block:?})"
        );
    }
    finished.store(true, std::sync::atomic::Ordering::SeqCst);
}
