#![no_main]
//! The virtio-net header a guest puts in front of every frame: parse, the
//! accepted fields point inside the frame, re-emit and re-parse.
//! The body lives in `harness/parsers.rs`, shared with the corpus replay test.
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

fuzz_target!(|data: &[u8]| harness::parsers::virtio_net(data));
