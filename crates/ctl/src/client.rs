//! The client side: find running stacks and ask them.

use std::time::Duration;

use ustack_ipc::{ArenaBuf, Domain, Endpoint, Error as IpcError, Message};

use crate::proto::{Request, Response, StackInfo};
use crate::server::{
    BAD_ADDRESS, BAD_LENGTH, BAD_ROOM, MAX_ANSWER, MT_BAD, MT_OK, MT_REQUEST, MT_TOO_SMALL, SERVER,
};
use crate::DOMAIN_PREFIX;

/// How long a stack may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// First answer buffer (grown when an answer does not fit).
const FIRST_BUFFER: usize = 256 << 10;

/// Names of the running stacks (those whose control endpoint is alive).
pub fn list() -> Vec<String> {
    let mut v: Vec<String> = Domain::list()
        .into_iter()
        .filter_map(|d| d.strip_prefix(DOMAIN_PREFIX).map(str::to_owned))
        .filter(|n| {
            // A stack that died leaves its domain behind until the next one of
            // that name replaces it; skip it (and domains we may not open).
            Domain::open(&format!("{DOMAIN_PREFIX}{n}"))
                .map(|d| d.has_live_endpoints() && !d.is_ended())
                .unwrap_or(true)
        })
        .collect();
    v.sort();
    v
}

/// A stack found by [`StackRef::select`].
#[derive(Debug, Clone)]
pub struct StackRef {
    pub name: String,
}

impl StackRef {
    /// The stack `sel` names (its name, or its PID), or, without `sel`, the
    /// only one running. Errors say what to do.
    pub fn select(sel: Option<&str>) -> Result<StackRef, String> {
        choose(&list(), sel, |n| {
            match Client::connect(n).and_then(|mut c| c.call(&Request::Info)) {
                Ok(Response::Info(i)) => Some(i.pid),
                _ => None,
            }
        })
    }
}

