//! The ARP neighbour cache (RFC 826, RFC 1122 2.3.2): bounded size, expiry
//! with unicast re-validation while in use, a bounded queue of frames per
//! unresolved neighbour, and a bounded number of requests before giving up.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;

use ustack_wire::ethernet::MacAddr;

use crate::counters::LinkCounters;
use crate::hash::KeyedState;
use crate::time::{Duration, Instant};

/// Tunables of the cache (part of [`crate::Limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpLimits {
    /// Maximum number of neighbour entries (resolved + pending).
    pub cache_size: usize,
    /// Bytes of frames queued per unresolved neighbour; the oldest frames are
    /// dropped beyond it (Linux `unres_qlen_bytes`, 212992).
    pub queue_bytes: usize,
    /// How long a learned mapping is trusted.
    pub reachable_time: Duration,
    /// Before expiry, an entry in use is re-validated by unicast requests
    /// during this last part of its lifetime.
    pub revalidate_window: Duration,
    /// Interval between requests.
    pub retry_interval: Duration,
    /// Requests sent before giving up on a neighbour.
    pub max_requests: u8,
}

impl Default for ArpLimits {
    fn default() -> Self {
        ArpLimits {
            cache_size: 1024,
            queue_bytes: 212_992,
            reachable_time: Duration::from_secs(60),
            revalidate_window: Duration::from_secs(5),
            retry_interval: Duration::from_secs(1),
            max_requests: 3,
        }
    }
}

#[derive(Debug)]
enum Entry {
    /// Waiting for a reply; `queue` holds whole Ethernet frames whose
    /// destination MAC is filled in on resolution.
    Incomplete {
        sent: u8,
        next_retry: Instant,
        queue: VecDeque<Vec<u8>>,
    },
    Reachable {
        mac: MacAddr,
        expires: Instant,
        last_used: Option<Instant>,
        next_probe: Instant,
    },
}

/// What the cache asks the interface to transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArpRequest {
    pub target: Ipv4Addr,
    /// `Some` = unicast re-validation to this MAC; `None` = broadcast.
    pub unicast: Option<MacAddr>,
}

pub(crate) enum Lookup {
    Found(MacAddr),
    Missing,
}

#[derive(Debug)]
pub(crate) struct ArpCache {
    limits: ArpLimits,
    entries: HashMap<Ipv4Addr, Entry, KeyedState>,
}

