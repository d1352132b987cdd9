//! The parser targets' bodies (one function per `fuzz/fuzz_targets/<name>.rs`).

use std::net::Ipv4Addr;
use ustack_wire::arp::{ArpPacket, ArpRepr};
use ustack_wire::ethernet::{EthernetFrame, EthernetRepr};
use ustack_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use ustack_wire::tcp::{TcpPacket, TcpRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr, VNET_HDR_LEN};

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// Ethernet II: new_checked + every accessor + parse; re-emit and re-parse.
pub fn ethernet(data: &[u8]) {
    let Ok(frame) = EthernetFrame::new_checked(data) else {
        return;
    };
    let _ = (
        frame.src_addr(),
        frame.dst_addr(),
        frame.ethertype(),
        frame.payload().len(),
    );
    let Ok(repr) = EthernetRepr::parse(&frame) else {
        return;
    };
    let payload = frame.payload();
    let mut out = vec![0u8; repr.buffer_len(payload.len())];
    let mut f = EthernetFrame::new_unchecked(&mut out[..]);
    repr.emit(&mut f);
    f.payload_mut().copy_from_slice(payload);
    let again = EthernetFrame::new_checked(&out[..]).expect("emitted frame must be valid");
    assert_eq!(EthernetRepr::parse(&again), Ok(repr));
    assert_eq!(&out[..], data);
    let _ = repr.to_string();
}

/// ARP: new_checked + every accessor + parse; re-emit and re-parse.
pub fn arp(data: &[u8]) {
    let Ok(p) = ArpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.hardware_type(),
        p.protocol_type(),
        p.hardware_len(),
        p.protocol_len(),
    );
    let _ = (
        p.operation(),
        p.source_hardware_addr(),
        p.source_protocol_addr(),
    );
    let _ = (p.target_hardware_addr(), p.target_protocol_addr());
    let Ok(repr) = ArpRepr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
    let again = ArpPacket::new_checked(&out[..]).expect("emitted ARP must be valid");
    assert_eq!(ArpRepr::parse(&again), Ok(repr));
    // Ethernet/IPv4 ARP is exactly the first 28 bytes.
    assert_eq!(&out[..], &data[..out.len()]);
    let _ = repr.to_string();
}

/// IPv4: new_checked + every accessor + parse (with and without checksum
/// verification) + the tolerant quoted-header parse; re-emit and re-parse.
pub fn ipv4(data: &[u8]) {
    let _ = Ipv4Repr::parse_quoted(data);
    let Ok(p) = Ipv4Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.version(),
        p.header_len(),
        p.dscp(),
        p.ecn(),
        p.total_len(),
        p.ident(),
    );
    let _ = (
        p.reserved_flag(),
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
    );
    let _ = (
        p.ttl(),
        p.protocol(),
        p.checksum(),
        p.src_addr(),
        p.dst_addr(),
    );
    let _ = (p.options().len(), p.verify_checksum());
    let checked = Ipv4Repr::parse(&p, true);
    let Ok(repr) = Ipv4Repr::parse(&p, false) else {
        assert!(checked.is_err());
        return;
    };
    let payload = p.payload();
    assert_eq!(repr.payload_len, payload.len());
    let mut out = vec![0u8; repr.buffer_len()];
    let mut q = Ipv4Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut q, true);
    q.payload_mut().copy_from_slice(payload);
    let again = Ipv4Packet::new_checked(&out[..]).expect("emitted IPv4 must be valid");
    assert_eq!(Ipv4Repr::parse(&again, true), Ok(repr));
    assert_eq!(again.payload(), payload);
    let _ = repr.to_string();
}

