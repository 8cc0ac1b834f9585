//! graphite-web's Calculate family: the moving windows (which read their argument again from
//! earlier, so the first points have a full window), `exponentialMovingAverage`,
//! `nPercentile`, `stdev`, `linearRegression` and `aggregateLine`.

use rayon::prelude::*;

use super::combine::percentile;
use super::transform::{self, window_seconds};
use super::{g, Args, Context, Window};
use crate::error::Result;
use crate::render::aggfunc::AggFunc;
use crate::render::expr::Expr;
use crate::render::python::round_6;
use crate::render::series::{enough_known, Series};

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
        // A plain path's step is its tier's, which the source tells without reading.
        Window::Points(n, _) if matches!(a.expr(0), Expr::Path(_)) => {
            match cx.source.step(cx.from, cx.until)? {
                Some(None) => return Ok((Vec::new(), 0)),
                Some(Some(step)) => step.saturating_mul(*n),
                None => {
                    let list = a.series(0, cx)?;
                    if list.is_empty() {
                        return Ok((Vec::new(), 0));
                    }
                    window_seconds(window, &list)
                }
            }
        }
        Window::Points(..) => {
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
    let window = a.window(1, true)?;
    let xff = a.opt_number(xff_at)?;
    let tag = format!("moving{}", capitalize(func_name));
    let (list, seconds) = preview(a, cx, &window)?;
    // Series by series on rayon's threads, each with its own buffer.
    Ok((list.into_par_iter())
        .map_init(Vec::new, |known, s| {
            let (name, points) = match &window {
                Window::Seconds(_, text) => (
                    format!("{tag}({},\"{text}\")", s.name),
                    (seconds / s.step) as usize,
                ),
                Window::Points(n, text) => (format!("{tag}({},{text})", s.name), *n as usize),
            };
            let xff = xff.unwrap_or(s.xff());
            let values = moving_values(&s.values, points, agg, xff, known);
            Series {
                start: s.start + seconds,
                ..s.derived(name, values)
            }
        })
        .collect())
}

