//! `TCP_INFO`: Linux's `struct tcp_info` (linux/tcp.h, as of 6.18) filled
//! from the engine's [`TcpConnInfo`]. Fields the engine does not track are
//! zero, as Linux leaves fields it does not know.

use ustack_core::tcp::{State, TcpConnInfo};

use crate::{linux_state, Host, Tcp};

/// `sizeof(struct tcp_info)` on Linux 6.18.
pub const TCP_INFO_LEN: usize = 280;

/// `tcpi_options` bits.
const TCPI_OPT_TIMESTAMPS: u8 = 1;
const TCPI_OPT_SACK: u8 = 2;
const TCPI_OPT_WSCALE: u8 = 4;
const TCPI_OPT_ECN: u8 = 8;
const TCPI_OPT_ECN_SEEN: u8 = 16;

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, at: usize, v: u8) {
        self.0[at] = v;
    }
    fn u32(&mut self, at: usize, v: u64) {
        let v = u32::try_from(v).unwrap_or(u32::MAX);
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn u64(&mut self, at: usize, v: u64) {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }
}

pub(crate) fn encode(host: &Host, fd: i32, info: Option<&TcpConnInfo>) -> Vec<u8> {
    let mut w = W(vec![0; TCP_INFO_LEN]);
    let Some(i) = info else {
        // Not a connection: the state only (Linux: CLOSE or LISTEN).
        let st = match host.sock(fd).map(|s| s.tcp) {
            Ok(Tcp::Listen(_)) => State::Listen,
            _ => State::Closed,
        };
        w.u8(0, linux_state(st));
        return w.0;
    };
    let smss = i.smss.max(1);
    // Linux hands a connection entering TIME-WAIT to a mini socket and
    // closes the full one: a descriptor's socket reads as CLOSE.
    let state = if i.state == State::TimeWait {
        State::Closed
    } else {
        i.state
    };
    w.u8(0, linux_state(state));
    w.u8(1, i.ca_state);
    w.u8(2, i.rto_retries.min(255) as u8);
    w.u8(3, i.probes.min(255) as u8);
    w.u8(4, i.backoff.min(255) as u8);
    let mut opts = 0;
    if i.timestamps {
        opts |= TCPI_OPT_TIMESTAMPS;
    }
    if i.sack {
        opts |= TCPI_OPT_SACK;
    }
    if i.snd_wscale > 0 || i.rcv_wscale > 0 {
        opts |= TCPI_OPT_WSCALE;
    }
    if i.ecn {
        opts |= TCPI_OPT_ECN;
    }
    if i.ecn_seen {
        opts |= TCPI_OPT_ECN_SEEN;
    }
    w.u8(5, opts);
    w.u8(6, (i.snd_wscale & 0xf) | (i.rcv_wscale << 4));
    // tcpi_delivery_rate_app_limited:1, then tcpi_fastopen_client_fail:2.
    w.u8(7, u8::from(i.delivery_rate_app_limited));
    w.u32(8, i.rto.as_micros() as u64);
    w.u32(12, 40_000);
    w.u32(16, smss as u64);
    w.u32(20, i.rcv_mss as u64);
    w.u32(24, i.unacked_segs as u64);
    w.u32(28, i.sacked_segs as u64);
    w.u32(32, i.lost_segs as u64);
    w.u32(36, i.retrans_segs as u64);
    let ms_since =
        |t: ustack_core::time::Instant| host.now().saturating_duration_since(t).as_millis() as u64;
    w.u32(52, ms_since(i.last_data_recv_at));
    w.u32(56, ms_since(i.last_recv_at));
    w.u32(60, (smss + 40) as u64);
    w.u32(64, i.rcv_wnd as u64);
    w.u32(68, i.srtt.map_or(0, |d| d.as_micros() as u64));
    w.u32(72, i.rttvar.as_micros() as u64);
    let ssthresh = if i.ssthresh >= usize::MAX / 2 {
        // Linux reports TCP_INFINITE_SSTHRESH.
        0x7fff_ffff
    } else {
        (i.ssthresh / smss) as u64
    };
    w.u32(76, ssthresh);
    w.u32(80, (i.cwnd / smss) as u64);
    w.u32(84, i.adv_mss as u64);
    w.u32(88, u64::from(i.reordering));
    w.u32(100, u64::from(i.retransmits));
    w.u64(104, i.pacing_rate.unwrap_or(0));
    w.u64(112, u64::MAX);
    w.u64(120, i.bytes_acked);
    w.u64(128, i.bytes_received);
    w.u32(136, u64::from(i.segs_out));
    w.u32(140, u64::from(i.segs_in));
    w.u32(144, i.notsent as u64);
    w.u32(152, u64::from(i.data_segs_in));
    w.u32(156, u64::from(i.data_segs_out));
    w.u64(160, i.delivery_rate);
    // tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited (µs).
    w.u64(168, i.busy_time.as_micros() as u64);
    w.u64(176, i.rwnd_limited.as_micros() as u64);
    w.u64(184, i.sndbuf_limited.as_micros() as u64);
    w.u32(192, u64::from(i.delivered));
    w.u64(200, i.bytes_sent);
    w.u64(208, i.bytes_retrans);
    w.u32(220, u64::from(i.reord_seen));
    w.u32(228, i.snd_wnd as u64);
    w.u32(232, i.rcv_wnd as u64);
    w.0
}
