//! Privileges the relay gives up once the sandbox, its TAP and the host
//! listeners exist (see README.md, "Threat model").
//!
//! The relay is the process that parses the guest's packets. After set-up
//! it needs no privilege but one: binding a host port below 1024 for a
//! forward added later (`ustack ports add 80:80`), which it keeps only if
//! it had it. So it
//! - sets `no_new_privs` (nothing it could execute gains privileges);
//! - drops every other capability from its bounding set, and keeps only
//!   `CAP_NET_BIND_SERVICE` (if it had it) as permitted and effective, none
//!   inheritable or ambient.
//!
//! - installs a seccomp filter (on every thread) that allows only the system
//!   calls the relay makes once running: I/O on the descriptors it has,
//!   sockets, epoll, memory, time, futexes, signals, threads (a new thread,
//!   never a new process) and a few reads of `/proc`. Anything else (a new
//!   program, `ptrace`, mounting, namespaces, module loading, `bpf`, another
//!   process's memory, ...) stops the relay with a message naming the call.
//!
//! - runs as another user once set up ([`RunAs`]): by default the invoking
//!   user when started as root through sudo or a set-user-ID binary, and
//!   `nobody`/`nogroup` when started by root itself (`ustack run --run-as`
//!   chooses). The order is setgroups, setresgid, setresuid, with
//!   `PR_SET_KEEPCAPS` so that `CAP_NET_BIND_SERVICE` survives the change.
//!
//! Capabilities and user ids belong to threads: this must run before the
//! process starts its other threads (the control and metrics endpoints),
//! which then inherit the reduced sets (the seccomp filter is applied to
//! every thread).

use std::ffi::CString;
use std::io;

/// `CAP_SETPCAP` (needed to shrink the bounding set).
const CAP_SETPCAP: u32 = 8;
/// `CAP_NET_BIND_SERVICE`.
const CAP_NET_BIND_SERVICE: u32 = 10;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// What [`harden`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hardened {
    /// `CAP_NET_BIND_SERVICE` was kept (the process had it).
    pub kept_bind_service: bool,
    /// Capabilities the process held before (effective, low 64 bits).
    pub dropped: u64,
    /// The user and group the process changed to (`None`: it kept its own).
    pub now: Option<RunAs>,
}

/// The user and group the relay runs as once set up (no supplementary
/// groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// The id `nobody` and `nogroup` have when the databases do not say.
const OVERFLOW_ID: u32 = 65534;

fn passwd_entry(user: &str) -> Option<(u32, u32)> {
    let c = CString::new(user).ok()?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: an all-zero passwd is a valid out-parameter.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r with a NUL-terminated name, a valid out-struct and
    // a buffer of the length given; the strings it points to live in `buf`.
    let rc =
        unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some((pw.pw_uid, pw.pw_gid))
}

fn passwd_gid_of(uid: u32) -> Option<u32> {
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: as in `passwd_entry`.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: as in `passwd_entry`.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some(pw.pw_gid)
}

