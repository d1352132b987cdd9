//! Path MTU discovery (RFC 1191) through a router with a smaller MTU:
//! ICMP "fragmentation needed" lowers the MSS and the lost segments go
//! out again at once, the path MTU is remembered per destination for new
//! connections and expires, DF is set (and cleared below 552 as Linux).

mod stack_util;

use std::net::SocketAddrV4;

use stack_util::*;
use ustack_core::tcp::{MtuProbing, State, TcpConfig};
use ustack_core::time::Duration;
use ustack_core::TcpHandle;
use ustack_wire::icmpv4::DstUnreachable;
use ustack_wire::ip::IpProtocol;

fn established(n: &mut Net, listener: TcpHandle, client: TcpHandle) -> TcpHandle {
    let mut server = None;
    assert!(n.run_until(Duration::from_secs(5), |n| {
        if server.is_none() {
            server = n.b.tcp_accept(listener).unwrap();
        }
        server.is_some() && n.a.tcp_status(client).unwrap().state == State::Established
    }));
    server.unwrap()
}

fn connect(n: &mut Net, l: TcpHandle) -> (TcpHandle, TcpHandle) {
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let s = established(n, l, c);
    (c, s)
}

/// Send `len` bytes A -> B and check they arrive intact within `limit`.
fn send_intact(n: &mut Net, c: TcpHandle, s: TcpHandle, len: usize, limit: Duration) -> bool {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    transfer(n, c, s, &data, limit) == Some(data)
}

/// TCP datagrams A sent since the log was cleared: (IP length, DF).
fn tcp_from_a(n: &Net) -> Vec<(usize, bool)> {
    n.log_ab
        .iter()
        .filter_map(|f| parse_ip(f))
        .filter(|(ip, _)| ip.protocol == IpProtocol::Tcp)
        .map(|(ip, p)| (20 + p.len(), ip.dont_frag))
        .collect()
}

/// A's TCP counter `name`: `RetransSegs` is in Linux's TCP MIB (`Tcp`),
/// the others these tests read are `TcpExt` counters.
fn a_counter(n: &Net, name: &str) -> u64 {
    let group = if name == "RetransSegs" {
        "Tcp"
    } else {
        "TcpExt"
    };
    counter(&n.a, group, name)
}

/// RFC 1191 6.1: "TCP performance [suffers] ... unless it retransmits
/// immediately" — the segments the router dropped go out again, cut to
/// the new MSS, when the ICMP arrives (Linux `tcp_simple_retransmit`):
/// not after a retransmission timeout, nor a loss probe, and without
/// treating the drops as congestion. Every TCP datagram carries DF.
#[test]
fn frag_needed_adapts_at_once_without_rto() {
    for sack in [true, false] {
        frag_needed_adapts(sack);
    }
}

