use std::collections::BTreeMap;

use super::*;
use crate::bucket::Bucket;
use crate::histogram::{relative_error, Histogram, DEFAULT_SCALE};

/// A point holding `values`, histogram and all, as a timer's bucket holds them.
fn point(values: &[f64]) -> DistributionPoint {
    let mut bucket = Bucket::EMPTY;
    let mut histogram = Histogram::default();
    for &v in values {
        bucket.add(v);
        histogram.record(v);
    }
    DistributionPoint {
        ts: 0,
        bucket,
        histogram: Some(histogram),
    }
}

/// statsd's own stats of one flush (lib/process_metrics.js), for the threshold `pct`.
fn statsd(values: &[f64], pct: f64) -> BTreeMap<String, f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let count = v.len();
    let cumulative: Vec<f64> = (v.iter())
        .scan(0.0, |s, x| {
            *s += x;
            Some(*s)
        })
        .collect();
    let mut out = BTreeMap::new();
    let clean = pct.abs().to_string().replacen('.', "_", 1);
    let clean = if pct < 0.0 {
        format!("top{clean}")
    } else {
        clean
    };
    let mut n = count;
    let (mut sum, mut bound) = (v[0], v[count - 1]);
    if count > 1 {
        n = (pct.abs() / 100.0 * count as f64 + 0.5).floor() as usize;
        if n > 0 {
            if pct > 0.0 {
                bound = v[n - 1];
                sum = cumulative[n - 1];
            } else {
                bound = v[count - n];
                sum = cumulative[count - 1]
                    - if count > n {
                        cumulative[count - n - 1]
                    } else {
                        0.0
                    };
            }
        }
    }
    if n > 0 {
        let side = if pct > 0.0 { "upper" } else { "lower" };
        out.insert(format!("count_{clean}"), n as f64);
        out.insert(format!("sum_{clean}"), sum);
        out.insert(format!("mean_{clean}"), sum / n as f64);
        out.insert(format!("{side}_{clean}"), bound);
    }
    let mid = count / 2;
    let median = if count % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    let total = cumulative[count - 1];
    out.insert("count".into(), count as f64);
    out.insert("count_ps".into(), count as f64 / 10.0);
    out.insert("sum".into(), total);
    out.insert("mean".into(), total / count as f64);
    out.insert("upper".into(), v[count - 1]);
    out.insert("lower".into(), v[0]);
    out.insert("median".into(), median);
    out
}

#[test]
fn names_round_trip_in_statsd_spelling_only() {
    for text in [
        "count",
        "count_ps",
        "sum",
        "mean",
        "upper",
        "lower",
        "median",
        "upper_90",
        "mean_90",
        "sum_90",
        "count_90",
        "upper_99_9",
        "upper_100",
        "lower_top10",
        "mean_top5",
        "count_top10",
        "sum_top0_5",
    ] {
        let stat = Stat::parse(text).unwrap_or_else(|| panic!("{text} parses"));
        assert_eq!(stat.name(), text);
    }
    for text in [
        "std",
        "sum_squares",
        "sum_squares_90",
        "upper_top10",
        "lower_90",
        "upper_090",
        "upper_0",
        "upper_101",
        "upper_",
        "upper_9_",
        "upper_x",
        "max",
        "histogram",
        "upper_90_5_1",
        "count_ps_90",
    ] {
        assert_eq!(Stat::parse(text), None, "{text}");
    }
    let listed: Vec<String> = Stat::listed().into_iter().map(Stat::name).collect();
    assert!(listed.contains(&"upper_90".to_owned()), "{listed:?}");
    assert!(!listed.iter().any(|s| s.starts_with("std")), "{listed:?}");
}

/// Every stat against statsd's own computation over the raw values: exact where the doc
/// says exact, within the stated error where it says so.
#[test]
fn stats_agree_with_statsd_within_the_stated_error() {
    let e = relative_error(DEFAULT_SCALE);
    let mut rng = 17u64;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((rng >> 11) as f64 / (1u64 << 53) as f64) * 900.0 + 0.5
    };
    for n in [1usize, 2, 3, 4, 5, 9, 10, 11, 37, 200] {
        let values: Vec<f64> = (0..n).map(|_| (next() * 1000.0).round() / 1000.0).collect();
        let p = point(&values);
        for pct in [90.0, 50.0, 99.9, 100.0, 5.0, -10.0, -50.0] {
            let want = statsd(&values, pct);
            for (name, &want) in &want {
                let stat = Stat::parse(name).unwrap_or_else(|| panic!("{name}"));
                let got = stat
                    .value(&p, 10)
                    .unwrap_or_else(|| panic!("{name} of {n}"));
                let exact = matches!(
                    stat,
                    Stat::Count
                        | Stat::CountPs
                        | Stat::Sum
                        | Stat::Mean
                        | Stat::Upper
                        | Stat::Lower
                        | Stat::Threshold(Part::Count, _)
                );
                let tolerance = if exact {
                    1e-9 * want.abs()
                } else {
                    e * want.abs() + 1e-9
                };
                assert!(
                    (got - want).abs() <= tolerance,
                    "{name} of {n} values: {got} vs statsd's {want}"
                );
            }
            // statsd writes no threshold stat when the threshold holds no sample.
            if !want.keys().any(|k| k.starts_with("count_")) {
                let t = if pct > 0.0 { "upper" } else { "lower_top" };
                let name = format!("{t}_{}", pct.abs()).replace("_top_", "_top");
                if let Some(stat) = Stat::parse(&name.replacen('.', "_", 1)) {
                    assert_eq!(stat.value(&p, 10), None, "{name} of {n}");
                }
            }
        }
    }
}

