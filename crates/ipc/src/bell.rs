//! Doorbells: descriptors that a `Block`-mode waiter without a deadline sleeps on with a
//! blocking `read`, and that a waker rings with an 8-byte `write`. Each endpoint has up to
//! two, created on first use, and picks one per sleep:
//!
//! * an **eventfd**, when the sleeper may run on one CPU only (its affinity allows a
//!   single CPU): an eventfd wake-up is a lock and a counter, cheaper than a pipe or a
//!   process-shared futex (which looks its page up in the kernel on every call). Both
//!   processes pinned to one CPU, a bare eventfd ping-pong takes ~3.9 µs per round trip on
//!   the development VM, a futex one ~4.2 µs and a pipe ~4.4 µs.
//! * a **pipe** otherwise: a pipe write wakes the reader with the scheduler's "sync" hint
//!   (the waker is about to sleep), which lets the scheduler run the woken peer on the
//!   waker's CPU instead of waking an idle one. Unpinned, that decides the round trip
//!   (~5 µs on one CPU against ~20-50 µs when each wake-up has to wake an idle vCPU); in
//!   paired runs against a pipe, Block mode went from 0.87-0.92x with the eventfd alone to
//!   0.89-1.19x with the pipe doorbell, i.e. parity (see the README's Targets).
//!
//! The IPC state still lives in shared memory; a doorbell carries no data, only wake-ups.
//! A waker gets a descriptor for a peer's doorbell once, with `pidfd_getfd` (the same
//! ptrace-level permission that `vcopy` of private memory needs), and caches it. A waker
//! that cannot get one marks the peer's slot so that its owner sleeps on the futex again,
//! and the owner's watchdog rings the doorbell itself when it sees the futex word changed
//! under a doorbell sleeper, so no wake-up is lost for more than one watchdog period.
//!
//! Protocol (as with the futex): the waiter announces `sleeping = SLEEP_BELL` or
//! `SLEEP_PIPE`, then checks the futex word (which every state change bumps), then reads;
//! the waker bumps the word, then swaps `sleeping` to 0 and rings the doorbell it names.
//! A ring after the waiter gave up sleeping only makes a later read return early (a read
//! drains what is there).

use crate::domain::{Domain, Slot, A_ACTIVE, SLEEP_BELL, SLEEP_PIPE};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// `Slot::bell_fd` value: a waker may not take descriptors from the owner's process, so
/// the owner sleeps on its futex (doorbells of both kinds are off).
pub(crate) const BELLS_FORBIDDEN: i32 = -2;

/// Which doorbell.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Eventfd,
    Pipe,
}

impl Kind {
    /// The `Slot::sleeping` value of a sleep on this kind.
    pub(crate) fn sleeping(self) -> u32 {
        match self {
            Kind::Eventfd => SLEEP_BELL,
            Kind::Pipe => SLEEP_PIPE,
        }
    }

    /// The kind a `Slot::sleeping` value names, if any.
    pub(crate) fn of_sleeping(v: u32) -> Option<Kind> {
        match v {
            SLEEP_BELL => Some(Kind::Eventfd),
            SLEEP_PIPE => Some(Kind::Pipe),
            _ => None,
        }
    }

    /// The slot word where the owner publishes this doorbell's descriptor number.
    pub(crate) fn published(self, s: &Slot) -> &AtomicI32 {
        match self {
            Kind::Eventfd => &s.bell_fd,
            Kind::Pipe => &s.pipe_fd,
        }
    }
}