/// `agg` of the known values among the `points` values before each point from the
/// `points`-th on; null when fewer than `xff` of them (or none) are known. Sums and averages
/// add left to right, as graphite-web's fresh `sum` of each window does (the same bits);
/// functions other than sum, average, max and min go through their general reduction, with
/// `known` as the buffer.
fn moving_values(
    values: &[Option<f64>],
    points: usize,
    agg: AggFunc,
    xff: f64,
    known: &mut Vec<Option<f64>>,
) -> Vec<Option<f64>> {
    let enough = |count: usize| enough_known(count, points as f64, xff);
    (points..values.len().max(points))
        .map(|i| {
            let window = &values[i - points..i];
            match agg {
                AggFunc::Sum | AggFunc::Average => {
                    let (mut count, mut sum) = (0usize, 0.0);
                    for v in window.iter().flatten() {
                        count += 1;
                        sum += v;
                    }
                    enough(count).then(|| match agg {
                        AggFunc::Sum => sum,
                        _ => sum / count as f64,
                    })
                }
                AggFunc::Max | AggFunc::Min => {
                    let mut count = 0usize;
                    let mut extreme = if agg == AggFunc::Max {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    };
                    for &v in window.iter().flatten() {
                        count += 1;
                        extreme = if agg == AggFunc::Max {
                            extreme.max(v)
                        } else {
                            extreme.min(v)
                        };
                    }
                    enough(count).then_some(extreme)
                }
                _ => {
                    known.clear();
                    known.extend(window.iter().copied().filter(Option::is_some));
                    if enough(known.len()) {
                        agg.reduce(known)
                    } else {
                        None
                    }
                }
            }
        })
        .collect()
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
    let window = a.window(1, false)?;
    let (list, seconds) = preview(a, cx, &window)?;
    let constant = match &window {
        Window::Seconds(seconds, _) => 2.0 / (*seconds as f64 + 1.0),
        Window::Points(n, _) => 2.0 / (*n as f64 + 1.0),
    };
    Ok((list.into_iter())
        .map(|s| {
            let (name, points) = match &window {
                Window::Seconds(_, text) => (
                    format!("exponentialMovingAverage({},\"{text}\")", s.name),
                    (seconds / s.step) as usize,
                ),
                Window::Points(n, text) => (
                    format!("exponentialMovingAverage({},{text})", s.name),
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
/// `windowTolerance` of the window is known. A window of 0 points holds none, and every
/// value is null, as in graphite-web.
pub(super) fn stdev(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let points = a.int(1)?;
    if points < 0 {
        return Err(a.wrong(1, "must be a zero or positive number of points"));
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

/// `linearRegression(seriesList, startSourceAt, endSourceAt)`: the least-squares line through
/// the known values of each series read over the source range (the request's `from` and
/// `until` where not given; times in the forms of [`transform::date`]), drawn on the points
/// of the series at the same position in the list over the request's range, as graphite-web
/// pairs them (`None` for either time is the request's, as there). A source whose values fit
/// no line (fewer than two known) gives no series.
pub(super) fn linear_regression(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let given = |i| a.has(i) && !a.is_none_arg(i);
    let from = match given(1) {
        true => transform::date(a, 1, cx)?,
        false => cx.from,
    };
    let until = match given(2) {
        true => transform::date(a, 2, cx)?,
        false => cx.until,
    };
    if from >= until {
        return Err(a.invalid(&format!(
            "the source range must not be empty: startSourceAt ({}) is not before \
             endSourceAt ({})",
            crate::time::format_ts(from),
            crate::time::format_ts(until)
        )));
    }
    let list = a.series(0, cx)?;
    let sources = if (from, until) == (cx.from, cx.until) {
        list.clone()
    } else {
        super::charge_paths(a.expr(0), cx, from, until)?;
        a.series(0, &cx.over(from, until))?
    };
    let mut out = Vec::new();
    for (source, s) in sources.iter().zip(list) {
        let Some((factor, offset)) = least_squares(source) else {
            continue;
        };
        let name = format!("linearRegression({}, {from}, {until})", s.name);
        let values = (0..s.values.len())
            .map(|i| Some(offset + s.at(i) as f64 * factor))
            .collect();
        out.push(s.derived(name, values));
    }
    Ok(out)
}

/// graphite-web's `_linearRegressionAnalysis`: the slope per second and the value at time 0
/// of the least-squares line through the known values of `s` (the sums over point indexes
/// kept exact, as Python's integers are); `None` when they fit no line.
fn least_squares(s: &Series) -> Option<(f64, f64)> {
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
        return None;
    }
    let factor = (n as f64 * sum_iv - sum_i as f64 * sum_v) / denominator / s.step as f64;
    let offset =
        (sum_ii as f64 * sum_v - sum_iv * sum_i as f64) / denominator - factor * s.start as f64;
    Some((factor, offset))
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

/// graphite-web's Holt-Winters analysis of a series (alpha = gamma = 0.1, beta = 0.0035,
/// one season of `season` points): the prediction and the deviation at each point. A null
/// breaks the recurrences as graphite-web's does: its prediction is the one pending, its
/// intercept null, its slope, season and deviation 0.
fn holt_winters(values: &[Option<f64>], season: usize) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let (alpha, gamma, beta) = (0.1, 0.1, 0.0035);
    let n = values.len();
    let mut intercepts: Vec<Option<f64>> = Vec::with_capacity(n);
    let mut slopes: Vec<f64> = Vec::with_capacity(n);
    let mut seasonals: Vec<f64> = Vec::with_capacity(n);
    let mut predictions: Vec<Option<f64>> = Vec::with_capacity(n);
    let mut deviations: Vec<f64> = Vec::with_capacity(n);
    let last = |list: &[f64], i: usize| i.checked_sub(season).map_or(0.0, |j| list[j]);
    let mut next_pred: Option<f64> = None;
    for (i, actual) in values.iter().enumerate() {
        let Some(actual) = *actual else {
            intercepts.push(None);
            slopes.push(0.0);
            seasonals.push(0.0);
            predictions.push(next_pred);
            deviations.push(0.0);
            next_pred = None;
            continue;
        };
        let (last_intercept, last_slope, prediction) = if i == 0 {
            (actual, 0.0, Some(actual))
        } else {
            let intercept = intercepts[i - 1].unwrap_or(actual);
            (intercept, slopes[i - 1], next_pred)
        };
        let last_seasonal = last(&seasonals, i);
        // The season one point ahead: not yet computed when it is this very point.
        let next_last_seasonal = (i + 1)
            .checked_sub(season)
            .filter(|&j| j < seasonals.len())
            .map_or(0.0, |j| seasonals[j]);
        let last_seasonal_dev = last(&deviations, i);
        let intercept =
            alpha * (actual - last_seasonal) + (1.0 - alpha) * (last_intercept + last_slope);
        let slope = beta * (intercept - last_intercept) + (1.0 - beta) * last_slope;
        let seasonal = gamma * (actual - intercept) + (1.0 - gamma) * last_seasonal;
        next_pred = Some(intercept + slope + next_last_seasonal);
        let deviation =
            gamma * (actual - prediction.unwrap_or(0.0)).abs() + (1.0 - gamma) * last_seasonal_dev;
        intercepts.push(Some(intercept));
        slopes.push(slope);
        seasonals.push(seasonal);
        predictions.push(prediction);
        deviations.push(deviation);
    }
    (predictions, deviations.into_iter().map(Some).collect())
}

/// The Holt-Winters arguments: the bootstrap interval and the season, in seconds. A
/// bootstrap interval false by Python's truth (`0`, `None`, `''`) is none, as graphite-web's
/// `parseTimeOffset` reads it: the analysis starts at `from`.
fn holt_winters_args(a: &Args<'_>, bootstrap_at: usize) -> Result<(i64, i64)> {
    let bootstrap = if a.is_true(bootstrap_at) {
        a.interval(bootstrap_at)?.0
    } else if a.has(bootstrap_at) {
        0
    } else {
        7 * 86_400
    };
    let season = if a.has(bootstrap_at + 1) {
        a.interval(bootstrap_at + 1)?.0
    } else {
        86_400
    };
    Ok((bootstrap, season))
}

/// A series read for Holt-Winters, with its predictions and deviations over the request's
/// own points.
type Forecast = (Series, Vec<Option<f64>>, Vec<Option<f64>>);

/// Each series read again from `bootstrap` seconds before `from`, with its Holt-Winters
/// predictions and deviations over the request's own points.
fn holt_winters_bands(
    a: &Args<'_>,
    cx: &Context<'_>,
    bootstrap: i64,
    season: i64,
) -> Result<Vec<Forecast>> {
    let list = a.series(0, &cx.over(cx.from.saturating_sub(bootstrap), cx.until))?;
    Ok((list.into_iter())
        .map(|s| {
            let season_points = (season / s.step).max(0) as usize;
            let (predictions, deviations) = holt_winters(&s.values, season_points);
            let skip = ((bootstrap / s.step) as usize).min(predictions.len());
            let tail = |v: Vec<Option<f64>>| v[skip..].to_vec();
            (s, tail(predictions), tail(deviations))
        })
        .collect())
}

/// `holtWintersForecast(seriesList, bootstrapInterval="7d", seasonality="1d")`.
pub(super) fn holt_winters_forecast(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let (bootstrap, season) = holt_winters_args(a, 1)?;
    Ok((holt_winters_bands(a, cx, bootstrap, season)?.into_iter())
        .map(|(s, predictions, _)| {
            let name = format!("holtWintersForecast({})", s.name);
            Series {
                start: s.start + bootstrap,
                ..s.derived(name, predictions)
            }
        })
        .collect())
}

/// The lower and upper bands, `delta` deviations around the forecast.
fn bands(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<(Series, Series, Series)>> {
    let delta = a.number_or(1, 3.0)?;
    let (bootstrap, season) = holt_winters_args(a, 2)?;
    Ok((holt_winters_bands(a, cx, bootstrap, season)?.into_iter())
        .map(|(s, forecast, deviation)| {
            let band = |sign: f64| -> Vec<Option<f64>> {
                (forecast.iter().zip(&deviation))
                    .map(|(f, d)| Some(f.as_ref()? + sign * delta * d.as_ref()?))
                    .collect()
            };
            let (lower, upper) = (band(-1.0), band(1.0));
            let path = s.path_expression.clone();
            let shifted = Series {
                start: s.start + bootstrap,
                ..s.clone()
            };
            let mut lower_series = shifted
                .clone()
                .derived(format!("holtWintersConfidenceLower({})", s.name), lower);
            let mut upper_series =
                shifted.derived(format!("holtWintersConfidenceUpper({})", s.name), upper);
            lower_series.path_expression = path.clone();
            upper_series.path_expression = path;
            (s, lower_series, upper_series)
        })
        .collect())
}

/// `holtWintersConfidenceBands(seriesList, delta=3, bootstrapInterval="7d",
/// seasonality="1d")`: the lower and the upper band of each series.
pub(super) fn holt_winters_confidence_bands(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok((bands(a, cx)?.into_iter())
        .flat_map(|(_, lower, upper)| [lower, upper])
        .collect())
}

/// `holtWintersConfidenceArea(...)`: the two bands, both named
/// `holtWintersConfidenceArea(path)`.
pub(super) fn holt_winters_confidence_area(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut out = Vec::new();
    for (_, mut lower, mut upper) in bands(a, cx)? {
        let name = format!("holtWintersConfidenceArea({})", upper.path_expression);
        lower.name = name.clone();
        upper.name = name.clone();
        lower.path_expression = name.clone();
        upper.path_expression = name;
        out.extend([lower, upper]);
    }
    Ok(out)
}

/// `holtWintersAberration(...)`: how far each point lies above the upper band or below the
/// lower one (0 inside, and for a null).
pub(super) fn holt_winters_aberration(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let list = a.series(0, cx)?;
    let bands = bands(a, cx)?;
    let mut out = Vec::new();
    for s in list {
        let Some((_, lower, upper)) = bands.iter().find(|(b, _, _)| b.name == s.name) else {
            continue;
        };
        let at = |band: &Series, i: usize| band.values.get(i).copied().flatten();
        let values = (s.values.iter().enumerate())
            .map(|(i, v)| {
                Some(match *v {
                    None => 0.0,
                    Some(v) if at(upper, i).is_some_and(|u| v > u) => v - at(upper, i).unwrap_or(v),
                    Some(v) if at(lower, i).is_some_and(|l| v < l) => v - at(lower, i).unwrap_or(v),
                    Some(_) => 0.0,
                })
            })
            .collect();
        let name = format!("holtWintersAberration({})", s.name);
        out.push(s.derived(name, values));
    }
    Ok(out)
}
