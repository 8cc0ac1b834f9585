//! graphite-web's Calculate family: the moving windows (which read their argument again from
//! earlier, so the first points have a full window), `exponentialMovingAverage`,
//! `nPercentile`, `stdev`, `linearRegression` and `aggregateLine`.

use super::combine::percentile;
use super::transform::window_seconds;
use super::{g, Args, Context, Window};
use crate::render::aggfunc::AggFunc;
use crate::render::python::round_6;
use crate::render::series::Series;
use crate::Result;

/// Python's `str.capitalize()`: the first letter upper case, the rest lower case.
fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

/// The argument's series read again from `preview` seconds before `from`, as graphite-web's
/// windowed functions read it; and the window. An empty list when the argument matches
/// nothing over the request's own range.
fn preview(a: &Args<'_>, cx: &Context<'_>, window: &Window) -> Result<(Vec<Series>, i64)> {
    let seconds = match window {
        Window::Seconds(seconds, _) => *seconds,
        Window::Points(_) => {
            let list = a.series(0, cx)?;
            if list.is_empty() {
                return Ok((Vec::new(), 0));
            }
            window_seconds(window, &list)
        }
    };
    let list = a.series(0, &cx.over(cx.from.saturating_sub(seconds), cx.until))?;
    Ok((list, seconds))
}

/// `movingWindow(seriesList, windowSize, func="average", xFilesFactor)` and the
/// `movingAverage`/`movingSum`/`movingMin`/`movingMax`/`movingMedian` shorthands: at each
/// point, `func` of the known values among the `windowSize` points before it, null when
/// none is known (or fewer than `xFilesFactor` of them).
pub(super) fn moving(
    a: &Args<'_>,
    cx: &Context<'_>,
    func_name: &str,
    agg: AggFunc,
    xff_at: usize,
) -> Result<Vec<Series>> {
    let window = a.window(1)?;
    let xff = a.opt_number(xff_at)?.unwrap_or(0.0);
    let tag = format!("moving{}", capitalize(func_name));
    let (list, seconds) = preview(a, cx, &window)?;
    let mut known = Vec::new();
    Ok((list.into_iter())
        .map(|s| {
            let (name, points) = match &window {
                Window::Seconds(_, text) => (
                    format!("{tag}({},\"{text}\")", s.name),
                    (seconds / s.step) as usize,
                ),
                Window::Points(n) => (format!("{tag}({},{n})", s.name), *n as usize),
            };
            let values: Vec<Option<f64>> = (points..s.values.len().max(points))
                .map(|i| {
                    known.clear();
                    known.extend(s.values[i - points..i].iter().flatten().map(|&v| Some(v)));
                    let enough = !known.is_empty() && known.len() as f64 / points as f64 >= xff;
                    enough.then(|| agg.reduce(&known)).flatten()
                })
                .collect();
            Series {
                start: s.start + seconds,
                ..s.derived(name, values)
            }
        })
        .collect())
}

/// `movingWindow(seriesList, windowSize, func, xFilesFactor)`.
pub(super) fn moving_window(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let func = a.string_or(2, "average")?;
    let agg = a.agg_or(2, AggFunc::Average)?;
    moving(a, cx, func, agg, 3)
}

/// `exponentialMovingAverage(seriesList, windowSize)`: seeded with the average of the first
/// window, then `c * value + (1 - c) * ema` with `c = 2 / (window + 1)` (the window in
/// seconds when given as an interval, as graphite-web has it), rounded to six decimals.
pub(super) fn exponential_moving_average(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let window = a.window(1)?;
    let (list, seconds) = preview(a, cx, &window)?;
    let constant = match &window {
        Window::Seconds(seconds, _) => 2.0 / (*seconds as f64 + 1.0),
        Window::Points(n) => 2.0 / (*n as f64 + 1.0),
    };
    Ok((list.into_iter())
        .map(|s| {
            let (name, points) = match &window {
                Window::Seconds(_, text) => (
                    format!("exponentialMovingAverage({},\"{text}\")", s.name),
                    (seconds / s.step) as usize,
                ),
                Window::Points(n) => (
                    format!("exponentialMovingAverage({},{n})", s.name),
                    *n as usize,
                ),
            };
            let head = &s.values[..points.min(s.values.len())];
            let mut ema = AggFunc::Average.reduce(head).unwrap_or(0.0);
            // Python's `safeAvg(...) or 0` also turns an average of 0.0 into 0.
            let mut values = vec![Some(round_6(ema))];
            for v in s.values.iter().skip(points) {
                values.push(v.map(|v| {
                    ema = constant * v + (1.0 - constant) * ema;
                    round_6(ema)
                }));
            }
            Series {
                start: s.start + seconds,
                ..s.derived(name, values)
            }
        })
        .collect())
}

