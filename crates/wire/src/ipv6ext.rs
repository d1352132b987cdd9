//! IPv6 extension headers (RFC 8200 4): Hop-by-Hop and Destination Options
//! with their TLV options, Routing, Fragment, and a bounded walk over a
//! header chain of any length.
//!
//! ```text
//! Options / Routing / RFC 6564 uniform format:    Fragment:
//! +---------------+---------------+-------...     +-------------+-------------+---------------------+-----+
//! |  Next Header  |  Hdr Ext Len  | data          | Next Header |  Reserved   | Fragment Offset |Res|M|
//! +---------------+---------------+-------...     |                  Identification                    |
//!   length = (Hdr Ext Len + 1) * 8 octets         +----------------------------------------------------+
//! ```
//!
//! Offsets reported by the chain walk ([`Ipv6HeaderChain`]) count from the
//! first byte of the IPv6 header, as the ICMPv6 Parameter Problem pointer
//! does (RFC 4443 3.4).

use core::fmt;

use crate::ip::IpProtocol;
use crate::ipv6::{Ipv6Packet, IPV6_HEADER_LEN};
use crate::{Error, Result};

/// Length of the Fragment header.
pub const FRAGMENT_HEADER_LEN: usize = 8;
/// Smallest Options or Routing header.
pub const EXT_HEADER_MIN_LEN: usize = 8;

/// IPv6 option types (RFC 8200 4.2, RFC 2711, RFC 2675).
pub mod option_type {
    pub const PAD1: u8 = 0x00;
    pub const PADN: u8 = 0x01;
    pub const ROUTER_ALERT: u8 = 0x05;
    pub const JUMBO_PAYLOAD: u8 = 0xc2;
}

/// What a node must do with an option it does not recognise: RFC 8200 4.2,
/// the two highest-order bits of the Option Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnknownOptionAction {
    /// 00: "skip over this option and continue processing the header".
    Skip,
    /// 01: "discard the packet".
    Discard,
    /// 10: "discard the packet and, regardless of whether or not the
    /// packet's Destination Address was a multicast address, send an ICMP
    /// Parameter Problem, Code 2, message to the packet's Source Address,
    /// pointing to the unrecognized Option Type".
    DiscardAndReport,
    /// 11: the same, "only if the packet's Destination Address was not a
    /// multicast address".
    DiscardAndReportUnlessMulticast,
}

impl UnknownOptionAction {
    pub const fn of(option_type: u8) -> UnknownOptionAction {
        match option_type >> 6 {
            0 => UnknownOptionAction::Skip,
            1 => UnknownOptionAction::Discard,
            2 => UnknownOptionAction::DiscardAndReport,
            _ => UnknownOptionAction::DiscardAndReportUnlessMulticast,
        }
    }
}

/// RFC 8200 4.2: the third-highest-order bit of the Option Type says
/// whether the "Option Data can change en route to the packet's final
/// destination" (and is then zeroed for authentication).
pub const fn option_may_change(option_type: u8) -> bool {
    option_type & 0x20 != 0
}

/// One TLV option of a Hop-by-Hop or Destination Options header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Option<'a> {
    pub option_type: u8,
    /// The Option Data (empty for Pad1).
    pub data: &'a [u8],
    /// Offset of the Option Type byte from the start of the options area
    /// (the header's third byte).
    pub offset: usize,
}

impl Ipv6Option<'_> {
    pub const fn action(&self) -> UnknownOptionAction {
        UnknownOptionAction::of(self.option_type)
    }

    /// Bytes this option takes (type, length and data; 1 for Pad1).
    pub const fn len(&self) -> usize {
        if self.option_type == option_type::PAD1 {
            1
        } else {
            2 + self.data.len()
        }
    }

    /// Never true: every option takes at least one byte.
    pub const fn is_empty(&self) -> bool {
        false
    }
}

/// An iterator over the TLV options of an options area. Yields
/// `Err(Truncated)` once (then stops) when an option runs past the area.
#[derive(Debug, Clone)]
pub struct Ipv6Options<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Ipv6Options<'a> {
    pub const fn new(data: &'a [u8]) -> Self {
        Ipv6Options { data, pos: 0 }
    }

    /// Check every option fits (what `parse` of the options headers does).
    pub fn validate(data: &[u8]) -> Result<()> {
        for o in Ipv6Options::new(data) {
            o?;
        }
        Ok(())
    }
}

