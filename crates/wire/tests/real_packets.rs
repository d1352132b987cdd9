//! Byte-level tests against frames captured with `tcpdump -xx` from Linux
//! 6.x inside private network namespaces (A 10.0.0.1 02:00:00:00:00:01,
//! router R 10.0.0.2 02:00:00:00:00:02 with a 1280-byte MTU link on to
//! B 10.0.1.2). Small frames are written out in hex; large ones are in
//! `tests/data/*.bin` (same capture).

use std::net::Ipv4Addr;

use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr, ARP_LEN};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
use ustack_wire::icmpv4::{DstUnreachable, Icmpv4Packet, Icmpv4Repr, TimeExceeded};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use ustack_wire::udp::{UdpPacket, UdpRepr, UDP_HEADER_LEN};
use ustack_wire::Error;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_R: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IP_R: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);

// `arping`-less: the ARP request Linux sends before `ping 10.0.0.2`.
const ARP_REQUEST: &str =
    "ffffffffffff020000000001080600010800060400010200000000010a0000010000000000000a000002";
const ARP_REPLY: &str =
    "020000000001020000000002080600010800060400020200000000020a0000020200000000010a000001";
// `ping -c 1 -p 41424344 10.0.0.2`
const ECHO_REQUEST: &str = "020000000002020000000001080045000054695940004001bd4d0a0000010a0000020800e4f231b300011f03016b000000008ea905000000000041424344414243444142434441424344414243444142434441424344414243444142434441424344";
const ECHO_REPLY: &str = "0200000000010200000000020800450000541ce20000400149c50a0000020a0000010000ecf231b300011f03016b000000008ea905000000000041424344414243444142434441424344414243444142434441424344414243444142434441424344";
// A DNS query for example.com A from 10.0.0.1:40000 to 10.0.0.2:53 ...
const DNS_QUERY: &str = "020000000002020000000001080045000039385b40004011ee560a0000010a0000029c4000350025d3f0abcd01000001000000000000076578616d706c6503636f6d0000010001";
// ... and the port unreachable R answers with (quoting the whole datagram).
const PORT_UNREACHABLE: &str = "020000000001020000000002080045c000551ce70000400148ff0a0000020a000001030311360000000045000039385b40004011ee560a0000010a0000029c4000350025d3f0abcd01000001000000000000076578616d706c6503636f6d0000010001";
// `ping -t 1 10.0.1.2`: R answers Time Exceeded quoting all 84 bytes.
const TIME_EXCEEDED: &str = "020000000001020000000002080045c000701cf40000400148d70a0000020a0000010b00f4ff00000000450000546e1e40000101f6880a0000010a0001020800b18e324200011f03016b0000000027ed0d0000000000101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f3031323334353637";
// `ping -s 1600 10.0.0.2`: two fragments.
const FRAG1: &[u8] = include_bytes!("data/ipv4_frag1.bin");
const FRAG2: &str = "02000000000202000000000108004500009469d300b94001fbda0a0000010a000002c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f";
// `ping -M do -s 1400 10.0.1.2`: R's "fragmentation needed" (mtu 1280), 590 bytes.
const FRAG_NEEDED: &[u8] = include_bytes!("data/icmp_frag_needed.bin");

fn hex(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 2, 0);
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn eth(frame: &[u8]) -> (EthernetRepr, &[u8]) {
    let f = EthernetFrame::new_checked(frame).unwrap();
    (EthernetRepr::parse(&f).unwrap(), f.payload_ref())
}

fn ipv4(bytes: &[u8]) -> (Ipv4Repr, &[u8]) {
    let p = Ipv4Packet::new_checked(bytes).unwrap();
    assert!(p.verify_checksum());
    (Ipv4Repr::parse(&p, true).unwrap(), p.payload_ref())
}

/// Build Ethernet + IPv4 headers around a payload written by `body`.
fn build(e: &EthernetRepr, ip: &Ipv4Repr, body: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut out = vec![0u8; ETHERNET_HEADER_LEN + ip.buffer_len()];
    let mut f = EthernetFrame::new_unchecked(&mut out[..]);
    e.emit(&mut f);
    let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p, true);
    body(p.payload_mut());
    out
}

