//! Operate a running ustack from another process.
//!
//! Every running stack (`ustack serve`, `run`, `attach`, `bench`, or a program
//! built on `ustack_net` that calls [`Control::for_net`], one line) can open a
//! **control endpoint**: an IPC domain of
//! its own (crates/ipc), named `ctl.NAME`, with one server thread answering
//! requests ([`Request`]) from clients such as `ustack ps`, `ss`, `nstat` and
//! `sysctl`. The domain's shared-memory file is created with mode 0600, so only
//! the stack's owner (same UID) or root can open it; other users are refused
//! by the kernel before any request is read. It is never reachable through a
//! network interface: a guest that only sends packets to the stack cannot
//! reach it.
//!
//! The server thread never blocks the data path for longer than it takes to
//! copy a snapshot out of the stack (one lock of the stack, as an application
//! call takes). A client that dies mid-request leaves nothing behind: the IPC
//! reclaims its endpoint and the server's reply fails and is dropped.

pub mod metrics;
pub mod proto;
pub mod sysctl;

mod client;
mod net;
mod server;

pub use client::{list, Client, StackRef};
pub use metrics::Metrics;
pub use net::NetProvider;
pub use proto::{
    CaptureSpec, CounterEntry, DeviceInfo, Request, Response, SocketEntry, StackInfo, TcpDetail,
};
pub use server::{check_name, default_name, Control, PendingControl};

use std::net::SocketAddr;
use ustack_core::tcp::TcpConnInfo;
use ustack_core::time::Instant;

use ustack_core::{Counters, TcpInfo};
use ustack_socket::sysctl::Tunables;

/// Prefix of control domains' names.
pub const DOMAIN_PREFIX: &str = "ctl.";

/// What a stack tells its control endpoint. Called on the server thread;
/// each call should take a snapshot quickly (one lock of the stack).
pub trait Provider: Send + Sync + 'static {
    /// Devices with their addresses.
    fn devices(&self) -> Vec<DeviceInfo>;
    /// The socket table; with `detail`, `ss -i`'s fields for connections.
    fn sockets(&self, detail: bool) -> Vec<SocketEntry>;
    /// Every counter by `nstat` name.
    fn counters(&self) -> Vec<(String, u64)>;
    /// The tunables in force.
    fn tunables(&self) -> Tunables;
    /// Put new tunables in force (for new connections, as Linux's sysctls;
    /// `ip_default_ttl` for every new packet). A tunable the stack cannot
    /// apply is refused (the error says which and why) and nothing
    /// changes: nothing is accepted and then ignored.
    fn set_tunables(&self, t: Tunables) -> Result<(), String>;
    /// Where the stack's device puts frames for a live capture (None: this
    /// stack cannot be captured from).
    fn capture_hub(&self) -> Option<std::sync::Arc<ustack_net::dev::live::CaptureHub>> {
        None
    }
    /// The port forwards after adding `add` or removing `remove` (specs as
    /// `ustack run -p`), as text; an error says why nothing changed.
    fn ports(&self, add: Option<&str>, remove: Option<&str>) -> Result<Vec<String>, String> {
        let _ = (add, remove);
        Err("this stack has no port forwards (ustack run and attach have)".into())
    }
}

/// Every counter of `c` by its `nstat` name (`IpInReceives`, `TcpExtListenDrops`).
pub fn counter_names(c: &Counters) -> Vec<(String, u64)> {
    c.iter().map(|(g, n, v)| (format!("{g}{n}"), v)).collect()
}

/// The `ss` row of one socket of the engine's table (`detail`: its
/// `TCP_INFO`, for connections), at engine time `now`.
pub fn socket_entry(t: &TcpInfo, detail: Option<&TcpConnInfo>, now: Instant) -> SocketEntry {
    SocketEntry {
        proto: "tcp".into(),
        state: t.state.name().to_string(),
        recv_q: t.recv_queue as u64,
        send_q: t.send_queue as u64,
        local: ss_addr(t.local, t.v6only),
        peer: if t.state == ustack_core::tcp::State::Listen {
            ss_addr(t.remote, t.v6only)
        } else {
            t.remote.to_string()
        },
        orphan: t.orphan,
        info: detail.map(|i| tcp_detail(i, now)),
        host: None,
    }
}

/// An address as `ss -n` prints it: `10.0.0.2:80`, `[fd77::2]:80`; port
/// 0 as `*` (`0.0.0.0:*`, `[::]:*`); the unspecified IPv6 address of a
/// dual-stack socket (not `v6only`) as `*` (`*:80`, `*:*`).
pub fn ss_addr(a: SocketAddr, v6only: bool) -> String {
    let host = match a {
        SocketAddr::V6(a6) if a6.ip().is_unspecified() && !v6only => "*".to_string(),
        SocketAddr::V6(a6) if a6.scope_id() != 0 => format!("[{}]%{}", a6.ip(), a6.scope_id()),
        SocketAddr::V6(a6) => format!("[{}]", a6.ip()),
        SocketAddr::V4(a4) => a4.ip().to_string(),
    };
    match a.port() {
        0 => format!("{host}:*"),
        p => format!("{host}:{p}"),
    }
}

