//! SIGINT/SIGTERM handling without async-signal-safety pitfalls: the signals
//! are blocked in every thread (the mask is inherited by threads spawned
//! afterwards) and collected synchronously with `sigtimedwait`.

use std::io;
use std::time::Duration;

fn term_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully before
    // sigaddset touches it. Both only write to the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Block SIGINT and SIGTERM in the calling thread. Call it before spawning
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

/// Wait up to `timeout` for SIGINT/SIGTERM. Returns the signal number if one
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
