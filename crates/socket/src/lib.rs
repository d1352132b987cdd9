//! BSD socket calls over a ustack engine: the layer between a program that
//! speaks `socket`/`connect`/`read`/`poll`/`setsockopt` and the sans-IO
//! [`Stack`].
//!
//! It owns what the engine deliberately does not: small-integer
//! descriptors, errno values as Linux gives them, the options a socket
//! carries before it has a connection (and hands to the engine when it
//! gets one), `poll`/`epoll` readiness with Linux's rules, Linux's
//! send-buffer accounting ([`wmem`]: how much a write takes, when a
//! writer waiting for room wakes), and blocking.
//!
//! Two layers:
//! - [`Host`]: single-threaded and non-blocking. Every call returns
//!   `Err(EAGAIN)` where Linux would block; the caller decides whether to
//!   wait. Time is injected ([`Host::advance_to`]), frames go in with
//!   [`Host::link_input`] and come out of [`Host::link_output`].
//! - [`ffi`]: the C ABI. A context holds a `Host` behind a lock with a
//!   condition variable; calls on blocking descriptors wait on it until
//!   another thread's input, a clock advance or a timeout lets them finish.
//!   The packetdrill adapter (`crates/packetdrill`) is built on it, and so
//!   will be the `LD_PRELOAD` library.
//!
//! TCP over IPv4 (`AF_INET`) and IPv6 (`AF_INET6`, dual-stack as on Linux:
//! an `AF_INET6` socket reaches IPv4 peers through IPv4-mapped addresses
//! `::ffff:a.b.c.d` unless `IPV6_V6ONLY`); a datagram socket is
//! `EPROTONOSUPPORT`.

pub mod ffi;
mod opts;
pub mod pipe;
pub mod sysctl;
mod tcp_info;
pub mod wmem;

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ustack_core::tcp::{OobError, State, TcpConfig};

use sysctl::Tunables;
use ustack_core::time::{Duration, Instant};
use ustack_core::{BindError, Config, ConnectError, SocketEvent, Stack, TcpError, TcpHandle};

pub use opts::SockOpts;
use wmem::SendBuf;

/// An errno value (`libc::E*`).
pub type Errno = i32;

/// Result of a socket call: `Err(libc::EAGAIN)` where Linux would block.
pub type SockResult<T> = Result<T, Errno>;

/// The lowest descriptor handed out by default (0-2 look like stdio to
/// programs); see [`Host::set_fd_base`].
pub const FIRST_FD: i32 = 3;

/// What a descriptor is.
enum Entry {
    Sock(Sock),
    Epoll(EpollSet),
    Pipe(pipe::PipeEnd),
}

/// A socket's connection state as the descriptor sees it.
#[derive(Debug, Clone, Copy)]
enum Tcp {
    /// Created, maybe bound; no engine object yet.
    Fresh {
        bound: Option<SocketAddr>,
    },
    Listen(TcpHandle),
    /// A connection, being opened (`connecting`) or open.
    Conn {
        h: TcpHandle,
        connecting: bool,
    },
    /// The connection attempt failed and the error was reported; the
    /// socket is closed (Linux: state CLOSE).
    Failed,
}

struct Sock {
    tcp: Tcp,
    /// An `AF_INET6` socket (addresses in and out are `sockaddr_in6`).
    v6: bool,
    /// `IPV6_V6ONLY` (an `AF_INET6` socket only; Linux's default
    /// `net.ipv6.bindv6only` is 0).
    v6only: bool,
    nonblock: bool,
    opts: SockOpts,
    /// `shutdown(SHUT_RD)`: reads return 0.
    rd_shut: bool,
    /// `shutdown(SHUT_WR)` done: writes fail with EPIPE.
    wr_shut: bool,
    /// An error (connect failure) to report through `SO_ERROR`.
    so_error: Option<Errno>,
    /// The connection's error was reported (Linux clears `sk_err` when
    /// it reports it): reads then see end of stream, writes `EPIPE`.
    err_reported: bool,
    /// Readiness events seen for this socket (edge-triggered epoll).
    events: u64,
    /// Linux's send-buffer accounting (boxed: most descriptors of a
    /// table are small).
    sb: Box<SendBuf>,
}

/// One registration of an epoll set.
#[derive(Debug, Clone, Copy)]
struct Interest {
    fd: i32,
    events: u32,
    data: u64,
    /// `Sock::events` when last reported (edge-triggered) or disarmed
    /// (`EPOLLONESHOT`).
    seen: Option<u64>,
    /// Readiness bits reported last (edge-triggered).
    last: u32,
}

#[derive(Default)]
struct EpollSet {
    interest: Vec<Interest>,
}

/// The engine with its descriptors, clock and link queue.
pub struct Host {
    stack: Stack,
    now: Instant,
    /// The configuration new sockets start from (sysctls).
    base: Tunables,
    fds: Vec<Option<Entry>>,
    by_handle: HashMap<TcpHandle, i32>,
    out: VecDeque<(Instant, Vec<u8>)>,
    /// Bumped by every call that may change what a blocked caller waits
    /// for (input, time, socket calls).
    generation: u64,
    /// The first descriptor number.
    fd_base: i32,
    /// Callers blocked in [`ffi`]: (id, the generation they last looked at).
    waiters: Vec<(u64, u64)>,
    next_waiter: u64,
    /// Scratch for `flush`'s readiness events.
    scratch_events: Vec<TcpHandle>,
    /// The pipes of `pipe(2)`, by id ([`pipe`]).
    pipes: HashMap<u64, pipe::Pipe>,
    next_pipe: u64,
}

/// Linux's `TCP_*` state numbers (`tcpi_state`).
pub fn linux_state(s: State) -> u8 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait => 6,
        State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

/// The errno Linux gives for an engine error.
pub fn tcp_errno(e: TcpError) -> Errno {
    match e {
        TcpError::InvalidHandle => libc::EBADF,
        TcpError::WouldBlock => libc::EAGAIN,
        TcpError::NotConnected => libc::ENOTCONN,
        TcpError::ConnectionRefused => libc::ECONNREFUSED,
        TcpError::ConnectionReset => libc::ECONNRESET,
        TcpError::ConnectionAborted => libc::ECONNABORTED,
        TcpError::TimedOut => libc::ETIMEDOUT,
        TcpError::HostUnreachable => libc::EHOSTUNREACH,
        TcpError::BrokenPipe => libc::EPIPE,
        TcpError::InvalidState => libc::EINVAL,
    }
}

fn bind_errno(e: BindError) -> Errno {
    match e {
        BindError::AddrInUse | BindError::Exhausted => libc::EADDRINUSE,
        BindError::AddrNotAvailable => libc::EADDRNOTAVAIL,
    }
}

fn connect_errno(e: ConnectError) -> Errno {
    match e {
        ConnectError::AddrInUse => libc::EADDRINUSE,
        ConnectError::NoRoute => libc::ENETUNREACH,
        ConnectError::Exhausted => libc::EADDRNOTAVAIL,
        ConnectError::InvalidAddress => libc::EINVAL,
    }
}

