//! Endpoints and the message-passing protocol.
//!
//! # Protocol
//!
//! Each slot has a 64-bit state word `seq | op | peer`. A message travels by one of two
//! paths, whichever side arrives second completing the rendezvous:
//!
//! * **Hand-off** (receiver first): the receiver publishes `RECEIVING(filter)`. A sender
//!   whose number matches the filter CASes it to `FILLING(sender)`, writes the receiver's
//!   inbox, stores `FILLED` and wakes it. The CAS gives the sender exclusive use of the inbox.
//! * **Outbox** (sender first): the sender writes its own outbox, publishes
//!   `SENDING(dst)`, sets its bit in the destination's `senders` bitmap and wakes it. The
//!   receiver copies the outbox and CASes the sender's state to `DELIVERED` (or, for
//!   `sendrec`, straight to `RECEIVING_REPLY(dst)` so the reply cannot be missed).
//!
//! The single CAS on one state word is what makes a message delivered exactly once: a
//! sender that times out CASes its own `SENDING` back to `RUNNING`, and either that or the
//! receiver's CAS wins. Sequence numbers in the state word prevent ABA. Both sides publish
//! their state before checking the other's (sequentially consistent), so one of them always
//! sees the other. Notifications are one bit per (source, destination), coalesced.
//!
//! Waiting: a waiter spins (per its [`WaitMode`]) then sleeps on its own slot's futex word
//! or, in Block mode without a deadline, on one of its doorbells (`bell.rs`); anyone
//! changing what it waits for bumps the futex word and wakes it (`FUTEX_WAKE` or a doorbell
//! ring) only if the waiter announced that it sleeps. A sleep without a deadline has no
//! timeout: the process's watchdog thread (`watchdog.rs`) checks every 10 ms that the
//! sleepers' peers are alive (pid + start time), so a killed peer gives
//! [`Error::DeadEndpoint`] within ~10-20 ms.

use crate::bell::{Bells, Kind};
use crate::domain::*;
use crate::error::{Error, Result};
use crate::message::{Message, MsgKind};
use crate::sys;
use crate::watchdog::{Sleep, Watch};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// "Any source" for [`Endpoint::receive`].
pub const ANY: i32 = -1;

const ADAPTIVE_SPIN_INIT_NS: u64 = 20_000;
const ADAPTIVE_SPIN_MIN_NS: u64 = 4_000;
const ADAPTIVE_SPIN_MAX_NS: u64 = 100_000;
const COLOC_YIELDS: u32 = 4;
const LIVENESS_PERIOD_NS: u64 = 10_000_000;
const COPY2_CHUNK: usize = 1 << 20;

#[derive(Clone, Copy)]
pub(crate) enum Deadline {
    NonBlocking,
    Never,
    At(u64),
}

