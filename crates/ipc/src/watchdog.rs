//! The per-process watchdog thread, so that blocked calls can sleep on their futex
//! without a timeout.
//!
//! A futex wait with a timeout arms and cancels a kernel timer every time, which costs
//! about 0.6 µs per sleep on the development VM — as much as a pipe round trip loses to a
//! futex one. But a waiter must notice a peer that dies (a dead process wakes nobody), a
//! filler killed in the middle of a hand-off, and an ended domain. Instead of waking every
//! waiter every 10 ms, one thread per process (`ustack-ipc-watch`, started on the first
//! sleep) checks every 10 ms the waiters of its process that are asleep ("armed") and wakes
//! those whose peer is gone, whose hand-off stalled, or whose domain ended. It exits after
//! about a second without sleeping waiters and is started again when needed; in a `fork`ed
//! child a new one is started. If no thread can be started, waiters fall back to 10 ms
//! timeouts.

use crate::domain::{st_op, Domain, OP_FILLING};
use crate::endpoint::{peer_gone, Peer};
use crate::sys;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

const PERIOD: Duration = Duration::from_millis(10);
/// Scans without any armed waiter before the thread exits.
const IDLE_SCANS: u32 = 100;
const NO_PEER: u32 = u32::MAX;

/// Pid of the process whose watchdog thread is running (0: none).
static RUNNING_PID: AtomicU32 = AtomicU32::new(0);
static REG: Mutex<Registry> = Mutex::new(Registry {
    pid: 0,
    entries: Vec::new(),
    running: false,
});

struct Registry {
    /// Process the registry belongs to (a forked child starts afresh).
    pid: u32,
    entries: Vec<Weak<Watch>>,
    running: bool,
}

/// One endpoint's entry: whether it sleeps, and on whom it waits.
pub(crate) struct Watch {
    dom: Domain,
    slot: u32,
    registered_pid: AtomicU32,
    active: AtomicBool,
    p_slot: AtomicU32,
    p_gen: AtomicU32,
    p_pid: AtomicU32,
    p_tid: AtomicU32,
    p_start: AtomicU64,
    /// Watchdog-private: the FILLING state seen at the previous scan.
    filling: AtomicU64,
}

impl Watch {
    pub(crate) fn new(dom: Domain, slot: u32) -> Arc<Watch> {
        Arc::new(Watch {
            dom,
            slot,
            registered_pid: AtomicU32::new(0),
            active: AtomicBool::new(false),
            p_slot: AtomicU32::new(NO_PEER),
            p_gen: AtomicU32::new(0),
            p_pid: AtomicU32::new(0),
            p_tid: AtomicU32::new(0),
            p_start: AtomicU64::new(0),
            filling: AtomicU64::new(0),
        })
    }

    /// Announce that the owner is about to sleep without a timeout, waiting on `peer`.
    /// Returns false if no watchdog can run (the caller must then sleep with a timeout).
    pub(crate) fn arm(self: &Arc<Self>, peer: Option<&Peer>) -> bool {
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
        sys::futex_wake(&s.futex);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    match REG.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Register `w` and make sure this process's watchdog runs. False if it cannot.
fn ensure_running(w: &Arc<Watch>, pid: u32) -> bool {
    let mut reg = lock();
    if reg.pid != pid {
        // A forked child: the parent's thread does not exist here.
        reg.pid = pid;
        reg.entries.clear();
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
                if w.needs_wake() {
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
