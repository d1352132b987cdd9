//! An AF_PACKET device: a raw packet socket bound to an existing interface
//! (one end of a veth pair, a physical NIC), receiving through a
//! memory-mapped `TPACKET` ring and sending with `send(2)` / `sendmmsg(2)`.
//!
//! # Receive ring
//!
//! Two layouts, chosen by [`RingVersion`]:
//!
//! - [`RingVersion::V3`] (`TPACKET_V3`): frames of any size packed one after
//!   another into blocks. The kernel hands a block to user space (and wakes a
//!   poller) only when the block is full or its retire timer expires
//!   ([`PacketConfig::retire_ms`], in jiffies: with `HZ=250` at least 4 ms).
//!   Dense, cheap per frame, but a lone frame waits for the timer: a
//!   request/response exchange pays it on every packet.
//! - [`RingVersion::V2`] (`TPACKET_V2`): fixed-size frame slots; each slot
//!   is handed over, and the poller woken, as soon as it is filled. Every
//!   slot must hold the largest frame (64 KB with the virtio-net header),
//!   so the ring holds fewer frames for its memory.
//!
//! Either way a receive is a copy out of shared memory, with no system call:
//! the runtime's `epoll` says when the ring has something.
//!
//! # Transmit
//!
//! `send` is one non-blocking `send(2)` (the socket is bound, so no address);
//! `send_batch` hands up to [`SENDMMSG_MAX`] frames to one `sendmmsg(2)`.
//! `PACKET_QDISC_BYPASS` skips the interface's queueing discipline. A
//! `PACKET_TX_RING` would save the kernel's copy (it builds the buffer from
//! the ring's pages), but the kernel hands a slot back as soon as that buffer
//! is *orphaned*: on a veth when the peer's IP layer takes it (`ip_rcv`
//! orphans every buffer), while the pages may still wait in the peer's socket
//! queue, so reusing the slot would change bytes already delivered. The
//! copying path has no such hazard, and the runtime hands the device one
//! frame at a time anyway (one system call per frame either way).
//!
//! # Addresses
//!
//! The interface's own MAC address belongs to the kernel. The stack uses its
//! own (its configured MAC; [`Device::mac`] is `None`, as on a TAP), and the
//! socket puts the interface in promiscuous mode (`PACKET_MR_PROMISC`, a
//! reference the kernel drops when the socket closes) so that frames to that
//! MAC are received on any interface, not only on a veth. The kernel sees
//! them too, as `PACKET_OTHERHOST`, and ignores them: ustack is one more
//! host on the link, not a second user of the kernel's address. Our own
//! outgoing frames are not received back (`PACKET_IGNORE_OUTGOING`, and
//! frames marked outgoing are skipped in any case).
//!
//! # Offloads
//!
//! With [`PacketConfig::vnet_hdr`] (`PACKET_VNET_HDR`) every frame both ways
//! carries the 10-byte virtio-net header, as on a TAP opened with
//! `IFF_VNET_HDR`: the kernel passes 64 KB GSO super-frames with partial
//! checksums up unsegmented (veth has TSO/GSO on by default) and takes ours.
//! Without it, the far end must send plain frames: turn off transmit
//! checksumming (and with it TSO) on a veth peer (`ethtool -K PEER tx off`).
//! Frames that arrive with a checksum still to be computed
//! (`TP_STATUS_CSUMNOTREADY`) are then dropped and counted
//! ([`PacketStats::rx_csum_not_ready`]).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{Device, FrameBatch, Offloads, VNET_HDR_LEN};

/// The `TPACKET` version of the receive ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingVersion {
    /// `TPACKET_V2`: fixed frame slots, each handed over as it is filled.
    V2,
    /// `TPACKET_V3`: blocks of packed frames, handed over when full or
    /// when the retire timer expires.
    V3,
}

/// How to open a [`PacketRing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketConfig {
    pub version: RingVersion,
    /// Every frame both ways carries a virtio-net header (see the module
    /// documentation).
    pub vnet_hdr: bool,
    /// Bytes per ring block: a multiple of the page size. V3: frames are
    /// packed into it, the largest frame must fit. V2: holds
    /// `block_size / frame_size` slots.
    pub block_size: usize,
    /// Number of blocks.
    pub block_count: usize,
    /// V2 only: bytes per slot (a multiple of 16, at most `block_size`),
    /// the ring header and the largest frame included.
    pub frame_size: usize,
    /// V3 only: milliseconds after which the kernel hands over a block that
    /// is not full (rounded up to a jiffy); 0 = the kernel's choice.
    pub retire_ms: u32,
    /// Put the interface in promiscuous mode (for as long as the socket is
    /// open) so that frames to the stack's own MAC arrive.
    pub promiscuous: bool,
    /// `PACKET_QDISC_BYPASS`: hand frames straight to the driver.
    pub qdisc_bypass: bool,
}