impl<'a> Iterator for Ipv6Options<'a> {
    type Item = Result<Ipv6Option<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.data.get(self.pos..)?;
        let (&t, after) = rest.split_first()?;
        let offset = self.pos;
        if t == option_type::PAD1 {
            self.pos += 1;
            return Some(Ok(Ipv6Option {
                option_type: t,
                data: &[],
                offset,
            }));
        }
        let item = after
            .split_first()
            .and_then(|(&len, body)| body.get(..usize::from(len)))
            .map(|data| Ipv6Option {
                option_type: t,
                data,
                offset,
            });
        match item {
            Some(o) => {
                self.pos += o.len();
                Some(Ok(o))
            }
            None => {
                self.pos = self.data.len();
                Some(Err(Error::Truncated))
            }
        }
    }
}

/// An option to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv6OptionRepr<'a> {
    Pad1,
    /// PadN with this many zero data bytes (0..=255).
    PadN(u8),
    /// RFC 2711 Router Alert (value 0 = MLD, RFC 3810 5).
    RouterAlert(u16),
    Unknown {
        option_type: u8,
        data: &'a [u8],
    },
}

impl<'a> Ipv6OptionRepr<'a> {
    /// Decode one option; a Router Alert whose length is not 2 is `Malformed`.
    pub fn parse(o: &Ipv6Option<'a>) -> Result<Ipv6OptionRepr<'a>> {
        Ok(match o.option_type {
            option_type::PAD1 => Ipv6OptionRepr::Pad1,
            option_type::PADN => {
                Ipv6OptionRepr::PadN(u8::try_from(o.data.len()).map_err(|_| Error::Malformed)?)
            }
            option_type::ROUTER_ALERT => match o.data {
                &[a, b] => Ipv6OptionRepr::RouterAlert(u16::from_be_bytes([a, b])),
                _ => return Err(Error::Malformed),
            },
            t => Ipv6OptionRepr::Unknown {
                option_type: t,
                data: o.data,
            },
        })
    }

    pub fn buffer_len(&self) -> usize {
        match self {
            Ipv6OptionRepr::Pad1 => 1,
            Ipv6OptionRepr::PadN(n) => 2 + usize::from(*n),
            Ipv6OptionRepr::RouterAlert(_) => 4,
            Ipv6OptionRepr::Unknown { data, .. } => 2 + data.len().min(255),
        }
    }

    /// Write the option into the start of `buf`; `Err(Truncated)` if it does
    /// not fit. Unknown data longer than 255 bytes is cut to 255.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        let out = buf.get_mut(..n).ok_or(Error::Truncated)?;
        match *self {
            Ipv6OptionRepr::Pad1 => out[0] = option_type::PAD1,
            Ipv6OptionRepr::PadN(len) => {
                out[0] = option_type::PADN;
                out[1] = len;
                out[2..].fill(0);
            }
            Ipv6OptionRepr::RouterAlert(v) => {
                out[0] = option_type::ROUTER_ALERT;
                out[1] = 2;
                out[2..4].copy_from_slice(&v.to_be_bytes());
            }
            Ipv6OptionRepr::Unknown { option_type, data } => {
                out[0] = option_type;
                out[1] = (n - 2) as u8;
                out[2..].copy_from_slice(&data[..n - 2]);
            }
        }
        Ok(n)
    }
}

/// Fill `buf` with padding options (Pad1 for one byte, PadN otherwise).
pub fn emit_padding(buf: &mut [u8]) {
    match buf.len() {
        0 => {}
        1 => buf[0] = option_type::PAD1,
        n => {
            buf.fill(0);
            buf[0] = option_type::PADN;
            buf[1] = (n - 2).min(255) as u8;
        }
    }
}

/// A zero-copy view of an extension header in the uniform format (RFC 8200
/// 4, RFC 6564): Hop-by-Hop, Routing, Destination Options, and unknown ones
/// that follow the format. The Fragment header has a fixed length of 8, so
/// it fits the view too (its second byte is reserved, read as 0 length).
#[derive(Debug, Clone)]
pub struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6ExtHeader { buffer }
    }

    /// Check that the buffer holds the header as long as Hdr Ext Len says.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        let b = h.buffer.as_ref();
        if b.len() < EXT_HEADER_MIN_LEN || b.len() < h.header_len() {
            return Err(Error::Truncated);
        }
        Ok(h)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[0])
    }

    /// The raw Hdr Ext Len field.
    pub fn header_len_field(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// The length in bytes: "in 8-octet units, not including the first 8
    /// octets".
    pub fn header_len(&self) -> usize {
        (usize::from(self.header_len_field()) + 1) * 8
    }

    /// The bytes after Next Header and Hdr Ext Len, to the end of the header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..self.header_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6ExtHeader<T> {
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[0] = p.into();
    }

    /// Set Hdr Ext Len from a length in bytes (a multiple of 8, 8..=2048).
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[1] = (len / 8).saturating_sub(1).min(255) as u8;
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[2..end]
    }
}

