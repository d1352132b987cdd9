//! The `Stack`'s TCP side: segment input/output glue and the socket API.

use bytes::Bytes;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ustack_wire::icmpv4::DstUnreachable;
use ustack_wire::ipv4::Ipv4Repr;
use ustack_wire::ipv6::Ipv6Repr;
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};
use ustack_wire::Error as WireError;

use crate::counters::Counters;
use crate::error::{BindError, ConnectError};
use crate::iface::Iface;
use crate::stack::Stack;
use crate::tcp::{rst_for_unmatched, CcAlgorithm, IcmpUnreachable, TcpConnInfo, TcpError};
use crate::tcp_table::{Demux, Readiness, TcpHandle, TcpInfo, TcpSchedStats, TcpStatus, Tuple};
use crate::udp::UdpHandle;

/// One entry of [`Stack::take_events`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketEvent {
    /// A TCP connection or listener, with its readiness now.
    Tcp(TcpHandle, Readiness),
    /// A UDP socket received a datagram or an error.
    Udp(UdpHandle),
    /// Transparent mode: a held SYN waits for `tcp_next_pending_syn`.
    PendingSyn,
}
use crate::time::{Duration, Instant};

/// Emit closure shared by receive and poll: frame a segment and send it.
fn emitter<'a>(
    iface: &'a mut Iface,
    counters: &'a mut Counters,
    now: Instant,
    tx: &'a mut dyn FnMut(&[u8]),
) -> impl FnMut(SocketAddr, SocketAddr, &TcpRepr, &[Bytes], usize) -> bool + 'a {
    move |local: SocketAddr, remote: SocketAddr, seg: &TcpRepr, ext: &[Bytes], smss: usize| match (
        local, remote,
    ) {
        (SocketAddr::V4(l), SocketAddr::V4(r)) => iface
            .send_tcp_from(
                now,
                &mut counters.ip,
                &mut counters.link,
                *l.ip(),
                *r.ip(),
                seg,
                ext,
                smss,
                tx,
            )
            .is_ok(),
        (SocketAddr::V6(l), SocketAddr::V6(r)) => iface
            .send_tcp6_from(now, counters, *l.ip(), *r.ip(), seg, ext, smss, tx)
            .is_ok(),
        _ => false,
    }
}

impl Stack {
    pub(crate) fn receive_tcp(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        payload: &[u8],
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let Ok(pkt) = TcpPacket::new_checked(payload) else {
            self.counters.tcp.InErrs += 1;
            return;
        };
        // A GSO super-frame counts as the segments it stands for, as Linux
        // counts a GRO packet (`max(1, gso_segs)`).
        let data = payload.len().saturating_sub(pkt.header_len());
        self.counters.tcp.InSegs += match self.rx_gso_size {
            Some(g) if g > 0 => data.div_ceil(g).max(1) as u64,
            _ => 1,
        };
        let seg = match TcpRepr::parse(&pkt, ip.src, ip.dst, !self.rx_csum_ok) {
            Ok(s) => s,
            Err(WireError::Checksum) => {
                self.counters.tcp.InCsumErrors += 1;
                self.counters.tcp.InErrs += 1;
                return;
            }
            Err(_) => {
                self.counters.tcp.InErrs += 1;
                return;
            }
        };
        // A GSO super-frame from the link stands for segments of the size
        // its virtio-net header gives.
        let gso_size = self.rx_gso_size.unwrap_or(seg.payload.len());
        self.tcp_segment_input(now, ip, &seg, gso_size, tx);
    }

