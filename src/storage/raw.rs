//! The raw tier's storage (seed 002, Actoboard): each series' exact points, appended in time
//! order into 4 KiB segments ([`segment`]) claimed from whole-period files that are created
//! ahead, preallocated, and dropped whole on expiry, like the rollup tiers' period files.
//!
//! The files live in `<data>/raw/<tier name>/`. Each period has one or more files of
//! [`SEGMENTS_PER_FILE`] segments, numbered from 0; segments are claimed in order across
//! them. A series' segments form a chain: each records the end of the one before
//! (`PREV_END`) and the start of the one after (`NEXT_START`). The open reads every
//! segment's header once and builds the chains in memory ([`RawStore`]'s index), so a read
//! goes straight to the segment holding `from` and finds the neighbours outside the range
//! without a scan.

pub(crate) mod segment;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::{disk, Creation, TierFiles};
use crate::config::RawTierSpec;
use crate::error::Error;
use crate::error::Result;
use crate::time::{align_down, Timestamp};
pub use segment::SEGMENT_POINTS;
pub(crate) use segment::{RawFile, Segment, FILE_LEN, SEGMENTS_PER_FILE};

/// A raw point: unix seconds and the exact value.
pub(crate) type RawPoint = (Timestamp, f64);

/// Where one segment of a series is, and the time of its first point.
#[derive(Clone)]
pub(crate) struct SegmentRef {
    /// Its file (kept mapped while referenced, even once dropped).
    pub file: Arc<RawFile>,
    /// Its index in the file.
    pub index: u32,
    /// Time of its first point.
    pub first: Timestamp,
}

impl SegmentRef {
    /// The segment's words.
    #[inline]
    pub(crate) fn segment(&self) -> Segment<'_> {
        self.file.segment(self.index)
    }
}

/// One period's files and the next segment to claim in them.
#[derive(Default)]
struct RawPeriod {
    files: Vec<Arc<RawFile>>,
    /// Segments claimed so far (or skipped by a crash): the next claim takes this one.
    claimed: u32,
    /// Series with a segment here: claims of a series' first segment in the period. The
    /// next period needs about this many segments at its start.
    series: u32,
}

impl RawPeriod {
    fn free(&self) -> u32 {
        self.files.len() as u32 * SEGMENTS_PER_FILE - self.claimed
    }
}

/// The raw tier: its files by period, and every series' chain of segments.
pub(crate) struct RawStore {
    spec: RawTierSpec,
    dir: PathBuf,
    writable: bool,
    /// Period start -> its files; held briefly (claims, creation, drops, stats).
    periods: Mutex<BTreeMap<Timestamp, RawPeriod>>,
    /// Per series id, its non-empty segments in time order. Written when a segment gets its
    /// first point (once per 252 points), read by queries and by a writer meeting a series
    /// for the first time.
    chains: RwLock<Vec<Vec<SegmentRef>>>,
    created_ahead: AtomicU64,
    created_on_demand: AtomicU64,
    dropped: AtomicU64,
    /// In [`RawStore::drop_before`], after the expired periods left the map and their files
    /// were unlinked, the lock let go: the test of a claim landing right after.
    #[cfg(test)]
    after_forget: super::pause::PausePoint,
}

/// What a read of one series returns: the points in `[from, to)` and the neighbours just
/// outside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawRead {
    /// The last point before `from`.
    pub before: Option<RawPoint>,
    /// The points in `[from, to)`, in time order.
    pub points: Vec<RawPoint>,
    /// The first point at or after `to`.
    pub after: Option<RawPoint>,
}

