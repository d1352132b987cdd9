#!/usr/bin/env bash
# scripts/rr_placement.sh [N] [ustack|pasta ...]
#
# Where a relay's request/response round trip goes (README, Benchmarks):
# a Python client in the sandbox makes N one-byte exchanges (default
# 20,000) with a Python echo server on the host's 127.0.0.1, through
# `ustack run` and through pasta, and prints for each the round trip and
# the relay process's CPU time (user + system, from /proc) per exchange.
# Run it as is (the scheduler places everything) and under `taskset -c 0`
# (client, relay and server on CPU 0; with SERVER_FREE=1 the server may
# run on any CPU), to compare placements. Needs root, python3, and pasta
# for its rows.
# USTACK (default target/release/ustack) names the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
shift || true
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(ustack pasta)
ustack=${USTACK:-target/release/ustack}
port=34567

work=$(mktemp -d /tmp/rr-placement.XXXXXX)
ns=""
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/server.py" <<'EOF'
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
def echo(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(65536)
        if not d:
            return
        c.sendall(d)
while True:
    c, _ = s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()
EOF
cat >"$work/client.py" <<'EOF'
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n = int(sys.argv[3]); t = time.time()
for _ in range(n):
    s.sendall(b"x"); s.recv(64)
print(f"{(time.time() - t) / n * 1e6:.1f}")
EOF
python3 "$work/server.py" "$port" &
server=$!
if [ "${SERVER_FREE:-0}" = 1 ]; then
    taskset -p -c "0-$(($(nproc) - 1))" "$server" >/dev/null
fi
for _ in $(seq 50); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port)).close()" 2>/dev/null && break
    sleep 0.1
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
report() { # tool rtt_us ticks
    python3 -c "print(f'$1: round trip $2 us, relay CPU {$3 / $hz / $n * 1e6:.1f} us per exchange')"
}

for tool in "${tools[@]}"; do
    case $tool in
    ustack)
        "$ustack" run -- python3 "$work/client.py" 10.0.2.2 "$port" "$n" >"$work/out" &
        p=$!
        last=0
        while kill -0 "$p" 2>/dev/null; do
            v=$(ticks "$p" 2>/dev/null) && last=$v
            sleep 0.05
        done
        wait "$p"
        report ustack "$(cat "$work/out")" "$last"
        ;;
    pasta)
        ns=rrplace$$
        ip netns add "$ns"
        pasta --config-net --netns "/run/netns/$ns" -f --runas 0 -q >/dev/null 2>&1 &
        p=$!
        for _ in $(seq 50); do
            ip -n "$ns" route | grep -q default && break
            sleep 0.1
        done
        gw=$(ip -n "$ns" route | awk '/default/ {print $3; exit}')
        t0=$(ticks "$p")
        rtt=$(ip netns exec "$ns" python3 "$work/client.py" "$gw" "$port" "$n")
        t1=$(ticks "$p")
        kill "$p"
        wait "$p" 2>/dev/null || true
        ip netns del "$ns"
        ns=""
        report pasta "$rtt" "$((t1 - t0))"
        ;;
    *)
        echo "rr_placement.sh: unknown tool $tool (ustack, pasta)" >&2
        exit 2
        ;;
    esac
done
