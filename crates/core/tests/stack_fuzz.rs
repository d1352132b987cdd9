//! `Stack::receive` must never panic, whatever the bytes: random frames and
//! mutations of real frames (with checksums repaired so the mutations reach
//! the deeper layers), interleaved with polls on a virtual clock.

mod stack_util;

use std::net::SocketAddrV4;
use std::sync::OnceLock;

use proptest::prelude::*;
use stack_util::*;
use ustack_core::time::Duration;
use ustack_wire::ethernet::{EtherType, EthernetFrame};
use ustack_wire::icmpv4::Icmpv4Packet;
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::Ipv4Packet;
use ustack_wire::tcp::TcpPacket;
use ustack_wire::udp::UdpPacket;

static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();

/// Frames of a real session: ARP, gratuitous ARP, ICMP echo (fragmented),
/// UDP, a TCP handshake, data and close, RST to a closed port.
fn corpus() -> Vec<Vec<u8>> {
    let mut n = Net::new();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 4).unwrap();
    n.a.icmp_echo_send(n.now, B_IP, 1, 1, &[7u8; 3000]).unwrap();
    let u = n.a.udp_bind(SocketAddrV4::new(0.into(), 0)).unwrap();
    n.a.udp_send_to(n.now, u, b"hello", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    n.advance(Duration::from_millis(10));
    let s = n.b.tcp_accept(l).unwrap().unwrap();
    n.a.tcp_send(c, b"GET / HTTP/1.0\r\n\r\n").unwrap();
    n.b.tcp_send(s, &[1u8; 5000]).unwrap();
    n.advance(Duration::from_millis(10));
    n.a.tcp_close(c);
    n.b.tcp_close(s);
    let _ =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 81), None)
            .unwrap();
    n.advance(Duration::from_secs(1));
    let mut v = n.log_ab.clone();
    v.extend(n.log_ba.iter().cloned());
    v
}

/// Recompute IPv4 and transport checksums where the lengths allow.
fn repair(f: &mut [u8]) {
    let Ok(eth) = EthernetFrame::new_checked(&f[..]) else {
        return;
    };
    if eth.ethertype() != EtherType::Ipv4 {
        return;
    }
    let Some(ipb) = f.get_mut(14..) else { return };
    let Ok(mut ip) = Ipv4Packet::new_checked(&mut ipb[..]) else {
        return;
    };
    ip.fill_checksum();
    let (src, dst, proto, first) = (
        ip.src_addr(),
        ip.dst_addr(),
        ip.protocol(),
        ip.frag_offset() == 0,
    );
    if !first || ip.more_frags() {
        return;
    }
    let payload = ip.payload_mut();
    match proto {
        IpProtocol::Tcp => {
            if let Ok(mut p) = TcpPacket::new_checked(&mut payload[..]) {
                p.fill_checksum(src, dst);
            }
        }
        IpProtocol::Udp => {
            if let Ok(mut p) = UdpPacket::new_checked(&mut payload[..]) {
                p.fill_checksum(src, dst);
            }
        }
        IpProtocol::Icmp => {
            if let Ok(mut p) = Icmpv4Packet::new_checked(&mut payload[..]) {
                p.fill_checksum();
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Op {
    Flip { at: usize, xor: u8 },
    Truncate(usize),
    Extend(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Op::Flip { at, xor }),
        1 => any::<usize>().prop_map(Op::Truncate),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Op::Extend),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 1..20)) {
        let mut n = Net::new();
        for f in &frames {
            n.inject_to_b(f);
        }
        n.advance(Duration::from_secs(40));
    }

    #[test]
    fn mutated_real_frames_never_panic(
        picks in prop::collection::vec((any::<prop::sample::Index>(), prop::collection::vec(op(), 1..6), any::<bool>()), 1..30)
    ) {
        let corpus = CORPUS.get_or_init(corpus);
        let mut n = Net::new();
        let _l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 4).unwrap();
        let _u = n.b.udp_bind(SocketAddrV4::new(0.into(), 53)).unwrap();
        n.pump();
        for (idx, ops, fix) in picks {
            let mut f = idx.get(corpus).clone();
            for o in ops {
                match o {
                    Op::Flip { at, xor } => {
                        if !f.is_empty() {
                            let i = at % f.len();
                            f[i] ^= xor;
                        }
                    }
                    Op::Truncate(k) => {
                        let k = if f.is_empty() { 0 } else { k % f.len() };
                        f.truncate(k);
                    }
                    Op::Extend(b) => f.extend(b),
                }
            }
            if fix {
                repair(&mut f);
            }
            n.inject_to_b(&f);
            n.advance(Duration::from_millis(300));
        }
        n.advance(Duration::from_secs(200));
        // Everything transient drains; only the listener and the UDP socket remain.
        prop_assert_eq!(n.b.reassembly_memory(), 0);
        prop_assert!(n.b.tcp_socket_count() <= 1 + 4);
    }
}
