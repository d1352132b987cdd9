//! Property tests: thousands of seeded simulations of two ustack engines over
//! an impaired in-memory link. A failing seed's line for `tests/regressions.txt`
//! (replayed by `regressions_replay` forever) is printed with the failure;
//! the test appends it to that file itself only when asked to
//! (`USTACK_SIM_RECORD=1`), since tests do not write into the tree.
//!
//! Knobs (environment):
//! - `USTACK_SIM_RECORD=1`: append failing seeds to `tests/regressions.txt`
//!   (for a soak run by hand);
//! - `USTACK_SIM_SEEDS=N`: seeds per family (default: a budget that keeps the
//!   whole file under ~2 minutes with the test profile);
//! - `USTACK_SIM_SEED_BASE=K`: first seed (default 0), to explore new ground;
//! - `USTACK_SIM_REPLAY='family seed [v6|dual]'` with `replay`: run one
//!   seed (IPv4 unless `v6` or `dual` follows), printing its report;
//!   `USTACK_SIM_PCAP=DIR` also writes both hosts' captures.
//!
//! IPv4 runs the most seeds; IPv6 (`ipv6_*`) and dual stack (`dual_stack_*`,
//! IPv4 and IPv6 connections side by side) run fewer of their own (their
//! draws differ from IPv4's for the same seed number) to keep the time.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use ustack_dev::memlink::Impairments;
use ustack_sim::{run, run_with, Family, IpMode, RunOptions, Scenario};

fn regressions_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/regressions.txt")
}

/// `family seed [v4|v6|dual]`.
fn parse_line(line: &str) -> Option<(Family, u64, IpMode)> {
    let line = line.split('#').next()?.trim();
    let mut it = line.split_whitespace();
    let family = Family::parse(it.next()?)?;
    let seed = it.next()?.parse().ok()?;
    let ip = match it.next() {
        Some(m) => IpMode::parse(m)?,
        None => IpMode::V4,
    };
    if it.next().is_some() {
        return None;
    }
    Some((family, seed, ip))
}

fn regressions() -> Vec<(Family, u64, IpMode)> {
    let text =
        std::fs::read_to_string(regressions_path()).expect("tests/regressions.txt must exist");
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let entry = parse_line(t)
            .unwrap_or_else(|| panic!("regressions.txt line {}: cannot parse {t:?}", i + 1));
        out.push(entry);
    }
    out
}

/// The `tests/regressions.txt` line for a failing seed.
fn regression_line(family: Family, seed: u64, ip: IpMode, what: &str) -> String {
    let what: String = what.chars().filter(|c| *c != '\n').take(120).collect();
    let ip = match ip {
        IpMode::V4 => String::new(),
        m => format!(" {m}"),
    };
    format!("{family} {seed}{ip}  # {what}")
}

