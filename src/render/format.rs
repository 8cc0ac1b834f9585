//! graphite-web's other answer formats for `/render`, byte for byte as its renderers write
//! them (1.1.8's `renderViewCsv`, `renderViewRaw` and `renderViewPickle`), from the series
//! [`super::render`] evaluates. Unlike json, these are never consolidated to
//! `maxDataPoints`: graphite-web consolidates in its json renderer only.
//!
//! Values are floats (graphite-web writes a value that a function made a Python integer,
//! such as `transformNull`'s default 0, as `0` where tierdb writes `0.0`). NaN is null in
//! every format. An infinity (a sum that overflowed) is written as graphite-web writes it:
//! `1e9999` and `-1e9999` in json (`renderViewJson` replaces Python's `Infinity` so; JSON
//! parsers of JavaScript and Python read it back as an infinity), `inf` and `-inf` in csv and
//! raw (`repr`), a float infinity in pickle.

#[cfg(test)]
mod tests;

use super::python::str_float;
use super::RenderedSeries;

/// The most bytes a csv, raw or pickle answer may take. These formats are not consolidated,
/// and csv repeats the series' name on every point, so the read budget (which counts points)
/// alone would let one request build gigabytes: past this, the request is refused before
/// anything is written.
pub const MAX_ANSWER_BYTES: usize = 256 << 20;

/// The formats a `/render` answer can take besides json.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// graphite-web's default json: `[{"target", "datapoints"}]`.
    Json,
    /// One line per point: `name,YYYY-MM-DD HH:MM:SS,value` (UTC), Excel's CSV dialect.
    Csv,
    /// One line per series: `name,start,end,step|v1,v2,...` with `None` for a null.
    Raw,
    /// A Python pickle of graphite-web's series dicts, as another graphite-web reads it from
    /// a cluster peer (`format=pickle`).
    Pickle,
}

impl Format {
    /// Each format by its name in `format=`.
    const NAMES: [(Format, &'static str); 4] = [
        (Format::Json, "json"),
        (Format::Csv, "csv"),
        (Format::Raw, "raw"),
        (Format::Pickle, "pickle"),
    ];

    /// The format `format` names (`json`, `csv`, `raw`, `pickle`); `None` for another.
    pub fn parse(format: &str) -> Option<Format> {
        Format::NAMES
            .iter()
            .find(|(_, name)| *name == format)
            .map(|(f, _)| *f)
    }

    /// The format's name in `format=`.
    pub fn name(self) -> &'static str {
        Format::NAMES
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("json", |(_, name)| name)
    }

    /// The `Content-Type` graphite-web answers the format with.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv => "text/csv",
            Format::Raw => "text/plain",
            Format::Pickle => "application/pickle",
        }
    }

    /// Whether graphite-web consolidates the series to `maxDataPoints` in this format (json
    /// only).
    pub fn consolidates(self) -> bool {
        self == Format::Json
    }

    /// At least as many bytes as [`Format::write`] writes for `series` in a format that is
    /// not consolidated, a little more for most values; 0 for json, which is bounded by its
    /// consolidation.
    pub fn upper_bound_bytes(self, series: &[RenderedSeries]) -> usize {
        // A value is at most 24 characters as `repr` writes it (`-1.2345678901234567e-300`).
        let per_point = |s: &RenderedSeries| match self {
            Format::Json => 0,
            // Quoted name, `,`, 19-character time, `,`, value, `\r\n`.
            Format::Csv => 2 * s.target.len() + 2 + 1 + 19 + 1 + 24 + 2,
            Format::Raw => 24 + 1,
            // BINFLOAT and its eight bytes, or NONE, plus the list's framing.
            Format::Pickle => 9 + 1,
        };
        let per_series = |s: &RenderedSeries| match self {
            Format::Json => 0,
            Format::Csv => 0,
            Format::Raw | Format::Pickle => 4 * s.target.len() + 256,
        };
        series
            .iter()
            .map(|s| per_series(s).saturating_add(per_point(s).saturating_mul(s.datapoints.len())))
            .fold(0, usize::saturating_add)
    }

    /// The answer's body.
    pub fn write(self, series: &[RenderedSeries]) -> Vec<u8> {
        match self {
            Format::Json => json(series),
            Format::Csv => csv(series).into_bytes(),
            Format::Raw => raw(series).into_bytes(),
            Format::Pickle => pickle(series),
        }
    }
}

