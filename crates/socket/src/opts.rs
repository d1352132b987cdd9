//! Socket options: what a socket carries, `setsockopt`/`getsockopt` with
//! Linux's value formats and errors, and how they reach the engine.

use ustack_core::tcp::{KeepAlive, TcpConfig};
use ustack_core::time::Duration;
use ustack_core::CcAlgorithm;

use crate::sysctl::Tunables;
use crate::{tcp_info, Host, SockResult, Tcp};

/// The options of one socket (inherited by connections a listener accepts).
#[derive(Debug, Clone)]
pub struct SockOpts {
    pub reuseaddr: bool,
    /// `SO_RCVBUF` as Linux reports it (twice what was set).
    pub rcvbuf: Option<usize>,
    /// `SO_SNDBUF` as Linux reports it (twice what was set).
    pub sndbuf: Option<usize>,
    /// `SO_LINGER` on, with its timeout in seconds.
    pub linger: Option<u32>,
    /// `SO_OOBINLINE`: urgent data's out-of-band octet stays in the stream.
    pub oobinline: bool,
    pub nodelay: bool,
    /// `TCP_MAXSEG` before the connection.
    pub maxseg: Option<u16>,
    pub cork: bool,
    pub keepalive: bool,
    pub keepidle: u32,
    pub keepintvl: u32,
    pub keepcnt: u32,
    /// `TCP_USER_TIMEOUT` in milliseconds (0 = off).
    pub user_timeout: u32,
    /// `TCP_LINGER2` in seconds (0: the `tcp_fin_timeout` sysctl).
    pub linger2: i32,
    /// `TCP_SYNCNT`: SYN retransmissions before giving up (None: sysctl).
    pub syncnt: Option<u32>,
    pub notsent_lowat: Option<u32>,
    pub inq: bool,
    pub congestion: Option<CcAlgorithm>,
    pub rcvtimeo: Option<Duration>,
    pub sndtimeo: Option<Duration>,
    pub rcvlowat: i32,
    /// The `tcp_rmem`/`tcp_wmem` defaults this socket reports until set.
    pub default_rcvbuf: usize,
    pub default_sndbuf: usize,
}

impl SockOpts {
    pub fn new(t: &Tunables) -> SockOpts {
        let base = &t.tcp;
        let ka = base.keepalive.unwrap_or(t.keepalive);
        SockOpts {
            reuseaddr: false,
            rcvbuf: None,
            sndbuf: None,
            linger: None,
            oobinline: false,
            nodelay: base.nodelay,
            maxseg: None,
            cork: false,
            keepalive: base.keepalive.is_some(),
            keepidle: secs(ka.idle),
            keepintvl: secs(ka.interval),
            keepcnt: ka.count,
            user_timeout: 0,
            linger2: 0,
            syncnt: None,
            notsent_lowat: None,
            inq: false,
            congestion: None,
            rcvtimeo: None,
            sndtimeo: None,
            rcvlowat: 1,
            default_rcvbuf: base.rcv_buf,
            default_sndbuf: base.snd_buf_initial,
        }
    }

    /// The engine configuration a connection of this socket starts with.
    pub fn apply_to(&self, base: &TcpConfig) -> TcpConfig {
        let mut c = base.clone();
        if let Some(b) = self.rcvbuf {
            // Linux keeps about half of the buffer for overhead; the window
            // (and its scale) follow the whole.
            c.rcv_buf = b.max(2048);
        }
        // The socket keeps Linux's send-buffer accounting (`wmem.rs`),
        // which decides what a write takes: the engine's buffer only has
        // to hold what that lets in, the largest `sk_sndbuf` (`tcp_wmem[2]`
        // or `SO_SNDBUF`'s largest) and one more skb. Its storage grows
        // only as it is used.
        let most = base.snd_buf.max(2 * BUF_MAX) + SKB_MAX;
        c.snd_buf = most;
        c.snd_buf_initial = most;
        c.user_mss = self.maxseg;
        if let Some(n) = self.syncnt {
            c.syn_retries = n;
        }
        c.nodelay = self.nodelay;
        c.keepalive = self.keepalive_params();
        if let Some(cc) = self.congestion {
            c.congestion_control = cc;
        }
        c
    }

