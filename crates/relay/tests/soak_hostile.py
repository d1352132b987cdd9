# The hostile guest of crates/relay/tests/soak.rs, run inside a `ustack run`
# sandbox as root. Sends, for as long as it lives, malformed frames (AF_PACKET
# on eth0), IPv4 fragment floods, SYN and UDP floods (raw sockets), ICMP
# garbage, and holds TCP connections that advertise a zero window or a tiny
# MSS; and the same over IPv6 (all built by hand on AF_PACKET: raw IPv6
# garbage, malformed extension-header chains, IPv6 fragment floods, NDP
# floods and forgeries, ICMPv6 errors, SYN and UDP floods to the host's ::1
# through the gateway fd00::2) with IPv6 zero-window and tiny-MSS holders.
# Floods only while the file CTL/on exists; ends when CTL/stop exists.
# Writes its progress (packets sent per class, the phase reached) to PROGRESS.
#
# argv: CTL PROGRESS CLOSED_TCP_PORTS TARPIT_PORT BLASTER_PORT UDP_PORTS SEED PPS
# CLOSED_TCP6_PORTS TARPIT6_PORT BLASTER6_PORT UDP6_PORTS (PPS: the flood's
# pace once set up, packets per second; the *6 ports are on the host's ::1).
import json, os, random, socket, struct, sys, time

ctl, progress = sys.argv[1], sys.argv[2]
closed = [int(p) for p in sys.argv[3].split(",")]
tarpit = int(sys.argv[4])
blaster = int(sys.argv[5])
udp_ports = [int(p) for p in sys.argv[6].split(",")]
rnd = random.Random(int(sys.argv[7]))
pps = float(sys.argv[8])
closed6 = [int(p) for p in sys.argv[9].split(",")]
tarpit6 = int(sys.argv[10])
blaster6 = int(sys.argv[11])
udp6_ports = [int(p) for p in sys.argv[12].split(",")]
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


# --- IPv6 ---------------------------------------------------------------------
# Everything built by hand and sent on eth0 (AF_PACKET), so that source
# addresses, hop limits and checksums are ours to choose.
ME6, GW6 = "fd00::100", "fd00::2"
me6_b = socket.inet_pton(socket.AF_INET6, ME6)
gw6_b = socket.inet_pton(socket.AF_INET6, GW6)
ALL_NODES = socket.inet_pton(socket.AF_INET6, "ff02::1")
ALL_ROUTERS = socket.inet_pton(socket.AF_INET6, "ff02::2")
GW6_SNM = socket.inet_pton(socket.AF_INET6, "ff02::1:ff00:2")  # solicited-node of fd00::2
NH_HBH, NH_TCP, NH_UDP, NH_ROUTING, NH_FRAG, NH_ICMP6, NH_NONE, NH_DSTOPTS = 0, 6, 17, 43, 44, 58, 59, 60


def mcast_mac(a):
    return bytes([0x33, 0x33]) + a[12:]


def eth6(payload, dst=GW_MAC):
    return eth(payload, ethertype=0x86DD, dst=dst)


def ipv6(nh, payload, src=me6_b, dst=gw6_b, hlim=64, plen=None, ver=6):
    plen = len(payload) if plen is None else plen
    return struct.pack("!IHBB16s16s", ver << 28, plen, nh, hlim, src, dst) + payload


def l4_6(proto, src, dst, seg, csum_at, bad=False):
    """Fill in a TCP/UDP/ICMPv6 checksum over the IPv6 pseudo header."""
    c = csum(src + dst + struct.pack("!IxxxB", len(seg), proto) + seg)
    if proto == NH_UDP and c == 0:
        c = 0xFFFF
    if bad:
        c ^= 0x1234
    return seg[:csum_at] + struct.pack("!H", c) + seg[csum_at + 2:]


