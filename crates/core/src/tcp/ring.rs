//! A fixed-capacity byte ring: allocated once, no per-segment allocation.

/// Readable bytes are `[head, head+len)` modulo capacity. Bytes may also be
/// written *beyond* the readable end (out-of-order data) and made readable
/// later with [`Ring::commit`].
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    buf: Box<[u8]>,
    head: usize,
    len: usize,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            buf: vec![0u8; capacity.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
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
        let cap = self.capacity();
        let room = self.free().saturating_sub(offset);
        let n = data.len().min(room);
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
    pub(crate) fn push(&mut self, data: &[u8]) -> usize {
        let n = self.write_at(0, data);
        self.len += n;
        n
    }

    /// Make `n` bytes written past the end readable.
    pub(crate) fn commit(&mut self, n: usize) {
        self.len = (self.len + n).min(self.capacity());
    }

    /// Copy readable bytes starting at `offset` into `out`; returns the count.
    pub(crate) fn peek(&self, offset: usize, out: &mut [u8]) -> usize {
        let cap = self.capacity();
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
    pub(crate) fn contiguous(&self, offset: usize, max: usize) -> &[u8] {
        let cap = self.capacity();
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
        self.head = (self.head + n) % self.capacity();
        // `head` is not reset when empty: out-of-order bytes may be stored
        // beyond the readable end, at positions relative to it.
        self.len -= n;
    }

    /// Read (copy then consume) into `out`.
    pub(crate) fn pop(&mut self, out: &mut [u8]) -> usize {
        let n = self.peek(0, out);
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
}
