//! `ustack`: run the classic services, ping and fetch over the user-space
//! TCP/IP stack on a TAP device, and benchmark it against the Linux kernel.

use std::net::IpAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod bench_cc;
mod evloop;
mod get;
mod http;
mod kernel;
mod netns;
mod ops;
mod ping;
mod scale;
mod serve;
mod server;
mod services;
mod setup;
mod signals;

#[derive(Parser)]
#[command(
    name = "ustack",
    version,
    about = "A user-space TCP/IP stack: serve, ping, get, bench, run, attach, ipc"
)]
struct Cli {
    /// More logging on stderr (-v: debug, -vv: trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve echo (TCP+UDP 7), discard (9), chargen (19) and HTTP (80) on ustack over a TAP.
    Serve(serve::ServeArgs),
    /// Send ICMP echo requests from ustack (like ping(8)).
    Ping(ping::PingArgs),
    /// Fetch a URL with HTTP/1.1 GET over ustack; throughput goes to stderr.
    Get(get::GetArgs),
    /// Benchmark ustack over TAP against the kernel over veth (ICMP, TCP RR, bulk;
    /// --scale: pingers, connections and flows by the thousand).
    Bench(bench::BenchArgs),
    /// Run a command in its own network namespace, networked by ustack in user space.
    Run(ustack_relay::cli::RunArgs),
    /// Attach ustack networking to an existing process's network namespace.
    Attach(ustack_relay::cli::AttachArgs),
    /// Benchmark `ustack run` against pasta and slirp4netns (iperf3 both ways, TCP RR).
    RunBench(ustack_relay::bench::RunBenchArgs),
    /// The running stacks (name, PID, mode, devices, addresses, connections).
    Ps(ops::PsArgs),
    /// A running stack's sockets, like ss(8): -t -l -a -i -e, filters.
    Ss(ops::SsArgs),
    /// A running stack's counters with Linux's names, like nstat(8).
    Nstat(ops::NstatArgs),
    /// Read or change a running stack's tunables by Linux name, like sysctl(8).
    Sysctl(ops::SysctlArgs),
    /// Capture a running stack's frames live, in pcap format (-w - | tcpdump -r -).
    Capture(ops::CaptureArgs),
    /// List, add and remove a running `ustack run`'s port forwards.
    Ports(ops::PortsArgs),
    /// Minix-3-style IPC: list, create and end domains; run the IPC benchmark.
    Ipc {
        #[command(subcommand)]
        cmd: ustack_ipc::cli::IpcCommand,
    },
    /// (bench helper) Run the services on the kernel's sockets.
    #[command(hide = true)]
    Kserve {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0")]
        bind: IpAddr,
    },
    /// (bench helper) Echo and discard on kernel sockets in one epoll loop.
    #[command(hide = true)]
    KserveEpoll(scale::kserver::KserveEpollArgs),
    /// (bench helper) Load generators of `bench --scale`.
    #[command(hide = true)]
    ScaleClient {
        #[command(subcommand)]
        mode: scale::load::Mode,
    },
    /// (bench helper) Measure against services on the kernel's sockets.
    #[command(hide = true)]
    Kclient {
        #[arg(value_enum)]
        test: kernel::ClientTest,
        host: IpAddr,
        /// Round trips for `rr`.
        #[arg(long, default_value_t = 2000)]
        count: u64,
        /// Seconds for `send`/`recv`.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Serve(a) => {
            signals::block_termination()?;
            serve::run(a)
        }
        Command::Ping(a) => {
            signals::block_termination()?;
            ping::run(a)
        }
        Command::Get(a) => get::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Run(a) => ustack_relay::cli::run_hardened(a),
        Command::Attach(a) => ustack_relay::cli::attach_hardened(a),
        Command::RunBench(a) => ustack_relay::bench::run(a),
        Command::Ps(a) => ops::ps(a),
        Command::Ss(a) => ops::ss(a),
        Command::Nstat(a) => ops::nstat(a),
        Command::Sysctl(a) => ops::sysctl(a),
        Command::Capture(a) => ops::capture(a),
        Command::Ports(a) => ops::ports(a),
        Command::Ipc { cmd } => ustack_ipc::cli::run(cmd),
        Command::Kserve { bind } => {
            signals::block_termination()?;
            kernel::kserve(bind)
        }
        Command::KserveEpoll(a) => scale::kserver::run(a),
        Command::ScaleClient { mode } => scale::load::run(mode),
        Command::Kclient {
            test,
            host,
            count,
            seconds,
        } => kernel::kclient(test, host, count, seconds),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match run(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            // "{:#}" prints the context chain on one line: "a: b: c".
            eprintln!("ustack: {e:#}");
            ExitCode::from(1)
        }
    }
}
