//! `ustack ps`, `ss`, `nstat` and `sysctl` from another process against a
//! live `ustack serve`, and its control endpoint refusing another user.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A TCP port free on 127.0.0.1 now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET http://127.0.0.1:port/metrics from this process.
fn scrape(port: u16) -> String {
    let mut s = connect(SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut r = String::new();
    s.read_to_string(&mut r).expect("response");
    assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
    r
}

/// The kernel side's address as serve's sockets see it: its services
/// listen on dual-stack `[::]:PORT` listeners, so IPv4 peers appear
/// IPv4-mapped, as on Linux.
const KERNEL_MAPPED: &str = "[::ffff:10.77.0.1]";

/// The row of `ss --json` output `ss` whose `field` is `want`.
fn row_where<'a>(ss: &'a Value, field: &str, want: &str) -> &'a Value {
    ss.as_array()
        .expect("array")
        .iter()
        .find(|r| r[field].as_str() == Some(want))
        .unwrap_or_else(|| panic!("no socket with {field} {want} in ss: {ss}"))
}

/// `ss -ti`'s fields of the connection from the client's `port`, once
/// its `bytes_acked` reached `bytes` (polled, at most 10 s).
fn acked_at_least(stack: &str, port: u16, bytes: u64) -> Value {
    let t0 = std::time::Instant::now();
    loop {
        let ss = json(&["ss", "-ti", "--json", "--stack", stack]);
        let info = row_where(&ss, "peer", &format!("{KERNEL_MAPPED}:{port}"))["info"].clone();
        if info["bytes_acked"].as_u64().is_some_and(|b| b >= bytes) {
            return info;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "bytes_acked never reached {bytes}: {info}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn counter(v: &Value, name: &str) -> u64 {
    v.get(name).and_then(Value::as_u64).unwrap_or(0)
}

/// Echo `n` bytes on a new connection to port 7 from `ns`, then hold the
/// connection open until `hold` yields (or is dropped).
fn echo_and_hold(
    ns: &NetNs,
    n: usize,
    hold: mpsc::Receiver<()>,
    done: mpsc::Sender<u16>,
) -> std::thread::JoinHandle<()> {
    ns.spawn(move || {
        let mut s = connect(SocketAddrV4::new(USTACK_IP, 7));
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let data = random_block(7, n);
        let mut w = s.try_clone().expect("clone");
        let writer = std::thread::spawn(move || w.write_all(&data).expect("write"));
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).expect("echo back");
        writer.join().expect("writer");
        assert_eq!(got, random_block(7, n), "echo differs");
        let port = s.local_addr().expect("local").port();
        done.send(port).expect("report");
        let _ = hold.recv();
    })
}

#[test]
fn ps_ss_nstat_sysctl_against_a_live_serve() {
    let ns = NetNs::new();
    let name = format!("ops-{}", unique());
    let mport = free_port().to_string();
    let srv = Serve::start(
        &ns,
        &["--name", &name, "--metrics", &format!("127.0.0.1:{mport}")],
    );
    let pid = srv.proc.child.id();

    // ps: the stack is listed with its PID, mode and address.
    let ps = json(&["ps", "--json"]);
    let me = ps
        .as_array()
        .expect("array")
        .iter()
        .find(|s| s["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} not in ps: {ps}"));
    assert_eq!(me["pid"].as_u64(), Some(u64::from(pid)));
    assert_eq!(me["mode"], "serve");
    assert!(me["devices"][0]["addrs"][0]
        .as_str()
        .is_some_and(|a| a.starts_with("10.77.0.2/")));
    // And its IPv6 addresses (serve's default static one).
    assert!(
        me["devices"][0]["addrs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|a| a == "fd77::2/64")),
        "{me}"
    );
    // Selecting by PID finds the same stack.
    let by_pid = json(&["ss", "-l", "--json", "--stack", &pid.to_string()]);
    let listen: Vec<&str> = by_pid
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|s| s["local"].as_str())
        .collect();
    for p in ["*:7", "*:9", "*:19", "*:80"] {
        assert!(
            listen.iter().any(|l| l == &p),
            "no dual-stack listener on {p}: {listen:?}"
        );
    }
    // Only the services listen: the control endpoint is not on the network.
    assert_eq!(listen.len(), 4, "unexpected listeners: {listen:?}");
    // UDP echo, as ss -ul shows an unconnected UDP socket: one socket
    // per family (-4, -6 as ss's).
    let udp = json(&["ss", "-ul", "-4", "--json", "--stack", &name]);
    let u = row_where(&udp, "local", "10.77.0.2:7");
    assert_eq!(
        (u["proto"].as_str(), u["state"].as_str()),
        (Some("udp"), Some("UNCONN"))
    );
    assert_eq!(udp.as_array().map(Vec::len), Some(1), "{udp}");
    let udp6 = json(&["ss", "-ul", "-6", "--json", "--stack", &name]);
    let u = row_where(&udp6, "local", "[::]:7");
    assert_eq!(u["peer"], "[::]:*");
    assert_eq!(udp6.as_array().map(Vec::len), Some(1), "{udp6}");

    // nstat: take the history now, then a known transfer moves the counters.
    json(&["nstat", "--json", "--stack", &name]);
    let (hold_tx, hold_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let n = 200_000;
    let client = echo_and_hold(&ns, n, hold_rx, done_tx);
    let port = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("echo transfer finished");
    let d = json(&["nstat", "--json", "--stack", &name]);
    assert_eq!(counter(&d, "TcpPassiveOpens"), 1, "{d}");
    // The same counters for Prometheus.
    let m = scrape(mport.parse().expect("port"));
    assert!(
        m.contains(&format!(
            "ustack_tcp_passive_opens_total{{stack=\"{name}\"}} 1\n"
        )),
        "{m}"
    );
    assert!(m.contains("# TYPE ustack_tcp_curr_estab gauge"), "{m}");
    // At least one segment per MSS of data came in, and as many went out.
    let segs = (n as u64).div_ceil(1460);
    assert!(counter(&d, "TcpInSegs") >= segs, "{d}");
    assert!(counter(&d, "TcpOutSegs") >= segs, "{d}");
    // -s does not update the history, so the next call sees the same
    // increments; without it they are gone.
    let a = json(&["nstat", "--json", "-s", "-z", "--stack", &name]);
    assert_eq!(counter(&a, "TcpPassiveOpens"), 0, "{a}");
    let abs = json(&["nstat", "--json", "-a", "--stack", &name, "Tcp*"]);
    assert!(counter(&abs, "TcpPassiveOpens") >= 1, "{abs}");
    assert!(abs
        .as_object()
        .expect("object")
        .keys()
        .all(|k| k.starts_with("Tcp")));

    // ss: the held connection is established, with ss -i's fields.
    let ss = json(&["ss", "-ti", "--json", "--stack", &name]);
    let row = row_where(&ss, "peer", &format!("{KERNEL_MAPPED}:{port}"));
    assert_eq!(row["state"], "ESTAB");
    assert_eq!(row["local"], "[::ffff:10.77.0.2]:7");
    let info = &row["info"];
    assert_eq!(info["congestion_control"], "cubic");
    assert!(info["rtt_ms"].as_f64().is_some(), "{info}");
    assert!(info["mss"].as_u64().is_some_and(|m| m > 500), "{info}");
    // Linux's per-connection counters followed the echo: every byte in,
    // every byte out and acknowledged (the client's last ACK may still be
    // on its way: wait for it, bounded), at least a segment per MSS each
    // way.
    let info = acked_at_least(&name, port, n as u64);
    assert_eq!(info["bytes_received"].as_u64(), Some(n as u64), "{info}");
    assert_eq!(info["bytes_acked"].as_u64(), Some(n as u64), "{info}");
    assert!(
        info["bytes_sent"].as_u64().is_some_and(|b| b >= n as u64),
        "{info}"
    );
    assert!(
        info["segs_out"].as_u64().is_some_and(|s| s >= segs),
        "{info}"
    );
    assert!(
        info["segs_in"].as_u64().is_some_and(|s| s >= segs),
        "{info}"
    );
    assert!(
        info["data_segs_out"].as_u64().is_some_and(|s| s >= segs),
        "{info}"
    );
    assert!(
        info["data_segs_in"].as_u64().is_some_and(|s| s >= segs),
        "{info}"
    );
    assert!(
        info["delivery_rate_bps"].as_u64().is_some_and(|r| r > 0),
        "{info}"
    );
    let first_segs_out = info["segs_out"].as_u64().unwrap_or(0);
    // Filters as ss's.
    let f = json(&[
        "ss",
        "--json",
        "--stack",
        &name,
        "state",
        "established",
        "dport",
        "=",
        &format!(":{port}"),
    ]);
    assert_eq!(f.as_array().map(Vec::len), Some(1), "{f}");
    let none = json(&["ss", "--json", "--stack", &name, "sport", "=", ":9"]);
    assert_eq!(none.as_array().map(Vec::len), Some(0), "{none}");
    let text = ustack(&["ss", "-ti", "--stack", &name]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("ESTAB") && text.contains("cwnd:"), "{text}");
    assert!(
        text.contains(&format!(" bytes_acked:{n} bytes_received:{n} segs_out:")),
        "{text}"
    );

    // sysctl: read, change live, refuse a bad value without changing anything.
    let w = json(&["sysctl", "--json", "--stack", &name, "net.ipv4.tcp_wmem"]);
    assert!(w["net.ipv4.tcp_wmem"].is_string(), "{w}");
    let set = ustack_ok(&[
        "sysctl",
        "--stack",
        &name,
        "net.ipv4.tcp_wmem=4096 32768 65536",
    ]);
    assert!(String::from_utf8_lossy(&set.stdout).contains("net.ipv4.tcp_wmem = 4096\t32768\t65536"));
    let bad = ustack(&[
        "sysctl",
        "--stack",
        &name,
        "net.ipv4.tcp_sack=0",
        "net.ipv4.tcp_wmem=lots",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tcp_wmem"));
    let after = json(&[
        "sysctl",
        "--json",
        "--stack",
        &name,
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_sack",
    ]);
    assert_eq!(after["net.ipv4.tcp_wmem"], "4096\t32768\t65536");
    assert_eq!(
        after["net.ipv4.tcp_sack"], "1",
        "a refused set changed tcp_sack"
    );
    let unknown = ustack(&["sysctl", "--stack", &name, "net.ipv4.tcp_nonsense"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown tunable"));
    // sysctl(8)'s spellings: -w, and `/` for `.`; -w with a bare name is
    // refused before anything changes.
    let set = ustack_ok(&[
        "sysctl",
        "--stack",
        &name,
        "-w",
        "net/ipv4/tcp_wmem=4096 32768 65536",
    ]);
    assert!(String::from_utf8_lossy(&set.stdout).contains("net.ipv4.tcp_wmem = 4096\t32768\t65536"));
    let bare = ustack(&[
        "sysctl",
        "--stack",
        &name,
        "-w",
        "net.ipv4.tcp_sack=0",
        "net.ipv4.tcp_wmem",
    ]);
    assert!(!bare.status.success());
    assert!(String::from_utf8_lossy(&bare.stderr).contains("must be of the form NAME=VALUE"));
    let sack = json(&["sysctl", "--json", "--stack", &name, "net/ipv4/tcp_sack"]);
    assert_eq!(sack["net.ipv4.tcp_sack"], "1", "{sack}");
    // A new connection takes the new send buffer (the held one keeps its own).
    drop(hold_tx);
    client.join().expect("client");
    let (hold_tx, hold_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let client = echo_and_hold(&ns, 1000, hold_rx, done_tx);
    let port = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("second connection");
    let ss = json(&["ss", "-ti", "--json", "--stack", &name]);
    let row = row_where(&ss, "peer", &format!("{KERNEL_MAPPED}:{port}"));
    let sb = row["info"]["send_buffer"].as_u64().expect("send_buffer");
    assert!(
        sb <= 65536,
        "send buffer {sb} above the new tcp_wmem maximum"
    );
    // Its own counters: its 1000 bytes, far fewer segments.
    let info = acked_at_least(&name, port, 1000);
    assert_eq!(info["bytes_received"].as_u64(), Some(1000), "{info}");
    assert_eq!(info["bytes_acked"].as_u64(), Some(1000), "{info}");
    assert!(
        info["segs_out"]
            .as_u64()
            .is_some_and(|s| s > 0 && s < first_segs_out),
        "{info}"
    );
    drop(hold_tx);
    client.join().expect("client");

    // Another user is refused, with a clear message.
    let other = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "ss",
            "--stack",
            &name,
        ])
        .output()
        .expect("run setpriv (util-linux)");
    assert!(
        !other.status.success(),
        "another UID could read the socket table"
    );
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("permission denied"), "{err}");

    srv.stop_clean();
    // Gone from the list once stopped.
    let ps = json(&["ps", "--json"]);
    assert!(
        ps.as_array()
            .expect("array")
            .iter()
            .all(|s| s["name"] != name.as_str()),
        "{name} still listed after it stopped: {ps}"
    );
}

#[test]
fn a_clear_error_without_a_stack_and_for_a_bad_name() {
    let out = ustack(&["ss", "--stack", "no-such-stack-here"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no running stack is named"), "{err}");
    let ns = NetNs::new();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--tap",
            &format!("ut{}", unique()),
            "--netns",
            &ns.name,
        ])
        .args(["--name", "bad name!"])
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad stack name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ss_nstat_sysctl_against_a_live_run() {
    use std::net::{Ipv4Addr, TcpListener};
    let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = host.local_addr().expect("addr").port();
    let name = format!("opsrun-{}", unique());
    let n = 300_000;
    // The command sends n bytes to the host through the gateway, then waits
    // for a line from the host before it exits.
    let mport = free_port();
    // The metrics endpoint is out of the guest's reach, also through the
    // gateway (which leads to the host's loopback).
    // A service in the guest on port 8080 for `ports add`, listening before
    // the command connects to the host.
    let script = format!(
        "socat TCP-LISTEN:8080,reuseaddr,fork SYSTEM:'echo hello-from-guest' & \
         for i in $(seq 200); do ss -ltn | grep -q ':8080 ' && break; sleep 0.05; done; \
         (exec 4<>/dev/tcp/10.0.2.2/{mport}) 2>/dev/null && echo metrics-reachable || echo metrics-refused; \
         exec 3<>/dev/tcp/10.0.2.2/{port}; head -c {n} /dev/zero >&3; read -r x <&3; echo got $x; \
         kill %1"
    );
    let metrics = format!("127.0.0.1:{mport}");
    let mut run = ChildGuard {
        child: Command::new(BIN)
            .args([
                "run",
                "--name",
                &name,
                "--metrics",
                &metrics,
                "--",
                "bash",
                "-c",
                &script,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ustack run"),
    };
    host.set_nonblocking(false).expect("blocking");
    let (mut s, _) = host.accept().expect("the sandbox connects");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut got = vec![0u8; n];
    s.read_exact(&mut got).expect("the sandbox's bytes");

    // The relay gave up its privileges: every thread runs with no_new_privs
    // and at most CAP_NET_BIND_SERVICE (0x400), bounding set included.
    let tasks = std::fs::read_dir(format!("/proc/{}/task", run.child.id())).expect("tasks");
    let mut threads = 0;
    for t in tasks.flatten() {
        let st = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let field = |k: &str| {
            st.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        assert_eq!(field("NoNewPrivs:"), "1", "{st}");
        for k in ["CapEff:", "CapPrm:", "CapBnd:", "CapInh:", "CapAmb:"] {
            let v = u64::from_str_radix(&field(k), 16).unwrap_or(u64::MAX);
            assert_eq!(v & !0x400, 0, "{k} {v:#x} in\n{st}");
        }
        threads += 1;
    }
    assert!(threads >= 2, "the relay and its control thread");

    let ss = json(&["ss", "-tie", "--json", "--stack", &name]);
    let row = row_where(&ss, "local", &format!("10.0.2.2:{port}"));
    assert_eq!(row["state"], "ESTAB");
    let hostside = row["host"].as_str().unwrap_or_default();
    assert!(
        hostside.ends_with(&format!("->127.0.0.1:{port}")),
        "host socket {hostside:?}"
    );
    assert!(row["info"]["mss"].as_u64().is_some(), "{row}");
    let ps = json(&["ps", "--json"]);
    assert!(
        ps.as_array()
            .expect("array")
            .iter()
            .any(|s| s["name"] == name.as_str() && s["mode"] == "run"),
        "{ps}"
    );
    let c = json(&["nstat", "--json", "--stack", &name]);
    assert_eq!(counter(&c, "RelayTcpOpened"), 1, "{c}");
    assert!(counter(&c, "RelayBytesGuestToHost") >= n as u64, "{c}");
    assert!(
        counter(&c, "TcpInSegs") >= (n as u64).div_ceil(65480),
        "{c}"
    );
    ustack_ok(&[
        "sysctl",
        "--stack",
        &name,
        "net.ipv4.tcp_congestion_control=reno",
    ]);
    let v = json(&[
        "sysctl",
        "--json",
        "--stack",
        &name,
        "net.ipv4.tcp_congestion_control",
    ]);
    assert_eq!(v["net.ipv4.tcp_congestion_control"], "reno");
    let m = scrape(mport);
    assert!(
        m.contains(&format!(
            "ustack_relay_bytes_guest_to_host_total{{stack=\"{name}\"}} {n}\n"
        )),
        "{m}"
    );

    let read_all = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut t = String::new();
            if let Some(mut p) = p {
                let _ = p.read_to_string(&mut t);
            }
            t
        })
    };
    let out = read_all(run.child.stdout.take().map(|p| Box::new(p) as _));
    let err = read_all(run.child.stderr.take().map(|p| Box::new(p) as _));
    // ports: add a forward to the guest's service while it runs, use it,
    // remove it.
    let fport = free_port();
    let spec = format!("127.0.0.1:{fport}:8080");
    ustack_ok(&["ports", "--stack", &name, "add", &spec]);
    let list = json(&["ports", "--json", "--stack", &name]);
    assert!(list.to_string().contains(&format!(":{fport}")), "{list}");
    let again = ustack(&["ports", "--stack", &name, "add", &spec]);
    assert!(
        !again.status.success(),
        "the same host port was forwarded twice"
    );
    let mut g = connect(SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, fport));
    g.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut hello = String::new();
    let _ = g.read_to_string(&mut hello);
    assert_eq!(hello.trim(), "hello-from-guest");
    ustack_ok(&["ports", "--stack", &name, "remove", &spec]);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", fport)).is_err(),
        "the removed forward still accepts"
    );
    let gone = ustack(&["ports", "--stack", &name, "remove", &spec]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no port forward"));

    s.write_all(b"done\n").expect("release the command");
    let status = run.exit_within(Duration::from_secs(30), "ustack run");
    let (out, err) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert!(status.success(), "ustack run failed: {err}");
    assert!(out.contains("got done"), "{out}");
    assert!(
        out.contains("metrics-refused"),
        "the guest reached the metrics: {out}"
    );
    let ps = json(&["ps", "--json"]);
    assert!(
        ps.as_array()
            .expect("array")
            .iter()
            .all(|s| s["name"] != name.as_str()),
        "{name} still listed after it exited: {ps}"
    );
}

#[test]
fn ss_u_lists_the_relayed_udp_flows_of_a_live_run() {
    use std::net::{Ipv4Addr, UdpSocket};
    let host = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    host.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let port = host.local_addr().expect("addr").port();
    let name = format!("opsudp-{}", unique());
    // The command sends a datagram to the host through the gateway, then
    // waits for the host's answer before it exits (one read of the whole
    // datagram: bash's `read` would take one byte of it and wait for more).
    let script = format!(
        "exec 3<>/dev/udp/10.0.2.2/{port}; echo ping >&3; \
         x=$(dd bs=64 count=1 <&3 2>/dev/null); echo got $x"
    );
    let mut run = ChildGuard {
        child: Command::new(BIN)
            .args(["run", "--name", &name, "--", "bash", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ustack run"),
    };
    // The datagram arrived: the relay holds the flow and its host socket.
    let mut buf = [0u8; 64];
    let (n, from) = host.recv_from(&mut buf).expect("the sandbox's datagram");
    assert_eq!(&buf[..n], b"ping\n");

    let ss = json(&["ss", "-ue", "--json", "--stack", &name]);
    let rows = ss.as_array().expect("array");
    assert_eq!(rows.len(), 1, "one UDP flow: {ss}");
    let row = row_where(&ss, "local", &format!("10.0.2.2:{port}"));
    assert_eq!(row["proto"], "udp");
    assert_eq!(row["state"], "ESTAB");
    let guest = row["peer"].as_str().unwrap_or_default();
    assert!(guest.starts_with("10.0.2.15:"), "guest side {guest:?}");
    assert_eq!(
        row["host"].as_str().unwrap_or_default(),
        format!("{from}->127.0.0.1:{port}"),
        "the host socket the datagram came from: {row}"
    );
    // ss's text form, and TCP (the default) without it.
    let text =
        String::from_utf8_lossy(&ustack_ok(&["ss", "-ue", "--stack", &name]).stdout).to_string();
    assert!(
        text.lines().any(|l| l.starts_with("ESTAB")
            && l.contains(&format!("10.0.2.2:{port}"))
            && l.contains(guest)
            && l.contains(&format!("host:{from}->127.0.0.1:{port}"))),
        "{text}"
    );
    let tcp = json(&["ss", "--json", "--stack", &name]);
    assert!(
        tcp.as_array()
            .expect("array")
            .iter()
            .all(|r| r["proto"] != "udp"),
        "{tcp}"
    );
    let by_port = json(&[
        "ss",
        "-u",
        "--json",
        "--stack",
        &name,
        "sport",
        "=",
        &format!(":{port}"),
    ]);
    assert_eq!(by_port.as_array().map(Vec::len), Some(1), "{by_port}");

    host.send_to(b"done\n", from).expect("answer");
    let status = run.exit_within(Duration::from_secs(30), "ustack run");
    let mut out = String::new();
    if let Some(mut o) = run.child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    assert!(status.success(), "ustack run failed");
    assert!(out.contains("got done"), "{out}");
}

/// Seconds to fetch /bytes/N with curl from `ns` (byte-exact check included).
fn fetch(ns: &NetNs, n: u64) -> f64 {
    curl_bytes(ns, n, 120)
}

/// Wait (at most 20 s) for a capture started with `-c count` to stop,
/// check its summary, and read its file with `tcpdump -nr`: one line per
/// frame, `count` of them.
fn finish_capture(
    mut cap: ChildGuard,
    mut err: std::process::ChildStderr,
    file: &str,
    count: u32,
) -> String {
    let t0 = std::time::Instant::now();
    while cap.child.try_wait().expect("wait").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "capture did not stop after -c {count}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    assert!(rest.contains(&format!("{count} frames captured")), "{rest}");
    let td = Command::new("tcpdump")
        .args(["-nr", file])
        .output()
        .expect("run tcpdump (install it: scripts/deps.sh)");
    assert!(
        td.status.success(),
        "tcpdump: {}",
        String::from_utf8_lossy(&td.stderr)
    );
    let text = String::from_utf8_lossy(&td.stdout).into_owned();
    assert_eq!(text.lines().count(), count as usize, "{text}");
    text
}

#[test]
fn capture_writes_pcap_tcpdump_reads_and_a_stalled_reader_loses_frames_not_speed() {
    let ns = NetNs::new();
    let name = format!("cap-{}", unique());
    let srv = Serve::start(&ns, &["--name", &name]);
    let dir = TempDir::new("capture");
    let file = dir.join("c.pcap");
    let file_s = file.to_string_lossy().to_string();

    // A capture of port 80 into a file, while curl fetches a page.
    let (cap, err) = start_capture(&name, &file_s, Some(6), &["tcp", "and", "port", "80"]);
    // ICMP does not pass the filter; the HTTP exchange does.
    let _ = ns
        .cmd("ping")
        .args(["-c", "1", "-W", "2", "10.77.0.2"])
        .output();
    fetch(&ns, 100_000);
    let text = finish_capture(cap, err, &file_s, 6);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.contains("> 10.77.0.2.80: Flags [S]"),
        "the first frame is not the SYN to port 80: {text}"
    );
    assert!(!text.contains("ICMP"), "{text}");

    // The same over IPv6 (tcpdump's `ip6`): the filter sees TCP behind an
    // IPv6 header, and IPv4 traffic does not pass.
    let file6 = dir.join("c6.pcap").to_string_lossy().to_string();
    let (cap6, err6) = start_capture(
        &name,
        &file6,
        Some(6),
        &["ip6", "and", "tcp", "and", "port", "80"],
    );
    fetch(&ns, 1000);
    let out = ns.sh("curl -6 -g -s -o /dev/null --max-time 20 'http://[fd77::2]/bytes/100000'");
    assert!(out.status.success(), "curl -6");
    let text = finish_capture(cap6, err6, &file6, 6);
    assert!(
        text.lines().all(|l| l.contains(" IP6 ")),
        "an IPv4 frame passed `ip6`: {text}"
    );
    assert!(
        text.lines()
            .next()
            .unwrap_or_default()
            .contains("> fd77::2.80: Flags [S]"),
        "the first frame is not the SYN to [fd77::2]:80: {text}"
    );

    // A reader that stops reading (its stdout pipe is full and nobody reads
    // it) with a small buffer: the stack drops frames and a transfer runs on.
    let mut stalled = ChildGuard {
        child: Command::new(BIN)
            .args(["capture", "--stack", &name, "-B", "64", "-w", "-"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn a stalled capture"),
    };
    let mut serr = stalled.child.stderr.take().expect("stderr");
    let mut banner = [0u8; 22];
    serr.read_exact(&mut banner)
        .expect("stalled capture banner");
    fetch(&ns, 50_000_000);
    // Let the reader go: read its output to the end after asking it to stop.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(stalled.child.id() as i32, libc::SIGTERM) };
    let mut sout = stalled.child.stdout.take().expect("stdout");
    let mut pcap = Vec::new();
    sout.read_to_end(&mut pcap).expect("capture output");
    let mut summary = String::new();
    let _ = serr.read_to_string(&mut summary);
    let st = stalled.child.wait().expect("wait");
    assert!(st.success(), "stalled capture: {summary}");
    let dropped: u64 = summary
        .lines()
        .last()
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no drop count in {summary:?}"));
    assert!(dropped > 0, "a stalled reader lost nothing? {summary}");
    assert!(pcap.len() >= 24, "no pcap header");
    srv.stop_clean();
}

#[test]
fn capture_from_a_live_hardened_run_reads_the_ring() {
    use std::net::{Ipv4Addr, TcpListener};
    let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = host.local_addr().expect("addr").port();
    let name = format!("caprun-{}", unique());
    let dir = TempDir::new("caprun");
    let fifo = dir.join("go");
    let c_fifo = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0, "mkfifo");
    let file = dir.join("c.pcap");
    let file_s = file.to_string_lossy().to_string();
    // The command connects to the host and sends 2 MB once the test opens
    // the FIFO (after the capture is on).
    let script = format!(
        "read -r _ < {}; exec 3<>/dev/tcp/10.0.2.2/{port}; head -c 2000000 /dev/zero >&3",
        fifo.display()
    );
    let mut run = ChildGuard {
        child: Command::new(BIN)
            .args(["run", "--name", &name, "--", "bash", "-c", &script])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ustack run"),
    };
    // Synchronise on the stack's control endpoint answering.
    wait_answering(&name, &mut run, Duration::from_secs(20));
    let port_s = port.to_string();
    let (cap, err) = start_capture(&name, &file_s, Some(20), &["tcp", "and", "port", &port_s]);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .and_then(|mut f| f.write_all(b"go\n"))
        .expect("release the command");
    let (mut s, _) = host.accept().expect("the sandbox connects");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the sandbox's bytes");
    assert_eq!(got.len(), 2_000_000);
    let text = finish_capture(cap, err, &file_s, 20);
    assert!(
        text.lines()
            .next()
            .unwrap_or_default()
            .contains(&format!("> 10.0.2.2.{port}: Flags [S]")),
        "the first frame is not the SYN: {text}"
    );
    // The hardened relay (seccomp) served the capture and exits cleanly.
    let status = run.exit_within(Duration::from_secs(30), "ustack run");
    let mut rerr = String::new();
    if let Some(mut e) = run.child.stderr.take() {
        let _ = e.read_to_string(&mut rerr);
    }
    assert!(status.success(), "ustack run failed: {rerr}");
}

#[test]
fn a_forbidden_system_call_stops_the_relay_and_is_named() {
    // The hidden --seccomp-selftest makes the hardened relay call ptrace(2)
    // (number 101 on x86_64), as a compromised one might.
    let out = ustack(&["run", "--seccomp-selftest", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(159), "{err}");
    assert!(
        err.contains("the relay made system call 101, which its seccomp filter forbids"),
        "{err}"
    );
    // Without it, the same hardened relay runs the command normally.
    let ok = ustack(&["run", "--", "sh", "-c", "exit 4"]);
    assert_eq!(
        ok.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn the_relay_lets_go_of_inherited_descriptors_the_command_keeps() {
    // A descriptor ustack is started with (7, a file): the command inherits
    // it; the hardened relay closes its own copy once the command has it.
    let name = format!("fd-{}", unique());
    let script = format!(
        "exec 7</etc/hostname; exec {BIN} run --name {name} -- \
         sh -c 'head -c 1 <&7 >/dev/null && echo has-7; read -r x; echo $x'"
    );
    let mut run = ChildGuard {
        child: Command::new("bash")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn bash"),
    };
    // Wait until the stack is registered (its control endpoint answers).
    let t0 = std::time::Instant::now();
    loop {
        let ps = json(&["ps", "--json"]);
        if let Some(pid) = ps
            .as_array()
            .expect("array")
            .iter()
            .find(|s| s["name"] == name.as_str())
            .and_then(|s| s["pid"].as_u64())
        {
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("fds");
            for e in fds.flatten() {
                let n: i32 = e.file_name().to_string_lossy().parse().unwrap_or(-1);
                let target = std::fs::read_link(e.path())
                    .map(|p| p.to_string_lossy().to_string())
                    .unwrap_or_default();
                assert!(
                    n <= 2 || !target.ends_with("/etc/hostname"),
                    "the relay kept inherited descriptor {n} -> {target}"
                );
                assert!(
                    n <= 2
                        || [
                            "anon_inode:",
                            "socket:",
                            "pipe:",
                            "/dev/net/tun",
                            "/dev/shm/"
                        ]
                        .iter()
                        .any(|p| target.starts_with(p)),
                    "unexpected descriptor {n} -> {target} in the relay"
                );
            }
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{name} never registered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stdin = run.child.stdin.take().expect("stdin");
    stdin.write_all(b"bye\n").expect("release the command");
    drop(stdin);
    let mut out = String::new();
    run.child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("output");
    let st = run.child.wait().expect("wait");
    assert!(st.success(), "{out}");
    assert!(out.contains("has-7") && out.contains("bye"), "{out}");
}

/// Accept a connection on `l` within 30 s (polled: `l` is nonblocking).
fn accept_within(l: &std::net::TcpListener) -> std::net::TcpStream {
    l.set_nonblocking(true).expect("nonblocking");
    let t0 = std::time::Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).expect("blocking");
                s.set_read_timeout(Some(Duration::from_secs(30)))
                    .expect("timeout");
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "the sandbox never connected"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Lines of a child's output, read on a thread of their own.
fn lines_of(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Wait (at most 30 s) for a line of `rx` for which `f` holds; the lines
/// seen on the way are added to `seen`.
fn line_where(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, f: impl Fn(&str) -> bool) {
    let t0 = std::time::Instant::now();
    loop {
        let left = Duration::from_secs(30).saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => {
                let hit = f(&l);
                seen.push(l);
                if hit {
                    return;
                }
            }
            Err(_) => panic!("no such line; saw {seen:?}"),
        }
    }
}

fn read_line(s: &mut std::net::TcpStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while s.read(&mut b).expect("read a line") == 1 && b[0] != b'\n' {
        out.push(b[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn sysctl_nstat_watch_and_a_killed_client_on_a_live_run() {
    use std::net::{Ipv4Addr, TcpListener};
    let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = host.local_addr().expect("addr").port();
    let name = format!("opsctl-{}", unique());
    // Connection A, a ping of the gateway (answered by the engine: its TTL
    // is ip_default_ttl's), then, when the host says so, connection B and
    // another ping.
    let script = format!(
        "exec 3<>/dev/tcp/10.0.2.2/{port}; echo a >&3; \
         ping -c 1 -W 5 10.0.2.2 | grep -o 'ttl=[0-9]*'; read -r x <&3; \
         exec 4<>/dev/tcp/10.0.2.2/{port}; echo b >&4; \
         ping -c 1 -W 5 10.0.2.2 | grep -o 'ttl=[0-9]*'; read -r y <&4; echo end"
    );
    let mut run = ChildGuard {
        child: Command::new(BIN)
            .args(["run", "--name", &name, "--", "bash", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ustack run"),
    };
    let out = lines_of(run.child.stdout.take().expect("stdout"));
    let err = lines_of(run.child.stderr.take().expect("stderr"));
    let mut seen = Vec::new();
    let mut a = accept_within(&host);
    assert_eq!(read_line(&mut a), "a");
    line_where(&out, &mut seen, |l| l == "ttl=64");

    // nstat --watch prints increments each period: take the history, start
    // it, see an empty period, open a connection, see it counted once, then
    // a period without it again.
    json(&["nstat", "--json", "--stack", &name]);
    let mut watch = ChildGuard {
        child: Command::new(BIN)
            .args([
                "nstat",
                "--watch",
                "0.1",
                "-z",
                "--stack",
                &name,
                "RelayTcpOpened",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn nstat --watch"),
    };
    let wout = lines_of(watch.child.stdout.take().expect("stdout"));
    let opened = |v: &'static str| {
        move |l: &str| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w == ["RelayTcpOpened", v]
        }
    };
    let mut wseen = Vec::new();
    line_where(&wout, &mut wseen, opened("0"));

    // sysctl: tcp_wmem and ip_default_ttl change live; a bad value, or a
    // tunable the relay cannot apply, is refused and changes nothing.
    let before = json(&[
        "sysctl",
        "--json",
        "--stack",
        &name,
        "net.ipv4.tcp_wmem",
        "net.ipv4.ip_default_ttl",
    ]);
    assert_eq!(before["net.ipv4.ip_default_ttl"], "64", "{before}");
    let set = ustack_ok(&[
        "sysctl",
        "--stack",
        &name,
        "net.ipv4.tcp_wmem=4096 4096 4096",
        "net.ipv4.ip_default_ttl=33",
    ]);
    let set = String::from_utf8_lossy(&set.stdout).to_string();
    assert!(set.contains("net.ipv4.ip_default_ttl = 33"), "{set}");
    let refused = |args: &[&str], why: &str| {
        let mut a = vec!["sysctl", "--stack", &name];
        a.extend_from_slice(args);
        let o = ustack(&a);
        let e = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{args:?} accepted");
        assert!(e.contains(why), "{args:?}: {e}");
    };
    refused(
        &["net.ipv4.tcp_sack=0", "net.ipv4.tcp_wmem=lots"],
        "tcp_wmem",
    );
    refused(&["net.ipv4.ip_default_ttl=0"], "ip_default_ttl");
    refused(&["net.ipv4.ip_default_ttl=256"], "ip_default_ttl");
    refused(
        &[
            "net.ipv4.ip_default_ttl=20",
            "net.ipv4.tcp_notsent_lowat=16384",
        ],
        "tcp_notsent_lowat",
    );
    let after = json(&[
        "sysctl",
        "--json",
        "--stack",
        &name,
        "net.ipv4.tcp_wmem",
        "net.ipv4.ip_default_ttl",
        "net.ipv4.tcp_sack",
        "net.ipv4.tcp_notsent_lowat",
    ]);
    assert_eq!(after["net.ipv4.tcp_wmem"], "4096\t4096\t4096", "{after}");
    assert_eq!(after["net.ipv4.ip_default_ttl"], "33", "{after}");
    assert_eq!(after["net.ipv4.tcp_sack"], "1", "{after}");
    assert_eq!(after["net.ipv4.tcp_notsent_lowat"], "4294967295", "{after}");

    // Connection B takes the new send buffer, A keeps its own; the
    // engine's next packets carry the new TTL.
    a.write_all(b"go\n").expect("release the command");
    let mut b = accept_within(&host);
    assert_eq!(read_line(&mut b), "b");
    line_where(&out, &mut seen, |l| l == "ttl=33");
    let ss = json(&["ss", "-tie", "--json", "--stack", &name]);
    let sndbuf = |s: &std::net::TcpStream| {
        let want = format!("{}->", s.peer_addr().expect("peer"));
        let row = ss
            .as_array()
            .expect("array")
            .iter()
            .find(|r| r["host"].as_str().is_some_and(|h| h.starts_with(&want)))
            .unwrap_or_else(|| panic!("no flow with host socket {want} in {ss}"));
        row["info"]["send_buffer"].as_u64().expect("send_buffer")
    };
    let (sa, sb) = (sndbuf(&a), sndbuf(&b));
    assert!(sb <= 4096, "B's send buffer {sb} above the new tcp_wmem");
    assert!(sa > 4096, "A's send buffer {sa}: the old tcp_wmem's");
    line_where(&wout, &mut wseen, opened("1"));
    line_where(&wout, &mut wseen, opened("0"));
    drop(watch);

    // A capture client killed (-9) leaves the stack serving: other requests,
    // and a new capture at once (the stack lets a dead client's go).
    let capture = || {
        let mut c = ChildGuard {
            child: Command::new(BIN)
                .args(["capture", "--stack", &name, "-w", "/dev/null"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn ustack capture"),
        };
        let mut e = c.child.stderr.take().expect("stderr");
        let mut banner = [0u8; 22];
        let started = e.read_exact(&mut banner).is_ok() && &banner == b"ustack capture: listen";
        let mut rest = String::new();
        if !started {
            let _ = e.read_to_string(&mut rest);
            rest.insert_str(0, &String::from_utf8_lossy(&banner));
        }
        (c, started, rest)
    };
    let (mut first, started, why) = capture();
    assert!(started, "{why}");
    first.child.kill().expect("kill -9");
    first.child.wait().expect("reap");
    json(&["nstat", "--json", "--stack", &name]);
    json(&["ss", "-t", "--json", "--stack", &name]);
    let (second, started, why) = capture();
    assert!(started, "no new capture after a killed one: {why}");
    drop(second);

    b.write_all(b"done\n").expect("release the command");
    line_where(&out, &mut seen, |l| l == "end");
    let status = run.exit_within(Duration::from_secs(30), "run");
    let errs: Vec<String> = err.try_iter().collect();
    assert!(status.success(), "{errs:?}");
}

#[test]
fn the_only_running_stack_is_chosen_by_default() {
    // Other tests' stacks run beside this one on the host. Inside `ustack
    // run` only the stacks started there are seen (the sandbox has a
    // /dev/shm of its own): there a `serve` is the only one, and `nstat`
    // and `ss` without --stack choose it.
    let outer = format!("selo-{}", unique());
    let inner = format!("seli-{}", unique());
    let script = format!(
        "{BIN} serve --tap sel0 --name {inner} >/dev/null 2>&1 & S=$!; \
         for i in $(seq 400); do {BIN} ps 2>/dev/null | grep -q {inner} && break; sleep 0.05; done; \
         echo ps: $({BIN} ps --json); {BIN} nstat -a -z IpInReceives; \
         {BIN} ss -l -n sport = :7; kill $S; wait $S"
    );
    let out = ustack(&["run", "--name", &outer, "--", "sh", "-c", &script]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ps = text
        .lines()
        .find_map(|l| l.strip_prefix("ps: "))
        .unwrap_or_else(|| panic!("no ps output: {text}"));
    let ps: Value = serde_json::from_str(ps).unwrap_or_else(|e| panic!("{e}: {ps}"));
    let listed: Vec<&str> = ps
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(listed, [inner.as_str()], "{text}");
    assert!(text.contains(&format!("#ustack {inner}\n")), "{text}");
    assert!(text.contains("IpInReceives"), "{text}");
    assert!(text.contains("LISTEN") && text.contains(":7 "), "{text}");
}

/// SYN cookies against Linux's TCP (RFC 4987, Linux's encoding: the MSS
/// index in the ISN; window scale, SACK and ECN in the low bits of TSval).
/// With `tcp_syncookies=2` every SYN is answered with a cookie and nothing
/// is kept, so the kernel's client completes its handshake through the
/// cookie alone; the connection must come out with the same options as
/// one opened the usual way (window scale, SACK, timestamps, MSS) and move
/// data byte-exact both ways.
#[test]
fn syn_cookies_carry_linux_clients_options_through_the_handshake() {
    let ns = NetNs::new();
    let name = format!("cookie-{}", unique());
    let srv = Serve::start(&ns, &["--name", &name]);
    let n = 4 << 20;
    // One echo connection: its `ss -ti` fields while open, then closed.
    let echo_once = || -> Value {
        let (release, hold) = mpsc::channel();
        let (done, ports) = mpsc::channel();
        let h = echo_and_hold(&ns, n, hold, done);
        let port = ports
            .recv_timeout(Duration::from_secs(60))
            .expect("the echo finished");
        let ss = json(&["ss", "-ti", "--json", "--stack", &name]);
        let info = row_where(&ss, "peer", &format!("{KERNEL_MAPPED}:{port}"))["info"].clone();
        drop(release);
        h.join().expect("echo");
        info
    };
    let options = |i: &Value| {
        (
            i["wscale_snd"].as_u64(),
            i["wscale_rcv"].as_u64(),
            i["sack"].as_bool(),
            i["timestamps"].as_bool(),
            i["mss"].as_u64(),
        )
    };
    // The usual way (no queue pressure: no cookie).
    json(&["nstat", "--json", "--stack", &name]);
    let plain = echo_once();
    let d = json(&["nstat", "--json", "--stack", &name]);
    assert_eq!(counter(&d, "TcpExtSyncookiesSent"), 0, "{d}");
    // Every SYN gets a cookie.
    ustack_ok(&["sysctl", "--stack", &name, "net.ipv4.tcp_syncookies=2"]);
    let cookie = echo_once();
    let d = json(&["nstat", "--json", "--stack", &name]);
    assert_eq!(counter(&d, "TcpExtSyncookiesSent"), 1, "{d}");
    assert_eq!(counter(&d, "TcpExtSyncookiesRecv"), 1, "{d}");
    assert_eq!(counter(&d, "TcpExtSyncookiesFailed"), 0, "{d}");
    assert_eq!(options(&cookie), options(&plain), "{cookie} vs {plain}");
    let (wscale, _, sack, ts, _) = options(&cookie);
    assert!(
        wscale.is_some_and(|w| w > 0) && sack == Some(true) && ts == Some(true),
        "Linux offers window scaling, SACK and timestamps: {cookie}"
    );
    // And a page over HTTP, byte-exact, through another cookie.
    let secs = curl_bytes(&ns, 1 << 20, 30);
    assert!(secs > 0.0);
    let d = json(&["nstat", "--json", "--stack", &name]);
    assert_eq!(counter(&d, "TcpExtSyncookiesRecv"), 1, "{d}");
    srv.stop_clean();
}

/// Wait (polled, at most `limit`) until stack `name`'s control endpoint
/// answers, asserting meanwhile that `child`, which runs it, has not exited.
fn wait_answering(name: &str, child: &mut ChildGuard, limit: Duration) {
    let t0 = std::time::Instant::now();
    while !ustack(&["nstat", "--stack", name]).status.success() {
        assert!(
            t0.elapsed() < limit,
            "the control endpoint {name} never answered"
        );
        assert!(
            child.child.try_wait().expect("wait").is_none(),
            "the process serving {name} exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A live `ustack attach` serving `ns`, whose TAP `tap0` is configured as
/// `ustack run` configures its sandbox (10.0.2.15/24, default route via
/// 10.0.2.2), with the control endpoint NAME and metrics on 127.0.0.1:MPORT.
/// Returned once its control endpoint answers (polled, at most 30 s).
fn live_attach(ns: &NetNs, name: &str, mport: u16) -> ChildGuard {
    for a in [
        &["tuntap", "add", "mode", "tap", "name", "tap0"][..],
        &["addr", "add", "10.0.2.15/24", "dev", "tap0"],
        &["link", "set", "tap0", "up"],
        &["route", "add", "default", "via", "10.0.2.2"],
    ] {
        must(Command::new("ip").args(["-n", &ns.name]).args(a));
    }
    let netns = format!("/run/netns/{}", ns.name);
    let metrics = format!("127.0.0.1:{mport}");
    let mut guard = ChildGuard {
        child: Command::new(BIN)
            .args([
                "attach",
                "--netns",
                &netns,
                "--tap",
                "tap0",
                "--name",
                name,
                "--metrics",
                &metrics,
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn ustack attach"),
    };
    wait_answering(name, &mut guard, Duration::from_secs(30));
    guard
}

/// Metric `metric` of stack `name` in a Prometheus scrape, if present.
fn metric(scrape: &str, metric: &str, name: &str) -> Option<u64> {
    let head = format!("{metric}{{stack=\"{name}\"}} ");
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(head.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn ss_nstat_and_metrics_per_guest_against_live_attaches() {
    use std::net::{Ipv4Addr, TcpListener};
    // Two guests, each served by its own `ustack attach` (hardened, as the
    // binary runs it), each sending a different, known number of bytes to
    // the host: each relay's counters and metrics are its own guest's.
    let sizes = [200_000usize, 300_000];
    let nss = [NetNs::new(), NetNs::new()];
    let names: Vec<String> = (0..2).map(|i| format!("opsatt{i}-{}", unique())).collect();
    let mports = [free_port(), free_port()];
    let mut relays: Vec<ChildGuard> = (0..2)
        .map(|i| live_attach(&nss[i], &names[i], mports[i]))
        .collect();
    let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = host.local_addr().expect("addr").port();

    for i in 0..2 {
        let (name, n) = (names[i].as_str(), sizes[i]);
        // ps: listed as an attach, with its PID.
        let ps = json(&["ps", "--json"]);
        let me = ps
            .as_array()
            .expect("array")
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in ps: {ps}"));
        assert_eq!(me["mode"], "attach", "{me}");
        assert_eq!(me["pid"].as_u64(), Some(u64::from(relays[i].child.id())));
        // Before any flow: the counters are there under their Linux names,
        // and nothing was relayed yet.
        let before = scrape(mports[i]);
        assert_eq!(
            metric(&before, "ustack_relay_bytes_guest_to_host_total", name),
            Some(0),
            "{before}"
        );
        for m in [
            "ustack_ip_in_receives_total",
            "ustack_tcp_passive_opens_total",
            "ustack_tcp_in_segs_total",
        ] {
            assert!(metric(&before, m, name).is_some(), "no {m} in {before}");
        }
        assert_eq!(
            metric(&before, "ustack_tcp_passive_opens_total", name),
            Some(0)
        );
        json(&["nstat", "--json", "--stack", name]);

        // The guest sends n bytes to the host through the gateway and holds
        // the connection until the host answers.
        let script = format!(
            "exec 3<>/dev/tcp/10.0.2.2/{port}; head -c {n} /dev/zero >&3; read -r x <&3; echo got $x"
        );
        let mut guest = ChildGuard {
            child: nss[i]
                .cmd("bash")
                .args(["-c", &script])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn the guest's client"),
        };
        let mut s = accept_within(&host);
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).expect("the guest's bytes");
        assert!(got.iter().all(|b| *b == 0));

        // ss: the guest's connection, established, and its host socket.
        let ss = json(&["ss", "-tie", "--json", "--stack", name]);
        let row = row_where(&ss, "local", &format!("10.0.2.2:{port}"));
        assert_eq!(row["state"], "ESTAB");
        assert_eq!(
            row["peer"].as_str().map(|p| p.starts_with("10.0.2.15:")),
            Some(true)
        );
        let hostside = row["host"].as_str().unwrap_or_default();
        assert!(
            hostside.ends_with(&format!("->127.0.0.1:{port}")),
            "host socket {hostside:?}"
        );
        // nstat: what moved since the history was taken.
        let c = json(&["nstat", "--json", "--stack", name]);
        assert_eq!(counter(&c, "RelayTcpOpened"), 1, "{c}");
        assert_eq!(counter(&c, "TcpPassiveOpens"), 1, "{c}");
        assert_eq!(counter(&c, "RelayBytesGuestToHost"), n as u64, "{c}");
        assert!(
            counter(&c, "TcpInSegs") >= (n as u64).div_ceil(65480),
            "{c}"
        );
        // The metrics moved with the transfer, by exactly its size.
        let after = scrape(mports[i]);
        assert_eq!(
            metric(&after, "ustack_relay_bytes_guest_to_host_total", name),
            Some(n as u64),
            "{after}"
        );
        assert_eq!(
            metric(&after, "ustack_tcp_passive_opens_total", name),
            Some(1)
        );
        assert!(
            metric(&after, "ustack_ip_in_receives_total", name)
                > metric(&before, "ustack_ip_in_receives_total", name)
        );
        assert_eq!(
            metric(&after, "ustack_tcp_curr_estab", name),
            Some(1),
            "{after}"
        );

        s.write_all(b"done\n").expect("release the guest");
        // Its output ends when it exits (it exits once it read the line).
        let mut said = String::new();
        if let Some(mut o) = guest.child.stdout.take() {
            o.read_to_string(&mut said).expect("the guest's output");
        }
        let st = guest.child.wait().expect("the guest's client");
        assert!(st.success(), "guest client: {st:?}");
        assert!(said.contains("got done"), "{said}");
    }
    // Each relay counted its own guest only.
    for i in 0..2 {
        let m = scrape(mports[i]);
        assert_eq!(
            metric(&m, "ustack_relay_bytes_guest_to_host_total", &names[i]),
            Some(sizes[i] as u64),
            "{m}"
        );
        assert_eq!(
            metric(&m, "ustack_relay_tcp_opened_total", &names[i]),
            Some(1),
            "{m}"
        );
        let other = &names[1 - i];
        assert!(!m.contains(&format!("stack=\"{other}\"")), "{m}");
    }
    // SIGTERM stops each attach cleanly: exit status 0 and its control
    // endpoint's file gone (a relay killed by the signal would leave it).
    for (r, name) in relays.iter_mut().zip(&names) {
        let st = r.stop();
        assert!(st.is_some_and(|s| s.success()), "{name}: {st:?}");
        let file = format!("/dev/shm/ustack-ipc-ctl.{name}");
        assert!(!std::path::Path::new(&file).exists(), "{file} left behind");
    }
}

#[test]
fn no_control_registers_no_endpoint() {
    use std::io::BufRead;
    // Once the command runs (it says so), the relay's control endpoint is
    // served: with it the relay is listed (as a run, with its PID); with
    // --no-control it is not. --metrics (read through it) is refused.
    let listed = |extra: &[&str]| -> (u32, Value) {
        let mut run = ChildGuard {
            child: Command::new(BIN)
                .arg("run")
                .args(extra)
                .args(["--", "sh", "-c", "echo ready; read x; exit 0"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn ustack run"),
        };
        let pid = run.child.id();
        let mut out = std::io::BufReader::new(run.child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("the command's line");
        assert_eq!(line.trim(), "ready", "ustack run {extra:?}");
        let ps = json(&["ps", "--json"]);
        // Let the command end; ustack run with it.
        drop(run.child.stdin.take());
        let st = run.exit_within(Duration::from_secs(30), &format!("ustack run {extra:?}"));
        assert!(st.success(), "ustack run {extra:?}: {st:?}");
        (pid, ps)
    };
    let mine = |pid: u32, ps: &Value| {
        ps.as_array()
            .expect("array")
            .iter()
            .any(|s| s["pid"].as_u64() == Some(u64::from(pid)) && s["mode"] == "run")
    };
    let (pid, ps) = listed(&[]);
    assert!(mine(pid, &ps), "the relay {pid} not in ps: {ps}");
    let (pid, ps) = listed(&["--no-control"]);
    assert!(
        !mine(pid, &ps),
        "the relay {pid} in ps with --no-control: {ps}"
    );
    let bad = ustack(&[
        "run",
        "--no-control",
        "--metrics",
        "127.0.0.1:1",
        "--",
        "true",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--no-control"));
}

/// For each thread of `pid`: whether bit `sig` is set in the
/// `/proc/PID/task/*/status` line `field` (`SigBlk:`, `SigIgn:`).
fn signal_bit_per_thread(pid: u32, field: &str, sig: i32) -> Vec<bool> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    let mut bits = Vec::new();
    for t in tasks.flatten() {
        let status = std::fs::read_to_string(t.path().join("status")).expect("status");
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {field} in {status}"));
        bits.push(mask & (1 << (sig - 1)) != 0);
    }
    assert!(!bits.is_empty(), "no thread of {pid}");
    bits
}

/// `ustack serve --name NAME` in `ns`, started with SIGHUP's action set
/// to ignore (as `nohup` does) or to the default (whatever the test runner
/// had), once its control endpoint answers.
fn serve_with_sighup(ns: &NetNs, name: &str, ignored: bool) -> ChildGuard {
    use std::os::unix::process::CommandExt;
    let tap = format!("ut{}", unique());
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--tap", &tap, "--netns", &ns.name, "--name", name])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let action = if ignored {
        libc::SIG_IGN
    } else {
        libc::SIG_DFL
    };
    // SAFETY: between fork and exec the closure only calls signal(2),
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGHUP, action);
            Ok(())
        });
    }
    let mut run = ChildGuard {
        child: cmd.spawn().expect("spawn ustack serve"),
    };
    wait_answering(name, &mut run, Duration::from_secs(20));
    run
}

#[test]
fn sighup_stops_serve_cleanly_unless_started_under_nohup() {
    // The terminal going away (SIGHUP) stops `serve` as Ctrl-C does: exit
    // status 0, its control endpoint's file removed.
    let ns = NetNs::new();
    let name = format!("hup-{}", unique());
    let mut srv = serve_with_sighup(&ns, &name, false);
    let file = format!("/dev/shm/ustack-ipc-ctl.{name}");
    assert!(std::path::Path::new(&file).exists(), "no {file}");
    let pid = libc::pid_t::try_from(srv.child.id()).expect("pid");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let st = srv.exit_within(Duration::from_secs(20), "serve after SIGHUP");
    assert!(st.success(), "serve after SIGHUP: {st}");
    assert!(!std::path::Path::new(&file).exists(), "{file} left behind");

    // Started with SIGHUP ignored (nohup), it keeps it ignored: not
    // blocked (a blocked signal stays pending even when ignored, and would
    // be taken as a stop).
    let name = format!("nohup-{}", unique());
    let mut run = serve_with_sighup(&ns, &name, true);
    // (The thread waiting for the signals has them unblocked while it
    // waits; the others have SIGTERM blocked, and would have SIGHUP too.)
    let pid = run.child.id();
    let ignored = signal_bit_per_thread(pid, "SigIgn:", libc::SIGHUP);
    assert!(
        ignored.iter().all(|&b| b),
        "SIGHUP not ignored: {ignored:?}"
    );
    let hup = signal_bit_per_thread(pid, "SigBlk:", libc::SIGHUP);
    assert!(hup.iter().all(|&b| !b), "SIGHUP blocked: {hup:?}");
    let term = signal_bit_per_thread(pid, "SigBlk:", libc::SIGTERM);
    assert!(term.iter().any(|&b| b), "SIGTERM blocked nowhere: {term:?}");
    // And SIGTERM still stops it cleanly.
    let st = run.stop();
    assert!(st.is_some_and(|s| s.success()), "{st:?}");
}
