//! A scripted, in-memory [`GuestStack`] for tests: the test plays the guest
//! (sends SYNs, data, FIN, RST, datagrams, pings) and inspects what the relay
//! did on the guest side.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;
use std::time::Instant;

use crate::guest::{
    ConnError, ConnId, ConnState, Datagram, EchoRequest, GuestStack, PendingSyn, Refusal, SynId,
    Unreachable,
};

/// One fake guest connection.
#[derive(Debug, Default, Clone)]
pub struct FakeConn {
    pub from: Option<SocketAddr>,
    pub to: Option<SocketAddr>,
    pub established: bool,
    /// Bytes the relay delivered to the guest (taken by its application).
    pub received: Vec<u8>,
    /// Bytes the relay queued that the guest's application has not taken
    /// yet because its `window` is used up: the fake's send buffer (at most
    /// [`FakeGuest::send_buf`]), counted in `tcp_buffered`.
    pub queued: VecDeque<u8>,
    /// Bytes the guest app has written, not yet taken by the relay.
    pub outgoing: VecDeque<u8>,
    /// The guest sent FIN (after `outgoing`).
    pub guest_fin: bool,
    /// The relay sent FIN to the guest.
    pub relay_fin: bool,
    /// The relay reset the connection.
    pub aborted: bool,
    /// The relay released the handle.
    pub released: bool,
    /// The guest reset the connection.
    pub guest_reset: bool,
    /// Max bytes the guest will accept in total before the test drains it.
    pub window: usize,
}

impl FakeConn {
    /// Hand queued bytes to the guest's application as far as `window` allows.
    fn deliver(&mut self) {
        let n = self
            .window
            .saturating_sub(self.received.len())
            .min(self.queued.len());
        self.received.extend(self.queued.drain(..n));
    }
}

/// The fake guest stack.
#[derive(Debug, Default)]
pub struct FakeGuest {
    next: u64,
    pub syns: VecDeque<PendingSyn>,
    pub syn_conn: HashMap<SynId, ConnId>,
    pub refused: Vec<(SynId, Refusal)>,
    pub conns: HashMap<ConnId, FakeConn>,
    pub udp_in: VecDeque<(Datagram, Vec<u8>)>,
    pub udp_out: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    pub echo_in: VecDeque<(EchoRequest, Vec<u8>)>,
    pub echo_replies: Vec<(IpAddr, IpAddr, u16, u16, Vec<u8>)>,
    pub unreachables: Vec<(EchoRequest, Unreachable)>,
    /// Datagrams reported undeliverable: (destination, guest, length, how).
    pub udp_unreachables: Vec<(SocketAddr, SocketAddr, usize, Unreachable)>,
    /// Inbound connects are established at once unless this is false.
    pub refuse_inbound: bool,
    /// Send buffer per connection (bytes queued for the guest and not yet
    /// taken by it). Default 256 KiB, as the real stack's.
    pub send_buf: usize,
    pub polls: u64,
    /// Things to keep alive as long as the guest (e.g. the TAP device).
    pub keep: Vec<Box<dyn std::any::Any + Send>>,
}

impl FakeGuest {
    pub fn new() -> FakeGuest {
        FakeGuest {
            next: 1,
            send_buf: 256 * 1024,
            ..FakeGuest::default()
        }
    }

    /// The guest sends a SYN from `src` to `dst`.
    pub fn syn(&mut self, src: impl Into<SocketAddr>, dst: impl Into<SocketAddr>) -> SynId {
        let id = SynId(self.next);
        self.next += 1;
        let (src, dst) = (src.into(), dst.into());
        self.syns.push_back(PendingSyn { id, src, dst });
        id
    }

    /// The connection the relay accepted for `syn`, if it did.
    pub fn conn_of(&self, syn: SynId) -> Option<ConnId> {
        self.syn_conn.get(&syn).copied()
    }

