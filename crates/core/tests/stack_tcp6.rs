//! TCP over IPv6 between two stacks: handshake (the MSS from the IPv6
//! header size), byte-exact transfer both ways, close, demultiplexing by
//! family, SYN cookies over the IPv6 4-tuple, segments cut at the MTU
//! when the link takes TCP/IPv4 GSO frames only, and the checksum over the
//! IPv6 pseudo-header catching a flipped bit.

mod stack_util;

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use stack_util::*;
use ustack_core::tcp::{State, SynCookies};
use ustack_core::time::Duration;
use ustack_core::{link_local, LinkOffload, TcpError, TcpHandle};
use ustack_wire::checksum;
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::Ipv4Packet;
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use ustack_wire::tcp::{TcpPacket, TcpRepr};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr};

fn add6(n: &mut Net) {
    n.a.add_ipv6_address(cidr(A6)).unwrap();
    n.b.add_ipv6_address(cidr(B6)).unwrap();
}

fn any6(port: u16) -> SocketAddrV6 {
    SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)
}

/// Connect A to `dst` (B listening on `l`): the client and server handles
/// once both ends are established.
fn establish(n: &mut Net, l: TcpHandle, dst: SocketAddrV6) -> (TcpHandle, TcpHandle) {
    let c = n.a.tcp_connect6(n.now, dst, None).unwrap();
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(10), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(l).unwrap();
        }
        server.is_some() && n.a.tcp_status(c).unwrap().state == State::Established
    }));
    (c, server.unwrap())
}

