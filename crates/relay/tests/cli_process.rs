//! `ustack run` as a process, the way a user runs it: stdin/stdout/stderr
//! and the exit status of the command, `--stats` on stderr, `--pcap`, no
//! CMD = `$SHELL` (or /bin/sh) reading its script from stdin, and no
//! process of the command's outliving it.
//!
//! No libtest harness (`harness = false`): this binary is also the `ustack
//! run` under test. Invoked as `cli_process --ustack-run-child ARGS...` it
//! does exactly what `ustack run ARGS...` does (same parser, same entry
//! point, exit code passed through); otherwise it runs the cases below,
//! each spawning itself in that mode. Needs root and /dev/net/tun.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, ExitCode, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::{parse_run_args, TempFile};

const CHILD_FLAG: &str = "--ustack-run-child";

/// One test case: `Err` carries the failure report.
type Case = fn() -> Result<(), String>;

fn child_main(rest: Vec<String>) -> ExitCode {
    let a = match parse_run_args(rest) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // Hardened, as the `ustack` binary's relay (this process is the run's
    // alone): privileges given up, inherited descriptors closed, seccomp.
    match ustack_relay::cli::run_hardened(a) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("ustack: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Run `ustack run ARGS` as a child process with `stdin` piped in, bounded
/// to 60 s.
fn ustack_run(args: &[&str], stdin: &[u8], env: &[(&str, Option<&str>)]) -> Output {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.arg(CHILD_FLAG)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd.spawn().expect("spawn ustack run");
    if let Some(mut i) = child.stdin.take() {
        i.write_all(stdin).expect("write stdin");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                break;
            }
        }
    }
    child.wait_with_output().expect("wait ustack run")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn no_cmd_starts_shell_from_env_reading_stdin() -> Result<(), String> {
    let out = ustack_run(&[], b"echo ok; exit 3\n", &[("SHELL", Some("/bin/sh"))]);
    if out.status.code() != Some(3) || text(&out.stdout) != "ok\n" {
        return Err(format!(
            "SHELL=/bin/sh: status {:?}, stdout {:?}, stderr {:?}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        ));
    }
    // $SHELL is honoured: bash says so.
    let out = ustack_run(
        &[],
        b"test -n \"$BASH_VERSION\" && echo bash; exit 4\n",
        &[("SHELL", Some("/bin/bash"))],
    );
    if out.status.code() != Some(4) || text(&out.stdout) != "bash\n" {
        return Err(format!(
            "SHELL=/bin/bash: status {:?}, stdout {:?}, stderr {:?}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        ));
    }
    // No $SHELL: /bin/sh.
    let out = ustack_run(&[], b"echo $0; exit 5\n", &[("SHELL", None)]);
    if out.status.code() != Some(5) || text(&out.stdout) != "/bin/sh\n" {
        return Err(format!(
            "no SHELL: status {:?}, stdout {:?}, stderr {:?}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        ));
    }
    Ok(())
}

fn stats_summary_on_stderr_at_exit() -> Result<(), String> {
    const LEN: usize = 100_000;
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let server = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok((mut c, _)) = l.accept() {
                let _ = c.set_nonblocking(false);
                let _ = c.write_all(&vec![b'z'; LEN]);
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
    });
    let script = format!(
        "ping -c 2 -i 0.2 -W 2 10.0.2.2 > /dev/null || exit 1; \
         socat -u TCP:10.0.2.2:{port} STDOUT | wc -c"
    );
    let out = ustack_run(&["--stats", "--", "sh", "-c", &script], b"", &[]);
    let _ = server.join();
    let err = text(&out.stderr);
    let want = [
        "ustack relay statistics",
        "tcp:   1 opened (0 inbound), 1 closed",
        "icmp:  2 echo to gateway",
        &format!("{LEN} host->guest"),
        "limits hit: 0 flows, 0 half-open, 0 rate, 0 buffer",
    ];
    let missing: Vec<&str> = want.iter().copied().filter(|w| !err.contains(w)).collect();
    if out.status.code() != Some(0) || text(&out.stdout).trim() != LEN.to_string() {
        return Err(format!(
            "status {:?}, stdout {:?}, stderr {err:?}",
            out.status,
            text(&out.stdout)
        ));
    }
    if !missing.is_empty() {
        return Err(format!("--stats output lacks {missing:?}:\n{err}"));
    }
    // Without --stats, nothing is printed.
    let out = ustack_run(&["--", "true"], b"", &[]);
    if out.status.code() != Some(0) || !out.stderr.is_empty() {
        return Err(format!(
            "without --stats: status {:?}, stderr {:?}",
            out.status,
            text(&out.stderr)
        ));
    }
    Ok(())
}

fn pcap_captures_the_guest_side() -> Result<(), String> {
    let file = TempFile::new("cli-process.pcap");
    let path = file.path();
    let out = ustack_run(
        &[
            "--pcap", &path, "--", "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.0.2.2",
        ],
        b"",
        &[],
    );
    if out.status.code() != Some(0) {
        return Err(format!(
            "ping: status {:?}, stderr {:?}",
            out.status,
            text(&out.stderr)
        ));
    }
    let td = Command::new("tcpdump")
        .args(["-n", "-r", &path, "icmp"])
        .output()
        .map_err(|e| format!("tcpdump: {e}"))?;
    let s = text(&td.stdout);
    let requests = s.matches("10.0.2.15 > 10.0.2.2: ICMP echo request").count();
    let replies = s.matches("10.0.2.2 > 10.0.2.15: ICMP echo reply").count();
    if !td.status.success() || requests != 2 || replies != 2 {
        return Err(format!(
            "tcpdump -r: status {:?}, {requests} requests, {replies} replies:\n{s}{}",
            td.status,
            text(&td.stderr)
        ));
    }
    // The ARP exchange before the first echo is in the capture too.
    let arp = Command::new("tcpdump")
        .args(["-n", "-r", &path, "arp"])
        .output()
        .map_err(|e| format!("tcpdump: {e}"))?;
    let a = text(&arp.stdout);
    if !a.contains("Reply 10.0.2.2 is-at 52:55:0a:00:02:02") {
        return Err(format!("no ARP reply for the gateway in the capture:\n{a}"));
    }
    Ok(())
}

/// The PID a command wrote to `f`, once it has (bounded: 20 s).
fn pid_in(f: &TempFile) -> Option<libc::pid_t> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(p) = std::fs::read_to_string(f.as_path())
            .ok()
            .filter(|t| t.ends_with('\n'))
            .and_then(|t| t.trim().parse().ok())
        {
            return Some(p);
        }
        thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Whether process `pid` still exists; killed (SIGKILL) if it does, so
/// that a failing case leaves nothing behind.
fn still_there(pid: libc::pid_t) -> bool {
    // SAFETY: kill(2) with signal 0 only checks; SIGKILL to a process this
    // test's command started.
    unsafe {
        if libc::kill(pid, 0) == 0 {
            libc::kill(pid, libc::SIGKILL);
            return true;
        }
    }
    false
}

/// What the command leaves behind in the sandbox dies with it: a
/// background server when the command exits, a daemon that left the
/// session when ustack is sent SIGTERM (before, both went on running, cut
/// off from any network, keeping the sandbox's namespace alive).
fn nothing_outlives_the_command() -> Result<(), String> {
    let f = TempFile::new("bg.pid");
    // (Its output elsewhere: holding the pipes, it would keep
    // `ustack_run` reading them until it ended.)
    let script = format!(
        "sleep 1000 >/dev/null 2>&1 & echo $! > {}; exit 7",
        f.path()
    );
    let out = ustack_run(&["--", "sh", "-c", &script], b"", &[]);
    let pid = pid_in(&f).ok_or("the command wrote no PID")?;
    if out.status.code() != Some(7) {
        still_there(pid);
        return Err(format!(
            "exit status {:?}: {}",
            out.status,
            text(&out.stderr)
        ));
    }
    if still_there(pid) {
        return Err(format!(
            "the background sleep ({pid}) outlived `ustack run`"
        ));
    }

    let f = TempFile::new("daemon.pid");
    let script = format!("setsid sleep 1000 & echo $! > {}; wait", f.path());
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args([CHILD_FLAG, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let Some(pid) = pid_in(&f) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("the command wrote no PID".into());
    };
    // SAFETY: signalling the child process we spawned.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let gone = !still_there(pid);
    if status.and_then(|s| s.code()) != Some(143) {
        return Err(format!("after SIGTERM: status {status:?}"));
    }
    if !gone {
        return Err(format!(
            "the daemon ({pid}) outlived `ustack run` stopped by SIGTERM"
        ));
    }
    Ok(())
}

/// The command deletes its own interface: that ends its network, and
/// `run` says so, but the command's exit status stands (no "relay
/// failed", no status 1), whether the relay notices before the command
/// ends or only while draining after it.
fn a_deleted_interface_ends_the_network_not_the_command() -> Result<(), String> {
    let out = ustack_run(
        &["--", "sh", "-c", "ip link del eth0 || exit 9; exit 7"],
        b"",
        &[],
    );
    let err = text(&out.stderr);
    if out.status.code() != Some(7)
        || !err.contains("the sandbox's interface eth0 was deleted")
        || err.contains("relay failed")
    {
        return Err(format!("status {:?}, stderr {err:?}", out.status));
    }
    Ok(())
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(CHILD_FLAG) {
        return child_main(argv.into_iter().skip(2).collect());
    }
    let cases: [(&str, Case); 5] = [
        (
            "no_cmd_starts_shell_from_env_reading_stdin",
            no_cmd_starts_shell_from_env_reading_stdin,
        ),
        (
            "stats_summary_on_stderr_at_exit",
            stats_summary_on_stderr_at_exit,
        ),
        ("pcap_captures_the_guest_side", pcap_captures_the_guest_side),
        ("nothing_outlives_the_command", nothing_outlives_the_command),
        (
            "a_deleted_interface_ends_the_network_not_the_command",
            a_deleted_interface_ends_the_network_not_the_command,
        ),
    ];
    // Honour a name filter like libtest does (`cargo test --test cli_process NAME`).
    let filter: Option<&String> = argv.iter().skip(1).find(|a| !a.starts_with('-'));
    let mut failed = 0;
    let mut ran = 0;
    for (name, f) in cases {
        if filter.is_some_and(|p| !name.contains(p.as_str())) {
            continue;
        }
        ran += 1;
        match f() {
            Ok(()) => println!("test {name} ... ok"),
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED\n{e}");
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" },
        ran - failed
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
