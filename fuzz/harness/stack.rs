//! `stack_receive`: the engine's receive path under hostile input.
//!
//! A [`Stack`] (10.0.0.2) is set up with a TCP listener on port 8080, a UDP
//! socket on port 53, one passively opened connection (peer port 40000 → 8080,
//! no TCP options) and one actively opened connection (→ peer port 80, with
//! MSS, window scale, SACK and timestamps), both driven to ESTABLISHED by a
//! scripted handshake from the peer 10.0.0.1. The fuzz input is then decoded
//! as a sequence of operations (see [`Op`]); each starts with a time advance
//! (timers fire on the way, as a runtime would poll them) and is one of:
//!
//! * a raw frame (as is, or with our MAC and repaired checksums),
//! * a structure-aware frame built around valid headers with correct
//!   checksums from fuzz-chosen field values: TCP segments whose sequence and
//!   acknowledgment numbers are offsets from the tracked state of a flow (so
//!   the bytes reach ESTABLISHED connections), UDP datagrams, ICMP echo and
//!   errors quoting our own flows, ARP, IPv4 fragments and whole fragmented
//!   datagrams, IPv4 headers with arbitrary fields and options,
//! * an application call (accept, send, recv, shutdown, close, abort,
//!   connect, socket options, UDP bind/send/recv/close, ping, diagnostics).
//!
//! In burst mode (configuration bit 7) frames are gathered and handed to
//! `Stack::receive_burst` together, which coalesces TCP segments, and one
//! operation kind builds runs of segments for it to coalesce (`TcpRun`).
//!
//! Invariants checked on every call: no panic; every frame the stack emits
//! parses with `ustack-wire` (checksums verified), comes from our MAC/IP,
//! fits the MTU and is addressed to a single host (RFC 1122 3.2.2: no ICMP
//! error, RST or reply to broadcast, multicast, zero, loopback or class E
//! addresses); bounded output per call; `poll_at()` makes progress (no
//! livelock); tables stay within their limits; reassembly memory drains
//! after the timeout; every frame handed over is counted once in
//! `Link InFrames`, coalesced or not.

#[path = "stack6.rs"]
mod v6;

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use ustack_core::tcp::{State, TcpConfig};
use ustack_core::time::{Duration, Instant};
use ustack_core::{
    ArpLimits, Config, Limits, LinkOffload, ReasmLimits, Stack, TcpHandle, UdpHandle,
};
use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr, ARP_LEN};
use ustack_wire::checksum;
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
use ustack_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use ustack_wire::tcp::{flags, SeqNum, TcpPacket, TcpRepr, TCP_HEADER_LEN};
use ustack_wire::udp::{UdpPacket, UdpRepr, UDP_HEADER_LEN};
use ustack_wire::virtio_net::{Csum, Gso, VnetRepr, VNET_HDR_LEN};

pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const OUR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const PEER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const SUBNET_BCAST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 255);
pub const LISTEN_PORT: u16 = 8080;
pub const UDP_PORT: u16 = 53;
const PASSIVE_PEER_PORT: u16 = 40000;
const ACTIVE_PEER_PORT: u16 = 80;

/// Operations decoded per input (the rest is ignored).
const MAX_OPS: usize = 300;
/// Largest frame or payload built from one operation.
const MAX_FRAME: usize = 9000;
/// Largest application send.
const MAX_APP_SEND: usize = 70_000;
/// Tracked TCP flows and handles (older ones stay in the stack, untracked).
const MAX_FLOWS: usize = 32;
const MAX_HANDLES: usize = 64;
/// Time advance per operation (low 3 bits of the op byte), in microseconds.
const STEPS: [u64; 8] = [
    0,
    0,
    1_000,
    10_000,
    200_000,
    1_000_000,
    30_000_000,
    120_000_000,
];
/// `poll` calls at one instant after which `poll_at() <= now` is a livelock.
const MAX_POLLS_AT_ONE_INSTANT: usize = 1000;
/// Timer instants visited during one time advance.
const MAX_TIMER_STEPS: usize = 100_000;
/// Frames one `receive` may emit (replies plus frames it unblocks, e.g. the
/// ARP queue of a neighbour or data released by an ACK).
const MAX_FRAMES_PER_RECEIVE: usize = 512;
/// Frames one `poll` may emit (bounded work per poll).
const MAX_FRAMES_PER_POLL: usize = 8192;
/// Burst mode: frames gathered before they go to `receive_burst` at once
/// (a runtime's `rx_batch`).
const MAX_BURST: usize = 64;
/// Segments in one `TcpRun` (more than fit a 64 KB super-segment).
const MAX_RUN: u8 = 48;

/// Fuzz input reader: runs out into zeros (shared with `tcp_conn`).
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
    /// A length: one byte (< 256) or, with the top bit of the first byte,
    /// 15 bits, capped at `max`.
    pub fn len(&mut self, max: usize) -> usize {
        let b = self.u8();
        let v = if b & 0x80 == 0 {
            usize::from(b)
        } else {
            (usize::from(b & 0x7f) << 8) | usize::from(self.u8())
        };
        v.min(max)
    }
    /// A signed offset: mostly 0, else small, else anything.
    pub fn delta(&mut self) -> u32 {
        let b = self.u8();
        match b >> 6 {
            0 | 1 => 0,
            2 => (i32::from(b & 0x3f) - 32) as u32,
            _ => match b & 0x3f {
                0 => self.u32(),
                1 => (self.u16() as i16) as u32,
                2 => 1 << 31,
                3 => 1 << 30,
                k => (-(i32::from(k))) as u32,
            },
        }
    }
}

/// Largest buffer handed to `tcp_recv`/`udp_recv_from`.
const MAX_RECV: usize = 1 << 16;

/// The bytes of pattern payloads (`i % 251`), built at compile time: a
/// payload borrows from it instead of being generated (the per-byte loop
/// was a quarter of the target's time under coverage instrumentation).
static PATTERN: [u8; MAX_APP_SEND] = {
    let mut p = [0u8; MAX_APP_SEND];
    let mut i = 0;
    while i < MAX_APP_SEND {
        p[i] = (i % 251) as u8;
        i += 1;
    }
    p
};

/// A payload of `len` bytes: a pattern (cheap for the fuzzer) or input
/// bytes (zero-padded where the input runs out). Borrowed where it can be.
fn payload<'a>(inp: &mut Input<'a>, len: usize, from_input: bool) -> Cow<'a, [u8]> {
    if from_input {
        let b = inp.bytes(len);
        if b.len() == len {
            Cow::Borrowed(b)
        } else {
            let mut v = b.to_vec();
            v.resize(len, 0);
            Cow::Owned(v)
        }
    } else {
        match PATTERN.get(..len) {
            Some(p) => Cow::Borrowed(p),
            None => Cow::Owned((0..len).map(|i| (i % 251) as u8).collect()),
        }
    }
}

/// One TCP flow between us and the peer, as the peer sees it.
#[derive(Debug, Clone, Copy)]
struct Flow {
    /// Our port and the peer's.
    ours: u16,
    theirs: u16,
    /// The peer's next sequence number.
    a_nxt: u32,
    /// Highest sequence number (seq + seq_len) we have sent, once seen.
    b_max: Option<u32>,
    /// Our latest TSval (for the peer's TSecr).
    b_ts: u32,
    /// Whether the peer sends timestamps on this flow.
    ts: bool,
    /// An IPv6 flow (`PEER_IP6` ↔ `OUR_IP6`).
    v6: bool,
}

/// What an emitted frame means for the peer.
enum Emitted {
    ArpRequest(Ipv4Addr),
    Tcp {
        ours: u16,
        theirs: u16,
        seq: u32,
        seq_len: usize,
        ts: Option<u32>,
        v6: bool,
    },
    /// A Neighbor Solicitation for this target.
    Ns(Ipv6Addr),
    Other,
}

fn is_single_host(a: Ipv4Addr) -> bool {
    !(a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_loopback()
        || a.octets()[0] >= 240
        || a == SUBNET_BCAST)
}

/// Check one frame emitted by the stack; panics on a violated invariant.
pub fn check_frame(f: &[u8], mtu: usize) {
    let _ = check(f, mtu);
}