    pub fn conn(&self, c: ConnId) -> Option<&FakeConn> {
        self.conns.get(&c)
    }

    pub fn write(&mut self, c: ConnId, data: &[u8]) {
        if let Some(k) = self.conns.get_mut(&c) {
            k.outgoing.extend(data);
        }
    }

    pub fn fin(&mut self, c: ConnId) {
        if let Some(k) = self.conns.get_mut(&c) {
            k.guest_fin = true;
        }
    }

    pub fn reset(&mut self, c: ConnId) {
        if let Some(k) = self.conns.get_mut(&c) {
            k.guest_reset = true;
        }
    }

    /// Let the guest accept `more` bytes (queued ones are taken at once).
    pub fn open_window(&mut self, c: ConnId, more: usize) {
        if let Some(k) = self.conns.get_mut(&c) {
            k.window = k.window.saturating_add(more);
            k.deliver();
        }
    }

    pub fn send_udp(
        &mut self,
        src: impl Into<SocketAddr>,
        dst: impl Into<SocketAddr>,
        data: &[u8],
    ) {
        self.udp_in.push_back((
            Datagram {
                src: src.into(),
                dst: dst.into(),
                len: data.len(),
            },
            data.to_vec(),
        ));
    }

    pub fn ping(
        &mut self,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) {
        self.echo_in.push_back((
            EchoRequest {
                src: src.into(),
                dst: dst.into(),
                ident,
                seq,
                len: data.len(),
            },
            data.to_vec(),
        ));
    }

    fn new_conn(&mut self, from: SocketAddr, to: SocketAddr, established: bool) -> ConnId {
        let c = ConnId(self.next);
        self.next += 1;
        self.conns.insert(
            c,
            FakeConn {
                from: Some(from),
                to: Some(to),
                established,
                window: usize::MAX,
                ..FakeConn::default()
            },
        );
        c
    }
}

