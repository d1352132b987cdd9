//! The load generators of `ustack bench --scale`: the hidden subcommand
//! `ustack scale-client MODE`, run by the harness inside a client namespace
//! (or inside `ustack run`), several processes at once where one process's
//! 20,000 descriptors are not enough. Each is one thread with one epoll
//! loop over non-blocking kernel sockets and prints JSON lines on stdout:
//!
//! * `probe`: connect until a server answers (readiness, not a sleep);
//! * `ping`: N concurrent pingers on ICMP datagram sockets, like ping(8);
//! * `conns`: N concurrent clients that connect, send B bytes, close;
//! * `hold`: open N connections (W at a time, 1 = one after another), hold
//!   them idle until stdin closes, count the ones the server drops.
//!
//! Every loop is bounded by a count and a time limit; failures (refused,
//! reset, timed out, no port) are counted and reported, never waited on.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::json;

use super::sys::{self, Epoll, EV_ERR, EV_IN, EV_OUT, EV_RDHUP};

#[derive(Subcommand, Debug)]
pub enum Mode {
    /// Connect to TARGET until it accepts (at most --timeout-ms).
    Probe {
        #[arg(long)]
        target: SocketAddrV4,
        #[arg(long, default_value_t = 20_000)]
        timeout_ms: u64,
    },
    /// Concurrent ICMP echo conversations.
    Ping(PingArgs),
    /// Concurrent connect / send / close loops.
    Conns(ConnsArgs),
    /// Open connections and hold them until stdin closes.
    Hold(HoldArgs),
}

#[derive(Args, Debug)]
pub struct PingArgs {
    #[arg(long)]
    pub target: Ipv4Addr,
    #[arg(long, default_value_t = 1)]
    pub pingers: usize,
    /// Pause between a reply (or a timeout) and the next request.
    #[arg(long, default_value_t = 200)]
    pub interval_ms: u64,
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// A request without reply for this long is lost.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
}

