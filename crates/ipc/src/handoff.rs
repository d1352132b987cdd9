//! Hand-off wake-ups for `Block` mode (opt-in, [`crate::Endpoint::set_handoff`]).
//!
//! A doorbell wakes its sleeper wherever the scheduler likes; across CPUs of this VM that
//! means waking a halted vCPU (~20-50 µs). The one kernel wake-up that runs the woken task
//! on the waker's CPU is seccomp user notification with `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`
//! (Linux 6.6): a thread whose seccomp filter makes a system call "trap" sleeps until a
//! holder of the filter's listener answers it, and that answer hands the CPU over.
//!
//! Use here: a `sendrec` caller in Block mode waits for its reply by trapping an unused
//! system call number ([`TRAP_NR`]) instead of reading its doorbell; the server's reply
//! (which fills the caller's inbox first) answers the trap, so the caller resumes on the
//! server's CPU; the next request's pipe doorbell (with the scheduler's sync hint) then
//! keeps the pair there. The request still goes through the doorbell.
//!
//! Each thread installs its own filter once (it needs `no_new_privs` or `CAP_SYS_ADMIN`;
//! without them the endpoint keeps using its doorbells), publishes the listener's
//! descriptor number in its slot, and a replier fetches it with `pidfd_getfd` like a
//! doorbell. Protocol (as for doorbells): the waiter announces `sleeping = SLEEP_TRAP`, then
//! checks the futex word; if it changed it takes the announcement back with a CAS, and if
//! a waker's swap got there first it traps anyway (that waker has committed to answering).
//! The replier swaps `sleeping` to 0 and, having seen `SLEEP_TRAP`, receives the pending
//! notification (waiting briefly for the trap to arrive) and answers it. The waiter's
//! watchdog answers the trap itself when the peer dies, the domain ends, or a replier
//! could not (it keeps a copy of the listener; the id of a notification a replier has
//! received is published in `Slot::trap_id`).

use crate::domain::Slot;
use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Traps this process answered as a replier (a debugging counter).
pub(crate) static ANSWERED: AtomicU64 = AtomicU64::new(0);

/// The system call number that traps: unused on every Linux architecture.
pub(crate) const TRAP_NR: libc::c_long = 0x00ab_cdef;
/// `Slot::trap_fd`: no listener published yet.
pub(crate) const TRAP_NONE: i32 = -1;
/// `Slot::trap_fd`: a replier cannot reach the owner's listener; the owner does not trap.
pub(crate) const TRAP_FORBIDDEN: i32 = -2;

const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
// ioctl numbers: _IOWR('!', 0, struct seccomp_notif), _IOWR('!', 1, struct
// seccomp_notif_resp), _IOW('!', 4, __u64).
const NOTIF_RECV: libc::c_ulong = 0xc050_2100;
const NOTIF_SEND: libc::c_ulong = 0xc018_2101;
const NOTIF_SET_FLAGS: libc::c_ulong = 0x4008_2104;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

#[repr(C)]
#[derive(Default)]
struct SeccompData {
    nr: i32,
    arch: u32,
    ip: u64,
    args: [u64; 6],
}

#[repr(C)]
#[derive(Default)]
struct Notif {
    id: u64,
    pid: u32,
    flags: u32,
    data: SeccompData,
}

#[repr(C)]
#[derive(Default)]
struct NotifResp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

const _: () = assert!(std::mem::size_of::<Notif>() == 80);
const _: () = assert!(std::mem::size_of::<NotifResp>() == 24);

thread_local! {
    /// This thread's listener: descriptor number, `TRAP_NONE` (not installed yet) or
    /// `TRAP_FORBIDDEN` (installing failed; do not try again).
    static LISTENER: Cell<i32> = const { Cell::new(TRAP_NONE) };
}

/// The environment variable that switches hand-offs on for every endpoint the process
/// binds from then on (`1`, `on`, `true` or `yes`), e.g. for a program that cannot call
/// `set_handoff` / `mnx_set_handoff` itself.
pub const ENV: &str = "USTACK_IPC_HANDOFF";

/// Whether a new endpoint starts with hand-offs on (see [`ENV`]; read at each bind).
pub(crate) fn default_on() -> bool {
    std::env::var(ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "on" | "true" | "yes"
        )
    })
}