impl ArpCache {
    pub(crate) fn new(limits: ArpLimits, hasher: KeyedState) -> Self {
        ArpCache {
            limits,
            entries: HashMap::with_hasher(hasher),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The MAC for `ip` if resolved and not expired (marks the entry used).
    pub(crate) fn lookup(&mut self, now: Instant, ip: Ipv4Addr) -> Lookup {
        match self.entries.get_mut(&ip) {
            Some(Entry::Reachable {
                mac,
                expires,
                last_used,
                ..
            }) if now < *expires => {
                *last_used = Some(now);
                Lookup::Found(*mac)
            }
            _ => Lookup::Missing,
        }
    }

    /// The resolved MAC without touching usage (for views and tests).
    pub(crate) fn peek(&self, now: Instant, ip: Ipv4Addr) -> Option<MacAddr> {
        match self.entries.get(&ip) {
            Some(Entry::Reachable { mac, expires, .. }) if now < *expires => Some(*mac),
            _ => None,
        }
    }

    /// Queue `frame` until `ip` resolves. Returns true when a broadcast
    /// request must be sent now (a new resolution started).
    pub(crate) fn enqueue(
        &mut self,
        now: Instant,
        ip: Ipv4Addr,
        frame: &[u8],
        ctr: &mut LinkCounters,
    ) -> bool {
        let expired = matches!(self.entries.get(&ip), Some(Entry::Reachable { .. }));
        if expired {
            // Only reached when the mapping expired (lookup failed): start over.
            self.entries.remove(&ip);
        }
        if !self.entries.contains_key(&ip) && !self.make_room(now) {
            ctr.ArpCacheFull += 1;
            ctr.ArpQueueDrops += 1;
            return false;
        }
        let retry = self.limits.retry_interval;
        let mut started = false;
        let entry = self.entries.entry(ip).or_insert_with(|| {
            started = true;
            Entry::Incomplete {
                sent: 1,
                next_retry: now + retry,
                queue: VecDeque::new(),
            }
        });
        if let Entry::Incomplete { queue, .. } = entry {
            if frame.len() > self.limits.queue_bytes {
                ctr.ArpQueueDrops += 1;
            } else {
                // Linux `unres_qlen_bytes` semantics: drop the oldest when full.
                let mut queued: usize = queue.iter().map(Vec::len).sum();
                while queued + frame.len() > self.limits.queue_bytes {
                    let Some(old) = queue.pop_front() else { break };
                    queued -= old.len();
                    ctr.ArpQueueDrops += 1;
                }
                queue.push_back(frame.to_vec());
            }
        }
        if started {
            ctr.ArpOutRequests += 1;
        }
        started
    }

    /// Evict one resolved entry (the one expiring first) if the cache is full.
    fn make_room(&mut self, now: Instant) -> bool {
        if self.entries.len() < self.limits.cache_size {
            return true;
        }
        let victim = self
            .entries
            .iter()
            .filter_map(|(ip, e)| match e {
                Entry::Reachable { expires, .. } => Some((*expires, *ip)),
                Entry::Incomplete { .. } => None,
            })
            .min();
        match victim {
            Some((_, ip)) => {
                self.entries.remove(&ip);
                let _ = now;
                true
            }
            None => false,
        }
    }

    /// Record `ip` is at `mac`. `create` = the packet was addressed to us
    /// (RFC 826: add the pair only then; otherwise only update an existing
    /// entry). Returns the frames that were waiting, to be sent now.
    pub(crate) fn learn(
        &mut self,
        now: Instant,
        ip: Ipv4Addr,
        mac: MacAddr,
        create: bool,
        ctr: &mut LinkCounters,
    ) -> Option<VecDeque<Vec<u8>>> {
        // RFC 826: "If the pair <protocol type, sender protocol address> is
        // already in my translation table, update the sender hardware address
        // field of the entry with the new information in the packet and set
        // Merge_flag to true." ... "If Merge_flag is false, add the triplet".
        if !self.entries.contains_key(&ip) && (!create || !self.make_room(now)) {
            if create {
                ctr.ArpCacheFull += 1;
            }
            return None;
        }
        let fresh = Entry::Reachable {
            mac,
            expires: now + self.limits.reachable_time,
            last_used: None,
            next_probe: now,
        };
        match self.entries.insert(ip, fresh) {
            Some(Entry::Incomplete { queue, .. }) => {
                ctr.ArpResolved += 1;
                Some(queue)
            }
            Some(Entry::Reachable { last_used, .. }) => {
                if let Some(Entry::Reachable { last_used: u, .. }) = self.entries.get_mut(&ip) {
                    *u = last_used;
                }
                None
            }
            None => None,
        }
    }

    /// Run retries, give-ups and expiry. Appends the requests to transmit to `requests`.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        ctr: &mut LinkCounters,
        requests: &mut Vec<ArpRequest>,
    ) {
        let limits = self.limits;
        self.entries.retain(|ip, e| match e {
            Entry::Incomplete {
                sent,
                next_retry,
                queue,
            } => {
                if now < *next_retry {
                    return true;
                }
                if *sent >= limits.max_requests {
                    // RFC 1122 2.3.2.2: give up; the upper layers see the loss
                    // (TCP retransmits, UDP/ICMP datagrams are dropped).
                    ctr.ArpFailed += 1;
                    ctr.ArpUnresolvedDiscards += queue.len() as u64;
                    return false;
                }
                *sent += 1;
                *next_retry = now + limits.retry_interval;
                ctr.ArpOutRequests += 1;
                requests.push(ArpRequest {
                    target: *ip,
                    unicast: None,
                });
                true
            }
            Entry::Reachable {
                mac,
                expires,
                last_used,
                next_probe,
            } => {
                if now >= *expires {
                    return false;
                }
                let window_start = expires.checked_sub(limits.revalidate_window).unwrap_or(now);
                if in_use(&limits, *expires, *last_used)
                    && now >= window_start
                    && now >= *next_probe
                {
                    // Re-validate while in use (RFC 1122 2.3.2.1 "unicast poll").
                    *next_probe = now + limits.retry_interval;
                    ctr.ArpOutRequests += 1;
                    requests.push(ArpRequest {
                        target: *ip,
                        unicast: Some(*mac),
                    });
                }
                true
            }
        });
    }

    /// When `poll` has something to do next.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        let window = self.limits.revalidate_window;
        self.entries
            .values()
            .map(|e| match e {
                Entry::Incomplete { next_retry, .. } => *next_retry,
                Entry::Reachable {
                    expires,
                    last_used,
                    next_probe,
                    ..
                } => {
                    let ws = expires.checked_sub(window).unwrap_or(Instant::ZERO);
                    if in_use(&self.limits, *expires, *last_used) {
                        (*expires).min(ws.max(*next_probe))
                    } else {
                        *expires
                    }
                }
            })
            .min()
    }
}