#[derive(Args, Debug)]
pub struct ConnsArgs {
    #[arg(long)]
    pub target: SocketAddrV4,
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// Bytes each connection sends before closing.
    #[arg(long, default_value_t = 4096)]
    pub bytes: usize,
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Source addresses, used in turn (default: the routing table's choice).
    #[arg(long, value_delimiter = ',')]
    pub sources: Vec<Ipv4Addr>,
    /// A conversation not finished after this long is abandoned (a timeout).
    #[arg(long, default_value_t = 5000)]
    pub timeout_ms: u64,
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    #[arg(long)]
    pub target: SocketAddrV4,
    /// Connections to open.
    #[arg(long)]
    pub count: usize,
    /// Source addresses, used in turn (default: the routing table's choice).
    #[arg(long, value_delimiter = ',')]
    pub sources: Vec<Ipv4Addr>,
    /// Connects in flight at once (1: one after another).
    #[arg(long, default_value_t = 32)]
    pub window: usize,
    /// Print progress every this many opened connections.
    #[arg(long, default_value_t = 100)]
    pub report_every: usize,
    #[arg(long, default_value_t = 5000)]
    pub connect_timeout_ms: u64,
    /// Stop opening after this many failures.
    #[arg(long, default_value_t = 1000)]
    pub max_failures: usize,
    /// Stop opening after this long.
    #[arg(long, default_value_t = 600)]
    pub max_seconds: u64,
    /// Release on our own after holding this long.
    #[arg(long, default_value_t = 1800)]
    pub max_hold_seconds: u64,
}

pub fn run(mode: Mode) -> Result<i32> {
    match mode {
        Mode::Probe { target, timeout_ms } => probe(target, Duration::from_millis(timeout_ms)),
        Mode::Ping(a) => ping(&a),
        Mode::Conns(a) => conns(&a),
        Mode::Hold(a) => hold(&a),
    }
}

fn emit(v: serde_json::Value) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Failures by kind: "refused", "reset", "timeout", "no_port", "unreachable", "other".
#[derive(Default, Debug, Serialize)]
#[serde(transparent)]
pub struct Errors(BTreeMap<&'static str, u64>);

impl Errors {
    fn add(&mut self, e: &io::Error) {
        let k = match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => "refused",
            Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => "reset",
            Some(libc::ETIMEDOUT) => "timeout",
            Some(libc::EADDRNOTAVAIL | libc::EADDRINUSE) => "no_port",
            Some(libc::ENETUNREACH | libc::EHOSTUNREACH) => "unreachable",
            Some(libc::EMFILE | libc::ENFILE) => "no_fd",
            _ if e.kind() == ErrorKind::TimedOut => "timeout",
            _ if e.kind() == ErrorKind::UnexpectedEof => "closed",
            _ => "other",
        };
        self.bump(k);
    }

    fn bump(&mut self, k: &'static str) {
        *self.0.entry(k).or_default() += 1;
    }

    fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

fn source(sources: &[Ipv4Addr], i: usize) -> Option<Ipv4Addr> {
    (!sources.is_empty()).then(|| sources[i % sources.len()])
}

// ------------------------------------------------------------------ probe

fn probe(target: SocketAddrV4, timeout: Duration) -> Result<i32> {
    let t0 = Instant::now();
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        match TcpStream::connect_timeout(&target.into(), Duration::from_secs(1)) {
            Ok(_) => {
                emit(
                    json!({"ok": true, "attempts": attempts, "ms": t0.elapsed().as_millis() as u64}),
                );
                return Ok(0);
            }
            Err(e) if t0.elapsed() >= timeout => {
                bail!("nothing accepts connections on {target} after {timeout:?} ({attempts} attempts; last: {e})")
            }
            // Until the server's interface is up the connect fails at once.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

// ------------------------------------------------------------------ ping

/// What the pinger's timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PingTimer {
    Send,
    /// The request with this sequence number gets no more time.
    Expire(u16),
}

struct Pinger {
    sock: UdpSocket,
    seq: u16,
    /// When the request `seq` went out, while it waits for its reply.
    waiting: Option<Instant>,
    /// The first exchange (ARP, caches) is not measured.
    warm: bool,
}

/// ICMP echo request: type 8, code 0, checksum and identifier filled in by
/// the kernel for datagram ICMP sockets, then the sequence number and 56
/// bytes of data as ping(8) sends by default.
fn echo_request(seq: u16) -> [u8; 64] {
    let mut p = [0u8; 64];
    p[0] = 8;
    p[6..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in p[8..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

/// The sequence number of an echo reply (type 0) as a datagram ICMP socket
/// returns it (ICMP header first, no IP header).
fn echo_reply_seq(p: &[u8]) -> Option<u16> {
    match p {
        [0, 0, _, _, _, _, a, b, ..] => Some(u16::from_be_bytes([*a, *b])),
        _ => None,
    }
}

/// Pingers start spread evenly over one interval (as pingers started one
/// after another would be), then each sends a request, waits for its reply
/// (or --timeout-ms), waits --interval-ms and repeats, for --seconds.
/// Prints {"pingers","sent","received","lost","errors","rtt_ns":[...]}.
fn ping(a: &PingArgs) -> Result<i32> {
    if a.pingers == 0 || a.pingers > 18_000 {
        bail!("--pingers must be 1..=18000 (one socket each)");
    }
    sys::raise_nofile().context("cannot raise the descriptor limit")?;
    let ep = Epoll::new()?;
    let mut pingers = Vec::with_capacity(a.pingers);
    for i in 0..a.pingers {
        let sock = sys::icmp_socket().map_err(|e| {
            if e.raw_os_error() == Some(libc::EACCES) {
                anyhow::anyhow!("ICMP datagram sockets are not allowed here: add this group to net.ipv4.ping_group_range ({e})")
            } else {
                anyhow::Error::new(e).context("cannot open an ICMP datagram socket")
            }
        })?;
        ep.add(sock.as_raw_fd(), EV_IN, i as u64)?;
        pingers.push(Pinger {
            sock,
            seq: 0,
            waiting: None,
            warm: false,
        });
    }
    let target = SocketAddrV4::new(a.target, 0);
    let interval = Duration::from_millis(a.interval_ms);
    let timeout = Duration::from_millis(a.timeout_ms.max(1));
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(a.seconds.clamp(0.1, 3600.0));
    let mut timers: BinaryHeap<Reverse<(Instant, usize, PingTimer)>> = (0..a.pingers)
        .map(|i| {
            Reverse((
                t0 + interval * i as u32 / a.pingers as u32,
                i,
                PingTimer::Send,
            ))
        })
        .collect();
    let (mut sent, mut received, mut lost, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let mut rtts: Vec<u64> = Vec::new();
    let (mut evbuf, mut evs) = (sys::event_buffer(), Vec::new());
    let mut buf = [0u8; 2048];
    while let Some(Reverse((next, _, _))) = timers.peek().copied() {
        let wait = next.saturating_duration_since(Instant::now());
        ep.wait(
            &mut evbuf,
            Some(wait.min(Duration::from_millis(100))),
            &mut evs,
        )?;
        for &(tok, _) in &evs {
            let i = tok as usize;
            let Some(p) = pingers.get_mut(i) else {
                continue;
            };
            loop {
                let n = match p.sock.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        errors += 1;
                        break;
                    }
                };
                let now = Instant::now();
                let Some(sent_at) = p.waiting else { continue };
                if echo_reply_seq(&buf[..n]) != Some(p.seq) {
                    continue;
                }
                p.waiting = None;
                if p.warm {
                    received += 1;
                    rtts.push(u64::try_from((now - sent_at).as_nanos()).unwrap_or(u64::MAX));
                }
                p.warm = true;
                if now + interval < end {
                    timers.push(Reverse((now + interval, i, PingTimer::Send)));
                }
            }
        }
        let now = Instant::now();
        while let Some(Reverse((t, i, what))) = timers.peek().copied() {
            if t > now {
                break;
            }
            timers.pop();
            let p = &mut pingers[i];
            match what {
                PingTimer::Send => {
                    p.seq = p.seq.wrapping_add(1);
                    // Before the call: over veth the whole round trip can
                    // happen inside sendto.
                    let at = Instant::now();
                    match p.sock.send_to(&echo_request(p.seq), target) {
                        Ok(_) => {
                            p.waiting = Some(at);
                            if p.warm {
                                sent += 1;
                            }
                            timers.push(Reverse((at + timeout, i, PingTimer::Expire(p.seq))));
                        }
                        Err(_) => {
                            errors += 1;
                            if now + interval < end {
                                timers.push(Reverse((now + interval, i, PingTimer::Send)));
                            }
                        }
                    }
                }
                PingTimer::Expire(seq) => {
                    if p.seq == seq && p.waiting.is_some() {
                        p.waiting = None;
                        if p.warm {
                            lost += 1;
                        }
                        // A lost warm-up exchange still ends the warm-up.
                        p.warm = true;
                        if now + interval < end {
                            timers.push(Reverse((now + interval, i, PingTimer::Send)));
                        }
                    }
                }
            }
        }
    }
    emit(json!({
        "pingers": a.pingers, "sent": sent, "received": received, "lost": lost,
        "errors": errors, "seconds": t0.elapsed().as_secs_f64(), "rtt_ns": rtts,
    }));
    Ok(0)
}

// ------------------------------------------------------------------ conns

enum Phase {
    Connecting,
    Sending(usize),
    /// Sent everything and our FIN; waiting for the server's close.
    Closing,
}

struct Conversation {
    stream: TcpStream,
    phase: Phase,
    started: Instant,
}

/// Each of --clients slots repeatedly connects, sends --bytes, shuts down
/// its side and waits for the server to close (so the bytes were taken),
/// for --seconds. Prints {"clients","completed","bytes","seconds","errors"}.
fn conns(a: &ConnsArgs) -> Result<i32> {
    if a.clients == 0 || a.clients > 18_000 {
        bail!("--clients must be 1..=18000 (one socket each)");
    }
    sys::raise_nofile().context("cannot raise the descriptor limit")?;
    let ep = Epoll::new()?;
    let payload = vec![0x5au8; a.bytes];
    let timeout = Duration::from_millis(a.timeout_ms.max(1));
    let mut slots: Vec<Option<Conversation>> = (0..a.clients).map(|_| None).collect();
    let mut errors = Errors::default();
    let (mut completed, mut started_n) = (0u64, 0usize);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(a.seconds.clamp(0.1, 3600.0));

    // Start (or restart) slot `i`; failures to start count and leave it empty
    // until the next sweep.
    let start = |i: usize, n: &mut usize, errors: &mut Errors| -> Option<Conversation> {
        let src = source(&a.sources, *n);
        *n += 1;
        let stream = match sys::connect_nonblocking(src, a.target) {
            Ok(s) => s,
            Err(e) => {
                errors.add(&e);
                return None;
            }
        };
        if let Err(e) = ep.add(stream.as_raw_fd(), EV_OUT, i as u64) {
            errors.add(&e);
            return None;
        }
        Some(Conversation {
            stream,
            phase: Phase::Connecting,
            started: Instant::now(),
        })
    };
    for (i, s) in slots.iter_mut().enumerate() {
        *s = start(i, &mut started_n, &mut errors);
    }
    let (mut evbuf, mut evs) = (sys::event_buffer(), Vec::new());
    let mut sink = [0u8; 4096];
    let mut last_sweep = Instant::now();
    while Instant::now() < end {
        ep.wait(&mut evbuf, Some(Duration::from_millis(50)), &mut evs)?;
        for &(tok, ev) in &evs {
            let i = tok as usize;
            let Some(c) = slots.get_mut(i).and_then(|s| s.as_mut()) else {
                continue;
            };
            // Ok(true): finished; Ok(false): in progress; Err: failed.
            let step = (|| -> io::Result<bool> {
                if let Phase::Connecting = c.phase {
                    if let Some(e) = c.stream.take_error()? {
                        return Err(e);
                    }
                    if ev & EV_ERR != 0 {
                        return Err(io::Error::from_raw_os_error(libc::ECONNRESET));
                    }
                    c.phase = Phase::Sending(0);
                }
                if let Phase::Sending(done) = c.phase {
                    let mut done = done;
                    while done < payload.len() {
                        match c.stream.write(&payload[done..]) {
                            Ok(n) => done += n,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e),
                        }
                    }
                    if done < payload.len() {
                        c.phase = Phase::Sending(done);
                        return Ok(false);
                    }
                    c.stream.shutdown(Shutdown::Write)?;
                    c.phase = Phase::Closing;
                    ep.modify(c.stream.as_raw_fd(), EV_IN | EV_RDHUP, tok)?;
                    return Ok(false);
                }
                loop {
                    match c.stream.read(&mut sink) {
                        Ok(0) => return Ok(true),
                        Ok(_) => {}
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                        Err(e) => return Err(e),
                    }
                }
            })();
            let restart = match step {
                Ok(false) => false,
                Ok(true) => {
                    completed += 1;
                    true
                }
                Err(e) => {
                    errors.add(&e);
                    true
                }
            };
            if restart {
                // Dropping the conversation closes the socket (and leaves epoll).
                slots[i] = None;
                if Instant::now() < end {
                    slots[i] = start(i, &mut started_n, &mut errors);
                }
            }
        }
        // Abandon conversations past their time; refill slots that could
        // not start. Every 100 ms, so a scan of all slots stays cheap.
        let now = Instant::now();
        if now.duration_since(last_sweep) >= Duration::from_millis(100) && now < end {
            last_sweep = now;
            for (i, slot) in slots.iter_mut().enumerate() {
                if slot.as_ref().is_some_and(|c| now - c.started > timeout) {
                    errors.bump("timeout");
                    *slot = None;
                }
                if slot.is_none() {
                    *slot = start(i, &mut started_n, &mut errors);
                }
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    emit(json!({
        "clients": a.clients, "completed": completed,
        "bytes": completed * a.bytes as u64, "seconds": seconds,
        "failed": errors.total(), "errors": errors,
    }));
    Ok(0)
}

// ------------------------------------------------------------------ hold

const STDIN_TOKEN: u64 = u64::MAX;

struct Held {
    stream: TcpStream,
    /// Some(deadline) while connecting.
    connecting: Option<Instant>,
}

/// Read what stdin has; Ok(false) at EOF.
fn stdin_open(buf: &mut [u8]) -> bool {
    !matches!(io::stdin().read(buf), Ok(0) | Err(_))
}

/// Prints {"ready":true}, waits for "go" on stdin, opens --count
/// connections (--window at a time) reporting {"opened","failed","t_ns"}
/// (CLOCK_MONOTONIC) every
/// --report-every, then {"done":true,...}; holds them until stdin closes
/// (or --max-hold-seconds) and prints {"released":true,"alive","dropped"}.
fn hold(a: &HoldArgs) -> Result<i32> {
    let limit = sys::raise_nofile().context("cannot raise the descriptor limit")?;
    if a.count as u64 + 64 > limit {
        bail!(
            "--count {} needs more descriptors than this process may have ({limit}): use more processes",
            a.count
        );
    }
    let ep = Epoll::new()?;
    emit(json!({"ready": true, "pid": std::process::id()}));
    let mut line = String::new();
    if io::stdin().read_line(&mut line)? == 0 || line.trim() != "go" {
        return Ok(0);
    }
    ep.add(0, EV_IN | EV_RDHUP, STDIN_TOKEN)?;

    let window = a.window.max(1);
    let connect_timeout = Duration::from_millis(a.connect_timeout_ms.max(1));
    let mut conns: Vec<Option<Held>> = Vec::with_capacity(a.count);
    let mut pending: VecDeque<usize> = VecDeque::new();
    let mut errors = Errors::default();
    let (mut opened, mut dropped) = (0usize, 0usize);
    let mut released = false;
    let mut gave_up: Option<String> = None;
    let t0 = Instant::now();
    let open_limit = Duration::from_secs(a.max_seconds);
    let (mut evbuf, mut evs) = (sys::event_buffer(), Vec::new());
    let mut buf = [0u8; 512];

    // Opening phase.
    while !released && (conns.len() < a.count || !pending.is_empty()) {
        if gave_up.is_none() {
            if errors.total() as usize >= a.max_failures {
                gave_up = Some(format!("{} failures", errors.total()));
            } else if t0.elapsed() >= open_limit {
                gave_up = Some(format!("not done after {open_limit:?}"));
            }
            if gave_up.is_some() {
                for i in pending.drain(..) {
                    conns[i] = None;
                }
                break;
            }
        }
        while pending.len() < window && conns.len() < a.count {
            let i = conns.len();
            match sys::connect_nonblocking(source(&a.sources, i), a.target)
                .and_then(|s| ep.add(s.as_raw_fd(), EV_OUT, i as u64).map(|_| s))
            {
                Ok(stream) => {
                    conns.push(Some(Held {
                        stream,
                        connecting: Some(Instant::now() + connect_timeout),
                    }));
                    pending.push_back(i);
                }
                Err(e) => {
                    errors.add(&e);
                    conns.push(None);
                }
            }
        }
        let wait = pending
            .front()
            .and_then(|&i| conns[i].as_ref()?.connecting)
            .map_or(Duration::from_millis(100), |d| {
                d.saturating_duration_since(Instant::now())
            });
        ep.wait(
            &mut evbuf,
            Some(wait.min(Duration::from_millis(100))),
            &mut evs,
        )?;
        for &(tok, ev) in &evs {
            if tok == STDIN_TOKEN {
                released |= !stdin_open(&mut buf);
                continue;
            }
            let i = tok as usize;
            let Some(h) = conns.get_mut(i).and_then(|c| c.as_mut()) else {
                continue;
            };
            if h.connecting.is_some() {
                let err = match h.stream.take_error() {
                    Ok(None) if ev & EV_ERR == 0 => None,
                    Ok(None) => Some(io::Error::from_raw_os_error(libc::ECONNRESET)),
                    Ok(Some(e)) | Err(e) => Some(e),
                };
                if let Some(e) = err {
                    errors.add(&e);
                    conns[i] = None;
                } else {
                    h.connecting = None;
                    ep.modify(h.stream.as_raw_fd(), EV_IN | EV_RDHUP, tok)?;
                    opened += 1;
                    if opened % a.report_every.max(1) == 0 {
                        emit(json!({"opened": opened, "failed": errors.total(),
                                    "t_ns": sys::monotonic_ns()}));
                    }
                }
            } else if peer_gone(&mut h.stream, ev, &mut buf) {
                dropped += 1;
                conns[i] = None;
            }
        }
        // Connects past their deadline fail; `pending` is in deadline order.
        let now = Instant::now();
        while let Some(&i) = pending.front() {
            match conns[i].as_ref().and_then(|h| h.connecting) {
                None => {
                    pending.pop_front();
                }
                Some(d) if d <= now => {
                    errors.bump("timeout");
                    conns[i] = None;
                    pending.pop_front();
                }
                Some(_) => break,
            }
        }
    }
    let open_seconds = t0.elapsed().as_secs_f64();
    emit(json!({
        "done": true, "opened": opened, "failed": errors.total(), "errors": errors,
        "seconds": open_seconds, "gave_up": gave_up, "t_ns": sys::monotonic_ns(),
    }));

    // Holding phase: idle connections; only the server closing one wakes us.
    let hold_end = Instant::now() + Duration::from_secs(a.max_hold_seconds);
    while !released && Instant::now() < hold_end {
        ep.wait(&mut evbuf, Some(Duration::from_millis(500)), &mut evs)?;
        for &(tok, ev) in &evs {
            if tok == STDIN_TOKEN {
                released |= !stdin_open(&mut buf);
                continue;
            }
            let i = tok as usize;
            if let Some(h) = conns.get_mut(i).and_then(|c| c.as_mut()) {
                if peer_gone(&mut h.stream, ev, &mut buf) {
                    dropped += 1;
                    conns[i] = None;
                }
            }
        }
    }
    emit(json!({
        "released": true, "alive": opened - dropped, "dropped": dropped,
        "held_seconds": t0.elapsed().as_secs_f64() - open_seconds,
    }));
    Ok(0)
}

/// Whether an established, idle connection was closed or reset by the
/// server (data it sends, if any, is read and ignored).
fn peer_gone(s: &mut TcpStream, ev: u32, buf: &mut [u8]) -> bool {
    if ev & EV_ERR != 0 {
        return true;
    }
    loop {
        match s.read(buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_packets() {
        let p = echo_request(0x1234);
        assert_eq!(p[0], 8);
        assert_eq!(&p[6..8], &[0x12, 0x34]);
        let mut r = p;
        r[0] = 0;
        assert_eq!(echo_reply_seq(&r), Some(0x1234));
        assert_eq!(echo_reply_seq(&p), None, "a request is not a reply");
        assert_eq!(echo_reply_seq(&[0, 0, 0]), None);
    }

    #[test]
    fn errors_are_classified() {
        let mut e = Errors::default();
        e.add(&io::Error::from_raw_os_error(libc::ECONNREFUSED));
        e.add(&io::Error::from_raw_os_error(libc::ECONNRESET));
        e.add(&io::Error::from_raw_os_error(libc::EADDRNOTAVAIL));
        e.bump("timeout");
        assert_eq!(e.total(), 4);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"refused": 1, "reset": 1, "no_port": 1, "timeout": 1})
        );
    }
}
