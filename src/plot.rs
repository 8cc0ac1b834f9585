//! Charts of query results, the drawing half of `tierdb plot`: [`render`] draws one or more
//! [`QueryResult`]s on one chart and writes it as PNG or SVG.
//!
//! The chart is 1200x600: a title, one line per series in its own colour with a legend of
//! series names, an x axis of UTC times whose labels follow the span shown (`HH:MM` under two
//! days, `MM-DD HH:MM` under two weeks, `YYYY-MM-DD` beyond), and a y axis named after the
//! display (`per_sec (/s)`, `avg`, ...). A bucket without samples breaks its line, so a gap
//! shows as a gap and never as a fall to zero; a point with empty buckets on both sides is
//! drawn as a dot. With no value at all the axes are still drawn, with a "no data" note. A
//! value that overflowed (`+Inf` or `-Inf`, or `NaN` where the two met in one bucket) is a
//! bucket with samples, not a gap: it cannot be placed on the axis, so it is left undrawn and
//! counted under the x axis ("2 overflowed (±Inf, not drawn)"), as the dashboard counts it.
//!
//! Text is drawn with DejaVu Sans, bundled in `src/plot/` (its license is beside it) and
//! rasterised by `ab_glyph`, so rendering needs no system font or font library. PNG is
//! rasterised in memory and encoded with `png`; SVG is built as a string; either is written
//! with one `std::fs::write`.

use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use chrono::DateTime;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::Error;
use crate::error::Result;
use crate::read::query::{Display, QueryResult};
use crate::time::Timestamp;

/// Chart size in pixels (PNG) or user units (SVG).
const WIDTH: u32 = 1200;
/// See [`WIDTH`].
const HEIGHT: u32 = 600;

/// The family every text style names; the bundled font is registered under it.
const FONT: &str = "sans-serif";
/// DejaVu Sans 2.37, from Debian's `fonts-dejavu-core` (license: `plot/LICENSE-DejaVu.txt`).
static DEJAVU_SANS: &[u8] = include_bytes!("plot/DejaVuSans.ttf");

const DAY: i64 = 86_400;
/// Spans below this show times of day only (`HH:MM`).
const HOURS_ONLY_BELOW: i64 = 2 * DAY;
/// Spans below this (and from [`HOURS_ONLY_BELOW`]) show `MM-DD HH:MM`; longer ones dates.
const DAYS_AND_HOURS_BELOW: i64 = 14 * DAY;

/// Distances between x ticks, in seconds, finest first; each is a whole divisor of the next
/// coarser calendar unit so ticks fall on round UTC times. Past the last one, ticks are
/// whole multiples of 365 days.
const TICK_STEPS: [i64; 22] = [
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    2 * 60,
    5 * 60,
    10 * 60,
    15 * 60,
    30 * 60,
    3_600,
    2 * 3_600,
    3 * 3_600,
    6 * 3_600,
    12 * 3_600,
    DAY,
    2 * DAY,
    7 * DAY,
    14 * DAY,
    30 * DAY,
];

/// Series colours, in order: matplotlib's `tab10`. Series past the tenth get colours spread
/// around the hue circle by the golden ratio (see [`series_color`]).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// The output formats, chosen by the extension of the output path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Png,
    Svg,
}

/// Draws `results` on one chart titled `title` and writes it to `out`, as PNG or SVG by the
/// extension of `out` (`.png` or `.svg`, in any case).
///
/// Each result is one series, drawn in its own colour and named in the legend by
/// [`QueryResult::series`]; its points `(ts, value)` are bucket starts in unix seconds. The x
/// axis runs from the earliest point to the end of the latest point's bucket (a point is
/// drawn at its bucket's start); the y axis fits the values with a little padding. `None`
/// values, and values that are not finite, break the line; the values that are not finite
/// (overflowed) are counted in the x axis description.
///
/// # Errors
/// [`Error::InvalidQuery`] when the extension of `out` is neither `png` nor `svg`;
/// [`Error::Io`] naming `out` when the file cannot be written (or, which should not happen,
/// when drawing fails).
pub(crate) fn render(results: &[QueryResult], out: &Path, title: &str) -> Result<()> {
    let format = format_of(out)?;
    register_bundled_font().map_err(|message| failed(out, message))?;
    let chart = Chart::new(results, title);
    let bytes = match format {
        Format::Png => {
            let mut rgb = vec![0u8; WIDTH as usize * HEIGHT as usize * 3];
            {
                let root =
                    BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
                chart.draw(&root).map_err(|e| failed(out, e))?;
            }
            encode_png(&rgb).map_err(|e| failed(out, e))?
        }
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
                chart.draw(&root).map_err(|e| failed(out, e))?;
            }
            svg.into_bytes()
        }
    };
    std::fs::write(out, bytes).map_err(|e| Error::io(out, e))
}