/// Send `data` B -> A on `s` and read it on `c` (the reverse of `transfer`).
fn transfer_back(
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

/// The TCP segments in a log of plain Ethernet frames, with their IPv6
/// header; panics on a TCP segment over IPv4 or with a bad checksum.
fn tcp6_segments(log: &[Vec<u8>]) -> Vec<(Ipv6Repr, TcpRepr<'_>)> {
    let mut v = Vec::new();
    for f in log {
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        let e = EthernetRepr::parse(&eth).unwrap();
        if e.ethertype == EtherType::Ipv4 {
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            assert_ne!(ip.protocol(), IpProtocol::Tcp, "TCP over IPv4");
            continue;
        }
        if e.ethertype != EtherType::Ipv6 {
            continue;
        }
        assert!(f.len() <= 1514, "a frame over the MTU: {}", f.len());
        let p = Ipv6Packet::new_checked(&f[14..]).unwrap();
        let ip = Ipv6Repr::parse(&p).unwrap();
        if ip.next_header != IpProtocol::Tcp {
            continue;
        }
        let t = TcpPacket::new_checked(&f[54..]).unwrap();
        let r = TcpRepr::parse(&t, ip.src, ip.dst, true).expect("a valid TCP/IPv6 segment");
        v.push((ip, r));
    }
    v
}

#[test]
fn handshake_transfer_both_ways_and_close_over_ipv6() {
    let mut n = net6();
    let l = n.b.tcp_listen6(any6(80), 8).unwrap();
    let dst = SocketAddrV6::new(B6, 80, 0, 0);
    let (c, s) = establish(&mut n, l, dst);
    // Each end sees the other's IPv6 address.
    let (cl, cr) = n.a.tcp_addrs(c).unwrap();
    let (sl, sr) = n.b.tcp_addrs(s).unwrap();
    assert_eq!(cr, SocketAddr::V6(dst));
    let SocketAddr::V6(cl6) = cl else {
        panic!("client local {cl}")
    };
    assert_eq!(*cl6.ip(), A6);
    assert_ne!(cl6.port(), 0);
    assert_eq!((sl, sr), (SocketAddr::V6(dst), cl));
    // `TcpStatus` and the socket list carry the IPv6 addresses.
    let st = n.a.tcp_status(c).unwrap();
    assert_eq!((st.local, st.remote), (cl, cr));
    let row = n.b.tcp_sockets().into_iter().find(|i| i.remote == cl);
    assert_eq!(row.map(|i| i.local), Some(SocketAddr::V6(dst)));
    assert_eq!(
        n.b.tcp_addrs(l).unwrap(),
        (SocketAddr::V6(any6(80)), SocketAddr::V6(any6(0)))
    );

    // The SYN and SYN-ACK offer MTU - 60 (RFC 8200 header, 20-byte TCP).
    let syns: Vec<_> = tcp6_segments(&n.log_ab)
        .into_iter()
        .chain(tcp6_segments(&n.log_ba))
        .filter(|(_, r)| r.syn)
        .map(|(ip, r)| (ip.src, r.max_seg_size))
        .collect();
    assert_eq!(syns, vec![(A6, Some(1440)), (B6, Some(1440))]);

    let total = 1 << 20;
    let up: Vec<u8> = (0..total).map(|i| (i * 7 % 253) as u8).collect();
    let down: Vec<u8> = (0..total).map(|i| (i * 13 % 251) as u8).collect();
    let got = transfer(&mut n, c, s, &up, Duration::from_secs(60));
    assert!(got == Some(up), "A -> B: every byte once and in order");
    let got = transfer_back(&mut n, s, c, &down, Duration::from_secs(60));
    assert!(got == Some(down), "B -> A: every byte once and in order");

    // Full-sized segments carry 1440 bytes less options, within the MTU
    // (checked for every frame by `tcp6_segments`).
    let biggest = tcp6_segments(&n.log_ab)
        .iter()
        .map(|(_, r)| r.payload.len())
        .max()
        .unwrap();
    assert!(
        (1400..=1440).contains(&biggest),
        "largest payload {biggest}"
    );

    // Close: A first (it ends in TIME-WAIT), B reads the end of stream.
    n.a.tcp_close(c);
    let mut buf = [0u8; 16];
    assert!(n.run_until(Duration::from_secs(5), |n| {
        matches!(n.b.tcp_recv(s, &mut buf), Ok(0))
    }));
    n.b.tcp_close(s);
    n.advance(Duration::from_secs(1));
    let states: Vec<State> = n.a.tcp_sockets().iter().map(|i| i.state).collect();
    assert_eq!(states, vec![State::TimeWait]);
    // B holds only the listener; the connection was reaped.
    let states: Vec<State> = n.b.tcp_sockets().iter().map(|i| i.state).collect();
    assert_eq!(states, vec![State::Listen]);
    n.advance(Duration::from_secs(120));
    assert!(n.a.tcp_sockets().is_empty(), "TIME-WAIT ends");
    assert_eq!(counter(&n.a, "Tcp", "OutRsts"), 0);
    assert_eq!(counter(&n.b, "Tcp", "OutRsts"), 0);
    assert_eq!(counter(&n.a, "Tcp", "InErrs"), 0);
    assert_eq!(counter(&n.b, "Tcp", "InErrs"), 0);
    assert_eq!(counter(&n.a, "Tcp", "ActiveOpens"), 1);
    assert_eq!(counter(&n.b, "Tcp", "PassiveOpens"), 1);
}

#[test]
fn ipv4_and_ipv6_connections_run_side_by_side() {
    let mut n = net6();
    // An IPV6_V6ONLY listener: IPv6 connections only (the dual-stack
    // default is in `stack_dualstack.rs`).
    let l6 = n.b.tcp_listen6_v6only(any6(80), 8).unwrap();
    let l4 = n.b.tcp_listen(SocketAddrV4::new(0.into(), 81), 8).unwrap();
    // One listener per port and family; a dual-stack one conflicts with
    // an IPv4 one.
    assert!(n.b.tcp_listen6(any6(80), 8).is_err());
    assert!(n.b.tcp_listen6(any6(81), 8).is_err());
    let (c6, s6) = establish(&mut n, l6, SocketAddrV6::new(B6, 80, 0, 0));
    let c4 =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 81), None)
            .unwrap();
    let mut s4 = None;
    assert!(n.run_until(Duration::from_secs(5), |n| {
        if s4.is_none() {
            s4 = n.b.tcp_accept(l4).unwrap();
        }
        s4.is_some()
    }));
    let s4 = s4.unwrap();
    let a: Vec<u8> = (0..200_000).map(|i| (i % 249) as u8).collect();
    let b: Vec<u8> = (0..200_000).map(|i| (i % 247) as u8).collect();
    assert!(transfer(&mut n, c6, s6, &a, Duration::from_secs(30)) == Some(a.clone()));
    assert!(transfer(&mut n, c4, s4, &b, Duration::from_secs(30)) == Some(b.clone()));
    assert_eq!(
        n.b.tcp_addrs(s4).unwrap().1.ip(),
        std::net::IpAddr::V4(A_IP)
    );
    assert_eq!(n.b.tcp_addrs(s6).unwrap().1.ip(), std::net::IpAddr::V6(A6));

    // An IPv6 SYN to the IPv4 listener's port (and the reverse) finds no
    // listener: the connect is refused with a RST.
    let c =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 81, 0, 0), None)
            .unwrap();
    assert!(n.run_until(Duration::from_secs(5), |n| {
        n.a.tcp_status(c).unwrap().pending_error.is_some()
    }));
    assert_eq!(
        n.a.tcp_status(c).unwrap().pending_error,
        Some(TcpError::ConnectionRefused)
    );
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    assert!(n.run_until(Duration::from_secs(5), |n| {
        n.a.tcp_status(c).unwrap().pending_error.is_some()
    }));
    assert_eq!(counter(&n.b, "Tcp", "OutRsts"), 2);
}

