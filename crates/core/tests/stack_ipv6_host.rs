//! The IPv6 host side (`Stack::set_ipv6_host`): duplicate address
//! detection (RFC 4862 5.4), MLDv2 reports (RFC 3810), router discovery
//! and SLAAC (RFC 4861 6.3.4 / 6.3.7, RFC 4862 5.5.3), routing through the
//! default router. Sans-IO on a virtual clock.

mod stack_util;

use std::net::{Ipv6Addr, SocketAddrV6};

use stack_util::*;
use ustack_core::time::{Duration, Instant};
use ustack_core::{link_local, BindError, Ipv6HostConfig, Stack, UdpError};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Cidr, Ipv6Packet, Ipv6Repr};
use ustack_wire::ipv6ext::Ipv6FragmentRepr;
use ustack_wire::mld::{record_type, MldRepr, ALL_MLDV2_ROUTERS};
use ustack_wire::ndisc::{
    na_flags, prefix_flags, NdiscOption, NdiscOptions, NdiscRepr, PrefixInfo,
};

/// Its solicited-node group differs from the link-local address's.
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0xa, 0xb);
const ROUTER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xfe]);
const ROUTER_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);
/// The SLAAC address B forms from PREFIX and 02:00:00:00:00:02.
const SLAAC_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0xff, 0xfe00, 2);

fn c(s: &Stack, group: &str, name: &str) -> u64 {
    counter(s, group, name)
}

fn new_b(now: Instant) -> Stack {
    Stack::new(config(B_MAC, B_IP, 2), now)
}

fn frame_from(
    src_mac: MacAddr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next_header: IpProtocol,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let dst_mac = if dst.is_multicast() {
        let o = dst.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    } else {
        B_MAC
    };
    let mut f = vec![0u8; 54 + payload.len()];
    EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        src,
        dst,
        next_header,
        payload_len: payload.len(),
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    f[54..].copy_from_slice(payload);
    f
}

fn icmp6(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, repr: &Icmpv6Repr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut b[..]));
    let mac = MacAddr([2, 0, 0, 0, 0, 9]);
    frame_from(mac, src, dst, IpProtocol::ICMPV6, hop_limit, &b)
}

/// Every IPv6 frame: (Ethernet destination, header, payload).
fn sent(out: &[Vec<u8>]) -> Vec<(MacAddr, Ipv6Repr, Vec<u8>)> {
    out.iter()
        .filter_map(|f| {
            let e = EthernetRepr::parse(&EthernetFrame::new_checked(&f[..]).ok()?).ok()?;
            if e.ethertype != EtherType::Ipv6 {
                return None;
            }
            let p = Ipv6Packet::new_checked(&f[14..]).ok()?;
            Some((e.dst, Ipv6Repr::parse(&p).ok()?, p.payload().to_vec()))
        })
        .collect()
}

fn poll(s: &mut Stack, now: Instant) -> Vec<(MacAddr, Ipv6Repr, Vec<u8>)> {
    let mut out = Vec::new();
    s.poll(now, &mut |f| out.push(f.to_vec()));
    sent(&out)
}

fn receive(s: &mut Stack, now: Instant, f: &[u8]) -> Vec<(MacAddr, Ipv6Repr, Vec<u8>)> {
    let mut out = Vec::new();
    s.receive(now, f, &mut |x| out.push(x.to_vec()));
    s.poll(now, &mut |x| out.push(x.to_vec()));
    sent(&out)
}

/// The ICMPv6 message of one sent packet (the Hop-by-Hop header skipped).
fn icmp_of(ip: &Ipv6Repr, p: &[u8]) -> Option<Icmpv6Repr<'static>> {
    let body: &[u8] = match ip.next_header {
        IpProtocol::ICMPV6 => p,
        IpProtocol::HOP_BY_HOP if p.first() == Some(&58) => &p[8..],
        _ => return None,
    };
    let body: &'static [u8] = Box::leak(body.to_vec().into_boxed_slice());
    let pkt = Icmpv6Packet::new_checked(body).ok()?;
    Icmpv6Repr::parse(&pkt, &ip.src, &ip.dst, true).ok()
}

/// Poll at every deadline up to `t` (and at `t`): what was sent.
fn run_to(s: &mut Stack, t: Instant) -> Vec<(MacAddr, Ipv6Repr, Vec<u8>)> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        match s.poll_at() {
            Some(at) if at < t => out.extend(poll(s, at)),
            _ => break,
        }
    }
    out.extend(poll(s, t));
    out
}

fn echo_to(dst: Ipv6Addr) -> Vec<u8> {
    let e = Icmpv6Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data: b"ping",
    };
    icmp6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9), dst, 64, &e)
}

fn dad_only() -> Ipv6HostConfig {
    Ipv6HostConfig {
        dad_transmits: 1,
        ..Ipv6HostConfig::default()
    }
}

