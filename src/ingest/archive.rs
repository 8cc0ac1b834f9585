//! Another tool's stored rollups (whisper archives, RRD archives) turned into tier buckets:
//! which archive fills which tier, and what a coarser tier's bucket holds when it is rolled
//! up from a finer archive's points. Pure: the importers read the files and write the
//! buckets (see `tierdb import --format whisper|rrd`).
//!
//! # Which archive fills a tier
//!
//! A tier of resolution `R` is filled from the archives whose step divides `R`. Of those,
//! the **coarsest** that covers a bucket's whole interval fills it; a finer archive fills only
//! the buckets no coarser one covers ([`fill_tier`]). A tier whose resolution equals an
//! archive's step (the tiers `tierdb tiers --from-storage-schemas` writes) therefore holds
//! exactly that archive. For RRDtool that is the whole rule: each RRD archive is consolidated
//! from the primary data points on its own, with its own xFilesFactor, so its rows are the
//! values `rrdtool fetch` shows, and a finer archive rolled up again would give others.
//!
//! # Whisper's archives, propagated first
//!
//! A whisper file's coarser archives are rollups of its finer ones, and the finer points say
//! more (an hour's true min and max, not only its average). So the whisper importer first
//! redoes whisper's propagation ([`propagate`]): from the finest archive on, each coarser
//! archive's interval that the level just finer covers wholly takes that level's rollup (the
//! importer's [`Fold`]: whisper's aggregationMethod and xFilesFactor), when the rollup gives
//! a value; otherwise (no known finer point, or fewer than the xFilesFactor) it keeps the
//! archive's own point, if it has one. That is whisper's own rule: a propagation under the
//! xFilesFactor leaves the coarser point as it is, so such a point was written into its
//! archive directly (a fill tool, a clock ahead), and graphite-web shows it. Where the rollup
//! gives a value and the archive holds another, the rollup wins: whisper's next update of
//! that interval would write it over the other. On a file whisper wrote alone, the rollup
//! equals the archive's point, so renders still match graphite-web's, and the [`Fold`] may
//! keep more of the finer points than one value (the true min and max of an `average`). The
//! tiers are then filled from these levels by the rule above: a bucket takes the finest
//! archive covering it, rolled up as whisper rolls up, and a coarser point only where no
//! finer archive covers its time or gives it a value.
//!
//! An archive covers the interval from its oldest current point's start to now, less the
//! intervals it no longer holds ([`StepArchive::not_held`]: a whisper slot written over by a
//! point after now); a tier bucket older than that, or older than the tier's window, is not
//! written.
//!
//! # What a point becomes
//!
//! Each archive point arrives as a [`Bucket`] (the importer says how: a whisper point of
//! value `v` is one sample, `{count 1, total v, min v, max v}`, and its latest sample where
//! the point is the last sample of its interval; an RRD gauge's row keeps its LAST row as
//! its latest). Where the tier's resolution equals the archive's step, the bucket is stored
//! as it is, latest sample and all. Where an interval is rolled up,
//! the `k` known buckets of the `step / finer step` in it are rolled up by the importer's
//! [`Fold`], which returns `None` to leave the interval empty (the xFilesFactor).

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
    /// Intervals that [`propagate`] left empty: known finer points under the xFilesFactor,
    /// and no point of this archive. Counted where a tier takes this archive, never stored.
    pub left_empty: Vec<Timestamp>,
    /// Intervals, in time order, whose point the other tool had when it rolled up a coarser
    /// archive and this import does not: a whisper slot written over by a point after now (a
    /// clock ahead), and that point, left out. [`propagate`] does not roll up a coarser
    /// interval over one of them: it is not wholly covered.
    pub not_held: Vec<Timestamp>,
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
    let mut candidates: Vec<&StepArchive> = (archives.iter())
        .filter(|a| a.step > 0 && resolution % a.step == 0)
        .collect();
    // Coarsest first: each claims the buckets from its coverage on that no coarser one has.
    candidates.sort_by_key(|a| std::cmp::Reverse(a.step));
    let mut claimed_from = Timestamp::MAX;
    let mut parts: Vec<TierFill> = Vec::new();
    for archive in candidates {
        let from = first_whole(archive.covers_from, resolution);
        if from >= claimed_from {
            continue;
        }
        let until = claimed_from;
        claimed_from = from;
        let mut part = TierFill::default();
        let mut keep = |start: Timestamp, bucket: Option<Bucket>| {
            if start < window_start {
                part.before_window += 1;
            } else if start > now {
                part.after_now += 1;
            } else if let Some(bucket) = bucket {
                part.buckets.push((start, bucket));
            } else {
                part.folded_away += 1;
            }
        };
        roll_up(archive, (from, until), resolution, fold, &mut keep);
        if archive.step == resolution {
            (archive.left_empty.iter())
                .filter(|&&start| start >= from && start < until)
                .for_each(|&start| keep(start, None));
        }
        parts.push(part);
    }
    // Parts came newest first (coarsest archive, latest coverage); each is in time order.
    let mut fill = TierFill::default();
    for part in parts.into_iter().rev() {
        fill.buckets.extend(part.buckets);
        fill.before_window += part.before_window;
        fill.after_now += part.after_now;
        fill.folded_away += part.folded_away;
    }
    fill
}

