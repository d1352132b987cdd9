//! The ARP neighbour cache (RFC 826, RFC 1122 2.3.2): bounded size, a
//! bounded queue of frames per unresolved neighbour, a bounded number of
//! requests before giving up, and Linux-like neighbour unreachability
//! detection (NUD: REACHABLE, STALE, DELAY, PROBE) driven by confirmations
//! from the upper layer and from ARP itself.
//!
//! ARP has no checksum, so a corrupted reply can carry a wrong MAC. The
//! cache therefore never trusts a mapping forever: an entry is REACHABLE
//! only for `reachable_time` after its last confirmation (an ARP packet
//! from the neighbour with the same MAC, or TCP forward progress through
//! it, [`ArpCache::confirm`]); afterwards it is STALE, and using a STALE
//! entry starts re-validation (DELAY, then PROBE: unicast requests to the
//! cached MAC, then broadcast ones; no answer removes the entry). TCP
//! retransmission timeouts give "negative advice" ([`ArpCache::suspect`])
//! that probes the entry at once. An ARP packet contradicting a freshly
//! updated entry is not taken blindly either: within `lock_time` it only
//! triggers a probe (Linux `locktime`); later it replaces the MAC but
//! leaves the entry STALE, to be confirmed or probed.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

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
    /// How long a mapping stays REACHABLE after its last confirmation
    /// (Linux `base_reachable_time`, 30 s).
    pub reachable_time: Duration,
    /// How long a STALE entry in use waits for a confirmation (DELAY)
    /// before probing (Linux `delay_first_probe_time`, 5 s).
    pub revalidate_window: Duration,
    /// Interval between requests (Linux `retrans_time`, 1 s).
    pub retry_interval: Duration,
    /// Broadcast requests sent before giving up on resolving a neighbour;
    /// also the number of unicast, then of broadcast, probes of a PROBE.
    pub max_requests: u8,
    /// An unused STALE entry is removed this long after its last use
    /// (Linux `gc_stale_time`, 60 s).
    pub gc_stale_time: Duration,
    /// An ARP packet contradicting an entry updated less than this long ago
    /// does not replace the MAC, it only starts a probe (Linux `locktime`).
    pub lock_time: Duration,
}

impl Default for ArpLimits {
    fn default() -> Self {
        ArpLimits {
            cache_size: 1024,
            queue_bytes: 212_992,
            reachable_time: Duration::from_secs(30),
            revalidate_window: Duration::from_secs(5),
            retry_interval: Duration::from_secs(1),
            max_requests: 3,
            gc_stale_time: Duration::from_secs(60),
            lock_time: Duration::from_secs(1),
        }
    }
}

/// Neighbour unreachability detection state of a resolved entry (RFC 4861
/// 7.3.2 names, as Linux uses them for ARP too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nud {
    /// Confirmed less than `reachable_time` ago (checked lazily: past that
    /// it behaves as STALE).
    Reachable,
    /// Usable, but unconfirmed; the next use starts DELAY.
    Stale,
    /// In use while STALE: waiting `revalidate_window` for a confirmation.
    Delay { until: Instant },
    /// Sending probes: `sent` so far, the next one at `next`.
    Probe { sent: u8, next: Instant },
}

#[derive(Debug, Clone)]
enum Entry {
    /// Waiting for a reply; `queue` holds whole Ethernet frames whose
    /// destination MAC is filled in on resolution.
    Incomplete {
        sent: u8,
        next_retry: Instant,
        queue: VecDeque<Vec<u8>>,
    },
    Resolved {
        mac: MacAddr,
        nud: Nud,
        /// Last confirmation of reachability.
        confirmed: Instant,
        /// Last time the MAC was set.
        updated: Instant,
        last_used: Option<Instant>,
    },
}

/// What the cache asks the interface to transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArpRequest<A = Ipv4Addr> {
    pub target: A,
    /// `Some` = unicast re-validation to this MAC; `None` = broadcast.
    pub unicast: Option<MacAddr>,
}

