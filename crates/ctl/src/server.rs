//! The control endpoint's server: one thread per stack.
//!
//! Framing over the IPC (one `sendrec` per request): the client writes the
//! request's JSON into a buffer of its own in the domain's shared arena and
//! sends `MT_REQUEST` with the buffer's address (word 0), the request's length
//! (word 1) and the buffer's capacity (word 2). The server copies the request
//! out (`vcopy`, a `memcpy` inside the arena), answers, copies the answer's
//! JSON into the same buffer and replies `MT_OK` with its length; an answer
//! that does not fit is replied `MT_TOO_SMALL` with the length needed, and the
//! client asks again with a larger buffer. Every address and length comes from
//! another process and is checked by `vcopy` (a bad one is an error reply,
//! never a crash).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ustack_ipc::{Domain, DomainConfig, Error as IpcError, Message, MsgKind, ANY};

use crate::proto::{CounterEntry, Request, Response, StackInfo};
use crate::{sysctl, Provider, DOMAIN_PREFIX};
use ustack_net::dev::live::{
    CaptureFamily, CaptureFilter, CaptureProto, RingMemory, MIN_RING, RING_HEADER,
};

pub(crate) const MT_REQUEST: u16 = 1;
pub(crate) const MT_OK: u16 = 2;
pub(crate) const MT_TOO_SMALL: u16 = 3;
pub(crate) const MT_BAD: u16 = 4;
/// The server's endpoint number in its domain.
pub(crate) const SERVER: i32 = 0;
/// Largest request accepted.
pub(crate) const MAX_REQUEST: u64 = 1 << 20;
/// Largest answer (a socket table with details of ~100,000 connections).
pub(crate) const MAX_ANSWER: u64 = 64 << 20;
/// Largest capture ring (records; `ustack capture -B`'s bound).
pub(crate) const MAX_RING: u64 = 256 << 20;

/// A running control endpoint. Dropping it ends the domain and joins the
/// server thread.
pub struct Control {
    dom: Domain,
    name: String,
    thread: Option<JoinHandle<()>>,
}

/// `MODE-PID`: the name a stack registers under when not given one (the
/// second and later stacks of one process: `MODE-PID.N`).
pub fn default_name(mode: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid = std::process::id();
    if n == 0 {
        format!("{mode}-{pid}")
    } else {
        format!("{mode}-{pid}.{}", n + 1)
    }
}

/// Is `name` a valid stack name? The error says what is allowed.
pub fn check_name(name: &str) -> Result<(), String> {
    if valid(name) {
        Ok(())
    } else {
        Err(format!(
            "bad stack name {name:?}: use at most 40 letters, digits, '_', '-' or '.'"
        ))
    }
}

fn valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

/// A control endpoint registered but not serving yet (see
/// [`Control::create`]).
pub struct PendingControl {
    dom: Domain,
    /// Taken by `serve`.
    ep: Option<ustack_ipc::Endpoint>,
    name: String,
}

impl PendingControl {
    /// The shared-memory file clients open (mode 0600, its creator's).
    pub fn path(&self) -> &std::path::Path {
        self.dom.path()
    }

    /// Serve requests from `provider` on a thread of its own, as a stack in
    /// `mode`.
    pub fn serve(mut self, mode: &str, provider: Arc<dyn Provider>) -> Result<Control, String> {
        let (dom, name) = (self.dom.clone(), self.name.clone());
        let mut ep = self
            .ep
            .take()
            .ok_or_else(|| format!("control endpoint {name:?}: served twice"))?;
        let started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let state = Arc::new(Mutex::new(State {
            info: StackInfo {
                name: name.clone(),
                pid: std::process::id(),
                mode: mode.to_string(),
                command,
                devices: vec![],
                tcp_sockets: 0,
                established: 0,
                started_unix,
            },
            history: HashMap::new(),
            capture: None,
            retired: None,
        }));
        let d2 = dom.clone();
        let thread = std::thread::Builder::new()
            .name("ustack-control".into())
            .spawn(move || loop {
                let m = match ep.receive_timeout(ANY, REAP_PERIOD) {
                    Ok(m) => m,
                    Err(IpcError::DomainEnded) => {
                        stop_capture(&provider, &state);
                        return;
                    }
                    Err(_) => {
                        reap_capture(&d2, &provider, &state);
                        continue;
                    }
                };
                if m.kind() != MsgKind::SendRec {
                    continue;
                }
                let reply = serve_one(&d2, &mut ep, &m, &provider, &state);
                // A client that died or stopped listening loses its answer.
                let _ = ep.send_timeout(m.source, &reply, Duration::from_secs(1));
            })
            .map_err(|e| format!("control endpoint {name:?}: {e}"))?;
        Ok(Control {
            dom,
            name,
            thread: Some(thread),
        })
    }
}

