//! A DHCPv6 server (RFC 8415) for the hosts on the link, on UDP port 547
//! at All_DHCP_Relay_Agents_and_Servers (ff02::1:2): Information-request
//! (DNS servers, option 23, and the domain search list, option 24), and
//! addresses in IA_NA: Solicit → Advertise (or Reply with Rapid Commit),
//! Request → Reply, Renew, Rebind, Release, Decline and Confirm. Addresses
//! come from a pool handed out in order per (DUID, IAID): the first client
//! gets the first address (`fd00::100` for the relay's guest), the same
//! client gets the same one back. Messages RFC 8415 16 says to discard
//! (missing or foreign Server Identifier, no Client Identifier, ...) are
//! counted and dropped; relayed messages are not served.

use std::net::Ipv6Addr;

use ustack_wire::dhcpv6::{
    option_code as oc, status, Dhcpv6MessageType as Mt, Dhcpv6Packet, Dhcpv6Repr, SERVER_PORT,
};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv6::{Ipv6Cidr, Ipv6Repr, IPV6_HEADER_LEN};
use ustack_wire::udp::{UdpPacket, UdpRepr, UDP_HEADER_LEN};

use crate::addr_services::AddrServicesError;
use crate::counters::Dhcp6Counters;
use crate::iface::{Ip6Out, DEFAULT_HOP_LIMIT};
use crate::stack::Stack;
use crate::time::{Duration, Instant};

/// Largest pool (bounds the binding table).
pub const MAX_POOL_V6: u32 = 1024;
/// IA_NA options served per message (more are ignored).
const MAX_IAS: usize = 8;
/// RFC 8415 11.1: "A DUID can be no more than 128 octets long (not
/// including the type code)".
const MAX_DUID: usize = 130;
const OFFER_HOLD: Duration = Duration::from_secs(60);
const DECLINE_HOLD: Duration = Duration::from_secs(600);

/// The server's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dhcpv6Config {
    /// The first address handed out and how many (within `prefix_len`).
    pub first: Ipv6Addr,
    pub pool_size: u32,
    /// The link's prefix length (Confirm checks addresses against it).
    pub prefix_len: u8,
    /// DNS servers (option 23); none = not sent.
    pub dns: Vec<Ipv6Addr>,
    /// Domain search list (option 24); none = not sent.
    pub domains: Vec<String>,
    /// Address lifetimes, seconds (T1 is half the preferred lifetime, T2
    /// four fifths).
    pub preferred_lifetime: u32,
    pub valid_lifetime: u32,
    /// Answer a Solicit carrying Rapid Commit with a Reply at once.
    pub rapid_commit: bool,
}

impl Dhcpv6Config {
    pub fn new(first: Ipv6Addr) -> Self {
        Dhcpv6Config {
            first,
            pool_size: 1,
            prefix_len: 64,
            dns: Vec::new(),
            domains: Vec::new(),
            preferred_lifetime: 3600,
            valid_lifetime: 7200,
            rapid_commit: true,
        }
    }

    pub fn validate(&self) -> Result<(), AddrServicesError> {
        let bad = |w| Err(AddrServicesError::Dhcpv6(w));
        let Ok(net) = Ipv6Cidr::new(self.first, self.prefix_len) else {
            return bad("bad prefix length");
        };
        if self.first.is_multicast() || self.first.is_unspecified() {
            return bad("pool must be unicast");
        }
        if self.pool_size == 0 || self.pool_size > MAX_POOL_V6 {
            return bad("pool size must be 1..=1024");
        }
        let last = u128::from(self.first).checked_add(u128::from(self.pool_size - 1));
        if !last.is_some_and(|l| net.contains(Ipv6Addr::from(l))) {
            return bad("pool outside its prefix");
        }
        if self.dns.len() > 16 {
            return bad("too many DNS servers");
        }
        if self.preferred_lifetime > self.valid_lifetime || self.valid_lifetime < 60 {
            return bad("lifetimes: preferred <= valid, valid >= 60 s");
        }
        if encode_domains(&self.domains).is_none() {
            return bad("bad domain name");
        }
        Ok(())
    }

    fn addr(&self, i: usize) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.first).wrapping_add(i as u128))
    }

    fn on_link(&self, a: Ipv6Addr) -> bool {
        Ipv6Cidr {
            address: self.first,
            prefix_len: self.prefix_len,
        }
        .contains(a)
    }
}

