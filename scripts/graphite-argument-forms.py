#!/usr/bin/env python3
"""Which argument forms graphite-web 1.1.8 renders and tierdb refuses: a measurement.

For every render function tierdb lists at /functions, each parameter that is not a series
is given in turn ten forms (`5`, `2.5`, `'5'`, `true`, `'true'`, `None`, `'abc'`, `-1`, `0`,
`'1h'`), the parameters before it (and every required one) a form of their declared type.
graphite-web (Debian's, through tests/it/graphite_oracle.py, each request bounded to 3 s)
and a `tierdb serve` of the given build render every target over the last 3 hours of the
same six series; the script prints how many targets graphite-web answers with 200 and how
many of those tierdb refuses, and writes the refused ones, with tierdb's answer, to
--out (default graphite-argument-forms.txt). Only the status is compared: whether an
answer tierdb gives equals graphite-web's is what tests/it/graphite_oracle.rs checks.

Usage: scripts/graphite-argument-forms.py [--out FILE] [TIERDB]   (default
target/debug/tierdb). Needs graphite-web and python3-whisper (scripts/install-test-deps.sh).
Takes a few minutes and keeps nothing: its directory is a temporary one.
"""

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE = os.path.join(ROOT, "tests", "it", "graphite_oracle.py")

# A form of each parameter type, for the parameters not being varied.
BASE = {
    "seriesList": "servers.*.cpu", "seriesLists": "servers.*.cpu", "series": "servers.web1.cpu",
    "boolean": "true", "float": "1.5", "integer": "2", "interval": "'10min'",
    "intOrInterval": "3", "intOrInf": "2", "node": "1", "nodeOrTag": "1", "string": "'x'",
    "aggFunc": "'sum'", "aggOrSeriesFunc": "'sum'", "date": "'-1h'", "tag": "'host'", "any": "1",
}
FORMS = ["5", "2.5", "'5'", "true", "'true'", "None", "'abc'", "-1", "0", "'1h'"]
SERIES_TYPES = ("seriesList", "seriesLists", "series")


def base_form(param):
    if param.get("options"):
        option = param["options"][0]
        return repr(option) if isinstance(option, str) else json.dumps(option)
    return BASE.get(param["type"], "1")


def targets(functions):
    out = set()
    for name, entry in functions.items():
        params = entry["params"]
        required = sum(1 for p in params if p.get("required"))
        for i, param in enumerate(params):
            if param["type"] in SERIES_TYPES:
                continue
            for form in FORMS:
                args = [form if j == i else base_form(p)
                        for j, p in enumerate(params[: max(i + 1, required)])]
                out.add(f"{name}({', '.join(args)})")
    return sorted(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tierdb", nargs="?", default=os.path.join(ROOT, "target/debug/tierdb"))
    parser.add_argument("--out", default="graphite-argument-forms.txt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        now = int(time.time()) // 60 * 60
        series = {
            f"servers.{host}.{m}": [[now - 60 * i, float((i * 7 + len(host)) % 13) + 0.5]
                                    for i in range(1, 600)]
            for host in ["web1", "web2", "db1"] for m in ["cpu", "mem"]
        }
        server = subprocess.Popen(
            [args.tierdb, "serve", "--data-dir", os.path.join(work, "data"),
             "--http", "127.0.0.1:0", "--graphite", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            http = None
            for line in server.stdout:
                found = re.match(r"tierdb: http listening on (\S+)", line)
                http = found.group(1) if found else http
                if line.strip() == "tierdb: ready":
                    break

            def get(path, body=None):
                request = urllib.request.Request(f"http://{http}{path}", data=body)
                try:
                    with urllib.request.urlopen(request) as answer:
                        return answer.status, answer.read().decode()
                except urllib.error.HTTPError as e:
                    return e.code, e.read().decode()

            points = [{"series": name, "ts": t, "value": v}
                      for name, values in series.items() for t, v in values]
            status, text = get("/api/v1/write", json.dumps(points).encode())
            assert status in (200, 204), text
            forms = targets(json.loads(get("/functions")[1]))
            spec = {
                "dir": os.path.join(work, "graphite"), "now": now,
                "archives": [[60, 2880], [300, 4032], [3600, 2160]], "series": series,
                "requests": [{"targets": [t], "from": now - 3 * 3600, "until": now}
                             for t in forms],
            }
            with open(os.path.join(work, "spec.json"), "w") as f:
                json.dump(spec, f)
            subprocess.run(
                ["/usr/bin/python3", ORACLE, os.path.join(work, "spec.json"),
                 os.path.join(work, "answers.json")],
                check=True, env={**os.environ, "ORACLE_REQUEST_SECONDS": "3"},
                stderr=subprocess.DEVNULL)
            with open(os.path.join(work, "answers.json")) as f:
                theirs = json.load(f)
            rendered, refused, over = 0, [], 0
            for target, answer in zip(forms, theirs):
                over += answer["status"] == 599
                if answer["status"] != 200:
                    continue
                rendered += 1
                query = urllib.parse.urlencode(
                    {"target": target, "from": now - 3 * 3600, "until": now})
                status, text = get(f"/render?{query}")
                if status != 200:
                    refused.append(f"{target}\t{status}\t{text[:200]}")
        finally:
            server.terminate()
            server.wait()
    with open(args.out, "w") as f:
        f.write("".join(line + "\n" for line in refused))
    print(f"{len(forms)} targets; graphite-web renders {rendered} ({over} over 3 s); "
          f"tierdb refuses {len(refused)} of those (listed in {args.out})")


if __name__ == "__main__":
    main()
