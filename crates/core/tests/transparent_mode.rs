//! Transparent mode: an ordinary "guest" Stack (10.0.2.15, gateway 10.0.2.2)
//! talks to "the world" — a transparent Stack that answers for every address
//! on a virtual clock.

mod stack_util;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

use stack_util::{config, counter, parse_ip, Net};
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{
    BindError, Config, ConnectError, PendingSyn, Refuse, Stack, TcpError, TransparentConfig,
    UdpError,
};
use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv4::{DstUnreachable, Icmpv4Packet, Icmpv4Repr};
use ustack_wire::ip::IpProtocol;

const GUEST: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
const GW: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
const FAR: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);
const GUEST_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x15]);
const WORLD_MAC: MacAddr = MacAddr([0x52, 0x55, 10, 0, 2, 2]);

fn guest_cfg() -> Config {
    let mut c = config(GUEST_MAC, GUEST, 11);
    c.gateway = Some(GW);
    c
}

fn world_cfg() -> Config {
    config(WORLD_MAC, GW, 22)
}

fn tcfg() -> TransparentConfig {
    TransparentConfig {
        guest: Some(GUEST),
        ..TransparentConfig::default()
    }
}

/// A = guest, B = transparent world.
fn net_with(t: TransparentConfig) -> Net {
    let mut net = Net::with_configs(guest_cfg(), world_cfg());
    net.b = Stack::new_transparent(world_cfg(), t, net.now);
    net
}

fn net() -> Net {
    net_with(tcfg())
}

fn pending(net: &mut Net) -> Vec<PendingSyn> {
    net.b.tcp_pending_syns().collect()
}

/// Guest connects to `dst`; returns the guest handle and the held SYN.
fn guest_connect(net: &mut Net, dst: SocketAddrV4) -> (ustack_core::TcpHandle, PendingSyn) {
    let h = net.a.tcp_connect(net.now, dst, None).expect("connect");
    net.advance(Duration::from_millis(10));
    let p = pending(net);
    assert_eq!(p.len(), 1, "one SYN held: {p:?}");
    (h, p[0])
}

