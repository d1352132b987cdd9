//! SYN cookies (RFC 4987 3.6), encoded as Linux encodes them
//! (`net/ipv4/syncookies.c`), so that a listener whose SYN queue is full
//! can still answer a SYN without keeping any state for it.
//!
//! RFC 4987 3.6: "SYN cookies ... [encode] the state in the ISN ... When
//! the ACK arrives, the listener can reconstruct the TCB from the
//! acknowledgment number". The cookie, our ISN, is Linux's
//! (`secure_tcp_syn_cookie`):
//!
//! ```text
//! cookie = H0(saddr, daddr, sport, dport) + SEQ(peer)
//!        + (count << 24) + ((H1(saddr, daddr, sport, dport, count) + mssind) mod 2^24)
//! ```
//!
//! `H0`, `H1`: keyed hashes (SipHash with the stack secret, two domains;
//! Linux uses SipHash with two random keys); `count`: minutes on the
//! stack's clock (Linux `tcp_cookie_time`, jiffies / 60 s); `mssind`: the
//! index of the peer's MSS, rounded down, in Linux's `msstab` {536, 1300,
//! 1440, 1460}. The final ACK is checked as Linux's `check_tcp_syn_cookie`
//! does: the count it carries may be this minute's or the previous one
//! (`MAX_SYNCOOKIE_AGE` = 2), and the hash must give back an index in the
//! table.
//!
//! The other options of the SYN do not fit in the ISN. With timestamps,
//! the low 6 bits of our SYN-ACK's TSval carry them (Linux
//! `cookie_init_timestamp`): bits 0-3 the peer's window scale (0xf: none),
//! bit 4 SACK permitted, bit 5 ECN; the TSval is rounded down so that it
//! never runs ahead of our clock, and the peer echoes it in the final ACK.
//! Without timestamps the SYN-ACK offers neither window scaling nor SACK
//! (Linux clears the options: `tcp_clear_options` when `want_cookie` and
//! no timestamp), so nothing is lost that was agreed.

use std::net::SocketAddrV4;

use ustack_wire::tcp::{SeqNum, TcpRepr, MAX_WINDOW_SHIFT};

use super::conn::{adv_mss_for, ts_offset_for, window_shift_for, Connection, Phase, DEFAULT_MSS};
use super::{TcpConfig, TcpCounters};
use crate::hash::keyed_hash;
use crate::time::{Duration, Instant};

/// When a listener answers SYNs with cookies (Linux `tcp_syncookies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SynCookies {
    /// Linux 0: never; a SYN that finds the SYN queue full is dropped
    /// (`TCPReqQFullDrop`).
    Off,
    /// Linux 1 (the default): when the listener's SYN queue is full (or the
    /// socket table is).
    #[default]
    WhenNeeded,
    /// Linux 2: every SYN is answered with a cookie (for tests and for
    /// listeners under a permanent flood).
    Always,
}

/// Linux `msstab`: the MSS values a cookie can carry. "1460 is the single
/// most frequently announced mss value"; the others cover PPPoE (1440,
/// 1452), tunnels (1300 ...) and RFC 9293's default (536).
pub(crate) const MSSTAB: [u16; 4] = [536, 1300, 1440, 1460];

/// Bits of the cookie below the minute counter (Linux `COOKIEBITS`).
const COOKIE_BITS: u32 = 24;
const COOKIE_MASK: u32 = (1 << COOKIE_BITS) - 1;

/// The counter's period (Linux `TCP_SYNCOOKIE_PERIOD`: 60 s).
pub(crate) const COOKIE_PERIOD: Duration = Duration::from_secs(60);

/// A cookie is valid while the counter has moved by less than this
/// (Linux `MAX_SYNCOOKIE_AGE`): this minute's and the previous one's.
const MAX_SYNCOOKIE_AGE: u32 = 2;

/// Linux `TCP_SYNCOOKIE_VALID`: an ACK is checked as a cookie only if the
/// listener sent a cookie this recently (`tcp_synq_no_recent_overflow`).
pub(crate) const SYNCOOKIE_VALID: Duration = Duration::from_secs(120);

