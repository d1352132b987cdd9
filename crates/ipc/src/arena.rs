//! The domain arena: shared memory that every process of a domain maps, handed out in
//! 64 KiB chunks. A `vcopy` whose source and destination both lie in arena buffers is a
//! plain `memcpy` by the caller (one copy, no system call); anywhere else it is done by
//! the kernel with `process_vm_readv`/`writev`.
//!
//! The chunk table is one 64-bit word per chunk: 0 = free, otherwise `pid << 32 | n`,
//! where `n` is the run length on the first chunk of an allocation and 0 on the others.
//! Allocation claims a run chunk by chunk with compare-and-swap (rolling back on a lost
//! race), so there is no lock a crashed process could leave held; chunks whose owner
//! process is gone are reclaimed when an allocation finds no room, and by
//! [`Domain::reclaim_dead`].

use crate::domain::Domain;
use crate::error::{Error, Result};
use crate::sys;
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of one arena chunk (the allocation granule and alignment).
pub const ARENA_CHUNK: usize = 64 << 10;
/// Default arena size of a new domain (virtual; pages are allocated as buffers are).
pub const DEFAULT_ARENA_SIZE: u64 = 64 << 20;
/// Largest arena a domain may have.
pub const MAX_ARENA_SIZE: u64 = 16 << 30;

fn entry_pid(e: u64) -> u32 {
    (e >> 32) as u32
}

/// A buffer in the domain's arena, mapped in every process of the domain.
///
/// Pass [`ArenaBuf::addr`] to a peer (in a message); a `vcopy` between two arena buffers,
/// in any processes of the domain, is one `memcpy`. The buffer is freed when dropped
/// (only by the process that allocated it: a `fork`ed child that drops an inherited
/// handle does not free the parent's buffer), and when its process dies.
///
/// ```
/// use ustack_ipc::{Domain, DomainConfig};
/// let dom = Domain::create(&format!("doc-arena-{}", std::process::id()), DomainConfig::default()).unwrap();
/// let mut a = dom.bind("a").unwrap();
/// let b = dom.bind("b").unwrap();
/// let mut src = dom.alloc(100_000).unwrap();
/// let dst = dom.alloc(100_000).unwrap();
/// src.write_at(0, b"hello").unwrap();
/// a.vcopy(a.id(), src.addr(), b.id(), dst.addr(), 5).unwrap();
/// let mut out = [0u8; 5];
/// dst.read_at(0, &mut out).unwrap();
/// assert_eq!(&out, b"hello");
/// dom.end().unwrap();
/// ```
pub struct ArenaBuf {
    dom: Domain,
    first: u32,
    chunks: u32,
    len: usize,
    pid: u32,
}

impl std::fmt::Debug for ArenaBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaBuf")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("chunks", &self.chunks)
            .finish()
    }
}

impl ArenaBuf {
    /// Requested length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Is the requested length 0? (Never: `alloc(0)` is refused.)
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Process that allocated the buffer (only it frees it).
    pub fn owner_pid(&self) -> u32 {
        self.pid
    }

    /// Usable size: the length rounded up to whole chunks.
    pub fn capacity(&self) -> usize {
        self.chunks as usize * ARENA_CHUNK
    }

    /// Address of the buffer in this process (what a peer passes to `vcopy` for it).
    pub fn addr(&self) -> usize {
        self.dom.arena_base() + self.first as usize * ARENA_CHUNK
    }

    /// Offset of the buffer from the start of the arena: the same in every process of
    /// the domain (a peer finds the bytes with [`Domain::arena_range`]).
    pub fn arena_offset(&self) -> usize {
        self.first as usize * ARENA_CHUNK
    }

    /// Raw pointer to the first byte (valid for `capacity()` bytes while `self` lives).
    pub fn as_ptr(&self) -> *const u8 {
        self.addr() as *const u8
    }

