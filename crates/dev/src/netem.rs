//! [`Netem`]: real-time link impairments around any device, per direction,
//! modelled on Linux's `netem` qdisc (`tc qdisc add ... netem loss 5% delay
//! 10ms reorder 25% duplicate 1%`).
//!
//! Use it where the kernel has no netem (`CONFIG_NET_SCH_NETEM` unset) or
//! when both directions must be impaired: wrapped around a TAP, the `rx`
//! side impairs what the kernel sends to the stack and the `tx` side what
//! the stack sends to the kernel, so both TCPs see loss, delay, reordering
//! and duplication of the other side's packets.
//!
//! Model, per direction, for each frame (wall clock, or the clock given to
//! [`Netem::with_clock`]), in netem's order (`netem_enqueue`):
//! 1. duplication with probability `duplicate`: a second copy is made;
//! 2. loss with probability `loss`: one copy is dropped (so a duplicated
//!    frame that is "lost" still arrives once, as in netem);
//! 3. each remaining copy: tail drop if `limit` frames are already held;
//!    corruption with probability `corrupt` (one random bit flipped);
//! 4. reordering as netem does it: with probability `reorder` the copy is
//!    sent at once — it "jumps the queue" — while the others wait the
//!    delay (so `reorder` needs a delay, as with `tc`);
//! 5. otherwise: with `rate`, serialisation behind earlier frames
//!    (`len * 8 / rate`), then `delay` plus a uniform random offset in
//!    `-jitter..=+jitter` (clamped at zero; like netem without a
//!    distribution table, jitter alone can reorder).
//!
//! Frames are released in due-time order (ties in arrival order). Delayed
//! transmissions need a timer: [`Device::next_deadline`] tells the runtime
//! when to wake up and [`Device::poll_deferred`] sends what is due. Received
//! frames are drained from the inner device into the hold queue on every
//! `recv` call, so the inner file descriptor does not stay readable.
//!
//! Randomness comes from a seeded ChaCha8 generator per direction: the same
//! seed gives the same decisions for the same sequence of frames.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::impair::{flip_random_bit, serialisation_time, Scheduled};
use crate::Device;

/// Largest frame drained from the inner device (64 KiB plus headers).
const MAX_FRAME: usize = 65536 + 64;
/// Frames taken from the inner device per `recv` call at most (bounded work).
const PULL_MAX: usize = 256;
/// Recycled buffers kept per direction.
const POOL_MAX: usize = 1024;
/// Retry interval when the inner device refuses a due frame (`WouldBlock`).
const RETRY: Duration = Duration::from_millis(1);

/// Impairments of one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct NetemConfig {
    /// Probability that a frame is dropped.
    pub loss: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that a frame skips the delay (jumps the queue).
    pub reorder: f64,
    /// Probability that one bit of a frame is flipped.
    pub corrupt: f64,
    /// Fixed delay.
    pub delay: Duration,
    /// Uniform random offset `-jitter..=+jitter` added to the delay.
    pub jitter: Duration,
    /// Bottleneck rate in bits per second (`None` = unlimited).
    pub rate_bps: Option<u64>,
    /// Frames held at most; more are dropped and counted (netem's `limit`).
    pub limit: usize,
}

impl Default for NetemConfig {
    /// No impairment; a limit of 1000 frames like netem's default.
    fn default() -> Self {
        NetemConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: None,
            limit: 1000,
        }
    }
}

impl NetemConfig {
    /// No impairment (same as `Default`).
    pub fn none() -> Self {
        Self::default()
    }

    /// True when frames pass untouched and without delay.
    pub fn is_identity(&self) -> bool {
        self.loss <= 0.0
            && self.duplicate <= 0.0
            && self.reorder <= 0.0
            && self.corrupt <= 0.0
            && !self.delays()
    }

    fn delays(&self) -> bool {
        !self.delay.is_zero() || !self.jitter.is_zero() || self.rate_bps.is_some()
    }

