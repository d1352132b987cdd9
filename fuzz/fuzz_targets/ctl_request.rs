#![no_main]
//! Control-endpoint requests (JSON) and the sysctl values and port specs
//! they carry.
//! The body lives in `harness/control.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::control::ctl_request(data));