/// A Hop-by-Hop or Destination Options header (the same format, RFC 8200
/// 4.3 and 4.6). `options` is the options area (validated by `parse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6OptionsRepr<'a> {
    pub next_header: IpProtocol,
    pub options: &'a [u8],
}

impl<'a> Ipv6OptionsRepr<'a> {
    /// Decode a header; an option running past its end is `Truncated`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Ipv6ExtHeader<&'a T>) -> Result<Self> {
        let b: &'a [u8] = h.buffer.as_ref();
        let options = b.get(2..h.header_len()).ok_or(Error::Truncated)?;
        Ipv6Options::validate(options)?;
        Ok(Ipv6OptionsRepr {
            next_header: h.next_header(),
            options,
        })
    }

    pub fn options(&self) -> Ipv6Options<'a> {
        Ipv6Options::new(self.options)
    }

    /// The header length: the options padded to a multiple of 8.
    pub fn buffer_len(&self) -> usize {
        (2 + self.options.len()).div_ceil(8) * 8
    }

    /// Write the header, then Pad1/PadN up to the 8-byte boundary. Options
    /// longer than 2046 bytes are cut (the header cannot hold more). Panics
    /// if the buffer is shorter than `buffer_len()` (a caller bug).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ipv6ExtHeader<T>) {
        let len = self.buffer_len().min(2048);
        h.set_next_header(self.next_header);
        h.set_header_len(len);
        let data = h.data_mut();
        let n = self.options.len().min(data.len());
        data[..n].copy_from_slice(&self.options[..n]);
        emit_padding(&mut data[n..]);
    }
}

/// Routing types (IANA): type 0 is deprecated (RFC 5095: "An IPv6 node that
/// receives a packet with a destination address assigned to it and that
/// contains an RH0 extension header MUST NOT execute the algorithm").
pub mod routing_type {
    pub const TYPE0: u8 = 0;
    pub const TYPE2: u8 = 2;
    pub const RPL_SOURCE_ROUTE: u8 = 3;
    pub const SEGMENT_ROUTING: u8 = 4;
}

/// A Routing header (RFC 8200 4.4); the type-specific data is not decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6RoutingRepr<'a> {
    pub next_header: IpProtocol,
    pub routing_type: u8,
    pub segments_left: u8,
    /// The type-specific data (after the first 4 bytes).
    pub data: &'a [u8],
}

impl<'a> Ipv6RoutingRepr<'a> {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Ipv6ExtHeader<&'a T>) -> Result<Self> {
        let b: &'a [u8] = h.buffer.as_ref();
        let hdr = b.get(..h.header_len()).ok_or(Error::Truncated)?;
        Ok(Ipv6RoutingRepr {
            next_header: h.next_header(),
            routing_type: hdr[2],
            segments_left: hdr[3],
            data: &hdr[4..],
        })
    }

    pub fn buffer_len(&self) -> usize {
        (4 + self.data.len()).div_ceil(8) * 8
    }

    /// Write the header (data zero-padded to the 8-byte boundary, cut at
    /// 2044 bytes). Panics if the buffer is shorter than `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ipv6ExtHeader<T>) {
        h.set_next_header(self.next_header);
        h.set_header_len(self.buffer_len().min(2048));
        let d = h.data_mut();
        d[0] = self.routing_type;
        d[1] = self.segments_left;
        let rest = &mut d[2..];
        let n = self.data.len().min(rest.len());
        rest[..n].copy_from_slice(&self.data[..n]);
        rest[n..].fill(0);
    }
}

/// The Fragment header (RFC 8200 4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6FragmentRepr {
    pub next_header: IpProtocol,
    /// In bytes (a multiple of 8).
    pub frag_offset: u16,
    pub more_frags: bool,
    pub ident: u32,
}

impl Ipv6FragmentRepr {
    /// Decode the first 8 bytes of `b`; the reserved fields are ignored
    /// ("initialized to zero for transmission; ignored on reception").
    pub fn parse(b: &[u8]) -> Result<Ipv6FragmentRepr> {
        let b = b.get(..FRAGMENT_HEADER_LEN).ok_or(Error::Truncated)?;
        let off = u16::from_be_bytes([b[2], b[3]]);
        Ok(Ipv6FragmentRepr {
            next_header: IpProtocol::from(b[0]),
            frag_offset: off & 0xfff8,
            more_frags: off & 1 != 0,
            ident: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }

    /// RFC 6946: a Fragment header with offset 0 and M clear (an "atomic
    /// fragment") must be processed as a whole datagram.
    pub const fn is_atomic(&self) -> bool {
        self.frag_offset == 0 && !self.more_frags
    }

    pub const fn buffer_len(&self) -> usize {
        FRAGMENT_HEADER_LEN
    }

    /// Write the 8 bytes; `Err(Truncated)` if `buf` is shorter.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let b = buf.get_mut(..FRAGMENT_HEADER_LEN).ok_or(Error::Truncated)?;
        b[0] = self.next_header.into();
        b[1] = 0;
        let off = (self.frag_offset & 0xfff8) | u16::from(self.more_frags);
        b[2..4].copy_from_slice(&off.to_be_bytes());
        b[4..8].copy_from_slice(&self.ident.to_be_bytes());
        Ok(())
    }
}

impl fmt::Display for Ipv6FragmentRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "frag id 0x{:08x} off {}{}",
            self.ident,
            self.frag_offset,
            if self.more_frags { " MF" } else { "" }
        )
    }
}