    /// Check the values; the message names the offending setting.
    pub fn validate(&self) -> Result<(), SpecError> {
        for (name, p) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(SpecError(format!(
                    "{name}: probability {p} is outside 0%..100%"
                )));
            }
        }
        if self.reorder > 0.0 && self.delay.is_zero() {
            return Err(SpecError(
                "reorder needs a delay (frames that do not jump the queue wait the delay), e.g. delay=10ms"
                    .to_string(),
            ));
        }
        if self.limit == 0 {
            return Err(SpecError("limit must be at least 1 frame".to_string()));
        }
        if self.rate_bps == Some(0) {
            return Err(SpecError("rate must be more than 0".to_string()));
        }
        Ok(())
    }
}

/// A parsed `--impair` specification: the impairments and an optional seed.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpairSpec {
    pub config: NetemConfig,
    pub seed: Option<u64>,
}

/// Why a specification was rejected (a message for people).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

/// The syntax, for error messages and help texts.
pub const SPEC_SYNTAX: &str =
    "comma-separated KEY=VALUE: loss=P, duplicate=P, reorder=P, corrupt=P \
(P a percentage such as 5% or 0.5%), delay=D, jitter=D (D such as 10ms, 500us, 1s), \
rate=R (such as 100mbit, 512kbit, 1gbit), limit=FRAMES, seed=N";

fn parse_percent(key: &str, v: &str) -> Result<f64, SpecError> {
    let bad = || {
        SpecError(format!(
            "{key}={v}: expected a percentage between 0% and 100% such as 5% or 0.5%"
        ))
    };
    let num = v.strip_suffix('%').ok_or_else(bad)?;
    let x: f64 = num.trim().parse().map_err(|_| bad())?;
    if !(0.0..=100.0).contains(&x) {
        return Err(bad());
    }
    Ok(x / 100.0)
}

fn parse_duration(key: &str, v: &str) -> Result<Duration, SpecError> {
    let bad = || {
        SpecError(format!(
            "{key}={v}: expected a duration such as 10ms, 500us or 1s"
        ))
    };
    if v == "0" {
        return Ok(Duration::ZERO);
    }
    let (num, nanos_per_unit) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(bad());
    };
    let x: f64 = num.trim().parse().map_err(|_| bad())?;
    let nanos = x * nanos_per_unit;
    // At most an hour: anything longer is a typo, not a link.
    if !nanos.is_finite() || !(0.0..=3.6e12).contains(&nanos) {
        return Err(bad());
    }
    // In range by the check above.
    Ok(Duration::from_nanos(nanos as u64))
}

fn parse_rate(key: &str, v: &str) -> Result<u64, SpecError> {
    let bad = || {
        SpecError(format!(
            "{key}={v}: expected a rate in bits per second such as 100mbit, 512kbit or 1gbit"
        ))
    };
    let lower = v.to_ascii_lowercase();
    let (num, mult) = if let Some(n) = lower.strip_suffix("gbit") {
        (n.to_string(), 1e9)
    } else if let Some(n) = lower.strip_suffix("mbit") {
        (n.to_string(), 1e6)
    } else if let Some(n) = lower.strip_suffix("kbit") {
        (n.to_string(), 1e3)
    } else if let Some(n) = lower.strip_suffix("bit") {
        (n.to_string(), 1.0)
    } else {
        return Err(bad());
    };
    let x: f64 = num.trim().parse().map_err(|_| bad())?;
    let bps = x * mult;
    if !bps.is_finite() || !(1.0..=1e13).contains(&bps) {
        return Err(bad());
    }
    Ok(bps as u64)
}

impl FromStr for ImpairSpec {
    type Err = SpecError;

