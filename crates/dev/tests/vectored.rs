//! `Device::send_vectored`: a frame sent in parts is the frame sent whole.
//!
//! For the default implementation and every override that runs without
//! privileges (the in-memory link, the pcap capture, the tracing and fault
//! wrappers, netem), `send_vectored(&[a, b, c])` must deliver and record
//! the bytes `send(&concat)` does, with the same counters and decisions;
//! the wrappers must pass the parts on as they are when they can. (TAP and
//! AF_PACKET: `tests/tap.rs`, `tests/packet.rs`; live capture: `live.rs`.)

mod parts;
use parts::{cuts, three_parts};

use std::io::{self, Write};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ustack_dev::memlink::{pair, Impairments};
use ustack_dev::netem::{Netem, NetemConfig};
use ustack_dev::pcap::{Capture, PcapWriter};
use ustack_dev::wrap::{FaultInject, Faults, Tracing};
use ustack_dev::{Device, Offloads};

/// What a [`Recorder`] was asked to send.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    /// `send(frame)`.
    Whole(Vec<u8>),
    /// `send_vectored(parts)`, the parts as given.
    Parts(Vec<Vec<u8>>),
}

impl Sent {
    /// The frame, whichever way it came.
    fn frame(&self) -> Vec<u8> {
        match self {
            Sent::Whole(f) => f.clone(),
            Sent::Parts(p) => p.concat(),
        }
    }
}

/// A device that keeps what it is asked to send, and how (its own
/// `send_vectored`, so a wrapper that gathers shows up as `Whole`).
#[derive(Default)]
struct Recorder {
    sent: Vec<Sent>,
    vnet: bool,
}

impl Device for Recorder {
    fn recv(&mut self, _: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.sent.push(Sent::Whole(frame.to_vec()));
        Ok(())
    }
    fn send_vectored(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        self.sent
            .push(Sent::Parts(parts.iter().map(|p| p.to_vec()).collect()));
        Ok(())
    }
    fn mtu(&self) -> usize {
        1500
    }
    fn mac(&self) -> Option<[u8; 6]> {
        None
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    fn offloads(&self) -> Offloads {
        Offloads {
            vnet_hdr: self.vnet,
            ..Offloads::default()
        }
    }
}

/// A device with only `send`: it gets the trait's default `send_vectored`.
#[derive(Default)]
struct OnlySend {
    sent: Vec<Vec<u8>>,
}

impl Device for OnlySend {
    fn recv(&mut self, _: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.sent.push(frame.to_vec());
        Ok(())
    }
    fn mtu(&self) -> usize {
        1500
    }
    fn mac(&self) -> Option<[u8; 6]> {
        None
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

/// A test frame of `len` bytes: broadcast, an experimental ethertype, then
/// a pattern from `seed` (cut short if `len` is less than a header).
fn frame(seed: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    while f.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        f.push((x >> 16) as u8);
    }
    f.truncate(len);
    f
}

#[test]
fn the_default_gathers_the_parts_and_calls_send() {
    let f = frame(1, 100);
    let mut whole = OnlySend::default();
    let mut parts = OnlySend::default();
    for cut in cuts(&f) {
        whole.send(&f).unwrap();
        parts.send_vectored(&cut).unwrap();
    }
    // No part, and only empty parts: the empty frame, as `send(&[])`.
    whole.send(&[]).unwrap();
    parts.send_vectored(&[]).unwrap();
    whole.send(&[]).unwrap();
    parts.send_vectored(&[&[], &[]]).unwrap();
    assert_eq!(parts.sent, whole.sent);
    assert_eq!(parts.sent.len(), 6);
}

/// `send_vectored` through `D`'s own implementation.
fn send_vectored_via<D: Device>(mut dev: D, parts: &[&[u8]]) -> io::Result<()> {
    dev.send_vectored(parts)
}

#[test]
fn pointers_forward_the_parts_as_they_are() {
    let f = frame(2, 80);
    let cut = three_parts(&f);
    let want = vec![Sent::Parts(cut.iter().map(|p| p.to_vec()).collect())];
    let mut rec = Recorder::default();
    send_vectored_via(&mut rec, &cut).unwrap();
    assert_eq!(rec.sent, want, "&mut D");
    let mut boxed: Box<Recorder> = Box::default();
    send_vectored_via(&mut boxed, &cut).unwrap();
    assert_eq!(boxed.sent, want, "Box<D> (behind &mut)");
    let mut rec = Recorder::default();
    let dynamic: Box<dyn Device + '_> = Box::new(&mut rec);
    send_vectored_via(dynamic, &cut).unwrap();
    assert_eq!(rec.sent, want, "Box<dyn Device>");
}

/// Everything `dev` receives.
fn drain(dev: &mut dyn Device) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2000];
    while let Some(n) = dev.recv(&mut buf).unwrap() {
        out.push(buf[..n].to_vec());
    }
    out
}

