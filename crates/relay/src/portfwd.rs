//! `-p [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]` port-forward specifications
//! (an IPv6 HOSTIP in brackets: `[::1]:8080:80`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
    /// Where the host listens. `None` (a spec without an address): the
    /// loopback addresses of both families, 127.0.0.1 and ::1 (the latter
    /// where the host has IPv6), and the guest is reached over IPv4 from
    /// either (as before IPv6: a guest listening on 0.0.0.0 only still
    /// works). An explicit IPv6 address reaches the guest over IPv6.
    pub host_ip: Option<IpAddr>,
    pub host_port: u16,
    pub guest_port: u16,
    pub proto: Proto,
}

impl PortForward {
    /// The host addresses to listen on, each with whether connections
    /// through it go to the guest over IPv6.
    pub fn binds(&self) -> Vec<(IpAddr, bool)> {
        match self.host_ip {
            None => vec![
                (IpAddr::V4(Ipv4Addr::LOCALHOST), false),
                (IpAddr::V6(Ipv6Addr::LOCALHOST), false),
            ],
            Some(ip @ IpAddr::V4(_)) => vec![(ip, false)],
            Some(ip @ IpAddr::V6(_)) => vec![(ip, true)],
        }
    }
}

impl fmt::Display for PortForward {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        };
        match self.host_ip {
            None => {}
            Some(IpAddr::V4(a)) => write!(f, "{a}:")?,
            Some(IpAddr::V6(a)) => write!(f, "[{a}]:")?,
        }
        write!(f, "{}:{}/{}", self.host_port, self.guest_port, p)
    }
}

/// Why a port-forward spec was refused. The message is formatted only when
/// shown: a refused spec costs a copy of the offending text, not a quoted,
/// escaped message (which was most of the work of refusing one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpecError {
    /// A `/PROTO` suffix other than tcp or udp.
    Protocol(String),
    /// The whole spec does not have the expected shape.
    Syntax(String),
    /// The host address does not parse.
    HostAddr(String),
    /// A port of 0 (`"host"` or `"guest"`).
    ZeroPort(&'static str),
    /// A port that is not a number below 65536.
    Port(&'static str, String),
}

impl fmt::Display for PortSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpecError::Protocol(p) => write!(f, "unknown protocol {p:?} (tcp or udp)"),
            PortSpecError::Syntax(spec) => write!(
                f,
                "bad port forward {spec:?}: expected [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]"
            ),
            PortSpecError::HostAddr(ip) => write!(f, "bad host address {ip:?}"),
            PortSpecError::ZeroPort(what) => write!(f, "{what} port must not be 0"),
            PortSpecError::Port(what, s) => write!(f, "bad {what} port {s:?}"),
        }
    }
}

impl std::error::Error for PortSpecError {}

impl From<PortSpecError> for String {
    fn from(e: PortSpecError) -> String {
        e.to_string()
    }
}

fn port(s: &str, what: &'static str) -> Result<u16, PortSpecError> {
    match s.parse::<u16>() {
        Ok(0) => Err(PortSpecError::ZeroPort(what)),
        Ok(p) => Ok(p),
        Err(_) => Err(PortSpecError::Port(what, s.to_string())),
    }
}

impl FromStr for PortForward {
    type Err = PortSpecError;

