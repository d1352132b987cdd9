#!/usr/bin/env python3
"""Write the seed corpus of the `stack_receive` target (fuzz/corpus/stack_receive/).

The input format is decoded by `harness/stack.rs`: one configuration byte,
then operations. An operation byte is `kind << 3 | time_step`; `kind` indexes
`OPS` in harness/stack.rs, `time_step` indexes `STEPS` (0, 0, 1 ms, 10 ms,
200 ms, 1 s, 30 s, 120 s). Lengths use `Input::len` (one byte < 128, or two
bytes with the top bit set). Run from fuzz/: python3 gen_stack_seeds.py
"""
import os

RAW, RAWFIX, TCP, UDP, ECHO, ICMPERR, ARP, FRAG, FRAGDG, IPRAW = 0, 1, 3, 9, 10, 11, 13, 14, 16, 17
# In burst mode (config bit 7) kind 8 is a run of segments (TcpRun).
TCPRUN = 8
ACCEPT, SEND, RECV, SHUT, CLOSE, ABORT, CONNECT, SETOPT = 18, 19, 21, 23, 24, 25, 26, 27
USEND, URECV, UBIND, PING = 28, 29, 30, 31
FIN, SYN, RST, PSH, ACK = 1, 2, 4, 8, 16


def op(kind, step=0):
    return bytes([kind << 3 | step])


def ln(n):
    return bytes([n]) if n < 128 else bytes([0x80 | n >> 8, n & 0xff])


def tcp(flow, fl, length=0, step=0, dseq=b"\0", dack=b"\0", win=0, opt=0, optdata=b"", data=b""):
    return op(TCP, step) + bytes([flow, fl]) + dseq + dack + bytes([win, opt]) + optdata + ln(length) + data


def run(flow, n, size, at=0, kind=0, arg=7, win=65535, step=0):
    # kind & 7: 0 flag (arg & 7 indexes FIN SYN RST URG ECE CWR PSH none),
    # 1 shorter, 2 longer, 3 seq offset, 4 window, 5 ACK, 6 bad checksum,
    # 7 resend / swap / other flow (arg % 3); kind & 0x80: PSH on the last.
    return op(TCPRUN, step) + bytes([flow, n]) + ln(size) + b"\0" + win.to_bytes(2, "big") + bytes([at, kind, arg])


def new_flow(theirs, fl, isn=0x11111111, ts=0, step=0):
    # sel >= 240 = a new flow; ours selector 1 = the listener.
    return op(TCP, step) + bytes([255]) + theirs.to_bytes(2, "big") + bytes([1]) + isn.to_bytes(4, "big") + bytes([ts, fl, 0, 0, 0, 0]) + ln(0)


