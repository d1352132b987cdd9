//! The per-process watchdog thread: started when an endpoint sleeps without a timeout,
//! gone again after about a second without sleepers (its own test binary, so that no
//! other test keeps it busy).

mod common;
use common::*;
use std::time::Duration;
use ustack_ipc::{Message, WaitMode, ANY};

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
    let d = domain("wd", 4);
    assert_eq!(watch_threads(), 0);
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
