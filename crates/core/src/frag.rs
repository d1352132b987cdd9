//! IPv4 reassembly (RFC 791 section 3.2, RFC 815) with hard limits: fragments
//! per datagram, total memory, a timeout, and overlap = drop the whole
//! datagram (in the spirit of RFC 5722, as Linux does for IPv4 since 4.19).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use ustack_wire::ipv4::Ipv4Repr;

use crate::counters::IpCounters;
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
    /// RFC 791 / RFC 1122 3.3.2 reassembly timeout (Linux: 30 s).
    pub timeout: Duration,
}

impl Default for ReasmLimits {
    fn default() -> Self {
        ReasmLimits {
            max_frags_per_datagram: 64,
            mem_limit: 4 * 1024 * 1024,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Accounted per datagram in addition to its buffer.
const OVERHEAD: usize = 256;
/// Largest IPv4 payload: 65535 - 20.
const MAX_PAYLOAD: usize = 65515;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    ident: u16,
}

#[derive(Debug, Clone)]
struct Datagram {
    deadline: Instant,
    buf: Vec<u8>,
    /// Received `[start, end)` ranges, unmerged (so exact duplicates can be told apart).
    ranges: Vec<(usize, usize)>,
    total: Option<usize>,
    /// Header and first 8 data bytes of fragment zero, for ICMP time exceeded.
    first: Option<(Ipv4Repr, [u8; 8], usize)>,
    /// Overlap or limit hit: swallow the rest of it silently until the timer ends.
    dead: bool,
}

impl Datagram {
    fn mem(&self) -> usize {
        OVERHEAD + self.buf.capacity() + self.ranges.capacity() * 16
    }
}

/// Result of feeding one fragment.
#[derive(Debug)]
pub(crate) enum Reasm {
    /// More fragments needed (or this one was dropped).
    Pending,
    /// The whole datagram: the header of fragment zero (with offset 0, no MF,
    /// `payload_len` the full length) and the payload.
    Complete(Ipv4Repr, Vec<u8>),
}

/// A datagram whose reassembly timed out with fragment zero present: the
/// caller sends ICMP time exceeded (fragment reassembly) for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expired {
    pub header: Ipv4Repr,
    pub data: [u8; 8],
    pub data_len: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct Reassembler {
    limits: ReasmLimits,
    table: HashMap<Key, Datagram, KeyedState>,
    mem: usize,
}

impl Reassembler {
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

    fn kill(&mut self, key: &Key, ctr: &mut IpCounters) {
        if let Some(d) = self.table.get_mut(key) {
            if !d.dead {
                ctr.ReasmFails += 1;
            }
            self.mem -= d.mem();
            d.dead = true;
            d.buf = Vec::new();
            d.ranges = Vec::new();
            d.first = None;
            self.mem += d.mem();
        }
    }

    /// Feed one fragment (`repr.more_frags || repr.frag_offset != 0`).
    pub(crate) fn insert(
        &mut self,
        now: Instant,
        repr: &Ipv4Repr,
        payload: &[u8],
        ctr: &mut IpCounters,
    ) -> Reasm {
        ctr.ReasmReqds += 1;
        let offset = usize::from(repr.frag_offset);
        let end = offset + payload.len();
        // RFC 791: every fragment but the last carries a multiple of 8 octets.
        if end > MAX_PAYLOAD
            || (repr.more_frags && (payload.is_empty() || !payload.len().is_multiple_of(8)))
        {
            ctr.ReasmFails += 1;
            return Reasm::Pending;
        }
        let key = Key {
            src: repr.src,
            dst: repr.dst,
            protocol: repr.protocol.into(),
            ident: repr.ident,
        };
        if !self.table.contains_key(&key) {
            let fresh = Datagram {
                deadline: now + self.limits.timeout,
                buf: Vec::new(),
                ranges: Vec::new(),
                total: None,
                first: None,
                dead: false,
            };
            if self.mem + fresh.mem() + end > self.limits.mem_limit {
                ctr.ReasmFails += 1;
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
        let bad_end = if repr.more_frags {
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
        if self.mem - before + OVERHEAD + d.buf.len() + grow + (d.ranges.len() + 1) * 16
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
        if !repr.more_frags {
            d.total = Some(end);
        }
        if offset == 0 {
            let mut data = [0u8; 8];
            let n = payload.len().min(8);
            data[..n].copy_from_slice(&payload[..n]);
            d.first = Some((*repr, data, n));
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
        let Some((mut header, _, _)) = d.first else {
            return Reasm::Pending;
        };
        header.more_frags = false;
        header.frag_offset = 0;
        header.payload_len = total;
        ctr.ReasmOKs += 1;
        let mut buf = d.buf;
        buf.truncate(total);
        Reasm::Complete(header, buf)
    }

    /// Drop timed-out datagrams; appends those that deserve ICMP time
    /// exceeded to `expired`.
    pub(crate) fn poll(&mut self, now: Instant, ctr: &mut IpCounters, expired: &mut Vec<Expired>) {
        let mut freed = 0;
        self.table.retain(|_, d| {
            if now < d.deadline {
                return true;
            }
            freed += d.mem();
            if !d.dead {
                ctr.ReasmTimeout += 1;
                ctr.ReasmFails += 1;
                // RFC 792 / RFC 1122 3.3.2: "If fragment zero is not available,
                // then no time exceeded need be sent at all."
                if let Some((header, data, data_len)) = d.first {
                    expired.push(Expired {
                        header,
                        data,
                        data_len,
                    });
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
