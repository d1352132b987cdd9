//! `ustack get`: an HTTP/1.1 GET over ustack.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;

use crate::http::{self, Url};
use crate::setup::{self, NetArgs};

#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub net: NetArgs,
    /// Write the body to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Seconds to wait for the connection to be established.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// URL to fetch: http://IPv4[:port]/path or http://[IPv6][:port]/path
    /// (names are not resolved).
    pub url: Url,
}

fn connect_error(e: io::Error, url: &Url) -> anyhow::Error {
    let what = match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("{}: connection refused", url.addr),
        io::ErrorKind::TimedOut => format!("{}: no answer (host down or unreachable?)", url.addr),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            format!("{}: host unreachable", url.addr)
        }
        _ => format!("cannot connect to {}: {e}", url.addr),
    };
    anyhow::anyhow!(what)
}

pub fn run(args: GetArgs) -> Result<i32> {
    let url = &args.url;
    setup::check_reachable(&args.net, url.addr.ip())?;
    // Open the output first: a bad path should fail before any network work.
    let mut sink: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 20, io::stdout().lock())),
    };
    let default_tap = format!("ustk{}", std::process::id() % 100_000_000);
    let up = setup::bring_up(&args.net, &default_tap)?;
    let t0 = Instant::now();
    let stream = ustack_net::TcpStream::connect_timeout(
        &up.net,
        &url.addr,
        Duration::from_secs(args.connect_timeout.max(1)),
    )
    .map_err(|e| connect_error(e, url))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let resp = http::get(&stream, url, &mut sink)
        .with_context(|| format!("GET http://{}{}", url.host_header, url.path))?;
    sink.flush().context("cannot write the body")?;
    drop(sink);
    let secs = t0.elapsed().as_secs_f64();
    drop(stream);
    up.finish();
    if !resp.is_success() {
        let body = String::from_utf8_lossy(&resp.error_body);
        let first = body.lines().next().unwrap_or("").trim();
        eprintln!(
            "ustack: GET http://{}{}: server answered {} {}{}",
            url.host_header,
            url.path,
            resp.status,
            resp.reason,
            if first.is_empty() {
                String::new()
            } else {
                format!(" ({first})")
            }
        );
        return Ok(1);
    }
    eprintln!(
        "received {} bytes in {:.3} s ({:.1} Mbit/s)",
        resp.body_len,
        secs,
        resp.body_len as f64 * 8.0 / secs.max(1e-9) / 1e6
    );
    Ok(0)
}
