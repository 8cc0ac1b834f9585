//! Another tool's stored rollups (whisper archives, RRD archives) turned into tier buckets:
//! which archive fills which tier, and what a coarser tier's bucket holds when it is rolled
//! up from a finer archive's points. Pure: the importers read the files and write the
//! buckets (see `tierdb import --format whisper|rrd`).
//!
//! # Which archive fills a tier
//!
//! A tier of resolution `R` is filled from the archives whose step divides `R`. Of those,
//! the **coarsest** that covers a bucket's whole interval fills it; a finer archive fills only
//! the buckets no coarser one covers. The coarser archive is the other tool's own rollup,
//! made by its own rules step by step (whisper propagates 1m to 5m to 1h, applying the
//! xFilesFactor at every step); rolling the finest points up again would give other values
//! than the old tool shows (a mean of means is not the mean of the points once an interval
//! has gaps), and the point of an import is to show what the old tool showed. A tier whose
//! resolution equals an archive's step (the tiers `tierdb tiers --from-storage-schemas`
//! writes) therefore holds exactly that archive.
//!
//! An archive covers the interval from its oldest current point's start to now; a tier
//! bucket older than that, or older than the tier's window, is not written.
//!
//! # What a point becomes
//!
//! Each archive point arrives as a [`Bucket`] (the importer says how: a whisper point of
//! value `v` is one sample, `{count 1, total v, min v, max v}`). Where the tier's resolution
//! equals the archive's step, the bucket is stored as it is. Where the tier is coarser, the
//! `k` known points of the `R / step` in the tier bucket are rolled up by the importer's
//! [`Fold`], which returns `None` to leave the bucket empty (whisper's xFilesFactor).

use crate::bucket::Bucket;
use crate::time::Timestamp;

/// One archive of a series: its step and its known points, as buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct StepArchive {
    /// Seconds per point.
    pub step: i64,
    /// The first second the archive covers: points at or after it are current, and an
    /// interval from it on without a point is a gap, not "not covered".
    pub covers_from: Timestamp,
    /// The known points, `(interval start, bucket)`, in time order, one per interval.
    pub points: Vec<(Timestamp, Bucket)>,
    /// The fraction of an interval's points that had to be known for the other tool to
    /// write a coarser point (whisper's and RRDtool's xFilesFactor), for [`Fold`].
    pub xff: f64,
}

/// How a coarser tier's bucket is rolled up from `known` archive buckets (in time order) of
/// an interval of `expected` archive steps, by an archive of xFilesFactor `xff`: `None`
/// leaves the tier bucket empty.
pub trait Fold {
    /// The tier bucket, or `None`.
    fn fold(&self, known: &[Bucket], expected: usize, xff: f64) -> Option<Bucket>;
}

/// What filling one tier from a series' archives gave.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TierFill {
    /// `(bucket start, bucket)` to store, in time order.
    pub buckets: Vec<(Timestamp, Bucket)>,
    /// Tier buckets the archives cover that lie before the tier's window (not stored).
    pub before_window: u64,
    /// Tier buckets that start after `now` (a file whose clock ran ahead; not stored).
    pub after_now: u64,
    /// Tier buckets with known points that the fold left empty (under the xFilesFactor).
    pub folded_away: u64,
}

/// The buckets a tier of `resolution` seconds whose window starts at `window_start` gets
/// from `archives` (any order) at `now`, by the rules of this module.
pub fn fill_tier(
    resolution: i64,
    (window_start, now): (Timestamp, Timestamp),
    archives: &[StepArchive],
    fold: &impl Fold,
) -> TierFill {
    let mut fill = TierFill::default();
    let mut candidates: Vec<&StepArchive> = (archives.iter())
        .filter(|a| a.step > 0 && resolution % a.step == 0)
        .collect();
    // Coarsest first: each claims the buckets from its coverage on that no coarser one has.
    candidates.sort_by_key(|a| std::cmp::Reverse(a.step));
    let mut claimed_from = Timestamp::MAX;
    let mut parts: Vec<Vec<(Timestamp, Bucket)>> = Vec::new();
    for archive in candidates {
        // The first tier bucket wholly inside the archive's coverage.
        let from = archive.covers_from
            + (resolution - archive.covers_from.rem_euclid(resolution)) % resolution;
        if from >= claimed_from {
            continue;
        }
        let until = claimed_from;
        claimed_from = from;
        let expected = (resolution / archive.step) as usize;
        let mut part = Vec::new();
        let mut known: Vec<Bucket> = Vec::with_capacity(expected);
        let mut current: Option<Timestamp> = None;
        let mut flush = |start: Option<Timestamp>, known: &mut Vec<Bucket>, fill: &mut TierFill| {
            let Some(start) = start else { return };
            if start < window_start {
                fill.before_window += 1;
            } else if start > now {
                fill.after_now += 1;
            } else if expected == 1 {
                part.push((start, known[0]));
            } else {
                match fold.fold(known, expected, archive.xff) {
                    Some(bucket) => part.push((start, bucket)),
                    None => fill.folded_away += 1,
                }
            }
            known.clear();
        };
        for &(ts, bucket) in &archive.points {
            if ts < from || ts >= until {
                continue;
            }
            let start = ts - ts.rem_euclid(resolution);
            if current != Some(start) {
                flush(current, &mut known, &mut fill);
                current = Some(start);
            }
            known.push(bucket);
        }
        flush(current, &mut known, &mut fill);
        parts.push(part);
    }
    // Parts came newest first (coarsest archive, latest coverage); each is in time order.
    for part in parts.into_iter().rev() {
        fill.buckets.extend(part);
    }
    fill
}

