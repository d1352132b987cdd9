//! IPv6 on the adapter's link, for packetdrill's `--ip_version=ipv6` runs.
//!
//! packetdrill hands the adapter IPv6 datagrams and expects the stack's
//! IPv6 TCP (and ICMPv6 error) datagrams back. The link-level business
//! around them stays here, as ARP does for IPv4: the host side answers
//! every Neighbor Solicitation itself (the peer owns every address), and
//! the stack's link-control ICMPv6 (Neighbor Discovery, MLD, router
//! solicitations) never reaches packetdrill, which would take it for an
//! unexpected packet.
//!
//! The stack's address comes from `--so_flags` `ip6=ADDR/LEN`; the runner
//! gives a prefix that holds packetdrill's remote address too
//! (`fd3d:a0b:17d6::1/16` holds `fd3d:fa7b:d17d::1`), so the peer is
//! on-link and resolved by Neighbor Discovery, as the IPv4 runs resolve
//! their gateway by ARP.

use std::net::Ipv6Addr;

use ustack_wire::checksum::{checksum_with, pseudo_header_v6};
use ustack_wire::ipv6::Ipv6Cidr;

use crate::ETH_HDR;

/// The IPv6 ethertype.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPV6_HDR: usize = 40;
const ICMPV6: u8 = 58;
const HOP_BY_HOP: u8 = 0;
const NEIGHBOR_SOLICIT: u8 = 135;
const NEIGHBOR_ADVERT: u8 = 136;

/// Parse `ADDR/LEN` (LEN defaults to 64).
pub fn parse_cidr6(v: &str) -> Result<Ipv6Cidr, String> {
    let (a, l) = v.split_once('/').unwrap_or((v, "64"));
    let address: Ipv6Addr = a.parse().map_err(|_| format!("bad IPv6 address {a:?}"))?;
    if address.is_multicast()
        || address.is_unspecified()
        || address.is_loopback()
        || address.to_ipv4_mapped().is_some()
    {
        return Err(format!("{a} is not an interface address"));
    }
    let prefix_len = l
        .parse()
        .ok()
        .filter(|l| (1..=128).contains(l))
        .ok_or_else(|| format!("bad IPv6 prefix length {l:?}"))?;
    Ok(Ipv6Cidr {
        address,
        prefix_len,
    })
}

/// The ICMPv6 message an IPv6 datagram carries (after a Hop-by-Hop
/// header, which MLD reports have), as its bytes.
fn icmp6(ip: &[u8]) -> Option<&[u8]> {
    if ip.len() < IPV6_HDR || ip[0] >> 4 != 6 {
        return None;
    }
    let mut nh = ip[6];
    let mut off = IPV6_HDR;
    if nh == HOP_BY_HOP {
        let h = ip.get(off..off + 2)?;
        nh = h[0];
        off += (usize::from(h[1]) + 1) * 8;
    }
    (nh == ICMPV6).then(|| ip.get(off..)).flatten()
}

/// Is this IPv6 datagram link control the host side keeps to itself:
/// Neighbor Discovery, MLD, router solicitation (ICMPv6 types 130-143),
/// or anything behind a Hop-by-Hop header (the stack's TCP has none)?
pub fn is_link_control(ip: &[u8]) -> bool {
    if ip.len() >= IPV6_HDR && ip[6] == HOP_BY_HOP {
        return true;
    }
    icmp6(ip)
        .and_then(|m| m.first())
        .is_some_and(|t| (130..=143).contains(t))
}

/// A Neighbor Advertisement from `peer_mac` answering a Neighbor
/// Solicitation in the Ethernet `frame` (the peer owns every address),
/// solicited and overriding, with the target's link-layer address.
pub fn neighbour_advert(frame: &[u8], peer_mac: [u8; 6]) -> Option<Vec<u8>> {
    if frame.get(12..14)? != ETHERTYPE_IPV6.to_be_bytes() {
        return None;
    }
    let ip = frame.get(ETH_HDR..)?;
    let m = icmp6(ip)?;
    if m.len() < 24 || m[0] != NEIGHBOR_SOLICIT || m[1] != 0 || ip[7] != 255 {
        return None;
    }
    let target: [u8; 16] = m[8..24].try_into().ok()?;
    let asker: [u8; 16] = ip[8..24].try_into().ok()?;
    // From the unspecified address (duplicate address detection): to all
    // nodes, not solicited (RFC 4861 7.2.4); the peer never claims the
    // stack's own tentative address, so that gets no answer.
    if asker == [0; 16] {
        return None;
    }
    let src = Ipv6Addr::from(target);
    let dst = Ipv6Addr::from(asker);
    // ICMPv6: type, code, checksum, flags (R=0, S=1, O=1), reserved,
    // target, option 2 (target link-layer address, 8 bytes).
    let mut na = vec![NEIGHBOR_ADVERT, 0, 0, 0, 0x60, 0, 0, 0];
    na.extend_from_slice(&target);
    na.extend_from_slice(&[2, 1]);
    na.extend_from_slice(&peer_mac);
    let c = checksum_with(pseudo_header_v6(&src, &dst, ICMPV6, na.len() as u32), &na);
    na[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(ETH_HDR + IPV6_HDR + na.len());
    f.extend_from_slice(&frame[6..12]);
    f.extend_from_slice(&peer_mac);
    f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(na.len() as u16).to_be_bytes());
    f.extend_from_slice(&[ICMPV6, 255]);
    f.extend_from_slice(&target);
    f.extend_from_slice(&asker);
    f.extend_from_slice(&na);
    Some(f)
}