impl RawStore {
    /// Opens (creating when writable) `<data>/raw/<name>/`, maps every file and builds the
    /// chains of series below `series` (ids the registry handed out). A writable open
    /// removes `.tmp` leftovers, links a segment whose `NEXT_START` a crash left unset, and
    /// gives up segments of ids at or past `series` (see [`Segment::disown`]).
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming a file that is not a raw file of this tier's period,
    /// or whose segment headers are impossible; [`Error::Io`].
    pub(crate) fn open(
        data: &Path,
        spec: &RawTierSpec,
        writable: bool,
        series: usize,
    ) -> Result<RawStore> {
        let dir = data.join("raw").join(&spec.name);
        if writable {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        let mut periods: BTreeMap<Timestamp, RawPeriod> = BTreeMap::new();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries.collect::<std::io::Result<Vec<_>>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
        .map_err(|e| Error::io(&dir, e))?;
        let mut paths: Vec<PathBuf> = entries.into_iter().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if disk::is_temp(name) {
                if writable {
                    tracing::warn!(path = %path.display(), "removing a raw file a crash left half-created");
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                }
                continue;
            }
            if !name.ends_with(segment::RAW_SUFFIX) {
                tracing::warn!(path = %path.display(), "ignoring a file that is not a raw file");
                continue;
            }
            let file = Arc::new(RawFile::open(&path, spec.period, writable)?);
            periods
                .entry(file.period_start())
                .or_default()
                .files
                .push(file);
        }
        let mut chains: Vec<Vec<SegmentRef>> = vec![Vec::new(); series];
        let mut disowned = 0usize;
        for (start, period) in &mut periods {
            period.files.sort_by_key(|f| f.number());
            for (i, file) in period.files.iter().enumerate() {
                if file.number() as usize != i {
                    return Err(Error::corrupt(
                        file.path(),
                        format!(
                            "raw file number {} of period {start} has no file {i} before it",
                            file.number()
                        ),
                    ));
                }
                for index in 0..SEGMENTS_PER_FILE {
                    let seg = file.segment(index);
                    if seg.owner_word() == 0 {
                        continue;
                    }
                    period.claimed = i as u32 * SEGMENTS_PER_FILE + index + 1;
                    check_segment(file, index, *start, spec)?;
                    if seg.prev_end().is_none_or(|end| end < *start) {
                        period.series += 1;
                    }
                    let Some(owner) = seg.owner().filter(|&o| (o as usize) < series) else {
                        // A series whose registration a crash lost: its id will be handed out
                        // again, to another series, which must not inherit these points.
                        if writable {
                            seg.disown();
                            disowned += 1;
                        }
                        continue;
                    };
                    if !seg.is_empty() {
                        chains[owner as usize].push(SegmentRef {
                            file: Arc::clone(file),
                            index,
                            first: seg.time(0),
                        });
                    }
                }
            }
        }
        if disowned > 0 {
            tracing::warn!(
                dir = %dir.display(),
                disowned,
                "raw segments of series the registry does not know (lost in a crash) were given up"
            );
        }
        for chain in &mut chains {
            chain.sort_by_key(|s| s.first);
            check_chain(chain, writable)?;
        }
        Ok(RawStore {
            spec: spec.clone(),
            dir,
            writable,
            periods: Mutex::new(periods),
            chains: RwLock::new(chains),
            created_ahead: AtomicU64::new(0),
            created_on_demand: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            #[cfg(test)]
            after_forget: super::pause::PausePoint::default(),
        })
    }

    /// The tier's configuration.
    pub(crate) fn spec(&self) -> &RawTierSpec {
        &self.spec
    }

    /// The directory of its files.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The series' last segment, for a writer meeting the series for the first time.
    pub(crate) fn tail(&self, series: u32) -> Option<SegmentRef> {
        let chains = self.chains.read().unwrap_or_else(|e| e.into_inner());
        chains.get(series as usize).and_then(|c| c.last().cloned())
    }

