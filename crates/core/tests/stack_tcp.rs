//! TCP through two wired `Stack`s: handshake, bulk transfer, close,
//! RST for closed ports, listener backlog bounds and SYN floods.

mod stack_util;

use std::net::{Ipv4Addr, SocketAddrV4};

use stack_util::*;
use ustack_core::tcp::{State, SynCookies};
use ustack_core::time::Duration;
use ustack_core::{ConnectError, TcpError, TcpHandle};
use ustack_wire::ethernet::{EthernetFrame, EthernetRepr};
use ustack_wire::icmpv4::DstUnreachable;
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};

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

#[test]
fn connect_transfer_one_megabyte_and_close() {
    let mut n = Net::new();
    n.keep_log = false;
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let s = established(&mut n, l, c);
    let st = n.b.tcp_status(s).unwrap();
    assert_eq!(st.remote, n.a.tcp_status(c).unwrap().local);
    assert_eq!(st.local, SocketAddrV4::new(B_IP, 80).into());

    let total = 1 << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 31 % 251) as u8).collect();
    let mut sent = 0;
    let mut got = Vec::with_capacity(total);
    let mut buf = vec![0u8; 65536];
    let mut fin_sent = false;
    let ok = n.run_until(Duration::from_secs(60), |n| {
        while sent < total {
            match n.a.tcp_send(c, &data[sent..]) {
                Ok(0) | Err(TcpError::WouldBlock) => break,
                Ok(k) => sent += k,
                Err(e) => panic!("send: {e}"),
            }
        }
        if sent == total && !fin_sent {
            n.a.tcp_close(c);
            fin_sent = true;
        }
        loop {
            match n.b.tcp_recv(s, &mut buf) {
                Ok(0) => return true,
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(TcpError::WouldBlock) => return false,
                Err(e) => panic!("recv: {e}"),
            }
        }
    });
    assert!(ok, "EOF reached (got {} of {total})", got.len());
    assert!(got == data, "every byte once and in order");
    n.b.tcp_close(s);
    // A goes through TIME-WAIT (60 s) and is reaped; B's side is reaped at LAST-ACK.
    n.advance(Duration::from_secs(1));
    let a_socks = n.a.tcp_sockets();
    assert_eq!(a_socks.len(), 1);
    assert_eq!(a_socks[0].state, State::TimeWait);
    assert!(a_socks[0].orphan);
    assert_eq!(n.b.tcp_socket_count(), 1, "only the listener");
    n.advance(Duration::from_secs(61));
    assert_eq!(n.a.tcp_socket_count(), 0);
    assert_eq!(n.a.tcp_status(c), Err(TcpError::InvalidHandle));
    let t = &n.a.counters().tcp;
    assert_eq!((t.ActiveOpens, t.CurrEstab), (1, 0));
    assert_eq!(n.b.counters().tcp.PassiveOpens, 1);
    assert!(n.a.counters().ip.FragFails == 0 && n.a.counters().ip.FragCreates == 0);
}

#[test]
fn connect_to_closed_port_is_refused_by_rst() {
    let mut n = Net::new();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 81), None)
            .unwrap();
    assert!(n.run_until(Duration::from_secs(5), |n| n
        .a
        .tcp_status(c)
        .unwrap()
        .pending_error
        .is_some()
        || n.a.tcp_status(c).unwrap().state == State::Closed));
    let mut buf = [0u8; 4];
    assert_eq!(n.a.tcp_recv(c, &mut buf), Err(TcpError::ConnectionRefused));
    assert_eq!(n.b.counters().tcp.OutRsts, 1);
    assert_eq!(n.a.counters().tcp.AttemptFails, 1);
    n.a.tcp_close(c);
    assert_eq!(n.a.tcp_socket_count(), 0);
}

