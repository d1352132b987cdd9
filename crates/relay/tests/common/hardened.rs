//! `ustack run` and `ustack attach` hardened, as the `ustack` binary runs
//! them: in a process of their own (`ustack-run-hardened`), since giving up
//! privileges, closing inherited descriptors and seccomp are process-wide.
//! The run's exit code and counters come back in the report it prints.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use anyhow::anyhow;
use ustack_relay::cli::{RunReport, ERROR_PREFIX, REPORT_PREFIX};

/// The hardened `ustack run` / `ustack attach`, built from this tree.
pub const EXE: &str = env!("CARGO_BIN_EXE_ustack-run-hardened");

/// The most one hardened run may take: a guard against a hung relay only
/// (every test bounds its own command far below it).
pub const BOUND: Duration = Duration::from_secs(600);

/// What a hardened `ustack run` reported.
#[derive(Debug, Clone)]
pub struct HardenedRun {
    pub report: RunReport,
    /// The relay process's resident memory when it started, when the run
    /// had ended (the sandbox gone, the relay shut down) and at its peak.
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
    pub hwm_kib: u64,
    /// The CPU time the relay process used, all its threads.
    pub cpu: Duration,
}

/// Copy a child's output to ours line by line (so that the test harness
/// captures it), keeping the report line aside.
fn pump<R: Read + Send + 'static>(r: R, err: bool) -> thread::JoinHandle<Option<String>> {
    thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if line.starts_with(REPORT_PREFIX) || line.starts_with(ERROR_PREFIX) {
                last = Some(line);
            } else if err {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        }
        last
    })
}

/// A running `ustack-run-hardened`; killed and reaped when dropped unfinished.
struct Proc {
    pid: i32,
    waiter: Option<mpsc::Receiver<std::io::Result<std::process::ExitStatus>>>,
    out: Option<thread::JoinHandle<Option<String>>>,
    err: Option<thread::JoinHandle<Option<String>>>,
    stdin: Option<ChildStdin>,
}

impl Proc {
    /// `EXE MODE V...`, in the network namespace `/run/netns/NETNS` if given
    /// (through `ip netns exec`, which becomes EXE).
    fn spawn(netns: Option<&str>, mode: &str, v: &[&str], stdin: Stdio) -> anyhow::Result<Proc> {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, EXE]);
                c
            }
            None => Command::new(EXE),
        };
        let mut child: Child = cmd
            .arg(mode)
            .args(v)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| anyhow!("spawn {EXE}: {e}"))?;
        let out = child.stdout.take().map(|o| pump(o, false));
        let err = child.stderr.take().map(|e| pump(e, true));
        let stdin = child.stdin.take();
        let pid = i32::try_from(child.id()).map_err(|e| anyhow!("pid: {e}"))?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        Ok(Proc {
            pid,
            waiter: Some(rx),
            out,
            err,
            stdin,
        })
    }

    /// Wait (bounded by [`BOUND`]) for the process to end; its report.
    fn finish(&mut self) -> anyhow::Result<serde_json::Value> {
        let Some(rx) = self.waiter.take() else {
            return Err(anyhow!("already finished"));
        };
        let status = match rx.recv_timeout(BOUND) {
            Ok(s) => s,
            Err(_) => {
                self.kill();
                let _ = rx.recv();
                return Err(anyhow!("ustack-run-hardened still running after {BOUND:?}"));
            }
        };
        self.report(status)
    }

    /// [`Proc::finish`] if the process ends by itself within `d`; `None`
    /// while it still runs.
    fn finish_within(&mut self, d: Duration) -> Option<anyhow::Result<serde_json::Value>> {
        let status = self.waiter.as_ref()?.recv_timeout(d).ok()?;
        self.waiter = None;
        Some(self.report(status))
    }

    /// The report of the process that ended with `status`.
    fn report(
        &mut self,
        status: std::io::Result<std::process::ExitStatus>,
    ) -> anyhow::Result<serde_json::Value> {
        let status = status.map_err(|e| anyhow!("wait: {e}"))?;
        let out = self.out.take().and_then(|h| h.join().ok().flatten());
        let err = self.err.take().and_then(|h| h.join().ok().flatten());
        let line = out
            .or(err)
            .ok_or_else(|| anyhow!("ustack-run-hardened exited with {status} and no report"))?;
        if let Some(e) = line.strip_prefix(ERROR_PREFIX) {
            return Err(anyhow!("{e}"));
        }
        let json = line.strip_prefix(REPORT_PREFIX).unwrap_or_default();
        if !status.success() {
            return Err(anyhow!("ustack-run-hardened exited with {status}: {json}"));
        }
        serde_json::from_str(json).map_err(|e| anyhow!("report {json:?}: {e}"))
    }

    fn kill(&self) {
        // SAFETY: signalling our own child, not yet reaped (its waiter
        // thread has not reported).
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(rx) = self.waiter.take() {
            self.kill();
            let _ = rx.recv_timeout(BOUND);
        }
    }
}

