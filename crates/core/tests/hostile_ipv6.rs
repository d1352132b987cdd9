//! Issue 15, "hostile IPv6 input": one suite that drives a `Stack` with
//! each hostile case — overlapping and tiny fragments, fragment floods,
//! type-0 routing headers, long extension-header chains, unknown options,
//! Neighbor Discovery from off the link or malformed or fragmented, forged
//! Router Advertisements, solicitation floods, error floods — both as
//! `serve` runs it (static addresses, no host behaviour) and in IPv6 host
//! mode (`Stack::set_ipv6_host`) where the mode matters. Every case checks
//! that nothing panics, what the stack does (drops, answers with the
//! ICMPv6 error the RFCs ask for, or ignores), and exactly which counters
//! moved: `assert_moved` compares every counter of the stack before and
//! after, so a case that moves an unexpected counter, or none, fails.

mod stack_util;

use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddrV6};

use stack_util::*;
use ustack_core::time::{Duration, Instant};
use ustack_core::{
    link_local, AddressServices, ArpLimits, Config, Ipv6HostConfig, RouterConfig, Stack, UdpError,
    ALL_NODES, MAX_IPV6_ADDRESSES,
};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{DstUnreachable, Icmpv6Packet, Icmpv6Repr, ParamProblem, TimeExceeded};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Cidr, Ipv6Packet, Ipv6Repr};
use ustack_wire::ipv6ext::Ipv6FragmentRepr;
use ustack_wire::ndisc::{na_flags, NdiscOption, NdiscOptions, NdiscRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9);
const PEER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);
const ROUTER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x77]);
const PORT: u16 = 9;

const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const DEST_OPTS: u8 = 60;
const UDP: u8 = 17;
const ICMPV6: u8 = 58;

/// How the stack under test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As `ustack serve` runs it: static addresses, advertisements ignored.
    Serve,
    /// An IPv6 host (`Ipv6HostConfig::host()`: DAD, RAs accepted, SLAAC).
    Host,
}

const MODES: [Mode; 2] = [Mode::Serve, Mode::Host];

fn router_ll() -> Ipv6Addr {
    link_local(ROUTER_MAC).address
}

// ----------------------------------------------------------------------
// The stack under test
// ----------------------------------------------------------------------

fn stack(mode: Mode) -> (Stack, Instant) {
    stack_with(mode, |_| {})
}

/// Stack B with fd00::2/64 in `mode`, its start-up (DAD, MLD reports,
/// router solicitations) run to the end, that knows the peer's MAC.
fn stack_with(mode: Mode, cfg: impl FnOnce(&mut Config)) -> (Stack, Instant) {
    let mut now = Instant::from_secs(1);
    let mut conf = config(B_MAC, B_IP, 2);
    cfg(&mut conf);
    let mut s = Stack::new(conf, now);
    s.add_ipv6_address(Ipv6Cidr {
        address: B6,
        prefix_len: 64,
    })
    .unwrap();
    if mode == Mode::Host {
        s.set_ipv6_host(now, Ipv6HostConfig::host());
    }
    for _ in 0..200 {
        s.poll(now, &mut |_| {});
        now += Duration::from_millis(100);
    }
    s.poll(now, &mut |_| {});
    assert!(s.ipv6_addresses().iter().any(|c| c.address == B6));
    assert!(s.ipv6_tentative_addresses().is_empty());
    introduce_peer(&mut s, now);
    (s, now)
}

/// A valid solicitation from the peer with its link-layer address: B
/// learns the MAC (and answers).
fn introduce_peer(s: &mut Stack, now: Instant) {
    let g = solicited_node(B6);
    let ns = ns_bytes(PEER6, g, B6, Some(PEER_MAC));
    assert_eq!(rx(s, now, &frame(PEER6, g, ICMPV6, 255, &ns)).len(), 1);
    assert_eq!(s.neighbour6(now, PEER6), Some(PEER_MAC));
}

// ----------------------------------------------------------------------
// Counters
// ----------------------------------------------------------------------

type Snapshot = Vec<(&'static str, &'static str, u64)>;

fn snap(s: &Stack) -> Snapshot {
    s.counters().iter().collect()
}

/// Moved by every frame in or out, whatever it is: not listed by cases.
const PER_FRAME: [&str; 6] = [
    "Link:InFrames",
    "Link:OutFrames",
    "Ip6:InReceives",
    "Ip6:OutRequests",
    "Ip6:InMcastPkts",
    "Ip6:OutMcastPkts",
];

/// Every counter (but `PER_FRAME`) that moved since `before`, by how much.
fn moved(before: &Snapshot, s: &Stack) -> BTreeMap<String, u64> {
    before
        .iter()
        .zip(snap(s))
        .filter(|(b, a)| a.2 != b.2)
        .map(|(b, a)| (format!("{}:{}", a.0, a.1), a.2 - b.2))
        .filter(|(n, _)| !PER_FRAME.contains(&n.as_str()))
        .collect()
}

#[track_caller]
fn assert_moved(before: &Snapshot, s: &Stack, expected: &[(&str, u64)]) {
    let want: BTreeMap<String, u64> = expected
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    assert_eq!(moved(before, s), want);
}

/// `a` then `b`.
fn and(a: &[(&'static str, u64)], b: &[(&'static str, u64)]) -> Vec<(&'static str, u64)> {
    a.iter().chain(b).copied().collect()
}

/// A Parameter Problem sent.
const PP_SENT: [(&str, u64); 2] = [("Icmp6:OutMsgs", 1), ("Icmp6:OutParmProblems", 1)];
/// A UDP datagram delivered to a socket.
const UDP_DELIVERED: [(&str, u64); 2] = [("Ip6:InDelivers", 1), ("Udp6:InDatagrams", 1)];

// ----------------------------------------------------------------------
// Frames
// ----------------------------------------------------------------------

/// An IPv6 frame from the peer's MAC: `payload` after the fixed header.
fn frame(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + payload.len()];
    let dst_mac = if dst.is_multicast() {
        let o = dst.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    } else {
        B_MAC
    };
    let src_mac = if src == router_ll() {
        ROUTER_MAC
    } else {
        PEER_MAC
    };
    EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        src,
        dst,
        next_header: IpProtocol::from(next_header),
        payload_len: payload.len(),
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    f[54..].copy_from_slice(payload);
    f
}

/// From the peer to B, hop limit 64.
fn to_b(next_header: u8, payload: &[u8]) -> Vec<u8> {
    frame(PEER6, B6, next_header, 64, payload)
}

/// What B sent: (Ethernet destination, IPv6 header, payload).
type Sent = Vec<(MacAddr, Ipv6Repr, Vec<u8>)>;

fn sent(out: &[Vec<u8>]) -> Sent {
    out.iter()
        .filter_map(|f| {
            let eth = EthernetFrame::new_checked(&f[..]).ok()?;
            let e = EthernetRepr::parse(&eth).ok()?;
            if e.ethertype != EtherType::Ipv6 {
                return None;
            }
            let p = Ipv6Packet::new_checked(&f[14..]).ok()?;
            let r = Ipv6Repr::parse(&p).ok()?;
            Some((e.dst, r, p.payload().to_vec()))
        })
        .collect()
}

/// Receive one frame and poll: what went out.
fn rx(s: &mut Stack, now: Instant, f: &[u8]) -> Sent {
    let mut out = Vec::new();
    s.receive(now, f, &mut |x| out.push(x.to_vec()));
    s.poll(now, &mut |x| out.push(x.to_vec()));
    sent(&out)
}