    /// Parse `loss=5%,delay=10ms,jitter=1ms,reorder=25%,duplicate=1%,corrupt=0%,rate=100mbit,limit=1000,seed=7`.
    /// Every key is optional; an empty string or `none` means no impairment.
    fn from_str(s: &str) -> Result<ImpairSpec, SpecError> {
        let mut config = NetemConfig::default();
        let mut seed = None;
        let s = s.trim();
        if s.is_empty() || s == "none" {
            return Ok(ImpairSpec { config, seed });
        }
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (k, v) = item.split_once('=').ok_or_else(|| {
                SpecError(format!("'{item}' is not KEY=VALUE; expected {SPEC_SYNTAX}"))
            })?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "loss" => config.loss = parse_percent(k, v)?,
                "duplicate" | "dup" => config.duplicate = parse_percent(k, v)?,
                "reorder" => config.reorder = parse_percent(k, v)?,
                "corrupt" => config.corrupt = parse_percent(k, v)?,
                "delay" => config.delay = parse_duration(k, v)?,
                "jitter" => config.jitter = parse_duration(k, v)?,
                "rate" => config.rate_bps = Some(parse_rate(k, v)?),
                "limit" => {
                    config.limit = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        SpecError(format!("limit={v}: expected a number of frames >= 1"))
                    })?
                }
                "seed" => {
                    seed = Some(v.parse().map_err(|_| {
                        SpecError(format!("seed={v}: expected an unsigned integer"))
                    })?)
                }
                _ => {
                    return Err(SpecError(format!(
                        "unknown impairment '{k}'; expected {SPEC_SYNTAX}"
                    )))
                }
            }
        }
        config.validate()?;
        Ok(ImpairSpec { config, seed })
    }
}

/// Counters of one direction (a snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetemDirCounters {
    /// Frames that entered this direction.
    pub frames: u64,
    /// Frames passed on (to the stack for rx, to the inner device for tx).
    pub delivered: u64,
    /// Frames dropped by `loss`.
    pub lost: u64,
    /// Extra copies made by `duplicate`.
    pub duplicated: u64,
    /// Frames that jumped the queue (`reorder`).
    pub reordered: u64,
    /// Frames with a flipped bit (`corrupt`).
    pub corrupted: u64,
    /// Frames dropped because `limit` frames were held.
    pub queue_drops: u64,
    /// tx: frames the inner device failed to send (not `WouldBlock`).
    pub errors: u64,
}

impl fmt::Display for NetemDirCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "frames {} delivered {} lost {} duplicated {} reordered {} corrupted {} queue_drops {} errors {}",
            self.frames,
            self.delivered,
            self.lost,
            self.duplicated,
            self.reordered,
            self.corrupted,
            self.queue_drops,
            self.errors
        )
    }
}

#[derive(Default)]
struct AtomicDirCounters {
    frames: AtomicU64,
    delivered: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    corrupted: AtomicU64,
    queue_drops: AtomicU64,
    errors: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, AtomicOrdering::Relaxed);
}

impl AtomicDirCounters {
    fn snapshot(&self) -> NetemDirCounters {
        let g = |c: &AtomicU64| c.load(AtomicOrdering::Relaxed);
        NetemDirCounters {
            frames: g(&self.frames),
            delivered: g(&self.delivered),
            lost: g(&self.lost),
            duplicated: g(&self.duplicated),
            reordered: g(&self.reordered),
            corrupted: g(&self.corrupted),
            queue_drops: g(&self.queue_drops),
            errors: g(&self.errors),
        }
    }
}

#[derive(Default)]
struct SharedCounters {
    rx: AtomicDirCounters,
    tx: AtomicDirCounters,
}

/// Counters of both directions, readable from another thread while the
/// device is owned by a runtime.
#[derive(Clone)]
pub struct NetemCounters(Arc<SharedCounters>);

impl NetemCounters {
    /// Frames from the wire to the stack.
    pub fn rx(&self) -> NetemDirCounters {
        self.0.rx.snapshot()
    }
    /// Frames from the stack to the wire.
    pub fn tx(&self) -> NetemDirCounters {
        self.0.tx.snapshot()
    }
}

impl fmt::Debug for NetemCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetemCounters")
            .field("rx", &self.rx())
            .field("tx", &self.tx())
            .finish()
    }
}

/// A held frame, due at a wall-clock (or injected-clock) time.
type Held = Scheduled<Instant>;

/// One direction: configuration, generator, hold queue.
struct Dir {
    cfg: NetemConfig,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<Held>>,
    order: u64,
    /// When the bottleneck (`rate`) has finished serialising the last frame.
    free_at: Option<Instant>,
    pool: Vec<Vec<u8>>,
}