impl GuestStack for FakeGuest {
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    fn poll(&mut self, _now: Instant) -> io::Result<()> {
        self.polls += 1;
        for k in self.conns.values_mut() {
            k.deliver();
        }
        Ok(())
    }
    fn poll_at(&self) -> Option<Instant> {
        None
    }
    fn tcp_next_syn(&mut self) -> Option<PendingSyn> {
        self.syns.pop_front()
    }
    fn tcp_accept(&mut self, _now: Instant, id: SynId) -> io::Result<ConnId> {
        if self.syn_conn.contains_key(&id) || self.refused.iter().any(|(s, _)| *s == id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "SYN already decided",
            ));
        }
        let c = self.new_conn(
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0).into(),
            true,
        );
        self.syn_conn.insert(id, c);
        Ok(c)
    }
    fn tcp_refuse(&mut self, _now: Instant, id: SynId, how: Refusal) {
        self.refused.push((id, how));
    }
    fn tcp_connect(
        &mut self,
        _now: Instant,
        from: SocketAddr,
        to: SocketAddr,
    ) -> io::Result<ConnId> {
        if self.refuse_inbound {
            return Err(io::Error::from(io::ErrorKind::ConnectionRefused));
        }
        Ok(self.new_conn(from, to, true))
    }
    fn tcp_state(&self, c: ConnId) -> ConnState {
        match self.conns.get(&c) {
            Some(k) => ConnState {
                established: k.established,
                closed: k.released,
                error: if k.guest_reset {
                    Some(ConnError::Reset)
                } else {
                    None
                },
                send_queue: k.queued.len(),
                send_space: if k.relay_fin || k.released || k.guest_reset {
                    0
                } else {
                    self.send_buf.saturating_sub(k.queued.len())
                },
            },
            None => ConnState {
                established: false,
                closed: true,
                error: Some(ConnError::Reset),
                ..ConnState::default()
            },
        }
    }
    /// Lends a scratch buffer (the fake copies), split in two slices when
    /// it can be, as a wrapped ring would lend it.
    fn tcp_send_with(
        &mut self,
        c: ConnId,
        max: usize,
        f: &mut dyn FnMut(&mut [u8], &mut [u8]) -> usize,
    ) -> io::Result<usize> {
        let send_buf = self.send_buf;
        let k = self.conns.get_mut(&c).ok_or(io::ErrorKind::NotConnected)?;
        if k.relay_fin {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let n = max.min(send_buf.saturating_sub(k.queued.len()));
        if n == 0 {
            return Ok(0);
        }
        let mut space = vec![0u8; n];
        let (a, b) = space.split_at_mut(n - n / 3);
        let written = f(a, b).min(n);
        k.queued.extend(space.get(..written).unwrap_or_default());
        k.deliver();
        Ok(written)
    }
    /// Lends the bytes the guest wrote, split in two slices when it can
    /// be, as a wrapped ring would lend them.
    fn tcp_recv_with(
        &mut self,
        c: ConnId,
        f: &mut dyn FnMut(&[u8], &[u8]) -> usize,
    ) -> io::Result<usize> {
        let k = self.conns.get_mut(&c).ok_or(io::ErrorKind::NotConnected)?;
        if k.outgoing.is_empty() {
            return if k.guest_fin {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let (x, y) = k.outgoing.as_slices();
        let (a, b) = if y.is_empty() {
            x.split_at(x.len() - x.len() / 3)
        } else {
            (x, y)
        };
        let n = f(a, b).min(k.outgoing.len());
        k.outgoing.drain(..n);
        Ok(n)
    }
    fn tcp_buffered(&self) -> usize {
        self.conns
            .values()
            .filter(|k| !k.aborted)
            .map(|k| k.outgoing.len() + k.queued.len())
            .sum()
    }
    fn tcp_shutdown(&mut self, c: ConnId) {
        if let Some(k) = self.conns.get_mut(&c) {
            k.relay_fin = true;
        }
    }
    fn tcp_abort(&mut self, c: ConnId) {
        if let Some(k) = self.conns.get_mut(&c) {
            k.aborted = true;
            k.released = true;
        }
    }
    fn tcp_close(&mut self, c: ConnId) {
        if let Some(k) = self.conns.get_mut(&c) {
            k.released = true;
        }
    }
    fn udp_recv(&mut self, buf: &mut [u8]) -> Option<Datagram> {
        let (d, data) = self.udp_in.pop_front()?;
        let n = data.len().min(buf.len());
        buf.get_mut(..n)?.copy_from_slice(data.get(..n)?);
        Some(Datagram { len: n, ..d })
    }
    fn udp_send(
        &mut self,
        _now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        data: &[u8],
    ) -> io::Result<()> {
        self.udp_out.push((src, dst, data.to_vec()));
        Ok(())
    }
    fn icmp_echo_recv(&mut self, buf: &mut [u8]) -> Option<EchoRequest> {
        let (r, data) = self.echo_in.pop_front()?;
        let n = data.len().min(buf.len());
        buf.get_mut(..n)?.copy_from_slice(data.get(..n)?);
        Some(EchoRequest { len: n, ..r })
    }
    fn icmp_echo_reply(
        &mut self,
        _now: Instant,
        from: IpAddr,
        to: IpAddr,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) -> io::Result<()> {
        self.echo_replies
            .push((from, to, ident, seq, data.to_vec()));
        Ok(())
    }
    fn udp_unreachable(
        &mut self,
        _now: Instant,
        dst: SocketAddr,
        guest: SocketAddr,
        len: usize,
        how: Unreachable,
    ) {
        self.udp_unreachables.push((dst, guest, len, how));
    }
    fn icmp_echo_unreachable(
        &mut self,
        _now: Instant,
        req: &EchoRequest,
        _data: &[u8],
        how: Unreachable,
    ) {
        self.unreachables.push((*req, how));
    }
}
