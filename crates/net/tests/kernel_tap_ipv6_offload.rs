//! TCP over IPv6 between ustack and the Linux kernel over a TAP, with the
//! virtio-net header and the kernel's offloads (`TUN_F_CSUM | TUN_F_TSO4 |
//! TUN_F_TSO6`) and without: 100 MB each way at once, byte-exact, inside a
//! private network namespace the test creates (and always removes). With
//! the offloads the kernel hands ustack TCP/IPv6 GSO super-frames and
//! takes ustack's (`LinkInGsoFrames`, `LinkOutGsoFrames` move, no header
//! or checksum errors); without, every frame is one MTU and ustack cuts
//! its IPv6 super-segments itself. Needs root and /dev/net/tun; if they
//! are missing the test fails loudly.

mod common;

use common::kernel::NetNs;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV6};
use std::sync::{Mutex, PoisonError};
use std::thread;

use ustack_net::dev::Device;
use ustack_net::{Net, TcpListener};
use ustack_wire::ipv6::Ipv6Cidr;

const KERNEL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x216, 0, 0, 0, 0, 0, 1);
const USTACK6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x216, 0, 0, 0, 0, 0, 2);
const HUNDRED_MB: u64 = 100 << 20;

/// The two 100 MB tests take turns: each keeps both CPUs busy.
static HEAVY: Mutex<()> = Mutex::new(());

/// The byte at `offset` of the stream `seed` (not periodic at any size
/// a TCP window or a segment has: a lost, doubled or reordered segment
/// shows).
fn byte_at(seed: u64, offset: u64) -> u8 {
    let mut z = (offset / 8)
        .wrapping_add(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^= z >> 31;
    z = z.wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 29;
    (z >> (8 * (offset % 8))) as u8
}

fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte_at(seed, offset + i as u64);
    }
}

/// Write `len` bytes of stream `seed`, then shut the write half.
fn send_stream<W: Write>(mut w: W, seed: u64, len: u64, shut: impl FnOnce(&mut W)) {
    let mut buf = vec![0u8; 256 << 10];
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        fill(seed, off, &mut buf[..n]);
        w.write_all(&buf[..n]).expect("write");
        off += n as u64;
    }
    shut(&mut w);
}

/// Read to the end, checking every byte against stream `seed`: the count
/// read (panics at the first wrong byte).
fn check_stream<R: Read>(mut r: R, seed: u64) -> u64 {
    let mut buf = vec![0u8; 256 << 10];
    let mut off = 0u64;
    loop {
        let n = r.read(&mut buf).expect("read");
        if n == 0 {
            return off;
        }
        for (i, &b) in buf[..n].iter().enumerate() {
            let at = off + i as u64;
            assert_eq!(b, byte_at(seed, at), "stream {seed}: byte {at} differs");
        }
        off += n as u64;
    }
}

/// ustack on a TAP (with the virtio-net header and offloads if `vnet`) in
/// a fresh namespace; the kernel end has KERNEL6/64, ustack USTACK6/64.
fn start(tag: &str, vnet: bool) -> (NetNs, Net) {
    let ns = NetNs::new(tag);
    let tap_name = format!("ustko{}{}", u8::from(vnet), std::process::id() % 1_000_000);
    let tap = ns.tap(&tap_name, vnet);
    let off = tap.offloads();
    assert_eq!(
        (off.vnet_hdr, off.tso4, off.tso6, off.tx_csum),
        (vnet, vnet, vnet, vnet)
    );
    ns.up(&tap_name, &format!("{KERNEL6}/64"), true);
    let mut cfg = common::config(Ipv4Addr::new(10, 216, 0, 2), 0x0d);
    cfg.mtu = 1500;
    let net = Net::start(cfg, Box::new(tap), common::opts("ustack-tso6")).expect("start");
    assert_eq!(net.with_stack(|s| s.link_offload().tso6()), vnet);
    net.with_stack(|s| {
        s.add_ipv6_address(Ipv6Cidr {
            address: USTACK6,
            prefix_len: 64,
        })
    })
    .expect("add address");
    (ns, net)
}

