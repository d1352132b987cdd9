//! Things shared by the IP versions: the protocol number.

use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{Error, Result};

/// The IPv4 "Protocol" / IPv6 "Next Header" value (IANA protocol numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    Icmp,
    Tcp,
    Udp,
    Unknown(u8),
}

/// IPv6 "Next Header" values (IANA protocol numbers) that have no variant of
/// their own: they are `Unknown(n)` values, usable in patterns.
impl IpProtocol {
    /// IPv6 Hop-by-Hop Options (RFC 8200 4.3).
    pub const HOP_BY_HOP: IpProtocol = IpProtocol::Unknown(0);
    /// IPv6 Routing header (RFC 8200 4.4).
    pub const IPV6_ROUTE: IpProtocol = IpProtocol::Unknown(43);
    /// IPv6 Fragment header (RFC 8200 4.5).
    pub const IPV6_FRAG: IpProtocol = IpProtocol::Unknown(44);
    /// Encapsulating Security Payload (RFC 4303).
    pub const ESP: IpProtocol = IpProtocol::Unknown(50);
    /// Authentication Header (RFC 4302).
    pub const AH: IpProtocol = IpProtocol::Unknown(51);
    /// ICMP for IPv6 (RFC 4443).
    pub const ICMPV6: IpProtocol = IpProtocol::Unknown(58);
    /// "No Next Header" (RFC 8200 4.7).
    pub const IPV6_NO_NEXT: IpProtocol = IpProtocol::Unknown(59);
    /// IPv6 Destination Options (RFC 8200 4.6).
    pub const IPV6_OPTS: IpProtocol = IpProtocol::Unknown(60);
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        match v {
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            other => IpProtocol::Unknown(other),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> Self {
        match v {
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Unknown(other) => other,
        }
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpProtocol::Icmp => f.write_str("ICMP"),
            IpProtocol::Tcp => f.write_str("TCP"),
            IpProtocol::Udp => f.write_str("UDP"),
            &IpProtocol::ICMPV6 => f.write_str("ICMPv6"),
            IpProtocol::Unknown(v) => write!(f, "proto-{v}"),
        }
    }
}

/// A list of addresses either borrowed from a packet (`N`-byte records) or
/// given by the caller as values, so messages can carry lists without
/// allocating. Two lists are equal when they yield the same addresses.
#[derive(Debug, Clone, Copy)]
pub enum AddrList<'a, A: 'static> {
    Bytes(&'a [u8]),
    Addrs(&'a [A]),
}

/// IPv4 addresses (4-byte records), e.g. DHCP's router and DNS options.
pub type Ipv4AddrList<'a> = AddrList<'a, Ipv4Addr>;
/// IPv6 addresses (16-byte records), e.g. RDNSS, DHCPv6 DNS servers.
pub type Ipv6AddrList<'a> = AddrList<'a, Ipv6Addr>;

/// An address type that can be read from its network-order bytes.
pub trait WireAddr: Copy + PartialEq + 'static {
    const LEN: usize;
    /// `b` has exactly `LEN` bytes.
    fn from_wire(b: &[u8]) -> Self;
    fn write_wire(&self, out: &mut [u8]);
}

impl WireAddr for Ipv4Addr {
    const LEN: usize = 4;
    fn from_wire(b: &[u8]) -> Self {
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    fn write_wire(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.octets());
    }
}

impl WireAddr for Ipv6Addr {
    const LEN: usize = 16;
    fn from_wire(b: &[u8]) -> Self {
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ipv6Addr::from(a)
    }
    fn write_wire(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.octets());
    }
}

impl<'a, A: WireAddr> AddrList<'a, A> {
    /// Borrow `bytes` as a list: `Malformed` unless a multiple of the
    /// address length.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        if !bytes.len().is_multiple_of(A::LEN) {
            return Err(Error::Malformed);
        }
        Ok(AddrList::Bytes(bytes))
    }

    pub fn len(&self) -> usize {
        match self {
            AddrList::Bytes(b) => b.len() / A::LEN,
            AddrList::Addrs(a) => a.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        self.len() * A::LEN
    }

    pub fn iter(&self) -> impl Iterator<Item = A> + 'a {
        let (bytes, addrs): (&'a [u8], &'a [A]) = match *self {
            AddrList::Bytes(b) => (b, &[]),
            AddrList::Addrs(a) => (&[], a),
        };
        bytes
            .chunks_exact(A::LEN)
            .map(A::from_wire)
            .chain(addrs.iter().copied())
    }

    /// Write the addresses into the start of `out` (at least `wire_len()`).
    pub fn write(&self, out: &mut [u8]) -> Result<()> {
        let out = out.get_mut(..self.wire_len()).ok_or(Error::Truncated)?;
        for (a, o) in self.iter().zip(out.chunks_exact_mut(A::LEN)) {
            a.write_wire(o);
        }
        Ok(())
    }
}

impl<A: WireAddr> PartialEq for AddrList<'_, A> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<A: WireAddr> Eq for AddrList<'_, A> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_roundtrips() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(v)), v);
        }
        assert_eq!(IpProtocol::from(6), IpProtocol::Tcp);
        assert_eq!(IpProtocol::from(17), IpProtocol::Udp);
        assert_eq!(IpProtocol::from(1), IpProtocol::Icmp);
        assert_eq!(IpProtocol::from(2), IpProtocol::Unknown(2));
        assert_eq!(IpProtocol::Unknown(132).to_string(), "proto-132");
        assert_eq!(IpProtocol::from(58), IpProtocol::ICMPV6);
        assert_eq!(IpProtocol::ICMPV6.to_string(), "ICMPv6");
        assert!(matches!(IpProtocol::from(44), IpProtocol::IPV6_FRAG));
    }

    #[test]
    fn address_lists() {
        let b = [10u8, 0, 0, 1, 10, 0, 0, 2];
        let l = Ipv4AddrList::from_bytes(&b).unwrap();
        let v = [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];
        assert_eq!(l, Ipv4AddrList::Addrs(&v));
        assert_ne!(l, Ipv4AddrList::Addrs(&v[..1]));
        assert_eq!(l.len(), 2);
        let mut out = [0u8; 8];
        Ipv4AddrList::Addrs(&v).write(&mut out).unwrap();
        assert_eq!(out, b);
        assert_eq!(l.write(&mut [0u8; 7]), Err(Error::Truncated));
        assert_eq!(Ipv4AddrList::from_bytes(&b[..7]), Err(Error::Malformed));
        assert_eq!(Ipv6AddrList::from_bytes(&b), Err(Error::Malformed));
        assert!(Ipv6AddrList::from_bytes(&[]).unwrap().is_empty());
    }
}
