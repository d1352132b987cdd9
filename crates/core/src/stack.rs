//! The `Stack`: one interface, its neighbour cache, IPv4 input/output with
//! reassembly, ICMP, UDP and TCP sockets. Sans-IO: time comes in as an
//! argument, frames go out through a `tx` callback.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_wire::arp::{ArpOperation, ArpPacket, ArpRepr};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::icmpv4::{DstUnreachable, Icmpv4Packet, Icmpv4Repr, TimeExceeded};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr};
use ustack_wire::tcp::SeqNum;
use ustack_wire::udp::{UdpPacket, UdpRepr, UDP_HEADER_LEN};
use ustack_wire::virtio_net::{Gso, VnetRepr};
use ustack_wire::Error as WireError;

use crate::arp::{ArpCache, ArpLimits, ArpRequest};
use crate::counters::Counters;
use crate::error::{IcmpError, UdpError};
use crate::frag::{Expired, Head6, Key6, Reasm, ReasmLimits, Reassembler};
use crate::hash::{KeyedState, SplitMix};
use crate::iface::{Iface, IpOut, LinkOffload, TokenBucket, TxError};
use crate::pmtu::PmtuCache;
use crate::tcp::TcpConfig;
use crate::tcp_table::TcpTable;
use crate::time::{Duration, Instant};
use crate::transparent::Transparent;
use crate::udp::{Deliver, UdpHandle, UdpStatus, UdpTable};
use crate::BindError;

/// Resource limits. Every table and queue an attacker can grow is bounded by one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub arp: ArpLimits,
    pub reasm: ReasmLimits,
    /// IPv6 reassembly (its own table and memory, as Linux's
    /// `ip6frag_*`; 60 s timeout, RFC 8200 4.5).
    pub reasm6: ReasmLimits,
    /// Open UDP sockets.
    pub max_udp_sockets: usize,
    /// Per-socket UDP receive queue in payload bytes (Linux `rmem_default`).
    pub udp_rcvbuf: usize,
    /// Per-socket UDP receive queue in datagrams.
    pub udp_rcv_datagrams: usize,
    /// TCP control blocks of all kinds (listeners, connections, TIME-WAIT).
    pub max_tcp_sockets: usize,
    /// Half-open (SYN-RECEIVED) connections per listener (Linux
    /// `tcp_max_syn_backlog`), on top of the accept queue bounded by `backlog`.
    pub max_syn_backlog: usize,
    /// ICMP errors per second and burst (Linux `icmp_msgs_per_sec`/`_burst`).
    pub icmp_error_rate: u32,
    pub icmp_error_burst: u32,
    /// Echo replies kept for `icmp_echo_replies` (oldest dropped).
    pub echo_reply_queue: usize,
    /// TCP connections dispatched per `poll` call (round-robin).
    pub poll_budget: usize,
    /// Bytes of frames from UDP/ICMP socket calls waiting for the next
    /// `poll` (beyond it sends fail with ENOBUFS).
    pub tx_queue_bytes: usize,
    /// Destinations whose path MTU an ICMP "fragmentation needed" taught
    /// us (RFC 1191; Linux keeps them as route exceptions).
    pub pmtu_cache: usize,
    /// How long a learned path MTU is kept (Linux `ip_rt_mtu_expires`,
    /// 10 minutes); new connections then start with the link MTU again.
    pub pmtu_expires: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            arp: ArpLimits::default(),
            reasm: ReasmLimits::default(),
            reasm6: ReasmLimits::ipv6(),
            max_udp_sockets: 4096,
            udp_rcvbuf: 212_992,
            udp_rcv_datagrams: 1024,
            max_tcp_sockets: 16_384,
            max_syn_backlog: 256,
            icmp_error_rate: 1000,
            icmp_error_burst: 50,
            echo_reply_queue: 1024,
            poll_budget: 256,
            tx_queue_bytes: 1 << 20,
            pmtu_cache: 4096,
            pmtu_expires: Duration::from_secs(600),
        }
    }
}

/// Configuration of one stack instance.
#[derive(Debug, Clone)]
pub struct Config {
    pub mac: MacAddr,
    /// Our address and prefix.
    pub addr: Ipv4Cidr,
    pub gateway: Option<Ipv4Addr>,
    /// IP MTU (1500 = Ethernet payload size). Clamped to 68..=65535.
    pub mtu: usize,
    pub tcp: TcpConfig,
    pub limits: Limits,
    /// Keyed-hash secret for ISNs, ephemeral ports and hash tables.
    pub secret: [u8; 16],
    /// Seed for any other randomness (IP ident start, ...).
    pub seed: u64,
}

/// An ICMP echo reply received for `icmp_echo_send` (or an ICMPv6 one
/// for `icmp6_echo_send`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoReply {
    pub from: std::net::IpAddr,
    pub ident: u16,
    pub seq: u16,
    /// Payload bytes (without the 8-byte ICMP header).
    pub len: usize,
    /// The reply's TTL (IPv4) or hop limit (IPv6).
    pub ttl: u8,
    pub at: Instant,
}

/// An ICMP error to send about a received datagram.
#[derive(Debug, Clone, Copy)]
enum IcmpErr {
    Unreachable(DstUnreachable),
    FragExpired,
}

