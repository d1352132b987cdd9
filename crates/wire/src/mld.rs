//! Multicast Listener Discovery version 2 (RFC 3810): queries (v1 and v2
//! form) and listener reports. Carried in ICMPv6
//! ([`crate::icmpv6::Icmpv6Repr::Mld`]).
//!
//! ```text
//! Report 143: reserved(2), number of records(2), records...
//! record: type(1), aux data len(1, 32-bit words), number of sources(2),
//!         multicast address(16), sources(16 each), aux data
//! Query 130: max response code(2), reserved(2), multicast address(16),
//!            [v2: Resv|S|QRV(1), QQIC(1), number of sources(2), sources]
//! ```
//!
//! Sending a report (from a link-local source, hop limit 1, with a Router
//! Alert hop-by-hop option, to ff02::16) is the engine's part.

use core::fmt;
use std::net::Ipv6Addr;

use crate::icmpv6::Icmpv6Message;
use crate::ip::Ipv6AddrList;
use crate::ipv6::addr_at;
use crate::{Error, Result};

/// The all-MLDv2-capable-routers address reports go to.
pub const ALL_MLDV2_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);

/// Multicast address record types (RFC 3810 5.2.12).
pub mod record_type {
    pub const MODE_IS_INCLUDE: u8 = 1;
    pub const MODE_IS_EXCLUDE: u8 = 2;
    pub const CHANGE_TO_INCLUDE: u8 = 3;
    pub const CHANGE_TO_EXCLUDE: u8 = 4;
    pub const ALLOW_NEW_SOURCES: u8 = 5;
    pub const BLOCK_OLD_SOURCES: u8 = 6;
}

/// Length of a record without sources and auxiliary data.
pub const RECORD_HEADER_LEN: usize = 20;

/// One Multicast Address Record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MldAddressRecord<'a> {
    pub record_type: u8,
    pub mcast_addr: Ipv6Addr,
    pub sources: Ipv6AddrList<'a>,
    /// A multiple of 4 bytes ("MLDv2 ... does not define any auxiliary
    /// data"; receivers skip it).
    pub aux_data: &'a [u8],
}

impl<'a> MldAddressRecord<'a> {
    /// Decode the record at the start of `b`; returns it and its length.
    pub fn parse(b: &'a [u8]) -> Result<(MldAddressRecord<'a>, usize)> {
        let h = b.get(..RECORD_HEADER_LEN).ok_or(Error::Truncated)?;
        let aux = usize::from(h[1]) * 4;
        let nsrc = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let len = RECORD_HEADER_LEN + nsrc * 16 + aux;
        let all = b.get(..len).ok_or(Error::Truncated)?;
        let src_end = RECORD_HEADER_LEN + nsrc * 16;
        Ok((
            MldAddressRecord {
                record_type: h[0],
                mcast_addr: addr_at(h, 4),
                sources: Ipv6AddrList::Bytes(&all[RECORD_HEADER_LEN..src_end]),
                aux_data: &all[src_end..],
            },
            len,
        ))
    }

    pub fn buffer_len(&self) -> usize {
        RECORD_HEADER_LEN + self.sources.wire_len() + self.aux_data.len()
    }

    /// Write the record at the start of `buf`. `Truncated` if it does not
    /// fit; `Malformed` for auxiliary data not a multiple of 4 (or over
    /// 1020 bytes) or more than 65535 sources.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if !self.aux_data.len().is_multiple_of(4) || self.aux_data.len() > 255 * 4 {
            return Err(Error::Malformed);
        }
        let nsrc = u16::try_from(self.sources.len()).map_err(|_| Error::Malformed)?;
        let n = self.buffer_len();
        let out = buf.get_mut(..n).ok_or(Error::Truncated)?;
        out[0] = self.record_type;
        out[1] = (self.aux_data.len() / 4) as u8;
        out[2..4].copy_from_slice(&nsrc.to_be_bytes());
        out[4..20].copy_from_slice(&self.mcast_addr.octets());
        let src_end = RECORD_HEADER_LEN + self.sources.wire_len();
        self.sources.write(&mut out[RECORD_HEADER_LEN..src_end])?;
        out[src_end..].copy_from_slice(self.aux_data);
        Ok(n)
    }
}

/// The records of a report: `count` records, validated to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MldRecords<'a> {
    bytes: &'a [u8],
    count: u16,
}

