//! Tunables by their Linux names (`net.ipv4.tcp_wmem`), read from and written
//! to a running stack's configuration. Setting goes through
//! `ustack_socket::sysctl::apply`, the same mapping packetdrill scripts use;
//! reading formats the values as Linux's `/proc/sys` shows them.

use ustack_core::tcp::{EcnMode, MtuProbing, SynCookies};
use ustack_core::CcAlgorithm;
use ustack_socket::sysctl::{apply, SysctlError, Tunables, NAMES};

const PREFIX: &str = "net.ipv4.";

/// The refusal of a `tcp_notsent_lowat` other than "no limit" by stacks
/// whose sockets have no send-queue low-water mark (`serve`'s, `run`'s).
const NOTSENT_LOWAT_UNSUPPORTED: &str = "net.ipv4.tcp_notsent_lowat: this stack's sockets \
    have no send-queue low-water mark; only 4294967295 (no limit, Linux's default) is accepted";

/// Every tunable a stack has, by full name.
pub fn names() -> impl Iterator<Item = String> {
    NAMES.iter().map(|n| format!("{PREFIX}{n}"))
}

/// `net.ipv4.tcp_sack`, `net/ipv4/tcp_sack` or `tcp_sack` → `tcp_sack`.
fn short(name: &str) -> String {
    let n = name.trim().replace('/', ".");
    n.strip_prefix(PREFIX).unwrap_or(&n).to_string()
}

/// `tcp_sack` or `net/ipv4/tcp_sack` → `net.ipv4.tcp_sack`.
pub fn full(name: &str) -> String {
    let s = short(name);
    if s.starts_with("net.") {
        s // another tree (`net.core.*`): named as given
    } else {
        format!("{PREFIX}{s}")
    }
}

/// Whether a stack whose sockets have no send-queue low-water mark (every
/// stack with a control endpoint: `serve`'s, `run`'s, `attach`'s) can put
/// `t` in force: the error names the tunable it would have to ignore (or
/// a TTL of 0, which `set` never makes).
pub fn check_applicable(t: &Tunables) -> Result<(), String> {
    if t.notsent_lowat.is_some() {
        return Err(NOTSENT_LOWAT_UNSUPPORTED.into());
    }
    if t.ip_default_ttl == 0 {
        return Err(format!("bad value \"0\" for {PREFIX}ip_default_ttl"));
    }
    Ok(())
}

/// The value of tunable `name` as `sysctl` prints it; None if unknown.
pub fn get(t: &Tunables, name: &str) -> Option<String> {
    let c = &t.tcp;
    let b = |v: bool| u8::from(v).to_string();
    let secs = |d: ustack_core::time::Duration| (d.as_secs()).to_string();
    Some(match short(name).as_str() {
        "tcp_timestamps" => b(c.timestamps),
        "tcp_sack" => b(c.sack),
        "tcp_window_scaling" => b(c.window_scale),
        "tcp_syn_retries" => c.syn_retries.to_string(),
        "tcp_synack_retries" => c.synack_retries.to_string(),
        "tcp_retries2" => c.max_retries.to_string(),
        // Linux's minimum and default receive buffer; the maximum is ours.
        "tcp_rmem" => format!("4096\t131072\t{}", c.rcv_buf),
        "tcp_wmem" => format!("4096\t{}\t{}", c.snd_buf_initial, c.snd_buf),
        "tcp_congestion_control" => match c.congestion_control {
            CcAlgorithm::Cubic => "cubic".into(),
            CcAlgorithm::NewReno => "reno".into(),
            CcAlgorithm::CubicHyStartPlusPlus => "cubic-hystart++".into(),
        },
        "tcp_syncookies" => match c.syncookies {
            SynCookies::Off => "0".into(),
            SynCookies::WhenNeeded => "1".into(),
            SynCookies::Always => "2".into(),
        },
        "tcp_fin_timeout" => secs(c.fin_wait2_timeout),
        "tcp_keepalive_time" => secs(t.keepalive.idle),
        "tcp_keepalive_intvl" => secs(t.keepalive.interval),
        "tcp_keepalive_probes" => t.keepalive.count.to_string(),
        "tcp_challenge_ack_limit" => c.challenge_ack_limit.to_string(),
        "tcp_rfc1337" => b(c.rfc1337),
        "tcp_mtu_probing" => match c.mtu_probing {
            MtuProbing::Off => "0".into(),
            MtuProbing::OnBlackHole => "1".into(),
            MtuProbing::Always => "2".into(),
        },
        "tcp_base_mss" => c.base_mss.to_string(),
        "tcp_probe_threshold" => c.probe_threshold.to_string(),
        "tcp_probe_interval" => secs(c.probe_interval),
        "tcp_ecn" => match c.ecn {
            EcnMode::Off => "0".into(),
            EcnMode::On => "1".into(),
            EcnMode::Passive => "2".into(),
        },
        "tcp_min_tso_segs" => c.min_tso_segs.to_string(),
        "tcp_slow_start_after_idle" => b(c.slow_start_after_idle),
        // Linux shows "no limit" as 4294967295.
        "tcp_notsent_lowat" => t.notsent_lowat.unwrap_or(u32::MAX).to_string(),
        "ip_default_ttl" => t.ip_default_ttl.to_string(),
        _ => return None,
    })
}