impl Drop for PendingControl {
    fn drop(&mut self) {
        // Never served (the caller gave up): the domain goes. A served one
        // is ended by its Control.
        if self.ep.is_some() {
            let _ = self.dom.end();
        }
    }
}

impl Control {
    /// Register the stack as `name` (letters, digits, `_`, `-`, `.`; at most
    /// 40) in `mode` and serve requests from `provider` on a thread of its own.
    pub fn start(name: &str, mode: &str, provider: Arc<dyn Provider>) -> Result<Control, String> {
        Control::create(name)?.serve(mode, provider)
    }

    /// Register the stack as `name` without serving yet: the domain's file
    /// exists (clients wait for an answer until [`PendingControl::serve`]).
    /// A process about to give up its privileges creates it before (the file
    /// is then its present user's) and serves after (no thread exists yet
    /// while it changes).
    pub fn create(name: &str) -> Result<PendingControl, String> {
        check_name(name)?;
        let dname = format!("{DOMAIN_PREFIX}{name}");
        let cfg = DomainConfig {
            max_endpoints: 32,
            max_copy: MAX_ANSWER,
            // Answers being copied, and a capture's ring (virtual: pages are
            // taken as buffers are allocated).
            arena_size: 2 * MAX_ANSWER + MAX_RING + RING_HEADER as u64,
        };
        let dom = match Domain::create(&dname, cfg) {
            Ok(d) => d,
            Err(IpcError::DomainExists) => {
                return Err(format!(
                    "a stack named {name:?} is already running (choose another --name)"
                ))
            }
            Err(e) => return Err(format!("control endpoint {name:?}: {e}")),
        };
        let ep = dom
            .bind_as(SERVER, "control")
            .map_err(|e| format!("control endpoint {name:?}: {e}"))?;
        Ok(PendingControl {
            dom,
            ep: Some(ep),
            name: name.to_string(),
        })
    }

    /// The name this stack registered under.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = self.dom.end();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct State {
    info: StackInfo,
    /// `nstat`'s history: counter values at the last updating request.
    history: HashMap<String, u64>,
    /// The running capture: its client's endpoint and when it last said it
    /// was alive.
    capture: Option<(i32, Instant)>,
    /// A stopped capture's ring, kept a while for a reader still finishing
    /// (it writes its position into the ring): since when.
    retired: Option<(Instant, Box<dyn RingMemory>)>,
}

/// How often the server looks for an abandoned capture.
const REAP_PERIOD: Duration = Duration::from_secs(1);
/// A capture whose client has not said it is alive for this long is stopped.
const CAPTURE_ABANDONED: Duration = Duration::from_secs(5);
/// How long a stopped capture's ring is kept before its memory is reused.
const RING_KEPT: Duration = Duration::from_secs(10);

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn stop_capture(p: &Arc<dyn Provider>, state: &Mutex<State>) {
    let mut st = lock(state);
    if st.capture.take().is_some() {
        if let Some(h) = p.capture_hub() {
            retire(&mut st, h.stop());
        }
    }
}

/// Keep a stopped capture's ring for [`RING_KEPT`] (the one before goes).
fn retire(st: &mut State, mem: Option<Box<dyn RingMemory>>) {
    st.retired = mem.map(|m| (Instant::now(), m));
}

/// Stop a capture whose client is gone: dead (its endpoint has no live
/// owner: at once) or silent for [`CAPTURE_ABANDONED`].
fn reap_capture(dom: &Domain, p: &Arc<dyn Provider>, state: &Mutex<State>) {
    let stale = {
        let mut st = lock(state);
        if matches!(st.retired, Some((t, _)) if t.elapsed() >= RING_KEPT) {
            st.retired = None;
        }
        matches!(st.capture, Some((owner, t))
            if t.elapsed() >= CAPTURE_ABANDONED || !dom.endpoint_alive(owner))
    };
    if stale {
        stop_capture(p, state);
    }
}

