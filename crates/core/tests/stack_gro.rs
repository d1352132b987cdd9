//! Receive coalescing (`Stack::receive_burst`, software GRO): runs of
//! consecutive in-order TCP segments of one flow become one segment, with
//! the same bytes delivered, the same final state and the ACKs Linux sends
//! for a GRO'd skb; everything that must not merge is delivered alone and
//! in order; GRO on and off end the same for random bursts. Over IPv4,
//! over IPv6 (the `_over_ipv6` tests, the same cases where they apply) and
//! with flows of both in one burst.

mod stack_util;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use proptest::prelude::*;
use stack_util::*;
use ustack_core::tcp::{State, TcpConfig};
use ustack_core::time::{Duration, Instant};
use ustack_core::{LinkOffload, Stack, TcpHandle};
use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr, ARP_LEN};
use ustack_wire::checksum;
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use ustack_wire::ipv6::{solicited_node, Ipv6Cidr, Ipv6Packet};
use ustack_wire::ndisc::{NdiscOption, NdiscOptions, NdiscRepr};
use ustack_wire::tcp::{flags, SeqNum, TcpPacket, TcpRepr};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr, VNET_HDR_LEN};

const PORT: u16 = 80;
const PEER_PORT: u16 = 40000;
/// The peer's initial sequence number (data starts one later).
const PEER_ISS: u32 = 0xfff0_0000;
/// Payload of a full segment with timestamps (MSS 1460 - 12).
const FULL: usize = 1448;
// IPv6 flows in a `Rig` run between A6 (the peer) and B6 (stack_util).

/// The byte at offset `i` of a flow's stream.
fn byte(port: u16, i: usize) -> u8 {
    (i.wrapping_mul(7).wrapping_add(usize::from(port)) % 251) as u8
}

fn stream(port: u16, from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| byte(port, i)).collect()
}

/// One TCP segment from the peer (A) to B, described by what may vary.
#[derive(Debug, Clone, Copy)]
struct Seg {
    port: u16,
    /// Stream offset of the first byte (sequence number = ISS + 1 + off).
    off: u32,
    len: usize,
    /// Flags besides ACK.
    flags: u8,
    /// Bytes of B's data acknowledged.
    acked: u32,
    window: u16,
    /// TSval offset (the TSval is 1000 + this).
    ts: u32,
    /// TTL, or the Hop Limit over IPv6.
    ttl: u8,
    /// TOS, or the Traffic Class over IPv6.
    tos: u8,
    df: bool,
    /// IP ID; `None`: one more than the previous frame's.
    ident: Option<u16>,
    bad_tcp_csum: bool,
    bad_ip_csum: bool,
    /// Four bytes of IPv4 options (NOPs); over IPv6, an 8-byte
    /// Destination Options header (PadN) before TCP.
    ip_opts: bool,
    /// Four more bytes of TCP options (NOPs) after the timestamps.
    tcp_nops: bool,
    src_mac: MacAddr,
    /// Send as a fragment (IPv4 MF set; over IPv6 a Fragment header, MF set).
    fragment: bool,
    /// The IPv6 flow label (not used over IPv4).
    flow: u32,
}

impl Seg {
    fn data(port: u16, off: u32, len: usize) -> Seg {
        Seg {
            port,
            off,
            len,
            flags: 0,
            acked: 0,
            window: 4000,
            ts: 0,
            ttl: 64,
            tos: 0,
            df: true,
            ident: None,
            bad_tcp_csum: false,
            bad_ip_csum: false,
            ip_opts: false,
            tcp_nops: false,
            src_mac: A_MAC,
            fragment: false,
            flow: 0,
        }
    }
}

/// `n` consecutive full segments of flow `port` from offset `off`.
fn run_of(port: u16, off: u32, n: usize) -> Vec<Seg> {
    (0..n)
        .map(|i| Seg::data(port, off + (i * FULL) as u32, FULL))
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    port: u16,
    h: TcpHandle,
    /// B's initial sequence number and TSval in its SYN-ACK.
    b_iss: u32,
    b_ts: u32,
}

/// B with established connections from fake peers on A's address, fed
/// hand-made frames.
struct Rig {
    b: Stack,
    now: Instant,
    /// Frames B sent since the last `take_out`.
    out: Vec<Vec<u8>>,
    flows: Vec<Flow>,
    ts: bool,
    vnet: bool,
    ident: u16,
    got: Vec<Vec<u8>>,
    /// The ports whose flows run over IPv6 (A6 -> B6).
    v6: Vec<u16>,
}

fn arp_request_from_a() -> Vec<u8> {
    let mut a = [0u8; ARP_LEN];
    ArpRepr {
        operation: ArpOperation::Request,
        sender_mac: A_MAC,
        sender_ip: A_IP,
        target_mac: MacAddr([0; 6]),
        target_ip: B_IP,
    }
    .emit(&mut ArpPacket::new_unchecked(&mut a[..]));
    eth(B_MAC, A_MAC, EtherType::Arp, &a)
}

fn eth(dst: MacAddr, src: MacAddr, ethertype: EtherType, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + payload.len()];
    EthernetRepr {
        src,
        dst,
        ethertype,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    f[14..].copy_from_slice(payload);
    f
}

/// A Neighbor Solicitation from A6 for B6 with A's MAC: B learns it.
fn ns_from_a() -> Vec<u8> {
    let mut opts = [0u8; 8];
    NdiscOption::SourceLinkLayerAddr(&A_MAC.0)
        .emit(&mut opts)
        .unwrap();
    let repr = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target: B6,
        options: NdiscOptions::new_checked(&opts[..]).unwrap(),
    });
    let dst = solicited_node(B6);
    let mut icmp = vec![0u8; repr.buffer_len()];
    repr.emit(&A6, &dst, &mut Icmpv6Packet::new_unchecked(&mut icmp[..]));
    let ip = ip6_header(A6, dst, 58, 255, 0, 0, icmp.len());
    let mut d = dst.octets()[12..].to_vec();
    d.splice(0..0, [0x33, 0x33]);
    let mac = MacAddr([d[0], d[1], d[2], d[3], d[4], d[5]]);
    eth(mac, A_MAC, EtherType::Ipv6, &[ip, icmp].concat())
}

