#![no_main]
//! ICMPv6 (with NDP and MLD): new_checked + accessors + parse; re-emit with checksum and re-parse.
//! The body lives in `harness/parsers_v6.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::parsers_v6::icmpv6(data));
