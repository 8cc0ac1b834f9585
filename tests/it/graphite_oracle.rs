//! tierdb's `/render` against the real graphite-web (Debian's 1.1.8) on the same samples.
//!
//! The samples go to a tierdb test server through its JSON write endpoint and, with
//! python3-whisper, to whisper files of archives matching tierdb's default tiers; graphite-web
//! renders those files through its own Django app in one Python process
//! (tests/it/graphite_oracle.py, a temporary directory, no service). Every target below is
//! rendered by both, over ranges read from the 1m, 5m and 1h tiers (archives), and the answers
//! must be equal: the same series in the same order, the same names and timestamps, and
//! values within 1e-9 relative (1e-12 absolute near zero), nulls in the same places.
//!
//! The workload has gaps (whole 5-minute blocks, so that whisper's averages of averages are
//! the exact averages tierdb keeps), a series with no data in the recent ranges, negative
//! values and zeros, and a raw counter with resets kept as a gauge. Samples are one per
//! bucket of the finest archive that holds them (one a minute for the last 46 hours, one per
//! 5 minutes back to 13 days, one an hour before 15 days), because whisper keeps the last
//! sample of a slot where tierdb merges them all.
//!
//! Where tierdb differs by design, the test says so and checks tierdb's own rule instead:
//! a counter (`"kind": "counter"`) renders its stored increases, which graphite-web's
//! `nonNegativeDerivative` of the raw counter equals except at a reset (graphite-web: null;
//! tierdb: the value counted from zero), and `randomWalk`'s values are tierdb's own.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::process::ensure_programs;
use crate::support::server::TestServer;

const GRAPHITE_WEB: &str = "/usr/lib/python3/dist-packages/graphite/render/functions.py";
const WHISPER: &str = "/usr/lib/python3/dist-packages/whisper.py";
/// Debian's Python, which graphite-web's package installs into.
const PYTHON: &str = "/usr/bin/python3";

const MINUTE: i64 = 60;
const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

/// whisper archives as tierdb's default tiers: 1m for 48 h, 5m for 14 d, 1h for 90 d.
const ARCHIVES: [(i64, i64); 3] = [(60, 2880), (300, 4032), (3600, 2160)];

/// Each series' samples by its name.
type Workload = BTreeMap<String, Vec<(i64, f64)>>;

/// The value of gauge `name` at minute `m` (unix minutes), `None` for a gap.
fn gauge(name: &str, m: i64) -> Option<f64> {
    let block = m / 5;
    Some(match name {
        "servers.web1.cpu" => 1.0 + (m % 17) as f64 * 0.25,
        // Negative values and zeros, for absolute, divideSeries and the filters.
        "servers.web2.cpu" => ((m * 7) % 23) as f64 * 0.5 - 3.0,
        "servers.db1.cpu" if block % 7 == 3 => return None,
        "servers.db1.cpu" => 10.0 + (m % 5) as f64,
        "servers.web1.mem" => 100.0 + (m % 13) as f64,
        "servers.web2.mem" if block % 11 == 4 => return None,
        "servers.web2.mem" => 50.0 + (m % 7) as f64 * 2.0,
        "servers.db1.mem" => 200.0 - (m % 9) as f64,
        // A raw counter kept as a gauge, reset to 0 every 1000 minutes.
        "net.bytes" => 600.0 * (m % 1000) as f64,
        // Written to whisper with aggregationMethod `last` ([`LAST_FILES`]), with gaps.
        "sensors.room.temp" if block % 9 == 5 => return None,
        "sensors.room.temp" => 20.0 + ((m * 3) % 11) as f64 * 0.5,
        _ => unreachable!("{name}"),
    })
}

const GAUGES: [&str; 8] = [
    "servers.web1.cpu",
    "servers.web2.cpu",
    "servers.db1.cpu",
    "servers.web1.mem",
    "servers.web2.mem",
    "servers.db1.mem",
    "net.bytes",
    "sensors.room.temp",
];

/// The series whose whisper file graphite-web reads has aggregationMethod `last` (every
/// other is `average`): each of its points, in every archive, is the last sample of its
/// interval, what tierdb's `consolidateBy('last')` shows of a bucket ([`LATEST`]).
const LAST_FILES: [&str; 1] = ["sensors.room.temp"];

/// The sample times: one an hour from 35 to 15 days back, one per 5 minutes from 13 days
/// to 47 hours back, one a minute for the last 46 hours (the gaps between the regions keep
/// every sample inside the archive whisper writes it to).
fn sample_times() -> Vec<i64> {
    let mut times = Vec::new();
    times.extend((NOW - 35 * DAY..NOW - 15 * DAY).step_by(HOUR as usize));
    times.extend((NOW - 13 * DAY..NOW - 47 * HOUR).step_by(300));
    times.extend((NOW - 46 * HOUR..NOW).step_by(MINUTE as usize));
    times
}

/// Every series' samples: the gauges, `archive.old.cpu` (only more than 15 days back, so
/// empty in the recent ranges) and `net.requests`, a raw counter that resets every 150
/// minutes (written to tierdb as a counter).
fn workload() -> Workload {
    let mut series = BTreeMap::new();
    let times = sample_times();
    for name in GAUGES {
        let points = (times.iter())
            .filter_map(|&t| gauge(name, t / MINUTE).map(|v| (t, v)))
            .collect();
        series.insert(name.to_owned(), points);
    }
    let old = (times.iter())
        .filter(|&&t| t < NOW - 15 * DAY)
        .map(|&t| (t, ((t / HOUR) % 5) as f64))
        .collect();
    series.insert("archive.old.cpu".to_owned(), old);
    let requests = (times.iter())
        .filter(|&&t| t >= NOW - 46 * HOUR)
        .map(|&t| (t, 1200.0 * ((t / MINUTE) % 150 + 1) as f64))
        .collect();
    series.insert("net.requests".to_owned(), requests);
    for (name, value) in TAGGED {
        let points = (times.iter())
            .filter_map(|&t| value(t / MINUTE).map(|v| (t, v)))
            .collect();
        series.insert(name.to_owned(), points);
    }
    series
}

/// Tagged series (Graphite 1.1's `name;tag=value`, tags sorted as both store them) and
/// their values at minute `m`.
type Gauge = fn(i64) -> Option<f64>;
const TAGGED: [(&str, Gauge); 4] = [
    ("cpu.load;host=a", |m| Some((m % 11) as f64 * 0.5)),
    ("cpu.load;host=b", |m| Some(5.0 + (m % 3) as f64)),
    ("cpu.load;dc=x;host=c", |m| {
        ((m / 5) % 5 != 2).then_some(7.0 - (m % 4) as f64 * 0.25)
    }),
    ("disk.used;dev=sda;host=a", |m| {
        Some(100.0 + (m % 17) as f64)
    }),
];

/// A tierdb server holding [`workload`].
fn tierdb_with(series: &Workload) -> TestServer {
    let server = TestServer::start(None, Limits::default());
    let mut samples = Vec::new();
    for (path, points) in series {
        let mut parts = path.split(';');
        let name = parts.next().unwrap();
        let tags: BTreeMap<&str, &str> = parts.map(|kv| kv.split_once('=').unwrap()).collect();
        for &(ts, value) in points {
            let mut sample = json!({"series": name, "tags": tags, "ts": ts, "value": value});
            if name == "net.requests" {
                sample["kind"] = json!("counter");
            }
            samples.push(sample);
        }
    }
    let body = serde_json::to_vec(&samples).unwrap();
    let (status, text) = server.request("POST", "/api/v1/write", &[], &body);
    assert_eq!(status, 204, "{text}");
    server
}

/// One render both answer.
struct Request {
    targets: Vec<String>,
    from: i64,
    until: i64,
    max_data_points: Option<u32>,
    /// `format`, when not json.
    format: Option<&'static str>,
    /// `from` and `until` as graphite-web's time words, in place of `from` and `until`.
    words: Option<(&'static str, &'static str)>,
    /// graphite-web's `now` parameter, the time `from` and `until` are counted from.
    now: Option<&'static str>,
    /// graphite-web's `jsonp` parameter, the name of the callback the answer is wrapped in.
    jsonp: Option<&'static str>,
}

impl Request {
    /// `from` and `until` as sent.
    fn times(&self) -> (String, String) {
        match self.words {
            Some((from, until)) => (from.to_owned(), until.to_owned()),
            None => (self.from.to_string(), self.until.to_string()),
        }
    }
}

/// The ranges read from each tier: the last 3 hours (1m), the last 3 days (5m, both sample
/// regions) and 30 to 10 days back (1h, hourly and 5-minute samples).
const RANGES: [(&str, i64, i64); 3] = [
    ("1m", NOW - 3 * HOUR, NOW),
    ("5m", NOW - 3 * DAY, NOW),
    ("1h", NOW - 30 * DAY, NOW - 10 * DAY),
];

