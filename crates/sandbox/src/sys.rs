//! Thin, checked wrappers over the libc calls the sandbox needs.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turn a `-1`-on-error return value into an `io::Result`.
pub(crate) fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A connected pair of `AF_UNIX` `SOCK_SEQPACKET` sockets (close-on-exec).
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for socketpair to fill.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send `msg` and (optionally) one descriptor with `SCM_RIGHTS`.
///
/// Async-signal-safe (used in the forked child): no allocation.
pub(crate) fn send_msg_fd(sock: RawFd, msg: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    // Control buffer big enough for one int, aligned like cmsghdr.
    #[repr(C, align(8))]
    struct Cmsg([u8; 64]);
    let mut cbuf = Cmsg([0; 64]);
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // SAFETY: an all-zero msghdr is a valid "empty" value.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
        hdr.msg_control = cbuf.0.as_mut_ptr().cast();
        hdr.msg_controllen = space;
        // SAFETY: msg_control points at `space` (<= 64) writable, aligned bytes,
        // so CMSG_FIRSTHDR is non-null and the header plus one int fit.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), fd);
        }
    }
    loop {
        // SAFETY: `hdr` points at valid iovec/control buffers that outlive the call.
        let n = unsafe { libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive one message into `buf` and the descriptor passed with it, if any.
/// Returns `(0, None)` at end of stream.
pub(crate) fn recv_msg_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    #[repr(C, align(8))]
    struct Cmsg([u8; 64]);
    let mut cbuf = Cmsg([0; 64]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid "empty" value.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = cbuf.0.as_mut_ptr().cast();
    hdr.msg_controllen = cbuf.0.len();
    let n = loop {
        // SAFETY: `hdr` points at valid, writable buffers that outlive the call.
        let n = unsafe { libc::recvmsg(sock, &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fd = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of our control buffer;
    // CMSG_FIRSTHDR/NXTHDR only walk within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                if raw >= 0 && fd.is_none() {
                    fd = Some(OwnedFd::from_raw_fd(raw));
                } else if raw >= 0 {
                    libc::close(raw);
                }
            }
            c = libc::CMSG_NXTHDR(&hdr, c);
        }
    }
    Ok((n, fd))
}

/// `pidfd_open(pid, 0)`: a descriptor that becomes readable when `pid` exits.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; the result is checked.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}

/// Write all of `data` to `fd` (blocking).
pub(crate) fn write_all(fd: &OwnedFd, data: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < data.len() {
        let rest = &data[off..];
        // SAFETY: `rest` is valid for reads of `rest.len()` bytes.
        let n = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        off += n as usize;
    }
    Ok(())
}
