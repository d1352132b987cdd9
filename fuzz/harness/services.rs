//! `addr_services`: the address services' input path (router solicitations,
//! DHCPv4 and DHCPv6 servers) on the relay's engine: a transparent-mode
//! `Stack` at 10.0.2.2/24 with router advertisements for fd00::/64, a
//! DHCPv4 pool of 10.0.2.15-16 and a DHCPv6 pool of fd00::100-101.
//!
//! Input: operations until the input ends. An operation byte is
//! `step << 3 | flags << 2 | kind`: the clock advances by `STEPS[step]`
//! (every timer on the way polled at its instant), then `kind` 0 sends a
//! DHCPv4 message (the following length-prefixed bytes) from 0.0.0.0:68 to
//! 255.255.255.255:67, or with `flags` from 10.0.2.15 to 10.0.2.2; 1 a
//! DHCPv6 message from the guest's link-local address port 546 to
//! ff02::1:2 port 547, or with `flags` to our link-local address; 2 a Router
//! Solicitation with the bytes as options, from the guest's link-local
//! address (hop limit 255), or with `flags` from `::` (with a hop limit
//! from the input); 3 a raw frame. Headers and checksums are made right so
//! the servers see the message.
//!
//! Invariants: no panic; every frame comes from our MAC, parses, carries a
//! valid checksum, and is a DHCPv4 reply from 10.0.2.2:67 (its yiaddr in the
//! pool or zero), a DHCPv6 reply from our link-local address port 547 (every
//! IA address in the pool), an RA (hop limit 255, from our link-local
//! address), or what the stack otherwise sends (ARP, NDP, ICMP); at most 64
//! frames per operation; `poll_at` moves past `now` after a poll.

use std::cell::{Cell, RefCell};
use std::net::{Ipv4Addr, Ipv6Addr};

use ustack_core::time::{Duration, Instant};
use ustack_core::{
    link_local, AddressServices, Config, Dhcpv4Config, Dhcpv6Config, Limits, RouterConfig, Stack,
    TransparentConfig,
};
use ustack_wire::dhcpv4::{Dhcpv4Packet, Dhcpv4Repr};
use ustack_wire::dhcpv6::{Dhcpv6Packet, Dhcpv6Repr, ALL_RELAY_AGENTS_AND_SERVERS};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr};
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

use super::stack::Input;

const GW_MAC: MacAddr = MacAddr([0x52, 0x55, 0x0a, 0x00, 0x02, 0x02]);
const GUEST_MAC: MacAddr = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
const GW4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const GUEST4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
const GUEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100);
const POOL: u32 = 2;
const STEPS: [u64; 8] = [
    0,
    1_000,
    100_000,
    1_000_000,
    10_000_000,
    60_000_000,
    600_000_000,
    3_600_000_000,
];
const MAX_FRAMES: usize = 64;

fn gateway() -> Stack {
    let now = Instant::from_secs(1);
    let cfg = Config {
        mac: GW_MAC,
        addr: Ipv4Cidr {
            address: GW4,
            prefix_len: 24,
        },
        gateway: None,
        mtu: 1500,
        tcp: ustack_core::tcp::TcpConfig::default(),
        limits: Limits::default(),
        secret: [7; 16],
        seed: 7,
    };
    let t = TransparentConfig {
        guest: Some(GUEST4),
        ..TransparentConfig::default()
    };
    let mut s = Stack::new_transparent(cfg, t, now);
    let mut ra = RouterConfig::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0));
    ra.rdnss = vec![Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3)];
    ra.mtu = Some(1500);
    let mut d4 = Dhcpv4Config::new(GW4, 24, GUEST4);
    d4.dns = vec![Ipv4Addr::new(10, 0, 2, 3)];
    d4.pool_size = POOL;
    let mut d6 = Dhcpv6Config::new(GUEST6);
    d6.pool_size = POOL;
    d6.dns = vec![Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3)];
    d6.domains = vec!["example.test".into()];
    let svc = AddressServices {
        router: Some(ra),
        dhcpv4: Some(d4),
        dhcpv6: Some(d6),
    };
    if s.set_address_services(now, svc).is_err() {
        panic!("the harness's services are valid");
    }
    s
}

thread_local! {
    static SETUP: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

fn eth(src: MacAddr, dst: MacAddr, t: EtherType, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + payload.len()];
    EthernetRepr {
        src,
        dst,
        ethertype: t,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    f[14..].copy_from_slice(payload);
    f
}

fn udp4(src: Ipv4Addr, dst: Ipv4Addr, body: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 28 + body.len()];
    p[28..].copy_from_slice(body);
    UdpRepr {
        src_port: 68,
        dst_port: 67,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut p[20..]),
        src,
        dst,
        body.len(),
        true,
    );
    Ipv4Repr {
        src,
        dst,
        protocol: IpProtocol::Udp,
        payload_len: 8 + body.len(),
        ttl: 64,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut p[..20]), true);
    let d = if dst.is_broadcast() {
        MacAddr::BROADCAST
    } else {
        GW_MAC
    };
    eth(GUEST_MAC, d, EtherType::Ipv4, &p)
}

fn ip6(src: Ipv6Addr, dst: Ipv6Addr, nh: IpProtocol, hop: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40 + payload.len()];
    Ipv6Repr {
        src,
        dst,
        next_header: nh,
        payload_len: payload.len(),
        hop_limit: hop,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut p[..40]));
    p[40..].copy_from_slice(payload);
    let d = if dst.is_multicast() {
        let o = dst.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    } else {
        GW_MAC
    };
    eth(GUEST_MAC, d, EtherType::Ipv6, &p)
}