/// `ustack run ARGS` hardened: the exit code, counters and memory.
pub fn run_full(v: &[&str]) -> anyhow::Result<HardenedRun> {
    let mut p = Proc::spawn(None, "run", v, Stdio::null())?;
    let r = p.finish()?;
    let report = RunReport::from_json(&r.to_string()).map_err(|e| anyhow!("report: {e}"))?;
    let kib = |k: &str| r[k].as_u64().ok_or_else(|| anyhow!("report has no {k}"));
    Ok(HardenedRun {
        report,
        rss_start_kib: kib("rss_start_kib")?,
        rss_end_kib: kib("rss_end_kib")?,
        hwm_kib: kib("hwm_kib")?,
        cpu: Duration::from_nanos(kib("cpu_ns")?),
    })
}

/// `ustack run ARGS` hardened: the exit code and the counters.
pub fn run_report(v: &[&str]) -> anyhow::Result<RunReport> {
    run_full(v).map(|h| h.report)
}

/// `ustack run ARGS` hardened: the exit code.
pub fn run(v: &[&str]) -> anyhow::Result<i32> {
    run_report(v).map(|r| r.code)
}

/// A hardened `ustack attach ARGS`, serving until [`Attach::stop`] (or
/// killed when dropped).
pub struct Attach(Proc);

impl Attach {
    pub fn spawn(v: &[&str]) -> anyhow::Result<Attach> {
        Proc::spawn(None, "attach", v, Stdio::piped()).map(Attach)
    }

    /// [`Attach::spawn`] with the relay in the network namespace
    /// `/run/netns/NETNS` (its host sockets there).
    pub fn spawn_in(netns: &str, v: &[&str]) -> anyhow::Result<Attach> {
        Proc::spawn(Some(netns), "attach", v, Stdio::piped()).map(Attach)
    }

    /// What `attach` returned if it ends by itself within `d` (`None`: it
    /// still runs).
    #[allow(dead_code)]
    pub fn ended_within(&mut self, d: Duration) -> Option<Result<i32, String>> {
        let r = self.0.finish_within(d)?;
        Some(r.map_err(|e| format!("{e:#}")).and_then(|r| {
            r["code"]
                .as_i64()
                .and_then(|c| i32::try_from(c).ok())
                .ok_or_else(|| format!("attach report {r}"))
        }))
    }

    /// Stop it (a byte on its standard input); what `attach` returned.
    pub fn stop(mut self) -> Result<i32, String> {
        if let Some(mut i) = self.0.stdin.take() {
            let _ = i.write_all(b"x");
        }
        let r = self.0.finish().map_err(|e| format!("{e:#}"))?;
        r["code"]
            .as_i64()
            .and_then(|c| i32::try_from(c).ok())
            .ok_or_else(|| format!("attach report {r}"))
    }
}
