//! The path MTU cache (RFC 1191): what ICMP "fragmentation needed"
//! messages taught us about each destination, so that new connections to
//! it start with a segment size that fits, as Linux keeps it in its route
//! exceptions (`fib_nh_exception`, `__ip_rt_update_pmtu`).
//!
//! RFC 1191 5: "A host MUST never reduce its estimate of the Path MTU
//! below 68 octets"; Linux goes further and never below `ip_rt_min_pmtu`
//! (552): a smaller report (or none, a next-hop MTU of 0 from an old
//! router) is taken as 552 and the entry is *locked*, which clears DF on
//! the datagrams to that destination so that the routers of such a path
//! fragment them (`ip_dont_fragment`). We do the same.
//!
//! RFC 1191 6.3: "the PMTU value ... should be aged ... [a host] should
//! periodically reset the estimated PMTU to the first-hop MTU"; entries
//! expire after `Limits::pmtu_expires` (Linux `ip_rt_mtu_expires`, 10
//! minutes). The cache holds at most `Limits::pmtu_cache` destinations,
//! the entry that expires first goes when it is full. Only reports a
//! connection has validated (the quoted sequence number is in flight, RFC
//! 5927 4.1) reach it.
//!
//! IPv6 destinations share the cache (RFC 8201, ICMPv6 Packet Too Big):
//! "A node MUST NOT reduce its estimate of the Path MTU below the IPv6
//! minimum link MTU" — a smaller report is taken as 1280 (as Linux's
//! `rt6_do_update_pmtu`), never locked (IPv6 routers do not fragment and
//! RFC 8021 deprecates atomic fragments).
//!
//! Beside what was learned, the cache holds what was configured: per
//! destination [`RouteMetrics`] (Linux's route metrics, `ip route ...
//! mtu [lock] N advmss N initcwnd N`, read through the socket's `dst`).
//! A configured MTU replaces the link's for that destination; a *locked*
//! one is final (reports do not lower it, as Linux's `__ip_rt_update_pmtu`
//! ignores them when `RTAX_MTU` is locked) and its datagrams go without
//! DF (`ip_dont_fragment`).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};

use crate::hash::KeyedState;
use crate::time::{Duration, Instant};

/// Linux `ip_rt_min_pmtu`: 512 + 20 + 20 (MSS 512).
pub(crate) const MIN_PMTU: usize = 552;

/// RFC 8200 5: the IPv6 minimum link MTU.
pub(crate) const IPV6_MIN_MTU: usize = 1280;

#[derive(Debug, Clone, Copy)]
struct Entry {
    mtu: usize,
    /// Below `MIN_PMTU`: send without DF.
    locked: bool,
    until: Instant,
}

/// What a route says about the path to one destination (Linux's route
/// metrics, `RTAX_*`), set with [`crate::Stack::set_route_metrics`].
/// `None` fields leave the stack's own value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteMetrics {
    /// The path MTU (Linux `mtu`, `RTAX_MTU`): IP datagram size.
    pub mtu: Option<u16>,
    /// The MTU is locked (Linux `mtu lock`): ICMP reports do not change
    /// it and datagrams go without DF, so routers fragment them.
    pub mtu_locked: bool,
    /// The MSS to announce in our SYN or SYN-ACK (Linux `advmss`,
    /// `RTAX_ADVMSS`; default: the path MTU less headers).
    pub advmss: Option<u16>,
    /// The initial congestion window in segments (Linux `initcwnd`,
    /// `RTAX_INITCWND`; default `TcpConfig::initial_cwnd`).
    pub initcwnd: Option<u32>,
}

#[derive(Clone)]
pub(crate) struct PmtuCache {
    map: HashMap<IpAddr, Entry, KeyedState>,
    /// `(until, dst)` in the order entries were (re)written; `until` only
    /// grows, so the front expires first. Stale pairs (the entry was
    /// rewritten or removed) are skipped.
    order: VecDeque<(Instant, IpAddr)>,
    max: usize,
    expires: Duration,
    /// Locked entries in the map (expired ones included): when zero,
    /// nothing needs looking up to decide DF.
    locked: usize,
    /// Configured metrics per destination (few: set by the operator).
    routes: HashMap<IpAddr, RouteMetrics, KeyedState>,
}

impl PmtuCache {
    pub(crate) fn new(max: usize, expires: Duration, hasher: KeyedState) -> PmtuCache {
        PmtuCache {
            map: HashMap::with_hasher(hasher),
            order: VecDeque::new(),
            max,
            expires,
            locked: 0,
            routes: HashMap::with_hasher(hasher),
        }
    }

    fn live(&self, now: Instant, dst: IpAddr) -> Option<Entry> {
        self.map.get(&dst).copied().filter(|e| e.until > now)
    }

    /// The configured metrics of the route to `dst`, if any.
    pub(crate) fn metrics(&self, dst: impl Into<IpAddr>) -> Option<RouteMetrics> {
        if self.routes.is_empty() {
            return None;
        }
        self.routes.get(&dst.into()).copied()
    }

