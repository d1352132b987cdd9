//! AF_PACKET ring tests. Each runs as root on a thread of its own inside a
//! fresh network namespace (`unshare(CLONE_NEWNET)`), with a veth pair of
//! unique names that a guard deletes (the namespace goes with the thread in
//! any case): nothing on the host is touched. Without privileges the tests
//! fail loudly.
//!
//! Frames carry a local experimental ethertype and a sequence number, so
//! anything else on the link (IPv6 neighbour discovery) is ignored.

mod parts;
use parts::cuts;

use std::io;
use std::os::fd::RawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use ustack_dev::packet::{PacketConfig, PacketRing, RingVersion};
use ustack_dev::{Device, FrameBatch, VNET_HDR_LEN};

const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

fn in_new_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: unshare only changes the calling thread's network namespace.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_NEWNET) failed (need root): {}",
            io::Error::last_os_error()
        );
        f()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip(8)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A veth pair in the current (private) namespace, both ends up; deleted on
/// drop, also when the test fails.
struct Veth {
    a: String,
    b: String,
}

impl Veth {
    fn new(tag: &str, mtu: usize) -> Veth {
        let pid = std::process::id();
        let v = Veth {
            a: format!("upk{tag}a{pid}"),
            b: format!("upk{tag}b{pid}"),
        };
        ip(&["link", "add", &v.a, "type", "veth", "peer", "name", &v.b]);
        for n in [&v.a, &v.b] {
            ip(&["link", "set", n, "mtu", &mtu.to_string(), "up"]);
        }
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.a]).output();
    }
}

/// A test frame: broadcast, source `src`, our ethertype, then `seq` and a
/// pattern derived from it, `len` bytes in all.
fn frame(src: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, src]);
    f.extend_from_slice(&ETHERTYPE);
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(2_654_435_761);
    while f.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        f.push((x >> 16) as u8);
    }
    f.truncate(len.max(18));
    f
}

fn wait_readable(fd: RawFd, until: Instant) -> bool {
    let left = until.saturating_duration_since(Instant::now());
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    rc > 0
}

/// Receive `n` of our frames (others are skipped), waiting on the socket
/// for at most 5 s overall. With `vnet`, each frame is returned with its
/// virtio-net header.
fn recv_ours(dev: &mut PacketRing, n: usize, vnet: bool) -> Vec<Vec<u8>> {
    let hdr = if vnet { VNET_HDR_LEN } else { 0 };
    let until = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 70_000];
    while got.len() < n {
        match dev.recv(&mut buf).expect("recv") {
            Some(len) => {
                let f = &buf[..len];
                if f.len() >= hdr + 14 && f[hdr + 12..hdr + 14] == ETHERTYPE {
                    got.push(f.to_vec());
                }
            }
            None => {
                let fd = dev.raw_fd().expect("fd");
                assert!(
                    wait_readable(fd, until),
                    "timed out with {} of {n} frames on {} (stats {:?})",
                    got.len(),
                    dev.name(),
                    dev.stats()
                );
            }
        }
    }
    got
}

/// No more of our frames are waiting (without waiting for anything).
fn assert_none_of_ours(dev: &mut PacketRing) {
    let mut buf = vec![0u8; 70_000];
    while let Some(n) = dev.recv(&mut buf).expect("recv") {
        assert!(
            n < 14 || buf[12..14] != ETHERTYPE,
            "unexpected frame of ours on {}",
            dev.name()
        );
    }
}

fn open(name: &str, cfg: PacketConfig) -> PacketRing {
    PacketRing::open(name, cfg.clone()).unwrap_or_else(|e| panic!("open {name} {cfg:?}: {e}"))
}

fn both_ways_byte_exact(version: RingVersion, tag: &'static str) {
    in_new_netns(move || {
        let v = Veth::new(tag, 1500);
        let mut a = open(&v.a, PacketConfig::new(version, false, 1500));
        let mut b = open(&v.b, PacketConfig::new(version, false, 1500));
        assert_eq!(a.mtu(), 1500);
        assert_eq!(a.mac(), None);
        assert_eq!(a.offloads(), ustack_dev::Offloads::default());
        let sizes = [60, 64, 128, 577, 1000, 1514];
        for dir in 0..2 {
            let (tx, rx) = if dir == 0 {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            let sent: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| frame(dir as u8 + 1, i as u32, len))
                .collect();
            for f in &sent {
                tx.send(f).expect("send");
            }
            let got = recv_ours(rx, sent.len(), false);
            assert_eq!(got, sent, "direction {dir}: frames differ");
            // Our own frames do not come back to us.
            assert_none_of_ours(tx);
        }
        let st = a.stats();
        assert_eq!(st.tx_frames, sizes.len() as u64);
        assert!(st.rx_frames >= sizes.len() as u64);
        assert_eq!(st.rx_truncated + st.rx_malformed, 0, "{st:?}");
        drop(v);
    });
}

