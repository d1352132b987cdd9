//! The benchmark's helper processes (ustack serve, kernel servers, load
//! generators): spawned with their stdout read line by line into one
//! channel (time-stamped on arrival), the tail of their stderr kept for
//! error messages, stdin kept open for commands; killed and reaped on drop.
//! Also the Ctrl-C flag every waiting loop checks.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Block SIGINT/SIGTERM in this process and turn them into a flag that the
/// waiting loops check ([`check_interrupted`]): the benchmark then unwinds
/// through its guards, which stop the helpers and delete the namespaces.
/// Call before any thread is spawned. Children start with the default
/// signal mask (std resets it), so a terminal's Ctrl-C reaches them too.
pub fn catch_interrupts() -> Result<()> {
    crate::signals::block_termination().context("cannot block SIGINT/SIGTERM")?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(|| {
            if let Some(sig) = crate::signals::wait_termination(None) {
                eprintln!("signal {sig}: stopping the benchmark and cleaning up ...");
                INTERRUPTED.store(true, Ordering::SeqCst);
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

pub fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// A line a helper printed on stdout.
#[derive(Debug, Clone)]
pub struct Line {
    /// Index of the helper in its [`Group`].
    pub proc: usize,
    /// When the line arrived here.
    pub at: Instant,
    pub text: String,
}

impl Line {
    /// The line as a JSON object, if it is one.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str::<serde_json::Value>(&self.text)
            .ok()
            .filter(|v| v.is_object())
    }
}

/// One helper process.
pub struct Proc {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Set when its stdout reached EOF (every line it printed was sent).
    stdout_done: Arc<AtomicBool>,
}

const STDERR_LINES: usize = 12;

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Write one line to its stdin.
    pub fn send(&mut self, line: &str) -> Result<()> {
        let w = self
            .stdin
            .as_mut()
            .with_context(|| format!("{}: stdin already closed", self.name))?;
        writeln!(w, "{line}")
            .and_then(|_| w.flush())
            .with_context(|| format!("{}: cannot write to its stdin", self.name))
    }

    /// Close its stdin (the load generators take that as "release and exit").
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last lines it wrote on stderr, on one line.
    pub fn stderr_tail(&self) -> String {
        let g = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().cloned().collect::<Vec<_>>().join(" | ")
    }

    /// Ask it to stop (SIGTERM) unless it already has.
    fn sigterm(&mut self) {
        self.stdin = None;
        if self.try_exit().is_none() {
            // SAFETY: kill takes no pointers; the pid is our unreaped child,
            // so it cannot have been reused.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }
}

/// SIGTERM to all, up to `grace` for them to exit, then SIGKILL.
fn terminate(procs: &mut [Proc], grace: Duration) {
    for p in procs.iter_mut() {
        p.sigterm();
    }
    let end = Instant::now() + grace;
    while Instant::now() < end && procs.iter_mut().any(|p| p.try_exit().is_none()) {
        thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        terminate(std::slice::from_mut(self), Duration::from_secs(2));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Helpers whose stdout lines arrive on one channel.
pub struct Group {
    pub procs: Vec<Proc>,
    tx: Sender<Line>,
    rx: Receiver<Line>,
}

impl Default for Group {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel();
        Group {
            procs: Vec::new(),
            tx,
            rx,
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // All at once rather than one grace period after another.
        terminate(&mut self.procs, Duration::from_secs(2));
    }
}

impl Group {
    /// Start `cmd` (stdin, stdout and stderr piped); returns its index.
    pub fn spawn(&mut self, name: impl Into<String>, mut cmd: Command) -> Result<usize> {
        let name = name.into();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {name} ({cmd:?})"))?;
        let idx = self.procs.len();
        let stdout_done = Arc::new(AtomicBool::new(false));
        if let Some(out) = child.stdout.take() {
            let tx = self.tx.clone();
            let done = stdout_done.clone();
            thread::spawn(move || {
                for text in BufReader::new(out).lines().map_while(|l| l.ok()) {
                    let line = Line {
                        proc: idx,
                        at: Instant::now(),
                        text,
                    };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
                done.store(true, Ordering::SeqCst);
            });
        } else {
            stdout_done.store(true, Ordering::SeqCst);
        }
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(err) = child.stderr.take() {
            let tail = stderr.clone();
            let label = name.clone();
            thread::spawn(move || {
                for l in BufReader::new(err).lines().map_while(|l| l.ok()) {
                    tracing::debug!("{label}: {l}");
                    let mut g = tail.lock().unwrap_or_else(|p| p.into_inner());
                    if g.len() == STDERR_LINES {
                        g.pop_front();
                    }
                    g.push_back(l);
                }
            });
        }
        let stdin = child.stdin.take();
        self.procs.push(Proc {
            name,
            child,
            stdin,
            stderr,
            stdout_done,
        });
        Ok(idx)
    }

    /// The next line, waiting until `deadline`. Fails on Ctrl-C, at the
    /// deadline, and when a helper has exited with an error.
    pub fn next(&mut self, deadline: Instant, what: &str) -> Result<Line> {
        match self.poll(deadline)? {
            Some(l) => Ok(l),
            None => bail!("timed out waiting for {what}"),
        }
    }

    /// The next line, or None at `until`. Fails on Ctrl-C and when a
    /// helper has exited with an error.
    pub fn poll(&mut self, until: Instant) -> Result<Option<Line>> {
        loop {
            check_interrupted()?;
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            match self
                .rx
                .recv_timeout((until - now).min(Duration::from_millis(100)))
            {
                Ok(l) => return Ok(Some(l)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => bail!("helpers gone"),
            }
            self.check_failed()?;
        }
    }

    /// An error if a helper has exited unsuccessfully (with its stderr).
    pub fn check_failed(&mut self) -> Result<()> {
        for p in &mut self.procs {
            if let Some(st) = p.try_exit() {
                if !st.success() {
                    bail!("{} exited with {st}: {}", p.name, p.stderr_tail());
                }
            }
        }
        Ok(())
    }

    /// Wait until every helper has exited (successfully) or `deadline`;
    /// lines still arriving are returned.
    pub fn wait_all(&mut self, deadline: Instant, what: &str) -> Result<Vec<Line>> {
        let mut lines = Vec::new();
        loop {
            check_interrupted()?;
            while let Ok(l) = self.rx.try_recv() {
                lines.push(l);
            }
            self.check_failed()?;
            let finished =
                |p: &mut Proc| p.try_exit().is_some() && p.stdout_done.load(Ordering::SeqCst);
            if self.procs.iter_mut().all(finished) {
                lines.extend(self.rx.try_iter());
                return Ok(lines);
            }
            if Instant::now() >= deadline {
                bail!("timed out waiting for {what} to finish");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}
