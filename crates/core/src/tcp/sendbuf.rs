//! The send buffer: the bytes a connection queued, from the oldest
//! unacknowledged one on, in reference-counted chunks so that a frame can
//! carry its payload by reference instead of by copy (zero-copy transmit).
//!
//! Linux keeps a socket's send queue in skbs whose pages a transmitted
//! frame shares until the device has sent it; acknowledged data frees its
//! pages only once every frame holding them is gone. This buffer does the
//! same with [`Bytes`]: bytes once written never change, so a frame built
//! by [`SendBuf::slices`] still holds the bytes it was built from after an
//! ACK drops them from the buffer and the application writes new data
//! (which goes into fresh storage, or into a chunk's unwritten tail, which
//! no frame can hold). Storage is reused when nothing else holds it.
//!
//! Readable bytes are the frozen chunks (`chunks`) followed by the bytes
//! written since the last freeze (`tail`). Storage is allocated as data is
//! written, in chunks that double with the amount queued up to
//! [`MAX_CHUNK`]: an idle connection holds none, a bulk sender's chunks are
//! large. Everything the protocol sees (`capacity`, `free`, so the send
//! space) is computed from the configured capacity, not the storage.

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

/// Smallest chunk allocated.
const MIN_CHUNK: usize = 4096;
/// Largest chunk allocated: the storage may pass the configured capacity
/// by at most this much (one chunk partly filled), as Linux's send queue
/// passes `sk_sndbuf` by at most one skb.
pub const SEND_CHUNK_MAX: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct SendBuf {
    /// The storage, absent until the first byte is written (an idle
    /// connection stays small).
    store: Option<Box<Store>>,
    /// Readable bytes.
    len: usize,
    /// The configured capacity.
    limit: usize,
}

#[derive(Debug, Clone, Default)]
struct Store {
    /// Frozen readable bytes, oldest first, each with the offset of its
    /// first byte counted from the first byte ever written (so that
    /// finding an offset is a binary search).
    chunks: VecDeque<(u64, Bytes)>,
    /// Readable bytes written since the last freeze, after `chunks`; its
    /// spare capacity is where the next bytes go.
    tail: BytesMut,
    /// Offset (from the first byte ever written) of the first readable
    /// byte.
    start: u64,
    /// Chunks written full, oldest first, kept to be written again once
    /// nothing holds their bytes (neither the readable data nor a frame):
    /// a bulk sender cycles through the same storage, as a ring would,
    /// instead of handing 64 KB to the allocator and taking it back for
    /// every 64 KB sent (which, with glibc returning the memory to the
    /// system each time, costs a page fault per page).
    retired: VecDeque<(BytesMut, usize)>,
    /// Bytes of the allocations kept: `retired`'s and the tail's.
    held: usize,
    /// Size of the tail's allocation.
    tail_alloc: usize,
}

impl Store {
    /// Offset of the first byte of `tail` (`len`: the readable bytes).
    fn tail_start(&self, len: usize) -> u64 {
        self.start + (len - self.tail.len()) as u64
    }

    /// Move the tail's bytes to the frozen chunks.
    fn freeze(&mut self, len: usize) {
        if !self.tail.is_empty() {
            let at = self.tail_start(len);
            self.chunks.push_back((at, self.tail.split().freeze()));
        }
    }

    /// Index in `chunks` of the chunk holding offset `at` (absolute), if
    /// it is frozen.
    fn chunk_index(&self, at: u64) -> Option<usize> {
        let i = self.chunks.partition_point(|(s, _)| *s <= at);
        let i = i.checked_sub(1)?;
        let (s, b) = self.chunks.get(i)?;
        (at < s + b.len() as u64).then_some(i)
    }
}

impl SendBuf {
    /// A buffer of logical capacity `capacity` (at least 1); no storage yet.
    pub(crate) fn new(capacity: usize) -> Self {
        SendBuf {
            store: None,
            len: 0,
            limit: capacity.max(1),
        }
    }

    /// The configured capacity (what the send space is computed from).
    pub(crate) fn capacity(&self) -> usize {
        self.limit
    }

    /// Raise the logical capacity to `capacity` (never lowers it).
    pub(crate) fn grow_capacity(&mut self, capacity: usize) {
        self.limit = self.limit.max(capacity);
    }

