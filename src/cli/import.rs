//! `tierdb import`: Graphite plaintext or Influx line protocol from a file or stdin into a
//! data directory (whisper trees and RRD files go to [`super::import_archives`]). Reading
//! and parsing run on one thread, registering new series and writing on another, through
//! the local write path a server's connections take ([`crate::ingest::local`]), with whole
//! batches handed between them, so the two overlap.

use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::time::{Duration, Instant};

use super::{engine_builder, print, Location};
use crate::engine::Engine;
use crate::error::Error;
use crate::error::Result;
use crate::ingest::bounds::TimeBounds;
pub use crate::ingest::influx::Precision;
use crate::ingest::local::{self, LocalBatch, LocalQueue};
use crate::ingest::name_cache::NameCache;
use crate::ingest::report::{IngestReport, NoTotals};
use crate::ingest::time_unit::{self, Unit};
use crate::ingest::{graphite, influx};
use crate::server::announce::Announced;
use crate::time::{format_ts, Timestamp};

/// Samples per batch handed to the engine.
const BATCH: usize = 65_536;
/// Bytes of input read ahead.
const READ_BUFFER: usize = 1 << 20;

/// The line formats `import` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `path value timestamp` (timestamp in seconds, -1 for now; tags as `path;k=v`).
    Graphite,
    /// InfluxDB line protocol (nanosecond timestamps unless `--precision` says otherwise).
    Influx,
    /// Graphite's whisper files: a `.wsp` file or a directory walked for them; a series is
    /// named by its path below the directory, `/` read as `.` (default for a directory or a
    /// `.wsp` file).
    Whisper,
    /// RRDtool's `.rrd` files: one series per data source, `FILE-stem.DS` (default for a
    /// `.rrd` file).
    Rrd,
}

/// Guesses the format from the first line that is not blank or a comment: Influx lines
/// have `=` in their second field (`cpu,host=a usage=1 ...`), Graphite lines a number.
pub fn detect(first_line: &str) -> Format {
    let mut fields = first_line.split_whitespace();
    let _key = fields.next();
    match fields.next() {
        Some(field) if field.contains('=') => Format::Influx,
        _ => Format::Graphite,
    }
}

/// The archive format a path's name says: whisper for a directory or a `.wsp` file, rrd for
/// a `.rrd` file; `None` otherwise (line input).
fn format_of_path(path: &str) -> Option<Format> {
    let path = std::path::Path::new(path);
    match path.extension().and_then(|e| e.to_str()) {
        Some("wsp") => Some(Format::Whisper),
        Some("rrd") => Some(Format::Rrd),
        _ if path.is_dir() => Some(Format::Whisper),
        _ => None,
    }
}

/// The archive format of an import format, `None` for line input.
fn archive_format(format: Format) -> Option<super::import_archives::ArchiveFormat> {
    match format {
        Format::Whisper => Some(super::import_archives::ArchiveFormat::Whisper),
        Format::Rrd => Some(super::import_archives::ArchiveFormat::Rrd),
        _ => None,
    }
}

/// Imports Graphite plaintext or Influx lines from a file or stdin, or whisper and RRD files.
///
/// The format is detected from the first line unless --format says (whisper for a directory
/// or a .wsp file, rrd for a .rrd file). Whisper and RRD archives are set into the tiers they
/// fill, so importing the same files twice changes nothing; see docs/migration.md. Shows
/// progress on a terminal and a summary at the end, with the first refused lines; fails
/// when no sample landed. Needs the data directory to itself: while a server holds it, send
/// the file to the server (the refusal names its addresses).
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb import metrics.txt\n  zcat history.lp.gz | tierdb import - --format influx --precision s\n  tierdb import --format whisper /var/lib/graphite/whisper\n  tierdb import --format rrd /var/lib/collectd/rrd/host/load/load.rrd"
)]
pub struct ImportArgs {
    /// The file to read, or - for stdin; for whisper, files or directories; for rrd, files.
    #[arg(default_value = "-", num_args = 1..)]
    files: Vec<String>,
    /// One whisper or RRD file only: the series name in place of the file's (whisper: NAME;
    /// RRD: NAME.DS in place of FILE-stem.DS).
    #[arg(long)]
    name: Option<String>,
    /// The input's format (default: detected).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Influx timestamp precision: ns, u, ms, s, m, h.
    #[arg(long, default_value = "ns")]
    precision: String,
    #[command(flatten)]
    location: Location,
}

