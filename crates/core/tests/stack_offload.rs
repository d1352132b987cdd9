//! A link with the virtio-net header (a TAP opened with `IFF_VNET_HDR`):
//! partial checksums and TCP/IPv4 GSO super-frames both ways, and every
//! malformed header refused and counted.

mod stack_util;

use std::net::SocketAddrV4;

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::LinkOffload;
use ustack_wire::checksum;
use ustack_wire::ethernet::EthernetFrame;
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::Ipv4Packet;
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr, VNET_HDR_LEN};

const FULL: LinkOffload = LinkOffload {
    vnet_hdr: true,
    tso4: true,
    tso6: false,
    tx_csum: true,
};

fn offloaded_net() -> Net {
    let mut n = Net::new();
    n.a.set_link_offload(FULL);
    n.b.set_link_offload(FULL);
    n
}

/// Split a frame from an offloading stack into its header and the rest.
fn split(frame: &[u8]) -> (VnetRepr, &[u8]) {
    VnetRepr::parse(frame).expect("a valid virtio-net header")
}

/// `frame` (plain Ethernet) behind a virtio-net header.
fn behind(v: VnetRepr, frame: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; VNET_HDR_LEN + frame.len()];
    v.emit(&mut out);
    out[VNET_HDR_LEN..].copy_from_slice(frame);
    out
}

/// Complete a partial TCP checksum as the device would, and check it.
fn partial_checksum_completes(eth: &[u8], start: usize, offset: usize) -> bool {
    let mut f = eth.to_vec();
    let s = checksum::sum(&f[start..], 0);
    let c = !checksum::fold(s);
    f[start + offset..start + offset + 2].copy_from_slice(&c.to_be_bytes());
    let ip = Ipv4Packet::new_checked(&f[14..]).expect("ip");
    let tcp = TcpPacket::new_checked(ip.payload()).expect("tcp");
    TcpRepr::parse(&tcp, ip.src_addr(), ip.dst_addr(), true).is_ok()
}

