//! SYN cookies (RFC 4987, Linux's encoding): floods answered without
//! state, legitimate clients connecting through cookies, forged and stale
//! cookies reset, the SYN's options carried in the timestamp.

mod stack_util;

use std::net::{Ipv4Addr, SocketAddrV4};

use stack_util::*;
use ustack_core::tcp::{State, SynCookies};
use ustack_core::time::{Duration, Instant};
use ustack_core::{Config, TcpError, TcpHandle};
use ustack_wire::ip::IpProtocol;
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};

fn counter_b(n: &Net, name: &str) -> u64 {
    counter(&n.b, "TcpExt", name)
}

/// B's configuration with `cookies` and a SYN queue of `syn_backlog`.
fn server_config(cookies: SynCookies, syn_backlog: usize) -> Config {
    let mut cb = config(B_MAC, B_IP, 2);
    cb.tcp.syncookies = cookies;
    cb.limits.max_syn_backlog = syn_backlog;
    cb
}

fn net(cookies: SynCookies, syn_backlog: usize) -> Net {
    let mut n = Net::with_configs(config(A_MAC, A_IP, 1), server_config(cookies, syn_backlog));
    n.keep_log = false;
    // A ping teaches each stack the other's MAC (the raw tests below read
    // B's answers without running A).
    n.a.icmp_echo_send(n.now, B_IP, 1, 1, b"arp").unwrap();
    n.pump();
    n
}

/// A raw SYN from `src` to B:80 with the given options.
fn syn(
    src: SocketAddrV4,
    isn: u32,
    mss: Option<u16>,
    ws: Option<u8>,
    sack: bool,
    ts: Option<u32>,
) -> TcpRepr<'static> {
    TcpRepr {
        src_port: src.port(),
        dst_port: 80,
        seq: SeqNum(isn),
        syn: true,
        window: 64240,
        max_seg_size: mss,
        window_scale: ws,
        sack_permitted: sack,
        timestamp: ts.map(|v| (v, 0)),
        ..TcpRepr::default()
    }
}

/// A segment B sent, with its payload.
#[derive(Debug, Clone)]
struct Seg {
    repr: TcpRepr<'static>,
    #[allow(dead_code)]
    payload: Vec<u8>,
}

/// Hand `seg` (from A's address) straight to B at the current time and
/// return what B sends in answer (its receive and the polls due now). B's
/// answers do not reach A's stack.
fn to_b(n: &mut Net, seg: &TcpRepr) -> Vec<Seg> {
    let now = n.now;
    let mut frames = Vec::new();
    n.b.receive(now, &tcp_frame_to_b(A_IP, seg), &mut |f| {
        frames.push(f.to_vec())
    });
    while n.b.poll_at().is_some_and(|t| t <= now) {
        n.b.poll(now, &mut |f| frames.push(f.to_vec()));
    }
    frames
        .iter()
        .filter_map(|f| parse_ip(f))
        .filter(|(ip, _)| ip.protocol == IpProtocol::Tcp)
        .map(|(ip, bytes)| {
            let p = TcpPacket::new_checked(&bytes[..]).unwrap();
            let r = TcpRepr::parse(&p, ip.src, ip.dst, true).unwrap();
            Seg {
                payload: r.payload.to_vec(),
                repr: TcpRepr { payload: &[], ..r },
            }
        })
        .collect()
}

/// The final ACK of a handshake answered by `syn_ack`.
fn final_ack<'a>(syn: &TcpRepr, syn_ack: &TcpRepr, payload: &'a [u8]) -> TcpRepr<'a> {
    TcpRepr {
        src_port: syn.src_port,
        dst_port: syn.dst_port,
        seq: syn.seq + 1u32,
        ack: Some(syn_ack.seq + 1u32),
        window: 60_000,
        timestamp: syn_ack
            .timestamp
            .and(syn.timestamp)
            .map(|(tsval, _)| (tsval + 1, syn_ack.timestamp.map_or(0, |t| t.0))),
        payload,
        ..TcpRepr::default()
    }
}

/// Advance the clock without running anything (raw tests drive B alone).
fn set_time(n: &mut Net, t: Instant) {
    n.now = t;
    while n.b.poll_at().is_some_and(|x| x <= t) {
        n.b.poll(t, &mut |_| {});
    }
}

fn accept_all(n: &mut Net, l: TcpHandle) -> Vec<TcpHandle> {
    let mut v = Vec::new();
    while let Ok(Some(h)) = n.b.tcp_accept(l) {
        v.push(h);
    }
    v
}