    /// A parsed, checksum-verified TCP segment for us (or, coalesced by
    /// GRO, several: each of `gso_size` payload bytes, see
    /// `Connection::process_gso`): to its connection, a listener, or
    /// answered with a RST.
    pub(crate) fn tcp_segment_input(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        seg: &TcpRepr,
        gso_size: usize,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let local = SocketAddrV4::new(ip.dst, seg.dst_port);
        let remote = SocketAddrV4::new(ip.src, seg.src_port);
        // The datagram's ECN codepoint goes with the segment (RFC 3168).
        let seg = &TcpRepr {
            ip_ecn: ip.dscp_ecn & 3,
            ..*seg
        };
        if self.transparent.is_some()
            && self.transparent_tcp_input(now, Tuple::V4(local, remote), seg)
        {
            return;
        }
        let Stack {
            tcp,
            iface,
            counters,
            ..
        } = self;
        // As over IPv6 (`tcp_segment_input6`): a connection request from a
        // source we have no route back to (off-link with no gateway, our own
        // address) is dropped, as Linux's `tcp_conn_request` does when
        // `route_req` fails.
        if tcp.is_conn_request(&Tuple::V4(local, remote), seg) && iface.route(ip.src).is_none() {
            counters.tcp_ext.ListenDrops += 1;
            return;
        }
        let ctr = &mut counters.tcp;
        let ext = &mut counters.tcp_ext;
        match tcp.input(now, local, remote, seg, gso_size, ctr, ext, &iface.pmtu) {
            Demux::Conn(idx) => {
                let mut tctr = std::mem::take(&mut counters.tcp);
                tcp.dispatch(idx, now, &mut tctr, &mut emitter(iface, counters, now, tx));
                counters.tcp = tctr;
                iface.neighbour_advice(now, tcp.advice.drain(..));
            }
            Demux::Unmatched => {
                // RFC 9293 3.10.7.1: answer a segment to no connection with a
                // RST (never a RST in answer to a RST), from the address it
                // was sent to (ours, or any in transparent mode).
                if let Some(rst) = rst_for_unmatched(seg) {
                    let (ipc, link) = (&mut counters.ip, &mut counters.link);
                    if iface
                        .send_tcp_from(now, ipc, link, ip.dst, ip.src, &rst, &[], 0, tx)
                        .is_ok()
                    {
                        counters.tcp.OutSegs += 1;
                        counters.tcp.OutRsts += 1;
                    }
                }
            }
            Demux::Reply(reply) => {
                // A SYN-ACK carrying a SYN cookie: no connection behind it.
                let (ipc, link) = (&mut counters.ip, &mut counters.link);
                if iface
                    .send_tcp_from(now, ipc, link, ip.dst, ip.src, &reply, &[], 0, tx)
                    .is_ok()
                {
                    counters.tcp.OutSegs += 1;
                }
            }
            Demux::Dropped => {}
        }
    }

    /// [`Stack::tcp_segment_input`] for a segment that came over IPv6.
    pub(crate) fn tcp_segment_input6(
        &mut self,
        now: Instant,
        ip: &Ipv6Repr,
        seg: &TcpRepr,
        gso_size: usize,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let t = Tuple::V6(
            SocketAddrV6::new(ip.dst, seg.dst_port, 0, 0),
            SocketAddrV6::new(ip.src, seg.src_port, 0, 0),
        );
        // The ECN codepoint is the Traffic Class's low two bits (RFC 3168).
        let seg = &TcpRepr {
            ip_ecn: ip.traffic_class & 3,
            ..*seg
        };
        if self.transparent.is_some() && self.transparent_tcp_input6(now, ip, seg) {
            return;
        }
        let Stack {
            tcp,
            iface,
            counters,
            ..
        } = self;
        // A connection request from a source we have no route back to
        // (the unspecified address, or off-link with no router) is
        // dropped, as Linux's `tcp_conn_request` drops a SYN whose
        // `route_req` fails (ListenDrops): its SYN-ACK could never leave,
        // and the embryo would hold a backlog slot for ever.
        if tcp.is_conn_request(&t, seg) && iface.route6(ip.src).is_none() {
            counters.tcp_ext.ListenDrops += 1;
            return;
        }
        let ctr = &mut counters.tcp;
        let ext = &mut counters.tcp_ext;
        let demux = tcp.input_any(now, t, seg, gso_size, ctr, ext, &iface.pmtu);
        let reply = match demux {
            Demux::Conn(idx) => {
                let mut tctr = std::mem::take(&mut counters.tcp);
                tcp.dispatch(idx, now, &mut tctr, &mut emitter(iface, counters, now, tx));
                counters.tcp = tctr;
                iface.neighbour_advice6(now, tcp.advice6.drain(..));
                return;
            }
            // RFC 9293 3.10.7.1, as for IPv4; never to a multicast
            // destination (RFC 1122 4.2.3.10, which IPv6 inherits).
            Demux::Unmatched if !ip.dst.is_multicast() => match rst_for_unmatched(seg) {
                Some(rst) => rst,
                None => return,
            },
            Demux::Reply(reply) => reply,
            Demux::Unmatched | Demux::Dropped => return,
        };
        let rst = reply.rst;
        if iface
            .send_tcp6_from(now, counters, ip.dst, ip.src, &reply, &[], 0, tx)
            .is_ok()
        {
            counters.tcp.OutSegs += 1;
            if rst {
                counters.tcp.OutRsts += 1;
            }
        }
    }