seeds = {
    "empty": bytes([0]),
    "passive_data_ack_close": bytes([0])
    + tcp(0, PSH | ACK, 100)
    + op(RECV, 2) + bytes([0]) + ln(200)
    + op(SEND) + bytes([0]) + ln(1000) + bytes([0])
    + tcp(0, ACK, 0, step=3)
    + tcp(0, FIN | ACK, 0, step=2)
    + op(CLOSE) + bytes([0])
    + tcp(0, ACK, 0, step=2),
    "active_data_sack_ts": bytes([0])
    + op(SEND) + bytes([1]) + ln(5000) + bytes([0])
    + tcp(1, ACK, 0, step=2, dack=b"\xc1\xfc\x18", opt=0x08, optdata=b"\x01\xf4\x00\xc8")
    + tcp(1, PSH | ACK, 300, step=2)
    + op(RECV) + bytes([1]) + ln(300)
    + op(SHUT) + bytes([1])
    + tcp(1, FIN | ACK, 0, step=4),
    "out_of_order_and_rst": bytes([0])
    + tcp(0, ACK, 200, dseq=b"\xc1\x00\x64")
    + tcp(0, ACK, 100)
    + tcp(0, RST, 0, step=5),
    "zero_window_tiny_buffers": bytes([32])
    + op(SEND) + bytes([0]) + ln(20000) + bytes([0])
    + tcp(0, ACK, 0, win=2, step=2)
    + tcp(0, ACK, 0, win=2, step=6),
    "small_limits_syn_flood": bytes([1]) + b"".join(new_flow(1000 + i, SYN) for i in range(6)) + op(ACCEPT, 5),
    "no_tcp_opts_mtu576": bytes([2 | 4]) + op(SEND) + bytes([1]) + ln(3000) + bytes([0]) + tcp(1, ACK, 0, step=3),
    "udp_dns_and_recv": bytes([0])
    + op(UDP) + bytes([0, 0, 0]) + (5353).to_bytes(2, "big") + bytes([0, 0]) + ln(30) + bytes([0])
    + op(URECV) + bytes([0]) + ln(100)
    + op(USEND, 2) + bytes([0, 0]) + (5353).to_bytes(2, "big") + ln(40) + bytes([0, 0]),
    "udp_closed_port_unreachable": bytes([0])
    + op(UDP) + bytes([0, 0, 0]) + (5353).to_bytes(2, "big") + bytes([2]) + (9999).to_bytes(2, "big") + bytes([0]) + ln(10) + bytes([0]),
    "fragmented_udp_and_echo": bytes([0])
    + op(FRAGDG) + bytes([0]) + ln(3000) + bytes([100, 1, 0])
    + op(FRAGDG, 2) + bytes([1]) + ln(2000) + bytes([50, 0, 3])
    + op(FRAGDG, 2) + bytes([0]) + ln(1000) + bytes([20, 3 | 4, 0]),
    "fragment_overlap": bytes([0])
    + op(FRAG) + bytes([0, 17, 0]) + (0x8000).to_bytes(2, "big") + ln(64) + bytes([0])
    + op(FRAG) + bytes([0, 17, 0]) + (0x0004).to_bytes(2, "big") + ln(64) + bytes([0]),
    "icmp_frag_needed_on_active": bytes([0])
    + op(SEND) + bytes([1]) + ln(8000) + bytes([0])
    + op(ICMPERR) + bytes([0x80, 4]) + (576).to_bytes(2, "big") + bytes([1, 0, 0])
    + tcp(1, ACK, 0, step=4),
    "icmp_port_unreach_udp": bytes([0])
    + op(UBIND) + bytes([2]) + (5353).to_bytes(2, "big")
    + op(USEND) + bytes([0, 0]) + (5353).to_bytes(2, "big") + ln(10) + bytes([0, 1])
    + op(ICMPERR) + bytes([0, 3, 0, 0, 0, 250, 0, 0]) + (5353).to_bytes(2, "big"),
    "arp_requests_and_replies": bytes([0])
    + op(ARP) + bytes([0, 1, 0, 0, 0])
    + op(ARP) + bytes([2, 1, 5, 7, 0, 0])
    + op(USEND) + bytes([0, 210]) + (7).to_bytes(2, "big") + ln(10) + bytes([0, 0])
    + op(ARP, 5) + bytes([2, 0, 0x02, 0, 0, 0x09, 5, 0x0d, 0, 0]),
    "ping_and_echo": bytes([0])
    + op(PING) + bytes([0]) + (1).to_bytes(2, "big") + (1).to_bytes(2, "big") + ln(56) + bytes([0])
    + op(ECHO) + bytes([0, 0, 0]) + (1).to_bytes(2, "big") + (1).to_bytes(2, "big") + ln(56) + bytes([1])
    + op(ECHO) + bytes([0, 0, 0]) + (9).to_bytes(2, "big") + (9).to_bytes(2, "big") + ln(1400) + bytes([0]),
    "ip_options_raw": bytes([0])
    + op(IPRAW) + bytes([0x48, 0, 0]) + (5).to_bytes(2, "big") + (0).to_bytes(2, "big") + bytes([64, 1, 0, 0])
    + bytes([7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]) + ln(8) + bytes([8, 0, 0xf7, 0xff, 0, 0, 0, 0]),
    "connect_keepalive_wait": bytes([0])
    + op(CONNECT) + bytes([0]) + (22).to_bytes(2, "big") + (0).to_bytes(2, "big")
    + op(SETOPT) + bytes([2, 0x11 | 0x40])
    + op(ACCEPT, 7) + op(ACCEPT, 7) + op(ACCEPT, 7),
    "abort_both": bytes([0]) + op(ABORT) + bytes([0]) + op(ABORT) + bytes([1]) + op(ACCEPT, 6),
    # Burst mode: runs of segments coalesced by receive_burst.
    "gro_runs": bytes([128])
    + run(0, 21, 1460)
    + op(RECV) + bytes([0]) + ln(30000)
    + run(1, 47, 1448, at=10, kind=6)
    + op(RECV) + bytes([1]) + ln(30000)
    + run(0, 8, 1000, at=3, kind=0x87, arg=9)
    + run(1, 6, 1448, at=2, kind=1, arg=100, step=3)
    + tcp(0, PSH | ACK, 100) + tcp(0, ACK, 100)
    + run(1, 5, 1448, at=4, kind=0, arg=0, step=2),
    "gro_runs_vnet": bytes([128 | 64])
    + run(1, 12, 1448, at=5, kind=7, arg=1)
    + run(0, 12, 1460, at=5, kind=7, arg=2)
    + op(RECV) + bytes([0]) + ln(30000)
    + run(1, 30, 1448, at=7, kind=3, arg=0xf0, step=2)
    + run(0, 9, 700, at=1, kind=4, arg=3),
}


