//! The host resolver that DNS sent to the guest-visible nameserver goes to.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The first usable `nameserver` of a resolv.conf text, port 53, in the
/// file's order (as the C library tries them), IPv4 or IPv6. A loopback
/// address (e.g. systemd-resolved's 127.0.0.53, or ::1) is fine: the relay
/// runs in the host's network namespace. Skipped: unspecified and
/// multicast addresses, and IPv6 link-local ones (they need an interface,
/// `fe80::1%eth0`, which a host socket address cannot carry portably).
pub fn first_nameserver(resolv_conf: &str) -> Option<SocketAddr> {
    resolv_conf.lines().find_map(|line| {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("nameserver"), Some(addr)) => addr
                .parse::<IpAddr>()
                .ok()
                .filter(usable)
                .map(|a| SocketAddr::new(a, 53)),
            _ => None,
        }
    })
}

fn usable(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_multicast() && !v4.is_broadcast(),
        IpAddr::V6(v6) => {
            let link_local = v6.segments()[0] & 0xffc0 == 0xfe80;
            !v6.is_unspecified() && !v6.is_multicast() && !link_local
        }
    }
}

/// The host's resolver from `/etc/resolv.conf`, or 127.0.0.1:53 if none
/// (the C library's default too).
pub fn host_resolver() -> SocketAddr {
    std::fs::read_to_string("/etc/resolv.conf")
        .ok()
        .and_then(|s| first_nameserver(&s))
        .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_usable_nameserver() {
        let conf = "# comment\nsearch lan\nnameserver fe80::1\nnameserver 127.0.0.53 # resolved\nnameserver 8.8.8.8\n";
        assert_eq!(
            first_nameserver(conf),
            Some("127.0.0.53:53".parse().expect("literal"))
        );
    }

    #[test]
    fn an_ipv6_only_host_resolver_is_used() {
        let conf = "nameserver fe80::1%eth0\nnameserver ff02::1\nnameserver 2001:db8::53\nnameserver 9.9.9.9\n";
        assert_eq!(
            first_nameserver(conf),
            Some("[2001:db8::53]:53".parse().expect("literal"))
        );
        assert_eq!(
            first_nameserver("nameserver ::1\n"),
            Some("[::1]:53".parse().expect("literal"))
        );
        assert_eq!(
            first_nameserver("nameserver ::\nnameserver 224.0.0.1\n"),
            None
        );
    }

    #[test]
    fn none_when_absent_or_garbage() {
        assert_eq!(first_nameserver(""), None);
        assert_eq!(
            first_nameserver("nameserver\nnameserver bogus\n;nameserver 1.1.1.1\n"),
            None
        );
        assert_eq!(first_nameserver("nameserver 0.0.0.0\n"), None);
        assert_eq!(
            first_nameserver("  nameserver\t9.9.9.9\n"),
            Some("9.9.9.9:53".parse().expect("literal"))
        );
    }
}
