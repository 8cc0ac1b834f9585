//! `tierdb import --format whisper|rrd`: whole files of another tool's rollups (a whisper
//! tree, RRD files) into a data directory, one file at a time.
//!
//! Each file is read whole (a few hundred KB), its archives turned into tier buckets by
//! [`crate::ingest::archive`], and the buckets **set** in the tiers rather than added, so
//! importing the same files again changes nothing (the summary counts the buckets that
//! changed). Reading and converting run on one thread, setting the buckets on another,
//! with batches of buckets handed between them, so the two overlap. A file that cannot be
//! read or is not what its format says is named in the summary and skipped; the rest goes on.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bucket::Bucket;
use crate::counter::SeriesKind;
use crate::engine::Engine;
use crate::error::Error;
use crate::error::Result;
use crate::ingest::archive::{self, fill_tier, Fold, StepArchive};
use crate::ingest::{rrd, whisper};
use crate::registry::SeriesId;
use crate::storage::cells::CellAt;
use crate::time::{format_ts, place, Timestamp};

/// Cells handed to the writer at once (64 MiB of them); a batch holds whole files, so it
/// may pass this by one file's cells.
const BATCH_CELLS: usize = 1 << 20;
/// Room for the file that makes a batch pass [`BATCH_CELLS`]: one whisper file of carbon's
/// common shape gives 27,480 cells per tier that takes an archive whole.
const BATCH_SLACK: usize = 1 << 17;
const BATCHES: usize = 3;
/// Batches that go round between the two threads (one filling, one queued, one being
/// written, at most) rather than being allocated anew: the first touch of 64 MiB of fresh
/// memory costs 16,384 page faults.
/// Skipped files the summary names, per reason.
const NAMED_SKIPS: usize = 10;

/// Which files an archive import reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveFormat {
    /// Graphite's whisper files (`.wsp`): a file, or a directory walked for `*.wsp`.
    Whisper,
    /// RRDtool's files (`.rrd`), each named.
    Rrd,
}

/// What an archive import did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ArchiveSummary {
    /// Files imported.
    pub files: u64,
    /// Bytes of the files imported.
    pub bytes: u64,
    /// Series written (a whisper file is one; an RRD file one per data source).
    pub series: u64,
    /// Known points read from the archives.
    pub points: u64,
    /// Tier buckets set.
    pub buckets: u64,
    /// Of those, the buckets whose stored value changed (0 on a second import of the same
    /// files).
    pub changed: u64,
    /// Oldest and newest point read.
    pub span: Option<(Timestamp, Timestamp)>,
    /// Points whose value was not a finite number (whisper stores NaN as given).
    pub not_finite: u64,
    /// Tier buckets the archives held that lie before the tier's window.
    pub before_window: u64,
    /// Tier buckets after now (a file whose clock ran ahead).
    pub after_now: u64,
    /// Coarser tier buckets left empty by the file's xFilesFactor.
    pub below_xff: u64,
    /// Files or data sources skipped, by reason, with the first few named and why.
    pub skipped: std::collections::BTreeMap<&'static str, Skipped>,
    /// Archives read but not imported (RRD MIN/MAX without a mean of their step, HWPREDICT
    /// and kin), `file: CF:step`.
    pub unused_archives: Vec<String>,
    /// Wall time, close included.
    #[serde(skip)]
    pub elapsed: Duration,
}

/// Files skipped for one reason.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Skipped {
    /// How many.
    pub count: u64,
    /// The first few, `path: why`.
    pub named: Vec<String>,
}

impl ArchiveSummary {
    fn skip(&mut self, reason: &'static str, path: &Path, why: impl std::fmt::Display) {
        let entry = self.skipped.entry(reason).or_default();
        entry.count += 1;
        if entry.named.len() < NAMED_SKIPS {
            entry.named.push(format!("{}: {why}", path.display()));
        }
    }

    fn widen(&mut self, span: Option<(Timestamp, Timestamp)>) {
        if let Some((a, b)) = span {
            self.span = Some(match self.span {
                None => (a, b),
                Some((x, y)) => (x.min(a), y.max(b)),
            });
        }
    }

    /// Files skipped, all reasons.
    pub fn skipped_files(&self) -> u64 {
        self.skipped.values().map(|s| s.count).sum()
    }

