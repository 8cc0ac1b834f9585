#!/usr/bin/env bash
# Cluster figures on one machine (informational: 2 cores shared by 3 nats-servers and 3
# tierdb nodes), each beside a single `tierdb serve` fed the same lines in the same run:
#   - ingest over Graphite TCP: SERIES series x SAMPLES samples at a 10 s cadence sent to one
#     node over CONNECTIONS connections, timed until every sample is counted (a strong
#     aggregate of the count over all series); then the same samples as Influx line protocol
#     over HTTP (bodies of INFLUX_BODY lines, default 5000), CONNECTIONS clients taking the
#     three nodes in turn;
#   - the CPU seconds (user + system, from /proc) per sample of the single node, and of all six
#     cluster processes together, from the first line sent until SETTLE seconds (default 6)
#     after every sample is counted, so that the checkpoints that make the cluster's applied
#     samples durable are in it, less what the processes spend idle over the SETTLE seconds
#     after that (a single node's pages are written back by the kernel's flusher threads,
#     which no process's CPU shows), and each process's minor page faults over the same span
#     (fresh pages of memory the kernel zeroes, and pages of files first touched);
#   - bytes per sample on the log (the stream's bytes over the samples it holds), and how
#     many messages each cluster ingest made (samples per message: what a message costs the
#     nats-servers and the owners hardly depends on its size);
#   - one fan-out read's latency: a one-series 2h@1m query, and a sum over all series, each
#     the median of QUERIES requests, against the single node, and the CPU a request took
#     of the single node, or of all six cluster processes (the log's check of what each
#     partition holds included);
#   - a node's rebuild: node2 killed, its data directory deleted, started again, timed until
#     it copied every partition it applies from the live replicas' files and caught up.
# With LIVE_SECONDS set, the script measures live traffic instead, and only that: SERIES
# series each sending one sample every 10 s at the current time (a tenth of them each
# second), over Graphite TCP to the single node and to one cluster node at once, for
# LIVE_SECONDS; the CPU per sample of each, from the first line until SETTLE seconds after
# every sample is counted, less what the same processes spend idle over as long: each
# process's idle rate is measured for 20 s before the traffic and 20 s after it, and the
# lower of the two is taken off (a node still settling in the window before, its leases and
# partitions just taken, had made the rate too high and the cluster's figure too low). The
# bulk figures above send hours of samples in seconds, so a checkpoint's undo chain meets
# each bucket many times; live traffic meets a series' current buckets only as often as the
# series sends within one chain.
# Everything lives under a temporary directory in /tmp, removed at the end; processes are
# stopped by pid.
#
#   cargo build --release && benches/cluster.sh
#
# Environment: SERIES (default 1000), SAMPLES (default 360: one hour), CONNECTIONS (default 4), SETTLE
# (default 6), LIVE_SECONDS (unset),
# QUERIES (default 200), PERF_OUT (when set, `perf record` of the six cluster processes during
# each cluster ingest, into PERF_OUT.graphite and PERF_OUT.influx, or PERF_OUT.live;
# PERF_CALL_GRAPH, default fp, is its --call-graph: dwarf,16384 unwinds through code built
# without frame pointers; perf's own cost then weighs on the cluster's figures: they are for
# the profile, not for comparison),
# INFLUX_BODY (default 5000), TIERDB (default target/release/tierdb), NATS_SERVER (default
# /usr/local/bin/nats-server, the 2.15.1 scripts/install-test-deps.sh installs).
set -euo pipefail

SERIES=${SERIES:-1000}
SAMPLES=${SAMPLES:-360}
CONNECTIONS=${CONNECTIONS:-4}
QUERIES=${QUERIES:-200}
TIERDB=$(realpath "${TIERDB:-target/release/tierdb}")
NATS_SERVER=${NATS_SERVER:-/usr/local/bin/nats-server}