fn frag_needed_adapts(sack: bool) {
    let mut ca = config(A_MAC, A_IP, 1);
    ca.tcp.sack = sack;
    let mut n = Net::with_configs(ca, config(B_MAC, B_IP, 2));
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let (c, s) = connect(&mut n, l);
    n.router_ab = Some(Router::new(1280, true));
    n.log_ab.clear();
    let start = n.now;
    let cwnd0 = n.a.tcp_info(c).unwrap().cwnd;
    // The first flight: 10 full-sized segments, all too big.
    assert_eq!(n.a.tcp_send(c, &[0u8; 30_000]), Ok(30_000));
    n.pump();
    let r = n.router_ab.unwrap();
    assert_eq!((r.dropped, r.icmp_sent), (10, 10), "sack {sack}");
    let mut buf = vec![0u8; 30_000];
    let mut got = 0;
    while let Ok(k) = n.b.tcp_recv(s, &mut buf) {
        got += k;
    }
    // The dropped flight (10 x 1448 bytes, timestamps on) arrived, cut to
    // 1228-byte pieces, at the very instant of the ICMP errors.
    assert_eq!(n.now, start);
    assert!(got >= 14_480, "sack {sack}: {got} bytes resent at once");
    let cwnd = n.a.tcp_info(c).unwrap().cwnd;
    assert!(
        cwnd >= cwnd0,
        "sack {sack}: no congestion response ({cwnd})"
    );
    assert!(n.run_until(Duration::from_secs(1), |n| {
        while let Ok(k) = n.b.tcp_recv(s, &mut buf) {
            got += k;
        }
        got == 30_000
    }));
    assert!(send_intact(&mut n, c, s, 200_000, Duration::from_secs(10)));
    for name in ["TCPTimeouts", "TCPLossProbes", "TCPFastRetrans"] {
        assert_eq!(a_counter(&n, name), 0, "sack {sack}: {name}");
    }
    assert!(a_counter(&n, "RetransSegs") >= 10);
    let i = n.a.tcp_info(c).unwrap();
    assert_eq!(i.smss, 1240, "MSS = MTU - 40");
    let sent = tcp_from_a(&n);
    assert!(sent.iter().all(|&(_, df)| df), "DF on every TCP datagram");
    // After the ICMP, everything fits.
    let dropped_at = sent.iter().rposition(|&(len, _)| len > 1280).unwrap();
    assert!(sent[dropped_at + 1..].iter().all(|&(len, _)| len <= 1280));
    assert_eq!(n.a.path_mtu(n.now, B_IP), Some(1280));
    assert_eq!(
        n.b.tcp_info(s).unwrap().smss,
        1460,
        "B's path is not smaller"
    );

    // A new connection to B starts with the path MTU: nothing dropped.
    let (c2, s2) = connect(&mut n, l);
    assert_eq!(n.a.tcp_info(c2).unwrap().smss, 1240);
    assert_eq!(n.b.tcp_info(s2).unwrap().smss, 1240, "A advertised it");
    let before = n.router_ab.unwrap().dropped;
    assert!(send_intact(
        &mut n,
        c2,
        s2,
        100_000,
        Duration::from_secs(10)
    ));
    assert_eq!(n.router_ab.unwrap().dropped, before);
    assert_eq!(a_counter(&n, "TCPTimeouts"), 0);

    // Ten minutes later the learned MTU has expired (Linux
    // `ip_rt_mtu_expires`): a new connection tries the link MTU again.
    n.advance(Duration::from_secs(601));
    assert_eq!(n.a.path_mtu(n.now, B_IP), None);
    let (c3, s3) = connect(&mut n, l);
    assert_eq!(n.a.tcp_info(c3).unwrap().smss, 1460);
    assert!(send_intact(
        &mut n,
        c3,
        s3,
        100_000,
        Duration::from_secs(10)
    ));
    assert!(
        n.router_ab.unwrap().dropped > before,
        "probed the path again"
    );
    assert_eq!(n.a.tcp_info(c3).unwrap().smss, 1240);
    for name in ["TCPTimeouts", "TCPLossProbes", "TCPFastRetrans"] {
        assert_eq!(a_counter(&n, name), 0, "sack {sack}: {name}");
    }
}

