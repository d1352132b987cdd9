//! Stand-alone front end to the `ustack ipc` commands (same code as `ustack ipc ...`):
//! `cargo run --release -p ustack-ipc --example ustack-ipc -- bench`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "ustack-ipc",
    about = "ustack IPC: domains, endpoints, introspection and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: ustack_ipc::cli::IpcCommand,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let code = ustack_ipc::cli::run(cli.cmd)?;
    std::process::exit(code);
}
