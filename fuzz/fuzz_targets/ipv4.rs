#![no_main]
//! IPv4: new_checked + every accessor + parse (with and without checksum
//! verification) + the tolerant quoted-header parse; re-emit and re-parse.
//! The body lives in `harness/parsers.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::parsers::ipv4(data));
