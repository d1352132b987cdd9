//! repr -> emit -> parse == repr, for every format (proptest).

use std::net::Ipv4Addr;

use proptest::prelude::*;
use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv4::{DstUnreachable, Icmpv4Packet, Icmpv4Repr, TimeExceeded};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

fn mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

fn ip() -> impl Strategy<Value = Ipv4Addr> {
    any::<[u8; 4]>().prop_map(Ipv4Addr::from)
}

fn ethertype() -> impl Strategy<Value = EtherType> {
    any::<u16>().prop_map(EtherType::from)
}

fn ipv4_repr(max_payload: usize) -> impl Strategy<Value = Ipv4Repr> {
    (
        (ip(), ip(), any::<u8>(), 0..=max_payload),
        (
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
            0u16..8192,
        ),
    )
        .prop_map(
            |((src, dst, proto, payload_len), (ttl, dscp_ecn, ident, df, mf, off))| {
                // Keep the fragment inside the 65535-byte datagram limit.
                let max_units = (65535 - payload_len) / 8;
                let frag_offset = (usize::from(off) % (max_units + 1) * 8) as u16;
                Ipv4Repr {
                    src,
                    dst,
                    protocol: IpProtocol::from(proto),
                    payload_len,
                    ttl,
                    dscp_ecn,
                    ident,
                    dont_frag: df,
                    more_frags: mf,
                    frag_offset,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn ethernet(src in mac(), dst in mac(), ethertype in ethertype(), payload_len in 0usize..64) {
        let repr = EthernetRepr { src, dst, ethertype };
        let mut buf = vec![0u8; repr.buffer_len(payload_len)];
        repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&f), Ok(repr));
        prop_assert_eq!(f.payload().len(), payload_len);
    }

    #[test]
    fn arp(op in any::<u16>(), sm in mac(), si in ip(), tm in mac(), ti in ip()) {
        let repr = ArpRepr {
            operation: ArpOperation::from(op),
            sender_mac: sm, sender_ip: si, target_mac: tm, target_ip: ti,
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
        let p = ArpPacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ArpRepr::parse(&p), Ok(repr));
    }

    #[test]
    fn ipv4(repr in ipv4_repr(2000), fill in any::<bool>(), pad in 0usize..8) {
        let mut buf = vec![0u8; repr.buffer_len() + pad];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]), fill);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.payload().len(), repr.payload_len);
        prop_assert_eq!(Ipv4Repr::parse(&p, fill), Ok(repr));
        if fill {
            prop_assert!(p.verify_checksum());
        } else {
            prop_assert_eq!(p.checksum(), 0);
        }
    }

    #[test]
    fn icmp_echo(req in any::<bool>(), ident in any::<u16>(), seq_no in any::<u16>(),
                 data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let repr = if req {
            Icmpv4Repr::EchoRequest { ident, seq_no, data: &data }
        } else {
            Icmpv4Repr::EchoReply { ident, seq_no, data: &data }
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(Icmpv4Repr::parse(&p, true), Ok(repr));
    }

    #[test]
    fn icmp_errors(header in ipv4_repr(1500), code in any::<u8>(), mtu in any::<u16>(),
                   exceeded in any::<bool>(), frag in any::<bool>(),
                   data in proptest::collection::vec(any::<u8>(), 0..600)) {
        // The quote can never hold more than the original payload.
        let data = &data[..data.len().min(header.payload_len)];
        let repr = if exceeded {
            let reason = if frag { TimeExceeded::FragExpired } else { TimeExceeded::TtlExpired };
            Icmpv4Repr::TimeExceeded { reason, header, data }
        } else {
            Icmpv4Repr::DstUnreachable { reason: DstUnreachable::from(code), next_hop_mtu: mtu, header, data }
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(Icmpv4Repr::parse(&p, true), Ok(repr));
        // The quoted header is emitted with a valid checksum of its own.
        prop_assert!(Ipv4Packet::new_unchecked(&buf[8..28]).verify_checksum());
    }

    #[test]
    fn udp(src_port in any::<u16>(), dst_port in any::<u16>(), src in ip(), dst in ip(),
           payload in proptest::collection::vec(any::<u8>(), 0..300), fill in any::<bool>()) {
        let repr = UdpRepr { src_port, dst_port };
        let mut buf = vec![0u8; repr.buffer_len(payload.len())];
        buf[8..].copy_from_slice(&payload);
        repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), src, dst, payload.len(), fill);
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.payload(), &payload[..]);
        if fill {
            prop_assert_ne!(p.checksum(), 0);
        } else {
            prop_assert_eq!(p.checksum(), 0);
        }
        prop_assert_eq!(UdpRepr::parse(&p, src, dst, true), Ok(repr));
    }
}