    /// Bytes of storage this buffer keeps (frames in flight may still
    /// hold chunks it has let go of).
    pub(crate) fn allocated(&self) -> usize {
        self.store.as_ref().map_or(0, |st| st.held)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn free(&self) -> usize {
        self.limit.saturating_sub(self.len)
    }

    /// Make the tail's spare capacity non-zero, for `want` more bytes: the
    /// bytes in the tail are frozen first (storage is never reallocated
    /// under them), the tail's chunk is kept for later, then a chunk is
    /// taken: the oldest one kept if nothing holds it any more, else a new
    /// one, sized to double with the data queued, within
    /// [`MIN_CHUNK`]..[`SEND_CHUNK_MAX`]. The chunks kept never pass the
    /// configured capacity by more than [`SEND_CHUNK_MAX`]: the oldest
    /// beyond that are let go.
    fn make_room(&mut self, want: usize) -> &mut Store {
        let len = self.len;
        let limit = self.limit;
        let st = self.store.get_or_insert_with(Box::default);
        if st.tail.capacity() > st.tail.len() {
            return st;
        }
        st.freeze(len);
        let size = len
            .max(want)
            .next_power_of_two()
            .clamp(MIN_CHUNK, SEND_CHUNK_MAX)
            .min(limit);
        let old = std::mem::take(&mut st.tail);
        if st.tail_alloc > 0 {
            st.retired.push_back((old, st.tail_alloc));
        }
        st.tail_alloc = 0;
        // The oldest chunk kept, if nothing holds it (the others are newer:
        // if it is held, so are they); one too small for the size now
        // wanted is let go.
        while st
            .retired
            .front_mut()
            .is_some_and(|(b, _)| b.try_reclaim(1))
        {
            let Some((b, was)) = st.retired.pop_front() else {
                break;
            };
            if b.capacity() >= size {
                st.held = st.held - was + b.capacity();
                st.tail_alloc = b.capacity();
                st.tail = b;
                break;
            }
            st.held -= was;
        }
        if st.tail_alloc == 0 {
            st.tail = BytesMut::with_capacity(size);
            st.tail_alloc = st.tail.capacity();
            st.held += st.tail_alloc;
        }
        while st.held > limit.saturating_add(SEND_CHUNK_MAX) {
            match st.retired.pop_front() {
                Some((_, was)) => st.held -= was,
                None => break,
            }
        }
        st
    }

    /// Append `data` as far as it fits; returns the count appended.
    pub(crate) fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        let mut done = 0;
        while done < n {
            let st = self.make_room(n - done);
            let room = st.tail.capacity() - st.tail.len();
            let k = room.min(n - done);
            if let Some(src) = data.get(done..done + k) {
                st.tail.extend_from_slice(src);
            }
            self.len += k;
            done += k;
        }
        n
    }

    /// Lend up to `max` bytes of free space after the readable end to `f`
    /// as two slices (the second is always empty here; the signature is
    /// the receive ring's); `f` fills a prefix and returns how many bytes
    /// it wrote, which become readable. Returns that count (clamped to what
    /// was lent); `f` is not called when there is nothing to lend. The
    /// space lent is what the current chunk has left, so it may be less
    /// than `max` although there is room: the caller comes back for the
    /// rest.
    pub(crate) fn write_with(
        &mut self,
        max: usize,
        f: impl FnOnce(&mut [u8], &mut [u8]) -> usize,
    ) -> usize {
        let want = max.min(self.free());
        if want == 0 {
            return 0;
        }
        let st = self.make_room(want);
        let old = st.tail.len();
        let n = want.min(st.tail.capacity() - old);
        if n == 0 {
            return 0;
        }
        // Lent memory must be initialised: zero what is lent.
        st.tail.resize(old + n, 0);
        let written = match st.tail.get_mut(old..old + n) {
            Some(a) => f(a, &mut []).min(n),
            None => 0,
        };
        st.tail.truncate(old + written);
        self.len += written;
        written
    }

    /// The longest contiguous readable slice starting at `offset`, at most
    /// `max` long.
    pub(crate) fn contiguous(&self, offset: usize, max: usize) -> &[u8] {
        let Some(st) = self.store.as_deref() else {
            return &[];
        };
        if offset >= self.len {
            return &[];
        }
        let at = st.start + offset as u64;
        let n = max.min(self.len - offset);
        let (base, bytes): (u64, &[u8]) = match st.chunk_index(at) {
            Some(i) => match st.chunks.get(i) {
                Some((s, b)) => (*s, b),
                None => return &[],
            },
            None => (st.tail_start(self.len), &st.tail),
        };
        let from = usize::try_from(at - base).unwrap_or(usize::MAX);
        let rest = bytes.get(from..).unwrap_or(&[]);
        rest.get(..n.min(rest.len())).unwrap_or(&[])
    }

