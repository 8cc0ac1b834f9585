//! Evaluation of a parsed target: fetches for paths and graphite-web 1.1's render functions,
//! with its names and semantics except where stored buckets allow an exact answer. Every
//! function is one entry of [`table::FUNCTIONS`], which both the evaluator dispatches on and
//! `/functions` lists, so the two cannot drift. The functions live by graphite-web's
//! families: `combine`, `transform`, `calculate`, `filter`, `alias` and `special`.

mod alias;
mod calculate;
mod combine;
mod filter;
mod mapreduce;
mod special;
pub(crate) mod table;
#[cfg(test)]
mod tests;
mod transform;
mod validate;

use super::aggfunc::AggFunc;
use super::expr::Expr;
use super::path::PathPattern;
use super::python::{format_g, str_float};
use super::series::Series;
use super::Source;
use crate::error::{Error, Result};
use crate::read::budget::ReadBudget;
use crate::read::distribution::placed_from_explicit_buckets;
pub(crate) use special::Stacks;
use table::{Function, Param};

/// What evaluation reads from: the source and the request's range.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) source: &'a dyn Source,
    pub(crate) from: i64,
    pub(crate) until: i64,
    /// The request's read budget (its paths are charged before evaluation; summarize
    /// windows as they are made).
    pub(crate) budget: &'a ReadBudget,
    /// `stacked`'s running totals, shared by the request's targets.
    pub(crate) stacks: &'a Stacks,
    /// graphite-web's `requestContext['xFilesFactor']`: the request's, until
    /// `setXFilesFactor` sets it for everything evaluated after it (later targets too, as
    /// in graphite-web). Series take it when they are fetched or made.
    pub(crate) x_files_factor: &'a std::cell::Cell<f64>,
    /// The request's clock, for times in arguments (`timeSlice`, `verticalLine`).
    pub(crate) now: i64,
    /// The largest relative error of the values fetched that are estimates (StatsD timer
    /// paths' percentiles and threshold sums, `super::timer_paths`); `None` while every
    /// value fetched is exact. What the answer states of its approximation.
    pub(crate) relative_error: &'a std::cell::Cell<Option<f64>>,
    /// The series fetched for estimates whose values were placed from explicit buckets (OTLP
    /// explicit-bucket histograms), by key: their estimates are within an explicit bucket's
    /// width, which `relative_error` does not bound. A set, since a function may fetch a
    /// series twice.
    pub(crate) explicit_buckets: &'a std::cell::RefCell<std::collections::BTreeSet<String>>,
}

impl Context<'_> {
    /// Takes the relative error of the estimates among `fetched` into the request's.
    fn note_estimates(&self, fetched: &[super::Fetched]) {
        for timer in fetched.iter().filter_map(|f| f.timer.as_ref()) {
            if let Some(e) = timer.relative_error() {
                let stated = self.relative_error.get().map_or(e, |r| r.max(e));
                self.relative_error.set(Some(stated));
            }
        }
        let explicit = (fetched.iter())
            .filter(|f| {
                f.timer
                    .as_ref()
                    .is_some_and(|t| t.relative_error().is_some())
            })
            .filter(|f| placed_from_explicit_buckets(f.key.view()));
        let mut keys = self.explicit_buckets.borrow_mut();
        keys.extend(explicit.map(|f| f.key.as_str().to_string()));
    }

    /// The context over another range, as graphite-web's functions that read more than the
    /// request's range (moving windows, timeShift) evaluate their argument again.
    fn over(&self, from: i64, until: i64) -> Context<'_> {
        Context {
            from,
            until,
            ..*self
        }
    }
}

