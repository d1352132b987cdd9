#!/usr/bin/env bash
# Install what ustack's commands and tests need on a fresh Debian/Ubuntu machine:
# the Rust toolchain (if cargo is missing) and the kernel-side tools used by the
# interop tests and the benchmarks. Idempotent; quiet when everything is there.
set -euo pipefail

need_pkgs=()
want() { command -v "$1" >/dev/null 2>&1 || need_pkgs+=("$2"); }
want ip iproute2
want tc iproute2
want ping iputils-ping
want curl curl
want socat socat
want iperf3 iperf3
want tcpdump tcpdump
want cc gcc
want bison bison
want flex flex
want make make
want ethtool ethtool
want python3 python3
want taskset util-linux
want setpriv util-linux
want nsenter util-linux
want unshare util-linux
want script bsdutils
want pasta passt
want slirp4netns slirp4netns
want busybox busybox
want dhcpcd dhcpcd-base

if [ ${#need_pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "deps: missing ${need_pkgs[*]}; run as root (or with sudo) to install them" >&2
        exit 1
    fi
    echo "deps: installing ${need_pkgs[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "deps: installing the Rust toolchain with rustup" >&2
        if ! command -v rustup >/dev/null 2>&1; then
            export DEBIAN_FRONTEND=noninteractive
            apt-get install -y -qq rustup >/dev/null 2>&1 || apt-get install -y -qq cargo rustc >/dev/null
        fi
        command -v rustup >/dev/null 2>&1 && rustup default stable >/dev/null
    fi
fi
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt >/dev/null 2>&1 || true
[ -e /dev/net/tun ] || { mkdir -p /dev/net && mknod /dev/net/tun c 10 200 && chmod 0666 /dev/net/tun; } || true