impl Deadline {
    fn after(t: Duration) -> Deadline {
        if t.is_zero() {
            Deadline::NonBlocking
        } else {
            Deadline::At(sys::now_ns().saturating_add(t.as_nanos().min(u64::MAX as u128) as u64))
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Peer {
    slot: u32,
    gen: u32,
    pid: u32,
    tid: u32,
    start: u64,
}

/// Snapshot of a peer's identity for liveness checks (`full`: also check that the owner
/// process/thread is alive, which costs a syscall and a `/proc` read).
fn peer_of(dom: &Domain, slot: u32, full: bool) -> Result<Peer> {
    let s = dom.slot(slot);
    let a = s.alloc.load(Ordering::Acquire);
    if a & 0xff != A_ACTIVE {
        return Err(Error::BadEndpoint);
    }
    let p = Peer {
        slot,
        gen: s.gen.load(Ordering::Acquire),
        pid: s.pid.load(Ordering::Relaxed),
        tid: s.tid.load(Ordering::Relaxed),
        start: s.start.load(Ordering::Relaxed),
    };
    if full && !sys::owner_alive(p.pid, p.tid, p.start) {
        dom.reclaim_if_dead(slot);
        return Err(Error::DeadEndpoint);
    }
    if s.alloc.load(Ordering::Acquire) & 0xff != A_ACTIVE || s.gen.load(Ordering::Acquire) != p.gen
    {
        return Err(Error::DeadEndpoint);
    }
    Ok(p)
}

impl Peer {
    pub(crate) fn parts(&self) -> (u32, u32, u32, u32, u64) {
        (self.slot, self.gen, self.pid, self.tid, self.start)
    }
    pub(crate) fn from_parts(slot: u32, gen: u32, pid: u32, tid: u32, start: u64) -> Peer {
        Peer {
            slot,
            gen,
            pid,
            tid,
            start,
        }
    }
}

/// Has the peer unbound, been replaced, or (if `full`) died?
pub(crate) fn peer_gone(dom: &Domain, p: &Peer, full: bool) -> bool {
    let s = dom.slot(p.slot);
    if s.alloc.load(Ordering::Acquire) & 0xff != A_ACTIVE || s.gen.load(Ordering::Acquire) != p.gen
    {
        return true;
    }
    if full && !sys::owner_alive(p.pid, p.tid, p.start) {
        dom.reclaim_if_dead(p.slot);
        return true;
    }
    false
}

#[inline]
fn bump(c: &AtomicU64, by: u64) {
    // Counters are written only by the slot's owner: no RMW needed.
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Take our own SENDING state `mine` back to RUNNING (a timed-out or rerouted send).
/// Exactly one of this and the receiver's CAS wins: false means the message was taken.
#[inline]
fn withdraw(me: &Slot, mine: u64, q: u32) -> bool {
    me.state
        .compare_exchange(
            mine,
            st_make(q, OP_RUNNING, 0),
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
}

/// Peer field of a SENDING state: destination slot (10 bits) and low 14 bits of its generation.
#[inline]
fn dest_tag(slot: u32, gen: u32) -> u32 {
    (slot & 0x3ff) | ((gen & 0x3fff) << 10)
}

#[inline]
fn accepts(s: u64, from: u32) -> bool {
    match st_op(s) {
        OP_RECEIVING => st_peer(s) == PEER_ANY || st_peer(s) == from,
        OP_RECEIVING_REPLY => st_peer(s) == from,
        _ => false,
    }
}

/// Visit the set bits of `bm` that match the filter (all of them for `None`, starting at
/// word `rot / 64` for fairness) until `visit` returns a value.
fn scan<T>(
    bm: &[AtomicU64; BITMAP_WORDS],
    f: Option<u32>,
    nw: usize,
    rot: u32,
    mut visit: impl FnMut(u32) -> Option<T>,
) -> Option<T> {
    match f {
        Some(f) => {
            if bm[(f / 64) as usize].load(Ordering::Acquire) & (1u64 << (f % 64)) != 0 {
                return visit(f);
            }
            None
        }
        None => {
            for k in 0..nw {
                let w = (rot as usize / 64 + k) % nw;
                let mut x = bm[w].load(Ordering::Acquire);
                while x != 0 {
                    let b = x.trailing_zeros();
                    x &= x - 1;
                    if let Some(t) = visit(w as u32 * 64 + b) {
                        return Some(t);
                    }
                }
            }
            None
        }
    }
}

/// Spin and/or sleep until `cond` yields a value, checking the domain, deadline and peer.
#[allow(clippy::too_many_arguments)]
fn wait_loop<R>(
    dom: &Domain,
    watch: &Arc<Watch>,
    me: &Slot,
    mode: WaitMode,
    dl: Deadline,
    peer: Option<&Peer>,
    hint: Option<u32>,
    budget: &mut u64,
    handoff: bool,
    mut cond: impl FnMut() -> Option<R>,
) -> Result<R> {
    // Does the peer we wait for (or, for a receive from ANY, the one we last talked to)
    // share our CPU? (Irrelevant when we sleep at once.)
    let coloc = mode != WaitMode::Block && {
        let cpu = sys::current_cpu();
        me.cpu.store(cpu, Ordering::Relaxed);
        cpu != u32::MAX && hint.is_some_and(|h| dom.slot(h).cpu.load(Ordering::Relaxed) == cpu)
    };
    let spin_ns = match mode {
        WaitMode::Adaptive if coloc => 0,
        WaitMode::Adaptive => *budget,
        WaitMode::Spin => u64::MAX,
        WaitMode::Block => 0,
    };
    let mut slept = false;
    let r = wait_inner(
        dom, watch, me, mode, dl, peer, spin_ns, coloc, handoff, &mut slept, &mut cond,
    );
    if mode == WaitMode::Adaptive && spin_ns > 0 && r.is_ok() {
        // Adapt the spin budget like an adaptive mutex: spinning that pays off grows it,
        // having to sleep anyway shrinks it by a quarter (e.g. the peer is preempted).
        *budget = if slept {
            (*budget - *budget / 4).max(ADAPTIVE_SPIN_MIN_NS)
        } else {
            (*budget * 2).min(ADAPTIVE_SPIN_MAX_NS)
        };
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn wait_inner<R>(
    dom: &Domain,
    watch: &Arc<Watch>,
    me: &Slot,
    mode: WaitMode,
    dl: Deadline,
    peer: Option<&Peer>,
    spin_ns: u64,
    coloc: bool,
    handoff: bool,
    slept: &mut bool,
    cond: &mut impl FnMut() -> Option<R>,
) -> Result<R> {
    // The precise clock only where it matters (spinning, deadlines); liveness checks run
    // on the coarse one.
    let precise = spin_ns > 0 || matches!(dl, Deadline::At(_));
    let t0 = if precise { sys::now_ns() } else { 0 };
    // Time of the last full liveness check (0: none yet in this wait; the first pass
    // through the checks below only starts the period, as the caller has just checked).
    let mut last_full = 0u64;
    let mut spins: u32 = 0;
    loop {
        let v = me.futex.load(Ordering::SeqCst);
        if let Some(r) = cond() {
            return Ok(r);
        }
        spins = spins.wrapping_add(1);
        match mode {
            WaitMode::Spin => {
                if coloc {
                    // The peer last ran on our CPU: let it run between checks.
                    std::thread::yield_now();
                } else if spins & 127 != 0 {
                    std::hint::spin_loop();
                    continue;
                } else if spins & 1023 == 0 {
                    // Let a peer that shares our CPU run (oversubscribed CPUs).
                    std::thread::yield_now();
                }
            }
            WaitMode::Adaptive => {
                if coloc {
                    // The peer last ran on our CPU: spinning cannot help, but giving it
                    // the CPU a few times is cheaper than a sleep/wake-up cycle.
                    if spins <= COLOC_YIELDS {
                        std::thread::yield_now();
                    }
                } else if spin_ns > 0 && spins & 15 != 0 && spins < (1 << 20) {
                    std::hint::spin_loop();
                    continue;
                }
            }
            WaitMode::Block => {}
        }
        if dom.is_ended() {
            return Err(Error::DomainEnded);
        }
        let now = if precise { sys::now_ns() } else { 0 };
        if let Deadline::At(t) = dl {
            if now >= t {
                return Err(Error::TimedOut);
            }
        }
        if let Deadline::NonBlocking = dl {
            return Err(Error::WouldBlock);
        }
        // Coarse time of this pass, read at most once per pass (0: not read).
        let mut coarse = 0u64;
        if let Some(p) = peer {
            coarse = sys::coarse_ns();
            if last_full == 0 {
                last_full = coarse;
            }
            let full = coarse.saturating_sub(last_full) >= LIVENESS_PERIOD_NS;
            if full {
                last_full = coarse;
            }
            if peer_gone(dom, p, full) {
                return Err(Error::DeadEndpoint);
            }
        }
        if now.saturating_sub(t0) < spin_ns
            || (mode == WaitMode::Adaptive && coloc && spins <= COLOC_YIELDS)
        {
            continue;
        }
        // Sleep. Anyone who changes our condition bumps `futex` after the change, then
        // looks at `sleeping`; we announce `sleeping`, then look at `futex` (both
        // sequentially consistent): either we see the change, or the waker sees us asleep
        // and wakes us. A change after the check makes `futex_wait` return at once. A
        // waker that takes our announcement away bumps `futex` once more before its
        // FUTEX_WAKE (`sys::futex_wake_taken`): it may be one whose change we have already
        // seen, and the waker of a later change then finds no announcement.
        *slept = true;
        let mut tmo = match dl {
            Deadline::At(t) => Some(t.saturating_sub(now).max(1)),
            _ => None,
        };
        // A reply wait in Block mode with hand-offs on traps until the replier answers
        // (see `handoff.rs`); without a watchdog (which answers the trap if the peer
        // dies), and when our thread may run on one CPU only (a hand-off could not move
        // it, and its eventfd doorbell is the cheaper sleep), it sleeps as below.
        if handoff && mode == WaitMode::Block && tmo.is_none() {
            if coarse == 0 {
                coarse = sys::coarse_ns();
            }
            if let Some(fd) = (watch.bell_kind(coarse) == Kind::Pipe)
                .then(|| trap_listener(me))
                .flatten()
            {
                if watch.arm(peer, v, Sleep::Trap(fd)) {
                    me.sleeping.store(SLEEP_TRAP, Ordering::SeqCst);
                    // Once a waker has swapped our announcement away it answers a trap, so
                    // we must trap; otherwise take the announcement back if the word moved.
                    let commit = me.futex.load(Ordering::SeqCst) == v
                        || me
                            .sleeping
                            .compare_exchange(SLEEP_TRAP, 0, Ordering::SeqCst, Ordering::SeqCst)
                            .is_err();
                    if commit {
                        crate::handoff::trap();
                    }
                    watch.disarm();
                    me.sleeping.store(0, Ordering::Relaxed);
                    continue;
                }
            }
        }
        // Without a deadline, sleep with no timeout (a kernel timer per sleep costs ~0.6 µs)
        // while the watchdog thread checks our peer; failing that, wake up every period.
        // Block mode without a deadline sleeps on its doorbell (see `bell.rs`).
        let bell = if mode == WaitMode::Block && tmo.is_none() {
            if coarse == 0 {
                coarse = sys::coarse_ns();
            }
            let k = watch.bell_kind(coarse);
            watch.bell(k).map(|b| (k, b))
        } else {
            None
        };
        let armed = watch.arm(peer, v, bell.map_or(Sleep::Futex, |(k, _)| Sleep::Bell(k)));
        let bell = bell.filter(|_| armed);
        if !armed {
            tmo = Some(tmo.map_or(LIVENESS_PERIOD_NS, |t| t.min(LIVENESS_PERIOD_NS)));
        }
        me.sleeping.store(
            bell.map_or(SLEEP_FUTEX, |(k, _)| k.sleeping()),
            Ordering::SeqCst,
        );
        if me.futex.load(Ordering::SeqCst) == v {
            match bell {
                Some((_, b)) => b.wait(),
                None => sys::futex_wait(&me.futex, v, tmo.map(Duration::from_nanos)),
            }
        }
        if armed {
            watch.disarm();
        }
        me.sleeping.store(0, Ordering::Relaxed);
    }
}

/// The calling thread's hand-off listener, published in `me` (None: hand-offs are not
/// available to this thread, or a replier could not reach the listener).
fn trap_listener(me: &Slot) -> Option<i32> {
    let cur = me.trap_fd.load(Ordering::Acquire);
    if cur == crate::handoff::TRAP_FORBIDDEN {
        return None;
    }
    let fd = crate::handoff::thread_listener()?;
    if cur != fd {
        // Never overwrite a replier's TRAP_FORBIDDEN.
        me.trap_fd
            .compare_exchange(cur, fd, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
    }
    Some(fd)
}

/// A bound endpoint: the calling thread's identity in a domain. Dropping it unbinds.
///
/// All blocking calls take `&mut self`: an endpoint performs one call at a time. Threads
/// that want to communicate concurrently bind endpoints of their own.
///
/// ```
/// use ustack_ipc::{Domain, DomainConfig, Message, ANY};
/// let dom = Domain::create(&format!("doc-ep-{}", std::process::id()), DomainConfig::default()).unwrap();
/// let mut server = dom.bind("server").unwrap();
/// let sid = server.id();
/// let d2 = dom.clone();
/// let client = std::thread::spawn(move || {
///     let mut c = d2.bind("client").unwrap();
///     let reply = c.sendrec(sid, &Message::new(1).with_u64(0, 20)).unwrap();
///     reply.u64_at(0)
/// });
/// let req = server.receive(ANY).unwrap();
/// server.send(req.source, &Message::new(2).with_u64(0, req.u64_at(0) + 1)).unwrap();
/// assert_eq!(client.join().unwrap(), 21);
/// dom.end().unwrap();
/// ```
pub struct Endpoint {
    dom: Domain,
    slot: u32,
    gen: u32,
    ep: i32,
    seq: u32,
    mode: WaitMode,
    rot: u32,
    copybuf: Vec<u8>,
    /// Per peer slot: (generation, time of the last full liveness check), so that the
    /// expensive check runs at most every LIVENESS_PERIOD_NS per peer.
    checked: Vec<(u32, u64)>,
    /// Current spin budget of the adaptive wait mode, ns.
    spin_budget: u64,
    /// Slot we last exchanged a message with (hint for adaptive waiting).
    last_peer: Option<u32>,
    /// Thread that last used this endpoint (recorded in the slot for liveness checks).
    tid: u32,
    /// Our entry in the process's watchdog (see `watchdog.rs`).
    watch: Arc<Watch>,
    /// Doorbells of the peers we wake.
    bells: RefCell<Bells>,
    /// Wait for replies in hand-off traps (see [`Endpoint::set_handoff`]).
    handoff: bool,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("domain", &self.dom.name())
            .field("ep", &self.ep)
            .finish()
    }
}

impl Endpoint {
    pub(crate) fn new(dom: Domain, slot: u32, gen: u32, seq: u32) -> Endpoint {
        let ep = dom.endpoint_of_slot(slot);
        let checked = vec![(u32::MAX, 0); dom.max_endpoints() as usize];
        let watch = Watch::new(dom.clone(), slot);
        Endpoint {
            watch,
            bells: RefCell::new(Bells::default()),
            handoff: crate::handoff::default_on(),
            dom,
            slot,
            gen,
            ep,
            seq,
            mode: WaitMode::Adaptive,
            rot: 0,
            copybuf: Vec::new(),
            checked,
            spin_budget: ADAPTIVE_SPIN_INIT_NS,
            last_peer: None,
            tid: sys::cached_tid(),
        }
    }

    /// This endpoint's number (domain tag << 16 | slot).
    pub fn id(&self) -> i32 {
        self.ep
    }

    /// Slot index inside the domain.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The domain this endpoint is bound to.
    pub fn domain(&self) -> &Domain {
        &self.dom
    }

    /// Current wait strategy.
    pub fn wait_mode(&self) -> WaitMode {
        self.mode
    }

    /// Hand-off replies for `sendrec` in [`WaitMode::Block`] (default off, or on where
    /// the environment has `USTACK_IPC_HANDOFF=1` when the endpoint is bound). With it on, a
    /// `sendrec` caller waits for its reply in a seccomp user-notification trap, and the
    /// replying server hands its CPU over to it (Linux 6.6+
    /// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`): both sides still sleep in the kernel, but
    /// the pair runs on one CPU instead of waking an idle one for every reply, ~10x the
    /// round trips of a pipe between unpinned processes on the development VM.
    ///
    /// Costs: each calling thread installs a seccomp filter once. It only ever traps one
    /// unused system call number, but it cannot be removed, each of that thread's system
    /// calls runs it (~37 ns more per call on the development VM), and children forked
    /// by the thread inherit it: while the thread's listener is open they cannot install
    /// a seccomp user-notification filter of their own (`EBUSY`, one listener per chain
    /// of filters), so their endpoints use doorbells. It needs `no_new_privs` or
    /// `CAP_SYS_ADMIN`: without them, and where the kernel refuses, the endpoint keeps
    /// using its doorbells. Returns whether the calling thread can trap (the filter is
    /// installed here, on the first call of each thread).
    pub fn set_handoff(&mut self, on: bool) -> bool {
        self.handoff = on;
        on && crate::handoff::thread_listener().is_some()
    }

    /// Select the wait strategy for this endpoint's blocking calls.
    pub fn set_wait_mode(&mut self, mode: WaitMode) {
        self.mode = mode;
        self.me().wait_mode.store(mode.to_u32(), Ordering::Relaxed);
    }

    fn me(&self) -> &Slot {
        self.dom.slot(self.slot)
    }

    /// Wake the owner of `slot` if it sleeps (see `Domain::wake_slot`), ringing its
    /// doorbell through our cache of doorbells.
    fn wake_peer(&self, slot: u32) {
        let s = self.dom.slot(slot);
        s.futex.fetch_add(1, Ordering::SeqCst);
        let v = s.sleeping.swap(0, Ordering::SeqCst);
        if v == 0 {
            return;
        }
        if v == SLEEP_TRAP {
            // It waits for a reply in a hand-off trap and has committed to trapping:
            // answer it (it resumes on our CPU).
            let gen = s.gen.load(Ordering::Acquire);
            self.bells.borrow_mut().answer_trap(&self.dom, slot, gen);
            return;
        }
        match crate::bell::Kind::of_sleeping(v) {
            Some(k) => {
                let gen = s.gen.load(Ordering::Acquire);
                let r = self.bells.borrow_mut().ring(&self.dom, slot, gen, k);
                // If it cannot be rung, the sleeper's watchdog sees the changed word and
                // rings it. If we cannot reach it at all (permission, or no descriptor left
                // here), make it sleep on the futex from now on.
                if r == Err(crate::bell::Miss::Unreachable) {
                    crate::bell::forbid(s);
                }
            }
            None => sys::futex_wake_taken(&s.futex),
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Start of every call: fail if the domain ended, and record the calling thread as
    /// the owner (an endpoint may be moved to another thread; liveness follows it).
    fn check_domain(&mut self) -> Result<()> {
        if self.dom.is_ended() {
            return Err(Error::DomainEnded);
        }
        let t = sys::cached_tid();
        if t != self.tid {
            self.tid = t;
            self.dom.slot(self.slot).tid.store(t, Ordering::Relaxed);
        }
        Ok(())
    }

    fn peer(&mut self, ep: i32) -> Result<Peer> {
        let slot = self.dom.resolve(ep)?;
        if slot == self.slot {
            return Err(Error::BadEndpoint);
        }
        self.peer_slot(slot)
    }

    fn peer_slot(&mut self, slot: u32) -> Result<Peer> {
        let now = sys::coarse_ns();
        let gen = self.dom.slot(slot).gen.load(Ordering::Acquire);
        let full = match self.checked.get(slot as usize) {
            Some(&(g, t)) => g != gen || now.saturating_sub(t) >= LIVENESS_PERIOD_NS,
            None => true,
        };
        let p = peer_of(&self.dom, slot, full)?;
        if full {
            if let Some(c) = self.checked.get_mut(slot as usize) {
                *c = (p.gen, now);
            }
        }
        Ok(p)
    }

    // ----------------------------------------------------------------- send

    /// Send `msg` to `dst`, blocking until `dst` has received it (rendezvous).
    pub fn send(&mut self, dst: i32, msg: &Message) -> Result<()> {
        self.do_send(dst, msg, false, Deadline::Never).map(|_| ())
    }

    /// Non-blocking send: succeeds only if `dst` is already waiting in a matching receive,
    /// else [`Error::WouldBlock`].
    pub fn try_send(&mut self, dst: i32, msg: &Message) -> Result<()> {
        self.do_send(dst, msg, false, Deadline::NonBlocking)
            .map(|_| ())
    }

    /// Send with a timeout ([`Error::TimedOut`]; a zero timeout behaves like `try_send`).
    pub fn send_timeout(&mut self, dst: i32, msg: &Message, timeout: Duration) -> Result<()> {
        self.do_send(dst, msg, false, Deadline::after(timeout))
            .map(|_| ())
    }

    fn do_send(&mut self, dst: i32, msg: &Message, rec: bool, dl: Deadline) -> Result<Peer> {
        self.check_domain()?;
        let p = self.peer(dst)?;
        let mut out = *msg;
        out.source = self.ep;
        out.kind = if rec {
            MsgKind::SendRec as u8
        } else {
            MsgKind::Send as u8
        };
        out.flags = 0;
        let dom = self.dom.clone();
        let me = dom.slot(self.slot);
        let ds = dom.slot(p.slot);
        let (w, bit) = ((self.slot / 64) as usize, 1u64 << (self.slot % 64));
        loop {
            // Hand-off path: the receiver is already waiting for us.
            let s = ds.state.load(Ordering::Acquire);
            if ds.gen.load(Ordering::Acquire) != p.gen {
                // The slot was unbound (and maybe re-bound by someone else) meanwhile.
                return Err(Error::DeadEndpoint);
            }
            if accepts(s, self.slot) {
                if ds
                    .state
                    .compare_exchange(
                        s,
                        st_make(st_seq(s), OP_FILLING, self.slot),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    // SAFETY: our successful CAS to FILLING gives us exclusive write access to
                    // the destination's inbox until we publish FILLED; the pointer is into the
                    // live shared mapping and properly aligned.
                    unsafe { std::ptr::write_volatile(ds.inbox.get(), out) };
                    if rec {
                        // Be ready for the reply before the request becomes visible.
                        let q = self.next_seq();
                        me.state
                            .store(st_make(q, OP_RECEIVING_REPLY, p.slot), Ordering::SeqCst);
                    }
                    ds.state
                        .store(st_make(st_seq(s), OP_FILLED, self.slot), Ordering::Release);
                    self.wake_peer(p.slot);
                    bump(&me.c_sent, 1);
                    self.last_peer = Some(p.slot);
                    return Ok(p);
                }
                continue;
            }
            if let Deadline::NonBlocking = dl {
                if peer_gone(&dom, &p, false) {
                    return Err(Error::DeadEndpoint);
                }
                return Err(Error::WouldBlock);
            }
            // Outbox path.
            // SAFETY: our state is RUNNING, so no receiver reads our outbox now (a receiver
            // that read a stale copy fails its CAS because the sequence number changes).
            unsafe { std::ptr::write_volatile(me.outbox.get(), out) };
            let q = self.next_seq();
            // The destination is named with its generation, so that whoever binds the slot
            // after it cannot take a message meant for its predecessor.
            let op = if rec { OP_SENDREC_SENDING } else { OP_SENDING };
            let mine = st_make(q, op, dest_tag(p.slot, p.gen));
            me.state.store(mine, Ordering::SeqCst);
            ds.senders[w].fetch_or(bit, Ordering::SeqCst);
            self.wake_peer(p.slot);
            let s2 = ds.state.load(Ordering::SeqCst);
            let delivered = if ds.gen.load(Ordering::SeqCst) != p.gen {
                // Re-bound meanwhile: withdraw unless the new owner already took it.
                if withdraw(me, mine, q) {
                    ds.senders[w].fetch_and(!bit, Ordering::AcqRel);
                    return Err(Error::DeadEndpoint);
                }
                true
            } else if accepts(s2, self.slot) {
                // It started receiving before seeing our bit: take the message back and hand it off.
                !withdraw(me, mine, q)
            } else {
                let mut budget = self.spin_budget;
                let r = wait_loop(
                    &dom,
                    &self.watch,
                    me,
                    self.mode,
                    dl,
                    Some(&p),
                    Some(p.slot),
                    &mut budget,
                    // A `sendrec` caller whose request waits in its outbox is not woken when
                    // the request is taken, only by the reply: it may wait in a hand-off trap.
                    rec && self.handoff,
                    || (me.state.load(Ordering::Acquire) != mine).then_some(()),
                );
                self.spin_budget = budget;
                match r {
                    Ok(()) => true,
                    Err(e) => {
                        if withdraw(me, mine, q) {
                            ds.senders[w].fetch_and(!bit, Ordering::AcqRel);
                            return Err(e);
                        }
                        true // delivered just before we gave up
                    }
                }
            };
            if !delivered {
                continue;
            }
            if !rec {
                me.state.store(st_make(q, OP_RUNNING, 0), Ordering::Release);
            }
            bump(&me.c_sent, 1);
            self.last_peer = Some(p.slot);
            return Ok(p);
        }
    }

    // -------------------------------------------------------------- receive

    /// Receive a message from `src` (or from anyone with [`ANY`]), blocking until one
    /// arrives. Pending notifications are delivered first.
    pub fn receive(&mut self, src: i32) -> Result<Message> {
        self.receive_dl(src, Deadline::Never)
    }

    /// Non-blocking receive ([`Error::WouldBlock`] if nothing is pending).
    pub fn try_receive(&mut self, src: i32) -> Result<Message> {
        self.receive_dl(src, Deadline::NonBlocking)
    }

    /// Receive with a timeout ([`Error::TimedOut`]).
    pub fn receive_timeout(&mut self, src: i32, timeout: Duration) -> Result<Message> {
        self.receive_dl(src, Deadline::after(timeout))
    }

    fn receive_dl(&mut self, src: i32, dl: Deadline) -> Result<Message> {
        self.check_domain()?;
        let filter = if src == ANY {
            None
        } else {
            Some(self.peer(src)?)
        };
        let m = self.do_receive(filter, false, dl, false)?;
        self.last_peer = Some((m.source as u32) & 0xffff);
        Ok(m)
    }

    /// Is there something for us in the bitmaps that matches the filter?
    fn has_candidates(&self, f: Option<u32>, reply_only: bool) -> bool {
        let me = self.me();
        match f {
            Some(f) => {
                let (w, b) = ((f / 64) as usize, 1u64 << (f % 64));
                (!reply_only && me.notify[w].load(Ordering::Acquire) & b != 0)
                    || me.senders[w].load(Ordering::Acquire) & b != 0
            }
            None => (0..self.dom.nwords()).any(|w| {
                me.notify[w].load(Ordering::Acquire) != 0
                    || me.senders[w].load(Ordering::Acquire) != 0
            }),
        }
    }

    /// Take a pending notification or a blocked sender's message (caller's state is RUNNING).
    fn try_take(&mut self, f: Option<u32>, reply_only: bool) -> Option<Message> {
        let nw = self.dom.nwords();
        let me = self.dom.slot(self.slot);
        let rot = self.rot;
        if !reply_only
            && (f.is_some() || (0..nw).any(|w| me.notify[w].load(Ordering::Relaxed) != 0))
        {
            let got = scan(&me.notify, f, nw, rot, |src| {
                let (w, b) = ((src / 64) as usize, 1u64 << (src % 64));
                (me.notify[w].fetch_and(!b, Ordering::AcqRel) & b != 0).then_some(src)
            });
            if let Some(src) = got {
                self.rot = self.rot.wrapping_add(64);
                bump(&me.c_notify_received, 1);
                let m = Message {
                    source: self.dom.endpoint_of_slot(src),
                    kind: MsgKind::Notify as u8,
                    ..Message::default()
                }
                .with_u64(0, sys::now_ns());
                return Some(m);
            }
        }
        let dom = &self.dom;
        let my_slot = self.slot;
        let my_tag = dest_tag(self.slot, self.gen);
        let got = scan(&me.senders, f, nw, rot, |src| {
            let (w, b) = ((src / 64) as usize, 1u64 << (src % 64));
            if me.senders[w].fetch_and(!b, Ordering::AcqRel) & b == 0 {
                return None;
            }
            let ss = dom.slot(src);
            let s = ss.state.load(Ordering::Acquire);
            let op = st_op(s);
            if (op == OP_SENDING || op == OP_SENDREC_SENDING) && st_peer(s) == my_tag {
                // SAFETY: the sender does not write its outbox while in a SENDING state; if it
                // left that state (and possibly rewrote the outbox) our CAS below fails and the
                // copy is discarded (seqlock pattern). Volatile: the memory is shared.
                let m = unsafe { std::ptr::read_volatile(ss.outbox.get()) };
                let new = if op == OP_SENDING {
                    st_make(st_seq(s), OP_DELIVERED, my_slot)
                } else {
                    st_make(st_seq(s), OP_RECEIVING_REPLY, my_slot)
                };
                if ss
                    .state
                    .compare_exchange(s, new, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    // A plain sender waits for DELIVERED: wake it. A `sendrec` caller has
                    // nothing to do until the reply arrives, and the reply's hand-off wakes
                    // it: waking it now would only cost a futex call and, when it runs on our
                    // CPU, two extra context switches per round trip.
                    if op == OP_SENDING {
                        self.wake_peer(src);
                    }
                    return Some(m);
                }
            }
            None
        });
        if got.is_some() {
            self.rot = self.rot.wrapping_add(64);
            bump(&me.c_received, 1);
        }
        got
    }

    fn take_inbox(&mut self, s: u64) -> Message {
        let me = self.me();
        // SAFETY: state FILLED (loaded with Acquire, stored with Release by the filler) means
        // the inbox is completely written and nobody writes it until we publish a receiving
        // state again.
        let m = unsafe { std::ptr::read_volatile(me.inbox.get()) };
        me.state
            .store(st_make(st_seq(s), OP_RUNNING, 0), Ordering::Release);
        bump(&me.c_received, 1);
        m
    }

    fn do_receive(
        &mut self,
        filter: Option<Peer>,
        reply_only: bool,
        dl: Deadline,
        published: bool,
    ) -> Result<Message> {
        let f = filter.map(|p| p.slot);
        let rop = if reply_only {
            OP_RECEIVING_REPLY
        } else {
            OP_RECEIVING
        };
        let rpeer = f.unwrap_or(PEER_ANY);
        let dom = self.dom.clone();
        let me = dom.slot(self.slot);
        if !published {
            if let Some(m) = self.try_take(f, reply_only) {
                return Ok(m);
            }
            if let Deadline::NonBlocking = dl {
                if let Some(p) = &filter {
                    if peer_gone(&dom, p, true) {
                        return Err(Error::DeadEndpoint);
                    }
                }
                return Err(Error::WouldBlock);
            }
            let q = self.next_seq();
            me.state.store(st_make(q, rop, rpeer), Ordering::SeqCst);
        }
        let mode = self.mode;
        let handoff = reply_only && self.handoff;
        let hint = f.or(self.last_peer);
        let mut filling_since = 0u64;
        loop {
            let mut budget = self.spin_budget;
            let r = wait_loop(
                &dom,
                &self.watch,
                me,
                mode,
                dl,
                filter.as_ref(),
                hint,
                &mut budget,
                handoff,
                || {
                    let s = me.state.load(Ordering::Acquire);
                    match st_op(s) {
                        OP_FILLED => Some(Some(s)),
                        OP_FILLING => {
                            // A filler killed in the middle of a hand-off would leave us here.
                            let now = sys::now_ns();
                            if filling_since == 0 {
                                filling_since = now;
                            } else if now - filling_since > LIVENESS_PERIOD_NS {
                                filling_since = now;
                                let fp = dom.slot(st_peer(s)).pid.load(Ordering::Relaxed);
                                if !sys::pid_running(fp) {
                                    let _ = me.state.compare_exchange(
                                        s,
                                        st_make(st_seq(s), rop, rpeer),
                                        Ordering::AcqRel,
                                        Ordering::Acquire,
                                    );
                                }
                            }
                            None
                        }
                        _ => self.has_candidates(f, reply_only).then_some(None),
                    }
                },
            );
            self.spin_budget = budget;
            match r {
                Ok(Some(s)) => return Ok(self.take_inbox(s)),
                Ok(None) => {
                    let s = me.state.load(Ordering::Acquire);
                    if (st_op(s) == OP_RECEIVING || st_op(s) == OP_RECEIVING_REPLY)
                        && me
                            .state
                            .compare_exchange(
                                s,
                                st_make(st_seq(s), OP_RUNNING, 0),
                                Ordering::AcqRel,
                                Ordering::Acquire,
                            )
                            .is_ok()
                    {
                        if let Some(m) = self.try_take(f, reply_only) {
                            return Ok(m);
                        }
                        let q = self.next_seq();
                        me.state.store(st_make(q, rop, rpeer), Ordering::SeqCst);
                    }
                }
                Err(e) => {
                    // Withdraw the receive, unless a message is being handed to us right now.
                    let t0 = sys::now_ns();
                    loop {
                        let s = me.state.load(Ordering::Acquire);
                        match st_op(s) {
                            OP_RECEIVING | OP_RECEIVING_REPLY => {
                                if me
                                    .state
                                    .compare_exchange(
                                        s,
                                        st_make(st_seq(s), OP_RUNNING, 0),
                                        Ordering::AcqRel,
                                        Ordering::Acquire,
                                    )
                                    .is_ok()
                                {
                                    return Err(e);
                                }
                            }
                            OP_FILLED => return Ok(self.take_inbox(s)),
                            OP_FILLING => {
                                if sys::now_ns() - t0 > LIVENESS_PERIOD_NS
                                    && !sys::pid_running(
                                        dom.slot(st_peer(s)).pid.load(Ordering::Relaxed),
                                    )
                                {
                                    let _ = me.state.compare_exchange(
                                        s,
                                        st_make(st_seq(s), OP_RUNNING, 0),
                                        Ordering::AcqRel,
                                        Ordering::Acquire,
                                    );
                                    return Err(e);
                                }
                                std::thread::yield_now();
                            }
                            _ => return Err(e),
                        }
                    }
                }
            }
        }
    }

    // -------------------------------------------------------------- sendrec

    /// Send `msg` to `dst` and wait for its reply, as one operation: we are receiving from
    /// `dst` before the request becomes visible to it, so the reply cannot be lost (and a
    /// non-blocking reply with `try_send` always succeeds). Notifications are not delivered
    /// by `sendrec`; they stay pending.
    pub fn sendrec(&mut self, dst: i32, msg: &Message) -> Result<Message> {
        self.sendrec_dl(dst, msg, Deadline::Never, Deadline::Never)
    }

    /// `sendrec` whose send part is non-blocking ([`Error::WouldBlock`] if `dst` is not
    /// receiving); once the request is accepted it waits for the reply.
    pub fn try_sendrec(&mut self, dst: i32, msg: &Message) -> Result<Message> {
        self.sendrec_dl(dst, msg, Deadline::NonBlocking, Deadline::Never)
    }

    /// `sendrec` with one timeout covering both the send and the reply.
    pub fn sendrec_timeout(
        &mut self,
        dst: i32,
        msg: &Message,
        timeout: Duration,
    ) -> Result<Message> {
        let dl = Deadline::after(timeout);
        let rdl = if let Deadline::NonBlocking = dl {
            Deadline::At(sys::now_ns())
        } else {
            dl
        };
        self.sendrec_dl(dst, msg, dl, rdl)
    }

    fn sendrec_dl(
        &mut self,
        dst: i32,
        msg: &Message,
        sdl: Deadline,
        rdl: Deadline,
    ) -> Result<Message> {
        let p = self.do_send(dst, msg, true, sdl)?;
        self.last_peer = Some(p.slot);
        self.do_receive(Some(p), true, rdl, true)
    }

    // --------------------------------------------------------------- notify

    /// Post a notification to `dst`. Never blocks; coalesced (one pending bit per source).
    pub fn notify(&mut self, dst: i32) -> Result<()> {
        self.check_domain()?;
        let p = self.peer(dst)?;
        let ds = self.dom.slot(p.slot);
        ds.notify[(self.slot / 64) as usize].fetch_or(1u64 << (self.slot % 64), Ordering::SeqCst);
        self.wake_peer(p.slot);
        bump(&self.me().c_notify_sent, 1);
        Ok(())
    }

    // ---------------------------------------------------------------- vcopy

    /// Copy `len` bytes from address `src_addr` of endpoint `src_ep`'s process to
    /// `dst_addr` of `dst_ep`'s process.
    ///
    /// * Both blocks in the domain's arena (buffers from [`Domain::alloc`], in whichever
    ///   processes): **one** copy, a plain `memcpy` by the caller into its own mapping of
    ///   the arena, no system call — for COPY1 and COPY2 alike.
    /// * COPY1 (the caller's process is the source or the destination) elsewhere: **one**
    ///   copy by the kernel (`process_vm_writev` / `process_vm_readv`), no intermediate
    ///   buffer.
    /// * COPY2 (a third party asks for a copy between two other processes) elsewhere:
    ///   **two** copies, through a 1 MiB buffer in the caller (`process_vm_readv` then
    ///   `process_vm_writev` per chunk) — Linux has no call that copies between two foreign
    ///   address spaces.
    ///
    /// Bad or unmapped ranges give [`Error::BadAddress`] (never a crash); more than the
    /// domain's `max_copy` gives [`Error::TooLarge`].
    pub fn vcopy(
        &mut self,
        src_ep: i32,
        src_addr: usize,
        dst_ep: i32,
        dst_addr: usize,
        len: usize,
    ) -> Result<()> {
        self.check_domain()?;
        if len as u64 > self.dom.max_copy() {
            return Err(Error::TooLarge);
        }
        let (sp, sbase) = self.copy_peer(src_ep)?;
        let (dp, dbase) = self.copy_peer(dst_ep)?;
        if len == 0 {
            return Ok(());
        }
        if src_addr.checked_add(len).is_none() || dst_addr.checked_add(len).is_none() {
            return Err(Error::BadAddress);
        }
        let me = sys::getpid();
        if let (Some(s), Some(d)) = (
            self.dom.arena_translate(sbase, src_addr, len),
            self.dom.arena_translate(dbase, dst_addr, len),
        ) {
            // SAFETY: both ranges lie inside this process's mapping of the domain arena
            // (bounds checked by arena_translate), which stays mapped while `self.dom`
            // lives. The memory is shared with other processes, so `ptr::copy` (memmove:
            // the ranges may overlap) may see bytes change under it — the same as the
            // kernel copy of `process_vm_*` — but no Rust reference to it exists.
            unsafe { std::ptr::copy(s as *const u8, d as *mut u8, len) };
        } else if sp == me {
            sys::vm_copy(sys::VmDir::Write, dp, src_addr, dst_addr, len)?;
        } else if dp == me {
            sys::vm_copy(sys::VmDir::Read, sp, dst_addr, src_addr, len)?;
        } else {
            let chunk = len.min(COPY2_CHUNK);
            if self.copybuf.len() < chunk {
                self.copybuf.resize(chunk, 0);
            }
            let buf = self.copybuf.as_mut_ptr() as usize;
            let mut off = 0;
            while off < len {
                let n = (len - off).min(chunk);
                sys::vm_copy(sys::VmDir::Read, sp, buf, src_addr + off, n)?;
                sys::vm_copy(sys::VmDir::Write, dp, buf, dst_addr + off, n)?;
                off += n;
            }
        }
        let s = self.me();
        bump(&s.c_copies, 1);
        bump(&s.c_bytes, len as u64);
        Ok(())
    }

    /// Process id and arena base (in that process) of a `vcopy` party.
    fn copy_peer(&mut self, ep: i32) -> Result<(u32, usize)> {
        let slot = self.dom.resolve(ep)?;
        if slot == self.slot {
            return Ok((sys::getpid(), self.dom.arena_base()));
        }
        let p = self.peer_slot(slot)?;
        let base = self.dom.slot(slot).arena_base.load(Ordering::Relaxed) as usize;
        Ok((p.pid, base))
    }

    /// Unbind explicitly (also done on drop). Peers blocked on us get `DeadEndpoint`.
    pub fn unbind(self) {
        drop(self)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let s = self.me();
        let a = s.alloc.load(Ordering::Acquire);
        if a & 0xff == A_ACTIVE
            && (a >> 32) as u32 == sys::getpid()
            && s.gen.load(Ordering::Acquire) == self.gen
            && s.alloc
                .compare_exchange(
                    a,
                    ((sys::getpid() as u64) << 32) | A_RECLAIMING,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            self.dom.release_slot(self.slot);
        }
    }
}