/// Linux `ip_rt_min_pmtu`: a report below 552 (here 400, or 0 from an
/// old router) is taken as 552 — MSS 512 — and the destination's entry is
/// locked, which clears DF so that the routers of such a path fragment.
#[test]
fn frag_needed_below_552_is_552_without_df() {
    for reported in [400usize, 0] {
        let mut n = Net::new();
        let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
        let (c, s) = connect(&mut n, l);
        n.router_ab = Some(Router::new(400, true));
        n.log_ab.clear();
        if reported == 0 {
            // A router that reports no MTU: drop A's first big segment and
            // answer with next-hop MTU 0 by hand.
            n.router_ab = None;
            n.filter_ab = Some(Box::new(|_: &[u8]| false));
            // Two full segments (1448 bytes with timestamps): a partial
            // third would go out with them (one packet on an idle
            // connection, as Linux builds it), be dropped too, and, not
            // being larger than the new MSS, be left to a loss probe
            // (`tcp_simple_retransmit`), which is not what this tests.
            assert_eq!(n.a.tcp_send(c, &[1u8; 2896]), Ok(2896));
            n.pump();
            let (ip, tcp) = n
                .log_ab
                .iter()
                .filter_map(|f| parse_ip(f))
                .find(|(ip, p)| ip.protocol == IpProtocol::Tcp && p.len() > 100)
                .unwrap();
            let f = icmp_unreachable_to_a(&ip, DstUnreachable::FragRequired, 0, &tcp[..8]);
            n.filter_ab = None;
            n.router_ab = Some(Router::new(400, false));
            n.a.receive(n.now, &f, &mut |_| {});
            let mut got = 0;
            let mut buf = [0u8; 4096];
            assert!(n.run_until(Duration::from_secs(10), |n| {
                while let Ok(k) = n.b.tcp_recv(s, &mut buf) {
                    got += k;
                }
                got == 2896
            }));
        }
        assert!(
            send_intact(&mut n, c, s, 50_000, Duration::from_secs(10)),
            "reported {reported}"
        );
        assert_eq!(a_counter(&n, "TCPTimeouts"), 0, "reported {reported}");
        assert_eq!(n.a.tcp_info(c).unwrap().smss, 512);
        assert_eq!(n.a.path_mtu(n.now, B_IP), Some(552));
        let sent = tcp_from_a(&n);
        let last_big = sent.iter().rposition(|&(len, df)| len > 552 && df).unwrap();
        let after = &sent[last_big + 1..];
        assert!(!after.is_empty());
        assert!(
            after.iter().all(|&(len, df)| len <= 552 && !df),
            "reported {reported}: {after:?}"
        );
    }
}

/// RFC 5927 7: only a "fragmentation needed" quoting a segment in flight
/// lowers the MSS — and only such a one is remembered for the destination
/// (a forged one would otherwise shrink every later connection's).
#[test]
fn forged_frag_needed_is_not_remembered() {
    let mut n = Net::new();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let (c, _s) = connect(&mut n, l);
    n.filter_ab = Some(Box::new(|_: &[u8]| false));
    n.log_ab.clear();
    assert_eq!(n.a.tcp_send(c, &[7u8; 3000]), Ok(3000));
    n.pump();
    let (ip, tcp) = n
        .log_ab
        .iter()
        .filter_map(|f| parse_ip(f))
        .find(|(ip, _)| ip.protocol == IpProtocol::Tcp)
        .unwrap();
    let mut quote = tcp[..8].to_vec();
    let seq = u32::from_be_bytes([quote[4], quote[5], quote[6], quote[7]]);
    quote[4..8].copy_from_slice(&seq.wrapping_add(1_000_000).to_be_bytes());
    let f = icmp_unreachable_to_a(&ip, DstUnreachable::FragRequired, 576, &quote);
    n.a.receive(n.now, &f, &mut |_| {});
    assert_eq!(a_counter(&n, "OutOfWindowIcmps"), 1);
    assert_eq!(n.a.path_mtu(n.now, B_IP), None);
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 1460);
    // The genuine one is.
    let f = icmp_unreachable_to_a(&ip, DstUnreachable::FragRequired, 576, &tcp[..8]);
    n.a.receive(n.now, &f, &mut |_| {});
    assert_eq!(n.a.path_mtu(n.now, B_IP), Some(576));
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 536);
}

/// A client whose MTU probing mode is `probing` (SACK on or off), and B.
fn net_probing(probing: MtuProbing, sack: bool) -> Net {
    let mut ca = config(A_MAC, A_IP, 1);
    ca.tcp.mtu_probing = probing;
    ca.tcp.sack = sack;
    let mut n = Net::with_configs(ca, config(B_MAC, B_IP, 2));
    n.keep_log = false;
    n
}