/// Poll every 100 ms from `from` to `to`, whatever goes out.
fn settle(s: &mut Stack, from: Instant, to: Instant) {
    let mut t = from;
    while t < to {
        t += Duration::from_millis(100);
        s.poll(t, &mut |_| {});
    }
}

fn poll(s: &mut Stack, now: Instant) -> Sent {
    let mut out = Vec::new();
    s.poll(now, &mut |x| out.push(x.to_vec()));
    sent(&out)
}

/// The one Parameter Problem in `out`, to the peer: (code, pointer).
#[track_caller]
fn param_problem(out: &Sent) -> (ParamProblem, u32) {
    assert_eq!(out.len(), 1, "one frame expected: {out:?}");
    let (_, ip, body) = &out[0];
    assert_eq!(ip.dst, PEER6);
    let p = Icmpv6Packet::new_checked(&body[..]).unwrap();
    match Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap() {
        Icmpv6Repr::ParamProblem {
            reason, pointer, ..
        } => (reason, pointer),
        other => panic!("expected a parameter problem, got {other:?}"),
    }
}

fn icmp6_bytes(src: Ipv6Addr, dst: Ipv6Addr, repr: &Icmpv6Repr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(&mut b[..]));
    b
}

/// Recompute the ICMPv6 checksum of `b` after an edit.
fn fix_icmp6(src: Ipv6Addr, dst: Ipv6Addr, b: &mut [u8]) {
    Icmpv6Packet::new_unchecked(&mut b[..]).fill_checksum(&src, &dst);
}

fn udp_bytes(src: Ipv6Addr, dst: Ipv6Addr, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8 + data.len()];
    b[8..].copy_from_slice(data);
    UdpRepr {
        src_port: 4000,
        dst_port: dport,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut b[..]),
        src,
        dst,
        data.len(),
        true,
    );
    b
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// An 8-byte Destination Options (or Hop-by-Hop) header holding one
/// option of type `t` with 4 bytes of data.
fn opts_header(next: u8, t: u8) -> Vec<u8> {
    vec![next, 0, t, 4, 0, 0, 0, 0]
}

/// An 8-byte options header of padding only (PadN).
fn pad_header(next: u8) -> Vec<u8> {
    opts_header(next, 1)
}

/// A type-0 Routing header (RFC 2460, deprecated by RFC 5095) with one
/// address and `segments_left`.
fn rh0(next: u8, segments_left: u8) -> Vec<u8> {
    let mut h = vec![next, 2, 0, segments_left, 0, 0, 0, 0];
    h.extend_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x55).octets());
    h
}

/// A Fragment header and `chunk`.
fn frag(ident: u32, offset: usize, more: bool, next: u8, chunk: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 8];
    Ipv6FragmentRepr {
        next_header: IpProtocol::from(next),
        frag_offset: offset as u16,
        more_frags: more,
        ident,
    }
    .emit(&mut p)
    .unwrap();
    p.extend_from_slice(chunk);
    p
}

/// A fragment from the peer to B.
fn frag_to_b(ident: u32, offset: usize, more: bool, next: u8, chunk: &[u8]) -> Vec<u8> {
    to_b(44, &frag(ident, offset, more, next, chunk))
}

/// A link-layer address option: source (type 1) or target (type 2).
fn ll_option(source: bool, mac: MacAddr) -> [u8; 8] {
    let mut o = [0u8; 8];
    let opt = if source {
        NdiscOption::SourceLinkLayerAddr(&mac.0)
    } else {
        NdiscOption::TargetLinkLayerAddr(&mac.0)
    };
    opt.emit(&mut o).unwrap();
    o
}

fn ns_bytes(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, sll: Option<MacAddr>) -> Vec<u8> {
    let o = sll.map(|m| ll_option(true, m));
    let options = match &o {
        Some(o) => NdiscOptions::new_checked(o).unwrap(),
        None => NdiscOptions::default(),
    };
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit { target, options });
    icmp6_bytes(src, dst, &repr)
}

/// The five Neighbor Discovery messages as a hostile peer could send them:
/// (name, source, destination, ICMPv6 message, its `In*` counter).
fn ndp_messages() -> Vec<(&'static str, Ipv6Addr, Ipv6Addr, Vec<u8>, &'static str)> {
    let sll = ll_option(true, PEER_MAC);
    let tll = ll_option(false, PEER_MAC);
    let rsll = ll_option(true, ROUTER_MAC);
    let g = solicited_node(B6);
    let ns = ns_bytes(PEER6, g, B6, Some(PEER_MAC));
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: na_flags::SOLICITED | na_flags::OVERRIDE,
        target: PEER6,
        options: NdiscOptions::new_checked(&tll).unwrap(),
    });
    let rs = Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit {
        options: NdiscOptions::new_checked(&sll).unwrap(),
    });
    let r = router_ll();
    let redirect = Icmpv6Repr::Ndisc(NdiscRepr::Redirect {
        target: r,
        dest: Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 1),
        options: NdiscOptions::default(),
    });
    vec![
        ("NS", PEER6, g, ns, "Icmp6:InNeighborSolicits"),
        (
            "NA",
            PEER6,
            B6,
            icmp6_bytes(PEER6, B6, &na),
            "Icmp6:InNeighborAdvertisements",
        ),
        (
            "RS",
            PEER6,
            B6,
            icmp6_bytes(PEER6, B6, &rs),
            "Icmp6:InRouterSolicits",
        ),
        (
            "RA",
            r,
            ALL_NODES,
            ra_bytes(r, &rsll, 1800, &[0x2001, 0xdb8, 1], None),
            "Icmp6:InRouterAdvertisements",
        ),
        (
            "Redirect",
            r,
            B6,
            icmp6_bytes(r, B6, &redirect),
            "Icmp6:InRedirects",
        ),
    ]
}

/// A Router Advertisement from `src` to all-nodes: lifetime, the source
/// link-layer option `sll`, one on-link autonomous /64 `prefix` (its first
/// three groups), and an MTU option.
fn ra_bytes(
    src: Ipv6Addr,
    sll: &[u8],
    lifetime: u16,
    prefix: &[u16; 3],
    mtu: Option<u32>,
) -> Vec<u8> {
    let mut body = vec![134, 0, 0, 0, 64, 0];
    body.extend_from_slice(&lifetime.to_be_bytes());
    body.extend_from_slice(&[0; 8]); // reachable, retrans
    body.extend_from_slice(sll);
    body.extend_from_slice(&[3, 4, 64, 0xc0]); // prefix: on-link, autonomous
    body.extend_from_slice(&86_400u32.to_be_bytes());
    body.extend_from_slice(&14_400u32.to_be_bytes());
    body.extend_from_slice(&[0; 4]);
    let p = Ipv6Addr::new(prefix[0], prefix[1], prefix[2], 0, 0, 0, 0, 0);
    body.extend_from_slice(&p.octets());
    if let Some(m) = mtu {
        body.extend_from_slice(&[5, 1, 0, 0]);
        body.extend_from_slice(&m.to_be_bytes());
    }
    fix_icmp6(src, ALL_NODES, &mut body);
    body
}

// ----------------------------------------------------------------------
// Fragments
// ----------------------------------------------------------------------

