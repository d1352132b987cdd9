//! The runtime honours device deadlines (`Device::next_deadline` /
//! `poll_deferred`): two stacks on a real-time link with `Netem` delaying
//! (and otherwise impairing) frames in both directions.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddrV4};
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use ustack_net::dev::netem::{ImpairSpec, Netem, NetemConfig};
use ustack_net::{Net, TcpListener, TcpStream};

use common::{config, opts, seqpacket_pair, A_IP, B_IP};

fn cfg(spec: &str) -> NetemConfig {
    spec.parse::<ImpairSpec>().expect("spec").config
}

/// Two stacks; A's device delays/impairs A's transmissions with `a_tx`, B's
/// device impairs what B receives with `b_rx`.
fn impaired_pair(a_tx: &str, b_rx: &str, seed: u64) -> (Net, Net) {
    let (da, db) = seqpacket_pair().expect("socketpair");
    let da = Netem::new(da, NetemConfig::none(), cfg(a_tx), seed);
    let db = Netem::new(db, cfg(b_rx), NetemConfig::none(), seed + 1);
    let a = Net::start(config(A_IP, 1), Box::new(da), opts("netem-a")).expect("start A");
    let b = Net::start(config(B_IP, 2), Box::new(db), opts("netem-b")).expect("start B");
    (a, b)
}

#[test]
fn delayed_frames_leave_on_time_in_both_directions() {
    // Nothing else happens on the link: a delayed echo reply only leaves A
    // if the runtime wakes up for the device's deadline.
    let (_a, b) = impaired_pair("delay=30ms", "delay=20ms", 1);
    // The first ping also resolves ARP (two more delayed crossings).
    let first = b
        .ping(A_IP, 1, b"hello", Duration::from_secs(3))
        .expect("ping")
        .expect("a reply");
    assert!(first.rtt >= Duration::from_millis(50), "{:?}", first.rtt);
    for seq in 2..6 {
        let t0 = Instant::now();
        let r = b
            .ping(A_IP, seq, b"hello", Duration::from_secs(2))
            .expect("ping")
            .expect("a reply");
        let wall = t0.elapsed();
        // 20 ms into B + 30 ms out of A; a missed deadline would add a
        // whole idle period (no other traffic wakes the runtime).
        assert!(
            r.rtt >= Duration::from_millis(50) && wall < Duration::from_millis(150),
            "rtt {:?} wall {wall:?}",
            r.rtt
        );
    }
}

#[test]
fn tcp_transfer_under_loss_reorder_duplication_is_exact() {
    const LEN: usize = 2 << 20;
    let spec = "loss=3%,delay=5ms,reorder=25%,duplicate=1%";
    let (a, b) = impaired_pair(spec, spec, 7);
    let listener = TcpListener::bind(&a, SocketAddrV4::new(A_IP, 9000)).expect("bind");
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut state = 0x9e37_79b9_u64;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 32 * 1024];
        let mut left = LEN;
        while left > 0 {
            let n = left.min(buf.len());
            for b in &mut buf[..n] {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            h.update(&buf[..n]);
            s.write_all(&buf[..n]).expect("server write");
            left -= n;
        }
        s.shutdown(Shutdown::Write).expect("shutdown");
        h.finalize().to_vec()
    });
    let t0 = Instant::now();
    let mut s = TcpStream::connect(&b, SocketAddrV4::new(A_IP, 9000)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    loop {
        let n = s.read(&mut buf).expect("client read");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        got += n;
    }
    let sent = server.join().expect("server");
    assert_eq!(got, LEN);
    assert_eq!(h.finalize().to_vec(), sent, "bytes differ");
    eprintln!("2 MiB under {spec} in {:?}", t0.elapsed());
    let c = a.counters();
    assert!(
        c.tcp.RetransSegs > 0,
        "loss must have caused retransmissions"
    );
}