    pub fn keepalive_params(&self) -> Option<KeepAlive> {
        self.keepalive.then(|| KeepAlive {
            idle: Duration::from_secs(u64::from(self.keepidle)),
            interval: Duration::from_secs(u64::from(self.keepintvl)),
            count: self.keepcnt,
        })
    }
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

/// An `int` option value (Linux accepts 4 or more bytes; fewer is EINVAL).
fn int(val: &[u8]) -> SockResult<i32> {
    let b: [u8; 4] = val
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(libc::EINVAL)?;
    Ok(i32::from_ne_bytes(b))
}

fn timeval(val: &[u8]) -> SockResult<Option<Duration>> {
    if val.len() < 16 {
        return Err(libc::EINVAL);
    }
    let mut s = [0u8; 8];
    let mut u = [0u8; 8];
    s.copy_from_slice(&val[..8]);
    u.copy_from_slice(&val[8..16]);
    let (s, u) = (i64::from_ne_bytes(s), i64::from_ne_bytes(u));
    if s < 0 || !(0..1_000_000).contains(&u) {
        return Err(libc::EDOM);
    }
    if s == 0 && u == 0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_micros(s as u64 * 1_000_000 + u as u64)))
}

fn timeval_bytes(d: Option<Duration>) -> Vec<u8> {
    let us = d.map_or(0, |d| d.as_micros() as u64);
    let mut v = ((us / 1_000_000) as i64).to_ne_bytes().to_vec();
    v.extend_from_slice(&((us % 1_000_000) as i64).to_ne_bytes());
    v
}