#[test]
fn arp_request_and_reply() {
    let req = hex(ARP_REQUEST);
    let (e, payload) = eth(&req);
    assert_eq!(
        e,
        EthernetRepr {
            src: MAC_A,
            dst: MacAddr::BROADCAST,
            ethertype: EtherType::Arp
        }
    );
    let p = ArpPacket::new_checked(payload).unwrap();
    let a = ArpRepr::parse(&p).unwrap();
    assert_eq!(
        a,
        ArpRepr {
            operation: ArpOperation::Request,
            sender_mac: MAC_A,
            sender_ip: IP_A,
            target_mac: MacAddr::UNSPECIFIED,
            target_ip: IP_R,
        }
    );
    assert_eq!(
        a.to_string(),
        "ARP who-has 10.0.0.2 tell 10.0.0.1 (02:00:00:00:00:01)"
    );

    let rep = hex(ARP_REPLY);
    let (e, payload) = eth(&rep);
    assert_eq!((e.src, e.dst), (MAC_R, MAC_A));
    let r = ArpRepr::parse(&ArpPacket::new_checked(payload).unwrap()).unwrap();
    assert_eq!(r.operation, ArpOperation::Reply);
    assert_eq!(
        (r.sender_mac, r.sender_ip, r.target_mac, r.target_ip),
        (MAC_R, IP_R, MAC_A, IP_A)
    );

    // Re-emitting gives the captured bytes.
    for (bytes, repr) in [(&req, a), (&rep, r)] {
        let (e, _) = eth(bytes);
        let mut out = vec![0u8; ETHERNET_HEADER_LEN + ARP_LEN];
        let mut f = EthernetFrame::new_unchecked(&mut out[..]);
        e.emit(&mut f);
        repr.emit(&mut ArpPacket::new_unchecked(f.payload_mut()));
        assert_eq!(&out, bytes);
    }
}

#[test]
fn arp_with_ethernet_padding() {
    // On a real wire the 42-byte request is padded to the 60-byte minimum.
    let mut req = hex(ARP_REQUEST);
    req.resize(60, 0);
    let (_, payload) = eth(&req);
    assert_eq!(payload.len(), 46);
    let a = ArpRepr::parse(&ArpPacket::new_checked(payload).unwrap()).unwrap();
    assert_eq!(a.target_ip, IP_R);
    // Cut inside the target protocol address.
    assert_eq!(
        ArpPacket::new_checked(&payload[..27]).err(),
        Some(Error::Truncated)
    );
}

#[test]
fn arp_non_ethernet_is_unsupported() {
    let mut req = hex(ARP_REQUEST);
    req[ETHERNET_HEADER_LEN + 1] = 6; // hardware type IEEE 802
    let (_, payload) = eth(&req);
    assert_eq!(
        ArpRepr::parse(&ArpPacket::new_checked(payload).unwrap()),
        Err(Error::Unsupported)
    );
}

