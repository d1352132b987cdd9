//! `ustack bench --runs N` at tiny sizes: every row carries each run's
//! ratio and the median of them, and no namespace of any run is left
//! behind. Not a performance test. Needs root (fails without).

mod common;

use std::process::Command;

use common::{namespaces_matching, BIN};

fn leftovers(pid: u32) -> Vec<String> {
    let tag = format!("{}r", pid % 100_000);
    namespaces_matching(|n| n.starts_with("ub") && n.contains(&tag))
}

#[test]
fn repeated_bench_reports_medians_and_every_runs_ratio() {
    let child = Command::new(BIN)
        .args([
            "bench",
            "--runs",
            "3",
            "--json",
            "--seconds",
            "0.2",
            "--round-trips",
            "20",
            "--pings",
            "3",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start ustack bench --runs");
    let pid = child.id();
    let out = child.wait_with_output().expect("ustack bench --runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    assert_eq!(stderr.matches("== run ").count(), 3, "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    for test in [
        "icmp_echo_rtt",
        "tcp_rr_1byte",
        "tcp_bulk_to_stack",
        "tcp_bulk_from_stack",
        "tcp_bulk_to_stack_no_offload",
        "cpu_per_gb_from_stack",
        "tcp6_bulk_to_stack",
        "tcp6_bulk_from_stack",
    ] {
        let row = rows
            .iter()
            .find(|r| r["test"] == test)
            .unwrap_or_else(|| panic!("no row {test} in {rows:?}"));
        let mut ratios: Vec<f64> = row["ratios"]
            .as_array()
            .unwrap_or_else(|| panic!("no ratios in {row}"))
            .iter()
            .map(|v| v.as_f64().unwrap_or(f64::NAN))
            .collect();
        assert_eq!(ratios.len(), 3, "{row}");
        assert!(ratios.iter().all(|r| *r > 0.0), "{row}");
        ratios.sort_by(f64::total_cmp);
        assert_eq!(row["ratio"].as_f64(), Some(ratios[1]), "median: {row}");
        assert!(row["ustack"].as_f64() > Some(0.0), "{row}");
        assert!(row["kernel"].as_f64() > Some(0.0), "{row}");
    }
    assert_eq!(
        leftovers(pid),
        Vec::<String>::new(),
        "namespaces left behind"
    );

    let out = Command::new(BIN)
        .args(["bench", "--runs", "0"])
        .output()
        .expect("ustack bench");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--runs must be between 1 and 50"), "{err}");
}

#[test]
fn the_bench_serves_a_control_endpoint_while_it_measures() {
    let name = format!("bench-ctl-{}", common::unique());
    // (Stopped with SIGTERM if the test fails: the bench then removes its
    // namespaces, which a SIGKILL would leave behind.)
    let mut bench = TermGuard(common::ChildGuard {
        child: Command::new(BIN)
            .args([
                "bench",
                "--name",
                &name,
                "--json",
                "--seconds",
                "0.5",
                "--round-trips",
                "200",
                "--pings",
                "3",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cannot start ustack bench"),
    });
    // Poll until a stack of the bench answers under its name, as a bench
    // stack, with counters that show it received IP traffic (the bench must
    // not end first; its first answer may come before the first packet:
    // once it held only the ARP request it had sent).
    let t0 = std::time::Instant::now();
    let counters = loop {
        if let Ok(Some(st)) = bench.0.child.try_wait() {
            panic!("the bench ended ({st}) before its control endpoint answered");
        }
        let ps = Command::new(BIN)
            .args(["ps", "--json"])
            .output()
            .expect("ps");
        let listed = serde_json::from_slice::<serde_json::Value>(&ps.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .any(|s| s["name"] == name.as_str() && s["mode"] == "bench");
        if listed {
            let n = Command::new(BIN)
                .args(["nstat", "-a", "--json", "--stack", &name])
                .output()
                .expect("nstat");
            if n.status.success() {
                let v = serde_json::from_slice::<serde_json::Value>(&n.stdout).expect("JSON");
                if v["IpInReceives"].as_u64().is_some_and(|v| v > 0) {
                    break v;
                }
            }
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(120),
            "no control endpoint named {name}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        counters["IpInReceives"].as_u64().is_some_and(|v| v > 0),
        "{counters}"
    );
    let mut err = String::new();
    if let Some(mut e) = bench.0.child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    let st = bench.0.child.wait().expect("wait");
    assert!(st.success(), "{err}");
    // Gone once the bench ended.
    let ps = Command::new(BIN).args(["ps"]).output().expect("ps");
    assert!(
        !String::from_utf8_lossy(&ps.stdout).contains(&name),
        "{name} still listed"
    );
}

/// A child stopped with SIGTERM (then SIGKILL after 10 s) when dropped.
struct TermGuard(common::ChildGuard);

impl Drop for TermGuard {
    fn drop(&mut self) {
        let _ = self.0.stop();
    }
}

#[test]
fn a_bench_told_to_stop_removes_its_namespaces_and_exits_143() {
    // SIGTERM (or a terminal's Ctrl-C) in the middle of a measurement: no
    // destructor runs then, so the bench's clean-up thread kills its
    // helpers and deletes the namespaces it made.
    let child = Command::new(BIN)
        .args([
            "bench",
            "--seconds",
            "30",
            "--round-trips",
            "20",
            "--pings",
            "3",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start ustack bench");
    let mut bench = TermGuard(common::ChildGuard { child });
    let pid = bench.0.child.id();
    let mine = |n: &str| n.starts_with("ub") && n.ends_with(&pid.to_string());
    let t0 = std::time::Instant::now();
    // Until the bench's first namespace exists and it measures in it.
    while common::namespaces_matching(mine).is_empty() {
        if let Ok(Some(st)) = bench.0.child.try_wait() {
            panic!("the bench ended ({st}) before it made a namespace");
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no namespace of the bench after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let st = bench.0.stop().expect("the bench's exit status");
    let mut err = String::new();
    if let Some(mut e) = bench.0.child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(st.code(), Some(143), "{st}: {err}");
    assert!(err.contains("signal 15"), "{err}");
    assert_eq!(
        common::namespaces_matching(mine),
        Vec::<String>::new(),
        "namespaces left behind: {err}"
    );
}
