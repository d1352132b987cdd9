//! The address services (`Stack::set_address_services`): router
//! advertisements (RFC 4861 6.2), the DHCPv4 server (RFC 2131) and the
//! DHCPv6 server (RFC 8415), driven sans-IO on a virtual clock with
//! messages built by `ustack-wire`, as a guest on the relay's link sends
//! them.

mod stack_util;

use std::net::{Ipv4Addr, Ipv6Addr};

use stack_util::*;
use ustack_core::time::{Duration, Instant};
use ustack_core::{
    link_local, AddressServices, Dhcpv4Config, Dhcpv6Config, RouterConfig, Stack,
    TransparentConfig, ALL_NODES, ALL_ROUTERS,
};
use ustack_wire::dhcpv4::{
    Dhcpv4MessageType as M4, Dhcpv4Option, Dhcpv4OptionWriter, Dhcpv4Options, Dhcpv4Packet,
    Dhcpv4Repr, BOOTREQUEST, FLAG_BROADCAST,
};
use ustack_wire::dhcpv6::{
    option_code as oc6, status, Dhcpv6MessageType as M6, Dhcpv6Option, Dhcpv6OptionWriter,
    Dhcpv6Options, Dhcpv6Packet, Dhcpv6Repr, IaAddress, IaNa, ALL_RELAY_AGENTS_AND_SERVERS,
};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Repr};
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use ustack_wire::ndisc::{prefix_flags, NdiscOption, NdiscOptions, NdiscRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

const GW_MAC: MacAddr = MacAddr([0x52, 0x55, 0x0a, 0x00, 0x02, 0x02]);
const GUEST_MAC: MacAddr = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
const OTHER_MAC: MacAddr = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x57]);
const GW4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const DNS4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
const GUEST4: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
const PREFIX: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0);
const DNS6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);
const GUEST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100);

fn services() -> AddressServices {
    let mut ra = RouterConfig::new(PREFIX);
    ra.rdnss = vec![DNS6];
    ra.mtu = Some(1500);
    let mut d4 = Dhcpv4Config::new(GW4, 24, GUEST4);
    d4.dns = vec![DNS4];
    d4.pool_size = 2;
    let mut d6 = Dhcpv6Config::new(GUEST6);
    d6.dns = vec![DNS6];
    d6.domains = vec!["example.test".into()];
    d6.pool_size = 2;
    AddressServices {
        router: Some(ra),
        dhcpv4: Some(d4),
        dhcpv6: Some(d6),
    }
}

/// The relay's engine: transparent mode as 10.0.2.2/24 with the services.
fn gateway(svc: AddressServices) -> (Stack, Instant) {
    let now = Instant::from_secs(1);
    let mut cfg = config(GW_MAC, GW4, 7);
    cfg.addr = Ipv4Cidr {
        address: GW4,
        prefix_len: 24,
    };
    let tcfg = TransparentConfig {
        guest: Some(GUEST4),
        ..TransparentConfig::default()
    };
    let mut s = Stack::new_transparent(cfg, tcfg, now);
    s.set_address_services(now, svc).unwrap();
    (s, now)
}

fn gw_ll() -> Ipv6Addr {
    link_local(GW_MAC).address
}

fn guest_ll() -> Ipv6Addr {
    link_local(GUEST_MAC).address
}

fn poll(s: &mut Stack, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    s.poll(now, &mut |f| out.push(f.to_vec()));
    out
}

fn recv(s: &mut Stack, now: Instant, frame: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    s.receive(now, frame, &mut |f| out.push(f.to_vec()));
    s.poll(now, &mut |f| out.push(f.to_vec()));
    out
}

// ---------------------------------------------------------------------
// IPv6 frames
// ---------------------------------------------------------------------

fn frame6(src_mac: MacAddr, ip: Ipv6Repr, payload: &[u8]) -> Vec<u8> {
    let dst_mac = if ip.dst.is_multicast() {
        let o = ip.dst.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    } else {
        GW_MAC
    };
    let mut f = vec![0u8; 54 + payload.len()];
    EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        ethertype: EtherType::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        payload_len: payload.len(),
        ..ip
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    f[54..].copy_from_slice(payload);
    f
}

fn ip6(src: Ipv6Addr, dst: Ipv6Addr, next_header: IpProtocol, hop_limit: u8) -> Ipv6Repr {
    Ipv6Repr {
        src,
        dst,
        next_header,
        payload_len: 0,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    }
}

/// A Router Solicitation from `src` (with our MAC as SLLAO if `sllao`).
fn rs(src: Ipv6Addr, hop_limit: u8, sllao: bool) -> Vec<u8> {
    let mut opts = [0u8; 8];
    let m = GUEST_MAC.0;
    NdiscOption::SourceLinkLayerAddr(&m)
        .emit(&mut opts)
        .unwrap();
    let o = if sllao { &opts[..] } else { &opts[..0] };
    let msg = Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit {
        options: NdiscOptions::new_checked(o).unwrap(),
    });
    let mut b = vec![0u8; msg.buffer_len()];
    msg.emit(
        &src,
        &ALL_ROUTERS,
        &mut Icmpv6Packet::new_unchecked(&mut b[..]),
    );
    frame6(
        GUEST_MAC,
        ip6(src, ALL_ROUTERS, IpProtocol::ICMPV6, hop_limit),
        &b,
    )
}

/// The IPv6 header and payload of a frame.
fn parse6(f: &[u8]) -> Option<(MacAddr, Ipv6Repr, Vec<u8>)> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    if eth.ethertype() != EtherType::Ipv6 {
        return None;
    }
    let p = Ipv6Packet::new_checked(eth.payload()).ok()?;
    let r = Ipv6Repr::parse(&p).ok()?;
    Some((eth.dst_addr(), r, p.payload().to_vec()))
}

