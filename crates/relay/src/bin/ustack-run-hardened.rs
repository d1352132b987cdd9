//! `ustack run` and `ustack attach` as the `ustack` binary runs them
//! (hardened: once set up, the relay gives up its privileges, closes the
//! descriptors it was started with and confines itself with seccomp; see
//! `harden.rs`), reporting what the run did on stdout when it ends.
//!
//! Hardening is process-wide, so the relay crate's integration tests
//! cannot exercise it in their own process; they run this binary instead
//! (`CARGO_BIN_EXE_ustack-run-hardened`, always built from the tree under
//! test) and read the report line it prints last:
//!
//! - `run ARGS...`: `ustack run ARGS...`; the report is
//!   [`RunReport::to_json`] plus this process's memory (`rss_start_kib`,
//!   `rss_end_kib`, `hwm_kib`) and CPU time (`cpu_ns`, all its threads).
//! - `attach ARGS...`: `ustack attach ARGS...`, stopped when its standard
//!   input becomes readable (a byte, or end of file); the report is
//!   `{"code":N}`.
//!
//! A failure prints [`ERROR_PREFIX`] and the error chain instead, and exits 1.

use std::process::ExitCode;

use clap::Parser;
use ustack_relay::cli::{
    attach_hardened_until, run_hardened_report, AttachArgs, RunArgs, ERROR_PREFIX, REPORT_PREFIX,
};

#[derive(Parser)]
#[command(name = "ustack-run-hardened")]
enum Cmd {
    Run(RunArgs),
    Attach(AttachArgs),
}

/// The CPU time this process (all its threads) has used, in nanoseconds.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return u64::MAX;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn main() -> ExitCode {
    let rss_start = ustack_relay::stats::self_status_kib("VmRSS:");
    let report = match Cmd::parse() {
        Cmd::Run(a) => run_hardened_report(a).map(|r| {
            let mut v: serde_json::Value =
                serde_json::from_str(&r.to_json()).unwrap_or(serde_json::Value::Null);
            v["rss_start_kib"] = rss_start.into();
            v["rss_end_kib"] = ustack_relay::stats::self_status_kib("VmRSS:").into();
            v["hwm_kib"] = ustack_relay::stats::self_status_kib("VmHWM:").into();
            v["cpu_ns"] = cpu_ns().into();
            v
        }),
        Cmd::Attach(a) => attach_hardened_until(a, libc::STDIN_FILENO)
            .map(|code| serde_json::json!({ "code": code })),
    };
    match report {
        Ok(v) => {
            println!("\n{REPORT_PREFIX}{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("\n{ERROR_PREFIX}{e:#}");
            ExitCode::from(1)
        }
    }
}
