//! DHCPv6 (RFC 8415) client/server messages with the options a small
//! server needs, and DNS servers (RFC 3646).
//!
//! ```text
//! msg-type(1) | transaction-id(3) | options...
//! option: option-code(2) option-len(2) option-data
//! IA_NA data: IAID(4) T1(4) T2(4) IA_NA-options
//! IA Address data: address(16) preferred(4) valid(4) IAaddr-options
//! ```
//!
//! Options stay borrowed bytes of the message, validated when parsed and
//! decoded by iterators (nested ones too); [`Dhcpv6OptionWriter`] builds
//! them into a caller's buffer. Relay messages are `Unsupported`.

use core::fmt;
use std::net::Ipv6Addr;

use crate::ip::Ipv6AddrList;
use crate::ipv6::addr_at;
use crate::{Error, Result};

pub const DHCPV6_HEADER_LEN: usize = 4;
pub const CLIENT_PORT: u16 = 546;
pub const SERVER_PORT: u16 = 547;
/// All_DHCP_Relay_Agents_and_Servers (RFC 8415 7.1).
pub const ALL_RELAY_AGENTS_AND_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);

/// Option codes (RFC 8415 21, RFC 3646).
pub mod option_code {
    pub const CLIENT_ID: u16 = 1;
    pub const SERVER_ID: u16 = 2;
    pub const IA_NA: u16 = 3;
    pub const IA_ADDR: u16 = 5;
    pub const ORO: u16 = 6;
    pub const PREFERENCE: u16 = 7;
    pub const ELAPSED_TIME: u16 = 8;
    pub const STATUS_CODE: u16 = 13;
    pub const RAPID_COMMIT: u16 = 14;
    pub const DNS_SERVERS: u16 = 23;
    pub const DOMAIN_LIST: u16 = 24;
}

/// Status codes (RFC 8415 21.13).
pub mod status {
    pub const SUCCESS: u16 = 0;
    pub const UNSPEC_FAIL: u16 = 1;
    pub const NO_ADDRS_AVAIL: u16 = 2;
    pub const NO_BINDING: u16 = 3;
    pub const NOT_ON_LINK: u16 = 4;
    pub const USE_MULTICAST: u16 = 5;
}

/// Message types (RFC 8415 7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dhcpv6MessageType {
    Solicit,
    Advertise,
    Request,
    Confirm,
    Renew,
    Rebind,
    Reply,
    Release,
    Decline,
    Reconfigure,
    InformationRequest,
    RelayForw,
    RelayRepl,
    Unknown(u8),
}

impl From<u8> for Dhcpv6MessageType {
    fn from(v: u8) -> Self {
        use Dhcpv6MessageType as T;
        match v {
            1 => T::Solicit,
            2 => T::Advertise,
            3 => T::Request,
            4 => T::Confirm,
            5 => T::Renew,
            6 => T::Rebind,
            7 => T::Reply,
            8 => T::Release,
            9 => T::Decline,
            10 => T::Reconfigure,
            11 => T::InformationRequest,
            12 => T::RelayForw,
            13 => T::RelayRepl,
            o => T::Unknown(o),
        }
    }
}

impl From<Dhcpv6MessageType> for u8 {
    fn from(v: Dhcpv6MessageType) -> Self {
        use Dhcpv6MessageType as T;
        match v {
            T::Solicit => 1,
            T::Advertise => 2,
            T::Request => 3,
            T::Confirm => 4,
            T::Renew => 5,
            T::Rebind => 6,
            T::Reply => 7,
            T::Release => 8,
            T::Decline => 9,
            T::Reconfigure => 10,
            T::InformationRequest => 11,
            T::RelayForw => 12,
            T::RelayRepl => 13,
            T::Unknown(o) => o,
        }
    }
}

/// An Identity Association for Non-temporary Addresses (RFC 8415 21.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IaNa<'a> {
    pub iaid: u32,
    /// Seconds.
    pub t1: u32,
    pub t2: u32,
    /// IA Address and Status Code options, among others.
    pub options: Dhcpv6Options<'a>,
}