/// RFC 1035 3.1 names, uncompressed (RFC 8415 10), one after the other.
fn encode_domains(names: &[String]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for n in names {
        let n = n.strip_suffix('.').unwrap_or(n);
        if n.is_empty() || n.len() > 253 {
            return None;
        }
        for label in n.split('.') {
            let len = u8::try_from(label.len())
                .ok()
                .filter(|l| (1..=63).contains(l))?;
            out.push(len);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
    }
    (out.len() <= 1024).then_some(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Offered,
    Bound,
    Released,
    Declined,
}

#[derive(Debug, Clone)]
struct Binding {
    duid: Box<[u8]>,
    iaid: u32,
    state: State,
    until: Instant,
}

impl Binding {
    fn free(&self, now: Instant) -> bool {
        self.state == State::Released || now >= self.until
    }
}

/// The server's state: one slot per pool address.
#[derive(Debug, Clone)]
pub(crate) struct Dhcp6Server {
    pub cfg: Dhcpv6Config,
    /// DUID-LL (RFC 8415 11.4) of our MAC.
    duid: [u8; 10],
    domains: Vec<u8>,
    bindings: Vec<Option<Binding>>,
}

fn put(out: &mut Vec<u8>, code: u16, data: &[u8]) {
    let len = u16::try_from(data.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&data[..usize::from(len)]);
}

fn status_option(out: &mut Vec<u8>, code: u16, msg: &str) {
    let mut d = code.to_be_bytes().to_vec();
    d.extend_from_slice(msg.as_bytes());
    put(out, oc::STATUS_CODE, &d);
}

/// What to do with the IAs of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IaAction {
    /// Solicit: reserve.
    Offer,
    /// Request, Rapid Commit, Rebind: bind.
    Bind,
    /// Renew: extend a binding, else NoBinding.
    Extend,
}

impl Dhcp6Server {
    pub fn new(cfg: Dhcpv6Config, mac: [u8; 6]) -> Self {
        let mut duid = [0, 3, 0, 1, 0, 0, 0, 0, 0, 0];
        duid[4..].copy_from_slice(&mac);
        Dhcp6Server {
            domains: encode_domains(&cfg.domains).unwrap_or_default(),
            bindings: vec![None; cfg.pool_size as usize],
            cfg,
            duid,
        }
    }

    fn find(&self, now: Instant, duid: &[u8], iaid: u32) -> Option<usize> {
        self.bindings.iter().position(|b| {
            b.as_ref().is_some_and(|b| {
                &*b.duid == duid && b.iaid == iaid && !(b.state == State::Declined && now < b.until)
            })
        })
    }

    fn choose(&self, now: Instant, duid: &[u8], iaid: u32) -> Option<usize> {
        self.find(now, duid, iaid)
            .or_else(|| self.bindings.iter().position(Option::is_none))
            .or_else(|| {
                self.bindings
                    .iter()
                    .position(|b| b.as_ref().is_some_and(|b| b.free(now)))
            })
    }

    fn set(&mut self, i: usize, duid: &[u8], iaid: u32, state: State, until: Instant) {
        if let Some(slot) = self.bindings.get_mut(i) {
            *slot = Some(Binding {
                duid: duid.into(),
                iaid,
                state,
                until,
            });
        }
    }

    /// One IA_NA of the answer.
    fn ia(&mut self, now: Instant, duid: &[u8], iaid: u32, act: IaAction, out: &mut Vec<u8>) {
        let c = &self.cfg;
        let (pref, valid) = (c.preferred_lifetime, c.valid_lifetime);
        let mut inner = Vec::new();
        let mut t = (pref / 2, pref / 5 * 4);
        let slot = match act {
            // Only a live binding is extended (not a released, expired
            // or merely advertised one).
            IaAction::Extend => self.find(now, duid, iaid).filter(|&i| {
                self.bindings[i]
                    .as_ref()
                    .is_some_and(|b| b.state == State::Bound && now < b.until)
            }),
            _ => self.choose(now, duid, iaid),
        };
        match slot {
            Some(i) => {
                let held = self.bindings[i]
                    .as_ref()
                    .is_some_and(|b| b.state == State::Bound && &*b.duid == duid);
                match act {
                    IaAction::Offer if !held => {
                        self.set(i, duid, iaid, State::Offered, now + OFFER_HOLD);
                    }
                    IaAction::Offer => {}
                    _ => {
                        let until = now + Duration::from_secs(u64::from(valid));
                        self.set(i, duid, iaid, State::Bound, until);
                    }
                }
                let mut a = self.cfg.addr(i).octets().to_vec();
                a.extend_from_slice(&pref.to_be_bytes());
                a.extend_from_slice(&valid.to_be_bytes());
                put(&mut inner, oc::IA_ADDR, &a);
            }
            None if act == IaAction::Extend => {
                status_option(&mut inner, status::NO_BINDING, "no binding");
                t = (0, 0);
            }
            None => {
                status_option(&mut inner, status::NO_ADDRS_AVAIL, "no addresses");
                t = (0, 0);
            }
        }
        let mut d = iaid.to_be_bytes().to_vec();
        d.extend_from_slice(&t.0.to_be_bytes());
        d.extend_from_slice(&t.1.to_be_bytes());
        d.extend_from_slice(&inner);
        put(out, oc::IA_NA, &d);
    }

    /// RFC 8415 16 and 18.3: the answer to one message, `(type, options)`;
    /// `None` = discard.
    fn handle(
        &mut self,
        now: Instant,
        m: &Dhcpv6Repr<'_>,
        multicast: bool,
        c: &mut Dhcp6Counters,
    ) -> Option<(Mt, Vec<u8>)> {
        let o = &m.options;
        let client = o.client_id();
        let server = o.server_id();
        let ours = server == Some(&self.duid[..]);
        // Presence of Client ID (`Some(true)` required), Server ID
        // (`Some(true)` ours required, `Some(false)` must be absent).
        let (need_client, server_rule) = match m.msg_type {
            Mt::Solicit => {
                c.InSolicits += 1;
                (true, Some(false))
            }
            Mt::Request => {
                c.InRequests += 1;
                (true, Some(true))
            }
            Mt::Confirm => {
                c.InConfirms += 1;
                (true, Some(false))
            }
            Mt::Renew => {
                c.InRenews += 1;
                (true, Some(true))
            }
            Mt::Rebind => {
                c.InRebinds += 1;
                (true, Some(false))
            }
            Mt::Decline => {
                c.InDeclines += 1;
                (true, Some(true))
            }
            Mt::Release => {
                c.InReleases += 1;
                (true, Some(true))
            }
            Mt::InformationRequest => {
                c.InInformationRequests += 1;
                (false, None)
            }
            _ => {
                c.InDiscards += 1;
                return None;
            }
        };
        let server_ok = match server_rule {
            Some(true) => ours,
            Some(false) => server.is_none(),
            None => server.is_none() || ours,
        };
        let duid_ok = client.is_some_and(|d| d.len() >= 2 && d.len() <= MAX_DUID);
        let has_ia = o.iter().any(|x| x.code() == oc::IA_NA);
        if !server_ok
            || (need_client && !duid_ok)
            || (client.is_some() && !duid_ok)
            || (m.msg_type == Mt::InformationRequest && has_ia)
        {
            c.InDiscards += 1;
            return None;
        }
        let duid = client.unwrap_or(&[]);
        let mut out = Vec::with_capacity(256);
        if let Some(d) = client {
            put(&mut out, oc::CLIENT_ID, d);
        }
        put(&mut out, oc::SERVER_ID, &self.duid);
        // RFC 8415 18.3.2/18.3.4/18.3.7/18.3.8: not offered Server Unicast.
        let unicast_only = matches!(
            m.msg_type,
            Mt::Request | Mt::Renew | Mt::Decline | Mt::Release
        );
        if unicast_only && !multicast {
            status_option(&mut out, status::USE_MULTICAST, "use multicast");
            return Some((Mt::Reply, out));
        }
        let ias: Vec<(u32, Option<Ipv6Addr>)> = o
            .ia_na()
            .take(MAX_IAS)
            .map(|ia| (ia.iaid, ia.addresses().next().map(|a| a.addr)))
            .collect();
        let mut reply = Mt::Reply;
        let mut config = true;
        match m.msg_type {
            Mt::Solicit => {
                let rapid = self.cfg.rapid_commit && o.rapid_commit();
                let act = if rapid {
                    put(&mut out, oc::RAPID_COMMIT, &[]);
                    IaAction::Bind
                } else {
                    reply = Mt::Advertise;
                    // RFC 8415 18.2.1: 255 makes the client go on at once.
                    put(&mut out, oc::PREFERENCE, &[255]);
                    IaAction::Offer
                };
                for &(iaid, _) in &ias {
                    self.ia(now, duid, iaid, act, &mut out);
                }
            }
            Mt::Request | Mt::Rebind => {
                for &(iaid, _) in &ias {
                    self.ia(now, duid, iaid, IaAction::Bind, &mut out);
                }
            }
            Mt::Renew => {
                for &(iaid, _) in &ias {
                    self.ia(now, duid, iaid, IaAction::Extend, &mut out);
                }
            }
            Mt::Release | Mt::Decline => {
                config = false;
                for &(iaid, addr) in &ias {
                    let found = self.find(now, duid, iaid);
                    match found {
                        Some(i) if m.msg_type == Mt::Release => {
                            if let Some(b) = self.bindings[i].as_mut() {
                                b.state = State::Released;
                            }
                        }
                        Some(i) if addr == Some(self.cfg.addr(i)) => {
                            let until = now + DECLINE_HOLD;
                            self.set(i, duid, iaid, State::Declined, until);
                        }
                        _ => {
                            let mut d = iaid.to_be_bytes().to_vec();
                            d.extend_from_slice(&[0; 8]);
                            status_option(&mut d, status::NO_BINDING, "no binding");
                            put(&mut out, oc::IA_NA, &d);
                        }
                    }
                }
                status_option(&mut out, status::SUCCESS, "");
            }
            Mt::Confirm => {
                config = false;
                let addrs: Vec<Ipv6Addr> = o
                    .ia_na()
                    .take(MAX_IAS)
                    .flat_map(|ia| ia.addresses().map(|a| a.addr).take(MAX_IAS))
                    .collect();
                if addrs.is_empty() {
                    c.InDiscards += 1;
                    return None;
                }
                if addrs.iter().all(|&a| self.cfg.on_link(a)) {
                    status_option(&mut out, status::SUCCESS, "");
                } else {
                    status_option(&mut out, status::NOT_ON_LINK, "not on link");
                }
            }
            _ => {}
        }
        if config {
            if !self.cfg.dns.is_empty() {
                let mut d = Vec::with_capacity(16 * self.cfg.dns.len());
                for a in &self.cfg.dns {
                    d.extend_from_slice(&a.octets());
                }
                put(&mut out, oc::DNS_SERVERS, &d);
            }
            if !self.domains.is_empty() {
                put(&mut out, oc::DOMAIN_LIST, &self.domains);
            }
        }
        Some((reply, out))
    }
}

impl Stack {
    /// A UDP datagram over IPv6 to port 547 (checksum already verified).
    /// `true` = taken by the server (answered, or dropped and counted).
    pub(crate) fn dhcp6_input(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        src_port: u16,
        dst_port: u16,
        payload: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) -> bool {
        if dst_port != SERVER_PORT {
            return false;
        }
        let Some(svc) = self.services.as_deref_mut() else {
            return false;
        };
        let Some(d) = svc.dhcp6.as_mut() else {
            return false;
        };
        self.counters.udp6.InDatagrams += 1;
        let c = &mut self.counters.dhcp6;
        let Ok(m) = Dhcpv6Repr::parse(&Dhcpv6Packet::new_unchecked(payload)) else {
            c.InErrors += 1;
            return true;
        };
        if ip.src.is_unspecified() || src_port == 0 {
            c.InDiscards += 1;
            return true;
        }
        let Some((msg_type, options)) = d.handle(now, &m, ip.dst.is_multicast(), c) else {
            return true;
        };
        let Ok(opts) = ustack_wire::dhcpv6::Dhcpv6Options::new_checked(&options) else {
            return true;
        };
        let reply = Dhcpv6Repr {
            msg_type,
            transaction_id: m.transaction_id,
            options: opts,
        };
        // RFC 8415 18.3.10: unicast to the source address of the message.
        let src = if ip.dst.is_multicast() {
            self.iface.source6(ip.src)
        } else {
            ip.dst
        };
        let len = UDP_HEADER_LEN + reply.buffer_len();
        if IPV6_HEADER_LEN + len > self.iface.mtu {
            self.counters.dhcp6.InDiscards += 1;
            return true;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(len, 0);
        if reply.emit(&mut scratch[UDP_HEADER_LEN..]).is_err() {
            self.scratch = scratch;
            return true;
        }
        UdpRepr {
            src_port: SERVER_PORT,
            dst_port: src_port,
        }
        .emit(
            &mut UdpPacket::new_unchecked(&mut scratch[..]),
            src,
            ip.src,
            len - UDP_HEADER_LEN,
            true,
        );
        let out = Ip6Out {
            src,
            dst: ip.src,
            next_header: IpProtocol::Udp,
            hop_limit: DEFAULT_HOP_LIMIT,
        };
        let c = &mut self.counters;
        let r = self.iface.send_ip6(now, c, out, &scratch, tx);
        self.scratch = scratch;
        if r.is_ok() {
            c.udp6.OutDatagrams += 1;
            match msg_type {
                Mt::Advertise => c.dhcp6.OutAdvertises += 1,
                _ => c.dhcp6.OutReplies += 1,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_encode_as_dns_names() {
        let d = encode_domains(&["example.org.".into(), "a.b".into()]).unwrap_or_default();
        assert_eq!(d, b"\x07example\x03org\x00\x01a\x01b\x00".to_vec());
        assert!(encode_domains(&["a..b".into()]).is_none());
        assert!(encode_domains(&[String::new()]).is_none());
    }
}
