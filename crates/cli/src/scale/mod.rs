//! `ustack bench --scale` (issue 11): how ustack holds up as the number of
//! concurrent pingers, clients and connections grows, each measurement
//! against the Linux kernel over veth in the same run:
//!
//! 1. ping sweep: 1..1000 concurrent pingers, mean and p99 RTT (seed 003,
//!    Figure 3);
//! 2. connection sweep: 1..1000 concurrent clients that connect, send 4 KB
//!    and close, connections/s and Mbit/s (seed 003, Figure 4);
//! 3. established: N idle connections, time per 10,000, server RSS, and
//!    request/response latency with none and with N idle;
//! 4. `ustack run` flows: N flows from the sandbox to the host held open,
//!    time per 1,000, then the relay's CPU time while they are idle.
//!
//! ustack runs as `ustack serve` in a process of its own; the clients are
//! hidden subcommands of this binary (`scale-client`, [`load`]) and the
//! kernel's server is `kserve-epoll` ([`kserver`]). Prints a table (or
//! `--json`) and writes one SVG plot per sweep into `--plot-dir`.

pub mod held;
pub mod kserver;
pub mod load;
pub mod procs;
mod report;
pub mod sweeps;
pub mod sys;
pub mod topo;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use report::Report;
use topo::Ctx;

/// A part of the scale benchmark.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Ping,
    Conns,
    Established,
    Run,
}

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Scale benchmark (--scale)")]
pub struct ScaleArgs {
    /// Run the scale benchmark instead: ping and connection sweeps, N
    /// established connections, `ustack run` flows (ustack vs the kernel).
    #[arg(long)]
    pub scale: bool,
    /// Only these parts (comma-separated): ping, conns, established, run.
    #[arg(long, value_delimiter = ',', value_name = "PARTS", requires = "scale")]
    pub scale_only: Vec<Part>,
    /// Idle connections to open and hold in the established test.
    #[arg(long, value_name = "N", default_value_t = 100_000, requires = "scale")]
    pub established: usize,
    /// Flows to open and hold from inside `ustack run`.
    #[arg(long, value_name = "N", default_value_t = 15_000, requires = "scale")]
    pub run_flows: usize,
    /// Where to write the SVG plots (scale-*.svg).
    #[arg(long, value_name = "DIR", default_value = ".", requires = "scale")]
    pub plot_dir: PathBuf,
    /// Concurrency points of the ping and connection sweeps.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,10,100,1000",
        requires = "scale"
    )]
    pub sweep: Vec<usize>,
    /// Seconds per sweep point and side.
    #[arg(long, value_name = "S", default_value_t = 3.0, requires = "scale")]
    pub point_seconds: f64,
    /// Seconds of the idle window in which the relay's CPU time is measured.
    #[arg(long, value_name = "S", default_value_t = 10.0, requires = "scale")]
    pub idle_seconds: f64,
}

fn have(prog: &str, arg: &str, package: &str) -> Result<()> {
    Command::new(prog)
        .arg(arg)
        .output()
        .map(drop)
        .with_context(|| format!("cannot run {prog} (install {package})"))
}

fn preflight(a: &ScaleArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "bench --scale needs root: it creates network namespaces, veth pairs and TAP devices"
        );
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        bail!("/dev/net/tun is missing: ustack serve and ustack run need TAP devices");
    }
    have("ip", "-V", "iproute2")?;
    have("sysctl", "-V", "procps")?;
    if a.sweep.is_empty() || a.sweep.iter().any(|&n| n == 0 || n > 18_000) {
        bail!("--sweep points must be 1..=18000");
    }
    if !(0.5..=600.0).contains(&a.point_seconds) {
        bail!("--point-seconds must be between 0.5 and 600");
    }
    if !(1.0..=600.0).contains(&a.idle_seconds) {
        bail!("--idle-seconds must be between 1 and 600");
    }
    if a.established > 1_000_000 {
        bail!("--established above 1,000,000 is not supported");
    }
    std::fs::create_dir_all(&a.plot_dir)
        .with_context(|| format!("cannot create {}", a.plot_dir.display()))?;
    Ok(())
}

/// Entry point of `ustack bench --scale`; the exit code is 1 when a part
/// or a side could not be measured.
pub fn run(a: &ScaleArgs, json: bool) -> Result<i32> {
    preflight(a)?;
    // Inherited by the helpers (the relay of `ustack run` holds a host
    // socket per flow).
    sys::raise_nofile().context("cannot raise the descriptor limit")?;
    procs::catch_interrupts()?;
    let ctx = Ctx {
        exe: std::env::current_exe().context("cannot find the ustack executable")?,
        pid: std::process::id(),
    };
    let parts = if a.scale_only.is_empty() {
        vec![Part::Ping, Part::Conns, Part::Established, Part::Run]
    } else {
        a.scale_only.clone()
    };
    let mut r = Report {
        point_seconds: a.point_seconds,
        ..Report::default()
    };
    for part in parts {
        let res = match part {
            Part::Ping => {
                sweeps::ping_sweep(&ctx, &a.sweep, a.point_seconds).map(|v| r.ping = Some(v))
            }
            Part::Conns => {
                let most = a.sweep.iter().copied().max().unwrap_or(1);
                held::max_connections_args(&ctx, most + most / 4).and_then(|(extra, note)| {
                    r.conns_max_connections = Some(note);
                    sweeps::conn_sweep(&ctx, &a.sweep, a.point_seconds, &extra)
                        .map(|v| r.conns = Some(v))
                })
            }
            Part::Established => {
                held::established(&ctx, a.established).map(|v| r.established = Some(v))
            }
            Part::Run => {
                held::run_flows(&ctx, a.run_flows, Duration::from_secs_f64(a.idle_seconds))
                    .map(|v| r.run_flows = Some(v))
            }
        };
        procs::check_interrupted()?;
        if let Err(e) = res {
            eprintln!("{part:?}: {e:#}");
            r.errors
                .insert(format!("{part:?}").to_lowercase(), format!("{e:#}"));
        }
    }
    r.goals = report::goals(&r);
    r.plots = report::write_plots(&r, &a.plot_dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", report::tables(&r));
    }
    Ok(if r.complete() { 0 } else { 1 })
}
