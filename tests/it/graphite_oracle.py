"""Renders targets with the real graphite-web, for tests/it/graphite_oracle.rs.

Usage: /usr/bin/python3 graphite_oracle.py SPEC.json ANSWERS.json

SPEC holds `dir` (an empty temporary directory), `now` (the clock, unix seconds),
`archives` (whisper retentions as [seconds per point, points] pairs), `series` (name ->
[[timestamp, value], ...]) and `requests` (each with `targets`, `from`, `until` (unix
seconds, or graphite-web's time words) and an optional `maxDataPoints`, `format`, `jsonp` and `now`
(graphite-web's parameter; the spec's clock when absent), or with
`path` and `params` for another endpoint), and an optional `aggregation` (name -> whisper's
aggregationMethod, for the series not written with `average`). Writes one
whisper file per series under DIR/whisper with python3-whisper (average aggregation unless
`aggregation` names another, an xFilesFactor of 0, so every archive holds the average, or
the last, of what it has); a tagged series
(`name;k=v`, tags sorted) goes where graphite-web's finder looks for it and into its tag
database (sqlite in DIR). Then answers every request through graphite-web's own Django app
in this process, with the settings module written below (no web server, no service,
nothing outside DIR). ANSWERS gets one {"status", "body", "type"} per request, in order
(`type` the Content-Type); a pickle's body is what it unpickles to, as JSON, and a
msgpack body its bytes in hex.

The clock is the spec's, not the machine's: whisper chooses its archive and graphite-web
its `now` (the request's, and that of times in functions' arguments) from it, as tierdb's
test server does from its manual clock.
"""

import inspect
import json
import os
import pickle
import signal
import sys
import time

spec_path, answers_path = sys.argv[1], sys.argv[2]
with open(spec_path) as f:
    spec = json.load(f)

NOW = spec["now"]
time.time = lambda: float(NOW)

root = spec["dir"]
whisper_dir = os.path.join(root, "whisper")
os.makedirs(whisper_dir, exist_ok=True)
with open(os.path.join(root, "oracle_settings.py"), "w") as f:
    f.write(
        "SECRET_KEY = 'tierdb-oracle'\n"
        f"STORAGE_DIR = {root!r}\n"
        f"WHISPER_DIR = {whisper_dir!r}\n"
        f"STANDARD_DIRS = [{whisper_dir!r}]\n"
        f"LOG_DIR = {root!r}\n"
        "STORAGE_FINDERS = ('graphite.finders.standard.StandardFinder',)\n"
        "TAGDB = 'graphite.tags.localdatabase.LocalDatabaseTagDB'\n"
        "USE_WORKER_POOL = False\n"
        "TIME_ZONE = 'UTC'\n"
    )
sys.path.insert(0, root)
os.environ["GRAPHITE_SETTINGS_MODULE"] = "oracle_settings"
os.environ["DJANGO_SETTINGS_MODULE"] = "graphite.settings"

# Debian's graphite-web 1.1.8 still calls these on Python 3.11, where they are gone: only
# /functions uses them, and only for the `function` text of each entry.
if not hasattr(inspect, "getargspec"):
    inspect.getargspec = lambda f: inspect.getfullargspec(f)[:4]
if not hasattr(inspect, "formatargspec"):
    inspect.formatargspec = lambda *args, **kwargs: "()"

import whisper  # noqa: E402
import django  # noqa: E402

django.setup()
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from graphite.storage import STORE  # noqa: E402
from graphite.tags.utils import TaggedSeries  # noqa: E402
import graphite.render.attime as attime  # noqa: E402


class SpecClock(attime.datetime):
    """The spec's clock for the times in functions' arguments (`linearRegression(x, '-3h')`),
    which graphite-web reads from `datetime.now`, not from the request's `now`."""

    @classmethod
    def now(cls, tz=None):
        return attime.datetime.fromtimestamp(NOW, tz)


attime.datetime = SpecClock

# The tag database (sqlite in DIR), which seriesByTag and /tags read.
call_command("migrate", verbosity=0, interactive=False)

archives = [tuple(a) for a in spec["archives"]]
aggregation = spec.get("aggregation") or {}
for name, points in spec["series"].items():
    if ";" in name:
        # A tagged series: stored where graphite-web's finder looks for it, and tagged.
        path = os.path.join(whisper_dir, TaggedSeries.encode(name, sep=os.sep)) + ".wsp"
        STORE.tagdb.tag_series(name)
    else:
        path = os.path.join(whisper_dir, *name.split(".")) + ".wsp"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    method = aggregation.get(name, "average")
    whisper.create(path, archives, xFilesFactor=0, aggregationMethod=method)
    if points:
        whisper.update_many(path, [(t, v) for t, v in points])

# A failing render answers 500 with graphite-web's message, as its server would.
client = Client(raise_request_exception=False)
answers = []


def answer(request):
    if "path" in request:
        response = client.get(request["path"], request.get("params", {}))
    else:
        params = {
            "target": request["targets"],
            "from": request["from"],
            "until": request["until"],
            "format": request.get("format") or "json",
            "now": request.get("now") or NOW,
        }
        if request.get("jsonp"):
            params["jsonp"] = request["jsonp"]
        if request.get("maxDataPoints"):
            params["maxDataPoints"] = request["maxDataPoints"]
        response = client.get("/render", params)
    if response.get("Content-Type") == "application/pickle" and response.status_code == 200:
        body = json.dumps(pickle.loads(response.content))
    elif response.get("Content-Type") == "application/x-msgpack":
        body = response.content.hex()
    else:
        body = response.content.decode()
    return {"status": response.status_code, "body": body, "type": response.get("Content-Type")}


# ORACLE_REQUEST_SECONDS bounds each request (a measurement over generated targets, some of
# which graphite-web may take long on); one past it answers status 599. Unset: no bound.
class TooLong(Exception):
    pass


def too_long(*_):
    raise TooLong()


limit = int(os.environ.get("ORACLE_REQUEST_SECONDS", "0"))
signal.signal(signal.SIGALRM, too_long)
for request in spec["requests"]:
    signal.alarm(limit)
    try:
        answers.append(answer(request))
    except TooLong:
        answers.append({"status": 599, "body": "over ORACLE_REQUEST_SECONDS", "type": None})
    signal.alarm(0)

with open(answers_path, "w") as f:
    json.dump(answers, f)