/// `archives` (any order) as whisper's propagation leaves them, finest first (see the
/// module's doc): each archive's intervals that the coarsest finer level whose step divides
/// its step covers wholly take that level's rollup by `fold` where it gives a value, and
/// keep the archive's own points elsewhere. The finest archive is kept as it is.
pub fn propagate(mut archives: Vec<StepArchive>, fold: &impl Fold) -> Vec<StepArchive> {
    archives.retain(|a| a.step > 0);
    archives.sort_by_key(|a| a.step);
    let mut levels: Vec<StepArchive> = Vec::with_capacity(archives.len());
    for archive in archives {
        let finer = (levels.iter().rev())
            .find(|level| level.step < archive.step && archive.step % level.step == 0);
        let level = match finer {
            Some(finer) => propagate_into(finer, archive, fold),
            None => archive,
        };
        levels.push(level);
    }
    levels
}

/// The first second from `covers_from` on that starts an interval of `step`.
fn first_whole(covers_from: Timestamp, step: i64) -> Timestamp {
    covers_from + (step - covers_from.rem_euclid(step)) % step
}

/// Rolls `archive`'s points in `[from, until)` up into intervals of `step` (a multiple of
/// its step), in time order: `emit(interval start, bucket)` for each interval with a known
/// point, the bucket `None` when `fold` leaves it empty. An interval of the archive's own
/// step is its point as it is.
fn roll_up(
    archive: &StepArchive,
    (from, until): (Timestamp, Timestamp),
    step: i64,
    fold: &impl Fold,
    mut emit: impl FnMut(Timestamp, Option<Bucket>),
) {
    let expected = (step / archive.step) as usize;
    let mut known: Vec<Bucket> = Vec::with_capacity(expected.min(1024));
    let mut current: Option<Timestamp> = None;
    let mut flush = |start: Option<Timestamp>, known: &mut Vec<Bucket>| {
        let Some(start) = start else { return };
        if expected == 1 {
            emit(start, Some(known[0]));
        } else {
            emit(start, fold.fold(known, expected, archive.xff));
        }
        known.clear();
    };
    for &(ts, bucket) in &archive.points {
        if ts < from || ts >= until {
            continue;
        }
        let start = ts - ts.rem_euclid(step);
        if current != Some(start) {
            flush(current, &mut known);
            current = Some(start);
        }
        known.push(bucket);
    }
    flush(current, &mut known);
}

/// One step of whisper's propagation: the level `finer` rolled up into intervals of
/// `coarser`'s step where it covers them wholly (from its coverage on, none of its intervals
/// there [`StepArchive::not_held`]) and the rollup gives a value, and elsewhere
/// `coarser`'s own points; the intervals with known finer points under the xFilesFactor and
/// no point of `coarser` noted as left empty.
fn propagate_into(finer: &StepArchive, coarser: StepArchive, fold: &impl Fold) -> StepArchive {
    let from = first_whole(finer.covers_from, coarser.step);
    let own = &coarser.points;
    let rolled_about = finer.points.len() / (coarser.step / finer.step) as usize + 1;
    let mut points = Vec::with_capacity(own.len() + rolled_about);
    let mut left_empty = Vec::new();
    // The rollup comes in time order: the archive's own points before each rolled interval
    // go first, and its point of that interval is taken only when the rollup gives none.
    let mut j = 0;
    roll_up(
        finer,
        (from, Timestamp::MAX),
        coarser.step,
        fold,
        |start, bucket| {
            while j < own.len() && own[j].0 < start {
                points.push(own[j]);
                j += 1;
            }
            let own_there = j < own.len() && own[j].0 == start;
            let short = finer.not_held.partition_point(|&t| t < start);
            let whole = finer
                .not_held
                .get(short)
                .is_none_or(|&t| t >= start + coarser.step);
            match (bucket, own_there) {
                (Some(bucket), _) if whole => points.push((start, bucket)),
                (_, true) => points.push(own[j]),
                (None, false) if whole => left_empty.push(start),
                // Not wholly covered, and no point of the coarser archive: nothing, as
                // whisper's fetch of that archive gives.
                _ => {}
            }
            j += usize::from(own_there);
        },
    );
    points.extend_from_slice(&own[j..]);
    StepArchive {
        covers_from: coarser.covers_from.min(from),
        points,
        left_empty,
        ..coarser
    }
}

