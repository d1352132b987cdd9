//! The sans-IO engine of ustack: interface, ARP, IPv4, ICMP, UDP and TCP.
//!
//! The engine never reads a clock, a random source or a file descriptor:
//! time comes in as an argument and randomness from a seeded source.
//!
//! | module | concern |
//! | --- | --- |
//! | `stack` | the [`Stack`]: receive path, ICMP, UDP API, timers |
//! | `tcp_api` / `tcp_table` | TCP demux, listeners, socket API |
//! | `tcp` | the per-connection TCP engine |
//! | `iface` | routing, IPv4 output and fragmentation, framing |
//! | `pmtu` | the path MTU cache (RFC 1191) |
//! | `arp` | the neighbour cache |
//! | `frag` | IPv4 and IPv6 reassembly |
//! | `ip6_host` | IPv6 host side: DAD, MLDv2 reports, router discovery, SLAAC |
//! | `ip6` / `ip6_frag` | IPv6 input, NDP, ICMPv6, UDP6; IPv6 fragments and ICMPv6 errors to sockets |
//! | `gro` | coalescing received TCP segments in a burst (software GRO) |
//! | `udp` | the UDP socket table |
//! | `transparent` | transparent mode: the stack as the whole outside world for one guest |
//! | `counters` | `/proc/net/snmp`-named counters |
//! | `addr_services` | router advertisements (`router6`), DHCPv4 and DHCPv6 servers |
#![forbid(unsafe_code)]

pub mod tcp;
pub mod time;

mod addr_services;
mod arp;
pub mod counters;
mod dhcp6_server;
mod dhcp_server;
mod echo6;
mod error;
mod frag;
mod gro;
mod hash;
mod iface;
mod ip6;
mod ip6_frag;
mod ip6_host;
mod pmtu;
mod router6;
mod stack;
mod tcp_api;
mod tcp_table;
mod transparent;
mod txown;
mod udp;

pub use addr_services::{AddrServicesError, AddressServices};
pub use arp::ArpLimits;
pub use counters::Counters;
pub use dhcp6_server::Dhcpv6Config;
pub use dhcp_server::Dhcpv4Config;
pub use error::{BindError, ConnectError, IcmpError, UdpError};
pub use frag::ReasmLimits;
pub use iface::{link_local, LinkOffload};
pub use ip6::{Ipv6AddrError, ALL_NODES, MAX_IPV6_ADDRESSES};
pub use ip6_host::Ipv6HostConfig;
pub use pmtu::RouteMetrics;
pub use router6::{RouterConfig, ALL_ROUTERS};
pub use stack::{Config, EchoReply, Limits, Stack};
pub use tcp::{CcAlgorithm, TcpError};
pub use tcp_api::SocketEvent;
pub use tcp_table::{Readiness, TcpHandle, TcpInfo, TcpSchedStats, TcpStatus};
pub use transparent::{
    EchoRequestInfo, PendingSyn, PendingSynId, Refuse, TransparentConfig, TransparentCounters,
    UdpAnyHandle,
};
pub use txown::{FrameParts, TxFrames};
pub use udp::{UdpHandle, UdpStatus, EPHEMERAL_FIRST, EPHEMERAL_LAST};
