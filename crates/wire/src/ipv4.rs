//! IPv4 (RFC 791) headers and CIDR prefixes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |Type of Service|          Total Length         |
//! |         Identification        |Flags|      Fragment Offset    |
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! |                    Options                    |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Options are skipped (never interpreted) on receive and never emitted.

use core::fmt;
use core::str::FromStr;
use std::net::Ipv4Addr;

use crate::checksum;
use crate::ip::IpProtocol;
use crate::{Error, Result};

/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Largest header (IHL = 15).
pub const IPV4_MAX_HEADER_LEN: usize = 60;
/// Largest datagram (the Total Length field is 16 bits).
pub const IPV4_MAX_PACKET_LEN: usize = 65535;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

const FLAG_RESERVED: u16 = 0x8000;
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A zero-copy view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wrap `buffer`, checking the header length and total length against
    /// each other and against the buffer. The buffer may be longer than the
    /// total length (Ethernet padding); [`payload`](Self::payload) excludes
    /// the excess.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// RFC 791: "Internet Header Length is the length of the internet header
    /// in 32 bit words ... Note that the minimum value for a correct header
    /// is 5." and "Total Length is the length of the datagram, measured in
    /// octets, including internet header and data."
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < IPV4_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < IPV4_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < hl {
            return Err(Error::Truncated);
        }
        let tl = usize::from(self.total_len());
        if tl < hl {
            return Err(Error::Malformed);
        }
        if len < tl {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL * 4), options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The whole former TOS byte (DSCP << 2 | ECN).
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    pub fn dscp(&self) -> u8 {
        self.dscp_ecn() >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.dscp_ecn() & 0x03
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn total_len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    pub fn ident(&self) -> u16 {
        self.u16_at(field::IDENT)
    }

    /// The reserved flag bit (RFC 791: "Bit 0: reserved, must be zero").
    pub fn reserved_flag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_RESERVED != 0
    }

    pub fn dont_frag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_MF != 0
    }

    /// The fragment offset in bytes (the field counts 8-octet units).
    pub fn frag_offset(&self) -> u16 {
        (self.u16_at(field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// True for any fragment of a fragmented datagram (MF set or offset > 0).
    pub fn is_fragment(&self) -> bool {
        self.u16_at(field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The option bytes (between the fixed header and the payload).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV4_HEADER_LEN..self.header_len()]
    }

    /// RFC 791: "The checksum field is the 16 bit one's complement of the
    /// one's complement sum of all 16 bit words in the header."
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(0, &self.buffer.as_ref()[..self.header_len()])
    }

    /// The payload: from the end of the header (options skipped) to the
    /// total length, so trailing link-layer padding is excluded.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The payload with the lifetime of the underlying buffer.
    pub fn payload_ref(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        &b[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Set IHL from a length in bytes (must be a multiple of 4, <= 60).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    pub fn set_total_len(&mut self, v: u16) {
        self.set_u16_at(field::LENGTH, v);
    }

    pub fn set_ident(&mut self, v: u16) {
        self.set_u16_at(field::IDENT, v);
    }

    fn set_flag(&mut self, flag: u16, on: bool) {
        let old = self.u16_at(field::FLG_OFF);
        let new = if on { old | flag } else { old & !flag };
        self.set_u16_at(field::FLG_OFF, new);
    }

    /// Clear the three flag bits and the fragment offset.
    pub fn clear_flags(&mut self) {
        self.set_u16_at(field::FLG_OFF, 0);
    }

    pub fn set_dont_frag(&mut self, on: bool) {
        self.set_flag(FLAG_DF, on);
    }

    pub fn set_more_frags(&mut self, on: bool) {
        self.set_flag(FLAG_MF, on);
    }

    /// Set the fragment offset from a byte offset (a multiple of 8).
    pub fn set_frag_offset(&mut self, bytes: u16) {
        let old = self.u16_at(field::FLG_OFF);
        self.set_u16_at(
            field::FLG_OFF,
            (old & !OFFSET_MASK) | ((bytes >> 3) & OFFSET_MASK),
        );
    }

    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    pub fn set_protocol(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = p.into();
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v);
    }

    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// RFC 791: "For purposes of computing the checksum, the value of the
    /// checksum field is zero."
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// Decrement the TTL and patch the checksum incrementally (RFC 1624),
    /// as a forwarder does.
    pub fn decrement_ttl(&mut self) {
        let ttl = self.ttl();
        let proto = self.buffer.as_ref()[field::PROTOCOL];
        let old = u16::from_be_bytes([ttl, proto]);
        let new = u16::from_be_bytes([ttl.wrapping_sub(1), proto]);
        let c = checksum::update(self.checksum(), old, new);
        self.set_ttl(ttl.wrapping_sub(1));
        self.set_checksum(c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..tl]
    }
}

/// Check the options area of an IPv4 header, as Linux's
/// `ip_options_compile` does before it accepts a datagram (a failure there
/// is counted in `InHdrErrors` and the datagram dropped). RFC 791 3.1: an
/// option is "a single octet of option-type" (End of Option List, 0, after
/// which the rest is padding; No Operation, 1) or "an option-type octet, an
/// option-length octet, and the actual option-data octets", the length
/// counting all three. So a length below 2 or running past the header is
/// malformed; so is a Record Route or source route without room for its
/// pointer or with a pointer below 4 ("the smallest legal value is 4"), and
/// a Timestamp shorter than 4 octets or with a pointer below 5.
pub fn check_options(opts: &[u8]) -> Result<()> {
    let mut i = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            0 => return Ok(()),
            1 => i += 1,
            _ => {
                let len = usize::from(*opts.get(i + 1).ok_or(Error::Malformed)?);
                if len < 2 || len > opts.len() - i {
                    return Err(Error::Malformed);
                }
                let ptr = opts.get(i + 2).copied().unwrap_or(0);
                let bad = match kind {
                    // Record Route, Loose and Strict Source Route.
                    0x07 | 0x83 | 0x89 => len < 3 || ptr < 4,
                    // Internet Timestamp.
                    0x44 => len < 4 || ptr < 5,
                    _ => false,
                };
                if bad {
                    return Err(Error::Malformed);
                }
                i += len;
            }
        }
    }
    Ok(())
}

