//! The runtime: one stack thread per [`Net`] that owns device receive and
//! timers, and the shared state application threads use to run socket
//! operations directly on the [`Stack`].
//!
//! # Locking
//!
//! One `Mutex<Inner>` holds both the [`Stack`] and the device. Every device
//! access is paired with a stack access anyway — a received frame goes
//! straight into `Stack::receive`, and frames are only transmitted from inside
//! `Stack::receive`/`Stack::poll` through the `tx` closure — so a separate
//! device mutex would always be taken nested inside the stack lock: one more
//! atomic round trip per frame and a lock order to get right, for no extra
//! parallelism. Keeping both behind one lock lets the `tx` closure borrow the
//! device and the transmit backlog disjointly from the stack.
//!
//! # Threads
//!
//! Application threads lock, run the socket operation, then call
//! `Stack::poll` so whatever the operation produced (a SYN, data, a window
//! update) leaves right away from the calling thread. They park only when
//! they must block, after registering what they wait for (an `Interest`:
//! readable, writable, acceptable, connected, ...). After each iteration
//! that received frames or ran timers, the stack thread checks the
//! registered interests against the stack and unparks only the threads
//! whose socket became ready — a thousand idle connections do not all wake
//! up for every packet. When an operation moves `poll_at` earlier than the deadline the
//! stack thread sleeps until, or leaves frames in the transmit backlog, the
//! caller kicks the stack thread's `eventfd`.
//!
//! # Device deadlines
//!
//! A device may hold frames back (`ustack_dev::netem::Netem` emulates link
//! delay): the stack thread sleeps no longer than `Device::next_deadline`,
//! calls `Device::poll_deferred` on every iteration so delayed frames leave
//! on time, and application threads kick it when their output moved the
//! device's deadline earlier than the thread's wake-up time.

use std::collections::VecDeque;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use ustack_core::tcp::State;
use ustack_core::time::Instant;
use ustack_core::{Config, Counters, EchoReply, Stack, TcpHandle, UdpHandle};
use ustack_dev::Device;

use crate::error::IntoIoError;
use crate::sys::{self, Epoll, EventFd, EPOLLIN, EPOLLOUT};

const TOKEN_WAKE: u64 = 0;
const TOKEN_DEV: u64 = 1;
/// Upper bound on consecutive `Stack::poll` calls in one loop iteration.
const MAX_POLL_ROUNDS: usize = 8;
/// Pause after a device receive error (see `run`).
const RX_ERROR_BACKOFF: Duration = Duration::from_millis(10);
/// Echo replies kept for `Net::ping` callers that have not collected them.
const MAX_ECHO_BACKLOG: usize = 64;

/// Tunables of the runtime (not of the stack: those are in [`Config`]).
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Name of the stack thread.
    pub thread_name: String,
    /// Frames received per loop iteration before timers run again (bounded
    /// work: a flood must not starve timers).
    pub rx_batch: usize,
    /// Size of the receive buffer (largest frame accepted).
    pub frame_size: usize,
    /// Frames kept while the device is full (`WouldBlock`); beyond this they
    /// are dropped like a full qdisc would (TCP retransmits).
    pub tx_backlog: usize,
    /// Keep polling the device without sleeping for this long after the last
    /// activity (trades CPU for latency). `None` = always sleep in epoll.
    pub busy_poll: Option<Duration>,
    /// Poll interval for devices that have no file descriptor.
    pub idle_poll: Duration,
    /// On drop of the last handle, wait up to this long for TCP connections
    /// to deliver data already written before stopping the thread.
    pub drain_on_drop: Duration,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            thread_name: "ustack".to_string(),
            rx_batch: 64,
            frame_size: 65536 + 64,
            tx_backlog: 4096,
            busy_poll: None,
            idle_poll: Duration::from_millis(1),
            drain_on_drop: Duration::from_secs(2),
        }
    }
}