/// Check one frame emitted by a stack whose link has the virtio-net
/// header: the header is sound, a GSO frame is TCP over the IP version
/// its type names, with a partial checksum and segments that fit the MTU,
/// and a partial checksum is right once completed; then the frame as [`check`] would.
fn check_vnet(f: &[u8], mtu: usize) -> Emitted {
    let (v, eth) = VnetRepr::parse(f).expect("emitted frame: virtio-net header");
    let mut frame = eth.to_vec();
    if let Csum::Partial { start, offset } = v.csum {
        let (start, offset) = (usize::from(start), usize::from(offset));
        let c = !checksum::fold(checksum::sum(&frame[start..], 0));
        frame[start + offset..start + offset + 2].copy_from_slice(&c.to_be_bytes());
    }
    match v.gso {
        Gso::None => check(&frame, mtu),
        Gso::TcpV4 { size, ecn } | Gso::TcpV6 { size, ecn } => {
            // The GSO type names the frame's IP version.
            let v6 = matches!(v.gso, Gso::TcpV6 { .. });
            let ethertype = frame.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]));
            assert_eq!(
                ethertype,
                Some(if v6 { 0x86dd } else { 0x0800 }),
                "emitted {:?} on another ethertype",
                v.gso
            );
            // GSO_ECN marks a super-frame whose TCP header has CWR (set on
            // the first segment only when it is cut, Linux's
            // SKB_GSO_TCP_ECN); never one without.
            let tcp = if v6 {
                frame
                    .get(ETHERNET_HEADER_LEN..)
                    .and_then(|ip| ustack_wire::ipv6::Ipv6Packet::new_checked(ip).ok())
                    .and_then(|ip| ip.into_inner().get(40..).map(|t| t.get(13).copied()))
                    .flatten()
            } else {
                frame
                    .get(ETHERNET_HEADER_LEN..)
                    .and_then(|ip| Ipv4Packet::new_checked(ip).ok())
                    .and_then(|ip| {
                        let hl = ip.header_len();
                        ip.into_inner().get(hl..).map(|t| t.get(13).copied())
                    })
                    .flatten()
            };
            let cwr = tcp.is_some_and(|f| f & flags::CWR != 0);
            assert_eq!(ecn, cwr, "emitted GSO_ECN {ecn} with TCP CWR {cwr}");
            assert!(
                matches!(v.csum, Csum::Partial { .. }),
                "emitted GSO without a partial checksum"
            );
            let hdr = usize::from(v.hdr_len);
            assert!(
                hdr - ETHERNET_HEADER_LEN + usize::from(size) <= mtu,
                "emitted GSO segments larger than the MTU"
            );
            assert!(
                frame.len() > ETHERNET_HEADER_LEN + mtu,
                "needless GSO frame"
            );
            // An IPv4 datagram of at most 65,535 bytes; an IPv6 payload
            // of at most 65,535 bytes behind its 40-byte header.
            let max = if v6 { 40 + 65_535 } else { 65_535 };
            assert!(
                frame.len() <= ETHERNET_HEADER_LEN + max,
                "GSO frame over 64 KB"
            );
            // The super-frame as a frame of its own size.
            check(&frame, frame.len() - ETHERNET_HEADER_LEN)
        }
        Gso::UdpL4 { .. } => panic!("emitted UDP GSO (USO is receive only)"),
    }
}

fn check(f: &[u8], mtu: usize) -> Emitted {
    assert!(
        f.len() <= ETHERNET_HEADER_LEN + mtu,
        "emitted frame of {} bytes exceeds the MTU {mtu}",
        f.len()
    );
    let eth = EthernetFrame::new_checked(f).expect("emitted frame: Ethernet header");
    let er = EthernetRepr::parse(&eth).expect("emitted frame: Ethernet repr");
    assert_eq!(er.src, OUR_MAC, "emitted frame from a foreign MAC");
    match er.ethertype {
        EtherType::Arp => {
            let p = ArpPacket::new_checked(eth.payload()).expect("emitted ARP: length");
            let a = ArpRepr::parse(&p).expect("emitted ARP: parse");
            assert_eq!((a.sender_mac, a.sender_ip), (OUR_MAC, OUR_IP), "ARP sender");
            match a.operation {
                ArpOperation::Request => Emitted::ArpRequest(a.target_ip),
                // Replies go back to whatever asked, including RFC 5227
                // probes from 0.0.0.0 (Linux answers those too).
                ArpOperation::Reply => Emitted::Other,
                ArpOperation::Unknown(op) => panic!("emitted ARP operation {op}"),
            }
        }
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(eth.payload()).expect("emitted IPv4: length");
            let ip = Ipv4Repr::parse(&p, true).expect("emitted IPv4: parse with checksum");
            assert_eq!(ip.src, OUR_IP, "emitted IPv4 from a foreign address");
            assert!(ip.ttl > 0, "emitted TTL 0");
            assert!(is_single_host(ip.dst), "emitted IPv4 to {}", ip.dst);
            if ip.more_frags || ip.frag_offset != 0 {
                return Emitted::Other;
            }
            let payload = p.payload();
            match ip.protocol {
                IpProtocol::Tcp => {
                    let t = TcpPacket::new_checked(payload).expect("emitted TCP: length");
                    let r = TcpRepr::parse(&t, ip.src, ip.dst, true).expect("emitted TCP: parse");
                    assert!(!(r.syn && r.rst), "emitted SYN+RST");
                    Emitted::Tcp {
                        ours: r.src_port,
                        theirs: r.dst_port,
                        seq: r.seq.0,
                        seq_len: r.seq_len(),
                        ts: r.timestamp.map(|t| t.0),
                        v6: false,
                    }
                }
                IpProtocol::Udp => {
                    let u = UdpPacket::new_checked(payload).expect("emitted UDP: length");
                    let r = UdpRepr::parse(&u, ip.src, ip.dst, true).expect("emitted UDP: parse");
                    assert!(r.dst_port != 0 && r.src_port != 0, "emitted UDP port 0");
                    Emitted::Other
                }
                IpProtocol::Icmp => {
                    let c = Icmpv4Packet::new_checked(payload).expect("emitted ICMP: length");
                    Icmpv4Repr::parse(&c, true).expect("emitted ICMP: parse");
                    Emitted::Other
                }
                IpProtocol::Unknown(n) => panic!("emitted IP protocol {n}"),
            }
        }
        EtherType::Ipv6 => v6::check6(eth.payload()),
        other => panic!("emitted ethertype {other:?}"),
    }
}

/// Frame builders (the peer's side).
fn ethernet(dst: MacAddr, src: MacAddr, ethertype: EtherType, payload: &[u8]) -> Vec<u8> {
    // Header zeroed, payload appended (not zeroed first, then overwritten).
    let mut f = Vec::with_capacity(ETHERNET_HEADER_LEN + payload.len());
    f.resize(ETHERNET_HEADER_LEN, 0);
    f.extend_from_slice(payload);
    EthernetRepr {
        src,
        dst,
        ethertype,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    f
}

#[derive(Clone, Copy)]
struct IpHdr {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: IpProtocol,
    ttl: u8,
    ident: u16,
    dont_frag: bool,
    more_frags: bool,
    frag_offset: u16,
}

impl IpHdr {
    fn new(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol) -> IpHdr {
        IpHdr {
            src,
            dst,
            protocol,
            ttl: 64,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    }
    fn packet(&self, payload: &[u8]) -> Vec<u8> {
        let repr = Ipv4Repr {
            src: self.src,
            dst: self.dst,
            protocol: self.protocol,
            payload_len: payload.len(),
            ttl: self.ttl,
            dscp_ecn: 0,
            ident: self.ident,
            dont_frag: self.dont_frag,
            more_frags: self.more_frags,
            frag_offset: self.frag_offset,
        };
        let mut p = Vec::with_capacity(IPV4_HEADER_LEN + payload.len());
        p.resize(IPV4_HEADER_LEN, 0);
        p.extend_from_slice(payload);
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut p[..]), true);
        p
    }
}

/// A UDP header and `data` for either family: `csum` 1 leaves the
/// checksum zero, 2 spoils it.
fn udp_bytes<A: ustack_wire::checksum::PseudoHeader>(
    src: A,
    dst: A,
    sport: u16,
    dport: u16,
    data: &[u8],
    csum: u8,
) -> Vec<u8> {
    let mut u = vec![0u8; UDP_HEADER_LEN];
    u.extend_from_slice(data);
    let mut p = UdpPacket::new_unchecked(&mut u[..]);
    UdpRepr {
        src_port: sport,
        dst_port: dport,
    }
    .emit(&mut p, src, dst, data.len(), csum != 1);
    if csum == 2 {
        let c = p.checksum();
        p.set_checksum(c ^ 0x0101);
    }
    u
}

