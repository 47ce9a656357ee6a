#!/usr/bin/env bash
# Exact write-type syscalls per published message for every client of
# publish_cmp, counted by strace on the client process alone (the server
# runs in a separate, untraced `publish_cmp --serve` process).
#
#   benches/peers/publish_cmp_strace.sh [redis|valkey] [messages]
#
# Needs strace and a release build of publish_cmp:
#   cargo build --release --manifest-path benches/peers/Cargo.toml --bin publish_cmp
# Under strace every client runs several times slower, which changes how
# many messages share a write: read these counts next to the untraced
# `syscw` column of publish_cmp, not instead of it.
set -euo pipefail

kind=${1:-redis}
messages=${2:-100000}
bin=${CARGO_TARGET_DIR:-target}/release/publish_cmp
[[ -x $bin ]] || { echo "build publish_cmp first ($bin missing)" >&2; exit 2; }
command -v strace >/dev/null || { echo "strace not found" >&2; exit 2; }

tmp=$(mktemp -d)
# The server lives until its standard input closes.
coproc SERVER { "$bin" --serve "$kind"; }
server_in=${SERVER[1]}
trap 'exec {server_in}>&- 2>/dev/null || true; wait || true; rm -rf "$tmp"' EXIT
read -r -t 60 addr <&"${SERVER[0]}" || { echo "server did not start" >&2; exit 1; }

printf '| client | submitters | messages | socket writes | of which start with PUBLISH | msgs / socket write | eventfd wakes / msg |\n'
printf '|---|---|---:|---:|---:|---:|---:|\n'
for client in c shardsub redis fred; do
  for conc in 1 64; do
    out=$tmp/$client-$conc
    timeout 300 strace -f -qq -o "$out" -e trace=write,writev,sendto,sendmsg \
      "$bin" --addr "$addr" --only "$client" --conc "$conc" --messages "$messages" \
      --reps 1 --warmup 0 >"$out.stdout"
    # Wakes: 8-byte writes of the value 1 (eventfd); the rest are socket writes
    # (no Redis command is 8 bytes long).
    wakes=$(grep -cE '^[0-9]+ +write\([0-9]+, "\\1\\0\\0\\0\\0\\0\\0\\0", 8\)' "$out" || true)
    all=$(grep -cE '^[0-9]+ +(write|writev|sendto|sendmsg)\(' "$out" || true)
    # Lines printed by publish_cmp itself (stdout is a file, one write per line at most).
    own=$(wc -l <"$out.stdout")
    socket=$((all - wakes - own))
    # Socket writes whose first bytes are a PUBLISH (the rest: handshakes,
    # INFO snapshots, and continuations of short writes).
    publish=$(grep -cE '^[0-9]+ +(write|writev|sendto|sendmsg)\(.*PUBLISH' "$out" || true)
    awk -v c="$client" -v k="$conc" -v n="$messages" -v s="$socket" -v p="$publish" -v w="$wakes" 'BEGIN {
      printf "| %s | %s | %d | %d | %d | %.1f | %.3f |\n", c, k, n, s, p, (s > 0 ? n / s : 0), w / n }'
  done
done
