//! ustack-relay: user-mode networking. A guest's flows are terminated by a
//! user-space stack (the [`GuestStack`] trait) and relayed to the outside
//! through ordinary host sockets, so untrusted packets never reach the host
//! kernel's TCP/IP stack (peers: pasta/passt, slirp4netns).
//!
//! * TCP out: a guest SYN to any destination is held until the host socket
//!   connects; then the handshake completes — or the guest gets RST (refused)
//!   or ICMP unreachable (unreachable, timeout). Data is relayed both ways
//!   through bounded buffers (back-pressure), FIN ↔ `shutdown(SHUT_WR)`, RST
//!   both ways, idle and half-closed flows reaped.
//! * UDP out: per-flow connected host sockets with idle timeouts; DNS to the
//!   guest-visible nameserver (10.0.2.3) goes to the host's resolver.
//! * ICMP echo: answered for the gateway; others via unprivileged ping sockets.
//! * Port forwards in (`-p [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]`).
//! * [`Limits`] with counters in [`Stats`].

pub mod addr_services;
pub mod bench;
pub mod cli;
pub mod control;
pub mod core_guest;
pub mod dns;
pub mod guest;
pub mod harden;
pub mod limits;
pub mod netns_watch;
pub mod portfwd;
mod relay;
pub mod stats;
pub mod sys;
pub mod termination;
pub mod testing;

pub use core_guest::{CoreGuest, CoreGuestConfig};
pub use guest::{
    ConnError, ConnId, ConnState, Datagram, EchoRequest, GuestStack, PendingSyn, Refusal, SynId,
    Unreachable,
};
pub use limits::{Limits, Timeouts, TokenBucket};
pub use portfwd::{PortForward, PortSpecError, Proto};
pub use relay::{Relay, RelayConfig, Stop};
pub use stats::Stats;
