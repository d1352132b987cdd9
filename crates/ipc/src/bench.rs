//! `ustack ipc bench`: the M3-IPC paper's micro-benchmarks (IPC1 send+receive, IPC2
//! sendrec, IPC3 notify, COPY1/COPY2 bandwidth) for ustack's IPC in each wait mode and, on
//! the same message and block sizes, for Linux pipes, FIFOs, Unix stream and seqpacket
//! sockets, TCP over loopback and POSIX message queues, plus in-process `memcpy` and the
//! aggregate throughput of 1..N concurrent client/server pairs.
//!
//! Helper processes are made with `fork()` (the children only run the benchmark loop and
//! `_exit`), so the benchmark runs the same from the `ustack` binary and from tests.

use crate::{ArenaBuf, Domain, DomainConfig, Endpoint, Error, Message, WaitMode, ANY};
use serde::Serialize;
use std::io::Write;
use std::time::{Duration, Instant};

/// One result row (also the JSON object printed by `--json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// IPC1, IPC2, IPC3, COPY1, COPY2, AGGREGATE.
    pub benchmark: String,
    /// ustack, pipe, fifo, unix-stream, unix-seqpacket, tcp-loopback, mqueue, memcpy.
    pub mechanism: String,
    /// Wait mode for ustack (adaptive/spin/block), "-" otherwise.
    pub mode: String,
    /// Message or block size in bytes.
    pub size: u64,
    /// Concurrent client/server pairs.
    pub pairs: u32,
    /// The measurement.
    pub value: f64,
    /// Unit of `value`: "round trips/s", "msgs/s" or "MB/s" (10^6 bytes per second).
    pub unit: String,
}

/// Benchmark options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Very short runs (for tests): a few ms per measurement and fewer sizes.
    pub quick: bool,
    /// Largest number of concurrent pairs for the aggregate benchmark.
    pub max_pairs: u32,
    /// Show progress on stderr (only if it is a terminal).
    pub progress: bool,
    /// Only run the benchmarks whose name starts with this (e.g. "IPC", "IPC2", "COPY",
    /// "AGG"), case-insensitive; `None` runs all.
    pub only: Option<String>,
}

impl Options {
    fn wants(&self, bench: &str) -> bool {
        match &self.only {
            None => true,
            Some(p) => bench
                .to_ascii_uppercase()
                .starts_with(&p.to_ascii_uppercase()),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            quick: false,
            max_pairs: 4,
            progress: true,
            only: None,
        }
    }
}

const MSG: usize = 64;
const MT_STOP: u16 = 0xFFFF;
const MT_ADDR: u16 = 0xFFFE;
const MODES: [UMode; 3] = [
    UMode(WaitMode::Adaptive, false),
    UMode(WaitMode::Spin, false),
    UMode(WaitMode::Block, false),
];
/// Block mode with hand-off replies (`Endpoint::set_handoff`): only `sendrec` (IPC2) waits
/// for replies, so only IPC2 measures it.
const HANDOFF: UMode = UMode(WaitMode::Block, true);

/// How a ustack endpoint waits: its wait mode, and whether `sendrec` replies are handed
/// off (Block mode only).
#[derive(Clone, Copy, Debug, PartialEq)]
struct UMode(WaitMode, bool);

impl UMode {
    fn name(self) -> &'static str {
        if self.1 {
            "block+handoff"
        } else {
            self.0.name()
        }
    }
}
const LINUX: [&str; 6] = [
    "pipe",
    "fifo",
    "unix-stream",
    "unix-seqpacket",
    "tcp-loopback",
    "mqueue",
];

fn fork_run(f: impl FnOnce() -> i32) -> anyhow::Result<libc::pid_t> {
    // SAFETY: the child runs only `f` (benchmark loops on pre-created resources) and then
    // `_exit`s; it never returns into the caller.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        anyhow::bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        let rc = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: leave the child without running the parent's atexit handlers.
        unsafe { libc::_exit(rc) };
    }
    Ok(pid)
}

fn reap(pid: libc::pid_t, limit: Duration) -> i32 {
    let t0 = Instant::now();
    loop {
        let mut st = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        if r == pid || r < 0 {
            return if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                -1
            };
        }
        if t0.elapsed() > limit {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut st, 0);
            }
            return -1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Where the client and the server of a ping-pong run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// Wherever the scheduler puts them (no affinity set).
    Free,
    /// Client pinned to the first CPU, server to the second (`sched_setaffinity`), as in
    /// the M3-IPC paper's dual-core figures.
    Split(usize, usize),
    /// Both pinned to the same CPU: every round trip is two context switches, which shows
    /// what each mechanism's sleep/wake-up itself costs.
    Shared(usize),
}

impl Place {
    /// `mode` column of a row measured with this placement.
    fn label(self, mode: &str) -> String {
        match (self, mode) {
            (Place::Free, m) => m.to_string(),
            (Place::Split(..), "-") => "pinned".to_string(),
            (Place::Split(..), m) => format!("{m},pinned"),
            (Place::Shared(..), "-") => "1cpu".to_string(),
            (Place::Shared(..), m) => format!("{m},1cpu"),
        }
    }

    /// Pin the calling (child) process to the server's CPU.
    fn pin_server(self) {
        if let Place::Split(_, s) | Place::Shared(s) = self {
            pin_to(s);
        }
    }