/// Imports the file with a progress bar on a terminal, then prints the summary. A data
/// directory held by a running server is refused with a hint to send the file to it.
pub(super) fn run(args: ImportArgs) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let ImportArgs {
        files,
        format,
        precision,
        location,
        name,
    } = args;
    let format = format.or_else(|| format_of_path(&files[0]));
    if let Some(archives) = format.and_then(archive_format) {
        return super::import_archives::run(archives, &files, name.as_deref(), &location);
    }
    if name.is_some() {
        return Err("--name names the series of one whisper or RRD file".into());
    }
    let [file] = <[String; 1]>::try_from(files)
        .map_err(|_| "Graphite and Influx input is one file (or - for stdin)")?;
    let precision =
        influx::Precision::parse_v1(&precision).map_err(|e| format!("--precision: {e}"))?;
    let engine = match engine_builder(&location.data_dir, location.tiers.as_deref())?.open() {
        Err(Error::Locked { holder, .. }) => {
            return Err(held_by_server(&location.data_dir, &holder, &file).into())
        }
        other => other?,
    };
    let (input, size): (Box<dyn Read + Send>, Option<u64>) = if file == "-" {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = std::fs::File::open(&file).map_err(|e| Error::io(&file, e))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let _ = size;
    let summary = import(&engine, input, format, precision, |s| {
        let secs = s.elapsed.as_secs_f64().max(1e-9);
        bar.set_message(format!(
            "{} samples ({:.2} M/s), {} rejected",
            s.report.accepted,
            s.report.accepted as f64 / secs / 1e6,
            s.rejected_total()
        ));
        bar.tick();
    })?;
    bar.finish_and_clear();
    let now = engine.now();
    // The time and rate count the close, which makes the samples durable: the import is
    // done when the command returns, not when the last line is parsed.
    let closing = Instant::now();
    engine.close()?;
    let closed = closing.elapsed();
    let elapsed = summary.elapsed + closed;
    let secs = elapsed.as_secs_f64().max(1e-9);
    let report = &summary.report;
    let mut out = format!(
        "imported {} lines in {:.2?}: {:.2} M lines/s ({:.2?} of it syncing to disk); {} samples accepted, {} rejected\n",
        summary.lines,
        elapsed,
        summary.lines as f64 / secs / 1e6,
        closed,
        report.accepted,
        summary.rejected_total()
    );
    for (reason, n) in &report.rejected {
        out.push_str(&format!("  {reason}: {n}\n"));
    }
    if !report.errors.is_empty() {
        out.push_str("first rejected lines:\n");
    }
    for error in &report.errors {
        out.push_str(&format!(
            "  line {}: {}: {}\n",
            error.line, error.reason, error.message
        ));
    }
    print(&out)?;
    if !summary.landed_nothing() {
        return Ok(());
    }
    let mut refusal = format!("no sample of {file} was imported");
    if let Some(hint) = summary.unit_hint(precision, now) {
        refusal.push_str("; ");
        refusal.push_str(&hint);
    }
    Err(refusal.into())
}

/// The refusal of a directory a server holds: where to send the file instead, from the
/// addresses the server wrote into the directory (its `SERVER` file), when it did.
fn held_by_server(dir: &std::path::Path, holder: &str, file: &str) -> String {
    let announced = (holder.strip_prefix("pid "))
        .and_then(|pid| pid.trim().parse().ok())
        .and_then(|pid| Announced::read(dir, pid));
    let how = match announced {
        Some(at) => format!(
            "`nc {} {} < {file}` (Graphite) or `curl --data-binary @{file} \
             http://{}/write` (Influx)",
            at.graphite.ip(),
            at.graphite.port(),
            at.http
        ),
        None => format!(
            "`nc HOST PORT < {file}` to its Graphite listener or POST it to its /write \
             (Influx); it announced no addresses here"
        ),
    };
    format!(
        "{} is held by a running tierdb ({holder}); send the file to that server instead: {how}",
        dir.display()
    )
}

/// What an import did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ImportSummary {
    /// Lines read (blank lines and comments included).
    pub lines: u64,
    /// Samples accepted, refusals by reason, and the first refused lines with their
    /// numbers: what the HTTP API answers a write with.
    pub report: IngestReport,
    /// The format read (detected or given); `None` when the input had no data line.
    pub format: Option<Format>,
    /// The first sample's timestamp as written in the input (Graphite: seconds; Influx: in
    /// the unit --precision says), to tell a wrong unit.
    pub first_ts: Option<i64>,
    /// Wall time.
    #[serde(skip)]
    pub elapsed: Duration,
}