/// `poll` bits.
pub const POLLIN: u32 = libc::POLLIN as u32;
pub const POLLOUT: u32 = libc::POLLOUT as u32;
pub const POLLERR: u32 = libc::POLLERR as u32;
pub const POLLHUP: u32 = libc::POLLHUP as u32;
pub const POLLRDNORM: u32 = libc::POLLRDNORM as u32;
pub const POLLWRNORM: u32 = libc::POLLWRNORM as u32;
pub const POLLRDHUP: u32 = libc::POLLRDHUP as u32;

impl Host {
    /// A host running `config`, its clock starting at `now`.
    pub fn new(config: Config, now: Instant) -> Host {
        let base = Tunables {
            tcp: config.tcp.clone(),
            keepalive: config.tcp.keepalive.unwrap_or_default(),
            ..Tunables::default()
        };
        Host {
            stack: Stack::new(config, now),
            now,
            base,
            fds: Vec::new(),
            pipes: HashMap::new(),
            next_pipe: 0,
            by_handle: HashMap::new(),
            out: VecDeque::new(),
            generation: 0,
            fd_base: FIRST_FD,
            waiters: Vec::new(),
            next_waiter: 0,
            scratch_events: Vec::new(),
        }
    }

    /// A caller starts waiting, having looked at generation `gen`.
    fn waiter_enter(&mut self, gen: u64) -> u64 {
        self.next_waiter += 1;
        self.waiters.push((self.next_waiter, gen));
        self.next_waiter
    }

    fn waiter_leave(&mut self, id: u64) {
        self.waiters.retain(|w| w.0 != id);
    }

    /// Is a blocked caller yet to look at the latest change?
    fn waiters_behind(&self) -> bool {
        self.waiters.iter().any(|w| w.1 != self.generation)
    }

    /// Hand out descriptors from `base` on (before the first one): a host
    /// living inside a process that has real descriptors of its own keeps
    /// its numbers apart from them.
    pub fn set_fd_base(&mut self, base: i32) {
        self.fd_base = base.max(0);
    }

    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    /// Give the host a static IPv6 address (and its on-link prefix), as
    /// [`Stack::add_ipv6_address`].
    pub fn add_ipv6_address(
        &mut self,
        cidr: ustack_wire::ipv6::Ipv6Cidr,
    ) -> Result<(), ustack_core::Ipv6AddrError> {
        let r = self.stack.add_ipv6_address(cidr);
        self.flush();
        r
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    /// Changes since a waiter last looked (see [`ffi`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The configuration new sockets take (Linux: the sysctls).
    pub fn set_tunables(&mut self, mut t: Tunables) {
        // The stack refuses a TTL of 0 (which `sysctl::apply` never
        // makes): it keeps the one it has, and so do the tunables.
        let _ = self.stack.set_ip_default_ttl(t.ip_default_ttl);
        t.ip_default_ttl = self.stack.ip_default_ttl();
        self.base = t;
    }

    pub fn tunables(&self) -> &Tunables {
        &self.base
    }

    // ------------------------------------------------------------------
    // Clock and link
    // ------------------------------------------------------------------

    /// Move the clock to `t` (never back), firing every timer due on the
    /// way at its own time, so frames carry the time they left.
    pub fn advance_to(&mut self, t: Instant) {
        let mut guard = 0u32;
        while let Some(at) = self.stack.poll_at() {
            if at > t || guard > 1_000_000 {
                break;
            }
            guard += 1;
            self.now = self.now.max(at);
            self.flush();
        }
        self.now = self.now.max(t);
        self.flush();
    }

    /// Whether the link's queue drops every frame (see
    /// [`ustack_core::Stack::set_local_drop`]); the caller drops the frames.
    pub fn set_local_drop(&mut self, on: bool) {
        self.stack.set_local_drop(on);
    }

    /// Configure (`Some`) or remove (`None`) the metrics of the route to
    /// `dst` (see [`ustack_core::Stack::set_route_metrics`]).
    pub fn set_route_metrics(
        &mut self,
        dst: std::net::IpAddr,
        m: Option<ustack_core::RouteMetrics>,
    ) {
        let now = self.now;
        self.stack.set_route_metrics(now, dst, m);
    }

    /// When the engine next wants to run (a timer), if ever.
    pub fn next_timer(&self) -> Option<Instant> {
        self.stack.poll_at()
    }

    /// An Ethernet frame from the link.
    pub fn link_input(&mut self, frame: &[u8]) {
        let Host {
            stack, now, out, ..
        } = self;
        let at = *now;
        stack.receive(at, frame, &mut |f| out.push_back((at, f.to_vec())));
        self.flush();
    }

    /// Ethernet frames the link received together (one read of the
    /// device): the stack's GRO may coalesce their TCP segments, as
    /// [`ustack_core::Stack::receive_burst`] says.
    pub fn link_input_burst(&mut self, frames: &[Vec<u8>]) {
        let Host {
            stack, now, out, ..
        } = self;
        let at = *now;
        stack.receive_burst(at, frames.iter().map(|f| &f[..]), &mut |f| {
            out.push_back((at, f.to_vec()))
        });
        self.flush();
    }

    /// The next Ethernet frame for the link, with the time it left.
    pub fn link_output(&mut self) -> Option<(Instant, Vec<u8>)> {
        self.out.pop_front()
    }

    /// Frames waiting for the link.
    pub fn link_pending(&self) -> usize {
        self.out.len()
    }

    /// Run the engine's due work at `now` and collect readiness events.
    fn flush(&mut self) {
        let Host {
            stack, now, out, ..
        } = self;
        let at = *now;
        stack.poll(at, &mut |f| out.push_back((at, f.to_vec())));
        // A reused buffer: flush runs after every call and every timer.
        let mut evs = std::mem::take(&mut self.scratch_events);
        stack.take_events(&mut |e| {
            if let SocketEvent::Tcp(h, _) = e {
                evs.push(h);
            }
        });
        for h in evs.drain(..) {
            if let Some(&fd) = self.by_handle.get(&h) {
                if let Some(s) = self.sock_mut_opt(fd) {
                    s.events += 1;
                }
            }
        }
        self.scratch_events = evs;
        self.sync_send_bufs();
        self.generation += 1;
    }

    /// Note a change that may unblock a waiter (socket calls).
    pub fn touch(&mut self) {
        self.flush();
    }

    // ------------------------------------------------------------------
    // Descriptors
    // ------------------------------------------------------------------

    fn alloc(&mut self, e: Entry) -> i32 {
        let i = self
            .fds
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.fds.len());
        if i == self.fds.len() {
            self.fds.push(None);
        }
        self.fds[i] = Some(e);
        i as i32 + self.fd_base
    }

    fn slot(&self, fd: i32) -> Option<usize> {
        usize::try_from(fd.checked_sub(self.fd_base)?).ok()
    }

    fn entry(&self, fd: i32) -> Option<&Entry> {
        self.fds.get(self.slot(fd)?)?.as_ref()
    }

    fn entry_mut(&mut self, fd: i32) -> Option<&mut Entry> {
        let i = self.slot(fd)?;
        self.fds.get_mut(i)?.as_mut()
    }

