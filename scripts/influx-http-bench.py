#!/usr/bin/env python3
"""Influx line protocol over HTTP into one `tierdb serve`, as benches/cluster.sh sends it:
SERIES series x SAMPLES samples (`benchhttp,host=h001 m003=12.5 1795000000`), POSTed to
/write?precision=s in bodies of 5,000 lines from 4 keep-alive clients; every body must be
answered 204. Prints lines/s and the server's CPU per line.

    python3 scripts/influx-http-bench.py target/release/tierdb [more binaries...]

Each binary is run RUNS times (default 3), in turn, each on a fresh data directory under
/tmp that is deleted afterwards; the server is stopped by its pid."""

import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

SERIES = int(os.environ.get("SERIES", "1000"))
SAMPLES = int(os.environ.get("SAMPLES", "1440"))
BODY = int(os.environ.get("INFLUX_BODY", "5000"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "4"))
RUNS = int(os.environ.get("RUNS", "3"))
START = 1_795_000_000

lines = [f"benchhttp,host=h{s % 100:03d} m{s // 100:03d}={(s * 7 + i) % 1000 / 10} {START + i * 10}\n"
         for i in range(SAMPLES) for s in range(SERIES)]
bodies = ["".join(lines[i:i + BODY]).encode() for i in range(0, len(lines), BODY)]


def serve(binary):
    data = tempfile.mkdtemp(prefix="influx-bench-")
    proc = subprocess.Popen([binary, "serve", "--data-dir", data, "--http", "127.0.0.1:0",
                             "--graphite", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    addr = None
    for line in proc.stdout:
        m = re.search(r"http listening on (127\.0\.0\.1:\d+)", line)
        if m and addr is None:
            addr = m.group(1)
        if "ready" in line:
            break
    if addr is None:
        proc.kill()
        sys.exit("no HTTP address in the server's output")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, data, addr


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def send(addr):
    host, port = addr.rsplit(":", 1)

    def one(k):
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        for body in bodies[k::CONNECTIONS]:
            conn.request("POST", "/write?precision=s", body=body)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 204:
                sys.exit(f"influx write answered {answer.status}")
        conn.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(CONNECTIONS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def run(binary):
    proc, data, addr = serve(binary)
    try:
        cpu0 = cpu_seconds(proc.pid)
        took = send(addr)
        cpu = cpu_seconds(proc.pid) - cpu0
        total = len(lines)
        print(f"{binary}: {total} lines in {took:.2f} s = {total / took / 1e6:.3f} M lines/s; "
              f"server CPU {cpu:.2f} s = {cpu / total * 1e6:.3f} us/line", flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


for _ in range(RUNS):
    for binary in sys.argv[1:]:
        run(binary)