#[cfg(test)]
mod tests {
    use super::{fill_tier, propagate, Fold, StepArchive};
    use crate::bucket::Bucket;

    fn one(v: f64) -> Bucket {
        Bucket {
            count: 1,
            total: v,
            min: v,
            max: v,
            last: None,
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
            left_empty: Vec::new(),
            not_held: Vec::new(),
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

    #[test]
    fn propagated_archives_take_the_finer_rollup_and_fall_back_to_the_coarser_point() {
        // The 60 s archive covers 0..; the 300 s one from -600 on.
        let fine = archive(
            60,
            0,
            &[
                // 0: 3 of 5 known, enough for Half's 0.5.
                (0, 1.0),
                (60, 2.0),
                (120, 3.0),
                // 300: 1 of 5, under the xFilesFactor.
                (300, 4.0),
                // 600: none. 900: 2 of 5, under, and no coarser point there.
                (900, 5.0),
                (960, 5.0),
            ],
        );
        let coarse = archive(
            300,
            -600,
            &[
                (-600, 10.0),
                (-300, 20.0),
                (0, 99.0),
                (300, 40.0),
                (600, 60.0),
            ],
        );
        let levels = propagate(vec![coarse.clone(), fine.clone()], &Half);
        assert_eq!((levels[0].step, levels[1].step), (60, 300), "finest first");
        assert_eq!(levels[0], fine, "the finest archive is kept as it is");
        assert_eq!(levels[1].left_empty, [900]);
        let fill = fill_tier(300, (-600, i64::MAX), &levels, &Half);
        let got: Vec<(i64, u64, f64)> = (fill.buckets.iter())
            .map(|(t, b)| (*t, b.count, b.total))
            .collect();
        // -600 and -300: only the coarser archive covers them. 0: the finer rollup, not the
        // coarser 99. 300 (under) and 600 (no finer point): the coarser archive's own points.
        assert_eq!(
            got,
            [
                (-600, 1, 10.0),
                (-300, 1, 20.0),
                (0, 3, 6.0),
                (300, 1, 40.0),
                (600, 1, 60.0)
            ]
        );
        // 900: finer points under the xFilesFactor and nothing to fall back on.
        assert_eq!(fill.folded_away, 1);
        // Without the propagation, the coarser archive fills every bucket it covers.
        let fill = fill_tier(300, (-600, i64::MAX), &[coarse, fine], &Half);
        let got: Vec<(i64, f64)> = fill.buckets.iter().map(|(t, b)| (*t, b.total)).collect();
        assert_eq!(
            got,
            [
                (-600, 10.0),
                (-300, 20.0),
                (0, 99.0),
                (300, 40.0),
                (600, 60.0)
            ]
        );
    }

    #[test]
    fn an_interval_the_finer_archive_no_longer_wholly_holds_takes_the_coarser_point() {
        // 60 s from 0 on, every minute known but 120's slot written over (not held) and 660
        // not held either; the 300 s archive holds 0 only.
        let points: Vec<(i64, f64)> = (0..15).map(|k| (k * 60, 1.0)).collect();
        let mut fine = archive(60, 0, &points);
        fine.points.retain(|&(t, _)| t != 120);
        fine.not_held = vec![120, 660];
        let coarse = archive(300, 0, &[(0, 50.0)]);
        let levels = propagate(vec![fine, coarse], &Half);
        let got: Vec<(i64, f64)> = (levels[1].points.iter())
            .map(|(t, b)| (*t, b.total))
            .collect();
        // 0: four of five minutes, over Half's 0.5, yet the coarser point; 300: the rollup;
        // 600: not wholly held and no coarser point: nothing, and not counted as left empty.
        assert_eq!(got, [(0, 50.0), (300, 5.0)]);
        assert!(levels[1].left_empty.is_empty());
    }

    #[test]
    fn a_tier_coarser_than_every_archive_rolls_up_the_propagated_levels() {
        // 60 s points over 0..600 (ten, all known), 300 s points before the 60 s coverage.
        let points: Vec<(i64, f64)> = (0..10).map(|k| (k * 60, 1.0)).collect();
        let fine = archive(60, 0, &points);
        let coarse = archive(300, -600, &[(-600, 7.0), (-300, 8.0), (0, 50.0)]);
        let levels = propagate(vec![fine, coarse], &Half);
        let fill = fill_tier(600, (-600, i64::MAX), &levels, &Half);
        let got: Vec<(i64, u64, f64)> = (fill.buckets.iter())
            .map(|(t, b)| (*t, b.count, b.total))
            .collect();
        // -600: the two 300 s points. 0: the 300 s level made of the 60 s points (two
        // buckets of five samples each, as Half merges them), not the coarser 50.
        assert_eq!(got, [(-600, 2, 15.0), (0, 10, 10.0)]);
        assert_eq!(fill.folded_away, 0);
    }
}