#[test]
fn connect_errors() {
    let mut n = Net::new();
    let far = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 1), 80);
    assert_eq!(
        n.a.tcp_connect(n.now, far, None),
        Err(ConnectError::NoRoute)
    );
    assert_eq!(n.a.counters().ip.OutNoRoutes, 1);
    let bcast = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 255), 80);
    assert_eq!(
        n.a.tcp_connect(n.now, bcast, None),
        Err(ConnectError::InvalidAddress)
    );
    assert_eq!(
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 0), None),
        Err(ConnectError::InvalidAddress)
    );
    let l =
        n.a.tcp_listen(SocketAddrV4::new(0.into(), 5000), 1)
            .unwrap();
    let local = Some(SocketAddrV4::new(0.into(), 5000));
    assert_eq!(
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), local),
        Err(ConnectError::AddrInUse)
    );
    assert_eq!(
        n.a.tcp_listen(SocketAddrV4::new(A_IP, 5000), 1),
        Err(ustack_core::BindError::AddrInUse)
    );
    assert_eq!(n.a.tcp_send(l, b"x"), Err(TcpError::InvalidState));
    n.a.tcp_close(l);
    assert_eq!(n.a.tcp_accept(l), Err(TcpError::InvalidHandle));
}

#[test]
fn ephemeral_ports_are_distinct_and_in_range() {
    let mut n = Net::new();
    let mut ports = std::collections::HashSet::new();
    for _ in 0..200 {
        let c =
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap();
        let p = n.a.tcp_status(c).unwrap().local.port();
        assert!((32768..=60999).contains(&p));
        assert!(ports.insert(p));
    }
}

/// Two stacks where B, the server, has SYN cookies off (Linux
/// `tcp_syncookies = 0`): a full SYN queue drops SYNs. With cookies (the
/// default) the same floods are answered with cookies: `stack_syncookies.rs`.
fn net_without_cookies() -> Net {
    let mut cb = config(B_MAC, B_IP, 2);
    cb.tcp.syncookies = SynCookies::Off;
    Net::with_configs(config(A_MAC, A_IP, 1), cb)
}

#[test]
fn listen_backlog_overflow_drops_syns() {
    let mut n = net_without_cookies();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 2).unwrap();
    let clients: Vec<_> = (0..5)
        .map(|_| {
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap()
        })
        .collect();
    n.advance(Duration::from_millis(100));
    assert!(n.b.tcp_status(l).unwrap().accept_ready);
    let ext = &n.b.counters().tcp_ext;
    assert_eq!(
        (ext.TCPReqQFullDrop, ext.ListenDrops, ext.ListenOverflows),
        (3, 3, 0)
    );
    assert_eq!(n.b.tcp_socket_count(), 3, "listener + 2 queued");
    // The retransmitted SYNs find the accept queue full.
    n.advance(Duration::from_millis(1500));
    let ext = &n.b.counters().tcp_ext;
    assert_eq!(ext.ListenOverflows, 3);
    assert_eq!(n.b.tcp_socket_count(), 3);
    // Accepting makes room; the dropped SYNs are retransmitted and succeed.
    let mut accepted = 0;
    assert!(n.run_until(Duration::from_secs(30), |n| {
        while let Ok(Some(_)) = n.b.tcp_accept(l) {
            accepted += 1;
        }
        accepted == 5
    }));
    for c in clients {
        assert_eq!(n.a.tcp_status(c).unwrap().state, State::Established);
    }
}

/// A raw SYN from `src` to B.
fn syn_frame(src: SocketAddrV4, dst_port: u16, seq: u32) -> Vec<u8> {
    let seg = TcpRepr {
        src_port: src.port(),
        dst_port,
        seq: SeqNum(seq),
        syn: true,
        window: 64240,
        max_seg_size: Some(1460),
        ..TcpRepr::default()
    };
    tcp_frame_to_b(*src.ip(), &seg)
}

