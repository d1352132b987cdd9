//! Frames handed out by ownership (`Stack::set_tx_owned`,
//! `Stack::swap_tx_frames`): the same frames, in the same order, as
//! through the `tx` callback, whatever the buffers handed back held
//! before (a 64 KB super-frame's buffer reused for a 60-byte ARP request
//! carries none of its old bytes), and the callback is never called.

mod stack_util;

use std::net::{Ipv4Addr, SocketAddrV4};

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{LinkOffload, Stack, TcpHandle, TxFrames};

const FULL: LinkOffload = LinkOffload {
    vnet_hdr: true,
    tso4: true,
    tso6: true,
    tx_csum: true,
};

/// Something done to a stack, transmitting through the callback given.
type Op<'a> = dyn Fn(&mut Stack, &mut dyn FnMut(&[u8])) + 'a;

/// What `s` transmits when `op` runs on it, through the callback.
fn by_callback(s: &mut Stack, op: &Op) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    op(s, &mut |f| v.push(f.to_vec()));
    v
}

/// What `s` (in owned mode) transmits when `op` runs on it, taken with
/// `swap_tx_frames` into `frames` (which holds the previous round's
/// buffers).
fn by_ownership(s: &mut Stack, frames: &mut TxFrames, op: &Op) -> Vec<Vec<u8>> {
    op(s, &mut |_| {
        panic!("the tx callback was called in owned mode")
    });
    s.swap_tx_frames(frames);
    assert!(!s.has_tx_frames());
    frames.iter().map(|f| f.to_vec()).collect()
}

/// A and B with full offloads and a TCP connection from A to B's port
/// 80, established: (A's handle, B's).
fn established(n: &mut Net) -> (TcpHandle, TcpHandle) {
    n.a.set_link_offload(FULL);
    n.b.set_link_offload(FULL);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(5), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(l).unwrap();
        }
        server.is_some() && n.a.tcp_status(c).unwrap().state == State::Established
    }));
    (c, server.unwrap())
}

#[test]
fn owned_frames_are_the_callbacks_frames_in_order() {
    let mut n = Net::new();
    let (c, _) = established(&mut n);
    let u = n.a.udp_bind(SocketAddrV4::new(0.into(), 5000)).unwrap();

    // Two copies of A in the same state: one transmits through the
    // callback, the other by ownership.
    let mut cb = n.a.clone();
    let mut own = n.a.clone();
    own.set_tx_owned(true);
    let mut frames = TxFrames::new();
    let now = n.now;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let unknown = Ipv4Addr::new(10, 0, 0, 77);
    let rounds: Vec<Box<Op>> = vec![
        // 64 KB super-frames.
        Box::new(|s, tx| {
            let k = s.tcp_send(c, &data).unwrap();
            assert!(k > 100_000);
            s.poll(now, tx);
        }),
        // A datagram to a host not yet resolved: an ARP request (built
        // on the stack and copied) into a buffer that held a super-frame;
        // the datagram waits for the answer.
        Box::new(|s, tx| {
            s.udp_send_to(now, u, b"hello", SocketAddrV4::new(unknown, 9))
                .unwrap();
            s.poll(now, tx);
        }),
        // The answer: the queued datagram leaves (a frame the stack held
        // in a buffer of its own).
        Box::new(|s, tx| {
            let reply = arp_reply_from(unknown);
            s.receive(now, &reply, tx);
            s.poll(now, tx);
        }),
        // Small frames again in the recycled buffers: window probes or
        // nothing, then more data.
        Box::new(|s, tx| {
            s.poll(now + Duration::from_millis(300), tx);
        }),
    ];
    let mut total = 0;
    let mut by_ref = 0;
    assert!(
        own.zero_copy_tx(),
        "owned frames on a checksum-offload link"
    );
    assert!(!cb.zero_copy_tx());
    for (i, op) in rounds.iter().enumerate() {
        let want = by_callback(&mut cb, op.as_ref());
        let got = by_ownership(&mut own, &mut frames, op.as_ref());
        by_ref += frames.iter().filter(|f| f.contiguous().is_none()).count();
        assert_eq!(got.len(), want.len(), "round {i}: frame count");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w,
                "round {i}, frame {k}: {} vs {} bytes",
                g.len(),
                w.len()
            );
        }
        total += got.len();
    }
    assert!(total >= 4, "{total} frames");
    assert!(by_ref > 0, "no payload went by reference");
    assert_eq!(counter(&own, "Link", "OutZeroCopyFrames"), by_ref as u64);
    assert_eq!(counter(&cb, "Link", "OutZeroCopyFrames"), 0);
    assert_eq!(
        counter(&own, "Link", "OutFrames"),
        counter(&cb, "Link", "OutFrames")
    );
    assert!(counter(&own, "Link", "OutGsoFrames") > 0);
    // Turned off: the callback again, nothing left waiting.
    own.set_tx_owned(false);
    let want = by_callback(&mut cb, &|s, tx| s.poll(now + Duration::from_secs(2), tx));
    let got = by_callback(&mut own, &|s, tx| s.poll(now + Duration::from_secs(2), tx));
    assert!(got == want && !got.is_empty());
    assert!(!own.has_tx_frames());
}