fn icmp_echo_bytes(ident: u16, seq_no: u16, data: &[u8]) -> Vec<u8> {
    let repr = Icmpv4Repr::EchoRequest {
        ident,
        seq_no,
        data,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut b[..]));
    b
}

#[derive(Clone)]
pub struct Harness {
    stack: Stack,
    now: Instant,
    mtu: usize,
    limits: Limits,
    /// The link has the virtio-net header (partial checksums, TSO).
    vnet: bool,
    auto_arp: bool,
    arp_wanted: bool,
    flows: Vec<Flow>,
    tcp: Vec<TcpHandle>,
    listener: TcpHandle,
    /// The IPv6 listener on `LISTEN6_PORT`.
    listener6: Option<TcpHandle>,
    udp: Vec<UdpHandle>,
    ident: u16,
    /// Frames the stack emitted in the current call, back to back in `out`,
    /// each ending at the offset in `out_ends` (no allocation per frame).
    out: Vec<u8>,
    out_ends: Vec<usize>,
    /// Receive buffer for the application calls (grown on demand).
    buf: Vec<u8>,
    /// Burst mode (config bit 7): frames are gathered in `pending` and
    /// handed to `Stack::receive_burst` together (coalescing TCP segments),
    /// at the next operation that is not a frame, time advance, or when
    /// `MAX_BURST` are waiting.
    burst: bool,
    pending: Vec<Vec<u8>>,
    /// Frames handed to the stack (`Link InFrames` must count each once,
    /// coalesced or not).
    fed: u64,
    /// An IPv6 address of the peer's that the stack solicited.
    ns_wanted: Option<Ipv6Addr>,
}

