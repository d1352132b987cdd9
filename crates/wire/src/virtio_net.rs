//! The virtio-net header (`struct virtio_net_hdr`, virtio 1.x section 5.1.6)
//! that a TAP opened with `IFF_VNET_HDR` puts in front of every frame: how
//! the frame's checksum stands (computed, to be computed from `csum_start`,
//! already verified) and whether it is a GSO super-frame that stands for
//! many segments of `gso_size` bytes each.
//!
//! The 10-byte legacy layout, in the host's byte order (the TAP default
//! without `TUNSETVNETLE`/`TUNSETVNETBE`):
//!
//! ```text
//! 0: flags  1: gso_type  2-3: hdr_len  4-5: gso_size  6-7: csum_start  8-9: csum_offset
//! ```
//!
//! A guest controls these bytes: [`VnetRepr::parse`] checks every field
//! against the frame that follows, so that nothing a hostile header says can
//! point outside the frame.

use crate::{Error, Result};

/// Length of the header (`struct virtio_net_hdr`).
pub const VNET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start +
/// csum_offset` holds only the pseudo-header sum; the one's-complement sum
/// from `csum_start` to the end still has to be folded in.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksums were verified.
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_F_RSC_INFO` (only meaningful with a feature we never
/// negotiate).
pub const F_RSC_INFO: u8 = 4;

/// `VIRTIO_NET_HDR_GSO_NONE` and the GSO types.
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP: u8 = 3;
pub const GSO_TCPV6: u8 = 4;
pub const GSO_UDP_L4: u8 = 5;
/// `VIRTIO_NET_HDR_GSO_ECN`: the segments carry ECN marks (CWR on the first).
pub const GSO_ECN: u8 = 0x80;

/// What the header says about the frame's checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Csum {
    /// Nothing: the checksums in the frame are to be verified as usual.
    None,
    /// Partial (`NEEDS_CSUM`): computed over `start..` into `start +
    /// offset` by whoever does the offload; the frame's data did not cross
    /// a wire, so the receiver treats the checksum as good.
    Partial { start: u16, offset: u16 },
    /// Already verified (`DATA_VALID`).
    Valid,
}

/// GSO: the frame stands for segments of `size` payload bytes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gso {
    None,
    /// TCP over IPv4 (`GSO_TCPV4`), `ecn` if `GSO_ECN` was set.
    TcpV4 {
        size: u16,
        ecn: bool,
    },
    /// TCP over IPv6 (`GSO_TCPV6`).
    TcpV6 {
        size: u16,
        ecn: bool,
    },
    /// UDP segmentation (`GSO_UDP_L4`, USO, either IP version): the UDP
    /// payload stands for datagrams of `size` bytes each (the last one may
    /// be shorter), all with the same headers.
    UdpL4 {
        size: u16,
    },
}

/// A parsed, validated virtio-net header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VnetRepr {
    pub csum: Csum,
    pub gso: Gso,
    /// Length of the headers of each segment (Ethernet + IP + TCP); a hint.
    pub hdr_len: u16,
}

impl VnetRepr {
    /// A header for a plain frame: nothing to offload.
    pub const NONE: VnetRepr = VnetRepr {
        csum: Csum::None,
        gso: Gso::None,
        hdr_len: 0,
    };

