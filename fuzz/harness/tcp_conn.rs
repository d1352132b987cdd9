//! `tcp_conn`: one TCP connection between two `Stack`s, driven through a
//! sequence of hostile events from both sides.
//!
//! A (10.0.0.1, the client) and B (10.0.0.2, the server on port 80) are wired
//! back to back and complete a handshake in the setup (built once per
//! configuration and cloned for every input, like `stack_receive`). The
//! frames each side emits wait in a queue per direction; the input then
//! decides, operation by operation, what happens to them and to the
//! applications: deliver the next frame, drop it, duplicate it, swap it with
//! the one behind it, deliver it with rewritten header fields (flags,
//! sequence and acknowledgment numbers, window), forge a segment on the
//! connection from either side, advance the clock, have either application
//! send, read, shut down, close or abort.
//!
//! Application data is a function of its stream offset, and every payload
//! the harness forges or rewrites carries the bytes of the offsets its
//! sequence number names (and only offsets the sender has already been given),
//! so the receiver can always check what it reads: every byte read is the
//! byte sent at that offset, and nothing is read that was not sent. When no
//! event could legitimately have broken the connection (forged or rewritten
//! ACKs beyond what the peer acknowledged, RST/SYN/FIN flags, forged data
//! ahead of the peer, aborts, closes, shutdowns), a final faithful phase
//! must deliver every byte sent, in both directions.
//!
//! Invariants on every frame either stack emits: it parses with
//! `ustack-wire` (IPv4 and TCP checksums verified), comes from its sender's
//! MAC and address, and fits the MTU.

use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddrV4};

use ustack_core::tcp::{EcnMode, State, TcpConfig};
use ustack_core::time::{Duration, Instant};
use ustack_core::{Config, Limits, Stack, TcpHandle};
use ustack_wire::arp::{ArpPacket, ArpRepr};
use ustack_wire::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
use ustack_wire::ip::IpProtocol;
use ustack_wire::ipv4::{Ipv4Cidr, Ipv4Packet, Ipv4Repr, IPV4_HEADER_LEN};
use ustack_wire::tcp::{flags, SeqNum, TcpPacket, TcpRepr};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const A_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const PORT: u16 = 80;

/// Operations decoded per input.
const MAX_OPS: usize = 200;
/// Frames waiting per direction (the oldest are lost beyond).
const MAX_QUEUE: usize = 256;
/// Largest application send per operation.
const MAX_SEND: usize = 20_000;
/// Time advance per operation (low 3 bits of the op byte), microseconds.
const STEPS: [u64; 8] = [0, 0, 0, 1_000, 40_000, 250_000, 3_000_000, 60_000_000];
/// Rounds of faithful delivery in the final phase (each may advance time).
const FINAL_ROUNDS: usize = 2_000;

/// Byte `i` of the stream from A (`dir` 0) or from B (`dir` 1).
fn stream_byte(dir: usize, i: u64) -> u8 {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (dir as u64 + 1).wrapping_mul(i >> 7);
    (x >> 56) as u8
}

/// What a queued frame is, as far as the harness cares.
#[derive(Clone)]
struct Seg {
    frame: Vec<u8>,
}

#[derive(Clone)]
struct Side {
    stack: Stack,
    ip: Ipv4Addr,
    mac: MacAddr,
    mtu: usize,
    conn: TcpHandle,
    port: u16,
    /// Initial sequence number (learned from its SYN / SYN-ACK).
    isn: u32,
    /// Bytes the application handed to the stack (stream offsets `0..sent`).
    sent: u64,
    /// Bytes the application read from the peer's stream.
    read: u64,
    /// Highest ACK this side emitted (seq space of the peer).
    max_ack: u32,
    /// Latest timestamp option bytes it emitted (TSval, TSecr), if any.
    ts: Option<(u32, u32)>,
    /// Latest window it advertised.
    window: u16,
}