#[test]
fn overlapping_fragments_drop_the_whole_datagram_and_its_later_fragments() {
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let h = s.udp6_bind(SocketAddrV6::new(B6, PORT, 0, 0)).unwrap();
        let udp = udp_bytes(PEER6, B6, PORT, &pattern(40));
        // [0, 16), then [8, 24): RFC 5722, "the entire datagram (and any
        // constituent fragments, including those not yet received) MUST be
        // silently discarded" — counted once, as Linux counts it.
        let b = snap(&s);
        assert!(rx(&mut s, now, &frag_to_b(7, 0, true, UDP, &udp[..16])).is_empty());
        assert_moved(&b, &s, &[("Ip6:ReasmReqds", 1)]);
        let b = snap(&s);
        assert!(rx(&mut s, now, &frag_to_b(7, 8, true, UDP, &udp[8..24])).is_empty());
        assert_moved(&b, &s, &[("Ip6:ReasmReqds", 1), ("Ip6:ReasmFails", 1)]);
        // The fragments that would complete it, and the first one again,
        // are swallowed: nothing is delivered, nothing more fails.
        let b = snap(&s);
        assert!(rx(&mut s, now, &frag_to_b(7, 16, false, UDP, &udp[16..])).is_empty());
        assert!(rx(&mut s, now, &frag_to_b(7, 0, true, UDP, &udp[..16])).is_empty());
        assert!(rx(&mut s, now, &frag_to_b(7, 8, true, UDP, &udp[8..16])).is_empty());
        assert_moved(&b, &s, &[("Ip6:ReasmReqds", 3)]);
        let mut buf = [0u8; 64];
        assert_eq!(s.udp6_recv_from(h, &mut buf), Err(UdpError::WouldBlock));
        // The dead datagram goes at the timeout without a Time Exceeded and
        // without counting a second failure.
        let b = snap(&s);
        assert!(poll(&mut s, now + Duration::from_secs(60)).is_empty());
        assert_moved(&b, &s, &[]);
        assert_eq!(s.reassembly_datagrams6(), 0);
        assert_eq!(s.reassembly_memory6(), 0);
    }
}

#[test]
fn fragments_that_disagree_on_the_end_drop_the_datagram() {
    // Two last fragments with different ends, or a fragment past the end
    // a last one gave: the datagram cannot be built (RFC 8200 4.5); it
    // dies at once, counted once.
    let (mut s, now) = stack(Mode::Serve);
    let udp = udp_bytes(PEER6, B6, PORT, &pattern(40));
    let cases: [[(usize, bool, &[u8]); 2]; 2] = [
        [(16, false, &udp[16..24]), (24, false, &udp[24..40])],
        [(16, false, &udp[16..32]), (32, true, &udp[32..40])],
    ];
    for (i, pieces) in cases.iter().enumerate() {
        let ident = 20 + i as u32;
        let b = snap(&s);
        for &(off, more, chunk) in pieces {
            assert!(rx(&mut s, now, &frag_to_b(ident, off, more, UDP, chunk)).is_empty());
        }
        // The first fragment comes too late to make anything of it.
        assert!(rx(&mut s, now, &frag_to_b(ident, 0, true, UDP, &udp[..16])).is_empty());
        assert_moved(&b, &s, &[("Ip6:ReasmReqds", 3), ("Ip6:ReasmFails", 1)]);
    }
    let b = snap(&s);
    assert!(poll(&mut s, now + Duration::from_secs(60)).is_empty());
    assert_moved(&b, &s, &[]);
    assert_eq!(s.reassembly_memory6(), 0);
}

#[test]
fn a_fragment_cannot_rewrite_bytes_already_received() {
    // The attack overlaps exist for: a later fragment rewriting the
    // transport header a filter already looked at. A fragment with the same
    // range is a duplicate (RFC 8200 4.5 allows dropping exact duplicates
    // and keeping the datagram; Linux `IPFRAG_DUP` the same): the first
    // copy's bytes win. Any other overlap kills the datagram (above).
    let (mut s, now) = stack(Mode::Serve);
    let h = s.udp6_bind(SocketAddrV6::new(B6, PORT, 0, 0)).unwrap();
    let udp = udp_bytes(PEER6, B6, PORT, &pattern(40));
    let mut forged = udp[..24].to_vec();
    forged[2..4].copy_from_slice(&7777u16.to_be_bytes()); // another port
    let b = snap(&s);
    assert!(rx(&mut s, now, &frag_to_b(8, 0, true, UDP, &udp[..24])).is_empty());
    assert!(rx(&mut s, now, &frag_to_b(8, 0, true, UDP, &forged)).is_empty());
    assert!(rx(&mut s, now, &frag_to_b(8, 24, false, UDP, &udp[24..])).is_empty());
    assert_moved(
        &b,
        &s,
        &and(
            &[("Ip6:ReasmReqds", 3), ("Ip6:ReasmOKs", 1)],
            &UDP_DELIVERED,
        ),
    );
    let mut buf = [0u8; 64];
    let (n, _) = s.udp6_recv_from(h, &mut buf).unwrap();
    assert_eq!(&buf[..n], &pattern(40)[..]);
}

#[test]
fn tiny_first_fragments_get_parameter_problem_code_3() {
    for mode in MODES {
        let (mut s, now) = stack(mode);
        // RFC 7112 / RFC 8200 4.5: a first fragment without all headers
        // through the upper-layer header: discarded, Parameter Problem code
        // 3 with the pointer zero, counted as a header error (Linux
        // `ipv6_frag_rcv`: Ip6InHdrErrors).
        let cases: Vec<(&str, Vec<u8>)> = vec![
            // Ends inside the TCP header (20 bytes).
            ("tcp", frag(1, 0, true, 6, &[0u8; 16])),
            // A whole Destination Options header, then no UDP header.
            ("udp", frag(2, 0, true, DEST_OPTS, &pad_header(UDP))),
            // Ends inside a 16-byte Destination Options header.
            (
                "ext",
                frag(3, 0, true, DEST_OPTS, &[UDP, 1, 1, 12, 0, 0, 0, 0]),
            ),
        ];
        for (what, p) in &cases {
            let b = snap(&s);
            let out = rx(&mut s, now, &to_b(44, p));
            assert_eq!(
                param_problem(&out),
                (ParamProblem::IncompleteHeaderChain, 0),
                "{what} {mode:?}"
            );
            assert_moved(&b, &s, &and(&[("Ip6:InHdrErrors", 1)], &PP_SENT));
        }
        assert_eq!(s.reassembly_datagrams6(), 0, "none of them was kept");
        // To a multicast group: dropped and counted, no error (RFC 4443
        // 2.4 (e.3)).
        let b = snap(&s);
        let f = frame(PEER6, ALL_NODES, 44, 64, &frag(4, 0, true, 6, &[0u8; 16]));
        assert!(rx(&mut s, now, &f).is_empty());
        assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
        // An ICMPv6 error cut before its type: no error about it (RFC 4443
        // 2.4 (e.1); Linux `is_ineligible` the same for a first fragment).
        let b = snap(&s);
        let p = frag(5, 0, true, DEST_OPTS, &pad_header(ICMPV6));
        assert!(rx(&mut s, now, &to_b(44, &p)).is_empty());
        assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
        // The rest of the refused datagram waits for a first fragment that
        // never comes: at the timeout it fails, without a Time Exceeded
        // (RFC 8200 4.5: only when the first fragment was received).
        let b = snap(&s);
        assert!(rx(&mut s, now, &frag_to_b(1, 16, false, 6, &[0u8; 24])).is_empty());
        assert_moved(&b, &s, &[("Ip6:ReasmReqds", 1)]);
        // (The peer's neighbour entry, used for the errors above, is
        // probed and goes meanwhile.)
        settle(&mut s, now, now + Duration::from_secs(59));
        let b = snap(&s);
        assert!(poll(&mut s, now + Duration::from_secs(60)).is_empty());
        assert_moved(&b, &s, &[("Ip6:ReasmTimeout", 1), ("Ip6:ReasmFails", 1)]);
        assert_eq!(s.reassembly_memory6(), 0);
    }
}