fn recv_all(s: &mut Stack, h: ustack_core::TcpHandle) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.tcp_recv(h, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn syn_to_any_address_is_held_absorbed_then_accepted() {
    let mut net = net();
    let dst = SocketAddrV4::new(FAR, 80);
    let (h, syn) = guest_connect(&mut net, dst);
    assert_eq!(syn.local, SocketAddr::V4(dst));
    assert_eq!(syn.remote.ip(), IpAddr::V4(GUEST));
    assert_eq!(net.b.tcp_pending_syn_count(), 1);
    // The guest retransmits its SYN (RTO 1 s): absorbed, reported no more,
    // and the guest sees neither RST nor SYN|ACK.
    net.advance(Duration::from_millis(3500));
    assert!(pending(&mut net).is_empty());
    assert!(net.b.transparent_counters().syns_absorbed >= 2);
    assert_eq!(counter(&net.b, "Tcp", "OutSegs"), 0);
    assert_eq!(net.a.tcp_status(h).unwrap().state, State::SynSent);

    let w = net.b.tcp_accept_pending(net.now, syn.id).expect("accept");
    assert_eq!(net.b.tcp_pending_syn_count(), 0);
    assert!(net.run_until(Duration::from_secs(2), |n| {
        n.a.tcp_status(h).unwrap().state == State::Established
            && n.b.tcp_status(w).unwrap().state == State::Established
    }));
    let st = net.b.tcp_status(w).unwrap();
    assert_eq!(st.local, dst.into());
    assert_eq!(st.remote, syn.remote);
    // Every frame the world sent for this connection came from FAR.
    let srcs: Vec<Ipv4Addr> = net
        .log_ba
        .iter()
        .filter_map(|f| parse_ip(f))
        .filter(|(ip, _)| ip.protocol == IpProtocol::Tcp)
        .map(|(ip, _)| ip.src)
        .collect();
    assert!(
        !srcs.is_empty() && srcs.iter().all(|s| *s == FAR),
        "{srcs:?}"
    );

    // Data both ways, then a clean close.
    assert_eq!(net.a.tcp_send(h, b"GET / HTTP/1.0\r\n\r\n").unwrap(), 18);
    assert_eq!(net.b.tcp_send(w, b"hello from far away").unwrap(), 19);
    net.advance(Duration::from_millis(100));
    assert_eq!(recv_all(&mut net.b, w), b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(recv_all(&mut net.a, h), b"hello from far away");
    net.a.tcp_close(h);
    net.b.tcp_shutdown(w).unwrap();
    net.advance(Duration::from_millis(100));
    let mut buf = [0u8; 8];
    assert_eq!(net.b.tcp_recv(w, &mut buf), Ok(0));
    net.b.tcp_close(w);
    net.advance(Duration::from_secs(130));
    assert_eq!(net.b.tcp_socket_count(), 0);
    // Accepting the same id again is refused.
    assert_eq!(
        net.b.tcp_accept_pending(net.now, syn.id),
        Err(TcpError::InvalidHandle)
    );
}

#[test]
fn refuse_with_rst_gives_connection_refused() {
    let mut net = net();
    let (h, syn) = guest_connect(&mut net, SocketAddrV4::new(GW, 8080));
    net.b.tcp_refuse_pending(net.now, syn.id, Refuse::Rst);
    net.advance(Duration::from_millis(10));
    let st = net.a.tcp_status(h).unwrap();
    assert_eq!(st.state, State::Closed);
    assert_eq!(st.pending_error, Some(TcpError::ConnectionRefused));
    assert_eq!(counter(&net.b, "Tcp", "OutRsts"), 1);
    // Refusing a stale id is a no-op.
    net.b.tcp_refuse_pending(net.now, syn.id, Refuse::Rst);
    net.advance(Duration::from_millis(10));
    assert_eq!(counter(&net.b, "Tcp", "OutRsts"), 1);
}

#[test]
fn refuse_with_icmp_quotes_the_syn_from_the_destination() {
    let mut net = net();
    let dst = SocketAddrV4::new(FAR, 443);
    let (h, syn) = guest_connect(&mut net, dst);
    let before = net.log_ba.len();
    net.b.tcp_refuse_pending(
        net.now,
        syn.id,
        Refuse::IcmpUnreachable(DstUnreachable::HostUnreachable),
    );
    net.advance(Duration::from_millis(10));
    let icmp: Vec<_> = net.log_ba[before..]
        .iter()
        .filter_map(|f| parse_ip(f))
        .filter(|(ip, _)| ip.protocol == IpProtocol::Icmp)
        .collect();
    assert_eq!(icmp.len(), 1);
    let (ip, body) = &icmp[0];
    assert_eq!((ip.src, ip.dst), (FAR, GUEST));
    let pkt = Icmpv4Packet::new_checked(&body[..]).unwrap();
    match Icmpv4Repr::parse(&pkt, true).unwrap() {
        Icmpv4Repr::DstUnreachable {
            reason,
            header,
            data,
            ..
        } => {
            assert_eq!(reason, DstUnreachable::HostUnreachable);
            assert_eq!((header.src, header.dst), (GUEST, FAR));
            assert_eq!(header.protocol, IpProtocol::Tcp);
            assert_eq!(&data[0..2], &syn.remote.port().to_be_bytes());
            assert_eq!(&data[2..4], &443u16.to_be_bytes());
        }
        other => panic!("not an unreachable: {other:?}"),
    }
    // Our guest treats host unreachable as a soft error (RFC 1122); a port
    // unreachable aborts the attempt.
    assert_eq!(counter(&net.a, "Icmp", "InDestUnreachs"), 1);
    let (h2, syn2) = guest_connect(&mut net, SocketAddrV4::new(FAR, 444));
    net.b.tcp_refuse_pending(
        net.now,
        syn2.id,
        Refuse::IcmpUnreachable(DstUnreachable::PortUnreachable),
    );
    net.advance(Duration::from_millis(10));
    assert_eq!(
        net.a.tcp_status(h2).unwrap().pending_error,
        Some(TcpError::ConnectionRefused)
    );
    let _ = h;
}

#[test]
fn held_syns_are_bounded_and_expire() {
    let mut net = net_with(TransparentConfig {
        max_pending_syns: 2,
        pending_syn_timeout: Duration::from_secs(5),
        ..tcfg()
    });
    let mut guest = Vec::new();
    for port in [1001u16, 1002, 1003] {
        guest.push(
            net.a
                .tcp_connect(net.now, SocketAddrV4::new(FAR, port), None)
                .unwrap(),
        );
    }
    net.advance(Duration::from_millis(10));
    let p = pending(&mut net);
    let ports: Vec<u16> = p.iter().map(|s| s.local.port()).collect();
    assert_eq!(ports, vec![1002, 1003], "the oldest was dropped");
    assert_eq!(net.b.tcp_pending_syn_count(), 2);
    assert_eq!(net.b.transparent_counters().syns_dropped, 1);
    // The guest gives up (a SYN retransmitted later would be held anew).
    for h in guest {
        net.a.tcp_abort(h);
    }
    net.advance(Duration::from_secs(6));
    assert_eq!(net.b.tcp_pending_syn_count(), 0);
    assert_eq!(net.b.transparent_counters().syns_dropped, 3);
    assert_eq!(
        net.b.tcp_accept_pending(net.now, p[0].id),
        Err(TcpError::InvalidHandle)
    );
    // poll_at does not stay in the past once everything expired.
    assert!(net.b.poll_at().is_none_or(|t| t > net.now));
}

#[test]
fn connect_from_any_source_reaches_a_guest_listener() {
    let mut net = net();
    let l = net
        .a
        .tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80), 8)
        .unwrap();
    let from = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 40000);
    let w = net
        .b
        .tcp_connect(net.now, SocketAddrV4::new(GUEST, 80), Some(from))
        .expect("connect from any address");
    assert!(net.run_until(Duration::from_secs(2), |n| {
        n.b.tcp_status(w).unwrap().state == State::Established
    }));
    let g = net.a.tcp_accept(l).unwrap().expect("accepted");
    assert_eq!(net.a.tcp_status(g).unwrap().remote, from.into());
    net.b.tcp_send(w, b"ping").unwrap();
    net.advance(Duration::from_millis(50));
    assert_eq!(recv_all(&mut net.a, g), b"ping");
    // Gateway address with an ephemeral port works too.
    let w2 = net
        .b
        .tcp_connect(
            net.now,
            SocketAddrV4::new(GUEST, 80),
            Some(SocketAddrV4::new(GW, 0)),
        )
        .unwrap();
    assert!(net.run_until(Duration::from_secs(2), |n| {
        n.b.tcp_status(w2).unwrap().state == State::Established
    }));
    // An ordinary stack still refuses a foreign local address.
    assert_eq!(
        net.a
            .tcp_connect(net.now, SocketAddrV4::new(GW, 80), Some(from)),
        Err(ConnectError::InvalidAddress)
    );
}