/// RFC 4987 3.6: with the SYN queue full of half-open connections from
/// spoofed sources, SYNs are answered with cookies (no state: the socket
/// count stays bounded) and real clients still connect through them,
/// with their options, and transfer data both ways.
#[test]
fn syn_flood_with_full_backlog_is_answered_by_cookies() {
    let mut n = net(SynCookies::WhenNeeded, 256);
    let l =
        n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 1024)
            .unwrap();
    // Spoofed sources never answer the SYN-ACKs.
    n.filter_ba = Some(Box::new(|f: &[u8]| {
        parse_ip(f).is_none_or(|(r, _)| r.protocol != IpProtocol::Tcp)
    }));
    for i in 0..3000u32 {
        let src = SocketAddrV4::new(A_IP, 1024 + i as u16);
        let s = syn(
            src,
            i.wrapping_mul(2_654_435_761),
            Some(1460),
            None,
            false,
            None,
        );
        n.inject_to_b(&tcp_frame_to_b(A_IP, &s));
    }
    assert_eq!(n.b.tcp_socket_count(), 1 + 256, "no state for the cookies");
    assert_eq!(counter_b(&n, "TCPReqQFullDrop"), 0);
    assert_eq!(counter_b(&n, "ListenDrops"), 0);
    assert_eq!(counter_b(&n, "TCPReqQFullDoCookies"), 3000 - 256);
    assert_eq!(counter_b(&n, "SyncookiesSent"), 3000 - 256);
    assert_eq!(counter(&n.b, "Tcp", "OutSegs"), 3000, "one SYN-ACK each");

    // Real clients while the SYN queue is still full.
    n.filter_ba = None;
    let clients: Vec<TcpHandle> = (0..20)
        .map(|_| {
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap()
        })
        .collect();
    let mut servers = Vec::new();
    assert!(n.run_until(Duration::from_secs(5), |n| {
        servers.extend(accept_all(n, l));
        servers.len() == clients.len()
    }));
    assert_eq!(counter_b(&n, "SyncookiesRecv"), 20);
    assert_eq!(counter_b(&n, "SyncookiesFailed"), 0);
    assert_eq!(counter(&n.b, "Tcp", "PassiveOpens"), 256 + 20);
    for &c in &clients {
        assert_eq!(n.a.tcp_status(c).unwrap().state, State::Established);
    }
    // The options went through the timestamp: window scaling, SACK.
    let a = n.a.tcp_info(clients[0]).unwrap();
    let i = n.b.tcp_info(servers[0]).unwrap();
    assert_eq!(i.state, State::Established);
    assert!(i.timestamps && i.sack && a.sack);
    assert_eq!((i.smss, a.smss), (1460, 1460));
    assert_eq!(i.snd_wscale, a.rcv_wscale);
    assert_eq!(a.snd_wscale, i.rcv_wscale);

    // 300 KB each way on the first pair (more than an unscaled window).
    let (c, s) = (clients[0], servers[0]);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let (mut sent_a, mut sent_b, mut got_a, mut got_b) = (0, 0, Vec::new(), Vec::new());
    let mut buf = vec![0u8; 65536];
    assert!(n.run_until(Duration::from_secs(30), |n| {
        sent_a += n.a.tcp_send(c, &data[sent_a..]).unwrap_or(0);
        sent_b += n.b.tcp_send(s, &data[sent_b..]).unwrap_or(0);
        while let Ok(k) = n.b.tcp_recv(s, &mut buf) {
            if k == 0 {
                break;
            }
            got_b.extend_from_slice(&buf[..k]);
        }
        while let Ok(k) = n.a.tcp_recv(c, &mut buf) {
            if k == 0 {
                break;
            }
            got_a.extend_from_slice(&buf[..k]);
        }
        got_a.len() == data.len() && got_b.len() == data.len()
    }));
    assert!(got_a == data && got_b == data);
}

/// The same flood with cookies off is what `stack_tcp.rs` tests; with
/// `Always` (Linux 2) every SYN gets a cookie, even to an idle listener.
#[test]
fn cookies_always_and_off() {
    let mut n = net(SynCookies::Always, 256);
    let _l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let s = syn(
        SocketAddrV4::new(A_IP, 5000),
        1,
        Some(1460),
        None,
        false,
        None,
    );
    let out = to_b(&mut n, &s);
    assert_eq!(out.len(), 1);
    assert!(out[0].repr.syn && out[0].repr.ack == Some(SeqNum(2)));
    assert_eq!(n.b.tcp_socket_count(), 1, "no embryo");
    assert_eq!(counter_b(&n, "SyncookiesSent"), 1);
    assert_eq!(counter_b(&n, "TCPReqQFullDoCookies"), 1);

    let mut n = net(SynCookies::Off, 1);
    let _l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let first = to_b(
        &mut n,
        &syn(SocketAddrV4::new(A_IP, 5000), 1, None, None, false, None),
    );
    assert_eq!(first.len(), 1, "an embryo's SYN-ACK");
    let second = to_b(
        &mut n,
        &syn(SocketAddrV4::new(A_IP, 5001), 1, None, None, false, None),
    );
    assert!(second.is_empty(), "SYN queue full, no cookies: dropped");
    assert_eq!(counter_b(&n, "TCPReqQFullDrop"), 1);
    assert_eq!(counter_b(&n, "SyncookiesSent"), 0);
}

