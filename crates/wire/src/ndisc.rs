//! Neighbor Discovery (RFC 4861) messages and options, with RDNSS (RFC
//! 8106). Carried in ICMPv6 ([`crate::icmpv6::Icmpv6Repr::Ndisc`]).
//!
//! ```text
//! RS  133: reserved(4)                                            options
//! RA  134: hop limit, M|O|flags, router lifetime(2),
//!          reachable time(4), retrans timer(4)                   options
//! NS  135: reserved(4), target(16)                                options
//! NA  136: R|S|O + reserved(4), target(16)                        options
//! Redirect 137: reserved(4), target(16), destination(16)          options
//! option: type(1), length(1, in units of 8 octets, never 0), data
//! ```
//!
//! The checks RFC 4861 puts on the IP header (hop limit 255, source and
//! destination kinds) and on values (a multicast target) are the engine's:
//! this module checks the message layout, the code and the options.

use core::fmt;
use std::net::Ipv6Addr;

use crate::ethernet::MacAddr;
use crate::icmpv6::Icmpv6Message;
use crate::ip::Ipv6AddrList;
use crate::ipv6::addr_at;
use crate::{Error, Result};

/// Router Advertisement flag bits (RFC 4861 4.2, RFC 4191 for the
/// preference in bits 3-4).
pub mod ra_flags {
    /// "Managed address configuration" (use DHCPv6 for addresses).
    pub const MANAGED: u8 = 0x80;
    /// "Other configuration" (use DHCPv6 for other information).
    pub const OTHER: u8 = 0x40;
}

/// Neighbor Advertisement flag bits (RFC 4861 4.4).
pub mod na_flags {
    pub const ROUTER: u8 = 0x80;
    pub const SOLICITED: u8 = 0x40;
    pub const OVERRIDE: u8 = 0x20;
}

/// Prefix Information flag bits (RFC 4861 4.6.2).
pub mod prefix_flags {
    pub const ON_LINK: u8 = 0x80;
    pub const AUTONOMOUS: u8 = 0x40;
}

/// Option types.
pub mod option_type {
    pub const SOURCE_LL_ADDR: u8 = 1;
    pub const TARGET_LL_ADDR: u8 = 2;
    pub const PREFIX_INFO: u8 = 3;
    pub const REDIRECTED_HEADER: u8 = 4;
    pub const MTU: u8 = 5;
    pub const RDNSS: u8 = 25;
}

/// The Prefix Information option (RFC 4861 4.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefixInfo {
    pub prefix_len: u8,
    /// [`prefix_flags`] bits.
    pub flags: u8,
    /// Seconds; 0xffffffff is infinity.
    pub valid_lifetime: u32,
    pub preferred_lifetime: u32,
    pub prefix: Ipv6Addr,
}

impl PrefixInfo {
    pub const fn on_link(&self) -> bool {
        self.flags & prefix_flags::ON_LINK != 0
    }

    pub const fn autonomous(&self) -> bool {
        self.flags & prefix_flags::AUTONOMOUS != 0
    }
}