    /// Raw mutable pointer to the first byte (valid for `capacity()` bytes while `self`
    /// lives).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.addr() as *mut u8
    }

    fn check(&self, off: usize, n: usize) -> Result<()> {
        match off.checked_add(n) {
            Some(end) if end <= self.capacity() => Ok(()),
            _ => Err(Error::BadAddress),
        }
    }

    /// Copy `data` into the buffer at `off` ([`Error::BadAddress`] if it does not fit).
    pub fn write_at(&mut self, off: usize, data: &[u8]) -> Result<()> {
        self.check(off, data.len())?;
        // SAFETY: [off, off+len) is inside this buffer's chunks (checked), which stay
        // mapped while `self.dom` lives; `data` cannot overlap shared memory we hand out
        // only as raw pointers. Other processes writing concurrently can only make the
        // bytes torn, as with any shared memory.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_mut_ptr().add(off), data.len())
        };
        Ok(())
    }

    /// Fill `n` bytes at `off` with `byte`.
    pub fn fill(&mut self, off: usize, n: usize, byte: u8) -> Result<()> {
        self.check(off, n)?;
        // SAFETY: in bounds (checked); see `write_at`.
        unsafe { std::ptr::write_bytes(self.as_mut_ptr().add(off), byte, n) };
        Ok(())
    }

    /// Copy bytes at `off` out of the buffer into `out`.
    pub fn read_at(&self, off: usize, out: &mut [u8]) -> Result<()> {
        self.check(off, out.len())?;
        // SAFETY: in bounds (checked); `out` is our own private memory.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(off), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// The buffer as a byte slice of `len()` bytes.
    ///
    /// # Safety
    /// No other process or thread may write into the buffer (e.g. by `vcopy` into it)
    /// while the slice is alive.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: in bounds and mapped; exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// The buffer as a mutable byte slice of `len()` bytes.
    ///
    /// # Safety
    /// No other process or thread may read or write the buffer while the slice is alive.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: in bounds and mapped; exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.len) }
    }
}

impl Drop for ArenaBuf {
    fn drop(&mut self) {
        if self.pid == sys::getpid() {
            self.dom.arena_free(self.first, self.chunks, self.pid);
        }
    }
}

impl Domain {
    fn table(&self) -> &[AtomicU64] {
        let (off, n) = self.arena_table();
        if n == 0 {
            return &[];
        }
        // SAFETY: the table lies inside the mapping (validated at open/create), is 8-byte
        // aligned (page-aligned offset) and is only accessed atomically.
        unsafe { std::slice::from_raw_parts(self.base().add(off) as *const AtomicU64, n) }
    }

    /// Size of the domain's arena in bytes (0: the domain has none).
    pub fn arena_size(&self) -> usize {
        self.arena_table().1 * ARENA_CHUNK
    }

    /// This process's address of `[off, off+len)` of the arena (an offset a peer got
    /// from [`ArenaBuf::arena_offset`]), if the range lies inside the arena. The memory
    /// stays mapped while the domain handle lives, whoever allocated or freed it: a
    /// reader must treat its bytes as written concurrently by other processes.
    pub fn arena_range(&self, off: usize, len: usize) -> Option<std::ptr::NonNull<u8>> {
        if off.checked_add(len)? > self.arena_size() || len == 0 {
            return None;
        }
        std::ptr::NonNull::new((self.arena_base() + off) as *mut u8)
    }

    /// Bytes of the arena currently allocated (whole chunks).
    pub fn arena_used(&self) -> usize {
        self.table()
            .iter()
            .filter(|e| e.load(Ordering::Relaxed) != 0)
            .count()
            * ARENA_CHUNK
    }

    /// Allocate `len` bytes (rounded up to 64 KiB chunks) in the domain's arena, mapped in
    /// every process of the domain. `vcopy` between two arena buffers is one `memcpy`.
    ///
    /// Errors: [`Error::InvalidArgument`] for 0 bytes, [`Error::TooLarge`] if `len` exceeds
    /// the arena, [`Error::ArenaFull`] if there is no free run that large,
    /// [`Error::DomainEnded`], or `Os(ENOSPC)` if `/dev/shm` has no room for the pages.
    pub fn alloc(&self, len: usize) -> Result<ArenaBuf> {
        if self.is_ended() {
            return Err(Error::DomainEnded);
        }
        if len == 0 {
            return Err(Error::InvalidArgument);
        }
        if len > self.arena_size() {
            return Err(Error::TooLarge);
        }
        let need = len.div_ceil(ARENA_CHUNK);
        let pid = sys::getpid();
        let first = match self.claim_run(need, pid) {
            Some(i) => i,
            None => {
                if self.reclaim_arena() == 0 {
                    return Err(Error::ArenaFull);
                }
                self.claim_run(need, pid).ok_or(Error::ArenaFull)?
            }
        };
        // Reserve the pages in /dev/shm now, so that touching them can never raise SIGBUS
        // on a full tmpfs.
        if let Err(e) = self.reserve_pages(first * ARENA_CHUNK, need * ARENA_CHUNK) {
            self.arena_free(first as u32, need as u32, pid);
            return Err(e);
        }
        Ok(ArenaBuf {
            dom: self.clone(),
            first: first as u32,
            chunks: need as u32,
            len,
            pid,
        })
    }