/// An IPv6 fixed header.
fn ip6_header(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    hop_limit: u8,
    tclass: u8,
    flow: u32,
    payload_len: usize,
) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    let first = (6u32 << 28) | (u32::from(tclass) << 20) | (flow & 0xf_ffff);
    h[0..4].copy_from_slice(&first.to_be_bytes());
    h[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    h[6] = next;
    h[7] = hop_limit;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

/// The IP version and payload of frame `f` if it carries TCP (IPv4, or
/// IPv6 with TCP right after the fixed header).
fn tcp_payload(f: &[u8]) -> Option<(bool, Vec<u8>)> {
    if let Some((ip, payload)) = parse_ip(f) {
        return (ip.protocol == ustack_wire::ip::IpProtocol::Tcp).then_some((false, payload));
    }
    let eth = EthernetFrame::new_checked(f).ok()?;
    if eth.ethertype() != EtherType::Ipv6 {
        return None;
    }
    let p = Ipv6Packet::new_checked(eth.payload()).ok()?;
    (p.next_header() == ustack_wire::ip::IpProtocol::Tcp).then(|| (true, p.payload().to_vec()))
}

/// The TCP segments B sent: (port, seq, ack, payload length, flags).
fn tcp_out(frames: &[Vec<u8>], vnet: bool) -> Vec<(u16, u32, u32, usize, u8)> {
    frames
        .iter()
        .filter_map(|f| {
            let f = if vnet { &f[VNET_HDR_LEN..] } else { &f[..] };
            let (_, payload) = tcp_payload(f)?;
            let t = TcpPacket::new_checked(&payload[..]).ok()?;
            Some((
                t.dst_port(),
                t.seq_number().0,
                t.ack_number().0,
                t.payload().len(),
                t.flags(),
            ))
        })
        .collect()
}

impl Rig {
    fn new(gro: bool, ts: bool, ports: &[u16]) -> Rig {
        Rig::with(gro, ts, false, ports)
    }

    fn with(gro: bool, ts: bool, vnet: bool, ports: &[u16]) -> Rig {
        Rig::make(gro, ts, vnet, ports, &[])
    }

    /// Flows on `ports`, all over IPv6.
    fn new6(gro: bool, ts: bool, ports: &[u16]) -> Rig {
        Rig::make(gro, ts, false, ports, ports)
    }

    /// Flows on `ports`, those in `v6` over IPv6, the others over IPv4.
    fn make(gro: bool, ts: bool, vnet: bool, ports: &[u16], v6: &[u16]) -> Rig {
        let now = Instant::from_secs(10);
        let mut cfg = config(B_MAC, B_IP, 2);
        cfg.tcp = TcpConfig {
            timestamps: ts,
            ..TcpConfig::default()
        };
        let mut b = Stack::new(cfg, now);
        if vnet {
            b.set_link_offload(LinkOffload {
                vnet_hdr: true,
                tso4: true,
                tso6: !v6.is_empty(),
                tx_csum: true,
            });
        }
        b.set_gro(gro);
        assert_eq!(b.gro(), gro);
        let l = b.tcp_listen(SocketAddrV4::new(0.into(), PORT), 64).unwrap();
        let l6 = if v6.is_empty() {
            None
        } else {
            b.add_ipv6_address(Ipv6Cidr {
                address: B6,
                prefix_len: 64,
            })
            .unwrap();
            let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, PORT, 0, 0);
            Some(b.tcp_listen6_v6only(any, 64).unwrap())
        };
        let mut r = Rig {
            b,
            now,
            out: Vec::new(),
            flows: Vec::new(),
            ts,
            vnet,
            ident: 100,
            got: Vec::new(),
            v6: v6.to_vec(),
        };
        let arp = r.wrap(arp_request_from_a());
        r.one(&arp);
        if !v6.is_empty() {
            let ns = r.wrap(ns_from_a());
            r.one(&ns);
        }
        for &port in ports {
            let l = match l6 {
                Some(l6) if r.is_v6(port) => l6,
                _ => l,
            };
            let mut opts = vec![2, 4, 0x05, 0xb4, 1, 3, 3, 7, 1, 1, 4, 2];
            if ts {
                opts.extend_from_slice(&[1, 1, 8, 10]);
                opts.extend_from_slice(&1000u32.to_be_bytes());
                opts.extend_from_slice(&0u32.to_be_bytes());
            }
            let syn = r.tcp_bytes(port, PEER_ISS, 0, flags::SYN, 4000, &opts, &[]);
            let f = r.ip_frame(&syn, &Seg::data(port, 0, 0));
            r.take_out();
            r.one(&f);
            let out = r.take_out();
            let synack = out
                .iter()
                .find_map(|f| {
                    let f = if vnet { &f[VNET_HDR_LEN..] } else { &f[..] };
                    let (_, p) = tcp_payload(f)?;
                    let t = TcpPacket::new_checked(&p[..]).ok()?;
                    // (Unverified: with offloads its checksum is partial.)
                    let repr = TcpRepr::parse(&t, A_IP, B_IP, false).ok()?;
                    (repr.syn && repr.dst_port == port)
                        .then(|| (repr.seq.0, repr.timestamp.map_or(0, |t| t.0)))
                })
                .expect("SYN-ACK");
            let (b_iss, b_ts) = synack;
            r.flows.push(Flow {
                port,
                h: l,
                b_iss,
                b_ts,
            });
            r.got.push(Vec::new());
            // The handshake's ACK.
            let ack = r.frame(&Seg::data(port, 0, 0));
            r.one(&ack);
            let h = r.b.tcp_accept(l).unwrap().expect("accepted");
            if let Some(f) = r.flows.last_mut() {
                f.h = h;
            }
            assert_eq!(r.b.tcp_status(h).unwrap().state, State::Established);
        }
        r.take_out();
        r
    }

    fn is_v6(&self, port: u16) -> bool {
        self.v6.contains(&port)
    }

    fn flow(&self, port: u16) -> Flow {
        *self.flows.iter().find(|f| f.port == port).expect("flow")
    }

    #[allow(clippy::too_many_arguments)]
    fn tcp_bytes(
        &self,
        port: u16,
        seq: u32,
        ack: u32,
        fl: u8,
        window: u16,
        opts: &[u8],
        data: &[u8],
    ) -> Vec<u8> {
        let hl = 20 + opts.len();
        let mut b = vec![0u8; hl + data.len()];
        let mut p = TcpPacket::new_unchecked(&mut b[..]);
        p.set_src_port(port);
        p.set_dst_port(PORT);
        p.set_seq_number(SeqNum(seq));
        p.set_ack_number(SeqNum(ack));
        p.set_header_len(hl);
        p.set_flags(fl);
        p.set_window_len(window);
        p.set_urgent_at(0);
        p.options_mut().copy_from_slice(opts);
        p.payload_mut().copy_from_slice(data);
        if self.is_v6(port) {
            p.fill_checksum(A6, B6);
        } else {
            p.fill_checksum(A_IP, B_IP);
        }
        b
    }

    /// The frame for `s` (IPv4 header by hand, for every field).
    fn ip_frame(&mut self, tcp: &[u8], s: &Seg) -> Vec<u8> {
        if self.is_v6(s.port) {
            return self.ip6_frame(tcp, s);
        }
        let opts: &[u8] = if s.ip_opts { &[1, 1, 1, 1] } else { &[] };
        let hl = 20 + opts.len();
        let total = hl + tcp.len();
        let ident = match s.ident {
            Some(i) => i,
            None => {
                self.ident = self.ident.wrapping_add(1);
                self.ident
            }
        };
        let mut ip = vec![0u8; total];
        ip[0] = 0x40 | (hl / 4) as u8;
        ip[1] = s.tos;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&ident.to_be_bytes());
        let mut fl: u16 = 0;
        if s.df {
            fl |= 0x4000;
        }
        if s.fragment {
            fl |= 0x2000;
        }
        ip[6..8].copy_from_slice(&fl.to_be_bytes());
        ip[8] = s.ttl;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&A_IP.octets());
        ip[16..20].copy_from_slice(&B_IP.octets());
        ip[20..hl].copy_from_slice(opts);
        let c = checksum::checksum(&ip[..hl]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        if s.bad_ip_csum {
            ip[10] ^= 0x5a;
        }
        ip[hl..].copy_from_slice(tcp);
        self.wrap(eth(B_MAC, s.src_mac, EtherType::Ipv4, &ip))
    }

    /// The IPv6 frame for `s`: Traffic Class, flow label and Hop Limit
    /// from it, a Destination Options or Fragment header if it asks.
    fn ip6_frame(&mut self, tcp: &[u8], s: &Seg) -> Vec<u8> {
        let mut ext = Vec::new();
        let mut next = 6u8;
        if s.fragment {
            // First fragment, MF set: to reassembly, never completed here.
            let id = 0x1234u32.to_be_bytes();
            ext.extend_from_slice(&[next, 0, 0, 1, id[0], id[1], id[2], id[3]]);
            next = 44;
        }
        if s.ip_opts {
            let mut d = vec![next, 0, 1, 4, 0, 0, 0, 0];
            d.extend_from_slice(&ext);
            ext = d;
            next = 60;
        }
        let payload_len = ext.len() + tcp.len();
        let ip = ip6_header(A6, B6, next, s.ttl, s.tos, s.flow, payload_len);
        self.wrap(eth(
            B_MAC,
            s.src_mac,
            EtherType::Ipv6,
            &[&ip[..], &ext, tcp].concat(),
        ))
    }

    /// `f` as the link carries it (behind a plain virtio-net header when
    /// it has one).
    fn wrap(&self, f: Vec<u8>) -> Vec<u8> {
        if self.vnet {
            let mut v = vec![0u8; VNET_HDR_LEN];
            VnetRepr::NONE.emit(&mut v);
            v.extend_from_slice(&f);
            v
        } else {
            f
        }
    }

    /// The frame for segment `s`.
    fn frame(&mut self, s: &Seg) -> Vec<u8> {
        let f = self.flow(s.port);
        let mut opts = Vec::new();
        if self.ts {
            opts.extend_from_slice(&[1, 1, 8, 10]);
            opts.extend_from_slice(&(1000 + s.ts).to_be_bytes());
            opts.extend_from_slice(&f.b_ts.to_be_bytes());
        }
        if s.tcp_nops {
            opts.extend_from_slice(&[1, 1, 1, 1]);
        }
        let seq = PEER_ISS.wrapping_add(1).wrapping_add(s.off);
        let ack = f.b_iss.wrapping_add(1).wrapping_add(s.acked);
        let data = stream(s.port, s.off as usize, s.len);
        let mut tcp = self.tcp_bytes(
            s.port,
            seq,
            ack,
            flags::ACK | s.flags,
            s.window,
            &opts,
            &data,
        );
        if s.bad_tcp_csum {
            tcp[16] ^= 0x33;
        }
        self.ip_frame(&tcp, s)
    }

    fn frames(&mut self, segs: &[Seg]) -> Vec<Vec<u8>> {
        segs.iter().map(|s| self.frame(s)).collect()
    }

    fn one(&mut self, f: &[u8]) {
        let mut out = Vec::new();
        self.b.receive(self.now, f, &mut |r| out.push(r.to_vec()));
        self.out.extend(out);
        self.poll();
    }

    /// Hand `frames` to B as one burst, then run what is due.
    fn burst(&mut self, frames: &[Vec<u8>]) {
        let mut out = Vec::new();
        self.b
            .receive_burst(self.now, frames.iter().map(|f| &f[..]), &mut |r| {
                out.push(r.to_vec())
            });
        self.out.extend(out);
        self.poll();
    }

    fn poll(&mut self) {
        for _ in 0..1000 {
            if self.b.poll_at().is_none_or(|t| t > self.now) {
                return;
            }
            let mut out = Vec::new();
            self.b.poll(self.now, &mut |r| out.push(r.to_vec()));
            self.out.extend(out);
        }
        panic!("poll_at() stays due");
    }

    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        for _ in 0..100_000 {
            self.poll();
            match self.b.poll_at() {
                Some(t) if t <= end => self.now = self.now.max(t),
                _ => break,
            }
        }
        self.now = end;
        self.poll();
    }

    fn take_out(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.out)
    }

    /// Spend B's quick-ACK budget on `port` (like Linux, B acknowledges up
    /// to 16 segments at once after the first data): 20 small segments
    /// from stream offset `seq`, then quiet. Returns the next offset.
    fn leave_quick_ack(&mut self, port: u16, seq: u32) -> u32 {
        let mut s = seq;
        let mut immediate = 0;
        for _ in 0..20 {
            let f = self.frames(&[Seg::data(port, s, 100)]);
            self.burst(&f);
            s += 100;
            immediate += self.acks(port).len();
            self.take_out();
        }
        assert!((2..=16).contains(&immediate), "quick ACKs: {immediate}");
        self.advance(Duration::from_millis(100));
        self.take_out();
        s
    }

    /// Read everything readable on every flow.
    fn read(&mut self) {
        let mut buf = vec![0u8; 1 << 16];
        for (i, f) in self.flows.iter().enumerate() {
            loop {
                match self.b.tcp_recv(f.h, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.got[i].extend_from_slice(&buf[..n]),
                }
            }
        }
    }

    fn got(&self, port: u16) -> &[u8] {
        let i = self.flows.iter().position(|f| f.port == port).unwrap();
        &self.got[i]
    }

    /// ACKs B sent on `port` since the last `take_out`, as stream offsets
    /// acknowledged.
    fn acks(&self, port: u16) -> Vec<u32> {
        tcp_out(&self.out, self.vnet)
            .into_iter()
            .filter(|t| t.0 == port && t.4 & flags::ACK != 0)
            .map(|t| t.2.wrapping_sub(PEER_ISS.wrapping_add(1)))
            .collect()
    }

    fn gro_counters(&self) -> (u64, u64) {
        (
            counter(&self.b, "Link", "InGroPackets"),
            counter(&self.b, "Link", "InGroWirePackets"),
        )
    }
}