#[test]
fn icmp_echo_request_from_ping() {
    let frame = hex(ECHO_REQUEST);
    let (e, payload) = eth(&frame);
    assert_eq!((e.src, e.dst, e.ethertype), (MAC_A, MAC_R, EtherType::Ipv4));
    let (ip, icmp) = ipv4(payload);
    assert_eq!(
        ip,
        Ipv4Repr {
            src: IP_A,
            dst: IP_R,
            protocol: IpProtocol::Icmp,
            payload_len: 64,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0x6959,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    );
    assert_eq!(
        ip.to_string(),
        "IPv4 10.0.0.1 > 10.0.0.2 ICMP len 64 ttl 64 id 26969 DF"
    );
    let p = Icmpv4Packet::new_checked(icmp).unwrap();
    assert!(p.verify_checksum());
    let r = Icmpv4Repr::parse(&p, true).unwrap();
    let Icmpv4Repr::EchoRequest {
        ident,
        seq_no,
        data,
    } = r
    else {
        panic!("not an echo request: {r:?}")
    };
    assert_eq!((ident, seq_no, data.len()), (0x31b3, 1, 56));
    // ping's 16-byte timeval, then the -p pattern.
    assert_eq!(&data[16..20], b"ABCD");
    assert_eq!(&data[52..], b"ABCD");
    assert_eq!(r.buffer_len(), 64);
    assert_eq!(r.to_string(), "ICMP echo request id 12723 seq 1 len 56");

    let out = build(&e, &ip, |b| r.emit(&mut Icmpv4Packet::new_unchecked(b)));
    assert_eq!(out, frame);

    // One flipped bit anywhere in the ICMP message breaks its checksum.
    let mut bad = frame.clone();
    bad[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + 20] ^= 0x01;
    let (_, icmp) = ipv4(&bad[ETHERNET_HEADER_LEN..]);
    let p = Icmpv4Packet::new_checked(icmp).unwrap();
    assert_eq!(Icmpv4Repr::parse(&p, true), Err(Error::Checksum));
    assert!(Icmpv4Repr::parse(&p, false).is_ok());
}

#[test]
fn icmp_echo_reply_from_linux() {
    let frame = hex(ECHO_REPLY);
    let (e, payload) = eth(&frame);
    let (ip, icmp) = ipv4(payload);
    assert_eq!(
        (ip.src, ip.dst, ip.ident, ip.dont_frag),
        (IP_R, IP_A, 0x1ce2, false)
    );
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(icmp).unwrap(), true).unwrap();
    let request = hex(ECHO_REQUEST);
    let req_data = &request[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + 8..];
    assert_eq!(
        r,
        Icmpv4Repr::EchoReply {
            ident: 0x31b3,
            seq_no: 1,
            data: req_data
        }
    );
    let out = build(&e, &ip, |b| r.emit(&mut Icmpv4Packet::new_unchecked(b)));
    assert_eq!(out, frame);
}

#[test]
fn ipv4_header_checksum_detected() {
    let mut frame = hex(ECHO_REQUEST);
    frame[ETHERNET_HEADER_LEN + 8] = 63; // TTL changed without fixing the checksum
    let p = Ipv4Packet::new_checked(&frame[ETHERNET_HEADER_LEN..]).unwrap();
    assert!(!p.verify_checksum());
    assert_eq!(Ipv4Repr::parse(&p, true), Err(Error::Checksum));
}

#[test]
fn udp_dns_query() {
    let frame = hex(DNS_QUERY);
    let (e, payload) = eth(&frame);
    let (ip, udp) = ipv4(payload);
    assert_eq!(
        (ip.protocol, ip.payload_len, ip.ident),
        (IpProtocol::Udp, 37, 0x385b)
    );
    let p = UdpPacket::new_checked(udp).unwrap();
    assert!(p.verify_checksum(IP_A, IP_R));
    assert_eq!(p.checksum(), 0xd3f0);
    let r = UdpRepr::parse(&p, IP_A, IP_R, true).unwrap();
    assert_eq!(
        r,
        UdpRepr {
            src_port: 40000,
            dst_port: 53
        }
    );
    assert_eq!(r.to_string(), "UDP 40000 > 53");
    let dns = p.payload_ref();
    assert_eq!(dns.len(), 29);
    assert_eq!(&dns[..2], &[0xab, 0xcd]);
    assert_eq!(&dns[13..20], b"example");

    let out = build(&e, &ip, |b| {
        b[UDP_HEADER_LEN..].copy_from_slice(dns);
        r.emit(
            &mut UdpPacket::new_unchecked(b),
            IP_A,
            IP_R,
            dns.len(),
            true,
        );
    });
    assert_eq!(out, frame);

    // The pseudo-header is covered: another destination fails.
    assert_eq!(UdpRepr::parse(&p, IP_A, IP_B, true), Err(Error::Checksum));
    // A corrupted payload byte fails; checksum 0 means "none" and passes.
    let mut bad = udp.to_vec();
    bad[20] ^= 0x20;
    let bp = UdpPacket::new_checked(&bad[..]).unwrap();
    assert_eq!(UdpRepr::parse(&bp, IP_A, IP_R, true), Err(Error::Checksum));
    bad[6] = 0;
    bad[7] = 0;
    let bp = UdpPacket::new_checked(&bad[..]).unwrap();
    assert_eq!(UdpRepr::parse(&bp, IP_A, IP_R, true), Ok(r));
}

