//! The Internet checksum (RFC 1071) with an incremental update helper (RFC 1624).
//!
//! `sum` accumulates 16-bit big-endian words into a 32-bit (unfolded) ones'
//! complement sum; `fold` reduces it to 16 bits; `checksum` returns the
//! complemented value to store in a header.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Accumulate `data` (as big-endian 16-bit words, odd trailing byte padded
/// with zero) onto `initial`. The result is not folded.
///
/// RFC 1071 2(B): the ones' complement sum is byte-order independent, so the
/// bulk is summed in native order, 32 bytes per step into four independent
/// accumulators (no byte swaps, instruction-level parallelism), and the folded
/// result is swapped once at the end.
#[inline]
pub fn sum(data: &[u8], initial: u32) -> u32 {
    let mut blocks = data.chunks_exact(32);
    let mut acc = [0u64; 4];
    for b in &mut blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            let o = i * 8;
            let w = u64::from_ne_bytes([
                b[o],
                b[o + 1],
                b[o + 2],
                b[o + 3],
                b[o + 4],
                b[o + 5],
                b[o + 6],
                b[o + 7],
            ]);
            // Two 32-bit halves per word: no overflow for inputs < 2^31 bytes.
            *a += (w >> 32) + (w & 0xffff_ffff);
        }
    }
    let native = fold64(acc[0] + acc[1] + acc[2] + acc[3]);
    // The native-order 16-bit sum, in network order.
    let bulk = u64::from(u16::from_be(native));
    // The tail (< 32 bytes) starts at an even offset: sum it big-endian.
    let rest = blocks.remainder();
    let mut tail: u64 = 0;
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        tail += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        tail += u64::from(*last) << 8;
    }
    let mut total = u64::from(initial) + bulk + tail;
    // Fold 64 -> 32 bits (ones' complement end-around carry).
    while total >> 32 != 0 {
        total = (total & 0xffff_ffff) + (total >> 32);
    }
    total as u32
}

/// Fold a 64-bit ones' complement accumulator to 16 bits.
#[inline]
fn fold64(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Fold a 32-bit accumulated sum to 16 bits (not complemented).
#[inline]
pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The checksum of `data` as stored in a header (complemented, folded).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data, 0))
}

/// Sum of the IPv4 pseudo-header used by UDP and TCP (RFC 768, RFC 9293 3.1).
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u32 {
    let s = src.octets();
    let d = dst.octets();
    u32::from(u16::from_be_bytes([s[0], s[1]]))
        + u32::from(u16::from_be_bytes([s[2], s[3]]))
        + u32::from(u16::from_be_bytes([d[0], d[1]]))
        + u32::from(u16::from_be_bytes([d[2], d[3]]))
        + u32::from(protocol)
        + u32::from(length)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 8.1): source and destination