#[test]
fn addresses_stay_tentative_until_dad_ends_and_mld_goes_first() {
    let now = Instant::from_secs(1);
    let mut s = new_b(now);
    let ll = link_local(B_MAC).address;
    s.add_ipv6_address(Ipv6Cidr {
        address: B6,
        prefix_len: 64,
    })
    .unwrap();
    // DAD on: the addresses the stack has become tentative.
    s.set_ipv6_host(now, dad_only());
    assert!(s.ipv6_addresses().is_empty());
    assert_eq!(s.ipv6_tentative_addresses().len(), 2);
    // Not usable while tentative.
    assert_eq!(
        s.udp6_bind(SocketAddrV6::new(B6, 7, 0, 0)),
        Err(BindError::AddrNotAvailable)
    );
    // The first messages wait a random time of at most 1 s (RFC 4862
    // 5.4.2).
    assert!(poll(&mut s, now).is_empty());
    let start = s.poll_at().unwrap();
    assert!(start <= now + Duration::from_secs(1));
    let now = start;
    let out = poll(&mut s, now);
    // First the MLDv2 report joining both solicited-node groups (from ::,
    // hop limit 1, Router Alert), then one NS from :: per address.
    let (mac, ip, p) = &out[0];
    assert_eq!(*mac, MacAddr([0x33, 0x33, 0, 0, 0, 0x16]));
    assert_eq!(
        (ip.src, ip.dst, ip.hop_limit),
        (Ipv6Addr::UNSPECIFIED, ALL_MLDV2_ROUTERS, 1)
    );
    assert_eq!(ip.next_header, IpProtocol::HOP_BY_HOP);
    assert_eq!(&p[..4], &[58, 0, 5, 2], "Router Alert for MLD");
    let Some(Icmpv6Repr::Mld(MldRepr::Report { records })) = icmp_of(ip, p) else {
        panic!("not an MLD report: {p:?}");
    };
    let groups: Vec<_> = records
        .iter()
        .map(|r| (r.record_type, r.mcast_addr))
        .collect();
    assert_eq!(
        groups,
        vec![
            (record_type::CHANGE_TO_EXCLUDE, solicited_node(ll)),
            (record_type::CHANGE_TO_EXCLUDE, solicited_node(B6)),
        ]
    );
    let mut targets = Vec::new();
    for (_, ip, p) in &out[1..] {
        assert_eq!(ip.src, Ipv6Addr::UNSPECIFIED);
        assert_eq!(ip.hop_limit, 255);
        match icmp_of(ip, p) {
            Some(Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { target, options })) => {
                assert_eq!(ip.dst, solicited_node(target));
                assert!(options.source_ll_addr().is_none());
                targets.push(target);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(targets, vec![ll, B6]);
    // An echo to the tentative address is not answered.
    assert!(receive(&mut s, now, &echo_to(B6)).is_empty());
    // The join report goes once more within a second (RFC 3810 6.1,
    // Robustness Variable 2), nothing else before DAD ends.
    let t = now + Duration::from_secs(1);
    let mut later = Vec::new();
    while let Some(at) = s.poll_at().filter(|&at| at < t) {
        later.extend(poll(&mut s, at));
    }
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].1.dst, ALL_MLDV2_ROUTERS);
    assert_eq!(s.poll_at(), Some(t));
    // One RetransTimer later, no answer: both are ours, link-local first.
    assert!(poll(&mut s, t).is_empty());
    let addrs: Vec<_> = s.ipv6_addresses().iter().map(|c| c.address).collect();
    assert_eq!(addrs, vec![ll, B6]);
    assert!(s.ipv6_tentative_addresses().is_empty());
    assert!(s.udp6_bind(SocketAddrV6::new(B6, 7, 0, 0)).is_ok());
    assert_eq!(c(&s, "Icmp6", "OutMLDv2Reports"), 2);
    assert_eq!(c(&s, "Icmp6", "OutNeighborSolicits"), 2);
    assert_eq!(c(&s, "Ip6", "DadDuplicates"), 0);
}

