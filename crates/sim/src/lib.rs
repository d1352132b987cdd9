//! Deterministic simulation of two ustack engines joined by an impaired
//! in-memory link, on a virtual clock that jumps to the next event.
//!
//! A run is fully determined by a [`Family`], an [`IpMode`] and a seed
//! ([`Scenario::generate_ip`]; [`Scenario::generate`] for IPv4):
//! link impairments per direction (loss, reordering, duplication, corruption,
//! delay, jitter, rate limit, tail drop), TCP settings of each host (congestion
//! control and pacing included), and a set of concurrent connections whose
//! applications write seeded byte streams in random-sized chunks, read in
//! random-sized chunks, pause, half-close with `tcp_shutdown` or close
//! directly. The connections run over IPv4, IPv6 or both (dual stack: some
//! over each family on the same pair of engines, whose listeners are
//! `[::]:5000` then). [`run`] checks that
//!
//! - every byte arrives exactly once and in order (each stream byte is a keyed
//!   hash of its offset), and EOF comes exactly after the last byte;
//! - no socket reports an error, nothing panics;
//! - every connection is released on both hosts (only listeners remain) once
//!   the applications have closed and timers (TIME-WAIT) have run out;
//! - the run ends within bounded virtual time and event-loop work;
//! - no frame exceeds the MTU (IPv4 and IPv6 packets, 20- and 40-byte
//!   headers included).
//!
//! The harness is reusable by benches and fuzz targets: build a [`Scenario`]
//! by hand or from a seed, and call [`run`] / [`run_with`].

pub mod scenario;
pub mod stream;
mod world;

pub use scenario::{AppPlan, ConnPlan, Ending, Family, IpMode, Scenario};
pub use world::{run, run_with, Failure, Report, RunOptions, CLIENT_PORT_BASE, SERVER_PORT};