/// Runtime statistics (device-level; protocol counters are in [`Counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Frames received from the device.
    pub rx_frames: u64,
    /// Frames handed to the device.
    pub tx_frames: u64,
    /// Times the device reported `WouldBlock` on send.
    pub tx_would_block: u64,
    /// Frames dropped because the transmit backlog was full.
    pub tx_backlog_drops: u64,
    /// Frames dropped because the device failed with an error.
    pub tx_errors: u64,
    /// Receive errors reported by the device.
    pub rx_errors: u64,
    /// Stack thread loop iterations.
    pub loops: u64,
    /// Parked application threads woken because their socket became ready
    /// (or for a shutdown/abort that concerns everyone).
    pub wakeups: u64,
}

/// Whether a `poll_at` deadline has come.
fn is_due(at: Option<Instant>, now: Instant) -> bool {
    at.is_some_and(|t| t <= now)
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A wall-clock deadline as stack time (microseconds since `epoch`),
/// rounded up so the device is never polled before it is due.
fn stack_time(epoch: std::time::Instant, t: std::time::Instant) -> Instant {
    let us = t.saturating_duration_since(epoch).as_nanos().div_ceil(1000);
    Instant::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
}

/// What a parked thread waits for; the stack thread unparks it when the
/// condition holds (or the socket is gone, or has an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interest {
    /// Data, EOF or an error to read.
    TcpRead(TcpHandle),
    /// Send buffer space (or an error).
    TcpWrite(TcpHandle),
    /// A connection to accept.
    TcpAccept(TcpHandle),
    /// The handshake finished or failed.
    TcpConnect(TcpHandle),
    /// A datagram or an error.
    UdpRecv(UdpHandle),
    /// Anything that changed (echo replies, UDP send space).
    Any,
}

impl Interest {
    fn ready(self, stack: &Stack) -> bool {
        let tcp = |h| stack.tcp_status(h);
        match self {
            Interest::TcpRead(h) => {
                tcp(h).map_or(true, |s| s.can_recv || s.pending_error.is_some())
            }
            Interest::TcpWrite(h) => {
                tcp(h).map_or(true, |s| s.can_send || s.pending_error.is_some())
            }
            Interest::TcpAccept(h) => {
                tcp(h).map_or(true, |s| s.accept_ready || s.pending_error.is_some())
            }
            Interest::TcpConnect(h) => tcp(h).map_or(true, |s| {
                s.pending_error.is_some() || !matches!(s.state, State::SynSent | State::SynReceived)
            }),
            Interest::UdpRecv(h) => stack
                .udp_status(h)
                .map_or(true, |s| s.can_recv || s.pending_error.is_some()),
            Interest::Any => true,
        }
    }
}

struct Waiter {
    id: u64,
    interest: Interest,
    thread: Thread,
}

/// What the stack thread is doing, so app threads know when to kick it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sleep {
    Awake,
    Until(Instant),
    Forever,
}

/// Frames waiting for the device to accept them, in order, with their
/// buffers recycled (no allocation in steady state).
struct TxBacklog {
    frames: VecDeque<Vec<u8>>,
    free: Vec<Vec<u8>>,
    limit: usize,
}

impl TxBacklog {
    fn new(limit: usize) -> Self {
        TxBacklog {
            frames: VecDeque::new(),
            free: Vec::new(),
            limit: limit.max(1),
        }
    }

    fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    fn push(&mut self, frame: &[u8], stats: &mut RuntimeStats) {
        if self.frames.len() >= self.limit {
            stats.tx_backlog_drops += 1;
            return;
        }
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        self.frames.push_back(buf);
    }

    /// Send queued frames until the device is full. Returns true when the
    /// backlog is empty afterwards.
    fn flush(&mut self, dev: &mut dyn Device, stats: &mut RuntimeStats) -> bool {
        while let Some(frame) = self.frames.front() {
            match dev.send(frame) {
                Ok(()) => stats.tx_frames += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    stats.tx_would_block += 1;
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => stats.tx_errors += 1,
            }
            if let Some(buf) = self.frames.pop_front() {
                if self.free.len() < 256 {
                    self.free.push(buf);
                }
            }
        }
        true
    }
}

/// Transmit one frame now, or queue it behind earlier frames if the device
/// is (or was) full.
fn transmit(dev: &mut dyn Device, backlog: &mut TxBacklog, stats: &mut RuntimeStats, frame: &[u8]) {
    if !backlog.is_empty() {
        backlog.push(frame, stats);
        return;
    }
    loop {
        match dev.send(frame) {
            Ok(()) => stats.tx_frames += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                stats.tx_would_block += 1;
                backlog.push(frame, stats);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => stats.tx_errors += 1,
        }
        return;
    }
}