/// `nPercentile(seriesList, n)`: a line at the n-th percentile of each series' known
/// values; a series with none is left out.
pub(super) fn n_percentile(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let n = a.number(1)?;
    if n == 0.0 {
        return Err(a.wrong(1, "must be greater than 0"));
    }
    let mut out = Vec::new();
    for s in a.series(0, cx)? {
        let Some(value) = series_percentile(&s, n) else {
            continue;
        };
        let name = format!("nPercentile({}, {})", s.name, g(n));
        let points = ((s.end - s.start) as f64 / s.step as f64) as usize;
        out.push(s.derived(name, vec![Some(value); points]));
    }
    Ok(out)
}

/// The n-th percentile of a series' known values (not interpolated).
pub(super) fn series_percentile(s: &Series, n: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = s.values.iter().flatten().copied().collect();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, n, false)
}

/// `stdev(seriesList, points, windowTolerance=0.1)`: the standard deviation over a moving
/// window of `points`, from running sums as graphite-web keeps them; null while fewer than
/// `windowTolerance` of the window is known.
pub(super) fn stdev(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let points = a.int(1)?;
    if points <= 0 {
        return Err(a.wrong(1, "must be a positive number of points"));
    }
    let tolerance = a.number_or(2, 0.1)?;
    let points_usize = points as usize;
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let (mut valid, mut sum, mut squares) = (0i64, 0.0, 0.0);
            let values = (0..s.values.len())
                .map(|i| {
                    let dropped = (i >= points_usize)
                        .then(|| s.values[i - points_usize])
                        .flatten();
                    if let Some(d) = dropped {
                        valid -= 1;
                        sum -= d;
                        squares -= d * d;
                    }
                    if let Some(v) = s.values[i] {
                        valid += 1;
                        sum += v;
                        squares += v * v;
                    }
                    if valid > 0 && valid as f64 / points as f64 >= tolerance {
                        let n = valid as f64;
                        let variance = n * squares - sum * sum;
                        (variance >= 0.0).then(|| variance.sqrt() / n)
                    } else {
                        None
                    }
                })
                .collect();
            let name = format!("stdev({},{points})", s.name);
            s.derived(name, values)
        })
        .collect())
}

/// `linearRegression(seriesList)`: the least-squares line through each series' known
/// values, over its own points. A source range (`startSourceAt`, `endSourceAt`) is refused.
pub(super) fn linear_regression(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    if a.has(1) {
        return Err(a.wrong(
            1,
            "is not supported: tierdb fits the line over the rendered range only",
        ));
    }
    let mut out = Vec::new();
    for s in a.series(0, cx)? {
        let (mut n, mut sum_i, mut sum_ii) = (0i128, 0i128, 0i128);
        let (mut sum_v, mut sum_iv) = (0.0, 0.0);
        for (i, v) in s.values.iter().enumerate() {
            if let Some(v) = v {
                let i = i as i128;
                n += 1;
                sum_i += i;
                sum_ii += i * i;
                sum_v += v;
                sum_iv += i as f64 * v;
            }
        }
        let denominator = (n * sum_ii - sum_i * sum_i) as f64;
        if denominator == 0.0 {
            continue;
        }
        let factor = (n as f64 * sum_iv - sum_i as f64 * sum_v) / denominator / s.step as f64;
        let offset =
            (sum_ii as f64 * sum_v - sum_iv * sum_i as f64) / denominator - factor * s.start as f64;
        let name = format!("linearRegression({}, {}, {})", s.name, cx.from, cx.until);
        let values = (0..s.values.len())
            .map(|i| Some(offset + (s.start + i as i64 * s.step) as f64 * factor))
            .collect();
        out.push(s.derived(name, values));
    }
    Ok(out)
}

/// `aggregateLine(seriesList, func="average", keepStep=false)`: a constant line at `func`
/// of each series' values, on the series' points with `keepStep`.
pub(super) fn aggregate_line(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let agg = a.agg_or(1, AggFunc::Average)?;
    let keep_step = a.boolean_or(2, false)?;
    Ok((a.series(0, cx)?.into_iter())
        .map(|s| {
            let value = agg.reduce(&s.values);
            let name = match value {
                Some(v) => format!("aggregateLine({}, {})", s.name, g(v)),
                None => format!("aggregateLine({}, None)", s.name),
            };
            if keep_step {
                let len = s.values.len();
                s.derived(name, vec![value; len])
            } else {
                let mut line = super::special::constant_of(value, cx);
                line.name = name.clone();
                line.path_expression = name;
                line
            }
        })
        .collect())
}
