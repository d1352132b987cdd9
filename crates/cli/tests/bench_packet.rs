//! `ustack bench --packet` at tiny sizes: ustack is measured on the TAP and
//! on both AF_PACKET ring versions in one run, every ring row has a figure
//! and a ratio, and no namespace of the run is left behind. Not a
//! performance test. Needs root (fails without).

mod common;

use std::process::Command;

use common::{namespaces_matching, BIN};

fn leftovers(pid: u32) -> Vec<String> {
    let tag = (pid % 100_000).to_string();
    namespaces_matching(|n| n.starts_with("ub") && n.ends_with(&tag))
}

#[test]
fn packet_bench_measures_both_rings_against_the_tap() {
    let child = Command::new(BIN)
        .args([
            "bench",
            "--packet",
            "--json",
            "--seconds",
            "0.3",
            "--round-trips",
            "20",
            "--pings",
            "3",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start ustack bench --packet");
    let pid = child.id();
    let out = child.wait_with_output().expect("ustack bench --packet");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    for v in ["v3", "v2"] {
        for test in [
            "icmp_echo_rtt",
            "tcp_rr_1byte",
            "tcp_bulk_to_stack",
            "tcp_bulk_from_stack",
        ] {
            let name = format!("packet_{v}_{test}");
            let row = rows
                .iter()
                .find(|r| r["test"] == name.as_str())
                .unwrap_or_else(|| panic!("no row {name} in {rows:?}"));
            assert!(row["ustack"].as_f64() > Some(0.0), "{row}");
            assert!(row["kernel"].as_f64() > Some(0.0), "{row}");
            assert!(row["ratio"].as_f64() > Some(0.0), "{row}");
        }
    }
    assert_eq!(
        leftovers(pid),
        Vec::<String>::new(),
        "namespaces left behind"
    );

    let out = Command::new(BIN)
        .args(["bench", "--packet", "--no-offload"])
        .output()
        .expect("ustack bench");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("drop --no-offload"), "{err}");
}
