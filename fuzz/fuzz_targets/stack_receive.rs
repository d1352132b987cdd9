#![no_main]
//! The engine's receive path: a `Stack` with a listener, two ESTABLISHED
//! connections and a UDP socket, fed raw and structure-aware frames, timer
//! advances and application calls decoded from the input. The body lives in
//! `harness/stack.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::stack::run(data));
