//! A picture of the engine for `info` and `/metrics`: samples accepted and refused, and what
//! each tier holds on disk.

use std::sync::atomic::Ordering;

use super::Engine;
use crate::config::{RawTierSpec, TierSpec, TiersConfig};
use crate::error::RejectReason;
use crate::sample::RawCounts;
use crate::storage::TierFiles;
use crate::time::{Span, Timestamp};

/// A picture of the engine for `info` and `/metrics`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EngineStats {
    /// The clock's reading when the stats were taken.
    pub now: Timestamp,
    /// Series registered and not deleted.
    pub series: usize,
    /// Of those, counters (stored as increases).
    pub counters: usize,
    /// Samples accepted since open.
    pub accepted: u64,
    /// Samples refused since open, per reason.
    pub rejected: Vec<(&'static str, u64)>,
    /// Period files created by the write path because a sample needed one that did not exist
    /// (a backfill, a gap after downtime, or a new chunk's file the chunk creator had not
    /// made yet when its first samples came).
    pub on_demand_creations: u64,
    /// Maintenance passes that failed since open (at open included).
    pub maintenance_failures: u64,
    /// The last maintenance pass's error, while the last pass failed.
    pub maintenance_error: Option<String>,
    /// What the raw tier did with accepted samples since open (zero without one).
    pub raw: RawCounts,
    /// Per tier: configuration, window and files; the raw tier, when configured, last.
    pub tiers: Vec<TierStats>,
    /// Tier directories on disk that the configuration no longer names.
    pub orphaned_tiers: Vec<String>,
}

impl EngineStats {
    /// The stats of an engine holding nothing, with `tiers` at `now`: where a cluster node
    /// that applies no partition starts (see [`EngineStats::absorb`]).
    pub fn empty(tiers: &TiersConfig, now: Timestamp) -> EngineStats {
        EngineStats {
            now,
            series: 0,
            counters: 0,
            accepted: 0,
            rejected: Vec::new(),
            on_demand_creations: 0,
            maintenance_failures: 0,
            maintenance_error: None,
            raw: RawCounts::default(),
            tiers: (tiers.all_tiers())
                .map(|(set, t)| TierStats::new(tiers, set, t, now, TierFiles::default()))
                .chain((tiers.raw.iter()).map(|r| TierStats::raw(r, now, TierFiles::default())))
                .collect(),
            orphaned_tiers: Vec::new(),
        }
    }

    /// Adds `other`'s counts to these: what a cluster node reports for the partitions it
    /// applies, each an engine of its own with the same tiers. Files, bytes, series and
    /// counters add up; a tier's oldest period is the oldest of both, its newest the newest.
    pub fn absorb(&mut self, other: &EngineStats) {
        self.series += other.series;
        self.counters += other.counters;
        self.accepted += other.accepted;
        self.raw.add(&other.raw);
        for &(reason, n) in &other.rejected {
            match self.rejected.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, total)) => *total += n,
                None => self.rejected.push((reason, n)),
            }
        }
        self.maintenance_failures += other.maintenance_failures;
        if self.maintenance_error.is_none() {
            self.maintenance_error.clone_from(&other.maintenance_error);
        }
        for theirs in &other.tiers {
            let Some(ours) = self.tiers.iter_mut().find(|t| t.name == theirs.name) else {
                self.tiers.push(theirs.clone());
                continue;
            };
            ours.disk.absorb(&theirs.disk);
        }
        self.on_demand_creations = self.tiers.iter().map(|t| t.disk.on_demand_creations).sum();
        for orphan in &other.orphaned_tiers {
            if !self.orphaned_tiers.contains(orphan) {
                self.orphaned_tiers.push(orphan.clone());
            }
        }
    }
}

/// One tier in [`EngineStats`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct TierStats {
    /// Tier name: `set/tier` for a tier of a `[[set]]`.
    pub name: String,
    /// `rollup`, or `raw` for the tier of exact points.
    pub kind: &'static str,
    /// Bucket width; 0s for the raw tier, which has none.
    pub resolution: Span,
    /// Time per file.
    pub period: Span,
    /// How long files are kept.
    pub retention: Span,
    /// First second the tier holds now.
    pub window_start: Timestamp,
    /// Files on disk.
    pub disk: TierFiles,
}

impl TierStats {
    /// Tier `spec` of set `set` at `now`, holding `disk`; named `set/tier` when the set is
    /// a `[[set]]`.
    fn new(
        config: &TiersConfig,
        set: usize,
        spec: &TierSpec,
        now: Timestamp,
        disk: TierFiles,
    ) -> TierStats {
        TierStats {
            name: config.tier_label(set, &spec.name),
            kind: "rollup",
            resolution: spec.resolution,
            period: spec.period,
            retention: spec.retention,
            window_start: spec.window_start(now),
            disk,
        }
    }

    /// The raw tier `spec` at `now`, holding `disk`.
    fn raw(spec: &RawTierSpec, now: Timestamp, disk: TierFiles) -> TierStats {
        TierStats {
            name: spec.name.clone(),
            kind: "raw",
            resolution: Span::from_secs(0),
            period: spec.period,
            retention: spec.retention,
            window_start: spec.window_start(now),
            disk,
        }
    }
}

impl Engine {
    /// Counters and what each tier holds on disk.
    pub fn stats(&self) -> EngineStats {
        let shared = &self.shared;
        let now = shared.clock.now();
        let config = &shared.config;
        let mut tiers: Vec<TierStats> = (config.all_tiers().enumerate())
            .map(|(i, (set, t))| {
                TierStats::new(config, set, t, now, shared.storage.tier_files(i, now))
            })
            .collect();
        if let Some(raw) = &shared.raw {
            tiers.push(TierStats::raw(raw.spec(), now, raw.files(now)));
        }
        EngineStats {
            now,
            series: shared.registry.live_len(),
            counters: shared.counter_table.count(&shared.registry),
            accepted: shared.tally.accepted.load(Ordering::Relaxed),
            rejected: RejectReason::ALL
                .iter()
                .map(|r| {
                    (
                        r.as_str(),
                        shared.tally.rejected[r.index()].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            on_demand_creations: tiers.iter().map(|t| t.disk.on_demand_creations).sum(),
            maintenance_failures: shared.maintenance.failures(),
            maintenance_error: shared.maintenance.last_error(),
            raw: *shared.tally.raw.lock().unwrap_or_else(|e| e.into_inner()),
            tiers,
            orphaned_tiers: shared.storage.orphaned_tiers(),
        }
    }
}