/// The format `out`'s extension asks for.
fn format_of(out: &Path) -> Result<Format> {
    let ext = out
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("png") => Ok(Format::Png),
        Some("svg") => Ok(Format::Svg),
        Some(other) => Err(Error::InvalidQuery(format!(
            "cannot write a chart to {}: unknown extension \".{other}\" (use .png or .svg)",
            out.display()
        ))),
        None => Err(Error::InvalidQuery(format!(
            "cannot write a chart to {}: no extension (use .png or .svg)",
            out.display()
        ))),
    }
}

/// Registers the bundled font with plotters, once per process.
fn register_bundled_font() -> std::result::Result<(), &'static str> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, DEJAVU_SANS).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the bundled font DejaVu Sans could not be loaded")
    }
}

/// A failure to produce the chart for `out`, which is not the file system's doing; reported
/// as an I/O error on `out` since that is the call that could not complete.
fn failed(out: &Path, message: impl std::fmt::Display) -> Error {
    Error::io(
        out,
        io::Error::other(format!("drawing the chart failed: {message}")),
    )
}

/// Encodes a `WIDTH` x `HEIGHT` RGB buffer as PNG.
fn encode_png(rgb: &[u8]) -> std::result::Result<Vec<u8>, png::EncodingError> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(bytes)
}

/// Everything the drawing needs, worked out from the results before any backend exists.
struct Chart<'a> {
    title: &'a str,
    results: &'a [QueryResult],
    /// The x axis: unix seconds.
    x: TimeAxis,
    /// The y axis.
    y: Range<f64>,
    /// True when no result holds a single drawable value.
    empty: bool,
    /// Points whose value overflowed (not finite): they have samples, so the chart says
    /// they were left out instead of showing them as gaps alone.
    overflowed: usize,
    /// The y axis description: the displays shown.
    y_desc: String,
    /// The x axis description: the range in full, and the step when every series shares one.
    x_desc: String,
}

impl<'a> Chart<'a> {
    fn new(results: &'a [QueryResult], title: &'a str) -> Chart<'a> {
        let x = x_range(results);
        let values = results.iter().flat_map(|r| {
            r.points
                .iter()
                .filter_map(|&(_, v)| v.filter(|v| v.is_finite()))
        });
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        let empty = lo > hi;
        let y = if empty { 0.0..1.0 } else { y_range(lo, hi) };
        let overflowed = results
            .iter()
            .flat_map(|r| &r.points)
            .filter(|(_, v)| v.is_some_and(|v| !v.is_finite()))
            .count();

        let mut displays: Vec<Display> = Vec::new();
        for r in results {
            if !displays.contains(&r.display) {
                displays.push(r.display);
            }
        }
        let y_desc = if displays.is_empty() {
            "value".to_owned()
        } else {
            displays
                .iter()
                .map(|&d| display_label(d))
                .collect::<Vec<_>>()
                .join(", ")
        };

