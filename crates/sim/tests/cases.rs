//! Hand-written minimal scenarios, each isolating one behaviour (most were
//! distilled from failing seeds of the property tests).

use std::time::Duration;

use ustack_core::tcp::CcAlgorithm;
use ustack_dev::memlink::Impairments;
use ustack_sim::{run, AppPlan, ConnPlan, Ending, Family, IpMode, Scenario};

fn app(bytes: u64, ending: Ending) -> AppPlan {
    AppPlan {
        bytes,
        max_write: 65536,
        max_read: 65536,
        pause_prob: 0.0,
        max_pause: Duration::ZERO,
        ending,
        nodelay: false,
    }
}

fn one_conn(client: u64, server: u64) -> Scenario {
    let mut sc = Scenario::generate(Family::Clean, 0);
    sc.ab = Impairments {
        delay: Duration::from_millis(5),
        ..Impairments::none()
    };
    sc.ba = sc.ab.clone();
    sc.tcp_a = ustack_core::tcp::TcpConfig::default();
    sc.tcp_b = ustack_core::tcp::TcpConfig::default();
    sc.mtu = 1500;
    sc.conns = vec![ConnPlan {
        client_on_a: true,
        start: Duration::from_millis(1),
        ipv6: false,
        client: app(client, Ending::ShutdownThenClose),
        server: app(server, Ending::ShutdownThenClose),
    }];
    sc
}

#[test]
fn defaults_bulk_both_ways() {
    let sc = one_conn(1_000_000, 300_000);
    let opts = ustack_sim::RunOptions {
        pcap_dir: std::env::var_os("USTACK_SIM_PCAP").map(Into::into),
    };
    let r = ustack_sim::run_with(&sc, &opts).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(r.bytes_delivered, 1_300_000);
    assert_eq!(r.retrans_segs, 0, "a clean link needs no retransmission");
}

/// Distilled from `corrupt 883`: the client offers window scaling, the
/// server does not (and has a 4 KB receive buffer). The handshake must
/// complete and the data arrive.
#[test]
fn handshake_when_only_the_client_offers_window_scaling() {
    let mut sc = one_conn(1857, 614);
    sc.tcp_a.window_scale = true;
    sc.tcp_a.rcv_buf = 4096;
    sc.tcp_a.snd_buf = 4096;
    sc.tcp_b.window_scale = false;
    sc.tcp_b.rcv_buf = 4096;
    sc.tcp_b.snd_buf = 4096;
    run(&sc).unwrap_or_else(|f| panic!("{f}"));
}

/// Distilled from `reorder 118` / `mixed 21`: a small receive buffer fills,
/// the receiver's window update is lost; the sender must probe the zero
/// window (RFC 9293 3.8.6.1) instead of waiting forever.
#[test]
fn zero_window_with_lost_window_update_recovers() {
    let mut sc = one_conn(200_000, 0);
    sc.tcp_b.rcv_buf = 4096;
    sc.ab.loss = 0.0;
    sc.ba.loss = 0.3;
    sc.conns[0].server.pause_prob = 0.5;
    sc.conns[0].server.max_pause = Duration::from_millis(50);
    sc.conns[0].server.max_read = 100;
    run(&sc).unwrap_or_else(|f| panic!("{f}"));
}