fn int_bytes(v: i64) -> Vec<u8> {
    (v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
        .to_ne_bytes()
        .to_vec()
}

/// Linux option numbers the libc crate may not carry.
const SO_MEMINFO: i32 = 55;
const TCP_CC_INFO: i32 = 26;

/// Linux's largest `SO_SNDBUF`/`SO_RCVBUF` request (`wmem_max`/`rmem_max`
/// defaults), before doubling.
const BUF_MAX: usize = 212_992;

/// The most bytes one skb of a write holds (Linux's size goal is at most
/// the GSO limit, 64 KB).
const SKB_MAX: usize = 65_536;

pub(crate) fn setsockopt(
    host: &mut Host,
    fd: i32,
    level: i32,
    name: i32,
    val: &[u8],
) -> SockResult<()> {
    let s = host.sock_mut(fd)?;
    // IPv6 options exist on `AF_INET6` sockets only (an `AF_INET` socket's
    // `ip_setsockopt` knows no `SOL_IPV6`).
    if level == libc::IPPROTO_IPV6 && !s.v6 {
        return Err(libc::ENOPROTOOPT);
    }
    let fresh = matches!(s.tcp, Tcp::Fresh { bound: None });
    let o = &mut s.opts;
    match (level, name) {
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            // Linux: an int, and only before the socket has a port.
            let v = int(val)?;
            if !fresh {
                return Err(libc::EINVAL);
            }
            s.v6only = v != 0;
        }
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_TCLASS
            | libc::IPV6_UNICAST_HOPS
            | libc::IPV6_RECVERR
            | libc::IPV6_MTU_DISCOVER,
        ) => {
            int(val)?;
        }
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => o.reuseaddr = int(val)? != 0,
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => {
            int(val)?;
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => o.keepalive = int(val)? != 0,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            let v = usize::try_from(int(val)?.max(0)).unwrap_or(0).min(BUF_MAX);
            let b = (v * 2).max(4608);
            o.sndbuf = Some(b);
            s.sb.set_size(b);
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            let v = usize::try_from(int(val)?.max(0)).unwrap_or(0).min(BUF_MAX);
            o.rcvbuf = Some((v * 2).max(2304));
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if val.len() < 8 {
                return Err(libc::EINVAL);
            }
            let on = int(&val[..4])?;
            let secs = int(&val[4..8])?;
            o.linger = (on != 0).then_some(u32::try_from(secs.max(0)).unwrap_or(0));
        }
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => o.rcvtimeo = timeval(val)?,
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => o.sndtimeo = timeval(val)?,
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => o.rcvlowat = int(val)?.max(1),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => o.oobinline = int(val)? != 0,
        (libc::SOL_SOCKET, libc::SO_PRIORITY | libc::SO_MARK) => {
            int(val)?;
        }
        (libc::SOL_SOCKET, _) => return Err(libc::ENOPROTOOPT),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => o.nodelay = int(val)? != 0,
        (libc::IPPROTO_TCP, libc::TCP_CORK) => o.cork = int(val)? != 0,
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let v = int(val)?;
            // Linux: 0 resets; otherwise 88..=65535 (TCP_MIN_MSS).
            if v != 0 && !(88..=65535).contains(&v) {
                return Err(libc::EINVAL);
            }
            o.maxseg = (v != 0).then_some(v as u16);
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            let v = int(val)?;
            if !(1..=32767).contains(&v) {
                return Err(libc::EINVAL);
            }
            o.keepidle = v as u32;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => {
            let v = int(val)?;
            if !(1..=32767).contains(&v) {
                return Err(libc::EINVAL);
            }
            o.keepintvl = v as u32;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => {
            let v = int(val)?;
            if !(1..=127).contains(&v) {
                return Err(libc::EINVAL);
            }
            o.keepcnt = v as u32;
        }
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => {
            let v = int(val)?;
            if v < 0 {
                return Err(libc::EINVAL);
            }
            o.user_timeout = v as u32;
        }
        (libc::IPPROTO_TCP, libc::TCP_LINGER2) => {
            // Linux: negative turns FIN-WAIT-2 off (-1 when read back),
            // 0 follows the sysctl, anything else is seconds, at most 120.
            let v = int(val)?;
            o.linger2 = if v < 0 { -1 } else { v.min(120) };
        }
        (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => {
            // An unsigned value; 0 follows the sysctl again.
            let v = int(val)? as u32;
            o.notsent_lowat = (v > 0).then_some(v);
        }
        (libc::IPPROTO_TCP, libc::TCP_INQ) => {
            let v = int(val)?;
            if !(0..=1).contains(&v) {
                return Err(libc::EINVAL);
            }
            o.inq = v == 1;
        }
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
            let end = val.iter().position(|&b| b == 0).unwrap_or(val.len());
            let name = std::str::from_utf8(&val[..end]).map_err(|_| libc::ENOENT)?;
            o.congestion = Some(match name {
                "cubic" => CcAlgorithm::Cubic,
                "reno" | "newreno" => CcAlgorithm::NewReno,
                _ => return Err(libc::ENOENT),
            });
        }
        (libc::IPPROTO_TCP, libc::TCP_SYNCNT) => {
            let v = int(val)?;
            if !(1..=127).contains(&v) {
                return Err(libc::EINVAL);
            }
            o.syncnt = Some(v as u32);
        }
        (libc::IPPROTO_TCP, libc::TCP_QUICKACK | libc::TCP_DEFER_ACCEPT) => {
            int(val)?;
        }
        (libc::IPPROTO_TCP, _) => return Err(libc::ENOPROTOOPT),
        (
            libc::IPPROTO_IP,
            libc::IP_TOS
            | libc::IP_TTL
            | libc::IP_RECVERR
            | libc::IP_FREEBIND
            | libc::IP_MTU_DISCOVER,
        ) => {
            // Linux reads an int, or a single byte when optlen < 4.
            if val.is_empty() {
                return Err(libc::EINVAL);
            }
        }
        _ => return Err(libc::ENOPROTOOPT),
    }
    host.apply_conn_opts(fd, Some((level, name)));
    host.touch();
    Ok(())
}