/// One option. A known type whose length does not fit its format reads as
/// `Unknown` (and is ignored, as Linux ignores a short prefix option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdiscOption<'a> {
    /// The link-layer address (6 bytes on Ethernet).
    SourceLinkLayerAddr(&'a [u8]),
    TargetLinkLayerAddr(&'a [u8]),
    PrefixInformation(PrefixInfo),
    /// The quoted IP header and data of a redirected packet.
    RedirectedHeader(&'a [u8]),
    Mtu(u32),
    /// RFC 8106 5.1 Recursive DNS Server option.
    Rdnss {
        /// Seconds; 0xffffffff is infinity, 0 withdraws the servers.
        lifetime: u32,
        servers: Ipv6AddrList<'a>,
    },
    /// Skipped by receivers (RFC 4861 4.6: "Receivers MUST silently ignore
    /// any options they do not recognize"). `data` follows type and length.
    Unknown {
        option_type: u8,
        data: &'a [u8],
    },
}

impl<'a> NdiscOption<'a> {
    /// Decode one option from its whole bytes (type and length included,
    /// `8 * length` long).
    fn decode(b: &'a [u8]) -> NdiscOption<'a> {
        let (t, data) = (b[0], &b[2..]);
        let unknown = NdiscOption::Unknown {
            option_type: t,
            data,
        };
        match (t, b.len()) {
            (option_type::SOURCE_LL_ADDR, _) => NdiscOption::SourceLinkLayerAddr(data),
            (option_type::TARGET_LL_ADDR, _) => NdiscOption::TargetLinkLayerAddr(data),
            (option_type::PREFIX_INFO, 32) => NdiscOption::PrefixInformation(PrefixInfo {
                prefix_len: b[2],
                flags: b[3],
                valid_lifetime: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                preferred_lifetime: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
                prefix: addr_at(b, 16),
            }),
            (option_type::REDIRECTED_HEADER, _) => NdiscOption::RedirectedHeader(&b[8..]),
            (option_type::MTU, 8) => NdiscOption::Mtu(u32::from_be_bytes([b[4], b[5], b[6], b[7]])),
            (option_type::RDNSS, n) if n >= 24 && (n / 8) % 2 == 1 => NdiscOption::Rdnss {
                lifetime: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                servers: Ipv6AddrList::Bytes(&b[8..]),
            },
            _ => unknown,
        }
    }

    /// The Ethernet address of a link-layer address option.
    pub fn mac(data: &[u8]) -> Option<MacAddr> {
        match data {
            [a, b, c, d, e, f] => Some(MacAddr([*a, *b, *c, *d, *e, *f])),
            _ => None,
        }
    }

    /// Bytes this option takes on the wire (a multiple of 8).
    pub fn buffer_len(&self) -> usize {
        let raw = match self {
            NdiscOption::SourceLinkLayerAddr(d)
            | NdiscOption::TargetLinkLayerAddr(d)
            | NdiscOption::Unknown { data: d, .. } => 2 + d.len(),
            NdiscOption::PrefixInformation(_) => 32,
            NdiscOption::RedirectedHeader(d) => 8 + d.len(),
            NdiscOption::Mtu(_) => 8,
            NdiscOption::Rdnss { servers, .. } => 8 + servers.wire_len(),
        };
        raw.div_ceil(8) * 8
    }

    /// Write the option (zero-padded to a multiple of 8) at the start of
    /// `buf`; `Err(Truncated)` if it does not fit, `Err(Malformed)` if it
    /// would be longer than 2040 bytes (the length field's limit).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        if n > 255 * 8 {
            return Err(Error::Malformed);
        }
        let out = buf.get_mut(..n).ok_or(Error::Truncated)?;
        out.fill(0);
        out[1] = (n / 8) as u8;
        match *self {
            NdiscOption::SourceLinkLayerAddr(d) => {
                out[0] = option_type::SOURCE_LL_ADDR;
                out[2..2 + d.len()].copy_from_slice(d);
            }
            NdiscOption::TargetLinkLayerAddr(d) => {
                out[0] = option_type::TARGET_LL_ADDR;
                out[2..2 + d.len()].copy_from_slice(d);
            }
            NdiscOption::Unknown { option_type, data } => {
                out[0] = option_type;
                out[2..2 + data.len()].copy_from_slice(data);
            }
            NdiscOption::PrefixInformation(p) => {
                out[0] = option_type::PREFIX_INFO;
                out[2] = p.prefix_len;
                out[3] = p.flags;
                out[4..8].copy_from_slice(&p.valid_lifetime.to_be_bytes());
                out[8..12].copy_from_slice(&p.preferred_lifetime.to_be_bytes());
                out[16..32].copy_from_slice(&p.prefix.octets());
            }
            NdiscOption::RedirectedHeader(d) => {
                out[0] = option_type::REDIRECTED_HEADER;
                out[8..8 + d.len()].copy_from_slice(d);
            }
            NdiscOption::Mtu(m) => {
                out[0] = option_type::MTU;
                out[4..8].copy_from_slice(&m.to_be_bytes());
            }
            NdiscOption::Rdnss { lifetime, servers } => {
                out[0] = option_type::RDNSS;
                out[4..8].copy_from_slice(&lifetime.to_be_bytes());
                servers.write(&mut out[8..])?;
            }
        }
        Ok(n)
    }
}

/// The options area of a message, validated: every option has a non-zero
/// length and fits. Iterating cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NdiscOptions<'a> {
    bytes: &'a [u8],
}