/// What an RA carried.
#[derive(Debug)]
struct Ra {
    dst_mac: MacAddr,
    ip: Ipv6Repr,
    flags: u8,
    router_lifetime: u16,
    hop_limit: u8,
    sllao: Option<Vec<u8>>,
    mtu: Option<u32>,
    prefixes: Vec<ustack_wire::ndisc::PrefixInfo>,
    rdnss: Vec<(u32, Vec<Ipv6Addr>)>,
}

fn parse_ra(f: &[u8]) -> Option<Ra> {
    let (dst_mac, ip, body) = parse6(f)?;
    if ip.next_header != IpProtocol::ICMPV6 {
        return None;
    }
    let pkt = Icmpv6Packet::new_checked(&body[..]).ok()?;
    let Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
        hop_limit,
        flags,
        router_lifetime,
        options,
        ..
    }) = Icmpv6Repr::parse(&pkt, &ip.src, &ip.dst, true).ok()?
    else {
        return None;
    };
    let rdnss = options
        .iter()
        .filter_map(|o| match o {
            NdiscOption::Rdnss { lifetime, servers } => Some((lifetime, servers.iter().collect())),
            _ => None,
        })
        .collect();
    Some(Ra {
        dst_mac,
        ip,
        flags,
        router_lifetime,
        hop_limit,
        sllao: options.source_ll_addr().map(<[u8]>::to_vec),
        mtu: options.mtu(),
        prefixes: options.prefixes().collect(),
        rdnss,
    })
}

fn ras(frames: &[Vec<u8>]) -> Vec<Ra> {
    frames.iter().filter_map(|f| parse_ra(f)).collect()
}

/// Run the timers due in the next `by` (unsolicited RAs), then stand there.
fn advance(s: &mut Stack, now: &mut Instant, by: Duration) {
    let to = *now + by;
    for _ in 0..1000 {
        match s.poll_at() {
            Some(at) if at <= to => {
                *now = (*now).max(at);
                poll(s, *now);
            }
            _ => break,
        }
    }
    *now = to;
}

/// Poll at `poll_at` until an RA goes out (at most `limit` later).
fn next_ra(s: &mut Stack, now: &mut Instant, limit: Duration) -> Option<Ra> {
    let end = *now + limit;
    for _ in 0..1000 {
        let at = s.poll_at()?;
        if at > end {
            return None;
        }
        *now = (*now).max(at);
        if let Some(ra) = ras(&poll(s, *now)).pop() {
            return Some(ra);
        }
        if at < *now {
            *now += Duration::from_millis(1);
        }
    }
    None
}

// ---------------------------------------------------------------------
// Router advertisements
// ---------------------------------------------------------------------

#[test]
fn rs_gets_an_ra_with_prefix_mtu_rdnss_and_lifetime() {
    let (mut s, mut now) = gateway(services());
    // The interface starts advertising: the first RA on the first poll.
    let first = ras(&poll(&mut s, now));
    assert_eq!(first.len(), 1, "one unsolicited RA at start");
    advance(&mut s, &mut now, Duration::from_secs(10));
    let sent = counter(&s, "Icmp6", "OutRouterAdvertisements");
    let out = recv(&mut s, now, &rs(guest_ll(), 255, true));
    assert_eq!(counter(&s, "Icmp6", "InRouterSolicits"), 1);
    // RFC 4861 6.2.6: after a random delay of at most MAX_RA_DELAY_TIME.
    let t0 = now;
    let ra = match ras(&out).pop() {
        Some(ra) => ra,
        None => next_ra(&mut s, &mut now, Duration::from_secs(1)).expect("solicited RA"),
    };
    assert!(now - t0 <= Duration::from_millis(500), "{:?}", now - t0);
    assert_eq!(ra.ip.src, gw_ll(), "from our link-local address");
    assert_eq!(ra.ip.dst, ALL_NODES);
    assert_eq!(ra.dst_mac, MacAddr([0x33, 0x33, 0, 0, 0, 1]));
    assert_eq!(ra.ip.hop_limit, 255);
    assert_eq!(ra.hop_limit, 64);
    assert_eq!(ra.flags, 0, "no M/O by default");
    assert_eq!(ra.router_lifetime, 1800);
    assert_eq!(ra.sllao.as_deref(), Some(&GW_MAC.0[..]));
    assert_eq!(ra.mtu, Some(1500));
    assert_eq!(ra.prefixes.len(), 1);
    let p = ra.prefixes[0];
    assert_eq!((p.prefix, p.prefix_len), (PREFIX, 64));
    assert_eq!(p.flags, prefix_flags::ON_LINK | prefix_flags::AUTONOMOUS);
    assert_eq!((p.valid_lifetime, p.preferred_lifetime), (86_400, 14_400));
    assert_eq!(ra.rdnss, vec![(1200, vec![DNS6])]);
    assert_eq!(counter(&s, "Icmp6", "OutRouterAdvertisements"), sent + 1);
    // The solicitation's SLLAO filled the neighbour cache.
    assert_eq!(s.neighbour6(now, guest_ll()), Some(GUEST_MAC));
}

#[test]
fn ra_flags_and_a_solicitation_from_the_unspecified_address() {
    let mut svc = services();
    if let Some(r) = svc.router.as_mut() {
        r.managed = true;
        r.other = true;
        r.rdnss.clear();
        r.mtu = None;
    }
    let (mut s, mut now) = gateway(svc);
    poll(&mut s, now);
    advance(&mut s, &mut now, Duration::from_secs(20));
    let out = recv(&mut s, now, &rs(Ipv6Addr::UNSPECIFIED, 255, false));
    let ra = match ras(&out).pop() {
        Some(ra) => ra,
        None => next_ra(&mut s, &mut now, Duration::from_secs(1)).expect("RA for RS from ::"),
    };
    assert_eq!(ra.flags, 0xc0, "M and O");
    assert!(ra.rdnss.is_empty() && ra.mtu.is_none());
}