/// Bytes of ring bookkeeping in front of each frame, with room to spare:
/// the `tpacket3_hdr` (48) or `tpacket2_hdr` (32), the `sockaddr_ll` (20),
/// alignment and the virtio-net header.
const RING_FRAME_OVERHEAD: usize = 128;
const PAGE: usize = 4096;

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

impl PacketConfig {
    /// A ring sized for a link of IP MTU `mtu` (and for 64 KB GSO frames
    /// with `vnet_hdr`): about 8 MB (V3) or 480 to 1024 slots (V2),
    /// promiscuous, bypassing the qdisc, V3 blocks retired after 1 ms.
    pub fn new(version: RingVersion, vnet_hdr: bool, mtu: usize) -> PacketConfig {
        let frame = Self::max_frame_len(vnet_hdr, mtu) + RING_FRAME_OVERHEAD;
        let (block_size, block_count, frame_size) = match version {
            RingVersion::V3 => {
                // At least a few of the largest frames per block.
                let block = round_up(frame * 4, PAGE).next_power_of_two().max(64 * 1024);
                (block, (8 << 20) / block, 0)
            }
            RingVersion::V2 => {
                let slot = round_up(frame, 16);
                if vnet_hdr {
                    // 15 slots of ~64 KB per 1 MB block, 32 blocks.
                    let block = round_up(slot * 15, PAGE).next_power_of_two();
                    (block, 32, slot)
                } else {
                    let block = round_up(slot * 16, PAGE).next_power_of_two();
                    let per_block = (block / slot).max(1);
                    (block, 1024usize.div_ceil(per_block), slot)
                }
            }
        };
        PacketConfig {
            version,
            vnet_hdr,
            block_size,
            block_count: block_count.max(2),
            frame_size,
            retire_ms: 1,
            promiscuous: true,
            qdisc_bypass: true,
        }
    }

    /// The longest frame the ring must hold: a 64 KB GSO super-frame behind
    /// its header (an IPv6 one: a 40-byte header and a payload of up to
    /// 65,535 bytes), or an MTU-sized frame with a VLAN tag.
    pub fn max_frame_len(vnet_hdr: bool, mtu: usize) -> usize {
        if vnet_hdr {
            VNET_HDR_LEN + crate::ETHERNET_HEADER_LEN + 40 + 65_535
        } else {
            crate::ETHERNET_HEADER_LEN + 4 + mtu
        }
    }

    fn check(&self) -> io::Result<()> {
        let bad = |what: String| {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid AF_PACKET ring: {what}"),
            ))
        };
        if self.block_size == 0 || !self.block_size.is_multiple_of(PAGE) {
            return bad(format!(
                "block size {} is not a multiple of the page size {PAGE}",
                self.block_size
            ));
        }
        if self.block_count < 1 || u32::try_from(self.block_count).is_err() {
            return bad(format!("{} blocks", self.block_count));
        }
        if self.block_size.checked_mul(self.block_count).is_none()
            || u32::try_from(self.block_size).is_err()
        {
            return bad("ring too large".into());
        }
        if self.version == RingVersion::V2
            && (self.frame_size < 64
                || !self.frame_size.is_multiple_of(16)
                || self.frame_size > self.block_size)
        {
            return bad(format!(
                "frame size {} must be a multiple of 16 between 64 and the block size {}",
                self.frame_size, self.block_size
            ));
        }
        Ok(())
    }

    /// Total frame slots (V2) or an estimate of MTU frames held (V3).
    fn v2_frames(&self) -> usize {
        (self.block_size / self.frame_size.max(1)) * self.block_count
    }
}

/// Counters of a [`PacketRing`] (frames, not bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// Frames returned by `recv`.
    pub rx_frames: u64,
    /// Frames the ring cut short (`tp_snaplen < tp_len`: larger than a
    /// slot or block), dropped.
    pub rx_truncated: u64,
    /// Frames whose ring header pointed outside its block or slot, dropped
    /// (never seen from a sane kernel; counted rather than trusted).
    pub rx_malformed: u64,
    /// Frames that arrived with a checksum to be completed while the ring
    /// has no virtio-net header to say where (see the module docs), dropped.
    pub rx_csum_not_ready: u64,
    /// Frames the kernel marked outgoing (sent on this interface), skipped.
    pub rx_outgoing: u64,
    /// Frames longer than the caller's buffer, cut to fit (as the trait says).
    pub rx_cut: u64,
    /// Frames accepted by `send`/`send_batch`.
    pub tx_frames: u64,
}

/// Largest number of frames handed to one `sendmmsg(2)`.
pub const SENDMMSG_MAX: usize = 64;

/// A shared-memory mapping of the socket's ring, unmapped on drop.
#[derive(Debug)]
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by exactly one `Mmap` and has no thread
// affinity; all access goes through `&self`/`&mut self` of the owning
// `PacketRing`, so moving it to another thread is sound.
unsafe impl Send for Mmap {}