impl<'a> IaNa<'a> {
    pub fn addresses(&self) -> impl Iterator<Item = IaAddress<'a>> + 'a {
        self.options.iter().filter_map(|o| match o {
            Dhcpv6Option::IaAddr(a) => Some(a),
            _ => None,
        })
    }
}

/// An IA Address option (RFC 8415 21.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IaAddress<'a> {
    pub addr: Ipv6Addr,
    /// Seconds (0xffffffff = infinity).
    pub preferred_lifetime: u32,
    pub valid_lifetime: u32,
    pub options: Dhcpv6Options<'a>,
}

/// One option. A known code whose data does not fit its format (e.g. an
/// IA_NA shorter than 12 bytes or with broken nested options) reads as
/// `Unknown`, which a server ignores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dhcpv6Option<'a> {
    /// A DUID (RFC 8415 11).
    ClientId(&'a [u8]),
    ServerId(&'a [u8]),
    IaNa(IaNa<'a>),
    IaAddr(IaAddress<'a>),
    /// Requested option codes, 2 bytes each (see [`Dhcpv6Option::codes`]).
    Oro(&'a [u8]),
    Preference(u8),
    /// Hundredths of a second.
    ElapsedTime(u16),
    StatusCode {
        code: u16,
        /// UTF-8 text (not checked).
        message: &'a [u8],
    },
    RapidCommit,
    DnsServers(Ipv6AddrList<'a>),
    Unknown {
        code: u16,
        data: &'a [u8],
    },
}

fn u32_at(d: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]])
}

impl<'a> Dhcpv6Option<'a> {
    fn decode(code: u16, data: &'a [u8]) -> Dhcpv6Option<'a> {
        use option_code as c;
        let known = match code {
            c::CLIENT_ID if !data.is_empty() => Some(Dhcpv6Option::ClientId(data)),
            c::SERVER_ID if !data.is_empty() => Some(Dhcpv6Option::ServerId(data)),
            c::IA_NA if data.len() >= 12 => {
                Dhcpv6Options::new_checked(&data[12..]).ok().map(|options| {
                    Dhcpv6Option::IaNa(IaNa {
                        iaid: u32_at(data, 0),
                        t1: u32_at(data, 4),
                        t2: u32_at(data, 8),
                        options,
                    })
                })
            }
            c::IA_ADDR if data.len() >= 24 => {
                Dhcpv6Options::new_checked(&data[24..]).ok().map(|options| {
                    Dhcpv6Option::IaAddr(IaAddress {
                        addr: addr_at(data, 0),
                        preferred_lifetime: u32_at(data, 16),
                        valid_lifetime: u32_at(data, 20),
                        options,
                    })
                })
            }
            c::ORO if data.len().is_multiple_of(2) => Some(Dhcpv6Option::Oro(data)),
            c::PREFERENCE => match data {
                &[p] => Some(Dhcpv6Option::Preference(p)),
                _ => None,
            },
            c::ELAPSED_TIME => match data {
                &[a, b] => Some(Dhcpv6Option::ElapsedTime(u16::from_be_bytes([a, b]))),
                _ => None,
            },
            c::STATUS_CODE if data.len() >= 2 => Some(Dhcpv6Option::StatusCode {
                code: u16::from_be_bytes([data[0], data[1]]),
                message: &data[2..],
            }),
            c::RAPID_COMMIT if data.is_empty() => Some(Dhcpv6Option::RapidCommit),
            c::DNS_SERVERS => Ipv6AddrList::from_bytes(data)
                .ok()
                .map(Dhcpv6Option::DnsServers),
            _ => None,
        };
        known.unwrap_or(Dhcpv6Option::Unknown { code, data })
    }

    /// The option codes of an ORO's data.
    pub fn codes(data: &'a [u8]) -> impl Iterator<Item = u16> + 'a {
        data.chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
    }

    pub fn code(&self) -> u16 {
        use option_code as c;
        match self {
            Dhcpv6Option::ClientId(_) => c::CLIENT_ID,
            Dhcpv6Option::ServerId(_) => c::SERVER_ID,
            Dhcpv6Option::IaNa(_) => c::IA_NA,
            Dhcpv6Option::IaAddr(_) => c::IA_ADDR,
            Dhcpv6Option::Oro(_) => c::ORO,
            Dhcpv6Option::Preference(_) => c::PREFERENCE,
            Dhcpv6Option::ElapsedTime(_) => c::ELAPSED_TIME,
            Dhcpv6Option::StatusCode { .. } => c::STATUS_CODE,
            Dhcpv6Option::RapidCommit => c::RAPID_COMMIT,
            Dhcpv6Option::DnsServers(_) => c::DNS_SERVERS,
            Dhcpv6Option::Unknown { code, .. } => *code,
        }
    }

    fn data_len(&self) -> usize {
        match self {
            Dhcpv6Option::ClientId(d)
            | Dhcpv6Option::ServerId(d)
            | Dhcpv6Option::Oro(d)
            | Dhcpv6Option::Unknown { data: d, .. } => d.len(),
            Dhcpv6Option::IaNa(ia) => 12 + ia.options.bytes.len(),
            Dhcpv6Option::IaAddr(a) => 24 + a.options.bytes.len(),
            Dhcpv6Option::Preference(_) => 1,
            Dhcpv6Option::ElapsedTime(_) => 2,
            Dhcpv6Option::StatusCode { message, .. } => 2 + message.len(),
            Dhcpv6Option::RapidCommit => 0,
            Dhcpv6Option::DnsServers(l) => l.wire_len(),
        }
    }

    /// Code, length and data.
    pub fn buffer_len(&self) -> usize {
        4 + self.data_len()
    }

    /// Write the option at the start of `buf`: `Truncated` if it does not
    /// fit, `Malformed` if its data exceeds 65535 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = u16::try_from(self.data_len()).map_err(|_| Error::Malformed)?;
        let n = self.buffer_len();
        let out = buf.get_mut(..n).ok_or(Error::Truncated)?;
        out[0..2].copy_from_slice(&self.code().to_be_bytes());
        out[2..4].copy_from_slice(&len.to_be_bytes());
        let d = &mut out[4..];
        match *self {
            Dhcpv6Option::ClientId(s)
            | Dhcpv6Option::ServerId(s)
            | Dhcpv6Option::Oro(s)
            | Dhcpv6Option::Unknown { data: s, .. } => d.copy_from_slice(s),
            Dhcpv6Option::IaNa(ia) => {
                d[0..4].copy_from_slice(&ia.iaid.to_be_bytes());
                d[4..8].copy_from_slice(&ia.t1.to_be_bytes());
                d[8..12].copy_from_slice(&ia.t2.to_be_bytes());
                d[12..].copy_from_slice(ia.options.bytes);
            }
            Dhcpv6Option::IaAddr(a) => {
                d[0..16].copy_from_slice(&a.addr.octets());
                d[16..20].copy_from_slice(&a.preferred_lifetime.to_be_bytes());
                d[20..24].copy_from_slice(&a.valid_lifetime.to_be_bytes());
                d[24..].copy_from_slice(a.options.bytes);
            }
            Dhcpv6Option::Preference(p) => d[0] = p,
            Dhcpv6Option::ElapsedTime(t) => d.copy_from_slice(&t.to_be_bytes()),
            Dhcpv6Option::StatusCode { code, message } => {
                d[0..2].copy_from_slice(&code.to_be_bytes());
                d[2..].copy_from_slice(message);
            }
            Dhcpv6Option::RapidCommit => {}
            Dhcpv6Option::DnsServers(l) => l.write(d)?,
        }
        Ok(n)
    }
}

/// A validated run of options: each header and its data fit exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dhcpv6Options<'a> {
    bytes: &'a [u8],
}

impl<'a> Dhcpv6Options<'a> {
    /// `Truncated` when an option header or its data runs past `bytes`.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self> {
        let mut pos = 0;
        while pos < bytes.len() {
            let h = bytes.get(pos..pos + 4).ok_or(Error::Truncated)?;
            let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
            if pos + 4 + len > bytes.len() {
                return Err(Error::Truncated);
            }
            pos += 4 + len;
        }
        Ok(Dhcpv6Options { bytes })
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn iter(&self) -> impl Iterator<Item = Dhcpv6Option<'a>> + 'a {
        let b = self.bytes;
        let mut pos = 0;
        core::iter::from_fn(move || {
            let h = b.get(pos..pos + 4)?;
            let code = u16::from_be_bytes([h[0], h[1]]);
            let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let data = b.get(pos + 4..pos + 4 + len)?;
            pos += 4 + len;
            Some(Dhcpv6Option::decode(code, data))
        })
    }

    fn find<T>(&self, f: impl FnMut(Dhcpv6Option<'a>) -> Option<T>) -> Option<T> {
        self.iter().find_map(f)
    }

    pub fn client_id(&self) -> Option<&'a [u8]> {
        self.find(|o| match o {
            Dhcpv6Option::ClientId(d) => Some(d),
            _ => None,
        })
    }

    pub fn server_id(&self) -> Option<&'a [u8]> {
        self.find(|o| match o {
            Dhcpv6Option::ServerId(d) => Some(d),
            _ => None,
        })
    }

    pub fn ia_na(&self) -> impl Iterator<Item = IaNa<'a>> + 'a {
        self.iter().filter_map(|o| match o {
            Dhcpv6Option::IaNa(ia) => Some(ia),
            _ => None,
        })
    }

    /// The requested option codes.
    pub fn oro(&self) -> Option<impl Iterator<Item = u16> + 'a> {
        self.find(|o| match o {
            Dhcpv6Option::Oro(d) => Some(Dhcpv6Option::codes(d)),
            _ => None,
        })
    }

    pub fn elapsed_time(&self) -> Option<u16> {
        self.find(|o| match o {
            Dhcpv6Option::ElapsedTime(t) => Some(t),
            _ => None,
        })
    }

    pub fn rapid_commit(&self) -> bool {
        self.iter().any(|o| o == Dhcpv6Option::RapidCommit)
    }

    pub fn status_code(&self) -> Option<(u16, &'a [u8])> {
        self.find(|o| match o {
            Dhcpv6Option::StatusCode { code, message } => Some((code, message)),
            _ => None,
        })
    }

    pub fn dns_servers(&self) -> Option<Ipv6AddrList<'a>> {
        self.find(|o| match o {
            Dhcpv6Option::DnsServers(l) => Some(l),
            _ => None,
        })
    }

    pub fn preference(&self) -> Option<u8> {
        self.find(|o| match o {
            Dhcpv6Option::Preference(p) => Some(p),
            _ => None,
        })
    }
}

