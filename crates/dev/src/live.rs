//! Live capture from a running stack (`ustack capture`): a device wrapper,
//! [`Tapped`], that copies frames into a [`CaptureHub`] while somebody
//! captures, and a reader that drains the hub as pcap records.
//!
//! With nobody capturing, a frame costs one relaxed atomic load. While a
//! capture runs, frames that pass the filter are copied (up to the snapshot
//! length) into a bounded queue; when the reader falls behind and the queue
//! is full, frames are dropped and counted, never waited for: a slow reader
//! never slows the stack.

use std::collections::VecDeque;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Device, FrameBatch, VNET_HDR_LEN};

/// Bytes of records a capture may hold for its reader by default.
pub const DEFAULT_QUEUE_BYTES: usize = 8 << 20;

/// Which frames a capture keeps (all given conditions must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureFilter {
    /// Source or destination IPv4 address (ARP: sender or target).
    pub host: Option<Ipv4Addr>,
    /// TCP or UDP source or destination port.
    pub port: Option<u16>,
    /// `tcp`, `udp`, `icmp` or `arp`.
    pub proto: Option<CaptureProto>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureProto {
    Tcp,
    Udp,
    Icmp,
    Arp,
}

impl CaptureFilter {
    /// Does the Ethernet frame `f` pass?
    pub fn matches(&self, f: &[u8]) -> bool {
        if *self == CaptureFilter::default() {
            return true;
        }
        let Some(et) = f.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
            return false;
        };
        match et {
            0x0806 => {
                if matches!(self.proto, Some(p) if p != CaptureProto::Arp) || self.port.is_some() {
                    return false;
                }
                let ip = |o: usize| {
                    f.get(o..o + 4)
                        .map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3]))
                };
                self.host
                    .is_none_or(|h| ip(14 + 14) == Some(h) || ip(14 + 24) == Some(h))
            }
            0x0800 => {
                let Some(ip) = f.get(14..) else {
                    return false;
                };
                if ip.len() < 20 {
                    return false;
                }
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                let proto = ip[9];
                let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
                let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
                if self.host.is_some_and(|h| h != src && h != dst) {
                    return false;
                }
                let want = match self.proto {
                    Some(CaptureProto::Tcp) => Some(6),
                    Some(CaptureProto::Udp) => Some(17),
                    Some(CaptureProto::Icmp) => Some(1),
                    Some(CaptureProto::Arp) => return false,
                    None => None,
                };
                if want.is_some_and(|w| w != proto) {
                    return false;
                }
                match self.port {
                    None => true,
                    Some(p) => {
                        // Ports only in a first (or only) fragment of TCP or UDP.
                        let frag_off = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
                        if !(proto == 6 || proto == 17) || frag_off != 0 {
                            return false;
                        }
                        let port = |o: usize| {
                            ip.get(ihl + o..ihl + o + 2)
                                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                        };
                        port(0) == Some(p) || port(2) == Some(p)
                    }
                }
            }
            _ => self.host.is_none() && self.port.is_none() && self.proto.is_none(),
        }
    }
}

struct State {
    /// pcap records (16-byte header and data), oldest first.
    queue: VecDeque<Vec<u8>>,
    bytes: usize,
    max_bytes: usize,
    snaplen: usize,
    filter: CaptureFilter,
    captured: u64,
    dropped: u64,
}

/// Where a [`Tapped`] device puts frames while a capture runs; shared with
/// whoever serves capture requests (the control endpoint).
pub struct CaptureHub {
    active: AtomicBool,
    state: Mutex<State>,
}

impl std::fmt::Debug for CaptureHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureHub")
            .field("active", &self.active.load(Ordering::Relaxed))
            .finish()
    }
}

/// What a drain took from the hub.
#[derive(Debug, Default)]
pub struct Drained {
    /// pcap records, concatenated.
    pub records: Vec<u8>,
    /// Frames in `records`.
    pub frames: u64,
    /// Frames dropped since the capture started (queue full).
    pub dropped: u64,
}

