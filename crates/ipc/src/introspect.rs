//! Introspection: a `/proc`-like view of domains and endpoints (used by `ustack ipc ls`).

use crate::domain::*;
use crate::sys;
use serde::Serialize;
use std::sync::atomic::Ordering;

/// One bound endpoint as seen from outside.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointInfo {
    /// Endpoint number.
    pub endpoint: i32,
    /// Slot index.
    pub slot: u32,
    /// Owner process id.
    pub pid: u32,
    /// Owner thread id.
    pub tid: u32,
    /// Name given at bind time.
    pub name: String,
    /// Is the owner alive? (A dead one is reclaimed by the next bind or `ustack ipc gc`.)
    pub alive: bool,
    /// "running", "sending to X", "receiving from Y|ANY", "sendrec to X", "waiting reply from X", ...
    pub state: String,
    /// Wait mode name.
    pub wait_mode: String,
    /// Doorbells a `Block`-mode sleeper has published: "eventfd", "pipe", "eventfd+pipe",
    /// "refused" (a waker may not reach them: it sleeps on its futex) or "-" (none yet).
    pub doorbell: String,
    /// Sources with a pending notification for this endpoint.
    pub pending_notify: Vec<i32>,
    /// Endpoints blocked sending to this endpoint.
    pub blocked_senders: Vec<i32>,
    /// Messages sent.
    pub sent: u64,
    /// Messages received (notifications excluded).
    pub received: u64,
    /// Notifications sent.
    pub notify_sent: u64,
    /// Notifications received.
    pub notify_received: u64,
    /// vcopy calls made.
    pub copies: u64,
    /// Bytes copied by vcopy.
    pub copied_bytes: u64,
}

/// A domain as seen from outside.
#[derive(Debug, Clone, Serialize)]
pub struct DomainInfo {
    /// Domain name.
    pub name: String,
    /// Endpoint tag.
    pub tag: u32,
    /// Slot count.
    pub max_endpoints: u32,
    /// Copy limit, bytes.
    pub max_copy: u64,
    /// Ended flag.
    pub ended: bool,
    /// Size of the shared arena, bytes (0: none).
    pub arena_size: u64,
    /// Arena bytes allocated (whole 64 KiB chunks).
    pub arena_used: u64,
    /// Bound endpoints.
    pub endpoints: Vec<EndpointInfo>,
}

fn bits(dom: &Domain, bm: &[std::sync::atomic::AtomicU64; BITMAP_WORDS]) -> Vec<i32> {
    let mut v = Vec::new();
    for (w, word) in bm.iter().enumerate().take(dom.nwords()) {
        let mut x = word.load(Ordering::Acquire);
        while x != 0 {
            let b = x.trailing_zeros();
            x &= x - 1;
            v.push(dom.endpoint_of_slot(w as u32 * 64 + b));
        }
    }
    v
}

impl Domain {
    /// Snapshot of the domain and its endpoints (racy by nature, never blocks).
    /// Raw control words of the bound slots (see `debug::slot_words`).
    pub(crate) fn debug_slot_words(&self) -> Vec<String> {
        (0..self.max_endpoints())
            .filter_map(|i| {
                let s = self.slot(i);
                (s.alloc.load(Ordering::Acquire) & 0xff == A_ACTIVE).then(|| {
                    let st = s.state.load(Ordering::SeqCst);
                    format!(
                        "slot {i}: state seq {} op {} peer {:#x}, futex {}, sleeping {}, \
                         bell_fd {} pipe_fd {}, senders {:#x}, notify {:#x}, pid {} tid {}",
                        st_seq(st),
                        st_op(st),
                        st_peer(st),
                        s.futex.load(Ordering::SeqCst),
                        s.sleeping.load(Ordering::SeqCst),
                        s.bell_fd.load(Ordering::SeqCst),
                        s.pipe_fd.load(Ordering::SeqCst),
                        s.senders[0].load(Ordering::SeqCst),
                        s.notify[0].load(Ordering::SeqCst),
                        s.pid.load(Ordering::Relaxed),
                        s.tid.load(Ordering::Relaxed),
                    )
                })
            })
            .collect()
    }

