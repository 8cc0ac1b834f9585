//! The bucket value: the rollup of the samples that fell into one interval, and its exact
//! merge. Storage keeps it in mapped cells ([`crate::storage::bucket::BucketCell`]); reads,
//! aggregates and the render API fold it without depending on storage.

/// The rollup of every sample that fell into one bucket: enough to answer avg, avg/sec, total,
/// max, min and count without raw data. Empty (`count == 0`) is distinct from zero.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Bucket {
    /// Number of samples folded in (MMS `num_samples`).
    pub count: u64,
    /// Sum of the samples (MMS `total`).
    pub total: f64,
    /// Smallest sample; meaningless when `count == 0`.
    pub min: f64,
    /// Largest sample; meaningless when `count == 0`.
    pub max: f64,
}

impl Bucket {
    /// A bucket that saw no sample.
    pub const EMPTY: Bucket = Bucket {
        count: 0,
        total: 0.0,
        min: 0.0,
        max: 0.0,
    };

    /// True when no sample fell into the bucket.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Folds one sample in. Branch-free min/max (`maxsd`), as measured in perf-notes.
    #[inline]
    pub fn add(&mut self, value: f64) {
        let first = self.count == 0;
        self.total = if first { value } else { self.total + value };
        self.min = if first { value } else { self.min.min(value) };
        self.max = if first { value } else { self.max.max(value) };
        self.count += 1;
    }

    /// Folds another bucket in exactly: counts and totals add, min and max fold.
    #[inline]
    pub fn merge(&mut self, other: &Bucket) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *other;
            return;
        }
        self.count += other.count;
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }
}
