//! Live capture from a running stack (`ustack capture`): a device wrapper,
//! [`Tapped`], that copies frames into a [`CaptureHub`]'s ring while somebody
//! captures, and the reader's end of that ring ([`RingReader`]).
//!
//! With nobody capturing, a frame costs one relaxed atomic load. While a
//! capture runs, frames that pass the filter are copied once (up to the
//! snapshot length) as pcap records into a ring in memory the reader maps;
//! when the reader falls behind and the ring is full, frames are dropped and
//! counted, never waited for: a slow reader never slows the stack.

use std::cell::UnsafeCell;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Device, FrameBatch, RxHalf, VNET_HDR_LEN};

/// Which frames a capture keeps (all given conditions must hold), with
/// tcpdump's meaning of each word.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureFilter {
    /// Source or destination address, IPv4 or IPv6 (ARP: sender or target
    /// IPv4 address).
    pub host: Option<IpAddr>,
    /// TCP or UDP source or destination port (over either IP version).
    pub port: Option<u16>,
    /// `tcp`, `udp`, `icmp`, `icmp6` or `arp`.
    pub proto: Option<CaptureProto>,
    /// `ip` (IPv4 only) or `ip6` (IPv6 only).
    pub family: Option<CaptureFamily>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureProto {
    Tcp,
    Udp,
    /// ICMP over IPv4 (tcpdump's `icmp`).
    Icmp,
    /// ICMPv6 (tcpdump's `icmp6`).
    Icmp6,
    Arp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFamily {
    /// tcpdump's `ip`: IPv4 frames.
    Ip,
    /// tcpdump's `ip6`: IPv6 frames.
    Ip6,
}

/// Extension headers walked at most to find an IPv6 packet's upper layer.
const MAX_EXT_HEADERS: usize = 8;

impl CaptureFilter {
    /// Does the Ethernet frame `f` pass?
    pub fn matches(&self, f: &[u8]) -> bool {
        if *self == CaptureFilter::default() {
            return true;
        }
        let Some(et) = f.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
            return false;
        };
        match et {
            0x0806 => {
                if matches!(self.proto, Some(p) if p != CaptureProto::Arp)
                    || self.port.is_some()
                    || self.family.is_some()
                {
                    return false;
                }
                let ip = |o: usize| {
                    f.get(o..o + 4)
                        .map(|b| IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
                };
                self.host
                    .is_none_or(|h| ip(14 + 14) == Some(h) || ip(14 + 24) == Some(h))
            }
            0x0800 => {
                if self.family == Some(CaptureFamily::Ip6) {
                    return false;
                }
                let Some(ip) = f.get(14..) else {
                    return false;
                };
                if ip.len() < 20 {
                    return false;
                }
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
                let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
                // Ports only in a first (or only) fragment.
                let first = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff == 0;
                self.upper(src, dst, ip[9], first.then_some(ihl), ip, 1)
            }
            0x86dd => {
                if self.family == Some(CaptureFamily::Ip) {
                    return false;
                }
                let Some(ip) = f.get(14..) else {
                    return false;
                };
                if ip.len() < 40 {
                    return false;
                }
                let addr = |o: usize| {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&ip[o..o + 16]);
                    IpAddr::V6(Ipv6Addr::from(a))
                };
                let (src, dst) = (addr(8), addr(24));
                // The upper layer behind the extension headers (RFC 8200
                // 4.1's order), if it is within reach: Hop-by-Hop, Routing,
                // Destination Options, and a Fragment header whose offset
                // is 0 (a later fragment has no ports).
                let (mut nh, mut at, mut first) = (ip[6], 40usize, true);
                for _ in 0..MAX_EXT_HEADERS {
                    match nh {
                        0 | 43 | 60 => {
                            let Some(h) = ip.get(at..at + 2) else {
                                return false;
                            };
                            nh = h[0];
                            at += (usize::from(h[1]) + 1) * 8;
                        }
                        44 => {
                            let Some(h) = ip.get(at..at + 4) else {
                                return false;
                            };
                            nh = h[0];
                            first &= u16::from_be_bytes([h[2], h[3]]) & 0xfff8 == 0;
                            at += 8;
                        }
                        _ => break,
                    }
                }
                self.upper(src, dst, nh, first.then_some(at), ip, 6)
            }
            _ => {
                self.host.is_none()
                    && self.port.is_none()
                    && self.proto.is_none()
                    && self.family.is_none()
            }
        }
    }

    /// The address, protocol and port conditions for an IP packet `ip`
    /// (version `v`) from `src` to `dst` whose upper layer is `proto`,
    /// starting at `l4` (None: not in this packet, a later fragment).
    fn upper(
        &self,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        l4: Option<usize>,
        ip: &[u8],
        v: u8,
    ) -> bool {
        if self.host.is_some_and(|h| h != src && h != dst) {
            return false;
        }
        let want = match (self.proto, v) {
            (Some(CaptureProto::Tcp), _) => Some(6),
            (Some(CaptureProto::Udp), _) => Some(17),
            (Some(CaptureProto::Icmp), 1) => Some(1),
            (Some(CaptureProto::Icmp6), 6) => Some(58),
            (Some(_), _) => return false,
            (None, _) => None,
        };
        if want.is_some_and(|w| w != proto) {
            return false;
        }
        let Some(p) = self.port else {
            return true;
        };
        let Some(at) = l4.filter(|_| proto == 6 || proto == 17) else {
            return false;
        };
        let port = |o: usize| {
            ip.get(at + o..at + o + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
        };
        port(0) == Some(p) || port(2) == Some(p)
    }
}

/// Bytes in front of a ring's records: its header (see [`CaptureHub`]).
pub const RING_HEADER: usize = 192;
/// Smallest ring accepted (header and records).
pub const MIN_RING: usize = 64 << 10;
/// Past this offset in the ring, the stack goes back to its start when the
/// reader has read everything (a skip record tells the reader).
const SKIP_AFTER: u64 = 512 << 10;

const MAGIC: u64 = u64::from_le_bytes(*b"ustkcap1");
// Byte offsets of the header's words. The producer (the stack) writes all
// but `H_TAIL` and `H_WAITING`, which the reader writes; neither trusts
// what the other wrote.
const H_MAGIC: usize = 0;
const H_CAP: usize = 8;
const H_SNAPLEN: usize = 16;
const H_ID: usize = 24;
const H_CLOSED: usize = 32;
const H_HEAD: usize = 64;
const H_FRAMES: usize = 72;
const H_DROPPED: usize = 80;
/// A 32-bit futex word: 1 while the reader sleeps waiting for records.
const H_WAITING: usize = 88;
const H_TAIL: usize = 128;

/// Memory a capture ring is laid out in: typically shared with the
/// reader's process (the control endpoint's arena), or [`HeapMemory`].
///
/// # Safety
/// `ptr()` must be 8-byte aligned and valid for reads and writes of
/// `size()` bytes for as long as the value lives, and the same each call.
pub unsafe trait RingMemory: Send + Sync + 'static {
    fn ptr(&self) -> *mut u8;
    /// Bytes.
    fn size(&self) -> usize;
}