/// Targets rendered over the 1m range: every function tierdb evaluates whose values can
/// equal graphite-web's, most of them in more than one argument form.
const TARGETS: &[&str] = &[
    // Paths.
    "servers.*.cpu",
    "servers.{web1,db1}.*",
    "archive.old.cpu",
    // Combine.
    "sumSeries(servers.*.cpu)",
    "sum(servers.*.cpu, servers.db1.mem)",
    "averageSeries(servers.*.cpu)",
    "avg(servers.*.mem)",
    "minSeries(servers.*.cpu)",
    "maxSeries(servers.*.mem)",
    "diffSeries(servers.web1.cpu, servers.web2.cpu)",
    "multiplySeries(servers.web*.cpu)",
    "multiplySeries(servers.web1.cpu)",
    "stddevSeries(servers.*.cpu)",
    "rangeOfSeries(servers.*.cpu)",
    "countSeries(servers.*.cpu)",
    "aggregate(servers.*.cpu, \"median\")",
    "aggregate(servers.*.cpu, \"avg_zero\")",
    "aggregate(servers.*.mem, \"last\")",
    "aggregate(servers.*.mem, \"count\")",
    "aggregate(servers.*.cpu, \"maxSeries\")",
    "aggregate(servers.*.cpu, \"diff\")",
    "aggregate(servers.*.cpu, \"multiply\")",
    "aggregate(servers.*.*, \"sum\", 0.9)",
    "aggregateSeriesLists(servers.*.cpu, servers.*.mem, \"max\", 1)",
    "percentileOfSeries(servers.*.cpu, 50)",
    "percentileOfSeries(servers.*.mem, 75, true)",
    "sumSeriesWithWildcards(servers.*.cpu, 1)",
    "averageSeriesWithWildcards(servers.*.*, 1)",
    "multiplySeriesWithWildcards(servers.*.cpu, 1)",
    "aggregateWithWildcards(servers.*.*, \"max\", 1)",
    "groupByNode(servers.*.*, 2, \"sum\")",
    "groupByNode(servers.*.*, 1)",
    "groupByNode(servers.*.*, -1, \"sumSeries\")",
    "groupByNode(servers.*.*, 2, \"countSeries\")",
    "groupByNodes(servers.*.*, \"max\", 1, 2)",
    "groupByNodes(servers.*.*, \"averageSeries\", 2)",
    "divideSeries(servers.web1.cpu, servers.db1.cpu)",
    "divideSeries(servers.*.cpu, servers.web2.cpu)",
    "divideSeries(servers.web1.cpu, nothing.here)",
    "divideSeriesLists(servers.web*.cpu, servers.web*.mem)",
    "sumSeriesLists(servers.web*.cpu, servers.web*.mem)",
    "diffSeriesLists(servers.web*.cpu, servers.web*.mem)",
    "multiplySeriesLists(servers.web*.cpu, servers.web*.mem)",
    "aggregateSeriesLists(servers.web*.cpu, servers.web*.mem, \"avg\")",
    "asPercent(servers.*.cpu)",
    "asPercent(servers.web1.cpu, servers.web2.mem)",
    "asPercent(servers.*.cpu, 100)",
    "asPercent(servers.web*.cpu, servers.web*.mem)",
    "asPercent(servers.*.*, None, 2)",
    "pct(servers.*.mem)",
    "group(servers.web1.cpu, net.bytes)",
    "powSeries(scale(servers.web1.cpu, 0.5), servers.web2.cpu)",
    "weightedAverage(servers.*.cpu, servers.*.mem, 1)",
    "applyByNode(servers.*.cpu, 1, \"sumSeries(%.*)\")",
    "applyByNode(servers.*.cpu, 1, \"sumSeries(%.*)\", \"%.total\")",
    // Transform.
    "scale(servers.web1.cpu, 2.5)",
    "offset(servers.web2.cpu, -1)",
    "add(servers.web2.cpu, 3)",
    "absolute(servers.web2.cpu)",
    "pow(servers.web2.cpu, 2)",
    "squareRoot(servers.web2.cpu)",
    "invert(servers.web2.cpu)",
    "log(servers.web1.cpu)",
    "log(servers.web1.mem, 2)",
    "exp(scale(servers.web1.cpu, 0.1))",
    "sigmoid(servers.web2.cpu)",
    "logit(scale(servers.web1.cpu, 0.1))",
    "round(scale(servers.web1.cpu, 0.3), 1)",
    "round(scale(servers.web1.cpu, 0.3))",
    "derivative(net.bytes)",
    "derivative(servers.db1.cpu)",
    "integral(servers.db1.cpu)",
    "perSecond(net.bytes)",
    "nonNegativeDerivative(net.bytes)",
    "delay(servers.web1.cpu, 2)",
    "delay(servers.web1.cpu, -3)",
    "timeShift(servers.web1.cpu, \"1h\")",
    "timeShift(servers.web1.cpu, \"-30min\")",
    "timeShift(servers.db1.cpu, \"+2h\", false)",
    "timeStack(servers.web1.cpu, \"1h\", 0, 3)",
    "transformNull(servers.db1.cpu)",
    "transformNull(servers.db1.cpu, -1.5)",
    "transformNull(servers.db1.cpu, 0, servers.web2.mem)",
    "keepLastValue(servers.db1.cpu)",
    "keepLastValue(servers.db1.cpu, 3)",
    "interpolate(servers.db1.cpu)",
    "interpolate(servers.db1.cpu, 2)",
    "changed(servers.web2.cpu)",
    "isNonNull(servers.db1.cpu)",
    "minMax(servers.web2.cpu)",
    "offsetToZero(servers.web2.cpu)",
    "hitcount(servers.web1.cpu, \"5min\")",
    "hitcount(servers.db1.cpu, \"7min\")",
    "hitcount(servers.web1.cpu, \"1h\", true)",
    "summarize(servers.db1.cpu, \"10min\")",
    "summarize(servers.db1.cpu, \"10min\", \"avg\")",
    "summarize(servers.web2.cpu, \"1h\", \"max\", true)",
    "summarize(servers.web2.cpu, \"13min\", \"median\")",
    "integralByInterval(servers.web1.cpu, \"1h\")",
    "smartSummarize(servers.db1.cpu, \"10min\")",
    "smartSummarize(servers.web1.cpu, \"7min\", \"max\")",
    "smartSummarize(servers.web2.cpu, \"1h\", \"avg\", \"hours\")",
    "scaleToSeconds(servers.web1.cpu, 1)",
    // Calculate.
    "movingAverage(servers.db1.cpu, 5)",
    "movingAverage(servers.db1.cpu, \"10min\")",
    "movingAverage(servers.db1.cpu, 5, 0.8)",
    "movingSum(servers.web1.cpu, 3)",
    "movingMin(servers.web2.cpu, \"7min\")",
    "movingMax(servers.web2.cpu, 4)",
    "movingMedian(servers.db1.cpu, 4)",
    "movingWindow(servers.db1.cpu, 6, \"avg_zero\")",
    "movingWindow(servers.web1.mem, \"1h\", \"stddev\")",
    "exponentialMovingAverage(servers.web1.cpu, 5)",
    "exponentialMovingAverage(servers.db1.cpu, \"5min\")",
    "nPercentile(servers.*.cpu, 90)",
    "stdev(servers.web2.cpu, 5)",
    "stdev(servers.db1.cpu, 10, 0.5)",
    "linearRegression(servers.web1.mem)",
    "holtWintersForecast(servers.web1.cpu, \"1h\", \"20min\")",
    "holtWintersForecast(servers.db1.cpu)",
    "holtWintersConfidenceBands(servers.web1.cpu, 3, \"1h\", \"20min\")",
    "holtWintersConfidenceArea(servers.web2.cpu, 2, \"90min\", \"30min\")",
    "holtWintersAberration(servers.db1.cpu, 2, \"2h\", \"30min\")",
    "aggregateLine(servers.web1.cpu)",
    "aggregateLine(servers.db1.cpu, \"max\", true)",
    // Filter and sort.
    "highestCurrent(servers.*.cpu, 2)",
    "highestMax(servers.*.*, 1)",
    "highestAverage(servers.*.*, 2)",
    "lowestCurrent(servers.*.cpu, 2)",
    "lowestAverage(servers.*.*, 2)",
    "highest(servers.*.*, 3, \"sum\")",
    "lowest(servers.*.*, 2, \"max\")",
    "currentAbove(servers.*.*, 5)",
    "currentBelow(servers.*.*, 5)",
    "averageAbove(servers.*.*, 11)",
    "averageBelow(servers.*.*, 11)",
    "maximumAbove(servers.*.cpu, 5)",
    "maximumBelow(servers.*.cpu, 5)",
    "minimumAbove(servers.*.*, 0)",
    "minimumBelow(servers.*.*, 0)",
    "filterSeries(servers.*.cpu, \"max\", \">\", 5)",
    "filterSeries(servers.*.*, \"sum\", \"<=\", 2000)",
    "limit(servers.*.*, 2)",
    "exclude(servers.*.*, \"web\")",
    "grep(servers.*.*, \"mem$\")",
    "removeAboveValue(servers.web2.cpu, 4)",
    "removeBelowValue(servers.web2.cpu, 0)",
    "removeAbovePercentile(servers.web1.cpu, 80)",
    "removeBelowPercentile(servers.web1.cpu, 20)",
    "removeEmptySeries(archive.old.cpu)",
    "removeEmptySeries(servers.db1.cpu, 0.9)",
    "mostDeviant(servers.*.*, 2)",
    "sortByMaxima(servers.*.*)",
    "sortByMinima(servers.*.*)",
    "sortByTotal(servers.*.*)",
    "sortByName(servers.*.*, false, true)",
    "sortByName(servers.*.*, true)",
    "sortBy(servers.*.cpu, \"max\", true)",
    "unique(servers.web1.cpu, servers.web*.cpu)",
    "fallbackSeries(nothing.here, servers.web1.cpu)",
    "averageOutsidePercentile(servers.*.*, 25)",
    // Alias and special.
    "alias(servers.web1.cpu, \"web one\")",
    "aliasSub(servers.*.cpu, \"servers\\.(\\w+)\\.cpu\", \"\\1 busy\")",
    "aliasByNode(servers.*.cpu, 1)",
    "aliasByNode(servers.*.cpu, -2, 0)",
    "aliasByNode(scale(servers.*.cpu, 2), 1)",
    "aliasByTags(servers.*.cpu, 1, \"name\")",
    "aliasByMetric(servers.*.cpu)",
    "aliasByMetric(scale(servers.web1.cpu, 2))",
    "legendValue(servers.web1.cpu, \"avg\", \"max\", \"count\", \"nope\")",
    "cactiStyle(servers.*.cpu)",
    "cactiStyle(servers.*.mem, None, \"MB\")",
    "substr(servers.web1.cpu, 1)",
    "substr(scale(servers.web1.cpu, 2), 0, 2)",
    "consolidateBy(servers.web1.cpu, \"max\")",
    "cumulative(servers.web1.cpu)",
    "color(servers.web1.cpu, \"red\")",
    "alpha(servers.web1.cpu, 0.5)",
    "lineWidth(servers.web1.cpu, 2)",
    "dashed(servers.web1.cpu)",
    "secondYAxis(servers.web1.cpu)",
    "drawAsInfinite(servers.web1.cpu)",
    "stacked(servers.*.cpu)",
    "areaBetween(servers.{web1,web2}.cpu)",
    "threshold(5, \"limit\")",
    "constantLine(42.5)",
    "sinFunction(\"sine\", 2)",
    "timeFunction(\"t\", 300)",
    "identity(\"id\")",
    "sin(\"s\")",
    "time(\"t2\", 120)",
    // Tags: tagged paths, seriesByTag's grammar, and the functions naming by tags.
    "cpu.load;host=a",
    "seriesByTag('name=cpu.load')",
    "seriesByTag('host=~[ab]')",
    "seriesByTag('name=cpu.load', 'host!=a')",
    "seriesByTag('name=~cpu', 'dc!=x')",
    "seriesByTag('name=~disk|cpu', 'host!=~[bc]')",
    "seriesByTag('dc=x')",
    "seriesByTag('name=cpu.load', 'dc=')",
    "sumSeries(seriesByTag('name=cpu.load'))",
    "aliasByTags(seriesByTag('name=cpu.load'), 'host')",
    "aliasByTags(seriesByTag('host=a'), 'name', 'host')",
    "aliasByNode(seriesByTag('name=cpu.load'), 0, 'host')",
    "groupByTags(seriesByTag('host=a'), 'sum', 'host')",
    "groupByTags(seriesByTag('name=cpu.load'), 'max', 'name')",
    "groupByTags(seriesByTag('dc=x'), 'avg', 'dc')",
    "groupByTags(seriesByTag('name=~cpu|disk', 'host=a'), 'sumSeries', 'host', 'name')",
    // Map and reduce.
    "reduceSeries(mapSeries(servers.*.*, 1), \"asPercent\", 2, \"cpu\", \"mem\")",
    "reduce(map(servers.*.*, 1), \"divideSeries\", 2, \"mem\", \"cpu\")",
    "reduceSeries(mapSeries(servers.*.*, 1), \"sumSeries\", -1, \"mem\", \"cpu\")",
    // aliasQuery: names from the last value of another series.
    "aliasQuery(servers.web*.cpu, \"servers\\.(\\w+)\\.cpu\", \"servers.\\1.mem\", \"mem %d\")",
    "aliasQuery(servers.db1.cpu, \"cpu\", \"mem\", \"%.2f MB\")",
    // xFilesFactor: the request's share of known points, set for what follows.
    "sumSeries(setXFilesFactor(servers.*.mem, 0.9))",
    "aggregate(xFilesFactor(servers.*.cpu, 0.5), \"avg\")",
    "movingAverage(setXFilesFactor(servers.db1.cpu, 0.7), 5)",
    "summarize(xFilesFactor(servers.db1.cpu, 0.5), \"13min\", \"avg\")",
    "smartSummarize(xFilesFactor(servers.db1.cpu, 0.8), \"10min\")",
    // Keyword arguments.
    "summarize(servers.db1.cpu, \"10min\", func=\"max\")",
    "summarize(servers.web2.cpu, \"1h\", alignToFrom=true)",
    "alias(servers.web1.cpu, newName=\"a\")",
    "movingWindow(servers.db1.cpu, 5, xFilesFactor=0.5)",
    "aggregate(servers.*.cpu, func = \"max\")",
    // Unit systems.
    "legendValue(servers.web1.mem, \"avg\", \"max\", \"si\")",
    "legendValue(scale(servers.web1.mem, 1000), \"last\", \"nope\", \"binary\")",
    "legendValue(scale(servers.web1.mem, 1000), \"si\", \"avg\")",
    "cactiStyle(scale(servers.*.mem, 1500), \"si\")",
    "cactiStyle(scale(servers.*.mem, 2048), \"binary\", \"B\")",
    // Empty series lists.
    "sumSeries(nothing.*)",
    "movingAverage(nothing.*, 5)",
    "groupByNode(nothing.*, 1, \"sum\")",
    "highestCurrent(nothing.*, 2)",
];