impl Dir {
    fn new(cfg: NetemConfig, seed: u64) -> Dir {
        Dir {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            order: 0,
            free_at: None,
            pool: Vec::new(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen::<f64>() < p
    }

    fn head_at(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse(h)| h.at)
    }

    /// Pop the head if it is due at `now`.
    fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.head_at()? > now {
            return None;
        }
        self.queue.pop().map(|Reverse(h)| h.data)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX {
            self.pool.push(buf);
        }
    }

    /// When a (non-jumping) copy of `len` bytes is due.
    fn due_time(&mut self, now: Instant, len: usize) -> Instant {
        let mut depart = now;
        if let Some(rate) = self.cfg.rate_bps.filter(|&r| r > 0) {
            let start = self.free_at.map_or(now, |f| f.max(now));
            depart = start + serialisation_time(len, rate);
            self.free_at = Some(depart);
        }
        let delay = self.cfg.delay;
        let jitter = u64::try_from(self.cfg.jitter.as_nanos()).unwrap_or(u64::MAX);
        if jitter == 0 {
            return depart + delay;
        }
        // Uniform in -jitter..=+jitter around the delay, clamped at zero.
        let off = self.rng.gen_range(0..=jitter.saturating_mul(2));
        let base = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        let total = base.saturating_add(off).saturating_sub(jitter);
        depart + Duration::from_nanos(total)
    }

    /// Apply the impairments to one frame, the concatenation of `parts`,
    /// and hold what survives (each copy is gathered straight into a held
    /// buffer).
    fn admit(&mut self, now: Instant, parts: &[&[u8]], ctr: &AtomicDirCounters) {
        bump(&ctr.frames);
        let mut copies = 1u32;
        if self.chance(self.cfg.duplicate) {
            copies += 1;
            bump(&ctr.duplicated);
        }
        if self.chance(self.cfg.loss) {
            copies -= 1;
            bump(&ctr.lost);
        }
        for _ in 0..copies {
            if self.queue.len() >= self.cfg.limit {
                bump(&ctr.queue_drops);
                continue;
            }
            let mut data = self.pool.pop().unwrap_or_default();
            crate::gather_into(&mut data, parts);
            if self.chance(self.cfg.corrupt) && !data.is_empty() {
                flip_random_bit(&mut self.rng, &mut data);
                bump(&ctr.corrupted);
            }
            let at = if !self.cfg.delays() {
                now
            } else if self.chance(self.cfg.reorder) {
                // netem: "if (q->reorder < get_crandom(...)) { delay } else
                // { ... time_to_send = now; __qdisc_enqueue_head() }" -- the
                // packet is sent at once, ahead of the delayed ones.
                bump(&ctr.reordered);
                now
            } else {
                self.due_time(now, data.len())
            };
            self.order += 1;
            self.queue.push(Reverse(Held {
                at,
                order: self.order,
                data,
            }));
        }
    }
}

/// The clock [`Netem`] reads (wall clock by default).
pub type NetemClock = Box<dyn Fn() -> Instant + Send>;

/// A device wrapper that impairs each direction in real time; see the
/// module documentation for the model.
pub struct Netem<D: Device> {
    inner: D,
    rx: Dir,
    tx: Dir,
    clock: NetemClock,
    counters: Arc<SharedCounters>,
    scratch: Vec<u8>,
    /// Set when the inner device refused a due frame: retry then.
    tx_retry_at: Option<Instant>,
}

impl<D: Device> Netem<D> {
    /// Impair frames from the wire to the stack with `rx` and from the stack
    /// to the wire with `tx`, on the wall clock. Each direction gets its own
    /// generator derived from `seed`.
    pub fn new(inner: D, rx: NetemConfig, tx: NetemConfig, seed: u64) -> Self {
        Self::with_clock(inner, rx, tx, seed, Box::new(Instant::now))
    }

    /// Like [`new`](Self::new) with another clock (tests).
    pub fn with_clock(
        inner: D,
        rx: NetemConfig,
        tx: NetemConfig,
        seed: u64,
        clock: NetemClock,
    ) -> Self {
        Netem {
            inner,
            rx: Dir::new(rx, seed ^ 0x7278_5f6e_6574_656d),
            tx: Dir::new(tx, seed ^ 0x7478_5f6e_6574_656d),
            clock,
            counters: Arc::new(SharedCounters::default()),
            scratch: Vec::new(),
            tx_retry_at: None,
        }
    }