impl Harness {
    /// Build the stack and drive the scripted setup; `cfg` bits select the
    /// configuration (small limits, MTU 576, no TCP options, no automatic
    /// ARP replies, Nagle off, tiny buffers, a virtio-net header on the
    /// link with TSO and partial checksums, frames delivered in bursts).
    pub fn new(cfg: u8) -> Harness {
        let mut limits = Limits::default();
        if cfg & 1 != 0 {
            limits = Limits {
                arp: ArpLimits {
                    cache_size: 4,
                    queue_bytes: 4096,
                    ..ArpLimits::default()
                },
                reasm: ReasmLimits {
                    max_frags_per_datagram: 4,
                    mem_limit: 8192,
                    ..ReasmLimits::default()
                },
                reasm6: ReasmLimits {
                    max_frags_per_datagram: 4,
                    mem_limit: 8192,
                    ..ReasmLimits::ipv6()
                },
                max_udp_sockets: 4,
                udp_rcvbuf: 2048,
                udp_rcv_datagrams: 2,
                max_tcp_sockets: 8,
                max_syn_backlog: 2,
                icmp_error_rate: 10,
                icmp_error_burst: 2,
                echo_reply_queue: 2,
                poll_budget: 2,
                tx_queue_bytes: 4096,
                pmtu_cache: 2,
                pmtu_expires: Duration::from_secs(600),
            };
        }
        let mtu = if cfg & 2 != 0 { 576 } else { 1500 };
        let mut tcp = TcpConfig::default();
        if cfg & 4 != 0 {
            tcp.timestamps = false;
            tcp.sack = false;
            tcp.window_scale = false;
        }
        tcp.nodelay = cfg & 16 != 0;
        if cfg & 32 != 0 {
            tcp.rcv_buf = 4096;
            tcp.snd_buf = 4096;
            tcp.ooo_limit = 4096;
        }
        let config = Config {
            mac: OUR_MAC,
            addr: Ipv4Cidr {
                address: OUR_IP,
                prefix_len: 24,
            },
            gateway: Some(Ipv4Addr::new(10, 0, 0, 254)),
            mtu,
            tcp,
            limits: limits.clone(),
            secret: [0x5a; 16],
            seed: 7,
        };
        let now = Instant::from_secs(1000);
        let mut stack = Stack::new(config, now);
        let vnet = cfg & 64 != 0;
        if vnet {
            stack.set_link_offload(LinkOffload {
                vnet_hdr: true,
                tso4: true,
                tso6: true,
                tx_csum: true,
            });
        }
        let listener = stack
            .tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, LISTEN_PORT), 16)
            .expect("setup: listen");
        let udp = stack
            .udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, UDP_PORT))
            .expect("setup: udp bind");
        let mut h = Harness {
            stack,
            now,
            mtu,
            limits,
            vnet,
            auto_arp: cfg & 8 == 0,
            arp_wanted: false,
            flows: Vec::new(),
            tcp: Vec::new(),
            listener,
            listener6: None,
            udp: vec![udp],
            ident: 1,
            out: Vec::new(),
            out_ends: Vec::new(),
            buf: Vec::new(),
            burst: false,
            pending: Vec::new(),
            fed: 0,
            ns_wanted: None,
        };
        h.poll_due();
        // The peer announces itself: a request for us teaches our cache its MAC.
        h.receive_arp(
            ArpOperation::Request,
            PEER_MAC,
            PEER_IP,
            MacAddr([0; 6]),
            OUR_IP,
            OUR_MAC,
        );
        h.poll_due();
        assert!(
            h.stack.neighbour(h.now, PEER_IP).is_some(),
            "setup: an ARP request for us must create the sender's entry"
        );

        // Passive open: SYN without options, ACK of our SYN-ACK.
        h.flows.push(Flow {
            ours: LISTEN_PORT,
            theirs: PASSIVE_PEER_PORT,
            a_nxt: 0x1000_0000,
            b_max: None,
            b_ts: 0,
            ts: false,
            v6: false,
        });
        h.send_seg(0, flags::SYN, 0, 0, 65535, &[], &[]);
        h.send_seg(0, flags::ACK, 0, 0, 65535, &[], &[]);
        let server = h.stack.tcp_accept(h.listener).expect("setup: accept");
        let server = server.expect("setup: passive handshake completes");
        h.tcp.push(server);

        // Active open with every option.
        let client = h
            .stack
            .tcp_connect(h.now, SocketAddrV4::new(PEER_IP, ACTIVE_PEER_PORT), None)
            .expect("setup: connect");
        h.tcp.push(client);
        h.poll_due();
        let fi = h
            .flows
            .iter()
            .position(|f| f.theirs == ACTIVE_PEER_PORT)
            .expect("setup: our SYN was sent");
        if let Some(f) = h.flows.get_mut(fi) {
            f.ts = true;
            f.a_nxt = 0x2000_0000;
        }
        let opts = [2, 4, 0x05, 0xb4, 1, 3, 3, 7, 4, 2, 1, 1];
        h.send_seg(fi, flags::SYN | flags::ACK, 0, 0, 65535, &opts, &[]);
        for hd in [server, client] {
            let st = h.stack.tcp_status(hd).expect("setup: status");
            assert_eq!(st.state, State::Established, "setup: handshake");
        }
        h.setup_ipv6();
        // After the scripted setup, which needs every answer at once.
        h.burst = cfg & 128 != 0;
        h
    }

    fn tx_frames(&mut self, limit: usize, what: &str) {
        assert!(
            self.out_ends.len() <= limit,
            "{what} emitted {} frames (bound {limit})",
            self.out_ends.len()
        );
        let out = std::mem::take(&mut self.out);
        let ends = std::mem::take(&mut self.out_ends);
        let mut start = 0;
        for &end in &ends {
            let f = &out[start..end];
            start = end;
            let emitted = if self.vnet {
                check_vnet(f, self.mtu)
            } else {
                check(f, self.mtu)
            };
            match emitted {
                Emitted::ArpRequest(ip) => {
                    if ip == PEER_IP {
                        self.arp_wanted = true;
                    }
                }
                Emitted::Tcp {
                    ours,
                    theirs,
                    seq,
                    seq_len,
                    ts,
                    v6,
                } => self.track(ours, theirs, seq, seq_len, ts, v6),
                Emitted::Ns(target) => {
                    if target == v6::PEER_IP6 || target == v6::peer_ll() {
                        self.ns_wanted = Some(target);
                    }
                }
                Emitted::Other => {}
            }
        }
        self.out = out;
        self.out.clear();
        self.out_ends = ends;
        self.out_ends.clear();
    }

    fn track(
        &mut self,
        ours: u16,
        theirs: u16,
        seq: u32,
        seq_len: usize,
        ts: Option<u32>,
        v6: bool,
    ) {
        let end = seq.wrapping_add(seq_len as u32);
        let idx = match self
            .flows
            .iter()
            .position(|f| f.ours == ours && f.theirs == theirs && f.v6 == v6)
        {
            Some(i) => i,
            None if self.flows.len() < MAX_FLOWS => {
                self.flows.push(Flow {
                    ours,
                    theirs,
                    a_nxt: 0x3000_0000 ^ u32::from(theirs),
                    b_max: None,
                    b_ts: 0,
                    ts: false,
                    v6,
                });
                self.flows.len() - 1
            }
            None => return,
        };
        if let Some(f) = self.flows.get_mut(idx) {
            f.b_max = Some(match f.b_max {
                Some(m) if SeqNum(m).ge(SeqNum(end)) => m,
                _ => end,
            });
            if let Some(t) = ts {
                f.b_ts = t;
            }
        }
    }

    /// Deliver a frame the harness built (behind a plain virtio-net header
    /// when the link has one).
    fn receive(&mut self, frame: &[u8]) {
        if self.vnet {
            let mut f = Vec::with_capacity(VNET_HDR_LEN + frame.len());
            f.resize(VNET_HDR_LEN, 0);
            f.extend_from_slice(frame);
            VnetRepr::NONE.emit(&mut f);
            self.receive_raw(&f);
        } else {
            self.receive_raw(frame);
        }
    }

    /// Deliver bytes as they are (with offloads, the fuzzer's own header);
    /// in burst mode, gather them for `flush_burst`.
    fn receive_raw(&mut self, frame: &[u8]) {
        if self.burst {
            self.pending.push(frame.to_vec());
            if self.pending.len() >= MAX_BURST {
                self.flush_burst();
            }
            return;
        }
        self.fed += 1;
        let (out, ends) = (&mut self.out, &mut self.out_ends);
        self.stack
            .receive(self.now, frame, &mut |f| push_frame(out, ends, f));
        self.tx_frames(MAX_FRAMES_PER_RECEIVE, "one receive");
        self.poll_due();
    }

    /// Burst mode: hand the gathered frames to `receive_burst` at once.
    fn flush_burst(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        self.fed += pending.len() as u64;
        let (out, ends) = (&mut self.out, &mut self.out_ends);
        self.stack
            .receive_burst(self.now, pending.iter().map(|f| &f[..]), &mut |f| {
                push_frame(out, ends, f)
            });
        self.tx_frames(MAX_FRAMES_PER_RECEIVE * pending.len(), "one burst");
        let link = &self.stack.counters().link;
        assert!(
            link.InGroWirePackets >= 2 * link.InGroPackets,
            "a coalesced segment of fewer than two frames"
        );
        self.poll_due();
    }

    /// Poll while the stack says it is due at `now`; returns `poll_at()`
    /// as it is afterwards (`advance` steps to it without asking again).
    fn poll_due(&mut self) -> Option<Instant> {
        let next = self.stack.poll_at();
        self.poll_due_from(next)
    }

    /// [`Harness::poll_due`] given `next`, what `poll_at()` answers now
    /// (`advance` has it from the previous `poll_due`: nothing touched the
    /// stack since, only the harness's clock moved, and `poll_at` does not
    /// depend on it). Same polls, one `poll_at` walk fewer per timer instant.
    fn poll_due_from(&mut self, mut next: Option<Instant>) -> Option<Instant> {
        for _ in 0..4 {
            let mut polls = 0;
            while next.is_some_and(|t| t <= self.now) {
                polls += 1;
                assert!(
                    polls <= MAX_POLLS_AT_ONE_INSTANT,
                    "livelock: poll_at() <= now after {MAX_POLLS_AT_ONE_INSTANT} polls"
                );
                let (out, ends) = (&mut self.out, &mut self.out_ends);
                self.stack.poll(self.now, &mut |f| push_frame(out, ends, f));
                self.tx_frames(MAX_FRAMES_PER_POLL, "one poll");
                next = self.stack.poll_at();
            }
            if !self.auto_arp {
                return next;
            }
            // The peer answers our Neighbor Solicitations and ARP requests
            // for it (like a live host).
            let ns = self.ns_wanted.take();
            if let Some(t) = ns {
                self.answer_ns(t);
                next = self.stack.poll_at();
            }
            if !std::mem::take(&mut self.arp_wanted) {
                if ns.is_some() {
                    continue;
                }
                return next;
            }
            let mut frame = arp_frame(
                ArpOperation::Reply,
                PEER_MAC,
                PEER_IP,
                OUR_MAC,
                OUR_IP,
                OUR_MAC,
            );
            if self.vnet {
                frame.splice(0..0, [0u8; VNET_HDR_LEN]);
            }
            self.fed += 1;
            let (out, ends) = (&mut self.out, &mut self.out_ends);
            self.stack
                .receive(self.now, &frame, &mut |f| push_frame(out, ends, f));
            self.tx_frames(MAX_FRAMES_PER_RECEIVE, "one receive");
            next = self.stack.poll_at();
        }
        next
    }

    /// Advance the clock by `d`, visiting every timer on the way.
    fn advance(&mut self, d: u64) {
        let target = self.now + Duration::from_micros(d);
        let mut steps = 0;
        let mut next = self.poll_due();
        loop {
            match next {
                Some(t) if t <= target => {
                    steps += 1;
                    assert!(
                        steps <= MAX_TIMER_STEPS,
                        "timer storm: {steps} timer instants"
                    );
                    self.now = self.now.max(t);
                    next = self.poll_due_from(next);
                }
                _ => break,
            }
        }
        self.now = target;
        // Nothing is due before `target` (the loop stepped past every
        // instant up to it): polling again would only answer a solicitation
        // the peer still owes.
        if self.auto_arp && (self.arp_wanted || self.ns_wanted.is_some()) {
            self.poll_due();
        }
    }

    fn receive_arp(
        &mut self,
        op: ArpOperation,
        smac: MacAddr,
        sip: Ipv4Addr,
        tmac: MacAddr,
        tip: Ipv4Addr,
        edst: MacAddr,
    ) {
        let f = arp_frame(op, smac, sip, tmac, tip, edst);
        self.receive(&f);
    }

    fn ip_frame(&mut self, hdr: IpHdr, payload: &[u8], edst: MacAddr) -> Vec<u8> {
        let mut h = hdr;
        if h.ident == 0 {
            self.ident = self.ident.wrapping_add(1);
            h.ident = self.ident;
        }
        ethernet(edst, PEER_MAC, EtherType::Ipv4, &h.packet(payload))
    }

    /// The frame of a TCP segment from the peer on flow `fi`: `seq`/`ack`
    /// are offsets from the peer's next sequence number and our highest
    /// one (which advances over the segment when `dseq` is 0).
    #[allow(clippy::too_many_arguments)]
    fn seg_frame(
        &mut self,
        fi: usize,
        fl: u8,
        dseq: u32,
        dack: u32,
        window: u16,
        opts: &[u8],
        data: &[u8],
    ) -> Option<Vec<u8>> {
        let f = self.flows.get(fi).copied()?;
        let seq = f.a_nxt.wrapping_add(dseq);
        let ack = f.b_max.unwrap_or(0).wrapping_add(dack);
        let mut options = opts.to_vec();
        if f.ts && fl & flags::RST == 0 {
            let tsval = (self.now.total_millis() as u32).wrapping_add(0x0100_0000);
            options.extend_from_slice(&[1, 1, 8, 10]);
            options.extend_from_slice(&tsval.to_be_bytes());
            options.extend_from_slice(&f.b_ts.to_be_bytes());
        }
        options.truncate(40);
        while !options.len().is_multiple_of(4) {
            options.push(0);
        }
        let seg = tcp_bytes(f.theirs, f.ours, seq, ack, fl, window, &options, data);
        let frame = if f.v6 {
            self.tcp6_frame(seg)
        } else {
            self.ip_frame(
                IpHdr::new(PEER_IP, OUR_IP, IpProtocol::Tcp),
                &seg_with_csum(seg, PEER_IP, OUR_IP),
                OUR_MAC,
            )
        };
        if dseq == 0 {
            let len =
                data.len() + usize::from(fl & flags::SYN != 0) + usize::from(fl & flags::FIN != 0);
            if let Some(f) = self.flows.get_mut(fi) {
                f.a_nxt = f.a_nxt.wrapping_add(len as u32);
            }
        }
        Some(frame)
    }

    /// Send a TCP segment from the peer on flow `fi` (see `seg_frame`).
    #[allow(clippy::too_many_arguments)]
    fn send_seg(
        &mut self,
        fi: usize,
        fl: u8,
        dseq: u32,
        dack: u32,
        window: u16,
        opts: &[u8],
        data: &[u8],
    ) {
        if let Some(frame) = self.seg_frame(fi, fl, dseq, dack, window, opts, data) {
            self.receive(&frame);
        }
    }
}

