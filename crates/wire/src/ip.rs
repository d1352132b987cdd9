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
    }
}