#[test]
fn a_solicitation_or_advertisement_for_a_tentative_address_makes_it_duplicate() {
    let now = Instant::from_secs(1);
    let mut s = new_b(now);
    let ll = link_local(B_MAC).address;
    s.set_ipv6_host(now, dad_only());
    s.add_ipv6_address(Ipv6Cidr {
        address: B6,
        prefix_len: 64,
    })
    .unwrap();
    let _ = poll(&mut s, now);
    // Address resolution for B6 from a unicast source: ignored (no
    // answer, not a conflict, RFC 4862 5.4.3).
    let peer = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9);
    let mut sll = [0u8; 8];
    NdiscOption::SourceLinkLayerAddr(&[2, 0, 0, 0, 0, 9])
        .emit(&mut sll)
        .unwrap();
    let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target: B6,
        options: NdiscOptions::new_checked(&sll).unwrap(),
    });
    let g = solicited_node(B6);
    assert!(receive(&mut s, now, &icmp6(peer, g, 255, &ns)).is_empty());
    assert_eq!(s.ipv6_tentative_addresses().len(), 2);
    // Another node probing B6 (NS from ::): duplicate.
    let probe = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target: B6,
        options: NdiscOptions::default(),
    });
    let f = icmp6(Ipv6Addr::UNSPECIFIED, g, 255, &probe);
    // No answer; its group is left (RFC 3810 6.1: CHANGE_TO_INCLUDE, no
    // sources).
    let out = receive(&mut s, now, &f);
    let leaves: Vec<_> = out
        .iter()
        .map(|(_, ip, p)| match icmp_of(ip, p) {
            Some(Icmpv6Repr::Mld(MldRepr::Report { records })) => records
                .iter()
                .map(|r| (r.record_type, r.mcast_addr))
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        leaves,
        vec![vec![(record_type::CHANGE_TO_INCLUDE, solicited_node(B6))]]
    );
    assert_eq!(s.ipv6_duplicate_addresses(), &[B6]);
    // Someone advertising our link-local address: duplicate too.
    let mut tll = [0u8; 8];
    NdiscOption::TargetLinkLayerAddr(&[2, 0, 0, 0, 0, 9])
        .emit(&mut tll)
        .unwrap();
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: na_flags::OVERRIDE,
        target: ll,
        options: NdiscOptions::new_checked(&tll).unwrap(),
    });
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let f = icmp6(
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 9),
        all_nodes,
        255,
        &na,
    );
    let out = receive(&mut s, now, &f);
    assert_eq!(out.len(), 1, "only the leave of its group");
    match icmp_of(&out[0].1, &out[0].2) {
        Some(Icmpv6Repr::Mld(MldRepr::Report { records })) => {
            let r: Vec<_> = records
                .iter()
                .map(|r| (r.record_type, r.mcast_addr))
                .collect();
            assert_eq!(
                r,
                vec![(record_type::CHANGE_TO_INCLUDE, solicited_node(ll))]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.ipv6_duplicate_addresses(), &[B6, ll]);
    assert_eq!(c(&s, "Ip6", "DadDuplicates"), 2);
    // Neither is ever used.
    let _ = poll(&mut s, now + Duration::from_secs(5));
    assert!(s.ipv6_addresses().is_empty());
    assert!(s.ipv6_tentative_addresses().is_empty());
    assert!(receive(&mut s, now + Duration::from_secs(5), &echo_to(B6)).is_empty());
    // Without DAD (the default) an address is used at once, as before.
    let mut plain = new_b(now);
    plain
        .add_ipv6_address(Ipv6Cidr {
            address: B6,
            prefix_len: 64,
        })
        .unwrap();
    assert_eq!(plain.ipv6_addresses().len(), 2);
    assert!(plain.ipv6_tentative_addresses().is_empty());
}

fn mld_query(hop_limit: u8, group: Ipv6Addr) -> Vec<u8> {
    let q = Icmpv6Repr::Mld(MldRepr::Query {
        max_resp_code: 1000,
        mcast_addr: group,
        v2: None,
    });
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    icmp6(ROUTER_LL, all_nodes, hop_limit, &q)
}

#[test]
fn mld_queries_are_answered_with_a_current_state_report() {
    let now = Instant::from_secs(1);
    let mut s = new_b(now);
    s.set_ipv6_host(now, dad_only());
    let now = now + Duration::from_secs(3);
    let _ = run_to(&mut s, now);
    assert!(s.ipv6_tentative_addresses().is_empty());
    // A query forwarded from elsewhere (hop limit not 1) is ignored.
    let _ = receive(&mut s, now, &mld_query(64, Ipv6Addr::UNSPECIFIED));
    assert_eq!(s.poll_at(), None);
    // So is one for a group we are not in.
    let other = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 0x77);
    let _ = receive(&mut s, now, &mld_query(1, other));
    assert_eq!(s.poll_at(), None);
    // A general query: a report within the 1000 ms asked.
    let out = receive(&mut s, now, &mld_query(1, Ipv6Addr::UNSPECIFIED));
    let mut reports = out;
    let at = s.poll_at();
    if reports.is_empty() {
        let at = at.expect("a report is scheduled");
        assert!(at <= now + Duration::from_millis(1000));
        reports = poll(&mut s, at);
    }
    assert_eq!(reports.len(), 1);
    let (_, ip, p) = &reports[0];
    assert_eq!(ip.src, link_local(B_MAC).address, "link-local once valid");
    let Some(Icmpv6Repr::Mld(MldRepr::Report { records })) = icmp_of(ip, p) else {
        panic!("{p:?}");
    };
    let r: Vec<_> = records
        .iter()
        .map(|r| (r.record_type, r.mcast_addr))
        .collect();
    assert_eq!(
        r,
        vec![(
            record_type::MODE_IS_EXCLUDE,
            solicited_node(link_local(B_MAC).address)
        )]
    );
    assert_eq!(c(&s, "Icmp6", "InGroupMembQueries"), 3);
    assert_eq!(
        c(&s, "Icmp6", "OutMLDv2Reports"),
        3,
        "join twice, answer once"
    );
}

fn ra(lifetime: u16, valid: u32, preferred: u32, mtu: Option<u32>) -> Vec<u8> {
    ra_from(ROUTER_LL, 255, lifetime, valid, preferred, mtu)
}

fn ra_from(
    src: Ipv6Addr,
    hop_limit: u8,
    lifetime: u16,
    valid: u32,
    preferred: u32,
    mtu: Option<u32>,
) -> Vec<u8> {
    let mut opts = vec![0u8; 8 + 32 + 8];
    let mut at = NdiscOption::SourceLinkLayerAddr(&ROUTER_MAC.0)
        .emit(&mut opts)
        .unwrap();
    at += NdiscOption::PrefixInformation(PrefixInfo {
        prefix_len: 64,
        flags: prefix_flags::ON_LINK | prefix_flags::AUTONOMOUS,
        valid_lifetime: valid,
        preferred_lifetime: preferred,
        prefix: PREFIX,
    })
    .emit(&mut opts[at..])
    .unwrap();
    if let Some(m) = mtu {
        at += NdiscOption::Mtu(m).emit(&mut opts[at..]).unwrap();
    }
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
        hop_limit: 64,
        flags: 0,
        router_lifetime: lifetime,
        reachable_time: 0,
        retrans_time: 0,
        options: NdiscOptions::new_checked(&opts[..at]).unwrap(),
    });
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &src,
        &all_nodes,
        &mut Icmpv6Packet::new_unchecked(&mut b[..]),
    );
    frame_from(
        ROUTER_MAC,
        src,
        all_nodes,
        IpProtocol::ICMPV6,
        hop_limit,
        &b,
    )
}

