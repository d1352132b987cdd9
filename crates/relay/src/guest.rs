//! The guest side of the relay: what the relay needs from the user-space
//! stack that terminates the guest's packets. Kept small and engine-agnostic
//! so the relay can run over `ustack_core::Stack` (in "transparent" mode, see
//! `CORE_NEEDS.md`) or over a fake in tests.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::Instant;

/// A guest SYN waiting for the relay's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SynId(pub u64);

/// An established (or establishing) guest-side TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub u64);

/// A guest's connection attempt to an arbitrary destination, handshake not
/// yet completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingSyn {
    pub id: SynId,
    /// The guest's address and port.
    pub src: SocketAddr,
    /// Where the guest wants to go (same family as `src`).
    pub dst: SocketAddr,
}

/// ICMP destination-unreachable codes the relay may answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    Net,
    Host,
    Port,
    AdminProhibited,
}

/// How to refuse a pending SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Answer RST|ACK (the host refused the connection).
    Reset,
    /// Answer ICMP destination unreachable (host/net unreachable, timeout).
    Unreachable(Unreachable),
}

/// Why a guest connection ended abnormally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnError {
    Reset,
    TimedOut,
    Refused,
    Unreachable,
}

/// What the relay needs to know about a guest connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnState {
    /// Handshake completed.
    pub established: bool,
    /// The connection is fully closed on the guest side (the handle may be released).
    pub closed: bool,
    /// Abnormal end.
    pub error: Option<ConnError>,
    /// Bytes queued for the guest and not yet acknowledged by it.
    pub send_queue: usize,
    /// Bytes a send would take now (free send-buffer space; 0 when the
    /// connection cannot send).
    pub send_space: usize,
}

/// A datagram the guest sent to anywhere outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub len: usize,
}

/// An ICMP echo request from the guest (ICMPv6 for IPv6 addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRequest {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ident: u16,
    pub seq: u16,
    pub len: usize,
}

/// The guest-side engine. All methods are non-blocking.
pub trait GuestStack {
    /// Descriptor to wait on for guest frames (`None` = only timers).
    fn raw_fd(&self) -> Option<RawFd>;

    /// For the control endpoint (`ustack ps`): the guest-side device.
    fn ctl_devices(&self) -> Vec<ustack_ctl::DeviceInfo> {
        Vec::new()
    }
    /// For `ustack ss`: the engine's sockets, each with the connection it
    /// stands for in this trait's terms (if it is one the relay holds).
    fn ctl_sockets(&self, detail: bool) -> Vec<(ustack_ctl::SocketEntry, Option<ConnId>)> {
        let _ = detail;
        Vec::new()
    }
    /// For `ustack nstat`: the engine's counters by `nstat` name.
    fn ctl_counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// For `ustack sysctl`: the engine's tunables (None: it has none).
    fn ctl_tunables(&self) -> Option<ustack_socket::sysctl::Tunables> {
        None
    }
    /// For `ustack sysctl NAME=VALUE`: new tunables for new connections;
    /// an error (nothing changed) for tunables the engine cannot apply.
    fn ctl_set_tunables(&mut self, t: ustack_socket::sysctl::Tunables) -> Result<(), String> {
        let _ = t;
        Err("this relay's engine has no tunables".into())
    }
    /// Receive what the guest sent, run timers and transmit what is queued.
    fn poll(&mut self, now: Instant) -> io::Result<()>;
    /// When `poll` must be called next even without guest frames.
    fn poll_at(&self) -> Option<Instant>;
    /// Transmit what socket calls queued and run due timers, *without*
    /// taking new frames from the guest: the relay calls this last in an
    /// iteration, so that nothing the guest sends (a SYN, a datagram) is
    /// taken in after the relay looked for it and then left waiting for
    /// the next wake-up (the guest's descriptor stays readable instead).
    fn flush(&mut self, now: Instant) -> io::Result<()> {
        self.poll(now)
    }

    /// The relay is going away from a link that stays (`attach`): stop
    /// the address services, sending what RFC 4861 6.2.5 asks of a router
    /// that stops advertising (a final advertisement with Router Lifetime
    /// zero, so the guest drops its default route through us at once),
    /// and transmit it.
    fn withdraw_services(&mut self, now: Instant) -> io::Result<()> {
        let _ = now;
        Ok(())
    }