#[test]
fn solicited_ras_are_rate_limited() {
    let (mut s, mut now) = gateway(services());
    let t_first = now;
    assert_eq!(ras(&poll(&mut s, now)).len(), 1);
    // Solicitations 1 s after an RA: the answer waits until
    // MIN_DELAY_BETWEEN_RAS (3 s) after it, and three solicitations get
    // one answer.
    now += Duration::from_secs(1);
    for _ in 0..3 {
        assert!(ras(&recv(&mut s, now, &rs(guest_ll(), 255, true))).is_empty());
        now += Duration::from_millis(10);
    }
    let ra = next_ra(&mut s, &mut now, Duration::from_secs(5));
    assert!(ra.is_some());
    assert!(
        now - t_first >= Duration::from_secs(3),
        "{:?}",
        now - t_first
    );
    assert!(now - t_first <= Duration::from_millis(3500));
    // Nothing more until the unsolicited schedule (at least 3 s on).
    let quiet_until = now + Duration::from_millis(2900);
    let ra = next_ra(&mut s, &mut now, Duration::from_secs(20));
    assert!(ra.is_some());
    assert!(now >= quiet_until);
    assert_eq!(counter(&s, "Icmp6", "InRouterSolicits"), 3);
    assert_eq!(counter(&s, "Icmp6", "OutRouterAdvertisements"), 3);
}

#[test]
fn invalid_solicitations_are_dropped_and_counted() {
    let (mut s, mut now) = gateway(services());
    poll(&mut s, now);
    advance(&mut s, &mut now, Duration::from_secs(5));
    let next = s.poll_at().unwrap();
    // Hop limit 64 (forwarded): RFC 4861 6.1.1.
    recv(&mut s, now, &rs(guest_ll(), 64, true));
    // From :: with a source link-layer address option.
    recv(&mut s, now, &rs(Ipv6Addr::UNSPECIFIED, 255, true));
    assert_eq!(counter(&s, "Ndisc", "Invalid"), 2);
    assert_eq!(s.poll_at(), Some(next), "no answer scheduled");
}

#[test]
fn unsolicited_ras_at_randomised_intervals() {
    let (mut s, mut now) = gateway(services());
    let mut times = Vec::new();
    let end = now + Duration::from_secs(4 * 3600);
    loop {
        let left = end - now;
        if next_ra(&mut s, &mut now, left).is_none() {
            break;
        }
        times.push(now);
        if times.len() > 100 {
            break;
        }
    }
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 20, "{} RAs in 4 h", times.len());
    // RFC 4861 6.2.4: the first MAX_INITIAL_RTR_ADVERTISEMENTS intervals
    // at most MAX_INITIAL_RTR_ADVERT_INTERVAL, then MinRtrAdvInterval..=
    // MaxRtrAdvInterval (198..=600 s).
    for g in &gaps[..3] {
        assert!(*g <= Duration::from_secs(16), "{g:?}");
    }
    for g in &gaps[3..] {
        assert!(
            *g >= Duration::from_secs(198) && *g <= Duration::from_secs(600),
            "{g:?}"
        );
    }
    // Randomised, not one fixed period.
    assert!(gaps[3..].iter().any(|g| *g != gaps[3]));
}

#[test]
fn turning_advertisements_off_sends_a_final_ra_with_lifetime_zero() {
    let (mut s, mut now) = gateway(services());
    assert_eq!(ras(&poll(&mut s, now)).len(), 1);
    now += Duration::from_secs(5);
    let mut svc = services();
    svc.router = None;
    s.set_address_services(now, svc).unwrap();
    let last = ras(&poll(&mut s, now));
    assert_eq!(last.len(), 1, "RFC 4861 6.2.5: a final RA");
    assert_eq!(last[0].router_lifetime, 0);
    assert_eq!(last[0].ip.src, gw_ll());
    // Then silence, while DHCP still runs.
    assert!(next_ra(&mut s, &mut now, Duration::from_secs(3600)).is_none());
    assert!(s.address_services().dhcpv4.is_some());
}

#[test]
fn services_are_off_by_default_and_checked() {
    let now = Instant::from_secs(1);
    let mut s = Stack::new(config(GW_MAC, GW4, 3), now);
    poll(&mut s, now);
    assert!(ras(&recv(&mut s, now, &rs(guest_ll(), 255, true))).is_empty());
    assert_eq!(s.poll_at(), None);
    let mut bad = services();
    if let Some(r) = bad.router.as_mut() {
        r.max_interval = Duration::from_secs(2);
    }
    assert!(s.set_address_services(now, bad).is_err());
    let mut bad = services();
    if let Some(d) = bad.dhcpv4.as_mut() {
        d.pool_start = Ipv4Addr::new(10, 0, 3, 1);
    }
    assert!(s.set_address_services(now, bad).is_err());
    let mut bad = services();
    if let Some(d) = bad.dhcpv6.as_mut() {
        d.domains = vec!["a..b".into()];
    }
    assert!(s.set_address_services(now, bad).is_err());
    s.set_address_services(now, services()).unwrap();
    assert_eq!(s.address_services(), services());
}

// ---------------------------------------------------------------------
// DHCPv4
// ---------------------------------------------------------------------

struct Req4<'a> {
    mac: MacAddr,
    msg: M4,
    xid: u32,
    flags: u16,
    ciaddr: Ipv4Addr,
    extra: &'a [Dhcpv4Option<'a>],
}