fn group_entry(group: &str) -> Option<u32> {
    let c = CString::new(group).ok()?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: an all-zero group is a valid out-parameter.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `passwd_entry`, for the group database.
    let rc =
        unsafe { libc::getgrnam_r(c.as_ptr(), &mut gr, buf.as_mut_ptr(), buf.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some(gr.gr_gid)
}

impl RunAs {
    /// `nobody` and `nogroup` (or `nobody` as a group), 65534 if unknown.
    pub fn nobody() -> RunAs {
        RunAs {
            uid: passwd_entry("nobody").map_or(OVERFLOW_ID, |(u, _)| u),
            gid: group_entry("nogroup")
                .or_else(|| group_entry("nobody"))
                .unwrap_or(OVERFLOW_ID),
        }
    }

    /// `USER[:GROUP]`, by name or number. Without GROUP: USER's group in
    /// the passwd database (for a number it has no entry for: the same
    /// number).
    pub fn parse(spec: &str) -> Result<RunAs, String> {
        let (user, group) = match spec.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (spec, None),
        };
        let (uid, primary) = match user.parse::<u32>() {
            Ok(uid) => (uid, passwd_gid_of(uid).unwrap_or(uid)),
            Err(_) => passwd_entry(user).ok_or_else(|| format!("no user {user:?}"))?,
        };
        let gid = match group {
            None => primary,
            Some(g) => match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => group_entry(g).ok_or_else(|| format!("no group {g:?}"))?,
            },
        };
        if uid == u32::MAX || gid == u32::MAX {
            return Err(format!("bad user or group in {spec:?}"));
        }
        Ok(RunAs { uid, gid })
    }

    /// Who the relay runs as: `spec` (see [`RunAs::parse`]) if given; else,
    /// when running as root, the invoking user (the real user of a
    /// set-user-ID start, or `SUDO_UID`/`SUDO_GID` from sudo), or `nobody`
    /// when root started it; else itself (`None`: nothing to change).
    pub fn choose(spec: Option<&str>) -> Result<Option<RunAs>, String> {
        if let Some(spec) = spec {
            return RunAs::parse(spec).map(Some);
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        Ok(Some(invoking_user().unwrap_or_else(RunAs::nobody)))
    }
}

/// When running as root: the user behind it, if not root: the real user of
/// a set-user-ID start, or sudo's `SUDO_UID`/`SUDO_GID`.
pub fn invoking_user() -> Option<RunAs> {
    // SAFETY: these getters have no preconditions.
    let (euid, ruid, rgid) = unsafe { (libc::geteuid(), libc::getuid(), libc::getgid()) };
    if euid != 0 {
        return None;
    }
    if ruid != 0 {
        return Some(RunAs {
            uid: ruid,
            gid: rgid,
        });
    }
    let env = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    match (env("SUDO_UID"), env("SUDO_GID")) {
        (Some(uid), Some(gid)) if uid != 0 && uid != u32::MAX && gid != u32::MAX => {
            Some(RunAs { uid, gid })
        }
        _ => None,
    }
}

/// Become `to` (user, group, no supplementary groups), keeping the
/// permitted capabilities if `keep_caps` (the effective set is emptied by
/// the change; [`harden`] sets it again).
fn change_ids(to: RunAs, keep_caps: bool) -> io::Result<()> {
    let cvt = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: prctl, setgroups, setresgid and setresuid with integer
    // arguments and a one-element group list; glibc's wrappers apply the
    // ids to every thread (there is only this one yet).
    unsafe {
        cvt(libc::prctl(
            libc::PR_SET_KEEPCAPS,
            libc::c_ulong::from(keep_caps),
            0,
            0,
            0,
        ))?;
        cvt(libc::setgroups(1, &to.gid))?;
        cvt(libc::setresgid(to.gid, to.gid, to.gid))?;
        cvt(libc::setresuid(to.uid, to.uid, to.uid))?;
        cvt(libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0))?;
        // Not dumpable, whatever fs.suid_dumpable says: other processes of
        // the new user (nobody's) may not trace it or read its memory.
        cvt(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
    }
    // Check it took, all of it (fail closed).
    let (mut r, mut e, mut s) = (0, 0, 0);
    let (mut rg, mut eg, mut sg) = (0, 0, 0);
    // SAFETY: valid out-pointers.
    unsafe {
        cvt(libc::getresuid(&mut r, &mut e, &mut s))?;
        cvt(libc::getresgid(&mut rg, &mut eg, &mut sg))?;
    }
    // SAFETY: a zero-sized query.
    let ngroups = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if [r, e, s] != [to.uid; 3] || [rg, eg, sg] != [to.gid; 3] || ngroups > 1 {
        return Err(io::Error::other(format!(
            "the user change to {}:{} did not take",
            to.uid, to.gid
        )));
    }
    Ok(())
}

fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

fn capget() -> io::Result<[CapData; 2]> {
    let mut h = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: capget with a valid header and room for the two 32-bit words
    // of version 3.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(d)
}

fn capset(d: &[CapData; 2]) -> io::Result<()> {
    let mut h = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset with a valid header and the two data words.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Give up what the relay no longer needs (see the module docs), and run
/// as `run_as` if given (and not already). Call it on the relay's thread
/// before any other thread starts.
pub fn harden(run_as: Option<RunAs>) -> io::Result<Hardened> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = capget()?;
    let dropped = u64::from(before[0].effective) | (u64::from(before[1].effective) << 32);
    let has = |c: u32, w: fn(&CapData) -> u32| w(&before[(c / 32) as usize]) & (1 << (c % 32)) != 0;
    let keep_bind = has(CAP_NET_BIND_SERVICE, |d| d.permitted);
    // Ambient capabilities first (no privilege needed), then the bounding
    // set (needs CAP_SETPCAP, which we may hold; without it nothing can be
    // added back anyway once permitted is reduced).
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if has(CAP_SETPCAP, |d| d.effective) {
        for c in 0..=last_cap() {
            if c == CAP_NET_BIND_SERVICE {
                continue;
            }
            // SAFETY: prctl with integer arguments only; EINVAL for a
            // capability this kernel does not know is harmless.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, c as libc::c_ulong, 0, 0, 0) };
        }
    }
    // SAFETY: these getters have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let now = run_as.filter(|to| (to.uid, to.gid) != (euid, egid));
    if let Some(to) = now {
        change_ids(to, keep_bind).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run as user {} group {}: {e}", to.uid, to.gid),
            )
        })?;
    }
    let mut after = [CapData::default(); 2];
    if keep_bind {
        after[0].effective = 1 << CAP_NET_BIND_SERVICE;
        after[0].permitted = 1 << CAP_NET_BIND_SERVICE;
    }
    capset(&after)?;
    seccomp()?;
    Ok(Hardened {
        kept_bind_service: keep_bind,
        dropped,
        now,
    })
}