fn udp6(dst: Ipv6Addr, body: &[u8]) -> Vec<u8> {
    let src = link_local(GUEST_MAC).address;
    let mut u = vec![0u8; 8 + body.len()];
    u[8..].copy_from_slice(body);
    UdpRepr {
        src_port: 546,
        dst_port: 547,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut u[..]),
        src,
        dst,
        body.len(),
        true,
    );
    ip6(src, dst, IpProtocol::Udp, 1, &u)
}

fn rs(src: Ipv6Addr, hop: u8, options: &[u8]) -> Vec<u8> {
    let dst = ustack_core::ALL_ROUTERS;
    let mut m = vec![0u8; 8 + options.len()];
    m[0] = 133;
    m[8..].copy_from_slice(options);
    let mut p = Icmpv6Packet::new_unchecked(&mut m[..]);
    p.fill_checksum(&src, &dst);
    ip6(src, dst, IpProtocol::ICMPV6, hop, &m)
}

/// Check one frame the stack sent.
fn check(f: &[u8]) {
    let e = EthernetFrame::new_checked(f).expect("frame parses");
    assert_eq!(e.src_addr(), GW_MAC, "from our MAC");
    let gw_ll = link_local(GW_MAC).address;
    match e.ethertype() {
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(e.payload()).expect("IPv4 parses");
            let ip = Ipv4Repr::parse(&p, true).expect("IPv4 header checksum");
            if ip.protocol != IpProtocol::Udp {
                return;
            }
            let u = UdpPacket::new_checked(p.payload()).expect("UDP parses");
            UdpRepr::parse(&u, ip.src, ip.dst, true).expect("UDP checksum");
            if u.src_port() == 67 {
                assert_eq!(ip.src, GW4);
                let m = Dhcpv4Repr::parse(&Dhcpv4Packet::new_unchecked(u.payload()))
                    .expect("DHCPv4 reply parses");
                let y = u32::from(m.yiaddr);
                let first = u32::from(GUEST4);
                assert!(
                    y == 0 || (first..first + POOL).contains(&y),
                    "yiaddr {} outside the pool",
                    m.yiaddr
                );
            }
        }
        EtherType::Ipv6 => {
            let p = Ipv6Packet::new_checked(e.payload()).expect("IPv6 parses");
            let ip = Ipv6Repr::parse(&p).expect("IPv6 header");
            let body = p.payload();
            match ip.next_header {
                IpProtocol::Udp => {
                    let u = UdpPacket::new_checked(body).expect("UDP parses");
                    UdpRepr::parse(&u, ip.src, ip.dst, true).expect("UDP6 checksum");
                    if u.src_port() == 547 {
                        assert_eq!(ip.src, gw_ll, "DHCPv6 from our link-local address");
                        let m = Dhcpv6Repr::parse(&Dhcpv6Packet::new_unchecked(u.payload()))
                            .expect("DHCPv6 reply parses");
                        let first = u128::from(GUEST6);
                        for ia in m.options.ia_na() {
                            for a in ia.addresses() {
                                let v = u128::from(a.addr);
                                assert!((first..first + u128::from(POOL)).contains(&v));
                            }
                        }
                    }
                }
                IpProtocol::ICMPV6 => {
                    let pkt = Icmpv6Packet::new_checked(body).expect("ICMPv6 parses");
                    let r = Icmpv6Repr::parse(&pkt, &ip.src, &ip.dst, true)
                        .expect("ICMPv6 parses with its checksum");
                    if matches!(
                        r,
                        Icmpv6Repr::Ndisc(ustack_wire::ndisc::NdiscRepr::RouterAdvert { .. })
                    ) {
                        assert_eq!((ip.src, ip.hop_limit), (gw_ll, 255), "RA source");
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// The target body.
pub fn run(data: &[u8]) {
    let mut s = SETUP.with(|c| c.borrow_mut().get_or_insert_with(gateway).clone());
    let mut inp = Input::new(data);
    let mut now = Instant::from_secs(1);
    let frames = Cell::new(0usize);
    let mut tx = |f: &[u8]| {
        check(f);
        frames.set(frames.get() + 1);
    };
    s.poll(now, &mut tx);
    let guest_ll = link_local(GUEST_MAC).address;
    let mut ops = 0;
    while !inp.is_empty() && ops < 256 {
        ops += 1;
        let b = inp.u8();
        let (kind, flag, step) = (b & 3, b & 4 != 0, usize::from(b >> 3) & 7);
        let end = now + Duration::from_micros(STEPS[step]);
        // Timers on the way, at their instants (bounded).
        for _ in 0..64 {
            match s.poll_at() {
                Some(at) if at <= end => {
                    now = now.max(at);
                    s.poll(now, &mut tx);
                    assert!(s.poll_at().is_none_or(|t| t > now), "poll_at stuck");
                }
                _ => break,
            }
        }
        now = end;
        let n = inp.len(1400);
        let body = inp.bytes(n);
        let frame = match kind {
            0 if flag => udp4(GUEST4, GW4, body),
            0 => udp4(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, body),
            1 if flag => udp6(link_local(GW_MAC).address, body),
            1 => udp6(ALL_RELAY_AGENTS_AND_SERVERS, body),
            2 if flag => rs(Ipv6Addr::UNSPECIFIED, inp.u8(), body),
            2 => rs(guest_ll, 255, body),
            _ => body.to_vec(),
        };
        let before = frames.get();
        s.receive(now, &frame, &mut tx);
        s.poll(now, &mut tx);
        assert!(
            frames.get() - before <= MAX_FRAMES,
            "too many frames for one input"
        );
    }
}
