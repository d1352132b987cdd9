//! The IPv6-family and DHCP parser targets' bodies (one function per
//! `fuzz/fuzz_targets/<name>.rs`): every accessor, parse, re-emit into
//! `buffer_len` bytes, re-parse to the same value (and, where the format has
//! one canonical encoding, to the same bytes).

use std::net::Ipv6Addr;
use ustack_wire::dhcpv4::{Dhcpv4OptionWriter, Dhcpv4Options, Dhcpv4Packet, Dhcpv4Repr};
use ustack_wire::dhcpv6::{Dhcpv6Option, Dhcpv6OptionWriter, Dhcpv6Packet, Dhcpv6Repr};
use ustack_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr, IPV6_HEADER_LEN};
use ustack_wire::ipv6ext::{
    ChainItem, ChainLimits, ExtHeaderKind, Ipv6ExtHeader, Ipv6FragmentRepr, Ipv6HeaderChain,
    Ipv6OptionRepr, Ipv6OptionsRepr, Ipv6RoutingRepr,
};
use ustack_wire::mld::MldRepr;
use ustack_wire::ndisc::{NdiscOptions, NdiscRepr};

const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1);
const DST: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// IPv6: new_checked + accessors + parse + quoted parse; re-emit and
/// re-parse; then the extension-header chain (see [`ipv6_ext`]).
pub fn ipv6(data: &[u8]) {
    let _ = Ipv6Repr::parse_quoted(data);
    let Ok(p) = Ipv6Packet::new_checked(data) else {
        return;
    };
    let _ = (p.version(), p.traffic_class(), p.ecn(), p.flow_label());
    let _ = (p.payload_len(), p.next_header(), p.hop_limit());
    let _ = (p.src_addr(), p.dst_addr(), p.payload().len());
    let Ok(repr) = Ipv6Repr::parse(&p) else {
        return;
    };
    let payload = p.payload();
    assert_eq!(repr.payload_len, payload.len());
    let mut out = vec![0u8; repr.buffer_len()];
    let mut q = Ipv6Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut q);
    q.payload_mut().copy_from_slice(payload);
    let again = Ipv6Packet::new_checked(&out[..]).expect("emitted IPv6 must be valid");
    assert_eq!(Ipv6Repr::parse(&again), Ok(repr));
    assert_eq!(&out[..], &data[..out.len()]);
    let _ = repr.to_string();
    walk(repr.next_header, payload);
}

/// The chain walk alone: the first byte is the first Next Header, the rest
/// the payload after the fixed header.
pub fn ipv6_ext(data: &[u8]) {
    let Some((&first, payload)) = data.split_first() else {
        return;
    };
    walk(IpProtocol::from(first), payload);
}

fn walk(first: IpProtocol, payload: &[u8]) {
    for limits in [
        ChainLimits::default(),
        ChainLimits {
            max_headers: 2,
            max_len: 64,
        },
    ] {
        let mut n = 0;
        let mut ended = false;
        for item in Ipv6HeaderChain::new(first, payload, limits) {
            assert!(!ended, "nothing after the end of the chain");
            let Ok(item) = item else {
                ended = true;
                continue;
            };
            match item {
                ChainItem::Ext(h) => {
                    n += 1;
                    assert!(n <= limits.max_headers);
                    let end = h.offset + h.bytes.len();
                    assert!(end <= IPV6_HEADER_LEN + payload.len());
                    assert!(end - IPV6_HEADER_LEN <= limits.max_len);
                    ext_header(h.kind, h.bytes);
                    if let Some(opts) = h.options() {
                        for o in opts.flatten() {
                            assert!(h.option_pointer(&o) < end);
                        }
                    }
                }
                ChainItem::Upper { offset, .. } | ChainItem::FragmentData { offset, .. } => {
                    assert!(offset <= IPV6_HEADER_LEN + payload.len());
                    ended = true;
                }
            }
        }
        let _ = Ipv6HeaderChain::new(first, payload, limits).walk();
    }
}

