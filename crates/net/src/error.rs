//! Mapping of the stack's error enums to `std::io::Error` with the
//! `ErrorKind` Linux would give (via each enum's `errno_kind`).

use std::io;

use ustack_core::{BindError, ConnectError, IcmpError, TcpError, UdpError};

/// Conversion of a stack error into the `io::Error` a Linux socket call
/// would return.
pub(crate) trait IntoIoError {
    fn into_io(self) -> io::Error;
}

macro_rules! into_io {
    ($($t:ty),*) => {$(
        impl IntoIoError for $t {
            fn into_io(self) -> io::Error {
                io::Error::new(self.errno_kind(), self)
            }
        }
    )*};
}

into_io!(BindError, ConnectError, IcmpError, TcpError, UdpError);

/// Resolve `addr` to the IPv4 socket addresses it names (ustack is IPv4-only
/// for now); an address list with no IPv4 entry is `InvalidInput`.
pub(crate) fn v4_addrs(
    addr: impl std::net::ToSocketAddrs,
) -> io::Result<Vec<std::net::SocketAddrV4>> {
    let v: Vec<_> = addr
        .to_socket_addrs()?
        .filter_map(|a| match a {
            std::net::SocketAddr::V4(a) => Some(a),
            std::net::SocketAddr::V6(_) => None,
        })
        .collect();
    if v.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no IPv4 address to use",
        ));
    }
    Ok(v)
}
