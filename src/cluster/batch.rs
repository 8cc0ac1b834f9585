//! What one published message carries: samples of one partition with their series written
//! out by canonical key (a node's series ids mean nothing on another node), and the kind a
//! write declared where it declared one.

use crate::counter::SeriesKind;
use crate::time::Timestamp;

/// Samples of one partition, as published by the node that took the write and applied by
/// the partition's owners. Each key's samples keep the order they were written in (the
/// wire format groups samples by key, which changes nothing: different keys never share a
/// bucket or a counter), so every owner applying the same message gets the same buckets,
/// bit for bit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleBatch {
    /// The batch's series, each once.
    pub series: Vec<BatchSeries>,
    /// The samples, in write order.
    pub samples: Vec<BatchSample>,
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

/// Where each key of a batch being built sits in its [`SampleBatch::series`].
pub type KeyIndex = rustc_hash::FxHashMap<String, u32>;

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
        match index.get(key) {
            Some(&i) if self.series[i as usize].kind == kind => i,
            _ => {
                let i = self.series.len() as u32;
                self.series.push(BatchSeries {
                    key: key.to_string(),
                    kind,
                });
                index.insert(key.to_string(), i);
                i
            }
        }
    }

    /// Appends a sample of the series at `series` in [`SampleBatch::series`], a place
    /// [`SampleBatch::series_of`] gave.
    pub fn push_sample(&mut self, series: u32, ts: Timestamp, value: f64) {
        self.samples.push(BatchSample { series, ts, value });
    }

    /// Appends `other`'s samples after this batch's, in their order; `index` is this
    /// batch's key index, as [`SampleBatch::push`] takes it.
    pub fn append(&mut self, index: &mut KeyIndex, other: SampleBatch) {
        let mut remap = Vec::with_capacity(other.series.len());
        for series in other.series {
            let i = match index.get(&series.key) {
                Some(&i) if self.series[i as usize].kind == series.kind => i,
                _ => {
                    let i = self.series.len() as u32;
                    index.insert(series.key.clone(), i);
                    self.series.push(series);
                    i
                }
            };
            remap.push(i);
        }
        self.samples
            .extend(other.samples.into_iter().map(|sample| BatchSample {
                series: remap[sample.series as usize],
                ..sample
            }));
    }

    /// True when there is no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}