fn dhcp4_frame(r: &Req4<'_>, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let mut obuf = [0u8; 312];
    let mut w = Dhcpv4OptionWriter::new(&mut obuf);
    w.put(&Dhcpv4Option::MessageType(r.msg)).unwrap();
    for o in r.extra {
        w.put(o).unwrap();
    }
    let area = w.finish(60).unwrap();
    let mut chaddr = [0u8; 16];
    chaddr[..6].copy_from_slice(&r.mac.0);
    let m = Dhcpv4Repr {
        op: BOOTREQUEST,
        htype: 1,
        hlen: 6,
        hops: 0,
        xid: r.xid,
        secs: 0,
        flags: r.flags,
        ciaddr: r.ciaddr,
        yiaddr: Ipv4Addr::UNSPECIFIED,
        siaddr: Ipv4Addr::UNSPECIFIED,
        giaddr: Ipv4Addr::UNSPECIFIED,
        chaddr,
        sname: &[],
        file: &[],
        options: Dhcpv4Options::new_checked(area).unwrap(),
    };
    let mut body = vec![0u8; m.buffer_len()];
    m.emit(&mut body).unwrap();
    udp4_frame(r.mac, src, dst, 68, 67, &body)
}

fn udp4_frame(
    mac: MacAddr,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sp: u16,
    dp: u16,
    body: &[u8],
) -> Vec<u8> {
    let mut udp = vec![0u8; 8 + body.len()];
    udp[8..].copy_from_slice(body);
    UdpRepr {
        src_port: sp,
        dst_port: dp,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut udp[..]),
        src,
        dst,
        body.len(),
        true,
    );
    let ip = Ipv4Repr {
        src,
        dst,
        protocol: IpProtocol::Udp,
        payload_len: udp.len(),
        ttl: 64,
        dscp_ecn: 0,
        ident: 1,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
    };
    let eth_dst = if dst.is_broadcast() {
        MacAddr::BROADCAST
    } else {
        GW_MAC
    };
    frame(mac, eth_dst, &ip, &udp)
}

/// A DHCP reply: its Ethernet destination, IP header and message bytes.
fn dhcp4_reply(frames: &[Vec<u8>]) -> Option<(MacAddr, Ipv4Repr, Vec<u8>)> {
    frames.iter().find_map(|f| {
        let eth = EthernetFrame::new_checked(&f[..]).ok()?;
        let (ip, payload) = parse_ip(f)?;
        let udp = UdpPacket::new_checked(&payload[..]).ok()?;
        UdpRepr::parse(&udp, ip.src, ip.dst, true).ok()?;
        (udp.src_port() == 67 && udp.dst_port() == 68)
            .then(|| (eth.dst_addr(), ip, udp.payload().to_vec()))
    })
}

fn parse4(b: &[u8]) -> Dhcpv4Repr<'_> {
    Dhcpv4Repr::parse(&Dhcpv4Packet::new_unchecked(b)).unwrap()
}