/// The receive-side counters GRO must leave as the per-frame path does.
fn rx_counters(s: &Stack) -> Vec<(&'static str, &'static str, u64)> {
    s.counters()
        .iter()
        .filter(|(g, n, _)| {
            matches!(
                *g,
                "Link" | "Ip" | "Tcp" | "Udp" | "Icmp" | "Ip6" | "Udp6" | "Icmp6"
            ) && (n.starts_with("In") || n.starts_with("Reasm") || n.starts_with("Arp"))
                && !n.starts_with("InGro")
                || matches!(*n, "CurrEstab" | "EstabResets" | "PassiveOpens")
        })
        .collect()
}

/// Feed the same bursts to B with GRO on and off; everything but the
/// number of ACKs must end the same. Returns both rigs for more checks.
fn same_outcome(ts: bool, ports: &[u16], bursts: &[Vec<Seg>]) -> (Rig, Rig) {
    same_outcome_in(ts, ports, &[], bursts)
}

/// [`same_outcome`] with the flows on `v6` over IPv6.
fn same_outcome_in(ts: bool, ports: &[u16], v6: &[u16], bursts: &[Vec<Seg>]) -> (Rig, Rig) {
    let mut on = Rig::make(true, ts, false, ports, v6);
    let mut off = Rig::make(false, ts, false, ports, v6);
    for (i, b) in bursts.iter().enumerate() {
        for r in [&mut on, &mut off] {
            let frames = r.frames(b);
            r.burst(&frames);
            r.read();
            if i % 3 == 2 {
                r.advance(Duration::from_millis(5));
            }
        }
    }
    for r in [&mut on, &mut off] {
        r.advance(Duration::from_secs(1));
        r.read();
    }
    for f in &on.flows {
        let p = f.port;
        assert!(on.got(p) == off.got(p), "flow {p}: delivered bytes differ");
        let expect = stream(p, 0, on.got(p).len());
        assert!(on.got(p) == &expect[..], "flow {p}: not the stream");
        let (a, b) = (on.b.tcp_status(f.h), off.b.tcp_status(off.flow(p).h));
        assert_eq!(
            a.as_ref().map(|s| (s.state, s.recv_queue, s.pending_error)),
            b.as_ref().map(|s| (s.state, s.recv_queue, s.pending_error)),
            "flow {p}: state"
        );
        // (The window advertised depends on when ACKs went out: not
        // compared. The peer's window as B sees it is.)
        if let (Ok(x), Ok(y)) = (on.b.tcp_info(f.h), off.b.tcp_info(off.flow(p).h)) {
            assert_eq!(x.snd_wnd, y.snd_wnd, "flow {p}: send window");
        }
        // The last acknowledgment B sent: RCV.NXT (unless the connection
        // was reset, which may leave a delayed ACK unsent).
        if a.is_ok_and(|s| s.state == State::Closed) {
            continue;
        }
        assert_eq!(on.acks(p).last(), off.acks(p).last(), "flow {p}: last ACK");
    }
    assert_eq!(rx_counters(&on.b), rx_counters(&off.b), "receive counters");
    assert_eq!(off.gro_counters(), (0, 0), "GRO off coalesced");
    (on, off)
}

#[test]
fn bulk_transfer_coalesces_and_delivers_every_byte() {
    let mut outcome = Vec::new();
    for gro in [true, false] {
        let mut n = Net::new();
        n.burst_ab = true;
        n.b.set_gro(gro);
        let l = n.b.tcp_listen(SocketAddrV4::new(0.into(), 80), 8).unwrap();
        let c =
            n.a.tcp_connect(n.now, SocketAddrV4::new(B_IP, 80), None)
                .unwrap();
        let mut server = None;
        assert!(n.run_until(Duration::from_secs(5), |n| {
            server = server.or_else(|| n.b.tcp_accept(l).unwrap());
            server.is_some()
        }));
        let s = server.unwrap();
        let total = 4 << 20;
        let data: Vec<u8> = (0..total).map(|i| (i * 13 % 251) as u8).collect();
        let got = transfer(&mut n, c, s, &data, Duration::from_secs(60));
        assert!(
            got == Some(data),
            "every byte once and in order (gro {gro})"
        );
        let (gp, gw) = (
            counter(&n.b, "Link", "InGroPackets"),
            counter(&n.b, "Link", "InGroWirePackets"),
        );
        // InSegs counts wire segments whether coalesced or not.
        assert_eq!(
            counter(&n.b, "Tcp", "InSegs"),
            counter(&n.a, "Tcp", "OutSegs")
        );
        outcome.push((gp, gw, counter(&n.b, "Tcp", "OutSegs")));
    }
    let (gp, gw, acks_on) = outcome[0];
    let (gp_off, gw_off, acks_off) = outcome[1];
    assert_eq!((gp_off, gw_off), (0, 0));
    let data_segs = (4 << 20) / 1448;
    assert!(gp > 0 && gw >= 2 * gp, "{gp} super-segments of {gw} frames");
    assert!(
        gw * 2 > data_segs as u64,
        "most data arrived coalesced: {gw} of ~{data_segs}"
    );
    // One ACK per super-segment instead of one per two segments.
    assert!(
        acks_on < acks_off,
        "ACKs: {acks_on} with GRO, {acks_off} without"
    );
}

/// The guest side of `ustack run`: transparent mode, any destination.
#[test]
fn transparent_mode_coalesces_too() {
    let world = config(
        MacAddr([0x52, 0x55, 10, 0, 2, 2]),
        Ipv4Addr::new(10, 0, 2, 2),
        22,
    );
    let mut guest = config(A_MAC, Ipv4Addr::new(10, 0, 2, 15), 11);
    guest.gateway = Some(Ipv4Addr::new(10, 0, 2, 2));
    let mut n = Net::with_configs(guest, world.clone());
    n.b = Stack::new_transparent(
        world,
        ustack_core::TransparentConfig {
            guest: Some(Ipv4Addr::new(10, 0, 2, 15)),
            ..Default::default()
        },
        n.now,
    );
    n.burst_ab = true;
    let far = SocketAddrV4::new(Ipv4Addr::new(93, 184, 216, 34), 80);
    let c = n.a.tcp_connect(n.now, far, None).unwrap();
    n.advance(Duration::from_millis(10));
    let p = n.b.tcp_next_pending_syn().expect("held SYN");
    let w = n.b.tcp_accept_pending(n.now, p.id).unwrap();
    let total = 1 << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 3 % 253) as u8).collect();
    let got = transfer(&mut n, c, w, &data, Duration::from_secs(30));
    assert!(got == Some(data));
    assert!(counter(&n.b, "Link", "InGroPackets") > 0);
}

