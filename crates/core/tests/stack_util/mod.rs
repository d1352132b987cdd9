//! Two `Stack`s wired back to back on a virtual clock (shared by the
//! `stack_*` integration tests).
#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use ustack_core::tcp::TcpConfig;
use ustack_core::time::{Duration, Instant};
use ustack_core::{Config, Limits, Stack, TcpError, TcpHandle};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv4::{DstUnreachable, Icmpv4Packet, Icmpv4Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr};
use ustack_wire::ipv6::Ipv6Cidr;
use ustack_wire::tcp::{TcpPacket, TcpRepr};

pub const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const A_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
pub const B_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

pub fn config(mac: MacAddr, ip: Ipv4Addr, seed: u64) -> Config {
    Config {
        mac,
        addr: Ipv4Cidr {
            address: ip,
            prefix_len: 24,
        },
        gateway: None,
        mtu: 1500,
        tcp: TcpConfig::default(),
        limits: Limits::default(),
        secret: [seed as u8; 16],
        seed,
    }
}

/// Decides the fate of a frame in flight: `true` = deliver.
pub type Filter = Box<dyn FnMut(&[u8]) -> bool>;

/// A router on the path from A to B whose MTU is `mtu`: an IPv4 datagram
/// longer than that with DF set does not reach B; with `icmp` the router
/// answers it with ICMP "fragmentation needed" carrying its MTU (RFC
/// 1191), without it the path is a black hole (RFC 2923). Datagrams
/// without DF pass (as if fragmented and reassembled on the way).
#[derive(Debug, Clone, Copy, Default)]
pub struct Router {
    pub mtu: usize,
    pub icmp: bool,
    /// Datagrams dropped for their size.
    pub dropped: u64,
    pub icmp_sent: u64,
}

impl Router {
    pub fn new(mtu: usize, icmp: bool) -> Router {
        Router {
            mtu,
            icmp,
            ..Router::default()
        }
    }

    /// Whether `frame` passes; the ICMP error for A if it does not.
    fn forward(&mut self, frame: &[u8]) -> (bool, Option<Vec<u8>>) {
        let Some((ip, payload)) = parse_ip(frame) else {
            return (true, None);
        };
        if !ip.dont_frag || 20 + payload.len() <= self.mtu {
            return (true, None);
        }
        self.dropped += 1;
        if !self.icmp {
            return (false, None);
        }
        self.icmp_sent += 1;
        let quote = &payload[..payload.len().min(8)];
        let mtu = u16::try_from(self.mtu).unwrap_or(u16::MAX);
        let icmp = icmp_unreachable_to_a(&ip, DstUnreachable::FragRequired, mtu, quote);
        (false, Some(icmp))
    }
}

/// The IPv6 addresses of the two stacks of [`net6`] (fd00::/64), and a
/// third host on that link that tests play by hand.
pub const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
pub const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
pub const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9);
pub const PEER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);

/// `a`/64.
pub fn cidr(a: Ipv6Addr) -> Ipv6Cidr {
    Ipv6Cidr {
        address: a,
        prefix_len: 64,
    }
}

/// [`Net::new`] with fd00::1/64 on A and fd00::2/64 on B as well.
pub fn net6() -> Net {
    let mut n = Net::new();
    for (s, a) in [(&mut n.a, A6), (&mut n.b, B6)] {
        s.add_ipv6_address(cidr(a)).expect("add an IPv6 address");
    }
    n
}

pub struct Net {
    pub a: Stack,
    pub b: Stack,
    pub now: Instant,
    /// Every frame sent by A / B (delivered or not), for inspection.
    pub log_ab: Vec<Vec<u8>>,
    pub log_ba: Vec<Vec<u8>>,
    pub filter_ab: Option<Filter>,
    pub filter_ba: Option<Filter>,
    /// A router with a smaller MTU on the path A -> B.
    pub router_ab: Option<Router>,
    q_ab: Vec<Vec<u8>>,
    q_ba: Vec<Vec<u8>>,
    pub keep_log: bool,
    /// Hand B what A sent in one round as one burst
    /// (`Stack::receive_burst`, which coalesces TCP segments) instead of
    /// frame by frame.
    pub burst_ab: bool,
}

