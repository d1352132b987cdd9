//! The runtime: one stack thread per [`Net`] that owns device receive and
//! timers, and the shared state application threads use to run socket
//! operations directly on the [`Stack`].
//!
//! # Locking
//!
//! Two locks, always taken in this order when both are needed:
//!
//! 1. the stack lock (`Mutex<Inner>`): the [`Stack`], the waiters, the
//!    pollers, and the frames the stack produced since they were last
//!    handed to the device;
//! 2. the device lock (`Mutex<DevSide>`): the device and its transmit
//!    backlog.
//!
//! No device I/O and no wake-up system call happens under the stack lock.
//! Frames the stack transmits (from `receive`, `poll` or a socket call) wait
//! in the stack, each in the buffer it was built in (`Stack::set_tx_owned`:
//! no copy); before the stack lock is released, the device lock is taken
//! and the frames swapped into the device side for the buffers written last
//! time (`Stack::swap_tx_frames`: no allocation in steady state), then the
//! stack lock is released and the frames written. Taking the device
//! lock before releasing the stack lock keeps batches in the order the stack
//! produced them (two threads cannot overtake each other), while other
//! threads already run socket calls. The stack thread reads a burst of
//! frames through the device's receive half (`Device::split_rx`: a TAP's
//! second descriptor) holding no lock, or, for a device without one, holding
//! only the device lock, then takes the stack lock to process them. With
//! the half, a sender's write (for a TAP it carries the kernel's receive
//! processing of up to 64 KB) and the burst of reads do not wait for each
//! other.
//!
//! # Threads and wake-ups
//!
//! Application threads lock, run the socket operation, then call
//! `Stack::poll` so whatever the operation produced (a SYN, data, a window
//! update) leaves right away from the calling thread. They park only when
//! they must block, after registering what they wait for (an `Interest`
//! keyed by socket). Whoever drives the stack (the stack thread after a
//! burst of frames or timers, an application thread after its operation)
//! then takes the stack's readiness events (`Stack::take_events`: the
//! sockets that gained something) and wakes only the waiters and pollers
//! registered on those sockets: the cost of a wake-up is independent of
//! the number of connections and of blocked threads. The threads to unpark
//! are collected under the lock and unparked after it is released.
//!
//! When an operation moves the next deadline earlier than the stack
//! thread's sleep, or leaves frames in the transmit backlog, the caller
//! kicks the stack thread's `eventfd`.
//!
//! # Device deadlines
//!
//! A device may hold frames back (`ustack_dev::netem::Netem` emulates link
//! delay): the stack thread sleeps no longer than `Device::next_deadline`,
//! calls `Device::poll_deferred` on every iteration so delayed frames leave
//! on time, and application threads kick it when their output moved the
//! device's deadline earlier than the thread's wake-up time.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Poll;
use std::thread::{JoinHandle, Thread, ThreadId};
use std::time::Duration;

use ustack_core::tcp::State;
use ustack_core::time::Instant;
use ustack_core::{
    Config, Counters, EchoReply, FrameParts, LinkOffload, Readiness, SocketEvent, Stack, TcpHandle,
    TxFrames, UdpHandle,
};
use ustack_dev::{Device, RxHalf};

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
/// `sleep_until` value: the stack thread is awake (or about to look again).
const AWAKE: u64 = 0;
/// `sleep_until` value: the stack thread sleeps until a frame or a kick.
const FOREVER: u64 = u64::MAX;

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
    /// Parked application threads (and pollers) woken because their socket
    /// became ready (or for a shutdown/abort that concerns them).
    pub wakeups: u64,
    /// Readiness events taken from the stack.
    pub events: u64,
}

/// Device-side statistics, kept under the device lock.
#[derive(Debug, Clone, Copy, Default)]
struct TxStats {
    tx_frames: u64,
    tx_would_block: u64,
    tx_backlog_drops: u64,
    tx_errors: u64,
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

/// A socket, as waiters and pollers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SockKey {
    Tcp(TcpHandle),
    Udp(UdpHandle),
}

/// What a parked thread waits for; it is unparked when an event for its
/// socket arrives and the condition holds (or the socket is gone, or has an
/// error).
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
    /// Anything that changed (echo replies, UDP send space): woken after
    /// every burst of activity. Only a few such waiters exist (pings,
    /// datagram senders facing a full transmit queue).
    Any,
}

