//! Ping-pong round trips between two processes, a diagnostic for the wait modes (compare
//! with `tools/wakebench.c`):
//!
//! ```sh
//! # ROUND_TRIPS sendrec round trips in one wait mode, µs per round trip
//! cargo run --release -p ustack-ipc --example block_pingpong -- [ROUND_TRIPS] [adaptive|spin|block|handoff]
//! taskset -c 0 target/release/examples/block_pingpong 200000   # both on one CPU
//! # RUNS paired runs of MS ms each: Block mode, then a pipe, alternating in one client
//! # process (so both see the same drift of the scheduler's placement); with --after-spin
//! # each is preceded by a Spin-mode run, as in `ustack ipc bench`
//! # (--handoff: Block mode with hand-off replies, see Endpoint::set_handoff)
//! target/release/examples/block_pingpong --paired RUNS [MS] [--after-spin] [--handoff]
//! ```
//!
//! Each line of `--paired` shows µs per round trip and the fraction of round trips in
//! which client and server ran on the same CPU; the summary shows the means.

use std::time::{Duration, Instant};
use ustack_ipc::{Domain, DomainConfig, Message, WaitMode, ANY};

const STOP: u16 = 99;
type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn cpu() -> u64 {
    // SAFETY: sched_getcpu has no arguments.
    unsafe { libc::sched_getcpu() as u64 }
}

fn reap(pid: libc::pid_t) {
    let mut st = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
}

