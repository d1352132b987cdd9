#![no_main]
//! The relay's resolv.conf parser (DNS forwarding target) and `-p` specs.
//! The body lives in `harness/control.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::control::relay_config(data));
