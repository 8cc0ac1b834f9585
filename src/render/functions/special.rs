//! Series that graphite-web makes from nothing (`constantLine`, `threshold`, `sinFunction`,
//! `timeFunction`, `identity`, `randomWalk`) and `stacked`, whose running totals are kept
//! per stack name across the request's targets, as graphite-web keeps them.

use std::collections::HashMap;

use super::{Args, Context};
use crate::error::Result;
use crate::render::expr::Expr;
use crate::render::python::str_float;
use crate::render::series::Series;

/// The running totals of `stacked`, per stack name, over one request.
pub(crate) type Stacks = std::cell::RefCell<HashMap<String, Vec<f64>>>;

/// graphite-web's constantLine of `value` over the request: three points, at `from`, halfway
/// and `until`, named `str(value)`.
pub(super) fn constant_of(value: Option<f64>, cx: &Context<'_>) -> Series {
    let text = value.map_or_else(|| "None".to_owned(), str_float);
    let step = (cx.until.saturating_sub(cx.from) / 2).max(1);
    let mut line = Series::new(text.clone(), (cx.from, cx.until, step), vec![value; 3]);
    line.path_expression = format!("constantLine({text})");
    line
}

pub(super) fn constant(value: f64, cx: &Context<'_>) -> Series {
    constant_of(Some(value), cx)
}

/// `constantLine(value)`; a value of `None` makes three null points named `None`, as
/// graphite-web's does.
pub(super) fn constant_line(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    Ok(vec![constant_of(a.opt_number(0)?, cx)])
}

/// `threshold(value, label, color)`: a constant line named `label` when it is true by
/// Python's truth (an unquoted one by Python's `str` of it, as graphite-web names it). The
/// color is taken as graphite-web takes it, whatever it is, and only colors an image. A value
/// of `None` is [`constant_line`]'s.
pub(super) fn threshold(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let mut line = constant_of(a.opt_number(0)?, cx);
    if let Some(label) = a.label(1)? {
        line.name = label;
    }
    Ok(vec![line])
}

/// The stamps from `from` (inclusive) to `until` (exclusive) every `step` seconds, as
/// graphite-web's generated series walk them; refused past the point limit.
fn stamps(a: &Args<'_>, cx: &Context<'_>, step_at: usize) -> Result<(i64, Vec<i64>)> {
    let step = a.int_or(step_at, 60)?;
    if step <= 0 {
        return Err(a.wrong(step_at, "must be a positive number of seconds"));
    }
    let count = (cx.until - cx.from + step - 1) / step;
    if count as u64 > crate::read::query::MAX_QUERY_POINTS {
        return Err(a.wrong(
            step_at,
            &format!("makes {count} points, too many for the range"),
        ));
    }
    Ok((
        step,
        (0..count.max(0)).map(|i| cx.from + i * step).collect(),
    ))
}

/// `sinFunction(name, amplitude=1, step=60)`: `amplitude * sin(t)` at each stamp.
pub(super) fn sin_function(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let name = a.python_str(0)?;
    let amplitude = a.number_or(1, 1.0)?;
    let (step, stamps) = stamps(a, cx, 2)?;
    let values = stamps
        .iter()
        .map(|&t| Some((t as f64).sin() * amplitude))
        .collect();
    Ok(vec![Series::new(name, (cx.from, cx.until, step), values)])
}

/// `timeFunction(name, step=60)`: each stamp's own time.
pub(super) fn time_function(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let name = a.python_str(0)?;
    let (step, stamps) = stamps(a, cx, 1)?;
    let values = stamps.iter().map(|&t| Some(t as f64)).collect();
    Ok(vec![Series::new(name, (cx.from, cx.until, step), values)])
}

/// `identity(name)`: each minute's own time.
pub(super) fn identity(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let name = a.python_str(0)?;
    let (step, stamps) = stamps(a, cx, usize::MAX)?;
    let values = stamps.iter().map(|&t| Some(t as f64)).collect();
    let mut series = Series::new(name.clone(), (cx.from, cx.until, step), values);
    series.path_expression = format!("identity(\"{name}\")");
    Ok(vec![series])
}

/// `randomWalk(name, step=60)`: from 0, a uniform step in -0.5..0.5 at each stamp. The
/// randomness is tierdb's own, so the values differ from any graphite-web answer.
pub(super) fn random_walk(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let name = a.python_str(0)?;
    let (step, stamps) = stamps(a, cx, 1)?;
    let mut state = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
        | 1;
    let mut current = 0.0;
    let values = (stamps.iter())
        .map(|_| {
            let value = current;
            // xorshift64: enough for a demo line.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            current += (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            Some(value)
        })
        .collect();
    Ok(vec![Series::new(name, (cx.from, cx.until, step), values)])
}

