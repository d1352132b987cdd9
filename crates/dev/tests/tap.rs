//! TAP tests. They run as root inside network namespaces created by the test
//! itself (`unshare(CLONE_NEWNET)` on a dedicated thread): nothing on the host
//! is touched, and the namespaces vanish when the thread ends, even on failure.
//! A machine without /dev/net/tun or privileges makes these tests fail loudly.

mod parts;
use parts::cuts;

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ustack_dev::tap::{HostSide, Tap};
use ustack_dev::Device;

/// Run `f` on a fresh thread in a fresh network namespace.
fn in_new_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        new_netns();
        f()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn new_netns() {
    // SAFETY: unshare only changes the calling thread's network namespace.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "unshare(CLONE_NEWNET) failed (need root): {}",
        io::Error::last_os_error()
    );
}

const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

fn arp_request(sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&OUR_MAC);
    f.extend_from_slice(&[0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&OUR_MAC);
    f.extend_from_slice(&sender.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.octets());
    f
}

/// Wait (bounded, ~2 s) for an ARP reply from `from`; returns the sender MAC.
fn wait_arp_reply(tap: &mut Tap, from: Ipv4Addr) -> Option<[u8; 6]> {
    wait_arp_reply_with(&mut |b| tap.recv(b), from, Duration::from_secs(2))
}

/// Receive with `recv` until an ARP reply from `from` comes (or `limit`
/// passes); returns the sender MAC.
fn wait_arp_reply_with(
    recv: &mut dyn FnMut(&mut [u8]) -> io::Result<Option<usize>>,
    from: Ipv4Addr,
    limit: Duration,
) -> Option<[u8; 6]> {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        match recv(&mut buf).expect("recv") {
            Some(n) => {
                let f = &buf[..n];
                let is_reply = n >= 42 && f[12..14] == [0x08, 0x06] && f[20..22] == [0, 2];
                if is_reply
                    && f[28..32] == from.octets()
                    && f[32..38] == OUR_MAC
                    && f[0..6] == OUR_MAC
                {
                    let mut mac = [0; 6];
                    mac.copy_from_slice(&f[22..28]);
                    return Some(mac);
                }
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    None
}

fn tap_name(tag: &str) -> String {
    format!("ustk-{tag}{}", std::process::id())
}

#[test]
fn kernel_answers_arp_through_tap() {
    in_new_netns(|| {
        let name = tap_name("t");
        let mut tap = Tap::create(&name).expect("create TAP");
        assert_eq!(tap.name(), name);
        assert!(tap.raw_fd().is_some());
        assert_eq!(tap.mtu(), 1500);
        assert_eq!(
            tap.recv(&mut [0u8; 2048]).expect("recv on a down TAP"),
            None,
            "non-blocking"
        );
        let host = tap.host().expect("host side");
        host.set_ipv4(Ipv4Addr::new(10, 77, 0, 1), 24)
            .expect("set address");
        assert!(!host.is_up().unwrap());
        host.set_up(true).expect("up");
        assert!(host.is_up().unwrap());
        tap.set_mtu(1400).expect("set mtu");
        assert_eq!(host.mtu().unwrap(), 1400);
        assert_eq!(tap.mtu(), 1400);
        let kernel_mac = host.mac().expect("kernel mac");

        tap.send(&arp_request(
            Ipv4Addr::new(10, 77, 0, 2),
            Ipv4Addr::new(10, 77, 0, 1),
        ))
        .expect("send ARP request");
        let mac = wait_arp_reply(&mut tap, Ipv4Addr::new(10, 77, 0, 1))
            .expect("kernel ARP reply within 2 s");
        assert_eq!(mac, kernel_mac);

        host.set_up(false).expect("down");
        assert!(!host.is_up().unwrap());
        drop(tap);
        // Non-persistent: closing the fd removes the interface.
        let err = HostSide::new(&name)
            .unwrap()
            .mtu()
            .expect_err("interface must be gone after drop");
        assert!(err.to_string().contains("no such interface"), "{err}");
    });
}

#[test]
fn a_receive_half_reads_on_another_thread_while_the_device_writes() {
    in_new_netns(|| {
        let name = tap_name("rx");
        let mut tap = Tap::create(&name).expect("create TAP");
        let host = tap.host().expect("host side");
        host.set_ipv4(Ipv4Addr::new(10, 77, 0, 1), 24)
            .expect("set address");
        host.set_up(true).expect("up");
        let kernel_mac = host.mac().expect("kernel mac");
        let mut half = tap.split_rx().expect("a TAP has a receive half");
        // Each request is answered before the next is written: the reader
        // thread takes every reply from the half while this thread keeps
        // the device itself, and writes through it.
        const ROUNDS: usize = 20;
        let (ask_tx, ask_rx) = std::sync::mpsc::channel::<()>();
        let (got_tx, got_rx) = std::sync::mpsc::channel::<Option<[u8; 6]>>();
        let reader = std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                if ask_rx.recv().is_err() {
                    return;
                }
                let mac = wait_arp_reply_with(
                    &mut |b| half.recv(b),
                    Ipv4Addr::new(10, 77, 0, 1),
                    Duration::from_secs(2),
                );
                if got_tx.send(mac).is_err() {
                    return;
                }
            }
        });
        for i in 0..ROUNDS {
            ask_tx.send(()).expect("reader alive");
            tap.send(&arp_request(
                Ipv4Addr::new(10, 77, 0, 2),
                Ipv4Addr::new(10, 77, 0, 1),
            ))
            .expect("send ARP request");
            let mac = got_rx
                .recv_timeout(Duration::from_secs(5))
                .expect("reader answers");
            assert_eq!(mac, Some(kernel_mac), "reply {i} through the half");
        }
        reader.join().expect("reader thread");
    });
}

