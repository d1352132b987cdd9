//! The per-process watchdog thread, so that blocked calls can sleep on their futex
//! without a timeout.
//!
//! A futex wait with a timeout arms and cancels a kernel timer every time, which costs
//! about 0.6 µs per sleep on the development VM — as much as a pipe round trip loses to a
//! futex one. But a waiter must notice a peer that dies (a dead process wakes nobody), a
//! filler killed in the middle of a hand-off, and an ended domain. Instead of waking every
//! waiter every 10 ms, one thread per process (`ustack-ipc-watch`, started on the first
//! sleep) checks every 10 ms the waiters of its process that are asleep ("armed") and wakes
//! those whose peer is gone, whose hand-off stalled, whose domain ended, or that have been
//! asleep for a whole period (they then re-check everything themselves, as after a
//! timeout; short sleeps, as in a busy ping-pong, cost no timer at all). It exits after
//! about a second without sleeping waiters and is started again when needed; in a `fork`ed
//! child a new one is started. If no thread can be started, waiters fall back to 10 ms
//! timeouts.

use crate::bell::{Bell, Kind, BELLS_FORBIDDEN};
use crate::domain::{st_op, Domain, OP_FILLING, SLEEP_TRAP};
use crate::endpoint::{peer_gone, Peer};
use crate::sys;
use std::cell::UnsafeCell;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

const PERIOD: Duration = Duration::from_millis(10);
/// Scans without any armed waiter before the thread exits.
const IDLE_SCANS: u32 = 100;
const NO_PEER: u32 = u32::MAX;
const AFFINITY_RECHECK_NS: u64 = 100_000_000;

/// Pid of the process whose watchdog thread is running (0: none).
static RUNNING_PID: AtomicU32 = AtomicU32::new(0);

/// Does the watchdog wake sleeps that last a whole period (the safety net)? Only tests
/// that hunt for lost wake-ups turn it off (`debug::set_safety_net`).
pub(crate) static SAFETY_NET: AtomicBool = AtomicBool::new(true);
/// Safety-net wake-ups done by this process's watchdog so far.
pub(crate) static NET_WAKES: AtomicU64 = AtomicU64::new(0);

/// The registry, behind a spin lock rather than a `Mutex`: a process forked while another
/// of its threads held the lock must be able to take it (the holder does not exist in the
/// child); the atfork child handler releases it (`after_fork_in_child`).
struct RegCell(UnsafeCell<Registry>);
// SAFETY: the registry is only accessed through `RegGuard`, i.e. under REG_LOCK.
unsafe impl Sync for RegCell {}
static REG: RegCell = RegCell(UnsafeCell::new(Registry {
    pid: 0,
    entries: Vec::new(),
    running: false,
}));
static REG_LOCK: AtomicBool = AtomicBool::new(false);

struct RegGuard;

impl std::ops::Deref for RegGuard {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        // SAFETY: we hold REG_LOCK, so nobody else accesses the registry.
        unsafe { &*REG.0.get() }
    }
}

impl std::ops::DerefMut for RegGuard {
    fn deref_mut(&mut self) -> &mut Registry {
        // SAFETY: we hold REG_LOCK, so nobody else accesses the registry.
        unsafe { &mut *REG.0.get() }
    }
}

impl Drop for RegGuard {
    fn drop(&mut self) {
        REG_LOCK.store(false, Ordering::Release);
    }
}

fn lock() -> RegGuard {
    while REG_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    RegGuard
}

/// In a `fork`ed child (atfork handler; async-signal-safe: atomics only): the parent's
/// watchdog thread does not exist here, and a lock held by one of the parent's threads
/// would never be released. The registry itself is reset by the next `ensure_running`
/// (its pid differs).
pub(crate) fn after_fork_in_child() {
    REG_LOCK.store(false, Ordering::Release);
    RUNNING_PID.store(0, Ordering::Release);
}

struct Registry {
    /// Process the registry belongs to (a forked child starts afresh).
    pid: u32,
    entries: Vec<Weak<Watch>>,
    running: bool,
}

/// What a sleeping owner waits on (for `Watch::arm`).
#[derive(Clone, Copy)]
pub(crate) enum Sleep {
    Futex,
    Bell(Kind),
    /// A hand-off trap on this listener (a descriptor number in this process).
    Trap(i32),
}

/// One endpoint's entry: whether it sleeps, and on whom it waits.
pub(crate) struct Watch {
    dom: Domain,
    slot: u32,
    /// The owner's doorbells (eventfd, pipe), created on first use (`None` if they
    /// cannot be).
    bells: [OnceLock<Option<Bell>>; 2],
    /// The owner sleeps on a doorbell or in a hand-off trap: its `Slot::sleeping` value
    /// (0: on its futex word).
    on_bell: AtomicU32,
    /// The owner thread's hand-off listener while it traps (a descriptor number here).
    trap_fd: AtomicI32,
    /// May the owner's thread run on one CPU only (then it sleeps on the eventfd), and
    /// when that was last checked (coarse clock, ns).
    single_cpu: AtomicBool,
    cpu_checked: AtomicU64,
    /// Futex word value the owner went to sleep with.
    sleep_v: AtomicU32,
    registered_pid: AtomicU32,
    active: AtomicBool,
    p_slot: AtomicU32,
    p_gen: AtomicU32,
    p_pid: AtomicU32,
    p_tid: AtomicU32,
    p_start: AtomicU64,
    /// Watchdog-private: the FILLING state seen at the previous scan.
    filling: AtomicU64,
    /// Sleeps so far (bumped by `arm`), and the count the watchdog saw at its last scan.
    arms: AtomicU64,
    seen_arms: AtomicU64,
}