    pub(crate) fn poll_tcp(&mut self, now: Instant, tx: &mut dyn FnMut(&[u8])) {
        let budget = self.config.limits.poll_budget;
        let Stack {
            tcp,
            iface,
            counters,
            ..
        } = self;
        let mut tctr = std::mem::take(&mut counters.tcp);
        tcp.poll(
            now,
            budget,
            &mut tctr,
            &mut emitter(iface, counters, now, tx),
        );
        counters.tcp = tctr;
        iface.neighbour_advice(now, tcp.advice.drain(..));
        iface.neighbour_advice6(now, tcp.advice6.drain(..));
    }

    pub(crate) fn tcp_poll_at(&self) -> Option<Instant> {
        self.tcp.poll_at(self.last_now)
    }

    pub(crate) fn tcp_icmp_unreachable(
        &mut self,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        reason: DstUnreachable,
        next_hop_mtu: u16,
        seq: SeqNum,
    ) {
        let kind = match reason {
            DstUnreachable::FragRequired => IcmpUnreachable::FragRequired { mtu: next_hop_mtu },
            DstUnreachable::PortUnreachable => IcmpUnreachable::PortUnreachable,
            DstUnreachable::ProtoUnreachable => IcmpUnreachable::ProtoUnreachable,
            DstUnreachable::NetUnreachable => IcmpUnreachable::NetUnreachable,
            DstUnreachable::HostUnreachable => IcmpUnreachable::HostUnreachable,
            DstUnreachable::NetProhibited
            | DstUnreachable::HostProhibited
            | DstUnreachable::AdminProhibited => IcmpUnreachable::AdminProhibited,
            _ => IcmpUnreachable::Other,
        };
        let ctr = &mut self.counters.tcp;
        let mut valid = false;
        self.tcp.icmp(local, remote, |c| {
            valid = c.on_icmp_unreachable(now, kind, seq, ctr);
        });
        // RFC 1191 / RFC 5927 4.1: a report the connection validated (it
        // quotes a segment in flight) teaches the path MTU to every new
        // connection to this destination, for `Limits::pmtu_expires`.
        if valid && reason == DstUnreachable::FragRequired {
            let link_mtu = self.iface.mtu;
            self.iface
                .pmtu
                .update(now, *remote.ip(), u32::from(next_hop_mtu), link_mtu);
        }
    }

    // ------------------------------------------------------------------
    // Socket API
    // ------------------------------------------------------------------

    /// Listen on `local` (address unspecified or ours; port 0 = ephemeral).
    /// `backlog` bounds the accept queue (clamped to 1..=4096).
    pub fn tcp_listen(
        &mut self,
        local: SocketAddrV4,
        backlog: usize,
    ) -> Result<TcpHandle, BindError> {
        if !local.ip().is_unspecified() && *local.ip() != self.iface.addr() {
            return Err(BindError::AddrNotAvailable);
        }
        self.tcp.listen(local, backlog)
    }

    /// Listen on an IPv6 `local` (address unspecified or ours; port 0 =
    /// ephemeral). Bound to `::`, it is a dual-stack listener: it takes
    /// IPv4 connections too, whose addresses the API reports as
    /// IPv4-mapped (`::ffff:a.b.c.d`); see [`Stack::tcp_listen6_v6only`].
    /// As on Linux, it conflicts (`AddrInUse`) with an IPv4 listener on
    /// the same port.
    pub fn tcp_listen6(
        &mut self,
        local: SocketAddrV6,
        backlog: usize,
    ) -> Result<TcpHandle, BindError> {
        self.tcp_listen6_opts(local, backlog, false)
    }