#[test]
fn router_solicitations_at_start_up_stop_at_three_or_at_an_advertisement() {
    let now = Instant::from_secs(1);
    let mut s = new_b(now);
    s.set_ipv6_host(now, Ipv6HostConfig::host());
    let mut rs_times = Vec::new();
    let mut t = now;
    for _ in 0..50 {
        for (mac, ip, p) in poll(&mut s, t) {
            if let Some(Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit { options })) = icmp_of(&ip, &p)
            {
                assert_eq!(mac, MacAddr([0x33, 0x33, 0, 0, 0, 2]));
                assert_eq!(ip.dst, Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2));
                assert_eq!(ip.src, link_local(B_MAC).address);
                assert_eq!(ip.hop_limit, 255);
                assert_eq!(options.source_ll_addr(), Some(&B_MAC.0[..]));
                rs_times.push(t - now);
            }
        }
        match s.poll_at() {
            Some(n) if n > t => t = n,
            _ => break,
        }
    }
    // After the random start delay (at most 1 s) and the link-local
    // address's DAD (1 s), then every 4 s, 3 in all.
    assert_eq!(rs_times.len(), 3);
    assert!(rs_times[0] >= Duration::from_secs(1) && rs_times[0] <= Duration::from_secs(2));
    assert_eq!(rs_times[1] - rs_times[0], Duration::from_secs(4));
    assert_eq!(rs_times[2] - rs_times[1], Duration::from_secs(4));
    assert_eq!(c(&s, "Icmp6", "OutRouterSolicits"), 3);
    // An advertisement stops them early.
    let mut s = new_b(now);
    s.set_ipv6_host(now, Ipv6HostConfig::host());
    let _ = run_to(&mut s, now + Duration::from_millis(2100));
    assert_eq!(c(&s, "Icmp6", "OutRouterSolicits"), 1);
    let _ = receive(
        &mut s,
        now + Duration::from_millis(2100),
        &ra(1800, 3600, 1800, None),
    );
    let mut t = now + Duration::from_millis(2100);
    while let Some(n) = s.poll_at().filter(|&n| n <= now + Duration::from_secs(20)) {
        t = n.max(t);
        let _ = poll(&mut s, t);
        if s.poll_at() == Some(t) {
            break;
        }
    }
    assert_eq!(c(&s, "Icmp6", "OutRouterSolicits"), 1);
}

/// B as a host that took an advertisement, addresses ready.
fn configured_b() -> (Stack, Instant) {
    let now = Instant::from_secs(1);
    let mut s = new_b(now);
    s.set_ipv6_host(now, Ipv6HostConfig::host());
    let now = now + Duration::from_secs(3);
    let _ = run_to(&mut s, now);
    let _ = receive(&mut s, now, &ra(1800, 3600, 1800, Some(1400)));
    assert_eq!(s.ipv6_default_routers(), vec![ROUTER_LL]);
    assert_eq!(
        s.ipv6_tentative_addresses()
            .iter()
            .map(|c| c.address)
            .collect::<Vec<_>>(),
        vec![SLAAC_B],
        "the SLAAC address goes through DAD"
    );
    let now = now + Duration::from_secs(2);
    let _ = run_to(&mut s, now);
    assert!(s.ipv6_addresses().iter().any(|c| c.address == SLAAC_B));
    (s, now)
}

#[test]
fn an_advertisement_gives_a_default_router_an_on_link_prefix_an_mtu_and_slaac() {
    let (mut s, now) = configured_b();
    // Off-link: through the router (its MAC from the advertisement), from
    // the SLAAC address, fragmented at the advertised MTU.
    let h = s
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 5000, 0, 0))
        .unwrap();
    let far = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1);
    s.udp6_send_to(now, h, &[7u8; 2000], SocketAddrV6::new(far, 9, 0, 0))
        .unwrap();
    let out = poll(&mut s, now);
    assert_eq!(out.len(), 2);
    for (mac, ip, p) in &out {
        assert_eq!(*mac, ROUTER_MAC);
        assert_eq!((ip.src, ip.dst), (SLAAC_B, far));
        assert_eq!(ip.next_header, IpProtocol::IPV6_FRAG);
        assert!(40 + p.len() <= 1400);
        let _ = Ipv6FragmentRepr::parse(p).unwrap();
    }
    // TCP to the far host: the MSS fits the advertised MTU.
    let t = s
        .tcp_connect6(now, SocketAddrV6::new(far, 80, 0, 0), None)
        .unwrap();
    let out = poll(&mut s, now);
    let syn = out
        .iter()
        .find(|(_, ip, _)| ip.next_header == IpProtocol::Tcp)
        .expect("SYN");
    assert_eq!(syn.0, ROUTER_MAC);
    let opts = ustack_wire::tcp::TcpPacket::new_checked(&syn.2[..]).unwrap();
    let seg = ustack_wire::tcp::TcpRepr::parse(&opts, SLAAC_B, far, true).unwrap();
    assert_eq!(seg.max_seg_size, Some(1340));
    s.tcp_abort(t);
    // On-link: straight to the neighbour (a solicitation for it).
    let near = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x42);
    s.udp6_send_to(now, h, b"x", SocketAddrV6::new(near, 9, 0, 0))
        .unwrap();
    let out = poll(&mut s, now);
    match icmp_of(&out[0].1, &out[0].2) {
        Some(Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { target, .. })) => {
            assert_eq!(target, near)
        }
        other => panic!("{other:?}"),
    }
    // The router withdraws (lifetime 0): off-link is unreachable again.
    let _ = receive(&mut s, now, &ra(0, 3600, 1800, None));
    assert!(s.ipv6_default_routers().is_empty());
    assert_eq!(
        s.udp6_send_to(now, h, b"x", SocketAddrV6::new(far, 9, 0, 0)),
        Err(UdpError::NoRoute)
    );
}