    /// Split `bytes` into the header and the frame after it, and check the
    /// header against that frame: unknown flags or GSO types, a GSO type
    /// without a segment size (or with one larger than the frame), and
    /// checksum or header offsets outside the frame are `Malformed`; UDP
    /// fragmentation offload (`GSO_UDP`, UFO, which we never negotiate)
    /// is `Unsupported`.
    pub fn parse(bytes: &[u8]) -> Result<(VnetRepr, &[u8])> {
        let (h, frame) = bytes
            .split_at_checked(VNET_HDR_LEN)
            .ok_or(Error::Truncated)?;
        let u16_at = |i: usize| u16::from_ne_bytes([h[i], h[i + 1]]);
        let flags = h[0];
        let gso_type = h[1];
        let hdr_len = u16_at(2);
        let gso_size = u16_at(4);
        let csum_start = u16_at(6);
        let csum_offset = u16_at(8);
        let len = frame.len();
        if flags & !(F_NEEDS_CSUM | F_DATA_VALID | F_RSC_INFO) != 0 {
            return Err(Error::Malformed);
        }
        let csum = if flags & F_NEEDS_CSUM != 0 {
            // The 2-byte checksum field must lie inside the frame.
            let end = usize::from(csum_start) + usize::from(csum_offset) + 2;
            if end > len {
                return Err(Error::Malformed);
            }
            Csum::Partial {
                start: csum_start,
                offset: csum_offset,
            }
        } else if flags & F_DATA_VALID != 0 {
            Csum::Valid
        } else {
            Csum::None
        };
        let ecn = gso_type & GSO_ECN != 0;
        let gso = match gso_type & !GSO_ECN {
            GSO_NONE if ecn => return Err(Error::Malformed),
            GSO_NONE => Gso::None,
            GSO_TCPV4 | GSO_TCPV6 => {
                if gso_size == 0 || usize::from(gso_size) > len {
                    return Err(Error::Malformed);
                }
                if usize::from(hdr_len) > len {
                    return Err(Error::Malformed);
                }
                if gso_type & !GSO_ECN == GSO_TCPV4 {
                    Gso::TcpV4 {
                        size: gso_size,
                        ecn,
                    }
                } else {
                    Gso::TcpV6 {
                        size: gso_size,
                        ecn,
                    }
                }
            }
            GSO_UDP_L4 if ecn => return Err(Error::Malformed),
            GSO_UDP_L4 => {
                if gso_size == 0 || usize::from(gso_size) > len || usize::from(hdr_len) > len {
                    return Err(Error::Malformed);
                }
                Gso::UdpL4 { size: gso_size }
            }
            GSO_UDP => return Err(Error::Unsupported),
            _ => return Err(Error::Malformed),
        };
        if matches!(gso, Gso::None) && usize::from(hdr_len) > len {
            return Err(Error::Malformed);
        }
        Ok((VnetRepr { csum, gso, hdr_len }, frame))
    }

