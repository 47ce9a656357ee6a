#!/usr/bin/env bash
# Instructions per frame for each parser on one stream, under callgrind: a
# count that does not depend on machine load. Each parser runs the stream
# once and three times; the difference, divided by two passes' frames, drops
# the setup (building the streams).
#
#   benches/peers/callgrind.sh [stream] [mode]
#   (defaults: push_10k_smessage_256B whole; modes: whole, chunked_1460)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stream="${1:-push_10k_smessage_256B}"
mode="${2:-whole}"
frames=$(case "$stream" in push_*) echo 10000 ;; *) echo 1 ;; esac)
target="${CARGO_TARGET_DIR:-$here/target}"
cargo build --quiet --release --manifest-path "$here/Cargo.toml" --bin once
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "| parser | instructions/frame ($stream, $mode) |"
echo "|---|---:|"
for parser in resp resp-rs redis-protocol_range redis-protocol_bytes redis; do
  count() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
      "$target/release/once" "$parser" "$stream" "$mode" "$1" 2>&1 >/dev/null |
      sed -n 's/.*refs: *//p' | tr -d ,
  }
  one=$(count 1)
  three=$(count 3)
  echo "| $parser | $(( (three - one) / (2 * frames) )) |"
done