#[test]
fn bulk_transfer_in_gso_super_frames_with_partial_checksums() {
    let mut n = offloaded_net();
    n.keep_log = true;
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
    let s = server.unwrap();
    let total = 2 << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 7 % 253) as u8).collect();
    let got = transfer(&mut n, c, s, &data, Duration::from_secs(60));
    assert!(got == Some(data), "every byte once and in order");

    // A sent super-frames: one GSO frame carries many segments' worth,
    // cut at the MSS, its checksum partial and correct once completed.
    let gso = counter(&n.a, "Link", "OutGsoFrames");
    assert!(gso > 0, "no GSO frames sent");
    assert!(
        gso * 8 < total as u64 / 1448,
        "{gso} GSO frames for {total} bytes: they should carry many segments each"
    );
    assert_eq!(counter(&n.b, "Link", "InGsoFrames"), gso);
    let mut checked = 0;
    for f in &n.log_ab {
        let (v, eth) = split(f);
        let Gso::TcpV4 { size, ecn } = v.gso else {
            continue;
        };
        assert!(!ecn);
        let Csum::Partial { start, offset } = v.csum else {
            panic!("a GSO frame without a partial checksum: {v:?}");
        };
        assert_eq!((start, offset), (34, 16));
        let ip = Ipv4Packet::new_checked(&eth[14..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        let hdr = tcp.header_len();
        assert_eq!(usize::from(v.hdr_len), 14 + 20 + hdr);
        // Each wire segment fits the MTU and the MSS.
        assert!(20 + hdr + usize::from(size) <= 1500);
        assert!(
            ip.payload().len() - hdr > usize::from(size),
            "bigger than one segment"
        );
        assert!(partial_checksum_completes(eth, 34, 16));
        checked += 1;
    }
    assert_eq!(checked as u64, gso);
    // No checksum errors on either side: partial checksums are not verified.
    assert_eq!(counter(&n.b, "Tcp", "InCsumErrors"), 0);
    assert_eq!(counter(&n.a, "Tcp", "InCsumErrors"), 0);
}

#[test]
fn frames_without_offload_stay_plain() {
    let mut n = Net::new();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    n.advance(Duration::from_millis(10));
    let s = n.b.tcp_accept(l).unwrap().unwrap();
    let data = vec![9u8; 100_000];
    let mut sent = 0;
    while sent < data.len() {
        sent += n.a.tcp_send(c, &data[sent..]).unwrap();
        n.advance(Duration::from_millis(1));
        let mut buf = vec![0u8; 65536];
        while n.b.tcp_recv(s, &mut buf).is_ok_and(|k| k > 0) {}
    }
    n.advance(Duration::from_millis(100));
    // Every frame is an Ethernet frame of at most one MTU.
    for f in &n.log_ab {
        assert!(f.len() <= 14 + 1500, "{} bytes", f.len());
        assert!(EthernetFrame::new_checked(&f[..]).is_ok());
    }
    assert_eq!(counter(&n.a, "Link", "OutGsoFrames"), 0);
}

/// A TCP segment from A to B (B offloading) with a wrong checksum: refused
/// as a plain frame, taken when the header says the checksum is partial or
/// verified.
#[test]
fn partial_and_verified_checksums_are_not_verified_again() {
    let mut n = offloaded_net();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let syn = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: SeqNum(1000),
        syn: true,
        window: 64240,
        max_seg_size: Some(1460),
        ..TcpRepr::default()
    };
    let mut frame = tcp_frame_to_b(A_IP, &syn);
    // Spoil the checksum.
    frame[14 + 20 + 16] ^= 0xff;
    let before = counter(&n.b, "Tcp", "InCsumErrors");
    let opens = counter(&n.b, "Tcp", "PassiveOpens");
    n.inject_to_b(&behind(VnetRepr::NONE, &frame));
    assert_eq!(counter(&n.b, "Tcp", "InCsumErrors"), before + 1);
    assert_eq!(counter(&n.b, "Tcp", "PassiveOpens"), opens, "refused");
    for csum in [
        Csum::Partial {
            start: 34,
            offset: 16,
        },
        Csum::Valid,
    ] {
        let v = VnetRepr {
            csum,
            gso: Gso::None,
            hdr_len: 0,
        };
        let mut f = frame.clone();
        // Another source port for another connection.
        let port = if matches!(csum, Csum::Valid) {
            40001u16
        } else {
            40002
        };
        f[34..36].copy_from_slice(&port.to_be_bytes());
        n.inject_to_b(&behind(v, &f));
    }
    assert_eq!(counter(&n.b, "Tcp", "InCsumErrors"), before + 1);
    // (A answers the SYN|ACKs for connections it never opened with RSTs.)
    assert_eq!(
        counter(&n.b, "Tcp", "PassiveOpens"),
        opens + 2,
        "two SYNs taken"
    );
    let _ = l;
}

#[test]
fn malformed_virtio_net_headers_are_dropped_and_counted() {
    let mut n = offloaded_net();
    n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let syn = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: SeqNum(1000),
        syn: true,
        window: 64240,
        ..TcpRepr::default()
    };
    let frame = tcp_frame_to_b(A_IP, &syn);
    let len = frame.len() as u16;
    let raw = |flags: u8, gso: u8, hdr_len: u16, size: u16, start: u16, off: u16| {
        let mut v = vec![flags, gso];
        for x in [hdr_len, size, start, off] {
            v.extend_from_slice(&x.to_ne_bytes());
        }
        v.extend_from_slice(&frame);
        v
    };
    let bad = [
        // Unknown flags.
        raw(0x40, 0, 0, 0, 0, 0),
        // Unknown GSO type, ECN without GSO.
        raw(0, 9, 0, 0, 0, 0),
        raw(0, 0x80, 0, 0, 0, 0),
        // UDP fragmentation offload (UFO): never negotiated.
        raw(0, 3, 0, 8, 0, 0),
        // UDP segmentation (USO) on a TCP segment.
        raw(1, 5, 54, 8, 34, 16),
        // GSO with a segment size of 0, or larger than the frame.
        raw(1, 1, 54, 0, 34, 16),
        raw(1, 1, 54, len + 1, 34, 16),
        // Header length beyond the frame.
        raw(1, 1, len + 1, 100, 34, 16),
        // Checksum start or offset outside the frame.
        raw(1, 0, 0, 0, len, 0),
        raw(1, 0, 0, 0, 34, len),
        raw(1, 0, 0, 0, u16::MAX, u16::MAX),
        // Shorter than the header itself.
        vec![0u8; 7],
    ];
    let opens = counter(&n.b, "Tcp", "PassiveOpens");
    for (i, f) in bad.iter().enumerate() {
        let before = counter(&n.b, "Link", "InVnetErrors");
        n.inject_to_b(f);
        assert_eq!(
            counter(&n.b, "Link", "InVnetErrors"),
            before + 1,
            "header {i} was not refused"
        );
    }
    assert_eq!(
        counter(&n.b, "Tcp", "PassiveOpens"),
        opens,
        "no SYN got through"
    );
    // The same SYN behind a sound header is taken.
    n.inject_to_b(&raw(0, 0, 0, 0, 0, 0));
    assert_eq!(counter(&n.b, "Tcp", "PassiveOpens"), opens + 1);
}

