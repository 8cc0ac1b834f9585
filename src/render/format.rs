//! graphite-web's other answer formats for `/render`, byte for byte as its renderers write
//! them (1.1.8's `renderViewCsv`, `renderViewRaw`, `renderViewPickle`, `renderViewMsgPack`,
//! `renderViewDygraph` and `renderViewRickshaw`), from the series [`super::render`]
//! evaluates. Unlike json, these are never consolidated to `maxDataPoints`: graphite-web
//! consolidates in its json renderer only.
//!
//! Values are floats (graphite-web writes a value that a function made a Python integer,
//! such as `transformNull`'s default 0, as `0` where tierdb writes `0.0`). NaN is null in
//! every format. An infinity (a sum that overflowed) is written as graphite-web writes it:
//! `1e9999` and `-1e9999` in json (`renderViewJson` replaces Python's `Infinity` so; JSON
//! parsers of JavaScript and Python read it back as an infinity), `inf` and `-inf` in csv and
//! raw (`repr`), `Infinity` and `-Infinity` in dygraph and rickshaw (Python's `json.dumps`,
//! which JavaScript's `JSON.parse` refuses, as it does graphite-web's), a float infinity in
//! pickle and msgpack.

#[cfg(test)]
mod tests;

use super::python::{json_float, json_str, str_float};
use super::RenderedSeries;

/// The most bytes an answer in a format other than json may take. These formats are not consolidated,
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
    /// The pickle format's series dicts in MessagePack, as graphite-web 1.1 peers ask for them.
    Msgpack,
    /// The Dygraph chart library's object: `{"labels" : ["Time", names...], "data" :
    /// [[milliseconds, v1, v2, ...], ...]}`, a row per time of the first series.
    Dygraph,
    /// The Rickshaw chart library's list: `[{"target", "datapoints": [{"x": ts, "y": v}]}]`.
    Rickshaw,
}

