//! Linux's send-buffer accounting (`sk_sndbuf`, `sk_wmem_queued`): how
//! much a write takes and when a writer waiting for space wakes.
//!
//! Linux charges every skb of the send queue its `truesize`: the bytes it
//! holds plus a fixed overhead (the `sk_buff` and its head). A write fills
//! the tail skb up to the size goal (`tcp_send_mss`) and starts a new skb
//! only while `sk_wmem_queued < sk_sndbuf` and the unsent bytes are under
//! `TCP_NOTSENT_LOWAT` (`sk_stream_memory_free`); a full skb at the head
//! of what is unsent goes out at once (`tcp_push_one`), and a send that
//! sends part of an skb splits it (`tso_fragment`), each part paying the
//! overhead. A writer that found no room is woken when a third of the
//! buffer is free again and the unsent bytes are under half the low-water
//! mark (`sk_stream_write_space`); `poll` reports `POLLOUT` by the same
//! rule. An unlocked buffer (no `SO_SNDBUF`) grows with the congestion
//! window (`tcp_sndbuf_expand`).
//!
//! This module keeps that model for one socket in stream offsets (bytes
//! written so far); the engine's own buffer is sized to hold whatever the
//! model lets in (see [`crate::SockOpts::apply_to`]).

use std::cell::Cell;
use std::collections::VecDeque;

/// `skb->truesize` of an empty skb of a TCP write on Linux 6.x x86_64
/// (`tcp_stream_alloc_skb`), as `ss -tm` shows it (`w` less the bytes
/// queued, per skb): what each skb costs beyond its data.
pub const SKB_TRUESIZE: usize = 832;

/// `MAX_TCP_HEADER` and `SKB_DATA_ALIGN(sizeof(struct skb_shared_info))`,
/// `SKB_DATA_ALIGN(sizeof(struct sk_buff))` (x86_64): the per-MSS cost
/// `tcp_sndbuf_expand` reckons with.
const MAX_TCP_HEADER: usize = 320;
const SHINFO: usize = 320;
const SKB: usize = 256;

/// Linux `TCP_INIT_CWND`.
const INIT_CWND: usize = 10;

/// The send-buffer state of one socket.
#[derive(Debug, Clone)]
pub struct SendBuf {
    /// `sk_sndbuf`.
    pub sndbuf: usize,
    /// `SOCK_SNDBUF_LOCK`: set by `SO_SNDBUF`; the buffer does not grow.
    pub locked: bool,
    /// `SOCK_NOSPACE`: a write (or `poll`) found no room; the next time
    /// the socket is writable, its waiters are woken.
    nospace: Cell<bool>,
    /// The buffer's first sizing on the established connection
    /// (`tcp_init_buffer_space`) is done.
    sized: bool,
    /// Bytes written so far, acknowledged so far, sent so far.
    written: u64,
    acked: u64,
    sent: u64,
    /// End offsets of the skbs holding unacknowledged bytes, oldest first
    /// (the first starts at `acked`).
    skbs: VecDeque<u64>,
    /// The tail skb ends a record (`MSG_EOR`): nothing more goes in it.
    tail_closed: bool,
    /// Offset of the last push (Linux `pushed_seq`: the end of the last
    /// write, or of the last skb `forced_push` marked).
    pushed: u64,
    /// The tail skb carries a mark of `forced_push` (Linux's PSH flag on
    /// it, which moves with its end as it grows).
    tail_psh: bool,
}

impl SendBuf {
    /// A socket's buffer: `sndbuf` bytes, locked if set by `SO_SNDBUF`.
    pub fn new(sndbuf: usize, locked: bool) -> SendBuf {
        SendBuf {
            sndbuf,
            locked,
            nospace: Cell::new(false),
            sized: false,
            written: 0,
            acked: 0,
            sent: 0,
            skbs: VecDeque::new(),
            tail_closed: false,
            pushed: 0,
            tail_psh: false,
        }
    }

    /// `SO_SNDBUF`: the (doubled) size, locked.
    pub fn set_size(&mut self, sndbuf: usize) {
        self.sndbuf = sndbuf;
        self.locked = true;
    }