/// Why a request message was refused (word 0 of `MT_BAD`).
pub(crate) const BAD_TYPE: u64 = 1;
pub(crate) const BAD_LENGTH: u64 = 2;
pub(crate) const BAD_ROOM: u64 = 3;
pub(crate) const BAD_ADDRESS: u64 = 4;

fn bad(why: u64) -> Message {
    Message::new(MT_BAD).with_u64(0, why)
}

/// Answer one request message; the reply message to send back.
fn serve_one(
    dom: &Domain,
    ep: &mut ustack_ipc::Endpoint,
    m: &Message,
    provider: &Arc<dyn Provider>,
    state: &Mutex<State>,
) -> Message {
    if m.mtype != MT_REQUEST {
        return bad(BAD_TYPE);
    }
    let (addr, len, cap) = (m.u64_at(0), m.u64_at(1), m.u64_at(2));
    if len == 0 || len > MAX_REQUEST {
        return bad(BAD_LENGTH);
    }
    let Ok(mut buf) = dom.alloc(len as usize) else {
        return bad(BAD_ROOM);
    };
    let me = ep.id();
    if ep
        .vcopy(m.source, addr as usize, me, buf.addr(), len as usize)
        .is_err()
    {
        return bad(BAD_ADDRESS);
    }
    let mut req = vec![0u8; len as usize];
    if buf.read_at(0, &mut req).is_err() {
        return bad(BAD_ADDRESS);
    }
    let (resp, data) = match serde_json::from_slice::<Request>(&req) {
        Ok(r) => answer(dom, &r, m.source, provider, state),
        Err(e) => (
            Response::Error {
                message: format!("malformed request: {e}"),
            },
            Vec::new(),
        ),
    };
    let mut out = match serde_json::to_vec(&resp) {
        Ok(v) => v,
        Err(_) => return bad(BAD_ROOM),
    };
    let json_len = out.len() as u64;
    out.extend_from_slice(&data);
    let n = out.len() as u64;
    if n > cap {
        return Message::new(MT_TOO_SMALL).with_u64(0, n);
    }
    if n > buf.capacity() as u64 {
        match dom.alloc(out.len()) {
            Ok(b) => buf = b,
            Err(_) => return bad(BAD_ROOM),
        }
    }
    if buf.write_at(0, &out).is_err()
        || ep
            .vcopy(me, buf.addr(), m.source, addr as usize, out.len())
            .is_err()
    {
        return bad(BAD_ADDRESS);
    }
    Message::new(MT_OK).with_u64(0, n).with_u64(1, json_len)
}

/// The answer to `r` from endpoint `src`, and the bytes that follow it
/// (none today: the framing allows raw bytes after the JSON).
fn answer(
    dom: &Domain,
    r: &Request,
    src: i32,
    p: &Arc<dyn Provider>,
    state: &Mutex<State>,
) -> (Response, Vec<u8>) {
    let resp = match r {
        Request::CaptureStart { .. } | Request::CaptureAlive | Request::CaptureStop => {
            capture(dom, r, src, p, state)
        }
        _ => answer_plain(r, p, state),
    };
    (resp, Vec::new())
}

/// A capture ring in the domain's arena: the reader maps the same bytes.
struct ArenaRing(ustack_ipc::ArenaBuf);

// SAFETY: an arena buffer is 64 KiB-aligned and mapped for `capacity()`
// bytes while it lives (the domain handle inside keeps the mapping).
unsafe impl RingMemory for ArenaRing {
    fn ptr(&self) -> *mut u8 {
        self.0.as_ptr().cast_mut()
    }
    fn size(&self) -> usize {
        self.0.capacity()
    }
}

