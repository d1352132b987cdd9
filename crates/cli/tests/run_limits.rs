//! `ustack run` and the descriptor limit: the relay holds one host socket
//! per flow, so it raises its own soft limit to the hard one (and warns when
//! `--max-flows` still does not fit), while the sandboxed command keeps the
//! limit it was started with.

mod common;

use std::process::Command;

use common::BIN;

fn run_under(ulimit: &str, extra: &[&str]) -> (String, String) {
    let mut script = format!("ulimit {ulimit} && exec {BIN} run");
    for a in extra {
        script.push(' ');
        script.push_str(a);
    }
    script.push_str(" -- sh -c 'ulimit -n'");
    let out = Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_command_keeps_its_descriptor_limit() {
    let (stdout, stderr) = run_under("-Sn 512", &["--max-flows", "100"]);
    assert_eq!(stdout, "512", "the command's limit: {stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn the_default_flow_limit_fits_the_descriptor_limit_silently() {
    // Hard limit 1000: the default 16,384 flows cannot fit; it is lowered
    // without a word (only an explicit --max-flows is worth a warning).
    let (stdout, stderr) = run_under("-n 1000", &[]);
    assert_eq!(stdout, "1000");
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn a_flow_limit_beyond_the_descriptor_limit_is_reported() {
    // Soft and hard limit 1000: --max-flows 4096 cannot be reached.
    let (stdout, stderr) = run_under("-n 1000", &["--max-flows", "4096"]);
    assert_eq!(stdout, "1000");
    assert!(
        stderr.contains("--max-flows 4096 needs about 4160 descriptors but the limit is 1000"),
        "{stderr}"
    );
}
