//! One small error enum per operation. Each maps 1:1 to the errno Linux would
//! return, exposed as [`std::io::ErrorKind`] through `errno_kind`.

use core::fmt;
use std::io::ErrorKind;

/// Why `tcp_listen` / `udp_bind` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindError {
    /// EADDRINUSE: the port is taken.
    AddrInUse,
    /// EADDRNOTAVAIL: the address is not one of ours.
    AddrNotAvailable,
    /// EADDRINUSE (Linux gives it for an exhausted ephemeral range on bind) or
    /// ENOBUFS when the socket table is full.
    Exhausted,
}

impl BindError {
    pub fn errno_kind(&self) -> ErrorKind {
        match self {
            BindError::AddrInUse => ErrorKind::AddrInUse,
            BindError::AddrNotAvailable => ErrorKind::AddrNotAvailable,
            BindError::Exhausted => ErrorKind::AddrInUse,
        }
    }
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindError::AddrInUse => "address in use",
            BindError::AddrNotAvailable => "address not available",
            BindError::Exhausted => "no free port or socket",
        })
    }
}
impl std::error::Error for BindError {}

/// Why `tcp_connect` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectError {
    /// EADDRINUSE: the requested local address/port is taken (or the 4-tuple exists).
    AddrInUse,
    /// EHOSTUNREACH / ENETUNREACH: no route to the destination.
    NoRoute,
    /// EADDRNOTAVAIL: no ephemeral port left, or the socket table is full.
    Exhausted,
    /// EINVAL / EADDRNOTAVAIL: unspecified, broadcast or multicast remote, port 0,
    /// or a local address that is not ours.
    InvalidAddress,
}

impl ConnectError {
    pub fn errno_kind(&self) -> ErrorKind {
        match self {
            ConnectError::AddrInUse => ErrorKind::AddrInUse,
            ConnectError::NoRoute => ErrorKind::HostUnreachable,
            ConnectError::Exhausted => ErrorKind::AddrNotAvailable,
            ConnectError::InvalidAddress => ErrorKind::InvalidInput,
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectError::AddrInUse => "address in use",
            ConnectError::NoRoute => "no route to host",
            ConnectError::Exhausted => "no ephemeral port or socket available",
            ConnectError::InvalidAddress => "invalid address",
        })
    }
}
impl std::error::Error for ConnectError {}

/// Why a UDP operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpError {
    /// EBADF: the handle is closed or was never valid.
    InvalidHandle,
    /// EAGAIN: nothing to receive.
    WouldBlock,
    /// EDESTADDRREQ/ENOTCONN: `udp_send` on an unconnected socket.
    NotConnected,
    /// ECONNREFUSED: an ICMP port unreachable arrived for this connected socket.
    ConnectionRefused,
    /// EHOSTUNREACH: no route, or the neighbour did not answer ARP.
    NoRoute,
    /// EMSGSIZE: the datagram cannot fit in one IPv4 datagram.
    TooLarge,
    /// ENOBUFS: out of transmit resources.
    Exhausted,
    /// EINVAL: port 0, unspecified or multicast remote.
    InvalidAddress,
}

impl UdpError {
    pub fn errno_kind(&self) -> ErrorKind {
        match self {
            UdpError::InvalidHandle => ErrorKind::InvalidInput,
            UdpError::WouldBlock => ErrorKind::WouldBlock,
            UdpError::NotConnected => ErrorKind::NotConnected,
            UdpError::ConnectionRefused => ErrorKind::ConnectionRefused,
            UdpError::NoRoute => ErrorKind::HostUnreachable,
            UdpError::TooLarge => ErrorKind::InvalidInput,
            UdpError::Exhausted => ErrorKind::OutOfMemory,
            UdpError::InvalidAddress => ErrorKind::InvalidInput,
        }
    }
}

impl fmt::Display for UdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UdpError::InvalidHandle => "invalid UDP handle",
            UdpError::WouldBlock => "operation would block",
            UdpError::NotConnected => "socket not connected",
            UdpError::ConnectionRefused => "connection refused",
            UdpError::NoRoute => "no route to host",
            UdpError::TooLarge => "message too long",
            UdpError::Exhausted => "no buffer space available",
            UdpError::InvalidAddress => "invalid address",
        })
    }
}
impl std::error::Error for UdpError {}

/// Why an ICMP echo could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcmpError {
    /// EHOSTUNREACH: no route to the destination.
    NoRoute,
    /// EMSGSIZE: the payload does not fit in one IPv4 datagram.
    TooLarge,
    /// EINVAL: unspecified or multicast destination.
    InvalidAddress,
    /// ENOBUFS: the transmit queue is full until the next `poll`.
    Exhausted,
}

impl IcmpError {
    pub fn errno_kind(&self) -> ErrorKind {
        match self {
            IcmpError::NoRoute => ErrorKind::HostUnreachable,
            IcmpError::TooLarge => ErrorKind::InvalidInput,
            IcmpError::InvalidAddress => ErrorKind::InvalidInput,
            IcmpError::Exhausted => ErrorKind::OutOfMemory,
        }
    }
}

impl fmt::Display for IcmpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IcmpError::NoRoute => "no route to host",
            IcmpError::TooLarge => "message too long",
            IcmpError::InvalidAddress => "invalid address",
            IcmpError::Exhausted => "no buffer space available",
        })
    }
}
impl std::error::Error for IcmpError {}
