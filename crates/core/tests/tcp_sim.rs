//! Deterministic simulation: two connections over a seeded impaired link
//! (loss, reordering, duplication, corruption, delay) with random
//! application behaviour. Every byte must arrive exactly once and in order,
//! both ends must finish in CLOSED/TIME-WAIT, in bounded virtual time.

#![allow(clippy::field_reassign_with_default)]

mod tcp_common;

use tcp_common::*;
use ustack_core::tcp::{State, TcpConfig, TcpError};
use ustack_core::time::{Duration, Instant};

/// Seeds that failed once; replayed forever.
const REGRESSIONS: &[u64] = &[];

struct App {
    stream: u64,
    to_send: usize,
    sent: usize,
    received: Vec<u8>,
    expect: usize,
    eof: bool,
    shut: bool,
    closed: bool,
    read_chunk: usize,
    write_chunk: usize,
}

impl App {
    fn new(stream: u64, to_send: usize, expect: usize, rng: &mut Rng) -> App {
        App {
            stream,
            to_send,
            sent: 0,
            received: Vec::with_capacity(expect),
            expect,
            eof: false,
            shut: false,
            closed: false,
            read_chunk: 1 + rng.below(20_000) as usize,
            write_chunk: 1 + rng.below(30_000) as usize,
        }
    }

