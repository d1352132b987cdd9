//! The receive side: receive buffer with in-place out-of-order reassembly,
//! SACK blocks for our ACKs (RFC 2018 receiver side) and the bound on how
//! much out-of-order data is held.

use ustack_wire::tcp::SeqNum;

use super::ring::Ring;

/// Most distinct out-of-order ranges tracked; a segment that would create
/// more is dropped (the peer retransmits it).
const MAX_RANGES: usize = 32;

#[derive(Debug, Clone, Copy)]
struct Range {
    /// Offsets from RCV.NXT (the readable end of the ring).
    start: usize,
    end: usize,
    /// Recency stamp for SACK block ordering.
    stamp: u32,
}

/// The out-of-order ranges, sorted, the first `n` slots used.
type Ranges = [Option<Range>; MAX_RANGES];

/// Readable data plus out-of-order ranges stored in place beyond it.
#[derive(Debug, Clone)]
pub(crate) struct RecvQueue {
    pub(crate) ring: Ring,
    /// Allocated with the first out-of-order segment (a connection that
    /// never sees one, such as an idle one, holds none) and then kept, as
    /// the ring keeps its storage.
    ranges: Option<Box<Ranges>>,
    n: usize,
    stamp: u32,
}

/// What an insertion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inserted {
    /// Bytes that became in-order (RCV.NXT advances by this).
    pub(crate) advanced: usize,
    /// The segment was (at least partly) out of order.
    pub(crate) out_of_order: bool,
    /// All of the segment's bytes were stored (so a FIN right after it counts).
    pub(crate) complete: bool,
}