    /// The summary as the command prints it.
    pub fn render(&self) -> String {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let mut out = format!(
            "imported {} files ({:.1} MB) in {:.2?}: {} series, {} points ({:.2} M points/s); \
             {} buckets set, {} of them changed\n",
            self.files,
            self.bytes as f64 / 1e6,
            self.elapsed,
            self.series,
            self.points,
            self.points as f64 / secs / 1e6,
            self.buckets,
            self.changed
        );
        if let Some((a, b)) = self.span {
            out.push_str(&format!(
                "  time span {} .. {}\n",
                format_ts(a),
                format_ts(b)
            ));
        }
        for (n, what) in [
            (self.not_finite, "points not a finite number, left out"),
            (
                self.before_window,
                "tier buckets older than their tier's retention, left out",
            ),
            (
                self.after_now,
                "tier buckets after now (the file's clock ran ahead), left out",
            ),
            (
                self.below_xff,
                "coarser tier buckets left empty by the file's xFilesFactor",
            ),
        ] {
            if n > 0 {
                out.push_str(&format!("  {n} {what}\n"));
            }
        }
        for (reason, skipped) in &self.skipped {
            out.push_str(&format!("  skipped {} ({reason}):\n", skipped.count));
            for named in &skipped.named {
                out.push_str(&format!("    {named}\n"));
            }
            if skipped.count > skipped.named.len() as u64 {
                out.push_str(&format!(
                    "    and {} more\n",
                    skipped.count - skipped.named.len() as u64
                ));
            }
        }
        if !self.unused_archives.is_empty() {
            out.push_str("  archives not imported (no mean of their step, or no history):\n");
            for a in self.unused_archives.iter().take(NAMED_SKIPS) {
                out.push_str(&format!("    {a}\n"));
            }
        }
        out
    }
}

/// The files an import of `paths` reads, with their sizes: a whisper directory walked
/// (sorted, so the series are met in the same order every time) for `*.wsp` files, paired
/// with the root their names are taken below; any other path as given. A path that cannot
/// be listed is an error, and so is a directory of RRD files.
///
/// # Errors
/// [`Error::Io`] naming a path that cannot be read; [`Error::InvalidQuery`] for a directory
/// given for RRD files.
pub fn list_files(
    format: ArchiveFormat,
    paths: &[PathBuf],
) -> Result<Vec<(PathBuf, PathBuf, u64)>> {
    let mut files = Vec::new();
    for root in paths {
        let meta = std::fs::metadata(root).map_err(|e| Error::io(root, e))?;
        if meta.is_dir() && format == ArchiveFormat::Rrd {
            return Err(Error::InvalidQuery(format!(
                "{} is a directory: name the .rrd files (a series is named by its file's \
                 stem, so files of one name in several directories would write one series)",
                root.display()
            )));
        }
        if meta.is_dir() && format == ArchiveFormat::Whisper {
            let mut stack = vec![root.clone()];
            let mut found = Vec::new();
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
                    let entry = entry.map_err(|e| Error::io(&dir, e))?;
                    let path = entry.path();
                    let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
                    if kind.is_dir() {
                        stack.push(path);
                    } else if path.extension().is_some_and(|e| e == "wsp") {
                        let len = entry.metadata().map_err(|e| Error::io(&path, e))?.len();
                        found.push((path, len));
                    }
                }
            }
            found.sort();
            files.extend(found.into_iter().map(|(p, len)| (root.clone(), p, len)));
        } else {
            let parent = root.parent().map(Path::to_path_buf).unwrap_or_default();
            files.push((parent, root.clone(), meta.len()));
        }
    }
    Ok(files)
}

/// The series name of whisper file `path` below `root`, as carbon names it: the path's
/// components joined by `.`, without the `.wsp`.
pub fn whisper_name(root: &Path, path: &Path) -> String {
    let below = path.strip_prefix(root).unwrap_or(path).with_extension("");
    let parts: Vec<String> = below
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join(".")
}

