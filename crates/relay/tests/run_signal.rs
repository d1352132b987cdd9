//! SIGTERM sent to ustack (kill(2), not the terminal) reaches the command.
//! Alone in its binary: it signals its own process.

use clap::Parser;
use std::time::Duration;
use ustack_relay::cli::{run_with, RunArgs};
use ustack_relay::testing::FakeGuest;

#[derive(Parser)]
struct W {
    #[command(flatten)]
    a: RunArgs,
}

#[test]
fn sigterm_is_forwarded_and_reported_as_143() {
    let w = match W::try_parse_from(["ustack-run", "--", "sleep", "20"]) {
        Ok(w) => w,
        Err(e) => panic!("{e}"),
    };
    let killer = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: signalling our own process; run_with has installed the forwarder.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    });
    let start = std::time::Instant::now();
    let code = run_with(w.a, Box::new(|_d, _a, _m| Ok(FakeGuest::new())));
    let _ = killer.join();
    assert_eq!(code.ok(), Some(128 + 15));
    assert!(start.elapsed() < Duration::from_secs(10));
}