impl ImportSummary {
    /// Refusals of every reason.
    pub fn rejected_total(&self) -> u64 {
        self.report.rejected_total()
    }

    /// True when the import is a failure: samples were refused, none landed, and not
    /// because every one was already stored (all refused as `counter_out_of_order`, what
    /// importing a file again after an interrupted import gives for counters). An input
    /// with nothing to import (empty, or only comments) is no failure: an empty export
    /// imports nothing.
    pub fn landed_nothing(&self) -> bool {
        let report = &self.report;
        let already_stored =
            (report.rejected.keys()).all(|&reason| reason == "counter_out_of_order");
        report.accepted == 0 && report.rejected_total() > 0 && !already_stored
    }

    /// When nothing was accepted and every refusal was for the sample's time, and the first
    /// timestamp read in another unit is a recent time: a sentence naming that unit and the
    /// flag that reads it ("timestamps look like seconds: try --precision s").
    pub fn unit_hint(&self, precision: influx::Precision, now: Timestamp) -> Option<String> {
        if !time_unit::refused_only_for_time(&self.report) {
            return None;
        }
        let raw = self.first_ts?;
        let graphite = self.format == Some(Format::Graphite);
        let read_as = if graphite {
            influx::Precision::Seconds
        } else {
            precision
        };
        let Unit {
            name: unit, flag, ..
        } = time_unit::looks_like(raw, read_as, now)?;
        let first = format_ts(read_as.to_seconds(raw).unwrap_or(raw));
        let read_unit = time_unit::name_of(read_as);
        Some(if graphite {
            format!(
                "its timestamps look like {unit} (the first, read as Graphite's seconds, is \
                 {first}): convert them to seconds, or write the data as Influx lines and \
                 import them with --precision {flag}"
            )
        } else {
            format!(
                "its timestamps look like {unit} (the first, read as {read_unit}, is \
                 {first}): try --precision {flag}"
            )
        })
    }
}

/// Reads `input` to its end and writes every sample into `engine`. `progress` is called
/// after every batch with the running summary (the CLI draws its progress bar from it).
///
/// ```
/// use tierdb::cli::import::{import, Format, Precision};
///
/// # fn main() -> tierdb::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let engine = tierdb::Engine::open(dir.path())?;
/// let now = chrono::Utc::now().timestamp();
/// let dump = format!("web.hits 3 {now}\nweb.hits x {now}\nweb.hits 4 {now}\n");
/// let summary = import(&engine, dump.as_bytes(), Some(Format::Graphite), Precision::Seconds, |_| {})?;
/// assert_eq!(summary.report.accepted, 2);
/// assert_eq!(summary.rejected_total(), 1); // line 2, named in summary.report.errors
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// [`Error::Io`] when the input cannot be read; the engine's errors (a poisoned engine).
/// Bad lines are not errors: they are counted by reason.
pub fn import(
    engine: &Engine,
    input: impl Read + Send,
    format: Option<Format>,
    precision: influx::Precision,
    mut progress: impl FnMut(&ImportSummary),
) -> Result<ImportSummary> {
    if let Some(archives) = format.and_then(archive_format) {
        return Err(Error::InvalidQuery(format!(
            "{archives:?} files are whole files, not lines: import them with \
             import_archives::import_archives"
        )));
    }
    let started = Instant::now();
    let (full_tx, full_rx) = crossbeam_channel::bounded::<LocalBatch>(2);
    let (empty_tx, empty_rx) = crossbeam_channel::bounded::<LocalBatch>(3);
    // With the parser's own, three batches go round: one filling, one writing, one waiting.
    for _ in 0..2 {
        let _ = empty_tx.send(LocalBatch::with_room(BATCH));
    }
    let mut summary = ImportSummary::default();
    let parsed = std::thread::scope(|scope| {
        let parser = scope.spawn(|| {
            let mut parser = Parser::new(engine, format, precision, full_tx, empty_rx);
            let result = parser.run(input);
            (
                parser.lines,
                parser.report,
                parser.format,
                parser.first_ts,
                result,
            )
        });
        // On a write failure keep draining, so the parser is never left blocked on a full
        // channel; the failure is reported once it has finished.
        let mut failure = None;
        for mut batch in full_rx.iter() {
            if failure.is_none() {
                let report = &mut summary.report;
                if let Err(e) = local::write(engine, &mut batch, report, &NoTotals, None) {
                    failure = Some(e);
                }
            }
            let _ = empty_tx.send(batch);
            summary.elapsed = started.elapsed();
            progress(&summary);
        }
        if let Some(e) = failure {
            return Err(e);
        }
        parser
            .join()
            .map_err(|_| Error::Poisoned("the import parser thread panicked".into()))
    })?;
    let (lines, parse_report, format, first_ts, result) = parsed;
    result?;
    summary.lines = lines;
    summary.format = format;
    summary.first_ts = first_ts;
    summary.report.absorb(parse_report);
    summary.elapsed = started.elapsed();
    progress(&summary);
    Ok(summary)
}

