//! IPv6 host autoconfiguration, off unless [`Stack::set_ipv6_host`] turns
//! it on (a stack that is the router for its link, as `ustack run`'s
//! guest-facing engine, must not act on advertisements):
//!
//! - duplicate address detection (RFC 4862 5.4): our addresses are
//!   tentative — not used, only their solicited-node groups heard — until
//!   `DupAddrDetectTransmits` solicitations from `::` a `RetransTimer` (1 s)
//!   apart went unanswered; a solicitation from `::` or an advertisement
//!   for a tentative address marks it duplicate (never used, counted in
//!   `Ip6DadDuplicates`, listed by [`Stack::ipv6_duplicate_addresses`]);
//! - MLDv2 (RFC 3810): an unsolicited report joining the solicited-node
//!   groups, sent before the first DAD solicitation (RFC 4862 5.4.2), and
//!   current-state reports answering queries;
//! - router discovery (RFC 4861 6.3.4 / 6.3.7): Router Solicitations at
//!   start-up, Router Advertisements read for default routers, on-link
//!   prefixes and the link MTU, and SLAAC addresses (RFC 4862 5.5.3, with
//!   the two-hour rule) from autonomous prefixes.

use std::net::Ipv6Addr;

use ustack_wire::ethernet::MacAddr;
use ustack_wire::icmpv6::{Icmpv6Message, Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Cidr, Ipv6Repr};
use ustack_wire::mld::{max_resp_delay_ms, record_type, MldRepr, ALL_MLDV2_ROUTERS};
use ustack_wire::ndisc::{NdiscOption, NdiscOptions, NdiscRepr, PrefixInfo};

use crate::iface::{ipv6_multicast_mac, is_link_local6, link_local, Ip6Out, NextHop6, Redirect6};
use crate::ip6::MAX_IPV6_ADDRESSES;
use crate::stack::Stack;
use crate::time::{Duration, Instant};

/// The all-routers group (RFC 4291 2.7.1).
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// RFC 4861 10: `RetransTimer` default, the DAD spacing.
const RETRANS_TIMER: Duration = Duration::from_secs(1);
/// RFC 4861 10: `RTR_SOLICITATION_INTERVAL`.
const RTR_SOLICITATION_INTERVAL: Duration = Duration::from_secs(4);
/// RFC 4862 5.5.3 (e): two hours.
const TWO_HOURS: u64 = 2 * 3600;
/// Default routers and on-link prefixes kept from advertisements.
const MAX_ROUTERS: usize = 8;
/// Redirected destinations kept at most (a router that redirects every
/// destination it sees cannot grow the cache without bound); the entry
/// nearest its end makes room.
const MAX_REDIRECTS: usize = 64;
/// How long a redirected destination is kept unless renewed (Linux keeps a
/// redirect's cached route until it goes unused for `gc_timeout`; a fixed
/// life is simpler and as safe: an expired entry only means the default
/// router again, which redirects again).
const REDIRECT_LIFETIME: Duration = Duration::from_secs(600);
const MAX_PREFIXES: usize = 16;

/// How the stack behaves as an IPv6 host (see the module text). The
/// default is all off: addresses usable at once, advertisements ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ipv6HostConfig {
    /// RFC 4862 `DupAddrDetectTransmits` (0: no duplicate address
    /// detection, as Linux's `nodad`).
    pub dad_transmits: u8,
    /// Act on Router Advertisements (Linux `accept_ra`).
    pub accept_ra: bool,
    /// Form addresses from autonomous prefixes (Linux `autoconf`); needs
    /// `accept_ra`.
    pub slaac: bool,
    /// Router Solicitations sent at start-up until an advertisement comes
    /// (RFC 4861 `MAX_RTR_SOLICITATIONS`, 3); needs `accept_ra`.
    pub router_solicitations: u8,
}

