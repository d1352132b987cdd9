//! Thin wrappers around the Linux system calls the IPC needs: futexes on shared memory,
//! thread ids, process liveness and `process_vm_readv`/`process_vm_writev`.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Wait on a (process-shared) futex word while it still holds `expected`, at most `timeout`
/// (`None`: no timeout). Spurious returns are fine: callers always re-check their condition.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned 32-bit atomic that lives in a shared mapping (or
    // process memory) for the duration of the call; FUTEX_WAIT (not PRIVATE, because the
    // word is shared between processes) only reads it. `tsp` is null or points to a
    // valid relative timeout that outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wake a futex sleeper whose `sleeping` announcement the caller has just swapped away
/// (after bumping `word` for its own change).
///
/// The second bump is what makes the swap safe. The sleeper announces itself after reading
/// the word's value `v` it will sleep on, so the announcement can be taken by a waker whose
/// change the sleeper has already seen (its bump is included in `v`): that waker's
/// FUTEX_WAKE may find nobody queued yet, and the next waker, whose change the sleeper has
/// not seen, finds no announcement and stays silent. A bump after the swap moves the word
/// past `v`, so the sleeper either sees the word changed when the kernel checks it
/// (EAGAIN) or is already queued when our FUTEX_WAKE comes.
pub(crate) fn futex_wake_taken(word: &AtomicU32) {
    word.fetch_add(1, Ordering::SeqCst);
    futex_wake(word);
}

/// Wake every waiter sleeping on a (process-shared) futex word.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned futex word; FUTEX_WAKE does not access memory
    // beyond hashing the address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// Kernel thread id of the calling thread.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

thread_local! {
    /// The calling thread's id (0: not known yet). Reset in a `fork`ed child, whose only
    /// thread has a new id but a copy of the forking thread's thread-locals.
    static TID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Kernel thread id of the calling thread, cached per thread (no system call).
pub(crate) fn cached_tid() -> u32 {
    TID.try_with(|t| {
        if t.get() == 0 {
            getpid(); // registers the atfork handler that resets the cache in a child
            t.set(gettid());
        }
        t.get()
    })
    .unwrap_or_else(|_| gettid())
}

static PID: AtomicU32 = AtomicU32::new(0);
/// 0: no atfork handler yet; 1: a thread is registering it; 2: registered.
static ATFORK: AtomicU32 = AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    PID.store(0, Ordering::Relaxed);
    OWN_START.store(0, Ordering::Relaxed);
    // A const-initialised Cell without a destructor: no allocation, no lock.
    let _ = TID.try_with(|t| t.set(0));
    crate::watchdog::after_fork_in_child();
    crate::handoff::after_fork_in_child();
    crate::capi::after_fork_in_child();
}

/// Process id of the caller, cached (glibc no longer caches `getpid`, and a system call
/// costs more than a whole arena `vcopy` of a few KB); a `fork`ed child forgets the
/// parent's value in an atfork handler. Never blocks: a child forked while another thread
/// registered the handler simply does not cache (a blocking `Once` would deadlock there).
pub(crate) fn getpid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    if ATFORK.load(Ordering::Acquire) == 0
        && ATFORK
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        // SAFETY: registers a child handler that only stores to atomics (async-signal-safe).
        if unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) } == 0 {
            ATFORK.store(2, Ordering::Release);
        }
    }
    let p = std::process::id();
    if ATFORK.load(Ordering::Acquire) == 2 {
        PID.store(p, Ordering::Relaxed);
    }
    p
}

