//! The one list of render functions tierdb answers: each with graphite-web's name, group and
//! signature, and the code that evaluates it. The evaluator dispatches on it and `/functions`
//! lists it (in graphite-web's JSON), so the two cannot drift.
//!
//! A signature is written compactly, parameter by parameter: `name:type`, then `!` when
//! required, `*` when it repeats, `=default` (JSON) and `[a|b]` for a string's options, as
//! graphite-web's `Param` declares them.

use serde_json::{json, Map, Value};

use super::{alias, calculate, combine, filter, mapreduce, special, transform, Args, Context};
use crate::error::Result;
use crate::render::aggfunc::{AggFunc, AGG_FUNC_NAMES};
use crate::render::series::Series;

/// How a function evaluates.
pub(crate) type Eval = fn(&Args<'_>, &Context<'_>) -> Result<Vec<Series>>;

/// One render function.
pub(crate) struct Function {
    /// graphite-web's name for it.
    pub(crate) name: &'static str,
    /// graphite-web's group (Combine, Transform, ...), as its function picker shows it.
    pub(crate) group: &'static str,
    /// The parameters, in the compact form the module documentation describes.
    pub(crate) signature: &'static str,
    /// One line on what it does, and how tierdb differs from graphite-web if it does.
    pub(crate) description: &'static str,
    pub(crate) eval: Eval,
}

/// One parameter of a signature.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Param {
    pub(crate) name: String,
    /// graphite-web's type name (`seriesList`, `aggFunc`, `intOrInterval`, ...).
    pub(crate) kind: String,
    pub(crate) required: bool,
    pub(crate) multiple: bool,
    pub(crate) default: Option<Value>,
    pub(crate) options: Vec<Value>,
}

/// The callbacks `groupByNode` and `groupByNodes` take.
const CALLBACKS: &[&str] = &[
    "averageSeries",
    "countSeries",
    "diffSeries",
    "maxSeries",
    "minSeries",
    "multiplySeries",
    "rangeOfSeries",
    "stddevSeries",
    "sumSeries",
];

impl Function {
    /// The parsed signature.
    pub(crate) fn params(&self) -> Vec<Param> {
        (self.signature.split(", "))
            .filter(|p| !p.is_empty())
            .map(parse_param)
            .collect()
    }

    /// graphite-web's `/functions` entry: name, call form, description, module, group and
    /// params.
    pub(crate) fn describe(&self) -> Value {
        let params: Vec<Value> = self.params().iter().map(param_json).collect();
        let call: Vec<String> = (self.params().iter())
            .map(|p| match (&p.default, p.multiple) {
                (_, true) => format!("*{}", p.name),
                (Some(d), _) => format!("{}={d}", p.name),
                (None, _) if !p.required => format!("{}=None", p.name),
                (None, _) => p.name.clone(),
            })
            .collect();
        json!({
            "name": self.name,
            "function": format!("{}({})", self.name, call.join(", ")),
            "description": self.description,
            "module": "graphite.render.functions",
            "group": self.group,
            "params": params,
        })
    }
}

fn parse_param(text: &str) -> Param {
    let (name, rest) = text.split_once(':').unwrap_or((text, "any"));
    let (rest, options) = match rest.split_once('[') {
        Some((rest, options)) => {
            let options = options.trim_end_matches(']').split('|');
            // JSON where it reads as JSON (`false`, `null`), else a string.
            let option = |o: &str| serde_json::from_str(o).unwrap_or_else(|_| json!(o));
            (rest, options.map(option).collect())
        }
        None => (rest, Vec::new()),
    };
    let (rest, default) = match rest.split_once('=') {
        // `Infinity` is not JSON: written as a string, as Grafana reads graphite-web's.
        Some((rest, "Infinity")) => (rest, Some(json!("Infinity"))),
        Some((rest, default)) => (
            rest,
            Some(serde_json::from_str(default).unwrap_or_else(|_| json!(default))),
        ),
        None => (rest, None),
    };
    let kind: String = rest.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    Param {
        name: name.to_owned(),
        required: rest.contains('!'),
        multiple: rest.contains('*'),
        default,
        options,
        kind,
    }
}