/// Targets rendered over every range, including the 5m and 1h ones.
const EVERY_TIER: &[&str] = &[
    "servers.*.*",
    "sumSeries(servers.*.cpu)",
    "groupByNode(servers.*.*, 2, \"sum\")",
    "aliasByNode(servers.*.mem, 1)",
    "movingAverage(servers.db1.cpu, \"1h\")",
    "movingAverage(servers.web2.mem, 3)",
    "summarize(servers.db1.cpu, \"1d\", \"sum\")",
    "perSecond(net.bytes)",
    "hitcount(servers.web1.cpu, \"6h\")",
    "asPercent(servers.*.cpu)",
    "keepLastValue(servers.db1.cpu)",
    "highestMax(servers.*.*, 2)",
    "timeShift(servers.web1.cpu, \"1d\")",
    "archive.old.cpu",
];

/// Targets rendered over the 1m range without its last point (the unwritten minute of the
/// clock), so that their series hold no null: graphite-web 1.1.8 on Python 3 fails comparing a
/// null in these.
const WITHOUT_NULLS: &[&str] = &[
    "removeBetweenPercentile(group(servers.web*.cpu, servers.*1.mem), 30)",
    "useSeriesAbove(servers.web*.cpu, 4, \"cpu\", \"mem\")",
];

/// Arguments in forms graphite-web takes beside its declared types (its default
/// `ENFORCE_INPUT_VALIDATION = False`), as real dashboards write them: booleans as strings,
/// numbers and `None`; numbers quoted (template variables); a consolidation name that names
/// nothing (Ceph's dashboards), harmless under a series function.
const LENIENT: &[&str] = &[
    "aliasByNode(sortByName(servers.*.cpu, 'true'), 1)",
    "sortByName(servers.*.*, 'true')",
    "sortByName(servers.*.*, 'FALSE', 1)",
    "sortByName(servers.*.*, 'yes', 2)",
    "sortBy(servers.*.cpu, \"max\", 2)",
    "sortBy(servers.*.cpu, \"max\", 'true')",
    "maxSeries(consolidateBy(keepLastValue(servers.*.cpu),\"maxSeries\"))",
    "consolidateBy(servers.web1.cpu, \"maxSeries\")",
    "summarize(servers.db1.cpu, \"10min\", 'sum', 'yes')",
    "summarize(servers.db1.cpu, \"10min\", 'sum', 'false')",
    "hitcount(servers.web1.cpu, \"5min\", 0.5)",
    "timeShift(servers.web1.cpu, \"1h\", None)",
    "aggregateLine(servers.web1.cpu, 'average', 'true')",
    "percentileOfSeries(servers.*.cpu, 50, '')",
    "percentileOfSeries(servers.*.mem, 75, 2)",
    "scale(servers.web1.cpu, '2')",
    "scale(servers.web1.cpu, true)",
    "removeBelowValue(servers.web2.cpu, ' 1.5 ')",
    "highestMax(servers.*.*, '2')",
    "limit(servers.*.*, true)",
    "substr(servers.web1.cpu, '1', 0)",
    "keepLastValue(servers.db1.cpu, '2')",
    "movingAverage(servers.db1.cpu, 5, '0.5')",
    "round(scale(servers.web1.cpu, 0.3), '1')",
    // graphite-web's keywords in any case.
    "sortByName(servers.*.*, True)",
    "keepLastValue(servers.db1.cpu, INF)",
    "percentileOfSeries(servers.*.cpu, 50, NONE)",
    "timeShift(servers.web1.cpu, \"1h\", none)",
    // One argument not of its type and graphite-web converts none of the call's: 'false' is
    // then a non-empty string, true (resetEnd drops what a shift forward moves past the end).
    "timeShift(servers.web1.cpu, \"+30min\", 'false', 'yes')",
    "timeShift(servers.web1.cpu, \"+30min\", 'false')",
    "timeShift(servers.web1.cpu, \"+30min\", 'False', False)",
    "sortByName(servers.*.*, 'yes', 0)",
    "summarize(servers.db1.cpu, \"10min\", 'sum', 'FALSE')",
    // Intervals in graphite-web's units by their start, one sign for every term.
    "movingAverage(servers.db1.cpu, \"1hr\")",
    "summarize(servers.db1.cpu, \"1h30min\", \"max\")",
    "hitcount(servers.web1.cpu, \"2hrs\")",
    "timeShift(servers.web2.cpu, \"-1h30min\")",
];

