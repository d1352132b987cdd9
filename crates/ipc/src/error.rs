//! Error values returned by every IPC call.

use thiserror::Error;

/// Everything that can go wrong in an IPC call. Errors are plain values (`Copy`),
/// each with a stable negative code for the C API ([`Error::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// The endpoint number is out of range, not bound, or is the caller itself
    /// where that makes no sense (sending to oneself would deadlock).
    #[error("bad endpoint")]
    BadEndpoint,
    /// The endpoint number belongs to another domain (its domain tag differs).
    #[error("endpoint is not in the same domain")]
    NotSameDomain,
    /// The peer's process or thread exited (or unbound) while we were talking to it.
    #[error("dead endpoint")]
    DeadEndpoint,
    /// The domain was ended; every call in it fails with this error.
    #[error("domain ended")]
    DomainEnded,
    /// A non-blocking call could not complete immediately.
    #[error("operation would block")]
    WouldBlock,
    /// A call with a timeout did not complete in time.
    #[error("timed out")]
    TimedOut,
    /// A `vcopy` address range is not mapped (or not writable) in one of the processes.
    #[error("bad address range")]
    BadAddress,
    /// A `vcopy` is larger than the domain's copy limit.
    #[error("too large")]
    TooLarge,
    /// No domain of that name exists.
    #[error("no such domain")]
    NoSuchDomain,
    /// A live domain of that name already exists.
    #[error("domain already exists")]
    DomainExists,
    /// Every endpoint slot of the domain is taken.
    #[error("domain is full")]
    DomainFull,
    /// The requested endpoint number is already bound by a live owner.
    #[error("endpoint already in use")]
    EndpointInUse,
    /// Domain name or limit is invalid.
    #[error("invalid argument")]
    InvalidArgument,
    /// The OS refused access (shared memory permissions, `process_vm_*` permission).
    #[error("permission denied")]
    PermissionDenied,
    /// The shared segment does not look like an ustack IPC domain (bad magic/version/size).
    #[error("corrupt or incompatible domain segment")]
    Corrupt,
    /// The domain's arena has no free run of chunks large enough (see `Domain::alloc`).
    #[error("no room in the domain arena")]
    ArenaFull,
    /// Another OS error (errno value).
    #[error("os error {0}")]
    Os(i32),
}

impl Error {
    /// Stable negative error code used by the C API (`MNX_E*` in `mnx.h`).
    pub fn code(self) -> i32 {
        match self {
            Error::BadEndpoint => -1,
            Error::NotSameDomain => -2,
            Error::DeadEndpoint => -3,
            Error::DomainEnded => -4,
            Error::WouldBlock => -5,
            Error::TimedOut => -6,
            Error::BadAddress => -7,
            Error::TooLarge => -8,
            Error::NoSuchDomain => -9,
            Error::DomainExists => -10,
            Error::DomainFull => -11,
            Error::EndpointInUse => -12,
            Error::InvalidArgument => -13,
            Error::PermissionDenied => -14,
            Error::Corrupt => -15,
            Error::ArenaFull => -16,
            // Keep OS errors distinguishable from the fixed codes.
            Error::Os(e) => -1000 - e.abs(),
        }
    }

    /// Inverse of [`Error::code`] (for completeness of the C API; `None` for 0 or unknown codes).
    pub fn from_code(code: i32) -> Option<Error> {
        Some(match code {
            -1 => Error::BadEndpoint,
            -2 => Error::NotSameDomain,
            -3 => Error::DeadEndpoint,
            -4 => Error::DomainEnded,
            -5 => Error::WouldBlock,
            -6 => Error::TimedOut,
            -7 => Error::BadAddress,
            -8 => Error::TooLarge,
            -9 => Error::NoSuchDomain,
            -10 => Error::DomainExists,
            -11 => Error::DomainFull,
            -12 => Error::EndpointInUse,
            -13 => Error::InvalidArgument,
            -14 => Error::PermissionDenied,
            -15 => Error::Corrupt,
            -16 => Error::ArenaFull,
            c if c <= -1000 => Error::Os(-(c + 1000)),
            _ => return None,
        })
    }

    /// Map an errno from a failed syscall.
    pub(crate) fn from_errno(e: i32) -> Error {
        match e {
            libc::EACCES | libc::EPERM => Error::PermissionDenied,
            libc::ENOENT => Error::NoSuchDomain,
            libc::EEXIST => Error::DomainExists,
            libc::EFAULT => Error::BadAddress,
            libc::ESRCH => Error::DeadEndpoint,
            libc::EINVAL => Error::InvalidArgument,
            other => Error::Os(other),
        }
    }

    pub(crate) fn last_os() -> Error {
        Error::from_errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

/// Result alias for IPC calls.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        let all = [
            Error::BadEndpoint,
            Error::NotSameDomain,
            Error::DeadEndpoint,
            Error::DomainEnded,
            Error::WouldBlock,
            Error::TimedOut,
            Error::BadAddress,
            Error::TooLarge,
            Error::NoSuchDomain,
            Error::DomainExists,
            Error::DomainFull,
            Error::EndpointInUse,
            Error::InvalidArgument,
            Error::PermissionDenied,
            Error::Corrupt,
            Error::ArenaFull,
            Error::Os(libc::EIO),
        ];
        let mut seen = std::collections::HashSet::new();
        for e in all {
            assert!(e.code() < 0);
            assert!(seen.insert(e.code()), "duplicate code for {e:?}");
            assert_eq!(Error::from_code(e.code()), Some(e));
        }
        assert_eq!(Error::from_code(0), None);
        assert_eq!(Error::from_errno(libc::EFAULT), Error::BadAddress);
    }
}