#[test]
fn fragments_of_bad_length_or_offset_get_parameter_problem_code_0() {
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let udp = udp_bytes(PEER6, B6, PORT, &pattern(40));
        // RFC 8200 4.5: M set and a length not a multiple of 8 (or empty):
        // code 0 pointing at the Payload Length (offset 4).
        for chunk in [&udp[..12], &udp[..0], &udp[..47]] {
            let b = snap(&s);
            let out = rx(&mut s, now, &frag_to_b(1, 0, true, UDP, chunk));
            assert_eq!(param_problem(&out), (ParamProblem::ErroneousHeaderField, 4));
            assert_moved(&b, &s, &and(&[("Ip6:InHdrErrors", 1)], &PP_SENT));
        }
        // ... and a middle fragment the same.
        let b = snap(&s);
        let out = rx(&mut s, now, &frag_to_b(1, 8, true, UDP, &udp[..20]));
        assert_eq!(param_problem(&out), (ParamProblem::ErroneousHeaderField, 4));
        assert_moved(&b, &s, &and(&[("Ip6:InHdrErrors", 1)], &PP_SENT));
        // The last fragment (M clear) may have any length.
        let b = snap(&s);
        assert!(rx(&mut s, now, &frag_to_b(1, 24, false, UDP, &udp[..13])).is_empty());
        assert_moved(&b, &s, &[("Ip6:ReasmReqds", 1)]);
        // Past 65535 bytes once reassembled: code 0 at the Fragment Offset
        // field (40 + 2).
        let b = snap(&s);
        let out = rx(&mut s, now, &frag_to_b(2, 65528, false, UDP, &udp[..16]));
        assert_eq!(
            param_problem(&out),
            (ParamProblem::ErroneousHeaderField, 42)
        );
        assert_moved(&b, &s, &and(&[("Ip6:InHdrErrors", 1)], &PP_SENT));
    }
}

#[test]
fn fragment_floods_stay_within_the_reassembly_limits() {
    // Default limits (4 MiB, as Linux's `ip6frag_high_thresh`; 8192
    // datagrams; 60 s).
    let (mut s, now) = stack(Mode::Serve);
    let limits = ustack_core::ReasmLimits::ipv6();
    let chunk = pattern(1400);
    let n = 5000u32;
    let b = snap(&s);
    for i in 0..n {
        // A middle fragment of a new datagram each time: held until the
        // memory bound, refused after it.
        let out = rx(&mut s, now, &frag_to_b(i, 8, true, UDP, &chunk));
        assert!(out.is_empty());
        assert!(s.reassembly_memory6() <= limits.mem_limit);
        assert!(s.reassembly_datagrams6() <= limits.max_datagrams);
    }
    let held = s.reassembly_datagrams6() as u64;
    assert!(held > 1000, "only {held} datagrams held");
    assert!(held < u64::from(n), "the memory bound never hit");
    assert_moved(
        &b,
        &s,
        &[
            ("Ip6:ReasmReqds", u64::from(n)),
            ("Ip6:ReasmFails", u64::from(n) - held),
        ],
    );
    // They all time out at once; none had its first fragment: no error.
    let b = snap(&s);
    assert!(poll(&mut s, now + Duration::from_secs(60)).is_empty());
    assert_moved(
        &b,
        &s,
        &[("Ip6:ReasmTimeout", held), ("Ip6:ReasmFails", held)],
    );
    assert_eq!(s.reassembly_datagrams6(), 0);
    assert_eq!(s.reassembly_memory6(), 0);

    // Many small pieces of one datagram: it dies at the 65th.
    let now = now + Duration::from_secs(61);
    let b = snap(&s);
    for k in 0..100usize {
        let f = frag_to_b(9, 8 + k * 8, true, UDP, &[0; 8]);
        assert!(rx(&mut s, now, &f).is_empty());
    }
    assert_moved(&b, &s, &[("Ip6:ReasmReqds", 100), ("Ip6:ReasmFails", 1)]);
    assert!(s.reassembly_memory6() < 4096);
}

#[test]
fn time_exceeded_for_a_flood_of_first_fragments_is_rate_limited() {
    // Each of these datagrams deserves a Time Exceeded at its timeout
    // (its first fragment came): the ICMPv6 bucket (burst 50) bounds them.
    let (mut s, now) = stack(Mode::Serve);
    let udp = udp_bytes(PEER6, B6, PORT, &pattern(2000));
    let n = 200u64;
    for i in 0..n as u32 {
        assert!(rx(&mut s, now, &frag_to_b(i, 0, true, UDP, &udp[..1232])).is_empty());
    }
    assert_eq!(s.reassembly_datagrams6() as u64, n);
    let b = snap(&s);
    let t = now + Duration::from_secs(60);
    let out = poll(&mut s, t);
    let burst = u64::from(ustack_core::Limits::default().icmp_error_burst);
    // The peer's neighbour entry has aged out meanwhile (60 s unused): the
    // errors wait for its resolution (one solicitation).
    assert_eq!(out.len(), 1);
    assert_moved(
        &b,
        &s,
        &[
            ("Ip6:ReasmTimeout", n),
            ("Ip6:ReasmFails", n),
            ("Icmp6:OutMsgs", burst + 1),
            ("Icmp6:OutTimeExcds", burst),
            ("Icmp6:OutRateLimited", n - burst),
            ("Icmp6:OutNeighborSolicits", 1),
            ("Ndisc:OutRequests", 1),
        ],
    );
    let tll = ll_option(false, PEER_MAC);
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: na_flags::SOLICITED | na_flags::OVERRIDE,
        target: PEER6,
        options: NdiscOptions::new_checked(&tll).unwrap(),
    });
    let out = rx(
        &mut s,
        t,
        &frame(PEER6, B6, ICMPV6, 255, &icmp6_bytes(PEER6, B6, &na)),
    );
    assert_eq!(out.len() as u64, burst);
    for (_, ip, body) in &out {
        let p = Icmpv6Packet::new_checked(&body[..]).unwrap();
        match Icmpv6Repr::parse(&p, &ip.src, &ip.dst, true).unwrap() {
            Icmpv6Repr::TimeExceeded { reason, .. } => {
                assert_eq!(reason, TimeExceeded::FragReassemblyExceeded)
            }
            other => panic!("{other:?}"),
        }
    }
}

// ----------------------------------------------------------------------
// Routing headers and long chains
// ----------------------------------------------------------------------