/// System calls the relay makes once running (see the module docs).
const ALLOWED: &[libc::c_long] = &[
    // Descriptors it has.
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_close,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_fcntl,
    libc::SYS_ioctl,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    // /proc reads (the IPC's liveness checks) and the control domain's
    // file (created before, unlinked when the stack ends).
    libc::SYS_openat,
    libc::SYS_getdents64,
    libc::SYS_readlinkat,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    // Creating the control domain's file (written aside, linked in place).
    libc::SYS_linkat,
    libc::SYS_access,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_fchmod,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_dup,
    libc::SYS_dup3,
    // Waiting.
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_pselect6,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_create1,
    libc::SYS_eventfd2,
    libc::SYS_pipe2,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    // Sockets.
    libc::SYS_socket,
    libc::SYS_connect,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    libc::SYS_shutdown,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    // Signals, the command (wait, forward signals), the IPC's peers.
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_sigaltstack,
    libc::SYS_kill,
    libc::SYS_tgkill,
    libc::SYS_tkill,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_getfd,
    libc::SYS_pidfd_send_signal,
    // The process and its threads.
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_getppid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getrandom,
    libc::SYS_uname,
    libc::SYS_sysinfo,
    libc::SYS_prlimit64,
    libc::SYS_getrlimit,
    libc::SYS_capget,
    libc::SYS_prctl,
    libc::SYS_sched_getaffinity,
    libc::SYS_set_robust_list,
    libc::SYS_set_tid_address,
    libc::SYS_arch_prctl,
    libc::SYS_rseq,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
    // clone3 passes its flags in memory, out of the filter's sight: it is
    // refused with ENOSYS (a second filter), and glibc falls back to clone,
    // allowed for threads only (below).
    libc::SYS_clone3,
];

