//! A byte ring with a fixed *logical* capacity whose storage grows on demand.
//!
//! A connection's buffers are configured large (hundreds of KB) so the
//! window can cover the bandwidth-delay product, but most connections (a SYN
//! flood's embryonic ones, idle relay flows) never buffer more than a few
//! bytes. The ring therefore holds no storage until the first byte is
//! written and then grows by doubling, never past the configured capacity:
//! growth is amortised (a bulk transfer reaches full size after a handful of
//! reallocations and then never allocates again), and memory held is
//! proportional to the most data ever buffered at once. Everything the
//! protocol sees (`capacity`, `free`, so the advertised window and the send
//! space) is computed from the configured capacity, not the storage.

/// Smallest storage allocated once the ring is first written to.
const MIN_ALLOC: usize = 4096;

/// Readable bytes are `[head, head+len)` modulo the storage size. Bytes may
/// also be written *beyond* the readable end (out-of-order data) and made
/// readable later with [`Ring::commit`].
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    /// Storage; its length is the allocation (`<= limit`), grown on demand.
    buf: Box<[u8]>,
    /// The configured capacity.
    limit: usize,
    head: usize,
    len: usize,
}

impl Ring {
    /// A ring of logical capacity `capacity` (at least 1); no storage yet.
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            buf: Box::default(),
            limit: capacity.max(1),
            head: 0,
            len: 0,
        }
    }

    /// The configured capacity (what windows are computed from).
    pub(crate) fn capacity(&self) -> usize {
        self.limit
    }

    /// Bytes of storage currently allocated.
    pub(crate) fn allocated(&self) -> usize {
        self.buf.len()
    }

    /// Make the storage hold at least `need` bytes (relative to `head`),
    /// doubling, at least [`MIN_ALLOC`], at most `limit`. Bytes at every
    /// offset from `head` keep their offset: the old storage is copied
    /// rotated so that `head` becomes 0, which preserves out-of-order bytes
    /// stored past the readable end too.
    fn reserve(&mut self, need: usize) {
        let cap = self.buf.len();
        if need <= cap {
            return;
        }
        let new_cap = need
            .max(cap.saturating_mul(2))
            .max(MIN_ALLOC)
            .min(self.limit);
        let mut new = vec![0u8; new_cap].into_boxed_slice();
        let head = self.head.min(cap);
        if let (Some(tail), Some(front)) = (self.buf.get(head..), self.buf.get(..head)) {
            if let Some(dst) = new.get_mut(..tail.len()) {
                dst.copy_from_slice(tail);
            }
            if let Some(dst) = new.get_mut(tail.len()..cap) {
                dst.copy_from_slice(front);
            }
        }
        self.buf = new;
        self.head = 0;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn free(&self) -> usize {
        self.capacity() - self.len
    }

    /// Copy `data` starting `offset` bytes past the readable end, as far as
    /// it fits; returns how many bytes were written. Does not change `len`.
    pub(crate) fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        let room = self.free().saturating_sub(offset);
        let n = data.len().min(room);
        if n == 0 {
            return 0;
        }
        self.reserve(self.len + offset + n);
        let cap = self.buf.len();
        let mut done = 0;
        while done < n {
            let pos = (self.head + self.len + offset + done) % cap;
            let chunk = (n - done).min(cap - pos);
            if let (Some(dst), Some(src)) = (
                self.buf.get_mut(pos..pos + chunk),
                data.get(done..done + chunk),
            ) {
                dst.copy_from_slice(src);
            }
            done += chunk;
        }
        n
    }

    /// Append `data` as far as it fits; returns the count appended.
    #[cfg(test)]
    pub(crate) fn push(&mut self, data: &[u8]) -> usize {
        let n = self.write_at(0, data);
        self.len += n;
        n
    }

    /// Make `n` bytes written past the end readable.
    pub(crate) fn commit(&mut self, n: usize) {
        // Only bytes written (so within the storage) can become readable.
        self.len = (self.len + n).min(self.buf.len());
    }

    /// Copy readable bytes starting at `offset` into `out`; returns the count.
    pub(crate) fn peek(&self, offset: usize, out: &mut [u8]) -> usize {
        let cap = self.buf.len();
        let n = out.len().min(self.len.saturating_sub(offset));
        let mut done = 0;
        while done < n {
            let pos = (self.head + offset + done) % cap;
            let chunk = (n - done).min(cap - pos);
            if let (Some(dst), Some(src)) = (
                out.get_mut(done..done + chunk),
                self.buf.get(pos..pos + chunk),
            ) {
                dst.copy_from_slice(src);
            }
            done += chunk;
        }
        n
    }

    /// The longest contiguous readable slice starting at `offset`, at most `max` long.
    #[cfg(test)]
    pub(crate) fn contiguous(&self, offset: usize, max: usize) -> &[u8] {
        let cap = self.buf.len();
        if offset >= self.len {
            return &[];
        }
        let pos = (self.head + offset) % cap;
        let n = max.min(self.len - offset).min(cap - pos);
        self.buf.get(pos..pos + n).unwrap_or(&[])
    }

    /// Drop `n` readable bytes from the front.
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        if n == 0 {
            return;
        }
        // `len > 0`, so storage exists and `cap > 0`.
        self.head = (self.head + n) % self.buf.len();
        // `head` is not reset when empty: out-of-order bytes may be stored
        // beyond the readable end, at positions relative to it.
        self.len -= n;
    }

    /// Read (copy then consume) into `out`.
    #[cfg(test)]
    pub(crate) fn pop(&mut self, out: &mut [u8]) -> usize {
        let n = self.peek(0, out);
        self.consume(n);
        n
    }

    /// Lend the readable bytes to `f` as two slices (the second non-empty
    /// only where the data wraps around the end of the storage); `f`
    /// consumes a prefix (of the first, then the second) and returns its
    /// length, which is dropped from the ring. Returns that count (clamped
    /// to what was lent); `f` is not called when nothing is readable.
    pub(crate) fn read_with(&mut self, f: impl FnOnce(&[u8], &[u8]) -> usize) -> usize {
        if self.len == 0 {
            return 0;
        }
        // `len > 0`, so storage exists and `cap > 0`.
        let cap = self.buf.len();
        let first = self.len.min(cap - self.head);
        let a = self.buf.get(self.head..self.head + first).unwrap_or(&[]);
        let b = self.buf.get(..self.len - first).unwrap_or(&[]);
        let n = f(a, b).min(self.len);
        self.consume(n);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_out_of_order() {
        let mut r = Ring::new(8);
        assert_eq!(r.push(b"abcdef"), 6);
        let mut o = [0u8; 4];
        assert_eq!(r.pop(&mut o), 4);
        assert_eq!(&o, b"abcd");
        // 2 readable (ef) at 4..6; write "kl" at offset 2 past end, "ij" at 0.
        assert_eq!(r.write_at(2, b"kl"), 2);
        assert_eq!(r.write_at(0, b"ij"), 2);
        r.commit(4);
        assert_eq!(r.len(), 6);
        assert_eq!(r.contiguous(0, 10), b"efij");
        let mut o = [0u8; 6];
        assert_eq!(r.peek(0, &mut o), 6);
        assert_eq!(&o, b"efijkl");
        assert_eq!(r.push(b"0123"), 2);
        assert_eq!(r.free(), 0);
        assert_eq!(r.write_at(0, b"x"), 0);
    }

    #[test]
    fn reading_lends_wrapped_data_in_two_slices() {
        let mut r = Ring::new(MIN_ALLOC);
        let data: Vec<u8> = (0..MIN_ALLOC).map(|i| (i % 251) as u8).collect();
        assert_eq!(r.push(&data[..3000]), 3000);
        let mut sink = vec![0u8; 2500];
        assert_eq!(r.pop(&mut sink), 2500);
        // 500 readable at 2500..3000; the free space wraps: 3000..4096, 0..2500.
        assert_eq!(r.push(&data[500..]), MIN_ALLOC - 500);
        assert_eq!(r.free(), 0);
        // Readable data wraps too: consume a prefix that spans both slices.
        let mut expected = data[2500..3000].to_vec();
        expected.extend_from_slice(&data[500..]);
        let mut seen = (0, 0);
        let n = r.read_with(|a, b| {
            seen = (a.len(), b.len());
            let mut got = a.to_vec();
            got.extend_from_slice(b);
            assert!(got == expected, "in order across the wrap");
            a.len() + 100
        });
        assert_eq!(seen, (MIN_ALLOC - 2500, 2500));
        assert_eq!(n, MIN_ALLOC - 2500 + 100);
        let mut rest = vec![0u8; MIN_ALLOC];
        let m = r.pop(&mut rest);
        assert!(rest[..m] == expected[n..]);
        // Clamped to what was lent; nothing readable: not called.
        assert_eq!(r.push(&[0; 5]), 5);
        assert_eq!(r.read_with(|a, b| a.len() + b.len() + 7), 5);
        assert_eq!(r.read_with(|_, _| panic!("nothing to read")), 0);
    }

    #[test]
    fn storage_grows_on_demand_up_to_the_capacity() {
        let mut r = Ring::new(100_000);
        assert_eq!(r.allocated(), 0, "nothing until the first write");
        assert_eq!(r.free(), 100_000, "window computed from the capacity");
        assert_eq!(r.push(b"hi"), 2);
        assert_eq!(r.allocated(), MIN_ALLOC);
        // Fill, consume part, refill so the data wraps, then grow: every
        // byte (readable and out-of-order past the end) keeps its offset.
        let pattern: Vec<u8> = (0..MIN_ALLOC + 1000).map(|i| (i % 251) as u8).collect();
        let mut sink = vec![0u8; 2];
        assert_eq!(r.pop(&mut sink), 2);
        assert_eq!(r.push(pattern.get(..3000).unwrap_or(&[])), 3000);
        let mut first = vec![0u8; 2000];
        assert_eq!(r.pop(&mut first), 2000);
        assert_eq!(r.push(pattern.get(3000..4000).unwrap_or(&[])), 1000);
        assert_eq!(r.allocated(), MIN_ALLOC, "still fits: no growth");
        // Out-of-order bytes that fit the current storage (they wrap).
        assert_eq!(r.write_at(1000, b"OOO"), 3);
        // A write that needs more storage: readable 2000 + offset 3000 + 500.
        let big = vec![7u8; 500];
        assert_eq!(r.write_at(3000, &big), 500);
        assert_eq!(r.allocated(), 2 * MIN_ALLOC, "doubled");
        // Fill the gaps and commit everything.
        assert_eq!(r.write_at(0, &[1u8; 1000]), 1000);
        assert_eq!(r.write_at(1003, &[2u8; 1997]), 1997);
        r.commit(3500);
        assert_eq!(r.len(), 5500);
        let mut out = vec![0u8; 5500];
        assert_eq!(r.pop(&mut out), 5500);
        assert_eq!(out.get(..2000), pattern.get(2000..4000));
        assert!(out
            .get(2000..3000)
            .is_some_and(|s| s.iter().all(|&b| b == 1)));
        assert_eq!(out.get(3000..3003), Some(&b"OOO"[..]));
        assert!(out
            .get(3003..5000)
            .is_some_and(|s| s.iter().all(|&b| b == 2)));
        assert!(out.get(5000..).is_some_and(|s| s.iter().all(|&b| b == 7)));
        // Growth stops at the configured capacity, which is never exceeded.
        let fill = vec![9u8; 200_000];
        assert_eq!(r.push(&fill), 100_000);
        assert_eq!(r.allocated(), 100_000);
        assert_eq!(r.free(), 0);
        assert_eq!(r.contiguous(0, 10), &[9u8; 10][..]);
    }
}
