//! Domains: a shared-memory segment `/dev/shm/ustack-ipc-<name>` holding a header and a
//! table of endpoint slots. See the crate documentation for the protocol.

use crate::arena::{ARENA_CHUNK, DEFAULT_ARENA_SIZE, MAX_ARENA_SIZE};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::sys;
use std::cell::UnsafeCell;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Hard upper bound on the endpoints of one domain.
pub const MAX_ENDPOINTS_LIMIT: u32 = 1024;
/// Default copy limit of a domain (`vcopy` larger than this gives [`Error::TooLarge`]).
pub const DEFAULT_MAX_COPY: u64 = 64 << 20;
pub(crate) const BITMAP_WORDS: usize = (MAX_ENDPOINTS_LIMIT as usize) / 64;
const MAGIC: u64 = 0x5049_6b63_6174_7375; // "ustackIP" little-endian
const VERSION: u32 = 4;
const HEADER_SIZE: usize = 4096;
const SHM_DIR: &str = "/dev/shm";
const PREFIX: &str = "ustack-ipc-";

// Slot allocation word: low 8 bits state, high 32 bits pid of the process that set it.
pub(crate) const A_FREE: u64 = 0;
pub(crate) const A_CLAIMING: u64 = 1;
pub(crate) const A_ACTIVE: u64 = 2;
pub(crate) const A_RECLAIMING: u64 = 3;

// Endpoint state word: seq (32) | op (8) | peer (24).
pub(crate) const OP_RUNNING: u8 = 0;
pub(crate) const OP_SENDING: u8 = 1;
pub(crate) const OP_SENDREC_SENDING: u8 = 2;
pub(crate) const OP_DELIVERED: u8 = 3;
pub(crate) const OP_RECEIVING: u8 = 4;
pub(crate) const OP_RECEIVING_REPLY: u8 = 5;
pub(crate) const OP_FILLING: u8 = 6;
pub(crate) const OP_FILLED: u8 = 7;
/// `Slot::sleeping`: the owner sleeps on its futex word.
pub(crate) const SLEEP_FUTEX: u32 = 1;
/// `Slot::sleeping`: the owner sleeps on its doorbell (see `bell.rs`).
pub(crate) const SLEEP_BELL: u32 = 2;
/// `Slot::sleeping`: the owner sleeps on its pipe doorbell.
pub(crate) const SLEEP_PIPE: u32 = 3;
/// `Slot::sleeping`: the owner waits for a reply in a hand-off trap (see `handoff.rs`).
pub(crate) const SLEEP_TRAP: u32 = 4;
/// Peer value meaning "any endpoint" in a receive state.
pub(crate) const PEER_ANY: u32 = 0xFF_FFFF;

#[inline]
pub(crate) fn st_make(seq: u32, op: u8, peer: u32) -> u64 {
    ((seq as u64) << 32) | ((op as u64) << 24) | (peer as u64 & 0xFF_FFFF)
}
#[inline]
pub(crate) fn st_seq(s: u64) -> u32 {
    (s >> 32) as u32
}
#[inline]
pub(crate) fn st_op(s: u64) -> u8 {
    (s >> 24) as u8
}
#[inline]
pub(crate) fn st_peer(s: u64) -> u32 {
    (s & 0xFF_FFFF) as u32
}

/// How an endpoint waits in blocking calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Spin briefly, then sleep on a futex (default).
    #[default]
    Adaptive,
    /// Only spin (lowest latency; burns a CPU while waiting).
    Spin,
    /// Sleep on a futex straight away (lowest CPU use).
    Block,
}

impl WaitMode {
    pub(crate) fn to_u32(self) -> u32 {
        match self {
            WaitMode::Adaptive => 0,
            WaitMode::Spin => 1,
            WaitMode::Block => 2,
        }
    }
    /// Decode the value stored in shared memory / used by the C API (0 adaptive, 1 spin, 2 block).
    pub fn from_u32(v: u32) -> Option<WaitMode> {
        match v {
            0 => Some(WaitMode::Adaptive),
            1 => Some(WaitMode::Spin),
            2 => Some(WaitMode::Block),
            _ => None,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Adaptive => "adaptive",
            WaitMode::Spin => "spin",
            WaitMode::Block => "block",
        }
    }
}