/// The TSval bits that carry the options (Linux `TSBITS` and the masks).
const TS_BITS: u32 = 6;
const TS_OPT_WSCALE_MASK: u32 = 0xf;
const TS_OPT_SACK: u32 = 1 << 4;
const TS_OPT_ECN: u32 = 1 << 5;

/// Hash domains for Linux's two `syncookie_secret` keys.
const DOMAIN: [u64; 2] = [0x7379_6e63_6f6f_6b30, 0x7379_6e63_6f6f_6b31]; // "syncook0/1"

/// The options of a SYN that ride in the TSval of a cookie's SYN-ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CookieOptions {
    /// The peer's window scale, if it offered one and we scale windows.
    pub(crate) wscale: Option<u8>,
    pub(crate) sack: bool,
    /// ECN was agreed (RFC 3168; Linux `cookie_ecn_ok`).
    pub(crate) ecn: bool,
}

impl CookieOptions {
    fn bits(self) -> u32 {
        let mut b = self
            .wscale
            .map_or(TS_OPT_WSCALE_MASK, |s| u32::from(s.min(MAX_WINDOW_SHIFT)));
        if self.sack {
            b |= TS_OPT_SACK;
        }
        if self.ecn {
            b |= TS_OPT_ECN;
        }
        b
    }

    fn from_bits(b: u32) -> CookieOptions {
        let ws = b & TS_OPT_WSCALE_MASK;
        CookieOptions {
            // 0xf, "an invalid scaling value", means no window scale.
            wscale: (ws != TS_OPT_WSCALE_MASK).then_some(ws as u8),
            sack: b & TS_OPT_SACK != 0,
            ecn: b & TS_OPT_ECN != 0,
        }
    }
}

/// Linux `cookie_init_timestamp`: "we encode tcp options in the lower bits
/// of the timestamp value that will be sent in the syn-ack. Since
/// subsequent timestamps use the normal tcp_time_stamp value, we must make
/// sure that the resulting initial timestamp is <= tcp_time_stamp."
/// `clock`: our timestamp clock without the per-connection offset.
pub(crate) fn init_timestamp(clock: u32, opts: CookieOptions) -> u32 {
    let mut ts = (clock >> TS_BITS) << TS_BITS | opts.bits();
    if ts > clock {
        ts = ts.wrapping_sub(1 << TS_BITS);
    }
    ts
}

/// Linux `cookie_timestamp_decode`: the options an echoed TSval carries
/// (`clock_ts`: the TSecr less our offset).
pub(crate) fn decode_timestamp(clock_ts: u32) -> CookieOptions {
    CookieOptions::from_bits(clock_ts & ((1 << TS_BITS) - 1))
}

/// Linux `tcp_cookie_time`: the minute counter.
fn cookie_time(now: Instant) -> u32 {
    let period = COOKIE_PERIOD.as_micros() as u64;
    (now.total_micros() / period) as u32
}

/// The keyed hashes of SYN cookies (keys derived from the stack secret).
#[derive(Clone)]
pub(crate) struct CookieJar {
    secret: [u8; 16],
}

impl core::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CookieJar { .. }") // never print the key
    }
}

impl CookieJar {
    pub(crate) fn new(secret: [u8; 16]) -> CookieJar {
        CookieJar { secret }
    }

    /// Linux `cookie_hash(saddr, daddr, sport, dport, count, c)`, with the
    /// addresses of the segment received (source: the peer).
    fn hash(&self, local: SocketAddrV4, remote: SocketAddrV4, count: u32, c: usize) -> u32 {
        let mut data = [0u8; 16];
        data[..4].copy_from_slice(&remote.ip().octets());
        data[4..8].copy_from_slice(&local.ip().octets());
        data[8..10].copy_from_slice(&remote.port().to_be_bytes());
        data[10..12].copy_from_slice(&local.port().to_be_bytes());
        data[12..].copy_from_slice(&count.to_be_bytes());
        keyed_hash(&self.secret, DOMAIN[c & 1], &data) as u32
    }

