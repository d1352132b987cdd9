//! Reassembly of IPv4 (RFC 791 section 3.2, RFC 815) and IPv6 (RFC 8200
//! 4.5) fragments with hard limits: fragments per datagram, datagrams held,
//! total memory, a timeout, and overlap = drop the whole datagram (RFC 5722;
//! Linux does the same for IPv4 since 4.19). One table type serves both
//! families (`Reassembler<Key4, Expired>` and `Reassembler<Key6, Head6>`),
//! each family with its own table and limits as Linux keeps them.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

use ustack_wire::ipv4::Ipv4Repr;

use crate::counters::{Ip6Counters, IpCounters};
use crate::hash::KeyedState;
use crate::time::{Duration, Instant};

/// Limits of the reassembler (part of [`crate::Limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasmLimits {
    /// Fragments accepted for one datagram before it is dropped.
    pub max_frags_per_datagram: usize,
    /// Total bytes held by all datagrams being reassembled (buffers plus a
    /// fixed per-datagram overhead). Like Linux `ipfrag_high_thresh` (4 MB).
    pub mem_limit: usize,
    /// RFC 791 / RFC 1122 3.3.2 reassembly timeout (Linux: 30 s; IPv6,
    /// RFC 8200 4.5: 60 s).
    pub timeout: Duration,
    /// Datagrams being reassembled at once; a fragment of a new one
    /// beyond this is dropped (the memory bound alone would allow about
    /// `mem_limit / 256`).
    pub max_datagrams: usize,
}

impl Default for ReasmLimits {
    fn default() -> Self {
        ReasmLimits {
            max_frags_per_datagram: 64,
            mem_limit: 4 * 1024 * 1024,
            timeout: Duration::from_secs(30),
            max_datagrams: 8192,
        }
    }
}

impl ReasmLimits {
    /// The IPv6 defaults: as IPv4's (Linux `ip6frag_high_thresh` is also
    /// 4 MB) with RFC 8200's 60-second timeout.
    pub fn ipv6() -> ReasmLimits {
        ReasmLimits {
            timeout: Duration::from_secs(60),
            ..ReasmLimits::default()
        }
    }
}

/// Accounted per datagram in addition to its buffer.
const OVERHEAD: usize = 256;
/// Largest IPv4 payload: 65535 - 20.
const MAX_PAYLOAD: usize = 65515;

/// An IPv4 datagram: RFC 791's (source, destination, protocol, ident).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key4 {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    ident: u16,
}

/// An IPv6 datagram: RFC 8200 4.5's (source, destination, identification).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub ident: u32,
}

/// What a table keeps of fragment zero (to rebuild the datagram's header
/// and to quote it in ICMP time exceeded).
pub(crate) trait Head: Clone {
    /// Heap bytes held, accounted to the memory limit.
    fn mem(&self) -> usize;
}

/// The counters a table updates (Linux's `ReasmReqds`, `ReasmOKs`,
/// `ReasmFails`, `ReasmTimeout`, in `Ip` and `Ip6`).
pub(crate) trait ReasmCounters {
    fn reqds(&mut self) -> &mut u64;
    fn oks(&mut self) -> &mut u64;
    fn fails(&mut self) -> &mut u64;
    fn timeouts(&mut self) -> &mut u64;
}

impl ReasmCounters for IpCounters {
    fn reqds(&mut self) -> &mut u64 {
        &mut self.ReasmReqds
    }
    fn oks(&mut self) -> &mut u64 {
        &mut self.ReasmOKs
    }
    fn fails(&mut self) -> &mut u64 {
        &mut self.ReasmFails
    }
    fn timeouts(&mut self) -> &mut u64 {
        &mut self.ReasmTimeout
    }
}

impl ReasmCounters for Ip6Counters {
    fn reqds(&mut self) -> &mut u64 {
        &mut self.ReasmReqds
    }
    fn oks(&mut self) -> &mut u64 {
        &mut self.ReasmOKs
    }
    fn fails(&mut self) -> &mut u64 {
        &mut self.ReasmFails
    }
    fn timeouts(&mut self) -> &mut u64 {
        &mut self.ReasmTimeout
    }
}

#[derive(Debug, Clone)]
struct Datagram<H> {
    deadline: Instant,
    buf: Vec<u8>,
    /// Received `[start, end)` ranges, unmerged (so exact duplicates can be told apart).
    ranges: Vec<(usize, usize)>,
    total: Option<usize>,
    /// What fragment zero told (for ICMP time exceeded and the header).
    first: Option<H>,
    /// Overlap or limit hit: swallow the rest of it silently until the timer ends.
    dead: bool,
}