/// The kinds of extension header the walk knows how to step over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtHeaderKind {
    HopByHop,
    Routing,
    Fragment,
    DestinationOptions,
    /// RFC 4302: its length counts 4-octet units minus 2.
    Authentication,
    /// Mobility (135), HIP (139), Shim6 (140) and the experimental 253/254:
    /// RFC 6564's uniform format (RFC 7045 says to step over them).
    Uniform(u8),
}

impl ExtHeaderKind {
    /// The kind a Next Header value names, if it is an extension header.
    pub const fn of(next_header: u8) -> Option<ExtHeaderKind> {
        Some(match next_header {
            0 => ExtHeaderKind::HopByHop,
            43 => ExtHeaderKind::Routing,
            44 => ExtHeaderKind::Fragment,
            60 => ExtHeaderKind::DestinationOptions,
            51 => ExtHeaderKind::Authentication,
            135 | 139 | 140 | 253 | 254 => ExtHeaderKind::Uniform(next_header),
            _ => return None,
        })
    }
}

/// Upper-layer protocols the walk ends on ([`ChainItem::Upper`]). Every
/// other non-extension value (ESP included) is
/// [`ChainError::UnknownHeader`].
pub const fn is_upper_layer(next_header: u8) -> bool {
    matches!(next_header, 6 | 17 | 58 | 59)
}

/// Bounds on the work of one walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainLimits {
    /// Most extension headers walked.
    pub max_headers: usize,
    /// Most bytes of extension headers.
    pub max_len: usize,
}

impl Default for ChainLimits {
    /// 16 headers and 2048 bytes: more than any legitimate packet carries
    /// (RFC 8200 4.1 names at most 7 kinds, each once except Destination
    /// Options twice) and well inside one 1280-byte first fragment plus one
    /// maximum-size Hop-by-Hop header.
    fn default() -> Self {
        ChainLimits {
            max_headers: 16,
            max_len: 2048,
        }
    }
}

/// One extension header met on the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<'a> {
    pub kind: ExtHeaderKind,
    /// The header's own Next Header field.
    pub next_header: IpProtocol,
    /// Offset of the header from the start of the IPv6 header.
    pub offset: usize,
    /// The whole header.
    pub bytes: &'a [u8],
}

impl<'a> ExtHeader<'a> {
    /// The TLV options of a Hop-by-Hop or Destination Options header.
    pub fn options(&self) -> Option<Ipv6Options<'a>> {
        match self.kind {
            ExtHeaderKind::HopByHop | ExtHeaderKind::DestinationOptions => {
                Some(Ipv6Options::new(self.bytes.get(2..).unwrap_or(&[])))
            }
            _ => None,
        }
    }

    /// The Parameter Problem pointer (from the start of the IPv6 header) of
    /// an option of this header.
    pub const fn option_pointer(&self, o: &Ipv6Option<'_>) -> usize {
        self.offset + 2 + o.offset
    }

    pub fn routing(&self) -> Option<Ipv6RoutingRepr<'a>> {
        match self.kind {
            ExtHeaderKind::Routing => {
                Ipv6RoutingRepr::parse(&Ipv6ExtHeader::new_unchecked(self.bytes)).ok()
            }
            _ => None,
        }
    }

    pub fn fragment(&self) -> Option<Ipv6FragmentRepr> {
        match self.kind {
            ExtHeaderKind::Fragment => Ipv6FragmentRepr::parse(self.bytes).ok(),
            _ => None,
        }
    }
}

/// One step of the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainItem<'a> {
    Ext(ExtHeader<'a>),
    /// The upper-layer header (TCP, UDP, ICMPv6 or No Next Header) at
    /// `offset` from the start of the IPv6 header. Last item.
    Upper {
        protocol: IpProtocol,
        offset: usize,
    },
    /// After the Fragment header of a fragment with a non-zero offset the
    /// rest is fragment data, not headers: `next_header` is the first header
    /// of the fragmentable part. Last item.
    FragmentData {
        next_header: IpProtocol,
        offset: usize,
    },
}