/// Ring: an 8-byte write (adds 1 to an eventfd's counter; 8 bytes into a pipe, which is
/// non-blocking: a full pipe wakes its reader anyway).
pub(crate) fn ring_fd(fd: &OwnedFd) -> bool {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a valid u64 to a descriptor we own.
    let r = unsafe { libc::write(fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    r == 8 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

/// An endpoint's own doorbell: the descriptor it sleeps on and the one wakers ring (the
/// same eventfd, or the two ends of a pipe).
pub(crate) struct Bell {
    rx: OwnedFd,
    tx: Option<OwnedFd>,
}

impl Bell {
    /// A new doorbell of kind `k` (blocking reads).
    pub(crate) fn create(k: Kind) -> Option<Bell> {
        match k {
            Kind::Eventfd => {
                // SAFETY: eventfd has no pointer arguments; the result is checked.
                let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
                if fd < 0 {
                    return None;
                }
                Some(Bell {
                    // SAFETY: `fd` is a descriptor we just created and own.
                    rx: unsafe { OwnedFd::from_raw_fd(fd) },
                    tx: None,
                })
            }
            Kind::Pipe => {
                let mut fds = [0i32; 2];
                // SAFETY: pipe2 writes two descriptors into the valid array; checked.
                if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                    return None;
                }
                // SAFETY: both descriptors were just created and are ours.
                let (rx, tx) =
                    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
                // Ringing never blocks. O_NONBLOCK belongs to the open file, so the
                // wakers' duplicates share it.
                // SAFETY: fcntl on a descriptor we own, integer arguments.
                if unsafe { libc::fcntl(tx.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
                    return None;
                }
                Some(Bell { rx, tx: Some(tx) })
            }
        }
    }

    /// The descriptor wakers ring (its number is published in the slot).
    pub(crate) fn ring_end(&self) -> &OwnedFd {
        self.tx.as_ref().unwrap_or(&self.rx)
    }

    /// Sleep until rung (or a signal interrupts the read); drains what is there.
    pub(crate) fn wait(&self) {
        let mut v = [0u8; 64];
        // SAFETY: reading at most 64 bytes into a valid 64-byte buffer from our own
        // descriptor (an eventfd read needs at least 8).
        unsafe { libc::read(self.rx.as_raw_fd(), v.as_mut_ptr() as *mut libc::c_void, 64) };
    }
}

/// Mark slot `s` so that its owner stops sleeping on doorbells (a waker cannot have its
/// descriptors). Never overwrites the mark; a doorbell published concurrently may win,
/// and then the next such waker marks again.
pub(crate) fn forbid(s: &Slot) {
    let cur = s.bell_fd.load(Ordering::Relaxed);
    if cur != BELLS_FORBIDDEN {
        let _ =
            s.bell_fd
                .compare_exchange(cur, BELLS_FORBIDDEN, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Why a doorbell could not be had.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Miss {
    /// We cannot take descriptors from the owner's process: no ptrace-level permission
    /// (EPERM/EACCES), or no descriptor left in ours (EMFILE/ENFILE). Either would miss
    /// every wake-up to come, so the owner should sleep on its futex instead.
    Unreachable,
    /// Anything else (passing): no doorbell published, the slot re-bound meanwhile, the
    /// owner gone.
    Other,
}

/// A duplicate of descriptor `fd` of process `pid` (pidfd_getfd).
fn fetch(pid: u32, fd: i32) -> Result<OwnedFd, Miss> {
    let miss = || match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM | libc::EACCES | libc::EMFILE | libc::ENFILE) => Miss::Unreachable,
        _ => Miss::Other,
    };
    // SAFETY: raw system calls with integer arguments; results are checked.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) as i32;
        if pidfd < 0 {
            return Err(miss());
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd);
        let got = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) as i32;
        if got < 0 {
            return Err(miss());
        }
        Ok(OwnedFd::from_raw_fd(got))
    }
}

/// The descriptor the owner of `slot` published in `word` (a doorbell, or its hand-off
/// listener), if the slot is bound with `gen`.
fn fetch_for(dom: &Domain, slot: u32, gen: u32, word: &AtomicI32) -> Result<OwnedFd, Miss> {
    let s = dom.slot(slot);
    let fd = word.load(Ordering::Acquire);
    let pid = s.pid.load(Ordering::Relaxed);
    if fd < 0 || s.alloc.load(Ordering::Acquire) & 0xff != A_ACTIVE {
        return Err(Miss::Other);
    }
    let got = fetch(pid, fd)?;
    // The slot may have been re-bound while we fetched: then `got` is some other
    // process's descriptor; do not use it.
    if s.gen.load(Ordering::Acquire) == gen && s.pid.load(Ordering::Relaxed) == pid {
        Ok(got)
    } else {
        Err(Miss::Other)
    }
}

/// Ring the doorbell of kind `k` of slot `slot` without a cache (rare wake-ups: domain
/// end, unbind).
pub(crate) fn ring_slot(dom: &Domain, slot: u32, gen: u32, k: Kind) -> bool {
    fetch_for(dom, slot, gen, k.published(dom.slot(slot))).is_ok_and(|fd| ring_fd(&fd))
}

/// A waker's cache of its peers' doorbells, by slot and kind: (generation, descriptor).
/// Only successes are cached; a failure is retried at the next wake-up.
#[derive(Default)]
pub(crate) struct Bells {
    fds: Vec<[Option<(u32, OwnedFd)>; 2]>,
    /// Hand-off listeners by slot: (generation, published descriptor number, ours).
    traps: Vec<Option<(u32, i32, OwnedFd)>>,
}

impl Bells {
    /// Ring the doorbell of kind `k` of `slot` (bound with generation `gen`).
    pub(crate) fn ring(&mut self, dom: &Domain, slot: u32, gen: u32, k: Kind) -> Result<(), Miss> {
        let i = slot as usize;
        if self.fds.len() <= i {
            self.fds.resize_with(i + 1, Default::default);
        }
        let e = &mut self.fds[i][k as usize];
        if !matches!(e, Some((g, _)) if *g == gen) {
            *e = Some((gen, fetch_for(dom, slot, gen, k.published(dom.slot(slot)))?));
        }
        match e {
            Some((_, fd)) if ring_fd(fd) => Ok(()),
            _ => Err(Miss::Other),
        }
    }

    /// Answer the hand-off trap of the owner of `slot` (bound with `gen`), whose
    /// `SLEEP_TRAP` the caller swapped away (see `handoff.rs`). If we cannot reach the
    /// owner's listener at all, mark its slot so that it stops trapping. On failure the
    /// owner's watchdog, which sees the changed futex word, answers the trap.
    pub(crate) fn answer_trap(&mut self, dom: &Domain, slot: u32, gen: u32) {
        let s = dom.slot(slot);
        let i = slot as usize;
        if self.traps.len() <= i {
            self.traps.resize_with(i + 1, Default::default);
        }
        let fdnum = s.trap_fd.load(Ordering::Acquire);
        let e = &mut self.traps[i];
        if !matches!(e, Some((g, n, _)) if *g == gen && *n == fdnum) {
            match fetch_for(dom, slot, gen, &s.trap_fd) {
                Ok(fd) => *e = Some((gen, fdnum, fd)),
                Err(Miss::Unreachable) => return crate::handoff::forbid(s, fdnum),
                Err(Miss::Other) => return,
            }
        }
        if let Some((_, _, fd)) = e {
            // The owner may still trap while its slot is the same binding.
            let alive = || {
                s.alloc.load(Ordering::Acquire) & 0xff == A_ACTIVE
                    && s.gen.load(Ordering::Acquire) == gen
            };
            crate::handoff::answer(fd, s, 20, alive);
        }
    }
}
