//! `ustack run`'s relay gives up its user once set up (issue 14 item 5):
//! it runs as nobody when root starts it, as the invoking user under sudo,
//! as `--run-as` says; the operator still reaches its control endpoint,
//! signals still reach the command (which runs as root) and its exit status
//! is still reported, and a port below 1024 still binds.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

/// How long a step may take before the test fails.
const STEP: Duration = Duration::from_secs(30);

/// A `ustack run` whose command's output lines arrive on `lines`.
struct Run {
    guard: ChildGuard,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    err: std::thread::JoinHandle<String>,
}

impl Run {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(BIN);
        cmd.arg("run")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("SUDO_UID")
            .env_remove("SUDO_GID");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut guard = ChildGuard {
            child: cmd.spawn().expect("spawn ustack run"),
        };
        let out = guard.child.stdout.take().expect("stdout");
        let mut err = guard.child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Run {
            guard,
            lines,
            seen: Vec::new(),
            err,
        }
    }

    fn pid(&self) -> u32 {
        self.guard.child.id()
    }

    /// Wait for the command to print `want` (a whole line).
    fn expect_line(&mut self, want: &str) {
        let t0 = Instant::now();
        while !self.seen.iter().any(|l| l == want) {
            let left = STEP.saturating_sub(t0.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("no line {want:?} from the command; saw {:?}", self.seen),
            }
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.guard.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write to the command");
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid");
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill");
    }

    /// Wait for ustack to exit; its status, the command's remaining output
    /// lines and ustack's stderr.
    fn finish(mut self) -> (ExitStatus, Vec<String>, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = self.guard.child.try_wait().expect("wait") {
                break st;
            }
            assert!(t0.elapsed() < STEP, "ustack run did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        self.seen.extend(self.lines.try_iter());
        let err = self.err.join().unwrap_or_default();
        (status, self.seen, err)
    }
}

/// A field of /proc/PID/status, whitespace-separated.
fn status_field(pid: u32, key: &str) -> Vec<String> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    st.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_else(|| panic!("no {key} in\n{st}"))
}

fn ids(pid: u32) -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        status_field(pid, "Uid:"),
        status_field(pid, "Gid:"),
        status_field(pid, "Groups:"),
    )
}

fn cap_eff(pid: u32) -> u64 {
    u64::from_str_radix(&status_field(pid, "CapEff:")[0], 16).expect("CapEff")
}

/// An id from the system's databases (`getent`), or 65534.
fn db_id(db: &str, names: &[&str]) -> u32 {
    for n in names {
        if let Ok(o) = Command::new("getent").args([db, n]).output() {
            let line = String::from_utf8_lossy(&o.stdout).to_string();
            if let Some(id) = line.split(':').nth(2).and_then(|s| s.trim().parse().ok()) {
                return id;
            }
        }
    }
    65534
}

fn nobody() -> (String, String) {
    (
        db_id("passwd", &["nobody"]).to_string(),
        db_id("group", &["nogroup", "nobody"]).to_string(),
    )
}