#[derive(Clone)]
struct Conn {
    side: [Side; 2],
    /// Frames in flight from side `d` to side `1 - d`.
    q: [Vec<Seg>; 2],
    now: Instant,
    /// An event happened that may legitimately break the connection.
    tainted: bool,
    buf: Vec<u8>,
}

fn config(mac: MacAddr, ip: Ipv4Addr, seed: u64, cfg: u8, server: bool) -> Config {
    let mut tcp = TcpConfig::default();
    let opts_off = if server { cfg & 2 != 0 } else { cfg & 1 != 0 };
    if opts_off {
        tcp.timestamps = false;
        tcp.sack = false;
        tcp.window_scale = false;
    }
    if cfg & 4 != 0 {
        tcp.rcv_buf = 4096;
        tcp.snd_buf = 8192;
        tcp.ooo_limit = 4096;
    }
    tcp.nodelay = cfg & 16 != 0;
    if cfg & 32 != 0 {
        tcp.ecn = EcnMode::On;
    }
    Config {
        mac,
        addr: Ipv4Cidr {
            address: ip,
            prefix_len: 24,
        },
        gateway: None,
        mtu: if server && cfg & 8 != 0 { 576 } else { 1500 },
        tcp,
        limits: Limits::default(),
        secret: [seed as u8; 16],
        seed,
    }
}

/// What the harness learns from a TCP segment a side emitted.
struct Hdr {
    syn: bool,
    seq: u32,
    port: u16,
    ack: Option<u32>,
    ts: Option<(u32, u32)>,
    window: u16,
}

/// Check a frame a side emitted; its TCP header if it is a TCP segment.
fn check(f: &[u8], ip: Ipv4Addr, mac: MacAddr, mtu: usize) -> Option<Hdr> {
    assert!(
        f.len() <= ETHERNET_HEADER_LEN + mtu,
        "emitted frame of {} bytes over the MTU {mtu}",
        f.len()
    );
    let eth = EthernetFrame::new_checked(f).expect("emitted frame: Ethernet header");
    let er = EthernetRepr::parse(&eth).expect("emitted frame: Ethernet repr");
    assert_eq!(er.src, mac, "emitted frame from a foreign MAC");
    match er.ethertype {
        EtherType::Arp => {
            let p = ArpPacket::new_checked(eth.payload()).expect("emitted ARP: length");
            let a = ArpRepr::parse(&p).expect("emitted ARP: parse");
            assert_eq!((a.sender_mac, a.sender_ip), (mac, ip), "ARP sender");
            None
        }
        EtherType::Ipv4 => {
            let p = Ipv4Packet::new_checked(eth.payload()).expect("emitted IPv4: length");
            let r = Ipv4Repr::parse(&p, true).expect("emitted IPv4: parse with checksum");
            assert_eq!(r.src, ip, "emitted IPv4 from a foreign address");
            if r.protocol != IpProtocol::Tcp || r.more_frags || r.frag_offset != 0 {
                return None;
            }
            let t = TcpPacket::new_checked(p.payload()).expect("emitted TCP: length");
            let tr = TcpRepr::parse(&t, r.src, r.dst, true).expect("emitted TCP: parse");
            assert!(!(tr.syn && tr.rst), "emitted SYN+RST");
            Some(Hdr {
                syn: tr.syn,
                seq: tr.seq.0,
                port: tr.src_port,
                ack: tr.ack.map(|a| a.0),
                ts: tr.timestamp,
                window: tr.window,
            })
        }
        other => panic!("emitted ethertype {other:?}"),
    }
}

