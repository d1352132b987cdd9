#!/bin/bash
# Shared sysctl setup for ustack's own packetdrill scripts.
# Run by each script as `../common/defaults.sh` (working directory = the
# script's directory) inside the script's private network namespace, so the
# settings only affect that namespace. Same idea as upstream's
# gtests/net/tcp/common/defaults.sh, minus the tc qdisc line and TCP Fast Open.
# Values are pinned explicitly so scripts do not depend on the host defaults.

# Flush cached per-destination metrics (ssthresh, rtt, ...).
ip tcp_metrics flush all > /dev/null 2>&1

# Buffer sizes: min, default, max.
sysctl -q net.ipv4.tcp_rmem="4096 540000 $((15*1024*1024))"
sysctl -q net.ipv4.tcp_wmem="4096 $((256*1024)) 4194304"

# Options offered/accepted in the handshake.
sysctl -q net.ipv4.tcp_timestamps=1
sysctl -q net.ipv4.tcp_sack=1
sysctl -q net.ipv4.tcp_dsack=1
sysctl -q net.ipv4.tcp_window_scaling=1
sysctl -q net.ipv4.tcp_ecn=0

# SYN / SYN-ACK retransmission limits.
sysctl -q net.ipv4.tcp_syn_retries=5
sysctl -q net.ipv4.tcp_synack_retries=5

# Loss recovery: F-RTO, RACK-TLP, dupthresh 3.
sysctl -q net.ipv4.tcp_frto=2
sysctl -q net.ipv4.tcp_reordering=3
sysctl -q net.ipv4.tcp_early_retrans=4 net.ipv4.tcp_recovery=1

# Congestion control. NOTE: inside a network namespace this only works
# if cubic is in the host's net.ipv4.tcp_allowed_congestion_control (on
# this machine the host default is bbr and the allowed list is "reno bbr",
# so the sysctl fails with EPERM and the namespace keeps bbr). Scripts whose
# result depends on the congestion control therefore also select cubic
# per socket with setsockopt(TCP_CONGESTION, "cubic"), which root may do.
sysctl -q net.ipv4.tcp_congestion_control=cubic 2>/dev/null
sysctl -q net.ipv4.tcp_slow_start_after_idle=0
sysctl -q net.ipv4.tcp_tso_win_divisor=3
sysctl -q net.ipv4.tcp_pacing_ss_ratio=200
sysctl -q net.ipv4.tcp_pacing_ca_ratio=120
sysctl -q net.ipv4.tcp_notsent_lowat=4294967295 > /dev/null 2>&1

# SYN cookies only when the SYN queue overflows.
sysctl -q net.ipv4.tcp_syncookies=1

# RFC 5961 rate limits: per-socket limit of one out-of-window/challenge
# ACK per 500 ms; the global (per-netns) challenge ACK limit disabled
# (INT_MAX, the Linux 6.x default).
sysctl -q net.ipv4.tcp_invalid_ratelimit=500
sysctl -q net.ipv4.tcp_challenge_ack_limit=2147483647

# TIME-WAIT and keepalive defaults.
sysctl -q net.ipv4.tcp_fin_timeout=60
sysctl -q net.ipv4.tcp_rfc1337=0
sysctl -q net.ipv4.tcp_keepalive_time=7200
sysctl -q net.ipv4.tcp_keepalive_intvl=75
sysctl -q net.ipv4.tcp_keepalive_probes=9
exit 0