/// Whether a process is live and its start time (fields 3, 20 and 22 of
/// `/proc/<pid>/stat`, start time in clock ticks since boot), used to tell a live owner
/// from a zombie or a recycled pid. A process counts as live unless its state is `X`
/// (dead) or `Z` with no thread left: the state letter is its first thread's, which
/// shows `Z` as soon as that thread exits (`pthread_exit` in `main`, or a raw `exit`)
/// while the others go on running, so `num_threads` must be looked at too. `Ok(None)` if
/// the process does not exist; an error if that cannot be told (e.g. no descriptor left to
/// open the file: EMFILE).
pub(crate) fn proc_stat(pid: u32) -> std::io::Result<Option<(bool, u64)>> {
    use std::io::Read;
    let mut f = match std::fs::File::open(format!("/proc/{pid}/stat")) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
        Err(e) => return Err(e),
    };
    // The line is a few hundred bytes and comes whole from one read (it ends with a
    // newline); no size hint (the file reports 0) and no read to see the end of file.
    let mut b = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                b.extend_from_slice(&chunk[..n]);
                if b.ends_with(b"\n") {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    parse_stat(&b)
        .map(Some)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidData))
}

/// The parsing half of [`proc_stat`]: the fields after the command name (in
/// parentheses, any bytes, possibly spaces and parentheses) are ASCII.
fn parse_stat(s: &[u8]) -> Option<(bool, u64)> {
    let close = s.iter().rposition(|&c| c == b')')?;
    let rest = std::str::from_utf8(&s[close + 1..]).ok()?;
    let mut it = rest.split_ascii_whitespace();
    let state = *it.next()?.as_bytes().first()?;
    // Field 3 was `state`; num_threads is field 20 (16 further fields on), the start
    // time field 22.
    let threads: u64 = it.nth(16)?.parse().ok()?;
    let start = it.nth(1)?.parse().ok()?;
    let live = match state {
        b'X' | b'x' => false,
        // A zombie counts itself among its threads: a zombie group leader with others
        // still running shows 2 or more.
        b'Z' => threads > 1,
        _ => true,
    };
    Some((live, start))
}

/// This process's start time, read from `/proc` once per process (a `fork`ed child
/// forgets it with the cached pid, see [`getpid`]); 0: not cached.
static OWN_START: AtomicU64 = AtomicU64::new(0);

/// This process's start time (what [`proc_start_time`] reads for [`getpid`]): it never
/// changes while the process runs, so it is read once.
fn own_start_time() -> std::io::Result<u64> {
    let s = OWN_START.load(Ordering::Relaxed);
    if s != 0 {
        return Ok(s);
    }
    let pid = getpid();
    let s = proc_stat(pid)?
        .map(|(_, s)| s)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // Cached only where a forked child is sure to forget it (the atfork handler that
    // also resets the pid is in place; `getpid` above tried to register it).
    if ATFORK.load(Ordering::Acquire) == 2 && PID.load(Ordering::Relaxed) == pid {
        OWN_START.store(s, Ordering::Relaxed);
    }
    Ok(s)
}

/// Start time of a process, see [`proc_stat`] (an error also if it does not exist).
pub(crate) fn proc_start_time(pid: u32) -> std::io::Result<u64> {
    if pid == getpid() {
        return own_start_time();
    }
    proc_stat(pid)?
        .map(|(_, s)| s)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH))
}