    /// Is `fd` one of ours?
    pub fn is_fd(&self, fd: i32) -> bool {
        self.entry(fd).is_some()
    }

    fn sock(&self, fd: i32) -> SockResult<&Sock> {
        match self.entry(fd) {
            Some(Entry::Sock(s)) => Ok(s),
            Some(Entry::Epoll(_) | Entry::Pipe(_)) => Err(libc::ENOTSOCK),
            None => Err(libc::EBADF),
        }
    }

    fn sock_mut(&mut self, fd: i32) -> SockResult<&mut Sock> {
        match self.entry_mut(fd) {
            Some(Entry::Sock(s)) => Ok(s),
            Some(Entry::Epoll(_) | Entry::Pipe(_)) => Err(libc::ENOTSOCK),
            None => Err(libc::EBADF),
        }
    }

    fn sock_mut_opt(&mut self, fd: i32) -> Option<&mut Sock> {
        match self.entry_mut(fd) {
            Some(Entry::Sock(s)) => Some(s),
            _ => None,
        }
    }

    /// Does a call on `fd` wait (no `O_NONBLOCK`)? Epoll sets always may.
    pub fn is_blocking(&self, fd: i32) -> bool {
        match self.entry(fd) {
            Some(Entry::Sock(s)) => !s.nonblock,
            _ => true,
        }
    }

    /// The socket's `SO_RCVTIMEO` (`send == false`) or `SO_SNDTIMEO`.
    pub fn timeout(&self, fd: i32, send: bool) -> Option<Duration> {
        let s = self.sock(fd).ok()?;
        if send {
            s.opts.sndtimeo
        } else {
            s.opts.rcvtimeo
        }
    }

    // ------------------------------------------------------------------
    // Socket calls
    // ------------------------------------------------------------------

    /// `socket(2)`.
    pub fn socket(&mut self, domain: i32, ty: i32, protocol: i32) -> SockResult<i32> {
        if domain != libc::AF_INET && domain != libc::AF_INET6 {
            return Err(libc::EAFNOSUPPORT);
        }
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        match ty & !flags {
            libc::SOCK_STREAM => {}
            libc::SOCK_DGRAM | libc::SOCK_RAW => return Err(libc::EPROTONOSUPPORT),
            _ => return Err(libc::EINVAL),
        }
        if protocol != 0 && protocol != libc::IPPROTO_TCP {
            return Err(libc::EPROTONOSUPPORT);
        }
        let opts = SockOpts::new(&self.base);
        let sb = Box::new(SendBuf::new(opts.default_sndbuf, false));
        Ok(self.alloc(Entry::Sock(Sock {
            tcp: Tcp::Fresh { bound: None },
            v6: domain == libc::AF_INET6,
            v6only: false,
            nonblock: ty & libc::SOCK_NONBLOCK != 0,
            opts,
            rd_shut: false,
            wr_shut: false,
            so_error: None,
            err_reported: false,
            events: 0,
            sb,
        })))
    }

    /// Ports other descriptors hold (bound, listening or connected) that
    /// a bind of `me` to `addr` would collide with: the same port in a
    /// family both cover (see [`covers`]; Linux lets an IPv4 socket and a
    /// v6only or IPv6-address-bound `AF_INET6` one share a port).
    fn port_taken(&self, me: i32, addr: SocketAddr, reuse: bool) -> bool {
        let Ok(my) = self.sock(me) else {
            return false;
        };
        let mine = covers(my, addr);
        let port = addr.port();
        self.fds.iter().enumerate().any(|(i, e)| {
            let fd = i as i32 + self.fd_base;
            let Some(Entry::Sock(s)) = e else {
                return false;
            };
            if fd == me {
                return false;
            }
            let local = match s.tcp {
                Tcp::Fresh { bound: Some(b) } => Some(b),
                Tcp::Listen(h) | Tcp::Conn { h, .. } => self
                    .stack
                    .tcp_status(h)
                    .ok()
                    .map(|st| in_family(s.v6, st.local)),
                _ => None,
            };
            let Some(local) = local else {
                return false;
            };
            let theirs = covers(s, local);
            let overlap = (mine.0 && theirs.0) || (mine.1 && theirs.1);
            let reusable = reuse && s.opts.reuseaddr && !matches!(s.tcp, Tcp::Listen(_));
            local.port() == port && overlap && !reusable
        })
    }

    /// The socket's address family (`AF_INET` or `AF_INET6`).
    pub fn family(&self, fd: i32) -> SockResult<i32> {
        Ok(if self.sock(fd)?.v6 {
            libc::AF_INET6
        } else {
            libc::AF_INET
        })
    }

    /// `bind(2)`: an IPv4 address on an `AF_INET` socket, an IPv6 one
    /// (maybe IPv4-mapped) on an `AF_INET6` socket (else `EAFNOSUPPORT`).
    pub fn bind(&mut self, fd: i32, addr: SocketAddr) -> SockResult<()> {
        let me = self.stack.addr();
        let s = self.sock(fd)?;
        let reuse = s.opts.reuseaddr;
        let Tcp::Fresh { bound: None } = s.tcp else {
            return Err(libc::EINVAL);
        };
        let ours = match (s.v6, addr) {
            (false, SocketAddr::V4(a)) => a.ip().is_unspecified() || *a.ip() == me,
            (true, SocketAddr::V6(a)) => match a.ip().to_ipv4_mapped() {
                // Linux: an IPv4-mapped address on a v6only socket is EINVAL.
                Some(_) if s.v6only => return Err(libc::EINVAL),
                Some(v4) => v4.is_unspecified() || v4 == me,
                None => {
                    a.ip().is_unspecified()
                        || self
                            .stack
                            .ipv6_addresses()
                            .iter()
                            .any(|c| c.address == *a.ip())
                }
            },
            _ => return Err(libc::EAFNOSUPPORT),
        };
        if !ours {
            return Err(libc::EADDRNOTAVAIL);
        }
        if addr.port() != 0 && self.port_taken(fd, addr, reuse) {
            return Err(libc::EADDRINUSE);
        }
        self.sock_mut(fd)?.tcp = Tcp::Fresh { bound: Some(addr) };
        Ok(())
    }

    /// The engine configuration a socket's connection starts with.
    fn conn_config(&self, opts: &SockOpts) -> TcpConfig {
        opts.apply_to(&self.base.tcp)
    }

    /// `listen(2)`.
    pub fn listen(&mut self, fd: i32, backlog: i32) -> SockResult<()> {
        let s = self.sock(fd)?;
        let backlog = usize::try_from(backlog).unwrap_or(0);
        match s.tcp {
            Tcp::Fresh { bound } => {
                let cfg = self.conn_config(&s.opts);
                let (v6, v6only) = (s.v6, s.v6only);
                self.stack.set_tcp_config(cfg);
                let h = match bound.unwrap_or_else(|| unspecified(v6)) {
                    SocketAddr::V4(l) => self.stack.tcp_listen(l, backlog),
                    SocketAddr::V6(l) if v6only => self.stack.tcp_listen6_v6only(l, backlog),
                    SocketAddr::V6(l) => self.stack.tcp_listen6(l, backlog),
                }
                .map_err(bind_errno)?;
                self.by_handle.insert(h, fd);
                self.sock_mut(fd)?.tcp = Tcp::Listen(h);
                self.flush();
                Ok(())
            }
            // Linux lets a listener change its backlog.
            Tcp::Listen(_) => Ok(()),
            _ => Err(libc::EINVAL),
        }
    }

