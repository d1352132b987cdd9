//! A reusable set of frame buffers for batched device I/O.

/// A fixed number of frame slots in one contiguous allocation, reused from
/// batch to batch: filling and draining it never allocates.
#[derive(Debug, Clone)]
pub struct FrameBatch {
    storage: Vec<u8>,
    lens: Vec<usize>,
    frame_size: usize,
}

impl FrameBatch {
    /// A batch of `capacity` slots of `frame_size` bytes each (both at least 1).
    pub fn new(capacity: usize, frame_size: usize) -> FrameBatch {
        let capacity = capacity.max(1);
        let frame_size = frame_size.max(1);
        FrameBatch {
            storage: vec![0; capacity.saturating_mul(frame_size)],
            lens: Vec::with_capacity(capacity),
            frame_size,
        }
    }

    /// Maximum number of frames.
    pub fn capacity(&self) -> usize {
        self.storage.len() / self.frame_size
    }

    /// Size of each slot in bytes.
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// Number of frames held.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.lens.len() >= self.capacity()
    }

    /// Forget all frames (keeps the memory).
    pub fn clear(&mut self) {
        self.lens.clear();
    }

    /// Frame `i`, if present.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let len = *self.lens.get(i)?;
        let start = i * self.frame_size;
        self.storage.get(start..start + len)
    }

    /// Mutable access to frame `i`, if present.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let len = *self.lens.get(i)?;
        let start = i * self.frame_size;
        self.storage.get_mut(start..start + len)
    }

    /// The frames in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// Copy `frame` into the next free slot. Returns `false` (and stores
    /// nothing) if the batch is full or the frame is larger than a slot.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if frame.len() > self.frame_size {
            return false;
        }
        match self.next_slot() {
            Some(slot) => {
                if let Some(dst) = slot.get_mut(..frame.len()) {
                    dst.copy_from_slice(frame);
                }
                self.commit(frame.len());
                true
            }
            None => false,
        }
    }

    /// The whole next free slot, to be filled in place and then
    /// [`commit`](Self::commit)ted; `None` if the batch is full.
    pub fn next_slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let start = self.lens.len() * self.frame_size;
        self.storage.get_mut(start..start + self.frame_size)
    }

    /// Record that the slot returned by [`next_slot`](Self::next_slot) now
    /// holds a frame of `len` bytes (clamped to the slot size). Does nothing
    /// if the batch is full.
    pub fn commit(&mut self, len: usize) {
        if !self.is_full() {
            self.lens.push(len.min(self.frame_size));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_get_and_limits() {
        let mut b = FrameBatch::new(2, 4);
        assert_eq!(b.capacity(), 2);
        assert!(b.push(&[1, 2, 3]));
        assert!(!b.push(&[1, 2, 3, 4, 5]), "oversized frame must be refused");
        assert!(b.push(&[9]));
        assert!(b.is_full());
        assert!(!b.push(&[7]));
        assert_eq!(b.get(0), Some(&[1, 2, 3][..]));
        assert_eq!(b.get(1), Some(&[9][..]));
        assert_eq!(b.get(2), None);
        let all: Vec<&[u8]> = b.iter().collect();
        assert_eq!(all, vec![&[1, 2, 3][..], &[9][..]]);
        b.clear();
        assert!(b.is_empty());
        let slot = b.next_slot().map(|s| s.len());
        assert_eq!(slot, Some(4));
        b.commit(100);
        assert_eq!(
            b.get(0).map(|f| f.len()),
            Some(4),
            "commit clamps to the slot size"
        );
    }
}