    /// Linux `__cookie_v4_init_sequence`: the cookie for a SYN with
    /// sequence number `peer_isn` and MSS option `mss`, and the MSS it
    /// carries ("mssp ... is returned rounded down to the value encoded in
    /// the cookie").
    pub(crate) fn init_sequence(
        &self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        peer_isn: SeqNum,
        mss: u16,
        now: Instant,
    ) -> (SeqNum, u16) {
        let index = MSSTAB.iter().rposition(|&m| mss >= m).unwrap_or(0);
        let count = cookie_time(now);
        let cookie = self
            .hash(local, remote, 0, 0)
            .wrapping_add(peer_isn.0)
            .wrapping_add(count << COOKIE_BITS)
            .wrapping_add(
                self.hash(local, remote, count, 1)
                    .wrapping_add(index as u32)
                    & COOKIE_MASK,
            );
        (SeqNum(cookie), MSSTAB[index])
    }

    /// Linux `check_tcp_syn_cookie` / `__cookie_v4_check`: the MSS a valid
    /// cookie carries. `peer_isn`: the final ACK's SEG.SEQ - 1; `cookie`:
    /// its SEG.ACK - 1. "The count value used to generate the cookie must
    /// be less than MAX_SYNCOOKIE_AGE minutes in the past."
    pub(crate) fn check(
        &self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        peer_isn: SeqNum,
        cookie: SeqNum,
        now: Instant,
    ) -> Option<u16> {
        let count = cookie_time(now);
        // "Strip away the layers from the cookie".
        let c = cookie
            .0
            .wrapping_sub(self.hash(local, remote, 0, 0).wrapping_add(peer_isn.0));
        let diff = count.wrapping_sub(c >> COOKIE_BITS) & (u32::MAX >> COOKIE_BITS);
        if diff >= MAX_SYNCOOKIE_AGE {
            return None;
        }
        let index =
            c.wrapping_sub(self.hash(local, remote, count.wrapping_sub(diff), 1)) & COOKIE_MASK;
        MSSTAB.get(index as usize).copied()
    }

    /// The stateless SYN-ACK answering `syn` with a cookie, as the one a
    /// connection would send (`output.rs`) with its options negotiated as
    /// described in the module docs.
    pub(crate) fn syn_ack(
        &self,
        cfg: &TcpConfig,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        syn: &TcpRepr,
        route_mss: u16,
        now: Instant,
    ) -> TcpRepr<'static> {
        // RFC 9293 3.7.1: without the option the peer's MSS is 536.
        let peer_mss = syn.max_seg_size.unwrap_or(DEFAULT_MSS as u16);
        let (cookie, _) = self.init_sequence(local, remote, syn.seq, peer_mss, now);
        let ts = match (cfg.timestamps, syn.timestamp) {
            (true, Some((tsval, _))) => Some(tsval),
            _ => None,
        };
        // Window scaling and SACK only with timestamps to carry them.
        let ws = ts.is_some() && cfg.window_scale && syn.window_scale.is_some();
        let sack = ts.is_some() && cfg.sack && syn.sack_permitted;
        // ECN as a listener agrees to it (`ecn.rs`), with timestamps to
        // remember it.
        let ecn =
            ts.is_some() && cfg.ecn != super::EcnMode::Off && syn.ece && syn.cwr && syn.ip_ecn == 0;
        let rcv_buf = cfg.rcv_buf.max(1);
        let opts = CookieOptions {
            wscale: syn.window_scale.filter(|_| ws),
            sack,
            ecn,
        };
        let clock = now.total_millis() as u32;
        TcpRepr {
            src_port: local.port(),
            dst_port: remote.port(),
            seq: cookie,
            ack: Some(syn.seq + 1u32),
            syn: true,
            // RFC 7323 2.2: "The window field in a segment where the SYN
            // bit is set MUST NOT be scaled".
            window: rcv_buf.min(0xffff) as u16,
            max_seg_size: Some(adv_mss_for(cfg, route_mss)),
            window_scale: ws.then(|| window_shift_for(rcv_buf)),
            sack_permitted: sack,
            ece: ecn,
            timestamp: ts.map(|tsval| {
                let ours = init_timestamp(clock, opts).wrapping_add(ts_offset_for(cookie));
                (ours, tsval)
            }),
            ..TcpRepr::default()
        }
    }
}

