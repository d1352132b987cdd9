//! Packet formats for ustack: zero-copy views (`*Packet<T: AsRef<[u8]>>`) with
//! `new_checked` for untrusted bytes, and plain `*Repr` values with
//! `parse` / `buffer_len` / `emit`. Parsing never allocates and, after
//! `new_checked`, no accessor panics.
#![forbid(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod dhcpv4;
pub mod dhcpv6;
mod error;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6ext;
pub mod mld;
pub mod ndisc;
pub mod tcp;
pub mod udp;
pub mod virtio_net;

pub use error::{Error, Result};
