//! ICMP errors for TCP connections (RFC 5927) and `CurrEstab` across every
//! way a connection leaves ESTABLISHED / CLOSE-WAIT.

mod stack_util;

use std::net::{Ipv4Addr, SocketAddrV4};

use stack_util::*;
use ustack_core::tcp::State;
use ustack_core::time::Duration;
use ustack_core::{Stack, TcpError, TcpHandle};
use ustack_wire::icmpv4::DstUnreachable;
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::Ipv4Repr;

fn icmp_to_a(orig: &Ipv4Repr, reason: DstUnreachable, mtu: u16, quote: &[u8]) -> Vec<u8> {
    icmp_unreachable_to_a(orig, reason, mtu, quote)
}

/// The first TCP segment A sent: its IP header and TCP bytes.
fn first_tcp_from_a(n: &Net) -> (Ipv4Repr, Vec<u8>) {
    n.log_ab
        .iter()
        .filter_map(|f| parse_ip(f))
        .find(|(r, _)| r.protocol == IpProtocol::Tcp)
        .expect("A sent a TCP segment")
}

fn with_seq(tcp: &[u8], seq: u32) -> Vec<u8> {
    let mut q = tcp[..8].to_vec();
    q[4..8].copy_from_slice(&seq.to_be_bytes());
    q
}

/// RFC 5927 4.1: "TCP SHOULD check that the TCP sequence number contained
/// in the payload of the ICMP error message is within the range SND.UNA =<
/// SEG.SEQ < SND.NXT"; Linux (`tcp_v4_err`) drops the others and counts
/// them as `OutOfWindowIcmps`. Without the check, anyone who knows or
/// guesses the 4-tuple (the ephemeral port is the only unknown) aborts a
/// connection being opened with one spoofed port unreachable.
#[test]
fn icmp_quoting_a_sequence_number_we_did_not_send_is_ignored() {
    let mut n = Net::new();
    n.pump();
    // B never sees A's TCP segments: A stays in SYN-SENT.
    n.filter_ab = Some(Box::new(|f: &[u8]| {
        parse_ip(f).is_none_or(|(r, _)| r.protocol != IpProtocol::Tcp)
    }));
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    n.advance(Duration::from_millis(10));
    let (syn_ip, syn) = first_tcp_from_a(&n);
    let iss = u32::from_be_bytes([syn[4], syn[5], syn[6], syn[7]]);
    // Right 4-tuple, sequence numbers outside [SND.UNA, SND.NXT) = [ISS,
    // ISS + 1): a blind spoofer's guesses, SND.NXT itself, one below.
    let guesses = [0, 0x1234_5678, iss.wrapping_add(1), iss.wrapping_sub(1)];
    for (k, seq) in guesses.into_iter().enumerate() {
        let f = icmp_to_a(
            &syn_ip,
            DstUnreachable::PortUnreachable,
            0,
            &with_seq(&syn, seq),
        );
        n.a.receive(n.now, &f, &mut |_| {});
        let st = n.a.tcp_status(c).unwrap();
        assert_eq!(st.state, State::SynSent, "seq {seq:#x} must be ignored");
        assert_eq!(st.pending_error, None);
        assert_eq!(counter(&n.a, "TcpExt", "OutOfWindowIcmps"), k as u64 + 1);
    }
    // A short quote without the sequence number proves nothing either.
    let f = icmp_to_a(&syn_ip, DstUnreachable::PortUnreachable, 0, &syn[..4]);
    n.a.receive(n.now, &f, &mut |_| {});
    assert_eq!(n.a.tcp_status(c).unwrap().state, State::SynSent);
    assert_eq!(counter(&n.a, "Tcp", "AttemptFails"), 0);
    // The SYN's own sequence number: a hard error while connecting.
    let f = icmp_to_a(&syn_ip, DstUnreachable::PortUnreachable, 0, &syn[..8]);
    n.a.receive(n.now, &f, &mut |_| {});
    assert_eq!(n.a.tcp_status(c).unwrap().state, State::Closed);
    let mut buf = [0u8; 1];
    assert_eq!(n.a.tcp_recv(c, &mut buf), Err(TcpError::ConnectionRefused));
    assert_eq!(
        counter(&n.a, "TcpExt", "OutOfWindowIcmps"),
        guesses.len() as u64
    );
    // Like Linux's tcp_done: a connection that fails while opening counts.
    assert_eq!(counter(&n.a, "Tcp", "AttemptFails"), 1);
    assert_eq!(counter(&n.a, "Tcp", "CurrEstab"), 0);
}