/// Writes options into a caller's buffer. For IA_NA, write its IA Address
/// options with another writer first and wrap them with
/// [`Dhcpv6Options::new_checked`].
#[derive(Debug)]
pub struct Dhcpv6OptionWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl<'b> Dhcpv6OptionWriter<'b> {
    pub fn new(buf: &'b mut [u8]) -> Self {
        Dhcpv6OptionWriter { buf, pos: 0 }
    }

    /// Append an option; on error nothing is written.
    pub fn put(&mut self, o: &Dhcpv6Option<'_>) -> Result<()> {
        let rest = self.buf.get_mut(self.pos..).ok_or(Error::Truncated)?;
        self.pos += o.emit(rest)?;
        Ok(())
    }

    /// The options written.
    pub fn finish(self) -> Dhcpv6Options<'b> {
        let b: &'b [u8] = self.buf;
        Dhcpv6Options {
            bytes: &b[..self.pos],
        }
    }
}

/// A zero-copy view of a DHCPv6 client/server message (the UDP payload).
#[derive(Debug, Clone)]
pub struct Dhcpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Dhcpv6Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Dhcpv6Packet { buffer }
    }

    /// Check that the 4-byte header is there.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        if p.buffer.as_ref().len() < DHCPV6_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn msg_type(&self) -> Dhcpv6MessageType {
        Dhcpv6MessageType::from(self.buffer.as_ref()[0])
    }

    /// The 24-bit transaction id.
    pub fn transaction_id(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[1], b[2], b[3]])
    }

    /// The options area (not validated).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[DHCPV6_HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Dhcpv6Packet<T> {
    pub fn set_msg_type(&mut self, t: Dhcpv6MessageType) {
        self.buffer.as_mut()[0] = t.into();
    }

    /// Set the transaction id (its low 24 bits).
    pub fn set_transaction_id(&mut self, id: u32) {
        self.buffer.as_mut()[1..4].copy_from_slice(&id.to_be_bytes()[1..]);
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[DHCPV6_HEADER_LEN..]
    }
}