impl Interest {
    fn key(self) -> Option<SockKey> {
        match self {
            Interest::TcpRead(h)
            | Interest::TcpWrite(h)
            | Interest::TcpAccept(h)
            | Interest::TcpConnect(h) => Some(SockKey::Tcp(h)),
            Interest::UdpRecv(h) => Some(SockKey::Udp(h)),
            Interest::Any => None,
        }
    }

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
                .udp_status_addr(h)
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

/// Frames in one buffer (no allocation per frame): `data` holds them back
/// to back, `ends` where each ends.
#[derive(Default)]
struct FrameBatch {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl FrameBatch {
    fn push(&mut self, frame: &[u8]) {
        self.data.extend_from_slice(frame);
        self.ends.push(self.data.len());
    }
    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }
    fn frames(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let f = self.data.get(start..end).unwrap_or(&[]);
            start = end;
            f
        })
    }
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

    /// Queue the frame made of `parts` (gathered into one buffer).
    fn push_parts(&mut self, parts: &[&[u8]], stats: &mut TxStats) {
        if self.frames.len() >= self.limit {
            stats.tx_backlog_drops += 1;
            return;
        }
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        for p in parts {
            buf.extend_from_slice(p);
        }
        self.frames.push_back(buf);
    }

    /// Send queued frames until the device is full. Returns true when the
    /// backlog is empty afterwards.
    fn flush(&mut self, dev: &mut dyn Device, stats: &mut TxStats) -> bool {
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
fn transmit(dev: &mut dyn Device, backlog: &mut TxBacklog, stats: &mut TxStats, frame: &[u8]) {
    transmit_parts(dev, backlog, stats, &[frame]);
}

/// [`transmit`] for a frame given as consecutive parts (headers, then a
/// TCP payload by reference to a send buffer): one vectored write.
fn transmit_parts(
    dev: &mut dyn Device,
    backlog: &mut TxBacklog,
    stats: &mut TxStats,
    parts: &[&[u8]],
) {
    if !backlog.is_empty() {
        backlog.push_parts(parts, stats);
        return;
    }
    loop {
        // (A single part is a plain `send`: every device's
        // `send_vectored` does that.)
        match dev.send_vectored(parts) {
            Ok(()) => stats.tx_frames += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                stats.tx_would_block += 1;
                backlog.push_parts(parts, stats);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => stats.tx_errors += 1,
        }
        return;
    }
}

/// Transmit a frame the stack handed out (see [`transmit_parts`]).
fn transmit_frame(
    dev: &mut dyn Device,
    backlog: &mut TxBacklog,
    stats: &mut TxStats,
    frame: FrameParts<'_>,
) {
    frame.with_slices(|parts| transmit_parts(dev, backlog, stats, parts));
}

/// Everything behind the device lock.
struct DevSide {
    dev: Box<dyn Device + Send>,
    backlog: TxBacklog,
    /// The frames the stack transmitted, taken from it by
    /// `Stack::swap_tx_frames` (and, once written, given back to it for
    /// their buffers on the next swap).
    frames: TxFrames,
    /// Frames a transmit callback was handed (copied; the stack hands
    /// frames out by ownership, so this stays empty in practice), swapped
    /// with `Inner::out`.
    batch: FrameBatch,
    stats: TxStats,
}

impl DevSide {
    /// Write the frames just swapped in (`self.frames`, then
    /// `self.batch`) to the device (or the backlog). Called once per swap:
    /// `self.frames` keeps its buffers for the stack to take back.
    fn write_batch(&mut self) {
        let DevSide {
            dev,
            backlog,
            frames,
            batch,
            stats,
        } = self;
        for f in frames.iter() {
            transmit_frame(&mut **dev, backlog, stats, f);
        }
        // Written or queued (copied): the send buffers may reuse their
        // storage.
        frames.release_payloads();
        for f in batch.frames() {
            transmit(&mut **dev, backlog, stats, f);
        }
        batch.clear();
    }
}

/// A registration of a socket with a [`Poller`].
struct Registration {
    poller: usize,
    token: u64,
    /// In the poller's queue already.
    queued: bool,
}

/// A poller's state behind the stack lock.
#[derive(Default)]
struct PollerState {
    /// Registered sockets with news, each at most once.
    queue: Vec<SockKey>,
    /// The thread waiting in [`Poller::wait`], if any.
    waiter: Option<Thread>,
    /// Keys registered with this poller (removed on drop).
    count: usize,
}

/// Everything behind the stack lock.
pub(crate) struct Inner {
    pub(crate) stack: Stack,
    /// Frames handed to a transmit callback, to be written by whoever
    /// unlocks (the stack's own frames wait in the stack, see `finish`).
    out: FrameBatch,
    stats: RuntimeStats,
    waiters: HashMap<SockKey, Vec<Waiter>>,
    any_waiters: Vec<Waiter>,
    next_waiter: u64,
    regs: HashMap<SockKey, Registration>,
    pollers: Vec<Option<PollerState>>,
    stopped: bool,
    /// Why the stack thread stopped on its own (its device went away).
    failure: Option<(io::ErrorKind, String)>,
    echo: VecDeque<EchoReply>,
    /// Threads to unpark once the lock is released.
    to_wake: Vec<Thread>,
    /// Scratch for `dispatch_events` (kept: no allocation per call).
    ev_keys: Vec<SockKey>,
    /// The poller whose events the stack thread handles itself
    /// ([`Poller::run_on_stack_thread`]), if any.
    inline_poller: Option<usize>,
}

impl Inner {
    /// Whether the stack thread's own poller has events waiting.
    fn inline_queued(&self) -> bool {
        self.inline_poller
            .and_then(|id| self.pollers.get(id))
            .is_some_and(|p| p.as_ref().is_some_and(|p| !p.queue.is_empty()))
    }

    /// `Stack::poll` with the output batch as transmit path.
    fn poll(&mut self, now: Instant) {
        let Inner { stack, out, .. } = self;
        stack.poll(now, &mut |f| out.push(f));
    }

    /// Run `f` with the stack and a transmit closure (frames go to the
    /// output batch, written to the device after the lock is released).
    pub(crate) fn with_tx<R>(
        &mut self,
        f: impl FnOnce(&mut Stack, &mut dyn FnMut(&[u8])) -> R,
    ) -> R {
        let Inner { stack, out, .. } = self;
        f(stack, &mut |fr| out.push(fr))
    }

    /// A burst of frames read from the device, coalesced where they can
    /// be (see [`Stack::receive_burst`]).
    fn receive_burst<'a>(&mut self, now: Instant, frames: impl IntoIterator<Item = &'a [u8]>) {
        let Inner { stack, out, .. } = self;
        stack.receive_burst(now, frames, &mut |f| out.push(f));
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

    pub(crate) fn take_echo(&mut self, pred: impl Fn(&EchoReply) -> bool) -> Option<EchoReply> {
        let i = self.echo.iter().position(pred)?;
        self.echo.remove(i)
    }

    /// Take the stack's readiness events and schedule the wake-ups they
    /// call for: the waiters on each socket whose condition now holds, and
    /// the poller the socket is registered with. O(events).
    fn dispatch_events(&mut self) {
        let Inner {
            stack,
            stats,
            waiters,
            regs,
            pollers,
            to_wake,
            ev_keys,
            ..
        } = self;
        let mut n = 0u64;
        let mut keys = std::mem::take(ev_keys);
        stack.take_events(&mut |e| {
            n += 1;
            match e {
                SocketEvent::Tcp(h, _) => keys.push(SockKey::Tcp(h)),
                SocketEvent::Udp(h) => keys.push(SockKey::Udp(h)),
                SocketEvent::PendingSyn => {}
            }
        });
        stats.events += n;
        for &key in &keys {
            if let Some(list) = waiters.get(&key) {
                for w in list {
                    if w.interest.ready(stack) {
                        to_wake.push(w.thread.clone());
                        stats.wakeups += 1;
                    }
                }
            }
            if let Some(reg) = regs.get_mut(&key) {
                if !reg.queued {
                    if let Some(Some(p)) = pollers.get_mut(reg.poller) {
                        reg.queued = true;
                        p.queue.push(key);
                        if let Some(t) = p.waiter.take() {
                            to_wake.push(t);
                            stats.wakeups += 1;
                        }
                    }
                }
            }
        }
        keys.clear();
        *ev_keys = keys;
    }

    /// Wake every waiter on `key` (they re-check their own condition).
    fn wake_key(&mut self, key: SockKey) {
        if let Some(list) = self.waiters.get(&key) {
            for w in list {
                self.to_wake.push(w.thread.clone());
                self.stats.wakeups += 1;
            }
        }
        if let Some(reg) = self.regs.get_mut(&key) {
            if !reg.queued {
                if let Some(Some(p)) = self.pollers.get_mut(reg.poller) {
                    reg.queued = true;
                    p.queue.push(key);
                    if let Some(t) = p.waiter.take() {
                        self.to_wake.push(t);
                        self.stats.wakeups += 1;
                    }
                }
            }
        }
    }

    /// Wake the waiters interested in anything.
    fn wake_any(&mut self) {
        for w in &self.any_waiters {
            self.to_wake.push(w.thread.clone());
            self.stats.wakeups += 1;
        }
    }

    /// Unpark every parked thread and poller (shutdown).
    fn wake_all(&mut self) {
        for list in self.waiters.values() {
            for w in list {
                self.to_wake.push(w.thread.clone());
            }
        }
        for w in &self.any_waiters {
            self.to_wake.push(w.thread.clone());
        }
        for p in self.pollers.iter_mut().flatten() {
            if let Some(t) = p.waiter.take() {
                self.to_wake.push(t);
            }
        }
    }

    fn add_waiter(&mut self, interest: Interest) -> u64 {
        let id = self.next_waiter;
        self.next_waiter = self.next_waiter.wrapping_add(1);
        let w = Waiter {
            id,
            interest,
            thread: std::thread::current(),
        };
        match interest.key() {
            Some(k) => self.waiters.entry(k).or_default().push(w),
            None => self.any_waiters.push(w),
        }
        id
    }

    fn remove_waiter(&mut self, interest: Interest, id: u64) {
        match interest.key() {
            Some(k) => {
                if let Entry::Occupied(mut e) = self.waiters.entry(k) {
                    let list = e.get_mut();
                    if let Some(i) = list.iter().position(|w| w.id == id) {
                        list.swap_remove(i);
                    }
                    if list.is_empty() {
                        e.remove();
                    }
                }
            }
            None => {
                if let Some(i) = self.any_waiters.iter().position(|w| w.id == id) {
                    self.any_waiters.swap_remove(i);
                }
            }
        }
    }

    /// The readiness of a socket now (`NONE` for a stale handle).
    fn readiness(&self, key: SockKey) -> Readiness {
        match key {
            SockKey::Tcp(h) => self
                .stack
                .tcp_readiness(h)
                .unwrap_or(Readiness::READABLE | Readiness::CLOSED),
            SockKey::Udp(h) => match self.stack.udp_status_addr(h) {
                Ok(s) if s.can_recv => Readiness::READABLE | Readiness::WRITABLE,
                Ok(_) => Readiness::WRITABLE,
                Err(_) => Readiness::READABLE | Readiness::CLOSED,
            },
        }
    }
}

/// State shared by the stack thread and every handle.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    dev: Mutex<DevSide>,
    wake: EventFd,
    epoch: std::time::Instant,
    stop: AtomicBool,
    /// When the stack thread wakes up on its own, in stack microseconds;
    /// `AWAKE` while it runs, `FOREVER` when only a frame or a kick wakes
    /// it. Written under the stack lock (and at wake-up), read by threads
    /// that may have to kick it.
    sleep_until: AtomicU64,
    /// The stack thread (set when it starts).
    stack_thread: OnceLock<ThreadId>,
    /// A poller and handler handed over by [`Poller::run_on_stack_thread`],
    /// until the stack thread takes them (it looks when `inline_new` is set).
    inline: Mutex<Option<InlineLoop>>,
    inline_new: AtomicBool,
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

    /// Whether the calling thread is the stack thread (which must never
    /// park waiting for itself).
    pub(crate) fn on_stack_thread(&self) -> bool {
        self.stack_thread
            .get()
            .is_some_and(|id| *id == std::thread::current().id())
    }

    fn lock_dev(&self) -> MutexGuard<'_, DevSide> {
        self.dev.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Kick the stack thread out of its sleep (once per sleep).
    fn kick(&self) {
        if self.sleep_until.swap(AWAKE, Ordering::AcqRel) != AWAKE {
            self.wake.signal();
        }
    }

    /// Release the stack lock after work on the stack: schedule the
    /// wake-ups the stack's events call for, hand the frames it produced to
    /// the device (taking the device lock before releasing the stack lock,
    /// so batches keep their order), write them, kick the stack thread if
    /// it sleeps past the new deadline, and unpark the woken threads.
    fn finish(&self, mut g: MutexGuard<'_, Inner>, any: bool) {
        g.dispatch_events();
        if any {
            g.wake_any();
        }
        let sleep = self.sleep_until.load(Ordering::Acquire);
        // Events for the stack thread's own poller (a socket call from
        // another thread) must not wait for its next frame or deadline.
        let mut kick = sleep != AWAKE
            && (g.stack.poll_at().is_some_and(|n| n.total_micros() < sleep) || g.inline_queued());
        let wake = std::mem::take(&mut g.to_wake);
        if g.out.is_empty() && !g.stack.has_tx_frames() {
            drop(g);
        } else {
            let mut d = self.lock_dev();
            g.stack.swap_tx_frames(&mut d.frames);
            std::mem::swap(&mut g.out, &mut d.batch);
            drop(g);
            let backlog_was_empty = d.backlog.is_empty();
            d.write_batch();
            if sleep != AWAKE {
                // The stack thread must start watching for writability, or
                // the device holds back a frame it must send earlier.
                kick |= backlog_was_empty && !d.backlog.is_empty();
                kick |= d
                    .dev
                    .next_deadline()
                    .is_some_and(|t| stack_time(self.epoch, t).total_micros() < sleep);
            }
            drop(d);
        }
        if kick {
            self.kick();
        }
        for t in wake {
            t.unpark();
        }
    }

    /// Run `f` on the stack under the lock (with the time and a transmit
    /// path), then transmit what it produced and wake whoever its effects
    /// concern.
    pub(crate) fn op<R>(
        &self,
        f: impl FnOnce(&mut Stack, Instant, &mut dyn FnMut(&[u8])) -> R,
    ) -> R {
        let mut g = self.lock();
        let now = self.now();
        let r = g.with_tx(|s, tx| f(s, now, tx));
        g.poll(now);
        self.finish(g, false);
        r
    }

    /// Like [`op`](Self::op), and wake every thread blocked on `key`
    /// afterwards (for operations that can end another thread's wait on
    /// the same socket: shutdown, close, abort).
    pub(crate) fn op_on<R>(
        &self,
        key: SockKey,
        f: impl FnOnce(&mut Stack, Instant, &mut dyn FnMut(&[u8])) -> R,
    ) -> R {
        let mut g = self.lock();
        let now = self.now();
        let r = g.with_tx(|s, tx| f(s, now, tx));
        g.poll(now);
        g.wake_key(key);
        self.finish(g, false);
        r
    }

    /// Like [`op_on`](Self::op_on) for an operation that releases the
    /// socket: its poller registration goes too.
    pub(crate) fn op_release<R>(
        &self,
        key: SockKey,
        f: impl FnOnce(&mut Stack, Instant, &mut dyn FnMut(&[u8])) -> R,
    ) -> R {
        let mut g = self.lock();
        let now = self.now();
        let r = g.with_tx(|s, tx| f(s, now, tx));
        g.poll(now);
        g.wake_key(key);
        if let Some(reg) = g.regs.remove(&key) {
            if let Some(Some(p)) = g.pollers.get_mut(reg.poller) {
                p.count = p.count.saturating_sub(1);
            }
        }
        self.finish(g, false);
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
            g.poll(now);
            if let Poll::Ready(r) = r {
                self.finish(g, false);
                return r;
            }
            if nonblocking {
                self.finish(g, false);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if self.on_stack_thread() {
                // Parking here would wait for the thread that is parked.
                self.finish(g, false);
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "a blocking socket call on the stack thread would never return",
                ));
            }
            let remaining = match deadline {
                None => None,
                Some(d) => {
                    let rem = d.saturating_duration_since(std::time::Instant::now());
                    if rem.is_zero() {
                        self.finish(g, false);
                        return Err(io::Error::new(timeout_kind, "operation timed out"));
                    }
                    Some(rem)
                }
            };
            let id = g.add_waiter(interest);
            self.finish(g, false);
            // A wake-up between unlocking and parking is not lost: unpark
            // leaves a token that makes this park return at once.
            match remaining {
                None => std::thread::park(),
                Some(rem) => std::thread::park_timeout(rem),
            }
            g = self.lock();
            g.remove_waiter(interest, id);
        }
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.signal();
    }

    fn mark_stopped(&self) {
        let mut g = self.lock();
        g.stopped = true;
        g.wake_all();
        let wake = std::mem::take(&mut g.to_wake);
        drop(g);
        for t in wake {
            t.unpark();
        }
    }
}

