#!/usr/bin/env bash
# Run packetdrill scripts against ustack (default) or against the Linux kernel.
#
#   scripts/packetdrill.sh [options] [SCRIPT|DIR|GLOB ...]
#
# ustack mode (default): builds packetdrill (from the vendored, unmodified
# source, into target/packetdrill/build) and the adapter crate
# ustack-packetdrill (target/release/libustack_packetdrill.so), then runs every
# upstream IPv4 script (gtests/net/tcp/**/*.pkt except *v6.pkt) and every
# tests/packetdrill/**/*.pkt with `packetdrill --so_filename=LIB`, in parallel,
# each in its own throwaway network namespace. Upstream results are compared
# with tests/packetdrill/expectations.txt (`PATH PASS` or `PATH FAIL reason`);
# our own scripts must all pass.
#
# --kernel: the same scripts against the Linux kernel (packetdrill's local
# mode with its own tun0), one at a time, as a reference: no expectations.
#
# --ip-version V: run_all.py's three variants. ipv4 (the default) as
# above; ipv6: IPv6 datagrams and AF_INET6 sockets, every upstream script
# except *v4.pkt, expectations in tests/packetdrill/expectations-ipv6.txt;
# ipv4-mapped-ipv6: IPv4 datagrams to AF_INET6 sockets (IPv4-mapped
# addresses), the IPv4 scripts, tests/packetdrill/expectations-ipv4-mapped-ipv6.txt.
#
# Options:
#   --ip-version V    ipv4 (default), ipv6 or ipv4-mapped-ipv6
#   --kernel          run against the Linux kernel (serialized, -j 1)
#   --record FILE     with --kernel: write the names of the passing scripts
#   --cc NAME         with --kernel: run each script with congestion control
#                     NAME on its sockets (a copy of the script that calls
#                     setsockopt(TCP_CONGESTION, NAME) right after every
#                     TCP socket(), on the same line, so line numbers stay):
#                     for a host whose tcp_allowed_congestion_control keeps
#                     the namespace's sysctl (defaults.sh) from choosing it
#   --upstream-only   only the upstream scripts
#   --own-only        only our scripts under tests/packetdrill/
#   --update          rewrite the expectations file from this run's results
#   -j N              parallel jobs (default: number of CPUs; --kernel: 1)
#   -t SECONDS        per-script wall-clock timeout (default 60)
#   -v                print packetdrill's output for every failure
#   -h, --help        this text
# Positional arguments select scripts: a file, a directory (all *.pkt below
# it), or a name/glob matched against the names printed by this script
# (e.g. 'blocking/*' or 'tests/packetdrill/*').
#
# Environment: PACKETDRILL_SRC (packetdrill source tree, default
# ../shared/third_party/packetdrill), EXPECTATIONS (expectations file),
# CARGO_TARGET_DIR, PACKETDRILL_ARGS (extra packetdrill arguments),
# PACKETDRILL_SO (use this adapter library instead of building the crate),
# PACKETDRILL_BIN (use this packetdrill binary instead of building one).
#
# Exit status: 0 all good; 1 failures (ustack mode: regressions, failing own
# scripts, or a stale expectations file); 2 the runner itself broke.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "packetdrill.sh: $*" >&2; exit 2; }

repo=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$repo"

mode=ustack
ipv=ipv4
record=
cc=
select=all
update=0
jobs=
timeout_s=60
verbose=0
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --kernel) mode=kernel ;;
        --ip-version) [ $# -ge 2 ] || die "--ip-version needs ipv4, ipv6 or ipv4-mapped-ipv6"; ipv=$2; shift ;;
        --ip-version=*) ipv=${1#--ip-version=} ;;
        --record) [ $# -ge 2 ] || die "--record needs a file"; record=$2; shift ;;
        --record=*) record=${1#--record=} ;;
        --cc) [ $# -ge 2 ] || die "--cc needs a name"; cc=$2; shift ;;
        --cc=*) cc=${1#--cc=} ;;
        --upstream-only) select=upstream ;;
        --own-only) select=own ;;
        --update) update=1 ;;
        -j) [ $# -ge 2 ] || die "-j needs a number"; jobs=$2; shift ;;
        -j*) jobs=${1#-j} ;;
        -t) [ $# -ge 2 ] || die "-t needs seconds"; timeout_s=$2; shift ;;
        -v) verbose=1 ;;
        -h | --help) usage; exit 0 ;;
        --) shift; args+=("$@"); break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) args+=("$1") ;;
    esac
    shift