fn seccomp() -> io::Result<()> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };
    use std::collections::BTreeMap;
    let err = |e: &dyn std::fmt::Display| io::Error::other(format!("seccomp: {e}"));
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH).map_err(|e| err(&e))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALLOWED.iter().map(|&n| (n, Vec::new())).collect();
    let thread = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        libc::CLONE_THREAD as u64,
    )
    .map_err(|e| err(&e))?;
    rules.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![thread]).map_err(|e| err(&e))?],
    );
    let allow: BpfProgram =
        SeccompFilter::new(rules, SeccompAction::Trap, SeccompAction::Allow, arch)
            .and_then(TryInto::try_into)
            .map_err(|e| err(&e))?;
    let no_clone3: BpfProgram = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .and_then(TryInto::try_into)
    .map_err(|e| err(&e))?;
    install_sigsys_handler()?;
    // The allow-list last: it forbids seccomp(2) itself.
    seccompiler::apply_filter_all_threads(&no_clone3).map_err(|e| err(&e))?;
    seccompiler::apply_filter_all_threads(&allow).map_err(|e| err(&e))?;
    Ok(())
}

/// On a forbidden call: name it on stderr and stop (exit status 159, as a
/// death by SIGSYS). Async-signal-safe: no allocation, one write(2).
extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGSYS; its `_sigsys`
    // member holds the call number at byte 24 on 64-bit Linux (after
    // si_signo, si_errno, si_code, padding and the 8-byte call address).
    let nr = unsafe { std::ptr::read_unaligned((info as *const u8).add(24) as *const i32) };
    const PRE: &[u8] = b"ustack: the relay made system call ";
    const POST: &[u8] = b", which its seccomp filter forbids: stopping it (please report this)\n";
    let mut digits = [0u8; 12];
    let mut n = nr.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            break;
        }
    }
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffers are
    // valid for their lengths.
    unsafe {
        libc::write(2, PRE.as_ptr().cast(), PRE.len());
        libc::write(2, digits[i..].as_ptr().cast(), digits.len() - i);
        libc::write(2, POST.as_ptr().cast(), POST.len());
        libc::_exit(159);
    }
}

fn install_sigsys_handler() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; we set the handler, SA_SIGINFO
    // and an empty mask before installing it.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigsys as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The descriptors open now, stdio aside (from `/proc/self/fd`).
pub fn open_descriptors() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let listed: Vec<i32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&fd| fd > 2)
        .collect();
    // The listing's own descriptor is closed now: keep only open ones.
    listed
        .into_iter()
        // SAFETY: F_GETFD only reads the descriptor's flags.
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1)
        .collect()
}

/// Close descriptors `open_descriptors` listed at start (inherited from
/// whoever started us), once the command has its copies: the relay needs
/// none of them.
pub fn close_descriptors(fds: &[i32]) {
    for &fd in fds {
        // SAFETY: closing a descriptor this process was given at start and
        // never handed to any Rust owner (the relay opens its own later).
        unsafe { libc::close(fd) };
    }
}

/// For the tests: make a call the filter forbids (`ptrace`), as a
/// compromised relay would.
#[doc(hidden)]
pub fn selftest_forbidden_call() {
    // SAFETY: PTRACE_TRACEME with no other argument; the filter stops us
    // before it runs.
    unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_as_specs() {
        assert_eq!(RunAs::parse("root"), Ok(RunAs { uid: 0, gid: 0 }));
        assert_eq!(RunAs::parse("0:0"), Ok(RunAs { uid: 0, gid: 0 }));
        assert_eq!(
            RunAs::parse("4242:4343"),
            Ok(RunAs {
                uid: 4242,
                gid: 4343
            })
        );
        // A number the passwd database does not know: its group is the
        // same number.
        assert_eq!(
            RunAs::parse("4242"),
            Ok(RunAs {
                uid: 4242,
                gid: 4242
            })
        );
        assert_eq!(RunAs::parse("root:4343").map(|r| r.gid), Ok(4343));
        let nobody = RunAs::nobody();
        assert_eq!(RunAs::parse("nobody").map(|r| r.uid), Ok(nobody.uid));
        assert!(RunAs::parse("no-such-user-x")
            .unwrap_err()
            .contains("no user"));
        assert!(RunAs::parse("root:no-such-group-x")
            .unwrap_err()
            .contains("no group"));
        assert!(RunAs::parse("4294967295").is_err());
        assert!(RunAs::parse("").is_err());
    }
}