/// A client/server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dhcpv6Repr<'a> {
    pub msg_type: Dhcpv6MessageType,
    /// 24 bits.
    pub transaction_id: u32,
    pub options: Dhcpv6Options<'a>,
}

impl<'a> Dhcpv6Repr<'a> {
    /// Decode a message. Relay-forward/reply: `Unsupported`; options as
    /// [`Dhcpv6Options::new_checked`] says.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Dhcpv6Packet<&'a T>) -> Result<Dhcpv6Repr<'a>> {
        let b: &'a [u8] = p.buffer.as_ref();
        let p = Dhcpv6Packet::new_checked(b)?;
        let msg_type = p.msg_type();
        if matches!(
            msg_type,
            Dhcpv6MessageType::RelayForw | Dhcpv6MessageType::RelayRepl
        ) {
            return Err(Error::Unsupported);
        }
        Ok(Dhcpv6Repr {
            msg_type,
            transaction_id: p.transaction_id(),
            options: Dhcpv6Options::new_checked(&b[DHCPV6_HEADER_LEN..])?,
        })
    }

    pub fn buffer_len(&self) -> usize {
        DHCPV6_HEADER_LEN + self.options.bytes.len()
    }

    /// Write the message; `Truncated` if `buf` is shorter than
    /// `buffer_len()`. The transaction id's top byte is dropped.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let out = buf.get_mut(..self.buffer_len()).ok_or(Error::Truncated)?;
        let mut p = Dhcpv6Packet::new_unchecked(out);
        p.set_msg_type(self.msg_type);
        p.set_transaction_id(self.transaction_id);
        p.options_mut().copy_from_slice(self.options.bytes);
        Ok(())
    }
}