#[test]
fn memlink_delivers_the_parts_as_the_whole_frame() {
    let (mut a, mut b) = pair(Impairments::none(), Impairments::none(), 1);
    let mut sent = Vec::new();
    for (i, len) in [60usize, 14, 1514].into_iter().enumerate() {
        let f = frame(i as u32, len);
        for cut in cuts(&f) {
            a.send_vectored(&cut).unwrap();
            sent.push(f.clone());
        }
    }
    a.send_vectored(&[]).unwrap();
    sent.push(Vec::new());
    assert_eq!(drain(&mut b), sent);
    let c = a.tx_counters();
    assert_eq!(c.sent, sent.len() as u64);
    assert_eq!(
        c.sent_bytes,
        sent.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    // Too large, in parts as whole: the same refusal, counted once each.
    let big = frame(9, 1515);
    let e1 = a.send(&big).unwrap_err();
    let e2 = a.send_vectored(&three_parts(&big)).unwrap_err();
    assert_eq!((e1.kind(), e1.to_string()), (e2.kind(), e2.to_string()));
    assert_eq!(a.tx_counters().oversize, 2);
}

#[test]
fn impaired_memlink_makes_the_same_decisions_for_parts() {
    let imp = Impairments {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.2,
        corrupt: 0.2,
        delay: Duration::from_millis(2),
        jitter: Duration::from_millis(1),
        rate_bps: Some(10_000_000),
        ..Impairments::none()
    };
    let (mut a1, mut b1) = pair(imp.clone(), Impairments::none(), 42);
    let (mut a2, mut b2) = pair(imp, Impairments::none(), 42);
    for i in 0..300u32 {
        let f = frame(i, 60 + (i as usize * 37) % 1400);
        a1.send(&f).unwrap();
        a2.send_vectored(&three_parts(&f)).unwrap();
        let t = Duration::from_micros(u64::from(i) * 300);
        a1.set_now(t);
        a2.set_now(t);
    }
    a1.set_now(Duration::from_secs(10));
    a2.set_now(Duration::from_secs(10));
    let got1 = drain(&mut b1);
    assert!(got1.len() > 200, "{}", got1.len());
    assert_eq!(drain(&mut b2), got1);
    assert_eq!(a2.tx_counters(), a1.tx_counters());
}

/// A pcap destination the test reads while the capture still holds it.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A capture around a recorder, `snaplen` bytes a frame, at a fixed time.
fn capture(vnet: bool, snaplen: u32) -> (Capture<Recorder, Shared>, Shared) {
    let out = Shared::default();
    let w = PcapWriter::with_snaplen(out.clone(), snaplen).unwrap();
    let rec = Recorder {
        vnet,
        ..Recorder::default()
    };
    let c = Capture::with_clock(rec, w, Box::new(|| Duration::new(7, 1000)));
    (c, out)
}

#[test]
fn capture_records_the_parts_as_the_whole_frame_and_forwards_them() {
    for (vnet, snaplen) in [(false, 65535), (true, 65535), (false, 20), (true, 20)] {
        let (mut whole, out_whole) = capture(vnet, snaplen);
        let (mut parts, out_parts) = capture(vnet, snaplen);
        for (i, len) in [60usize, 14, 1514, 5].into_iter().enumerate() {
            let f = frame(i as u32, len);
            for cut in cuts(&f) {
                whole.send(&f).unwrap();
                parts.send_vectored(&cut).unwrap();
            }
            // A virtio-net header split across parts (and an empty one).
            whole.send(&f).unwrap();
            let k = f.len().min(4);
            parts.send_vectored(&[&f[..k], &[], &f[k..]]).unwrap();
        }
        whole.send(&[]).unwrap();
        parts.send_vectored(&[]).unwrap();
        whole.flush().unwrap();
        parts.flush().unwrap();
        let (pw, pp) = (out_whole.0.lock().unwrap(), out_parts.0.lock().unwrap());
        assert!(pw.len() > 24 + 16 * 21, "vnet {vnet} snaplen {snaplen}");
        assert_eq!(*pp, *pw, "vnet {vnet} snaplen {snaplen}");
        assert_eq!(parts.write_errors(), 0);
        // The inner device got each frame once, in the parts it was given.
        let frames_whole: Vec<Vec<u8>> = whole.inner().sent.iter().map(Sent::frame).collect();
        let frames_parts: Vec<Vec<u8>> = parts.inner().sent.iter().map(Sent::frame).collect();
        assert_eq!(frames_parts, frames_whole);
        assert!(parts
            .inner()
            .sent
            .iter()
            .all(|s| matches!(s, Sent::Parts(_))));
    }
}

#[test]
fn pcap_writer_writes_parts_as_the_whole_frame() {
    let f = frame(3, 300);
    for snaplen in [65535, 300, 299, 14, 13, 1] {
        let mut w1 = PcapWriter::with_snaplen(Vec::new(), snaplen).unwrap();
        let mut w2 = PcapWriter::with_snaplen(Vec::new(), snaplen).unwrap();
        for cut in cuts(&f) {
            w1.write_frame(Duration::new(1, 2000), &f).unwrap();
            w2.write_frame_vectored(Duration::new(1, 2000), &cut)
                .unwrap();
        }
        assert_eq!(w2.into_inner().unwrap(), w1.into_inner().unwrap());
    }
}

/// A subscriber that keeps the message of every event.
struct Messages(Arc<Mutex<Vec<String>>>);

struct MessageField<'a>(&'a mut String);

