//! Devices for ustack: the [`Device`] trait the runtime drives, and its
//! implementations and wrappers.
//!
//! - [`tap`]: a Linux TAP device (`/dev/net/tun`, `IFF_TAP | IFF_NO_PI`,
//!   non-blocking) plus [`tap::HostSide`] to configure the kernel's end.
//! - [`memlink`]: a pair of in-memory ports on a *virtual* clock with seeded,
//!   deterministic impairments (loss, duplication, reordering, corruption,
//!   delay, jitter, rate limit, queue limit) for simulations.
//! - [`pcap`]: a classic pcap writer and [`pcap::Capture`], which wraps any
//!   device and records every frame in and out.
//! - [`wrap`]: [`wrap::Tracing`] (logs frames with `tracing`) and
//!   [`wrap::FaultInject`] (seeded drops/corruption/back-pressure).
//!
//! Devices carry whole Ethernet frames (no preamble, no FCS).

use std::io;
use std::os::fd::RawFd;

pub mod batch;
pub mod memlink;
pub mod pcap;
pub mod tap;
pub mod wrap;

pub use batch::FrameBatch;

/// Length of an Ethernet header (destination, source, ethertype).
pub const ETHERNET_HEADER_LEN: usize = 14;

/// A network device that carries Ethernet frames.
///
/// All operations are non-blocking: the runtime waits for readiness on
/// [`Device::raw_fd`] (or, for in-memory devices, on its own schedule).
pub trait Device {
    /// Non-blocking receive of one frame into `buf`; `Ok(None)` when nothing
    /// is waiting. A frame longer than `buf` is truncated to `buf.len()`.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;

    /// Send one frame; `Err(WouldBlock)` when the device is full.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;

    /// Clear `batch` and fill it with as many waiting frames as it holds.
    /// Returns the number of frames received (0 when nothing is waiting).
    /// If an error happens after some frames were received, those frames are
    /// returned and the error is left for the next call to report.
    fn recv_batch(&mut self, batch: &mut FrameBatch) -> io::Result<usize> {
        batch.clear();
        while let Some(slot) = batch.next_slot() {
            match self.recv(slot) {
                Ok(Some(n)) => batch.commit(n),
                Ok(None) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if batch.is_empty() {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        Ok(batch.len())
    }

    /// Send the frames of `frames` in order. Returns how many were sent; fewer
    /// than `frames.len()` means the device filled up (`WouldBlock`) or failed
    /// after sending some. An error is returned only if the first frame fails
    /// with something other than `WouldBlock` (which gives `Ok(0)`).
    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        let mut sent = 0;
        for frame in frames.iter() {
            match self.send(frame) {
                Ok(()) => sent += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    if sent == 0 {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        Ok(sent)
    }

    /// The IP MTU (1500 for a standard Ethernet link).
    fn mtu(&self) -> usize;

    /// The device's own MAC address, `None` if it has none (a TAP's user
    /// side, an in-memory port): the stack then uses its configured MAC.
    fn mac(&self) -> Option<[u8; 6]>;

    /// File descriptor to wait on for readability (epoll); `None` for
    /// in-memory devices.
    fn raw_fd(&self) -> Option<RawFd>;
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).recv(buf)
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        (**self).send(frame)
    }
    fn recv_batch(&mut self, batch: &mut FrameBatch) -> io::Result<usize> {
        (**self).recv_batch(batch)
    }
    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        (**self).send_batch(frames)
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn mac(&self) -> Option<[u8; 6]> {
        (**self).mac()
    }
    fn raw_fd(&self) -> Option<RawFd> {
        (**self).raw_fd()
    }
}

impl<D: Device + ?Sized> Device for &mut D {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).recv(buf)
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        (**self).send(frame)
    }
    fn recv_batch(&mut self, batch: &mut FrameBatch) -> io::Result<usize> {
        (**self).recv_batch(batch)
    }
    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        (**self).send_batch(frames)
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn mac(&self) -> Option<[u8; 6]> {
        (**self).mac()
    }
    fn raw_fd(&self) -> Option<RawFd> {
        (**self).raw_fd()
    }
}
