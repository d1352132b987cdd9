//! Hunting lost wake-ups. The watchdog's safety net (waking any sleep that lasts a whole
//! 10 ms period) is turned off for this test binary, so a missed wake-up hangs its waiter
//! instead of costing it 10-20 ms and going unnoticed. Every blocking call here has no
//! timeout; a monitor that sees no progress for `HANG` prints the raw words of every slot,
//! ends the domain (which releases every blocked call) and fails the test.
//!
//! Each phase runs for `USTACK_IPC_HUNT_SECS` seconds (default 1.5); set it higher to hunt
//! for longer, e.g. `USTACK_IPC_HUNT_SECS=60 cargo test -p ustack-ipc --test lost_wakeup`.
//!
//! Phases: clients doing `sendrec`, blocking and timed-out sends and notifications against
//! one server that receives from ANY, with a random wait mode per call (and hand-off
//! replies on or off, see `Endpoint::set_handoff`) — as threads, as
//! processes (Block-mode doorbells are fetched across processes), with CPU hogs that preempt
//! them at random points, and all on one CPU; then send/receive pairs with a specific source
//! while a third endpoint showers both with notifications (spurious wake-ups).

mod common;
use common::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ustack_ipc::{debug, Domain, Error, Message, WaitMode, ANY};

const HANG: Duration = Duration::from_secs(3);
const KIND_REQ: u64 = 1;
const KIND_PLAIN: u64 = 2;
const KIND_DONE: u64 = 3;
const SERVER: i32 = 0;

fn phase_secs() -> Duration {
    let s = std::env::var("USTACK_IPC_HUNT_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.5);
    Duration::from_secs_f64(s)
}

struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A wait mode, mostly Block and Adaptive (the sleeping ones).
    fn mode(&mut self) -> WaitMode {
        match self.next() % 8 {
            0 => WaitMode::Spin,
            1..=4 => WaitMode::Block,
            _ => WaitMode::Adaptive,
        }
    }
}

fn msg(kind: u64, seq: u64) -> Message {
    Message::new(0).with_u64(0, kind).with_u64(1, seq)
}

/// Sum of every endpoint's message counters: grows while anything makes progress.
fn progress(d: &Domain) -> u64 {
    d.info()
        .endpoints
        .iter()
        .map(|e| e.sent + e.received + e.notify_received)
        .sum()
}

/// Wait until `done()`; if the counters stop moving for `HANG`, report the slots, end the
/// domain (releasing every blocked call) and return the report.
fn monitor(d: &Domain, name: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let mut last = progress(d);
    let mut since = Instant::now();
    while !done() {
        std::thread::sleep(Duration::from_millis(20));
        let p = progress(d);
        if p != last {
            last = p;
            since = Instant::now();
        } else if since.elapsed() > HANG {
            let mut r = format!("{name}: no progress for {HANG:?} — a lost wake-up?\n");
            for e in d.info().endpoints {
                r += &format!("  ep {} ({}): {}\n", e.endpoint, e.name, e.state);
            }
            for w in debug::slot_words(d) {
                r += &format!("  {w}\n");
            }
            eprintln!("{r}");
            let _ = d.end();
            return Err(r);
        }
    }
    Ok(())
}

/// The server: receives from ANY (blocking, no timeout), checks every client's sequence
/// numbers (nothing lost, nothing duplicated, a timed-out send never delivered), replies
/// to requests, until `clients` clients said they are done. Returns messages received.
fn serve(d: &Domain, clients: usize, seed: u64) -> Result<u64, String> {
    let mut e = d.bind_as(SERVER, "server").map_err(|x| x.to_string())?;
    let mut rng = Rng::new(seed);
    let mut next: HashMap<i32, u64> = HashMap::new();
    let (mut done, mut msgs) = (0, 0u64);
    while done < clients {
        e.set_wait_mode(rng.mode());
        let m = e.receive(ANY).map_err(|x| format!("server receive: {x}"))?;
        if m.is_notify() {
            continue;
        }
        let exp = next.entry(m.source).or_insert(0);
        if m.u64_at(1) != *exp {
            return Err(format!(
                "from {}: kind {} seq {} expected {}",
                m.source,
                m.u64_at(0),
                m.u64_at(1),
                exp
            ));
        }
        match m.u64_at(0) {
            KIND_REQ => {
                *exp += 1;
                msgs += 1;
                // The client is receiving our reply already: a blocking send must not block.
                e.send(m.source, &Message::new(0).with_u64(0, m.u64_at(1) * 3))
                    .map_err(|x| format!("reply: {x}"))?;
            }
            KIND_PLAIN => {
                *exp += 1;
                msgs += 1;
            }
            KIND_DONE => done += 1,
            k => return Err(format!("bad kind {k}")),
        }
    }
    Ok(msgs)
}