/// Marks the runtime stopped when the stack thread exits, even by panic.
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
        self.0.mark_stopped();
        // A handler handed over but never taken: no new one can come now
        // (`stopped` is set), and keeping it would keep its `Net`, and so
        // the runtime, alive forever.
        let left = self
            .0
            .inline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(left);
    }
}

/// Frames read from the device in one burst: fixed slots of `frame_size`
/// bytes, allocated once (pages are touched only as frames fill them).
struct RxBurst {
    buf: Vec<u8>,
    frame_size: usize,
    lens: Vec<usize>,
}

impl RxBurst {
    fn new(frames: usize, frame_size: usize) -> Self {
        RxBurst {
            buf: vec![0u8; frames * frame_size],
            frame_size,
            lens: Vec::with_capacity(frames),
        }
    }
    fn capacity(&self) -> usize {
        self.buf.len() / self.frame_size
    }
    fn frame(&self, i: usize) -> &[u8] {
        let start = i * self.frame_size;
        let len = self.lens.get(i).copied().unwrap_or(0);
        self.buf.get(start..start + len).unwrap_or(&[])
    }
}

/// Read up to a burst of frames with `recv` (the device's, or its receive
/// half's). Returns the receive error that ended the burst, if one did.
fn read_burst(
    recv: &mut dyn FnMut(&mut [u8]) -> io::Result<Option<usize>>,
    rx: &mut RxBurst,
    stats_rx_errors: &mut u64,
) -> Option<io::Error> {
    rx.lens.clear();
    let cap = rx.capacity();
    while rx.lens.len() < cap {
        let i = rx.lens.len();
        let start = i * rx.frame_size;
        let Some(slot) = rx.buf.get_mut(start..start + rx.frame_size) else {
            break;
        };
        match recv(slot) {
            Ok(Some(n)) => rx.lens.push(n.min(rx.frame_size)),
            Ok(None) => break,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                *stats_rx_errors += 1;
                return Some(e);
            }
        }
    }
    None
}

