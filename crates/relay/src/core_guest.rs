//! The real guest-side engine: `ustack_core::Stack` in transparent mode on a
//! device (the TAP of `ustack run`), driven directly by the relay's own
//! epoll loop.
//!
//! Why not the `ustack_net` runtime: the relay already runs one thread with
//! epoll over the host sockets and the device fd; a second stack thread
//! would add a lock and a wake-up per event on both sides. Here one thread
//! does everything: the relay's `service` calls [`GuestStack::poll`], which
//! drains the device in bursts into `Stack::receive_burst` (coalescing the
//! guest's TCP segments), runs `Stack::poll` and writes the frames out;
//! socket calls between two polls queue frames that the next poll (at the
//! end of the same `service`) sends.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use ustack_core::tcp::{State, TcpConfig};
use ustack_core::time::Instant as CoreInstant;
use ustack_core::{
    Config, Limits, LinkOffload, PendingSynId, Refuse, SocketEvent, Stack, TcpError, TcpHandle,
    TransparentConfig, TxFrames, UdpAnyHandle,
};
use ustack_dev::{Device, FrameBatch};
use ustack_wire::ethernet::MacAddr;
use ustack_wire::icmpv4::DstUnreachable;
use ustack_wire::ipv4::Ipv4Cidr;
use ustack_wire::ipv6::Ipv6Cidr;

use crate::guest::{
    ConnError, ConnId, ConnState, Datagram, EchoRequest, GuestStack, PendingSyn, Refusal, SynId,
    Unreachable,
};

/// Our MAC on the guest's link (as slirp's gateway: 52:55:0a:00:02:02).
pub const GATEWAY_MAC: MacAddr = MacAddr([0x52, 0x55, 0x0a, 0x00, 0x02, 0x02]);

/// Frames taken from the device per `poll` (the fd stays readable, so the
/// relay comes back at once when more are waiting).
const RX_BUDGET: usize = 512;

/// Frames read from the device at once and handed to the stack as one
/// burst, in which consecutive TCP segments of a flow are coalesced
/// (`Stack::receive_burst`); Linux's NAPI budget.
const RX_BURST: usize = 64;

/// While the guest sends a frame at a time (request/response traffic),
/// `poll` reads one frame and leaves the device: the relay's next
/// `epoll_wait` (level-triggered on the device) reports it again at once if
/// more came, and the read that would find nothing is saved (one system call
/// of the six or seven an exchange costs). One poll in this many reads the
/// device dry instead, to notice bursts; a burst of two or more frames turns
/// draining back on until a drain finds one frame or none.
const RX_SINGLE_PROBE: u32 = 16;

/// Core time starts at 1 s so that "time zero" never means "now".
const CORE_EPOCH_MICROS: u64 = 1_000_000;

/// What the guest-side stack needs to know.
#[derive(Debug, Clone)]
pub struct CoreGuestConfig {
    /// The guest's address (never answered for in ARP).
    pub guest: Ipv4Addr,
    /// Our address on the link (the gateway) and the link's prefix.
    pub gateway: Ipv4Addr,
    pub prefix_len: u8,
    /// IP MTU of the link.
    pub mtu: usize,
    pub tcp: TcpConfig,
    pub limits: Limits,
    pub transparent: TransparentConfig,
    /// Coalesce the guest's TCP segments before TCP input (software GRO,
    /// `Stack::set_gro`); on by default.
    pub gro: bool,
    /// IPv6 addresses the engine owns on the link besides its link-local
    /// one (the gateway's and the nameserver's, e.g. fd00::2/64 and
    /// fd00::3/64): Neighbor Discovery answers for them. Empty: none.
    pub addrs6: Vec<Ipv6Cidr>,
    /// Router advertisements and DHCP servers for the guest (none by
    /// default; `cli::guest_config` turns them on, see `addr_services`).
    pub services: ustack_core::AddressServices,
}