fn ext_header(kind: ExtHeaderKind, bytes: &[u8]) {
    match kind {
        ExtHeaderKind::HopByHop | ExtHeaderKind::DestinationOptions => {
            let h = Ipv6ExtHeader::new_checked(bytes).expect("walked header fits");
            let _ = (h.next_header(), h.header_len_field(), h.data().len());
            let Ok(r) = Ipv6OptionsRepr::parse(&h) else {
                return;
            };
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut Ipv6ExtHeader::new_unchecked(&mut out[..]));
            assert_eq!(out, bytes);
            for o in r.options() {
                let o = o.expect("validated options");
                let Ok(or) = Ipv6OptionRepr::parse(&o) else {
                    continue;
                };
                let mut b = vec![0u8; or.buffer_len()];
                assert_eq!(or.emit(&mut b), Ok(b.len()));
                let back = ustack_wire::ipv6ext::Ipv6Options::new(&b)
                    .next()
                    .expect("one option")
                    .expect("fits");
                assert_eq!(Ipv6OptionRepr::parse(&back), Ok(or));
            }
        }
        ExtHeaderKind::Routing => {
            let h = Ipv6ExtHeader::new_checked(bytes).expect("walked header fits");
            let r = Ipv6RoutingRepr::parse(&h).expect("routing header parses");
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut Ipv6ExtHeader::new_unchecked(&mut out[..]));
            assert_eq!(out, bytes);
        }
        ExtHeaderKind::Fragment => {
            let f = Ipv6FragmentRepr::parse(bytes).expect("walked fragment header fits");
            let mut out = [0u8; 8];
            f.emit(&mut out).expect("8 bytes");
            assert_eq!(Ipv6FragmentRepr::parse(&out), Ok(f));
            let _ = (f.is_atomic(), f.to_string());
        }
        ExtHeaderKind::Authentication | ExtHeaderKind::Uniform(_) => {}
    }
}

/// ICMPv6 (with NDP and MLD inside): accessors + parse; re-emit with the
/// checksum and re-parse (checksum verified) to the same value.
pub fn icmpv6(data: &[u8]) {
    let Ok(p) = Icmpv6Packet::new_checked(data) else {
        return;
    };
    let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident());
    let _ = (p.echo_seq_no(), p.word(), p.data().len());
    let _ = (
        p.verify_checksum(&SRC, &DST),
        Icmpv6Repr::parse(&p, &SRC, &DST, true),
    );
    let _ = p.msg_type().is_error();
    let Ok(repr) = Icmpv6Repr::parse(&p, &SRC, &DST, false) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&SRC, &DST, &mut Icmpv6Packet::new_unchecked(&mut out[..]));
    let again = Icmpv6Packet::new_checked(&out[..]).expect("emitted ICMPv6 must be valid");
    assert_eq!(Icmpv6Repr::parse(&again, &SRC, &DST, true), Ok(repr));
    let _ = repr.to_string();
}

/// Neighbor Discovery alone (the ICMPv6 message; checksum not involved):
/// parse, re-emit, re-parse; each option re-emitted alone decodes the same.
pub fn ndisc(data: &[u8]) {
    let Ok(repr) = NdiscRepr::parse(data) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out);
    assert_eq!(NdiscRepr::parse(&out), Ok(repr));
    let opts = repr.options();
    let _ = (opts.source_ll_addr(), opts.target_ll_addr(), opts.mtu());
    let _ = opts.prefixes().count();
    for o in opts.iter() {
        let mut b = vec![0u8; o.buffer_len()];
        assert_eq!(o.emit(&mut b), Ok(b.len()));
        let back = NdiscOptions::new_checked(&b).expect("emitted option is valid");
        let mut it = back.iter();
        assert_eq!(it.next(), Some(o));
        assert_eq!(it.next(), None);
    }
    let _ = repr.to_string();
}