#[test]
fn dhcpv4_discover_offer_request_ack() {
    let (mut s, now) = gateway(services());
    poll(&mut s, now);
    let any = Ipv4Addr::UNSPECIFIED;
    let bc = Ipv4Addr::BROADCAST;
    let prl = [1u8, 3, 6, 51];
    let discover = Req4 {
        mac: GUEST_MAC,
        msg: M4::Discover,
        xid: 0x1234_5678,
        flags: 0,
        ciaddr: any,
        extra: &[Dhcpv4Option::ParameterRequestList(&prl)],
    };
    let out = recv(&mut s, now, &dhcp4_frame(&discover, any, bc));
    let (mac, ip, body) = dhcp4_reply(&out).expect("OFFER");
    let m = parse4(&body);
    assert_eq!(m.message_type(), Some(M4::Offer));
    assert_eq!(m.xid, 0x1234_5678);
    assert_eq!(m.yiaddr, GUEST4, "the first client gets 10.0.2.15");
    // No broadcast bit: unicast to yiaddr at the client's MAC (RFC 2131 4.1).
    assert_eq!((mac, ip.dst, ip.src), (GUEST_MAC, GUEST4, GW4));
    let o = m.options;
    assert_eq!(o.server_id(), Some(GW4));
    assert_eq!(o.subnet_mask(), Some(Ipv4Addr::new(255, 255, 255, 0)));
    assert_eq!(o.routers().map(|l| l.iter().collect()), Some(vec![GW4]));
    assert_eq!(
        o.dns_servers().map(|l| l.iter().collect()),
        Some(vec![DNS4])
    );
    assert_eq!(o.lease_time(), Some(86_400));
    assert!(body.len() >= 300, "BOOTP minimum length");

    // REQUEST with the broadcast bit: the ACK is broadcast.
    let request = Req4 {
        msg: M4::Request,
        flags: FLAG_BROADCAST,
        extra: &[
            Dhcpv4Option::ServerId(GW4),
            Dhcpv4Option::RequestedIp(GUEST4),
        ],
        ..discover
    };
    let out = recv(&mut s, now, &dhcp4_frame(&request, any, bc));
    let (mac, ip, body) = dhcp4_reply(&out).expect("ACK");
    let m = parse4(&body);
    assert_eq!(m.message_type(), Some(M4::Ack));
    assert_eq!(m.yiaddr, GUEST4);
    assert_eq!((mac, ip.dst), (MacAddr::BROADCAST, bc));
    assert_eq!(m.options.lease_time(), Some(86_400));

    // Renewing: unicast from the address to the server, ciaddr set; the
    // ACK goes to ciaddr.
    let renew = Req4 {
        msg: M4::Request,
        flags: 0,
        ciaddr: GUEST4,
        extra: &[],
        ..discover
    };
    let out = recv(&mut s, now, &dhcp4_frame(&renew, GUEST4, GW4));
    let (mac, ip, body) = dhcp4_reply(&out).expect("renewal ACK");
    assert_eq!(parse4(&body).message_type(), Some(M4::Ack));
    assert_eq!((mac, ip.dst), (GUEST_MAC, GUEST4));

    // INIT-REBOOT asking for an address not ours to give: NAK, broadcast.
    let wrong = Req4 {
        msg: M4::Request,
        flags: 0,
        ciaddr: any,
        extra: &[Dhcpv4Option::RequestedIp(Ipv4Addr::new(10, 0, 2, 99))],
        ..discover
    };
    let out = recv(&mut s, now, &dhcp4_frame(&wrong, any, bc));
    let (mac, ip, body) = dhcp4_reply(&out).expect("NAK");
    let m = parse4(&body);
    assert_eq!(m.message_type(), Some(M4::Nak));
    assert_eq!((mac, ip.dst), (MacAddr::BROADCAST, bc));
    assert_eq!(m.options.lease_time(), None);

    // Another client is offered the next address; it cannot take ours.
    let other = Req4 {
        mac: OTHER_MAC,
        xid: 9,
        ..discover
    };
    let out = recv(&mut s, now, &dhcp4_frame(&other, any, bc));
    let (_, _, body) = dhcp4_reply(&out).expect("OFFER to the second client");
    assert_eq!(parse4(&body).yiaddr, Ipv4Addr::new(10, 0, 2, 16));
    let steal = Req4 {
        mac: OTHER_MAC,
        msg: M4::Request,
        extra: &[Dhcpv4Option::RequestedIp(GUEST4)],
        ..discover
    };
    let out = recv(&mut s, now, &dhcp4_frame(&steal, any, bc));
    let (_, _, body) = dhcp4_reply(&out).expect("NAK to the thief");
    assert_eq!(parse4(&body).message_type(), Some(M4::Nak));

    // INFORM: configuration without a lease, to ciaddr.
    let inform = Req4 {
        msg: M4::Inform,
        ciaddr: GUEST4,
        extra: &[],
        ..discover
    };
    let out = recv(&mut s, now, &dhcp4_frame(&inform, GUEST4, bc));
    let (_, ip, body) = dhcp4_reply(&out).expect("ACK to INFORM");
    let m = parse4(&body);
    assert_eq!(m.message_type(), Some(M4::Ack));
    assert_eq!(m.yiaddr, any);
    assert_eq!(m.options.lease_time(), None);
    assert_eq!(
        m.options.dns_servers().map(|l| l.iter().collect()),
        Some(vec![DNS4])
    );
    assert_eq!(ip.dst, GUEST4);

    // RELEASE: the address becomes free; a third client can have it once
    // the second client's offer is taken too.
    let release = Req4 {
        msg: M4::Release,
        ciaddr: GUEST4,
        extra: &[Dhcpv4Option::ServerId(GW4)],
        ..discover
    };
    assert!(dhcp4_reply(&recv(&mut s, now, &dhcp4_frame(&release, GUEST4, GW4))).is_none());
    let third = Req4 {
        mac: MacAddr([0x52, 0x54, 0, 0, 0, 0x58]),
        ..discover
    };
    let out = recv(&mut s, now, &dhcp4_frame(&third, any, bc));
    let (_, _, body) = dhcp4_reply(&out).expect("OFFER to the third client");
    assert_eq!(parse4(&body).yiaddr, GUEST4);

    let c = s.counters();
    assert_eq!(c.dhcp.InDiscovers, 3);
    assert_eq!(c.dhcp.OutOffers, 3);
    assert_eq!(c.dhcp.OutAcks, 3);
    assert_eq!(c.dhcp.OutNaks, 2);
    assert_eq!(c.dhcp.InReleases, 1);
    assert_eq!(c.ip.InAddrErrors, 0, "0.0.0.0 sources taken by the server");
}

#[test]
fn dhcpv4_pool_exhausted_and_decline() {
    let mut svc = services();
    if let Some(d) = svc.dhcpv4.as_mut() {
        d.pool_size = 1;
    }
    let (mut s, now) = gateway(svc);
    let any = Ipv4Addr::UNSPECIFIED;
    let bc = Ipv4Addr::BROADCAST;
    let a = Req4 {
        mac: GUEST_MAC,
        msg: M4::Discover,
        xid: 1,
        flags: 0,
        ciaddr: any,
        extra: &[],
    };
    assert!(dhcp4_reply(&recv(&mut s, now, &dhcp4_frame(&a, any, bc))).is_some());
    let b = Req4 {
        mac: OTHER_MAC,
        ..a
    };
    assert!(dhcp4_reply(&recv(&mut s, now, &dhcp4_frame(&b, any, bc))).is_none());
    assert_eq!(s.counters().dhcp.NoAddrs, 1);
    // The first client's offer lapses after a minute: the second gets it.
    let later = now + Duration::from_secs(61);
    let (_, _, body) = dhcp4_reply(&recv(&mut s, later, &dhcp4_frame(&b, any, bc))).unwrap();
    assert_eq!(parse4(&body).yiaddr, GUEST4);
    // It declines it (someone answers ARP for it): nobody gets it now.
    let decline = Req4 {
        msg: M4::Decline,
        extra: &[
            Dhcpv4Option::ServerId(GW4),
            Dhcpv4Option::RequestedIp(GUEST4),
        ],
        ..b
    };
    recv(&mut s, later, &dhcp4_frame(&decline, any, bc));
    assert!(dhcp4_reply(&recv(&mut s, later, &dhcp4_frame(&a, any, bc))).is_none());
    assert!(dhcp4_reply(&recv(&mut s, later, &dhcp4_frame(&b, any, bc))).is_none());
}

// ---------------------------------------------------------------------
// DHCPv6
// ---------------------------------------------------------------------