/// Whether a receive error means the device is gone for good: `EBADFD` is
/// what a TAP whose interface was deleted answers; `ENODEV` and `ENXIO`
/// say the device no longer exists. Anything else is retried.
fn device_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADFD) | Some(libc::ENODEV) | Some(libc::ENXIO)
    )
}

/// The stack thread's loop.
fn run(
    shared: Arc<Shared>,
    epoll: Epoll,
    dev_fd: Option<i32>,
    opts: RuntimeOptions,
    mut rx_half: Option<Box<dyn RxHalf>>,
) {
    let guard = StopGuard(shared);
    let shared = &guard.0;
    let mut rx = RxBurst::new(opts.rx_batch.max(1), opts.frame_size.max(64));
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
    let mut watching_out = false;
    let mut last_activity = std::time::Instant::now();
    let _ = shared.stack_thread.set(std::thread::current().id());
    // Dropped before `guard` (declared after it): the handler's sockets
    // close while the runtime still takes socket calls.
    let mut inline: Option<InlineLoop> = None;
    while !shared.stop.load(Ordering::Acquire) {
        shared.sleep_until.store(AWAKE, Ordering::Release);
        if shared.inline_new.swap(false, Ordering::AcqRel) {
            if let Some(il) = shared
                .inline
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                inline = Some(il);
            }
        }

        // 1. The device, without the stack lock: older frames first, frames
        //    the device held back (delay emulation) that are due, then a
        //    bounded burst of received frames: through the device's receive
        //    half when it has one, without the device lock, so a sender
        //    writing meanwhile (a TAP write carries the kernel's receive
        //    processing of up to 64 KB) and this burst do not wait for each
        //    other.
        let mut rx_errors = 0;
        let mut rx_err = None;
        {
            let mut d = shared.lock_dev();
            let DevSide {
                dev,
                backlog,
                stats,
                ..
            } = &mut *d;
            backlog.flush(&mut **dev, stats);
            if d.dev.poll_deferred().is_err() {
                d.stats.tx_errors += 1;
            }
            if rx_half.is_none() {
                rx_err = read_burst(&mut |b| d.dev.recv(b), &mut rx, &mut rx_errors);
            }
        }
        if let Some(h) = rx_half.as_mut() {
            rx_err = read_burst(&mut |b| h.recv(b), &mut rx, &mut rx_errors);
        }
        let received = rx.lens.len();
        if let Some(e) = rx_err.as_ref().filter(|e| device_gone(e)) {
            // Nothing will come in or go out again: stop, saying why
            // (`Net::failure`), rather than retry for ever.
            let mut g = shared.lock();
            g.stats.rx_errors += rx_errors;
            g.failure = Some((e.kind(), format!("the device is gone: {e}")));
            break;
        }
        let rx_failed = rx_err.is_some();

        // 2. The stack: the frames, then timers and queued output.
        let mut g = shared.lock();
        let now = shared.now();
        g.stats.loops += 1;
        g.stats.rx_errors += rx_errors;
        g.stats.rx_frames += received as u64;
        g.receive_burst(now, (0..received).map(|i| rx.frame(i)));
        let mut more = received >= rx.capacity();
        let mut changed = received > 0;
        let mut rounds = 0;
        loop {
            if is_due(g.stack.poll_at(), now) {
                changed = true;
            }
            g.poll(now);
            rounds += 1;
            if rounds >= MAX_POLL_ROUNDS || !is_due(g.stack.poll_at(), now) {
                break;
            }
        }
        let mut stack_next = g.stack.poll_at();
        // A handler handed over meanwhile (under the stack lock): take it
        // in the next pass.
        if is_due(stack_next, now) || shared.inline_new.load(Ordering::Acquire) {
            more = true;
        }
        if changed {
            last_activity = std::time::Instant::now();
        }
        let mut busy = opts.busy_poll.is_some_and(|b| last_activity.elapsed() < b);
        // Provisional sleep (the device may shorten it below): published
        // under the stack lock, so a socket call that moves a deadline
        // earlier sees it and kicks. With a handler of our own to run, we
        // stay "awake" until it has run (its socket calls must not kick
        // this thread) and publish the sleep afterwards.
        let plan = |awake: bool, next: Option<Instant>, now: Instant| {
            if awake {
                AWAKE
            } else {
                match (next, dev_fd) {
                    (Some(t), _) => t.total_micros().max(1),
                    (None, Some(_)) => FOREVER,
                    (None, None) => (now + opts.idle_poll).total_micros().max(1),
                }
            }
        };
        if inline.is_none() {
            shared
                .sleep_until
                .store(plan(more || busy, stack_next, now), Ordering::Release);
        }
        // 3. Release the stack lock, write what it produced, wake threads.
        shared.finish(g, changed);

        // 3b. The handler run on this thread (`Poller::run_on_stack_thread`):
        //     the events of this pass, without a wake-up of another thread.
        //     A pass that raised none (an ACK, a timer) costs one look under
        //     the lock, the one that publishes the sleep.
        let mut inline_gone = false;
        if let Some(il) = inline.as_mut() {
            let mut g = shared.lock();
            let mut rounds = 0;
            while rounds < INLINE_ROUNDS && g.inline_queued() {
                drop(g);
                rounds += 1;
                match il.round() {
                    Ok(true) => last_activity = std::time::Instant::now(),
                    Ok(false) => {}
                    // The poller is gone with the runtime's stop.
                    Err(_) => inline_gone = true,
                }
                g = shared.lock();
                if inline_gone {
                    break;
                }
            }
            busy = opts.busy_poll.is_some_and(|b| last_activity.elapsed() < b);
            let now = shared.now();
            stack_next = g.stack.poll_at();
            if is_due(stack_next, now) || g.inline_queued() {
                more = true;
            }
            shared
                .sleep_until
                .store(plan(more || busy, stack_next, now), Ordering::Release);
            drop(g);
        }
        if inline_gone {
            inline = None;
        }

        // 4. How long to sleep: the stack's deadline, the device's.
        let (dev_next, want_out) = {
            let d = shared.lock_dev();
            (
                d.dev.next_deadline().map(|t| stack_time(shared.epoch, t)),
                !d.backlog.is_empty(),
            )
        };
        if is_due(dev_next, shared.now()) {
            more = true;
        }
        let next = earliest(stack_next, dev_next);
        let timeout = if more || busy || shared.sleep_until.load(Ordering::Acquire) == AWAKE {
            Some(Duration::ZERO)
        } else {
            let t = next.map(|t| t.saturating_duration_since(shared.now()));
            match (t, dev_fd) {
                (t, Some(_)) => t,
                (Some(t), None) => Some(t.min(opts.idle_poll)),
                (None, None) => Some(opts.idle_poll),
            }
        };

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
        if self.shared.on_stack_thread() {
            // Called from a handler on the stack thread (or the last handle
            // dropped there): the thread ends after this pass; joining
            // itself would never return.
            return;
        }
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
                let d = self.shared.lock_dev();
                g.stack.tcp_sockets().iter().any(|s| s.send_queue > 0)
                    || !d.backlog.is_empty()
                    || d.dev.next_deadline().is_some()
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
        // On the stack thread nothing would deliver the data meanwhile.
        if !self.drain_on_drop.is_zero() && !self.shared.on_stack_thread() {
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
        mut device: Box<dyn Device + Send>,
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
        // Received frames come through the device's receive half where it
        // has one (see `run`).
        let rx_half = device.split_rx();
        let dev_fd = device.raw_fd();
        if let Some(fd) = dev_fd {
            epoll.add(fd, EPOLLIN, TOKEN_DEV)?;
        }

        let epoch = std::time::Instant::now();
        let mut stack = Stack::new(config, Instant::ZERO);
        // Frames leave the stack in the buffers they were built in.
        stack.set_tx_owned(true);
        let off = device.offloads();
        stack.set_link_offload(LinkOffload {
            vnet_hdr: off.vnet_hdr,
            tso4: off.tso4,
            tso6: off.tso6,
            tx_csum: off.tx_csum,
        });
        let mut opts = opts;
        if off.vnet_hdr {
            // GSO super-frames are up to 64 KB whatever the MTU: an IPv4
            // datagram of 65,535 bytes, or an IPv6 header and a payload of
            // 65,535 bytes.
            opts.frame_size = opts
                .frame_size
                .max(ustack_dev::VNET_HDR_LEN + ustack_dev::ETHERNET_HEADER_LEN + 40 + 65_535);
        }
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                stack,
                out: FrameBatch::default(),
                stats: RuntimeStats::default(),
                waiters: HashMap::new(),
                any_waiters: Vec::new(),
                next_waiter: 0,
                regs: HashMap::new(),
                pollers: Vec::new(),
                stopped: false,
                failure: None,
                echo: VecDeque::new(),
                to_wake: Vec::new(),
                ev_keys: Vec::new(),
                inline_poller: None,
            }),
            dev: Mutex::new(DevSide {
                dev: device,
                backlog: TxBacklog::new(opts.tx_backlog),
                frames: TxFrames::new(),
                batch: FrameBatch::default(),
                stats: TxStats::default(),
            }),
            wake,
            epoch,
            stop: AtomicBool::new(false),
            sleep_until: AtomicU64::new(AWAKE),
            stack_thread: OnceLock::new(),
            inline: Mutex::new(None),
            inline_new: AtomicBool::new(false),
        });
        let drain_on_drop = opts.drain_on_drop;
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(opts.thread_name.clone())
            .spawn(move || run(thread_shared, epoll, dev_fd, opts, rx_half))?;
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

    /// Why the stack stopped on its own, if it did: its device went away
    /// (a TAP whose interface was deleted, say). `None` while it runs and
    /// after a [`shutdown`](Self::shutdown).
    pub fn failure(&self) -> Option<io::Error> {
        let g = self.shared().lock();
        g.failure
            .as_ref()
            .map(|(kind, msg)| io::Error::new(*kind, msg.clone()))
    }

    /// Run `f` on the stack under its lock (escape hatch), then transmit what
    /// it produced and wake the threads its effects concern (through the
    /// stack's readiness events, and every thread waiting for "anything").
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> R {
        let sh = self.shared();
        let mut g = sh.lock();
        let now = sh.now();
        let r = f(&mut g.stack);
        g.poll(now);
        sh.finish(g, true);
        r
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
        let sh = self.shared();
        let mut s = sh.lock().stats;
        let tx = sh.lock_dev().stats;
        s.tx_frames = tx.tx_frames;
        s.tx_would_block = tx.tx_would_block;
        s.tx_backlog_drops = tx.tx_backlog_drops;
        s.tx_errors = tx.tx_errors;
        s
    }

    /// The TCP socket table (`ss`-like).
    pub fn sockets(&self) -> Vec<ustack_core::TcpInfo> {
        self.shared().lock().stack.tcp_sockets()
    }

    /// Send one ICMP echo request to `dst` (ICMPv6 for an IPv6 address)
    /// and wait up to `timeout` for the matching reply. `Ok(None)` = no
    /// reply in time.
    pub fn ping(
        &self,
        dst: impl Into<std::net::IpAddr>,
        seq: u16,
        payload: &[u8],
        timeout: Duration,
    ) -> io::Result<Option<PingReply>> {
        let dst = dst.into();
        let sent_at = self.echo_request(dst, seq, payload)?;
        match self.echo_reply(dst, Some(seq), timeout)? {
            Some(reply) => {
                let rtt = reply.at.saturating_duration_since(sent_at);
                Ok(Some(PingReply { reply, rtt }))
            }
            None => Ok(None),
        }
    }

    /// Send one ICMP echo request to `dst` (ICMPv6 for an IPv6 address)
    /// with this stack's echo identifier, without waiting for the reply:
    /// the stack's time when it was sent (a reply's `at` minus it is the
    /// round trip). Its reply is taken with [`Net::echo_reply`], so that a
    /// caller may have several requests in flight, as ping(8) has.
    pub fn echo_request(
        &self,
        dst: impl Into<std::net::IpAddr>,
        seq: u16,
        payload: &[u8],
    ) -> io::Result<Instant> {
        let dst = dst.into();
        let ident = self.inner.ping_ident;
        let sent_at = self.shared().op(|s, now, _tx| {
            match dst {
                std::net::IpAddr::V4(d) => s.icmp_echo_send(now, d, ident, seq, payload),
                std::net::IpAddr::V6(d) => s.icmp6_echo_send(now, d, ident, seq, payload),
            }
            .map(|()| now)
        });
        sent_at.map_err(|e| e.into_io())
    }

    /// Wait up to `timeout` for an echo reply from `from` to one of this
    /// stack's requests ([`Net::echo_request`]): the one numbered `seq`,
    /// or any if `seq` is None. `Ok(None)` = none in time.
    pub fn echo_reply(
        &self,
        from: std::net::IpAddr,
        seq: Option<u16>,
        timeout: Duration,
    ) -> io::Result<Option<EchoReply>> {
        let ident = self.inner.ping_ident;
        let r = self.shared().block_on(
            Interest::Any,
            false,
            Some(timeout),
            io::ErrorKind::TimedOut,
            |g, _| {
                g.collect_echo_replies();
                match g.take_echo(|r| {
                    r.ident == ident && seq.is_none_or(|s| r.seq == s) && r.from == from
                }) {
                    Some(reply) => Poll::Ready(Ok(reply)),
                    None => Poll::Pending,
                }
            },
        );
        match r {
            Ok(reply) => Ok(Some(reply)),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A new [`Poller`] on this stack.
    pub fn poller(&self) -> Poller {
        let mut g = self.shared().lock();
        let id = match g.pollers.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                g.pollers.push(None);
                g.pollers.len() - 1
            }
        };
        if let Some(slot) = g.pollers.get_mut(id) {
            *slot = Some(PollerState::default());
        }
        Poller {
            net: self.clone(),
            id,
            scratch: Mutex::new(Vec::new()),
        }
    }
}

