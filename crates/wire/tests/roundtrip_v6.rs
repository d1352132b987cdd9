//! repr -> emit -> parse == repr for the IPv6-family and DHCP formats
//! (proptest), with every option kind built through the writers.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use ustack_wire::dhcpv4::{
    Dhcpv4MessageType, Dhcpv4Option, Dhcpv4OptionWriter, Dhcpv4Options, Dhcpv4Packet, Dhcpv4Repr,
};
use ustack_wire::dhcpv6::{
    Dhcpv6MessageType, Dhcpv6Option, Dhcpv6OptionWriter, Dhcpv6Options, Dhcpv6Packet, Dhcpv6Repr,
    IaAddress, IaNa,
};
use ustack_wire::icmpv6::{DstUnreachable, Icmpv6Packet, Icmpv6Repr, ParamProblem, TimeExceeded};
use ustack_wire::ip::{IpProtocol, Ipv4AddrList, Ipv6AddrList};
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use ustack_wire::ipv6ext::{
    ChainLimits, Ipv6ExtHeader, Ipv6FragmentRepr, Ipv6HeaderChain, Ipv6OptionRepr, Ipv6OptionsRepr,
};
use ustack_wire::mld::{MldAddressRecord, MldRecords, MldRepr};
use ustack_wire::ndisc::{NdiscOption, NdiscOptions, NdiscRepr, PrefixInfo};

fn ip6() -> impl Strategy<Value = Ipv6Addr> {
    any::<[u8; 16]>().prop_map(Ipv6Addr::from)
}

fn ip4() -> impl Strategy<Value = Ipv4Addr> {
    any::<[u8; 4]>().prop_map(Ipv4Addr::from)
}

fn ipv6_repr(max_payload: usize) -> impl Strategy<Value = Ipv6Repr> {
    (
        (ip6(), ip6(), any::<u8>(), 0..=max_payload),
        (any::<u8>(), any::<u8>(), 0u32..(1 << 20)),
    )
        .prop_map(
            |((src, dst, nh, payload_len), (hop_limit, tc, flow))| Ipv6Repr {
                src,
                dst,
                next_header: IpProtocol::from(nh),
                payload_len,
                hop_limit,
                traffic_class: tc,
                flow_label: flow,
            },
        )
}

fn emit_icmp(r: &Icmpv6Repr, src: &Ipv6Addr, dst: &Ipv6Addr) -> Vec<u8> {
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(src, dst, &mut Icmpv6Packet::new_unchecked(&mut out[..]));
    out
}

fn parse_icmp<'a>(b: &'a [u8], src: &Ipv6Addr, dst: &Ipv6Addr) -> Icmpv6Repr<'a> {
    let p = Icmpv6Packet::new_checked(b).unwrap();
    Icmpv6Repr::parse(&p, src, dst, true).unwrap()
}