fn capture(
    dom: &Domain,
    r: &Request,
    src: i32,
    p: &Arc<dyn Provider>,
    state: &Mutex<State>,
) -> Response {
    let err = |message: String| Response::Error { message };
    let Some(hub) = p.capture_hub() else {
        return err("this stack cannot be captured from".into());
    };
    reap_capture(dom, p, state);
    let mut st = lock(state);
    match r {
        Request::CaptureStart {
            snaplen,
            filter,
            queue_bytes,
        } => {
            if st.capture.is_some() {
                return err("a capture of this stack is already running".into());
            }
            let proto = match filter.proto.as_deref() {
                None => None,
                Some("tcp") => Some(CaptureProto::Tcp),
                Some("udp") => Some(CaptureProto::Udp),
                Some("icmp") => Some(CaptureProto::Icmp),
                Some("icmp6") => Some(CaptureProto::Icmp6),
                Some("arp") => Some(CaptureProto::Arp),
                Some(o) => {
                    return err(format!(
                        "unknown protocol {o:?} (tcp, udp, icmp, icmp6, arp)"
                    ))
                }
            };
            let family = match filter.family.as_deref() {
                None => None,
                Some("ip") => Some(CaptureFamily::Ip),
                Some("ip6") => Some(CaptureFamily::Ip6),
                Some(o) => return err(format!("unknown address family {o:?} (ip, ip6)")),
            };
            let f = CaptureFilter {
                host: filter.host,
                port: filter.port,
                proto,
                family,
            };
            let q = (*queue_bytes).clamp(MIN_RING as u64, MAX_RING) as usize;
            let buf = match dom.alloc(RING_HEADER + q) {
                Ok(b) => b,
                Err(e) => return err(format!("no room for a capture buffer of {q} bytes: {e}")),
            };
            let offset = buf.arena_offset() as u64;
            let len = buf.capacity() as u64;
            match hub.start(f, *snaplen as usize, Box::new(ArenaRing(buf))) {
                Ok(id) => {
                    st.capture = Some((src, Instant::now()));
                    Response::CaptureRing { offset, len, id }
                }
                Err(e) => err(e),
            }
        }
        Request::CaptureAlive => match &mut st.capture {
            Some((owner, last)) if *owner == src => {
                *last = Instant::now();
                Response::Ok
            }
            _ => err("no capture of yours is running".into()),
        },
        _ => {
            if matches!(st.capture, Some((owner, _)) if owner == src) {
                st.capture = None;
                let mem = hub.stop();
                retire(&mut st, mem);
            }
            Response::Ok
        }
    }
}

fn answer_plain(r: &Request, p: &Arc<dyn Provider>, state: &Mutex<State>) -> Response {
    let mut st = lock(state);
    match r {
        Request::Info => {
            let socks = p.sockets(false);
            st.info.devices = p.devices();
            // `ps`'s TCP and ESTAB columns: TCP sockets only (a connected
            // UDP socket, or `run`'s relayed UDP flow, is ESTAB too).
            let tcp = || socks.iter().filter(|s| s.proto == "tcp");
            st.info.tcp_sockets = tcp().count();
            st.info.established = tcp().filter(|s| s.state == "ESTAB").count();
            Response::Info(st.info.clone())
        }
        Request::Sockets { detail } => Response::Sockets {
            sockets: p.sockets(*detail),
        },
        Request::Counters { update } => {
            let now = p.counters();
            let counters = now
                .iter()
                .map(|(n, v)| CounterEntry {
                    name: n.clone(),
                    value: *v,
                    previous: st.history.get(n).copied().unwrap_or(0),
                })
                .collect();
            if *update {
                st.history = now.into_iter().collect();
            }
            Response::Counters { counters }
        }
        Request::SysctlGet { names } => {
            let t = p.tunables();
            let names: Vec<String> = if names.is_empty() {
                sysctl::names().collect()
            } else {
                names.clone()
            };
            let mut values = Vec::with_capacity(names.len());
            for n in names {
                match sysctl::get(&t, &n) {
                    Some(v) => values.push((sysctl::full(&n), v)),
                    None => {
                        return Response::Error {
                            message: format!("unknown tunable {}", sysctl::full(&n)),
                        }
                    }
                }
            }
            Response::Sysctl { values }
        }
        Request::SysctlSet { assignments } => {
            let t = p.tunables();
            match sysctl::set(&t, assignments) {
                Ok(n) => {
                    let values = assignments
                        .iter()
                        .map(|(k, _)| (sysctl::full(k), sysctl::get(&n, k).unwrap_or_default()))
                        .collect();
                    match p.set_tunables(n) {
                        Ok(()) => Response::Sysctl { values },
                        Err(message) => Response::Error { message },
                    }
                }
                Err(message) => Response::Error { message },
            }
        }
        Request::CaptureStart { .. } | Request::CaptureAlive | Request::CaptureStop => {
            Response::Error {
                message: "internal: capture request".into(),
            }
        }
        Request::Ports { add, remove } => match p.ports(add.as_deref(), remove.as_deref()) {
            Ok(forwards) => Response::Ports { forwards },
            Err(message) => Response::Error { message },
        },
    }
}
