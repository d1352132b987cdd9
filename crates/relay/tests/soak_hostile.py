# The hostile guest of crates/relay/tests/soak.rs, run inside a `ustack run`
# sandbox as root. Sends, for as long as it lives, malformed frames (AF_PACKET
# on eth0), IPv4 fragment floods, SYN and UDP floods (raw sockets), ICMP
# garbage, and holds TCP connections that advertise a zero window or a tiny
# MSS. Floods only while the file CTL/on exists; ends when CTL/stop exists.
# Writes its progress (packets sent per class, the phase reached) to PROGRESS.
#
# argv: CTL PROGRESS CLOSED_TCP_PORTS TARPIT_PORT BLASTER_PORT UDP_PORTS SEED PPS
# (the flood's pace once set up, packets per second).
import json, os, random, socket, struct, sys, time

ctl, progress = sys.argv[1], sys.argv[2]
closed = [int(p) for p in sys.argv[3].split(",")]
tarpit = int(sys.argv[4])
blaster = int(sys.argv[5])
udp_ports = [int(p) for p in sys.argv[6].split(",")]
rnd = random.Random(int(sys.argv[7]))
pps = float(sys.argv[8])
ON, STOP = os.path.join(ctl, "on"), os.path.join(ctl, "stop")

ME, GW = "10.0.2.15", "10.0.2.2"
me_b, gw_b = socket.inet_aton(ME), socket.inet_aton(GW)
GW_MAC = bytes.fromhex("52550a000202")
counts = {}
phase = "start"
# Time spent flooding (CTL/on present) and the frames sent meanwhile.
flood = {"secs": 0.0, "frames": 0}


def count(k, n=1):
    counts[k] = counts.get(k, 0) + n


def report():
    tmp = progress + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"phase": phase, "counts": counts, "flood": flood}, f)
    os.replace(tmp, progress)


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return (~s) & 0xFFFF


def l4(proto, src, dst, seg, csum_at, bad=False):
    """Fill in a TCP/UDP/ICMP checksum (pseudo header unless ICMP); bad: wrong."""
    if proto == 1:
        c = csum(seg)
    else:
        c = csum(src + dst + struct.pack("!BBH", 0, proto, len(seg)) + seg)
    if bad:
        c ^= 0x1234
    return seg[:csum_at] + struct.pack("!H", c) + seg[csum_at + 2:]


def ipv4(proto, payload, src=me_b, dst=gw_b, ident=None, frag=0, opts=b"",
         bad_csum=False, ihl=None, tot=None, ver=4):
    hl = 20 + len(opts)
    ihl = hl // 4 if ihl is None else ihl
    tot = hl + len(payload) if tot is None else tot
    ident = rnd.getrandbits(16) if ident is None else ident
    h = struct.pack("!BBHHHBBH4s4s", (ver << 4) | ihl, 0, tot, ident, frag, 64,
                    proto, 0, src, dst) + opts
    c = csum(h)
    if bad_csum:
        c ^= 0x0F0F
    return h[:10] + struct.pack("!H", c) + h[12:] + payload


pk = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
pk.bind(("eth0", 0))
MY_MAC = pk.getsockname()[4]


def eth(payload, ethertype=0x0800, dst=GW_MAC):
    return dst + MY_MAC + struct.pack("!H", ethertype) + payload


def send_frame(f, what):
    """Send one frame on eth0; count it under `what` if the kernel took it."""
    try:
        pk.send(f)
        count(what)
    except OSError:
        count("send_errors")


def udp_seg(sport, dport, data, src=me_b, dst=gw_b, bad=False, length=None):
    n = 8 + len(data) if length is None else length
    return l4(17, src, dst, struct.pack("!HHHH", sport, dport, n, 0) + data, 6, bad)


def tcp_seg(sport, dport, flags, seq=None, ack=0, win=64240, opts=b"", data=b"",
            bad=False, doff=None):
    seq = rnd.getrandbits(32) if seq is None else seq
    doff = (20 + len(opts)) // 4 if doff is None else doff
    h = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, doff << 4, flags, win, 0, 0)
    return l4(6, me_b, gw_b, h + opts + data, 16, bad)