/// The reading and parsing side of an import.
struct Parser<'a> {
    engine: &'a Engine,
    format: Option<Format>,
    precision: influx::Precision,
    full: crossbeam_channel::Sender<LocalBatch>,
    empty: crossbeam_channel::Receiver<LocalBatch>,
    /// Checked before a sample is queued; taken afresh at every batch sent.
    bounds: TimeBounds,
    queue: LocalQueue,
    lines: u64,
    /// Lines and fields refused while parsing.
    report: IngestReport,
    /// The first timestamp as written (see [`ImportSummary::first_ts`]).
    first_ts: Option<i64>,
    now: i64,
}

impl<'a> Parser<'a> {
    fn new(
        engine: &'a Engine,
        format: Option<Format>,
        precision: influx::Precision,
        full: crossbeam_channel::Sender<LocalBatch>,
        empty: crossbeam_channel::Receiver<LocalBatch>,
    ) -> Parser<'a> {
        Parser {
            engine,
            format,
            precision,
            full,
            empty,
            bounds: TimeBounds::default(),
            queue: LocalQueue::new(engine, NameCache::unbounded(), BATCH),
            lines: 0,
            report: IngestReport::default(),
            first_ts: None,
            now: engine.now(),
        }
    }

    fn run(&mut self, input: impl Read) -> Result<()> {
        let mut reader = BufReader::with_capacity(READ_BUFFER, input);
        let mut line = Vec::with_capacity(4096);
        let mut parser = influx::LineParser::default();
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io("import input", e))?;
            if n == 0 {
                break;
            }
            self.lines += 1;
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            let format = match self.format {
                Some(format) => format,
                None => match std::str::from_utf8(&line) {
                    Ok(text) if !text.trim().is_empty() && !text.trim_start().starts_with('#') => {
                        let format = detect(text);
                        self.format = Some(format);
                        format
                    }
                    _ => continue,
                },
            };
            match format {
                Format::Graphite => match graphite::parse_line(&line) {
                    Ok(Some(parsed)) => {
                        self.first_ts = self.first_ts.or(parsed.ts);
                        let ts = parsed.ts.unwrap_or(self.now);
                        self.push(&parsed.series, ts, parsed.value)?;
                    }
                    Ok(None) => {}
                    Err(e) => self.reject(e.as_str(), || e.to_string()),
                },
                // Refused by `import` before any line is read.
                Format::Whisper | Format::Rrd => {}
                Format::Influx => {
                    let Ok(text) = std::str::from_utf8(&line) else {
                        self.reject("invalid_utf8", || "the line is not UTF-8".into());
                        continue;
                    };
                    match parser.parse(text, self.precision) {
                        Ok(()) => {
                            if self.first_ts.is_none() && parser.has_points() {
                                // The timestamp as written (before --precision): the line's
                                // last field, when a number. Comments and blank lines have
                                // no points, so they are not taken for one.
                                self.first_ts = time_unit::written_ts(text);
                            }
                            let ts = parser.ts().unwrap_or(self.now);
                            for (series, value) in parser.points() {
                                self.push(series, ts, value)?;
                            }
                            for skip in parser.skipped() {
                                self.reject(skip.as_str(), || {
                                    format!("field skipped: {}", skip.as_str())
                                });
                            }
                        }
                        Err(e) => self.reject(e.as_str(), || e.to_string()),
                    }
                }
            }
        }
        self.send()
    }

    /// Checks one sample's value and time and queues it ([`LocalQueue::push`]); sends the
    /// batch once full.
    fn push(&mut self, series: &str, ts: i64, value: f64) -> Result<()> {
        let line = self.lines as usize;
        let engine = self.engine;
        let checked = (self.bounds).check(value, ts, || (engine.config(), engine.now()));
        match checked.and_then(|()| (self.queue).push(engine, series, None, ts, value, line)) {
            Ok(false) => Ok(()),
            Ok(true) => self.send(),
            Err(reason) => {
                self.reject(reason.as_str(), || format!("sample refused: {reason}"));
                Ok(())
            }
        }
    }

    /// Registers the queued batch's new series and hands the batch to the writer, taking an
    /// empty one back.
    fn send(&mut self) -> Result<()> {
        self.bounds.retake();
        if self.queue.len() == 0 {
            return Ok(());
        }
        self.queue.register_queued(self.engine, &mut self.report);
        let empty = (self.empty.recv()).unwrap_or_else(|_| LocalBatch::with_room(BATCH));
        let batch = self.queue.swap(self.engine, empty);
        self.full
            .send(batch)
            .map_err(|_| Error::Poisoned("the import writer stopped".into()))
    }

    /// Counts a refused line; `message` is only built for the refusals the report keeps.
    fn reject(&mut self, reason: &'static str, message: impl FnOnce() -> String) {
        self.report.reject(self.lines as usize, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::{detect, Format, ImportSummary};
    use crate::ingest::influx::Precision;

    #[test]
    fn formats_are_told_apart_by_the_second_field() {
        assert_eq!(detect("a.b.c 1 1700000000"), Format::Graphite);
        assert_eq!(detect("a.b;host=x 1 -1"), Format::Graphite);
        assert_eq!(
            detect("cpu,host=a usage=1 1700000000000000000"),
            Format::Influx
        );
        assert_eq!(detect("cpu usage=1i"), Format::Influx);
    }

    fn summary(format: Format, first_ts: i64, rejected: &[(&'static str, u64)]) -> ImportSummary {
        let mut summary = ImportSummary {
            format: Some(format),
            first_ts: Some(first_ts),
            ..ImportSummary::default()
        };
        for &(reason, n) in rejected {
            for line in 0..n {
                summary
                    .report
                    .reject(line as usize + 1, reason, String::new);
            }
        }
        summary
    }

    #[test]
    fn a_wrong_unit_is_named_only_when_every_refusal_is_for_the_time() {
        let now = 1_795_000_000;
        let seconds = summary(Format::Influx, now, &[("too_old", 2)]);
        let hint = seconds.unit_hint(Precision::Nanoseconds, now).unwrap();
        assert!(
            hint.contains("look like seconds") && hint.ends_with("try --precision s"),
            "{hint}"
        );
        let millis = summary(Format::Influx, now * 1000, &[("too_far_in_future", 1)]);
        let hint = millis.unit_hint(Precision::Seconds, now).unwrap();
        assert!(hint.ends_with("try --precision ms"), "{hint}");
        let graphite = summary(Format::Graphite, now * 1000, &[("too_far_in_future", 1)]);
        assert!(graphite
            .unit_hint(Precision::Nanoseconds, now)
            .unwrap()
            .contains("milliseconds"));
        // Another refusal beside the time ones, or a timestamp recent in no unit: no hint.
        let mixed = summary(Format::Influx, now, &[("too_old", 1), ("invalid_field", 1)]);
        assert_eq!(mixed.unit_hint(Precision::Nanoseconds, now), None);
        let nowhere = summary(Format::Influx, 12_345, &[("too_old", 1)]);
        assert_eq!(nowhere.unit_hint(Precision::Nanoseconds, now), None);
    }

    #[test]
    fn nothing_landed_fails_unless_every_sample_was_already_stored_or_there_was_none() {
        assert!(summary(Format::Graphite, 0, &[("too_old", 1)]).landed_nothing());
        // An empty export (or only comments): nothing to import is no failure.
        assert!(!summary(Format::Graphite, 0, &[]).landed_nothing());
        assert!(!summary(Format::Graphite, 0, &[("counter_out_of_order", 3)]).landed_nothing());
        let mut some = summary(Format::Graphite, 0, &[("too_old", 1)]);
        some.report.accepted = 1;
        assert!(!some.landed_nothing());
    }
}