/// The sans-IO network stack.
///
/// `Clone` makes an independent copy of the whole state (sockets, buffers,
/// timers, caches, counters, the random generator): fed the same calls, a
/// clone emits the same frames as the original. A test harness can set a
/// stack up once and clone it per run instead of building it again (the
/// fuzz targets do; `tests/stack_clone.rs`).
#[derive(Clone)]
pub struct Stack {
    pub(crate) config: Config,
    pub(crate) counters: Counters,
    pub(crate) iface: Iface,
    pub(crate) icmp_bucket: TokenBucket,
    /// ICMPv6 errors have their own bucket (Linux: `icmpv6_global_allow`
    /// is apart from ICMPv4's), with the same rate and burst.
    pub(crate) icmp6_bucket: TokenBucket,
    reasm: Reassembler,
    /// IPv6 fragments being reassembled (`ip6.rs`).
    pub(crate) reasm6: Reassembler<Key6, Head6>,
    pub(crate) reasm6_expired: Vec<Head6>,
    /// IPv6 host autoconfiguration (`ip6_host.rs`; off by default).
    pub(crate) host6: crate::ip6_host::Host6,
    pub(crate) udp: UdpTable,
    /// UDP sockets over IPv6 (`ip6.rs`), a port space of their own.
    pub(crate) udp6: UdpTable<std::net::SocketAddrV6>,
    pub(crate) tcp: TcpTable,
    echo: VecDeque<EchoReply>,
    /// Reused buffer where transport payloads are built before IP output.
    pub(crate) scratch: Vec<u8>,
    /// Frames produced by socket calls, sent on the next `poll`.
    pub(crate) txq: TxQueue,
    /// Transparent mode state (`None` = an ordinary host).
    pub(crate) transparent: Option<Box<Transparent>>,
    /// Router advertisements and DHCP servers (`addr_services.rs`).
    pub(crate) services: Option<Box<crate::addr_services::Services>>,
    arp_requests: Vec<ArpRequest>,
    nd_requests: Vec<ArpRequest<std::net::Ipv6Addr>>,
    reasm_expired: Vec<Expired>,
    /// Gratuitous ARP still to announce.
    announce: bool,
    started: Instant,
    /// Latest time seen in `receive`/`poll` (for `poll_at` when work remains).
    pub(crate) last_now: Instant,
    /// The frame being received had its transport checksum left partial or
    /// verified by the device (virtio-net header): not verified again.
    pub(crate) rx_csum_ok: bool,
    /// The frame being received is a TCP GSO super-frame of segments of
    /// this payload size (virtio-net header).
    pub(crate) rx_gso_size: Option<usize>,
    /// The frame being received is a UDP GSO (USO) super-datagram standing
    /// for datagrams of this payload size (virtio-net header).
    pub(crate) rx_udp_gso: Option<usize>,
    /// Coalescing of received TCP segments in [`Stack::receive_burst`]
    /// (`gro.rs`); on by default.
    pub(crate) gro: bool,
    /// Where `receive_burst` gathers the payload of coalesced segments
    /// (reused: no allocation per burst once grown to 64 KB).
    pub(crate) gro_buf: Vec<u8>,
}

/// Count a header that did not parse, as Linux's `/proc/net/snmp` does:
/// every failure is an input error (`InHdrErrors` / `InErrors`), a checksum
/// failure also an `InCsumErrors`.
fn count_parse_error(e: WireError, errors: &mut u64, csum_errors: &mut u64) {
    if e == WireError::Checksum {
        *csum_errors += 1;
    }
    *errors += 1;
}

impl Stack {
    /// Create a stack. A gratuitous ARP is sent on the first `poll`.
    pub fn new(config: Config, now: Instant) -> Stack {
        let secret = config.secret;
        let mut rng = SplitMix::new(config.seed);
        let arp = ArpCache::new(config.limits.arp, KeyedState::new(&secret, 1));
        let mut iface = Iface::new(
            config.mac,
            config.addr,
            config.gateway,
            config.mtu,
            arp,
            ArpCache::new(config.limits.arp, KeyedState::new(&secret, 6)),
            PmtuCache::new(
                config.limits.pmtu_cache,
                config.limits.pmtu_expires,
                KeyedState::new(&secret, 5),
            ),
            rng.next_u64() as u16,
        );
        iface.frag6_key = KeyedState::new(&secret, 0x62);
        let l = &config.limits;
        Stack {
            icmp_bucket: TokenBucket::new(l.icmp_error_rate, l.icmp_error_burst, now),
            icmp6_bucket: TokenBucket::new(l.icmp_error_rate, l.icmp_error_burst, now),
            reasm: Reassembler::new(l.reasm, KeyedState::new(&secret, 2)),
            reasm6: Reassembler::new(l.reasm6, KeyedState::new(&secret, 0x61)),
            reasm6_expired: Vec::new(),
            host6: Default::default(),
            udp: UdpTable::new(
                l.max_udp_sockets,
                l.udp_rcvbuf,
                l.udp_rcv_datagrams,
                secret,
                KeyedState::new(&secret, 3),
            ),
            udp6: UdpTable::new(
                l.max_udp_sockets,
                l.udp_rcvbuf,
                l.udp_rcv_datagrams,
                secret,
                KeyedState::new(&secret, 7),
            ),
            tcp: TcpTable::new(
                config.tcp.clone(),
                secret,
                iface.route_mss(),
                l.max_tcp_sockets,
                l.max_syn_backlog,
                KeyedState::new(&secret, 4),
            ),
            echo: VecDeque::new(),
            scratch: Vec::new(),
            txq: TxQueue::new(l.tx_queue_bytes),
            arp_requests: Vec::new(),
            nd_requests: Vec::new(),
            reasm_expired: Vec::new(),
            transparent: None,
            services: None,
            announce: true,
            started: now,
            last_now: now,
            rx_csum_ok: false,
            rx_gso_size: None,
            rx_udp_gso: None,
            gro: true,
            gro_buf: Vec::new(),
            counters: Counters::default(),
            iface,
            config,
        }
    }

    /// The TTL of the IPv4 packets the stack originates (Linux's
    /// `net.ipv4.ip_default_ttl`; 64 until changed).
    pub fn ip_default_ttl(&self) -> u8 {
        self.iface.ttl
    }