/// Run an IPC ping-pong in `mode` for `n` round trips or `dur`, whichever comes first.
/// Returns (µs per round trip, fraction of round trips with both on one CPU). Without a
/// time limit (`dur == Duration::MAX`) nothing else runs per round trip (no clock reads,
/// no CPU tracking), so that the figure is the IPC's alone.
fn ustack(mode: WaitMode, handoff: bool, n: u64, dur: Duration) -> Res<(f64, f64)> {
    let track = dur != Duration::MAX;
    let name = format!("block-pp-{}", std::process::id());
    let dom = Domain::create(&name, DomainConfig::default())?;
    // SAFETY: the child only uses the IPC and `_exit`s; this process is single-threaded
    // apart from the IPC's own watchdog thread, which the child does not need.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        let code = (|| -> Result<(), ustack_ipc::Error> {
            let mut s = dom.bind_as(1, "server")?;
            s.set_wait_mode(mode);
            loop {
                let m = s.receive(ANY)?;
                let c = if track { cpu() } else { u64::MAX };
                s.send(m.source, &Message::new(1).with_u64(0, c))?;
                if m.mtype == STOP {
                    return Ok(());
                }
            }
        })()
        .map_or(1, |_| 0);
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let r = (|| -> Result<(f64, f64), ustack_ipc::Error> {
        let mut c = dom.bind_as(0, "client")?;
        c.set_wait_mode(mode);
        if handoff && !c.set_handoff(true) {
            eprintln!("hand-offs are not available here; Block mode uses its doorbells");
        }
        let srv = dom.endpoint_of_slot(1);
        let t0 = Instant::now();
        while let Err(e) = c.sendrec(srv, &Message::new(1)) {
            if t0.elapsed() > Duration::from_secs(5) {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let (mut k, mut same) = (0u64, 0u64);
        let t0 = Instant::now();
        while k < n && (!track || t0.elapsed() < dur) {
            let r = c.sendrec(srv, &Message::new(1))?;
            if track {
                same += u64::from(r.u64_at(0) == cpu());
            }
            k += 1;
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / k.max(1) as f64;
        c.sendrec(srv, &Message::new(STOP))?;
        Ok((us, same as f64 / k.max(1) as f64))
    })();
    reap(pid);
    dom.end()?;
    Ok(r?)
}

/// The same ping-pong over two pipes (64-byte messages) for `dur`.
fn pipe(dur: Duration) -> Res<(f64, f64)> {
    let (mut a, mut b) = ([0i32; 2], [0i32; 2]);
    // SAFETY: pipe writes two descriptors into each valid array.
    if unsafe { libc::pipe(a.as_mut_ptr()) != 0 || libc::pipe(b.as_mut_ptr()) != 0 } {
        return Err("pipe failed".into());
    }
    // SAFETY: the child only reads, writes and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    let mut buf = [0u8; 64];
    if pid == 0 {
        // SAFETY: plain descriptor calls on our own pipes and a valid buffer.
        unsafe {
            libc::close(a[1]);
            libc::close(b[0]);
            while libc::read(a[0], buf.as_mut_ptr() as *mut libc::c_void, 64) == 64 {
                buf[..8].copy_from_slice(&cpu().to_le_bytes());
                libc::write(b[1], buf.as_ptr() as *const libc::c_void, 64);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copies of the child's ends.
    unsafe {
        libc::close(a[0]);
        libc::close(b[1]);
    }
    let (mut k, mut same) = (0u64, 0u64);
    let t0 = Instant::now();
    while t0.elapsed() < dur {
        // SAFETY: 64-byte transfers on our own pipes from/to a valid 64-byte buffer.
        let ok = unsafe {
            libc::write(a[1], buf.as_ptr() as *const libc::c_void, 64) == 64
                && libc::read(b[0], buf.as_mut_ptr() as *mut libc::c_void, 64) == 64
        };
        if !ok {
            break;
        }
        let mut c = [0u8; 8];
        c.copy_from_slice(&buf[..8]);
        same += u64::from(u64::from_le_bytes(c) == cpu());
        k += 1;
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / k.max(1) as f64;
    // SAFETY: closing our ends ends the child's loop.
    unsafe {
        libc::close(a[1]);
        libc::close(b[0]);
    }
    reap(pid);
    Ok((us, same as f64 / k.max(1) as f64))
}

fn paired(runs: u32, ms: u64, after_spin: bool, handoff: bool) -> Res<()> {
    let dur = Duration::from_millis(ms);
    let (mut bs, mut ps, mut bc, mut pc) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..runs {
        if after_spin {
            ustack(WaitMode::Spin, false, u64::MAX, dur)?;
        }
        let (b, bsame) = ustack(WaitMode::Block, handoff, u64::MAX, dur)?;
        if after_spin {
            ustack(WaitMode::Spin, false, u64::MAX, dur)?;
        }
        let (p, psame) = pipe(dur)?;
        println!(
            "run {:2}: block {b:6.2} us (same cpu {bsame:.2})   pipe {p:6.2} us (same cpu {psame:.2})",
            i + 1
        );
        (bs, ps, bc, pc) = (bs + b, ps + p, bc + bsame, pc + psame);
    }
    let n = f64::from(runs.max(1));
    println!(
        "mean: block {:.2} us (same cpu {:.2}), pipe {:.2} us (same cpu {:.2}): block mode {:.2}x the pipe's round trips/s",
        bs / n,
        bc / n,
        ps / n,
        pc / n,
        ps / bs.max(f64::MIN_POSITIVE)
    );
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--paired") {
        let num = |i: usize, def: u64| -> Res<u64> {
            match args.get(i).filter(|a| !a.starts_with("--")) {
                Some(s) => Ok(s.parse().map_err(|_| format!("bad number {s:?}"))?),
                None => Ok(def),
            }
        };
        let runs = u32::try_from(num(1, 10)?).map_err(|_| "too many runs")?;
        let flag = |f: &str| args.iter().any(|a| a == f);
        return paired(runs, num(2, 150)?, flag("--after-spin"), flag("--handoff"));
    }
    let n: u64 = match args.first() {
        Some(s) => s
            .parse()
            .map_err(|_| format!("bad round-trip count {s:?}"))?,
        None => 100_000,
    };
    let (mode, handoff) = match args.get(1).map(String::as_str) {
        None | Some("block") => (WaitMode::Block, false),
        Some("handoff") => (WaitMode::Block, true),
        Some("adaptive") => (WaitMode::Adaptive, false),
        Some("spin") => (WaitMode::Spin, false),
        Some(other) => return Err(format!("unknown wait mode {other:?}").into()),
    };
    let (us, _) = ustack(mode, handoff, n, Duration::MAX)?;
    let hand = if handoff { ", hand-off" } else { "" };
    println!("{us:.2} us/rt ({} mode{hand})", mode.name());
    Ok(())
}
