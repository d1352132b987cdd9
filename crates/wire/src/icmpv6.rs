//! ICMP for IPv6 (RFC 4443), carrying Neighbor Discovery ([`crate::ndisc`])
//! and Multicast Listener Discovery ([`crate::mld`]) too.
//!
//! ```text
//!  0                   1                   2                   3
//! +---------------+---------------+-------------------------------+
//! |     Type      |     Code      |           Checksum            |
//! +---------------+---------------+-------------------------------+
//! | echo: Identifier / Sequence; too big: MTU; param: Pointer     |
//! +---------------------------------------------------------------+
//! | echo: data; errors: as much of the invoking packet as fits    |
//! +---------------------------------------------------------------+
//! ```
//!
//! The checksum covers the IPv6 pseudo-header (RFC 4443 2.3), so parsing
//! and emitting take the source and destination addresses.

use core::fmt;
use std::net::Ipv6Addr;

use crate::checksum;
use crate::ipv6::{Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN, IPV6_MIN_MTU};
use crate::mld::MldRepr;
use crate::ndisc::NdiscRepr;
use crate::{Error, Result};

/// Length of the fixed ICMPv6 header (type, code, checksum, 4 more bytes).
pub const ICMPV6_HEADER_LEN: usize = 8;
/// RFC 4443 2.4 (c): an error message must not exceed the minimum MTU.
pub const ICMPV6_ERROR_MAX_LEN: usize = IPV6_MIN_MTU - IPV6_HEADER_LEN;
/// The Next Header value of ICMPv6.
pub const ICMPV6_NEXT_HEADER: u8 = 58;

/// The ICMPv6 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Message {
    DstUnreachable,
    PacketTooBig,
    TimeExceeded,
    ParamProblem,
    EchoRequest,
    EchoReply,
    MldQuery,
    MldReport,
    MldDone,
    RouterSolicit,
    RouterAdvert,
    NeighborSolicit,
    NeighborAdvert,
    Redirect,
    MldV2Report,
    Unknown(u8),
}

impl From<u8> for Icmpv6Message {
    fn from(v: u8) -> Self {
        match v {
            1 => Icmpv6Message::DstUnreachable,
            2 => Icmpv6Message::PacketTooBig,
            3 => Icmpv6Message::TimeExceeded,
            4 => Icmpv6Message::ParamProblem,
            128 => Icmpv6Message::EchoRequest,
            129 => Icmpv6Message::EchoReply,
            130 => Icmpv6Message::MldQuery,
            131 => Icmpv6Message::MldReport,
            132 => Icmpv6Message::MldDone,
            133 => Icmpv6Message::RouterSolicit,
            134 => Icmpv6Message::RouterAdvert,
            135 => Icmpv6Message::NeighborSolicit,
            136 => Icmpv6Message::NeighborAdvert,
            137 => Icmpv6Message::Redirect,
            143 => Icmpv6Message::MldV2Report,
            other => Icmpv6Message::Unknown(other),
        }
    }
}

impl From<Icmpv6Message> for u8 {
    fn from(v: Icmpv6Message) -> Self {
        match v {
            Icmpv6Message::DstUnreachable => 1,
            Icmpv6Message::PacketTooBig => 2,
            Icmpv6Message::TimeExceeded => 3,
            Icmpv6Message::ParamProblem => 4,
            Icmpv6Message::EchoRequest => 128,
            Icmpv6Message::EchoReply => 129,
            Icmpv6Message::MldQuery => 130,
            Icmpv6Message::MldReport => 131,
            Icmpv6Message::MldDone => 132,
            Icmpv6Message::RouterSolicit => 133,
            Icmpv6Message::RouterAdvert => 134,
            Icmpv6Message::NeighborSolicit => 135,
            Icmpv6Message::NeighborAdvert => 136,
            Icmpv6Message::Redirect => 137,
            Icmpv6Message::MldV2Report => 143,
            Icmpv6Message::Unknown(other) => other,
        }
    }
}