const DUID: &[u8] = &[0, 3, 0, 1, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const DUID2: &[u8] = &[0, 3, 0, 1, 0x52, 0x54, 0x00, 0x12, 0x34, 0x57];

fn ia_na(iaid: u32, addr: Option<Ipv6Addr>, buf: &mut [u8]) -> Dhcpv6Option<'_> {
    let mut w = Dhcpv6OptionWriter::new(buf);
    if let Some(a) = addr {
        w.put(&Dhcpv6Option::IaAddr(IaAddress {
            addr: a,
            preferred_lifetime: 0,
            valid_lifetime: 0,
            options: Dhcpv6Options::default(),
        }))
        .unwrap();
    }
    Dhcpv6Option::IaNa(IaNa {
        iaid,
        t1: 0,
        t2: 0,
        options: w.finish(),
    })
}

fn dhcp6_frame(msg: M6, xid: u32, opts: &[Dhcpv6Option<'_>], dst: Ipv6Addr) -> Vec<u8> {
    let mut obuf = [0u8; 1024];
    let mut w = Dhcpv6OptionWriter::new(&mut obuf);
    for o in opts {
        w.put(o).unwrap();
    }
    let m = Dhcpv6Repr {
        msg_type: msg,
        transaction_id: xid,
        options: w.finish(),
    };
    let mut body = vec![0u8; m.buffer_len()];
    m.emit(&mut body).unwrap();
    udp6_frame(dst, 546, 547, &body)
}

fn udp6_frame(dst: Ipv6Addr, sp: u16, dp: u16, body: &[u8]) -> Vec<u8> {
    let src = guest_ll();
    let mut udp = vec![0u8; 8 + body.len()];
    udp[8..].copy_from_slice(body);
    UdpRepr {
        src_port: sp,
        dst_port: dp,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut udp[..]),
        src,
        dst,
        body.len(),
        true,
    );
    frame6(GUEST_MAC, ip6(src, dst, IpProtocol::Udp, 1), &udp)
}

/// The DHCPv6 answer in `frames`: destination and message bytes.
fn dhcp6_reply(frames: &[Vec<u8>]) -> Option<(Ipv6Repr, Vec<u8>)> {
    frames.iter().find_map(|f| {
        let (_, ip, payload) = parse6(f)?;
        let udp = UdpPacket::new_checked(&payload[..]).ok()?;
        UdpRepr::parse(&udp, ip.src, ip.dst, true).ok()?;
        (udp.src_port() == 547 && udp.dst_port() == 546).then(|| (ip, udp.payload().to_vec()))
    })
}

fn parse6m(b: &[u8]) -> Dhcpv6Repr<'_> {
    Dhcpv6Repr::parse(&Dhcpv6Packet::new_unchecked(b)).unwrap()
}

/// The guest's link-local address is resolved (as after its RS), so
/// unicast replies leave at once.
fn gateway6() -> (Stack, Instant) {
    let (mut s, mut now) = gateway(services());
    poll(&mut s, now);
    now += Duration::from_secs(10);
    recv(&mut s, now, &rs(guest_ll(), 255, true));
    (s, now)
}

fn ia_addrs(m: &Dhcpv6Repr<'_>) -> Vec<(u32, Vec<Ipv6Addr>, Option<u16>)> {
    m.options
        .ia_na()
        .map(|ia| {
            (
                ia.iaid,
                ia.addresses().map(|a| a.addr).collect(),
                ia.options.status_code().map(|(c, _)| c),
            )
        })
        .collect()
}

