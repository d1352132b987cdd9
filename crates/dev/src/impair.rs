//! Pieces shared by the impairment models: the virtual-clock
//! [`memlink`](crate::memlink), the real-time [`netem`](crate::netem) and
//! [`FaultInject`](crate::wrap::FaultInject).
//!
//! Each model keeps its own decision order and timing (memlink's seeded runs
//! are recorded as regression seeds, so its RNG draw order must not change);
//! what is shared here draws from the generator exactly as each model did.

use std::cmp::Ordering;
use std::time::Duration;

use rand::Rng;

/// Flip one random bit of one random byte of `data` (nothing, and no draw,
/// when `data` is empty). Draws the byte index, then the bit.
pub(crate) fn flip_random_bit<R: Rng + ?Sized>(rng: &mut R, data: &mut [u8]) {
    if data.is_empty() {
        return;
    }
    let i = rng.gen_range(0..data.len());
    let bit = rng.gen_range(0..8u32);
    if let Some(b) = data.get_mut(i) {
        *b ^= 1 << bit;
    }
}

/// Time a bottleneck of `rate_bps` bits per second (more than 0) takes to
/// serialise `len` bytes (`len * 8 / rate`), saturating.
pub(crate) fn serialisation_time(len: usize, rate_bps: u64) -> Duration {
    let nanos = (len as u128 * 8 * 1_000_000_000) / u128::from(rate_bps.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A frame held until `at` (a virtual `Duration` or a real `Instant`); in a
/// min-heap (`BinaryHeap<Reverse<_>>`) frames come out in `at` order, ties
/// in `order` (arrival) order.
pub(crate) struct Scheduled<T> {
    pub(crate) at: T,
    pub(crate) order: u64,
    pub(crate) data: Vec<u8>,
}

impl<T: Ord> PartialEq for Scheduled<T> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.order == other.order
    }
}
impl<T: Ord> Eq for Scheduled<T> {}
impl<T: Ord> PartialOrd for Scheduled<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: Ord> Ord for Scheduled<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at
            .cmp(&other.at)
            .then_with(|| self.order.cmp(&other.order))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn flip_changes_exactly_one_bit_and_skips_empty() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for len in 1..40 {
            let mut d = vec![0u8; len];
            flip_random_bit(&mut rng, &mut d);
            let ones: u32 = d.iter().map(|b| b.count_ones()).sum();
            assert_eq!(ones, 1, "len {len}");
        }
        // An empty frame draws nothing: the generator is where it was.
        let mut a = ChaCha8Rng::seed_from_u64(9);
        let b = a.clone();
        flip_random_bit(&mut a, &mut []);
        assert_eq!(a, b);
    }

    #[test]
    fn serialisation_is_len_times_8_over_rate() {
        assert_eq!(
            serialisation_time(1250, 10_000_000),
            Duration::from_micros(1000)
        );
        assert_eq!(
            serialisation_time(1, 3),
            Duration::from_nanos(2_666_666_666)
        );
        assert_eq!(
            serialisation_time(usize::MAX, 1),
            Duration::from_nanos(u64::MAX)
        );
    }

    #[test]
    fn scheduled_pops_by_time_then_order() {
        let mut q = BinaryHeap::new();
        for (at, order) in [(5u64, 1u64), (3, 2), (5, 0), (3, 3)] {
            q.push(Reverse(Scheduled {
                at,
                order,
                data: Vec::new(),
            }));
        }
        let got: Vec<_> =
            std::iter::from_fn(|| q.pop().map(|Reverse(s)| (s.at, s.order))).collect();
        assert_eq!(got, vec![(3, 2), (3, 3), (5, 0), (5, 1)]);
    }
}