impl Format {
    /// Each format by its name in `format=`.
    const NAMES: [(Format, &'static str); 7] = [
        (Format::Json, "json"),
        (Format::Csv, "csv"),
        (Format::Raw, "raw"),
        (Format::Pickle, "pickle"),
        (Format::Msgpack, "msgpack"),
        (Format::Dygraph, "dygraph"),
        (Format::Rickshaw, "rickshaw"),
    ];

    /// The format `format` names (`json`, `csv`, `raw`, `pickle`, `msgpack`, `dygraph`,
    /// `rickshaw`); `None` for another.
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
            Format::Json | Format::Dygraph | Format::Rickshaw => "application/json",
            Format::Csv => "text/csv",
            Format::Raw => "text/plain",
            Format::Pickle => "application/pickle",
            Format::Msgpack => "application/x-msgpack",
        }
    }

    /// Why the format cannot hold `series`, `None` when it can. Only dygraph can fail: its
    /// rows are the first series' times, so every series must have as many points
    /// (graphite-web's `renderViewDygraph` fails with an `IndexError` or `TypeError` where one
    /// has more or fewer).
    pub fn unwritable(self, series: &[RenderedSeries]) -> Option<String> {
        let first = series.first().filter(|_| self == Format::Dygraph)?;
        let rows = dygraph_times(first).count();
        let other = series.iter().find(|s| s.datapoints.len() != rows)?;
        Some(format!(
            "format=dygraph: a row per time of the first series ({} points of {} s), which {} \
             ({} points of {} s) does not fit; ask for each alone, or for json",
            rows,
            first.step,
            other.target,
            other.datapoints.len(),
            other.step
        ))
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
            // BINFLOAT and its eight bytes, or NONE, plus the list's framing; a float64.
            Format::Pickle | Format::Msgpack => 9 + 1,
            // `, ` and the value (a row's time and brackets counted per point too).
            Format::Dygraph => 2 + 24 + 20,
            // `{"x": 1763726160, "y": ` and the value, `}, `.
            Format::Rickshaw => 25 + 24 + 3,
        };
        let per_series = |s: &RenderedSeries| match self {
            Format::Json => 0,
            Format::Csv => 0,
            Format::Raw | Format::Pickle | Format::Msgpack => 4 * s.target.len() + 256,
            // A name escaped as `\uXXXX` takes up to 12 bytes a character.
            Format::Dygraph | Format::Rickshaw => 12 * s.target.len() + 256,
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
            Format::Msgpack => msgpack(series),
            Format::Dygraph => dygraph(series).into_bytes(),
            Format::Rickshaw => rickshaw(series).into_bytes(),
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

/// `renderViewMsgPack`: the same dicts as [`pickle`]'s, as graphite-web's bundled
/// u-msgpack-python packs them: each integer and length in its smallest form, strings as
/// str, floats as float64, null as nil.
fn msgpack(series: &[RenderedSeries]) -> Vec<u8> {
    let mut m = MsgPack(Vec::new());
    m.head(series.len(), 0x90, 0xdc);
    for s in series {
        m.head(9, 0x80, 0xde);
        m.text("name");
        m.text(&s.target);
        m.text("start");
        m.int(s.start);
        m.text("end");
        m.int(s.end);
        m.text("step");
        m.int(s.step);
        m.text("values");
        m.head(s.datapoints.len(), 0x90, 0xdc);
        for (v, _) in &s.datapoints {
            match v {
                Some(v) => {
                    m.0.push(0xcb);
                    m.0.extend_from_slice(&v.to_be_bytes());
                }
                None => m.0.push(0xc0),
            }
        }
        m.text("pathExpression");
        m.text(&s.path_expression);
        m.text("valuesPerPoint");
        m.int(1);
        m.text("consolidationFunc");
        m.text(&s.consolidation);
        m.text("xFilesFactor");
        m.0.push(0xcb);
        m.0.extend_from_slice(&s.x_files_factor.to_be_bytes());
    }
    m.0
}

/// The few MessagePack forms the series need.
struct MsgPack(Vec<u8>);

impl MsgPack {
    /// An array's or a map's head: `fix | n` below 16 entries, else `wide` (16-bit length)
    /// or the 32-bit form after it.
    fn head(&mut self, n: usize, fix: u8, wide: u8) {
        match (u8::try_from(n), u16::try_from(n)) {
            (Ok(n), _) if n < 16 => self.0.push(fix | n),
            (_, Ok(n)) => {
                self.0.push(wide);
                self.0.extend_from_slice(&n.to_be_bytes());
            }
            _ => {
                self.0.push(wide + 1);
                self.0.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
    }

    /// A string: fixstr below 32 bytes, else str8, str16 or str32.
    fn text(&mut self, text: &str) {
        let n = text.len();
        if n < 32 {
            self.0.push(0xa0 | n as u8);
        } else if let Ok(n) = u8::try_from(n) {
            self.0.extend_from_slice(&[0xd9, n]);
        } else if let Ok(n) = u16::try_from(n) {
            self.0.push(0xda);
            self.0.extend_from_slice(&n.to_be_bytes());
        } else {
            self.0.push(0xdb);
            self.0.extend_from_slice(&(n as u32).to_be_bytes());
        }
        self.0.extend_from_slice(text.as_bytes());
    }

    /// An integer in its smallest form: a positive or negative fixint, else the narrowest
    /// unsigned form for a positive one and signed form for a negative one.
    fn int(&mut self, n: i64) {
        if (-32..128).contains(&n) {
            self.0.push(n as u8);
        } else if n >= 0 {
            match (u8::try_from(n), u16::try_from(n), u32::try_from(n)) {
                (Ok(n), _, _) => self.0.extend_from_slice(&[0xcc, n]),
                (_, Ok(n), _) => {
                    self.0.push(0xcd);
                    self.0.extend_from_slice(&n.to_be_bytes());
                }
                (_, _, Ok(n)) => {
                    self.0.push(0xce);
                    self.0.extend_from_slice(&n.to_be_bytes());
                }
                _ => {
                    self.0.push(0xcf);
                    self.0.extend_from_slice(&n.to_be_bytes());
                }
            }
        } else {
            match (i8::try_from(n), i16::try_from(n), i32::try_from(n)) {
                (Ok(n), _, _) => self.0.extend_from_slice(&[0xd0, n as u8]),
                (_, Ok(n), _) => {
                    self.0.push(0xd1);
                    self.0.extend_from_slice(&n.to_be_bytes());
                }
                (_, _, Ok(n)) => {
                    self.0.push(0xd2);
                    self.0.extend_from_slice(&n.to_be_bytes());
                }
                _ => {
                    self.0.push(0xd3);
                    self.0.extend_from_slice(&n.to_be_bytes());
                }
            }
        }
    }
}

/// The times of dygraph's rows: graphite-web's `range(start, end, step)` of the first series.
fn dygraph_times(first: &RenderedSeries) -> impl Iterator<Item = i64> {
    let step = usize::try_from(first.step).unwrap_or(1).max(1);
    (first.start..first.end).step_by(step)
}

/// `renderViewDygraph`: `{"labels" : [...], "data" : [[ms, v, ...], ...]}` with Python's
/// spacing, each value as `%s` writes a float (`null` for a null), `{}` for no series.
/// [`Format::unwritable`] first checks every series has a point per row.
fn dygraph(series: &[RenderedSeries]) -> String {
    let Some(first) = series.first() else {
        return "{}".to_owned();
    };
    let labels: Vec<String> = std::iter::once("Time")
        .chain(series.iter().map(|s| s.target.as_str()))
        .map(json_str)
        .collect();
    let rows: Vec<String> = (dygraph_times(first).enumerate())
        .map(|(i, at)| {
            let mut row = format!("[{at}000");
            for s in series {
                row.push_str(", ");
                match s.datapoints.get(i).and_then(|p| p.0) {
                    Some(v) => row.push_str(&json_float(v)),
                    None => row.push_str("null"),
                }
            }
            row.push(']');
            row
        })
        .collect();
    format!(
        "{{\"labels\" : [{}], \"data\" : [{}]}}",
        labels.join(", "),
        rows.join(", ")
    )
}

/// `renderViewRickshaw`: Python's `json.dumps` of `[{"target": name, "datapoints": [{"x":
/// ts, "y": value}, ...]}, ...]`.
fn rickshaw(series: &[RenderedSeries]) -> String {
    let list: Vec<String> = (series.iter())
        .map(|s| {
            let points: Vec<String> = (s.datapoints.iter())
                .map(|(v, at)| {
                    let y = v.map_or_else(|| "null".to_owned(), json_float);
                    format!("{{\"x\": {at}, \"y\": {y}}}")
                })
                .collect();
            format!(
                "{{\"target\": {}, \"datapoints\": [{}]}}",
                json_str(&s.target),
                points.join(", ")
            )
        })
        .collect();
    format!("[{}]", list.join(", "))
}