/// Evaluates one expression into its series.
///
/// # Errors
///
/// [`Error::InvalidQuery`] for an unknown function, a wrong argument count or type (naming
/// the function and the argument), a bad regex, interval or path; any error of the source.
pub(crate) fn eval(expr: &Expr, cx: &Context<'_>) -> Result<Vec<Series>> {
    match expr {
        Expr::Path(path) => {
            let pattern = PathPattern::parse(path)?;
            let fetched = cx.source.fetch(&pattern, cx.from, cx.until)?;
            let xff = cx.x_files_factor.get();
            cx.note_estimates(&fetched);
            let series = |f| Series {
                x_files_factor: Some(xff),
                ..Series::fetched(f, path)
            };
            Ok(fetched.into_iter().map(series).collect())
        }
        Expr::Call {
            name,
            args,
            kwargs,
            text,
        } => {
            let function = table::function(name)
                .ok_or_else(|| Error::InvalidQuery(format!("unknown function {name:?}")))?;
            let args = positional(function, args, kwargs)?;
            let a = Args::new(function, &args, text, cx.x_files_factor)?;
            let mut list = (function.eval)(&a, cx)?;
            // What the function made anew takes the request's xFilesFactor as it is now.
            let xff = cx.x_files_factor.get();
            for s in &mut list {
                s.x_files_factor.get_or_insert(xff);
            }
            Ok(list)
        }
        other => Err(Error::InvalidQuery(format!(
            "expected a path or a function call, found {}",
            other.text()
        ))),
    }
}

/// Charges to the request's budget what reading every path in `expr` over `from`..`until`
/// would read ([`Source::charge`]): for the request's range before anything is read, and for
/// another range before a function reads its argument over it.
///
/// # Errors
///
/// The budget's refusal.
pub(crate) fn charge_paths(expr: &Expr, cx: &Context<'_>, from: i64, until: i64) -> Result<()> {
    expr.for_each_path(&mut |path| match PathPattern::parse(path) {
        Ok(pattern) => cx.source.charge(&pattern, from, until, cx.budget),
        // Not a path after all (a bare word where a function takes a string): evaluation
        // says what is wrong with it.
        Err(_) => Ok(()),
    })
}

/// The arguments of a call with its keyword arguments put in the places of the parameters
/// they name, as Python binds them; a parameter between the positional ones and a keyword
/// one is [`Expr::Absent`] (its default). Borrowed when there are no keyword arguments.
///
/// # Errors
///
/// [`Error::InvalidQuery`] naming the function and the keyword when no parameter has its
/// name, when it names a parameter already given by position, or a repeating one (`*nodes`,
/// which Python takes by position only).
fn positional<'e>(
    function: &Function,
    args: &'e [Expr],
    kwargs: &[(String, Expr)],
) -> Result<std::borrow::Cow<'e, [Expr]>> {
    if kwargs.is_empty() {
        return Ok(std::borrow::Cow::Borrowed(args));
    }
    let params = function.params();
    let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let wrong = |what: String| Error::InvalidQuery(format!("{}: {what}", function.name));
    let mut out = args.to_vec();
    for (keyword, value) in kwargs {
        let Some(at) = params.iter().position(|p| p.name == *keyword) else {
            return Err(wrong(format!(
                "has no parameter named {keyword:?} (its parameters: {})",
                names.join(", ")
            )));
        };
        if params[at].multiple {
            return Err(wrong(format!(
                "{keyword} repeats and is given by position only, not as {keyword}=..."
            )));
        }
        if at < args.len() {
            return Err(wrong(format!(
                "argument {} ({keyword}) is given both by position and by keyword",
                at + 1
            )));
        }
        if out.len() <= at {
            out.resize(at + 1, Expr::Absent);
        }
        out[at] = value.clone();
    }
    Ok(std::borrow::Cow::Owned(out))
}

/// The longest time offset or interval a function takes, seconds (400 years): far beyond any
/// retention, and small enough that no arithmetic on times overflows.
const MAX_OFFSET: i64 = 400 * 366 * 86_400;

/// A window given as a number of points or as an interval string (graphite-web's
/// `intOrInterval`), with the text names repeat.
#[derive(Clone, Debug, PartialEq)]
enum Window {
    /// A count of points (0 when graphite-web's `int()` of the argument is 0, which leaves
    /// every window empty), with Python's `str` of the argument as written, which names
    /// the result (`2.5` for a count of 2).
    Points(i64, String),
    Seconds(i64, String),
}