/// ICMPv4: new_checked + every accessor + parse; re-emit and re-parse.
pub fn icmpv4(data: &[u8]) {
    let Ok(p) = Icmpv4Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.msg_type(),
        p.msg_code(),
        p.checksum(),
        p.echo_ident(),
        p.echo_seq_no(),
    );
    let _ = (
        p.next_hop_mtu(),
        p.ext_length(),
        p.rest_of_header(),
        p.data().len(),
    );
    let _ = (p.verify_checksum(), Icmpv4Repr::parse(&p, true));
    let Ok(repr) = Icmpv4Repr::parse(&p, false) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]));
    let again = Icmpv4Packet::new_checked(&out[..]).expect("emitted ICMP must be valid");
    assert_eq!(Icmpv4Repr::parse(&again, true), Ok(repr));
    let _ = repr.to_string();
}

/// UDP: new_checked + every accessor + parse; re-emit (with checksum) and re-parse.
pub fn udp(data: &[u8]) {
    let Ok(p) = UdpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.len(),
        p.is_empty(),
        p.checksum(),
    );
    let _ = (
        p.verify_checksum(SRC, DST),
        UdpRepr::parse(&p, SRC, DST, true),
    );
    let Ok(repr) = UdpRepr::parse(&p, SRC, DST, false) else {
        return;
    };
    let payload = p.payload();
    let mut out = vec![0u8; repr.buffer_len(payload.len())];
    let mut q = UdpPacket::new_unchecked(&mut out[..]);
    repr.emit(&mut q, SRC, DST, payload.len(), false);
    q.payload_mut().copy_from_slice(payload);
    q.fill_checksum(SRC, DST);
    let again = UdpPacket::new_checked(&out[..]).expect("emitted UDP must be valid");
    assert_ne!(again.checksum(), 0);
    assert_eq!(UdpRepr::parse(&again, SRC, DST, true), Ok(repr));
    assert_eq!(again.payload(), payload);
    let _ = repr.to_string();
}

/// TCP: new_checked + accessors + TcpRepr::parse; re-emit into buffer_len and re-parse.
pub fn tcp(data: &[u8]) {
    let Ok(p) = TcpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.seq_number(),
        p.ack_number(),
        p.header_len(),
    );
    let _ = (
        p.flags(),
        p.window_len(),
        p.checksum(),
        p.urgent_at(),
        p.options().len(),
    );
    let _ = (p.payload().len(), p.verify_checksum(SRC, DST));
    let _ = TcpRepr::parse(&p, SRC, DST, true);
    let Ok(repr) = TcpRepr::parse(&p, SRC, DST, false) else {
        return;
    };
    let _ = (repr.header_len(), repr.seq_len());
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), SRC, DST, true);
    let again = TcpPacket::new_checked(&out[..]).expect("emitted TCP must be valid");
    let back = TcpRepr::parse(&again, SRC, DST, true).expect("emitted TCP must parse");
    assert_eq!(back.payload, repr.payload);
    assert_eq!(
        (back.src_port, back.dst_port, back.seq, back.ack),
        (repr.src_port, repr.dst_port, repr.seq, repr.ack)
    );
    assert_eq!(
        (back.syn, back.fin, back.rst, back.psh, back.window),
        (repr.syn, repr.fin, repr.rst, repr.psh, repr.window)
    );
}

/// The virtio-net header: parse; whatever it accepts points inside the
/// frame; re-emit and re-parse to the same value.
pub fn virtio_net(data: &[u8]) {
    let Ok((v, frame)) = VnetRepr::parse(data) else {
        return;
    };
    assert_eq!(frame.len(), data.len() - VNET_HDR_LEN);
    if let Csum::Partial { start, offset } = v.csum {
        assert!(usize::from(start) + usize::from(offset) + 2 <= frame.len());
    }
    match v.gso {
        Gso::None => {}
        Gso::TcpV4 { size, .. } | Gso::TcpV6 { size, .. } | Gso::UdpL4 { size } => {
            assert!(size > 0 && usize::from(size) <= frame.len());
        }
    }
    assert!(usize::from(v.hdr_len) <= frame.len());
    let mut out = data.to_vec();
    v.emit(&mut out);
    assert_eq!(VnetRepr::parse(&out).map(|(r, _)| r), Ok(v));
}
