#!/usr/bin/env bash
# Restart time of `tierdb serve`: after `kill -9` during ingest, and after a clean stop, each
# with the page cache dropped (when run as root; otherwise it says so and the cache stays
# warm). Builds a data directory of SERIES series with `tierdb import`, serves it, sends
# Graphite lines to it, kills it with SIGKILL mid-ingest, and times the next start until
# `tierdb: ready`. Everything lives under a temporary directory in /tmp, removed at the end.
#
#   cargo build --release && benches/restart.sh [tiers.toml]
#
# Environment: SERIES (default 100000), TIERDB (default target/release/tierdb), INGEST_SECS
# (how long ingest runs before the kill, default 5). Needs the disk the tiers preallocate:
# about 28 GB at 100k series with the shipped tiers.toml (`tierdb info` prints it).
set -euo pipefail

TIERS=${1:-tiers.toml}
SERIES=${SERIES:-100000}
TIERDB=${TIERDB:-target/release/tierdb}
INGEST_SECS=${INGEST_SECS:-5}
TIERS=$(realpath "$TIERS")
TIERDB=$(realpath "$TIERDB")

WORK=$(mktemp -d /tmp/tierdb-restart.XXXXXX)
SERVER=""
SENDER=""
cleanup() {
    [ -n "$SENDER" ] && kill -9 "$SENDER" 2>/dev/null || true
    [ -n "$SERVER" ] && kill -9 "$SERVER" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

drop_caches() {
    sync
    if [ "$(id -u)" = 0 ] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
        echo "page cache dropped"
    else
        echo "NOT dropping the page cache (not root, or /proc/sys/vm/drop_caches is not writable): the start below is warm"
    fi
}

# Starts the server in the background; sets SERVER and STARTED_AT.
start_server() {
    : >"$WORK/server.out"
    : >"$WORK/server.err"
    STARTED_AT=$(date +%s.%N)
    RUST_LOG=${RUST_LOG:-tierdb=info} "$TIERDB" serve --data-dir "$WORK/data" --tiers "$TIERS" --http 127.0.0.1:0 \
        --graphite 127.0.0.1:0 --max-series 0 >"$WORK/server.out" 2>"$WORK/server.err" &
    SERVER=$!
}

# Waits for `tierdb: ready` and prints the seconds since STARTED_AT.
wait_ready() {
    while ! grep -q "tierdb: ready" "$WORK/server.out"; do
        if ! kill -0 "$SERVER" 2>/dev/null; then
            echo "the server exited:" >&2
            cat "$WORK/server.err" >&2
            exit 1
        fi
        sleep 0.02
    done
    echo "$(date +%s.%N) - $STARTED_AT" | bc
}

# The server's lines about the open: the repair's counts and where the time went.
log_lines() {
    sed 's/\x1b\[[0-9;]*m//g' "$WORK/server.err" | grep -E 'did not close|opened' | sed 's/^/  /' || true
}

echo "== $SERIES series, tiers $TIERS, data in $WORK"
now=$(date +%s)
# Ten samples per series, one minute apart, ending a minute ago.
awk -v n="$SERIES" -v now="$now" 'BEGIN {
    for (k = 10; k >= 1; k--) for (s = 0; s < n; s++)
        printf "host%05d.cpu.m%d %d %d\n", s / 10, s % 10, (s + k) % 100, now - 60 * k
}' >"$WORK/input.txt"
began=$(date +%s.%N)
"$TIERDB" import "$WORK/input.txt" --data-dir "$WORK/data" --tiers "$TIERS" >/dev/null
echo "import: $(echo "$(date +%s.%N) - $began" | bc) s; $(du -sh "$WORK/data" | cut -f1) on disk"
rm "$WORK/input.txt"

# Live lines for every series at the current time, sent in a loop while the server runs.
awk -v n="$SERIES" -v now="$now" 'BEGIN {
    for (s = 0; s < n; s++) printf "host%05d.cpu.m%d %d %d\n", s / 10, s % 10, s % 100, now
}' >"$WORK/live.txt"

drop_caches
start_server
echo "first start (clean, cold): $(wait_ready) s"
log_lines
port=$(sed -n 's/^tierdb: graphite tcp listening on .*:\([0-9]*\)$/\1/p' "$WORK/server.out")
(
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    while :; do cat "$WORK/live.txt" >&3; done
) 2>/dev/null &
SENDER=$!
sleep "$INGEST_SECS"
http=$(sed -n 's/^tierdb: http listening on \(.*\)$/\1/p' "$WORK/server.out")
accepted=$(curl -s "http://$http/metrics" | sed -n 's/^tierdb_samples_accepted_total \([0-9]*\).*/\1/p' || true)
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null || true
kill -9 "$SENDER" 2>/dev/null || true
wait "$SENDER" 2>/dev/null || true
SENDER=""
echo "killed with SIGKILL after ${INGEST_SECS}s of ingest (${accepted:-?} samples accepted by then)"

drop_caches
start_server
echo "restart after kill -9: $(wait_ready) s"
log_lines

kill -TERM "$SERVER"
wait "$SERVER" 2>/dev/null || true
drop_caches
start_server
echo "restart after a clean stop: $(wait_ready) s"
log_lines
kill -TERM "$SERVER"
wait "$SERVER" 2>/dev/null || true
SERVER=""