    /// `accept(2)`: the new descriptor and the peer's address.
    pub fn accept(&mut self, fd: i32, flags: i32) -> SockResult<(i32, SocketAddr)> {
        let s = self.sock(fd)?;
        let Tcp::Listen(l) = s.tcp else {
            return Err(libc::EINVAL);
        };
        let opts = s.opts.clone();
        let (v6, v6only) = (s.v6, s.v6only);
        // The child starts with the listener's buffer size and lock
        // (Linux copies `sk_sndbuf` and `sk_userlocks`).
        let sb = Box::new(SendBuf::new(s.sb.sndbuf, s.sb.locked));
        let Some(h) = self.stack.tcp_accept(l).map_err(tcp_errno)? else {
            return Err(libc::EAGAIN);
        };
        let peer = self
            .stack
            .tcp_status(h)
            .map(|st| in_family(v6, st.remote))
            .map_err(tcp_errno)?;
        let nfd = self.alloc(Entry::Sock(Sock {
            tcp: Tcp::Conn {
                h,
                connecting: false,
            },
            v6,
            v6only,
            nonblock: flags & libc::SOCK_NONBLOCK != 0,
            opts,
            rd_shut: false,
            wr_shut: false,
            so_error: None,
            err_reported: false,
            events: 0,
            sb,
        }));
        self.by_handle.insert(h, nfd);
        self.apply_conn_opts(nfd, None);
        self.flush();
        Ok((nfd, peer))
    }

    /// Hand the options that act on an open connection to the engine (a
    /// listener's go to the connections it will accept): all of them
    /// (`only == None`, a new connection), or the one just set.
    fn apply_conn_opts(&mut self, fd: i32, only: Option<(i32, i32)>) {
        let Ok(s) = self.sock(fd) else {
            return;
        };
        if let Tcp::Listen(_) = s.tcp {
            let cfg = self.conn_config(&s.opts);
            self.stack.set_tcp_config(cfg);
            return;
        }
        let Tcp::Conn { h, .. } = s.tcp else {
            return;
        };
        let o = s.opts.clone();
        let st = &mut self.stack;
        let is = |level: i32, name: i32| only.is_none_or(|w| w == (level, name));
        // The handle is live (we just looked it up); errors cannot happen
        // and would only mean the option is not applied.
        if is(libc::IPPROTO_TCP, libc::TCP_NODELAY) {
            // Setting it (again) also pushes what is pending, as on Linux.
            let _ = st.tcp_set_nodelay(h, o.nodelay);
        }
        if is(libc::SOL_SOCKET, libc::SO_KEEPALIVE)
            || is(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE)
            || is(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL)
            || is(libc::IPPROTO_TCP, libc::TCP_KEEPCNT)
        {
            let _ = st.tcp_set_keepalive_params(h, o.keepalive_params());
        }
        if is(libc::SOL_SOCKET, libc::SO_LINGER) {
            let _ = st.tcp_set_linger_zero(h, o.linger == Some(0));
        }
        if is(libc::SOL_SOCKET, libc::SO_OOBINLINE) {
            let _ = st.tcp_set_oob_inline(h, o.oobinline);
        }
        if is(libc::IPPROTO_TCP, libc::TCP_CORK) {
            let _ = st.tcp_set_cork(h, o.cork);
        }
        if is(libc::IPPROTO_TCP, libc::TCP_LINGER2) && o.linger2 != 0 {
            let secs = u64::try_from(o.linger2).unwrap_or(0);
            let _ = st.tcp_set_fin_wait2_timeout(h, Duration::from_secs(secs));
        }
        if is(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) {
            let _ = st.tcp_set_user_timeout(h, Duration::from_millis(u64::from(o.user_timeout)));
        }
        if is(libc::IPPROTO_TCP, libc::TCP_CONGESTION) {
            if let Some(cc) = o.congestion {
                let _ = st.tcp_set_congestion_control(h, cc);
            }
        }
    }

    /// `connect(2)`. `EINPROGRESS` when the handshake is under way (the
    /// caller of a blocking socket then waits with [`Host::connect_done`]).
    pub fn connect(&mut self, fd: i32, remote: SocketAddr) -> SockResult<()> {
        let s = self.sock(fd)?;
        match s.tcp {
            Tcp::Fresh { bound } => {
                let cfg = self.conn_config(&s.opts);
                let (v6, v6only) = (s.v6, s.v6only);
                let now = self.now;
                let h = match (v6, remote, bound) {
                    (false, SocketAddr::V4(r), None) => {
                        self.stack.set_tcp_config(cfg);
                        self.stack.tcp_connect(now, r, None)
                    }
                    (false, SocketAddr::V4(r), Some(SocketAddr::V4(b))) => {
                        self.stack.set_tcp_config(cfg);
                        self.stack.tcp_connect(now, r, Some(b))
                    }
                    (true, SocketAddr::V6(r), b) => {
                        // Linux: an IPv4-mapped peer of a v6only socket
                        // is unreachable.
                        if v6only && r.ip().to_ipv4_mapped().is_some() {
                            return Err(libc::ENETUNREACH);
                        }
                        let b = match b {
                            None => None,
                            Some(SocketAddr::V6(b)) => Some(b),
                            Some(SocketAddr::V4(_)) => return Err(libc::EINVAL),
                        };
                        self.stack.set_tcp_config(cfg);
                        self.stack.tcp_connect6(now, r, b)
                    }
                    _ => return Err(libc::EAFNOSUPPORT),
                }
                .map_err(connect_errno)?;
                self.by_handle.insert(h, fd);
                self.sock_mut(fd)?.tcp = Tcp::Conn {
                    h,
                    connecting: true,
                };
                self.apply_conn_opts(fd, None);
                self.flush();
                Err(libc::EINPROGRESS)
            }
            Tcp::Conn {
                connecting: true, ..
            } => match self.connect_done(fd) {
                Err(libc::EAGAIN) => Err(libc::EALREADY),
                Err(e) => Err(self.consume_so_error(fd).unwrap_or(e)),
                r => r,
            },
            Tcp::Conn { .. } => Err(libc::EISCONN),
            Tcp::Listen(_) => Err(libc::EISCONN),
            Tcp::Failed => Err(self.consume_so_error(fd).unwrap_or(libc::ECONNABORTED)),
        }
    }

    /// Take the pending `SO_ERROR` (a failed connect's) of `fd`.
    pub fn consume_so_error(&mut self, fd: i32) -> Option<Errno> {
        self.sock_mut(fd).ok()?.so_error.take()
    }