#[test]
fn syn_from_a_source_with_no_route_back_is_dropped() {
    // As over IPv6 (stack_ipv6.rs): B has no gateway, so a SYN from off
    // its /24 cannot be answered. It made a
    // SYN-RECEIVED child whose SYN-ACK never left, retried every 10 ms and
    // held a backlog slot; Linux's `tcp_conn_request` drops it when
    // `route_req` finds no route (ListenDrops).
    let mut n = Net::new();
    n.pump();
    let _l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 4).unwrap();
    let before = n.b.tcp_socket_count();
    let sent = n.log_ba.len();
    // (B's own address as the source never reaches TCP: IP drops it.)
    for src in [Ipv4Addr::new(192, 0, 2, 77), B_IP] {
        n.inject_to_b(&syn_frame(SocketAddrV4::new(src, 40000), 80, 7));
        assert_eq!(
            n.b.tcp_socket_count(),
            before,
            "a child for a SYN from {src}"
        );
    }
    assert_eq!(n.b.counters().tcp_ext.ListenDrops, 1);
    n.advance(Duration::from_secs(2));
    assert_eq!(n.log_ba.len(), sent, "B answered a SYN it has no route for");
    assert_eq!(n.b.tcp_socket_count(), before);
    // A SYN from the on-link peer still makes a child and is answered (A
    // does not see the SYN-ACK: it would reset a connection it never made).
    n.filter_ba = Some(Box::new(|_: &[u8]| false));
    n.inject_to_b(&syn_frame(SocketAddrV4::new(A_IP, 40000), 80, 7));
    assert_eq!(n.b.tcp_socket_count(), before + 1);
    assert_eq!(n.log_ba.len(), sent + 1, "no SYN-ACK to the on-link peer");
    assert_eq!(n.b.counters().tcp_ext.ListenDrops, 1);
}

#[test]
fn syn_flood_to_closed_port_answers_rst_without_state() {
    let mut n = Net::new();
    n.keep_log = false;
    n.pump();
    for i in 0..5000u32 {
        let src = SocketAddrV4::new(A_IP, 1024 + (i % 60000) as u16);
        n.inject_to_b(&syn_frame(src, 22, i.wrapping_mul(2654435761)));
    }
    let t = &n.b.counters().tcp;
    assert_eq!((t.InSegs, t.OutRsts, t.OutSegs), (5000, 5000, 5000));
    assert_eq!(n.b.tcp_socket_count(), 0);
    // A has no such connections: it must not answer the RSTs (never RST a RST).
    assert_eq!(n.a.counters().tcp.OutRsts, 0);
}

#[test]
fn syn_flood_to_listener_is_bounded_and_drains() {
    let mut n = net_without_cookies();
    n.keep_log = false;
    n.pump();
    let l =
        n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 1024)
            .unwrap();
    // Spoofed sources that never answer the SYN-ACK (filtered out).
    n.filter_ba = Some(Box::new(|f: &[u8]| {
        parse_ip(f).is_none_or(|(r, _)| r.protocol != IpProtocol::Tcp)
    }));
    for i in 0..3000u32 {
        let src = SocketAddrV4::new(A_IP, 1024 + i as u16);
        n.inject_to_b(&syn_frame(src, 80, i));
    }
    let ext = &n.b.counters().tcp_ext;
    assert_eq!(
        n.b.tcp_socket_count(),
        1 + 256,
        "listener + max_syn_backlog half-open"
    );
    assert_eq!(ext.TCPReqQFullDrop, 3000 - 256);
    assert_eq!(ext.ListenDrops, 3000 - 256);
    // A legitimate client still gets through once the half-open ones time out.
    n.filter_ba = None;
    n.advance(Duration::from_secs(120));
    assert_eq!(
        n.b.tcp_socket_count(),
        1,
        "half-open connections reaped after SYN-ACK retries"
    );
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let _ = established(&mut n, l, c);
}

#[test]
fn close_with_unaccepted_children_resets_them() {
    let mut n = Net::new();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 4).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    n.advance(Duration::from_millis(10));
    assert_eq!(n.a.tcp_status(c).unwrap().state, State::Established);
    n.b.tcp_close(l);
    n.advance(Duration::from_millis(10));
    let mut buf = [0u8; 1];
    assert_eq!(n.a.tcp_recv(c, &mut buf), Err(TcpError::ConnectionReset));
    n.advance(Duration::from_secs(1));
    assert_eq!(n.b.tcp_socket_count(), 0);
}