pub(crate) fn getsockopt(host: &mut Host, fd: i32, level: i32, name: i32) -> SockResult<Vec<u8>> {
    let s = host.sock(fd)?;
    let o = s.opts.clone();
    let conn = match s.tcp {
        Tcp::Conn { h, .. } => Some(h),
        _ => None,
    };
    let info = conn.and_then(|h| host.stack.tcp_info(h).ok());
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_TYPE) => int_bytes(libc::SOCK_STREAM.into()),
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => {
            int_bytes(if s.v6 { libc::AF_INET6 } else { libc::AF_INET }.into())
        }
        // An `AF_INET` socket's `ip_getsockopt` knows no `SOL_IPV6`.
        (libc::IPPROTO_IPV6, _) if !s.v6 => return Err(libc::EOPNOTSUPP),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => int_bytes(s.v6only.into()),
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => int_bytes(libc::IPPROTO_TCP.into()),
        (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => {
            int_bytes(i64::from(matches!(s.tcp, Tcp::Listen(_))))
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            // A handshake that failed since the last look moves its error
            // to `so_error` first.
            if let Tcp::Conn {
                connecting: true, ..
            } = s.tcp
            {
                let _ = host.connect_done(fd);
            }
            let mut e = host.sock_mut(fd)?.so_error.take().unwrap_or(0);
            if e == 0 {
                if let Some(err) = info.as_ref().and_then(|i| i.pending_error) {
                    e = host.take_conn_error(fd, err).unwrap_or(0);
                }
            }
            int_bytes(e.into())
        }
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => int_bytes(o.reuseaddr.into()),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => int_bytes(o.oobinline.into()),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => int_bytes(o.keepalive.into()),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => int_bytes(s.sb.sndbuf as i64),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            int_bytes(o.rcvbuf.unwrap_or(o.default_rcvbuf) as i64)
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let mut v = int_bytes(o.linger.is_some().into());
            v.extend(int_bytes(o.linger.unwrap_or(0).into()));
            v
        }
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => timeval_bytes(o.rcvtimeo),
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => timeval_bytes(o.sndtimeo),
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => int_bytes(o.rcvlowat.into()),
        (libc::SOL_SOCKET, SO_MEMINFO) => {
            // u32 sk_meminfo[SK_MEMINFO_VARS]: rmem_alloc, rcvbuf,
            // wmem_alloc, sndbuf, fwd_alloc, wmem_queued, optmem, backlog,
            // drops.
            let rq = info.as_ref().map_or(0, |i| i.recv_queue);
            let rb = o.rcvbuf.unwrap_or(o.default_rcvbuf);
            [rq, rb, 0, s.sb.sndbuf, 0, s.sb.wmem_queued(), 0, 0, 0]
                .iter()
                .flat_map(|v| (u32::try_from(*v).unwrap_or(u32::MAX)).to_ne_bytes())
                .collect()
        }
        (libc::SOL_SOCKET, _) => return Err(libc::ENOPROTOOPT),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => int_bytes(o.nodelay.into()),
        (libc::IPPROTO_TCP, libc::TCP_CORK) => int_bytes(o.cork.into()),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let v = match &info {
                Some(i) if i.state != ustack_core::tcp::State::SynSent => i.smss as i64,
                _ => i64::from(o.maxseg.unwrap_or(536)),
            };
            int_bytes(v)
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => int_bytes(o.keepidle.into()),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => int_bytes(o.keepintvl.into()),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => int_bytes(o.keepcnt.into()),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => int_bytes(o.user_timeout.into()),
        (libc::IPPROTO_TCP, libc::TCP_SYNCNT) => {
            int_bytes(o.syncnt.unwrap_or(host.base.tcp.syn_retries).into())
        }
        (libc::IPPROTO_TCP, libc::TCP_LINGER2) => {
            let v = if o.linger2 == 0 {
                host.base.tcp.fin_wait2_timeout.as_secs() as i64
            } else {
                o.linger2.into()
            };
            int_bytes(v)
        }
        (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => {
            // Linux reports 0 while the socket follows the sysctl.
            o.notsent_lowat.unwrap_or(0).to_ne_bytes().to_vec()
        }
        (libc::IPPROTO_TCP, libc::TCP_INQ) => int_bytes(o.inq.into()),
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
            let name = match o.congestion.unwrap_or(host.base.tcp.congestion_control) {
                // Linux's name: the HyStart++ variant is CUBIC to a peer.
                CcAlgorithm::Cubic | CcAlgorithm::CubicHyStartPlusPlus => "cubic",
                CcAlgorithm::NewReno => "reno",
            };
            let mut v = name.as_bytes().to_vec();
            v.resize(16, 0);
            v
        }
        (libc::IPPROTO_TCP, libc::TCP_INFO) => tcp_info::encode(host, fd, info.as_ref()),
        // Neither CUBIC nor Reno exports anything here (Linux: length 0).
        (libc::IPPROTO_TCP, TCP_CC_INFO) => Vec::new(),
        (libc::IPPROTO_TCP, _) => return Err(libc::ENOPROTOOPT),
        _ => return Err(libc::ENOPROTOOPT),
    })
}
