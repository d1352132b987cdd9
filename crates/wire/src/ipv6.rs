//! IPv6 (RFC 8200) fixed header and prefixes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! |                    Source Address (128 bits)                  |
//! |                 Destination Address (128 bits)                |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Extension headers and the walk over a header chain are in
//! [`crate::ipv6ext`].

use core::fmt;
use core::str::FromStr;
use std::net::Ipv6Addr;

use crate::ip::IpProtocol;
use crate::{Error, Result};

/// Length of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// RFC 8200 5: "IPv6 requires that every link in the Internet have an MTU of
/// 1280 octets or greater."
pub const IPV6_MIN_MTU: usize = 1280;

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// A zero-copy view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wrap `buffer`, checking that it holds the fixed header and the
    /// payload length says. The buffer may be longer (link-layer padding);
    /// [`payload`](Self::payload) excludes the excess.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// RFC 8200 3: "Payload Length: Length of the IPv6 payload, i.e., the
    /// rest of the packet following this IPv6 header, in octets." A zero
    /// length with a Hop-by-Hop header would be a jumbogram (RFC 2675), which
    /// is not supported: it reads as an empty payload.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < IPV6_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if len < IPV6_HEADER_LEN + usize::from(self.payload_len()) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn first_word(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    pub fn version(&self) -> u8 {
        (self.first_word() >> 28) as u8
    }

    /// The Traffic Class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// The 20-bit Flow Label (RFC 6437).
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The Next Header of the fixed header (an extension header or the
    /// upper-layer protocol).
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::NXT_HDR])
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), field::SRC.start)
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), field::DST.start)
    }

    /// The payload (extension headers included), up to the payload length.
    pub fn payload(&self) -> &[u8] {
        let end = IPV6_HEADER_LEN + usize::from(self.payload_len());
        &self.buffer.as_ref()[IPV6_HEADER_LEN..end]
    }
}

/// The 16 bytes at `at` as an address (callers check the bounds).
pub(crate) fn addr_at(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// The payload with the lifetime of the underlying buffer.
    pub fn payload_ref(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        &b[IPV6_HEADER_LEN..IPV6_HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn set_first_word(&mut self, v: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_version(&mut self, v: u8) {
        let w = self.first_word();
        self.set_first_word((w & 0x0fff_ffff) | (u32::from(v & 0x0f) << 28));
    }

    pub fn set_traffic_class(&mut self, v: u8) {
        let w = self.first_word();
        self.set_first_word((w & 0xf00f_ffff) | (u32::from(v) << 20));
    }

    /// Set the flow label (the low 20 bits of `v`).
    pub fn set_flow_label(&mut self, v: u32) {
        let w = self.first_word();
        self.set_first_word((w & 0xfff0_0000) | (v & 0x000f_ffff));
    }

    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = p.into();
    }

    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = IPV6_HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[IPV6_HEADER_LEN..end]
    }
}

/// The decoded fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    /// The Next Header of the fixed header (may be an extension header).
    pub next_header: IpProtocol,
    /// Bytes after the fixed header (extension headers included).
    pub payload_len: usize,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// 20 bits.
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Decode the fixed header of a packet created with `new_checked`.
    /// Version other than 6: `Malformed`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv6Packet<&T>) -> Result<Ipv6Repr> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(Self::from_header(packet, usize::from(packet.payload_len())))
    }

    /// Decode the IPv6 header quoted in an ICMPv6 error (RFC 4443 2.4: "as
    /// much of invoking packet as possible without the ICMPv6 packet
    /// exceeding the minimum IPv6 MTU"): the quote is usually cut, so the
    /// payload length is trusted for `payload_len` but not checked against
    /// the bytes present. Returns the repr and the quoted payload bytes (at
    /// most `payload_len`).
    pub fn parse_quoted(bytes: &[u8]) -> Result<(Ipv6Repr, &[u8])> {
        if bytes.len() < IPV6_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let p = Ipv6Packet::new_unchecked(bytes);
        if p.version() != 6 {
            return Err(Error::Malformed);
        }
        let payload_len = usize::from(p.payload_len());
        let rest = &bytes[IPV6_HEADER_LEN..];
        let data = rest.get(..payload_len).unwrap_or(rest);
        Ok((Self::from_header(&p, payload_len), data))
    }

    fn from_header<T: AsRef<[u8]> + ?Sized>(p: &Ipv6Packet<&T>, payload_len: usize) -> Ipv6Repr {
        Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            payload_len,
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        }
    }

    /// Always [`IPV6_HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        IPV6_HEADER_LEN
    }

    /// Header plus payload.
    pub const fn buffer_len(&self) -> usize {
        IPV6_HEADER_LEN + self.payload_len
    }

    /// Write the fixed header. `payload_len` must be at most 65535 (checked
    /// in debug builds; the field saturates otherwise). Panics if the buffer
    /// is shorter than 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) {
        debug_assert!(self.payload_len <= usize::from(u16::MAX));
        packet.set_first_word(0x6000_0000);
        packet.set_traffic_class(self.traffic_class);
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(u16::try_from(self.payload_len).unwrap_or(u16::MAX));
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
    }
}

