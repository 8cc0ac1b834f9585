//! Counters: series whose samples are running totals (bytes sent, requests served). The
//! engine stores the increase since the previous sample instead of the raw value, so every
//! tier's `total` is the increase within the bucket and `per_sec` a true rate.
//!
//! - A series is a counter when a write declared it one (JSON `"kind"`, Influx `?kind=`),
//!   or, when no write declared its kind, when the `[counters]` rules in force when the
//!   series was created matched it. The first declaration fixes the kind; a later write
//!   declaring the other kind is refused (`kind_mismatch`).
//! - A kind is never reinterpreted: changed rules apply to new series only. The rules in
//!   force are the ones the data directory stores (its `tiers.toml`), so a series whose
//!   state records no kind has the stored rules' kind; an open that changes the rules first
//!   records, for every existing series the new rules would change, the kind it has
//!   (`RULED_*` in `counters.state`), and says which series those are.
//! - A delta counter (a StatsD counter) is a counter whose writes are increases already:
//!   each is stored as it comes, in any order, and the series reads as any counter. A
//!   series already fixed as a gauge stays one when a write declares it a delta counter
//!   (its values are stored alike, and nothing is reinterpreted).
//! - A counter's first sample sets its baseline and stores nothing. Each later sample stores
//!   the increase since the previous one in the bucket of its own timestamp; a drop is a
//!   reset and stores the new value (the count since the reset), never a negative spike.
//! - A counter sample not newer than the counter's last one is refused
//!   (`counter_out_of_order`): its increase is unknowable without rewriting history.
//! - The last raw value and time live in `counters.state`
//!   ([`crate::storage::counter_state`]), so a restart continues where the counter was.
//! - After a gap, the whole increase over the gap lands in the bucket of the sample that
//!   ends it: totals stay exact, the rate of that one bucket is the gap's.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::config::SeriesRules;
use crate::error::Error;
use crate::error::RejectReason;
use crate::error::Result;
use crate::registry::matches_rules;
use crate::registry::{Registry, SeriesId};
use crate::sample::Sample;
use crate::storage::cells::CellAt;
use crate::storage::counter_journal::{CounterJournal, Left};
use crate::storage::counter_state::{
    CounterStateFile, DECLARED_COUNTER, DECLARED_DELTA, DECLARED_DISTRIBUTION, DECLARED_GAUGE,
    RULED_COUNTER, RULED_GAUGE, RULED_MASK,
};
use crate::storage::undo_entry::Undo;
use crate::storage::Storage;
use crate::time::Timestamp;

/// How a series stores its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesKind {
    /// Samples are stored as they come.
    Gauge,
    /// Samples are running totals; the increase since the previous sample is stored.
    Counter,
    /// Samples are increases already (a StatsD counter's count per flush interval): each is
    /// stored as it comes, and the series reads as a [`SeriesKind::Counter`], whose stored
    /// values are increases too. Only a write declares it (StatsD's); reads never see it.
    #[serde(skip_deserializing)]
    DeltaCounter,
    /// Each sample is one observation of a distribution (a StatsD timer's latency): every
    /// bucket keeps a histogram of them beside count, total, min and max, so quantiles are
    /// answered at every tier. Only a write declares it.
    #[serde(skip_deserializing)]
    Distribution,
}

impl SeriesKind {
    /// The name used in APIs: `gauge`, `counter`, `delta_counter` or `distribution`.
    pub fn as_str(self) -> &'static str {
        match self {
            SeriesKind::Gauge => "gauge",
            SeriesKind::Counter => "counter",
            SeriesKind::DeltaCounter => "delta_counter",
            SeriesKind::Distribution => "distribution",
        }
    }

    /// The kind reads see: a delta counter's stored increases read as a counter's.
    fn read(self) -> SeriesKind {
        match self {
            SeriesKind::DeltaCounter => SeriesKind::Counter,
            kind => kind,
        }
    }
}

impl std::str::FromStr for SeriesKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<SeriesKind> {
        match s {
            "gauge" => Ok(SeriesKind::Gauge),
            "counter" => Ok(SeriesKind::Counter),
            _ => Err(Error::InvalidQuery(format!(
                "unknown kind {s:?} (expected gauge or counter)"
            ))),
        }
    }
}

