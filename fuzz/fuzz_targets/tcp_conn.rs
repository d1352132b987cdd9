#![no_main]
//! One TCP connection between two stacks through hostile events from both
//! sides (drops, duplicates, reordering, rewritten and forged segments).
//! The body lives in `harness/tcp_conn.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::tcp_conn::run(data));