#[cfg(test)]
mod tests {
    use super::{fill_tier, Fold, StepArchive};
    use crate::bucket::Bucket;

    fn one(v: f64) -> Bucket {
        Bucket {
            count: 1,
            total: v,
            min: v,
            max: v,
        }
    }

    /// Merges every known bucket, whatever the count (no xFilesFactor).
    struct MergeAll;
    impl Fold for MergeAll {
        fn fold(&self, known: &[Bucket], _expected: usize, _xff: f64) -> Option<Bucket> {
            let mut out = Bucket::EMPTY;
            known.iter().for_each(|b| out.merge(b));
            Some(out)
        }
    }

    /// Half the interval must be known.
    struct Half;
    impl Fold for Half {
        fn fold(&self, known: &[Bucket], expected: usize, xff: f64) -> Option<Bucket> {
            (known.len() as f64 >= xff * expected as f64)
                .then(|| MergeAll.fold(known, expected, xff).unwrap())
        }
    }

    fn archive(step: i64, covers_from: i64, points: &[(i64, f64)]) -> StepArchive {
        StepArchive {
            step,
            covers_from,
            points: points.iter().map(|&(t, v)| (t, one(v))).collect(),
            xff: 0.5,
        }
    }

    #[test]
    fn a_tier_of_an_archive_step_holds_that_archive_and_nothing_finer() {
        // 60 s archive covers 600.., 300 s archive covers 0..: the 300 s tier takes the 300 s
        // archive everywhere, even where the 60 s archive has points.
        let fine = archive(60, 600, &[(600, 1.0), (660, 3.0), (900, 5.0)]);
        let coarse = archive(300, 0, &[(0, 10.0), (300, 20.0), (600, 2.0), (900, 5.0)]);
        let fill = fill_tier(
            300,
            (0, i64::MAX),
            &[fine.clone(), coarse.clone()],
            &MergeAll,
        );
        let got: Vec<(i64, f64)> = fill.buckets.iter().map(|(t, b)| (*t, b.total)).collect();
        assert_eq!(got, [(0, 10.0), (300, 20.0), (600, 2.0), (900, 5.0)]);
        // The 60 s tier takes only the 60 s archive (a 300 s point cannot fill a minute).
        let fill = fill_tier(60, (0, i64::MAX), &[coarse, fine], &MergeAll);
        let got: Vec<(i64, f64)> = fill.buckets.iter().map(|(t, b)| (*t, b.total)).collect();
        assert_eq!(got, [(600, 1.0), (660, 3.0), (900, 5.0)]);
    }

    #[test]
    fn a_coarser_tier_folds_and_a_finer_archive_fills_only_what_no_coarser_covers() {
        // 60 s covers 0.., 120 s covers 240.. (a shape whisper refuses, but the rule holds).
        let fine = archive(60, 0, &[(0, 1.0), (60, 2.0), (120, 4.0), (300, 8.0)]);
        let coarse = archive(120, 240, &[(240, 100.0)]);
        let fill = fill_tier(240, (0, i64::MAX), &[fine, coarse], &MergeAll);
        let got: Vec<(i64, u64, f64)> = fill
            .buckets
            .iter()
            .map(|(t, b)| (*t, b.count, b.total))
            .collect();
        // 0..240 from the 60 s points (three of four known), 240.. from the 120 s archive.
        assert_eq!(got, [(0, 3, 7.0), (240, 1, 100.0)]);
    }

    #[test]
    fn the_fold_may_leave_a_bucket_empty_and_the_window_cuts_old_and_future_buckets() {
        let fine = archive(60, 0, &[(0, 1.0), (300, 1.0), (360, 1.0), (420, 1.0)]);
        let fill = fill_tier(300, (0, i64::MAX), std::slice::from_ref(&fine), &Half);
        assert_eq!(fill.buckets.len(), 1);
        assert_eq!(fill.buckets[0].0, 300);
        assert_eq!(fill.folded_away, 1);
        let fill = fill_tier(300, (300, i64::MAX), std::slice::from_ref(&fine), &Half);
        assert_eq!((fill.buckets.len(), fill.before_window), (1, 1));
        // A bucket starting after now (a clock ahead) is not stored either.
        let fill = fill_tier(300, (0, 299), &[fine], &Half);
        assert_eq!((fill.buckets.len(), fill.after_now), (0, 1));
    }

    #[test]
    fn a_bucket_only_partly_covered_is_not_filled_from_that_archive() {
        // Coverage starts mid-bucket: the 300 s bucket at 0 is not whole, so left out.
        let fine = archive(60, 120, &[(120, 1.0), (180, 1.0), (240, 1.0), (300, 2.0)]);
        let fill = fill_tier(300, (0, i64::MAX), &[fine], &MergeAll);
        let got: Vec<i64> = fill.buckets.iter().map(|(t, _)| *t).collect();
        assert_eq!(got, [300]);
    }
}
