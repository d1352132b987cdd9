//! DHCP for IPv4 (RFC 2131) with the BOOTP header (RFC 951) and the
//! options a server needs (RFC 2132).
//!
//! ```text
//! op(1) htype(1) hlen(1) hops(1) | xid(4) | secs(2) flags(2)
//! ciaddr(4) | yiaddr(4) | siaddr(4) | giaddr(4) | chaddr(16)
//! sname(64) | file(128) | magic cookie 99.130.83.99 | options ...
//! option: code(1) len(1) data; Pad (0) and End (255) are one byte
//! ```
//!
//! Options are kept as the borrowed bytes of the message and decoded by an
//! iterator; [`Dhcpv4OptionWriter`] builds them into a caller's buffer.
//! Nothing allocates.

use core::fmt;
use std::net::Ipv4Addr;

use crate::ethernet::MacAddr;
use crate::ip::Ipv4AddrList;
use crate::{Error, Result};

/// The BOOTP header and the magic cookie.
pub const DHCPV4_HEADER_LEN: usize = 240;
/// RFC 2131 2: the cookie "99.130.83.99".
pub const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
/// RFC 1542 2.1: BOOTP messages are at least 300 octets (Linux's and
/// dnsmasq's are padded to it).
pub const BOOTP_MIN_LEN: usize = 300;
pub const SERVER_PORT: u16 = 67;
pub const CLIENT_PORT: u16 = 68;

/// BOOTP op codes.
pub const BOOTREQUEST: u8 = 1;
pub const BOOTREPLY: u8 = 2;
/// The broadcast bit of `flags` (RFC 2131 4.1).
pub const FLAG_BROADCAST: u16 = 0x8000;

/// Option codes (RFC 2132).
pub mod option_code {
    pub const PAD: u8 = 0;
    pub const SUBNET_MASK: u8 = 1;
    pub const ROUTER: u8 = 3;
    pub const DNS_SERVER: u8 = 6;
    pub const HOSTNAME: u8 = 12;
    pub const REQUESTED_IP: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const PARAMETER_REQUEST_LIST: u8 = 55;
    pub const MAX_MESSAGE_SIZE: u8 = 57;
    pub const RENEWAL_TIME: u8 = 58;
    pub const REBINDING_TIME: u8 = 59;
    pub const CLIENT_ID: u8 = 61;
    pub const END: u8 = 255;
}

/// DHCP Message Type (option 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dhcpv4MessageType {
    Discover,
    Offer,
    Request,
    Decline,
    Ack,
    Nak,
    Release,
    Inform,
    Unknown(u8),
}

impl From<u8> for Dhcpv4MessageType {
    fn from(v: u8) -> Self {
        match v {
            1 => Dhcpv4MessageType::Discover,
            2 => Dhcpv4MessageType::Offer,
            3 => Dhcpv4MessageType::Request,
            4 => Dhcpv4MessageType::Decline,
            5 => Dhcpv4MessageType::Ack,
            6 => Dhcpv4MessageType::Nak,
            7 => Dhcpv4MessageType::Release,
            8 => Dhcpv4MessageType::Inform,
            o => Dhcpv4MessageType::Unknown(o),
        }
    }
}

impl From<Dhcpv4MessageType> for u8 {
    fn from(v: Dhcpv4MessageType) -> Self {
        match v {
            Dhcpv4MessageType::Discover => 1,
            Dhcpv4MessageType::Offer => 2,
            Dhcpv4MessageType::Request => 3,
            Dhcpv4MessageType::Decline => 4,
            Dhcpv4MessageType::Ack => 5,
            Dhcpv4MessageType::Nak => 6,
            Dhcpv4MessageType::Release => 7,
            Dhcpv4MessageType::Inform => 8,
            Dhcpv4MessageType::Unknown(o) => o,
        }
    }
}