/// Pacing must not slow a transfer where it is not needed: on a clean
/// path (the bulk transfer above) the paced transfer takes at most 5% more
/// virtual time than the unpaced one, with either algorithm; on a
/// 100 Mbit/s bottleneck with a queue of about one to two bandwidth-delay
/// products, at most 5% more on average over nine neighbouring paths
/// (queue 200, 250, 300 frames; delay 9, 10, 11 ms).
///
/// Why an average there: on such a path both senders overshoot in slow
/// start (HyStart's delay test sees the queue a round late) and lose
/// about a window; the time then depends on which round the exit falls
/// in, which pacing's smoothing or a few extra ACKs (Linux's quick-ACK at
/// the start of a connection) shift by one round either way. Measured
/// (2026-11-24): paced / unpaced from 0.95 to 1.08 across these nine
/// paths, for reasons that are not pacing's cost; one path alone tests
/// the round alignment, not pacing.
#[test]
fn pacing_costs_bulk_transfers_little() {
    let time = |alg: CcAlgorithm, pacing: bool, link: Option<&Impairments>, buf: usize| {
        let mut sc = one_conn(4_000_000, 0);
        if let Some(l) = link {
            sc.ab = l.clone();
            sc.ba = l.clone();
        }
        for t in [&mut sc.tcp_a, &mut sc.tcp_b] {
            t.congestion_control = alg;
            t.pacing = pacing;
            t.rcv_buf = buf;
            t.snd_buf = buf;
        }
        let r = run(&sc).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(r.bytes_delivered, 4_000_000);
        r.apps_done_at.as_secs_f64()
    };
    for alg in CcAlgorithm::ALL {
        let (paced, unpaced) = (
            time(alg, true, None, 256 * 1024),
            time(alg, false, None, 256 * 1024),
        );
        eprintln!("5 ms, {alg}: paced {paced:.3} s, unpaced {unpaced:.3} s");
        assert!(
            paced <= unpaced * 1.05,
            "5 ms, {alg}: paced {paced:.3} s, unpaced {unpaced:.3} s"
        );
        let mut ratios = Vec::new();
        for queue_limit in [200, 250, 300] {
            for delay_ms in [9, 10, 11] {
                let link = Impairments {
                    delay: Duration::from_millis(delay_ms),
                    rate_bps: Some(100_000_000),
                    queue_limit,
                    ..Impairments::none()
                };
                let paced = time(alg, true, Some(&link), 4 << 20);
                let unpaced = time(alg, false, Some(&link), 4 << 20);
                eprintln!(
                    "100 Mbit/s, {delay_ms} ms, queue {queue_limit}, {alg}: paced {paced:.3} s, unpaced {unpaced:.3} s"
                );
                ratios.push(paced / unpaced);
            }
        }
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        eprintln!("100 Mbit/s, {alg}: mean paced/unpaced {mean:.3}");
        assert!(
            mean <= 1.05,
            "100 Mbit/s, {alg}: mean paced/unpaced {mean:.3}"
        );
    }
}

// ---------------------------------------------------------------------
// IPv6 and dual stack
// ---------------------------------------------------------------------

/// `sc` with its connections over `ip`: IPv6 moves every connection to
/// IPv6; dual stack adds, for each connection, the same one over the
/// other family (started at the same time, so both share the link; with
/// `one_conn`'s seed, the IPv4 client is an IPv6 socket connecting to
/// B's IPv4-mapped address, and B's listener is `[::]:5000`).
fn over(ip: IpMode, mut sc: Scenario) -> Scenario {
    sc.ip = ip;
    match ip {
        IpMode::V4 => {}
        IpMode::V6 => sc.conns.iter_mut().for_each(|c| c.ipv6 = true),
        IpMode::Dual => {
            let v6: Vec<ConnPlan> = sc
                .conns
                .iter()
                .map(|c| ConnPlan {
                    ipv6: !c.ipv6,
                    ..c.clone()
                })
                .collect();
            sc.conns.extend(v6);
        }
    }
    sc
}

/// The bytes every application of `sc` writes.
fn total_bytes(sc: &Scenario) -> u64 {
    sc.conns
        .iter()
        .map(|c| c.client.bytes + c.server.bytes)
        .sum()
}

/// The run went over the families `ip` names, with full-size packets
/// (MSS = MTU less 40 bytes of IP and 20 of TCP header, options within):
/// an IPv6 packet is exactly the MTU, never more.
fn assert_families(ip: IpMode, sc: &Scenario, r: &ustack_sim::Report) {
    let (v4, v6) = match ip {
        IpMode::V4 => (true, false),
        IpMode::V6 => (false, true),
        IpMode::Dual => (true, true),
    };
    let full = |used: bool| if used { sc.mtu } else { 0 };
    assert_eq!(
        r.largest_packet,
        [full(v4), full(v6)],
        "{ip}: largest IPv4 and IPv6 packets"
    );
    for (host, c) in r.counters.iter().enumerate() {
        assert_eq!(c.ip.InReceives > 0, v4, "{ip}: host {host} {:?}", c.ip);
        assert_eq!(c.ip6.InDelivers > 0, v6, "{ip}: host {host} {:?}", c.ip6);
    }
}

