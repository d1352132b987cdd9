//! `-p [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]` port-forward specifications.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Transport of a forwarded port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// One inbound forward: connections to `host_ip:host_port` on the host go to
/// `guest_port` on the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortForward {
    pub host_ip: Ipv4Addr,
    pub host_port: u16,
    pub guest_port: u16,
    pub proto: Proto,
}

impl fmt::Display for PortForward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        };
        write!(
            f,
            "{}:{}:{}/{}",
            self.host_ip, self.host_port, self.guest_port, p
        )
    }
}

fn port(s: &str, what: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(0) => Err(format!("{what} port must not be 0")),
        Ok(p) => Ok(p),
        Err(_) => Err(format!("bad {what} port {s:?}")),
    }
}

impl FromStr for PortForward {
    type Err = String;

    /// The host address defaults to 127.0.0.1 (only local peers), as with
    /// `docker -p 127.0.0.1:...`; use `0.0.0.0:` to listen on all addresses.
    fn from_str(spec: &str) -> Result<Self, String> {
        let (body, proto) = match spec.rsplit_once('/') {
            Some((b, "tcp")) => (b, Proto::Tcp),
            Some((b, "udp")) => (b, Proto::Udp),
            Some((_, other)) => return Err(format!("unknown protocol {other:?} (tcp or udp)")),
            None => (spec, Proto::Tcp),
        };
        let parts: Vec<&str> = body.split(':').collect();
        let (host_ip, hp, gp) = match parts.as_slice() {
            [hp, gp] => (Ipv4Addr::LOCALHOST, *hp, *gp),
            [ip, hp, gp] => (
                ip.parse::<Ipv4Addr>()
                    .map_err(|_| format!("bad host address {ip:?}"))?,
                *hp,
                *gp,
            ),
            _ => {
                return Err(format!(
                    "bad port forward {spec:?}: expected [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]"
                ))
            }
        };
        Ok(PortForward {
            host_ip,
            host_port: port(hp, "host")?,
            guest_port: port(gp, "guest")?,
            proto,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_forms() {
        assert_eq!(
            "8080:80".parse::<PortForward>(),
            Ok(PortForward {
                host_ip: Ipv4Addr::LOCALHOST,
                host_port: 8080,
                guest_port: 80,
                proto: Proto::Tcp
            })
        );
        assert_eq!(
            "0.0.0.0:5353:53/udp".parse::<PortForward>(),
            Ok(PortForward {
                host_ip: Ipv4Addr::UNSPECIFIED,
                host_port: 5353,
                guest_port: 53,
                proto: Proto::Udp
            })
        );
        assert_eq!(
            "10.1.2.3:22:2222/tcp"
                .parse::<PortForward>()
                .map(|p| p.to_string()),
            Ok("10.1.2.3:22:2222/tcp".to_string())
        );
    }

    #[test]
    fn rejects_bad_specs() {
        for bad in [
            "",
            "80",
            "a:80",
            "80:b",
            "0:80",
            "80:0",
            "1:2:3:4",
            "x.y:1:2",
            "80:80/sctp",
            "70000:80",
            "80:80/",
        ] {
            assert!(bad.parse::<PortForward>().is_err(), "{bad:?} accepted");
        }
    }
}