#[test]
fn link_local_connections_and_bad_addresses() {
    let mut n = net6();
    let l = n.b.tcp_listen6(any6(90), 8).unwrap();
    let llb = link_local(B_MAC).address;
    let (c, s) = establish(&mut n, l, SocketAddrV6::new(llb, 90, 0, 0));
    let (cl, _) = n.a.tcp_addrs(c).unwrap();
    assert_eq!(cl.ip(), std::net::IpAddr::V6(link_local(A_MAC).address));
    let data = vec![42u8; 50_000];
    assert!(transfer(&mut n, c, s, &data, Duration::from_secs(10)) == Some(data.clone()));

    // Not our address, multicast, port 0, off-link.
    assert!(n.b.tcp_listen6(SocketAddrV6::new(A6, 1, 0, 0), 1).is_err());
    let bad = [
        SocketAddrV6::new("ff02::1".parse().unwrap(), 80, 0, 0),
        SocketAddrV6::new(B6, 0, 0, 0),
        SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0),
    ];
    for dst in bad {
        assert!(n.a.tcp_connect6(n.now, dst, None).is_err(), "{dst}");
    }
    let far = SocketAddrV6::new("2001:db8::1".parse().unwrap(), 80, 0, 0);
    assert!(n.a.tcp_connect6(n.now, far, None).is_err());
    let not_ours = Some(SocketAddrV6::new(B6, 0, 0, 0));
    assert!(n
        .a
        .tcp_connect6(n.now, SocketAddrV6::new(B6, 90, 0, 0), not_ours)
        .is_err());
}

#[test]
fn syn_cookies_work_over_the_ipv6_tuple() {
    let mut cb = config(B_MAC, B_IP, 2);
    cb.tcp.syncookies = SynCookies::Always;
    let mut n = Net::with_configs(config(A_MAC, A_IP, 1), cb);
    add6(&mut n);
    let l = n.b.tcp_listen6(any6(80), 8).unwrap();
    let (c, s) = establish(&mut n, l, SocketAddrV6::new(B6, 80, 0, 0));
    assert_eq!(counter(&n.b, "TcpExt", "SyncookiesSent"), 1);
    assert_eq!(counter(&n.b, "TcpExt", "SyncookiesRecv"), 1);
    let data: Vec<u8> = (0..100_000).map(|i| (i % 241) as u8).collect();
    assert!(transfer(&mut n, c, s, &data, Duration::from_secs(10)) == Some(data.clone()));
    assert!(transfer_back(&mut n, s, c, &data, Duration::from_secs(10)) == Some(data.clone()));
    assert_eq!(counter(&n.b, "TcpExt", "SyncookiesFailed"), 0);
}

const FULL: LinkOffload = LinkOffload {
    vnet_hdr: true,
    tso4: true,
    tso6: false,
    tx_csum: true,
};

