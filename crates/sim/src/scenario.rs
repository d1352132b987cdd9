//! Scenarios: everything a run does is derived from a family, an address
//! family mode and a seed.

use std::fmt;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use ustack_core::tcp::{CcAlgorithm, TcpConfig};
use ustack_dev::memlink::Impairments;

/// Kinds of link trouble a scenario draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// No impairments; random delay, buffers and application behaviour.
    Clean,
    /// Loss 0–20% per direction, delay and jitter.
    Lossy,
    /// Reordering and duplication 0–20% per direction, jitter.
    Reorder,
    /// Corruption 0–20% per direction plus some loss.
    Corrupt,
    /// All of the above at once, plus rate limits and tail drops.
    Mixed,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Clean,
        Family::Lossy,
        Family::Reorder,
        Family::Corrupt,
        Family::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Clean => "clean",
            Family::Lossy => "lossy",
            Family::Reorder => "reorder",
            Family::Corrupt => "corrupt",
            Family::Mixed => "mixed",
        }
    }

    pub fn parse(s: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Address families of a run's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IpMode {
    /// Every connection over IPv4 (the scenarios of the first simulations:
    /// a seed draws exactly what it drew before IPv6 existed here).
    #[default]
    V4,
    /// Every connection over IPv6 (static addresses `fd00::1`, `fd00::2`).
    V6,
    /// Dual stack: connections alternate between IPv4 and IPv6 on the same
    /// pair of engines, and each host's one listener is `[::]:5000`, taking
    /// IPv4 connections as IPv4-mapped addresses; about half the IPv4
    /// clients are IPv6 sockets connecting to an IPv4-mapped address.
    Dual,
}

impl IpMode {
    pub const ALL: [IpMode; 3] = [IpMode::V4, IpMode::V6, IpMode::Dual];

    pub fn name(self) -> &'static str {
        match self {
            IpMode::V4 => "v4",
            IpMode::V6 => "v6",
            IpMode::Dual => "dual",
        }
    }

    pub fn parse(s: &str) -> Option<IpMode> {
        IpMode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Mixed into every seeded draw: 0 for IPv4 (its scenarios stay what
    /// they were), so that IPv6 and dual-stack runs explore scenarios of
    /// their own rather than the IPv4 ones with other headers.
    fn salt(self) -> u64 {
        match self {
            IpMode::V4 => 0,
            IpMode::V6 => 0x7636_0000_0000_0006,
            IpMode::Dual => 0x6475_616c_0000_0046,
        }
    }
}

impl fmt::Display for IpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How one side's application ends its half of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Write everything, `tcp_shutdown`, read until EOF, `tcp_close`.
    ShutdownThenClose,
    /// Write everything, read every expected byte, `tcp_close` (FIN from
    /// close, possibly before the peer's FIN arrives).
    Close,
}

/// Behaviour of one side of one connection.
#[derive(Debug, Clone)]
pub struct AppPlan {
    /// Bytes this side writes.
    pub bytes: u64,
    /// Largest single `tcp_send`.
    pub max_write: usize,
    /// Largest single `tcp_recv`.
    pub max_read: usize,
    /// Probability, after each step, of pausing (not reading or writing).
    pub pause_prob: f64,
    pub max_pause: Duration,
    pub ending: Ending,
    pub nodelay: bool,
}

/// One connection of a run.
#[derive(Debug, Clone)]
pub struct ConnPlan {
    /// The client is on host A (else on host B).
    pub client_on_a: bool,
    /// When the client calls `tcp_connect`.
    pub start: Duration,
    /// Over IPv6 (else IPv4).
    pub ipv6: bool,
    pub client: AppPlan,
    pub server: AppPlan,
}

/// A complete, deterministic description of a run.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub family: Family,
    /// The address families the scenario was generated for (each
    /// connection's own is [`ConnPlan::ipv6`]); names the run in reports.
    pub ip: IpMode,
    pub seed: u64,
    /// Impairments from A to B and from B to A.
    pub ab: Impairments,
    pub ba: Impairments,
    pub tcp_a: TcpConfig,
    pub tcp_b: TcpConfig,
    /// IP MTU of the link and both stacks (at least 1280 when a connection
    /// runs over IPv6, the IPv6 minimum).
    pub mtu: usize,
    pub conns: Vec<ConnPlan>,
    /// The run fails if it has not finished by this virtual time.
    pub max_time: Duration,
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, items: &[T]) -> T {
    items[rng.gen_range(0..items.len())]
}

fn prob(rng: &mut ChaCha8Rng, max: f64) -> f64 {
    if rng.gen_bool(0.2) {
        0.0
    } else {
        rng.gen_range(0.0..=max)
    }
}

fn millis(rng: &mut ChaCha8Rng, max: u64) -> Duration {
    Duration::from_micros(rng.gen_range(0..=max * 1000))
}

fn impairments(rng: &mut ChaCha8Rng, family: Family) -> Impairments {
    let mut i = Impairments {
        delay: millis(rng, 20),
        ..Impairments::none()
    };
    match family {
        Family::Clean => {}
        Family::Lossy => {
            i.loss = prob(rng, 0.2);
            i.jitter = millis(rng, 2);
        }
        Family::Reorder => {
            i.reorder = prob(rng, 0.2);
            i.duplicate = prob(rng, 0.2);
            i.jitter = millis(rng, 5);
            i.reorder_hold = millis(rng, 20).max(Duration::from_micros(1));
        }
        Family::Corrupt => {
            i.corrupt = prob(rng, 0.2);
            i.loss = prob(rng, 0.05);
        }
        Family::Mixed => {
            i.loss = prob(rng, 0.2);
            i.reorder = prob(rng, 0.2);
            i.duplicate = prob(rng, 0.2);
            i.corrupt = prob(rng, 0.2);
            i.jitter = millis(rng, 5);
            i.reorder_hold = millis(rng, 20).max(Duration::from_micros(1));
            if rng.gen_bool(0.5) {
                i.rate_bps = Some(rng.gen_range(1_000_000..=100_000_000));
            }
            if rng.gen_bool(0.3) {
                i.queue_limit = rng.gen_range(8..=200);
            }
        }
    }
    i
}