    /// Has the handshake of `fd` finished? `Ok` once connected, the error
    /// if it failed (which `connect` reports and clears; until then
    /// `SO_ERROR` holds it), `EAGAIN` while under way.
    pub fn connect_done(&mut self, fd: i32) -> SockResult<()> {
        let s = self.sock(fd)?;
        let Tcp::Conn { h, connecting } = s.tcp else {
            return match s.tcp {
                Tcp::Failed => Err(s.so_error.unwrap_or(libc::ECONNABORTED)),
                _ => Ok(()),
            };
        };
        if !connecting {
            return Ok(());
        }
        let r = self.stack.tcp_readiness(h).map_err(tcp_errno)?;
        let st = self.stack.tcp_status(h).map_err(tcp_errno)?;
        if let Some(e) = st.pending_error {
            let s = self.sock_mut(fd)?;
            s.tcp = Tcp::Failed;
            s.so_error = Some(tcp_errno(e));
            self.by_handle.remove(&h);
            self.stack.tcp_close(h);
            return Err(tcp_errno(e));
        }
        if r.is_connected() {
            if let Tcp::Conn { connecting, .. } = &mut self.sock_mut(fd)?.tcp {
                *connecting = false;
            }
            return Ok(());
        }
        if st.state == State::Closed {
            let s = self.sock_mut(fd)?;
            s.tcp = Tcp::Failed;
            s.so_error = Some(libc::ECONNREFUSED);
            self.by_handle.remove(&h);
            self.stack.tcp_close(h);
            return Err(libc::ECONNREFUSED);
        }
        Err(libc::EAGAIN)
    }

    /// The connection behind `fd` for a data call.
    fn conn(&mut self, fd: i32) -> SockResult<TcpHandle> {
        let s = self.sock(fd)?;
        match s.tcp {
            Tcp::Conn {
                h,
                connecting: false,
            } => Ok(h),
            Tcp::Conn {
                connecting: true, ..
            } => match self.connect_done(fd) {
                Ok(()) => self.conn(fd),
                Err(e) => Err(e),
            },
            _ => Err(libc::ENOTCONN),
        }
    }

    /// `recv(2)` with `MSG_PEEK` (`peek`): bytes read, 0 at end of stream.
    pub fn recv(&mut self, fd: i32, buf: &mut [u8], peek: bool) -> SockResult<usize> {
        let h = match self.conn(fd) {
            Ok(h) => h,
            // A handshake under way: nothing to read yet.
            Err(libc::EAGAIN) => return Err(libc::EAGAIN),
            Err(e) => return Err(e),
        };
        let rd_shut = self.sock(fd)?.rd_shut;
        if buf.is_empty() {
            return Ok(0);
        }
        let r = if peek {
            self.stack.tcp_peek(h, buf)
        } else {
            self.stack.tcp_recv(h, buf)
        };
        self.flush();
        match r {
            Ok(n) => Ok(n),
            // After SHUT_RD, queued data is still read (as on Linux), then
            // reads see end of stream instead of blocking.
            Err(TcpError::WouldBlock) if rd_shut => Ok(0),
            Err(TcpError::WouldBlock) => Err(libc::EAGAIN),
            Err(e) => match self.take_conn_error(fd, e) {
                // Reported before: the stream has ended.
                None => Ok(0),
                Some(e) => Err(e),
            },
        }
    }

    /// `recv(2)` with `MSG_OOB` (Linux `tcp_recv_urg`): the out-of-band
    /// octet of urgent data (`Some`), or end of stream (`None`). `EINVAL`
    /// when there is none or it was read; `EAGAIN` while its pointer came
    /// ahead of it (such a read never blocks).
    pub fn recv_oob(&mut self, fd: i32, peek: bool) -> SockResult<Option<u8>> {
        let h = self.conn(fd)?;
        let r = self.stack.tcp_recv_oob(h, peek).map_err(tcp_errno)?;
        self.flush();
        match r {
            Ok(b) => Ok(Some(b)),
            Err(OobError::None) => Err(libc::EINVAL),
            Err(OobError::NotYet) => Err(libc::EAGAIN),
            Err(OobError::Eof) => Ok(None),
        }
    }

    /// `ioctl(SIOCATMARK)`: the next byte to read is the out-of-band one.
    pub fn at_mark(&mut self, fd: i32) -> SockResult<bool> {
        match self.sock(fd)?.tcp {
            Tcp::Conn { h, .. } => self.stack.tcp_at_urgent_mark(h).map_err(tcp_errno),
            _ => Ok(false),
        }
    }

    /// A connection error met by a call: Linux reports it once (`sk_err`
    /// is cleared); None if it was reported already.
    fn take_conn_error(&mut self, fd: i32, e: TcpError) -> Option<Errno> {
        let s = self.sock_mut(fd).ok()?;
        s.so_error = None;
        if s.err_reported && e != TcpError::WouldBlock {
            return None;
        }
        s.err_reported = true;
        Some(tcp_errno(e))
    }

    /// `send(2)`: bytes queued (`EAGAIN` when none fit).
    pub fn send(&mut self, fd: i32, data: &[u8]) -> SockResult<usize> {
        self.send_more(fd, data, false)
    }

    /// `send(2)` with `MSG_MORE` (`more`): the partial tail waits for more.
    pub fn send_more(&mut self, fd: i32, data: &[u8], more: bool) -> SockResult<usize> {
        let s = self.sock(fd)?;
        if let Tcp::Fresh { .. } | Tcp::Listen(_) | Tcp::Failed = s.tcp {
            return Err(libc::EPIPE);
        }
        if s.wr_shut {
            return Err(libc::EPIPE);
        }
        let h = self.conn(fd)?;
        if let Ok(st) = self.stack.tcp_status(h) {
            if let Some(e) = st.pending_error {
                return Err(self.take_conn_error(fd, e).unwrap_or(libc::EPIPE));
            }
        }
        if data.is_empty() {
            return Ok(0);
        }
        let _ = self.stack.tcp_set_more(h, more);
        let r = self.queue_write(fd, h, data, more);
        self.flush();
        match r {
            Ok(0) => Err(libc::EAGAIN),
            Ok(n) => Ok(n),
            Err(TcpError::WouldBlock) => Err(libc::EAGAIN),
            Err(e) => Err(self.take_conn_error(fd, e).unwrap_or(libc::EPIPE)),
        }
    }