#[test]
fn router_lifetime_expires() {
    let (mut s, now) = configured_b();
    let _ = receive(&mut s, now, &ra(1800, 3600, 1800, None));
    let _ = poll(&mut s, now + Duration::from_secs(1799));
    assert_eq!(s.ipv6_default_routers(), vec![ROUTER_LL]);
    let _ = poll(&mut s, now + Duration::from_secs(1800));
    assert!(s.ipv6_default_routers().is_empty());
}

#[test]
fn forged_or_unwanted_advertisements_are_ignored() {
    // Default configuration (a router, or a host that does not accept
    // advertisements): nothing changes.
    let now = Instant::from_secs(1);
    let mut s = new_b(now);
    let _ = poll(&mut s, now);
    let _ = receive(&mut s, now, &ra(1800, 3600, 1800, Some(1400)));
    assert!(s.ipv6_default_routers().is_empty());
    assert_eq!(s.ipv6_addresses().len(), 1);
    assert_eq!(c(&s, "Icmp6", "InRouterAdvertisements"), 1);
    // A host: not from a link-local source, or forwarded (hop limit not
    // 255): dropped.
    let mut s = new_b(now);
    s.set_ipv6_host(now, Ipv6HostConfig::host());
    let _ = poll(&mut s, now);
    let global = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    let _ = receive(&mut s, now, &ra_from(global, 255, 1800, 3600, 1800, None));
    let _ = receive(&mut s, now, &ra_from(ROUTER_LL, 64, 1800, 3600, 1800, None));
    assert!(s.ipv6_default_routers().is_empty());
    assert_eq!(c(&s, "Ndisc", "Invalid"), 2);
}

#[test]
fn slaac_lifetimes_follow_the_two_hour_rule() {
    let (mut s, now) = configured_b();
    let has = |s: &Stack| s.ipv6_addresses().iter().any(|c| c.address == SLAAC_B);
    // Valid 3600 s left: a forged 60 s does not shorten it (RFC 4862
    // 5.5.3 e: remaining <= 2 hours, ignore).
    let _ = receive(&mut s, now, &ra(1800, 60, 30, None));
    let _ = poll(&mut s, now + Duration::from_secs(3000));
    assert!(has(&s));
    // Raised to 10000 s, then a 60 s advertisement cuts it to 2 hours.
    let t = now + Duration::from_secs(3000);
    let _ = receive(&mut s, t, &ra(1800, 10_000, 5000, None));
    let _ = receive(&mut s, t, &ra(1800, 60, 30, None));
    assert!(s.ipv6_address_deprecated(t + Duration::from_secs(31), SLAAC_B));
    let _ = poll(&mut s, t + Duration::from_secs(7199));
    assert!(has(&s));
    let _ = poll(&mut s, t + Duration::from_secs(7200));
    assert!(!has(&s), "invalid after two hours");
    // Preferred above valid: the option is ignored (no new address).
    let mut s2 = new_b(now);
    s2.set_ipv6_host(now, Ipv6HostConfig::host());
    let _ = poll(&mut s2, now);
    let _ = receive(&mut s2, now, &ra(1800, 100, 200, None));
    assert!(s2
        .ipv6_tentative_addresses()
        .iter()
        .all(|c| c.address != SLAAC_B));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Mutated advertisements, solicitations, MLD queries: a host never
        /// panics, keeps its lists bounded, and every frame it sends parses.
        #[test]
        fn mutated_neighbour_discovery_never_panics(
            picks in prop::collection::vec((0usize..4, prop::collection::vec((any::<u16>(), any::<u8>()), 0..4), any::<u16>()), 1..16)
        ) {
            let now0 = Instant::from_secs(1);
            let g = solicited_node(B6);
            let probe = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target: B6,
                options: NdiscOptions::default(),
            });
            let corpus = [
                ra(1800, 3600, 1800, Some(1400)),
                ra(0, 0, 0, None),
                mld_query(1, Ipv6Addr::UNSPECIFIED),
                icmp6(Ipv6Addr::UNSPECIFIED, g, 255, &probe),
            ];
            let mut s = new_b(now0);
            s.set_ipv6_host(now0, Ipv6HostConfig::host());
            s.add_ipv6_address(Ipv6Cidr { address: B6, prefix_len: 64 }).unwrap();
            let mut now = now0;
            for (i, muts, step) in picks {
                let mut f = corpus[i].clone();
                for (at, v) in muts {
                    let at = 14 + usize::from(at) % (f.len() - 14);
                    f[at] = v;
                }
                // Keep the ICMPv6 checksum right so mutations reach the
                // parsers behind it.
                if let Ok(p) = Ipv6Packet::new_checked(&f[14..]) {
                    let (src, dst) = (p.src_addr(), p.dst_addr());
                    if p.next_header() == IpProtocol::ICMPV6 && f.len() >= 62 {
                        Icmpv6Packet::new_unchecked(&mut f[54..]).fill_checksum(&src, &dst);
                    }
                }
                let mut out = Vec::new();
                s.receive(now, &f, &mut |x| out.push(x.to_vec()));
                now += Duration::from_millis(u64::from(step) * 50);
                s.poll(now, &mut |x| out.push(x.to_vec()));
                prop_assert!(s.ipv6_default_routers().len() <= 8);
                prop_assert!(s.ipv6_addresses().len() + s.ipv6_tentative_addresses().len() <= 16);
                for (_, ip, p) in sent(&out) {
                    if ip.next_header == IpProtocol::ICMPV6 || ip.next_header == IpProtocol::HOP_BY_HOP {
                        prop_assert!(icmp_of(&ip, &p).is_some(), "unparsable {:?}", p);
                    }
                }
            }
        }
    }
}