/// Everything behind the runtime's lock.
pub(crate) struct Inner {
    pub(crate) stack: Stack,
    dev: Box<dyn Device + Send>,
    backlog: TxBacklog,
    stats: RuntimeStats,
    waiters: Vec<Waiter>,
    next_waiter: u64,
    sleep: Sleep,
    stopped: bool,
    echo: VecDeque<EchoReply>,
}

impl Inner {
    /// When the runtime must next run: the stack's timers or the device's
    /// deferred work (delayed frames, see `Device::next_deadline`).
    fn next_wakeup(&self, epoch: std::time::Instant) -> Option<Instant> {
        let dev = self.dev.next_deadline().map(|t| stack_time(epoch, t));
        earliest(self.stack.poll_at(), dev)
    }

    /// Let the device transmit what it held back and is now due.
    fn poll_device(&mut self) {
        if self.dev.poll_deferred().is_err() {
            self.stats.tx_errors += 1;
        }
    }

    /// `Stack::poll` with the device as transmit path.
    fn poll(&mut self, now: Instant) {
        let Inner {
            stack,
            dev,
            backlog,
            stats,
            ..
        } = self;
        stack.poll(now, &mut |f| transmit(&mut **dev, backlog, stats, f));
    }

    /// Run `f` with the stack and a transmit closure that writes to the
    /// device (or the backlog when the device is full).
    pub(crate) fn with_tx<R>(
        &mut self,
        f: impl FnOnce(&mut Stack, &mut dyn FnMut(&[u8])) -> R,
    ) -> R {
        let Inner {
            stack,
            dev,
            backlog,
            stats,
            ..
        } = self;
        f(stack, &mut |fr| transmit(&mut **dev, backlog, stats, fr))
    }

    fn receive(&mut self, now: Instant, frame: &[u8]) {
        let Inner {
            stack,
            dev,
            backlog,
            stats,
            ..
        } = self;
        stack.receive(now, frame, &mut |f| transmit(&mut **dev, backlog, stats, f));
    }

    /// Move echo replies out of the stack into our bounded backlog.
    pub(crate) fn collect_echo_replies(&mut self) {
        let Inner { stack, echo, .. } = self;
        for r in stack.icmp_echo_replies() {
            if echo.len() >= MAX_ECHO_BACKLOG {
                echo.pop_front();
            }
            echo.push_back(r);
        }
    }

    /// Unpark the threads whose interest is now satisfied.
    fn wake_ready(&mut self) {
        for w in &self.waiters {
            if w.interest.ready(&self.stack) {
                w.thread.unpark();
                self.stats.wakeups += 1;
            }
        }
    }

    /// Unpark every parked thread (they re-check their own condition).
    fn wake_all(&mut self) {
        for w in &self.waiters {
            w.thread.unpark();
            self.stats.wakeups += 1;
        }
    }

    pub(crate) fn take_echo(&mut self, pred: impl Fn(&EchoReply) -> bool) -> Option<EchoReply> {
        let i = self.echo.iter().position(pred)?;
        self.echo.remove(i)
    }
}

/// State shared by the stack thread and every handle.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    wake: EventFd,
    epoch: std::time::Instant,
    stop: AtomicBool,
}

fn stopped_error() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "ustack runtime stopped")
}