impl Conn {
    fn new(cfg: u8) -> Conn {
        let now = Instant::from_secs(100);
        let mut a = Stack::new(config(A_MAC, A_IP, 11, cfg, false), now);
        let mut b = Stack::new(config(B_MAC, B_IP, 12, cfg, true), now);
        let l = b
            .tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, PORT), 4)
            .expect("setup: listen");
        let client = a
            .tcp_connect(now, SocketAddrV4::new(B_IP, PORT), None)
            .expect("setup: connect");
        let side = |stack: Stack, ip, mac, conn| Side {
            mtu: stack.config().mtu,
            stack,
            ip,
            mac,
            conn,
            port: 0,
            isn: 0,
            sent: 0,
            read: 0,
            max_ack: 0,
            ts: None,
            window: 0,
        };
        let mut c = Conn {
            side: [side(a, A_IP, A_MAC, client), side(b, B_IP, B_MAC, l)],
            q: [Vec::new(), Vec::new()],
            now,
            tainted: false,
            buf: vec![0u8; MAX_SEND],
        };
        let mut server = None;
        for _ in 0..100 {
            c.poll_all();
            c.deliver_all();
            if server.is_none() {
                server = c.side[1].stack.tcp_accept(l).expect("setup: accept");
            }
            if server.is_some() && c.q[0].is_empty() && c.q[1].is_empty() {
                break;
            }
            c.advance(10_000);
        }
        c.side[1].conn = server.expect("setup: handshake completes");
        for s in &c.side {
            let st = s.stack.tcp_status(s.conn).expect("setup: status");
            assert_eq!(st.state, State::Established, "setup: handshake");
        }
        c.side[1].stack.tcp_close(l);
        c.poll_all();
        c
    }

    /// Take what side `d`'s stack emits (in `receive` or `poll`), check it
    /// and queue it towards the other side.
    fn take(&mut self, d: usize, frames: Vec<Vec<u8>>) {
        for f in frames {
            let s = &mut self.side[d];
            if let Some(h) = check(&f, s.ip, s.mac, s.mtu) {
                if h.syn {
                    s.isn = h.seq;
                    s.port = h.port;
                }
                if let Some(a) = h.ack {
                    if SeqNum(a).gt(SeqNum(s.max_ack)) || s.max_ack == 0 {
                        s.max_ack = a;
                    }
                }
                if h.ts.is_some() {
                    s.ts = h.ts;
                }
                s.window = h.window;
            }
            let q = &mut self.q[d];
            if q.len() >= MAX_QUEUE {
                q.remove(0);
            }
            q.push(Seg { frame: f });
        }
    }

    fn poll_side(&mut self, d: usize) {
        let now = self.now;
        for _ in 0..1000 {
            if self.side[d].stack.poll_at().is_none_or(|t| t > now) {
                return;
            }
            let mut out = Vec::new();
            self.side[d].stack.poll(now, &mut |f| out.push(f.to_vec()));
            assert!(out.len() <= 8192, "one poll emitted {} frames", out.len());
            self.take(d, out);
        }
        panic!("livelock: poll_at() <= now after 1000 polls");
    }

    fn poll_all(&mut self) {
        self.poll_side(0);
        self.poll_side(1);
    }

    /// Hand `frame` to side `to`.
    fn receive(&mut self, to: usize, frame: &[u8]) {
        let now = self.now;
        let mut out = Vec::new();
        self.side[to]
            .stack
            .receive(now, frame, &mut |f| out.push(f.to_vec()));
        assert!(out.len() <= 512, "one receive emitted {} frames", out.len());
        self.take(to, out);
        self.poll_side(to);
    }

    /// Deliver the next frame from side `d` (if any).
    fn deliver(&mut self, d: usize) {
        if !self.q[d].is_empty() {
            let s = self.q[d].remove(0);
            self.receive(1 - d, &s.frame);
        }
    }

    /// Deliver everything in flight, both ways, until quiet (bounded).
    fn deliver_all(&mut self) {
        for _ in 0..64 {
            if self.q[0].is_empty() && self.q[1].is_empty() {
                return;
            }
            for d in 0..2 {
                let q = std::mem::take(&mut self.q[d]);
                for s in q {
                    self.receive(1 - d, &s.frame);
                }
            }
        }
    }

    /// Advance the clock by `us`, polling every timer on the way.
    fn advance(&mut self, us: u64) {
        let target = self.now + Duration::from_micros(us);
        for _ in 0..100_000 {
            self.poll_all();
            let next = [self.side[0].stack.poll_at(), self.side[1].stack.poll_at()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= target => self.now = self.now.max(t),
                _ => break,
            }
        }
        self.now = target;
        self.poll_all();
    }

    fn send(&mut self, d: usize, n: usize) {
        let s = &mut self.side[d];
        let data: Vec<u8> = (0..n as u64).map(|i| stream_byte(d, s.sent + i)).collect();
        if let Ok(k) = s.stack.tcp_send(s.conn, &data) {
            assert!(k <= n, "tcp_send took more than offered");
            s.sent += k as u64;
        }
        self.poll_side(d);
    }

    /// Side `d` reads up to `n` bytes of the other side's stream.
    fn recv(&mut self, d: usize, n: usize) {
        let n = n.clamp(1, self.buf.len());
        let from = 1 - d;
        let s = &mut self.side[d];
        if let Ok(k) = s.stack.tcp_recv(s.conn, &mut self.buf[..n]) {
            assert!(k <= n, "tcp_recv returned more than the buffer");
            for (i, b) in self.buf[..k].iter().enumerate() {
                let off = s.read + i as u64;
                assert_eq!(
                    *b,
                    stream_byte(from, off),
                    "byte {off} of the stream from side {from} corrupted"
                );
            }
            s.read += k as u64;
        }
        let sent = self.side[from].sent;
        assert!(
            self.side[d].read <= sent,
            "side {d} read {} bytes, the peer sent {sent}",
            self.side[d].read
        );
        self.poll_side(d);
    }

    /// A segment from side `d` on the connection with the given fields; the
    /// payload is the sender's stream at the offsets `seq` names (cut to
    /// what it has sent, so nothing unsent can be accepted).
    #[allow(clippy::too_many_arguments)]
    fn forge(&mut self, d: usize, fl: u8, seq: u32, ack: u32, window: u16, len: usize) -> Vec<u8> {
        let s = &self.side[d];
        let peer = &self.side[1 - d];
        let start = seq.wrapping_sub(s.isn.wrapping_add(1));
        let avail = s.sent.saturating_sub(u64::from(start)) as usize;
        let len = if u64::from(start) < s.sent && start < 1 << 30 {
            len.min(avail)
        } else {
            0
        };
        let data: Vec<u8> = (0..len as u64)
            .map(|i| stream_byte(d, u64::from(start) + i))
            .collect();
        let mut opts = Vec::new();
        if let Some((v, e)) = s.ts {
            opts.extend_from_slice(&[1, 1, 8, 10]);
            opts.extend_from_slice(&v.to_be_bytes());
            opts.extend_from_slice(&e.to_be_bytes());
        }
        let hl = 20 + opts.len();
        let mut seg = vec![0u8; hl + data.len()];
        {
            let mut p = TcpPacket::new_unchecked(&mut seg[..]);
            p.set_src_port(s.port);
            p.set_dst_port(peer.port);
            p.set_seq_number(SeqNum(seq));
            p.set_ack_number(SeqNum(if fl & flags::ACK != 0 { ack } else { 0 }));
            p.set_header_len(hl);
            p.set_flags(fl);
            p.set_window_len(window);
            p.set_urgent_at(0);
            p.options_mut().copy_from_slice(&opts);
            p.payload_mut().copy_from_slice(&data);
            p.fill_checksum(s.ip, peer.ip);
        }
        let ip = Ipv4Repr {
            src: s.ip,
            dst: peer.ip,
            protocol: IpProtocol::Tcp,
            payload_len: seg.len(),
            ttl: 64,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        };
        let mut f = vec![0u8; ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + seg.len()];
        let mut e = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src: s.mac,
            dst: peer.mac,
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut e);
        let mut p = Ipv4Packet::new_unchecked(e.payload_mut());
        ip.emit(&mut p, true);
        p.payload_mut().copy_from_slice(&seg);
        f
    }

    /// The next frame from side `d`, rewritten: the header fields from the
    /// input, the payload the stream bytes of its (new) sequence range.
    fn rewrite(&mut self, d: usize, inp: &mut super::stack::Input) {
        let Some(seg) = self.q[d].first() else { return };
        let parsed = EthernetFrame::new_checked(&seg.frame[..])
            .ok()
            .and_then(|e| {
                let p = Ipv4Packet::new_checked(e.payload()).ok()?;
                let t = TcpPacket::new_checked(p.payload()).ok()?;
                Some((
                    t.seq_number().0,
                    t.ack_number().0,
                    t.flags(),
                    t.window_len(),
                    t.payload().len(),
                ))
            });
        let Some((seq, ack, fl, win, len)) = parsed else {
            return;
        };
        self.q[d].remove(0);
        let what = inp.u8();
        let (mut seq, mut ack, mut fl, mut win, mut len) = (seq, ack, fl, win, len);
        if what & 1 != 0 {
            let x = inp.u8();
            fl ^= x;
            if x & (flags::RST | flags::SYN | flags::FIN) != 0 {
                self.tainted = true;
            }
        }
        if what & 2 != 0 {
            let ds = inp.delta();
            seq = seq.wrapping_add(ds);
            if ds != 0 && ds < 1 << 31 {
                // Ahead of the sender: its SND.WL1 is then in the future
                // and genuine window updates are ignored (RFC 9293 3.10.7.4).
                self.tainted = true;
            }
        }
        if what & 4 != 0 {
            let da = inp.delta();
            ack = ack.wrapping_add(da);
            if da != 0 && da < 1 << 31 {
                self.tainted = true; // acknowledges more than the peer got
            }
        }
        if what & 8 != 0 {
            win = inp.u16();
            self.tainted = true; // a shrunk window may be believed for long
        }
        if what & 16 != 0 {
            len = inp.len(MAX_SEND);
        }
        let f = self.forge(d, fl, seq, ack, win, len);
        self.receive(1 - d, &f);
    }

    /// A segment forged from side `d`: SEQ an offset from what it sent
    /// last, ACK an offset from the highest it acknowledged.
    fn forge_op(&mut self, d: usize, inp: &mut super::stack::Input) {
        let mut fl = inp.u8();
        if inp.u8() & 3 != 0 {
            fl = flags::ACK | (fl & flags::PSH);
        }
        if fl & (flags::RST | flags::SYN | flags::FIN) != 0 {
            self.tainted = true;
        }
        let s = &self.side[d];
        let base = s.isn.wrapping_add(1).wrapping_add(s.sent as u32);
        let dseq = inp.delta();
        let seq = base.wrapping_add(dseq);
        if dseq != 0 && dseq < 1 << 31 {
            self.tainted = true; // ahead of the sender (see `rewrite`)
        }
        let dack = inp.delta();
        if dack != 0 && dack < 1 << 31 {
            self.tainted = true;
        }
        let ack = s.max_ack.wrapping_add(dack);
        let win = match inp.u8() % 4 {
            0 | 1 => s.window,
            2 => 0,
            _ => inp.u16(),
        };
        if win < s.window {
            self.tainted = true;
        }
        let len = inp.len(MAX_SEND);
        let f = self.forge(d, fl, seq, ack, win, len);
        self.receive(1 - d, &f);
    }

    fn op(&mut self, b: u8, inp: &mut super::stack::Input) {
        let d = usize::from(b & 1);
        match (b >> 1) % 16 {
            0..=3 => self.deliver(d),
            4 => {
                // Drop the next frame.
                if !self.q[d].is_empty() {
                    self.q[d].remove(0);
                }
            }
            5 => {
                // Duplicate it.
                if let Some(s) = self.q[d].first().cloned() {
                    self.receive(1 - d, &s.frame);
                }
            }
            6 => {
                // Swap it with the one behind it.
                if self.q[d].len() >= 2 {
                    self.q[d].swap(0, 1);
                }
            }
            7 => self.rewrite(d, inp),
            8 => self.forge_op(d, inp),
            9 | 10 => {
                let n = inp.len(MAX_SEND);
                self.send(d, n);
            }
            11 | 12 => {
                let n = inp.len(MAX_SEND);
                self.recv(d, n);
            }
            13 => self.deliver_all(),
            14 => {
                let s = &mut self.side[d];
                match inp.u8() % 8 {
                    0 => {
                        let _ = s.stack.tcp_shutdown(s.conn);
                    }
                    1 => s.stack.tcp_close(s.conn),
                    2 => s.stack.tcp_abort(s.conn),
                    3 => {
                        let _ = s.stack.tcp_set_nodelay(s.conn, true);
                    }
                    4 => {
                        let _ = s
                            .stack
                            .tcp_set_keepalive(s.conn, Some(Duration::from_secs(1)));
                    }
                    _ => {
                        let _ = s.stack.tcp_status(s.conn);
                        let _ = s.stack.tcp_info(s.conn);
                        return;
                    }
                }
                self.tainted = true;
                self.poll_side(d);
            }
            _ => {
                // Lose everything in flight one way.
                self.q[d].clear();
            }
        }
    }

    /// The faithful end: deliver everything, read everything, let time
    /// pass; if nothing could have broken the connection, every byte sent
    /// must arrive.
    fn finish(&mut self) {
        let live = |c: &Conn| {
            c.side.iter().all(|s| {
                s.stack
                    .tcp_status(s.conn)
                    .is_ok_and(|st| st.state == State::Established)
            })
        };
        let check = !self.tainted && live(self);
        for _ in 0..FINAL_ROUNDS {
            self.deliver_all();
            let before = (self.side[0].read, self.side[1].read);
            for d in 0..2 {
                // Read all there is (the buffer may hold more than one read).
                for _ in 0..64 {
                    let r = self.side[d].read;
                    self.recv(d, MAX_SEND);
                    if self.side[d].read == r {
                        break;
                    }
                }
            }
            if self.side[0].read == self.side[1].sent && self.side[1].read == self.side[0].sent {
                return;
            }
            if (self.side[0].read, self.side[1].read) != before || !self.q.iter().all(Vec::is_empty)
            {
                continue; // progress: reading may have opened a window
            }
            // Timers (retransmission, persist, delayed ACK) move it on.
            let next = [self.side[0].stack.poll_at(), self.side[1].stack.poll_at()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) => {
                    let dt = t.total_micros().saturating_sub(self.now.total_micros());
                    self.advance(dt.max(1_000));
                }
                None => break,
            }
        }
        if check && live(self) {
            let st = |s: &Side| {
                (
                    s.stack.tcp_status(s.conn),
                    s.stack.tcp_info(s.conn),
                    s.stack.poll_at(),
                )
            };
            panic!(
                "stalled: A sent {} B read {}, B sent {} A read {}\nA {:?}\nB {:?}",
                self.side[0].sent,
                self.side[1].read,
                self.side[1].sent,
                self.side[0].read,
                st(&self.side[0]),
                st(&self.side[1])
            );
        }
    }
}

thread_local! {
    static SETUP: RefCell<Vec<Option<Conn>>> = RefCell::new(vec![None; 64]);
}

/// The `tcp_conn` target body.
pub fn run(data: &[u8]) {
    let mut inp = super::stack::Input::new(data);
    let cfg = inp.u8() & 63;
    let mut c = SETUP.with(|s| {
        let mut s = s.borrow_mut();
        s[usize::from(cfg)]
            .get_or_insert_with(|| Conn::new(cfg))
            .clone()
    });
    let mut ops = 0;
    while !inp.is_empty() && ops < MAX_OPS {
        ops += 1;
        // Op byte: bit 0 the side, bits 1-4 the operation, bits 5-7 the
        // time advance before it.
        let b = inp.u8();
        let step = STEPS[usize::from(b >> 5)];
        if step > 0 {
            c.advance(step);
        }
        c.op(b, &mut inp);
    }
    c.finish();
}