/// Linux acknowledges a GRO'd skb of two or more full segments at once,
/// one ACK for all; per segment, every second one is acknowledged. The
/// peer's segment size is learned from the wire segments, not from the
/// super-segment: two single full segments afterwards are acknowledged at
/// once, as they are without GRO.
#[test]
fn a_coalesced_run_is_acknowledged_like_a_grod_skb() {
    for gro in [true, false] {
        let mut r = Rig::new(gro, true, &[PEER_PORT]);
        // Leave quick-ack mode: the first segments are acknowledged at once.
        let b = r.leave_quick_ack(PEER_PORT, 0);
        let f = r.frames(&run_of(PEER_PORT, b, 8));
        r.burst(&f);
        let acks = r.acks(PEER_PORT);
        let end = b + 8 * FULL as u32;
        if gro {
            assert_eq!(acks, vec![end], "one ACK for the super-segment");
            assert_eq!(r.gro_counters(), (1, 8));
        } else {
            let every_second: Vec<u32> = (1..=4).map(|k| b + 2 * k * FULL as u32).collect();
            assert_eq!(acks, every_second);
        }
        r.take_out();
        // Then one full segment: delayed; a second: acknowledged at once.
        let f = r.frames(&[Seg::data(PEER_PORT, end, FULL)]);
        r.burst(&f);
        assert!(
            r.acks(PEER_PORT).is_empty(),
            "gro {gro}: the first is delayed"
        );
        let f = r.frames(&[Seg::data(PEER_PORT, end + FULL as u32, FULL)]);
        r.burst(&f);
        assert_eq!(
            r.acks(PEER_PORT),
            vec![end + 2 * FULL as u32],
            "gro {gro}: every second full segment is acknowledged"
        );
        r.read();
        assert!(r.got(PEER_PORT) == &stream(PEER_PORT, 0, end as usize + 2 * FULL)[..]);
    }
}

/// A run of one full segment and a short one is not two full segments:
/// the ACK is delayed, with or without GRO.
#[test]
fn full_plus_short_is_delayed_like_two_segments() {
    for gro in [true, false] {
        let mut r = Rig::new(gro, true, &[PEER_PORT]);
        let b = r.leave_quick_ack(PEER_PORT, 0);
        let f = r.frames(&[
            Seg::data(PEER_PORT, b, FULL),
            Seg::data(PEER_PORT, b + FULL as u32, 500),
        ]);
        r.burst(&f);
        assert!(r.acks(PEER_PORT).is_empty(), "gro {gro}: delayed");
        if gro {
            assert_eq!(r.gro_counters(), (1, 2));
        }
        r.advance(Duration::from_millis(50));
        assert_eq!(r.acks(PEER_PORT), vec![b + FULL as u32 + 500]);
    }
}

/// The 64 KB limit: 50 full segments make a super-segment of as many as
/// fit a 65,535-byte datagram (45 with 32 bytes of TCP header), then
/// another of the rest.
#[test]
fn super_segments_stay_within_an_ipv4_datagram() {
    let (on, _) = same_outcome(true, &[PEER_PORT], &[run_of(PEER_PORT, 0, 50)]);
    let fit = (65_535 - 20 - 32) / FULL;
    assert_eq!(fit, 45);
    assert_eq!(on.gro_counters(), (2, 50));
    // Without timestamps: 20-byte header, 1460-byte segments.
    let mut r = Rig::new(true, false, &[PEER_PORT]);
    let segs: Vec<Seg> = (0..50)
        .map(|i| Seg::data(PEER_PORT, i * 1460, 1460))
        .collect();
    let f = r.frames(&segs);
    r.burst(&f);
    assert_eq!(r.gro_counters(), (2, 50));
    r.read();
    assert_eq!(r.got(PEER_PORT).len(), 50 * 1460);
}

/// Each case: a burst where something keeps segments apart, and the
/// super-segments and frames in them expected with GRO. Delivery is the
/// same as without GRO in every case.
#[test]
fn what_does_not_merge_is_delivered_alone_and_in_order() {
    let p = PEER_PORT;
    let f = FULL as u32;
    let with = |i: usize, m: &dyn Fn(&mut Seg)| {
        let mut v = run_of(p, 0, 4);
        m(&mut v[i]);
        v
    };
    let cases: Vec<(&str, Vec<Seg>, (u64, u64))> = vec![
        ("baseline", run_of(p, 0, 4), (1, 4)),
        ("PSH ends a run", with(1, &|s| s.flags = flags::PSH), (2, 4)),
        (
            "PSH on the first",
            with(0, &|s| s.flags = flags::PSH),
            (1, 3),
        ),
        ("FIN alone", with(3, &|s| s.flags = flags::FIN), (1, 3)),
        ("SYN alone", with(1, &|s| s.flags = flags::SYN), (1, 2)),
        ("RST alone", with(2, &|s| s.flags = flags::RST), (1, 2)),
        ("URG alone", with(2, &|s| s.flags = flags::URG), (1, 2)),
        ("ECE alone", with(2, &|s| s.flags = flags::ECE), (1, 2)),
        ("CWR alone", with(2, &|s| s.flags = flags::CWR), (1, 2)),
        (
            "timestamp changes",
            {
                let mut v = run_of(p, 0, 4);
                v[2].ts = 1;
                v[3].ts = 2;
                v
            },
            (1, 2),
        ),
        (
            "a new timestamp starts a run",
            {
                let mut v = run_of(p, 0, 4);
                v[2].ts = 1;
                v[3].ts = 1;
                v
            },
            (2, 4),
        ),
        ("options change", with(2, &|s| s.tcp_nops = true), (1, 2)),
        ("window changes", with(2, &|s| s.window = 3999), (1, 2)),
        ("ACK changes", with(2, &|s| s.acked = 1000), (1, 2)),
        (
            "a gap",
            {
                let mut v = run_of(p, 0, 4);
                v[2].off += 100;
                v[3].off += 100;
                v
            },
            (2, 4),
        ),
        ("overlap", with(2, &|s| s.off -= 10), (1, 2)),
        // The resent segment ends the run; what follows it continues it.
        (
            "retransmission starts a run",
            {
                let mut v = run_of(p, 0, 3);
                v.insert(2, v[1]);
                v
            },
            (2, 4),
        ),
        (
            "out of order",
            {
                let mut v = run_of(p, 0, 4);
                v.swap(1, 2);
                v
            },
            (0, 0),
        ),
        // A short segment ends the run it joins.
        (
            "short middle segment",
            {
                let mut v = run_of(p, 0, 4);
                v[1].len = 500;
                for s in &mut v[2..] {
                    s.off -= f - 500;
                }
                v
            },
            (2, 4),
        ),
        (
            "larger than the first",
            {
                let mut v = run_of(p, 0, 4);
                v[0].len = 1000;
                for s in &mut v[1..] {
                    s.off -= f - 1000;
                }
                v
            },
            (1, 3),
        ),
        ("TTL changes", with(2, &|s| s.ttl = 63), (1, 2)),
        ("TOS changes", with(2, &|s| s.tos = 0x10), (1, 2)),
        ("ECN CE mark", with(2, &|s| s.tos = 3), (1, 2)),
        ("DF changes", with(2, &|s| s.df = false), (1, 2)),
        ("IP ID jumps", with(2, &|s| s.ident = Some(9)), (1, 2)),
        ("IP options", with(2, &|s| s.ip_opts = true), (1, 2)),
        (
            "another source MAC",
            with(2, &|s| s.src_mac = MacAddr([2, 0, 0, 0, 0, 9])),
            (1, 2),
        ),
        ("a fragment", with(2, &|s| s.fragment = true), (1, 2)),
        (
            "a pure ACK between",
            {
                let mut v = run_of(p, 0, 4);
                v.insert(2, Seg::data(p, 2 * f, 0));
                v
            },
            (2, 4),
        ),
    ];
    for (name, segs, want) in cases {
        eprintln!("case: {name}");
        let (on, off) = same_outcome(true, &[p], std::slice::from_ref(&segs));
        assert_eq!(on.gro_counters(), want, "{name}");
        // The bytes delivered are the stream's, as without GRO (checked in
        // same_outcome); InSegs counted every frame.
        assert_eq!(
            counter(&on.b, "Tcp", "InSegs"),
            counter(&off.b, "Tcp", "InSegs"),
            "{name}"
        );
    }
}