/// A client: random blocking operations against the server until `until`, then DONE.
fn client(d: &Domain, seed: u64, until: Instant) -> Result<(), String> {
    let mut e = d.bind("client").map_err(|x| x.to_string())?;
    let mut rng = Rng::new(seed);
    let mut seq = 0u64;
    while Instant::now() < until {
        if rng.next().is_multiple_of(4) {
            e.set_wait_mode(rng.mode());
            // Hand-off replies half the time (Block mode only; a no-op where the thread
            // cannot trap).
            e.set_handoff(rng.next().is_multiple_of(2));
        }
        match rng.next() % 10 {
            0..=4 => {
                let r = e
                    .sendrec(SERVER, &msg(KIND_REQ, seq))
                    .map_err(|x| format!("sendrec: {x}"))?;
                if r.u64_at(0) != seq * 3 || r.is_notify() || r.source != d.endpoint_of_slot(0) {
                    return Err(format!("bad reply {} to {seq}", r.u64_at(0)));
                }
                seq += 1;
            }
            5 | 6 => {
                e.send(SERVER, &msg(KIND_PLAIN, seq))
                    .map_err(|x| format!("send: {x}"))?;
                seq += 1;
            }
            7 => {
                let t = Duration::from_micros(1 + rng.next() % 200);
                match e.send_timeout(SERVER, &msg(KIND_PLAIN, seq), t) {
                    Ok(()) => seq += 1,
                    Err(Error::TimedOut) | Err(Error::WouldBlock) => {}
                    Err(x) => return Err(format!("send_timeout: {x}")),
                }
            }
            _ => e.notify(SERVER).map_err(|x| format!("notify: {x}"))?,
        }
    }
    e.send(SERVER, &msg(KIND_DONE, seq))
        .map_err(|x| format!("done: {x}"))
}

fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it; the call
    // only affects the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// CPU hogs that preempt everything else at random points, until `stop`.
fn hogs(n: usize, stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                }
            })
        })
        .collect()
}

/// One client/server phase: `threads` client threads in this process, `procs` child
/// processes with `per_proc` client threads each.
fn client_server(tag: &str, threads: usize, procs: usize, per_proc: usize, one_cpu: bool) {
    let d = domain(tag, 16);
    let until = Instant::now() + phase_secs();
    let clients = threads + procs * per_proc;
    let ds = d.0.clone();
    let server = std::thread::spawn(move || {
        if one_cpu {
            pin_to_cpu0();
        }
        serve(&ds, clients, 7)
    });
    assert!(wait_bound(&d, 1));
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let dc = d.0.clone();
            std::thread::spawn(move || {
                if one_cpu {
                    pin_to_cpu0();
                }
                client(&dc, 100 + i as u64, until)
            })
        })
        .collect();
    let kids: Vec<ChildGuard> = (0..procs)
        .map(|p| {
            let dc = d.0.clone();
            ChildGuard(fork_child(move || {
                let ts: Vec<_> = (0..per_proc)
                    .map(|t| {
                        let dc = dc.clone();
                        std::thread::spawn(move || {
                            if one_cpu {
                                pin_to_cpu0();
                            }
                            client(&dc, 1000 + (p * 16 + t) as u64, until)
                        })
                    })
                    .collect();
                let mut rc = 0;
                for t in ts {
                    if let Ok(Err(e)) | Err(e) = t.join().map_err(|_| "panic".to_string()) {
                        eprintln!("child client: {e}");
                        rc = 1;
                    }
                }
                rc
            }))
        })
        .collect();
    let verdict = monitor(&d, tag, || server.is_finished());
    let served = server.join().expect("server panicked");
    for w in workers {
        let r = w.join().expect("client panicked");
        if verdict.is_ok() {
            r.unwrap_or_else(|e| panic!("{tag}: client: {e}"));
        }
    }
    for k in kids {
        let rc = wait_child(k.0, Duration::from_secs(10));
        std::mem::forget(k);
        if verdict.is_ok() {
            assert_eq!(rc, 0, "{tag}: a child client failed");
        }
    }
    if let Err(r) = verdict {
        panic!("{r}");
    }
    let n = served.unwrap_or_else(|e| panic!("{tag}: server: {e}"));
    assert!(n > 100, "{tag}: only {n} messages");
    eprintln!("{tag}: {n} messages");
}