/// Ring memory on this process's heap (tests, and captures read in-process).
pub struct HeapMemory {
    words: Box<[UnsafeCell<u64>]>,
}

// SAFETY: the cells are only accessed through raw pointers by the ring's
// code, which uses atomics for every word two parties share and hands each
// record's bytes to one party at a time.
unsafe impl Send for HeapMemory {}
// SAFETY: as above.
unsafe impl Sync for HeapMemory {}

impl HeapMemory {
    pub fn new(len: usize) -> HeapMemory {
        HeapMemory {
            words: (0..len.div_ceil(8)).map(|_| UnsafeCell::new(0)).collect(),
        }
    }
}

// SAFETY: a boxed slice does not move while it lives; u64 cells are 8-byte
// aligned and the slice holds at least `size()` bytes.
unsafe impl RingMemory for HeapMemory {
    fn ptr(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.words.as_ptr()).cast()
    }
    fn size(&self) -> usize {
        self.words.len() * 8
    }
}

/// The header word at byte `off` of the ring at `base`.
///
/// # Safety
/// `base` must be valid for `RING_HEADER` bytes and 8-byte aligned for `'a`.
unsafe fn word<'a>(base: *mut u8, off: usize) -> &'a AtomicU64 {
    // SAFETY: in the header (off < RING_HEADER), aligned; shared words are
    // only ever accessed atomically.
    unsafe { &*base.add(off).cast::<AtomicU64>() }
}

/// The reader's futex word.
///
/// # Safety
/// As [`word`].
unsafe fn waiting<'a>(base: *mut u8) -> &'a AtomicU32 {
    // SAFETY: as `word`; 4-byte aligned.
    unsafe { &*base.add(H_WAITING).cast::<AtomicU32>() }
}

fn futex_wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned 32-bit word; shared between
    // processes, so not FUTEX_PRIVATE.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, 1);
    }
}

fn futex_wait(w: &AtomicU32, val: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(3600) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned 32-bit word with a relative
    // timeout; it returns at once if the word is no longer `val`.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAIT, val, &ts);
    }
}

/// The stack's end of a capture ring: it copies each frame it keeps once,
/// as a pcap record (16-byte header and data), into the ring, and publishes
/// it by moving `head`.
struct Ring {
    mem: Box<dyn RingMemory>,
    base: *mut u8,
    /// Bytes of records the ring holds (after the header).
    cap: u64,
    head: u64,
    frames: u64,
    dropped: u64,
    snaplen: usize,
    filter: CaptureFilter,
}

// SAFETY: `base` points into `mem`, which is Send and owned by the ring.
unsafe impl Send for Ring {}

