#![allow(dead_code)]
//! Helpers shared by the integration tests.

use std::time::{Duration, Instant};
use ustack_ipc::{Domain, DomainConfig};

/// A domain that is ended when the guard drops (also on test failure).
pub struct DomGuard(pub Domain);

impl Drop for DomGuard {
    fn drop(&mut self) {
        let _ = self.0.end();
    }
}

impl std::ops::Deref for DomGuard {
    type Target = Domain;
    fn deref(&self) -> &Domain {
        &self.0
    }
}

pub fn unique(tag: &str) -> String {
    format!("t-{}-{}", tag, std::process::id())
}

pub fn domain(tag: &str, max: u32) -> DomGuard {
    let cfg = DomainConfig {
        max_endpoints: max,
        ..DomainConfig::default()
    };
    DomGuard(Domain::create(&unique(tag), cfg).expect("create domain"))
}

/// Fork a child that runs `f` and exits with its return value (panics exit with 101).
/// Only the calling thread exists in the child; `f` must not rely on other threads.
pub fn fork_child(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork in a (multi-threaded) test process: the child only runs `f`, which uses
    // async-signal-unsafe functions that glibc makes fork-safe (malloc), then `_exit`s
    // without running atexit handlers or unwinding into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: terminating the child immediately is always sound.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Wait for a child with a time bound; returns its exit status (or -signal).
pub fn wait_child(pid: libc::pid_t, limit: Duration) -> i32 {
    let t0 = Instant::now();
    loop {
        let mut st = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        if r == pid {
            if libc::WIFEXITED(st) {
                return libc::WEXITSTATUS(st);
            }
            return -libc::WTERMSIG(st);
        }
        if t0.elapsed() > limit {
            kill(pid);
            panic!("child {pid} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn kill(pid: libc::pid_t) {
    // SAFETY: sending SIGKILL to our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Kills the child on drop unless disarmed (so failing tests leave no stray processes).
pub struct ChildGuard(pub libc::pid_t);
impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.0 > 0 {
            kill(self.0);
            let mut st = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.0, &mut st, 0) };
        }
    }
}

/// Poll `f` until true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// Make system call `nr` fail with EPERM in the calling thread and the children it forks
/// afterwards (as when a peer may not be ptraced, or seccomp is off limits), with a
/// seccomp filter. True if the filter is in place.
pub fn forbid_syscall(nr: libc::c_long) -> bool {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let f = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let prog = [
        f(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        f(JEQ_K, 0, 1, nr as u32),
        f(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        f(RET_K, 0, 0, RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with a valid filter program that outlives the call.
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            ) == 0
    }
}

/// Restrict the calling thread to the first CPU it may run on.
pub fn pin_to_one_cpu() {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; the calls fill / read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .expect("some CPU");
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(first, &mut one);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one),
            0
        );
    }
}

/// Wait (at most 5 s) until `n` endpoints are bound in `d`, e.g. by a forked child.
pub fn wait_bound(d: &Domain, n: usize) -> bool {
    eventually(Duration::from_secs(5), || d.info().endpoints.len() == n)
}