impl CoreGuestConfig {
    pub fn new(guest: Ipv4Addr, gateway: Ipv4Addr, prefix_len: u8, mtu: usize) -> Self {
        CoreGuestConfig {
            guest,
            gateway,
            prefix_len,
            mtu,
            // A relay forwards what the host side gave it as soon as it can:
            // the application on the host already chose when to send, and
            // Nagle here would hold a reply behind an unacknowledged one.
            tcp: TcpConfig {
                nodelay: true,
                // RFC 9293 3.7.1: the MSS option carries "the maximum
                // receive segment size at the TCP endpoint"; offer what the
                // link carries (MTU minus the 20-byte IPv4 and TCP headers)
                // so that at MTU 65520 the guest sends 64 KB segments
                // instead of the 1460-byte default.
                mss: u16::try_from(mtu.saturating_sub(40).max(536)).unwrap_or(u16::MAX),
                ..TcpConfig::default()
            },
            limits: Limits::default(),
            transparent: TransparentConfig {
                guest: Some(guest),
                ..TransparentConfig::default()
            },
            gro: true,
            addrs6: Vec::new(),
            services: ustack_core::AddressServices::default(),
        }
    }
}

/// `ustack_core::Stack` (transparent mode) + a device, as a [`GuestStack`].
pub struct CoreGuest {
    stack: Stack,
    dev: Box<dyn Device + Send>,
    epoch: Instant,
    udp: UdpAnyHandle,
    syns: HashMap<u64, PendingSynId>,
    conns: HashMap<u64, TcpHandle>,
    /// The reverse of `conns`, for readiness events.
    by_handle: HashMap<TcpHandle, u64>,
    next_id: u64,
    rx: FrameBatch,
    /// Read one frame per poll (see [`RX_SINGLE_PROBE`]), and the polls
    /// since the last drain.
    rx_single: bool,
    rx_polls: u32,
    /// Frames the device refused (full or failing).
    pub tx_drops: u64,
    /// The frames the stack transmitted, taken from it after each step
    /// (frames by ownership: a TCP payload goes from the connection's send
    /// buffer to the device without a copy, see `Stack::set_tx_owned`).
    frames: TxFrames,
    /// The keep-alive tunables (`ustack sysctl`), kept for reads while the
    /// TCP configuration turns keep-alive off.
    keepalive: ustack_core::tcp::KeepAlive,
}

fn random_bytes(buf: &mut [u8]) {
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(buf).is_ok() {
            return;
        }
    }
    // Fallback: time and pid through a mixer (ISNs stay unpredictable
    // enough for a local guest link, never constant).
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id()).rotate_left(32);
    for b in buf.iter_mut() {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        *b = (z ^ (z >> 31)) as u8;
    }
}