/// Why a walk stopped short of the upper layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainError {
    /// The header at `offset` runs past the payload (RFC 7112: in a first
    /// fragment, the chain must be complete).
    Truncated { offset: usize },
    /// More than `max_headers` extension headers.
    TooManyHeaders,
    /// Extension headers past `max_len` bytes.
    TooLong,
    /// RFC 8200 4: an unrecognised Next Header value; `pointer` is the
    /// offset of the field holding it (Parameter Problem code 1).
    UnknownHeader { next_header: u8, pointer: usize },
    /// RFC 8200 4.1: Hop-by-Hop "is restricted to appear immediately after
    /// an IPv6 header only"; `pointer` as for `UnknownHeader`.
    HopByHopNotFirst { pointer: usize },
}

impl From<ChainError> for Error {
    fn from(e: ChainError) -> Error {
        match e {
            ChainError::Truncated { .. } => Error::Truncated,
            ChainError::UnknownHeader { .. } => Error::Unsupported,
            _ => Error::Malformed,
        }
    }
}

/// The walk over a header chain: an iterator of [`ChainItem`]s that ends
/// after `Upper`, `FragmentData` or the first error. Work is bounded by
/// [`ChainLimits`] (and by the payload length).
#[derive(Debug, Clone)]
pub struct Ipv6HeaderChain<'a> {
    payload: &'a [u8],
    next: u8,
    /// Offset in `payload` of the next header.
    pos: usize,
    /// Offset in `payload` of the Next Header field naming `next`, or
    /// `None` for the fixed header's (offset 6 of the packet).
    field: Option<usize>,
    count: usize,
    limits: ChainLimits,
    done_after_fragment: bool,
    done: bool,
}

impl<'a> Ipv6HeaderChain<'a> {
    /// Walk `payload` (the bytes after the fixed header) whose first header
    /// is `first` (the fixed header's Next Header).
    pub fn new(first: IpProtocol, payload: &'a [u8], limits: ChainLimits) -> Self {
        Ipv6HeaderChain {
            payload,
            next: first.into(),
            pos: 0,
            field: None,
            count: 0,
            limits,
            done_after_fragment: false,
            done: false,
        }
    }

    pub fn from_packet<T: AsRef<[u8]> + ?Sized>(
        p: &Ipv6Packet<&'a T>,
        limits: ChainLimits,
    ) -> Self {
        Self::new(p.next_header(), p.payload_ref(), limits)
    }

    fn pointer(&self) -> usize {
        match self.field {
            Some(f) => IPV6_HEADER_LEN + f,
            None => 6,
        }
    }

    fn step(&mut self) -> core::result::Result<ChainItem<'a>, ChainError> {
        let offset = IPV6_HEADER_LEN + self.pos;
        let Some(kind) = ExtHeaderKind::of(self.next) else {
            if is_upper_layer(self.next) {
                return Ok(ChainItem::Upper {
                    protocol: IpProtocol::from(self.next),
                    offset,
                });
            }
            return Err(ChainError::UnknownHeader {
                next_header: self.next,
                pointer: self.pointer(),
            });
        };
        if kind == ExtHeaderKind::HopByHop && self.pos != 0 {
            return Err(ChainError::HopByHopNotFirst {
                pointer: self.pointer(),
            });
        }
        if self.count >= self.limits.max_headers {
            return Err(ChainError::TooManyHeaders);
        }
        let rest = &self.payload[self.pos.min(self.payload.len())..];
        let len = match (kind, rest.get(1)) {
            (_, None) => return Err(ChainError::Truncated { offset }),
            (ExtHeaderKind::Fragment, _) => FRAGMENT_HEADER_LEN,
            (ExtHeaderKind::Authentication, Some(&l)) => (usize::from(l) + 2) * 4,
            (_, Some(&l)) => (usize::from(l) + 1) * 8,
        };
        if self.pos + len > self.limits.max_len {
            return Err(ChainError::TooLong);
        }
        let bytes = rest.get(..len).ok_or(ChainError::Truncated { offset })?;
        let header = ExtHeader {
            kind,
            next_header: IpProtocol::from(bytes[0]),
            offset,
            bytes,
        };
        self.count += 1;
        self.field = Some(self.pos);
        self.pos += len;
        self.next = bytes[0];
        if let Some(f) = header.fragment() {
            if f.frag_offset != 0 {
                // Yield the header now; the data item follows.
                self.done_after_fragment = true;
            }
        }
        Ok(ChainItem::Ext(header))
    }

    /// Walk to the end: the upper layer (or fragment data) and a summary.
    pub fn walk(self) -> core::result::Result<ChainSummary, ChainError> {
        let mut s = ChainSummary {
            upper: IpProtocol::IPV6_NO_NEXT,
            offset: 0,
            headers: 0,
            fragment: None,
            fragment_data: false,
        };
        for item in self {
            match item? {
                ChainItem::Ext(h) => {
                    s.headers += 1;
                    if let Some(f) = h.fragment() {
                        s.fragment = Some((f, h.offset));
                    }
                }
                ChainItem::Upper { protocol, offset } => {
                    s.upper = protocol;
                    s.offset = offset;
                }
                ChainItem::FragmentData {
                    next_header,
                    offset,
                } => {
                    s.upper = next_header;
                    s.offset = offset;
                    s.fragment_data = true;
                }
            }
        }
        Ok(s)
    }
}