impl RecvQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        RecvQueue {
            ring: Ring::new(capacity),
            ranges: None,
            n: 0,
            stamp: 0,
        }
    }

    /// Bytes of window left (right edge = RCV.NXT + free).
    pub(crate) fn free(&self) -> usize {
        self.ring.free()
    }

    pub(crate) fn has_out_of_order(&self) -> bool {
        self.n > 0
    }

    fn slice(&self) -> impl Iterator<Item = Range> + '_ {
        self.ranges
            .iter()
            .flat_map(|r| r.iter())
            .take(self.n)
            .flatten()
            .copied()
    }

    /// Replace the ranges by the first `n` of `new`.
    fn set_ranges(&mut self, new: Ranges, n: usize) {
        match &mut self.ranges {
            Some(r) => **r = new,
            None if n > 0 => self.ranges = Some(Box::new(new)),
            None => {}
        }
        self.n = n;
    }

    /// Store `data` that starts `offset` bytes after RCV.NXT. `ooo_limit`
    /// bounds how far past RCV.NXT out-of-order bytes are kept.
    pub(crate) fn insert(&mut self, offset: usize, data: &[u8], ooo_limit: usize) -> Inserted {
        self.stamp = self.stamp.wrapping_add(1);
        if offset == 0 {
            let written = self.ring.write_at(0, data);
            let mut contiguous = written;
            // Pull in every stored range now touching the in-order data.
            let mut keep = [None; MAX_RANGES];
            let mut k = 0;
            for r in self.slice() {
                if r.start <= contiguous {
                    contiguous = contiguous.max(r.end);
                } else if let Some(s) = keep.get_mut(k) {
                    *s = Some(Range {
                        start: r.start - contiguous,
                        end: r.end - contiguous,
                        ..r
                    });
                    k += 1;
                }
            }
            // Ranges were sorted, but a pulled-in range may reach past a
            // later one: re-check after shifting.
            let mut adjusted = [None; MAX_RANGES];
            let mut m = 0;
            for r in keep.iter().take(k).flatten() {
                if r.start == 0 {
                    // Cannot happen after the loop above, kept for safety.
                    continue;
                }
                if let Some(s) = adjusted.get_mut(m) {
                    *s = Some(*r);
                    m += 1;
                }
            }
            self.set_ranges(adjusted, m);
            self.ring.commit(contiguous);
            return Inserted {
                advanced: contiguous,
                out_of_order: false,
                complete: written == data.len(),
            };
        }
        // Out of order: store in place, bounded by the window and ooo_limit.
        let limit = ooo_limit.min(self.ring.free());
        let allowed = limit.saturating_sub(offset).min(data.len());
        if allowed == 0 {
            return Inserted {
                advanced: 0,
                out_of_order: true,
                complete: false,
            };
        }
        let (mut s, mut e) = (offset, offset + allowed);
        let mut out = [None; MAX_RANGES];
        let mut k = 0;
        let mut placed = false;
        let mut overflow = false;
        let stamp = self.stamp;
        let mut push = |r: Range, out: &mut [Option<Range>; MAX_RANGES], k: &mut usize| match out
            .get_mut(*k)
        {
            Some(slot) => {
                *slot = Some(r);
                *k += 1;
            }
            None => overflow = true,
        };
        for r in self.slice() {
            if r.end < s {
                push(r, &mut out, &mut k);
            } else if e < r.start {
                if !placed {
                    push(
                        Range {
                            start: s,
                            end: e,
                            stamp,
                        },
                        &mut out,
                        &mut k,
                    );
                    placed = true;
                }
                push(r, &mut out, &mut k);
            } else {
                s = s.min(r.start);
                e = e.max(r.end);
            }
        }
        if !placed {
            push(
                Range {
                    start: s,
                    end: e,
                    stamp,
                },
                &mut out,
                &mut k,
            );
        }
        if overflow {
            // Too fragmented: drop this segment (RFC 9293 allows discarding
            // out-of-order segments; the sender retransmits).
            return Inserted {
                advanced: 0,
                out_of_order: true,
                complete: false,
            };
        }
        self.ring
            .write_at(offset, data.get(..allowed).unwrap_or(&[]));
        self.set_ranges(out, k);
        Inserted {
            advanced: 0,
            out_of_order: true,
            complete: allowed == data.len(),
        }
    }

    /// SACK blocks for an ACK, most recent first. RFC 2018 4: "The first
    /// SACK block (i.e., the one immediately following the kind and length
    /// fields in the option) MUST specify the contiguous block of data
    /// containing the segment which triggered this ACK ... The SACK option
    /// SHOULD be filled out by repeating the most recently reported SACK
    /// blocks". We order by how recently each block grew.
    pub(crate) fn sack_blocks(&self, rcv_nxt: SeqNum, max: usize) -> [Option<(SeqNum, SeqNum)>; 4] {
        let mut all = [None; MAX_RANGES];
        for (slot, r) in all.iter_mut().zip(self.slice()) {
            *slot = Some(r);
        }
        let all = all.get_mut(..self.n).unwrap_or(&mut []);
        all.sort_unstable_by_key(|r| core::cmp::Reverse(r.map_or(0, |r| r.stamp)));
        let mut out = [None; 4];
        for (o, r) in out.iter_mut().zip(all.iter().flatten()).take(max.min(4)) {
            *o = Some((rcv_nxt + r.start, rcv_nxt + r.end));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembles_out_of_order() {
        let mut q = RecvQueue::new(100);
        q.insert(0, b"in order", 100);
        assert!(q.ranges.is_none(), "no range storage without reordering");
        let mut sink = [0u8; 8];
        assert_eq!(q.ring.pop(&mut sink), 8);
        let r = q.insert(5, b"fgh", 100);
        assert!(q.ranges.is_some());
        assert_eq!(
            r,
            Inserted {
                advanced: 0,
                out_of_order: true,
                complete: true
            }
        );
        q.insert(10, b"klm", 100);
        let b = q.sack_blocks(SeqNum(1000), 4);
        assert_eq!(
            b[0],
            Some((SeqNum(1010), SeqNum(1013))),
            "most recent first"
        );
        assert_eq!(b[1], Some((SeqNum(1005), SeqNum(1008))));
        assert_eq!(b[2], None);
        let r = q.insert(0, b"abcde", 100);
        assert_eq!(r.advanced, 8);
        assert!(q.has_out_of_order());
        let r = q.insert(0, b"ij", 100);
        assert_eq!(r.advanced, 5);
        assert!(!q.has_out_of_order());
        let mut out = [0u8; 20];
        let n = q.ring.pop(&mut out);
        assert_eq!(&out[..n], b"abcdefghijklm");
    }

    #[test]
    fn bounded_by_window_and_limit() {
        let mut q = RecvQueue::new(10);
        let r = q.insert(8, b"xyzw", 100);
        assert!(!r.complete);
        let r = q.insert(2, b"ab", 4);
        assert!(r.complete);
        let r = q.insert(5, b"ab", 4);
        assert!(!r.complete);
        let mut q = RecvQueue::new(1000);
        for i in 0..40 {
            q.insert(10 + i * 3, b"a", 1000);
        }
        assert!(q.has_out_of_order());
        assert_eq!(q.sack_blocks(SeqNum(0), 4).iter().flatten().count(), 4);
    }
}