    /// Queue what Linux's `tcp_sendmsg` takes of `data` (see [`wmem`]):
    /// skb by skb, each filled up to the size goal, a new one only while
    /// `sk_stream_memory_free`; a full skb at the head of the unsent data
    /// goes out at once (`tcp_push_one`). Stopping short sets
    /// `SOCK_NOSPACE`.
    fn queue_write(
        &mut self,
        fd: i32,
        h: TcpHandle,
        data: &[u8],
        more: bool,
    ) -> Result<usize, TcpError> {
        let lowat = self.notsent_lowat(fd);
        let mut off = 0;
        let mut full = false;
        let mut max_wnd;
        loop {
            let info = self.stack.tcp_info(h)?;
            let goal = info.size_goal.max(1);
            max_wnd = info.max_snd_wnd;
            let Some(s) = self.sock_mut_opt(fd) else {
                break;
            };
            let sb = &mut s.sb;
            sb.sync(info.send_queue, info.notsent);
            if off == data.len() {
                break;
            }
            let mut room = sb.tail_room(goal);
            // Adding to an skb that carries a mark of `forced_push`: a new
            // write clears it (Linux clears PSH on its first copy), the
            // same write moves it to the skb's new end (marked again below).
            let remark = room > 0 && sb.tail_psh();
            if remark && off == 0 {
                sb.clear_tail_psh();
            }
            if room == 0 {
                if !sb.memory_free(false, lowat) {
                    full = true;
                    break;
                }
                sb.new_skb();
                room = goal;
            }
            let n = room.min(data.len() - off);
            if remark {
                let _ = self.stack.tcp_retract_push_mark(h);
            }
            let r = self.stack.tcp_send(h, &data[off..off + n]);
            let Some(s) = self.sock_mut_opt(fd) else {
                break;
            };
            let k = match r {
                Ok(k) => k,
                Err(e) => {
                    s.sb.remove_empty_tail();
                    if off == 0 {
                        return Err(e);
                    }
                    break;
                }
            };
            s.sb.append(k);
            off += k;
            // Linux `tcp_sendmsg_locked` once an skb is full and more
            // follows: past half the peer's largest window since the last
            // push, mark it and push everything (`forced_push`); else, at
            // the head of the unsent data, send one packet (`tcp_push_one`).
            let skb_done = k == n && off < data.len() && s.sb.tail_full(goal);
            let at_head = skb_done && s.sb.tail_full_at_head(goal);
            let forced = skb_done && s.sb.forced_push(info.max_snd_wnd);
            if forced {
                s.sb.mark_push(true);
            }
            if remark && off > k {
                let _ = self.stack.tcp_mark_push(h);
            }
            if k < n {
                full = true;
                break;
            }
            if forced {
                let _ = self.stack.tcp_mark_push(h);
            } else if at_head {
                let _ = self.stack.tcp_set_push_one(h);
            }
            if forced || at_head {
                // Sent now, not marked as the end of the write.
                let _ = self.stack.tcp_set_write_continues(h, true);
                self.flush();
                let _ = self.stack.tcp_set_write_continues(h, false);
            }
        }
        if let Some(s) = self.sock_mut_opt(fd) {
            s.sb.remove_empty_tail();
            if full {
                s.sb.set_nospace(true);
            }
            // Linux `tcp_push` at the end of the write (or before it
            // waits for space): the push point moves unless MSG_MORE.
            if off > 0 && (!more || full || s.sb.forced_push(max_wnd)) {
                s.sb.mark_push(false);
            }
        }
        if full {
            let _ = self.stack.tcp_set_send_blocked(h, true);
        }
        Ok(off)
    }

    /// The unsent bytes over which `fd` is not writable: its
    /// `TCP_NOTSENT_LOWAT`, else the `tcp_notsent_lowat` sysctl.
    fn notsent_lowat(&self, fd: i32) -> u32 {
        self.sock(fd)
            .ok()
            .and_then(|s| s.opts.notsent_lowat)
            .or(self.base.notsent_lowat)
            .unwrap_or(u32::MAX)
    }

    /// A blocking write on `fd` that found no room keeps waiting: Linux's
    /// writer sleeps until the socket is writable again
    /// (`sk_stream_write_space` clears `SOCK_NOSPACE`), unless the
    /// connection fails or is shut down meanwhile.
    pub fn send_waits(&self, fd: i32) -> bool {
        let Ok(s) = self.sock(fd) else {
            return false;
        };
        let Tcp::Conn { h, .. } = s.tcp else {
            return false;
        };
        s.sb.nospace()
            && !s.wr_shut
            && self.stack.tcp_status(h).is_ok_and(|st| {
                st.pending_error.is_none()
                    && matches!(st.state, State::Established | State::CloseWait)
            })
    }

    /// After the engine ran: every connection's send-buffer model follows
    /// it (acknowledged skbs freed, sends split skbs), a fresh connection
    /// gets its first buffer size, and a socket waiting for space that
    /// has it again is woken (Linux `tcp_check_space`: the buffer grows
    /// first if the congestion window is not the limit).
    fn sync_send_bufs(&mut self) {
        let max = self.base.tcp.snd_buf;
        for i in 0..self.fds.len() {
            let fd = i as i32 + self.fd_base;
            let (h, idle) = match self.fds.get(i) {
                Some(Some(Entry::Sock(s))) => match s.tcp {
                    Tcp::Conn { h, .. } => (h, !s.sb.has_data() && !s.sb.nospace() && s.sb.sized()),
                    _ => continue,
                },
                _ => continue,
            };
            if idle {
                continue;
            }
            let Ok(info) = self.stack.tcp_info(h) else {
                continue;
            };
            let lowat = self.notsent_lowat(fd);
            let Some(s) = self.sock_mut_opt(fd) else {
                continue;
            };
            let sb = &mut s.sb;
            sb.sync(info.send_queue, info.notsent);
            // cwnd in segments of the payload it is counted in.
            let payload = info
                .smss
                .saturating_sub(if info.timestamps { 12 } else { 0 });
            let cwnd_segs = info.cwnd / payload.max(1);
            let synced = !matches!(
                info.state,
                State::SynSent | State::SynReceived | State::Closed
            );
            if !sb.sized() && synced {
                sb.expand(info.smss, cwnd_segs, max);
            }
            let mut woke = false;
            if sb.nospace() {
                let in_flight = (info.unacked_segs + info.retrans_segs)
                    .saturating_sub(info.sacked_segs + info.lost_segs);
                if in_flight < cwnd_segs {
                    sb.expand(info.smss, cwnd_segs, max);
                }
                if sb.writable(lowat) {
                    sb.set_nospace(false);
                    s.events += 1;
                    woke = true;
                }
            }
            if woke {
                let _ = self.stack.tcp_set_send_blocked(h, false);
            }
        }
    }

    /// `MSG_EOR`: what `fd` queued so far ends a record.
    pub fn mark_record_end(&mut self, fd: i32) {
        if let Ok(Tcp::Conn { h, .. }) = self.sock(fd).map(|s| s.tcp) {
            let _ = self.stack.tcp_mark_record_end(h);
            if let Ok(s) = self.sock_mut(fd) {
                s.sb.close_tail();
            }
        }
    }

