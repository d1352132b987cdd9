//! Address services a router gives the hosts on its link: router
//! advertisements for SLAAC (`router6.rs`), a DHCPv4 server
//! (`dhcp_server.rs`) and a DHCPv6 server (`dhcp6_server.rs`). All off by
//! default; [`Stack::set_address_services`] turns them on. Time is the
//! caller's, randomness comes from the stack's seed.

use std::net::Ipv6Addr;

use crate::dhcp6_server::{Dhcp6Server, Dhcpv6Config};
use crate::dhcp_server::{Dhcp4Server, Dhcpv4Config};
use crate::hash::SplitMix;
use crate::router6::{Router6, RouterConfig, ALL_ROUTERS};
use crate::stack::Stack;
use crate::time::{Duration, Instant};

/// Which services run, with their configuration (`None` = off).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressServices {
    pub router: Option<RouterConfig>,
    pub dhcpv4: Option<Dhcpv4Config>,
    pub dhcpv6: Option<Dhcpv6Config>,
}

/// A configuration the services refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrServicesError {
    Router(&'static str),
    Dhcpv4(&'static str),
    Dhcpv6(&'static str),
}

impl std::fmt::Display for AddrServicesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AddrServicesError::Router(w) => write!(f, "router advertisements: {w}"),
            AddrServicesError::Dhcpv4(w) => write!(f, "DHCPv4 server: {w}"),
            AddrServicesError::Dhcpv6(w) => write!(f, "DHCPv6 server: {w}"),
        }
    }
}

impl std::error::Error for AddrServicesError {}

/// The services' randomness (seeded from the stack's seed).
#[derive(Debug, Clone)]
pub(crate) struct Rand(SplitMix);

impl Rand {
    /// Uniform in `lo..=hi` (microsecond granularity).
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        let lo_us = u64::try_from(lo.as_micros()).unwrap_or(u64::MAX);
        let hi_us = u64::try_from(hi.as_micros()).unwrap_or(u64::MAX);
        if hi_us <= lo_us {
            return lo;
        }
        let span = hi_us - lo_us + 1;
        Duration::from_micros(lo_us + self.0.next_u64() % span)
    }
}

/// The services' state, owned by the `Stack` (boxed: one pointer when off).
#[derive(Debug, Clone)]
pub(crate) struct Services {
    pub router: Option<Router6>,
    pub dhcp4: Option<Dhcp4Server>,
    pub dhcp6: Option<Dhcp6Server>,
    pub rng: Rand,
}

/// Multicast groups the services listen on: all-routers for
/// solicitations, All_DHCP_Relay_Agents_and_Servers for DHCPv6.
pub(crate) fn accepts6(services: &Option<Box<Services>>, dst: Ipv6Addr) -> bool {
    let Some(s) = services.as_deref() else {
        return false;
    };
    (s.router.is_some() && dst == ALL_ROUTERS)
        || (s.dhcp6.is_some() && dst == ustack_wire::dhcpv6::ALL_RELAY_AGENTS_AND_SERVERS)
}

impl Stack {
    /// Turn the address services on (or off, with `AddressServices::default()`),
    /// replacing the previous ones and their leases. The first router
    /// advertisement goes on the next `poll`; turning advertisements off
    /// sends a final one with Router Lifetime zero (RFC 4861 6.2.5) on the
    /// next `poll`.
    pub fn set_address_services(
        &mut self,
        now: Instant,
        svc: AddressServices,
    ) -> Result<(), AddrServicesError> {
        if let Some(r) = &svc.router {
            r.validate()?;
        }
        if let Some(d) = &svc.dhcpv4 {
            d.validate()?;
        }
        if let Some(d) = &svc.dhcpv6 {
            d.validate()?;
        }
        let stopped = match self.services.as_deref().and_then(|s| s.router.as_ref()) {
            Some(r) if svc.router.is_none() => Some(r.cfg.clone()),
            _ => None,
        };
        if let Some(cfg) = stopped {
            self.final_ra(now, &cfg);
        }
        if svc.router.is_none() && svc.dhcpv4.is_none() && svc.dhcpv6.is_none() {
            self.services = None;
            return Ok(());
        }
        let seed = self.config.seed ^ 0x6164_6472_7376_6373;
        let mac = self.iface.mac.0;
        self.services = Some(Box::new(Services {
            router: svc.router.map(|c| Router6::new(c, now)),
            dhcp4: svc.dhcpv4.map(Dhcp4Server::new),
            dhcp6: svc.dhcpv6.map(|c| Dhcp6Server::new(c, mac)),
            rng: Rand(SplitMix::new(seed)),
        }));
        Ok(())
    }

    /// The services' configuration in force.
    pub fn address_services(&self) -> AddressServices {
        match self.services.as_deref() {
            None => AddressServices::default(),
            Some(s) => AddressServices {
                router: s.router.as_ref().map(|r| r.cfg.clone()),
                dhcpv4: s.dhcp4.as_ref().map(|d| d.cfg.clone()),
                dhcpv6: s.dhcp6.as_ref().map(|d| d.cfg.clone()),
            },
        }
    }

    pub(crate) fn services_poll(&mut self, now: Instant, tx: &mut dyn FnMut(&[u8])) {
        if self.services.is_some() {
            self.router_poll(now, tx);
        }
    }

    pub(crate) fn services_poll_at(&self) -> Option<Instant> {
        self.services
            .as_deref()?
            .router
            .as_ref()
            .map(Router6::poll_at)
    }
}