/// Segments acknowledging more of B's data than the ones before them start
/// a new run; B's send queue drains the same.
#[test]
fn acks_that_advance_split_runs() {
    let p = PEER_PORT;
    let mut outcome = Vec::new();
    for gro in [true, false] {
        let mut r = Rig::new(gro, true, &[p]);
        let h = r.flow(p).h;
        r.b.tcp_set_nodelay(h, true).unwrap();
        assert_eq!(r.b.tcp_send(h, &[7u8; 5000]).unwrap(), 5000);
        r.poll();
        let mut v = run_of(p, 0, 6);
        for s in &mut v[2..4] {
            s.acked = 1000;
        }
        for s in &mut v[4..] {
            s.acked = 5000;
        }
        let f = r.frames(&v);
        r.burst(&f);
        r.read();
        assert_eq!(r.got(p).len(), 6 * FULL, "gro {gro}");
        assert!(r.got(p) == &stream(p, 0, 6 * FULL)[..]);
        let st = r.b.tcp_status(h).unwrap();
        outcome.push((st.send_queue, r.got(p).len()));
        if gro {
            assert_eq!(r.gro_counters(), (3, 6));
        }
    }
    assert_eq!(outcome[0], outcome[1]);
    assert_eq!(outcome[0].0, 0, "all of B's data acknowledged");
}

#[test]
fn fixed_ip_ids_merge_only_with_df() {
    let p = PEER_PORT;
    let fixed = |df: bool| -> Vec<Seg> {
        run_of(p, 0, 4)
            .into_iter()
            .map(|mut s| {
                s.ident = Some(7);
                s.df = df;
                s
            })
            .collect()
    };
    let (on, _) = same_outcome(true, &[p], &[fixed(true)]);
    assert_eq!(on.gro_counters(), (1, 4));
    let (on, _) = same_outcome(true, &[p], &[fixed(false)]);
    assert_eq!(on.gro_counters(), (0, 0));
}

/// A frame with a bad checksum is dropped and counted as without GRO, and
/// does not end the run around it (as in Linux, which delivers it alone
/// without flushing its GRO list).
#[test]
fn a_bad_checksum_is_dropped_and_counted_and_does_not_poison_the_run() {
    let p = PEER_PORT;
    for ip in [false, true] {
        // A corrupted copy of the third segment, then the good one.
        let mut v = run_of(p, 0, 4);
        let mut bad = v[2];
        // (Its IP ID out of the way: the good one follows on.)
        bad.ident = Some(0xdead);
        if ip {
            bad.bad_ip_csum = true;
        } else {
            bad.bad_tcp_csum = true;
        }
        v.insert(2, bad);
        let (on, off) = same_outcome(true, &[p], &[v]);
        assert_eq!(on.gro_counters(), (1, 4), "ip {ip}");
        let (g, n) = if ip {
            ("Ip", "InCsumErrors")
        } else {
            ("Tcp", "InCsumErrors")
        };
        assert_eq!(counter(&on.b, g, n), 1);
        assert_eq!(counter(&off.b, g, n), 1);
        // The bad one in place of a segment: a hole, as without GRO.
        let mut v = run_of(p, 0, 4);
        v[2].bad_tcp_csum = !ip;
        v[2].bad_ip_csum = ip;
        let (on, _) = same_outcome(true, &[p], &[v]);
        assert_eq!(on.gro_counters(), (1, 2));
        assert_eq!(on.got(p).len(), 2 * FULL);
    }
}

#[test]
fn interleaved_flows_do_not_merge_consecutive_ones_do() {
    let (a, b) = (40001, 40002);
    let ra = run_of(a, 0, 4);
    let rb = run_of(b, 0, 4);
    let interleaved: Vec<Seg> = ra.iter().zip(&rb).flat_map(|(x, y)| [*x, *y]).collect();
    let (on, _) = same_outcome(true, &[a, b], &[interleaved]);
    assert_eq!(on.gro_counters(), (0, 0));
    let back_to_back: Vec<Seg> = ra.iter().chain(&rb).copied().collect();
    let (on, _) = same_outcome(true, &[a, b], &[back_to_back]);
    assert_eq!(on.gro_counters(), (2, 8));
}

/// Frames of other kinds end the run and are delivered in their place.
#[test]
fn other_frames_end_the_run_in_order() {
    let p = PEER_PORT;
    let mut r = Rig::new(true, true, &[p]);
    let mut frames = r.frames(&run_of(p, 0, 2));
    frames.push(arp_request_from_a());
    frames.extend(r.frames(&run_of(p, 2 * FULL as u32, 2)));
    // A UDP datagram to a closed port: answered with ICMP.
    let udp = {
        let mut u = vec![0u8; 8 + 4];
        u[0..2].copy_from_slice(&5000u16.to_be_bytes());
        u[2..4].copy_from_slice(&9u16.to_be_bytes());
        u[4..6].copy_from_slice(&12u16.to_be_bytes());
        let mut ipr = ip_repr(ustack_wire::ip::IpProtocol::Udp, 1, 0, false);
        ipr.payload_len = u.len();
        ip_frame(&ipr, &u)
    };
    frames.push(udp);
    frames.extend(r.frames(&run_of(p, 4 * FULL as u32, 2)));
    r.burst(&frames);
    assert_eq!(r.gro_counters(), (3, 6));
    assert_eq!(counter(&r.b, "Udp", "NoPorts"), 1);
    assert_eq!(counter(&r.b, "Link", "ArpInRequests"), 2);
    r.read();
    assert!(r.got(p) == &stream(p, 0, 6 * FULL)[..]);
    // The ICMP error went out between the ACKs of the second and third
    // runs: B's output follows the order of the burst.
    let kinds: Vec<&str> = r
        .out
        .iter()
        .filter_map(|f| parse_ip(f))
        .map(|(ip, _)| match ip.protocol {
            ustack_wire::ip::IpProtocol::Icmp => "icmp",
            _ => "tcp",
        })
        .collect();
    assert_eq!(kinds, ["tcp", "tcp", "icmp", "tcp"], "{kinds:?}");
}

#[test]
fn gro_off_hands_every_frame_over_as_it_came() {
    let (on, off) = same_outcome(true, &[PEER_PORT], &[run_of(PEER_PORT, 0, 8)]);
    assert_eq!(on.gro_counters(), (1, 8));
    assert_eq!(off.gro_counters(), (0, 0));
}

/// With the virtio-net header: plain frames merge, the header's checksum
/// status is trusted (a partial checksum is not verified), and a GSO
/// super-frame ends the run and is taken whole.
#[test]
fn virtio_net_frames_merge_and_gso_frames_do_not() {
    let p = PEER_PORT;
    let mut r = Rig::with(true, true, true, &[p]);
    let mut frames = r.frames(&run_of(p, 0, 3));
    // The third with a spoiled checksum marked partial: trusted.
    let v = VnetRepr {
        csum: Csum::Partial {
            start: 34,
            offset: 16,
        },
        gso: Gso::None,
        hdr_len: 0,
    };
    v.emit(&mut frames[2]);
    frames[2][VNET_HDR_LEN + 34 + 16] ^= 0xff;
    // A GSO super-frame of three segments, then two plain ones.
    let mut gso = r.frame(&Seg::data(p, 3 * FULL as u32, 3 * FULL));
    VnetRepr {
        csum: Csum::Partial {
            start: 34,
            offset: 16,
        },
        gso: Gso::TcpV4 {
            size: FULL as u16,
            ecn: false,
        },
        hdr_len: 66,
    }
    .emit(&mut gso);
    frames.push(gso);
    frames.extend(r.frames(&run_of(p, 6 * FULL as u32, 2)));
    r.burst(&frames);
    assert_eq!(r.gro_counters(), (2, 5));
    assert_eq!(counter(&r.b, "Link", "InGsoFrames"), 1);
    assert_eq!(counter(&r.b, "Tcp", "InCsumErrors"), 0);
    r.read();
    assert!(r.got(p) == &stream(p, 0, 8 * FULL)[..]);
    // The GSO frame's segment size is the peer's (not 3 * FULL): one more
    // full segment is delayed, the next acknowledged at once (out of
    // quick-ack mode).
    r.advance(Duration::from_millis(100));
    r.take_out();
    let end = r.leave_quick_ack(p, 8 * FULL as u32);
    let f = r.frames(&[Seg::data(p, end, FULL)]);
    r.burst(&f);
    assert!(r.acks(p).is_empty());
    let f = r.frames(&[Seg::data(p, end + FULL as u32, FULL)]);
    r.burst(&f);
    assert_eq!(r.acks(p), vec![end + 2 * FULL as u32]);
}

/// What a random burst of segments may contain.
#[derive(Debug, Clone)]
enum Step {
    /// The next segment in order, `len` bytes.
    Next(usize),
    /// Skip `n` bytes (a loss) before the next segment.
    Gap(usize),
    /// Resend `len` bytes from `back` bytes before the next one.
    Dup { back: usize, len: usize },
    /// Swap the last two segments built.
    Swap,
    /// The next segment with a flag (PSH, URG, ECE, CWR).
    Flagged(usize, u8),
    /// The next segment with a spoiled checksum.
    Corrupt(usize),
    /// The next segment with a new TSval.
    NewTs(usize),
    /// The next segment with another window.
    Window(usize, u16),
    /// A pure ACK.
    Ack,
    /// End the burst here.
    Cut,
}

