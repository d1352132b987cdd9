#![no_main]
//! The address services' input path (router solicitations, DHCPv4 and
//! DHCPv6 servers) on the relay's engine. The body lives in
//! `harness/services.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::services::run(data));
