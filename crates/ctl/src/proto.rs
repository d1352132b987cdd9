//! The control protocol: requests and answers, as JSON carried through the IPC
//! domain's shared arena (see `server.rs` for the framing).

use serde::{Deserialize, Serialize};

/// A request to a running stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// What the stack is (`ustack ps`).
    Info,
    /// The socket table (`ustack ss`); `detail` adds `ss -i`'s fields.
    Sockets {
        detail: bool,
    },
    /// The counters (`ustack nstat`). The stack keeps `nstat`'s history: each
    /// answer carries the values of the last request that updated it, and
    /// `update` makes this request's values the new history.
    Counters {
        update: bool,
    },
    /// Read tunables by Linux name (`net.ipv4.tcp_wmem`); empty: all of them.
    SysctlGet {
        names: Vec<String>,
    },
    /// Change tunables, all or none: `(name, value)` pairs.
    SysctlSet {
        assignments: Vec<(String, String)>,
    },
    /// Start a live capture (one at a time per stack; it is stopped when its
    /// client stops saying it is alive for a few seconds). The answer is a
    /// [`Response::CaptureRing`]: the client reads the frames straight from
    /// the ring in the domain's shared arena.
    CaptureStart {
        snaplen: u32,
        filter: CaptureSpec,
        /// Bytes of frames the stack may hold for a slow reader (the ring).
        queue_bytes: u64,
    },
    /// The capture's client is still reading (send one every second or so).
    CaptureAlive,
    CaptureStop,
    /// List `run`'s port forwards, after adding or removing one (specs as
    /// `-p`'s: `[HOST_IP:]HOST_PORT:GUEST_PORT[/udp]`).
    Ports {
        add: Option<String>,
        remove: Option<String>,
    },
}

/// Which frames to capture (all given conditions hold).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureSpec {
    /// An IPv4 or IPv6 address.
    pub host: Option<std::net::IpAddr>,
    pub port: Option<u16>,
    /// `tcp`, `udp`, `icmp`, `icmp6` or `arp`.
    pub proto: Option<String>,
    /// `ip` or `ip6`.
    #[serde(default)]
    pub family: Option<String>,
}

/// A stack's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    Info(StackInfo),
    Sockets {
        sockets: Vec<SocketEntry>,
    },
    Counters {
        counters: Vec<CounterEntry>,
    },
    Sysctl {
        values: Vec<(String, String)>,
    },
    /// A capture started: its ring of pcap records (see
    /// `ustack_net::dev::live::CaptureHub`) is `len` bytes at `offset` in the
    /// domain's arena, and its header names capture `id`.
    CaptureRing {
        offset: u64,
        len: u64,
        id: u64,
    },
    /// Done (a capture started or stopped).
    Ok,
    /// The port forwards in force.
    Ports {
        forwards: Vec<String>,
    },
    /// The request was refused; nothing changed.
    Error {
        message: String,
    },
}

/// One running stack (`ustack ps`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackInfo {
    /// The name it registered under (`--name`).
    pub name: String,
    pub pid: u32,
    /// `serve`, `run`, `attach`, `bench`, or `net` (a program built on
    /// `ustack_net`, registered with `Control::for_net`).
    pub mode: String,
    /// Its command line.
    pub command: String,
    pub devices: Vec<DeviceInfo>,
    /// TCP control blocks held (listeners included).
    pub tcp_sockets: usize,
    /// Established TCP connections.
    pub established: usize,
    /// Seconds since the Unix epoch when it started.
    pub started_unix: u64,
}

/// A network device of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub mac: String,
    /// Addresses with prefix length (`10.0.0.2/24`).
    pub addrs: Vec<String>,
    pub mtu: u32,
}

/// One socket (`ustack ss`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketEntry {
    /// `tcp` (or `udp`).
    pub proto: String,
    /// `ss`'s state names: `LISTEN`, `ESTAB`, `SYN-SENT`, `TIME-WAIT`, ...
    pub state: String,
    pub recv_q: u64,
    pub send_q: u64,
    pub local: String,
    pub peer: String,
    /// The application has closed it (an orphan, finishing its close).
    pub orphan: bool,
    /// `ss -i`'s fields (connections, with `detail`).
    pub info: Option<TcpDetail>,
    /// In `ustack run`: the host socket this flow is relayed through.
    pub host: Option<String>,
}

/// `ss -ti`'s fields for one connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpDetail {
    pub congestion_control: String,
    pub wscale_snd: u8,
    pub wscale_rcv: u8,
    pub rto_ms: f64,
    pub rtt_ms: Option<f64>,
    pub rttvar_ms: f64,
    pub mss: u64,
    pub advmss: u64,
    pub rcvmss: u64,
    pub cwnd_segs: u64,
    pub ssthresh_segs: Option<u64>,
    pub snd_wnd: u64,
    pub rcv_wnd: u64,
    pub pacing_rate_bps: Option<u64>,
    pub unacked: u64,
    pub sacked: u64,
    pub lost: u64,
    pub retrans: u64,
    pub retransmits_total: u64,
    pub notsent: u64,
    pub reordering: u32,
    pub timestamps: bool,
    pub sack: bool,
    pub ca_state: String,
    pub send_buffer: u64,
    pub lastrcv_ms: u64,
    pub lastack_ms: u64,
    /// Linux's per-connection counters, `ss -i`'s names (`tcpi_bytes_sent`,
    /// ...): payload bytes sent (retransmissions included) and resent,
    /// bytes acknowledged and received in order (sequence space: SYN and
    /// FIN as Linux counts them), segments out and in (and those with
    /// data), segments delivered.
    #[serde(default)]
    pub bytes_sent: u64,
    #[serde(default)]
    pub bytes_retrans: u64,
    #[serde(default)]
    pub bytes_acked: u64,
    #[serde(default)]
    pub bytes_received: u64,
    #[serde(default)]
    pub segs_out: u64,
    #[serde(default)]
    pub segs_in: u64,
    #[serde(default)]
    pub data_segs_out: u64,
    #[serde(default)]
    pub data_segs_in: u64,
    #[serde(default)]
    pub delivered: u64,
    /// The last delivery-rate sample (`tcpi_delivery_rate`), bits per
    /// second; whether it was application-limited.
    #[serde(default)]
    pub delivery_rate_bps: Option<u64>,
    #[serde(default)]
    pub app_limited: bool,
}

/// One counter with Linux's `nstat` name (`TcpActiveOpens`, `IpInReceives`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterEntry {
    pub name: String,
    pub value: u64,
    /// Its value in the history (the last request that updated it; 0 before any).
    pub previous: u64,
}