/// `renderViewJson` without consolidation (done before): `[{"target": ..., "datapoints":
/// [[value, ts], ...]}, ...]`, NaN already null, an infinity as `1e9999` or `-1e9999`.
fn json(series: &[RenderedSeries]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        64 + series
            .iter()
            .map(|s| 24 * s.datapoints.len())
            .sum::<usize>(),
    );
    out.push(b'[');
    for (i, s) in series.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"target\":");
        // Writing to a Vec cannot fail, and a string always serializes.
        let _ = serde_json::to_writer(&mut out, &s.target);
        out.extend_from_slice(b",\"datapoints\":[");
        for (j, &(value, at)) in s.datapoints.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            out.push(b'[');
            match value {
                None => out.extend_from_slice(b"null"),
                Some(v) if v == f64::INFINITY => out.extend_from_slice(b"1e9999"),
                Some(v) if v == f64::NEG_INFINITY => out.extend_from_slice(b"-1e9999"),
                Some(v) => {
                    let _ = serde_json::to_writer(&mut out, &v);
                }
            }
            out.push(b',');
            out.extend_from_slice(itoa::Buffer::new().format(at).as_bytes());
            out.push(b']');
        }
        out.extend_from_slice(b"]}");
    }
    out.push(b']');
    out
}

/// `renderViewCsv`: Python's `csv.writer` (Excel dialect: `\r\n` line ends, a field quoted
/// when it holds `,`, `"`, `\r` or `\n`, a quote doubled), a row per value: the name, the
/// point's time in UTC, and `repr` of the value (empty for null).
fn csv(series: &[RenderedSeries]) -> String {
    let mut out = String::new();
    for s in series {
        let name = csv_field(&s.target);
        for (value, at) in &s.datapoints {
            let time = chrono::DateTime::from_timestamp(*at, 0)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default();
            let value = value.map(str_float).unwrap_or_default();
            out.push_str(&format!("{name},{time},{value}\r\n"));
        }
    }
    out
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// `renderViewRaw`: `name,start,end,step|` then `repr` of each value (`None` for null), `,`
/// between them, a line per series.
fn raw(series: &[RenderedSeries]) -> String {
    let mut out = String::new();
    for s in series {
        out.push_str(&format!("{},{},{},{}|", s.target, s.start, s.end, s.step));
        let values: Vec<String> = (s.datapoints.iter())
            .map(|(v, _)| v.map_or_else(|| "None".to_owned(), str_float))
            .collect();
        out.push_str(&values.join(","));
        out.push('\n');
    }
    out
}

/// `renderViewPickle`: a list of graphite-web's `TimeSeries.getInfo()` dicts (`name`,
/// `start`, `end`, `step`, `values`, `pathExpression`, `valuesPerPoint`, `consolidationFunc`,
/// `xFilesFactor`), in pickle protocol 2 (which every Python 3 unpickles; graphite-web writes
/// its newest protocol, whose bytes differ but whose objects are the same).
fn pickle(series: &[RenderedSeries]) -> Vec<u8> {
    let mut p = Pickle(vec![0x80, 2]);
    p.0.push(b']'); // EMPTY_LIST
    for s in series {
        p.0.push(b'}'); // EMPTY_DICT
        p.0.push(b'('); // MARK
        p.text("name");
        p.text(&s.target);
        p.text("start");
        p.int(s.start);
        p.text("end");
        p.int(s.end);
        p.text("step");
        p.int(s.step);
        p.text("values");
        p.0.push(b']');
        for chunk in s.datapoints.chunks(1000) {
            p.0.push(b'(');
            for (v, _) in chunk {
                match v {
                    Some(v) => p.float(*v),
                    None => p.0.push(b'N'),
                }
            }
            p.0.push(b'e'); // APPENDS
        }
        p.text("pathExpression");
        p.text(&s.path_expression);
        p.text("valuesPerPoint");
        p.int(1);
        p.text("consolidationFunc");
        p.text(&s.consolidation);
        p.text("xFilesFactor");
        p.float(s.x_files_factor);
        p.0.push(b'u'); // SETITEMS
        p.0.push(b'a'); // APPEND
    }
    p.0.push(b'.'); // STOP
    p.0
}

/// The few pickle opcodes the series need.
struct Pickle(Vec<u8>);

impl Pickle {
    /// BINUNICODE: a UTF-8 string.
    fn text(&mut self, text: &str) {
        self.0.push(b'X');
        self.0.extend_from_slice(&(text.len() as u32).to_le_bytes());
        self.0.extend_from_slice(text.as_bytes());
    }

    /// BININT for what fits in 32 bits, else LONG1 (8 little-endian bytes).
    fn int(&mut self, n: i64) {
        match i32::try_from(n) {
            Ok(n) => {
                self.0.push(b'J');
                self.0.extend_from_slice(&n.to_le_bytes());
            }
            Err(_) => {
                self.0.extend_from_slice(&[0x8a, 8]);
                self.0.extend_from_slice(&n.to_le_bytes());
            }
        }
    }

    /// BINFLOAT: 8 big-endian bytes.
    fn float(&mut self, x: f64) {
        self.0.push(b'G');
        self.0.extend_from_slice(&x.to_be_bytes());
    }
}