fn tcp_config(rng: &mut ChaCha8Rng) -> TcpConfig {
    let mut c = TcpConfig {
        mss: pick(rng, &[536, 1000, 1460, 1460]),
        rcv_buf: pick(rng, &[4096, 16 * 1024, 64 * 1024, 256 * 1024]),
        snd_buf: pick(rng, &[4096, 16 * 1024, 64 * 1024, 256 * 1024]),
        window_scale: rng.gen_bool(0.8),
        timestamps: rng.gen_bool(0.7),
        sack: rng.gen_bool(0.7),
        nodelay: rng.gen_bool(0.5),
        // Give up far later than Linux would: at 20% loss each way a
        // handshake fails 6 times in a row often enough to show up in
        // thousands of runs, and the properties are about delivery, not
        // about giving up.
        syn_retries: 30,
        synack_retries: 30,
        max_retries: 30,
        max_rto: Duration::from_secs(pick(rng, &[2, 10, 60])),
        ..TcpConfig::default()
    };
    // Send-buffer autotuning: a quarter of the configurations (those with
    // MSS 1000; no extra draw, so every seed keeps its scenario) start
    // with a quarter of the send buffer and grow it with cwnd; the others
    // keep a fixed buffer.
    c.snd_buf_initial = if c.mss == 1000 {
        (c.snd_buf / 4).max(1024)
    } else {
        c.snd_buf
    };
    c
}

fn app(rng: &mut ChaCha8Rng, big: bool) -> AppPlan {
    let bytes = match rng.gen_range(0..10) {
        0 => 0,
        1..=3 => rng.gen_range(1..2_000),
        4..=8 => rng.gen_range(2_000..40_000),
        _ if big => rng.gen_range(40_000..300_000),
        _ => rng.gen_range(40_000..80_000),
    };
    AppPlan {
        bytes,
        max_write: pick(rng, &[1, 100, 1460, 8192, 65536]),
        max_read: pick(rng, &[1, 100, 1460, 8192, 65536]),
        pause_prob: prob(rng, 0.1),
        max_pause: millis(rng, 300),
        ending: if rng.gen_bool(0.6) {
            Ending::ShutdownThenClose
        } else {
            Ending::Close
        },
        nodelay: rng.gen_bool(0.5),
    }
}

impl Scenario {
    /// The IPv4 scenario for `(family, seed)`; the same pair always gives
    /// the same run.
    pub fn generate(family: Family, seed: u64) -> Scenario {
        Scenario::generate_ip(family, IpMode::V4, seed)
    }

    /// The scenario for `(family, ip, seed)`; the same triple always gives
    /// the same run, and `IpMode::V4` gives [`Scenario::generate`]'s.
    pub fn generate_ip(family: Family, ip: IpMode, seed: u64) -> Scenario {
        let salt = ip.salt();
        let mut rng = ChaCha8Rng::seed_from_u64(
            seed ^ (family as u64).wrapping_mul(0x51_7cc1_b727_220a) ^ salt,
        );
        let ab = impairments(&mut rng, family);
        let ba = if rng.gen_bool(0.3) {
            ab.clone()
        } else {
            impairments(&mut rng, family)
        };
        let mut tcp_a = tcp_config(&mut rng);
        let mut tcp_b = tcp_config(&mut rng);
        // Congestion control and pacing of each host: a quarter of the
        // hosts run NewReno, a quarter do not pace. Drawn from a hash of the
        // seed, not from `rng`, so every other choice a seed made before
        // these options existed stays the same.
        let draw = crate::stream::mix(seed ^ (family as u64) ^ 0x6363_7061_6365 ^ salt);
        for (i, t) in [&mut tcp_a, &mut tcp_b].into_iter().enumerate() {
            let bits = draw >> (8 * i);
            t.congestion_control = if bits & 3 == 0 {
                CcAlgorithm::NewReno
            } else {
                CcAlgorithm::Cubic
            };
            t.pacing = (bits >> 2) & 3 != 0;
        }
        let mut mtu = pick(&mut rng, &[576, 1280, 1500, 1500, 1500]);
        if ip != IpMode::V4 {
            // IPv6 needs 1280 (RFC 8200 5): 576 becomes 1280.
            mtu = mtu.max(1280);
        }
        let n = rng.gen_range(1..=4);
        let big = family == Family::Clean;
        // Dual stack: the connections alternate families, starting with
        // one drawn from a hash (not from `rng`, as above).
        let first_v6 = crate::stream::mix(seed ^ salt ^ 0x6970_7636) & 1 == 1;
        let conns = (0..n)
            .map(|c| ConnPlan {
                client_on_a: rng.gen_bool(0.6),
                start: millis(&mut rng, 100),
                ipv6: match ip {
                    IpMode::V4 => false,
                    IpMode::V6 => true,
                    IpMode::Dual => (c % 2 == 0) == first_v6,
                },
                client: app(&mut rng, big),
                server: app(&mut rng, big),
            })
            .collect();
        Scenario {
            family,
            ip,
            seed,
            ab,
            ba,
            tcp_a,
            tcp_b,
            mtu,
            conns,
            max_time: Duration::from_secs(3600),
        }
    }
}