impl<'a> NdiscOptions<'a> {
    /// RFC 4861 6.1.1/6.1.2/7.1.1/7.1.2/8.1: "All included options have a
    /// length that is greater than zero" (`Malformed` otherwise); an option
    /// running past the message is `Truncated`.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self> {
        let mut pos = 0;
        while pos < bytes.len() {
            let len = match bytes.get(pos + 1) {
                None => return Err(Error::Truncated),
                Some(0) => return Err(Error::Malformed),
                Some(&l) => usize::from(l) * 8,
            };
            if pos + len > bytes.len() {
                return Err(Error::Truncated);
            }
            pos += len;
        }
        Ok(NdiscOptions { bytes })
    }

    /// Wrap options written with [`NdiscOption::emit`] (checked as above).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn iter(&self) -> NdiscOptionsIter<'a> {
        NdiscOptionsIter {
            bytes: self.bytes,
            pos: 0,
        }
    }

    /// The first Source Link-Layer Address option's address.
    pub fn source_ll_addr(&self) -> Option<&'a [u8]> {
        self.iter().find_map(|o| match o {
            NdiscOption::SourceLinkLayerAddr(a) => Some(a),
            _ => None,
        })
    }

    pub fn target_ll_addr(&self) -> Option<&'a [u8]> {
        self.iter().find_map(|o| match o {
            NdiscOption::TargetLinkLayerAddr(a) => Some(a),
            _ => None,
        })
    }

    pub fn mtu(&self) -> Option<u32> {
        self.iter().find_map(|o| match o {
            NdiscOption::Mtu(m) => Some(m),
            _ => None,
        })
    }

    pub fn prefixes(&self) -> impl Iterator<Item = PrefixInfo> + 'a {
        self.iter().filter_map(|o| match o {
            NdiscOption::PrefixInformation(p) => Some(p),
            _ => None,
        })
    }
}

/// Iterator over validated options.
#[derive(Debug, Clone)]
pub struct NdiscOptionsIter<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for NdiscOptionsIter<'a> {
    type Item = NdiscOption<'a>;

    fn next(&mut self) -> Option<NdiscOption<'a>> {
        let len = usize::from(*self.bytes.get(self.pos + 1)?) * 8;
        let b = self.bytes.get(self.pos..self.pos + len)?;
        if len == 0 {
            return None;
        }
        self.pos += len;
        Some(NdiscOption::decode(b))
    }
}

/// A Neighbor Discovery message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdiscRepr<'a> {
    RouterSolicit {
        options: NdiscOptions<'a>,
    },
    RouterAdvert {
        /// Cur Hop Limit (0 = unspecified).
        hop_limit: u8,
        /// [`ra_flags`] bits and the rest of the byte as received.
        flags: u8,
        /// Seconds (0 = not a default router).
        router_lifetime: u16,
        /// Milliseconds (0 = unspecified).
        reachable_time: u32,
        retrans_time: u32,
        options: NdiscOptions<'a>,
    },
    NeighborSolicit {
        target: Ipv6Addr,
        options: NdiscOptions<'a>,
    },
    NeighborAdvert {
        /// [`na_flags`] bits.
        flags: u8,
        target: Ipv6Addr,
        options: NdiscOptions<'a>,
    },
    Redirect {
        target: Ipv6Addr,
        dest: Ipv6Addr,
        options: NdiscOptions<'a>,
    },
}

impl<'a> NdiscRepr<'a> {
    /// Where the options start for each type.
    const fn options_at(t: Icmpv6Message) -> Option<usize> {
        Some(match t {
            Icmpv6Message::RouterSolicit => 8,
            Icmpv6Message::RouterAdvert => 16,
            Icmpv6Message::NeighborSolicit | Icmpv6Message::NeighborAdvert => 24,
            Icmpv6Message::Redirect => 40,
            _ => return None,
        })
    }

