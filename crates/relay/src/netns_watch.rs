//! `ustack attach --netns PATH` stops once the namespace it serves is gone
//! from sight: PATH removed (`ip netns del NAME` unmounts and unlinks
//! `/run/netns/NAME`) or standing for another namespace, or, for
//! `/proc/PID/ns/net`, process PID ended — as pasta quits by default. The
//! TAP's descriptor, opened inside the namespace, holds the namespace
//! alive (a tun file keeps a reference to the namespace it was opened in),
//! so nothing on the TAP itself ever says so: without this, `attach`
//! served a namespace nobody could enter any more, for ever.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::sys;

/// The namespace a path stands for: its nsfs device and inode.
fn ns_id(path: &Path) -> io::Result<(u64, u64)> {
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// A namespace path to watch, as it was when the TAP was opened.
#[derive(Debug)]
pub struct NetnsWatch {
    path: PathBuf,
    id: (u64, u64),
}

impl NetnsWatch {
    /// Note what `path` stands for now (before giving up privileges).
    pub fn new(path: &Path) -> io::Result<NetnsWatch> {
        Ok(NetnsWatch {
            path: path.to_path_buf(),
            id: ns_id(path)?,
        })
    }

    /// Whether the path no longer leads to the namespace: gone, or
    /// another one. Any other error (a permission, say) is not taken for
    /// the namespace's end.
    pub fn gone(&self) -> bool {
        match ns_id(&self.path) {
            Ok(id) => id != self.id,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Look every `every` on a thread of its own; the returned watcher's
    /// descriptor becomes readable when the namespace is gone.
    pub fn start(self, every: Duration) -> io::Result<Watching> {
        let bell = sys::eventfd()?;
        let raw = bell.as_raw_fd();
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicBool::new(false));
        let (stop2, fired2) = (stop.clone(), fired.clone());
        let join = thread::Builder::new()
            .name("ustack-netns".into())
            .spawn(move || {
                while !stop2.load(Ordering::SeqCst) {
                    thread::park_timeout(every);
                    if stop2.load(Ordering::SeqCst) {
                        return;
                    }
                    if self.gone() {
                        fired2.store(true, Ordering::SeqCst);
                        sys::eventfd_ring(raw);
                        return;
                    }
                }
            })?;
        Ok(Watching {
            bell,
            stop,
            fired,
            join: Some(join),
        })
    }
}

/// A running [`NetnsWatch`]; stopped (and joined) when dropped.
#[derive(Debug)]
pub struct Watching {
    bell: OwnedFd,
    stop: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
    join: Option<thread::JoinHandle<()>>,
}

impl Watching {
    /// Readable once the namespace is gone.
    pub fn fd(&self) -> RawFd {
        self.bell.as_raw_fd()
    }

    /// Whether the namespace was found gone.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(j) = self.join.take() {
            j.thread().unpark();
            let _ = j.join();
        }
    }
}
