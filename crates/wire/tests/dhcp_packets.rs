//! DHCPv4 and DHCPv6 against captured exchanges (same namespaces as
//! `real_packets_v6.rs`, captured with tcpdump on the router's side, transmit
//! checksum offload off):
//!
//! - `dhcpv4_{discover,offer,request,ack}.bin`: `busybox udhcpc -i v6w-a -n
//!   -q -x hostname:ustack-a` (BusyBox 1.35.0) against dnsmasq 2.90 serving
//!   10.0.0.100-200 with router 10.0.0.2 and DNS 10.0.0.53;
//! - `dhcpv6_solicit.bin`: a Solicit written by hand and sent from a UDP
//!   socket (client id DUID-LL 02:00:00:00:00:01, elapsed time, rapid
//!   commit, IA_NA IAID 1, ORO DNS servers) — no DHCPv6 client is installed
//!   here; `dhcpv6_reply.bin`: dnsmasq's rapid-commit Reply (fd00::184,
//!   DNS fd00::53).

use std::net::{Ipv4Addr, Ipv6Addr};

use ustack_wire::dhcpv4::{
    option_code, Dhcpv4MessageType, Dhcpv4Option, Dhcpv4OptionWriter, Dhcpv4Options, Dhcpv4Packet,
    Dhcpv4Repr, BOOTREPLY, BOOTREQUEST, CLIENT_PORT, SERVER_PORT,
};
use ustack_wire::dhcpv6::{
    self, status, Dhcpv6MessageType, Dhcpv6Option, Dhcpv6OptionWriter, Dhcpv6Options, Dhcpv6Packet,
    Dhcpv6Repr, IaAddress, IaNa,
};
use ustack_wire::ethernet::MacAddr;
use ustack_wire::ip::{Ipv4AddrList, Ipv6AddrList};
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use ustack_wire::udp::{UdpPacket, UdpRepr};
use ustack_wire::Error;

const DISCOVER: &[u8] = include_bytes!("data/dhcpv4_discover.bin");
const OFFER: &[u8] = include_bytes!("data/dhcpv4_offer.bin");
const REQUEST: &[u8] = include_bytes!("data/dhcpv4_request.bin");
const ACK: &[u8] = include_bytes!("data/dhcpv4_ack.bin");
const SOLICIT: &[u8] = include_bytes!("data/dhcpv6_solicit.bin");
const REPLY: &[u8] = include_bytes!("data/dhcpv6_reply.bin");

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const LEASED: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 184);

/// The UDP payload of an IPv4 frame, checksums verified; and the ports.
fn udp4(frame: &[u8]) -> (&[u8], UdpRepr) {
    let p = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    let ip = Ipv4Repr::parse(&p, true).unwrap();
    let u = UdpPacket::new_checked(p.payload_ref()).unwrap();
    let r = UdpRepr::parse(&u, ip.src, ip.dst, true).unwrap();
    (u.payload_ref(), r)
}

fn udp6(frame: &[u8]) -> (&[u8], UdpRepr, Ipv6Repr) {
    let p = Ipv6Packet::new_checked(&frame[14..]).unwrap();
    let ip = Ipv6Repr::parse(&p).unwrap();
    let u = UdpPacket::new_checked(p.payload_ref()).unwrap();
    let r = UdpRepr::parse(&u, ip.src, ip.dst, true).unwrap();
    (u.payload_ref(), r, ip)
}

/// Parse, re-emit to identical bytes; check truncations never panic.
fn dhcp4(msg: &[u8]) -> Dhcpv4Repr<'_> {
    let p = Dhcpv4Packet::new_checked(msg).unwrap();
    let r = Dhcpv4Repr::parse(&p).unwrap();
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(&mut out).unwrap();
    assert_eq!(out, msg);
    for n in 0..msg.len() {
        if let Ok(p) = Dhcpv4Packet::new_checked(&msg[..n]) {
            if let Ok(r) = Dhcpv4Repr::parse(&p) {
                let _ = r.options.iter().count();
            }
        }
    }
    r
}

fn parse6(msg: &[u8]) -> Result<Dhcpv6Repr<'_>, Error> {
    Dhcpv6Repr::parse(&Dhcpv6Packet::new_checked(msg)?)
}

