//! Device wrappers: [`Tracing`] logs every frame, [`FaultInject`] drops,
//! corrupts and refuses frames on a seeded schedule (wall-clock independent).

use std::fmt::Write as _;
use std::io;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::impair::flip_random_bit;
use crate::Device;

/// A one-line summary of an Ethernet frame for logs: addresses, ethertype
/// and, for IPv4 and IPv6, addresses, protocol, ports and TCP flags,
/// sequence numbers, window and length. Never panics on short or
/// malformed frames.
pub fn summarize(frame: &[u8]) -> String {
    let mut s = String::with_capacity(96);
    let mac = |b: &[u8]| -> String {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let (Some(dst), Some(src), Some(et)) = (frame.get(0..6), frame.get(6..12), frame.get(12..14))
    else {
        return format!("runt frame ({} bytes)", frame.len());
    };
    let ethertype = u16::from_be_bytes([et[0], et[1]]);
    let _ = write!(
        s,
        "{} > {} type {ethertype:#06x} len {}",
        mac(src),
        mac(dst),
        frame.len()
    );
    if ethertype == 0x0800 {
        if let Some(ip) = frame.get(14..34) {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let proto = ip[9];
            let _ = write!(
                s,
                " ip {}.{}.{}.{} > {}.{}.{}.{} proto {proto}",
                ip[12], ip[13], ip[14], ip[15], ip[16], ip[17], ip[18], ip[19]
            );
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            transport(
                &mut s,
                proto,
                frame.get(14 + ihl..),
                total.saturating_sub(ihl),
            );
        }
    } else if ethertype == 0x86dd {
        if let Some(ip) = frame.get(14..54) {
            let addr = |b: &[u8]| -> std::net::Ipv6Addr {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                a.into()
            };
            let proto = ip[6];
            let _ = write!(
                s,
                " ip6 {} > {} proto {proto}",
                addr(&ip[8..24]),
                addr(&ip[24..40])
            );
            let payload_len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            transport(&mut s, proto, frame.get(54..), payload_len);
        }
    } else if ethertype == 0x0806 {
        if let Some(op) = frame.get(20..22) {
            let _ = write!(s, " arp op {}", u16::from_be_bytes([op[0], op[1]]));
        }
    }
    s
}

/// Ports of a TCP or UDP header at the start of `l4` and, for TCP, flags,
/// numbers, window and payload length (of `ip_payload` bytes of IP payload).
fn transport(s: &mut String, proto: u8, l4: Option<&[u8]>, ip_payload: usize) {
    let l4 = l4.unwrap_or_default();
    if proto == 6 || proto == 17 {
        if let Some(p) = l4.get(..4) {
            let _ = write!(
                s,
                " ports {} > {}",
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]])
            );
        }
    }
    if proto == 6 {
        if let Some(t) = l4.get(..20) {
            let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
            let ack = u32::from_be_bytes([t[8], t[9], t[10], t[11]]);
            let flags = t[13];
            let names = [
                (0x02, 'S'),
                (0x10, '.'),
                (0x08, 'P'),
                (0x01, 'F'),
                (0x04, 'R'),
            ];
            let f: String = names
                .iter()
                .filter(|(b, _)| flags & b != 0)
                .map(|(_, c)| *c)
                .collect();
            let doff = usize::from(t[12] >> 4) * 4;
            let payload = ip_payload.saturating_sub(doff);
            let win = u16::from_be_bytes([t[14], t[15]]);
            let _ = write!(s, " [{f}] seq {seq} ack {ack} win {win} len {payload}");
        }
    }
}

/// Logs every frame in and out at `trace` level (target `ustack_dev::frames`).
pub struct Tracing<D: Device> {
    inner: D,
    label: String,
}

impl<D: Device> Tracing<D> {
    pub fn new(inner: D, label: impl Into<String>) -> Self {
        Tracing {
            inner,
            label: label.into(),
        }
    }
    pub fn inner(&self) -> &D {
        &self.inner
    }
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }
    pub fn into_inner(self) -> D {
        self.inner
    }

    /// Log a sent frame and how its sending went.
    fn log_tx(&self, r: &io::Result<()>, frame: &[u8]) {
        match r {
            Ok(()) => {
                tracing::trace!(target: "ustack_dev::frames", dev = %self.label, "tx {}", summarize(frame))
            }
            Err(e) => {
                tracing::trace!(target: "ustack_dev::frames", dev = %self.label, "tx failed ({e}) {}", summarize(frame))
            }
        }
    }
}

