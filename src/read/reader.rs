//! The read side of an open data directory: [`Reader`] and what a read sees through it,
//! the tiers, the clock, the registry (and a selection of it grouped by tags), series
//! kinds, raw points, a series' chunk and slot, and the period files of a chunk; nothing of
//! the write path, so reads never reach into the engine's internals.
//!
//! The reads themselves are methods of [`Reader`] written beside their work, in the files
//! above this one, which import it and are not imported by it: one-series reads in
//! [`crate::read::query`], reads across series in [`crate::read::aggregate`], distribution
//! reads in [`crate::read::distribution`].

use std::borrow::Cow;

use super::budget::ReadBudget;
use super::tier_choice::{self, TierChoice};
use super::write_log::WriteLog;
use crate::clock::Clock;
use crate::config::TiersConfig;
use crate::counter::{CounterTable, SeriesKind};
use crate::error::Result;
use crate::registry::{Registry, Selector, SeriesId};
use crate::storage::raw::{RawRead, RawStore};
use crate::storage::HeldPeriod;
use crate::storage::Storage;
use crate::time::Timestamp;

/// How a read across the series of several tier sets lines them up
/// ([`Reader::across_sets`]): each set's reader with the tier it would read alone, points as
/// wide as the least common multiple of those tiers' resolutions, from the latest of their
/// windows on, so every point holds every set.
pub(crate) struct AcrossSets<'a> {
    /// Each set's reader and tier.
    pub(crate) parts: Vec<(Reader<'a>, crate::config::TierSpec)>,
    /// The width of a point; `None` for one point over the whole range.
    pub(crate) step: Option<crate::time::Span>,
    /// The first second every set's tier holds.
    pub(crate) window: Timestamp,
    /// Each set's tier as `set/tier`, joined: what the answer says it read.
    pub(crate) tiers: String,
    /// Set when the tiers' resolutions differ: what the answer's note says.
    pub(crate) note: Option<String>,
}

impl<'a> AcrossSets<'a> {
    /// Each set's part of a read, made by `read` (the set's reader and tier), folded into
    /// the first by `merge`.
    ///
    /// # Errors
    /// The first error of `read` or `merge`.
    pub(crate) fn merge_parts<P>(
        &self,
        read: impl Fn(Reader<'a>, &crate::config::TierSpec) -> Result<P>,
        merge: impl Fn(&mut P, P) -> Result<()>,
    ) -> Result<P> {
        let mut parts = self.parts.iter().map(|(reader, spec)| read(*reader, spec));
        let mut merged = parts.next().expect("two sets or more")?;
        for part in parts {
            merge(&mut merged, part?)?;
        }
        Ok(merged)
    }
}

/// A read's own note and a read across sets' note, joined.
pub(crate) fn join_notes(note: Option<String>, across: &Option<String>) -> Option<String> {
    match (note, across) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or_else(|| b.clone()),
    }
}

/// A read's partial answer as a read across tier sets folds it (an aggregate's, a
/// distribution read's): each set's parts merged on its own plan, then the sets merged on
/// one grid, on one engine ([`AcrossSets::merge_parts`]) or across a cluster's owners.
// A single node uses the merges across sets only; a cluster node its per-set merges too.
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) trait SetPartial: Sized {
    /// What the part answers.
    type Plan: Clone;
    /// The finished answer.
    type Answer;
    /// Nothing read yet, on `plan`.
    fn empty(plan: Self::Plan) -> Self;
    /// Adds a part of the same plan, over other series.
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidQuery`] when it answers another plan.
    fn merge(&mut self, other: Self) -> Result<()>;
    /// Adds another set's part, read on its own tier onto the same points; this part keeps
    /// its plan. `tiers` names the sets' tiers in the error.
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidQuery`] when the points differ, or as `merge`.
    fn merge_set(&mut self, other: Self, tiers: &str) -> Result<()>;
    /// The answer of the sets merged into this part: it names their tiers, `tiers`, and
    /// carries `note` beside its own.
    ///
    /// # Errors
    /// As the part's finish.
    fn finish_across(self, tiers: &str, note: &Option<String>) -> Result<Self::Answer>;
    /// The answer of one set's part.
    ///
    /// # Errors
    /// As the part's finish.
    fn finish_alone(self) -> Result<Self::Answer>;
}

/// [`AcrossSets`] without readers: each set with the tier it would read alone, decided from
/// the tiers and a clock only, so a cluster node that asks the owners plans as one engine
/// does ([`across_sets_plan`]).
pub(crate) struct AcrossPlan {
    /// Each set and its tier.
    pub(crate) parts: Vec<(usize, crate::config::TierSpec)>,
    /// As [`AcrossSets::step`].
    pub(crate) step: Option<crate::time::Span>,
    /// As [`AcrossSets::window`].
    pub(crate) window: Timestamp,
    /// As [`AcrossSets::tiers`].
    pub(crate) tiers: String,
    /// As [`AcrossSets::note`].
    pub(crate) note: Option<String>,
}