impl fmt::Display for Ipv6Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPv6 {} > {} {} len {} hlim {}",
            self.src, self.dst, self.next_header, self.payload_len, self.hop_limit
        )?;
        if self.traffic_class != 0 {
            write!(f, " class 0x{:02x}", self.traffic_class)?;
        }
        if self.flow_label != 0 {
            write!(f, " flow 0x{:05x}", self.flow_label)?;
        }
        Ok(())
    }
}

/// The solicited-node multicast address of `addr` (RFC 4291 2.7.1:
/// `ff02::1:ff00:0/104` plus the low 24 bits).
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// An IPv6 address with a prefix length, e.g. `fd00::1/64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Cidr {
    pub address: Ipv6Addr,
    /// 0..=128 (methods treat a larger value as 128).
    pub prefix_len: u8,
}

impl Ipv6Cidr {
    /// `Err(Malformed)` when `prefix_len > 128`.
    pub const fn new(address: Ipv6Addr, prefix_len: u8) -> Result<Ipv6Cidr> {
        if prefix_len > 128 {
            return Err(Error::Malformed);
        }
        Ok(Ipv6Cidr {
            address,
            prefix_len,
        })
    }

    fn mask_bits(&self) -> u128 {
        match self.prefix_len {
            0 => 0,
            p if p >= 128 => u128::MAX,
            p => u128::MAX << (128 - u32::from(p)),
        }
    }

    /// The prefix with host bits cleared.
    pub fn network(&self) -> Ipv6Cidr {
        Ipv6Cidr {
            address: Ipv6Addr::from(u128::from(self.address) & self.mask_bits()),
            prefix_len: self.prefix_len.min(128),
        }
    }

    /// True when `addr` is inside the prefix.
    pub fn contains(&self, addr: Ipv6Addr) -> bool {
        let m = self.mask_bits();
        u128::from(addr) & m == u128::from(self.address) & m
    }
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl FromStr for Ipv6Cidr {
    type Err = Error;

    /// Parses `addr/len`; a bare address means /128.
    fn from_str(s: &str) -> Result<Ipv6Cidr> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let address: Ipv6Addr = a.parse().map_err(|_| Error::Malformed)?;
        let prefix_len = match p {
            Some(p)
                if !p.is_empty()
                    && p.len() <= 3
                    && p.bytes().all(|c| c.is_ascii_digit())
                    && (p.len() == 1 || !p.starts_with('0')) =>
            {
                p.parse::<u8>().map_err(|_| Error::Malformed)?
            }
            Some(_) => return Err(Error::Malformed),
            None => 128,
        };
        Ipv6Cidr::new(address, prefix_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fd00::1 -> fd00::2, ICMPv6 (echo request, 64 bytes), from Linux
    /// `ping -6` (tests/data/icmpv6_echo_request.bin, bytes 14..54).
    const HDR: [u8; 40] = [
        0x60, 0x06, 0xd7, 0x35, 0x00, 0x40, 0x3a, 0x40, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 1, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
    ];

    #[test]
    fn header_fields_and_lengths() {
        let mut b = [0u8; 104];
        b[..40].copy_from_slice(&HDR);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0);
        assert_eq!(p.flow_label(), 0x6d735);
        assert_eq!(p.payload_len(), 64);
        assert_eq!(p.next_header(), IpProtocol::ICMPV6);
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.src, "fd00::1".parse::<Ipv6Addr>().unwrap());
        let mut out = [0u8; 40];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, HDR);
        assert_eq!(
            Ipv6Packet::new_checked(&b[..103]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv6Packet::new_checked(&b[..39]).err(),
            Some(Error::Truncated)
        );
        b[0] = 0x40;
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p), Err(Error::Malformed));
        assert_eq!(Ipv6Repr::parse_quoted(&b), Err(Error::Malformed));
    }

    #[test]
    fn quoted_header_may_be_cut() {
        let mut b = [0u8; 48];
        b[..40].copy_from_slice(&HDR);
        let (r, data) = Ipv6Repr::parse_quoted(&b).unwrap();
        assert_eq!(r.payload_len, 64);
        assert_eq!(data.len(), 8);
        assert_eq!(Ipv6Repr::parse_quoted(&b[..39]), Err(Error::Truncated));
    }

    #[test]
    fn setters() {
        let mut b = HDR;
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_traffic_class(0xb9);
        p.set_flow_label(0xfff12345);
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb9);
        assert_eq!(p.ecn(), 1);
        assert_eq!(p.flow_label(), 0x12345);
        p.set_version(6);
        assert_eq!(p.traffic_class(), 0xb9);
    }

    #[test]
    fn cidr_and_solicited_node() {
        let c: Ipv6Cidr = "fd00::1:2/64".parse().unwrap();
        assert!(c.contains("fd00::ffff".parse().unwrap()));
        assert!(!c.contains("fd01::1".parse().unwrap()));
        assert_eq!(c.network().to_string(), "fd00::/64");
        for bad in [
            "fd00::1/129",
            "fd00::1/",
            "fd00::1/064",
            "x/3",
            "fd00::1/+1",
        ] {
            assert_eq!(bad.parse::<Ipv6Cidr>(), Err(Error::Malformed), "{bad}");
        }
        assert_eq!("::/0".parse::<Ipv6Cidr>().unwrap().prefix_len, 0);
        assert_eq!(
            solicited_node("fe80::ff:fe00:1".parse().unwrap()),
            "ff02::1:ff00:1".parse::<Ipv6Addr>().unwrap()
        );
    }
}
