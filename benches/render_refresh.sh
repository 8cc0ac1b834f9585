#!/usr/bin/env bash
# A Grafana dashboard refresh over HTTP, as a user's panel asks it: `tierdb serve` holding
# 1,000 series (host000-249 × cpu0-3 .load) of 24 h at 1 m (1.44 M samples over Graphite
# TCP), then `GET /render?target=sumSeries(host*.cpu*.load)&from=-24h&until=now` asked
# again and again on one keep-alive connection, the window sliding with the clock as
# Grafana's does. Prints the median and p90 of the first answer (nothing cached), of
# REQUESTS repeats, and of REQUESTS repeats while a writer adds a sample to every series
# each second (each refresh then reads the still-filling minute again). VictoriaMetrics
# answered the same panel in 0.53 ms from its cache on this machine (../shared/perf-notes.md).
#
#   cargo build --release && benches/render_refresh.sh
#
# Environment: REQUESTS (default 200), TIERDB (default target/release/tierdb). Everything
# lives under a temporary directory in /tmp, removed at the end; the server is stopped by pid.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-200}
TIERDB=$(realpath "${TIERDB:-target/release/tierdb}")
WORK=$(mktemp -d /tmp/tierdb-refresh.XXXXXX)
PID=""
cleanup() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

"$TIERDB" serve --data-dir "$WORK/data" --http 127.0.0.1:0 --graphite 127.0.0.1:0 \
    >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 1 100); do
    grep -q '^tierdb: ready' "$WORK/out" 2>/dev/null && break
    sleep 0.1
done
HTTP=$(sed -n 's/^tierdb: http listening on //p' "$WORK/out")
GRAPHITE=$(sed -n 's/^tierdb: graphite tcp listening on //p' "$WORK/out")
[ -n "$HTTP" ] && [ -n "$GRAPHITE" ] || { cat "$WORK/err" >&2; exit 1; }

python3 - "$HTTP" "$GRAPHITE" "$REQUESTS" <<'EOF'
import http.client, math, random, socket, statistics, sys, threading, time

http_addr, graphite_addr, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
host, port = http_addr.rsplit(":", 1)
g_host, g_port = graphite_addr.rsplit(":", 1)
names = [f"host{h:03d}.cpu{c}.load" for h in range(250) for c in range(4)]
now = int(time.time())
start = now - now % 60 - 86400 + 60
rng = random.Random(7)

def send(lines):
    with socket.create_connection((g_host, int(g_port))) as s:
        s.sendall("".join(lines).encode())

for minute in range(0, 1440, 60):
    send(f"{n} {rng.uniform(0, 4):.3f} {start + (minute + m) * 60}\n"
         for m in range(60) for n in names)
conn = http.client.HTTPConnection(host, int(port))

def get(path):
    t = time.perf_counter()
    conn.request("GET", path)
    body = conn.getresponse().read()
    return time.perf_counter() - t, body

def accepted():
    _, body = get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith("tierdb_samples_accepted_total "):
            return int(float(line.split()[1]))
    return 0

deadline = time.time() + 120
while accepted() < 1440 * len(names):
    if time.time() > deadline:
        sys.exit("the samples did not all land")
    time.sleep(0.2)

panel = "/render?target=sumSeries(host*.cpu*.load)&from=-24h&until=now&format=json"
def report(what, times):
    times = sorted(t * 1000 for t in times)
    p90 = times[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)]
    print(f"{what}: median {statistics.median(times):.3f} ms, p90 {p90:.3f} ms ({len(times)} requests)")

first, body = get(panel)
assert body.startswith(b"[{"), body[:200]
report("first render, nothing cached", [first])
report("the same panel again", [get(panel)[0] for _ in range(requests)])

stop = threading.Event()
def writer():
    while not stop.is_set():
        send(f"{n} 1 {int(time.time())}\n" for n in names)
        stop.wait(1.0)
thread = threading.Thread(target=writer)
thread.start()
try:
    times = []
    for _ in range(requests):
        times.append(get(panel)[0])
        time.sleep(0.01)
    report("the same panel while every series gets a sample a second", times)
finally:
    stop.set()
    thread.join()
EOF