    /// Claims a fresh segment of the period holding `ts` for `series`, creating a file when
    /// every segment of the period is taken (counted as an on-demand creation).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be created (a full disk).
    pub(crate) fn claim(
        &self,
        series: u32,
        ts: Timestamp,
        prev_end: Option<Timestamp>,
    ) -> Result<(Arc<RawFile>, u32)> {
        let start = align_down(ts, self.spec.period);
        let mut periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        let period = periods.entry(start).or_default();
        if period.free() == 0 {
            self.add_file(start, period, Creation::OnDemand)?;
        }
        let n = period.claimed;
        period.claimed += 1;
        if prev_end.is_none_or(|end| end < start) {
            period.series += 1;
        }
        let file = Arc::clone(&period.files[(n / SEGMENTS_PER_FILE) as usize]);
        let index = n % SEGMENTS_PER_FILE;
        file.segment(index).claim(series, prev_end);
        Ok((file, index))
    }

    /// Adds a segment that just got its first point to `series`' chain, and links the
    /// segment before it to it.
    pub(crate) fn link(&self, series: u32, next: SegmentRef) {
        let mut chains = self.chains.write().unwrap_or_else(|e| e.into_inner());
        if chains.len() <= series as usize {
            chains.resize(series as usize + 1, Vec::new());
        }
        let chain = &mut chains[series as usize];
        if let Some(last) = chain.last() {
            last.segment().set_next_start(next.first);
        }
        chain.push(next);
    }