fn param_json(p: &Param) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(p.name));
    out.insert("type".into(), json!(p.kind));
    if p.required {
        out.insert("required".into(), json!(true));
    }
    if p.multiple {
        out.insert("multiple".into(), json!(true));
    }
    if let Some(default) = &p.default {
        out.insert("default".into(), default.clone());
    }
    let options: Vec<Value> = match p.kind.as_str() {
        "aggFunc" => AGG_FUNC_NAMES.iter().map(|n| json!(n)).collect(),
        "aggOrSeriesFunc" => (AGG_FUNC_NAMES.iter().chain(CALLBACKS))
            .map(|n| json!(n))
            .collect(),
        _ => p.options.clone(),
    };
    if !options.is_empty() {
        out.insert("options".into(), Value::Array(options));
    }
    Value::Object(out)
}

/// The function called `name`, if tierdb has it.
pub(crate) fn function(name: &str) -> Option<&'static Function> {
    FUNCTIONS.iter().find(|f| f.name == name)
}

macro_rules! functions {
    ($($name:literal, $group:literal, $signature:literal, $description:literal, $eval:expr;)*) => {
        /// Every function tierdb answers, in graphite-web's alphabetical order.
        pub(crate) static FUNCTIONS: &[Function] = &[
            $(Function {
                name: $name,
                group: $group,
                signature: $signature,
                description: $description,
                eval: $eval,
            },)*
        ];
    };
}

use AggFunc as F;