fn dhcp6(msg: &[u8]) -> Dhcpv6Repr<'_> {
    let r = parse6(msg).unwrap();
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(&mut out).unwrap();
    assert_eq!(out, msg);
    for n in 0..msg.len() {
        if let Ok(r) = parse6(&msg[..n]) {
            for ia in r.options.ia_na() {
                let _ = ia.addresses().count();
            }
        }
    }
    r
}

#[test]
fn dhcpv4_exchange_from_udhcpc_and_dnsmasq() {
    let (msg, u) = udp4(DISCOVER);
    assert_eq!((u.src_port, u.dst_port), (CLIENT_PORT, SERVER_PORT));
    let d = dhcp4(msg);
    assert_eq!(d.op, BOOTREQUEST);
    assert_eq!(d.client_mac(), Some(MAC_A));
    assert_eq!(d.message_type(), Some(Dhcpv4MessageType::Discover));
    assert_eq!(d.options.hostname(), Some(&b"ustack-a"[..]));
    assert_eq!(d.options.client_id(), Some(&[1u8, 2, 0, 0, 0, 0, 1][..]));
    assert_eq!(
        d.options.parameter_request_list(),
        Some(&[1u8, 3, 6, 12, 15, 28, 42][..])
    );
    // Max message size and the vendor class (unknown here) are there too.
    assert!(d
        .options
        .iter()
        .any(|o| o == Dhcpv4Option::MaxMessageSize(576)));
    assert!(d.options.iter().any(|o| matches!(
        o,
        Dhcpv4Option::Unknown { code: 60, data } if data == b"udhcp 1.35.0"
    )));
    let (msg, u) = udp4(OFFER);
    assert_eq!((u.src_port, u.dst_port), (SERVER_PORT, CLIENT_PORT));
    let o = dhcp4(msg);
    assert_eq!((o.op, o.xid), (BOOTREPLY, d.xid));
    assert_eq!(o.message_type(), Some(Dhcpv4MessageType::Offer));
    assert_eq!((o.yiaddr, o.siaddr), (LEASED, SERVER));
    assert_eq!(o.options.server_id(), Some(SERVER));
    assert_eq!(o.options.lease_time(), Some(3600));
    assert_eq!(
        o.options.subnet_mask(),
        Some(Ipv4Addr::new(255, 255, 255, 0))
    );
    assert_eq!(o.options.routers(), Some(Ipv4AddrList::Addrs(&[SERVER])));
    assert_eq!(
        o.options.dns_servers(),
        Some(Ipv4AddrList::Addrs(&[Ipv4Addr::new(10, 0, 0, 53)]))
    );
    assert!(o
        .options
        .iter()
        .any(|x| x == Dhcpv4Option::RenewalTime(1800)));
    let (msg, _) = udp4(REQUEST);
    let r = dhcp4(msg);
    assert_eq!(r.message_type(), Some(Dhcpv4MessageType::Request));
    assert_eq!(r.options.requested_ip(), Some(LEASED));
    assert_eq!(r.options.server_id(), Some(SERVER));
    let (msg, _) = udp4(ACK);
    let a = dhcp4(msg);
    assert_eq!(a.message_type(), Some(Dhcpv4MessageType::Ack));
    assert_eq!(a.yiaddr, LEASED);
}

#[test]
fn dhcpv4_offer_built_like_dnsmasq() {
    // Rebuild dnsmasq's Offer from its fields with the writer: same bytes.
    let (msg, _) = udp4(OFFER);
    let theirs = dhcp4(msg);
    let mut area = [0u8; 128];
    let mut w = Dhcpv4OptionWriter::new(&mut area);
    for o in theirs.options.iter() {
        w.put(&o).unwrap();
    }
    let n = theirs.options.bytes().len();
    let options = Dhcpv4Options::new_checked(w.finish(n).unwrap()).unwrap();
    let ours = Dhcpv4Repr { options, ..theirs };
    let mut out = vec![0u8; ours.buffer_len()];
    ours.emit(&mut out).unwrap();
    assert_eq!(out, msg);
}

#[test]
fn dhcpv4_malformed() {
    let (msg, _) = udp4(DISCOVER);
    let mut bad = msg.to_vec();
    bad[236] = 0; // cookie
    assert_eq!(
        Dhcpv4Packet::new_checked(&bad[..]).err(),
        Some(Error::Malformed)
    );
    // The hostname option claims more bytes than the message has.
    let mut bad = msg[..262].to_vec();
    let at = 240
        + bad[240..]
            .iter()
            .position(|&b| b == option_code::HOSTNAME)
            .unwrap();
    bad.truncate(at + 3);
    let p = Dhcpv4Packet::new_checked(&bad[..]).unwrap();
    assert_eq!(Dhcpv4Repr::parse(&p), Err(Error::Truncated));
}

