//! ARP (RFC 826), decoded for Ethernet/IPv4 only.
//!
//! ```text
//!  0       2       4   5   6       8
//! +-------+-------+---+---+-------+---------------------------------------+
//! | htype | ptype |hln|pln|  oper | sha(hln) spa(pln) tha(hln) tpa(pln)   |
//! +-------+-------+---+---+-------+---------------------------------------+
//! ```
//!
//! The view handles any address lengths (so that foreign ARP packets can be
//! inspected safely); [`ArpRepr`] only accepts hardware type 1 (Ethernet),
//! protocol type 0x0800, hln 6, pln 4 and returns `Unsupported` otherwise.

use core::fmt;
use std::net::Ipv4Addr;

use crate::ethernet::MacAddr;
use crate::{Error, Result};

/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;

/// RFC 826 / IANA: hardware type 1 is Ethernet (10Mb).
pub const HTYPE_ETHERNET: u16 = 1;
/// The protocol type uses EtherType values; 0x0800 is IPv4.
pub const PTYPE_IPV4: u16 = 0x0800;

/// The `ar$op` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    Request,
    Reply,
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            other => ArpOperation::Unknown(other),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(v: ArpOperation) -> Self {
        match v {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(other) => other,
        }
    }
}

mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const ADDRS: usize = 8;
}

/// A zero-copy view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wrap `buffer`, checking that it holds the fixed part and all four
    /// addresses of the lengths the packet announces.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::ADDRS {
            return Err(Error::Truncated);
        }
        if b.len() < field::ADDRS + 2 * (usize::from(b[field::HLEN]) + usize::from(b[field::PLEN]))
        {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn hardware_type(&self) -> u16 {
        self.u16_at(field::HTYPE)
    }

    pub fn protocol_type(&self) -> u16 {
        self.u16_at(field::PTYPE)
    }

    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(self.u16_at(field::OPER))
    }

    fn sha_range(&self) -> core::ops::Range<usize> {
        let h = usize::from(self.hardware_len());
        field::ADDRS..field::ADDRS + h
    }

    fn spa_range(&self) -> core::ops::Range<usize> {
        let s = self.sha_range().end;
        s..s + usize::from(self.protocol_len())
    }

    fn tha_range(&self) -> core::ops::Range<usize> {
        let s = self.spa_range().end;
        s..s + usize::from(self.hardware_len())
    }

    fn tpa_range(&self) -> core::ops::Range<usize> {
        let s = self.tha_range().end;
        s..s + usize::from(self.protocol_len())
    }

    pub fn source_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.sha_range()]
    }

    pub fn source_protocol_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.spa_range()]
    }

    pub fn target_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.tha_range()]
    }

    pub fn target_protocol_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.tpa_range()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_hardware_type(&mut self, v: u16) {
        self.set_u16_at(field::HTYPE, v);
    }

    pub fn set_protocol_type(&mut self, v: u16) {
        self.set_u16_at(field::PTYPE, v);
    }

    pub fn set_hardware_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v;
    }

    pub fn set_protocol_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v;
    }

    pub fn set_operation(&mut self, op: ArpOperation) {
        self.set_u16_at(field::OPER, op.into());
    }

    /// Set the lengths first: the address positions depend on them.
    pub fn set_source_hardware_addr(&mut self, a: &[u8]) {
        let r = self.sha_range();
        self.buffer.as_mut()[r].copy_from_slice(a);
    }

    pub fn set_source_protocol_addr(&mut self, a: &[u8]) {
        let r = self.spa_range();
        self.buffer.as_mut()[r].copy_from_slice(a);
    }

    pub fn set_target_hardware_addr(&mut self, a: &[u8]) {
        let r = self.tha_range();
        self.buffer.as_mut()[r].copy_from_slice(a);
    }

    pub fn set_target_protocol_addr(&mut self, a: &[u8]) {
        let r = self.tpa_range();
        self.buffer.as_mut()[r].copy_from_slice(a);
    }
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    pub operation: ArpOperation,
    pub sender_mac: MacAddr,
    pub sender_ip: Ipv4Addr,
    pub target_mac: MacAddr,
    pub target_ip: Ipv4Addr,
}

