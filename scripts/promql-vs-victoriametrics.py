#!/usr/bin/env python3
"""The same PromQL against tierdb and VictoriaMetrics, on the same data, in the same run.

Starts `tierdb serve` (an optimised build: `cargo build --release`, or `--profile bench`,
which shares `cargo bench`'s artifacts) and Debian's
`victoria-metrics` on loopback ports, sends both the same Graphite plaintext over TCP
(1,000 counter series `node_cpu_seconds_total;cpu=0;instance=hostNNN;mode=mK`, one sample
every 30 s for 24 h), waits until both show the last sample, then times over HTTP, runs
alternating, medians printed:

- tierdb:  /prometheus/api/v1/query_range  sum by (instance) (rate(node_cpu_seconds_total[5m]))
- tierdb:  /api/v1/aggregate               the sum by instance of the same minute buckets, per second
- VictoriaMetrics: /api/v1/query_range     the same PromQL, from its rollup cache and with nocache=1

24 h at a 60 s step. Each round times every URL once, in turn; besides each URL's median the
script prints the median (and range) of the rounds' ratios PromQL / aggregate, each of two
requests a moment apart, so a change of the shared machine's load between rounds moves both.
`--baseline PATH` serves the same data from a second tierdb build as well (another data
directory, the same samples), says whether the two builds' PromQL answers are the same bytes,
and times its two URLs in the same rounds: a before/after pair.

tierdb does not depend on VictoriaMetrics: this script is the only thing that runs it, and it
stops when the binary is missing (`apt-get install victoria-metrics`).

    python3 scripts/promql-vs-victoriametrics.py [--runs 21] [--baseline OLD/tierdb]
"""

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY = "sum by (instance) (rate(node_cpu_seconds_total[5m]))"
INSTANCES, MODES, BEAT, DAY = 100, 10, 30, 86400


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=120) as answer:
        return answer.read()


def timed(url):
    started = time.perf_counter()
    body = get(url)
    return time.perf_counter() - started, body


def wait(what, check, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"{what} not ready after {seconds} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--tierdb", default=os.path.join(ROOT, "target/release/tierdb"))
    parser.add_argument("--baseline", help="a second tierdb build, timed on the same data in the same rounds")
    parser.add_argument("--victoria-metrics", default=os.environ.get("VICTORIA_METRICS", "/usr/bin/victoria-metrics"))
    args = parser.parse_args()
    needed = [(args.tierdb, "cargo build --release"), (args.victoria_metrics, "apt-get install victoria-metrics")]
    if args.baseline:
        needed.append((args.baseline, "a tierdb binary"))
    for path, hint in needed:
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: {hint}")

    tmp = tempfile.mkdtemp(prefix="promql-vs-vm-")
    procs = []
    try:
        tiers = open(os.path.join(ROOT, "tiers.toml")).read()
        tiers = re.sub(r"(?m)^names = \[\]", 'names = ["node_cpu_seconds_total"]', tiers)
        with open(os.path.join(tmp, "tiers.toml"), "w") as f:
            f.write(tiers)
        builds = {"tierdb": args.tierdb}
        if args.baseline:
            builds["baseline"] = args.baseline
        servers = {}  # name -> (http URL, graphite host:port)
        for name, binary in builds.items():
            tierdb = subprocess.Popen(
                [binary, "serve", "--data-dir", os.path.join(tmp, name), "--tiers", os.path.join(tmp, "tiers.toml"),
                 "--http", "127.0.0.1:0", "--graphite", "127.0.0.1:0"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(tierdb)
            addrs = {}
            for line in tierdb.stdout:
                m = re.match(r"tierdb: (.+?) listening on (\S+)", line)
                if m:
                    addrs[m.group(1)] = m.group(2)
                if line.startswith("tierdb: ready"):
                    break
            servers[name] = ("http://" + addrs["http"], addrs["graphite tcp"])
        vm_http, vm_graphite = free_port(), free_port()
        vm = subprocess.Popen(
            [args.victoria_metrics, f"-storageDataPath={tmp}/vm", f"-httpListenAddr=127.0.0.1:{vm_http}",
             f"-graphiteListenAddr=127.0.0.1:{vm_graphite}", "-retentionPeriod=2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(vm)
        vm_url = f"http://127.0.0.1:{vm_http}"
        wait("victoria-metrics", lambda: get(vm_url + "/health") == b"OK")

        now = int(time.time()) // 60 * 60
        start = now - DAY
        print(f"sending {INSTANCES * MODES} series x {DAY // BEAT + 20} samples to each ...", flush=True)
        lines = []
        for step in range(DAY // BEAT + 20):
            ts = start - 600 + step * BEAT
            for i in range(INSTANCES * MODES):
                value = step * (1 + i % 7) * 0.25
                lines.append(f"node_cpu_seconds_total;cpu=0;instance=host{i // MODES:03d};mode=m{i % MODES} {value} {ts}\n")
        data = "".join(lines).encode()
        targets = [graphite.rsplit(":", 1) for _, graphite in servers.values()] + [("127.0.0.1", vm_graphite)]
        for host, port in targets:
            with socket.create_connection((host, int(port))) as s:
                s.sendall(data)
        last = start - 600 + (DAY // BEAT + 19) * BEAT
        probe = urllib.parse.quote('count(count_over_time(node_cpu_seconds_total[1m]))')
        at = last + 30
        for name, (http, _) in servers.items():
            wait(f"{name} data", lambda: b'"1000"' in get(f"{http}/prometheus/api/v1/query?query={probe}&time={at}"), 300)
        wait("victoria-metrics data", lambda: b'"1000"' in get(f"{vm_url}/api/v1/query?query={probe}&time={at}&nocache=1"), 300)

        q = urllib.parse.quote(QUERY)
        range_args = f"start={start + 60}&end={now}&step=60"
        aggregate_args = f"match=node_cpu_seconds_total&agg=sum&group_by=instance&display=per_sec&tier=1m&from={start}&to={now}"
        urls = {}
        for name, (http, _) in servers.items():
            urls[f"{name} PromQL"] = f"{http}/prometheus/api/v1/query_range?query={q}&{range_args}"
            urls[f"{name} /api/v1/aggregate"] = f"{http}/api/v1/aggregate?{aggregate_args}"
        urls["VictoriaMetrics (cache)"] = f"{vm_url}/api/v1/query_range?query={q}&{range_args}"
        urls["VictoriaMetrics nocache=1"] = f"{vm_url}/api/v1/query_range?query={q}&{range_args}&nocache=1"
        times = {name: [] for name in urls}
        answers = {name: timed(url)[1] for name, url in urls.items()}  # and warm
        if args.baseline:
            same = answers["tierdb PromQL"] == answers["baseline PromQL"]
            print(f"the two builds' PromQL answers are {'byte for byte the same' if same else 'DIFFERENT'}")
        # Every other round in the reverse order: what one request leaves behind in a server
        # must not always fall on the same other one.
        for round in range(args.runs):
            order = list(urls.items())
            for name, url in (order if round % 2 == 0 else reversed(order)):
                times[name].append(timed(url)[0])
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        print(f"{args.runs} rounds, load average {load} at the end")
        for name, values in times.items():
            print(f"{name:32s} median {statistics.median(values) * 1000:8.1f} ms  (min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})")
        for name in servers:
            ratios = [p / a for p, a in zip(times[f"{name} PromQL"], times[f"{name} /api/v1/aggregate"])]
            print(f"{name} PromQL / aggregate, per round: median {statistics.median(ratios):.2f}x (lowest {min(ratios):.2f}x, highest {max(ratios):.2f}x)")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