/// Reads, converts and sets. `progress(files done, bytes done)` runs after every file.
///
/// # Errors
/// The engine's errors (a poisoned engine, a full disk); a bad file is no error but a skip.
pub fn import_archives(
    engine: &Engine,
    format: ArchiveFormat,
    files: &[(PathBuf, PathBuf, u64)],
    name: Option<&str>,
    mut progress: impl FnMut(u64, u64),
) -> Result<ArchiveSummary> {
    let started = Instant::now();
    type Cells = Vec<(CellAt, Bucket)>;
    let (full_tx, full_rx) = crossbeam_channel::bounded::<Cells>(1);
    let (empty_tx, empty_rx) = crossbeam_channel::bounded::<Cells>(BATCHES);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<(u64, u64)>();
    let result = std::thread::scope(|scope| {
        let converter = scope.spawn(move || {
            let mut summary = ArchiveSummary::default();
            let sized = || Vec::with_capacity(BATCH_CELLS + BATCH_SLACK);
            let mut batch: Cells = sized();
            let (mut done_files, mut done_bytes) = (0, 0);
            for (root, path, len) in files {
                let before = batch.len();
                convert_file(engine, format, (root, path), name, &mut summary, &mut batch)?;
                summary.buckets += (batch.len() - before) as u64;
                if batch.len() >= BATCH_CELLS {
                    // A batch back from the writer, or a new one while the first ones go round.
                    let next = empty_rx.try_recv().unwrap_or_else(|_| sized());
                    if full_tx.send(std::mem::replace(&mut batch, next)).is_err() {
                        break;
                    }
                }
                done_files += 1;
                done_bytes += len;
                let _ = done_tx.send((done_files, done_bytes));
            }
            if !batch.is_empty() {
                let _ = full_tx.send(batch);
            }
            drop(full_tx);
            Ok::<_, Error>(summary)
        });
        let mut changed = 0;
        let mut failure = None;
        for mut batch in full_rx.iter() {
            if failure.is_none() {
                match engine.import_cells(&batch) {
                    Ok(n) => changed += n as u64,
                    Err(e) => failure = Some(e),
                }
            }
            batch.clear();
            let _ = empty_tx.try_send(batch);
            for (files, bytes) in done_rx.try_iter() {
                progress(files, bytes);
            }
            if failure.is_some() {
                break;
            }
        }
        drop(full_rx);
        let summary = converter
            .join()
            .map_err(|_| Error::Poisoned("the import reader thread panicked".into()))??;
        for (files, bytes) in done_rx.try_iter() {
            progress(files, bytes);
        }
        match failure {
            Some(e) => Err(e),
            None => Ok((summary, changed)),
        }
    });
    let (mut summary, changed) = result?;
    summary.changed = changed;
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// Reads one file (`path`, named below `root`) and converts every series in it into `out`;
/// a bad file is counted in `summary` and gives nothing.
fn convert_file(
    engine: &Engine,
    format: ArchiveFormat,
    (root, path): (&Path, &Path),
    name: Option<&str>,
    summary: &mut ArchiveSummary,
    out: &mut Vec<(CellAt, Bucket)>,
) -> Result<()> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            summary.skip("unreadable", path, e);
            return Ok(());
        }
    };
    let len = bytes.len() as u64;
    let now = engine.now();
    let mut series_read = 0;
    match format {
        ArchiveFormat::Whisper => {
            let file = match whisper::WhisperFile::parse(bytes) {
                Ok(file) => file,
                Err(e) => {
                    summary.skip(e.as_str(), path, e);
                    return Ok(());
                }
            };
            let series = name.map_or_else(|| whisper_name(root, path), str::to_owned);
            let Some(id) = series_id(engine, &series, None, path, summary)? else {
                return Ok(());
            };
            let read = file.archives(now);
            summary.points += read.points;
            summary.not_finite += read.not_finite;
            summary.widen(read.span);
            // Finer points first: whisper's propagation redone from the finest archive.
            let levels = archive::propagate(read.archives, &file.fold());
            cells_of(engine, id, &levels, &file.fold(), now, summary, out);
            series_read += 1;
        }
        ArchiveFormat::Rrd => {
            let file = match rrd::RrdFile::parse(&bytes) {
                Ok(file) => file,
                Err(e) => {
                    summary.skip(e.as_str(), path, e);
                    return Ok(());
                }
            };
            let stem = match name {
                Some(name) => name.to_owned(),
                None => path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            };
            for (ds, source) in file.data_sources.iter().enumerate() {
                let series = format!("{stem}.{}", source.name);
                let kind = match source.kind {
                    rrd::DsType::Gauge => SeriesKind::Gauge,
                    rrd::DsType::Rate => SeriesKind::Counter,
                };
                let Some(id) = series_id(engine, &series, Some(kind), path, summary)? else {
                    continue;
                };
                let read = file.archives(ds);
                summary.points += read.points;
                summary.widen(read.span);
                for unused in &read.unused_archives {
                    summary.unused_archives.push(format!(
                        "{}: {}: {unused}",
                        path.display(),
                        source.name
                    ));
                }
                cells_of(engine, id, &read.archives, &rrd::RrdFold, now, summary, out);
                series_read += 1;
            }
        }
    }
    summary.files += 1;
    summary.bytes += len;
    summary.series += series_read;
    Ok(())
}

