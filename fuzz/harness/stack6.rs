//! `stack_receive`'s IPv6 half: the peer's IPv6 frames (TCP on tracked
//! flows, UDP, ICMPv6 echo and errors, Neighbor Discovery with options,
//! router solicitations and advertisements, MLD queries, extension header
//! chains, fragments and whole fragmented datagrams), the application's
//! IPv6 calls, and the checks on what the stack emits over IPv6.
//!
//! A child module of `stack`, so it reaches the harness's private state.

use std::net::{Ipv6Addr, SocketAddrV6};

use ustack_wire::ethernet::{EtherType, MacAddr};
use ustack_wire::icmpv6::Icmpv6Packet;
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{solicited_node, Ipv6Packet, Ipv6Repr};
use ustack_wire::tcp::{TcpPacket, TcpRepr};
use ustack_wire::udp::{UdpPacket, UdpRepr};

use super::{
    ethernet, payload, tcp_bytes, udp_bytes, Emitted, Harness, Input, MAX_FRAME, MAX_HANDLES,
};
use super::{MAX_APP_SEND, OUR_MAC, PEER_MAC};

/// Our static IPv6 address (the link-local one is derived from `OUR_MAC`).
pub const OUR_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
/// The peer's global IPv6 address.
pub const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
/// The IPv6 listener's port: not `LISTEN_PORT`, where a dual-stack listener
/// would collide with the IPv4 one.
pub const LISTEN6_PORT: u16 = 8086;
/// The IPv6 UDP socket's port.
pub const UDP6_PORT: u16 = 5353;
/// The peer's port of the IPv6 connection the setup opens.
pub const PASSIVE6_PEER_PORT: u16 = 40006;

const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
const NEXT_UDP: u8 = 17;
const NEXT_TCP: u8 = 6;
const NEXT_ICMPV6: u8 = 58;
const NEXT_HBH: u8 = 0;
const NEXT_ROUTING: u8 = 43;
const NEXT_FRAGMENT: u8 = 44;
const NEXT_NONE: u8 = 59;
const NEXT_DSTOPTS: u8 = 60;

pub fn our_ll() -> Ipv6Addr {
    ustack_core::link_local(OUR_MAC).address
}

pub fn peer_ll() -> Ipv6Addr {
    ustack_core::link_local(PEER_MAC).address
}

/// One of our addresses: the static one, or one with our interface
/// identifier (link-local, or made by SLAAC from an advertised prefix).
fn is_ours6(a: Ipv6Addr) -> bool {
    a == OUR_IP6 || a.octets()[8..] == our_ll().octets()[8..]
}

/// The Ethernet address an IPv6 destination maps to (RFC 2464 7).
fn mac_for(dst: Ipv6Addr) -> MacAddr {
    if dst.is_multicast() {
        let o = dst.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    } else {
        OUR_MAC
    }
}

/// An IPv6 header (no extension headers of its own) and `payload`.
pub fn ip6_packet(src: Ipv6Addr, dst: Ipv6Addr, next: u8, hop: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(40 + payload.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&(payload.len().min(usize::from(u16::MAX)) as u16).to_be_bytes());
    p.extend_from_slice(&[next, hop]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

/// ICMPv6 message bytes `[type, code, checksum, body]` with the checksum
/// filled for `src` → `dst`.
fn icmp6(ty: u8, code: u8, body: &[u8], src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![ty, code, 0, 0];
    b.extend_from_slice(body);
    if b.len() < 8 {
        b.resize(8, 0);
    }
    Icmpv6Packet::new_unchecked(&mut b[..]).fill_checksum(&src, &dst);
    b
}

/// A source address for the peer's IPv6 frames: mostly the peer.
fn src_ip6(inp: &mut Input) -> Ipv6Addr {
    match inp.u8() % 8 {
        0..=3 => PEER_IP6,
        4 => peer_ll(),
        5 => Ipv6Addr::UNSPECIFIED,
        6 => Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, inp.u16()),
        _ => [
            ALL_NODES,
            Ipv6Addr::LOCALHOST,
            OUR_IP6,
            our_ll(),
            Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, inp.u16()),
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001),
            Ipv6Addr::from(u128::from(inp.u32()) << 96 | u128::from(inp.u32())),
        ][usize::from(inp.u8() % 8)],
    }
}