/// "In use" = used during the second half of the entry's lifetime; only
/// such entries are re-validated, the others simply expire.
fn in_use(limits: &ArpLimits, expires: Instant, last_used: Option<Instant>) -> bool {
    let half = limits.reachable_time / 2;
    last_used.is_some_and(|u| u + half >= expires)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(limits: ArpLimits) -> ArpCache {
        ArpCache::new(limits, KeyedState::new(&[3; 16], 0))
    }
    const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    #[test]
    fn queue_then_resolve_flushes_frames() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        let t = Instant::from_secs(1);
        assert!(matches!(c.lookup(t, IP), Lookup::Missing));
        assert!(c.enqueue(t, IP, &[1], &mut ctr));
        assert!(!c.enqueue(t, IP, &[2], &mut ctr));
        let q = c.learn(t, IP, MAC, true, &mut ctr).unwrap_or_default();
        assert_eq!(q.into_iter().collect::<Vec<_>>(), vec![vec![1], vec![2]]);
        assert!(matches!(c.lookup(t, IP), Lookup::Found(m) if m == MAC));
    }

    #[test]
    fn queue_drops_oldest_beyond_limit() {
        let mut c = cache(ArpLimits {
            queue_bytes: 2,
            ..ArpLimits::default()
        });
        let mut ctr = LinkCounters::default();
        let t = Instant::ZERO;
        for i in 0..5u8 {
            c.enqueue(t, IP, &[i], &mut ctr);
        }
        assert_eq!(ctr.ArpQueueDrops, 3);
        let q = c.learn(t, IP, MAC, true, &mut ctr).unwrap_or_default();
        assert_eq!(q.into_iter().collect::<Vec<_>>(), vec![vec![3], vec![4]]);
    }

    #[test]
    fn gives_up_after_three_requests() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        let mut t = Instant::ZERO;
        assert!(c.enqueue(t, IP, &[0], &mut ctr));
        let mut sent = 1;
        for _ in 0..10 {
            t = c.poll_at().unwrap_or(t);
            let mut r = Vec::new();
            c.poll(t, &mut ctr, &mut r);
            sent += r.len();
            if c.len() == 0 {
                break;
            }
        }
        assert_eq!(sent, 3);
        assert_eq!(ctr.ArpFailed, 1);
        assert_eq!(ctr.ArpUnresolvedDiscards, 1);
        assert_eq!(t, Instant::from_secs(3));
        assert_eq!(c.poll_at(), None);
    }

    #[test]
    fn in_use_entry_is_revalidated_by_unicast_then_expires() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        c.learn(Instant::ZERO, IP, MAC, true, &mut ctr);
        assert!(matches!(c.lookup(Instant::ZERO, IP), Lookup::Found(_)));
        // Used only long ago: no re-validation, it will just expire.
        assert_eq!(c.poll_at(), Some(Instant::from_secs(60)));
        assert!(matches!(
            c.lookup(Instant::from_secs(40), IP),
            Lookup::Found(_)
        ));
        assert_eq!(c.poll_at(), Some(Instant::from_secs(55)));
        let mut r = Vec::new();
        c.poll(Instant::from_secs(55), &mut ctr, &mut r);
        assert_eq!(
            r,
            vec![ArpRequest {
                target: IP,
                unicast: Some(MAC)
            }]
        );
        // The reply refreshes the entry.
        c.learn(Instant::from_secs(55), IP, MAC, false, &mut ctr);
        assert!(c.peek(Instant::from_secs(100), IP).is_some());
        // Unused entries simply expire.
        let mut c2 = cache(ArpLimits::default());
        c2.learn(Instant::ZERO, IP, MAC, true, &mut ctr);
        assert_eq!(c2.poll_at(), Some(Instant::from_secs(60)));
        let mut r2 = Vec::new();
        c2.poll(Instant::from_secs(60), &mut ctr, &mut r2);
        assert!(r2.is_empty());
        assert_eq!(c2.len(), 0);
    }

    #[test]
    fn bounded_size_evicts_resolved_not_pending() {
        let mut c = cache(ArpLimits {
            cache_size: 2,
            ..ArpLimits::default()
        });
        let mut ctr = LinkCounters::default();
        let t = Instant::ZERO;
        c.enqueue(t, Ipv4Addr::new(10, 0, 0, 3), &[0], &mut ctr);
        c.enqueue(t, Ipv4Addr::new(10, 0, 0, 4), &[0], &mut ctr);
        // Full of pending entries: a third resolution cannot start.
        assert!(!c.enqueue(t, Ipv4Addr::new(10, 0, 0, 5), &[0], &mut ctr));
        assert_eq!(ctr.ArpCacheFull, 1);
        assert_eq!(c.len(), 2);
        // Unsolicited learning does not create entries.
        assert!(c.learn(t, IP, MAC, false, &mut ctr).is_none());
        assert!(c.peek(t, IP).is_none());
    }
}
