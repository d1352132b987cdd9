//! Shared harness for the TCP tests: two `Connection`s joined by a seeded,
//! impaired channel on a virtual clock. Segments cross as real wire bytes
//! (emit + parse with checksum verification).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_core::tcp::{rst_for_unmatched, Connection, State, TcpConfig, TcpCounters, TcpShared};
use ustack_core::time::{Duration, Instant};
use ustack_wire::tcp::{SeqNum, TcpPacket, TcpRepr};

/// splitmix64: small, seeded, good enough for tests.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Impair {
    pub loss: f64,
    pub dup: f64,
    pub corrupt: f64,
    pub delay: Duration,
    pub jitter: Duration,
    /// netem-like reordering: with this probability a segment skips
    /// `delay` (and jitter) and overtakes those queued before it.
    pub reorder: f64,
}

pub const A_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000);
pub const B_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);

/// One direction of the link.
#[derive(Default)]
pub struct Pipe {
    pub q: VecDeque<(Instant, u64, Vec<u8>)>,
    pub imp: Impair,
    pub sent: u64,
    pub corrupted: u64,
    pub csum_drops: u64,
    order: u64,
    /// When set, every segment put on this pipe is dropped.
    pub blackhole: bool,
}

impl Pipe {
    pub fn push(&mut self, now: Instant, bytes: Vec<u8>, rng: &mut Rng) {
        self.sent += 1;
        if self.blackhole || rng.chance(self.imp.loss) {
            return;
        }
        let copies = if rng.chance(self.imp.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let mut b = bytes.clone();
            if rng.chance(self.imp.corrupt) && !b.is_empty() {
                let i = rng.below(b.len() as u64) as usize;
                b[i] ^= 1 << rng.below(8);
                self.corrupted += 1;
            }
            let jitter = self.imp.jitter.as_micros() as u64;
            let mut at = now + self.imp.delay + Duration::from_micros(rng.below(jitter + 1));
            if self.imp.reorder > 0.0 && rng.chance(self.imp.reorder) {
                at = now;
            }
            self.order += 1;
            self.q.push_back((at, self.order, b));
        }
    }
    pub fn next_at(&self) -> Option<Instant> {
        self.q.iter().map(|(t, _, _)| *t).min()
    }
    /// Pop the earliest segment due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        let (i, _) = self
            .q
            .iter()
            .enumerate()
            .filter(|(_, (t, _, _))| *t <= now)
            .min_by_key(|(_, (t, o, _))| (*t, *o))?;
        self.q.remove(i).map(|(_, _, b)| b)
    }
}

pub fn to_bytes(r: &TcpRepr, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), src, dst, true);
    buf
}

/// One end: a connection (or none: then it answers like a closed port or,
/// for the server, a listener).
pub struct End {
    pub addr: SocketAddrV4,
    pub peer: SocketAddrV4,
    pub conn: Option<Connection>,
    pub listening: bool,
    pub cfg: TcpConfig,
    pub iss: SeqNum,
    pub ctr: TcpCounters,
    /// What a socket table's connections share (one per end, like a stack).
    pub shared: TcpShared,
    pub route_mss: u16,
}

impl End {
    pub fn client(cfg: TcpConfig, iss: u32, now: Instant) -> End {
        let conn = Connection::connect(&cfg, A_ADDR, B_ADDR, SeqNum(iss), 1460, now);
        let shared = TcpShared::new(&cfg, [iss as u8; 16]);
        End {
            addr: A_ADDR,
            peer: B_ADDR,
            conn: Some(conn),
            listening: false,
            cfg,
            iss: SeqNum(iss),
            shared,
            ctr: TcpCounters::default(),
            route_mss: 1460,
        }
    }
    pub fn server(cfg: TcpConfig, iss: u32) -> End {
        let shared = TcpShared::new(&cfg, [iss as u8; 16]);
        End {
            addr: B_ADDR,
            peer: A_ADDR,
            conn: None,
            listening: true,
            cfg,
            iss: SeqNum(iss),
            shared,
            ctr: TcpCounters::default(),
            route_mss: 1460,
        }
    }
    pub fn conn(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("connection exists")
    }
    pub fn state(&self) -> State {
        self.conn.as_ref().map_or(State::Closed, |c| c.state())
    }

    /// Receive wire bytes: parse (checksum verified), demux like a Stack.
    pub fn receive(&mut self, now: Instant, bytes: &[u8], out: &mut Vec<Vec<u8>>) -> bool {
        self.ctr.InSegs += 1;
        let Ok(p) = TcpPacket::new_checked(bytes) else {
            self.ctr.InErrs += 1;
            return false;
        };
        let seg = match TcpRepr::parse(&p, *self.peer.ip(), *self.addr.ip(), true) {
            Ok(s) => s,
            Err(_) => {
                self.ctr.InErrs += 1;
                self.ctr.InCsumErrors += 1;
                return false;
            }
        };
        if let Some(c) = &mut self.conn {
            if c.state() == State::TimeWait && c.accepts_reuse_syn(&seg) {
                self.conn = None;
            } else if c.state() != State::Closed {
                c.process(now, &seg, &mut self.ctr, &mut self.shared);
                return true;
            }
        }
        if self.listening && seg.syn && seg.ack.is_none() && !seg.rst {
            self.conn = Some(Connection::accept(
                &self.cfg,
                self.addr,
                self.peer,
                &seg,
                self.iss,
                self.route_mss,
                now,
            ));
            return true;
        }
        if let Some(r) = rst_for_unmatched(&seg) {
            self.ctr.OutSegs += 1;
            self.ctr.OutRsts += 1;
            out.push(to_bytes(&r, *self.addr.ip(), *self.peer.ip()));
        }
        true
    }

