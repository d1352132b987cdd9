//! UDP (RFC 768).
//!
//! ```text
//!  0      7 8     15 16    23 24    31
//! +--------+--------+--------+--------+
//! |   Source Port   |  Destination    |
//! |                 |     Port        |
//! +--------+--------+--------+--------+
//! |     Length      |    Checksum     |
//! +--------+--------+--------+--------+
//! |          data octets ...
//! ```

use crate::checksum::{self, PseudoHeader};
use crate::ip::IpProtocol;
use crate::{Error, Result};
use core::fmt;

/// Length of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// A zero-copy view of a UDP datagram. The buffer is the IP payload.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wrap `buffer`, checking the header and the Length field.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// RFC 768: "Length is the length in octets of this user datagram
    /// including this header and the data. (This means the minimum value of
    /// the length is eight.)" A buffer longer than Length is accepted (the
    /// excess is ignored, as Linux trims it); a shorter one is `Truncated`.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < UDP_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let field_len = usize::from(self.len());
        if field_len < UDP_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < field_len {
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

    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// The Length field (header + data).
    pub fn len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// True when the Length field says there is no data.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= UDP_HEADER_LEN
    }

    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The data, up to the Length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[UDP_HEADER_LEN..usize::from(self.len())]
    }

    /// RFC 768: "An all zero transmitted checksum value means that the
    /// transmitter generated no checksum". Otherwise the checksum over the
    /// pseudo header, the header and the data must verify. Over IPv6 (the
    /// addresses are `Ipv6Addr`) a zero checksum does not verify: RFC 8200
    /// 8.1, "IPv6 receivers must discard UDP packets containing a zero
    /// checksum".
    pub fn verify_checksum<A: PseudoHeader>(&self, src: A, dst: A) -> bool {
        if self.checksum() == 0 {
            return A::UDP_ZERO_CHECKSUM_ALLOWED;
        }
        let len = self.len();
        let pseudo = A::pseudo_header(src, dst, IpProtocol::Udp.into(), u32::from(len));
        checksum::verify(pseudo, &self.buffer.as_ref()[..usize::from(len)])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// The data with the lifetime of the underlying buffer.
    pub fn payload_ref(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        &b[UDP_HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_src_port(&mut self, v: u16) {
        self.set_u16_at(field::SRC_PORT, v);
    }

    pub fn set_dst_port(&mut self, v: u16) {
        self.set_u16_at(field::DST_PORT, v);
    }

    pub fn set_len(&mut self, v: u16) {
        self.set_u16_at(field::LENGTH, v);
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v);
    }

    /// The data, up to the Length field (set the length first).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[UDP_HEADER_LEN..end]
    }

    /// Compute the checksum over the pseudo header and `len()` bytes.
    /// RFC 768: "If the computed checksum is zero, it is transmitted as all
    /// ones (the equivalent in one's complement arithmetic)."
    /// Over IPv6 the same rule applies (RFC 8200 8.1: "if that computation
    /// yields a result of zero, it must be changed to hex FFFF").
    pub fn fill_checksum<A: PseudoHeader>(&mut self, src: A, dst: A) {
        self.set_checksum(0);
        let len = self.len();
        let pseudo = A::pseudo_header(src, dst, IpProtocol::Udp.into(), u32::from(len));
        let c = checksum::checksum_with(pseudo, &self.buffer.as_ref()[..usize::from(len)]);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

/// The decoded UDP header (the payload is `packet.payload()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl UdpRepr {
    /// Decode the header; with `verify_checksum`, a non-zero checksum that
    /// does not verify gives `Checksum`. Port 0 is not rejected here (the
    /// demultiplexer decides what to do with it).
    pub fn parse<T: AsRef<[u8]> + ?Sized, A: PseudoHeader>(
        packet: &UdpPacket<&T>,
        src: A,
        dst: A,
        verify_checksum: bool,
    ) -> Result<UdpRepr> {
        packet.check_len()?;
        if verify_checksum && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// Always [`UDP_HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        UDP_HEADER_LEN
    }

    /// Header plus `payload_len`.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        UDP_HEADER_LEN + payload_len
    }

    /// Write the header with Length `8 + payload_len`; the payload must
    /// already be in place (it is checksummed). Without `fill_checksum` the
    /// checksum is 0 ("no checksum"). `payload_len` must be at most 65527
    /// (checked in debug builds). Panics if the buffer is shorter than
    /// `8 + payload_len`. Over IPv6 the checksum is mandatory (RFC 8200
    /// 8.1): pass `fill_checksum = false` only when something else (checksum
    /// offload) fills it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>, A: PseudoHeader>(
        &self,
        packet: &mut UdpPacket<T>,
        src: A,
        dst: A,
        payload_len: usize,
        fill_checksum: bool,
    ) {
        debug_assert!(payload_len <= usize::from(u16::MAX) - UDP_HEADER_LEN);
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(u16::try_from(UDP_HEADER_LEN + payload_len).unwrap_or(u16::MAX));
        if fill_checksum {
            packet.fill_checksum(src, dst);
        } else {
            packet.set_checksum(0);
        }
    }
}