/// 100 MB each way at once on one connection the kernel opens to ustack;
/// both ends check every byte.
fn hundred_mb_both_ways(ns: &NetNs, net: &Net) {
    let listener = TcpListener::bind(net, "[::]:8080").expect("ustack bind");
    let kernel = ns.run(move || {
        let s = std::net::TcpStream::connect_timeout(
            &SocketAddrV6::new(USTACK6, 8080, 0, 0).into(),
            common::PATIENCE,
        )
        .expect("kernel connect");
        s.set_read_timeout(Some(common::PATIENCE)).expect("timeout");
        s.set_write_timeout(Some(common::PATIENCE))
            .expect("timeout");
        let w = s.try_clone().expect("clone");
        let writer = thread::spawn(move || {
            send_stream(w, 1, HUNDRED_MB, |w| {
                w.shutdown(std::net::Shutdown::Write).expect("shutdown")
            })
        });
        let got = check_stream(&s, 2);
        writer.join().expect("kernel writer");
        got
    });
    let (conn, _) = listener.accept().expect("accept");
    conn.set_read_timeout(Some(common::PATIENCE))
        .expect("timeout");
    conn.set_write_timeout(Some(common::PATIENCE))
        .expect("timeout");
    let w = conn.try_clone().expect("clone");
    let writer = thread::spawn(move || {
        send_stream(w, 2, HUNDRED_MB, |w| {
            w.shutdown(std::net::Shutdown::Write).expect("shutdown")
        })
    });
    let got = check_stream(&conn, 1);
    writer.join().expect("ustack writer");
    let kernel_got = kernel.join().expect("kernel thread");
    assert_eq!(got, HUNDRED_MB, "kernel -> ustack: 100 MB byte-exact");
    assert_eq!(
        kernel_got, HUNDRED_MB,
        "ustack -> kernel: 100 MB byte-exact"
    );
}

#[test]
fn hundred_mb_each_way_over_tcp6_in_gso_super_frames() {
    let _heavy = HEAVY.lock().unwrap_or_else(PoisonError::into_inner);
    let (ns, net) = start("tso6", true);
    hundred_mb_both_ways(&ns, &net);
    let c = net.counters();
    eprintln!(
        "offloads on: LinkInGsoFrames {} LinkOutGsoFrames {} LinkInFrames {} LinkOutFrames {}",
        c.link.InGsoFrames, c.link.OutGsoFrames, c.link.InFrames, c.link.OutFrames
    );
    // Super-frames both ways: the kernel's TSO/GRO'd TCP/IPv6 frames taken
    // whole, and ours segmented by the kernel. 100 MB in 64 KB frames is
    // ~1,600 frames; in 1,440-byte frames ~73,000.
    assert!(c.link.InGsoFrames > 100, "{:?}", c.link);
    assert!(c.link.OutGsoFrames > 100, "{:?}", c.link);
    assert!(
        c.link.OutFrames < HUNDRED_MB / 1440,
        "ustack sent {} frames for 100 MB",
        c.link.OutFrames
    );
    assert_eq!(c.link.InVnetErrors, 0);
    assert_eq!(c.tcp.InCsumErrors, 0);
    assert_eq!(c.tcp.PassiveOpens, 1);
    net.shutdown();
}

#[test]
fn hundred_mb_each_way_over_tcp6_without_offloads() {
    let _heavy = HEAVY.lock().unwrap_or_else(PoisonError::into_inner);
    let (ns, net) = start("notso6", false);
    hundred_mb_both_ways(&ns, &net);
    let c = net.counters();
    // One MTU per frame both ways, checksums computed and verified in
    // software.
    assert_eq!(c.link.InGsoFrames, 0);
    assert_eq!(c.link.OutGsoFrames, 0);
    assert!(c.link.OutFrames > HUNDRED_MB / 1500, "{:?}", c.link);
    assert_eq!(c.tcp.InCsumErrors, 0);
    assert_eq!(c.tcp.PassiveOpens, 1);
    // The kernel's MTU-sized TCP/IPv6 segments, read in bursts, were
    // coalesced before TCP input (software GRO over IPv6).
    assert!(c.link.InGroPackets > 0, "{:?}", c.link);
    assert!(
        c.link.InGroWirePackets >= 2 * c.link.InGroPackets,
        "{:?}",
        c.link
    );
    net.shutdown();
}
