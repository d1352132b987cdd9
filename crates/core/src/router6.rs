//! Router advertisements, the router side of RFC 4861 6.2: an interface
//! configured with a [`RouterConfig`] answers Router Solicitations and sends
//! unsolicited advertisements at randomised intervals, from its link-local
//! address to all-nodes, with the prefix (on-link, autonomous: the guest
//! forms its address by SLAAC, RFC 4862), the MTU and the DNS servers
//! (RDNSS, RFC 8106). The engine does not forward: it advertises itself as
//! the default router because the relay behind it answers for every
//! destination.
//!
//! Scheduling (one timer, RFC 4861 6.2.4 and 6.2.6): the next multicast
//! advertisement is due at `next`. A solicitation brings it forward to a
//! random delay in `0..=MAX_RA_DELAY_TIME`, but never sooner than
//! `MIN_DELAY_BETWEEN_RAS` after the previous one; every advertisement sent
//! schedules the next unsolicited one a random interval in
//! `MinRtrAdvInterval..=MaxRtrAdvInterval` later (at most
//! `MAX_INITIAL_RTR_ADVERT_INTERVAL` for the first ones).

use std::net::Ipv6Addr;

use ustack_wire::ethernet::MacAddr;
use ustack_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::{IpProtocol, Ipv6AddrList};
use ustack_wire::ipv6::Ipv6Repr;
use ustack_wire::ndisc::{
    prefix_flags, ra_flags, NdiscOption, NdiscOptions, NdiscRepr, PrefixInfo,
};

use crate::addr_services::{AddrServicesError, Rand};
use crate::iface::Ip6Out;
use crate::ip6::ALL_NODES;
use crate::stack::Stack;
use crate::time::{Duration, Instant};

/// RFC 4861 10: router constants.
pub const MAX_INITIAL_RTR_ADVERT_INTERVAL: Duration = Duration::from_secs(16);
pub const MAX_INITIAL_RTR_ADVERTISEMENTS: u8 = 3;
pub const MIN_DELAY_BETWEEN_RAS: Duration = Duration::from_secs(3);
pub const MAX_RA_DELAY_TIME: Duration = Duration::from_millis(500);

/// The all-routers group (RFC 4291 2.7.1), where hosts send solicitations.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

/// Most DNS servers one advertisement carries.
pub const MAX_RDNSS: usize = 8;

/// What the router advertises (RFC 4861 6.2.1's AdvXxx variables; the
/// defaults are RFC 4861's and radvd's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// The advertised prefix (on-link and autonomous).
    pub prefix: Ipv6Addr,
    /// 64 for SLAAC on Ethernet (RFC 4862 5.5.3 d, RFC 2464).
    pub prefix_len: u8,
    /// Recursive DNS servers (RFC 8106), at most [`MAX_RDNSS`]; none = no
    /// RDNSS option.
    pub rdnss: Vec<Ipv6Addr>,
    /// The MTU option (AdvLinkMTU); `None` = not sent.
    pub mtu: Option<u32>,
    /// Seconds (AdvDefaultLifetime; 0 = not a default router), default
    /// 3 × MaxRtrAdvInterval.
    pub router_lifetime: u16,
    /// The M flag: addresses by DHCPv6.
    pub managed: bool,
    /// The O flag: other configuration (DNS) by DHCPv6.
    pub other: bool,
    /// MaxRtrAdvInterval (4 s ..= 1800 s), default 600 s.
    pub max_interval: Duration,
    /// MinRtrAdvInterval (3 s ..= 0.75 × max), default 0.33 × max.
    pub min_interval: Duration,
    /// Prefix valid and preferred lifetimes, seconds (AdvValidLifetime
    /// 86400, AdvPreferredLifetime 14400).
    pub valid_lifetime: u32,
    pub preferred_lifetime: u32,
    /// AdvCurHopLimit (0 = unspecified), default 64.
    pub cur_hop_limit: u8,
}

impl RouterConfig {
    /// Defaults for `prefix`/64.
    pub fn new(prefix: Ipv6Addr) -> Self {
        RouterConfig {
            prefix,
            prefix_len: 64,
            rdnss: Vec::new(),
            mtu: None,
            router_lifetime: 1800,
            managed: false,
            other: false,
            max_interval: Duration::from_secs(600),
            min_interval: Duration::from_secs(198),
            valid_lifetime: 86_400,
            preferred_lifetime: 14_400,
            cur_hop_limit: 64,
        }
    }

