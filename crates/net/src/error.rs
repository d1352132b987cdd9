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

/// Resolve `addr` to the socket addresses it names (either family); an
/// empty list is `InvalidInput`.
pub(crate) fn socket_addrs(
    addr: impl std::net::ToSocketAddrs,
) -> io::Result<Vec<std::net::SocketAddr>> {
    let v: Vec<_> = addr.to_socket_addrs()?.collect();
    if v.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no address to use",
        ));
    }
    Ok(v)
}
