#!/usr/bin/env bash
# Import of new series against import of known series, as whole `tierdb import` commands
# (issue #55, item 3), in pairs timed one after the other:
#   known: 1,000 series x 6,000 samples at 10 s (6 M Graphite lines, ending a minute ago)
#          into a data directory that already holds them (imported once, untimed, first);
#   new:   100,000 series x 60 samples at 1m (6 M lines, the hour ending a minute ago) into a
#          fresh data directory: every series is registered and every file is created.
# Both files have 6 M lines, so the ratio of the rates, new / known, is the known command's
# time over the new one's; it is printed per pair. Each timed command is the whole process:
# open, import, and the close that makes the samples durable.
#
# Usage: benches/import_new_series.sh [BIN ...]     (default: target/release/tierdb)
#   PAIRS=N (default 3): pairs per binary. With several binaries, each pair runs them in
#   turn (A B A B), so a comparison of builds holds while the machine's speed drifts.
#
# Disk: the two input files (about 420 MB), one known directory per binary (about 30 MB),
# and one new directory per pair, about 700 MB while it is measured. The script prints what
# it keeps. A new directory's files are truncated to nothing once measured (their inodes
# stay until the end, when the whole work directory is removed): on ext4 without a journal
# the inode allocator steps over every inode deleted in the last 1-5 minutes, so removing
# a run's 1,600 files would make the next run's file creation cost far more CPU
# (`recently_deleted` in a profile) and the pairs would measure the benchmark's own
# deletions.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 0 ]; then
    set -- "${TIERDB_BIN:-$ROOT/target/release/tierdb}"
fi
BINS=("$@")
PAIRS=${PAIRS:-3}
for bin in "${BINS[@]}"; do
    [ -x "$bin" ] || { echo "no binary at $bin (cargo build --release)"; exit 2; }
done
WORK=$(mktemp -d "${TIERDB_BENCH_DIR:-/tmp}/import-new.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

python3 - "$WORK" <<'EOF'
import sys, time
work = sys.argv[1]
now = int(time.time()) // 60 * 60
with open(f"{work}/known.txt", "w") as out:
    end = now - 60
    for k in range(6000):
        ts = end - (5999 - k) * 10
        out.write("".join(f"known.host{i // 10:03d}.m{i % 10} {(i + k) % 100}.25 {ts}\n" for i in range(1000)))
with open(f"{work}/new.txt", "w") as out:
    end = now - 60
    for k in range(60):
        ts = end - (59 - k) * 60
        out.write("".join(f"new.host{i // 10:05d}.m{i % 10} {(i + k) % 100}.25 {ts}\n" for i in range(100000)))
EOF
lines_known=$(wc -l < "$WORK/known.txt")
lines_new=$(wc -l < "$WORK/new.txt")
echo "work dir $WORK; known $lines_known lines, new $lines_new lines; $(date -u +%H:%M) UTC"

# Runs `tierdb import` of $2 into $3 with binary $1; prints "wall user sys" in seconds.
timed() {
    sync
    /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$1" import --data-dir "$3" "$2" > "$WORK/out" 2>&1 \
        || { cat "$WORK/out"; exit 1; }
    cat "$WORK/time"
}

for b in "${!BINS[@]}"; do
    "${BINS[$b]}" import --data-dir "$WORK/known.$b" "$WORK/known.txt" > /dev/null
done
sync
for pair in $(seq "$PAIRS"); do
    for b in "${!BINS[@]}"; do
        bin=${BINS[$b]}
        read -r known_wall known_user known_sys < <(timed "$bin" "$WORK/known.txt" "$WORK/known.$b")
        new=$WORK/new.$b.$pair
        read -r new_wall new_user new_sys < <(timed "$bin" "$WORK/new.txt" "$new")
        kept=$(du -sm "$new" | cut -f1)
        find "$new" -type f -exec truncate -s 0 {} +
        python3 - "$pair" "$bin" "$known_wall" "$known_user" "$known_sys" "$new_wall" "$new_user" "$new_sys" "$lines_known" "$lines_new" "$kept" <<'EOF'
import sys
pair, bin = sys.argv[1], sys.argv[2]
kw, ku, ks, nw, nu, ns = map(float, sys.argv[3:9])
lk, ln, kept = int(sys.argv[9]), int(sys.argv[10]), sys.argv[11]
known, new = lk / kw / 1e6, ln / nw / 1e6
print(f"pair {pair} {bin}: known {kw:.2f} s ({known:.2f} M lines/s, cpu {ku + ks:.2f} s), "
      f"new {nw:.2f} s ({new:.2f} M lines/s, cpu {nu + ns:.2f} s): ratio {new / known:.2f}; "
      f"new directory {kept} MB (truncated now)")
EOF
    done
done
echo "kept at the end: $(du -sm "$WORK" | cut -f1) MB in $WORK (removed now)"
