//! Devices for ustack: the [`Device`] trait the runtime drives, and its
//! implementations and wrappers.
//!
//! - [`tap`]: a Linux TAP device (`/dev/net/tun`, `IFF_TAP | IFF_NO_PI`,
//!   non-blocking) plus [`tap::HostSide`] to configure the kernel's end.
//! - [`packet`]: [`packet::PacketRing`], an AF_PACKET socket on an existing
//!   interface (a veth end, a NIC) with a memory-mapped `TPACKET_V3` (or
//!   `V2`) receive ring, optionally with the virtio-net header.
//! - [`memlink`]: a pair of in-memory ports on a *virtual* clock with seeded,
//!   deterministic impairments (loss, duplication, reordering, corruption,
//!   delay, jitter, rate limit, queue limit) for simulations.
//! - [`pcap`]: a classic pcap writer and [`pcap::Capture`], which wraps any
//!   device and records every frame in and out.
//! - [`netem`]: [`netem::Netem`] wraps any device (a TAP included) and
//!   impairs each direction in real time like Linux's `netem` qdisc (loss,
//!   duplication, reordering, corruption, delay, jitter, rate), seeded.
//! - [`wrap`]: [`wrap::Tracing`] (logs frames with `tracing`) and
//!   [`wrap::FaultInject`] (seeded drops/corruption/back-pressure).
//!
//! Devices carry whole Ethernet frames (no preamble, no FCS).

use std::io;
use std::os::fd::RawFd;

/// Implements the listed [`Device`] methods by calling the same method on
/// `$inner`, an expression over the `self` named first (`self.inner` for a
/// wrapper, `(**self)` for a pointer): the one place for the forwarding
/// bodies that wrappers would otherwise each repeat.
macro_rules! forward_device {
    ($self:ident => $inner:expr; $($method:ident),+ $(,)?) => {
        $(forward_device!(@one $self, $inner, $method);)+
    };
    (@one $self:ident, $inner:expr, recv) => {
        fn recv(&mut $self, buf: &mut [u8]) -> ::std::io::Result<Option<usize>> {
            $inner.recv(buf)
        }
    };
    (@one $self:ident, $inner:expr, send) => {
        fn send(&mut $self, frame: &[u8]) -> ::std::io::Result<()> {
            $inner.send(frame)
        }
    };
    (@one $self:ident, $inner:expr, send_vectored) => {
        fn send_vectored(&mut $self, parts: &[&[u8]]) -> ::std::io::Result<()> {
            $inner.send_vectored(parts)
        }
    };
    (@one $self:ident, $inner:expr, recv_batch) => {
        fn recv_batch(&mut $self, batch: &mut $crate::FrameBatch) -> ::std::io::Result<usize> {
            $inner.recv_batch(batch)
        }
    };
    (@one $self:ident, $inner:expr, send_batch) => {
        fn send_batch(&mut $self, frames: &$crate::FrameBatch) -> ::std::io::Result<usize> {
            $inner.send_batch(frames)
        }
    };
    (@one $self:ident, $inner:expr, mtu) => {
        fn mtu(&$self) -> usize {
            $inner.mtu()
        }
    };
    (@one $self:ident, $inner:expr, mac) => {
        fn mac(&$self) -> Option<[u8; 6]> {
            $inner.mac()
        }
    };
    (@one $self:ident, $inner:expr, raw_fd) => {
        fn raw_fd(&$self) -> Option<::std::os::fd::RawFd> {
            $inner.raw_fd()
        }
    };
    (@one $self:ident, $inner:expr, next_deadline) => {
        fn next_deadline(&$self) -> Option<::std::time::Instant> {
            $inner.next_deadline()
        }
    };
    (@one $self:ident, $inner:expr, poll_deferred) => {
        fn poll_deferred(&mut $self) -> ::std::io::Result<()> {
            $inner.poll_deferred()
        }
    };
    (@one $self:ident, $inner:expr, split_rx) => {
        fn split_rx(&mut $self) -> Option<Box<dyn $crate::RxHalf>> {
            $inner.split_rx()
        }
    };
    (@one $self:ident, $inner:expr, offloads) => {
        fn offloads(&$self) -> $crate::Offloads {
            $inner.offloads()
        }
    };
}

pub mod batch;
mod impair;
pub mod live;
pub mod memlink;
pub mod netem;
pub mod packet;
pub mod pcap;
pub mod tap;
pub mod wrap;

pub use batch::FrameBatch;

/// Most parts a vectored write (`writev`, `sendmsg`) takes at once: Linux's
/// `IOV_MAX` (`UIO_MAXIOV`). A frame in more parts than this is gathered
/// into one buffer by the devices that write parts as they are.
pub const IOV_MAX: usize = 1024;

/// Parts of a frame a vectored write keeps on the stack (more: one
/// allocation for the `iovec` array, still no copy of the frame).
const STACK_IOVECS: usize = 16;

/// Total length of a frame given as `parts` (saturating: a length past
/// `isize::MAX` is refused by the kernel anyway).
pub(crate) fn parts_len(parts: &[&[u8]]) -> usize {
    parts.iter().fold(0usize, |n, p| n.saturating_add(p.len()))
}

/// Replace `buf`'s contents with the concatenation of `parts` (keeping
/// its allocation for the next frame).
pub(crate) fn gather_into(buf: &mut Vec<u8>, parts: &[&[u8]]) {
    buf.clear();
    buf.reserve(parts_len(parts));
    for p in parts {
        buf.extend_from_slice(p);
    }
}