#[test]
fn trailing_link_bytes_are_not_payload() {
    // Ethernet padding / a trailing FCS after the datagram must not leak
    // into the IPv4 payload (and so must not break the UDP checksum).
    let mut frame = hex(DNS_QUERY);
    frame.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let (_, payload) = eth(&frame);
    let (ip, udp) = ipv4(payload);
    assert_eq!(udp.len(), ip.payload_len);
    let p = UdpPacket::new_checked(udp).unwrap();
    assert_eq!(p.payload_ref().len(), 29);
    assert!(UdpRepr::parse(&p, IP_A, IP_R, true).is_ok());
    // Cut short of the total length instead: truncated.
    let short = &frame[ETHERNET_HEADER_LEN..frame.len() - 10];
    assert_eq!(Ipv4Packet::new_checked(short).err(), Some(Error::Truncated));
}

#[test]
fn icmp_port_unreachable_quoting_udp() {
    let frame = hex(PORT_UNREACHABLE);
    let (e, payload) = eth(&frame);
    let (ip, icmp) = ipv4(payload);
    assert_eq!((ip.src, ip.dst, ip.dscp_ecn), (IP_R, IP_A, 0xc0));
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(icmp).unwrap(), true).unwrap();

    let query = hex(DNS_QUERY);
    let (query_ip, query_udp) = ipv4(&query[ETHERNET_HEADER_LEN..]);
    let Icmpv4Repr::DstUnreachable {
        reason,
        next_hop_mtu,
        header,
        data,
    } = r
    else {
        panic!("not unreachable: {r:?}")
    };
    assert_eq!(reason, DstUnreachable::PortUnreachable);
    assert_eq!(next_hop_mtu, 0);
    assert_eq!(header, query_ip);
    assert_eq!(data, query_udp);
    // The quoted UDP header identifies the socket.
    let u = UdpPacket::new_checked(data).unwrap();
    assert_eq!((u.src_port(), u.dst_port()), (40000, 53));
    assert_eq!(
        r.to_string(),
        "ICMP port unreachable for 10.0.0.1 > 10.0.0.2 UDP"
    );

    let out = build(&e, &ip, |b| r.emit(&mut Icmpv4Packet::new_unchecked(b)));
    assert_eq!(out, frame);
}

#[test]
fn ipv4_fragment_pair() {
    let f2 = hex(FRAG2);
    let (e1, p1) = eth(FRAG1);
    let (e2, p2) = eth(&f2);
    let (ip1, d1) = ipv4(p1);
    let (ip2, d2) = ipv4(p2);
    assert_eq!(FRAG1.len(), 1514);
    assert_eq!((ip1.ident, ip2.ident), (0x69d3, 0x69d3));
    assert!(ip1.more_frags && !ip1.dont_frag && ip1.frag_offset == 0);
    assert!(!ip2.more_frags && !ip2.dont_frag && ip2.frag_offset == 1480);
    assert_eq!((ip1.payload_len, ip2.payload_len), (1480, 128));
    assert!(ip2.to_string().ends_with("frag off 1480"));
    assert!(ip1.to_string().ends_with("frag off 0 MF"));
    let p = Ipv4Packet::new_checked(p1).unwrap();
    assert!(p.is_fragment());

    // Reassembled, the payload is one ICMP echo request of 8 + 1600 bytes
    // whose checksum verifies over both pieces.
    let mut whole = d1.to_vec();
    whole.extend_from_slice(d2);
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&whole[..]).unwrap(), true).unwrap();
    assert!(matches!(r, Icmpv4Repr::EchoRequest { data, .. } if data.len() == 1600));
    // The first fragment alone does not verify.
    let first = Icmpv4Packet::new_checked(d1).unwrap();
    assert_eq!(Icmpv4Repr::parse(&first, true), Err(Error::Checksum));

    for (e, ip, d, orig) in [(e1, ip1, d1, FRAG1), (e2, ip2, d2, &f2[..])] {
        let out = build(&e, &ip, |b| b.copy_from_slice(d));
        assert_eq!(out, orig);
    }
}