/// RFC 2923 2.1 / RFC 4821: a path that drops datagrams above 1280 bytes
/// and sends no ICMP. The first full-sized segments vanish; after R1 (3)
/// retransmission timeouts in a row the sender suspects a black hole
/// (Linux `tcp_mtu_probing` = 1) and falls back to MSS 1024,
/// then probes upward: 1282 is lost (TCPMTUPFail, without a congestion
/// response), 1172, 1226, 1253, 1267 and 1274 get through
/// (TCPMTUPSuccess) and the search stops within `probe_threshold` (8
/// bytes) of 1281: MSS 1234. With or without SACK (a lost probe is found
/// by SACKs or by three duplicate ACKs).
#[test]
fn black_hole_is_found_by_probing_and_the_mss_settles() {
    for sack in [true, false] {
        let mut n = net_probing(MtuProbing::OnBlackHole, sack);
        let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
        let (c, s) = connect(&mut n, l);
        n.router_ab = Some(Router::new(1280, false));
        assert!(
            send_intact(&mut n, c, s, 2_000_000, Duration::from_secs(60)),
            "sack {sack}"
        );
        let i = n.a.tcp_info(c).unwrap();
        assert_eq!(i.smss, 1234, "sack {sack}: settled 6 bytes below the path");
        assert_eq!(a_counter(&n, "TCPTimeouts"), 4, "sack {sack}");
        assert_eq!(a_counter(&n, "TCPMTUPFail"), 1, "sack {sack}");
        assert_eq!(a_counter(&n, "TCPMTUPSuccess"), 5, "sack {sack}");
        assert_eq!(
            a_counter(&n, "TCPFastRetrans"),
            0,
            "sack {sack}: no congestion"
        );
        // Nothing but the black hole's victims was ever lost.
        let r = n.router_ab.unwrap();
        assert_eq!(r.icmp_sent, 0);
        assert!(r.dropped >= 10, "sack {sack}");
        // More data: no more drops, no more timeouts.
        let before = r.dropped;
        assert!(send_intact(&mut n, c, s, 500_000, Duration::from_secs(10)));
        assert_eq!(n.router_ab.unwrap().dropped, before, "sack {sack}");
        assert_eq!(a_counter(&n, "TCPTimeouts"), 4, "sack {sack}");
    }
}

/// The control: without probing (Linux's default 0, ours) the same
/// connection retransmits its full-sized segments into the hole until it
/// gives up.
#[test]
fn black_hole_without_probing_stalls() {
    assert_eq!(TcpConfig::default().mtu_probing, MtuProbing::Off);
    let mut n = net_probing(MtuProbing::Off, true);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let (c, s) = connect(&mut n, l);
    n.router_ab = Some(Router::new(1280, false));
    assert!(!send_intact(&mut n, c, s, 100_000, Duration::from_secs(60)));
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 1460);
    assert!(a_counter(&n, "TCPTimeouts") >= 6);
}

/// Linux `tcp_mtu_probing` = 2: probing from the first segment, from
/// `base_mss` (1024) up; on a path that carries 1500 bytes the search
/// ends within 8 bytes of it (MTU 1493, MSS 1453).
#[test]
fn probing_always_climbs_from_base_mss() {
    let mut n = net_probing(MtuProbing::Always, true);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let (c, s) = connect(&mut n, l);
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 1024);
    assert!(send_intact(
        &mut n,
        c,
        s,
        2_000_000,
        Duration::from_secs(60)
    ));
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 1453);
    assert_eq!(a_counter(&n, "TCPMTUPSuccess"), 6);
    assert_eq!(a_counter(&n, "TCPMTUPFail"), 0);
    assert_eq!(a_counter(&n, "TCPTimeouts"), 0);
}