#[test]
fn udp_to_anywhere_through_the_catch_all_socket() {
    let mut net = net();
    assert_eq!(net.a.udp_bind_any(), Err(BindError::AddrNotAvailable));
    let any = net.b.udp_bind_any().unwrap();
    assert_eq!(net.b.udp_bind_any(), Err(BindError::AddrInUse));
    let g = net
        .a
        .udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 5353))
        .unwrap();
    let dns = SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 3), 53);
    let far = SocketAddrV4::new(Ipv4Addr::new(8, 8, 4, 4), 9999);
    net.a.udp_send_to(net.now, g, b"query", dns).unwrap();
    net.a.udp_send_to(net.now, g, b"x", far).unwrap();
    net.advance(Duration::from_millis(10));
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    for _ in 0..2 {
        let (n, src, dst) = net.b.udp_recv_from_to(any, &mut buf).unwrap();
        got.push((buf[..n].to_vec(), src, dst));
    }
    // (The on-link 10.0.2.3 needed ARP first, so the order may differ.)
    got.sort_by_key(|g| g.0.len());
    let me = SocketAddrV4::new(GUEST, 5353);
    assert_eq!(
        got,
        vec![
            (b"x".to_vec(), me.into(), far.into()),
            (b"query".to_vec(), me.into(), dns.into())
        ]
    );
    assert_eq!(
        net.b.udp_recv_from_to(any, &mut buf),
        Err(UdpError::WouldBlock)
    );
    // Answers appear to come from where the guest sent to.
    let to = SocketAddrV4::new(GUEST, 5353);
    net.b
        .udp_send_from(net.now, any, b"answer", dns, to)
        .unwrap();
    net.b.udp_send_from(net.now, any, b"y", far, to).unwrap();
    net.advance(Duration::from_millis(10));
    let (n, from) = net.a.udp_recv_from(g, &mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"answer"[..], dns));
    let (n, from) = net.a.udp_recv_from(g, &mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"y"[..], far));
    assert_eq!(
        net.b.udp_send_from(
            net.now,
            any,
            b"z",
            SocketAddrV4::new(Ipv4Addr::BROADCAST, 1),
            to
        ),
        Err(UdpError::InvalidAddress)
    );
    // Without the catch-all socket: port unreachable, which a connected
    // guest socket reports as ECONNREFUSED.
    net.b.udp_close_any(any);
    assert_eq!(
        net.b.udp_recv_from_to(any, &mut buf),
        Err(UdpError::InvalidHandle)
    );
    net.a.udp_connect(g, far).unwrap();
    net.a.udp_send(net.now, g, b"lost").unwrap();
    net.advance(Duration::from_millis(10));
    assert_eq!(
        net.a.udp_send(net.now, g, b"again"),
        Err(UdpError::ConnectionRefused)
    );
}

