#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit + simulation + interop tests.
# Run as root: the interop tests create network namespaces and TAP devices
# (they fail, never skip, without the privilege).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
export PATH="$HOME/.cargo/bin:$PATH"

if [ "$(id -u)" -ne 0 ]; then
    echo "test.sh: the interop tests need root (network namespaces, TAP devices); re-run with sudo" >&2
    exit 1
fi

step() { printf '\n== %s\n' "$*" >&2; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo test (unit, simulation, interop)"
cargo test --workspace --no-fail-fast

step "packetdrill (upstream scripts against ustack with expectations, and ours)"
./scripts/packetdrill.sh

step "packetdrill over IPv6 (upstream scripts with expectations-ipv6.txt, and ours)"
./scripts/packetdrill.sh --ip-version ipv6