impl Ring {
    fn new(
        mem: Box<dyn RingMemory>,
        snaplen: usize,
        filter: CaptureFilter,
        id: u64,
    ) -> Result<Ring, String> {
        let base = mem.ptr();
        let len = mem.size();
        if len < MIN_RING || base.is_null() || base.align_offset(8) != 0 {
            return Err(format!(
                "capture ring too small or misaligned ({len} bytes)"
            ));
        }
        let cap = (len - RING_HEADER) as u64;
        let r = Ring {
            mem,
            base,
            cap,
            head: 0,
            frames: 0,
            dropped: 0,
            snaplen,
            filter,
        };
        r.w(H_MAGIC).store(0, Ordering::Relaxed);
        for off in [H_HEAD, H_FRAMES, H_DROPPED, H_TAIL, H_CLOSED] {
            r.w(off).store(0, Ordering::Relaxed);
        }
        // SAFETY: base is valid for the header (len >= MIN_RING).
        unsafe { waiting(base) }.store(0, Ordering::Relaxed);
        r.w(H_CAP).store(cap, Ordering::Relaxed);
        r.w(H_SNAPLEN).store(snaplen as u64, Ordering::Relaxed);
        r.w(H_ID).store(id, Ordering::Relaxed);
        r.w(H_MAGIC).store(MAGIC, Ordering::Release);
        Ok(r)
    }

    fn w(&self, off: usize) -> &AtomicU64 {
        // SAFETY: base is valid for the header while `mem` lives (checked in new).
        unsafe { word(self.base, off) }
    }

    /// Copy `b` into the records at position `pos` (wrapping around).
    fn put(&self, pos: u64, b: &[u8]) {
        let off = (pos % self.cap) as usize;
        let first = b.len().min(self.cap as usize - off);
        // SAFETY: both ranges lie inside the record area [RING_HEADER,
        // RING_HEADER+cap) (off < cap, first <= cap-off, b.len()-first <= cap
        // because callers only put what fits), which the reader does not read
        // until `head` says so; `b` is not in the ring.
        unsafe {
            let data = self.base.add(RING_HEADER);
            std::ptr::copy_nonoverlapping(b.as_ptr(), data.add(off), first);
            std::ptr::copy_nonoverlapping(b.as_ptr().add(first), data, b.len() - first);
        }
    }

    fn push(&mut self, frame: &[u8]) {
        let caplen = frame.len().min(self.snaplen);
        let need = 16 + caplen as u64;
        // The reader's position: trusted for nothing but how much room there is.
        let tail = self.w(H_TAIL).load(Ordering::Acquire);
        let mut used = self.head.wrapping_sub(tail);
        let off = self.head % self.cap;
        if used == 0 && off >= SKIP_AFTER && need <= off && self.cap - off >= 16 {
            // The reader has caught up: go back to the start of the ring, so
            // that with a reader that keeps up the stack writes into the same
            // few hundred KB (still in its cache) instead of all of the ring.
            let mut h = [0xffu8; 16];
            h[8..12].copy_from_slice(&((self.cap - off - 16) as u32).to_le_bytes());
            self.put(self.head, &h);
            self.head = self.head.wrapping_add(self.cap - off);
            used = self.cap - off;
        }
        if used > self.cap || need > self.cap - used {
            self.dropped += 1;
            self.w(H_DROPPED).store(self.dropped, Ordering::Relaxed);
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(
            &u32::try_from(ts.as_secs())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        h[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        h[12..16].copy_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_le_bytes());
        self.put(self.head, &h);
        self.put(self.head.wrapping_add(16), &frame[..caplen]);
        self.head = self.head.wrapping_add(need);
        self.frames += 1;
        self.w(H_FRAMES).store(self.frames, Ordering::Relaxed);
        self.w(H_HEAD).store(self.head, Ordering::SeqCst);
        // A reader polls on a short timer while frames come; it is woken
        // only when half the ring is waiting, to save it from dropping. (A
        // wake-up is a system call that costs the stack as much as copying
        // a few frames; on a VM, an inter-processor interrupt too.)
        if used + need >= self.cap / 2 {
            self.wake();
        }
    }

    fn wake(&self) {
        // SAFETY: base is valid for the header.
        let w = unsafe { waiting(self.base) };
        if w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::SeqCst) != 0 {
            futex_wake(w);
        }
    }

    /// The capture is over: tell the reader.
    fn close(&self) {
        self.w(H_CLOSED).store(1, Ordering::SeqCst);
        // SAFETY: base is valid for the header.
        let w = unsafe { waiting(self.base) };
        w.store(0, Ordering::SeqCst);
        futex_wake(w);
    }
}

/// Where a [`Tapped`] device puts frames while a capture runs; shared with
/// whoever serves capture requests (the control endpoint).
///
/// A capture is a ring of pcap records in memory the reader maps (the
/// control endpoint's shared arena): the data path copies each frame it
/// keeps once into the ring, with no allocation (a lock serialises the
/// device's sending and receiving threads, each holding it for one copy),
/// and the reader writes the records straight from the ring. The ring
/// starts with a header of 64-bit words: `magic` ("ustkcap1"), `cap` (bytes
/// of records), `snaplen`, `id` (this capture's), `closed`, then on their own
/// cache lines the stack's `head` (bytes written), `frames`, `dropped` and
/// the reader's futex word at 88, and the reader's `tail` (bytes read) at
/// 128; records follow at [`RING_HEADER`], wrapping around. A frame that
/// does not fit in the room the reader left is dropped and counted.
pub struct CaptureHub {
    active: AtomicBool,
    ring: Mutex<Option<Ring>>,
    ids: AtomicU64,
}

impl std::fmt::Debug for CaptureHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureHub")
            .field("active", &self.active.load(Ordering::Relaxed))
            .finish()
    }
}

