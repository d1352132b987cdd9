//! ustack-net: the runtime that drives a `ustack_core::Stack` on a
//! `ustack_dev::Device`, and a blocking API shaped like `std::net`.
//!
//! The modules (`runtime`, `tcp`, `udp`, `error`, `sys`) are written against
//! docs/CONTRACTS.md and are wired in as soon as core's `Stack` lands.