#[test]
fn dhcpv6_solicit_and_rapid_commit_reply() {
    let (msg, u, ip) = udp6(SOLICIT);
    assert_eq!(
        (u.src_port, u.dst_port),
        (dhcpv6::CLIENT_PORT, dhcpv6::SERVER_PORT)
    );
    assert_eq!(ip.dst, dhcpv6::ALL_RELAY_AGENTS_AND_SERVERS);
    let s = dhcp6(msg);
    assert_eq!(s.msg_type, Dhcpv6MessageType::Solicit);
    assert_eq!(s.transaction_id, 0x123456);
    let duid = [0u8, 3, 0, 1, 2, 0, 0, 0, 0, 1];
    assert_eq!(s.options.client_id(), Some(&duid[..]));
    assert_eq!(s.options.elapsed_time(), Some(0));
    assert!(s.options.rapid_commit());
    assert_eq!(s.options.oro().unwrap().collect::<Vec<_>>(), [23]);
    let ia: Vec<_> = s.options.ia_na().collect();
    assert_eq!((ia.len(), ia[0].iaid), (1, 1));
    assert_eq!(ia[0].addresses().count(), 0);
    let (msg, u, _) = udp6(REPLY);
    assert_eq!(
        (u.src_port, u.dst_port),
        (dhcpv6::SERVER_PORT, dhcpv6::CLIENT_PORT)
    );
    let r = dhcp6(msg);
    assert_eq!(r.msg_type, Dhcpv6MessageType::Reply);
    assert_eq!(r.transaction_id, s.transaction_id);
    assert_eq!(r.options.client_id(), Some(&duid[..]));
    assert!(r.options.server_id().is_some());
    assert!(r.options.rapid_commit());
    assert_eq!(r.options.status_code().map(|s| s.0), Some(status::SUCCESS));
    let ia: Vec<_> = r.options.ia_na().collect();
    assert_eq!((ia[0].iaid, ia[0].t1, ia[0].t2), (1, 1800, 3150));
    let addrs: Vec<_> = ia[0].addresses().collect();
    assert_eq!(addrs[0].addr, "fd00::184".parse::<Ipv6Addr>().unwrap());
    assert_eq!(
        (addrs[0].preferred_lifetime, addrs[0].valid_lifetime),
        (3600, 3600)
    );
    assert_eq!(
        r.options.dns_servers(),
        Some(Ipv6AddrList::Addrs(&["fd00::53".parse().unwrap()]))
    );
    assert_eq!(r.options.preference(), Some(0));
}

#[test]
fn dhcpv6_reply_built_with_the_writer() {
    // Rebuild dnsmasq's Reply option by option, the IA_NA from its parts.
    let (msg, _, _) = udp6(REPLY);
    let theirs = dhcp6(msg);
    let mut buf = [0u8; 512];
    let mut scratch = [0u8; 128];
    let mut w = Dhcpv6OptionWriter::new(&mut buf);
    for o in theirs.options.iter() {
        match o {
            Dhcpv6Option::IaNa(ia) => {
                let mut iw = Dhcpv6OptionWriter::new(&mut scratch);
                for a in ia.addresses() {
                    iw.put(&Dhcpv6Option::IaAddr(IaAddress {
                        options: Dhcpv6Options::default(),
                        ..a
                    }))
                    .unwrap();
                }
                w.put(&Dhcpv6Option::IaNa(IaNa {
                    options: iw.finish(),
                    ..ia
                }))
                .unwrap();
            }
            other => w.put(&other).unwrap(),
        }
    }
    let ours = Dhcpv6Repr {
        options: w.finish(),
        ..theirs
    };
    let mut out = vec![0u8; ours.buffer_len()];
    ours.emit(&mut out).unwrap();
    assert_eq!(out, msg);
}

#[test]
fn dhcpv6_malformed() {
    let (msg, _, _) = udp6(SOLICIT);
    // An option length past the end.
    let mut bad = msg.to_vec();
    bad[7] = 200;
    assert_eq!(parse6(&bad), Err(Error::Truncated));
    assert_eq!(parse6(&msg[..3]), Err(Error::Truncated));
}
