//! Hand-written minimal scenarios, each isolating one behaviour (most were
//! distilled from failing seeds of the property tests).

use std::time::Duration;

use ustack_dev::memlink::Impairments;
use ustack_sim::{run, AppPlan, ConnPlan, Ending, Family, Scenario};

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
    use ustack_core::tcp::CcAlgorithm;
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