#[test]
fn type_0_routing_headers_are_refused_unless_segments_left_is_zero() {
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let h = s.udp6_bind(SocketAddrV6::new(B6, PORT, 0, 0)).unwrap();
        let udp = udp_bytes(PEER6, B6, PORT, b"rh0");
        // Segments Left 1: RFC 5095 3 / RFC 8200 4.4, an unrecognised
        // Routing Type with segments left: Parameter Problem code 0
        // pointing at the Routing Type field (40 + 2); Linux
        // `ipv6_rthdr_rcv` counts Ip6InHdrErrors.
        let mut p = rh0(UDP, 1);
        p.extend_from_slice(&udp);
        let b = snap(&s);
        let out = rx(&mut s, now, &to_b(ROUTING, &p));
        assert_eq!(
            param_problem(&out),
            (ParamProblem::ErroneousHeaderField, 42)
        );
        assert_moved(&b, &s, &and(&[("Ip6:InHdrErrors", 1)], &PP_SENT));
        let mut buf = [0u8; 16];
        assert_eq!(s.udp6_recv_from(h, &mut buf), Err(UdpError::WouldBlock));
        // Behind a Destination Options header: the pointer follows it.
        let mut p = pad_header(ROUTING);
        p.extend_from_slice(&rh0(UDP, 5));
        p.extend_from_slice(&udp);
        let out = rx(&mut s, now, &to_b(DEST_OPTS, &p));
        assert_eq!(
            param_problem(&out),
            (ParamProblem::ErroneousHeaderField, 50)
        );
        // Segments Left 0: "ignore the Routing header and proceed": the
        // datagram is delivered.
        let mut p = rh0(UDP, 0);
        p.extend_from_slice(&udp);
        let b = snap(&s);
        assert!(rx(&mut s, now, &to_b(ROUTING, &p)).is_empty());
        assert_moved(&b, &s, &UDP_DELIVERED);
        let (n, _) = s.udp6_recv_from(h, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"rh0");
        // To a multicast group: dropped, no error (RFC 4443 2.4 (e.3)).
        let mut p = rh0(UDP, 1);
        p.extend_from_slice(&udp_bytes(PEER6, ALL_NODES, PORT, b"x"));
        let b = snap(&s);
        assert!(rx(&mut s, now, &frame(PEER6, ALL_NODES, ROUTING, 64, &p)).is_empty());
        assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
        // Carrying an ICMPv6 error: dropped, and no error about an error
        // (RFC 4443 2.4 (e.1), looked for past the extension headers).
        let quoted = to_b(UDP, &udp);
        let err = Icmpv6Repr::DstUnreachable {
            reason: DstUnreachable::PortUnreachable,
            header: Ipv6Repr::parse(&Ipv6Packet::new_checked(&quoted[14..]).unwrap()).unwrap(),
            data: &udp,
        };
        let mut p = rh0(ICMPV6, 1);
        p.extend_from_slice(&icmp6_bytes(PEER6, B6, &err));
        let b = snap(&s);
        assert!(rx(&mut s, now, &to_b(ROUTING, &p)).is_empty());
        assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
        // The same behind an unknown option whose type asks for an error.
        let mut p = opts_header(ICMPV6, 0x80);
        p.extend_from_slice(&icmp6_bytes(PEER6, B6, &err));
        let b = snap(&s);
        assert!(rx(&mut s, now, &to_b(DEST_OPTS, &p)).is_empty());
        assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
    }
}

/// `n` Destination Options headers of padding, then `tail` (whose first
/// header is `next`).
fn dest_opts_chain(n: usize, next: u8, tail: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    for i in 0..n {
        p.extend_from_slice(&pad_header(if i + 1 == n { next } else { DEST_OPTS }));
    }
    p.extend_from_slice(tail);
    p
}

#[test]
fn a_chain_of_100_extension_headers_is_dropped_after_bounded_work() {
    // Linux walks any number of extension headers (`ip6_protocol_deliver_rcu`
    // loops, each Destination Options header parsed on its own, bounded only
    // by the packet length) and would deliver this datagram. ustack walks at
    // most 16 headers and 2048 bytes of them (`ChainLimits`): RFC 8200 4.1
    // names each header once (Destination Options twice), RFC 8504 5.3 lets
    // hosts bound the chain, and no legitimate packet carries more. Past the
    // bound the packet is dropped as a header error, without an ICMPv6
    // error (RFC 8883's "Extension Header Chain Too Long" is optional for
    // hosts) — the same whether it comes whole or in fragments.
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let h = s.udp6_bind(SocketAddrV6::new(B6, PORT, 0, 0)).unwrap();
        let udp = udp_bytes(PEER6, B6, PORT, b"deep");
        let mut buf = [0u8; 16];
        // 16 headers: delivered.
        let b = snap(&s);
        let f = to_b(DEST_OPTS, &dest_opts_chain(16, UDP, &udp));
        assert!(rx(&mut s, now, &f).is_empty());
        assert_moved(&b, &s, &UDP_DELIVERED);
        assert!(s.udp6_recv_from(h, &mut buf).is_ok());
        // 17 and 100: dropped.
        for n in [17, 100] {
            let b = snap(&s);
            let f = to_b(DEST_OPTS, &dest_opts_chain(n, UDP, &udp));
            assert!(rx(&mut s, now, &f).is_empty());
            assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
        }
        // 100 Routing headers with nothing left to route.
        let mut p = Vec::new();
        for i in 0..100 {
            p.extend_from_slice(&rh0(if i == 99 { UDP } else { ROUTING }, 0));
        }
        p.extend_from_slice(&udp);
        let b = snap(&s);
        assert!(rx(&mut s, now, &to_b(ROUTING, &p)).is_empty());
        assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
        // 100 headers in a fragmented datagram: reassembled, then dropped
        // the same way.
        let whole = dest_opts_chain(100, UDP, &udp);
        let b = snap(&s);
        assert!(rx(
            &mut s,
            now,
            &frag_to_b(3, 0, true, DEST_OPTS, &whole[..512])
        )
        .is_empty());
        assert!(rx(
            &mut s,
            now,
            &frag_to_b(3, 512, false, DEST_OPTS, &whole[512..])
        )
        .is_empty());
        assert_moved(
            &b,
            &s,
            &[
                ("Ip6:ReasmReqds", 2),
                ("Ip6:ReasmOKs", 1),
                ("Ip6:InHdrErrors", 1),
            ],
        );
        assert_eq!(s.udp6_recv_from(h, &mut buf), Err(UdpError::WouldBlock));
        // Garbage chains cut anywhere: counted, never a panic.
        let chain = dest_opts_chain(100, UDP, &udp);
        for cut in 0..chain.len() {
            for first in [HOP_BY_HOP, ROUTING, DEST_OPTS, 44, 51] {
                let _ = rx(&mut s, now, &to_b(first, &chain[..cut]));
            }
        }
    }
}

#[test]
fn unknown_and_misplaced_headers_get_parameter_problem_code_1() {
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let udp = udp_bytes(PEER6, B6, PORT, b"x");
        // An unknown Next Header after a Destination Options header: code
        // 1 at that header's Next Header field (40); Ip6InUnknownProtos.
        let p = dest_opts_chain(1, 200, &udp);
        let b = snap(&s);
        let out = rx(&mut s, now, &to_b(DEST_OPTS, &p));
        assert_eq!(
            param_problem(&out),
            (ParamProblem::UnrecognizedNextHeader, 40)
        );
        assert_moved(&b, &s, &and(&[("Ip6:InUnknownProtos", 1)], &PP_SENT));
        // Hop-by-Hop anywhere but first (RFC 8200 4.1): the same, as Linux
        // answers it (no handler takes Next Header 0 there).
        let mut p = pad_header(HOP_BY_HOP);
        p.extend_from_slice(&pad_header(UDP));
        p.extend_from_slice(&udp);
        let b = snap(&s);
        let out = rx(&mut s, now, &to_b(DEST_OPTS, &p));
        assert_eq!(
            param_problem(&out),
            (ParamProblem::UnrecognizedNextHeader, 40)
        );
        assert_moved(&b, &s, &and(&[("Ip6:InUnknownProtos", 1)], &PP_SENT));
    }
}