#[test]
fn a_deprecated_slaac_address_is_no_longer_chosen_as_source() {
    let (mut s, now) = configured_b();
    s.add_ipv6_address(Ipv6Cidr {
        address: B6,
        prefix_len: 64,
    })
    .unwrap();
    let _ = receive(&mut s, now, &ra(9000, 3600, 100, None));
    let now = now + Duration::from_secs(1);
    let _ = poll(&mut s, now);
    assert!(s.ipv6_addresses().iter().any(|c| c.address == B6));
    let h = s
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 5000, 0, 0))
        .unwrap();
    let far = SocketAddrV6::new(Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1), 9, 0, 0);
    let src_of = |s: &mut Stack, t: Instant| {
        s.udp6_send_to(t, h, b"x", far).unwrap();
        let out = poll(s, t);
        out.iter()
            .find(|(_, ip, _)| ip.next_header == IpProtocol::Udp)
            .map(|(_, ip, _)| ip.src)
    };
    assert_eq!(src_of(&mut s, now), Some(SLAAC_B));
    assert!(!s.ipv6_address_deprecated(now, SLAAC_B));
    // Preferred lifetime over (100 s after the advertisement): still
    // valid, but the other global address is chosen.
    let t = now + Duration::from_secs(100);
    assert!(s.poll_at().is_some_and(|p| p <= t));
    let _ = poll(&mut s, t);
    assert_eq!(src_of(&mut s, t), Some(B6));
    assert!(s.ipv6_address_deprecated(t, SLAAC_B));
    assert!(s.ipv6_addresses().iter().any(|c| c.address == SLAAC_B));
}

/// A Redirect from `src` (hop limit `hop_limit`) to B's SLAAC address:
/// packets for `dest` should go to `target`, whose MAC is `tll`.
fn redirect_from(
    src: Ipv6Addr,
    hop_limit: u8,
    target: Ipv6Addr,
    dest: Ipv6Addr,
    tll: Option<MacAddr>,
) -> Vec<u8> {
    let mut opts = vec![0u8; 8];
    let n = match tll {
        Some(m) => NdiscOption::TargetLinkLayerAddr(&m.0)
            .emit(&mut opts)
            .unwrap(),
        None => 0,
    };
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::Redirect {
        target,
        dest,
        options: NdiscOptions::new_checked(&opts[..n]).unwrap(),
    });
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&src, &SLAAC_B, &mut Icmpv6Packet::new_unchecked(&mut b[..]));
    frame_from(ROUTER_MAC, src, SLAAC_B, IpProtocol::ICMPV6, hop_limit, &b)
}

/// Where B's datagram to `dst` goes: (Ethernet destination, IP
/// destination), or the neighbour solicitation's target.
fn first_hop(s: &mut Stack, now: Instant, dst: Ipv6Addr) -> (MacAddr, Ipv6Addr) {
    let h = s
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
        .unwrap();
    s.udp6_send_to(now, h, b"x", SocketAddrV6::new(dst, 9, 0, 0))
        .unwrap();
    let out = poll(s, now);
    s.udp6_close(h);
    let (mac, ip, p) = out.first().expect("a frame").clone();
    match icmp_of(&ip, &p) {
        Some(Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { target, .. })) => (mac, target),
        _ => (mac, ip.dst),
    }
}

const FAR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1);
const FAR2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 2);
const ROUTER2_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);
const ROUTER2_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xfd]);
const FAR2_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xfc]);

