//! Every parser on arbitrary bytes: `new_checked`, then every accessor and
//! `parse` must not panic; whatever parses must re-emit into `buffer_len`
//! bytes and parse back to the same repr. Inputs are both fully random and
//! real captured frames with a few random byte mutations (to reach deep paths).

use std::net::Ipv4Addr;

use proptest::prelude::*;
use ustack_wire::arp::{ArpPacket, ArpRepr};
use ustack_wire::ethernet::{EthernetFrame, EthernetRepr};
use ustack_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use ustack_wire::tcp::{TcpPacket, TcpRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

const SEEDS: &[&[u8]] = &[
    include_bytes!("data/arp_request.bin"),
    include_bytes!("data/arp_reply.bin"),
    include_bytes!("data/icmp_echo_request.bin"),
    include_bytes!("data/icmp_echo_reply.bin"),
    include_bytes!("data/udp_dns_query.bin"),
    include_bytes!("data/icmp_port_unreachable.bin"),
    include_bytes!("data/ipv4_frag2.bin"),
    include_bytes!("data/icmp_frag_needed.bin"),
    include_bytes!("data/icmp_time_exceeded.bin"),
    include_bytes!("data/ipv4_record_route.bin"),
];

fn check_ethernet(b: &[u8]) {
    let Ok(f) = EthernetFrame::new_checked(b) else {
        return;
    };
    let _ = (f.src_addr(), f.dst_addr(), f.ethertype(), f.payload().len());
    let r = EthernetRepr::parse(&f).unwrap();
    let mut out = vec![0u8; r.buffer_len(0)];
    r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
    assert_eq!(
        EthernetRepr::parse(&EthernetFrame::new_checked(&out[..]).unwrap()),
        Ok(r)
    );
    let _ = r.to_string();
}

fn check_arp(b: &[u8]) {
    let Ok(p) = ArpPacket::new_checked(b) else {
        return;
    };
    let _ = (
        p.hardware_type(),
        p.protocol_type(),
        p.hardware_len(),
        p.protocol_len(),
    );
    let _ = (
        p.operation(),
        p.source_hardware_addr(),
        p.source_protocol_addr(),
    );
    let _ = (p.target_hardware_addr(), p.target_protocol_addr());
    if let Ok(r) = ArpRepr::parse(&p) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&out[..]).unwrap()),
            Ok(r)
        );
        let _ = r.to_string();
    }
}

fn check_ipv4(b: &[u8]) {
    let Ok(p) = Ipv4Packet::new_checked(b) else {
        return;
    };
    let _ = (
        p.version(),
        p.header_len(),
        p.dscp(),
        p.ecn(),
        p.total_len(),
        p.ident(),
    );
    let _ = (
        p.reserved_flag(),
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
    );
    let _ = (
        p.ttl(),
        p.protocol(),
        p.checksum(),
        p.src_addr(),
        p.dst_addr(),
    );
    let _ = (p.options().len(), p.payload().len(), p.verify_checksum());
    let _ = Ipv4Repr::parse(&p, true);
    if let Ok(r) = Ipv4Repr::parse(&p, false) {
        assert_eq!(r.payload_len, p.payload().len());
        let mut out = vec![0u8; r.buffer_len()];
        let mut q = Ipv4Packet::new_unchecked(&mut out[..]);
        r.emit(&mut q, true);
        q.payload_mut().copy_from_slice(p.payload());
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&out[..]).unwrap(), true),
            Ok(r)
        );
        let _ = r.to_string();
    }
    // Whatever an ICMP error quotes goes through the tolerant path.
    let _ = Ipv4Repr::parse_quoted(b);
}

fn check_icmpv4(b: &[u8]) {
    let Ok(p) = Icmpv4Packet::new_checked(b) else {
        return;
    };
    let _ = (
        p.msg_type(),
        p.msg_code(),
        p.checksum(),
        p.echo_ident(),
        p.echo_seq_no(),
    );
    let _ = (
        p.next_hop_mtu(),
        p.ext_length(),
        p.rest_of_header(),
        p.data().len(),
    );
    let _ = (p.verify_checksum(), Icmpv4Repr::parse(&p, true));
    if let Ok(r) = Icmpv4Repr::parse(&p, false) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(
            Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&out[..]).unwrap(), true),
            Ok(r)
        );
        let _ = r.to_string();
    }
}

fn check_udp(b: &[u8]) {
    let Ok(p) = UdpPacket::new_checked(b) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.len(),
        p.is_empty(),
        p.checksum(),
    );
    let _ = (
        p.payload().len(),
        p.verify_checksum(A, B),
        UdpRepr::parse(&p, A, B, true),
    );
    if let Ok(r) = UdpRepr::parse(&p, A, B, false) {
        let payload = p.payload();
        let mut out = vec![0u8; r.buffer_len(payload.len())];
        out[8..].copy_from_slice(payload);
        r.emit(
            &mut UdpPacket::new_unchecked(&mut out[..]),
            A,
            B,
            payload.len(),
            true,
        );
        let q = UdpPacket::new_checked(&out[..]).unwrap();
        assert_eq!(UdpRepr::parse(&q, A, B, true), Ok(r));
        assert_eq!(q.payload(), payload);
        let _ = r.to_string();
    }
}

fn check_tcp(b: &[u8]) {
    let Ok(p) = TcpPacket::new_checked(b) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.seq_number(),
        p.ack_number(),
        p.header_len(),
    );
    let _ = (
        p.flags(),
        p.window_len(),
        p.checksum(),
        p.urgent_at(),
        p.options().len(),
    );
    let _ = (
        p.payload().len(),
        p.verify_checksum(A, B),
        TcpRepr::parse(&p, A, B, true),
    );
    if let Ok(r) = TcpRepr::parse(&p, A, B, false) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut TcpPacket::new_unchecked(&mut out[..]), A, B, true);
        let q = TcpPacket::new_checked(&out[..]).unwrap();
        let back = TcpRepr::parse(&q, A, B, true).unwrap();
        assert_eq!(back.payload, r.payload);
        assert_eq!(
            (back.src_port, back.dst_port, back.seq, back.ack),
            (r.src_port, r.dst_port, r.seq, r.ack)
        );
    }
}

/// Run every parser on `b` and on each of its suffixes at layer offsets.
fn check_all(b: &[u8]) {
    check_ethernet(b);
    check_arp(b);
    check_ipv4(b);
    check_icmpv4(b);
    check_udp(b);
    check_tcp(b);
    for off in [14usize, 34, 42] {
        if let Some(rest) = b.get(off..) {
            check_arp(rest);
            check_ipv4(rest);
            check_icmpv4(rest);
            check_udp(rest);
            check_tcp(rest);
        }
    }
}

fn mutated_seed() -> impl Strategy<Value = Vec<u8>> {
    (
        0..SEEDS.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(i, muts, cut, do_cut)| {
            let mut v = SEEDS[i].to_vec();
            for (at, val) in muts {
                let k = at.index(v.len());
                v[k] = val;
            }
            if do_cut {
                v.truncate(cut.index(v.len() + 1));
            }
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_all(&b);
    }

    #[test]
    fn mutated_real_frames(b in mutated_seed()) {
        check_all(&b);
    }
}

#[test]
fn every_prefix_of_every_seed() {
    for s in SEEDS {
        for n in 0..=s.len() {
            check_all(&s[..n]);
        }
    }
}