/// The application (the relay) learns that a datagram the guest sent
/// cannot be delivered and says so: port unreachable from the destination,
/// quoting the datagram's IP and UDP headers, which the guest's connected
/// socket reports as ECONNREFUSED (RFC 1122 4.1.3.3). Rate-limited as the
/// stack's own ICMP errors.
#[test]
fn udp_unreachable_from_refuses_the_guests_connected_socket() {
    let mut net = net();
    let any = net.b.udp_bind_any().unwrap();
    let far = SocketAddrV4::new(FAR, 9999);
    let g = net.a.udp_bind(SocketAddrV4::new(GUEST, 5354)).unwrap();
    net.a.udp_connect(g, far).unwrap();
    net.a.udp_send(net.now, g, b"anyone?").unwrap();
    net.advance(Duration::from_millis(10));
    let mut buf = [0u8; 64];
    let (n, src, dst) = net.b.udp_recv_from_to(any, &mut buf).unwrap();
    assert_eq!((n, dst), (7, SocketAddr::V4(far)));
    let before = net.log_ba.len();
    net.b
        .udp_unreachable_from(net.now, dst, src, n, DstUnreachable::PortUnreachable)
        .unwrap();
    net.advance(Duration::from_millis(10));
    let (ip, body) = net.log_ba[before..]
        .iter()
        .find_map(|f| parse_ip(f))
        .expect("an ICMP frame");
    assert_eq!((ip.src, ip.dst), (FAR, GUEST));
    let pkt = Icmpv4Packet::new_checked(&body[..]).unwrap();
    let Icmpv4Repr::DstUnreachable {
        reason,
        header,
        data,
        ..
    } = Icmpv4Repr::parse(&pkt, true).unwrap()
    else {
        panic!("not an unreachable")
    };
    assert_eq!(reason, DstUnreachable::PortUnreachable);
    assert_eq!(
        (header.src, header.dst, header.protocol, header.payload_len),
        (GUEST, FAR, IpProtocol::Udp, 8 + 7)
    );
    // Ports, then the UDP length.
    assert_eq!(data, &[0x14, 0xea, 0x27, 0x0f, 0, 15, 0, 0][..]);
    assert_eq!(counter(&net.a, "Icmp", "InDestUnreachs"), 1);
    assert_eq!(
        net.a.udp_send(net.now, g, b"again"),
        Err(UdpError::ConnectionRefused)
    );
    // Not to or from a group or the broadcast address.
    let bcast = SocketAddr::from((Ipv4Addr::BROADCAST, 9));
    assert!(net
        .b
        .udp_unreachable_from(net.now, bcast, src, 1, DstUnreachable::PortUnreachable)
        .is_err());
    // A flood is answered up to the ICMP error budget, then counted.
    let mut sent = 0;
    for _ in 0..10_000 {
        if net
            .b
            .udp_unreachable_from(net.now, dst, src, 1, DstUnreachable::PortUnreachable)
            .is_ok()
        {
            sent += 1;
        }
    }
    assert!(sent < 10_000, "{sent}");
    assert!(counter(&net.b, "Icmp", "OutRateLimited") > 0);
}