/// The same check guards the path MTU (RFC 5927 7: a forged "fragmentation
/// needed" could otherwise shrink every segment of a connection) and the
/// soft errors of an established connection.
#[test]
fn out_of_window_frag_needed_leaves_the_mss_alone() {
    let mut n = Net::new();
    let l =
        n.b.tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80), 8)
            .unwrap();
    let c =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    let s = established(&mut n, l, c);
    // Data in flight that B does not acknowledge: SND.UNA < SND.NXT.
    n.filter_ab = Some(Box::new(|_: &[u8]| false));
    n.log_ab.clear();
    assert_eq!(n.a.tcp_send(c, &[7u8; 3000]), Ok(3000));
    n.pump();
    let (ip, data) = first_tcp_from_a(&n);
    let una = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
    let sizes = |n: &Net| -> Vec<usize> {
        n.log_ab
            .iter()
            .filter_map(|f| parse_ip(f))
            .filter(|(r, _)| r.protocol == IpProtocol::Tcp)
            .map(|(r, _)| r.payload_len)
            .collect()
    };
    let before = sizes(&n);
    assert!(
        before.iter().any(|&l| l > 1200),
        "full-sized segments: {before:?}"
    );
    // A forged "fragmentation needed, MTU 576" beyond SND.NXT: ignored.
    let f = icmp_to_a(
        &ip,
        DstUnreachable::FragRequired,
        576,
        &with_seq(&data, una.wrapping_add(100_000)),
    );
    n.a.receive(n.now, &f, &mut |_| {});
    n.log_ab.clear();
    n.advance(Duration::from_secs(2)); // the RTO retransmits
    let after = sizes(&n);
    assert!(
        after.iter().any(|&l| l > 1200),
        "the MSS must not shrink: {after:?}"
    );
    assert_eq!(counter(&n.a, "TcpExt", "OutOfWindowIcmps"), 1);
    // The genuine one (quoting SND.UNA) lowers it.
    let f = icmp_to_a(&ip, DstUnreachable::FragRequired, 576, &data[..8]);
    n.a.receive(n.now, &f, &mut |_| {});
    assert_eq!(counter(&n.a, "TcpExt", "OutOfWindowIcmps"), 1);
    n.log_ab.clear();
    n.advance(Duration::from_secs(4));
    let after = sizes(&n);
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|&l| l <= 576),
        "segments fit the reported MTU: {after:?}"
    );
    let _ = s;
}

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

fn curr_estab(s: &Stack) -> u64 {
    counter(s, "Tcp", "CurrEstab")
}

/// `CurrEstab` ("the number of TCP connections for which the current state
/// is either ESTABLISHED or CLOSE-WAIT", RFC 4022) follows every way out of
/// those states, the application's calls included (they take effect on
/// the connection's next run, the `poll` that sends their FIN or RST).
#[test]
fn curr_estab_follows_every_state_change() {
    let mut n = Net::new();
    let l =
        n.b.tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80), 8)
            .unwrap();
    let connect = |n: &mut Net| {
        let c =
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap();
        let s = established(n, l, c);
        (c, s)
    };

    // shutdown (ESTABLISHED -> FIN-WAIT-1) on A; B goes to CLOSE-WAIT,
    // still counted, until its close (-> LAST-ACK).
    let (c1, s1) = connect(&mut n);
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (1, 1));
    n.a.tcp_shutdown(c1).unwrap();
    n.pump();
    assert_eq!(n.a.tcp_status(c1).unwrap().state, State::FinWait2);
    assert_eq!(n.b.tcp_status(s1).unwrap().state, State::CloseWait);
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (0, 1));
    n.b.tcp_close(s1);
    n.pump();
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (0, 0));
    n.a.tcp_close(c1);

    // abort of an established connection (RST): both sides.
    let (c2, s2) = connect(&mut n);
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (1, 1));
    n.a.tcp_abort(c2);
    n.pump();
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (0, 0));
    n.b.tcp_close(s2);

    // close with unread data turns into an abort (RFC 2525 2.17).
    let (c3, s3) = connect(&mut n);
    assert_eq!(n.b.tcp_send(s3, b"unread"), Ok(6));
    n.pump();
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (1, 1));
    n.a.tcp_close(c3);
    n.pump();
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (0, 0));
    n.b.tcp_close(s3);

    // An established child still in the accept queue when its listener
    // closes is reset.
    let c4 =
        n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
            .unwrap();
    n.pump();
    assert_eq!(n.a.tcp_status(c4).unwrap().state, State::Established);
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (1, 1));
    n.b.tcp_close(l);
    n.pump();
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (0, 0));
    n.a.tcp_close(c4);

    // Everything is reaped in the end.
    n.advance(Duration::from_secs(120));
    assert_eq!((curr_estab(&n.a), curr_estab(&n.b)), (0, 0));
    assert_eq!((n.a.tcp_socket_count(), n.b.tcp_socket_count()), (0, 0));
}
