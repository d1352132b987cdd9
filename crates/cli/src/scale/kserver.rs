//! `ustack kserve-epoll` (hidden): echo and discard on the kernel's sockets
//! in one thread with one epoll loop, the kernel peer of `ustack bench
//! --scale` and the host-side server of its `ustack run` flows. It holds
//! connections without a thread each; with --reuseport several processes
//! share the ports, so that 100,000 connections fit under the
//! per-process descriptor limit. Prints one JSON line with the ports once
//! listening, then serves until killed.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;

use super::sys::{self, Epoll, EV_ERR, EV_IN, EV_OUT, EV_RDHUP};

#[derive(Args, Debug)]
pub struct KserveEpollArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: Ipv4Addr,
    /// Echo port (0: any free port).
    #[arg(long, default_value_t = 7)]
    pub echo_port: u16,
    /// Discard port (none if not given; 0: any free port).
    #[arg(long)]
    pub discard_port: Option<u16>,
    /// Share the ports with other processes (SO_REUSEPORT).
    #[arg(long)]
    pub reuseport: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Echo,
    Discard,
}

struct Conn {
    stream: TcpStream,
    kind: Kind,
    /// Echo bytes the peer has not taken yet (reading waits until it has).
    unsent: Vec<u8>,
}

/// Listeners are tokens 0 and 1; connection `i` is token `i + 2`.
const FIRST_CONN: u64 = 2;

fn port_of(l: &TcpListener) -> io::Result<u16> {
    match l.local_addr()? {
        SocketAddr::V4(a) => Ok(a.port()),
        SocketAddr::V6(a) => Ok(a.port()),
    }
}

pub fn run(a: KserveEpollArgs) -> Result<i32> {
    let limit = sys::raise_nofile().context("cannot raise the descriptor limit")?;
    let ep = Epoll::new()?;
    let mut listeners: Vec<(TcpListener, Kind)> = Vec::new();
    let echo = sys::listen(SocketAddrV4::new(a.bind, a.echo_port), a.reuseport, 4096)
        .with_context(|| format!("cannot listen on {}:{}", a.bind, a.echo_port))?;
    listeners.push((echo, Kind::Echo));
    if let Some(p) = a.discard_port {
        let l = sys::listen(SocketAddrV4::new(a.bind, p), a.reuseport, 4096)
            .with_context(|| format!("cannot listen on {}:{p}", a.bind))?;
        listeners.push((l, Kind::Discard));
    }
    for (i, (l, _)) in listeners.iter().enumerate() {
        ep.add(l.as_raw_fd(), EV_IN, i as u64)?;
    }
    let discard = match listeners.get(1) {
        Some((l, _)) => Some(port_of(l)?),
        None => None,
    };
    println!(
        "{}",
        json!({"ready": true, "echo": port_of(&listeners[0].0)?, "discard": discard,
               "pid": std::process::id(), "fd_limit": limit})
    );
    io::stdout().flush()?;

    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    // Listeners taken out of epoll while the descriptor limit is reached.
    let mut paused = false;
    let (mut evbuf, mut evs) = (sys::event_buffer(), Vec::new());
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        ep.wait(&mut evbuf, Some(Duration::from_secs(1)), &mut evs)?;
        for &(tok, ev) in &evs {
            if tok < FIRST_CONN {
                let (l, kind) = &listeners[tok as usize];
                loop {
                    match l.accept() {
                        Ok((s, _)) => {
                            let _ = s.set_nonblocking(true);
                            let _ = s.set_nodelay(true);
                            let i = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            ep.add(s.as_raw_fd(), EV_IN | EV_RDHUP, i as u64 + FIRST_CONN)?;
                            conns[i] = Some(Conn {
                                stream: s,
                                kind: *kind,
                                unsent: Vec::new(),
                            });
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                            eprintln!(
                                "kserve-epoll: accept: {e}; pausing until a connection closes"
                            );
                            for (l, _) in &listeners {
                                ep.delete(l.as_raw_fd());
                            }
                            paused = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
                continue;
            }
            let i = (tok - FIRST_CONN) as usize;
            let Some(c) = conns.get_mut(i).and_then(|c| c.as_mut()) else {
                continue;
            };
            if !serve(&ep, c, ev, tok, &mut buf) {
                conns[i] = None;
                free.push(i);
                if paused {
                    for (j, (l, _)) in listeners.iter().enumerate() {
                        ep.add(l.as_raw_fd(), EV_IN, j as u64)?;
                    }
                    paused = false;
                }
            }
        }
    }
}

/// Handle readiness on one connection; false when it is finished.
fn serve(ep: &Epoll, c: &mut Conn, ev: u32, tok: u64, buf: &mut [u8]) -> bool {
    if ev & EV_ERR != 0 {
        return false;
    }
    if !c.unsent.is_empty() {
        match c.stream.write(&c.unsent) {
            Ok(n) => {
                c.unsent.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
        if !c.unsent.is_empty() {
            return true;
        }
        if ep
            .modify(c.stream.as_raw_fd(), EV_IN | EV_RDHUP, tok)
            .is_err()
        {
            return false;
        }
    }
    // Bounded work per wake-up: a few reads, then other connections' turn.
    for _ in 0..16 {
        let n = match c.stream.read(buf) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        };
        if c.kind == Kind::Discard {
            continue;
        }
        let data = &buf[..n];
        let wrote = match c.stream.write(data) {
            Ok(w) => w,
            Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
            Err(_) => return false,
        };
        if wrote < n {
            c.unsent.extend_from_slice(&data[wrote..]);
            return ep.modify(c.stream.as_raw_fd(), EV_OUT, tok).is_ok();
        }
    }
    true
}
