//! The virtio-net header over IPv6: TCP/IPv6 GSO super-frames sent with
//! partial checksums over the IPv6 pseudo-header (`GSO_TCPV6`), taken whole
//! on receive and counted as the segments they stand for; every malformed
//! header on a TCP/IPv6 frame dropped and counted; GSO types that do not
//! match the frame's IP version or transport refused; UDP GSO (USO) over
//! IPv6 cut into datagrams; software segmentation when the link takes
//! TCP/IPv4 GSO only.

mod stack_util;

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{LinkOffload, Stack, TcpError, TcpHandle, TransparentConfig};
use ustack_wire::checksum;
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{Ipv6Cidr, Ipv6Packet, Ipv6Repr};
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr, VNET_HDR_LEN};

const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

/// Every offload, TCP/IPv6 GSO included.
const FULL6: LinkOffload = LinkOffload {
    vnet_hdr: true,
    tso4: true,
    tso6: true,
    tx_csum: true,
};

/// Two stacks with fd00::1/64 (A) and fd00::2/64 (B) and `off` on both.
fn net6(off: LinkOffload) -> Net {
    let mut n = Net::new();
    for (s, a) in [(&mut n.a, A6), (&mut n.b, B6)] {
        s.add_ipv6_address(Ipv6Cidr {
            address: a,
            prefix_len: 64,
        })
        .unwrap();
        s.set_link_offload(off);
    }
    n
}

/// A connected to B's port 80.
fn establish(n: &mut Net) -> (TcpHandle, TcpHandle) {
    let l =
        n.b.tcp_listen6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0), 8)
            .unwrap();
    let c =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 80, 0, 0), None)
            .unwrap();
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(10), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(l).unwrap();
        }
        server.is_some() && n.a.tcp_status(c).unwrap().state == State::Established
    }));
    (c, server.unwrap())
}

/// Complete a partial checksum at `start + offset` as the device would.
fn complete(eth: &[u8], start: usize, offset: usize) -> Vec<u8> {
    let mut g = eth.to_vec();
    let sum = !checksum::fold(checksum::sum(&g[start..], 0));
    g[start + offset..start + offset + 2].copy_from_slice(&sum.to_be_bytes());
    g
}

