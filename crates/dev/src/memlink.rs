//! An in-memory Ethernet link between two ports, on a *virtual* clock, with
//! seeded and fully deterministic impairments per direction.
//!
//! Time never advances by itself: the driver sets it with
//! [`MemPort::set_now`] (either port; the clock is shared) and asks
//! [`MemPort::next_event`] when the next frame becomes deliverable. Given the
//! same seed, configuration and sequence of calls, the link behaves
//! identically on every run.
//!
//! Model, per direction, for each frame sent at time `t`:
//! 1. tail drop if `queue_limit` frames are already in flight;
//! 2. loss with probability `loss`;
//! 3. serialisation: with `rate_bps`, the frame leaves when the previous one
//!    has left, plus `len * 8 / rate` (a FIFO bottleneck);
//! 4. propagation `delay` plus a uniform random `0..=jitter`;
//! 5. reordering with probability `reorder`: the frame is held back by an
//!    extra uniform `1µs..=reorder_hold` so later frames overtake it;
//! 6. corruption with probability `corrupt`: one random bit of one random
//!    byte is flipped;
//! 7. duplication with probability `duplicate`: a second copy is delivered
//!    (its own jitter).
//!
//! Frames become receivable on the other port once their delivery time is
//! `<= now`, in delivery-time order (ties in send order).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::impair::{flip_random_bit, serialisation_time, Scheduled};
use crate::{Device, ETHERNET_HEADER_LEN};

/// Impairments of one direction of the link.
#[derive(Debug, Clone, PartialEq)]
pub struct Impairments {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that a frame is held back so later frames overtake it.
    pub reorder: f64,
    /// Probability that one bit of the frame is flipped.
    pub corrupt: f64,
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Extra uniform random delay in `0..=jitter` (can reorder by itself).
    pub jitter: Duration,
    /// Maximum extra hold of a reordered frame (uniform in `1µs..=reorder_hold`).
    pub reorder_hold: Duration,
    /// Bottleneck rate in bits per second (`None` = infinite).
    pub rate_bps: Option<u64>,
    /// Maximum number of frames in flight; more are tail-dropped.
    pub queue_limit: usize,
}

impl Default for Impairments {
    /// A perfect link: no loss, no delay, no rate limit, 4096 frames of queue.
    fn default() -> Self {
        Impairments {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            reorder_hold: Duration::from_millis(2),
            rate_bps: None,
            queue_limit: 4096,
        }
    }
}

impl Impairments {
    /// A perfect link (same as `Default`).
    pub fn none() -> Self {
        Self::default()
    }
}

/// Counters of one direction of the link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Frames handed to `send` (accepted or not).
    pub sent: u64,
    pub sent_bytes: u64,
    /// Frames taken out by the receiving port.
    pub delivered: u64,
    pub delivered_bytes: u64,
    /// Frames lost on purpose (`loss`).
    pub lost: u64,
    /// Frames tail-dropped because `queue_limit` frames were in flight.
    pub queue_drops: u64,
    /// Extra copies created (`duplicate`).
    pub duplicated: u64,
    /// Frames held back (`reorder`).
    pub reordered: u64,
    /// Frames with a flipped bit (`corrupt`).
    pub corrupted: u64,
    /// Frames refused because they were larger than MTU + Ethernet header.
    pub oversize: u64,
    /// Frames truncated because the receive buffer was too small.
    pub truncated: u64,
}

/// A frame in flight, deliverable at a virtual time.
type Pending = Scheduled<Duration>;

struct Direction {
    cfg: Impairments,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<Pending>>,
    /// When the bottleneck has finished serialising the last frame.
    free_at: Duration,
    counters: LinkCounters,
    /// Recycled frame buffers.
    pool: Vec<Vec<u8>>,
}

impl Direction {
    fn new(cfg: Impairments, seed: u64) -> Direction {
        Direction {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            free_at: Duration::ZERO,
            counters: LinkCounters::default(),
            pool: Vec::new(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        // Always draw, so the random sequence does not depend on which
        // probabilities are zero... except that a zero probability never fires.
        let x: f64 = self.rng.gen();
        p > 0.0 && x < p
    }

    fn uniform(&mut self, max: Duration) -> Duration {
        let m = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if m == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.rng.gen_range(0..=m))
        }
    }

    fn buffer(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut b = self.pool.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        b
    }

