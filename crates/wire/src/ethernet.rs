//! Ethernet II frames (IEEE 802.3 with an EtherType, RFC 894) and MAC addresses.
//!
//! ```text
//!  0                   6                   12      14
//! +-------------------+-------------------+-------+----------------------+
//! |  destination MAC  |    source MAC     | type  | payload (46..1500)   |
//! +-------------------+-------------------+-------+----------------------+
//! ```
//!
//! The frame check sequence is not part of what devices hand us and is not
//! modelled. Frames shorter than the 60-byte minimum are accepted on receive
//! (TAP and veth devices deliver them unpadded); padding is the payload's
//! business (IPv4 trims it by its total length).

use core::fmt;
use core::str::FromStr;

use crate::{Error, Result};

/// Length of the Ethernet II header (two addresses and the EtherType).
pub const ETHERNET_HEADER_LEN: usize = 14;

/// A 48-bit IEEE 802 MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00 (used as the unknown target in ARP requests).
    pub const UNSPECIFIED: MacAddr = MacAddr([0; 6]);

    /// The address in the first six bytes of `bytes`, or `None` when shorter.
    pub fn from_bytes(bytes: &[u8]) -> Option<MacAddr> {
        let b: &[u8; 6] = bytes.get(..6)?.try_into().ok()?;
        Some(MacAddr(*b))
    }

    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn is_broadcast(&self) -> bool {
        self.0 == [0xff; 6]
    }

    /// IEEE 802: the individual/group bit is the least significant bit of the
    /// first octet. Broadcast is a multicast address too.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// An individual (not group) address that is not all zeros.
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && self.0 != [0; 6]
    }

    /// Locally administered (the U/L bit, second least significant bit of the
    /// first octet, is set).
    pub fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = Error;

    /// Parses `02:00:00:00:00:01` (also with `-` separators); each octet is
    /// one or two hex digits.
    fn from_str(s: &str) -> Result<MacAddr> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for slot in out.iter_mut() {
            let p = parts.next().ok_or(Error::Malformed)?;
            if p.is_empty() || p.len() > 2 {
                return Err(Error::Malformed);
            }
            *slot = u8::from_str_radix(p, 16).map_err(|_| Error::Malformed)?;
        }
        if parts.next().is_some() {
            return Err(Error::Malformed);
        }
        Ok(MacAddr(out))
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(b: [u8; 6]) -> Self {
        MacAddr(b)
    }
}

impl From<MacAddr> for [u8; 6] {
    fn from(m: MacAddr) -> Self {
        m.0
    }
}

/// The EtherType field (values from the IEEE registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    Ipv4,
    Arp,
    Ipv6,
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> Self {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(other) => other,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Ipv4 => f.write_str("IPv4"),
            EtherType::Arp => f.write_str("ARP"),
            EtherType::Ipv6 => f.write_str("IPv6"),
            EtherType::Unknown(v) => write!(f, "0x{v:04x}"),
        }
    }
}

mod field {
    use core::ops::{Range, RangeFrom};
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

/// A zero-copy view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap `buffer` without checking its length; accessors may panic if it
    /// is shorter than [`ETHERNET_HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wrap `buffer`, checking that it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// `Err(Truncated)` when the buffer is shorter than the header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ETHERNET_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The length of a frame carrying `payload_len` bytes.
    pub const fn buffer_len(payload_len: usize) -> usize {
        ETHERNET_HEADER_LEN + payload_len
    }

    pub fn dst_addr(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::DST];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    pub fn src_addr(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::SRC];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    pub fn ethertype(&self) -> EtherType {
        let b = &self.buffer.as_ref()[field::ETHERTYPE];
        EtherType::from(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Everything after the header (including any padding and, if the
    /// device delivered it, the FCS).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// The payload with the lifetime of the underlying buffer.
    pub fn payload_ref(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.0);
    }

    pub fn set_src_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.0);
    }

    pub fn set_ethertype(&mut self, t: EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&u16::from(t).to_be_bytes());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// The decoded Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub src: MacAddr,
    pub dst: MacAddr,
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Decode the header of a frame created with `new_checked`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &EthernetFrame<&T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src: frame.src_addr(),
            dst: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Always [`ETHERNET_HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        ETHERNET_HEADER_LEN
    }

    /// Header plus `payload_len`.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        ETHERNET_HEADER_LEN + payload_len
    }

    /// Write the header. Panics if the buffer is shorter than the header
    /// (a bug in the caller, who sizes it with `buffer_len`).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst);
        frame.set_src_addr(self.src);
        frame.set_ethertype(self.ethertype);
    }
}

impl fmt::Display for EthernetRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Ethernet {} > {} type {}",
            self.src, self.dst, self.ethertype
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_classes() {
        assert!(MacAddr::BROADCAST.is_broadcast());
        assert!(MacAddr::BROADCAST.is_multicast());
        assert!(!MacAddr::BROADCAST.is_unicast());
        let m = MacAddr([0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
        assert!(m.is_multicast() && !m.is_broadcast() && !m.is_unicast());
        let u = MacAddr([0x02, 0, 0, 0, 0, 1]);
        assert!(u.is_unicast() && u.is_local() && !u.is_multicast());
        assert!(!MacAddr::UNSPECIFIED.is_unicast());
    }

    #[test]
    fn mac_display_and_parse() {
        let m = MacAddr([0x02, 0, 0, 0xab, 0xcd, 1]);
        assert_eq!(m.to_string(), "02:00:00:ab:cd:01");
        assert_eq!("02:00:00:ab:cd:01".parse::<MacAddr>(), Ok(m));
        assert_eq!("2-0-0-AB-cd-1".parse::<MacAddr>(), Ok(m));
        for bad in [
            "",
            "02:00:00:ab:cd",
            "02:00:00:ab:cd:01:02",
            "02:00:00:ab:cd:g1",
            "002:0:0:0:0:0",
            "::::::",
        ] {
            assert_eq!(bad.parse::<MacAddr>(), Err(Error::Malformed), "{bad}");
        }
    }

    #[test]
    fn short_frame_rejected() {
        assert_eq!(
            EthernetFrame::new_checked(&[0u8; 13][..]).err(),
            Some(Error::Truncated)
        );
        let f = EthernetFrame::new_checked(&[0u8; 14][..]).unwrap();
        assert!(f.payload().is_empty());
    }

    #[test]
    fn ethertype_roundtrip() {
        for v in [0x0800u16, 0x0806, 0x86dd, 0x88cc, 0] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
        assert_eq!(EtherType::from(0x0800), EtherType::Ipv4);
        assert_eq!(EtherType::Unknown(0x88cc).to_string(), "0x88cc");
    }
}
