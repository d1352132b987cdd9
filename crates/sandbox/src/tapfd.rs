//! A TAP descriptor received from the sandbox child (or opened in another
//! namespace), usable as a [`ustack_dev::Device`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use ustack_dev::{tap, Device, Offloads};

/// A non-blocking `IFF_TAP | IFF_NO_PI` descriptor: one read/write = one
/// Ethernet frame (with `vnet`, behind a virtio-net header). Dropping it
/// closes the fd, which removes a non-persistent TAP interface from its
/// namespace.
#[derive(Debug)]
pub struct TapFd {
    fd: OwnedFd,
    name: String,
    mtu: usize,
    vnet: bool,
}

impl TapFd {
    /// Wrap an already attached TAP descriptor (opened with `IFF_VNET_HDR`
    /// and the offloads if `vnet`). It is made non-blocking.
    pub fn new(fd: OwnedFd, name: &str, mtu: usize, vnet: bool) -> io::Result<TapFd> {
        // SAFETY: fcntl on a descriptor we own, integer arguments only.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TapFd {
            fd,
            name: name.to_string(),
            mtu,
            vnet,
        })
    }

    /// The interface name (inside the namespace it lives in).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl AsRawFd for TapFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Device for TapFd {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        tap::read_frame(self.fd.as_fd(), buf)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        drop_if_down(tap::write_frame(self.fd.as_fd(), frame))
    }

    /// One `writev` of the parts, as `send` writes their concatenation.
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        drop_if_down(tap::write_frame_vectored(self.fd.as_fd(), parts))
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> Option<[u8; 6]> {
        None
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn offloads(&self) -> Offloads {
        Offloads {
            vnet_hdr: self.vnet,
            tso4: self.vnet,
            tso6: self.vnet,
            tx_csum: self.vnet,
        }
    }
}

/// The result of a send: the guest took its interface down (`EIO`) and the
/// frame is dropped, as on a wire (unlike `ustack_dev::tap::Tap`, which
/// reports it).
fn drop_if_down(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if tap::is_link_down(&e) => Ok(()),
        r => r,
    }
}