    fn add_file(&self, start: Timestamp, period: &mut RawPeriod, why: Creation) -> Result<()> {
        let number = period.files.len() as u32;
        let file = RawFile::create(&self.dir, self.spec.period, start, number)?;
        period.files.push(Arc::new(file));
        match why {
            Creation::Ahead => &self.created_ahead,
            Creation::OnDemand => &self.created_on_demand,
        }
        .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Keeps free segments ready at `now`: for the current period, one per series writing
    /// there (at least half a file); for each of the next `create_ahead` periods
    /// that is `due` (the rollup tiers' rule, `crate::engine`'s `ahead_due`), one segment
    /// per series writing in the current period (each claims one there), at least one file.
    /// Creates at most `max_files` in one call, as the rollups pace theirs: the files are
    /// created under the lock every segment claim takes, so a call must not hold it for
    /// hundreds of fsyncs; the next maintenance pass goes on. Returns files created.
    ///
    /// # Errors
    /// [`Error::Io`] for the first file that could not be created.
    pub(crate) fn prepare_ahead(
        &self,
        now: Timestamp,
        due: &dyn Fn(Timestamp) -> bool,
        max_files: usize,
    ) -> Result<usize> {
        if !self.writable {
            return Ok(0);
        }
        let period = self.spec.period.secs() as i64;
        let current = align_down(now, self.spec.period);
        let mut created = 0;
        let mut periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        let active = periods.get(&current).map_or(0, |p| p.series);
        for k in 0..=i64::from(self.spec.create_ahead) {
            let start = current.saturating_add(k * period);
            if !due(start) {
                continue;
            }
            // The current period keeps a segment free per series writing there (at least
            // half a file): series that started the period together fill their segments in
            // step, so they claim new ones in a burst every 252 points.
            let want = if k == 0 {
                (SEGMENTS_PER_FILE / 2).max(active)
            } else {
                active.max(1)
            };
            let entry = periods.entry(start).or_default();
            while entry.free() < want && created < max_files {
                self.add_file(start, entry, Creation::Ahead)?;
                created += 1;
            }
        }
        Ok(created)
    }

    /// Drops every file whose period starts before `window_start`, and the chains' segments
    /// in them. A read or writer holding a segment keeps its mapping until it lets go.
    /// Returns the files dropped.
    ///
    /// # Errors
    /// [`Error::Io`] naming a file that could not be unlinked (forgotten all the same).
    pub(crate) fn drop_before(&self, window_start: Timestamp) -> Result<usize> {
        let mut first_error = None;
        let mut n = 0;
        let expired: Vec<RawPeriod> = {
            let mut periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
            let keep = periods.split_off(&window_start);
            let expired: Vec<RawPeriod> = std::mem::replace(&mut *periods, keep)
                .into_values()
                .collect();
            // Unlinked under the lock every claim takes: after it, a late claim (a batch
            // whose windows were taken before this pass's clock) makes the period's files
            // anew from number 0, which an unlink after the lock would take. A period's
            // files last number first: a crash part way leaves numbers 0..k, which an open
            // accepts, rather than a gap, which it refuses.
            for file in expired.iter().flat_map(|p| p.files.iter().rev()) {
                n += 1;
                if self.writable {
                    if let Err(e) = std::fs::remove_file(file.path()) {
                        first_error.get_or_insert(Error::io(file.path(), e));
                    }
                }
            }
            expired
        };
        if expired.is_empty() {
            return Ok(0);
        }
        {
            let mut chains = self.chains.write().unwrap_or_else(|e| e.into_inner());
            for chain in chains.iter_mut() {
                let gone = chain.partition_point(|s| s.file.period_start() < window_start);
                chain.drain(..gone);
            }
        }
        #[cfg(test)]
        self.after_forget.pass();
        self.dropped.fetch_add(n as u64, Ordering::Relaxed);
        if self.writable {
            disk::sync_dir(&self.dir)?;
        }
        first_error.map_or(Ok(n), Err)
    }

    /// The points of `series` in `[from, to)`, with the last point before `from` and the
    /// first at or after `to`. Starts at the last segment whose first point is before `from`
    /// (a binary search of the chain, then of that segment), and stops at the first point at
    /// or after `to`, going on to the chain's next segment when a segment runs out. Stops
    /// early, with `limit + 1` points and no `after`, when the range holds more than `limit`:
    /// the copy and the time the chains' lock is held, which writers need to link a new
    /// segment, stay bounded whatever the range.
    pub(crate) fn read(
        &self,
        series: u32,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> RawRead {
        let mut out = RawRead::default();
        let chains = self.chains.read().unwrap_or_else(|e| e.into_inner());
        let Some(chain) = chains.get(series as usize) else {
            return out;
        };
        let first = chain.partition_point(|s| s.first < from).saturating_sub(1);
        for (k, seg_ref) in chain.iter().enumerate().skip(first) {
            let seg = seg_ref.segment();
            let len = seg.len();
            let mut i = if k == first {
                seg.first_at_or_after(from, len)
            } else {
                0
            };
            if k == first && i > 0 {
                out.before = Some(seg.point(i - 1));
            }
            while i < len {
                let point = seg.point(i);
                if point.0 >= to {
                    out.after = Some(point);
                    return out;
                }
                out.points.push(point);
                if out.points.len() > limit {
                    return out;
                }
                i += 1;
            }
        }
        out
    }

    /// The time of the series' last raw point; `None` when it has none. What a cluster
    /// partition's undo record keeps of the raw tier ([`RawStore::truncate_after`]).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn last_time(&self, series: u32) -> Option<Timestamp> {
        let tail = self.tail(series)?;
        let seg = tail.segment();
        let len = seg.len();
        (len > 0).then(|| seg.time(len - 1))
    }

    /// Takes the series' points after `last` away (all of them for `None`): segments that
    /// start after it are given up, the one holding it is cut back to it. Appends are in
    /// time order and a group appends only after the series' last point, so this undoes
    /// exactly what a group of a cluster partition appended after its undo record kept
    /// `last` (see `src/cluster/apply.rs`). Before any writer starts (the writers keep the
    /// tail they met); the caller flushes. Returns the points taken away.
    pub(crate) fn truncate_after(&self, series: u32, last: Option<Timestamp>) -> usize {
        let mut chains = self.chains.write().unwrap_or_else(|e| e.into_inner());
        let Some(chain) = chains.get_mut(series as usize) else {
            return 0;
        };
        let mut removed = 0;
        while let Some(seg_ref) = chain.last() {
            if last.is_some_and(|last| seg_ref.first <= last) {
                break;
            }
            let seg = seg_ref.segment();
            removed += seg.len();
            seg.disown();
            chain.pop();
        }
        if let (Some(seg_ref), Some(last)) = (chain.last(), last) {
            let seg = seg_ref.segment();
            let len = seg.len();
            let keep = seg.first_at_or_after(last.saturating_add(1), len);
            removed += len - keep;
            seg.truncate(keep);
        }
        removed
    }

    /// msync of every file held (an msync of pages that did not change since the last one
    /// writes nothing).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn flush(&self) -> Result<()> {
        let files: Vec<Arc<RawFile>> = {
            let periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
            periods
                .values()
                .flat_map(|p| p.files.iter().cloned())
                .collect()
        };
        for file in files {
            file.flush().map_err(|e| Error::io(file.path(), e))?;
        }
        Ok(())
    }

