//! ICMP for IPv4 (RFC 792, RFC 1191 for "fragmentation needed" MTU, RFC 4884
//! for the length attribute of extended error messages).
//!
//! ```text
//!  0               1               2               3
//! +---------------+---------------+-------------------------------+
//! |     Type      |     Code      |           Checksum            |
//! +---------------+---------------+-------------------------------+
//! |  echo: Identifier / Sequence; unreachable: unused / len / MTU |
//! +---------------------------------------------------------------+
//! |  echo: data; errors: IP header + leading data of the original |
//! +---------------------------------------------------------------+
//! ```

use core::fmt;

use crate::checksum;
use crate::ipv4::{Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use crate::{Error, Result};

/// Length of the fixed ICMP header (type, code, checksum, 4 more bytes).
pub const ICMPV4_HEADER_LEN: usize = 8;

/// The ICMP message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Message {
    EchoReply,
    DstUnreachable,
    Redirect,
    EchoRequest,
    TimeExceeded,
    ParamProblem,
    Timestamp,
    TimestampReply,
    Unknown(u8),
}

impl From<u8> for Icmpv4Message {
    fn from(v: u8) -> Self {
        match v {
            0 => Icmpv4Message::EchoReply,
            3 => Icmpv4Message::DstUnreachable,
            5 => Icmpv4Message::Redirect,
            8 => Icmpv4Message::EchoRequest,
            11 => Icmpv4Message::TimeExceeded,
            12 => Icmpv4Message::ParamProblem,
            13 => Icmpv4Message::Timestamp,
            14 => Icmpv4Message::TimestampReply,
            other => Icmpv4Message::Unknown(other),
        }
    }
}

impl From<Icmpv4Message> for u8 {
    fn from(v: Icmpv4Message) -> Self {
        match v {
            Icmpv4Message::EchoReply => 0,
            Icmpv4Message::DstUnreachable => 3,
            Icmpv4Message::Redirect => 5,
            Icmpv4Message::EchoRequest => 8,
            Icmpv4Message::TimeExceeded => 11,
            Icmpv4Message::ParamProblem => 12,
            Icmpv4Message::Timestamp => 13,
            Icmpv4Message::TimestampReply => 14,
            Icmpv4Message::Unknown(other) => other,
        }
    }
}

/// Codes of Destination Unreachable (RFC 792, RFC 1122 3.2.2.1, RFC 1812 5.2.7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DstUnreachable {
    NetUnreachable,
    HostUnreachable,
    ProtoUnreachable,
    PortUnreachable,
    /// "fragmentation needed and DF set" (code 4); carries the next-hop MTU (RFC 1191).
    FragRequired,
    /// Code 9: communication with destination network administratively prohibited.
    NetProhibited,
    /// Code 10: communication with destination host administratively prohibited.
    HostProhibited,
    /// Code 13: communication administratively prohibited (RFC 1812).
    AdminProhibited,
    Other(u8),
}

impl From<u8> for DstUnreachable {
    fn from(v: u8) -> Self {
        match v {
            0 => DstUnreachable::NetUnreachable,
            1 => DstUnreachable::HostUnreachable,
            2 => DstUnreachable::ProtoUnreachable,
            3 => DstUnreachable::PortUnreachable,
            4 => DstUnreachable::FragRequired,
            9 => DstUnreachable::NetProhibited,
            10 => DstUnreachable::HostProhibited,
            13 => DstUnreachable::AdminProhibited,
            other => DstUnreachable::Other(other),
        }
    }
}

impl From<DstUnreachable> for u8 {
    fn from(v: DstUnreachable) -> Self {
        match v {
            DstUnreachable::NetUnreachable => 0,
            DstUnreachable::HostUnreachable => 1,
            DstUnreachable::ProtoUnreachable => 2,
            DstUnreachable::PortUnreachable => 3,
            DstUnreachable::FragRequired => 4,
            DstUnreachable::NetProhibited => 9,
            DstUnreachable::HostProhibited => 10,
            DstUnreachable::AdminProhibited => 13,
            DstUnreachable::Other(other) => other,
        }
    }
}

impl fmt::Display for DstUnreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DstUnreachable::NetUnreachable => f.write_str("net unreachable"),
            DstUnreachable::HostUnreachable => f.write_str("host unreachable"),
            DstUnreachable::ProtoUnreachable => f.write_str("protocol unreachable"),
            DstUnreachable::PortUnreachable => f.write_str("port unreachable"),
            DstUnreachable::FragRequired => f.write_str("fragmentation needed"),
            DstUnreachable::NetProhibited => f.write_str("net prohibited"),
            DstUnreachable::HostProhibited => f.write_str("host prohibited"),
            DstUnreachable::AdminProhibited => f.write_str("administratively prohibited"),
            DstUnreachable::Other(c) => write!(f, "unreachable code {c}"),
        }
    }
}

/// Codes of Time Exceeded (RFC 792).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeExceeded {
    /// Code 0: "time to live exceeded in transit".
    TtlExpired,
    /// Code 1: "fragment reassembly time exceeded".
    FragExpired,
}