    /// `shutdown(2)`.
    pub fn shutdown(&mut self, fd: i32, how: i32) -> SockResult<()> {
        if !(0..=2).contains(&how) {
            return Err(libc::EINVAL);
        }
        let s = self.sock(fd)?;
        let h = match s.tcp {
            Tcp::Conn { h, .. } => h,
            Tcp::Listen(h) => {
                // Linux: shutting down a listener stops it (accept fails).
                if how != libc::SHUT_WR {
                    self.by_handle.remove(&h);
                    self.stack.tcp_close(h);
                    self.sock_mut(fd)?.tcp = Tcp::Failed;
                    self.flush();
                    return Ok(());
                }
                return Err(libc::ENOTCONN);
            }
            _ => return Err(libc::ENOTCONN),
        };
        let s = self.sock_mut(fd)?;
        if how == libc::SHUT_RD || how == libc::SHUT_RDWR {
            s.rd_shut = true;
        }
        if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
            s.wr_shut = true;
            let _ = self.stack.tcp_shutdown(h);
        }
        self.flush();
        Ok(())
    }

    /// `close(2)`.
    pub fn close(&mut self, fd: i32) -> SockResult<()> {
        let slot = self.slot(fd).ok_or(libc::EBADF)?;
        let e = self
            .fds
            .get_mut(slot)
            .and_then(Option::take)
            .ok_or(libc::EBADF)?;
        if let Entry::Pipe(p) = e {
            self.close_pipe_end(p);
        }
        if let Entry::Sock(s) = e {
            match s.tcp {
                Tcp::Conn { h, .. } => {
                    self.by_handle.remove(&h);
                    if s.opts.linger == Some(0) {
                        self.stack.tcp_abort(h);
                    } else {
                        self.stack.tcp_close(h);
                    }
                }
                Tcp::Listen(h) => {
                    self.by_handle.remove(&h);
                    self.stack.tcp_close(h);
                }
                _ => {}
            }
        }
        for e in self.fds.iter_mut().flatten() {
            if let Entry::Epoll(set) = e {
                set.interest.retain(|i| i.fd != fd);
            }
        }
        self.flush();
        Ok(())
    }

    /// `getsockname(2)`.
    pub fn local_addr(&self, fd: i32) -> SockResult<SocketAddr> {
        let s = self.sock(fd)?;
        let v6 = s.v6;
        match s.tcp {
            Tcp::Fresh { bound } => Ok(bound.unwrap_or_else(|| unspecified(v6))),
            Tcp::Listen(h) | Tcp::Conn { h, .. } => self
                .stack
                .tcp_status(h)
                .map(|s| in_family(v6, s.local))
                .map_err(tcp_errno),
            Tcp::Failed => Ok(unspecified(v6)),
        }
    }

    /// `getpeername(2)`.
    pub fn peer_addr(&self, fd: i32) -> SockResult<SocketAddr> {
        let s = self.sock(fd)?;
        let v6 = s.v6;
        match s.tcp {
            Tcp::Conn { h, .. } => self
                .stack
                .tcp_status(h)
                .map(|s| in_family(v6, s.remote))
                .map_err(tcp_errno),
            _ => Err(libc::ENOTCONN),
        }
    }

    /// `fcntl(F_GETFL)`.
    pub fn get_flags(&self, fd: i32) -> SockResult<i32> {
        match self.entry(fd) {
            Some(Entry::Sock(s)) => {
                Ok(libc::O_RDWR | if s.nonblock { libc::O_NONBLOCK } else { 0 })
            }
            Some(Entry::Epoll(_)) => Ok(libc::O_RDWR),
            Some(Entry::Pipe(p)) => Ok(if p.write {
                libc::O_WRONLY
            } else {
                libc::O_RDONLY
            } | if p.nonblock { libc::O_NONBLOCK } else { 0 }),
            None => Err(libc::EBADF),
        }
    }

    /// `fcntl(F_SETFL)`: only `O_NONBLOCK` means something.
    pub fn set_flags(&mut self, fd: i32, flags: i32) -> SockResult<()> {
        match self.entry_mut(fd) {
            Some(Entry::Sock(s)) => {
                s.nonblock = flags & libc::O_NONBLOCK != 0;
                Ok(())
            }
            Some(Entry::Epoll(_)) => Ok(()),
            Some(Entry::Pipe(p)) => {
                p.nonblock = flags & libc::O_NONBLOCK != 0;
                Ok(())
            }
            None => Err(libc::EBADF),
        }
    }

    /// `ioctl(FIONREAD/SIOCINQ)` (`outq == false`) or `SIOCOUTQ`.
    pub fn queued(&self, fd: i32, outq: bool) -> SockResult<usize> {
        match self.sock(fd)?.tcp {
            Tcp::Conn { h, .. } => {
                let st = self.stack.tcp_status(h).map_err(tcp_errno)?;
                Ok(if outq { st.send_queue } else { st.recv_queue })
            }
            Tcp::Listen(_) => Err(libc::EINVAL),
            _ => Ok(0),
        }
    }

    /// Linux `tcp_inq_hint` (the `TCP_CM_INQ` control message): bytes left
    /// to read, or 1 once the peer's FIN is in with nothing left, telling
    /// the reader to read on (and see the end of the stream).
    pub fn inq_hint(&self, fd: i32) -> usize {
        let left = self.queued(fd, false).unwrap_or(0);
        if left > 0 {
            return left;
        }
        let Ok(Tcp::Conn { h, .. }) = self.sock(fd).map(|s| s.tcp) else {
            return 0;
        };
        let done = self.stack.tcp_status(h).is_ok_and(|st| {
            matches!(
                st.state,
                State::CloseWait
                    | State::LastAck
                    | State::Closing
                    | State::TimeWait
                    | State::Closed
            )
        });
        usize::from(done)
    }

    // ------------------------------------------------------------------
    // Readiness
    // ------------------------------------------------------------------

    /// `poll(2)` bits of `fd` now, by Linux's `tcp_poll` rules.
    pub fn readiness(&self, fd: i32) -> u32 {
        let Some(e) = self.entry(fd) else {
            return libc::POLLNVAL as u32;
        };
        let s = match e {
            Entry::Sock(s) => s,
            Entry::Pipe(p) => return self.pipe_readiness(*p),
            Entry::Epoll(set) => {
                return if set
                    .interest
                    .iter()
                    .any(|i| self.readiness(i.fd) & (i.events | POLLERR | POLLHUP) != 0)
                {
                    POLLIN
                } else {
                    0
                };
            }
        };
        let mut m = 0;
        match s.tcp {
            Tcp::Fresh { .. } => m |= POLLOUT | POLLWRNORM | POLLHUP,
            Tcp::Failed => m |= POLLOUT | POLLWRNORM | POLLHUP | POLLIN | POLLRDNORM | POLLRDHUP,
            Tcp::Listen(h) => {
                if self.stack.tcp_status(h).is_ok_and(|st| st.accept_ready) {
                    m |= POLLIN | POLLRDNORM;
                }
            }
            Tcp::Conn { h, .. } => {
                let (Ok(st), Ok(r)) = (self.stack.tcp_status(h), self.stack.tcp_readiness(h))
                else {
                    return POLLHUP | POLLERR;
                };
                let closed = st.state == State::Closed;
                let rd_shut = s.rd_shut
                    || matches!(
                        st.state,
                        State::CloseWait | State::LastAck | State::Closing | State::TimeWait
                    )
                    || closed;
                let wr_shut = s.wr_shut || closed;
                if (rd_shut && wr_shut) || closed {
                    m |= POLLHUP;
                }
                if rd_shut {
                    m |= POLLIN | POLLRDNORM | POLLRDHUP;
                }
                let synced = !matches!(st.state, State::SynSent | State::SynReceived);
                if synced {
                    if st.recv_queue > 0 || (r.is_readable() && st.pending_error.is_none()) {
                        m |= POLLIN | POLLRDNORM;
                    }
                    if wr_shut || self.writable(fd) {
                        m |= POLLOUT | POLLWRNORM;
                    }
                }
                if (st.pending_error.is_some() && !s.err_reported) || s.so_error.is_some() {
                    m |= POLLERR;
                }
            }
        }
        m
    }

    /// Linux `tcp_poll`'s `__sk_stream_is_writeable(sk, 1)` (see
    /// [`wmem::SendBuf::writable`]); when not, `SOCK_NOSPACE` is set, so
    /// that the socket's waiters are woken once it is.
    fn writable(&self, fd: i32) -> bool {
        let Ok(s) = self.sock(fd) else {
            return false;
        };
        let w = s.sb.writable(self.notsent_lowat(fd));
        if !w {
            s.sb.set_nospace(true);
        }
        w
    }

    /// Bytes queued and never sent (`SIOCOUTQNSD`).
    fn notsent(&self, fd: i32) -> usize {
        let Ok(s) = self.sock(fd) else {
            return 0;
        };
        let Tcp::Conn { h, .. } = s.tcp else {
            return 0;
        };
        self.stack.tcp_info(h).map(|i| i.notsent).unwrap_or(0)
    }

    /// Readiness events seen for `fd` so far (edge-triggered epoll).
    fn event_count(&self, fd: i32) -> u64 {
        match self.entry(fd) {
            Some(Entry::Sock(s)) => s.events,
            Some(Entry::Pipe(p)) => self.pipes.get(&p.id).map_or(0, |q| q.events),
            _ => 0,
        }
    }

    // ------------------------------------------------------------------
    // epoll
    // ------------------------------------------------------------------

    /// `epoll_create(2)`.
    pub fn epoll_create(&mut self) -> i32 {
        self.alloc(Entry::Epoll(EpollSet::default()))
    }

    /// `epoll_ctl(2)`.
    pub fn epoll_ctl(
        &mut self,
        epfd: i32,
        op: i32,
        fd: i32,
        events: u32,
        data: u64,
    ) -> SockResult<()> {
        if epfd == fd {
            return Err(libc::EINVAL);
        }
        if !self.is_fd(fd) {
            return Err(libc::EBADF);
        }
        let set = match self.entry_mut(epfd) {
            Some(Entry::Epoll(set)) => set,
            Some(_) => return Err(libc::EINVAL),
            None => return Err(libc::EBADF),
        };
        let pos = set.interest.iter().position(|i| i.fd == fd);
        // A registration (new, or re-armed by EPOLL_CTL_MOD).
        let fresh = Interest {
            fd,
            events,
            data,
            seen: None,
            last: 0,
        };
        match (op, pos) {
            (libc::EPOLL_CTL_ADD, Some(_)) => Err(libc::EEXIST),
            (libc::EPOLL_CTL_ADD, None) => {
                set.interest.push(fresh);
                Ok(())
            }
            (libc::EPOLL_CTL_MOD, Some(p)) => {
                set.interest[p] = fresh;
                Ok(())
            }
            (libc::EPOLL_CTL_DEL, Some(p)) => {
                set.interest.remove(p);
                Ok(())
            }
            (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None) => Err(libc::ENOENT),
            _ => Err(libc::EINVAL),
        }
    }

    /// `epoll_wait(2)` without waiting: up to `max` (events, data) ready.
    pub fn epoll_ready(&mut self, epfd: i32, max: usize) -> SockResult<Vec<(u32, u64)>> {
        let interest = match self.entry(epfd) {
            Some(Entry::Epoll(set)) => set.interest.clone(),
            Some(_) => return Err(libc::EINVAL),
            None => return Err(libc::EBADF),
        };
        let et = libc::EPOLLET as u32;
        let oneshot = libc::EPOLLONESHOT as u32;
        let mut out = Vec::new();
        let mut updates = Vec::new();
        for (idx, i) in interest.iter().enumerate() {
            if out.len() >= max {
                break;
            }
            let mask = i.events & !(et | oneshot) | POLLERR | POLLHUP;
            let bits = self.readiness(i.fd) & mask;
            if bits == 0 {
                continue;
            }
            let count = self.event_count(i.fd);
            if i.events & oneshot != 0 && i.seen.is_some() {
                continue;
            }
            if i.events & et != 0 {
                // Edge-triggered: report when the socket had an event since
                // the last report, or gained a bit.
                if i.seen == Some(count) && bits & !i.last == 0 {
                    continue;
                }
            }
            out.push((bits, i.data));
            updates.push((idx, count, bits));
        }
        if let Some(Entry::Epoll(set)) = self.entry_mut(epfd) {
            for (idx, count, bits) in updates {
                if let Some(i) = set.interest.get_mut(idx) {
                    i.seen = Some(count);
                    i.last = bits;
                }
            }
        }
        Ok(out)
    }

    // ------------------------------------------------------------------
    // Options
    // ------------------------------------------------------------------

    /// `setsockopt(2)`; `val` is the option's bytes.
    pub fn setsockopt(&mut self, fd: i32, level: i32, name: i32, val: &[u8]) -> SockResult<()> {
        opts::setsockopt(self, fd, level, name, val)
    }

    /// `getsockopt(2)`: the option's bytes (the caller truncates to its
    /// buffer as Linux does).
    pub fn getsockopt(&mut self, fd: i32, level: i32, name: i32) -> SockResult<Vec<u8>> {
        opts::getsockopt(self, fd, level, name)
    }
}

