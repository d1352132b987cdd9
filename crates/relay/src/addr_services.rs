//! The address services the guest engine runs for its guest (issue 15
//! item 5): router advertisements for SLAAC with the DNS server (RDNSS),
//! DHCPv6 for guests that ask, and DHCPv4 giving the guest the address,
//! gateway and DNS the relay serves. The addresses follow slirp4netns:
//! IPv4 guest 10.0.2.15/24, gateway 10.0.2.2, DNS 10.0.2.3; IPv6 network
//! fd00::/64, gateway fd00::2, DNS fd00::3, guest fd00::100 (the address
//! DHCPv6 gives; SLAAC forms its own from the guest's MAC).

use std::net::{Ipv4Addr, Ipv6Addr};

use ustack_core::{AddressServices, Dhcpv4Config, Dhcpv6Config, RouterConfig};

/// The guest's IPv6 network (/64).
pub const PREFIX6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0);
/// The IPv6 DNS server the relay serves.
pub const DNS6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);
/// The address DHCPv6 gives the (first) guest.
pub const GUEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100);

/// Which services run (all by default; `--no-ra`, `--no-dhcp`,
/// `--no-dhcpv6` turn them off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceSwitches {
    pub ra: bool,
    pub dhcpv4: bool,
    pub dhcpv6: bool,
}

impl Default for ServiceSwitches {
    fn default() -> Self {
        ServiceSwitches {
            ra: true,
            dhcpv4: true,
            dhcpv6: true,
        }
    }
}

/// The guest's IPv6 side (`--addr6`, `--dns6`): its address and prefix
/// length, and the resolver the relay serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guest6 {
    pub addr: Ipv6Addr,
    pub prefix_len: u8,
    pub dns: Ipv6Addr,
}

impl Default for Guest6 {
    /// fd00::100/64 with the resolver fd00::3 (slirp4netns's network).
    fn default() -> Self {
        Guest6 {
            addr: GUEST6,
            prefix_len: 64,
            dns: DNS6,
        }
    }
}

/// The services for one guest at `guest`/`prefix_len` behind `gateway`,
/// with `dns` as its IPv4 resolver, on a link of `mtu`; over IPv6 the
/// prefix of `v6.addr` is advertised (SLAAC needs a /64: with another
/// length, hosts keep to the DHCPv6 address), `v6.dns` by RDNSS and
/// DHCPv6, and DHCPv6 gives `v6.addr`.
pub fn guest_services(
    on: ServiceSwitches,
    guest: Ipv4Addr,
    gateway: Ipv4Addr,
    prefix_len: u8,
    dns: Ipv4Addr,
    v6: Guest6,
    mtu: usize,
) -> AddressServices {
    let router = on.ra.then(|| {
        let mut r = RouterConfig::new(v6.addr);
        r.prefix_len = v6.prefix_len;
        r.prefix = r.network();
        r.rdnss = vec![v6.dns];
        r.mtu = u32::try_from(mtu).ok().filter(|m| *m >= 1280);
        // Other configuration (DNS) by DHCPv6 too, for guests that ignore
        // RDNSS; the address by SLAAC.
        r.other = on.dhcpv6;
        r
    });
    // A guest address off the gateway's subnet cannot be served by DHCP.
    let dhcpv4 = on
        .dhcpv4
        .then(|| {
            let mut d = Dhcpv4Config::new(gateway, prefix_len, guest);
            d.dns = vec![dns];
            d
        })
        .filter(|d| d.validate().is_ok());
    let dhcpv6 = on.dhcpv6.then(|| {
        let mut d = Dhcpv6Config::new(v6.addr);
        d.prefix_len = v6.prefix_len;
        d.dns = vec![v6.dns];
        d
    });
    AddressServices {
        router,
        dhcpv4,
        dhcpv6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_slirp4netns_and_switches_turn_services_off() {
        let g = Ipv4Addr::new(10, 0, 2, 15);
        let gw = Ipv4Addr::new(10, 0, 2, 2);
        let dns = Ipv4Addr::new(10, 0, 2, 3);
        let s = guest_services(
            ServiceSwitches::default(),
            g,
            gw,
            24,
            dns,
            Guest6::default(),
            65520,
        );
        let d4 = s
            .dhcpv4
            .as_ref()
            .map(|d| (d.pool_start, d.router, d.dns.clone()));
        assert_eq!(d4, Some((g, Some(gw), vec![dns])));
        let r = s
            .router
            .as_ref()
            .map(|r| (r.prefix, r.rdnss.clone(), r.mtu, r.other));
        assert_eq!(r, Some((PREFIX6, vec![DNS6], Some(65520), true)));
        assert_eq!(s.dhcpv6.as_ref().map(|d| d.first), Some(GUEST6));
        let elsewhere = Ipv4Addr::new(10, 0, 3, 15);
        let s = guest_services(
            ServiceSwitches::default(),
            elsewhere,
            gw,
            24,
            dns,
            Guest6::default(),
            65520,
        );
        assert!(s.dhcpv4.is_none() && s.router.is_some());
        let off = ServiceSwitches {
            ra: false,
            dhcpv4: false,
            dhcpv6: false,
        };
        assert_eq!(
            guest_services(off, g, gw, 24, dns, Guest6::default(), 1500),
            AddressServices::default()
        );
    }

    #[test]
    fn ipv6_services_follow_the_guests_address_and_resolver() {
        let g = Ipv4Addr::new(10, 0, 2, 15);
        let gw = Ipv4Addr::new(10, 0, 2, 2);
        let dns = Ipv4Addr::new(10, 0, 2, 3);
        let v6 = Guest6 {
            addr: "fd42:1:2:3::5".parse().expect("literal"),
            prefix_len: 64,
            dns: "fd42:1:2:3::53".parse().expect("literal"),
        };
        let s = guest_services(ServiceSwitches::default(), g, gw, 24, dns, v6, 1500);
        let r = s.router.as_ref().expect("router");
        let want: Ipv6Addr = "fd42:1:2:3::".parse().expect("literal");
        assert_eq!(
            (r.prefix, r.prefix_len, r.rdnss.clone()),
            (want, 64, vec![v6.dns])
        );
        assert!(r.validate().is_ok());
        let d = s.dhcpv6.as_ref().expect("dhcpv6");
        assert_eq!(
            (d.first, d.prefix_len, d.dns.clone()),
            (v6.addr, 64, vec![v6.dns])
        );
    }
}