    /// Change the TTL of the IPv4 packets the stack originates from now on
    /// (every protocol; Linux's `net.ipv4.ip_default_ttl`). 0 is refused
    /// (Linux allows 1..=255) and changes nothing.
    pub fn set_ip_default_ttl(&mut self, ttl: u8) -> Result<(), u8> {
        if ttl == 0 {
            return Err(ttl);
        }
        self.iface.ttl = ttl;
        Ok(())
    }

    /// Change the TCP configuration (Linux: the `net.ipv4.tcp_*` sysctls).
    /// New connections and listeners' new children take it; connections
    /// already open keep the one they started with.
    pub fn set_tcp_config(&mut self, tcp: TcpConfig) {
        self.tcp.set_config(tcp.clone());
        self.config.tcp = tcp;
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The MAC currently cached for `ip`, if resolved (diagnostics).
    pub fn neighbour(&self, now: Instant, ip: Ipv4Addr) -> Option<MacAddr> {
        self.iface.arp.peek(now, ip)
    }

    /// Bytes currently held by IPv4 reassembly (diagnostics).
    pub fn reassembly_memory(&self) -> usize {
        self.reasm.mem()
    }

    /// The path MTU to `dst` learned from ICMP "fragmentation needed"
    /// (RFC 1191) and still in force at `now`, if any (diagnostics): what
    /// new TCP connections to `dst` start with instead of the link MTU.
    pub fn path_mtu(&self, now: Instant, dst: Ipv4Addr) -> Option<usize> {
        self.iface.pmtu.get(now, dst)
    }

    /// Datagrams being reassembled (diagnostics).
    pub fn reassembly_datagrams(&self) -> usize {
        self.reasm.len()
    }

    // ------------------------------------------------------------------
    // Receive path
    // ------------------------------------------------------------------

    /// What the link does with frames (see [`LinkOffload`]): a device with
    /// a virtio-net header in front of every frame, able to take partial
    /// checksums and TCP GSO super-frames (IPv4 with `tso4`, IPv6 with
    /// `tso6`). Set it before traffic flows; the default is plain Ethernet
    /// frames, nothing offloaded.
    pub fn set_link_offload(&mut self, offload: LinkOffload) {
        self.iface.offload = offload;
        self.tcp.set_tso(offload.tso());
        self.sync_zero_copy();
    }

    /// Whether the link's local queue drops every datagram handed to it
    /// (Linux: a qdisc answering `NET_XMIT_DROP`, as `pfifo limit 0`
    /// does). TCP then learns that its data did not leave, as Linux's
    /// `tcp_transmit_skb` does: the data stays unsent, and a sender with
    /// nothing in flight probes for the queue every 500 ms
    /// (`TCP_RESOURCE_PROBE_INTERVAL`, counted in `tcpi_probes`) until the
    /// queue takes it or `TCP_USER_TIMEOUT` ends the connection. The
    /// frames of the segments that do go out (ACKs, RSTs) are the link's
    /// to drop. Off by default.
    pub fn set_local_drop(&mut self, on: bool) {
        self.tcp.set_local_drop(on);
    }

    /// The link's offloads (see [`Stack::set_link_offload`]).
    pub fn link_offload(&self) -> LinkOffload {
        self.iface.offload
    }

    /// Handle one received Ethernet frame (behind its virtio-net header if
    /// the link has one); may transmit replies through `tx`. Never panics,
    /// whatever the bytes.
    pub fn receive(&mut self, now: Instant, frame: &[u8], tx: &mut dyn FnMut(&[u8])) {
        self.last_now = self.last_now.max(now);
        self.counters.link.InFrames += 1;
        self.rx_csum_ok = false;
        self.rx_gso_size = None;
        self.rx_udp_gso = None;
        let mut gso_ethertype = None;
        let frame = if self.iface.offload.vnet_hdr {
            // A guest controls this header: every field is checked against
            // the frame (see `VnetRepr::parse`), a bad one drops the frame.
            match VnetRepr::parse(frame) {
                Ok((v, f)) => {
                    // Partial (not computed yet: the data never crossed a
                    // wire) or verified: the transport does not verify.
                    self.rx_csum_ok = v.csum_ok();
                    if !matches!(v.gso, Gso::None) {
                        self.counters.link.InGsoFrames += 1;
                    }
                    match v.gso {
                        Gso::TcpV4 { size, .. } => {
                            self.rx_gso_size = Some(usize::from(size));
                            gso_ethertype = Some(EtherType::Ipv4);
                        }
                        Gso::TcpV6 { size, .. } => {
                            self.rx_gso_size = Some(usize::from(size));
                            gso_ethertype = Some(EtherType::Ipv6);
                        }
                        Gso::UdpL4 { size } => self.rx_udp_gso = Some(usize::from(size)),
                        Gso::None => {}
                    }
                    f
                }
                Err(_) => {
                    self.counters.link.InVnetErrors += 1;
                    return;
                }
            }
        } else {
            frame
        };
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.counters.link.InMalformed += 1;
            return;
        };
        let Ok(repr) = EthernetRepr::parse(&eth) else {
            self.counters.link.InMalformed += 1;
            return;
        };
        // TCP GSO of one IP version on a frame of the other is a bad
        // header (the kernel's `virtio_net_hdr_match_proto`).
        if gso_ethertype.is_some_and(|t| t != repr.ethertype) {
            self.counters.link.InVnetErrors += 1;
            return;
        }
        let link_bcast = repr.dst.is_broadcast();
        // IPv6 multicast (RFC 2464 7: 33:33 and the group's low 32 bits):
        // the groups are filtered by address in `receive_ipv6`.
        let v6_mcast = repr.ethertype == EtherType::Ipv6 && repr.dst.0[..2] == [0x33, 0x33];
        if repr.dst != self.iface.mac && !link_bcast && !v6_mcast {
            self.counters.link.InNotForUs += 1;
            return;
        }
        let payload = eth.payload_ref();
        match repr.ethertype {
            EtherType::Arp => self.receive_arp(now, payload, tx),
            EtherType::Ipv4 => self.receive_ipv4(now, payload, link_bcast, tx),
            // IPv6 has no broadcast (RFC 4291 2).
            EtherType::Ipv6 if link_bcast => self.counters.link.InNotForUs += 1,
            EtherType::Ipv6 => self.receive_ipv6(now, payload, tx),
            _ => self.counters.link.InUnknownEthertype += 1,
        }
    }