done
[ -z "$jobs" ] || [[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "-j wants a positive number, not '$jobs'"
[ -z "$cc" ] || [[ "$cc" =~ ^[a-z0-9_]{1,15}$ ]] || die "--cc wants a congestion control name, not '$cc'"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die "-t wants a positive number of seconds, not '$timeout_s'"
case "$ipv" in
    ipv4) skip_suffix=v6.pkt expect_name=expectations.txt ;;
    ipv4-mapped-ipv6) skip_suffix=v6.pkt expect_name=expectations-ipv4-mapped-ipv6.txt ;;
    ipv6) skip_suffix=v4.pkt expect_name=expectations-ipv6.txt ;;
    *) die "--ip-version wants ipv4, ipv6 or ipv4-mapped-ipv6, not '$ipv'" ;;
esac
if [ "$mode" = kernel ]; then
    [ "$update" = 0 ] || die "--update compares with ustack's expectations; it makes no sense with --kernel"
    jobs=1 # the kernel runs on the real clock: timing-sensitive scripts need the CPUs to themselves
else
    [ -z "$record" ] || die "--record is for --kernel runs"
    [ -z "$cc" ] || die "--cc is for --kernel runs (ustack's scripts choose their congestion control themselves)"
    [ -n "$jobs" ] || jobs=$(nproc)
fi
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, TUN devices, sysctls inside the namespaces)"
for tool in ip timeout flock realpath unshare mount; do
    command -v "$tool" >/dev/null 2>&1 || die "missing '$tool' (run scripts/deps.sh)"
done

pd_src=${PACKETDRILL_SRC:-"$repo/../shared/third_party/packetdrill"}
[ -d "$pd_src/gtests/net/packetdrill" ] || die "no packetdrill source at $pd_src (set PACKETDRILL_SRC)"
pd_src=$(cd "$pd_src" && pwd -P)
tcp_dir="$pd_src/gtests/net/tcp"      # the upstream scripts (read-only)
own_dir="$repo/tests/packetdrill"
expect_file=${EXPECTATIONS:-"$own_dir/$expect_name"}
target_dir=${CARGO_TARGET_DIR:-"$repo/target"}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd -P)
tcp_run="$target_dir/packetdrill/gtests/net/tcp" # the copy the upstream scripts run from

# Outside /tmp: each script runs with a /tmp of its own (run_one), and the
# tc wrapper and the qdisc records below must stay visible to it.
tmp=$(mktemp -d "$target_dir/packetdrill-run.XXXXXX")
ns_prefix="pd-$$-"
cleanup() {
    local pid f
    trap - EXIT INT TERM
    # Stop what is still running: the per-script `timeout` processes (they
    # pass the signal on to packetdrill) and the worker subshells.
    for f in "$tmp"/pid/*; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $(jobs -p); do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    # Then every namespace of this run, whoever created it.
    ip netns list 2>/dev/null | awk '{print $1}' | while read -r ns; do
        case "$ns" in "$ns_prefix"*) ip netns del "$ns" 2>/dev/null || true ;; esac
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "packetdrill.sh: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM
mkdir -p "$tmp/pid" "$tmp/log" "$tmp/res" "$tmp/msg"

# --- build packetdrill -----------------------------------------------------
# configure and make write into their directory, so build in a copy under
# target/; the vendored tree is never written to. The scripts run from a copy
# too (target/packetdrill/gtests/net/{tcp,common}): the vendored tree stores
# the symlink tcp/common/defaults.sh -> ../../common/defaults.sh as a plain
# text file holding the link target, which the copy turns back into a link.
pd_work="$target_dir/packetdrill"
pd_build="$pd_work/build"
pd_bin=${PACKETDRILL_BIN:-"$pd_build/packetdrill"}
mkdir -p "$pd_work"
(
    flock 9 # concurrent runs must not build over each other
    if [ -z "${PACKETDRILL_BIN:-}" ] && { [ ! -x "$pd_bin" ] || [ -n "$(find "$pd_src/gtests/net/packetdrill" -newer "$pd_bin" -print -quit)" ]; }; then
        log="$pd_work/build.log"
        for tool in make cc bison flex; do
            command -v "$tool" >/dev/null 2>&1 || { echo "packetdrill.sh: building packetdrill needs '$tool' (run scripts/deps.sh)" >&2; exit 2; }
        done
        rm -rf "$pd_build"
        cp -R "$pd_src/gtests/net/packetdrill" "$pd_build"
        if ! (cd "$pd_build" && ./configure && make -j2) >"$log" 2>&1; then
            cat "$log" >&2
            echo "packetdrill.sh: building packetdrill failed (log above, also in $log)" >&2
            rm -f "$pd_bin"
            exit 2
        fi
    fi
    stamp="$pd_work/gtests/.copied"
    if [ ! -e "$stamp" ] || [ -n "$(find "$pd_src/gtests/net" -path "$pd_src/gtests/net/packetdrill" -prune -o -newer "$stamp" -print -quit)" ]; then
        rm -rf "$pd_work/gtests"
        mkdir -p "$pd_work/gtests/net"
        for d in "$pd_src"/gtests/net/*/; do
            d=${d%/}
            [ "$(basename "$d")" = packetdrill ] || cp -R "$d" "$pd_work/gtests/net/"
        done
        chmod -R u+w "$pd_work/gtests"
        find "$pd_work/gtests" -type f -size -200c ! -name '*.pkt' -print0 |
            while IFS= read -r -d '' f; do
                link=$(head -c 200 "$f")
                if [[ "$link" =~ ^[./A-Za-z0-9_-]+$ ]] && [ -e "$(dirname "$f")/$link" ]; then
                    ln -sfn "$link" "$f"
                fi
            done
        touch "$stamp"
    fi
) 9>"$pd_work/.lock"
[ -x "$pd_bin" ] || die "no packetdrill binary at $pd_bin"