/// What a valid cookie ACK restores of the SYN (Linux `cookie_v4_check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restored {
    /// The peer's MSS as the cookie carried it.
    pub(crate) mss: u16,
    pub(crate) opts: CookieOptions,
    /// The ACK carried a timestamp (so did the SYN and our SYN-ACK).
    pub(crate) ts: bool,
}

/// Linux `cookie_timestamp_decode` on a final ACK whose cookie carried
/// `mss`: the options to use, or `None` if they contradict the
/// configuration ("if (!READ_ONCE(net->ipv4.sysctl_tcp_timestamps))
/// return false" and the same for SACK and window scaling), in which case
/// Linux answers with a RST.
pub(crate) fn restore(cfg: &TcpConfig, ack: &TcpRepr, mss: u16) -> Option<Restored> {
    let Some((_, tsecr)) = ack.timestamp else {
        // "tcp_clear_options": no window scaling, no SACK.
        return Some(Restored {
            mss,
            opts: CookieOptions {
                wscale: None,
                sack: false,
                ecn: false,
            },
            ts: false,
        });
    };
    if !cfg.timestamps {
        return None;
    }
    let iss = ack.ack.map_or(SeqNum(0), |a| a - 1usize);
    let opts = decode_timestamp(tsecr.wrapping_sub(ts_offset_for(iss)));
    if (opts.sack && !cfg.sack) || (opts.wscale.is_some() && !cfg.window_scale) {
        return None;
    }
    Some(Restored {
        mss,
        // Linux `cookie_ecn_ok`: ECN if the cookie says so and `tcp_ecn`
        // is not 0.
        opts: CookieOptions {
            ecn: opts.ecn && cfg.ecn != super::EcnMode::Off,
            ..opts
        },
        ts: true,
    })
}