/// Does process `pid` exist and is it live (see [`proc_stat`])? (Cheap check without
/// start time.) When that cannot be told it counts as running: nothing of a live process
/// may be reclaimed.
pub(crate) fn pid_running(pid: u32) -> bool {
    // The caller's own process runs.
    if pid == getpid() {
        return true;
    }
    match proc_stat(pid) {
        Ok(Some((live, _))) => live,
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Is the owner (process `pid` started at `start`) still alive? Zombies (killed but not
/// yet reaped) count as dead, a process whose first thread has exited while others run
/// does not (see [`proc_stat`]). Liveness is per process: an endpoint may move between the
/// threads of its process, and a thread that exits drops (unbinds) its endpoints. A
/// process that exists but whose start time cannot be read now (see [`proc_stat`]) counts
/// as alive: a peer is declared dead (and its slot reclaimed) only on proof.
pub(crate) fn owner_alive(pid: u32, _tid: u32, start: u64) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // Our own pid: we run, so the owner is alive if it is us (same start time) and dead
    // if it was an earlier process that had our pid. No system call.
    if pid == getpid() {
        if let Ok(s) = own_start_time() {
            return s == start;
        }
    }
    // SAFETY: kill with signal 0 only performs the existence/permission check.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match proc_stat(pid) {
        Ok(Some((live, s))) => s == start && live,
        Ok(None) => false,
        Err(_) => true,
    }
}

/// May the calling thread run on one CPU only (its affinity mask has a single CPU)?
pub(crate) fn single_cpu_affinity() -> bool {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer of the size passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    // SAFETY: CPU_COUNT reads the set we own.
    r == 0 && unsafe { libc::CPU_COUNT(&set) } == 1
}

/// CPU the calling thread runs on (u32::MAX if unknown).
pub(crate) fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu has no arguments; it returns -1 on error.
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        u32::MAX
    } else {
        c as u32
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic time in nanoseconds.
pub(crate) fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Coarse monotonic time in nanoseconds (a few ms resolution, cheaper than `now_ns`):
/// for the cadence of liveness checks.
pub(crate) fn coarse_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}

/// Which direction a single-copy transfer goes, seen from the caller.
pub(crate) enum VmDir {
    /// Copy from the remote process into the caller (`process_vm_readv`).
    Read,
    /// Copy from the caller into the remote process (`process_vm_writev`).
    Write,
}