#[test]
fn a_redirect_from_the_first_hop_router_sends_the_destination_elsewhere() {
    let (mut s, now) = configured_b();
    assert_eq!(first_hop(&mut s, now, FAR), (ROUTER_MAC, FAR));
    // RFC 4861 8.3: to a better router (a link-local target), whose MAC the
    // Redirect carries; other destinations keep the default router.
    let _ = receive(
        &mut s,
        now,
        &redirect_from(ROUTER_LL, 255, ROUTER2_LL, FAR, Some(ROUTER2_MAC)),
    );
    assert_eq!(c(&s, "Icmp6", "InRedirects"), 1);
    assert_eq!(first_hop(&mut s, now, FAR), (ROUTER2_MAC, FAR));
    assert_eq!(first_hop(&mut s, now, FAR2), (ROUTER_MAC, FAR2));
    // To the destination itself (target = destination: on-link).
    let _ = receive(
        &mut s,
        now,
        &redirect_from(ROUTER_LL, 255, FAR2, FAR2, Some(FAR2_MAC)),
    );
    assert_eq!(first_hop(&mut s, now, FAR2), (FAR2_MAC, FAR2));
    // Without a target link-layer address: the target is solicited first.
    let far3 = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 3);
    let _ = receive(
        &mut s,
        now,
        &redirect_from(ROUTER_LL, 255, far3, far3, None),
    );
    let (mac, target) = first_hop(&mut s, now, far3);
    assert_eq!(target, far3, "a solicitation for the redirected target");
    assert_eq!(mac, MacAddr([0x33, 0x33, 0xff, 0, 0, 3]));
    assert_eq!(c(&s, "Ndisc", "Invalid"), 0);
    // The entries last 10 minutes (FAR2's had no renewal), then the default
    // router is the first hop again.
    let before = now + Duration::from_secs(599);
    let _ = run_to(&mut s, before);
    let (mac, hop) = first_hop(&mut s, before, FAR);
    assert!(
        mac == ROUTER2_MAC || hop == ROUTER2_LL,
        "still redirected at 599 s: {mac:?} {hop}"
    );
    let later = now + Duration::from_secs(600);
    let _ = run_to(&mut s, later);
    // (A new advertisement refreshes the router's neighbour entry, stale by
    // now, so that the frames below go out at once.)
    let _ = receive(&mut s, later, &ra(1800, 3600, 1800, None));
    assert_eq!(first_hop(&mut s, later, FAR), (ROUTER_MAC, FAR));
    assert_eq!(first_hop(&mut s, later, FAR2), (ROUTER_MAC, FAR2));
}

#[test]
fn redirects_go_with_their_router_and_the_cache_is_bounded() {
    let (mut s, now) = configured_b();
    // 100 destinations redirected: at most 64 kept, the oldest go first.
    let dest = |i: u16| Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, i + 1);
    for i in 0..100 {
        let _ = receive(
            &mut s,
            now,
            &redirect_from(ROUTER_LL, 255, ROUTER2_LL, dest(i), Some(ROUTER2_MAC)),
        );
    }
    assert_eq!(first_hop(&mut s, now, dest(99)), (ROUTER2_MAC, dest(99)));
    assert_eq!(first_hop(&mut s, now, dest(36)), (ROUTER2_MAC, dest(36)));
    assert_eq!(first_hop(&mut s, now, dest(35)), (ROUTER_MAC, dest(35)));
    assert_eq!(first_hop(&mut s, now, dest(0)), (ROUTER_MAC, dest(0)));
    // The router withdraws: its redirects go with it.
    let _ = receive(&mut s, now, &ra(0, 3600, 1800, None));
    let _ = poll(&mut s, now);
    let h = s
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
        .unwrap();
    assert_eq!(
        s.udp6_send_to(now, h, b"x", SocketAddrV6::new(dest(99), 9, 0, 0)),
        Err(UdpError::NoRoute)
    );
}

#[test]
fn invalid_or_foreign_redirects_change_nothing() {
    let (mut s, now) = configured_b();
    let tll = Some(ROUTER2_MAC);
    let global = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
    let group = Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 0, 1);
    // RFC 4861 8.1, each counted invalid: not from a link-local source; a
    // hop limit below 255 (forwarded: from off the link); a multicast
    // destination; a global target that is not the destination.
    for f in [
        redirect_from(global, 255, ROUTER2_LL, FAR, tll),
        redirect_from(ROUTER_LL, 64, ROUTER2_LL, FAR, tll),
        redirect_from(ROUTER_LL, 255, ROUTER2_LL, group, tll),
        redirect_from(ROUTER_LL, 255, FAR2, FAR, tll),
    ] {
        let _ = receive(&mut s, now, &f);
    }
    assert_eq!(c(&s, "Ndisc", "Invalid"), 4);
    // Valid, but not from our first hop for the destination: ignored.
    let _ = receive(
        &mut s,
        now,
        &redirect_from(ROUTER2_LL, 255, ROUTER2_LL, FAR, tll),
    );
    // For an on-link destination (its first hop is itself).
    let near = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x42);
    let _ = receive(
        &mut s,
        now,
        &redirect_from(ROUTER_LL, 255, ROUTER2_LL, near, tll),
    );
    assert_eq!(c(&s, "Icmp6", "InRedirects"), 6);
    assert_eq!(first_hop(&mut s, now, FAR), (ROUTER_MAC, FAR));
    assert_eq!(first_hop(&mut s, now, near).1, near);
    // A stack that is no host (the default: a router, as `run`'s gateway)
    // has no first-hop router: a Redirect changes nothing.
    let mut r = new_b(now);
    let _ = poll(&mut r, now);
    let _ = receive(
        &mut r,
        now,
        &redirect_from(ROUTER_LL, 255, ROUTER2_LL, FAR, tll),
    );
    let h = r
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
        .unwrap();
    assert_eq!(
        r.udp6_send_to(now, h, b"x", SocketAddrV6::new(FAR, 9, 0, 0)),
        Err(UdpError::NoRoute)
    );
}

