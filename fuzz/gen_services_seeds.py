#!/usr/bin/env python3
"""Write the seed corpus of the `addr_services` target (fuzz/corpus/addr_services/).

The input format is decoded by `harness/services.rs`: operations, each
`step << 3 | flag << 2 | kind` (kind 0 DHCPv4, 1 DHCPv6, 2 Router
Solicitation, 3 raw frame; step indexes STEPS: 0, 1 ms, 100 ms, 1 s, 10 s,
60 s, 600 s, 3600 s), a length (one byte < 128, or two bytes with the top bit
set) and the message bytes; a Router Solicitation with the flag (from ::)
is followed by its hop limit. Run from fuzz/: python3 gen_services_seeds.py
"""
import os
import struct

GW4 = bytes([10, 0, 2, 2])
GUEST4 = bytes([10, 0, 2, 15])
GUEST_MAC = bytes([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
GW_MAC = bytes([0x52, 0x55, 0x0A, 0x00, 0x02, 0x02])
SERVER_DUID = bytes([0, 3, 0, 1]) + GW_MAC
CLIENT_DUID = bytes([0, 3, 0, 1]) + GUEST_MAC
GUEST6 = bytes.fromhex("fd000000000000000000000000000100")


def ln(n):
    return bytes([n]) if n < 128 else bytes([0x80 | n >> 8, n & 0xFF])


def op(kind, body, step=0, flag=False, extra=b""):
    return bytes([step << 3 | (4 if flag else 0) | kind]) + ln(len(body)) + body + extra


def dhcp4(msg, ciaddr=b"\0" * 4, flags=0, opts=b"", xid=0x3903F326):
    h = bytes([1, 1, 6, 0]) + struct.pack("!IHH", xid, 0, flags)
    h += ciaddr + b"\0" * 12 + GUEST_MAC + b"\0" * 10 + b"\0" * 192
    h += bytes([99, 130, 83, 99]) + bytes([53, 1, msg]) + opts + bytes([255])
    return h + b"\0" * max(0, 300 - len(h))


def o4(code, data):
    return bytes([code, len(data)]) + data


def o6(code, data):
    return struct.pack("!HH", code, len(data)) + data


def ia_na(iaid, addr=None):
    inner = o6(5, addr + struct.pack("!II", 0, 0)) if addr else b""
    return o6(3, struct.pack("!III", iaid, 0, 0) + inner)


def dhcp6(msg, opts, xid=0x10203):
    return bytes([msg]) + struct.pack("!I", xid)[1:] + opts


def rs_opts(sllao=True):
    return bytes([1, 1]) + GUEST_MAC if sllao else b""


seeds = {
    "dhcpv4_exchange": op(0, dhcp4(1, opts=o4(55, bytes([1, 3, 6, 51]))))
    + op(0, dhcp4(3, flags=0x8000, opts=o4(54, GW4) + o4(50, GUEST4)), step=2)
    + op(0, dhcp4(3, ciaddr=GUEST4), step=6, flag=True)
    + op(0, dhcp4(8, ciaddr=GUEST4), flag=True)
    + op(0, dhcp4(7, ciaddr=GUEST4, opts=o4(54, GW4)), flag=True),
    "dhcpv4_client_id_nak_decline": op(0, dhcp4(1, opts=o4(61, b"\x01" + GUEST_MAC)))
    + op(0, dhcp4(3, opts=o4(61, b"\x01" + GUEST_MAC) + o4(50, bytes([10, 0, 2, 99]))))
    + op(0, dhcp4(4, opts=o4(54, GW4) + o4(50, GUEST4)))
    + op(0, dhcp4(1), step=5),
    "dhcpv4_short": op(0, bytes([1, 1, 6, 0, 1, 2, 3, 4])),
    "dhcpv6_exchange": op(1, dhcp6(1, o6(1, CLIENT_DUID) + o6(8, b"\0\0") + o6(6, b"\0\x17\0\x18") + ia_na(7)))
    + op(1, dhcp6(3, o6(1, CLIENT_DUID) + o6(2, SERVER_DUID) + ia_na(7, GUEST6)), step=2)
    + op(1, dhcp6(5, o6(1, CLIENT_DUID) + o6(2, SERVER_DUID) + ia_na(7, GUEST6)), step=6)
    + op(1, dhcp6(6, o6(1, CLIENT_DUID) + ia_na(7, GUEST6)), step=6)
    + op(1, dhcp6(8, o6(1, CLIENT_DUID) + o6(2, SERVER_DUID) + ia_na(7, GUEST6)))
    + op(1, dhcp6(4, o6(1, CLIENT_DUID) + ia_na(7, GUEST6)))
    + op(1, dhcp6(9, o6(1, CLIENT_DUID) + o6(2, SERVER_DUID) + ia_na(7, GUEST6))),
    "dhcpv6_rapid_info_unicast": op(1, dhcp6(1, o6(1, CLIENT_DUID) + o6(14, b"") + ia_na(1) + ia_na(2)))
    + op(1, dhcp6(11, o6(1, CLIENT_DUID) + o6(6, b"\0\x17")))
    + op(1, dhcp6(5, o6(1, CLIENT_DUID) + o6(2, SERVER_DUID) + ia_na(1)), flag=True)
    + op(1, dhcp6(11, b"")),
    "dhcpv6_bad_option": op(1, bytes([1, 0, 0, 1, 0, 1, 0, 9, 1])),
    "rs": op(2, rs_opts()) + op(2, rs_opts(), step=1) + op(2, b"", flag=True, extra=b"\xff")
    + op(2, b"", step=7) + op(2, rs_opts(), flag=True, extra=b"\xff")
    + op(2, rs_opts(), step=3, flag=True, extra=b"\x40"),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "addr_services")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print(f"{len(seeds)} seeds in {out}")