/// One option (Pad and End are not yielded). A known code whose length
/// does not fit its format reads as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dhcpv4Option<'a> {
    MessageType(Dhcpv4MessageType),
    RequestedIp(Ipv4Addr),
    ServerId(Ipv4Addr),
    /// Seconds (0xffffffff = infinite).
    LeaseTime(u32),
    RenewalTime(u32),
    RebindingTime(u32),
    SubnetMask(Ipv4Addr),
    Router(Ipv4AddrList<'a>),
    DnsServers(Ipv4AddrList<'a>),
    ParameterRequestList(&'a [u8]),
    MaxMessageSize(u16),
    ClientId(&'a [u8]),
    Hostname(&'a [u8]),
    Unknown {
        code: u8,
        data: &'a [u8],
    },
}

fn addr4(d: &[u8]) -> Option<Ipv4Addr> {
    match d {
        &[a, b, c, e] => Some(Ipv4Addr::new(a, b, c, e)),
        _ => None,
    }
}

fn u32_of(d: &[u8]) -> Option<u32> {
    match d {
        &[a, b, c, e] => Some(u32::from_be_bytes([a, b, c, e])),
        _ => None,
    }
}

impl<'a> Dhcpv4Option<'a> {
    fn decode(code: u8, data: &'a [u8]) -> Dhcpv4Option<'a> {
        use option_code as c;
        let list = || {
            Ipv4AddrList::from_bytes(data)
                .ok()
                .filter(|l| !l.is_empty())
        };
        let known = match code {
            c::MESSAGE_TYPE => match data {
                &[t] => Some(Dhcpv4Option::MessageType(t.into())),
                _ => None,
            },
            c::REQUESTED_IP => addr4(data).map(Dhcpv4Option::RequestedIp),
            c::SERVER_ID => addr4(data).map(Dhcpv4Option::ServerId),
            c::SUBNET_MASK => addr4(data).map(Dhcpv4Option::SubnetMask),
            c::LEASE_TIME => u32_of(data).map(Dhcpv4Option::LeaseTime),
            c::RENEWAL_TIME => u32_of(data).map(Dhcpv4Option::RenewalTime),
            c::REBINDING_TIME => u32_of(data).map(Dhcpv4Option::RebindingTime),
            c::ROUTER => list().map(Dhcpv4Option::Router),
            c::DNS_SERVER => list().map(Dhcpv4Option::DnsServers),
            c::PARAMETER_REQUEST_LIST if !data.is_empty() => {
                Some(Dhcpv4Option::ParameterRequestList(data))
            }
            c::MAX_MESSAGE_SIZE => match data {
                &[a, b] => Some(Dhcpv4Option::MaxMessageSize(u16::from_be_bytes([a, b]))),
                _ => None,
            },
            // RFC 2132 9.14: client identifier "minimum length is 2".
            c::CLIENT_ID if data.len() >= 2 => Some(Dhcpv4Option::ClientId(data)),
            c::HOSTNAME if !data.is_empty() => Some(Dhcpv4Option::Hostname(data)),
            _ => None,
        };
        known.unwrap_or(Dhcpv4Option::Unknown { code, data })
    }

    pub fn code(&self) -> u8 {
        use option_code as c;
        match self {
            Dhcpv4Option::MessageType(_) => c::MESSAGE_TYPE,
            Dhcpv4Option::RequestedIp(_) => c::REQUESTED_IP,
            Dhcpv4Option::ServerId(_) => c::SERVER_ID,
            Dhcpv4Option::LeaseTime(_) => c::LEASE_TIME,
            Dhcpv4Option::RenewalTime(_) => c::RENEWAL_TIME,
            Dhcpv4Option::RebindingTime(_) => c::REBINDING_TIME,
            Dhcpv4Option::SubnetMask(_) => c::SUBNET_MASK,
            Dhcpv4Option::Router(_) => c::ROUTER,
            Dhcpv4Option::DnsServers(_) => c::DNS_SERVER,
            Dhcpv4Option::ParameterRequestList(_) => c::PARAMETER_REQUEST_LIST,
            Dhcpv4Option::MaxMessageSize(_) => c::MAX_MESSAGE_SIZE,
            Dhcpv4Option::ClientId(_) => c::CLIENT_ID,
            Dhcpv4Option::Hostname(_) => c::HOSTNAME,
            Dhcpv4Option::Unknown { code, .. } => *code,
        }
    }

    fn data_len(&self) -> usize {
        match self {
            Dhcpv4Option::MessageType(_) => 1,
            Dhcpv4Option::MaxMessageSize(_) => 2,
            Dhcpv4Option::RequestedIp(_)
            | Dhcpv4Option::ServerId(_)
            | Dhcpv4Option::SubnetMask(_)
            | Dhcpv4Option::LeaseTime(_)
            | Dhcpv4Option::RenewalTime(_)
            | Dhcpv4Option::RebindingTime(_) => 4,
            Dhcpv4Option::Router(l) | Dhcpv4Option::DnsServers(l) => l.wire_len(),
            Dhcpv4Option::ParameterRequestList(d)
            | Dhcpv4Option::ClientId(d)
            | Dhcpv4Option::Hostname(d)
            | Dhcpv4Option::Unknown { data: d, .. } => d.len(),
        }
    }

    /// Code, length and data.
    pub fn buffer_len(&self) -> usize {
        2 + self.data_len()
    }

    /// Write the option at the start of `buf`. `Truncated` if it does not
    /// fit; `Malformed` for data over 255 bytes or the codes of Pad/End.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = u8::try_from(self.data_len()).map_err(|_| Error::Malformed)?;
        let code = self.code();
        if code == option_code::PAD || code == option_code::END {
            return Err(Error::Malformed);
        }
        let n = self.buffer_len();
        let out = buf.get_mut(..n).ok_or(Error::Truncated)?;
        out[0] = code;
        out[1] = len;
        let d = &mut out[2..];
        match *self {
            Dhcpv4Option::MessageType(t) => d[0] = t.into(),
            Dhcpv4Option::MaxMessageSize(v) => d.copy_from_slice(&v.to_be_bytes()),
            Dhcpv4Option::RequestedIp(a)
            | Dhcpv4Option::ServerId(a)
            | Dhcpv4Option::SubnetMask(a) => d.copy_from_slice(&a.octets()),
            Dhcpv4Option::LeaseTime(v)
            | Dhcpv4Option::RenewalTime(v)
            | Dhcpv4Option::RebindingTime(v) => d.copy_from_slice(&v.to_be_bytes()),
            Dhcpv4Option::Router(l) | Dhcpv4Option::DnsServers(l) => l.write(d)?,
            Dhcpv4Option::ParameterRequestList(s)
            | Dhcpv4Option::ClientId(s)
            | Dhcpv4Option::Hostname(s)
            | Dhcpv4Option::Unknown { data: s, .. } => d.copy_from_slice(s),
        }
        Ok(n)
    }
}

/// The options area (everything after the magic cookie), validated: every
/// option before End fits. Bytes after End (padding) are kept, so a parsed
/// message re-emits to the same bytes, but never read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dhcpv4Options<'a> {
    bytes: &'a [u8],
}

impl<'a> Dhcpv4Options<'a> {
    /// `Truncated` when an option runs past the area. A missing End is
    /// accepted (the area ends the options).
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self> {
        let mut pos = 0;
        while let Some(&code) = bytes.get(pos) {
            match code {
                option_code::PAD => pos += 1,
                option_code::END => break,
                _ => {
                    let len = usize::from(*bytes.get(pos + 1).ok_or(Error::Truncated)?);
                    if pos + 2 + len > bytes.len() {
                        return Err(Error::Truncated);
                    }
                    pos += 2 + len;
                }
            }
        }
        Ok(Dhcpv4Options { bytes })
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn iter(&self) -> impl Iterator<Item = Dhcpv4Option<'a>> + 'a {
        self.raw()
            .map(|(code, data)| Dhcpv4Option::decode(code, data))
    }

    /// The options as (code, data), undecoded (Pad and End not yielded).
    fn raw(&self) -> impl Iterator<Item = (u8, &'a [u8])> + 'a {
        let b = self.bytes;
        let mut pos = 0;
        core::iter::from_fn(move || loop {
            match *b.get(pos)? {
                option_code::PAD => pos += 1,
                option_code::END => return None,
                code => {
                    let len = usize::from(*b.get(pos + 1)?);
                    let data = b.get(pos + 2..pos + 2 + len)?;
                    pos += 2 + len;
                    return Some((code, data));
                }
            }
        })
    }

    /// The first option of `code` that `f` accepts, decoding only the
    /// options of that code (what `iter().find_map(f)` gives when `f`
    /// accepts one variant of that code alone, without decoding the rest).
    fn find<T>(&self, code: u8, mut f: impl FnMut(Dhcpv4Option<'a>) -> Option<T>) -> Option<T> {
        self.raw()
            .filter(|&(c, _)| c == code)
            .find_map(|(c, data)| f(Dhcpv4Option::decode(c, data)))
    }

    pub fn message_type(&self) -> Option<Dhcpv4MessageType> {
        self.find(option_code::MESSAGE_TYPE, |o| match o {
            Dhcpv4Option::MessageType(t) => Some(t),
            _ => None,
        })
    }

    pub fn requested_ip(&self) -> Option<Ipv4Addr> {
        self.find(option_code::REQUESTED_IP, |o| match o {
            Dhcpv4Option::RequestedIp(a) => Some(a),
            _ => None,
        })
    }

    pub fn server_id(&self) -> Option<Ipv4Addr> {
        self.find(option_code::SERVER_ID, |o| match o {
            Dhcpv4Option::ServerId(a) => Some(a),
            _ => None,
        })
    }

    pub fn lease_time(&self) -> Option<u32> {
        self.find(option_code::LEASE_TIME, |o| match o {
            Dhcpv4Option::LeaseTime(t) => Some(t),
            _ => None,
        })
    }

    pub fn subnet_mask(&self) -> Option<Ipv4Addr> {
        self.find(option_code::SUBNET_MASK, |o| match o {
            Dhcpv4Option::SubnetMask(a) => Some(a),
            _ => None,
        })
    }

    pub fn routers(&self) -> Option<Ipv4AddrList<'a>> {
        self.find(option_code::ROUTER, |o| match o {
            Dhcpv4Option::Router(l) => Some(l),
            _ => None,
        })
    }

    pub fn dns_servers(&self) -> Option<Ipv4AddrList<'a>> {
        self.find(option_code::DNS_SERVER, |o| match o {
            Dhcpv4Option::DnsServers(l) => Some(l),
            _ => None,
        })
    }

    pub fn parameter_request_list(&self) -> Option<&'a [u8]> {
        self.find(option_code::PARAMETER_REQUEST_LIST, |o| match o {
            Dhcpv4Option::ParameterRequestList(l) => Some(l),
            _ => None,
        })
    }

    pub fn client_id(&self) -> Option<&'a [u8]> {
        self.find(option_code::CLIENT_ID, |o| match o {
            Dhcpv4Option::ClientId(l) => Some(l),
            _ => None,
        })
    }

    pub fn hostname(&self) -> Option<&'a [u8]> {
        self.find(option_code::HOSTNAME, |o| match o {
            Dhcpv4Option::Hostname(l) => Some(l),
            _ => None,
        })
    }
}

/// Writes options into a caller's buffer, then End and padding.
#[derive(Debug)]
pub struct Dhcpv4OptionWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl<'b> Dhcpv4OptionWriter<'b> {
    pub fn new(buf: &'b mut [u8]) -> Self {
        Dhcpv4OptionWriter { buf, pos: 0 }
    }

    /// Append an option; on error nothing is written.
    pub fn put(&mut self, o: &Dhcpv4Option<'_>) -> Result<()> {
        let rest = self.buf.get_mut(self.pos..).ok_or(Error::Truncated)?;
        self.pos += o.emit(rest)?;
        Ok(())
    }

    /// Write End, then Pad up to `min_len` bytes in all (60 makes a
    /// 300-byte BOOTP message); returns the options area.
    pub fn finish(self, min_len: usize) -> Result<&'b [u8]> {
        let end = (self.pos + 1).max(min_len);
        let area = self.buf.get_mut(..end).ok_or(Error::Truncated)?;
        area[self.pos] = option_code::END;
        area[self.pos + 1..].fill(option_code::PAD);
        Ok(area)
    }
}