/// The decoded IPv4 header (options dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: IpProtocol,
    /// Bytes after the header (this fragment's).
    pub payload_len: usize,
    pub ttl: u8,
    pub dscp_ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// In bytes (a multiple of 8).
    pub frag_offset: u16,
}

impl Ipv4Repr {
    /// Decode the header of a packet created with `new_checked`.
    ///
    /// Rejects: version != 4 (`Malformed`), a bad checksum when asked to
    /// verify (`Checksum`), and a fragment reaching beyond 65535 bytes
    /// (`Malformed`; RFC 791 limits a datagram to 65535 octets, the classic
    /// "ping of death" violates it), and malformed options (`Malformed`, see
    /// [`check_options`]). Well-formed options are skipped.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Ipv4Packet<&T>,
        verify_checksum: bool,
    ) -> Result<Ipv4Repr> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Malformed);
        }
        if verify_checksum && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        let payload_len = usize::from(packet.total_len()) - packet.header_len();
        if usize::from(packet.frag_offset()) + payload_len > IPV4_MAX_PACKET_LEN {
            return Err(Error::Malformed);
        }
        check_options(packet.options())?;
        Ok(Self::from_header(packet, payload_len))
    }

    /// Decode the IPv4 header quoted inside an ICMP error (RFC 792: "the
    /// internet header plus the first 64 bits of the original datagram's
    /// data"). The quote is usually truncated, so the total length is
    /// trusted for `payload_len` (what the original datagram carried) but not
    /// checked against the bytes present, and the checksum is not verified
    /// (routers and NATs along the path may have rewritten fields). Returns
    /// the repr and the leading payload bytes that were quoted (at most the
    /// original payload length).
    pub fn parse_quoted(bytes: &[u8]) -> Result<(Ipv4Repr, &[u8])> {
        let p = Ipv4Packet::new_unchecked(bytes);
        if bytes.len() < IPV4_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.version() != 4 {
            return Err(Error::Malformed);
        }
        let hl = p.header_len();
        if hl < IPV4_HEADER_LEN {
            return Err(Error::Malformed);
        }
        let rest = bytes.get(hl..).ok_or(Error::Truncated)?;
        let payload_len = usize::from(p.total_len())
            .checked_sub(hl)
            .ok_or(Error::Malformed)?;
        let data = rest.get(..payload_len).unwrap_or(rest);
        Ok((Self::from_header(&p, payload_len), data))
    }

    fn from_header<T: AsRef<[u8]> + ?Sized>(p: &Ipv4Packet<&T>, payload_len: usize) -> Ipv4Repr {
        Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            payload_len,
            ttl: p.ttl(),
            dscp_ecn: p.dscp_ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
        }
    }

    /// Always [`IPV4_HEADER_LEN`]: options are never emitted.
    pub const fn header_len(&self) -> usize {
        IPV4_HEADER_LEN
    }

    /// Header plus payload.
    pub const fn buffer_len(&self) -> usize {
        IPV4_HEADER_LEN + self.payload_len
    }

    /// Write a 20-byte header with total length `20 + payload_len`.
    ///
    /// `payload_len` must be at most 65515 (checked in debug builds; the
    /// length field saturates otherwise). Panics if the buffer is shorter
    /// than the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Ipv4Packet<T>,
        fill_checksum: bool,
    ) {
        debug_assert!(self.buffer_len() <= IPV4_MAX_PACKET_LEN);
        packet.set_version(4);
        packet.set_header_len(IPV4_HEADER_LEN);
        packet.set_dscp_ecn(self.dscp_ecn);
        packet.set_total_len(u16::try_from(self.buffer_len()).unwrap_or(u16::MAX));
        packet.set_ident(self.ident);
        packet.clear_flags();
        packet.set_dont_frag(self.dont_frag);
        packet.set_more_frags(self.more_frags);
        packet.set_frag_offset(self.frag_offset);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
        if fill_checksum {
            packet.fill_checksum();
        } else {
            packet.set_checksum(0);
        }
    }
}