fn ipv4_from(b: &[u8]) -> Result<Ipv4Addr> {
    let a: [u8; 4] = b.try_into().map_err(|_| Error::Malformed)?;
    Ok(Ipv4Addr::from(a))
}

impl ArpRepr {
    /// Decode an Ethernet/IPv4 ARP packet. Other hardware or protocol types
    /// give `Unsupported` (RFC 826: "?Do I have the hardware type in ar$hrd?
    /// ... If not, discard"); any operation code is returned as is.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &ArpPacket<&T>) -> Result<ArpRepr> {
        packet.check_len()?;
        if packet.hardware_type() != HTYPE_ETHERNET
            || packet.protocol_type() != PTYPE_IPV4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        Ok(ArpRepr {
            operation: packet.operation(),
            sender_mac: MacAddr::from_bytes(packet.source_hardware_addr())
                .ok_or(Error::Malformed)?,
            sender_ip: ipv4_from(packet.source_protocol_addr())?,
            target_mac: MacAddr::from_bytes(packet.target_hardware_addr())
                .ok_or(Error::Malformed)?,
            target_ip: ipv4_from(packet.target_protocol_addr())?,
        })
    }

    /// Always [`ARP_LEN`].
    pub const fn buffer_len(&self) -> usize {
        ARP_LEN
    }

    /// Same as `buffer_len` (ARP has no payload).
    pub const fn header_len(&self) -> usize {
        ARP_LEN
    }

    /// Write the packet. Panics if the buffer is shorter than [`ARP_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ArpPacket<T>) {
        packet.set_hardware_type(HTYPE_ETHERNET);
        packet.set_protocol_type(PTYPE_IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_source_hardware_addr(&self.sender_mac.0);
        packet.set_source_protocol_addr(&self.sender_ip.octets());
        packet.set_target_hardware_addr(&self.target_mac.0);
        packet.set_target_protocol_addr(&self.target_ip.octets());
    }
}

impl fmt::Display for ArpRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operation {
            ArpOperation::Request => write!(
                f,
                "ARP who-has {} tell {} ({})",
                self.target_ip, self.sender_ip, self.sender_mac
            ),
            ArpOperation::Reply => write!(
                f,
                "ARP reply {} is-at {} (to {} {})",
                self.sender_ip, self.sender_mac, self.target_ip, self.target_mac
            ),
            ArpOperation::Unknown(op) => write!(
                f,
                "ARP op {op} sender {} {} target {} {}",
                self.sender_ip, self.sender_mac, self.target_ip, self.target_mac
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_lengths_are_viewed_but_unsupported() {
        // hln 8, pln 16 (e.g. some other link / IPv6-ish): 8 + 2*(8+16) = 56 bytes.
        let mut b = [0u8; 56];
        b[0..2].copy_from_slice(&6u16.to_be_bytes());
        b[2..4].copy_from_slice(&0x86ddu16.to_be_bytes());
        b[4] = 8;
        b[5] = 16;
        b[7] = 1;
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.target_protocol_addr().len(), 16);
        assert_eq!(ArpRepr::parse(&p), Err(Error::Unsupported));
        assert_eq!(
            ArpPacket::new_checked(&b[..55]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn ethernet_ipv4_truncated() {
        let mut b = [0u8; 28];
        b[1] = 1;
        b[2] = 8;
        b[4] = 6;
        b[5] = 4;
        assert!(ArpPacket::new_checked(&b[..]).is_ok());
        assert_eq!(
            ArpPacket::new_checked(&b[..27]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            ArpPacket::new_checked(&b[..7]).err(),
            Some(Error::Truncated)
        );
    }
}
