//! Harness for the interop tests: private network namespaces, `ustack`
//! child processes, commands run inside a namespace, and the `/bytes/N`
//! pattern. Everything is torn down by Drop guards, also when a test panics.
//!
//! These tests need root (network namespaces, TAP devices). Without it they
//! FAIL with a message; they never skip.

#![allow(dead_code)] // each test file uses a different part of the harness

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub const USTACK_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
pub const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// serve's, ping's and get's default IPv6 addresses (ustack, kernel side).
pub const USTACK_IP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2);
pub const KERNEL_IP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1);
pub const BIN: &str = env!("CARGO_BIN_EXE_ustack");

/// `ustack ARGS` from this process's namespace (stdin closed): its output.
pub fn ustack(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ustack")
}

/// [`ustack`], which must succeed.
pub fn ustack_ok(args: &[&str]) -> Output {
    let out = ustack(args);
    assert!(
        out.status.success(),
        "ustack {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`ustack_ok`]'s standard output, as text.
pub fn stdout_ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&ustack_ok(args).stdout).into_owned()
}

/// `ustack capture --stack STACK [-c COUNT] -w FILE FILTER...`, once it
/// has said it listens: the capture and its stderr (the rest of it).
pub fn start_capture(
    stack: &str,
    file: &str,
    count: Option<u32>,
    filter: &[&str],
) -> (ChildGuard, std::process::ChildStderr) {
    let mut cmd = Command::new(BIN);
    cmd.args(["capture", "--stack", stack]);
    if let Some(c) = count {
        cmd.args(["-c", &c.to_string()]);
    }
    let mut cap = ChildGuard {
        child: cmd
            .args(["-w", file])
            .args(filter)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ustack capture"),
    };
    let mut err = cap.child.stderr.take().expect("stderr");
    let mut banner = [0u8; 22];
    err.read_exact(&mut banner).expect("capture banner");
    assert_eq!(&banner, b"ustack capture: listen");
    (cap, err)
}

/// [`ustack_ok`]'s standard output parsed as JSON (`--json` output).
pub fn json(args: &[&str]) -> serde_json::Value {
    let text = stdout_ok(args);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("ustack {args:?}: not JSON ({e}): {text}"))
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique short suffix: pid (mod 10^6) and a per-process counter.
pub fn unique() -> String {
    format!(
        "{}{}",
        std::process::id() % 1_000_000,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh directory `$TMPDIR/ustack-TAG-UNIQUE`, removed with everything
/// in it when dropped, also when the test panics.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("ustack-{tag}-{}", unique()));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir(path)
    }
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
    /// A path inside the directory.
    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The named network namespaces (`ip netns`) whose name passes `keep`:
/// what a benchmark left behind, when `keep` matches its names.
pub fn namespaces_matching(keep: impl Fn(&str) -> bool) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| keep(n))
                .collect()
        })
        .unwrap_or_default()
}

/// Run a command to completion, panicking with its stderr on failure.
pub fn must(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace that is deleted on drop.
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    pub fn new() -> NetNs {
        let name = format!("ut{}", unique());
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("cannot run ip(8): install iproute2");
        assert!(
            out.status.success(),
            "cannot create network namespace {name} (these tests need root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        must(Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]));
        NetNs { name }
    }

    /// A command that runs inside the namespace.
    pub fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, prog]);
        c
    }

    /// `bash -c SCRIPT` inside the namespace.
    pub fn sh(&self, script: &str) -> Output {
        self.cmd("bash")
            .args(["-c", script])
            .output()
            .expect("run bash")
    }

    /// Run `f` on a thread that has joined this namespace (for Rust clients
    /// on kernel sockets inside it).
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let file = File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        thread::spawn(move || {
            // SAFETY: setns on a valid namespace fd; it changes only the network
            // namespace of this new thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A child process killed (SIGTERM, then SIGKILL) on drop.
pub struct ChildGuard {
    pub child: Child,
}

impl ChildGuard {
    /// Wait for the child to exit on its own, at most `limit`; panics with
    /// `what` if it has not by then.
    pub fn exit_within(&mut self, limit: Duration, what: &str) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st;
            }
            assert!(t0.elapsed() < limit, "{what} did not exit within {limit:?}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait up to 10 s; returns the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(st)) = self.child.try_wait() {
            return Some(st);
        }
        let pid = libc::pid_t::try_from(self.child.id()).ok()?;
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for ChildGuard {
    /// SIGTERM first (at most 10 s, then SIGKILL), so that a `ustack`
    /// left running by a failing test stops as it would and removes its
    /// control endpoint's file from /dev/shm.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
        let _ = self.child.wait();
    }
}

/// `ustack serve` on its own TAP whose kernel side is in `ns`.
pub struct Serve {
    pub proc: ChildGuard,
    pub tap: String,
    pub banner: String,
    pub stderr: mpsc::Receiver<String>,
}

impl Serve {
    pub fn start(ns: &NetNs, extra: &[&str]) -> Serve {
        let tap = format!("ut{}", unique());
        let mut child = Command::new(BIN)
            .args(["serve", "--tap", &tap, "--netns", &ns.name])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ustack serve");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let mut guard = ChildGuard { child };
        let (etx, erx) = mpsc::channel();
        thread::spawn(move || {
            let mut s = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut s);
            let _ = etx.send(s);
        });
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(l)) = lines.next() {
                let _ = tx.send(l);
            }
            for _ in lines {}
        });
        let banner = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(_) => {
                guard.stop();
                let err = erx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
                panic!("ustack serve did not start: {err}");
            }
        };
        assert!(
            banner.contains("ustack serving on 10.77.0.2"),
            "unexpected banner: {banner}"
        );
        Serve {
            proc: guard,
            tap,
            banner,
            stderr: erx,
        }
    }

    /// SIGTERM; assert a clean exit 0 and return stderr.
    pub fn stop_clean(mut self) -> String {
        let st = self.proc.stop().expect("ustack serve exit status");
        let err = self
            .stderr
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default();
        assert!(st.success(), "ustack serve exited with {st}: {err}");
        assert!(!err.contains("panicked"), "ustack serve panicked: {err}");
        err
    }
}

