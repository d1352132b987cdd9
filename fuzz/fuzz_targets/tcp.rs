#![no_main]
//! TCP: new_checked + accessors + TcpRepr::parse; re-emit into buffer_len and re-parse.
//! The body lives in `harness/parsers.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::parsers::tcp(data));
