#!/usr/bin/env bash
# scripts/fuzz.sh SECONDS [TARGET...]
#
# Run every fuzz target (or the ones named) for a total budget of SECONDS,
# one after another on one core. The budget is divided by weight:
# stack_receive counts 3, tcp_conn 2, every other target 1 (with the 12
# targets of today, `fuzz.sh 1800` gives stack_receive 5 min, tcp_conn 3:20
# and the others 1:40 each). Needs a nightly toolchain; installs cargo-fuzz
# if it is missing.
#
# Builds (fuzz/target/<flavour>/):
#   deep    stack_receive, tcp_conn, dhcpv4, ctl_request, relay_config:
#           no sanitizer, no trace-compares
#   parse   every other target: no sanitizer, trace-compares on
# Why no AddressSanitizer: ustack-wire and ustack-core forbid unsafe code,
# so ASan cannot find anything there, and it cost stack_receive 5x in speed
# and 10x in memory. Trace-compares (libFuzzer's CMP feedback) halves
# stack_receive's speed for little gain, since its generator already builds
# valid headers; the parsers keep it (they are fast either way). Debug
# assertions (overflow checks) are on in both builds.
#
# New inputs go to a scratch corpus ($FUZZ_SCRATCH/<target>, default
# /tmp/ustack-fuzz), never into fuzz/corpus/ (fold them in by hand, see
# fuzz/README.md). Each run appends one line per target to fuzz/runs.tsv
# (date, target, seconds, executions, exec/s, exec per CPU second, cov, ft,
# peak RSS MB, result; exec per CPU second is executions / (user + system
# time): what one core gives when others share the machine)
# and the script ends with the totals per target over every run recorded.
# FUZZ_LOG_DIR=DIR keeps each target's libFuzzer log as DIR/<target>.log
# (its status lines show the RSS over the run). FUZZ_FLAGS="..." adds
# libFuzzer flags to every target (after the per-target ones below).
# A crash leaves its input in fuzz/artifacts/<target>/ and makes the exit
# status 1 (the other targets still run).
# -reload=0: libFuzzer rereads the output corpus every second by default
# (lists the directory and stats every file, for inputs other processes
# added); one process fuzzes each scratch directory here, so there is
# nothing to pick up, and with the 13,000 files stack_receive's scratch had
# on 2026-11-29 the rereading took about 5 % of its time (perf).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
    echo "usage: scripts/fuzz.sh SECONDS [TARGET...]" >&2
    exit 2
fi
budget=$1
shift
export CARGO_INCREMENTAL=0
# cargo-fuzz is not part of the toolchain: install it on first use.
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked)" >&2
    cargo install cargo-fuzz --locked >&2
fi
scratch=${FUZZ_SCRATCH:-/tmp/ustack-fuzz}
triple=x86_64-unknown-linux-gnu

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

flavour() {
    # dhcpv4: its option accessors each walk the whole option list, and
    # trace-compares on every step halved it (48,373 against 103,000 exec
    # per CPU second); its seeds already carry the magic cookie and the
    # option codes trace-compares would otherwise have to discover.
    # ctl_request, relay_config: with the scratch corpus grown by earlier
    # runs (longer inputs), trace-compares on every byte of their JSON and
    # text parsing cut them to 76,293 and 49,321 exec/s (scripts/fuzz.sh
    # 900, 2026-11-29 13:22 UTC); without them, from copies of the same
    # scratch: 126,998 (cov 1,920 against 1,912) and 164,190 (cov 227
    # against 221). Their seeds hold the keywords CMP feedback would look for.
    case $1 in
        stack_receive | tcp_conn | dhcpv4 | ctl_request | relay_config) echo deep ;;
        *) echo parse ;;
    esac
}
weight() {
    case $1 in
        stack_receive) echo 3 ;;
        tcp_conn) echo 2 ;;
        *) echo 1 ;;
    esac
}
# Extra libFuzzer flags per target.
# stack_receive: -use_counters=0, features are the edges reached, not the
# edges' hit-count buckets. With hit counts libFuzzer kept every input that
# ran some loop a new number of times (a retransmission more, a longer
# SACK list), so its corpus filled with long inputs (790 bytes on average
# after a minute) and each execution cost about 600 us; with edges alone
# inputs stay short (about 100 bytes) and the search goes further in the
# same time. Back-to-back 10-minute runs from the committed corpus on one
# core (2026-11-29): 4,303,053 executions (7,159/s) reaching 7,127 edges,
# against 1,029,079 (1,712/s) reaching 6,931 with hit counts. Replayed with
# hit counts on, the edges-only corpus has fewer features (27,554 against
# 38,550): fewer distinct loop counts, more code. FUZZ_FLAGS="-use_counters=1"
# gives the other search back for a run. tcp_conn keeps hit counts: in
# 120 s each both ways reached the same 3,032 edges (66,974 executions
# with them, 170,972 without), and its loop counts (retransmissions,
# rounds of the faithful end) are much of what it explores.
extra_flags() {
    case $1 in
        stack_receive) echo -use_counters=0 ;;
    esac
}
max_len() {
    case $1 in
        stack_receive | tcp_conn | ctl_request) echo 4096 ;;
        *) echo 2048 ;;
    esac
}