/// How a read of `choice` over `[from, to)` at `now` lines up the series of `sets` of the
/// tiers `whole` (see [`AcrossSets`]): `step` when given (it must be a multiple of every
/// set's resolution), else the least common multiple of the resolutions, or none for
/// `whole_range`.
///
/// # Errors
/// [`crate::error::Error::UnknownTier`] for a named tier a set lacks;
/// [`crate::error::Error::InvalidQuery`] when the resolutions' multiple overflows.
pub(crate) fn across_sets_plan(
    whole: &TiersConfig,
    now: Timestamp,
    sets: &[usize],
    choice: &TierChoice,
    (from, to): (Timestamp, Timestamp),
    (max_points, step, whole_range): (Option<u32>, Option<crate::time::Span>, bool),
) -> Result<AcrossPlan> {
    let mut parts = Vec::with_capacity(sets.len());
    for &set in sets {
        let view = whole.set_view(set);
        let tier = choice.resolve(&view, from, to, max_points, now)?;
        parts.push((set, view.tiers[tier].clone()));
    }
    let resolution = (parts.iter())
        .try_fold(1, |l, (_, spec)| {
            crate::time::lcm(l, spec.resolution.secs() as i64)
        })
        .ok_or_else(|| {
            crate::error::Error::InvalidQuery(
                "the sets' resolutions have no common multiple".into(),
            )
        })? as u64;
    let step = (!whole_range).then(|| step.unwrap_or(crate::time::Span::from_secs(resolution)));
    let window = (parts.iter())
        .map(|(_, spec)| spec.window_start(now))
        .max()
        .unwrap_or(Timestamp::MIN);
    let tiers = (parts.iter())
        .map(|(set, spec)| whole.tier_label(*set, &spec.name))
        .collect::<Vec<_>>()
        .join(", ");
    let differ = (parts.iter()).any(|(_, spec)| spec.resolution != parts[0].1.resolution);
    let note = differ.then(|| {
        format!(
            "the selected series keep different tier sets with no tier of one resolution \
             in common for this range ({tiers}): each set's buckets are folded onto points \
             {}s wide",
            step.map_or(resolution, |s| s.secs())
        )
    });
    Ok(AcrossPlan {
        parts,
        step,
        window,
        tiers,
        note,
    })
}

/// A series a read folds: where its cells are and which group it folds into.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    pub(crate) chunk: u32,
    pub(crate) slot: u32,
    pub(crate) group: usize,
}

/// A read view of an engine, cheap to copy (it borrows); get one with
/// [`crate::Engine::reader`]. Reads take no lock on bucket memory.
///
/// With `[[set]]`s, a reader sees the tiers of one set: the engine's reader the default
/// set's (and every series), [`Reader::for_set`] another's (and that set's series only).
/// Tier indexes are the set's own; a series of another set refuses to be read
/// ([`Reader::member`]), never read through the wrong files.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    /// The tiers this reader sees: the engine's whole configuration, or a set's view.
    config: &'a TiersConfig,
    /// The engine's whole configuration.
    whole: &'a TiersConfig,
    /// The `[[set]]`s' views (set `i + 1` at `i`).
    set_views: &'a [TiersConfig],
    /// The set whose tiers `config` holds, and whether only its series are selected.
    set: usize,
    only_set: bool,
    /// The storage index of `config`'s first tier.
    tier_offset: usize,
    storage: &'a Storage,
    raw: Option<&'a RawStore>,
    registry: &'a Registry,
    kinds: &'a CounterTable,
    clock: &'a dyn Clock,
    /// Read by the render cache, which comes with the server.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    writes: &'a WriteLog,
}