/// An ARP reply from `ip` (MAC 02:00:00:00:00:77) to A.
fn arp_reply_from(ip: Ipv4Addr) -> Vec<u8> {
    use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr};
    use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
    use ustack_wire::virtio_net::{VnetRepr, VNET_HDR_LEN};
    let mac = MacAddr([2, 0, 0, 0, 0, 0x77]);
    let mut f = vec![0u8; VNET_HDR_LEN + 14 + 28];
    VnetRepr::NONE.emit(&mut f);
    EthernetRepr {
        src: mac,
        dst: A_MAC,
        ethertype: EtherType::Arp,
    }
    .emit(&mut EthernetFrame::new_unchecked(
        &mut f[VNET_HDR_LEN..VNET_HDR_LEN + 14],
    ));
    ArpRepr {
        operation: ArpOperation::Reply,
        sender_mac: mac,
        sender_ip: ip,
        target_mac: A_MAC,
        target_ip: A_IP,
    }
    .emit(&mut ArpPacket::new_unchecked(&mut f[VNET_HDR_LEN + 14..]));
    f
}

/// The same over IPv6: TCP/IPv6 GSO super-frames, a Neighbor
/// Solicitation for a host not yet resolved (the datagram for it waits,
/// then leaves with the advertisement's answer), and an echo request sent
/// outside a poll.
#[test]
fn owned_frames_over_ipv6_are_the_callbacks_frames_in_order() {
    use std::net::{Ipv6Addr, SocketAddrV6};
    use ustack_wire::ipv6::Ipv6Cidr;
    let a6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
    let b6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
    let mut n = Net::new();
    for (s, a) in [(&mut n.a, a6), (&mut n.b, b6)] {
        s.add_ipv6_address(Ipv6Cidr {
            address: a,
            prefix_len: 64,
        })
        .unwrap();
        s.set_link_offload(FULL);
    }
    let l =
        n.b.tcp_listen6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0), 8)
            .unwrap();
    let c =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(b6, 80, 0, 0), None)
            .unwrap();
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(5), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(l).unwrap();
        }
        server.is_some() && n.a.tcp_status(c).unwrap().state == State::Established
    }));
    let u =
        n.a.udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 5000, 0, 0))
            .unwrap();
    let mut cb = n.a.clone();
    let mut own = n.a.clone();
    own.set_tx_owned(true);
    let mut frames = TxFrames::new();
    let now = n.now;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let unknown = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x77);
    let rounds: Vec<Box<Op>> = vec![
        Box::new(|s, tx| {
            assert!(s.tcp_send(c, &data).unwrap() > 100_000);
            s.poll(now, tx);
        }),
        Box::new(|s, tx| {
            s.udp6_send_to(now, u, b"hello", SocketAddrV6::new(unknown, 9, 0, 0))
                .unwrap();
            s.poll(now, tx);
        }),
        Box::new(|s, tx| {
            s.icmp_echo_send(now, B_IP, 7, 1, b"ping").unwrap();
            s.poll(now, tx);
        }),
        Box::new(|s, tx| s.poll(now + Duration::from_millis(300), tx)),
    ];
    let mut gso6 = 0;
    let mut by_ref = 0;
    for (i, op) in rounds.iter().enumerate() {
        let want = by_callback(&mut cb, op.as_ref());
        let got = by_ownership(&mut own, &mut frames, op.as_ref());
        by_ref += frames.iter().filter(|f| f.contiguous().is_none()).count();
        assert!(got == want, "round {i}: the frames differ");
        gso6 += got
            .iter()
            .filter(|f| f.get(1).is_some_and(|t| t & 0x7f == 4))
            .count();
    }
    assert!(gso6 > 0, "no TCPV6 GSO frame");
    assert!(by_ref > 0, "no payload went by reference");
    assert_eq!(
        counter(&own, "Link", "OutFrames"),
        counter(&cb, "Link", "OutFrames")
    );
}