impl tracing::field::Visit for MessageField<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Messages {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut m = String::new();
        event.record(&mut MessageField(&mut m));
        self.0.lock().unwrap().push(m);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn tracing_forwards_the_parts_and_logs_the_whole_frame() {
    let f = frame(4, 120);
    let cut = three_parts(&f);
    // Not logging: the parts go through as they are.
    let mut t = Tracing::new(Recorder::default(), "t");
    t.send_vectored(&cut).unwrap();
    assert_eq!(
        t.inner().sent,
        vec![Sent::Parts(cut.iter().map(|p| p.to_vec()).collect())]
    );
    // Logging: the same line as for the whole frame, still in parts.
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sub = Messages(Arc::clone(&lines));
    tracing::subscriber::with_default(sub, || {
        let mut t = Tracing::new(Recorder::default(), "t");
        t.send(&f).unwrap();
        t.send_vectored(&cut).unwrap();
        assert!(matches!(t.inner().sent[1], Sent::Parts(_)));
    });
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("tx "), "{lines:?}");
    assert_eq!(lines[1], lines[0]);
}

#[test]
fn fault_inject_makes_the_same_decisions_for_parts() {
    let faults = Faults {
        tx_drop: 0.2,
        tx_corrupt: 0.3,
        tx_would_block: 0.1,
        ..Faults::default()
    };
    let mut whole = FaultInject::new(Recorder::default(), faults.clone(), 11);
    let mut parts = FaultInject::new(Recorder::default(), faults, 11);
    for i in 0..500u32 {
        let f = frame(i, 14 + (i as usize * 13) % 200);
        let r1 = whole.send(&f).map_err(|e| e.kind());
        let r2 = parts.send_vectored(&three_parts(&f)).map_err(|e| e.kind());
        assert_eq!(r2, r1, "frame {i}");
    }
    let c = parts.counters();
    assert_eq!(c, whole.counters());
    assert!(
        c.tx_corrupted > 50 && c.tx_dropped > 50 && c.tx_would_block > 20,
        "{c:?}"
    );
    let frames = |d: &FaultInject<Recorder>| -> Vec<Vec<u8>> {
        d.inner().sent.iter().map(Sent::frame).collect()
    };
    assert_eq!(frames(&parts), frames(&whole));
    // Untouched frames went on in their parts; only corrupted copies whole.
    let (split, gathered) = parts
        .inner()
        .sent
        .iter()
        .fold((0u64, 0u64), |(s, g), x| match x {
            Sent::Parts(_) => (s + 1, g),
            Sent::Whole(_) => (s, g + 1),
        });
    assert_eq!(gathered, c.tx_corrupted);
    assert_eq!(split + gathered, frames(&whole).len() as u64);
}