/// MLD alone: parse, re-emit, re-parse; records iterate to their count.
pub fn mld(data: &[u8]) {
    let Ok(repr) = MldRepr::parse(data) else {
        return;
    };
    if let MldRepr::Report { records } = repr {
        assert_eq!(records.iter().count(), usize::from(records.count()));
        for r in records.iter() {
            let mut b = vec![0u8; r.buffer_len()];
            assert_eq!(r.emit(&mut b), Ok(b.len()));
            assert_eq!(
                ustack_wire::mld::MldAddressRecord::parse(&b),
                Ok((r, b.len()))
            );
        }
    }
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out);
    assert_eq!(MldRepr::parse(&out), Ok(repr));
    let _ = repr.to_string();
}

/// DHCPv4: accessors + parse; re-emit to the same bytes; the options
/// rewritten one by one with the writer decode to the same sequence.
pub fn dhcpv4(data: &[u8]) {
    let Ok(p) = Dhcpv4Packet::new_checked(data) else {
        return;
    };
    let _ = (p.op(), p.htype(), p.hlen(), p.hops(), p.xid(), p.secs());
    let _ = (p.flags(), p.ciaddr(), p.yiaddr(), p.siaddr(), p.giaddr());
    let _ = (
        p.chaddr(),
        p.sname().len(),
        p.file().len(),
        p.options().len(),
    );
    let Ok(repr) = Dhcpv4Repr::parse(&p) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out).expect("buffer_len bytes");
    assert_eq!(&out[..], data);
    let o = repr.options;
    let _ = (
        o.message_type(),
        o.requested_ip(),
        o.server_id(),
        o.lease_time(),
    );
    let _ = (o.subnet_mask(), o.routers(), o.dns_servers());
    let _ = (o.parameter_request_list(), o.client_id(), o.hostname());
    let _ = (repr.client_mac(), repr.broadcast(), repr.to_string());
    // Decoded once, used for the length, the rewrite and the comparison.
    let opts: Vec<_> = o.iter().collect();
    let len: usize = opts.iter().map(|x| x.buffer_len()).sum();
    let mut buf = vec![0u8; len + 1];
    let mut w = Dhcpv4OptionWriter::new(&mut buf);
    for x in &opts {
        w.put(x).expect("a parsed option re-emits");
    }
    let area = w.finish(0).expect("room for End");
    let back = Dhcpv4Options::new_checked(area).expect("written options are valid");
    assert!(back.iter().eq(opts.iter().copied()));
}

/// DHCPv6: parse; re-emit to the same bytes; each option (and each nested
/// IA option) re-emitted alone decodes the same.
pub fn dhcpv6(data: &[u8]) {
    let Ok(p) = Dhcpv6Packet::new_checked(data) else {
        return;
    };
    let _ = (p.msg_type(), p.transaction_id(), p.options().len());
    let Ok(repr) = Dhcpv6Repr::parse(&p) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out).expect("buffer_len bytes");
    assert_eq!(&out[..], data);
    let o = repr.options;
    let _ = (
        o.client_id(),
        o.server_id(),
        o.elapsed_time(),
        o.rapid_commit(),
    );
    let _ = (o.status_code(), o.dns_servers(), o.preference());
    let _ = o.oro().map(|c| c.count());
    let _ = repr.to_string();
    for x in o.iter() {
        one_dhcpv6_option(&x);
        if let Dhcpv6Option::IaNa(ia) = x {
            for a in ia.addresses() {
                one_dhcpv6_option(&Dhcpv6Option::IaAddr(a));
            }
        }
    }
}

fn one_dhcpv6_option(x: &Dhcpv6Option<'_>) {
    let mut b = vec![0u8; x.buffer_len()];
    let mut w = Dhcpv6OptionWriter::new(&mut b);
    w.put(x).expect("a parsed option re-emits");
    let back = w.finish();
    let mut it = back.iter();
    assert_eq!(it.next().as_ref(), Some(x));
    assert_eq!(it.next(), None);
}