/// The stack `sel` names among the running `names` (its name, or the PID
/// `pid_of` gives for it), or, without `sel`, the only one.
fn choose(
    names: &[String],
    sel: Option<&str>,
    pid_of: impl Fn(&str) -> Option<u32>,
) -> Result<StackRef, String> {
    match sel {
        Some(s) => {
            if names.iter().any(|n| n == s) {
                return Ok(StackRef { name: s.into() });
            }
            if let Ok(pid) = s.parse::<u32>() {
                for n in names {
                    if pid_of(n) == Some(pid) {
                        return Ok(StackRef { name: n.clone() });
                    }
                }
            }
            Err(format!(
                "no running stack is named {s:?} or has PID {s} (running: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        }
        None => match names {
            [one] => Ok(StackRef { name: one.clone() }),
            [] => Err("no ustack is running (or none you may operate: a stack's \
                       control endpoint is open to its owner and root only)"
                .into()),
            many => Err(format!(
                "{} stacks are running ({}): choose one with --stack NAME|PID",
                many.len(),
                many.join(", ")
            )),
        },
    }
}

/// A connection to one stack's control endpoint.
pub struct Client {
    name: String,
    // Field order: the endpoint and buffer before the domain they live in.
    ep: Endpoint,
    buf: ArenaBuf,
    dom: Domain,
}

impl Client {
    /// Open stack `name`'s control endpoint.
    pub fn connect(name: &str) -> Result<Client, String> {
        let dom = Domain::open(&format!("{DOMAIN_PREFIX}{name}")).map_err(|e| match e {
            IpcError::PermissionDenied => format!(
                "stack {name:?}: permission denied (its control endpoint is open to the \
                 user who started it and to root only)"
            ),
            IpcError::NoSuchDomain => format!("no running stack is named {name:?}"),
            e => format!("stack {name:?}: {e}"),
        })?;
        let ep = dom
            .bind("client")
            .map_err(|e| format!("stack {name:?}: {e}"))?;
        let buf = dom
            .alloc(FIRST_BUFFER)
            .map_err(|e| format!("stack {name:?}: {e}"))?;
        Ok(Client {
            name: name.to_string(),
            ep,
            buf,
            dom,
        })
    }

    /// The stack's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Ask; the stack's answer (a refusal is `Ok(Response::Error)`).
    pub fn call(&mut self, req: &Request) -> Result<Response, String> {
        self.call_with_data(req).map(|(r, _)| r)
    }

    /// Ask; the stack's answer and the bytes that follow it (a capture
    /// read's pcap records).
    pub fn call_with_data(&mut self, req: &Request) -> Result<(Response, Vec<u8>), String> {
        let body = serde_json::to_vec(req).map_err(|e| e.to_string())?;
        let name = self.name.clone();
        let fail = |e: IpcError| match e {
            IpcError::DeadEndpoint | IpcError::DomainEnded | IpcError::BadEndpoint => {
                format!("stack {name:?} has stopped")
            }
            IpcError::TimedOut => format!("stack {name:?} did not answer in {ANSWER_TIMEOUT:?}"),
            e => format!("stack {name:?}: {e}"),
        };
        for _ in 0..3 {
            if self.buf.capacity() < body.len() {
                self.buf = self.dom.alloc(body.len()).map_err(fail)?;
            }
            self.buf.write_at(0, &body).map_err(fail)?;
            let m = Message::new(MT_REQUEST)
                .with_u64(0, self.buf.addr() as u64)
                .with_u64(1, body.len() as u64)
                .with_u64(2, self.buf.capacity() as u64);
            let r = self
                .ep
                .sendrec_timeout(SERVER, &m, ANSWER_TIMEOUT)
                .map_err(fail)?;
            match r.mtype {
                MT_OK => {
                    let n = r.u64_at(0) as usize;
                    if n > self.buf.capacity() {
                        return Err(format!("stack {name:?}: answer longer than the buffer"));
                    }
                    let mut out = vec![0u8; n];
                    self.buf.read_at(0, &mut out).map_err(fail)?;
                    let json = match r.u64_at(1) as usize {
                        0 => n,
                        j => j.min(n),
                    };
                    let data = out.split_off(json);
                    let resp = serde_json::from_slice(&out)
                        .map_err(|e| format!("stack {name:?}: malformed answer: {e}"))?;
                    return Ok((resp, data));
                }
                MT_TOO_SMALL => {
                    let need = r.u64_at(0);
                    if need > MAX_ANSWER {
                        return Err(format!(
                            "stack {name:?}: answer of {need} bytes is too large"
                        ));
                    }
                    self.buf = self.dom.alloc(need as usize).map_err(fail)?;
                }
                MT_BAD => {
                    let why = match r.u64_at(0) {
                        BAD_LENGTH => "request too long",
                        BAD_ROOM => "no room for the answer",
                        BAD_ADDRESS => "bad buffer address",
                        _ => "unknown request",
                    };
                    return Err(format!("stack {name:?} refused the request: {why}"));
                }
                t => return Err(format!("stack {name:?}: unexpected reply type {t}")),
            }
        }
        Err(format!("stack {name:?}: the answer kept growing"))
    }

    /// This process's address of `len` bytes at `offset` in the stack's
    /// shared arena (a capture ring), if the range lies inside it. It stays
    /// mapped while the client lives.
    pub fn arena_range(&self, offset: u64, len: u64) -> Option<std::ptr::NonNull<u8>> {
        self.dom
            .arena_range(usize::try_from(offset).ok()?, usize::try_from(len).ok()?)
    }

    /// The stack's description (`ustack ps`).
    pub fn info(&mut self) -> Result<StackInfo, String> {
        match self.call(&Request::Info)? {
            Response::Info(i) => Ok(i),
            Response::Error { message } => Err(message),
            _ => Err("unexpected answer".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::choose;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Stack `serve-N` runs as PID N.
    fn pid_of(n: &str) -> Option<u32> {
        n.strip_prefix("serve-")?.parse().ok()
    }

    #[test]
    fn the_only_running_stack_is_chosen_by_default() {
        let one = names(&["run-7"]);
        assert_eq!(
            choose(&one, None, pid_of).map(|s| s.name),
            Ok("run-7".into())
        );
        // None running: a clear error, which says why one may be missing.
        let e = choose(&[], None, pid_of).expect_err("none");
        assert!(e.contains("no ustack is running"), "{e}");
        // Several: none is guessed; the error lists them and the flag.
        let two = names(&["serve-12", "serve-34"]);
        let e = choose(&two, None, pid_of).expect_err("two");
        assert!(
            e.contains("2 stacks are running (serve-12, serve-34)"),
            "{e}"
        );
        assert!(e.contains("--stack NAME|PID"), "{e}");
    }

    #[test]
    fn a_stack_is_selected_by_name_or_pid() {
        let two = names(&["serve-12", "serve-34", "77"]);
        let pick = |s| choose(&two, Some(s), pid_of).map(|r| r.name);
        assert_eq!(pick("serve-34"), Ok("serve-34".into()));
        assert_eq!(pick("12"), Ok("serve-12".into()));
        // A name made of digits is a name first.
        assert_eq!(pick("77"), Ok("77".into()));
        let e = pick("99").expect_err("no such stack");
        assert!(
            e.contains("no running stack is named \"99\" or has PID 99"),
            "{e}"
        );
        assert!(e.contains("serve-12, serve-34, 77"), "{e}");
    }
}
