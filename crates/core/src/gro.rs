//! Receive coalescing (software GRO): runs of consecutive in-order TCP
//! segments of one flow in a burst of received frames become one segment
//! before TCP input, with the rules of Linux's `inet_gro_receive` and
//! `tcp_gro_receive`.
//!
//! A burst is what a runtime read from its device in one go. Each frame is
//! classified:
//!
//! * a *candidate*: a TCP segment for us that the per-frame path would
//!   hand to TCP input as it is — virtio-net header (if the link has one)
//!   without GSO, Ethernet to our MAC, IPv4 without options or
//!   fragmentation and with its header checksum good, or IPv6 with TCP
//!   right after the fixed header (no extension headers) outside
//!   transparent mode, a destination we accept and a source we accept, TCP
//!   header and options well formed, TCP checksum verified (or vouched for
//!   by the virtio-net header), flags ACK with at most PSH besides, and
//!   some payload;
//! * a checksum failure (IPv4 header or TCP): the per-frame path only
//!   counts and drops it, so it is delivered alone without ending the run
//!   being gathered, as Linux delivers it without flushing its GRO list;
//! * anything else: the run being gathered is delivered first, then the
//!   frame alone, so delivery keeps the order of the burst.
//!
//! A candidate joins the run when it continues it: same MAC header, same
//! addresses and ports, same TOS, TTL and DF, IP ID one more than the
//! previous (or, with DF, the same throughout: Linux decides which at the
//! second segment) — over IPv6 the same traffic class, flow label and hop
//! limit (Linux `ipv6_gro_receive`) —, sequence number where the run ends, the same
//! acknowledgment number and window, the same TCP option bytes (so the
//! same timestamps), a payload no larger than the first segment's
//! (`gso_size`), and the whole still within a 65,535-byte IPv4 datagram
//! (IPv6: payload length). A segment shorter than `gso_size`,
//! or with PSH, ends the run after joining it. A candidate that does not
//! join starts a new run (one with PSH is delivered at once).
//!
//! The merged segment is processed as Linux processes a GRO'd skb: once,
//! with the size of its wire segments (see `Connection::process_gso`) so
//! that delayed ACKs count it as the segments it stands for. Counters
//! count wire frames as the per-frame path would (link `InFrames`, IP
//! `InReceives` and `InDelivers`, TCP `InSegs`), plus link `InGroPackets`
//! (segments built from two or more) and `InGroWirePackets` (the frames
//! that went into them). Per-connection counters (`TcpExt`) count what
//! the connection processed: a super-segment once, as Linux does.
//!
//! Where this differs from Linux:
//!
//! * Linux keeps up to 8 flows open at once and delivers each when its run
//!   ends, which reorders segments of different flows; here one run is
//!   open and anything that does not join it ends it, so delivery keeps
//!   the burst's order exactly.
//! * Linux lets a segment with FIN join as the last of a run, and merges
//!   segments that all carry ECE (or URG); here those are delivered alone.
//! * Linux's `InSegs` counts a GRO'd skb once (its `tcpi_segs_in` counts
//!   the wire segments); here `InSegs` counts wire segments, so that it
//!   does not depend on whether GRO is on.
//! * The window update takes the last wire segment's sequence number as
//!   SEG.SEQ (as one-by-one processing would leave SND.WL1), where Linux
//!   takes the skb's first.
//! * Linux refuses frames with Ethernet padding after the IP datagram;
//!   here the IP total length decides, as on the per-frame path.

use std::net::{Ipv4Addr, Ipv6Addr};

use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN, IPV4_MAX_PACKET_LEN};
use ustack_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use ustack_wire::tcp::{flags, SeqNum, TcpPacket, TcpRepr, TCP_HEADER_LEN};
use ustack_wire::virtio_net::{Gso, VnetRepr};
use ustack_wire::Error as WireError;

use crate::stack::Stack;
use crate::time::Instant;

/// TCP flags that keep a segment out of any run.
const NEVER: u8 = flags::SYN | flags::FIN | flags::RST | flags::URG | flags::ECE | flags::CWR;

/// A frame that may join a run: the per-frame path would hand `seg` to TCP
/// input unchanged.
#[derive(Clone, Copy)]
struct Candidate<'a> {
    /// The Ethernet source (Linux compares the whole MAC header).
    src_mac: MacAddr,
    ip: Ip,
    seg: TcpRepr<'a>,
    /// The raw option bytes (compared byte for byte, as Linux does).
    opts: &'a [u8],
    /// Byte 12 of the TCP header: data offset and reserved bits.
    off_byte: u8,
}

/// A candidate's IP header.
#[derive(Clone, Copy)]
enum Ip {
    V4(Ipv4Repr),
    V6(Ipv6Repr),
}