#[test]
fn unknown_options_are_acted_on_as_their_two_high_bits_say() {
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let h = s.udp6_bind(SocketAddrV6::new(B6, PORT, 0, 0)).unwrap();
        let mut buf = [0u8; 16];
        for header in [HOP_BY_HOP, DEST_OPTS] {
            let udp = udp_bytes(PEER6, B6, PORT, b"opt");
            let with = |t: u8| {
                let mut p = opts_header(UDP, t);
                p.extend_from_slice(&udp);
                to_b(header, &p)
            };
            // 00: skip over the option and go on.
            let b = snap(&s);
            assert!(rx(&mut s, now, &with(0x1e)).is_empty());
            assert_moved(&b, &s, &UDP_DELIVERED);
            assert!(s.udp6_recv_from(h, &mut buf).is_ok());
            // 01: discard silently (Linux `ip6_parse_tlv`: Ip6InHdrErrors).
            let b = snap(&s);
            assert!(rx(&mut s, now, &with(0x5e)).is_empty());
            assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
            // 10 and 11: discard and send Parameter Problem code 2 at the
            // option type (40 + 2).
            for t in [0x9e, 0xde] {
                let b = snap(&s);
                let out = rx(&mut s, now, &with(t));
                assert_eq!(
                    param_problem(&out),
                    (ParamProblem::UnrecognizedOption, 42),
                    "{header} {t:#x}"
                );
                assert_moved(&b, &s, &and(&[("Ip6:InHdrErrors", 1)], &PP_SENT));
            }
            // To a multicast group: 10 reports all the same, 11 does not.
            let mudp = udp_bytes(PEER6, ALL_NODES, PORT, b"opt");
            for (t, answered) in [(0x9e, true), (0xde, false)] {
                let mut p = opts_header(UDP, t);
                p.extend_from_slice(&mudp);
                let b = snap(&s);
                let out = rx(&mut s, now, &frame(PEER6, ALL_NODES, header, 64, &p));
                if answered {
                    assert_eq!(param_problem(&out), (ParamProblem::UnrecognizedOption, 42));
                    assert_eq!(out[0].1.src, B6, "from a unicast address of ours");
                    assert_moved(&b, &s, &and(&[("Ip6:InHdrErrors", 1)], &PP_SENT));
                } else {
                    assert!(out.is_empty());
                    assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
                }
            }
            // An option running past its header: a header error, silently.
            let mut p = vec![UDP, 0, 0x1e, 9, 0, 0, 0, 0];
            p.extend_from_slice(&udp);
            let b = snap(&s);
            assert!(rx(&mut s, now, &to_b(header, &p)).is_empty());
            assert_moved(&b, &s, &[("Ip6:InHdrErrors", 1)]);
        }
    }
}

// ----------------------------------------------------------------------
// Neighbor Discovery
// ----------------------------------------------------------------------

/// The state a Neighbor Discovery message could change.
fn nd_state(s: &Stack, now: Instant) -> (Vec<Ipv6Cidr>, Vec<Ipv6Addr>, Option<MacAddr>) {
    (
        s.ipv6_addresses().to_vec(),
        s.ipv6_default_routers(),
        s.neighbour6(now, router_ll()),
    )
}

#[test]
fn neighbor_discovery_from_off_the_link_is_dropped_and_counted() {
    // RFC 4861 6.1.1, 6.1.2, 7.1.1, 7.1.2, 8.1: every ND message must
    // arrive with hop limit 255 (so it was not forwarded: it comes from the
    // link). Otherwise: dropped, counted in Ndisc:Invalid.
    for mode in MODES {
        for (what, src, dst, msg, in_ctr) in ndp_messages() {
            let (mut s, now) = stack(mode);
            let before = nd_state(&s, now);
            for hop_limit in [64, 254, 1, 0] {
                let b = snap(&s);
                let out = rx(&mut s, now, &frame(src, dst, ICMPV6, hop_limit, &msg));
                assert!(out.is_empty(), "{what} {mode:?}: {out:?}");
                assert_moved(
                    &b,
                    &s,
                    &[
                        ("Ip6:InDelivers", 1),
                        ("Icmp6:InMsgs", 1),
                        (in_ctr, 1),
                        ("Ndisc:Invalid", 1),
                    ],
                );
                assert_eq!(nd_state(&s, now), before, "{what} {mode:?}");
            }
            // With hop limit 255 the same message is taken (not counted
            // invalid): the check is the hop limit.
            let b = snap(&s);
            let _ = rx(&mut s, now, &frame(src, dst, ICMPV6, 255, &msg));
            let m = moved(&b, &s);
            assert_eq!(m.get(in_ctr), Some(&1), "{what} {mode:?}");
            assert_eq!(m.get("Ndisc:Invalid"), None, "{what} {mode:?}");
        }
    }
}

#[test]
fn malformed_neighbor_discovery_is_dropped_and_counted() {
    // RFC 4861: "ICMP Code is 0", "ICMP length ... is N or more octets",
    // "All included options have a length that is greater than zero" (and
    // options within the message).
    for mode in MODES {
        let (mut s, now) = stack(mode);
        for (what, src, dst, msg, _) in ndp_messages() {
            let fixed = match what {
                "RS" => 8,
                "RA" => 16,
                "Redirect" => 40,
                _ => 24,
            };
            let mut bad_code = msg.clone();
            bad_code[1] = 1;
            let mut zero_len = msg.clone();
            zero_len.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
            let mut overrun = msg.clone();
            overrun.extend_from_slice(&[1, 2, 0, 0, 0, 0, 0, 0]);
            let mut cut_option = msg[..fixed].to_vec();
            cut_option.extend_from_slice(&[1, 1, 2, 0]);
            let mut cases = vec![
                ("code 1", bad_code),
                ("zero-length option", zero_len),
                ("option past the end", overrun),
                ("option cut", cut_option),
            ];
            // (A Router Solicitation is the 8 bytes every ICMPv6 message
            // has: shorter is not ICMPv6 at all.)
            if fixed > 8 {
                cases.push(("too short", msg[..fixed - 4].to_vec()));
            }
            for (how, mut m) in cases {
                fix_icmp6(src, dst, &mut m);
                let b = snap(&s);
                let out = rx(&mut s, now, &frame(src, dst, ICMPV6, 255, &m));
                assert!(out.is_empty(), "{what} {how} {mode:?}");
                assert_moved(
                    &b,
                    &s,
                    &[
                        ("Ip6:InDelivers", 1),
                        ("Icmp6:InMsgs", 1),
                        ("Icmp6:InErrors", 1),
                        ("Ndisc:Invalid", 1),
                    ],
                );
            }
        }
        assert!(s.ipv6_default_routers().is_empty());
        assert_eq!(s.neighbour6(now, router_ll()), None);
    }
}

#[test]
fn fragmented_neighbor_discovery_is_ignored() {
    // RFC 6980 5: "A node MUST silently ignore any IPv6 packets that
    // contain ND messages and that are fragmented" (Linux
    // `ndisc_suppress_frag_ndisc`, atomic fragments included): a valid
    // solicitation in fragments teaches nothing and is not answered.
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let src = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x33);
        let g = solicited_node(B6);
        let ns = ns_bytes(src, g, B6, Some(MacAddr([2, 0, 0, 0, 0, 0x33])));
        let nd_dropped = [
            ("Ip6:InDelivers", 1),
            ("Icmp6:InMsgs", 1),
            ("Icmp6:InNeighborSolicits", 1),
            ("Ndisc:Invalid", 1),
        ];
        // An atomic fragment (offset 0, M clear).
        let b = snap(&s);
        let f = frame(src, g, 44, 255, &frag(1, 0, false, ICMPV6, &ns));
        assert!(rx(&mut s, now, &f).is_empty());
        assert_moved(&b, &s, &nd_dropped);
        // Two fragments, reassembled.
        let b = snap(&s);
        let f = frame(src, g, 44, 255, &frag(2, 0, true, ICMPV6, &ns[..16]));
        assert!(rx(&mut s, now, &f).is_empty());
        let f = frame(src, g, 44, 255, &frag(2, 16, false, ICMPV6, &ns[16..]));
        assert!(rx(&mut s, now, &f).is_empty());
        assert_moved(
            &b,
            &s,
            &and(&[("Ip6:ReasmReqds", 2), ("Ip6:ReasmOKs", 1)], &nd_dropped),
        );
        assert_eq!(s.neighbour6(now, src), None);
        // Whole, it is answered.
        assert_eq!(rx(&mut s, now, &frame(src, g, ICMPV6, 255, &ns)).len(), 1);
    }
}