    /// What the tier holds on disk, in the form every tier reports.
    pub(crate) fn files(&self, now: Timestamp) -> TierFiles {
        let periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        let current = align_down(now, self.spec.period);
        let files: usize = periods.values().map(|p| p.files.len()).sum();
        TierFiles {
            files,
            bytes: files as u64 * FILE_LEN,
            oldest_period: periods.keys().next().copied(),
            newest_period: periods.keys().next_back().copied(),
            periods_ahead: periods.range(current + 1..).count(),
            created_ahead: self.created_ahead.load(Ordering::Relaxed),
            on_demand_creations: self.created_on_demand.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            ..TierFiles::default()
        }
    }

    /// Segments claimed in the periods held (a crash may have claimed some without using
    /// them): for tests.
    #[cfg(test)]
    pub(crate) fn segments_in_use(&self) -> usize {
        let periods = self.periods.lock().unwrap_or_else(|e| e.into_inner());
        periods.values().map(|p| p.claimed as usize).sum()
    }
}

/// Refuses a segment whose header no writer could have left: a length past the segment,
/// a `PREV_END` after its first point, times out of order or outside the period.
fn check_segment(file: &RawFile, index: u32, start: Timestamp, spec: &RawTierSpec) -> Result<()> {
    let seg = file.segment(index);
    let bad = |why: String| Error::corrupt(file.path(), format!("segment {index}: {why}"));
    let len = seg.len_word();
    if len > SEGMENT_POINTS as u64 {
        return Err(bad(format!(
            "{len} points, a segment holds {SEGMENT_POINTS}"
        )));
    }
    if seg.owner_word() > u64::from(u32::MAX) + 1 {
        return Err(bad("owner is not a series id".to_string()));
    }
    let end = start.saturating_add(spec.period.secs() as i64);
    let mut last = seg.prev_end().unwrap_or(i64::MIN);
    for i in 0..len as usize {
        let t = seg.time(i);
        if t <= last || t < start || t >= end {
            return Err(bad(format!(
                "point {i} at {t} is not after the one before ({last}) within its period"
            )));
        }
        last = t;
    }
    Ok(())
}

/// Checks a series' segments against their links: each `PREV_END` is the last time of the
/// segment before, or later. Later is what a power loss between two flushes can leave: the
/// page with the next segment's first point written back, the previous segment's last
/// points not; those points were not flushed, and are gone. A `NEXT_START` still unset with a
/// segment after it is what a crash between a segment's first point and its link leaves; a
/// writable open sets it.
fn check_chain(chain: &[SegmentRef], writable: bool) -> Result<()> {
    for pair in chain.windows(2) {
        let (a, b) = (pair[0].segment(), pair[1].segment());
        let last = a.time(a.len() - 1);
        if b.prev_end().is_some_and(|end| end > last) {
            tracing::warn!(
                file = %pair[0].file.path().display(),
                segment = pair[0].index,
                last,
                prev_end = ?b.prev_end(),
                "a raw segment lost its last points (written after the last flush, before a power loss)"
            );
        } else if b.prev_end() != Some(last) {
            return Err(Error::corrupt(
                pair[1].file.path(),
                format!(
                    "segment {}: PREV_END {:?} is not the previous segment's last time {last}",
                    pair[1].index,
                    b.prev_end()
                ),
            ));
        }
        if a.next_start().is_none() && writable {
            a.set_next_start(pair[1].first);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