mod field {
    use core::ops::Range;
    pub const OP: usize = 0;
    pub const HTYPE: usize = 1;
    pub const HLEN: usize = 2;
    pub const HOPS: usize = 3;
    pub const XID: Range<usize> = 4..8;
    pub const SECS: Range<usize> = 8..10;
    pub const FLAGS: Range<usize> = 10..12;
    pub const CIADDR: usize = 12;
    pub const YIADDR: usize = 16;
    pub const SIADDR: usize = 20;
    pub const GIADDR: usize = 24;
    pub const CHADDR: Range<usize> = 28..44;
    pub const SNAME: Range<usize> = 44..108;
    pub const FILE: Range<usize> = 108..236;
    pub const COOKIE: Range<usize> = 236..240;
}

/// A zero-copy view of a DHCP message (the UDP payload).
#[derive(Debug, Clone)]
pub struct Dhcpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Dhcpv4Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Dhcpv4Packet { buffer }
    }

    /// Check the header and the magic cookie (`Malformed` if it is not
    /// DHCP's: plain BOOTP is not served).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        if b.len() < DHCPV4_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::COOKIE] != MAGIC_COOKIE {
            return Err(Error::Malformed);
        }
        Ok(p)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn op(&self) -> u8 {
        self.b()[field::OP]
    }
    pub fn htype(&self) -> u8 {
        self.b()[field::HTYPE]
    }
    pub fn hlen(&self) -> u8 {
        self.b()[field::HLEN]
    }
    pub fn hops(&self) -> u8 {
        self.b()[field::HOPS]
    }
    pub fn xid(&self) -> u32 {
        let b = &self.b()[field::XID];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    pub fn secs(&self) -> u16 {
        let b = &self.b()[field::SECS];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn flags(&self) -> u16 {
        let b = &self.b()[field::FLAGS];
        u16::from_be_bytes([b[0], b[1]])
    }
    fn addr(&self, at: usize) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
    }
    pub fn ciaddr(&self) -> Ipv4Addr {
        self.addr(field::CIADDR)
    }
    pub fn yiaddr(&self) -> Ipv4Addr {
        self.addr(field::YIADDR)
    }
    pub fn siaddr(&self) -> Ipv4Addr {
        self.addr(field::SIADDR)
    }
    pub fn giaddr(&self) -> Ipv4Addr {
        self.addr(field::GIADDR)
    }
    pub fn chaddr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[field::CHADDR]);
        a
    }
    pub fn sname(&self) -> &[u8] {
        &self.b()[field::SNAME]
    }
    pub fn file(&self) -> &[u8] {
        &self.b()[field::FILE]
    }
    pub fn options(&self) -> &[u8] {
        &self.b()[DHCPV4_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Dhcpv4Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_op(&mut self, v: u8) {
        self.bm()[field::OP] = v;
    }
    pub fn set_htype(&mut self, v: u8) {
        self.bm()[field::HTYPE] = v;
    }
    pub fn set_hlen(&mut self, v: u8) {
        self.bm()[field::HLEN] = v;
    }
    pub fn set_hops(&mut self, v: u8) {
        self.bm()[field::HOPS] = v;
    }
    pub fn set_xid(&mut self, v: u32) {
        self.bm()[field::XID].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_secs(&mut self, v: u16) {
        self.bm()[field::SECS].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_flags(&mut self, v: u16) {
        self.bm()[field::FLAGS].copy_from_slice(&v.to_be_bytes());
    }
    fn set_addr(&mut self, at: usize, a: Ipv4Addr) {
        self.bm()[at..at + 4].copy_from_slice(&a.octets());
    }
    pub fn set_ciaddr(&mut self, a: Ipv4Addr) {
        self.set_addr(field::CIADDR, a);
    }
    pub fn set_yiaddr(&mut self, a: Ipv4Addr) {
        self.set_addr(field::YIADDR, a);
    }
    pub fn set_siaddr(&mut self, a: Ipv4Addr) {
        self.set_addr(field::SIADDR, a);
    }
    pub fn set_giaddr(&mut self, a: Ipv4Addr) {
        self.set_addr(field::GIADDR, a);
    }
    pub fn set_chaddr(&mut self, a: &[u8; 16]) {
        self.bm()[field::CHADDR].copy_from_slice(a);
    }
    /// Copy `s` into sname, cut at 64 bytes and zero-padded.
    pub fn set_sname(&mut self, s: &[u8]) {
        copy_padded(&mut self.bm()[field::SNAME], s);
    }
    /// Copy `s` into file, cut at 128 bytes and zero-padded.
    pub fn set_file(&mut self, s: &[u8]) {
        copy_padded(&mut self.bm()[field::FILE], s);
    }
    pub fn set_magic_cookie(&mut self) {
        self.bm()[field::COOKIE].copy_from_slice(&MAGIC_COOKIE);
    }
    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[DHCPV4_HEADER_LEN..]
    }
}

fn copy_padded(dst: &mut [u8], s: &[u8]) {
    let n = s.len().min(dst.len());
    dst[..n].copy_from_slice(&s[..n]);
    dst[n..].fill(0);
}

/// A decoded DHCP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dhcpv4Repr<'a> {
    /// [`BOOTREQUEST`] or [`BOOTREPLY`].
    pub op: u8,
    pub htype: u8,
    pub hlen: u8,
    pub hops: u8,
    pub xid: u32,
    pub secs: u16,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub siaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub chaddr: [u8; 16],
    /// At most 64 bytes are emitted (zero-padded).
    pub sname: &'a [u8],
    /// At most 128 bytes are emitted (zero-padded).
    pub file: &'a [u8],
    pub options: Dhcpv4Options<'a>,
}

impl<'a> Dhcpv4Repr<'a> {
    /// Decode a message: op must be 1 or 2 (`Malformed`), the options as
    /// [`Dhcpv4Options::new_checked`] says.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Dhcpv4Packet<&'a T>) -> Result<Self> {
        let b: &'a [u8] = p.buffer.as_ref();
        let p = Dhcpv4Packet::new_checked(b)?;
        if p.op() != BOOTREQUEST && p.op() != BOOTREPLY {
            return Err(Error::Malformed);
        }
        Ok(Dhcpv4Repr {
            op: p.op(),
            htype: p.htype(),
            hlen: p.hlen(),
            hops: p.hops(),
            xid: p.xid(),
            secs: p.secs(),
            flags: p.flags(),
            ciaddr: p.ciaddr(),
            yiaddr: p.yiaddr(),
            siaddr: p.siaddr(),
            giaddr: p.giaddr(),
            chaddr: p.chaddr(),
            sname: &b[field::SNAME],
            file: &b[field::FILE],
            options: Dhcpv4Options::new_checked(&b[DHCPV4_HEADER_LEN..])?,
        })
    }

    /// The client's Ethernet address (htype 1, hlen 6).
    pub fn client_mac(&self) -> Option<MacAddr> {
        if self.htype != 1 || self.hlen != 6 {
            return None;
        }
        let c = &self.chaddr;
        Some(MacAddr([c[0], c[1], c[2], c[3], c[4], c[5]]))
    }

    pub fn broadcast(&self) -> bool {
        self.flags & FLAG_BROADCAST != 0
    }

    pub fn message_type(&self) -> Option<Dhcpv4MessageType> {
        self.options.message_type()
    }

    pub fn buffer_len(&self) -> usize {
        DHCPV4_HEADER_LEN + self.options.bytes.len()
    }

    /// Write the message; `Truncated` if `buf` is shorter than
    /// `buffer_len()`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..self.buffer_len()).ok_or(Error::Truncated)?;
        let mut p = Dhcpv4Packet::new_unchecked(out);
        p.set_op(self.op);
        p.set_htype(self.htype);
        p.set_hlen(self.hlen);
        p.set_hops(self.hops);
        p.set_xid(self.xid);
        p.set_secs(self.secs);
        p.set_flags(self.flags);
        p.set_ciaddr(self.ciaddr);
        p.set_yiaddr(self.yiaddr);
        p.set_siaddr(self.siaddr);
        p.set_giaddr(self.giaddr);
        p.set_chaddr(&self.chaddr);
        p.set_sname(self.sname);
        p.set_file(self.file);
        p.set_magic_cookie();
        p.options_mut().copy_from_slice(self.options.bytes);
        Ok(())
    }
}