        let mut x_desc = format!(
            "UTC, {} to {}",
            format_ts(x.from, "%Y-%m-%d %H:%M"),
            format_ts(x.to, "%Y-%m-%d %H:%M")
        );
        if let Some(first) = results.first() {
            if results
                .iter()
                .all(|r| r.step == first.step && r.tier == first.tier)
            {
                x_desc.push_str(&format!(", tier {}, step {}", first.tier, first.step));
            }
        }
        if overflowed > 0 {
            x_desc.push_str(&format!(" · {}", overflowed_note(overflowed)));
        }
        Chart {
            title,
            results,
            x,
            y,
            empty,
            overflowed,
            y_desc,
            x_desc,
        }
    }

    /// Draws the chart on `root`: the plot above, the legend in rows below it.
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        root.fill(&WHITE)?;
        let label_font = TextStyle::from((FONT, 14).into_font());

        let widths = self
            .results
            .iter()
            .map(|r| {
                root.estimate_text_size(&r.series, &label_font)
                    .map(|(w, _)| w as i32)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let more_width = root
            .estimate_text_size(&more_note(self.results.len()), &label_font)?
            .0;
        let legend = legend_layout(&widths, more_width as i32);
        let legend_height = if self.results.is_empty() {
            0
        } else {
            (legend.rows * LEGEND_ROW + LEGEND_ROW / 2) as u32
        };
        let (plot_area, legend_area) = root.split_vertically(HEIGHT - legend_height);

        let mut chart = ChartBuilder::on(&plot_area)
            .caption(self.title, (FONT, 24))
            .margin(16)
            // Room for half of a label centred on the axis's last tick.
            .margin_right(48)
            .x_label_area_size(60)
            .y_label_area_size(PLOT_LEFT - 16)
            .build_cartesian_2d(self.x, self.y.clone())?;

        let y_label = |v: &f64| format_value(*v, &self.y);
        chart
            .configure_mesh()
            .x_labels(10)
            .y_labels(8)
            .y_label_formatter(&y_label)
            .x_desc(self.x_desc.as_str())
            .y_desc(self.y_desc.as_str())
            .label_style(label_font.clone())
            .axis_desc_style((FONT, 15))
            .bold_line_style(RGBColor(0xdd, 0xdd, 0xdd))
            .light_line_style(RGBColor(0xf2, 0xf2, 0xf2))
            .draw()?;

        for (i, result) in self.results.iter().enumerate() {
            let color = series_color(i);
            let line = color.stroke_width(2);
            for run in runs(&result.points) {
                if let [only] = run[..] {
                    chart.draw_series(std::iter::once(Circle::new(only, 3, color.filled())))?;
                } else {
                    chart.draw_series(LineSeries::new(run, line))?;
                }
            }
        }

        if self.empty {
            let middle = (
                self.x.from + (self.x.to - self.x.from) / 2,
                (self.y.start + self.y.end) / 2.0,
            );
            let style = TextStyle::from((FONT, 22).into_font())
                .color(&RGBColor(0x80, 0x80, 0x80))
                .pos(Pos::new(HPos::Center, VPos::Center));
            let note = if self.overflowed > 0 {
                overflowed_note(self.overflowed)
            } else {
                "no data".to_owned()
            };
            chart.draw_series(std::iter::once(Text::new(note, middle, style)))?;
        }

        // The legend, below the plot so that it never hides a line.
        let text = label_font.pos(Pos::new(HPos::Left, VPos::Center));
        let row_y = |row: i32| LEGEND_ROW / 4 + row * LEGEND_ROW + LEGEND_ROW / 2;
        for (i, &(x, row)) in legend.items.iter().enumerate() {
            let y = row_y(row);
            let line = series_color(i).stroke_width(2);
            legend_area.draw(&PathElement::new(
                vec![(x, y), (x + LEGEND_SWATCH, y)],
                line,
            ))?;
            let name = self.results[i].series.as_str();
            legend_area.draw(&Text::new(name, (x + LEGEND_SWATCH + LEGEND_GAP, y), &text))?;
        }
        if let Some((x, row)) = legend.more {
            let note = more_note(self.results.len() - legend.items.len());
            legend_area.draw(&Text::new(note, (x, row_y(row)), &text))?;
        }
        root.present()
    }
}

/// Left edge of the plot, and of the legend below it, in pixels.
const PLOT_LEFT: i32 = 100;
/// Right edge of the legend.
const LEGEND_RIGHT: i32 = WIDTH as i32 - 16;
/// Height of one legend row.
const LEGEND_ROW: i32 = 22;
/// Most legend rows; further series are counted in a "+N more" note.
const LEGEND_MAX_ROWS: i32 = 5;
/// Length of a legend entry's line sample.
const LEGEND_SWATCH: i32 = 24;
/// Space between a line sample and its name.
const LEGEND_GAP: i32 = 6;
/// Space between legend entries.
const LEGEND_SPACING: i32 = 28;

