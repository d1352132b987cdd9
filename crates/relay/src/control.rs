//! The control endpoint of `ustack run` and `attach` (see crates/ctl).
//!
//! The relay is one thread that owns the guest-side engine, so the control
//! endpoint's server thread cannot read the engine itself: it posts each
//! query on a channel and rings an `eventfd` the relay's epoll watches; the
//! relay answers between two iterations of its loop (a snapshot copy, as
//! cheap as serving one flow) and the server thread waits for the answer.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

use std::time::Duration;
use ustack_dev::live::CaptureHub;

use ustack_ctl::{DeviceInfo, Provider, SocketEntry};
use ustack_socket::sysctl::Tunables;

/// How long the server thread waits for the relay to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A question to the relay thread.
#[derive(Debug)]
pub(crate) enum Query {
    Devices,
    Sockets(bool),
    Counters,
    Tunables,
    SetTunables(Box<Tunables>),
    Ports {
        add: Option<String>,
        remove: Option<String>,
    },
}

/// The relay thread's answer.
#[derive(Debug)]
pub(crate) enum Answer {
    Devices(Vec<DeviceInfo>),
    Sockets(Vec<SocketEntry>),
    Counters(Vec<(String, u64)>),
    Tunables(Option<Box<Tunables>>),
    Ports(Result<Vec<String>, String>),
    Set(Result<(), String>),
}

/// The relay's end: where queries arrive.
pub struct ControlLink {
    pub(crate) rx: Receiver<(Query, SyncSender<Answer>)>,
    pub(crate) bell: OwnedFd,
}

impl ControlLink {
    pub(crate) fn bell_fd(&self) -> RawFd {
        self.bell.as_raw_fd()
    }
}

/// The control endpoint's end: a [`Provider`] that asks the relay thread.
pub struct RelayProvider {
    tx: Mutex<Sender<(Query, SyncSender<Answer>)>>,
    bell: OwnedFd,
    hub: Arc<CaptureHub>,
}

/// A linked pair: give the [`ControlLink`] to [`crate::Relay::set_control`]
/// and the [`RelayProvider`] to `ustack_ctl::Control::start`.
/// Live captures read `hub` (fed by a `Tapped` guest device) directly.
pub fn link(hub: Arc<CaptureHub>) -> std::io::Result<(ControlLink, RelayProvider)> {
    let bell = crate::sys::eventfd()?;
    let (tx, rx) = mpsc::channel();
    let bell2 = bell.try_clone()?;
    Ok((
        ControlLink { rx, bell },
        RelayProvider {
            tx: Mutex::new(tx),
            bell: bell2,
            hub,
        },
    ))
}

impl RelayProvider {
    /// Ask the relay thread; None if it is gone or does not answer in time.
    fn ask(&self, q: Query) -> Option<Answer> {
        let (atx, arx) = mpsc::sync_channel(1);
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((q, atx))
            .ok()?;
        crate::sys::eventfd_ring(self.bell.as_raw_fd());
        arx.recv_timeout(ANSWER_TIMEOUT).ok()
    }
}

impl Provider for RelayProvider {
    fn devices(&self) -> Vec<DeviceInfo> {
        match self.ask(Query::Devices) {
            Some(Answer::Devices(d)) => d,
            _ => Vec::new(),
        }
    }

    fn sockets(&self, detail: bool) -> Vec<SocketEntry> {
        match self.ask(Query::Sockets(detail)) {
            Some(Answer::Sockets(s)) => s,
            _ => Vec::new(),
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        match self.ask(Query::Counters) {
            Some(Answer::Counters(c)) => c,
            _ => Vec::new(),
        }
    }

    fn tunables(&self) -> Tunables {
        match self.ask(Query::Tunables) {
            Some(Answer::Tunables(Some(t))) => *t,
            _ => Tunables::default(),
        }
    }

    fn set_tunables(&self, t: Tunables) -> Result<(), String> {
        match self.ask(Query::SetTunables(Box::new(t))) {
            Some(Answer::Set(r)) => r,
            _ => Err("the relay did not answer".into()),
        }
    }

    fn ports(&self, add: Option<&str>, remove: Option<&str>) -> Result<Vec<String>, String> {
        match self.ask(Query::Ports {
            add: add.map(str::to_owned),
            remove: remove.map(str::to_owned),
        }) {
            Some(Answer::Ports(r)) => r,
            _ => Err("the relay did not answer".into()),
        }
    }

    fn capture_hub(&self) -> Option<Arc<CaptureHub>> {
        Some(self.hub.clone())
    }
}