impl CaptureHub {
    pub fn new() -> Arc<CaptureHub> {
        Arc::new(CaptureHub {
            active: AtomicBool::new(false),
            ring: Mutex::new(None),
            ids: AtomicU64::new(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Ring>> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start capturing frames that pass `filter`, `snaplen` bytes of each,
    /// into a ring laid out in `mem` (refused while a capture runs).
    /// Returns the capture's id (in the ring's header, for its reader).
    pub fn start(
        &self,
        filter: CaptureFilter,
        snaplen: usize,
        mem: Box<dyn RingMemory>,
    ) -> Result<u64, String> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let ring = Ring::new(mem, snaplen.clamp(14, 262_144), filter, id)?;
        let mut g = self.lock();
        if g.is_some() {
            return Err("a capture is already running".into());
        }
        *g = Some(ring);
        drop(g);
        self.active.store(true, Ordering::Release);
        Ok(id)
    }

    /// Stop capturing; the ring's memory, after telling its reader (keep it
    /// a while before reusing it: a reader may still be finishing a write).
    pub fn stop(&self) -> Option<Box<dyn RingMemory>> {
        self.active.store(false, Ordering::Release);
        let old = self.lock().take()?;
        old.close();
        Some(old.mem)
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Record `frame` (an Ethernet frame) if a capture runs and wants it.
    #[inline]
    pub fn record(&self, frame: &[u8]) {
        if !self.active.load(Ordering::Relaxed) {
            return;
        }
        self.record_slow(frame);
    }

    #[cold]
    fn record_slow(&self, frame: &[u8]) {
        // Two threads record at once where a device's receive half
        // (`Device::split_rx`) reads on one thread while another sends: the
        // lock serialises them, and is held only for one record's copy (or
        // a capture's start or stop, which swap the ring in or out), so a
        // frame waits rather than going missing.
        let mut g = self.lock();
        if let Some(r) = g.as_mut() {
            if r.filter.matches(frame) {
                r.push(frame);
            }
        }
    }
}

/// What a [`RingReader::pending`] found: whole records from the read
/// position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    pub frames: u64,
    pub bytes: u64,
}

/// Is `h` the header of a skip record (microseconds all ones: no pcap
/// record has that), whose length field counts the bytes skipped?
fn is_skip(h: &[u8; 16]) -> bool {
    h[4..8] == [0xff; 4]
}

/// The reader's end of a capture ring (`ustack capture`, in another process).
///
/// Everything it reads from the ring is checked: a ring the stack let go of
/// (or garbage) gives an error or nothing, never a read outside it.
pub struct RingReader {
    base: *mut u8,
    cap: u64,
    id: u64,
    tail: u64,
}

impl RingReader {
    /// The reader of the ring at `base` (`len` bytes) whose header names
    /// capture `id`.
    ///
    /// # Safety
    /// `base` must be 8-byte aligned and valid for reads and writes of `len`
    /// bytes (other processes may change them) while the reader lives.
    pub unsafe fn open(base: *mut u8, len: usize, id: u64) -> Result<RingReader, String> {
        if len < MIN_RING || base.align_offset(8) != 0 {
            return Err("capture ring too small or misaligned".into());
        }
        // SAFETY: the caller's promise; len >= the header.
        let (magic, cap, rid, tail) = unsafe {
            (
                word(base, H_MAGIC).load(Ordering::Acquire),
                word(base, H_CAP).load(Ordering::Relaxed),
                word(base, H_ID).load(Ordering::Relaxed),
                word(base, H_TAIL).load(Ordering::Relaxed),
            )
        };
        if magic != MAGIC || rid != id || cap == 0 || cap > (len - RING_HEADER) as u64 {
            return Err("not the capture ring announced".into());
        }
        Ok(RingReader {
            base,
            cap,
            id,
            tail,
        })
    }

    fn w(&self, off: usize) -> &AtomicU64 {
        // SAFETY: the promise of `open`.
        unsafe { word(self.base, off) }
    }

    /// Frames the stack put in the ring since the capture started.
    pub fn frames(&self) -> u64 {
        self.w(H_FRAMES).load(Ordering::Relaxed)
    }

    /// Frames the stack dropped because the ring was full (reader too slow).
    pub fn dropped(&self) -> u64 {
        self.w(H_DROPPED).load(Ordering::Relaxed)
    }

    /// Does the ring's header still name this capture? (No longer once the
    /// stack has let go of the memory: its counters mean nothing then.)
    pub fn is_ours(&self) -> bool {
        self.w(H_MAGIC).load(Ordering::Acquire) == MAGIC
            && self.w(H_ID).load(Ordering::Acquire) == self.id
    }

    /// Has the stack stopped this capture (or let go of its ring)?
    pub fn closed(&self) -> bool {
        self.w(H_CLOSED).load(Ordering::Acquire) != 0 || !self.is_ours()
    }

    /// Copy `out.len()` bytes of the records at position `pos` (wrapping).
    fn get(&self, pos: u64, out: &mut [u8]) {
        let off = (pos % self.cap) as usize;
        let first = out.len().min(self.cap as usize - off);
        // SAFETY: inside the record area (off < cap, out.len() <= cap checked
        // by callers); `out` is ours.
        unsafe {
            let data = self.base.add(RING_HEADER);
            std::ptr::copy_nonoverlapping(data.add(off), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }

    /// The whole records waiting (at most `max_frames` of them). Skip
    /// records (the stack went back to the start of the ring) are passed
    /// over here: they are never part of what is returned.
    pub fn pending(&mut self, max_frames: u64) -> Result<Pending, String> {
        let head = self.w(H_HEAD).load(Ordering::Acquire);
        let mut p = Pending::default();
        // Bounded: each pass consumes a skip record or ends.
        for _ in 0..4 {
            let avail = head.wrapping_sub(self.tail);
            if avail > self.cap {
                return Err("capture ring corrupt (head beyond the ring)".into());
            }
            p = Pending::default();
            let mut skip = None;
            while p.frames < max_frames && avail - p.bytes >= 16 {
                let mut h = [0u8; 16];
                self.get(self.tail.wrapping_add(p.bytes), &mut h);
                let n = u64::from(u32::from_le_bytes([h[8], h[9], h[10], h[11]]));
                if 16 + n > avail - p.bytes {
                    return Err("capture ring corrupt (a record runs past head)".into());
                }
                if is_skip(&h) {
                    if p.frames == 0 {
                        skip = Some(16 + n);
                    }
                    break;
                }
                p.bytes += 16 + n;
                p.frames += 1;
            }
            match skip {
                Some(n) => self.consume(&Pending {
                    frames: 0,
                    bytes: n,
                }),
                None => return Ok(p),
            }
        }
        Ok(p)
    }

    /// The bytes of `p` (pcap records), as one or two slices of the ring.
    pub fn slices(&self, p: &Pending) -> (&[u8], &[u8]) {
        let off = (self.tail % self.cap) as usize;
        let n = (p.bytes.min(self.cap)) as usize;
        let first = n.min(self.cap as usize - off);
        // SAFETY: inside the record area; the stack writes no byte between
        // tail and head until `consume` moves tail past it.
        unsafe {
            let data = self.base.add(RING_HEADER);
            (
                std::slice::from_raw_parts(data.add(off), first),
                std::slice::from_raw_parts(data, n - first),
            )
        }
    }

    /// The records of `p`, each copied out (header and data).
    pub fn records(&self, p: &Pending) -> Vec<Vec<u8>> {
        let mut v = Vec::with_capacity(p.frames as usize);
        let mut pos = 0;
        while pos + 16 <= p.bytes {
            let mut h = [0u8; 16];
            self.get(self.tail.wrapping_add(pos), &mut h);
            let n = 16 + u64::from(u32::from_le_bytes([h[8], h[9], h[10], h[11]]));
            if pos + n > p.bytes {
                break;
            }
            let mut r = vec![0u8; n as usize];
            self.get(self.tail.wrapping_add(pos), &mut r);
            v.push(r);
            pos += n;
        }
        v
    }

    /// Done with `p`: its room goes back to the stack. (Once the capture is
    /// over the reader writes nothing more into the ring: the stack keeps a
    /// stopped ring's memory a while, then reuses it.)
    pub fn consume(&mut self, p: &Pending) {
        self.tail = self.tail.wrapping_add(p.bytes.min(self.cap));
        if !self.closed() {
            self.w(H_TAIL).store(self.tail, Ordering::Release);
        }
    }

    /// Sleep for `timeout`, or until half the ring waits or the capture
    /// ends (poll on a short timer while frames come: the stack does not
    /// wake the reader for every few frames, which would cost it).
    pub fn wait(&self, timeout: Duration) {
        // SAFETY: the promise of `open`.
        let w = unsafe { waiting(self.base) };
        if self.closed() {
            return;
        }
        w.store(1, Ordering::SeqCst);
        if self.w(H_HEAD).load(Ordering::SeqCst) == self.tail && !self.closed() {
            futex_wait(w, 1, timeout);
        }
        w.store(0, Ordering::SeqCst);
    }
}

/// The 24-byte pcap file header (LINKTYPE_ETHERNET, microseconds).
pub fn pcap_header(snaplen: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h
}

/// A device whose frames (both ways) go to a [`CaptureHub`] while a
/// capture runs.
pub struct Tapped<D: Device> {
    inner: D,
    hub: Arc<CaptureHub>,
    skip: usize,
    /// A frame sent in parts, gathered for the capture (only while one
    /// runs); kept for the next.
    gathered: Vec<u8>,
}

impl<D: Device> Tapped<D> {
    pub fn new(inner: D, hub: Arc<CaptureHub>) -> Tapped<D> {
        let skip = if inner.offloads().vnet_hdr {
            VNET_HDR_LEN
        } else {
            0
        };
        Tapped {
            inner,
            hub,
            skip,
            gathered: Vec::new(),
        }
    }

    #[inline]
    fn rec(&self, f: &[u8]) {
        record(&self.hub, self.skip, f);
    }
}

/// Record a frame without its first `skip` bytes (the virtio-net header);
/// returns at once while nobody captures.
fn record(hub: &CaptureHub, skip: usize, f: &[u8]) {
    hub.record(f.get(skip..).unwrap_or(&[]));
}

impl<D: Device> Device for Tapped<D> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = self.inner.recv(buf)?;
        if let Some(n) = r {
            self.rec(&buf[..n.min(buf.len())]);
        }
        Ok(r)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.inner.send(frame)?;
        self.rec(frame);
        Ok(())
    }

    /// The parts go to the inner device as they are; only while a capture
    /// runs are they gathered, after the send, for the capture's filter and
    /// ring (which see the bytes `send` of the concatenation would record).
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        self.inner.send_vectored(parts)?;
        if self.hub.is_active() {
            let mut gathered = std::mem::take(&mut self.gathered);
            crate::gather_into(&mut gathered, parts);
            self.rec(&gathered);
            self.gathered = gathered;
        }
        Ok(())
    }

    fn recv_batch(&mut self, batch: &mut FrameBatch) -> io::Result<usize> {
        let n = self.inner.recv_batch(batch)?;
        if self.hub.is_active() {
            for i in 0..n {
                if let Some(f) = batch.get(i) {
                    self.rec(f);
                }
            }
        }
        Ok(n)
    }

    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        let n = self.inner.send_batch(frames)?;
        if self.hub.is_active() {
            for f in frames.iter().take(n) {
                self.rec(f);
            }
        }
        Ok(n)
    }

    forward_device!(self => self.inner; mtu, mac, raw_fd, next_deadline, poll_deferred, offloads);

    /// The inner device's receive half, recording what it reads as `recv`
    /// does.
    fn split_rx(&mut self) -> Option<Box<dyn RxHalf>> {
        let inner = self.inner.split_rx()?;
        Some(Box::new(TappedRx {
            inner,
            hub: Arc::clone(&self.hub),
            skip: self.skip,
        }))
    }
}

/// The receive half of a [`Tapped`] device: the inner device's, recorded.
struct TappedRx {
    inner: Box<dyn RxHalf>,
    hub: Arc<CaptureHub>,
    skip: usize,
}

impl RxHalf for TappedRx {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = self.inner.recv(buf)?;
        if let Some(n) = r {
            record(&self.hub, self.skip, &buf[..n.min(buf.len())]);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12] = 0x08;
        f[14] = 0x45;
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn filters_select_by_host_port_and_protocol() {
        let f = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        let all = CaptureFilter::default();
        assert!(all.matches(&f));
        let port = CaptureFilter {
            port: Some(80),
            ..Default::default()
        };
        assert!(port.matches(&f));
        let other = CaptureFilter {
            port: Some(443),
            ..Default::default()
        };
        assert!(!other.matches(&f));
        let host = CaptureFilter {
            host: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
            proto: Some(CaptureProto::Tcp),
            ..Default::default()
        };
        assert!(host.matches(&f));
        let udp = CaptureFilter {
            proto: Some(CaptureProto::Udp),
            ..Default::default()
        };
        assert!(!udp.matches(&f));
        // Truncated and garbage frames never match a filter, never panic.
        for n in 0..f.len() {
            let _ = port.matches(&f[..n]);
            assert!(!host.matches(&f[..n.min(33)]));
        }
    }