/// A function's arguments, with typed access whose errors name the function, the argument's
/// position and its name in graphite-web's signature.
pub(crate) struct Args<'a> {
    name: &'a str,
    params: Vec<Param>,
    args: &'a [Expr],
    /// The call as written (`seriesByTag` selects by it, as a path).
    call: &'a str,
    /// The request's xFilesFactor ([`Context::x_files_factor`]), read when a function
    /// aggregates, after its arguments are evaluated.
    x_files_factor: &'a std::cell::Cell<f64>,
    /// The first argument not of its declared type ([`validate::first_refused`]); when there
    /// is one, graphite-web converts no argument of the call, and each is read as written.
    refused: Option<usize>,
}

impl<'a> Args<'a> {
    /// Checks the count of `args` against `function`'s signature.
    fn new(
        function: &'a Function,
        args: &'a [Expr],
        call: &'a str,
        x_files_factor: &'a std::cell::Cell<f64>,
    ) -> Result<Args<'a>> {
        let params = function.params();
        let refused = validate::first_refused(&params, args);
        let a = Args {
            name: function.name,
            params,
            args,
            call,
            x_files_factor,
            refused,
        };
        let required = a.params.iter().filter(|p| p.required).count();
        let multiple = a.params.last().is_some_and(|p| p.multiple);
        let n = args.len();
        if let Some(i) = (0..n).find(|&i| a.params.get(i).is_some_and(|p| p.required) && !a.has(i))
        {
            return Err(a.wrong(i, "is required"));
        }
        if n < required || (!multiple && n > a.params.len()) {
            let expected = match (multiple, required == a.params.len()) {
                (true, _) => format!("at least {required}"),
                (false, true) => format!("{required}"),
                (false, false) => format!("{required} to {}", a.params.len()),
            };
            let names: Vec<&str> = a.params.iter().map(|p| p.name.as_str()).collect();
            return Err(a.invalid(&format!(
                "takes {expected} arguments ({}), got {n}",
                names.join(", ")
            )));
        }
        Ok(a)
    }

    /// The request's xFilesFactor as it is now (graphite-web's
    /// `requestContext.get('xFilesFactor')`).
    fn request_xff(&self) -> f64 {
        self.x_files_factor.get()
    }

    fn len(&self) -> usize {
        self.args.len()
    }

    /// True when argument `i` is given (by position or keyword).
    fn has(&self, i: usize) -> bool {
        self.arg(i).is_some()
    }

    /// Argument `i` when given; `None` when it is not, or is left to its default before a
    /// keyword argument.
    fn arg(&self, i: usize) -> Option<&'a Expr> {
        self.args.get(i).filter(|e| !matches!(e, Expr::Absent))
    }

    fn invalid(&self, what: &str) -> Error {
        Error::InvalidQuery(format!("{}: {what}", self.name))
    }

    /// The name of argument `i` in the signature (the last one repeats).
    fn param_name(&self, i: usize) -> &str {
        let last = self.params.len().saturating_sub(1);
        self.params.get(i.min(last)).map_or("", |p| p.name.as_str())
    }

    /// An error about argument `i`, naming it.
    fn wrong(&self, i: usize, what: &str) -> Error {
        self.invalid(&format!(
            "argument {} ({}) {what}",
            i + 1,
            self.param_name(i)
        ))
    }

    fn expr(&self, i: usize) -> &'a Expr {
        &self.args[i]
    }

    fn series(&self, i: usize, cx: &Context<'_>) -> Result<Vec<Series>> {
        match &self.args[i] {
            e @ (Expr::Path(_) | Expr::Call { .. }) => eval(e, cx),
            Expr::Evaluated(list) => Ok(list.clone()),
            _ => Err(self.wrong(i, "must be a series list (a path or a function call)")),
        }
    }

    /// Every argument from `i` on, each a series list, joined in order.
    fn series_from(&self, i: usize, cx: &Context<'_>) -> Result<Vec<Series>> {
        let mut list = Vec::new();
        for j in i..self.len() {
            list.extend(self.series(j, cx)?);
        }
        Ok(list)
    }

    /// A number (`float` parameter): as graphite-web's `float()` validator takes it, a quoted
    /// number (`'2'`, as a dashboard's template variable often writes it) and a boolean
    /// (`true` is 1) too; a quoted number only when the call's arguments are converted
    /// ([`Args::refused`]), as graphite-web otherwise hands the function the string.
    fn number(&self, i: usize) -> Result<f64> {
        match &self.args[i] {
            Expr::Number(n) => Ok(*n),
            Expr::Int(n) => Ok(*n as f64),
            Expr::Bool(b) => Ok(f64::from(u8::from(*b))),
            Expr::Str(text) => {
                self.converted(i, text)?;
                python_float(text)
                    .ok_or_else(|| self.wrong(i, &format!("is {text:?}, which is not a number")))
            }
            _ => Err(self.wrong(i, "must be a number")),
        }
    }

    /// Refuses string `text`, given as argument `i` where a number is read, when graphite-web
    /// would hand it to the function unconverted (another argument is not of its type), on
    /// which the function fails.
    fn converted(&self, i: usize, text: &str) -> Result<()> {
        match self.refused {
            Some(j) if j != i => Err(self.wrong(
                i,
                &format!(
                    "is {text:?}, a string: graphite-web reads it as a number only when every \
                     argument is of its type, and argument {} ({}) is not",
                    j + 1,
                    self.param_name(j)
                ),
            )),
            _ => Ok(()),
        }
    }

    fn number_or(&self, i: usize, default: f64) -> Result<f64> {
        if self.has(i) {
            self.number(i)
        } else {
            Ok(default)
        }
    }

    /// An optional number: absent or `None` is `None`.
    fn opt_number(&self, i: usize) -> Result<Option<f64>> {
        if !self.has(i) || self.is_none_arg(i) {
            return Ok(None);
        }
        self.number(i).map(Some)
    }

    /// True when argument `i` is Python's `None` (written as the bare word).
    fn is_none_arg(&self, i: usize) -> bool {
        matches!(self.args.get(i), Some(Expr::None))
    }

    /// A whole number (`integer` and `node` parameters): as graphite-web's `int()` validator
    /// takes it, a quoted one (`'2'`) and a boolean (`true` is 1) too.
    fn int(&self, i: usize) -> Result<i64> {
        match &self.args[i] {
            Expr::Int(n) => Ok(*n),
            Expr::Number(n) if n.fract() == 0.0 && n.abs() < 9e15 => Ok(*n as i64),
            Expr::Bool(b) => Ok(i64::from(*b)),
            Expr::Str(text) => {
                self.converted(i, text)?;
                (text.trim().parse::<i64>().ok())
                    .ok_or_else(|| self.wrong(i, &format!("is {text:?}, not a whole number")))
            }
            _ => Err(self.wrong(i, "must be a whole number")),
        }
    }

    fn int_or(&self, i: usize, default: i64) -> Result<i64> {
        if self.has(i) {
            self.int(i)
        } else {
            Ok(default)
        }
    }

    /// A whole number as a function that calls Python's `int()` on what it is handed reads
    /// it: as [`Args::int`], and a number with a fraction cut toward zero (`2.5` is 2), which
    /// graphite-web's validation, refusing it, hands on unconverted.
    fn truncated(&self, i: usize) -> Result<i64> {
        match &self.args[i] {
            Expr::Number(n) if n.is_finite() && n.abs() < 9e15 => Ok(n.trunc() as i64),
            _ => self.int(i),
        }
    }

    fn truncated_or(&self, i: usize, default: i64) -> Result<i64> {
        if self.has(i) {
            self.truncated(i)
        } else {
            Ok(default)
        }
    }

    fn string(&self, i: usize) -> Result<&'a str> {
        match &self.args[i] {
            Expr::Str(s) => Ok(s),
            _ => Err(self.wrong(i, "must be a quoted string")),
        }
    }

    /// A name as a function that formats whatever it is handed makes it (`alias`): a string
    /// as written, else Python's `str` of the bare value (`5`, `5.0`, `True`, `None`), since
    /// graphite-web's validation, failing on it, hands the value on unconverted.
    fn python_str(&self, i: usize) -> Result<String> {
        match &self.args[i] {
            Expr::Str(s) => Ok(s.clone()),
            Expr::Int(n) => Ok(n.to_string()),
            Expr::Number(n) => Ok(str_float(*n)),
            Expr::Bool(true) => Ok("True".into()),
            Expr::Bool(false) => Ok("False".into()),
            Expr::None => Ok("None".into()),
            _ => Err(self.wrong(i, "must be a quoted string")),
        }
    }

    /// A label graphite-web sets only `if label:` (`threshold`): `None` when absent or false by
    /// Python's truth ([`Args::is_true`]), else [`Args::python_str`] of it.
    fn label(&self, i: usize) -> Result<Option<String>> {
        if self.is_true(i) {
            self.python_str(i).map(Some)
        } else {
            Ok(None)
        }
    }

    /// True when argument `i` is given and true by Python's truth: not `None`, `false`, 0 or
    /// `''`. graphite-web tests optional names and intervals so (`if units:`), and its
    /// validation hands a value of another type on unconverted.
    fn is_true(&self, i: usize) -> bool {
        match self.arg(i) {
            None | Some(Expr::None | Expr::Bool(false) | Expr::Int(0)) => false,
            Some(Expr::Number(n)) => *n != 0.0,
            Some(Expr::Str(text)) => !text.is_empty(),
            Some(_) => true,
        }
    }

    fn string_or(&self, i: usize, default: &'a str) -> Result<&'a str> {
        if self.has(i) {
            self.string(i)
        } else {
            Ok(default)
        }
    }

    /// A boolean as graphite-web (with its default `ENFORCE_INPUT_VALIDATION = False`) reads
    /// one: `true`/`false`, the strings `'true'`/`'false'` in any case, 0 and 1; any other
    /// value by Python's truth (a non-empty string or a non-zero number is true, `None` is
    /// false), since graphite-web then hands the value to the function unconverted, which
    /// tests it with `if`. So is every value when another argument of the call is not of its
    /// type ([`Args::refused`]): `'false'` is then true. Dashboards rely on it
    /// (`sortByName(x, 'true')`).
    fn boolean_or(&self, i: usize, default: bool) -> Result<bool> {
        if self.is_none_arg(i) {
            return Ok(false);
        }
        match self.arg(i) {
            None => Ok(default),
            Some(Expr::Bool(b)) => Ok(*b),
            Some(Expr::Int(n)) => Ok(*n != 0),
            Some(Expr::Number(n)) => Ok(*n != 0.0),
            Some(Expr::Str(text)) if self.refused.is_some() => Ok(!text.is_empty()),
            Some(Expr::Str(text)) => Ok(match text.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                other => !other.is_empty(),
            }),
            Some(_) => Err(self.wrong(i, "must be true or false")),
        }
    }

    /// The `reverse` of graphite-web's sorts, which Python's `list.sort` takes only as a whole
    /// number: the booleans of [`Args::boolean_or`]'s first rule (the strings only when the
    /// call's arguments are converted, [`Args::refused`]) and any whole number (true when not
    /// 0); another value is refused, as graphite-web fails on it.
    fn sort_reverse_or(&self, i: usize, default: bool) -> Result<bool> {
        let converted = self.refused.is_none();
        match self.arg(i) {
            None => Ok(default),
            Some(Expr::Bool(b)) => Ok(*b),
            Some(Expr::Int(n)) => Ok(*n != 0),
            Some(Expr::Number(n)) if *n == 0.0 || *n == 1.0 => Ok(*n == 1.0),
            Some(Expr::Str(text)) if converted && text.eq_ignore_ascii_case("true") => Ok(true),
            Some(Expr::Str(text)) if converted && text.eq_ignore_ascii_case("false") => Ok(false),
            Some(_) => Err(self.wrong(i, "must be true, false or a whole number")),
        }
    }

    /// An aggregation function's name (`aggFunc`), with graphite-web's list in the error.
    fn agg(&self, i: usize) -> Result<AggFunc> {
        let name = self.string(i)?;
        AggFunc::parse(name).ok_or_else(|| self.unknown_agg(i, name))
    }

    fn agg_or(&self, i: usize, default: AggFunc) -> Result<AggFunc> {
        if self.has(i) {
            self.agg(i)
        } else {
            Ok(default)
        }
    }

    fn unknown_agg(&self, i: usize, name: &str) -> Error {
        self.wrong(
            i,
            &format!(
                "is {name:?}, not an aggregation function (one of {})",
                super::aggfunc::AGG_FUNC_NAMES.join(", ")
            ),
        )
    }

    /// A signed time offset in seconds, from a quoted interval (`"1d"`, `"-1h"`), at most
    /// [`MAX_OFFSET`] either way.
    fn offset(&self, i: usize) -> Result<(i64, &'a str)> {
        let text = self.string(i)?;
        Ok((self.offset_of(i, text)?, text))
    }

    /// `text`, given as argument `i`, as a signed offset of at most [`MAX_OFFSET`].
    fn offset_of(&self, i: usize, text: &str) -> Result<i64> {
        let seconds = crate::time::parse_offset(text).map_err(|e| self.wrong(i, &e))?;
        if seconds.unsigned_abs() > MAX_OFFSET as u64 {
            return Err(self.wrong(i, &format!("is {text:?}, more than 400 years")));
        }
        Ok(seconds)
    }

    /// A positive interval in seconds, from a quoted interval (`"10min"`).
    fn interval(&self, i: usize) -> Result<(i64, &'a str)> {
        let (seconds, text) = self.offset(i)?;
        let seconds = seconds.abs();
        if seconds == 0 {
            return Err(self.wrong(i, &format!("is {text:?}, an interval of zero seconds")));
        }
        Ok((seconds, text))
    }

    /// A count of points or a quoted interval (`intOrInterval`). A count is Python's `int()`
    /// of the number, as graphite-web's windows take it (`2.5` is 2); 0 when `zero` allows
    /// it (a window of no points). A negative count is refused: graphite-web's Python slices
    /// from the end of the series with it, which makes no window.
    fn window(&self, i: usize, zero: bool) -> Result<Window> {
        match &self.args[i] {
            Expr::Str(_) => {
                let (seconds, text) = self.interval(i)?;
                Ok(Window::Seconds(seconds, text.to_owned()))
            }
            _ => match self.truncated(i) {
                Ok(n)
                    if (n > 0 || (zero && n == 0))
                        && n <= crate::read::query::MAX_QUERY_POINTS as i64 =>
                {
                    Ok(Window::Points(n, self.python_str(i)?))
                }
                _ => Err(self.wrong(
                    i,
                    &format!(
                        "must be a {} number of points (at most 1,000,000) or a quoted \
                         interval such as \"5min\"",
                        if zero { "zero or positive" } else { "positive" }
                    ),
                )),
            },
        }
    }

    /// A node index or a tag name (`nodeOrTag`). A number with a fraction (`2.5`) is a tag of
    /// that name, as graphite-web's `getNodeOrTag` takes what is not equal to its `int()`.
    fn node(&self, i: usize) -> Result<Node> {
        match &self.args[i] {
            Expr::Str(tag) => Ok(Node::Tag(tag.clone())),
            Expr::Number(n) if n.fract() != 0.0 => Ok(Node::Tag(str_float(*n))),
            _ => self.int(i).map(Node::Index).map_err(|_| {
                self.wrong(
                    i,
                    "must be a node index (0, 1, -1, ...) or a quoted tag name",
                )
            }),
        }
    }

    fn nodes_from(&self, i: usize) -> Result<Vec<Node>> {
        (i..self.len()).map(|j| self.node(j)).collect()
    }

    /// Argument `i` as Python's `str()` writes it: whole numbers without a point, other
    /// numbers as `str(float)`.
    fn py_str(&self, i: usize) -> String {
        match &self.args[i] {
            Expr::Int(n) => n.to_string(),
            Expr::Number(n) => str_float(*n),
            Expr::Str(s) => s.clone(),
            other => other.text(),
        }
    }
}