impl Ip {
    /// The IPv4 ID (0 over IPv6, which has none).
    fn ident(&self) -> u16 {
        match self {
            Ip::V4(ip) => ip.ident,
            Ip::V6(_) => 0,
        }
    }
}

enum Class<'a> {
    Candidate(Candidate<'a>),
    /// A checksum failure: the per-frame path counts and drops it.
    BadChecksum,
    /// Anything else: delivered by the per-frame path, in order.
    Other,
}

/// How the IP IDs of a run go on (decided at its second segment).
#[derive(Clone, Copy, PartialEq, Eq)]
enum IdMode {
    Undecided,
    Incrementing,
    /// The same ID throughout (only with DF: an atomic datagram's ID means
    /// nothing, RFC 6864).
    Fixed,
}

/// The run being gathered.
struct Run<'a> {
    head: Candidate<'a>,
    /// Wire segments in the run.
    count: usize,
    /// The first segment's payload size: every other but the last has it.
    gso_size: usize,
    /// Payload bytes so far (from the second segment on, gathered in the
    /// stack's `gro_buf`).
    len: usize,
    next_seq: SeqNum,
    last_ident: u16,
    id_mode: IdMode,
    psh: bool,
    /// Nothing may join any more (PSH, or a short segment).
    closed: bool,
}

impl<'a> Run<'a> {
    fn new(c: Candidate<'a>) -> Run<'a> {
        let n = c.seg.payload.len();
        Run {
            head: c,
            count: 1,
            gso_size: n,
            len: n,
            next_seq: c.seg.seq + n,
            last_ident: c.ip.ident(),
            id_mode: IdMode::Undecided,
            psh: c.seg.psh,
            closed: c.seg.psh,
        }
    }

    /// Add `c` if it continues the run (Linux `tcp_gro_receive` and
    /// `inet_gro_receive`); `buf` gathers the payload.
    fn join(&mut self, c: &Candidate<'a>, buf: &mut Vec<u8>) -> bool {
        let hs = &self.head.seg;
        let seg = &c.seg;
        let same_ip = match (&self.head.ip, &c.ip) {
            (Ip::V4(h), Ip::V4(ip)) => {
                ip.src == h.src
                    && ip.dst == h.dst
                    && ip.dscp_ecn == h.dscp_ecn
                    && ip.ttl == h.ttl
                    && ip.dont_frag == h.dont_frag
            }
            (Ip::V6(h), Ip::V6(ip)) => {
                ip.src == h.src
                    && ip.dst == h.dst
                    && ip.traffic_class == h.traffic_class
                    && ip.flow_label == h.flow_label
                    && ip.hop_limit == h.hop_limit
            }
            _ => false,
        };
        if self.closed
            || !same_ip
            || c.src_mac != self.head.src_mac
            || seg.src_port != hs.src_port
            || seg.dst_port != hs.dst_port
            || seg.seq != self.next_seq
            || seg.ack != hs.ack
            || seg.window != hs.window
            || c.off_byte != self.head.off_byte
            || c.opts != self.head.opts
        {
            return false;
        }
        let n = seg.payload.len();
        if n > self.gso_size {
            return false;
        }
        // The most an IPv4 datagram holds; IPv6's payload length has the
        // same bound without the fixed header.
        let ip_hdr = match c.ip {
            Ip::V4(_) => IPV4_HEADER_LEN,
            Ip::V6(_) => 0,
        };
        let hdr = ip_hdr + TCP_HEADER_LEN + self.head.opts.len();
        if hdr + self.len + n > IPV4_MAX_PACKET_LEN {
            return false;
        }
        let mode = match (&self.head.ip, &c.ip) {
            (Ip::V4(h), Ip::V4(ip)) => {
                let next_id = self.last_ident.wrapping_add(1);
                match self.id_mode {
                    IdMode::Undecided if ip.ident == next_id => IdMode::Incrementing,
                    IdMode::Undecided if ip.ident == self.last_ident && h.dont_frag => {
                        IdMode::Fixed
                    }
                    IdMode::Incrementing if ip.ident == next_id => IdMode::Incrementing,
                    IdMode::Fixed if ip.ident == self.last_ident => IdMode::Fixed,
                    _ => return false,
                }
            }
            // No IDs over IPv6 (the fixed header has none).
            _ => IdMode::Fixed,
        };
        if self.count == 1 {
            buf.clear();
            buf.extend_from_slice(hs.payload);
        }
        buf.extend_from_slice(seg.payload);
        self.id_mode = mode;
        self.count += 1;
        self.len += n;
        self.next_seq += n;
        self.last_ident = c.ip.ident();
        self.psh |= seg.psh;
        // Linux: "Force a flush if last segment is smaller than mss", and
        // PSH flushes.
        self.closed = seg.psh || n < self.gso_size;
        true
    }
}

impl Stack {
    /// Coalesce TCP segments in [`Stack::receive_burst`] (on by default,
    /// as Linux's GRO is) or hand every frame to TCP as it came.
    pub fn set_gro(&mut self, on: bool) {
        self.gro = on;
    }