/// A clock the test moves by hand, for [`Netem`].
#[derive(Clone)]
struct Clock(Arc<Mutex<Instant>>);

impl Clock {
    fn new() -> Clock {
        Clock(Arc::new(Mutex::new(Instant::now())))
    }
    fn advance(&self, d: Duration) {
        *self.0.lock().unwrap() += d;
    }
    fn boxed(&self) -> ustack_dev::netem::NetemClock {
        let c = self.clone();
        Box::new(move || *c.0.lock().unwrap())
    }
}

#[test]
fn netem_passes_the_parts_through_when_it_holds_nothing() {
    let f = frame(5, 200);
    let mut n = Netem::new(
        Recorder::default(),
        NetemConfig::none(),
        NetemConfig::none(),
        1,
    );
    for cut in cuts(&f) {
        n.send_vectored(&cut).unwrap();
    }
    let sent = &n.inner().sent;
    assert_eq!(sent.len(), 4);
    for s in sent {
        assert!(matches!(s, Sent::Parts(_)), "forwarded in parts");
        assert_eq!(s.frame(), f);
    }
    let c = n.counters().tx();
    assert_eq!((c.frames, c.delivered), (4, 4));
}

#[test]
fn impaired_netem_makes_the_same_decisions_for_parts() {
    let cfg: NetemConfig =
        "loss=10%,duplicate=10%,corrupt=20%,reorder=20%,delay=2ms,jitter=1ms,rate=10mbit"
            .parse::<ustack_dev::netem::ImpairSpec>()
            .unwrap()
            .config;
    let (c1, c2) = (Clock::new(), Clock::new());
    let mut whole = Netem::with_clock(
        Recorder::default(),
        NetemConfig::none(),
        cfg.clone(),
        3,
        c1.boxed(),
    );
    let mut parts = Netem::with_clock(Recorder::default(), NetemConfig::none(), cfg, 3, c2.boxed());
    for i in 0..300u32 {
        let f = frame(i, 60 + (i as usize * 37) % 1400);
        whole.send(&f).unwrap();
        parts.send_vectored(&three_parts(&f)).unwrap();
        c1.advance(Duration::from_micros(300));
        c2.advance(Duration::from_micros(300));
        whole.poll_deferred().unwrap();
        parts.poll_deferred().unwrap();
    }
    c1.advance(Duration::from_secs(10));
    c2.advance(Duration::from_secs(10));
    whole.poll_deferred().unwrap();
    parts.poll_deferred().unwrap();
    let frames =
        |d: &Netem<Recorder>| -> Vec<Vec<u8>> { d.inner().sent.iter().map(Sent::frame).collect() };
    assert!(frames(&whole).len() > 200);
    assert_eq!(frames(&parts), frames(&whole));
    assert_eq!(parts.counters().tx(), whole.counters().tx());
    assert_eq!(parts.held(), (0, 0));
}