/// A destination for the peer's IPv6 frames: mostly one of ours.
fn dst_ip6(inp: &mut Input) -> Ipv6Addr {
    match inp.u8() % 8 {
        0..=2 => OUR_IP6,
        3 => our_ll(),
        4 => ALL_NODES,
        5 => solicited_node(OUR_IP6),
        6 => ALL_ROUTERS,
        _ => Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, inp.u16()),
    }
}

fn hop_limit(inp: &mut Input) -> u8 {
    match inp.u8() % 8 {
        0..=5 => 255,
        6 => 1,
        _ => inp.u8(),
    }
}

/// Neighbor Discovery options: well formed (link-layer addresses, prefix
/// information, MTU, RDNSS) or raw (zero length included).
fn nd_options(inp: &mut Input) -> Vec<u8> {
    let mut o = Vec::new();
    for _ in 0..inp.u8() % 4 {
        match inp.u8() % 8 {
            0 | 1 => {
                let ty = 1 + inp.u8() % 2;
                let mac = if inp.u8().is_multiple_of(4) {
                    [inp.u8(), inp.u8(), inp.u8(), inp.u8(), inp.u8(), inp.u8()]
                } else {
                    PEER_MAC.0
                };
                o.extend_from_slice(&[ty, 1]);
                o.extend_from_slice(&mac);
            }
            2 | 3 => {
                let plen = match inp.u8() % 4 {
                    0..=2 => 64,
                    _ => inp.u8(),
                };
                let fl = inp.u8() & 0xe0;
                let (valid, pref) = match inp.u8() % 4 {
                    0 | 1 => (86_400u32, 14_400u32),
                    2 => (u32::MAX, u32::MAX),
                    _ => (inp.u32(), inp.u32()),
                };
                let prefix = match inp.u8() % 4 {
                    0 | 1 => Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0),
                    2 => Ipv6Addr::new(0xfd00, 0, 0, inp.u16(), 0, 0, 0, 0),
                    _ => Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
                };
                o.extend_from_slice(&[3, 4, plen, fl]);
                o.extend_from_slice(&valid.to_be_bytes());
                o.extend_from_slice(&pref.to_be_bytes());
                o.extend_from_slice(&[0; 4]);
                o.extend_from_slice(&prefix.octets());
            }
            4 => {
                let mtu = match inp.u8() % 4 {
                    0 => 1280,
                    1 => 1500,
                    2 => 1279,
                    _ => inp.u32(),
                };
                o.extend_from_slice(&[5, 1, 0, 0]);
                o.extend_from_slice(&mtu.to_be_bytes());
            }
            5 => {
                let n = 1 + inp.u8() % 3;
                o.extend_from_slice(&[25, 1 + 2 * n, 0, 0]);
                o.extend_from_slice(&inp.u32().to_be_bytes());
                for i in 0..n {
                    o.extend_from_slice(
                        &Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3 + u16::from(i)).octets(),
                    );
                }
            }
            _ => {
                let ty = inp.u8();
                let len = inp.u8() % 4;
                o.extend_from_slice(&[ty, len]);
                let n = (usize::from(len) * 8).saturating_sub(2);
                o.extend_from_slice(&payload(inp, n, true));
            }
        }
    }
    o
}

/// Hop-by-hop or destination options: Pad1, PadN, Router Alert, Jumbo
/// Payload, or an unknown option whose type chooses RFC 8200's action;
/// padded to a multiple of 8 (with the 2 bytes of header).
fn ext_options(inp: &mut Input) -> Vec<u8> {
    let mut o = Vec::new();
    for _ in 0..inp.u8() % 4 {
        match inp.u8() % 6 {
            0 => o.push(0),
            1 => {
                let n = inp.u8() % 8;
                o.extend_from_slice(&[1, n]);
                o.extend(std::iter::repeat_n(0, usize::from(n)));
            }
            2 => o.extend_from_slice(&[5, 2, 0, 0]),
            3 => {
                o.extend_from_slice(&[0xc2, 4]);
                o.extend_from_slice(&inp.u32().to_be_bytes());
            }
            _ => {
                let ty = (inp.u8() & 0xc0) | 0x1e;
                let n = inp.u8() % 8;
                o.extend_from_slice(&[ty, n]);
                o.extend_from_slice(&payload(inp, usize::from(n), true));
            }
        }
    }
    let pad = (8 - (o.len() + 2) % 8) % 8;
    match pad {
        0 => {}
        1 => o.push(0),
        n => {
            o.extend_from_slice(&[1, (n - 2) as u8]);
            o.extend(std::iter::repeat_n(0, n - 2));
        }
    }
    o
}

