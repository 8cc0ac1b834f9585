//! Tests of evaluation through an in-memory [`Source`]: plain fetches, every function with
//! hand-computed values, argument errors, the point budget (also as a property), and the
//! json shape.

use proptest::prelude::*;

use super::{
    parse_graphite_path, render, Fetched, PathPattern, RenderRequest, RenderedSeries, Source,
};
use crate::bucket::Bucket;
use crate::error::Result;
use crate::read::budget::ReadBudget;

const T0: i64 = 36_000;
const STEP: i64 = 60;

/// Series held in memory, every one whatever the range.
struct Memory {
    series: Vec<Fetched>,
}

impl Source for Memory {
    fn fetch(&self, pattern: &PathPattern, _: i64, _: i64) -> Result<Vec<Fetched>> {
        Ok(self
            .series
            .iter()
            .filter(|f| pattern.matches(f.key.view()))
            .cloned()
            .collect())
    }

    fn charge(&self, pattern: &PathPattern, _: i64, _: i64, budget: &ReadBudget) -> Result<()> {
        let values = (self.series.iter())
            .filter(|f| pattern.matches(f.key.view()))
            .map(|f| f.buckets.len() as u128)
            .sum();
        budget.charge(values, || format!("{:?}", pattern.as_str()))
    }
}

/// A series from T0 at STEP whose point `i` saw the samples `points[i]`.
fn series(path: &str, counter: bool, points: &[&[f64]]) -> Fetched {
    let bucket = |samples: &&[f64]| {
        let mut b = Bucket::EMPTY;
        samples.iter().for_each(|&s| b.add(s));
        b
    };
    Fetched {
        key: parse_graphite_path(path).unwrap(),
        start: T0,
        step: STEP,
        buckets: points.iter().map(bucket).collect(),
        counter,
        timer: None,
    }
}

fn memory() -> Memory {
    let series = vec![
        // Averages 5, 3, -, 2, 10, -.
        series(
            "cpu.load",
            false,
            &[&[4.0, 6.0], &[3.0], &[], &[1.0, 3.0], &[10.0], &[]],
        ),
        series(
            "cpu.load;host=a",
            false,
            &[&[1.0], &[2.0], &[3.0], &[], &[5.0], &[6.0]],
        ),
        series(
            "cpu.load;host=b",
            false,
            &[&[10.0], &[20.0], &[30.0], &[40.0], &[50.0], &[60.0]],
        ),
        // Increases 120, -, 30, -5 (a reset as stored), 120, 0.
        series(
            "net.bytes",
            true,
            &[&[60.0, 60.0], &[], &[30.0], &[-5.0], &[90.0, 30.0], &[0.0]],
        ),
        // A raw counter stored as a gauge: 100, 200, 50, 300, -, -.
        series(
            "raw.count",
            false,
            &[&[100.0], &[200.0], &[50.0], &[300.0], &[], &[]],
        ),
    ];
    Memory { series }
}

fn run(targets: &[&str], max_data_points: Option<u32>) -> Result<Vec<RenderedSeries>> {
    let request = RenderRequest {
        targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        from: T0,
        until: T0 + 6 * STEP,
        max_data_points,
        default_max_points: 1000,
        x_files_factor: 0.0,
        now: 0,
    };
    render(&memory(), &request, &ReadBudget::default())
}

/// The one series `target` renders to: its name, start, step and values.
fn one(target: &str) -> (String, i64, i64, Vec<Option<f64>>) {
    let mut out = run(&[target], None).unwrap_or_else(|e| panic!("{target}: {e}"));
    assert_eq!(out.len(), 1, "{target}: {out:?}");
    let s = out.remove(0);
    let start = s.datapoints[0].1;
    let step = s.datapoints.get(1).map_or(0, |p| p.1 - start);
    (
        s.target,
        start,
        step,
        s.datapoints.into_iter().map(|p| p.0).collect(),
    )
}

fn values(target: &str) -> Vec<Option<f64>> {
    one(target).3
}

fn error(target: &str) -> String {
    run(&[target], None).unwrap_err().to_string()
}

const N: Option<f64> = None;

fn s(values: &[f64]) -> Vec<Option<f64>> {
    values.iter().map(|&v| Some(v)).collect()
}

#[test]
fn paths_render_bucket_values_in_target_order() {
    let out = run(&["cpu.load;host=a", "cpu.*"], None).unwrap();
    let names: Vec<&str> = out.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(
        names,
        [
            "cpu.load;host=a",
            "cpu.load",
            "cpu.load;host=a",
            "cpu.load;host=b"
        ]
    );
    assert_eq!(
        values("cpu.load;host="),
        [Some(5.0), Some(3.0), N, Some(2.0), Some(10.0), N]
    );
    assert_eq!(
        values("net.bytes"),
        [
            Some(120.0),
            N,
            Some(30.0),
            Some(-5.0),
            Some(120.0),
            Some(0.0)
        ]
    );
    assert_eq!(one("cpu.load;host=a").1, T0);
    assert!(run(&["no.such.series"], None).unwrap().is_empty());
}