// ---------------------------------------------------------------- poller

/// A socket that can be registered with a [`Poller`]: [`crate::TcpStream`],
/// [`crate::TcpListener`], [`crate::UdpSocket`].
pub trait Source {
    #[doc(hidden)]
    fn source_key(&self) -> SourceKey;
}

/// Opaque name of a registrable socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceKey(pub(crate) SockKey);

/// One readiness event from [`Poller::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollEvent {
    /// The token the socket was registered with.
    pub token: u64,
    /// Its readiness when the event was collected.
    pub readiness: Readiness,
}

/// Readiness notification for many ustack sockets from one thread, like
/// `epoll` in edge-triggered mode: a socket is reported when it *gains*
/// something (new data, end of stream, an error, send space after a full
/// buffer, a completed handshake, a connection to accept), once per
/// [`wait`](Self::wait) however often it gained meanwhile. After an event,
/// do I/O on the socket (non-blocking) until it gives `WouldBlock`;
/// stopping earlier means no further event comes for what is left.
///
/// Registering a socket reports its current readiness at once if it has
/// any. A socket belongs to at most one poller. Closing a socket
/// deregisters it. The cost of an event is independent of the number of
/// sockets registered.
pub struct Poller {
    net: Net,
    id: usize,
    scratch: Mutex<Vec<SockKey>>,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller").field("id", &self.id).finish()
    }
}