# --- malformed input, one of each class per call -----------------------------
def garbage():
    r = rnd.randrange
    # Random bytes behind an unknown ethertype.
    send_frame(eth(rnd.randbytes(r(0, 200)), ethertype=rnd.choice([0x1234, 0x88B5, 0x9000])), "unknown_ethertype")
    # A frame to another station's MAC.
    send_frame(eth(ipv4(17, udp_seg(r(1024, 65536), udp_ports[0], b"x")), dst=bytes.fromhex("020000000099")), "not_for_us")
    # Truncated IPv4 headers.
    send_frame(eth(rnd.randbytes(r(1, 20))), "ip_truncated")
    # Bad IPv4 header checksum.
    send_frame(eth(ipv4(17, udp_seg(r(1024, 65536), rnd.choice(udp_ports), b"y" * 16), bad_csum=True)), "ip_bad_csum")
    # Bad header length (IHL < 5), IHL past the total length, total length
    # past the frame, and version 6 in an IPv4 frame.
    body = udp_seg(r(1024, 65536), rnd.choice(udp_ports), b"z" * 8)
    for kw in ({"ihl": r(0, 5)}, {"ihl": 15, "tot": 28}, {"tot": 1400}, {"ver": 6}):
        send_frame(eth(ipv4(17, body, **kw)), "ip_bad_header")
    # Bad options: a length running past the header, a zero length, and a
    # source route whose pointer is below 4.
    for opts in (bytes([0x07, 0x27, 4, 0]), bytes([0x44, 0, 0, 0]), bytes([0x83, 7, 2, 1, 2, 3, 4, 0])):
        send_frame(eth(ipv4(17, udp_seg(r(1024, 65536), rnd.choice(udp_ports), b"o"), opts=opts)), "ip_bad_options")
    # Martian sources.
    for src in ("127.0.0.1", "0.0.0.0", "224.0.0.1"):
        send_frame(eth(ipv4(17, udp_seg(r(1024, 65536), rnd.choice(udp_ports), b"m"), src=socket.inet_aton(src))), "martian_source")
    # Unknown transport protocol.
    send_frame(eth(ipv4(rnd.choice([99, 132, 253]), rnd.randbytes(r(0, 64)))), "unknown_proto")
    # TCP: bad checksum, data offset below 5 and past the segment.
    send_frame(eth(ipv4(6, tcp_seg(r(1024, 65536), closed[0], 0x02, bad=True))), "tcp_bad")
    send_frame(eth(ipv4(6, tcp_seg(r(1024, 65536), closed[0], 0x02, doff=2))), "tcp_bad")
    send_frame(eth(ipv4(6, tcp_seg(r(1024, 65536), closed[0], 0x02, doff=15))), "tcp_bad")
    # UDP: bad checksum, length field past the datagram, below 8.
    send_frame(eth(ipv4(17, udp_seg(r(1024, 65536), rnd.choice(udp_ports), b"c" * 32, bad=True))), "udp_bad")
    send_frame(eth(ipv4(17, udp_seg(r(1024, 65536), rnd.choice(udp_ports), b"l" * 8, length=400))), "udp_bad")
    send_frame(eth(ipv4(17, udp_seg(r(1024, 65536), rnd.choice(udp_ports), b"s" * 8, length=4))), "udp_bad")
    # ICMP: bad checksum, truncated, unknown type, an error quoting garbage.
    send_frame(eth(ipv4(1, l4(1, me_b, gw_b, struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"p" * 32, 2, bad=True))), "icmp_bad")
    send_frame(eth(ipv4(1, bytes([8, 0, 0]))), "icmp_bad")
    send_frame(eth(ipv4(1, l4(1, me_b, gw_b, struct.pack("!BBHI", 42, 7, 0, 0) + rnd.randbytes(16), 2))), "icmp_bad")
    send_frame(eth(ipv4(1, l4(1, me_b, gw_b, struct.pack("!BBHI", 3, 3, 0, 0) + rnd.randbytes(r(0, 40)), 2))), "icmp_bad")
    # ARP: bad hardware type / lengths, truncated.
    send_frame(eth(struct.pack("!HHBBH", 7, 0x0800, 6, 4, 1) + rnd.randbytes(20), ethertype=0x0806), "arp_bad")
    send_frame(eth(struct.pack("!HHBBH", 1, 0x0800, 9, 3, 1) + rnd.randbytes(20), ethertype=0x0806), "arp_bad")
    send_frame(eth(rnd.randbytes(r(0, 8)), ethertype=0x0806), "arp_bad")


# --- IPv4 fragments ---------------------------------------------------------
MF = 0x2000


def frag(ident, off8, more, data, proto=17):
    return eth(ipv4(proto, data, ident=ident, frag=(MF if more else 0) | off8))


