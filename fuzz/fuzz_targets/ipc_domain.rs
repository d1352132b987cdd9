#![no_main]
//! An IPC domain's shared memory written by a hostile process, opened and
//! inspected; the IPC message cache line decoded.
//! The body lives in `harness/control.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::control::ipc_domain(data));