/// One element of a node list: a position in the dotted path or a tag's name.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    Index(i64),
    Tag(String),
}

/// graphite-web's `getNodeOrTag` for a series named `name` whose first path expression is
/// `path`: the node at `index` (negative from the end) of the path before any `;tags`, or
/// the tag's value; empty when there is none.
fn node_or_tag(path: &str, node: &Node) -> String {
    let (bare, tags) = path.split_once(';').unwrap_or((path, ""));
    match node {
        Node::Index(index) => {
            let parts: Vec<&str> = bare.split('.').collect();
            let at = if *index < 0 {
                parts.len() as i64 + index
            } else {
                *index
            };
            match usize::try_from(at).ok().and_then(|at| parts.get(at)) {
                Some(part) => (*part).to_owned(),
                // graphite-web then looks the index up as a tag, which no tag is named.
                None => String::new(),
            }
        }
        Node::Tag(tag) if tag == "name" => bare.to_owned(),
        Node::Tag(tag) => (tags.split(';'))
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k == tag)
            .map_or_else(String::new, |(_, v)| v.to_owned()),
    }
}

/// graphite-web's `aggKey`: the nodes of a series joined by `.`, read from the first path
/// expression inside its name when the name is a function call.
fn agg_key(series: &Series, nodes: &[Node]) -> String {
    let path = first_path_expression(&series.name);
    let keys: Vec<String> = nodes.iter().map(|n| node_or_tag(&path, n)).collect();
    keys.join(".")
}