    /// A handle to the counters that stays valid after the device is moved
    /// into a runtime.
    pub fn counters(&self) -> NetemCounters {
        NetemCounters(Arc::clone(&self.counters))
    }

    /// Frames currently held (rx, tx).
    pub fn held(&self) -> (usize, usize) {
        (self.rx.queue.len(), self.tx.queue.len())
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }
    /// The inner device; frames still held are dropped.
    pub fn into_inner(self) -> D {
        self.inner
    }

    /// Take what the inner device has (bounded) into the rx hold queue.
    /// Returns the error of the inner device, if any.
    fn pull_rx(&mut self, now: Instant) -> io::Result<()> {
        if self.scratch.len() < MAX_FRAME {
            self.scratch.resize(MAX_FRAME, 0);
        }
        for _ in 0..PULL_MAX {
            match self.inner.recv(&mut self.scratch) {
                Ok(Some(n)) => {
                    let frame = self.scratch.get(..n).unwrap_or(&self.scratch);
                    self.rx.admit(now, &[frame], &self.counters.rx);
                }
                Ok(None) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether a frame sent now goes straight to the inner device: no
    /// impairment on the way out and nothing held that it would overtake.
    fn passes_tx(&self) -> bool {
        self.tx.cfg.is_identity() && self.tx.queue.is_empty()
    }

    /// Impair and hold a frame sent (the concatenation of `parts`), and
    /// send what is due.
    fn admit_tx(&mut self, parts: &[&[u8]]) {
        let now = (self.clock)();
        self.tx.admit(now, parts, &self.counters.tx);
        self.flush_tx(now);
    }

    /// Send the tx frames that are due.
    fn flush_tx(&mut self, now: Instant) {
        if self.tx_retry_at.is_some_and(|t| t > now) {
            return;
        }
        self.tx_retry_at = None;
        while self.tx.head_at().is_some_and(|t| t <= now) {
            let Some(Reverse(head)) = self.tx.queue.peek() else {
                break;
            };
            match self.inner.send(&head.data) {
                Ok(()) => bump(&self.counters.tx.delivered),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.tx_retry_at = Some(now + RETRY);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => bump(&self.counters.tx.errors),
            }
            if let Some(Reverse(h)) = self.tx.queue.pop() {
                self.tx.recycle(h.data);
            }
        }
    }
}

impl<D: Device> Device for Netem<D> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if self.rx.cfg.is_identity() && self.rx.queue.is_empty() {
            let r = self.inner.recv(buf)?;
            if r.is_some() {
                bump(&self.counters.rx.frames);
                bump(&self.counters.rx.delivered);
            }
            return Ok(r);
        }
        let now = (self.clock)();
        let pulled = self.pull_rx(now);
        match self.rx.pop_due(now) {
            Some(data) => {
                let n = data.len().min(buf.len());
                if let (Some(dst), Some(src)) = (buf.get_mut(..n), data.get(..n)) {
                    dst.copy_from_slice(src);
                }
                self.rx.recycle(data);
                bump(&self.counters.rx.delivered);
                // An inner error is reported on a later call (it recurs).
                Ok(Some(n))
            }
            None => pulled.map(|()| None),
        }
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.passes_tx() {
            bump(&self.counters.tx.frames);
            self.inner.send(frame)?;
            bump(&self.counters.tx.delivered);
            return Ok(());
        }
        self.admit_tx(&[frame]);
        Ok(())
    }

    /// A frame that passes straight through goes to the inner device in its
    /// parts; one that is held (delayed, duplicated, corrupted, or behind
    /// held ones) is gathered into the held copy, which netem must own.
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        if self.passes_tx() {
            bump(&self.counters.tx.frames);
            self.inner.send_vectored(parts)?;
            bump(&self.counters.tx.delivered);
            return Ok(());
        }
        self.admit_tx(parts);
        Ok(())
    }

    forward_device!(self => self.inner; mtu, mac, raw_fd, offloads);

