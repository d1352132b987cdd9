//! A DHCPv4 server (RFC 2131, options of RFC 2132) for the hosts on the
//! link: DISCOVER → OFFER, REQUEST → ACK or NAK, DECLINE, RELEASE, INFORM.
//! Addresses come from a small pool handed out in order (the first client
//! gets the first address, as slirp's 10.0.2.15); a client is known by its
//! client identifier (option 61) or else its hardware address. The server
//! is authoritative for its subnet (a REQUEST for an address it cannot give
//! is NAKed). Relayed messages (`giaddr` set) are not served.
//!
//! The engine takes DHCP datagrams before its own address checks (a client
//! without an address sends from 0.0.0.0 to 255.255.255.255) and builds the
//! replies' frames itself: a client without an address cannot answer ARP,
//! so replies go to its hardware address, or to the broadcast MAC (RFC 2131
//! 4.1).

use std::net::Ipv4Addr;

use ustack_wire::dhcpv4::{
    Dhcpv4MessageType as Mt, Dhcpv4Option, Dhcpv4OptionWriter, Dhcpv4Options, Dhcpv4Packet,
    Dhcpv4Repr, BOOTREPLY, BOOTREQUEST, CLIENT_PORT, FLAG_BROADCAST, SERVER_PORT,
};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
use ustack_wire::ip::{IpProtocol, Ipv4AddrList};
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use ustack_wire::udp::{UdpPacket, UdpRepr, UDP_HEADER_LEN};

use crate::addr_services::AddrServicesError;
use crate::iface::DEFAULT_TTL;
use crate::stack::Stack;
use crate::time::{Duration, Instant};

/// Largest pool (bounds the lease table).
pub const MAX_POOL_V4: u32 = 1024;
/// Longest client identifier kept (RFC 2132 9.14 allows 255 bytes).
const MAX_CLIENT_ID: usize = 255;
/// How long an offered address is held for the client.
const OFFER_HOLD: Duration = Duration::from_secs(60);
/// How long a declined address stays out of the pool (dnsmasq's 10 min).
const DECLINE_HOLD: Duration = Duration::from_secs(600);

/// The server's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dhcpv4Config {
    /// Our address: the server identifier and the replies' source.
    pub server: Ipv4Addr,
    /// The subnet's prefix length (subnet mask option).
    pub prefix_len: u8,
    /// The first address handed out and how many.
    pub pool_start: Ipv4Addr,
    pub pool_size: u32,
    /// The router option (none = not sent).
    pub router: Option<Ipv4Addr>,
    /// DNS servers (option 6).
    pub dns: Vec<Ipv4Addr>,
    /// Lease time, seconds (T1 is half of it, T2 seven eighths).
    pub lease_time: u32,
}

impl Dhcpv4Config {
    /// One address (`guest`) on `server`'s subnet, `server` as the router.
    pub fn new(server: Ipv4Addr, prefix_len: u8, guest: Ipv4Addr) -> Self {
        Dhcpv4Config {
            server,
            prefix_len,
            pool_start: guest,
            pool_size: 1,
            router: Some(server),
            dns: Vec::new(),
            lease_time: 86_400,
        }
    }

    pub fn validate(&self) -> Result<(), AddrServicesError> {
        let bad = |w| Err(AddrServicesError::Dhcpv4(w));
        let Ok(net) = Ipv4Cidr::new(self.server, self.prefix_len) else {
            return bad("bad prefix length");
        };
        if self.pool_size == 0 || self.pool_size > MAX_POOL_V4 {
            return bad("pool size must be 1..=1024");
        }
        let last = u32::from(self.pool_start).checked_add(self.pool_size - 1);
        let Some(last) = last.map(Ipv4Addr::from) else {
            return bad("pool runs past 255.255.255.255");
        };
        if !net.contains(self.pool_start) || !net.contains(last) {
            return bad("pool outside the server's subnet");
        }
        if self.dns.len() > 16 {
            return bad("too many DNS servers");
        }
        if self.lease_time < 60 {
            return bad("lease time under 60 s");
        }
        Ok(())
    }

    fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.pool_start).wrapping_add(i as u32))
    }

    fn index(&self, a: Ipv4Addr) -> Option<usize> {
        let i = u32::from(a).checked_sub(u32::from(self.pool_start))?;
        (i < self.pool_size && a != self.server).then_some(i as usize)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseState {
    Offered,
    Bound,
    /// Released by its client: free, but the client gets it back first.
    Released,
    /// Declined (someone else uses it): nobody's until `until`.
    Declined,
}

#[derive(Debug, Clone)]
struct Lease {
    client: Box<[u8]>,
    state: LeaseState,
    until: Instant,
}

impl Lease {
    fn free(&self, now: Instant) -> bool {
        self.state == LeaseState::Released || now >= self.until
    }
}

/// The server's state: one slot per pool address.
#[derive(Debug, Clone)]
pub(crate) struct Dhcp4Server {
    pub cfg: Dhcpv4Config,
    leases: Vec<Option<Lease>>,
}

/// The client's key: 0 + client identifier, or 1 + chaddr.
fn client_key(m: &Dhcpv4Repr<'_>) -> Option<Vec<u8>> {
    let mut k = Vec::new();
    match m.options.client_id() {
        Some(id) if id.len() <= MAX_CLIENT_ID => {
            k.push(0);
            k.extend_from_slice(id);
        }
        Some(_) => return None,
        None => {
            k.push(1);
            k.extend_from_slice(&m.chaddr[..usize::from(m.hlen.min(16))]);
        }
    }
    Some(k)
}

/// What to answer.
#[derive(Debug, Clone, Copy)]
struct Answer {
    msg_type: Mt,
    yiaddr: Ipv4Addr,
    /// With lease time, T1, T2 (OFFER and ACK of a lease; not for INFORM).
    lease: bool,
}

impl Dhcp4Server {
    pub fn new(cfg: Dhcpv4Config) -> Self {
        let n = cfg.pool_size as usize;
        Dhcp4Server {
            cfg,
            leases: vec![None; n],
        }
    }

    fn find(&self, now: Instant, client: &[u8]) -> Option<usize> {
        self.leases.iter().position(|l| {
            l.as_ref().is_some_and(|l| {
                &*l.client == client && !(l.state == LeaseState::Declined && now < l.until)
            })
        })
    }

    fn is_free(&self, now: Instant, i: usize) -> bool {
        match self.leases.get(i) {
            Some(None) => true,
            Some(Some(l)) => l.free(now),
            None => false,
        }
    }

    /// The address for `client`: its own, the one it asks for if free, a
    /// never-used one, then one free again.
    fn choose(&self, now: Instant, client: &[u8], requested: Option<Ipv4Addr>) -> Option<usize> {
        if let Some(i) = self.find(now, client) {
            return Some(i);
        }
        if let Some(i) = requested.and_then(|a| self.cfg.index(a)) {
            if self.is_free(now, i) {
                return Some(i);
            }
        }
        let never = self.leases.iter().position(Option::is_none);
        never.or_else(|| (0..self.leases.len()).find(|&i| self.is_free(now, i)))
    }

    fn set(&mut self, i: usize, client: &[u8], state: LeaseState, until: Instant) {
        if let Some(slot) = self.leases.get_mut(i) {
            *slot = Some(Lease {
                client: client.into(),
                state,
                until,
            });
        }
    }

    fn lease_end(&self, now: Instant) -> Instant {
        now + Duration::from_secs(u64::from(self.cfg.lease_time))
    }

    /// RFC 2131 4.3: the server's decision for one request. `None` = say
    /// nothing.
    fn handle(
        &mut self,
        now: Instant,
        m: &Dhcpv4Repr<'_>,
        c: &mut crate::counters::DhcpCounters,
    ) -> Option<Answer> {
        let Some(client) = client_key(m) else {
            c.InDiscards += 1;
            return None;
        };
        let server_id = m.options.server_id();
        let requested = m.options.requested_ip();
        let msg_type = m.message_type()?;
        let ours = server_id.is_none_or(|s| s == self.cfg.server);
        let nak = Answer {
            msg_type: Mt::Nak,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            lease: false,
        };
        match msg_type {
            Mt::Discover => {
                c.InDiscovers += 1;
                let Some(i) = self.choose(now, &client, requested) else {
                    c.NoAddrs += 1;
                    return None;
                };
                // Keep a bound lease bound (a client that lost its state).
                let bound = self
                    .leases
                    .get(i)
                    .and_then(Option::as_ref)
                    .is_some_and(|l| {
                        l.state == LeaseState::Bound && &*l.client == client.as_slice()
                    });
                if !bound {
                    self.set(i, &client, LeaseState::Offered, now + OFFER_HOLD);
                }
                Some(Answer {
                    msg_type: Mt::Offer,
                    yiaddr: self.cfg.addr(i),
                    lease: true,
                })
            }
            Mt::Request => {
                c.InRequests += 1;
                if !ours {
                    // SELECTING another server: drop our offer.
                    if let Some(i) = self.find(now, &client) {
                        if self.leases[i]
                            .as_ref()
                            .is_some_and(|l| l.state == LeaseState::Offered)
                        {
                            self.leases[i] = None;
                        }
                    }
                    return None;
                }
                // SELECTING / INIT-REBOOT: the requested address;
                // RENEWING / REBINDING: ciaddr.
                let want = if server_id.is_some() || requested.is_some() {
                    requested
                } else if !m.ciaddr.is_unspecified() {
                    Some(m.ciaddr)
                } else {
                    None
                };
                let Some(want) = want else {
                    c.InDiscards += 1;
                    return None;
                };
                let ok = self.cfg.index(want).filter(|&i| {
                    self.leases[i]
                        .as_ref()
                        .is_none_or(|l| &*l.client == client.as_slice() || l.free(now))
                });
                // A client with another address of ours asks for this one:
                // it gets the one it asked for only if that is its own.
                let own = self.find(now, &client);
                match ok {
                    Some(i) if own.is_none_or(|o| o == i) => {
                        let end = self.lease_end(now);
                        self.set(i, &client, LeaseState::Bound, end);
                        Some(Answer {
                            msg_type: Mt::Ack,
                            yiaddr: want,
                            lease: true,
                        })
                    }
                    _ => Some(nak),
                }
            }
            Mt::Decline => {
                c.InDeclines += 1;
                if server_id != Some(self.cfg.server) {
                    return None;
                }
                if let Some(i) = requested.and_then(|a| self.cfg.index(a)) {
                    if self.leases[i]
                        .as_ref()
                        .is_some_and(|l| &*l.client == client.as_slice())
                    {
                        self.set(i, &client, LeaseState::Declined, now + DECLINE_HOLD);
                    }
                }
                None
            }
            Mt::Release => {
                c.InReleases += 1;
                if server_id != Some(self.cfg.server) {
                    return None;
                }
                if let Some(i) = self.cfg.index(m.ciaddr) {
                    if let Some(l) = self.leases[i].as_mut() {
                        if &*l.client == client.as_slice() {
                            l.state = LeaseState::Released;
                        }
                    }
                }
                None
            }
            Mt::Inform => {
                c.InInforms += 1;
                if m.ciaddr.is_unspecified() {
                    c.InDiscards += 1;
                    return None;
                }
                Some(Answer {
                    msg_type: Mt::Ack,
                    yiaddr: Ipv4Addr::UNSPECIFIED,
                    lease: false,
                })
            }
            _ => {
                c.InDiscards += 1;
                None
            }
        }
    }
}

impl Stack {
    /// A datagram to UDP port 67 of ours or broadcast, before the address
    /// checks. `true` = taken (served, or dropped and counted).
    pub(crate) fn dhcp4_input(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        payload: &[u8],
        ip_bcast: bool,
        tx: &mut dyn FnMut(&[u8]),
    ) -> bool {
        let Some(server) = self
            .services
            .as_deref()
            .and_then(|s| s.dhcp4.as_ref())
            .map(|d| d.cfg.server)
        else {
            return false;
        };
        if ip.protocol != IpProtocol::Udp
            || ip.more_frags
            || ip.frag_offset != 0
            || !(ip_bcast || ip.dst == server)
        {
            return false;
        }
        let Ok(pkt) = UdpPacket::new_checked(payload) else {
            return false;
        };
        if pkt.dst_port() != SERVER_PORT {
            return false;
        }
        let Ok(udp) = UdpRepr::parse(&pkt, ip.src, ip.dst, !self.rx_csum_ok) else {
            return false;
        };
        self.counters.ip.InDelivers += 1;
        self.counters.udp.InDatagrams += 1;
        let body = pkt.payload_ref();
        let parsed = Dhcpv4Repr::parse(&Dhcpv4Packet::new_unchecked(body));
        let c = &mut self.counters.dhcp;
        let Ok(m) = parsed else {
            c.InErrors += 1;
            return true;
        };
        // Requests from Ethernet clients only, not relayed, with a type.
        let Some(mac) = m.client_mac() else {
            c.InDiscards += 1;
            return true;
        };
        if m.op != BOOTREQUEST
            || !m.giaddr.is_unspecified()
            || m.message_type().is_none()
            || !mac.is_unicast()
        {
            c.InDiscards += 1;
            return true;
        }
        let Some(svc) = self.services.as_deref_mut() else {
            return true;
        };
        let Some(d) = svc.dhcp4.as_mut() else {
            return true;
        };
        let Some(answer) = d.handle(now, &m, c) else {
            return true;
        };
        let cfg = d.cfg.clone();
        self.dhcp4_reply(&cfg, &m, mac, udp.src_port, answer, tx);
        true
    }

    /// Build and send the reply frame (RFC 2131 4.1 and table 3).
    fn dhcp4_reply(
        &mut self,
        cfg: &Dhcpv4Config,
        m: &Dhcpv4Repr<'_>,
        mac: MacAddr,
        client_port: u16,
        a: Answer,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let mut obuf = [0u8; 312];
        let mut w = Dhcpv4OptionWriter::new(&mut obuf);
        let mut ok = w.put(&Dhcpv4Option::MessageType(a.msg_type)).is_ok()
            && w.put(&Dhcpv4Option::ServerId(cfg.server)).is_ok();
        if a.msg_type != Mt::Nak {
            if a.lease {
                let t = cfg.lease_time;
                ok &= w.put(&Dhcpv4Option::LeaseTime(t)).is_ok()
                    && w.put(&Dhcpv4Option::RenewalTime(t / 2)).is_ok()
                    && w.put(&Dhcpv4Option::RebindingTime(t / 8 * 7)).is_ok();
            }
            let mask = Ipv4Cidr {
                address: cfg.server,
                prefix_len: cfg.prefix_len,
            }
            .netmask();
            ok &= w.put(&Dhcpv4Option::SubnetMask(mask)).is_ok();
            if let Some(r) = cfg.router {
                let routers = [r];
                ok &= w
                    .put(&Dhcpv4Option::Router(Ipv4AddrList::Addrs(&routers)))
                    .is_ok();
            }
            if !cfg.dns.is_empty() {
                ok &= w
                    .put(&Dhcpv4Option::DnsServers(Ipv4AddrList::Addrs(&cfg.dns)))
                    .is_ok();
            }
        }
        // RFC 6842: the client identifier goes back.
        if let Some(id) = m.options.client_id() {
            ok &= w.put(&Dhcpv4Option::ClientId(id)).is_ok();
        }
        if !ok {
            return;
        }
        let Ok(area) = w.finish(60) else { return };
        let Ok(options) = Dhcpv4Options::new_checked(area) else {
            return;
        };
        let reply = Dhcpv4Repr {
            op: BOOTREPLY,
            htype: 1,
            hlen: 6,
            hops: 0,
            xid: m.xid,
            secs: 0,
            flags: m.flags & FLAG_BROADCAST,
            ciaddr: if a.msg_type == Mt::Nak {
                Ipv4Addr::UNSPECIFIED
            } else {
                m.ciaddr
            },
            yiaddr: a.yiaddr,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            chaddr: m.chaddr,
            sname: &[],
            file: &[],
            options,
        };
        // RFC 2131 4.1, giaddr zero: NAKs are broadcast; a client with an
        // address (ciaddr) gets unicast; the broadcast bit asks for
        // broadcast; else unicast to the hardware address and yiaddr.
        let bcast = a.msg_type == Mt::Nak
            || (m.ciaddr.is_unspecified() && (m.broadcast() || a.yiaddr.is_unspecified()));
        let (dst, eth_dst) = if bcast {
            (Ipv4Addr::BROADCAST, MacAddr::BROADCAST)
        } else if !m.ciaddr.is_unspecified() {
            (m.ciaddr, mac)
        } else {
            (a.yiaddr, mac)
        };
        let dhcp_len = reply.buffer_len();
        let udp_len = UDP_HEADER_LEN + dhcp_len;
        let hdr = self.iface.offload.hdr_len();
        let total = hdr + ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + udp_len;
        let mut f = std::mem::take(&mut self.scratch);
        f.clear();
        f.resize(total, 0);
        let ip_at = hdr + ETHERNET_HEADER_LEN;
        let udp_at = ip_at + IPV4_HEADER_LEN;
        if reply.emit(&mut f[udp_at + UDP_HEADER_LEN..]).is_err() {
            self.scratch = f;
            return;
        }
        let port = if client_port == 0 {
            CLIENT_PORT
        } else {
            client_port
        };
        UdpRepr {
            src_port: SERVER_PORT,
            dst_port: port,
        }
        .emit(
            &mut UdpPacket::new_unchecked(&mut f[udp_at..]),
            cfg.server,
            dst,
            dhcp_len,
            true,
        );
        Ipv4Repr {
            src: cfg.server,
            dst,
            protocol: IpProtocol::Udp,
            payload_len: udp_len,
            ttl: DEFAULT_TTL,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut f[ip_at..udp_at]), true);
        EthernetRepr {
            src: self.iface.mac,
            dst: eth_dst,
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut f[hdr..]));
        self.iface.emit_copy(&f, tx);
        self.scratch = f;
        let c = &mut self.counters;
        c.link.OutFrames += 1;
        c.ip.OutRequests += 1;
        c.udp.OutDatagrams += 1;
        match a.msg_type {
            Mt::Offer => c.dhcp.OutOffers += 1,
            Mt::Nak => c.dhcp.OutNaks += 1,
            _ => c.dhcp.OutAcks += 1,
        }
    }
}
