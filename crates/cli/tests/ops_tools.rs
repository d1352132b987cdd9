//! What an operator used to Linux's tools types, against a live `ustack
//! serve`: nstat's counter names and flags, sysctl's refusals, ss's and
//! ps's columns; and `ustack ping` stopping and pacing as ping(8) does.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddrV4;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// One request on a new connection to serve's HTTP port from `ns`, the
/// whole answer (within 10 s).
fn http_raw(ns: &NetNs, req: &'static str) -> String {
    ns.spawn(move || {
        let mut s = connect(SocketAddrV4::new(USTACK_IP, 80));
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(req.as_bytes()).expect("request");
        let mut out = Vec::new();
        let r = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out).into_owned();
        assert!(r.is_ok(), "{req:?}: no end of answer ({r:?}): {out}");
        out
    })
    .join()
    .expect("client")
}

#[test]
fn nstat_sysctl_ss_ps_and_http_as_linux_users_expect() {
    let ns = NetNs::new();
    let name = format!("opst-{}", unique());
    let srv = Serve::start(&ns, &["--name", &name]);
    let st = ["--stack", name.as_str()];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(st.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: &[&str]| ustack(&with(args).iter().map(String::as_str).collect::<Vec<_>>());
    let ok = |args: &[&str]| stdout_ok(&with(args).iter().map(String::as_str).collect::<Vec<_>>());
    let js = |args: &[&str]| json(&with(args).iter().map(String::as_str).collect::<Vec<_>>());

    // ps, before any connection: the TCP and ESTAB columns count TCP
    // sockets (serve's four listeners), not its two UDP echo sockets too.
    let ps = json(&["ps", "--json"]);
    let me = ps
        .as_array()
        .expect("array")
        .iter()
        .find(|s| s["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} not in ps: {ps}"));
    assert_eq!(me["tcp_sockets"].as_u64(), Some(4), "{me}");

    // nstat: TCP counters outside Linux's TCP MIB are TcpExt's, as in
    // `nstat -az 'TcpExt*'` on Linux (they were printed as TcpTCPTimeouts).
    let ext = js(&["nstat", "--json", "-a", "-z", "TcpExt*"]);
    let ext = ext.as_object().expect("object");
    for n in [
        "TcpExtTCPTimeouts",
        "TcpExtDelayedACKs",
        "TcpExtListenDrops",
    ] {
        assert!(ext.contains_key(n), "no {n}: {ext:?}");
    }
    let all = js(&["nstat", "--json", "-a", "-z"]);
    let names: Vec<&String> = all.as_object().expect("object").keys().collect();
    assert!(
        !names.iter().any(|n| n.starts_with("TcpTCP")),
        "TcpTCP* names: {names:?}"
    );
    // Patterns match without regard to case, as nstat's.
    let lower = js(&["nstat", "--json", "-a", "-z", "tcpactive*"]);
    assert!(lower.get("TcpActiveOpens").is_some(), "{lower}");
    // `nstat -n` takes the history and prints nothing; then traffic; then
    // `nstat` shows just that traffic. `-j` is `--json`.
    assert_eq!(ok(&["nstat", "-n"]), "");
    let page = http_raw(&ns, "GET / HTTP/1.0\r\n\r\n");
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    let d = js(&["nstat", "-j", "TcpPassiveOpens"]);
    assert_eq!(
        d.get("TcpPassiveOpens").and_then(Value::as_u64),
        Some(1),
        "{d}"
    );
    // -r: values since the start, and they become the history.
    let r = js(&["nstat", "-r", "-j", "TcpPassiveOpens"]);
    assert!(
        r.get("TcpPassiveOpens")
            .and_then(Value::as_u64)
            .is_some_and(|v| v >= 1),
        "{r}"
    );
    let after = js(&["nstat", "-j", "TcpPassiveOpens"]);
    assert!(after.get("TcpPassiveOpens").is_none(), "{after}");

    // sysctl: a value Linux refuses is refused with a clear error, exit 1,
    // and nothing changes (tcp_syn_retries=0 became 1, 256 became 127).
    for (set, now) in [
        ("net.ipv4.tcp_syn_retries=0", "net.ipv4.tcp_syn_retries = 6"),
        (
            "net.ipv4.tcp_syn_retries=256",
            "net.ipv4.tcp_syn_retries = 6",
        ),
        (
            "net.ipv4.tcp_rmem=0 0 0",
            "net.ipv4.tcp_rmem = 4096\t131072\t262144",
        ),
        (
            "net.ipv4.tcp_fin_timeout=99999999999",
            "net.ipv4.tcp_fin_timeout = 60",
        ),
    ] {
        let out = run(&["sysctl", "-w", set, "net.ipv4.tcp_sack=0"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{set}: {err}");
        assert!(err.contains("Linux takes"), "{set}: {err}");
        let name = set.split('=').next().unwrap_or_default();
        assert_eq!(ok(&["sysctl", name]).trim_end(), now, "{set} changed it");
        assert_eq!(ok(&["sysctl", "-n", "net.ipv4.tcp_sack"]), "1\n", "{set}");
    }
    // sysctl(8)'s -n (values only) and -q (quiet changes).
    assert_eq!(ok(&["sysctl", "-q", "net.ipv4.tcp_syn_retries=127"]), "");
    assert_eq!(ok(&["sysctl", "-n", "net.ipv4.tcp_syn_retries"]), "127\n");

    // ss -tua shows TCP and UDP: each row names its protocol, as ss(8)'s
    // Netid column does (a connected UDP socket is ESTAB too).
    let tua = ok(&["ss", "-tua"]);
    let mut lines = tua.lines();
    assert!(
        lines.next().is_some_and(|h| h.starts_with("Netid State")),
        "{tua}"
    );
    assert!(
        tua.lines()
            .any(|l| l.starts_with("udp") && l.contains("UNCONN") && l.contains("10.77.0.2:7")),
        "{tua}"
    );
    assert!(
        tua.lines()
            .any(|l| l.starts_with("tcp") && l.contains("LISTEN") && l.contains("*:80")),
        "{tua}"
    );
    // One protocol: no Netid column, as ss(8).
    assert!(ok(&["ss", "-tl"]).starts_with("State "));

    // HTTP: a request with bare LF line ends (`printf 'GET / HTTP/1.0\n\n'
    // | nc`) is answered (it waited forever), and so is the absolute form
    // (it was a 404).
    let bare = http_raw(&ns, "GET /bytes/3 HTTP/1.0\n\n");
    assert!(bare.starts_with("HTTP/1.1 200 OK\r\n"), "{bare}");
    let abs = http_raw(
        &ns,
        "GET http://10.77.0.2/bytes/4 HTTP/1.1\r\nHost: 10.77.0.2\r\nConnection: close\r\n\r\n",
    );
    assert!(
        abs.starts_with("HTTP/1.1 200 OK\r\n") && abs.contains("Content-Length: 4\r\n"),
        "{abs}"
    );
    srv.stop_clean();
}

/// `ustack ping ARGS` on its own TAP into `ns`, its stdout read line by
/// line as it comes.
fn ping(ns: &NetNs, args: &[&str]) -> (ChildGuard, std::sync::mpsc::Receiver<String>) {
    let tap = format!("ut{}", unique());
    let mut child = Command::new(BIN)
        .args(["ping", "--tap", &tap, "--netns", &ns.name])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ustack ping");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    (ChildGuard { child }, rx)
}

#[test]
fn ping_stops_at_once_on_ctrl_c_while_it_awaits_a_reply() {
    // Nobody answers at .99 and each reply is awaited 60 s: Ctrl-C used to
    // wait for that to pass before ping stopped.
    let ns = NetNs::new();
    let (mut p, lines) = ping(&ns, &["-W", "60", "10.77.0.99"]);
    let banner = lines
        .recv_timeout(Duration::from_secs(20))
        .expect("ping started");
    assert!(banner.starts_with("PING 10.77.0.99"), "{banner}");
    let pid = libc::pid_t::try_from(p.child.id()).expect("pid");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let st = p.exit_within(Duration::from_secs(5), "ping after SIGINT");
    assert_eq!(st.code(), Some(1), "no reply: exit 1");
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(
        rest.iter()
            .any(|l| l == "--- 10.77.0.99 ping statistics ---"),
        "{rest:?}"
    );
}

#[test]
fn ping_sends_every_interval_while_replies_are_missing() {
    // As ping(8): a request every -i whether or not the previous one was
    // answered. Five requests 0.1 s apart, each given up on after 2 s,
    // take about 2.4 s (they took 5 times 2 s, one after the other).
    let ns = NetNs::new();
    let t0 = Instant::now();
    let (mut p, lines) = ping(&ns, &["-c", "5", "-i", "0.1", "-W", "2", "10.77.0.99"]);
    let st = p.exit_within(Duration::from_secs(60), "ping -c 5");
    let took = t0.elapsed();
    let out: Vec<String> = lines.try_iter().collect();
    assert_eq!(st.code(), Some(1), "{out:?}");
    assert!(
        out.iter()
            .any(|l| l.starts_with("5 packets transmitted, 0 received, 100% packet loss")),
        "{out:?}"
    );
    assert_eq!(
        out.iter().filter(|l| l.starts_with("no reply")).count(),
        5,
        "{out:?}"
    );
    assert!(took < Duration::from_secs(6), "took {took:?}: {out:?}");

    // And with replies, -c 0 is refused as ping(8) refuses it.
    let out = Command::new(BIN)
        .args(["ping", "-c", "0", "10.77.0.1"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// The frames of a pcap file (after its 24-byte header).
fn pcap_frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "no pcap header in {}", path.display());
    let mut at = 24;
    let mut frames = Vec::new();
    while let Some(h) = b.get(at..at + 16) {
        let caplen = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let f = b
            .get(at + 16..at + 16 + caplen)
            .unwrap_or_else(|| panic!("a record cut short in {}", path.display()));
        frames.push(f.to_vec());
        at += 16 + caplen;
    }
    frames
}

/// Whether `f` is an IPv4 TCP segment from source port `sport` with FIN.
fn is_fin_from(f: &[u8], sport: u16) -> bool {
    if f.len() < 34 || f[12..14] != [0x08, 0x00] || f[23] != 6 {
        return false;
    }
    let tcp = 14 + usize::from(f[14] & 0x0f) * 4;
    f.get(tcp..tcp + 14)
        .is_some_and(|t| u16::from_be_bytes([t[0], t[1]]) == sport && t[13] & 0x01 != 0)
}

#[test]
fn capture_stopped_by_ctrl_c_right_after_traffic_keeps_every_frame() {
    // Ctrl-C used to end the capture without reading what the stack had
    // already put in the ring: interrupted within the reader's polling
    // interval (up to 20 ms) after a transfer, the pcap held none of it.
    let ns = NetNs::new();
    let name = format!("capint-{}", unique());
    let srv = Serve::start(&ns, &["--name", &name]);
    let dir = TempDir::new("capint");
    for round in 0..3 {
        let file = dir.join(&format!("c{round}.pcap"));
        let (mut cap, mut err) =
            start_capture(&name, &file.to_string_lossy(), None, &["port", "80"]);
        // The whole answer came back, to the server's FIN: the stack
        // recorded each of its frames before it sent it.
        let answer = http_raw(&ns, "GET /bytes/1000 HTTP/1.0\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        let pid = libc::pid_t::try_from(cap.child.id()).expect("pid");
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        let st = cap.exit_within(Duration::from_secs(10), "capture after SIGINT");
        assert!(st.success(), "capture: {st}");
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        let frames = pcap_frames(&file);
        let records = frames.len();
        assert!(
            frames.iter().any(|f| is_fin_from(f, 80)),
            "round {round}: no FIN from port 80 in {records} frames: {rest}"
        );
        assert!(
            rest.contains(&format!("{records} frames captured")),
            "round {round}: {records} in the file: {rest}"
        );
    }
    srv.stop_clean();
}

/// Wait (at most 10 s) until process `pid` is stopped (state `T`).
fn wait_stopped(pid: u32) {
    let t0 = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        // "PID (COMM) STATE ...": the state follows the last ')'.
        let state = stat.rsplit_once(')').map(|(_, r)| r.trim_start());
        if state.is_some_and(|r| r.starts_with('T')) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{pid} not stopped: {stat}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGCONT `pid` when dropped, also when the test fails.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}

#[test]
fn ps_waits_for_stuck_stacks_once_not_once_each() {
    // Two stacks that do not answer (stopped with SIGSTOP) used to cost
    // ps its 10 s wait for each, one after the other.
    let (ns1, ns2) = (NetNs::new(), NetNs::new());
    let names = [
        format!("stuck1-{}", unique()),
        format!("stuck2-{}", unique()),
    ];
    let s1 = Serve::start(&ns1, &["--name", &names[0]]);
    let s2 = Serve::start(&ns2, &["--name", &names[1]]);
    let mut resume = Vec::new();
    for s in [&s1, &s2] {
        let pid = s.proc.child.id();
        // SAFETY: signalling our own child.
        assert_eq!(
            unsafe { libc::kill(libc::pid_t::try_from(pid).expect("pid"), libc::SIGSTOP) },
            0
        );
        resume.push(Resume(pid));
        wait_stopped(pid);
    }
    let t0 = Instant::now();
    let out = ustack(&["ps"]);
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for n in &names {
        assert!(
            err.contains(&format!("stack {n:?} did not answer")),
            "{err}"
        );
    }
    assert!(took < Duration::from_secs(15), "ps took {took:?}: {err}");
    drop(resume);
    s1.stop_clean();
    s2.stop_clean();
}

#[test]
fn a_stack_dropped_by_a_failing_test_leaves_no_control_file() {
    // The harness killed what a failing test left running with SIGKILL,
    // so each failed serve left its control endpoint's file in /dev/shm
    // (a sparse 400 MB file each). Dropped, it now gets SIGTERM first and
    // removes its file as it stops.
    let ns = NetNs::new();
    let name = format!("dropped-{}", unique());
    let file = format!("/dev/shm/ustack-ipc-ctl.{name}");
    let srv = Serve::start(&ns, &["--name", &name]);
    assert!(std::path::Path::new(&file).exists(), "no {file}");
    drop(srv);
    assert!(!std::path::Path::new(&file).exists(), "{file} left behind");
}