/// Arguments outside their declared types that graphite-web's validation hands its function
/// unconverted, and its Python reads as its types allow (`scripts/graphite-argument-forms.py`
/// finds them): a count as `int()` cuts it, a window of no points, a position or node that
/// is no whole number, `None` as "all" or "none given", a bare value as a name.
const UNCONVERTED: &[&str] = &[
    "movingAverage(servers.db1.cpu, 2.5)",
    "movingMax(servers.web1.cpu, 0)",
    "movingWindow(servers.web2.cpu, 0.5, 'median')",
    "exponentialMovingAverage(servers.db1.cpu, 3.9)",
    "stdev(servers.web1.cpu, 0)",
    "sumSeriesWithWildcards(servers.*.cpu, 'abc')",
    "averageSeriesWithWildcards(servers.*.cpu, None)",
    "aggregateWithWildcards(servers.*.*, 'max', 2.5, 1)",
    "multiplySeriesWithWildcards(servers.*.cpu, 'true')",
    "highestMax(servers.*.*, 2.5)",
    "lowestAverage(servers.*.cpu, 1.9)",
    "limit(servers.*.*, None)",
    "mostDeviant(servers.*.*, None)",
    "round(scale(servers.web1.cpu, 0.3), None)",
    "substr(servers.web1.cpu, 1.5)",
    "timeStack(servers.web1.cpu, '10min', 0, 2.5)",
    "aliasByNode(servers.*.cpu, 2.5, 1)",
    "groupByNode(servers.*.cpu, 2.5)",
    "constantLine(None)",
    "threshold(None, 'limit')",
    "holtWintersForecast(servers.web1.cpu, None)",
    "holtWintersConfidenceBands(servers.db1.cpu, 2, 0)",
    "filterSeries(servers.*.cpu, 'max', '!=', 'abc')",
    "filterSeries(servers.*.cpu, 'max', '=', None)",
    "asPercent(servers.web1.cpu, true)",
    "applyByNode(servers.*.cpu, 1, 'sumSeries(%.*)', None)",
    // A target that reads as a number is a path in graphite-web's grammar.
    "applyByNode(servers.*.cpu, 1, '5')",
    "consolidateBy(servers.web1.cpu, 5)",
    "legendValue(servers.web1.cpu, 'avg', None)",
    "legendValue(servers.web1.cpu, 5, 'si')",
    "cactiStyle(servers.web1.cpu, 'binary', 5)",
    "cactiStyle(servers.*.cpu, 0, 'b')",
    "stacked(servers.web1.cpu, 5)",
];

/// Targets graphite-web answers with 200 by accident, which tierdb refuses (400): a window
/// of -1 points, which Python's slicing reads from the end of the series (the first point is
/// the average of the range's points but its first and last, the rest null);
/// exponentialMovingAverage's window of 0 (a constant of 2, which doubles each value and
/// subtracts the last average); a number in place of aliasQuery's format, which Python's `%`
/// takes as a modulo; a string where a number is declared that graphite-web keeps in the
/// series (`constantLine('abc')` draws the word) or compares only once a gap or a
/// consolidation comes (interpolate's limit, setXFilesFactor's, `None` there too:
/// graphite-web fails as soon as the series is consolidated); a step of 2.5 seconds, whose
/// points graphite-web stamps every 2.
const ACCIDENTS: &[&str] = &[
    "movingAverage(servers.db1.cpu, -1)",
    "exponentialMovingAverage(servers.db1.cpu, 0)",
    "aliasQuery(servers.web1.cpu, 'web1', 'web2', 5)",
    "constantLine('abc')",
    "interpolate(servers.web1.cpu, 'abc')",
    "setXFilesFactor(servers.web1.cpu, 'abc')",
    "xFilesFactor(servers.web1.cpu, None)",
    "sinFunction('x', 2, 2.5)",
];

/// Targets both refuse (graphite-web fails with a 500, tierdb answers 400 saying why): a
/// quoted number or boolean that graphite-web hands its function as a string, since another
/// argument of the call is not of its type.
const REFUSED: &[&str] = &[
    "percentileOfSeries(servers.*.cpu, '50', 'yes')",
    "sortByName(servers.*.*, 'yes', 'false')",
    "substr(servers.web1.cpu, '1', 'x')",
];

/// Requests with consolidation to maxDataPoints: graphite-web's nudge and `consolidateBy`.
const CONSOLIDATED: &[(&str, u32)] = &[
    ("servers.*.cpu", 50),
    ("consolidateBy(servers.web1.cpu, \"max\")", 50),
    ("consolidateBy(servers.web2.cpu, \"min\")", 47),
    ("consolidateBy(servers.db1.cpu, \"sum\")", 50),
    ("consolidateBy(servers.db1.cpu, \"first\")", 33),
    ("consolidateBy(servers.db1.cpu, \"last\")", 33),
    ("cumulative(servers.web1.cpu)", 20),
    (
        "maxSeries(consolidateBy(keepLastValue(servers.*.cpu),\"maxSeries\"))",
        50,
    ),
    ("movingAverage(servers.db1.cpu, 5)", 40),
    ("sumSeries(servers.*.cpu)", 1),
    ("xFilesFactor(servers.db1.cpu, 0.9)", 50),
    ("hitcount(xFilesFactor(servers.db1.cpu, 0.5), \"7min\")", 10),
    ("events(\"*\")", 100),
    // One point a second, more than tierdb's default budget, all of them kept.
    ("events(\"deploy\", \"release\")", 20_000),
];

/// Targets rendered over every range, with and without consolidation to `maxDataPoints`,
/// whose points are the last sample of their interval in both: `consolidateBy('last')` of a
/// stored gauge takes its buckets' latest samples, and graphite-web reads a whisper file
/// whose aggregationMethod is `last` ([`LAST_FILES`]). The 5m and 1h ranges read buckets of
/// several samples, whose average would differ.
const LATEST: &[&str] = &[
    "consolidateBy(sensors.room.temp, \"last\")",
    "alias(consolidateBy(sensors.room.temp, 'last'), 'room')",
];

/// Targets over the 1m range with times in their arguments: unix seconds, offsets and words
/// (graphite-web reads the last two from the clock graphite_oracle.py sets, the test's).
fn dated_targets() -> Vec<String> {
    let (_, from, until) = RANGES[0];
    vec![
        format!(
            "timeSlice(servers.web1.cpu, \"{}\", \"{}\")",
            from + 1800,
            from + 5400
        ),
        format!(
            "timeSlice(servers.db1.cpu, \"{}\", \"{until}\")",
            from + 3600
        ),
        format!("verticalLine(\"{}\", \"deploy\", \"red\")", from + 3600),
        // The line fitted over an earlier source range, drawn over the request's.
        format!(
            "linearRegression(servers.web1.mem, \"{}\")",
            from - 2 * HOUR
        ),
        format!(
            "linearRegression(servers.*.cpu, \"{}\", \"{}\")",
            from - 5 * HOUR,
            from - HOUR
        ),
        // startSourceAt and endSourceAt as dashboards write them.
        "linearRegression(servers.web1.mem, \"-3h\")".to_owned(),
        "linearRegression(servers.web1.mem, '-5h')".to_owned(),
        "linearRegression(servers.*.cpu, \"-6h\", \"-2h\")".to_owned(),
        "linearRegression(servers.db1.mem, \"noon yesterday\", \"midnight\")".to_owned(),
        "linearRegression(servers.web2.mem, \"-1d6h\", \"-1h30min\")".to_owned(),
        "timeSlice(servers.web1.cpu, \"-2h\", \"-1h\")".to_owned(),
        "linearRegression(servers.web1.cpu, None, \"-1h\")".to_owned(),
    ]
}

/// The tag API's requests, answered by both (graphite-web's `id` fields left out). `/tags/name`
/// is not among them: every tierdb series has the tag `name`, graphite-web's untagged ones
/// are not in its tag database.
const TAG_API: &[&str] = &[
    "/tags",
    "/tags?filter=d",
    "/tags/host",
    "/tags/dc",
    "/tags/host?filter=%5Ba%5D",
    "/tags/nope",
    "/tags/findSeries?expr=name%3Dcpu.load",
    "/tags/findSeries?expr=host%3D~%5Bab%5D&expr=name!%3Ddisk.used",
    "/tags/autoComplete/tags",
    "/tags/autoComplete/tags?tagPrefix=d",
    "/tags/autoComplete/tags?expr=name%3Dcpu.load",
    "/tags/autoComplete/values?tag=host",
    "/tags/autoComplete/values?tag=host&expr=name%3Dcpu.load&valuePrefix=b",
    "/tags/autoComplete/values?tag=dev&expr=host%3Da",
];

/// `value` without graphite-web's `id` fields.
fn without_ids(mut value: Value) -> Value {
    match &mut value {
        Value::Object(map) => {
            map.remove("id");
            for v in map.values_mut() {
                *v = without_ids(v.take());
            }
        }
        Value::Array(list) => {
            for v in list.iter_mut() {
                *v = without_ids(v.take());
            }
        }
        _ => {}
    }
    value
}

/// Runs graphite-web on `series` for `requests` and then GETs of `paths`, answering
/// `(status, body)` per request.
fn graphite_web(series: &Workload, requests: &[Request], paths: &[&str]) -> Vec<(u16, String)> {
    (graphite_web_typed(series, requests, paths).into_iter())
        .map(|(status, body, _)| (status, body))
        .collect()
}

/// [`graphite_web`]'s answers with their Content-Type: `(status, body, type)`, a msgpack
/// body in hex.
fn graphite_web_typed(
    series: &Workload,
    requests: &[Request],
    paths: &[&str],
) -> Vec<(u16, String, Option<String>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut spec_requests: Vec<Value> = (requests.iter())
        .map(|r| {
            let (from, until) = r.times();
            json!({
                "targets": r.targets,
                "from": from,
                "until": until,
                "maxDataPoints": r.max_data_points,
                "format": r.format,
                "now": r.now,
                "jsonp": r.jsonp,
            })
        })
        .collect();
    spec_requests.extend(paths.iter().map(|path| json!({"path": path})));
    let spec = json!({
        "dir": dir.path().join("graphite"),
        "now": NOW,
        "archives": ARCHIVES,
        "series": series,
        "aggregation": LAST_FILES.map(|name| (name, "last")).into_iter().collect::<BTreeMap<_, _>>(),
        "requests": spec_requests,
    });
    let spec_path = dir.path().join("spec.json");
    let answers_path = dir.path().join("answers.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/graphite_oracle.py");
    let output = Command::new(PYTHON)
        .arg(&script)
        .arg(&spec_path)
        .arg(&answers_path)
        .output()
        .expect("run python3");
    assert!(
        output.status.success(),
        "graphite-web failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Vec<Value> =
        serde_json::from_slice(&std::fs::read(&answers_path).unwrap()).unwrap();
    (answers.into_iter())
        .map(|a| {
            let status = a["status"].as_u64().unwrap() as u16;
            let kind = a["type"].as_str().map(str::to_owned);
            (status, a["body"].as_str().unwrap().to_owned(), kind)
        })
        .collect()
}

/// tierdb's answer to `request`.
fn tierdb(server: &TestServer, request: &Request) -> (u16, String) {
    let mut query: Vec<String> = (request.targets.iter())
        .map(|t| format!("target={}", encode(t)))
        .collect();
    let (from, until) = request.times();
    query.push(format!("from={}&until={}", encode(&from), encode(&until)));
    if let Some(max) = request.max_data_points {
        query.push(format!("maxDataPoints={max}"));
    }
    if let Some(format) = request.format {
        query.push(format!("format={format}"));
    }
    server.request(
        "POST",
        "/render",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        query.join("&").as_bytes(),
    )
}

/// Percent-encoding of a form value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Values equal within 1e-9 relative, or 1e-12 absolute (sums that cancel to about zero).
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) || (a - b).abs() <= 1e-12
}