/// Cut a TCP/IPv6 GSO super-frame (plain Ethernet, checksum completed)
/// into its wire segments as Linux's `tcp6_gso_segment` does: `size`
/// payload bytes each, the IPv6 payload length and the sequence number
/// adjusted, PSH and FIN on the last only, CWR on the first only, each
/// checksum computed afresh. Returns the frames.
fn segment(eth: &[u8], size: usize) -> Vec<Vec<u8>> {
    let p = Ipv6Packet::new_checked(&eth[14..]).unwrap();
    let ip = Ipv6Repr::parse(&p).unwrap();
    let t = TcpPacket::new_checked(&eth[54..]).unwrap();
    let seg = TcpRepr::parse(&t, ip.src, ip.dst, true).unwrap();
    let mut out = Vec::new();
    let mut off = 0;
    let n = seg.payload.len();
    while off < n {
        let end = (off + size).min(n);
        let piece = TcpRepr {
            seq: seg.seq + off,
            payload: &seg.payload[off..end],
            fin: seg.fin && end == n,
            psh: seg.psh && end == n,
            cwr: seg.cwr && off == 0,
            ..seg
        };
        let tcp_len = piece.buffer_len();
        let mut f = vec![0u8; 54 + tcp_len];
        f[..14].copy_from_slice(&eth[..14]);
        Ipv6Repr {
            payload_len: tcp_len,
            ..ip
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
        piece.emit(
            &mut TcpPacket::new_unchecked(&mut f[54..]),
            ip.src,
            ip.dst,
            true,
        );
        out.push(f);
        off = end;
    }
    out
}

#[test]
fn bulk_transfer_in_tcp6_gso_super_frames_with_partial_checksums() {
    let mut n = net6(FULL6);
    let (c, s) = establish(&mut n);
    let total = 2 << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
    let got = transfer(&mut n, c, s, &data, Duration::from_secs(60));
    assert!(got == Some(data.clone()), "every byte once and in order");

    let gso = counter(&n.a, "Link", "OutGsoFrames");
    assert!(gso > 0, "no GSO frames sent");
    assert!(
        gso * 8 < total as u64 / 1428,
        "{gso} GSO frames for {total} bytes: they should carry many segments each"
    );
    // B took them whole, and counted the segments they stand for.
    assert_eq!(counter(&n.b, "Link", "InGsoFrames"), gso);
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), 0);
    let mut checked = 0;
    let mut wire_segments = 0u64;
    let mut rebuilt = Vec::new();
    for f in &n.log_ab {
        let (v, eth) = VnetRepr::parse(f).expect("a valid virtio-net header");
        let e = EthernetRepr::parse(&EthernetFrame::new_checked(eth).unwrap()).unwrap();
        if e.ethertype != EtherType::Ipv6 {
            continue;
        }
        let ip = Ipv6Repr::parse(&Ipv6Packet::new_checked(&eth[14..]).unwrap()).unwrap();
        if ip.next_header != IpProtocol::Tcp {
            continue;
        }
        assert!(
            !matches!(v.gso, Gso::TcpV4 { .. } | Gso::UdpL4 { .. }),
            "{v:?} on TCP/IPv6"
        );
        assert_eq!(
            v.csum,
            Csum::Partial {
                start: 54,
                offset: 16
            },
            "partial checksum over the IPv6 pseudo-header"
        );
        let whole = complete(eth, 54, 16);
        let t = TcpPacket::new_checked(&whole[54..]).unwrap();
        let hdr = t.header_len();
        assert!(TcpRepr::parse(&t, ip.src, ip.dst, true).is_ok());
        let Gso::TcpV6 { size, ecn } = v.gso else {
            assert!(eth.len() <= 1514, "a plain frame over the MTU");
            wire_segments += 1;
            continue;
        };
        assert!(!ecn);
        assert_eq!(usize::from(v.hdr_len), 14 + 40 + hdr);
        // Each wire segment fits the MTU; the frame is more than one.
        assert!(40 + hdr + usize::from(size) <= 1500);
        assert!(eth.len() > 1514, "a needless GSO frame");
        assert!(eth.len() - 14 - 40 <= 65_535);
        // Cut as the kernel would: every piece a valid segment within the
        // MTU, and the pieces carry the super-frame's bytes.
        let pieces = segment(&whole, usize::from(size));
        for p in &pieces {
            assert!(p.len() <= 1514);
            let t = TcpPacket::new_checked(&p[54..]).unwrap();
            let r = TcpRepr::parse(&t, ip.src, ip.dst, true).expect("a valid segment");
            rebuilt.push((r.seq, r.payload.to_vec()));
        }
        wire_segments += pieces.len() as u64;
        checked += 1;
    }
    assert_eq!(checked, gso);
    // The segments B counted are the wire segments A's frames stand for
    // (the handshake's ACK and the data; no retransmission on this link).
    assert!(counter(&n.b, "Tcp", "InSegs") >= wire_segments);
    assert!(rebuilt.len() > 1000);
    assert_eq!(counter(&n.b, "Tcp", "InCsumErrors"), 0);
    assert_eq!(counter(&n.a, "Tcp", "InCsumErrors"), 0);

    // And back, B -> A, in super-frames too.
    let back: Vec<u8> = data.iter().rev().copied().collect();
    let got = transfer_rev(&mut n, s, c, &back, Duration::from_secs(60));
    assert!(got == Some(back), "B -> A byte-exact");
    assert!(counter(&n.b, "Link", "OutGsoFrames") > 0);
    assert_eq!(
        counter(&n.a, "Link", "InGsoFrames"),
        counter(&n.b, "Link", "OutGsoFrames")
    );
}