/// SHA-256 of `len` bytes of the `/bytes/N` pattern (byte i = i % 251).
pub fn pattern_sha256(len: u64) -> String {
    let block: Vec<u8> = (0..251 * 256).map(|i| (i % 251) as u8).collect();
    let mut h = Sha256::new();
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        h.update(&block[..n]);
        left -= n as u64;
    }
    hex(&h.finalize())
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Deterministic pseudo-random bytes (xorshift64*), for transfers.
pub fn random_block(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Connect with retries (the service may still be starting), IPv4 or IPv6.
pub fn connect(addr: impl Into<SocketAddr>) -> TcpStream {
    let addr: SocketAddr = addr.into();
    let t0 = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => return s,
            Err(e) if t0.elapsed() < Duration::from_secs(10) => {
                eprintln!("connect {addr}: {e}; retrying");
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("cannot connect to {addr}: {e}"),
        }
    }
}

/// Send `total` bytes of pseudo-random data through the echo service at
/// `addr` (from the calling thread's namespace) and check that exactly the
/// same bytes come back. Returns seconds taken.
pub fn echo_transfer(addr: impl Into<SocketAddr>, total: usize, seed: u64) -> f64 {
    let block = random_block(seed, 1 << 20);
    let s = connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut w = s.try_clone().unwrap();
    let t0 = Instant::now();
    let wblock = block.clone();
    let writer = thread::spawn(move || {
        let mut h = Sha256::new();
        let mut left = total;
        let mut k = 0usize;
        while left > 0 {
            // Vary chunk sizes so segment boundaries move around.
            let n = left.min(1 + (k * 7919) % wblock.len());
            w.write_all(&wblock[..n]).expect("echo write");
            h.update(&wblock[..n]);
            left -= n;
            k += 1;
        }
        w.shutdown(std::net::Shutdown::Write).unwrap();
        hex(&h.finalize())
    });
    let mut r = s;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0usize;
    loop {
        let n = r.read(&mut buf).expect("echo read");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        got += n;
    }
    let sent_hash = writer.join().expect("writer");
    assert_eq!(got, total, "echo returned {got} of {total} bytes");
    assert_eq!(hex(&h.finalize()), sent_hash, "echoed bytes differ");
    t0.elapsed().as_secs_f64()
}

/// Run `curl` of `/bytes/N` in `ns` and check the body hash; returns seconds.
pub fn curl_bytes(ns: &NetNs, n: u64, max_time: u32) -> f64 {
    curl_bytes_from(ns, &USTACK_IP.to_string(), n, max_time)
}

/// [`curl_bytes`] over IPv6, from serve's IPv6 address (`curl -6`).
pub fn curl6_bytes(ns: &NetNs, n: u64, max_time: u32) -> f64 {
    curl_bytes_from(ns, &format!("[{USTACK_IP6}]"), n, max_time)
}

