//! The seeded byte streams applications write and verify: byte `i` of a
//! stream is a keyed hash of `(key, i / 8)`, so any loss, duplication,
//! reordering or corruption of data is detected at the exact offset.

/// SplitMix64 finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Byte `offset` of stream `key`.
pub fn byte_at(key: u64, offset: u64) -> u8 {
    let word = mix(key ^ (offset / 8).wrapping_mul(0xa076_1d64_78bd_642f));
    word.to_le_bytes()[(offset % 8) as usize]
}

/// Fill `buf` with the stream `key` starting at `offset`.
pub fn fill(key: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte_at(key, offset + i as u64);
    }
}

/// The first offset (relative to `offset`) where `data` differs from the
/// stream, if any.
pub fn first_mismatch(key: u64, offset: u64, data: &[u8]) -> Option<usize> {
    data.iter()
        .enumerate()
        .find(|(i, &b)| byte_at(key, offset + *i as u64) != b)
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifted_data_is_detected() {
        let mut buf = [0u8; 64];
        fill(7, 100, &mut buf);
        assert_eq!(first_mismatch(7, 100, &buf), None);
        assert_eq!(first_mismatch(7, 101, &buf[1..]), None);
        assert!(
            first_mismatch(7, 100, &buf[1..]).is_some(),
            "a 1-byte shift is caught"
        );
        assert!(
            first_mismatch(8, 100, &buf).is_some(),
            "another stream differs"
        );
    }
}
