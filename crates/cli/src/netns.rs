//! Network namespaces and links the benchmarks create, with guards that
//! remove them on drop (also on error and panic), and ways to run ip(8)
//! and other programs inside them.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};
use ustack_relay::termination;

/// Namespaces deleted on drop (with every interface inside them).
#[derive(Default)]
pub struct Namespaces(Vec<String>);

impl Namespaces {
    /// `ip netns add NAME` with its loopback up.
    pub fn add(&mut self, name: &str) -> Result<()> {
        termination::add_netns(name).context("cannot create a network namespace (need root)")?;
        self.0.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"])
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            termination::delete_netns(n);
        }
    }
}

/// An interface in the host's namespace, deleted on drop (a veth pair goes
/// with either end; deleting an end that is already gone is harmless).
pub struct Link(pub String);

impl Drop for Link {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.0])
            .stderr(Stdio::null())
            .output();
    }
}

/// A helper process killed on drop.
pub struct Helper(pub Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run ip(8); its stderr becomes the error.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run ip(8) (install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A veth pair between two namespaces; each end, [namespace, interface,
/// address/prefix], gets its address and is brought up.
pub fn veth_pair(a: [&str; 3], b: [&str; 3]) -> Result<()> {
    ip(&[
        "link", "add", a[1], "netns", a[0], "type", "veth", "peer", "name", b[1], "netns", b[0],
    ])?;
    for [ns, dev, addr] in [a, b] {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
    }
    Ok(())
}

/// Run `prog args` in namespace `ns` to completion; its stdout.
pub fn in_ns(ns: &str, prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, prog])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {prog} in {ns}"))?;
    if !out.status.success() {
        bail!(
            "{prog} {} (in {ns}) failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Set a sysctl inside namespace `ns` (per-namespace keys such as
/// `net.ipv4.ping_group_range`).
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    in_ns(ns, "sysctl", &["-q", "-w", &format!("{key}={value}")])
        .with_context(|| format!("cannot set {key} in {ns} (is sysctl from procps installed?)"))
        .map(drop)
}

/// Run `f` on a thread that has entered the named namespace
/// (`/run/netns/NAME`): sockets it opens belong to that namespace's network
/// and keep working from any thread afterwards.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let path = Path::new("/run/netns").join(ns);
    let file = File::open(&path)
        .with_context(|| format!("cannot open network namespace {}", path.display()))?;
    let t = std::thread::spawn(move || -> std::io::Result<T> {
        // SAFETY: setns changes only this short-lived thread's network
        // namespace; `file` is an open namespace descriptor.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(f())
    });
    match t.join() {
        Ok(r) => r.with_context(|| format!("cannot enter network namespace {ns}")),
        Err(p) => std::panic::resume_unwind(p),
    }
}