    /// Decode a whole ICMPv6 message (type 133 to 137). RFC 4861: "ICMP
    /// Code is 0" (`Malformed` otherwise), "ICMP length (derived from the IP
    /// length) is N or more octets" (`Truncated`), and the options as
    /// [`NdiscOptions::new_checked`] says.
    pub fn parse(msg: &'a [u8]) -> Result<NdiscRepr<'a>> {
        let t = Icmpv6Message::from(*msg.first().ok_or(Error::Truncated)?);
        let at = Self::options_at(t).ok_or(Error::Unsupported)?;
        if msg.len() < at {
            return Err(Error::Truncated);
        }
        if msg[1] != 0 {
            return Err(Error::Malformed);
        }
        let options = NdiscOptions::new_checked(&msg[at..])?;
        let u32_at = |i: usize| u32::from_be_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
        Ok(match t {
            Icmpv6Message::RouterSolicit => NdiscRepr::RouterSolicit { options },
            Icmpv6Message::RouterAdvert => NdiscRepr::RouterAdvert {
                hop_limit: msg[4],
                flags: msg[5],
                router_lifetime: u16::from_be_bytes([msg[6], msg[7]]),
                reachable_time: u32_at(8),
                retrans_time: u32_at(12),
                options,
            },
            Icmpv6Message::NeighborSolicit => NdiscRepr::NeighborSolicit {
                target: addr_at(msg, 8),
                options,
            },
            Icmpv6Message::NeighborAdvert => NdiscRepr::NeighborAdvert {
                flags: msg[4] & (na_flags::ROUTER | na_flags::SOLICITED | na_flags::OVERRIDE),
                target: addr_at(msg, 8),
                options,
            },
            _ => NdiscRepr::Redirect {
                target: addr_at(msg, 8),
                dest: addr_at(msg, 24),
                options,
            },
        })
    }

    pub fn options(&self) -> NdiscOptions<'a> {
        match *self {
            NdiscRepr::RouterSolicit { options }
            | NdiscRepr::RouterAdvert { options, .. }
            | NdiscRepr::NeighborSolicit { options, .. }
            | NdiscRepr::NeighborAdvert { options, .. }
            | NdiscRepr::Redirect { options, .. } => options,
        }
    }

    pub fn msg_type(&self) -> Icmpv6Message {
        match self {
            NdiscRepr::RouterSolicit { .. } => Icmpv6Message::RouterSolicit,
            NdiscRepr::RouterAdvert { .. } => Icmpv6Message::RouterAdvert,
            NdiscRepr::NeighborSolicit { .. } => Icmpv6Message::NeighborSolicit,
            NdiscRepr::NeighborAdvert { .. } => Icmpv6Message::NeighborAdvert,
            NdiscRepr::Redirect { .. } => Icmpv6Message::Redirect,
        }
    }

    /// The whole ICMPv6 message length.
    pub fn buffer_len(&self) -> usize {
        Self::options_at(self.msg_type()).unwrap_or(8) + self.options().bytes.len()
    }

    /// Write type, code and body (not the checksum: [`crate::icmpv6`]
    /// fills it) into `buf`, which must hold `buffer_len()` bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let at = Self::options_at(self.msg_type()).unwrap_or(8);
        buf[0] = self.msg_type().into();
        buf[1..at].fill(0);
        match *self {
            NdiscRepr::RouterSolicit { .. } => {}
            NdiscRepr::RouterAdvert {
                hop_limit,
                flags,
                router_lifetime,
                reachable_time,
                retrans_time,
                ..
            } => {
                buf[4] = hop_limit;
                buf[5] = flags;
                buf[6..8].copy_from_slice(&router_lifetime.to_be_bytes());
                buf[8..12].copy_from_slice(&reachable_time.to_be_bytes());
                buf[12..16].copy_from_slice(&retrans_time.to_be_bytes());
            }
            NdiscRepr::NeighborSolicit { target, .. } => {
                buf[8..24].copy_from_slice(&target.octets());
            }
            NdiscRepr::NeighborAdvert { flags, target, .. } => {
                buf[4] = flags & (na_flags::ROUTER | na_flags::SOLICITED | na_flags::OVERRIDE);
                buf[8..24].copy_from_slice(&target.octets());
            }
            NdiscRepr::Redirect { target, dest, .. } => {
                buf[8..24].copy_from_slice(&target.octets());
                buf[24..40].copy_from_slice(&dest.octets());
            }
        }
        let o = self.options().bytes;
        buf[at..at + o.len()].copy_from_slice(o);
    }
}

