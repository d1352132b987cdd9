//! Keyed hashing: deterministic given the stack's secret (no OS randomness),
//! unpredictable to a peer that does not know it (so hash tables keyed by
//! attacker-chosen addresses cannot be flooded into one bucket).

use core::hash::BuildHasher;
use siphasher::sip::SipHasher13;

/// A `BuildHasher` for `HashMap`s keyed by network-controlled values.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyedState {
    k0: u64,
    k1: u64,
}

impl KeyedState {
    pub(crate) fn new(secret: &[u8; 16], domain: u64) -> Self {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&secret[..8]);
        b.copy_from_slice(&secret[8..]);
        KeyedState {
            k0: u64::from_le_bytes(a) ^ domain,
            k1: u64::from_le_bytes(b),
        }
    }
}

impl BuildHasher for KeyedState {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

/// A keyed 64-bit hash of `data` (SipHash-1-3), e.g. for RFC 6056 port offsets.
pub(crate) fn keyed_hash(secret: &[u8; 16], domain: u64, data: &[u8]) -> u64 {
    use core::hash::Hasher;
    let mut h = KeyedState::new(secret, domain).build_hasher();
    h.write(data);
    h.finish()
}

/// A small deterministic PRNG (SplitMix64) for non-security values (IP ident
/// start, ephemeral port probing order).
#[derive(Clone, Debug)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_hash_depends_on_secret_and_domain() {
        let a = keyed_hash(&[1; 16], 0, b"x");
        assert_eq!(a, keyed_hash(&[1; 16], 0, b"x"));
        assert_ne!(a, keyed_hash(&[2; 16], 0, b"x"));
        assert_ne!(a, keyed_hash(&[1; 16], 1, b"x"));
    }

    #[test]
    fn splitmix_is_deterministic() {
        let mut a = SplitMix::new(7);
        let mut b = SplitMix::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(a.next_u64(), SplitMix::new(8).next_u64());
    }
}