def udp6_seg(sport, dport, data, src=me6_b, dst=gw6_b, bad=False, length=None, zero=False):
    n = 8 + len(data) if length is None else length
    seg = l4_6(NH_UDP, src, dst, struct.pack("!HHHH", sport, dport, n, 0) + data, 6, bad)
    return seg[:6] + b"\0\0" + seg[8:] if zero else seg


def tcp6_seg(sport, dport, flags, opts=b"", win=64240, bad=False, doff=None):
    doff = (20 + len(opts)) // 4 if doff is None else doff
    h = struct.pack("!HHIIBBHHH", sport, dport, rnd.getrandbits(32), 0, doff << 4, flags, win, 0, 0)
    return l4_6(NH_TCP, me6_b, gw6_b, h + opts, 16, bad)


def icmp6(typ, code, body, src=me6_b, dst=gw6_b, bad=False):
    return l4_6(NH_ICMP6, src, dst, struct.pack("!BBH", typ, code, 0) + body, 2, bad)


def ext(nh, body):
    """An options or routing header: next header, length in 8-octet units
    past the first 8, then `body` (padded with PadN to a multiple of 8)."""
    pad = (-(2 + len(body))) % 8
    if pad == 1:
        body += b"\0"
    elif pad:
        body += bytes([1, pad - 2]) + bytes(pad - 2)
    return bytes([nh, (2 + len(body)) // 8 - 1]) + body


def opt(t, data):
    return bytes([t, len(data)]) + data


def garbage6():
    r = rnd.randrange
    port = rnd.choice(udp6_ports)
    u = lambda: udp6_seg(r(1024, 65536), port, b"g" * 8)
    # Shorter than an IPv6 header; payload length past the frame; version 4.
    send_frame(eth6(rnd.randbytes(r(1, 40))), "ip6_truncated")
    send_frame(eth6(ipv6(NH_UDP, u(), plen=1000)), "ip6_truncated")
    send_frame(eth6(ipv6(NH_UDP, u(), ver=4)), "ip6_bad_header")
    # Random bytes behind a valid header, for every kind of next header.
    send_frame(eth6(ipv6(rnd.choice([0, 6, 17, 43, 44, 58, 60, r(0, 256)]), rnd.randbytes(r(0, 120)))), "ip6_random")
    # Addresses: a group of ours is not the destination (a group we are
    # not in), a group or the loopback address as the source.
    g = socket.inet_pton(socket.AF_INET6, "ff02::1234")
    send_frame(eth6(ipv6(NH_UDP, udp6_seg(r(1024, 65536), port, b"a", dst=g), dst=g), dst=mcast_mac(g)), "ip6_bad_addr")
    send_frame(eth6(ipv6(NH_UDP, udp6_seg(r(1024, 65536), port, b"a", dst=g), dst=g)), "ip6_bad_addr")
    for src in ("ff02::1", "::1"):
        s = socket.inet_pton(socket.AF_INET6, src)
        send_frame(eth6(ipv6(NH_UDP, udp6_seg(r(1024, 65536), port, b"a", src=s), src=s)), "ip6_bad_addr")
    # Unknown upper protocols.
    send_frame(eth6(ipv6(rnd.choice([99, 132, 253]), rnd.randbytes(r(0, 64)))), "ip6_unknown_proto")
    # TCP: bad checksum, data offset below 5 and past the segment.
    for kw in ({"bad": True}, {"doff": 2}, {"doff": 15}):
        send_frame(eth6(ipv6(NH_TCP, tcp6_seg(r(1024, 65536), closed6[0], 0x02, **kw))), "tcp6_bad")
    # UDP: bad checksum, zero checksum (RFC 8200 8.1), length past the
    # datagram, length below 8.
    for kw in ({"bad": True}, {"zero": True}, {"length": 400}, {"length": 4}):
        send_frame(eth6(ipv6(NH_UDP, udp6_seg(r(1024, 65536), port, b"c" * 16, **kw))), "udp6_bad")


def ext_chains():
    r = rnd.randrange
    port = rnd.choice(udp6_ports)
    d = udp6_seg(r(1024, 65536), port, b"x" * 16)
    # A long chain: 20 Destination Options headers (more than any real packet).
    body, nh = d, NH_UDP
    for _ in range(20):
        body, nh = ext(nh, opt(1, bytes(4))) + body, NH_DSTOPTS
    send_frame(eth6(ipv6(nh, body)), "ext_long_chain")
    # Unknown options, one per action (RFC 8200 4.2: 00 skip, 01 discard,
    # 10 discard and report, 11 report unless multicast), to us and to
    # all-nodes.
    for t in (0x1E, 0x5E, 0x9E, 0xDE):
        for dst in (gw6_b, ALL_NODES):
            dd = udp6_seg(r(1024, 65536), port, b"o" * 8, dst=dst)
            send_frame(eth6(ipv6(NH_DSTOPTS, ext(NH_UDP, opt(t, rnd.randbytes(r(0, 6)))) + dd, dst=dst),
                            dst=GW_MAC if dst == gw6_b else mcast_mac(dst)), "ext_unknown_option")
    # A Hop-by-Hop header that is not first; an option running past its header.
    send_frame(eth6(ipv6(NH_DSTOPTS, ext(NH_HBH, opt(1, bytes(4))) + ext(NH_UDP, opt(1, bytes(4))) + d)), "ext_bad")
    send_frame(eth6(ipv6(NH_DSTOPTS, bytes([NH_UDP, 0, 1, 30, 0, 0, 0, 0]) + d)), "ext_bad")
    # An extension header running past the packet.
    send_frame(eth6(ipv6(NH_HBH, bytes([NH_UDP, 40, 1, 2, 0, 0]))), "ext_bad")
    # Type-0 routing headers (RFC 5095) with segments left, and type 2/254.
    for rtype in (0, 0, 2, 254):
        addrs = b"".join(rnd.randbytes(16) for _ in range(r(1, 4)))
        rh = bytes([NH_UDP, len(addrs) // 8, rtype, len(addrs) // 16, 0, 0, 0, 0]) + addrs
        send_frame(eth6(ipv6(NH_ROUTING, rh + d)), "ext_routing0" if rtype == 0 else "ext_routing")


MF6 = 1


def frag6(ident, off8, more, data, nh=NH_UDP, src=me6_b):
    fh = struct.pack("!BBHI", nh, 0, (off8 << 3) | (MF6 if more else 0), ident)
    return eth6(ipv6(NH_FRAG, fh + data, src=src))


def fragments6():
    port = rnd.choice(udp6_ports)
    d = udp6_seg(rnd.randrange(1024, 65536), port, b"n" * 1000)
    # Never completed (times out after RFC 8200's 60 s).
    send_frame(frag6(rnd.getrandbits(32), 0, True, d[:512]), "frag6_incomplete")
    # Overlapping: two first fragments that disagree (RFC 5722: drop all).
    i = rnd.getrandbits(32)
    send_frame(frag6(i, 0, True, d[:512]), "frag6_overlap")
    send_frame(frag6(i, 32, True, rnd.randbytes(512)), "frag6_overlap")
    # Tiny: 8 bytes each, more of them than a datagram may have; and ones
    # whose length is no multiple of 8 with more to come.
    i = rnd.getrandbits(32)
    for k in range(80):
        send_frame(frag6(i, k, True, d[8 * k:8 * k + 8]), "frag6_tiny")
    send_frame(frag6(rnd.getrandbits(32), 1, True, rnd.randbytes(5)), "frag6_tiny")
    # A first fragment without the upper-layer header (RFC 7112); one past
    # 65,535 bytes.
    send_frame(frag6(rnd.getrandbits(32), 0, True, ext(NH_UDP, opt(1, bytes(4))), nh=NH_DSTOPTS), "frag6_bad")
    send_frame(frag6(rnd.getrandbits(32), 8190, False, rnd.randbytes(64)), "frag6_bad")
    # Big fragments of many datagrams (the reassembly memory limit).
    for _ in range(8):
        send_frame(frag6(rnd.getrandbits(32), rnd.randrange(1, 4000), True, rnd.randbytes(8192)), "frag6_big")
    # One well-formed fragmented datagram (it must still be reassembled).
    i = rnd.getrandbits(32)
    send_frame(frag6(i, 63, False, d[504:]), "frag6_good")
    send_frame(frag6(i, 0, True, d[:504]), "frag6_good")


def ndp(n):
    """n solicitations for the gateway from fake sources (each with its own
    link-layer address), n/4 router solicitations, then forged and invalid
    Neighbor Discovery."""
    for _ in range(n):
        src = bytes.fromhex("fd00000000000000") + rnd.randbytes(8)
        mac = bytes([0x02]) + rnd.randbytes(5)
        ns = icmp6(135, 0, bytes(4) + gw6_b + bytes([1, 1]) + mac, src=src, dst=GW6_SNM)
        send_frame(eth6(ipv6(NH_ICMP6, ns, src=src, dst=GW6_SNM, hlim=255), dst=mcast_mac(GW6_SNM)), "ndp_ns_flood")
    # Router Solicitations from fake link-local sources: the relay's
    # advertisements must stay at one per 3 s (RFC 4861 6.2.6).
    for _ in range(max(1, n // 4)):
        src = bytes.fromhex("fe80000000000000") + rnd.randbytes(8)
        rs = icmp6(133, 0, bytes(4) + bytes([1, 1]) + bytes([0x02]) + rnd.randbytes(5), src=src, dst=ALL_ROUTERS)
        send_frame(eth6(ipv6(NH_ICMP6, rs, src=src, dst=ALL_ROUTERS, hlim=255), dst=mcast_mac(ALL_ROUTERS)), "ndp_rs_flood")
    sll = bytes([1, 1]) + MY_MAC
    # Hop limit below 255 (forwarded, RFC 4861 7.1.1); a group as target;
    # from :: with a source link-layer option; an unknown code.
    send_frame(eth6(ipv6(NH_ICMP6, icmp6(135, 0, bytes(4) + gw6_b + sll), hlim=64)), "ndp_invalid")
    send_frame(eth6(ipv6(NH_ICMP6, icmp6(135, 0, bytes(4) + ALL_NODES + sll), hlim=255)), "ndp_invalid")
    z = bytes(16)
    send_frame(eth6(ipv6(NH_ICMP6, icmp6(135, 0, bytes(4) + gw6_b + sll, src=z, dst=GW6_SNM), src=z, dst=GW6_SNM, hlim=255),
                    dst=mcast_mac(GW6_SNM)), "ndp_invalid")
    send_frame(eth6(ipv6(NH_ICMP6, icmp6(135, 7, bytes(4) + gw6_b + sll), hlim=255)), "ndp_invalid")
    # Advertisements: Solicited to all-nodes; for the gateway's own address.
    tll = bytes([2, 1]) + MY_MAC
    na = icmp6(136, 0, bytes([0x60, 0, 0, 0]) + gw6_b + tll, dst=ALL_NODES)
    send_frame(eth6(ipv6(NH_ICMP6, na, dst=ALL_NODES, hlim=255), dst=mcast_mac(ALL_NODES)), "ndp_invalid")
    na = icmp6(136, 0, bytes([0x20, 0, 0, 0]) + gw6_b + tll, dst=ALL_NODES)
    send_frame(eth6(ipv6(NH_ICMP6, na, dst=ALL_NODES, hlim=255), dst=mcast_mac(ALL_NODES)), "ndp_forged")
    # A forged Router Advertisement (a prefix, lifetime 1800 s) and one with
    # hop limit 64; a forged redirect of the gateway to us.
    ll = bytes.fromhex("fe80000000000000") + rnd.randbytes(8)
    pio = bytes([3, 4, 64, 0xC0]) + struct.pack("!II", 86400, 14400) + bytes(4) + bytes.fromhex("20010db8000000000000000000000000")
    for hlim in (255, 64):
        ra = icmp6(134, 0, struct.pack("!BBHII", 64, 0, 1800, 0, 0) + sll + pio, src=ll, dst=ALL_NODES)
        send_frame(eth6(ipv6(NH_ICMP6, ra, src=ll, dst=ALL_NODES, hlim=hlim), dst=mcast_mac(ALL_NODES)), "ndp_forged")
    rd = icmp6(137, 0, bytes(4) + me6_b + gw6_b + tll, src=ll)
    send_frame(eth6(ipv6(NH_ICMP6, rd, src=ll, hlim=255)), "ndp_forged")


# --- DHCP garbage for the relay's DHCPv4 and DHCPv6 servers -----------------
DHCP_MAGIC = bytes.fromhex("63825363")
DHCP6_GROUP = socket.inet_pton(socket.AF_INET6, "ff02::1:2")
BCAST = socket.inet_aton("255.255.255.255")


def bootp(op, msg_type, giaddr=b"\0\0\0\0"):
    """A BOOTP message from this guest's MAC with a DHCP message type."""
    h = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", op, 1, 6, 0, rnd.getrandbits(32), 0,
                    0x8000, b"\0" * 4, b"\0" * 4, b"\0" * 4, giaddr,
                    MY_MAC + bytes(10), bytes(64), bytes(128))
    return h + DHCP_MAGIC + bytes([53, 1, msg_type, 255])


def dhcp_garbage():
    r = rnd.randrange
    bc = lambda data: eth(ipv4(17, udp_seg(68, 67, data, dst=BCAST), dst=BCAST), dst=b"\xff" * 6)
    # Unparseable: random bytes shorter than a BOOTP header, or a header
    # whose options run past the datagram.
    send_frame(bc(rnd.randbytes(r(1, 236))), "dhcp_bad")
    send_frame(bc(bootp(1, 1)[:-1] + bytes([12, 40])), "dhcp_bad")
    # Parsed but not served: a BOOTREPLY, a relayed request, an unknown type.
    send_frame(bc(bootp(2, 2)), "dhcp_discarded")
    send_frame(bc(bootp(1, 1, giaddr=socket.inet_aton("10.9.9.9"))), "dhcp_discarded")
    send_frame(bc(bootp(1, 0)), "dhcp_discarded")
    d6 = lambda sport, data: eth6(ipv6(NH_UDP, udp6_seg(sport, 547, data, dst=DHCP6_GROUP), dst=DHCP6_GROUP),
                                  dst=mcast_mac(DHCP6_GROUP))
    # DHCPv6: shorter than the header, an option past the end, a relay
    # message (not served); then a well-formed Solicit from port 0.
    send_frame(d6(546, rnd.randbytes(r(1, 4))), "dhcp6_bad")
    send_frame(d6(546, bytes([1]) + rnd.randbytes(3) + struct.pack("!HH", 1, 200)), "dhcp6_bad")
    send_frame(d6(546, bytes([12, 0]) + rnd.randbytes(32)), "dhcp6_bad")
    send_frame(d6(0, bytes([1]) + rnd.randbytes(3)), "dhcp6_discarded")


def icmp6_errors(n):
    """ICMPv6 errors quoting flows that do not exist (or garbage), and
    malformed ones."""
    for _ in range(n):
        quote = ipv6(NH_TCP, tcp6_seg(rnd.randrange(1024, 65536), rnd.randrange(1, 65536), 0x12), src=gw6_b, dst=me6_b)[:rnd.randrange(0, 80)]
        typ, code, word = rnd.choice([(1, 4, 0), (1, 0, 0), (2, 0, rnd.choice([0, 68, 1279, 1280, 65535])), (3, 0, 0), (3, 1, 0), (4, 0, 40), (4, 1, 6)])
        send_frame(eth6(ipv6(NH_ICMP6, icmp6(typ, code, struct.pack("!I", word) + quote))), "icmp6_error")
    q = ipv6(NH_UDP, udp6_seg(53, 40000, b"q"), src=gw6_b, dst=me6_b)
    send_frame(eth6(ipv6(NH_ICMP6, icmp6(1, 4, bytes(4) + q, bad=True))), "icmp6_bad")
    send_frame(eth6(ipv6(NH_ICMP6, bytes([1, 4]))), "icmp6_bad")
    send_frame(eth6(ipv6(NH_ICMP6, icmp6(rnd.choice([50, 127, 200, 255]), 0, rnd.randbytes(12)))), "icmp6_bad")
    send_frame(eth6(ipv6(NH_ICMP6, icmp6(128, 0, struct.pack("!HH", rnd.getrandbits(16), 1) + b"e" * 56))), "icmp6_echo")


def syn6_to(port, opts=MSS1, win=64240):
    send_frame(eth6(ipv6(NH_TCP, tcp6_seg(rnd.randrange(1024, 65536), port, 0x02, opts=opts, win=win))), "syn6")


def udp6_flood(n):
    for _ in range(n):
        send_frame(eth6(ipv6(NH_UDP, udp6_seg(rnd.randrange(1024, 65536), rnd.choice(udp6_ports), b"u" * 64))), "udp6")


# --- connections that hold the relay's buffers -------------------------------
held = []


def hold(n, mss=None, v6=False):
    """n connections to the blaster that never read: their receive window
    closes (zero window), or a tiny MSS makes every segment carry 88 bytes
    (v6: to the IPv6 blaster through fd00::2)."""
    for _ in range(n):
        s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        if mss is not None:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        s.settimeout(10)
        try:
            s.connect((GW6, blaster6) if v6 else (GW, blaster))
            held.append(s)
            count(("held6_" if v6 else "held_") + ("mss" if mss else "zero_window"))
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
    fragments6()
hold(8, mss=88)
hold(4, mss=88, v6=True)
hold(4, v6=True)
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
for _ in range(60):
    syn6_to(tarpit6, opts=b"")
for k in range(3000):
    syn_to(rnd.choice(closed), opts=MSS1 if k % 2 else b"", win=0 if k % 3 else 64240)
report()
# 3. a UDP flood to many ports until the flow table is full: flow limit.
phase = "udp"
udp_flood(4000)
udp6_flood(500)
icmp_flood(200)
ndp(500)
# Packets that each ask for a Parameter Problem (an unknown next header),
# sent back to back: more than the ICMPv6 error rate limit (RFC 4443 2.4
# (f); 50 at once, then 1000 a second) lets out. Built once, so that a
# burst is as fast as the sends even on a loaded machine, and sent once the
# link's queue has drained (a burst behind a full queue is mostly dropped
# by the TAP before the relay sees it): here after a pause, and at the
# start of every flood window.
ERROR_BURST = eth6(ipv6(99, rnd.randbytes(16)))


def error_burst(n):
    for _ in range(n):
        send_frame(ERROR_BURST, "ip6_error_burst")


time.sleep(0.3)
error_burst(1000)
phase = "flood"
report()

# Then everything, paced to `pps`, while CTL/on exists.
def sent():
    return sum(v for k, v in counts.items() if not k.startswith("hold"))


last = time.monotonic()
while True:
    t_wait = time.monotonic()
    if not wait_on():
        break
    t0, n0 = time.monotonic(), sent()
    if t0 - t_wait > 0.05:
        # A flood window begins after a pause: the queue is empty.
        error_burst(300)
    garbage()
    fragments()
    for _ in range(64):
        syn_to(rnd.choice(closed + [tarpit, blaster]), opts=MSS1)
    udp_flood(64)
    icmp_flood(16)
    dhcp_garbage()
    garbage6()
    ext_chains()
    fragments6()
    ndp(16)
    icmp6_errors(8)
    for _ in range(32):
        syn6_to(rnd.choice(closed6 + [tarpit6, blaster6]))
    udp6_flood(32)
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