impl Ipv6HostConfig {
    /// What a host does by default (Linux's defaults): DAD with one
    /// solicitation, advertisements accepted, SLAAC, three solicitations.
    pub fn host() -> Ipv6HostConfig {
        Ipv6HostConfig {
            dad_transmits: 1,
            accept_ra: true,
            slaac: true,
            router_solicitations: 3,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Dad {
    addr: Ipv6Addr,
    sent: u8,
    next: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Slaac {
    addr: Ipv6Addr,
    /// `None` = infinite.
    valid_until: Option<Instant>,
    preferred_until: Option<Instant>,
    /// Moved behind the other addresses once its preferred lifetime
    /// ended (RFC 6724 rule 3: avoid deprecated source addresses).
    deprecated: bool,
}

/// The host-side IPv6 state of a stack.
#[derive(Debug, Clone, Default)]
pub(crate) struct Host6 {
    cfg: Ipv6HostConfig,
    dad: Vec<Dad>,
    duplicates: Vec<Ipv6Addr>,
    slaac: Vec<Slaac>,
    rs_sent: u8,
    rs_next: Option<Instant>,
    ra_seen: bool,
    /// When to send an MLDv2 report, and whether it is the unsolicited
    /// join (CHANGE_TO_EXCLUDE) or a current-state answer (MODE_IS_EXCLUDE).
    mld_at: Option<(Instant, bool)>,
    /// The join report is sent [Robustness Variable] (2) times.
    mld_join_repeat: bool,
    /// Groups to report left (their address went).
    mld_leave: Vec<Ipv6Addr>,
}

fn lifetime(now: Instant, secs: u32) -> Option<Instant> {
    (secs != u32::MAX).then(|| now + Duration::from_secs(u64::from(secs)))
}

fn secs_left(now: Instant, until: Option<Instant>) -> u64 {
    match until {
        Some(t) if t > now => (t - now).as_secs(),
        Some(_) => 0,
        None => u64::MAX,
    }
}

impl Stack {
    /// Configure the IPv6 host behaviour (off by default). Turning DAD on
    /// makes every current address tentative and starts detection on the
    /// next `poll`, after the MLD report joining their groups.
    pub fn set_ipv6_host(&mut self, now: Instant, cfg: Ipv6HostConfig) {
        self.last_now = self.last_now.max(now);
        self.host6.cfg = cfg;
        // RFC 4862 5.4.2 / RFC 4861 6.3.7: the first messages after the
        // interface comes up wait a random time in [0,
        // MAX_RTR_SOLICITATION_DELAY] (1 s), so that hosts started together
        // do not send at once (a keyed hash: deterministic for a stack).
        let start = now + self.random_delay(now, 0x65, 1000);
        if cfg.dad_transmits > 0 {
            let addrs = std::mem::take(&mut self.iface.addrs6);
            for a in addrs {
                self.start_dad(start, a);
            }
        }
        if cfg != Ipv6HostConfig::default() {
            // A host reports the groups it is in (RFC 3810 6.1).
            self.host6.mld_at = Some((start, true));
            self.host6.mld_join_repeat = true;
        }
        if cfg.accept_ra && cfg.router_solicitations > 0 {
            self.host6.rs_next = Some(start);
        }
    }

    /// A delay in [0, `max_ms`] ms from the stack secret and the time.
    fn random_delay(&self, now: Instant, domain: u64, max_ms: u64) -> Duration {
        let h = crate::hash::keyed_hash(
            &self.config.secret,
            domain,
            &now.total_micros().to_le_bytes(),
        );
        Duration::from_millis(h % (max_ms + 1))
    }

    /// The IPv6 host configuration.
    pub fn ipv6_host(&self) -> Ipv6HostConfig {
        self.host6.cfg
    }

    /// Our addresses still under duplicate address detection.
    pub fn ipv6_tentative_addresses(&self) -> &[Ipv6Cidr] {
        &self.iface.tentative6
    }

    /// Addresses DAD found in use by another node (not configured).
    pub fn ipv6_duplicate_addresses(&self) -> &[Ipv6Addr] {
        &self.host6.duplicates
    }

    /// The default routers Router Advertisements gave (first = in use).
    pub fn ipv6_default_routers(&self) -> Vec<Ipv6Addr> {
        self.iface.routers6.iter().map(|&(r, _)| r).collect()
    }

    /// Whether a new address goes through DAD first.
    pub(crate) fn dad_enabled(&self) -> bool {
        self.host6.cfg.dad_transmits > 0
    }

    /// Make `a` tentative; its detection starts at `now` (on `poll`).
    pub(crate) fn start_dad(&mut self, now: Instant, a: Ipv6Cidr) {
        self.iface.tentative6.push(a);
        self.host6.dad.push(Dad {
            addr: a.address,
            sent: 0,
            next: now,
        });
        // Join its solicited-node group before soliciting (RFC 4862 5.4.2).
        self.host6.mld_at = Some((now, true));
        self.host6.mld_join_repeat = true;
    }

    fn dad_done(&mut self, addr: Ipv6Addr) -> Option<Ipv6Cidr> {
        self.host6.dad.retain(|d| d.addr != addr);
        let i = self
            .iface
            .tentative6
            .iter()
            .position(|c| c.address == addr)?;
        Some(self.iface.tentative6.remove(i))
    }

    /// A tentative address is someone else's: RFC 4862 5.4.5, "the
    /// address MUST NOT be assigned to the interface".
    fn dad_duplicate(&mut self, addr: Ipv6Addr) {
        if self.dad_done(addr).is_none() {
            return;
        }
        self.host6.slaac.retain(|s| s.addr != addr);
        self.leave_group_of(addr);
        self.counters.ip6.DadDuplicates += 1;
        if self.host6.duplicates.len() < MAX_IPV6_ADDRESSES {
            self.host6.duplicates.push(addr);
        }
    }

    /// A Neighbor Solicitation for `target` (validated): true if `target`
    /// is tentative and the message was taken here. RFC 4862 5.4.3: from
    /// `::`, another node is detecting the same address — a duplicate; from
    /// a unicast source it is address resolution and is ignored.
    pub(crate) fn dad_ns(&mut self, ip: &Ipv6Repr, target: Ipv6Addr) -> bool {
        if !self.iface.tentative6.iter().any(|c| c.address == target) {
            return false;
        }
        if ip.src.is_unspecified() {
            self.dad_duplicate(target);
        }
        true
    }

    /// A Neighbor Advertisement for `target`: RFC 4862 5.4.4, one for a
    /// tentative address means it is a duplicate.
    pub(crate) fn dad_na(&mut self, target: Ipv6Addr) -> bool {
        if !self.iface.tentative6.iter().any(|c| c.address == target) {
            return false;
        }
        self.dad_duplicate(target);
        true
    }

    /// An MLD query (RFC 3810 6.2): answered with a current-state report
    /// of our groups after a delay within its Maximum Response Delay.
    pub(crate) fn receive_mld(&mut self, now: Instant, ip: &Ipv6Repr, m: &MldRepr<'_>) {
        let MldRepr::Query {
            max_resp_code,
            mcast_addr,
            ..
        } = *m
        else {
            return;
        };
        if self.host6.cfg == Ipv6HostConfig::default() {
            return;
        }
        // RFC 3810 5.1.14 / 6.2: from a link-local source, hop limit 1.
        if !is_link_local6(ip.src) || ip.hop_limit != 1 {
            return;
        }
        let groups = self.mld_groups();
        if !mcast_addr.is_unspecified() && !groups.contains(&mcast_addr) {
            return;
        }
        let max = u64::from(max_resp_delay_ms(max_resp_code));
        let delay = self.random_delay(now, 0x63, max.saturating_sub(1));
        let at = now + delay;
        match self.host6.mld_at {
            Some((t, _)) if t <= at => {}
            _ => self.host6.mld_at = Some((at, false)),
        }
    }

    /// The groups we report: the solicited-node groups of our addresses,
    /// tentative ones included (all-nodes is never reported, RFC 3810 6).
    fn mld_groups(&self) -> Vec<Ipv6Addr> {
        let mut g: Vec<Ipv6Addr> = Vec::new();
        let all = self.iface.addrs6.iter().chain(&self.iface.tentative6);
        for c in all {
            let s = solicited_node(c.address);
            if !g.contains(&s) {
                g.push(s);
            }
        }
        g
    }

    /// Send an MLDv2 report for every group (RFC 3810 5.2): to ff02::16,
    /// hop limit 1, a Router Alert in a Hop-by-Hop header, from our
    /// link-local address or `::` while it is tentative.
    fn send_mld_report(&mut self, now: Instant, join: bool, tx: &mut dyn FnMut(&[u8])) {
        let groups = self.mld_groups();
        let kind = if join {
            record_type::CHANGE_TO_EXCLUDE
        } else {
            record_type::MODE_IS_EXCLUDE
        };
        self.send_mld_records(now, kind, &groups, tx);
    }

    /// A group we no longer need (its address went): RFC 3810 6.1, a
    /// state-change report with a CHANGE_TO_INCLUDE record without
    /// sources, on the next poll.
    fn leave_group_of(&mut self, addr: Ipv6Addr) {
        let g = solicited_node(addr);
        if !self.mld_groups().contains(&g) && !self.host6.mld_leave.contains(&g) {
            self.host6.mld_leave.push(g);
        }
    }

    /// An MLDv2 report of `groups`, each with a record of type `kind`
    /// and no sources.
    fn send_mld_records(
        &mut self,
        now: Instant,
        kind: u8,
        groups: &[Ipv6Addr],
        tx: &mut dyn FnMut(&[u8]),
    ) {
        if groups.is_empty() {
            return;
        }
        let ll = link_local(self.iface.mac).address;
        let src = if self.iface.has_addr6(ll) {
            ll
        } else {
            Ipv6Addr::UNSPECIFIED
        };
        let mld_len = 8 + 20 * groups.len();
        let mut b = vec![0u8; 8 + mld_len];
        // Hop-by-Hop: Next Header ICMPv6, length 0, Router Alert (RFC
        // 2711, value 0 = MLD), PadN of 2.
        b[..8].copy_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
        let m = &mut b[8..];
        m[0] = Icmpv6Message::MldV2Report.into();
        let n = u16::try_from(groups.len()).unwrap_or(u16::MAX);
        m[6..8].copy_from_slice(&n.to_be_bytes());
        for (i, g) in groups.iter().enumerate() {
            let r = &mut m[8 + 20 * i..8 + 20 * (i + 1)];
            r[0] = kind;
            r[4..20].copy_from_slice(&g.octets());
        }
        Icmpv6Packet::new_unchecked(&mut m[..]).fill_checksum(&src, &ALL_MLDV2_ROUTERS);
        let out = Ip6Out {
            src,
            dst: ALL_MLDV2_ROUTERS,
            next_header: IpProtocol::HOP_BY_HOP,
            hop_limit: 1,
        };
        let c = &mut self.counters;
        if self.iface.send_ip6(now, c, out, &b, tx).is_ok() {
            c.icmp6.OutMsgs += 1;
            c.icmp6.OutMLDv2Reports += 1;
        }
    }

    /// The DAD probe: a solicitation from `::` to the solicited-node
    /// group, without a source link-layer option (RFC 4862 5.4.2).
    fn send_dad_ns(&mut self, target: Ipv6Addr, tx: &mut dyn FnMut(&[u8])) {
        let g = solicited_node(target);
        let msg = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target,
            options: NdiscOptions::default(),
        });
        let mac = ipv6_multicast_mac(g);
        self.iface.send_nd(
            Ipv6Addr::UNSPECIFIED,
            g,
            mac,
            &msg,
            &mut self.counters.link,
            tx,
        );
        self.counters.icmp6.OutMsgs += 1;
        self.counters.icmp6.OutNeighborSolicits += 1;
    }

    /// RFC 4861 6.3.7: to all-routers, with our link-layer address unless
    /// the source is `::`.
    fn send_rs(&mut self, tx: &mut dyn FnMut(&[u8])) {
        let ll = link_local(self.iface.mac).address;
        let mac = self.iface.mac.0;
        let mut opts = [0u8; 8];
        let src = if self.iface.has_addr6(ll) {
            if NdiscOption::SourceLinkLayerAddr(&mac)
                .emit(&mut opts)
                .is_err()
            {
                return;
            }
            ll
        } else {
            Ipv6Addr::UNSPECIFIED
        };
        let options = if src.is_unspecified() {
            NdiscOptions::default()
        } else {
            match NdiscOptions::new_checked(&opts) {
                Ok(o) => o,
                Err(_) => return,
            }
        };
        let msg = Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit { options });
        let dmac = ipv6_multicast_mac(ALL_ROUTERS);
        self.iface
            .send_nd(src, ALL_ROUTERS, dmac, &msg, &mut self.counters.link, tx);
        self.counters.icmp6.OutMsgs += 1;
        self.counters.icmp6.OutRouterSolicits += 1;
    }

    /// Timers: the MLD report, DAD probes and their end, solicitations,
    /// and the lifetimes of routers, prefixes and SLAAC addresses.
    pub(crate) fn poll_host6(&mut self, now: Instant, tx: &mut dyn FnMut(&[u8])) {
        if let Some((at, join)) = self.host6.mld_at {
            if at <= now {
                self.host6.mld_at = None;
                self.send_mld_report(now, join, tx);
                // RFC 3810 6.1: the unsolicited report is retransmitted
                // [Robustness Variable] - 1 more times, after a random
                // delay within [Unsolicited Report Interval] (1 s).
                if join && self.host6.mld_join_repeat {
                    self.host6.mld_join_repeat = false;
                    let delay = self.random_delay(now, 0x64, 999) + Duration::from_millis(1);
                    self.host6.mld_at = Some((now + delay, true));
                }
            }
        }
        let transmits = self.host6.cfg.dad_transmits;
        let due: Vec<Dad> = self
            .host6
            .dad
            .iter()
            .filter(|d| d.next <= now)
            .copied()
            .collect();
        for d in due {
            if d.sent < transmits {
                self.send_dad_ns(d.addr, tx);
                for x in self.host6.dad.iter_mut().filter(|x| x.addr == d.addr) {
                    x.sent += 1;
                    x.next = now + RETRANS_TIMER;
                }
                continue;
            }
            // No answer in time: the address is ours (RFC 4862 5.4).
            if let Some(c) = self.dad_done(d.addr) {
                if is_link_local6(c.address) {
                    self.iface.addrs6.insert(0, c);
                } else {
                    self.iface.addrs6.push(c);
                }
            }
        }
        let rs_max = self.host6.cfg.router_solicitations;
        if let Some(t) = self.host6.rs_next {
            let ll = link_local(self.iface.mac).address;
            let ll_tentative = self.iface.tentative6.iter().any(|c| c.address == ll);
            if self.host6.ra_seen || self.host6.rs_sent >= rs_max || !self.host6.cfg.accept_ra {
                self.host6.rs_next = None;
            } else if t <= now && !ll_tentative {
                // (While the link-local address is tentative, wait: an RS
                // from it would use an address not yet ours.)
                self.send_rs(tx);
                self.host6.rs_sent += 1;
                self.host6.rs_next = Some(now + RTR_SOLICITATION_INTERVAL);
            }
        }
        self.iface.routers6.retain(|&(_, until)| until > now);
        // A redirected destination goes with the router that redirected it.
        let routers = &self.iface.routers6;
        self.iface
            .redirects6
            .retain(|r| r.until > now && routers.iter().any(|&(x, _)| x == r.router));
        self.iface
            .onlink6
            .retain(|&(_, until)| until.is_none_or(|u| u > now));
        let gone: Vec<Ipv6Addr> = self
            .host6
            .slaac
            .iter()
            .filter(|s| s.valid_until.is_some_and(|u| u <= now))
            .map(|s| s.addr)
            .collect();
        // Deprecated addresses go behind the others, so that source
        // selection (`Iface::source6`, the first global address) takes a
        // preferred one when there is one; connections keep theirs.
        let mut stale = Vec::new();
        for sl in self.host6.slaac.iter_mut() {
            if !sl.deprecated && sl.preferred_until.is_some_and(|u| u <= now) {
                sl.deprecated = true;
                stale.push(sl.addr);
            }
        }
        for a in stale {
            if let Some(i) = self.iface.addrs6.iter().position(|c| c.address == a) {
                let c = self.iface.addrs6.remove(i);
                self.iface.addrs6.push(c);
            }
        }
        for a in gone {
            // RFC 4862 5.5.4: "an address ... becomes invalid ... MUST NOT
            // be used".
            self.host6.slaac.retain(|s| s.addr != a);
            self.iface.addrs6.retain(|c| c.address != a);
            self.dad_done(a);
            self.leave_group_of(a);
        }
        if !self.host6.mld_leave.is_empty() {
            let leave = std::mem::take(&mut self.host6.mld_leave);
            self.send_mld_records(now, record_type::CHANGE_TO_INCLUDE, &leave, tx);
        }
    }

    pub(crate) fn host6_poll_at(&self) -> Option<Instant> {
        let h = &self.host6;
        let dad = h.dad.iter().map(|d| d.next).min();
        // (While the link-local address is tentative the solicitation waits
        // for the end of its DAD, a deadline of its own.)
        let ll = link_local(self.iface.mac).address;
        let ll_tentative = self.iface.tentative6.iter().any(|c| c.address == ll);
        let rs = h
            .rs_next
            .filter(|_| h.cfg.accept_ra && !h.ra_seen && !ll_tentative);
        let routers = self.iface.routers6.iter().map(|&(_, u)| u).min();
        let redirects = self.iface.redirects6.iter().map(|r| r.until).min();
        let prefixes = self.iface.onlink6.iter().filter_map(|&(_, u)| u).min();
        let slaac = h.slaac.iter().filter_map(|s| s.valid_until).min();
        let deprecate = h
            .slaac
            .iter()
            .filter(|s| !s.deprecated)
            .filter_map(|s| s.preferred_until)
            .min();
        [
            h.mld_at.map(|(t, _)| t),
            dad,
            rs,
            routers,
            redirects,
            prefixes,
            slaac,
            deprecate,
            // Leaves found on input go on the next poll.
            (!h.mld_leave.is_empty()).then_some(self.last_now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A Router Advertisement (RFC 4861 6.1.2 validity, 6.3.4 processing).
    pub(crate) fn receive_ra(&mut self, now: Instant, ip: &Ipv6Repr, nd: &NdiscRepr<'_>) {
        let NdiscRepr::RouterAdvert {
            router_lifetime,
            options,
            ..
        } = *nd
        else {
            return;
        };
        // Validity first, as Linux checks it before `accept_ra`: a forged
        // advertisement is counted whether or not it would be acted on.
        // "IP Source Address is a link-local address", "The IP Hop Limit
        // field has a value of 255".
        if !is_link_local6(ip.src) || ip.hop_limit != 255 {
            self.counters.nd.ArpInvalid += 1;
            return;
        }
        if !self.host6.cfg.accept_ra {
            return;
        }
        self.host6.ra_seen = true;
        // Default router list.
        let until = now + Duration::from_secs(u64::from(router_lifetime));
        let known = self.iface.routers6.iter().position(|&(r, _)| r == ip.src);
        match (known, router_lifetime) {
            (Some(i), 0) => {
                self.iface.routers6.remove(i);
            }
            (Some(i), _) => self.iface.routers6[i].1 = until,
            (None, 0) => {}
            (None, _) => {
                if self.iface.routers6.len() < MAX_ROUTERS {
                    self.iface.routers6.push((ip.src, until));
                }
            }
        }
        // The source link-layer address updates the router's entry
        // (RFC 4861 6.3.4, as for a solicitation).
        if let Some(mac) = options.source_ll_addr().and_then(NdiscOption::mac) {
            self.learn_unsolicited(now, ip.src, mac);
        }
        // MTU option: "If the MTU option is present, hosts SHOULD copy the
        // option's value ... if the value is ... [not above] the link
        // MTU", and never below 1280 (RFC 8200 5).
        if let Some(mtu) = options.mtu() {
            let mtu = usize::try_from(mtu).unwrap_or(usize::MAX);
            if (1280..=self.iface.mtu).contains(&mtu) {
                self.iface.ra_mtu6 = Some(mtu);
                let mss = u16::try_from(mtu - 60).unwrap_or(u16::MAX);
                self.tcp.set_route_mss6(mss);
            }
        }
        for p in options.prefixes() {
            if is_link_local6(p.prefix) || p.prefix.is_multicast() {
                continue;
            }
            if p.on_link() {
                self.ra_onlink(now, &p);
            }
            if p.autonomous() && self.host6.cfg.slaac {
                self.ra_slaac(now, &p);
            }
        }
    }

    /// RFC 4861 8.1 and 8.3: a valid Redirect from the router we use for a
    /// destination sends that destination's packets to the Target Address
    /// instead (a better router, or the destination itself, on-link). Only
    /// a host acts on one: a router (Linux with `forwarding`, ustack as the
    /// gateway of `run`) never has a first-hop router for the destination,
    /// so no Redirect passes the check below. The caller checked the hop
    /// limit (255) and that the packet was not fragmented.
    pub(crate) fn receive_redirect(&mut self, now: Instant, ip: &Ipv6Repr, nd: &NdiscRepr<'_>) {
        let NdiscRepr::Redirect {
            target,
            dest,
            options,
        } = *nd
        else {
            return;
        };
        // 8.1: "IP Source Address is a link-local address", "The ICMP
        // Destination Address field in the redirect message does not contain
        // a multicast address", "The ICMP Target Address is either a
        // link-local address (when redirected to a router) or the same as
        // the ICMP Destination Address (when redirected to the on-link
        // destination)".
        if !is_link_local6(ip.src)
            || dest.is_multicast()
            || dest.is_unspecified()
            || !(is_link_local6(target) || target == dest)
            || target.is_multicast()
        {
            self.counters.nd.ArpInvalid += 1;
            return;
        }
        // "The IP source address of the Redirect is the same as the current
        // first-hop router for the specified ICMP Destination Address": the
        // default router, or the router an earlier Redirect named.
        let first_hop = match self.iface.route6(dest) {
            Some(NextHop6::Neighbour(h)) if h != dest => Some(h),
            _ => None,
        };
        if first_hop != Some(ip.src) || self.iface.has_addr6(target) {
            return;
        }
        // 8.3: "If the redirect contains a Target Link-Layer Address option,
        // the host either creates or updates the Neighbor Cache entry for the
        // target ... its reachability state MUST be set to STALE".
        if let Some(mac) = options.target_ll_addr().and_then(NdiscOption::mac) {
            self.learn_unsolicited(now, target, mac);
        }
        // The entry goes with the default router behind it: the one that
        // sent this Redirect, or the one behind the entry it replaces.
        let router = self
            .iface
            .redirects6
            .iter()
            .find(|r| r.dst == dest)
            .map_or(ip.src, |r| r.router);
        let entry = Redirect6 {
            dst: dest,
            next_hop: target,
            router,
            until: now + REDIRECT_LIFETIME,
        };
        let cache = &mut self.iface.redirects6;
        if let Some(e) = cache.iter_mut().find(|r| r.dst == dest) {
            *e = entry;
            return;
        }
        if cache.len() >= MAX_REDIRECTS {
            // (The first of equals: the oldest, as the order is kept.)
            if let Some(i) = (0..cache.len()).min_by_key(|&i| cache[i].until) {
                cache.remove(i);
            }
        }
        cache.push(entry);
    }

    /// A link-layer address an advertisement or a Redirect carried for
    /// `ip` (not solicited: created or updated STALE, overriding); packets
    /// waiting for it go now (without `tx` here: on the next poll through
    /// the queue). A multicast or broadcast address is ignored.
    fn learn_unsolicited(&mut self, now: Instant, ip: Ipv6Addr, mac: MacAddr) {
        if !mac.is_unicast() {
            return;
        }
        let ndc = &mut self.counters.nd;
        if let Some(q) = self.iface.nd.learn_nd(now, ip, mac, true, false, true, ndc) {
            let txq = &mut self.txq;
            self.iface
                .flush_queue(q, mac, &mut self.counters.link, &mut |f| txq.push(now, f));
        }
    }

    /// RFC 4861 6.3.4: an on-link prefix is added, refreshed, or removed
    /// (valid lifetime 0).
    fn ra_onlink(&mut self, now: Instant, p: &PrefixInfo) {
        let cidr = Ipv6Cidr {
            address: mask(p.prefix, p.prefix_len),
            prefix_len: p.prefix_len.min(128),
        };
        let until = lifetime(now, p.valid_lifetime);
        let known = self.iface.onlink6.iter().position(|(c, _)| *c == cidr);
        match known {
            Some(i) if p.valid_lifetime == 0 => {
                self.iface.onlink6.remove(i);
            }
            Some(i) => self.iface.onlink6[i].1 = until,
            None if p.valid_lifetime == 0 => {}
            None => {
                if self.iface.onlink6.len() < MAX_PREFIXES {
                    self.iface.onlink6.push((cidr, until));
                }
            }
        }
    }

    /// RFC 4862 5.5.3: an address from an autonomous /64 prefix and our
    /// interface identifier (modified EUI-64), with its lifetimes.
    fn ra_slaac(&mut self, now: Instant, p: &PrefixInfo) {
        // (c) "If the preferred lifetime is greater than the valid
        // lifetime, silently ignore the Prefix Information option."
        if p.preferred_lifetime > p.valid_lifetime || p.prefix_len != 64 {
            return;
        }
        let iid = link_local(self.iface.mac).address.octets();
        let mut a = mask(p.prefix, 64).octets();
        a[8..].copy_from_slice(&iid[8..]);
        let addr = Ipv6Addr::from(a);
        if self.host6.duplicates.contains(&addr) {
            return;
        }
        let valid = lifetime(now, p.valid_lifetime);
        let preferred = lifetime(now, p.preferred_lifetime);
        if let Some(s) = self.host6.slaac.iter_mut().find(|s| s.addr == addr) {
            s.preferred_until = preferred;
            s.deprecated = false;
            // (e) the two-hour rule: a short valid lifetime only lowers the
            // remaining one down to two hours (a forged advertisement cannot
            // kill the address at once).
            let received = if p.valid_lifetime == u32::MAX {
                u64::MAX
            } else {
                u64::from(p.valid_lifetime)
            };
            let remaining = secs_left(now, s.valid_until);
            if received > TWO_HOURS || received > remaining {
                s.valid_until = valid;
            } else if remaining <= TWO_HOURS {
                // Ignore.
            } else {
                s.valid_until = Some(now + Duration::from_secs(TWO_HOURS));
            }
            return;
        }
        // (d) a new address, if the valid lifetime is not 0.
        if p.valid_lifetime == 0 || self.iface.has_addr6(addr) {
            return;
        }
        if self.iface.addrs6.len() + self.iface.tentative6.len() >= MAX_IPV6_ADDRESSES {
            return;
        }
        // The prefix of the address counts as on-link only if the
        // advertisement says so (RFC 5942).
        let prefix_len = if p.on_link() { 64 } else { 128 };
        let cidr = Ipv6Cidr {
            address: addr,
            prefix_len,
        };
        self.host6.slaac.push(Slaac {
            addr,
            valid_until: valid,
            preferred_until: preferred,
            deprecated: false,
        });
        if self.dad_enabled() {
            self.start_dad(now, cidr);
        } else {
            self.iface.addrs6.push(cidr);
        }
    }

    /// Whether a SLAAC address's preferred lifetime is over (RFC 4862 5.5.4:
    /// deprecated, still valid for the connections that use it).
    pub fn ipv6_address_deprecated(&self, now: Instant, a: Ipv6Addr) -> bool {
        self.host6
            .slaac
            .iter()
            .any(|s| s.addr == a && s.preferred_until.is_some_and(|u| u <= now))
    }
}

/// `a` with the bits past `len` cleared.
fn mask(a: Ipv6Addr, len: u8) -> Ipv6Addr {
    let bits = u128::from(a);
    let len = u32::from(len.min(128));
    let m = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    Ipv6Addr::from(bits & m)
}