/// The largest number of seconds Linux takes for a tunable it keeps in
/// jiffies as an `int` (`proc_dointvec_jiffies`: `INT_MAX / HZ`), with
/// `HZ` 1000.
const MAX_JIFFIES_SECS: u64 = i32::MAX as u64 / 1000;

/// The range Linux's `/proc/sys` handler takes for each number of a
/// numeric tunable (`net/ipv4/sysctl_net_ipv4.c`): a value outside it is
/// refused with `EINVAL` there, so it is refused here too, rather than
/// clamped or taken whole. None for the tunables that are not numbers or
/// whose own parser already holds Linux's range (`tcp_ecn`, `ip_default_ttl`).
fn linux_range(name: &str) -> Option<(u64, u64)> {
    let int = i32::MAX as u64;
    Some(match name {
        // proc_dou8vec_minmax without bounds.
        "tcp_timestamps"
        | "tcp_sack"
        | "tcp_window_scaling"
        | "tcp_synack_retries"
        | "tcp_retries2"
        | "tcp_keepalive_probes"
        | "tcp_rfc1337"
        | "tcp_slow_start_after_idle" => (0, 255),
        // 1 to MAX_TCP_SYNCNT.
        "tcp_syn_retries" => (1, 127),
        // Each of the three numbers: proc_dointvec_minmax from 1.
        "tcp_rmem" | "tcp_wmem" => (1, int),
        "tcp_fin_timeout" | "tcp_keepalive_time" | "tcp_keepalive_intvl" => (0, MAX_JIFFIES_SECS),
        // proc_douintvec_minmax up to UINT_MAX / HZ.
        "tcp_probe_interval" => (0, u64::from(u32::MAX) / 1000),
        "tcp_challenge_ack_limit" | "tcp_probe_threshold" | "tcp_base_mss" => (0, int),
        _ => return None,
    })
}

/// Refuse a number outside Linux's range for `name` (short form).
fn check_linux_range(t: &Tunables, name: &str, value: &str) -> Result<(), String> {
    let Some((lo, hi)) = linux_range(name) else {
        return Ok(());
    };
    // Unparseable text is left to `apply`, which names it a bad value.
    let out_of_range = value
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok())
        .any(|v| v < lo || v > hi);
    if out_of_range {
        return Err(format!(
            "bad value {value:?} for {PREFIX}{name}: Linux takes {lo} to {hi}{} (now {:?})",
            if matches!(name, "tcp_rmem" | "tcp_wmem") {
                " for each of min, default and max"
            } else {
                ""
            },
            get(t, name).unwrap_or_default()
        ));
    }
    Ok(())
}