impl Icmpv6Message {
    /// RFC 4443 2.1: "error messages have a zero in the high-order bit of
    /// their message Type field". An unknown error must be passed to the
    /// upper layer; an unknown informational message "MUST be silently
    /// discarded" (2.4 (a), (b)).
    pub fn is_error(self) -> bool {
        u8::from(self) < 128
    }
}

/// Codes of Destination Unreachable (RFC 4443 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DstUnreachable {
    NoRoute,
    AdminProhibited,
    BeyondScope,
    AddrUnreachable,
    PortUnreachable,
    FailedPolicy,
    RejectRoute,
    Other(u8),
}

impl From<u8> for DstUnreachable {
    fn from(v: u8) -> Self {
        match v {
            0 => DstUnreachable::NoRoute,
            1 => DstUnreachable::AdminProhibited,
            2 => DstUnreachable::BeyondScope,
            3 => DstUnreachable::AddrUnreachable,
            4 => DstUnreachable::PortUnreachable,
            5 => DstUnreachable::FailedPolicy,
            6 => DstUnreachable::RejectRoute,
            other => DstUnreachable::Other(other),
        }
    }
}

impl From<DstUnreachable> for u8 {
    fn from(v: DstUnreachable) -> Self {
        match v {
            DstUnreachable::NoRoute => 0,
            DstUnreachable::AdminProhibited => 1,
            DstUnreachable::BeyondScope => 2,
            DstUnreachable::AddrUnreachable => 3,
            DstUnreachable::PortUnreachable => 4,
            DstUnreachable::FailedPolicy => 5,
            DstUnreachable::RejectRoute => 6,
            DstUnreachable::Other(other) => other,
        }
    }
}

/// Codes of Time Exceeded (RFC 4443 3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeExceeded {
    HopLimitExceeded,
    FragReassemblyExceeded,
    Other(u8),
}

impl From<u8> for TimeExceeded {
    fn from(v: u8) -> Self {
        match v {
            0 => TimeExceeded::HopLimitExceeded,
            1 => TimeExceeded::FragReassemblyExceeded,
            other => TimeExceeded::Other(other),
        }
    }
}

impl From<TimeExceeded> for u8 {
    fn from(v: TimeExceeded) -> Self {
        match v {
            TimeExceeded::HopLimitExceeded => 0,
            TimeExceeded::FragReassemblyExceeded => 1,
            TimeExceeded::Other(other) => other,
        }
    }
}

/// Codes of Parameter Problem (RFC 4443 3.4, RFC 7112 for code 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamProblem {
    ErroneousHeaderField,
    UnrecognizedNextHeader,
    UnrecognizedOption,
    /// RFC 7112: "IPv6 First Fragment has incomplete IPv6 Header Chain".
    IncompleteHeaderChain,
    Other(u8),
}

impl From<u8> for ParamProblem {
    fn from(v: u8) -> Self {
        match v {
            0 => ParamProblem::ErroneousHeaderField,
            1 => ParamProblem::UnrecognizedNextHeader,
            2 => ParamProblem::UnrecognizedOption,
            3 => ParamProblem::IncompleteHeaderChain,
            other => ParamProblem::Other(other),
        }
    }
}