/// A forged cookie (no SYN behind it, or a wrong one) is rejected and
/// answered with RST <SEQ=SEG.ACK> (RFC 9293 3.10.7.2, an ACK in LISTEN),
/// counted as SyncookiesFailed like Linux. Before the listener has sent a
/// cookie (Linux `tcp_synq_no_recent_overflow`), an unmatched ACK is not
/// looked at as a cookie at all: RST, nothing counted.
#[test]
fn forged_cookie_ack_is_rejected_with_rst() {
    let mut n = net(SynCookies::WhenNeeded, 1);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let stray = TcpRepr {
        src_port: 7000,
        dst_port: 80,
        seq: SeqNum(100),
        ack: Some(SeqNum(0xdead_beef)),
        window: 100,
        ..TcpRepr::default()
    };
    let out = to_b(&mut n, &stray);
    assert_eq!(out.len(), 1);
    assert!(out[0].repr.rst && out[0].repr.seq == SeqNum(0xdead_beef));
    assert_eq!(counter_b(&n, "SyncookiesFailed"), 0);

    // Fill the SYN queue (one embryo), then a SYN gets a cookie.
    let s1 = syn(
        SocketAddrV4::new(A_IP, 1),
        10,
        Some(1460),
        None,
        false,
        None,
    );
    assert_eq!(to_b(&mut n, &s1).len(), 1);
    let s2 = syn(
        SocketAddrV4::new(A_IP, 2),
        20,
        Some(1460),
        None,
        false,
        None,
    );
    let sa = to_b(&mut n, &s2);
    assert_eq!(counter_b(&n, "SyncookiesSent"), 1);
    let cookie = sa[0].repr.seq;

    // Port 3 never sent a SYN: its ACK of port 2's cookie is forged.
    let forged = TcpRepr {
        src_port: 3,
        ..final_ack(&s2, &sa[0].repr, &[])
    };
    let out = to_b(&mut n, &forged);
    assert_eq!(counter_b(&n, "SyncookiesFailed"), 1);
    assert_eq!(out.len(), 1);
    assert!(out[0].repr.rst && out[0].repr.seq == cookie + 1u32);
    // A blind guess at port 2's cookie.
    let guess = TcpRepr {
        ack: Some(cookie + 1_000_001u32),
        ..final_ack(&s2, &sa[0].repr, &[])
    };
    let out = to_b(&mut n, &guess);
    assert_eq!(counter_b(&n, "SyncookiesFailed"), 2);
    assert!(out.len() == 1 && out[0].repr.rst);
    assert_eq!(n.b.tcp_socket_count(), 2, "listener + the embryo");

    // The genuine ACK still works, and may carry data.
    let good = final_ack(&s2, &sa[0].repr, b"hello");
    let out = to_b(&mut n, &good);
    assert_eq!(counter_b(&n, "SyncookiesRecv"), 1);
    let h = accept_all(&mut n, l);
    assert_eq!(h.len(), 1);
    let mut buf = [0u8; 16];
    assert_eq!(n.b.tcp_recv(h[0], &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"hello");
    // Its data acknowledged at once or by the delayed ACK.
    let acked = |segs: &[Seg]| segs.iter().any(|s| s.repr.ack == Some(SeqNum(21 + 5)));
    if !acked(&out) {
        let t = n.now + Duration::from_millis(200);
        let mut frames = Vec::new();
        n.b.poll(t, &mut |f| frames.push(f.to_vec()));
        assert!(!frames.is_empty(), "the data is acknowledged");
    }
    let st = n.b.tcp_status(h[0]).unwrap();
    assert_eq!(
        (st.state, st.remote),
        (State::Established, SocketAddrV4::new(A_IP, 2).into())
    );
}

/// Linux's count: "MAX_SYNCOOKIE_AGE" 2 values of a minute counter. A
/// cookie sent in the last second of a minute is good in the next one; a
/// cookie two counter values old is stale (SyncookiesFailed, RST).
#[test]
fn cookie_from_previous_minute_is_accepted_two_minutes_old_rejected() {
    let mut n = net(SynCookies::Always, 256);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    set_time(&mut n, Instant::from_millis(59_500));
    let s10 = syn(
        SocketAddrV4::new(A_IP, 10),
        1000,
        Some(1460),
        None,
        false,
        None,
    );
    let sa10 = to_b(&mut n, &s10);
    set_time(&mut n, Instant::from_millis(61_000));
    let s11 = syn(
        SocketAddrV4::new(A_IP, 11),
        2000,
        Some(1460),
        None,
        false,
        None,
    );
    let sa11 = to_b(&mut n, &s11);
    // Minute 1, the cookie from minute 0: accepted.
    to_b(&mut n, &final_ack(&s10, &sa10[0].repr, &[]));
    assert_eq!(counter_b(&n, "SyncookiesRecv"), 1);
    assert_eq!(accept_all(&mut n, l).len(), 1);

    // Minute 2: a cookie sent then; at 179 s still minute 2.
    set_time(&mut n, Instant::from_secs(150));
    let s12 = syn(
        SocketAddrV4::new(A_IP, 12),
        3000,
        Some(1460),
        None,
        false,
        None,
    );
    let sa12 = to_b(&mut n, &s12);
    // Minute 3: port 11's cookie (minute 1) is two values old.
    set_time(&mut n, Instant::from_secs(180));
    let out = to_b(&mut n, &final_ack(&s11, &sa11[0].repr, &[]));
    assert_eq!(counter_b(&n, "SyncookiesFailed"), 1);
    assert!(out.len() == 1 && out[0].repr.rst);
    // ... port 12's (minute 2) is from the previous minute: accepted.
    to_b(&mut n, &final_ack(&s12, &sa12[0].repr, &[]));
    assert_eq!(counter_b(&n, "SyncookiesRecv"), 2);
    assert_eq!(accept_all(&mut n, l).len(), 1);
}

/// Linux `cookie_init_timestamp`: with timestamps the TSval's low bits
/// carry the peer's window scale and SACK; the MSS rides in the cookie,
/// rounded down to `msstab` {536, 1300, 1440, 1460}. Without timestamps
/// the SYN-ACK offers neither window scaling nor SACK (they could not be
/// restored), as Linux's.
#[test]
fn mss_wscale_and_sack_survive_through_the_timestamp() {
    let mut n = net(SynCookies::Always, 256);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 64).unwrap();
    struct Case {
        mss: Option<u16>,
        ws: Option<u8>,
        sack: bool,
        ts: bool,
        want_mss: usize,
        want_ws: Option<u8>,
        want_sack: bool,
    }
    let cases = [
        Case {
            mss: Some(1300),
            ws: Some(7),
            sack: true,
            ts: true,
            want_mss: 1300,
            want_ws: Some(7),
            want_sack: true,
        },
        Case {
            mss: Some(1460),
            ws: Some(0),
            sack: false,
            ts: true,
            want_mss: 1460,
            want_ws: Some(0),
            want_sack: false,
        },
        Case {
            mss: Some(1452),
            ws: None,
            sack: true,
            ts: true,
            want_mss: 1440,
            want_ws: None,
            want_sack: true,
        },
        Case {
            mss: Some(9000),
            ws: Some(14),
            sack: true,
            ts: true,
            want_mss: 1460,
            want_ws: Some(14),
            want_sack: true,
        },
        Case {
            mss: Some(1400),
            ws: Some(7),
            sack: true,
            ts: false,
            want_mss: 1300,
            want_ws: None,
            want_sack: false,
        },
        Case {
            mss: None,
            ws: None,
            sack: false,
            ts: false,
            want_mss: 536,
            want_ws: None,
            want_sack: false,
        },
    ];
    for (k, c) in cases.iter().enumerate() {
        let port = 100 + k as u16;
        let s = syn(
            SocketAddrV4::new(A_IP, port),
            7_000_000 * k as u32,
            c.mss,
            c.ws,
            c.sack,
            c.ts.then_some(5_000 + k as u32),
        );
        let sa = to_b(&mut n, &s);
        assert_eq!(sa.len(), 1, "case {k}");
        let r = sa[0].repr;
        assert!(r.syn && r.ack == Some(s.seq + 1u32), "case {k}");
        assert_eq!(r.max_seg_size, Some(1460), "case {k}: our MSS");
        assert_eq!(r.timestamp.is_some(), c.ts, "case {k}");
        assert_eq!(r.window_scale.is_some(), c.ts && c.ws.is_some(), "case {k}");
        assert_eq!(r.sack_permitted, c.ts && c.sack, "case {k}");
        if let Some((_, ecr)) = r.timestamp {
            assert_eq!(ecr, 5_000 + k as u32, "case {k}: echo");
        }
        to_b(&mut n, &final_ack(&s, &r, &[]));
        let h = accept_all(&mut n, l);
        assert_eq!(h.len(), 1, "case {k}");
        let i = n.b.tcp_info(h[0]).unwrap();
        let ts_len = if c.ts { 12 } else { 0 };
        assert_eq!(i.smss, c.want_mss, "case {k}: MSS");
        assert_eq!(i.timestamps, c.ts, "case {k}");
        assert_eq!(i.sack, c.want_sack, "case {k}");
        assert_eq!(i.snd_wscale, c.want_ws.unwrap_or(0), "case {k}");
        assert_eq!(
            i.rcv_wscale,
            if c.want_ws.is_some() {
                r.window_scale.unwrap()
            } else {
                0
            },
            "case {k}"
        );
        // The ACK's window is scaled by the restored shift.
        assert_eq!(i.snd_wnd, 60_000 << c.want_ws.unwrap_or(0), "case {k}");
        // B's segments respect the restored MSS.
        let data = vec![7u8; 5000];
        assert_eq!(n.b.tcp_send(h[0], &data), Ok(5000));
        let t = n.now;
        let mut frames = Vec::new();
        n.b.poll(t, &mut |f| frames.push(f.to_vec()));
        let sizes: Vec<usize> = frames
            .iter()
            .filter_map(|f| parse_ip(f))
            .filter(|(ip, _)| ip.protocol == IpProtocol::Tcp)
            .map(|(ip, _)| ip.payload_len)
            .collect();
        assert!(!sizes.is_empty(), "case {k}");
        let hdr = 20 + ts_len;
        assert!(
            sizes.iter().all(|&s| s <= hdr + c.want_mss - ts_len),
            "case {k}: {sizes:?}"
        );
        assert!(
            sizes.contains(&(hdr + c.want_mss - ts_len)),
            "case {k}: {sizes:?}"
        );
        n.b.tcp_abort(h[0]);
        let t = n.now;
        n.b.poll(t, &mut |_| {});
    }
    let _ = Ipv4Addr::UNSPECIFIED;
}

