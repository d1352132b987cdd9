//! # ustack-ipc — Minix-3-style message passing between Linux processes
//!
//! Processes (and threads) bind to a **domain** — an isolated compartment backed by one
//! shared-memory segment `/dev/shm/ustack-ipc-<name>` — and get an **endpoint** number.
//! They exchange fixed 64-byte [`Message`]s with the Minix 3 primitives:
//!
//! * [`Endpoint::send`] — blocks until the destination has received the message (rendezvous);
//! * [`Endpoint::receive`] — from one endpoint or [`ANY`]; pending notifications first;
//! * [`Endpoint::sendrec`] — send then wait for the reply, as one operation;
//! * [`Endpoint::notify`] — never blocks, one coalesced pending bit per (source, destination);
//! * [`Endpoint::vcopy`] — copy a block between two endpoints' address spaces with one
//!   copy: a plain `memcpy` when both blocks are buffers of the domain's shared arena
//!   ([`Domain::alloc`]), one kernel copy (`process_vm_readv/writev`) otherwise.
//!
//! Every blocking call has a `try_` (non-blocking) and a `_timeout` variant. Waiting is
//! adaptive (spin, then futex) by default; see [`WaitMode`]. Errors are [`Error`] values.
//! A peer that dies (even SIGKILL) gives [`Error::DeadEndpoint`] within ~20 ms; ending a
//! domain ([`Domain::end`]) fails every blocked call with [`Error::DomainEnded`].
//!
//! Endpoint numbers are `tag << 16 | slot` where `tag` is a per-domain 15-bit value, so an
//! endpoint number from another domain gives [`Error::NotSameDomain`]; a bare slot number
//! (tag 0) means "slot N of my domain", which is handy for well-known endpoints.
//!
//! A C API with the M3-IPC names (`mnx_send`, `mnx_receive`, ...) is in [`capi`] and
//! `include/mnx.h`; the `ustack ipc` command line is in [`cli`].
//!
//! ```
//! use ustack_ipc::{Domain, DomainConfig, Message, ANY, Error};
//! let dom = Domain::create(&format!("doc-lib-{}", std::process::id()), DomainConfig::default()).unwrap();
//! let mut a = dom.bind("a").unwrap();
//! let mut b = dom.bind("b").unwrap();
//! assert_eq!(b.try_receive(ANY), Err(Error::WouldBlock));
//! a.notify(b.id()).unwrap();
//! assert!(b.receive(a.id()).unwrap().is_notify());
//! dom.end().unwrap();
//! assert_eq!(a.notify(b.id()), Err(Error::DomainEnded));
//! ```

mod arena;
mod bell;
pub mod bench;
pub mod capi;
pub mod cli;
mod domain;
mod endpoint;
mod error;
mod handoff;
mod introspect;
mod message;
mod sys;
mod watchdog;

/// Debugging aids for tests that hunt for protocol bugs; not part of the stable API.
#[doc(hidden)]
pub mod debug {
    use std::sync::atomic::Ordering;

    pub use crate::domain::RawMapping;

    /// Turn the watchdog's safety net (waking any sleep that lasts a whole 10 ms period)
    /// on or off for this process and the children it forks afterwards. With it off, a
    /// missed wake-up hangs the waiter instead of costing it 10-20 ms.
    pub fn set_safety_net(on: bool) {
        crate::watchdog::SAFETY_NET.store(on, Ordering::Relaxed);
    }

    /// Safety-net wake-ups this process's watchdog has done.
    pub fn safety_net_wakes() -> u64 {
        crate::watchdog::NET_WAKES.load(Ordering::Relaxed)
    }

    /// Hand-off traps this process has answered as a replier (see `Endpoint::set_handoff`).
    pub fn handoffs() -> u64 {
        crate::handoff::ANSWERED.load(Ordering::Relaxed)
    }

    /// Endpoint `ep`'s hand-off state: (published listener descriptor, -1 none, -2 a
    /// replier could not reach it; its `sleeping` word, 4 while it waits in a trap).
    pub fn trap_state(dom: &crate::Domain, ep: i32) -> Option<(i32, u32)> {
        slot_of(dom, ep).map(|s| {
            (
                s.trap_fd.load(Ordering::Acquire),
                s.sleeping.load(Ordering::Acquire),
            )
        })
    }

    /// The doorbell descriptors endpoint `ep` of `dom` published: (eventfd, pipe write
    /// end); -1 for none yet, -2 (eventfd) when a waker was refused them.
    pub fn doorbells(dom: &crate::Domain, ep: i32) -> Option<(i32, i32)> {
        slot_of(dom, ep).map(|s| {
            (
                s.bell_fd.load(Ordering::Acquire),
                s.pipe_fd.load(Ordering::Acquire),
            )
        })
    }

    /// The slot of endpoint `ep` in `dom`, if it names one.
    fn slot_of(dom: &crate::Domain, ep: i32) -> Option<&crate::domain::Slot> {
        dom.resolve(ep).ok().map(|i| dom.slot(i))
    }

    /// Lower the calling process's descriptor limit so that no new descriptor can be had
    /// (for tests of what happens at EMFILE): the kernel hands out the lowest free number,
    /// so a soft limit of that number refuses them all. True if it worked.
    pub fn use_up_descriptors() -> bool {
        // SAFETY: dup of stdin (or EBADF) and close of what it returned; getrlimit and
        // setrlimit with a valid struct.
        unsafe {
            let lowest = libc::dup(0);
            if lowest < 0 {
                return false;
            }
            libc::close(lowest);
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return false;
            }
            lim.rlim_cur = lowest as libc::rlim_t;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return false;
            }
        }
        std::fs::File::open("/dev/null").is_err()
    }

    /// The raw control words of every bound slot of `dom`: (slot, state, futex word,
    /// sleeping, doorbell fd, senders bitmap word 0, notify bitmap word 0), for failure
    /// reports.
    pub fn slot_words(dom: &crate::Domain) -> Vec<String> {
        dom.debug_slot_words()
    }
}

pub use arena::{ArenaBuf, ARENA_CHUNK, DEFAULT_ARENA_SIZE, MAX_ARENA_SIZE};
pub use domain::{Domain, DomainConfig, WaitMode, DEFAULT_MAX_COPY, MAX_ENDPOINTS_LIMIT};
pub use endpoint::{Endpoint, ANY};
pub use error::{Error, Result};
pub use handoff::ENV as HANDOFF_ENV;
pub use introspect::{DomainInfo, EndpointInfo};
pub use message::{Message, MsgKind, MESSAGE_SIZE, PAYLOAD_SIZE};
