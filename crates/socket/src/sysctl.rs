//! Linux's `net.ipv4.tcp_*` tunables mapped onto the engine's
//! [`TcpConfig`]: a program (or a packetdrill script's `sysctl -q ...`
//! line) that tunes the kernel tunes ustack the same way.

use std::path::Path;

use ustack_core::tcp::{EcnMode, KeepAlive, MtuProbing, SynCookies, TcpConfig};
use ustack_core::time::Duration;
use ustack_core::CcAlgorithm;

/// The tunables this module understands, by their name under
/// `net.ipv4.` (for listings and errors).
pub const NAMES: &[&str] = &[
    "tcp_timestamps",
    "tcp_sack",
    "tcp_window_scaling",
    "tcp_syn_retries",
    "tcp_synack_retries",
    "tcp_retries2",
    "tcp_rmem",
    "tcp_wmem",
    "tcp_congestion_control",
    "tcp_syncookies",
    "tcp_fin_timeout",
    "tcp_keepalive_time",
    "tcp_keepalive_intvl",
    "tcp_keepalive_probes",
    "tcp_challenge_ack_limit",
    "tcp_rfc1337",
    "tcp_mtu_probing",
    "tcp_base_mss",
    "tcp_probe_threshold",
    "tcp_probe_interval",
    "tcp_notsent_lowat",
    "tcp_min_tso_segs",
    "tcp_ecn",
    "tcp_slow_start_after_idle",
    "ip_default_ttl",
];

/// Why a value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SysctlError {
    UnknownName(String),
    BadValue { name: String, value: String },
}

impl std::fmt::Display for SysctlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SysctlError::UnknownName(n) => write!(f, "unknown tunable net.ipv4.{n}"),
            SysctlError::BadValue { name, value } => {
                write!(f, "bad value {value:?} for net.ipv4.{name}")
            }
        }
    }
}

impl std::error::Error for SysctlError {}

fn nums(v: &str) -> Option<Vec<u64>> {
    v.split_whitespace().map(|w| w.parse().ok()).collect()
}

/// What the tunables set: the engine's TCP configuration, the keep-alive
/// parameters a socket uses once it turns `SO_KEEPALIVE` on, and the TTL
/// of the IPv4 packets the stack originates.
#[derive(Debug, Clone)]
pub struct Tunables {
    pub tcp: TcpConfig,
    pub keepalive: KeepAlive,
    /// `tcp_notsent_lowat`: the unsent bytes above which a socket without
    /// `TCP_NOTSENT_LOWAT` is not writable (None: Linux's default,
    /// `UINT_MAX`, no limit).
    pub notsent_lowat: Option<u32>,
    /// `ip_default_ttl` (1..=255; Linux's default 64):
    /// [`Stack::set_ip_default_ttl`](ustack_core::Stack::set_ip_default_ttl).
    pub ip_default_ttl: u8,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            tcp: TcpConfig::default(),
            keepalive: KeepAlive::default(),
            notsent_lowat: None,
            ip_default_ttl: 64,
        }
    }
}