#[test]
fn dhcpv6_solicit_advertise_request_reply() {
    let (mut s, now) = gateway6();
    let mc = ALL_RELAY_AGENTS_AND_SERVERS;
    let mut ib = [0u8; 64];
    let oro = [0u8, 23, 0, 24];
    let solicit = [
        Dhcpv6Option::ClientId(DUID),
        Dhcpv6Option::ElapsedTime(0),
        Dhcpv6Option::Oro(&oro),
        ia_na(7, None, &mut ib),
    ];
    let out = recv(
        &mut s,
        now,
        &dhcp6_frame(M6::Solicit, 0xabcdef, &solicit, mc),
    );
    let (ip, body) = dhcp6_reply(&out).expect("Advertise");
    assert_eq!((ip.src, ip.dst), (gw_ll(), guest_ll()));
    let m = parse6m(&body);
    assert_eq!(m.msg_type, M6::Advertise);
    assert_eq!(m.transaction_id, 0xabcdef);
    assert_eq!(m.options.client_id(), Some(DUID));
    let server_id = m.options.server_id().expect("server id").to_vec();
    assert_eq!(
        server_id,
        [&[0u8, 3, 0, 1][..], &GW_MAC.0].concat(),
        "DUID-LL"
    );
    assert_eq!(m.options.preference(), Some(255));
    assert_eq!(ia_addrs(&m), vec![(7, vec![GUEST6], None)]);
    assert_eq!(
        m.options.dns_servers().map(|l| l.iter().collect()),
        Some(vec![DNS6])
    );
    let domains = m
        .options
        .iter()
        .find(|o| o.code() == oc6::DOMAIN_LIST)
        .expect("domain list");
    assert_eq!(
        domains,
        Dhcpv6Option::Unknown {
            code: oc6::DOMAIN_LIST,
            data: b"\x07example\x04test\x00"
        }
    );

    // Request with the server's id: Reply, the same address.
    let mut ib = [0u8; 64];
    let request = [
        Dhcpv6Option::ClientId(DUID),
        Dhcpv6Option::ServerId(&server_id),
        ia_na(7, Some(GUEST6), &mut ib),
    ];
    let out = recv(&mut s, now, &dhcp6_frame(M6::Request, 2, &request, mc));
    let (_, body) = dhcp6_reply(&out).expect("Reply");
    let m = parse6m(&body);
    assert_eq!(m.msg_type, M6::Reply);
    assert_eq!(ia_addrs(&m), vec![(7, vec![GUEST6], None)]);
    let ia = m.options.ia_na().next().unwrap();
    assert_eq!((ia.t1, ia.t2), (1800, 2880));
    let a = ia.addresses().next().unwrap();
    assert_eq!((a.preferred_lifetime, a.valid_lifetime), (3600, 7200));

    // Renew extends it; the same request to a unicast address is told to
    // use multicast (no Server Unicast option was offered).
    let out = recv(&mut s, now, &dhcp6_frame(M6::Renew, 3, &request, mc));
    let (_, body) = dhcp6_reply(&out).expect("Renew reply");
    assert_eq!(ia_addrs(&parse6m(&body)), vec![(7, vec![GUEST6], None)]);
    let out = recv(&mut s, now, &dhcp6_frame(M6::Renew, 4, &request, gw_ll()));
    let (_, body) = dhcp6_reply(&out).expect("UseMulticast");
    let m = parse6m(&body);
    assert_eq!(
        m.options.status_code().map(|(c, _)| c),
        Some(status::USE_MULTICAST)
    );
    assert!(m.options.ia_na().next().is_none());

    // Another client (another DUID) gets the next address, with Rapid
    // Commit in one round trip.
    let mut ib = [0u8; 64];
    let rapid = [
        Dhcpv6Option::ClientId(DUID2),
        Dhcpv6Option::RapidCommit,
        ia_na(1, None, &mut ib),
    ];
    let out = recv(&mut s, now, &dhcp6_frame(M6::Solicit, 5, &rapid, mc));
    let (_, body) = dhcp6_reply(&out).expect("rapid Reply");
    let m = parse6m(&body);
    assert_eq!(m.msg_type, M6::Reply);
    assert!(m.options.rapid_commit());
    let next = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x101);
    assert_eq!(ia_addrs(&m), vec![(1, vec![next], None)]);

    // A third client: pool (2) exhausted.
    let duid3 = [0u8, 3, 0, 1, 1, 2, 3, 4, 5, 6];
    let mut ib = [0u8; 64];
    let s3 = [Dhcpv6Option::ClientId(&duid3), ia_na(1, None, &mut ib)];
    let out = recv(&mut s, now, &dhcp6_frame(M6::Solicit, 6, &s3, mc));
    let (_, body) = dhcp6_reply(&out).expect("Advertise");
    assert_eq!(
        ia_addrs(&parse6m(&body)),
        vec![(1, vec![], Some(status::NO_ADDRS_AVAIL))]
    );

    // Release the first: Success; a renewal then finds no binding.
    let out = recv(&mut s, now, &dhcp6_frame(M6::Release, 7, &request, mc));
    let (_, body) = dhcp6_reply(&out).expect("Release reply");
    assert_eq!(
        parse6m(&body).options.status_code().map(|(c, _)| c),
        Some(status::SUCCESS)
    );
    let out = recv(&mut s, now, &dhcp6_frame(M6::Renew, 8, &request, mc));
    let (_, body) = dhcp6_reply(&out).expect("NoBinding");
    assert_eq!(
        ia_addrs(&parse6m(&body)),
        vec![(7, vec![], Some(status::NO_BINDING))]
    );
    // Rebind takes it back.
    let mut ib = [0u8; 64];
    let rebind = [
        Dhcpv6Option::ClientId(DUID),
        ia_na(7, Some(GUEST6), &mut ib),
    ];
    let out = recv(&mut s, now, &dhcp6_frame(M6::Rebind, 9, &rebind, mc));
    let (_, body) = dhcp6_reply(&out).expect("Rebind reply");
    assert_eq!(ia_addrs(&parse6m(&body)), vec![(7, vec![GUEST6], None)]);

    let c = &s.counters().dhcp6;
    assert_eq!((c.InSolicits, c.OutAdvertises), (3, 2));
    assert_eq!(c.OutReplies, 7);
    assert_eq!(c.InDiscards, 0);
}

#[test]
fn dhcpv6_information_request_and_confirm() {
    let (mut s, now) = gateway6();
    let mc = ALL_RELAY_AGENTS_AND_SERVERS;
    let oro = [0u8, 23];
    let info = [Dhcpv6Option::ClientId(DUID), Dhcpv6Option::Oro(&oro)];
    let out = recv(
        &mut s,
        now,
        &dhcp6_frame(M6::InformationRequest, 1, &info, mc),
    );
    let (_, body) = dhcp6_reply(&out).expect("Reply");
    let m = parse6m(&body);
    assert_eq!(m.msg_type, M6::Reply);
    assert_eq!(
        m.options.dns_servers().map(|l| l.iter().collect()),
        Some(vec![DNS6])
    );
    assert!(m.options.ia_na().next().is_none());
    // Without a Client ID too (RFC 8415 18.2.6 lets the client leave it out).
    let out = recv(
        &mut s,
        now,
        &dhcp6_frame(M6::InformationRequest, 2, &[], mc),
    );
    let (_, body) = dhcp6_reply(&out).expect("Reply without client id");
    assert_eq!(parse6m(&body).options.client_id(), None);
    // Confirm: on-link address → Success, another prefix → NotOnLink.
    let mut ib = [0u8; 64];
    let ok = [
        Dhcpv6Option::ClientId(DUID),
        ia_na(1, Some(GUEST6), &mut ib),
    ];
    let out = recv(&mut s, now, &dhcp6_frame(M6::Confirm, 3, &ok, mc));
    let (_, body) = dhcp6_reply(&out).expect("Confirm reply");
    assert_eq!(
        parse6m(&body).options.status_code().map(|(c, _)| c),
        Some(status::SUCCESS)
    );
    let elsewhere = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    let mut ib = [0u8; 64];
    let bad = [
        Dhcpv6Option::ClientId(DUID),
        ia_na(1, Some(elsewhere), &mut ib),
    ];
    let out = recv(&mut s, now, &dhcp6_frame(M6::Confirm, 4, &bad, mc));
    let (_, body) = dhcp6_reply(&out).expect("Confirm reply");
    assert_eq!(
        parse6m(&body).options.status_code().map(|(c, _)| c),
        Some(status::NOT_ON_LINK)
    );
}