impl fmt::Display for UdpRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UDP {} > {}", self.src_port, self.dst_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn length_field_validation() {
        let b = [0u8, 1, 0, 2, 0, 7, 0, 0];
        assert_eq!(UdpPacket::new_checked(&b[..]).err(), Some(Error::Malformed));
        let b = [0u8, 1, 0, 2, 0, 9, 0, 0];
        assert_eq!(UdpPacket::new_checked(&b[..]).err(), Some(Error::Truncated));
        assert_eq!(
            UdpPacket::new_checked(&b[..7]).err(),
            Some(Error::Truncated)
        );
        // Longer buffer than Length: accepted, payload trimmed.
        let b = [0u8, 1, 0, 2, 0, 9, 0, 0, 0xaa, 0xbb, 0xcc];
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), &[0xaa]);
    }

    #[test]
    fn zero_checksum_sent_as_ffff() {
        // Find a payload word that makes the computed checksum 0: the sum of
        // everything else plus w must be 0xffff.
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut b = [0u8; 10];
        let repr = UdpRepr {
            src_port: 1234,
            dst_port: 53,
        };
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        repr.emit(&mut p, src, dst, 2, false);
        let partial = checksum::fold(checksum::sum(
            &b,
            checksum::pseudo_header_v4(src, dst, 17, 10),
        ));
        let w = 0xffff - partial;
        b[8..10].copy_from_slice(&w.to_be_bytes());
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        repr.emit(&mut p, src, dst, 2, true);
        assert_eq!(p.checksum(), 0xffff);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(src, dst));
        assert_eq!(UdpRepr::parse(&p, src, dst, true), Ok(repr));
    }

    #[test]
    fn ipv6_pseudo_header_and_zero_checksum() {
        let src: Ipv6Addr = "fd00::1".parse().unwrap();
        let dst: Ipv6Addr = "fd00::2".parse().unwrap();
        let repr = UdpRepr {
            src_port: 5353,
            dst_port: 53,
        };
        let mut b = [0u8; 12];
        b[8..].copy_from_slice(b"abcd");
        repr.emit(&mut UdpPacket::new_unchecked(&mut b[..]), src, dst, 4, true);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(src, dst));
        assert_eq!(UdpRepr::parse(&p, src, dst, true), Ok(repr));
        // The same bytes under another address, or as IPv4, do not verify.
        assert!(!p.verify_checksum(dst, "fd00::3".parse::<Ipv6Addr>().unwrap()));
        assert!(!p.verify_checksum(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)));
        // A zero checksum means "none" over IPv4 but is invalid over IPv6.
        b[6] = 0;
        b[7] = 0;
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(!p.verify_checksum(src, dst));
        assert_eq!(UdpRepr::parse(&p, src, dst, true), Err(Error::Checksum));
        assert!(p.verify_checksum(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)));
    }
}
