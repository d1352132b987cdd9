//! The IPv6-family and DHCP parsers on arbitrary bytes and on mutated
//! captured frames: no panic, and whatever parses re-emits and re-parses to
//! the same value (the bodies are the fuzz harness's,
//! `fuzz/harness/parsers_v6.rs`, which build on stable without libfuzzer).

use proptest::prelude::*;

#[path = "../../../fuzz/harness/parsers_v6.rs"]
mod parsers_v6;

/// Captured frames (see `real_packets_v6.rs` and `dhcp_packets.rs`).
const SEEDS: &[&[u8]] = &[
    include_bytes!("data/icmpv6_echo_request.bin"),
    include_bytes!("data/ipv6_frag1.bin"),
    include_bytes!("data/ipv6_frag2.bin"),
    include_bytes!("data/icmpv6_time_exceeded.bin"),
    include_bytes!("data/icmpv6_port_unreachable.bin"),
    include_bytes!("data/icmpv6_param_problem.bin"),
    include_bytes!("data/ipv6_dstopts_unknown.bin"),
    include_bytes!("data/ndp_ns.bin"),
    include_bytes!("data/ndp_ns_dad.bin"),
    include_bytes!("data/ndp_na.bin"),
    include_bytes!("data/ndp_rs.bin"),
    include_bytes!("data/ndp_ra.bin"),
    include_bytes!("data/ndp_redirect.bin"),
    include_bytes!("data/mld_report_1.bin"),
    include_bytes!("data/mld_report_6.bin"),
    include_bytes!("data/dhcpv6_solicit.bin"),
    include_bytes!("data/dhcpv6_reply.bin"),
    include_bytes!("data/dhcpv4_discover.bin"),
    include_bytes!("data/dhcpv4_offer.bin"),
];

/// Every body on `b` and on its suffixes at the layer offsets of the seeds
/// (IPv6 at 14; a Hop-by-Hop or Fragment header and ICMPv6 at 54 and 62;
/// DHCPv4 at 42; DHCPv6 at 62).
fn check_all(b: &[u8]) {
    for off in [0usize, 14, 42, 53, 54, 62] {
        if let Some(rest) = b.get(off..) {
            parsers_v6::ipv6(rest);
            parsers_v6::ipv6_ext(rest);
            parsers_v6::icmpv6(rest);
            parsers_v6::ndisc(rest);
            parsers_v6::mld(rest);
            parsers_v6::dhcpv4(rest);
            parsers_v6::dhcpv6(rest);
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
    fn arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
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
        for n in 0..=s.len().min(400) {
            check_all(&s[..n]);
        }
    }
}