# --- build the adapter ------------------------------------------------------
lib=
if [ "$mode" = ustack ] && [ -n "${PACKETDRILL_SO:-}" ]; then
    lib=$(realpath "$PACKETDRILL_SO")
elif [ "$mode" = ustack ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
    cargo build --release -p ustack-packetdrill --quiet ||
        die "building the adapter (cargo build --release -p ustack-packetdrill) failed"
    lib="$target_dir/release/libustack_packetdrill.so"
    [ -f "$lib" ] || die "the adapter build left no $lib"
fi

# --- collect the scripts ----------------------------------------------------
# Each script has a path, a kind (upstream, own, other) and a name: upstream
# scripts are named relative to gtests/net/tcp (as in the expectations file),
# ours relative to the repository.
s_path=() s_kind=() s_name=()
declare -A seen=()
add_script() { # path
    local path kind name
    path=$(realpath "$1")
    [ -z "${seen[$path]:-}" ] || return 0
    case "$path" in
        "$tcp_dir"/*) kind=upstream; name=${path#"$tcp_dir"/}; path="$tcp_run/$name" ;;
        "$tcp_run"/*) kind=upstream; name=${path#"$tcp_run"/} ;;
        "$own_dir"/*) kind=own; name=${path#"$repo"/} ;;
        *) kind=other; name=$path ;;
    esac
    case "$select:$kind" in upstream:own | upstream:other | own:upstream) return 0 ;; esac
    if [ "$kind" = upstream ] && [[ "$name" == *"$skip_suffix" ]]; then
        echo "packetdrill.sh: skipping $name: an IP${skip_suffix%.pkt}-only script (this is the $ipv run)" >&2
        return 0
    fi
    seen[$path]=1
    s_path+=("$path") s_kind+=("$kind") s_name+=("$name")
}
mapfile -t upstream_all < <(cd "$tcp_dir" && find . -name '*.pkt' ! -name "*$skip_suffix" -type f | sed 's|^\./||' | LC_ALL=C sort)
own_all=()
if [ -d "$own_dir" ]; then
    mapfile -t own_all < <(find "$own_dir" -name '*.pkt' -type f | LC_ALL=C sort)
fi
candidates=()
[ "$select" = own ] || for n in "${upstream_all[@]}"; do candidates+=("$tcp_dir/$n"); done
[ "$select" = upstream ] || candidates+=("${own_all[@]}")

if [ ${#args[@]} -eq 0 ]; then
    for p in "${candidates[@]}"; do add_script "$p"; done
else
    for a in "${args[@]}"; do
        if [ -f "$a" ]; then
            add_script "$a"
        elif [ -d "$a" ]; then
            found=0
            while read -r p; do add_script "$p"; found=1; done < <(find "$a" -name '*.pkt' -type f | LC_ALL=C sort)
            [ "$found" = 1 ] || die "no *.pkt under $a"
        else
            found=0
            for p in "${candidates[@]}"; do
                n=${p#"$tcp_dir"/}
                n=${n#"$repo"/}
                # shellcheck disable=SC2053 # $a is a glob on purpose
                if [[ "$n" == $a || "$p" == $a ]]; then add_script "$p"; found=1; fi
            done
            [ "$found" = 1 ] || die "no script matches '$a'"
        fi
    done
fi
[ ${#s_path[@]} -gt 0 ] || die "no scripts selected"

# --cc: run copies (in $tmp) that select the congestion control per socket.
if [ -n "$cc" ]; then
    mkdir -p "$tmp/cc/own"
    cp -R "$pd_work/gtests" "$tmp/cc/"
    [ ! -d "$own_dir" ] || cp -R "$own_dir/." "$tmp/cc/own/"
    for i in "${!s_path[@]}"; do
        case "${s_kind[$i]}" in
            upstream) new="$tmp/cc/gtests/net/tcp/${s_name[$i]}" ;;
            own) new="$tmp/cc/own/${s_path[$i]#"$own_dir"/}" ;;
            *) new="$tmp/cc/other/$i/$(basename "${s_path[$i]}")"; mkdir -p "$(dirname "$new")"; cp "${s_path[$i]}" "$new" ;;
        esac
        sed -i -E "s/^([[:space:]]*[^[:space:]]+ socket\(\.\.\., SOCK_STREAM[^)]*\) = ([0-9]+))[[:space:]]*\$/\1 +0 setsockopt(\2, SOL_TCP, TCP_CONGESTION, \"$cc\", ${#cc}) = 0/" "$new"
        grep -q 'TCP_CONGESTION, "'"$cc"'"' "$new" ||
            echo "packetdrill.sh: --cc: ${s_name[$i]} opens no TCP socket the usual way; it runs unchanged" >&2
        s_path[i]=$new
    done
fi

# --- expectations -------------------------------------------------------------
declare -A expect=() # upstream name -> "PASS" or "FAIL reason..."
if [ "$mode" = ustack ]; then
    [ -f "$expect_file" ] || [ "$update" = 1 ] || die "no expectations file $expect_file (create it with --update)"
    problems=()
    if [ -f "$expect_file" ]; then
        lineno=0
        while IFS= read -r line || [ -n "$line" ]; do
            lineno=$((lineno + 1))
            [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
            read -r p st reason <<<"$line"
            if ! { [ "$st" = PASS ] && [ -z "$reason" ]; } && ! { [ "$st" = FAIL ] && [ -n "$reason" ]; }; then
                problems+=("$expect_file:$lineno: want 'PATH PASS' or 'PATH FAIL reason', got: $line")
                continue
            fi
            [ -z "${expect[$p]:-}" ] || problems+=("$expect_file:$lineno: $p is listed twice")
            [ -f "$tcp_dir/$p" ] || problems+=("$expect_file:$lineno: $p: no such upstream script (stale entry)")
            expect[$p]="$st${reason:+ $reason}"
        done <"$expect_file"
    fi
    for n in "${upstream_all[@]}"; do
        [ -n "${expect[$n]:-}" ] || problems+=("$expect_file: upstream script $n is not listed")
    done
    if [ ${#problems[@]} -gt 0 ] && [ "$update" = 0 ]; then
        printf '%s\n' "${problems[@]}" >&2
        die "the expectations file is out of date (fix it, or rewrite it from a run with --update)"
    fi
fi

# --- run ----------------------------------------------------------------------
pd_args=(--send_omit_free)
# tun0 as packetdrill's local mode sets it up (netdev.c: the local address
# with its prefix, and a route to the remote address through the gateway;
# run_all.py's addresses), for the scripts' `ip route` lines to act on.
case "$ipv" in
    ipv6) tun_ip=(-6 fd3d:0a0b:17d6::1/16 nodad) tun_route=(-6 fd3d:fa7b:d17d::1 via fd3d:0a0b:17d6:8888::1) ;;
    *) tun_ip=(-4 192.168.0.1/16) tun_route=(-4 192.0.2.1 via 192.168.0.1) ;;
esac
case "$ipv" in
    # run_all.py's CmdTestIPv4, CmdTestIPv6 and CmdTestIPv4Mappedv6, verbatim
    ipv4) pd_args+=(--ip_version=ipv4 --local_ip=192.168.0.1 --gateway_ip=192.168.0.1
        --netmask_ip=255.255.0.0 --remote_ip=192.0.2.1 -D TFO_COOKIE=3021b9d889017eeb
        -D CODE=host_unreachable -D CMSG_LEVEL_IP=SOL_IP -D CMSG_TYPE_RECVERR=IP_RECVERR) ;;
    ipv6) pd_args+=(--ip_version=ipv6 --mtu=1520 --local_ip=fd3d:0a0b:17d6::1
        --gateway_ip=fd3d:0a0b:17d6:8888::1 --remote_ip=fd3d:fa7b:d17d::1
        -D TFO_COOKIE=c1d1e9742a47a9bc -D CMSG_LEVEL_IP=SOL_IPV6 -D CMSG_TYPE_RECVERR=IPV6_RECVERR)
        # The adapter's link: the local address with a prefix that holds
        # the remote one (on-link, resolved by Neighbor Discovery), and
        # the MTU of run_all.py's tun device.
        [ "$mode" = kernel ] || pd_args+=("--so_flags=ip6=fd3d:a0b:17d6::1/16,mtu=1520") ;;
    ipv4-mapped-ipv6) pd_args+=(--ip_version=ipv4-mapped-ipv6 --local_ip=192.168.0.1
        --gateway_ip=192.168.0.1 --netmask_ip=255.255.0.0 --remote_ip=192.0.2.1
        -D TFO_COOKIE=3021b9d889017eeb -D CODE=host_unreachable
        -D CMSG_LEVEL_IP=SOL_IPV6 -D CMSG_TYPE_RECVERR=IPV6_RECVERR) ;;
esac
[ -z "$lib" ] || pd_args+=("--so_filename=$lib")
# ustack mode also preloads the adapter: packetdrill reads TCP_INFO for its
# `%{ python }%` blocks and closes every socket at the end with libc's
# getsockopt/close on the descriptor, outside the --so_filename interface;
# the preloaded adapter answers those for its own descriptors.
pd_env=()
[ -z "$lib" ] || pd_env=("LD_PRELOAD=$lib")
# ustack mode also puts a `tc` first in the scripts' PATH: the real one,
# except that a root `fq` qdisc for tun0, which this kernel cannot hold (no
# sch_fq), is recorded in a file the adapter reads (qdisc.rs), so that the
# engine paces every flow as Linux does behind fq; any other root qdisc the
# real tc installs on tun0 (or its deletion) clears the record. On a kernel
# with sch_fq the real tc succeeds and the adapter sees fq over rtnetlink.
if [ "$mode" = ustack ]; then
    real_tc=$(command -v tc)
    mkdir -p "$tmp/bin" "$tmp/qdisc"
    cat >"$tmp/bin/tc" <<EOF_TC
#!/usr/bin/env bash
# packetdrill.sh's tc (see there).
rec=\${USTACK_PACKETDRILL_QDISC:-}
root_of_tun0() { [[ " \$* " =~ ^\ (-[^\ ]+\ )*qdisc\ (add|replace|change|del|delete)\ dev\ tun0\ root[\ ] ]]; }
fq_for_tun0() { [[ " \$* " =~ ^\ (-[^\ ]+\ )*qdisc\ (add|replace)\ dev\ tun0\ root\ fq[\ ] ]]; }
rc=0
out=\$("$real_tc" "\$@" 2>&1) || rc=\$?
if [ "\$rc" = 0 ]; then
    [ -z "\$out" ] || printf '%s\\n' "\$out"
    if [ -n "\$rec" ] && root_of_tun0 "\$@"; then rm -f "\$rec"; fi
    exit 0
fi
if [ -n "\$rec" ] && fq_for_tun0 "\$@" && [[ "\$out" == *"qdisc kind is unknown"* ]]; then
    echo "packetdrill.sh's tc: this kernel has no sch_fq: the adapter models fq on tun0" >&2
    echo fq >"\$rec"
    exit 0
fi
[ -z "\$out" ] || printf '%s\\n' "\$out" >&2
exit "\$rc"
EOF_TC
    chmod +x "$tmp/bin/tc"
fi
if [ -n "${PACKETDRILL_ARGS:-}" ]; then
    read -r -a extra <<<"$PACKETDRILL_ARGS"
    pd_args+=("${extra[@]}")
fi

secs_since() { # start (microseconds) -> "1.2"
    local us=$((${EPOCHREALTIME/./} - $1))
    printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000))
}

first_error() { # log script-basename
    # packetdrill's own first error ("x.pkt:12: error handling packet: ..."),
    # with the detail that explains it: the Python assertion, or the output of
    # a failing shell command; otherwise the first line that looks like an error.
    local l pre detail
    l=$(grep -m1 -F "$2:" "$1" || true)
    if [ -n "$l" ]; then
        case "$l" in
            *"error in Python code"*) detail=$(grep -m1 -E '^[A-Za-z]+(Error|Exception)' "$1" || true) ;;
            *"error executing"*)
                pre=$(grep -m1 -n -F "$2:" "$1" | cut -d: -f1)
                detail=$(head -n $((pre - 1)) "$1" | grep -v -e '^[[:space:]]*$' -e 'tcp_congestion_control": Operation not permitted' | tail -n1 || true) ;;
            *) detail= ;;
        esac
        [ -z "$detail" ] || l="$l [$detail]"
    else
        l=$(grep -m1 -iE 'error|assert|fatal|fail|unable|cannot|not permitted|timed out' "$1" || true)
        [ -n "$l" ] || l=$(grep -m1 -v '^[[:space:]]*$' "$1" || true)
    fi
    printf '%s' "${l:0:300}"
}

say() { # text: print whole, not interleaved with the other workers
    local f="$tmp/msg/$BASHPID"
    printf '%s\n' "$1" >"$f"
    flock "$tmp/print.lock" cat "$f"
    rm -f "$f"
}

run_one() { # index
    local i=$1 path=${s_path[$1]} kind=${s_kind[$1]} name=${s_name[$1]}
    local ns="$ns_prefix$1" log="$tmp/log/$1" start rc=0 status secs err exp line out=0
    start=${EPOCHREALTIME/./}
    if ! {
        ip netns add "$ns" &&
            ip -n "$ns" link set lo up &&
            if [ "$mode" = ustack ]; then
                # Upstream's common/defaults.sh ends with `tc qdisc add dev tun0`;
                # with --so_filename packetdrill opens no TUN device, so give the
                # namespace an idle one of that name (a persistent TUN device
                # nobody reads: the kernel here has no dummy/CONFIG_DUMMY driver),
                # addressed and routed as packetdrill's own tun0 (above): the
                # adapter reads the route to the remote address (route.rs).
                ip -n "$ns" tuntap add dev tun0 mode tun && ip -n "$ns" link set tun0 up &&
                    ip -n "$ns" "${tun_ip[0]}" addr add "${tun_ip[@]:1}" dev tun0 &&
                    ip -n "$ns" "${tun_route[0]}" route add "${tun_route[1]}" dev tun0 "${tun_route[@]:2}"
            fi
    } >"$log" 2>&1; then
        ip netns del "$ns" 2>/dev/null || true
        printf 'ERROR\t0\t%s\n' "creating namespace $ns failed: $(head -c 200 "$log")" >"$tmp/res/$i"
        say "ERROR $name: creating namespace $ns failed: $(cat "$log")"
        return 0
    fi
    # Each script gets a /tmp of its own: in a private mount namespace, an
    # overlay whose lower layer is the real /tmp (every path the run needs
    # stays visible, also for a clone that lives under /tmp) and whose
    # upper layer is a tmpfs that goes when packetdrill exits. Upstream
    # scripts that change sysctls write /tmp/sysctl_restore_${PACKETDRILL_PID}.sh
    # (common/set_sysctls.py) and never remove it, and our sendfile script
    # writes its file there: nothing is left behind, and concurrent runs
    # cannot see each other's files. (A kernel without overlayfs runs the
    # script on the real /tmp.)
    mkdir -p "$tmp/ovl/$i"
    (cd "$(dirname "$path")" &&
        exec timeout -k 5 "$timeout_s" ip netns exec "$ns" \
            unshare --mount --propagation private \
            sh -c 'd=$1; shift
                   { mount -t tmpfs -o size=64m packetdrill-tmp "$d" && mkdir "$d/u" "$d/w" &&
                     mount -t overlay -o "lowerdir=/tmp,upperdir=$d/u,workdir=$d/w" packetdrill-tmp /tmp
                   } 2>/dev/null
                   exec "$@"' packetdrill-tmp "$tmp/ovl/$i" \
            env "${pd_env[@]}" \
            ${lib:+"PATH=$tmp/bin:$PATH" "USTACK_PACKETDRILL_QDISC=$tmp/qdisc/$i"} \
            "$pd_bin" "${pd_args[@]}" "$(basename "$path")") \
        >>"$log" 2>&1 </dev/null &
    echo $! >"$tmp/pid/$i"
    wait $! || rc=$?
    rm -f "$tmp/pid/$i"
    ip netns del "$ns" 2>>"$log" || true
    secs=$(secs_since "$start")
    if [ "$rc" = 0 ]; then
        status=PASS err=
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status=FAIL err="timed out after ${timeout_s}s"
    else
        status=FAIL err=$(first_error "$log" "$(basename "$path")")
        [ -n "$err" ] || err="exit status $rc"
    fi
    printf '%s\t%s\t%s\n' "$status" "$secs" "$err" >"$tmp/res/$i"

    exp=
    if [ "$mode" = ustack ] && [ "$kind" = upstream ]; then exp=${expect[$name]:-}; fi
    case "$status:${exp%% *}" in
        PASS:FAIL)
            [ ${#exp} -le 70 ] || exp="${exp:0:67}..."
            line="PASS $name (${secs}s) -- NOW PASSES but is listed '$exp': mark it PASS in ${expect_file#"$repo"/}" ;;
        PASS:*) line="PASS $name (${secs}s)" ;;
        FAIL:FAIL) line="FAIL $name (${secs}s, expected): $err" ;;
        FAIL:PASS) line="FAIL $name (${secs}s) *** REGRESSION: listed PASS ***: $err"; out=1 ;;
        FAIL:*) line="FAIL $name (${secs}s): $err"; [ "$mode" = kernel ] || [ "$update" = 1 ] || out=1 ;;
    esac
    if [ "$status" = FAIL ] && [ "$verbose" = 1 ]; then out=1; fi
    if [ "$out" = 1 ]; then
        line+=$'\n'"---- packetdrill output ($name) ----"$'\n'"$(cat "$log")"$'\n'"---- end ($name) ----"
    fi
    say "$line"
}

echo "packetdrill.sh: $mode mode, $ipv${cc:+ (congestion control $cc on every socket)}, ${#s_path[@]} scripts, -j $jobs, timeout ${timeout_s}s" >&2
t0=${EPOCHREALTIME/./}
running=0
for i in "${!s_path[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    run_one "$i" &
    running=$((running + 1))
done
wait
elapsed=$(secs_since "$t0")

# --- results --------------------------------------------------------------------
up_pass=0 up_fixed=0 up_xfail=0 up_regress=0 up_fail=0 own_pass=0 own_fail=0 errors=0
fixed=() regressed=() failed=() passing=()
declare -A result=()
for i in "${!s_path[@]}"; do
    name=${s_name[$i]} kind=${s_kind[$i]}
    [ -f "$tmp/res/$i" ] || die "no result for $name (a worker died?)"
    IFS=$'\t' read -r status _ _ <"$tmp/res/$i"
    result[$name]=$status
    [ "$status" != PASS ] || passing+=("$name")
    if [ "$status" = ERROR ]; then errors=$((errors + 1)); failed+=("$name"); continue; fi
    if [ "$kind" != upstream ]; then
        if [ "$status" = PASS ]; then own_pass=$((own_pass + 1)); else own_fail=$((own_fail + 1)); failed+=("$name"); fi
        continue
    fi
    exp=${expect[$name]:-}
    if [ "$mode" = ustack ] && [ -z "$exp" ]; then # --update: not listed yet
        if [ "$status" = PASS ]; then up_pass=$((up_pass + 1)); else up_xfail=$((up_xfail + 1)); fi
    elif [ "$mode" = kernel ]; then
        if [ "$status" = PASS ]; then up_pass=$((up_pass + 1)); else up_fail=$((up_fail + 1)); failed+=("$name"); fi
    elif [ "$status" = PASS ]; then
        up_pass=$((up_pass + 1))
        [ "${exp%% *}" = PASS ] || { up_fixed=$((up_fixed + 1)); fixed+=("$name"); }
    elif [ "${exp%% *}" = FAIL ]; then
        up_xfail=$((up_xfail + 1))
    else
        up_regress=$((up_regress + 1)) regressed+=("$name")
    fi
done
n_up=$((up_pass + up_xfail + up_regress + up_fail))
n_own=$((own_pass + own_fail))

if [ "$update" = 1 ]; then
    new="$expect_file.new.$$"
    {
        declare -A written=()
        if [ -f "$expect_file" ]; then
            while IFS= read -r line || [ -n "$line" ]; do
                if [[ "$line" =~ ^[[:space:]]*(#|$) ]]; then printf '%s\n' "$line"; continue; fi
                read -r p st _ <<<"$line"
                if [ ! -f "$tcp_dir/$p" ] || [[ "$p" == *"$skip_suffix" ]] || [ -n "${written[$p]:-}" ]; then
                    echo "update: dropping '$line'" >&2
                    continue
                fi
                written[$p]=1
                case "${result[$p]:-}:$st" in
                    PASS:*) [ "$st" = PASS ] || echo "update: $p now PASS" >&2; printf '%s PASS\n' "$p" ;;
                    FAIL:PASS | ERROR:PASS) echo "update: $p now FAIL TODO" >&2; printf '%s FAIL TODO\n' "$p" ;;
                    *) printf '%s\n' "$line" ;;
                esac
            done <"$expect_file"
        fi
        for p in "${upstream_all[@]}"; do
            [ -z "${written[$p]:-}" ] || continue
            if [ "${result[$p]:-}" = PASS ]; then st=PASS; else st="FAIL TODO"; fi
            echo "update: new entry $p $st" >&2
            printf '%s %s\n' "$p" "$st"
        done
    } >"$new"
    mv "$new" "$expect_file"
    echo "packetdrill.sh: rewrote $expect_file" >&2
    # The file now says what happened; only our own scripts can still fail the run.
    fixed=() regressed=() up_fixed=0 up_regress=0
fi

echo
if [ ${#regressed[@]} -gt 0 ]; then
    echo "REGRESSIONS (listed PASS in ${expect_file#"$repo"/}, now failing; output above):"
    printf '  %s\n' "${regressed[@]}"
fi
own_failed=()
for n in "${failed[@]}"; do [[ "$n" == tests/* || "$n" == /* ]] && own_failed+=("$n"); done
if [ "$mode" = ustack ] && [ ${#own_failed[@]} -gt 0 ]; then
    echo "FAILED (our own scripts must pass; output above):"
    printf '  %s\n' "${own_failed[@]}"
fi
if [ ${#fixed[@]} -gt 0 ]; then
    echo "STALE EXPECTATIONS: these scripts now pass; mark them PASS in ${expect_file#"$repo"/} (or run with --update):"
    printf '  %s\n' "${fixed[@]}"
fi
if [ "$mode" = ustack ]; then
    [ "$n_up" = 0 ] || echo "upstream: $n_up run, $up_pass passed ($up_fixed of them listed FAIL), $up_xfail expected failures, $((up_regress + up_fail)) regressions"
else
    [ "$n_up" = 0 ] || echo "upstream on Linux $(uname -r): $n_up run, $up_pass passed, $up_fail failed"
fi
[ "$n_own" = 0 ] || echo "own scripts: $n_own run, $own_pass passed, $own_fail failed"
[ "$errors" = 0 ] || echo "runner errors: $errors"
echo "elapsed: ${elapsed}s (-j $jobs)"
if [ "$mode" = kernel ]; then
    echo "$((up_pass + own_pass)) passed, $((up_fail + own_fail + errors)) failed"
else
    # Expected failures count as neither passed nor failed.
    echo "$((up_pass + own_pass)) passed, $((up_regress + up_fail + own_fail + errors)) failed"
fi

if [ -n "$record" ]; then
    if [ ${#passing[@]} -gt 0 ]; then printf '%s\n' "${passing[@]}"; fi | LC_ALL=C sort >"$record"
    echo "packetdrill.sh: wrote the ${#passing[@]} passing scripts to $record" >&2
fi

[ "$errors" = 0 ] || exit 2
[ "$mode" = ustack ] || exit 0
[ $((up_regress + up_fail + own_fail)) = 0 ] && [ ${#fixed[@]} = 0 ]
