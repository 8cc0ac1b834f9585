//! The rolling window (seed 001: "collections are created to represent future ranges of
//! time ... dropped as data ages out"): a pass that creates the current and `create_ahead`
//! future periods of every tier for every chunk of series, drops the periods that left the
//! retention window, and prefaults the bucket blocks the writers are about to touch. It runs
//! at open and then on a background thread on a schedule derived from the tiers.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{RecvTimeoutError, Sender};

use super::{window_start, Shared};
use crate::config::TiersConfig;
use crate::storage::format::BUCKET_BLOCK;
use crate::storage::Creation;
use crate::time::{align_down, place, Timestamp};
use crate::{Error, Result};

/// What one maintenance pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MaintenanceReport {
    /// The clock's reading the pass worked from.
    pub now: Timestamp,
    /// Files created ahead of need.
    pub created: usize,
    /// Files dropped because their period left the retention window.
    pub dropped: usize,
}

impl Shared {
    /// One maintenance pass at the clock's current time.
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be created or unlinked; the rest of the pass still
    /// runs, and the first error is returned.
    pub(crate) fn maintain(&self) -> Result<MaintenanceReport> {
        let now = self.clock.now();
        let mut report = MaintenanceReport {
            now,
            ..MaintenanceReport::default()
        };
        // Most urgent first: the pages writers touch next, then files for later periods.
        self.prefault_next_blocks(now);
        let mut first_error: Option<Error> = None;
        match self.prepare_ahead_at(now) {
            Ok(created) => report.created = created,
            Err(e) => first_error = Some(e),
        }
        for (t, spec) in self.config.tiers.iter().enumerate() {
            match self
                .storage
                .drop_before(t, window_start(now, spec.retention, spec.period))
            {
                Ok(n) => report.dropped += n,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if report.created + report.dropped > 0 {
            tracing::info!(
                created = report.created,
                dropped = report.dropped,
                "maintenance"
            );
        }
        first_error.map_or(Ok(report), Err)
    }

    /// Prefaults, in every tier, the block of buckets being written at `now` and the next
    /// one (which may lie in the next period's files), so writers do not take page faults.
    fn prefault_next_blocks(&self, now: Timestamp) {
        for (t, spec) in self.config.tiers.iter().enumerate() {
            let block = spec.resolution.secs() as i64 * i64::from(BUCKET_BLOCK);
            for ts in [now, align_down(now, spec.resolution) + block] {
                let p = place(t, spec, ts);
                self.storage.prefault(t, p.period_start, p.bucket);
            }
        }
    }

    /// Creates, for every tier, the period holding `now` and `create_ahead` periods after it,
    /// for every chunk of series needed; existing files are left alone. Returns how many files
    /// it created.
    pub(crate) fn prepare_ahead_at(&self, now: Timestamp) -> Result<usize> {
        let chunks = self.chunks_needed();
        let mut created = 0;
        for (t, spec) in self.config.tiers.iter().enumerate() {
            let current = align_down(now, spec.period);
            for ahead in 0..=i64::from(spec.create_ahead) {
                let start = current + ahead * spec.period.secs() as i64;
                for chunk in 0..chunks {
                    if self
                        .storage
                        .get_or_create(t, start, chunk, Creation::Ahead)?
                        .1
                    {
                        created += 1;
                    }
                }
            }
        }
        self.chunks_ready
            .fetch_max(chunks, std::sync::atomic::Ordering::AcqRel);
        Ok(created)
    }
}

/// How often the background pass runs: a quarter of the shortest bucket block (so the next
/// block is prefaulted well before writers reach it), between one second and one minute.
/// Period files are created a whole period ahead, so that is never the constraint.
pub fn maintenance_interval(config: &TiersConfig) -> Duration {
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
    /// Starts the thread; the first pass runs one interval from now (open ran one already).
    pub(crate) fn start(shared: &Arc<Shared>, interval: Duration) -> Result<MaintenanceThread> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
        let shared_for_thread = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name("tierdb-maintenance".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    if let Err(e) = shared_for_thread.maintain() {
                        tracing::warn!(error = %e, "maintenance pass failed; retrying next interval");
                    }
                }
            })
            .map_err(|e| Error::io(&shared.dir, e))?;
        Ok(MaintenanceThread {
            stop: Some(stop),
            handle: Some(handle),
        })
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
