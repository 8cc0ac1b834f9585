//! Retyping series: a gauge made a counter, or a counter a gauge, its stored buckets
//! converted where that is exact (`tierdb retype`). What is exact is
//! [`plan`](self::plan)'s; this module reads the buckets, writes the new ones and records
//! the new kind, durably and crash-safely:
//!
//! 1. every series is planned (its buckets from each tier's window start on are read and
//!    converted, or it is refused whole);
//! 2. the new buckets and kinds of the series converted are appended to the engine journal
//!    (`engine.journal`, [`super::intent`]) and fsynced: the commit;
//! 3. the cells are overwritten tier by tier, then each series' kind is recorded as
//!    declared (`counters.state`; a counter's last sample is the series' latest);
//! 4. everything is flushed, then the journal is emptied.
//!
//! An open that finds the retype's record in the journal does steps 3 and 4 again (they set
//! absolute values, so doing them twice is doing them once): a crash before the record is
//! whole leaves every series with its old kind and buckets, one after it leaves them all
//! converted. Series are committed in groups of at most [`GROUP_CELLS`] cells, each group
//! on its own, in a record of its own.
//!
//! Only valid while nothing else writes or reads these series: the command line runs it on
//! a stopped data directory, which it holds locked. A cluster partition's directory is
//! refused: its replicas apply one log, and a retype of one replica would part them.

use super::intent::Converted;
use super::{Engine, Shared};
use crate::bucket::Bucket;
use crate::counter::SeriesKind;
use crate::error::{Error, Result};
use crate::fault::{self, Hook};
use crate::registry::SeriesId;
use crate::storage::cells::CellAt;
use crate::time::Timestamp;

mod plan;

use plan::{Plan, TierCells};

/// Most cells one journal record carries: series are committed in groups up to it (a series
/// with the default tiers has about 11,000 buckets).
const GROUP_CELLS: usize = 200_000;

/// What a retype did to one series, or on a dry run would do.
#[derive(Debug, Clone, PartialEq)]
pub struct Retyped {
    /// The series, canonical.
    pub series: String,
    /// Its kind before: gauge, counter, delta counter or distribution.
    pub from: SeriesKind,
    /// What became of it.
    pub outcome: RetypeOutcome,
}

/// What became of one series in a retype.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RetypeOutcome {
    /// It was of the kind asked for already; nothing changed.
    Already,
    /// Converted (on a dry run: would be).
    Converted {
        /// Buckets rewritten in each tier, by tier name, in the tiers' order.
        buckets: Vec<(String, usize)>,
        /// What the conversion leaves out, in words (a counter's first sample).
        notes: Vec<String>,
    },
    /// Not converted, and why: the finest tier's earliest bucket that does not convert
    /// exactly, or what kind of series it is.
    Refused(String),
}

impl Engine {
    /// Makes the series `ids` of kind `kind` (a gauge or a counter), converting their stored
    /// buckets in every tier where that is exact, and refusing a series whole, saying why,
    /// where it is not (see `plan` for the rules; deleted ids are passed over). With
    /// `dry_run`, says what it would do and changes nothing (a read-only engine can). See
    /// the module doc for the steps and what a crash leaves.
    ///
    /// Only while nothing else writes or reads these series: a stopped data directory, as
    /// `tierdb retype` opens it.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a kind other than gauge or counter; [`Error::ReadOnly`],
    /// [`Error::Poisoned`], [`Error::Cluster`] for a cluster partition's directory (none of
    /// them on a dry run); [`Error::CorruptFile`] or [`Error::Io`] when buckets cannot be
    /// read; [`Error::Io`] when the intent cannot be written (nothing changed then) or the
    /// result flushed (the next open finishes it).
    pub fn retype(
        &self,
        ids: &[SeriesId],
        kind: SeriesKind,
        dry_run: bool,
    ) -> Result<Vec<Retyped>> {
        if !matches!(kind, SeriesKind::Gauge | SeriesKind::Counter) {
            return Err(Error::InvalidQuery(format!(
                "a series can be retyped as a gauge or a counter, not a {}",
                kind.as_str()
            )));
        }
        let shared = &self.shared;
        if !dry_run {
            self.check_writable()?;
            shared.check_poison()?;
            if shared.dir.join(super::apply::APPLIED_FILE).exists() {
                return Err(Error::Cluster(format!(
                    "{} is a cluster partition's directory: its replicas apply one log, and a \
                     retype of one would part them; retype is not supported in cluster mode",
                    shared.dir.display()
                )));
            }
        }
        // No maintenance pass (compaction, drops) meanwhile.
        let _pass = shared.pass_lock.lock().unwrap_or_else(|e| e.into_inner());
        let windows = shared.window_starts(shared.clock.now());
        let mut report = Vec::new();
        let mut group: Vec<Converted> = Vec::new();
        let mut group_cells = 0;
        for &id in ids {
            let Some(key) = shared.registry.key(id) else {
                continue;
            };
            let from = shared.counter_table.stored_kind(id, &shared.registry);
            let outcome = match self.plan_retype(id, from, kind, &windows)? {
                Step::Already => RetypeOutcome::Already,
                Step::Refuse(why) | Step::Plan(Plan::Refuse(why)) => RetypeOutcome::Refused(why),
                Step::Plan(Plan::Convert {
                    cells,
                    per_tier,
                    latest,
                    notes,
                }) => {
                    let set = shared.registry.placement(id).set();
                    let buckets = (shared.config.set_tiers(set).iter())
                        .zip(per_tier)
                        .map(|(tier, n)| (tier.name.clone(), n))
                        .collect();
                    if !dry_run {
                        group_cells += cells.len();
                        group.push(Converted { id, cells, latest });
                    }
                    RetypeOutcome::Converted { buckets, notes }
                }
            };
            report.push(Retyped {
                series: key.to_string(),
                from,
                outcome,
            });
            if group_cells >= GROUP_CELLS {
                self.commit_retype(&std::mem::take(&mut group), kind)?;
                group_cells = 0;
            }
        }
        if !group.is_empty() {
            self.commit_retype(&group, kind)?;
        }
        Ok(report)
    }