/// What [`Ipv6HeaderChain::walk`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainSummary {
    /// The upper-layer protocol (for `fragment_data`, the first header of
    /// the fragmentable part).
    pub upper: IpProtocol,
    /// Its offset from the start of the IPv6 header.
    pub offset: usize,
    /// Extension headers walked.
    pub headers: usize,
    /// The (last) Fragment header and its offset.
    pub fragment: Option<(Ipv6FragmentRepr, usize)>,
    /// True when the walk ended at the data of a non-first fragment.
    pub fragment_data: bool,
}

impl<'a> Iterator for Ipv6HeaderChain<'a> {
    type Item = core::result::Result<ChainItem<'a>, ChainError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.done_after_fragment {
            self.done = true;
            return Some(Ok(ChainItem::FragmentData {
                next_header: IpProtocol::from(self.next),
                offset: IPV6_HEADER_LEN + self.pos,
            }));
        }
        let r = self.step();
        if !matches!(r, Ok(ChainItem::Ext(_))) {
            self.done = true;
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a payload from (next_header, header bytes) pairs.
    fn chain(headers: &[&[u8]], upper: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for h in headers {
            v.extend_from_slice(h);
        }
        v.extend_from_slice(upper);
        v
    }

    #[test]
    fn option_action_bits() {
        assert_eq!(UnknownOptionAction::of(0x1e), UnknownOptionAction::Skip);
        assert_eq!(UnknownOptionAction::of(0x5e), UnknownOptionAction::Discard);
        assert_eq!(
            UnknownOptionAction::of(0x88),
            UnknownOptionAction::DiscardAndReport
        );
        assert_eq!(
            UnknownOptionAction::of(0xc2),
            UnknownOptionAction::DiscardAndReportUnlessMulticast
        );
        assert!(option_may_change(0x3e));
        assert!(!option_may_change(0x1e));
    }

    #[test]
    fn options_iterate_pad1_padn_and_catch_truncation() {
        // Pad1, PadN(1), Router Alert 0, unknown 0x88 with 2 bytes.
        let area = [0u8, 1, 1, 0, 5, 2, 0, 0, 0x88, 2, 0xaa, 0xbb];
        let v: Vec<_> = Ipv6Options::new(&area).collect::<Result<_>>().unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].option_type, option_type::PAD1);
        assert_eq!((v[1].offset, v[1].data), (1, &[0u8][..]));
        assert_eq!(
            Ipv6OptionRepr::parse(&v[2]),
            Ok(Ipv6OptionRepr::RouterAlert(0))
        );
        assert_eq!(
            (v[3].offset, v[3].action()),
            (8, UnknownOptionAction::DiscardAndReport)
        );
        // Re-emit each option: same bytes.
        let mut out = [0u8; 12];
        let mut pos = 0;
        for o in &v {
            pos += Ipv6OptionRepr::parse(o)
                .unwrap()
                .emit(&mut out[pos..])
                .unwrap();
        }
        assert_eq!(out, area);
        // Cut in the middle of an option's data, or of its length byte.
        let mut it = Ipv6Options::new(&area[..11]);
        assert!(it.by_ref().take(3).all(|o| o.is_ok()));
        assert_eq!(it.next(), Some(Err(Error::Truncated)));
        assert_eq!(it.next(), None);
        assert_eq!(Ipv6Options::validate(&area[..9]), Err(Error::Truncated));
        // Router alert with a wrong length.
        let bad = Ipv6Option {
            option_type: 5,
            data: &[0],
            offset: 0,
        };
        assert_eq!(Ipv6OptionRepr::parse(&bad), Err(Error::Malformed));
        assert_eq!(
            Ipv6OptionRepr::RouterAlert(0).emit(&mut [0u8; 3]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn options_header_round_trip_and_padding() {
        // Hop-by-Hop of an MLD report from Linux: next 58, len 0, Router
        // Alert 0, PadN(0) (tests/data/mld_report_1.bin, bytes 54..62).
        let hbh = [58u8, 0, 5, 2, 0, 0, 1, 0];
        let h = Ipv6ExtHeader::new_checked(&hbh[..]).unwrap();
        let r = Ipv6OptionsRepr::parse(&h).unwrap();
        assert_eq!(r.next_header, IpProtocol::ICMPV6);
        assert_eq!(r.buffer_len(), 8);
        let mut out = [0xffu8; 8];
        r.emit(&mut Ipv6ExtHeader::new_unchecked(&mut out[..]));
        assert_eq!(out, hbh);
        // Emitting just the router alert pads with PadN(0) to 8 bytes.
        let ra = [5u8, 2, 0, 0];
        let r2 = Ipv6OptionsRepr {
            next_header: IpProtocol::ICMPV6,
            options: &ra,
        };
        let mut out = [0xffu8; 8];
        r2.emit(&mut Ipv6ExtHeader::new_unchecked(&mut out[..]));
        assert_eq!(out, hbh);
        // Pad1 when one byte is left.
        let opts = [0x1eu8, 3, 1, 2, 3];
        let r3 = Ipv6OptionsRepr {
            next_header: IpProtocol::Tcp,
            options: &opts,
        };
        let mut out = [0xffu8; 8];
        r3.emit(&mut Ipv6ExtHeader::new_unchecked(&mut out[..]));
        assert_eq!(out, [6, 0, 0x1e, 3, 1, 2, 3, 0]);
        // Length says 16 but 8 are present; an option past the end.
        assert_eq!(
            Ipv6ExtHeader::new_checked(&[58u8, 1, 0, 0, 0, 0, 0, 0][..]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv6ExtHeader::new_checked(&[58u8, 0, 0][..]).err(),
            Some(Error::Truncated)
        );
        let h = Ipv6ExtHeader::new_checked(&[58u8, 0, 0x1e, 5, 0, 0, 0, 0][..]).unwrap();
        assert_eq!(Ipv6OptionsRepr::parse(&h), Err(Error::Truncated));
    }

    #[test]
    fn routing_and_fragment_round_trip() {
        let rh = [
            6u8, 2, 0, 1, 0, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
        ];
        let h = Ipv6ExtHeader::new_checked(&rh[..]).unwrap();
        let r = Ipv6RoutingRepr::parse(&h).unwrap();
        assert_eq!((r.routing_type, r.segments_left), (routing_type::TYPE0, 1));
        assert_eq!(r.data.len(), 20);
        let mut out = [0u8; 24];
        r.emit(&mut Ipv6ExtHeader::new_unchecked(&mut out[..]));
        assert_eq!(out, rh);
        // Fragment header of the second fragment of `ping -6 -s 1600`
        // (tests/data/ipv6_frag2.bin, bytes 54..62): offset 1448, ICMPv6.
        let fh = crate::ipv6::Ipv6Packet::new_checked(
            &include_bytes!("../tests/data/ipv6_frag2.bin")[14..],
        )
        .unwrap()
        .payload()[..8]
            .to_vec();
        let f = Ipv6FragmentRepr::parse(&fh).unwrap();
        assert_eq!(f.next_header, IpProtocol::ICMPV6);
        assert_eq!((f.frag_offset, f.more_frags), (1448, false));
        assert!(!f.is_atomic());
        let mut out = [0u8; 8];
        f.emit(&mut out).unwrap();
        assert_eq!(&out[..], &fh[..]);
        assert_eq!(Ipv6FragmentRepr::parse(&fh[..7]), Err(Error::Truncated));
        assert_eq!(f.emit(&mut [0u8; 7]), Err(Error::Truncated));
        let atomic = Ipv6FragmentRepr {
            frag_offset: 0,
            more_frags: false,
            ..f
        };
        assert!(atomic.is_atomic());
    }

    #[test]
    fn walk_reports_upper_layer_and_offsets() {
        let hbh = [60u8, 0, 1, 4, 0, 0, 0, 0];
        let dst = [43u8, 0, 1, 4, 0, 0, 0, 0];
        let rt = [44u8, 0, 4, 0, 0, 0, 0, 0];
        let frag = [51u8, 0, 0, 1, 0, 0, 0, 7];
        let ah = [6u8, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]; // (1 + 2) * 4 = 12 bytes
        let p = chain(&[&hbh, &dst, &rt, &frag, &ah], &[0u8; 20]);
        let items: Vec<_> =
            Ipv6HeaderChain::new(IpProtocol::HOP_BY_HOP, &p, ChainLimits::default())
                .collect::<core::result::Result<_, _>>()
                .unwrap();
        assert_eq!(items.len(), 6);
        let kinds: Vec<_> = items
            .iter()
            .filter_map(|i| match i {
                ChainItem::Ext(h) => Some((h.kind, h.offset)),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            [
                (ExtHeaderKind::HopByHop, 40),
                (ExtHeaderKind::DestinationOptions, 48),
                (ExtHeaderKind::Routing, 56),
                (ExtHeaderKind::Fragment, 64),
                (ExtHeaderKind::Authentication, 72)
            ]
        );
        assert_eq!(
            items[5],
            ChainItem::Upper {
                protocol: IpProtocol::Tcp,
                offset: 84
            }
        );
        let s = Ipv6HeaderChain::new(IpProtocol::HOP_BY_HOP, &p, ChainLimits::default())
            .walk()
            .unwrap();
        assert_eq!((s.upper, s.offset, s.headers), (IpProtocol::Tcp, 84, 5));
        let (f, at) = s.fragment.unwrap();
        assert_eq!((f.more_frags, f.ident, at), (true, 7, 64));
        assert!(!s.fragment_data);
        // Options of the first header with their pointers.
        if let ChainItem::Ext(h) = items[0] {
            let o = h.options().unwrap().next().unwrap().unwrap();
            assert_eq!(h.option_pointer(&o), 42);
        }
    }

    #[test]
    fn walk_stops_at_fragment_data() {
        let frag = [6u8, 0, 0x05, 0xa8, 0, 0, 0, 9]; // offset 1448
        let p = chain(&[&frag], &[0xffu8; 16]);
        let s = Ipv6HeaderChain::new(IpProtocol::IPV6_FRAG, &p, ChainLimits::default())
            .walk()
            .unwrap();
        assert!(s.fragment_data);
        assert_eq!((s.upper, s.offset, s.headers), (IpProtocol::Tcp, 48, 1));
    }

    #[test]
    fn walk_errors() {
        let lim = ChainLimits::default();
        // Unknown next header in the fixed header and in an extension header.
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::Unknown(200), &[], lim).walk(),
            Err(ChainError::UnknownHeader {
                next_header: 200,
                pointer: 6
            })
        );
        let p = chain(
            &[&[60u8, 0, 1, 4, 0, 0, 0, 0], &[50u8, 0, 1, 4, 0, 0, 0, 0]],
            &[],
        );
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &p, lim).walk(),
            Err(ChainError::UnknownHeader {
                next_header: 50,
                pointer: 48
            })
        );
        // Hop-by-Hop after another header.
        let p = chain(&[&[0u8, 0, 1, 4, 0, 0, 0, 0]], &[]);
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &p, lim).walk(),
            Err(ChainError::HopByHopNotFirst { pointer: 40 })
        );
        // Truncated: no length byte, or shorter than its length.
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &[6u8], lim).walk(),
            Err(ChainError::Truncated { offset: 40 })
        );
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &[6u8, 1, 0, 0, 0, 0, 0, 0], lim).walk(),
            Err(ChainError::Truncated { offset: 40 })
        );
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_FRAG, &[6u8, 0, 0, 0], lim).walk(),
            Err(ChainError::Truncated { offset: 40 })
        );
        assert_eq!(Error::from(ChainError::TooLong), Error::Malformed);
    }

    #[test]
    fn walk_of_a_hundred_headers_is_bounded() {
        // 100 Destination Options headers: stops after max_headers.
        let mut p = Vec::new();
        for _ in 0..100 {
            p.extend_from_slice(&[60u8, 0, 1, 4, 0, 0, 0, 0]);
        }
        let lim = ChainLimits::default();
        let mut chain = Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &p, lim);
        let n = chain.by_ref().take_while(|i| i.is_ok()).count();
        assert_eq!(n, lim.max_headers);
        assert_eq!(chain.next(), None);
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &p, lim).walk(),
            Err(ChainError::TooManyHeaders)
        );
        // Few but long headers: the byte limit.
        let mut p = Vec::new();
        for _ in 0..3 {
            // 808 bytes: Hdr Ext Len 100, options area all Pad1.
            p.push(60u8);
            p.push(100);
            p.extend_from_slice(&[0u8; 806]);
        }
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &p, lim).walk(),
            Err(ChainError::TooLong)
        );
        // Within larger limits, the same chain walks to its (missing) end.
        let big = ChainLimits {
            max_headers: 200,
            max_len: 1 << 20,
        };
        assert_eq!(
            Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &p, big).walk(),
            Err(ChainError::Truncated {
                offset: 40 + 3 * 808
            })
        );
    }
}
