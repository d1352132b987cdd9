//! The namespace's route to the script's remote address, as the kernel
//! would use it for a socket there: its metrics (`ip route ... mtu [lock]
//! N advmss N initcwnd N`, which scripts set with `ip route change`) go to
//! the engine as [`RouteMetrics`] for that destination.
//!
//! Read with one `RTM_GETROUTE` request for the address over rtnetlink
//! (what `ip route get ADDR` asks), again after each route change the
//! namespace announces (`RTMGRP_IPV4_ROUTE`, `RTMGRP_IPV6_ROUTE`).

use std::net::IpAddr;

use ustack_core::RouteMetrics;

use crate::qdisc::{align4, rtnl_request, NLMSG_ERROR, NLMSG_HDR, NLM_F_REQUEST};

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
/// `struct rtmsg`.
const RTMSG: usize = 12;
const RTA_DST: u16 = 1;
const RTA_METRICS: u16 = 8;
const RTAX_LOCK: u16 = 1;
const RTAX_MTU: u16 = 2;
const RTAX_ADVMSS: u16 = 8;
const RTAX_INITCWND: u16 = 11;
/// rtnetlink's multicast groups of IPv4 and IPv6 route changes.
pub const RTMGRP_IPV4_ROUTE: u32 = 0x40;
pub const RTMGRP_IPV6_ROUTE: u32 = 0x400;

/// The metrics of the kernel's route to `dst`; None when there is no
/// route, the query fails, or the route sets none of the metrics the
/// engine models.
pub fn metrics_to(dst: IpAddr) -> Option<RouteMetrics> {
    rtnl_request(&request(dst), |fd| {
        let mut buf = vec![0u8; 16 * 1024];
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return None;
        }
        parse(buf.get(..n as usize)?)
    })
}

/// The `RTM_GETROUTE` request for `dst`.
fn request(dst: IpAddr) -> Vec<u8> {
    let (family, addr): (u8, Vec<u8>) = match dst {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
    };
    let mut req = vec![0u8; NLMSG_HDR + RTMSG];
    req[4..6].copy_from_slice(&RTM_GETROUTE.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[NLMSG_HDR] = family;
    req[NLMSG_HDR + 1] = (addr.len() * 8) as u8; // rtm_dst_len
    let alen = (4 + addr.len()) as u16;
    req.extend_from_slice(&alen.to_ne_bytes());
    req.extend_from_slice(&RTA_DST.to_ne_bytes());
    req.extend_from_slice(&addr);
    req.resize(align4(req.len()), 0);
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req
}

/// The metrics of the `RTM_NEWROUTE` answer in `b`.
pub fn parse(b: &[u8]) -> Option<RouteMetrics> {
    if b.len() < NLMSG_HDR {
        return None;
    }
    let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let ty = u16::from_ne_bytes([b[4], b[5]]);
    if ty == NLMSG_ERROR || ty != RTM_NEWROUTE || len < NLMSG_HDR + RTMSG || len > b.len() {
        return None;
    }
    let mut m = RouteMetrics::default();
    for (ty, v) in attrs(&b[NLMSG_HDR + RTMSG..len]) {
        if ty != RTA_METRICS {
            continue;
        }
        let mut lock = 0u32;
        for (ty, v) in attrs(v) {
            let Some(x) = v
                .get(..4)
                .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
            else {
                continue;
            };
            match ty {
                RTAX_LOCK => lock = x,
                RTAX_MTU => m.mtu = u16::try_from(x).ok().filter(|&x| x > 0),
                RTAX_ADVMSS => m.advmss = u16::try_from(x).ok().filter(|&x| x > 0),
                RTAX_INITCWND => m.initcwnd = Some(x).filter(|&x| x > 0),
                _ => {}
            }
        }
        m.mtu_locked = m.mtu.is_some() && lock & (1 << RTAX_MTU) != 0;
    }
    (m != RouteMetrics::default()).then_some(m)
}

/// The `(type, value)` of each route attribute in `a`.
fn attrs(mut a: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if a.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([a[0], a[1]]));
        let ty = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
        if len < 4 || len > a.len() {
            return None;
        }
        let v = &a[4..len];
        a = a.get(align4(len)..).unwrap_or(&[]);
        Some((ty, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        a.resize(align4(a.len()), 0);
        a
    }

    #[test]
    fn route_metrics_are_read_from_an_answer() {
        // `192.0.2.1 via 192.168.0.2 dev tun0 advmss 600 mtu lock 640
        // initcwnd 11`, as the kernel answers RTM_GETROUTE.
        let mut metrics = attr(RTAX_LOCK, &(1u32 << RTAX_MTU).to_ne_bytes());
        metrics.extend(attr(RTAX_MTU, &640u32.to_ne_bytes()));
        metrics.extend(attr(RTAX_ADVMSS, &600u32.to_ne_bytes()));
        metrics.extend(attr(RTAX_INITCWND, &11u32.to_ne_bytes()));
        let mut m = vec![0u8; NLMSG_HDR + RTMSG];
        m[4..6].copy_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        m.extend(attr(RTA_DST, &[192, 0, 2, 1]));
        m.extend(attr(RTA_METRICS, &metrics));
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        let r = parse(&m).unwrap_or_default();
        assert_eq!(
            r,
            RouteMetrics {
                mtu: Some(640),
                mtu_locked: true,
                advmss: Some(600),
                initcwnd: Some(11),
            }
        );
        // No metrics: nothing to configure. Truncated: nothing at all.
        let mut bare = vec![0u8; NLMSG_HDR + RTMSG];
        bare[0..4].copy_from_slice(&((NLMSG_HDR + RTMSG) as u32).to_ne_bytes());
        bare[4..6].copy_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        assert_eq!(parse(&bare), None);
        assert_eq!(parse(&m[..20]), None);
        // The request names the destination.
        let q = request("192.0.2.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])));
        assert_eq!(&q[q.len() - 4..], &[192, 0, 2, 1]);
        assert_eq!(q.len() % 4, 0);
    }
}