impl<H: Head> Datagram<H> {
    fn mem(&self) -> usize {
        OVERHEAD
            + self.buf.capacity()
            + self.ranges.capacity() * 16
            + self.first.as_ref().map_or(0, H::mem)
    }
}

/// Result of feeding one fragment.
#[derive(Debug)]
pub(crate) enum Reasm<H = Ipv4Repr> {
    /// More fragments needed (or this one was dropped).
    Pending,
    /// The whole datagram: the header of fragment zero (for IPv4 with
    /// offset 0, no MF, `payload_len` the full length) and the payload.
    Complete(H, Vec<u8>),
}

/// A datagram whose reassembly timed out with fragment zero present: the
/// caller sends ICMP time exceeded (fragment reassembly) for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expired {
    pub header: Ipv4Repr,
    pub data: [u8; 8],
    pub data_len: usize,
}

impl Head for Expired {
    fn mem(&self) -> usize {
        0
    }
}

/// IPv6 fragment zero: its bytes from the IPv6 header through the
/// Fragment header and as much more as an ICMPv6 error may quote.
#[derive(Debug, Clone)]
pub(crate) struct Head6 {
    /// Its IPv6 header.
    pub header: ustack_wire::ipv6::Ipv6Repr,
    pub packet: Vec<u8>,
    /// Offset of the Fragment header (the unfragmentable part ends there).
    pub frag_at: usize,
    /// Offset of the Next Header field that names the Fragment header.
    pub nh_field: usize,
    /// The Fragment header's Next Header: the first header of the
    /// fragmentable part.
    pub next_header: u8,
}