    /// Follow the engine: `send_queue` bytes unacknowledged, `notsent`
    /// of them never sent. Acknowledged skbs are freed (a partly
    /// acknowledged one is trimmed); a send that stopped inside an skb
    /// split it there.
    pub fn sync(&mut self, send_queue: usize, notsent: usize) {
        let acked = self.written.saturating_sub(send_queue as u64);
        let sent = self.written.saturating_sub(notsent as u64).max(acked);
        self.acked = self.acked.max(acked);
        while self.skbs.front().is_some_and(|&e| e <= self.acked) {
            self.skbs.pop_front();
        }
        if sent > self.sent {
            self.sent = sent;
            let mut start = self.acked;
            for (i, &end) in self.skbs.iter().enumerate() {
                if start < sent && sent < end {
                    self.skbs.insert(i, sent);
                    break;
                }
                if end >= sent {
                    break;
                }
                start = end;
            }
        }
    }

    /// `sk_wmem_queued`.
    pub fn wmem_queued(&self) -> usize {
        self.skbs.len() * SKB_TRUESIZE + (self.written - self.acked) as usize
    }

    /// Bytes queued and never sent.
    fn notsent(&self) -> u64 {
        self.written - self.sent
    }

    /// Linux `__sk_stream_memory_free(sk, wake)`: room for a new skb.
    pub fn memory_free(&self, wake: bool, lowat: u32) -> bool {
        self.wmem_queued() < self.sndbuf && (self.notsent() << u32::from(wake)) < u64::from(lowat)
    }

    /// Linux `__sk_stream_is_writeable(sk, 1)`: a third of the buffer
    /// free (free space at least half of what is queued) and room by
    /// [`SendBuf::memory_free`] for a wake-up.
    pub fn writable(&self, lowat: u32) -> bool {
        let queued = self.wmem_queued() as i64;
        self.sndbuf as i64 - queued >= queued >> 1 && self.memory_free(true, lowat)
    }

    /// Room left in the tail skb, if a write may add to it: it holds no
    /// sent byte, does not end a record, and is under the size goal.
    pub fn tail_room(&self, size_goal: usize) -> usize {
        let Some(&end) = self.skbs.back() else {
            return 0;
        };
        let start = self.tail_start();
        if self.tail_closed || start < self.sent {
            return 0;
        }
        size_goal.saturating_sub((end - start) as usize)
    }

    fn tail_start(&self) -> u64 {
        let n = self.skbs.len();
        if n >= 2 {
            self.skbs[n - 2]
        } else {
            self.acked
        }
    }

    /// The tail skb holds `size_goal` bytes or more and is the first
    /// unsent one (Linux then sends it at once, `tcp_push_one`).
    pub fn tail_full_at_head(&self, size_goal: usize) -> bool {
        self.skbs
            .back()
            .is_some_and(|&end| end - self.tail_start() >= size_goal as u64)
            && self.tail_start() == self.sent
    }

    /// A new, empty skb at the tail (`tcp_skb_entail`).
    pub fn new_skb(&mut self) {
        self.skbs.push_back(self.written);
        self.tail_closed = false;
        self.tail_psh = false;
    }

    /// The tail skb is full (`size_goal` bytes or more).
    pub fn tail_full(&self, size_goal: usize) -> bool {
        self.skbs
            .back()
            .is_some_and(|&end| end - self.tail_start() >= size_goal as u64)
    }

    /// Linux `forced_push`: more than half the peer's largest window
    /// (`max_wnd`) written since the last push.
    pub fn forced_push(&self, max_wnd: usize) -> bool {
        self.written > self.pushed + (max_wnd as u64 >> 1)
    }

    /// Linux `tcp_mark_push`: the tail skb carries PSH (`mid_write`: a
    /// mark of `forced_push`, which the engine must place), and the push
    /// point moves to what is written.
    pub fn mark_push(&mut self, mid_write: bool) {
        self.pushed = self.written;
        self.tail_psh |= mid_write;
    }

    /// The tail skb carries a mark of `forced_push`.
    pub fn tail_psh(&self) -> bool {
        self.tail_psh
    }

    /// The tail skb's mark is gone (a new write cleared it).
    pub fn clear_tail_psh(&mut self) {
        self.tail_psh = false;
    }

    /// `n` bytes written into the tail skb.
    pub fn append(&mut self, n: usize) {
        self.written += n as u64;
        if let Some(e) = self.skbs.back_mut() {
            *e = self.written;
        }
    }

    /// Drop an empty tail skb (`tcp_remove_empty_skb`).
    pub fn remove_empty_tail(&mut self) {
        if self.skbs.back() == Some(&self.tail_start()) {
            self.skbs.pop_back();
        }
    }

    /// `MSG_EOR`: the tail skb ends a record.
    pub fn close_tail(&mut self) {
        self.tail_closed = true;
    }

    /// Anything queued and unacknowledged.
    pub fn has_data(&self) -> bool {
        !self.skbs.is_empty()
    }