impl fmt::Display for Dhcpv4Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DHCP xid 0x{:08x}", self.xid)?;
        match self.message_type() {
            Some(t) => write!(f, " {t:?}")?,
            None => f.write_str(" (no type)")?,
        }
        if let Some(m) = self.client_mac() {
            write!(f, " from {m}")?;
        }
        if !self.yiaddr.is_unspecified() {
            write!(f, " yiaddr {}", self.yiaddr)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_and_options() {
        let dns = [Ipv4Addr::new(10, 0, 0, 53)];
        let gw = [Ipv4Addr::new(10, 0, 0, 2)];
        let opts = [
            Dhcpv4Option::MessageType(Dhcpv4MessageType::Offer),
            Dhcpv4Option::ServerId(Ipv4Addr::new(10, 0, 0, 2)),
            Dhcpv4Option::LeaseTime(3600),
            Dhcpv4Option::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)),
            Dhcpv4Option::Router(Ipv4AddrList::Addrs(&gw)),
            Dhcpv4Option::DnsServers(Ipv4AddrList::Addrs(&dns)),
            Dhcpv4Option::Unknown {
                code: 200,
                data: &[1, 2],
            },
        ];
        let mut buf = [0xeeu8; 128];
        let mut w = Dhcpv4OptionWriter::new(&mut buf);
        for o in &opts {
            w.put(o).unwrap();
        }
        let area = w.finish(60).unwrap();
        assert_eq!(area.len(), 60);
        let parsed = Dhcpv4Options::new_checked(area).unwrap();
        assert!(parsed.iter().eq(opts.iter().copied()));
        assert_eq!(parsed.lease_time(), Some(3600));
        assert_eq!(
            parsed.dns_servers().map(|l| l.iter().collect::<Vec<_>>()),
            Some(dns.to_vec())
        );
        assert_eq!(parsed.hostname(), None);
        // No room, data too long, Pad/End are not options to put.
        let mut small = [0u8; 4];
        let mut w = Dhcpv4OptionWriter::new(&mut small);
        assert_eq!(w.put(&opts[1]), Err(Error::Truncated));
        let long = [0u8; 256];
        assert_eq!(w.put(&Dhcpv4Option::Hostname(&long)), Err(Error::Malformed));
        assert_eq!(
            w.put(&Dhcpv4Option::Unknown {
                code: 255,
                data: &[]
            }),
            Err(Error::Malformed)
        );
        assert_eq!(w.finish(5).err(), Some(Error::Truncated));
        // Wrong lengths decode as unknown.
        let odd = [53u8, 2, 1, 1, 3, 3, 10, 0, 0, 255];
        let o = Dhcpv4Options::new_checked(&odd).unwrap();
        assert_eq!(o.message_type(), None);
        assert_eq!(o.routers(), None);
        assert_eq!(o.iter().count(), 2);
        // Truncated options.
        assert_eq!(Dhcpv4Options::new_checked(&[53u8]), Err(Error::Truncated));
        assert_eq!(
            Dhcpv4Options::new_checked(&[53u8, 1]),
            Err(Error::Truncated)
        );
        // After End nothing is read; no End at all is accepted.
        let after = [255u8, 53, 9];
        assert_eq!(
            Dhcpv4Options::new_checked(&after).unwrap().iter().count(),
            0
        );
        let no_end = [0u8, 53, 1, 1];
        assert_eq!(
            Dhcpv4Options::new_checked(&no_end).unwrap().message_type(),
            Some(Dhcpv4MessageType::Discover)
        );
    }

    /// Each accessor decodes only the options of its code: what it returns
    /// must be what the first matching decoded option gives, a malformed
    /// option of that code (read as Unknown) skipped for a later good one.
    #[test]
    fn accessors_are_the_first_good_option_of_their_code() {
        let area = [
            53u8, 2, 1, 1, // message type, wrong length
            3, 3, 10, 0, 0, // router, not a multiple of 4
            0, // pad
            61, 1, 9, // client id, too short
            200, 1, 7, // unknown
            53, 1, 3, // message type: Request
            3, 4, 10, 0, 0, 1, // router
            12, 0, // hostname, empty
            12, 2, b'h', b'x', // hostname
            50, 4, 10, 0, 0, 9, // requested ip
            50, 4, 10, 0, 0, 8, // a second one: not returned
            51, 4, 0, 0, 1, 0, // lease time
            54, 4, 10, 0, 0, 1, // server id
            1, 4, 255, 255, 255, 0, // subnet mask
            6, 8, 1, 1, 1, 1, 8, 8, 8, 8, // dns servers
            55, 2, 1, 3, // parameter request list
            61, 3, 1, 2, 3, // client id
            255, 53, 1, 5, // after End: never read
        ];
        let o = Dhcpv4Options::new_checked(&area).unwrap();
        let first = |want: fn(Dhcpv4Option<'_>) -> bool| o.iter().find(|&x| want(x));
        use Dhcpv4Option as D;
        let mt = first(|x| matches!(x, D::MessageType(_)));
        assert_eq!(mt, Some(D::MessageType(Dhcpv4MessageType::Request)));
        assert_eq!(o.message_type().map(D::MessageType), mt);
        let f = first(|x| matches!(x, D::RequestedIp(_)));
        assert_eq!(o.requested_ip().map(D::RequestedIp), f);
        assert_eq!(o.requested_ip(), Some(Ipv4Addr::new(10, 0, 0, 9)));
        let f = first(|x| matches!(x, D::ServerId(_)));
        assert_eq!(o.server_id().map(D::ServerId), f);
        let f = first(|x| matches!(x, D::LeaseTime(_)));
        assert_eq!(o.lease_time().map(D::LeaseTime), f);
        assert_eq!(o.lease_time(), Some(256));
        let f = first(|x| matches!(x, D::SubnetMask(_)));
        assert_eq!(o.subnet_mask().map(D::SubnetMask), f);
        let f = first(|x| matches!(x, D::Router(_)));
        assert_eq!(o.routers().map(D::Router), f);
        assert_eq!(
            o.routers().map(|l| l.iter().collect::<Vec<_>>()),
            Some(vec![Ipv4Addr::new(10, 0, 0, 1)])
        );
        let f = first(|x| matches!(x, D::DnsServers(_)));
        assert_eq!(o.dns_servers().map(D::DnsServers), f);
        let f = first(|x| matches!(x, D::ParameterRequestList(_)));
        assert_eq!(o.parameter_request_list().map(D::ParameterRequestList), f);
        let f = first(|x| matches!(x, D::ClientId(_)));
        assert_eq!(o.client_id().map(D::ClientId), f);
        assert_eq!(o.client_id(), Some(&[1u8, 2, 3][..]));
        let f = first(|x| matches!(x, D::Hostname(_)));
        assert_eq!(o.hostname().map(D::Hostname), f);
        assert_eq!(o.hostname(), Some(&b"hx"[..]));
        assert_eq!(o.iter().count(), 16);
    }

    #[test]
    fn header_checks() {
        let mut b = [0u8; 241];
        b[0] = 1;
        b[236..240].copy_from_slice(&MAGIC_COOKIE);
        b[240] = 255;
        let p = Dhcpv4Packet::new_checked(&b[..]).unwrap();
        let r = Dhcpv4Repr::parse(&p).unwrap();
        assert_eq!(r.message_type(), None);
        assert_eq!(r.client_mac(), None);
        let mut out = [0u8; 241];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b);
        assert_eq!(r.emit(&mut [0u8; 240]), Err(Error::Truncated));
        assert_eq!(
            Dhcpv4Packet::new_checked(&b[..239]).err(),
            Some(Error::Truncated)
        );
        b[0] = 3;
        let p = Dhcpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Dhcpv4Repr::parse(&p), Err(Error::Malformed));
        b[236] = 0;
        assert_eq!(
            Dhcpv4Packet::new_checked(&b[..]).err(),
            Some(Error::Malformed)
        );
        for v in 0..=255u8 {
            assert_eq!(u8::from(Dhcpv4MessageType::from(v)), v);
        }
    }
}