impl Shared {
    /// Stack time: microseconds since the runtime started.
    pub(crate) fn now(&self) -> Instant {
        Instant::from_micros(u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock marks the runtime stopped (see
        // `StopGuard`); the data is still memory-safe to look at.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// After an application operation: transmit what it produced, and kick
    /// the stack thread if it sleeps past the new `poll_at` or must start
    /// watching for writability.
    fn after_op(&self, g: &mut Inner, now: Instant, notify: bool) {
        let due_before = is_due(g.stack.poll_at(), now);
        let backlog_was_empty = g.backlog.is_empty();
        g.poll(now);
        let next = g.next_wakeup(self.epoch);
        let kick = match g.sleep {
            Sleep::Awake => false,
            Sleep::Forever => next.is_some(),
            Sleep::Until(t) => next.is_some_and(|n| n < t),
        } || (g.sleep != Sleep::Awake && backlog_was_empty && !g.backlog.is_empty());
        if kick {
            g.sleep = Sleep::Awake;
            self.wake.signal();
        }
        if notify {
            g.wake_all();
        } else if due_before {
            g.wake_ready();
        }
    }

    /// Run `f` on the stack under the lock (with the time and a transmit
    /// path), then transmit what else it left queued.
    pub(crate) fn op<R>(
        &self,
        f: impl FnOnce(&mut Stack, Instant, &mut dyn FnMut(&[u8])) -> R,
    ) -> R {
        self.run_op(f, false)
    }

    /// Like [`op`](Self::op), and wake every blocked thread afterwards (for
    /// operations that can make another thread's wait end: shutdown, abort).
    pub(crate) fn op_notify<R>(
        &self,
        f: impl FnOnce(&mut Stack, Instant, &mut dyn FnMut(&[u8])) -> R,
    ) -> R {
        self.run_op(f, true)
    }

    fn run_op<R>(
        &self,
        f: impl FnOnce(&mut Stack, Instant, &mut dyn FnMut(&[u8])) -> R,
        wake_all: bool,
    ) -> R {
        let mut g = self.lock();
        let now = self.now();
        let r = g.with_tx(|s, tx| f(s, now, tx));
        self.after_op(&mut g, now, wake_all);
        r
    }

    /// Run `attempt` until it is ready, parking between attempts until
    /// `interest` holds.
    ///
    /// `nonblocking` gives `WouldBlock` instead of parking; when `timeout`
    /// passes, the result is `Err(timeout_kind)`.
    pub(crate) fn block_on<T>(
        &self,
        interest: Interest,
        nonblocking: bool,
        timeout: Option<Duration>,
        timeout_kind: io::ErrorKind,
        mut attempt: impl FnMut(&mut Inner, Instant) -> Poll<io::Result<T>>,
    ) -> io::Result<T> {
        let deadline = timeout.map(|d| std::time::Instant::now() + d);
        let mut g = self.lock();
        loop {
            if g.stopped {
                return Err(stopped_error());
            }
            let now = self.now();
            let r = attempt(&mut g, now);
            self.after_op(&mut g, now, false);
            if let Poll::Ready(r) = r {
                return r;
            }
            if nonblocking {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let remaining = match deadline {
                None => None,
                Some(d) => {
                    let rem = d.saturating_duration_since(std::time::Instant::now());
                    if rem.is_zero() {
                        return Err(io::Error::new(timeout_kind, "operation timed out"));
                    }
                    Some(rem)
                }
            };
            let id = g.next_waiter;
            g.next_waiter = g.next_waiter.wrapping_add(1);
            g.waiters.push(Waiter {
                id,
                interest,
                thread: std::thread::current(),
            });
            drop(g);
            // A wake-up between unlocking and parking is not lost: unpark
            // leaves a token that makes this park return at once.
            match remaining {
                None => std::thread::park(),
                Some(rem) => std::thread::park_timeout(rem),
            }
            g = self.lock();
            if let Some(i) = g.waiters.iter().position(|w| w.id == id) {
                g.waiters.swap_remove(i);
            }
        }
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.signal();
    }

    fn mark_stopped(&self) {
        let mut g = self.lock();
        g.stopped = true;
        g.sleep = Sleep::Awake;
        g.wake_all();
    }
}

/// Marks the runtime stopped when the stack thread exits, even by panic.
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
        self.0.mark_stopped();
    }
}

/// The stack thread's loop.
fn run(shared: Arc<Shared>, epoll: Epoll, dev_fd: Option<i32>, opts: RuntimeOptions) {
    let guard = StopGuard(shared);
    let shared = &guard.0;
    let mut rxbuf = vec![0u8; opts.frame_size.max(64)];
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
    let mut watching_out = false;
    let mut last_activity = std::time::Instant::now();
    // Set when the device failed to receive: a broken device (link gone,
    // EIO) stays "readable" for epoll, so back off instead of spinning.
    let mut rx_failed;
    while !shared.stop.load(Ordering::Acquire) {
        let timeout;
        let want_out;
        {
            let mut g = shared.lock();
            let now = shared.now();
            g.sleep = Sleep::Awake;
            g.stats.loops += 1;
            let mut changed = false;

            // 1. Older frames first.
            {
                let Inner {
                    dev,
                    backlog,
                    stats,
                    ..
                } = &mut *g;
                backlog.flush(&mut **dev, stats);
            }
            // Frames the device held back (delay emulation) that are due.
            g.poll_device();

            // 2. A bounded batch of received frames.
            let mut received = 0;
            let mut more = false;
            rx_failed = false;
            while received < opts.rx_batch.max(1) {
                match g.dev.recv(&mut rxbuf) {
                    Ok(Some(n)) => {
                        received += 1;
                        g.stats.rx_frames += 1;
                        let n = n.min(rxbuf.len());
                        if let Some(frame) = rxbuf.get(..n) {
                            g.receive(now, frame);
                        }
                    }
                    Ok(None) => break,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        g.stats.rx_errors += 1;
                        rx_failed = true;
                        break;
                    }
                }
            }
            if received >= opts.rx_batch.max(1) {
                more = true;
            }
            if received > 0 {
                changed = true;
            }

            // 3. Timers and queued output (bounded rounds).
            let mut rounds = 0;
            loop {
                let due = is_due(g.stack.poll_at(), now);
                if due {
                    changed = true;
                }
                g.poll(now);
                rounds += 1;
                if rounds >= MAX_POLL_ROUNDS || !is_due(g.stack.poll_at(), now) {
                    break;
                }
            }
            if is_due(g.stack.poll_at(), now) {
                more = true;
            }
            if changed {
                g.wake_ready();
            }
            if changed {
                last_activity = std::time::Instant::now();
            }

            // 4. How long to sleep.
            want_out = !g.backlog.is_empty();
            // The device may hold frames back (delay emulation): wake up
            // when they are due even if its fd never becomes readable.
            let dev_next = g.dev.next_deadline().map(|t| stack_time(shared.epoch, t));
            if is_due(dev_next, now) {
                more = true;
            }
            let next = earliest(g.stack.poll_at(), dev_next);
            let busy = opts.busy_poll.is_some_and(|b| last_activity.elapsed() < b);
            timeout = if more || busy {
                Some(Duration::ZERO)
            } else {
                let t = next.map(|t| t.saturating_duration_since(now));
                match (t, dev_fd) {
                    (t, Some(_)) => t,
                    (Some(t), None) => Some(t.min(opts.idle_poll)),
                    (None, None) => Some(opts.idle_poll),
                }
            };
            g.sleep = match (timeout, next) {
                (Some(d), _) if d.is_zero() => Sleep::Awake,
                (_, Some(n)) => Sleep::Until(n),
                (_, None) if dev_fd.is_none() => Sleep::Until(now + opts.idle_poll),
                (_, None) => Sleep::Forever,
            };
        }

        if let Some(fd) = dev_fd {
            if want_out != watching_out {
                let ev = if want_out {
                    EPOLLIN | EPOLLOUT
                } else {
                    EPOLLIN
                };
                if epoll.modify(fd, ev, TOKEN_DEV).is_ok() {
                    watching_out = want_out;
                }
            }
        }
        match epoll.wait(&mut events, timeout) {
            Ok(n) => {
                for ev in events.iter().take(n) {
                    if ev.u64 == TOKEN_WAKE {
                        shared.wake.drain();
                    }
                }
            }
            Err(_) => {
                // epoll itself failing is not recoverable by retrying fast.
                std::thread::sleep(opts.idle_poll);
            }
        }
        if rx_failed {
            std::thread::sleep(RX_ERROR_BACKOFF);
        }
    }
}

struct NetInner {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    drain_on_drop: Duration,
    ping_ident: u16,
}

impl NetInner {
    fn stop(&self) {
        self.shared.request_stop();
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// Wait (bounded) until no TCP connection has unsent or unacknowledged data.
    fn drain(&self) {
        let deadline = std::time::Instant::now() + self.drain_on_drop;
        loop {
            let busy = {
                let g = self.shared.lock();
                if g.stopped {
                    return;
                }
                g.stack.tcp_sockets().iter().any(|s| s.send_queue > 0)
                    || !g.backlog.is_empty()
                    || g.dev.next_deadline().is_some()
            };
            if !busy || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for NetInner {
    fn drop(&mut self) {
        if !self.drain_on_drop.is_zero() {
            self.drain();
        }
        self.stop();
    }
}

/// A running stack: a handle to the runtime, cheap to clone. Sockets keep
/// their `Net` alive; when the last handle goes, the stack thread is stopped
/// (after giving TCP connections [`RuntimeOptions::drain_on_drop`] to
/// deliver what was written).
#[derive(Clone)]
pub struct Net {
    inner: Arc<NetInner>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addr = self.shared().lock().stack.config().addr;
        f.debug_struct("Net").field("addr", &addr).finish()
    }
}

/// The contract's spelling (docs/CONTRACTS.md): `Runtime::start(config,
/// device)` is [`Net::start`] with default [`RuntimeOptions`].
#[derive(Debug, Clone, Copy)]
pub struct Runtime;

impl Runtime {
    pub fn start(config: Config, device: Box<dyn Device + Send>) -> io::Result<Net> {
        Net::start(config, device, RuntimeOptions::default())
    }
}

/// One ICMP echo reply received by [`Net::ping`].
#[derive(Debug, Clone)]
pub struct PingReply {
    /// The reply as the stack reported it.
    pub reply: EchoReply,
    /// Time from sending the request to receiving the reply.
    pub rtt: Duration,
}

impl Net {
    /// Start a stack on `device` with one stack thread.
    ///
    /// An all-zero `config.secret` or a zero `config.seed` means "not given":
    /// it is filled from `getrandom(2)`.
    pub fn start(
        mut config: Config,
        device: Box<dyn Device + Send>,
        opts: RuntimeOptions,
    ) -> io::Result<Net> {
        if config.secret == [0u8; 16] {
            sys::getrandom(&mut config.secret)?;
        }
        if config.seed == 0 {
            let mut b = [0u8; 8];
            sys::getrandom(&mut b)?;
            config.seed = u64::from_ne_bytes(b) | 1;
        }
        let mut ident = [0u8; 2];
        sys::getrandom(&mut ident)?;

        let epoll = Epoll::new()?;
        let wake = EventFd::new()?;
        epoll.add(wake.raw(), EPOLLIN, TOKEN_WAKE)?;
        let dev_fd = device.raw_fd();
        if let Some(fd) = dev_fd {
            epoll.add(fd, EPOLLIN, TOKEN_DEV)?;
        }

        let epoch = std::time::Instant::now();
        let stack = Stack::new(config, Instant::ZERO);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                stack,
                dev: device,
                backlog: TxBacklog::new(opts.tx_backlog),
                stats: RuntimeStats::default(),
                waiters: Vec::new(),
                next_waiter: 0,
                sleep: Sleep::Awake,
                stopped: false,
                echo: VecDeque::new(),
            }),
            wake,
            epoch,
            stop: AtomicBool::new(false),
        });
        let drain_on_drop = opts.drain_on_drop;
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(opts.thread_name.clone())
            .spawn(move || run(thread_shared, epoll, dev_fd, opts))?;
        Ok(Net {
            inner: Arc::new(NetInner {
                shared,
                thread: Mutex::new(Some(thread)),
                drain_on_drop,
                ping_ident: u16::from_ne_bytes(ident),
            }),
        })
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Stop the stack thread now and join it (no draining). Blocked and
    /// later socket operations fail with `NotConnected`. Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop();
    }