/// A TCP segment from `FAR` (through the router) to B's SLAAC address.
fn tcp_from_far(seg: &ustack_wire::tcp::TcpRepr) -> Vec<u8> {
    let mut b = vec![0u8; seg.buffer_len()];
    seg.emit(
        &mut ustack_wire::tcp::TcpPacket::new_unchecked(&mut b[..]),
        FAR,
        SLAAC_B,
        true,
    );
    frame_from(ROUTER_MAC, FAR, SLAAC_B, IpProtocol::Tcp, 64, &b)
}

/// The TCP segments among `out`.
fn tcp_segments(out: &[(MacAddr, Ipv6Repr, Vec<u8>)]) -> Vec<ustack_wire::tcp::TcpRepr<'static>> {
    out.iter()
        .filter(|(_, ip, _)| ip.next_header == IpProtocol::Tcp)
        .map(|(_, ip, p)| {
            let p: &'static [u8] = Box::leak(p.clone().into_boxed_slice());
            let pkt = ustack_wire::tcp::TcpPacket::new_checked(p).unwrap();
            ustack_wire::tcp::TcpRepr::parse(&pkt, ip.src, ip.dst, true).unwrap()
        })
        .collect()
}

/// Polls `s` at each of its deadlines (for at most an hour of virtual
/// time) until connection `h` is closed; checks it failed with
/// EHOSTUNREACH and returns (polls, virtual time taken).
fn run_until_unreachable(
    s: &mut Stack,
    h: ustack_core::TcpHandle,
    start: Instant,
) -> (usize, Duration) {
    use ustack_core::tcp::{State, TcpError};
    let closed = |s: &Stack| s.tcp_status(h).map_or(true, |st| st.state == State::Closed);
    let mut t = start;
    let mut polls = 0;
    while !closed(s) && t < start + Duration::from_secs(3600) && polls < 100_000 {
        match s.poll_at() {
            Some(at) => t = at.max(t),
            None => break,
        }
        let _ = poll(s, t);
        polls += 1;
    }
    let took = t - start;
    assert_eq!(
        s.tcp_recv(h, &mut [0u8; 8]),
        Err(TcpError::HostUnreachable),
        "after {polls} polls and {took:?}"
    );
    (polls, took)
}

#[test]
fn a_connection_whose_route_goes_away_times_out_instead_of_retrying_every_10_ms() {
    use ustack_core::tcp::State;
    use ustack_wire::tcp::{SeqNum, TcpRepr};
    // An established connection to a host behind the default router; the
    // router withdraws and the connection has data to send. Each segment
    // the route refuses used to be retried 10 ms later, for ever: no
    // timeout, 100 wake-ups a second. Linux keeps its timers (the probe
    // timer here, nothing being in flight) and gives up after
    // tcp_retries2 probes, reporting the route's error.
    let (mut s, now) = configured_b();
    let h = s
        .tcp_connect6(now, SocketAddrV6::new(FAR, 80, 0, 0), None)
        .unwrap();
    let syn = tcp_segments(&poll(&mut s, now))
        .into_iter()
        .find(|r| r.syn)
        .expect("SYN");
    let now = now + Duration::from_millis(10);
    let synack = TcpRepr {
        src_port: 80,
        dst_port: syn.src_port,
        seq: SeqNum(5000),
        ack: Some(syn.seq + 1u32),
        syn: true,
        window: 65535,
        max_seg_size: Some(1200),
        ..TcpRepr::default()
    };
    let _ = receive(&mut s, now, &tcp_from_far(&synack));
    assert_eq!(s.tcp_status(h).unwrap().state, State::Established);
    let _ = receive(&mut s, now, &ra(0, 3600, 1800, None));
    assert!(s.ipv6_default_routers().is_empty());
    assert_eq!(s.tcp_send(h, &[1u8; 1000]), Ok(1000));
    let before = c(&s, "Ip6", "OutNoRoutes");
    let (polls, took) = run_until_unreachable(&mut s, h, now);
    // 15 probes backed off from 200 ms up to the 120 s cap: about 16
    // minutes, as Linux.
    assert!(
        took > Duration::from_secs(600) && took < Duration::from_secs(1800),
        "{took:?}"
    );
    assert!(polls < 100, "{polls} wake-ups in {took:?}");
    let tries = c(&s, "Ip6", "OutNoRoutes") - before;
    assert!((10..100).contains(&tries), "{tries} refused segments");

    // A SYN the route refuses (the router withdrew between connect and
    // the SYN): sent again by the backed-off retransmission timer and
    // given up after tcp_syn_retries (6: about 2 minutes, as Linux's
    // `tcp_connect`, which counts the SYN as sent whatever its transmit
    // returned), not retried every 10 ms.
    let (mut s, now) = configured_b();
    let h = s
        .tcp_connect6(now, SocketAddrV6::new(FAR, 80, 0, 0), None)
        .unwrap();
    let _ = receive(&mut s, now, &ra(0, 3600, 1800, None));
    let (polls, took) = run_until_unreachable(&mut s, h, now);
    assert!(
        took > Duration::from_secs(60) && took < Duration::from_secs(300),
        "{took:?}"
    );
    assert!(polls < 30, "{polls} wake-ups in {took:?}");
    assert_eq!(c(&s, "Tcp", "OutSegs"), 0, "a SYN counted as sent");
}
