//! The leaf reads of a PromQL evaluation on a cluster ([`PromRead`]), as they travel to
//! the partitions' owners and as an owner answers them over its own partitions
//! ([`answer_over`]): the series a selector picks (their keys, with their kinds and, with
//! `[[set]]`s, their sets), their buckets on the tier and range the asker chose, a
//! distribution's histograms, or raw points. Each answer is [`Charged`] with what the
//! owner's scans read, so the asker charges the request's budget as one engine would.
//!
//! A series is named on the wire by its canonical key (its id differs between engines);
//! matchers travel as `(op, name, value)` with a regex's anchored source, since the parser's
//! types do not deserialize.

use std::borrow::Cow;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::partial::Charged;
use crate::bucket::exact_buckets::{self, WireLatest};
use crate::bucket::{Bucket, ExactF64};
use crate::config::TierSpec;
use crate::counter::SeriesKind;
use crate::error::{Error, Result};
use crate::histogram::Histogram;
use crate::promql::KeyFilter;
use crate::read::aggregate::Fold;
use crate::read::budget::ReadBudget;
use crate::read::query::Display;
use crate::read::reader::Reader;
use crate::read::store::cache::{CachedStore, RenderCache};
use crate::read::store::{
    tiers_for, BucketHistogram, LabelMatcher, Selection, SeriesFilter, SeriesRef, Store,
};
use crate::render::{AnyPath, PathPattern, TimerFilter};
use crate::time::Timestamp;

/// The PromQL reads an owner answers for its partitions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum PromRead {
    /// The series matching all matchers of at least one set.
    Select(Vec<Vec<LabelMatcher>>),
    /// [`PromRead::Select`] with each series' tier set (`[[set]]`s).
    SelectSets(Vec<Vec<LabelMatcher>>),
    /// The series another selection keeps (render's path patterns and timer paths), each
    /// with its tier set.
    SelectWhere(Selection),
    /// The buckets of those of `keys` in the owner's partitions, on tier `tier` from
    /// `from` (aligned down to its resolution) to before `to`.
    Buckets {
        /// Canonical keys; an answer names each by its index here.
        keys: Vec<String>,
        /// The tier's name.
        tier: String,
        from: Timestamp,
        to: Timestamp,
        /// With `[[set]]`s, the tier's resolution in seconds instead: each owner reads each
        /// series through its set's tier of that resolution, as one engine does.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolution: Option<u64>,
        /// The first second read, the tier's window at the asker's clock (a render's
        /// grid); absent, the owner's own window of the tier.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<Timestamp>,
    },
    /// The histograms of those of `keys` in the owner's partitions that are distributions,
    /// one per bucket of tier `tier` from `from` (aligned down to its resolution) to before
    /// `to`.
    Histograms {
        /// Canonical keys; an answer names each by its index here.
        keys: Vec<String>,
        /// The tier's name.
        tier: String,
        from: Timestamp,
        to: Timestamp,
        /// As [`PromRead::Buckets`]'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolution: Option<u64>,
        /// The first second read, the tier's window at the asker's clock (a render's
        /// grid); absent, the owner's own window of the tier.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<Timestamp>,
    },
    /// The values of those of `keys` in the owner's partitions (each shown as `display`
    /// shows a bucket), folded per point as [`PromRead::Buckets`] would read their buckets:
    /// render's one-pass sumSeries and kin.
    Fold {
        /// Canonical keys (a key listed twice folds twice).
        keys: Vec<String>,
        /// The tier's name.
        tier: String,
        from: Timestamp,
        to: Timestamp,
        /// As [`PromRead::Buckets`]'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolution: Option<u64>,
        /// As [`PromRead::Buckets`]'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<Timestamp>,
        display: Display,
    },
    /// The raw tier's points of those of `keys` in the owner's partitions, in `[from, to)`.
    Raw {
        keys: Vec<String>,
        from: Timestamp,
        to: Timestamp,
    },
}