#[test]
fn second_open_of_same_name_is_busy_and_errors_are_clear() {
    in_new_netns(|| {
        let name = tap_name("b");
        let _tap = Tap::create(&name).expect("create TAP");
        let err = Tap::create(&name).expect_err("second open must fail");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(err.to_string(), format!("TAP name {name} is in use"));

        let err = Tap::create("name-that-is-far-too-long").expect_err("long name");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);

        let err = HostSide::new("ustk-nonexist")
            .unwrap()
            .set_up(true)
            .expect_err("missing interface");
        assert!(err.to_string().contains("no such interface"), "{err}");
    });
}

#[test]
fn kernel_picks_a_name_from_a_template() {
    in_new_netns(|| {
        let tap = Tap::create("ustk%d").expect("create TAP from template");
        assert!(
            tap.name().starts_with("ustk") && !tap.name().contains('%'),
            "{}",
            tap.name()
        );
        assert!(tap.host().unwrap().mtu().is_ok());
    });
}

#[test]
fn move_tap_into_another_namespace() {
    in_new_netns(|| {
        // ns1: the destination; keep a handle to it.
        let ns1 = File::open("/proc/thread-self/ns/net").expect("open ns1");
        // ns2: where the TAP is created.
        new_netns();
        let name = tap_name("m");
        let mut tap = Tap::create(&name).expect("create TAP");
        tap.host()
            .unwrap()
            .move_to_netns_fd(ns1.as_raw_fd())
            .expect("move to ns1");
        let err = HostSide::new(&name)
            .unwrap()
            .mtu()
            .expect_err("gone from ns2");
        assert!(err.to_string().contains("no such interface"), "{err}");
        // SAFETY: setns only changes this thread's network namespace.
        let rc = unsafe { libc::setns(ns1.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", io::Error::last_os_error());
        let host = HostSide::new(&name).unwrap();
        host.set_ipv4(Ipv4Addr::new(10, 78, 0, 1), 24)
            .expect("address in ns1");
        host.set_up(true).expect("up in ns1");
        // The fd still works after the move: the kernel (now in ns1) answers.
        tap.send(&arp_request(
            Ipv4Addr::new(10, 78, 0, 2),
            Ipv4Addr::new(10, 78, 0, 1),
        ))
        .expect("send");
        assert!(
            wait_arp_reply(&mut tap, Ipv4Addr::new(10, 78, 0, 1)).is_some(),
            "ARP reply after move"
        );

        let err = host
            .move_to_netns_named("ustk-no-such-ns")
            .expect_err("missing named ns");
        assert!(err.to_string().contains("ip netns add"), "{err}");
    });
}

#[test]
fn sending_on_a_down_tap_is_a_clear_error_and_read_write_frame_are_shared() {
    use ustack_dev::tap::{is_link_down, read_frame, write_frame};
    in_new_netns(|| {
        let name = tap_name("d");
        let mut tap = Tap::create(&name).expect("create TAP");
        let frame = arp_request(Ipv4Addr::new(10, 79, 0, 2), Ipv4Addr::new(10, 79, 0, 1));
        // The interface is down after creation: the kernel answers EIO.
        let err = tap.send(&frame).expect_err("send on a down TAP");
        assert_eq!(err.kind(), io::ErrorKind::NotConnected);
        assert!(err.to_string().contains("is down"), "{err}");
        let err = write_frame(tap_fd(&tap), &frame).expect_err("raw write on a down TAP");
        assert!(is_link_down(&err), "{err}");
        assert_eq!(
            read_frame(tap_fd(&tap), &mut [0u8; 2048]).expect("read"),
            None
        );

        // Up: the same helpers carry the frame and the kernel answers.
        let host = tap.host().expect("host side");
        host.set_ipv4(Ipv4Addr::new(10, 79, 0, 1), 24)
            .expect("address");
        host.set_up(true).expect("up");
        write_frame(tap_fd(&tap), &frame).expect("write when up");
        assert!(wait_arp_reply(&mut tap, Ipv4Addr::new(10, 79, 0, 1)).is_some());
    });
}

fn tap_fd(tap: &Tap) -> std::os::fd::BorrowedFd<'_> {
    let raw = tap.raw_fd().expect("fd");
    // SAFETY: `tap` owns `raw`; the borrow is tied to `tap`'s lifetime.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) }
}

/// A frame to the kernel through a TAP, of our own ethertype (nothing on
/// the kernel side answers it), `seq` after the header, `len` bytes in all.
fn our_frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&OUR_MAC);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(2_654_435_761) | 1;
    while f.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        f.push((x >> 16) as u8);
    }
    f
}