/// A full accept queue drops a valid cookie ACK (ListenOverflows, no
/// answer), as Linux does; the client, established on its side, resends
/// its data, whose segments carry the same cookie, and gets through once
/// the application accepts.
#[test]
fn cookie_ack_to_a_full_accept_queue_waits_for_the_clients_data() {
    let mut n = net(SynCookies::WhenNeeded, 256);
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 2).unwrap();
    let clients: Vec<TcpHandle> = (0..5)
        .map(|_| {
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap()
        })
        .collect();
    n.pump();
    for &c in &clients {
        assert_eq!(n.a.tcp_status(c).unwrap().state, State::Established);
    }
    // Two embryos fill the accept queue (backlog 2); the three cookies'
    // final ACKs come after them and are dropped.
    assert_eq!(counter_b(&n, "SyncookiesSent"), 3);
    assert_eq!(counter_b(&n, "SyncookiesRecv"), 3);
    assert_eq!(counter_b(&n, "ListenOverflows"), 3);
    assert_eq!(n.b.tcp_socket_count(), 3, "listener + 2 queued");
    for &c in &clients {
        assert_eq!(n.a.tcp_send(c, b"hi"), Ok(2));
    }
    let mut servers = Vec::new();
    let mut got = 0;
    let mut buf = [0u8; 8];
    assert!(n.run_until(Duration::from_secs(30), |n| {
        servers.extend(accept_all(n, l));
        for &s in &servers {
            if let Ok(2) = n.b.tcp_recv(s, &mut buf) {
                got += 1;
            }
        }
        got == clients.len()
    }));
    assert_eq!(counter_b(&n, "SyncookiesFailed"), 0);
    // Every valid cookie made one of the 3 connections or found the
    // queue full (and was dropped without an answer).
    assert_eq!(
        counter_b(&n, "SyncookiesRecv"),
        3 + counter_b(&n, "ListenOverflows")
    );
    assert_eq!(
        counter_b(&n, "ListenOverflows"),
        counter_b(&n, "ListenDrops")
    );
    for &c in &clients {
        assert_eq!(n.a.tcp_status(c).unwrap().pending_error, None::<TcpError>);
    }
}
