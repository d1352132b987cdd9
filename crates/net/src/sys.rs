//! Thin, safe wrappers over the few Linux system calls the runtime needs:
//! `epoll`, `eventfd` and `getrandom`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An `eventfd` used to wake the stack thread out of `epoll_wait`.
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the returned descriptor is
        // checked and then owned exclusively by the OwnedFd.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is a freshly created, valid descriptor nobody else owns.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Make the eventfd readable (wakes an `epoll_wait` watching it).
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid local u64 to our own descriptor.
        // A full counter (EAGAIN) still leaves the fd readable, which is all we need.
        let _ = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Reset the counter so the fd stops being readable.
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid local u64; the fd is
        // non-blocking so this never sleeps.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A level-triggered epoll instance.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

pub(crate) const EPOLLIN: u32 = libc::EPOLLIN as u32;
pub(crate) const EPOLLOUT: u32 = libc::EPOLLOUT as u32;

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the result is checked and owned by OwnedFd.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a freshly created, valid descriptor nobody else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event living across the call; the
        // kernel copies it and keeps no pointer.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    pub(crate) fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub(crate) fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Wait for events; `timeout` None = forever. Returns the number of
    /// entries filled in `events`. EINTR is reported as 0 events.
    pub(crate) fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let ms: libc::c_int = match timeout {
            None => -1,
            Some(d) => {
                // Round up so that a timer is never polled before it is due.
                let ms = d.as_micros().div_ceil(1000);
                libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
            }
        };
        let max = libc::c_int::try_from(events.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `events` is a valid, writable buffer of at least `max`
        // entries for the duration of the call.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

/// Fill `buf` from the kernel's CSPRNG (`getrandom(2)`).
pub(crate) fn getrandom(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += usize::try_from(n).unwrap_or(0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_wakes_epoll_and_drains() {
        let ep = Epoll::new().expect("epoll");
        let ev = EventFd::new().expect("eventfd");
        ep.add(ev.raw(), EPOLLIN, 7).expect("add");
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(ep.wait(&mut events, Some(Duration::ZERO)).expect("wait"), 0);
        ev.signal();
        ev.signal();
        let n = ep
            .wait(&mut events, Some(Duration::from_secs(5)))
            .expect("wait");
        assert_eq!(n, 1);
        assert_eq!({ events[0].u64 }, 7);
        ev.drain();
        assert_eq!(ep.wait(&mut events, Some(Duration::ZERO)).expect("wait"), 0);
    }

    #[test]
    fn timeout_rounds_up_and_getrandom_fills() {
        let ep = Epoll::new().expect("epoll");
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 1];
        let t = std::time::Instant::now();
        assert_eq!(
            ep.wait(&mut events, Some(Duration::from_micros(1500)))
                .expect("wait"),
            0
        );
        assert!(t.elapsed() >= Duration::from_micros(1500));
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        getrandom(&mut a).expect("getrandom");
        getrandom(&mut b).expect("getrandom");
        assert_ne!(a, b);
    }
}