impl Connection {
    /// The connection a valid cookie ACK `ack` stands for, created directly
    /// in ESTABLISHED (Linux `tcp_get_cookie_sock`): our SYN-ACK (ISS =
    /// SEG.ACK - 1) was sent and is acknowledged; the peer's ISN is
    /// SEG.SEQ - 1; the options are those `restored`. The caller then lets
    /// the connection process `ack` itself (it may carry data or a FIN).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_cookie(
        cfg: &TcpConfig,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        ack: &TcpRepr,
        restored: Restored,
        route_mss: u16,
        now: Instant,
        ctr: &mut TcpCounters,
    ) -> Connection {
        let seg_ack = ack.ack.unwrap_or(SeqNum(1));
        let iss = seg_ack - 1usize;
        // The SYN as far as the cookie remembers it.
        let syn = TcpRepr {
            src_port: remote.port(),
            dst_port: local.port(),
            seq: ack.seq - 1usize,
            syn: true,
            window: ack.window,
            max_seg_size: Some(restored.mss),
            window_scale: restored.opts.wscale,
            sack_permitted: restored.opts.sack,
            // An ECN-setup SYN, if the cookie agreed to one.
            ece: restored.opts.ecn,
            cwr: restored.opts.ecn,
            timestamp: ack.timestamp.filter(|_| restored.ts).map(|(v, _)| (v, 0)),
            ..TcpRepr::default()
        };
        let mut c = Connection::accept(cfg, local, remote, &syn, iss, route_mss, now);
        // Our SYN-ACK went out (statelessly) and this ACK acknowledges it.
        c.snd.una = seg_ack;
        c.snd.nxt = seg_ack;
        c.snd.max = seg_ack;
        c.snd.syn_acked = true;
        // Linux's child from a cookie: the SYN-ACK delivered
        // (`tcp_rcv_state_process`); the SYN counted by `accept`, this ACK
        // when the connection processes it.
        c.stats.delivered = 1;
        c.rtx.rack.on_ack(seg_ack);
        c.snd.wnd = usize::from(ack.window) << c.opt.snd_wscale;
        c.snd.max_wnd = c.snd.wnd;
        c.snd.wl1 = ack.seq;
        c.snd.wl2 = seg_ack;
        // The window the SYN-ACK offered (unscaled, as in any SYN).
        c.rcv.adv = c.rcv.nxt + c.rcv_wnd_available().min(0xffff);
        c.ack.last_sent = c.rcv.nxt;
        c.timers.last_send_at = now;
        // No RTT sample: when the SYN-ACK left is not known (its TSval is
        // rounded down by up to 63 ms); the RTO stays the initial one.
        c.report.open_counted = true;
        ctr.PassiveOpens += 1;
        c.set_state(Phase::Established, Some(ctr));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const L: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
    const R: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000);

    fn at(secs: u64) -> Instant {
        Instant::from_secs(secs)
    }

    #[test]
    fn cookie_round_trips_the_mss_index() {
        let jar = CookieJar::new([3; 16]);
        for (mss, want) in [
            (100, 536),
            (536, 536),
            (1299, 536),
            (1300, 1300),
            (1452, 1440),
            (1460, 1460),
            (9000, 1460),
        ] {
            let (c, m) = jar.init_sequence(L, R, SeqNum(77), mss, at(1000));
            assert_eq!(m, want, "mss {mss}");
            assert_eq!(jar.check(L, R, SeqNum(77), c, at(1000)), Some(want));
        }
    }

    #[test]
    fn cookie_is_bound_to_tuple_isn_and_secret() {
        let jar = CookieJar::new([3; 16]);
        let (c, _) = jar.init_sequence(L, R, SeqNum(77), 1460, at(1000));
        let other = SocketAddrV4::new(*R.ip(), 40001);
        assert_eq!(jar.check(L, other, SeqNum(77), c, at(1000)), None);
        assert_eq!(jar.check(L, R, SeqNum(77 + 4096), c, at(1000)), None);
        assert_eq!(jar.check(L, R, SeqNum(77), c + 1u32, at(1000)), None);
        // As in Linux, the MSS index is added into the 24 hashed bits: an
        // ISN one lower reads as the next index (a guess is accepted with
        // probability 4 / 2^24, whatever MSS it lands on).
        assert_eq!(jar.check(L, R, SeqNum(78), c, at(1000)), Some(1440));
        assert_eq!(jar.check(L, R, SeqNum(76), c, at(1000)), None);
        let other_jar = CookieJar::new([4; 16]);
        assert_eq!(other_jar.check(L, R, SeqNum(77), c, at(1000)), None);
    }

    #[test]
    fn cookie_lives_this_minute_and_the_next() {
        let jar = CookieJar::new([9; 16]);
        // Sent in the last second of minute 16, checked in minute 17: ok.
        let (c, _) = jar.init_sequence(L, R, SeqNum(5), 1460, at(16 * 60 + 59));
        assert_eq!(jar.check(L, R, SeqNum(5), c, at(17 * 60 + 1)), Some(1460));
        assert_eq!(jar.check(L, R, SeqNum(5), c, at(17 * 60 + 59)), Some(1460));
        // Two counter values later: stale.
        assert_eq!(jar.check(L, R, SeqNum(5), c, at(18 * 60)), None);
        // Not from the future either.
        assert_eq!(jar.check(L, R, SeqNum(5), c, at(15 * 60 + 59)), None);
    }

    #[test]
    fn timestamp_carries_options_and_never_runs_ahead() {
        for clock in [0u32, 5, 63, 64, 1000, 1_000_037, u32::MAX] {
            for opts in [
                CookieOptions {
                    wscale: Some(7),
                    sack: true,
                    ecn: false,
                },
                CookieOptions {
                    wscale: None,
                    sack: false,
                    ecn: false,
                },
                CookieOptions {
                    wscale: Some(14),
                    sack: false,
                    ecn: true,
                },
                CookieOptions {
                    wscale: Some(0),
                    sack: true,
                    ecn: false,
                },
            ] {
                let ts = init_timestamp(clock, opts);
                assert_eq!(decode_timestamp(ts), opts, "clock {clock}");
                let behind = clock.wrapping_sub(ts);
                assert!(behind < 64, "clock {clock} ts {ts}");
            }
        }
    }
}