impl CoreGuest {
    pub fn new(dev: Box<dyn Device + Send>, cfg: CoreGuestConfig) -> io::Result<CoreGuest> {
        let addr = Ipv4Cidr::new(cfg.gateway, cfg.prefix_len).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "bad gateway prefix length")
        })?;
        let mut secret = [0u8; 16];
        random_bytes(&mut secret);
        let mut seed = [0u8; 8];
        random_bytes(&mut seed);
        let config = Config {
            mac: GATEWAY_MAC,
            addr,
            gateway: None,
            mtu: cfg.mtu,
            tcp: cfg.tcp,
            limits: cfg.limits,
            secret,
            seed: u64::from_le_bytes(seed),
        };
        let epoch = Instant::now();
        let mut stack = Stack::new_transparent(
            config,
            cfg.transparent,
            CoreInstant::from_micros(CORE_EPOCH_MICROS),
        );
        for a in &cfg.addrs6 {
            stack.add_ipv6_address(*a).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {e}", a.address))
            })?;
        }
        let udp = stack
            .udp_bind_any()
            .map_err(|e| io::Error::new(e.errno_kind(), e.to_string()))?;
        stack.set_gro(cfg.gro);
        stack.set_tx_owned(true);
        stack
            .set_address_services(CoreInstant::from_micros(CORE_EPOCH_MICROS), cfg.services)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let off = dev.offloads();
        stack.set_link_offload(LinkOffload {
            vnet_hdr: off.vnet_hdr,
            tso4: off.tso4,
            tso6: off.tso6,
            tx_csum: off.tx_csum,
        });
        // A GSO super-frame from the guest is up to 64 KB whatever the MTU.
        let rx_len = if off.vnet_hdr {
            ustack_dev::VNET_HDR_LEN + 14 + 40 + 65_535
        } else {
            (cfg.mtu + 14).max(1514)
        };
        // Slots are touched only as frames fill them.
        let rx = FrameBatch::new(RX_BURST, rx_len);
        Ok(CoreGuest {
            stack,
            dev,
            epoch,
            udp,
            syns: HashMap::new(),
            conns: HashMap::new(),
            by_handle: HashMap::new(),
            next_id: 1,
            rx,
            rx_single: false,
            rx_polls: 0,
            tx_drops: 0,
            frames: TxFrames::new(),
            keepalive: ustack_core::tcp::KeepAlive::default(),
        })
    }

    /// The stack (diagnostics: counters, sockets).
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    fn core_now(&self, now: Instant) -> CoreInstant {
        let d = now.saturating_duration_since(self.epoch);
        CoreInstant::from_micros(
            CORE_EPOCH_MICROS.saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        )
    }

    fn std_time(&self, t: CoreInstant) -> Instant {
        let micros = t.total_micros().saturating_sub(CORE_EPOCH_MICROS);
        self.epoch + Duration::from_micros(micros)
    }

    fn alloc(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn handle(&self, c: ConnId) -> io::Result<TcpHandle> {
        self.conns
            .get(&c.0)
            .copied()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

fn io_err(e: TcpError) -> io::Error {
    io::Error::new(e.errno_kind(), e.to_string())
}

fn code(u: Unreachable) -> DstUnreachable {
    match u {
        Unreachable::Net => DstUnreachable::NetUnreachable,
        Unreachable::Host => DstUnreachable::HostUnreachable,
        Unreachable::Port => DstUnreachable::PortUnreachable,
        Unreachable::AdminProhibited => DstUnreachable::AdminProhibited,
    }
}

impl GuestStack for CoreGuest {
    fn ctl_devices(&self) -> Vec<ustack_ctl::DeviceInfo> {
        let c = self.stack.config();
        vec![ustack_ctl::DeviceInfo {
            name: "tap (guest link)".into(),
            mac: c.mac.to_string(),
            addrs: std::iter::once(c.addr.to_string())
                .chain(self.stack.ipv6_addresses().iter().map(|a| a.to_string()))
                .collect(),
            mtu: c.mtu as u32,
        }]
    }

    fn ctl_sockets(&self, detail: bool) -> Vec<(ustack_ctl::SocketEntry, Option<ConnId>)> {
        let now = self.core_now(Instant::now());
        self.stack
            .tcp_sockets_detailed(detail)
            .iter()
            .map(|(h, t, d)| {
                let mut e = ustack_ctl::socket_entry(t, d.as_ref(), now);
                // `TcpStatus` carries IPv4 addresses: an IPv6 connection's
                // come from the table.
                if let Ok((l @ SocketAddr::V6(_), r)) = self.stack.tcp_addrs(*h) {
                    e.local = l.to_string();
                    e.peer = r.to_string();
                }
                (e, self.by_handle.get(h).map(|&id| ConnId(id)))
            })
            .collect()
    }

    fn ctl_counters(&self) -> Vec<(String, u64)> {
        ustack_ctl::counter_names(self.stack.counters())
    }

    fn ctl_tunables(&self) -> Option<ustack_socket::sysctl::Tunables> {
        let tcp = self.stack.config().tcp.clone();
        let keepalive = tcp.keepalive.unwrap_or(self.keepalive);
        Some(ustack_socket::sysctl::Tunables {
            tcp,
            keepalive,
            // The relay's guest-side sockets have no send-queue low-water
            // mark (a change is refused): no limit.
            notsent_lowat: None,
            ip_default_ttl: self.stack.ip_default_ttl(),
        })
    }

    fn ctl_set_tunables(&mut self, t: ustack_socket::sysctl::Tunables) -> Result<(), String> {
        ustack_ctl::sysctl::check_applicable(&t)?;
        // Kept for reads: the relay's connections use no keep-alive, so
        // they are what one would use (as Linux's for sockets without
        // SO_KEEPALIVE).
        self.keepalive = t.keepalive;
        let mut tcp = t.tcp;
        if tcp.keepalive.is_some() {
            tcp.keepalive = Some(t.keepalive);
        }
        self.stack.set_tcp_config(tcp);
        // Checked above: 1..=255.
        let _ = self.stack.set_ip_default_ttl(t.ip_default_ttl);
        Ok(())
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.dev.raw_fd()
    }

    fn poll(&mut self, now: Instant) -> io::Result<()> {
        let t = self.core_now(now);
        let CoreGuest {
            stack,
            dev,
            rx,
            tx_drops,
            rx_single,
            rx_polls,
            frames,
            ..
        } = self;
        let mut result = Ok(());
        *rx_polls = rx_polls.wrapping_add(1);
        if *rx_single && *rx_polls % RX_SINGLE_PROBE != 0 {
            rx.clear();
            let r = match rx.next_slot() {
                Some(slot) => dev.recv(slot),
                None => Ok(None),
            };
            match r {
                Ok(Some(n)) => {
                    rx.commit(n);
                    let mut out = |f: &[u8]| {
                        if dev_send(&mut **dev, f).is_err() {
                            *tx_drops += 1;
                        }
                    };
                    stack.receive_burst(t, rx.iter(), &mut out);
                    write_frames(stack, &mut **dev, tx_drops, frames);
                }
                Ok(None) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => result = Err(e),
            }
            transmit(stack, &mut **dev, tx_drops, frames, t);
            return result;
        }
        let mut taken = 0;
        while taken < RX_BUDGET {
            match dev.recv_batch(rx) {
                Ok(0) => break,
                Ok(n) => {
                    taken += n;
                    let mut out = |f: &[u8]| {
                        if dev_send(&mut **dev, f).is_err() {
                            *tx_drops += 1;
                        }
                    };
                    // `dev` is borrowed by `out`; receive through a split borrow.
                    stack.receive_burst(t, rx.iter(), &mut out);
                    write_frames(stack, &mut **dev, tx_drops, frames);
                    if n < rx.capacity() {
                        // The device had no more (or failed: the error
                        // comes with the next poll).
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => taken += 1,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // Only a device with a descriptor the relay waits on can be left
        // with frames in it (its readiness brings the relay back).
        *rx_single = taken <= 1 && dev.raw_fd().is_some();
        *rx_polls = 0;
        transmit(stack, &mut **dev, tx_drops, frames, t);
        result
    }

    fn flush(&mut self, now: Instant) -> io::Result<()> {
        let t = self.core_now(now);
        let CoreGuest {
            stack,
            dev,
            tx_drops,
            frames,
            ..
        } = self;
        transmit(stack, &mut **dev, tx_drops, frames, t);
        Ok(())
    }

    fn poll_at(&self) -> Option<Instant> {
        self.stack.poll_at().map(|t| self.std_time(t))
    }

    fn withdraw_services(&mut self, now: Instant) -> io::Result<()> {
        let t = self.core_now(now);
        self.stack
            .set_address_services(t, ustack_core::AddressServices::default())
            .map_err(io::Error::other)?;
        self.flush(now)
    }

    fn tcp_next_syn(&mut self) -> Option<PendingSyn> {
        let p = self.stack.tcp_next_pending_syn()?;
        let id = self.alloc();
        self.syns.insert(id, p.id);
        Some(PendingSyn {
            id: SynId(id),
            src: p.remote,
            dst: p.local,
        })
    }

    fn tcp_accept(&mut self, now: Instant, id: SynId) -> io::Result<ConnId> {
        let p = self
            .syns
            .remove(&id.0)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let t = self.core_now(now);
        let h = self.stack.tcp_accept_pending(t, p).map_err(io_err)?;
        let c = self.alloc();
        self.conns.insert(c, h);
        self.by_handle.insert(h, c);
        Ok(ConnId(c))
    }

    fn tcp_refuse(&mut self, now: Instant, id: SynId, how: Refusal) {
        let Some(p) = self.syns.remove(&id.0) else {
            return;
        };
        let how = match how {
            Refusal::Reset => Refuse::Rst,
            Refusal::Unreachable(u) => Refuse::IcmpUnreachable(code(u)),
        };
        let t = self.core_now(now);
        self.stack.tcp_refuse_pending(t, p, how);
    }

    fn tcp_connect(
        &mut self,
        now: Instant,
        from: SocketAddr,
        to: SocketAddr,
    ) -> io::Result<ConnId> {
        let t = self.core_now(now);
        let h = self
            .stack
            .tcp_connect_addr(t, to, Some(from))
            .map_err(|e| io::Error::new(e.errno_kind(), e.to_string()))?;
        let c = self.alloc();
        self.conns.insert(c, h);
        self.by_handle.insert(h, c);
        Ok(ConnId(c))
    }

    fn tcp_state(&self, c: ConnId) -> ConnState {
        let gone = ConnState {
            established: false,
            closed: true,
            error: Some(ConnError::Reset),
            ..ConnState::default()
        };
        let Some(h) = self.conns.get(&c.0) else {
            return gone;
        };
        let Ok(st) = self.stack.tcp_status(*h) else {
            return gone;
        };
        let error = match st.pending_error {
            Some(TcpError::ConnectionReset) | Some(TcpError::ConnectionAborted) => {
                Some(ConnError::Reset)
            }
            Some(TcpError::TimedOut) => Some(ConnError::TimedOut),
            Some(TcpError::ConnectionRefused) => Some(ConnError::Refused),
            Some(TcpError::HostUnreachable) => Some(ConnError::Unreachable),
            _ => None,
        };
        let established = !matches!(
            st.state,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        );
        // Finished on the guest side once nothing is left to read.
        let closed = matches!(st.state, State::Closed | State::TimeWait) && st.recv_queue == 0;
        let send_space = if st.can_send && st.pending_error.is_none() {
            st.send_buffer.saturating_sub(st.send_queue)
        } else {
            0
        };
        ConnState {
            established,
            closed,
            error,
            send_queue: st.send_queue,
            send_space,
        }
    }

    fn tcp_send_with(
        &mut self,
        c: ConnId,
        max: usize,
        f: &mut dyn FnMut(&mut [u8], &mut [u8]) -> usize,
    ) -> io::Result<usize> {
        let h = self.handle(c)?;
        match self.stack.tcp_send_with(h, max, |a, b| f(a, b)) {
            Ok(n) => Ok(n),
            Err(TcpError::WouldBlock) => Ok(0),
            Err(e) => Err(io_err(e)),
        }
    }

    fn tcp_recv_with(
        &mut self,
        c: ConnId,
        f: &mut dyn FnMut(&[u8], &[u8]) -> usize,
    ) -> io::Result<usize> {
        let h = self.handle(c)?;
        self.stack.tcp_recv_with(h, |a, b| f(a, b)).map_err(io_err)
    }

    fn tcp_buffered(&self) -> usize {
        self.stack.tcp_buffered()
    }

    fn tcp_send(&mut self, c: ConnId, data: &[u8]) -> io::Result<usize> {
        let h = self.handle(c)?;
        match self.stack.tcp_send(h, data) {
            Ok(n) => Ok(n),
            Err(TcpError::WouldBlock) => Ok(0),
            Err(e) => Err(io_err(e)),
        }
    }

    fn tcp_recv(&mut self, c: ConnId, buf: &mut [u8]) -> io::Result<usize> {
        let h = self.handle(c)?;
        self.stack.tcp_recv(h, buf).map_err(io_err)
    }

    fn tcp_shutdown(&mut self, c: ConnId) {
        if let Ok(h) = self.handle(c) {
            let _ = self.stack.tcp_shutdown(h);
        }
    }

    fn tcp_abort(&mut self, c: ConnId) {
        if let Some(h) = self.conns.remove(&c.0) {
            self.by_handle.remove(&h);
            self.stack.tcp_abort(h);
        }
    }

    fn tcp_close(&mut self, c: ConnId) {
        if let Some(h) = self.conns.remove(&c.0) {
            self.by_handle.remove(&h);
            self.stack.tcp_close(h);
        }
    }

    fn take_conn_events(&mut self, out: &mut Vec<ConnId>) -> bool {
        let CoreGuest {
            stack, by_handle, ..
        } = self;
        stack.take_events(&mut |e| {
            if let SocketEvent::Tcp(h, _) = e {
                if let Some(&c) = by_handle.get(&h) {
                    out.push(ConnId(c));
                }
            }
        });
        true
    }

    fn udp_recv(&mut self, buf: &mut [u8]) -> Option<Datagram> {
        let (len, src, dst) = self.stack.udp_recv_from_to(self.udp, buf).ok()?;
        Some(Datagram { src, dst, len })
    }

    fn udp_send(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst: SocketAddr,
        data: &[u8],
    ) -> io::Result<()> {
        let t = self.core_now(now);
        self.stack
            .udp_send_from(t, self.udp, data, src, dst)
            .map(|_| ())
            .map_err(|e| io::Error::new(e.errno_kind(), e.to_string()))
    }

    fn udp_unreachable(
        &mut self,
        now: Instant,
        dst: SocketAddr,
        guest: SocketAddr,
        len: usize,
        how: Unreachable,
    ) {
        let t = self.core_now(now);
        let _ = self
            .stack
            .udp_unreachable_from(t, dst, guest, len, code(how));
    }

    fn icmp_echo_recv(&mut self, buf: &mut [u8]) -> Option<EchoRequest> {
        let r = self.stack.icmp_echo_request_recv(buf)?;
        Some(EchoRequest {
            src: r.src,
            dst: r.dst,
            ident: r.ident,
            seq: r.seq,
            len: r.len.min(buf.len()),
        })
    }

    fn icmp_echo_reply(
        &mut self,
        now: Instant,
        from: IpAddr,
        to: IpAddr,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) -> io::Result<()> {
        let t = self.core_now(now);
        self.stack
            .icmp_echo_reply_from(t, from, to, ident, seq, data)
            .map_err(|e| io::Error::new(e.errno_kind(), e.to_string()))
    }

    fn icmp_echo_unreachable(
        &mut self,
        now: Instant,
        req: &EchoRequest,
        data: &[u8],
        how: Unreachable,
    ) {
        let t = self.core_now(now);
        let _ = self.stack.icmp_unreachable_for_echo(
            t,
            req.dst,
            req.src,
            req.ident,
            req.seq,
            data,
            code(how),
        );
    }
}

/// Run the stack's output and timers (bounded work per `Stack::poll`; run
/// it again while it is due) and write the frames to the device.
fn transmit(
    stack: &mut Stack,
    dev: &mut dyn Device,
    tx_drops: &mut u64,
    frames: &mut TxFrames,
    t: CoreInstant,
) {
    for _ in 0..8 {
        stack.poll(t, &mut |f| {
            if dev_send(dev, f).is_err() {
                *tx_drops += 1;
            }
        });
        write_frames(stack, dev, tx_drops, frames);
        if stack.poll_at().is_none_or(|at| at > t) {
            break;
        }
    }
}

/// Write the frames the stack handed out by ownership, each in one
/// (vectored) write, then let go of the send-buffer storage they held.
fn write_frames(
    stack: &mut Stack,
    dev: &mut dyn Device,
    tx_drops: &mut u64,
    frames: &mut TxFrames,
) {
    if !stack.has_tx_frames() {
        return;
    }
    stack.swap_tx_frames(frames);
    for f in frames.iter() {
        let r = f.with_slices(|parts| dev.send_vectored(parts));
        if r.is_err() {
            *tx_drops += 1;
        }
    }
    frames.release_payloads();
}

fn dev_send(dev: &mut dyn Device, frame: &[u8]) -> io::Result<()> {
    dev.send(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_mss_follows_the_link_mtu() {
        let g = Ipv4Addr::new(10, 0, 2, 15);
        let gw = Ipv4Addr::new(10, 0, 2, 2);
        assert_eq!(CoreGuestConfig::new(g, gw, 24, 65520).tcp.mss, 65480);
        assert_eq!(CoreGuestConfig::new(g, gw, 24, 1500).tcp.mss, 1460);
        // Never below the IPv4 minimum (RFC 9293: 536), never above u16.
        assert_eq!(CoreGuestConfig::new(g, gw, 24, 100).tcp.mss, 536);
        assert_eq!(CoreGuestConfig::new(g, gw, 24, 1 << 20).tcp.mss, u16::MAX);
    }
}