/// Every series' kind and every counter's last raw value, with the rules that decide the
/// kind of series no write declared. One lock orders all counter updates, so increases are
/// computed in the order batches are accepted, whatever thread sends them.
pub(crate) struct CounterTable {
    rules: SeriesRules,
    /// False while no series is a counter of running totals: batches then skip every
    /// counter step (a delta counter's samples are stored as they come).
    any: AtomicBool,
    /// False while no series is a distribution or a delta counter, whose samples keep no
    /// latest sample (and a distribution's go into histograms): batches then look up no
    /// kind for them.
    any_without_latest: AtomicBool,
    inner: Mutex<Inner>,
}

struct Inner {
    state: CounterStateFile,
    /// The undo record of the batch being applied; `None` when read-only.
    journal: Option<CounterJournal>,
    /// The kind of each id evaluated so far (ids past the end are evaluated on first need);
    /// `DeltaCounter` for a delta counter, which reads as a counter.
    kinds: Vec<SeriesKind>,
    /// The tiers layout's fingerprint, recorded with each journaled batch.
    layout: u64,
    /// The rules the directory stored, when a writable open changes them: the kinds they
    /// gave are recorded at [`CounterTable::after_recovery`].
    keep_from: Option<SeriesRules>,
}

impl CounterTable {
    /// Opens `dir`'s counter state and evaluates the kind of every registered series.
    ///
    /// A writable table writes no batch until [`CounterTable::after_recovery`], the last
    /// step of the open's recovery pass (`engine/recover.rs`), which first rolls back the
    /// batch a stopped process left unfinished ([`CounterTable::roll_back`]). `layout`
    /// fingerprints the tiers, so a journal written under another tiers.toml is refused
    /// rather than applied to the wrong cells.
    ///
    /// `stored` are the rules the directory stores (`None` for a directory that stores no
    /// tiers): the rules every series without a recorded kind was created under. When
    /// `rules` differ, a writable table records the kind of each existing series they would
    /// change before taking them (see [`keep_kinds`]), once the recovery put back the
    /// states a stopped process left; a read-only open keeps `stored`, since it records
    /// nothing.
    ///
    /// # Errors
    /// As [`CounterStateFile::open`].
    pub(crate) fn open(
        dir: &Path,
        rules: SeriesRules,
        stored: Option<SeriesRules>,
        registry: &Registry,
        layout: u64,
        writable: bool,
    ) -> Result<CounterTable> {
        let state = CounterStateFile::open(dir, writable)?;
        let (rules, keep_from) = match stored {
            Some(stored) if stored != rules && writable => (rules, Some(stored)),
            Some(stored) => (stored, None),
            None => (rules, None),
        };
        let table = CounterTable {
            rules,
            any: AtomicBool::new(false),
            any_without_latest: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                state,
                journal: None,
                kinds: Vec::new(),
                layout,
                keep_from,
            }),
        };
        table.refresh(&mut table.lock(), registry);
        Ok(table)
    }

    /// Rolls back the batch of counter samples a stopped process left unfinished in its
    /// journal (`left`, read by the open's recovery pass): every recorded cell of
    /// `storage` that holds the batch's adds or fewer gets its content from before the
    /// batch back (a cell with more holds later writes that reached the disk after a power
    /// loss, and is left alone), and every recorded counter state its record from before
    /// the batch. Durable with the next flush; only valid before any writer runs.
    ///
    /// # Errors
    /// [`Error::CorruptFile`] naming the journal when the batch was written under another
    /// tiers layout or holds an entry outside the files it names; [`Error::Io`].
    pub(crate) fn roll_back(&self, left: &Left, storage: &Storage) -> Result<()> {
        let Some((recorded, undo)) = &left.unfinished else {
            return Ok(());
        };
        let inner = self.lock();
        if *recorded != inner.layout {
            return Err(Error::corrupt(
                left.path(),
                "holds an unfinished batch of counter samples written under another tiers \
                 configuration: open with the tiers.toml of the process that stopped to roll \
                 it back, or remove the file to keep what that batch stored",
            ));
        }
        roll_back(undo, &inner.state, storage, left.path())
    }

    /// The last step of a writable open's recovery pass, once what it put back is durable:
    /// opens `dir`'s journal for the batches to come, clears the states of ids `registry`
    /// does not hold (their registration was lost in an unclean stop), records the kinds
    /// changed rules would change ([`keep_kinds`]), and evaluates every kind again.
    ///
    /// # Errors
    /// As [`CounterJournal::open`]; [`Error::Io`] when the kinds kept from changed rules
    /// cannot be recorded.
    pub(crate) fn after_recovery(&self, dir: &Path, registry: &Registry) -> Result<()> {
        let mut inner = self.lock();
        inner.journal = Some(CounterJournal::open(dir)?);
        let cleared = inner.state.clear_from(registry.len());
        if cleared > 0 {
            tracing::warn!(
                path = %inner.state.path().display(),
                cleared,
                "cleared counter state of series ids the registry does not hold (their registration was lost in an unclean stop)"
            );
        }
        if let Some(stored) = inner.keep_from.take() {
            keep_kinds(&mut inner.state, &stored, &self.rules, registry)?;
        }
        inner.kinds.clear();
        self.any.store(false, Ordering::Release);
        self.any_without_latest.store(false, Ordering::Release);
        self.refresh(&mut inner, registry);
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update is a few stores that leave the table consistent at each step.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Evaluates the kinds of series registered since the last call.
    fn refresh(&self, inner: &mut Inner, registry: &Registry) {
        let first = inner.kinds.len();
        if registry.len() <= first {
            return;
        }
        let Inner { state, kinds, .. } = inner;
        registry.for_each_from(first, |id, key| {
            // A deleted series' hole has no key and is never written: a gauge in its place.
            kinds.resize(id.index(), SeriesKind::Gauge);
            kinds.push(self.kind_from(state.flags(id.index()), key));
        });
        for kind in [
            SeriesKind::Counter,
            SeriesKind::DeltaCounter,
            SeriesKind::Distribution,
        ] {
            if kinds[first..].contains(&kind) {
                self.note_kind(kind);
            }
        }
    }

    /// Makes batches see that a series of `kind` exists: they skip the counter step while no
    /// series is a counter, and the kind lookups while none keeps no latest sample.
    fn note_kind(&self, kind: SeriesKind) {
        match kind {
            SeriesKind::Counter => self.any.store(true, Ordering::Release),
            SeriesKind::DeltaCounter | SeriesKind::Distribution => {
                self.any_without_latest.store(true, Ordering::Release)
            }
            SeriesKind::Gauge => {}
        }
    }

    /// The kind a series has with state `flags` and key `key`: the kind a write declared,
    /// else the kind recorded when rules changed, else the `[counters]` rules'.
    fn kind_from(&self, flags: u64, key: crate::registry::KeyView<'_>) -> SeriesKind {
        if flags & DECLARED_DISTRIBUTION != 0 {
            SeriesKind::Distribution
        } else if flags & DECLARED_DELTA != 0 {
            SeriesKind::DeltaCounter
        } else if flags & DECLARED_COUNTER != 0 {
            SeriesKind::Counter
        } else if flags & DECLARED_GAUGE != 0 {
            SeriesKind::Gauge
        } else if flags & RULED_MASK == RULED_COUNTER {
            SeriesKind::Counter
        } else if flags & RULED_MASK != 0 || !matches_rules(&self.rules, key) {
            SeriesKind::Gauge
        } else {
            SeriesKind::Counter
        }
    }

    /// Series `id`'s state record as it stands: the kind a write declared, and a counter's
    /// last time and raw value (zeros when never written). An undo keeps it to put back
    /// with [`CounterTable::restore`].
    pub(crate) fn snapshot(&self, id: SeriesId) -> [u64; 3] {
        self.lock().state.record(id.index())
    }

    /// Puts series `id`'s state record back to `record` (taken by
    /// [`CounterTable::snapshot`]) and evaluates its kind again from it, so the next batch
    /// sees the series as it was when the record was taken: a declaration undone makes it
    /// what the rules say again. Only valid while no batch runs (an undo at open).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn restore(&self, id: SeriesId, record: [u64; 3], registry: &Registry) {
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        inner.state.restore(id.index(), record);
        let Some(key) = registry.key(id) else {
            return;
        };
        let kind = self.kind_from(inner.state.flags(id.index()), key.view());
        if let Some(slot) = inner.kinds.get_mut(id.index()) {
            *slot = kind;
        }
        self.note_kind(kind);
    }

    /// Makes series `id` a declared `kind` (a gauge, or a counter whose last sample is
    /// `latest`), replacing whatever kind it had: what `tierdb retype` records once its
    /// buckets hold the new kind's values. A later write declaring the other kind is
    /// refused (`kind_mismatch`), as for any declared kind. Only valid while no batch runs.
    ///
    /// # Errors
    /// [`Error::Io`] when the state file cannot grow to hold the record.
    pub(crate) fn declare_retyped(
        &self,
        id: SeriesId,
        kind: SeriesKind,
        latest: Option<(Timestamp, f64)>,
        registry: &Registry,
    ) -> Result<()> {
        let counter = kind == SeriesKind::Counter;
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        inner.state.declare(id.index(), counter, latest)?;
        if let Some(slot) = inner.kinds.get_mut(id.index()) {
            *slot = kind;
        }
        self.note_kind(kind);
        Ok(())
    }

    /// The kind series `id` stores its samples as: [`SeriesKind::DeltaCounter`] for a
    /// delta counter, which reads see as a counter.
    pub(crate) fn stored_kind(&self, id: SeriesId, registry: &Registry) -> SeriesKind {
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        (inner.kinds.get(id.index()).copied()).unwrap_or(SeriesKind::Gauge)
    }

    /// The kind of series `id`, as reads see it (gauge or counter).
    pub(crate) fn kind(&self, id: SeriesId, registry: &Registry) -> SeriesKind {
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        (inner.kinds.get(id.index()).copied()).map_or(SeriesKind::Gauge, SeriesKind::read)
    }

    /// The kind of each series of `ids` as reads see it, in order, under one lock: a read of
    /// many series (a render glob) takes the table's lock once, not once per series.
    pub(crate) fn kinds(&self, ids: &[SeriesId], registry: &Registry) -> Vec<SeriesKind> {
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        (ids.iter())
            .map(|id| {
                let kind = inner.kinds.get(id.index()).copied();
                kind.map_or(SeriesKind::Gauge, SeriesKind::read)
            })
            .collect()
    }

    /// True when a write declaring one of `ids` a distribution makes it one now
    /// ([`CounterTable::declare`]'s rule): a series of no declared kind that the rules
    /// read as a gauge. Declared any kind, or a counter by rule, it does not change.
    pub(crate) fn any_becomes_distribution(&self, ids: &[SeriesId], registry: &Registry) -> bool {
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        (ids.iter()).any(|id| {
            becomes_distribution(inner.state.flags(id.index()), inner.kinds.get(id.index()))
        })
    }

    /// Number of counters among the registered series (delta counters read as counters;
    /// distributions are not counters).
    pub(crate) fn count(&self, registry: &Registry) -> usize {
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        (inner.kinds.iter())
            .filter(|&&k| k.read() == SeriesKind::Counter)
            .count()
    }

    /// Fixes series `id`'s kind to `kind` the first time a write declares one. A delta
    /// counter declared of a series already fixed as a gauge leaves it a gauge: both store
    /// their samples as they come, so the write lands and nothing is read anew.
    ///
    /// # Errors
    /// [`Error::Rejected`] with [`RejectReason::KindMismatch`] when an earlier write declared
    /// another kind (a counter of running totals and a delta counter are two);
    /// [`Error::ReadOnly`] or [`Error::Io`] when the declaration cannot be recorded.
    pub(crate) fn declare(
        &self,
        id: SeriesId,
        kind: SeriesKind,
        registry: &Registry,
    ) -> Result<()> {
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        let flags = inner.state.flags(id.index());
        let delta = DECLARED_COUNTER | DECLARED_DELTA;
        let want = match kind {
            // A series an earlier build fixed as a gauge (StatsD counters and timers were
            // declared gauges) stays one.
            SeriesKind::DeltaCounter | SeriesKind::Distribution if flags & DECLARED_GAUGE != 0 => {
                return Ok(())
            }
            SeriesKind::DeltaCounter => delta,
            SeriesKind::Counter => DECLARED_COUNTER,
            SeriesKind::Gauge => DECLARED_GAUGE,
            SeriesKind::Distribution => DECLARED_DISTRIBUTION,
        };
        let declared = flags & (delta | DECLARED_GAUGE | DECLARED_DISTRIBUTION);
        // A series that already holds samples keeps its kind: a distribution's histograms
        // must hold every sample its buckets count.
        if declared == 0
            && kind == SeriesKind::Distribution
            && !becomes_distribution(flags, inner.kinds.get(id.index()))
        {
            return Err(Error::Rejected(RejectReason::KindMismatch));
        }
        if declared != 0 && declared != want {
            return Err(Error::Rejected(RejectReason::KindMismatch));
        }
        if declared == 0 {
            inner.state.add_flags(id.index(), want)?;
        }
        if let Some(slot) = inner.kinds.get_mut(id.index()) {
            *slot = kind;
        }
        self.note_kind(kind);
        Ok(())
    }

    /// The counter step of one batch, holding the table's lock for it; `None` when no series
    /// is a counter (the common case costs one atomic load, or a registry length check when
    /// naming rules are set).
    pub(crate) fn for_batch(&self, registry: &Registry) -> Option<BatchCounters<'_>> {
        if self.rules.is_empty()
            && !self.any.load(Ordering::Acquire)
            && !self.any_without_latest.load(Ordering::Acquire)
        {
            return None;
        }
        let mut inner = self.lock();
        self.refresh(&mut inner, registry);
        (self.any.load(Ordering::Acquire) || self.any_without_latest.load(Ordering::Acquire))
            .then_some(BatchCounters {
                inner,
                updates: rustc_hash::FxHashMap::default(),
                stored: Vec::new(),
            })
    }

    /// msync of the state file.
    ///
    /// # Errors
    /// [`Error::Io`] on a write-back failure.
    pub(crate) fn flush(&self) -> Result<()> {
        let inner = self.lock();
        inner.state.flush()?;
        inner.journal.as_ref().map_or(Ok(()), CounterJournal::flush)
    }
}