/// Set one tunable (`name` without the `net.ipv4.` prefix).
/// Nothing changes on an error.
pub fn apply(t: &mut Tunables, name: &str, value: &str) -> Result<(), SysctlError> {
    let cfg = &mut t.tcp;
    let bad = || SysctlError::BadValue {
        name: name.to_string(),
        value: value.to_string(),
    };
    let n = nums(value).unwrap_or_default();
    let one = || -> Result<u64, SysctlError> {
        match n.as_slice() {
            [x] => Ok(*x),
            _ => Err(bad()),
        }
    };
    let secs = |x: u64| Duration::from_secs(x);
    match name {
        "tcp_timestamps" => cfg.timestamps = one()? != 0,
        "tcp_sack" => cfg.sack = one()? != 0,
        "tcp_window_scaling" => cfg.window_scale = one()? != 0,
        "tcp_syn_retries" => {
            cfg.syn_retries = u32::try_from(one()?.clamp(1, 127)).map_err(|_| bad())?
        }
        "tcp_synack_retries" => {
            cfg.synack_retries = u32::try_from(one()?.min(255)).map_err(|_| bad())?
        }
        "tcp_retries2" => cfg.max_retries = u32::try_from(one()?.min(255)).map_err(|_| bad())?,
        "tcp_rmem" => match n.as_slice() {
            // The window scale follows the largest buffer the socket may
            // grow to, as Linux's does.
            [_, _, max] => cfg.rcv_buf = usize::try_from(*max).map_err(|_| bad())?.max(2048),
            _ => return Err(bad()),
        },
        "tcp_wmem" => match n.as_slice() {
            [_, def, max] => {
                cfg.snd_buf = usize::try_from(*max).map_err(|_| bad())?.max(4096);
                cfg.snd_buf_initial = usize::try_from(*def)
                    .map_err(|_| bad())?
                    .clamp(4096, cfg.snd_buf);
            }
            _ => return Err(bad()),
        },
        "tcp_congestion_control" => {
            cfg.congestion_control = match value.trim() {
                "cubic" => CcAlgorithm::Cubic,
                "cubic-hystart++" => CcAlgorithm::CubicHyStartPlusPlus,
                "reno" => CcAlgorithm::NewReno,
                _ => return Err(bad()),
            }
        }
        "tcp_syncookies" => {
            cfg.syncookies = match one()? {
                0 => SynCookies::Off,
                1 => SynCookies::WhenNeeded,
                2 => SynCookies::Always,
                _ => return Err(bad()),
            }
        }
        "tcp_fin_timeout" => cfg.fin_wait2_timeout = secs(one()?),
        "tcp_keepalive_time" | "tcp_keepalive_intvl" | "tcp_keepalive_probes" => {
            let ka = &mut t.keepalive;
            let v = one()?;
            match name {
                "tcp_keepalive_time" => ka.idle = secs(v),
                "tcp_keepalive_intvl" => ka.interval = secs(v),
                _ => ka.count = u32::try_from(v).map_err(|_| bad())?,
            }
        }
        "tcp_rfc1337" => cfg.rfc1337 = one()? != 0,
        "tcp_challenge_ack_limit" => {
            cfg.challenge_ack_limit = u32::try_from(one()?).map_err(|_| bad())?
        }
        "tcp_mtu_probing" => {
            cfg.mtu_probing = match one()? {
                0 => MtuProbing::Off,
                1 => MtuProbing::OnBlackHole,
                2 => MtuProbing::Always,
                _ => return Err(bad()),
            }
        }
        "tcp_base_mss" => cfg.base_mss = u16::try_from(one()?).map_err(|_| bad())?,
        "tcp_probe_threshold" => cfg.probe_threshold = u16::try_from(one()?).map_err(|_| bad())?,
        "tcp_probe_interval" => cfg.probe_interval = secs(one()?),
        "tcp_notsent_lowat" => {
            t.notsent_lowat = u32::try_from(one()?)
                .map_err(|_| bad())
                .map(|v| (v != u32::MAX).then_some(v))?
        }
        "tcp_ecn" => {
            cfg.ecn = match one()? {
                0 => EcnMode::Off,
                1 => EcnMode::On,
                2 => EcnMode::Passive,
                // 3..5 are Accurate ECN's (Linux 6.18), which we lack.
                _ => return Err(bad()),
            }
        }
        // Linux: 1..=255.
        "ip_default_ttl" => {
            t.ip_default_ttl = match one()? {
                v @ 1..=255 => u8::try_from(v).map_err(|_| bad())?,
                _ => return Err(bad()),
            }
        }
        "tcp_slow_start_after_idle" => cfg.slow_start_after_idle = one()? != 0,
        "tcp_min_tso_segs" => {
            cfg.min_tso_segs = match one()? {
                v @ 1..=255 => u8::try_from(v).map_err(|_| bad())?,
                _ => return Err(bad()),
            }
        }
        _ => return Err(SysctlError::UnknownName(name.to_string())),
    }
    Ok(())
}

/// `t` with every tunable in [`NAMES`] found under `dir` (a
/// `/proc/sys/net/ipv4` directory) applied; unreadable or refused values
/// are left as they were.
pub fn read_dir(dir: &Path, mut t: Tunables) -> Tunables {
    for name in NAMES {
        if let Ok(v) = std::fs::read_to_string(dir.join(name)) {
            let _ = apply(&mut t, name, v.trim());
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_ecn_and_min_tso_segs() {
        let mut t = Tunables::default();
        assert_eq!(t.tcp.ecn, EcnMode::Passive, "Linux's default, 2");
        for (v, want) in [
            ("0", EcnMode::Off),
            ("1", EcnMode::On),
            ("2", EcnMode::Passive),
        ] {
            apply(&mut t, "tcp_ecn", v).unwrap();
            assert_eq!(t.tcp.ecn, want);
        }
        assert!(apply(&mut t, "tcp_ecn", "3").is_err(), "Accurate ECN");
        assert_eq!(t.tcp.ecn, EcnMode::Passive, "unchanged on an error");
        apply(&mut t, "tcp_min_tso_segs", "10").unwrap();
        assert_eq!(t.tcp.min_tso_segs, 10);
        assert!(apply(&mut t, "tcp_min_tso_segs", "0").is_err());
        assert!(NAMES.contains(&"tcp_ecn") && NAMES.contains(&"tcp_min_tso_segs"));
    }

    #[test]
    fn tcp_slow_start_after_idle() {
        let mut t = Tunables::default();
        assert!(t.tcp.slow_start_after_idle, "Linux's default, 1");
        apply(&mut t, "tcp_slow_start_after_idle", "0").unwrap();
        assert!(!t.tcp.slow_start_after_idle);
        apply(&mut t, "tcp_slow_start_after_idle", "1").unwrap();
        assert!(t.tcp.slow_start_after_idle);
        assert!(apply(&mut t, "tcp_slow_start_after_idle", "x").is_err());
        assert!(NAMES.contains(&"tcp_slow_start_after_idle"));
    }

    #[test]
    fn ip_default_ttl_takes_1_to_255() {
        let mut t = Tunables::default();
        assert_eq!(t.ip_default_ttl, 64, "Linux's default");
        apply(&mut t, "ip_default_ttl", "1").unwrap();
        apply(&mut t, "ip_default_ttl", "255").unwrap();
        assert_eq!(t.ip_default_ttl, 255);
        for bad in ["0", "256", "-1", "ttl", "64 64", ""] {
            assert!(apply(&mut t, "ip_default_ttl", bad).is_err(), "{bad:?}");
        }
        assert_eq!(t.ip_default_ttl, 255, "unchanged on an error");
        assert!(NAMES.contains(&"ip_default_ttl"));
    }
}
