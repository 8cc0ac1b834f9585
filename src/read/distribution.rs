//! Reads of distribution series: per point, the merged bucket and the merged histogram of
//! the tier's buckets inside it, and the quantiles taken from them. Histograms merge exactly
//! (counts add), so a point of any width, in any tier, answers a quantile within the
//! relative error its histogram's scale states.

use super::query::PointGrid;
use super::reader::Reader;
use crate::bucket::Bucket;
use crate::error::Result;
use crate::histogram::Histogram;
use crate::registry::SeriesId;
use crate::storage::HeldPeriod;
use crate::time::{Span, Timestamp};

/// One point of a distribution read.
#[derive(Clone, Debug, PartialEq)]
pub struct DistributionPoint {
    /// Start of the point.
    pub ts: Timestamp,
    /// Count, total, min and max of every sample in it.
    pub bucket: Bucket,
    /// The merged histogram of its samples; `None` when none of its buckets holds one.
    pub histogram: Option<Histogram>,
}

impl DistributionPoint {
    /// True when the histogram holds every sample the bucket counts: only then is a
    /// quantile answered. A bucket without one holds samples written before the series
    /// became a distribution, or in a file an older build compacted.
    pub fn is_complete(&self) -> bool {
        self.bucket.count > 0
            && self.histogram.as_ref().map(Histogram::count) == Some(self.bucket.count)
    }

    /// The `q` quantile of the point's samples (nearest rank, within
    /// [`DistributionPoint::relative_error`] of the sample it stands for, and within the
    /// exact min and max); `None` for an empty or incomplete point or a `q` outside `[0, 1]`.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if !self.is_complete() {
            return None;
        }
        self.histogram
            .as_ref()?
            .quantile(q, Some((self.bucket.min, self.bucket.max)))
    }

    /// The largest relative error of the point's quantiles: its histogram's scale's.
    pub fn relative_error(&self) -> Option<f64> {
        self.histogram.as_ref().map(Histogram::relative_error)
    }
}

/// [`Reader::distribution`]'s work: the points of series `id` in tier `tier`, one per
/// `step`-aligned interval whose start lies in `[from, to)`.
pub(super) fn read(
    reader: &Reader<'_>,
    id: SeriesId,
    tier: usize,
    from: Timestamp,
    to: Timestamp,
    step: Span,
) -> Result<Vec<DistributionPoint>> {
    let spec = &reader.config().tiers[tier];
    let grid = PointGrid::new(spec, from, to, step)?;
    let mut points: Vec<DistributionPoint> = (0..grid.points)
        .map(|i| DistributionPoint {
            ts: grid.start_of(i),
            bucket: Bucket::EMPTY,
            histogram: None,
        })
        .collect();
    let window = reader.window_start(tier, reader.now());
    let read_from = grid.first.max(window);
    let slots = reader.slots();
    let (chunk, slot) = (id.0 / slots, id.0 % slots);
    let res = spec.resolution.secs() as i64;
    let buckets = (spec.period.secs() as i64 / res) as u32;
    for (period_start, held) in reader.period_files(tier, chunk, read_from..grid.end)? {
        let first = ((read_from - period_start).max(0) / res) as u32;
        let last =
            (((grid.end - period_start) + res - 1) / res).clamp(0, i64::from(buckets)) as u32;
        if first >= last {
            continue;
        }
        let mut compacted = Vec::new();
        if let HeldPeriod::Compacted(file) = &held {
            compacted = file.read_slot_distributions(slot, first..last)?;
        }
        for b in first..last {
            let ts = period_start + i64::from(b) * res;
            if ts < read_from || ts >= grid.end {
                continue;
            }
            let (bucket, histogram) = match &held {
                HeldPeriod::Hot(file) => file.load_distribution(b, slot),
                HeldPeriod::Compacted(_) => {
                    std::mem::replace(&mut compacted[(b - first) as usize], (Bucket::EMPTY, None))
                }
            };
            if bucket.count == 0 {
                continue;
            }
            let point = &mut points[((ts - grid.first) / grid.step) as usize];
            point.bucket.merge(&bucket);
            if let Some(histogram) = histogram {
                match &mut point.histogram {
                    Some(merged) => merged.merge(&histogram),
                    None => point.histogram = Some(histogram),
                }
            }
        }
    }
    Ok(points)
}