#[test]
fn no_lost_wakeups_without_the_safety_net() {
    debug::set_safety_net(false);
    client_server("lw-threads", 3, 0, 0, false);
    client_server("lw-procs", 1, 2, 2, false);
    let stop = Arc::new(AtomicBool::new(false));
    let h = hogs(2, &stop);
    client_server("lw-hogs", 2, 1, 2, false);
    stop.store(true, Ordering::Relaxed);
    for t in h {
        t.join().expect("hog");
    }
    client_server("lw-1cpu", 1, 1, 2, true);
    pairs_with_notifications();
    assert_eq!(debug::safety_net_wakes(), 0);
}

/// Two send/receive ping-pong pairs (receive from a specific source, plain `send`, whose
/// completion wakes the sender), while a fifth endpoint notifies all four at random: each
/// notification is a wake-up that finds nothing to take.
fn pairs_with_notifications() {
    let d = domain("lw-pairs", 8);
    let until = Instant::now() + phase_secs();
    let mut hs = vec![];
    for pair in 0..2i32 {
        let (a, b) = (1 + 2 * pair, 2 + 2 * pair);
        for (me, other, first) in [(a, b, true), (b, a, false)] {
            let dc = d.0.clone();
            hs.push(std::thread::spawn(move || -> Result<u64, String> {
                let mut e = dc.bind_as(me, "pair").map_err(|x| x.to_string())?;
                let mut rng = Rng::new(me as u64 * 77);
                let peer = dc.endpoint_of_slot(other as u32);
                let t0 = Instant::now();
                while dc.info().endpoints.iter().all(|x| x.slot != other as u32) {
                    if t0.elapsed() > HANG {
                        return Err("peer never bound".into());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut x = 0u64;
                loop {
                    e.set_wait_mode(rng.mode());
                    if first {
                        let stop = Instant::now() >= until;
                        e.send(peer, &msg(u64::from(stop), x))
                            .map_err(|y| format!("send: {y}"))?;
                        let m = e.receive(peer).map_err(|y| format!("receive: {y}"))?;
                        if m.u64_at(1) != x + 1 {
                            return Err(format!("got {} after {x}", m.u64_at(1)));
                        }
                        x += 2;
                        if stop {
                            return Ok(x);
                        }
                    } else {
                        let m = e.receive(peer).map_err(|y| format!("receive: {y}"))?;
                        if m.u64_at(1) != x {
                            return Err(format!("got {} expected {x}", m.u64_at(1)));
                        }
                        e.send(peer, &msg(0, x + 1))
                            .map_err(|y| format!("send: {y}"))?;
                        x += 2;
                        if m.u64_at(0) == 1 {
                            return Ok(x);
                        }
                    }
                }
            }));
        }
    }
    let dc = d.0.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let notifier = std::thread::spawn(move || {
        let Ok(mut e) = dc.bind_as(5, "notifier") else {
            return;
        };
        let mut rng = Rng::new(5);
        while !st.load(Ordering::Relaxed) {
            let _ = e.notify(dc.endpoint_of_slot(1 + (rng.next() % 4) as u32));
            if rng.next().is_multiple_of(8) {
                std::thread::yield_now();
            }
        }
    });
    let verdict = monitor(&d, "lw-pairs", || hs.iter().all(|h| h.is_finished()));
    stop.store(true, Ordering::Relaxed);
    notifier.join().expect("notifier");
    let results: Vec<_> = hs.into_iter().map(|h| h.join().expect("pair")).collect();
    if let Err(r) = verdict {
        panic!("{r}");
    }
    for r in results {
        let n = r.unwrap_or_else(|e| panic!("lw-pairs: {e}"));
        assert!(n > 100, "lw-pairs: only {n} round trips");
    }
}