    fn receive_arp(&mut self, now: Instant, bytes: &[u8], tx: &mut dyn FnMut(&[u8])) {
        let link = &mut self.counters.link;
        let Ok(pkt) = ArpPacket::new_checked(bytes) else {
            link.ArpInvalid += 1;
            return;
        };
        let Ok(arp) = ArpRepr::parse(&pkt) else {
            link.ArpInvalid += 1;
            return;
        };
        match arp.operation {
            ArpOperation::Request => link.ArpInRequests += 1,
            ArpOperation::Reply => link.ArpInReplies += 1,
            _ => {
                link.ArpInvalid += 1;
                return;
            }
        }
        if self.transparent.is_some() {
            self.transparent_arp(now, &arp, tx);
            return;
        }
        let me = self.iface.addr();
        if !arp.sender_mac.is_unicast() || self.iface.is_martian_source(arp.sender_ip) {
            // Probes (RFC 5227, sender 0.0.0.0) are answered but not learned.
            if !(arp.sender_ip.is_unspecified()
                && arp.operation == ArpOperation::Request
                && arp.target_ip == me
                && arp.sender_mac.is_unicast())
            {
                link.ArpInvalid += 1;
                return;
            }
        } else if arp.sender_ip == me {
            // Someone else claims our address.
            if arp.sender_mac != self.iface.mac {
                link.ArpConflicts += 1;
            }
            return;
        } else {
            // RFC 826: update an existing entry; add one only when the
            // packet targets us ("?Am I the target protocol address? Yes:
            // If Merge_flag is false, add the triplet").
            // Unsolicited replies do not create entries (Linux `arp_accept=0`);
            // a reply to our request finds its incomplete entry and resolves it.
            let for_us = arp.target_ip == me && arp.operation == ArpOperation::Request;
            if let Some(queue) =
                self.iface
                    .arp
                    .learn(now, arp.sender_ip, arp.sender_mac, for_us, link)
            {
                self.iface.flush_queue(queue, arp.sender_mac, link, tx);
            }
        }
        // RFC 826: "If the opcode is ares_op$REQUEST ... swap fields, put the
        // local hardware and protocol addresses in the sender fields, set the
        // opcode to ares_op$REPLY and send the packet to the (new) target
        // hardware address". We answer only for our own address.
        if arp.operation == ArpOperation::Request && arp.target_ip == me {
            self.iface.send_arp(
                ArpOperation::Reply,
                arp.sender_mac,
                arp.sender_mac,
                arp.sender_ip,
                &mut self.counters.link,
                tx,
            );
        }
    }

    fn receive_ipv4(
        &mut self,
        now: Instant,
        bytes: &[u8],
        link_bcast: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let ipc = &mut self.counters.ip;
        ipc.InReceives += 1;
        let Ok(pkt) = Ipv4Packet::new_checked(bytes) else {
            ipc.InHdrErrors += 1;
            return;
        };
        let repr = match Ipv4Repr::parse(&pkt, true) {
            Ok(r) => r,
            Err(e) => {
                count_parse_error(e, &mut ipc.InHdrErrors, &mut ipc.InCsumErrors);
                return;
            }
        };
        let me = self.iface.addr();
        let ip_bcast = self.iface.is_broadcast(repr.dst);
        // DHCP clients send from 0.0.0.0 (`dhcp_server.rs`).
        if self.services.is_some() && self.dhcp4_input(now, &repr, pkt.payload_ref(), ip_bcast, tx)
        {
            return;
        }
        let ipc = &mut self.counters.ip;
        let any_dst = self.transparent.is_some() && crate::transparent::is_unicast(repr.dst);
        if repr.dst != me && !ip_bcast && !any_dst {
            // RFC 1122 3.3.4.2 / 3.2.1.3: not ours and we do not forward.
            ipc.InAddrErrors += 1;
            return;
        }
        if self.iface.is_martian_source(repr.src) || repr.src == me {
            ipc.InAddrErrors += 1;
            return;
        }
        let payload = pkt.payload_ref();
        if repr.more_frags || repr.frag_offset != 0 {
            if ip_bcast {
                // Fragmented broadcasts are not worth the reassembly memory.
                ipc.InDiscards += 1;
                return;
            }
            match self.reasm.insert(now, &repr, payload, ipc) {
                Reasm::Pending => {}
                Reasm::Complete(header, data) => {
                    // Checksum offload covers whole frames, not reassemblies.
                    self.rx_csum_ok = false;
                    self.rx_gso_size = None;
                    self.rx_udp_gso = None;
                    self.deliver(now, &header, &data, false, link_bcast, tx);
                }
            }
            return;
        }
        self.deliver(now, &repr, payload, ip_bcast, link_bcast, tx);
    }