#[test]
fn forged_router_advertisements_are_ignored_unless_host_mode_accepts_them() {
    // Moved from stack_ipv6.rs. `serve` runs the stack with static
    // addresses and without `set_ipv6_host`: a valid-looking RA from a
    // link-local router adds no address, no prefix and no default route.
    let (mut s, now) = stack(Mode::Serve);
    let r = router_ll();
    let sll = ll_option(true, ROUTER_MAC);
    let ra = ra_bytes(r, &sll, 1800, &[0x2001, 0xdb8, 1], Some(1280));
    let f = frame(r, ALL_NODES, ICMPV6, 255, &ra);
    let before = s.ipv6_addresses().to_vec();
    let b = snap(&s);
    assert!(rx(&mut s, now, &f).is_empty());
    assert_eq!(s.ipv6_addresses(), &before[..]);
    assert_moved(
        &b,
        &s,
        &[
            ("Ip6:InDelivers", 1),
            ("Icmp6:InMsgs", 1),
            ("Icmp6:InRouterAdvertisements", 1),
        ],
    );
    // Off-link destinations stay unroutable: no default router was taken.
    let u = s
        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 5000, 0, 0))
        .unwrap();
    let far = SocketAddrV6::new("2001:db8:9::1".parse().unwrap(), 9, 0, 0);
    assert_eq!(s.udp6_send_to(now, u, b"x", far), Err(UdpError::NoRoute));
    // Nor is the MTU taken: 1400 bytes still go in one frame.
    let near = SocketAddrV6::new(PEER6, 9, 0, 0);
    assert_eq!(s.udp6_send_to(now, u, &[0; 1400], near), Ok(1400));
    assert_eq!(poll(&mut s, now).len(), 1);
    // Forged (from a global address): counted invalid even though it would
    // not be acted on, as Linux validates before `accept_ra`.
    let global = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    let ra = ra_bytes(global, &sll, 1800, &[0x2001, 0xdb8, 1], None);
    let b = snap(&s);
    assert!(rx(&mut s, now, &frame(global, ALL_NODES, ICMPV6, 255, &ra)).is_empty());
    assert_moved(
        &b,
        &s,
        &[
            ("Ip6:InDelivers", 1),
            ("Icmp6:InMsgs", 1),
            ("Icmp6:InRouterAdvertisements", 1),
            ("Ndisc:Invalid", 1),
        ],
    );

    // A host that does not accept advertisements (DAD only): the same.
    let now = Instant::from_secs(1);
    let mut s = Stack::new(config(B_MAC, B_IP, 2), now);
    s.set_ipv6_host(
        now,
        Ipv6HostConfig {
            dad_transmits: 1,
            ..Ipv6HostConfig::default()
        },
    );
    let mut now = now;
    for _ in 0..50 {
        now += Duration::from_millis(100);
        let _ = poll(&mut s, now);
    }
    let before = s.ipv6_addresses().to_vec();
    let ra = ra_bytes(r, &sll, 1800, &[0x2001, 0xdb8, 1], None);
    assert!(rx(&mut s, now, &frame(r, ALL_NODES, ICMPV6, 255, &ra)).is_empty());
    assert_eq!(s.ipv6_addresses(), &before[..]);
    assert!(s.ipv6_default_routers().is_empty());

    // A host that does: forged ones (not link-local, or forwarded) are
    // dropped; valid ones are taken, within bounds however many come.
    let (mut s, now) = stack(Mode::Host);
    for (src, hop) in [(global, 255), (r, 64)] {
        let ra = ra_bytes(src, &sll, 1800, &[0x2001, 0xdb8, 1], None);
        let b = snap(&s);
        assert!(rx(&mut s, now, &frame(src, ALL_NODES, ICMPV6, hop, &ra)).is_empty());
        assert_moved(
            &b,
            &s,
            &[
                ("Ip6:InDelivers", 1),
                ("Icmp6:InMsgs", 1),
                ("Icmp6:InRouterAdvertisements", 1),
                ("Ndisc:Invalid", 1),
            ],
        );
    }
    assert!(s.ipv6_default_routers().is_empty());
    assert_eq!(s.ipv6_addresses().len(), 2, "link-local and fd00::2");
    // A flood of routers, each with its own prefix.
    for i in 0..100u16 {
        let mac = MacAddr([2, 0, 0, 1, (i >> 8) as u8, i as u8]);
        let src = link_local(mac).address;
        let sll = ll_option(true, mac);
        let ra = ra_bytes(src, &sll, 1800, &[0x2001, 0xdb8, 0x100 + i], None);
        let mut f = frame(src, ALL_NODES, ICMPV6, 255, &ra);
        f[6..12].copy_from_slice(&mac.0);
        let _ = rx(&mut s, now, &f);
    }
    let _ = poll(&mut s, now + Duration::from_secs(3));
    assert!(s.ipv6_default_routers().len() <= 8);
    let addrs = s.ipv6_addresses().len() + s.ipv6_tentative_addresses().len();
    assert!(addrs <= MAX_IPV6_ADDRESSES, "{addrs} addresses");
    assert_eq!(c(&s, "Icmp6", "InRouterAdvertisements"), 102);
}

#[test]
fn a_stack_advertising_as_the_router_ignores_advertisements_from_its_link() {
    // `ustack run`'s guest-facing engine advertises itself (RouterConfig):
    // a guest that advertises too changes nothing, and its solicitations
    // from off the link are not answered.
    let (mut s, now) = stack(Mode::Serve);
    let svc = AddressServices {
        router: Some(RouterConfig::new(Ipv6Addr::new(
            0xfd00, 0, 0, 0, 0, 0, 0, 0,
        ))),
        ..AddressServices::default()
    };
    s.set_address_services(now, svc).unwrap();
    // (Its first advertisements.)
    settle(&mut s, now, now + Duration::from_secs(1));
    let now = now + Duration::from_secs(1);
    let next_ra = s.poll_at();
    let r = router_ll();
    let sll = ll_option(true, ROUTER_MAC);
    let before = nd_state(&s, now);
    for hop in [255, 64] {
        let ra = ra_bytes(r, &sll, 1800, &[0x2001, 0xdb8, 7], Some(1280));
        let b = snap(&s);
        assert!(rx(&mut s, now, &frame(r, ALL_NODES, ICMPV6, hop, &ra)).is_empty());
        assert_moved(
            &b,
            &s,
            &[
                ("Ip6:InDelivers", 1),
                ("Icmp6:InMsgs", 1),
                ("Icmp6:InRouterAdvertisements", 1),
                ("Ndisc:Invalid", u64::from(hop != 255)),
            ],
        );
    }
    assert_eq!(nd_state(&s, now), before);
    // A solicitation from off the link: no advertisement scheduled.
    let psll = ll_option(true, PEER_MAC);
    let rs = Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit {
        options: NdiscOptions::new_checked(&psll).unwrap(),
    });
    let all_routers = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
    let rs = icmp6_bytes(PEER6, all_routers, &rs);
    let b = snap(&s);
    assert!(rx(&mut s, now, &frame(PEER6, all_routers, ICMPV6, 64, &rs)).is_empty());
    assert_moved(
        &b,
        &s,
        &[
            ("Ip6:InDelivers", 1),
            ("Icmp6:InMsgs", 1),
            ("Icmp6:InRouterSolicits", 1),
            ("Ndisc:Invalid", 1),
        ],
    );
    assert_eq!(s.poll_at(), next_ra);
}