    /// Copy readable bytes starting at `offset` into `out`; returns the count.
    pub(crate) fn peek(&self, offset: usize, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len.saturating_sub(offset));
        let mut done = 0;
        while done < n {
            let piece = self.contiguous(offset + done, n - done);
            if piece.is_empty() {
                break;
            }
            if let Some(dst) = out.get_mut(done..done + piece.len()) {
                dst.copy_from_slice(piece);
            }
            done += piece.len();
        }
        done
    }

    /// The `n` readable bytes from `offset` on, by reference: appended to
    /// `out` as one [`Bytes`] per chunk they lie in (the bytes written
    /// since the last freeze are frozen first). Returns the count
    /// referenced (less than `n` only past the readable end).
    pub(crate) fn slices(&mut self, offset: usize, n: usize, out: &mut Vec<Bytes>) -> usize {
        let n = n.min(self.len.saturating_sub(offset));
        let len = self.len;
        let Some(st) = self.store.as_deref_mut() else {
            return 0;
        };
        if n == 0 {
            return 0;
        }
        if offset + n > len - st.tail.len() {
            st.freeze(len);
        }
        let mut at = st.start + offset as u64;
        let end = at + n as u64;
        let Some(mut i) = st.chunk_index(at) else {
            return 0;
        };
        let mut done = 0;
        while at < end {
            let Some((s, b)) = st.chunks.get(i) else {
                break;
            };
            let from = usize::try_from(at - s).unwrap_or(usize::MAX);
            let to = b.len().min(from + (end - at) as usize);
            if from >= to {
                break;
            }
            out.push(b.slice(from..to));
            at += (to - from) as u64;
            done += to - from;
            i += 1;
        }
        done
    }

    /// Drop `n` readable bytes from the front (frames holding them keep
    /// them).
    pub(crate) fn consume(&mut self, n: usize) {
        let mut n = n.min(self.len);
        let Some(st) = self.store.as_deref_mut() else {
            return;
        };
        self.len -= n;
        st.start += n as u64;
        while n > 0 {
            match st.chunks.front_mut() {
                Some((s, b)) => {
                    let k = n.min(b.len());
                    b.advance(k);
                    *s += k as u64;
                    n -= k;
                    if b.is_empty() {
                        st.chunks.pop_front();
                    }
                }
                None => {
                    st.tail.advance(n);
                    n = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn contents(b: &SendBuf) -> Vec<u8> {
        let mut out = vec![0; b.len()];
        let n = b.peek(0, &mut out);
        out.truncate(n);
        out
    }

    #[test]
    fn storage_follows_what_is_queued() {
        let mut b = SendBuf::new(1 << 20);
        assert_eq!(b.allocated(), 0, "nothing until the first byte");
        assert_eq!(b.push(b"hello"), 5);
        assert_eq!(b.allocated(), MIN_CHUNK);
        assert_eq!(b.free(), (1 << 20) - 5);
        assert_eq!(b.push(&vec![7; 300_000]), 300_000);
        assert!(b.allocated() >= 300_005);
        assert!(b.allocated() <= 300_005 + SEND_CHUNK_MAX);
        b.consume(300_005);
        assert!(b.is_empty());
        // The chunks are kept for the next writes (as a ring keeps its
        // storage), never more than the capacity and one chunk.
        assert!(b.allocated() <= (1 << 20) + SEND_CHUNK_MAX);
        // A bulk sender's cycles: after the first, the same storage over
        // and over.
        let mut kept = Vec::new();
        for round in 0..12u8 {
            assert_eq!(b.push(&vec![round; 300_000]), 300_000);
            b.consume(200_000);
            assert_eq!(b.push(&vec![round; 200_000]), 200_000);
            b.consume(300_000);
            kept.push(b.allocated());
        }
        assert!(kept.windows(2).skip(2).all(|w| w[0] == w[1]), "{kept:?}");
        assert!(kept.iter().all(|&k| k <= (1 << 20) + SEND_CHUNK_MAX));
    }

    #[test]
    fn capacity_bounds_what_is_queued() {
        let mut b = SendBuf::new(10);
        assert_eq!(b.push(b"0123456789abc"), 10);
        assert_eq!(b.free(), 0);
        assert_eq!(b.push(b"x"), 0);
        assert_eq!(b.write_with(5, |_, _| 5), 0);
        b.grow_capacity(12);
        assert_eq!(b.push(b"xyz"), 2);
        assert_eq!(contents(&b), b"0123456789xy");
    }

    /// A frame's payload taken by reference keeps its bytes when the
    /// buffer drops them (an ACK) and new data is written.
    #[test]
    fn referenced_bytes_survive_ack_and_new_writes() {
        let mut b = SendBuf::new(8192);
        let first: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        b.push(&first);
        let mut refs = Vec::new();
        assert_eq!(b.slices(1000, 2000, &mut refs), 2000);
        b.consume(3000);
        for _ in 0..20 {
            b.push(&[0xee; 4000]);
            b.write_with(4000, |a, _| {
                a.fill(0xdd);
                a.len()
            });
            let n = b.len();
            b.consume(n);
        }
        let got: Vec<u8> = refs.iter().flat_map(|r| r.iter().copied()).collect();
        assert_eq!(got, first.get(1000..3000).unwrap_or_default());
    }

    #[test]
    fn storage_is_reused_once_no_frame_holds_it() {
        let first_ptr = |b: &mut SendBuf| {
            let mut refs = Vec::new();
            b.slices(0, 1, &mut refs);
            refs.first().map(|r| r.as_ptr())
        };
        let mut b = SendBuf::new(1 << 20);
        // Exactly one chunk, taken by reference, acknowledged.
        b.push(&[1; MIN_CHUNK]);
        let p = first_ptr(&mut b);
        let mut refs = Vec::new();
        b.slices(0, MIN_CHUNK, &mut refs);
        b.consume(MIN_CHUNK);
        // A frame still holds it: new data goes elsewhere.
        b.push(&[2; 100]);
        let q = first_ptr(&mut b);
        assert_ne!(p, q);
        assert!(refs.iter().all(|r| r.iter().all(|&x| x == 1)));
        // Once nothing holds the chunks, their storage comes back.
        refs.clear();
        b.push(&[3; MIN_CHUNK - 100]);
        b.consume(MIN_CHUNK);
        b.push(&[4; 10]);
        let r = first_ptr(&mut b);
        assert_eq!(r, p, "the oldest chunk, free again, is reused");
    }

    #[test]
    fn write_with_lends_initialised_space_and_keeps_what_was_written() {
        let mut b = SendBuf::new(100_000);
        b.push(b"ab");
        let n = b.write_with(10, |a, c| {
            assert!(c.is_empty());
            assert!(a.len() <= 10);
            a[..3].copy_from_slice(b"cde");
            3
        });
        assert_eq!(n, 3);
        assert_eq!(contents(&b), b"abcde");
        // A lender claiming more than it was lent is clamped.
        let n = b.write_with(4, |a, _| {
            a.fill(b'z');
            99
        });
        assert_eq!(n, 4);
        assert_eq!(contents(&b), b"abcdezzzz");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<u8>),
        Lend(usize, u8),
        Consume(usize),
        Refs(usize, usize),
        Grow(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..20_000).prop_map(Op::Push),
            (0usize..20_000, any::<u8>()).prop_map(|(n, v)| Op::Lend(n, v)),
            (0usize..30_000).prop_map(Op::Consume),
            (0usize..30_000, 0usize..70_000).prop_map(|(o, n)| Op::Refs(o, n)),
            (0usize..200_000).prop_map(Op::Grow),
        ]
    }

    proptest! {
        /// Against a plain `VecDeque` model: contents, lengths, slices by
        /// copy and by reference, and every reference taken keeps the
        /// bytes it was taken with whatever happens afterwards.
        #[test]
        fn matches_a_plain_queue(cap in 1usize..100_000, ops in proptest::collection::vec(op(), 1..60)) {
            let mut b = SendBuf::new(cap);
            let mut model: VecDeque<u8> = VecDeque::new();
            let mut limit = cap;
            let mut held: Vec<(Vec<Bytes>, Vec<u8>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(d) => {
                        let n = b.push(&d);
                        prop_assert_eq!(n, d.len().min(limit - model.len()));
                        model.extend(&d[..n]);
                    }
                    Op::Lend(max, v) => {
                        let n = b.write_with(max, |a, _| {
                            let k = a.len().min(max / 2 + 1);
                            a[..k].fill(v);
                            k
                        });
                        prop_assert!(n <= max.min(limit - model.len()));
                        model.extend(std::iter::repeat_n(v, n));
                    }
                    Op::Consume(n) => {
                        b.consume(n);
                        let n = n.min(model.len());
                        model.drain(..n);
                    }
                    Op::Refs(o, n) => {
                        let mut refs = Vec::new();
                        let got = b.slices(o, n, &mut refs);
                        let want: Vec<u8> = model.iter().skip(o).take(n).copied().collect();
                        prop_assert_eq!(got, want.len());
                        let flat: Vec<u8> = refs.iter().flat_map(|r| r.iter().copied()).collect();
                        prop_assert_eq!(&flat, &want);
                        let c = b.contiguous(o, n);
                        prop_assert_eq!(c, &want[..c.len()]);
                        prop_assert!(!c.is_empty() || want.is_empty());
                        held.push((refs, want));
                    }
                    Op::Grow(c) => {
                        b.grow_capacity(c);
                        limit = limit.max(c).max(1);
                    }
                }
                prop_assert_eq!(b.len(), model.len());
                prop_assert_eq!(b.free(), limit - model.len());
                let all: Vec<u8> = model.iter().copied().collect();
                prop_assert_eq!(contents(&b), all);
            }
            for (refs, want) in held {
                let flat: Vec<u8> = refs.iter().flat_map(|r| r.iter().copied()).collect();
                prop_assert_eq!(flat, want);
            }
        }
    }
}