fn ustack_as(uid: Option<(u32, u32)>, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    if let Some((u, g)) = uid {
        c.uid(u).gid(g);
    }
    c.output().expect("run ustack")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn domain_file(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/dev/shm/ustack-ipc-ctl.{name}"))
}

#[test]
fn started_by_root_the_relay_runs_as_nobody_and_root_still_operates_it() {
    let name = format!("priv-{}", unique());
    let mut run = Run::start(
        &[
            "--name",
            &name,
            "--",
            "sh",
            "-c",
            "echo uid=$(id -u); echo ready; read x; ping -c 1 -W 5 10.0.2.2 >/dev/null; \
             read y; exit 5",
        ],
        &[],
    );
    run.expect_line("uid=0");
    run.expect_line("ready");
    let (u, g) = nobody();
    let (uids, gids, groups) = ids(run.pid());
    assert_eq!(uids, vec![u.clone(); 4], "real, effective, saved, fs uid");
    assert_eq!(gids, vec![g.clone(); 4]);
    assert_eq!(groups, vec![g.clone()], "no other group");
    assert_eq!(cap_eff(run.pid()), 0x400, "only CAP_NET_BIND_SERVICE");
    assert_eq!(status_field(run.pid(), "NoNewPrivs:"), vec!["1"]);
    // Not dumpable: another process running as nobody cannot read its
    // memory map (nor trace it).
    let nob: u32 = u.parse().expect("uid");
    let ngid: u32 = g.parse().expect("gid");
    let maps = format!("/proc/{}/maps", run.pid());
    let peek = Command::new("cat")
        .arg(&maps)
        .uid(nob)
        .gid(ngid)
        .output()
        .expect("cat");
    assert!(!peek.status.success(), "nobody read {maps}");
    // The control endpoint's file was made before the change: root's, 0600,
    // so another process running as nobody cannot operate the relay.
    let md = std::fs::metadata(domain_file(&name)).expect("the control endpoint's file");
    assert_eq!(md.uid(), 0);
    assert_eq!(md.mode() & 0o777, 0o600);
    let other = ustack_as(Some((nob, ngid)), &["nstat", "--stack", &name]);
    assert!(!other.status.success(), "nobody operated the stack");
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    // Root operates it.
    assert!(ok(&ustack_as(None, &["ps"])).contains(&name));
    assert!(ok(&ustack_as(None, &["nstat", "-a", "--stack", &name]))
        .contains(&format!("#ustack {name}")));
    ok(&ustack_as(None, &["ss", "-a", "--stack", &name]));
    ok(&ustack_as(None, &["ports", "--stack", &name]));
    // A live capture, as root: the command pings the gateway once it runs.
    let pcap_dir = TempDir::new("priv");
    let pcap = pcap_dir.join(&format!("{name}.pcap"));
    let pcap_s = pcap.to_string_lossy().to_string();
    let (mut cap, mut cap_err) = start_capture(&name, &pcap_s, Some(1), &[]);
    run.send("x");
    let t0 = Instant::now();
    let cap_status = loop {
        if let Some(st) = cap.child.try_wait().expect("wait") {
            break st;
        }
        assert!(t0.elapsed() < STEP, "capture did not stop after -c 1");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    let _ = cap_err.read_to_string(&mut rest);
    assert!(cap_status.success(), "{rest}");
    assert!(rest.contains("1 frames captured"), "{rest}");
    assert!(std::fs::metadata(&pcap).map_or(0, |m| m.len()) > 24);
    drop(pcap_dir);
    run.send("y");
    let (status, _, err) = run.finish();
    assert_eq!(status.code(), Some(5), "{err}");
    // The relay (nobody) could not remove root's file; the sandbox's init did.
    assert!(
        !domain_file(&name).exists(),
        "the control file is left behind"
    );
}

#[test]
fn under_sudo_the_relay_runs_as_the_invoking_user_who_operates_it() {
    let name = format!("sudo-{}", unique());
    let uid = 40_000 + std::process::id() % 10_000;
    let gid = uid + 1;
    let (us, gs) = (uid.to_string(), gid.to_string());
    let mut run = Run::start(
        &[
            "--name",
            &name,
            "--",
            "sh",
            "-c",
            "echo uid=$(id -u); echo ready; read x",
        ],
        &[("SUDO_UID", &us), ("SUDO_GID", &gs)],
    );
    run.expect_line("uid=0");
    run.expect_line("ready");
    let (uids, gids, groups) = ids(run.pid());
    assert_eq!(uids, vec![us.clone(); 4]);
    assert_eq!(gids, vec![gs.clone(); 4]);
    assert_eq!(groups, vec![gs.clone()]);
    assert_eq!(cap_eff(run.pid()), 0x400);
    assert_eq!(
        std::fs::metadata(domain_file(&name)).expect("file").uid(),
        uid
    );
    // The invoking user operates it without root; another user may not.
    let mine = ustack_as(Some((uid, gid)), &["nstat", "-a", "--stack", &name]);
    assert!(ok(&mine).contains(&format!("#ustack {name}")));
    let other = ustack_as(Some((uid + 2, gid)), &["nstat", "--stack", &name]);
    assert!(!other.status.success());
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    run.send("x");
    let (status, _, err) = run.finish();
    assert!(status.success(), "{err}");
    assert!(
        !domain_file(&name).exists(),
        "the control file is left behind"
    );
}

#[test]
fn run_as_chooses_the_user_and_root_keeps_root() {
    let name = format!("runas-{}", unique());
    let mut run = Run::start(
        &[
            "--name",
            &name,
            "--run-as",
            "4242:4343",
            "--",
            "sh",
            "-c",
            "echo ready; read x",
        ],
        &[("SUDO_UID", "1000"), ("SUDO_GID", "1000")],
    );
    run.expect_line("ready");
    let (uids, gids, _) = ids(run.pid());
    assert_eq!(uids, vec!["4242"; 4]);
    assert_eq!(gids, vec!["4343"; 4]);
    run.send("x");
    let (status, _, err) = run.finish();
    assert!(status.success(), "{err}");

    let name = format!("runas-{}", unique());
    let mut run = Run::start(
        &[
            "--name",
            &name,
            "--run-as",
            "root",
            "--",
            "sh",
            "-c",
            "echo ready; read x",
        ],
        &[],
    );
    run.expect_line("ready");
    let (uids, _, _) = ids(run.pid());
    assert_eq!(uids, vec!["0"; 4]);
    // Root, but with the capabilities given up all the same.
    assert_eq!(cap_eff(run.pid()), 0x400);
    run.send("x");
    let (status, _, err) = run.finish();
    assert!(status.success(), "{err}");

    let bad = ustack_as(None, &["run", "--run-as", "no-such-user-x", "--", "true"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no user \"no-such-user-x\""),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn signals_reach_a_root_command_from_a_relay_running_as_nobody() {
    // SIGTERM and SIGINT sent to ustack (kill(2), as a service manager or
    // `kill` does) reach the command, which handles them; its exit status
    // is ustack's.
    for (sig, trap, code) in [(libc::SIGTERM, "TERM", 42), (libc::SIGINT, "INT", 43)] {
        let name = format!("sig-{}", unique());
        let script = format!(
            "trap 'echo got-{trap}; exit {code}' {trap}; echo ready; \
             while :; do sleep 0.05; done"
        );
        let mut run = Run::start(&["--name", &name, "--", "sh", "-c", &script], &[]);
        run.expect_line("ready");
        assert_eq!(ids(run.pid()).0[0], nobody().0, "the relay is nobody");
        run.signal(sig);
        let (status, lines, err) = run.finish();
        assert_eq!(status.code(), Some(code), "{lines:?} {err}");
        assert!(
            lines.iter().any(|l| *l == format!("got-{trap}")),
            "{lines:?}"
        );
    }
    // A command that does not handle it dies of it: 128 + 15.
    let mut run = Run::start(&["--", "sh", "-c", "echo ready; exec sleep 30"], &[]);
    run.expect_line("ready");
    run.signal(libc::SIGTERM);
    let (status, _, err) = run.finish();
    assert_eq!(status.code(), Some(143), "{err}");
}

/// A free TCP port below 1024 on 127.0.0.1 (we are root).
fn low_port(skip: u16) -> u16 {
    let start = 900 + (std::process::id() % 50) as u16 * 2;
    (start..1024)
        .chain(600..start)
        .find(|&p| p != skip && std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("a free port below 1024")
}

fn fetch(port: u16) -> String {
    let mut s = connect(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        port,
    ));
    s.set_read_timeout(Some(STEP)).expect("timeout");
    let mut got = String::new();
    let _ = s.read_to_string(&mut got);
    got.trim().to_string()
}

#[test]
fn a_port_below_1024_forwards_with_the_relay_running_as_nobody() {
    let name = format!("low-{}", unique());
    let p1 = low_port(0);
    let p2 = low_port(p1);
    let publish = format!("127.0.0.1:{p1}:8080");
    let script = "socat TCP-LISTEN:8080,reuseaddr,fork SYSTEM:'echo hello-from-guest' & \
         for i in $(seq 200); do ss -ltn | grep -q ':8080 ' && break; sleep 0.05; done; \
         echo ready; read x; kill %1";
    let mut run = Run::start(
        &["--name", &name, "-p", &publish, "--", "bash", "-c", script],
        &[],
    );
    run.expect_line("ready");
    assert_eq!(ids(run.pid()).0[0], nobody().0, "the relay is nobody");
    assert_eq!(fetch(p1), "hello-from-guest");
    // Added while running, by the relay that is nobody by now.
    let spec = format!("127.0.0.1:{p2}:8080");
    ok(&ustack_as(None, &["ports", "--stack", &name, "add", &spec]));
    assert_eq!(fetch(p2), "hello-from-guest");
    run.send("x");
    let (status, _, err) = run.finish();
    assert!(status.success(), "{err}");
}

#[test]
fn ctrl_c_on_a_terminal_reaches_the_command_once() {
    // ustack in the foreground of a terminal (a pty that `script` holds):
    // Ctrl-C goes to the whole foreground process group; the relay (nobody)
    // and the sandbox's init let it pass, the command handles it. `script`
    // starts ustack through `$SHELL -c`: `exec` makes ustack itself the
    // terminal's foreground process, as when a user types the command (dash
    // would otherwise stay in between, and die of the Ctrl-C itself).
    let inner = format!(
        "exec {BIN} run -- sh -c 'trap \"echo got-int; exit 7\" INT; echo ready; \
         while :; do sleep 0.05; done'"
    );
    let mut guard = ChildGuard {
        child: Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .env("SHELL", "/bin/sh")
            .env_remove("SUDO_UID")
            .env_remove("SUDO_GID")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn script (util-linux)"),
    };
    let out = guard.child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while !seen.iter().any(|l: &String| l.trim() == "ready") {
        match lines.recv_timeout(STEP.saturating_sub(t0.elapsed())) {
            Ok(l) => seen.push(l),
            Err(_) => panic!("the command never got ready: {seen:?}"),
        }
    }
    let stdin = guard.child.stdin.as_mut().expect("stdin");
    stdin.write_all(b"\x03").expect("Ctrl-C");
    stdin.flush().expect("flush");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = guard.child.try_wait().expect("wait") {
            break st;
        }
        assert!(t0.elapsed() < STEP, "ustack run did not exit on Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    seen.extend(lines.recv_timeout(Duration::from_secs(5)));
    seen.extend(lines.try_iter());
    assert_eq!(status.code(), Some(7), "{seen:?}");
    let got = seen.iter().filter(|l| l.contains("got-int")).count();
    assert_eq!(got, 1, "{seen:?}");
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn the_sandboxed_command_cannot_reach_its_own_stacks_control_endpoint() {
    // The command runs as root (ustack was started by root): the control
    // endpoint's file in the host's /dev/shm (root's, 0600) would be open to
    // it. The sandbox has a /dev/shm of its own, so the command finds
    // neither the file nor the stack, cannot list the port forwards, and
    // cannot add one (which would open a host port); the host still
    // operates the stack while the command runs.
    let name = format!("guest-ctl-{}", unique());
    let port = free_port();
    let spec = format!("127.0.0.1:{port}:80");
    // A command that gives up root (the recipe the threat model gives for
    // commands that must not operate the stack) is refused the file even
    // through the init's view of the host's /dev/shm.
    let (u, g) = nobody();
    let script = format!(
        "if [ -e /dev/shm/ustack-ipc-ctl.{name} ]; then echo file=visible; \
         else echo file=hidden; fi; \
         if {BIN} ps 2>/dev/null | grep -q -F {name}; then echo ps=listed; \
         else echo ps=unlisted; fi; \
         if {BIN} ss -a --stack {name} >/dev/null 2>&1; then echo ss=ok; \
         else echo ss=refused; fi; \
         if {BIN} ports --stack {name} add {spec} >/dev/null 2>&1; then echo ports=ok; \
         else echo ports=refused; fi; \
         P=$PPID; if setpriv --reuid={u} --regid={g} --clear-groups -- \
           head -c 1 /proc/$P/root/dev/shm/ustack-ipc-ctl.{name} >/dev/null 2>&1; \
         then echo nobody=opened; else echo nobody=refused; fi; \
         echo tried; read x"
    );
    let mut run = Run::start(&["--name", &name, "--", "sh", "-c", &script], &[]);
    run.expect_line("tried");
    for want in [
        "file=hidden",
        "ps=unlisted",
        "ss=refused",
        "ports=refused",
        "nobody=refused",
    ] {
        assert!(
            run.seen.iter().any(|l| l == want),
            "the command reached the control endpoint: want {want}, saw {:?}",
            run.seen
        );
    }
    // The host still sees and operates the stack, and no forward was added.
    assert!(domain_file(&name).exists());
    assert!(ok(&ustack_as(None, &["ps"])).contains(&name));
    ok(&ustack_as(None, &["ss", "-a", "--stack", &name]));
    let forwards = ok(&ustack_as(None, &["ports", "--stack", &name]));
    assert!(
        !forwards.contains(&port.to_string()),
        "a forward was added from inside: {forwards}"
    );
    run.send("x");
    let (status, seen, err) = run.finish();
    assert!(status.success(), "{seen:?} {err}");
}

/// Wait (at most `STEP`) until `ss -H -ln` inside `ns` shows `what`.
fn wait_listening(ns: &NetNs, proto: &str, what: &str) {
    let t0 = Instant::now();
    loop {
        let out = ns
            .cmd("ss")
            .args(["-H", "-ln", proto])
            .output()
            .expect("ss");
        if String::from_utf8_lossy(&out.stdout).contains(what) {
            return;
        }
        assert!(t0.elapsed() < STEP, "nothing listens on {what} ({proto})");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_relay_path_works_through_the_hardened_relay() {
    // The relay gives up its user and runs under a seccomp allow-list: a
    // system call a relay path needs and the list lacks would kill it.
    // Each path once, TCP, UDP and ICMP echo over both IP versions, with
    // `ustack run` started as root (so the relay becomes nobody) inside a
    // namespace of the test's that stands for the host; a veth joins it to
    // a second one standing for a remote host, so that echo requests to a
    // non-gateway address leave through the relay's ping sockets.
    let (host, remote) = (NetNs::new(), NetNs::new());
    let u = unique();
    let (va, vb) = (format!("uh{u}"), format!("ur{u}"));
    must(Command::new("ip").args([
        "link",
        "add",
        &va,
        "netns",
        &host.name,
        "type",
        "veth",
        "peer",
        "name",
        &vb,
        "netns",
        &remote.name,
    ]));
    for (ns, dev, a4, a6) in [
        (&host, &va, "192.0.2.2/24", "2001:db8:77::2/64"),
        (&remote, &vb, "192.0.2.1/24", "2001:db8:77::1/64"),
    ] {
        must(Command::new("ip").args(["-n", &ns.name, "addr", "add", a4, "dev", dev]));
        must(
            Command::new("ip").args(["-n", &ns.name, "-6", "addr", "add", a6, "dev", dev, "nodad"]),
        );
        must(Command::new("ip").args(["-n", &ns.name, "link", "set", dev, "up"]));
    }
    // Ping sockets for every group, the relay's (nogroup) included.
    must(
        host.cmd("sysctl")
            .args(["-qw", "net.ipv4.ping_group_range=0 2147483647"]),
    );
    // The host's services on its loopback, both families.
    let mut servers = Vec::new();
    for (listen, reply) in [
        (
            "TCP4-LISTEN:8081,bind=127.0.0.1,fork,reuseaddr",
            "SYSTEM:echo hello-tcp4",
        ),
        (
            "TCP6-LISTEN:8081,bind=[::1],fork,reuseaddr",
            "SYSTEM:echo hello-tcp6",
        ),
        (
            "UDP4-RECVFROM:9091,bind=127.0.0.1,fork",
            "SYSTEM:sed s/^/udp4-/",
        ),
        (
            "UDP6-RECVFROM:9091,bind=[::1],fork",
            "SYSTEM:sed s/^/udp6-/",
        ),
    ] {
        servers.push(ChildGuard {
            child: host
                .cmd("socat")
                .args([listen, reply])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("socat (scripts/deps.sh installs it)"),
        });
    }
    wait_listening(&host, "-t", "127.0.0.1:8081");
    wait_listening(&host, "-t", "[::1]:8081");
    wait_listening(&host, "-u", "127.0.0.1:9091");
    wait_listening(&host, "-u", "[::1]:9091");
    let script = "\
        echo $(socat -T 5 - TCP4:10.0.2.2:8081 </dev/null); \
        echo $(socat -T 5 - 'TCP6:[fd00::2]:8081' </dev/null); \
        echo $(echo x | socat -T 2 - UDP4:10.0.2.2:9091); \
        echo $(echo x | socat -T 2 - 'UDP6:[fd00::2]:9091'); \
        ping -c 1 -W 5 192.0.2.1 >/dev/null && echo icmp4-relayed; \
        ping -6 -c 1 -W 5 2001:db8:77::1 >/dev/null && echo icmp6-relayed; \
        ping -c 1 -W 5 10.0.2.2 >/dev/null && echo icmp4-gateway; \
        ping -6 -c 1 -W 5 fd00::2 >/dev/null && echo icmp6-gateway";
    let mut run = ChildGuard {
        child: host
            .cmd(BIN)
            .args(["run", "--stats", "--", "sh", "-c", script])
            .env_remove("SUDO_UID")
            .env_remove("SUDO_GID")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ustack run"),
    };
    let mut out = String::new();
    let mut err = String::new();
    let mut so = run.child.stdout.take().expect("stdout");
    let mut se = run.child.stderr.take().expect("stderr");
    let errs = std::thread::spawn(move || {
        let _ = se.read_to_string(&mut err);
        err
    });
    let _ = so.read_to_string(&mut out);
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = run.child.try_wait().expect("wait") {
            break st;
        }
        assert!(t0.elapsed() < STEP, "ustack run did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = errs.join().unwrap_or_default();
    assert!(status.success(), "{status}: {out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "hello-tcp4",
            "hello-tcp6",
            "udp4-x",
            "udp6-x",
            "icmp4-relayed",
            "icmp6-relayed",
            "icmp4-gateway",
            "icmp6-gateway"
        ],
        "{err}"
    );
    assert!(!err.contains("seccomp"), "{err}");
    drop(servers);
}