    fn next_deadline(&self) -> Option<Instant> {
        let tx = self
            .tx
            .head_at()
            .map(|t| self.tx_retry_at.map_or(t, |r| r.max(t)));
        [self.rx.head_at(), tx, self.inner.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    fn poll_deferred(&mut self) -> io::Result<()> {
        let now = (self.clock)();
        self.flush_tx(now);
        self.inner.poll_deferred()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memlink::{pair, Impairments, MemPort};
    use std::sync::Mutex;

    /// A clock the test moves by hand.
    #[derive(Clone)]
    struct FakeClock(Arc<Mutex<Instant>>);

    impl FakeClock {
        fn new() -> Self {
            FakeClock(Arc::new(Mutex::new(Instant::now())))
        }
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
        fn advance(&self, d: Duration) {
            *self.0.lock().unwrap() += d;
        }
        fn boxed(&self) -> NetemClock {
            let c = self.clone();
            Box::new(move || c.now())
        }
    }

    fn frame(i: u32) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..4].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn id(f: &[u8]) -> u32 {
        u32::from_be_bytes([f[0], f[1], f[2], f[3]])
    }

    fn drain(port: &mut MemPort) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2000];
        while let Some(n) = port.recv(&mut buf).unwrap() {
            out.push(buf[..n].to_vec());
        }
        out
    }