    /// Whether [`Stack::receive_burst`] coalesces (see [`Stack::set_gro`]).
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// Handle a burst of received frames (what one read of the device
    /// gave), in order, as [`Stack::receive`] would one by one — except
    /// that, unless [`Stack::set_gro`] turned it off, runs of consecutive
    /// in-order TCP segments of one flow are coalesced into one segment
    /// before TCP input, as Linux's GRO does (the rules are in `gro.rs`).
    /// The connection then sees fewer, larger segments: the same bytes,
    /// the same final state, fewer ACKs (one per coalesced segment of two
    /// or more full-sized ones, as for a GRO'd skb). Counters count wire
    /// frames as `receive` would, plus link `InGroPackets` (segments built)
    /// and `InGroWirePackets` (frames that went into them). May transmit
    /// through `tx`. Never panics, whatever the bytes.
    pub fn receive_burst<'a, I>(&mut self, now: Instant, frames: I, tx: &mut dyn FnMut(&[u8]))
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        if !self.gro {
            for f in frames {
                self.receive(now, f, tx);
            }
            return;
        }
        let mut buf = std::mem::take(&mut self.gro_buf);
        let mut run: Option<Run<'a>> = None;
        for f in frames {
            match self.gro_classify(f) {
                Class::Candidate(c) => {
                    if let Some(r) = run.as_mut() {
                        if r.join(&c, &mut buf) {
                            if r.closed {
                                self.gro_deliver(now, run.take(), &buf, tx);
                            }
                            continue;
                        }
                    }
                    self.gro_deliver(now, run.take(), &buf, tx);
                    let r = Run::new(c);
                    if r.closed {
                        self.gro_deliver(now, Some(r), &buf, tx);
                    } else {
                        run = Some(r);
                    }
                }
                Class::BadChecksum => self.receive(now, f, tx),
                Class::Other => {
                    self.gro_deliver(now, run.take(), &buf, tx);
                    self.receive(now, f, tx);
                }
            }
        }
        self.gro_deliver(now, run.take(), &buf, tx);
        self.gro_buf = buf;
    }

