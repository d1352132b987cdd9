//! ustack-net: the runtime that drives a [`ustack_core::Stack`] on a
//! [`ustack_dev::Device`], a blocking API shaped like `std::net`, and a
//! [`Poller`] for serving many sockets from one thread.
//!
//! ```text
//!   app threads ──(stack lock: socket op; Stack::poll → frame batch)──┐
//!                                                          Mutex<Stack, waiters, pollers>
//!   stack thread ─(device lock: rx burst)─(stack lock: receive,  ──────┘
//!                  timers → frame batch)         │ batch handed over, stack lock released
//!                                                ▼
//!                                      Mutex<device + tx backlog>: write
//!   wake-ups: Stack::take_events → the waiters / poller of each changed socket
//! ```
//!
//! Application threads run socket operations on the stack directly under
//! its lock and transmit what they produced themselves (after releasing
//! it); they park only when they must block, and are woken only by events
//! on their own socket. The stack thread handles device receive and timers.

mod error;
mod runtime;
mod sys;
mod tcp;
mod udp;

pub use runtime::{
    Net, PingReply, PollEvent, Poller, Runtime, RuntimeOptions, RuntimeStats, Source, SourceKey,
};
pub use tcp::{Incoming, TcpListener, TcpStream, DEFAULT_BACKLOG};
pub use udp::UdpSocket;
pub use ustack_core::Readiness;

/// The engine and device crates, re-exported for convenience.
pub use ustack_core as core;
pub use ustack_dev as dev;