    /// One application step on `end`; returns whether it did anything.
    fn act(&mut self, end: &mut End, rng: &mut Rng, peer_stream: u64) -> Result<(), String> {
        let Some(c) = end.conn.as_mut() else {
            return Ok(());
        };
        if self.closed {
            return Ok(());
        }
        // Write.
        if self.sent < self.to_send && !self.shut {
            let n = (1 + rng.below(self.write_chunk as u64) as usize).min(self.to_send - self.sent);
            let chunk: Vec<u8> = (self.sent..self.sent + n)
                .map(|i| pattern(self.stream, i))
                .collect();
            match c.send(&chunk) {
                Ok(k) => self.sent += k,
                Err(TcpError::WouldBlock) => {}
                Err(e) => return Err(format!("send error {e:?} in {:?}", c.state())),
            }
        }
        if self.sent == self.to_send && !self.shut && c.state() != State::SynSent {
            c.shutdown();
            self.shut = true;
        }
        // Read.
        if !self.eof && rng.chance(0.8) {
            let mut buf = vec![0u8; 1 + rng.below(self.read_chunk as u64) as usize];
            match c.recv(&mut buf) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    for (k, b) in buf[..n].iter().enumerate() {
                        let i = self.received.len() + k;
                        if *b != pattern(peer_stream, i) {
                            return Err(format!("byte {i} corrupted"));
                        }
                    }
                    self.received.extend_from_slice(&buf[..n]);
                    if self.received.len() > self.expect {
                        return Err("more bytes than sent".into());
                    }
                }
                Err(TcpError::WouldBlock) => {}
                Err(e) => return Err(format!("recv error {e:?} in {:?}", c.state())),
            }
        }
        if self.eof && self.shut {
            c.close();
            self.closed = true;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct Case {
    max_loss: f64,
    max_bytes: usize,
    small_buffers: bool,
}

/// Runs one seed; returns how many corrupted segments the receivers rejected.
fn run_seed(seed: u64, case: Case) -> Result<u64, String> {
    let mut rng = Rng::new(seed);
    let mut cfg = TcpConfig::default();
    cfg.timestamps = rng.chance(0.7);
    cfg.sack = rng.chance(0.7);
    cfg.window_scale = rng.chance(0.7);
    cfg.nodelay = rng.chance(0.5);
    cfg.mss = [536, 1000, 1460][rng.below(3) as usize];
    if case.small_buffers {
        cfg.rcv_buf = 2048 + rng.below(30_000) as usize;
        cfg.snd_buf = 2048 + rng.below(30_000) as usize;
    } else {
        cfg.rcv_buf = 16_384 + rng.below(300_000) as usize;
        cfg.snd_buf = 16_384 + rng.below(300_000) as usize;
    }
    let mut cfg_b = cfg.clone();
    cfg_b.timestamps = if rng.chance(0.8) {
        cfg.timestamps
    } else {
        !cfg.timestamps
    };
    cfg_b.sack = if rng.chance(0.8) { cfg.sack } else { !cfg.sack };
    cfg_b.window_scale = if rng.chance(0.8) {
        cfg.window_scale
    } else {
        !cfg.window_scale
    };
    cfg_b.rcv_buf = if case.small_buffers {
        2048 + rng.below(30_000) as usize
    } else {
        cfg.rcv_buf
    };

    let a = End::client(cfg, rng.next_u64() as u32, Instant::ZERO);
    let b = End::server(cfg_b, rng.next_u64() as u32);
    let mut net = Net::new(a, b, rng.next_u64());
    let imp = |rng: &mut Rng| Impair {
        loss: rng.below(1000) as f64 / 1000.0 * case.max_loss,
        dup: rng.below(50) as f64 / 1000.0,
        corrupt: rng.below(30) as f64 / 1000.0,
        delay: Duration::from_micros(100 + rng.below(50_000)),
        jitter: Duration::from_micros(rng.below(20_000)),
        ..Impair::default()
    };
    net.ab.imp = imp(&mut rng);
    net.ba.imp = imp(&mut rng);

    let a_bytes = rng.below(case.max_bytes as u64 + 1) as usize;
    let b_bytes = if rng.chance(0.5) {
        rng.below(case.max_bytes as u64 / 2 + 1) as usize
    } else {
        0
    };
    let mut app_a = App::new(1, a_bytes, b_bytes, &mut rng);
    let mut app_b = App::new(2, b_bytes, a_bytes, &mut rng);
    let mut next_app = Instant::ZERO;
    let deadline = Instant::from_secs(3000);
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > 3_000_000 {
            return Err("too many steps".into());
        }
        net.step();
        if net.now >= next_app {
            app_a.act(&mut net.a, &mut rng, 2)?;
            app_b.act(&mut net.b, &mut rng, 1)?;
            next_app = net.now + Duration::from_micros(rng.below(20_000));
            net.step();
        }
        let done = |s: State| matches!(s, State::Closed | State::TimeWait);
        if app_a.closed && app_b.closed && done(net.a.state()) && done(net.b.state()) {
            break;
        }
        let app_pending = !(app_a.closed && app_b.closed);
        if !net.advance(if app_pending { Some(next_app) } else { None }) {
            return Err(format!(
                "stuck: a={:?} b={:?} at {:?}",
                net.a.state(),
                net.b.state(),
                net.now
            ));
        }
        if net.now > deadline {
            return Err(format!(
                "virtual time exceeded: a={:?} b={:?} sent {}/{} {}/{} recv {} {}",
                net.a.state(),
                net.b.state(),
                app_a.sent,
                a_bytes,
                app_b.sent,
                b_bytes,
                app_a.received.len(),
                app_b.received.len()
            ));
        }
    }
    if app_b.received.len() != a_bytes || app_a.received.len() != b_bytes {
        return Err(format!(
            "short: a->b {}/{} b->a {}/{}",
            app_b.received.len(),
            a_bytes,
            app_a.received.len(),
            b_bytes
        ));
    }
    for c in [&net.a.ctr, &net.b.ctr] {
        if c.CurrEstab != 0 {
            return Err(format!("CurrEstab {} at the end", c.CurrEstab));
        }
    }
    // Every corrupted segment must have been rejected (a single flipped bit
    // always breaks the Internet checksum) and counted.
    if net.a.ctr.InErrs + net.b.ctr.InErrs != net.ab.csum_drops + net.ba.csum_drops {
        return Err("receive errors not counted".into());
    }
    Ok(net.ab.csum_drops + net.ba.csum_drops)
}

fn run_many(first: u64, count: u64, case: Case) {
    let mut failed = Vec::new();
    for seed in REGRESSIONS.iter().copied().chain(first..first + count) {
        if let Err(e) = run_seed(seed, case) {
            failed.push((seed, e));
        }
    }
    assert!(
        failed.is_empty(),
        "failing seeds (add to REGRESSIONS): {failed:?}"
    );
}

#[test]
fn sim_clean_link() {
    run_many(
        0,
        300,
        Case {
            max_loss: 0.0,
            max_bytes: 200_000,
            small_buffers: false,
        },
    );
}

#[test]
fn sim_lossy_link() {
    run_many(
        10_000,
        600,
        Case {
            max_loss: 0.2,
            max_bytes: 60_000,
            small_buffers: false,
        },
    );
}

#[test]
fn sim_small_buffers() {
    run_many(
        20_000,
        600,
        Case {
            max_loss: 0.1,
            max_bytes: 40_000,
            small_buffers: true,
        },
    );
}

#[test]
fn sim_tiny_transfers() {
    run_many(
        30_000,
        800,
        Case {
            max_loss: 0.2,
            max_bytes: 3_000,
            small_buffers: false,
        },
    );
}