/// Append a failing seed's line to `tests/regressions.txt` when
/// `USTACK_SIM_RECORD=1` (a soak by hand); the failure message prints the
/// line either way.
fn record_regression(family: Family, seed: u64, ip: IpMode, line: &str) {
    if env_u64("USTACK_SIM_RECORD") != Some(1) || regressions().contains(&(family, seed, ip)) {
        return;
    }
    if let Ok(mut f) = OpenOptions::new().append(true).open(regressions_path()) {
        let _ = writeln!(f, "{line}");
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Run `default_count` IPv4 seeds of `family` (or `USTACK_SIM_SEEDS`); fail
/// with the first few failures in full.
fn sweep(family: Family, default_count: u64) {
    sweep_ip(family, IpMode::V4, default_count);
}

/// [`sweep`] over the address families `ip`.
fn sweep_ip(family: Family, ip: IpMode, default_count: u64) {
    let count = env_u64("USTACK_SIM_SEEDS").unwrap_or(default_count);
    let base = env_u64("USTACK_SIM_SEED_BASE").unwrap_or(0);
    let mut failures = Vec::new();
    let mut lines = Vec::new();
    let mut delivered = 0u64;
    let mut retrans = 0u64;
    for seed in base..base + count {
        let sc = Scenario::generate_ip(family, ip, seed);
        match run(&sc).and_then(|r| families_used(&sc, &r).map(|()| r)) {
            Ok(r) => {
                delivered += r.bytes_delivered;
                retrans += r.retrans_segs;
            }
            Err(f) => {
                let line = regression_line(family, seed, ip, &f.what);
                record_regression(family, seed, ip, &line);
                lines.push(line);
                failures.push(f);
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    eprintln!("{family} {ip}: {count} seeds from {base}, {delivered} bytes delivered, {retrans} retransmissions");
    if !failures.is_empty() {
        let n = failures.len();
        let text: Vec<String> = failures.iter().map(|f| f.to_string()).collect();
        panic!(
            "{n} failing seed(s); their lines for tests/regressions.txt \
             (appended there with USTACK_SIM_RECORD=1):\n{}\n\n{}",
            lines.join("\n"),
            text.join("\n\n")
        );
    }
}

#[test]
fn clean_links() {
    sweep(Family::Clean, 500);
}

#[test]
fn lossy_links() {
    sweep(Family::Lossy, 1000);
}

#[test]
fn reordering_and_duplicating_links() {
    sweep(Family::Reorder, 1000);
}

#[test]
fn corrupting_links() {
    sweep(Family::Corrupt, 1000);
}

#[test]
fn mixed_impairments() {
    sweep(Family::Mixed, 1500);
}

/// A run whose connections carried data went over the families its plan
/// names: IPv6 packets only when a connection is IPv6, IPv4 ones only when
/// one is IPv4 (ARP and Neighbour Discovery aside).
fn families_used(sc: &Scenario, r: &ustack_sim::Report) -> Result<(), ustack_sim::Failure> {
    let v4 = sc.conns.iter().any(|c| !c.ipv6);
    let v6 = sc.conns.iter().any(|c| c.ipv6);
    let tcp6 = r.counters.iter().map(|c| c.ip6.InDelivers).sum::<u64>()
        > r.counters.iter().map(|c| c.icmp6.InMsgs).sum::<u64>();
    let ip4 = r.counters.iter().map(|c| c.ip.InReceives).sum::<u64>() > 0;
    if ip4 == v4 && tcp6 == v6 {
        return Ok(());
    }
    Err(ustack_sim::Failure {
        family: sc.family,
        ip: sc.ip,
        seed: sc.seed,
        at: r.virtual_time,
        what: format!(
            "connections over IPv4 {v4} and IPv6 {v6}, but IPv4 packets received {ip4} and TCP over IPv6 {tcp6}"
        ),
        endpoints: Vec::new(),
        trace: Vec::new(),
    })
}

#[test]
fn ipv6_clean_links() {
    sweep_ip(Family::Clean, IpMode::V6, 100);
}

#[test]
fn ipv6_lossy_links() {
    sweep_ip(Family::Lossy, IpMode::V6, 200);
}

#[test]
fn ipv6_reordering_and_duplicating_links() {
    sweep_ip(Family::Reorder, IpMode::V6, 200);
}

#[test]
fn ipv6_corrupting_links() {
    sweep_ip(Family::Corrupt, IpMode::V6, 200);
}

#[test]
fn ipv6_mixed_impairments() {
    sweep_ip(Family::Mixed, IpMode::V6, 300);
}

#[test]
fn dual_stack_lossy_and_corrupting_links() {
    sweep_ip(Family::Lossy, IpMode::Dual, 100);
    sweep_ip(Family::Corrupt, IpMode::Dual, 100);
}

#[test]
fn dual_stack_mixed_impairments() {
    sweep_ip(Family::Reorder, IpMode::Dual, 100);
    sweep_ip(Family::Mixed, IpMode::Dual, 200);
}

#[test]
fn regressions_replay() {
    let mut failures = Vec::new();
    for (family, seed, ip) in regressions() {
        if let Err(f) = run(&Scenario::generate_ip(family, ip, seed)) {
            failures.push(f.to_string());
        }
    }
    assert!(
        failures.is_empty(),
        "{} regression seed(s) fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// `USTACK_SIM_REPLAY='family seed [v6|dual]'` replays one seed with its
/// report (and captures with `USTACK_SIM_PCAP=DIR`); without it, replays
/// `mixed 1`.
#[test]
fn replay() {
    let (family, seed, ip) = std::env::var("USTACK_SIM_REPLAY")
        .ok()
        .map(|v| {
            parse_line(&v)
                .unwrap_or_else(|| panic!("USTACK_SIM_REPLAY={v:?}: want 'family seed [v6|dual]'"))
        })
        .unwrap_or((Family::Mixed, 1, IpMode::V4));
    let opts = RunOptions {
        pcap_dir: std::env::var_os("USTACK_SIM_PCAP").map(PathBuf::from),
    };
    let sc = Scenario::generate_ip(family, ip, seed);
    eprintln!("{sc:#?}");
    match run_with(&sc, &opts) {
        Ok(r) => eprintln!("{r:#?}"),
        Err(f) => panic!("{f}"),
    }
}

#[test]
fn runs_are_deterministic() {
    for seed in 0..5 {
        check_deterministic(Scenario::generate(Family::Mixed, seed));
    }
}

#[test]
fn ipv6_and_dual_stack_runs_are_deterministic() {
    for seed in 0..3 {
        check_deterministic(Scenario::generate_ip(Family::Mixed, IpMode::V6, seed));
        check_deterministic(Scenario::generate_ip(Family::Mixed, IpMode::Dual, seed));
    }
}

/// A regressions.txt line names the scenario it was written for.
#[test]
fn regression_lines_parse_with_and_without_a_family() {
    assert_eq!(
        parse_line("mixed 21  # x"),
        Some((Family::Mixed, 21, IpMode::V4))
    );
    assert_eq!(
        parse_line("lossy 7 v6"),
        Some((Family::Lossy, 7, IpMode::V6))
    );
    assert_eq!(
        parse_line("corrupt 3 dual # y"),
        Some((Family::Corrupt, 3, IpMode::Dual))
    );
    assert_eq!(parse_line("corrupt 3 v5"), None);
    assert_eq!(parse_line("corrupt 3 v6 v6"), None);
    // The line a failure prints reads back as its seed, whatever the text.
    for (family, seed, ip) in [
        (Family::Mixed, 21, IpMode::V4),
        (Family::Lossy, 7, IpMode::V6),
        (Family::Reorder, 9, IpMode::Dual),
    ] {
        let line = regression_line(family, seed, ip, "stalled\nat 3 s # twice");
        assert_eq!(parse_line(&line), Some((family, seed, ip)), "{line}");
    }
    // The IPv4 scenario of a seed is the one it always was; the others
    // are their own.
    let v4 = Scenario::generate(Family::Mixed, 5);
    let again = Scenario::generate_ip(Family::Mixed, IpMode::V4, 5);
    assert_eq!(format!("{v4:?}"), format!("{again:?}"));
    assert!(v4.conns.iter().all(|c| !c.ipv6));
    let v6 = Scenario::generate_ip(Family::Mixed, IpMode::V6, 5);
    assert!(v6.conns.iter().all(|c| c.ipv6) && v6.mtu >= 1280);
    for seed in 0..20 {
        let d = Scenario::generate_ip(Family::Mixed, IpMode::Dual, seed);
        if d.conns.len() >= 2 {
            assert!(d.conns.iter().any(|c| c.ipv6) && d.conns.iter().any(|c| !c.ipv6));
        }
    }
}

fn check_deterministic(sc: Scenario) {
    let a = run(&sc).map_err(|f| f.to_string());
    let b = run(&sc).map_err(|f| f.to_string());
    match (a, b) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.virtual_time, b.virtual_time);
            assert_eq!(a.iterations, b.iterations);
            assert_eq!(a.ab, b.ab);
            assert_eq!(a.ba, b.ba);
            assert_eq!(a.retrans_segs, b.retrans_segs);
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("same seed, different outcomes: {a:?} vs {b:?}"),
    }
}

/// The checker itself must be able to fail: a link that loses everything
/// from B to A cannot complete, and the run must say so within its bounds.
#[test]
fn harness_detects_a_dead_link() {
    let mut sc = Scenario::generate(Family::Clean, 3);
    sc.ba = Impairments {
        loss: 1.0,
        ..Impairments::none()
    };
    sc.max_time = Duration::from_secs(600);
    for c in &mut sc.conns {
        c.client.bytes = c.client.bytes.max(1);
    }
    let f = run(&sc).expect_err("a dead link cannot deliver");
    assert!(!f.what.is_empty());
    assert!(!f.endpoints.is_empty());
}

/// The same over IPv6 and dual stack: Neighbour Discovery or the SYNs
/// never get an answer, and the run says so.
#[test]
fn harness_detects_a_dead_ipv6_link() {
    for ip in [IpMode::V6, IpMode::Dual] {
        let mut sc = Scenario::generate_ip(Family::Clean, ip, 3);
        sc.ba = Impairments {
            loss: 1.0,
            ..Impairments::none()
        };
        sc.max_time = Duration::from_secs(600);
        for c in &mut sc.conns {
            c.client.bytes = c.client.bytes.max(1);
        }
        let f = run(&sc).expect_err("a dead link cannot deliver");
        assert_eq!(f.ip, ip);
        assert!(!f.what.is_empty());
        assert!(!f.endpoints.is_empty());
        assert!(f.to_string().contains(&format!("seed 3 {ip}")), "{f}");
    }
}

/// A big transfer on a clean fast link, with many concurrent connections.
#[test]
fn many_concurrent_connections() {
    let mut sc = Scenario::generate(Family::Clean, 11);
    let template = sc.conns[0].clone();
    sc.conns = (0..16)
        .map(|i| {
            let mut c = template.clone();
            c.client_on_a = i % 3 != 0;
            c.start = Duration::from_millis(i);
            c.client.bytes = 50_000 + i * 1000;
            c.server.bytes = 20_000 + i * 777;
            c
        })
        .collect();
    let r = run(&sc).unwrap_or_else(|f| panic!("{f}"));
    let expected: u64 = sc
        .conns
        .iter()
        .map(|c| c.client.bytes + c.server.bytes)
        .sum();
    assert_eq!(r.bytes_delivered, expected);
}
