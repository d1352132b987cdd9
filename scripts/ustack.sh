#!/usr/bin/env bash
# Build ustack (release) after installing what it needs, then run it with the
# given arguments; with no arguments, `ustack serve` with its defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --quiet -p ustack
if [ $# -eq 0 ]; then set -- serve; fi
exec ./target/release/ustack "$@"