/// Linux `tcp_probe_interval`: a finished search starts again 10 minutes
/// later, from the MSS in use: the path now carries 1500 bytes (the
/// router is gone) and the MSS climbs back.
#[test]
fn finished_search_probes_again_after_the_interval() {
    let mut n = net_probing(MtuProbing::OnBlackHole, true);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let (c, s) = connect(&mut n, l);
    n.router_ab = Some(Router::new(1280, false));
    assert!(send_intact(
        &mut n,
        c,
        s,
        2_000_000,
        Duration::from_secs(60)
    ));
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 1234);
    n.router_ab = None;
    // Within the interval: no probe, the MSS stays.
    assert!(send_intact(
        &mut n,
        c,
        s,
        1_000_000,
        Duration::from_secs(10)
    ));
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 1234);
    let successes = a_counter(&n, "TCPMTUPSuccess");
    n.advance(Duration::from_secs(600));
    assert!(send_intact(
        &mut n,
        c,
        s,
        2_000_000,
        Duration::from_secs(60)
    ));
    let smss = n.a.tcp_info(c).unwrap().smss;
    assert!(smss > 1450, "climbed back: {smss}");
    assert!(a_counter(&n, "TCPMTUPSuccess") > successes);
}

/// A route's metrics (Linux `ip route ... advmss 600 mtu lock 640 initcwnd
/// 11`): the SYN announces the route's advmss, the MSS follows its MTU,
/// the initial window its initcwnd, and a locked MTU sends without DF and
/// ignores reports. A route change reaches the connection as Linux's
/// obsolete `dst` does: after its next transmission.
#[test]
fn route_metrics_set_mss_window_and_df() {
    use ustack_core::RouteMetrics;
    let mut n = Net::new();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let m = RouteMetrics {
        mtu: Some(640),
        mtu_locked: true,
        advmss: Some(600),
        initcwnd: Some(11),
    };
    n.a.set_route_metrics(n.now, B_IP.into(), Some(m));
    assert_eq!(n.a.route_metrics(B_IP.into()), Some(m));
    assert_eq!(n.a.path_mtu(n.now, B_IP), Some(640));
    n.log_ab.clear();
    let (c, s) = connect(&mut n, l);
    let i = n.a.tcp_info(c).unwrap();
    assert_eq!(i.smss, 600, "the route's MTU less 40");
    let first_cwnd = i.cwnd;
    assert_eq!(n.b.tcp_info(s).unwrap().smss, 600, "A announced advmss");
    assert!(send_intact(&mut n, c, s, 20_000, Duration::from_secs(5)));
    let sent = tcp_from_a(&n);
    assert!(!sent.is_empty());
    assert!(sent.iter().all(|&(len, df)| len <= 640 && !df), "{sent:?}");
    // The initial window is 11 segments: the same connection without the
    // route's initcwnd starts with 10.
    n.a.set_route_metrics(
        n.now,
        B_IP.into(),
        Some(RouteMetrics {
            initcwnd: None,
            ..m
        }),
    );
    let (c2, _) = connect(&mut n, l);
    let ten = n.a.tcp_info(c2).unwrap().cwnd;
    assert_eq!(first_cwnd * 10, ten * 11, "{first_cwnd} vs {ten}");

    // A locked MTU ignores a report.
    n.a.set_route_metrics(n.now, B_IP.into(), Some(m));
    n.router_ab = Some(Router::new(576, true));
    assert!(send_intact(&mut n, c, s, 20_000, Duration::from_secs(5)));
    assert_eq!(n.a.path_mtu(n.now, B_IP), Some(640));
    n.router_ab = None;

    // The route's MTU rises (not locked): the connection's MSS follows
    // once it has sent on the new route, and DF is back.
    let up = RouteMetrics {
        mtu: Some(1500),
        mtu_locked: false,
        advmss: None,
        initcwnd: None,
    };
    n.a.set_route_metrics(n.now, B_IP.into(), Some(up));
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 600, "not before a send");
    n.log_ab.clear();
    assert!(send_intact(&mut n, c, s, 50_000, Duration::from_secs(5)));
    assert_eq!(n.a.tcp_info(c).unwrap().smss, 1460);
    let sent = tcp_from_a(&n);
    assert!(sent.iter().any(|&(len, _)| len > 640), "{sent:?}");
    assert!(sent.iter().all(|&(_, df)| df));
    // Forgetting the route: back to the link's.
    n.a.set_route_metrics(n.now, B_IP.into(), None);
    assert_eq!(n.a.route_metrics(B_IP.into()), None);
    assert_eq!(n.a.path_mtu(n.now, B_IP), None);
}
