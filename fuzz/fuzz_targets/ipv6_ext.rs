#![no_main]
//! IPv6 extension headers: walk a chain (first byte = first Next Header) and re-emit each header.
//! The body lives in `harness/parsers_v6.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::parsers_v6::ipv6_ext(data));