pub(crate) enum Lookup {
    Found(MacAddr),
    Missing,
}

#[derive(Debug, Clone)]
pub(crate) struct ArpCache<A = Ipv4Addr> {
    limits: ArpLimits,
    entries: HashMap<A, Entry, KeyedState>,
}

/// The protocol addresses a neighbour cache can be keyed by (IPv4 for ARP,
/// IPv6 for Neighbor Discovery: the same states and bounds serve both).
pub(crate) trait NeighbourAddr: Copy + Eq + Hash + Ord + std::fmt::Debug {}
impl NeighbourAddr for Ipv4Addr {}
impl NeighbourAddr for Ipv6Addr {}

impl<A: NeighbourAddr> ArpCache<A> {
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

    /// The MAC for `ip` if resolved (marks the entry used; using an
    /// unconfirmed entry starts its re-validation).
    pub(crate) fn lookup(&mut self, now: Instant, ip: A) -> Lookup {
        let limits = self.limits;
        match self.entries.get_mut(&ip) {
            Some(Entry::Resolved {
                mac,
                nud,
                confirmed,
                last_used,
                ..
            }) => {
                *last_used = Some(now);
                if *nud == Nud::Reachable && now >= *confirmed + limits.reachable_time {
                    *nud = Nud::Stale;
                }
                if *nud == Nud::Stale {
                    // RFC 4861 7.3.3: "The first time a node sends a packet to
                    // a neighbor whose entry is STALE, the sender changes the
                    // state to DELAY and sets a timer to expire in
                    // DELAY_FIRST_PROBE_TIME seconds."
                    *nud = Nud::Delay {
                        until: now + limits.revalidate_window,
                    };
                }
                Lookup::Found(*mac)
            }
            _ => Lookup::Missing,
        }
    }

    /// The resolved MAC without touching usage (for views and tests).
    pub(crate) fn peek(&self, _now: Instant, ip: A) -> Option<MacAddr> {
        match self.entries.get(&ip) {
            Some(Entry::Resolved { mac, .. }) => Some(*mac),
            _ => None,
        }
    }

    /// Forward progress through `ip` (e.g. a TCP ACK that advanced
    /// SND.UNA) confirms its mapping (Linux `neigh_confirm`).
    pub(crate) fn confirm(&mut self, now: Instant, ip: A) {
        if let Some(Entry::Resolved { nud, confirmed, .. }) = self.entries.get_mut(&ip) {
            *confirmed = now;
            *nud = Nud::Reachable;
        }
    }

    /// Negative advice: the upper layer sees no progress through `ip` (a
    /// TCP retransmission timeout). Probe the mapping now unless it is
    /// already being probed.
    pub(crate) fn suspect(&mut self, now: Instant, ip: A) {
        if let Some(Entry::Resolved { nud, .. }) = self.entries.get_mut(&ip) {
            if !matches!(nud, Nud::Probe { .. }) {
                *nud = Nud::Probe { sent: 0, next: now };
            }
        }
    }