    /// What `receive` would do with `frame`, as far as coalescing cares.
    /// Every check here mirrors one of the per-frame path (`receive`,
    /// `receive_ipv4`, `deliver`, `receive_tcp`), so that a candidate is
    /// exactly a frame that path hands to TCP input.
    fn gro_classify<'a>(&self, frame: &'a [u8]) -> Class<'a> {
        let (frame, csum_ok) = if self.iface.offload.vnet_hdr {
            match VnetRepr::parse(frame) {
                Ok((v, f)) if matches!(v.gso, Gso::None) => (f, v.csum_ok()),
                _ => return Class::Other,
            }
        } else {
            (frame, false)
        };
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return Class::Other;
        };
        let Ok(er) = EthernetRepr::parse(&eth) else {
            return Class::Other;
        };
        if er.dst != self.iface.mac {
            return Class::Other;
        }
        if er.ethertype == EtherType::Ipv6 {
            return self.gro_classify6(er.src, eth.payload_ref(), csum_ok);
        }
        if er.ethertype != EtherType::Ipv4 {
            return Class::Other;
        }
        let Ok(pkt) = Ipv4Packet::new_checked(eth.payload_ref()) else {
            return Class::Other;
        };
        let ip = match Ipv4Repr::parse(&pkt, true) {
            Ok(r) => r,
            Err(WireError::Checksum) => return Class::BadChecksum,
            Err(_) => return Class::Other,
        };
        if pkt.header_len() != IPV4_HEADER_LEN
            || ip.protocol != IpProtocol::Tcp
            || ip.more_frags
            || ip.frag_offset != 0
            || pkt.reserved_flag()
            || !self.gro_accepts_addresses(ip.src, ip.dst)
        {
            return Class::Other;
        }
        let bytes = pkt.payload_ref();
        let Some((tcp, hl)) = gro_tcp_header(bytes) else {
            return Class::Other;
        };
        let seg = match TcpRepr::parse(&tcp, ip.src, ip.dst, !csum_ok) {
            Ok(s) => s,
            Err(WireError::Checksum) => return Class::BadChecksum,
            Err(_) => return Class::Other,
        };
        Class::Candidate(Candidate {
            src_mac: er.src,
            ip: Ip::V4(ip),
            seg,
            opts: bytes.get(TCP_HEADER_LEN..hl).unwrap_or(&[]),
            off_byte: bytes.get(12).copied().unwrap_or(0),
        })
    }

    /// [`Stack::gro_classify`] for an IPv6 datagram: a candidate only with
    /// TCP right after the fixed header, mirroring `input_ipv6`'s checks
    /// (a unicast destination of ours; a source that is not multicast,
    /// loopback or ours) and `receive_tcp6`'s parse. Transparent mode
    /// takes IPv6 TCP its own way: not coalesced.
    fn gro_classify6<'a>(&self, src_mac: MacAddr, bytes: &'a [u8], csum_ok: bool) -> Class<'a> {
        let Ok(pkt) = Ipv6Packet::new_checked(bytes) else {
            return Class::Other;
        };
        let Ok(ip) = Ipv6Repr::parse(&pkt) else {
            return Class::Other;
        };
        if ip.next_header != IpProtocol::Tcp
            || self.transparent.is_some()
            || !self.gro_accepts_addresses6(ip.src, ip.dst)
        {
            return Class::Other;
        }
        let bytes = pkt.payload_ref();
        let Some((tcp, hl)) = gro_tcp_header(bytes) else {
            return Class::Other;
        };
        let seg = match TcpRepr::parse(&tcp, ip.src, ip.dst, !csum_ok) {
            Ok(s) => s,
            Err(WireError::Checksum) => return Class::BadChecksum,
            Err(_) => return Class::Other,
        };
        Class::Candidate(Candidate {
            src_mac,
            ip: Ip::V6(ip),
            seg,
            opts: bytes.get(TCP_HEADER_LEN..hl).unwrap_or(&[]),
            off_byte: bytes.get(12).copied().unwrap_or(0),
        })
    }

    /// `input_ipv6`'s address checks for a TCP segment it hands on.
    fn gro_accepts_addresses6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        !dst.is_multicast()
            && self.iface.has_addr6(dst)
            && !src.is_multicast()
            && !src.is_loopback()
            && !self.iface.has_addr6(src)
    }

    /// `receive_ipv4`'s address checks for a unicast TCP segment that
    /// reaches `deliver`: a destination of ours (any unicast one in
    /// transparent mode) that is not a broadcast, a source that names a
    /// single host other than us.
    fn gro_accepts_addresses(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let me = self.iface.addr();
        let any_dst = self.transparent.is_some() && crate::transparent::is_unicast(dst);
        (dst == me || any_dst)
            && !self.iface.is_broadcast(dst)
            && !self.iface.is_martian_source(src)
            && src != me
    }

    /// Hand a run to TCP input: a single segment as it came, several as one
    /// whose payload `buf` gathered.
    fn gro_deliver(
        &mut self,
        now: Instant,
        run: Option<Run<'_>>,
        buf: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let Some(r) = run else {
            return;
        };
        let k = r.count as u64;
        self.last_now = self.last_now.max(now);
        // Per wire frame, what the per-frame path counts on the way.
        self.counters.link.InFrames += k;
        match r.head.ip {
            Ip::V4(_) => {
                self.counters.ip.InReceives += k;
                self.counters.ip.InDelivers += k;
            }
            Ip::V6(_) => {
                self.counters.ip6.InReceives += k;
                self.counters.ip6.InDelivers += k;
            }
        }
        self.counters.tcp.InSegs += k;
        self.rx_csum_ok = false;
        self.rx_gso_size = None;
        let mut seg = r.head.seg;
        if r.count > 1 {
            self.counters.link.InGroPackets += 1;
            self.counters.link.InGroWirePackets += k;
            seg.payload = buf.get(..r.len).unwrap_or(buf);
            seg.psh = r.psh;
        }
        let payload_len = TCP_HEADER_LEN + r.head.opts.len() + seg.payload.len();
        match r.head.ip {
            Ip::V4(mut ip) => {
                if r.count > 1 {
                    ip.payload_len = payload_len;
                }
                self.tcp_segment_input(now, &ip, &seg, r.gso_size, tx);
            }
            Ip::V6(mut ip) => {
                if r.count > 1 {
                    ip.payload_len = payload_len;
                }
                self.tcp_segment_input6(now, &ip, &seg, r.gso_size, tx);
            }
        }
    }
}

/// The TCP header of a would-be candidate and its length: well formed,
/// flags ACK with at most PSH besides, and some payload. Checked before
/// the checksum: pure ACKs (the other direction of a bulk transfer) are
/// summed once, by the per-frame path.
fn gro_tcp_header(bytes: &[u8]) -> Option<(TcpPacket<&[u8]>, usize)> {
    let tcp = TcpPacket::new_checked(bytes).ok()?;
    let fl = tcp.flags();
    let hl = tcp.header_len();
    if fl & NEVER != 0 || fl & flags::ACK == 0 || bytes.len() <= hl {
        return None;
    }
    Some((tcp, hl))
}