impl<D: Device> Device for Tracing<D> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = self.inner.recv(buf);
        if let Ok(Some(n)) = r {
            if tracing::enabled!(target: "ustack_dev::frames", tracing::Level::TRACE) {
                let f = buf.get(..n).unwrap_or(buf);
                tracing::trace!(target: "ustack_dev::frames", dev = %self.label, "rx {}", summarize(f));
            }
        }
        r
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let r = self.inner.send(frame);
        if tracing::enabled!(target: "ustack_dev::frames", tracing::Level::TRACE) {
            self.log_tx(&r, frame);
        }
        r
    }

    /// Forwards the parts as they are; only while frames are logged are
    /// they gathered, for the summary (which reads headers across them).
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let r = self.inner.send_vectored(parts);
        if tracing::enabled!(target: "ustack_dev::frames", tracing::Level::TRACE) {
            self.log_tx(&r, &parts.concat());
        }
        r
    }

    forward_device!(self => self.inner; mtu, mac, raw_fd, next_deadline, poll_deferred, offloads);
}

/// Fault probabilities for [`FaultInject`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Probability that a received frame is silently discarded.
    pub rx_drop: f64,
    /// Probability that a sent frame is silently discarded (reported as sent).
    pub tx_drop: f64,
    /// Probability that a received frame has one bit flipped.
    pub rx_corrupt: f64,
    /// Probability that a sent frame has one bit flipped.
    pub tx_corrupt: f64,
    /// Probability that `send` fails with `WouldBlock` (back-pressure).
    pub tx_would_block: f64,
}

/// Counters of injected faults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_corrupted: u64,
    pub tx_corrupted: u64,
    pub tx_would_block: u64,
}

/// Wraps a device and injects seeded faults. Works on any device (TAP
/// included); for time-based impairments use [`crate::memlink`].
pub struct FaultInject<D: Device> {
    inner: D,
    faults: Faults,
    rng: ChaCha8Rng,
    counters: FaultCounters,
    scratch: Vec<u8>,
}

impl<D: Device> FaultInject<D> {
    pub fn new(inner: D, faults: Faults, seed: u64) -> Self {
        FaultInject {
            inner,
            faults,
            rng: ChaCha8Rng::seed_from_u64(seed),
            counters: FaultCounters::default(),
            scratch: Vec::new(),
        }
    }
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }
    pub fn inner(&self) -> &D {
        &self.inner
    }
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }
    pub fn into_inner(self) -> D {
        self.inner
    }

    fn chance(&mut self, p: f64) -> bool {
        let x: f64 = self.rng.gen();
        p > 0.0 && x < p
    }

    /// What happens to the next frame sent (the draws and counters of a
    /// send, the same for `send` and `send_vectored`).
    fn tx_fate(&mut self) -> TxFate {
        if self.chance(self.faults.tx_would_block) {
            self.counters.tx_would_block += 1;
            return TxFate::WouldBlock;
        }
        if self.chance(self.faults.tx_drop) {
            self.counters.tx_dropped += 1;
            return TxFate::Drop;
        }
        if self.chance(self.faults.tx_corrupt) {
            self.counters.tx_corrupted += 1;
            return TxFate::Corrupt;
        }
        TxFate::Pass
    }

    /// Send a copy of the frame `parts` make up with one bit flipped.
    fn send_corrupted(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        crate::gather_into(&mut scratch, parts);
        flip_random_bit(&mut self.rng, &mut scratch);
        let r = self.inner.send(&scratch);
        self.scratch = scratch;
        r
    }
}

/// The fate [`FaultInject`] draws for a frame sent.
enum TxFate {
    WouldBlock,
    Drop,
    Corrupt,
    Pass,
}