def vnet(flags, gso, hdr_len, size, start, off):
    return bytes([flags, gso]) + b"".join(x.to_bytes(2, "little") for x in (hdr_len, size, start, off))


def v6_frame(next_header, l4):
    # Peer 02:..:01 (fe80::1) to our MAC and link-local address
    # (fe80::ff:fe00:2, EUI-64 of 02:00:00:00:00:02).
    eth = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd])
    src = bytes([0xfe, 0x80] + [0] * 13 + [1])
    dst = bytes([0xfe, 0x80] + [0] * 8 + [0, 0, 0, 0xff, 0xfe, 0, 0, 2])
    ip6 = bytes([0x60, 0, 0, 0]) + len(l4).to_bytes(2, "big") + bytes([next_header, 64]) + src + dst
    return eth + ip6 + l4


def tcp6(payload, fl=PSH | ACK):
    return (40000).to_bytes(2, "big") + (8080).to_bytes(2, "big") + (1000).to_bytes(4, "big") \
        + (1).to_bytes(4, "big") + bytes([5 << 4, fl]) + (65535).to_bytes(2, "big") + bytes(4) + payload


def udp6(payload):
    return (5000).to_bytes(2, "big") + (53).to_bytes(2, "big") + (8 + len(payload)).to_bytes(2, "big") \
        + bytes(2) + payload


def raw(data):
    return op(RAW) + ln(len(data)) + data


# The link with the virtio-net header (config bit 6): IPv6 frames behind
# GSO headers the fuzzer may mutate (the RAW op carries the header too).
t6 = v6_frame(6, tcp6(bytes(range(256)) * 12))
u6 = v6_frame(17, udp6(bytes(range(250)) * 2))
seeds.update({
    # A TCP/IPv6 GSO super-frame (to a port with no IPv6 listener: a RST).
    "vnet_tcpv6_gso": bytes([64]) + raw(vnet(1, 4, 74, 1000, 54, 16) + t6),
    # Malformed: segment size 0, header length and checksum field outside
    # the frame, TCPV4 and USO on TCP/IPv6, TCPV6 on UDP/IPv6.
    "vnet_tcpv6_bad": bytes([64])
    + raw(vnet(1, 4, 74, 0, 54, 16) + t6)
    + raw(vnet(1, 4, 9000, 1000, 54, 16) + t6)
    + raw(vnet(1, 4, 74, 1000, 54, 4000) + t6)
    + raw(vnet(1, 1, 74, 1000, 54, 16) + t6)
    + raw(vnet(1, 5, 74, 1000, 54, 16) + t6)
    + raw(vnet(1, 4, 62, 100, 54, 6) + u6),
    # USO over IPv6: cut into datagrams (no socket: unreachable).
    "vnet_uso6": bytes([64]) + raw(vnet(1, 5, 62, 100, 54, 6) + u6),
})

os.makedirs("corpus/stack_receive", exist_ok=True)
for name, data in seeds.items():
    with open(f"corpus/stack_receive/{name}", "wb") as f:
        f.write(data)

# Every captured Linux frame, delivered with our MAC and repaired checksums.
for name in sorted(os.listdir("corpus/ethernet")):
    frame = open(f"corpus/ethernet/{name}", "rb").read()
    with open(f"corpus/stack_receive/frame_{name}", "wb") as f:
        f.write(bytes([0]) + op(RAWFIX) + bytes([3]) + ln(len(frame)) + frame)
print(len(seeds), "seeds +", len(os.listdir("corpus/ethernet")), "frames")