    /// A whole datagram for us: hand it to the transport.
    fn deliver(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        payload: &[u8],
        ip_bcast: bool,
        link_bcast: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        // A GSO type in the virtio-net header that does not match the
        // transport (TCP GSO on UDP, USO on TCP or ICMP) is a bad header,
        // as the kernel's `virtio_net_hdr_to_skb` finds it.
        let gso_mismatch = match ip.protocol {
            IpProtocol::Tcp => self.rx_udp_gso.is_some(),
            IpProtocol::Udp => self.rx_gso_size.is_some(),
            _ => self.rx_gso_size.is_some() || self.rx_udp_gso.is_some(),
        };
        if gso_mismatch {
            self.counters.link.InVnetErrors += 1;
            return;
        }
        match ip.protocol {
            IpProtocol::Icmp => {
                self.counters.ip.InDelivers += 1;
                self.receive_icmp(now, ip, payload, ip_bcast, tx);
            }
            IpProtocol::Udp => {
                self.counters.ip.InDelivers += 1;
                self.receive_udp(now, ip, payload, ip_bcast, link_bcast, tx);
            }
            IpProtocol::Tcp => {
                if ip_bcast {
                    self.counters.ip.InAddrErrors += 1;
                    return;
                }
                self.counters.ip.InDelivers += 1;
                self.receive_tcp(now, ip, payload, tx);
            }
            _ => {
                self.counters.ip.InUnknownProtos += 1;
                // RFC 1122 3.2.2.1: a host SHOULD generate Protocol Unreachable.
                let err = IcmpErr::Unreachable(DstUnreachable::ProtoUnreachable);
                self.send_icmp_error(now, ip, payload, err, ip_bcast || link_bcast, tx);
            }
        }
    }

