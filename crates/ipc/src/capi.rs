//! C API with the M3-IPC names (`include/mnx.h`). Each thread binds its own endpoint
//! (`mnx_bind`), which the other calls then use implicitly. All functions return 0 (or a
//! non-negative endpoint number) on success and a negative `MNX_E*` code on error.

use crate::{ArenaBuf, Domain, DomainConfig, Endpoint, Error, Message, WaitMode};
use std::cell::RefCell;
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

thread_local! {
    /// The calling thread's endpoint, with the pid that bound it (after `fork` the child
    /// inherits the parent's thread-local value, which then does not belong to it).
    static EP: RefCell<Option<(u32, Endpoint)>> = const { RefCell::new(None) };
}

/// Forget an endpoint inherited through `fork` (it is the parent's; dropping it in the
/// child does not unbind the parent's slot because the owner pid differs).
fn forget_inherited(slot: &mut Option<(u32, Endpoint)>) {
    if matches!(slot, Some((pid, _)) if *pid != std::process::id()) {
        *slot = None;
    }
}

fn code(r: crate::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.code(),
    }
}

fn with_ep(f: impl FnOnce(&mut Endpoint) -> crate::Result<()>) -> c_int {
    EP.with(|c| {
        let mut b = c.borrow_mut();
        forget_inherited(&mut b);
        match b.as_mut() {
            Some((_, ep)) => code(f(ep)),
            None => Error::BadEndpoint.code(),
        }
    })
}

fn name_of<'a>(name: *const c_char) -> crate::Result<&'a str> {
    if name.is_null() {
        return Err(Error::InvalidArgument);
    }
    // SAFETY: the caller passes a NUL-terminated string (checked non-null above) that stays
    // valid for the duration of the call.
    unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Error::InvalidArgument)
}

/// Timeout argument of the `_T` variants: < 0 = forever, 0 = non-blocking, > 0 = milliseconds.
enum Tmo {
    Forever,
    Now,
    Ms(u64),
}
fn tmo(ms: c_long) -> Tmo {
    match ms {
        x if x < 0 => Tmo::Forever,
        0 => Tmo::Now,
        x => Tmo::Ms(x as u64),
    }
}

/// Create (or re-create, if stale) domain `name` with `max_endpoints` slots.
#[no_mangle]
pub extern "C" fn mnx_dc_init(name: *const c_char, max_endpoints: c_int) -> c_int {
    let r = name_of(name).and_then(|n| {
        let max = u32::try_from(max_endpoints).map_err(|_| Error::InvalidArgument)?;
        Domain::create(
            n,
            DomainConfig {
                max_endpoints: max,
                ..DomainConfig::default()
            },
        )
        .map(|_| ())
    });
    code(r)
}

/// End domain `name`: blocked calls in it fail with `MNX_EDCENDED`.
#[no_mangle]
pub extern "C" fn mnx_dc_end(name: *const c_char) -> c_int {
    code(name_of(name).and_then(Domain::end_by_name))
}

/// Bind the calling thread to domain `name`, at endpoint (slot) `endpoint`, or any free one
/// if `endpoint` is `MNX_ANY`. Returns the endpoint number. A thread holds one endpoint.
#[no_mangle]
pub extern "C" fn mnx_bind(name: *const c_char, endpoint: c_int) -> c_int {
    let r = name_of(name).and_then(|n| {
        if EP.with(|c| {
            let mut b = c.borrow_mut();
            forget_inherited(&mut b);
            b.is_some()
        }) {
            return Err(Error::EndpointInUse);
        }
        let d = Domain::open(n)?;
        let ep = if endpoint < 0 {
            d.bind("c")?
        } else {
            d.bind_as(endpoint, "c")?
        };
        let id = ep.id();
        EP.with(|c| *c.borrow_mut() = Some((std::process::id(), ep)));
        Ok(id)
    });
    match r {
        Ok(id) => id,
        Err(e) => e.code(),
    }
}

/// Unbind the calling thread's endpoint (`endpoint` must be its number, or `MNX_ANY`).
#[no_mangle]
pub extern "C" fn mnx_unbind(endpoint: c_int) -> c_int {
    EP.with(|c| {
        let mut b = c.borrow_mut();
        forget_inherited(&mut b);
        match b.as_ref() {
            Some((_, ep)) if endpoint < 0 || ep.id() == endpoint => {
                *b = None;
                0
            }
            _ => Error::BadEndpoint.code(),
        }
    })
}

/// Endpoint number of the calling thread (or `MNX_EBADEP` if unbound).
#[no_mangle]
pub extern "C" fn mnx_getep() -> c_int {
    EP.with(|c| {
        let mut b = c.borrow_mut();
        forget_inherited(&mut b);
        b.as_ref()
            .map(|(_, e)| e.id())
            .unwrap_or(Error::BadEndpoint.code())
    })
}