#[test]
fn a_frame_written_in_parts_reaches_the_kernel_whole() {
    use ustack_dev::packet::{PacketConfig, PacketRing, RingVersion};
    use ustack_dev::tap::{is_link_down, write_frame_vectored};
    in_new_netns(|| {
        let name = tap_name("vw");
        let mut tap = Tap::create(&name).expect("create TAP");
        // Down: the errors of `send` and `write_frame`, however it is cut.
        let f = our_frame(0, 100);
        let whole = tap.send(&f).expect_err("send on a down TAP");
        for cut in cuts(&f) {
            let e = tap.send_vectored(&cut).expect_err("parts on a down TAP");
            assert_eq!((e.kind(), e.to_string()), (whole.kind(), whole.to_string()));
            let e = write_frame_vectored(tap_fd(&tap), &cut).expect_err("raw, down");
            assert!(is_link_down(&e), "{e}");
        }

        // Up: an AF_PACKET socket on the kernel's side of the TAP sees what
        // the kernel received from it.
        tap.host().expect("host side").set_up(true).expect("up");
        let mut ring = PacketRing::open(&name, PacketConfig::new(RingVersion::V3, false, 1500))
            .expect("packet socket on the TAP");
        let mut sent = Vec::new();
        for len in [60, 1000, 1514] {
            for k in 0..4 {
                let f = our_frame(sent.len() as u32, len);
                let cut = cuts(&f).swap_remove(k);
                tap.send_vectored(&cut).expect("send in parts");
                sent.push(f);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while got.len() < sent.len() && Instant::now() < deadline {
            match ring.recv(&mut buf).expect("recv on the kernel side") {
                Some(n) if n >= 14 && buf[12..14] == [0x88, 0xb5] => got.push(buf[..n].to_vec()),
                Some(_) => {}
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        assert_eq!(got, sent, "the kernel received other bytes");
    });
}