def fragments():
    port = rnd.choice(udp_ports)
    # Never completed: the first half of a datagram (times out after 30 s).
    d = udp_seg(rnd.randrange(1024, 65536), port, b"n" * 1000)
    send_frame(frag(rnd.getrandbits(16), 0, True, d[:512]), "frag_incomplete")
    # Overlapping: two first fragments that disagree about bytes 256..512.
    i = rnd.getrandbits(16)
    send_frame(frag(i, 0, True, d[:512]), "frag_overlap")
    send_frame(frag(i, 32, True, rnd.randbytes(512)), "frag_overlap")
    # Tiny fragments: 8 bytes each, more of them than a datagram may have.
    i = rnd.getrandbits(16)
    for k in range(80):
        send_frame(frag(i, k, True, rnd.randbytes(8)), "frag_tiny")
    # Big first fragments of many datagrams (the reassembly memory limit).
    for _ in range(8):
        send_frame(frag(rnd.getrandbits(16), rnd.randrange(0, 4000), True, rnd.randbytes(8192)), "frag_big")
    # And one well-formed fragmented datagram (it must still be reassembled).
    i = rnd.getrandbits(16)
    send_frame(frag(i, 0, True, d[:504]), "frag_good")
    send_frame(frag(i, 63, False, d[504:]), "frag_good")


# --- floods through the kernel's raw sockets --------------------------------
raw_tcp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
raw_udp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
raw_icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
for s in (raw_tcp, raw_udp, raw_icmp):
    s.setblocking(False)


def raw_send(s, b, what):
    try:
        s.sendto(b, (GW, 0))
        count(what)
    except (BlockingIOError, OSError):
        count("send_errors")


MSS1 = bytes([2, 4, 0, 1])  # MSS option of 1 byte


def syn_to(port, opts=b"", win=64240):
    raw_send(raw_tcp, tcp_seg(rnd.randrange(1024, 65536), port, 0x02, opts=opts, win=win), "syn")


def udp_flood(n):
    for _ in range(n):
        raw_send(raw_udp, udp_seg(rnd.randrange(1024, 65536), rnd.choice(udp_ports), b"u" * 64), "udp")


def icmp_flood(n):
    for _ in range(n):
        ident, seq = rnd.getrandbits(16), rnd.getrandbits(16)
        raw_send(raw_icmp, l4(1, me_b, gw_b, struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"e" * 56, 2), "icmp_echo")


# --- connections that hold the relay's buffers -------------------------------
held = []


def hold(n, mss=None):
    """n connections to the blaster that never read: their receive window
    closes (zero window), or a tiny MSS makes every segment carry 88 bytes."""
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        if mss is not None:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        s.settimeout(10)
        try:
            s.connect((GW, blaster))
            held.append(s)
            count("held_mss" if mss else "held_zero_window")
        except OSError:
            count("hold_refused")
            s.close()


def wait_on():
    """Block (bounded by the stop file) while the flood is paused."""
    while not os.path.exists(ON):
        if os.path.exists(STOP):
            return False
        time.sleep(0.005)
    return not os.path.exists(STOP)


# Phases that make each of the relay's limits refuse flows, in an order in
# which one limit does not hide the next (the relay checks flows, then
# half-open, then buffered bytes, then the rate):
# 1. fragments that never complete first (their 30 s timeout runs from now),
#    then holders fill the buffer budget, so new flows are refused for it;
phase = "holders"
for _ in range(4):
    fragments()
hold(8, mss=88)
# Zero-window holders (the blaster fills each) until the relay refuses one:
# its buffer budget is then spent, as no other limit is near (few flows,
# none half-open, far fewer new flows than the rate limit's burst). Then
# new flows while it stays spent.
deadline = time.monotonic() + 30
while time.monotonic() < deadline and "hold_refused" not in counts and len(held) < 200:
    hold(4)
    time.sleep(0.05)
udp_flood(200)
report()
# 2. free most of the budget (close with unread data: RST), then half-open
#    connections to the tarpit and a SYN flood: half-open and rate limits;
phase = "syn"
for s in held[16:]:
    s.close()
held = held[:16]
time.sleep(0.5)
for _ in range(120):
    syn_to(tarpit)
for k in range(3000):
    syn_to(rnd.choice(closed), opts=MSS1 if k % 2 else b"", win=0 if k % 3 else 64240)
report()
# 3. a UDP flood to many ports until the flow table is full: flow limit.
phase = "udp"
udp_flood(4000)
icmp_flood(200)
phase = "flood"
report()

# Then everything, paced to `pps`, while CTL/on exists.
def sent():
    return sum(v for k, v in counts.items() if not k.startswith("hold"))


last = time.monotonic()
while wait_on():
    t0, n0 = time.monotonic(), sent()
    garbage()
    fragments()
    for _ in range(64):
        syn_to(rnd.choice(closed + [tarpit, blaster]), opts=MSS1)
    udp_flood(64)
    icmp_flood(16)
    n = sent() - n0
    rest = n / pps - (time.monotonic() - t0)
    if rest > 0:
        time.sleep(rest)
    flood["secs"] += time.monotonic() - t0
    flood["frames"] += n
    if time.monotonic() - last > 0.5:
        report()
        last = time.monotonic()
phase = "done"
report()
for s in held:
    s.close()
