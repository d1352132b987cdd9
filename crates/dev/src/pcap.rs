//! Classic pcap files (LINKTYPE_ETHERNET, microsecond timestamps) and a
//! [`Capture`] wrapper that records every frame a device sends or receives.
//! `tcpdump -r FILE` and Wireshark read the output.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Device, FrameBatch};

const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const LINKTYPE_ETHERNET: u32 = 1;
/// Default snapshot length (bytes recorded per frame).
pub const DEFAULT_SNAPLEN: u32 = 65535;
/// Flush after this many frames...
const FLUSH_EVERY_FRAMES: u32 = 64;
/// ...or when this much wall time has passed since the last flush.
const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes a classic pcap stream. Buffers, flushes every 64 frames or second,
/// and on drop.
pub struct PcapWriter<W: Write> {
    /// Always `Some` except inside `into_inner`.
    out: Option<BufWriter<W>>,
    snaplen: u32,
    unflushed: u32,
    last_flush: std::time::Instant,
}

impl PcapWriter<File> {
    /// Create (truncate) `path` and write the pcap header.
    pub fn create(path: impl AsRef<Path>) -> io::Result<PcapWriter<File>> {
        let path = path.as_ref();
        let f = File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create capture file {}: {e}", path.display()),
            )
        })?;
        PcapWriter::new(f)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Write the pcap global header to `out` (snaplen 65535).
    pub fn new(out: W) -> io::Result<PcapWriter<W>> {
        Self::with_snaplen(out, DEFAULT_SNAPLEN)
    }

    /// Like [`new`](Self::new) with a snapshot length: longer frames are
    /// recorded truncated (with their original length).
    pub fn with_snaplen(out: W, snaplen: u32) -> io::Result<PcapWriter<W>> {
        let mut out = BufWriter::new(out);
        let mut hdr = [0u8; 24];
        hdr[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
        hdr[4..6].copy_from_slice(&2u16.to_le_bytes());
        hdr[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone = 0, sigfigs = 0
        hdr[16..20].copy_from_slice(&snaplen.to_le_bytes());
        hdr[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&hdr)?;
        out.flush()?;
        Ok(PcapWriter {
            out: Some(out),
            snaplen,
            unflushed: 0,
            last_flush: std::time::Instant::now(),
        })
    }

    /// Record one frame with timestamp `ts` (time since the Unix epoch, or
    /// any epoch for virtual clocks).
    pub fn write_frame(&mut self, ts: Duration, frame: &[u8]) -> io::Result<()> {
        self.write_parts(ts, std::iter::once(frame))
    }

    /// Record one frame given as consecutive parts (the frame is their
    /// concatenation), written as they are: the same record as
    /// [`write_frame`](Self::write_frame) of the concatenation.
    pub fn write_frame_vectored(&mut self, ts: Duration, parts: &[&[u8]]) -> io::Result<()> {
        self.write_parts(ts, parts.iter().copied())
    }

    /// Record the frame `parts` make up (the iterator is cloned once, to
    /// measure the frame before writing it).
    fn write_parts<'a>(
        &mut self,
        ts: Duration,
        parts: impl Iterator<Item = &'a [u8]> + Clone,
    ) -> io::Result<()> {
        let len = parts.clone().fold(0usize, |n, p| n.saturating_add(p.len()));
        let caplen = len.min(self.snaplen as usize);
        let mut rec = [0u8; 16];
        let secs = u32::try_from(ts.as_secs()).unwrap_or(u32::MAX);
        rec[0..4].copy_from_slice(&secs.to_le_bytes());
        rec[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
        let out = self.out()?;
        out.write_all(&rec)?;
        let mut left = caplen;
        for p in parts {
            if left == 0 {
                break;
            }
            let take = p.get(..left).unwrap_or(p);
            out.write_all(take)?;
            left -= take.len();
        }
        self.unflushed += 1;
        if self.unflushed >= FLUSH_EVERY_FRAMES || self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Push buffered records to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.unflushed = 0;
        self.last_flush = std::time::Instant::now();
        self.out()?.flush()
    }

    fn out(&mut self) -> io::Result<&mut BufWriter<W>> {
        self.out
            .as_mut()
            .ok_or_else(|| io::Error::other("pcap writer already finished"))
    }

    /// Flush and return the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        let out = self
            .out
            .take()
            .ok_or_else(|| io::Error::other("pcap writer already finished"))?;
        out.into_inner().map_err(|e| e.into_error())
    }
}

impl<W: Write> Drop for PcapWriter<W> {
    fn drop(&mut self) {
        // Errors on drop cannot be reported; a best-effort flush.
        if let Some(out) = self.out.as_mut() {
            let _ = out.flush();
        }
    }
}