    pub fn info(&self) -> DomainInfo {
        let mut endpoints = Vec::new();
        for i in 0..self.max_endpoints() {
            let s = self.slot(i);
            if s.alloc.load(Ordering::Acquire) & 0xff != A_ACTIVE {
                continue;
            }
            let (pid, tid, start) = (
                s.pid.load(Ordering::Relaxed),
                s.tid.load(Ordering::Relaxed),
                s.start.load(Ordering::Relaxed),
            );
            let st = s.state.load(Ordering::Acquire);
            let ep = |x: u32| self.endpoint_of_slot(x).to_string();
            let state = match st_op(st) {
                OP_RUNNING => "running".to_string(),
                OP_SENDING => format!("sending to {}", ep(st_peer(st) & 0x3ff)),
                OP_SENDREC_SENDING => format!("sendrec to {}", ep(st_peer(st) & 0x3ff)),
                OP_DELIVERED => "running (send completed)".to_string(),
                OP_RECEIVING if st_peer(st) == PEER_ANY => "receiving from ANY".to_string(),
                OP_RECEIVING => format!("receiving from {}", ep(st_peer(st))),
                OP_RECEIVING_REPLY => format!("waiting reply from {}", ep(st_peer(st))),
                OP_FILLING => format!("receiving (message from {} arriving)", ep(st_peer(st))),
                OP_FILLED => format!("receiving (message from {} ready)", ep(st_peer(st))),
                _ => "unknown".to_string(),
            };
            endpoints.push(EndpointInfo {
                endpoint: self.endpoint_of_slot(i),
                slot: i,
                pid,
                tid,
                name: s.read_name(),
                alive: sys::owner_alive(pid, tid, start),
                state,
                wait_mode: WaitMode::from_u32(s.wait_mode.load(Ordering::Relaxed))
                    .unwrap_or_default()
                    .name()
                    .to_string(),
                doorbell: {
                    let (e, p) = (
                        s.bell_fd.load(Ordering::Relaxed),
                        s.pipe_fd.load(Ordering::Relaxed),
                    );
                    let bells = match (e, p) {
                        (crate::bell::BELLS_FORBIDDEN, _) => "refused",
                        (e, p) if e >= 0 && p >= 0 => "eventfd+pipe",
                        (e, _) if e >= 0 => "eventfd",
                        (_, p) if p >= 0 => "pipe",
                        _ => "-",
                    };
                    // A hand-off listener (see `handoff.rs`) is shown after the doorbells.
                    match s.trap_fd.load(Ordering::Relaxed) {
                        t if t >= 0 => format!("{bells}+handoff"),
                        crate::handoff::TRAP_FORBIDDEN => format!("{bells}+handoff-refused"),
                        _ => bells.to_string(),
                    }
                },
                pending_notify: bits(self, &s.notify),
                blocked_senders: bits(self, &s.senders)
                    .into_iter()
                    .filter(|&e| {
                        let ss = self.slot((e as u32) & 0xffff);
                        let o = st_op(ss.state.load(Ordering::Acquire));
                        o == OP_SENDING || o == OP_SENDREC_SENDING
                    })
                    .collect(),
                sent: s.c_sent.load(Ordering::Relaxed),
                received: s.c_received.load(Ordering::Relaxed),
                notify_sent: s.c_notify_sent.load(Ordering::Relaxed),
                notify_received: s.c_notify_received.load(Ordering::Relaxed),
                copies: s.c_copies.load(Ordering::Relaxed),
                copied_bytes: s.c_bytes.load(Ordering::Relaxed),
            });
        }
        DomainInfo {
            name: self.name().to_string(),
            tag: self.tag(),
            max_endpoints: self.max_endpoints(),
            max_copy: self.max_copy(),
            ended: self.is_ended(),
            arena_size: self.arena_size() as u64,
            arena_used: self.arena_used() as u64,
            endpoints,
        }
    }
}