/// addresses, the 32-bit upper-layer packet length and the next header value
/// of the upper-layer protocol (not of an extension header).
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, length: u32) -> u32 {
    let mut s: u32 = 0;
    for a in [src.octets(), dst.octets()] {
        for w in a.chunks_exact(2) {
            s += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
    }
    s + (length >> 16) + (length & 0xffff) + u32::from(next_header)
}

/// An address family's pseudo-header, so the TCP, UDP and ICMPv6 checksum
/// paths take either `Ipv4Addr` or `Ipv6Addr` pairs (both addresses of one
/// family: the pair's type says which pseudo-header applies).
pub trait PseudoHeader: Copy {
    /// RFC 8200 8.1: "IPv6 receivers must discard UDP packets containing a
    /// zero checksum"; RFC 768 lets IPv4 senders omit it.
    const UDP_ZERO_CHECKSUM_ALLOWED: bool;
    /// The unfolded sum of the pseudo-header for an upper-layer packet of
    /// `length` bytes of protocol `protocol` between `src` and `dst`.
    fn pseudo_header(src: Self, dst: Self, protocol: u8, length: u32) -> u32;
}

impl PseudoHeader for Ipv4Addr {
    const UDP_ZERO_CHECKSUM_ALLOWED: bool = true;
    /// The IPv4 length field is 16 bits: longer lengths are truncated (an
    /// IPv4 datagram cannot carry them).
    #[inline]
    fn pseudo_header(src: Self, dst: Self, protocol: u8, length: u32) -> u32 {
        pseudo_header_v4(src, dst, protocol, length as u16)
    }
}

impl PseudoHeader for Ipv6Addr {
    const UDP_ZERO_CHECKSUM_ALLOWED: bool = false;
    #[inline]
    fn pseudo_header(src: Self, dst: Self, protocol: u8, length: u32) -> u32 {
        pseudo_header_v6(&src, &dst, protocol, length)
    }
}

/// Checksum over a pseudo-header sum plus `data` (complemented, folded).
#[inline]
pub fn checksum_with(pseudo: u32, data: &[u8]) -> u16 {
    !fold(sum(data, pseudo))
}

/// True when `data` (which contains its own checksum field) sums to 0xffff,
/// optionally seeded with a pseudo-header sum.
#[inline]
pub fn verify(pseudo: u32, data: &[u8]) -> bool {
    fold(sum(data, pseudo)) == 0xffff
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit field changes from `old`
/// to `new`, given the checksum `hc` currently in the header.
#[inline]
pub fn update(hc: u16, old: u16, new: u16) -> u16 {
    // HC' = ~(~HC + ~m + m')
    let s = u32::from(!hc) + u32::from(!old) + u32::from(new);
    !fold(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: 00 01 f2 03 f4 f5 f6 f7 -> sum 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d, 0)), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56], 0)), 0x1234 + 0x5600);
    }

    #[test]
    fn wide_sum_matches_naive() {
        let data: Vec<u8> = (0..1001u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for len in 0..data.len() {
            let d = &data[..len];
            let mut naive: u32 = 0;
            for p in d.chunks(2) {
                let w = if p.len() == 2 {
                    u16::from_be_bytes([p[0], p[1]])
                } else {
                    u16::from(p[0]) << 8
                };
                naive += u32::from(w);
            }
            assert_eq!(fold(sum(d, 0)), fold(naive), "len {len}");
        }
    }

    #[test]
    fn large_and_unaligned_sums_match_naive() {
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_246_822_519) >> 7) as u8)
            .collect();
        for (start, len) in [
            (0, 65_535),
            (1, 65_534),
            (3, 1500),
            (5, 33),
            (7, 31),
            (0, 64),
        ] {
            let d = &data[start..start + len];
            let mut naive: u32 = 0x1234;
            for p in d.chunks(2) {
                let w = if p.len() == 2 {
                    u16::from_be_bytes([p[0], p[1]])
                } else {
                    u16::from(p[0]) << 8
                };
                naive += u32::from(w);
            }
            assert_eq!(fold(sum(d, 0x1234)), fold(naive), "start {start} len {len}");
        }
        // All ones: the carries must fold, not overflow.
        let ff = vec![0xffu8; 65_536];
        assert_eq!(fold(sum(&ff, 0xffff)), 0xffff);
    }

    #[test]
    fn real_ipv4_header_verifies() {
        // IPv4 header captured from Linux: 10.0.0.1 -> 10.0.0.2, ICMP.
        let h = [
            0x45, 0x00, 0x00, 0x54, 0x8d, 0x2b, 0x40, 0x00, 0x40, 0x01, 0x99, 0x7b, 0x0a, 0x00,
            0x00, 0x01, 0x0a, 0x00, 0x00, 0x02,
        ];
        assert!(verify(0, &h));
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(checksum(&z), 0x997b);
    }

    #[test]
    fn ipv6_pseudo_header_matches_byte_layout() {
        // RFC 8200 8.1 figure: src, dst, 32-bit length, 3 zero bytes, next header.
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst: Ipv6Addr = "ff02::1:ff00:2".parse().unwrap();
        let mut ph = Vec::new();
        ph.extend_from_slice(&src.octets());
        ph.extend_from_slice(&dst.octets());
        ph.extend_from_slice(&0x0001_0020u32.to_be_bytes());
        ph.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(
            fold(pseudo_header_v6(&src, &dst, 58, 0x0001_0020)),
            fold(sum(&ph, 0))
        );
        assert_eq!(
            fold(<Ipv6Addr as PseudoHeader>::pseudo_header(src, dst, 58, 32)),
            fold(pseudo_header_v6(&src, &dst, 58, 32))
        );
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(
            <Ipv4Addr as PseudoHeader>::pseudo_header(a, b, 6, 40),
            pseudo_header_v4(a, b, 6, 40)
        );
    }

    #[test]
    fn incremental_update_matches_recompute() {
        let mut h = [
            0x45u8, 0x00, 0x00, 0x54, 0x8d, 0x2b, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 0x0a, 0x00,
            0x00, 0x01, 0x0a, 0x00, 0x00, 0x02,
        ];
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        // Decrement TTL 0x40 -> 0x3f: word 0x4001 -> 0x3f01.
        let nc = update(c, 0x4001, 0x3f01);
        h[8] = 0x3f;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(nc, checksum(&h));
    }
}
