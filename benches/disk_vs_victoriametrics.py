#!/usr/bin/env python3
"""Disk of tierdb beside VictoriaMetrics, on the same data, in the same run.

Starts `tierdb serve` (the shipped tiers.toml; an optimised build, `cargo build --release`)
and Debian's `victoria-metrics` (1.79.5: `apt-get install victoria-metrics`; this script is
the only thing that needs it, and it stops when the binary is missing) on loopback ports,
sends both the same Graphite plaintext over one TCP connection each: SERIES gauges
`disk_bench;series=NNNN`, one sample every 10 s for the 24 h up to now, each a random walk
in steps of 0.01 (seeded, so every run sends the same values). It waits until both answer
the last sample of every series, then prints the disk each data directory allocates
(`du -s --block-size=1`: blocks really allocated, what a sparse file does not use is not
counted) after ingest, after a settle of SETTLE seconds, and after a clean stop (SIGTERM),
with the ratio tierdb / VictoriaMetrics at each point.

`--week` then sends the week before that day (60,480 samples a series, oldest first: a
backfill of history), waits until both answer its last sample, settles again and prints the
disk after that week's settle too (the `+week` column).

`--baseline PATH` runs a second tierdb build on its own data directory beside them, fed the
same bytes in the same run: a before/after pair. `--also-tiers FILE` runs `--tierdb` once more
with other tiers, to compare tier choices in the same run.

    python3 benches/disk_vs_victoriametrics.py [--series 1000] [--settle 60] [--baseline OLD/tierdb]
        [--tiers tiers.toml] [--also-tiers OTHER.toml] [--week]
"""
import argparse
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAY, BEAT = 86400, 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=120) as answer:
        return answer.read()


def wait(what, check, seconds=600):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"{what} not ready after {seconds} s")