    /// Send the frame `parts` make up (copied straight into the buffer
    /// held in flight).
    fn send(&mut self, now: Duration, order: &mut u64, parts: &[&[u8]]) {
        let len = crate::parts_len(parts);
        self.counters.sent += 1;
        self.counters.sent_bytes += len as u64;
        if self.queue.len() >= self.cfg.queue_limit {
            self.counters.queue_drops += 1;
            return;
        }
        if self.chance(self.cfg.loss) {
            self.counters.lost += 1;
            return;
        }
        let mut depart = now;
        if let Some(rate) = self.cfg.rate_bps.filter(|&r| r > 0) {
            let start = self.free_at.max(now);
            depart = start + serialisation_time(len, rate);
            self.free_at = depart;
        }
        let jitter = self.uniform(self.cfg.jitter);
        let mut at = depart + self.cfg.delay + jitter;
        if self.chance(self.cfg.reorder) {
            self.counters.reordered += 1;
            let hold = self.uniform(self.cfg.reorder_hold);
            at += hold.max(Duration::from_micros(1));
        }
        let mut data = self.pool.pop().unwrap_or_default();
        crate::gather_into(&mut data, parts);
        if self.chance(self.cfg.corrupt) && !data.is_empty() {
            self.counters.corrupted += 1;
            flip_random_bit(&mut self.rng, &mut data);
        }
        let dup = self.chance(self.cfg.duplicate);
        if dup {
            self.counters.duplicated += 1;
            let copy = self.buffer(&data);
            let extra = self.uniform(self.cfg.jitter);
            *order += 1;
            self.queue.push(Reverse(Pending {
                at: depart + self.cfg.delay + extra,
                order: *order,
                data: copy,
            }));
        }
        *order += 1;
        self.queue.push(Reverse(Pending {
            at,
            order: *order,
            data,
        }));
    }

    fn recv(&mut self, now: Duration, buf: &mut [u8]) -> Option<usize> {
        let ready = matches!(self.queue.peek(), Some(Reverse(p)) if p.at <= now);
        if !ready {
            return None;
        }
        let Reverse(p) = self.queue.pop()?;
        let n = p.data.len().min(buf.len());
        if n < p.data.len() {
            self.counters.truncated += 1;
        }
        buf[..n].copy_from_slice(&p.data[..n]);
        self.counters.delivered += 1;
        self.counters.delivered_bytes += p.data.len() as u64;
        if self.pool.len() < 256 {
            self.pool.push(p.data);
        }
        Some(n)
    }

    fn next_event(&self) -> Option<Duration> {
        self.queue.peek().map(|Reverse(p)| p.at)
    }
}

struct Link {
    now: Duration,
    order: u64,
    /// `dirs[0]`: A → B, `dirs[1]`: B → A.
    dirs: [Direction; 2],
}

/// Read-only access to the link's virtual clock (e.g. for pcap timestamps).
#[derive(Clone)]
pub struct VirtualClock {
    link: Arc<Mutex<Link>>,
}

impl VirtualClock {
    pub fn now(&self) -> Duration {
        lock(&self.link).now
    }
}

fn lock(link: &Mutex<Link>) -> MutexGuard<'_, Link> {
    // A panic while holding the lock cannot leave the link inconsistent in a
    // way that matters to a test harness; keep going.
    link.lock().unwrap_or_else(|p| p.into_inner())
}

/// One end of an in-memory link; implements [`Device`].
pub struct MemPort {
    link: Arc<Mutex<Link>>,
    /// 0 for A (sends on dirs[0]), 1 for B.
    side: usize,
    mtu: usize,
    mac: Option<[u8; 6]>,
}

/// Create a link: frames sent on the first port go through `cfg_ab` to the
/// second; frames sent on the second go through `cfg_ba` to the first.
/// Each direction draws from its own ChaCha8 stream derived from `seed`.
pub fn pair(cfg_ab: Impairments, cfg_ba: Impairments, seed: u64) -> (MemPort, MemPort) {
    let link = Arc::new(Mutex::new(Link {
        now: Duration::ZERO,
        order: 0,
        dirs: [
            Direction::new(cfg_ab, seed),
            Direction::new(cfg_ba, seed ^ 0x9e37_79b9_7f4a_7c15),
        ],
    }));
    let a = MemPort {
        link: link.clone(),
        side: 0,
        mtu: 1500,
        mac: None,
    };
    let b = MemPort {
        link,
        side: 1,
        mtu: 1500,
        mac: None,
    };
    (a, b)
}