/// An owner's answer to a [`PromRead`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum PromAnswer {
    /// Canonical keys, each with whether it is a counter and whether a distribution; the
    /// scans charged.
    Selected(Charged<Vec<(String, bool, bool)>>),
    /// The same, each with its tier set.
    SelectedSets(Charged<Vec<(String, bool, bool, usize)>>),
    /// Per key found, its index and buckets.
    Buckets(Vec<IndexedBuckets>),
    /// Per distribution found, its index and histograms.
    Histograms(Vec<IndexedHistograms>),
    /// Per key found, its index and points; `None` when the owner's raw tier does not hold
    /// the range. The points charged.
    Raw(Charged<Option<Vec<IndexedPoints>>>),
    /// The fold of the keys found, per point (empty when it holds none of them); `None`
    /// when an engine has no one-pass fold of them (series of several tier sets).
    Fold(Option<Vec<Fold>>),
}

/// One series' buckets on the wire, bit for bit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct IndexedBuckets {
    pub(super) index: u32,
    #[serde(with = "crate::bucket::exact_buckets")]
    pub(super) buckets: Vec<Bucket>,
    /// The buckets' latest samples where known: (position among `buckets`, value, unix
    /// seconds). Apart from `buckets`, so a node of a build before buckets kept them reads
    /// the answer (it ignores the field) and one reading such a node's answer finds them
    /// unknown (the field absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    latest: Vec<WireLatest>,
}

impl IndexedBuckets {
    /// Series `index`'s `buckets` for the wire.
    fn new(index: u32, buckets: Vec<Bucket>) -> IndexedBuckets {
        IndexedBuckets {
            index,
            latest: exact_buckets::latest_of(&buckets),
            buckets,
        }
    }

    /// The buckets with their latest samples put back.
    ///
    /// # Errors
    /// [`Error::Cluster`] for a latest sample of a bucket the answer does not hold.
    pub(super) fn into_buckets(self) -> Result<Vec<Bucket>> {
        let mut buckets = self.buckets;
        exact_buckets::put_latest(&mut buckets, self.latest).map_err(|i| {
            Error::Cluster(format!(
                "an owner answered the latest sample of bucket {i}, past its buckets"
            ))
        })?;
        Ok(buckets)
    }
}

/// One series' bucket histograms on the wire, bit for bit: per bucket, `null` or the
/// observations' sum and the histogram's stored encoding.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct IndexedHistograms {
    pub(super) index: u32,
    histograms: Vec<Option<(ExactF64, Vec<u8>)>>,
}

impl IndexedHistograms {
    fn new(index: u32, histograms: &[Option<BucketHistogram>]) -> IndexedHistograms {
        let wire = (histograms.iter())
            .map(|h| {
                h.as_ref().map(|h| {
                    let mut bytes = Vec::with_capacity(h.histogram.encoded_len());
                    h.histogram.encode(&mut bytes);
                    (ExactF64(h.sum), bytes)
                })
            })
            .collect();
        IndexedHistograms {
            index,
            histograms: wire,
        }
    }

    /// The histograms, decoded.
    ///
    /// # Errors
    /// [`Error::Cluster`] for a histogram that does not decode whole.
    pub(super) fn decode(self) -> Result<Vec<Option<BucketHistogram>>> {
        (self.histograms.into_iter())
            .map(|h| {
                let Some((sum, bytes)) = h else {
                    return Ok(None);
                };
                match Histogram::decode(&bytes) {
                    Ok((histogram, used)) if used == bytes.len() => Ok(Some(BucketHistogram {
                        histogram,
                        sum: sum.0,
                    })),
                    _ => Err(Error::Cluster(
                        "an owner answered a histogram that does not decode".into(),
                    )),
                }
            })
            .collect()
    }
}

/// One series' raw points on the wire, bit for bit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct IndexedPoints {
    pub(super) index: u32,
    pub(super) points: Vec<(Timestamp, ExactF64)>,
}

