#!/usr/bin/env bash
# `tierdb import --format whisper` of a whisper tree of carbon's common shape (issue #29):
# FILES files (default 10,000) of 1m:7d,5m:30d,1h:1y, every archive full (27,480 points,
# 330 KB each: 3.3 GB and 275 M points for 10,000), into the tiers
# `tierdb tiers --from-storage-schemas` makes from that schema. Reports the import's wall
# time (the close that makes the buckets durable included), its rate, and the data
# directory's size.
#
# The tree is made fast: python3-whisper (Debian's, /usr/bin/python3) writes one file with
# whisper.update_many, and the generator copies its bytes FILES times into 100 files per
# directory, each copy's first point of every archive set to the file's number, so that no
# two series are equal. No python per point per file: what a file holds does not change
# what importing it costs.
#
# Usage: benches/whisper_import.sh [FILES]   (needs python3-whisper: scripts/install-test-deps.sh)
# Needs about 3.5 GB per 10,000 files for the tree and 11 GB for the data directory under
# TIERDB_BENCH_DIR (default /tmp).
set -euo pipefail

FILES=${1:-10000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TIERDB_BIN:-$ROOT/target/release/tierdb}
[ -x "$BIN" ] || cargo build --release --bin tierdb --manifest-path "$ROOT/Cargo.toml"
WORK=$(mktemp -d "${TIERDB_BENCH_DIR:-/tmp}/whisper-import.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
TREE=$WORK/whisper

start=$(date +%s.%N)
/usr/bin/python3 - "$TREE" "$FILES" <<'EOF'
import os, struct, sys, time, whisper
tree, files = sys.argv[1], int(sys.argv[2])
os.makedirs(tree, exist_ok=True)
now = int(time.time())
template = os.path.join(tree, "template.wsp.tmp")
whisper.create(template, [(60, 7 * 1440), (300, 30 * 288), (3600, 365 * 24)],
               xFilesFactor=0.5, aggregationMethod="average")
def points(step, newest, oldest):
    t = now - now % step - newest
    out = []
    while t > now - oldest:
        out.append((t, (t // step) % 1000 / 7.0))
        t -= step
    return out
whisper.update_many(template, points(3600, 30 * 86400 + 3600, 365 * 86400 - 3600), now=now)
whisper.update_many(template, points(300, 7 * 86400 + 300, 30 * 86400 - 3600), now=now)
whisper.update_many(template, points(60, 0, 7 * 86400 - 300), now=now)
data = open(template, "rb").read()
os.remove(template)
header = struct.unpack("!2LfL", data[:16])
archives = [struct.unpack("!3L", data[16 + 12 * i:28 + 12 * i]) for i in range(header[3])]
copy = bytearray(data)
for k in range(files):
    # Each copy's first point of every archive holds the file's number: no two series equal.
    for offset, _, _ in archives:
        copy[offset + 4:offset + 12] = struct.pack("!d", float(k))
    d = os.path.join(tree, f"servers/host{k // 100:04d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"metric{k % 100:02d}.wsp"), "wb") as f:
        f.write(copy)
EOF
end=$(date +%s.%N)
echo "tree: $FILES files, $(du -sh "$TREE" | cut -f1), made in $(python3 -c "print(f'{$end - $start:.1f}')") s"

SCHEMAS=$WORK/storage-schemas.conf
printf '[default]\npattern = .*\nretentions = 1m:7d,5m:30d,1h:1y\n' > "$SCHEMAS"
"$BIN" tiers --from-storage-schemas "$SCHEMAS" > "$WORK/tiers.toml"
sync
if [ "$(id -u)" = 0 ]; then
    echo 3 > /proc/sys/vm/drop_caches
    echo "  (page cache dropped: the import reads the tree from disk)"
fi

start=$(date +%s.%N)
"$BIN" import --format whisper "$TREE" --data-dir "$WORK/data" --tiers "$WORK/tiers.toml" > "$WORK/import.out"
end=$(date +%s.%N)
python3 -c "import sys; n, s, e = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]); print(f'import: {n} files in {e - s:.1f} s: {n / (e - s):.0f} files/s')" "$FILES" "$start" "$end"
sed 's/^/  /' "$WORK/import.out"
echo "data directory: $(du -sh "$WORK/data" | cut -f1) allocated"

start=$(date +%s.%N)
"$BIN" import --format whisper "$TREE" --data-dir "$WORK/data" > "$WORK/again.out"
end=$(date +%s.%N)
echo "second import of the same tree: $(python3 -c "print(f'{$end - $start:.1f}')") s"
sed 's/^/  /' "$WORK/again.out" | head -2