    pub fn nospace(&self) -> bool {
        self.nospace.get()
    }

    /// Set or clear `SOCK_NOSPACE` (`poll` sets it through a shared
    /// reference, as Linux's `tcp_poll` does).
    pub fn set_nospace(&self, on: bool) {
        self.nospace.set(on);
    }

    /// The first sizing on the established connection has been done.
    pub fn sized(&self) -> bool {
        self.sized
    }

    /// Linux `tcp_sndbuf_expand` (at establishment, and when a waiting
    /// writer is woken with congestion window to spare): room for twice
    /// the congestion window (at least `TCP_INIT_CWND` segments), each
    /// MSS costing a power-of-two head and an `sk_buff`; never shrinks,
    /// at most `max` (`tcp_wmem[2]`). Not for a locked buffer.
    pub fn expand(&mut self, mss: usize, cwnd_segs: usize, max: usize) {
        self.sized = true;
        if self.locked {
            return;
        }
        let per_mss = (mss + MAX_TCP_HEADER + SHINFO).next_power_of_two() + SKB;
        let want = 2 * cwnd_segs.max(INIT_CWND) * per_mss;
        if self.sndbuf < want {
            self.sndbuf = want.min(max).max(self.sndbuf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skbs_split_where_a_send_stopped_and_free_when_acked() {
        let mut b = SendBuf::new(50_000, false);
        b.new_skb();
        b.append(16_000);
        assert_eq!(b.wmem_queued(), 16_000 + SKB_TRUESIZE);
        assert!(b.tail_full_at_head(16_000));
        // 10,000 bytes sent: the skb is split in two.
        b.sync(16_000, 6_000);
        assert_eq!(b.wmem_queued(), 16_000 + 2 * SKB_TRUESIZE);
        // The unsent part takes more, up to the size goal.
        assert_eq!(b.tail_room(16_000), 10_000);
        b.append(10_000);
        assert_eq!(b.tail_room(16_000), 0);
        // The first part acknowledged; the second trimmed by 1,000.
        b.sync(15_000, 16_000);
        assert_eq!(b.wmem_queued(), 15_000 + SKB_TRUESIZE);
        b.sync(0, 0);
        assert_eq!(b.wmem_queued(), 0);
        assert!(!b.has_data());
    }

    /// Linux `forced_push`: past half the peer's largest window since the
    /// last push; a mark moves the push point; a new skb has no mark.
    #[test]
    fn forced_push_after_half_the_largest_window() {
        let mut b = SendBuf::new(400_000, true);
        b.new_skb();
        b.append(16_000);
        assert!(!b.forced_push(32_896), "16,000 <= 16,448");
        b.append(1_000);
        assert!(b.forced_push(32_896));
        b.mark_push(true);
        assert!(b.tail_psh());
        assert!(!b.forced_push(32_896));
        b.new_skb();
        assert!(!b.tail_psh());
        b.append(16_449);
        assert!(b.forced_push(32_896));
        // The end of a write moves the push point without a mid-write mark.
        b.mark_push(false);
        assert!(!b.forced_push(32_896));
        assert!(!b.tail_psh());
        assert!(b.tail_full(16_000));
    }

    #[test]
    fn writable_needs_a_third_free_and_half_the_low_water_mark() {
        let mut b = SendBuf::new(42_000, true);
        b.new_skb();
        b.append(24_000);
        // 24,832 queued: 17,168 free >= 12,416.
        assert!(b.writable(u32::MAX));
        b.append(4_000);
        // 28,832 queued: 13,168 free < 14,416; a new skb still fits.
        assert!(!b.writable(u32::MAX));
        assert!(b.memory_free(false, u32::MAX));
        // 28,000 unsent: under a 50,000 low-water mark, but not twice.
        assert!(!b.memory_free(true, 50_000));
        assert!(b.memory_free(false, 50_000));
    }

    #[test]
    fn expansion_follows_cwnd_unless_locked() {
        let mut b = SendBuf::new(16_384, false);
        b.expand(1000, 10, 4 << 20);
        // (1000 + 640 -> 2048) + 256 per MSS, twice ten segments.
        assert_eq!(b.sndbuf, 46_080);
        b.expand(1000, 5, 4 << 20);
        assert_eq!(b.sndbuf, 46_080, "never shrinks");
        let mut l = SendBuf::new(20_000, true);
        l.expand(1000, 100, 4 << 20);
        assert_eq!(l.sndbuf, 20_000);
    }
}
