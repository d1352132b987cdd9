//! The kernel's side of the interop tests: a private network namespace
//! (always removed, also when the test panics), a TAP created inside it
//! (the host never sees it), and the commands (`ip`, `ip netns exec`) the
//! tests run against the kernel end.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::thread;

use ustack_net::dev::tap::Tap;

/// Run `cmd` to completion; panics (with its name) if it cannot start.
pub fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"))
}

/// Run `ip ARGS`, which must succeed; its standard output.
pub fn ip(args: &[&str]) -> String {
    let out = run("ip", args);
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace that is deleted on drop (also when the test panics).
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    /// `ustk-TAG-PID`: unique per test binary and tag.
    pub fn new(tag: &str) -> NetNs {
        let name = format!("ustk-{tag}-{}", std::process::id());
        // A leftover from a crashed earlier run with the same pid is ours to remove.
        let _ = run("ip", &["netns", "del", &name]);
        ip(&["netns", "add", &name]);
        NetNs { name }
    }

    /// Run `f` on a thread that has joined this namespace.
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.name);
        let file = File::open(&path).expect("open netns");
        thread::spawn(move || {
            // SAFETY: setns on a valid namespace fd; it changes only the
            // network namespace of this (new, private) thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }

    /// `ip netns exec` a command in the namespace.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Write a sysctl of the namespace (`path` under /proc/sys).
    pub fn sysctl(&self, path: &str, value: &str) {
        let cmd = format!("echo {value} > /proc/sys/{path}");
        let out = self.exec(&["sh", "-c", &cmd]);
        assert!(out.status.success(), "{cmd}: {out:?}");
    }

    /// Create the TAP `name` inside the namespace, with the virtio-net
    /// header and offloads or without.
    pub fn tap(&self, name: &str, vnet: bool) -> Tap {
        let n = name.to_owned();
        self.run(move || Tap::create_with(&n, vnet))
            .join()
            .expect("tap thread")
            .expect("create TAP (root and /dev/net/tun needed)")
    }

    /// Give the kernel end of `dev` the address `cidr` (`nodad`: usable at
    /// once, for an IPv6 address) and bring it and `lo` up.
    pub fn up(&self, dev: &str, cidr: &str, nodad: bool) {
        let mut args = vec!["-n", &self.name, "addr", "add", cidr, "dev", dev];
        if nodad {
            args.push("nodad");
        }
        ip(&args);
        ip(&["-n", &self.name, "link", "set", dev, "up"]);
        ip(&["-n", &self.name, "link", "set", "lo", "up"]);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}