#[test]
fn alias_and_alias_sub() {
    assert_eq!(
        one(r#"aliasSub(cpu.load;host=a, "(^.*$)", "\1 A")"#).0,
        "cpu.load;host=a A"
    );
    assert_eq!(
        one(r"aliasSub(cpu.load;host=a, '^cpu\.(\w+);host=(\w)$', '\2-\1 $x\\')").0,
        r"a-load $x\"
    );
    assert_eq!(one("alias(cpu.load;host=a, 'mine')").0, "mine");
    assert_eq!(
        values("alias(cpu.load;host=a, 'mine')"),
        values("cpu.load;host=a")
    );
    assert!(error("aliasSub(cpu.load, '(', 'x')")
        .contains("aliasSub: argument 2 (search) is not a valid regex"));
}

#[test]
fn series_aggregates_skip_nulls() {
    let (name, _, _, sum) = one("sumSeries(cpu.load;host=a, cpu.load;host=b)");
    assert_eq!(name, "sumSeries(cpu.load;host=a,cpu.load;host=b)");
    assert_eq!(sum, s(&[11.0, 22.0, 33.0, 40.0, 55.0, 66.0]));
    assert_eq!(
        values("avg(cpu.load;host={a,b})"),
        s(&[5.5, 11.0, 16.5, 40.0, 27.5, 33.0])
    );
    assert_eq!(
        values("minSeries(cpu.load)"),
        s(&[1.0, 2.0, 3.0, 2.0, 5.0, 6.0])
    );
    assert_eq!(
        values("maxSeries(cpu.load)"),
        s(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    );
    assert_eq!(
        values("sum(cpu.load;host=)"),
        [Some(5.0), Some(3.0), N, Some(2.0), Some(10.0), N]
    );
    assert!(run(&["sumSeries(no.such)"], None).unwrap().is_empty());
    // Steps 60 and 120: host=a is averaged in pairs (1.5, 3, 5.5) first. The summarize
    // ends a window after the one holding its input's end (T0 + 360), as graphite-web's
    // does, so the sum has a fourth, empty point.
    let (_, start, step, mixed) =
        one("sumSeries(cpu.load;host=a, summarize(cpu.load;host=b, '2min', 'sum'))");
    let want = [Some(31.5), Some(73.0), Some(115.5), N];
    assert_eq!((start, step, mixed), (T0, 120, want.to_vec()));
}

#[test]
fn scale() {
    let (name, _, _, scaled) = one("scale(cpu.load;host=a, 2)");
    assert_eq!(name, "scale(cpu.load;host=a,2)");
    assert_eq!(
        scaled,
        [Some(2.0), Some(4.0), Some(6.0), N, Some(10.0), Some(12.0)]
    );
    assert_eq!(values("scale(cpu.load;host=b, -0.5)")[0], Some(-5.0));
    // Overflow is an infinity, as in graphite-web (whose json writes it `1e9999`), never
    // the null of a missing value.
    assert_eq!(
        values("scale(cpu.load;host=b, 1e308)")[0],
        Some(f64::INFINITY)
    );
}

#[test]
fn rates_of_counters_come_from_stored_increases() {
    let (name, _, _, rate) = one("perSecond(net.bytes)");
    assert_eq!(name, "perSecond(net.bytes)");
    assert_eq!(rate, [Some(2.0), N, Some(0.5), N, Some(2.0), Some(0.0)]);
    let increases = [Some(120.0), N, Some(30.0), N, Some(120.0), Some(0.0)];
    assert_eq!(values("nonNegativeDerivative(net.bytes)"), increases);
    // Values stay increases through scale and sums, so the rate stays right.
    assert_eq!(
        values("perSecond(scale(net.bytes, 2))"),
        [Some(4.0), N, Some(1.0), N, Some(4.0), Some(0.0)]
    );
    assert_eq!(values("perSecond(sumSeries(net.bytes))"), rate);
}

#[test]
fn derivatives_of_gauges_follow_graphite() {
    let a = [N, Some(1.0), Some(1.0), N, N, Some(1.0)];
    assert_eq!(values("nonNegativeDerivative(cpu.load;host=a)"), a);
    // perSecond rounds to six decimals, as graphite-web's `round(delta / step, 6)`.
    let sixth = Some(0.166667);
    let per_second = [N, sixth, sixth, sixth, sixth, sixth];
    assert_eq!(values("perSecond(cpu.load;host=b)"), per_second);
    assert_eq!(
        values("nonNegativeDerivative(raw.count)"),
        [N, Some(100.0), N, Some(250.0), N, N]
    );
    // With maxValue 511 the drop from 200 to 50 is a wrap: 511 + 1 + 50 - 200.
    let wrapped = [N, Some(100.0), Some(362.0), Some(250.0), N, N];
    assert_eq!(values("nonNegativeDerivative(raw.count, 511)"), wrapped);
    // A value above maxValue is null and restarts the delta.
    assert_eq!(
        values("nonNegativeDerivative(raw.count, 250)"),
        [N, Some(100.0), Some(101.0), N, N, N]
    );
    let rate = [N, Some(1.666667), Some(6.033333), Some(4.166667), N, N];
    assert_eq!(values("perSecond(raw.count, 511)"), rate);
}

#[test]
fn summarize_merges_buckets_of_gauges_exactly() {
    // Windows of 3 min from T0 (a multiple of 180): samples 4,6,3 then 1,3,10, then the
    // empty window graphite-web adds when the series ends on a window's start (T0 + 360).
    let (name, start, step, avg) = one("summarize(cpu.load;host=, '3min', 'avg')");
    assert_eq!(name, r#"summarize(cpu.load, "3min", "avg")"#);
    assert_eq!((start, step), (T0, 180));
    let s = |values: &[f64]| [s(values), vec![N]].concat();
    assert_eq!(avg, s(&[13.0 / 3.0, 14.0 / 3.0]));
    assert_eq!(values("summarize(cpu.load;host=, '3min', 'average')"), avg);
    assert_eq!(
        values("summarize(cpu.load;host=, '3min', 'max')"),
        s(&[6.0, 10.0])
    );
    assert_eq!(
        values("summarize(cpu.load;host=, '3min', 'min')"),
        s(&[3.0, 1.0])
    );
    assert_eq!(
        values("summarize(cpu.load;host=, '3min', 'sum')"),
        s(&[8.0, 12.0])
    );
    assert_eq!(
        values("summarize(cpu.load;host=, '3min', 'last')"),
        s(&[3.0, 10.0])
    );
    // Without buckets (after scale), graphite's average of point values.
    assert_eq!(
        values("summarize(scale(cpu.load;host=, 1), '3min', 'avg')"),
        s(&[4.0, 6.0])
    );
}

#[test]
fn summarize_windows_and_counters() {
    // 7 min windows on the epoch: T0 falls in the one from 35_700.
    let (_, start, step, sum) = one("summarize(cpu.load;host=a, '7min', 'sum')");
    assert_eq!((start, step, sum), (35_700, 420, s(&[3.0, 14.0])));
    let (name, start, _, sum) = one("summarize(cpu.load;host=a, '7min', 'sum', true)");
    assert_eq!(name, r#"summarize(cpu.load;host=a, "7min", "sum", true)"#);
    assert_eq!((start, sum), (T0, s(&[17.0])));
    // Windows from T0 end on the series' end: graphite-web adds an empty one.
    let counts = [Some(150.0), Some(115.0), N];
    assert_eq!(values("summarize(net.bytes, '3min')"), counts);
    assert_eq!(
        values("perSecond(summarize(net.bytes, '3min'))"),
        [Some(0.833333), Some(0.638889), N]
    );
    // Every aggregation graphite-web has: the median of 0, 600, 1200 is 600.
    assert_eq!(
        values("summarize(net.bytes, '3min', 'median')")[0],
        Some(75.0)
    );
    assert!(error("summarize(net.bytes, '3min', 'nope')")
        .contains(r#"summarize: argument 3 (func) is "nope", not an aggregation function"#));
    assert!(error("summarize(net.bytes, '3')")
        .contains(r#"summarize: argument 2 (intervalString) invalid time offset "3""#));
}

#[test]
fn constant_line() {
    let out = run(&["constantLine(100)", "constantLine(1.5)"], None).unwrap();
    // graphite-web takes the value as a float: `str(100.0)`.
    assert_eq!(out[0].target, "100.0");
    assert_eq!(
        out[0].datapoints,
        [
            (Some(100.0), T0),
            (Some(100.0), T0 + 180),
            (Some(100.0), T0 + 360)
        ]
    );
    assert_eq!(out[1].target, "1.5");
}

/// Answers that would not fit in memory are refused before anything is allocated: a
/// `summarize` window far shorter than the series' step over a long range (per series and
/// over a target's series together), series whose steps have no common multiple within 64
/// bits, and times beyond the year 9999.
#[test]
fn unbounded_answers_are_refused() {
    let sparse = |path: &str, step: i64| Fetched {
        key: parse_graphite_path(path).unwrap(),
        start: 0,
        step,
        buckets: vec![Bucket::EMPTY; 2],
        counter: false,
        timer: None,
    };
    let source = Memory {
        series: [
            sparse("month.a", 30 * 86_400),
            sparse("odd.a", 4_000_000_007),
            sparse("odd.b", 4_000_000_009),
        ]
        .into_iter()
        .chain((0..12).map(|i| sparse(&format!("months.m{i}"), 30 * 86_400)))
        .collect(),
    };
    let request = |target: &str| RenderRequest {
        targets: vec![target.to_owned()],
        from: 0,
        until: 8_000_000_000,
        max_data_points: None,
        default_max_points: 1000,
        x_files_factor: 0.0,
        now: 0,
    };
    let err = render(
        &source,
        &request("summarize(month.a, '1s')"),
        &ReadBudget::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("5184001 windows of 1s"), "{err}");
    assert!(render(
        &source,
        &request("summarize(month.a, '1d')"),
        &ReadBudget::default()
    )
    .is_ok());
    let err = render(
        &source,
        &request("sumSeries(odd.*)"),
        &ReadBudget::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("no common multiple"), "{err}");
    // 864,001 windows each (graphite-web's: to the window after the one holding the end),
    // within the per-series cap; 12 of them are past the per-target one.
    let err = render(
        &source,
        &request("summarize(months.*, '6s')"),
        &ReadBudget::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("read budget: summarize's windows of 6s over 12 series = 10368012 values"),
        "{err}"
    );
    // Times far outside any calendar are refused before any step arithmetic.
    let mut absurd = request("sumSeries(constantLine(1))");
    absurd.from = 1;
    absurd.until = i64::MAX;
    let err = render(&source, &absurd, &ReadBudget::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("until (9223372036854775807) is outside"),
        "{err}"
    );
}

/// graphite-web's leniency (`ENFORCE_INPUT_VALIDATION = False`, its default), on which real
/// dashboards rely: what it accepts renders as it renders there.
#[test]
fn arguments_graphite_web_takes_in_other_forms() {
    let same = |lenient: &str, strict: &str| {
        let (mut a, b) = (
            run(&[lenient], None).unwrap(),
            run(&[strict], None).unwrap(),
        );
        assert!(!b.is_empty(), "{strict}");
        for s in &mut a {
            s.target = s.target.replace(lenient, strict);
        }
        assert_eq!(a, b, "{lenient} against {strict}");
    };
    // Booleans: 'true'/'false' in any case, 0 and 1, else Python's truth.
    same("sortByName(cpu.*, 'true')", "sortByName(cpu.*, true)");
    same(
        "sortByName(cpu.*, 'FALSE', 1)",
        "sortByName(cpu.*, false, true)",
    );
    same("sortBy(cpu.*, 'max', 2)", "sortBy(cpu.*, 'max', true)");
    same(
        "percentileOfSeries(cpu.*, 50, 'yes')",
        "percentileOfSeries(cpu.*, 50, true)",
    );
    same(
        "percentileOfSeries(cpu.*, 50, None)",
        "percentileOfSeries(cpu.*, 50, false)",
    );
    assert_eq!(
        one("summarize(cpu.load;host=a, '2min', 'sum', 'yes')").0,
        "summarize(cpu.load;host=a, \"2min\", \"sum\", true)"
    );
    // Numbers quoted, as template variables write them, and booleans as numbers.
    assert_eq!(
        values("scale(cpu.load;host=a, '2')"),
        values("scale(cpu.load;host=a, 2)")
    );
    assert_eq!(
        values("scale(cpu.load;host=a, true)"),
        values("cpu.load;host=a")
    );
    same("limit(cpu.*, ' 2 ')", "limit(cpu.*, 2)");
    // graphite-web's keywords in any case.
    same("sortByName(cpu.*, True)", "sortByName(cpu.*, true)");
    same("keepLastValue(cpu.load, INF)", "keepLastValue(cpu.load)");
    same(
        "percentileOfSeries(cpu.*, 50, NONE)",
        "percentileOfSeries(cpu.*, 50, false)",
    );
    // One argument not of its type, and graphite-web converts none of the call's (see
    // functions' tests): a quoted number stays a string, on which its function fails.
    for (target, wrong) in [
        (
            "percentileOfSeries(cpu.*, '50', 'yes')",
            "argument 2 (n) is \"50\", a string",
        ),
        ("sortByName(cpu.*, 'yes', 'false')", "argument 3 (reverse)"),
    ] {
        let message = error(target);
        assert!(message.contains(wrong), "{target}: {message}");
    }
    // A consolidation name that names nothing: kept in the name, harmless unless the series
    // has to be consolidated.
    let (name, _, _, points) = one("consolidateBy(cpu.load;host=b, 'maxSeries')");
    assert_eq!(name, "consolidateBy(cpu.load;host=b,\"maxSeries\")");
    assert_eq!(points, values("cpu.load;host=b"));
    let under = run(
        &["maxSeries(consolidateBy(cpu.load;host=b, 'maxSeries'))"],
        Some(2),
    );
    assert!(under.is_ok(), "{under:?}");
    let consolidated = run(&["consolidateBy(cpu.load;host=b, 'maxSeries')"], Some(2));
    assert!(consolidated
        .unwrap_err()
        .to_string()
        .contains("not a consolidation function"));
}

#[test]
fn argument_errors_name_the_function() {
    let cases = [
        ("fooBar(cpu.load)", r#"unknown function "fooBar""#),
        ("scale(nope(cpu.load), 2)", r#"unknown function "nope""#),
        (
            "scale(cpu.load)",
            "scale: takes 2 arguments (seriesList, factor), got 1",
        ),
        (
            "scale(cpu.load, 'two')",
            "scale: argument 2 (factor) is \"two\", which is not a number",
        ),
        (
            "alias(1, 'x')",
            "alias: argument 1 (seriesList) must be a series list",
        ),
        (
            "sortBy(cpu.load, 'max', 'yes')",
            "sortBy: argument 3 (reverse) must be true, false or a whole number",
        ),
        (
            "sumSeries()",
            "sumSeries: takes at least 1 arguments (seriesLists), got 0",
        ),
        (
            "perSecond(cpu.load, 1, 2, 3)",
            "perSecond: takes 1 to 3 arguments (seriesList, maxValue, minValue), got 4",
        ),
        (
            "movingAverage(cpu.load, 'x')",
            "movingAverage: argument 2 (windowSize) invalid time offset \"x\"",
        ),
        (
            "movingAverage(cpu.load, -2)",
            "movingAverage: argument 2 (windowSize) must be a zero or positive number of points",
        ),
        (
            "movingAverage(cpu.load, 9223372036854775807)",
            "movingAverage: argument 2 (windowSize) must be a zero or positive number of points",
        ),
        (
            "timeShift(cpu.load, '9999999999d')",
            "timeShift: argument 2 (timeShift) is \"-9999999999d\", more than 400 years",
        ),
        (
            "timeStack(cpu.load, '1d', 0, 9223372036854775807)",
            "timeStack: argument 4 (timeShiftEnd) asks for shifts beyond 1000",
        ),
        (
            "aliasByNode(cpu.load, 'a', None)",
            "aliasByNode: argument 3 (nodes) must be a node index",
        ),
        (
            "groupByNode(cpu.load, 0, 'asPercent')",
            "groupByNode: argument 3 (callback) is \"asPercent\"",
        ),
        (
            "aggregate(cpu.load, 'mean')",
            "aggregate: argument 2 (func) is \"mean\", not an aggregation function",
        ),
        ("'text'", "expected a path or a function call"),
        ("sumSeries(a", "missing `)`"),
        (
            "alias(cpu.load, name='x')",
            "alias: has no parameter named \"name\" (its parameters: seriesList, newName)",
        ),
        (
            "alias(cpu.load, 'x', newName='y')",
            "alias: argument 2 (newName) is given both by position and by keyword",
        ),
        (
            "aliasByNode(cpu.load, nodes=1)",
            "aliasByNode: nodes repeats and is given by position only",
        ),
        (
            "summarize(cpu.load, func='max')",
            "summarize: argument 2 (intervalString) is required",
        ),
        (
            "aliasQuery(cpu.load, 'cpu', 'nothing', '%d')",
            "aliasQuery: no series found with query \"nothing.load\"",
        ),
        (
            "aliasQuery(cpu.load, 'cpu', 'cpu', 'x')",
            "aliasQuery: argument 4 (newName) not all arguments converted",
        ),
        (
            "reduceSeries(cpu.load, 'sumSeries', 5, 'load')",
            "reduceSeries: argument 3 (reduceNode) is 5, beyond the 2 nodes of cpu.load",
        ),
        (
            "reduceSeries(group(raw.count, cpu.load), 'diffSeries', 1, 'load', 'count')",
            "reduceSeries: raw.reduce.diffSeries has no series whose node 1 is \"load\"",
        ),
        (
            "cactiStyle(cpu.load, 'metric')",
            "cactiStyle: argument 2 (system) is \"metric\", not a unit system (si or binary)",
        ),
        (
            "timeSlice(cpu.load, 'someday')",
            "timeSlice: argument 2 (startSliceAt) \"someday\" is not a time",
        ),
        (
            "verticalLine('0')",
            "verticalLine: argument 1 (ts) is 0, before the start of the range",
        ),
    ];
    for (target, message) in cases {
        let err = error(target);
        assert!(err.contains(message), "{target}: {err}");
    }
}

/// graphite-web 1.1.8's json renderer on six points at 60 s from T0 (a multiple of 120)
/// with maxDataPoints=4: two points into one (ceil(6 / 4)), stamped at multiples of 120 s
/// after the start, each window starting one point before its stamp (the "nudge": the first
/// point is dropped), the last window holding one point; no stamp after the series' end.
#[test]
fn consolidation_follows_graphite_webs_nudge() {
    let source = memory();
    let mut request = RenderRequest {
        targets: vec![
            "cpu.load;host=".into(),
            "net.bytes".into(),
            "scale(cpu.load;host=a, 1)".into(),
        ],
        from: T0,
        until: T0 + 360,
        max_data_points: Some(4),
        default_max_points: 1000,
        x_files_factor: 0.0,
        now: 0,
    };
    let out = render(&source, &request, &ReadBudget::default()).unwrap();
    // Windows of points 1-2, 3-4 and 5: gauge buckets merged (samples 3 / 1,3,10 / none),
    // counter increases averaged as graphite-web's default consolidation averages points
    // (-,30 / -5,120 / 0: the last window, cut short, is no drop), values without buckets
    // averaged (2,3 / 5 / 6).
    let ts = [T0 + 120, T0 + 240, T0 + 360];
    let points = |values: [Option<f64>; 3]| values.into_iter().zip(ts).collect::<Vec<_>>();
    assert_eq!(
        out[0].datapoints,
        points([Some(3.0), Some(14.0 / 3.0), None])
    );
    assert_eq!(
        out[1].datapoints,
        points([Some(30.0), Some(57.5), Some(0.0)])
    );
    assert_eq!(out[2].datapoints, points([Some(2.5), Some(5.0), Some(6.0)]));
    // Without maxDataPoints the server's default budget applies: 1000 points fit.
    request.max_data_points = None;
    let out = render(&source, &request, &ReadBudget::default()).unwrap();
    assert_eq!(out[0].datapoints.len(), 6);
    // One point: every point into one, stamped at the start.
    request.max_data_points = Some(1);
    let out = render(&source, &request, &ReadBudget::default()).unwrap();
    assert_eq!(out[0].datapoints, vec![(Some(27.0 / 6.0), T0)]);
    request.until = T0;
    assert!(render(&source, &request, &ReadBudget::default())
        .unwrap_err()
        .to_string()
        .contains("must be before until"));
}

/// `consolidateBy('last')` of a stored gauge shows its buckets' latest samples: each point of
/// its own (a bucket of several samples shows the last, not their average), and the latest
/// of the latest bucket of each consolidated window; a bucket that does not know its latest
/// sample shows its average. A counter's points stay increases.
#[test]
fn consolidate_by_last_takes_the_buckets_latest_samples() {
    // Samples (time within the point, value) per point; the third point's bucket was
    // folded without times, so its latest sample is unknown.
    let timed = |samples: &[(i64, f64)]| {
        let mut b = Bucket::EMPTY;
        for &(dt, v) in samples {
            b.add_at(v, crate::bucket::Last::new(v, dt));
        }
        b
    };
    let mut unknown = Bucket::EMPTY;
    [8.0, 2.0].iter().for_each(|&v| unknown.add(v));
    let mut gauge = series("temp.room", false, &[]);
    gauge.buckets = vec![
        timed(&[(T0, 4.0), (T0 + 30, 6.0)]),
        timed(&[(T0 + 70, 3.0)]),
        unknown,
        Bucket::EMPTY,
        timed(&[(T0 + 250, 1.0), (T0 + 245, 9.0)]),
        timed(&[(T0 + 300, 10.0), (T0 + 359, 2.0)]),
    ];
    let mut counter = series("net.sent", true, &[]);
    counter.buckets = gauge.buckets.clone();
    let source = Memory {
        series: vec![gauge, counter],
    };
    let request = |target: &str, max_data_points| RenderRequest {
        targets: vec![target.to_owned()],
        from: T0,
        until: T0 + 360,
        max_data_points,
        default_max_points: 1000,
        x_files_factor: 0.0,
        now: 0,
    };
    let points = |target: &str, max| -> Vec<(Option<f64>, i64)> {
        let out = render(&source, &request(target, max), &ReadBudget::default()).unwrap();
        out[0].datapoints.clone()
    };
    let stamped = |values: &[Option<f64>], step: i64, first: i64| -> Vec<(Option<f64>, i64)> {
        (values.iter().enumerate())
            .map(|(i, &v)| (v, first + i as i64 * step))
            .collect()
    };
    // Unconsolidated: each bucket's latest sample (the later one, 1.0 at T0 + 250, though
    // it arrived first), the unknown one's average.
    let last = "consolidateBy(temp.room, 'last')";
    let every = [Some(6.0), Some(3.0), Some(5.0), None, Some(1.0), Some(2.0)];
    assert_eq!(points(last, None), stamped(&every, STEP, T0));
    // The default consolidation still shows averages.
    let averages = [Some(5.0), Some(3.0), Some(5.0), None, Some(5.0), Some(6.0)];
    assert_eq!(points("temp.room", None), stamped(&averages, STEP, T0));
    // Two points into one (windows 1-2, 3-4, 5), after graphite-web's nudge: the latest of
    // the window's latest bucket with a sample.
    let wide = [Some(5.0), Some(1.0), Some(2.0)];
    assert_eq!(
        points(last, Some(4)),
        stamped(&wide, 2 * STEP, T0 + 2 * STEP)
    );
    // One point: the latest sample of all.
    assert_eq!(points(last, Some(1)), vec![(Some(2.0), T0)]);
    // Renamed, it keeps its buckets and so its latest samples.
    let aliased = format!("alias({last}, 'x')");
    assert_eq!(points(&aliased, None), stamped(&every, STEP, T0));
    // A counter's points are its increases (a bucket's total), whatever consolidateBy says.
    let totals = [
        Some(10.0),
        Some(3.0),
        Some(10.0),
        None,
        Some(10.0),
        Some(12.0),
    ];
    assert_eq!(
        points("consolidateBy(net.sent, 'last')", None),
        stamped(&totals, STEP, T0)
    );
}

/// A fetched series crosses the cluster's wire with its buckets' latest samples, so a node
/// rendering an owner's series shows `consolidateBy('last')` as the owner would; an answer
/// without them (a node of a build before buckets kept them) reads them unknown.
#[test]
fn fetched_series_cross_the_wire_with_their_latest_samples() {
    let mut known = Bucket::EMPTY;
    known.add_at(-0.0, crate::bucket::Last::new(-0.0, T0 + 5));
    let mut unknown = Bucket::EMPTY;
    unknown.add(7.0);
    let mut fetched = series("a.b", false, &[]);
    fetched.buckets = vec![unknown, Bucket::EMPTY, known];
    let json = serde_json::to_string(&fetched).unwrap();
    let back: Fetched = serde_json::from_str(&json).unwrap();
    assert_eq!(back, fetched);
    let last = back.buckets[2].last.unwrap();
    assert_eq!(last.value.to_bits(), (-0.0f64).to_bits());
    let old = r#"{"key":"a.b","start":60,"step":60,"buckets":[[1,2.5,2.5,2.5]],"counter":false}"#;
    let read: Fetched = serde_json::from_str(old).unwrap();
    assert_eq!(read.buckets[0].last, None);
    let past = old.replace("\"counter\"", "\"latest\":[[1,2.5,60]],\"counter\"");
    assert!(serde_json::from_str::<Fetched>(&past).is_err());
}

#[test]
fn json_is_graphite_webs() {
    let series = RenderedSeries {
        target: "a.b".into(),
        datapoints: vec![(Some(1.5), 60), (None, 120), (Some(f64::INFINITY), 180)],
        start: 60,
        end: 240,
        step: 60,
        path_expression: "a.*".into(),
        consolidation: "average".into(),
        x_files_factor: 0.0,
    };
    let json = String::from_utf8(crate::render::Format::Json.write(&[series])).unwrap();
    // An overflowed value as graphite-web's renderViewJson writes it (`Infinity` replaced).
    assert_eq!(
        json,
        r#"[{"target":"a.b","datapoints":[[1.5,60],[null,120],[1e9999,180]]}]"#
    );
}

proptest! {
    #[test]
    fn no_series_exceeds_max_data_points(
        points in prop::collection::vec(prop::option::of(0.0f64..100.0), 0..300),
        max in 1u32..60,
        counter: bool,
        function in 0usize..3,
    ) {
        let buckets: Vec<Vec<f64>> = points.iter().map(|p| p.iter().copied().collect()).collect();
        let samples: Vec<&[f64]> = buckets.iter().map(Vec::as_slice).collect();
        let source = Memory { series: vec![series("p.q", counter, &samples)] };
        let target = ["p.q", "scale(p.q, 3)", "summarize(p.q, '2min', 'avg')"][function];
        let request = RenderRequest {
            targets: vec![target.to_owned()],
            from: T0,
            until: T0 + 300 * STEP,
            max_data_points: Some(max),
            default_max_points: 1000,
            x_files_factor: 0.0,
            now: 0,
        };
        for s in render(&source, &request, &ReadBudget::default()).unwrap() {
            prop_assert!(s.datapoints.len() <= max as usize);
            prop_assert!(s.datapoints.windows(2).all(|w| w[0].1 < w[1].1));
        }
    }
}

#[test]
fn every_target_and_path_of_a_request_shares_one_budget() {
    // `cpu.load` selects three series of six buckets: 18 values a path.
    let request = |targets: &[&str]| RenderRequest {
        targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        from: T0,
        until: T0 + 6 * STEP,
        max_data_points: None,
        default_max_points: 1000,
        x_files_factor: 0.0,
        now: 0,
    };
    let two = request(&["cpu.load", "sumSeries(cpu.load)"]);
    assert!(render(&memory(), &two, &ReadBudget::new(36)).is_ok());
    for targets in [
        &["cpu.load", "cpu.load", "cpu.load"][..],
        &["sumSeries(cpu.load, cpu.load, cpu.load)"],
        &["cpu.load", "sumSeries(cpu.load, cpu.load)"],
    ] {
        let budget = ReadBudget::new(36);
        let err = render(&memory(), &request(targets), &budget).unwrap_err();
        assert!(
            err.to_string()
                .contains("read budget: \"cpu.load\" = 18 values on top of the 36"),
            "{targets:?}: {err}"
        );
        assert!(budget.exceeded());
    }
}

/// Target names as graphite-web 1.1.8's functions.py writes them: sumSeries and kin list the
/// distinct path expressions of their inputs in order (the path a series was fetched by,
/// kept through aliases; a renaming function's name after scale, perSecond, summarize and
/// the like; paths that matched nothing left out), scale's factor is `%g`, and
/// constantLine's value is `str(float)`.
/// Keyword arguments bind as Python binds them: by name, the parameters between left to
/// their defaults.
#[test]
fn keyword_arguments_bind_by_name() {
    assert_eq!(
        run(
            &["summarize(cpu.load, '2min', func='max', alignToFrom=true)"],
            None
        )
        .unwrap(),
        run(&["summarize(cpu.load, '2min', 'max', true)"], None).unwrap()
    );
    assert_eq!(
        one("summarize(raw.count, '2min', alignToFrom=true)").0,
        "summarize(raw.count, \"2min\", \"sum\", true)"
    );
    assert_eq!(one("alias(raw.count, newName='x')").0, "x");
}

/// xFilesFactor: the share of a window's points that must be known, set by the request or
/// by setXFilesFactor for what is evaluated after it.
#[test]
fn x_files_factor_governs_consolidation_and_aggregates() {
    // cpu.load is 5, 3, -, 2, 10, -: pairs (5, 3), (-, 2), (10, -) at maxDataPoints=3 after
    // the nudge drops the first point: (3, -), (2, 10), (-)...
    let request = |targets: &[&str], xff: f64, max: Option<u32>| RenderRequest {
        targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        from: T0,
        until: T0 + 6 * STEP,
        max_data_points: max,
        default_max_points: 1000,
        x_files_factor: xff,
        now: T0 + 6 * STEP,
    };
    let points = |r: &RenderRequest| -> Vec<Vec<Option<f64>>> {
        (render(&memory(), r, &ReadBudget::default())
            .unwrap()
            .into_iter())
        .map(|s| s.datapoints.into_iter().map(|p| p.0).collect())
        .collect()
    };
    let loose = points(&request(&["cpu.load"], 0.0, Some(3)));
    let strict = points(&request(&["cpu.load"], 1.0, Some(3)));
    let set = points(&request(&["xFilesFactor(cpu.load, 1)"], 0.0, Some(3)));
    assert_eq!(strict, set);
    assert_ne!(loose, strict);
    for (l, s) in loose[0].iter().zip(&strict[0]) {
        assert!(s.is_none() || s == l, "{loose:?} {strict:?}");
    }
    // sumSeries: a point needs every series known at xFilesFactor 1; the setting carries to
    // the next target.
    let sums = points(&request(
        &[
            "xFilesFactor(net.bytes, 1)",
            "sumSeries(raw.count, cpu.load;host=a)",
        ],
        0.0,
        None,
    ));
    assert_eq!(sums[1], [Some(101.0), Some(202.0), Some(53.0), N, N, N]);
    let sums = points(&request(
        &["sumSeries(raw.count, cpu.load;host=a)"],
        0.0,
        None,
    ));
    assert_eq!(sums[0], s(&[101.0, 202.0, 53.0, 300.0, 5.0, 6.0]));
}

#[test]
fn names_follow_graphite_web() {
    let name = |target: &str| one(target).0;
    for (target, graphite) in [
        (
            "sumSeries(cpu.load;host={a,b})",
            "sumSeries(cpu.load;host={a,b})",
        ),
        (
            "sumSeries(cpu.load;host=b, cpu.load;host=a, cpu.load;host=b)",
            "sumSeries(cpu.load;host=b,cpu.load;host=a)",
        ),
        (
            "sumSeries(no.such, cpu.load;host=a)",
            "sumSeries(cpu.load;host=a)",
        ),
        (
            "sumSeries(scale(cpu.load;host={a,b}, 2))",
            "sumSeries(scale(cpu.load;host=a,2),scale(cpu.load;host=b,2))",
        ),
        (
            "maxSeries(alias(cpu.load;host=a, 'x'), cpu.load;host=a)",
            "maxSeries(cpu.load;host=a)",
        ),
        (
            "avg(perSecond(net.bytes))",
            "averageSeries(perSecond(net.bytes))",
        ),
        (
            "sum(summarize(net.bytes, '3min'))",
            r#"sumSeries(summarize(net.bytes, "3min", "sum"))"#,
        ),
        ("minSeries(constantLine(5))", "minSeries(constantLine(5.0))"),
        (
            "sumSeries(sumSeries(cpu.load;host=a))",
            "sumSeries(sumSeries(cpu.load;host=a))",
        ),
        ("scale(net.bytes, 0.00001)", "scale(net.bytes,1e-05)"),
        ("scale(net.bytes, 1234567)", "scale(net.bytes,1.23457e+06)"),
        ("constantLine(1e20)", "1e+20"),
        ("constantLine(-0.25)", "-0.25"),
        (
            "nonNegativeDerivative(raw.count, 511)",
            "nonNegativeDerivative(raw.count)",
        ),
        ("alias(scale(net.bytes, 2), 'two')", "two"),
    ] {
        assert_eq!(name(target), graphite, "{target}");
    }
}