    /// RFC 4861 6.2.1's bounds.
    pub fn validate(&self) -> Result<(), AddrServicesError> {
        let bad = |why| Err(AddrServicesError::Router(why));
        if self.prefix_len > 128 || self.prefix.is_multicast() || self.prefix.is_loopback() {
            return bad("bad prefix");
        }
        if self.max_interval < Duration::from_secs(4)
            || self.max_interval > Duration::from_secs(1800)
        {
            return bad("MaxRtrAdvInterval must be 4..=1800 s");
        }
        if self.min_interval < Duration::from_secs(3)
            || self.min_interval * 4 > self.max_interval * 3
        {
            return bad("MinRtrAdvInterval must be 3 s..=0.75 MaxRtrAdvInterval");
        }
        let lifetime = Duration::from_secs(u64::from(self.router_lifetime));
        if self.router_lifetime != 0
            && (lifetime < self.max_interval || self.router_lifetime > 9000)
        {
            return bad("router lifetime must be 0 or MaxRtrAdvInterval..=9000 s");
        }
        if self.preferred_lifetime > self.valid_lifetime {
            return bad("preferred lifetime above valid lifetime");
        }
        if self.rdnss.len() > MAX_RDNSS {
            return bad("too many RDNSS addresses");
        }
        if let Some(m) = self.mtu {
            if m < 1280 {
                return bad("MTU below 1280");
            }
        }
        Ok(())
    }

    /// The prefix with its host bits cleared (what the advertisement
    /// carries).
    pub fn network(&self) -> Ipv6Addr {
        let bits = u128::from(self.prefix);
        let mask = match self.prefix_len {
            0 => 0,
            n => u128::MAX << (128 - u32::from(n.min(128))),
        };
        Ipv6Addr::from(bits & mask)
    }
}

/// The advertising state of the interface.
#[derive(Debug, Clone)]
pub(crate) struct Router6 {
    pub cfg: RouterConfig,
    /// When the next multicast advertisement is due.
    next: Instant,
    /// Advertisements left whose following interval is capped at
    /// `MAX_INITIAL_RTR_ADVERT_INTERVAL`.
    initial_left: u8,
    last_sent: Option<Instant>,
}

impl Router6 {
    /// The interface becomes advertising: the first advertisement goes on
    /// the next poll.
    pub fn new(cfg: RouterConfig, now: Instant) -> Self {
        Router6 {
            cfg,
            next: now,
            initial_left: MAX_INITIAL_RTR_ADVERTISEMENTS,
            last_sent: None,
        }
    }

    pub fn poll_at(&self) -> Instant {
        self.next
    }

    /// RFC 4861 6.2.6: a valid solicitation schedules a multicast answer.
    fn solicited(&mut self, now: Instant, rng: &mut Rand) {
        let delay = rng.duration(Duration::ZERO, MAX_RA_DELAY_TIME);
        let at = match self.last_sent {
            Some(l) if now < l + MIN_DELAY_BETWEEN_RAS => l + MIN_DELAY_BETWEEN_RAS + delay,
            _ => now + delay,
        };
        // "If the computed value corresponds to a time later than the time
        // the next multicast Router Advertisement is scheduled to be sent,
        // ignore the random delay and send the advertisement at the
        // already-scheduled time."
        self.next = self.next.min(at);
    }

    /// An advertisement went out at `now`: schedule the next one.
    fn sent(&mut self, now: Instant, rng: &mut Rand) {
        self.last_sent = Some(now);
        let mut interval = rng.duration(self.cfg.min_interval, self.cfg.max_interval);
        if self.initial_left > 0 {
            self.initial_left -= 1;
            interval = interval.min(MAX_INITIAL_RTR_ADVERT_INTERVAL);
        }
        self.next = now + interval;
    }
}

/// Write the options (SLLA, MTU, prefix, RDNSS) into `buf`; their
/// length, or `None` if they do not fit.
fn ra_options(c: &RouterConfig, mac: MacAddr, buf: &mut [u8]) -> Option<usize> {
    let mut pos = 0;
    let mut put = |o: NdiscOption<'_>, buf: &mut [u8]| -> Option<()> {
        pos += o.emit(buf.get_mut(pos..)?).ok()?;
        Some(())
    };
    let m = mac.0;
    put(NdiscOption::SourceLinkLayerAddr(&m), buf)?;
    if let Some(mtu) = c.mtu {
        put(NdiscOption::Mtu(mtu), buf)?;
    }
    put(
        NdiscOption::PrefixInformation(PrefixInfo {
            prefix_len: c.prefix_len,
            flags: prefix_flags::ON_LINK | prefix_flags::AUTONOMOUS,
            valid_lifetime: c.valid_lifetime,
            preferred_lifetime: c.preferred_lifetime,
            prefix: c.network(),
        }),
        buf,
    )?;
    if !c.rdnss.is_empty() {
        // RFC 8106 5.1: the lifetime "SHOULD be bounded as follows:
        // MaxRtrAdvInterval <= Lifetime <= 2*MaxRtrAdvInterval".
        let lifetime = u32::try_from(c.max_interval.as_secs() * 2).unwrap_or(u32::MAX);
        put(
            NdiscOption::Rdnss {
                lifetime,
                servers: Ipv6AddrList::Addrs(&c.rdnss),
            },
            buf,
        )?;
    }
    Some(pos)
}

