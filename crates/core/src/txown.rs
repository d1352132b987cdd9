//! Frames handed out by ownership instead of through the `tx` callback
//! ([`Stack::set_tx_owned`]): for a runtime that writes frames to its
//! device after releasing the lock it holds the stack under, so that it
//! does not have to copy each frame out of the stack's scratch buffer
//! first.
//!
//! A frame is built in the interface's scratch buffer as always; instead
//! of `tx(frame)`, the buffer itself moves to the list of frames ready to
//! go and a spare buffer (one the runtime wrote and gave back) takes its
//! place. The few frames not built in the scratch buffer (ARP, frames
//! queued for address resolution or for room) join the same list, so the
//! order is the order the stack transmitted them in. Frames a call builds
//! without a transmit path (a UDP datagram or an echo request sent outside
//! a poll, which otherwise wait in the stack's transmit queue for the next
//! poll) join it at once too: the caller takes them when it next swaps.
//! Code that transmits a frame must therefore go through `Iface::emit_*`
//! (`emit_scratch`, `emit_copy`, `emit_vec`), never call `tx` itself: a
//! frame handed to `tx` directly would reach the runtime's fallback batch,
//! written after the frames handed out by ownership.

use crate::iface::Iface;
use crate::stack::Stack;

/// Spare buffers kept at most (by count and by bytes): a burst larger
/// than this allocates the rest afresh.
const MAX_SPARES: usize = 512;
const MAX_SPARE_BYTES: usize = 8 << 20;

/// Frames the stack transmitted, in order, each in a buffer of its own
/// (exchanged with the stack by [`Stack::swap_tx_frames`]).
#[derive(Debug, Clone, Default)]
pub struct TxFrames {
    /// Each buffer and the length of the frame at its start (a buffer is
    /// never shrunk: it stays as long as the longest frame it held, so
    /// that reusing it never zeroes memory).
    frames: Vec<(Vec<u8>, usize)>,
}

impl TxFrames {
    pub fn new() -> TxFrames {
        TxFrames::default()
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The frames in order (behind their virtio-net header, if the link
    /// has one).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.frames
            .iter()
            .map(|(b, len)| b.get(..*len).unwrap_or(b.as_slice()))
    }
}

/// The interface's side: on or off, the frames ready and the spares.
#[derive(Debug, Clone, Default)]
pub(crate) struct TxOwned {
    on: bool,
    ready: TxFrames,
    spares: Vec<Vec<u8>>,
    spare_bytes: usize,
}

impl TxOwned {
    fn spare(&mut self) -> Vec<u8> {
        match self.spares.pop() {
            Some(b) => {
                self.spare_bytes = self.spare_bytes.saturating_sub(b.capacity());
                b
            }
            None => Vec::new(),
        }
    }

    fn keep(&mut self, b: Vec<u8>) {
        if self.spares.len() < MAX_SPARES && self.spare_bytes + b.capacity() <= MAX_SPARE_BYTES {
            self.spare_bytes += b.capacity();
            self.spares.push(b);
        }
    }
}

impl Iface {
    /// Transmit the frame in the scratch buffer: by moving the buffer to
    /// the ready list (owned mode) or through `tx`.
    pub(crate) fn emit_scratch(&mut self, tx: &mut dyn FnMut(&[u8])) {
        if !self.tx_owned.on {
            tx(self.frame());
            return;
        }
        let spare = self.tx_owned.spare();
        let len = self.frame_len();
        let buf = self.replace_scratch(spare);
        self.tx_owned.ready.frames.push((buf, len));
    }

    /// Transmit `frame` (built elsewhere): a copy into a spare buffer
    /// (owned mode) or through `tx`.
    pub(crate) fn emit_copy(&mut self, frame: &[u8], tx: &mut dyn FnMut(&[u8])) {
        if !self.tx_owned.on {
            tx(frame);
            return;
        }
        let mut b = self.tx_owned.spare();
        if b.len() < frame.len() {
            b.resize(frame.len(), 0);
        }
        if let Some(dst) = b.get_mut(..frame.len()) {
            dst.copy_from_slice(frame);
        }
        self.tx_owned.ready.frames.push((b, frame.len()));
    }

    /// Transmit a frame the stack owns already (moved, owned mode) or
    /// through `tx`.
    pub(crate) fn emit_vec(&mut self, frame: Vec<u8>, tx: &mut dyn FnMut(&[u8])) {
        if !self.tx_owned.on {
            tx(&frame);
            return;
        }
        let len = frame.len();
        self.tx_owned.ready.frames.push((frame, len));
    }
}

impl Stack {
    /// Hand transmitted frames out by ownership (see [`TxFrames`]) rather
    /// than through the `tx` callback of each call: frames then wait in
    /// the stack until [`Stack::swap_tx_frames`] takes them, and the `tx`
    /// callbacks are not called. Off by default. Turning it off hands the
    /// frames still waiting to nobody: take them first.
    pub fn set_tx_owned(&mut self, on: bool) {
        self.iface.tx_owned.on = on;
    }

    /// Whether frames wait to be taken by [`Stack::swap_tx_frames`].
    pub fn has_tx_frames(&self) -> bool {
        !self.iface.tx_owned.ready.is_empty()
    }

    /// Take the frames transmitted since the last call, in order, into
    /// `out`; the buffers `out` held (frames the caller has written) go
    /// back to the stack to build frames in. No frame is copied.
    pub fn swap_tx_frames(&mut self, out: &mut TxFrames) {
        let t = &mut self.iface.tx_owned;
        std::mem::swap(&mut t.ready, out);
        // `t.ready` now holds the caller's spent buffers: keep them (and
        // the list's own memory) for the frames to come.
        let mut spent = std::mem::take(&mut t.ready.frames);
        for (b, _) in spent.drain(..) {
            t.keep(b);
        }
        t.ready.frames = spent;
    }
}
