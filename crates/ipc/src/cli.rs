//! The `ustack ipc ...` command line (the `ustack` binary embeds [`IpcCommand`] and calls
//! [`run`]).

use crate::{bench, Domain, DomainConfig, DEFAULT_ARENA_SIZE, DEFAULT_MAX_COPY};
use std::path::PathBuf;

/// `ustack ipc` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum IpcCommand {
    /// List domains with their endpoints (pid, thread, name, state), pending
    /// notifications and per-endpoint counters.
    Ls {
        /// Only this domain.
        name: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create a domain (replacing a stale one of the same name).
    Create {
        /// Domain name ([A-Za-z0-9_.-], up to 48 characters).
        name: String,
        /// Number of endpoint slots (1..=1024).
        #[arg(long, default_value_t = 64)]
        max_endpoints: u32,
        /// Largest vcopy in bytes.
        #[arg(long, default_value_t = DEFAULT_MAX_COPY)]
        max_copy: u64,
        /// Size of the shared arena in bytes (rounded up to 64 KiB; 0 = none). vcopy
        /// between arena buffers is a plain memcpy. Only allocated buffers use memory.
        #[arg(long, default_value_t = DEFAULT_ARENA_SIZE)]
        arena_size: u64,
    },
    /// End a domain: blocked calls in it fail with "domain ended"; its memory is freed.
    End {
        /// Domain name.
        name: String,
    },
    /// Reclaim endpoint slots left by dead processes (all domains, or one).
    Gc {
        /// Only this domain.
        name: Option<String>,
    },
    /// Run the IPC micro-benchmarks against Linux pipes, FIFOs, sockets, TCP and message queues.
    Bench(BenchArgs),
}

/// Options of `ustack ipc bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Very short run (a few ms per measurement), for smoke tests.
    #[arg(long)]
    pub quick: bool,
    /// Print the rows as JSON (one object per row) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Largest number of concurrent client/server pairs for the aggregate benchmark.
    #[arg(long, default_value_t = 4)]
    pub pairs: u32,
    /// Write the plot (SVG) here.
    #[arg(long, default_value = "ipc-bench.svg")]
    pub plot: PathBuf,
    /// Do not write a plot.
    #[arg(long)]
    pub no_plot: bool,
    /// Only run benchmarks whose name starts with this (IPC, IPC2, COPY, AGGREGATE, ...).
    #[arg(long)]
    pub only: Option<String>,
}

/// Run a `ustack ipc` command; returns the process exit code.
pub fn run(cmd: IpcCommand) -> anyhow::Result<i32> {
    match cmd {
        IpcCommand::Ls { name, json } => {
            let names = match name {
                Some(n) => vec![n],
                None => Domain::list(),
            };
            let mut infos = vec![];
            for n in names {
                match Domain::open(&n) {
                    Ok(d) => infos.push(d.info()),
                    Err(e) => eprintln!("{n}: {e}"),
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&infos)?);
            } else {
                print!("{}", ls_text(&infos));
            }
            Ok(0)
        }
        IpcCommand::Create {
            name,
            max_endpoints,
            max_copy,
            arena_size,
        } => {
            let d = Domain::create(
                &name,
                DomainConfig {
                    max_endpoints,
                    max_copy,
                    arena_size,
                },
            )
            .map_err(|e| anyhow::anyhow!("create {name}: {e}"))?;
            println!(
                "created domain {} (tag {}, {} endpoints, {} KiB arena)",
                d.name(),
                d.tag(),
                d.max_endpoints(),
                d.arena_size() >> 10
            );
            Ok(0)
        }
        IpcCommand::End { name } => {
            Domain::end_by_name(&name).map_err(|e| anyhow::anyhow!("end {name}: {e}"))?;
            println!("ended domain {name}");
            Ok(0)
        }
        IpcCommand::Gc { name } => {
            let names = name.map(|n| vec![n]).unwrap_or_else(Domain::list);
            for n in names {
                match Domain::open(&n) {
                    Ok(d) => {
                        let used = d.arena_used();
                        let slots = d.reclaim_dead();
                        let freed = used.saturating_sub(d.arena_used());
                        println!(
                            "{n}: reclaimed {slots} dead endpoint(s), {} KiB of arena",
                            freed >> 10
                        );
                    }
                    Err(crate::Error::Corrupt) => {
                        Domain::end_by_name(&n)
                            .map_err(|e| anyhow::anyhow!("remove corrupt {n}: {e}"))?;
                        println!("{n}: corrupt segment removed");
                    }
                    Err(e) => eprintln!("{n}: {e}"),
                }
            }
            Ok(0)
        }
        IpcCommand::Bench(a) => {
            let rows = bench::run(&bench::Options {
                quick: a.quick,
                max_pairs: a.pairs.max(1),
                progress: true,
                only: a.only,
            })?;
            if a.json {
                for r in &rows {
                    println!("{}", serde_json::to_string(r)?);
                }
            } else {
                print!("{}", bench::tables(&rows));
            }
            if !a.no_plot {
                std::fs::write(&a.plot, bench::svg(&rows))?;
                eprintln!("plot written to {}", a.plot.display());
            }
            Ok(0)
        }
    }
}

/// Text rendering of `ls`.
pub fn ls_text(infos: &[crate::DomainInfo]) -> String {
    let mut s = String::new();
    if infos.is_empty() {
        s.push_str("no domains\n");
    }
    for d in infos {
        s.push_str(&format!(
            "domain {} (tag {}, {}/{} endpoints, max copy {} bytes, arena {}/{} KiB used){}\n",
            d.name,
            d.tag,
            d.endpoints.len(),
            d.max_endpoints,
            d.max_copy,
            d.arena_used >> 10,
            d.arena_size >> 10,
            if d.ended { " ENDED" } else { "" }
        ));
        if d.endpoints.is_empty() {
            continue;
        }
        s.push_str(&format!(
            "  {:>10} {:>7} {:>7} {:<14} {:<28} {:<14} {:>8} {:>8} {:>7} {:>7} {:>6} {:>10}  {}\n",
            "endpoint",
            "pid",
            "tid",
            "name",
            "state",
            "wait/doorbell",
            "sent",
            "recv",
            "ntf-out",
            "ntf-in",
            "copies",
            "bytes",
            "pending notify"
        ));
        for e in &d.endpoints {
            let state = if e.alive {
                e.state.clone()
            } else {
                format!("DEAD ({})", e.state)
            };
            let pend: Vec<String> = e.pending_notify.iter().map(|p| p.to_string()).collect();
            let wait = if e.doorbell == "-" {
                e.wait_mode.clone()
            } else {
                format!("{}/{}", e.wait_mode, e.doorbell)
            };
            s.push_str(&format!(
                "  {:>10} {:>7} {:>7} {:<14} {:<28} {:<14} {:>8} {:>8} {:>7} {:>7} {:>6} {:>10}  {}\n",
                e.endpoint,
                e.pid,
                e.tid,
                e.name,
                state,
                wait,
                e.sent,
                e.received,
                e.notify_sent,
                e.notify_received,
                e.copies,
                e.copied_bytes,
                if pend.is_empty() { "-".to_string() } else { pend.join(",") }
            ));
        }
    }
    s
}