/// One kernel copy between the caller's `local` range and `remote` in process `pid`.
/// Repeats on partial transfers; a fault anywhere gives `BadAddress`.
pub(crate) fn vm_copy(dir: VmDir, pid: u32, local: usize, remote: usize, len: usize) -> Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            iov_base: (local + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: (remote + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: process_vm_readv/writev validate both address ranges in the kernel and
        // return EFAULT instead of faulting; the iovec structs are valid for the call.
        // Memory of the *caller* is only written by readv into `local`, which the caller of
        // this function guarantees is a writable range it owns (or accepts EFAULT for).
        let n = unsafe {
            match dir {
                VmDir::Read => libc::process_vm_readv(pid as libc::pid_t, &liov, 1, &riov, 1, 0),
                VmDir::Write => libc::process_vm_writev(pid as libc::pid_t, &liov, 1, &riov, 1, 0),
            }
        };
        if n < 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if e == libc::EINTR {
                continue;
            }
            return Err(Error::from_errno(e));
        }
        if n == 0 {
            // No progress: the next byte is not accessible.
            return Err(Error::BadAddress);
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fork a child that evaluates `check` and exits with it; did it hold?
    fn in_child(check: impl FnOnce() -> bool) -> bool {
        // SAFETY: the child only runs `check` (system calls and /proc reads; malloc is
        // fork-safe in glibc) and `_exit`s at once.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let ok = check();
            // SAFETY: leaving the child without unwinding into the test harness.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut st = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(child, &mut st, 0) };
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
    }

    /// The endpoints' sleep protocol reduced to its words: a sleeper that always sleeps
    /// and a waker that changes the word without pause, each change followed by taking
    /// the sleeper's announcement. A wake-up lost by the protocol shows as a sleep that
    /// runs into its 200 ms timeout while the word has moved. With a plain FUTEX_WAKE
    /// after the swap (no second bump) this loses a wake-up within a second on a 2-CPU
    /// machine; on one CPU the race cannot happen and the test passes either way.
    #[test]
    fn a_taken_sleep_announcement_never_loses_the_wake_up() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        struct Words {
            futex: AtomicU32,
            sleeping: AtomicU32,
            stop: AtomicBool,
        }
        let w = Arc::new(Words {
            futex: AtomicU32::new(0),
            sleeping: AtomicU32::new(0),
            stop: AtomicBool::new(false),
        });
        let ws = w.clone();
        let sleeper = std::thread::spawn(move || {
            let (mut sleeps, mut lost) = (0u64, 0u64);
            while !ws.stop.load(Ordering::Relaxed) {
                let v = ws.futex.load(Ordering::SeqCst);
                ws.sleeping.swap(1, Ordering::SeqCst);
                if ws.futex.load(Ordering::SeqCst) == v {
                    let t0 = std::time::Instant::now();
                    futex_wait(&ws.futex, v, Some(Duration::from_millis(200)));
                    if t0.elapsed() >= Duration::from_millis(200)
                        && ws.futex.load(Ordering::SeqCst) != v
                    {
                        lost += 1;
                    }
                }
                ws.sleeping.store(0, Ordering::Relaxed);
                sleeps += 1;
            }
            (sleeps, lost)
        });
        let ww = w.clone();
        let waker = std::thread::spawn(move || {
            let mut n = 0u32;
            while !ww.stop.load(Ordering::Relaxed) {
                ww.futex.fetch_add(1, Ordering::SeqCst);
                if ww.sleeping.swap(0, Ordering::SeqCst) != 0 {
                    futex_wake_taken(&ww.futex);
                }
                n = n.wrapping_add(1);
                if n.is_multiple_of(8) {
                    std::thread::yield_now();
                }
            }
        });
        std::thread::sleep(Duration::from_millis(1500));
        w.stop.store(true, Ordering::Relaxed);
        w.futex.fetch_add(1, Ordering::SeqCst);
        futex_wake(&w.futex);
        waker.join().expect("waker");
        let (sleeps, lost) = sleeper.join().expect("sleeper");
        assert_eq!(lost, 0, "{lost} lost wake-ups in {sleeps} sleeps");
        assert!(sleeps > 100, "only {sleeps} sleeps");
    }

    #[test]
    fn cached_pid_and_tid_are_renewed_in_a_forked_child() {
        assert_eq!(getpid(), std::process::id());
        assert_eq!(cached_tid(), gettid());
        assert!(
            // SAFETY: getpid has no arguments.
            in_child(|| getpid() == unsafe { libc::getpid() } as u32 && cached_tid() == gettid()),
            "child saw a stale pid or tid"
        );
        assert_eq!(getpid(), std::process::id());
    }

    #[test]
    fn start_time_and_liveness_of_self() {
        let pid = getpid();
        let st = proc_start_time(pid).expect("own /proc entry");
        assert!(matches!(proc_stat(pid), Ok(Some((_, s))) if s == st));
        assert!(owner_alive(pid, gettid(), st));
        assert!(
            !owner_alive(pid, gettid(), st + 1),
            "wrong start time must look dead"
        );
        assert!(!owner_alive(0, 0, 0));
        assert!(pid_running(pid));
        // Our own start time is cached; it is what /proc says, and a forked child has
        // its own (read afresh: the start time is in clock ticks, so it may be equal).
        assert_eq!(own_start_time().ok(), Some(st));
        assert!(in_child(|| {
            let me = getpid();
            // SAFETY: getppid has no arguments.
            let parent = unsafe { libc::getppid() } as u32;
            let fresh = proc_stat(me).ok().flatten().map(|(_, s)| s);
            me != pid
                && parent == pid
                && fresh.is_some()
                && own_start_time().ok() == fresh
                && proc_start_time(me).ok() == fresh
                && owner_alive(me, 0, fresh.unwrap_or(0))
                && !owner_alive(me, 0, fresh.unwrap_or(0) + 1)
                && owner_alive(pid, 0, st)
                && !owner_alive(pid, 0, st + 1)
        }));
    }

    #[test]
    fn stat_lines_are_parsed_with_any_command_name() {
        let line = |comm: &str, state: char, threads: u32| {
            let mut f: Vec<String> = (4..=52).map(|i| i.to_string()).collect();
            f[20 - 4] = threads.to_string();
            f[22 - 4] = "987654".into();
            format!("4242 ({comm}) {state} {}", f.join(" "))
        };
        for (comm, state, threads, live) in [
            ("sleep", 'S', 1, true),
            ("a) Z (b", 'R', 3, true),
            ("x", 'Z', 1, false),
            ("x", 'Z', 2, true),
            ("x", 'X', 1, false),
        ] {
            assert_eq!(
                parse_stat(line(comm, state, threads).as_bytes()),
                Some((live, 987654)),
                "{comm:?} {state} {threads}"
            );
        }
        assert_eq!(parse_stat(b"4242 (x) S 1 2"), None);
        assert_eq!(parse_stat(b"no parenthesis"), None);
        // A command name need not be UTF-8 (prctl(PR_SET_NAME) takes any bytes).
        let mut raw = line("xx", 'S', 1).into_bytes();
        raw[6] = 0xff;
        assert_eq!(parse_stat(&raw), Some((true, 987654)));
    }

    /// A process whose first thread has exited while another runs shows state `Z` in
    /// `/proc/<pid>/stat`: it must still count as alive (else its endpoints would be
    /// declared dead and reclaimed under it); once the last thread is gone it is dead.
    #[test]
    fn a_process_whose_main_thread_exited_is_alive() {
        // SAFETY: the child spawns one thread and ends its first thread with the raw
        // `exit` system call (no unwinding, no atexit); the other thread `_exit`s the
        // process after 600 ms.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            std::thread::spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(600));
                // SAFETY: ends the whole child process.
                unsafe { libc::_exit(0) };
            });
            // SAFETY: ends this thread only; the process lives on in the other one.
            unsafe { libc::syscall(libc::SYS_exit, 0) };
            // SAFETY: not reached; `_exit` in case the thread exit failed.
            unsafe { libc::_exit(1) };
        }
        let pid = child as u32;
        std::thread::sleep(std::time::Duration::from_millis(200));
        let st = proc_start_time(pid).expect("child's /proc entry");
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let during = (pid_running(pid), owner_alive(pid, 0, st));
        let mut status = 0;
        // Wait for the process to end without reaping it: it stays a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // SAFETY: waitid with WNOWAIT on our own child fills a zeroed siginfo_t.
        let ended = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) == 0
        };
        let after = (pid_running(pid), owner_alive(pid, 0, st));
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(std::time::Instant::now() < deadline);
        assert!(
            state.contains(") Z "),
            "expected a zombie leader, got {state}"
        );
        assert_eq!(during, (true, true), "live process taken for dead");
        assert!(ended);
        assert_eq!(after, (false, false), "dead process taken for alive");
    }

    /// Out of descriptors, `/proc` cannot be read: a live process must still count as
    /// alive (else its peers would get DeadEndpoint and its slot would be reclaimed).
    #[test]
    fn liveness_without_descriptors_left_is_not_death() {
        let pid = getpid();
        let st = proc_start_time(pid).expect("own /proc entry");
        // In the child: the parent is alive; so is the child itself (whose cached pid, reset
        // by the atfork handler, is read afresh).
        let ok = in_child(|| {
            crate::debug::use_up_descriptors()
                && proc_stat(pid).is_err()
                && owner_alive(pid, 0, st)
                && pid_running(pid)
                && pid_running(getpid())
        });
        assert!(ok, "a process looked dead while /proc could not be read");
    }

    #[test]
    fn vm_copy_within_self_and_bad_address() {
        let src = vec![7u8; 10_000];
        let mut dst = vec![0u8; 10_000];
        vm_copy(
            VmDir::Read,
            getpid(),
            dst.as_mut_ptr() as usize,
            src.as_ptr() as usize,
            src.len(),
        )
        .unwrap();
        assert_eq!(src, dst);
        let r = vm_copy(VmDir::Read, getpid(), dst.as_mut_ptr() as usize, 8, 16);
        assert_eq!(r, Err(Error::BadAddress));
    }
}
