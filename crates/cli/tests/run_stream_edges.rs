//! `ustack run`'s relay reads a host TCP socket until a read comes back
//! short, then waits for the socket's next edge (EPOLLET) instead of
//! calling recv(2) once more to find nothing. These are the cases where a
//! short read does not mean that nothing more will come without a new edge:
//! the peer's FIN already queued behind the data, and urgent data, at whose
//! mark recv(2) stops while more data waits behind it. Each runs the real
//! binary (hardened when run as root, as in CI) with a guest in Python.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Output};
use std::time::Duration;

use common::BIN;

/// `ustack run -- python3 -c SCRIPT PORT`, bounded in time by the script's
/// own socket timeouts.
fn run_guest(script: &str, port: u16) -> Output {
    Command::new(BIN)
        .args(["run", "--", "python3", "-c", script, &port.to_string()])
        .output()
        .expect("spawn ustack run")
}

fn check(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ustack run failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn answers_closed_at_once_arrive_whole_with_their_fin() {
    // 300 exchanges, each a connection the host answers and closes at once:
    // the answer and the FIN reach the relay's socket together.
    const N: usize = 300;
    let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = host.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        for i in 0..N {
            let (mut s, _) = host.accept().expect("accept");
            s.set_read_timeout(Some(Duration::from_secs(20)))
                .expect("timeout");
            let mut q = [0u8; 1];
            s.read_exact(&mut q).expect("the guest's request");
            let answer: Vec<u8> = (0..1000 + i).map(|k| (k % 251) as u8 ^ q[0]).collect();
            s.write_all(&answer).expect("answer");
            // Dropped: FIN right behind the answer.
        }
    });
    let script = r#"
import socket, sys
port = int(sys.argv[1])
for i in range(300):
    c = socket.create_connection(("10.0.2.2", port), timeout=10)
    c.settimeout(10)
    q = i % 256
    c.sendall(bytes([q]))
    got = bytearray()
    while True:
        d = c.recv(65536)
        if not d:
            break
        got += d
    want = bytes(((k % 251) ^ q) for k in range(1000 + i))
    if bytes(got) != want:
        print("exchange %d: %d bytes, want %d" % (i, len(got), len(want)))
        sys.exit(1)
    c.close()
print("ok")
"#;
    let out = run_guest(script, port);
    let stdout = check(&out);
    assert_eq!(stdout.trim(), "ok");
    server.join().expect("server");
}

#[test]
fn data_behind_urgent_data_is_not_left_in_the_host_socket() {
    let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = host.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let (mut s, _) = host.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut q = [0u8; 1];
        s.read_exact(&mut q).expect("the guest's request");
        // "abc", the urgent byte "X", "def" in quick succession: the relay's
        // recv(2) stops at the mark (the urgent byte is not inline) with
        // "def" still queued, and no new data will bring another edge.
        s.write_all(b"abc").expect("send");
        // SAFETY: send(2) of a 1-byte buffer on a connected socket we own.
        let n = unsafe { libc::send(s.as_raw_fd(), b"X".as_ptr().cast(), 1, libc::MSG_OOB) };
        assert_eq!(n, 1, "send MSG_OOB");
        s.write_all(b"def").expect("send");
        // The guest answers once it has "abcdef"; then both close.
        let mut a = [0u8; 2];
        s.read_exact(&mut a).expect("the guest's acknowledgement");
        assert_eq!(&a, b"ok");
    });
    let script = r#"
import socket, sys
c = socket.create_connection(("10.0.2.2", int(sys.argv[1])), timeout=10)
c.settimeout(10)
c.sendall(b"?")
got = b""
while len(got) < 6:
    d = c.recv(100)
    if not d:
        break
    got += d
print(got.decode("latin-1"))
c.sendall(b"ok")
c.close()
"#;
    let out = run_guest(script, port);
    let stdout = check(&out);
    // The relay reads the host socket without SO_OOBINLINE, so the urgent
    // byte is not part of the stream it relays.
    assert_eq!(stdout.trim(), "abcdef");
    server.join().expect("server");
}
