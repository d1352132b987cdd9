#!/usr/bin/env bash
# Build ustack (release) after installing what it needs, then run it with the
# given arguments; with no arguments, the main job: `ustack run` (a shell in a
# sandbox whose every packet is terminated by ustack).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --quiet -p ustack
if [ $# -eq 0 ]; then set -- run; fi
exec "${CARGO_TARGET_DIR:-target}/release/ustack" "$@"