#[test]
fn v3_frames_both_ways_byte_exact() {
    both_ways_byte_exact(RingVersion::V3, "3");
}

#[test]
fn v2_frames_both_ways_byte_exact() {
    both_ways_byte_exact(RingVersion::V2, "2");
}

/// Many frames through a small ring: they span many blocks (slots) and the
/// ring wraps around many times; every frame arrives once, in order, intact,
/// and the kernel reports no drop.
fn many_frames_wrap(version: RingVersion, tag: &'static str) {
    in_new_netns(move || {
        let v = Veth::new(tag, 1500);
        let mut a = open(&v.a, PacketConfig::new(version, false, 1500));
        let mut cfg = PacketConfig::new(version, false, 1500);
        // V3: 4 blocks of 8 KB (7 frames of 1000 bytes each); V2: 4 blocks
        // of two 2 KB slots.
        cfg.block_size = 8192;
        cfg.block_count = 4;
        cfg.frame_size = 2048;
        let mut b = open(&v.b, cfg);
        let _ = b.kernel_stats();
        let rounds = 100;
        let per_round = if version == RingVersion::V3 { 12 } else { 6 };
        let mut batch = FrameBatch::new(per_round, 2048);
        let mut seq = 0u32;
        for round in 0..rounds {
            batch.clear();
            let mut sent = Vec::new();
            for _ in 0..per_round {
                let f = frame(1, seq, 1000);
                assert!(batch.push(&f));
                sent.push(f);
                seq += 1;
            }
            // Half the rounds through sendmmsg, half frame by frame.
            if round % 2 == 0 {
                assert_eq!(a.send_batch(&batch).expect("send_batch"), per_round);
            } else {
                for f in &sent {
                    a.send(f).expect("send");
                }
            }
            assert_eq!(recv_ours(&mut b, per_round, false), sent);
        }
        let total = (rounds * per_round) as u64;
        let (packets, drops) = b.kernel_stats().expect("PACKET_STATISTICS");
        assert_eq!(drops, 0, "the kernel dropped frames");
        assert!(u64::from(packets) >= total);
        let st = b.stats();
        assert!(st.rx_frames >= total, "{st:?}");
        assert_eq!(st.rx_truncated + st.rx_malformed, 0, "{st:?}");
        assert_eq!(a.stats().tx_frames, total);
        drop(v);
    });
}

#[test]
fn v3_many_frames_across_blocks_and_wrap_around() {
    many_frames_wrap(RingVersion::V3, "w");
}

#[test]
fn v2_many_frames_wrap_around() {
    many_frames_wrap(RingVersion::V2, "x");
}

/// Frames longer than a V3 block or a V2 slot are cut by the kernel: they
/// are dropped and counted, and the frames after them still arrive.
fn truncated_frames_dropped(version: RingVersion, tag: &'static str) {
    in_new_netns(move || {
        let v = Veth::new(tag, 9000);
        let mut a = open(&v.a, PacketConfig::new(version, false, 9000));
        let mut cfg = PacketConfig::new(version, false, 1500);
        cfg.block_size = 8192;
        cfg.block_count = 4;
        cfg.frame_size = 2048;
        let mut b = open(&v.b, cfg);
        a.send(&frame(1, 0, 8500)).expect("send jumbo");
        let small = frame(1, 1, 100);
        a.send(&small).expect("send small");
        let got = recv_ours(&mut b, 1, false);
        assert_eq!(got, vec![small]);
        assert_eq!(b.stats().rx_truncated, 1, "{:?}", b.stats());
        drop(v);
    });
}

#[test]
fn v3_truncated_frames_are_dropped_and_counted() {
    truncated_frames_dropped(RingVersion::V3, "t");
}