impl From<ParamProblem> for u8 {
    fn from(v: ParamProblem) -> Self {
        match v {
            ParamProblem::ErroneousHeaderField => 0,
            ParamProblem::UnrecognizedNextHeader => 1,
            ParamProblem::UnrecognizedOption => 2,
            ParamProblem::IncompleteHeaderChain => 3,
            ParamProblem::Other(other) => other,
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
    /// MTU (Packet Too Big) or Pointer (Parameter Problem).
    pub const WORD: Range<usize> = 4..8;
    pub const DATA: RangeFrom<usize> = 8..;
}

/// A zero-copy view of an ICMPv6 message. The buffer is the upper-layer
/// payload (after any extension headers): the checksum covers all of it.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    /// Wrap `buffer`, checking that it holds the 8-byte header (every
    /// message type has at least that; RFC 4861's 8-byte Router Solicitation
    /// is the shortest).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ICMPV6_HEADER_LEN {
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

    pub fn msg_type(&self) -> Icmpv6Message {
        Icmpv6Message::from(self.buffer.as_ref()[field::TYPE])
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

    /// The second 32-bit word: the MTU of Packet Too Big, the Pointer of
    /// Parameter Problem.
    pub fn word(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::WORD];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// RFC 4443 2.3: the checksum over the IPv6 pseudo-header (with the
    /// upper-layer length and Next Header 58) and the whole message.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u32::try_from(b.len()) else {
            return false;
        };
        let pseudo = checksum::pseudo_header_v6(src, dst, ICMPV6_NEXT_HEADER, len);
        checksum::verify(pseudo, b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_msg_type(&mut self, t: Icmpv6Message) {
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

    pub fn set_word(&mut self, v: u32) {
        self.buffer.as_mut()[field::WORD].copy_from_slice(&v.to_be_bytes());
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// The whole message after type, code and checksum.
    pub fn body_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[4..]
    }

    /// Compute and store the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
        let pseudo = checksum::pseudo_header_v6(src, dst, ICMPV6_NEXT_HEADER, len);
        let c = checksum::checksum_with(pseudo, b);
        self.set_checksum(c);
    }
}

/// A decoded ICMPv6 message of the kinds the stack handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv6Repr<'a> {
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
        /// The quoted header of the invoking packet.
        header: Ipv6Repr,
        /// Its leading payload bytes (as many as were quoted).
        data: &'a [u8],
    },
    PacketTooBig {
        mtu: u32,
        header: Ipv6Repr,
        data: &'a [u8],
    },
    TimeExceeded {
        reason: TimeExceeded,
        header: Ipv6Repr,
        data: &'a [u8],
    },
    ParamProblem {
        reason: ParamProblem,
        /// "Identifies the octet offset within the invoking packet where
        /// the error was detected."
        pointer: u32,
        header: Ipv6Repr,
        data: &'a [u8],
    },
    Ndisc(NdiscRepr<'a>),
    Mld(MldRepr<'a>),
}

impl<'a> Icmpv6Repr<'a> {
    /// Decode a message. Echo accepts any code; errors need a quoted IPv6
    /// header (`Truncated`/`Malformed`), cut or not. Neighbor Discovery and
    /// MLD are checked as [`NdiscRepr::parse`] and [`MldRepr::parse`] say.
    /// Other types give `Unsupported` (RFC 4443 2.4: the caller passes
    /// unknown errors up and drops unknown informational messages, see
    /// [`Icmpv6Message::is_error`]).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Icmpv6Packet<&'a T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        verify_checksum: bool,
    ) -> Result<Icmpv6Repr<'a>> {
        packet.check_len()?;
        if verify_checksum && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let buf: &'a [u8] = packet.buffer.as_ref();
        let data: &'a [u8] = buf.get(field::DATA).ok_or(Error::Truncated)?;
        let code = packet.msg_code();
        let t = packet.msg_type();
        match t {
            Icmpv6Message::EchoRequest => Ok(Icmpv6Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv6Message::EchoReply => Ok(Icmpv6Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Icmpv6Message::DstUnreachable => {
                let (header, data) = Ipv6Repr::parse_quoted(data)?;
                Ok(Icmpv6Repr::DstUnreachable {
                    reason: code.into(),
                    header,
                    data,
                })
            }
            Icmpv6Message::PacketTooBig => {
                let (header, data) = Ipv6Repr::parse_quoted(data)?;
                Ok(Icmpv6Repr::PacketTooBig {
                    mtu: packet.word(),
                    header,
                    data,
                })
            }
            Icmpv6Message::TimeExceeded => {
                let (header, data) = Ipv6Repr::parse_quoted(data)?;
                Ok(Icmpv6Repr::TimeExceeded {
                    reason: code.into(),
                    header,
                    data,
                })
            }
            Icmpv6Message::ParamProblem => {
                let (header, data) = Ipv6Repr::parse_quoted(data)?;
                Ok(Icmpv6Repr::ParamProblem {
                    reason: code.into(),
                    pointer: packet.word(),
                    header,
                    data,
                })
            }
            Icmpv6Message::RouterSolicit
            | Icmpv6Message::RouterAdvert
            | Icmpv6Message::NeighborSolicit
            | Icmpv6Message::NeighborAdvert
            | Icmpv6Message::Redirect => Ok(Icmpv6Repr::Ndisc(NdiscRepr::parse(buf)?)),
            Icmpv6Message::MldQuery | Icmpv6Message::MldV2Report => {
                Ok(Icmpv6Repr::Mld(MldRepr::parse(buf)?))
            }
            _ => Err(Error::Unsupported),
        }
    }

    /// Length of the whole message as [`emit`](Self::emit) writes it.
    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv6Repr::EchoRequest { data, .. } | Icmpv6Repr::EchoReply { data, .. } => {
                ICMPV6_HEADER_LEN + data.len()
            }
            Icmpv6Repr::DstUnreachable { data, .. }
            | Icmpv6Repr::PacketTooBig { data, .. }
            | Icmpv6Repr::TimeExceeded { data, .. }
            | Icmpv6Repr::ParamProblem { data, .. } => {
                ICMPV6_HEADER_LEN + IPV6_HEADER_LEN + data.len()
            }
            Icmpv6Repr::Ndisc(n) => n.buffer_len(),
            Icmpv6Repr::Mld(m) => m.buffer_len(),
        }
    }