    /// Configure (`Some`) or forget (`None`) the metrics of the route to
    /// `dst`. Returns whether anything changed. What was learned about a
    /// destination whose MTU is now configured is forgotten (Linux: a
    /// route change flushes the cached routes and their exceptions).
    pub(crate) fn set_metrics(&mut self, dst: IpAddr, m: Option<RouteMetrics>) -> bool {
        let old = self.routes.get(&dst).copied();
        if old == m {
            return false;
        }
        match m {
            Some(m) => {
                self.routes.insert(dst, m);
            }
            None => {
                self.routes.remove(&dst);
            }
        }
        self.remove(dst);
        true
    }

    /// The path MTU to `dst` if a report about it is still valid, or the
    /// route's configured one.
    pub(crate) fn get(&self, now: Instant, dst: impl Into<IpAddr>) -> Option<usize> {
        let dst = dst.into();
        let route = self.metrics(dst).and_then(|m| m.mtu).map(usize::from);
        match self.live(now, dst) {
            Some(e) => Some(route.map_or(e.mtu, |r| r.min(e.mtu))),
            None => route,
        }
    }

    /// Whether datagrams to `dst` must go without DF (a path below 552,
    /// or a route whose MTU is locked).
    pub(crate) fn locked(&self, now: Instant, dst: Ipv4Addr) -> bool {
        (self.locked > 0 && self.live(now, dst.into()).is_some_and(|e| e.locked))
            || self
                .metrics(dst)
                .is_some_and(|m| m.mtu_locked && m.mtu.is_some())
    }

    /// The MSS for a connection to `dst` on a link whose MSS is `link_mss`
    /// (the path MTU less 40 bytes of headers for IPv4, 60 for IPv6).
    pub(crate) fn mss(&self, now: Instant, dst: impl Into<IpAddr>, link_mss: u16) -> u16 {
        let dst = dst.into();
        let hdrs = if dst.is_ipv6() { 60 } else { 40 };
        let route = self.metrics(dst).and_then(|m| m.mtu);
        let learned = self.live(now, dst).map(|e| e.mtu);
        let of = |mtu: usize| u16::try_from(mtu.saturating_sub(hdrs)).unwrap_or(u16::MAX);
        match (route, learned) {
            // Linux `ipv4_mtu`: the route's MTU replaces the device's.
            (Some(r), l) => of(l.map_or(usize::from(r), |l| l.min(usize::from(r)))),
            (None, Some(l)) => link_mss.min(of(l)),
            (None, None) => link_mss,
        }
    }

    /// Destinations held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }

    /// A validated "fragmentation needed" says the path to `dst` carries
    /// `reported` bytes (0: unknown); `link_mtu` is our interface's.
    /// Linux `__ip_rt_update_pmtu`: a locked entry stays as it is; a
    /// report larger than what we use is ignored; one below 552 becomes
    /// 552, locked. For IPv6 (`reported` from a Packet Too Big, RFC 8201)
    /// the floor is 1280, not locked. Returns the path MTU now in force.
    pub(crate) fn update(
        &mut self,
        now: Instant,
        dst: impl Into<IpAddr>,
        reported: u32,
        link_mtu: usize,
    ) -> usize {
        let dst = dst.into();
        let old = self.live(now, dst);
        if let Some(e) = old.filter(|e| e.locked) {
            return e.mtu;
        }
        let route = self.metrics(dst).filter(|m| m.mtu.is_some());
        if let Some(m) = route.filter(|m| m.mtu_locked) {
            return usize::from(m.mtu.unwrap_or_default());
        }
        let link_mtu = route.and_then(|m| m.mtu).map_or(link_mtu, usize::from);
        let current = old.map_or(link_mtu, |e| e.mtu);
        let mut mtu = usize::try_from(reported).unwrap_or(usize::MAX);
        if current < mtu {
            return current;
        }
        let mut locked = false;
        if dst.is_ipv6() {
            mtu = mtu.max(IPV6_MIN_MTU);
        } else if mtu < MIN_PMTU {
            locked = true;
            mtu = current.min(MIN_PMTU);
        }
        if mtu >= link_mtu && !locked {
            return current;
        }
        self.insert(
            now,
            dst,
            Entry {
                mtu,
                locked,
                until: now + self.expires,
            },
        );
        mtu
    }

