//! The rolling window (seed 001: "collections are created to represent future ranges of
//! time ... dropped as data ages out"): a pass that creates the current and `create_ahead`
//! future periods of every tier for every chunk of series, drops the periods that left the
//! retention window, and prefaults the bucket blocks the writers are about to touch. It runs
//! at open and then on a background thread on a schedule derived from the tiers.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{RecvTimeoutError, Sender};

use super::Shared;
use crate::config::TiersConfig;
use crate::error::Error;
use crate::error::Result;
use crate::storage::format::BUCKET_BLOCK;
use crate::storage::Creation;
use crate::time::{align_down, place, Timestamp};

/// What one maintenance pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MaintenanceReport {
    /// The clock's reading the pass worked from.
    pub now: Timestamp,
    /// Files created ahead of need.
    pub created: usize,
    /// Files dropped because their period left the retention window.
    pub dropped: usize,
    /// Files of future periods not created yet because creation is paced; later passes
    /// create them (see `AHEAD_FILES_PER_PASS`).
    pub pending: usize,
    /// Hot files of closed periods replaced by their compacted form.
    pub compacted: usize,
    /// Hot files of closed periods left for a later pass: written since the previous pass
    /// looked (an import of history, a backfill), or past the pass's time budget. The
    /// background thread then runs its next pass after [`SETTLE_RECHECK`] rather than a
    /// whole interval, so history takes its compact form seconds after the writes stop.
    pub unsettled: usize,
}

/// How maintenance has been going: passes that failed since open, and the last failure while
/// it lasts (a pass that succeeds clears it). A failed pass never stops the engine: reads go
/// on, writes that need a missing file are refused as `storage_unavailable`, and the next
/// pass tries again.
#[derive(Default)]
pub(crate) struct MaintenanceHealth {
    failures: std::sync::atomic::AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
}