    /// Write the message and fill its checksum. Errors quote a 40-byte
    /// header and then `data` in full: the caller cuts the quote so the
    /// message fits [`ICMPV6_ERROR_MAX_LEN`]. The checksum covers the first
    /// `buffer_len()` bytes. Panics if the buffer is shorter than
    /// `buffer_len()` (the caller sizes it with `buffer_len`).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &mut Icmpv6Packet<T>,
    ) {
        let len = self.buffer_len();
        let mut p = Icmpv6Packet::new_unchecked(&mut packet.buffer.as_mut()[..len]);
        p.set_msg_code(0);
        p.set_word(0);
        match *self {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            }
            | Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                p.set_msg_type(if matches!(self, Icmpv6Repr::EchoRequest { .. }) {
                    Icmpv6Message::EchoRequest
                } else {
                    Icmpv6Message::EchoReply
                });
                p.set_echo_ident(ident);
                p.set_echo_seq_no(seq_no);
                p.data_mut().copy_from_slice(data);
            }
            Icmpv6Repr::DstUnreachable {
                reason,
                header,
                data,
            } => {
                p.set_msg_type(Icmpv6Message::DstUnreachable);
                p.set_msg_code(reason.into());
                emit_quote(&mut p, &header, data);
            }
            Icmpv6Repr::PacketTooBig { mtu, header, data } => {
                p.set_msg_type(Icmpv6Message::PacketTooBig);
                p.set_word(mtu);
                emit_quote(&mut p, &header, data);
            }
            Icmpv6Repr::TimeExceeded {
                reason,
                header,
                data,
            } => {
                p.set_msg_type(Icmpv6Message::TimeExceeded);
                p.set_msg_code(reason.into());
                emit_quote(&mut p, &header, data);
            }
            Icmpv6Repr::ParamProblem {
                reason,
                pointer,
                header,
                data,
            } => {
                p.set_msg_type(Icmpv6Message::ParamProblem);
                p.set_msg_code(reason.into());
                p.set_word(pointer);
                emit_quote(&mut p, &header, data);
            }
            Icmpv6Repr::Ndisc(n) => n.emit(p.buffer),
            Icmpv6Repr::Mld(m) => m.emit(p.buffer),
        }
        let mut p = Icmpv6Packet::new_unchecked(&mut packet.buffer.as_mut()[..len]);
        p.fill_checksum(src, dst);
    }
}