/// Select the wait mode of the calling thread's endpoint (0 adaptive, 1 spin, 2 block).
#[no_mangle]
pub extern "C" fn mnx_set_waitmode(mode: c_int) -> c_int {
    let Some(m) = u32::try_from(mode).ok().and_then(WaitMode::from_u32) else {
        return Error::InvalidArgument.code();
    };
    with_ep(|e| {
        e.set_wait_mode(m);
        Ok(())
    })
}

/// Hand-off replies for the calling thread's endpoint in block mode (`on` non-zero; see
/// `Endpoint::set_handoff`). Returns 1 if this thread can hand off, 0 if not (it then
/// keeps using its doorbells), or a negative error.
#[no_mangle]
pub extern "C" fn mnx_set_handoff(on: c_int) -> c_int {
    let mut can = false;
    let r = with_ep(|e| {
        can = e.set_handoff(on != 0);
        Ok(())
    });
    if r < 0 {
        r
    } else {
        c_int::from(can)
    }
}

fn msg_in(m: *const Message) -> crate::Result<Message> {
    if m.is_null() {
        return Err(Error::InvalidArgument);
    }
    // SAFETY: non-null pointer to a caller-owned mnx_message_t (same layout as Message);
    // read_unaligned tolerates callers that did not honour the 64-byte alignment.
    Ok(unsafe { std::ptr::read_unaligned(m) })
}

fn msg_out(m: *mut Message, v: Message) {
    // SAFETY: checked non-null by the caller of this helper; caller-owned writable message.
    unsafe { std::ptr::write_unaligned(m, v) }
}

/// Send `*m` to `dst`, blocking until it is received.
#[no_mangle]
pub extern "C" fn mnx_send(dst: c_int, m: *const Message) -> c_int {
    mnx_send_T(dst, m, -1)
}

/// Send with a timeout in ms (< 0 forever, 0 non-blocking).
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn mnx_send_T(dst: c_int, m: *const Message, timeout_ms: c_long) -> c_int {
    with_ep(|e| {
        let msg = msg_in(m)?;
        match tmo(timeout_ms) {
            Tmo::Forever => e.send(dst, &msg),
            Tmo::Now => e.try_send(dst, &msg),
            Tmo::Ms(ms) => e.send_timeout(dst, &msg, Duration::from_millis(ms)),
        }
    })
}

/// Receive a message from `src` (or `MNX_ANY`) into `*m`.
#[no_mangle]
pub extern "C" fn mnx_receive(src: c_int, m: *mut Message) -> c_int {
    mnx_receive_T(src, m, -1)
}

/// Receive with a timeout in ms (< 0 forever, 0 non-blocking).
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn mnx_receive_T(src: c_int, m: *mut Message, timeout_ms: c_long) -> c_int {
    with_ep(|e| {
        if m.is_null() {
            return Err(Error::InvalidArgument);
        }
        let r = match tmo(timeout_ms) {
            Tmo::Forever => e.receive(src),
            Tmo::Now => e.try_receive(src),
            Tmo::Ms(ms) => e.receive_timeout(src, Duration::from_millis(ms)),
        }?;
        msg_out(m, r);
        Ok(())
    })
}

/// Send `*m` to `dst` and wait for the reply, which overwrites `*m`.
#[no_mangle]
pub extern "C" fn mnx_sendrec(dst: c_int, m: *mut Message) -> c_int {
    mnx_sendrec_T(dst, m, -1)
}

/// `mnx_sendrec` with a timeout in ms covering send and reply (< 0 forever, 0 = the send
/// part is non-blocking).
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn mnx_sendrec_T(dst: c_int, m: *mut Message, timeout_ms: c_long) -> c_int {
    with_ep(|e| {
        let msg = msg_in(m)?;
        let r = match tmo(timeout_ms) {
            Tmo::Forever => e.sendrec(dst, &msg),
            Tmo::Now => e.try_sendrec(dst, &msg),
            Tmo::Ms(ms) => e.sendrec_timeout(dst, &msg, Duration::from_millis(ms)),
        }?;
        msg_out(m, r);
        Ok(())
    })
}

/// Post a notification to `dst` (never blocks).
#[no_mangle]
pub extern "C" fn mnx_notify(dst: c_int) -> c_int {
    with_ep(|e| e.notify(dst))
}

/// Copy `len` bytes from `src_addr` in `src_ep`'s process to `dst_addr` in `dst_ep`'s.
#[no_mangle]
pub extern "C" fn mnx_vcopy(
    src_ep: c_int,
    src_addr: *const c_void,
    dst_ep: c_int,
    dst_addr: *mut c_void,
    len: usize,
) -> c_int {
    with_ep(|e| e.vcopy(src_ep, src_addr as usize, dst_ep, dst_addr as usize, len))
}