#[test]
fn echo_requests_surface_and_replies_come_from_anywhere() {
    let mut net = net();
    let far = Ipv4Addr::new(1, 1, 1, 1);
    net.a
        .icmp_echo_send(net.now, far, 77, 1, b"abcdefgh")
        .unwrap();
    net.a.icmp_echo_send(net.now, GW, 77, 2, b"gw").unwrap();
    net.advance(Duration::from_millis(10));
    // Nothing was answered automatically, not even for the gateway.
    assert_eq!(net.a.icmp_echo_replies().count(), 0);
    let mut buf = [0u8; 64];
    let r1 = net.b.icmp_echo_request_recv(&mut buf).unwrap();
    assert_eq!(
        (r1.src, r1.dst, r1.ident, r1.seq),
        (GUEST.into(), far.into(), 77, 1)
    );
    assert_eq!(&buf[..r1.len], b"abcdefgh");
    let d1 = buf[..r1.len].to_vec();
    let r2 = net.b.icmp_echo_request_recv(&mut buf).unwrap();
    assert_eq!((r2.dst, r2.seq, &buf[..r2.len]), (GW.into(), 2, &b"gw"[..]));
    assert!(net.b.icmp_echo_request_recv(&mut buf).is_none());

    net.b
        .icmp_echo_reply_from(net.now, far, GUEST, 77, 1, &d1)
        .unwrap();
    net.advance(Duration::from_millis(10));
    let replies: Vec<_> = net.a.icmp_echo_replies().collect();
    assert_eq!(replies.len(), 1);
    assert_eq!(
        (replies[0].from, replies[0].seq, replies[0].len),
        (far.into(), 1, 8)
    );

    let before = net.log_ba.len();
    net.b
        .icmp_unreachable_for_echo(
            net.now,
            far,
            GUEST,
            77,
            3,
            b"zz",
            DstUnreachable::HostUnreachable,
        )
        .unwrap();
    net.advance(Duration::from_millis(10));
    assert_eq!(counter(&net.a, "Icmp", "InDestUnreachs"), 1);
    let (ip, body) = net.log_ba[before..]
        .iter()
        .find_map(|f| parse_ip(f))
        .expect("an ICMP frame");
    assert_eq!(ip.src, far);
    let pkt = Icmpv4Packet::new_checked(&body[..]).unwrap();
    let Icmpv4Repr::DstUnreachable { header, data, .. } = Icmpv4Repr::parse(&pkt, true).unwrap()
    else {
        panic!("not an unreachable")
    };
    assert_eq!((header.src, header.dst), (GUEST, far));
    // The quoted echo header: type 8, code 0, checksum, ident 77, seq 3.
    assert_eq!((data[0], data[1]), (8, 0));
    assert_eq!(&data[4..8], &[0, 77, 0, 3]);
}

fn arp_request(sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0u8; 42];
    EthernetRepr {
        src: GUEST_MAC,
        dst: MacAddr::BROADCAST,
        ethertype: EtherType::Arp,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    ArpRepr {
        operation: ArpOperation::Request,
        sender_mac: GUEST_MAC,
        sender_ip,
        target_mac: MacAddr([0; 6]),
        target_ip,
    }
    .emit(&mut ArpPacket::new_unchecked(&mut f[14..]));
    f
}

fn arp_answers(s: &mut Stack, now: ustack_core::time::Instant, frame: &[u8]) -> Vec<ArpRepr> {
    let mut out = Vec::new();
    s.receive(now, frame, &mut |f| out.push(f.to_vec()));
    out.iter()
        .filter_map(|f| {
            let e = EthernetFrame::new_checked(&f[..]).ok()?;
            let p = ArpPacket::new_checked(e.payload()).ok()?;
            ArpRepr::parse(&p).ok()
        })
        .collect()
}

