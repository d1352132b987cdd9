//! SIGINT/SIGTERM, collected synchronously (`ustack_relay::termination`,
//! shared with `run-bench`).

pub use ustack_relay::termination::{block_termination, wait_termination};