/// In a `fork`ed child (atfork handler; async-signal-safe): the child's thread inherits
/// its parent thread's filter and a copy of its listener, which the child must not use
/// (its traps would go to the parent's repliers). It closes that copy and tries a filter
/// of its own on first use; the kernel refuses that one (`EBUSY`: one listener per chain
/// of filters) as long as the parent's listener is open, and the child then uses its
/// doorbells.
pub(crate) fn after_fork_in_child() {
    let _ = LISTENER.try_with(|l| {
        let fd = l.replace(TRAP_NONE);
        if fd >= 0 {
            // SAFETY: the child's copy of its parent's listener, used by nothing else in
            // the child (the parent's copy stays open).
            unsafe { libc::close(fd) };
        }
    });
}

/// This thread's listener descriptor number, installing the filter on first use; `None`
/// if it cannot be installed (no `no_new_privs` and no `CAP_SYS_ADMIN`, seccomp refused,
/// an architecture without a known audit number).
pub(crate) fn thread_listener() -> Option<RawFd> {
    let cur = LISTENER.try_with(Cell::get).ok()?;
    if cur >= 0 {
        return Some(cur);
    }
    if cur == TRAP_FORBIDDEN {
        return None;
    }
    let fd = install();
    let _ = LISTENER.try_with(|l| l.set(fd.unwrap_or(TRAP_FORBIDDEN)));
    fd
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn install() -> Option<RawFd> {
    // BPF: if arch == AUDIT_ARCH && nr == TRAP_NR { USER_NOTIF } else { ALLOW }.
    let code = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let prog = [
        code(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        code(JEQ_K, 0, 3, AUDIT_ARCH),
        code(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        code(JEQ_K, 0, 1, TRAP_NR as u32),
        code(RET_K, 0, 0, SECCOMP_RET_USER_NOTIF),
        code(RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: seccomp reads the program through a valid pointer for its stated length;
    // the result is checked. The filter only ever traps TRAP_NR on this architecture.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    } as i32;
    if fd < 0 {
        return None;
    }
    // SAFETY: an ioctl with an integer argument on the listener we just got.
    if unsafe { libc::ioctl(fd, NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) } != 0 {
        // A kernel before 6.6: answers would not hand the CPU over, and a trap would only
        // be a dearer doorbell. Do not use it (the filter stays, but nothing ever makes
        // the system call it traps).
        // SAFETY: closing the descriptor we just got.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn install() -> Option<RawFd> {
    None
}

/// Sleep until a holder of this thread's listener answers (or a signal interrupts).
pub(crate) fn trap() {
    // SAFETY: a system call number that no kernel implements and our filter traps; it
    // has no arguments and touches no memory.
    unsafe { libc::syscall(TRAP_NR) };
}

/// Is a notification pending on `fd`? Waits at most `ms` milliseconds.
fn pending(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r == 1 && p.revents & libc::POLLIN != 0
}

/// Receive one pending notification (the caller knows one is pending).
fn recv(fd: RawFd) -> Option<Notif> {
    let mut n = Notif::default();
    // SAFETY: the kernel fills a zeroed seccomp_notif of the size it expects.
    (unsafe { libc::ioctl(fd, NOTIF_RECV, &mut n as *mut Notif) } == 0).then_some(n)
}

/// Answer notification `id`: the trapped system call returns `-error` (0: success).
fn send(fd: RawFd, id: u64, error: i32) -> bool {
    let mut r = NotifResp {
        id,
        error: -error,
        ..NotifResp::default()
    };
    // SAFETY: a valid seccomp_notif_resp; the result is checked.
    unsafe { libc::ioctl(fd, NOTIF_SEND, &mut r as *mut NotifResp) == 0 }
}

/// Mark `owner`'s slot so that it stops trapping: a replier cannot reach the listener
/// it published as `fdnum` (never overwrites a newer publication).
pub(crate) fn forbid(owner: &Slot, fdnum: i32) {
    if fdnum >= 0 {
        let _ = owner.trap_fd.compare_exchange(
            fdnum,
            TRAP_FORBIDDEN,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// Take the right to receive `owner`'s trap notification (only one process may: a
/// second `NOTIF_RECV` would block until the owner traps again). A claim held by a dead
/// process is taken over.
fn claim(owner: &Slot) -> bool {
    let me = crate::sys::getpid();
    match owner
        .trap_claim
        .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => true,
        Err(other) => {
            !crate::sys::pid_running(other)
                && owner
                    .trap_claim
                    .compare_exchange(other, me, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
        }
    }
}

fn unclaim(owner: &Slot) {
    owner.trap_claim.store(0, Ordering::Release);
}

/// The replier's side: answer the trap of `owner` (the slot of a waiter whose
/// `SLEEP_TRAP` we swapped away, so it traps or has trapped) through `listener`. Waits for
/// the trap for at most ~`patience_ms`, as long as `alive()` says the owner is still
/// there. False if nothing could be answered (the owner's watchdog then does it); true
/// also when someone else is answering it right now.
pub(crate) fn answer(
    listener: &OwnedFd,
    owner: &Slot,
    patience_ms: i32,
    alive: impl Fn() -> bool,
) -> bool {
    if !claim(owner) {
        return true;
    }
    let fd = listener.as_raw_fd();
    let tid = owner.tid.load(Ordering::Relaxed);
    let mut waited = 0;
    let ok = loop {
        if pending(fd, 0) || (waited < patience_ms && pending(fd, 1)) {
            // We hold the claim: nobody else receives, so this does not block (a target
            // interrupted meanwhile makes it fail with ENOENT).
            let Some(n) = recv(fd) else {
                // The target was interrupted (ENOENT): count it like a wait.
                waited += 1;
                if waited >= patience_ms {
                    break false;
                }
                continue;
            };
            owner.trap_id.store(n.id, Ordering::Release);
            if n.pid == tid {
                let ok = send(fd, n.id, 0);
                if ok {
                    ANSWERED.fetch_add(1, Ordering::Relaxed);
                }
                break ok;
            }
            // Another thread of the owner's process trapped on the same listener (it
            // should not: each thread has its own); let it re-check and trap again.
            send(fd, n.id, libc::EAGAIN);
            continue;
        }
        waited += 1;
        if waited >= patience_ms || !alive() {
            break false;
        }
    };
    unclaim(owner);
    ok
}

/// The waiter's watchdog: answer this thread's own trap (peer dead, domain ended, a
/// replier that could not). `listener` is the owner's own descriptor number.
pub(crate) fn release(listener: RawFd, owner: &Slot) {
    if !claim(owner) {
        return; // someone is answering it right now
    }
    if pending(listener, 0) {
        if let Some(n) = recv(listener) {
            send(listener, n.id, libc::EAGAIN);
        }
    } else {
        // A replier that died after receiving it: answer by its id (a stale id fails
        // harmlessly with ENOENT).
        send(
            listener,
            owner.trap_id.load(Ordering::Acquire),
            libc::EAGAIN,
        );
    }
    unclaim(owner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Domain, DomainConfig};

    /// A claim held by a live process stands; one held by a process that has exited
    /// (a zombie, not yet reaped) or is gone is taken over.
    #[test]
    fn a_claim_of_a_dead_process_is_taken_over() {
        let d = Domain::create(
            &format!("u-ho-claim-{}", std::process::id()),
            DomainConfig::default(),
        )
        .unwrap();
        let s = d.slot(0);
        let fork = |ms: u64| {
            // SAFETY: the child only sleeps and `_exit`s.
            let c = unsafe { libc::fork() };
            assert!(c >= 0);
            if c == 0 {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                // SAFETY: ends the child without unwinding into the test harness.
                unsafe { libc::_exit(0) };
            }
            c
        };
        let (live, zombie) = (fork(5000), fork(0));
        // Let the second child exit; it stays a zombie until reaped below.
        std::thread::sleep(std::time::Duration::from_millis(200));
        s.trap_claim.store(live as u32, Ordering::Release);
        let held = claim(s);
        s.trap_claim.store(zombie as u32, Ordering::Release);
        let taken = claim(s) && s.trap_claim.load(Ordering::Acquire) == crate::sys::getpid();
        unclaim(s);
        let free = claim(s);
        unclaim(s);
        for c in [live, zombie] {
            // SAFETY: killing and reaping our own children.
            unsafe {
                libc::kill(c, libc::SIGKILL);
                libc::waitpid(c, std::ptr::null_mut(), 0);
            }
        }
        d.end().unwrap();
        assert!(!held, "took over a live process's claim");
        assert!(taken, "a zombie's claim was not taken over");
        assert!(free);
    }
}