/// Whether a distribution declaration changes a series of declared-kind `flags` and kind
/// `kind` (as reads see it, `None` past the table) into a distribution: only a series no
/// write declared, read as a gauge. One declared a gauge stays one (an earlier build so
/// declared StatsD timers), any other is refused.
fn becomes_distribution(flags: u64, kind: Option<&SeriesKind>) -> bool {
    let declared = DECLARED_COUNTER | DECLARED_DELTA | DECLARED_GAUGE | DECLARED_DISTRIBUTION;
    flags & declared == 0 && kind == Some(&SeriesKind::Gauge)
}

/// A batch's view of the counters, held from the split until its increases are stored and
/// its counters' states advanced ([`BatchCounters::commit`]), under the table's lock.
pub(crate) struct BatchCounters<'a> {
    inner: MutexGuard<'a, Inner>,
    /// Each counter's last sample in the batch so far: its new state once the batch is
    /// stored.
    updates: rustc_hash::FxHashMap<usize, (Timestamp, f64)>,
    /// The counter samples whose increases the batch stores.
    stored: Vec<Sample>,
}

impl BatchCounters<'_> {
    /// What `sample` stores: its value for a gauge or a delta counter; for a counter, the
    /// increase since the counter's previous sample (`None` for its first sample ever,
    /// which only sets the baseline), after which `sample` is the counter's last in this
    /// batch. Beside it, the value its buckets keep as their latest sample's: a gauge's
    /// value, a counter's raw value (its running total), none for a delta counter (no write
    /// carries its running total). States change only at [`BatchCounters::commit`], after
    /// the increases are stored.
    ///
    /// # Errors
    /// [`RejectReason::CounterOutOfOrder`] for a counter sample not newer than the last one
    /// (nothing changes); [`RejectReason::StorageUnavailable`] when the state file cannot
    /// grow to hold the counter.
    #[inline]
    pub(crate) fn apply(
        &mut self,
        sample: &Sample,
    ) -> std::result::Result<Option<(f64, Option<f64>)>, RejectReason> {
        let id = sample.series.index();
        match self.inner.kinds.get(id) {
            Some(SeriesKind::Counter) => {}
            // A delta counter's value is its increase, whenever it was taken.
            Some(SeriesKind::DeltaCounter) => return Ok(Some((sample.value, None))),
            _ => return Ok(Some((sample.value, Some(sample.value)))),
        }
        let last = (self.updates.get(&id).copied()).or_else(|| self.inner.state.last(id));
        if let Some((last_ts, _)) = last {
            if sample.ts <= last_ts {
                return Err(RejectReason::CounterOutOfOrder);
            }
        }
        if let Err(e) = self.inner.state.reserve(id) {
            tracing::error!(error = %e, "cannot record a counter's last value; refusing its sample");
            return Err(RejectReason::StorageUnavailable);
        }
        self.updates.insert(id, (sample.ts, sample.value));
        Ok(last.map(|(_, previous)| {
            let stored = increase(previous, sample.value);
            self.stored
                .push(Sample::new(sample.series, sample.ts, stored));
            (stored, Some(sample.value))
        }))
    }

    /// True when `series` is a distribution: its samples go into histograms
    /// (`WriterPool::write_distributions`), not through [`BatchCounters::apply`].
    #[inline]
    pub(crate) fn is_distribution(&self, series: SeriesId) -> bool {
        self.inner.kinds.get(series.index()) == Some(&SeriesKind::Distribution)
    }

    /// True when `series` keeps no latest sample in its buckets: a distribution (its samples
    /// go into histograms) or a delta counter (no write carries its running total). The
    /// batch reserves it no page of the latest area (see `LatestPages`).
    #[inline]
    pub(crate) fn keeps_no_latest(&self, series: SeriesId) -> bool {
        matches!(
            self.inner.kinds.get(series.index()),
            Some(SeriesKind::Distribution | SeriesKind::DeltaCounter)
        )
    }

    /// True when the batch holds a counter sample (one stored, or a counter's first, which
    /// only sets its baseline): only then is there anything to journal and commit.
    pub(crate) fn changes_counters(&self) -> bool {
        !self.updates.is_empty()
    }

    /// The counter samples whose increases this batch stores.
    pub(crate) fn stored(&self) -> &[Sample] {
        &self.stored
    }

    /// Records the undo of the batch before the writers run: `cells` (the bucket cells the
    /// stored samples change, as they are now) and the state records the batch advances.
    /// From here until [`BatchCounters::commit`], a crash is rolled back at the next open.
    ///
    /// # Errors
    /// [`Error::Io`] when the journal cannot grow; nothing of the batch has landed then.
    pub(crate) fn begin(&mut self, mut cells: Vec<Undo>) -> Result<()> {
        let Inner {
            state,
            journal,
            layout,
            ..
        } = &mut *self.inner;
        let Some(journal) = journal else {
            return Err(Error::ReadOnly(state.path().to_path_buf()));
        };
        cells.extend(self.updates.keys().map(|&id| Undo::State {
            id,
            before: state.record(id),
        }));
        journal.begin(&cells, *layout)
    }

    /// After the writers stored the increases: advances every counter of the batch to its
    /// last sample, then ends the batch's journal record.
    ///
    /// # Errors
    /// [`Error::Io`] when the record cannot be ended: the next open rolls the batch back
    /// (it must not be acknowledged), and the journal refuses further batches until then.
    pub(crate) fn commit(mut self) -> Result<()> {
        let Inner { state, journal, .. } = &mut *self.inner;
        for (&id, &(ts, raw)) in &self.updates {
            // Every record was reserved by `apply`.
            if let Err(e) = state.set_last(id, ts, raw) {
                tracing::error!(error = %e, id, "cannot record a counter's last value");
            }
        }
        journal.as_mut().map_or(Ok(()), CounterJournal::end)
    }
}

