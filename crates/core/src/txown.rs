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

use std::borrow::Cow;

use bytes::Bytes;

use crate::iface::Iface;
use crate::stack::Stack;

/// Spare buffers kept at most (by count and by bytes): a burst larger
/// than this allocates the rest afresh.
const MAX_SPARES: usize = 512;
const MAX_SPARE_BYTES: usize = 8 << 20;

/// Frames the stack transmitted, in order, each in a buffer of its own
/// (exchanged with the stack by [`Stack::swap_tx_frames`]).
///
/// A TCP data segment's payload may be carried by reference to the
/// connection's send buffer instead of copied into the frame (zero-copy
/// transmit, when the link completes checksums: see
/// [`Stack::set_tx_owned`]): the frame is then its buffer's headers
/// followed by [`FrameParts::payload`]. The references keep those bytes
/// as they were whatever the connection does meanwhile.
#[derive(Debug, Clone, Default)]
pub struct TxFrames {
    frames: Vec<TxFrame>,
}

/// One frame: a buffer with the frame (or its headers) at its start, and
/// the payload pieces that follow the headers, if carried by reference.
#[derive(Debug, Clone, Default)]
struct TxFrame {
    /// Never shrunk: it stays as long as the longest frame it held, so
    /// that reusing it never zeroes memory.
    buf: Vec<u8>,
    len: usize,
    ext: Vec<Bytes>,
}

/// A frame of [`TxFrames`]: `head()` then the `payload()` pieces.
#[derive(Debug, Clone, Copy)]
pub struct FrameParts<'a> {
    head: &'a [u8],
    ext: &'a [Bytes],
}

impl<'a> FrameParts<'a> {
    /// The frame's start (behind the virtio-net header, if the link has
    /// one): the whole frame when [`FrameParts::payload`] is empty.
    pub fn head(&self) -> &'a [u8] {
        self.head
    }

    /// The payload pieces that follow `head()` (empty for a frame in one
    /// piece).
    pub fn payload(&self) -> &'a [Bytes] {
        self.ext
    }

    /// The whole frame as one slice, if it is in one piece.
    pub fn contiguous(&self) -> Option<&'a [u8]> {
        self.ext.is_empty().then_some(self.head)
    }

    /// The frame's length.
    pub fn len(&self) -> usize {
        self.head.len() + ext_len(self.ext)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append the pieces, in order, to `out` (for a vectored write).
    pub fn slices(&self, out: &mut Vec<&'a [u8]>) {
        out.push(self.head);
        out.extend(self.ext.iter().map(|b| &b[..]));
    }

    /// Call `f` with the pieces in order (for a vectored write): no
    /// allocation for the headers and up to seven payload pieces (a TSO
    /// segment spans a few chunks of a send buffer).
    pub fn with_slices<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let mut few: [&[u8]; 8] = [&[]; 8];
        if self.ext.len() < few.len() {
            few[0] = self.head;
            for (d, b) in few.iter_mut().skip(1).zip(self.ext) {
                *d = b;
            }
            return f(few.get(..=self.ext.len()).unwrap_or(&[]));
        }
        let mut v = Vec::with_capacity(self.ext.len() + 1);
        self.slices(&mut v);
        f(&v)
    }

    /// The frame gathered into one buffer (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        gather(self.head, self.ext)
    }
}

/// Total length of payload pieces.
pub(crate) fn ext_len(ext: &[Bytes]) -> usize {
    ext.iter().map(|b| b.len()).sum()
}

/// `head` followed by the pieces of `ext`, in one buffer.
pub(crate) fn gather(head: &[u8], ext: &[Bytes]) -> Vec<u8> {
    let mut v = Vec::with_capacity(head.len() + ext_len(ext));
    v.extend_from_slice(head);
    for b in ext {
        v.extend_from_slice(b);
    }
    v
}

/// A frame that must be whole (queued for address resolution, handed to
/// a `tx` callback): `head` itself when there is no payload by reference,
/// else `head` and `ext` gathered, and `ext` let go.
pub(crate) fn take_whole<'a>(head: &'a [u8], ext: &mut Vec<Bytes>) -> Cow<'a, [u8]> {
    if ext.is_empty() {
        return Cow::Borrowed(head);
    }
    let whole = gather(head, ext);
    ext.clear();
    Cow::Owned(whole)
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

    /// Drop the payload references of the frames (once written: the send
    /// buffers may reuse the storage sooner), keeping the buffers.
    pub fn release_payloads(&mut self) {
        for f in &mut self.frames {
            f.ext.clear();
        }
    }

    /// The frames in order (behind their virtio-net header, if the link
    /// has one).
    pub fn iter(&self) -> impl Iterator<Item = FrameParts<'_>> + '_ {
        self.frames.iter().map(|f| FrameParts {
            head: f.buf.get(..f.len).unwrap_or(f.buf.as_slice()),
            ext: &f.ext,
        })
    }
}