impl Poller {
    /// Watch `source`; its events carry `token`. Registering it again
    /// replaces the token and, like `EPOLL_CTL_MOD`, reports the socket
    /// again if it is ready now (for a caller that stopped short of
    /// `WouldBlock` and wants to come back to it). `AlreadyExists` if
    /// another poller watches it.
    pub fn register(&self, source: &impl Source, token: u64) -> io::Result<()> {
        let key = source.source_key().0;
        let sh = self.net.shared();
        let mut g = sh.lock();
        if g.stopped {
            return Err(stopped_error());
        }
        let ready = !g.readiness(key).is_empty();
        let Inner { regs, pollers, .. } = &mut *g;
        let Some(Some(p)) = pollers.get_mut(self.id) else {
            return Err(stopped_error());
        };
        match regs.entry(key) {
            Entry::Occupied(mut e) => {
                let r = e.get_mut();
                if r.poller != self.id {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "socket registered with another poller",
                    ));
                }
                // Like EPOLL_CTL_MOD: the readiness is looked at again.
                r.token = token;
                if ready && !r.queued {
                    r.queued = true;
                    p.queue.push(key);
                }
            }
            Entry::Vacant(e) => {
                p.count += 1;
                let r = e.insert(Registration {
                    poller: self.id,
                    token,
                    queued: false,
                });
                if ready {
                    r.queued = true;
                    p.queue.push(key);
                }
            }
        }
        Ok(())
    }

    /// Stop watching `source` (no effect if it is not registered here).
    pub fn deregister(&self, source: &impl Source) {
        let key = source.source_key().0;
        let mut g = self.net.shared().lock();
        if g.regs.get(&key).is_some_and(|r| r.poller == self.id) {
            g.regs.remove(&key);
            if let Some(Some(p)) = g.pollers.get_mut(self.id) {
                p.count = p.count.saturating_sub(1);
            }
        }
    }

    /// Wait until at least one registered socket has news or `timeout`
    /// passes, and append the events to `events`. Returns how many were
    /// appended (0 on timeout). `NotConnected` once the runtime stopped.
    pub fn wait(
        &self,
        events: &mut Vec<PollEvent>,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        self.wait_max(events, timeout, usize::MAX)
    }

    /// [`wait`](Self::wait), taking at most `max` sockets' news; the rest
    /// stay queued for the next call.
    fn wait_max(
        &self,
        events: &mut Vec<PollEvent>,
        timeout: Option<Duration>,
        max: usize,
    ) -> io::Result<usize> {
        let sh = self.net.shared();
        // A zero timeout (the stack thread's own poller, a caller polling)
        // reads no clock.
        let poll_only = timeout.is_some_and(|d| d.is_zero());
        let deadline = timeout
            .filter(|_| !poll_only)
            .map(|d| std::time::Instant::now() + d);
        let before = events.len();
        let mut scratch = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let mut g = sh.lock();
        loop {
            let queue = match g.pollers.get_mut(self.id) {
                Some(Some(p)) => {
                    p.waiter = None;
                    let mut queue = std::mem::replace(&mut p.queue, std::mem::take(&mut *scratch));
                    if queue.len() > max {
                        // Still queued (their `queued` flags stay set).
                        p.queue.extend(queue.drain(max..));
                    }
                    queue
                }
                _ => return Err(stopped_error()),
            };
            for &key in &queue {
                let Some(token) = g.regs.get_mut(&key).and_then(|r| {
                    (r.poller == self.id).then(|| {
                        r.queued = false;
                        r.token
                    })
                }) else {
                    continue;
                };
                let readiness = g.readiness(key);
                if !readiness.is_empty() {
                    events.push(PollEvent { token, readiness });
                }
            }
            let mut queue = queue;
            queue.clear();
            *scratch = queue;
            if events.len() > before {
                return Ok(events.len() - before);
            }
            if g.stopped {
                return Err(stopped_error());
            }
            if poll_only {
                return Ok(0);
            }
            if sh.on_stack_thread() {
                // Parking would wait for this very thread (a handler run by
                // `run_on_stack_thread` calling `wait` on some poller).
                return Ok(0);
            }
            let remaining = match deadline {
                None => None,
                Some(d) => {
                    let rem = d.saturating_duration_since(std::time::Instant::now());
                    if rem.is_zero() {
                        return Ok(0);
                    }
                    Some(rem)
                }
            };
            if let Some(Some(p)) = g.pollers.get_mut(self.id) {
                p.waiter = Some(std::thread::current());
            }
            drop(g);
            match remaining {
                None => std::thread::park(),
                Some(rem) => std::thread::park_timeout(rem),
            }
            g = sh.lock();
        }
    }
}