impl fmt::Display for NdiscRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NdiscRepr::RouterSolicit { .. } => f.write_str("router solicitation"),
            NdiscRepr::RouterAdvert {
                router_lifetime, ..
            } => write!(f, "router advertisement lifetime {router_lifetime}"),
            NdiscRepr::NeighborSolicit { target, .. } => {
                write!(f, "neighbor solicitation who has {target}")
            }
            NdiscRepr::NeighborAdvert { target, flags, .. } => {
                write!(f, "neighbor advertisement {target} flags 0x{flags:02x}")
            }
            NdiscRepr::Redirect { target, dest, .. } => {
                write!(f, "redirect {dest} to {target}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_length_and_truncated_options() {
        // RS with one zero-length option: the message is invalid.
        let rs = [133u8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(NdiscRepr::parse(&rs), Err(Error::Malformed));
        // An option claiming 16 bytes with 8 present; a lone type byte.
        let rs = [133u8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0];
        assert_eq!(NdiscRepr::parse(&rs), Err(Error::Truncated));
        assert_eq!(NdiscRepr::parse(&rs[..9]), Err(Error::Truncated));
        // Non-zero code; too short for an NS.
        let mut rs = [133u8, 0, 0, 0, 0, 0, 0, 0];
        assert!(NdiscRepr::parse(&rs).is_ok());
        rs[1] = 1;
        assert_eq!(NdiscRepr::parse(&rs), Err(Error::Malformed));
        assert_eq!(
            NdiscRepr::parse(&[135u8, 0, 0, 0, 0, 0, 0, 0]),
            Err(Error::Truncated)
        );
        assert_eq!(NdiscRepr::parse(&[128u8, 0, 0, 0]), Err(Error::Unsupported));
        assert_eq!(NdiscRepr::parse(&[]), Err(Error::Truncated));
    }

    #[test]
    fn options_emit_and_decode() {
        let servers = ["fd00::53".parse().unwrap(), "fd00::54".parse().unwrap()];
        let prefix = PrefixInfo {
            prefix_len: 64,
            flags: prefix_flags::ON_LINK | prefix_flags::AUTONOMOUS,
            valid_lifetime: 86400,
            preferred_lifetime: 14400,
            prefix: "fd77::".parse().unwrap(),
        };
        let opts = [
            NdiscOption::SourceLinkLayerAddr(&[2, 0, 0, 0, 0, 2]),
            NdiscOption::Mtu(1500),
            NdiscOption::PrefixInformation(prefix),
            NdiscOption::Rdnss {
                lifetime: 600,
                servers: Ipv6AddrList::Addrs(&servers),
            },
            NdiscOption::Unknown {
                option_type: 200,
                data: &[1, 2, 3, 4, 5, 6],
            },
        ];
        let mut buf = [0u8; 128];
        let mut n = 0;
        for o in &opts {
            n += o.emit(&mut buf[n..]).unwrap();
        }
        assert_eq!(n, 8 + 8 + 32 + 40 + 8);
        let parsed = NdiscOptions::new_checked(&buf[..n]).unwrap();
        assert!(parsed.iter().eq(opts.iter().copied()));
        assert_eq!(parsed.mtu(), Some(1500));
        assert_eq!(
            parsed.source_ll_addr().and_then(NdiscOption::mac),
            Some(MacAddr([2, 0, 0, 0, 0, 2]))
        );
        assert_eq!(parsed.prefixes().collect::<Vec<_>>(), [prefix]);
        assert!(prefix.on_link() && prefix.autonomous());
        assert_eq!(parsed.target_ll_addr(), None);
        // An MTU option with length 2 reads as unknown (ignored).
        let odd = [5u8, 2, 0, 0, 0, 0, 5, 0xdc, 0, 0, 0, 0, 0, 0, 0, 0];
        let o = NdiscOptions::new_checked(&odd).unwrap();
        assert_eq!(o.mtu(), None);
        assert!(matches!(
            o.iter().next(),
            Some(NdiscOption::Unknown { option_type: 5, .. })
        ));
        // RDNSS with an even length is invalid: unknown.
        let even = [25u8, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let o = NdiscOptions::new_checked(&even).unwrap();
        assert!(matches!(
            o.iter().next(),
            Some(NdiscOption::Unknown {
                option_type: 25,
                ..
            })
        ));
        // No room.
        assert_eq!(
            NdiscOption::Mtu(1).emit(&mut [0u8; 7]),
            Err(Error::Truncated)
        );
        let big = [0u8; 2100];
        assert_eq!(
            NdiscOption::Unknown {
                option_type: 9,
                data: &big
            }
            .emit(&mut [0u8; 2200]),
            Err(Error::Malformed)
        );
    }
}