#[cfg(test)]
mod tests;

/// An address as a socket of family `v6` (`AF_INET6`) or IPv4 sees it:
/// the engine reports addresses in either family (an IPv4 peer of an
/// IPv6 socket as IPv4-mapped).
fn in_family(v6: bool, a: SocketAddr) -> SocketAddr {
    match (v6, a) {
        (false, SocketAddr::V4(_)) | (true, SocketAddr::V6(_)) => a,
        (false, SocketAddr::V6(a)) => SocketAddr::V4(SocketAddrV4::new(
            a.ip().to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
            a.port(),
        )),
        (true, SocketAddr::V4(a)) => {
            SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
        }
    }
}

/// Which families a socket bound to `local` takes traffic of: (IPv4,
/// IPv6). An `AF_INET6` socket takes IPv4 too (IPv4-mapped) unless it is
/// v6only or bound to an IPv6 address; bound to an IPv4-mapped address it
/// takes IPv4 only.
fn covers(s: &Sock, local: SocketAddr) -> (bool, bool) {
    match local {
        SocketAddr::V4(_) => (true, false),
        SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_some() => (true, false),
        SocketAddr::V6(a) => (!s.v6only && a.ip().is_unspecified(), true),
    }
}

/// The unspecified address, port 0, of family `v6` or IPv4.
fn unspecified(v6: bool) -> SocketAddr {
    if v6 {
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0))
    } else {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
    }
}
