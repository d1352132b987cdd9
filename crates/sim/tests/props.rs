//! Property tests: thousands of seeded simulations of two ustack engines over
//! an impaired in-memory link. Every failing seed is appended to
//! `tests/regressions.txt` and replayed by `regressions_replay` forever.
//!
//! Knobs (environment):
//! - `USTACK_SIM_SEEDS=N`: seeds per family (default: a budget that keeps the
//!   whole file under ~2 minutes with the test profile);
//! - `USTACK_SIM_SEED_BASE=K`: first seed (default 0), to explore new ground;
//! - `USTACK_SIM_REPLAY='family seed'` with `replay`: run one seed, printing
//!   its report; `USTACK_SIM_PCAP=DIR` also writes both hosts' captures.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use ustack_dev::memlink::Impairments;
use ustack_sim::{run, run_with, Family, RunOptions, Scenario};

fn regressions_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/regressions.txt")
}

fn parse_line(line: &str) -> Option<(Family, u64)> {
    let line = line.split('#').next()?.trim();
    let mut it = line.split_whitespace();
    let family = Family::parse(it.next()?)?;
    let seed = it.next()?.parse().ok()?;
    Some((family, seed))
}

fn regressions() -> Vec<(Family, u64)> {
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

fn record_regression(family: Family, seed: u64, what: &str) {
    if regressions().contains(&(family, seed)) {
        return;
    }
    let what: String = what.chars().filter(|c| *c != '\n').take(120).collect();
    if let Ok(mut f) = OpenOptions::new().append(true).open(regressions_path()) {
        let _ = writeln!(f, "{family} {seed}  # {what}");
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Run `default_count` seeds of `family` (or `USTACK_SIM_SEEDS`); fail with
/// the first few failures in full.
fn sweep(family: Family, default_count: u64) {
    let count = env_u64("USTACK_SIM_SEEDS").unwrap_or(default_count);
    let base = env_u64("USTACK_SIM_SEED_BASE").unwrap_or(0);
    let mut failures = Vec::new();
    let mut delivered = 0u64;
    let mut retrans = 0u64;
    for seed in base..base + count {
        match run(&Scenario::generate(family, seed)) {
            Ok(r) => {
                delivered += r.bytes_delivered;
                retrans += r.retrans_segs;
            }
            Err(f) => {
                record_regression(family, seed, &f.what);
                failures.push(f);
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    eprintln!("{family}: {count} seeds from {base}, {delivered} bytes delivered, {retrans} retransmissions");
    if !failures.is_empty() {
        let n = failures.len();
        let text: Vec<String> = failures.iter().map(|f| f.to_string()).collect();
        panic!(
            "{n} failing seed(s) (recorded in tests/regressions.txt):\n\n{}",
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

#[test]
fn regressions_replay() {
    let mut failures = Vec::new();
    for (family, seed) in regressions() {
        if let Err(f) = run(&Scenario::generate(family, seed)) {
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

/// `USTACK_SIM_REPLAY='family seed'` replays one seed with its report (and
/// captures with `USTACK_SIM_PCAP=DIR`); without it, replays `mixed 1`.
#[test]
fn replay() {
    let (family, seed) = std::env::var("USTACK_SIM_REPLAY")
        .ok()
        .map(|v| {
            parse_line(&v).unwrap_or_else(|| panic!("USTACK_SIM_REPLAY={v:?}: want 'family seed'"))
        })
        .unwrap_or((Family::Mixed, 1));
    let opts = RunOptions {
        pcap_dir: std::env::var_os("USTACK_SIM_PCAP").map(PathBuf::from),
    };
    let sc = Scenario::generate(family, seed);
    eprintln!("{sc:#?}");
    match run_with(&sc, &opts) {
        Ok(r) => eprintln!("{r:#?}"),
        Err(f) => panic!("{f}"),
    }
}

#[test]
fn runs_are_deterministic() {
    for seed in 0..5 {
        let sc = Scenario::generate(Family::Mixed, seed);
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