impl Net {
    pub fn new() -> Net {
        Self::with_configs(config(A_MAC, A_IP, 1), config(B_MAC, B_IP, 2))
    }

    pub fn with_configs(ca: Config, cb: Config) -> Net {
        let now = Instant::from_secs(1);
        Net {
            a: Stack::new(ca, now),
            b: Stack::new(cb, now),
            now,
            log_ab: Vec::new(),
            log_ba: Vec::new(),
            filter_ab: None,
            filter_ba: None,
            router_ab: None,
            q_ab: Vec::new(),
            q_ba: Vec::new(),
            keep_log: true,
            burst_ab: false,
        }
    }

    /// Run both stacks at the current time until no frame is in flight.
    pub fn pump(&mut self) {
        for _ in 0..100_000 {
            let now = self.now;
            let mut q_ab = std::mem::take(&mut self.q_ab);
            let mut q_ba = std::mem::take(&mut self.q_ba);
            if self.a.poll_at().is_some_and(|t| t <= now) {
                self.a.poll(now, &mut |f| q_ab.push(f.to_vec()));
            }
            if self.b.poll_at().is_some_and(|t| t <= now) {
                self.b.poll(now, &mut |f| q_ba.push(f.to_vec()));
            }
            if q_ab.is_empty() && q_ba.is_empty() {
                return;
            }
            let mut next_ab = Vec::new();
            let mut next_ba = Vec::new();
            let mut burst = Vec::new();
            for f in q_ab {
                if self.keep_log {
                    self.log_ab.push(f.clone());
                }
                if let Some(r) = self.router_ab.as_mut() {
                    let (pass, icmp) = r.forward(&f);
                    if let Some(icmp) = icmp {
                        self.a
                            .receive(now, &icmp, &mut |r| next_ab.push(r.to_vec()));
                    }
                    if !pass {
                        continue;
                    }
                }
                if self.filter_ab.as_mut().is_none_or(|p| p(&f)) {
                    if self.burst_ab {
                        burst.push(f);
                    } else {
                        self.b.receive(now, &f, &mut |r| next_ba.push(r.to_vec()));
                    }
                }
            }
            if !burst.is_empty() {
                self.b
                    .receive_burst(now, burst.iter().map(|f| &f[..]), &mut |r| {
                        next_ba.push(r.to_vec())
                    });
            }
            for f in q_ba {
                if self.keep_log {
                    self.log_ba.push(f.clone());
                }
                if self.filter_ba.as_mut().is_none_or(|p| p(&f)) {
                    self.a.receive(now, &f, &mut |r| next_ab.push(r.to_vec()));
                }
            }
            self.q_ab = next_ab;
            self.q_ba = next_ba;
        }
        panic!("network did not settle at {:?}", self.now);
    }

    /// Deliver a frame to B as if A had sent it (bypassing A), collecting B's answers.
    pub fn inject_to_b(&mut self, frame: &[u8]) {
        let now = self.now;
        let mut out = Vec::new();
        self.b.receive(now, frame, &mut |r| out.push(r.to_vec()));
        self.q_ba.extend(out);
        self.pump();
    }

    pub fn next_event(&self) -> Option<Instant> {
        [self.a.poll_at(), self.b.poll_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advance virtual time event by event (at most `limit`) until `cond`.
    pub fn run_until(&mut self, limit: Duration, mut cond: impl FnMut(&mut Net) -> bool) -> bool {
        let deadline = self.now + limit;
        for _ in 0..1_000_000 {
            self.pump();
            if cond(self) {
                return true;
            }
            match self.next_event() {
                Some(t) if t <= deadline => self.now = self.now.max(t),
                _ => return false,
            }
        }
        false
    }

    /// Advance to `now + d`, processing every event on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        for _ in 0..1_000_000 {
            self.pump();
            match self.next_event() {
                Some(t) if t <= end => self.now = self.now.max(t),
                _ => break,
            }
        }
        self.now = end;
        self.pump();
    }
}