impl MaintenanceHealth {
    fn record(&self, outcome: &Result<MaintenanceReport>) {
        let mut last = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(_) => *last = None,
            Err(e) => {
                self.failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                *last = Some(e.to_string());
            }
        }
    }

    /// Failed passes since open.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last pass's error, when the last pass failed.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Shared {
    /// One maintenance pass at the clock's current time, its outcome recorded in
    /// [`MaintenanceHealth`].
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be created or unlinked; the rest of the pass still
    /// runs, and the first error is returned.
    pub(crate) fn maintain(&self) -> Result<MaintenanceReport> {
        self.maintain_with(Prefault::Yes)
    }

    /// [`Shared::maintain`], prefaulting or not: the pass at open leaves the prefault to the
    /// background thread's first pass, which runs at once, so that a restart does not wait
    /// on faulting in the current block of every file (a gigabyte at a million series).
    pub(crate) fn maintain_with(&self, prefault: Prefault) -> Result<MaintenanceReport> {
        let _one_at_a_time = self.pass_lock.lock().unwrap_or_else(|e| e.into_inner());
        let outcome = self.maintenance_pass(prefault);
        self.maintenance.record(&outcome);
        outcome
    }

    fn maintenance_pass(&self, prefault: Prefault) -> Result<MaintenanceReport> {
        let now = self.clock.now();
        let mut report = MaintenanceReport {
            now,
            ..MaintenanceReport::default()
        };
        // Most urgent first: the pages writers touch next, then files for later periods.
        if prefault == Prefault::Yes {
            self.prefault_next_blocks(now);
        }
        let mut first_error: Option<Error> = None;
        if self.stopping() {
            return Ok(report);
        }
        match self.prepare_ahead_at(now, Horizon::Due) {
            Ok((created, pending)) => {
                report.created = created;
                report.pending = pending;
            }
            Err(e) => first_error = Some(e),
        }
        for (t, (_, spec)) in self.config.all_tiers().enumerate() {
            match self.storage.drop_before(t, spec.window_start(now)) {
                Ok(n) => report.dropped += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(raw) = &self.raw {
            let spec = raw.spec();
            let period = spec.period.secs() as i64;
            let due = |start| ahead_due(start, now, period, spec.create_ahead);
            match raw.prepare_ahead(now, &due, AHEAD_FILES_PER_PASS) {
                Ok(n) => report.created += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            match raw.drop_before(spec.window_start(now)) {
                Ok(n) => report.dropped += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if self.stopping() {
            return first_error.map_or(Ok(report), Err);
        }
        match self.compact_closed(now) {
            Ok((n, unsettled)) => {
                report.compacted = n;
                report.unsettled = unsettled;
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        if report.created + report.dropped + report.compacted > 0 {
            tracing::info!(
                created = report.created,
                dropped = report.dropped,
                compacted = report.compacted,
                "maintenance"
            );
        }
        first_error.map_or(Ok(report), Err)
    }

    /// Prefaults the bucket blocks writers are about to touch, so their first stores do not
    /// take page faults: in every tier, the block being written at `now`, and a share of the
    /// next block (which may lie in the next period's files) that grows with the progress
    /// through the second half of the current one, complete by three quarters. Only the
    /// pages of slots written in the current block are touched (and, in the next block,
    /// reserved first): the pages of series that send nothing stay holes. Spreading the next block out matters: for 100k
    /// series it is ~100 MB of pages per tier to zero, and all tiers' blocks start together
    /// at a period boundary. Progress is remembered per block, so pages are walked once
    /// (chunk files added later are picked up). A page that cannot get its space (a full
    /// disk) is left to the batch that first writes it, which refuses its samples.
    fn prefault_next_blocks(&self, now: Timestamp) {
        let mut done = self.prefaulted.lock().unwrap_or_else(|e| e.into_inner());
        let mut progress = Vec::with_capacity(self.config.tier_count() * 2);
        for (t, (_, spec)) in self.config.all_tiers().enumerate() {
            let block = spec.resolution.secs() as i64 * i64::from(BUCKET_BLOCK);
            let current = place(t, spec, now);
            let block_start = align_down(now, spec.resolution)
                - (current.bucket % BUCKET_BLOCK) as i64 * spec.resolution.secs() as i64;
            // Share of the next block to have prefaulted by now: none in the first half of
            // the current block (its pages would take disk a whole block early, 16 days in
            // a 1d tier), then four times the share gone by past the middle, plus an eighth,
            // so it starts in the pass before the middle and is complete by three quarters.
            let gone = (now - block_start) as f64 / block as f64;
            let share = (4.0 * (gone - 0.5) + 0.125).clamp(0.0, 1.0);
            let written_now = self.storage.period_files(t, current.period_start);
            for (ts, share) in [(now, 1.0), (block_start + block, share)] {
                let p = place(t, spec, ts);
                let key = (t, p.period_start, p.bucket / BUCKET_BLOCK);
                let from = done.get(&key).copied().unwrap_or(0);
                let files = match p.period_start == current.period_start {
                    true => written_now.clone(),
                    false => self.storage.period_files(t, p.period_start),
                };
                let to = ((files.len() as f64 * share).ceil() as usize).clamp(from, files.len());
                for file in &files[from..to] {
                    if self.stopping() {
                        return;
                    }
                    let chunk = file.meta().chunk;
                    // `period_files` lists a period's files in chunk order.
                    let Ok(like) = written_now.binary_search_by_key(&chunk, |f| f.meta().chunk)
                    else {
                        continue;
                    };
                    let like = &written_now[like];
                    if let Err(e) = file.prefault_block(p.bucket, like, current.bucket) {
                        tracing::debug!(error = %e, "reserving the next block's pages ahead failed");
                    }
                }
                progress.push((key, to));
            }
        }
        done.clear();
        done.extend(progress);
    }

    /// Creates, for every tier, the period holding `now` and `create_ahead` periods after it,
    /// for every chunk of series needed, nearest periods first; existing files are left alone.
    ///
    /// Files of the current period, and of a future period that starts within a quarter
    /// period, are created at once. A future period further away is created once it is due
    /// (see [`ahead_due`]), paced at [`AHEAD_FILES_PER_PASS`] per call (a maintenance pass, a
    /// chunk creator's pass): a new period for 100k series is 1,564 files, and creating them
    /// in one burst would steal the cores ingest runs on, while there is half a period to
    /// spread them over. Not creating them sooner is what keeps a series' preallocated files
    /// to about one period set most of the time: the next period's files exist only in the
    /// second half of the current one, so at a boundary the just-closed period (until it is
    /// compacted) and the new current one are all that is hot. The files of one (tier,
    /// period) are created as a group ([`crate::storage::create`]). Returns (created, still
    /// to create).
    ///
    /// # Errors
    /// The first file that could not be created; the rest of its group is still created.
    pub(crate) fn prepare_ahead_at(
        &self,
        now: Timestamp,
        horizon: Horizon,
    ) -> Result<(usize, usize)> {
        let chunks: Vec<u32> = (0..self.config.set_count())
            .map(|set| self.chunks_needed(set))
            .collect();
        let (mut created, mut pending) = (0, 0);
        let mut budget = AHEAD_FILES_PER_PASS;
        // Every tier's current period first: those are the files a batch waits for.
        let furthest = self.config.all_tiers().map(|(_, t)| t.create_ahead).max();
        for ahead in 0..=i64::from(furthest.unwrap_or(0)) {
            for (t, (set, spec)) in self.config.all_tiers().enumerate() {
                if ahead > i64::from(spec.create_ahead) {
                    continue;
                }
                // Stepped file by file: the period may change at a boundary ahead.
                let start = (0..ahead).fold(spec.period_start(now), |s, _| spec.period_end(s));
                let period = spec.period_at(start).secs() as i64;
                if !ahead_due(start, now, period, spec.create_ahead)
                    || (horizon == Horizon::Soon && start > now + SOON)
                {
                    continue;
                }
                // Closing: what is not created now, a batch or the next open creates.
                if self.stopping() {
                    return Ok((created, pending));
                }
                let urgent = start - now < period / 4;
                let mut missing: Vec<u32> = (0..chunks[set])
                    .filter(|&chunk| self.storage.file(t, start, chunk).is_none())
                    .collect();
                if !urgent {
                    let paced = missing.len().min(budget);
                    pending += missing.len() - paced;
                    missing.truncate(paced);
                    budget -= paced;
                }
                let group = self
                    .storage
                    .create_files(t, start, &missing, Creation::Ahead);
                created += group.created;
                if let Some((_, e)) = group.failed.into_iter().next() {
                    return Err(e);
                }
            }
        }
        for (ready, chunks) in self.chunks_ready.iter().zip(chunks) {
            ready.fetch_max(chunks, std::sync::atomic::Ordering::AcqRel);
        }
        Ok((created, pending))
    }
}

impl Shared {
    /// Compacts the hot files of periods that ended at least [`COMPACT_GRACE`] ago and had
    /// no write since the previous pass looked, oldest first, until [`COMPACT_BUDGET`] is
    /// spent (the next pass goes on). Returns how many were compacted, and how many closed
    /// periods are left hot for a later pass (written since the last look, or past the
    /// budget).
    ///
    /// # Errors
    /// The first file that could not be compacted; the others are still tried.
    fn compact_closed(&self, now: Timestamp) -> Result<(usize, usize)> {
        let started = std::time::Instant::now();
        // The ids in a compacted file must be durable first: the repair after power loss
        // clears the slots of ids the registry lost, but only in hot files.
        let mut synced = false;
        let (mut compacted, mut unsettled) = (0, 0);
        let mut first_error = None;
        for tier in 0..self.config.tier_count() {
            let (quiet, written) = self
                .storage
                .quiet_closed_files(tier, now.saturating_sub(COMPACT_GRACE));
            unsettled += written;
            for (at, file) in quiet.iter().enumerate() {
                if started.elapsed() >= COMPACT_BUDGET || self.stopping() {
                    unsettled += quiet.len() - at;
                    return first_error.map_or(Ok((compacted, unsettled)), Err);
                }
                if !synced {
                    self.registry.sync()?;
                    synced = true;
                }
                match self.storage.compact(tier, file) {
                    Ok(true) => compacted += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "could not compact a closed period; it stays hot");
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        first_error.map_or(Ok((compacted, unsettled)), Err)
    }
}

/// How long after its end a period is first considered for compaction: late samples for
/// its last buckets (an agent's flush delay, a queue draining) still find the hot file.
/// A sample later than that still lands: its period is made hot again.
pub(crate) const COMPACT_GRACE: i64 = 600;

/// The wait before the next background pass while closed periods are still being written
/// (see [`MaintenanceReport::unsettled`]): a pass compacts a closed period once a whole
/// pass went by without writes, so history written at once (an import, a backfill over
/// Graphite) is compacted within two of these after the writes stop, not two intervals.
pub(crate) const SETTLE_RECHECK: Duration = Duration::from_secs(10);

/// Time one pass spends compacting at most; the rest waits for the next pass, so the
/// prefaulting and creation that the pass also does stay on time.
pub(crate) const COMPACT_BUDGET: Duration = Duration::from_secs(10);

/// Which periods a creation pass creates files for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Horizon {
    /// Every period that is due (see [`ahead_due`]): a maintenance pass.
    Due,
    /// Only those that start within [`SOON`]: the chunk creator's pass for new series, so a
    /// burst of new series (an import) waits on the files it writes into now, not on next
    /// periods', which the next maintenance pass creates, paced.
    Soon,
}

/// How far ahead the chunk creator creates files: past the next maintenance pass (at most a
/// minute away), so a new chunk's next period exists before it starts.
const SOON: i64 = 120;

/// Whether a maintenance pass prefaults the blocks the writers touch next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prefault {
    /// The usual pass.
    Yes,
    /// The pass at open when a background thread follows at once.
    Later,
}

/// Whether the files of the future period starting at `start` are due at `now`: from
/// `create_ahead - 1/2` periods before it starts, so with `create_ahead = 1` the next period's
/// files come in the second half of the current one (and all at once in its last quarter).
/// The current period is always due.
pub(crate) fn ahead_due(start: Timestamp, now: Timestamp, period: i64, create_ahead: u32) -> bool {
    start <= now || start - now < i64::from(create_ahead) * period - period / 2
}

/// Files of future periods created per maintenance pass when they are not yet urgent.
pub(crate) const AHEAD_FILES_PER_PASS: usize = 16;

/// How often the background pass runs: a quarter of the shortest bucket block (so the next
/// block is prefaulted well before writers reach it), between one second and one minute.
/// Period files are created a whole period ahead, so that is never the constraint.
pub(crate) fn maintenance_interval(config: &TiersConfig) -> Duration {
    let shortest_block = config
        .tiers
        .iter()
        .map(|t| t.resolution.secs() * u64::from(BUCKET_BLOCK))
        .min()
        .unwrap_or(60);
    Duration::from_secs((shortest_block / 4).clamp(1, 60))
}

/// The background maintenance thread; stops (and is joined) when dropped.
pub(crate) struct MaintenanceThread {
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl MaintenanceThread {
    /// Starts the thread; its first pass runs at once (the open's pass left the prefault to
    /// it), the next ones every `interval`.
    pub(crate) fn start(shared: &Arc<Shared>, interval: Duration) -> Result<MaintenanceThread> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
        let shared_for_thread = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name("tierdb-maintenance".into())
            .spawn(move || {
                lower_priority();
                // The open's pass did not prefault; this one does, at once.
                let mut wait = Duration::ZERO;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                    wait = match shared_for_thread.maintain() {
                        Ok(report) if report.unsettled > 0 => SETTLE_RECHECK.min(interval),
                        Ok(_) => interval,
                        Err(e) => {
                            tracing::warn!(error = %e, "maintenance pass failed; retrying next interval");
                            interval
                        }
                    };
                }
            })
            .map_err(|e| Error::io(&shared.dir, e))?;
        Ok(MaintenanceThread {
            stop: Some(stop),
            handle: Some(handle),
        })
    }
}

/// Maintenance is background work: at the lowest CPU priority (nice 19) it runs in the gaps
/// ingest leaves rather than preempting writer threads. Best effort.
fn lower_priority() {
    let me = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(me), 19) {
        tracing::debug!(error = %e, "could not lower the maintenance thread's priority");
    }
}

impl Drop for MaintenanceThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