    /// Queue `frame` until `ip` resolves. Returns true when a broadcast
    /// request must be sent now (a new resolution started).
    pub(crate) fn enqueue(
        &mut self,
        now: Instant,
        ip: A,
        frame: &[u8],
        ctr: &mut LinkCounters,
    ) -> bool {
        if matches!(self.entries.get(&ip), Some(Entry::Resolved { .. })) {
            // Not reached through `lookup` (which finds resolved entries);
            // start over all the same.
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

    /// Evict one resolved entry (the least recently confirmed) if the cache
    /// is full.
    fn make_room(&mut self, now: Instant) -> bool {
        if self.entries.len() < self.limits.cache_size {
            return true;
        }
        let victim = self
            .entries
            .iter()
            .filter_map(|(ip, e)| match e {
                Entry::Resolved { confirmed, .. } => Some((*confirmed, *ip)),
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

    /// Record `ip` is at `mac` (from an ARP packet whose sender it is).
    /// `create` = the packet was addressed to us (RFC 826: add the pair only
    /// then; otherwise only update an existing entry). Returns the frames
    /// that were waiting, to be sent now.
    pub(crate) fn learn(
        &mut self,
        now: Instant,
        ip: A,
        mac: MacAddr,
        create: bool,
        ctr: &mut LinkCounters,
    ) -> Option<VecDeque<Vec<u8>>> {
        // RFC 826: "If the pair <protocol type, sender protocol address> is
        // already in my translation table, update the sender hardware address
        // field of the entry with the new information in the packet and set
        // Merge_flag to true." ... "If Merge_flag is false, add the triplet".
        let limits = self.limits;
        match self.entries.get_mut(&ip) {
            None => {
                if !create || !self.make_room(now) {
                    if create {
                        ctr.ArpCacheFull += 1;
                    }
                    return None;
                }
                self.entries.insert(ip, Self::reachable(mac, now));
                None
            }
            Some(Entry::Incomplete { .. }) => {
                let old = self.entries.insert(ip, Self::reachable(mac, now));
                ctr.ArpResolved += 1;
                match old {
                    Some(Entry::Incomplete { queue, .. }) => Some(queue),
                    _ => None,
                }
            }
            Some(Entry::Resolved {
                mac: cur,
                nud,
                confirmed,
                updated,
                ..
            }) => {
                if *cur == mac {
                    // The neighbour answered with the MAC we use: confirmed.
                    *confirmed = now;
                    *nud = Nud::Reachable;
                } else if now < *updated + limits.lock_time && !matches!(nud, Nud::Probe { .. }) {
                    // A contradiction right after an update: one of the two
                    // is wrong (ARP has no checksum). Keep the MAC, ask.
                    ctr.ArpContradictions += 1;
                    *nud = Nud::Probe { sent: 0, next: now };
                } else {
                    // Take the new MAC, unconfirmed: in use, it is confirmed
                    // by the upper layer within `revalidate_window` or probed
                    // (Linux: an overriding update leaves the entry STALE).
                    *cur = mac;
                    *updated = now;
                    *nud = Nud::Stale;
                }
                None
            }
        }
    }

    /// Neighbor Discovery's update rules (RFC 4861 7.2.3 for the source
    /// link-layer address of a solicitation: `create`, not `solicited`,
    /// `override_`; 7.2.5 for the target link-layer address of an
    /// advertisement with its S and O flags). Unlike ARP's, an address
    /// learned without a solicited advertisement is STALE: it is used at
    /// once, and probed (DELAY, PROBE) unless the upper layer confirms it.
    /// ND messages are checksummed, so no lock time applies. Returns the
    /// frames that were waiting, to be sent now.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn learn_nd(
        &mut self,
        now: Instant,
        ip: A,
        mac: MacAddr,
        create: bool,
        solicited: bool,
        override_: bool,
        ctr: &mut LinkCounters,
    ) -> Option<VecDeque<Vec<u8>>> {
        let limits = self.limits;
        // "Confirmed" long enough ago to be STALE at once (or at the clock's
        // origin), so that using it starts a real re-validation.
        let unconfirmed = now
            .checked_sub(limits.reachable_time)
            .unwrap_or(Instant::ZERO);
        let fresh = |mac| Entry::Resolved {
            mac,
            nud: if solicited {
                Nud::Reachable
            } else {
                Nud::Stale
            },
            confirmed: if solicited { now } else { unconfirmed },
            updated: now,
            // Linux's neighbour is "used" when created (`neigh_alloc`): a
            // STALE entry (from a solicitation or an unsolicited
            // advertisement) lives `gc_stale_time` unless used, instead of
            // being collected at once, so that the reply traffic that
            // usually follows a solicitation finds the MAC.
            last_used: (!solicited).then_some(now),
        };
        match self.entries.get_mut(&ip) {
            None => {
                // 7.2.5: "If no entry exists, the advertisement SHOULD be
                // silently discarded."
                if !create {
                    return None;
                }
                if !self.make_room(now) {
                    ctr.ArpCacheFull += 1;
                    return None;
                }
                self.entries.insert(ip, fresh(mac));
                None
            }
            Some(Entry::Incomplete { .. }) => {
                // "record the link-layer address ... If the advertisement's
                // Solicited flag is set, the state of the entry is set to
                // REACHABLE; otherwise, it is set to STALE."
                let old = self.entries.insert(ip, fresh(mac));
                ctr.ArpResolved += 1;
                match old {
                    Some(Entry::Incomplete { queue, .. }) => Some(queue),
                    _ => None,
                }
            }
            Some(Entry::Resolved {
                mac: cur,
                nud,
                confirmed,
                updated,
                ..
            }) => {
                let same = *cur == mac;
                if !same && !override_ {
                    // "If the Override flag is clear and the supplied
                    // link-layer address differs from that in the cache,
                    // then ... If the state of the entry is REACHABLE, set
                    // it to STALE, but do not update the entry in any other
                    // way."
                    if *nud == Nud::Reachable {
                        *nud = Nud::Stale;
                    }
                    ctr.ArpContradictions += 1;
                    return None;
                }
                if !same {
                    *cur = mac;
                    *updated = now;
                }
                if solicited {
                    *confirmed = now;
                    *nud = Nud::Reachable;
                } else if !same {
                    *nud = Nud::Stale;
                }
                None
            }
        }
    }

    fn reachable(mac: MacAddr, now: Instant) -> Entry {
        Entry::Resolved {
            mac,
            nud: Nud::Reachable,
            confirmed: now,
            updated: now,
            last_used: None,
        }
    }

    /// Run retries, give-ups, re-validation and garbage collection. Appends
    /// the requests to transmit to `requests`.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        ctr: &mut LinkCounters,
        requests: &mut Vec<ArpRequest<A>>,
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
            Entry::Resolved {
                mac,
                nud,
                confirmed,
                last_used,
                ..
            } => match *nud {
                Nud::Reachable | Nud::Stale => now < gc_at(&limits, *confirmed, *last_used),
                Nud::Delay { until } => {
                    if now < until {
                        return true;
                    }
                    if *confirmed + limits.revalidate_window >= until {
                        // Confirmed while in DELAY.
                        *nud = Nud::Reachable;
                    } else {
                        // RFC 4861 7.3.3: "If the entry is still in the DELAY
                        // state when the timer expires, the entry's state
                        // changes to PROBE."
                        *nud = Nud::Probe { sent: 0, next: now };
                        return probe(&limits, ip, mac, nud, now, ctr, requests);
                    }
                    true
                }
                Nud::Probe { next, .. } => {
                    if now < next {
                        return true;
                    }
                    probe(&limits, ip, mac, nud, now, ctr, requests)
                }
            },
        });
    }

    /// When `poll` has something to do next.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.entries
            .values()
            .map(|e| match e {
                Entry::Incomplete { next_retry, .. } => *next_retry,
                Entry::Resolved {
                    nud,
                    confirmed,
                    last_used,
                    ..
                } => match nud {
                    Nud::Reachable | Nud::Stale => gc_at(&self.limits, *confirmed, *last_used),
                    Nud::Delay { until } => *until,
                    Nud::Probe { next, .. } => *next,
                },
            })
            .min()
    }
}