/// The order in which the `n` pieces of a datagram are sent: in order,
/// reversed, rotated, or with one left out; `dup`'s low bit adds a
/// duplicate of one piece.
fn fragment_order(n: usize, order: u8, dup: u8) -> Vec<usize> {
    let k = usize::from(order >> 2);
    let mut idxs: Vec<usize> = match order % 4 {
        0 => (0..n).collect(),
        1 => (0..n).rev().collect(),
        2 => (0..n).map(|i| (i + k) % n).collect(),
        _ => (0..n).filter(|i| *i != k % n).collect(),
    };
    if dup & 1 != 0 && n > 0 {
        idxs.push(usize::from(dup >> 1) % n);
    }
    idxs
}

/// Append one emitted frame to the flat output buffer.
fn push_frame(out: &mut Vec<u8>, ends: &mut Vec<usize>, f: &[u8]) {
    out.extend_from_slice(f);
    ends.push(out.len());
}

fn arp_frame(
    op: ArpOperation,
    smac: MacAddr,
    sip: Ipv4Addr,
    tmac: MacAddr,
    tip: Ipv4Addr,
    edst: MacAddr,
) -> Vec<u8> {
    let mut a = [0u8; ARP_LEN];
    ArpRepr {
        operation: op,
        sender_mac: smac,
        sender_ip: sip,
        target_mac: tmac,
        target_ip: tip,
    }
    .emit(&mut ArpPacket::new_unchecked(&mut a[..]));
    ethernet(edst, smac, EtherType::Arp, &a)
}

/// A TCP header (+ raw options, padded by the caller) and payload, checksum 0.
#[allow(clippy::too_many_arguments)]
fn tcp_bytes(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    fl: u8,
    window: u16,
    opts: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let opts = opts.get(..opts.len().min(40) / 4 * 4).unwrap_or(&[]);
    let hl = TCP_HEADER_LEN + opts.len();
    let mut b = Vec::with_capacity(hl + data.len());
    b.resize(hl, 0);
    b.extend_from_slice(data);
    let mut p = TcpPacket::new_unchecked(&mut b[..]);
    p.set_src_port(sport);
    p.set_dst_port(dport);
    p.set_seq_number(SeqNum(seq));
    p.set_ack_number(SeqNum(if fl & flags::ACK != 0 { ack } else { 0 }));
    p.set_header_len(hl);
    p.set_flags(fl);
    p.set_window_len(window);
    p.set_urgent_at(0);
    p.options_mut().copy_from_slice(opts);
    b
}

fn seg_with_csum(mut seg: Vec<u8>, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    TcpPacket::new_unchecked(&mut seg[..]).fill_checksum(src, dst);
    seg
}

/// Recompute the IPv4 header and transport checksums of a frame where the
/// lengths allow (so mutations get past checksum verification).
fn repair(f: &mut [u8]) {
    let Ok(eth) = EthernetFrame::new_checked(&f[..]) else {
        return;
    };
    if eth.ethertype() == EtherType::Ipv6 {
        if let Some(ipb) = f.get_mut(ETHERNET_HEADER_LEN..) {
            v6::repair6(ipb);
        }
        return;
    }
    if eth.ethertype() != EtherType::Ipv4 {
        return;
    }
    let Some(ipb) = f.get_mut(ETHERNET_HEADER_LEN..) else {
        return;
    };
    let Ok(mut ip) = Ipv4Packet::new_checked(&mut ipb[..]) else {
        return;
    };
    ip.fill_checksum();
    let (src, dst, proto) = (ip.src_addr(), ip.dst_addr(), ip.protocol());
    if ip.frag_offset() != 0 || ip.more_frags() {
        return;
    }
    let payload = ip.payload_mut();
    match proto {
        IpProtocol::Tcp => {
            if let Ok(mut p) = TcpPacket::new_checked(&mut payload[..]) {
                p.fill_checksum(src, dst);
            }
        }
        IpProtocol::Udp => {
            if let Ok(mut p) = UdpPacket::new_checked(&mut payload[..]) {
                p.fill_checksum(src, dst);
            }
        }
        IpProtocol::Icmp => {
            if let Ok(mut p) = Icmpv4Packet::new_checked(&mut payload[..]) {
                p.fill_checksum();
            }
        }
        IpProtocol::Unknown(_) => {}
    }
}

/// A source address for hostile frames: mostly the peer, sometimes anything.
fn src_ip(inp: &mut Input) -> Ipv4Addr {
    match inp.u8() % 8 {
        0..=4 => PEER_IP,
        5 => Ipv4Addr::new(10, 0, 0, inp.u8()),
        6 => Ipv4Addr::from(inp.u32()),
        _ => [
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            SUBNET_BCAST,
            Ipv4Addr::new(224, 0, 0, 1),
            Ipv4Addr::new(127, 0, 0, 1),
            OUR_IP,
            Ipv4Addr::new(240, 0, 0, 1),
            Ipv4Addr::new(8, 8, 8, 8),
        ][usize::from(inp.u8() % 8)],
    }
}

/// A destination address for hostile frames: mostly us.
fn dst_ip(inp: &mut Input) -> Ipv4Addr {
    match inp.u8() % 8 {
        0..=4 => OUR_IP,
        5 => SUBNET_BCAST,
        6 => Ipv4Addr::BROADCAST,
        _ => Ipv4Addr::from(inp.u32()),
    }
}

fn dst_mac(inp: &mut Input) -> MacAddr {
    match inp.u8() % 8 {
        0..=5 => OUR_MAC,
        6 => MacAddr::BROADCAST,
        _ => MacAddr([1, 0, 0x5e, 0, 0, 1]),
    }
}

/// An application destination on our subnet (never ourselves or broadcast).
fn app_dst(inp: &mut Input) -> Ipv4Addr {
    let b = inp.u8();
    if b < 200 {
        PEER_IP
    } else {
        Ipv4Addr::new(10, 0, 0, 3 + b % 50)
    }
}

/// The operations an input byte selects (high 5 bits).
#[derive(Debug, Clone, Copy)]
enum Op {
    Raw,
    RawFixed,
    Tcp,
    /// A run of consecutive segments on one flow, one of them perhaps
    /// perturbed (burst mode only: it takes the last `Tcp` slot).
    TcpRun,
    Udp,
    IcmpEcho,
    IcmpError,
    Arp,
    Fragment,
    FragmentedDatagram,
    IpRaw,
    Accept,
    Send,
    Recv,
    Shutdown,
    Close,
    Abort,
    Connect,
    SetOpt,
    UdpSend,
    UdpRecv,
    UdpBindClose,
    Ping,
    Diag,
    /// A TCP segment on a tracked flow, or a new IPv6 flow.
    Tcp6,
    /// ICMPv6: echo, Neighbor Discovery, router messages, MLD, errors.
    Icmp6,
    /// IPv6 extension header chains and fragments.
    Ip6Ext,
    /// The application's IPv6 calls.
    App6,
}

const OPS: [Op; 32] = [
    Op::Raw,
    Op::RawFixed,
    Op::App6,
    Op::Tcp,
    Op::Tcp,
    Op::Tcp,
    Op::Tcp,
    Op::Tcp6,
    Op::Tcp,
    Op::Udp,
    Op::IcmpEcho,
    Op::IcmpError,
    Op::Icmp6,
    Op::Arp,
    Op::Fragment,
    Op::Ip6Ext,
    Op::FragmentedDatagram,
    Op::IpRaw,
    Op::Accept,
    Op::Send,
    Op::Send,
    Op::Recv,
    Op::Recv,
    Op::Shutdown,
    Op::Close,
    Op::Abort,
    Op::Connect,
    Op::SetOpt,
    Op::UdpSend,
    Op::UdpRecv,
    Op::UdpBindClose,
    Op::Ping,
];

thread_local! {
    /// The harness of each configuration right after its scripted setup,
    /// built on first use: every input starts from a clone of it (the
    /// setup is deterministic, so a clone is what `Harness::new` would
    /// build; `Stack: Clone` is tested in crates/core/tests/stack_clone.rs).
    static SETUP: RefCell<Vec<Option<Harness>>> = RefCell::new(vec![None; 256]);
}