#[test]
fn with_tcp_ipv4_offload_ipv6_segments_are_cut_at_the_mtu_with_partial_checksums() {
    let mut n = net6();
    n.a.set_link_offload(FULL);
    n.b.set_link_offload(FULL);
    let l = n.b.tcp_listen6(any6(80), 8).unwrap();
    let (c, s) = establish(&mut n, l, SocketAddrV6::new(B6, 80, 0, 0));
    let total = 1 << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 3 % 239) as u8).collect();
    let got = transfer(&mut n, c, s, &data, Duration::from_secs(60));
    assert!(got == Some(data), "every byte once and in order");
    let mut segs = 0;
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
        assert!(eth.len() <= 1514, "a frame over the MTU: {}", eth.len());
        assert_eq!(v.gso, Gso::None, "no TCP/IPv6 GSO frames");
        assert_eq!(
            v.csum,
            Csum::Partial {
                start: 54,
                offset: 16
            }
        );
        // Complete the checksum as the device would; then it verifies.
        let mut g = eth.to_vec();
        let sum = !checksum::fold(checksum::sum(&g[54..], 0));
        g[70..72].copy_from_slice(&sum.to_be_bytes());
        let t = TcpPacket::new_checked(&g[54..]).unwrap();
        assert!(TcpRepr::parse(&t, ip.src, ip.dst, true).is_ok());
        segs += 1;
    }
    assert!(segs as usize > total / 1440, "{segs} segments");
    assert_eq!(counter(&n.a, "Link", "OutGsoFrames"), 0);
    assert_eq!(counter(&n.b, "Tcp", "InCsumErrors"), 0);
}

/// IPv6 has no header checksum: TCP's, over the IPv6 pseudo-header
/// (mandatory, RFC 8200 8.1), is what guards the source address. A data
/// segment with any one bit of its source address, TCP header or first
/// payload bytes flipped is dropped and counted, never delivered: as a
/// checksum error (`TcpInCsumErrors`) except for a multicast source or a
/// bad data offset, refused first; the intact segment is then taken.
#[test]
fn a_flipped_bit_in_the_pseudo_header_or_segment_is_a_checksum_error() {
    let mut n = net6();
    let l = n.b.tcp_listen6(any6(80), 8).unwrap();
    let (c, s) = establish(&mut n, l, SocketAddrV6::new(B6, 80, 0, 0));
    // Hold A's frames back from B; take the data segment from the log.
    n.filter_ab = Some(Box::new(|_f: &[u8]| false));
    let logged = n.log_ab.len();
    assert_eq!(n.a.tcp_send(c, b"pseudo-header checksum"), Ok(22));
    n.pump();
    let seg = n.log_ab[logged..]
        .iter()
        .rev()
        .find(|f| f.len() > 14 + 40 + 20 && f[12..14] == [0x86, 0xdd])
        .expect("A sent the data segment")
        .clone();
    let before = counter(&n.b, "Tcp", "InCsumErrors");
    let tcp_hdr = usize::from(seg[54 + 12] >> 4) * 4;
    let bits = (22 * 8..38 * 8).chain(54 * 8..(54 + tcp_hdr + 8) * 8);
    let mut flipped = 0;
    let mut buf = [0u8; 64];
    for bit in bits {
        let mut bad = seg.clone();
        bad[bit / 8] ^= 0x80 >> (bit % 8);
        let dropped = |n: &Net| {
            ["InHdrErrors", "InAddrErrors", "InDiscards"]
                .map(|c| counter(&n.b, "Ip6", c))
                .iter()
                .sum::<u64>()
        };
        let other = dropped(&n);
        let errs = counter(&n.b, "Tcp", "InErrs");
        n.inject_to_b(&bad);
        // fd00:: with 0x02 of its first byte flipped is ff00::, a
        // multicast source; a data offset changed makes a malformed
        // header: both refused before the checksum is looked at.
        if bad[22] == 0xff {
            assert_eq!(dropped(&n), other + 1, "multicast source, bit {bit}");
        } else {
            assert_eq!(counter(&n.b, "Tcp", "InErrs"), errs + 1, "bit {bit}");
            if bit / 8 == 54 + 12 && bit % 8 < 4 {
                // A data offset still within the segment: a checksum error.
                flipped = counter(&n.b, "Tcp", "InCsumErrors") - before;
            } else {
                flipped += 1;
            }
        }
        assert_eq!(
            counter(&n.b, "Tcp", "InCsumErrors"),
            before + flipped,
            "bit {bit} not caught"
        );
        assert_eq!(n.b.tcp_recv(s, &mut buf), Err(TcpError::WouldBlock));
    }
    assert!(flipped >= 127 + (tcp_hdr as u64 + 8) * 8 - 4, "{flipped}");
    n.inject_to_b(&seg);
    assert_eq!(n.b.tcp_recv(s, &mut buf), Ok(22));
    assert_eq!(&buf[..22], b"pseudo-header checksum");
    assert_eq!(counter(&n.b, "Tcp", "InCsumErrors"), before + flipped);
}
