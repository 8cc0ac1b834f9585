//! Evaluation through an in-memory [`Source`] holding samples as the engine stores them
//! (a gauge's values, a counter's increases), folded into the default tiers' buckets and,
//! when asked, served as raw points: the raw-only functions exact over raw points and
//! refused or flagged over buckets, the tier a step and range choose, and
//! `histogram_quantile`'s interpolation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::labels::{KeyFilter, MatcherSet};
use super::source::{BucketHistogram, HistogramVisit, RawPoints, Selected, Source};
use super::{evaluate, ErrorKind, Labels, Query, QueryLimits, ResultValue};
use crate::bucket::{Bucket, Last};
use crate::config::TiersConfig;
use crate::error::Result;
use crate::histogram::Histogram;
use crate::read::budget::ReadBudget;
use crate::registry::SeriesKey;
use crate::time::Timestamp;

/// Midnight, 2025-11-21.
const NOW: Timestamp = 1_763_683_200;

struct Memory {
    tiers: TiersConfig,
    /// Key, counter, stored samples (seconds, value or increase).
    series: Vec<(SeriesKey, bool, RawPoints)>,
    raw: bool,
    /// The series (by index) that are distributions: each bucket also keeps the histogram
    /// of its samples.
    distributions: Vec<usize>,
    /// The series (by index) whose buckets do not keep their latest sample (written before
    /// buckets kept it, imported).
    unknown_latest: Vec<usize>,
}

impl Source for Memory {
    fn tiers(&self) -> &TiersConfig {
        &self.tiers
    }

    fn now(&self) -> Timestamp {
        NOW
    }

    fn select(&self, sets: &[MatcherSet], _: &ReadBudget) -> Result<Vec<Selected>> {
        let filter = KeyFilter::new(sets)?;
        let mut found: Vec<Selected> = (self.series.iter().enumerate())
            .filter(|(_, (key, _, _))| filter.matches(&key.view()))
            .map(|(i, (key, counter, _))| Selected {
                id: i as u32,
                labels: super::key_labels(&key.view()),
                counter: *counter,
                distribution: self.distributions.contains(&i),
                set: 0,
            })
            .collect();
        found.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(found)
    }

    fn buckets(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
    ) -> Result<Vec<Vec<Bucket>>> {
        let res = self.tiers.tiers[tier].resolution.secs() as i64;
        let first = from.div_euclid(res) * res;
        let n = (to - first + res - 1).div_euclid(res).max(0) as usize;
        budget.charge((n * series.len()) as u128, || "buckets".into())?;
        Ok((series.iter())
            .map(|s| {
                let mut buckets = vec![Bucket::EMPTY; n];
                let unknown = self.unknown_latest.contains(&(s.id as usize));
                // A counter's values here are its increases; its raw value, what its buckets
                // keep as their latest, the running total of them.
                let mut running = 0.0;
                for &(ts, v) in &self.series[s.id as usize].2 {
                    running += v;
                    let k = (ts - first).div_euclid(res);
                    if (0..n as i64).contains(&k) {
                        let value = if s.counter { running } else { v };
                        match unknown {
                            true => buckets[k as usize].add(v),
                            false => buckets[k as usize].add_at(v, Last::new(value, ts)),
                        }
                    }
                }
                buckets
            })
            .collect())
    }

    fn visit_histograms(
        &self,
        series: &[Selected],
        tier: usize,
        from: Timestamp,
        to: Timestamp,
        budget: &ReadBudget,
        visit: &HistogramVisit<'_>,
    ) -> Result<()> {
        let res = self.tiers.tiers[tier].resolution.secs() as i64;
        let first = from.div_euclid(res) * res;
        let buckets = self.buckets(series, tier, from, to, budget)?;
        let all = (series.iter().zip(buckets)).map(|(s, buckets)| {
            let mut out: Vec<Option<BucketHistogram>> = vec![None; buckets.len()];
            for &(ts, v) in &self.series[s.id as usize].2 {
                let k = (ts - first).div_euclid(res);
                let Some(slot) = usize::try_from(k).ok().and_then(|k| out.get_mut(k)) else {
                    continue;
                };
                let bucket = slot.get_or_insert_with(|| BucketHistogram {
                    histogram: Histogram::default(),
                    sum: 0.0,
                });
                bucket.histogram.record(v);
                bucket.sum += v;
            }
            out
        });
        for (i, histograms) in all.enumerate() {
            visit(i, &histograms);
        }
        Ok(())
    }

    fn raw(
        &self,
        series: &[Selected],
        from: Timestamp,
        to: Timestamp,
        _: &ReadBudget,
    ) -> Result<Option<Vec<RawPoints>>> {
        Ok(self.raw.then(|| {
            (series.iter())
                .map(|s| {
                    (self.series[s.id as usize].2.iter())
                        .filter(|p| (from..to).contains(&p.0))
                        .copied()
                        .collect()
                })
                .collect()
        }))
    }
}

/// A gauge `g` sampled at 10, 25, 40 s into each minute of the last hour (values
/// 1, 5, 3 repeating, then a drop), and a counter `c` whose increases are 2, 0, 4.
fn memory(raw: bool) -> Memory {
    let times: Vec<i64> = (0..60)
        .flat_map(|m| [10, 25, 40].map(|s| NOW - 3600 + 60 * m + s))
        .collect();
    let gauge = (times.iter().enumerate())
        .map(|(i, &t)| (t, [1.0, 5.0, 3.0][i % 3]))
        .collect();
    let counter = (times.iter().enumerate())
        .map(|(i, &t)| (t, [2.0, 0.0, 4.0][i % 3]))
        .collect();
    Memory {
        tiers: TiersConfig::default(),
        series: vec![
            (SeriesKey::parse("g{host=a}").unwrap(), false, gauge),
            (SeriesKey::parse("c_total{host=a}").unwrap(), true, counter),
        ],
        raw,
        distributions: Vec::new(),
        unknown_latest: Vec::new(),
    }
}

fn limits() -> QueryLimits {
    QueryLimits {
        budget: Arc::new(ReadBudget::default()),
        max_series: 100,
        deadline: Instant::now() + Duration::from_secs(60),
    }
}

