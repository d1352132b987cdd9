#![no_main]
//! DHCPv6: parse; re-emit to the same bytes; each option re-emitted alone.
//! The body lives in `harness/parsers_v6.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::parsers_v6::dhcpv6(data));