impl<'a> MldRecords<'a> {
    /// Check that `count` records fit in `bytes`; bytes after them are not
    /// part of the records (the returned value ends at the last one).
    pub fn new_checked(bytes: &'a [u8], count: u16) -> Result<Self> {
        let mut pos = 0;
        for _ in 0..count {
            let rest = bytes.get(pos..).ok_or(Error::Truncated)?;
            let (_, len) = MldAddressRecord::parse(rest)?;
            pos += len;
        }
        Ok(MldRecords {
            bytes: &bytes[..pos],
            count,
        })
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn iter(&self) -> impl Iterator<Item = MldAddressRecord<'a>> + 'a {
        let mut rest = self.bytes;
        core::iter::from_fn(move || {
            let (r, len) = MldAddressRecord::parse(rest).ok()?;
            rest = rest.get(len..)?;
            Some(r)
        })
    }
}

/// The MLDv2 part of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MldQueryV2<'a> {
    /// The byte holding Resv, S (0x08) and QRV (0x07).
    pub flags: u8,
    /// Querier's Query Interval Code.
    pub qqic: u8,
    pub sources: Ipv6AddrList<'a>,
}

impl MldQueryV2<'_> {
    /// "Suppress Router-Side Processing".
    pub const fn s_flag(&self) -> bool {
        self.flags & 0x08 != 0
    }

    /// Querier's Robustness Variable.
    pub const fn qrv(&self) -> u8 {
        self.flags & 0x07
    }
}

/// An MLD message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MldRepr<'a> {
    Query {
        /// The raw Maximum Response Code (see [`max_resp_delay_ms`]).
        max_resp_code: u16,
        /// Unspecified for a general query.
        mcast_addr: Ipv6Addr,
        /// `None` for an MLDv1 (24-byte) query.
        v2: Option<MldQueryV2<'a>>,
    },
    Report {
        records: MldRecords<'a>,
    },
}

/// RFC 3810 5.1.3: the Maximum Response Delay in milliseconds from the
/// code (exponential form above 32767).
pub const fn max_resp_delay_ms(code: u16) -> u32 {
    if code < 0x8000 {
        code as u32
    } else {
        let mant = (code & 0x0fff) as u32;
        let exp = ((code >> 12) & 0x7) as u32;
        (mant | 0x1000) << (exp + 3)
    }
}

impl<'a> MldRepr<'a> {
    /// Decode a whole ICMPv6 message of type 130 or 143. RFC 3810 8.1: a
    /// query of 24 bytes is MLDv1, one of 28 or more MLDv2, others are
    /// `Malformed` ("Query messages that do not match any of the above
    /// conditions ... MUST be silently ignored").
    pub fn parse(msg: &'a [u8]) -> Result<MldRepr<'a>> {
        if msg.len() < 8 {
            return Err(Error::Truncated);
        }
        match Icmpv6Message::from(msg[0]) {
            Icmpv6Message::MldQuery => {
                let len = msg.len();
                if len < 24 {
                    return Err(Error::Truncated);
                }
                let max_resp_code = u16::from_be_bytes([msg[4], msg[5]]);
                let mcast_addr = addr_at(msg, 8);
                let v2 = match len {
                    24 => None,
                    25..=27 => return Err(Error::Malformed),
                    _ => {
                        let n = usize::from(u16::from_be_bytes([msg[26], msg[27]]));
                        let src = msg.get(28..28 + n * 16).ok_or(Error::Truncated)?;
                        Some(MldQueryV2 {
                            flags: msg[24],
                            qqic: msg[25],
                            sources: Ipv6AddrList::Bytes(src),
                        })
                    }
                };
                Ok(MldRepr::Query {
                    max_resp_code,
                    mcast_addr,
                    v2,
                })
            }
            Icmpv6Message::MldV2Report => {
                let count = u16::from_be_bytes([msg[6], msg[7]]);
                Ok(MldRepr::Report {
                    records: MldRecords::new_checked(&msg[8..], count)?,
                })
            }
            _ => Err(Error::Unsupported),
        }
    }

    /// The whole ICMPv6 message length.
    pub fn buffer_len(&self) -> usize {
        match self {
            MldRepr::Query { v2: None, .. } => 24,
            MldRepr::Query { v2: Some(v2), .. } => 28 + v2.sources.wire_len(),
            MldRepr::Report { records } => 8 + records.bytes.len(),
        }
    }

    /// Write type, code and body (not the checksum) into `buf`, which must
    /// hold `buffer_len()` bytes. A v2 query's source count saturates at
    /// 65535 (such a query cannot fit a packet anyway).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[1..8].fill(0);
        match *self {
            MldRepr::Query {
                max_resp_code,
                mcast_addr,
                v2,
            } => {
                buf[0] = Icmpv6Message::MldQuery.into();
                buf[4..6].copy_from_slice(&max_resp_code.to_be_bytes());
                buf[8..24].copy_from_slice(&mcast_addr.octets());
                if let Some(v2) = v2 {
                    buf[24] = v2.flags;
                    buf[25] = v2.qqic;
                    let n = u16::try_from(v2.sources.len()).unwrap_or(u16::MAX);
                    buf[26..28].copy_from_slice(&n.to_be_bytes());
                    let _ = v2.sources.write(&mut buf[28..]);
                }
            }
            MldRepr::Report { records } => {
                buf[0] = Icmpv6Message::MldV2Report.into();
                buf[6..8].copy_from_slice(&records.count.to_be_bytes());
                buf[8..8 + records.bytes.len()].copy_from_slice(records.bytes);
            }
        }
    }
}