impl MemPort {
    /// Set the IP MTU (default 1500); larger frames are refused by `send`.
    pub fn with_mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }

    /// Give the port a MAC address to report through [`Device::mac`].
    pub fn with_mac(mut self, mac: [u8; 6]) -> Self {
        self.mac = Some(mac);
        self
    }

    /// Advance the shared virtual clock to `now` (never moves backwards).
    pub fn set_now(&self, now: Duration) {
        let mut l = lock(&self.link);
        if now > l.now {
            l.now = now;
        }
    }

    /// The shared virtual clock.
    pub fn now(&self) -> Duration {
        lock(&self.link).now
    }

    /// A handle reading the shared virtual clock.
    pub fn clock(&self) -> VirtualClock {
        VirtualClock {
            link: self.link.clone(),
        }
    }

    /// The earliest delivery time of any frame in flight, in either
    /// direction (may be `<= now`: a frame is waiting to be received).
    pub fn next_event(&self) -> Option<Duration> {
        let l = lock(&self.link);
        match (l.dirs[0].next_event(), l.dirs[1].next_event()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest delivery time of a frame travelling towards this port.
    pub fn next_arrival(&self) -> Option<Duration> {
        lock(&self.link).dirs[1 - self.side].next_event()
    }

    /// Number of frames in flight in both directions.
    pub fn in_flight(&self) -> usize {
        let l = lock(&self.link);
        l.dirs[0].queue.len() + l.dirs[1].queue.len()
    }

    /// Counters of the direction this port sends on.
    pub fn tx_counters(&self) -> LinkCounters {
        lock(&self.link).dirs[self.side].counters
    }

    /// Counters of the direction this port receives from.
    pub fn rx_counters(&self) -> LinkCounters {
        lock(&self.link).dirs[1 - self.side].counters
    }

    /// Replace the impairments of the direction this port sends on.
    pub fn set_tx_impairments(&self, cfg: Impairments) {
        lock(&self.link).dirs[self.side].cfg = cfg;
    }
}

impl Device for MemPort {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut l = lock(&self.link);
        let now = l.now;
        Ok(l.dirs[1 - self.side].recv(now, buf))
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.send_vectored(&[frame])
    }

    /// The parts are copied straight into the frame held in flight.
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let len = crate::parts_len(parts);
        let mut l = lock(&self.link);
        let l = &mut *l;
        let dir = &mut l.dirs[self.side];
        if len > self.mtu + ETHERNET_HEADER_LEN {
            dir.counters.oversize += 1;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "frame of {len} bytes exceeds MTU {} + Ethernet header",
                    self.mtu
                ),
            ));
        }
        dir.send(l.now, &mut l.order, parts);
        Ok(())
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn mac(&self) -> Option<[u8; 6]> {
        self.mac
    }

    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(i: u32) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[14..18].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn drain(port: &mut MemPort) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2000];
        while let Ok(Some(n)) = port.recv(&mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }

    #[test]
    fn perfect_link_delivers_in_order_immediately() {
        let (mut a, mut b) = pair(Impairments::none(), Impairments::none(), 1);
        for i in 0..10 {
            a.send(&frame(i)).unwrap();
        }
        assert_eq!(a.next_event(), Some(Duration::ZERO));
        let got = drain(&mut b);
        assert_eq!(got, (0..10).map(frame).collect::<Vec<_>>());
        assert_eq!(a.next_event(), None);
        assert!(drain(&mut a).is_empty(), "nothing travels B -> A");
        assert_eq!(a.tx_counters().delivered, 10);
        assert_eq!(b.rx_counters().sent, 10);
    }

    #[test]
    fn delay_holds_frames_until_virtual_time() {
        let cfg = Impairments {
            delay: Duration::from_millis(5),
            ..Impairments::none()
        };
        let (mut a, mut b) = pair(Impairments::none(), cfg, 1);
        b.send(&frame(1)).unwrap();
        assert!(drain(&mut a).is_empty());
        assert_eq!(b.next_event(), Some(Duration::from_millis(5)));
        a.set_now(Duration::from_millis(4));
        assert!(drain(&mut a).is_empty());
        a.set_now(Duration::from_millis(5));
        assert_eq!(drain(&mut a).len(), 1);
        a.set_now(Duration::from_millis(1));
        assert_eq!(a.now(), Duration::from_millis(5), "clock never goes back");
    }

    #[test]
    fn rate_limit_serialises() {
        // 1 Mbit/s: 125 bytes take 1 ms.
        let cfg = Impairments {
            rate_bps: Some(1_000_000),
            ..Impairments::none()
        };
        let (mut a, mut b) = pair(cfg, Impairments::none(), 1);
        for _ in 0..3 {
            a.send(&[0u8; 125]).unwrap();
        }
        let mut times = Vec::new();
        while let Some(t) = b.next_arrival() {
            b.set_now(t);
            assert_eq!(drain(&mut b).len(), 1);
            times.push(t);
        }
        assert_eq!(
            times,
            vec![
                Duration::from_millis(1),
                Duration::from_millis(2),
                Duration::from_millis(3)
            ]
        );
    }

    #[test]
    fn queue_limit_tail_drops() {
        let cfg = Impairments {
            queue_limit: 3,
            delay: Duration::from_millis(1),
            ..Impairments::none()
        };
        let (mut a, _b) = pair(cfg, Impairments::none(), 1);
        for i in 0..5 {
            a.send(&frame(i)).unwrap();
        }
        assert_eq!(a.tx_counters().queue_drops, 2);
        assert_eq!(a.in_flight(), 3);
    }

    #[test]
    fn oversize_frames_are_refused() {
        let (a, _b) = pair(Impairments::none(), Impairments::none(), 1);
        let mut a = a.with_mtu(100);
        assert!(a.send(&[0u8; 114]).is_ok());
        assert_eq!(
            a.send(&[0u8; 115]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(a.tx_counters().oversize, 1);
    }

    fn run(seed: u64, cfg: Impairments) -> (Vec<Vec<u8>>, LinkCounters) {
        let (mut a, mut b) = pair(cfg, Impairments::none(), seed);
        let mut got = Vec::new();
        for i in 0..2000u32 {
            a.set_now(Duration::from_micros(u64::from(i) * 100));
            a.send(&frame(i)).unwrap();
            got.extend(drain(&mut b));
        }
        while let Some(t) = a.next_event() {
            a.set_now(t);
            got.extend(drain(&mut b));
        }
        (got, a.tx_counters())
    }

    #[test]
    fn impairments_are_deterministic_and_roughly_calibrated() {
        let cfg = Impairments {
            loss: 0.1,
            duplicate: 0.05,
            reorder: 0.1,
            corrupt: 0.05,
            delay: Duration::from_millis(1),
            jitter: Duration::from_micros(50),
            ..Impairments::none()
        };
        let (g1, c1) = run(42, cfg.clone());
        let (g2, c2) = run(42, cfg.clone());
        assert_eq!(g1, g2);
        assert_eq!(c1, c2);
        let (g3, _) = run(43, cfg);
        assert_ne!(g1, g3, "another seed gives another run");
        // 2000 frames: expectations 200 lost, ~90 dup, ~180 reordered, ~90 corrupted.
        assert!((120..300).contains(&c1.lost), "{c1:?}");
        assert!((40..160).contains(&c1.duplicated), "{c1:?}");
        assert!((100..300).contains(&c1.reordered), "{c1:?}");
        assert!((40..160).contains(&c1.corrupted), "{c1:?}");
        assert_eq!(c1.delivered, c1.sent - c1.lost + c1.duplicated);
        assert_eq!(g1.len() as u64, c1.delivered);
        // Reordering happened: some frame arrives after a later-sent one.
        let ids: Vec<u32> = g1
            .iter()
            .map(|f| u32::from_be_bytes([f[14], f[15], f[16], f[17]]))
            .collect();
        assert!(ids.windows(2).any(|w| w[0] > w[1]));
        // Corruption flips exactly one bit.
        let flipped = g1
            .iter()
            .filter(|f| {
                let id = u32::from_be_bytes([f[14], f[15], f[16], f[17]]);
                let orig = frame(id);
                f.iter()
                    .zip(orig.iter())
                    .map(|(x, y)| (x ^ y).count_ones())
                    .sum::<u32>()
                    == 1
            })
            .count();
        assert!(flipped > 0);
    }
}