#[repr(C)]
pub(crate) struct Header {
    magic: AtomicU64,
    version: u32,
    max_endpoints: u32,
    tag: u32,
    slot_size: u32,
    max_copy: u64,
    generation: u64,
    created_unix: u64,
    creator_pid: u32,
    ended: AtomicU32,
    total_size: u64,
    name: [u8; 64],
    /// Offset of the arena chunk table (one u64 per chunk), page-aligned.
    arena_table_off: u64,
    /// Number of arena chunks (0: no arena).
    arena_chunks: u64,
    /// Offset of the arena itself, page-aligned.
    arena_off: u64,
}

/// One endpoint slot (9 cache lines). Fields other than atomics are only written by
/// whoever holds the right to (see the protocol in `endpoint.rs`).
#[repr(C, align(64))]
pub(crate) struct Slot {
    // Line 0: hot control words.
    pub(crate) state: AtomicU64,
    pub(crate) futex: AtomicU32,
    pub(crate) sleeping: AtomicU32,
    pub(crate) alloc: AtomicU64,
    pub(crate) gen: AtomicU32,
    pub(crate) wait_mode: AtomicU32,
    /// CPU the owner last waited on (adaptive waiting does not spin on a peer that shares
    /// our CPU: it could not make progress while we spin).
    pub(crate) cpu: AtomicU32,
    /// The owner thread's hand-off listener (a descriptor number in the owner's process;
    /// -1: none, -2: a replier could not reach it, so the owner does not trap).
    pub(crate) trap_fd: AtomicI32,
    /// Id of the owner's trap notification that a replier last received (for the owner's
    /// watchdog, should that replier not answer).
    pub(crate) trap_id: AtomicU64,
    /// Pid of the process that may receive the owner's trap notification now (0: none):
    /// a second receiver would block in the kernel until the owner's next trap.
    pub(crate) trap_claim: AtomicU32,
    _pad0: [u8; 12],
    // Line 1: written by a sender handing a message straight to this (receiving) endpoint.
    pub(crate) inbox: UnsafeCell<Message>,
    // Line 2: written by the owner before it publishes a SENDING state.
    pub(crate) outbox: UnsafeCell<Message>,
    // Lines 3-4: pending notifications, one bit per source slot.
    pub(crate) notify: [AtomicU64; BITMAP_WORDS],
    // Lines 5-6: senders blocked with a message for this endpoint in their outbox.
    pub(crate) senders: [AtomicU64; BITMAP_WORDS],
    // Line 7: owner identity.
    pub(crate) pid: AtomicU32,
    pub(crate) tid: AtomicU32,
    pub(crate) start: AtomicU64,
    pub(crate) bound_unix: AtomicU64,
    pub(crate) name: [AtomicU64; 5],
    // Line 8: counters (written by the owner only).
    pub(crate) c_sent: AtomicU64,
    pub(crate) c_received: AtomicU64,
    pub(crate) c_notify_sent: AtomicU64,
    pub(crate) c_notify_received: AtomicU64,
    pub(crate) c_copies: AtomicU64,
    pub(crate) c_bytes: AtomicU64,
    /// Where the owner's process maps the domain arena (0: no arena). Lets a `vcopy`
    /// caller translate the owner's arena addresses into its own mapping.
    pub(crate) arena_base: AtomicU64,
    /// The owner's doorbell eventfd (a descriptor number in the owner's process; -1: none
    /// yet, -2: a waker could not reach it, so the owner sleeps on the futex).
    pub(crate) bell_fd: AtomicI32,
    /// The write end of the owner's pipe doorbell (a descriptor number in the owner's
    /// process; -1: none yet).
    pub(crate) pipe_fd: AtomicI32,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 9 * 64);
const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_SIZE);

impl Slot {
    pub(crate) fn read_name(&self) -> String {
        let mut b = [0u8; 40];
        for (i, w) in self.name.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    }

    pub(crate) fn write_name(&self, name: &str) {
        let mut b = [0u8; 40];
        let n = name.len().min(39);
        b[..n].copy_from_slice(&name.as_bytes()[..n]);
        for (i, w) in self.name.iter().enumerate() {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i * 8..i * 8 + 8]);
            w.store(u64::from_le_bytes(x), Ordering::Relaxed);
        }
    }
}

/// Configuration of a new domain.
#[derive(Debug, Clone, Copy)]
pub struct DomainConfig {
    /// Number of endpoint slots (1..=1024).
    pub max_endpoints: u32,
    /// Largest `vcopy` in bytes.
    pub max_copy: u64,
    /// Size of the shared arena (see [`Domain::alloc`]), rounded up to 64 KiB chunks;
    /// 0 for none. It is address space in every process of the domain; memory is only
    /// used by allocated buffers.
    pub arena_size: u64,
}