/// The id of `series`, its kind declared when given; `None` (and a skip counted) when the
/// name is refused or the series is already of the other kind.
fn series_id(
    engine: &Engine,
    series: &str,
    kind: Option<SeriesKind>,
    path: &Path,
    summary: &mut ArchiveSummary,
) -> Result<Option<SeriesId>> {
    let id = match engine.series(series) {
        Ok(id) => id,
        Err(e @ Error::InvalidSeries { .. }) => {
            summary.skip("invalid_series", path, e);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if let Some(kind) = kind {
        if engine.series_kind(id) != kind {
            if let Err(e) = engine.declare_kind(id, kind) {
                summary.skip("kind_mismatch", path, format!("{series}: {e}"));
                return Ok(None);
            }
        }
    }
    Ok(Some(id))
}

/// Every tier's buckets of series `id` from its archives, as cells appended to `cells`.
fn cells_of(
    engine: &Engine,
    id: SeriesId,
    archives: &[StepArchive],
    fold: &impl Fold,
    now: Timestamp,
    summary: &mut ArchiveSummary,
    cells: &mut Vec<(CellAt, Bucket)>,
) {
    let config = engine.config();
    let slots = config.engine.series_per_chunk;
    let home = engine.reader().registry().placement(id);
    let (chunk, slot) = home.chunk_and_slot(slots);
    for (tier, spec) in config.indexed_set_tiers(home.set()) {
        let resolution = spec.resolution.secs() as i64;
        let fill = fill_tier(resolution, (spec.window_start(now), now), archives, fold);
        summary.before_window += fill.before_window;
        summary.after_now += fill.after_now;
        summary.below_xff += fill.folded_away;
        cells.extend(fill.buckets.into_iter().map(|(ts, bucket)| {
            let at = place(tier, spec, ts);
            (
                CellAt {
                    tier,
                    period_start: at.period_start,
                    chunk,
                    bucket: at.bucket,
                    slot,
                },
                bucket,
            )
        }));
    }
}

/// `tierdb import --format whisper|rrd PATH...`: lists the files, imports them with a
/// progress bar over files and bytes on a terminal, closes the engine (the buckets are
/// durable when the command returns) and prints the summary. Fails when files were given
/// and none could be imported.
pub(super) fn run(
    format: ArchiveFormat,
    paths: &[String],
    name: Option<&str>,
    location: &super::Location,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    use std::io::IsTerminal;
    if paths.iter().any(|p| p == "-") {
        return Err(format!("{format:?} files cannot be read from stdin: name them").into());
    }
    if name.is_some() && (paths.len() != 1 || Path::new(&paths[0]).is_dir()) {
        return Err("--name names the series of one file, not of several or a directory".into());
    }
    let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
    let files = list_files(format, &paths)?;
    let engine = match super::engine_builder(&location.data_dir, location.tiers.as_deref())?.open()
    {
        Err(Error::Locked { holder, .. }) => {
            return Err(format!(
                "{} is held by a running tierdb ({holder}); stop it for the import, or import \
                 into another data directory",
                location.data_dir.display()
            )
            .into())
        }
        other => other?,
    };
    let total_bytes: u64 = files.iter().map(|f| f.2).sum();
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(total_bytes)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {bytes}/{total_bytes} {elapsed_precise} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let total_files = files.len();
    let mut summary = import_archives(&engine, format, &files, name, |done, bytes| {
        bar.set_position(bytes);
        bar.set_message(format!("{done}/{total_files} files"));
    })?;
    bar.finish_and_clear();
    let closing = Instant::now();
    engine.close()?;
    summary.elapsed += closing.elapsed();
    super::print(&summary.render())?;
    if summary.files == 0 && summary.skipped_files() > 0 {
        return Err(format!("none of the {total_files} files was imported").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{list_files, whisper_name, ArchiveFormat};

    #[test]
    fn a_whisper_series_is_named_by_its_path_below_the_root_as_carbon_names_it() {
        let root = Path::new("/var/lib/graphite/whisper");
        let path = root.join("servers/web-1/cpu/user.wsp");
        assert_eq!(whisper_name(root, &path), "servers.web-1.cpu.user");
        // A file given alone is named below its directory.
        assert_eq!(
            whisper_name(&root.join("servers"), &root.join("servers/load.wsp")),
            "load"
        );
    }

    #[test]
    fn a_tree_is_walked_for_whisper_files_in_order_and_rrd_directories_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for file in ["b/z.wsp", "a/y.wsp", "a/c/x.wsp", "a/notes.txt"] {
            let path = tmp.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"").unwrap();
        }
        let files = list_files(ArchiveFormat::Whisper, &[tmp.path().to_path_buf()]).unwrap();
        let names: Vec<String> = (files.iter())
            .map(|(root, path, _)| whisper_name(root, path))
            .collect();
        assert_eq!(names, ["a.c.x", "a.y", "b.z"]);
        let refusal = list_files(ArchiveFormat::Rrd, &[tmp.path().to_path_buf()]).unwrap_err();
        assert!(refusal.to_string().contains("is a directory"), "{refusal}");
        let missing = PathBuf::from("/nonexistent/tree");
        assert!(list_files(ArchiveFormat::Whisper, &[missing]).is_err());
    }
}
