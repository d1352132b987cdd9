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
    /// Write the body to FILE instead of stdout (`-`: stdout). FILE is
    /// replaced only by a successful GET; a failed one leaves it as it was
    /// (and makes none).
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

/// `-o FILE`: opened before any network work (a bad path fails first),
/// without truncating it; emptied only when the body starts (or the
/// answer turns out a success with an empty body), and removed again if
/// it did not exist and the GET failed, as curl leaves a file alone.
struct OutFile {
    file: File,
    path: PathBuf,
    created: bool,
    emptied: bool,
}

impl OutFile {
    fn open(path: &std::path::Path) -> Result<OutFile> {
        let created = !path.exists();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(OutFile {
            file,
            path: path.to_path_buf(),
            created,
            emptied: false,
        })
    }

    fn empty(&mut self) -> io::Result<()> {
        if !self.emptied {
            self.file.set_len(0)?;
            self.emptied = true;
        }
        Ok(())
    }

    /// The GET failed: a file made for it goes away, an older one stays.
    fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Write for OutFile {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.empty()?;
        self.file.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

pub fn run(args: GetArgs) -> Result<i32> {
    let url = &args.url;
    setup::check_reachable(&args.net, url.addr.ip())?;
    // Open the output first: a bad path should fail before any network
    // work. `-o -` is stdout, as curl's and wget's.
    let out_file = match args.output.as_deref() {
        Some(p) if p != std::path::Path::new("-") => Some(OutFile::open(p)?),
        _ => None,
    };
    match fetch(&args, out_file) {
        Ok(code) => Ok(code),
        Err((e, Some(f))) => {
            f.discard();
            Err(e)
        }
        Err((e, None)) => Err(e),
    }
}

/// The GET itself, writing to `out_file` (else stdout); on failure the
/// error and the output file, for the caller to discard.
fn fetch(
    args: &GetArgs,
    out_file: Option<OutFile>,
) -> std::result::Result<i32, (anyhow::Error, Option<OutFile>)> {
    let mut file_sink = out_file.map(|f| BufWriter::with_capacity(1 << 20, f));
    let mut stdout_sink;
    let sink: &mut dyn Write = match file_sink.as_mut() {
        Some(f) => f,
        None => {
            stdout_sink = BufWriter::with_capacity(1 << 20, io::stdout().lock());
            &mut stdout_sink
        }
    };
    let r = get_into(args, sink);
    // (get_into flushed what it wrote; on a failure what is left unwritten
    // does not matter.)
    let file = file_sink.map(|b| b.into_parts().0);
    match r {
        Ok(0) => {
            if let Some(mut f) = file {
                // A success with an empty body empties the file too.
                if let Err(e) = f.empty().and_then(|()| f.flush()) {
                    return Err((
                        anyhow::Error::new(e).context("cannot write the body"),
                        Some(f),
                    ));
                }
            }
            Ok(0)
        }
        // A non-2xx answer, already reported.
        Ok(code) => {
            if let Some(f) = file {
                f.discard();
            }
            Ok(code)
        }
        Err(e) => Err((e, file)),
    }
}

fn get_into(args: &GetArgs, sink: &mut dyn Write) -> Result<i32> {
    let url = &args.url;
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
    let resp = http::get(&stream, url, sink)
        .with_context(|| format!("GET http://{}{}", url.host_header, url.path))?;
    sink.flush().context("cannot write the body")?;
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
