//! Things shared by the IP versions: the protocol number.

use core::fmt;

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
}