/// An owner's answer over `readers`, the engines of `partitions` (in that order), of a
/// cluster of `all` partitions, within `budget`; the bucket reads of a render's grid (those
/// given a window) through the node's render `cache`.
///
/// # Errors
/// A matcher that does not compile, an unknown tier, the budget's refusal, a read's error.
pub(crate) fn answer_over(
    (readers, cache): (&[Reader<'_>], &RenderCache),
    partitions: &[u32],
    all: u32,
    read: PromRead,
    budget: &ReadBudget,
) -> Result<PromAnswer> {
    // The keys of `keys` each engine holds: per reader, (index in keys, series, kind).
    let held = |keys: &[String]| -> Vec<Vec<(u32, SeriesRef, SeriesKind)>> {
        let mut per_reader = vec![Vec::new(); readers.len()];
        for (index, key) in keys.iter().enumerate() {
            let partition = super::partition_of(key, all);
            let Some(at) = partitions.iter().position(|&p| p == partition) else {
                continue;
            };
            let reader = &readers[at];
            let Some(id) = reader.registry().get(key) else {
                continue;
            };
            let series = SeriesRef {
                id: id.0,
                set: reader.registry().placement(id).set(),
            };
            per_reader[at].push((index as u32, series, reader.series_kind(id)));
        }
        per_reader
    };
    Ok(match read {
        PromRead::Select(sets) => {
            let found = select_over(readers, sets, budget)?;
            let found = (found.into_iter())
                .map(|(key, counter, distribution, _)| (key, counter, distribution))
                .collect();
            PromAnswer::Selected(Charged::new(found, budget))
        }
        PromRead::SelectSets(sets) => {
            PromAnswer::SelectedSets(Charged::new(select_over(readers, sets, budget)?, budget))
        }
        PromRead::SelectWhere(selection) => {
            let filter = filter_of(&selection)?;
            let found = select_by(readers, filter.as_ref(), budget)?;
            PromAnswer::SelectedSets(Charged::new(found, budget))
        }
        PromRead::Buckets {
            keys,
            tier,
            from,
            to,
            resolution,
            window,
        } => {
            let mut out = Vec::new();
            for (reader, held) in readers.iter().zip(held(&keys)) {
                let series: Vec<SeriesRef> = held.iter().map(|(_, s, _)| *s).collect();
                if series.is_empty() {
                    continue;
                }
                let spec = tier_of(reader, &series, &tier, resolution)?;
                let cached = CachedStore::new(*reader, cache);
                let read = cached.buckets(&series, &spec, (from, to), window)?;
                out.extend(
                    (held.iter().zip(read))
                        .map(|((index, _, _), buckets)| IndexedBuckets::new(*index, buckets)),
                );
            }
            PromAnswer::Buckets(out)
        }
        PromRead::Histograms {
            keys,
            tier,
            from,
            to,
            resolution,
            window,
        } => {
            let out = Mutex::new(Vec::new());
            for (reader, held) in readers.iter().zip(held(&keys)) {
                let (indexes, series): (Vec<u32>, Vec<SeriesRef>) = (held.into_iter())
                    .filter(|(_, _, kind)| *kind == SeriesKind::Distribution)
                    .map(|(index, series, _)| (index, series))
                    .unzip();
                if series.is_empty() {
                    continue;
                }
                let spec = tier_of(reader, &series, &tier, resolution)?;
                let visit = |i: usize, histograms: &[Option<BucketHistogram>]| {
                    let part = IndexedHistograms::new(indexes[i], histograms);
                    out.lock().unwrap_or_else(|e| e.into_inner()).push(part);
                };
                reader.visit_histograms(&series, &spec, (from, to), window, &visit)?;
            }
            PromAnswer::Histograms(out.into_inner().unwrap_or_else(|e| e.into_inner()))
        }
        PromRead::Fold {
            keys,
            tier,
            from,
            to,
            resolution,
            window,
            display,
        } => {
            let mut merged: Vec<Fold> = Vec::new();
            for (reader, held) in readers.iter().zip(held(&keys)) {
                let series: Vec<SeriesRef> = held.iter().map(|(_, s, _)| *s).collect();
                if series.is_empty() {
                    continue;
                }
                let spec = tier_of(reader, &series, &tier, resolution)?;
                let cached = CachedStore::new(*reader, cache);
                let Some(folds) = cached.fold(&series, &spec, (from, to), window, display)? else {
                    return Ok(PromAnswer::Fold(None));
                };
                merge_folds(&mut merged, folds)?;
            }
            PromAnswer::Fold(Some(merged))
        }
        PromRead::Raw { keys, from, to } => {
            let mut out = Vec::new();
            for (reader, held) in readers.iter().zip(held(&keys)) {
                let series: Vec<SeriesRef> = held.iter().map(|(_, s, _)| *s).collect();
                let reached = reader.raw_reaches(from);
                let read = match reached {
                    true => Store::raw(reader, &series, from, to, budget)?,
                    false => None,
                };
                let Some(read) = read else {
                    return Ok(PromAnswer::Raw(Charged::new(None, budget)));
                };
                out.extend(
                    (held.iter().zip(read)).map(|((index, _, _), points)| IndexedPoints {
                        index: *index,
                        points: points.into_iter().map(|(t, v)| (t, ExactF64(v))).collect(),
                    }),
                );
            }
            PromAnswer::Raw(Charged::new(Some(out), budget))
        }
    })
}

/// `folds` merged into `merged` point by point (`merged` empty: none yet).
///
/// # Errors
/// [`Error::Cluster`] when they hold different numbers of points.
pub(super) fn merge_folds(merged: &mut Vec<Fold>, folds: Vec<Fold>) -> Result<()> {
    if merged.is_empty() {
        *merged = folds;
        return Ok(());
    }
    if folds.is_empty() {
        return Ok(());
    }
    if folds.len() != merged.len() {
        return Err(Error::Cluster(format!(
            "folds of {} and {} points cannot be merged",
            merged.len(),
            folds.len()
        )));
    }
    merged.iter_mut().zip(&folds).for_each(|(m, f)| m.merge(f));
    Ok(())
}

/// The series of every engine in `readers` that match one of `sets` (matchers as data),
/// each as its key, whether a counter, whether a distribution, and its tier set; the scans
/// charged to `budget`.
///
/// # Errors
/// A matcher that does not compile; the budget's refusal.
fn select_over(
    readers: &[Reader<'_>],
    sets: Vec<Vec<LabelMatcher>>,
    budget: &ReadBudget,
) -> Result<Vec<(String, bool, bool, usize)>> {
    let filter = KeyFilter::of_matchers(&sets)?;
    select_by(readers, &filter, budget)
}

/// The filter of `selection`, as another node sent it: the query language's that made it.
///
/// # Errors
/// A matcher or pattern that does not compile.
fn filter_of(selection: &Selection) -> Result<Box<dyn SeriesFilter>> {
    Ok(match selection {
        Selection::Matchers(wire) => Box::new(KeyFilter::of_matchers(wire)?),
        Selection::Paths(patterns) => Box::new(AnyPath(Cow::Owned(
            (patterns.iter())
                .map(|p| PathPattern::parse(p))
                .collect::<Result<_>>()?,
        ))),
        Selection::TimerPaths(pattern) => Box::new(TimerFilter::new(PathPattern::parse(pattern)?)),
    })
}

/// The series of every engine in `readers` that `filter` keeps, each as its key, whether
/// a counter, whether a distribution, and its tier set; the scans charged to `budget`.
///
/// # Errors
/// The budget's refusal.
fn select_by(
    readers: &[Reader<'_>],
    filter: &dyn SeriesFilter,
    budget: &ReadBudget,
) -> Result<Vec<(String, bool, bool, usize)>> {
    let mut found = Vec::new();
    for reader in readers {
        for s in Store::select(reader, filter, budget)? {
            found.push((
                s.key.as_str().to_owned(),
                s.kind == SeriesKind::Counter,
                s.kind == SeriesKind::Distribution,
                s.set,
            ));
        }
    }
    Ok(found)
}

/// The tier an owner reads `series` (found in the engine of `reader`) through: the one
/// named `tier`, or with `[[set]]`s the one of `resolution` among the tiers a read of them
/// chooses from ([`tiers_for`]), which reads each series through its set's tier of that
/// resolution.
///
/// # Errors
/// [`Error::UnknownTier`] when there is none; as [`tiers_for`].
fn tier_of(
    reader: &Reader<'_>,
    series: &[SeriesRef],
    tier: &str,
    resolution: Option<u64>,
) -> Result<TierSpec> {
    let found = match resolution {
        None => (reader.config().tier_index(tier)).map(|at| reader.config().tiers[at].clone()),
        Some(secs) => {
            let mut sets: Vec<usize> = series.iter().map(|s| s.set).collect();
            sets.sort_unstable();
            sets.dedup();
            (tiers_for(reader.whole_config(), &sets, Reader::now(reader))?
                .tiers
                .iter())
            .find(|t| t.resolution.secs() == secs)
            .cloned()
        }
    };
    found.ok_or_else(|| Error::UnknownTier(tier.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::Last;
    use crate::read::store::SeriesFilter;
    use crate::registry::SeriesKey;

    /// A selector's matchers travel as a store's `Selection` in the JSON nodes of earlier
    /// builds sent (`{"op", "name", "value"}`, a regex as its anchored source), and the owner
    /// compiles them back into a filter that keeps the same series as the asker's.
    #[test]
    fn a_selection_travels_as_before_and_keeps_the_same_series() {
        let text = r#"{__name__=~"cpu.*",host!="b" or __graphite__="m.*"}"#;
        let sets = crate::promql::parse_selector(text).unwrap();
        let asker = KeyFilter::new(&sets).unwrap();
        let Selection::Matchers(wire) = asker.selection() else {
            panic!("matchers select by matchers");
        };
        let json = serde_json::to_string(&PromRead::Select(wire)).unwrap();
        assert_eq!(
            json,
            r#"{"Select":[[{"op":"=~","name":"__name__","value":"^(?:cpu.*)$"},{"op":"!=","name":"host","value":"b"}],[{"op":"=","name":"__graphite__","value":"m.*"}]]}"#
        );
        let PromRead::Select(back) = serde_json::from_str(&json).unwrap() else {
            panic!("another read: {json}");
        };
        let owner = KeyFilter::of_matchers(&back).unwrap();
        for (key, kept) in [
            ("cpu.user;host=a", true),
            ("cpu.user;host=b", false),
            ("mem;host=b", false),
            ("m.free;host=b", true),
        ] {
            let key = SeriesKey::parse(key).unwrap();
            assert_eq!(SeriesFilter::matches(&asker, &key.view()), kept, "{key}");
            assert_eq!(SeriesFilter::matches(&owner, &key.view()), kept, "{key}");
        }
    }

    /// A cluster node's PromQL read of another node's buckets keeps their latest samples, so
    /// an instant selector answers there as on the owner; an answer without the field (a
    /// node of a build before buckets kept them) reads them unknown.
    #[test]
    fn buckets_cross_the_wire_with_their_latest_samples() {
        let mut known = Bucket::EMPTY;
        known.add_at(2.5, Last::new(2.5, 1_000));
        known.add_at(-0.0, Last::new(-0.0, 1_030));
        let mut unknown = Bucket::EMPTY;
        unknown.add(7.0);
        let buckets = vec![known, Bucket::EMPTY, unknown];
        let json = serde_json::to_string(&IndexedBuckets::new(3, buckets.clone())).unwrap();
        let back: IndexedBuckets = serde_json::from_str(&json).unwrap();
        assert_eq!(back.index, 3);
        let back = back.into_buckets().unwrap();
        assert_eq!(back, buckets);
        assert_eq!(back[0].last.unwrap().value.to_bits(), (-0.0f64).to_bits());

        let old = r#"{"index":3,"buckets":[[2,2.5,0.0,2.5]]}"#;
        let read: IndexedBuckets = serde_json::from_str(old).unwrap();
        assert_eq!(read.into_buckets().unwrap()[0].last, None);
        let past = r#"{"index":3,"buckets":[[1,2.5,2.5,2.5]],"latest":[[1,2.5,1000]]}"#;
        let read: IndexedBuckets = serde_json::from_str(past).unwrap();
        assert!(read.into_buckets().is_err());
    }
}