/// Arena buffers handed out by `mnx_alloc`, by address (a `fork`ed child inherits the
/// parent's list; it cannot free those, see `ArenaBuf`).
/// Behind a spin lock, not a `Mutex`: a child forked while another thread of the parent held
/// it must be able to take it (the atfork child handler releases it, `after_fork_in_child`).
static ARENA_BUFS: BufList = BufList(UnsafeCell::new(Vec::new()));
static ARENA_LOCK: AtomicBool = AtomicBool::new(false);

struct BufList(UnsafeCell<Vec<ArenaBuf>>);
// SAFETY: the list is only accessed by `with_bufs`, under ARENA_LOCK.
unsafe impl Sync for BufList {}

fn with_bufs<R>(f: impl FnOnce(&mut Vec<ArenaBuf>) -> R) -> R {
    while ARENA_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    // SAFETY: we hold ARENA_LOCK, so nobody else accesses the list.
    let r = f(unsafe { &mut *ARENA_BUFS.0.get() });
    ARENA_LOCK.store(false, Ordering::Release);
    r
}

/// In a `fork`ed child (atfork handler, atomics only): release a lock a thread of the
/// parent may have held. A list that thread left half-updated is only ever trimmed of
/// the parent's entries (dropping those frees nothing, see `ArenaBuf`).
pub(crate) fn after_fork_in_child() {
    ARENA_LOCK.store(false, Ordering::Release);
}

/// Allocate `len` bytes in the arena of the calling thread's domain (shared by every
/// process of the domain; `mnx_vcopy` between two arena buffers is one memcpy). The
/// address is stored in `*ptr`.
#[no_mangle]
pub extern "C" fn mnx_alloc(len: usize, ptr: *mut *mut c_void) -> c_int {
    if ptr.is_null() {
        return Error::InvalidArgument.code();
    }
    let mut buf = None;
    let r = with_ep(|e| {
        buf = Some(e.domain().alloc(len)?);
        Ok(())
    });
    if let Some(mut b) = buf {
        ptr_out(ptr, b.as_mut_ptr() as *mut c_void);
        with_bufs(|v| v.push(b));
    }
    r
}

fn ptr_out(p: *mut *mut c_void, v: *mut c_void) {
    // SAFETY: the caller of `mnx_alloc` passes a valid, non-null (checked there) pointer
    // to a `void *`.
    unsafe { *p = v };
}

/// Free a buffer from `mnx_alloc` of this process (`MNX_EINVAL` for any other pointer).
#[no_mangle]
pub extern "C" fn mnx_free(ptr: *mut c_void) -> c_int {
    let me = std::process::id();
    let gone = with_bufs(|v| {
        // Forget handles inherited from a parent process (dropping them frees nothing).
        v.retain(|b| b.owner_pid() == me);
        v.iter()
            .position(|b| b.addr() == ptr as usize)
            .map(|i| v.swap_remove(i))
    });
    match gone {
        Some(b) => {
            drop(b);
            0
        }
        None => Error::InvalidArgument.code(),
    }
}

/// Static, NUL-terminated description of an error code.
#[no_mangle]
pub extern "C" fn mnx_strerror(code: c_int) -> *const c_char {
    let s: &'static [u8] = match Error::from_code(code) {
        None if code >= 0 => b"success\0",
        None => b"unknown error\0",
        Some(Error::BadEndpoint) => b"bad endpoint\0",
        Some(Error::NotSameDomain) => b"endpoint is not in the same domain\0",
        Some(Error::DeadEndpoint) => b"dead endpoint\0",
        Some(Error::DomainEnded) => b"domain ended\0",
        Some(Error::WouldBlock) => b"operation would block\0",
        Some(Error::TimedOut) => b"timed out\0",
        Some(Error::BadAddress) => b"bad address range\0",
        Some(Error::TooLarge) => b"too large\0",
        Some(Error::NoSuchDomain) => b"no such domain\0",
        Some(Error::DomainExists) => b"domain already exists\0",
        Some(Error::DomainFull) => b"domain is full\0",
        Some(Error::EndpointInUse) => b"endpoint already in use\0",
        Some(Error::InvalidArgument) => b"invalid argument\0",
        Some(Error::PermissionDenied) => b"permission denied\0",
        Some(Error::Corrupt) => b"corrupt or incompatible domain segment\0",
        Some(Error::ArenaFull) => b"no room in the domain arena\0",
        Some(Error::Os(_)) => b"operating system error\0",
    };
    s.as_ptr() as *const c_char
}