/// Call `f` with `parts` as an array of [`io::IoSlice`] (ABI-compatible
/// with `struct iovec` on Linux), built on the stack for a few parts.
/// `parts` must be at most [`IOV_MAX`] long for the kernel to take them.
pub(crate) fn with_iovecs<R>(parts: &[&[u8]], f: impl FnOnce(&[io::IoSlice<'_>]) -> R) -> R {
    if parts.len() <= STACK_IOVECS {
        let mut iov = [io::IoSlice::new(&[]); STACK_IOVECS];
        for (slot, p) in iov.iter_mut().zip(parts) {
            *slot = io::IoSlice::new(p);
        }
        f(iov.get(..parts.len()).unwrap_or(&[]))
    } else {
        let iov: Vec<io::IoSlice<'_>> = parts.iter().map(|p| io::IoSlice::new(p)).collect();
        f(&iov)
    }
}

/// Length of an Ethernet header (destination, source, ethertype).
pub const ETHERNET_HEADER_LEN: usize = 14;

/// Length of the virtio-net header (`struct virtio_net_hdr`) in front of
/// each frame of a device with [`Offloads::vnet_hdr`].
pub const VNET_HDR_LEN: usize = 10;

/// What a device's frames carry and what it does with them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offloads {
    /// Every frame, both ways, starts with a virtio-net header
    /// ([`VNET_HDR_LEN`] bytes; the format is `ustack_wire::virtio_net`).
    /// Received frames may then be GSO super-frames (up to 64 KB standing
    /// for many segments) with partial checksums.
    pub vnet_hdr: bool,
    /// Frames sent may be TCP/IPv4 GSO super-frames: the other side
    /// segments them (a TAP: the kernel, or a guest that takes them whole).
    pub tso4: bool,
    /// Frames sent may be TCP/IPv6 GSO super-frames (`GSO_TCPV6`).
    pub tso6: bool,
    /// Frames sent may carry partial checksums (`NEEDS_CSUM`).
    pub tx_csum: bool,
}
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

    /// Send one frame given as consecutive parts (the frame is their
    /// concatenation): same semantics and errors as [`Device::send`].
    ///
    /// For a frame built as headers in front of payload that lives
    /// elsewhere (a TCP send buffer), so that a device that can write the
    /// parts as they are (`writev`) copies them only once, into the kernel.
    /// The default gathers the parts into one buffer and calls
    /// [`Device::send`] (a single part, or none, is passed on as is). A
    /// wrapper forwards it (`forward_device!`), gathering only when it has
    /// to keep or change the frame.
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        match parts {
            [one] => self.send(one),
            // No part, or only empty ones: the empty frame, as `send(&[])`.
            _ if parts.iter().all(|p| p.is_empty()) => self.send(&[]),
            _ => self.send(&parts.concat()),
        }
    }

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

    /// When the device next has time-driven work: a held-back frame becomes
    /// receivable, or a delayed frame must be transmitted (see
    /// [`netem::Netem`]). The runtime wakes up no later than this, calls
    /// [`Device::poll_deferred`] and tries [`Device::recv`] again, even if
    /// the file descriptor did not become readable. A time in the past means
    /// "now". `None` (the default) = nothing pending.
    fn next_deadline(&self) -> Option<std::time::Instant> {
        None
    }

    /// Do deferred work that is due now, such as transmitting frames whose
    /// delay has passed. Called by the runtime on every loop iteration; the
    /// default does nothing.
    fn poll_deferred(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// What the device's frames carry (a virtio-net header?) and which
    /// offloads it accepts on send. The default: plain Ethernet frames,
    /// nothing offloaded. A wrapper must forward it (`forward_device!`):
    /// frames with a header read as plain ones are garbage.
    fn offloads(&self) -> Offloads {
        Offloads::default()
    }

    /// Split off a receive half that reads frames while another thread
    /// sends through `self` (a TAP: a second descriptor of the same
    /// device), so that a runtime's receiving thread never waits for a send
    /// in progress, nor a sender for a burst of reads. A TAP write is long:
    /// it carries the kernel's whole receive processing of the frame, up to
    /// 64 KB with offloads. After `Some`, receive only through the half
    /// (`recv` on the device would race it for frames); the half follows
    /// [`Device::recv`]'s contract and becomes readable when
    /// [`Device::raw_fd`] does. `None`, the default: there is no such half,
    /// or the device is a wrapper that must see each received frame and
    /// does not pass the half on (impairment, a pcap file, a fault
    /// injector). Wrappers forward it only when their receive side goes
    /// with it ([`live::Tapped`] records what the half reads).
    fn split_rx(&mut self) -> Option<Box<dyn RxHalf>> {
        None
    }
}

/// The receive half of a device, from [`Device::split_rx`].
pub trait RxHalf: Send {
    /// Receive one frame, as [`Device::recv`].
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
}

impl<D: Device + ?Sized> Device for Box<D> {
    forward_device!(self => (**self);
        recv, send, send_vectored, recv_batch, send_batch, mtu, mac, raw_fd, next_deadline,
        poll_deferred, offloads, split_rx);
}

impl<D: Device + ?Sized> Device for &mut D {
    forward_device!(self => (**self);
        recv, send, send_vectored, recv_batch, send_batch, mtu, mac, raw_fd, next_deadline,
        poll_deferred, offloads, split_rx);
}