impl fmt::Display for MldRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MldRepr::Query { mcast_addr, v2, .. } => write!(
                f,
                "MLDv{} query {mcast_addr}",
                if v2.is_some() { 2 } else { 1 }
            ),
            MldRepr::Report { records } => {
                write!(f, "MLDv2 report {} records", records.count)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bounds() {
        let srcs = ["fd00::9".parse().unwrap()];
        let recs = [
            MldAddressRecord {
                record_type: record_type::CHANGE_TO_EXCLUDE,
                mcast_addr: "ff02::1:ff00:1".parse().unwrap(),
                sources: Ipv6AddrList::Addrs(&[]),
                aux_data: &[],
            },
            MldAddressRecord {
                record_type: record_type::ALLOW_NEW_SOURCES,
                mcast_addr: "ff05::1:3".parse().unwrap(),
                sources: Ipv6AddrList::Addrs(&srcs),
                aux_data: &[1, 2, 3, 4],
            },
        ];
        let mut buf = [0u8; 128];
        let mut n = 0;
        for r in &recs {
            n += r.emit(&mut buf[n..]).unwrap();
        }
        assert_eq!(n, 20 + 20 + 16 + 4);
        let records = MldRecords::new_checked(&buf[..n + 5], 2).unwrap();
        assert_eq!(records.bytes().len(), n);
        assert!(records.iter().eq(recs.iter().copied()));
        let rep = MldRepr::Report { records };
        let mut msg = vec![0u8; rep.buffer_len()];
        rep.emit(&mut msg);
        assert_eq!(MldRepr::parse(&msg), Ok(rep));
        // Count larger than present, cut record, bad aux length.
        assert_eq!(MldRecords::new_checked(&buf[..n], 3), Err(Error::Truncated));
        assert_eq!(
            MldRecords::new_checked(&buf[..n - 1], 2),
            Err(Error::Truncated)
        );
        let bad = MldAddressRecord {
            aux_data: &[1, 2],
            ..recs[0]
        };
        assert_eq!(bad.emit(&mut buf), Err(Error::Malformed));
        assert_eq!(recs[1].emit(&mut buf[..30]), Err(Error::Truncated));
    }

    #[test]
    fn queries() {
        let mut q = [0u8; 44];
        q[0] = 130;
        q[4..6].copy_from_slice(&10000u16.to_be_bytes());
        assert!(matches!(
            MldRepr::parse(&q[..24]),
            Ok(MldRepr::Query { v2: None, .. })
        ));
        assert_eq!(MldRepr::parse(&q[..26]), Err(Error::Malformed));
        assert_eq!(MldRepr::parse(&q[..20]), Err(Error::Truncated));
        q[24] = 0x0a;
        q[25] = 125;
        q[27] = 1;
        let r = MldRepr::parse(&q).unwrap();
        let MldRepr::Query { v2: Some(v2), .. } = r else {
            panic!("v2 query expected");
        };
        assert!(v2.s_flag());
        assert_eq!((v2.qrv(), v2.qqic, v2.sources.len()), (2, 125, 1));
        let mut out = [0u8; 44];
        r.emit(&mut out);
        assert_eq!(out, q);
        q[27] = 2;
        assert_eq!(MldRepr::parse(&q), Err(Error::Truncated));
        assert_eq!(max_resp_delay_ms(10000), 10000);
        assert_eq!(max_resp_delay_ms(0x8000), 0x1000 << 3);
        assert_eq!(
            MldRepr::parse(&[131u8, 0, 0, 0, 0, 0, 0, 0]),
            Err(Error::Unsupported)
        );
    }
}