/// The interface's side: on or off, the frames ready and the spares.
#[derive(Debug, Clone, Default)]
pub(crate) struct TxOwned {
    on: bool,
    ready: TxFrames,
    spares: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// Spare payload lists (empty, with capacity).
    spare_ext: Vec<Vec<Bytes>>,
    /// `Stack::set_zero_copy_tx(false)`.
    zero_copy_off: bool,
    /// The payload pieces of the frame being built in the scratch buffer,
    /// which follow its `frame_len` bytes (see [`Iface::set_frame_payload`]).
    pub(crate) cur_ext: Vec<Bytes>,
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

    fn keep_ext(&mut self, mut e: Vec<Bytes>) {
        e.clear();
        if e.capacity() > 0 && self.spare_ext.len() < MAX_SPARES {
            self.spare_ext.push(e);
        }
    }

    /// Take the current frame's payload list, leaving a spare in its place.
    fn take_ext(&mut self) -> Vec<Bytes> {
        if self.cur_ext.is_empty() {
            return Vec::new();
        }
        let spare = self.spare_ext.pop().unwrap_or_default();
        std::mem::replace(&mut self.cur_ext, spare)
    }
}

impl Iface {
    /// The frame being built continues with `ext` (a TCP payload carried
    /// by reference): only its headers are in the scratch buffer.
    pub(crate) fn set_frame_payload(&mut self, ext: &[Bytes]) {
        self.tx_owned.cur_ext.clear();
        self.tx_owned.cur_ext.extend_from_slice(ext);
    }

    /// Transmit the frame in the scratch buffer: by moving the buffer to
    /// the ready list (owned mode) or through `tx`.
    pub(crate) fn emit_scratch(&mut self, tx: &mut dyn FnMut(&[u8])) {
        if !self.tx_owned.on {
            let (head, ext) = self.frame_and_payload();
            tx(&take_whole(head, ext));
            return;
        }
        let spare = self.tx_owned.spare();
        let len = self.frame_len();
        let buf = self.replace_scratch(spare);
        let ext = self.tx_owned.take_ext();
        self.tx_owned.ready.frames.push(TxFrame { buf, len, ext });
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
        self.tx_owned.ready.frames.push(TxFrame {
            buf: b,
            len: frame.len(),
            ext: Vec::new(),
        });
    }

    /// Transmit a frame the stack owns already (moved, owned mode) or
    /// through `tx`.
    pub(crate) fn emit_vec(&mut self, frame: Vec<u8>, tx: &mut dyn FnMut(&[u8])) {
        if !self.tx_owned.on {
            tx(&frame);
            return;
        }
        let len = frame.len();
        self.tx_owned.ready.frames.push(TxFrame {
            buf: frame,
            len,
            ext: Vec::new(),
        });
    }
}

impl Stack {
    /// Hand transmitted frames out by ownership (see [`TxFrames`]) rather
    /// than through the `tx` callback of each call: frames then wait in
    /// the stack until [`Stack::swap_tx_frames`] takes them, and the `tx`
    /// callbacks are not called. Off by default. Turning it off hands the
    /// frames still waiting to nobody: take them first.
    ///
    /// With frames handed out by ownership and a link that completes
    /// checksums (`LinkOffload::tx_csum` on a virtio-net link), a TCP data
    /// segment of 1 KB or more carries its payload by reference to the
    /// send buffer (see [`TxFrames`]) unless
    /// [`Stack::set_zero_copy_tx`] turned that off.
    pub fn set_tx_owned(&mut self, on: bool) {
        self.iface.tx_owned.on = on;
        self.sync_zero_copy();
    }

    /// Allow (the default) or forbid TCP payloads by reference in the
    /// frames handed out by ownership (every payload is then copied into
    /// its frame, as with the `tx` callback).
    pub fn set_zero_copy_tx(&mut self, allow: bool) {
        self.iface.tx_owned.zero_copy_off = !allow;
        self.sync_zero_copy();
    }

    /// Whether TCP payloads go by reference now.
    pub fn zero_copy_tx(&self) -> bool {
        let t = &self.iface.tx_owned;
        t.on && !t.zero_copy_off && self.iface.offload.partial_csum()
    }

    pub(crate) fn sync_zero_copy(&mut self) {
        let on = self.zero_copy_tx();
        self.tcp.set_zero_copy(on);
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
        for f in spent.drain(..) {
            t.keep(f.buf);
            t.keep_ext(f.ext);
        }
        t.ready.frames = spent;
    }
}