def allocated(path):
    out = subprocess.run(["du", "-s", "--block-size=1", path], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def write_data(path, series, start, days=1, seed=55):
    """SERIES x 8,640 lines a day, time-major (as agents send them); returns the last timestamp."""
    rng = random.Random(seed)
    values = [rng.randint(0, 10000) for _ in range(series)]
    with open(path, "w") as f:
        for step in range(days * DAY // BEAT):
            ts = start + step * BEAT
            chunk = []
            for i in range(series):
                values[i] += rng.randint(-50, 50)
                chunk.append(f"disk_bench;series={i:04d} {values[i] / 100:.2f} {ts}\n")
            f.write("".join(chunk))
    return start + (days * DAY // BEAT - 1) * BEAT


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--settle", type=int, default=60)
    parser.add_argument("--tierdb", default=os.path.join(ROOT, "target/release/tierdb"))
    parser.add_argument("--baseline", help="a second tierdb build, fed the same data in the same run")
    parser.add_argument("--tiers", default=os.path.join(ROOT, "tiers.toml"), help="the tiers both tierdb builds use")
    parser.add_argument("--keep", action="store_true", help="leave the data directories in place and print where")
    parser.add_argument("--also-tiers", help="a third tierdb run, of --tierdb with these tiers, in the same run")
    parser.add_argument("--week", action="store_true", help="then backfill the week before the day, and settle again")
    parser.add_argument("--victoria-metrics", default=os.environ.get("VICTORIA_METRICS", "/usr/bin/victoria-metrics"))
    args = parser.parse_args()
    needed = [(args.tierdb, "cargo build --release"), (args.victoria_metrics, "apt-get install victoria-metrics")]
    if args.baseline:
        needed.append((args.baseline, "a tierdb binary"))
    for path, hint in needed:
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: {hint}")
    tmp = tempfile.mkdtemp(prefix="disk-vs-vm-", dir=os.environ.get("TIERDB_BENCH_DIR"))
    procs = {}
    try:
        start = (int(time.time()) // BEAT * BEAT) - DAY + BEAT
        data = os.path.join(tmp, "lines.txt")
        print(f"writing {args.series} series x {DAY // BEAT} samples ...", flush=True)
        last = write_data(data, args.series, start)
        builds = {"tierdb": (args.tierdb, args.tiers)}
        if args.baseline:
            builds["baseline"] = (args.baseline, args.tiers)
        if args.also_tiers:
            builds["tierdb, tiers 2"] = (args.tierdb, args.also_tiers)
        dirs, servers = {}, {}  # name -> data dir; name -> (query URL, graphite port)
        for name, (binary, tiers) in builds.items():
            dirs[name] = os.path.join(tmp, name.replace(" ", "_").replace(",", ""))
            proc = subprocess.Popen(
                [binary, "serve", "--data-dir", dirs[name], "--tiers", tiers,
                 "--http", "127.0.0.1:0", "--graphite", "127.0.0.1:0"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs[name] = proc
            addrs = {}
            for line in proc.stdout:
                m = re.match(r"tierdb: (.+?) listening on (\S+)", line)
                if m:
                    addrs[m.group(1)] = m.group(2)
                if line.startswith("tierdb: ready"):
                    break
            servers[name] = ("http://" + addrs["http"] + "/prometheus", int(addrs["graphite tcp"].rsplit(":", 1)[1]))
        vm_http, vm_graphite = free_port(), free_port()
        dirs["VictoriaMetrics"] = os.path.join(tmp, "vm")
        procs["VictoriaMetrics"] = subprocess.Popen(
            [args.victoria_metrics, f"-storageDataPath={dirs['VictoriaMetrics']}", f"-httpListenAddr=127.0.0.1:{vm_http}",
             f"-graphiteListenAddr=127.0.0.1:{vm_graphite}", "-retentionPeriod=2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        vm_url = f"http://127.0.0.1:{vm_http}"
        wait("victoria-metrics", lambda: get(vm_url + "/health") == b"OK")
        servers["VictoriaMetrics"] = (vm_url, vm_graphite)
        empty = {name: allocated(d) for name, d in dirs.items()}
        def send(path, last):
            for name, (_, port) in servers.items():
                with socket.create_connection(("127.0.0.1", port)) as s, open(path, "rb") as f:
                    s.sendfile(f)
            probe = urllib.parse.quote("count(count_over_time(disk_bench[10s]))")
            want = f'"{args.series}"'.encode()
            for name, (url, _) in servers.items():
                extra = "&nocache=1" if name == "VictoriaMetrics" else ""
                wait(f"{name} data", lambda: want in get(f"{url}/api/v1/query?query={probe}&time={last + 5}{extra}"))

        send(data, last)
        ingested = {name: allocated(d) for name, d in dirs.items()}
        time.sleep(args.settle)
        settled = {name: allocated(d) for name, d in dirs.items()}
        week = None
        if args.week:
            week_data = os.path.join(tmp, "week.txt")
            print(f"writing the week before: {args.series} series x {7 * DAY // BEAT} samples ...", flush=True)
            week_last = write_data(week_data, args.series, start - 7 * DAY, days=7, seed=56)
            send(week_data, week_last)
            os.remove(week_data)
            time.sleep(args.settle)
            week = {name: allocated(d) for name, d in dirs.items()}
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(timeout=120)
        stopped = {name: allocated(d) for name, d in dirs.items()}
        vm = "VictoriaMetrics"
        print(f"{args.series} series x 24 h at 10 s over Graphite; disk allocated (du -s --block-size=1), MB:")
        week_head = f" {'+week settled':>14s}" if week else ""
        print(f"{'':16s} {'empty':>8s} {'ingested':>9s} {'settled ' + str(args.settle) + ' s':>13s}{week_head} {'stopped':>9s}")
        for name in dirs:
            week_cell = f" {week[name] / 1e6:14.2f}" if week else ""
            print(f"{name:16s} {empty[name] / 1e6:8.2f} {ingested[name] / 1e6:9.2f} {settled[name] / 1e6:13.2f}{week_cell} "
                  f"{stopped[name] / 1e6:9.2f}")
        for name in builds:
            week_cell = f" {week[name] / week[vm]:13.2f}x" if week else ""
            print(f"{name + ' / VM':16s} {empty[name] / max(empty[vm], 1):7.2f}x {ingested[name] / ingested[vm]:8.2f}x "
                  f"{settled[name] / settled[vm]:12.2f}x{week_cell} {stopped[name] / stopped[vm]:8.2f}x")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if args.keep:
            print(f"data directories kept under {tmp}")
        else:
            subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