/// Where legend entries go: `(x, row)` for each shown entry, in series order, and for the
/// note counting those left out.
#[derive(Debug, PartialEq, Eq)]
struct LegendLayout {
    items: Vec<(i32, i32)>,
    more: Option<(i32, i32)>,
    rows: i32,
}

/// The note for `n` series the legend leaves out.
fn more_note(n: usize) -> String {
    format!("+{n} more")
}

/// Lays out legend entries whose names are `widths` pixels wide, left to right in rows of
/// at most [`LEGEND_MAX_ROWS`]; when they do not fit, the last row ends with a note
/// `more_width` wide counting the rest.
fn legend_layout(widths: &[i32], more_width: i32) -> LegendLayout {
    let mut all = Vec::with_capacity(widths.len());
    let (mut x, mut row) = (PLOT_LEFT, 0);
    for &w in widths {
        let item = LEGEND_SWATCH + LEGEND_GAP + w;
        if x > PLOT_LEFT && x + item > LEGEND_RIGHT {
            (x, row) = (PLOT_LEFT, row + 1);
        }
        all.push((x, row, x + item));
        x += item + LEGEND_SPACING;
    }
    let rows = all.last().map_or(0, |&(_, row, _)| row + 1);
    if rows <= LEGEND_MAX_ROWS {
        let items = all.into_iter().map(|(x, row, _)| (x, row)).collect();
        return LegendLayout {
            items,
            more: None,
            rows,
        };
    }
    // Keep the first rows whole and as much of the last one as leaves room for the note.
    let last = LEGEND_MAX_ROWS - 1;
    let mut items = Vec::new();
    let mut note_x = PLOT_LEFT;
    for (x, row, end) in all {
        if row < last || (row == last && end + LEGEND_SPACING + more_width <= LEGEND_RIGHT) {
            items.push((x, row));
            if row == last {
                note_x = end + LEGEND_SPACING;
            }
        } else {
            break;
        }
    }
    LegendLayout {
        items,
        more: Some((note_x, last)),
        rows: LEGEND_MAX_ROWS,
    }
}

/// The x axis for `results`: from the earliest point to the end of the latest point's
/// bucket; the last hour when there is no point at all.
fn x_range(results: &[QueryResult]) -> TimeAxis {
    let mut from = Timestamp::MAX;
    let mut to = Timestamp::MIN;
    for r in results {
        let step = i64::try_from(r.step.secs()).unwrap_or(i64::MAX).max(1);
        for &(ts, _) in &r.points {
            from = from.min(ts);
            to = to.max(ts.saturating_add(step));
        }
    }
    if from >= to {
        to = chrono::Utc::now().timestamp();
        from = to - 3_600;
    }
    TimeAxis { from, to }
}

/// The y axis for values in `[lo, hi]` (`lo <= hi`): 5% of the span added on both sides,
/// without crossing zero when the values do not, and a band around a flat line.
fn y_range(lo: f64, hi: f64) -> Range<f64> {
    if lo == hi {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        let (start, end) = (lo - pad, hi + pad);
        return match (lo >= 0.0, hi <= 0.0) {
            (true, _) => start.max(0.0)..end,
            (_, true) => start..end.min(0.0),
            _ => start..end,
        };
    }
    let pad = (hi - lo) * 0.05;
    let start = if lo >= 0.0 {
        (lo - pad).max(0.0)
    } else {
        lo - pad
    };
    let end = if hi <= 0.0 {
        (hi + pad).min(0.0)
    } else {
        hi + pad
    };
    start..end
}

/// The note for `n` points whose value overflowed: the dashboard's words.
fn overflowed_note(n: usize) -> String {
    format!("{n} overflowed (±Inf, not drawn)")
}

/// The y axis name for `display`.
fn display_label(display: Display) -> String {
    match display {
        Display::PerSec => format!("{} (/s)", display.as_str()),
        _ => display.as_str().to_owned(),
    }
}