impl<D: Device> Device for FaultInject<D> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            let Some(n) = self.inner.recv(buf)? else {
                return Ok(None);
            };
            if self.chance(self.faults.rx_drop) {
                self.counters.rx_dropped += 1;
                continue;
            }
            if self.chance(self.faults.rx_corrupt) {
                self.counters.rx_corrupted += 1;
                let n = n.min(buf.len());
                flip_random_bit(&mut self.rng, &mut buf[..n]);
            }
            return Ok(Some(n));
        }
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        match self.tx_fate() {
            TxFate::WouldBlock => Err(io::ErrorKind::WouldBlock.into()),
            TxFate::Drop => Ok(()),
            TxFate::Corrupt => self.send_corrupted(&[frame]),
            TxFate::Pass => self.inner.send(frame),
        }
    }

    /// The same draws and faults as `send` for the concatenation; a frame
    /// that passes untouched is forwarded in its parts, a corrupted one is
    /// gathered (the bit is flipped in a copy, never in the caller's parts).
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        match self.tx_fate() {
            TxFate::WouldBlock => Err(io::ErrorKind::WouldBlock.into()),
            TxFate::Drop => Ok(()),
            TxFate::Corrupt => self.send_corrupted(parts),
            TxFate::Pass => self.inner.send_vectored(parts),
        }
    }

    forward_device!(self => self.inner; mtu, mac, raw_fd, next_deadline, poll_deferred, offloads);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memlink::{pair, Impairments};

    #[test]
    fn summarize_never_panics_and_names_fields() {
        assert!(summarize(&[1, 2, 3]).starts_with("runt"));
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12] = 0x08;
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&53u16.to_be_bytes());
        f[36..38].copy_from_slice(&4000u16.to_be_bytes());
        let s = summarize(&f);
        assert!(
            s.contains("10.0.0.1 > 10.0.0.2 proto 17 ports 53 > 4000"),
            "{s}"
        );
        // bad IHL pointing past the end
        f[14] = 0x4f;
        let _ = summarize(&f);
        for n in 0..f.len() {
            let _ = summarize(&f[..n]);
        }
    }

    #[test]
    fn summarize_names_ipv6_tcp_fields() {
        // fd00::1.40000 > fd00::2.5000, SYN+ACK, 20-byte header, 100 bytes.
        let mut f = vec![0u8; 14 + 40 + 20 + 100];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&120u16.to_be_bytes());
        f[20] = 6;
        f[21] = 64;
        f[22..24].copy_from_slice(&[0xfd, 0]);
        f[37] = 1;
        f[38..40].copy_from_slice(&[0xfd, 0]);
        f[53] = 2;
        f[54..56].copy_from_slice(&40000u16.to_be_bytes());
        f[56..58].copy_from_slice(&5000u16.to_be_bytes());
        f[58..62].copy_from_slice(&7u32.to_be_bytes());
        f[62..66].copy_from_slice(&9u32.to_be_bytes());
        f[66] = 5 << 4;
        f[67] = 0x12;
        f[68..70].copy_from_slice(&512u16.to_be_bytes());
        let s = summarize(&f);
        assert!(
            s.contains(
                "ip6 fd00::1 > fd00::2 proto 6 ports 40000 > 5000 [S.] seq 7 ack 9 win 512 len 100"
            ),
            "{s}"
        );
        for n in 0..f.len() {
            let _ = summarize(&f[..n]);
        }
    }

    #[test]
    fn fault_inject_drops_and_blocks() {
        let (a, mut b) = pair(Impairments::none(), Impairments::none(), 7);
        let faults = Faults {
            tx_drop: 0.5,
            tx_would_block: 0.2,
            ..Faults::default()
        };
        let mut a = FaultInject::new(a, faults, 9);
        let mut ok = 0;
        let mut blocked = 0;
        for _ in 0..1000 {
            match a.send(&[0u8; 60]) {
                Ok(()) => ok += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => blocked += 1,
                Err(e) => panic!("{e}"),
            }
        }
        let c = a.counters();
        assert_eq!(blocked, c.tx_would_block);
        assert!((100..300).contains(&blocked), "{c:?}");
        let mut buf = [0u8; 100];
        let mut got = 0;
        while b.recv(&mut buf).unwrap().is_some() {
            got += 1;
        }
        assert_eq!(got, ok - c.tx_dropped);
        assert!(c.tx_dropped > 250, "{c:?}");
    }
}