/// Undoes a batch that a stopped process left half applied: every recorded cell that holds
/// the batch's adds or fewer gets its content from before the batch back (a cell with more
/// holds later writes that reached the disk after a power loss, and is left alone), and every
/// recorded counter state its record from before the batch.
///
/// The restored files and states are marked changed: the recovery pass flushes them before
/// it empties the journal, so a power loss after the restart cannot keep the empty journal
/// without the rollback.
///
/// # Errors
/// [`Error::CorruptFile`] naming the journal for an entry outside the files it names.
fn roll_back(
    undo: &[Undo],
    state: &CounterStateFile,
    storage: &Storage,
    journal: &Path,
) -> Result<()> {
    let (mut cells, mut skipped) = (0usize, 0usize);
    for entry in undo {
        match *entry {
            Undo::Cell { at, adds, before } => {
                let CellAt { bucket, slot, .. } = at;
                let file = (at.tier < storage.tier_count())
                    .then(|| storage.writable_file(at.tier, at.period_start, at.chunk))
                    .flatten();
                let Some(file) = file else {
                    continue;
                };
                let meta = file.file().meta();
                let last = before.count.checked_add(u64::from(adds));
                let (Some(last), true, true) = (last, bucket < meta.buckets(), slot < meta.slots)
                else {
                    return Err(Error::corrupt(
                        journal,
                        format!("a cell entry lies outside {}", file.file().path().display()),
                    ));
                };
                // No writer runs yet, so a bit the crash left mid-update reads at once.
                let now = file.file().load(bucket, slot).count;
                if (before.count..=last).contains(&now) {
                    file.restore(bucket, slot, &before)?;
                    file.mark_dirty();
                    cells += 1;
                } else {
                    skipped += 1;
                }
            }
            Undo::State { id, before } => state.restore(id, before),
        }
    }
    tracing::warn!(
        cells,
        skipped,
        "the last process stopped while storing a batch of counter samples; rolled it back, so counters and their stored increases agree (the batch was not acknowledged)"
    );
    Ok(())
}