/// What differs between graphite-web's answer and tierdb's, `None` when they are equal.
fn difference(graphite: &Value, ours: &Value) -> Option<String> {
    let (Some(theirs), Some(ours)) = (graphite.as_array(), ours.as_array()) else {
        return Some("not both arrays".into());
    };
    let names = |list: &[Value]| -> Vec<String> {
        list.iter()
            .map(|s| s["target"].as_str().unwrap_or("?").to_owned())
            .collect()
    };
    if names(theirs) != names(ours) {
        return Some(format!(
            "series: graphite-web {:?}, tierdb {:?}",
            names(theirs),
            names(ours)
        ));
    }
    for (g, t) in theirs.iter().zip(ours) {
        let (gp, tp) = (
            g["datapoints"].as_array().unwrap(),
            t["datapoints"].as_array().unwrap(),
        );
        let stamps =
            |p: &[Value]| -> Vec<i64> { p.iter().map(|p| p[1].as_i64().unwrap()).collect() };
        if stamps(gp) != stamps(tp) {
            let (gs, ts) = (stamps(gp), stamps(tp));
            return Some(format!(
                "{}: timestamps: graphite-web {} from {:?} to {:?}, tierdb {} from {:?} to {:?}",
                g["target"],
                gs.len(),
                gs.first(),
                gs.last(),
                ts.len(),
                ts.first(),
                ts.last()
            ));
        }
        for (gv, tv) in gp.iter().zip(tp) {
            let equal = match (gv[0].as_f64(), tv[0].as_f64()) {
                (None, None) => true,
                (Some(a), Some(b)) => close(a, b),
                _ => false,
            };
            if !equal {
                return Some(format!(
                    "{}: at {}: graphite-web {}, tierdb {}",
                    g["target"], gv[1], gv[0], tv[0]
                ));
            }
        }
    }
    None
}