    /// A TCP/IPv6 frame, behind `ext` (extension headers, the first
    /// byte of each its next header, already chained to TCP).
    fn tcp6_frame(src: Ipv6Addr, dst: Ipv6Addr, first_nh: u8, ext: &[u8], dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[20] = first_nh;
        f[22..38].copy_from_slice(&src.octets());
        f[38..54].copy_from_slice(&dst.octets());
        f.extend_from_slice(ext);
        let mut tcp = [0u8; 20];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&tcp);
        f
    }

    #[test]
    fn filters_see_ipv6_through_its_extension_headers() {
        let (a, b) = ("fd77::1".parse().unwrap(), "fd77::2".parse().unwrap());
        // Hop-by-Hop (8 bytes) then a Fragment header at offset 0, then TCP.
        let mut ext = vec![44, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 7]);
        let plain = tcp6_frame(a, b, 6, &[], 80);
        let behind = tcp6_frame(a, b, 0, &ext, 80);
        let port = CaptureFilter {
            port: Some(80),
            ..Default::default()
        };
        let host6 = CaptureFilter {
            host: Some(IpAddr::V6(b)),
            proto: Some(CaptureProto::Tcp),
            family: Some(CaptureFamily::Ip6),
            ..Default::default()
        };
        for f in [&plain, &behind] {
            assert!(port.matches(f));
            assert!(host6.matches(f));
        }
        // A later fragment carries no ports.
        let mut later = ext.clone();
        later[10..12].copy_from_slice(&0x0100u16.to_be_bytes());
        assert!(!port.matches(&tcp6_frame(a, b, 0, &later, 80)));
        // tcpdump's words: `ip` is IPv4 only, `icmp` ICMPv4 only, an IPv4
        // host never matches IPv6 and the reverse.
        let ip4 = CaptureFilter {
            family: Some(CaptureFamily::Ip),
            ..Default::default()
        };
        let icmp = CaptureFilter {
            proto: Some(CaptureProto::Icmp),
            ..Default::default()
        };
        let host4 = CaptureFilter {
            host: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
            ..Default::default()
        };
        for f in [&ip4, &icmp, &host4] {
            assert!(!f.matches(&plain), "{f:?}");
        }
        let v4 = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        assert!(ip4.matches(&v4) && host4.matches(&v4) && !host6.matches(&v4));
        let icmp6 = CaptureFilter {
            proto: Some(CaptureProto::Icmp6),
            ..Default::default()
        };
        let mut echo6 = tcp6_frame(a, b, 58, &[], 0);
        echo6.truncate(14 + 40 + 8);
        assert!(icmp6.matches(&echo6) && !icmp6.matches(&plain) && !icmp6.matches(&v4));
        // Truncated frames and a chain of more headers than walked: no
        // match for a port filter, never a panic.
        for n in 0..behind.len() {
            let _ = port.matches(&behind[..n]);
            let _ = host6.matches(&behind[..n]);
        }
        let mut long = Vec::new();
        for _ in 0..20 {
            long.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
        }
        assert!(!port.matches(&tcp6_frame(a, b, 60, &long, 80)));
    }

    /// A reader of `hub`'s ring in `mem` (capture `id`).
    fn reader(mem: &HeapMemory, id: u64) -> RingReader {
        // SAFETY: `mem` outlives the reader in each test.
        unsafe { RingReader::open(mem.ptr(), mem.size(), id) }.expect("ring")
    }

    /// A `HeapMemory` the hub owns, and the same bytes for the test's reader.
    fn shared(len: usize) -> (Box<dyn RingMemory>, HeapMemory) {
        struct Alias(*mut u8, usize);
        // SAFETY: test-only alias of a HeapMemory kept alive by the test.
        unsafe impl Send for Alias {}
        // SAFETY: as above.
        unsafe impl Sync for Alias {}
        // SAFETY: points into the test's HeapMemory, which outlives the hub's use.
        unsafe impl RingMemory for Alias {
            fn ptr(&self) -> *mut u8 {
                self.0
            }
            fn size(&self) -> usize {
                self.1
            }
        }
        let m = HeapMemory::new(len);
        (Box::new(Alias(m.ptr(), m.size())), m)
    }

    #[test]
    fn a_full_ring_drops_and_counts_and_the_reader_drains() {
        let hub = CaptureHub::new();
        let f = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        hub.record(&f);
        let (ring, mem) = shared(MIN_RING);
        let id = hub
            .start(CaptureFilter::default(), 65535, ring)
            .expect("start");
        let mut r = reader(&mem, id);
        assert_eq!(
            r.pending(u64::MAX).expect("ok").frames,
            0,
            "nothing while idle"
        );
        for _ in 0..10_000 {
            hub.record(&f);
        }
        let fit = ((MIN_RING - RING_HEADER) / (16 + f.len())) as u64;
        let p = r.pending(u64::MAX).expect("ok");
        assert_eq!(p.frames, fit);
        assert_eq!((r.frames(), r.dropped()), (fit, 10_000 - fit));
        assert_eq!(p.bytes, fit * (16 + f.len() as u64));
        let (a, b) = r.slices(&p);
        assert_eq!(a.len() + b.len(), p.bytes as usize);
        assert_eq!(&a[16..16 + f.len()], &f[..], "the frame follows its header");
        assert_eq!(r.pending(3).expect("ok").frames, 3, "at most what is asked");
        r.consume(&p);
        hub.record(&f);
        let p = r.pending(u64::MAX).expect("ok");
        assert_eq!(p.frames, 1, "room again after a read");
        // The record wraps around the end of the ring: read back whole.
        let recs = r.records(&p);
        assert_eq!(recs.len(), 1);
        assert_eq!(&recs[0][16..], &f[..]);
        r.consume(&p);
        hub.stop();
        assert!(r.closed());
        hub.record(&f);
        assert_eq!(r.pending(u64::MAX).expect("ok").frames, 0);
    }

    #[test]
    fn two_threads_recording_at_once_lose_no_frame() {
        // A device's receive half records on the stack thread while a
        // sender records on its own: every frame of both must be in a ring
        // with room for all of them.
        const EACH: usize = 50_000;
        let hub = CaptureHub::new();
        let f = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        let (ring, mem) = shared(RING_HEADER + 2 * EACH * (16 + f.len()));
        let id = hub
            .start(CaptureFilter::default(), 65535, ring)
            .expect("start");
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let hub = Arc::clone(&hub);
                let f = f.clone();
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        hub.record(&f);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("recording thread");
        }
        let mut r = reader(&mem, id);
        assert_eq!((r.frames(), r.dropped()), (2 * EACH as u64, 0));
        let p = r.pending(u64::MAX).expect("ok");
        assert_eq!(p.frames, 2 * EACH as u64);
        assert!(r.records(&p).iter().all(|rec| rec[16..] == f[..]));
        hub.stop();
    }

    #[test]
    fn snaplen_truncates_and_oversized_frames_are_dropped() {
        let hub = CaptureHub::new();
        let (ring, mem) = shared(MIN_RING);
        let id = hub
            .start(CaptureFilter::default(), 100, ring)
            .expect("start");
        let mut r = reader(&mem, id);
        let big = vec![7u8; 9000];
        hub.record(&big);
        let p = r.pending(u64::MAX).expect("ok");
        let rec = &r.records(&p)[0];
        assert_eq!(rec.len(), 16 + 100);
        assert_eq!(
            u32::from_le_bytes([rec[12], rec[13], rec[14], rec[15]]),
            9000
        );
        r.consume(&p);
        hub.stop();
        // A frame larger than the whole ring can never fit: dropped, counted.
        let (ring, mem) = shared(MIN_RING);
        let id = hub
            .start(CaptureFilter::default(), 262_144, ring)
            .expect("start");
        let r = reader(&mem, id);
        hub.record(&vec![0u8; MIN_RING]);
        assert_eq!((r.frames(), r.dropped()), (0, 1));
    }

    #[test]
    fn a_reader_that_lies_about_its_position_hurts_only_itself() {
        let hub = CaptureHub::new();
        let (ring, mem) = shared(MIN_RING);
        let id = hub
            .start(CaptureFilter::default(), 65535, ring)
            .expect("start");
        let f = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        for bogus in [u64::MAX, 1 << 40, 3, 0] {
            // SAFETY: the header of the test's ring.
            unsafe { word(mem.ptr(), H_TAIL) }.store(bogus, Ordering::Relaxed);
            for _ in 0..2000 {
                hub.record(&f);
            }
        }
        // The stack wrote nothing outside the ring (the heap is intact) and
        // kept counting; a reader of the wrong capture is refused.
        let mut r = reader(&mem, id);
        assert!(r.frames() + r.dropped() == 8000);
        // SAFETY: as in `reader`.
        assert!(unsafe { RingReader::open(mem.ptr(), mem.size(), id + 1) }.is_err());
        // A corrupt head is an error for the reader, not a crash.
        // SAFETY: the header of the test's ring.
        unsafe { word(mem.ptr(), H_HEAD) }.store(u64::MAX / 2, Ordering::Relaxed);
        assert!(r.pending(u64::MAX).is_err());
        hub.stop();
    }

    #[test]
    fn a_reader_that_keeps_up_keeps_the_stack_at_the_start_of_the_ring() {
        let hub = CaptureHub::new();
        let (ring, mem) = shared(4 << 20);
        let id = hub
            .start(CaptureFilter::default(), 65535, ring)
            .expect("start");
        let mut r = reader(&mem, id);
        let mut f = vec![0u8; 1000];
        let mut read = 0u64;
        for i in 0..3000u32 {
            f[..4].copy_from_slice(&i.to_le_bytes());
            hub.record(&f);
            if i % 3 == 2 {
                let p = r.pending(u64::MAX).expect("ok");
                let (a, b) = r.slices(&p);
                let mut all = a.to_vec();
                all.extend_from_slice(b);
                assert_eq!(p.frames, 3, "frame {i}");
                for (k, rec) in all.chunks(1016).enumerate() {
                    let want = i - 2 + k as u32;
                    assert_eq!(&rec[16..20], &want.to_le_bytes(), "frame {want}");
                }
                read += p.bytes;
                r.consume(&p);
            }
        }
        assert_eq!((r.frames(), r.dropped()), (3000, 0));
        // The stack went back to the start (skips count in head) and never
        // past SKIP_AFTER plus what the reader lagged.
        // SAFETY: the header of the test's ring.
        let head = unsafe { word(mem.ptr(), H_HEAD) }.load(Ordering::Relaxed);
        let cap = (4 << 20) - RING_HEADER as u64;
        assert!(head > read, "no skip: head {head}, read {read}");
        assert!(head % cap <= SKIP_AFTER + 3 * 1016, "{}", head % cap);
        hub.stop();
    }

    #[test]
    fn tapped_forwards_parts_and_records_them_as_the_whole_frame() {
        use crate::memlink::{pair, Impairments};
        let hub = CaptureHub::new();
        let (a, mut b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut t = Tapped::new(a, Arc::clone(&hub));
        let f = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        let parts: [&[u8]; 3] = [&f[..14], &[], &f[14..]];
        // Nobody captures: the parts go on, nothing is gathered.
        t.send_vectored(&parts).expect("send");
        assert_eq!(t.gathered.capacity(), 0);
        // A filter that reads both parts (the port is in the second).
        let (ring, mem) = shared(MIN_RING);
        let port = CaptureFilter {
            port: Some(80),
            ..Default::default()
        };
        let id = hub.start(port, 65535, ring).expect("start");
        let mut r = reader(&mem, id);
        t.send(&f).expect("send");
        t.send_vectored(&parts).expect("send");
        t.send_vectored(&[&f]).expect("send");
        t.send_vectored(&f.chunks(1).collect::<Vec<_>>())
            .expect("send");
        let other = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 40000, 443);
        t.send_vectored(&[&other[..14], &other[14..]])
            .expect("send");
        let p = r.pending(u64::MAX).expect("ok");
        let recs = r.records(&p);
        assert_eq!(recs.len(), 4, "the frames to port 80, once each");
        for rec in &recs {
            assert_eq!(rec[8..], recs[0][8..], "lengths and bytes as `send`'s");
            assert_eq!(&rec[16..], &f[..]);
        }
        hub.stop();
        let mut buf = [0u8; 2000];
        let mut got = Vec::new();
        while let Some(n) = b.recv(&mut buf).expect("recv") {
            got.push(buf[..n].to_vec());
        }
        assert_eq!(got.len(), 6);
        assert!(got[..5].iter().all(|g| *g == f));
        assert_eq!(got[5], other);
    }
}