/// How many existing series' kinds [`keep_kinds`] names in its message; the rest are
/// counted.
const KEPT_NAMED: usize = 5;

/// Before `rules` replace `stored`: records the kind of every existing series without a
/// declared or recorded kind whose kind `rules` would change (the kind `stored` give it,
/// which it has had since it was created), syncs the records, and says in the log which
/// series those are (how many, and the first [`KEPT_NAMED`]).
///
/// # Errors
/// [`Error::Io`] when the state file cannot grow or be synced; the stored rules are then
/// not replaced (the open fails before it stores the tiers).
fn keep_kinds(
    state: &mut CounterStateFile,
    stored: &SeriesRules,
    rules: &SeriesRules,
    registry: &Registry,
) -> Result<()> {
    let mut kept: Vec<(usize, bool)> = Vec::new();
    let mut named: Vec<String> = Vec::new();
    registry.for_each_from(0, |id, key| {
        if state.flags(id.index()) & (DECLARED_COUNTER | DECLARED_GAUGE | RULED_MASK) != 0 {
            return;
        }
        let counter = matches_rules(stored, key);
        if counter != matches_rules(rules, key) {
            kept.push((id.index(), counter));
            if named.len() < KEPT_NAMED {
                let (was, would) = if counter {
                    ("counter", "gauge")
                } else {
                    ("gauge", "counter")
                };
                named.push(format!(
                    "{} (a {was}; the new rules would make it a {would})",
                    key.as_str()
                ));
            }
        }
    });
    for &(id, counter) in &kept {
        state.add_flags(id, if counter { RULED_COUNTER } else { RULED_GAUGE })?;
    }
    state.flush()?;
    let changed = describe_rules_change(stored, rules);
    if kept.is_empty() {
        tracing::info!("the [counters] rules changed ({changed}); they apply to series created from now on, and no existing series would have changed kind");
        return Ok(());
    }
    let more = kept.len() - named.len();
    let more = if more > 0 {
        format!(", and {more} more")
    } else {
        String::new()
    };
    tracing::warn!(
        "the [counters] rules changed ({changed}); they apply to series created from now on. {} existing series keep the kind they were created with, which the new rules would have changed: {}{more}. To convert one (its stored buckets too, where that is exact), stop the server and run `tierdb retype SELECTOR --kind counter|gauge` (`--dry-run` first shows what it would do)",
        kept.len(),
        named.join(", ")
    );
    Ok(())
}

/// `names` and `tags` before and after, as a person reads them: `names [] before,
/// ["*.nginx.requests"] now`.
fn describe_rules_change(stored: &SeriesRules, rules: &SeriesRules) -> String {
    let mut parts = Vec::new();
    let (before, now) = (
        crate::config::rule_lists(stored),
        crate::config::rule_lists(rules),
    );
    for ((what, old), (_, new)) in before.into_iter().zip(now) {
        if old != new {
            parts.push(format!("{what} {old} before, {new} now"));
        }
    }
    parts.join("; ")
}

/// The increase from `previous` to `value`: the difference, or after a reset (a drop) the
/// new value itself, counted from zero; never negative.
pub(crate) fn increase(previous: f64, value: f64) -> f64 {
    if value >= previous {
        value - previous
    } else {
        value.max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::increase;

    #[test]
    fn increases_never_go_negative() {
        assert_eq!(increase(10.0, 15.0), 5.0);
        assert_eq!(increase(10.0, 10.0), 0.0);
        // A reset: the counter restarted from zero and has counted 3 since.
        assert_eq!(increase(10.0, 3.0), 3.0);
        assert_eq!(increase(10.0, -2.0), 0.0);
    }
}