/// Zero-copy transmit: a frame whose payload is a reference to the send
/// buffer keeps its bytes while it waits to be written, although the
/// data it carries is acknowledged (the buffer drops it) and the
/// application writes new data meanwhile; `set_zero_copy_tx(false)`
/// copies every payload.
#[test]
fn a_frame_in_flight_keeps_its_payload_after_ack_and_new_writes() {
    let mut n = Net::new();
    let (c, s) = established(&mut n);
    let now = n.now;
    let mut a = n.a.clone();
    let mut b = n.b.clone();
    a.set_tx_owned(true);
    assert!(a.zero_copy_tx());

    // The frames of the first write, held as a device's queue would hold
    // them, and a copy of their bytes.
    let first: Vec<u8> = (0..40_000u32).map(|i| (i % 241) as u8).collect();
    assert_eq!(a.tcp_send(c, &first).unwrap(), first.len());
    a.poll(now, &mut |_| panic!("callback in owned mode"));
    let mut held = TxFrames::new();
    a.swap_tx_frames(&mut held);
    let before: Vec<Vec<u8>> = held.iter().map(|f| f.to_vec()).collect();
    assert!(
        held.iter().any(|f| f.contiguous().is_none()),
        "by reference"
    );

    // B receives them and acknowledges everything; A takes the ACKs: the
    // send buffer drops the bytes the held frames point into.
    let mut acks = Vec::new();
    for f in &before {
        b.receive(now, f, &mut |x| acks.push(x.to_vec()));
    }
    b.poll(now, &mut |x| acks.push(x.to_vec()));
    let mut got = vec![0u8; first.len()];
    let k = b.tcp_recv(s, &mut got).unwrap();
    assert!(k > 10_000, "the first window arrived: {k}");
    assert!(got[..k] == first[..k]);
    b.poll(now, &mut |x| acks.push(x.to_vec()));
    assert!(!acks.is_empty());
    let queued = a.tcp_status(c).unwrap().send_queue;
    for f in &acks {
        a.receive(now, f, &mut |_| panic!("callback in owned mode"));
    }
    assert_eq!(
        a.tcp_status(c).unwrap().send_queue,
        queued - k,
        "what the held frames carry is acknowledged"
    );

    // New data written over and over (the storage the first write used
    // would be reused if nothing held it), and sent.
    let mut other = TxFrames::new();
    for round in 0..8u8 {
        let next = vec![0xa0 ^ round; 40_000];
        assert_eq!(a.tcp_send(c, &next).unwrap(), next.len());
        a.poll(now, &mut |_| panic!("callback in owned mode"));
        a.swap_tx_frames(&mut other);
        let mut acks = Vec::new();
        for f in other.iter() {
            b.receive(now, &f.to_vec(), &mut |x| acks.push(x.to_vec()));
        }
        let mut sink = vec![0u8; 65_536];
        while b.tcp_recv(s, &mut sink).is_ok_and(|k| k > 0) {}
        b.poll(now, &mut |x| acks.push(x.to_vec()));
        for f in &acks {
            a.receive(now, f, &mut |_| panic!("callback in owned mode"));
        }
    }
    let after: Vec<Vec<u8>> = held.iter().map(|f| f.to_vec()).collect();
    assert!(after == before, "a held frame changed");

    // Turned off: every payload copied into its frame.
    a.set_zero_copy_tx(false);
    assert!(!a.zero_copy_tx());
    assert_eq!(a.tcp_send(c, &first).unwrap(), first.len());
    a.poll(now, &mut |_| panic!("callback in owned mode"));
    a.swap_tx_frames(&mut other);
    assert!(!other.is_empty());
    assert!(other.iter().all(|f| f.contiguous().is_some()), "copied");
}