impl Default for DomainConfig {
    fn default() -> Self {
        DomainConfig {
            max_endpoints: 64,
            max_copy: DEFAULT_MAX_COPY,
            arena_size: DEFAULT_ARENA_SIZE,
        }
    }
}

/// A domain file mapped into this process: the bytes every process of the domain shares,
/// and what names it. Unmapped when the last [`Mapping`] (or [`RawMapping`]) on it goes.
pub(crate) struct Region {
    base: *mut u8,
    len: usize,
    file: std::fs::File,
    name: String,
    path: PathBuf,
    ino: u64,
    dev: u64,
}

// SAFETY: the mapping is shared memory accessed only through atomics or under the
// ownership protocol of the slots; the raw pointer itself is immutable after creation.
unsafe impl Send for Region {}
// SAFETY: see above.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: base/len come from a successful mmap and nothing borrows the mapping any
        // more (every Mapping/RawMapping holding the Arc is gone).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// A domain as one process sees it: the region and the layout read from (and validated
/// in) its header when it was opened or created.
pub(crate) struct Mapping {
    /// `region.base`, kept here for the hot path.
    base: *mut u8,
    region: Arc<Region>,
    arena_table_off: usize,
    arena_chunks: usize,
    arena_off: usize,
    max: u32,
    tag: u32,
    max_copy: u64,
    nwords: usize,
}

// SAFETY: as for Region: `base` is the region's pointer, which the Arc keeps mapped.
unsafe impl Send for Mapping {}
// SAFETY: see above.
unsafe impl Sync for Mapping {}

/// A domain's file mapped once, for fuzzing the read side of [`Domain::open`] without its
/// system calls: the caller rewrites the bytes between opens (as another process could)
/// and [`RawMapping::open`] runs the same validation and construction as `Domain::open`.
/// Not part of the stable API.
#[doc(hidden)]
pub struct RawMapping {
    region: Arc<Region>,
}

impl RawMapping {
    /// Map the file of domain `name` as [`Domain::open`] does (no validation yet).
    pub fn map(name: &str) -> Result<RawMapping> {
        Ok(RawMapping {
            region: Arc::new(map_domain_file(name)?),
        })
    }

    /// Length of the mapping (the file's size when mapped).
    pub fn len(&self) -> usize {
        self.region.len
    }

    /// Is the mapping empty? (Never: a file shorter than the header is refused.)
    pub fn is_empty(&self) -> bool {
        self.region.len == 0
    }

    /// Overwrite the bytes at `off` with `data` by plain memory writes. Refused
    /// (`Error::Os(EBUSY)`) while a [`Domain`] opened from this mapping (or anything holding
    /// one) lives, and ([`Error::BadAddress`]) if the range is not inside the mapping.
    pub fn write_at(&mut self, off: usize, data: &[u8]) -> Result<()> {
        let len = self.region.len;
        let Some(r) = Arc::get_mut(&mut self.region) else {
            return Err(Error::Os(libc::EBUSY));
        };
        match off.checked_add(data.len()) {
            Some(end) if end <= len => {}
            _ => return Err(Error::BadAddress),
        }
        // SAFETY: [off, off + data.len()) lies inside the mapping (checked), which is
        // readable and writable; no reference into it exists in this process (the Arc is
        // unique, so no Domain, endpoint or buffer of it lives). Other processes that map
        // the file can only see torn bytes, as with any write to shared memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.base.add(off), data.len()) };
        Ok(())
    }

    /// Validate the mapping's bytes as a domain and open it: exactly what
    /// [`Domain::open`] does once the file is mapped.
    pub fn open(&self) -> Result<Domain> {
        Domain::from_region(self.region.clone())
    }
}

/// A handle on an IPC domain (cheap to clone; thread-safe).
///
/// ```
/// use ustack_ipc::{Domain, DomainConfig, Message, ANY};
/// let name = format!("doc-{}", std::process::id());
/// let dom = Domain::create(&name, DomainConfig::default()).unwrap();
/// let mut a = dom.bind("a").unwrap();
/// let mut b = dom.bind("b").unwrap();
/// a.notify(b.id()).unwrap();
/// let m = b.receive(ANY).unwrap();
/// assert!(m.is_notify());
/// assert_eq!(m.source, a.id());
/// dom.end().unwrap();
/// ```
#[derive(Clone)]
pub struct Domain {
    pub(crate) m: Arc<Mapping>,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("name", &self.m.region.name)
            .field("tag", &self.m.tag)
            .finish()
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.')
        && !name.starts_with('.')
}