#[test]
fn icmp_frag_needed_with_mtu_and_truncated_quote() {
    assert_eq!(FRAG_NEEDED.len(), 590);
    let (e, payload) = eth(FRAG_NEEDED);
    let (ip, icmp) = ipv4(payload);
    assert_eq!((ip.src, ip.dst, ip.payload_len), (IP_R, IP_A, 556));
    let p = Icmpv4Packet::new_checked(icmp).unwrap();
    let r = Icmpv4Repr::parse(&p, true).unwrap();
    let Icmpv4Repr::DstUnreachable {
        reason,
        next_hop_mtu,
        header,
        data,
    } = r
    else {
        panic!("not unreachable: {r:?}")
    };
    assert_eq!((reason, next_hop_mtu), (DstUnreachable::FragRequired, 1280));
    // The original 1428-byte datagram is quoted only up to 576 bytes.
    assert_eq!(
        (header.src, header.dst, header.protocol),
        (IP_A, IP_B, IpProtocol::Icmp)
    );
    assert_eq!(header.payload_len, 1408);
    assert!(header.dont_frag);
    assert_eq!(data.len(), 528);
    assert_eq!(&data[..2], &[0x08, 0x00]); // the echo request inside
    assert_eq!(
        r.to_string(),
        "ICMP fragmentation needed (mtu 1280) for 10.0.0.1 > 10.0.1.2 ICMP"
    );

    let out = build(&e, &ip, |b| r.emit(&mut Icmpv4Packet::new_unchecked(b)));
    assert_eq!(out, FRAG_NEEDED);

    // Tolerance: a quoted header with a wrong checksum still parses.
    let mut bad = icmp.to_vec();
    bad[8 + 10] ^= 0xff;
    Icmpv4Packet::new_unchecked(&mut bad[..]).fill_checksum();
    let r2 = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&bad[..]).unwrap(), true).unwrap();
    assert_eq!(r2, r);
    // Only 8 payload bytes quoted (RFC 792 minimum): still fine.
    let mut short = icmp[..8 + 20 + 8].to_vec();
    Icmpv4Packet::new_unchecked(&mut short[..]).fill_checksum();
    let r3 = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&short[..]).unwrap(), true).unwrap();
    assert!(
        matches!(r3, Icmpv4Repr::DstUnreachable { header: h, data, .. }
        if h == header && data.len() == 8)
    );
    // Quoted header cut short: Truncated, never a panic.
    let mut cut = icmp[..8 + 19].to_vec();
    Icmpv4Packet::new_unchecked(&mut cut[..]).fill_checksum();
    let p = Icmpv4Packet::new_checked(&cut[..]).unwrap();
    assert_eq!(Icmpv4Repr::parse(&p, true), Err(Error::Truncated));
}

#[test]
fn icmp_time_exceeded_from_router() {
    let frame = hex(TIME_EXCEEDED);
    let (e, payload) = eth(&frame);
    let (ip, icmp) = ipv4(payload);
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(icmp).unwrap(), true).unwrap();
    let Icmpv4Repr::TimeExceeded {
        reason,
        header,
        data,
    } = r
    else {
        panic!("not time exceeded: {r:?}")
    };
    assert_eq!(reason, TimeExceeded::TtlExpired);
    assert_eq!(
        (header.src, header.dst, header.ttl, header.ident),
        (IP_A, IP_B, 1, 0x6e1e)
    );
    assert_eq!((header.payload_len, data.len()), (64, 64));
    let inner = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(data).unwrap(), true).unwrap();
    assert!(matches!(
        inner,
        Icmpv4Repr::EchoRequest {
            ident: 0x3242,
            seq_no: 1,
            ..
        }
    ));
    let out = build(&e, &ip, |b| r.emit(&mut Icmpv4Packet::new_unchecked(b)));
    assert_eq!(out, frame);
}