// ---------------------------------------------------------------------
// Hostile input
// ---------------------------------------------------------------------

#[test]
fn malformed_and_invalid_messages_are_counted_and_dropped() {
    let (mut s, now) = gateway6();
    let mc = ALL_RELAY_AGENTS_AND_SERVERS;
    let any = Ipv4Addr::UNSPECIFIED;
    let bc = Ipv4Addr::BROADCAST;
    // DHCPv4: too short, an option running past the end, a reply (op 2),
    // no message type, relayed.
    let short = udp4_frame(GUEST_MAC, any, bc, 68, 67, &[1, 1, 6, 0]);
    assert!(dhcp4_reply(&recv(&mut s, now, &short)).is_none());
    let d = Req4 {
        mac: GUEST_MAC,
        msg: M4::Discover,
        xid: 1,
        flags: 0,
        ciaddr: any,
        extra: &[],
    };
    let good = dhcp4_frame(&d, any, bc);
    let dhcp_at = 14 + 20 + 8;
    let mut past = good.clone();
    past.truncate(dhcp_at + 240 + 3);
    let l = past.len();
    past[l - 3..].copy_from_slice(&[53, 200, 1]);
    let fix = |f: &mut Vec<u8>| {
        // Rebuild the UDP/IP lengths and checksums around a changed body.
        let body = f[dhcp_at..].to_vec();
        *f = udp4_frame(GUEST_MAC, any, bc, 68, 67, &body);
    };
    fix(&mut past);
    assert!(dhcp4_reply(&recv(&mut s, now, &past)).is_none());
    let mut reply_op = good.clone();
    reply_op[dhcp_at] = 2;
    fix(&mut reply_op);
    assert!(dhcp4_reply(&recv(&mut s, now, &reply_op)).is_none());
    let mut relayed = good.clone();
    relayed[dhcp_at + 24..dhcp_at + 28].copy_from_slice(&[10, 9, 9, 9]);
    fix(&mut relayed);
    assert!(dhcp4_reply(&recv(&mut s, now, &relayed)).is_none());
    let c = &s.counters().dhcp;
    assert_eq!(c.InErrors, 2, "short, option past the end");
    assert_eq!(c.InDiscards, 2, "op 2 (a reply), relayed");

    // DHCPv6: truncated header, option past the end, Solicit with a Server
    // ID, Request without one, Information-request with an IA_NA, an
    // Advertise sent to the server.
    let f = udp6_frame(mc, 546, 547, &[1, 0]);
    assert!(dhcp6_reply(&recv(&mut s, now, &f)).is_none());
    let f = udp6_frame(mc, 546, 547, &[1, 0, 0, 1, 0, 1, 0, 9, 1]);
    assert!(dhcp6_reply(&recv(&mut s, now, &f)).is_none());
    let sid = [0u8, 3, 0, 1, 1, 1, 1, 1, 1, 1];
    let bad = [Dhcpv6Option::ClientId(DUID), Dhcpv6Option::ServerId(&sid)];
    for (t, o) in [
        (M6::Solicit, &bad[..]),
        (M6::Request, &bad[..1]),
        (M6::Advertise, &bad[..1]),
    ] {
        assert!(dhcp6_reply(&recv(&mut s, now, &dhcp6_frame(t, 1, o, mc))).is_none());
    }
    let mut ib = [0u8; 64];
    let info_ia = [ia_na(1, None, &mut ib)];
    let f = dhcp6_frame(M6::InformationRequest, 1, &info_ia, mc);
    assert!(dhcp6_reply(&recv(&mut s, now, &f)).is_none());
    let c = &s.counters().dhcp6;
    assert_eq!(c.InErrors, 2);
    assert_eq!(c.InDiscards, 4);
    assert_eq!(c.OutReplies + c.OutAdvertises, 0);

    // Random corruption of valid messages never panics (bounded loop).
    let mut ib = [0u8; 64];
    let seeds = [
        good,
        dhcp6_frame(
            M6::Solicit,
            1,
            &[Dhcpv6Option::ClientId(DUID), ia_na(1, None, &mut ib)],
            mc,
        ),
        rs(guest_ll(), 255, true),
    ];
    let mut x: u64 = 0x1234_5678_9abc_def0;
    let mut t = now;
    for i in 0..6000 {
        let mut f = seeds[i % seeds.len()].clone();
        for _ in 0..1 + (i % 4) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = 34 + (x as usize >> 8) % (f.len() - 34);
            f[at] ^= (x as u8) | 1;
        }
        t += Duration::from_millis(10);
        s.receive(t, &f, &mut |_| {});
        s.poll(t, &mut |_| {});
    }
}

#[test]
fn services_use_only_the_documented_groups() {
    // With the services off, DHCPv6 to ff02::1:2 and RS to ff02::2 are not
    // for us (not joined): dropped before delivery, silently (a group we
    // are not in, as Linux drops it).
    let now = Instant::from_secs(1);
    let mut s = Stack::new(config(GW_MAC, GW4, 3), now);
    let f = dhcp6_frame(M6::InformationRequest, 1, &[], ALL_RELAY_AGENTS_AND_SERVERS);
    assert!(dhcp6_reply(&recv(&mut s, now, &f)).is_none());
    assert_eq!(counter(&s, "Ip6", "InMcastPkts"), 1);
    assert_eq!(counter(&s, "Ip6", "InDelivers"), 0);
    assert_eq!(counter(&s, "Udp6", "InDatagrams"), 0);
    assert_eq!(counter(&s, "Ip6", "InAddrErrors"), 0);
}
