//! Shared test helpers: a real-time in-process link (a SOCK_SEQPACKET
//! socketpair wrapped as a `Device`, so epoll has fds to wait on) and two
//! `Net`s started back to back on it.
#![allow(dead_code)]

pub mod kernel;

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use ustack_net::core::Config;
use ustack_net::dev::Device;
use ustack_net::{Net, RuntimeOptions};

/// One end of a SOCK_SEQPACKET socketpair: every send is one frame.
pub struct SeqPacketDev {
    fd: OwnedFd,
}

/// Two connected ends.
pub fn seqpacket_pair() -> io::Result<(SeqPacketDev, SeqPacketDev)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for fd in [&a, &b] {
        let size: libc::c_int = 4 << 20;
        for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
            // SAFETY: passes a pointer to a live c_int and its exact size.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
    Ok((SeqPacketDev { fd: a }, SeqPacketDev { fd: b }))
}

impl Device for SeqPacketDev {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: `buf` is valid and writable for `buf.len()` bytes.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(e);
        }
        if n == 0 {
            // SOCK_SEQPACKET: 0 = the peer closed its end.
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "peer closed the link",
            ));
        }
        Ok(Some(n as usize))
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is valid for reads of `frame.len()` bytes.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn mtu(&self) -> usize {
        1500
    }

    fn mac(&self) -> Option<[u8; 6]> {
        None
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }
}

pub const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

pub fn config(ip: Ipv4Addr, mac_last: u8) -> Config {
    Config {
        mac: ustack_wire::ethernet::MacAddr([0x02, 0, 0, 0, 0, mac_last]),
        addr: ustack_wire::ipv4::Ipv4Cidr::new(ip, 24).expect("valid prefix"),
        gateway: None,
        mtu: 1500,
        tcp: ustack_net::core::tcp::TcpConfig::default(),
        limits: ustack_net::core::Limits::default(),
        // Zero = not given: the runtime draws them from getrandom.
        secret: [0; 16],
        seed: 0,
    }
}

pub fn opts(name: &str) -> RuntimeOptions {
    RuntimeOptions {
        thread_name: name.to_string(),
        ..RuntimeOptions::default()
    }
}

/// Two stacks, 10.0.0.1 (A) and 10.0.0.2 (B), on one link.
pub fn pair() -> (Net, Net) {
    pair_with(ustack_net::core::tcp::TcpConfig::default())
}

/// [`pair`] with TCP tunables of the test's choosing on both stacks.
pub fn pair_with(tcp: ustack_net::core::tcp::TcpConfig) -> (Net, Net) {
    let (da, db) = seqpacket_pair().expect("socketpair");
    let (mut ca, mut cb) = (config(A_IP, 1), config(B_IP, 2));
    ca.tcp = tcp.clone();
    cb.tcp = tcp;
    let a = Net::start(ca, Box::new(da), opts("ustack-a")).expect("start A");
    let b = Net::start(cb, Box::new(db), opts("ustack-b")).expect("start B");
    (a, b)
}

/// Upper bound for anything a test waits on.
pub const PATIENCE: Duration = Duration::from_secs(20);