impl Head for Head6 {
    fn mem(&self) -> usize {
        self.packet.capacity()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Reassembler<K = Key4, H = Expired> {
    limits: ReasmLimits,
    table: HashMap<K, Datagram<H>, KeyedState>,
    mem: usize,
}

impl Reassembler<Key4, Expired> {
    /// Feed one IPv4 fragment (`repr.more_frags || repr.frag_offset != 0`).
    pub(crate) fn insert(
        &mut self,
        now: Instant,
        repr: &Ipv4Repr,
        payload: &[u8],
        ctr: &mut IpCounters,
    ) -> Reasm {
        let key = Key4 {
            src: repr.src,
            dst: repr.dst,
            protocol: repr.protocol.into(),
            ident: repr.ident,
        };
        let offset = usize::from(repr.frag_offset);
        let first = (offset == 0).then(|| {
            let mut data = [0u8; 8];
            let n = payload.len().min(8);
            data[..n].copy_from_slice(&payload[..n]);
            Expired {
                header: *repr,
                data,
                data_len: n,
            }
        });
        let more = repr.more_frags;
        match self.insert_frag(now, key, offset, more, payload, MAX_PAYLOAD, first, ctr) {
            Reasm::Pending => Reasm::Pending,
            Reasm::Complete(e, buf) => {
                let mut header = e.header;
                header.more_frags = false;
                header.frag_offset = 0;
                header.payload_len = buf.len();
                Reasm::Complete(header, buf)
            }
        }
    }
}

impl<K: Copy + Eq + Hash, H: Head> Reassembler<K, H> {
    pub(crate) fn new(limits: ReasmLimits, hasher: KeyedState) -> Self {
        Reassembler {
            limits,
            table: HashMap::with_hasher(hasher),
            mem: 0,
        }
    }

    /// Bytes currently accounted to reassembly.
    pub(crate) fn mem(&self) -> usize {
        self.mem
    }

    /// Datagrams currently being reassembled (including dead ones).
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    fn kill(&mut self, key: &K, ctr: &mut impl ReasmCounters) {
        if let Some(d) = self.table.get_mut(key) {
            if !d.dead {
                *ctr.fails() += 1;
            }
            self.mem -= d.mem();
            d.dead = true;
            d.buf = Vec::new();
            d.ranges = Vec::new();
            d.first = None;
            self.mem += d.mem();
        }
    }

    /// Feed one fragment of the datagram `key`: `payload` at `offset`,
    /// `more` = M/MF. `first` is given for fragment zero. The datagram may
    /// not grow past `max_payload` bytes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn insert_frag(
        &mut self,
        now: Instant,
        key: K,
        offset: usize,
        more: bool,
        payload: &[u8],
        max_payload: usize,
        first: Option<H>,
        ctr: &mut impl ReasmCounters,
    ) -> Reasm<H> {
        *ctr.reqds() += 1;
        let end = offset + payload.len();
        // RFC 791: every fragment but the last carries a multiple of 8 octets.
        if end > max_payload || (more && (payload.is_empty() || !payload.len().is_multiple_of(8))) {
            *ctr.fails() += 1;
            return Reasm::Pending;
        }
        if !self.table.contains_key(&key) {
            let fresh = Datagram {
                deadline: now + self.limits.timeout,
                buf: Vec::new(),
                ranges: Vec::new(),
                total: None,
                first: None,
                dead: false,
            };
            if self.mem + fresh.mem() + end > self.limits.mem_limit
                || self.table.len() >= self.limits.max_datagrams
            {
                *ctr.fails() += 1;
                return Reasm::Pending;
            }
            self.mem += fresh.mem();
            self.table.insert(key, fresh);
        }
        let limits = self.limits;
        let Some(d) = self.table.get_mut(&key) else {
            return Reasm::Pending;
        };
        if d.dead {
            return Reasm::Pending;
        }
        // Consistency with what we know of the datagram's end.
        let bad_end = if more {
            d.total.is_some_and(|t| end > t)
        } else {
            d.total.is_some_and(|t| t != end) || d.ranges.iter().any(|&(_, e)| e > end)
        };
        // RFC 5722 (adopted for IPv4 by Linux): "the entire datagram (and any
        // constituent fragments, including those not yet received) MUST be
        // silently discarded". Exact duplicates are ignored instead.
        let mut duplicate = false;
        let mut overlap = false;
        for &(s, e) in &d.ranges {
            if offset < e && s < end {
                if s == offset && e == end {
                    duplicate = true;
                } else {
                    overlap = true;
                }
            }
        }
        if bad_end || overlap || d.ranges.len() + 1 > limits.max_frags_per_datagram {
            self.kill(&key, ctr);
            return Reasm::Pending;
        }
        if duplicate {
            return Reasm::Pending;
        }
        let grow = end.saturating_sub(d.buf.len());
        let before = d.mem();
        let head = first.as_ref().map_or(0, H::mem);
        if self.mem - before + OVERHEAD + d.buf.len() + grow + (d.ranges.len() + 1) * 16 + head
            > limits.mem_limit
        {
            self.kill(&key, ctr);
            return Reasm::Pending;
        }
        if grow > 0 {
            d.buf.reserve_exact(grow);
            d.buf.resize(end, 0);
        }
        let Some(dst) = d.buf.get_mut(offset..end) else {
            return Reasm::Pending;
        };
        dst.copy_from_slice(payload);
        let pos = d.ranges.partition_point(|&(s, _)| s < offset);
        // Keep the capacity tight so `mem()` stays what the check above priced.
        d.ranges.reserve_exact(1);
        d.ranges.insert(pos, (offset, end));
        if !more {
            d.total = Some(end);
        }
        if let Some(h) = first.filter(|_| offset == 0) {
            d.first = Some(h);
        }
        let after = d.mem();
        self.mem = self.mem - before + after;
        // The allocator may hand out more than was asked for: the bound is on
        // what is really held, so re-check after the fact.
        if self.mem > limits.mem_limit {
            self.kill(&key, ctr);
            return Reasm::Pending;
        }

        // Complete when the ranges tile [0, total).
        let Some(total) = d.total else {
            return Reasm::Pending;
        };
        let mut next = 0;
        for &(s, e) in &d.ranges {
            if s != next {
                return Reasm::Pending;
            }
            next = e;
        }
        if next != total {
            return Reasm::Pending;
        }
        let Some(d) = self.table.remove(&key) else {
            return Reasm::Pending;
        };
        self.mem -= d.mem();
        let Some(header) = d.first else {
            return Reasm::Pending;
        };
        *ctr.oks() += 1;
        let mut buf = d.buf;
        buf.truncate(total);
        Reasm::Complete(header, buf)
    }

    /// Drop timed-out datagrams; appends those that deserve ICMP time
    /// exceeded to `expired`.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        ctr: &mut impl ReasmCounters,
        expired: &mut Vec<H>,
    ) {
        let mut freed = 0;
        self.table.retain(|_, d| {
            if now < d.deadline {
                return true;
            }
            freed += d.mem();
            if !d.dead {
                *ctr.timeouts() += 1;
                *ctr.fails() += 1;
                // RFC 792 / RFC 1122 3.3.2: "If fragment zero is not available,
                // then no time exceeded need be sent at all." (RFC 8200 4.5
                // the same for IPv6.)
                if let Some(h) = d.first.take() {
                    expired.push(h);
                }
            }
            false
        });
        self.mem -= freed;
    }

    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.table.values().map(|d| d.deadline).min()
    }
}