impl From<TimeExceeded> for u8 {
    fn from(v: TimeExceeded) -> Self {
        match v {
            TimeExceeded::TtlExpired => 0,
            TimeExceeded::FragExpired => 1,
        }
    }
}

impl fmt::Display for TimeExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeExceeded::TtlExpired => f.write_str("ttl exceeded in transit"),
            TimeExceeded::FragExpired => f.write_str("fragment reassembly time exceeded"),
        }
    }
}

mod field {
    use core::ops::{Range, RangeFrom};
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    pub const UNUSED: Range<usize> = 4..8;
    /// RFC 4884: the length of the original datagram in 32-bit words.
    pub const EXT_LENGTH: usize = 5;
    pub const MTU: Range<usize> = 6..8;
    pub const DATA: RangeFrom<usize> = 8..;
}

/// A zero-copy view of an ICMPv4 message. The buffer is the IPv4 payload:
/// the checksum covers all of it.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }

    /// Wrap `buffer`, checking that it holds the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ICMPV4_HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message::from(self.buffer.as_ref()[field::TYPE])
    }

    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    pub fn echo_ident(&self) -> u16 {
        self.u16_at(field::ECHO_IDENT)
    }

    pub fn echo_seq_no(&self) -> u16 {
        self.u16_at(field::ECHO_SEQNO)
    }

    /// RFC 1191: "The Next-Hop MTU field contains the MTU of the next-hop
    /// network" (low 16 bits of the second word of "fragmentation needed").
    pub fn next_hop_mtu(&self) -> u16 {
        self.u16_at(field::MTU)
    }

    /// RFC 4884 length attribute: the length of the quoted original datagram
    /// in 32-bit words (0 = not given).
    pub fn ext_length(&self) -> u8 {
        self.buffer.as_ref()[field::EXT_LENGTH]
    }

    /// The second 32-bit word, raw.
    pub fn rest_of_header(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::UNUSED];
        [b[0], b[1], b[2], b[3]]
    }

    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// The checksum covers the whole message.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(0, self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_msg_type(&mut self, t: Icmpv4Message) {
        self.buffer.as_mut()[field::TYPE] = t.into();
    }

    pub fn set_msg_code(&mut self, c: u8) {
        self.buffer.as_mut()[field::CODE] = c;
    }

    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v);
    }

    pub fn set_echo_ident(&mut self, v: u16) {
        self.set_u16_at(field::ECHO_IDENT, v);
    }

    pub fn set_echo_seq_no(&mut self, v: u16) {
        self.set_u16_at(field::ECHO_SEQNO, v);
    }

    pub fn set_next_hop_mtu(&mut self, v: u16) {
        self.set_u16_at(field::MTU, v);
    }

    pub fn set_rest_of_header(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::UNUSED].copy_from_slice(&v);
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// RFC 792: "For computing the checksum, the checksum field should be zero."
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// A decoded ICMPv4 message of the kinds the stack handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    EchoRequest {
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    EchoReply {
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    DstUnreachable {
        reason: DstUnreachable,
        /// Meaningful for `FragRequired` (0 from pre-RFC 1191 routers).
        next_hop_mtu: u16,
        /// The quoted header of the offending datagram.
        header: Ipv4Repr,
        /// Its leading payload bytes (as many as were quoted).
        data: &'a [u8],
    },
    TimeExceeded {
        reason: TimeExceeded,
        header: Ipv4Repr,
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Decode a message. Echo messages accept any code (as Linux does);
    /// error messages need a quoted IPv4 header (`Truncated`/`Malformed`
    /// otherwise) whose own checksum is not verified, and whose payload may
    /// be truncated (see [`Ipv4Repr::parse_quoted`]). Other types, and Time
    /// Exceeded codes other than 0 and 1, give `Unsupported`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Icmpv4Packet<&'a T>,
        verify_checksum: bool,
    ) -> Result<Icmpv4Repr<'a>> {
        packet.check_len()?;
        if verify_checksum && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        let buf: &'a [u8] = packet.buffer.as_ref();
        let data: &'a [u8] = buf.get(field::DATA).ok_or(Error::Truncated)?;
        match packet.msg_type() {
            Icmpv4Message::EchoRequest => Ok(Icmpv4Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv4Message::EchoReply => Ok(Icmpv4Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv4Message::DstUnreachable => {
                let (header, data) = Self::parse_quote(packet, data)?;
                Ok(Icmpv4Repr::DstUnreachable {
                    reason: DstUnreachable::from(packet.msg_code()),
                    next_hop_mtu: packet.next_hop_mtu(),
                    header,
                    data,
                })
            }
            Icmpv4Message::TimeExceeded => {
                let reason = match packet.msg_code() {
                    0 => TimeExceeded::TtlExpired,
                    1 => TimeExceeded::FragExpired,
                    _ => return Err(Error::Unsupported),
                };
                let (header, data) = Self::parse_quote(packet, data)?;
                Ok(Icmpv4Repr::TimeExceeded {
                    reason,
                    header,
                    data,
                })
            }
            _ => Err(Error::Unsupported),
        }
    }

    /// RFC 4884 5.1: "the length attribute ... represents the length of the
    /// padded 'original datagram' field ... measured in 32-bit words", and
    /// when extensions are present that field "MUST contain at least 128
    /// octets". A plausible length (128 octets up to what arrived) ends the
    /// quote there (extensions follow); anything else is treated as a
    /// pre-RFC 4884 message whose quote is all the remaining bytes (Linux's
    /// `ip_icmp_error_rfc4884` applies the same bounds).
    fn parse_quote<T: AsRef<[u8]> + ?Sized>(
        packet: &Icmpv4Packet<&'a T>,
        data: &'a [u8],
    ) -> Result<(Ipv4Repr, &'a [u8])> {
        let ext = usize::from(packet.ext_length()) * 4;
        let quoted = match data.get(..ext) {
            Some(q) if ext >= 128 => q,
            _ => data,
        };
        Ipv4Repr::parse_quoted(quoted)
    }

    /// Length of the whole message as [`emit`](Self::emit) writes it.
    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv4Repr::EchoRequest { data, .. } | Icmpv4Repr::EchoReply { data, .. } => {
                ICMPV4_HEADER_LEN + data.len()
            }
            Icmpv4Repr::DstUnreachable { data, .. } | Icmpv4Repr::TimeExceeded { data, .. } => {
                ICMPV4_HEADER_LEN + IPV4_HEADER_LEN + data.len()
            }
        }
    }

    /// Write the message and fill its checksum. Error messages quote a
    /// 20-byte header (with a fresh checksum) and then `data` in full: the
    /// caller chooses how much to quote (RFC 792: 64 bits; RFC 1812 4.3.2.3:
    /// as much as fits in 576 bytes).
    /// The checksum covers the first `buffer_len()` bytes of the packet;
    /// anything after them is left alone. Panics if the buffer is shorter
    /// than `buffer_len()` (a bug in the caller, who sizes it with
    /// `buffer_len`).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv4Packet<T>) {
        let len = self.buffer_len();
        let mut packet = Icmpv4Packet::new_unchecked(&mut packet.buffer.as_mut()[..len]);
        packet.set_msg_code(0);
        packet.set_rest_of_header([0; 4]);
        match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            }
            | Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                packet.set_msg_type(if matches!(self, Icmpv4Repr::EchoRequest { .. }) {
                    Icmpv4Message::EchoRequest
                } else {
                    Icmpv4Message::EchoReply
                });
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                packet.data_mut()[..data.len()].copy_from_slice(data);
            }
            Icmpv4Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                header,
                data,
            } => {
                packet.set_msg_type(Icmpv4Message::DstUnreachable);
                packet.set_msg_code(reason.into());
                packet.set_next_hop_mtu(next_hop_mtu);
                Self::emit_quote(&mut packet, &header, data);
            }
            Icmpv4Repr::TimeExceeded {
                reason,
                header,
                data,
            } => {
                packet.set_msg_type(Icmpv4Message::TimeExceeded);
                packet.set_msg_code(reason.into());
                Self::emit_quote(&mut packet, &header, data);
            }
        }
        packet.fill_checksum();
    }

    fn emit_quote<T: AsRef<[u8]> + AsMut<[u8]>>(
        packet: &mut Icmpv4Packet<T>,
        header: &Ipv4Repr,
        data: &[u8],
    ) {
        let out = packet.data_mut();
        let (h, rest) = out.split_at_mut(IPV4_HEADER_LEN);
        header.emit(&mut Ipv4Packet::new_unchecked(h), true);
        rest[..data.len()].copy_from_slice(data);
    }
}

