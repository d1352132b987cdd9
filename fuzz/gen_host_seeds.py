#!/usr/bin/env python3
"""Write the hand-made seeds of tcp_conn, ctl_request, relay_config and
ipc_domain into corpus/<target>/ (run from fuzz/; overwrites these files
only)."""
import json, os

def put(target, name, data):
    os.makedirs(f"corpus/{target}", exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(f"corpus/{target}/{name}", "wb") as f:
        f.write(bytes(data))

# tcp_conn: config byte, then op bytes (bit 0 side A=0/B=1, bits 1-4 the
# operation, bits 5-7 the time step) with their fields (harness/tcp_conn.rs).
def op(side, kind, step=0):
    return (step << 5) | (kind << 1) | side
SEND, RECV, DELIVER_ALL, DROP, DUP, SWAP, REWRITE, FORGE, APP = 9, 11, 13, 4, 5, 6, 7, 8, 14
for cfg, tag in [(0, "opts"), (7, "noopts_small"), (8, "mtu576"), (48, "nodelay_ecn")]:
    put("tcp_conn", f"transfer_{tag}", [cfg, op(0, SEND), 100, op(1, SEND), 50,
        op(0, DELIVER_ALL), op(1, RECV), 100, op(0, RECV), 100])
    put("tcp_conn", f"loss_{tag}", [cfg, op(0, SEND), 0x85, 0xdc, op(0, DROP), op(0, 0),
        op(0, SWAP), op(0, DUP), op(0, DELIVER_ALL, 6), op(1, RECV), 0xff, 0xff,
        op(0, DELIVER_ALL, 7)])
put("tcp_conn", "forge_data_both_ways", [0, op(0, SEND), 200, op(1, SEND), 200,
    op(0, FORGE), 0x18, 0, 0x90, 0, 0, 20, op(1, FORGE), 0x10, 0, 0xa0, 0, 1, 10,
    op(0, DELIVER_ALL), op(1, RECV), 0x81, 0, op(0, RECV), 0x81, 0])
put("tcp_conn", "rewrite_flags_seq_ack", [0, op(0, SEND), 100, op(0, REWRITE), 0x1f, 0x01,
    0x90, 0xa0, 0x00, 0x10, 50, op(0, DELIVER_ALL, 5), op(1, RECV), 100])
put("tcp_conn", "zero_window_small_buffers", [4, op(0, SEND), 0xcf, 0xff, op(0, DELIVER_ALL),
    op(1, FORGE), 0x10, 0, 0, 0, 2, 0, op(0, DELIVER_ALL, 6), op(1, RECV), 0xcf, 0xff,
    op(0, DELIVER_ALL, 7)])
put("tcp_conn", "close_abort", [0, op(0, SEND), 10, op(0, APP), 0, op(0, DELIVER_ALL),
    op(1, APP), 1, op(1, DELIVER_ALL, 7), op(0, APP), 2])

# ctl_request: control requests as the client sends them, and name=value text.
NAMES = ["tcp_timestamps", "tcp_sack", "tcp_window_scaling", "tcp_syn_retries",
         "tcp_synack_retries", "tcp_retries2", "tcp_rmem", "tcp_wmem",
         "tcp_congestion_control", "tcp_syncookies", "tcp_fin_timeout",
         "tcp_keepalive_time", "tcp_keepalive_intvl", "tcp_keepalive_probes",
         "tcp_challenge_ack_limit", "tcp_rfc1337", "tcp_mtu_probing", "tcp_base_mss",
         "tcp_probe_threshold", "tcp_probe_interval", "tcp_notsent_lowat",
         "tcp_min_tso_segs", "tcp_ecn"]
reqs = {
    "info": {"op": "info"},
    "sockets": {"op": "sockets", "detail": True},
    "counters": {"op": "counters", "update": False},
    "sysctl_get_all": {"op": "sysctl_get", "names": []},
    "sysctl_get_names": {"op": "sysctl_get", "names": ["net.ipv4." + n for n in NAMES]},
    "sysctl_get_forms": {"op": "sysctl_get", "names": ["tcp_sack", "net/ipv4/tcp_wmem", " tcp_ecn "]},
    "sysctl_set": {"op": "sysctl_set", "assignments": [["tcp_wmem", "4096 16384 4194304"],
        ["net/ipv4/tcp_sack", "0"], ["tcp_congestion_control", "reno"],
        ["tcp_notsent_lowat", "4294967295"], ["tcp_keepalive_time", "7200"]]},
    "capture_start": {"op": "capture_start", "snaplen": 96,
        "filter": {"host": "10.0.0.1", "port": 80, "proto": "tcp"}, "queue_bytes": 1000000},
    "capture_read": {"op": "capture_read", "max": 65536},
    "capture_stop": {"op": "capture_stop"},
    "ports": {"op": "ports", "add": "127.0.0.1:8080:80/tcp", "remove": "5353:53/udp"},
}
for k, v in reqs.items():
    put("ctl_request", k, json.dumps(v))
put("ctl_request", "text_assignments",
    "tcp_rmem=4096 131072 6291456\ntcp_ecn=2\ntcp_mtu_probing=1\ntcp_syncookies=2\n"
    "tcp_base_mss=1024\ntcp_probe_interval=600\ntcp_min_tso_segs=2\n")

# relay_config: resolv.conf texts and -p specs.
put("relay_config", "resolv_systemd", "# generated\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n")
put("relay_config", "resolv_mixed", "search lan\nnameserver fe80::1%eth0\n; nameserver 1.1.1.1\nnameserver\t8.8.8.8 # google\n")
put("relay_config", "port_specs", "8080:80\n0.0.0.0:2222:22/tcp\n127.0.0.1:5353:53/udp\n1:65535\n")

# ipc_domain: a message cache line, then patches (u16 offset, u8 length, bytes).
put("ipc_domain", "message_notify", [1, 0, 0x02, 0, 3, 0, 7, 0] + list(range(56)))
put("ipc_domain", "patch_header_tag", [0] * 64 + [0, 16, 4, 0xff, 0x7f, 0, 0])
put("ipc_domain", "patch_slot", [0] * 64 + [0x10, 0x00, 8, 1, 0, 0, 0, 0xff, 0xff, 0, 0, 0x00, 0x10])