/// An Ethernet frame A -> B carrying an IPv4 datagram (or fragment) with
/// the given header fields and payload.
pub fn ip_frame(repr: &Ipv4Repr, payload: &[u8]) -> Vec<u8> {
    frame(A_MAC, B_MAC, repr, payload)
}

/// An Ethernet frame `src` -> `dst` carrying an IPv4 datagram with the
/// header fields of `repr` (its length set to the payload's).
pub fn frame(src: MacAddr, dst: MacAddr, repr: &Ipv4Repr, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + payload.len()];
    EthernetRepr {
        src,
        dst,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    let r = Ipv4Repr {
        payload_len: payload.len(),
        ..*repr
    };
    r.emit(&mut Ipv4Packet::new_unchecked(&mut f[14..34]), true);
    f[34..].copy_from_slice(payload);
    f
}

/// A TCP segment from `src` (any address) to B as an Ethernet frame from
/// A's MAC (DF set, TTL 64, checksums filled).
pub fn tcp_frame_to_b(src: Ipv4Addr, seg: &TcpRepr) -> Vec<u8> {
    let mut tcp = vec![0u8; seg.buffer_len()];
    seg.emit(&mut TcpPacket::new_unchecked(&mut tcp[..]), src, B_IP, true);
    let ip = Ipv4Repr {
        src,
        dont_frag: true,
        ..ip_repr(IpProtocol::Tcp, 0, 0, false)
    };
    ip_frame(&ip, &tcp)
}

/// A frame B -> A: ICMP destination unreachable quoting `quote` (the first
/// bytes of the offending datagram's payload) under the IP header `orig`.
pub fn icmp_unreachable_to_a(
    orig: &Ipv4Repr,
    reason: DstUnreachable,
    mtu: u16,
    quote: &[u8],
) -> Vec<u8> {
    let icmp = Icmpv4Repr::DstUnreachable {
        reason,
        next_hop_mtu: mtu,
        header: *orig,
        data: quote,
    };
    let mut body = vec![0u8; icmp.buffer_len()];
    icmp.emit(&mut Icmpv4Packet::new_unchecked(&mut body[..]));
    let ip = Ipv4Repr {
        src: B_IP,
        dst: A_IP,
        protocol: IpProtocol::Icmp,
        ..*orig
    };
    frame(B_MAC, A_MAC, &ip, &body)
}

pub fn ip_repr(protocol: IpProtocol, ident: u16, frag_offset: u16, more_frags: bool) -> Ipv4Repr {
    Ipv4Repr {
        src: A_IP,
        dst: B_IP,
        protocol,
        payload_len: 0,
        ttl: 64,
        dscp_ecn: 0,
        ident,
        dont_frag: false,
        more_frags,
        frag_offset,
    }
}

/// Parse the IPv4 header of an Ethernet frame, if it carries one.
pub fn parse_ip(frame: &[u8]) -> Option<(Ipv4Repr, Vec<u8>)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let p = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let r = Ipv4Repr::parse(&p, true).ok()?;
    Some((r, p.payload().to_vec()))
}

pub fn counter(s: &Stack, group: &str, name: &str) -> u64 {
    s.counters()
        .get(group, name)
        .unwrap_or_else(|| panic!("no counter {group}:{name}"))
}

/// Send `data` A -> B on `c` (as fast as the send buffer takes it) and read
/// it on `s` until all of it has arrived or `limit` passes: the bytes
/// received, or `None` if they did not all arrive in time.
pub fn transfer(
    n: &mut Net,
    c: TcpHandle,
    s: TcpHandle,
    data: &[u8],
    limit: Duration,
) -> Option<Vec<u8>> {
    let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
    let mut buf = vec![0u8; 1 << 16];
    let done = n.run_until(limit, |n| {
        while sent < data.len() {
            match n.a.tcp_send(c, &data[sent..]) {
                Ok(0) | Err(TcpError::WouldBlock) => break,
                Ok(k) => sent += k,
                Err(e) => panic!("send: {e}"),
            }
        }
        loop {
            match n.b.tcp_recv(s, &mut buf) {
                Ok(0) | Err(TcpError::WouldBlock) => break,
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(e) => panic!("recv: {e}"),
            }
        }
        got.len() >= data.len()
    });
    done.then_some(got)
}