/// An event handler run by the stack thread.
type InlineHandler = Box<dyn FnMut(&Poller, &[PollEvent]) + Send>;

/// What [`Poller::run_on_stack_thread`] hands to the stack thread.
struct InlineLoop {
    poller: Poller,
    handler: InlineHandler,
    events: Vec<PollEvent>,
}

/// Rounds of events the stack thread hands its handler per pass before it
/// looks at the device again (events the handler's own calls raise come
/// back in the next round).
const INLINE_ROUNDS: usize = 4;
/// Sockets' news per round: with many connections changing at once (a
/// burst of closes), the device is still read every few thousand events.
const INLINE_EVENTS: usize = 1024;

impl InlineLoop {
    /// One round: the handler on the events waiting (at most
    /// [`INLINE_EVENTS`] sockets' news). `Ok(true)` if it ran; an error
    /// once the runtime stopped.
    fn round(&mut self) -> io::Result<bool> {
        self.events.clear();
        let n = self
            .poller
            .wait_max(&mut self.events, Some(Duration::ZERO), INLINE_EVENTS)?;
        if n > 0 {
            (self.handler)(&self.poller, &self.events);
        }
        Ok(n > 0)
    }
}

impl Poller {
    /// Hand this poller to the stack thread, which from now on calls
    /// `handler` with the poller and its events itself, after each pass over
    /// the device and the timers, instead of waking a thread blocked in
    /// [`wait`](Self::wait): request/response and bulk traffic then cost no
    /// wake-up of another thread (the relay of `ustack run` works this way).
    ///
    /// The handler runs on the stack thread, so it must not block: its
    /// sockets should be non-blocking (a blocking call that would park
    /// returns `WouldBlock` there, as [`wait`](Self::wait) returns at once),
    /// and time spent in it is time the device is not read. Each call
    /// gets events collected since the last one (at most 1,024; the rest
    /// stay queued); the stack thread gives it at most a few rounds per pass
    /// and comes back at once if more events wait. Events raised by other
    /// threads' socket calls wake the stack thread.
    ///
    /// The handler and what it owns (sockets, the poller, a [`Net`]) live on
    /// the stack thread until the runtime stops ([`Net::shutdown`]); they
    /// are dropped there, which closes the sockets. `AlreadyExists` if a
    /// poller already runs on the stack thread, `NotConnected` once the
    /// runtime stopped.
    pub fn run_on_stack_thread<F>(self, handler: F) -> io::Result<()>
    where
        F: FnMut(&Poller, &[PollEvent]) + Send + 'static,
    {
        let sh = Arc::clone(&self.net.inner.shared);
        let mut g = sh.lock();
        if g.stopped {
            return Err(stopped_error());
        }
        if g.inline_poller.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a poller already runs on the stack thread",
            ));
        }
        g.inline_poller = Some(self.id);
        // Under the stack lock: the stack thread publishes its sleep under
        // it too and looks at `inline_new` then, or the kick below finds
        // it asleep and wakes it.
        *sh.inline.lock().unwrap_or_else(PoisonError::into_inner) = Some(InlineLoop {
            poller: self,
            handler: Box::new(handler),
            events: Vec::new(),
        });
        sh.inline_new.store(true, Ordering::Release);
        drop(g);
        sh.kick();
        Ok(())
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let mut g = self.net.shared().lock();
        if g.inline_poller == Some(self.id) {
            g.inline_poller = None;
        }
        let had = match g.pollers.get_mut(self.id) {
            Some(slot) => slot.take().map_or(0, |p| p.count),
            None => 0,
        };
        if had > 0 {
            let id = self.id;
            g.regs.retain(|_, r| r.poller != id);
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
        let mut st = TxStats::default();
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
