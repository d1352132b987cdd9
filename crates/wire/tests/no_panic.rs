//! Every parser on arbitrary bytes: `new_checked`, then every accessor and
//! `parse` must not panic; whatever parses must re-emit into `buffer_len`
//! bytes and parse back to the same repr (the per-parser bodies are the fuzz
//! harness's, `fuzz/harness/parsers.rs`). Inputs are both fully random and
//! real captured frames with a few random byte mutations (to reach deep paths).

use std::net::Ipv4Addr;

use proptest::prelude::*;
use ustack_wire::ethernet::{EthernetFrame, EthernetRepr};
use ustack_wire::ipv4::Ipv4Packet;
use ustack_wire::udp::{UdpPacket, UdpRepr};

/// The fuzz targets' bodies (every accessor, parse, re-emit, re-parse), shared
/// with `fuzz/fuzz_targets/*.rs`; they build on stable without libfuzzer.
#[path = "../../../fuzz/harness/parsers.rs"]
mod parsers;

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

/// Checks this test makes beyond the fuzz harness's bodies: a frame that
/// passes `new_checked` always parses, and `emit` with checksum computation
/// (the harness fills the UDP checksum afterwards instead) round-trips.
fn check_ethernet(b: &[u8]) {
    parsers::ethernet(b);
    if let Ok(f) = EthernetFrame::new_checked(b) {
        assert!(EthernetRepr::parse(&f).is_ok());
    }
}

fn check_ipv4(b: &[u8]) {
    parsers::ipv4(b);
    // The harness reads the payload only of a packet that parses.
    if let Ok(p) = Ipv4Packet::new_checked(b) {
        let _ = p.payload().len();
    }
}

fn check_udp(b: &[u8]) {
    parsers::udp(b);
    let Ok(p) = UdpPacket::new_checked(b) else {
        return;
    };
    let _ = p.payload().len();
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
    }
}

/// Run every parser on `b` and on each of its suffixes at layer offsets.
fn check_all(b: &[u8]) {
    parsers::virtio_net(b);
    check_ethernet(b);
    parsers::arp(b);
    check_ipv4(b);
    parsers::icmpv4(b);
    check_udp(b);
    parsers::tcp(b);
    for off in [14usize, 34, 42] {
        if let Some(rest) = b.get(off..) {
            parsers::arp(rest);
            check_ipv4(rest);
            parsers::icmpv4(rest);
            check_udp(rest);
            parsers::tcp(rest);
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