functions! {
    "absolute", "Transform", "seriesList:seriesList!",
        "The absolute value of each point.", transform::absolute;
    "add", "Transform", "seriesList:seriesList!, constant:float!",
        "Adds a constant to each point.", transform::add;
    "aggregate", "Combine", "seriesList:seriesList!, func:aggFunc!, xFilesFactor:float",
        "Combines the series point by point with an aggregation function.",
        combine::aggregate_call;
    "aggregateLine", "Calculate", "seriesList:seriesList!, func:aggFunc=\"average\", keepStep:boolean=false",
        "A constant line at an aggregate of each series.", calculate::aggregate_line;
    "aggregateSeriesLists", "Combine", "seriesListFirstPos:seriesList!, seriesListSecondPos:seriesList!, func:aggFunc!, xFilesFactor:float",
        "Aggregates two lists pairwise.", combine::aggregate_series_lists;
    "aggregateWithWildcards", "Combine", "seriesList:seriesList!, func:aggFunc!, position:node*",
        "Aggregates the series that match once the given nodes are ignored.",
        combine::aggregate_with_wildcards;
    "alias", "Alias", "seriesList:seriesList!, newName:string!",
        "Renames the series.", alias::alias;
    "aliasByMetric", "Alias", "seriesList:seriesList!",
        "Names each series by the last node of its path.", alias::alias_by_metric;
    "aliasByNode", "Alias", "seriesList:seriesList!, nodes:nodeOrTag!*",
        "Names each series by nodes (or tags) of its path.", alias::alias_by_node;
    "aliasByTags", "Alias", "seriesList:seriesList!, tags:nodeOrTag!*",
        "Names each series by tags (or nodes) of its path.", alias::alias_by_node;
    "aliasQuery", "Alias", "seriesList:seriesList!, search:string!, replace:string!, newName:string!",
        "Names each series by a value of another: the last value of the series its name rewritten by the regex selects, through Python's % format.",
        alias::alias_query;
    "aliasSub", "Alias", "seriesList:seriesList!, search:string!, replace:string!",
        "Renames by a regex replacement; \\1 refers to a group.", alias::alias_sub;
    "alpha", "Graph", "seriesList:seriesList!, alpha:float!",
        "Graph styling: the data is unchanged.", alias::unchanged;
    "applyByNode", "Combine", "seriesList:seriesList!, nodeNum:node!, templateFunction:string!, newName:string",
        "Evaluates a template (% for the prefix) for each prefix of the names.",
        combine::apply_by_node;
    "areaBetween", "Graph", "seriesList:seriesList!",
        "Exactly two series, both named areaBetween(path).", alias::area_between;
    "asPercent", "Combine", "seriesList:seriesList!, total:any, nodes:nodeOrTag*",
        "Each series as a percentage of a total.", combine::as_percent;
    "averageAbove", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose average is above n.",
        |a, cx| filter::keep_where(a, cx, F::Average, filter::Operator::Gt);
    "averageBelow", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose average is at most n.",
        |a, cx| filter::keep_where(a, cx, F::Average, filter::Operator::Le);
    "averageOutsidePercentile", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose average lies outside the n-th percentiles of the averages.",
        filter::average_outside_percentile;
    "averageSeries", "Combine", "seriesLists:seriesList!*",
        "The average of the series at each point.",
        |a, cx| combine::series_function("averageSeries", F::Average, a, cx);
    "averageSeriesWithWildcards", "Combine", "seriesList:seriesList!, position:node*",
        "averageSeries of the series that match once the given nodes are ignored.",
        |a, cx| combine::with_wildcards("averageSeries", F::Average, a, cx, 1);
    "avg", "Combine", "seriesLists:seriesList!*",
        "Short form of averageSeries.",
        |a, cx| combine::series_function("averageSeries", F::Average, a, cx);
    "cactiStyle", "Special", "seriesList:seriesList!, system:string[binary|si], units:string",
        "Appends the current, max and min to each name, in the si or binary unit system if given.",
        alias::cacti_style;
    "changed", "Special", "seriesList:seriesList!",
        "1 where the value changed, else 0.", transform::changed;
    "color", "Graph", "seriesList:seriesList!, theColor:string!",
        "Graph styling: the data is unchanged.", alias::unchanged;
    "consolidateBy", "Special", "seriesList:seriesList!, consolidationFunc:string![average|avg|avg_zero|first|last|max|min|sum]",
        "How points are joined when consolidated to maxDataPoints.", transform::consolidate_by;
    "constantLine", "Special", "value:float!",
        "A horizontal line at the value.", special::constant_line;
    "countSeries", "Combine", "seriesLists:seriesList*",
        "The number of series at each point.", combine::count_series;
    "cumulative", "Special", "seriesList:seriesList!",
        "consolidateBy sum.", transform::cumulative;
    "currentAbove", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose last value is above n.",
        |a, cx| filter::keep_where(a, cx, F::Last, filter::Operator::Gt);
    "currentBelow", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose last value is at most n.",
        |a, cx| filter::keep_where(a, cx, F::Last, filter::Operator::Le);
    "dashed", "Graph", "seriesList:seriesList!, dashLength:integer=5",
        "Graph styling: renamed dashed(name, length), the data unchanged.", alias::dashed;
    "delay", "Transform", "seriesList:seriesList!, steps:integer!",
        "Moves the values by a number of points.", transform::delay;
    "derivative", "Transform", "seriesList:seriesList!",
        "The difference between consecutive points.", transform::derivative;
    "diffSeries", "Combine", "seriesLists:seriesList!*",
        "The first series minus the others at each point.",
        |a, cx| combine::series_function("diffSeries", F::Diff, a, cx);
    "diffSeriesLists", "Combine", "seriesListFirstPos:seriesList!, seriesListSecondPos:seriesList!",
        "diffSeries of two lists pairwise.",
        |a, cx| combine::series_lists("diffSeries", F::Diff, a, cx);
    "divideSeries", "Combine", "dividendSeriesList:seriesList!, divisorSeries:seriesList!",
        "Each series divided by one divisor series.", combine::divide_series;
    "divideSeriesLists", "Combine", "dividendSeriesList:seriesList!, divisorSeriesList:seriesList!",
        "Two lists divided pairwise.", combine::divide_series_lists;
    "drawAsInfinite", "Graph", "seriesList:seriesList!",
        "Graph styling: renamed drawAsInfinite(name), the data unchanged.",
        |a, cx| alias::styled(a, cx, "drawAsInfinite");
    "events", "Special", "tags:string!*",
        "Events per second. tierdb keeps no events: every point is null, as graphite-web answers with an empty events table.",
        special::events;
    "exclude", "Filter Series", "seriesList:seriesList!, pattern:string!",
        "The series whose name does not match the regex.", |a, cx| filter::grep(a, cx, false);
    "exp", "Transform", "seriesList:seriesList!",
        "e to the power of each point.", transform::exp;
    "exponentialMovingAverage", "Calculate", "seriesList:seriesList!, windowSize:intOrInterval!",
        "The exponential moving average over a window of points or time.",
        calculate::exponential_moving_average;
    "fallbackSeries", "Special", "seriesList:seriesList!, fallback:seriesList!",
        "The fallback when the series list is empty.", filter::fallback_series;
    "filterSeries", "Filter Series", "seriesList:seriesList!, func:aggFunc!, operator:string![!=|<|<=|=|>|>=], threshold:float!",
        "The series whose aggregate compares to the threshold.", filter::filter_series;
    "grep", "Filter Series", "seriesList:seriesList!, pattern:string!",
        "The series whose name matches the regex.", |a, cx| filter::grep(a, cx, true);
    "group", "Combine", "seriesLists:seriesList*",
        "The series lists as one.", combine::group;
    "groupByNode", "Combine", "seriesList:seriesList!, nodeNum:nodeOrTag!, callback:aggOrSeriesFunc=\"average\"",
        "Combines the series sharing a node, named by it.", combine::group_by_node;
    "groupByNodes", "Combine", "seriesList:seriesList!, callback:aggOrSeriesFunc!, nodes:nodeOrTag*",
        "Combines the series sharing nodes, named by them.", combine::group_by_nodes_call;
    "groupByTags", "Combine", "seriesList:seriesList!, callback:aggOrSeriesFunc!, tags:tag!*",
        "Combines the series sharing tag values, named as a tagged series by them.",
        combine::group_by_tags;
    "highest", "Filter Series", "seriesList:seriesList!, n:integer!, func:aggFunc=\"average\"",
        "The n series of the highest aggregate.", |a, cx| filter::extreme(a, cx, None, true);
    "highestAverage", "Filter Series", "seriesList:seriesList!, n:integer!",
        "The n series of the highest average.",
        |a, cx| filter::extreme(a, cx, Some(F::Average), true);
    "highestCurrent", "Filter Series", "seriesList:seriesList!, n:integer!",
        "The n series of the highest last value.",
        |a, cx| filter::extreme(a, cx, Some(F::Last), true);
    "highestMax", "Filter Series", "seriesList:seriesList!, n:integer!",
        "The n series of the highest maximum.",
        |a, cx| filter::extreme(a, cx, Some(F::Max), true);
    "hitcount", "Transform", "seriesList:seriesList!, intervalString:interval!, alignToInterval:boolean=false",
        "Rates per second turned into hits per interval.", transform::hitcount;
    "holtWintersAberration", "Calculate", "seriesList:seriesList!, delta:integer=3, bootstrapInterval:interval=\"7d\", seasonality:interval=\"1d\"",
        "How far each point lies outside its Holt-Winters confidence bands.",
        calculate::holt_winters_aberration;
    "holtWintersConfidenceArea", "Calculate", "seriesList:seriesList!, delta:integer=3, bootstrapInterval:interval=\"7d\", seasonality:interval=\"1d\"",
        "The Holt-Winters confidence bands, both named holtWintersConfidenceArea(path).",
        calculate::holt_winters_confidence_area;
    "holtWintersConfidenceBands", "Calculate", "seriesList:seriesList!, delta:integer=3, bootstrapInterval:interval=\"7d\", seasonality:interval=\"1d\"",
        "The lower and upper Holt-Winters confidence bands.",
        calculate::holt_winters_confidence_bands;
    "holtWintersForecast", "Calculate", "seriesList:seriesList!, bootstrapInterval:interval=\"7d\", seasonality:interval=\"1d\"",
        "The Holt-Winters forecast, trained from the bootstrap interval before the range.",
        calculate::holt_winters_forecast;
    "identity", "Calculate", "name:string!",
        "Each minute's own timestamp.", special::identity;
    "integral", "Transform", "seriesList:seriesList!",
        "The running sum.", transform::integral;
    "integralByInterval", "Transform", "seriesList:seriesList!, intervalUnit:string!",
        "The running sum, restarting every interval from the start of the range.",
        transform::integral_by_interval;
    "interpolate", "Transform", "seriesList:seriesList!, limit:intOrInf=Infinity",
        "Fills gaps between values on a straight line.", transform::interpolate;
    "invert", "Transform", "seriesList:seriesList!",
        "1 / each point.", transform::invert;
    "isNonNull", "Transform", "seriesList:seriesList!",
        "1 where there is a value, else 0.", transform::is_non_null;
    "keepLastValue", "Transform", "seriesList:seriesList!, limit:intOrInf=Infinity",
        "Fills gaps with the last value before them.", transform::keep_last_value;
    "legendValue", "Alias", "seriesList:seriesList!, valuesTypes:string*",
        "Appends aggregates to each name, in the si or binary unit system when the last type names one.",
        alias::legend_value;
    "limit", "Filter Series", "seriesList:seriesList!, n:integer!",
        "The first n series.", filter::limit;
    "lineWidth", "Graph", "seriesList:seriesList!, width:float!",
        "Graph styling: the data is unchanged.", alias::unchanged;
    "linearRegression", "Calculate", "seriesList:seriesList!, startSourceAt:date, endSourceAt:date",
        "The least-squares line through the values of a source range (the rendered range by default).",
        calculate::linear_regression;
    "log", "Transform", "seriesList:seriesList!, base:integer=10",
        "The logarithm of each point; null for zero or less.", transform::log;
    "logit", "Transform", "seriesList:seriesList!",
        "log(x / (1 - x)) of each point.", transform::logit;
    "lowest", "Filter Series", "seriesList:seriesList!, n:integer!, func:aggFunc=\"average\"",
        "The n series of the lowest aggregate.", |a, cx| filter::extreme(a, cx, None, false);
    "lowestAverage", "Filter Series", "seriesList:seriesList!, n:integer!",
        "The n series of the lowest average.",
        |a, cx| filter::extreme(a, cx, Some(F::Average), false);
    "lowestCurrent", "Filter Series", "seriesList:seriesList!, n:integer!",
        "The n series of the lowest last value.",
        |a, cx| filter::extreme(a, cx, Some(F::Last), false);
    "map", "Combine", "seriesList:seriesList!, mapNodes:nodeOrTag!*",
        "Short form of mapSeries.", mapreduce::map_series;
    "mapSeries", "Combine", "seriesList:seriesList!, mapNodes:nodeOrTag!*",
        "Groups the series by nodes, for reduceSeries. tierdb keeps the groups in one list, one after another.",
        mapreduce::map_series;
    "maxSeries", "Combine", "seriesLists:seriesList!*",
        "The maximum of the series at each point.",
        |a, cx| combine::series_function("maxSeries", F::Max, a, cx);
    "maximumAbove", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose maximum is above n.",
        |a, cx| filter::keep_where(a, cx, F::Max, filter::Operator::Gt);
    "maximumBelow", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose maximum is at most n.",
        |a, cx| filter::keep_where(a, cx, F::Max, filter::Operator::Le);
    "minMax", "Transform", "seriesList:seriesList!",
        "Scales each series to 0..1 between its min and max.", transform::min_max;
    "minSeries", "Combine", "seriesLists:seriesList!*",
        "The minimum of the series at each point.",
        |a, cx| combine::series_function("minSeries", F::Min, a, cx);
    "minimumAbove", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose minimum is above n.",
        |a, cx| filter::keep_where(a, cx, F::Min, filter::Operator::Gt);
    "minimumBelow", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series whose minimum is at most n.",
        |a, cx| filter::keep_where(a, cx, F::Min, filter::Operator::Le);
    "mostDeviant", "Filter Series", "seriesList:seriesList!, n:integer!",
        "The n series of the largest variance.", filter::most_deviant;
    "movingAverage", "Calculate", "seriesList:seriesList!, windowSize:intOrInterval!, xFilesFactor:float",
        "The average of the window of points (or time) before each point.",
        |a, cx| calculate::moving(a, cx, "average", F::Average, 2);
    "movingMax", "Calculate", "seriesList:seriesList!, windowSize:intOrInterval!, xFilesFactor:float",
        "The maximum of the window before each point.",
        |a, cx| calculate::moving(a, cx, "max", F::Max, 2);
    "movingMedian", "Calculate", "seriesList:seriesList!, windowSize:intOrInterval!, xFilesFactor:float",
        "The median of the window before each point.",
        |a, cx| calculate::moving(a, cx, "median", F::Median, 2);
    "movingMin", "Calculate", "seriesList:seriesList!, windowSize:intOrInterval!, xFilesFactor:float",
        "The minimum of the window before each point.",
        |a, cx| calculate::moving(a, cx, "min", F::Min, 2);
    "movingSum", "Calculate", "seriesList:seriesList!, windowSize:intOrInterval!, xFilesFactor:float",
        "The sum of the window before each point.",
        |a, cx| calculate::moving(a, cx, "sum", F::Sum, 2);
    "movingWindow", "Calculate", "seriesList:seriesList!, windowSize:intOrInterval!, func:aggFunc=\"average\", xFilesFactor:float",
        "An aggregate of the window before each point.", calculate::moving_window;
    "multiplySeries", "Combine", "seriesLists:seriesList!*",
        "The product of the series at each point.", multiply_series;
    "multiplySeriesLists", "Combine", "seriesListFirstPos:seriesList!, seriesListSecondPos:seriesList!",
        "multiplySeries of two lists pairwise.",
        |a, cx| combine::series_lists("multiplySeries", F::Multiply, a, cx);
    "multiplySeriesWithWildcards", "Combine", "seriesList:seriesList!, position:node*",
        "multiplySeries of the series that match once the given nodes are ignored.",
        |a, cx| combine::with_wildcards("multiplySeries", F::Multiply, a, cx, 1);
    "nPercentile", "Calculate", "seriesList:seriesList!, n:float!",
        "A line at the n-th percentile of each series.", calculate::n_percentile;
    "nonNegativeDerivative", "Transform", "seriesList:seriesList!, maxValue:float, minValue:float",
        "The increase between points, counter wraps and resets handled; a stored counter's own increases.",
        |a, cx| transform::non_negative(a, cx, false);
    "offset", "Transform", "seriesList:seriesList!, factor:float!",
        "Adds a constant to each point.", transform::offset;
    "offsetToZero", "Transform", "seriesList:seriesList!",
        "Subtracts each series' minimum.", transform::offset_to_zero;
    "pct", "Combine", "seriesList:seriesList!, total:any, nodes:nodeOrTag*",
        "Short form of asPercent.", combine::as_percent;
    "perSecond", "Transform", "seriesList:seriesList!, maxValue:float, minValue:float",
        "nonNegativeDerivative per second of step.",
        |a, cx| transform::non_negative(a, cx, true);
    "percentileOfSeries", "Combine", "seriesList:seriesList!, n:float!, interpolate:boolean=false",
        "The n-th percentile of the series at each point.", combine::percentile_of_series;
    "pow", "Transform", "seriesList:seriesList!, factor:float!",
        "Each point to a power.", transform::pow;
    "powSeries", "Combine", "seriesList:seriesList!*",
        "The first series to the power of the second, and so on, at each point.",
        combine::pow_series;
    "randomWalk", "Special", "name:string!, step:integer=60",
        "A random walk. tierdb's randomness cannot equal graphite-web's.", special::random_walk;
    "randomWalkFunction", "Special", "name:string!, step:integer=60",
        "A random walk. tierdb's randomness cannot equal graphite-web's.", special::random_walk;
    "rangeOfSeries", "Combine", "seriesLists:seriesList!*",
        "Max minus min of the series at each point.",
        |a, cx| combine::series_function("rangeOfSeries", F::Range, a, cx);
    "reduce", "Combine", "seriesLists:seriesLists!, reduceFunction:string!, reduceNode:node!, reduceMatchers:string!*",
        "Short form of reduceSeries.", mapreduce::reduce_series;
    "reduceSeries", "Combine", "seriesLists:seriesLists!, reduceFunction:string!, reduceNode:node!, reduceMatchers:string!*",
        "Calls a function on the series of each group that match the given node values, named by the group.",
        mapreduce::reduce_series;
    "removeAbovePercentile", "Filter Data", "seriesList:seriesList!, n:float!",
        "Nulls the points above the n-th percentile.",
        |a, cx| filter::remove_percentile(a, cx, true);
    "removeAboveValue", "Filter Data", "seriesList:seriesList!, n:float!",
        "Nulls the points above n.", |a, cx| filter::remove_value(a, cx, true);
    "removeBelowPercentile", "Filter Data", "seriesList:seriesList!, n:float!",
        "Nulls the points below the n-th percentile.",
        |a, cx| filter::remove_percentile(a, cx, false);
    "removeBelowValue", "Filter Data", "seriesList:seriesList!, n:float!",
        "Nulls the points below n.", |a, cx| filter::remove_value(a, cx, false);
    "removeBetweenPercentile", "Filter Series", "seriesList:seriesList!, n:float!",
        "The series with a point outside the n-th percentiles across the series.",
        filter::remove_between_percentile;
    "removeEmptySeries", "Filter Series", "seriesList:seriesList!, xFilesFactor:float",
        "The series with values.", filter::remove_empty_series;
    "round", "Transform", "seriesList:seriesList!, precision:integer=0",
        "Each point rounded to a number of decimals.", transform::round;
    "scale", "Transform", "seriesList:seriesList!, factor:float!",
        "Multiplies each point.", transform::scale;
    "scaleToSeconds", "Transform", "seriesList:seriesList!, seconds:float!",
        "Each point scaled from per step to per the given seconds.",
        transform::scale_to_seconds;
    "secondYAxis", "Graph", "seriesList:seriesList!",
        "Graph styling: renamed secondYAxis(name), the data unchanged.",
        |a, cx| alias::styled(a, cx, "secondYAxis");
    "seriesByTag", "Special", "tagExpressions:string!*",
        "The series whose tags satisfy every expression: tag=value, tag!=value, tag=~regex, tag!=~regex (name for the name).",
        special::series_by_tag;
    "setXFilesFactor", "Special", "seriesList:seriesList!, xFilesFactor:float!",
        "The share of known points consolidation, summarize and the moving windows need, for these series and the rest of the request.",
        special::set_x_files_factor;
    "sigmoid", "Transform", "seriesList:seriesList!",
        "1 / (1 + e^-x) of each point.", transform::sigmoid;
    "sin", "Transform", "name:string!, amplitude:integer=1, step:integer=60",
        "Short form of sinFunction.", special::sin_function;
    "sinFunction", "Transform", "name:string!, amplitude:integer=1, step:integer=60",
        "A sine of time.", special::sin_function;
    "smartSummarize", "Transform", "seriesList:seriesList!, intervalString:interval!, func:aggFunc=\"sum\", alignTo:string[false|null|true|days|hours|minutes|months|seconds|weeks|years]",
        "One value per interval from the start of the range (aligned to a unit with alignTo).",
        transform::smart_summarize;
    "sortBy", "Sorting", "seriesList:seriesList!, func:aggFunc=\"average\", reverse:boolean=false",
        "Sorts by an aggregate of each series.", filter::sort_by;
    "sortByMaxima", "Sorting", "seriesList:seriesList!",
        "Sorts by maximum, highest first.", |a, cx| filter::sort_descending(a, cx, F::Max);
    "sortByMinima", "Sorting", "seriesList:seriesList!",
        "The series with a maximum above 0, by minimum.", filter::sort_by_minima;
    "sortByName", "Sorting", "seriesList:seriesList!, natural:boolean=false, reverse:boolean=false",
        "Sorts by name.", filter::sort_by_name;
    "sortByTotal", "Sorting", "seriesList:seriesList!",
        "Sorts by sum, highest first.", |a, cx| filter::sort_descending(a, cx, F::Sum);
    "squareRoot", "Transform", "seriesList:seriesList!",
        "The square root of each point.", transform::square_root;
    "stacked", "Graph", "seriesList:seriesList!, stack:string",
        "Each point added to the stack's running total.", special::stacked;
    "stddevSeries", "Combine", "seriesLists:seriesList!*",
        "The standard deviation of the series at each point.",
        |a, cx| combine::series_function("stddevSeries", F::Stddev, a, cx);
    "stdev", "Calculate", "seriesList:seriesList!, points:integer!, windowTolerance:float=0.1",
        "The standard deviation over a moving window of points.", calculate::stdev;
    "substr", "Special", "seriesList:seriesList!, start:node=0, stop:node=0",
        "Names each series by a slice of its nodes.", alias::substr;
    "sum", "Combine", "seriesLists:seriesList!*",
        "Short form of sumSeries.",
        |a, cx| combine::series_function("sumSeries", F::Sum, a, cx);
    "sumSeries", "Combine", "seriesLists:seriesList!*",
        "The sum of the series at each point.",
        |a, cx| combine::series_function("sumSeries", F::Sum, a, cx);
    "sumSeriesLists", "Combine", "seriesListFirstPos:seriesList!, seriesListSecondPos:seriesList!",
        "sumSeries of two lists pairwise.",
        |a, cx| combine::series_lists("sumSeries", F::Sum, a, cx);
    "sumSeriesWithWildcards", "Combine", "seriesList:seriesList!, position:node*",
        "sumSeries of the series that match once the given nodes are ignored.",
        |a, cx| combine::with_wildcards("sumSeries", F::Sum, a, cx, 1);
    "summarize", "Transform", "seriesList:seriesList!, intervalString:interval!, func:aggFunc=\"sum\", alignToFrom:boolean=false",
        "One value per interval. Averages, maxima and minima of stored gauges are exact.",
        transform::summarize_call;
    "threshold", "Graph", "value:float!, label:string, color:string",
        "A horizontal line, named by the label.", special::threshold;
    "time", "Transform", "name:string!, step:integer=60",
        "Short form of timeFunction.", special::time_function;
    "timeFunction", "Transform", "name:string!, step:integer=60",
        "Each point's own timestamp.", special::time_function;
    "timeSlice", "Transform", "seriesList:seriesList!, startSliceAt:date!, endSliceAt:date=\"now\"",
        "Nulls the points outside a time span.", transform::time_slice;
    "timeShift", "Transform", "seriesList:seriesList!, timeShift:interval!, resetEnd:boolean=true, alignDst:boolean=false",
        "The series read from another time, stamped on this range.", transform::time_shift;
    "timeStack", "Transform", "seriesList:seriesList!, timeShiftUnit:interval=\"1d\", timeShiftStart:integer=0, timeShiftEnd:integer=7",
        "The series read at several shifts, each stamped on this range.", transform::time_stack;
    "transformNull", "Transform", "seriesList:seriesList!, default:float=0, referenceSeries:seriesList",
        "Replaces nulls with a value.", transform::transform_null;
    "unique", "Filter Series", "seriesLists:seriesList!*",
        "The first series of each name.", filter::unique;
    "useSeriesAbove", "Filter Series", "seriesList:seriesList!, value:float!, search:string!, replace:string!",
        "The series named by a replacement in the names of those whose maximum is above value.",
        filter::use_series_above;
    "verticalLine", "Graph", "ts:date!, label:string, color:string",
        "One point at a time, named by the label.", special::vertical_line;
    "weightedAverage", "Combine", "seriesListAvg:seriesList!, seriesListWeight:seriesList!, nodes:nodeOrTag*",
        "The average weighted by a second list, series paired by their nodes.",
        combine::weighted_average;
    "xFilesFactor", "Special", "seriesList:seriesList!, xFilesFactor:float!",
        "Short form of setXFilesFactor.", special::set_x_files_factor;
}

/// `multiplySeries(*seriesLists)`: one list of one series comes back unchanged, as in
/// graphite-web.
fn multiply_series(a: &Args<'_>, cx: &Context<'_>) -> Result<Vec<Series>> {
    if a.len() == 1 {
        let list = a.series(0, cx)?;
        if list.len() == 1 {
            return Ok(list);
        }
        return combine::aggregate("multiplySeries", F::Multiply, list, a);
    }
    combine::series_function("multiplySeries", F::Multiply, a, cx)
}

/// graphite-web's `/functions` answer: every function by name, or with `grouped` by group
/// then name.
pub(crate) fn list_json(grouped: bool) -> Value {
    let mut out = Map::new();
    for f in FUNCTIONS {
        if grouped {
            let group = out
                .entry(f.group)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(members) = group {
                members.insert(f.name.into(), f.describe());
            }
        } else {
            out.insert(f.name.into(), f.describe());
        }
    }
    Value::Object(out)
}