fn c(s: &Stack, group: &str, name: &str) -> u64 {
    counter(s, group, name)
}

#[test]
fn a_solicitation_flood_from_many_sources_keeps_the_neighbour_cache_bounded() {
    // Moved from stack_ipv6.rs. Every solicitation from a new source with
    // its link-layer address would create an entry (RFC 4861 7.2.3); the
    // cache holds at most `ArpLimits::cache_size` of them, evicting the
    // oldest unconfirmed, and every solicitation is still answered.
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let cap = ArpLimits::default().cache_size;
        let n = cap + cap / 2;
        let src = |i: usize| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 1, i as u16);
        let mac = |i: usize| MacAddr([2, 0, 0, 1, (i >> 8) as u8, i as u8]);
        let g = solicited_node(B6);
        for i in 0..n {
            let ns = ns_bytes(src(i), g, B6, Some(mac(i)));
            let out = rx(&mut s, now, &frame(src(i), g, ICMPV6, 255, &ns));
            assert_eq!(out.len(), 1, "solicitation {i} not answered");
            assert_eq!(out[0].0, mac(i));
        }
        let held = (0..n)
            .filter(|&i| s.neighbour6(now, src(i)).is_some())
            .count();
        assert!(held <= cap, "{held} neighbours cached, limit {cap}");
        assert!(held >= cap / 2, "only {held} neighbours cached");
        // The newest sources are the ones kept.
        assert_eq!(s.neighbour6(now, src(n - 1)), Some(mac(n - 1)));
        assert_eq!(c(&s, "Icmp6", "InNeighborSolicits"), n as u64 + 1);
        assert_eq!(c(&s, "Icmp6", "OutNeighborAdvertisements"), n as u64 + 1);
    }
}

#[test]
fn unsolicited_advertisements_create_no_neighbour_entries() {
    // RFC 4861 7.2.5: "If no entry exists, the advertisement SHOULD be
    // silently discarded": a flood of advertisements for made-up targets
    // (valid, from the link) leaves the cache as it was.
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let n = 2000u64;
        let target = |i: u64| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 3, i as u16);
        let tll = ll_option(false, MacAddr([2, 0, 0, 3, 0, 1]));
        let b = snap(&s);
        for i in 0..n {
            let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: na_flags::OVERRIDE,
                target: target(i),
                options: NdiscOptions::new_checked(&tll).unwrap(),
            });
            let m = icmp6_bytes(target(i), ALL_NODES, &na);
            assert!(rx(&mut s, now, &frame(target(i), ALL_NODES, ICMPV6, 255, &m)).is_empty());
        }
        assert!((0..n).all(|i| s.neighbour6(now, target(i)).is_none()));
        assert_eq!(s.neighbour6(now, PEER6), Some(PEER_MAC));
        assert_moved(
            &b,
            &s,
            &[
                ("Ip6:InDelivers", n),
                ("Icmp6:InMsgs", n),
                ("Icmp6:InNeighborAdvertisements", n),
                ("Ndisc:InReplies", n),
            ],
        );
    }
}

#[test]
fn a_flood_of_solicitations_to_resolve_keeps_the_neighbour_cache_bounded() {
    // Unicast solicitations without a source link-layer address from new
    // sources: each answer needs the sender resolved first (RFC 4861
    // 7.2.4), an INCOMPLETE entry and a solicitation of ours. The entries
    // are bounded by the cache size; past it the answer is dropped and
    // counted (Ndisc:CacheFull), and no solicitation of ours goes out.
    let (mut s, now) = stack(Mode::Serve);
    let cap = ArpLimits::default().cache_size as u64;
    let extra = 100u64;
    let n = cap + extra;
    let src = |i: u64| Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 2, i as u16);
    let b = snap(&s);
    let mut solicitations = 0u64;
    for i in 0..n {
        let ns = ns_bytes(src(i), B6, B6, None);
        let out = rx(&mut s, now, &frame(src(i), B6, ICMPV6, 255, &ns));
        assert!(out.len() <= 1);
        solicitations += out.len() as u64;
    }
    // The peer's resolved entry made room for one of them (only resolved
    // entries are evicted): `cap` resolutions started, the rest refused.
    let fresh = cap;
    assert_eq!(solicitations, fresh);
    assert_moved(
        &b,
        &s,
        &[
            ("Ip6:InDelivers", n),
            ("Icmp6:InMsgs", n),
            ("Icmp6:InNeighborSolicits", n),
            ("Ndisc:InRequests", n),
            ("Icmp6:OutMsgs", n + fresh),
            ("Icmp6:OutNeighborAdvertisements", n),
            ("Icmp6:OutNeighborSolicits", fresh),
            ("Ndisc:OutRequests", fresh),
            ("Ndisc:CacheFull", n - fresh),
            ("Ndisc:QueueDrops", n - fresh),
        ],
    );
    // The unanswered entries fail after their solicitations and free the
    // cache: a real neighbour resolves again.
    let mut t = now;
    for _ in 0..10 {
        t += Duration::from_secs(1);
        let _ = poll(&mut s, t);
    }
    introduce_peer(&mut s, t);
}

// ----------------------------------------------------------------------
// Error floods
// ----------------------------------------------------------------------

#[test]
fn a_flood_of_packets_that_each_deserve_an_error_gets_one_bucket_of_errors() {
    // RFC 4443 2.4 (f): ICMPv6 errors are rate-limited (a token bucket,
    // `Limits::icmp_error_rate`/`icmp_error_burst`). 1000 packets at once
    // that each deserve a Parameter Problem get `burst` of them; the rest
    // are counted in Icmp6:OutRateLimited and every packet is still
    // counted as what it was.
    for mode in MODES {
        let (mut s, now) = stack(mode);
        let burst = u64::from(ustack_core::Limits::default().icmp_error_burst);
        let n = 1000u64;
        let b = snap(&s);
        let mut errors = 0;
        for i in 0..n {
            let f = if i % 2 == 0 {
                to_b(200, &[0u8; 8])
            } else {
                to_b(ROUTING, &rh0(UDP, 1))
            };
            errors += rx(&mut s, now, &f).len() as u64;
        }
        assert_eq!(errors, burst);
        assert_moved(
            &b,
            &s,
            &[
                ("Ip6:InUnknownProtos", n / 2),
                ("Ip6:InHdrErrors", n / 2),
                ("Icmp6:OutMsgs", burst),
                ("Icmp6:OutParmProblems", burst),
                ("Icmp6:OutRateLimited", n - burst),
            ],
        );
        // The bucket refills with time (1000 per second by default).
        let later = now + Duration::from_millis(10);
        assert_eq!(rx(&mut s, later, &to_b(200, &[0u8; 8])).len(), 1);
    }
}