/// Send `data` B -> A on `s`, read it on `c`.
fn transfer_rev(
    n: &mut Net,
    s: TcpHandle,
    c: TcpHandle,
    data: &[u8],
    limit: Duration,
) -> Option<Vec<u8>> {
    let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
    let mut buf = vec![0u8; 1 << 16];
    let done = n.run_until(limit, |n| {
        while sent < data.len() {
            match n.b.tcp_send(s, &data[sent..]) {
                Ok(0) | Err(TcpError::WouldBlock) => break,
                Ok(k) => sent += k,
                Err(e) => panic!("send: {e}"),
            }
        }
        loop {
            match n.a.tcp_recv(c, &mut buf) {
                Ok(0) | Err(TcpError::WouldBlock) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(e) => panic!("recv: {e}"),
            }
        }
        got.len() >= data.len()
    });
    done.then_some(got)
}

/// Without TCP/IPv6 GSO (the link takes TCP/IPv4 GSO only), IPv6
/// super-segments are cut in software: no GSO frame, nothing over the MTU.
#[test]
fn without_tso6_ipv6_super_segments_are_cut_in_software() {
    let mut n = net6(LinkOffload {
        tso6: false,
        ..FULL6
    });
    let (c, s) = establish(&mut n);
    let data: Vec<u8> = (0..(1 << 20)).map(|i| (i % 233) as u8).collect();
    let got = transfer(&mut n, c, s, &data, Duration::from_secs(60));
    assert!(got == Some(data), "byte-exact");
    assert_eq!(counter(&n.a, "Link", "OutGsoFrames"), 0);
    for f in &n.log_ab {
        let (v, eth) = VnetRepr::parse(f).unwrap();
        assert_eq!(v.gso, Gso::None);
        assert!(eth.len() <= 1514);
    }
}

/// A TCP/IPv6 frame A -> B (plain Ethernet) carrying `seg`.
fn tcp6_frame(seg: &TcpRepr) -> Vec<u8> {
    let tcp_len = seg.buffer_len();
    let mut f = vec![0u8; 54 + tcp_len];
    EthernetRepr {
        src: A_MAC,
        dst: B_MAC,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..14]));
    Ipv6Repr {
        src: A6,
        dst: B6,
        next_header: IpProtocol::Tcp,
        payload_len: tcp_len,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    seg.emit(&mut TcpPacket::new_unchecked(&mut f[54..]), A6, B6, true);
    f
}

/// A UDP/IPv6 frame A -> B (port 5000 -> `port`) carrying `data`.
fn udp6_frame(port: u16, data: &[u8]) -> Vec<u8> {
    let mut udp = vec![0u8; 8 + data.len()];
    udp[8..].copy_from_slice(data);
    UdpRepr {
        src_port: 5000,
        dst_port: port,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut udp[..]),
        A6,
        B6,
        data.len(),
        true,
    );
    let mut f = vec![0u8; 54 + udp.len()];
    EthernetRepr {
        src: A_MAC,
        dst: B_MAC,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..14]));
    Ipv6Repr {
        src: A6,
        dst: B6,
        next_header: IpProtocol::Udp,
        payload_len: udp.len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    f[54..].copy_from_slice(&udp);
    f
}

/// The source port, next sequence number and acknowledgment number of the
/// last TCP/IPv6 segment in `log` (frames behind a virtio-net header).
fn last_tcp6(log: &[Vec<u8>]) -> (u16, SeqNum, SeqNum) {
    log.iter()
        .rev()
        .find_map(|f| {
            let (_, eth) = VnetRepr::parse(f).ok()?;
            let p = Ipv6Packet::new_checked(eth.get(14..)?).ok()?;
            let ip = Ipv6Repr::parse(&p).ok()?;
            if ip.next_header != IpProtocol::Tcp {
                return None;
            }
            let t = TcpPacket::new_checked(eth.get(54..)?).ok()?;
            let r = TcpRepr::parse(&t, ip.src, ip.dst, false).ok()?;
            Some((r.src_port, r.seq + r.payload.len(), r.ack?))
        })
        .expect("a TCP/IPv6 segment from A")
}