    /// Claim `need` consecutive free chunks for `pid`; returns the first.
    fn claim_run(&self, need: usize, pid: u32) -> Option<usize> {
        let t = self.table();
        let mark = (pid as u64) << 32;
        let mut i = 0;
        while i + need <= t.len() {
            if let Some(j) = (i..i + need).find(|&j| t[j].load(Ordering::Relaxed) != 0) {
                i = j + 1;
                continue;
            }
            let run = &t[i..i + need];
            match run.iter().position(|e| {
                e.compare_exchange(0, mark, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            }) {
                Some(lost) => {
                    // Another allocator took chunk i+lost: give back what we claimed.
                    for e in &run[..lost] {
                        e.store(0, Ordering::Release);
                    }
                    i += lost + 1;
                }
                None => {
                    run[0].store(mark | need as u64, Ordering::Release);
                    return Some(i);
                }
            }
        }
        None
    }

    pub(crate) fn arena_free(&self, first: u32, chunks: u32, pid: u32) {
        let t = self.table();
        let (first, chunks) = (first as usize, chunks as usize);
        if first + chunks > t.len() || entry_pid(t[first].load(Ordering::Acquire)) != pid {
            return;
        }
        // Give the memory back to the system; the next user gets zeroed pages.
        // Not once the domain has ended: nobody allocates any more, its file's
        // pages go when the last process unmaps them, and a peer may still be
        // reading this buffer (a capture reader draining the ring of a stack
        // that is exiting would copy zeros).
        if !self.is_ended() {
            self.release_pages(first * ARENA_CHUNK, chunks * ARENA_CHUNK);
        }
        for e in t[first..first + chunks].iter().rev() {
            let _ = e.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
                (entry_pid(v) == pid).then_some(0)
            });
        }
    }

    /// Free the chunks of processes that are gone. Returns how many chunks were freed.
    pub(crate) fn reclaim_arena(&self) -> usize {
        let t = self.table();
        let mut freed = 0;
        let mut checked: Vec<(u32, bool)> = Vec::new();
        for (i, e) in t.iter().enumerate() {
            let v = e.load(Ordering::Acquire);
            if v == 0 {
                continue;
            }
            let pid = entry_pid(v);
            let alive = match checked.iter().find(|(p, _)| *p == pid) {
                Some(&(_, a)) => a,
                None => {
                    let a = sys::pid_running(pid);
                    checked.push((pid, a));
                    a
                }
            };
            if !alive
                && e.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.release_pages(i * ARENA_CHUNK, ARENA_CHUNK);
                freed += 1;
            }
        }
        freed
    }

    /// Is `[addr, addr+len)` (an address in the process of the endpoint whose arena
    /// mapping starts at `base`) inside the arena? Returns the same bytes' address in
    /// this process's mapping.
    pub(crate) fn arena_translate(&self, base: usize, addr: usize, len: usize) -> Option<usize> {
        let size = self.arena_size();
        if size == 0 || base == 0 {
            return None;
        }
        let off = addr.checked_sub(base)?;
        if off.checked_add(len)? > size {
            return None;
        }
        Some(self.arena_base() + off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DomainConfig;

    #[test]
    fn translate_only_ranges_inside_the_arena() {
        let name = format!("u-arena-tr-{}", std::process::id());
        let cfg = DomainConfig {
            arena_size: 1 << 20,
            ..DomainConfig::default()
        };
        let d = Domain::create(&name, cfg).unwrap();
        let mine = d.arena_base();
        let size = d.arena_size();
        // A peer that maps the arena at `base`.
        let base = 0x7000_0000_0000usize;
        assert_eq!(d.arena_translate(base, base, size), Some(mine));
        assert_eq!(
            d.arena_translate(base, base + size - 10, 10),
            Some(mine + size - 10)
        );
        assert_eq!(d.arena_translate(base, base + size - 10, 11), None);
        assert_eq!(d.arena_translate(base, base - 1, 2), None);
        assert_eq!(d.arena_translate(base, usize::MAX - 4, 4), None);
        assert_eq!(d.arena_translate(0, 16, 4), None, "peer without an arena");
        // Offsets are the same in every process; ranges outside the arena are refused.
        let b = d.alloc(100).unwrap();
        assert_eq!(
            d.arena_range(b.arena_offset(), 100)
                .map(|p| p.as_ptr() as usize),
            Some(b.addr())
        );
        assert!(d.arena_range(size - 8, 8).is_some());
        assert!(d.arena_range(size - 8, 9).is_none());
        assert!(d.arena_range(usize::MAX, 2).is_none());
        assert!(d.arena_range(0, 0).is_none());
        drop(b);
        d.end().unwrap();
    }
}
