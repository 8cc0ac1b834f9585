//! The bucket value: the rollup of the samples that fell into one interval, its exact
//! merge, and its exact JSON form for the cluster's partial answers (`ExactF64`,
//! `exact_buckets`). Storage keeps it in mapped cells
//! ([`crate::storage::mapped_cell::BucketCell`]); reads, aggregates and the render API fold it
//! without depending on storage.

/// The rollup of every sample that fell into one bucket: enough to answer avg, avg/sec, total,
/// max, min and count without raw data, and, where it is known, the latest sample. Empty
/// (`count == 0`) is distinct from zero.
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
    /// The bucket's latest sample, so a read can answer the value a series had at a time
    /// (PromQL's instant selector) and when it was taken; `None` when it is not known: a
    /// file written before buckets kept it, a sample folded in without its time, or a
    /// bucket put back from an image without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<Last>,
}

/// A bucket's latest sample. For a counter (stored as increases) `value` is the raw counter
/// value the sample carried, its running total, not the increase the bucket folded in.
///
/// Its time is kept sign-flipped, never zero, so that `Option<Last>` needs no flag of its
/// own: a [`Bucket`] is 48 bytes rather than 56, which a sum over many series reads and
/// writes for every bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Last {
    /// The sample's value.
    pub value: f64,
    /// When it was taken, unix seconds with the sign bit flipped, so that it is never zero
    /// (`i64::MIN`, which no sample carries, is the one time it cannot hold).
    at: std::num::NonZeroU64,
}

/// The sign bit, flipped in [`Last`]'s time.
const SIGN: u64 = 1 << 63;

/// A [`Bucket`]'s size: four words and the latest sample's two.
const _: () = assert!(std::mem::size_of::<Bucket>() == 48);

impl Last {
    /// The sample `value` taken at `ts` (unix seconds: within the bucket's interval). The
    /// earliest time, `i64::MIN`, is taken as the second after it.
    #[inline]
    pub const fn new(value: f64, ts: crate::time::Timestamp) -> Last {
        let ts = if ts == i64::MIN { ts + 1 } else { ts };
        Last {
            value,
            at: std::num::NonZeroU64::new(ts as u64 ^ SIGN).expect("only i64::MIN flips to zero"),
        }
    }

    /// When it was taken, unix seconds.
    #[inline]
    pub fn ts(&self) -> crate::time::Timestamp {
        (self.at.get() ^ SIGN) as i64
    }

    /// Which of two latest samples of one interval is the latest: the later one, and of two
    /// taken at the same second `newer`, the one folded in after (arrival order, as a
    /// series that sends twice a second leaves its second value).
    #[inline]
    pub fn latest(self, newer: Last) -> Last {
        // Flipping the sign bit keeps the order: the times compare as their words do.
        if newer.at >= self.at {
            newer
        } else {
            self
        }
    }
}

/// The JSON form: `{"value": …, "ts": …}`.
impl serde::Serialize for Last {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = serializer.serialize_struct("Last", 2)?;
        out.serialize_field("value", &self.value)?;
        out.serialize_field("ts", &self.ts())?;
        out.end()
    }
}

impl Bucket {
    /// A bucket that saw no sample.
    pub const EMPTY: Bucket = Bucket {
        count: 0,
        total: 0.0,
        min: 0.0,
        max: 0.0,
        last: None,
    };

    /// True when no sample fell into the bucket.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Folds one sample in whose time is not known: the latest sample is then unknown.
    #[inline]
    pub fn add(&mut self, value: f64) {
        self.fold(value);
        self.last = None;
    }

    /// Folds in the sample `value` taken at `last.ts()`, whose latest-sample value is
    /// `last.value` (the sample's own, or a counter's raw value). The latest sample stays
    /// unknown when an earlier one's was not known, since that one may be later.
    #[inline]
    pub fn add_at(&mut self, value: f64, last: Last) {
        self.last = if self.count == 0 {
            Some(last)
        } else {
            self.last.map(|l| l.latest(last))
        };
        self.fold(value);
    }

    /// Count, total, min and max of one more sample. Branch-free min/max (`maxsd`), as
    /// measured in perf-notes.
    #[inline(always)]
    fn fold(&mut self, value: f64) {
        let first = self.count == 0;
        self.total = if first { value } else { self.total + value };
        self.min = if first { value } else { self.min.min(value) };
        self.max = if first { value } else { self.max.max(value) };
        self.count += 1;
    }

    /// Folds another bucket in exactly: counts and totals add, min and max fold, and the
    /// latest sample is the later of the two ([`Last::latest`], `other` taken as the newer
    /// at a tie), unknown when either's is.
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
        self.last = match (self.last, other.last) {
            (Some(a), Some(b)) => Some(a.latest(b)),
            _ => None,
        };
    }
}

