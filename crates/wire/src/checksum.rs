//! The Internet checksum (RFC 1071) with an incremental update helper (RFC 1624).
//!
//! `sum` accumulates 16-bit big-endian words into a 32-bit (unfolded) ones'
//! complement sum; `fold` reduces it to 16 bits; `checksum` returns the
//! complemented value to store in a header.

use std::net::Ipv4Addr;

/// Accumulate `data` (as big-endian 16-bit words, odd trailing byte padded
/// with zero) onto `initial`. The result is not folded.
#[inline]
pub fn sum(data: &[u8], initial: u32) -> u32 {
    // Sum 8 bytes at a time into a u64 to cut carries, then fold.
    let mut acc: u64 = u64::from(initial);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Add the two 32-bit halves; no overflow possible for < 2^31 chunks.
        acc += (w >> 32) + (w & 0xffff_ffff);
    }
    let rest = chunks.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    // Fold 64 -> 32 bits (ones' complement end-around carry).
    while acc >> 32 != 0 {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    acc as u32
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
