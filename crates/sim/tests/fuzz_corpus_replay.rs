//! Replays the fuzz corpus under plain `cargo test` (stable, no libFuzzer):
//! every file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/`
//! goes through the same body as the libFuzzer target `<target>` (the bodies
//! live in `fuzz/harness/`, included here by path). A panic fails the test and
//! names the file. A target whose corpus is missing or empty fails too.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

#[path = "../../../fuzz/harness/mod.rs"]
mod harness;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Regular, non-hidden files of `dir`, sorted (`None` if `dir` is missing).
fn inputs(dir: &Path) -> Option<Vec<PathBuf>> {
    let rd = fs::read_dir(dir).ok()?;
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.') && !n.ends_with(".md"))
        })
        .collect();
    v.sort();
    Some(v)
}

/// Run `body` on every file; returns (files run, failures).
fn replay(target: &str, body: fn(&[u8]), files: &[PathBuf]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    for f in files {
        let data = match fs::read(f) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{target}: cannot read {}: {e}", f.display()));
                continue;
            }
        };
        if panic::catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
            failures.push(format!("{target}: {} panicked", f.display()));
        }
    }
    (files.len(), failures)
}

#[test]
fn every_target_replays_its_corpus_and_regressions() {
    let root = fuzz_dir();
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for (target, body) in harness::TARGETS {
        let corpus_dir = root.join("corpus").join(target);
        let corpus = inputs(&corpus_dir).unwrap_or_default();
        assert!(
            !corpus.is_empty(),
            "fuzz corpus {} is missing or empty",
            corpus_dir.display()
        );
        let (n, f) = replay(target, *body, &corpus);
        failures.extend(f);
        // Regressions are optional per target, but every file present must pass.
        let regs = inputs(&root.join("regressions").join(target)).unwrap_or_default();
        let (r, f) = replay(target, *body, &regs);
        failures.extend(f);
        summary.push(format!("{target}: {n} corpus + {r} regressions"));
    }
    eprintln!("{}", summary.join("\n"));
    assert!(
        failures.is_empty(),
        "{} input(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The harness is live: its scripted setup reaches ESTABLISHED on every
/// configuration, burst mode (bit 7) included (it asserts so), and the check applied to every frame the
/// stack emits accepts a valid frame and rejects a corrupted one.
#[test]
fn harness_setup_runs_and_frame_check_rejects_bad_frames() {
    harness::stack::run(&[]);
    for cfg in 0..=255u8 {
        // Config byte, then a TCP op on the passive flow carrying "hello".
        harness::stack::run(&[cfg, 0x18, 0, 0x18, 0, 0, 0, 0, 5]);
    }
    // An echo reply from us (10.0.0.2, 02:00:00:00:00:02) captured on Linux.
    let path = fuzz_dir().join("corpus/ethernet/icmp_echo_reply");
    let good = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    harness::stack::check_frame(&good, 1500);
    let mut bad_csum = good.clone();
    let last = bad_csum.len() - 1;
    bad_csum[last] ^= 0xff;
    let too_big = panic::catch_unwind(|| harness::stack::check_frame(&good, 64));
    let corrupt = panic::catch_unwind(|| harness::stack::check_frame(&bad_csum, 1500));
    assert!(too_big.is_err(), "a frame over the MTU must be rejected");
    assert!(
        corrupt.is_err(),
        "a frame with a bad ICMP checksum must be rejected"
    );
}

/// `tcp_conn`'s setup reaches ESTABLISHED on both sides on every
/// configuration (it asserts so), and a transfer both ways through drops,
/// a duplicate and a swap completes its faithful end (which asserts every
/// byte arrives when nothing tainted the connection).
#[test]
fn tcp_conn_setup_and_transfer_on_every_configuration() {
    // Op byte: step << 5 | op << 1 | side (see fuzz/harness/tcp_conn.rs).
    let op = |side: u8, kind: u8| (kind << 1) | side;
    for cfg in 0..64u8 {
        harness::tcp_conn::run(&[
            cfg,
            op(0, 9), // A sends 3000 bytes
            0x80,
            0x0b,
            0xb8,
            op(1, 9), // B sends 700
            0x82,
            0xbc,
            op(0, 4),  // drop A's next frame
            op(0, 5),  // duplicate the one after
            op(1, 6),  // swap B's next two
            op(0, 13), // deliver all
        ]);
    }
}