impl Stack {
    /// A Router Solicitation (counted by the caller). RFC 4861 6.1.1: hop
    /// limit 255, and from the unspecified address no source link-layer
    /// address option (code, length and option lengths were checked by the
    /// parse). A valid one from a specified address with the option updates
    /// the neighbour cache (6.2.6) and schedules an advertisement.
    pub(crate) fn receive_rs(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        options: NdiscOptions<'_>,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let Some(svc) = self.services.as_deref_mut() else {
            return;
        };
        let Some(router) = svc.router.as_mut() else {
            return;
        };
        let sll = options.source_ll_addr();
        let ndc = &mut self.counters.nd;
        if ip.hop_limit != 255 || (ip.src.is_unspecified() && sll.is_some()) {
            ndc.ArpInvalid += 1;
            return;
        }
        let mac = match sll.map(NdiscOption::mac) {
            None => None,
            Some(Some(m)) if m.is_unicast() => Some(m),
            Some(_) => {
                ndc.ArpInvalid += 1;
                return;
            }
        };
        router.solicited(now, &mut svc.rng);
        if let (Some(mac), false) = (mac, ip.src.is_unspecified()) {
            // "the router MAY ... update the Neighbor Cache" (STALE).
            let learned = self
                .iface
                .nd
                .learn_nd(now, ip.src, mac, true, false, true, ndc);
            if let Some(queue) = learned {
                self.iface
                    .flush_queue(queue, mac, &mut self.counters.link, tx);
            }
        }
    }

    /// Send the advertisement if it is due.
    pub(crate) fn router_poll(&mut self, now: Instant, tx: &mut dyn FnMut(&[u8])) {
        let Some(svc) = self.services.as_deref_mut() else {
            return;
        };
        let Some(router) = svc.router.as_mut() else {
            return;
        };
        if now < router.next {
            return;
        }
        router.sent(now, &mut svc.rng);
        let cfg = router.cfg.clone();
        self.send_ra(now, &cfg, cfg.router_lifetime, tx);
    }

    /// RFC 4861 6.2.5: an interface that stops advertising sends a final
    /// advertisement with Router Lifetime zero (hosts drop the default
    /// route at once), queued for the next `poll`.
    pub(crate) fn final_ra(&mut self, now: Instant, cfg: &RouterConfig) {
        let mut q = std::mem::take(&mut self.txq);
        self.send_ra(now, cfg, 0, &mut |f| q.push(now, f));
        self.txq = q;
    }

    /// Build an advertisement of `cfg` with `router_lifetime` and send it
    /// to all-nodes.
    fn send_ra(
        &mut self,
        now: Instant,
        c: &RouterConfig,
        router_lifetime: u16,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let mut opts = [0u8; 256];
        let Some(n) = ra_options(c, self.iface.mac, &mut opts) else {
            return;
        };
        let Ok(options) = NdiscOptions::new_checked(&opts[..n]) else {
            return;
        };
        let mut flags = 0;
        if c.managed {
            flags |= ra_flags::MANAGED;
        }
        if c.other {
            flags |= ra_flags::OTHER;
        }
        let msg = Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
            hop_limit: c.cur_hop_limit,
            flags,
            router_lifetime,
            reachable_time: 0,
            retrans_time: 0,
            options,
        });
        // RFC 4861 6.1.2: from the link-local address, hop limit 255.
        let Some(src) = self.iface.addrs6.first().map(|a| a.address) else {
            return;
        };
        let mut body = [0u8; 16 + 256];
        let len = msg.buffer_len();
        let Some(b) = body.get_mut(..len) else {
            return;
        };
        msg.emit(
            &src,
            &ALL_NODES,
            &mut Icmpv6Packet::new_unchecked(&mut b[..]),
        );
        let out = Ip6Out {
            src,
            dst: ALL_NODES,
            next_header: IpProtocol::ICMPV6,
            hop_limit: 255,
        };
        let c = &mut self.counters;
        match self.iface.send_ip6(now, c, out, b, tx) {
            Ok(()) => {
                c.icmp6.OutMsgs += 1;
                c.icmp6.OutRouterAdvertisements += 1;
            }
            Err(_) => c.icmp6.OutErrors += 1,
        }
    }
}