/// An f64 that survives JSON bit for bit: finite values as numbers (serde_json writes the
/// shortest text that reads back to the same bits, and reads it back exactly with its
/// `float_roundtrip` feature, which Cargo.toml turns on), the others as strings, since JSON
/// has no number for them. Bucket floats need the strings: a sum can overflow to an
/// infinity, and an empty bucket's min and max are whatever its cell holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExactF64(pub(crate) f64);

impl serde::Serialize for ExactF64 {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        let x = self.0;
        if x.is_finite() {
            serializer.serialize_f64(x)
        } else if x.is_nan() {
            serializer.serialize_str("NaN")
        } else if x > 0.0 {
            serializer.serialize_str("inf")
        } else {
            serializer.serialize_str("-inf")
        }
    }
}

impl<'de> serde::Deserialize<'de> for ExactF64 {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<ExactF64, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ExactF64;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, \"inf\", \"-inf\" or \"NaN\"")
            }
            fn visit_f64<E>(self, x: f64) -> std::result::Result<ExactF64, E> {
                Ok(ExactF64(x))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> std::result::Result<ExactF64, E> {
                exact_integer(n as f64, n as i128)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> std::result::Result<ExactF64, E> {
                exact_integer(n as f64, n as i128)
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<ExactF64, E> {
                match s {
                    "inf" => Ok(ExactF64(f64::INFINITY)),
                    "-inf" => Ok(ExactF64(f64::NEG_INFINITY)),
                    "NaN" => Ok(ExactF64(f64::NAN)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// An integer read where a float was written (by a writer that prints `3.0` as `3`): taken
/// only when the float holds it exactly.
fn exact_integer<E: serde::de::Error>(x: f64, n: i128) -> std::result::Result<ExactF64, E> {
    if x as i128 == n {
        Ok(ExactF64(x))
    } else {
        Err(E::custom(format!("{n} is not exact as a float")))
    }
}

/// A list of buckets as JSON, bit for bit: each bucket `[count, total, min, max]` with its
/// floats as [`ExactF64`]; the latest sample is not carried (it reads back unknown), and
/// travels apart, where the list's owner puts it ([`latest_of`], [`put_latest`]). For
/// `#[serde(with = "crate::bucket::exact_buckets")]`; only the cluster's answers (a server
/// feature) carry bucket lists.
#[cfg(feature = "server")]
pub(crate) mod exact_buckets {
    use serde::ser::SerializeTuple;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{Bucket, ExactF64, Last};
    use crate::time::Timestamp;

    /// A bucket's latest sample on the wire: its position among the buckets, its value and
    /// unix seconds.
    pub(crate) type WireLatest = (u32, ExactF64, Timestamp);

    /// The latest samples `buckets` know, for the wire beside them: apart from the buckets,
    /// in a field a node of a build before buckets kept them ignores, and that reads back
    /// empty (every latest sample unknown) from such a node's answer.
    pub(crate) fn latest_of(buckets: &[Bucket]) -> Vec<WireLatest> {
        (buckets.iter().enumerate())
            .filter_map(|(i, b)| {
                b.last
                    .map(|last| (i as u32, ExactF64(last.value), last.ts()))
            })
            .collect()
    }

    /// Puts the latest samples [`latest_of`] gave back into `buckets`.
    ///
    /// # Errors
    /// The position of a latest sample past the buckets.
    pub(crate) fn put_latest(
        buckets: &mut [Bucket],
        latest: Vec<WireLatest>,
    ) -> std::result::Result<(), u32> {
        for (i, value, ts) in latest {
            let bucket = buckets.get_mut(i as usize).ok_or(i)?;
            bucket.last = Some(Last::new(value.0, ts));
        }
        Ok(())
    }

    /// One bucket on the wire.
    struct Exact<'a>(&'a Bucket);

    impl Serialize for Exact<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let b = self.0;
            let mut tuple = serializer.serialize_tuple(4)?;
            tuple.serialize_element(&b.count)?;
            tuple.serialize_element(&ExactF64(b.total))?;
            tuple.serialize_element(&ExactF64(b.min))?;
            tuple.serialize_element(&ExactF64(b.max))?;
            tuple.end()
        }
    }

    /// Writes `buckets` as a sequence of `[count, total, min, max]`.
    ///
    /// # Errors
    /// The serializer's.
    pub(crate) fn serialize<S: Serializer>(
        buckets: &[Bucket],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(buckets.iter().map(Exact))
    }

    /// Reads what [`serialize`] wrote.
    ///
    /// # Errors
    /// The deserializer's, or a float that is not exact.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Bucket>, D::Error> {
        let wire = Vec::<(u64, ExactF64, ExactF64, ExactF64)>::deserialize(deserializer)?;
        Ok(wire
            .into_iter()
            .map(|(count, total, min, max)| Bucket {
                count,
                total: total.0,
                min: min.0,
                max: max.0,
                last: None,
            })
            .collect())
    }
}