    fn drain_netem<D: Device>(n: &mut Netem<D>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2000];
        while let Some(k) = n.recv(&mut buf).unwrap() {
            out.push(buf[..k].to_vec());
        }
        out
    }

    fn spec(s: &str) -> NetemConfig {
        s.parse::<ImpairSpec>().unwrap().config
    }

    #[test]
    fn parses_the_tc_like_spec() {
        let s: ImpairSpec =
            "loss=5%,delay=10ms,jitter=0ms,reorder=25%,duplicate=1%,corrupt=0%,seed=42"
                .parse()
                .unwrap();
        assert_eq!(s.seed, Some(42));
        assert!((s.config.loss - 0.05).abs() < 1e-12);
        assert!((s.config.reorder - 0.25).abs() < 1e-12);
        assert!((s.config.duplicate - 0.01).abs() < 1e-12);
        assert_eq!(s.config.corrupt, 0.0);
        assert_eq!(s.config.delay, Duration::from_millis(10));
        assert_eq!(s.config.jitter, Duration::ZERO);
        let r: ImpairSpec = "rate=100mbit,limit=50,delay=1.5ms,jitter=250us"
            .parse()
            .unwrap();
        assert_eq!(r.config.rate_bps, Some(100_000_000));
        assert_eq!(r.config.limit, 50);
        assert_eq!(r.config.delay, Duration::from_micros(1500));
        assert_eq!(r.config.jitter, Duration::from_micros(250));
        assert!("none".parse::<ImpairSpec>().unwrap().config.is_identity());
        assert!("".parse::<ImpairSpec>().unwrap().config.is_identity());
    }

    #[test]
    fn spec_errors_name_the_problem() {
        let err = |s: &str| s.parse::<ImpairSpec>().unwrap_err().to_string();
        assert!(err("loss=5").contains("percentage"), "{}", err("loss=5"));
        assert!(err("loss=150%").contains("percentage"));
        assert!(err("delay=10").contains("duration"));
        assert!(err("delay=-1ms").contains("duration"));
        assert!(err("lose=5%").contains("unknown impairment 'lose'"));
        assert!(err("loss").contains("not KEY=VALUE"));
        assert!(err("reorder=25%").contains("reorder needs a delay"));
        assert!(err("rate=fast").contains("rate"));
        assert!(err("limit=0").contains("limit"));
        assert!(err("seed=x").contains("seed"));
    }

    #[test]
    fn identity_passes_through_in_order() {
        let (a, mut b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut n = Netem::new(a, NetemConfig::none(), NetemConfig::none(), 3);
        for i in 0..10 {
            n.send(&frame(i)).unwrap();
        }
        let got: Vec<u32> = drain(&mut b).iter().map(|f| id(f)).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert_eq!(n.next_deadline(), None);
        assert_eq!(n.counters().tx().delivered, 10);
    }

    #[test]
    fn tx_delay_holds_frames_until_due() {
        let clock = FakeClock::new();
        let (a, mut b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut n = Netem::with_clock(a, NetemConfig::none(), spec("delay=10ms"), 3, clock.boxed());
        let t0 = clock.now();
        n.send(&frame(1)).unwrap();
        clock.advance(Duration::from_millis(4));
        n.send(&frame(2)).unwrap();
        assert!(drain(&mut b).is_empty(), "nothing before the delay");
        assert_eq!(n.next_deadline(), Some(t0 + Duration::from_millis(10)));
        clock.advance(Duration::from_millis(5)); // 9 ms
        n.poll_deferred().unwrap();
        assert!(drain(&mut b).is_empty());
        clock.advance(Duration::from_millis(1)); // 10 ms
        n.poll_deferred().unwrap();
        let got: Vec<u32> = drain(&mut b).iter().map(|f| id(f)).collect();
        assert_eq!(got, vec![1]);
        assert_eq!(n.next_deadline(), Some(t0 + Duration::from_millis(14)));
        clock.advance(Duration::from_millis(4));
        n.poll_deferred().unwrap();
        assert_eq!(drain(&mut b).len(), 1);
        assert_eq!(n.next_deadline(), None);
    }

    #[test]
    fn rx_delay_and_queue_jumping_reorder() {
        let clock = FakeClock::new();
        let (mut a, b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut n = Netem::with_clock(
            b,
            spec("delay=10ms,reorder=25%"),
            NetemConfig::none(),
            11,
            clock.boxed(),
        );
        for i in 0..400 {
            a.send(&frame(i)).unwrap();
        }
        // The jumpers come out at once, in arrival order; the rest wait.
        let now = drain_netem(&mut n);
        let c = n.counters().rx();
        assert_eq!(c.frames, 400);
        assert_eq!(now.len() as u64, c.reordered);
        assert!((60..140).contains(&now.len()), "{c:?}");
        let ids: Vec<u32> = now.iter().map(|f| id(f)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(n.held().0, 400 - now.len());
        let dl = n.next_deadline().unwrap();
        assert_eq!(dl, clock.now() + Duration::from_millis(10));
        clock.advance(Duration::from_millis(10));
        let later = drain_netem(&mut n);
        assert_eq!(later.len() + now.len(), 400);
        let mut all: Vec<u32> = ids.into_iter().chain(later.iter().map(|f| id(f))).collect();
        assert_ne!(all, (0..400).collect::<Vec<_>>(), "reordered");
        all.sort_unstable();
        assert_eq!(all, (0..400).collect::<Vec<_>>(), "each frame once");
        assert_eq!(n.next_deadline(), None);
    }

    #[test]
    fn loss_duplicate_corrupt_rates_and_seed_reproducibility() {
        let run = |seed: u64| {
            let (a, mut b) = pair(Impairments::none(), Impairments::none(), 1);
            let mut n = Netem::new(
                a,
                NetemConfig::none(),
                spec("loss=10%,duplicate=5%,corrupt=20%"),
                seed,
            );
            for i in 0..4000 {
                n.send(&frame(i)).unwrap();
            }
            let got = drain(&mut b);
            (got, n.counters().tx())
        };
        let (got, c) = run(5);
        assert_eq!(c.frames, 4000);
        assert!((300..500).contains(&c.lost), "{c:?}");
        assert!((130..280).contains(&c.duplicated), "{c:?}");
        assert_eq!(got.len() as u64, 4000 - c.lost + c.duplicated);
        assert_eq!(c.delivered, got.len() as u64);
        let changed = got
            .iter()
            .filter(|f| f[4..].iter().any(|&b| b != 0) || id(f) >= 4000)
            .count() as u64;
        // A flip in the 4-byte id may still give an id < 4000; count those too.
        assert!(
            changed <= c.corrupted && c.corrupted > 600,
            "{c:?} {changed}"
        );
        let (again, c2) = run(5);
        assert_eq!(c, c2);
        assert_eq!(got, again, "same seed, same link");
        let (_, c3) = run(6);
        assert_ne!(c, c3, "another seed, other decisions");
    }

    #[test]
    fn jitter_stays_within_bounds_and_rate_serialises() {
        let clock = FakeClock::new();
        let (a, _b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut n = Netem::with_clock(
            a,
            NetemConfig::none(),
            spec("delay=10ms,jitter=3ms"),
            2,
            clock.boxed(),
        );
        let t0 = clock.now();
        for i in 0..200 {
            n.send(&frame(i)).unwrap();
        }
        let ats: Vec<Instant> = n.tx.queue.iter().map(|Reverse(h)| h.at).collect();
        assert!(ats
            .iter()
            .all(|&t| t >= t0 + Duration::from_millis(7) && t <= t0 + Duration::from_millis(13)));
        assert!(ats.iter().any(|&t| t < t0 + Duration::from_millis(9)));
        assert!(ats.iter().any(|&t| t > t0 + Duration::from_millis(11)));

        // 8 Mbit/s: a 1000-byte frame takes 1 ms on the wire.
        let (a, mut b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut n = Netem::with_clock(a, NetemConfig::none(), spec("rate=8mbit"), 2, clock.boxed());
        let t0 = clock.now();
        for _ in 0..5 {
            n.send(&[0u8; 1000]).unwrap();
        }
        assert_eq!(n.next_deadline(), Some(t0 + Duration::from_millis(1)));
        clock.advance(Duration::from_micros(3500));
        n.poll_deferred().unwrap();
        assert_eq!(drain(&mut b).len(), 3);
        assert_eq!(n.next_deadline(), Some(t0 + Duration::from_millis(4)));
    }

    #[test]
    fn limit_drops_and_counts() {
        let clock = FakeClock::new();
        let (mut a, b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut n = Netem::with_clock(
            b,
            spec("delay=5ms,limit=10"),
            NetemConfig::none(),
            2,
            clock.boxed(),
        );
        for i in 0..25 {
            a.send(&frame(i)).unwrap();
        }
        assert!(drain_netem(&mut n).is_empty());
        let c = n.counters().rx();
        assert_eq!(c.queue_drops, 15);
        clock.advance(Duration::from_millis(5));
        let got: Vec<u32> = drain_netem(&mut n).iter().map(|f| id(f)).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    /// Refuses sends while `full`.
    struct Stuck {
        full: bool,
        sent: usize,
    }
    impl Device for Stuck {
        fn recv(&mut self, _: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(None)
        }
        fn send(&mut self, _: &[u8]) -> io::Result<()> {
            if self.full {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.sent += 1;
            Ok(())
        }
        fn mtu(&self) -> usize {
            1500
        }
        fn mac(&self) -> Option<[u8; 6]> {
            None
        }
        fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
            None
        }
    }

    #[test]
    fn inner_would_block_keeps_frames_and_retries_later() {
        let clock = FakeClock::new();
        let stuck = Stuck {
            full: true,
            sent: 0,
        };
        let mut n = Netem::with_clock(
            stuck,
            NetemConfig::none(),
            spec("delay=1ms"),
            2,
            clock.boxed(),
        );
        n.send(&frame(1)).unwrap();
        n.send(&frame(2)).unwrap();
        clock.advance(Duration::from_millis(1));
        n.poll_deferred().unwrap();
        assert_eq!(n.held().1, 2);
        // Not a busy loop: the next attempt is a little later.
        assert_eq!(n.next_deadline(), Some(clock.now() + RETRY));
        n.inner_mut().full = false;
        n.poll_deferred().unwrap();
        assert_eq!(n.inner().sent, 0, "waits for the retry time");
        clock.advance(RETRY);
        n.poll_deferred().unwrap();
        assert_eq!(n.inner().sent, 2);
        assert_eq!(n.next_deadline(), None);
    }

    #[test]
    fn real_clock_small_delay() {
        let (mut a, b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut n = Netem::new(b, spec("delay=20ms"), NetemConfig::none(), 4);
        let t0 = Instant::now();
        a.send(&frame(7)).unwrap();
        assert!(drain_netem(&mut n).is_empty());
        let dl = n.next_deadline().unwrap();
        assert!(dl >= t0 + Duration::from_millis(20));
        std::thread::sleep(dl.saturating_duration_since(Instant::now()));
        let got = drain_netem(&mut n);
        assert_eq!(got.len(), 1);
        assert!(t0.elapsed() >= Duration::from_millis(20));
    }
}