    /// Write the header into the first [`VNET_HDR_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        let Some(h) = buf.get_mut(..VNET_HDR_LEN) else {
            return;
        };
        let (flags, start, offset) = match self.csum {
            Csum::None => (0, 0, 0),
            Csum::Partial { start, offset } => (F_NEEDS_CSUM, start, offset),
            Csum::Valid => (F_DATA_VALID, 0, 0),
        };
        let (gso_type, size) = match self.gso {
            Gso::None => (GSO_NONE, 0),
            Gso::TcpV4 { size, ecn } => (GSO_TCPV4 | if ecn { GSO_ECN } else { 0 }, size),
            Gso::TcpV6 { size, ecn } => (GSO_TCPV6 | if ecn { GSO_ECN } else { 0 }, size),
            Gso::UdpL4 { size } => (GSO_UDP_L4, size),
        };
        h[0] = flags;
        h[1] = gso_type;
        h[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        h[4..6].copy_from_slice(&size.to_ne_bytes());
        h[6..8].copy_from_slice(&start.to_ne_bytes());
        h[8..10].copy_from_slice(&offset.to_ne_bytes());
    }

    /// The checksum need not (or cannot yet) be verified by the receiver.
    pub fn csum_ok(&self) -> bool {
        !matches!(self.csum, Csum::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(flags: u8, gso: u8, hdr_len: u16, size: u16, start: u16, off: u16) -> Vec<u8> {
        let mut v = vec![flags, gso];
        for x in [hdr_len, size, start, off] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        v
    }

    fn with_frame(mut h: Vec<u8>, len: usize) -> Vec<u8> {
        h.resize(VNET_HDR_LEN + len, 0xab);
        h
    }

    #[test]
    fn plain_partial_and_gso_headers_round_trip() {
        let cases = [
            VnetRepr::NONE,
            VnetRepr {
                csum: Csum::Valid,
                gso: Gso::None,
                hdr_len: 0,
            },
            VnetRepr {
                csum: Csum::Partial {
                    start: 34,
                    offset: 16,
                },
                gso: Gso::TcpV4 {
                    size: 1448,
                    ecn: false,
                },
                hdr_len: 66,
            },
            VnetRepr {
                csum: Csum::Partial {
                    start: 34,
                    offset: 16,
                },
                gso: Gso::TcpV4 {
                    size: 1448,
                    ecn: true,
                },
                hdr_len: 66,
            },
            VnetRepr {
                csum: Csum::Partial {
                    start: 34,
                    offset: 6,
                },
                gso: Gso::UdpL4 { size: 1200 },
                hdr_len: 42,
            },
        ];
        for r in cases {
            let mut b = vec![0u8; VNET_HDR_LEN + 3000];
            r.emit(&mut b);
            let (p, frame) = VnetRepr::parse(&b).unwrap();
            assert_eq!(p, r);
            assert_eq!(frame.len(), 3000);
        }
    }

    #[test]
    fn hostile_headers_are_refused() {
        let ok = |h: Vec<u8>, len| VnetRepr::parse(&with_frame(h, len)).map(|_| ());
        // Truncated.
        assert_eq!(VnetRepr::parse(&[0u8; 9]), Err(Error::Truncated));
        // Unknown flag bits.
        assert_eq!(ok(hdr(0x08, 0, 0, 0, 0, 0), 100), Err(Error::Malformed));
        // Checksum field outside the frame (start + offset + 2 > len).
        assert_eq!(ok(hdr(1, 0, 0, 0, 90, 9), 100), Err(Error::Malformed));
        assert_eq!(
            ok(hdr(1, 0, 0, 0, 65535, 65535), 100),
            Err(Error::Malformed)
        );
        assert!(ok(hdr(1, 0, 0, 0, 90, 8), 100).is_ok());
        // GSO without a segment size, or larger than the frame.
        assert_eq!(
            ok(hdr(1, GSO_TCPV4, 54, 0, 34, 16), 100),
            Err(Error::Malformed)
        );
        assert_eq!(
            ok(hdr(1, GSO_TCPV4, 54, 101, 34, 16), 100),
            Err(Error::Malformed)
        );
        // hdr_len beyond the frame.
        assert_eq!(
            ok(hdr(1, GSO_TCPV4, 101, 50, 34, 16), 100),
            Err(Error::Malformed)
        );
        assert_eq!(ok(hdr(0, 0, 101, 0, 0, 0), 100), Err(Error::Malformed));
        // Unknown GSO types, ECN without GSO, and UFO (never negotiated).
        assert_eq!(ok(hdr(0, 2, 0, 0, 0, 0), 100), Err(Error::Malformed));
        assert_eq!(ok(hdr(0, 0x7f, 0, 0, 0, 0), 100), Err(Error::Malformed));
        assert_eq!(ok(hdr(0, GSO_ECN, 0, 0, 0, 0), 100), Err(Error::Malformed));
        assert_eq!(
            ok(hdr(0, GSO_UDP, 0, 8, 0, 0), 100),
            Err(Error::Unsupported)
        );
        // USO: a segment size within the frame, no ECN.
        let frame = with_frame(hdr(1, GSO_UDP_L4, 42, 8, 34, 6), 100);
        assert_eq!(
            VnetRepr::parse(&frame).map(|(v, _)| v.gso),
            Ok(Gso::UdpL4 { size: 8 })
        );
        for bad in [
            hdr(1, GSO_UDP_L4, 42, 0, 34, 6),
            hdr(1, GSO_UDP_L4, 42, 101, 34, 6),
            hdr(1, GSO_UDP_L4, 101, 8, 34, 6),
            hdr(1, GSO_UDP_L4 | GSO_ECN, 42, 8, 34, 6),
        ] {
            assert_eq!(ok(bad, 100), Err(Error::Malformed));
        }
        assert!(ok(hdr(1, GSO_TCPV4, 54, 50, 34, 16), 100).is_ok());
    }
}