fn path_of(name: &str) -> PathBuf {
    PathBuf::from(format!("{SHM_DIR}/{PREFIX}{name}"))
}

fn io_err(e: std::io::Error) -> Error {
    Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO))
}

fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let r = unsafe { libc::getrandom(&mut v as *mut u64 as *mut libc::c_void, 8, 0) };
    if r != 8 {
        v = sys::now_ns() ^ ((sys::getpid() as u64) << 32);
    }
    v
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn slots_offset() -> usize {
    HEADER_SIZE
}

fn page_up(n: usize) -> usize {
    (n + 4095) & !4095
}

fn total_size(max: u32) -> usize {
    page_up(HEADER_SIZE + max as usize * std::mem::size_of::<Slot>())
}

/// Layout after the slots: (chunk table offset, arena offset, file size).
fn arena_layout(max: u32, chunks: usize) -> (usize, usize, usize) {
    let table = total_size(max);
    if chunks == 0 {
        return (table, table, table);
    }
    let arena = page_up(table + chunks * 8);
    (table, arena, arena + chunks * ARENA_CHUNK)
}

/// What `Domain::create` does when a domain of that name already exists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Existing {
    /// Replace it if it is ended, corrupt or has no live endpoint; else `DomainExists`.
    ReplaceStale,
    /// Always fail with `DomainExists`.
    Fail,
}

impl Domain {
    /// Create a domain. If a domain of the same name exists but is stale (ended, corrupt,
    /// or without any live endpoint — e.g. left over by crashed processes), it is ended
    /// and replaced; if it has live endpoints, fails with [`Error::DomainExists`].
    pub fn create(name: &str, cfg: DomainConfig) -> Result<Domain> {
        Self::create_inner(name, cfg, Existing::ReplaceStale)
    }