    /// Whether the stack thread is still running.
    pub fn is_running(&self) -> bool {
        !self.shared().lock().stopped
    }

    /// Run `f` on the stack under its lock (escape hatch), then transmit what
    /// it produced and wake the stack thread and blocked sockets as needed.
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> R {
        self.shared().op_notify(|s, _, _| f(s))
    }

    /// The stack's clock now (microseconds since the runtime started).
    pub fn now(&self) -> Instant {
        self.shared().now()
    }

    /// A snapshot of the protocol counters.
    pub fn counters(&self) -> Counters {
        self.shared().lock().stack.counters().clone()
    }

    /// A snapshot of the runtime's device-level statistics.
    pub fn runtime_stats(&self) -> RuntimeStats {
        self.shared().lock().stats
    }

    /// The TCP socket table (`ss`-like).
    pub fn sockets(&self) -> Vec<ustack_core::TcpInfo> {
        self.shared().lock().stack.tcp_sockets()
    }

    /// Send one ICMP echo request to `dst` and wait up to `timeout` for the
    /// matching reply. `Ok(None)` = no reply in time.
    pub fn ping(
        &self,
        dst: Ipv4Addr,
        seq: u16,
        payload: &[u8],
        timeout: Duration,
    ) -> io::Result<Option<PingReply>> {
        let ident = self.inner.ping_ident;
        let sent_at = self.shared().op(|s, now, _tx| {
            s.icmp_echo_send(now, dst, ident, seq, payload)
                .map(|()| now)
        });
        let sent_at = sent_at.map_err(|e| e.into_io())?;
        let r = self.shared().block_on(
            Interest::Any,
            false,
            Some(timeout),
            io::ErrorKind::TimedOut,
            |g, _| {
                g.collect_echo_replies();
                match g.take_echo(|r| r.ident == ident && r.seq == seq && r.from == dst) {
                    Some(reply) => Poll::Ready(Ok(reply)),
                    None => Poll::Pending,
                }
            },
        );
        match r {
            Ok(reply) => {
                let rtt = reply.at.saturating_duration_since(sent_at);
                Ok(Some(PingReply { reply, rtt }))
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::RawFd;

    /// Accepts `room` frames, then says WouldBlock; optionally fails hard.
    struct Choky {
        room: usize,
        sent: Vec<Vec<u8>>,
        fail_next: bool,
    }

    impl Device for Choky {
        fn recv(&mut self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(None)
        }
        fn send(&mut self, frame: &[u8]) -> io::Result<()> {
            if self.fail_next {
                self.fail_next = false;
                return Err(io::Error::other("link down"));
            }
            if self.room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.room -= 1;
            self.sent.push(frame.to_vec());
            Ok(())
        }
        fn mtu(&self) -> usize {
            1500
        }
        fn mac(&self) -> Option<[u8; 6]> {
            None
        }
        fn raw_fd(&self) -> Option<RawFd> {
            None
        }
    }

    #[test]
    fn backlog_keeps_order_and_bounds() {
        let mut dev = Choky {
            room: 1,
            sent: Vec::new(),
            fail_next: false,
        };
        let mut q = TxBacklog::new(2);
        let mut st = RuntimeStats::default();
        transmit(&mut dev, &mut q, &mut st, b"one");
        transmit(&mut dev, &mut q, &mut st, b"two"); // device full -> queued
        transmit(&mut dev, &mut q, &mut st, b"three"); // queued behind "two"
        transmit(&mut dev, &mut q, &mut st, b"four"); // backlog full -> dropped
        assert_eq!(st.tx_frames, 1);
        assert_eq!(st.tx_would_block, 1);
        assert_eq!(st.tx_backlog_drops, 1);
        assert!(!q.flush(&mut dev, &mut st), "still full");
        dev.room = 10;
        assert!(q.flush(&mut dev, &mut st));
        let sent: Vec<&[u8]> = dev.sent.iter().map(|v| &v[..]).collect();
        assert_eq!(sent, vec![&b"one"[..], b"two", b"three"]);
        assert_eq!(st.tx_frames, 3);
        // Buffers are recycled, not reallocated.
        assert_eq!(q.free.len(), 2);
        // A hard error drops the frame and counts it; the next one goes out.
        dev.fail_next = true;
        transmit(&mut dev, &mut q, &mut st, b"lost");
        transmit(&mut dev, &mut q, &mut st, b"five");
        assert_eq!(st.tx_errors, 1);
        assert_eq!(dev.sent.last().map(|v| &v[..]), Some(&b"five"[..]));
    }

    #[test]
    fn due_only_when_deadline_reached() {
        let now = Instant::from_millis(10);
        assert!(!is_due(None, now));
        assert!(is_due(Some(Instant::from_millis(10)), now));
        assert!(!is_due(Some(Instant::from_millis(11)), now));
    }
}