    /// Dispatch and collect emitted segments as bytes.
    pub fn dispatch(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        let (src, dst) = (*self.addr.ip(), *self.peer.ip());
        if let Some(c) = &mut self.conn {
            c.dispatch(now, &mut self.ctr, &mut self.shared, &mut |r| {
                out.push(to_bytes(r, src, dst));
                true
            });
        }
    }

    pub fn poll_at(&self) -> Option<Instant> {
        self.conn.as_ref().and_then(|c| c.poll_at())
    }
}

/// Two ends and the two pipes between them, on a virtual clock.
pub struct Net {
    pub now: Instant,
    pub a: End,
    pub b: End,
    pub ab: Pipe,
    pub ba: Pipe,
    pub rng: Rng,
    /// Segments seen on the wire (a->b, b->a), parsed, for assertions.
    pub log: Vec<(bool, Vec<u8>)>,
    pub keep_log: bool,
}

impl Net {
    pub fn new(a: End, b: End, seed: u64) -> Net {
        Net {
            now: Instant::ZERO,
            a,
            b,
            ab: Pipe::default(),
            ba: Pipe::default(),
            rng: Rng::new(seed),
            log: Vec::new(),
            keep_log: false,
        }
    }

    /// Run dispatch on both ends, deliver everything due at `now`.
    pub fn step(&mut self) {
        for _ in 0..1000 {
            let mut progressed = false;
            let mut out = Vec::new();
            self.a.dispatch(self.now, &mut out);
            for b in out.drain(..) {
                if self.keep_log {
                    self.log.push((true, b.clone()));
                }
                self.ab.push(self.now, b, &mut self.rng);
                progressed = true;
            }
            self.b.dispatch(self.now, &mut out);
            for b in out.drain(..) {
                if self.keep_log {
                    self.log.push((false, b.clone()));
                }
                self.ba.push(self.now, b, &mut self.rng);
                progressed = true;
            }
            if let Some(bytes) = self.ab.pop_due(self.now) {
                if !self.b.receive(self.now, &bytes, &mut out) {
                    self.ab.csum_drops += 1;
                }
                for r in out.drain(..) {
                    self.ba.push(self.now, r, &mut self.rng);
                }
                progressed = true;
            }
            if let Some(bytes) = self.ba.pop_due(self.now) {
                if !self.a.receive(self.now, &bytes, &mut out) {
                    self.ba.csum_drops += 1;
                }
                for r in out.drain(..) {
                    self.ab.push(self.now, r, &mut self.rng);
                }
                progressed = true;
            }
            if !progressed {
                return;
            }
        }
        panic!("no quiescence at {:?}", self.now);
    }

    /// The next time anything happens (besides `extra`), or None.
    pub fn next_event(&self, extra: Option<Instant>) -> Option<Instant> {
        [
            self.a.poll_at(),
            self.b.poll_at(),
            self.ab.next_at(),
            self.ba.next_at(),
            extra,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advance the clock to the next event (never backwards).
    pub fn advance(&mut self, extra: Option<Instant>) -> bool {
        match self.next_event(extra) {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// Run until `until` (virtual), stepping through events.
    pub fn run_until(&mut self, until: Instant) {
        self.step();
        while let Some(t) = self.next_event(None) {
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            self.step();
        }
        self.now = self.now.max(until);
        self.step();
    }

    /// Parsed segments of the log (a_to_b, repr) — payload omitted.
    pub fn logged(&self) -> Vec<(bool, TcpRepr<'_>)> {
        self.log
            .iter()
            .filter_map(|(d, b)| {
                let p = TcpPacket::new_checked(&b[..]).ok()?;
                TcpRepr::parse(&p, Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED, false)
                    .ok()
                    .map(|r| (*d, r))
            })
            .collect()
    }
}

/// Deterministic stream content.
pub fn pattern(stream: u64, i: usize) -> u8 {
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream.wrapping_mul(0x5851_f42d);
    (x >> 29) as u8
}

impl Net {
    /// A client (port 1000) and a server (ISS 5,000,000) with the given
    /// configurations and a fixed one-way delay each way.
    pub fn with_delay(ca: TcpConfig, cb: TcpConfig, delay_ms: u64, seed: u64) -> Net {
        let a = End::client(ca, 1_000, Instant::ZERO);
        let b = End::server(cb, 5_000_000);
        let mut n = Net::new(a, b, seed);
        n.ab.imp.delay = Duration::from_millis(delay_ms);
        n.ba.imp.delay = Duration::from_millis(delay_ms);
        n
    }

    /// Run up to 5 virtual seconds and require both ends ESTABLISHED.
    pub fn establish(&mut self) {
        let t = self.now + Duration::from_secs(5);
        self.run_until(t);
        assert_eq!(self.a.state(), State::Established);
        assert_eq!(self.b.state(), State::Established);
    }
}

/// Everything readable from `c` right now (stops at EOF or would-block).
pub fn read_all(c: &mut Connection) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(k) = c.recv(&mut buf) {
        if k == 0 {
            break;
        }
        out.extend_from_slice(buf.get(..k).unwrap_or(&[]));
    }
    out
}
