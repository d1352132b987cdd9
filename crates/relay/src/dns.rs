//! The host resolver that DNS sent to the guest-visible nameserver goes to.

use std::net::{Ipv4Addr, SocketAddrV4};

/// The first IPv4 `nameserver` of a resolv.conf text, port 53. A loopback
/// address (e.g. systemd-resolved's 127.0.0.53) is fine: the relay runs in
/// the host's network namespace.
pub fn first_nameserver(resolv_conf: &str) -> Option<SocketAddrV4> {
    resolv_conf.lines().find_map(|line| {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("nameserver"), Some(addr)) => addr
                .parse::<Ipv4Addr>()
                .ok()
                .filter(|a| !a.is_unspecified())
                .map(|a| SocketAddrV4::new(a, 53)),
            _ => None,
        }
    })
}

/// The host's resolver from `/etc/resolv.conf`, or 127.0.0.1:53 if none.
pub fn host_resolver() -> SocketAddrV4 {
    std::fs::read_to_string("/etc/resolv.conf")
        .ok()
        .and_then(|s| first_nameserver(&s))
        .unwrap_or(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 53))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_first_ipv4_nameserver() {
        let conf = "# comment\nsearch lan\nnameserver fe80::1\nnameserver 127.0.0.53 # resolved\nnameserver 8.8.8.8\n";
        assert_eq!(
            first_nameserver(conf),
            Some(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 53), 53))
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
            Some(SocketAddrV4::new(Ipv4Addr::new(9, 9, 9, 9), 53))
        );
    }
}