/// A fresh harness for configuration `cfg` (a clone of the cached setup).
fn harness(cfg: u8) -> Harness {
    SETUP.with(|s| {
        let mut s = s.borrow_mut();
        let slot = &mut s[usize::from(cfg)];
        slot.get_or_insert_with(|| Harness::new(cfg)).clone()
    })
}

/// The `stack_receive` target body.
pub fn run(data: &[u8]) {
    let mut inp = Input { data };
    let mut h = harness(inp.u8());
    let mut ops = 0;
    while !inp.is_empty() && ops < MAX_OPS {
        ops += 1;
        let b = inp.u8();
        let step = STEPS[usize::from(b & 7)];
        let mut op = OPS[usize::from(b >> 3)];
        if h.burst && b >> 3 == 8 {
            op = Op::TcpRun;
        }
        // A burst ends where time moves or something else than a frame
        // happens (a runtime delivers what it read before anything else).
        if step > 0 || !op.is_frame() || ops % 16 == 0 {
            h.flush_burst();
        }
        h.advance(step);
        // Every 16th op also looks at the diagnostics.
        if ops % 16 == 0 {
            h.op(Op::Diag, &mut inp);
        }
        h.op(op, &mut inp);
    }
    h.flush_burst();
    h.op(Op::Diag, &mut inp);
    // Everything transient drains: fragments time out after 30 s.
    for _ in 0..3 {
        h.advance(STEPS[7]);
    }
    assert_eq!(
        h.stack.reassembly_memory(),
        0,
        "reassembly memory after the timeout"
    );
    assert_eq!(h.stack.reassembly_datagrams(), 0);
}

impl Op {
    /// The operation hands the stack a frame (or frames).
    fn is_frame(self) -> bool {
        matches!(
            self,
            Op::Raw
                | Op::RawFixed
                | Op::Tcp
                | Op::TcpRun
                | Op::Udp
                | Op::IcmpEcho
                | Op::IcmpError
                | Op::Arp
                | Op::Fragment
                | Op::FragmentedDatagram
                | Op::IpRaw
                | Op::Tcp6
                | Op::Icmp6
                | Op::Ip6Ext
        )
    }
}

impl Harness {
    fn grow_buf(&mut self, len: usize) {
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
    }

    fn handle(&self, inp: &mut Input) -> Option<TcpHandle> {
        let i = usize::from(inp.u8());
        if i == 255 {
            return Some(self.listener);
        }
        self.tcp.get(i % self.tcp.len().max(1)).copied()
    }

    fn udp_handle(&self, inp: &mut Input) -> Option<UdpHandle> {
        let i = usize::from(inp.u8());
        self.udp.get(i % self.udp.len().max(1)).copied()
    }