#[test]
fn icmp_port_unreachable_refuses_a_connecting_socket() {
    let mut n = Net::new();
    n.pump();
    // B never sees A's TCP segments.
    n.filter_ab = Some(Box::new(|f: &[u8]| {
        parse_ip(f).is_none_or(|(r, _)| r.protocol != IpProtocol::Tcp)
    }));
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    n.advance(Duration::from_millis(10));
    let (syn_ip, syn) = n
        .log_ab
        .iter()
        .filter_map(|f| parse_ip(f))
        .find(|(r, _)| r.protocol == IpProtocol::Tcp)
        .expect("A sent a SYN");
    // An ICMP error quoting another port pair is ignored ...
    let mut wrong = syn.clone();
    wrong[2] ^= 1;
    for (quote, expect_closed) in [(wrong, false), (syn, true)] {
        let f = icmp_unreachable_to_a(&syn_ip, DstUnreachable::PortUnreachable, 0, &quote[..8]);
        n.a.receive(n.now, &f, &mut |_| {});
        let st = n.a.tcp_status(c).unwrap();
        assert_eq!(st.state == State::Closed, expect_closed);
    }
    // ... the matching one is a hard error while connecting (as Linux).
    let mut buf = [0u8; 1];
    assert_eq!(n.a.tcp_recv(c, &mut buf), Err(TcpError::ConnectionRefused));
    assert_eq!(n.a.counters().icmp.InDestUnreachs, 2);
}

#[test]
fn poll_work_is_bounded_and_round_robin() {
    let mut ca = config(A_MAC, A_IP, 1);
    ca.limits.poll_budget = 3;
    let mut n = Net::with_configs(ca, config(B_MAC, B_IP, 2));
    n.pump();
    n.b.icmp_echo_send(n.now, A_IP, 1, 1, b"arp").unwrap();
    n.pump();
    let conns: Vec<_> = (0..10)
        .map(|_| {
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap()
        })
        .collect();
    let mut syns = 0;
    let mut polls = 0;
    while n.a.poll_at().is_some_and(|t| t <= n.now) {
        let mut sent = 0;
        n.a.poll(n.now, &mut |_| sent += 1);
        assert!(sent <= 3, "at most the budget per poll ({sent})");
        syns += sent;
        polls += 1;
        assert!(polls < 10);
    }
    assert_eq!((syns, polls), (10, 4));
    for c in conns {
        assert_eq!(n.a.tcp_status(c).unwrap().state, State::SynSent);
    }
}

#[test]
fn counters_iterate_with_linux_names() {
    let mut n = Net::new();
    n.a.icmp_echo_send(n.now, B_IP, 1, 1, b"x").unwrap();
    n.pump();
    let all: Vec<_> = n.a.counters().iter().collect();
    for (g, name) in [
        ("Ip", "InReceives"),
        ("Ip", "ReasmOKs"),
        ("Icmp", "OutEchos"),
        ("Udp", "NoPorts"),
        ("Tcp", "OutRsts"),
        ("TcpExt", "ListenOverflows"),
    ] {
        assert!(
            all.iter().any(|(gg, nn, _)| *gg == g && *nn == name),
            "{g}:{name}"
        );
    }
    assert_eq!(counter(&n.a, "Icmp", "OutEchos"), 1);
    assert_eq!(counter(&n.a, "Icmp", "InEchoReps"), 1);
}