impl Watch {
    pub(crate) fn new(dom: Domain, slot: u32) -> Arc<Watch> {
        Arc::new(Watch {
            dom,
            slot,
            bells: [OnceLock::new(), OnceLock::new()],
            on_bell: AtomicU32::new(0),
            trap_fd: AtomicI32::new(-1),
            single_cpu: AtomicBool::new(false),
            cpu_checked: AtomicU64::new(0),
            sleep_v: AtomicU32::new(0),
            registered_pid: AtomicU32::new(0),
            active: AtomicBool::new(false),
            p_slot: AtomicU32::new(NO_PEER),
            p_gen: AtomicU32::new(0),
            p_pid: AtomicU32::new(0),
            p_tid: AtomicU32::new(0),
            p_start: AtomicU64::new(0),
            filling: AtomicU64::new(0),
            arms: AtomicU64::new(0),
            seen_arms: AtomicU64::new(u64::MAX),
        })
    }

    /// Which doorbell the owner should sleep on now: the eventfd if its thread may run on
    /// one CPU only (no placement to influence; the cheaper wake-up), else the pipe (see
    /// `bell.rs`). The affinity is looked up at most every 100 ms (`now`: the coarse clock,
    /// which the caller has read anyway).
    pub(crate) fn bell_kind(&self, now: u64) -> Kind {
        let last = self.cpu_checked.load(Ordering::Relaxed);
        if last == 0 || now.saturating_sub(last) >= AFFINITY_RECHECK_NS {
            self.single_cpu
                .store(sys::single_cpu_affinity(), Ordering::Relaxed);
            self.cpu_checked.store(now.max(1), Ordering::Relaxed);
        }
        if self.single_cpu.load(Ordering::Relaxed) {
            Kind::Eventfd
        } else {
            Kind::Pipe
        }
    }