impl Mmap {
    fn new(fd: RawFd, len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh shared mapping of the socket's ring; the kernel
        // chooses the address. The result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        let p = if p == libc::MAP_FAILED {
            // MAP_LOCKED may exceed RLIMIT_MEMLOCK for an unprivileged
            // user: try again without locking.
            // SAFETY: as above.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    fd,
                    0,
                )
            }
        } else {
            p
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Mmap { ptr, len })
    }

    /// The 32-bit status word at `off` (4-aligned, inside the mapping),
    /// which the kernel and we hand back and forth.
    fn status(&self, off: usize) -> Option<&AtomicU32> {
        if !off.is_multiple_of(4) || off.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: `off + 4 <= len`, so the word lies inside the live mapping,
        // and it is 4-aligned (the mapping is page-aligned, `off % 4 == 0`).
        // The kernel accesses the word concurrently, which is why it is only
        // ever touched as an atomic.
        Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast::<u32>()) })
    }

    /// The bytes `off..off + len`, which the caller owns by the ring
    /// protocol (their status word says "user") for the borrow's duration.
    fn owned(&self, off: usize, len: usize) -> Option<&[u8]> {
        if off.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: the range lies inside the live mapping. The caller has
        // read (with Acquire) a status word that gives this block or slot to
        // user space; the kernel writes it again only after we store
        // TP_STATUS_KERNEL (with Release), which needs `&self` after this
        // borrow ends.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; no borrow of
        // the mapping outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

// Layout of `struct tpacket_block_desc` (V3), `tpacket3_hdr`, `tpacket2_hdr`.
const BLK_STATUS: usize = 8;
const BLK_NUM_PKTS: usize = 12;
const BLK_FIRST: usize = 16;
/// `ALIGN(sizeof(struct tpacket_block_desc), 8)`: where frames may start.
const BLK_HDR_LEN: usize = 48;
const T3_NEXT: usize = 0;
const T3_SNAPLEN: usize = 12;
const T3_LEN: usize = 16;
const T3_STATUS: usize = 20;
const T3_MAC: usize = 24;
/// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))`: where the `sockaddr_ll` is.
const T3_SLL: usize = 48;
const T2_LEN: usize = 4;
const T2_SNAPLEN: usize = 8;
const T2_MAC: usize = 12;
const T2_SLL: usize = 32;
/// `sll_pkttype` within `struct sockaddr_ll`.
const SLL_PKTTYPE: usize = 10;
const PACKET_OUTGOING: u8 = 4;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_KERNEL: u32 = 0;

/// Where the receive side stands.
#[derive(Debug, Clone, Copy)]
enum Cursor {
    /// V3: block `block`, which we hold if `left` is `Some`: frames left in
    /// it and the offset of the next one.
    V3 {
        block: usize,
        held: Option<(u32, usize)>,
    },
    /// V2: the next slot to look at.
    V2 { slot: usize },
}

/// What the ring holds next.
enum Next {
    /// Nothing handed over yet.
    Empty,
    /// A V3 block with no frames left: give it back and look again.
    BlockDone,
    /// A frame: its ring status and lengths, its packet type, and where its
    /// bytes lie in the mapping (the virtio-net header included), `None`
    /// if its ring header points outside its block or slot.
    Frame {
        status: u32,
        len: usize,
        snaplen: usize,
        pkttype: u8,
        bytes: Option<(usize, usize)>,
    },
}

/// An AF_PACKET device on an existing interface (see the module docs).
#[derive(Debug)]
pub struct PacketRing {
    map: Mmap,
    fd: OwnedFd,
    cfg: PacketConfig,
    name: String,
    ifindex: u32,
    mtu: usize,
    cursor: Cursor,
    stats: PacketStats,
    warned_csum: bool,
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<T>())
        .map_err(|_| io::Error::other("option too large"))?;
    // SAFETY: `v` points to a live `T` of `len` bytes for the duration of
    // the call; the kernel only reads it.
    let rc = unsafe { libc::setsockopt(fd, level, opt, (v as *const T).cast(), len) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn ctx(e: io::Error, what: String) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => ": run as root or with CAP_NET_RAW",
        Some(libc::ENOMEM) => ": not enough memory for the ring (smaller blocks or fewer?)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

impl PacketRing {
    /// Open a packet socket on interface `name` (in the calling thread's
    /// network namespace), set up its ring, and bind it. Every failure is an
    /// error that names the step.
    pub fn open(name: &str, cfg: PacketConfig) -> io::Result<PacketRing> {
        cfg.check()?;
        if name.is_empty() || name.len() > crate::tap::MAX_NAME_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid interface name {name:?}"),
            ));
        }
        let cname = CString::new(name).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL")
        })?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface {name} in this network namespace"),
            ));
        }
        // Protocol 0: nothing is received before `bind` names the interface.
        // SAFETY: plain socket(2); the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(ctx(
                io::Error::last_os_error(),
                "cannot open an AF_PACKET socket".into(),
            ));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        let one: libc::c_int = 1;
        if cfg.vnet_hdr {
            // Before the ring: the kernel refuses it afterwards.
            setsockopt(s, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
                .map_err(|e| ctx(e, format!("PACKET_VNET_HDR on {name}")))?;
        }
        // `enum tpacket_versions`: V1 = 0, V2 = 1, V3 = 2.
        let version: libc::c_int = match cfg.version {
            RingVersion::V2 => 1,
            RingVersion::V3 => 2,
        };
        setsockopt(s, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(|e| ctx(e, format!("PACKET_VERSION {:?} on {name}", cfg.version)))?;
        // The geometry was checked to fit in u32 by `cfg.check`.
        let block_size = u32::try_from(cfg.block_size).unwrap_or(u32::MAX);
        let block_nr = u32::try_from(cfg.block_count).unwrap_or(u32::MAX);
        let geometry = format!(
            "{:?} ring of {} blocks of {} bytes{} on {name}",
            cfg.version,
            cfg.block_count,
            cfg.block_size,
            if cfg.version == RingVersion::V2 {
                format!(", {}-byte frames", cfg.frame_size)
            } else {
                String::new()
            }
        );
        match cfg.version {
            RingVersion::V3 => {
                let req = libc::tpacket_req3 {
                    tp_block_size: block_size,
                    tp_block_nr: block_nr,
                    // Frames are packed; the kernel wants a frame size that
                    // divides the block: the block itself.
                    tp_frame_size: block_size,
                    tp_frame_nr: block_nr,
                    tp_retire_blk_tov: cfg.retire_ms,
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: 0,
                };
                setsockopt(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
                    .map_err(|e| ctx(e, format!("cannot set up a {geometry}")))?;
            }
            RingVersion::V2 => {
                let req = libc::tpacket_req {
                    tp_block_size: block_size,
                    tp_block_nr: block_nr,
                    tp_frame_size: u32::try_from(cfg.frame_size).unwrap_or(u32::MAX),
                    tp_frame_nr: u32::try_from(cfg.v2_frames()).unwrap_or(u32::MAX),
                };
                setsockopt(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
                    .map_err(|e| ctx(e, format!("cannot set up a {geometry}")))?;
            }
        }
        let map = Mmap::new(s, cfg.block_size * cfg.block_count)
            .map_err(|e| ctx(e, format!("cannot map the {geometry}")))?;
        if cfg.qdisc_bypass {
            setsockopt(s, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(|e| ctx(e, format!("PACKET_QDISC_BYPASS on {name}")))?;
        }
        // Not fatal before Linux 4.20: outgoing frames are skipped by type.
        if let Err(e) = setsockopt(s, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one) {
            tracing::debug!("PACKET_IGNORE_OUTGOING on {name}: {e}");
        }
        // Room for a few 64 KB frames in flight (root may exceed wmem_max).
        let sndbuf: libc::c_int = 4 << 20;
        if setsockopt(s, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &sndbuf).is_err() {
            let _ = setsockopt(s, libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf);
        }
        let index = libc::c_int::try_from(ifindex)
            .map_err(|_| io::Error::other(format!("interface index {ifindex} out of range")))?;
        let sll = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as libc::c_ushort,
            sll_protocol: (libc::ETH_P_ALL as u16).to_be(),
            sll_ifindex: index,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 0,
            sll_addr: [0; 8],
        };
        // SAFETY: `sll` is a valid sockaddr_ll of the length given.
        let rc = unsafe {
            libc::bind(
                s,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(ctx(
                io::Error::last_os_error(),
                format!("cannot bind the packet socket to {name}"),
            ));
        }
        if cfg.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: index,
                mr_type: libc::PACKET_MR_PROMISC as libc::c_ushort,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            setsockopt(s, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(|e| ctx(e, format!("cannot make {name} promiscuous")))?;
        }
        let mtu = crate::tap::HostSide::new(name)
            .and_then(|h| h.mtu())
            .unwrap_or(1500);
        let cursor = match cfg.version {
            RingVersion::V3 => Cursor::V3 {
                block: 0,
                held: None,
            },
            RingVersion::V2 => Cursor::V2 { slot: 0 },
        };
        Ok(PacketRing {
            map,
            fd,
            cfg,
            name: name.to_owned(),
            ifindex,
            mtu,
            cursor,
            stats: PacketStats::default(),
            warned_csum: false,
        })
    }

    /// The interface this device is bound to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &PacketConfig {
        &self.cfg
    }

    /// Override the MTU the device reports (the interface's at open).
    pub fn set_mtu(&mut self, mtu: usize) {
        self.mtu = mtu;
    }

    /// This device's counters.
    pub fn stats(&self) -> PacketStats {
        self.stats
    }

    /// The kernel's counters for the socket since the last call
    /// (`PACKET_STATISTICS` resets them): (frames received, frames
    /// dropped because the ring was full).
    pub fn kernel_stats(&self) -> io::Result<(u32, u32)> {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` is a writable buffer of `len` bytes (the V3 layout is
        // the V2 one plus a field; the kernel writes at most `len`).
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.tp_packets, st.tp_drops))
    }

    /// Offset of V2 slot `slot` in the mapping.
    fn slot_off(&self, slot: usize) -> usize {
        let per_block = (self.cfg.block_size / self.cfg.frame_size.max(1)).max(1);
        (slot / per_block) * self.cfg.block_size + (slot % per_block) * self.cfg.frame_size
    }

    /// `start..start + snaplen`, widened by the virtio-net header in front,
    /// if it lies in `[floor, limit)`.
    fn frame_range(
        &self,
        start: usize,
        snaplen: usize,
        floor: usize,
        limit: usize,
    ) -> Option<(usize, usize)> {
        let hdr = if self.cfg.vnet_hdr { VNET_HDR_LEN } else { 0 };
        let from = start.checked_sub(hdr)?;
        let end = start.checked_add(snaplen)?;
        (from >= floor && end <= limit && from < end).then_some((from, end))
    }

    /// Look at the next frame in the ring; the caller gives it back with
    /// [`PacketRing::release`].
    fn next_frame(&mut self) -> Next {
        let bs = self.cfg.block_size;
        match self.cursor {
            Cursor::V2 { slot } => {
                let off = self.slot_off(slot);
                let status = match self.map.status(off) {
                    Some(s) => s.load(Ordering::Acquire),
                    None => return Next::Empty,
                };
                if status & TP_STATUS_USER == 0 {
                    return Next::Empty;
                }
                let Some(f) = self.map.owned(off, self.cfg.frame_size) else {
                    return Next::Empty;
                };
                let mac = usize::from(u16_at(f, T2_MAC).unwrap_or(0));
                let snaplen = u32_at(f, T2_SNAPLEN).unwrap_or(0) as usize;
                Next::Frame {
                    status,
                    len: u32_at(f, T2_LEN).unwrap_or(0) as usize,
                    snaplen,
                    pkttype: f.get(T2_SLL + SLL_PKTTYPE).copied().unwrap_or(0),
                    bytes: self.frame_range(
                        off + mac,
                        snaplen,
                        off + T2_SLL + 20,
                        off + self.cfg.frame_size,
                    ),
                }
            }
            Cursor::V3 { block, held } => {
                let blk = block * bs;
                let (left, off) = match held {
                    Some(h) => h,
                    None => {
                        let status = match self.map.status(blk + BLK_STATUS) {
                            Some(s) => s.load(Ordering::Acquire),
                            None => return Next::Empty,
                        };
                        if status & TP_STATUS_USER == 0 {
                            return Next::Empty;
                        }
                        let Some(b) = self.map.owned(blk, bs) else {
                            return Next::Empty;
                        };
                        let n = u32_at(b, BLK_NUM_PKTS).unwrap_or(0);
                        let first = u32_at(b, BLK_FIRST).unwrap_or(0) as usize;
                        (n, first)
                    }
                };
                if left == 0 {
                    self.cursor = Cursor::V3 {
                        block,
                        held: Some((0, off)),
                    };
                    return Next::BlockDone;
                }
                let Some(b) = self.map.owned(blk, bs) else {
                    return Next::Empty;
                };
                let hdr_ok =
                    off >= BLK_HDR_LEN && off.checked_add(T3_SLL + 20).is_some_and(|e| e <= bs);
                if !hdr_ok {
                    // The chain leaves the block: drop the rest of it.
                    self.cursor = Cursor::V3 {
                        block,
                        held: Some((0, bs)),
                    };
                    return Next::Frame {
                        status: 0,
                        len: 0,
                        snaplen: 0,
                        pkttype: 0,
                        bytes: None,
                    };
                }
                let next = u32_at(b, off + T3_NEXT).unwrap_or(0) as usize;
                let mac = usize::from(u16_at(b, off + T3_MAC).unwrap_or(0));
                let snaplen = u32_at(b, off + T3_SNAPLEN).unwrap_or(0) as usize;
                let found = Next::Frame {
                    status: u32_at(b, off + T3_STATUS).unwrap_or(0),
                    len: u32_at(b, off + T3_LEN).unwrap_or(0) as usize,
                    snaplen,
                    pkttype: b.get(off + T3_SLL + SLL_PKTTYPE).copied().unwrap_or(0),
                    bytes: self.frame_range(
                        blk + off + mac,
                        snaplen,
                        blk + off + T3_SLL + 20,
                        blk + bs,
                    ),
                };
                // The last frame has no successor; a zero offset elsewhere
                // would loop: both end the block.
                let (left, next_off) = if next == 0 {
                    (0, bs)
                } else {
                    (left - 1, off.saturating_add(next))
                };
                self.cursor = Cursor::V3 {
                    block,
                    held: Some((left, next_off)),
                };
                found
            }
        }
    }

    /// Done with the frame `next_frame` returned (or the exhausted block):
    /// give the V2 slot back, or the V3 block once its last frame is read.
    fn release(&mut self) {
        match self.cursor {
            Cursor::V2 { slot } => {
                if let Some(st) = self.map.status(self.slot_off(slot)) {
                    st.store(TP_STATUS_KERNEL, Ordering::Release);
                }
                let frames = self.cfg.v2_frames().max(1);
                self.cursor = Cursor::V2 {
                    slot: (slot + 1) % frames,
                };
            }
            Cursor::V3 { block, held } => {
                if matches!(held, Some((0, _))) {
                    let bs = self.cfg.block_size;
                    if let Some(st) = self.map.status(block * bs + BLK_STATUS) {
                        st.store(TP_STATUS_KERNEL, Ordering::Release);
                    }
                    self.cursor = Cursor::V3 {
                        block: (block + 1) % self.cfg.block_count.max(1),
                        held: None,
                    };
                }
            }
        }
    }
}

impl Device for PacketRing {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // Bounded: each turn consumes a frame or gives back a block.
        loop {
            let (status, len, snaplen, pkttype, bytes) = match self.next_frame() {
                Next::Empty => return Ok(None),
                Next::BlockDone => {
                    self.release();
                    continue;
                }
                Next::Frame {
                    status,
                    len,
                    snaplen,
                    pkttype,
                    bytes,
                } => (status, len, snaplen, pkttype, bytes),
            };
            let Some((from, end)) = bytes else {
                self.stats.rx_malformed += 1;
                self.release();
                continue;
            };
            if pkttype == PACKET_OUTGOING {
                self.stats.rx_outgoing += 1;
                self.release();
                continue;
            }
            if snaplen < len || status & TP_STATUS_COPY != 0 {
                self.stats.rx_truncated += 1;
                self.release();
                continue;
            }
            if !self.cfg.vnet_hdr && status & TP_STATUS_CSUMNOTREADY != 0 {
                self.stats.rx_csum_not_ready += 1;
                if !self.warned_csum {
                    self.warned_csum = true;
                    tracing::warn!(
                        "{}: frames arrive with partial checksums and the ring has no \
                         virtio-net header: turn off tx checksumming on the far end \
                         (ethtool -K PEER tx off) or open the ring with vnet_hdr",
                        self.name
                    );
                }
                self.release();
                continue;
            }
            let n = (end - from).min(buf.len());
            if n < end - from {
                self.stats.rx_cut += 1;
            }
            if let (Some(dst), Some(src)) = (buf.get_mut(..n), self.map.owned(from, n)) {
                dst.copy_from_slice(src);
            }
            self.stats.rx_frames += 1;
            self.release();
            return Ok(Some(n));
        }
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is valid for reads of its length; the socket
            // is bound, so no address is needed.
            let n = unsafe {
                libc::send(
                    self.fd.as_raw_fd(),
                    frame.as_ptr().cast(),
                    frame.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n >= 0 {
                self.stats.tx_frames += 1;
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(self.tx_error(e));
        }
    }

    /// One `sendmsg` of the parts as they are (the kernel copies them once,
    /// straight into the frame it sends): what `send` does for their
    /// concatenation, with the same counters and errors. A single part, or
    /// a frame of no bytes, goes through `send`; more than
    /// [`crate::IOV_MAX`] parts are gathered and sent with it.
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        match parts {
            [one] => return self.send(one),
            _ if parts.iter().all(|p| p.is_empty()) => return self.send(&[]),
            _ if parts.len() > crate::IOV_MAX => return self.send(&parts.concat()),
            _ => {}
        }
        let fd = self.fd.as_raw_fd();
        let r = crate::with_iovecs(parts, |iov| {
            // SAFETY: an all-zero msghdr is a valid value (no address, no
            // control data, null pointers, zero lengths); the iovec fields
            // are filled in below.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            // `IoSlice` is ABI-compatible with `struct iovec` on Unix (std
            // guarantees it); sendmsg only reads the array.
            msg.msg_iov = iov.as_ptr().cast::<libc::iovec>().cast_mut();
            msg.msg_iovlen = iov.len() as _;
            loop {
                // SAFETY: `msg` points to `iov`, whose entries point to parts
                // borrowed for the duration of the call, each valid for
                // reads of its length; the socket is bound, so no address.
                let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
                if n >= 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        });
        match r {
            Ok(()) => {
                self.stats.tx_frames += 1;
                Ok(())
            }
            Err(e) => Err(self.tx_error(e)),
        }
    }

    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        let mut sent = 0;
        let total = frames.len();
        while sent < total {
            let chunk = (total - sent).min(SENDMMSG_MAX);
            // SAFETY: all-zero iovec/mmsghdr are valid values (null
            // pointers, zero lengths), filled in below before use.
            let mut iov: [libc::iovec; SENDMMSG_MAX] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; SENDMMSG_MAX] = unsafe { std::mem::zeroed() };
            let mut k = 0;
            for (i, m) in msgs.iter_mut().zip(iov.iter_mut()).take(chunk).enumerate() {
                let Some(f) = frames.get(sent + i) else { break };
                m.1.iov_base = f.as_ptr() as *mut libc::c_void;
                m.1.iov_len = f.len();
                m.0.msg_hdr.msg_iov = m.1 as *mut libc::iovec;
                m.0.msg_hdr.msg_iovlen = 1;
                k += 1;
            }
            if k == 0 {
                break;
            }
            // SAFETY: `msgs[..k]` point to `iov[..k]`, which point to frames
            // borrowed from `frames`; all live across the call. The kernel
            // writes only `msg_len` of each header.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    k as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                let e = self.tx_error(e);
                if sent == 0 && e.kind() != io::ErrorKind::WouldBlock {
                    return Err(e);
                }
                break;
            }
            let n = n as usize;
            self.stats.tx_frames += n as u64;
            sent += n;
            if n < k {
                break;
            }
        }
        Ok(sent)
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
            vnet_hdr: self.cfg.vnet_hdr,
            tso4: self.cfg.vnet_hdr,
            tso6: self.cfg.vnet_hdr,
            tx_csum: self.cfg.vnet_hdr,
        }
    }
}

impl PacketRing {
    /// A send error as the runtime understands it: a full queue is
    /// `WouldBlock`, a down interface `NotConnected`.
    fn tx_error(&self, e: io::Error) -> io::Error {
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) => io::ErrorKind::WouldBlock.into(),
            Some(libc::ENETDOWN) | Some(libc::ENXIO) => io::Error::new(
                io::ErrorKind::NotConnected,
                format!("interface {} is down: bring it up", self.name),
            ),
            _ => io::Error::new(e.kind(), format!("sending on {}: {e}", self.name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring over anonymous memory that the test writes as the kernel
    /// would (or as a broken kernel would not).
    fn fake(cfg: PacketConfig) -> PacketRing {
        let len = cfg.block_size * cfg.block_count;
        // SAFETY: a fresh private anonymous mapping; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let ptr = NonNull::new(p.cast::<u8>()).expect("mapping");
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").expect("/dev/null"));
        let cursor = match cfg.version {
            RingVersion::V3 => Cursor::V3 {
                block: 0,
                held: None,
            },
            RingVersion::V2 => Cursor::V2 { slot: 0 },
        };
        PacketRing {
            map: Mmap { ptr, len },
            fd,
            cfg,
            name: "fake".into(),
            ifindex: 0,
            mtu: 1500,
            cursor,
            stats: PacketStats::default(),
            warned_csum: false,
        }
    }

    fn put32(r: &mut PacketRing, off: usize, v: u32) {
        assert!(off + 4 <= r.map.len);
        // SAFETY: in bounds of the test's own private mapping, which no one
        // else touches; unaligned writes are allowed by write_unaligned.
        unsafe { r.map.ptr.as_ptr().add(off).cast::<u32>().write_unaligned(v) };
    }

    fn put16(r: &mut PacketRing, off: usize, v: u16) {
        assert!(off + 2 <= r.map.len);
        // SAFETY: as in `put32`.
        unsafe { r.map.ptr.as_ptr().add(off).cast::<u16>().write_unaligned(v) };
    }

    fn v3_ring() -> PacketRing {
        let mut c = PacketConfig::new(RingVersion::V3, false, 1500);
        c.block_size = 4096;
        c.block_count = 2;
        fake(c)
    }

    /// Block `b` handed to user space with `n` frames from `first`.
    fn v3_block(r: &mut PacketRing, b: usize, n: u32, first: u32) {
        let o = b * 4096;
        put32(r, o + BLK_NUM_PKTS, n);
        put32(r, o + BLK_FIRST, first);
        put32(r, o + BLK_STATUS, TP_STATUS_USER);
    }

    /// A V3 frame header at `off` of block `b`.
    fn v3_frame(
        r: &mut PacketRing,
        b: usize,
        off: usize,
        next: u32,
        snap: u32,
        len: u32,
        mac: u16,
    ) {
        let o = b * 4096 + off;
        put32(r, o + T3_NEXT, next);
        put32(r, o + T3_SNAPLEN, snap);
        put32(r, o + T3_LEN, len);
        put32(r, o + T3_STATUS, TP_STATUS_USER);
        put16(r, o + T3_MAC, mac);
    }

    fn block_status(r: &PacketRing, b: usize) -> u32 {
        r.map
            .status(b * 4096 + BLK_STATUS)
            .map(|s| s.load(Ordering::Acquire))
            .unwrap_or(u32::MAX)
    }

    #[test]
    fn v3_walks_frames_and_returns_blocks() {
        let mut r = v3_ring();
        let mut buf = [0u8; 2048];
        assert_eq!(r.recv(&mut buf).ok(), Some(None), "nothing handed over");
        // Two frames in block 0, one in block 1.
        v3_block(&mut r, 0, 2, 48);
        v3_frame(&mut r, 0, 48, 200, 60, 60, 82);
        v3_frame(&mut r, 0, 248, 0, 100, 100, 82);
        v3_block(&mut r, 1, 1, 48);
        v3_frame(&mut r, 1, 48, 0, 70, 70, 82);
        assert_eq!(r.recv(&mut buf).ok(), Some(Some(60)));
        assert_eq!(block_status(&r, 0), TP_STATUS_USER, "block 0 still held");
        assert_eq!(r.recv(&mut buf).ok(), Some(Some(100)));
        assert_eq!(block_status(&r, 0), TP_STATUS_KERNEL, "block 0 given back");
        assert_eq!(r.recv(&mut buf).ok(), Some(Some(70)));
        assert_eq!(block_status(&r, 1), TP_STATUS_KERNEL);
        assert_eq!(r.recv(&mut buf).ok(), Some(None));
        // Wrap-around: block 0 again.
        v3_block(&mut r, 0, 1, 48);
        v3_frame(&mut r, 0, 48, 0, 64, 64, 82);
        assert_eq!(r.recv(&mut buf).ok(), Some(Some(64)));
        assert_eq!(r.stats().rx_frames, 4);
    }

    #[test]
    fn v3_hostile_headers_are_dropped_and_blocks_returned() {
        let mut r = v3_ring();
        let mut buf = [0u8; 2048];
        // First frame before the block header; a frame count far beyond
        // what fits.
        v3_block(&mut r, 0, 1_000_000, 8);
        assert_eq!(r.recv(&mut buf).ok(), Some(None));
        assert_eq!(block_status(&r, 0), TP_STATUS_KERNEL);
        assert_eq!(r.stats().rx_malformed, 1);
        // Block 1: mac offset outside the block, then a snaplen past its
        // end, then a next offset of 1 byte walking to the end, then a
        // cut frame (snaplen < len).
        v3_block(&mut r, 1, 1_000_000, 48);
        v3_frame(&mut r, 1, 48, 200, 60, 60, 9000);
        v3_frame(&mut r, 1, 248, 200, 4000, 4000, 82);
        v3_frame(&mut r, 1, 448, 200, 60, 100, 82);
        v3_frame(&mut r, 1, 648, 1, 60, 60, 82);
        assert_eq!(r.recv(&mut buf).ok(), Some(Some(60)), "the sane frame");
        // Whatever the 1-byte steps find, the walk ends within the block.
        let mut n = 0;
        while let Ok(Some(_)) = r.recv(&mut buf) {
            n += 1;
            assert!(n < 4096, "the walk must stay within the block");
        }
        assert_eq!(block_status(&r, 1), TP_STATUS_KERNEL);
        let st = r.stats();
        assert!(st.rx_malformed >= 3, "{st:?}");
        assert_eq!(st.rx_truncated, 1, "{st:?}");
        // The cursor moved on to block 0 again.
        v3_block(&mut r, 0, 1, 48);
        v3_frame(&mut r, 0, 48, 0, 60, 60, 82);
        assert_eq!(r.recv(&mut buf).ok(), Some(Some(60)));
    }

    #[test]
    fn v2_hostile_slots_are_dropped_and_returned() {
        let mut c = PacketConfig::new(RingVersion::V2, false, 1500);
        c.block_size = 4096;
        c.block_count = 1;
        c.frame_size = 2048;
        let mut r = fake(c);
        let mut buf = [0u8; 2048];
        let slot = |r: &mut PacketRing, s: usize, snap: u32, len: u32, mac: u16| {
            let o = s * 2048;
            put32(r, o + T2_LEN, len);
            put32(r, o + T2_SNAPLEN, snap);
            put16(r, o + T2_MAC, mac);
            put32(r, o, TP_STATUS_USER);
        };
        slot(&mut r, 0, 60, 60, 10); // inside the ring header
        slot(&mut r, 1, 3000, 3000, 66); // past the slot
        assert_eq!(r.recv(&mut buf).ok(), Some(None));
        assert_eq!(r.stats().rx_malformed, 2);
        slot(&mut r, 0, 100, 100, 66);
        assert_eq!(r.recv(&mut buf).ok(), Some(Some(100)));
        assert_eq!(r.map.status(0).map(|s| s.load(Ordering::Acquire)), Some(0));
    }

    #[test]
    fn default_geometry_is_valid() {
        for v in [RingVersion::V2, RingVersion::V3] {
            for vnet in [false, true] {
                for mtu in [576, 1500, 9000, 65_521] {
                    let c = PacketConfig::new(v, vnet, mtu);
                    c.check().unwrap_or_else(|e| panic!("{c:?}: {e}"));
                    let need = PacketConfig::max_frame_len(vnet, mtu) + RING_FRAME_OVERHEAD;
                    match v {
                        RingVersion::V2 => assert!(c.frame_size >= need, "{c:?}"),
                        RingVersion::V3 => assert!(c.block_size >= 2 * need, "{c:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn bad_geometry_is_refused_clearly() {
        let mut c = PacketConfig::new(RingVersion::V2, false, 1500);
        c.block_size = 5000;
        let e = c.check().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("page size"), "{e}");
        let mut c = PacketConfig::new(RingVersion::V2, false, 1500);
        c.frame_size = c.block_size * 2;
        assert!(c.check().unwrap_err().to_string().contains("frame size"));
    }
}
