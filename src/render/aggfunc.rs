//! graphite-web's aggregation functions by name (its `aggFuncs`): how a row of values, nulls
//! included, becomes one value, for `aggregate`, `groupByNode`, the moving windows,
//! `summarize`, `highest`, `sortBy` and `consolidateBy`. Each follows graphite-web's `safe`
//! helpers: nulls skipped, `None` when nothing is known, the same order of additions so the
//! floating-point answers are the same bits.

/// One of graphite-web's aggregation functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AggFunc {
    Average,
    /// The average with nulls counted as zeros.
    AvgZero,
    Median,
    Sum,
    Min,
    Max,
    /// The first known value minus every later one.
    Diff,
    /// The population standard deviation.
    Stddev,
    /// How many values are known.
    Count,
    /// Max minus min.
    Range,
    /// The product; null when any value is.
    Multiply,
    /// The last known value.
    Last,
    /// The first known value: only `consolidateBy` names it.
    First,
}

/// The names graphite-web's `aggFunc` parameters accept, as its /functions lists them.
pub(crate) const AGG_FUNC_NAMES: &[&str] = &[
    "average", "avg", "avg_zero", "count", "current", "diff", "last", "max", "median", "min",
    "multiply", "range", "rangeOf", "stddev", "sum", "total",
];

impl AggFunc {
    /// The function an `aggFunc` argument names (aliases included: avg, total, rangeOf,
    /// current); `None` for another name.
    pub(crate) fn parse(name: &str) -> Option<AggFunc> {
        Some(match name {
            "average" | "avg" => AggFunc::Average,
            "avg_zero" => AggFunc::AvgZero,
            "median" => AggFunc::Median,
            "sum" | "total" => AggFunc::Sum,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            "diff" => AggFunc::Diff,
            "stddev" => AggFunc::Stddev,
            "count" => AggFunc::Count,
            "range" | "rangeOf" => AggFunc::Range,
            "multiply" => AggFunc::Multiply,
            "last" | "current" => AggFunc::Last,
            _ => return None,
        })
    }

    /// The consolidation `consolidateBy` names: average, avg, avg_zero, sum, max, min, first,
    /// last.
    pub(crate) fn parse_consolidation(name: &str) -> Option<AggFunc> {
        Some(match name {
            "average" | "avg" => AggFunc::Average,
            "avg_zero" => AggFunc::AvgZero,
            "sum" => AggFunc::Sum,
            "max" => AggFunc::Max,
            "min" => AggFunc::Min,
            "first" => AggFunc::First,
            "last" => AggFunc::Last,
            _ => return None,
        })
    }

    /// The function of a row, nulls included, as graphite-web's `safe` helper of that name
    /// computes it; `None` when no value is known (avg_zero of an empty row too).
    pub(crate) fn reduce(self, row: &[Option<f64>]) -> Option<f64> {
        let mut known = row.iter().flatten().copied();
        let first = known.clone().next()?;
        let sum = |values: &mut dyn Iterator<Item = f64>| values.fold(0.0, |a, v| a + v);
        Some(match self {
            AggFunc::Average => {
                let n = known.clone().count();
                sum(&mut known) / n as f64
            }
            AggFunc::AvgZero => sum(&mut known) / row.len() as f64,
            AggFunc::Median => {
                let mut sorted: Vec<f64> = known.collect();
                sorted.sort_by(f64::total_cmp);
                let mid = sorted.len() / 2;
                match sorted.len() % 2 {
                    0 => (sorted[mid - 1] + sorted[mid]) / 2.0,
                    _ => sorted[mid],
                }
            }
            AggFunc::Sum => sum(&mut known),
            AggFunc::Min => known.fold(first, f64::min),
            AggFunc::Max => known.fold(first, f64::max),
            AggFunc::Diff => known.skip(1).fold(first, |a, v| a + -v),
            AggFunc::Stddev => {
                let n = known.clone().count() as f64;
                let avg = sum(&mut known.clone()) / n;
                let squares = known.fold(0.0, |a, v| a + (v - avg) * (v - avg));
                (squares / n).sqrt()
            }
            AggFunc::Count => known.count() as f64,
            AggFunc::Range => {
                let (min, max) = known.fold((first, first), |(lo, hi), v| (lo.min(v), hi.max(v)));
                max - min
            }
            AggFunc::Multiply => {
                let mut product: Option<f64> = None;
                for v in row {
                    let v = (*v)?;
                    product = Some(product.map_or(v, |p| p * v));
                }
                product?
            }
            AggFunc::Last => known.last()?,
            AggFunc::First => first,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::AggFunc;

    #[test]
    fn rows_reduce_as_graphite_webs_safe_helpers() {
        let row = [Some(4.0), None, Some(1.0), Some(2.0)];
        let of = |f: AggFunc| f.reduce(&row);
        assert_eq!(of(AggFunc::Average), Some(7.0 / 3.0));
        assert_eq!(of(AggFunc::AvgZero), Some(7.0 / 4.0));
        assert_eq!(of(AggFunc::Median), Some(2.0));
        assert_eq!(of(AggFunc::Sum), Some(7.0));
        assert_eq!(of(AggFunc::Diff), Some(1.0));
        assert_eq!(of(AggFunc::Count), Some(3.0));
        assert_eq!(of(AggFunc::Range), Some(3.0));
        assert_eq!(of(AggFunc::Multiply), None);
        assert_eq!(of(AggFunc::Last), Some(2.0));
        assert_eq!(of(AggFunc::First), Some(4.0));
        let sd = ((4.0f64 - 7.0 / 3.0).powi(2)
            + (1.0f64 - 7.0 / 3.0).powi(2)
            + (2.0f64 - 7.0 / 3.0).powi(2))
            / 3.0;
        assert_eq!(of(AggFunc::Stddev), Some(sd.sqrt()));
        assert_eq!(AggFunc::Median.reduce(&[Some(1.0), Some(4.0)]), Some(2.5));
        assert_eq!(
            AggFunc::Multiply.reduce(&[Some(3.0), Some(4.0)]),
            Some(12.0)
        );
        for f in [
            AggFunc::Sum,
            AggFunc::Count,
            AggFunc::AvgZero,
            AggFunc::Last,
        ] {
            assert_eq!(f.reduce(&[None, None]), None, "{f:?}");
        }
    }
}