impl fmt::Display for Icmpv4Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => write!(
                f,
                "ICMP echo request id {ident} seq {seq_no} len {}",
                data.len()
            ),
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => write!(
                f,
                "ICMP echo reply id {ident} seq {seq_no} len {}",
                data.len()
            ),
            Icmpv4Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                header,
                ..
            } => {
                write!(f, "ICMP {reason}")?;
                if *reason == DstUnreachable::FragRequired {
                    write!(f, " (mtu {next_hop_mtu})")?;
                }
                write!(
                    f,
                    " for {} > {} {}",
                    header.src, header.dst, header.protocol
                )
            }
            Icmpv4Repr::TimeExceeded { reason, header, .. } => write!(
                f,
                "ICMP {reason} for {} > {} {}",
                header.src, header.dst, header.protocol
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_mapping_roundtrips() {
        for c in 0..=255u8 {
            assert_eq!(u8::from(DstUnreachable::from(c)), c);
            assert_eq!(u8::from(Icmpv4Message::from(c)), c);
        }
    }

    #[test]
    fn short_and_unsupported() {
        assert_eq!(
            Icmpv4Packet::new_checked(&[8u8, 0, 0, 0, 0, 0, 0][..]).err(),
            Some(Error::Truncated)
        );
        // Redirect (type 5) with a correct checksum: unsupported.
        let mut b = [5u8, 0, 0, 0, 10, 0, 0, 1];
        Icmpv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, true), Err(Error::Unsupported));
        // Unreachable with no quoted header at all.
        let mut b = [3u8, 3, 0, 0, 0, 0, 0, 0];
        Icmpv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, true), Err(Error::Truncated));
    }
}