fn step() -> impl Strategy<Value = Step> {
    let len = prop_oneof![4 => Just(FULL), 1 => 1..FULL, 1 => Just(1usize)];
    prop_oneof![
        10 => len.clone().prop_map(Step::Next),
        1 => (1..3000usize).prop_map(Step::Gap),
        1 => (1..4000usize, 1..FULL).prop_map(|(back, len)| Step::Dup { back, len }),
        1 => Just(Step::Swap),
        1 => (len.clone(), prop::sample::select(vec![flags::PSH, flags::URG, flags::ECE, flags::CWR]))
            .prop_map(|(l, f)| Step::Flagged(l, f)),
        1 => len.clone().prop_map(Step::Corrupt),
        1 => len.clone().prop_map(Step::NewTs),
        1 => (len, 3000..4000u16).prop_map(|(l, w)| Step::Window(l, w)),
        1 => Just(Step::Ack),
        2 => Just(Step::Cut),
    ]
}

/// Turn steps into bursts of segments on two flows (the flow alternates
/// with `flip`).
fn build(steps: &[(Step, bool)]) -> Vec<Vec<Seg>> {
    let ports = [40001u16, 40002];
    let mut next = [0u32; 2];
    let mut ts = [0u32; 2];
    let mut win = [4000u16; 2];
    let mut bursts = vec![Vec::new()];
    for (st, flip) in steps {
        let i = usize::from(*flip);
        let p = ports[i];
        let cur = bursts.last_mut().expect("a burst");
        let mk = |off: u32, len: usize, ts: u32, win: u16| {
            let mut s = Seg::data(p, off, len);
            s.ts = ts;
            s.window = win;
            s
        };
        match *st {
            Step::Next(len) => {
                cur.push(mk(next[i], len, ts[i], win[i]));
                next[i] += len as u32;
            }
            Step::Gap(n) => next[i] += n as u32,
            Step::Dup { back, len } => {
                let off = next[i].saturating_sub(back as u32);
                cur.push(mk(
                    off,
                    len.min((next[i] - off) as usize).max(1),
                    ts[i],
                    win[i],
                ));
            }
            Step::Swap => {
                let n = cur.len();
                if n >= 2 {
                    cur.swap(n - 1, n - 2);
                }
            }
            Step::Flagged(len, f) => {
                let mut s = mk(next[i], len, ts[i], win[i]);
                s.flags = f;
                cur.push(s);
                next[i] += len as u32;
            }
            Step::Corrupt(len) => {
                let mut s = mk(next[i], len, ts[i], win[i]);
                s.bad_tcp_csum = true;
                cur.push(s);
            }
            Step::NewTs(len) => {
                ts[i] += 1;
                cur.push(mk(next[i], len, ts[i], win[i]));
                next[i] += len as u32;
            }
            Step::Window(len, w) => {
                win[i] = w;
                cur.push(mk(next[i], len, ts[i], win[i]));
                next[i] += len as u32;
            }
            Step::Ack => cur.push(mk(next[i], 0, ts[i], win[i])),
            Step::Cut => bursts.push(Vec::new()),
        }
    }
    // A sender's TSvals never go back (a swap must not make them): with
    // an older TSval after a newer one, whether PAWS drops it depends on
    // when ACKs went out (RFC 7323 4.3 updates TS.Recent only for
    // segments at or before Last.ACK.sent), with or without GRO alike.
    let mut last = [0u32; 2];
    for s in bursts.iter_mut().flatten() {
        let i = usize::from(s.port == ports[1]);
        s.ts = s.ts.max(last[i]);
        last[i] = s.ts;
    }
    bursts
}

proptest! {
    // Failing inputs are printed (add them to a test by hand), not saved
    // into the source tree.
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// For random bursts (in order, lost, duplicated, reordered, flagged,
    /// corrupted segments, changed timestamps and windows, two flows
    /// interleaved), B delivers the same bytes and ends in the same state
    /// with GRO on and off.
    #[test]
    fn gro_on_and_off_end_the_same(
        steps in prop::collection::vec((step(), prop::bool::weighted(0.2)), 1..120),
        ts in any::<bool>(),
    ) {
        let bursts = build(&steps);
        same_outcome(ts, &[40001, 40002], &bursts);
    }
}

// ----------------------------------------------------------------------
// IPv6 (the same rules, `ipv6_gro_receive`), and both versions together
// ----------------------------------------------------------------------

#[test]
fn bulk_transfer_coalesces_and_delivers_every_byte_over_ipv6() {
    let mut outcome = Vec::new();
    for gro in [true, false] {
        let mut n = net6();
        n.burst_ab = true;
        n.b.set_gro(gro);
        let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0);
        let l = n.b.tcp_listen6(any, 8).unwrap();
        let c =
            n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 80, 0, 0), None)
                .unwrap();
        let mut server = None;
        assert!(n.run_until(Duration::from_secs(5), |n| {
            server = server.or_else(|| n.b.tcp_accept(l).unwrap());
            server.is_some()
        }));
        let s = server.unwrap();
        let total = 4 << 20;
        let data: Vec<u8> = (0..total).map(|i| (i * 13 % 251) as u8).collect();
        let got = transfer(&mut n, c, s, &data, Duration::from_secs(60));
        assert!(
            got == Some(data),
            "every byte once and in order (gro {gro})"
        );
        // InSegs counts wire segments whether coalesced or not, and the
        // IPv6 counters every packet they came in.
        assert_eq!(
            counter(&n.b, "Tcp", "InSegs"),
            counter(&n.a, "Tcp", "OutSegs")
        );
        assert!(counter(&n.b, "Ip6", "InDelivers") >= counter(&n.b, "Tcp", "InSegs"));
        assert_eq!(counter(&n.b, "Ip", "InReceives"), 0, "nothing over IPv4");
        outcome.push((
            counter(&n.b, "Link", "InGroPackets"),
            counter(&n.b, "Link", "InGroWirePackets"),
            counter(&n.b, "Tcp", "OutSegs"),
        ));
    }
    let (gp, gw, acks_on) = outcome[0];
    let (gp_off, gw_off, acks_off) = outcome[1];
    assert_eq!((gp_off, gw_off), (0, 0));
    // MSS 1440 over IPv6, 1428 bytes with timestamps.
    let data_segs = (4 << 20) / 1428;
    assert!(gp > 0 && gw >= 2 * gp, "{gp} super-segments of {gw} frames");
    assert!(
        gw * 2 > data_segs as u64,
        "most data arrived coalesced: {gw} of ~{data_segs}"
    );
    assert!(
        acks_on < acks_off,
        "ACKs: {acks_on} with GRO, {acks_off} without"
    );
}

/// The guest side of `ustack run` over IPv6: transparent mode, a
/// connection to the gateway's address held, accepted and fed in bursts.
#[test]
fn transparent_mode_coalesces_too_over_ipv6() {
    let mut n = net6();
    n.b = Stack::new_transparent(config(B_MAC, B_IP, 2), Default::default(), n.now);
    n.b.add_ipv6_address(Ipv6Cidr {
        address: B6,
        prefix_len: 64,
    })
    .unwrap();
    n.burst_ab = true;
    let c =
        n.a.tcp_connect6(n.now, SocketAddrV6::new(B6, 80, 0, 0), None)
            .unwrap();
    n.advance(Duration::from_millis(10));
    let p = n.b.tcp_next_pending_syn().expect("held SYN");
    let w = n.b.tcp_accept_pending(n.now, p.id).unwrap();
    let total = 1 << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 3 % 253) as u8).collect();
    let got = transfer(&mut n, c, w, &data, Duration::from_secs(30));
    assert!(got == Some(data));
    assert!(counter(&n.b, "Link", "InGroPackets") > 0);
    assert_eq!(counter(&n.b, "Ip", "InReceives"), 0, "all of it over IPv6");
}

/// One ACK for a coalesced run of full segments, as over IPv4.
#[test]
fn a_coalesced_run_is_acknowledged_like_a_grod_skb_over_ipv6() {
    for gro in [true, false] {
        let mut r = Rig::new6(gro, true, &[PEER_PORT]);
        let b = r.leave_quick_ack(PEER_PORT, 0);
        let f = r.frames(&run_of(PEER_PORT, b, 8));
        r.burst(&f);
        let acks = r.acks(PEER_PORT);
        let end = b + 8 * FULL as u32;
        if gro {
            assert_eq!(acks, vec![end], "one ACK for the super-segment");
            assert_eq!(r.gro_counters(), (1, 8));
        } else {
            let every_second: Vec<u32> = (1..=4).map(|k| b + 2 * k * FULL as u32).collect();
            assert_eq!(acks, every_second);
        }
        r.take_out();
        let f = r.frames(&[Seg::data(PEER_PORT, end, FULL)]);
        r.burst(&f);
        assert!(r.acks(PEER_PORT).is_empty(), "gro {gro}: delayed");
        let f = r.frames(&[Seg::data(PEER_PORT, end + FULL as u32, FULL)]);
        r.burst(&f);
        assert_eq!(r.acks(PEER_PORT), vec![end + 2 * FULL as u32], "gro {gro}");
        r.read();
        assert!(r.got(PEER_PORT) == &stream(PEER_PORT, 0, end as usize + 2 * FULL)[..]);
    }
}