    /// What retyping series `id` from kind `from` to `to` does: its buckets are read from
    /// each tier's window start (`windows`) on and planned, unless its kind or its raw
    /// points decide first.
    fn plan_retype(
        &self,
        id: SeriesId,
        from: SeriesKind,
        to: SeriesKind,
        windows: &[Timestamp],
    ) -> Result<Step> {
        let shared = &self.shared;
        match from {
            SeriesKind::Distribution => {
                return Ok(Step::Refuse(
                    "it is a distribution (its buckets keep histograms of observations, not \
                     samples of one value)"
                        .to_owned(),
                ))
            }
            SeriesKind::DeltaCounter if to == SeriesKind::Counter => return Ok(Step::Already),
            SeriesKind::DeltaCounter => {
                return Ok(Step::Refuse(
                    "it is a delta counter (StatsD's: its writes are increases already, and no \
                     running total was ever sent)"
                        .to_owned(),
                ))
            }
            from if from == to => return Ok(Step::Already),
            _ => {}
        }
        if let Some(raw) = &shared.raw {
            let window = raw.spec().window_start(shared.clock.now());
            if raw.last_time(id.0).is_some_and(|last| last >= window) {
                return Ok(Step::Refuse(format!(
                    "it has points in the raw tier {:?}, which keep the {}'s values, and \
                     retype does not rewrite raw points",
                    raw.spec().name,
                    from.as_str()
                )));
            }
        }
        let slots = shared.storage.slots();
        let place = shared.registry.placement(id);
        let (chunk, slot) = place.chunk_and_slot(slots);
        let config = &shared.config;
        let mut tiers = Vec::with_capacity(config.set_tiers(place.set()).len());
        for (tier, spec) in config.indexed_set_tiers(place.set()) {
            let resolution = spec.resolution.secs() as i64;
            let held =
                (shared.storage).files_of_chunk(tier, chunk, windows[tier], Timestamp::MAX)?;
            let mut at = Vec::new();
            for (period_start, _) in held.iter().filter(|(start, _)| *start >= windows[tier]) {
                at.extend((0..spec.buckets_at(*period_start)).map(|bucket| CellAt {
                    tier,
                    period_start: *period_start,
                    chunk,
                    bucket,
                    slot,
                }));
            }
            drop(held);
            let loaded = shared.storage.load_cells(&at)?;
            let cells = (at.into_iter().zip(loaded))
                .map(|(at, bucket)| {
                    let start = at.period_start + i64::from(at.bucket) * resolution;
                    (at, start, bucket)
                })
                .collect();
            tiers.push(TierCells {
                name: spec.name.clone(),
                resolution,
                cells,
            });
        }
        Ok(Step::Plan(plan::plan(from, to, &tiers)))
    }

    /// Commits one group of conversions (steps 2 to 4 of the module doc).
    fn commit_retype(&self, group: &[Converted], kind: SeriesKind) -> Result<()> {
        let shared = &self.shared;
        let layout = shared.config.layout_fingerprint();
        let begun = super::intent::begin_retype(&shared.dir, layout, kind, group)?;
        fault_point("after_intent");
        shared.apply_retype(kind, group, true)?;
        self.flush()?;
        begun.finish()
    }
}

/// What a retype does with one series.
enum Step {
    /// It is of the kind asked for already.
    Already,
    /// Its kind, or its raw points, refuse it before its buckets are read: why.
    Refuse(String),
    /// Its buckets' plan.
    Plan(Plan),
}

impl Shared {
    /// Step 3 of the module doc: the new buckets, tier by tier, then the kinds. `fault`
    /// arms [`Hook::KillMidRetype`]'s `after_first_tier`.
    ///
    /// # Errors
    /// As [`crate::storage::Storage::replace_cells`]; [`Error::Io`] when a kind cannot be
    /// recorded.
    fn apply_retype(&self, kind: SeriesKind, group: &[Converted], fault: bool) -> Result<()> {
        for tier in 0..self.config.tier_count() {
            let cells: Vec<(CellAt, Bucket)> = (group.iter())
                .flat_map(|c| c.cells.iter().filter(|(at, _)| at.tier == tier))
                .copied()
                .collect();
            self.storage.replace_cells(&cells)?;
            if fault && tier == 0 {
                fault_point("after_first_tier");
            }
        }
        for converted in group {
            (self.counter_table).declare_retyped(
                converted.id,
                kind,
                converted.latest,
                &self.registry,
            )?;
        }
        // Every bucket of these series may have changed: answers kept from before (the
        // render cache) are read again.
        self.write_log.note(Timestamp::MIN);
        Ok(())
    }

    /// Finishes a retype to `kind` a crash interrupted after its commit, at open (see the
    /// module doc): sets `group` again; durable with the next flush.
    ///
    /// # Errors
    /// As [`Shared::apply_retype`].
    pub(super) fn finish_retype(&self, kind: SeriesKind, group: &[Converted]) -> Result<()> {
        self.apply_retype(kind, group, false)?;
        tracing::warn!(
            series = group.len(),
            kind = kind.as_str(),
            "finished a retype the last process did not finish"
        );
        Ok(())
    }
}

/// Kills the process when [`Hook::KillMidRetype`] names `stage` (read at each retype).
fn fault_point(stage: &str) {
    if Hook::KillMidRetype.armed().as_deref() == Some(stage) {
        fault::kill_self();
    }
}