#[test]
fn rfc4884_length_attribute_limits_the_quote() {
    // A time exceeded quoting 32 words (128 bytes) followed by an extension
    // structure: the extension must not be taken as quoted payload.
    let frame = hex(TIME_EXCEEDED);
    let (_, ip_bytes) = eth(&frame);
    let (_, icmp) = ipv4(ip_bytes);
    let mut m = icmp[..8 + 84].to_vec();
    m.resize(8 + 128, 0); // zero padding to 128 bytes, as RFC 4884 requires
    m.extend_from_slice(&[0x20, 0, 0, 0, 0, 8, 1, 1, 0, 0, 0, 0]); // ext header + object
    m[5] = 32;
    Icmpv4Packet::new_unchecked(&mut m[..]).fill_checksum();
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&m[..]).unwrap(), true).unwrap();
    let Icmpv4Repr::TimeExceeded { header, data, .. } = r else {
        panic!("{r:?}")
    };
    // The original datagram had 64 payload bytes; padding and extension are excluded.
    assert_eq!(header.payload_len, 64);
    assert_eq!(data, &icmp[8 + 20..8 + 84]);
}

#[test]
fn implausible_length_attribute_is_ignored() {
    // A non-RFC 4884 sender leaving junk in the "unused" byte: a length under
    // 128 octets, or beyond what arrived, must not cut the quote.
    let frame = hex(TIME_EXCEEDED);
    let (_, ip_bytes) = eth(&frame);
    let (_, icmp) = ipv4(ip_bytes);
    for junk in [3u8, 31, 200] {
        let mut m = icmp.to_vec();
        m[5] = junk;
        Icmpv4Packet::new_unchecked(&mut m[..]).fill_checksum();
        let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&m[..]).unwrap(), true).unwrap();
        let Icmpv4Repr::TimeExceeded { data, .. } = r else {
            panic!("{r:?}")
        };
        assert_eq!(data.len(), 64, "length attribute {junk}");
    }
}

#[test]
fn icmp_emit_into_larger_buffer_checksums_only_the_message() {
    let frame = hex(ECHO_REQUEST);
    let (_, ip_bytes) = eth(&frame);
    let (_, icmp) = ipv4(ip_bytes);
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(icmp).unwrap(), true).unwrap();
    let mut big = vec![0xeeu8; r.buffer_len() + 7];
    r.emit(&mut Icmpv4Packet::new_unchecked(&mut big[..]));
    assert_eq!(&big[..r.buffer_len()], icmp);
    assert_eq!(&big[r.buffer_len()..], &[0xee; 7]);
}

// `ping -R -s 8 10.0.0.2`: a 60-byte header carrying NOP + Record Route.
const RECORD_ROUTE: &str = "02000000000202000000000108004f00004c0f2640004001db780a0000010a000002010727080a00000100000000000000000000000000000000000000000000000000000000000000000800b5d7361700010001020304050607";

#[test]
fn ipv4_options_are_skipped() {
    let frame = hex(RECORD_ROUTE);
    let (e, payload) = eth(&frame);
    let p = Ipv4Packet::new_checked(payload).unwrap();
    assert_eq!(p.header_len(), 60);
    assert_eq!(p.options().len(), 40);
    assert_eq!(&p.options()[..3], &[0x01, 0x07, 0x27]); // NOP, RR type, RR length 39
    let (ip, icmp) = ipv4(payload);
    assert_eq!(
        (ip.src, ip.dst, ip.payload_len, ip.ident),
        (IP_A, IP_R, 16, 0x0f26)
    );
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(icmp).unwrap(), true).unwrap();
    assert_eq!(
        r,
        Icmpv4Repr::EchoRequest {
            ident: 0x3617,
            seq_no: 1,
            data: &[0, 1, 2, 3, 4, 5, 6, 7]
        }
    );
    // The repr re-emits without options: 40 bytes shorter, same meaning.
    let out = build(&e, &ip, |b| r.emit(&mut Icmpv4Packet::new_unchecked(b)));
    assert_eq!(out.len(), frame.len() - 40);
    assert_eq!(ipv4(&out[ETHERNET_HEADER_LEN..]).0, ip);
    assert_eq!(&out[ETHERNET_HEADER_LEN + 20..], icmp);
    // Header length past the end of the buffer: truncated, not a panic.
    assert_eq!(
        Ipv4Packet::new_checked(&payload[..40]).err(),
        Some(Error::Truncated)
    );
}