/// TCP frames are built over a scratch buffer that is not zeroed between
/// frames. Every frame, also a short one after full-size ones, must be
/// exactly what emitting its parsed headers into a zeroed buffer gives:
/// no byte (reserved bits, option padding, urgent pointer) left over from
/// an earlier, longer frame.
#[test]
fn short_frames_after_long_ones_carry_no_stale_bytes() {
    let mut n = Net::new();
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let s = established(&mut n, l, c);
    let data = vec![0xffu8; 10_000];
    let mut sent = 0;
    let mut buf = vec![0u8; 65536];
    let mut got = 0;
    let mut replied = false;
    assert!(n.run_until(Duration::from_secs(10), |n| {
        if sent < data.len() {
            sent += n.a.tcp_send(c, &data[sent..]).unwrap_or(0);
        }
        while let Ok(k) = n.b.tcp_recv(s, &mut buf) {
            got += k;
        }
        if got == data.len() && !replied {
            // B answers: A's pure ACK follows its full-size segments.
            n.b.tcp_send(s, b"ok").unwrap();
            replied = true;
        }
        replied && n.a.tcp_recv(c, &mut buf).is_ok()
    }));
    n.advance(Duration::from_secs(1));
    let tcp: Vec<&Vec<u8>> = n
        .log_ab
        .iter()
        .filter(|f| parse_ip(f).is_some_and(|(ip, _)| ip.protocol == IpProtocol::Tcp))
        .collect();
    let longest = tcp.iter().map(|f| f.len()).max().unwrap();
    let shortest_after_long = tcp
        .iter()
        .skip_while(|f| f.len() < longest)
        .filter(|f| f.len() < longest)
        .count();
    assert!(shortest_after_long > 0, "a short frame after a long one");
    for f in tcp {
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        let eth_repr = EthernetRepr::parse(&eth).unwrap();
        let ipp = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let ip = Ipv4Repr::parse(&ipp, true).unwrap();
        let tp = TcpPacket::new_checked(ipp.payload()).unwrap();
        let seg = TcpRepr::parse(&tp, ip.src, ip.dst, true).unwrap();
        let mut fresh = vec![0u8; f.len()];
        eth_repr.emit(&mut EthernetFrame::new_unchecked(&mut fresh[..]));
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut fresh[14..34]), true);
        seg.emit(
            &mut TcpPacket::new_unchecked(&mut fresh[34..]),
            ip.src,
            ip.dst,
            true,
        );
        assert_eq!(&fresh, f, "frame of {} bytes", f.len());
    }
}

/// Linux's chronographs (`tcpi_busy_time`, `tcpi_rwnd_limited`): a sender
/// facing a closed window is busy and limited by the receive window until
/// the reader opens it; nothing is timed once everything is acknowledged.
#[test]
fn tcp_info_times_busy_and_receive_window_limited() {
    let mut cb = config(B_MAC, B_IP, 2);
    cb.tcp.rcv_buf = 16 * 1024;
    let mut n = Net::with_configs(config(A_MAC, A_IP, 1), cb);
    n.keep_log = false;
    let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let s = established(&mut n, l, c);
    assert_eq!(n.a.tcp_info(c).unwrap().busy_time, Duration::ZERO);

    // More than B's buffer, which B does not read.
    let data = vec![1u8; 100_000];
    let sent = n.a.tcp_send(c, &data).unwrap();
    n.advance(Duration::from_secs(2));
    let i = n.a.tcp_info(c).unwrap();
    assert!(
        i.rwnd_limited >= Duration::from_millis(1500),
        "rwnd-limited {:?}",
        i.rwnd_limited
    );
    // (Busy all along; the link has no delay, so the window closed at once.)
    assert!(i.busy_time >= i.rwnd_limited);
    assert_eq!(i.sndbuf_limited, Duration::ZERO);

    let mut buf = vec![0u8; 65536];
    let mut got = 0;
    assert!(n.run_until(Duration::from_secs(60), |n| {
        while let Ok(k) = n.b.tcp_recv(s, &mut buf) {
            if k == 0 {
                break;
            }
            got += k;
        }
        got == sent && n.a.tcp_status(c).unwrap().send_queue == 0
    }));
    let done = n.a.tcp_info(c).unwrap();
    n.advance(Duration::from_secs(1));
    let later = n.a.tcp_info(c).unwrap();
    assert_eq!(later.busy_time, done.busy_time, "idle: not timed");
    assert_eq!(later.rwnd_limited, done.rwnd_limited);
}