    /// Pin the calling (parent) process to the client's CPU until the guard drops.
    fn pin_client(self) -> Option<AffinityGuard> {
        match self {
            Place::Free => None,
            Place::Split(c, _) | Place::Shared(c) => {
                let g = AffinityGuard::save()?;
                pin_to(c);
                Some(g)
            }
        }
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer of the size passed.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return vec![];
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Restrict the calling thread to one CPU.
fn pin_to(cpu: usize) -> bool {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` comes from `allowed_cpus`, below CPU_SETSIZE; the set is valid.
    unsafe {
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Restores the calling thread's CPU affinity when dropped.
struct AffinityGuard(libc::cpu_set_t);

impl AffinityGuard {
    fn save() -> Option<AffinityGuard> {
        // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity fills it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer of the size passed.
        let r =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        (r == 0).then_some(AffinityGuard(set))
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // SAFETY: restoring a mask previously returned by sched_getaffinity.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
    }
}

/// Rounds of the ping-pong measurements of a placement. Pinned: the best of 3, which
/// filters out noise from other load on the machine. Unpinned: the median of 7, because
/// there the figure is decided by where the scheduler puts the pair, which is bimodal
/// (sharing a CPU: ~5 µs per round trip here; apart: ~20-50 µs) and drifts over seconds, so
/// the best of a few rounds mostly tells which mechanism was lucky.
fn rounds(opts: &Options, place: Place) -> usize {
    match (opts.quick, place) {
        (true, _) => 1,
        (false, Place::Free) => 7,
        (false, _) => 3,
    }
}

/// The order in which round `round` visits `n` jobs: as listed in round 0, then a
/// deterministic shuffle per round (Fisher-Yates with a xorshift seeded by the round).
fn round_order(n: usize, round: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    if round == 0 {
        return v;
    }
    let mut x = (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Combine the rounds of one mechanism as `rounds` describes.
fn combine_rounds(place: Place, mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    match place {
        Place::Free => {
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        }
        _ => v[v.len() - 1],
    }
}

/// The ping-pong measurements of one placement: (benchmark, mechanism, ustack wait mode).
fn ipc_jobs(opts: &Options) -> Vec<(&'static str, &'static str, Option<UMode>)> {
    let mut jobs = vec![];
    for bench in ["IPC1", "IPC2"].into_iter().filter(|b| opts.wants(b)) {
        jobs.extend(MODES.map(|m| (bench, "ustack", Some(m))));
        if bench == "IPC2" {
            jobs.push((bench, "ustack", Some(HANDOFF)));
        }
        jobs.extend(LINUX.map(|l| (bench, l, None)));
    }
    if opts.wants("IPC3") {
        jobs.extend(MODES.map(|m| ("IPC3", "ustack", Some(m))));
    }
    jobs
}

/// Repeat a measurement and keep the best value (filters out scheduler noise from other
/// load on the machine; applied to every mechanism alike).
fn best(cx: &Ctx, mut f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<f64> {
    let n = if cx.opts.quick { 1 } else { 3 };
    let mut v: f64 = 0.0;
    for _ in 0..n {
        v = v.max(f()?);
    }
    Ok(v)
}

struct Ctx {
    dom: Domain,
    opts: Options,
    dur: Duration,
    /// Placement of the two processes of the ping-pong benchmarks being run.
    place: Place,
    rows: Vec<Row>,
    step: usize,
    steps: usize,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        let _ = self.dom.end();
    }
}

impl Ctx {
    fn progress(&mut self, what: &str) {
        self.step += 1;
        // SAFETY: isatty only inspects the descriptor.
        if self.opts.progress && unsafe { libc::isatty(2) } == 1 {
            eprint!("\r\x1b[K[{:>3}/{}] {what}", self.step, self.steps);
            let _ = std::io::stderr().flush();
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        benchmark: &str,
        mechanism: &str,
        mode: &str,
        size: u64,
        pairs: u32,
        value: f64,
        unit: &str,
    ) {
        self.rows.push(Row {
            benchmark: benchmark.into(),
            mechanism: mechanism.into(),
            mode: mode.into(),
            size,
            pairs,
            value,
            unit: unit.into(),
        });
    }
}

/// Run all benchmarks and return the rows.
pub fn run(opts: &Options) -> anyhow::Result<Vec<Row>> {
    let name = format!("bench-{}", std::process::id());
    let dom = Domain::create(
        &name,
        DomainConfig {
            max_endpoints: 64,
            max_copy: 64 << 20,
            arena_size: 64 << 20,
        },
    )
    .map_err(|e| anyhow::anyhow!("create domain {name}: {e}"))?;
    let sizes = copy_sizes(opts.quick);
    let steps = placements()
        .into_iter()
        .map(|p| rounds(opts, p))
        .sum::<usize>()
        * ipc_jobs(opts).len()
        + sizes.len() * COPY_MECHS.len()
        + 2 * opts.max_pairs as usize;
    let mut cx = Ctx {
        dom,
        opts: opts.clone(),
        dur: if opts.quick {
            Duration::from_millis(15)
        } else {
            Duration::from_millis(150)
        },
        place: Place::Free,
        rows: Vec::new(),
        step: 0,
        steps,
    };
    for place in placements() {
        cx.place = place;
        let tag = match place {
            Place::Free => "unpinned".to_string(),
            Place::Split(c, s) => format!("cpus {c}/{s}"),
            Place::Shared(c) => format!("both on cpu {c}"),
        };
        // Every mechanism once per round, for `rounds` rounds: where the scheduler puts an
        // unpinned pair drifts slowly (and changes a round trip from ~5 to ~40 µs here), so
        // interleaving exposes every mechanism to the same drift. The order is shuffled
        // every round (the first round keeps the listed order), so that no mechanism
        // always runs right after the same one: a Spin-mode run, for one, leaves both CPUs
        // with a high recent load, which changes where the scheduler places the next pair.
        let jobs = ipc_jobs(opts);
        let mut got = vec![Vec::new(); jobs.len()];
        for round in 0..rounds(opts, place) {
            for i in round_order(jobs.len(), round) {
                let (bench, mech, mode) = jobs[i];
                cx.progress(&format!(
                    "{bench} {mech}{} ({tag}, round {})",
                    mode.map(|m| format!(" {}", m.name())).unwrap_or_default(),
                    round + 1
                ));
                let v = match mode {
                    Some(mode) => ustack_pingpong(&cx, bench, mode)?,
                    None => linux_pingpong(&cx, mech)?,
                };
                got[i].push(v);
            }
        }
        for (&(bench, mech, mode), v) in jobs.iter().zip(got) {
            let v = combine_rounds(place, v);
            let m = place.label(mode.map_or("-", |m| m.name()));
            let size = if bench == "IPC3" { 0 } else { MSG as u64 };
            cx.push(bench, mech, &m, size, 1, v, "round trips/s");
        }
    }
    cx.place = Place::Free;
    for &size in sizes.iter().filter(|_| opts.wants("COPY")) {
        for (bench, mech) in COPY_MECHS {
            cx.progress(&format!("{bench} {mech} {}", fmt_size(size as u64)));
            let v = best(&cx, || copy_bench(&cx, bench, mech, size))?;
            cx.push(bench, mech, "-", size as u64, 1, v, "MB/s");
        }
    }
    for mode in [WaitMode::Adaptive, WaitMode::Spin]
        .into_iter()
        .filter(|_| opts.wants("AGGREGATE"))
    {
        for pairs in 1..=opts.max_pairs {
            cx.progress(&format!("AGGREGATE {pairs} pairs {}", mode.name()));
            let v = best(&cx, || aggregate(&cx, pairs, mode))?;
            cx.push(
                "AGGREGATE",
                "ustack",
                mode.name(),
                MSG as u64,
                pairs,
                v,
                "msgs/s",
            );
        }
    }
    // SAFETY: isatty only inspects the descriptor.
    if opts.progress && unsafe { libc::isatty(2) } == 1 {
        eprintln!("\r\x1b[Kdone");
    }
    Ok(std::mem::take(&mut cx.rows))
}

/// Copy benchmarks: (benchmark, mechanism). "ustack-arena" copies between buffers of the
/// domain arena (a memcpy); "ustack" between ordinary private buffers (process_vm_*).
const COPY_MECHS: [(&str, &str); 7] = [
    ("COPY1", "memcpy"),
    ("COPY1", "ustack-arena"),
    ("COPY1", "ustack"),
    ("COPY2", "ustack-arena"),
    ("COPY2", "ustack"),
    ("COPY1", "pipe"),
    ("COPY1", "unix-stream"),
];

/// Pinned to two different CPUs first (if there are two), then both on one CPU, then
/// unpinned.
fn placements() -> Vec<Place> {
    match allowed_cpus()[..] {
        [a, b, ..] => vec![Place::Split(a, b), Place::Shared(a), Place::Free],
        _ => vec![Place::Free],
    }
}

fn copy_sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![4 << 10, 1 << 20]
    } else {
        vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]
    }
}

/// Copies per COPY measurement: 128 MiB in total (8 MiB with `quick`), at least 8.
fn copy_iters(quick: bool, size: usize) -> u64 {
    let total: u64 = if quick { 8 << 20 } else { 128 << 20 };
    (total / size.max(1) as u64).max(8)
}

fn fmt_size(s: u64) -> String {
    if s >= 1 << 20 {
        format!("{}M", s >> 20)
    } else if s >= 1 << 10 {
        format!("{}K", s >> 10)
    } else {
        format!("{s}")
    }
}

// ---------------------------------------------------------------- ustack ping-pong

/// Bind with retries (a slot freed by a just-exited child may still be in use briefly).
fn bind_slot(dom: &Domain, slot: i32, name: &str) -> Result<Endpoint, Error> {
    for _ in 0..2000 {
        match dom.bind_as(slot, name) {
            Err(Error::EndpointInUse) => {
                dom.reclaim_dead();
                std::thread::sleep(Duration::from_millis(1));
            }
            r => return r,
        }
    }
    Err(Error::EndpointInUse)
}

fn ustack_server(dom: &Domain, slot: i32, bench: &str, mode: WaitMode) -> i32 {
    let Ok(mut e) = bind_slot(dom, slot, "bench-server") else {
        return 2;
    };
    e.set_wait_mode(mode);
    let m = Message::new(1);
    loop {
        let Ok(r) = e.receive(ANY) else { return 3 };
        if r.mtype == MT_STOP {
            let _ = e.send(r.source, &m);
            return 0;
        }
        let res = if bench == "IPC3" && r.is_notify() {
            e.notify(r.source)
        } else {
            e.send(r.source, &m)
        };
        if res.is_err() {
            return 4;
        }
    }
}

fn ustack_pingpong(cx: &Ctx, bench: &str, mode: UMode) -> anyhow::Result<f64> {
    let dom = cx.dom.clone();
    let b = bench.to_string();
    let place = cx.place;
    let child = fork_run(move || {
        place.pin_server();
        ustack_server(&dom, 1, &b, mode.0)
    })?;
    let _pinned = place.pin_client();
    let r = (|| -> anyhow::Result<f64> {
        let mut c = bind_slot(&cx.dom, 0, "bench-client")?;
        c.set_wait_mode(mode.0);
        // Set either way, whatever USTACK_IPC_HANDOFF says. Where the client thread may
        // not trap, it waits on its doorbells (the row then measures plain Block mode,
        // and we say so once).
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let can = c.set_handoff(mode.1);
        if mode.1 && !can && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "note: hand-offs are not available here (Linux >= 6.6 and CAP_SYS_ADMIN or \
                 no_new_privs needed): the block+handoff rows measure plain Block mode"
            );
        }
        let srv = cx.dom.endpoint_of_slot(1);
        let m = Message::new(1);
        let one = |c: &mut Endpoint| -> Result<(), Error> {
            match bench {
                "IPC1" => {
                    c.send(srv, &m)?;
                    c.receive(srv).map(|_| ())
                }
                "IPC2" => c.sendrec(srv, &m).map(|_| ()),
                _ => {
                    c.notify(srv)?;
                    c.receive(srv).map(|_| ())
                }
            }
        };
        // Wait for the server to bind, then warm up.
        let t0 = Instant::now();
        loop {
            match c.sendrec(srv, &Message::new(2)) {
                Ok(_) => break,
                Err(Error::BadEndpoint) if t0.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => return Err(e.into()),
            }
        }
        let v = timed(cx.dur, || one(&mut c))?;
        c.sendrec(srv, &Message::new(MT_STOP))?;
        Ok(v)
    })();
    reap(child, Duration::from_secs(5));
    r
}

/// Run `f` repeatedly for about `dur`; operations per second.
fn timed<E>(dur: Duration, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let t0 = Instant::now();
    let mut n: u64 = 0;
    loop {
        for _ in 0..64 {
            f()?;
        }
        n += 64;
        let el = t0.elapsed();
        if el >= dur {
            return Ok(n as f64 / el.as_secs_f64());
        }
    }
}

/// Run `f` once untimed (warm-up: page faults, caches), then exactly `iters` times;
/// operations per second.
fn counted<E>(iters: u64, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    f()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(iters as f64 / t0.elapsed().as_secs_f64().max(1e-9))
}

/// A buffer whose pages are all faulted in (written), so no measurement pays first-touch
/// page faults (`vec![0; n]` would map untouched zero pages).
fn touched(size: usize, fill: u8) -> Vec<u8> {
    vec![fill.max(1); size]
}

// ---------------------------------------------------------------- Linux ping-pong

fn cvt(r: libc::c_int) -> std::io::Result<libc::c_int> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Run `op(offset)` (a read or write of the rest of a `len`-byte buffer) until all `len`
/// bytes are done, retrying on EINTR.
fn io_full(len: usize, mut op: impl FnMut(usize) -> isize) -> std::io::Result<()> {
    let mut off = 0;
    while off < len {
        let n = op(off);
        if n <= 0 {
            let e = std::io::Error::last_os_error();
            if n < 0 && e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(if n == 0 {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "short transfer")
            } else {
                e
            });
        }
        off += n as usize;
    }
    Ok(())
}

fn read_full(fd: libc::c_int, buf: &mut [u8]) -> std::io::Result<()> {
    let len = buf.len();
    io_full(len, |off| {
        // SAFETY: reading into the unfilled tail of a valid buffer.
        unsafe { libc::read(fd, buf[off..].as_mut_ptr() as *mut libc::c_void, len - off) }
    })
}

fn write_full(fd: libc::c_int, buf: &[u8]) -> std::io::Result<()> {
    io_full(buf.len(), |off| {
        // SAFETY: writing from the unsent tail of a valid buffer.
        unsafe {
            libc::write(
                fd,
                buf[off..].as_ptr() as *const libc::c_void,
                buf.len() - off,
            )
        }
    })
}

fn close(fd: libc::c_int) {
    // SAFETY: closing a descriptor we own.
    unsafe { libc::close(fd) };
}

/// A bidirectional byte channel: (client read, client write, server read, server write).
struct Chan {
    cr: libc::c_int,
    cw: libc::c_int,
    sr: libc::c_int,
    sw: libc::c_int,
    cleanup: Vec<std::path::PathBuf>,
}

impl Chan {
    fn close_all(&self) {
        let mut fds = vec![self.cr, self.cw, self.sr, self.sw];
        fds.sort();
        fds.dedup();
        for fd in fds {
            close(fd);
        }
        for p in &self.cleanup {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn pipe_pair() -> std::io::Result<(libc::c_int, libc::c_int)> {
    let mut p = [0; 2];
    // SAFETY: valid out-array of two ints.
    cvt(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((p[0], p[1]))
}

fn socketpair(ty: libc::c_int) -> std::io::Result<(libc::c_int, libc::c_int)> {
    let mut p = [0; 2];
    // SAFETY: valid out-array of two ints.
    cvt(unsafe { libc::socketpair(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0, p.as_mut_ptr()) })?;
    Ok((p[0], p[1]))
}

fn make_chan(mech: &str) -> anyhow::Result<Chan> {
    Ok(match mech {
        "pipe" => {
            let (a_r, a_w) = pipe_pair()?; // client -> server
            let (b_r, b_w) = pipe_pair()?; // server -> client
            Chan {
                cr: b_r,
                cw: a_w,
                sr: a_r,
                sw: b_w,
                cleanup: vec![],
            }
        }
        "fifo" => {
            let base =
                std::env::temp_dir().join(format!("ustack-ipc-bench-{}", std::process::id()));
            let (p1, p2) = (base.with_extension("c2s"), base.with_extension("s2c"));
            let mut fds = vec![];
            for p in [&p1, &p2] {
                let _ = std::fs::remove_file(p);
                let c = std::ffi::CString::new(p.to_string_lossy().as_bytes())?;
                // SAFETY: valid NUL-terminated path.
                cvt(unsafe { libc::mkfifo(c.as_ptr(), 0o600) })?;
                // Open read-write so neither open blocks waiting for the other side.
                // SAFETY: valid NUL-terminated path.
                fds.push(cvt(unsafe {
                    libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC)
                })?);
            }
            Chan {
                cr: fds[1],
                cw: fds[0],
                sr: fds[0],
                sw: fds[1],
                cleanup: vec![p1, p2],
            }
        }
        "unix-stream" | "unix-seqpacket" => {
            let ty = if mech == "unix-stream" {
                libc::SOCK_STREAM
            } else {
                libc::SOCK_SEQPACKET
            };
            let (a, b) = socketpair(ty)?;
            Chan {
                cr: a,
                cw: a,
                sr: b,
                sw: b,
                cleanup: vec![],
            }
        }
        "tcp-loopback" => {
            use std::os::fd::IntoRawFd;
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            let c = std::net::TcpStream::connect(l.local_addr()?)?;
            let (s, _) = l.accept()?;
            c.set_nodelay(true)?;
            s.set_nodelay(true)?;
            let (c, s) = (c.into_raw_fd(), s.into_raw_fd());
            Chan {
                cr: c,
                cw: c,
                sr: s,
                sw: s,
                cleanup: vec![],
            }
        }
        other => anyhow::bail!("unknown mechanism {other}"),
    })
}

fn linux_pingpong(cx: &Ctx, mech: &str) -> anyhow::Result<f64> {
    if mech == "mqueue" {
        return mqueue_pingpong(cx);
    }
    let ch = make_chan(mech)?;
    let (sr, sw) = (ch.sr, ch.sw);
    let place = cx.place;
    let child = fork_run(move || {
        place.pin_server();
        let mut b = [0u8; MSG];
        loop {
            if read_full(sr, &mut b).is_err() {
                return 2;
            }
            if write_full(sw, &b).is_err() {
                return 3;
            }
            if b[0] == 0xFF {
                return 0;
            }
        }
    })?;
    let _pinned = place.pin_client();
    let mut b = [0u8; MSG];
    let r = timed(cx.dur, || {
        write_full(ch.cw, &b)?;
        read_full(ch.cr, &mut b)
    });
    b[0] = 0xFF;
    let _ = write_full(ch.cw, &b).and_then(|_| read_full(ch.cr, &mut b));
    reap(child, Duration::from_secs(5));
    ch.close_all();
    Ok(r?)
}

fn mqueue_pingpong(cx: &Ctx) -> anyhow::Result<f64> {
    let names: Vec<std::ffi::CString> = ["c2s", "s2c"]
        .iter()
        .map(|d| std::ffi::CString::new(format!("/ustack-ipc-bench-{}-{d}", std::process::id())))
        .collect::<Result<_, _>>()?;
    let mut qs = vec![];
    for n in &names {
        // SAFETY: an all-zero mq_attr is valid; the fields we need are set below.
        let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
        attr.mq_maxmsg = 1;
        attr.mq_msgsize = MSG as libc::c_long;
        // SAFETY: valid name and attribute pointer.
        let q = unsafe {
            libc::mq_unlink(n.as_ptr());
            libc::mq_open(
                n.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                0o600,
                &attr as *const libc::mq_attr,
            )
        };
        if q < 0 {
            anyhow::bail!("mq_open: {}", std::io::Error::last_os_error());
        }
        qs.push(q);
    }
    let (c2s, s2c) = (qs[0], qs[1]);
    let place = cx.place;
    let child = fork_run(move || {
        place.pin_server();
        let mut b = [0u8; MSG];
        loop {
            // SAFETY: valid queue descriptors and buffers of the queue's message size.
            unsafe {
                if libc::mq_receive(
                    c2s,
                    b.as_mut_ptr() as *mut libc::c_char,
                    MSG,
                    std::ptr::null_mut(),
                ) < 0
                {
                    return 2;
                }
                if libc::mq_send(s2c, b.as_ptr() as *const libc::c_char, MSG, 0) < 0 {
                    return 3;
                }
            }
            if b[0] == 0xFF {
                return 0;
            }
        }
    })?;
    let _pinned = place.pin_client();
    let mut b = [0u8; MSG];
    let rt = |b: &mut [u8; MSG]| -> std::io::Result<()> {
        // SAFETY: valid queue descriptors and buffers of the queue's message size.
        unsafe {
            if libc::mq_send(c2s, b.as_ptr() as *const libc::c_char, MSG, 0) < 0
                || libc::mq_receive(
                    s2c,
                    b.as_mut_ptr() as *mut libc::c_char,
                    MSG,
                    std::ptr::null_mut(),
                ) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    let r = timed(cx.dur, || rt(&mut b));
    b[0] = 0xFF;
    let _ = rt(&mut b);
    reap(child, Duration::from_secs(5));
    for (q, n) in qs.iter().zip(&names) {
        // SAFETY: closing/unlinking our own queues.
        unsafe {
            libc::mq_close(*q);
            libc::mq_unlink(n.as_ptr());
        }
    }
    Ok(r?)
}

// ---------------------------------------------------------------- copies

/// A buffer of `size` bytes, completely written: private memory or a domain arena buffer.
enum BenchBuf {
    Private(Vec<u8>),
    Arena(ArenaBuf),
}

impl BenchBuf {
    fn new(dom: &Domain, arena: bool, size: usize, fill: u8) -> Result<BenchBuf, Error> {
        if arena {
            let mut b = dom.alloc(size)?;
            b.fill(0, size, fill)?;
            Ok(BenchBuf::Arena(b))
        } else {
            Ok(BenchBuf::Private(touched(size, fill)))
        }
    }
    fn addr(&self) -> usize {
        match self {
            BenchBuf::Private(v) => v.as_ptr() as usize,
            BenchBuf::Arena(b) => b.addr(),
        }
    }
}

/// A child that allocates a buffer, sends its address to `to`, then serves until STOP.
fn buffer_holder(dom: &Domain, slot: i32, size: usize, to: i32, arena: bool) -> i32 {
    let Ok(mut e) = bind_slot(dom, slot, "bench-buffer") else {
        return 2;
    };
    let Ok(buf) = BenchBuf::new(dom, arena, size, 1) else {
        return 5;
    };
    let m = Message::new(MT_ADDR).with_u64(0, buf.addr() as u64);
    let t0 = Instant::now();
    loop {
        match e.send(to, &m) {
            Ok(()) => break,
            Err(Error::BadEndpoint) if t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(_) => return 3,
        }
    }
    e.set_wait_mode(WaitMode::Block);
    loop {
        match e.receive(ANY) {
            Ok(r) if r.mtype == MT_STOP => {
                let _ = e.send(r.source, &m);
                return 0;
            }
            Ok(_) => {}
            Err(_) => return 4,
        }
    }
}

/// Copy bandwidth. Every mechanism copies between two distinct, pre-faulted buffers of
/// `size` bytes, the same (`copy_iters`) number of times after one untimed warm-up copy;
/// the buffers are reused, so they are equally cache-warm for all mechanisms.
fn copy_bench(cx: &Ctx, bench: &str, mech: &str, size: usize) -> anyhow::Result<f64> {
    let iters = copy_iters(cx.opts.quick, size);
    let mbps = |ops: f64| ops * size as f64 / 1e6;
    match mech {
        "memcpy" => {
            let src = touched(size, 3);
            let mut dst = touched(size, 2);
            let v = counted(iters, || -> Result<(), ()> {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&mut dst);
                Ok(())
            })
            .unwrap_or(0.0);
            Ok(mbps(v))
        }
        "ustack" | "ustack-arena" => {
            let arena = mech == "ustack-arena";
            let mut me = bind_slot(&cx.dom, 0, "bench-copier")?;
            let n = if bench == "COPY1" { 1 } else { 2 };
            let mut kids = vec![];
            for k in 0..n {
                let dom = cx.dom.clone();
                let to = me.id();
                kids.push(fork_run(move || {
                    buffer_holder(&dom, 1 + k, size, to, arena)
                })?);
            }
            let r = (|| -> anyhow::Result<f64> {
                let mut addr = [0usize; 2];
                for _ in 0..n {
                    let m = me.receive_timeout(ANY, Duration::from_secs(5))?;
                    let slot = (m.source as u32 & 0xffff) as usize;
                    if let Some(a) = addr.get_mut(slot.wrapping_sub(1)) {
                        *a = m.u64_at(0) as usize;
                    }
                }
                let (e1, e2) = (cx.dom.endpoint_of_slot(1), cx.dom.endpoint_of_slot(2));
                let local = BenchBuf::new(&cx.dom, arena, size, 5)?;
                let v = if n == 1 {
                    // COPY1: we are the source.
                    counted(iters, || me.vcopy(me.id(), local.addr(), e1, addr[0], size))?
                } else {
                    // COPY2: we ask for a copy between two other processes.
                    counted(iters, || me.vcopy(e1, addr[0], e2, addr[1], size))?
                };
                Ok(mbps(v))
            })();
            for k in 0..n {
                let _ = me.sendrec_timeout(
                    cx.dom.endpoint_of_slot(1 + k as u32),
                    &Message::new(MT_STOP),
                    Duration::from_secs(2),
                );
            }
            for k in kids {
                reap(k, Duration::from_secs(5));
            }
            r
        }
        _ => {
            // Send a block through the channel, the reader acknowledges with one byte.
            let ch = make_chan(mech)?;
            let (sr, sw) = (ch.sr, ch.sw);
            let child = fork_run(move || {
                let mut buf = touched(size, 2);
                loop {
                    if read_full(sr, &mut buf).is_err() {
                        return 2;
                    }
                    if write_full(sw, &buf[..1]).is_err() {
                        return 3;
                    }
                    if buf[0] == 0xFF {
                        return 0;
                    }
                }
            })?;
            let mut buf = touched(size, 1);
            let mut ack = [0u8; 1];
            let r = counted(iters, || {
                write_full(ch.cw, &buf)?;
                read_full(ch.cr, &mut ack)
            });
            buf[0] = 0xFF;
            let _ = write_full(ch.cw, &buf).and_then(|_| read_full(ch.cr, &mut ack));
            reap(child, Duration::from_secs(5));
            ch.close_all();
            Ok(mbps(r?))
        }
    }
}

// ---------------------------------------------------------------- aggregate

fn aggregate(cx: &Ctx, pairs: u32, mode: WaitMode) -> anyhow::Result<f64> {
    let mut coll = bind_slot(&cx.dom, 0, "bench-collector")?;
    let start = crate::sys::now_ns() + 30_000_000;
    let end = start + cx.dur.as_nanos() as u64;
    let mut kids = vec![];
    for p in 0..pairs {
        let (srv_slot, cli_slot) = (1 + 2 * p as i32, 2 + 2 * p as i32);
        let dom = cx.dom.clone();
        kids.push(fork_run(move || {
            ustack_server(&dom, srv_slot, "IPC2", mode)
        })?);
        let dom = cx.dom.clone();
        let to = coll.id();
        kids.push(fork_run(move || {
            let Ok(mut c) = bind_slot(&dom, cli_slot, "bench-client") else {
                return 2;
            };
            c.set_wait_mode(mode);
            let srv = dom.endpoint_of_slot(srv_slot as u32);
            let m = Message::new(1);
            let t0 = Instant::now();
            loop {
                match c.sendrec(srv, &m) {
                    Ok(_) => break,
                    Err(Error::BadEndpoint) if t0.elapsed() < Duration::from_secs(5) => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(_) => return 3,
                }
            }
            while crate::sys::now_ns() < start {
                std::hint::spin_loop();
            }
            // A client that the scheduler starts late (after `end`, on a
            // loaded machine) still measures one batch over the time it
            // really took, rather than reporting nothing.
            let begin = crate::sys::now_ns();
            let mut n = 0u64;
            loop {
                for _ in 0..32 {
                    if c.sendrec(srv, &m).is_err() {
                        return 4;
                    }
                }
                n += 32;
                if crate::sys::now_ns() >= end {
                    break;
                }
            }
            let el = crate::sys::now_ns() - begin;
            let _ = c.sendrec(srv, &Message::new(MT_STOP));
            // Report round trips and elapsed time to the collector.
            if c.send(to, &Message::new(7).with_u64(0, n).with_u64(1, el))
                .is_err()
            {
                return 5;
            }
            0
        })?);
    }
    let mut total = 0.0;
    let mut err = None;
    for _ in 0..pairs {
        match coll.receive_timeout(ANY, cx.dur + Duration::from_secs(10)) {
            Ok(m) => total += 2.0 * m.u64_at(0) as f64 / (m.u64_at(1).max(1) as f64 / 1e9),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    for k in kids {
        reap(k, Duration::from_secs(5));
    }
    match err {
        Some(e) => Err(anyhow::anyhow!("aggregate with {pairs} pairs: {e}")),
        None => Ok(total),
    }
}

// ---------------------------------------------------------------- output

/// Render the rows as text tables.
pub fn tables(rows: &[Row]) -> String {
    let mut s = String::new();
    let get = |b: &str, m: &str, mode: &str, size: u64, pairs: u32| {
        rows.iter()
            .find(|r| {
                r.benchmark == b
                    && r.mechanism == m
                    && r.mode == mode
                    && r.size == size
                    && r.pairs == pairs
            })
            .map(|r| r.value)
    };
    let cell = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
    let place_of = |mode: &str| {
        if mode.ends_with("pinned") {
            0
        } else if mode.ends_with("1cpu") {
            1
        } else {
            2
        }
    };
    for place in 0..3 {
        let mut mechs: Vec<(String, String)> = vec![];
        for r in rows
            .iter()
            .filter(|r| r.benchmark.starts_with("IPC") && place_of(&r.mode) == place)
        {
            let k = (r.mechanism.clone(), r.mode.clone());
            if !mechs.contains(&k) {
                mechs.push(k);
            }
        }
        if mechs.is_empty() {
            continue;
        }
        s.push_str(match place {
            0 => {
                "Message passing, client and server pinned to two different CPUs \
                 (64-byte messages; round trips per second, higher is better)\n"
            }
            1 => {
                "Message passing, client and server pinned to the same CPU \
                 (64-byte messages; round trips per second, higher is better)\n"
            }
            _ => {
                "Message passing, unpinned: the scheduler places client and server \
                 (64-byte messages; round trips per second, higher is better)\n"
            }
        });
        s.push_str(&format!(
            "{:<28}{:>14}{:>14}{:>14}{:>12}\n",
            "mechanism", "IPC1 send+rcv", "IPC2 sendrec", "IPC3 notify", "IPC2 us/rt"
        ));
        for (m, mode) in &mechs {
            let wait = mode
                .trim_end_matches("pinned")
                .trim_end_matches("1cpu")
                .trim_end_matches(',');
            let label = if wait.is_empty() || wait == "-" {
                m.clone()
            } else {
                format!("{m} ({wait})")
            };
            let i2 = get("IPC2", m, mode, MSG as u64, 1);
            s.push_str(&format!(
                "{:<28}{:>14}{:>14}{:>14}{:>12}\n",
                label,
                cell(get("IPC1", m, mode, MSG as u64, 1)),
                cell(i2),
                cell(get("IPC3", m, mode, 0, 1)),
                i2.map(|v| format!("{:.2}", 1e6 / v))
                    .unwrap_or_else(|| "-".into())
            ));
        }
        s.push('\n');
    }
    let mut sizes: Vec<u64> = rows
        .iter()
        .filter(|r| r.benchmark.starts_with("COPY"))
        .map(|r| r.size)
        .collect();
    sizes.dedup();
    s.push_str("Block copy between processes (MB/s = 10^6 bytes/s, higher is better)\n");
    s.push_str(&format!("{:<22}", "mechanism"));
    for sz in &sizes {
        s.push_str(&format!("{:>11}", fmt_size(*sz)));
    }
    s.push('\n');
    for (b, m, label) in [
        ("COPY1", "memcpy", "memcpy (1 process)"),
        ("COPY1", "ustack-arena", "ustack COPY1 arena"),
        ("COPY1", "ustack", "ustack COPY1 private"),
        ("COPY2", "ustack-arena", "ustack COPY2 arena"),
        ("COPY2", "ustack", "ustack COPY2 private"),
        ("COPY1", "pipe", "pipe"),
        ("COPY1", "unix-stream", "unix-stream"),
    ] {
        s.push_str(&format!("{label:<22}"));
        for sz in &sizes {
            s.push_str(&format!("{:>11}", cell(get(b, m, "-", *sz, 1))));
        }
        s.push('\n');
    }
    s.push_str("\nAggregate sendrec throughput of concurrent process pairs (messages/s = 2 x round trips)\n");
    s.push_str(&format!("{:>9}{:>16}{:>16}\n", "pairs", "adaptive", "spin"));
    let mut pairs: Vec<u32> = rows
        .iter()
        .filter(|r| r.benchmark == "AGGREGATE")
        .map(|r| r.pairs)
        .collect();
    pairs.sort();
    pairs.dedup();
    for p in pairs {
        s.push_str(&format!(
            "{p:>9}{:>16}{:>16}\n",
            cell(get("AGGREGATE", "ustack", "adaptive", MSG as u64, p)),
            cell(get("AGGREGATE", "ustack", "spin", MSG as u64, p))
        ));
    }
    s
}

/// Render an SVG with two panels like the paper's figures: message round trips per
/// mechanism (bars, log scale) and copy bandwidth against block size (lines, log-log).
pub fn svg(rows: &[Row]) -> String {
    let bars: Vec<&Row> = rows
        .iter()
        .filter(|r| r.benchmark == "IPC2" || r.benchmark == "IPC1")
        .collect();
    // The bars take 16 units each; the line panel below them 440.
    let (w, h) = (900.0, 40.0 + 16.0 * bars.len() as f64 + 460.0);
    let mut s = ustack_plot::svg_open(w, h);
    let colors = ustack_plot::COLORS;
    // Panel 1: IPC2 and IPC1 bars.
    s.push_str("<text x='450' y='20' text-anchor='middle' font-size='14'>IPC1 / IPC2 round trips per second (log scale)</text>\n");
    let maxv = bars.iter().map(|r| r.value).fold(1.0f64, f64::max);
    let minv = bars
        .iter()
        .map(|r| r.value)
        .fold(f64::MAX, f64::min)
        .clamp(1.0, maxv)
        / 2.0;
    let (x0, x1) = (200.0, 800.0);
    let lg = |v: f64| {
        ((v.max(minv).log10() - minv.log10()) / (maxv.log10() - minv.log10()).max(0.1)) * (x1 - x0)
    };
    let mut y = 40.0;
    for r in &bars {
        let label = if r.mode == "-" {
            format!("{} {}", r.benchmark, r.mechanism)
        } else {
            format!("{} {} ({})", r.benchmark, r.mechanism, r.mode)
        };
        let c = if r.benchmark == "IPC2" {
            colors[0]
        } else {
            colors[1]
        };
        s.push_str(&format!(
            "<text x='{}' y='{}' text-anchor='end'>{}</text><rect x='{x0}' y='{}' width='{:.1}' height='12' fill='{c}'/><text x='{:.1}' y='{}'>{:.0}</text>\n",
            x0 - 5.0,
            y + 10.0,
            label,
            y,
            lg(r.value),
            x0 + lg(r.value) + 4.0,
            y + 10.0,
            r.value
        ));
        y += 16.0;
    }
    // Panel 2: copy bandwidth lines.
    let copies: Vec<&Row> = rows
        .iter()
        .filter(|r| r.benchmark.starts_with("COPY"))
        .collect();
    let mut series: Vec<ustack_plot::Series> = vec![];
    for r in &copies {
        let label = format!("{} {}", r.benchmark, r.mechanism);
        let i = match series.iter().position(|s| s.label == label) {
            Some(i) => i,
            None => {
                series.push(ustack_plot::Series::new(label, series.len(), vec![]));
                series.len() - 1
            }
        };
        series[i].points.push((r.size as f64, r.value));
    }
    let mut sizes: Vec<u64> = copies.iter().map(|r| r.size).collect();
    sizes.sort();
    sizes.dedup();
    let plot = ustack_plot::LinePlot {
        title: "Copy bandwidth (MB/s) vs block size (log-log)".into(),
        x: ustack_plot::Axis::log("block size (bytes)")
            .with_ticks(sizes.iter().map(|&z| (z as f64, fmt_size(z))).collect()),
        y: ustack_plot::Axis::log("MB/s"),
        series,
    };
    let top = y + 20.0;
    plot.render(
        &mut s,
        ustack_plot::Rect {
            x: 110.0,
            y: top,
            w: 730.0,
            h: h - top - 10.0,
        },
    );
    s.push_str(ustack_plot::SVG_CLOSE);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_orders_are_permutations_that_change_neighbours() {
        assert_eq!(round_order(5, 0), vec![0, 1, 2, 3, 4]);
        let mut after_two = std::collections::HashSet::new();
        for r in 0..7 {
            let o = round_order(23, r);
            let mut s = o.clone();
            s.sort();
            assert_eq!(s, (0..23).collect::<Vec<_>>(), "round {r}");
            let p = o.iter().position(|&j| j == 2).expect("job 2");
            after_two.insert(if p == 0 { usize::MAX } else { o[p - 1] });
        }
        assert!(
            after_two.len() >= 4,
            "job 2 follows too few others: {after_two:?}"
        );
        assert!(round_order(0, 3).is_empty());
        assert_eq!(round_order(1, 3), vec![0]);
    }

    #[test]
    fn unpinned_rounds_give_the_median_pinned_the_best() {
        assert_eq!(combine_rounds(Place::Free, vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(combine_rounds(Place::Free, vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(combine_rounds(Place::Split(0, 1), vec![5.0, 1.0, 3.0]), 5.0);
        assert_eq!(combine_rounds(Place::Shared(0), vec![]), 0.0);
    }
}