    /// The host address defaults to the loopback (only local peers), as
    /// with `docker -p 127.0.0.1:...`; use `0.0.0.0:` (IPv4) or `[::]:`
    /// (IPv6) to listen on all addresses.
    fn from_str(spec: &str) -> Result<Self, PortSpecError> {
        let (body, proto) = match spec.rsplit_once('/') {
            Some((b, "tcp")) => (b, Proto::Tcp),
            Some((b, "udp")) => (b, Proto::Udp),
            Some((_, other)) => return Err(PortSpecError::Protocol(other.to_string())),
            None => (spec, Proto::Tcp),
        };
        let bad = || PortSpecError::Syntax(spec.to_string());
        let (host_ip, rest) = if let Some(r) = body.strip_prefix('[') {
            let (ip, rest) = r.split_once("]:").ok_or_else(bad)?;
            let ip = ip
                .parse::<Ipv6Addr>()
                .map_err(|_| PortSpecError::HostAddr(ip.to_string()))?;
            (Some(IpAddr::V6(ip)), rest)
        } else {
            match body.matches(':').count() {
                1 => (None, body),
                2 => {
                    let (ip, rest) = body.split_once(':').ok_or_else(bad)?;
                    let ip = ip
                        .parse::<Ipv4Addr>()
                        .map_err(|_| PortSpecError::HostAddr(ip.to_string()))?;
                    (Some(IpAddr::V4(ip)), rest)
                }
                _ => return Err(bad()),
            }
        };
        let (hp, gp) = rest.split_once(':').ok_or_else(bad)?;
        if gp.contains(':') {
            return Err(bad());
        }
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
    fn refusals_say_what_is_wrong() {
        let msg = |s: &str| s.parse::<PortForward>().map_err(|e| e.to_string());
        assert_eq!(
            msg("8080:80/sctp"),
            Err("unknown protocol \"sctp\" (tcp or udp)".to_string())
        );
        assert_eq!(
            msg("80"),
            Err(
                "bad port forward \"80\": expected [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]"
                    .to_string()
            )
        );
        assert_eq!(
            msg("1.2.3:8080:80"),
            Err("bad host address \"1.2.3\"".to_string())
        );
        assert_eq!(
            msg("[::g]:8080:80"),
            Err("bad host address \"::g\"".to_string())
        );
        assert_eq!(msg("0:80"), Err("host port must not be 0".to_string()));
        assert_eq!(msg("8080:x"), Err("bad guest port \"x\"".to_string()));
        // What `ustack ports` hands back to the operator.
        let e: String = "8080:0"
            .parse::<PortForward>()
            .map(|_| ())
            .map_err(String::from)
            .unwrap_err();
        assert_eq!(e, "guest port must not be 0");
    }

    #[test]
    fn parses_all_forms() {
        assert_eq!(
            "8080:80".parse::<PortForward>(),
            Ok(PortForward {
                host_ip: None,
                host_port: 8080,
                guest_port: 80,
                proto: Proto::Tcp
            })
        );
        assert_eq!(
            "0.0.0.0:5353:53/udp".parse::<PortForward>(),
            Ok(PortForward {
                host_ip: Some(Ipv4Addr::UNSPECIFIED.into()),
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
    fn parses_ipv6_host_addresses() {
        let f = "[::1]:8080:80".parse::<PortForward>().unwrap();
        assert_eq!(f.host_ip, Some(Ipv6Addr::LOCALHOST.into()));
        assert_eq!((f.host_port, f.guest_port, f.proto), (8080, 80, Proto::Tcp));
        assert_eq!(f.binds(), vec![(Ipv6Addr::LOCALHOST.into(), true)]);
        let f = "[::]:5353:53/udp".parse::<PortForward>().unwrap();
        assert_eq!(f.host_ip, Some(Ipv6Addr::UNSPECIFIED.into()));
        assert_eq!(f.to_string(), "[::]:5353:53/udp");
        assert_eq!(
            "[fd00::1]:1:2"
                .parse::<PortForward>()
                .map(|p| p.to_string()),
            Ok("[fd00::1]:1:2/tcp".to_string())
        );
        // The plain form listens on both loopbacks, reaching the guest
        // over IPv4 from either.
        let f = "8080:80".parse::<PortForward>().unwrap();
        assert_eq!(
            f.binds(),
            vec![
                (Ipv4Addr::LOCALHOST.into(), false),
                (Ipv6Addr::LOCALHOST.into(), false)
            ]
        );
        assert_eq!(f.to_string(), "8080:80/tcp");
        for bad in [
            "[::1]8080:80",
            "[::1:8080:80",
            "[1.2.3.4]:1:2",
            "::1:8080:80",
            "[::1]:1:2:3",
            "[]:1:2",
        ] {
            assert!(bad.parse::<PortForward>().is_err(), "{bad:?} accepted");
        }
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