#[test]
fn arp_is_answered_for_every_address_but_the_guests() {
    let mut net = net();
    let now = net.now;
    for target in [GW, Ipv4Addr::new(10, 0, 2, 3), Ipv4Addr::new(10, 0, 2, 200)] {
        let a = arp_answers(&mut net.b, now, &arp_request(GUEST, target));
        assert_eq!(a.len(), 1, "answer for {target}");
        assert_eq!(a[0].operation, ArpOperation::Reply);
        assert_eq!((a[0].sender_ip, a[0].sender_mac), (target, WORLD_MAC));
        assert_eq!((a[0].target_ip, a[0].target_mac), (GUEST, GUEST_MAC));
    }
    // The guest's own address, a gratuitous ARP and a probe for the
    // guest's candidate address get no answer.
    assert!(arp_answers(
        &mut net.b,
        now,
        &arp_request(Ipv4Addr::new(10, 0, 2, 9), GUEST)
    )
    .is_empty());
    assert!(arp_answers(&mut net.b, now, &arp_request(GUEST, GUEST)).is_empty());
    assert!(arp_answers(&mut net.b, now, &arp_request(Ipv4Addr::UNSPECIFIED, GUEST)).is_empty());
    // The guest learned from the request: the world can reach it directly.
    assert_eq!(net.b.neighbour(now, GUEST), Some(GUEST_MAC));
    // End to end: the guest resolves an on-link address through the world.
    net.a
        .icmp_echo_send(net.now, Ipv4Addr::new(10, 0, 2, 3), 1, 1, b"")
        .unwrap();
    net.advance(Duration::from_millis(10));
    assert_eq!(
        net.a.neighbour(net.now, Ipv4Addr::new(10, 0, 2, 3)),
        Some(WORLD_MAC)
    );
}

#[test]
fn ordinary_stack_keeps_its_behaviour() {
    // Same pair without transparent mode: a SYN to another address is not
    // ours (no answer), echo to the peer's own address is answered.
    let mut net = Net::with_configs(guest_cfg(), world_cfg());
    assert!(!net.b.is_transparent());
    assert!(net.b.tcp_pending_syns().next().is_none());
    let h = net
        .a
        .tcp_connect(net.now, SocketAddrV4::new(FAR, 80), None)
        .unwrap();
    net.advance(Duration::from_millis(10));
    assert_eq!(net.a.tcp_status(h).unwrap().state, State::SynSent);
    assert!(counter(&net.b, "Ip", "InAddrErrors") >= 1);
    net.a.icmp_echo_send(net.now, GW, 5, 5, b"x").unwrap();
    net.advance(Duration::from_millis(10));
    assert_eq!(net.a.icmp_echo_replies().count(), 1);
}

#[test]
fn a_v6only_listener_leaves_ipv4_syns_to_the_application() {
    let mut net = net();
    let v6only = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, 80, 0, 0);
    net.b.tcp_listen6_v6only(v6only, 8).expect("listen v6only");
    // Its port's IPv4 SYNs are not the listener's: held as before.
    let (_, syn) = guest_connect(&mut net, SocketAddrV4::new(FAR, 80));
    assert_eq!(syn.local, SocketAddrV4::new(FAR, 80).into());
    // A dual-stack listener takes them (nothing is held).
    let dual = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, 81, 0, 0);
    let l = net.b.tcp_listen6(dual, 8).expect("listen dual-stack");
    let before = net.b.tcp_pending_syn_count();
    let h = net
        .a
        .tcp_connect(net.now, SocketAddrV4::new(FAR, 81), None)
        .expect("connect");
    assert!(net.run_until(Duration::from_secs(2), |n| {
        n.a.tcp_status(h).unwrap().state == State::Established
    }));
    assert_eq!(net.b.tcp_pending_syn_count(), before);
    let c = net.b.tcp_accept(l).unwrap().expect("accepted");
    assert_eq!(
        net.b.tcp_addrs(c).unwrap().0,
        std::net::SocketAddr::V6(std::net::SocketAddrV6::new(FAR.to_ipv6_mapped(), 81, 0, 0))
    );
}