/// The first path of a name such as `scale(a.b.c,2)`, found by descending into the first
/// argument of each call (graphite-web's `_getFirstPathExpression`); the name itself when it
/// is not a call.
fn first_path_expression(name: &str) -> String {
    if !name.ends_with(')') {
        return name.to_owned();
    }
    let mut expr = match super::expr::parse_target(name) {
        Ok(expr) => expr,
        Err(_) => return name.to_owned(),
    };
    loop {
        match expr {
            Expr::Call { mut args, .. } if !args.is_empty() => expr = args.swap_remove(0),
            Expr::Path(path) => return path,
            _ => return name.to_owned(),
        }
    }
}

/// A Python-style replacement (`\1` backreferences) in the regex crate's syntax (`${1}`, `$$`
/// for a literal `$`, `\\` for a backslash).
fn replacement(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' => out.push_str("$$"),
            '\\' if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push_str("${");
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    out.push(d);
                }
                out.push('}');
            }
            '\\' if chars.peek() == Some(&'\\') => {
                chars.next();
                out.push('\\');
            }
            c => out.push(c),
        }
    }
    out
}

/// A regex argument, its error naming the function and argument.
fn regex(a: &Args<'_>, i: usize) -> Result<regex::Regex> {
    let pattern = a.string(i)?;
    regex::Regex::new(pattern).map_err(|e| a.wrong(i, &format!("is not a valid regex: {e}")))
}

/// Each of `expressions` once, in order of first appearance (graphite-web's
/// formatPathExpressions).
fn distinct<'a>(expressions: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for expression in expressions {
        if !seen.contains(&expression) {
            seen.push(expression);
        }
    }
    seen
}

/// Python's `float()` of a string: blanks around it ignored; `inf` and `nan` in any case
/// included, as Python reads them.
fn python_float(text: &str) -> Option<f64> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    let word = lower.trim_start_matches(['+', '-']);
    let numeric = text
        .bytes()
        .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b));
    (numeric || matches!(word, "inf" | "infinity" | "nan"))
        .then(|| text.parse().ok())
        .flatten()
}

/// `%g` of a number, as graphite-web names `scale(a,2)` and kin.
fn g(x: f64) -> String {
    format_g(x)
}