#[test]
fn empty_and_incomplete_points() {
    let empty = DistributionPoint {
        ts: 0,
        bucket: Bucket::EMPTY,
        histogram: None,
    };
    for stat in Stat::listed() {
        assert_eq!(stat.value(&empty, 60), None, "{}", stat.name());
    }
    // Samples without a histogram (written before the series was a distribution): what
    // the bucket holds is answered, what needs the histogram is not.
    let mut bucket = Bucket::EMPTY;
    [3.0, 5.0, 9.0].iter().for_each(|&v| bucket.add(v));
    let bare = DistributionPoint {
        ts: 0,
        bucket,
        histogram: None,
    };
    let value = |s: &str| Stat::parse(s).unwrap().value(&bare, 60);
    assert_eq!(value("count"), Some(3.0));
    assert_eq!(value("upper"), Some(9.0));
    assert_eq!(value("count_90"), Some(3.0));
    assert_eq!(value("sum_90"), Some(17.0), "every sample: the exact total");
    assert_eq!(
        value("upper_90"),
        Some(9.0),
        "the last rank is the exact max"
    );
    assert_eq!(value("median"), None);
    assert_eq!(value("upper_50"), None);
}

/// Merging points and taking the stat is the stat of all their samples: a percentile of two
/// minutes is not the average of the minutes' percentiles.
#[test]
fn merged_points_give_the_stat_of_all_samples() {
    let quiet: Vec<f64> = (1..=100).map(f64::from).collect();
    let busy: Vec<f64> = (1..=10).map(|i| 1000.0 * f64::from(i)).collect();
    let upper_90 = Stat::parse("upper_90").unwrap();
    let timer = TimerPoints {
        stat: upper_90,
        points: vec![point(&quiet), point(&busy)],
    };
    let merged = timer.merged(2);
    assert_eq!(merged.points.len(), 1);
    let all: Vec<f64> = quiet.iter().chain(&busy).copied().collect();
    let want = statsd(&all, 90.0)["upper_90"];
    let got = merged.values(120)[0].unwrap();
    assert!(
        (got - want).abs() <= relative_error(DEFAULT_SCALE) * want,
        "{got} vs {want}"
    );
    let averaged = (timer.values(60)[0].unwrap() + timer.values(60)[1].unwrap()) / 2.0;
    assert!(
        (averaged - want).abs() > 0.1 * want,
        "the average of percentiles differs"
    );
    let count_ps = Stat::CountPs.value(&merged.points[0], 120).unwrap();
    assert_eq!(count_ps, 110.0 / 120.0);
}

/// The stats answered from the bucket state no error; those taken from the histogram state
/// the largest of their points' histograms' (a coarser one merged in raises it).
#[test]
fn estimates_state_their_histograms_error() {
    let values: Vec<f64> = (1..=50).map(|i| 3.0 * f64::from(i)).collect();
    let mut coarse = point(&values);
    if let Some(h) = coarse.histogram.as_mut() {
        h.reduce_to(DEFAULT_SCALE - 2);
    }
    let points = vec![point(&values), coarse];
    for name in [
        "count",
        "count_ps",
        "sum",
        "mean",
        "upper",
        "lower",
        "count_90",
        "count_top5",
    ] {
        let stat = Stat::parse(name).unwrap();
        assert!(!stat.estimates(), "{name}");
        let timer = TimerPoints {
            stat,
            points: points.clone(),
        };
        assert_eq!(timer.relative_error(), None, "{name}");
    }
    for name in [
        "median",
        "upper_90",
        "sum_90",
        "mean_90",
        "upper_99_9",
        "lower_top5",
        "mean_top5",
    ] {
        let stat = Stat::parse(name).unwrap();
        assert!(stat.estimates(), "{name}");
        let one = TimerPoints {
            stat,
            points: points[..1].to_vec(),
        };
        assert_eq!(one.relative_error(), Some(relative_error(DEFAULT_SCALE)));
        let both = TimerPoints {
            stat,
            points: points.clone(),
        };
        assert_eq!(
            both.relative_error(),
            Some(relative_error(DEFAULT_SCALE - 2)),
            "{name}"
        );
        assert_eq!(
            both.merged(2).relative_error(),
            both.relative_error(),
            "{name}: the merge keeps the coarser scale"
        );
    }
}