WORK=$(mktemp -d /tmp/tierdb-cluster.XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Three clustered JetStream servers.
CLIENT=() ROUTE=()
for i in 0 1 2; do CLIENT+=("$(free_port)"); ROUTE+=("$(free_port)"); done
ROUTES="nats-route://127.0.0.1:${ROUTE[0]},nats-route://127.0.0.1:${ROUTE[1]},nats-route://127.0.0.1:${ROUTE[2]}"
for i in 0 1 2; do
    mkdir -p "$WORK/nats$i"
    "$NATS_SERVER" -js -sd "$WORK/nats$i" -a 127.0.0.1 -p "${CLIENT[$i]}" --cluster_name bench \
        --name "n$i" --cluster "nats://127.0.0.1:${ROUTE[$i]}" --routes "$ROUTES" \
        >"$WORK/nats$i.log" 2>&1 &
    PIDS+=($!)
done
URLS="nats://127.0.0.1:${CLIENT[0]},nats://127.0.0.1:${CLIENT[1]},nats://127.0.0.1:${CLIENT[2]}"

# Starts `tierdb serve` with extra flags; prints "pid http graphite". It runs in a subshell
# (`< <(...)`), so the caller records the pid in PIDS.
start_tierdb() {
    local name=$1
    shift
    : >"$WORK/$name.out"
    RUST_LOG=${RUST_LOG:-tierdb=warn} "$TIERDB" serve --data-dir "$WORK/$name" --http 127.0.0.1:0 \
        --graphite 127.0.0.1:0 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local pid=$!
    for _ in $(seq 600); do
        if grep -q "tierdb: ready" "$WORK/$name.out"; then
            local http graphite
            http=$(sed -n 's/^tierdb: http listening on //p' "$WORK/$name.out")
            graphite=$(sed -n 's/^tierdb: graphite tcp listening on //p' "$WORK/$name.out")
            echo "$pid $http $graphite"
            return
        fi
        if ! kill -0 "$pid" 2>/dev/null; then cat "$WORK/$name.err" >&2; exit 1; fi
        sleep 0.1
    done
    echo "$name did not start" >&2
    cat "$WORK/$name.err" >&2
    kill -9 "$pid" 2>/dev/null || true
    exit 1
}

read -r pid SINGLE_HTTP SINGLE_GRAPHITE < <(start_tierdb single)
PIDS+=("$pid")
NODES_HTTP=() NODES_GRAPHITE=() NODES_PID=()
node_flags() { echo --cluster "$URLS" --node "node$1" --log-max-bytes $((256 << 20)); }
for i in 0 1 2; do
    # shellcheck disable=SC2046
    read -r pid http graphite < <(start_tierdb "node$i" $(node_flags "$i"))
    NODES_HTTP+=("$http") NODES_GRAPHITE+=("$graphite") NODES_PID+=("$pid") PIDS+=("$pid")
done

NATS_PIDS="${PIDS[0]} ${PIDS[1]} ${PIDS[2]}"
SINGLE_PID=${PIDS[3]}
python3 - "$SERIES" "$SAMPLES" "$CONNECTIONS" "$QUERIES" "$SINGLE_HTTP" "$SINGLE_GRAPHITE" \
    "${NODES_HTTP[0]}" "${NODES_GRAPHITE[0]}" "${NODES_HTTP[1]}" "$WORK" "$SINGLE_PID" \
    "$NATS_PIDS ${NODES_PID[*]}" "${NODES_HTTP[2]}" <<'PY'
import json, socket, statistics, sys, threading, time, urllib.request, glob, os

def stat_of(pid):
    """The fields of /proc/`pid`/stat after the command's name, from the state on."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()

def cpu_of(pid):
    """User and system CPU seconds so far of process `pid`, from /proc."""
    fields = stat_of(pid)
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick

def faults_of(pid):
    """Minor page faults so far of process `pid` (a fresh page of memory or of a file
    mapping, each taken in the kernel, zeroed or read), from /proc."""
    return int(stat_of(pid)[7])

def cpu_seconds(pids):
    """User and system CPU seconds so far of the processes `pids`, each and summed."""
    each = [cpu_of(pid) for pid in pids]
    return sum(u for u, _ in each), sum(s for _, s in each), each

single_pids = [sys.argv[11]]
cluster_pids = sys.argv[12].split()
third_http = sys.argv[13]

series, samples, connections, queries = map(int, sys.argv[1:5])
settle = float(os.environ.get("SETTLE", "6"))
single_http, single_graphite, node_http, node_graphite, other_http, work = sys.argv[5:11]
now = int(time.time())
# Whole hours back from the last one, long enough for every sample: all in the past.
hours = -(-samples * 10 // 3600)
start = now - now % 3600 - 3600 * (hours + 1)
live_seconds = int(os.environ.get("LIVE_SECONDS") or 0)
# The bulk figures' samples (none when measuring live traffic).
samples = 0 if live_seconds else samples
lines = [f"bench.host{s % 100:03d}.metric{s // 100:03d} {(s * 7 + i) % 1000 / 10} {start + i * 10}\n"
         for i in range(samples) for s in range(series)]
total = len(lines)

def get(addr, path):
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=60) as r:
        return json.loads(r.read())

def wait_all(addr, strong, prefix="bench", expected=None, span=None, tier="1h"):
    """Waits until `addr` counts `expected` samples (default: every bulk line) of the series
    under `prefix` over `span` (default: the bulk lines' hours) on `tier`; gives up after 10
    minutes, saying how far it got."""
    expected = total if expected is None else expected
    first, end = span or (start, start + 3600 * (hours + 1))
    deadline = time.time() + 600
    path = (f"/api/v1/aggregate?match={prefix}.*&agg=sum&display=count&range=whole&tier={tier}"
            f"&from={first}&to={end}" + ("&consistency=strong" if strong else ""))
    while True:
        try:
            counted = get(addr, path)["groups"][0]["points"][0][1] or 0
        except Exception:
            counted = 0
        if counted >= expected:
            return counted
        if time.time() > deadline:
            sys.exit(f"only {counted} of {expected} samples counted after 10 minutes")
        time.sleep(0.05)

def wait_cluster_ready(addr):
    while True:
        try:
            status = get(addr, "/api/v1/cluster")
            if all(p.get("serving") for p in status["partitions"]):
                return
        except Exception:
            pass
        time.sleep(0.2)

def send(addr):
    host, port = addr.rsplit(":", 1)
    share = [lines[i::connections] for i in range(connections)]
    def one(chunk):
        s = socket.create_connection((host, int(port)))
        s.sendall("".join(chunk).encode())
        s.close()
    threads = [threading.Thread(target=one, args=(c,)) for c in share]
    t0 = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    return t0

# The same samples as Influx line protocol, in bodies of INFLUX_BODY lines (Telegraf sends
# 1,000 by default; collectors batching harder send more).
influx_body = int(os.environ.get("INFLUX_BODY", "5000"))
influx_lines = [f"benchhttp,host=h{s % 100:03d} m{s // 100:03d}={(s * 7 + i) % 1000 / 10} {start + i * 10}\n"
                for i in range(samples) for s in range(series)]
influx_bodies = ["".join(influx_lines[i:i + influx_body]).encode()
                 for i in range(0, total, influx_body)]

def send_influx(addrs):
    """POSTs every body to /write, CONNECTIONS clients at once, each keeping its connection
    and taking the nodes of `addrs` in turn; each body must be answered 204."""
    import http.client
    def one(k):
        host, port = addrs[k % len(addrs)].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        for body in influx_bodies[k::connections]:
            conn.request("POST", "/write?precision=s", body=body)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 204:
                sys.exit(f"influx write answered {answer.status}")
        conn.close()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(connections)]
    t0 = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    return t0

# The cluster's processes, in the order of `cluster_pids`.
CLUSTER_LABELS = ["nats0", "nats1", "nats2", "node0", "node1", "node2"]

def log_messages(addr):
    """How many messages the cluster's log numbered so far: the highest of its partitions'
    last sequences, from a node's /metrics."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=60) as r:
        last = [int(float(line.rsplit(None, 1)[1])) for line in r.read().decode().splitlines()
                if line.startswith("tierdb_cluster_log_last_sequence{")]
    if not last:
        sys.exit(f"no tierdb_cluster_log_last_sequence in {addr}/metrics")
    return max(last)

def start_perf(pids, suffix):
    """`perf record` of `pids` into PERF_OUT + suffix when PERF_OUT is set (stopped with
    SIGINT by the caller), else None."""
    if not os.environ.get("PERF_OUT"):
        return None
    import subprocess
    perf = subprocess.Popen(["perf", "record", "-F", "499", "--call-graph", os.environ.get("PERF_CALL_GRAPH", "fp"),
                             "-o", os.environ["PERF_OUT"] + suffix, "-p", ",".join(pids)], stderr=subprocess.DEVNULL)
    time.sleep(1)
    return perf

def ingest(name, http, graphite, strong, pids, influx_to=None):
    """Sends every line (over Graphite TCP, or as Influx HTTP writes to `influx_to`), waits
    until all are counted; returns CPU seconds per sample."""
    messages0 = log_messages(http) if len(pids) > 1 else 0
    perf = start_perf(pids, ".influx" if influx_to else ".graphite") if len(pids) > 1 else None
    user0, system0, each0 = cpu_seconds(pids)
    faults0 = [faults_of(pid) for pid in pids]
    t0 = send_influx(influx_to) if influx_to else send(graphite)
    sent = time.perf_counter() - t0
    counted = wait_all(http, strong, "benchhttp" if influx_to else "bench")
    took = time.perf_counter() - t0
    # The CPU counted goes on SETTLE seconds more: a cluster node makes what it applied durable
    # at its next checkpoint (every two minutes or 4,194,304 samples per partition, or 3 s
    # after its log goes quiet), after the count.
    # What the processes spend idle over another SETTLE seconds is taken off again.
    time.sleep(settle)
    if perf:
        perf.send_signal(2)
        perf.wait()
    user1, system1, each1 = cpu_seconds(pids)
    faults = [faults_of(pid) - f for pid, f in zip(pids, faults0)]
    time.sleep(settle)
    user2, system2, each2 = cpu_seconds(pids)
    user, system = (user1 - user0) - (user2 - user1), (system1 - system0) - (system2 - system1)
    each1 = [(b[0] - (c[0] - b[0]), b[1] - (c[1] - b[1])) for b, c in zip(each1, each2)]
    if len(pids) > 1:
        messages = log_messages(http) - messages0
        print(f"  log: {messages} messages, {total / max(messages, 1):.0f} samples per message")
        print("  CPU by process (user + system s): " + ", ".join(
            f"{label} {b[0] - a[0]:.2f}+{b[1] - a[1]:.2f}"
            for label, a, b in zip(CLUSTER_LABELS, each0, each1)))
        print("  minor page faults by process: " + ", ".join(
            f"{label} {n}" for label, n in zip(CLUSTER_LABELS, faults)))
    else:
        print(f"  minor page faults: {faults[0]}")
    per_sample = (user + system) / total
    print(f"{name}: {total} lines in {took:.2f} s = {total / took / 1e6:.3f} M lines/s (sent in {sent:.2f} s, counted {int(counted)}); "
          f"CPU {user:.2f} s user + {system:.2f} s system over {len(pids)} processes = {per_sample * 1e6:.3f} us/sample")
    return per_sample

def latency(name, http, path, pids):
    """The median and p90 of QUERIES requests of `path`, and the CPU they took of the
    processes `pids` (the single node's, or all six of the cluster's), per request."""
    times = []
    user0, system0, _ = cpu_seconds(pids)
    for _ in range(queries):
        t0 = time.perf_counter()
        get(http, path)
        times.append(time.perf_counter() - t0)
    user1, system1, _ = cpu_seconds(pids)
    cpu = (user1 - user0 + system1 - system0) / queries
    print(f"{name}: median {statistics.median(times) * 1e3:.2f} ms, p90 {sorted(times)[int(len(times) * 0.9)] * 1e3:.2f} ms, "
          f"CPU {cpu * 1e3:.2f} ms a request over {len(pids)} processes")

def machine_busy():
    """CPU seconds the whole machine spent busy so far (every process and kernel thread:
    the flusher threads' writeback included), from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")

def live(seconds):
    """The live traffic figure (see the header); exits when done."""
    import math
    pids = single_pids + cluster_pids
    idle_for = 20.0

    def idle_rates():
        """Each process's CPU a second over `idle_for` seconds of no traffic, and the
        machine's."""
        each0, machine0 = cpu_seconds(pids)[2], machine_busy()
        time.sleep(idle_for)
        each1, machine1 = cpu_seconds(pids)[2], machine_busy()
        return ([(b[0] + b[1] - a[0] - a[1]) / idle_for for a, b in zip(each0, each1)],
                (machine1 - machine0) / idle_for)

    idle_before, machine_idle_before = idle_rates()
    socks = []
    for addr in (single_graphite, node_graphite):
        host, port = addr.rsplit(":", 1)
        socks.append(socket.create_connection((host, int(port))))
    perf = start_perf(cluster_pids, ".live")
    before, machine_before = cpu_seconds(pids)[2], machine_busy()
    t0 = time.time()
    first = math.ceil(t0)
    sent = 0
    for k in range(seconds):
        at = first + k
        time.sleep(max(0.0, at - time.time()))
        # A tenth of the series each second, so each sends every 10 s.
        members = range(k % 10, series, 10)
        body = "".join(f"live.host{s % 100:03d}.metric{s // 100:04d} {(s * 7 + k) % 1000 / 10} {at}\n"
                       for s in members).encode()
        for sock in socks:
            sock.sendall(body)
        sent += len(members)
    for sock in socks:
        sock.close()
    for addr, strong in ((single_http, False), (node_http, True)):
        wait_all(addr, strong, "live", sent, (first - 60, first + seconds + 60), "1m")
    time.sleep(settle)
    after, machine_after = cpu_seconds(pids)[2], machine_busy()
    if perf:
        perf.send_signal(2)
        perf.wait()
    took = time.time() - t0
    idle_after, machine_idle_after = idle_rates()
    idle_rate = [min(a, b) for a, b in zip(idle_before, idle_after)]
    machine_idle_rate = min(machine_idle_before, machine_idle_after)
    machine = machine_after - machine_before - machine_idle_rate * took
    used = [b[0] + b[1] - a[0] - a[1] - rate * took for a, b, rate in zip(before, after, idle_rate)]
    single = used[0] / sent
    cluster = sum(used[1:]) / sent
    print(f"live, {series} series every 10 s for {seconds} s ({sent} samples, {sent / seconds:.0f} a second), "
          f"CPU over {took:.0f} s less idle: single node {single * 1e6:.2f} us/sample, "
          f"cluster {cluster * 1e6:.2f} us/sample ({cluster / single:.1f}x)")
    print(f"  the whole machine (both systems, the sender and the kernel's threads) less idle: "
          f"{machine:.2f} s, {machine / sent * 1e6:.2f} us/sample")
    print("  CPU by process less idle (s): " + ", ".join(
        f"{label} {u:.2f}" for label, u in zip(["single"] + CLUSTER_LABELS, used)))
    print("  idle CPU a second before / after the traffic (the lower taken off): " + ", ".join(
        f"{label} {b * 1e3:.1f}/{a * 1e3:.1f} ms" for label, b, a
        in zip(["single"] + CLUSTER_LABELS + ["machine"], idle_before + [machine_idle_before],
               idle_after + [machine_idle_after])))

wait_cluster_ready(node_http)
if live_seconds:
    live(live_seconds)
    sys.exit(0)
single_cpu = ingest("single node, graphite tcp", single_http, single_graphite, False, single_pids)
cluster_cpu = ingest("3-node cluster, graphite tcp to one node", node_http, node_graphite, True, cluster_pids)
print(f"CPU per sample, cluster (3 nats-servers + 3 nodes) over single node: {cluster_cpu / single_cpu:.1f}x")
single_cpu = ingest("single node, influx http", single_http, None, False, single_pids, [single_http])
cluster_cpu = ingest("3-node cluster, influx http to all three nodes", node_http, None, True, cluster_pids,
                     [node_http, other_http, third_http])
print(f"CPU per sample over influx http, cluster over single node: {cluster_cpu / single_cpu:.1f}x")

stream_bytes = sum(os.path.getsize(f) for f in glob.glob(f"{work}/nats0/jetstream/**/TIERDB_INGEST/msgs/*.blk", recursive=True))
print(f"log: {stream_bytes} bytes of message blocks on one server for {total} samples = {stream_bytes / total:.2f} bytes/sample (blocks include NATS's per-message headers)")

one = f"/api/v1/query?series=bench.host001.metric000&tier=1m&from={start}&to={start + 7200}"
agg = f"/api/v1/aggregate?match=bench.*&agg=sum&tier=1m&from={start}&to={start + 7200}"
latency("single node, one series 2h@1m", single_http, one, single_pids)
latency("cluster (node0), one series 2h@1m", node_http, one, cluster_pids)
latency("cluster (node1), one series 2h@1m", other_http, one, cluster_pids)
latency("single node, sum over all series 2h@1m", single_http, agg, single_pids)
latency("cluster, sum over all series 2h@1m (fan-out to all owners)", node_http, agg, cluster_pids)
PY

[[ ${LIVE_SECONDS:-0} != 0 ]] && exit 0

# A wiped node's rebuild from the live replicas' files.
kill -9 "${NODES_PID[2]}"
rm -rf "$WORK/node2"
REBUILD_START=$(date +%s.%N)
# shellcheck disable=SC2046
read -r pid NODE2_HTTP _ < <(start_tierdb node2 $(node_flags 2))
PIDS+=("$pid")
python3 - "$NODE2_HTTP" "$REBUILD_START" <<'PY'
import json, sys, time, urllib.request
http, started = sys.argv[1], float(sys.argv[2])
deadline = time.time() + 600
while True:
    with urllib.request.urlopen(f"http://{http}/api/v1/cluster", timeout=60) as r:
        status = json.loads(r.read())
    # Caught up once node2 holds every partition the cluster wants on it, at lag 0.
    mine = [p for p in status["partitions"] if "node2" in p["desired"]]
    caught_up = mine and all(
        any(r["node"] == "node2" and r["lag"] == 0 for r in p["replicas"]) for p in mine)
    # A partition no sample went to has nothing to copy: only the others must be rebuilt.
    with_data = [p for p in mine if p["last_sequence"] > 0]
    rebuilt = status["rebuilds"]
    if caught_up and len(rebuilt) >= len(with_data):
        took = time.time() - started
        copied = sum(r["bytes"] for r in rebuilt)
        print(f"rebuild of a wiped node: {len(rebuilt)} partitions (of {len(mine)} it applies), "
              f"{copied / 2**20:.1f} MiB of files "
              f"copied, caught up {took:.2f} s after its start ({copied / 2**20 / took:.1f} MiB/s)")
        break
    if time.time() > deadline:
        sys.exit(f"node2 not rebuilt after 10 minutes: {len(rebuilt)} copies, {len(with_data)} "
                 f"partitions with data of {len(mine)}")
    time.sleep(0.1)
PY