/// `points` split where a value is missing (or not finite): each run is drawn as one line.
fn runs(points: &[(Timestamp, Option<f64>)]) -> Vec<Vec<(Timestamp, f64)>> {
    let mut runs = Vec::new();
    let mut run = Vec::new();
    for &(ts, value) in points {
        match value.filter(|v| v.is_finite()) {
            Some(v) => run.push((ts, v)),
            None if !run.is_empty() => runs.push(std::mem::take(&mut run)),
            None => {}
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// The colour of the `index`th series.
fn series_color(index: usize) -> RGBColor {
    if let Some(&color) = PALETTE.get(index) {
        return color;
    }
    let hue = (index as f64 * 0.618_033_988_75).fract();
    let (r, g, b) = HSLColor(hue, 0.65, 0.42).rgb();
    RGBColor(r, g, b)
}

/// `ts` in UTC as `pattern` (chrono's strftime syntax); the number itself when out of range.
fn format_ts(ts: Timestamp, pattern: &str) -> String {
    match DateTime::from_timestamp(ts, 0) {
        Some(t) => t.format(pattern).to_string(),
        None => ts.to_string(),
    }
}

/// The x tick label of `ts` on an axis spanning `span` seconds.
fn time_label(ts: Timestamp, span: i64) -> String {
    let pattern = if span < HOURS_ONLY_BELOW {
        "%H:%M"
    } else if span < DAYS_AND_HOURS_BELOW {
        "%m-%d %H:%M"
    } else {
        "%Y-%m-%d"
    };
    format_ts(ts, pattern)
}

/// The y tick label of `value` on the axis `axis`: thousands as `k`, millions as `M` and so
/// on when the axis reaches 10,000 or more, as many decimals as ticks a tenth of the axis
/// apart need (plotters puts at most 8 labels, 1, 2 or 5 times a power of ten apart), and
/// scientific notation on axes that stay within a thousandth of zero.
fn format_value(value: f64, axis: &Range<f64>) -> String {
    if value == 0.0 {
        return "0".to_owned();
    }
    let magnitude = axis.start.abs().max(axis.end.abs());
    if magnitude < 1e-3 {
        return format!("{value:.1e}");
    }
    let (scale, suffix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|&(scale, _)| magnitude >= scale * 10.0)
        .unwrap_or((1.0, ""));
    let tick = (axis.end - axis.start) / scale / 10.0;
    let decimals = if tick > 0.0 {
        (-tick.log10().floor()).clamp(0.0, 6.0) as usize
    } else {
        0
    };
    format!("{:.*}{suffix}", decimals, value / scale)
}

/// The x coordinate: unix seconds over `[from, to)`, with ticks on round UTC times and labels
/// whose precision follows the span (see [`time_label`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TimeAxis {
    from: Timestamp,
    to: Timestamp,
}

impl Ranged for TimeAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = Timestamp;

    fn map(&self, value: &Timestamp, limit: (i32, i32)) -> i32 {
        let fraction = (*value as f64 - self.from as f64) / (self.to as f64 - self.from as f64);
        limit.0 + (fraction * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<Timestamp> {
        ticks(self.from, self.to, hint.max_num_points())
    }

    fn range(&self) -> Range<Timestamp> {
        self.from..self.to
    }
}

impl ValueFormatter<Timestamp> for TimeAxis {
    fn format_ext(&self, value: &Timestamp) -> String {
        time_label(*value, self.to - self.from)
    }
}

/// At most `max` ticks in `[from, to]`: the multiples of the finest step in [`TICK_STEPS`]
/// (or of a whole number of 365-day years) that keeps them within `max`.
fn ticks(from: Timestamp, to: Timestamp, max: usize) -> Vec<Timestamp> {
    if max == 0 || from > to {
        return Vec::new();
    }
    let count = |step: i64| {
        let first = from.div_euclid(step) + i64::from(from.rem_euclid(step) != 0);
        (i128::from(to.div_euclid(step)) - i128::from(first) + 1).max(0) as u128
    };
    let fits = |step: i64| count(step) <= max as u128;
    let step = TICK_STEPS
        .into_iter()
        .find(|&s| fits(s))
        .unwrap_or_else(|| {
            let mut years = 1i64;
            while !fits(years.saturating_mul(365 * DAY)) {
                years = years.saturating_mul(2);
            }
            years.saturating_mul(365 * DAY)
        });
    let first = from.div_euclid(step) + i64::from(from.rem_euclid(step) != 0);
    (0..count(step) as i64)
        .map(|i| (first + i) * step)
        .collect()
}

#[cfg(test)]
mod tests;
