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
//! Capabilities belong to threads: this must run before the process starts
//! its other threads (the control and metrics endpoints), which then
//! inherit the reduced sets.

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

/// Give up what the relay no longer needs (see the module docs). Call it
/// on the relay's thread before any other thread starts.
pub fn harden() -> io::Result<Hardened> {
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
    let mut after = [CapData::default(); 2];
    if keep_bind {
        after[0].effective = 1 << CAP_NET_BIND_SERVICE;
        after[0].permitted = 1 << CAP_NET_BIND_SERVICE;
    }
    capset(&after)?;
    Ok(Hardened {
        kept_bind_service: keep_bind,
        dropped,
    })
}