/// Where a [`Capture`] gets its timestamps.
pub type Clock = Box<dyn FnMut() -> Duration + Send>;

fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Wraps a device and records every frame received from it or sent through
/// it. Capture write errors never fail the device operation; they are
/// counted in [`Capture::write_errors`].
pub struct Capture<D: Device, W: Write = File> {
    inner: D,
    pcap: PcapWriter<W>,
    clock: Clock,
    write_errors: u64,
}

impl<D: Device> Capture<D, File> {
    /// Record to a new file at `path`, with wall-clock timestamps.
    pub fn to_file(inner: D, path: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Capture::new(inner, PcapWriter::create(path)?))
    }
}

impl<D: Device, W: Write> Capture<D, W> {
    /// Record through `pcap`, with wall-clock timestamps.
    pub fn new(inner: D, pcap: PcapWriter<W>) -> Self {
        Capture {
            inner,
            pcap,
            clock: Box::new(wall_clock),
            write_errors: 0,
        }
    }

    /// Record through `pcap`, with timestamps from `clock` (e.g. a memlink
    /// [`VirtualClock`](crate::memlink::VirtualClock)).
    pub fn with_clock(inner: D, pcap: PcapWriter<W>, clock: Clock) -> Self {
        Capture {
            inner,
            pcap,
            clock,
            write_errors: 0,
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Number of frames that could not be written to the capture.
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    /// Flush the capture file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.pcap.flush()
    }

    /// Stop capturing; returns the device (the capture is flushed on drop).
    pub fn into_inner(self) -> D {
        self.inner
    }

    /// Record `frame` (as the device carries it: without its virtio-net
    /// header, if the device has one, which is not part of the Ethernet
    /// frame a pcap reader expects).
    fn record(&mut self, frame: &[u8]) {
        self.record_parts(&[frame]);
    }

    /// Record the frame `parts` make up, as [`record`](Self::record) does
    /// their concatenation: the parts are written to the capture as they
    /// are, less the virtio-net header (which may span parts).
    fn record_parts(&mut self, parts: &[&[u8]]) {
        let mut skip = if self.inner.offloads().vnet_hdr {
            crate::VNET_HDR_LEN
        } else {
            0
        };
        let ts = (self.clock)();
        let rest = parts.iter().map(move |p| {
            let from = skip.min(p.len());
            skip -= from;
            p.get(from..).unwrap_or(&[])
        });
        if self.pcap.write_parts(ts, rest).is_err() {
            self.write_errors += 1;
        }
    }
}

impl<D: Device, W: Write> Device for Capture<D, W> {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = self.inner.recv(buf)?;
        if let Some(n) = r {
            let n = n.min(buf.len());
            self.record(&buf[..n]);
        }
        Ok(r)
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.inner.send(frame)?;
        self.record(frame);
        Ok(())
    }

    /// The parts go to the inner device as they are and into the capture
    /// as they are (no gathering): the record is that of `send` for their
    /// concatenation.
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        self.inner.send_vectored(parts)?;
        self.record_parts(parts);
        Ok(())
    }

    fn recv_batch(&mut self, batch: &mut FrameBatch) -> io::Result<usize> {
        let n = self.inner.recv_batch(batch)?;
        for i in 0..n {
            if let Some(f) = batch.get(i) {
                self.record(f);
            }
        }
        Ok(n)
    }

    fn send_batch(&mut self, frames: &FrameBatch) -> io::Result<usize> {
        let n = self.inner.send_batch(frames)?;
        for f in frames.iter().take(n) {
            self.record(f);
        }
        Ok(n)
    }

    forward_device!(self => self.inner; mtu, mac, raw_fd, next_deadline, poll_deferred, offloads);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_layout() {
        let mut w = PcapWriter::with_snaplen(Vec::new(), 4).unwrap();
        w.write_frame(Duration::new(3, 5_000), &[1, 2, 3, 4, 5, 6])
            .unwrap();
        let bytes = w.into_inner().unwrap();
        assert_eq!(bytes.len(), 24 + 16 + 4);
        assert_eq!(&bytes[0..4], &0xa1b2c3d4u32.to_le_bytes());
        assert_eq!(&bytes[20..24], &1u32.to_le_bytes());
        assert_eq!(&bytes[24..28], &3u32.to_le_bytes());
        assert_eq!(&bytes[28..32], &5u32.to_le_bytes());
        assert_eq!(&bytes[32..36], &4u32.to_le_bytes(), "caplen = snaplen");
        assert_eq!(&bytes[36..40], &6u32.to_le_bytes(), "orig len");
        assert_eq!(&bytes[40..44], &[1, 2, 3, 4]);
    }
}
