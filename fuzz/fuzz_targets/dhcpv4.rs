#![no_main]
//! DHCPv4: new_checked + accessors + parse; re-emit to the same bytes; options rewritten.
//! The body lives in `harness/parsers_v6.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::parsers_v6::dhcpv4(data));