impl fmt::Display for Dhcpv6Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DHCPv6 {:?} xid 0x{:06x}",
            self.msg_type, self.transaction_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &[u8]) -> Result<Dhcpv6Repr<'_>> {
        Dhcpv6Repr::parse(&Dhcpv6Packet::new_checked(b)?)
    }

    #[test]
    fn packet_view() {
        let mut b = [0u8; 6];
        let mut p = Dhcpv6Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(Dhcpv6MessageType::Advertise);
        p.set_transaction_id(0xff12_3456);
        p.options_mut().copy_from_slice(&[9, 9]);
        let p = Dhcpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Dhcpv6MessageType::Advertise);
        assert_eq!(p.transaction_id(), 0x12_3456);
        assert_eq!(p.options(), &[9, 9]);
        assert_eq!(
            Dhcpv6Packet::new_checked(&b[..3]).err(),
            Some(Error::Truncated)
        );
        // Two option bytes are not an option header.
        assert_eq!(Dhcpv6Repr::parse(&p), Err(Error::Truncated));
    }

    #[test]
    fn build_a_reply_and_parse_it() {
        let addr: Ipv6Addr = "fd00::100".parse().unwrap();
        let dns = ["fd00::53".parse().unwrap()];
        let mut ia_buf = [0u8; 64];
        let mut w = Dhcpv6OptionWriter::new(&mut ia_buf);
        w.put(&Dhcpv6Option::IaAddr(IaAddress {
            addr,
            preferred_lifetime: 3600,
            valid_lifetime: 7200,
            options: Dhcpv6Options::default(),
        }))
        .unwrap();
        let ia_opts = w.finish();
        let duid = [0u8, 3, 0, 1, 2, 0, 0, 0, 0, 2];
        let mut buf = [0u8; 256];
        let mut w = Dhcpv6OptionWriter::new(&mut buf);
        for o in [
            Dhcpv6Option::ServerId(&duid),
            Dhcpv6Option::ClientId(&duid),
            Dhcpv6Option::RapidCommit,
            Dhcpv6Option::IaNa(IaNa {
                iaid: 1,
                t1: 1800,
                t2: 2880,
                options: ia_opts,
            }),
            Dhcpv6Option::StatusCode {
                code: status::SUCCESS,
                message: b"ok",
            },
            Dhcpv6Option::DnsServers(Ipv6AddrList::Addrs(&dns)),
            Dhcpv6Option::ElapsedTime(5),
            Dhcpv6Option::Preference(255),
            Dhcpv6Option::Oro(&[0, 23]),
        ] {
            w.put(&o).unwrap();
        }
        let options = w.finish();
        let repr = Dhcpv6Repr {
            msg_type: Dhcpv6MessageType::Reply,
            transaction_id: 0xabcdef,
            options,
        };
        let mut msg = [0u8; 256];
        repr.emit(&mut msg).unwrap();
        let back = parse(&msg[..repr.buffer_len()]).unwrap();
        assert_eq!(back, repr);
        let o = back.options;
        assert_eq!(o.server_id(), Some(&duid[..]));
        assert!(o.rapid_commit());
        let ia: Vec<_> = o.ia_na().collect();
        assert_eq!((ia[0].iaid, ia[0].t1, ia[0].t2), (1, 1800, 2880));
        let a: Vec<_> = ia[0].addresses().collect();
        assert_eq!((a[0].addr, a[0].valid_lifetime), (addr, 7200));
        assert_eq!(o.status_code(), Some((status::SUCCESS, &b"ok"[..])));
        assert_eq!(o.dns_servers().unwrap().iter().next(), Some(dns[0]));
        assert_eq!(o.elapsed_time(), Some(5));
        assert_eq!(o.preference(), Some(255));
        assert_eq!(o.oro().unwrap().collect::<Vec<_>>(), [23]);
        // Every truncation fails or parses fewer options; none panics.
        for n in 0..repr.buffer_len() {
            let _ = parse(&msg[..n]).map(|r| r.options.iter().count());
        }
        assert_eq!(parse(&msg[..3]), Err(Error::Truncated));
        assert_eq!(parse(&msg[..9]), Err(Error::Truncated));
        assert_eq!(repr.emit(&mut [0u8; 8]), Err(Error::Truncated));
    }

    #[test]
    fn malformed_options() {
        // An IA_NA of 8 bytes, nested options cut short, odd ORO, rapid
        // commit with data: all unknown.
        let mut b = vec![1u8, 0, 0, 1];
        b.extend_from_slice(&[0, 3, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0]);
        b.extend_from_slice(&[0, 3, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 9]);
        b.extend_from_slice(&[0, 6, 0, 3, 0, 23, 0]);
        b.extend_from_slice(&[0, 14, 0, 1, 0]);
        let r = parse(&b).unwrap();
        assert_eq!(r.options.ia_na().count(), 0);
        assert!(r.options.oro().is_none());
        assert!(!r.options.rapid_commit());
        assert!(r
            .options
            .iter()
            .all(|o| matches!(o, Dhcpv6Option::Unknown { .. })));
        assert_eq!(parse(&[12u8, 0, 0, 0]), Err(Error::Unsupported));
        for v in 0..=255u8 {
            assert_eq!(u8::from(Dhcpv6MessageType::from(v)), v);
        }
        let long = vec![0u8; 70000];
        assert_eq!(
            Dhcpv6Option::ClientId(&long).emit(&mut [0u8; 8]),
            Err(Error::Malformed)
        );
    }
}