impl<'a> Reader<'a> {
    /// The reader of an engine with `config` and its sets' views (set `i + 1` at `i`).
    pub(crate) fn new(
        (config, set_views): (&'a TiersConfig, &'a [TiersConfig]),
        storage: &'a Storage,
        raw: Option<&'a RawStore>,
        registry: &'a Registry,
        kinds: &'a CounterTable,
        clock: &'a dyn Clock,
        writes: &'a WriteLog,
    ) -> Reader<'a> {
        Reader {
            config,
            whole: config,
            set_views,
            set: 0,
            only_set: false,
            tier_offset: 0,
            storage,
            raw,
            registry,
            kinds,
            clock,
            writes,
        }
    }

    /// The engine's writes by generation: what may have changed since an earlier read.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn writes(&self) -> &'a WriteLog {
        self.writes
    }

    /// The tiers read: the set's, for a reader of one set.
    pub fn config(&self) -> &'a TiersConfig {
        self.config
    }

    /// The engine's whole configuration, every set's tiers.
    pub fn whole_config(&self) -> &'a TiersConfig {
        self.whole
    }

    /// A reader of set `set`'s series through its tiers: tier indexes and `config()` are the
    /// set's, and selections keep only its series.
    pub fn for_set(&self, set: usize) -> Reader<'a> {
        Reader {
            config: match set {
                0 => self.whole,
                _ => &self.set_views[set - 1],
            },
            set,
            only_set: true,
            tier_offset: self.whole.first_tier_of(set),
            ..*self
        }
    }

    /// A reader of series `id`'s set: this one, unless it is the engine's reader and the
    /// series keeps a `[[set]]`'s tiers.
    pub fn for_series(&self, id: SeriesId) -> Reader<'a> {
        if self.only_set || !self.registry.has_sets() {
            return *self;
        }
        self.for_set(self.registry.placement(id).set())
    }

    /// Whether this reader's selections may hold series of several tier sets: the engine's
    /// reader, when there are `[[set]]`s. A read across series then reads each set through
    /// [`Reader::for_set`].
    pub(crate) fn spans_sets(&self) -> bool {
        !self.only_set && self.registry.has_sets()
    }

    /// The tier sets of the series `selector` picks, each once, in set order (the scan
    /// charged to `budget`).
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidQuery`] when `budget` refuses the scan.
    pub(crate) fn sets_selected(
        &self,
        selector: &Selector,
        budget: &ReadBudget,
    ) -> Result<Vec<usize>> {
        budget.charge_scan(self.registry.len())?;
        let ids = self
            .registry
            .select(|id, key| selector.matches(key).then_some(id));
        Ok(self.sets_of(ids))
    }

    /// How a read of `choice` over `[from, to)` lines up the series of `sets` (see
    /// [`AcrossSets`]): `step` when given (it must be a multiple of every set's
    /// resolution), else the least common multiple of the resolutions, or none for
    /// `whole_range`.
    ///
    /// # Errors
    /// [`crate::error::Error::UnknownTier`] for a named tier a set lacks;
    /// [`crate::error::Error::InvalidQuery`] when the resolutions' multiple overflows.
    pub(crate) fn across_sets(
        &self,
        sets: &[usize],
        choice: &TierChoice,
        (from, to): (Timestamp, Timestamp),
        (max_points, step, whole_range): (Option<u32>, Option<crate::time::Span>, bool),
    ) -> Result<AcrossSets<'a>> {
        let plan = across_sets_plan(
            self.whole,
            self.now(),
            sets,
            choice,
            (from, to),
            (max_points, step, whole_range),
        )?;
        Ok(AcrossSets {
            parts: (plan.parts.into_iter())
                .map(|(set, spec)| (self.for_set(set), spec))
                .collect(),
            step: plan.step,
            window: plan.window,
            tiers: plan.tiers,
            note: plan.note,
        })
    }

    /// The set whose tiers this reader reads.
    pub fn set(&self) -> usize {
        self.set
    }

    /// The tier sets of `ids`, each once, in set order: which readers a read of them needs.
    pub fn sets_of(&self, ids: impl IntoIterator<Item = SeriesId>) -> Vec<usize> {
        if !self.registry.has_sets() {
            return vec![0];
        }
        let mut sets: Vec<usize> = (self.registry.placements(ids).into_iter())
            .map(|place| place.set())
            .collect();
        sets.sort_unstable();
        sets.dedup();
        sets
    }

    /// The engine clock's current time.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The series registry (names, tags, ids).
    pub fn registry(&self) -> &'a Registry {
        self.registry
    }

    /// How series `id` stores its samples: as they come (gauge) or as increases (counter).
    pub fn series_kind(&self, id: SeriesId) -> SeriesKind {
        self.kinds.kind(id, self.registry)
    }

    /// [`Reader::series_kind`] of each of `ids`, in order, taking the counter table's lock
    /// once.
    pub fn series_kinds(&self, ids: &[SeriesId]) -> Vec<SeriesKind> {
        self.kinds.kinds(ids, self.registry)
    }

    /// First second tier `tier` holds at `now` (the clock read once per read).
    pub fn window_start(&self, tier: usize, now: Timestamp) -> Timestamp {
        self.config.tiers[tier].window_start(now)
    }

    /// [`Registry::select`] among the series this reader reads: a set's reader, its set's.
    pub fn select<T: Send>(
        &self,
        pick: impl Fn(SeriesId, crate::registry::KeyView<'_>) -> Option<T> + Sync,
    ) -> Vec<T> {
        self.registry
            .select_in(self.only_set.then_some(self.set), pick)
    }

    /// The canonical keys of the series `selector` picks, in id order: one parallel scan of
    /// the registry, copying only the keys it answers.
    pub fn series_keys(&self, selector: &Selector) -> Vec<String> {
        let set = self.only_set.then_some(self.set);
        self.registry.select_in(set, |_, key| {
            selector.matches(key).then(|| key.as_str().to_owned())
        })
    }

    /// The points of series `id` in `[from, to)` in the raw tier, with the neighbours
    /// just outside; `None` without a raw tier. Points before the tier's window at the
    /// clock's now are not shown (their period is about to be dropped). With more than
    /// `limit` points in the range, it stops at `limit + 1` (`RawStore::read`).
    pub fn raw_points(
        &self,
        id: SeriesId,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> Option<RawRead> {
        let raw = self.raw?;
        let window = raw.spec().window_start(self.now());
        let mut read = raw.read(id.0, from.max(window), to, limit);
        if read.before.is_some_and(|(ts, _)| ts < window) {
            read.before = None;
        }
        Some(read)
    }

    /// Series slots per chunk: a series lives in chunk `position / slots`, slot
    /// `position % slots` of its set's files ([`crate::registry::SetPlace`]).
    pub(crate) fn slots(&self) -> u32 {
        self.storage.slots()
    }

    /// Series `id` as a member of a read's group `group`: the chunk and slot of its cells
    /// in this reader's set's files.
    ///
    /// # Errors
    /// [`crate::Error::InvalidQuery`] when the series keeps another set's tiers.
    pub(crate) fn member(&self, id: SeriesId, group: usize) -> Result<Member> {
        let (chunk, slot) = self.cells_of(id)?;
        Ok(Member { chunk, slot, group })
    }

    /// The chunk and slot of series `id`'s cells in this reader's set's files.
    ///
    /// # Errors
    /// [`crate::Error::InvalidQuery`] when the series keeps another set's tiers: reading
    /// it here would read another series' cells.
    pub(crate) fn cells_of(&self, id: SeriesId) -> Result<(u32, u32)> {
        let slots = self.slots();
        let place = self.registry.placement(id);
        if place.set() != self.set {
            return Err(crate::error::Error::InvalidQuery(format!(
                "series {} keeps the tiers of set {:?}; this read reads set {:?}'s, and reads \
                 across tier sets are not supported here yet",
                self.registry
                    .key(id)
                    .map_or_else(|| id.to_string(), |k| k.to_string()),
                self.whole.set_name(place.set()),
                self.whole.set_name(self.set),
            )));
        }
        Ok(place.chunk_and_slot(slots))
    }

    /// The series `selector` picks, in id order, each with its values of the `group_by`
    /// tags (`None` for a tag it lacks), the registry scan (a value per key) charged to
    /// `budget` first: the selection of the reads that group series.
    ///
    /// # Errors
    /// [`crate::error::Error::InvalidQuery`] when `budget` refuses the scan.
    pub(crate) fn select_grouped(
        &self,
        selector: &Selector,
        group_by: &[String],
        budget: &ReadBudget,
    ) -> Result<Vec<(SeriesId, Vec<Option<String>>)>> {
        budget.charge_scan(self.registry.len())?;
        Ok(self.select(|id, key| {
            selector.matches(key).then(|| {
                let values = (group_by.iter())
                    .map(|k| key.tag(k).map(Cow::into_owned))
                    .collect();
                (id, values)
            })
        }))
    }

    /// The files of `chunk` in `tier` whose periods overlap `span`, oldest first, each with
    /// its period start. Only periods that have a file: a read is bounded by the files held,
    /// not by the width of its range.
    pub(crate) fn period_files(
        &self,
        tier: usize,
        chunk: u32,
        span: std::ops::Range<Timestamp>,
    ) -> Result<Vec<(Timestamp, HeldPeriod)>> {
        self.storage
            .files_of_chunk(self.tier_offset + tier, chunk, span.start, span.end)
    }

    /// The tier `choice` names, or the `auto` choice for `[from, to)` within `max_points`
    /// (the configured budget when `None`).
    ///
    /// # Errors
    /// [`crate::Error::UnknownTier`] for a name no tier has.
    pub fn choose_tier(
        &self,
        choice: &TierChoice,
        from: Timestamp,
        to: Timestamp,
        max_points: Option<u32>,
    ) -> Result<usize> {
        choice.resolve(self.config, from, to, max_points, self.now())
    }

    /// The finest tier whose window reaches back to `from` and whose buckets over
    /// `[from, to)` number at most `max_points`; failing that, the tier reaching back
    /// furthest among those within the budget; failing that, the coarsest tier.
    pub fn auto_tier(&self, from: Timestamp, to: Timestamp, max_points: u32) -> usize {
        tier_choice::auto_tier(self.config, from, to, max_points, self.now())
    }
}