/// The wire segments of an IPv6 TCP datagram (TCP right after the fixed
/// header) carrying more than `gso` bytes of payload, cut as Linux's
/// `tcp_gso_segment` cuts a GSO skb: `gso`-sized pieces, sequence numbers
/// advanced, CWR on the first only, FIN and PSH on the last only, payload
/// lengths and checksums recomputed. None if `gso` is 0 or the datagram
/// is not such a packet (the IPv4 twin is in lib.rs).
pub fn gso_segments(ip: &[u8], gso: usize) -> Option<Vec<Vec<u8>>> {
    if gso == 0 || ip.len() < IPV6_HDR + 20 || ip[0] >> 4 != 6 || ip[6] != 6 {
        return None;
    }
    let total = IPV6_HDR + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    if total > ip.len() || total < IPV6_HDR + 20 {
        return None;
    }
    let tcp = &ip[IPV6_HDR..total];
    let thl = usize::from(tcp[12] >> 4) * 4;
    if thl < 20 || thl > tcp.len() {
        return None;
    }
    let payload = &tcp[thl..];
    if payload.len() <= gso {
        return None;
    }
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).ok()?);
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).ok()?);
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let n = payload.len().div_ceil(gso);
    let mut out = Vec::with_capacity(n);
    for (i, piece) in payload.chunks(gso).enumerate() {
        let mut seg = Vec::with_capacity(IPV6_HDR + thl + piece.len());
        seg.extend_from_slice(&ip[..IPV6_HDR]);
        seg.extend_from_slice(&tcp[..thl]);
        seg.extend_from_slice(piece);
        let plen = u16::try_from(seg.len() - IPV6_HDR).ok()?;
        seg[4..6].copy_from_slice(&plen.to_be_bytes());
        let t = &mut seg[IPV6_HDR..];
        let s = seq.wrapping_add((i * gso) as u32);
        t[4..8].copy_from_slice(&s.to_be_bytes());
        // FIN 0x01, PSH 0x08 on the last; CWR 0x80 on the first.
        if i + 1 < n {
            t[13] &= !(0x01 | 0x08);
        }
        if i > 0 {
            t[13] &= !0x80;
        }
        t[16..18].copy_from_slice(&[0, 0]);
        let c = checksum_with(pseudo_header_v6(&src, &dst, 6, u32::from(plen)), t);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        out.push(seg);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUR: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    /// An ICMPv6 datagram in an Ethernet frame from us.
    fn frame(src: Ipv6Addr, dst: Ipv6Addr, hbh: bool, icmp: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        if hbh {
            // Hop-by-Hop: next header ICMPv6, length 0 (8 bytes),
            // router alert, padding.
            body.extend_from_slice(&[ICMPV6, 0, 5, 2, 0, 0, 1, 0]);
        }
        let mut m = icmp.to_vec();
        let c = checksum_with(pseudo_header_v6(&src, &dst, ICMPV6, m.len() as u32), &m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        body.extend_from_slice(&m);
        let mut f = vec![0x33, 0x33, 0, 0, 0, 1];
        f.extend_from_slice(&OUR);
        f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(body.len() as u16).to_be_bytes());
        f.extend_from_slice(&[if hbh { HOP_BY_HOP } else { ICMPV6 }, 255]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&body);
        f
    }

    #[test]
    fn cidr6_parses_and_refuses() {
        let c = parse_cidr6("fd3d:a0b:17d6::1/16").unwrap();
        assert_eq!(c.address, "fd3d:a0b:17d6::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(c.prefix_len, 16);
        assert_eq!(parse_cidr6("fd00::1").unwrap().prefix_len, 64);
        assert!(parse_cidr6("fd00::1/129").is_err());
        assert!(parse_cidr6("fd00::1/0").is_err());
        assert!(parse_cidr6("10.0.0.1/8").is_err());
        assert!(parse_cidr6("ff02::1/64").is_err());
        assert!(parse_cidr6("::/64").is_err());
    }

    #[test]
    fn neighbour_solicitations_are_answered_for_any_address() {
        let me: Ipv6Addr = "fd3d:a0b:17d6::1".parse().unwrap();
        let peer: Ipv6Addr = "fd3d:fa7b:d17d::1".parse().unwrap();
        let mut ns = vec![NEIGHBOR_SOLICIT, 0, 0, 0, 0, 0, 0, 0];
        ns.extend_from_slice(&peer.octets());
        ns.extend_from_slice(&[1, 1]);
        ns.extend_from_slice(&OUR);
        let f = frame(me, "ff02::1:ff00:1".parse().unwrap(), false, &ns);
        assert!(is_link_control(&f[ETH_HDR..]));
        let na = neighbour_advert(&f, PEER).unwrap();
        assert_eq!(&na[..6], &OUR);
        assert_eq!(&na[6..12], &PEER);
        let ip = &na[ETH_HDR..];
        assert_eq!(ip[7], 255, "hop limit");
        assert_eq!(&ip[8..24], &peer.octets(), "from the target");
        assert_eq!(&ip[24..40], &me.octets(), "to the asker");
        let m = &ip[IPV6_HDR..];
        assert_eq!((m[0], m[1], m[4]), (NEIGHBOR_ADVERT, 0, 0x60));
        assert_eq!(&m[8..24], &peer.octets());
        assert_eq!(&m[24..32], &[2, 1, 2, 0, 0, 0, 0, 2]);
        let ph = pseudo_header_v6(&peer, &me, ICMPV6, m.len() as u32);
        assert_eq!(checksum_with(ph, m), 0, "checksum");
        // Duplicate address detection and truncated messages: no answer.
        let dad = frame(
            Ipv6Addr::UNSPECIFIED,
            "ff02::1:ff00:1".parse().unwrap(),
            false,
            &ns,
        );
        assert!(neighbour_advert(&dad, PEER).is_none());
        assert!(neighbour_advert(&f[..f.len() - 20], PEER).is_none());
    }

    #[test]
    fn ipv6_gso_packets_are_cut_as_linux_cuts_them() {
        let src: Ipv6Addr = "fd3d:fa7b:d17d::1".parse().unwrap();
        let dst: Ipv6Addr = "fd3d:a0b:17d6::1".parse().unwrap();
        let payload = 2500;
        let mut d = vec![0x60, 0, 0, 0];
        d.extend_from_slice(&((20 + payload) as u16).to_be_bytes());
        d.extend_from_slice(&[6, 64]);
        d.extend_from_slice(&src.octets());
        d.extend_from_slice(&dst.octets());
        d.extend_from_slice(&8080u16.to_be_bytes());
        d.extend_from_slice(&80u16.to_be_bytes());
        d.extend_from_slice(&1000u32.to_be_bytes());
        d.extend_from_slice(&7u32.to_be_bytes());
        // PSH|ACK|CWR.
        d.extend_from_slice(&[0x50, 0x80 | 0x10 | 0x08, 1, 0, 0, 0, 0, 0]);
        d.extend((0..payload).map(|i| i as u8));
        assert!(gso_segments(&d, 0).is_none(), "no --mss: as it came");
        assert!(gso_segments(&d, 2500).is_none(), "not more than gso_size");
        assert!(gso_segments(&d[..50], 1000).is_none(), "truncated");
        let segs = gso_segments(&d, 1000).unwrap();
        assert_eq!(segs.len(), 3);
        let mut data = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let plen = usize::from(u16::from_be_bytes([s[4], s[5]]));
            assert_eq!(plen + IPV6_HDR, s.len());
            assert_eq!(plen - 20, if i < 2 { 1000 } else { 500 });
            let ph = pseudo_header_v6(&src, &dst, 6, plen as u32);
            assert_eq!(checksum_with(ph, &s[IPV6_HDR..]), 0, "TCP checksum");
            let t = &s[IPV6_HDR..];
            assert_eq!(
                u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
                1000 + 1000 * i as u32
            );
            assert_eq!(t[13] & 0x10, 0x10, "ACK on all");
            assert_eq!(t[13] & 0x08 != 0, i == 2, "PSH on the last only");
            assert_eq!(t[13] & 0x80 != 0, i == 0, "CWR on the first only");
            data.extend_from_slice(&t[20..]);
        }
        assert_eq!(data, &d[60..]);
        // Not TCP, or IPv4: as it came.
        let mut udp = d.clone();
        udp[6] = 17;
        assert!(gso_segments(&udp, 1000).is_none());
        let mut v4 = d.clone();
        v4[0] = 0x45;
        assert!(gso_segments(&v4, 1000).is_none());
    }

    #[test]
    fn link_control_is_kept_from_packetdrill() {
        let me: Ipv6Addr = "fe80::1".parse().unwrap();
        let mld = frame(
            me,
            "ff02::16".parse().unwrap(),
            true,
            &[143, 0, 0, 0, 0, 0, 0, 0],
        );
        assert!(is_link_control(&mld[ETH_HDR..]));
        let rs = frame(
            me,
            "ff02::2".parse().unwrap(),
            false,
            &[133, 0, 0, 0, 0, 0, 0, 0],
        );
        assert!(is_link_control(&rs[ETH_HDR..]));
        // An ICMPv6 error (destination unreachable) and TCP go through.
        let du = frame(
            me,
            "fd00::9".parse().unwrap(),
            false,
            &[1, 4, 0, 0, 0, 0, 0, 0],
        );
        assert!(!is_link_control(&du[ETH_HDR..]));
        let mut tcp = du[ETH_HDR..].to_vec();
        tcp[6] = 6;
        assert!(!is_link_control(&tcp));
        assert!(!is_link_control(&tcp[..20]));
    }
}