#[test]
fn v2_truncated_frames_are_dropped_and_counted() {
    truncated_frames_dropped(RingVersion::V2, "u");
}

#[test]
fn a_short_buffer_gets_the_frame_cut() {
    in_new_netns(|| {
        let v = Veth::new("c", 1500);
        let mut a = open(&v.a, PacketConfig::new(RingVersion::V2, false, 1500));
        let mut b = open(&v.b, PacketConfig::new(RingVersion::V2, false, 1500));
        let f = frame(1, 7, 1200);
        a.send(&f).expect("send");
        let until = Instant::now() + Duration::from_secs(5);
        let mut buf = [0u8; 100];
        loop {
            match b.recv(&mut buf).expect("recv") {
                Some(n) if buf[12..14] == ETHERTYPE => {
                    assert_eq!(n, 100);
                    assert_eq!(&buf[..], &f[..100]);
                    break;
                }
                Some(_) => {}
                None => assert!(wait_readable(b.raw_fd().expect("fd"), until), "timed out"),
            }
        }
        assert_eq!(b.stats().rx_cut, 1);
        drop(v);
    });
}

/// A virtio-net header: flags, gso type, hdr_len, gso_size, csum_start,
/// csum_offset (host byte order, as the kernel uses without VNET_LE/BE).
fn vnet(flags: u8, gso_type: u8, hdr_len: u16, gso_size: u16, start: u16, off: u16) -> Vec<u8> {
    let mut h = vec![flags, gso_type];
    for v in [hdr_len, gso_size, start, off] {
        h.extend_from_slice(&v.to_ne_bytes());
    }
    h
}

fn ones_sum(data: &[u8], mut acc: u32) -> u32 {
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        acc += u32::from(w);
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// An Ethernet + IPv4 + TCP frame carrying `payload`, its TCP checksum
/// field holding only the pseudo-header sum (a partial checksum).
fn tcp_frame(payload: &[u8]) -> Vec<u8> {
    let src = [10, 81, 0, 1];
    let dst = [10, 81, 0, 2];
    let tcp_len = 20 + payload.len();
    let total = 20 + tcp_len;
    let mut f = Vec::with_capacity(14 + total);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let mut iph = vec![0x45, 0];
    iph.extend_from_slice(&(total as u16).to_be_bytes());
    iph.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0]);
    iph.extend_from_slice(&src);
    iph.extend_from_slice(&dst);
    let c = !(ones_sum(&iph, 0) as u16);
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&iph);
    let mut th = Vec::new();
    th.extend_from_slice(&40000u16.to_be_bytes());
    th.extend_from_slice(&5001u16.to_be_bytes());
    th.extend_from_slice(&1000u32.to_be_bytes());
    th.extend_from_slice(&1u32.to_be_bytes());
    th.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
    let partial = ones_sum(&pseudo, 0) as u16;
    th[16..18].copy_from_slice(&partial.to_be_bytes());
    f.extend_from_slice(&th);
    f.extend_from_slice(payload);
    f
}

