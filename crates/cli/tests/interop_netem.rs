//! The same transfers under `tc netem` on the kernel side of the TAP
//! (loss 5%, delay 10 ms, reorder 25%, duplicate 1%). 100 MB under these
//! impairments takes minutes, so these use 8 MB (HTTP) and 4 MB (echo,
//! both directions impaired by the kernel's qdisc on its egress only).

mod common;

use std::net::SocketAddrV4;
use std::process::{Command, Stdio};

use common::*;

const NETEM: &str = "loss 5% delay 10ms reorder 25% duplicate 1%";

#[test]
fn transfers_under_netem() {
    let ns = NetNs::new();
    let srv = Serve::start(&ns, &[]);
    netem(&ns, &srv.tap, NETEM);

    // ping: with 5% loss some of 20 may go missing, but most must come back.
    let out = ns
        .cmd("ping")
        .args(["-c", "20", "-i", "0.05", "-W", "2", "-s", "3000"])
        .arg(USTACK_IP.to_string())
        .output()
        .expect("ping");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");

    let secs = curl_bytes(&ns, 8 << 20, 240);
    eprintln!("netem: curl 8 MiB in {secs:.1} s");
    let addr = SocketAddrV4::new(USTACK_IP, 7);
    let secs = ns
        .spawn(move || echo_transfer(addr, 4 << 20, 77))
        .join()
        .expect("echo client");
    eprintln!("netem: echo 4 MiB in {secs:.1} s");
    srv.stop_clean();
}

#[test]
fn ustack_get_under_netem() {
    let ns = NetNs::new();
    let dir = std::env::temp_dir().join(format!("ustack-netem-{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = random_block(9, 6 << 20);
    std::fs::write(dir.join("f.bin"), &data).unwrap();
    let server = ns
        .cmd("python3")
        .args([
            "-m",
            "http.server",
            "8080",
            "--bind",
            "0.0.0.0",
            "--directory",
        ])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 http.server");
    let _server = ChildGuard { child: server };
    // `ustack get` creates the TAP; netem can only be added once the link is
    // in the namespace, so a helper adds it as soon as it appears.
    let tap = format!("ut{}", unique());
    let ns_name = ns.name.clone();
    let tap2 = tap.clone();
    let adder = std::thread::spawn(move || {
        for _ in 0..200 {
            let ok = Command::new("ip")
                .args([
                    "netns", "exec", &ns_name, "tc", "qdisc", "add", "dev", &tap2, "root", "netem",
                ])
                .args(NETEM.split_whitespace())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    });
    // Give python time to listen; ustack get retries nothing, so wait first.
    let t0 = std::time::Instant::now();
    while !ns
        .sh("ss -ltn 'sport = :8080' | grep -q LISTEN")
        .status
        .success()
    {
        assert!(t0.elapsed().as_secs() < 15, "http.server did not start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let outfile = dir.join("out.bin");
    let out = Command::new(BIN)
        .args(["get", "--tap", &tap, "--netns", &ns.name, "-o"])
        .arg(&outfile)
        .arg(format!("http://{KERNEL_IP}:8080/f.bin"))
        .output()
        .expect("ustack get");
    assert!(
        adder.join().unwrap(),
        "could not add netem to {tap} (does this kernel have the netem qdisc? `tc qdisc add ... netem` must work)"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    eprintln!("netem: {err}");
    assert!(std::fs::read(&outfile).unwrap() == data, "download differs");
    let _ = std::fs::remove_dir_all(&dir);
}