/// The `ss -u` row of one UDP socket of the engine, of either family
/// (IPv6 UDP sockets take IPv6 only: shown as `v6only`).
pub fn udp_entry(u: &ustack_core::UdpStatus<SocketAddr>) -> SocketEntry {
    SocketEntry {
        proto: "udp".into(),
        // ss: UNCONN unless connected.
        state: if u.remote.is_some() {
            "ESTAB"
        } else {
            "UNCONN"
        }
        .into(),
        recv_q: u.recv_queue as u64,
        send_q: 0,
        local: ss_addr(u.local, true),
        peer: u.remote.map_or_else(
            || {
                let any = match u.local {
                    SocketAddr::V4(_) => SocketAddr::from(([0u8; 4], 0)),
                    SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
                };
                ss_addr(any, true)
            },
            |r| r.to_string(),
        ),
        orphan: false,
        info: None,
        host: None,
    }
}

fn tcp_detail(i: &TcpConnInfo, now: Instant) -> TcpDetail {
    let ms = |d: ustack_core::time::Duration| d.as_micros() as f64 / 1000.0;
    let mss = i.smss.max(1) as u64;
    let ca_state = match i.ca_state {
        0 => "open",
        1 => "disorder",
        2 => "cwr",
        3 => "recovery",
        _ => "loss",
    };
    TcpDetail {
        congestion_control: i.congestion_control.to_string(),
        wscale_snd: i.snd_wscale,
        wscale_rcv: i.rcv_wscale,
        rto_ms: ms(i.rto),
        rtt_ms: i.srtt.map(ms),
        rttvar_ms: ms(i.rttvar),
        mss,
        advmss: i.adv_mss as u64,
        rcvmss: i.rcv_mss as u64,
        cwnd_segs: i.cwnd as u64 / mss,
        // Linux shows no ssthresh while it is still "infinite".
        ssthresh_segs: (i.ssthresh < (1 << 30)).then_some(i.ssthresh as u64 / mss),
        snd_wnd: i.snd_wnd as u64,
        rcv_wnd: i.rcv_wnd as u64,
        pacing_rate_bps: i.pacing_rate.map(|r| r.saturating_mul(8)),
        unacked: i.unacked_segs as u64,
        sacked: i.sacked_segs as u64,
        lost: i.lost_segs as u64,
        retrans: i.retrans_segs as u64,
        retransmits_total: u64::from(i.retransmits),
        notsent: i.notsent as u64,
        reordering: i.reordering,
        timestamps: i.timestamps,
        sack: i.sack,
        ca_state: ca_state.into(),
        send_buffer: i.send_buffer as u64,
        lastrcv_ms: now
            .saturating_duration_since(i.last_data_recv_at)
            .as_millis() as u64,
        lastack_ms: now.saturating_duration_since(i.last_recv_at).as_millis() as u64,
        bytes_sent: i.bytes_sent,
        bytes_retrans: i.bytes_retrans,
        bytes_acked: i.bytes_acked,
        bytes_received: i.bytes_received,
        segs_out: u64::from(i.segs_out),
        segs_in: u64::from(i.segs_in),
        data_segs_out: u64::from(i.data_segs_out),
        data_segs_in: u64::from(i.data_segs_in),
        delivered: u64::from(i.delivered),
        delivery_rate_bps: (i.delivery_rate > 0).then(|| i.delivery_rate.saturating_mul(8)),
        app_limited: i.delivery_rate_app_limited,
    }
}

#[cfg(test)]
mod tests {
    use super::ss_addr;
    use std::net::SocketAddr;

    #[test]
    fn addresses_print_as_ss_n_does() {
        let a = |s: &str| s.parse::<SocketAddr>().expect("address");
        assert_eq!(ss_addr(a("10.0.0.2:80"), false), "10.0.0.2:80");
        assert_eq!(ss_addr(a("0.0.0.0:0"), false), "0.0.0.0:*");
        assert_eq!(ss_addr(a("[fd77::2]:80"), false), "[fd77::2]:80");
        assert_eq!(
            ss_addr(a("[::ffff:10.0.0.1]:80"), false),
            "[::ffff:10.0.0.1]:80"
        );
        // `*` for a dual-stack socket's unspecified address, `[::]` for a
        // v6only one.
        assert_eq!(ss_addr(a("[::]:80"), false), "*:80");
        assert_eq!(ss_addr(a("[::]:0"), false), "*:*");
        assert_eq!(ss_addr(a("[::]:80"), true), "[::]:80");
        assert_eq!(ss_addr(a("[::]:0"), true), "[::]:*");
        assert_eq!(ss_addr(a("[fe80::1%2]:22"), true), "[fe80::1]%2:22");
    }
}