/// `frame` behind a raw 10-byte header.
fn raw(flags: u8, gso: u8, hdr_len: u16, size: u16, start: u16, off: u16, frame: &[u8]) -> Vec<u8> {
    let mut v = vec![flags, gso];
    for x in [hdr_len, size, start, off] {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    v.extend_from_slice(frame);
    v
}

/// Every malformed virtio-net header in front of a TCP/IPv6 segment is
/// dropped and counted in `LinkInVnetErrors` (never a panic, nothing
/// reaches TCP); then a sound TCPV6 GSO frame on the same connection is
/// taken whole and counted as the segments it stands for.
#[test]
fn malformed_tcpv6_headers_are_dropped_and_counted() {
    let mut n = net6(FULL6);
    let (_c, s) = establish(&mut n);
    // Where A's side stands: its last segment (the handshake's ACK).
    let (port, seq, ack) = last_tcp6(&n.log_ab);
    let payload: Vec<u8> = (0..3000u32).map(|i| (i % 241) as u8).collect();
    let seg = TcpRepr {
        src_port: port,
        dst_port: 80,
        seq,
        ack: Some(ack),
        window: 1000,
        payload: &payload,
        ..TcpRepr::default()
    };
    let plain = tcp6_frame(&seg);
    // The checksum field as a device expects it: the pseudo-header sum.
    let mut partial = plain.clone();
    let pseudo = checksum::pseudo_header_v6(&A6, &B6, 6, (plain.len() - 54) as u32);
    partial[70..72].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
    let len = plain.len() as u16;
    let hl = 14 + 40 + 20;
    let f = &partial;
    let bad = [
        // Unknown flag bits.
        raw(0x08, 4, hl, 1000, 54, 16, f),
        raw(0x41, 4, hl, 1000, 54, 16, f),
        // Unknown GSO types; ECN without GSO; UFO (never negotiated).
        raw(1, 2, hl, 1000, 54, 16, f),
        raw(1, 6, hl, 1000, 54, 16, f),
        raw(1, 0x7f, hl, 1000, 54, 16, f),
        raw(1, 0x80, hl, 1000, 54, 16, f),
        raw(1, 3, hl, 1000, 54, 16, f),
        // TCPV6 with a segment size of 0, or larger than the frame.
        raw(1, 4, hl, 0, 54, 16, f),
        raw(1, 4 | 0x80, hl, 0, 54, 16, f),
        raw(1, 4, hl, len + 1, 54, 16, f),
        raw(1, 4, hl, u16::MAX, 54, 16, f),
        // Header length beyond the frame.
        raw(1, 4, len + 1, 1000, 54, 16, f),
        raw(1, 4, u16::MAX, 1000, 54, 16, f),
        // Checksum start or offset outside the frame, or the field
        // straddling its end.
        raw(1, 4, hl, 1000, len, 16, f),
        raw(1, 4, hl, 1000, 54, len, f),
        raw(1, 4, hl, 1000, len - 1, 0, f),
        raw(1, 4, hl, 1000, u16::MAX, u16::MAX, f),
        raw(1, 0, 0, 0, 54, len - 55, f),
        // TCP/IPv4 GSO on an IPv6 frame; USO on a TCP segment.
        raw(1, 1, hl, 1000, 54, 16, f),
        raw(1, 5, hl, 1000, 54, 16, f),
        // Shorter than the header itself.
        vec![1, 4, 0, 0, 0],
        Vec::new(),
    ];
    let segs = counter(&n.b, "Tcp", "InSegs");
    for (i, frame) in bad.iter().enumerate() {
        let before = counter(&n.b, "Link", "InVnetErrors");
        n.inject_to_b(frame);
        assert_eq!(
            counter(&n.b, "Link", "InVnetErrors"),
            before + 1,
            "header {i} was not refused"
        );
    }
    assert_eq!(counter(&n.b, "Tcp", "InSegs"), segs, "nothing reached TCP");
    let mut buf = [0u8; 8192];
    assert_eq!(n.b.tcp_recv(s, &mut buf), Err(TcpError::WouldBlock));

    // TCPV6 GSO on a UDP/IPv6 datagram and on an ICMPv6 message: bad too.
    n.b.udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 7000, 0, 0))
        .unwrap();
    let udp = udp6_frame(7000, &[7u8; 300]);
    let errs = counter(&n.b, "Link", "InVnetErrors");
    n.inject_to_b(&raw(1, 4, 62, 100, 54, 6, &udp));
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), errs + 1);
    assert_eq!(counter(&n.b, "Udp6", "InDatagrams"), 0);
    let mut icmp = udp.clone();
    icmp[20] = 58; // Next Header: ICMPv6
    n.inject_to_b(&raw(1, 4, 62, 100, 54, 2, &icmp));
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), errs + 2);

    // The segment behind a sound TCPV6 header: taken whole, counted as the
    // three wire segments it stands for, the bytes delivered. (B's ACK is
    // kept from A, which never sent these bytes and would answer it.)
    n.filter_ba = Some(Box::new(|_| false));
    let errs = counter(&n.b, "Link", "InVnetErrors");
    n.inject_to_b(&raw(1, 4, hl, 1000, 54, 16, &partial));
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), errs);
    assert_eq!(counter(&n.b, "Tcp", "InSegs"), segs + 3);
    let k = n.b.tcp_recv(s, &mut buf).unwrap();
    assert_eq!(&buf[..k], &payload[..]);
    // The same bytes as a plain frame behind an all-zero header: a
    // duplicate now, but a valid segment (not a header error).
    n.inject_to_b(&raw(0, 0, 0, 0, 0, 0, &plain));
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), errs);
}

