//! graphite-web's `validateParams` over a call's parsed arguments. With its default
//! `ENFORCE_INPUT_VALIDATION = False`, graphite-web checks every argument against its declared
//! type and, when all pass, hands the function the converted values (`'true'` is `True`,
//! `'2'` is `2.0`); when one fails, it hands every argument on as written, and the function
//! reads them as Python does (a non-empty string is true). [`Args`](super::Args) reads its
//! arguments by the outcome.

use serde_json::Value;

use super::python_float;
use super::table::Param;
use crate::render::aggfunc::AGG_FUNC_NAMES;
use crate::render::expr::Expr;

/// The first argument (0-based) that graphite-web's validation refuses; `None` when every one
/// passes. `args` holds the call's arguments in their parameters' places (keyword ones put
/// there, [`Expr::Absent`] for one left to its default); the count is checked elsewhere.
pub(super) fn first_refused(params: &[Param], args: &[Expr]) -> Option<usize> {
    let last = params.len().checked_sub(1)?;
    (args.iter().enumerate()).find_map(|(i, arg)| {
        let param = &params[i.min(last)];
        (!passes(param, arg)).then_some(i)
    })
}

/// graphite-web's `Param.validateValue` (1.1.8): `None` passes where the parameter is optional
/// or has a default, then the value must be among the options if there are any, then pass
/// its type's validator.
fn passes(param: &Param, arg: &Expr) -> bool {
    match arg {
        Expr::Absent => return true,
        Expr::None if !param.required || param.default.is_some() => return true,
        _ => {}
    }
    if !param.options.is_empty() && !param.options.iter().any(|o| python_eq(arg, o)) {
        return false;
    }
    let series_list = matches!(arg, Expr::Path(_) | Expr::Call { .. } | Expr::Evaluated(_));
    match param.kind.as_str() {
        // `validateBoolean`: strings only as `true`/`false` (any case), numbers only as 0 or 1,
        // anything else by its truth.
        "boolean" => match arg {
            Expr::Str(text) => ["true", "false"].contains(&text.to_ascii_lowercase().as_str()),
            Expr::Int(n) => matches!(n, 0 | 1),
            Expr::Number(n) => *n == 0.0 || *n == 1.0,
            _ => true,
        },
        // `float()`.
        "float" => match arg {
            Expr::Int(_) | Expr::Number(_) | Expr::Bool(_) => true,
            Expr::Str(text) => python_float(text).is_some(),
            _ => false,
        },
        // `validateInteger`: `int()` of anything but a float.
        "integer" | "node" => is_python_int(arg),
        "intOrInf" => {
            is_python_int(arg)
                || match arg {
                    Expr::Number(n) => *n == f64::INFINITY,
                    Expr::Str(text) => python_float(text) == Some(f64::INFINITY),
                    _ => false,
                }
        }
        // `parseTimeOffset` of a string.
        "interval" => matches!(arg, Expr::Str(text) if crate::time::parse_offset(text).is_ok()),
        "seriesList" | "seriesLists" => series_list,
        // Among its options, graphite-web's aggregation names (deprecated `sumSeries` and
        // kin are not).
        "aggFunc" => matches!(arg, Expr::Str(name) if AGG_FUNC_NAMES.contains(&name.as_str())),
        // A name among graphite-web's aggregations and aggregating series functions. Which
        // names pass changes nothing read: the other arguments of the functions taking one
        // are series and nodes, which no validation converts.
        "aggOrSeriesFunc" => matches!(arg, Expr::Str(_)),
        // date, intOrInterval, nodeOrTag, series, string, tag, any: no validator.
        _ => true,
    }
}

/// Whether Python's `int()` takes `arg` and `validateInteger` lets it (not a float).
fn is_python_int(arg: &Expr) -> bool {
    match arg {
        Expr::Int(_) | Expr::Bool(_) => true,
        Expr::Str(text) => text.trim().parse::<i64>().is_ok(),
        _ => false,
    }
}

/// Python's `==` between an argument and one of a parameter's options (`True == 1`).
fn python_eq(arg: &Expr, option: &Value) -> bool {
    let number = |x: f64| option.as_f64() == Some(x) || option.as_bool().map(f64::from) == Some(x);
    match arg {
        Expr::Str(text) => option.as_str() == Some(text.as_str()),
        Expr::Bool(b) => number(f64::from(u8::from(*b))),
        Expr::Int(n) => number(*n as f64),
        Expr::Number(n) => number(*n),
        Expr::None => option.is_null(),
        _ => false,
    }
}