build() { # flavour target...
    local f=$1
    shift
    local flags=(-s none -a)
    [ "$f" = deep ] && flags+=(--no-trace-compares)
    for t in "$@"; do
        cargo +nightly fuzz build "${flags[@]}" --target-dir "target/$f" "$t" >&2
    done
}

total_w=0
deep=()
parse=()
for t in "${targets[@]}"; do
    total_w=$((total_w + $(weight "$t")))
    if [ "$(flavour "$t")" = deep ]; then deep+=("$t"); else parse+=("$t"); fi
done
[ ${#deep[@]} -gt 0 ] && build deep "${deep[@]}"
[ ${#parse[@]} -gt 0 ] && build parse "${parse[@]}"

[ -f runs.tsv ] || printf 'date\ttarget\tseconds\texecs\texec_per_s\texec_per_cpu_s\tcov\tft\tpeak_rss_mb\tresult\n' >runs.tsv
status=0
printf '%-16s %7s %12s %8s %9s %6s %7s %6s %s\n' target seconds execs exec/s exec/cpu-s cov ft rss_mb result
for t in "${targets[@]}"; do
    secs=$((budget * $(weight "$t") / total_w))
    [ "$secs" -lt 1 ] && secs=1
    bin="target/$(flavour "$t")/$triple/release/$t"
    mkdir -p "$scratch/$t" "artifacts/$t"
    log=$(mktemp)
    cpu=$(mktemp)
    read -ra xf <<<"$(extra_flags "$t") ${FUZZ_FLAGS:-}"
    result=ok
    if ! /usr/bin/time -f '%U %S' -o "$cpu" "$bin" "$scratch/$t" "corpus/$t" -max_total_time="$secs" -max_len="$(max_len "$t")" \
        -timeout=10 -rss_limit_mb=2048 -reload=0 -print_final_stats=1 "${xf[@]}" \
        -artifact_prefix="artifacts/$t/" >"$log" 2>&1; then
        result=crash
        status=1
        grep -E "^==|panicked|ERROR|artifact" "$log" | head -5 >&2 || true
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | grep -E 'cov: ' | tail -1 || true)
    cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
    epc=$(awk -v e="${execs:-0}" 'NR == 1 { c = $1 + $2; printf "%d", (c > 0 ? e / c : 0) }' "$cpu")
    if [ -n "${FUZZ_LOG_DIR:-}" ]; then
        mkdir -p "$FUZZ_LOG_DIR"
        cp "$log" "$FUZZ_LOG_DIR/$t.log"
    fi
    rm -f "$log" "$cpu"
    printf '%-16s %7s %12s %8s %9s %6s %7s %6s %s\n' "$t" "$secs" "${execs:-?}" "${eps:-?}" \
        "${epc:-?}" "${cov:-?}" "${ft:-?}" "${rss:-?}" "$result"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$secs" \
        "${execs:-0}" "${eps:-0}" "${epc:-0}" "${cov:-0}" "${ft:-0}" "${rss:-0}" "$result" >>runs.tsv
done

echo
echo "totals over every run in fuzz/runs.tsv:"
printf '%-16s %10s %14s %8s\n' target seconds executions crashes
awk -F'\t' 'NR > 1 { s[$2] += $3; e[$2] += $4; if ($NF != "ok") c[$2] += 1 }
    END { for (t in s) printf "%-16s %10d %14d %8d\n", t, s[t], e[t], c[t] }' runs.tsv | sort
exit $status