/// TCP/IPv6 GSO on an IPv4 frame is a bad header.
#[test]
fn tcpv6_gso_on_an_ipv4_frame_is_refused() {
    let mut n = net6(FULL6);
    n.b.tcp_listen(std::net::SocketAddrV4::new(0.into(), 80), 8)
        .unwrap();
    let payload = [1u8; 2000];
    let seg = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: SeqNum(1000),
        ack: Some(SeqNum(1)),
        window: 1000,
        payload: &payload,
        ..TcpRepr::default()
    };
    let frame = tcp_frame_to_b(A_IP, &seg);
    let errs = counter(&n.b, "Link", "InVnetErrors");
    let segs = counter(&n.b, "Tcp", "InSegs");
    n.inject_to_b(&raw(1, 4, 54, 1000, 34, 16, &frame));
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), errs + 1);
    assert_eq!(counter(&n.b, "Tcp", "InSegs"), segs);
    // With the IPv4 type it reaches TCP (and is answered with a RST).
    n.inject_to_b(&raw(1, 1, 54, 1000, 34, 16, &frame));
    assert_eq!(counter(&n.b, "Link", "InVnetErrors"), errs + 1);
    assert_eq!(counter(&n.b, "Tcp", "InSegs"), segs + 2);
}

/// USO over IPv6: a UDP GSO super-datagram is cut into datagrams of
/// `gso_size` bytes (the last shorter), each delivered.
#[test]
fn uso_super_datagrams_over_ipv6_are_cut_into_datagrams() {
    let mut n = net6(FULL6);
    let h =
        n.b.udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 7000, 0, 0))
            .unwrap();
    let data: Vec<u8> = (0..350u32).map(|i| (i % 251) as u8).collect();
    let uso = VnetRepr {
        csum: Csum::Partial {
            start: 54,
            offset: 6,
        },
        gso: Gso::UdpL4 { size: 100 },
        hdr_len: 62,
    };
    let frame = udp6_frame(7000, &data);
    let mut f = vec![0u8; VNET_HDR_LEN + frame.len()];
    uso.emit(&mut f);
    f[VNET_HDR_LEN..].copy_from_slice(&frame);
    n.inject_to_b(&f);
    assert_eq!(counter(&n.b, "Udp6", "InDatagrams"), 4);
    assert_eq!(counter(&n.b, "Link", "InGsoFrames"), 1);
    let mut got = Vec::new();
    let mut buf = [0u8; 2000];
    while let Ok((len, from)) = n.b.udp6_recv_from(h, &mut buf) {
        assert_eq!(from, SocketAddrV6::new(A6, 5000, 0, 0));
        got.push(buf[..len].to_vec());
    }
    let lens: Vec<usize> = got.iter().map(|d| d.len()).collect();
    assert_eq!(lens, [100, 100, 100, 50]);
    assert_eq!(got.concat(), data, "the bytes, in order");
    // To a port with no socket: one port unreachable, nothing queued.
    let frame = udp6_frame(7001, &data);
    uso.emit(&mut f);
    f[VNET_HDR_LEN..].copy_from_slice(&frame);
    n.inject_to_b(&f);
    assert_eq!(counter(&n.b, "Udp6", "NoPorts"), 1);
    assert_eq!(counter(&n.b, "Udp6", "InDatagrams"), 4);
}