impl CaptureHub {
    pub fn new() -> Arc<CaptureHub> {
        Arc::new(CaptureHub {
            active: AtomicBool::new(false),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                bytes: 0,
                max_bytes: DEFAULT_QUEUE_BYTES,
                snaplen: 65535,
                filter: CaptureFilter::default(),
                captured: 0,
                dropped: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start capturing frames that pass `filter`, `snaplen` bytes of each, at
    /// most `max_bytes` of records held for the reader.
    pub fn start(&self, filter: CaptureFilter, snaplen: usize, max_bytes: usize) {
        let mut s = self.lock();
        s.queue.clear();
        s.bytes = 0;
        s.max_bytes = max_bytes.max(1 << 16);
        s.snaplen = snaplen.clamp(14, 262_144);
        s.filter = filter;
        s.captured = 0;
        s.dropped = 0;
        drop(s);
        self.active.store(true, Ordering::Release);
    }

    /// Stop capturing and let go of what was held.
    pub fn stop(&self) {
        self.active.store(false, Ordering::Release);
        let mut s = self.lock();
        s.queue = VecDeque::new();
        s.bytes = 0;
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Take the held records, at most about `max` bytes of them.
    ///
    /// Under the lock only the records' handles move (the data path's
    /// `record` waits on that lock); their bytes are joined after it.
    pub fn drain(&self, max: usize) -> Drained {
        let (taken, dropped) = {
            let mut s = self.lock();
            let mut n = 0;
            let mut k = 0;
            for r in &s.queue {
                if k > 0 && n + r.len() > max {
                    break;
                }
                n += r.len();
                k += 1;
            }
            s.bytes -= n;
            let taken: Vec<Vec<u8>> = s.queue.drain(..k).collect();
            (taken, s.dropped)
        };
        let mut records = Vec::with_capacity(taken.iter().map(Vec::len).sum());
        for r in &taken {
            records.extend_from_slice(r);
        }
        Drained {
            records,
            frames: taken.len() as u64,
            dropped,
        }
    }

    /// Record `frame` (an Ethernet frame) if a capture runs and wants it.
    #[inline]
    pub fn record(&self, frame: &[u8]) {
        if !self.active.load(Ordering::Relaxed) {
            return;
        }
        self.record_slow(frame);
    }

    #[cold]
    fn record_slow(&self, frame: &[u8]) {
        let mut s = self.lock();
        if !s.filter.matches(frame) {
            return;
        }
        let cap = frame.len().min(s.snaplen);
        let need = 16 + cap;
        if s.bytes + need > s.max_bytes {
            s.dropped += 1;
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let mut r = Vec::with_capacity(need);
        r.extend_from_slice(
            &u32::try_from(ts.as_secs())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        r.extend_from_slice(&ts.subsec_micros().to_le_bytes());
        r.extend_from_slice(&(cap as u32).to_le_bytes());
        r.extend_from_slice(&u32::try_from(frame.len()).unwrap_or(u32::MAX).to_le_bytes());
        r.extend_from_slice(&frame[..cap]);
        s.bytes += need;
        s.captured += 1;
        s.queue.push_back(r);
    }
}

/// The 24-byte pcap file header (LINKTYPE_ETHERNET, microseconds).
pub fn pcap_header(snaplen: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h
}

/// A device whose frames (both ways) go to a [`CaptureHub`] while a
/// capture runs.
pub struct Tapped<D: Device> {
    inner: D,
    hub: Arc<CaptureHub>,
    skip: usize,
}

impl<D: Device> Tapped<D> {
    pub fn new(inner: D, hub: Arc<CaptureHub>) -> Tapped<D> {
        let skip = if inner.offloads().vnet_hdr {
            VNET_HDR_LEN
        } else {
            0
        };
        Tapped { inner, hub, skip }
    }

    #[inline]
    fn rec(&self, f: &[u8]) {
        // `record` returns at once while nobody captures.
        self.hub.record(f.get(self.skip..).unwrap_or(&[]));
    }
}

impl<D: Device> Device for Tapped<D> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = self.inner.recv(buf)?;
        if let Some(n) = r {
            self.rec(&buf[..n.min(buf.len())]);
        }
        Ok(r)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.inner.send(frame)?;
        self.rec(frame);
        Ok(())
    }

    fn recv_batch(&mut self, batch: &mut FrameBatch) -> io::Result<usize> {
        let n = self.inner.recv_batch(batch)?;
        if self.hub.is_active() {
            for i in 0..n {
                if let Some(f) = batch.get(i) {
                    self.rec(f);
                }
            }
        }
        Ok(n)
    }

    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        let n = self.inner.send_batch(frames)?;
        if self.hub.is_active() {
            for f in frames.iter().take(n) {
                self.rec(f);
            }
        }
        Ok(n)
    }

    forward_device!(self => self.inner; mtu, mac, raw_fd, next_deadline, poll_deferred, offloads);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12] = 0x08;
        f[14] = 0x45;
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn filters_select_by_host_port_and_protocol() {
        let f = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        let all = CaptureFilter::default();
        assert!(all.matches(&f));
        let port = CaptureFilter {
            port: Some(80),
            ..Default::default()
        };
        assert!(port.matches(&f));
        let other = CaptureFilter {
            port: Some(443),
            ..Default::default()
        };
        assert!(!other.matches(&f));
        let host = CaptureFilter {
            host: Some(Ipv4Addr::new(10, 0, 0, 2)),
            proto: Some(CaptureProto::Tcp),
            ..Default::default()
        };
        assert!(host.matches(&f));
        let udp = CaptureFilter {
            proto: Some(CaptureProto::Udp),
            ..Default::default()
        };
        assert!(!udp.matches(&f));
        // Truncated and garbage frames never match a filter, never panic.
        for n in 0..f.len() {
            let _ = port.matches(&f[..n]);
            assert!(!host.matches(&f[..n.min(33)]));
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_the_reader_drains() {
        let hub = CaptureHub::new();
        let f = tcp_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        hub.record(&f);
        assert_eq!(hub.drain(1 << 20).frames, 0, "nothing while idle");
        hub.start(CaptureFilter::default(), 65535, 1 << 16);
        for _ in 0..10_000 {
            hub.record(&f);
        }
        let d = hub.drain(usize::MAX);
        assert_eq!(d.frames as usize, (1 << 16) / (16 + f.len()));
        assert_eq!(d.dropped, 10_000 - d.frames);
        assert_eq!(d.records.len(), d.frames as usize * (16 + f.len()));
        hub.record(&f);
        assert_eq!(hub.drain(usize::MAX).frames, 1, "room again after a drain");
        hub.stop();
        hub.record(&f);
        assert_eq!(hub.drain(usize::MAX).frames, 0);
    }
}
