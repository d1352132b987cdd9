//! `ustack bench --scale` at tiny sizes: the harness runs every part
//! against both peers, prints JSON of the documented shape, writes the
//! plots and leaves no namespace behind. Not a performance test: figures
//! are only checked to have been measured. Needs root (fails without).

mod common;

use std::process::Command;

use common::{namespaces_matching, TempDir, BIN};

fn leftovers(tag: &str) -> Vec<String> {
    namespaces_matching(|n| n.starts_with("uss") && n.ends_with(tag))
}

#[test]
fn scale_bench_measures_every_part_on_both_peers() {
    let dir = TempDir::new("scale-test");
    let child = Command::new(BIN)
        .args([
            "bench",
            "--scale",
            "--json",
            "--sweep",
            "1,3",
            "--point-seconds",
            "0.5",
            "--established",
            "60",
            "--run-flows",
            "30",
            "--idle-seconds",
            "1",
            "--plot-dir",
        ])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start ustack bench --scale");
    let tag = child.id().to_string();
    let out = child.wait_with_output().expect("ustack bench --scale");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));

    let ping = v["ping"].as_array().expect("ping rows");
    assert_eq!(ping.len(), 2);
    for row in ping {
        for side in ["ustack", "kernel"] {
            assert!(row[side]["received"].as_u64() > Some(0), "{row}");
            assert!(row[side]["mean_us"].as_f64() > Some(0.0), "{row}");
        }
    }
    let conns = v["conns"].as_array().expect("conns rows");
    assert_eq!(conns.len(), 2);
    for row in conns {
        for side in ["ustack", "kernel"] {
            assert!(row[side]["completed"].as_u64() > Some(0), "{row}");
        }
        assert!(row["ratio"].as_f64().is_some(), "{row}");
    }
    let est = &v["established"];
    for side in ["ustack", "kernel"] {
        let s = &est[side];
        assert_eq!(s["opening"]["alive"], 60, "{s}");
        assert_eq!(
            s["opening"]["step_seconds"].as_array().map(Vec::len),
            Some(10),
            "{s}"
        );
        assert!(s["rss_after"].as_u64() > Some(0), "{s}");
        assert!(s["rr_idle_none"]["mean_us"].as_f64() > Some(0.0), "{s}");
        assert!(s["rr_idle_all"]["mean_us"].as_f64() > Some(0.0), "{s}");
    }
    let run = &v["run_flows"];
    for side in ["ustack", "kernel"] {
        assert_eq!(run[side]["opening"]["alive"], 30, "{run}");
    }
    assert!(
        run["ustack"]["relay_cpu_seconds"].as_f64().is_some(),
        "{run}"
    );
    assert!(run["kernel"]["relay_cpu_seconds"].is_null(), "{run}");
    assert!(
        v["goals"].as_array().is_some_and(|g| g.len() >= 9),
        "{}",
        v["goals"]
    );

    for name in [
        "scale-ping.svg",
        "scale-conns.svg",
        "scale-established.svg",
        "scale-run.svg",
    ] {
        let p = dir.join(name);
        let svg = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{name}"
        );
    }
    drop(dir);
    assert!(
        leftovers(&tag).is_empty(),
        "namespaces left: {:?}",
        leftovers(&tag)
    );
}