/// The value of `text` at `at` (one series expected), and the warnings.
fn instant(
    source: &Memory,
    text: &str,
    at: Timestamp,
) -> std::result::Result<(f64, Vec<String>), super::QueryError> {
    let query = Query {
        text: text.into(),
        start_ms: at * 1000,
        end_ms: at * 1000,
        step_ms: None,
    };
    let answer = evaluate(source, &query, &limits())?;
    match answer.result {
        ResultValue::Vector(v) if v.len() == 1 => Ok((v[0].2, answer.warnings)),
        ResultValue::Scalar(_, v) => Ok((v, answer.warnings)),
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn raw_only_functions_are_exact_over_raw_points() {
    let source = memory(true);
    let at = NOW - 600; // a minute boundary; the window [at - 2m, at] holds 6 samples.
    let cases = [
        // Gauge samples in the window: 1, 5, 3, 1, 5, 3 at 10, 25, 40, 70, 85, 100 s past.
        // irate: the last sample dropped (5 to 3), read as a reset: 3 over 15 s.
        ("irate(g[2m])", 3.0 / 15.0),
        ("idelta(g[2m])", -2.0),
        ("changes(g[2m])", 5.0),
        ("resets(g[2m])", 3.0),
        ("last_over_time(g[2m])", 3.0),
        ("quantile_over_time(0.5, g[2m])", 3.0),
        ("stdvar_over_time(g[2m])", 8.0 / 3.0),
        ("delta(g[2m])", 2.0),
        // Counter increases 2, 0, 4, 2, 0, 4: irate is the last over the time since the
        // one before, changes counts the non-zero ones after the first (its running total
        // 2, 2, 6, 8, 8, 12 changes three times).
        ("irate(c_total[2m])", 4.0 / 15.0),
        ("increase(c_total[2m])", 12.0),
        ("changes(c_total[2m])", 3.0),
    ];
    for (text, expected) in cases {
        let (value, warnings) =
            instant(&source, text, at).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(
            (value - expected).abs() < 1e-12,
            "{text}: {value} != {expected}"
        );
        assert!(warnings.is_empty(), "{text}: {warnings:?}");
    }
    // resets of a counter: its increases do not show them.
    let error = instant(&source, "resets(c_total[2m])", at).unwrap_err();
    assert_eq!(error.kind, ErrorKind::BadData);
}

#[test]
fn buckets_refuse_or_flag_what_needs_samples() {
    let source = memory(false);
    let at = NOW - 600;
    for text in [
        "idelta(g[2m])",
        "changes(g[2m])",
        "quantile_over_time(0.5, g[2m])",
        "irate(g[2m])",
        "stddev_over_time(g[2m])",
    ] {
        let error = instant(&source, text, at).unwrap_err();
        assert_eq!(error.kind, ErrorKind::BadData, "{text}");
        assert!(
            error.message.contains("raw tier"),
            "{text}: {}",
            error.message
        );
    }
    // rate() of a gauge (a StatsD counter is one) names what answers instead, not rate().
    let error = instant(&source, "rate(g[2m])", at).unwrap_err();
    assert_eq!(error.kind, ErrorKind::BadData);
    assert!(
        error.message.contains("sum_over_time(g[2m]) / 120") && !error.message.contains("use rate"),
        "{}",
        error.message
    );
    // The last bucket's rate (its increases 2 + 0 + 4 over 60 s), flagged.
    let (value, warnings) = instant(&source, "irate(c_total[2m])", at).unwrap();
    assert_eq!(value, 0.1);
    assert!(
        warnings[0].starts_with("approximate: irate(c_total[...])"),
        "{warnings:?}"
    );
    // Exact from buckets: no warning.
    let (value, warnings) = instant(&source, "rate(c_total[2m])", at).unwrap();
    assert_eq!((value, warnings.len()), (0.1, 0));
    let (value, _) = instant(&source, "avg_over_time(g[2m])", at).unwrap();
    assert_eq!(value, 3.0);
}

#[test]
fn step_and_range_choose_the_tier() {
    let source = memory(false);
    let tier_of = |start: i64, end: i64, step: i64, text: &str| {
        let query = Query {
            text: text.into(),
            start_ms: start * 1000,
            end_ms: end * 1000,
            step_ms: Some(step * 1000),
        };
        let limits = limits();
        let answer = evaluate(&source, &query, &limits).unwrap();
        (limits.budget.used(), answer.warnings)
    };
    // 1 hour at 1 minute, 5-minute windows: minute buckets, exact.
    let (fine, warnings) = tier_of(NOW - 3600, NOW, 60, "sum_over_time(g[5m])");
    assert!(warnings.is_empty());
    // 1 hour at 5 minutes: 5-minute buckets, a fifth as many.
    let (coarse, _) = tier_of(NOW - 3600, NOW, 300, "sum_over_time(g[5m])");
    assert!(coarse < fine, "{coarse} vs {fine}");
    // A 15-second step divides no tier: approximate, and said.
    let (_, warnings) = tier_of(NOW - 3600, NOW, 15, "sum_over_time(g[5m])");
    assert!(
        warnings[0].starts_with("approximate: windows and steps of 15s"),
        "{warnings:?}"
    );
}

#[test]
fn histogram_quantile_interpolates_as_prometheus() {
    let mut source = memory(false);
    source.series.clear();
    // Cumulative increases in one minute: 10 under 0.1, 50 under 0.5, 100 in all.
    for (le, count) in [("0.1", 10.0), ("0.5", 50.0), ("+Inf", 100.0)] {
        let key = SeriesKey::new("h_bucket", [("le", le)]).unwrap();
        source.series.push((key, true, vec![(NOW - 90, count)]));
    }
    let (value, _) = instant(
        &source,
        "histogram_quantile(0.9, increase(h_bucket[1m]))",
        NOW - 60,
    )
    .unwrap();
    // Rank 90 lies in the +Inf bucket: the highest finite bound.
    assert_eq!(value, 0.5);
    let (value, _) = instant(
        &source,
        "histogram_quantile(0.3, increase(h_bucket[1m]))",
        NOW - 60,
    )
    .unwrap();
    // Rank 30: 20 of the 40 between 0.1 and 0.5.
    assert!((value - 0.3).abs() < 1e-12, "{value}");
    let labels = Labels::from_pairs([
        ("le".to_owned(), "1".to_owned()),
        ("a".to_owned(), String::new()),
    ]);
    assert_eq!(labels.iter().count(), 1, "an empty label is absent");
}

#[test]
fn the_answer_text_is_the_json_of_its_value() {
    use super::value::Answer;
    let labels = Labels::from_pairs([
        ("__name__".to_string(), "a\"b".to_string()),
        ("k".to_string(), "v\\u{1}".to_string()),
    ]);
    let results = [
        ResultValue::Scalar(1_500, f64::NAN),
        ResultValue::String(2_000, "say \"hi\"\n".into()),
        ResultValue::Vector(vec![
            (labels.clone(), 3_000, f64::INFINITY),
            (Labels::default(), 3_001, -0.1),
        ]),
        ResultValue::Vector(Vec::new()),
        ResultValue::Matrix(vec![
            (
                labels,
                vec![
                    (4_000, 1e21),
                    (5_000, f64::NEG_INFINITY),
                    (6_500, 1.0 / 3.0),
                ],
            ),
            (Labels::default(), vec![(-1_000, 0.0)]),
        ]),
        ResultValue::Matrix(Vec::new()),
    ];
    for result in results {
        let answer = Answer {
            result,
            warnings: Vec::new(),
        };
        let text: serde_json::Value = serde_json::from_str(&answer.data_text())
            .unwrap_or_else(|e| panic!("{e}: {}", answer.data_text()));
        assert_eq!(text, answer.data_json(), "{}", answer.data_text());
    }
}

#[test]
fn dotted_names_get_a_hint_that_parses() {
    use super::labels::dotted_name_hint;
    let hint = |text: &str| dotted_name_hint(text).unwrap_or_default();
    assert!(
        hint("rate(cpu.usage_user[5m])").contains(
            r#"{__name__="cpu.usage_user"} or {__graphite__="cpu.usage_user"}, as in rate({__name__="cpu.usage_user"}[5m])"#
        ),
        "{}",
        hint("rate(cpu.usage_user[5m])")
    );
    assert!(hint(r#"sum by (host) (cpu.usage_user{host=~"a.b"}) > 1.5"#)
        .ends_with(r#"as in sum by (host) ({__name__="cpu.usage_user", host=~"a.b"}) > 1.5"#));
    assert!(
        hint("max_over_time(a.b{ }[1m])").ends_with(r#"as in max_over_time({__name__="a.b"}[1m])"#)
    );
    // Dots in strings and numbers, and a Graphite glob, are not names.
    assert_eq!(
        dotted_name_hint(r#"label_replace(x, "a.b", "c", "d", "e.f") +"#),
        None
    );
    assert_eq!(dotted_name_hint("x * 1.5e3 +"), None);
    // A Graphite glob, by its pseudo-label; a product of a dotted name is not one.
    assert!(
        hint("max_over_time(servers.*.cpu[5m])").ends_with(
            r#"with {__graphite__="servers.*.cpu"}, as in max_over_time({__graphite__="servers.*.cpu"}[5m])"#
        ),
        "{}",
        hint("max_over_time(servers.*.cpu[5m])")
    );
    assert!(hint(r#"servers.web?.cpu{dc="east"}"#)
        .ends_with(r#"as in {__graphite__="servers.web?.cpu", dc="east"}"#));
    assert!(hint("a.b*2").ends_with(r#"as in {__name__="a.b"}*2"#));
    // A `match[]` parameter too.
    let error = super::labels::parse_match(r#"cpu.usage_user{host="h"}"#).unwrap_err();
    assert!(
        error
            .message
            .contains(r#"as in {__name__="cpu.usage_user", host="h"}"#),
        "{}",
        error.message
    );
}

/// Graphite paths (`servers.web1.cpu`, ...), an Influx field (`cpu.usage_user`, tagged) and
/// one whose PromQL form is also a series of its own (`disk.used` beside `disk_used`), each
/// a gauge of `value` every minute of the last hour.
fn named() -> Memory {
    let series = [
        ("servers.web1.cpu", 1.0),
        ("servers.web2.cpu", 2.0),
        ("servers.web1.mem", 3.0),
        ("servers.web1.cpu.idle", 4.0),
        ("cpu.usage_user{host=a}", 5.0),
        ("disk.used{host=a}", 6.0),
        ("disk_used{host=b}", 7.0),
    ];
    Memory {
        tiers: TiersConfig::default(),
        series: (series.iter())
            .map(|&(key, value)| {
                let points = (0..60).map(|m| (NOW - 3600 + 60 * m + 30, value)).collect();
                (SeriesKey::parse(key).unwrap(), false, points)
            })
            .collect(),
        raw: false,
        distributions: Vec::new(),
        unknown_latest: Vec::new(),
    }
}

/// The instant vector `text` answers at `at`: each series' labels (as `{...}` text) and
/// value, in answer order.
fn vector(source: &Memory, text: &str, at: Timestamp) -> Result<Vec<(String, f64)>, String> {
    let query = Query {
        text: text.into(),
        start_ms: at * 1000,
        end_ms: at * 1000,
        step_ms: None,
    };
    match evaluate(source, &query, &limits())
        .map_err(|e| e.message)?
        .result
    {
        ResultValue::Vector(v) => Ok(v.into_iter().map(|(l, _, x)| (l.to_string(), x)).collect()),
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn graphite_paths_keep_their_name_where_prometheus_drops_it() {
    let source = named();
    let at = NOW - 600;
    let both = vec![
        (r#"{__name__="servers.web1.cpu"}"#.to_owned(), 1.0),
        (r#"{__name__="servers.web2.cpu"}"#.to_owned(), 2.0),
    ];
    let negated = vec![
        (r#"{__name__="servers.web1.cpu"}"#.to_owned(), -1.0),
        (r#"{__name__="servers.web2.cpu"}"#.to_owned(), -2.0),
    ];
    let cpus = r#"{__name__=~"servers\\.[^.]+\\.cpu"}"#;
    for (text, expected) in [
        // A range function, a function, an operator with a scalar, unary minus: Prometheus
        // drops the name, and two paths with no other label would be one label set.
        (format!("max_over_time({cpus}[5m])"), &both),
        (format!("abs({cpus})"), &both),
        (format!("{cpus} * 1"), &both),
        (format!("-{cpus}"), &negated),
    ] {
        assert_eq!(vector(&source, &text, at).as_ref(), Ok(expected), "{text}");
    }
    // A name PromQL can write is dropped as Prometheus drops it, and an aggregation groups
    // as Prometheus groups.
    assert_eq!(
        vector(&source, r#"max_over_time(disk_used[5m])"#, at),
        Ok(vec![(r#"{host="b"}"#.to_owned(), 7.0)])
    );
    assert_eq!(
        vector(&source, &format!("sum({cpus})"), at),
        Ok(vec![("{}".to_owned(), 3.0)])
    );
}

#[test]
fn graphite_globs_select_by_the_pseudo_label() {
    let source = named();
    let at = NOW - 600;
    let names = |text: &str| -> Vec<String> {
        let found = vector(&source, text, at).unwrap_or_else(|e| panic!("{text}: {e}"));
        found.into_iter().map(|(labels, _)| labels).collect()
    };
    let cpu = |host: &str| format!(r#"{{__name__="servers.{host}.cpu"}}"#);
    // Render's rules: a `*` stays within a segment, braces give alternatives.
    assert_eq!(
        names(r#"{__graphite__="servers.*.cpu"}"#),
        [cpu("web1"), cpu("web2")]
    );
    assert_eq!(
        names(r#"{__graphite__="servers.{web2,web3}.cpu"}"#),
        [cpu("web2")]
    );
    // Grafana's multi-value variable, `(a|b)`, is Graphite's `{a,b}`.
    assert_eq!(
        names(r#"{__graphite__="servers.(web1|web2).cpu"}"#),
        [cpu("web1"), cpu("web2")]
    );
    assert_eq!(
        names(r#"{__graphite__="servers.web[12].c?u"}"#),
        [cpu("web1"), cpu("web2")]
    );
    assert_eq!(
        names(r#"{__graphite__="servers.*.*", __graphite__!="*.*.cpu"}"#),
        [r#"{__name__="servers.web1.mem"}"#]
    );
    // With the other matchers, and within a function.
    assert_eq!(
        names(r#"max_over_time({__graphite__="*.usage_user", host="a"}[5m])"#),
        [r#"{__name__="cpu.usage_user", host="a"}"#]
    );
    // A regex, or a tag in the glob, is refused with what to write instead.
    for (text, says) in [
        (r#"{__graphite__=~"servers.*"}"#, "not a regex"),
        (
            r#"{__graphite__="servers.*.cpu;dc=east"}"#,
            "matchers of their own",
        ),
    ] {
        let error = vector(&source, text, at).unwrap_err();
        assert!(error.contains(says), "{text}: {error}");
    }
}

#[test]
fn influx_fields_answer_to_measurement_underscore_field() {
    let source = named();
    let at = NOW - 600;
    // The PromQL form of `cpu.usage_user`, bare, with matchers and in functions; a
    // function drops the name, as Prometheus drops a name it can write.
    for (text, expected) in [
        ("cpu_usage_user", r#"{__name__="cpu_usage_user", host="a"}"#),
        (
            r#"cpu_usage_user{host="a"}"#,
            r#"{__name__="cpu_usage_user", host="a"}"#,
        ),
        (
            r#"{__name__="cpu_usage_user"}"#,
            r#"{__name__="cpu_usage_user", host="a"}"#,
        ),
        ("avg_over_time(cpu_usage_user[5m])", r#"{host="a"}"#),
    ] {
        assert_eq!(
            vector(&source, text, at),
            Ok(vec![(expected.to_owned(), 5.0)]),
            "{text}"
        );
    }
    // When a series is stored under the name as written, that name means it alone.
    assert_eq!(
        vector(&source, "disk_used", at),
        Ok(vec![(
            r#"{__name__="disk_used", host="b"}"#.to_owned(),
            7.0
        )])
    );
    assert_eq!(
        vector(&source, r#"disk_used{host="a"}"#, at),
        Ok(vec![(
            r#"{__name__="disk_used", host="a"}"#.to_owned(),
            6.0
        )])
    );
    // A name with no such series stays empty.
    assert_eq!(vector(&source, "cpu_usage_system", at), Ok(vec![]));
}

/// [`memory`] with a distribution `latency{host=a}` beside the gauge and the counter: per
/// minute of the last hour, the latencies 0.1, 0.2, ..., 1.2 (12 observations).
fn with_latencies() -> Memory {
    let mut source = memory(false);
    let points = (0..60)
        .flat_map(|m| {
            (1..=12).map(move |i| (NOW - 3600 + 60 * m + 2 * i, f64::from(i as u8) / 10.0))
        })
        .collect();
    source
        .series
        .push((SeriesKey::parse("latency{host=a}").unwrap(), false, points));
    source.distributions.push(2);
    source
}

#[test]
fn distributions_evaluate_as_native_histograms() {
    let source = with_latencies();
    let at = NOW - 600;
    // Five whole minutes: 60 observations summing to 5 × 7.8.
    let cases = [
        ("histogram_count(increase(latency[5m]))", 60.0),
        ("histogram_sum(increase(latency[5m]))", 39.0),
        ("histogram_count(rate(latency[5m]))", 0.2),
        ("histogram_avg(rate(latency[5m]))", 0.65),
        ("histogram_count(sum(rate(latency[5m])))", 0.2),
        (
            "histogram_count(avg by (host) (increase(latency[5m])))",
            60.0,
        ),
        ("histogram_fraction(0, 2, increase(latency[5m]))", 1.0),
    ];
    for (text, expected) in cases {
        let (value, _) = instant(&source, text, at).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(
            (value - expected).abs() < 1e-9,
            "{text}: {value} != {expected}"
        );
    }
    // A quantile lies in the bucket of the observation it stands for (scale 6: 1.1% wide).
    // Ranks inside a bucket's run: at a run's last rank, the float division of the rate
    // may carry the rank into the next bucket, in Prometheus as here.
    for (q, sample) in [(0.55, 0.7), (0.9, 1.1), (0.24, 0.3)] {
        let text = format!("histogram_quantile({q}, rate(latency[5m]))");
        let (value, _) = instant(&source, &text, at).unwrap();
        assert!(
            (value / sample - 1.0).abs() < 0.011,
            "{text}: {value}, sample {sample}"
        );
    }
    // histogram_* of floats answers nothing, as in Prometheus.
    assert_eq!(vector(&source, "histogram_count(g)", at).unwrap(), vec![]);
}

#[test]
fn histograms_are_answered_in_prometheus_fields_and_refused_where_not_evaluated() {
    let source = with_latencies();
    let at = NOW - 600;
    let answer = |text: &str, step: Option<i64>| {
        let query = Query {
            text: text.into(),
            start_ms: (at - 120) * 1000,
            end_ms: at * 1000,
            step_ms: step,
        };
        evaluate(&source, &query, &limits())
    };
    // An instant selector: the last whole minute's histogram, flagged as an increase.
    let instant_answer = answer("latency", None).unwrap();
    let ResultValue::HistogramVector(samples) = &instant_answer.result else {
        panic!("{:?}", instant_answer.result);
    };
    assert_eq!(samples.len(), 1);
    assert_eq!(samples[0].2.count, 12.0);
    assert!(
        instant_answer.warnings[0].contains("latency: a distribution"),
        "{instant_answer:?}"
    );
    // A range query: a histogram per step, in each series' `histograms`.
    let range = answer("sum(increase(latency[1m]))", Some(60_000)).unwrap();
    let ResultValue::HistogramMatrix(series) = &range.result else {
        panic!("{:?}", range.result);
    };
    assert_eq!(series[0].1.len(), 3);
    assert!(series[0].1.iter().all(|(_, h)| h.count == 12.0));
    for answer in [instant_answer, range] {
        let text: serde_json::Value = serde_json::from_str(&answer.data_text()).unwrap();
        assert_eq!(text, answer.data_json(), "{}", answer.data_text());
        assert!(
            answer.data_text().contains("\"buckets\":[[0,\""),
            "{}",
            answer.data_text()
        );
    }
    // An instant query (at `at - 120`) of a range selector: each bucket's histogram at its
    // start.
    let window = answer("latency[3m]", None).unwrap();
    let ResultValue::HistogramMatrix(series) = &window.result else {
        panic!("{:?}", window.result);
    };
    assert_eq!(series[0].0.get("__name__"), "latency");
    let starts: Vec<i64> = series[0].1.iter().map(|p| p.0 / 1000).collect();
    assert_eq!(starts, vec![at - 300, at - 240, at - 180]);
    assert!(series[0].1.iter().all(|(_, h)| h.count == 12.0));
    assert!(
        window.warnings[0].starts_with("approximate: latency[...] is read from buckets"),
        "{window:?}"
    );
    // A selector of both kinds answers the floats and names the distributions it left out.
    let mixed = answer(r#"{host="a"}"#, None).unwrap();
    let ResultValue::Vector(floats) = &mixed.result else {
        panic!("{:?}", mixed.result);
    };
    assert_eq!(floats.len(), 2);
    assert!(
        mixed
            .warnings
            .iter()
            .any(|w| w.contains("(latency) and others")),
        "{mixed:?}"
    );
    // What does not evaluate histograms says which functions do.
    for text in [
        "abs(latency)",
        "latency + 1",
        "max(rate(latency[5m]))",
        "-latency",
    ] {
        let error = answer(text, None).unwrap_err();
        assert_eq!(error.kind, ErrorKind::BadData, "{text}");
        assert!(
            error.message.contains("histogram"),
            "{text}: {}",
            error.message
        );
    }
}

#[test]
fn histograms_kept_for_an_answer_are_charged_and_sums_fold_as_they_read() {
    let mut source = with_latencies();
    // A second host of the same latencies.
    let again = source.series[2].2.clone();
    (source.series).push((SeriesKey::parse("latency{host=b}").unwrap(), false, again));
    source.distributions.push(3);
    let at = NOW - 600;
    let query = |source: &Memory, text: &str, budget: u64| {
        let query = Query {
            text: text.into(),
            start_ms: (at - 3000) * 1000,
            end_ms: at * 1000,
            step_ms: Some(60_000),
        };
        let limits = QueryLimits {
            budget: Arc::new(ReadBudget::new(budget)),
            ..limits()
        };
        evaluate(source, &query, &limits)
    };
    // Per series, 51 steps of 12 buckets each (13 values a histogram with the zero bucket)
    // are kept besides the 2 × 56 buckets read: over a budget that holds the read alone.
    let per_series = "histogram_count(rate(latency[5m]))";
    let error = query(&source, per_series, 1_000).unwrap_err();
    assert!(
        error.message.contains("histograms kept"),
        "{}",
        error.message
    );
    assert!(query(&source, per_series, 10_000).is_ok());
    // The sum keeps a histogram per step only, whatever the series: within the same budget.
    let summed = query(
        &source,
        "histogram_count(sum without (host) (rate(latency[5m])))",
        1_000,
    );
    let answer = summed.unwrap_or_else(|e| panic!("{}", e.message));
    let ResultValue::Matrix(series) = answer.result else {
        panic!("{:?}", answer.result);
    };
    assert_eq!(series.len(), 1);
    // Two hosts of 12 latencies a minute: 0.4 a second once the window is full.
    assert!(
        series[0].1[4..]
            .iter()
            .all(|&(_, v)| (v - 0.4).abs() < 1e-12),
        "{series:?}"
    );
    // As Prometheus: rates that come to share labels (their names dropped) are refused,
    // folded or not.
    let again = source.series[2].2.clone();
    (source.series).push((SeriesKey::parse("delay{host=a}").unwrap(), false, again));
    source.distributions.push(4);
    for text in [
        r#"sum(rate({__name__=~"latency|delay"}[5m]))"#,
        r#"histogram_count(rate({__name__=~"latency|delay"}[5m]))"#,
    ] {
        let error = query(&source, text, 100_000).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Execution, "{text}");
        assert!(
            error.message.contains("same labelset"),
            "{text}: {}",
            error.message
        );
    }
}

/// An instant answer is in Prometheus' order of evaluation, not sorted by labels: a ranking
/// survives what wraps it, groups come in the order their first sample is met, and a series
/// without a sample at the time does not place the one it joins.
#[test]
fn instant_answers_keep_the_order_of_evaluation() {
    let ranks = [
        ("1", "alpha", 13.0),
        ("2", "alpha", 26.5),
        ("3", "beta", 39.25),
    ];
    let ranks = [&ranks[..], &[("4", "beta", 2.5), ("5", "beta", 15.75)]].concat();
    let hour = |value: f64, minutes: i64| -> RawPoints {
        (0..minutes)
            .map(|m| (NOW - 3600 + 60 * m + 30, value))
            .collect()
    };
    let mut series: Vec<(SeriesKey, bool, RawPoints)> = (ranks.iter())
        .map(|&(i, job, v)| {
            let key = SeriesKey::parse(&format!("rank{{i={i},job={job}}}")).unwrap();
            (key, false, hour(v, 60))
        })
        .collect();
    // By name ord_a comes first, by job second.
    for (key, v, minutes) in [
        ("ord_a{job=z}", 1.0, 60),
        ("ord_b{job=y}", 2.0, 60),
        ("gap{i=a}", 10.0, 20),
        ("gap{i=b}", 20.0, 60),
        ("gap{i=c}", 30.0, 60),
    ] {
        series.push((SeriesKey::parse(key).unwrap(), false, hour(v, minutes)));
    }
    let source = Memory {
        tiers: TiersConfig::default(),
        series,
        raw: false,
        distributions: Vec::new(),
        unknown_latest: Vec::new(),
    };
    let at = NOW - 600;
    let answer = |text: &str| vector(&source, text, at).unwrap_or_else(|e| panic!("{text}: {e}"));
    let labels = |pairs: &[(&str, &str)]| {
        Labels::from_pairs(pairs.iter().map(|&(n, v)| (n.to_owned(), v.to_owned()))).to_string()
    };
    let mut by_value = ranks.clone();
    by_value.sort_by(|a, b| a.2.total_cmp(&b.2));
    // The top three, doubled, still ranked.
    let top: Vec<(String, f64)> = (by_value.iter().rev().take(3))
        .map(|&(i, job, v)| (labels(&[("i", i), ("job", job)]), v * 2.0))
        .collect();
    assert_eq!(answer("topk(3, rank) * 2"), top);
    assert_eq!(
        answer(r#"sum by (job) ({__name__=~"ord_a|ord_b"})"#),
        [
            (labels(&[("job", "z")]), 1.0),
            (labels(&[("job", "y")]), 2.0)
        ]
    );
    // count_values: a group per (job, value) in the order met, over values ranked.
    let counted: Vec<(String, f64)> = (by_value.iter())
        .map(|&(_, job, v)| (labels(&[("job", job), ("v", &v.to_string())]), 1.0))
        .collect();
    assert_eq!(
        answer(r#"count_values by (job) ("v", sort(rank))"#),
        counted
    );
    // `without` drops the value label it was given, as Prometheus sets it before grouping.
    let each: Vec<(String, f64)> = (ranks.iter())
        .map(|&(i, job, _)| (labels(&[("i", i), ("job", job)]), 1.0))
        .collect();
    assert_eq!(answer(r#"count_values without (v) ("v", rank)"#), each);
    // gap{i="a"} has no sample at `at`: gap{i="c"} stays after gap{i="b"}.
    assert_eq!(
        answer(r#"label_replace(gap, "i", "c", "i", "a")"#),
        [
            (labels(&[("__name__", "gap"), ("i", "b")]), 20.0),
            (labels(&[("__name__", "gap"), ("i", "c")]), 30.0),
        ]
    );
}

/// Scrapes over the last hour (`start = NOW - 3600`), of the shapes a user's scrapes take:
/// `m` one sample a minute on the minute, valued its minute (from three hours back); `p` in
/// even minutes 10 at 17 s and 50 at 47 s, in odd minutes 7 at 17 s; `q` one sample a
/// minute at 20 s, valued twice its minute; the counter `k_total` one sample a minute at
/// 20 s, each adding 3 (its running total 3, 6, ...); `old_total` and `old_gauge` as
/// `k_total` and `q`, stored before buckets kept their latest sample; the counter `f_total`
/// every 15 s, 7 s past the beat, each adding 1.
fn scrapes() -> Memory {
    let start = NOW - 3600;
    let m = (-120..60).map(|i| (start + 60 * i, i as f64)).collect();
    let p = (0..60)
        .flat_map(|i| match i % 2 {
            0 => vec![(start + 60 * i + 17, 10.0), (start + 60 * i + 47, 50.0)],
            _ => vec![(start + 60 * i + 17, 7.0)],
        })
        .collect();
    let q: RawPoints = (0..60)
        .map(|i| (start + 60 * i + 20, 2.0 * i as f64))
        .collect();
    let k: RawPoints = (0..60).map(|i| (start + 60 * i + 20, 3.0)).collect();
    let f = (0..240).map(|i| (start + 15 * i + 7, 1.0)).collect();
    Memory {
        tiers: TiersConfig::default(),
        series: vec![
            (SeriesKey::parse("m").unwrap(), false, m),
            (SeriesKey::parse("p").unwrap(), false, p),
            (SeriesKey::parse("q").unwrap(), false, q.clone()),
            (SeriesKey::parse("k_total").unwrap(), true, k.clone()),
            (SeriesKey::parse("old_total").unwrap(), true, k),
            (SeriesKey::parse("old_gauge").unwrap(), false, q.clone()),
            (SeriesKey::parse("f_total").unwrap(), true, f),
        ],
        raw: false,
        distributions: Vec::new(),
        unknown_latest: vec![4, 5],
    }
}

/// Issue #54 item 10: an instant selector answered the average of the last bucket ending at
/// or before the time (over 1m data, 48 where Prometheus answers 50). Buckets keep their
/// latest sample, so it answers Prometheus' value, the latest sample at or before the time
/// within the lookback; where the buckets cannot say (a bucket holding the time with
/// several samples, the latest after it), the average, with `approximate` in the warnings.
#[test]
fn an_instant_selector_answers_the_latest_sample() {
    let source = scrapes();
    let start = NOW - 3600;
    for minute in [5, 10, 50] {
        let (value, warnings) = instant(&source, "m", start + 60 * minute).unwrap();
        assert_eq!(value, minute as f64, "the sample at the time itself");
        assert!(warnings.is_empty(), "{warnings:?}");
        let (value, warnings) = instant(&source, "m", start + 60 * minute + 59).unwrap();
        assert_eq!(value, minute as f64);
        assert!(warnings.is_empty(), "{warnings:?}");
    }
    // The end of an even minute: its latest sample (50 at 47 s), not its average (30); the
    // odd minute holding the time has one sample, after it.
    let (value, warnings) = instant(&source, "p", start + 60 * 11).unwrap();
    assert_eq!(value, 50.0);
    assert!(warnings.is_empty(), "{warnings:?}");
    let (value, _) = instant(&source, "p", start + 60 * 11 + 20).unwrap();
    assert_eq!(value, 7.0, "the odd minute's sample, at or before the time");
    // The end of an odd minute: the even minute holding the time has two samples, the
    // latest after it: either may be at the time. Today's average, said to be approximate.
    let (value, warnings) = instant(&source, "p", start + 60 * 12).unwrap();
    assert_eq!(value, 7.0);
    assert!(
        warnings.iter().any(|w| w.starts_with("approximate: p:")),
        "{warnings:?}"
    );
}

/// A range vector asked for itself is read from buckets: a point a bucket at its start, its
/// average, where Prometheus answers each sample at its time. Said (issue 54 item 9).
#[test]
fn a_range_vector_from_buckets_says_it_is_not_the_samples() {
    let query = Query {
        text: "g[3m]".into(),
        start_ms: (NOW - 600) * 1000,
        end_ms: (NOW - 600) * 1000,
        step_ms: None,
    };
    let answer = evaluate(&memory(false), &query, &limits()).unwrap();
    let ResultValue::Matrix(series) = &answer.result else {
        panic!("{:?}", answer.result);
    };
    // Buckets of the three minutes before (and the one starting at the time), each the
    // average of 1, 5 and 3 at its start.
    let points = &series[0].1;
    assert!(
        points.iter().all(|&(ts, v)| ts % 60_000 == 0 && v == 3.0),
        "{points:?}"
    );
    assert!(
        answer.warnings[0].starts_with("approximate: g[...] is read from buckets"),
        "{:?}",
        answer.warnings
    );
}

/// Each series of a matrix: its labels (as `{...}` text) and points (seconds, value).
type TextMatrix = Vec<(String, Vec<(i64, f64)>)>;

/// A range query's answer, and the warnings.
fn range_query(
    source: &Memory,
    text: &str,
    (start, end, step): (Timestamp, Timestamp, i64),
) -> (TextMatrix, Vec<String>) {
    let query = Query {
        text: text.into(),
        start_ms: start * 1000,
        end_ms: end * 1000,
        step_ms: Some(step * 1000),
    };
    let answer = evaluate(source, &query, &limits()).unwrap_or_else(|e| panic!("{text}: {e}"));
    let ResultValue::Matrix(series) = answer.result else {
        panic!("{text}: {:?}", answer.result);
    };
    let series = (series.into_iter())
        .map(|(labels, points)| {
            let points = points.into_iter().map(|(t, v)| (t / 1000, v)).collect();
            (labels.to_string(), points)
        })
        .collect();
    (series, answer.warnings)
}

/// Issue #54: at a 5-minute or 1-hour step an instant selector read the 5m or 1h tier, whose
/// bucket holding each time holds many samples, so it answered a bucket's average or
/// increase (flagged) or nothing, as `last_over_time` did. Both read the finest tier, where
/// each of one-a-minute scrapes has a bucket of its own: Prometheus' latest sample at every
/// step, a counter's running total, no warning.
#[test]
fn latest_samples_are_exact_at_coarse_steps() {
    let source = scrapes();
    let start = NOW - 3600;
    // `m` at t is its sample of the minute t starts (the last, 59, at NOW).
    let m_at = |t: i64| ((t - start) / 60).min(59) as f64;
    for step in [300, 3600] {
        let grid = (start - 7200, NOW, step);
        let expected: Vec<(i64, f64)> = (start - 7200..=NOW)
            .step_by(step as usize)
            .map(|t| (t, m_at(t)))
            .collect();
        for text in ["m", "last_over_time(m[5m])", "last_over_time(m[1h])"] {
            let (series, warnings) = range_query(&source, text, grid);
            assert_eq!(series.len(), 1, "{text} at {step}: {series:?}");
            assert_eq!(series[0].1, expected, "{text} at {step}");
            assert!(warnings.is_empty(), "{text} at {step}: {warnings:?}");
        }
    }
    // `k_total` at start + 5j minutes: its sample at 20 s of minute 5j - 1, the 5j-th, so
    // its running total 15j (its increase within a 5-minute bucket is 15).
    let expected: Vec<(i64, f64)> = (1..=12)
        .map(|j| (start + 300 * j, 15.0 * j as f64))
        .collect();
    for text in ["k_total", "last_over_time(k_total[5m])"] {
        let (series, warnings) = range_query(&source, text, (start, NOW, 300));
        assert_eq!(series.len(), 1, "{text}: {series:?}");
        assert_eq!(series[0].1, expected, "{text}");
        assert!(warnings.is_empty(), "{text}: {warnings:?}");
    }
}

/// `last_over_time` was the average of the last bucket with samples, flagged, and refused
/// for a counter. It is the latest sample in `[t - range, t]` wherever the buckets say it,
/// for windows of any width; elsewhere the average (a gauge) or nothing (a counter), and
/// `approximate` in the warnings.
#[test]
fn last_over_time_is_the_latest_sample_where_the_buckets_say_it() {
    let source = scrapes();
    let start = NOW - 3600;
    let cases = [
        // The end of an even minute: its latest sample (50 at 47 s), not its average (30).
        ("last_over_time(p[5m])", start + 60 * 11, Some(50.0)),
        // 20 s into an odd minute: its one sample at 17 s, in a 90 s window.
        ("last_over_time(p[90s])", start + 60 * 11 + 20, Some(7.0)),
        // [11m 20s, 11m 30s]: the odd minute's sample (17 s) is before the window.
        ("last_over_time(p[10s])", start + 60 * 11 + 30, None),
        ("last_over_time(q[1m])", start + 60 * 30 + 19, Some(58.0)),
        // A counter: its running total, 3 per minute (the 31st sample at 30m 20s).
        (
            "last_over_time(k_total[2m])",
            start + 60 * 30 + 20,
            Some(93.0),
        ),
    ];
    for (text, at, expected) in cases {
        let found = vector(&source, text, at).unwrap_or_else(|e| panic!("{text}: {e}"));
        let (_, warnings) = range_query(&source, text, (at, at, 60));
        assert_eq!(
            found.first().map(|f| f.1),
            expected,
            "{text} at {}",
            at - start
        );
        assert!(warnings.is_empty(), "{text}: {warnings:?}");
    }
    // The end of an odd minute: the even minute holding it has two samples, the latest
    // after it; either may be at the time. The odd minute's sample, flagged.
    let (value, warnings) = instant(&source, "last_over_time(p[5m])", start + 60 * 12).unwrap();
    assert_eq!(value, 7.0);
    assert!(
        warnings[0].starts_with("approximate: last_over_time(p[...]) where the bucket holding"),
        "{warnings:?}"
    );
    // A gauge whose buckets do not keep their latest sample: the average of the last bucket
    // lying whole in the window (minute 29's, 58, where the latest sample is 60 at 30m 20s).
    let (value, warnings) = instant(
        &source,
        "last_over_time(old_gauge[5m])",
        start + 60 * 30 + 30,
    )
    .unwrap();
    assert_eq!(value, 58.0);
    assert!(
        warnings[0].starts_with("approximate: last_over_time(old_gauge[...]) is the average"),
        "{warnings:?}"
    );
    // A counter whose buckets do not keep their latest sample: no value, said.
    let warnings = no_value(&source, "last_over_time(old_total[5m])", start + 600);
    assert!(
        warnings[0].starts_with("approximate: last_over_time(old_total[...]) has no value"),
        "{warnings:?}"
    );
}

/// The warnings of an instant query of `text` at `at` (seconds), which answers no series.
fn no_value(source: &Memory, text: &str, at: i64) -> Vec<String> {
    let query = Query {
        text: text.into(),
        start_ms: at * 1000,
        end_ms: at * 1000,
        step_ms: None,
    };
    let answer = evaluate(source, &query, &limits()).unwrap();
    assert_eq!(answer.result, ResultValue::Vector(Vec::new()), "{text}");
    answer.warnings
}

/// `timestamp()` of a selector was refused: buckets did not keep when a sample was taken.
/// It is the time of the sample the selector answers where the buckets say it, offsets
/// included; elsewhere no value, and `approximate` in the warnings.
#[test]
fn timestamp_of_a_selector_is_its_latest_samples_time() {
    let source = scrapes();
    let start = NOW - 3600;
    for (text, at, expected) in [
        ("timestamp(p)", start + 60 * 11, start + 60 * 10 + 47),
        ("timestamp(q)", start + 60 * 30 + 19, start + 60 * 29 + 20),
        (
            "timestamp(q offset 1m)",
            start + 60 * 30 + 19,
            start + 60 * 28 + 20,
        ),
        (
            "timestamp(k_total)",
            start + 60 * 30 + 20,
            start + 60 * 30 + 20,
        ),
    ] {
        let (value, warnings) =
            instant(&source, text, at).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(value, expected as f64, "{text}");
        assert!(warnings.is_empty(), "{text}: {warnings:?}");
    }
    let labels = vector(&source, "timestamp(q)", start + 600).unwrap();
    assert_eq!(
        labels[0].0, "{}",
        "the name dropped, as Prometheus drops it"
    );
    // The even minute holding the time has two samples, the latest after it: the odd
    // minute's sample, flagged.
    let (value, warnings) = instant(&source, "timestamp(p)", start + 60 * 12).unwrap();
    assert_eq!(value, (start + 60 * 11 + 17) as f64);
    assert!(
        warnings[0].starts_with("approximate: timestamp(p) where the bucket holding"),
        "{warnings:?}"
    );
    // Buckets that do not keep their latest sample: no value, said.
    let warnings = no_value(&source, "timestamp(old_gauge)", start + 600);
    assert!(
        warnings[0].starts_with("approximate: timestamp(old_gauge) has no value"),
        "{warnings:?}"
    );
}

/// Issue #54 item 9: a range vector asked for itself answered a point per bucket at its
/// start. A bucket of one sample whose latest is known is that sample: it is answered at its
/// time, with its value (a counter's running total), as Prometheus answers it, and without
/// a warning when every bucket in the window is one.
#[test]
fn a_range_vector_of_one_sample_buckets_is_the_samples() {
    let source = scrapes();
    let start = NOW - 3600;
    let matrix = |text: &str, at: i64| {
        let query = Query {
            text: text.into(),
            start_ms: at * 1000,
            end_ms: at * 1000,
            step_ms: None,
        };
        let answer = evaluate(&source, &query, &limits()).unwrap();
        let ResultValue::Matrix(series) = answer.result else {
            panic!("{text}: {:?}", answer.result);
        };
        let points: Vec<(i64, f64)> = series[0].1.iter().map(|&(t, v)| (t / 1000, v)).collect();
        (points, answer.warnings)
    };
    // [9m 30s, 11m 30s]: q's samples at 10m 20s and 11m 20s (9m 20s is before it).
    let at = start + 60 * 11 + 30;
    let (points, warnings) = matrix("q[2m]", at);
    assert_eq!(points, [(start + 620, 20.0), (start + 680, 22.0)]);
    assert!(warnings.is_empty(), "{warnings:?}");
    let (points, warnings) = matrix("k_total[2m]", at);
    assert_eq!(points, [(start + 620, 33.0), (start + 680, 36.0)]);
    assert!(warnings.is_empty(), "{warnings:?}");
    // A sample at exactly the window's start and one at its end are in it.
    let (points, warnings) = matrix("m[2m]", start + 600);
    assert_eq!(
        points,
        [(start + 480, 8.0), (start + 540, 9.0), (start + 600, 10.0)]
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    // `p`'s even minute 10 holds two samples: a point at its start, its average, said;
    // the odd minutes' samples at their times.
    let (points, warnings) = matrix("p[3m]", at);
    assert_eq!(
        points,
        [
            (start + 9 * 60 + 17, 7.0),
            (start + 600, 30.0),
            (start + 11 * 60 + 17, 7.0)
        ]
    );
    assert!(
        warnings[0].starts_with("approximate: p[...] is read from buckets"),
        "{warnings:?}"
    );
}

/// Where the bucket holding the time has several samples, the latest after it (15-second
/// scrapes at a whole minute), one of them may lie at the time: the answer is the latest
/// sample before that bucket, Prometheus' unless one does, said approximate. It was the
/// increase within the minute before (a counter), or refused (`last_over_time` of a counter).
#[test]
fn a_bucket_of_several_holding_the_time_leaves_the_sample_before_it() {
    let source = scrapes();
    let start = NOW - 3600;
    for text in ["f_total", "last_over_time(f_total[5m])"] {
        // At minute 10: the 40th sample, at 9m 52s; its running total 40.
        let (value, warnings) =
            instant(&source, text, start + 600).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(value, 40.0, "{text}");
        assert!(
            warnings.len() == 1
                && warnings[0].starts_with("approximate: ")
                && warnings[0].contains("is the latest sample before that bucket"),
            "{text}: {warnings:?}"
        );
        // 53 s past it, after the minute's last sample: exact.
        let (value, warnings) = instant(&source, text, start + 653).unwrap();
        assert_eq!((value, warnings.len()), (44.0, 0), "{text}: {warnings:?}");
    }
}
