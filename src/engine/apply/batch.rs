//! What one message of a log carries for [`crate::engine::Engine::apply`]: samples, and
//! observations that arrived bucketed, with their series written out by canonical key (an
//! engine's series ids mean nothing to another engine, nor to a log), and the kind a write
//! declared where it declared one. A cluster publishes one per partition and write.

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use crate::counter::SeriesKind;
use crate::histogram::Observed;
use crate::registry::text_hash;
use crate::time::Timestamp;

/// Samples by series key, as a log carries them: in a cluster, one partition's samples,
/// published by the node that took the write and applied by the partition's owners. Each
/// key's samples keep the order they were written in (the
/// wire format groups samples by key, which changes nothing: different keys never share a
/// bucket or a counter), so every owner applying the same message gets the same buckets,
/// bit for bit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleBatch {
    /// The batch's series, each once.
    pub series: Vec<BatchSeries>,
    /// The samples, in write order.
    pub samples: Vec<BatchSample>,
    /// Observations that arrived bucketed (native and OTLP histograms), in write order: each
    /// names a series written as a distribution. They are stored after the batch's samples.
    pub observed: Vec<BatchObserved>,
}

/// One bucketed observation of a [`SampleBatch`]: the buckets, sum and extremes of a
/// native or OTLP histogram point.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchObserved {
    /// Index into [`SampleBatch::series`].
    pub series: u32,
    /// Unix seconds.
    pub ts: Timestamp,
    /// The observations.
    pub observed: Observed,
}

/// One series of a [`SampleBatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSeries {
    /// Canonical key text, as [`crate::SeriesKey`] prints it.
    pub key: String,
    /// The kind the write declared (Influx and JSON writes may), or `None`.
    pub kind: Option<SeriesKind>,
}

/// One sample of a [`SampleBatch`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchSample {
    /// Index into [`SampleBatch::series`].
    pub series: u32,
    /// Unix seconds.
    pub ts: Timestamp,
    /// The value, finite (the edge refuses the others).
    pub value: f64,
}

/// Where each key of a batch being built sits in its [`SampleBatch::series`]: the places,
/// hashed by key text, which the batch's series hold once.
#[derive(Clone, Debug, Default)]
pub struct KeyIndex(HashTable<u32>);

impl SampleBatch {
    /// Appends a sample of `key`, adding the series on its first sample. `index` maps keys
    /// to their place in [`SampleBatch::series`] for the batch being built.
    pub fn push(
        &mut self,
        index: &mut KeyIndex,
        key: &str,
        kind: Option<SeriesKind>,
        ts: Timestamp,
        value: f64,
    ) {
        let series = self.series_of(index, key, kind);
        self.push_sample(series, ts, value);
    }

    /// The place in [`SampleBatch::series`] of `key` written with `kind`, added (and
    /// indexed) when the batch has no such series yet: a key first written with another
    /// kind gets a place of its own, which its later samples take.
    pub fn series_of(&mut self, index: &mut KeyIndex, key: &str, kind: Option<SeriesKind>) -> u32 {
        if let Some(place) = self.index_place(index, key, kind) {
            return place;
        }
        self.series.push(BatchSeries {
            key: key.to_string(),
            kind,
        });
        self.series.len() as u32 - 1
    }

    /// The place of `key` written with `kind`, if the batch has it; else indexes `key` at
    /// the place the caller pushes next (the end of [`SampleBatch::series`]).
    fn index_place(
        &self,
        index: &mut KeyIndex,
        key: &str,
        kind: Option<SeriesKind>,
    ) -> Option<u32> {
        let series = &self.series;
        let next = series.len() as u32;
        let entry = index.0.entry(
            text_hash(key),
            |&i| series[i as usize].key == key,
            |&i| text_hash(&series[i as usize].key),
        );
        match entry {
            Entry::Occupied(mut found) => {
                let place = *found.get();
                if series[place as usize].kind == kind {
                    return Some(place);
                }
                *found.get_mut() = next;
            }
            Entry::Vacant(vacant) => {
                vacant.insert(next);
            }
        }
        None
    }

    /// Appends a sample of the series at `series` in [`SampleBatch::series`], a place
    /// [`SampleBatch::series_of`] gave.
    pub fn push_sample(&mut self, series: u32, ts: Timestamp, value: f64) {
        self.samples.push(BatchSample { series, ts, value });
    }

    /// Appends bucketed observations of `key`, a distribution, adding the series on its first
    /// sample.
    pub fn push_observed(
        &mut self,
        index: &mut KeyIndex,
        key: &str,
        ts: Timestamp,
        observed: Observed,
    ) {
        let series = self.series_of(index, key, Some(SeriesKind::Distribution));
        self.observed.push(BatchObserved {
            series,
            ts,
            observed,
        });
    }

    /// Every sample's and observation's series (its place in [`SampleBatch::series`]),
    /// time and value (an observation's sum), the samples first: what lands where.
    pub(super) fn points(&self) -> impl Iterator<Item = (u32, Timestamp, f64)> + '_ {
        (self.samples.iter().map(|s| (s.series, s.ts, s.value))).chain(
            self.observed
                .iter()
                .map(|o| (o.series, o.ts, o.observed.sum)),
        )
    }

    /// How many samples and observations the batch holds.
    pub fn len(&self) -> usize {
        self.samples.len() + self.observed.len()
    }

    /// Appends `other`'s samples after this batch's, in their order; `index` is this
    /// batch's key index, as [`SampleBatch::push`] takes it.
    pub fn append(&mut self, index: &mut KeyIndex, other: SampleBatch) {
        let mut remap = Vec::with_capacity(other.series.len());
        for series in other.series {
            let place = self.index_place(index, &series.key, series.kind);
            remap.push(place.unwrap_or_else(|| {
                self.series.push(series);
                self.series.len() as u32 - 1
            }));
        }
        self.samples
            .extend(other.samples.into_iter().map(|sample| BatchSample {
                series: remap[sample.series as usize],
                ..sample
            }));
        self.observed
            .extend(other.observed.into_iter().map(|observed| BatchObserved {
                series: remap[observed.series as usize],
                ..observed
            }));
    }

    /// True when there is no sample and no observation.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty() && self.observed.is_empty()
    }
}