impl fmt::Display for Ipv4Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPv4 {} > {} {} len {} ttl {} id {}",
            self.src, self.dst, self.protocol, self.payload_len, self.ttl, self.ident
        )?;
        if self.dont_frag {
            f.write_str(" DF")?;
        }
        if self.more_frags || self.frag_offset != 0 {
            write!(f, " frag off {}", self.frag_offset)?;
            if self.more_frags {
                f.write_str(" MF")?;
            }
        }
        if self.dscp_ecn != 0 {
            write!(f, " tos 0x{:02x}", self.dscp_ecn)?;
        }
        Ok(())
    }
}

/// An IPv4 address with a prefix length, e.g. `10.0.0.1/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    pub address: Ipv4Addr,
    /// 0..=32 (methods treat a larger value as 32).
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// `Err(Malformed)` when `prefix_len > 32`.
    pub const fn new(address: Ipv4Addr, prefix_len: u8) -> Result<Ipv4Cidr> {
        if prefix_len > 32 {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Cidr {
            address,
            prefix_len,
        })
    }

    pub const fn address(&self) -> Ipv4Addr {
        self.address
    }

    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    fn mask_bits(&self) -> u32 {
        match self.prefix_len {
            0 => 0,
            p if p >= 32 => u32::MAX,
            p => u32::MAX << (32 - u32::from(p)),
        }
    }

    /// e.g. 255.255.255.0 for /24.
    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.mask_bits())
    }

    /// The prefix with host bits cleared (e.g. 10.0.0.0/24 for 10.0.0.1/24).
    pub fn network(&self) -> Ipv4Cidr {
        Ipv4Cidr {
            address: Ipv4Addr::from(u32::from(self.address) & self.mask_bits()),
            prefix_len: self.prefix_len.min(32),
        }
    }

    /// The directed broadcast address (all host bits set), or `None` for
    /// /31 and /32, which have none (RFC 3021: "the use of 31-bit prefixes
    /// ... the all-ones and all-zeros host addresses" are used as hosts).
    pub fn broadcast(&self) -> Option<Ipv4Addr> {
        if self.prefix_len >= 31 {
            return None;
        }
        Some(Ipv4Addr::from(u32::from(self.address) | !self.mask_bits()))
    }

    /// True when `addr` is inside the prefix.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        let m = self.mask_bits();
        u32::from(addr) & m == u32::from(self.address) & m
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = Error;

    /// Parses `a.b.c.d/len`; a bare address means /32.
    fn from_str(s: &str) -> Result<Ipv4Cidr> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let address: Ipv4Addr = a.parse().map_err(|_| Error::Malformed)?;
        let prefix_len = match p {
            Some(p) if !p.is_empty() && p.len() <= 2 && p.bytes().all(|c| c.is_ascii_digit()) => {
                p.parse::<u8>().map_err(|_| Error::Malformed)?
            }
            Some(_) => return Err(Error::Malformed),
            None => 32,
        };
        Ipv4Cidr::new(address, prefix_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> [u8; 20] {
        // 10.0.0.1 -> 10.0.0.2 ICMP, total length 84, from Linux `ping`.
        [
            0x45, 0x00, 0x00, 0x54, 0xbd, 0x84, 0x40, 0x00, 0x40, 0x01, 0x69, 0x22, 0x0a, 0x00,
            0x00, 0x01, 0x0a, 0x00, 0x00, 0x02,
        ]
    }

    #[test]
    fn length_validation() {
        let mut b = [0u8; 84];
        b[..20].copy_from_slice(&header());
        assert!(Ipv4Packet::new_checked(&b[..]).is_ok());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..83]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv4Packet::new_checked(&b[..19]).err(),
            Some(Error::Truncated)
        );
        let mut bad = b;
        bad[0] = 0x44; // IHL 4
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).err(),
            Some(Error::Malformed)
        );
        let mut bad = b;
        bad[2] = 0;
        bad[3] = 19; // total length < header length
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).err(),
            Some(Error::Malformed)
        );
        let mut bad = b;
        bad[0] = 0x4f; // IHL 15 = 60 bytes, buffer has 84 but total length 84 ok
        assert!(Ipv4Packet::new_checked(&bad[..]).is_ok());
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..59]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn version_and_checksum() {
        let mut b = [0u8; 84];
        b[..20].copy_from_slice(&header());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert!(Ipv4Repr::parse(&p, true).is_ok());
        b[8] = 0x3f;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p, true), Err(Error::Checksum));
        assert!(Ipv4Repr::parse(&p, false).is_ok());
        b[0] = 0x65;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p, false), Err(Error::Malformed));
    }

    #[test]
    fn ping_of_death_rejected() {
        // Last fragment at offset 65528 carrying 8 bytes ends at 65536.
        let mut b = [0u8; 28];
        b[..20].copy_from_slice(&header());
        b[2..4].copy_from_slice(&28u16.to_be_bytes());
        b[6..8].copy_from_slice(&(65528u16 >> 3).to_be_bytes());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.frag_offset(), 65528);
        assert_eq!(Ipv4Repr::parse(&p, false), Err(Error::Malformed));
        // 7 bytes there are fine (ends at 65535).
        b[2..4].copy_from_slice(&27u16.to_be_bytes());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(Ipv4Repr::parse(&p, false).is_ok());
    }

    #[test]
    fn malformed_options_are_refused() {
        // Well-formed: nothing, NOPs, EOL then padding, Record Route with
        // pointer 4, Timestamp with pointer 5, Router Alert, an unknown one.
        for ok in [
            &[][..],
            &[1, 1, 1, 1],
            &[0, 0xff, 0xff, 0xff],
            &[7, 7, 4, 0, 0, 0, 0, 0],
            &[0x44, 4, 5, 0],
            &[0x94, 4, 0, 0],
            &[0x9e, 2, 1, 0],
        ] {
            assert_eq!(check_options(ok), Ok(()), "{ok:?}");
        }
        for bad in [
            &[7][..],                     // no length octet
            &[7, 0, 4, 0],                // length 0
            &[0x94, 1, 0, 0],             // length 1
            &[7, 0x27, 4, 0],             // length past the header
            &[1, 1, 0x83, 3, 3, 0],       // source route pointer below 4
            &[0x89, 2, 0, 0],             // source route without a pointer
            &[0x44, 3, 5, 0],             // timestamp shorter than 4
            &[0x44, 8, 4, 0, 0, 0, 0, 0], // timestamp pointer below 5
        ] {
            assert_eq!(check_options(bad), Err(Error::Malformed), "{bad:?}");
        }
        // Through `Ipv4Repr::parse`: a 24-byte header with a zero-length option.
        let mut b = [0u8; 24];
        b[0] = 0x46;
        b[3] = 24;
        b[8] = 64;
        b[9] = 17;
        b[20..24].copy_from_slice(&[0x44, 0, 0, 0]);
        let c = crate::checksum::checksum(&b);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p, true), Err(Error::Malformed));
        b[20..24].copy_from_slice(&[0x44, 4, 5, 0]);
        b[10..12].fill(0);
        let c = crate::checksum::checksum(&b);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(Ipv4Repr::parse(&p, true).is_ok());
    }

    #[test]
    fn quoted_header_with_options_and_short_quote() {
        // IHL 6 (4 option bytes), total length 24 + 100, only 8 payload bytes quoted.
        let mut b = [0u8; 32];
        b[..20].copy_from_slice(&header());
        b[0] = 0x46;
        b[2..4].copy_from_slice(&124u16.to_be_bytes());
        b[20..24].copy_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
        b[24..32].copy_from_slice(&[9, 8, 7, 6, 5, 4, 3, 2]);
        let (r, data) = Ipv4Repr::parse_quoted(&b).unwrap();
        assert_eq!(r.payload_len, 100);
        assert_eq!(data, &[9, 8, 7, 6, 5, 4, 3, 2]);
        // More quoted than the original carried: cut at its payload length.
        b[2..4].copy_from_slice(&28u16.to_be_bytes());
        assert_eq!(Ipv4Repr::parse_quoted(&b).unwrap().1, &[9, 8, 7, 6]);
        // Total length below the header length, bad version, cut header.
        b[2..4].copy_from_slice(&23u16.to_be_bytes());
        assert_eq!(Ipv4Repr::parse_quoted(&b), Err(Error::Malformed));
        b[2..4].copy_from_slice(&124u16.to_be_bytes());
        assert_eq!(Ipv4Repr::parse_quoted(&b[..23]), Err(Error::Truncated));
        assert_eq!(Ipv4Repr::parse_quoted(&b[..19]), Err(Error::Truncated));
        b[0] = 0x66;
        assert_eq!(Ipv4Repr::parse_quoted(&b), Err(Error::Malformed));
    }

    #[test]
    fn decrement_ttl_keeps_checksum_valid() {
        let mut b = header();
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.decrement_ttl();
        assert_eq!(p.ttl(), 0x3f);
        assert!(p.verify_checksum());
    }

    #[test]
    fn flags_setters() {
        let mut b = header();
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.clear_flags();
        p.set_more_frags(true);
        p.set_frag_offset(1480);
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!(p.frag_offset(), 1480);
        p.set_dont_frag(true);
        p.set_more_frags(false);
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 1480);
        p.set_frag_offset(0);
        assert!(!p.is_fragment());
    }

    #[test]
    fn cidr() {
        let c: Ipv4Cidr = "10.0.0.77/24".parse().unwrap();
        assert_eq!(c.netmask(), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(
            c.network(),
            Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 0), 24).unwrap()
        );
        assert_eq!(c.broadcast(), Some(Ipv4Addr::new(10, 0, 0, 255)));
        assert!(c.contains(Ipv4Addr::new(10, 0, 0, 1)));
        assert!(!c.contains(Ipv4Addr::new(10, 0, 1, 1)));
        assert_eq!(c.to_string(), "10.0.0.77/24");
        let all = Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0).unwrap();
        assert!(all.contains(Ipv4Addr::new(8, 8, 8, 8)));
        assert_eq!(all.netmask(), Ipv4Addr::UNSPECIFIED);
        assert_eq!(all.broadcast(), Some(Ipv4Addr::BROADCAST));
        let host: Ipv4Cidr = "192.168.1.9".parse().unwrap();
        assert_eq!(host.prefix_len, 32);
        assert!(host.contains(Ipv4Addr::new(192, 168, 1, 9)));
        assert!(!host.contains(Ipv4Addr::new(192, 168, 1, 8)));
        assert_eq!(host.broadcast(), None);
        let p2p: Ipv4Cidr = "10.1.1.0/31".parse().unwrap();
        assert_eq!(p2p.broadcast(), None);
        assert!(p2p.contains(Ipv4Addr::new(10, 1, 1, 1)));
        assert_eq!(
            Ipv4Cidr::new(Ipv4Addr::LOCALHOST, 33),
            Err(Error::Malformed)
        );
        for bad in [
            "10.0.0.1/33",
            "10.0.0.1/",
            "10.0.0.1/+4",
            "10.0.0/24",
            "x/1",
            "10.0.0.1/024",
        ] {
            assert_eq!(bad.parse::<Ipv4Cidr>(), Err(Error::Malformed), "{bad}");
        }
        // Out-of-range public field: methods behave as /32, no panic.
        let odd = Ipv4Cidr {
            address: Ipv4Addr::new(1, 2, 3, 4),
            prefix_len: 200,
        };
        assert_eq!(odd.netmask(), Ipv4Addr::BROADCAST);
        assert!(odd.contains(Ipv4Addr::new(1, 2, 3, 4)));
    }
}
