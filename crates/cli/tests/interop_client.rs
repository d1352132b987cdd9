//! ustack as a client (`ustack ping`, `ustack get`) against the Linux kernel
//! in a private namespace, and the error messages/exit codes people see.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn ustack(ns: &NetNs, args: &[&str]) -> std::process::Output {
    let tap = format!("ut{}", unique());
    Command::new(BIN)
        .args([args[0], "--tap", &tap, "--netns", &ns.name])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .expect("run ustack")
}

#[test]
fn ping_the_kernel() {
    let ns = NetNs::new();
    let out = ustack(
        &ns,
        &["ping", "-c", "3", "-i", "0.2", &KERNEL_IP.to_string()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("3 packets transmitted, 3 received, 0% packet loss"),
        "{text}"
    );
    assert!(
        text.contains(&format!("64 bytes from {KERNEL_IP}: icmp_seq=1 ttl=64")),
        "{text}"
    );
    assert!(text.contains("rtt min/avg/max/mdev"), "{text}");

    // Fragmented echo: the kernel reassembles, answers in fragments, ustack reassembles.
    let out = ustack(
        &ns,
        &[
            "ping",
            "-c",
            "2",
            "-i",
            "0.2",
            "-s",
            "8000",
            &KERNEL_IP.to_string(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("8008 bytes from {KERNEL_IP}")),
        "{text}"
    );

    // Nobody at .99: no reply, exit 1.
    let out = ustack(
        &ns,
        &["ping", "-c", "2", "-i", "0.1", "-W", "0.5", "10.77.0.99"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("2 packets transmitted, 0 received, 100% packet loss"),
        "{text}"
    );
}

/// A kernel HTTP server (python3 -m http.server) in the namespace, killed on drop.
fn http_server(ns: &NetNs, dir: &std::path::Path, port: u16) -> ChildGuard {
    let child = ns
        .cmd("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "0.0.0.0",
            "--directory",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn python3 http.server");
    let guard = ChildGuard { child };
    // Wait until it listens.
    let t0 = Instant::now();
    loop {
        let out = ns.sh(&format!("ss -ltn 'sport = :{port}' | grep -q LISTEN"));
        if out.status.success() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "http.server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    guard
}

#[test]
fn get_from_a_kernel_http_server() {
    let ns = NetNs::new();
    let dir = TempDir::new("get");
    let data = random_block(42, 32 << 20);
    std::fs::write(dir.join("big.bin"), &data).unwrap();
    let _srv = http_server(&ns, dir.path(), 8080);
    let outfile = dir.join("out.bin");
    let out = ustack(
        &ns,
        &[
            "get",
            "-o",
            outfile.to_str().unwrap(),
            &format!("http://{KERNEL_IP}:8080/big.bin"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ustack get failed: {err}");
    assert!(
        err.contains(&format!("received {} bytes", data.len())),
        "{err}"
    );
    assert!(err.contains("Mbit/s"), "{err}");
    let got = std::fs::read(&outfile).unwrap();
    assert!(got == data, "downloaded file differs ({} bytes)", got.len());

    // To stdout.
    std::fs::write(dir.join("small.txt"), b"small file\n").unwrap();
    let out = ustack(&ns, &["get", &format!("http://{KERNEL_IP}:8080/small.txt")]);
    assert!(out.status.success());
    assert_eq!(out.stdout, b"small file\n");

    // 404 -> exit 1 with a message naming the status.
    let out = ustack(&ns, &["get", &format!("http://{KERNEL_IP}:8080/missing")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("404"), "{err}");
    assert!(out.stdout.is_empty());

    // Nothing listening -> refused.
    let out = ustack(&ns, &["get", &format!("http://{KERNEL_IP}:8081/")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("connection refused"), "{err}");
}

#[test]
fn errors_people_understand() {
    let run = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().expect("run ustack");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            !err.contains("Os {"),
            "Debug-formatted error for {args:?}: {err}"
        );
        (out.status.code(), err)
    };
    let (code, err) = run(&["serve", "--addr", "10.77.0.2"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("ADDRESS/PREFIX"), "{err}");
    let (code, err) = run(&["serve", "--addr", "10.77.0.2/40"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("prefix length"), "{err}");
    let (code, err) = run(&["get", "https://10.0.0.1/"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("only http://"), "{err}");
    let (code, err) = run(&["ping", "-c", "1", "192.0.2.1"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("network unreachable"), "{err}");
    let (code, err) = run(&["serve", "--tap", "x", "--netns", "no-such-ns-ustack"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("does not exist"), "{err}");
    let (code, err) = run(&["serve", "--tap", "name-that-is-far-too-long"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not a valid interface name"), "{err}");
    let (code, err) = run(&["serve", "--tap", "lo"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("cannot create TAP device lo"), "{err}");
    // Every subcommand has --help.
    for sub in ["serve", "ping", "get", "bench", "run", "attach"] {
        let out = Command::new(BIN).args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "{sub} --help");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{sub}"
        );
    }
}

#[test]
fn get_leaves_the_output_file_alone_unless_it_succeeds_and_dash_is_stdout() {
    // `-o FILE` was created (truncated) before connecting: a refused
    // connection or a 404 left FILE empty, an existing one destroyed;
    // `-o -` made a file named "-" where curl and wget write to stdout.
    let ns = NetNs::new();
    let dir = TempDir::new("getout");
    std::fs::write(dir.join("page.txt"), b"the page\n").unwrap();
    let _srv = http_server(&ns, dir.path(), 8080);
    let get = |args: &[&str]| {
        let tap = format!("ut{}", unique());
        Command::new(BIN)
            .args(["get", "--tap", &tap, "--netns", &ns.name])
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("run ustack get")
    };
    let kept = dir.join("kept.txt");
    std::fs::write(&kept, b"precious\n").unwrap();
    let fresh = dir.join("fresh.txt");
    for url in [
        format!("http://{KERNEL_IP}:8081/"),
        format!("http://{KERNEL_IP}:8080/missing"),
    ] {
        let out = get(&["-o", kept.to_str().unwrap(), &url]);
        assert_eq!(out.status.code(), Some(1), "{url}");
        assert_eq!(std::fs::read(&kept).unwrap(), b"precious\n", "{url}");
        let out = get(&["-o", fresh.to_str().unwrap(), &url]);
        assert_eq!(out.status.code(), Some(1), "{url}");
        assert!(
            !fresh.exists(),
            "{url}: a failed get left {}",
            fresh.display()
        );
    }
    // Success replaces the file, also with a shorter body.
    let out = get(&[
        "-o",
        kept.to_str().unwrap(),
        &format!("http://{KERNEL_IP}:8080/page.txt"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&kept).unwrap(), b"the page\n");
    // `-o -` is stdout.
    let out = get(&["-o", "-", &format!("http://{KERNEL_IP}:8080/page.txt")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"the page\n");
    assert!(!dir.join("-").exists(), "a file named -");
    // A directory that does not exist still fails before any network work.
    let out = get(&[
        "-o",
        "/nonexistent-dir/x",
        &format!("http://{KERNEL_IP}:8080/page.txt"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot create"));
}