/// `seriesByTag('tag=value', ...)`: every stored series whose tags satisfy the expressions
/// ([`crate::render::PathPattern::series_by_tag`]), named by its tagged path
/// (`name;k=v;...`, tags sorted), its path expression the call as written.
pub(super) fn series_by_tag(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let pattern = crate::render::PathPattern::series_by_tag(a.call)?;
    let fetched = cx.source.fetch(&pattern, cx.from, cx.until)?;
    cx.note_estimates(&fetched);
    Ok((fetched.into_iter())
        .map(|f| Series::fetched(f, a.call))
        .collect())
}

/// `stacked(seriesList, stack)`: each value added to the running total of its point in the
/// stack (shared by every `stacked` of the request with that stack name), and the total
/// shown; nulls stay null. Renamed `stacked(name)` without a stack name. A stack named by a
/// bare value (`5`, `true`, `None`) is graphite-web's dictionary key: a number equal to
/// another is the same stack (`1`, `1.0` and `true`), a quoted one (`'1'`) another.
pub(super) fn stacked(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let stack = match a.arg(1) {
        None => None,
        Some(Expr::Str(name)) => Some(name.clone()),
        Some(Expr::Int(n)) => Some(format!("\0{}", str_float(*n as f64))),
        Some(Expr::Number(n)) => Some(format!("\0{}", str_float(*n))),
        Some(Expr::Bool(b)) => Some(format!("\0{}", str_float(f64::from(u8::from(*b))))),
        Some(Expr::None) => Some("\0None".to_owned()),
        Some(_) => return Err(a.wrong(1, "must be a quoted string")),
    };
    let list = a.series(0, cx)?;
    let mut stacks = cx.stacks.borrow_mut();
    let totals = stacks
        .entry(stack.clone().unwrap_or_else(|| "__DEFAULT__".to_owned()))
        .or_default();
    Ok((list.into_iter())
        .map(|mut s| {
            if totals.len() < s.values.len() {
                totals.resize(s.values.len(), 0.0);
            }
            for (v, total) in s.values.iter_mut().zip(totals.iter_mut()) {
                if let Some(x) = *v {
                    *total += x;
                    *v = Some(*total);
                }
            }
            let name = match stack.as_deref() {
                None | Some("__DEFAULT__") => format!("stacked({})", s.name),
                Some(_) => s.name.clone(),
            };
            s.mapped(name, |v| v)
        })
        .collect())
}

/// `verticalLine(ts, label, color)`: one point of 1 at `ts`, named by the label (`None`
/// without one, as graphite-web's JSON has it); refused outside the request's range, as
/// graphite-web refuses it.
pub(super) fn vertical_line(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let at = super::transform::date(a, 0, cx)?;
    if at < cx.from {
        return Err(a.wrong(
            0,
            &format!("is {at}, before the start of the range ({})", cx.from),
        ));
    }
    if at > cx.until {
        return Err(a.wrong(
            0,
            &format!("is {at}, after the end of the range ({})", cx.until),
        ));
    }
    // graphite-web names the series by the label as given (`None` when absent), and takes
    // any color, which only colors an image.
    let label = if a.has(1) {
        a.python_str(1)?
    } else {
        "None".to_owned()
    };
    Ok(vec![Series::new(label, (at, at, 1), vec![Some(1.0); 2])])
}

/// `setXFilesFactor(seriesList, xFilesFactor)` (short form `xFilesFactor`): the series
/// unchanged but for their xFilesFactor, which also becomes the request's for everything
/// evaluated after it, later targets included, as in graphite-web. `None` is refused:
/// graphite-web keeps it and fails when the series is then consolidated.
pub(super) fn set_x_files_factor(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let xff = a.number(1)?;
    if !xff.is_finite() {
        return Err(a.wrong(1, "must be a finite number (0 to 1)"));
    }
    let mut list = a.series(0, cx)?;
    cx.x_files_factor.set(xff);
    for s in &mut list {
        s.x_files_factor = Some(xff);
    }
    Ok(list)
}

/// `events(*tags)`: the number of events at each second of the range, named
/// `events("tag", ...)`, consolidated by sum. tierdb keeps no events, so every point is
/// null: graphite-web's answer over an empty events table.
pub(super) fn events(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    let tags: Vec<&str> = (0..a.len()).map(|i| a.string(i)).collect::<Result<_>>()?;
    let name = format!("events(\"{}\")", tags.join("\", \""));
    let points = cx.until - cx.from;
    if points as u64 > crate::read::query::MAX_QUERY_POINTS {
        return Err(a.invalid(&format!(
            "one point a second over {points}s; at most {} (a shorter range)",
            crate::read::query::MAX_QUERY_POINTS
        )));
    }
    let mut series = Series::new(name, (cx.from, cx.until, 1), vec![None; points as usize]);
    series.consolidate_by = Some(crate::render::series::ConsolidateBy {
        name: "sum".to_owned(),
        func: Some(crate::render::aggfunc::AggFunc::Sum),
    });
    Ok(vec![series])
}