/// Apply every assignment to a copy of `t`: the new tunables, or the first
/// refusal (then nothing changes). A number outside the range Linux takes
/// for the tunable is refused, as Linux refuses it.
pub fn set(t: &Tunables, assignments: &[(String, String)]) -> Result<Tunables, String> {
    let mut n = t.clone();
    for (name, value) in assignments {
        let s = short(name);
        if get(t, &s).is_none() {
            return Err(format!("unknown tunable {PREFIX}{s}"));
        }
        check_linux_range(t, &s, value)?;
        apply(&mut n, &s, value).map_err(|e| match e {
            SysctlError::BadValue { name, value } => {
                format!(
                    "bad value {value:?} for {PREFIX}{name}{} (now {:?})",
                    match name.as_str() {
                        "tcp_congestion_control" =>
                            ": this stack has cubic, cubic-hystart++ and reno",
                        "tcp_rmem" | "tcp_wmem" => ": give min, default and max",
                        _ => "",
                    },
                    get(t, &name).unwrap_or_default()
                )
            }
            other => other.to_string(),
        })?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_and_writes_back_its_own_value() {
        let t = Tunables::default();
        for n in names() {
            let v = get(&t, &n).unwrap_or_else(|| panic!("{n} unreadable"));
            let t2 = set(&t, &[(n.clone(), v.clone())]).unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_eq!(get(&t2, &n), Some(v), "{n}");
        }
    }

    #[test]
    fn what_a_stack_cannot_apply_is_named() {
        let t = Tunables::default();
        assert_eq!(check_applicable(&t), Ok(()));
        let lowat = set(&t, &[("tcp_notsent_lowat".into(), "16384".into())]).expect("parses");
        let e = check_applicable(&lowat).expect_err("no low-water mark");
        assert!(e.contains("net.ipv4.tcp_notsent_lowat"), "{e}");
        // "No limit" is what the stacks do: accepted.
        let none = set(&t, &[("tcp_notsent_lowat".into(), "4294967295".into())]).expect("parses");
        assert_eq!(check_applicable(&none), Ok(()));
        let ttl = set(&t, &[("net.ipv4.ip_default_ttl".into(), "33".into())]).expect("1..=255");
        assert_eq!(get(&ttl, "ip_default_ttl").as_deref(), Some("33"));
        assert!(set(&t, &[("ip_default_ttl".into(), "0".into())]).is_err());
    }

    #[test]
    fn values_linux_refuses_are_refused_not_clamped() {
        let t = Tunables::default();
        for (name, value) in [
            // Linux: 1 to 127 (MAX_TCP_SYNCNT); was clamped to 1 and 127.
            ("tcp_syn_retries", "0"),
            ("tcp_syn_retries", "128"),
            // u8 tunables; were clamped to 255 or taken whole.
            ("tcp_synack_retries", "256"),
            ("tcp_retries2", "1000"),
            ("tcp_keepalive_probes", "256"),
            ("tcp_sack", "256"),
            // Each of the three at least 1 and an int; was taken and
            // clamped to 2048 (tcp_rmem's maximum) or kept at 100 GB.
            ("tcp_rmem", "0 0 0"),
            ("tcp_rmem", "4096 131072 99999999999"),
            ("tcp_wmem", "4096 0 4194304"),
            // Seconds Linux keeps in jiffies as an int (HZ 1000).
            ("tcp_fin_timeout", "99999999999"),
            ("tcp_keepalive_time", "2147484"),
            ("tcp_keepalive_intvl", "2147484"),
            ("tcp_probe_interval", "4294968"),
            ("tcp_challenge_ack_limit", "2147483648"),
        ] {
            let e = set(&t, &[(name.into(), value.into())])
                .expect_err(&format!("{name}={value} must be refused"));
            assert!(
                e.contains(&format!("net.ipv4.{name}")) && e.contains("Linux takes"),
                "{name}={value}: {e}"
            );
        }
        // The bounds themselves are taken, as Linux takes them.
        for (name, value) in [
            ("tcp_syn_retries", "1"),
            ("tcp_syn_retries", "127"),
            ("tcp_synack_retries", "255"),
            ("tcp_rmem", "1 1 2147483647"),
            ("tcp_fin_timeout", "2147483"),
            ("tcp_keepalive_intvl", "1"),
            ("tcp_probe_interval", "4294967"),
            ("tcp_challenge_ack_limit", "2147483647"),
        ] {
            set(&t, &[(name.into(), value.into())])
                .unwrap_or_else(|e| panic!("{name}={value}: {e}"));
        }
        let t2 = set(&t, &[("tcp_syn_retries".into(), "127".into())]).expect("in range");
        assert_eq!(get(&t2, "tcp_syn_retries").as_deref(), Some("127"));
    }

    #[test]
    fn a_bad_assignment_changes_nothing() {
        let t = Tunables::default();
        let r = set(
            &t,
            &[
                ("net.ipv4.tcp_sack".into(), "0".into()),
                ("net.ipv4.tcp_wmem".into(), "lots".into()),
            ],
        );
        let e = r.expect_err("a bad tcp_wmem must be refused");
        assert!(e.contains("tcp_wmem"), "{e}");
        assert!(set(&t, &[("net.ipv4.tcp_nonsense".into(), "1".into())])
            .expect_err("unknown")
            .contains("unknown tunable net.ipv4.tcp_nonsense"));
        let t2 = set(
            &t,
            &[("net/ipv4/tcp_wmem".into(), "4096 65536 1048576".into())],
        )
        .expect("valid");
        assert_eq!(
            get(&t2, "tcp_wmem").as_deref(),
            Some("4096\t65536\t1048576")
        );
        assert_eq!(get(&t2, "net.ipv4.tcp_sack").as_deref(), Some("1"));
    }
}