impl Harness {
    /// The IPv6 part of the scripted setup: host mode, the static address, a listener
    /// and a UDP socket, the peer's Neighbor Solicitation (which teaches our
    /// cache its MAC) and one connection with every TCP option.
    pub(super) fn setup_ipv6(&mut self) {
        // As a host (Linux's defaults): duplicate address detection, MLD
        // reports, router solicitations, and router advertisements acted on
        // (default routers, on-link prefixes, MTU, SLAAC).
        self.stack
            .set_ipv6_host(self.now, ustack_core::Ipv6HostConfig::host());
        self.stack
            .add_ipv6_address(ustack_wire::ipv6::Ipv6Cidr::new(OUR_IP6, 64).expect("setup: prefix"))
            .expect("setup: IPv6 address");
        self.listener6 = Some(
            self.stack
                .tcp_listen6(
                    SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, LISTEN6_PORT, 0, 0),
                    16,
                )
                .expect("setup: listen6"),
        );
        let u = self
            .stack
            .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, UDP6_PORT, 0, 0))
            .expect("setup: udp6 bind");
        self.udp.push(u);
        // Duplicate address detection, where the engine does it, ends well
        // within this.
        self.advance(3_000_000);
        let mut ns = vec![0u8; 4];
        ns.extend_from_slice(&OUR_IP6.octets());
        ns.extend_from_slice(&[1, 1]);
        ns.extend_from_slice(&PEER_MAC.0);
        let dst = solicited_node(OUR_IP6);
        let body = icmp6(135, 0, &ns, PEER_IP6, dst);
        let f = ethernet(
            mac_for(dst),
            PEER_MAC,
            EtherType::Ipv6,
            &ip6_packet(PEER_IP6, dst, NEXT_ICMPV6, 255, &body),
        );
        self.receive(&f);
        assert!(
            self.stack.neighbour6(self.now, PEER_IP6).is_some(),
            "setup: a Neighbor Solicitation with the sender's address must create its entry"
        );
        self.flows.push(super::Flow {
            ours: LISTEN6_PORT,
            theirs: PASSIVE6_PEER_PORT,
            a_nxt: 0x4000_0000,
            b_max: None,
            b_ts: 0,
            ts: true,
            v6: true,
        });
        let fi = self.flows.len() - 1;
        let opts = [2, 4, 0x05, 0x8c, 1, 3, 3, 7, 4, 2, 1, 1];
        self.send_seg(fi, ustack_wire::tcp::flags::SYN, 0, 0, 65535, &opts, &[]);
        self.send_seg(fi, ustack_wire::tcp::flags::ACK, 0, 0, 65535, &[], &[]);
        let l = self.listener6.expect("setup: listener6");
        let c = self.stack.tcp_accept(l).expect("setup: accept6");
        let c = c.expect("setup: the IPv6 handshake completes");
        let st = self.stack.tcp_status(c).expect("setup: status6");
        assert_eq!(
            st.state,
            ustack_core::tcp::State::Established,
            "setup: IPv6 handshake"
        );
        self.tcp.push(c);
    }

    /// The IPv6 frame of a TCP segment on a tracked IPv6 flow.
    pub(super) fn tcp6_frame(&self, seg: Vec<u8>) -> Vec<u8> {
        let mut seg = seg;
        TcpPacket::new_unchecked(&mut seg[..]).fill_checksum(PEER_IP6, OUR_IP6);
        ethernet(
            OUR_MAC,
            PEER_MAC,
            EtherType::Ipv6,
            &ip6_packet(PEER_IP6, OUR_IP6, NEXT_TCP, 64, &seg),
        )
    }

    /// The peer answers our Neighbor Solicitations for it (like a live host).
    pub(super) fn answer_ns(&mut self, target: Ipv6Addr) {
        let mut na = vec![0x60, 0, 0, 0];
        na.extend_from_slice(&target.octets());
        na.extend_from_slice(&[2, 1]);
        na.extend_from_slice(&PEER_MAC.0);
        let body = icmp6(136, 0, &na, target, our_ll());
        let mut f = ethernet(
            OUR_MAC,
            PEER_MAC,
            EtherType::Ipv6,
            &ip6_packet(target, our_ll(), NEXT_ICMPV6, 255, &body),
        );
        if self.vnet {
            f.splice(0..0, [0u8; ustack_wire::virtio_net::VNET_HDR_LEN]);
        }
        self.fed += 1;
        let (out, ends) = (&mut self.out, &mut self.out_ends);
        self.stack
            .receive(self.now, &f, &mut |fr| super::push_frame(out, ends, fr));
        self.tx_frames(super::MAX_FRAMES_PER_RECEIVE, "one receive");
    }

    fn send6(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        next: u8,
        hop: u8,
        body: &[u8],
        inp: &mut Input,
    ) {
        let edst = if inp.u8().is_multiple_of(16) {
            MacAddr::BROADCAST
        } else {
            mac_for(dst)
        };
        let f = ethernet(
            edst,
            PEER_MAC,
            EtherType::Ipv6,
            &ip6_packet(src, dst, next, hop, body),
        );
        self.receive(&f);
    }

    /// ICMPv6 from the peer: echo, Neighbor Discovery, router messages, MLD
    /// queries, anything else, or an error quoting one of our flows.
    pub(super) fn op_icmp6(&mut self, inp: &mut Input) {
        let kind = inp.u8();
        let (src, dst, hop) = (src_ip6(inp), dst_ip6(inp), hop_limit(inp));
        let (ty, code, body) = match kind % 8 {
            0 | 1 => {
                let mut b = inp.u16().to_be_bytes().to_vec();
                b.extend_from_slice(&inp.u16().to_be_bytes());
                let len = inp.len(MAX_FRAME);
                b.extend_from_slice(&payload(inp, len, false));
                (128 + kind % 2, 0, b)
            }
            2 => {
                let mut b = vec![0; 4];
                let target = match inp.u8() % 4 {
                    0 | 1 => OUR_IP6,
                    2 => our_ll(),
                    _ => Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, inp.u16()),
                };
                b.extend_from_slice(&target.octets());
                b.extend_from_slice(&nd_options(inp));
                (135, 0, b)
            }
            3 => {
                let mut b = vec![inp.u8() & 0xe0, 0, 0, 0];
                let target = match inp.u8() % 4 {
                    0 | 1 => PEER_IP6,
                    2 => peer_ll(),
                    _ => OUR_IP6,
                };
                b.extend_from_slice(&target.octets());
                b.extend_from_slice(&nd_options(inp));
                (136, 0, b)
            }
            4 => {
                let mut b = vec![0; 4];
                b.extend_from_slice(&nd_options(inp));
                (133, 0, b)
            }
            5 => {
                let lifetime = match inp.u8() % 4 {
                    0 => 0,
                    1 | 2 => 1800,
                    _ => inp.u16(),
                };
                let mut b = vec![inp.u8(), inp.u8() & 0xc0];
                b.extend_from_slice(&lifetime.to_be_bytes());
                b.extend_from_slice(&inp.u32().to_be_bytes());
                b.extend_from_slice(&inp.u32().to_be_bytes());
                b.extend_from_slice(&nd_options(inp));
                (134, 0, b)
            }
            6 => {
                let ty = match inp.u8() % 4 {
                    0 => 130,
                    1 => 137,
                    2 => 143,
                    _ => inp.u8(),
                };
                let code = if inp.u8().is_multiple_of(4) {
                    inp.u8()
                } else {
                    0
                };
                let len = inp.len(512);
                (ty, code, payload(inp, len, true).into_owned())
            }
            _ => {
                self.op_icmp6_error(inp);
                return;
            }
        };
        let msg = icmp6(ty, code, &body, src, dst);
        self.send6(src, dst, NEXT_ICMPV6, hop, &msg, inp);
    }

    /// An ICMPv6 error (destination unreachable, packet too big, time
    /// exceeded, parameter problem) quoting one of our IPv6 flows or the
    /// IPv6 UDP socket.
    pub(super) fn op_icmp6_error(&mut self, inp: &mut Input) {
        let (ty, code) = match inp.u8() % 6 {
            0 | 1 => (1, inp.u8() % 8),
            2 => (2, 0),
            3 => (3, inp.u8() % 2),
            4 => (4, inp.u8() % 4),
            _ => (inp.u8(), inp.u8()),
        };
        let word = match inp.u8() % 4 {
            0 => 1280,
            1 => 1400,
            2 => 1279,
            _ => inp.u32(),
        };
        let from = if inp.u8() & 1 != 0 {
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xfe)
        } else {
            src_ip6(inp)
        };
        let sel = usize::from(inp.u8());
        let dseq = inp.delta();
        let v6: Vec<super::Flow> = self.flows.iter().filter(|f| f.v6).copied().collect();
        let quoted = match v6.get(sel % v6.len().max(1)).filter(|_| sel < 240) {
            Some(f) => {
                let seq = f.b_max.unwrap_or(0).wrapping_sub(1).wrapping_add(dseq);
                let t = tcp_bytes(
                    f.ours,
                    f.theirs,
                    seq,
                    f.a_nxt,
                    ustack_wire::tcp::flags::ACK,
                    1000,
                    &[],
                    &[],
                );
                ip6_packet(OUR_IP6, PEER_IP6, NEXT_TCP, 64, &t)
            }
            None => {
                let u = udp_bytes(OUR_IP6, PEER_IP6, UDP6_PORT, inp.u16(), &[0; 12], 0);
                ip6_packet(OUR_IP6, PEER_IP6, NEXT_UDP, 64, &u)
            }
        };
        let keep = match inp.u8() % 4 {
            0 | 1 => quoted.len(),
            2 => 48,
            _ => usize::from(inp.u8()),
        };
        let mut body = word.to_be_bytes().to_vec();
        body.extend_from_slice(quoted.get(..keep.min(quoted.len())).unwrap_or(&[]));
        let msg = icmp6(ty, code, &body, from, OUR_IP6);
        let f = ethernet(
            OUR_MAC,
            PEER_MAC,
            EtherType::Ipv6,
            &ip6_packet(from, OUR_IP6, NEXT_ICMPV6, 64, &msg),
        );
        self.receive(&f);
    }

    /// An IPv6 packet with a chain of extension headers (hop-by-hop,
    /// destination options, routing, fragment; in any order, repeated) in
    /// front of UDP, an echo request, TCP, No Next Header or an unknown
    /// protocol; or a whole UDP/echo datagram cut into fragments sent in a
    /// fuzz-chosen order (with a duplicate, an overlap or a missing piece).
    pub(super) fn op_ip6_ext(&mut self, inp: &mut Input) {
        let kind = inp.u8();
        if kind % 4 == 3 {
            self.op_fragmented6(inp);
            return;
        }
        let src = if kind & 0x80 != 0 {
            src_ip6(inp)
        } else {
            PEER_IP6
        };
        let dst = if kind & 0x40 != 0 {
            dst_ip6(inp)
        } else {
            OUR_IP6
        };
        let len = inp.len(MAX_FRAME);
        let data = payload(inp, len, false);
        let (mut next, upper) = match inp.u8() % 6 {
            0 | 1 => (
                NEXT_UDP,
                udp_bytes(src, dst, inp.u16(), UDP6_PORT, &data, inp.u8() % 4),
            ),
            2 => {
                let mut b = inp.u32().to_be_bytes().to_vec();
                b.extend_from_slice(&data);
                (NEXT_ICMPV6, icmp6(128, 0, &b, src, dst))
            }
            3 => {
                let mut t = tcp_bytes(
                    inp.u16(),
                    LISTEN6_PORT,
                    inp.u32(),
                    0,
                    ustack_wire::tcp::flags::SYN,
                    65535,
                    &[],
                    &[],
                );
                TcpPacket::new_unchecked(&mut t[..]).fill_checksum(src, dst);
                (NEXT_TCP, t)
            }
            4 => (NEXT_NONE, data.into_owned()),
            _ => (inp.u8(), data.into_owned()),
        };
        // Built from the upper layer outwards.
        let mut chain: Vec<u8> = Vec::new();
        for _ in 0..inp.u8() % 5 {
            let mut h = Vec::new();
            let ty = match inp.u8() % 5 {
                0 => {
                    h.push(next);
                    let o = ext_options(inp);
                    h.push(((o.len() + 2) / 8 - 1) as u8);
                    h.extend_from_slice(&o);
                    NEXT_HBH
                }
                1 => {
                    h.push(next);
                    let o = ext_options(inp);
                    h.push(((o.len() + 2) / 8 - 1) as u8);
                    h.extend_from_slice(&o);
                    NEXT_DSTOPTS
                }
                2 => {
                    let n = inp.u8() % 3;
                    let rtype = match inp.u8() % 4 {
                        0 => 0,
                        1 => 2,
                        2 => 4,
                        _ => inp.u8(),
                    };
                    h.extend_from_slice(&[next, 2 * n, rtype, inp.u8() % 4, 0, 0, 0, 0]);
                    for i in 0..n {
                        h.extend_from_slice(
                            &Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x10 + u16::from(i)).octets(),
                        );
                    }
                    NEXT_ROUTING
                }
                3 => {
                    // A lone fragment header: atomic (offset 0, M = 0) or
                    // a piece of a datagram that may never complete.
                    let off = if inp.u8().is_multiple_of(2) {
                        0
                    } else {
                        inp.u16() & 0xfff9
                    };
                    h.push(next);
                    h.push(0);
                    h.extend_from_slice(&off.to_be_bytes());
                    h.extend_from_slice(&(0x6000 + u32::from(inp.u8() % 4)).to_be_bytes());
                    NEXT_FRAGMENT
                }
                _ => {
                    // Raw bytes claiming to be an options header.
                    let n = usize::from(inp.u8() % 24);
                    h.push(next);
                    h.push((n / 8) as u8);
                    h.extend_from_slice(&payload(inp, n + 6, true));
                    [NEXT_HBH, NEXT_DSTOPTS, NEXT_ROUTING][usize::from(inp.u8() % 3)]
                }
            };
            h.extend_from_slice(&chain);
            chain = h;
            next = ty;
        }
        chain.extend_from_slice(&upper);
        let hop = hop_limit(inp);
        self.send6(src, dst, next, hop, &chain, inp);
    }

    /// A whole UDP or echo datagram over IPv6 cut into fragments.
    fn op_fragmented6(&mut self, inp: &mut Input) {
        let kind = inp.u8();
        let len = inp.len(MAX_FRAME);
        let data = payload(inp, len, false);
        let (next, body) = if kind & 1 == 0 {
            (
                NEXT_UDP,
                udp_bytes(PEER_IP6, OUR_IP6, 5353, UDP6_PORT, &data, 0),
            )
        } else {
            let mut b = vec![0, 7, 0, 7];
            b.extend_from_slice(&data);
            (NEXT_ICMPV6, icmp6(128, 0, &b, PEER_IP6, OUR_IP6))
        };
        let step = 8 * (1 + usize::from(inp.u8() % 185));
        let pieces: Vec<&[u8]> = body.chunks(step).collect();
        let n = pieces.len();
        let order = inp.u8();
        let dup = inp.u8();
        let ident = 0x7000 + u32::from(inp.u8() % 4);
        let idxs = super::fragment_order(n, order, dup);
        for i in idxs {
            let Some(piece) = pieces.get(i) else { continue };
            // An overlap: this piece claims to start 8 bytes early.
            let start = if dup & 0x80 != 0 && i > 0 {
                i * step - 8
            } else {
                i * step
            };
            let more = u16::from(i + 1 < n);
            let mut p = vec![next, 0];
            p.extend_from_slice(&((start as u16) | more).to_be_bytes());
            p.extend_from_slice(&ident.to_be_bytes());
            p.extend_from_slice(piece);
            let f = ethernet(
                OUR_MAC,
                PEER_MAC,
                EtherType::Ipv6,
                &ip6_packet(PEER_IP6, OUR_IP6, NEXT_FRAGMENT, 64, &p),
            );
            self.receive(&f);
        }
    }

    /// The application's IPv6 calls: connect, UDP send/bind/connect.
    pub(super) fn op_app6(&mut self, inp: &mut Input) {
        let what = inp.u8();
        let dst = match inp.u8() % 8 {
            0..=4 => PEER_IP6,
            5 => peer_ll(),
            6 => ALL_NODES,
            _ => Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, inp.u16()),
        };
        let port = inp.u16().max(1);
        match what % 4 {
            0 => {
                if let Ok(c) =
                    self.stack
                        .tcp_connect6(self.now, SocketAddrV6::new(dst, port, 0, 0), None)
                {
                    if self.tcp.len() < MAX_HANDLES {
                        self.tcp.push(c);
                    }
                }
            }
            1 => {
                let len = inp.len(MAX_APP_SEND) * if inp.u8() & 1 != 0 { 64 } else { 1 };
                let data = payload(inp, len.min(MAX_APP_SEND), false);
                if let Some(h) = self.udp_handle(inp) {
                    if let Ok(n) = self.stack.udp6_send_to(
                        self.now,
                        h,
                        &data,
                        SocketAddrV6::new(dst, port, 0, 0),
                    ) {
                        assert_eq!(n, data.len(), "UDP sends are all or nothing");
                    }
                }
            }
            2 => {
                if let Ok(u) =
                    self.stack
                        .udp6_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0))
                {
                    if self.udp.len() < MAX_HANDLES {
                        self.udp.push(u);
                    }
                }
            }
            _ => {
                if let Some(h) = self.udp_handle(inp) {
                    let _ = self
                        .stack
                        .udp6_connect(h, SocketAddrV6::new(dst, port, 0, 0));
                }
            }
        }
        self.poll_due();
    }

    /// Diagnostics of the IPv6 side never panic.
    pub(super) fn diag6(&mut self) {
        for u in &self.udp {
            let _ = self.stack.udp6_status(*u);
        }
        let _ = self.stack.ipv6_addresses().len();
        let _ = self.stack.neighbour6(self.now, PEER_IP6);
    }
}