/// USO over IPv6 in transparent mode (`ustack run`: a guest's socket with
/// `UDP_SEGMENT` over IPv6, to the gateway or any address): the catch-all
/// socket gets the datagrams the super-datagram stands for, one by one,
/// byte for byte, as over IPv4; a header that does not fit the frame is
/// dropped and counted.
#[test]
fn uso_super_datagrams_over_ipv6_reach_the_catch_all_socket_one_by_one() {
    let now = ustack_core::time::Instant::from_secs(1);
    let mut s = Stack::new_transparent(config(B_MAC, B_IP, 2), TransparentConfig::default(), now);
    s.add_ipv6_address(Ipv6Cidr {
        address: B6,
        prefix_len: 64,
    })
    .unwrap();
    s.set_link_offload(FULL6);
    let any = s.udp_bind_any().unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let uso = |size: u16| VnetRepr {
        csum: Csum::Partial {
            start: 54,
            offset: 6,
        },
        gso: Gso::UdpL4 { size },
        hdr_len: 62,
    };
    let frame = udp6_frame(7000, &data);
    let mut f = vec![0u8; VNET_HDR_LEN + frame.len()];
    f[VNET_HDR_LEN..].copy_from_slice(&frame);
    uso(1200).emit(&mut f);
    s.receive(now, &f, &mut |_| panic!("nothing to answer"));
    assert_eq!(counter(&s, "Link", "InGsoFrames"), 1);
    assert_eq!(counter(&s, "Udp6", "InDatagrams"), 9);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Ok((len, src, dst)) = s.udp_recv_from_to(any, &mut buf) {
        assert_eq!(src, SocketAddr::V6(SocketAddrV6::new(A6, 5000, 0, 0)));
        assert_eq!(dst, SocketAddr::V6(SocketAddrV6::new(B6, 7000, 0, 0)));
        got.push(buf[..len].to_vec());
    }
    let lens: Vec<usize> = got.iter().map(|d| d.len()).collect();
    assert_eq!(lens, [1200, 1200, 1200, 1200, 1200, 1200, 1200, 1200, 400]);
    assert_eq!(got.concat(), data, "the bytes, in order");
    // A segment size beyond the frame, or zero: dropped and counted.
    let errs = counter(&s, "Link", "InVnetErrors");
    for size in [0, u16::MAX] {
        uso(size).emit(&mut f);
        s.receive(now, &f, &mut |_| panic!("nothing to answer"));
    }
    assert_eq!(counter(&s, "Link", "InVnetErrors"), errs + 2);
    assert_eq!(counter(&s, "Udp6", "InDatagrams"), 9);
    assert!(s.udp_recv_from_to(any, &mut buf).is_err());
}