#[test]
fn defaults_bulk_both_ways_over_ipv6_and_dual_stack() {
    for ip in [IpMode::V6, IpMode::Dual] {
        let sc = over(ip, one_conn(1_000_000, 300_000));
        let r = run(&sc).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(r.bytes_delivered, total_bytes(&sc), "{ip}");
        assert_eq!(
            r.retrans_segs, 0,
            "{ip}: a clean link needs no retransmission"
        );
        assert_families(ip, &sc, &r);
    }
}

/// `handshake_when_only_the_client_offers_window_scaling` over IPv6.
#[test]
fn ipv6_handshake_when_only_the_client_offers_window_scaling() {
    let mut sc = over(IpMode::V6, one_conn(1857, 614));
    sc.tcp_a.window_scale = true;
    sc.tcp_a.rcv_buf = 4096;
    sc.tcp_a.snd_buf = 4096;
    sc.tcp_b.window_scale = false;
    sc.tcp_b.rcv_buf = 4096;
    sc.tcp_b.snd_buf = 4096;
    let r = run(&sc).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(r.bytes_delivered, 1857 + 614);
}

/// `zero_window_with_lost_window_update_recovers` over IPv6 and dual stack.
#[test]
fn ipv6_zero_window_with_lost_window_update_recovers() {
    for ip in [IpMode::V6, IpMode::Dual] {
        let mut sc = one_conn(200_000, 0);
        sc.tcp_b.rcv_buf = 4096;
        sc.ab.loss = 0.0;
        sc.ba.loss = 0.3;
        sc.conns[0].server.pause_prob = 0.5;
        sc.conns[0].server.max_pause = Duration::from_millis(50);
        sc.conns[0].server.max_read = 100;
        let sc = over(ip, sc);
        let r = run(&sc).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(r.bytes_delivered, total_bytes(&sc), "{ip}");
    }
}

#[derive(Debug, Clone, Copy)]
enum Trouble {
    Loss,
    Reorder,
    Duplicate,
    Corrupt,
    All,
}

/// Both directions of a 5 ms link with `t`.
fn troubled(t: Trouble) -> Impairments {
    let mut i = Impairments {
        delay: Duration::from_millis(5),
        ..Impairments::none()
    };
    match t {
        Trouble::Loss => i.loss = 0.05,
        Trouble::Reorder => {
            i.reorder = 0.1;
            i.reorder_hold = Duration::from_millis(8);
            i.jitter = Duration::from_millis(1);
        }
        Trouble::Duplicate => i.duplicate = 0.1,
        Trouble::Corrupt => i.corrupt = 0.05,
        Trouble::All => {
            i.loss = 0.03;
            i.reorder = 0.05;
            i.reorder_hold = Duration::from_millis(8);
            i.duplicate = 0.05;
            i.corrupt = 0.03;
            i.jitter = Duration::from_millis(2);
            i.rate_bps = Some(50_000_000);
            i.queue_limit = 150;
        }
    }
    i
}

