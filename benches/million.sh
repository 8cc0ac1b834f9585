#!/usr/bin/env bash
# One node at a million series, scripted with the release binary (issue #13, item 3):
#   1. `tierdb import` of SERIES series x SAMPLES samples (Graphite plaintext, 10 s apart,
#      ending a minute ago): lines/s;
#   2. `tierdb query` of one of them, read back;
#   3. `tierdb serve` on the directory: seconds until `tierdb: ready` (a clean restart), its
#      resident memory, and the number of memory mappings it holds (`/proc/PID/maps`), which
#      must stay far below the kernel's vm.max_map_count (65,530 by default);
#   4. the same after `kill -9` of that server while it ingests (restart after a crash),
#      with the page cache dropped first when running as root;
#   5. the bytes the directory allocates.
#
# Usage: benches/million.sh [SERIES] [SAMPLES]   (defaults 1000000 10)
# Needs about 32 GB free under TIERDB_BENCH_DIR (default /tmp) for 1M series: the current
# period's hot files of every tier (next periods are created paced, in the background).
set -euo pipefail

SERIES=${1:-1000000}
SAMPLES=${2:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TIERDB_BIN:-$ROOT/target/release/tierdb}
[ -x "$BIN" ] || cargo build --release --manifest-path "$ROOT/Cargo.toml"
WORK=$(mktemp -d "${TIERDB_BENCH_DIR:-/tmp}/million.XXXXXX")
SERVER=
cleanup() {
    if [ -n "$SERVER" ]; then kill -9 "$SERVER" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
DATA=$WORK/data

echo "series=$SERIES samples=$SAMPLES dir=$WORK"
python3 - "$SERIES" "$SAMPLES" > "$WORK/input.txt" <<'EOF'
import sys, time
series, samples = int(sys.argv[1]), int(sys.argv[2])
end = int(time.time()) // 10 * 10 - 60
out = sys.stdout
for k in range(samples):
    ts = end - (samples - 1 - k) * 10
    lines = [f"host{i // 100:05d}.metric{i % 100:02d};dc=eu {i % 97}.5 {ts}\n" for i in range(series)]
    out.write("".join(lines))
EOF
lines=$(wc -l < "$WORK/input.txt")

drop_caches() {
    if [ "$(id -u)" = 0 ]; then
        sync
        echo 3 > /proc/sys/vm/drop_caches
        echo "  (page cache dropped)"
    else
        echo "  (not root: page cache NOT dropped)"
    fi
}

start=$(date +%s.%N)
"$BIN" import --data-dir "$DATA" "$WORK/input.txt" > "$WORK/import.out"
end=$(date +%s.%N)
python3 -c "import sys; l, s, e = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]); print(f'import: {l} lines in {e - s:.1f} s: {l / (e - s) / 1e6:.2f} M lines/s')" "$lines" "$start" "$end"
tail -3 "$WORK/import.out" | sed 's/^/  /'

pick=$((SERIES * 7 / 11))
name="host$(printf %05d $((pick / 100))).metric$(printf %02d $((pick % 100)))"
"$BIN" query --data-dir "$DATA" "$name{dc=eu}" --range 10m --tier 1m 2>&1 | tail -4 | sed 's/^/  query: /'

# Starts `tierdb serve` and waits for `tierdb: ready`; sets SERVER and leaves the seconds it
# took in $WORK/secs.
serve() {
    local log=$WORK/serve.$1.log
    local t0
    t0=$(date +%s.%N)
    "$BIN" serve --data-dir "$DATA" --http 127.0.0.1:0 --graphite 127.0.0.1:0 > "$log" 2>&1 &
    SERVER=$!
    while ! grep -q "tierdb: ready" "$log"; do
        if ! kill -0 "$SERVER" 2>/dev/null; then
            echo "the server exited:"; cat "$log"; exit 1
        fi
        sleep 0.02
    done
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$(date +%s.%N)" > "$WORK/secs"
}

drop_caches
serve clean
echo "clean start: $(cat "$WORK/secs") s until ready"
echo "  mappings: $(wc -l < /proc/$SERVER/maps) (vm.max_map_count $(cat /proc/sys/vm/max_map_count))"
echo "  resident: $(awk '/VmRSS/ {print $2, $3}' /proc/$SERVER/status)"
graphite=$(grep -o 'graphite[^0-9]*127.0.0.1:[0-9]*' "$WORK/serve.clean.log" | grep -o '[0-9]*$' | head -1)
# Ingest into the server, then kill it mid-stream.
if [ -n "$graphite" ]; then
    (head -n "$SERIES" "$WORK/input.txt" | sed 's/\.5 /.25 /' > /dev/tcp/127.0.0.1/"$graphite") 2>/dev/null &
    sleep 1
fi
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null || true
SERVER=
drop_caches
serve crash
echo "restart after kill -9: $(cat "$WORK/secs") s until ready"
grep -i "repaired\|interrupted" "$WORK/serve.crash.log" | head -2 | sed 's/^/  /' || true
kill "$SERVER"
wait "$SERVER" 2>/dev/null || true
SERVER=
echo "disk: $(du -sh --apparent-size "$DATA" | cut -f1) apparent, $(du -sh "$DATA" | cut -f1) allocated"