#[test]
fn full_plus_short_is_delayed_like_two_segments_over_ipv6() {
    for gro in [true, false] {
        let mut r = Rig::new6(gro, true, &[PEER_PORT]);
        let b = r.leave_quick_ack(PEER_PORT, 0);
        let f = r.frames(&[
            Seg::data(PEER_PORT, b, FULL),
            Seg::data(PEER_PORT, b + FULL as u32, 500),
        ]);
        r.burst(&f);
        assert!(r.acks(PEER_PORT).is_empty(), "gro {gro}: delayed");
        if gro {
            assert_eq!(r.gro_counters(), (1, 2));
        }
        r.advance(Duration::from_millis(50));
        assert_eq!(r.acks(PEER_PORT), vec![b + FULL as u32 + 500]);
    }
}

/// The 64 KB limit counts the 40-byte IPv6 header: 51 segments of 1,284
/// bytes (65,484) fit one packet behind a 20-byte IPv4 header and 20 bytes
/// of TCP (65,524 bytes), not behind IPv6's (65,544): 50 then 1.
#[test]
fn super_segments_stay_within_65535_bytes_over_ipv6() {
    let seg = 1284;
    assert_eq!((65_535 - 20 - 20) / seg, 51);
    assert_eq!((65_535 - 40 - 20) / seg, 50);
    for v6 in [false, true] {
        let ports = [PEER_PORT];
        let fam: &[u16] = if v6 { &ports } else { &[] };
        let mut r = Rig::make(true, false, false, &ports, fam);
        let segs: Vec<Seg> = (0..51)
            .map(|i| Seg::data(PEER_PORT, i * seg as u32, seg))
            .collect();
        let f = r.frames(&segs);
        r.burst(&f);
        let want = if v6 { (1, 50) } else { (1, 51) };
        assert_eq!(r.gro_counters(), want, "v6 {v6}");
        r.read();
        assert!(r.got(PEER_PORT) == &stream(PEER_PORT, 0, 51 * seg)[..]);
    }
    // And 50 full segments with timestamps: 45 + 5, as over IPv4.
    let p = PEER_PORT;
    let (on, _) = same_outcome_in(true, &[p], &[p], &[run_of(p, 0, 50)]);
    assert_eq!((65_535 - 40 - 32) / FULL, 45);
    assert_eq!(on.gro_counters(), (2, 50));
}

/// The cases of `what_does_not_merge_is_delivered_alone_and_in_order`
/// over IPv6: Hop Limit, Traffic Class (ECN included) and flow label in
/// place of TTL, TOS and DF (IPv6 has no ID to follow), an extension
/// header in place of IPv4 options, a Fragment header in place of MF.
#[test]
fn what_does_not_merge_is_delivered_alone_and_in_order_over_ipv6() {
    let p = PEER_PORT;
    let f = FULL as u32;
    let with = |i: usize, m: &dyn Fn(&mut Seg)| {
        let mut v = run_of(p, 0, 4);
        m(&mut v[i]);
        v
    };
    let cases: Vec<(&str, Vec<Seg>, (u64, u64))> = vec![
        ("baseline", run_of(p, 0, 4), (1, 4)),
        ("PSH ends a run", with(1, &|s| s.flags = flags::PSH), (2, 4)),
        (
            "PSH on the first",
            with(0, &|s| s.flags = flags::PSH),
            (1, 3),
        ),
        ("FIN alone", with(3, &|s| s.flags = flags::FIN), (1, 3)),
        ("SYN alone", with(1, &|s| s.flags = flags::SYN), (1, 2)),
        ("RST alone", with(2, &|s| s.flags = flags::RST), (1, 2)),
        ("URG alone", with(2, &|s| s.flags = flags::URG), (1, 2)),
        ("ECE alone", with(2, &|s| s.flags = flags::ECE), (1, 2)),
        ("CWR alone", with(2, &|s| s.flags = flags::CWR), (1, 2)),
        (
            "timestamp changes",
            {
                let mut v = run_of(p, 0, 4);
                v[2].ts = 1;
                v[3].ts = 2;
                v
            },
            (1, 2),
        ),
        ("options change", with(2, &|s| s.tcp_nops = true), (1, 2)),
        ("window changes", with(2, &|s| s.window = 3999), (1, 2)),
        ("ACK changes", with(2, &|s| s.acked = 1000), (1, 2)),
        (
            "a gap",
            {
                let mut v = run_of(p, 0, 4);
                v[2].off += 100;
                v[3].off += 100;
                v
            },
            (2, 4),
        ),
        ("overlap", with(2, &|s| s.off -= 10), (1, 2)),
        (
            "out of order",
            {
                let mut v = run_of(p, 0, 4);
                v.swap(1, 2);
                v
            },
            (0, 0),
        ),
        (
            "short middle segment",
            {
                let mut v = run_of(p, 0, 4);
                v[1].len = 500;
                for s in &mut v[2..] {
                    s.off -= f - 500;
                }
                v
            },
            (2, 4),
        ),
        (
            "larger than the first",
            {
                let mut v = run_of(p, 0, 4);
                v[0].len = 1000;
                for s in &mut v[1..] {
                    s.off -= f - 1000;
                }
                v
            },
            (1, 3),
        ),
        ("Hop Limit changes", with(2, &|s| s.ttl = 63), (1, 2)),
        ("Traffic Class changes", with(2, &|s| s.tos = 0x10), (1, 2)),
        ("ECN CE mark", with(2, &|s| s.tos = 3), (1, 2)),
        ("flow label changes", with(2, &|s| s.flow = 0x12345), (1, 2)),
        (
            "the same flow label throughout",
            run_of(p, 0, 4)
                .into_iter()
                .map(|mut s| {
                    s.flow = 0xabcde;
                    s
                })
                .collect(),
            (1, 4),
        ),
        // IPv6 has no DF and no ID: what changes them over IPv4 does not
        // exist here, and the IPv4 fields the rig sets are not sent.
        (
            "an extension header",
            with(2, &|s| s.ip_opts = true),
            (1, 2),
        ),
        (
            "another source MAC",
            with(2, &|s| s.src_mac = MacAddr([2, 0, 0, 0, 0, 9])),
            (1, 2),
        ),
        ("a fragment", with(2, &|s| s.fragment = true), (1, 2)),
        (
            "a pure ACK between",
            {
                let mut v = run_of(p, 0, 4);
                v.insert(2, Seg::data(p, 2 * f, 0));
                v
            },
            (2, 4),
        ),
    ];
    for (name, segs, want) in cases {
        eprintln!("case: {name}");
        let (on, off) = same_outcome_in(true, &[p], &[p], std::slice::from_ref(&segs));
        assert_eq!(on.gro_counters(), want, "{name}");
        for (g, n) in [
            ("Tcp", "InSegs"),
            ("Ip6", "InReceives"),
            ("Ip6", "InDelivers"),
        ] {
            assert_eq!(
                counter(&on.b, g, n),
                counter(&off.b, g, n),
                "{name}: {g}{n}"
            );
        }
    }
}

#[test]
fn acks_that_advance_split_runs_over_ipv6() {
    let p = PEER_PORT;
    let mut outcome = Vec::new();
    for gro in [true, false] {
        let mut r = Rig::new6(gro, true, &[p]);
        let h = r.flow(p).h;
        r.b.tcp_set_nodelay(h, true).unwrap();
        assert_eq!(r.b.tcp_send(h, &[7u8; 5000]).unwrap(), 5000);
        r.poll();
        let mut v = run_of(p, 0, 6);
        for s in &mut v[2..4] {
            s.acked = 1000;
        }
        for s in &mut v[4..] {
            s.acked = 5000;
        }
        let f = r.frames(&v);
        r.burst(&f);
        r.read();
        assert!(r.got(p) == &stream(p, 0, 6 * FULL)[..]);
        let st = r.b.tcp_status(h).unwrap();
        outcome.push((st.send_queue, r.got(p).len()));
        if gro {
            assert_eq!(r.gro_counters(), (3, 6));
        }
    }
    assert_eq!(outcome[0], outcome[1]);
    assert_eq!(outcome[0].0, 0, "all of B's data acknowledged");
}

/// A bad TCP checksum (the IPv6 pseudo-header's) is dropped and counted
/// as without GRO and does not end the run around it.
#[test]
fn a_bad_checksum_is_dropped_and_counted_and_does_not_poison_the_run_over_ipv6() {
    let p = PEER_PORT;
    let mut v = run_of(p, 0, 4);
    let mut bad = v[2];
    bad.bad_tcp_csum = true;
    v.insert(2, bad);
    let (on, off) = same_outcome_in(true, &[p], &[p], &[v]);
    assert_eq!(on.gro_counters(), (1, 4));
    assert_eq!(counter(&on.b, "Tcp", "InCsumErrors"), 1);
    assert_eq!(counter(&off.b, "Tcp", "InCsumErrors"), 1);
    let mut v = run_of(p, 0, 4);
    v[2].bad_tcp_csum = true;
    let (on, _) = same_outcome_in(true, &[p], &[p], &[v]);
    assert_eq!(on.gro_counters(), (1, 2));
    assert_eq!(on.got(p).len(), 2 * FULL);
}