/// A bulk transfer each way (400 KB from the client, 150 KB back) over
/// IPv6 and dual stack with each congestion control, through `t` on both
/// directions: byte-exact (checked by the run), with the impairment seen
/// on the link, and every corrupted frame refused, none delivered.
fn bulk_through(t: Trouble) {
    for ip in [IpMode::V6, IpMode::Dual] {
        for alg in CcAlgorithm::ALL {
            let mut sc = one_conn(400_000, 150_000);
            sc.ab = troubled(t);
            sc.ba = troubled(t);
            for tcp in [&mut sc.tcp_a, &mut sc.tcp_b] {
                tcp.congestion_control = alg;
                tcp.max_retries = 30;
                tcp.syn_retries = 30;
                tcp.synack_retries = 30;
            }
            let sc = over(ip, sc);
            let what = format!("{t:?} over {ip} with {alg}");
            let r = run(&sc).unwrap_or_else(|f| panic!("{what}: {f}"));
            assert_eq!(r.bytes_delivered, total_bytes(&sc), "{what}");
            let (ab, ba) = (&r.ab, &r.ba);
            let seen = match t {
                Trouble::Loss => ab.lost.min(ba.lost),
                Trouble::Reorder => ab.reordered.min(ba.reordered),
                Trouble::Duplicate => ab.duplicated.min(ba.duplicated),
                Trouble::Corrupt => ab.corrupted.min(ba.corrupted),
                Trouble::All => ab
                    .lost
                    .min(ab.reordered)
                    .min(ab.duplicated)
                    .min(ab.corrupted),
            };
            assert!(seen > 0, "{what}: the link did nothing: {ab:?} {ba:?}");
            if matches!(t, Trouble::Loss | Trouble::Corrupt | Trouble::All) {
                assert!(r.retrans_segs > 0, "{what}: nothing retransmitted");
            }
            let csum: u64 = r.counters.iter().map(|c| c.tcp.InCsumErrors).sum();
            let corrupted = ab.corrupted + ba.corrupted;
            assert!(
                csum <= corrupted,
                "{what}: {csum} checksum errors of {corrupted}"
            );
            if corrupted > 0 {
                assert!(
                    csum > 0,
                    "{what}: {corrupted} corrupted frames, no checksum error"
                );
            }
            assert_families(ip, &sc, &r);
        }
    }
}

#[test]
fn ipv6_bulk_through_loss() {
    bulk_through(Trouble::Loss);
}

#[test]
fn ipv6_bulk_through_reordering() {
    bulk_through(Trouble::Reorder);
}

#[test]
fn ipv6_bulk_through_duplication() {
    bulk_through(Trouble::Duplicate);
}

#[test]
fn ipv6_bulk_through_corruption() {
    bulk_through(Trouble::Corrupt);
}

#[test]
fn ipv6_bulk_through_every_impairment_at_once() {
    bulk_through(Trouble::All);
}

/// IPv6 has no header checksum: a flipped bit in a TCP segment must be
/// caught by the TCP checksum over the IPv6 pseudo-header (mandatory,
/// RFC 8200 8.1), addresses included. A 1 MB transfer from A through a
/// link that corrupts 5% of A's frames: B counts a checksum error for
/// (nearly) every corrupted frame, A none; the data arrives intact.
///
/// Why "nearly": a bit flipped in the Ethernet header, the IPv6 version,
/// traffic class, flow label, payload length, next header or hop limit, or
/// the destination address (about 300 of the 12 112 bits of a full frame)
/// makes a frame that is refused for another reason or harmlessly
/// delivered; every other bit is covered by the checksum.
#[test]
fn ipv6_corruption_is_caught_by_the_pseudo_header_checksum() {
    for ip in [IpMode::V6, IpMode::Dual] {
        let mut sc = one_conn(1_000_000, 0);
        sc.ab.corrupt = 0.05;
        let sc = over(ip, sc);
        let r = run(&sc).unwrap_or_else(|f| panic!("{ip}: {f}"));
        assert_eq!(r.bytes_delivered, total_bytes(&sc), "{ip}");
        let corrupted = r.ab.corrupted;
        let [a, b] = &r.counters;
        eprintln!(
            "{ip}: {corrupted} frames corrupted towards B, {} TCP checksum errors at B, {} retransmissions",
            b.tcp.InCsumErrors, r.retrans_segs
        );
        assert_eq!(r.ba.corrupted, 0);
        assert_eq!(a.tcp.InCsumErrors, 0, "{ip}: nothing corrupted towards A");
        assert!(corrupted >= 20, "{ip}: {:?}", r.ab);
        assert!(
            b.tcp.InCsumErrors <= corrupted && b.tcp.InCsumErrors * 10 >= corrupted * 9,
            "{ip}: B counted {} TCP checksum errors for {corrupted} corrupted frames",
            b.tcp.InCsumErrors
        );
        assert!(r.retrans_segs > 0, "{ip}: the dropped segments were resent");
        assert_families(ip, &sc, &r);
    }
}