fn vnet_frames(version: RingVersion, tag: &'static str) {
    in_new_netns(move || {
        let v = Veth::new(tag, 1500);
        let mut a = open(&v.a, PacketConfig::new(version, true, 1500));
        let mut b = open(&v.b, PacketConfig::new(version, true, 1500));
        let off = b.offloads();
        assert!(off.vnet_hdr && off.tso4 && off.tx_csum, "{off:?}");

        // Plain frames both ways: a zero header in, a zero header out.
        for dir in 0..2 {
            let (tx, rx) = if dir == 0 {
                (&mut a, &mut b)
            } else {
                (&mut b, &mut a)
            };
            let mut sent = Vec::new();
            for (i, len) in [60usize, 700, 1514].into_iter().enumerate() {
                let mut f = vnet(0, 0, 0, 0, 0, 0);
                f.extend_from_slice(&frame(3, i as u32, len));
                tx.send(&f).expect("send with header");
                sent.push(f);
            }
            let got = recv_ours(rx, sent.len(), true);
            for (g, s) in got.iter().zip(&sent) {
                assert_eq!(g[VNET_HDR_LEN..], s[VNET_HDR_LEN..], "frame differs");
                assert_eq!(g[1], 0, "no GSO on a plain frame");
            }
        }

        // A 60 KB TCP/IPv4 GSO super-frame with a partial checksum crosses
        // the veth whole, and its header says so on the other side.
        let payload: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
        let tcp = tcp_frame(&payload);
        let mut f = vnet(1, 1, 54, 1448, 34, 16);
        f.extend_from_slice(&tcp);
        a.send(&f).expect("send a GSO frame");
        let until = Instant::now() + Duration::from_secs(5);
        let mut buf = vec![0u8; 70_000];
        let got = loop {
            match b.recv(&mut buf).expect("recv") {
                Some(n) if n > VNET_HDR_LEN + 14 && buf[VNET_HDR_LEN + 12..][..2] == [8, 0] => {
                    break buf[..n].to_vec();
                }
                Some(_) => {}
                None => assert!(
                    wait_readable(b.raw_fd().expect("fd"), until),
                    "no GSO frame within 5 s: {:?}",
                    b.stats()
                ),
            }
        };
        assert_eq!(got.len(), f.len(), "the super-frame arrives whole");
        assert_eq!(got[1], 1, "gso_type TCPV4");
        assert_eq!(u16::from_ne_bytes([got[4], got[5]]), 1448, "gso_size");
        assert_eq!(got[0] & 1, 1, "NEEDS_CSUM");
        assert_eq!(u16::from_ne_bytes([got[6], got[7]]), 34, "csum_start");
        assert_eq!(u16::from_ne_bytes([got[8], got[9]]), 16, "csum_offset");
        assert_eq!(got[VNET_HDR_LEN..], tcp[..], "the frame is byte-exact");
        assert_eq!(b.stats().rx_truncated, 0);
        drop(v);
    });
}

#[test]
fn v3_vnet_header_and_a_gso_super_frame() {
    vnet_frames(RingVersion::V3, "v");
}

#[test]
fn v2_vnet_header_and_a_gso_super_frame() {
    vnet_frames(RingVersion::V2, "g");
}

#[test]
fn setup_errors_are_clear() {
    in_new_netns(|| {
        let e = PacketRing::open("upk-none", PacketConfig::new(RingVersion::V3, false, 1500))
            .expect_err("no such interface");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("no interface upk-none"), "{e}");

        let v = Veth::new("e", 1500);
        let mut cfg = PacketConfig::new(RingVersion::V3, false, 1500);
        cfg.block_size = 1000;
        let e = PacketRing::open(&v.a, cfg).expect_err("bad geometry");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // A geometry only the kernel refuses (too many frames for V2).
        let mut cfg = PacketConfig::new(RingVersion::V3, false, 1500);
        cfg.block_count = 1 << 31;
        let e = PacketRing::open(&v.a, cfg).expect_err("huge ring");
        assert!(
            e.to_string().contains("ring") || e.kind() == io::ErrorKind::InvalidInput,
            "{e}"
        );
        drop(v);
    });
}

#[test]
fn frames_sent_in_parts_arrive_whole() {
    in_new_netns(|| {
        let v = Veth::new("p", 1500);
        let mut a = open(&v.a, PacketConfig::new(RingVersion::V3, false, 1500));
        let mut b = open(&v.b, PacketConfig::new(RingVersion::V3, false, 1500));
        let mut sent = Vec::new();
        for len in [60, 577, 1514] {
            for k in 0..4 {
                let f = frame(1, sent.len() as u32, len);
                let cut = cuts(&f).swap_remove(k);
                a.send_vectored(&cut).expect("send in parts");
                sent.push(f);
            }
        }
        let got = recv_ours(&mut b, sent.len(), false);
        assert_eq!(got, sent, "frames differ");
        assert_none_of_ours(&mut a);
        assert_eq!(a.stats().tx_frames, sent.len() as u64);

        // A down interface: the error `send` gives, counted as `send` does.
        ip(&["link", "set", &v.a, "down"]);
        let f = frame(1, 99, 100);
        let whole = a.send(&f).expect_err("send on a down interface");
        for cut in cuts(&f) {
            let e = a
                .send_vectored(&cut)
                .expect_err("parts on a down interface");
            assert_eq!((e.kind(), e.to_string()), (whole.kind(), whole.to_string()));
        }
        assert_eq!(a.stats().tx_frames, sent.len() as u64);
        drop(v);
    });
}
