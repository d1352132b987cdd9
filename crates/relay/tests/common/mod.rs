//! Set-up shared by the relay's integration tests: parsing `ustack run`
//! arguments, servers on the host's loopback run by helper threads, and Drop
//! guards that clean up also when a test panics.

#![allow(dead_code)] // each test binary uses a different part of it

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use clap::Parser;
use ustack_relay::cli::RunArgs;

pub mod hardened;

#[derive(Parser)]
struct W {
    #[command(flatten)]
    a: RunArgs,
}

/// Parse `ustack run` arguments (without the program name).
pub fn parse_run_args<I, T>(v: I) -> Result<RunArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let all = std::iter::once(OsString::from("ustack-run")).chain(v.into_iter().map(Into::into));
    W::try_parse_from(all).map(|w| w.a)
}

/// Parse `ustack run` arguments; a parse error fails the test.
pub fn args(v: &[&str]) -> RunArgs {
    match parse_run_args(v) {
        Ok(a) => a,
        Err(e) => panic!("parse {v:?}: {e}"),
    }
}

/// A helper thread that runs until its stop flag is set; setting the flag
/// and joining happen when it is dropped (also on failure).
pub struct Helper {
    stop: Arc<AtomicBool>,
    join: Option<thread::JoinHandle<()>>,
}

impl Helper {
    /// Run `f` on a new thread; `f` polls the flag it is given and returns
    /// once it is set.
    pub fn spawn(f: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> Helper {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let join = thread::spawn(move || f(s2));
        Helper {
            stop,
            join: Some(join),
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// A file in the temporary directory, removed when dropped.
pub struct TempFile(PathBuf);

impl TempFile {
    /// `$TMPDIR/ustack-test-PID-TAG` (not created).
    pub fn new(tag: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("ustack-test-{}-{tag}", std::process::id())))
    }
    pub fn as_path(&self) -> &Path {
        &self.0
    }
    /// The path as a string, for command lines.
    pub fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Byte `i` of the deterministic test pattern.
pub fn body_byte(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 11)) as u8
}

/// HTTP/1.0 server on 127.0.0.1 answering every request with `len` bytes of
/// the [`body_byte`] pattern.
pub fn http_server(len: usize) -> (u16, Helper) {
    http_server_on("127.0.0.1", len)
}

/// [`http_server`] listening on `ip` (`"::1"` for the host's IPv6 loopback).
pub fn http_server_on(ip: &str, len: usize) -> (u16, Helper) {
    let l = TcpListener::bind((ip, 0)).expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    let port = l.local_addr().expect("addr").port();
    let helper = Helper::spawn(move |stop| {
        let body: Vec<u8> = (0..len).map(body_byte).collect();
        while !stop.load(Ordering::SeqCst) {
            let (mut c, _) = match l.accept() {
                Ok(x) => x,
                Err(_) => {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            let _ = c.set_nonblocking(false);
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let head = format!("HTTP/1.0 200 OK\r\nContent-Length: {len}\r\n\r\n");
            let _ = c.write_all(head.as_bytes());
            let _ = c.write_all(&body);
        }
    });
    (port, helper)
}

/// The AAAA answer of [`dns_server`].
pub const DNS_AAAA: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 1, 2, 3);

/// A DNS responder on 127.0.0.1 answering every A query with 10.1.2.3
/// (other types: NOERROR, no answer).
pub fn dns_server() -> (u16, Helper) {
    dns_server_with(false)
}

/// [`dns_server`] that also answers every AAAA query with [`DNS_AAAA`].
pub fn dns_server_with(aaaa: bool) -> (u16, Helper) {
    let answer_aaaa = aaaa;
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let port = s.local_addr().expect("addr").port();
    let helper = Helper::spawn(move |stop| {
        let mut buf = [0u8; 1500];
        while !stop.load(Ordering::SeqCst) {
            let Ok((n, peer)) = s.recv_from(&mut buf) else {
                continue;
            };
            let q = &buf[..n];
            if q.len() < 12 {
                continue;
            }
            // Question: name labels up to the root, then QTYPE and QCLASS.
            let mut i = 12;
            while i < q.len() && q[i] != 0 {
                i += 1 + q[i] as usize;
            }
            let end = i + 5;
            if end > q.len() {
                continue;
            }
            let qtype = u16::from_be_bytes([q[i + 1], q[i + 2]]);
            let (a, aaaa) = (qtype == 1, answer_aaaa && qtype == 28);
            let mut r = Vec::with_capacity(end + 28);
            r.extend_from_slice(&q[0..2]);
            r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(a || aaaa), 0, 0, 0, 0]);
            r.extend_from_slice(&q[12..end]);
            if a {
                r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 1, 2, 3]);
            }
            if aaaa {
                r.extend_from_slice(&[0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16]);
                r.extend_from_slice(&DNS_AAAA.octets());
            }
            let _ = s.send_to(&r, peer);
        }
    });
    (port, helper)
}