    fn op(&mut self, op: Op, inp: &mut Input) {
        match op {
            Op::Raw => {
                let len = inp.len(MAX_FRAME);
                let f = inp.bytes(len).to_vec();
                // With offloads the fuzzer writes the virtio-net header too.
                self.receive_raw(&f);
            }
            Op::RawFixed => {
                let fl = inp.u8();
                let len = inp.len(MAX_FRAME);
                let mut f = inp.bytes(len).to_vec();
                if fl & 1 != 0 {
                    if let Some(d) = f.get_mut(..6) {
                        d.copy_from_slice(&OUR_MAC.0);
                    }
                }
                if fl & 2 != 0 {
                    repair(&mut f);
                }
                self.receive(&f);
            }
            Op::Tcp => self.op_tcp(inp, false),
            Op::Tcp6 => self.op_tcp(inp, true),
            Op::Icmp6 => self.op_icmp6(inp),
            Op::Ip6Ext => self.op_ip6_ext(inp),
            Op::App6 => self.op_app6(inp),
            Op::TcpRun => self.op_tcp_run(inp),
            Op::Udp => {
                let (src, dst, edst) = (src_ip(inp), dst_ip(inp), dst_mac(inp));
                let sport = inp.u16();
                let dport = match inp.u8() % 4 {
                    0 | 1 => UDP_PORT,
                    _ => inp.u16(),
                };
                let csum = inp.u8() % 4;
                let len = inp.len(MAX_FRAME);
                let fb = inp.u8() & 1 != 0;
                let data = payload(inp, len, fb);
                let u = udp_bytes(src, dst, sport, dport, &data, csum);
                let f = self.ip_frame(IpHdr::new(src, dst, IpProtocol::Udp), &u, edst);
                self.receive(&f);
            }
            Op::IcmpEcho => {
                let (src, dst, edst) = (src_ip(inp), dst_ip(inp), dst_mac(inp));
                let (ident, seq) = (inp.u16(), inp.u16());
                let len = inp.len(MAX_FRAME);
                let data = payload(inp, len, false);
                let mut icmp = icmp_echo_bytes(ident, seq, &data);
                let kind = inp.u8();
                if kind & 1 != 0 {
                    // An echo reply (answers our pings or is unsolicited).
                    if let Some(t) = icmp.first_mut() {
                        *t = 0;
                    }
                    Icmpv4Packet::new_unchecked(&mut icmp[..]).fill_checksum();
                }
                let f = self.ip_frame(IpHdr::new(src, dst, IpProtocol::Icmp), &icmp, edst);
                self.receive(&f);
            }
            Op::IcmpError => self.op_icmp_error(inp),
            Op::Arp => {
                let opb = inp.u8();
                let op = match opb % 4 {
                    0 | 1 => ArpOperation::Request,
                    2 => ArpOperation::Reply,
                    _ => ArpOperation::Unknown(u16::from(opb)),
                };
                let smac = if inp.u8().is_multiple_of(4) {
                    MacAddr([inp.u8() & 0xfe | 2, inp.u8(), 0, 0, inp.u8(), inp.u8()])
                } else {
                    PEER_MAC
                };
                let sip = src_ip(inp);
                let tip = dst_ip(inp);
                let edst = dst_mac(inp);
                self.receive_arp(op, smac, sip, MacAddr([0; 6]), tip, edst);
            }
            Op::Fragment => {
                let src = src_ip(inp);
                let mut hdr = IpHdr::new(src, OUR_IP, IpProtocol::from(inp.u8() % 20));
                hdr.ident = 0x4000 + u16::from(inp.u8() % 4);
                let off = inp.u16();
                hdr.frag_offset = (off & 0x1fff) * 8;
                hdr.more_frags = off & 0x8000 != 0;
                hdr.dont_frag = off & 0x4000 != 0;
                let len = inp.len(MAX_FRAME);
                let fb = inp.u8() & 1 != 0;
                let data = payload(inp, len, fb);
                let f = self.ip_frame(hdr, &data, OUR_MAC);
                self.receive(&f);
            }
            Op::FragmentedDatagram => self.op_fragmented(inp),
            Op::IpRaw => {
                let vihl = inp.u8();
                let tos = inp.u8();
                let tl_mode = inp.u8();
                let ident = inp.u16();
                let frag = inp.u16();
                let ttl = inp.u8();
                let proto = inp.u8();
                let src = src_ip(inp);
                let dst = dst_ip(inp);
                let ihl = usize::from(vihl & 0xf) * 4;
                let optlen = ihl.saturating_sub(IPV4_HEADER_LEN);
                let opts = payload(inp, optlen, true);
                let len = inp.len(MAX_FRAME);
                let data = payload(inp, len, true);
                let mut p = Vec::with_capacity(IPV4_HEADER_LEN + optlen + data.len());
                p.extend_from_slice(&[vihl, tos, 0, 0]);
                p.extend_from_slice(&ident.to_be_bytes());
                p.extend_from_slice(&frag.to_be_bytes());
                p.extend_from_slice(&[ttl, proto, 0, 0]);
                p.extend_from_slice(&src.octets());
                p.extend_from_slice(&dst.octets());
                p.extend_from_slice(&opts);
                let hlen = p.len();
                p.extend_from_slice(&data);
                let total = match tl_mode % 4 {
                    0 | 1 => p.len() as u16,
                    2 => (p.len() as u16).wrapping_sub(u16::from(tl_mode >> 2)),
                    _ => (p.len() as u16).wrapping_add(u16::from(tl_mode >> 2)),
                };
                if let Some(t) = p.get_mut(2..4) {
                    t.copy_from_slice(&total.to_be_bytes());
                }
                if tl_mode & 0x80 == 0 {
                    let c = checksum::checksum(
                        p.get(..ihl.clamp(IPV4_HEADER_LEN, hlen)).unwrap_or(&[]),
                    );
                    if let Some(t) = p.get_mut(10..12) {
                        t.copy_from_slice(&c.to_be_bytes());
                    }
                }
                let f = ethernet(OUR_MAC, PEER_MAC, EtherType::Ipv4, &p);
                self.receive(&f);
            }
            Op::Accept => {
                for l in [Some(self.listener), self.listener6].into_iter().flatten() {
                    if let Ok(Some(c)) = self.stack.tcp_accept(l) {
                        if self.tcp.len() < MAX_HANDLES {
                            self.tcp.push(c);
                        }
                    }
                }
            }
            Op::Send => {
                let h = self.handle(inp);
                let len = inp.len(MAX_APP_SEND) * if inp.u8() & 1 != 0 { 64 } else { 1 };
                let data = payload(inp, len.min(MAX_APP_SEND), false);
                if let Some(h) = h {
                    if let Ok(n) = self.stack.tcp_send(h, &data) {
                        assert!(n <= data.len(), "tcp_send accepted more than offered");
                    }
                }
                self.poll_due();
            }
            Op::Recv => {
                let h = self.handle(inp);
                let len = inp.len(MAX_RECV).max(1);
                self.grow_buf(len);
                if let (Some(h), Some(buf)) = (h, self.buf.get_mut(..len)) {
                    if let Ok(n) = self.stack.tcp_recv(h, buf) {
                        assert!(n <= len, "tcp_recv returned more than the buffer");
                    }
                }
                self.poll_due();
            }
            Op::Shutdown => {
                if let Some(h) = self.handle(inp) {
                    let _ = self.stack.tcp_shutdown(h);
                }
                self.poll_due();
            }
            Op::Close => {
                if let Some(h) = self.handle(inp) {
                    self.stack.tcp_close(h);
                }
                self.poll_due();
            }
            Op::Abort => {
                if let Some(h) = self.handle(inp) {
                    self.stack.tcp_abort(h);
                }
                self.poll_due();
            }
            Op::Connect => {
                let dst = app_dst(inp);
                let port = inp.u16().max(1);
                let lp = inp.u16();
                let local =
                    (lp & 1 != 0).then(|| SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, lp >> 1));
                if let Ok(c) = self
                    .stack
                    .tcp_connect(self.now, SocketAddrV4::new(dst, port), local)
                {
                    if self.tcp.len() < MAX_HANDLES {
                        self.tcp.push(c);
                    }
                }
                self.poll_due();
            }
            Op::SetOpt => {
                let h = self.handle(inp);
                let which = inp.u8();
                if let Some(h) = h {
                    let on = which & 0x10 != 0;
                    let _ = match which % 4 {
                        0 => self.stack.tcp_set_nodelay(h, on),
                        1 => {
                            let iv = [1, 10, 75, 7200][usize::from(which >> 6)];
                            self.stack
                                .tcp_set_keepalive(h, on.then(|| Duration::from_secs(iv)))
                        }
                        2 => self.stack.tcp_set_linger_zero(h, on),
                        _ => self.stack.tcp_status(h).map(|_| ()),
                    };
                }
                self.poll_due();
            }
            Op::UdpSend => {
                let h = self.udp_handle(inp);
                let dst = app_dst(inp);
                let port = inp.u16().max(1);
                let len = inp.len(MAX_APP_SEND) * if inp.u8() & 1 != 0 { 64 } else { 1 };
                let data = payload(inp, len.min(MAX_APP_SEND), false);
                let connected = inp.u8() & 1 != 0;
                if let Some(h) = h {
                    let r = if connected {
                        self.stack.udp_send(self.now, h, &data)
                    } else {
                        self.stack
                            .udp_send_to(self.now, h, &data, SocketAddrV4::new(dst, port))
                    };
                    if let Ok(n) = r {
                        assert_eq!(n, data.len(), "UDP sends are all or nothing");
                    }
                }
                self.poll_due();
            }
            Op::UdpRecv => {
                let h = self.udp_handle(inp);
                let len = inp.len(MAX_RECV);
                self.grow_buf(len);
                if let (Some(h), Some(buf)) = (h, self.buf.get_mut(..len)) {
                    if let Ok((n, _)) = self.stack.udp_recv_from(h, buf) {
                        assert!(n <= len, "udp_recv_from returned more than the buffer");
                    }
                }
            }
            Op::UdpBindClose => {
                let b = inp.u8();
                let port = inp.u16();
                match b % 4 {
                    0 | 1 => {
                        if let Ok(u) = self
                            .stack
                            .udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
                        {
                            if self.udp.len() < MAX_HANDLES {
                                self.udp.push(u);
                            }
                        }
                    }
                    2 => {
                        if let Some(u) = self.udp.get(usize::from(b >> 2) % self.udp.len().max(1)) {
                            let _ = self.stack.udp_connect(*u, SocketAddrV4::new(PEER_IP, port));
                        }
                    }
                    _ => {
                        if let Some(u) = self.udp.get(usize::from(b >> 2) % self.udp.len().max(1)) {
                            self.stack.udp_close(*u);
                        }
                    }
                }
            }
            Op::Ping => {
                let dst = app_dst(inp);
                let (ident, seq) = (inp.u16(), inp.u16());
                let len = inp.len(MAX_APP_SEND) * if inp.u8() & 1 != 0 { 64 } else { 1 };
                let data = payload(inp, len.min(MAX_APP_SEND), false);
                let _ = self.stack.icmp_echo_send(self.now, dst, ident, seq, &data);
                self.poll_due();
            }
            Op::Diag => self.diag(),
        }
    }

    /// A segment on a tracked flow, or on a new one (IPv6 with `v6`).
    fn op_tcp(&mut self, inp: &mut Input, v6: bool) {
        let sel = inp.u8();
        let fi = if sel < 240 && !self.flows.is_empty() {
            usize::from(sel) % self.flows.len()
        } else {
            // A new flow from the peer, mostly to the listener.
            let theirs = inp.u16();
            let ours = if inp.u8().is_multiple_of(4) {
                inp.u16()
            } else if v6 {
                v6::LISTEN6_PORT
            } else {
                LISTEN_PORT
            };
            let isn = inp.u32();
            if self.flows.len() >= MAX_FLOWS {
                self.flows.remove(2);
            }
            self.flows.push(Flow {
                ours,
                theirs,
                a_nxt: isn,
                b_max: None,
                b_ts: 0,
                ts: inp.u8() & 1 != 0,
                v6,
            });
            self.flows.len() - 1
        };
        let fl = inp.u8();
        let dseq = inp.delta();
        let dack = inp.delta();
        let window = match inp.u8() % 4 {
            0 | 1 => 65535,
            2 => 0,
            _ => inp.u16(),
        };
        let optmode = inp.u8();
        let mut opts = Vec::new();
        if optmode & 0x80 != 0 {
            let n = usize::from(inp.u8() % 41);
            opts.extend_from_slice(inp.bytes(n));
        } else {
            if optmode & 1 != 0 {
                let mss = inp.u16();
                opts.extend_from_slice(&[2, 4]);
                opts.extend_from_slice(&mss.to_be_bytes());
            }
            if optmode & 2 != 0 {
                opts.extend_from_slice(&[1, 3, 3, inp.u8() % 16]);
            }
            if optmode & 4 != 0 {
                opts.extend_from_slice(&[1, 1, 4, 2]);
            }
            let nsack = usize::from((optmode >> 3) & 3);
            if nsack > 0 {
                let base = self.flows.get(fi).and_then(|f| f.b_max).unwrap_or(0);
                opts.extend_from_slice(&[1, 1, 5, 2 + 8 * nsack as u8]);
                for _ in 0..nsack {
                    let l = base.wrapping_sub(u32::from(inp.u16()));
                    let r = l.wrapping_add(u32::from(inp.u16()));
                    opts.extend_from_slice(&l.to_be_bytes());
                    opts.extend_from_slice(&r.to_be_bytes());
                }
            }
            if optmode & 0x20 != 0 {
                if let Some(f) = self.flows.get_mut(fi) {
                    f.ts = !f.ts;
                }
            }
        }
        let len = inp.len(MAX_FRAME);
        let data = payload(inp, len, optmode & 0x40 != 0);
        self.send_seg(fi, fl, dseq, dack, window, &opts, &data);
    }

    /// Burst mode: `n` consecutive segments of one size on a tracked flow
    /// (what receive coalescing merges), one of them perhaps perturbed so
    /// that it must not join: a flag, a shorter or longer payload, a
    /// sequence offset, a spoiled checksum, another window or ACK, a
    /// resend, a swap with its successor, or a frame of another flow.
    fn op_tcp_run(&mut self, inp: &mut Input) {
        if self.flows.is_empty() {
            return;
        }
        let fi = usize::from(inp.u8()) % self.flows.len();
        let n = usize::from(1 + inp.u8() % MAX_RUN);
        let size = inp.len(1460).max(1);
        let dack = inp.delta();
        let window = inp.u16();
        let at = usize::from(inp.u8());
        let kind = inp.u8();
        let arg = inp.u8();
        let psh_last = kind & 0x80 != 0;
        let mut frames: Vec<Vec<u8>> = Vec::with_capacity(n + 1);
        for i in 0..n {
            let mut fl = flags::ACK;
            if psh_last && i + 1 == n {
                fl |= flags::PSH;
            }
            let (mut len, mut dseq, mut win, mut ack) = (size, 0u32, window, dack);
            let hit = i == at % n;
            if hit {
                match kind & 7 {
                    0 => {
                        fl |= [
                            flags::FIN,
                            flags::SYN,
                            flags::RST,
                            flags::URG,
                            flags::ECE,
                            flags::CWR,
                            flags::PSH,
                            0,
                        ][usize::from(arg & 7)]
                    }
                    1 => len = (usize::from(arg) % size).max(1),
                    2 => len = size + usize::from(arg) + 1,
                    3 => dseq = (i32::from(arg as i8)) as u32,
                    4 => win = win.wrapping_add(u16::from(arg) + 1),
                    5 => ack = ack.wrapping_add(u32::from(arg) + 1),
                    _ => {}
                }
            }
            let data = payload(inp, len, false);
            let Some(mut f) = self.seg_frame(fi, fl, dseq, ack, win, &[], &data) else {
                return;
            };
            if hit && kind & 7 == 6 {
                // A spoiled checksum (the segment is lost to the stack).
                if let Some(b) = f.last_mut() {
                    *b ^= 0x5a;
                }
            }
            frames.push(f);
            if hit && kind & 7 == 7 {
                match arg % 3 {
                    // A resend of this segment.
                    0 => frames.push(frames[frames.len() - 1].clone()),
                    // Swap it with the previous one.
                    1 if frames.len() >= 2 => {
                        let k = frames.len();
                        frames.swap(k - 1, k - 2);
                    }
                    // A segment of another flow in between.
                    _ => {
                        let other = (fi + 1) % self.flows.len();
                        if let Some(o) = self.seg_frame(other, flags::ACK, 0, 0, window, &[], &data)
                        {
                            frames.push(o);
                        }
                    }
                }
            }
        }
        for f in &frames {
            self.receive(f);
        }
    }

    /// An ICMP error from a router or the peer, quoting one of our flows or
    /// our UDP socket, so it reaches `on_icmp_unreachable` and UDP errors.
    fn op_icmp_error(&mut self, inp: &mut Input) {
        let kind = inp.u8();
        let (ty, code) = match kind % 8 {
            0..=3 => (3, inp.u8() % 16),
            4 => (11, inp.u8() % 2),
            5 => (12, 0),
            6 => (4, 0),
            _ => (inp.u8(), inp.u8()),
        };
        let mtu = inp.u16();
        let from = if kind & 0x80 != 0 {
            Ipv4Addr::new(10, 0, 0, 254)
        } else {
            src_ip(inp)
        };
        let sel = usize::from(inp.u8());
        let dseq = inp.delta();
        let quote_len = match inp.u8() % 4 {
            0 | 1 => 8,
            2 => 20,
            _ => usize::from(inp.u8() % 64),
        };
        let flow = if sel < 240 && !self.flows.is_empty() {
            self.flows.get(sel % self.flows.len()).copied()
        } else {
            None
        };
        let (proto, quoted) = if let Some(f) = flow {
            let seq = f.b_max.unwrap_or(0).wrapping_sub(1).wrapping_add(dseq);
            let t = tcp_bytes(f.ours, f.theirs, seq, f.a_nxt, flags::ACK, 1000, &[], &[]);
            (IpProtocol::Tcp, t)
        } else {
            let u = udp_bytes(OUR_IP, PEER_IP, UDP_PORT, inp.u16(), &[0; 12], 0);
            (IpProtocol::Udp, u)
        };
        let quoted_ip = IpHdr::new(OUR_IP, PEER_IP, proto).packet(&quoted);
        let keep = (IPV4_HEADER_LEN + quote_len).min(quoted_ip.len());
        let mut icmp = vec![ty, code, 0, 0, 0, 0];
        icmp.extend_from_slice(&mtu.to_be_bytes());
        icmp.extend_from_slice(quoted_ip.get(..keep).unwrap_or(&[]));
        let c = checksum::checksum(&icmp);
        if let Some(t) = icmp.get_mut(2..4) {
            t.copy_from_slice(&c.to_be_bytes());
        }
        let f = self.ip_frame(IpHdr::new(from, OUR_IP, IpProtocol::Icmp), &icmp, OUR_MAC);
        self.receive(&f);
    }

    /// A whole UDP or ICMP echo datagram cut into fragments, sent in a
    /// fuzz-chosen order (possibly with a duplicate or a missing piece).
    fn op_fragmented(&mut self, inp: &mut Input) {
        let kind = inp.u8();
        let len = inp.len(MAX_FRAME);
        let data = payload(inp, len, false);
        let (proto, body) = if kind & 1 == 0 {
            (
                IpProtocol::Udp,
                udp_bytes(PEER_IP, OUR_IP, 5353, UDP_PORT, &data, 0),
            )
        } else {
            (IpProtocol::Icmp, icmp_echo_bytes(7, 7, &data))
        };
        let step = 8 * (1 + usize::from(inp.u8() % 185));
        let pieces: Vec<&[u8]> = body.chunks(step).collect();
        let n = pieces.len();
        let order = inp.u8();
        let dup = inp.u8();
        self.ident = self.ident.wrapping_add(1);
        let ident = self.ident;
        let idxs = fragment_order(n, order, dup);
        for i in idxs {
            let Some(piece) = pieces.get(i) else { continue };
            let mut hdr = IpHdr::new(PEER_IP, OUR_IP, proto);
            hdr.ident = ident;
            hdr.dont_frag = false;
            hdr.frag_offset = (i * step) as u16;
            hdr.more_frags = i + 1 < n;
            let f = self.ip_frame(hdr, piece, OUR_MAC);
            self.receive(&f);
        }
    }

    /// Diagnostics never panic and the tables stay within their limits.
    fn diag(&mut self) {
        for h in self.tcp.iter().chain([&self.listener]) {
            let _ = self.stack.tcp_status(*h);
        }
        for u in &self.udp {
            let _ = self.stack.udp_status(*u);
        }
        let socks = self.stack.tcp_sockets();
        assert_eq!(socks.len(), self.stack.tcp_socket_count());
        assert!(
            socks.len() <= self.limits.max_tcp_sockets,
            "{} TCP sockets > limit {}",
            socks.len(),
            self.limits.max_tcp_sockets
        );
        assert!(self.stack.udp_socket_count() <= self.limits.max_udp_sockets);
        assert!(
            self.stack.reassembly_memory() <= self.limits.reasm.mem_limit,
            "reassembly memory {} > limit {}",
            self.stack.reassembly_memory(),
            self.limits.reasm.mem_limit
        );
        assert!(
            self.stack.reassembly_memory6() <= self.limits.reasm6.mem_limit,
            "IPv6 reassembly memory {} > limit {}",
            self.stack.reassembly_memory6(),
            self.limits.reasm6.mem_limit
        );
        assert!(self.stack.reassembly_datagrams6() <= self.limits.reasm6.max_datagrams);
        let _ = self.stack.counters().iter().count();
        // Every frame counted once, whether it was coalesced or not.
        assert_eq!(
            self.stack.counters().link.InFrames,
            self.fed,
            "Link InFrames against the frames handed over"
        );
        let _ = self.stack.icmp_echo_replies().count();
        let _ = self.stack.neighbour(self.now, PEER_IP);
        let _ = (self.stack.addr(), self.stack.config().mtu);
        self.diag6();
    }
}
