"""Sends metrics to a tierdb server with the OpenTelemetry Python SDK's OTLP/HTTP exporter
(tests/it/otlp.rs starts the server and reads the metrics back).

Usage: python3 otlp_sdk.py http://127.0.0.1:PORT

- A cumulative provider (protobuf): a gauge, a cumulative counter, an explicit-bucket
  histogram and an exponential histogram, exported twice.
- A delta provider (protobuf, gzip): a delta counter, an exponential histogram and an
  explicit-bucket histogram, exported twice.
- A summary, which the SDK has no instrument for: an ExportMetricsServiceRequest built
  with the opentelemetry-proto classes the exporter uses, posted as the exporter posts.

The histograms record seeded log-normal latencies in whole units (so every sum is exact).
Prints one JSON line: the result of each of the exporter's exports, the summary's answer,
every value each histogram recorded and the explicit histograms' bounds.
"""

import json
import random
import sys
import time

import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import (
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)
from opentelemetry.sdk.resources import Resource

base = sys.argv[1]
endpoint = base + "/v1/metrics"
resource = Resource.create(
    {"service.name": "otlp-test", "service.instance.id": "i-1", "deployment.environment": "ci"}
)
HOUR = 3_600_000


class RecordingExporter(OTLPMetricExporter):
    """The SDK's exporter, keeping each export's result (force_flush says True even when
    the server refused the export)."""

    results = []

    def export(self, metrics_data, *args, **kwargs):
        result = super().export(metrics_data, *args, **kwargs)
        RecordingExporter.results.append(result.name)
        return result


def provider(temporality, compression, views=()):
    exporter = RecordingExporter(
        endpoint=endpoint,
        compression=compression,
        preferred_temporality={
            kind: temporality
            for kind in (
                Counter,
                UpDownCounter,
                Histogram,
                ObservableCounter,
                ObservableUpDownCounter,
                ObservableGauge,
            )
        },
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=HOUR)
    # No export at exit: the test reads what the flushes below sent.
    return MeterProvider(
        metric_readers=[reader], resource=resource, views=list(views), shutdown_on_exit=False
    )


rng = random.Random(53)
# Every value each histogram recorded, by instrument name.
recorded = {"request.duration": [], "queue.wait": [], "payload.size": [], "batch.size": []}


def record(histogram, name, n, attributes=None):
    """Records n seeded log-normal values (whole units, 1 to tens of thousands)."""
    for _ in range(n):
        value = int(rng.lognormvariate(4.0, 1.3)) + 1
        histogram.record(value, attributes)
        recorded[name].append(value)


def exponential(name):
    return View(instrument_name=name, aggregation=ExponentialBucketHistogramAggregation())


# The explicit histograms' bounds: the SDK's default ones for request.duration, and others
# for batch.size.
bounds = {
    "request.duration": [0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000],
    "batch.size": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
}


def explicit(name):
    aggregation = ExplicitBucketHistogramAggregation(boundaries=bounds[name])
    return View(instrument_name=name, aggregation=aggregation)


cumulative = provider(
    AggregationTemporality.CUMULATIVE,
    Compression.NoCompression,
    [exponential("queue.wait"), explicit("request.duration")],
)
meter = cumulative.get_meter("tierdb.test")
meter.create_gauge("queue.depth", unit="{item}").set(7.5, {"queue": "main"})
counter = meter.create_counter("jobs.done", unit="{job}")
counter.add(3, {"queue": "main"})
latency = meter.create_histogram("request.duration", unit="ms")
wait = meter.create_histogram("queue.wait", unit="ms")
record(latency, "request.duration", 150, {"route": "/a"})
record(wait, "queue.wait", 150)
cumulative.force_flush()
# A cumulative counter's first point is its baseline: a second export, in a later second
# (tierdb keeps seconds), carries the increase (2). The histograms' first points are
# counted whole (their streams started after the server), the second ones' increases.
time.sleep(1.2)
counter.add(2, {"queue": "main"})
record(latency, "request.duration", 150, {"route": "/a"})
record(wait, "queue.wait", 150)
cumulative.force_flush()

delta = provider(
    AggregationTemporality.DELTA,
    Compression.Gzip,
    [exponential("payload.size"), explicit("batch.size")],
)
meter = delta.get_meter("tierdb.test")
meter.create_counter("bytes.out", unit="By").add(100, {"peer": "b"})
size = meter.create_histogram("payload.size", unit="By")
batch = meter.create_histogram("batch.size", unit="{item}")
record(size, "payload.size", 150)
record(batch, "batch.size", 150)
delta.force_flush()
record(size, "payload.size", 150)
record(batch, "batch.size", 150)
delta.force_flush()


def attribute(key, value):
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def summary(now, count, total):
    return metrics_service_pb2.ExportMetricsServiceRequest(
        resource_metrics=[
            metrics_pb2.ResourceMetrics(
                resource=resource_pb2.Resource(
                    attributes=[attribute("service.name", "otlp-test"), attribute("service.instance.id", "i-1")]
                ),
                scope_metrics=[
                    metrics_pb2.ScopeMetrics(
                        metrics=[
                            metrics_pb2.Metric(
                                name="rpc.latency",
                                unit="s",
                                summary=metrics_pb2.Summary(
                                    data_points=[
                                        metrics_pb2.SummaryDataPoint(
                                            time_unix_nano=now,
                                            count=count,
                                            sum=total,
                                            quantile_values=[
                                                metrics_pb2.SummaryDataPoint.ValueAtQuantile(
                                                    quantile=0.5, value=0.5
                                                ),
                                                metrics_pb2.SummaryDataPoint.ValueAtQuantile(
                                                    quantile=0.99, value=1.25
                                                ),
                                            ],
                                        )
                                    ]
                                ),
                            )
                        ]
                    )
                ],
            )
        ]
    )


def post(request):
    return requests.post(
        endpoint,
        data=request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )


# Twice, a second apart inside the minute before this one, so both land in one 1m bucket
# whatever the clock: `_count` and `_sum` are cumulative counters (increases 6 and 5.5).
MINUTE = 60_000_000_000
previous_minute = time.time_ns() // MINUTE * MINUTE - MINUTE
post(summary(previous_minute + 10_000_000_000, 4, 2.5))
answer = post(summary(previous_minute + 11_000_000_000, 10, 8.0))
response = metrics_service_pb2.ExportMetricsServiceResponse()
response.ParseFromString(answer.content)
print(
    json.dumps(
        {
            "exports": RecordingExporter.results,
            "summary_status": answer.status_code,
            "summary_content_type": answer.headers.get("Content-Type"),
            "summary_partial": response.HasField("partial_success"),
            "recorded": recorded,
            "bounds": bounds,
        }
    )
)