    /// Next SYN to any destination that awaits a decision.
    fn tcp_next_syn(&mut self) -> Option<PendingSyn>;
    /// Complete the handshake of a pending SYN (send SYN|ACK).
    fn tcp_accept(&mut self, now: Instant, id: SynId) -> io::Result<ConnId>;
    /// Refuse a pending SYN.
    fn tcp_refuse(&mut self, now: Instant, id: SynId, how: Refusal);
    /// Open a connection to the guest (inbound port forward), appearing
    /// to come from `from` (both of one family).
    fn tcp_connect(&mut self, now: Instant, from: SocketAddr, to: SocketAddr)
        -> io::Result<ConnId>;
    fn tcp_state(&self, c: ConnId) -> ConnState;
    /// The connections that gained something since the last call (data or
    /// end of stream to read, send space, established, closed or reset),
    /// appended to `out`, so that the relay services only those. Returns
    /// false if this guest cannot tell: the relay then services every
    /// connection on every iteration.
    fn take_conn_events(&mut self, out: &mut Vec<ConnId>) -> bool {
        let _ = out;
        false
    }
    /// Queue bytes for the guest written in place: `f` is lent up to `max`
    /// bytes of the connection's free send-buffer space as two slices (the
    /// second non-empty only where the space wraps around a ring), fills a
    /// prefix of the first then the second and returns how many bytes it
    /// wrote. Returns that count; `Ok(0)` without calling `f` when the
    /// buffer is full (or `max` is 0). `f` may be lent less than `max`
    /// although there is room; it must not call back into the guest.
    ///
    /// This is how the relay moves host bytes to the guest with one copy:
    /// `f` is `recv(2)` on the host socket straight into the buffer.
    fn tcp_send_with(
        &mut self,
        c: ConnId,
        max: usize,
        f: &mut dyn FnMut(&mut [u8], &mut [u8]) -> usize,
    ) -> io::Result<usize>;
    /// Take bytes from the guest in place: `f` is lent the bytes received
    /// and not yet taken as two slices (the second non-empty only where
    /// they wrap), consumes a prefix (of the first, then the second) and
    /// returns its length. Returns that count (`f` may take 0). Without
    /// data `f` is not called: `Ok(0)` = the guest sent FIN, `WouldBlock` =
    /// nothing yet, or the connection's error. `f` must not call back into
    /// the guest.
    ///
    /// The relay lends the bytes straight to `send(2)` on the host socket
    /// and consumes what the kernel took.
    fn tcp_recv_with(
        &mut self,
        c: ConnId,
        f: &mut dyn FnMut(&[u8], &[u8]) -> usize,
    ) -> io::Result<usize>;
    /// Queue bytes for the guest; `Ok(0)` = its send buffer is full. (A
    /// copy through [`GuestStack::tcp_send_with`].)
    fn tcp_send(&mut self, c: ConnId, data: &[u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < data.len() {
            let rest = data.get(done..).unwrap_or_default();
            match self.tcp_send_with(c, rest.len(), &mut |a, b| copy_into(rest, a, b)) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }
    /// Bytes from the guest; `Ok(0)` = the guest sent FIN; `WouldBlock` =
    /// nothing yet. (A copy through [`GuestStack::tcp_recv_with`].)
    fn tcp_recv(&mut self, c: ConnId, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp_recv_with(c, &mut |a, b| copy_from(a, b, buf))
    }
    /// Bytes held in the guest-side TCP buffers of every connection
    /// (released ones still finishing included): received from the guest
    /// and not yet taken, plus queued for the guest and not yet
    /// acknowledged. What the relay's flows hold; cheap (the relay asks on
    /// every pump). Default: 0, a guest that holds nothing.
    fn tcp_buffered(&self) -> usize {
        0
    }
    /// Send FIN after queued data.
    fn tcp_shutdown(&mut self, c: ConnId);
    /// Send RST and release the handle.
    fn tcp_abort(&mut self, c: ConnId);
    /// Release the handle after a graceful close (the stack finishes the close).
    fn tcp_close(&mut self, c: ConnId);

    /// Next UDP datagram the guest sent to a non-local destination, copied into `buf`.
    fn udp_recv(&mut self, buf: &mut [u8]) -> Option<Datagram>;
    /// Deliver a datagram to the guest, appearing to come from `src`.
    fn udp_send(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        data: &[u8],
    ) -> io::Result<()>;

    /// Tell the guest that the datagram it sent from `guest` to `dst`
    /// (`len` bytes of payload) cannot be delivered: ICMP destination
    /// unreachable `how` from `dst`, quoting the datagram's headers, so
    /// that a connected socket in the guest gets ECONNREFUSED (or
    /// EHOSTUNREACH, ...) as it would from a real host.
    fn udp_unreachable(
        &mut self,
        now: Instant,
        dst: SocketAddr,
        guest: SocketAddr,
        len: usize,
        how: Unreachable,
    );

    /// Next ICMP echo request from the guest (to any address), data copied into `buf`.
    fn icmp_echo_recv(&mut self, buf: &mut [u8]) -> Option<EchoRequest>;
    /// Send an echo reply to the guest from `from`.
    fn icmp_echo_reply(
        &mut self,
        now: Instant,
        from: IpAddr,
        to: IpAddr,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) -> io::Result<()>;
    /// Answer an echo request with ICMP destination unreachable from `req.dst`.
    fn icmp_echo_unreachable(
        &mut self,
        now: Instant,
        req: &EchoRequest,
        data: &[u8],
        how: Unreachable,
    );
}

/// Copy a prefix of `src` into `a` then `b`; the count.
pub(crate) fn copy_into(src: &[u8], a: &mut [u8], b: &mut [u8]) -> usize {
    let mut n = 0;
    for dst in [a, b] {
        let rest = src.get(n..).unwrap_or_default();
        let k = dst.len().min(rest.len());
        if let (Some(d), Some(s)) = (dst.get_mut(..k), rest.get(..k)) {
            d.copy_from_slice(s);
        }
        n += k;
    }
    n
}

/// Copy `a` then `b` into a prefix of `dst`, as far as it goes; the count.
pub(crate) fn copy_from(a: &[u8], b: &[u8], dst: &mut [u8]) -> usize {
    let mut n = 0;
    for src in [a, b] {
        let Some(rest) = dst.get_mut(n..) else { break };
        let k = src.len().min(rest.len());
        if let (Some(d), Some(s)) = (rest.get_mut(..k), src.get(..k)) {
            d.copy_from_slice(s);
        }
        n += k;
    }
    n
}
