//! SIGTERM sent to ustack (kill(2), not the terminal) reaches the command.
//! Alone in its binary: it signals its own process.

use std::time::Duration;
use ustack_relay::cli::run_with;
use ustack_relay::testing::FakeGuest;

mod common;
use common::args;

#[test]
fn sigterm_is_forwarded_and_reported_as_143() {
    let a = args(&["--", "sleep", "20"]);
    let killer = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: signalling our own process; run_with has installed the forwarder.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    });
    let start = std::time::Instant::now();
    let code = run_with(a, Box::new(|_d, _a, _m| Ok(FakeGuest::new())));
    let _ = killer.join();
    assert_eq!(code.ok(), Some(128 + 15));
    assert!(start.elapsed() < Duration::from_secs(10));
}