/// Recompute the transport checksum of an IPv6 packet whose header is
/// directly followed by TCP, UDP or ICMPv6 (so mutations get past checksum
/// verification).
pub fn repair6(b: &mut [u8]) {
    let Ok(ip) = Ipv6Packet::new_checked(&b[..]) else {
        return;
    };
    let (src, dst, next) = (ip.src_addr(), ip.dst_addr(), ip.next_header());
    let end = (40 + usize::from(ip.payload_len())).min(b.len());
    let Some(payload) = b.get_mut(40..end) else {
        return;
    };
    match next {
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
        IpProtocol::ICMPV6 => {
            if let Ok(mut p) = Icmpv6Packet::new_checked(&mut payload[..]) {
                p.fill_checksum(&src, &dst);
            }
        }
        _ => {}
    }
}

/// Check one IPv6 packet the stack emitted: from one of our addresses (the
/// unspecified one only for duplicate address detection and MLD), never to
/// the unspecified address, errors, replies and TCP never to a multicast
/// group, Neighbor Discovery with hop limit 255, checksums right.
pub fn check6(b: &[u8]) -> Emitted {
    let p = Ipv6Packet::new_checked(b).expect("emitted IPv6: length");
    let ip = Ipv6Repr::parse(&p).expect("emitted IPv6: parse");
    assert!(ip.hop_limit > 0, "emitted hop limit 0");
    assert!(!ip.dst.is_unspecified(), "emitted IPv6 to ::");
    let unspec = ip.src.is_unspecified();
    assert!(
        unspec || is_ours6(ip.src),
        "emitted IPv6 from a foreign address {} (to {}, next header {:?}, {:02x?})",
        ip.src,
        ip.dst,
        ip.next_header,
        p.payload().get(..4)
    );
    let mut payload = p.payload();
    let mut next = ip.next_header;
    if next == IpProtocol::HOP_BY_HOP {
        // Only MLD reports carry one (a Router Alert option).
        let len = payload.get(1).map_or(0, |l| (usize::from(*l) + 1) * 8);
        next = IpProtocol::from(*payload.first().expect("emitted hop-by-hop header"));
        payload = payload
            .get(len..)
            .expect("emitted hop-by-hop header: length");
        assert_eq!(
            next,
            IpProtocol::ICMPV6,
            "hop-by-hop header before {next:?}"
        );
    }
    if next == IpProtocol::IPV6_FRAG {
        // A fragment of a packet larger than the MTU (an echo reply to a
        // reassembled request, a large UDP datagram): a Fragment header for
        // an upper layer we send, data in 8-byte units.
        assert!(!unspec, "emitted fragment from ::");
        let fh = ustack_wire::ipv6ext::Ipv6FragmentRepr::parse(payload)
            .expect("emitted IPv6 fragment: header");
        assert!(
            matches!(
                fh.next_header,
                IpProtocol::ICMPV6 | IpProtocol::Udp | IpProtocol::Tcp
            ),
            "emitted fragment of {:?}",
            fh.next_header
        );
        assert!(
            !fh.more_frags || (payload.len() - 8).is_multiple_of(8),
            "emitted fragment of {} bytes with M set",
            payload.len() - 8
        );
        return Emitted::Other;
    }
    match next {
        IpProtocol::Udp => {
            assert!(!unspec, "emitted UDP6 from ::");
            let u = UdpPacket::new_checked(payload).expect("emitted UDP6: length");
            UdpRepr::parse(&u, ip.src, ip.dst, true).expect("emitted UDP6: parse");
            Emitted::Other
        }
        IpProtocol::Tcp => {
            assert!(
                !unspec && !ip.dst.is_multicast(),
                "emitted TCP6 {} -> {}",
                ip.src,
                ip.dst
            );
            let t = TcpPacket::new_checked(payload).expect("emitted TCP6: length");
            let r = TcpRepr::parse(&t, ip.src, ip.dst, true).expect("emitted TCP6: parse");
            assert!(!(r.syn && r.rst), "emitted SYN+RST");
            Emitted::Tcp {
                ours: r.src_port,
                theirs: r.dst_port,
                seq: r.seq.0,
                seq_len: r.seq_len(),
                ts: r.timestamp.map(|t| t.0),
                v6: true,
            }
        }
        IpProtocol::ICMPV6 => {
            let c = Icmpv6Packet::new_checked(payload).expect("emitted ICMPv6: length");
            assert!(
                c.verify_checksum(&ip.src, &ip.dst),
                "emitted ICMPv6 with a bad checksum"
            );
            let ty = payload[0];
            match ty {
                // Errors (RFC 4443 2.4 (e)) and echo replies go to the
                // single host that caused them.
                0..=127 | 129 => {
                    assert!(!unspec, "emitted ICMPv6 type {ty} from ::");
                    assert!(
                        !ip.dst.is_multicast(),
                        "emitted ICMPv6 type {ty} to {}",
                        ip.dst
                    );
                }
                133..=137 => {
                    assert_eq!(
                        ip.hop_limit, 255,
                        "emitted ND type {ty} with hop limit {}",
                        ip.hop_limit
                    );
                    assert!(
                        !unspec || ty == 135 || ty == 133,
                        "emitted ND type {ty} from ::"
                    );
                    if ty == 135 {
                        let t = payload.get(8..24).expect("emitted NS: target");
                        let t: [u8; 16] = t.try_into().expect("16 bytes");
                        return Emitted::Ns(Ipv6Addr::from(t));
                    }
                }
                _ => {}
            }
            Emitted::Other
        }
        other => panic!("emitted IPv6 next header {other:?}"),
    }
}