/// When an entry that is not being re-validated is removed: after it has
/// been unconfirmed and unused for a while.
fn gc_at(limits: &ArpLimits, confirmed: Instant, last_used: Option<Instant>) -> Instant {
    let unconfirmed = confirmed + limits.reachable_time;
    match last_used {
        Some(u) => unconfirmed.max(u + limits.gc_stale_time),
        None => unconfirmed,
    }
}

/// Send the next probe of a PROBE entry: `max_requests` unicast to the
/// cached MAC (RFC 1122 2.3.2.1 "unicast poll"), then `max_requests`
/// broadcast (the cached MAC may be the wrong one); then give up (false =
/// remove the entry; the next use resolves afresh).
fn probe<A: NeighbourAddr>(
    limits: &ArpLimits,
    ip: &A,
    mac: &MacAddr,
    nud: &mut Nud,
    now: Instant,
    ctr: &mut LinkCounters,
    requests: &mut Vec<ArpRequest<A>>,
) -> bool {
    let Nud::Probe { sent, next } = nud else {
        return true;
    };
    let n = limits.max_requests.max(1);
    if *sent >= n.saturating_mul(2) {
        ctr.ArpFailed += 1;
        return false;
    }
    if *sent == 0 {
        ctr.ArpRevalidations += 1;
    }
    let unicast = (*sent < n).then_some(*mac);
    *sent += 1;
    *next = now + limits.retry_interval;
    ctr.ArpOutRequests += 1;
    requests.push(ArpRequest {
        target: *ip,
        unicast,
    });
    true
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

    /// Poll at every instant the cache asks for until `until`; returns the
    /// requests with the time each was sent.
    fn run(c: &mut ArpCache, until: Instant, ctr: &mut LinkCounters) -> Vec<(Instant, ArpRequest)> {
        let mut out = Vec::new();
        for _ in 0..100 {
            let Some(t) = c.poll_at() else { break };
            if t > until {
                break;
            }
            let mut r = Vec::new();
            c.poll(t, ctr, &mut r);
            out.extend(r.into_iter().map(|x| (t, x)));
        }
        out
    }

    fn ucast(t: u64) -> (Instant, ArpRequest) {
        (
            Instant::from_secs(t),
            ArpRequest {
                target: IP,
                unicast: Some(MAC),
            },
        )
    }

    fn bcast(t: u64) -> (Instant, ArpRequest) {
        (
            Instant::from_secs(t),
            ArpRequest {
                target: IP,
                unicast: None,
            },
        )
    }

    #[test]
    fn unconfirmed_entry_in_use_goes_stale_delay_probe_then_fails() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        c.learn(Instant::ZERO, IP, MAC, true, &mut ctr);
        // REACHABLE for 30 s: used without any ARP traffic.
        assert!(matches!(
            c.lookup(Instant::from_secs(10), IP),
            Lookup::Found(_)
        ));
        assert!(run(&mut c, Instant::from_secs(29), &mut ctr).is_empty());
        // Past reachable_time, the next use finds it STALE: DELAY 5 s, then
        // three unicast probes to the cached MAC, three broadcast ones, and
        // the entry is gone.
        assert!(matches!(c.lookup(Instant::from_secs(40), IP), Lookup::Found(m) if m == MAC));
        assert_eq!(c.poll_at(), Some(Instant::from_secs(45)));
        let reqs = run(&mut c, Instant::from_secs(100), &mut ctr);
        assert_eq!(
            reqs,
            vec![
                ucast(45),
                ucast(46),
                ucast(47),
                bcast(48),
                bcast(49),
                bcast(50)
            ]
        );
        assert_eq!(c.len(), 0);
        assert_eq!(ctr.ArpFailed, 1);
        assert_eq!(ctr.ArpRevalidations, 1);
        assert!(matches!(
            c.lookup(Instant::from_secs(52), IP),
            Lookup::Missing
        ));
    }

    #[test]
    fn upper_layer_confirmation_keeps_entry_reachable() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        c.learn(Instant::ZERO, IP, MAC, true, &mut ctr);
        // A TCP flow confirms every few seconds for two minutes: no probes.
        for s in (2..120).step_by(2) {
            let t = Instant::from_secs(s);
            assert!(matches!(c.lookup(t, IP), Lookup::Found(_)));
            c.confirm(t, IP);
            let mut r = Vec::new();
            c.poll(t, &mut ctr, &mut r);
            assert!(r.is_empty(), "no probe at {s} s");
        }
        // Confirmed during DELAY: back to REACHABLE without probing.
        let t = Instant::from_secs(200);
        assert!(matches!(c.lookup(t, IP), Lookup::Found(_)));
        c.confirm(t + Duration::from_secs(1), IP);
        assert!(run(&mut c, Instant::from_secs(210), &mut ctr).is_empty());
        assert_eq!(ctr.ArpRevalidations, 0);
    }

    #[test]
    fn negative_advice_probes_at_once_and_a_reply_fixes_the_mac() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        let wrong = MacAddr([0x42, 0, 0, 0, 0, 2]);
        // A corrupted reply resolved the neighbour to a wrong MAC.
        assert!(c.enqueue(Instant::ZERO, IP, &[0], &mut ctr));
        assert!(c.learn(Instant::ZERO, IP, wrong, false, &mut ctr).is_some());
        // TCP's retransmission timer fires: the entry is probed now.
        let t = Instant::from_secs(1);
        c.suspect(t, IP);
        assert_eq!(c.poll_at(), Some(t));
        let mut r = Vec::new();
        c.poll(t, &mut ctr, &mut r);
        assert_eq!(
            r,
            vec![ArpRequest {
                target: IP,
                unicast: Some(wrong)
            }]
        );
        // Suspecting again while probing does not restart the probe.
        c.suspect(t, IP);
        assert_eq!(c.poll_at(), Some(Instant::from_secs(2)));
        // The broadcast probes reach the real neighbour, whose reply
        // contradicts the entry: the MAC is replaced.
        c.learn(Instant::from_secs(4), IP, MAC, false, &mut ctr);
        assert_eq!(c.peek(Instant::from_secs(4), IP), Some(MAC));
    }

    #[test]
    fn contradiction_right_after_an_update_is_verified_not_taken() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        let wrong = MacAddr([0x0a, 0, 0, 0, 0, 2]);
        let t0 = Instant::ZERO;
        c.learn(t0, IP, MAC, true, &mut ctr);
        // 4 ms later a (corrupted) reply claims another MAC: kept, probed.
        let t1 = Instant::from_millis(4);
        c.learn(t1, IP, wrong, false, &mut ctr);
        assert_eq!(c.peek(t1, IP), Some(MAC));
        assert_eq!(ctr.ArpContradictions, 1);
        let mut r = Vec::new();
        c.poll(t1, &mut ctr, &mut r);
        assert_eq!(
            r,
            vec![ArpRequest {
                target: IP,
                unicast: Some(MAC)
            }]
        );
        // The answer confirms the entry.
        c.learn(Instant::from_millis(10), IP, MAC, false, &mut ctr);
        assert!(run(&mut c, Instant::from_secs(20), &mut ctr).is_empty());
        // Much later a changed MAC (a replaced NIC) is taken, unconfirmed:
        // in use it is re-validated.
        let t2 = Instant::from_secs(25);
        c.learn(t2, IP, wrong, false, &mut ctr);
        assert_eq!(c.peek(t2, IP), Some(wrong));
        assert!(matches!(c.lookup(t2, IP), Lookup::Found(m) if m == wrong));
        assert_eq!(c.poll_at(), Some(t2 + Duration::from_secs(5)));
    }

    #[test]
    fn unused_entries_are_collected() {
        let mut c = cache(ArpLimits::default());
        let mut ctr = LinkCounters::default();
        c.learn(Instant::ZERO, IP, MAC, true, &mut ctr);
        assert_eq!(c.poll_at(), Some(Instant::from_secs(30)));
        assert!(run(&mut c, Instant::from_secs(30), &mut ctr).is_empty());
        assert_eq!(c.len(), 0);
        assert_eq!(c.poll_at(), None);
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