fn emit_quote(p: &mut Icmpv6Packet<&mut [u8]>, header: &Ipv6Repr, data: &[u8]) {
    let out = p.data_mut();
    let (h, rest) = out.split_at_mut(IPV6_HEADER_LEN);
    header.emit(&mut Ipv6Packet::new_unchecked(h));
    rest.copy_from_slice(data);
}

impl fmt::Display for Icmpv6Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => write!(
                f,
                "ICMPv6 echo request id {ident} seq {seq_no} len {}",
                data.len()
            ),
            Icmpv6Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => write!(
                f,
                "ICMPv6 echo reply id {ident} seq {seq_no} len {}",
                data.len()
            ),
            Icmpv6Repr::DstUnreachable { reason, header, .. } => write!(
                f,
                "ICMPv6 unreachable {reason:?} for {} > {}",
                header.src, header.dst
            ),
            Icmpv6Repr::PacketTooBig { mtu, header, .. } => write!(
                f,
                "ICMPv6 packet too big mtu {mtu} for {} > {}",
                header.src, header.dst
            ),
            Icmpv6Repr::TimeExceeded { reason, header, .. } => write!(
                f,
                "ICMPv6 time exceeded {reason:?} for {} > {}",
                header.src, header.dst
            ),
            Icmpv6Repr::ParamProblem {
                reason,
                pointer,
                header,
                ..
            } => write!(
                f,
                "ICMPv6 parameter problem {reason:?} at {pointer} for {} > {}",
                header.src, header.dst
            ),
            Icmpv6Repr::Ndisc(n) => write!(f, "ICMPv6 {n}"),
            Icmpv6Repr::Mld(m) => write!(f, "ICMPv6 {m}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_mapping_roundtrips() {
        for c in 0..=255u8 {
            assert_eq!(u8::from(Icmpv6Message::from(c)), c);
            assert_eq!(u8::from(DstUnreachable::from(c)), c);
            assert_eq!(u8::from(TimeExceeded::from(c)), c);
            assert_eq!(u8::from(ParamProblem::from(c)), c);
            assert_eq!(Icmpv6Message::from(c).is_error(), c < 128);
        }
    }

    #[test]
    fn short_unsupported_and_bad_checksum() {
        let a: Ipv6Addr = "fd00::1".parse().unwrap();
        let b: Ipv6Addr = "fd00::2".parse().unwrap();
        assert_eq!(
            Icmpv6Packet::new_checked(&[128u8, 0, 0, 0, 0, 0, 0][..]).err(),
            Some(Error::Truncated)
        );
        // Unknown informational type 200 with a good checksum.
        let mut m = [200u8, 0, 0, 0, 0, 0, 0, 0];
        Icmpv6Packet::new_unchecked(&mut m[..]).fill_checksum(&a, &b);
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, &a, &b, true), Err(Error::Unsupported));
        // The same bytes under other addresses: bad checksum.
        assert_eq!(Icmpv6Repr::parse(&p, &b, &a, true).ok(), None);
        assert_eq!(Icmpv6Repr::parse(&p, &a, &a, true), Err(Error::Checksum));
        // Errors with no or a short quoted header.
        let mut m = [1u8, 4, 0, 0, 0, 0, 0, 0, 0x60, 0, 0];
        Icmpv6Packet::new_unchecked(&mut m[..]).fill_checksum(&a, &b);
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, &a, &b, true), Err(Error::Truncated));
    }
}
