//! ustack-net: the runtime that drives a [`ustack_core::Stack`] on a
//! [`ustack_dev::Device`], and a blocking API shaped like `std::net`.
//!
//! ```text
//!   app threads ──(lock; socket op; Stack::poll → device)──┐
//!                                                         Mutex<Stack + device>
//!   stack thread ─(epoll: device fd + eventfd; rx batch;  ─┘
//!                  timers from Stack::poll_at; notify Condvar)
//! ```
//!
//! Application threads run socket operations on the stack directly under
//! its lock and transmit what they produced themselves; they park only when
//! they must block. The stack thread handles device receive and timers.

mod error;
mod runtime;
mod sys;
mod tcp;
mod udp;

pub use runtime::{Net, PingReply, Runtime, RuntimeOptions, RuntimeStats};
pub use tcp::{Incoming, TcpListener, TcpStream, DEFAULT_BACKLOG};
pub use udp::UdpSocket;

/// The engine and device crates, re-exported for convenience.
pub use ustack_core as core;
pub use ustack_dev as dev;
