//! Block-mode sendrec round trips between two processes, printing µs per round trip.
//! A diagnostic for the `Block` wait mode (compare with `tools/wakebench.c`):
//!
//! ```sh
//! cargo run --release -p ustack-ipc --example block_pingpong -- [ROUND_TRIPS] [adaptive|spin|block]
//! taskset -c 0 target/release/examples/block_pingpong 200000   # both on one CPU
//! ```

use std::time::{Duration, Instant};
use ustack_ipc::{Domain, DomainConfig, Message, WaitMode, ANY};

const STOP: u16 = 99;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = match args.next() {
        Some(s) => s
            .parse()
            .map_err(|_| format!("bad round-trip count {s:?}"))?,
        None => 100_000,
    };
    let mode = match args.next().as_deref() {
        None | Some("block") => WaitMode::Block,
        Some("adaptive") => WaitMode::Adaptive,
        Some("spin") => WaitMode::Spin,
        Some(other) => return Err(format!("unknown wait mode {other:?}").into()),
    };
    let name = format!("block-pp-{}", std::process::id());
    let dom = Domain::create(&name, DomainConfig::default())?;
    // SAFETY: the child only uses the IPC and `_exit`s; the parent is single-threaded here.
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
                s.send(m.source, &m)?;
                if m.mtype == STOP {
                    return Ok(());
                }
            }
        })()
        .map_or(1, |_| 0);
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let r = (|| -> Result<f64, ustack_ipc::Error> {
        let mut c = dom.bind_as(0, "client")?;
        c.set_wait_mode(mode);
        let srv = dom.endpoint_of_slot(1);
        let t0 = Instant::now();
        while let Err(e) = c.sendrec(srv, &Message::new(1)) {
            if t0.elapsed() > Duration::from_secs(5) {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        for _ in 0..n {
            c.sendrec(srv, &Message::new(1))?;
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
        c.sendrec(srv, &Message::new(STOP))?;
        Ok(us)
    })();
    let mut st = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    dom.end()?;
    println!("{:.2} us/rt ({} mode)", r?, mode.name());
    Ok(())
}