/// Fails naming every request of `requests` whose answer differed from graphite-web's.
fn assert_none_differ(failures: &[String], requests: usize) {
    assert!(
        failures.is_empty(),
        "{} of {requests} requests differ from graphite-web 1.1.8:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The [`workload`] and a tierdb test server holding it, for a test against graphite-web;
/// `None` where graphite-web is missing and TIERDB_SKIP_E2E=1 skips the test.
fn workload_in_tierdb() -> Option<(Workload, TestServer)> {
    if !ensure_programs(
        &[Path::new(GRAPHITE_WEB), Path::new(WHISPER)],
        "graphite-web",
    ) {
        return None;
    }
    let series = workload();
    let server = tierdb_with(&series);
    Some((series, server))
}

#[test]
fn render_functions_equal_graphite_webs() {
    let Some((series, server)) = workload_in_tierdb() else {
        return;
    };
    let mut requests = Vec::new();
    let one = |targets: &[&str], (from, until): (i64, i64), max: Option<u32>| Request {
        targets: targets.iter().map(|t| t.to_string()).collect(),
        from,
        until,
        max_data_points: max,
        format: None,
        words: None,
        now: None,
        jsonp: None,
    };
    let (_, from, until) = RANGES[0];
    for target in TARGETS.iter().chain(LENIENT).chain(UNCONVERTED) {
        requests.push(one(&[target], (from, until), None));
    }
    for (_, from, until) in RANGES {
        for target in EVERY_TIER {
            requests.push(one(&[target], (from, until), None));
        }
    }
    for (target, max) in CONSOLIDATED {
        requests.push(one(&[target], (from, until), Some(*max)));
    }
    for (_, from, until) in RANGES {
        for target in LATEST {
            for max in [None, Some(100), Some(7)] {
                requests.push(one(&[target], (from, until), max));
            }
        }
    }
    for target in WITHOUT_NULLS {
        requests.push(one(&[target], (from, until - 2 * MINUTE), None));
    }
    let dated = dated_targets();
    for target in &dated {
        requests.push(one(&[target], (from, until), None));
    }
    // setXFilesFactor in one target sets the request's for the targets after it.
    requests.push(one(
        &[
            "xFilesFactor(servers.web1.cpu, 1)",
            "sumSeries(servers.*.mem)",
        ],
        (from, until),
        None,
    ));
    // A panel of several targets, consolidated together; and stacked's totals carried from
    // one target to the next, as graphite-web carries them.
    requests.push(one(
        &[
            "servers.web1.cpu",
            "movingAverage(servers.db1.cpu, 3)",
            "sumSeries(servers.*.mem)",
        ],
        (from, until),
        Some(60),
    ));
    requests.push(one(
        &["stacked(servers.web1.cpu)", "stacked(servers.web2.mem)"],
        (from, until),
        None,
    ));
    // A stack named by a bare value is graphite-web's dictionary key: 1 and true are one
    // stack, '1' another.
    requests.push(one(
        &[
            "stacked(servers.web1.cpu, 1)",
            "stacked(servers.web2.cpu, true)",
            "stacked(servers.db1.cpu, '1')",
        ],
        (from, until),
        None,
    ));
    let accidents_from = requests.len();
    for target in ACCIDENTS {
        requests.push(one(&[target], (from, until), None));
    }
    let refused_from = requests.len();
    for target in REFUSED {
        requests.push(one(&[target], (from, until), None));
    }
    let mut paths = vec!["/functions"];
    paths.extend(TAG_API);
    let mut theirs = graphite_web(&series, &requests, &paths);
    let tag_answers = theirs.split_off(requests.len() + 1);
    let (status, functions) = theirs.pop().unwrap();
    assert_eq!(status, 200, "graphite-web's /functions: {functions}");
    let mut failures = Vec::new();
    let mut compared = 0;
    for (index, (request, (status, body))) in requests.iter().zip(&theirs).enumerate() {
        let (our_status, our_body) = tierdb(&server, request);
        let what = format!(
            "{:?} from {} until {} maxDataPoints {:?}",
            request.targets, request.from, request.until, request.max_data_points
        );
        if (accidents_from..refused_from).contains(&index) {
            if *status != 200 || our_status != 400 {
                failures.push(format!(
                    "{what}: rendered by graphite-web by accident and refused by tierdb? \
                     graphite-web {status}, tierdb {our_status}: {our_body}"
                ));
            }
            compared += 1;
            continue;
        }
        if index >= refused_from {
            if *status == 200 || our_status != 400 {
                failures.push(format!(
                    "{what}: refused by both? graphite-web {status}, tierdb {our_status}: \
                     {our_body}"
                ));
            }
            compared += 1;
            continue;
        }
        if *status != 200 || our_status != 200 {
            failures.push(format!(
                "{what}: status graphite-web {status}, tierdb {our_status}: {}",
                if *status != 200 { body } else { &our_body }
            ));
            continue;
        }
        let (g, t): (Value, Value) = (
            serde_json::from_str(body).unwrap(),
            serde_json::from_str(&our_body).unwrap(),
        );
        compared += 1;
        if let Some(diff) = difference(&g, &t) {
            failures.push(format!("{what}: {diff}"));
        }
    }
    for (path, (status, body)) in TAG_API.iter().zip(&tag_answers) {
        let (our_status, our_body) = server.get(path);
        if (*status, our_status) != (200, 200) {
            failures.push(format!(
                "{path}: status graphite-web {status}, tierdb {our_status}: {body} {our_body}"
            ));
            continue;
        }
        let theirs = without_ids(serde_json::from_str(body).unwrap());
        let ours: Value = serde_json::from_str(&our_body).unwrap();
        if theirs != ours {
            failures.push(format!("{path}: graphite-web {theirs}, tierdb {ours}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} requests differ from graphite-web 1.1.8:\n{}",
        failures.len(),
        requests.len() + TAG_API.len(),
        failures.join("\n")
    );
    assert_eq!(compared, requests.len());

    // Every function tierdb lists is rendered above (or in the test of deliberate
    // differences), and graphite-web lists it with the same group and parameters.
    let ours = server.json("/functions");
    let ours = ours.as_object().unwrap();
    // graphite-web writes keepLastValue's default as a bare `Infinity`, which is not JSON
    // (Grafana patches it before parsing); tierdb writes the string "Infinity".
    let functions = functions.replace(": Infinity", ": \"Infinity\"");
    let theirs: Value = serde_json::from_str(&functions).unwrap();
    let rendered: Vec<&str> = (TARGETS.iter().chain(EVERY_TIER).chain(WITHOUT_NULLS))
        .chain(CONSOLIDATED.iter().map(|c| &c.0))
        .copied()
        .chain(dated.iter().map(String::as_str))
        .chain(["randomWalk(", "randomWalkFunction(", "stacked("])
        .collect();
    for (name, entry) in ours {
        let call = format!("{name}(");
        assert!(
            rendered.iter().any(|t| t.starts_with(&call)
                || t.contains(&format!("({call}"))
                || t.contains(&format!(" {call}"))
                || t.contains(&format!(",{call}"))),
            "{name} is dispatched but never rendered against graphite-web"
        );
        let graphite = &theirs[name];
        assert_eq!(entry["group"], graphite["group"], "{name}");
        let params = |e: &Value| -> Vec<Value> {
            (e["params"].as_array().unwrap().iter())
                .map(|p| {
                    let mut p = p.clone();
                    let p = p.as_object_mut().unwrap();
                    p.remove("suggestions");
                    // tierdb lists the callbacks it takes, graphite-web every series function.
                    if p["type"] == "aggOrSeriesFunc" {
                        p.remove("options");
                    }
                    // graphite-web lists legendValue's types and smartSummarize's alignments
                    // from its own tables.
                    if p["name"] == "valuesTypes" {
                        p.remove("options");
                    }
                    Value::Object(p.clone())
                })
                .collect()
        };
        assert_eq!(params(entry), params(graphite), "{name}'s parameters");
    }
}

/// What summarize reduces a window to, in [`deliberate_differences_follow_tierdbs_rules`].
enum AggFunc {
    Avg,
    Max,
    Min,
}

/// graphite-web's `_nonNegativeDelta` over `raw` with nulls skipped rather than compared
/// (graphite-web 1.1.8 on Python 3 fails comparing a null with a bound), divided by the step
/// and rounded to six decimals for perSecond.
fn bounded_rule(
    raw: &[Option<f64>],
    max: Option<f64>,
    min: Option<f64>,
    per_second: bool,
) -> Vec<Option<f64>> {
    let mut prev: Option<f64> = None;
    (raw.iter())
        .map(|&value| {
            if value.is_some_and(|v| max.is_some_and(|m| v > m) || min.is_some_and(|m| v < m)) {
                prev = None;
                return None;
            }
            let delta = match (prev, value) {
                (Some(p), Some(v)) if v >= p => Some(v - p),
                (Some(p), Some(v)) => match (max, min) {
                    (Some(m), _) => Some(m + 1.0 + v - p - min.unwrap_or(0.0)),
                    (None, Some(m)) => Some(v - m),
                    (None, None) => None,
                },
                _ => None,
            };
            prev = value;
            delta.map(|d| match per_second {
                true => format!("{:.6}", d / MINUTE as f64).parse().unwrap(),
                false => d,
            })
        })
        .collect()
}

/// Where tierdb differs by design, its own rule:
/// - a counter renders its stored increases, equal to graphite-web's nonNegativeDerivative of
///   the raw counter except at the first point (graphite-web has no earlier value in range)
///   and at a reset (graphite-web: null; tierdb: the value counted from zero);
/// - nonNegativeDerivative and perSecond with maxValue or minValue skip nulls, where
///   graphite-web 1.1.8 on Python 3 fails (500) comparing a null with the bound;
/// - summarize's average of a stored gauge is the exact average of the samples in each
///   window (buckets merged), where graphite-web averages the 5-minute averages;
/// - randomWalk's values are tierdb's own, its name and points graphite-web's;
/// - an untagged series takes part in seriesByTag as the tag `name` alone, where
///   graphite-web's tag database holds tagged series only;
/// - groupByTags names the group of series without one of the tags with its empty value
///   (`cpu.load;dc=`), where graphite-web fails;
/// - `now` and relative times in timeSlice's arguments count from the request's clock, where
///   graphite-web reads its machine's;
/// - verticalLine without a label is named `None`, where graphite-web's JSON has a null name;
/// - mapSeries alone renders its groups one after another, where graphite-web fails
///   rendering a list of lists;
/// - `consolidateBy('last')` shows a bucket's latest sample, where graphite-web reading a
///   whisper file whose aggregationMethod is `average` shows the average of a coarser
///   archive's point (with `last` files the two agree: [`LATEST`]).
#[test]
fn deliberate_differences_follow_tierdbs_rules() {
    let Some((series, server)) = workload_in_tierdb() else {
        return;
    };
    let (_, from, until) = RANGES[0];
    let (_, from_5m, until_5m) = RANGES[1];
    let request = |target: &str| Request {
        targets: vec![target.to_owned()],
        from,
        until,
        max_data_points: None,
        format: None,
        words: None,
        now: None,
        jsonp: None,
    };
    let bounded = [
        (
            "nonNegativeDerivative(net.bytes, 600000)",
            Some(600_000.0),
            None,
            false,
        ),
        (
            "nonNegativeDerivative(net.bytes, None, 100)",
            None,
            Some(100.0),
            false,
        ),
        ("perSecond(net.bytes, 599999)", Some(599_999.0), None, true),
    ];
    let summaries = [
        ("servers.db1.cpu", "avg", AggFunc::Avg),
        ("servers.db1.cpu", "max", AggFunc::Max),
        ("servers.web2.cpu", "min", AggFunc::Min),
    ];
    let mut requests = vec![
        request("nonNegativeDerivative(net.requests)"),
        request("randomWalkFunction(\"walk\")"),
    ];
    requests.extend(bounded.iter().map(|b| request(b.0)));
    let summarize = |path: &str, func: &str| Request {
        from: from_5m,
        until: until_5m,
        ..request(&format!("summarize({path}, \"1d\", \"{func}\")"))
    };
    requests.extend(
        summaries
            .iter()
            .map(|(path, func, _)| summarize(path, func)),
    );
    let empty_tag = "groupByTags(seriesByTag('name=cpu.load'), 'avg', 'dc')";
    requests.push(request(empty_tag));
    requests.push(request("seriesByTag('name=servers.web1.cpu')"));
    let sliced = format!("timeSlice(servers.db1.cpu, \"{}\")", from + HOUR);
    let no_label = format!("verticalLine(\"{}\")", from + HOUR);
    let mapped = "mapSeries(servers.*.*, 2)";
    let tail = requests.len();
    requests.extend([request(&sliced), request(&no_label), request(mapped)]);
    let last = || Request {
        from: from_5m,
        until: until_5m,
        ..request("consolidateBy(servers.web1.cpu, 'last')")
    };
    requests.push(last());
    let theirs = graphite_web(&series, &requests, &[]);
    let (theirs, tail_answers) = theirs.split_at(tail);
    let points = |body: &str| -> (String, Vec<(Option<f64>, i64)>) {
        let answer: Value = serde_json::from_str(body).unwrap();
        assert_eq!(answer.as_array().unwrap().len(), 1, "{answer}");
        let target = answer[0]["target"].as_str().unwrap().to_owned();
        let points = (answer[0]["datapoints"].as_array().unwrap().iter())
            .map(|p| (p[0].as_f64(), p[1].as_i64().unwrap()))
            .collect();
        (target, points)
    };
    let ours = |r: &Request| {
        let (status, body) = tierdb(&server, r);
        assert_eq!(status, 200, "{:?}: {body}", r.targets);
        points(&body)
    };

    // The counter.
    let (_, graphite_rates) = points(&theirs[0].1);
    let (_, increases) = ours(&request("net.requests"));
    assert_eq!(increases.len(), graphite_rates.len());
    let raw: BTreeMap<i64, f64> = series["net.requests"].iter().copied().collect();
    let mut resets = 0;
    for (&(ours, t), &(theirs, t2)) in increases.iter().zip(&graphite_rates) {
        assert_eq!(t, t2);
        match (theirs, raw.get(&t), raw.get(&(t - MINUTE))) {
            (None, Some(&now), Some(&before)) if t == from + MINUTE => {
                assert_eq!(ours, Some(now - before), "the first point, at {t}");
            }
            (None, Some(&now), Some(&before)) if now < before => {
                resets += 1;
                assert_eq!(ours, Some(now), "a reset, at {t}");
            }
            _ => assert_eq!(ours, theirs, "at {t}"),
        }
    }
    assert!(resets > 0, "the 1m range holds a reset");

    // randomWalk: graphite-web's name and stamps, tierdb's random values.
    let (name, walk) = points(&theirs[1].1);
    let (our_name, our_walk) = ours(&request("randomWalk(\"walk\")"));
    let (function_name, _) = ours(&request("randomWalkFunction(\"walk\")"));
    assert_eq!(function_name, name);
    assert_eq!(our_name, name);
    let stamps = |p: &[(Option<f64>, i64)]| p.iter().map(|p| p.1).collect::<Vec<_>>();
    assert_eq!(stamps(&our_walk), stamps(&walk));
    assert_eq!(our_walk[0].0, Some(0.0));
    assert!(our_walk
        .windows(2)
        .all(|w| (w[1].0.unwrap() - w[0].0.unwrap()).abs() <= 0.5));

    // summarize's exact averages and extremes: graphite-web's windows and names, each value
    // that of the samples in the window (bucket starts after `from` up to the one holding
    // `until`).
    let first = from_5m - from_5m % 300 + 300;
    for ((path, func, agg), (_, body)) in summaries.iter().zip(&theirs[2 + bounded.len()..]) {
        let target = format!("summarize({path}, \"1d\", \"{func}\")");
        let (name, graphite_days) = points(body);
        let (our_name, days) = ours(&summarize(path, func));
        assert_eq!(our_name, name);
        assert_eq!(stamps(&days), stamps(&graphite_days));
        let samples: Vec<(i64, f64)> = (series[*path].iter())
            .filter(|&&(t, _)| t >= first && t < until_5m + 300)
            .copied()
            .collect();
        let mut differs = 0;
        for (&(value, day), &(theirs, _)) in days.iter().zip(&graphite_days) {
            let window: Vec<f64> = (samples.iter())
                .filter(|&&(t, _)| t >= day && t < day + DAY)
                .map(|&(_, v)| v)
                .collect();
            let exact = (!window.is_empty()).then(|| match agg {
                AggFunc::Avg => window.iter().sum::<f64>() / window.len() as f64,
                AggFunc::Max => window.iter().copied().fold(f64::MIN, f64::max),
                AggFunc::Min => window.iter().copied().fold(f64::MAX, f64::min),
            });
            match (value, exact) {
                (Some(v), Some(m)) => assert!(close(v, m), "{target} {day}: {v} against {m}"),
                (v, m) => assert_eq!(v, m, "{target} {day}"),
            }
            differs += usize::from(value.zip(theirs).is_some_and(|(a, b)| !close(a, b)));
        }
        assert!(
            differs > 0,
            "{target}: a window mixes 5-minute and 1-minute samples"
        );
    }

    // groupByTags over series without one of the tags: graphite-web fails building the
    // group's tagged name; tierdb names it with the empty value.
    let (status, body) = &theirs[theirs.len() - 2];
    assert_eq!(*status, 500, "{body}");
    assert!(body.contains("may not be empty"), "{body}");
    let answer: Value = serde_json::from_str(&tierdb(&server, &request(empty_tag)).1).unwrap();
    let names: Vec<&str> = (answer.as_array().unwrap().iter())
        .map(|s| s["target"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cpu.load;dc=x", "cpu.load;dc="]);

    // An untagged series takes part in tierdb's tag queries, as the tag `name` alone;
    // graphite-web's tag database holds tagged series only.
    let (status, body) = theirs.last().unwrap();
    assert_eq!((*status, body.as_str()), (200, "[]"));
    let (name, tagged) = ours(&request("seriesByTag('name=servers.web1.cpu')"));
    let (_, plain) = ours(&request("servers.web1.cpu"));
    assert_eq!(name, "servers.web1.cpu");
    assert_eq!(tagged, plain);

    // timeSlice's `now` is the request's clock; graphite-web's is its machine's, later than
    // the test's clock, so the same points are kept and only the name's end differs.
    let (status, body) = &tail_answers[0];
    assert_eq!(*status, 200, "{body}");
    let (name, sliced_theirs) = points(body);
    let (our_name, sliced_ours) = ours(&request(&sliced));
    assert_eq!(
        our_name,
        format!("timeSlice(servers.db1.cpu, {}, {NOW})", from + HOUR)
    );
    assert!(name.starts_with(&format!("timeSlice(servers.db1.cpu, {}, ", from + HOUR)));
    assert_eq!(sliced_ours, sliced_theirs);
    assert!(sliced_ours[..59].iter().all(|p| p.0.is_none()));

    // verticalLine without a label: graphite-web's JSON names it null, tierdb `None`.
    let (status, body) = &tail_answers[1];
    assert_eq!(*status, 200, "{body}");
    let answer: Value = serde_json::from_str(body).unwrap();
    assert_eq!(answer[0]["target"], Value::Null);
    let (name, line) = ours(&request(&no_label));
    assert_eq!(name, "None");
    assert_eq!(line, [(Some(1.0), from + HOUR)]);
    assert_eq!(answer[0]["datapoints"], json!([[1.0, from + HOUR]]));

    // mapSeries alone: graphite-web fails rendering its list of lists; tierdb renders the
    // groups (by node 2: cpu, then mem) one after another.
    let (status, body) = &tail_answers[2];
    assert_eq!(*status, 500, "{body}");
    let (status, body) = tierdb(&server, &request(mapped));
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = (answer.as_array().unwrap().iter())
        .map(|s| s["target"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "servers.db1.cpu",
            "servers.web1.cpu",
            "servers.web2.cpu",
            "servers.db1.mem",
            "servers.web1.mem",
            "servers.web2.mem"
        ]
    );

    // consolidateBy('last') over 5-minute buckets of minute samples: graphite-web, reading
    // a file whose aggregationMethod is `average`, shows each 5-minute average; tierdb the
    // latest sample of each bucket (of an `average` file too: the buckets keep it).
    let (status, body) = &tail_answers[3];
    assert_eq!(*status, 200, "{body}");
    let (name, averages) = points(body);
    let (our_name, latest) = ours(&last());
    assert_eq!(our_name, name);
    assert_eq!(stamps(&latest), stamps(&averages));
    let samples = &series["servers.web1.cpu"];
    let mut differs = 0;
    for (&(value, t), &(theirs, _)) in latest.iter().zip(&averages) {
        let bucket: Vec<f64> = (samples.iter())
            .filter(|&&(ts, _)| ts >= t && ts < t + 300)
            .map(|&(_, v)| v)
            .collect();
        assert_eq!(value, bucket.last().copied(), "at {t}");
        let mean = (!bucket.is_empty()).then(|| bucket.iter().sum::<f64>() / bucket.len() as f64);
        assert!(
            theirs
                .zip(mean)
                .map_or(theirs == mean, |(a, b)| close(a, b)),
            "graphite-web at {t}: {theirs:?}, the samples' average {mean:?}"
        );
        differs += usize::from(value.zip(theirs).is_some_and(|(a, b)| !close(a, b)));
    }
    assert!(differs > 100, "the 5m range's minute samples: {differs}");

    // The bounded derivatives: graphite-web fails; tierdb answers by the rule.
    let grid: Vec<i64> = (from + MINUTE..=until).step_by(MINUTE as usize).collect();
    let raw: BTreeMap<i64, f64> = series["net.bytes"].iter().copied().collect();
    let raw: Vec<Option<f64>> = grid.iter().map(|t| raw.get(t).copied()).collect();
    for ((target, max, min, per_second), (status, body)) in bounded.iter().zip(&theirs[2..]) {
        assert_eq!(*status, 500, "graphite-web answered {target}: {body}");
        assert!(body.contains("TypeError"), "{target}: {body}");
        let (name, values) = ours(&request(target));
        let func = if *per_second {
            "perSecond"
        } else {
            "nonNegativeDerivative"
        };
        assert_eq!(name, format!("{func}(net.bytes)"));
        assert_eq!(stamps(&values), grid);
        let want = bounded_rule(&raw, *max, *min, *per_second);
        let got: Vec<Option<f64>> = values.iter().map(|v| v.0).collect();
        assert_eq!(got, want, "{target}");
        assert!(
            want.iter().flatten().count() > 100,
            "{target}: the rule leaves values"
        );
    }
}

/// Targets rendered in every format by [`formats_and_time_words_equal_graphite_webs`]: a
/// name CSV quotes, values whose `repr` has an exponent, a series of nulls, a consolidation
/// name pickle carries, with a maxDataPoints that only json would apply.
const FORMATTED: &[&str] = &[
    "servers.*.cpu",
    "sum(servers.web1.cpu, servers.db1.cpu)",
    "scale(servers.web2.cpu, 0.00001)",
    "archive.old.cpu",
    "perSecond(net.bytes)",
    "consolidateBy(servers.web1.cpu, \"maxSeries\")",
    "cumulative(servers.db1.cpu)",
    "aliasByNode(servers.*.mem, 1)",
    // Overflowed to infinity (#54): `inf` in csv and raw, a float infinity in pickle.
    "scale(servers.web1.cpu, 1e308)",
];

/// graphite-web's time words as `from` and `until`, read from the same clock (graphite-web's
/// `now` parameter, tierdb's test clock: Friday 2025-11-21 12:00 UTC).
const WORDS: &[(&str, &str)] = &[
    ("yesterday", "today"),
    ("noon yesterday", "midnight"),
    ("monday", "now"),
    ("-1d", "noon"),
    ("midnight", "now"),
    ("yesterday+6h", "today-30min"),
    ("11/19/2025", "20251120"),
    ("teatime yesterday", "tomorrow"),
    // Given the later first, graphite-web renders from the earlier to the later.
    ("now", "-6h"),
    ("-1D", "now - 1H"),
    ("-1d2h", "-4hrs"),
];

/// `from`, `until` and graphite-web's `now` parameter, which both count the first two from.
/// The ranges stay in the last 46 hours: graphite-web also has whisper choose its archive by
/// `now`, and an archive too fine for the real clock holds nothing that far back (tierdb
/// reads the finest tier holding `from` by its own clock).
const WORDS_AT: &[(&str, &str, &str)] = &[
    ("-6h", "now", "-1d"),
    ("yesterday+18h", "midnight", "-1d"),
    ("-3h", "-1h", "11/20/2025"),
];

/// Python's unpickling of `bytes`, as JSON.
fn unpickle(bytes: &[u8]) -> Value {
    use std::io::Write;
    let mut python = Command::new(PYTHON)
        .args([
            "-c",
            "import json, pickle, sys; print(json.dumps(pickle.load(sys.stdin.buffer)))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    python.stdin.take().unwrap().write_all(bytes).unwrap();
    let output = python.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "python3 cannot unpickle tierdb's answer: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    python_json(&String::from_utf8_lossy(&output.stdout))
}

/// Python's `json.dumps` text, whose infinities (`Infinity`, `-Infinity`: an overflowed
/// value) JSON has no number for, read with them as strings, compared as such.
fn python_json(text: &str) -> Value {
    let quoted = text
        .replace("-Infinity", "\"-Infinity\"")
        .replace("Infinity,", "\"Infinity\",")
        .replace("Infinity]", "\"Infinity\"]");
    serde_json::from_str(&quoted).unwrap()
}

/// What differs between two unpickled lists of graphite-web's series dicts: every field equal,
/// values as [`close`] compares them.
fn pickle_difference(theirs: &Value, ours: &Value) -> Option<String> {
    let (Some(theirs), Some(ours)) = (theirs.as_array(), ours.as_array()) else {
        return Some("not both lists".into());
    };
    if theirs.len() != ours.len() {
        return Some(format!("{} series against {}", theirs.len(), ours.len()));
    }
    for (g, t) in theirs.iter().zip(ours) {
        let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        if keys(g) != keys(t) {
            return Some(format!("keys {:?} against {:?}", keys(g), keys(t)));
        }
        for key in keys(g) {
            let equal = match (&g[&key], &t[&key]) {
                (Value::Array(a), Value::Array(b)) => {
                    a.len() == b.len()
                        && a.iter()
                            .zip(b)
                            .all(|(x, y)| match (x.as_f64(), y.as_f64()) {
                                (Some(x), Some(y)) => close(x, y),
                                _ => x == y,
                            })
                }
                (a, b) => a.as_f64().zip(b.as_f64()).map_or(a == b, |(x, y)| x == y),
            };
            if !equal {
                return Some(format!(
                    "{}: {key}: {} against {}",
                    g["name"], g[&key], t[&key]
                ));
            }
        }
    }
    None
}

/// `/render`'s csv, raw and pickle formats and graphite-web's time words, against
/// graphite-web: csv and raw byte for byte (and their Content-Type), pickle as Python
/// unpickles both answers, and `from`/`until` words reading the same points.
#[test]
fn formats_and_time_words_equal_graphite_webs() {
    let Some((series, server)) = workload_in_tierdb() else {
        return;
    };
    let request = |target: &str, (_, from, until): (&str, i64, i64)| Request {
        targets: vec![target.to_owned()],
        from,
        until,
        max_data_points: Some(50),
        format: None,
        words: None,
        now: None,
        jsonp: None,
    };
    let mut requests = Vec::new();
    for format in ["csv", "raw", "pickle"] {
        for range in &RANGES[..2] {
            for target in FORMATTED {
                requests.push(Request {
                    format: Some(format),
                    ..request(target, *range)
                });
            }
        }
    }
    for words in WORDS {
        requests.push(Request {
            words: Some(*words),
            max_data_points: None,
            ..request("servers.web1.cpu", RANGES[0])
        });
    }
    for (from, until, now) in WORDS_AT {
        requests.push(Request {
            words: Some((from, until)),
            now: Some(now),
            max_data_points: None,
            ..request("servers.web2.mem", RANGES[0])
        });
    }
    let theirs = graphite_web(&series, &requests, &[]);
    let mut failures = Vec::new();
    for (request, (status, body)) in requests.iter().zip(&theirs) {
        let what = format!(
            "{:?} {:?} format {:?}",
            request.targets,
            request.times(),
            request.format
        );
        let (from, until) = request.times();
        let mut path = format!(
            "/render?target={}&from={}&until={}",
            encode(&request.targets[0]),
            encode(&from),
            encode(&until)
        );
        if let Some(max) = request.max_data_points {
            path.push_str(&format!("&maxDataPoints={max}"));
        }
        if let Some(format) = request.format {
            path.push_str(&format!("&format={format}"));
        }
        if let Some(now) = request.now {
            path.push_str(&format!("&now={}", encode(now)));
        }
        let (our_status, kind, ours) = crate::support::http::get_bytes(server.http, &path);
        if *status != 200 || our_status != 200 {
            failures.push(format!(
                "{what}: status graphite-web {status}, tierdb {our_status}: {body} {}",
                String::from_utf8_lossy(&ours)
            ));
            continue;
        }
        let difference =
            match request.format {
                Some("pickle") => pickle_difference(&python_json(body), &unpickle(&ours)),
                Some(format) => {
                    let ours = String::from_utf8(ours).unwrap();
                    let wanted = if format == "csv" {
                        "text/csv"
                    } else {
                        "text/plain"
                    };
                    if kind.as_deref() != Some(wanted) {
                        Some(format!("Content-Type {kind:?}, not {wanted}"))
                    } else if *body != ours {
                        let line = (body.lines().zip(ours.lines()))
                            .find(|(a, b)| a != b)
                            .map(|(a, b)| format!("graphite-web {a:?}, tierdb {b:?}"));
                        Some(line.unwrap_or_else(|| {
                            format!("{} bytes against {}", body.len(), ours.len())
                        }))
                    } else {
                        None
                    }
                }
                None => difference(
                    &serde_json::from_str(body).unwrap(),
                    &serde_json::from_slice(&ours).unwrap(),
                ),
            };
        if let Some(difference) = difference {
            failures.push(format!("{what}: {difference}"));
        }
    }
    assert_none_differ(&failures, requests.len());
}

/// Unquoted names and labels (graphite-web names the series by the bare value, a
/// `threshold` only by a true one, and takes any color), compared in raw and csv:
/// graphite-web's json and pickle carry the value itself (`"target": 5`), where tierdb's
/// carry its text (`"5"`). `None` is last: graphite-web's csv writes that name empty
/// (Python's csv module writes None so), tierdb's `None`, as raw writes it in both.
const UNQUOTED_NAMES: &[&str] = &[
    "alias(servers.web1.cpu, 5)",
    "alias(servers.web1.cpu, -2.5)",
    "alias(servers.web1.cpu, 1e3)",
    "alias(servers.*.cpu, true)",
    "sinFunction(7, 2)",
    "timeFunction(true, 300)",
    "sin(-1.5)",
    "threshold(5.5, 7)",
    "threshold(5.5, 0)",
    "threshold(5.5, \"limit\", 5)",
    "alias(servers.web1.cpu, None)",
];

/// graphite-web's json answer with each series' `target` as Python's `str` of it (`5`,
/// `True`, `None`), as tierdb names a series given an unquoted name.
fn targets_as_python_str(mut answer: Value) -> Value {
    for series in answer.as_array_mut().into_iter().flatten() {
        let text = match &series["target"] {
            Value::String(text) => text.clone(),
            Value::Bool(true) => "True".into(),
            Value::Bool(false) => "False".into(),
            Value::Null => "None".into(),
            other => other.to_string(),
        };
        series["target"] = Value::String(text);
    }
    answer
}

/// `/render`'s msgpack, dygraph and rickshaw formats, `jsonp`, and names and labels given
/// unquoted ([`UNQUOTED_NAMES`]), against graphite-web 1.1.8: every body byte for byte
/// (msgpack's bytes as graphite-web's bundled u-msgpack-python packs them) with
/// graphite-web's Content-Type, but json's, whose series are compared as [`difference`]
/// does (tierdb's json is compact and has no `tags`). `jsonp` is ignored beside csv and
/// msgpack, as graphite-web ignores it; beside json, dygraph and rickshaw, where
/// graphite-web answers a script, tierdb refuses it by design (a script any page may load).
#[test]
fn more_formats_jsonp_and_unquoted_names_equal_graphite_webs() {
    let Some((series, server)) = workload_in_tierdb() else {
        return;
    };
    let request = |target: &str, format: &'static str, jsonp: Option<&'static str>| Request {
        targets: vec![target.to_owned()],
        from: RANGES[0].1,
        until: RANGES[0].2,
        max_data_points: Some(50),
        format: Some(format),
        words: None,
        now: None,
        jsonp,
    };
    let mut requests = Vec::new();
    for format in ["msgpack", "dygraph", "rickshaw"] {
        for target in FORMATTED {
            requests.push(request(target, format, None));
        }
    }
    for format in ["json", "dygraph", "rickshaw", "csv", "msgpack"] {
        requests.push(request("servers.*.cpu", format, Some("cb_1")));
    }
    let refused_jsonp = |r: &Request| {
        r.jsonp.is_some() && matches!(r.format, Some("json" | "dygraph" | "rickshaw"))
    };
    for target in UNQUOTED_NAMES {
        requests.push(request(target, "raw", None));
    }
    for target in &UNQUOTED_NAMES[..UNQUOTED_NAMES.len() - 1] {
        requests.push(request(target, "csv", None));
    }
    // A vertical line's raw and csv hold one point where graphite-web's hold two (its
    // series has two values at one time, and only json cuts them to the stamps): json here.
    requests.push(request(
        &format!("verticalLine(\"{}\", 5, 6)", RANGES[0].1 + HOUR),
        "json",
        None,
    ));
    let theirs = graphite_web_typed(&series, &requests, &[]);
    let mut failures = Vec::new();
    for (request, (status, body, kind)) in requests.iter().zip(&theirs) {
        let what = format!(
            "{:?} format {:?} jsonp {:?}",
            request.targets, request.format, request.jsonp
        );
        let mut path = format!(
            "/render?target={}&from={}&until={}&maxDataPoints=50&format={}",
            encode(&request.targets[0]),
            request.from,
            request.until,
            request.format.unwrap()
        );
        if let Some(jsonp) = request.jsonp {
            path.push_str(&format!("&jsonp={jsonp}"));
        }
        let (our_status, our_kind, ours) = crate::support::http::get_bytes(server.http, &path);
        if refused_jsonp(request) {
            let ours = String::from_utf8_lossy(&ours);
            if *status != 200 || kind.as_deref() != Some("text/javascript") {
                failures.push(format!("{what}: graphite-web {status} {kind:?}: {body}"));
            } else if our_status != 400 || !ours.contains("jsonp: not supported") {
                failures.push(format!("{what}: tierdb {our_status}, not refused: {ours}"));
            }
            continue;
        }
        if *status != 200 || our_status != 200 {
            failures.push(format!(
                "{what}: status graphite-web {status}, tierdb {our_status}: {body} {}",
                String::from_utf8_lossy(&ours)
            ));
            continue;
        }
        let ours = match request.format {
            Some("msgpack") => ours.iter().map(|b| format!("{b:02x}")).collect(),
            _ => String::from_utf8(ours).unwrap(),
        };
        let difference = if our_kind != *kind {
            Some(format!("Content-Type {our_kind:?}, graphite-web {kind:?}"))
        } else if request.format == Some("json") {
            difference(
                &targets_as_python_str(serde_json::from_str(body).unwrap()),
                &serde_json::from_str(&ours).unwrap(),
            )
        } else if *body != ours {
            let at = (body.bytes().zip(ours.bytes()))
                .position(|(a, b)| a != b)
                .unwrap_or(body.len().min(ours.len()));
            let near = |text: &str| {
                let end = (at + 40).min(text.len());
                text.get(at.saturating_sub(40)..end)
                    .unwrap_or(text)
                    .to_owned()
            };
            Some(format!(
                "{} bytes against {}, first differing at {at}: graphite-web {:?}, tierdb {:?}",
                body.len(),
                ours.len(),
                near(body),
                near(&ours)
            ))
        } else {
            None
        };
        if let Some(difference) = difference {
            failures.push(format!("{what}: {difference}"));
        }
    }
    assert_none_differ(&failures, requests.len());
}