    /// [`Stack::tcp_listen6`] with `IPV6_V6ONLY` set: IPv6 connections
    /// only, and an IPv4 listener may share the port.
    pub fn tcp_listen6_v6only(
        &mut self,
        local: SocketAddrV6,
        backlog: usize,
    ) -> Result<TcpHandle, BindError> {
        self.tcp_listen6_opts(local, backlog, true)
    }

    fn tcp_listen6_opts(
        &mut self,
        local: SocketAddrV6,
        backlog: usize,
        v6only: bool,
    ) -> Result<TcpHandle, BindError> {
        let ip = *local.ip();
        let ok = ip.is_unspecified()
            || self.iface.has_addr6(ip)
            || ip
                .to_ipv4_mapped()
                .is_some_and(|v4| !v6only && (v4.is_unspecified() || v4 == self.iface.addr()));
        if !ok {
            return Err(BindError::AddrNotAvailable);
        }
        self.tcp.listen_any(SocketAddr::V6(local), backlog, v6only)
    }

    /// Set or clear `IPV6_V6ONLY` on an IPv6 listener. Clearing it fails
    /// with `InvalidState` (EINVAL) while an IPv4 listener shares the port,
    /// and on an IPv4 listener or a connection.
    pub fn tcp_set_v6only(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.set_v6only(h, on)
    }

    /// `IPV6_V6ONLY` of a listener (false for an IPv4 one).
    pub fn tcp_v6only(&self, h: TcpHandle) -> Result<bool, TcpError> {
        self.tcp.v6only(h)
    }

    /// Listen on `local` in either family.
    pub fn tcp_listen_addr(
        &mut self,
        local: SocketAddr,
        backlog: usize,
    ) -> Result<TcpHandle, BindError> {
        match local {
            SocketAddr::V4(l) => self.tcp_listen(l, backlog),
            SocketAddr::V6(l) => self.tcp_listen6(l, backlog),
        }
    }