/// `curl` of `http://HOST/bytes/N` in `ns` (HOST an IPv4 address or an
/// IPv6 one in brackets, which makes it `curl -6 -g`); checks the body
/// hash and returns seconds.
pub fn curl_bytes_from(ns: &NetNs, host: &str, n: u64, max_time: u32) -> f64 {
    let t0 = Instant::now();
    let flags = if host.starts_with('[') { "-6 -g " } else { "" };
    let out = ns.sh(&format!(
        "set -o pipefail; curl {flags}-sS --fail --max-time {max_time} 'http://{host}/bytes/{n}' | sha256sum"
    ));
    let secs = t0.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8_lossy(&out.stdout);
    let got = got.split_whitespace().next().unwrap_or("");
    assert_eq!(
        got,
        pattern_sha256(n),
        "body of /bytes/{n} from {host} differs"
    );
    secs
}

/// serve's IPv6 address, port `port`.
pub fn v6(port: u16) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(USTACK_IP6, port, 0, 0))
}

/// Wait (bounded) until ustack answers ICMPv6 echo at its default address:
/// the synchronisation point for IPv6 clients (the kernel side's address
/// and neighbour entry are ready).
pub fn wait_ipv6_up(ns: &NetNs) {
    let t0 = Instant::now();
    loop {
        let out = ns
            .cmd("ping")
            .args(["-6", "-c", "1", "-W", "1", &USTACK_IP6.to_string()])
            .output()
            .expect("run ping -6");
        if out.status.success() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "ustack never answered at {USTACK_IP6}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// Add netem impairments on the kernel side of `tap` (inside `ns`).
pub fn netem(ns: &NetNs, tap: &str, spec: &str) {
    let out = ns
        .cmd("tc")
        .args(["qdisc", "add", "dev", tap, "root", "netem"])
        .args(spec.split_whitespace())
        .output()
        .expect("cannot run tc (install iproute2)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tc qdisc add dev {tap} root netem {spec}: {err}{}",
        if err.contains("qdisc kind is unknown") {
            " -- this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM / sch_netem module)"
        } else {
            ""
        }
    );
}

// ------------------------------------------------------------ --impair

/// The impairments of issue 2, as `ustack --impair` spells them.
pub const IMPAIR: &str = "loss=5%,delay=10ms,reorder=25%,duplicate=1%";

pub fn impair_arg(seed: u64) -> String {
    format!("{IMPAIR},seed={seed}")
}

/// The impairment counters ustack prints at exit for one direction
/// ("rx" = kernel -> ustack, "tx" = ustack -> kernel).
pub fn impair_counters(stderr: &str, dir: &str) -> HashMap<String, u64> {
    let prefix = format!("ustack: impaired {dir} ");
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no '{prefix}' line in ustack's stderr: {stderr}"));
    let (_, fields) = line
        .split_once("): ")
        .unwrap_or_else(|| panic!("malformed counters line: {line}"));
    let words: Vec<&str> = fields.split_whitespace().collect();
    words
        .chunks(2)
        .filter_map(|kv| match kv {
            [k, v] => v.parse().ok().map(|v| (k.to_string(), v)),
            _ => None,
        })
        .collect()
}

/// Both directions really were impaired: frames lost, reordered and (in
/// the busy direction) duplicated.
pub fn assert_impaired(stderr: &str) {
    for dir in ["rx", "tx"] {
        let c = impair_counters(stderr, dir);
        let get = |k: &str| c.get(k).copied().unwrap_or(0);
        assert!(get("frames") > 200, "{dir}: too few frames: {c:?}");
        assert!(get("lost") > 0, "{dir}: nothing lost: {c:?}");
        assert!(get("reordered") > 0, "{dir}: nothing reordered: {c:?}");
        // Loss near 5%: a sanity check that the spec was applied as given.
        let frac = get("lost") as f64 / get("frames") as f64;
        assert!((0.02..0.09).contains(&frac), "{dir}: loss {frac:.3}: {c:?}");
    }
    let rx = impair_counters(stderr, "rx");
    let tx = impair_counters(stderr, "tx");
    assert!(
        rx.get("duplicated").copied().unwrap_or(0) + tx.get("duplicated").copied().unwrap_or(0) > 0,
        "nothing duplicated: {rx:?} {tx:?}"
    );
}

/// `serve`'s status page with its counters (`curl http://ustack/`).
pub fn status_page(ns: &NetNs) -> String {
    let out = ns.sh(&format!("curl -s --max-time 30 http://{USTACK_IP}/"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A counter from the status page (only non-zero ones are listed: 0 if absent).
pub fn counter_on(page: &str, name: &str) -> u64 {
    page.lines()
        .filter_map(|l| l.trim().strip_prefix(name))
        .find_map(|rest| rest.trim().parse().ok())
        .unwrap_or(0)
}

/// 100 MB each way (curl, then the echo port) through a lightly impaired
/// link, with the TAP's offloads (64 KB GSO/TSO super-frames, each lost,
/// reordered or duplicated whole) and without them (one MTU per frame),
/// over IPv4 or IPv6: byte-exact, GSO frames both ways with the offloads
/// and none without, and loss and reordering both ways. `seed` picks the
/// impairment's decisions (seed, seed + 1) and the echo data.
pub fn hundred_megabytes_impaired_with_and_without_offloads(ipv6: bool, seed: u64) {
    const LIGHT: &str = "loss=0.5%,delay=1ms,reorder=5%,duplicate=0.5%";
    let family = if ipv6 { "IPv6" } else { "IPv4" };
    for (i, flags) in [&[][..], &["--no-offload"][..]].iter().enumerate() {
        let t0 = Instant::now();
        let ns = NetNs::new();
        let spec = format!("{LIGHT},seed={}", seed + i as u64);
        let mut args = flags.to_vec();
        args.extend(["--impair", &spec]);
        let srv = Serve::start(&ns, &args);
        let (secs, echo) = if ipv6 {
            wait_ipv6_up(&ns);
            (curl6_bytes(&ns, 100 << 20, 300), v6(7))
        } else {
            (
                curl_bytes(&ns, 100 << 20, 300),
                SocketAddr::from((USTACK_IP, 7)),
            )
        };
        eprintln!("light impairment {family} {flags:?}: curl 100 MiB in {secs:.1} s");
        let secs = ns
            .spawn(move || echo_transfer(echo, 100 << 20, seed))
            .join()
            .expect("echo client");
        eprintln!("light impairment {family} {flags:?}: echo 100 MiB each way in {secs:.1} s");
        let page = status_page(&ns);
        let gso = (
            counter_on(&page, "LinkOutGsoFrames"),
            counter_on(&page, "LinkInGsoFrames"),
        );
        if flags.is_empty() {
            assert!(gso.0 > 0 && gso.1 > 0, "no GSO frames: {page}");
        } else {
            assert_eq!(gso, (0, 0), "GSO frames with --no-offload: {page}");
        }
        let err = srv.stop_clean();
        for dir in ["rx", "tx"] {
            let c = impair_counters(&err, dir);
            let get = |k: &str| c.get(k).copied().unwrap_or(0);
            assert!(get("lost") > 0, "{flags:?} {dir}: nothing lost: {c:?}");
            assert!(
                get("reordered") > 0,
                "{flags:?} {dir}: nothing reordered: {c:?}"
            );
        }
        eprintln!(
            "light impairment {family} {flags:?}: took {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
}

/// Python's http.server in `ns` on port 8080, bound to `bind` (`0.0.0.0`
/// or `::`), serving `dir`; returned once it listens (at most 15 s).
pub fn kernel_http_server(ns: &NetNs, dir: &std::path::Path, bind: &str) -> ChildGuard {
    let child = ns
        .cmd("python3")
        .args(["-m", "http.server", "8080", "--bind", bind, "--directory"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 http.server");
    let guard = ChildGuard { child };
    let t0 = Instant::now();
    while !ns
        .sh("ss -ltn 'sport = :8080' | grep -q LISTEN")
        .status
        .success()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "http.server did not start"
        );
        thread::sleep(Duration::from_millis(100));
    }
    guard
}

/// ping (`-6` for an IPv6 `addr`) serve 20 times with 3000-byte payloads
/// (3 fragments each way) through `impair_arg`'s link: with 5% loss per
/// frame and direction about a quarter go missing, but at least 8 come
/// back, none with wrong data, and most RTTs show the 10 ms delay in each
/// direction (frames that jump the queue skip it, but all 3 fragments of
/// a datagram rarely do).
pub fn ping_fragments_impaired(ns: &NetNs, addr: std::net::IpAddr) {
    let mut ping = ns.cmd("ping");
    if addr.is_ipv6() {
        ping.arg("-6");
    }
    let out = ping
        .args(["-c", "20", "-i", "0.05", "-W", "2", "-s", "3000"])
        .arg(addr.to_string())
        .output()
        .expect("ping");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let received: u32 = text
        .split(", ")
        .find_map(|p| p.strip_suffix(" received"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary: {text}"));
    assert!(received >= 8, "only {received} of 20 replies: {text}");
    assert!(!text.contains("wrong data"), "{text}");
    let rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split(" time=").nth(1))
        .filter_map(|t| t.trim_end_matches(" ms").parse().ok())
        .collect();
    let slow = rtts.iter().filter(|&&t| t >= 19.0).count();
    assert!(
        slow * 2 >= rtts.len(),
        "most RTTs should include the 2 x 10 ms delay: {text}"
    );
}
