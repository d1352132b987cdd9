//! The benchmark's output shape (not its speed) and the `ustack ipc` commands.

mod common;
use clap::Parser;
use std::collections::BTreeSet;
use ustack_ipc::bench;
use ustack_ipc::cli::{self, IpcCommand};
use ustack_ipc::Domain;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: IpcCommand,
}

#[test]
fn quick_bench_rows_have_the_json_shape() {
    let rows = bench::run(&bench::Options {
        quick: true,
        max_pairs: 2,
        progress: false,
        only: None,
    })
    .unwrap();
    let mut benches = BTreeSet::new();
    let mut mechs = BTreeSet::new();
    for r in &rows {
        let v = serde_json::to_value(r).unwrap();
        let obj = v.as_object().unwrap();
        let keys: BTreeSet<&str> = obj.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            BTreeSet::from([
                "benchmark",
                "mechanism",
                "mode",
                "size",
                "pairs",
                "value",
                "unit"
            ])
        );
        assert!(obj["value"].as_f64().unwrap() > 0.0, "{r:?}");
        assert!(obj["size"].is_u64() && obj["pairs"].as_u64().unwrap() >= 1);
        benches.insert(r.benchmark.clone());
        mechs.insert(r.mechanism.clone());
    }
    assert_eq!(
        benches,
        BTreeSet::from(["IPC1", "IPC2", "IPC3", "COPY1", "COPY2", "AGGREGATE"].map(String::from))
    );
    for m in [
        "ustack",
        "pipe",
        "fifo",
        "unix-stream",
        "unix-seqpacket",
        "tcp-loopback",
        "mqueue",
        "memcpy",
        "ustack-arena",
    ] {
        assert!(mechs.contains(m), "missing {m}");
    }
    let modes: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.benchmark == "IPC2" && r.mechanism == "ustack")
        .map(|r| r.mode.as_str())
        .collect();
    // Unpinned always; pinned to two different CPUs as well when we may use two CPUs.
    let two_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    // IPC2 also measures Block mode with hand-off replies.
    let mut want = BTreeSet::from(["adaptive", "spin", "block", "block+handoff"]);
    if two_cpus {
        want.extend([
            "adaptive,pinned",
            "spin,pinned",
            "block,pinned",
            "block+handoff,pinned",
        ]);
        want.extend([
            "adaptive,1cpu",
            "spin,1cpu",
            "block,1cpu",
            "block+handoff,1cpu",
        ]);
    }
    assert_eq!(modes, want);
    // The Linux primitives are measured with the same placements.
    let pipe_modes: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.benchmark == "IPC2" && r.mechanism == "pipe")
        .map(|r| r.mode.as_str())
        .collect();
    let want_pipe = if two_cpus {
        BTreeSet::from(["-", "pinned", "1cpu"])
    } else {
        BTreeSet::from(["-"])
    };
    assert_eq!(pipe_modes, want_pipe);
    assert_eq!(
        rows.iter().filter(|r| r.benchmark == "AGGREGATE").count(),
        4,
        "2 pairs x (adaptive, spin)"
    );
    let t = bench::tables(&rows);
    assert!(
        t.contains("IPC2 sendrec")
            && t.contains("ustack COPY2 private")
            && t.contains("ustack COPY1 arena")
            && t.contains("Aggregate sendrec")
    );
    assert_eq!(t.contains("pinned to two different CPUs"), two_cpus, "{t}");
    assert_eq!(t.contains("pinned to the same CPU"), two_cpus, "{t}");
    let svg = bench::svg(&rows);
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>") && svg.contains("polyline")
    );
}

#[test]
fn cli_create_ls_gc_end() {
    let name = common::unique("cli");
    let run = |args: &[&str]| {
        let mut v = vec!["ipc"];
        v.extend_from_slice(args);
        cli::run(Cli::try_parse_from(v).unwrap().cmd).unwrap()
    };
    assert_eq!(
        run(&[
            "create",
            &name,
            "--max-endpoints",
            "8",
            "--arena-size",
            "1048576"
        ]),
        0
    );
    let d = Domain::open(&name).unwrap();
    assert_eq!(d.max_endpoints(), 8);
    assert_eq!(d.arena_size(), 1 << 20);
    let buf = d.alloc(1000).unwrap();
    let mut a = d.bind("alpha").unwrap();
    let b = d.bind("beta").unwrap();
    a.notify(b.id()).unwrap();
    let text = cli::ls_text(&[d.info()]);
    assert!(
        text.contains(&format!("domain {name}")) && text.contains("alpha") && text.contains("beta"),
        "{text}"
    );
    assert!(
        text.contains(&a.id().to_string()) && text.contains("running"),
        "{text}"
    );
    assert!(text.contains("arena 64/1024 KiB used"), "{text}");
    drop(buf);
    assert_eq!(run(&["ls", &name]), 0);
    assert_eq!(run(&["ls", "--json"]), 0);
    assert_eq!(run(&["gc", &name]), 0);
    assert!(Cli::try_parse_from(["ipc", "bench", "--quick", "--json", "--pairs", "3"]).is_ok());
    assert_eq!(run(&["end", &name]), 0);
    assert!(d.is_ended());
    assert!(Cli::try_parse_from(["ipc", "frobnicate"]).is_err());
}