    fn insert(&mut self, now: Instant, dst: IpAddr, e: Entry) {
        if self.max == 0 {
            return;
        }
        // Drop what has expired, then the entry expiring first if full.
        while let Some(&(until, d)) = self.order.front() {
            let current = self.map.get(&d).is_some_and(|x| x.until == until);
            if !current {
                self.order.pop_front();
                continue;
            }
            if until > now && (self.map.len() < self.max || self.map.contains_key(&dst)) {
                break;
            }
            self.order.pop_front();
            self.remove(d);
        }
        if let Some(old) = self.map.insert(dst, e) {
            if old.locked {
                self.locked -= 1;
            }
        }
        if e.locked {
            self.locked += 1;
        }
        self.order.push_back((e.until, dst));
        // Rewrites leave stale pairs behind: compact once they dominate.
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(u, d)| map.get(d).is_some_and(|x| x.until == *u));
        }
    }

    fn remove(&mut self, dst: IpAddr) {
        if let Some(old) = self.map.remove(&dst) {
            if old.locked {
                self.locked -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(max: usize) -> PmtuCache {
        PmtuCache::new(max, Duration::from_secs(600), KeyedState::new(&[1; 16], 9))
    }

    const D: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    #[test]
    fn lowers_only_and_expires() {
        let mut c = cache(16);
        let t = Instant::from_secs(10);
        assert_eq!(c.update(t, D, 1400, 1500), 1400);
        assert_eq!(c.get(t, D), Some(1400));
        assert_eq!(c.mss(t, D, 1460), 1360);
        // A larger report is stale (RFC 1191: the PMTU only decreases).
        assert_eq!(c.update(t, D, 1450, 1500), 1400);
        assert_eq!(c.update(t, D, 1280, 1500), 1280);
        // Not above the link either.
        assert_eq!(c.update(t, Ipv4Addr::new(192, 0, 2, 2), 9000, 1500), 1500);
        assert_eq!(c.len(), 1);
        assert!(!c.locked(t, D));
        let later = t + Duration::from_secs(600);
        assert_eq!(c.get(later, D), None, "10 minutes later");
        assert_eq!(c.mss(later, D, 1460), 1460);
    }

    #[test]
    fn tiny_or_unknown_mtu_is_552_locked() {
        let mut c = cache(16);
        let t = Instant::from_secs(10);
        assert_eq!(c.update(t, D, 0, 1500), 552);
        assert!(c.locked(t, D));
        assert_eq!(c.mss(t, D, 1460), 512);
        // Locked: later reports change nothing until it expires.
        assert_eq!(c.update(t, D, 300, 1500), 552);
        assert!(!c.locked(t + Duration::from_secs(601), D));
        let e = Ipv4Addr::new(192, 0, 2, 9);
        assert_eq!(c.update(t, e, 300, 1500), 552);
        assert!(c.locked(t, e));
    }

    #[test]
    fn bounded_oldest_goes_first() {
        let mut c = cache(4);
        for i in 0..10u8 {
            let t = Instant::from_secs(u64::from(i));
            c.update(t, Ipv4Addr::new(10, 9, 0, i), 1400, 1500);
            assert!(c.len() <= 4);
        }
        let t = Instant::from_secs(10);
        assert_eq!(c.get(t, Ipv4Addr::new(10, 9, 0, 9)), Some(1400));
        assert_eq!(c.get(t, Ipv4Addr::new(10, 9, 0, 5)), None);
        assert_eq!(c.get(t, Ipv4Addr::new(10, 9, 0, 6)), Some(1400));
        // Rewriting one entry many times keeps the queue small.
        for k in 0..1000u64 {
            let t = Instant::from_secs(20 + k);
            c.update(t, D, 1400 - (k % 100) as u32, 1500);
        }
        assert!(c.order.len() <= 2 * c.map.len() + 64);
        assert!(c.len() <= 4);
    }

    #[test]
    fn ipv6_floor_is_1280_unlocked() {
        let mut c = cache(16);
        let t = Instant::from_secs(10);
        let d6 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        assert_eq!(c.update(t, d6, 1400, 1500), 1400);
        assert_eq!(c.mss(t, d6, 1440), 1340);
        assert_eq!(c.update(t, d6, 600, 1500), 1280);
        assert_eq!(c.get(t, d6), Some(1280));
        assert_eq!(c.mss(t, d6, 1440), 1220);
        // The same bits as an IPv4 destination are another entry.
        assert_eq!(c.get(t, Ipv4Addr::new(32, 1, 13, 184)), None);
        assert_eq!(c.locked, 0);
    }

    #[test]
    fn route_metrics_set_the_mtu_and_a_lock_holds_it() {
        let mut c = cache(16);
        let t = Instant::from_secs(10);
        let m = RouteMetrics {
            mtu: Some(640),
            mtu_locked: true,
            ..RouteMetrics::default()
        };
        assert!(c.set_metrics(D.into(), Some(m)));
        assert!(!c.set_metrics(D.into(), Some(m)), "no change");
        assert_eq!(c.mss(t, D, 1460), 600);
        assert!(c.locked(t, D));
        // Locked: a report changes nothing.
        assert_eq!(c.update(t, D, 576, 1500), 640);
        assert_eq!(c.get(t, D), Some(640));
        // Unlocked: reports lower it below the route's; the route's MTU
        // may be above the link's.
        let m = RouteMetrics {
            mtu: Some(9000),
            ..RouteMetrics::default()
        };
        assert!(c.set_metrics(D.into(), Some(m)));
        assert!(!c.locked(t, D));
        assert_eq!(c.mss(t, D, 1460), 8960);
        assert_eq!(c.update(t, D, 4000, 1500), 4000);
        assert_eq!(c.mss(t, D, 1460), 3960);
        // Forgetting the route forgets what was learned under it.
        assert!(c.set_metrics(D.into(), None));
        assert_eq!(c.mss(t, D, 1460), 1460);
        assert_eq!(c.metrics(D), None);
    }
}