/// One NDP option of any kind, as (kind, bytes of data, numbers).
fn ndisc_options() -> impl Strategy<Value = Vec<(u8, Vec<u8>, u32, [u8; 16])>> {
    proptest::collection::vec(
        (
            0u8..6,
            proptest::collection::vec(any::<u8>(), 0..40),
            any::<u32>(),
            any::<[u8; 16]>(),
        ),
        0..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn ipv6_header(r in ipv6_repr(2000)) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(Ipv6Repr::parse(&p), Ok(r));
        let (q, data) = Ipv6Repr::parse_quoted(&b[..b.len().min(100)]).unwrap();
        prop_assert_eq!(q, r);
        prop_assert!(data.len() <= r.payload_len);
    }

    #[test]
    fn fragment_and_options_headers(
        nh in any::<u8>(), off in 0u16..8192, mf in any::<bool>(), id in any::<u32>(),
        opts in proptest::collection::vec((0x02u8..0xff, proptest::collection::vec(any::<u8>(), 0..20)), 0..5),
    ) {
        let f = Ipv6FragmentRepr { next_header: IpProtocol::from(nh), frag_offset: off * 8, more_frags: mf, ident: id };
        let mut b = [0u8; 8];
        f.emit(&mut b).unwrap();
        prop_assert_eq!(Ipv6FragmentRepr::parse(&b), Ok(f));
        // Options built one by one (Router Alert needs 2 data bytes).
        let mut area = vec![0u8; 256];
        let mut n = 0;
        for (t, d) in &opts {
            let o = if *t == 5 { Ipv6OptionRepr::RouterAlert(0) } else { Ipv6OptionRepr::Unknown { option_type: *t, data: d } };
            n += o.emit(&mut area[n..]).unwrap();
        }
        let r = Ipv6OptionsRepr { next_header: IpProtocol::Tcp, options: &area[..n] };
        let mut h = vec![0u8; r.buffer_len()];
        r.emit(&mut Ipv6ExtHeader::new_unchecked(&mut h[..]));
        let parsed = Ipv6OptionsRepr::parse(&Ipv6ExtHeader::new_checked(&h[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed.next_header, IpProtocol::Tcp);
        prop_assert_eq!(&parsed.options[..n], &area[..n]);
        // The padding parses as Pad1/PadN only.
        let non_pad = parsed.options().filter(|o| !matches!(o.as_ref().map(|o| o.option_type), Ok(0) | Ok(1))).count();
        prop_assert_eq!(non_pad, opts.len());
        // As a Destination Options header before TCP: the walk ends on TCP.
        let mut chain = h.clone();
        chain.extend_from_slice(&[0u8; 20]);
        let s = Ipv6HeaderChain::new(IpProtocol::IPV6_OPTS, &chain, ChainLimits::default()).walk().unwrap();
        prop_assert_eq!((s.upper, s.offset), (IpProtocol::Tcp, 40 + h.len()));
    }

    #[test]
    fn icmpv6_echo_and_errors(
        src in ip6(), dst in ip6(), kind in 0u8..6, a in any::<u16>(), b in any::<u16>(),
        word in any::<u32>(), code in any::<u8>(), quoted in ipv6_repr(1500),
        data in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let data = &data[..data.len().min(quoted.payload_len)];
        let r = match kind {
            0 => Icmpv6Repr::EchoRequest { ident: a, seq_no: b, data },
            1 => Icmpv6Repr::EchoReply { ident: a, seq_no: b, data },
            2 => Icmpv6Repr::DstUnreachable { reason: DstUnreachable::from(code), header: quoted, data },
            3 => Icmpv6Repr::PacketTooBig { mtu: word, header: quoted, data },
            4 => Icmpv6Repr::TimeExceeded { reason: TimeExceeded::from(code), header: quoted, data },
            _ => Icmpv6Repr::ParamProblem { reason: ParamProblem::from(code), pointer: word, header: quoted, data },
        };
        let out = emit_icmp(&r, &src, &dst);
        prop_assert_eq!(parse_icmp(&out, &src, &dst), r);
    }

    #[test]
    fn ndisc_messages(
        src in ip6(), dst in ip6(), kind in 0u8..5, t1 in ip6(), t2 in ip6(),
        flags in any::<u8>(), hl in any::<u8>(), life in any::<u16>(), n1 in any::<u32>(), n2 in any::<u32>(),
        spec in ndisc_options(),
    ) {
        let mut servers = Vec::new();
        for (_, _, _, a) in &spec {
            servers.push(Ipv6Addr::from(*a));
        }
        let mut buf = vec![0u8; 2048];
        let mut n = 0;
        let mut want = Vec::new();
        for (i, (k, d, num, a)) in spec.iter().enumerate() {
            let o = match k {
                0 => NdiscOption::SourceLinkLayerAddr(&d[..6.min(d.len())]),
                1 => NdiscOption::Mtu(*num),
                2 => NdiscOption::PrefixInformation(PrefixInfo { prefix_len: d.len() as u8, flags: *num as u8, valid_lifetime: *num, preferred_lifetime: num.rotate_left(7), prefix: Ipv6Addr::from(*a) }),
                3 => NdiscOption::Rdnss { lifetime: *num, servers: Ipv6AddrList::Addrs(&servers[..=i]) },
                4 => NdiscOption::TargetLinkLayerAddr(&d[..6.min(d.len())]),
                _ => NdiscOption::Unknown { option_type: 100 + (*num as u8 % 100), data: if d.len() >= 6 { &d[..6 + (d.len() - 6) / 8 * 8] } else { &[] } },
            };
            n += o.emit(&mut buf[n..]).unwrap();
            want.push(o);
        }
        let options = NdiscOptions::new_checked(&buf[..n]).unwrap();
        let nd = match kind {
            0 => NdiscRepr::RouterSolicit { options },
            1 => NdiscRepr::RouterAdvert { hop_limit: hl, flags, router_lifetime: life, reachable_time: n1, retrans_time: n2, options },
            2 => NdiscRepr::NeighborSolicit { target: t1, options },
            3 => NdiscRepr::NeighborAdvert { flags: flags & 0xe0, target: t1, options },
            _ => NdiscRepr::Redirect { target: t1, dest: t2, options },
        };
        let r = Icmpv6Repr::Ndisc(nd);
        let out = emit_icmp(&r, &src, &dst);
        let back = parse_icmp(&out, &src, &dst);
        prop_assert_eq!(back, r);
        let Icmpv6Repr::Ndisc(nd) = back else { unreachable!() };
        // Link-layer addresses shorter than 6 bytes come back zero-padded.
        prop_assert_eq!(nd.options().iter().count(), want.len());
    }

    #[test]
    fn mld_reports(
        src in ip6(), dst in ip6(),
        recs in proptest::collection::vec((1u8..7, ip6(), proptest::collection::vec(ip6(), 0..3), 0usize..3), 0..5),
    ) {
        let mut buf = vec![0u8; 1024];
        let mut n = 0;
        let aux = [7u8; 8];
        for (t, m, s, a) in &recs {
            let r = MldAddressRecord { record_type: *t, mcast_addr: *m, sources: Ipv6AddrList::Addrs(s), aux_data: &aux[..a * 4 % 12] };
            n += r.emit(&mut buf[n..]).unwrap();
        }
        let records = MldRecords::new_checked(&buf[..n], recs.len() as u16).unwrap();
        let r = Icmpv6Repr::Mld(MldRepr::Report { records });
        let out = emit_icmp(&r, &src, &dst);
        prop_assert_eq!(parse_icmp(&out, &src, &dst), r);
        let Icmpv6Repr::Mld(MldRepr::Report { records }) = parse_icmp(&out, &src, &dst) else { unreachable!() };
        for (got, (t, m, s, _)) in records.iter().zip(&recs) {
            prop_assert_eq!((got.record_type, got.mcast_addr), (*t, *m));
            prop_assert_eq!(got.sources.iter().collect::<Vec<_>>(), s.clone());
        }
    }

    #[test]
    fn dhcpv4_messages(
        xid in any::<u32>(), ty in 1u8..9, a in ip4(), b in ip4(), t in any::<u32>(),
        dns in proptest::collection::vec(ip4(), 1..4), name in proptest::collection::vec(any::<u8>(), 1..30),
        chaddr in any::<[u8; 16]>(), flags in any::<u16>(),
    ) {
        let opts = [
            Dhcpv4Option::MessageType(Dhcpv4MessageType::from(ty)),
            Dhcpv4Option::RequestedIp(a),
            Dhcpv4Option::ServerId(b),
            Dhcpv4Option::LeaseTime(t),
            Dhcpv4Option::SubnetMask(b),
            Dhcpv4Option::Router(Ipv4AddrList::Addrs(&dns[..1])),
            Dhcpv4Option::DnsServers(Ipv4AddrList::Addrs(&dns)),
            Dhcpv4Option::ParameterRequestList(&name),
            Dhcpv4Option::ClientId(&chaddr[..7]),
            Dhcpv4Option::Hostname(&name),
        ];
        let mut area = [0u8; 512];
        let mut w = Dhcpv4OptionWriter::new(&mut area);
        for o in &opts {
            w.put(o).unwrap();
        }
        let options = Dhcpv4Options::new_checked(w.finish(60).unwrap()).unwrap();
        let r = Dhcpv4Repr { op: 2, htype: 1, hlen: 6, hops: 0, xid, secs: 3, flags, ciaddr: a, yiaddr: b, siaddr: a, giaddr: b, chaddr, sname: &[0; 64], file: &[0; 128], options };
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out).unwrap();
        prop_assert!(out.len() >= 300);
        let back = Dhcpv4Repr::parse(&Dhcpv4Packet::new_checked(&out[..]).unwrap()).unwrap();
        prop_assert_eq!(back, r);
        prop_assert!(back.options.iter().eq(opts.iter().copied()));
        prop_assert_eq!(back.message_type(), Some(Dhcpv4MessageType::from(ty)));
    }

    #[test]
    fn dhcpv6_messages(
        xid in 0u32..(1 << 24), ty in 1u8..12, addr in ip6(), t in any::<u32>(),
        dns in proptest::collection::vec(ip6(), 0..3), duid in proptest::collection::vec(any::<u8>(), 1..20),
        code in any::<u16>(), msg in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let mut ia = [0u8; 128];
        let mut w = Dhcpv6OptionWriter::new(&mut ia);
        w.put(&Dhcpv6Option::IaAddr(IaAddress { addr, preferred_lifetime: t, valid_lifetime: t, options: Dhcpv6Options::default() })).unwrap();
        w.put(&Dhcpv6Option::StatusCode { code, message: &msg }).unwrap();
        let ia_opts = w.finish();
        let opts = [
            Dhcpv6Option::ClientId(&duid),
            Dhcpv6Option::ServerId(&duid),
            Dhcpv6Option::IaNa(IaNa { iaid: t, t1: t / 2, t2: t / 3, options: ia_opts }),
            Dhcpv6Option::Oro(&[0, 23, 0, 24]),
            Dhcpv6Option::ElapsedTime(code),
            Dhcpv6Option::RapidCommit,
            Dhcpv6Option::DnsServers(Ipv6AddrList::Addrs(&dns)),
            Dhcpv6Option::StatusCode { code, message: &msg },
        ];
        let mut buf = [0u8; 1024];
        let mut w = Dhcpv6OptionWriter::new(&mut buf);
        for o in &opts {
            w.put(o).unwrap();
        }
        let r = Dhcpv6Repr { msg_type: Dhcpv6MessageType::from(ty), transaction_id: xid, options: w.finish() };
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out).unwrap();
        let back = Dhcpv6Repr::parse(&Dhcpv6Packet::new_checked(&out[..]).unwrap()).unwrap();
        prop_assert_eq!(back, r);
        prop_assert!(back.options.iter().eq(opts.iter().copied()));
        let got: Vec<_> = back.options.ia_na().flat_map(|ia| ia.addresses().collect::<Vec<_>>()).map(|a| a.addr).collect();
        prop_assert_eq!(got, vec![addr]);
    }
}