    /// Start an active open to an IPv6 `remote` (on-link: there is no
    /// IPv6 router yet); the SYN goes out on the next `poll`. The source
    /// address is chosen as for UDP (`local` unspecified or absent) or
    /// must be ours. The MSS is the link MTU less 60 (RFC 8200 headers).
    pub fn tcp_connect6(
        &mut self,
        now: Instant,
        remote: SocketAddrV6,
        local: Option<SocketAddrV6>,
    ) -> Result<TcpHandle, ConnectError> {
        let r = *remote.ip();
        // An IPv4-mapped destination: an IPv4 connection the API reports
        // with IPv4-mapped addresses (Linux's dual-stack socket).
        if let Some(r4) = r.to_ipv4_mapped() {
            let l4 = match local {
                None => None,
                Some(l) if l.ip().is_unspecified() => {
                    Some(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, l.port()))
                }
                Some(l) => match l.ip().to_ipv4_mapped() {
                    Some(a) => Some(SocketAddrV4::new(a, l.port())),
                    None => return Err(ConnectError::InvalidAddress),
                },
            };
            let h = self.tcp_connect(now, SocketAddrV4::new(r4, remote.port()), l4)?;
            self.tcp.set_mapped(h);
            return Ok(h);
        }
        if remote.port() == 0 || r.is_unspecified() || r.is_multicast() {
            return Err(ConnectError::InvalidAddress);
        }
        if self.iface.route6(r).is_none() {
            self.counters.ip6.OutNoRoutes += 1;
            return Err(ConnectError::NoRoute);
        }
        let src = match local {
            Some(l) if !l.ip().is_unspecified() => {
                if !self.iface.has_addr6(*l.ip()) {
                    return Err(ConnectError::InvalidAddress);
                }
                *l.ip()
            }
            _ => self.iface.source6(r),
        };
        if src.is_unspecified() {
            return Err(ConnectError::NoRoute);
        }
        let port = local.map_or(0, |l| l.port());
        self.last_now = self.last_now.max(now);
        // The link's IPv6 MTU (a Router Advertisement may have lowered it)
        // or the path's a Packet Too Big taught (RFC 8201), less 60.
        let mtu = self.iface.path_mtu6(now, r);
        let route_mss = u16::try_from(mtu.saturating_sub(60))
            .unwrap_or(u16::MAX)
            .max(64);
        let t = Tuple::V6(SocketAddrV6::new(src, port, 0, 0), remote);
        let h = self.tcp.connect_any(now, t, route_mss)?;
        self.apply_route(h, r.into());
        Ok(h)
    }

    /// A new connection takes what the route to `remote` configures
    /// (`Stack::set_route_metrics`): its advertised MSS and initial cwnd.
    fn apply_route(&mut self, h: TcpHandle, remote: std::net::IpAddr) {
        let m = self.iface.pmtu.metrics(remote);
        if m.is_some() {
            if let Ok(c) = self.tcp.conn_mut(h) {
                c.apply_route(m);
            }
        }
    }

    /// Configure (`Some`) or remove (`None`) the metrics of the route to
    /// `dst` (Linux: `ip route ... mtu [lock] N advmss N initcwnd N`).
    /// New connections to `dst` take them; existing ones take the route's
    /// new MTU as Linux's do when their cached route becomes obsolete:
    /// the segment size follows after their next transmission (see
    /// `RouteMetrics`).
    pub fn set_route_metrics(
        &mut self,
        now: Instant,
        dst: std::net::IpAddr,
        m: Option<crate::RouteMetrics>,
    ) {
        if self.iface.pmtu.set_metrics(dst, m) {
            self.tcp.route_changed(now, dst, &self.iface.pmtu);
        }
    }

    /// The configured metrics of the route to `dst`, if any.
    pub fn route_metrics(&self, dst: std::net::IpAddr) -> Option<crate::RouteMetrics> {
        self.iface.pmtu.metrics(dst)
    }

    /// Start an active open in either family.
    pub fn tcp_connect_addr(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local: Option<SocketAddr>,
    ) -> Result<TcpHandle, ConnectError> {
        match (remote, local) {
            (SocketAddr::V4(r), None) => self.tcp_connect(now, r, None),
            (SocketAddr::V4(r), Some(SocketAddr::V4(l))) => self.tcp_connect(now, r, Some(l)),
            (SocketAddr::V6(r), None) => self.tcp_connect6(now, r, None),
            (SocketAddr::V6(r), Some(SocketAddr::V6(l))) => self.tcp_connect6(now, r, Some(l)),
            _ => Err(ConnectError::InvalidAddress),
        }
    }

    /// A socket's `(local, remote)` addresses in its own family (remote
    /// unspecified for a listener; IPv4 peers of an IPv6 socket as
    /// IPv4-mapped addresses), as [`TcpStatus`] and [`TcpInfo`] carry them.
    pub fn tcp_addrs(&self, h: TcpHandle) -> Result<(SocketAddr, SocketAddr), TcpError> {
        self.tcp.addrs(h)
    }

    /// The next established connection, `Ok(None)` when none is waiting.
    pub fn tcp_accept(&mut self, listener: TcpHandle) -> Result<Option<TcpHandle>, TcpError> {
        self.tcp.accept(listener)
    }

    /// Start an active open; the SYN goes out on the next `poll`.
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        remote: SocketAddrV4,
        local: Option<SocketAddrV4>,
    ) -> Result<TcpHandle, ConnectError> {
        let r = *remote.ip();
        if remote.port() == 0
            || r.is_unspecified()
            || r.is_multicast()
            || self.iface.is_broadcast(r)
        {
            return Err(ConnectError::InvalidAddress);
        }
        if self.iface.route(r).is_none() {
            self.counters.ip.OutNoRoutes += 1;
            return Err(ConnectError::NoRoute);
        }
        let me = self.iface.addr();
        let local = match local {
            None => SocketAddrV4::new(me, 0),
            Some(l) if l.ip().is_unspecified() || *l.ip() == me => SocketAddrV4::new(me, l.port()),
            // Transparent mode: appear to come from any unicast address.
            Some(l) if self.transparent.is_some() && !self.iface.is_martian_source(*l.ip()) => l,
            Some(_) => return Err(ConnectError::InvalidAddress),
        };
        self.last_now = self.last_now.max(now);
        let route_mss = self.iface.route_mss_to(now, r);
        let h = self.tcp.connect(now, local, remote, route_mss)?;
        self.apply_route(h, r.into());
        Ok(h)
    }

    /// Queue data; returns how much was taken (0 = send buffer full).
    pub fn tcp_send(&mut self, h: TcpHandle, data: &[u8]) -> Result<usize, TcpError> {
        self.tcp.with_conn(h, |c| c.send(data))?
    }

    /// Read received data; `Ok(0)` = end of stream, `WouldBlock` = nothing yet.
    pub fn tcp_recv(&mut self, h: TcpHandle, buf: &mut [u8]) -> Result<usize, TcpError> {
        self.tcp.with_conn(h, |c| c.recv(buf))?
    }

    /// Queue data written in place, without a staging buffer: `f` is lent
    /// up to `max` bytes of the send buffer's free space as two slices (the
    /// second is empty: the buffer lends the rest of its current chunk), fills
    /// a prefix of the first then the second, and returns how many bytes it
    /// wrote (clamped to what it was lent). Returns that count; `Ok(0)`
    /// without calling `f` when the buffer is full or `max` is 0; the errors
    /// of [`Stack::tcp_send`]. The same side effects as `tcp_send` (the
    /// connection is scheduled to transmit, its readiness updated).
    ///
    /// The buffer's storage grows as it is used: `f` may be lent less than
    /// `max` although there is room (a caller writing more comes back for
    /// the rest), so a 100-byte write into a large lend does not allocate
    /// the whole buffer. `f` runs inside the stack: it must not call back
    /// into it. A relay lends the space straight to `recv(2)` on its host
    /// socket, so each byte is copied once between the socket and the wire.
    pub fn tcp_send_with(
        &mut self,
        h: TcpHandle,
        max: usize,
        f: impl FnOnce(&mut [u8], &mut [u8]) -> usize,
    ) -> Result<usize, TcpError> {
        self.tcp.with_conn(h, |c| c.send_with(max, f))?
    }

    /// Read received data in place, without a staging buffer: `f` is lent
    /// the readable bytes as two slices (the second non-empty only where
    /// they wrap around the ring), consumes a prefix (of the first, then the
    /// second) and returns its length (clamped to what it was lent); those
    /// bytes leave the buffer and the window opens as after
    /// [`Stack::tcp_recv`]. Returns what `f` consumed, which may be 0.
    /// Without readable data `f` is not called and the result is that of
    /// `tcp_recv`: `Ok(0)` at end of stream, `WouldBlock`, or the error.
    /// `f` runs inside the stack: it must not call back into it. A relay
    /// lends the data straight to `send(2)`/`writev(2)` on its host socket
    /// and consumes what the kernel took.
    pub fn tcp_recv_with(
        &mut self,
        h: TcpHandle,
        f: impl FnOnce(&[u8], &[u8]) -> usize,
    ) -> Result<usize, TcpError> {
        self.tcp.with_conn(h, |c| c.recv_with(f))?
    }

    /// Copy readable data without consuming it (`MSG_PEEK`); stops at the
    /// urgent mark (see [`crate::tcp::Connection::peek`]). `Ok(0)` = end of
    /// stream, `WouldBlock` = nothing yet.
    pub fn tcp_peek(&mut self, h: TcpHandle, buf: &mut [u8]) -> Result<usize, TcpError> {
        self.tcp.with_conn(h, |c| c.peek(buf))?
    }

    /// As [`Stack::tcp_recv_with`], but stopping at the urgent mark without
    /// skipping the out-of-band octet (Linux `tcp_read_sock`, which
    /// `splice` uses): `Ok(0)` there while data waits behind it.
    pub fn tcp_read_to_mark_with(
        &mut self,
        h: TcpHandle,
        f: impl FnOnce(&[u8], &[u8]) -> usize,
    ) -> Result<usize, TcpError> {
        self.tcp.with_conn(h, |c| c.read_to_mark_with(f))?
    }

    /// `recv(MSG_OOB)`: the out-of-band octet of urgent data.
    pub fn tcp_recv_oob(
        &mut self,
        h: TcpHandle,
        peek: bool,
    ) -> Result<Result<u8, crate::tcp::OobError>, TcpError> {
        self.tcp.with_conn(h, |c| c.recv_oob(peek))
    }

    /// `SO_OOBINLINE`: urgent data's out-of-band octet stays in the stream.
    pub fn tcp_set_oob_inline(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_oob_inline(on))
    }

    /// `SIOCATMARK`: the next octet to read is the out-of-band one.
    pub fn tcp_at_urgent_mark(&mut self, h: TcpHandle) -> Result<bool, TcpError> {
        self.tcp.with_conn(h, |c| c.at_urgent_mark())
    }

    /// Bytes held in the buffers of every TCP connection (listeners'
    /// children and released connections still finishing included): data
    /// queued and not yet acknowledged plus data received in order and not
    /// yet read. Kept up to date as connections change, O(1).
    pub fn tcp_buffered(&self) -> usize {
        self.tcp.buffered()
    }

    /// Send FIN after the queued data (`shutdown(SHUT_WR)`).
    pub fn tcp_shutdown(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.shutdown())
    }

    /// Release the handle: FIN (or RST if unread data / linger 0); the
    /// connection finishes in the background and is reaped.
    pub fn tcp_close(&mut self, h: TcpHandle) {
        self.tcp.close(h, false);
    }

    /// RST now and release the handle.
    pub fn tcp_abort(&mut self, h: TcpHandle) {
        self.tcp.close(h, true);
    }

    pub fn tcp_set_nodelay(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_nodelay(on))
    }

    pub fn tcp_set_keepalive(
        &mut self,
        h: TcpHandle,
        interval: Option<Duration>,
    ) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_keepalive(interval))
    }

    /// Keep-alive with all three parameters (Linux `SO_KEEPALIVE` with
    /// `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`); `None` turns it off.
    pub fn tcp_set_keepalive_params(
        &mut self,
        h: TcpHandle,
        ka: Option<crate::tcp::KeepAlive>,
    ) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_keepalive_params(ka))
    }

    /// `MSG_EOR` (Linux): the data queued so far ends a record, which no
    /// segment will share with later data.
    pub fn tcp_mark_record_end(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.mark_record_end())
    }

    /// `TCP_LINGER2` (Linux): an orphan's FIN-WAIT-2 lifetime.
    pub fn tcp_set_fin_wait2_timeout(&mut self, h: TcpHandle, t: Duration) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_fin_wait2_timeout(t))
    }

    /// `TCP_USER_TIMEOUT` (RFC 5482, Linux): abort the connection when
    /// data stays unacknowledged for `t` (zero: back to the retry count).
    pub fn tcp_set_user_timeout(&mut self, h: TcpHandle, t: Duration) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_user_timeout(t))
    }

    /// `TCP_CORK` (Linux): hold partial segments until turned off (or an
    /// RTO passes with nothing in flight).
    pub fn tcp_set_cork(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_cork(on))
    }

    /// `MSG_MORE` (Linux) for the writes that follow until turned off: hold
    /// their partial tail, unmarked by PSH.
    pub fn tcp_set_more(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_more(on))
    }

    /// The data queued so far is not the end of the write: its last
    /// segment is not marked PSH while on (see
    /// [`crate::tcp::Connection::set_write_continues`]).
    pub fn tcp_set_write_continues(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_write_continues(on))
    }

    /// Linux `tcp_mark_push` mid-write: see [`Connection::mark_push`].
    pub fn tcp_mark_push(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.mark_push())
    }

    /// See [`Connection::retract_push_mark`].
    pub fn tcp_retract_push_mark(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.retract_push_mark())
    }

    /// Linux `tcp_push_one`: see [`Connection::set_push_one`].
    pub fn tcp_set_push_one(&mut self, h: TcpHandle) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_push_one())
    }

    /// The application waits for send-buffer space (Linux `SOCK_NOSPACE`),
    /// or no longer: what `tcpi_sndbuf_limited` times (see
    /// [`TcpConnInfo::sndbuf_limited`]). A socket layer that keeps its own
    /// send-buffer accounting reports it here.
    pub fn tcp_set_send_blocked(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_send_blocked(on))
    }

    pub fn tcp_set_linger_zero(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_linger_zero(on))
    }

    /// Congestion control algorithm of one connection from now on (Linux
    /// `TCP_CONGESTION`; new connections use [`TcpConfig::congestion_control`]).
    ///
    /// [`TcpConfig::congestion_control`]: crate::tcp::TcpConfig::congestion_control
    pub fn tcp_set_congestion_control(
        &mut self,
        h: TcpHandle,
        alg: CcAlgorithm,
    ) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_congestion_algorithm(alg))
    }

    /// Pace one connection's data segments or not (default:
    /// [`TcpConfig::pacing`]).
    ///
    /// [`TcpConfig::pacing`]: crate::tcp::TcpConfig::pacing
    pub fn tcp_set_pacing(&mut self, h: TcpHandle, on: bool) -> Result<(), TcpError> {
        self.tcp.with_conn(h, |c| c.set_pacing(on))
    }

    pub fn tcp_status(&self, h: TcpHandle) -> Result<TcpStatus, TcpError> {
        self.tcp.status(h)
    }

    /// A connection's TCP details, like Linux's `TCP_INFO` (and `ss -i`):
    /// state, negotiated options (MSS, window scales, SACK, timestamps),
    /// windows, RTT and RTO, congestion control and pacing.
    /// `InvalidState` for a listener.
    pub fn tcp_info(&self, h: TcpHandle) -> Result<TcpConnInfo, TcpError> {
        self.tcp.conn_info(h)
    }

    /// The readiness of a TCP socket now (see [`Readiness`]).
    pub fn tcp_readiness(&self, h: TcpHandle) -> Result<Readiness, TcpError> {
        self.tcp.readiness(h)
    }

    /// Hand over every socket whose readiness changed since the last call
    /// (epoll's ready list): TCP connections that became readable (new
    /// data, end of stream, an error), writable, connected or closed,
    /// listeners with a connection to accept, UDP sockets with a datagram
    /// or an error, and held SYNs waiting for a decision (transparent
    /// mode). Edge-triggered: a socket is reported when it *gains*
    /// something, so a caller that stops short of `WouldBlock` must come
    /// back to it on its own. Work is proportional to the events, not to
    /// the sockets held.
    pub fn take_events(&mut self, out: &mut dyn FnMut(SocketEvent)) {
        self.tcp
            .take_events(&mut |h, r| out(SocketEvent::Tcp(h, r)));
        self.udp.take_events(&mut |h| out(SocketEvent::Udp(h)));
        self.udp6.take_events(&mut |h| out(SocketEvent::Udp(h)));
        if self.take_pending_syn_event() {
            out(SocketEvent::PendingSyn);
        }
    }

    /// The TCP scheduler's state (diagnostics and tests).
    pub fn tcp_sched_stats(&self) -> TcpSchedStats {
        self.tcp.sched_stats()
    }

    /// Every TCP socket (listeners, connections, orphans), for `ss`-like views.
    pub fn tcp_sockets(&self) -> Vec<TcpInfo> {
        self.tcp.sockets()
    }

    /// Every TCP socket with its handle and, with `detail`, for
    /// connections, their `TCP_INFO` details (`ss -i`; without it none are
    /// copied).
    pub fn tcp_sockets_detailed(
        &self,
        detail: bool,
    ) -> Vec<(TcpHandle, TcpInfo, Option<TcpConnInfo>)> {
        self.tcp
            .sockets_with(|i| detail.then(|| i.clone()))
            .into_iter()
            .map(|(h, t, d)| (h, t, d.flatten()))
            .collect()
    }

    /// Number of TCP control blocks held (diagnostics, memory bounds).
    pub fn tcp_socket_count(&self) -> usize {
        self.tcp.len()
    }

    /// Our address (convenience).
    pub fn addr(&self) -> Ipv4Addr {
        self.iface.addr()
    }
}