    fn receive_icmp(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        payload: &[u8],
        ip_bcast: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let c = &mut self.counters.icmp;
        c.InMsgs += 1;
        let Ok(pkt) = Icmpv4Packet::new_checked(payload) else {
            c.InErrors += 1;
            return;
        };
        let repr = match Icmpv4Repr::parse(&pkt, true) {
            Ok(r) => r,
            // Types we do not handle (timestamps, redirects...) are ignored.
            Err(WireError::Unsupported) => return,
            Err(e) => {
                count_parse_error(e, &mut c.InErrors, &mut c.InCsumErrors);
                return;
            }
        };
        match repr {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                c.InEchos += 1;
                if ip_bcast {
                    // Linux default icmp_echo_ignore_broadcasts = 1 (smurf defence).
                    return;
                }
                if self.transparent.is_some() {
                    self.transparent_echo_request(ip, ident, seq_no, data);
                    return;
                }
                // RFC 1122 3.2.2.6: "Every host MUST implement an ICMP Echo
                // server function that receives Echo Requests and sends
                // corresponding Echo Replies." ... "The data received in the
                // ICMP Echo Request MUST be entirely included in the resulting
                // Echo Reply."
                let reply = Icmpv4Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                if self.send_icmp(now, ip.src, &reply, tx).is_ok() {
                    self.counters.icmp.OutEchoReps += 1;
                }
            }
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                c.InEchoReps += 1;
                self.record_echo(EchoReply {
                    from: ip.src.into(),
                    ident,
                    seq: seq_no,
                    len: data.len(),
                    ttl: ip.ttl,
                    at: now,
                });
            }
            Icmpv4Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                header,
                data,
            } => {
                c.InDestUnreachs += 1;
                self.icmp_error_to_transport(now, reason, next_hop_mtu, &header, data);
            }
            Icmpv4Repr::TimeExceeded { .. } => {
                c.InTimeExcds += 1;
            }
        }
    }

    /// Route an ICMP destination-unreachable to the socket it concerns.
    fn icmp_error_to_transport(
        &mut self,
        now: Instant,
        reason: DstUnreachable,
        next_hop_mtu: u16,
        header: &Ipv4Repr,
        data: &[u8],
    ) {
        // The quoted datagram must be one we sent.
        if header.src != self.iface.addr() && self.transparent.is_none() {
            return;
        }
        let (Some(sp), Some(dp)) = (data.get(0..2), data.get(2..4)) else {
            return;
        };
        let local_port = u16::from_be_bytes([sp[0], sp[1]]);
        let remote = SocketAddrV4::new(header.dst, u16::from_be_bytes([dp[0], dp[1]]));
        match header.protocol {
            IpProtocol::Udp => {
                let Some(sock) = self.udp.lookup_connected_mut(local_port, remote) else {
                    return;
                };
                // Linux reports ICMP errors only on connected UDP sockets
                // (without IP_RECVERR), as ECONNREFUSED / EHOSTUNREACH.
                sock.pending_error = match reason {
                    DstUnreachable::PortUnreachable | DstUnreachable::ProtoUnreachable => {
                        Some(UdpError::ConnectionRefused)
                    }
                    DstUnreachable::FragRequired => return,
                    _ => Some(UdpError::NoRoute),
                };
                self.udp.notify_port(local_port);
            }
            IpProtocol::Tcp => {
                // The quoted sequence number (RFC 792 quotes 64 bits of
                // the datagram: the ports and this) is checked against
                // the connection's window; without it, nothing is proven.
                let Some(&[a, b, c, d]) = data.get(4..8) else {
                    return;
                };
                let seq = SeqNum(u32::from_be_bytes([a, b, c, d]));
                let local = SocketAddrV4::new(header.src, local_port);
                self.tcp_icmp_unreachable(now, local, remote, reason, next_hop_mtu, seq);
            }
            _ => {}
        }
    }

    fn receive_udp(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        payload: &[u8],
        ip_bcast: bool,
        link_bcast: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let c = &mut self.counters.udp;
        let Ok(pkt) = UdpPacket::new_checked(payload) else {
            c.InErrors += 1;
            return;
        };
        let repr = match UdpRepr::parse(&pkt, ip.src, ip.dst, !self.rx_csum_ok) {
            Ok(r) => r,
            Err(e) => {
                count_parse_error(e, &mut c.InErrors, &mut c.InCsumErrors);
                return;
            }
        };
        let from = SocketAddrV4::new(ip.src, repr.src_port);
        let data = pkt.payload_ref();
        // A USO super-datagram is delivered as the datagrams it stands for:
        // `size` bytes each, the last one perhaps shorter (as the kernel's
        // `__udp_gso_segment` would have cut it).
        let seg = match self.rx_udp_gso {
            Some(size) if size > 0 && !data.is_empty() => size,
            _ => data.len().max(1),
        };
        // Datagram `i` (an empty payload is one empty datagram).
        let count = data.len().div_ceil(seg).max(1);
        let datagram = |i: usize| -> &[u8] {
            let start = (i * seg).min(data.len());
            data.get(start..(start + seg).min(data.len()))
                .unwrap_or(&[])
        };
        if !ip_bcast {
            let mut taken = false;
            for i in 0..count {
                taken |= self.transparent_udp_input(ip, &repr, datagram(i));
            }
            if taken {
                return;
            }
        }
        let c = &mut self.counters.udp;
        let limits = self.udp.limits();
        match self.udp.lookup_mut(from, repr.dst_port, ip_bcast) {
            Some(sock) => {
                let mut queued = false;
                for i in 0..count {
                    match sock.deliver(from, datagram(i), limits) {
                        Deliver::Queued => {
                            c.InDatagrams += 1;
                            queued = true;
                        }
                        Deliver::QueueFull => {
                            c.RcvbufErrors += 1;
                            c.InErrors += 1;
                        }
                    }
                }
                if queued {
                    self.udp.notify_port(repr.dst_port);
                }
            }
            None => {
                c.NoPorts += 1;
                // RFC 1122 4.1.3.1: "If a datagram arrives addressed to a UDP
                // port for which there is no pending LISTEN call, UDP SHOULD
                // send an ICMP Port Unreachable message."
                let err = IcmpErr::Unreachable(DstUnreachable::PortUnreachable);
                self.send_icmp_error(now, ip, payload, err, ip_bcast || link_bcast, tx);
            }
        }
    }

    // ------------------------------------------------------------------
    // ICMP output
    // ------------------------------------------------------------------

    /// Build `repr` in the scratch buffer and send it to `dst`.
    fn send_icmp(
        &mut self,
        now: Instant,
        dst: Ipv4Addr,
        repr: &Icmpv4Repr,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TxError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(repr.buffer_len(), 0);
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut scratch[..]));
        let out = IpOut {
            dst,
            protocol: IpProtocol::Icmp,
            dont_frag: false,
        };
        let r = self.iface.send_ip(
            now,
            &mut self.counters.ip,
            &mut self.counters.link,
            out,
            &scratch,
            tx,
        );
        self.scratch = scratch;
        match r {
            Ok(()) => self.counters.icmp.OutMsgs += 1,
            Err(_) => self.counters.icmp.OutErrors += 1,
        }
        r
    }

    /// Send an ICMP error about a received datagram, unless RFC 1122 3.2.2
    /// forbids it or the rate limit is exhausted.
    fn send_icmp_error(
        &mut self,
        now: Instant,
        orig: &Ipv4Repr,
        orig_payload: &[u8],
        err: IcmpErr,
        broadcast: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        // RFC 1122 3.2.2: "An ICMP error message MUST NOT be sent as the
        // result of receiving: an ICMP error message, or a datagram destined
        // to an IP broadcast or IP multicast address, or a datagram sent as a
        // link-layer broadcast, or a non-initial fragment, or a datagram whose
        // source address does not define a single host".
        if broadcast
            || orig.dst.is_multicast()
            || self.iface.is_broadcast(orig.dst)
            || orig.frag_offset != 0
            || self.iface.is_martian_source(orig.src)
        {
            return;
        }
        if orig.protocol == IpProtocol::Icmp
            && !matches!(
                orig_payload.first(),
                Some(0 | 8 | 13 | 14 | 15 | 16 | 17 | 18)
            )
        {
            return;
        }
        // RFC 1812 4.3.2.8 / RFC 1122 3.2.2: limit the rate of ICMP errors.
        if !self.icmp_bucket.take(now) {
            self.counters.icmp.OutRateLimited += 1;
            return;
        }
        // RFC 792: "the internet header plus the first 64 bits of the
        // original datagram's data".
        let data = orig_payload.get(..8).unwrap_or(orig_payload);
        let repr = match err {
            IcmpErr::Unreachable(reason) => Icmpv4Repr::DstUnreachable {
                reason,
                next_hop_mtu: 0,
                header: *orig,
                data,
            },
            IcmpErr::FragExpired => Icmpv4Repr::TimeExceeded {
                reason: TimeExceeded::FragExpired,
                header: *orig,
                data,
            },
        };
        if self.send_icmp(now, orig.src, &repr, tx).is_ok() {
            match err {
                IcmpErr::Unreachable(_) => self.counters.icmp.OutDestUnreachs += 1,
                IcmpErr::FragExpired => self.counters.icmp.OutTimeExcds += 1,
            }
        }
    }

    /// Send an ICMP echo request (for `ustack ping`). Replies show up in
    /// [`icmp_echo_replies`](Self::icmp_echo_replies).
    pub fn icmp_echo_send(
        &mut self,
        now: Instant,
        dst: Ipv4Addr,
        ident: u16,
        seq: u16,
        payload: &[u8],
    ) -> Result<(), IcmpError> {
        if dst.is_unspecified() || dst.is_multicast() {
            return Err(IcmpError::InvalidAddress);
        }
        if payload.len() > 65535 - 20 - 8 {
            return Err(IcmpError::TooLarge);
        }
        if !self.txq.has_room(self.frames_bytes(8 + payload.len())) {
            return Err(IcmpError::Exhausted);
        }
        let repr = Icmpv4Repr::EchoRequest {
            ident,
            seq_no: seq,
            data: payload,
        };
        let mut q = std::mem::take(&mut self.txq);
        let r = self.send_icmp(now, dst, &repr, &mut |f| q.push(now, f));
        self.txq = q;
        match r {
            Ok(()) => {
                self.counters.icmp.OutEchos += 1;
                Ok(())
            }
            Err(TxError::NoRoute) => Err(IcmpError::NoRoute),
            Err(TxError::TooLarge) => Err(IcmpError::TooLarge),
        }
    }

    /// Echo replies (ICMP and ICMPv6) received since the last call (drained).
    pub fn icmp_echo_replies(&mut self) -> impl Iterator<Item = EchoReply> + '_ {
        self.echo.drain(..)
    }

    /// Queue an echo reply for `icmp_echo_replies` (bounded: the oldest
    /// is dropped).
    pub(crate) fn record_echo(&mut self, r: EchoReply) {
        if self.echo.len() >= self.config.limits.echo_reply_queue {
            self.echo.pop_front();
        }
        if self.config.limits.echo_reply_queue > 0 {
            self.echo.push_back(r);
        }
    }

    // ------------------------------------------------------------------
    // UDP API
    // ------------------------------------------------------------------

    /// Bind a UDP socket (`port == 0` = ephemeral, 32768–60999).
    pub fn udp_bind(&mut self, local: SocketAddrV4) -> Result<UdpHandle, BindError> {
        if !local.ip().is_unspecified() && *local.ip() != self.iface.addr() {
            return Err(BindError::AddrNotAvailable);
        }
        self.udp.bind(local)
    }

    /// Fix the peer: filters incoming datagrams and enables `udp_send`.
    pub fn udp_connect(&mut self, h: UdpHandle, remote: SocketAddrV4) -> Result<(), UdpError> {
        if remote.port() == 0 || remote.ip().is_unspecified() || remote.ip().is_multicast() {
            return Err(UdpError::InvalidAddress);
        }
        if self.iface.route(*remote.ip()).is_none() {
            self.udp.get(h)?;
            return Err(UdpError::NoRoute);
        }
        let s = self.udp.get_mut(h)?;
        s.remote = Some(remote);
        s.pending_error = None;
        Ok(())
    }

    /// Send one datagram to `remote` (fragmented when larger than the MTU).
    /// The frames go out on the next `poll`.
    pub fn udp_send_to(
        &mut self,
        now: Instant,
        h: UdpHandle,
        data: &[u8],
        remote: SocketAddrV4,
    ) -> Result<usize, UdpError> {
        let local = self.udp.get(h)?.local;
        if remote.port() == 0 || remote.ip().is_unspecified() || remote.ip().is_multicast() {
            return Err(UdpError::InvalidAddress);
        }
        if data.len() > 65535 - 20 - UDP_HEADER_LEN {
            return Err(UdpError::TooLarge);
        }
        if !self
            .txq
            .has_room(self.frames_bytes(UDP_HEADER_LEN + data.len()))
        {
            self.counters.udp.SndbufErrors += 1;
            return Err(UdpError::Exhausted);
        }
        let src = self.iface.addr();
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(UDP_HEADER_LEN + data.len(), 0);
        if let Some(p) = scratch.get_mut(UDP_HEADER_LEN..) {
            p.copy_from_slice(data);
        }
        let repr = UdpRepr {
            src_port: local.port(),
            dst_port: remote.port(),
        };
        repr.emit(
            &mut UdpPacket::new_unchecked(&mut scratch[..]),
            src,
            *remote.ip(),
            data.len(),
            true,
        );
        let out = IpOut {
            dst: *remote.ip(),
            protocol: IpProtocol::Udp,
            dont_frag: false,
        };
        let q = &mut self.txq;
        let r = self.iface.send_ip(
            now,
            &mut self.counters.ip,
            &mut self.counters.link,
            out,
            &scratch,
            &mut |f| q.push(now, f),
        );
        self.scratch = scratch;
        match r {
            Ok(()) => {
                self.counters.udp.OutDatagrams += 1;
                Ok(data.len())
            }
            Err(TxError::NoRoute) => Err(UdpError::NoRoute),
            Err(TxError::TooLarge) => Err(UdpError::TooLarge),
        }
    }

    /// Send on a connected socket. A pending ICMP error is reported first
    /// (once), as Linux does.
    pub fn udp_send(&mut self, now: Instant, h: UdpHandle, data: &[u8]) -> Result<usize, UdpError> {
        let s = self.udp.get_mut(h)?;
        let remote = s.remote.ok_or(UdpError::NotConnected)?;
        if let Some(e) = s.pending_error.take() {
            return Err(e);
        }
        self.udp_send_to(now, h, data, remote)
    }

    /// Receive one datagram (truncated to `buf`). `WouldBlock` when empty.
    pub fn udp_recv_from(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddrV4), UdpError> {
        self.udp.get_mut(h)?.recv(buf)
    }

    pub fn udp_status(&self, h: UdpHandle) -> Result<UdpStatus, UdpError> {
        Ok(self.udp.get(h)?.status())
    }

    /// Every open UDP socket (for `ss -u`).
    pub fn udp_sockets(&self) -> Vec<UdpStatus> {
        self.udp.statuses()
    }

    /// Every open UDP socket of both families (for `ss -u`).
    pub fn udp_sockets_addr(&self) -> Vec<UdpStatus<std::net::SocketAddr>> {
        let v4 = self.udp.statuses().into_iter().map(|u| UdpStatus {
            local: u.local.into(),
            remote: u.remote.map(Into::into),
            can_recv: u.can_recv,
            pending_error: u.pending_error,
            recv_queue: u.recv_queue,
            recv_datagrams: u.recv_datagrams,
        });
        let v6 = self.udp6.statuses().into_iter().map(|u| UdpStatus {
            local: u.local.into(),
            remote: u.remote.map(Into::into),
            can_recv: u.can_recv,
            pending_error: u.pending_error,
            recv_queue: u.recv_queue,
            recv_datagrams: u.recv_datagrams,
        });
        v4.chain(v6).collect()
    }

    /// Number of open UDP sockets (diagnostics).
    pub fn udp_socket_count(&self) -> usize {
        self.udp.len()
    }

    /// Close the socket; the handle becomes invalid. Stale handles are ignored.
    pub fn udp_close(&mut self, h: UdpHandle) {
        // Either family's (a handle names a socket of one table only).
        self.udp.close(h);
        self.udp6.close(h);
    }

    /// Frame bytes (with Ethernet and IP headers) an IP payload of `len` needs.
    pub(crate) fn frames_bytes(&self, len: usize) -> usize {
        let per = self.iface.mtu.saturating_sub(20).max(8);
        let n = len.div_ceil(per).max(1);
        len + n * 34
    }

    // ------------------------------------------------------------------
    // Timers
    // ------------------------------------------------------------------

    /// Do everything due at `now` (timers, queued data, ARP) and transmit
    /// through `tx`. Bounded work per call; call again if `poll_at() <= now`.
    pub fn poll(&mut self, now: Instant, tx: &mut dyn FnMut(&[u8])) {
        self.last_now = self.last_now.max(now);
        if self.announce {
            self.announce = false;
            // RFC 5227 2.3 / RFC 826: announce our address (gratuitous ARP
            // request: sender and target protocol address both ours).
            let me = self.iface.addr();
            self.iface.send_arp(
                ArpOperation::Request,
                MacAddr::BROADCAST,
                MacAddr::UNSPECIFIED,
                me,
                &mut self.counters.link,
                tx,
            );
            self.counters.link.ArpOutRequests += 1;
        }
        // Frames produced by socket calls since the last poll.
        let iface = &mut self.iface;
        self.txq.flush(&mut |f| iface.emit_copy(f, tx));
        // Neighbour cache: retries, give-ups, re-validation.
        let mut reqs = std::mem::take(&mut self.arp_requests);
        self.iface.arp.poll(now, &mut self.counters.link, &mut reqs);
        for req in reqs.drain(..) {
            let (eth_dst, target_mac) = match req.unicast {
                Some(mac) => (mac, mac),
                None => (MacAddr::BROADCAST, MacAddr::UNSPECIFIED),
            };
            self.iface.send_arp(
                ArpOperation::Request,
                eth_dst,
                target_mac,
                req.target,
                &mut self.counters.link,
                tx,
            );
        }
        self.arp_requests = reqs;
        // IPv6 neighbours: the same retries, give-ups and re-validation,
        // with Neighbor Solicitations (RFC 4861 7.3.3).
        let mut reqs = std::mem::take(&mut self.nd_requests);
        self.iface.nd.poll(now, &mut self.counters.nd, &mut reqs);
        for req in reqs.drain(..) {
            self.iface
                .send_ns(req, &mut self.counters.icmp6, &mut self.counters.link, tx);
        }
        self.nd_requests = reqs;
        // Reassembly timeouts.
        let mut expired = std::mem::take(&mut self.reasm_expired);
        self.reasm.poll(now, &mut self.counters.ip, &mut expired);
        for e in expired.drain(..) {
            let d = e.data.get(..e.data_len).unwrap_or(&e.data[..]);
            self.send_icmp_error(now, &e.header, d, IcmpErr::FragExpired, false, tx);
        }
        self.reasm_expired = expired;
        self.poll_reasm6(now, tx);
        self.poll_host6(now, tx);
        self.transparent_poll(now);
        self.services_poll(now, tx);
        self.poll_tcp(now, tx);
    }

    /// When `poll` must next be called; `None` = only when something happens.
    pub fn poll_at(&self) -> Option<Instant> {
        let announce = self.announce.then_some(self.started);
        [
            announce,
            self.txq.since(),
            self.iface.arp.poll_at(),
            self.iface.nd.poll_at(),
            self.reasm.poll_at(),
            self.reasm6_poll_at(),
            self.host6_poll_at(),
            self.tcp_poll_at(),
            self.transparent_poll_at(),
            self.services_poll_at(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// Frames produced outside `poll` (socket calls have no `tx`), kept in pooled
/// buffers so steady-state sending does not allocate.
#[derive(Default, Clone)]
pub(crate) struct TxQueue {
    frames: VecDeque<Vec<u8>>,
    pool: Vec<Vec<u8>>,
    bytes: usize,
    limit: usize,
    since: Option<Instant>,
}

impl TxQueue {
    fn new(limit: usize) -> Self {
        TxQueue {
            limit,
            ..TxQueue::default()
        }
    }

    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        self.bytes + bytes <= self.limit
    }

    pub(crate) fn push(&mut self, now: Instant, frame: &[u8]) {
        let mut b = self.pool.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        self.bytes += b.len();
        self.frames.push_back(b);
        self.since.get_or_insert(now);
    }

    fn flush(&mut self, tx: &mut dyn FnMut(&[u8])) {
        while let Some(f) = self.frames.pop_front() {
            tx(&f);
            self.bytes -= f.len();
            if self.pool.len() < 64 {
                self.pool.push(f);
            }
        }
        self.since = None;
    }

    fn since(&self) -> Option<Instant> {
        self.since
    }
}