#[test]
fn interleaved_flows_do_not_merge_consecutive_ones_do_over_ipv6() {
    let (a, b) = (40001, 40002);
    let ra = run_of(a, 0, 4);
    let rb = run_of(b, 0, 4);
    let interleaved: Vec<Seg> = ra.iter().zip(&rb).flat_map(|(x, y)| [*x, *y]).collect();
    let (on, _) = same_outcome_in(true, &[a, b], &[a, b], &[interleaved]);
    assert_eq!(on.gro_counters(), (0, 0));
    let back_to_back: Vec<Seg> = ra.iter().chain(&rb).copied().collect();
    let (on, _) = same_outcome_in(true, &[a, b], &[a, b], &[back_to_back]);
    assert_eq!(on.gro_counters(), (2, 8));
}

/// A burst with an IPv4 flow and an IPv6 flow: each family's runs merge,
/// a segment of the other family ends a run, and delivery keeps the
/// burst's order.
#[test]
fn ipv4_and_ipv6_flows_in_one_burst() {
    let (a, b) = (40001, 40002);
    let ra = run_of(a, 0, 6);
    let rb = run_of(b, 0, 6);
    // a a | b b | a a | b b | a a | b b
    let mixed: Vec<Seg> = ra
        .chunks(2)
        .zip(rb.chunks(2))
        .flat_map(|(x, y)| x.iter().chain(y).copied())
        .collect();
    let (on, _) = same_outcome_in(true, &[a, b], &[b], std::slice::from_ref(&mixed));
    assert_eq!(on.gro_counters(), (6, 12));
    // Both whole.
    let back_to_back: Vec<Seg> = ra.iter().chain(&rb).copied().collect();
    let (on, _) = same_outcome_in(true, &[a, b], &[b], &[back_to_back]);
    assert_eq!(on.gro_counters(), (2, 12));
    // The order B answered in follows the burst: the ACKs of the runs
    // alternate between the families.
    let mut r = Rig::make(true, true, false, &[a, b], &[b]);
    let f = r.frames(&mixed);
    r.burst(&f);
    let fams: Vec<bool> = r
        .out
        .iter()
        .filter_map(|f| tcp_payload(f))
        .map(|(v6, _)| v6)
        .collect();
    assert_eq!(fams, [false, true, false, true, false, true], "{fams:?}");
    r.read();
    assert!(r.got(a) == &stream(a, 0, 6 * FULL)[..]);
    assert!(r.got(b) == &stream(b, 0, 6 * FULL)[..]);
}

/// Frames of other kinds (a neighbour solicitation, UDP to a closed port)
/// end an IPv6 run and are answered in their place.
#[test]
fn other_frames_end_the_run_in_order_over_ipv6() {
    let p = PEER_PORT;
    let mut r = Rig::new6(true, true, &[p]);
    let mut frames = r.frames(&run_of(p, 0, 2));
    frames.push(ns_from_a());
    frames.extend(r.frames(&run_of(p, 2 * FULL as u32, 2)));
    let udp = {
        let mut u = vec![0u8; 8 + 4];
        u[0..2].copy_from_slice(&5000u16.to_be_bytes());
        u[2..4].copy_from_slice(&9u16.to_be_bytes());
        u[4..6].copy_from_slice(&12u16.to_be_bytes());
        let mut sum = ustack_wire::udp::UdpPacket::new_unchecked(&mut u[..]);
        sum.fill_checksum(A6, B6);
        let ip = ip6_header(A6, B6, 17, 64, 0, 0, u.len());
        eth(B_MAC, A_MAC, EtherType::Ipv6, &[ip, u].concat())
    };
    frames.push(udp);
    frames.extend(r.frames(&run_of(p, 4 * FULL as u32, 2)));
    r.burst(&frames);
    assert_eq!(r.gro_counters(), (3, 6));
    assert_eq!(counter(&r.b, "Udp6", "NoPorts"), 1);
    assert_eq!(counter(&r.b, "Icmp6", "InNeighborSolicits"), 2);
    r.read();
    assert!(r.got(p) == &stream(p, 0, 6 * FULL)[..]);
    let kinds: Vec<&str> = r
        .out
        .iter()
        .filter_map(|f| {
            let eth = EthernetFrame::new_checked(&f[..]).ok()?;
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            Some(match (ip.next_header().into(), ip.payload().first()) {
                (6u8, _) => "tcp",
                (58, Some(136)) => "na",
                (58, Some(1)) => "unreach",
                _ => "other",
            })
        })
        .collect();
    assert_eq!(kinds, ["tcp", "na", "tcp", "unreach", "tcp"], "{kinds:?}");
}

#[test]
fn gro_off_hands_every_frame_over_as_it_came_over_ipv6() {
    let p = PEER_PORT;
    let (on, off) = same_outcome_in(true, &[p], &[p], &[run_of(p, 0, 8)]);
    assert_eq!(on.gro_counters(), (1, 8));
    assert_eq!(off.gro_counters(), (0, 0));
}

/// With the virtio-net header over IPv6: plain frames merge, a partial
/// checksum is trusted, and a TCP/IPv6 GSO super-frame ends the run and
/// is taken whole.
#[test]
fn virtio_net_frames_merge_and_gso_frames_do_not_over_ipv6() {
    let p = PEER_PORT;
    let mut r = Rig::make(true, true, true, &[p], &[p]);
    let mut frames = r.frames(&run_of(p, 0, 3));
    let v = VnetRepr {
        csum: Csum::Partial {
            start: 54,
            offset: 16,
        },
        gso: Gso::None,
        hdr_len: 0,
    };
    v.emit(&mut frames[2]);
    frames[2][VNET_HDR_LEN + 54 + 16] ^= 0xff;
    let mut gso = r.frame(&Seg::data(p, 3 * FULL as u32, 3 * FULL));
    VnetRepr {
        csum: Csum::Partial {
            start: 54,
            offset: 16,
        },
        gso: Gso::TcpV6 {
            size: FULL as u16,
            ecn: false,
        },
        hdr_len: 86,
    }
    .emit(&mut gso);
    frames.push(gso);
    frames.extend(r.frames(&run_of(p, 6 * FULL as u32, 2)));
    r.burst(&frames);
    assert_eq!(r.gro_counters(), (2, 5));
    assert_eq!(counter(&r.b, "Link", "InGsoFrames"), 1);
    assert_eq!(counter(&r.b, "Link", "InVnetErrors"), 0);
    assert_eq!(counter(&r.b, "Tcp", "InCsumErrors"), 0);
    r.read();
    assert!(r.got(p) == &stream(p, 0, 8 * FULL)[..]);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 100,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// `gro_on_and_off_end_the_same` with the second flow over IPv6, and
    /// with both.
    #[test]
    fn gro_on_and_off_end_the_same_over_ipv6_and_mixed(
        steps in prop::collection::vec((step(), prop::bool::weighted(0.2)), 1..120),
        ts in any::<bool>(),
        both in any::<bool>(),
    ) {
        let bursts = build(&steps);
        let v6: &[u16] = if both { &[40001, 40002] } else { &[40002] };
        same_outcome_in(ts, &[40001, 40002], v6, &bursts);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Hostile bursts: IPv6 and IPv4 segments with random bytes changed
    /// (lengths, next header, addresses, flags, options) and frames cut
    /// short never panic, and GRO on and off deliver the same bytes and
    /// count the same.
    #[test]
    fn mutated_ipv6_bursts_end_the_same_with_gro_on_and_off(
        muts in prop::collection::vec((0usize..16, 0usize..1600, any::<u8>()), 0..24),
        cuts in prop::collection::vec((0usize..16, 0usize..1600), 0..3),
    ) {
        let (p4, p6) = (40001, 40002);
        let mut got = Vec::new();
        for gro in [true, false] {
            let mut r = Rig::make(gro, true, false, &[p4, p6], &[p6]);
            let mut segs = run_of(p6, 0, 10);
            segs.extend(run_of(p4, 0, 3));
            segs.extend(run_of(p6, 10 * FULL as u32, 3));
            let mut frames = r.frames(&segs);
            let n = frames.len();
            for &(i, at, b) in &muts {
                let f = &mut frames[i % n];
                let k = at % f.len();
                f[k] = b;
            }
            for &(i, at) in &cuts {
                let f = &mut frames[i % n];
                let k = at % f.len();
                f.truncate(k);
            }
            r.burst(&frames);
            r.advance(Duration::from_secs(1));
            r.read();
            got.push((r.got(p4).to_vec(), r.got(p6).to_vec(), rx_counters(&r.b)));
        }
        prop_assert!(got[0] == got[1], "GRO on and off differ");
    }
}
