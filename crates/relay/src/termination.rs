//! SIGINT/SIGTERM/SIGHUP handling without async-signal-safety pitfalls: the signals
//! are blocked in every thread (the mask is inherited by threads spawned
//! afterwards) and collected synchronously with `sigtimedwait`. And, for
//! the benchmarks, which make network namespaces and run programs in them:
//! a clean-up on those signals ([`clean_up_on_termination`]), since no
//! destructor runs when a process is killed by one.

use std::io;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The signals that stop ustack's long-running commands: SIGINT, SIGTERM
/// and SIGHUP (the terminal went away), except SIGHUP when the process was
/// started with it ignored (`nohup`): blocked and waited for, an ignored
/// signal would be taken like the others (Linux keeps a blocked signal
/// pending even when its action is to ignore it). Decided once, so that
/// blocking and waiting always use the same set.
fn term_set() -> libc::sigset_t {
    static HUP_IGNORED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let hup_ignored = *HUP_IGNORED.get_or_init(|| {
        // SAFETY: sigaction with a null new action only reads the current
        // one into `old`, which is plain data we own.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
        }
    });
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully before
    // sigaddset touches it. Both only write to the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if !hup_ignored {
            libc::sigaddset(&mut set, libc::SIGHUP);
        }
        set
    }
}

/// Block SIGINT, SIGTERM and SIGHUP (see `term_set`) in the calling
/// thread. Call it before spawning
/// threads, so that no thread gets them asynchronously. Only the commands
/// that wait for them call it (child processes inherit the mask).
pub fn block_termination() -> io::Result<()> {
    let set = term_set();
    // SAFETY: `set` is a valid, initialised signal set; the old mask is not
    // requested (null pointer is allowed).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Block SIGINT, SIGTERM and SIGHUP in the calling thread (as
/// [`block_termination`]) and return a descriptor that becomes readable
/// when one of them is pending (`signalfd`): for an event loop that waits
/// on descriptors and should stop cleanly on them. Call it before spawning
/// threads. The descriptor is close-on-exec.
pub fn termination_fd() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    block_termination()?;
    let set = term_set();
    // SAFETY: `set` is a valid, initialised signal set; -1 asks for a new
    // descriptor.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: signalfd just returned this descriptor; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Wait up to `timeout` for SIGINT, SIGTERM or SIGHUP. Returns the signal number if one
/// arrived, `None` on timeout.
pub fn wait_termination(timeout: Option<Duration>) -> Option<i32> {
    let set = term_set();
    loop {
        let rc = match timeout {
            Some(t) => {
                let ts = libc::timespec {
                    tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
                    tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
                };
                // SAFETY: `set` and `ts` are valid for the duration of the call;
                // the siginfo pointer may be null.
                unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) }
            }
            None => {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is valid and `sig` is a writable int.
                let rc = unsafe { libc::sigwait(&set, &mut sig) };
                if rc == 0 {
                    sig
                } else {
                    -1
                }
            }
        };
        if rc > 0 {
            return Some(rc);
        }
        let err = io::Error::last_os_error();
        if timeout.is_some() && err.raw_os_error() == Some(libc::EAGAIN) {
            return None;
        }
        if err.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if timeout.is_some() {
            return None;
        }
    }
}

/// The namespaces this process made and has not deleted yet
/// ([`add_netns`]): what [`clean_up_on_termination`] deletes.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<String>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `ip netns add NAME`, on the clean-up list from before the call, so that
/// a clean-up in between deletes it too (deleting one not made yet is
/// harmless), and off it again if the call fails (the name may be
/// another's). The error carries ip(8)'s message.
pub fn add_netns(name: &str) -> io::Result<()> {
    live().push(name.to_string());
    let made = Command::new("ip").args(["netns", "add", name]).output();
    match made {
        Ok(out) if out.status.success() => Ok(()),
        other => {
            live().retain(|n| n != name);
            Err(match other {
                Ok(out) => io::Error::other(format!(
                    "ip netns add {name}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
                Err(e) => e,
            })
        }
    }
}

/// `ip netns del NAME` (errors ignored: it may be gone already), and off
/// the clean-up list.
pub fn delete_netns(name: &str) {
    ip_netns_del(name);
    live().retain(|n| n != name);
}

fn ip_netns_del(name: &str) {
    let _ = Command::new("ip")
        .args(["netns", "del", name])
        .stderr(Stdio::null())
        .status();
}

/// For a command that makes namespaces and runs programs in them (the
/// benchmarks): on SIGINT, SIGTERM or SIGHUP, instead of dying with them left
/// behind, SIGKILL every process it started (and theirs), delete the
/// namespaces made with [`add_netns`] and exit with 128 + the
/// signal, as a shell reports a process killed by it. Call it before any
/// thread is spawned: it blocks the signals in the calling thread, so
/// in every thread made after it (children start with the default mask),
/// and waits for them in a thread of its own. A SIGKILL still leaves the
/// namespaces: nothing can run then.
pub fn clean_up_on_termination() -> io::Result<()> {
    block_termination()?;
    std::thread::Builder::new()
        .name("ustack-cleanup".into())
        .spawn(|| {
            let Some(sig) = wait_termination(None) else {
                return;
            };
            eprintln!("ustack: signal {sig}: removing the benchmark's namespaces and processes");
            // Held until the exit: no namespace can be added meanwhile.
            let names = live();
            kill_descendants();
            for n in names.iter() {
                ip_netns_del(n);
            }
            std::process::exit(128 + sig);
        })?;
    Ok(())
}

/// SIGKILL every process descended from this one (found through /proc:
/// parent links), the deepest first so that none is re-parented away.
fn kill_descendants() {
    let me = std::process::id();
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![me];
    let mut i = 0;
    while let Some(&p) = found.get(i) {
        found.extend(
            parent_of
                .iter()
                .filter(|&&(_, pp)| pp == p)
                .map(|&(c, _)| c),
        );
        i += 1;
    }
    for &pid in found.iter().skip(1).rev() {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill(2) with a pid read from /proc as our descendant;
            // at worst it names a process that already exited (ESRCH).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_wait_times_out_and_sees_a_raised_signal() {
        block_termination().unwrap();
        let t0 = std::time::Instant::now();
        assert_eq!(wait_termination(Some(Duration::from_millis(30))), None);
        assert!(t0.elapsed() >= Duration::from_millis(25));
        // Deliver SIGTERM to this very thread; it is blocked, so it stays pending.
        // SAFETY: pthread_self is always valid for the calling thread.
        let rc = unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGTERM) };
        assert_eq!(rc, 0);
        assert_eq!(
            wait_termination(Some(Duration::from_secs(2))),
            Some(libc::SIGTERM)
        );
    }
}