    /// Open an existing domain, or create it if there is none (never replaces one).
    pub fn open_or_create(name: &str, cfg: DomainConfig) -> Result<Domain> {
        for _ in 0..8 {
            match Self::open(name) {
                Ok(d) => return Ok(d),
                Err(Error::NoSuchDomain) => {}
                Err(e) => return Err(e),
            }
            match Self::create_inner(name, cfg, Existing::Fail) {
                Ok(d) => return Ok(d),
                Err(Error::DomainExists) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::DomainExists)
    }

    fn create_inner(name: &str, cfg: DomainConfig, existing: Existing) -> Result<Domain> {
        if !valid_name(name)
            || cfg.max_endpoints == 0
            || cfg.max_endpoints > MAX_ENDPOINTS_LIMIT
            || cfg.max_copy == 0
            || cfg.arena_size > MAX_ARENA_SIZE
        {
            return Err(Error::InvalidArgument);
        }
        let chunks = (cfg.arena_size as usize).div_ceil(ARENA_CHUNK);
        let path = path_of(name);
        let tmp = PathBuf::from(format!(
            "{SHM_DIR}/.{PREFIX}{name}.{}.{}.tmp",
            sys::getpid(),
            random_u64() & 0xffff_ffff
        ));
        let (table_off, arena_off, len) = arena_layout(cfg.max_endpoints, chunks);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err)?;
        let cleanup = |e: Error| {
            let _ = std::fs::remove_file(&tmp);
            e
        };
        file.set_len(len as u64).map_err(io_err).map_err(cleanup)?;
        // Reserve the control part (header, slots, chunk table) so that touching it can
        // never raise SIGBUS on a full /dev/shm; arena pages are reserved per allocation.
        fallocate(&file, 0, arena_off).map_err(cleanup)?;
        let tag = Self::pick_tag(name);
        let r = map_file(file, len, name, &path).map_err(cleanup)?;
        // SAFETY: the mapping is fresh, private to us until published, zero-filled and at
        // least HEADER_SIZE bytes long; Header fits (checked at compile time).
        let h = unsafe { &mut *(r.base as *mut Header) };
        h.version = VERSION;
        h.max_endpoints = cfg.max_endpoints;
        h.tag = tag;
        h.slot_size = std::mem::size_of::<Slot>() as u32;
        h.max_copy = cfg.max_copy;
        h.generation = random_u64();
        h.created_unix = unix_now();
        h.creator_pid = sys::getpid();
        h.total_size = len as u64;
        h.arena_table_off = table_off as u64;
        h.arena_chunks = chunks as u64;
        h.arena_off = arena_off as u64;
        let n = name.len().min(63);
        h.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        h.magic.store(MAGIC, Ordering::Release);
        let m = Mapping {
            base: r.base,
            region: Arc::new(r),
            arena_table_off: table_off,
            arena_chunks: chunks,
            arena_off,
            max: cfg.max_endpoints,
            tag,
            max_copy: cfg.max_copy,
            nwords: (cfg.max_endpoints as usize).div_ceil(64),
        };
        // Publish atomically: link() fails if the name exists.
        loop {
            match std::fs::hard_link(&tmp, &path) {
                Ok(()) => break,
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    if existing == Existing::Fail {
                        return Err(cleanup(Error::DomainExists));
                    }
                    match Self::open(name) {
                        Ok(old) => {
                            if old.has_live_endpoints() {
                                return Err(cleanup(Error::DomainExists));
                            }
                            old.mark_ended();
                        }
                        Err(Error::NoSuchDomain) => continue,
                        Err(_) => {} // corrupt: replace
                    }
                    // Replace the stale one atomically.
                    std::fs::rename(&tmp, &path)
                        .map_err(io_err)
                        .map_err(cleanup)?;
                    break;
                }
                Err(e) => return Err(cleanup(io_err(e))),
            }
        }
        let _ = std::fs::remove_file(&tmp);
        Ok(Domain { m: Arc::new(m) })
    }

    /// Choose a 15-bit domain tag not used by another live domain.
    fn pick_tag(name: &str) -> u32 {
        let used: Vec<u32> = Self::list()
            .into_iter()
            .filter(|n| n != name)
            .filter_map(|n| Self::open(&n).ok().map(|d| d.m.tag))
            .collect();
        for _ in 0..64 {
            let t = (random_u64() % 0x7fff) as u32 + 1;
            if !used.contains(&t) {
                return t;
            }
        }
        (random_u64() % 0x7fff) as u32 + 1
    }

    /// Open an existing domain.
    pub fn open(name: &str) -> Result<Domain> {
        Self::from_region(Arc::new(map_domain_file(name)?))
    }

    /// Validate a mapped domain file (which any process may have written) and make the
    /// handle on it. The one place `open` (and the fuzzer, through [`RawMapping`])
    /// checks the header.
    fn from_region(r: Arc<Region>) -> Result<Domain> {
        let len = r.len;
        if len < HEADER_SIZE {
            return Err(Error::Corrupt);
        }
        // SAFETY: the mapping is at least HEADER_SIZE bytes (checked above); header fields
        // other than the atomics are written once before `magic` is published (and the
        // file is only visible under its name after that, see create).
        let h = unsafe { &*(r.base as *const Header) };
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.version != VERSION
            || h.slot_size as usize != std::mem::size_of::<Slot>()
            || h.max_endpoints == 0
            || h.max_endpoints > MAX_ENDPOINTS_LIMIT
            || total_size(h.max_endpoints) > len
            || h.tag == 0
            || h.tag > 0x7fff
            || h.arena_chunks > MAX_ARENA_SIZE / ARENA_CHUNK as u64
            || arena_layout(h.max_endpoints, h.arena_chunks as usize)
                != (
                    h.arena_table_off as usize,
                    h.arena_off as usize,
                    h.total_size as usize,
                )
            || (h.total_size as usize) > len
        {
            return Err(Error::Corrupt);
        }
        let m = Mapping {
            base: r.base,
            arena_table_off: h.arena_table_off as usize,
            arena_chunks: h.arena_chunks as usize,
            arena_off: h.arena_off as usize,
            max: h.max_endpoints,
            tag: h.tag,
            max_copy: h.max_copy,
            nwords: (h.max_endpoints as usize).div_ceil(64),
            region: r,
        };
        Ok(Domain { m: Arc::new(m) })
    }

    /// Names of all domains present in `/dev/shm`.
    pub fn list() -> Vec<String> {
        let mut v: Vec<String> = match std::fs::read_dir(SHM_DIR) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|s| s.strip_prefix(PREFIX))
                        .map(str::to_owned)
                })
                .filter(|n| valid_name(n))
                .collect(),
            Err(_) => Vec::new(),
        };
        v.sort();
        v
    }

    /// End a domain by name (see [`Domain::end`]).
    pub fn end_by_name(name: &str) -> Result<()> {
        match Self::open(name) {
            Ok(d) => d.end(),
            Err(Error::Corrupt) => std::fs::remove_file(path_of(name)).map_err(io_err),
            Err(e) => Err(e),
        }
    }

    /// End the domain: every blocked call in it returns [`Error::DomainEnded`], every later
    /// call fails, and the shared-memory object is removed (its memory is freed when the
    /// last process unmaps it).
    pub fn end(&self) -> Result<()> {
        self.mark_ended();
        // Only unlink the path if it is still our segment (not a newer domain of that name).
        if let Ok(md) = std::fs::metadata(&self.m.region.path) {
            if md.ino() == self.m.region.ino && md.dev() == self.m.region.dev {
                let _ = std::fs::remove_file(&self.m.region.path);
            }
        }
        Ok(())
    }

    fn mark_ended(&self) {
        self.header().ended.store(1, Ordering::SeqCst);
        for i in 0..self.m.max {
            self.wake_slot(i);
        }
    }

    /// Wake slot `i`'s owner if it sleeps: bump the futex word (always; this is what makes
    /// a concurrent sleep return), then, if it announced sleeping (and no other waker has
    /// woken this sleep yet), FUTEX_WAKE or ring its doorbell. For rare wake-ups; the
    /// endpoints' hot path caches doorbells (`Endpoint::wake_peer`).
    pub(crate) fn wake_slot(&self, i: u32) {
        let s = self.slot(i);
        s.futex.fetch_add(1, Ordering::SeqCst);
        match s.sleeping.swap(0, Ordering::SeqCst) {
            0 => {}
            v => match crate::bell::Kind::of_sleeping(v) {
                // If that fails the owner's watchdog sees the changed word and rings.
                Some(k) => {
                    crate::bell::ring_slot(self, i, s.gen.load(Ordering::Acquire), k);
                }
                None => sys::futex_wake_taken(&s.futex),
            },
        }
    }

    /// The shared-memory file of this domain (under `/dev/shm`).
    pub fn path(&self) -> &std::path::Path {
        &self.m.region.path
    }

    /// Has the domain been ended?
    pub fn is_ended(&self) -> bool {
        self.header().ended.load(Ordering::Acquire) != 0
    }

    /// Name of the domain.
    pub fn name(&self) -> &str {
        &self.m.region.name
    }

    /// The 15-bit tag that prefixes this domain's endpoint numbers.
    pub fn tag(&self) -> u32 {
        self.m.tag
    }

    /// Number of endpoint slots.
    pub fn max_endpoints(&self) -> u32 {
        self.m.max
    }

    /// Largest `vcopy`, bytes.
    pub fn max_copy(&self) -> u64 {
        self.m.max_copy
    }

    /// Endpoint number of slot `slot` in this domain.
    pub fn endpoint_of_slot(&self, slot: u32) -> i32 {
        ((self.m.tag << 16) | slot) as i32
    }

    pub(crate) fn nwords(&self) -> usize {
        self.m.nwords
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping is valid for the lifetime of `self.m` and starts with a Header.
        unsafe { &*(self.m.base as *const Header) }
    }

    /// Slot `i`; callers guarantee `i < max_endpoints` (checked by `resolve`).
    pub(crate) fn slot(&self, i: u32) -> &Slot {
        let i = i.min(self.m.max - 1) as usize;
        // SAFETY: the mapping holds `max` slots after the header (validated at open/create),
        // `i` is clamped into range, and Slot is 64-byte aligned at a page-aligned offset.
        unsafe {
            &*(self
                .m
                .base
                .add(slots_offset() + i * std::mem::size_of::<Slot>())
                as *const Slot)
        }
    }

    /// Map an endpoint number to a slot index of this domain.
    pub(crate) fn resolve(&self, ep: i32) -> Result<u32> {
        if ep < 0 {
            return Err(Error::BadEndpoint);
        }
        let tag = (ep as u32) >> 16;
        if tag != 0 && tag != self.m.tag {
            return Err(Error::NotSameDomain);
        }
        let slot = (ep as u32) & 0xffff;
        if slot >= self.m.max {
            return Err(Error::BadEndpoint);
        }
        Ok(slot)
    }

    /// Is endpoint `ep` of this domain bound by a live owner (false for a
    /// number that names no slot)? A server uses it to let go at once of
    /// what a client that died held. The slot may have been taken again by
    /// another live owner since; callers that must tell them apart keep a
    /// deadline as well.
    pub fn endpoint_alive(&self, ep: i32) -> bool {
        self.resolve(ep).is_ok_and(|i| self.slot_alive(i))
    }

    /// Is any slot bound by a live owner?
    pub fn has_live_endpoints(&self) -> bool {
        (0..self.m.max).any(|i| self.slot_alive(i))
    }

    /// Is slot `i` bound (active) by an owner that still runs?
    fn slot_alive(&self, i: u32) -> bool {
        let s = self.slot(i);
        (s.alloc.load(Ordering::Acquire) & 0xff) == A_ACTIVE
            && sys::owner_alive(
                s.pid.load(Ordering::Relaxed),
                s.tid.load(Ordering::Relaxed),
                s.start.load(Ordering::Relaxed),
            )
    }

    /// Free the slots whose owner died without unbinding (and slots stuck half-claimed by a
    /// dead process). Returns how many were reclaimed. Bind does this lazily too.
    pub fn reclaim_dead(&self) -> usize {
        let n = (0..self.m.max).filter(|&i| self.reclaim_if_dead(i)).count();
        self.reclaim_arena();
        n
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.m.base
    }

    /// (offset of the chunk table, number of chunks).
    pub(crate) fn arena_table(&self) -> (usize, usize) {
        (self.m.arena_table_off, self.m.arena_chunks)
    }

    /// Address of the arena in this process (0 if the domain has none).
    pub(crate) fn arena_base(&self) -> usize {
        if self.m.arena_chunks == 0 {
            0
        } else {
            self.m.base as usize + self.m.arena_off
        }
    }

    /// Allocate the pages of `[off, off+len)` of the arena in /dev/shm.
    pub(crate) fn reserve_pages(&self, off: usize, len: usize) -> Result<()> {
        fallocate(&self.m.region.file, self.m.arena_off + off, len)
    }

    /// Return the pages of `[off, off+len)` of the arena to the system (best effort).
    pub(crate) fn release_pages(&self, off: usize, len: usize) {
        use std::os::fd::AsRawFd;
        // SAFETY: fallocate on our own descriptor; punching a hole only affects the file.
        unsafe {
            libc::fallocate(
                self.m.region.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (self.m.arena_off + off) as libc::off_t,
                len as libc::off_t,
            )
        };
    }

    /// Reclaim slot `i` if its owner is dead. Returns true if it was reclaimed.
    pub(crate) fn reclaim_if_dead(&self, i: u32) -> bool {
        let s = self.slot(i);
        let a = s.alloc.load(Ordering::Acquire);
        let dead = match a & 0xff {
            A_ACTIVE => !sys::owner_alive(
                s.pid.load(Ordering::Relaxed),
                s.tid.load(Ordering::Relaxed),
                s.start.load(Ordering::Relaxed),
            ),
            A_CLAIMING | A_RECLAIMING => !sys::pid_running((a >> 32) as u32),
            _ => false,
        };
        if !dead {
            return false;
        }
        let me = ((sys::getpid() as u64) << 32) | A_RECLAIMING;
        if s.alloc
            .compare_exchange(a, me, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.release_slot(i);
        true
    }

    /// Clear a slot we hold in CLAIMING/RECLAIMING (or own) and mark it free; wake everyone
    /// so peers blocked on it notice at once.
    pub(crate) fn release_slot(&self, i: u32) {
        let s = self.slot(i);
        let seq = st_seq(s.state.load(Ordering::Acquire)).wrapping_add(1);
        s.state.store(st_make(seq, OP_RUNNING, 0), Ordering::SeqCst);
        for w in s.notify.iter().chain(s.senders.iter()) {
            w.store(0, Ordering::Relaxed);
        }
        s.pid.store(0, Ordering::Relaxed);
        s.tid.store(0, Ordering::Relaxed);
        s.gen.fetch_add(1, Ordering::SeqCst);
        s.bell_fd.store(-1, Ordering::Release);
        s.pipe_fd.store(-1, Ordering::Release);
        s.trap_fd.store(-1, Ordering::Release);
        s.trap_claim.store(0, Ordering::Release);
        s.alloc.store(A_FREE, Ordering::SeqCst);
        for j in 0..self.m.max {
            if j != i && (self.slot(j).alloc.load(Ordering::Relaxed) & 0xff) == A_ACTIVE {
                self.wake_slot(j);
            }
        }
    }

    /// Bind the calling thread to a new endpoint of this domain (any free slot).
    pub fn bind(&self, name: &str) -> Result<crate::Endpoint> {
        self.bind_inner(None, name)
    }

    /// Bind the calling thread to a specific endpoint (slot number `0..max_endpoints`, or a
    /// full endpoint number of this domain). Fails with [`Error::EndpointInUse`] if a live
    /// owner holds it (a dead owner's slot is reclaimed).
    pub fn bind_as(&self, endpoint: i32, name: &str) -> Result<crate::Endpoint> {
        let slot = self.resolve(endpoint)?;
        self.bind_inner(Some(slot), name)
    }

    fn bind_inner(&self, want: Option<u32>, name: &str) -> Result<crate::Endpoint> {
        if self.is_ended() {
            return Err(Error::DomainEnded);
        }
        let pid = sys::getpid();
        let tid = sys::gettid();
        let start = sys::proc_start_time(pid)
            .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let claim = ((pid as u64) << 32) | A_CLAIMING;
        let try_claim = |i: u32| -> bool {
            let s = self.slot(i);
            let a = s.alloc.load(Ordering::Acquire);
            a & 0xff == A_FREE
                && s.alloc
                    .compare_exchange(a, claim, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
        };
        let slot = match want {
            Some(i) => {
                if try_claim(i) || (self.reclaim_if_dead(i) && try_claim(i)) {
                    i
                } else {
                    return Err(Error::EndpointInUse);
                }
            }
            None => {
                let mut found = (0..self.m.max).find(|&i| try_claim(i));
                if found.is_none() {
                    found = (0..self.m.max).find(|&i| self.reclaim_if_dead(i) && try_claim(i));
                }
                found.ok_or(Error::DomainFull)?
            }
        };
        let s = self.slot(slot);
        for w in s.notify.iter().chain(s.senders.iter()) {
            w.store(0, Ordering::Relaxed);
        }
        for c in [
            &s.c_sent,
            &s.c_received,
            &s.c_notify_sent,
            &s.c_notify_received,
            &s.c_copies,
            &s.c_bytes,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        s.pid.store(pid, Ordering::Relaxed);
        s.tid.store(tid, Ordering::Relaxed);
        s.start.store(start, Ordering::Relaxed);
        s.bound_unix.store(unix_now(), Ordering::Relaxed);
        s.wait_mode
            .store(WaitMode::Adaptive.to_u32(), Ordering::Relaxed);
        s.sleeping.store(0, Ordering::Relaxed);
        s.arena_base
            .store(self.arena_base() as u64, Ordering::Relaxed);
        s.bell_fd.store(-1, Ordering::Relaxed);
        s.pipe_fd.store(-1, Ordering::Relaxed);
        s.trap_fd.store(-1, Ordering::Relaxed);
        s.trap_claim.store(0, Ordering::Relaxed);
        s.write_name(name);
        let seq = st_seq(s.state.load(Ordering::Acquire)).wrapping_add(1);
        s.state.store(st_make(seq, OP_RUNNING, 0), Ordering::SeqCst);
        let gen = s.gen.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        s.alloc
            .store(((pid as u64) << 32) | A_ACTIVE, Ordering::SeqCst);
        Ok(crate::endpoint::Endpoint::new(self.clone(), slot, gen, seq))
    }
}

/// Allocate `[off, off+len)` of a /dev/shm file (ENOSPC if tmpfs is full).
fn fallocate(file: &std::fs::File, off: usize, len: usize) -> Result<()> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: fallocate on a descriptor we own; no memory is passed.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, off as libc::off_t, len as libc::off_t) };
    if r != 0 {
        let e = Error::last_os();
        // A file system without fallocate: fall back to lazily allocated pages.
        if e == Error::Os(libc::EOPNOTSUPP) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

/// Open and map the file of domain `name` (read-write, shared), as `Domain::open` does
/// before it validates the contents.
fn map_domain_file(name: &str) -> Result<Region> {
    if !valid_name(name) {
        return Err(Error::InvalidArgument);
    }
    let path = path_of(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len() as usize;
    if len < HEADER_SIZE {
        return Err(Error::Corrupt);
    }
    map_file(file, len, name, &path)
}

fn map_file(file: std::fs::File, len: usize, name: &str, path: &std::path::Path) -> Result<Region> {
    use std::os::fd::AsRawFd;
    let md = file.metadata().map_err(io_err)?;
    // SAFETY: mapping `len` bytes of a regular file we opened read-write, shared so that
    // every process sees the same memory; the result is checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os());
    }
    Ok(Region {
        base: p as *mut u8,
        len,
        file,
        name: name.to_owned(),
        path: path.to_owned(),
        ino: md.ino(),
        dev: md.dev(),
    })
}