    /// The owner's doorbell of kind `k`, if wakers can ring it (created and published on
    /// first use).
    pub(crate) fn bell(&self, k: Kind) -> Option<&Bell> {
        let slot = self.dom.slot(self.slot);
        let b = self.bells[k as usize]
            .get_or_init(|| {
                let b = Bell::create(k)?;
                // Publish, unless a waker has already found us unreachable.
                let _ = k.published(slot).compare_exchange(
                    -1,
                    b.ring_end().as_raw_fd(),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
                Some(b)
            })
            .as_ref()?;
        // A waker that could not reach it marked the slot: back to the futex.
        (slot.bell_fd.load(Ordering::Relaxed) != BELLS_FORBIDDEN
            && k.published(slot).load(Ordering::Relaxed) == b.ring_end().as_raw_fd())
        .then_some(b)
    }

    /// Announce that the owner is about to sleep without a timeout (with futex word value
    /// `v`, on its doorbell of kind `bell` if any), waiting on `peer`. Returns false if no
    /// watchdog can run (the caller must then sleep on the futex with a timeout).
    pub(crate) fn arm(self: &Arc<Self>, peer: Option<&Peer>, v: u32, on: Sleep) -> bool {
        self.sleep_v.store(v, Ordering::Relaxed);
        let (kind, trap_fd) = match on {
            Sleep::Futex => (0, -1),
            Sleep::Bell(k) => (k.sleeping(), -1),
            Sleep::Trap(fd) => (SLEEP_TRAP, fd),
        };
        self.trap_fd.store(trap_fd, Ordering::Relaxed);
        self.on_bell.store(kind, Ordering::Relaxed);
        self.arms.fetch_add(1, Ordering::Relaxed);
        match peer {
            Some(p) => {
                let (slot, gen, pid, tid, start) = p.parts();
                self.p_gen.store(gen, Ordering::Relaxed);
                self.p_pid.store(pid, Ordering::Relaxed);
                self.p_tid.store(tid, Ordering::Relaxed);
                self.p_start.store(start, Ordering::Relaxed);
                self.p_slot.store(slot, Ordering::Relaxed);
            }
            None => self.p_slot.store(NO_PEER, Ordering::Relaxed),
        }
        self.active.store(true, Ordering::SeqCst);
        let pid = sys::getpid();
        if self.registered_pid.load(Ordering::Relaxed) == pid
            && RUNNING_PID.load(Ordering::SeqCst) == pid
        {
            return true;
        }
        if ensure_running(self, pid) {
            true
        } else {
            self.active.store(false, Ordering::Relaxed);
            false
        }
    }

    /// The owner woke up.
    pub(crate) fn disarm(&self) {
        self.active.store(false, Ordering::Relaxed);
    }

    /// Should the sleeping owner be woken?
    fn needs_wake(&self) -> bool {
        if self.dom.is_ended() {
            return true;
        }
        let s = self.dom.slot(self.slot).state.load(Ordering::Acquire);
        if st_op(s) == OP_FILLING {
            // A hand-off that has not completed for a whole period: the filler may have
            // died; the owner checks.
            if self.filling.swap(s, Ordering::Relaxed) == s {
                return true;
            }
        } else {
            self.filling.store(0, Ordering::Relaxed);
        }
        // A doorbell that a waker could not ring: the word changed but the owner sleeps.
        if self.on_bell.load(Ordering::Relaxed) != 0
            && self.dom.slot(self.slot).futex.load(Ordering::SeqCst)
                != self.sleep_v.load(Ordering::Relaxed)
        {
            return true;
        }
        let slot = self.p_slot.load(Ordering::Relaxed);
        if slot == NO_PEER {
            return false;
        }
        let p = Peer::from_parts(
            slot,
            self.p_gen.load(Ordering::Relaxed),
            self.p_pid.load(Ordering::Relaxed),
            self.p_tid.load(Ordering::Relaxed),
            self.p_start.load(Ordering::Relaxed),
        );
        // A torn read (the owner re-armed meanwhile) can at worst cause a spurious wake-up
        // or delay the check by one period.
        peer_gone(&self.dom, &p, true)
    }

    fn wake(&self) {
        let s = self.dom.slot(self.slot);
        s.futex.fetch_add(1, Ordering::SeqCst);
        let on = self.on_bell.load(Ordering::Relaxed);
        if on == SLEEP_TRAP {
            crate::handoff::release(self.trap_fd.load(Ordering::Relaxed), s);
        }
        if let Some(k) = Kind::of_sleeping(on) {
            if let Some(Some(b)) = self.bells[k as usize].get() {
                crate::bell::ring_fd(b.ring_end());
            }
        }
        sys::futex_wake(&s.futex);
    }
}

/// Register `w` and make sure this process's watchdog runs. False if it cannot.
fn ensure_running(w: &Arc<Watch>, pid: u32) -> bool {
    let mut reg = lock();
    if reg.pid != pid {
        // A forked child: the parent's thread does not exist here. The parent's entries
        // are let go without touching them (a fork in the middle of an update may have
        // left them inconsistent).
        reg.pid = pid;
        std::mem::forget(std::mem::take(&mut reg.entries));
        reg.running = false;
    }
    if w.registered_pid.load(Ordering::Relaxed) != pid {
        reg.entries.retain(|e| e.strong_count() > 0);
        reg.entries.push(Arc::downgrade(w));
        w.registered_pid.store(pid, Ordering::Relaxed);
    }
    if !reg.running {
        let spawned = std::thread::Builder::new()
            .name("ustack-ipc-watch".into())
            .stack_size(64 << 10)
            .spawn(move || run(pid));
        if spawned.is_err() {
            return false;
        }
        reg.running = true;
    }
    RUNNING_PID.store(pid, Ordering::SeqCst);
    true
}

fn run(pid: u32) {
    let mut idle = 0u32;
    loop {
        std::thread::sleep(PERIOD);
        let list: Vec<Arc<Watch>> = {
            let mut reg = lock();
            if reg.pid != pid {
                return;
            }
            reg.entries.retain(|e| e.strong_count() > 0);
            reg.entries.iter().filter_map(Weak::upgrade).collect()
        };
        let mut armed = false;
        for w in &list {
            if w.active.load(Ordering::SeqCst) {
                armed = true;
                // A sleep that has lasted a whole period is woken so that its owner
                // re-checks everything itself (as a 10 ms timeout would have made it do):
                // a safety net should a wake-up ever be missed. Short sleeps, as in a busy
                // ping-pong, are left alone.
                let a = w.arms.load(Ordering::Relaxed);
                let long = w.seen_arms.swap(a, Ordering::Relaxed) == a
                    && SAFETY_NET.load(Ordering::Relaxed);
                if w.needs_wake() {
                    w.wake();
                } else if long {
                    NET_WAKES.fetch_add(1, Ordering::Relaxed);
                    w.wake();
                }
            }
        }
        drop(list);
        idle = if armed { 0 } else { idle + 1 };
        if idle >= IDLE_SCANS {
            let mut reg = lock();
            // Withdraw, then look once more: a waiter that armed before seeing the
            // withdrawal is seen here; one that arms after it starts a new thread.
            RUNNING_PID.store(0, Ordering::SeqCst);
            let any = reg
                .entries
                .iter()
                .filter_map(Weak::upgrade)
                .any(|w| w.active.load(Ordering::SeqCst));
            if any {
                RUNNING_PID.store(pid, Ordering::SeqCst);
                idle = 0;
                continue;
            }
            reg.running = false;
            return;
        }
    }
}