/// A UDP datagram A -> B (port 5000 -> `port`) carrying `data`, with a
/// checksum (plain frame, no virtio-net header).
fn udp_frame_to_b(port: u16, data: &[u8]) -> Vec<u8> {
    let mut udp = vec![0u8; 8 + data.len()];
    udp[8..].copy_from_slice(data);
    UdpRepr {
        src_port: 5000,
        dst_port: port,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut udp[..]),
        A_IP,
        B_IP,
        data.len(),
        true,
    );
    ip_frame(&ip_repr(IpProtocol::Udp, 7, 0, false), &udp)
}

/// USO: a UDP GSO super-datagram (what a guest's kernel hands over for a
/// socket with `UDP_SEGMENT`) is cut into datagrams of `gso_size` bytes,
/// the last one shorter, each delivered and counted; GSO types that do not
/// match the transport are bad headers.
#[test]
fn uso_super_datagrams_are_cut_into_datagrams() {
    let mut n = offloaded_net();
    let h = n.b.udp_bind(SocketAddrV4::new(0.into(), 7000)).unwrap();
    let data: Vec<u8> = (0..350u32).map(|i| (i % 251) as u8).collect();
    let uso = VnetRepr {
        csum: Csum::Partial {
            start: 34,
            offset: 6,
        },
        gso: Gso::UdpL4 { size: 100 },
        hdr_len: 42,
    };
    let before = counter(&n.b, "Udp", "InDatagrams");
    n.inject_to_b(&behind(uso, &udp_frame_to_b(7000, &data)));
    assert_eq!(counter(&n.b, "Udp", "InDatagrams"), before + 4);
    assert_eq!(counter(&n.b, "Link", "InGsoFrames"), 1);
    let mut got = Vec::new();
    let mut buf = [0u8; 2000];
    while let Ok((len, from)) = n.b.udp_recv_from(h, &mut buf) {
        assert_eq!(from, SocketAddrV4::new(A_IP, 5000));
        got.push(buf[..len].to_vec());
    }
    let lens: Vec<usize> = got.iter().map(|d| d.len()).collect();
    assert_eq!(lens, [100, 100, 100, 50]);
    assert_eq!(got.concat(), data, "the bytes, in order");

    // A segment size of the whole payload: one datagram, as it came.
    let one = VnetRepr {
        gso: Gso::UdpL4 { size: 350 },
        ..uso
    };
    n.inject_to_b(&behind(one, &udp_frame_to_b(7000, &data)));
    assert_eq!(n.b.udp_recv_from(h, &mut buf).map(|r| r.0), Ok(350));

    // TCP GSO on a UDP datagram: a bad header, nothing delivered.
    let tcp_gso = VnetRepr {
        gso: Gso::TcpV4 {
            size: 100,
            ecn: false,
        },
        ..uso
    };
    let errs = counter(&n.b, "Link", "InVnetErrors");
    let before = counter(&n.b, "Udp", "InDatagrams");
    n.inject_to_b(&behind(tcp_gso, &udp_frame_to_b(7000, &data)));
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), errs + 1);
    assert_eq!(counter(&n.b, "Udp", "InDatagrams"), before);
    assert!(n.b.udp_recv_from(h, &mut buf).is_err(), "nothing queued");
}
