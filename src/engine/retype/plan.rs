//! What a retype of one series writes, or why it cannot: the exactness rules, pure (the
//! buckets in, the new buckets or a refusal out).
//!
//! A bucket keeps its samples' count, total, min and max and its latest sample; the other
//! kind needs the samples themselves (a gauge their values, a counter each one's increase
//! since the one before). A sample is **known** when a bucket holding only it keeps its
//! latest sample (its value and time; a counter's latest sample is its raw value, its
//! running total), in any tier. Every bucket of a tier's window holds every sample the
//! series got in its interval (a sample lands in every tier whose window holds it, and a
//! period's file, once it exists, stays until the period leaves the window), so the known
//! samples within a bucket's interval are some of its samples, and **all** of them exactly
//! when there are as many as its count. A bucket is converted exactly when that holds: one
//! of one sample keeping its latest sample, or one of several whose samples a finer tier
//! knows one by one (a 1h bucket of 60 samples whose 1m buckets each hold one). A retype is
//! all or nothing per series: every bucket in every tier's window must be exact, else the
//! series is refused, naming the earliest bucket that is not in the finest tier that has
//! one, and why.
//!
//! When every bucket is exact, the known samples are every sample since the earliest
//! tier's window starts, and the new buckets are folded from them in time order (a gauge's
//! samples that came out of order are taken as a counter would have needed them):
//! - to a gauge, each sample's value;
//! - to a counter, each sample's increase since the one before it (a drop is a reset, as at
//!   ingest); the first stores nothing, since a counter's first sample is its baseline.
//!
//! A counter's own first sample was never stored in a bucket (it set the baseline), so it
//! is not known: a counter made a gauge begins at its second sample.

use std::collections::BTreeMap;

use crate::bucket::{Bucket, Last};
use crate::counter::{increase, SeriesKind};
use crate::storage::cells::CellAt;
use crate::time::{format_ts, Timestamp};

/// One tier's buckets of the series: every bucket of every period file held from the tier's
/// window start on (a period without a file holds no sample of it).
pub(crate) struct TierCells {
    /// The tier's name, for messages.
    pub(crate) name: String,
    /// Its resolution, seconds.
    pub(crate) resolution: i64,
    /// Each cell, the start of its bucket and the bucket as stored.
    pub(crate) cells: Vec<(CellAt, Timestamp, Bucket)>,
}

/// What a retype of one series does.
#[derive(Debug, PartialEq)]
pub(crate) enum Plan {
    /// Every bucket converts exactly.
    Convert {
        /// The cells whose bucket changes, with the new bucket.
        cells: Vec<(CellAt, Bucket)>,
        /// The number of changed cells per tier, in tier order.
        per_tier: Vec<usize>,
        /// The series' latest sample (time, value), a counter's state from now on.
        latest: Option<(Timestamp, f64)>,
        /// What the conversion leaves out, in words.
        notes: Vec<String>,
    },
    /// Some bucket does not convert exactly: why, naming the finest tier's earliest.
    Refuse(String),
}

/// The samples the buckets know one by one, by time (value bits), and the times two
/// buckets disagree about.
struct Known {
    samples: BTreeMap<Timestamp, u64>,
    conflicts: Vec<Timestamp>,
}

impl Known {
    fn gather(tiers: &[TierCells]) -> Known {
        let mut samples: BTreeMap<Timestamp, u64> = BTreeMap::new();
        let mut conflicts = Vec::new();
        for (_, _, bucket) in tiers.iter().flat_map(|t| &t.cells) {
            let (1, Some(last)) = (bucket.count, bucket.last) else {
                continue;
            };
            let bits = last.value.to_bits();
            if *samples.entry(last.ts()).or_insert(bits) != bits {
                conflicts.push(last.ts());
            }
        }
        Known { samples, conflicts }
    }

    /// The known samples in `[from, to)`.
    fn within(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> std::collections::btree_map::Range<'_, Timestamp, u64> {
        self.samples.range(from..to)
    }
}

/// Why the bucket of `tier` at `start` is not exact, or `None` when it is.
fn not_exact(known: &Known, tier: &TierCells, start: Timestamp, bucket: &Bucket) -> Option<String> {
    let end = start.saturating_add(tier.resolution);
    if known.conflicts.iter().any(|t| (start..end).contains(t)) {
        return Some("the tiers disagree about a sample in it".to_owned());
    }
    let within = known.within(start, end);
    let found = within.clone().count() as u64;
    if found == bucket.count {
        let latest = within
            .last()
            .map(|(&ts, &bits)| Last::new(f64::from_bits(bits), ts));
        return match (bucket.last, latest) {
            (Some(kept), Some(latest))
                if kept.ts() != latest.ts() || kept.value.to_bits() != latest.value.to_bits() =>
            {
                Some("its latest sample differs from the finer tiers' (the tiers disagree)".into())
            }
            _ => None,
        };
    }
    Some(match (bucket.count, bucket.last) {
        (1, None) => "it holds one sample whose value and time it does not keep (written before \
                      buckets kept their latest sample, or imported)"
            .to_owned(),
        (count, _) if found < count => format!(
            "it holds {count} samples and keeps only their count, total, min, max and latest; \
             {}",
            match found {
                0 => "no finer tier holds them one by one".to_owned(),
                _ => format!("finer tiers hold only {found} of them one by one"),
            }
        ),
        (count, _) => format!(
            "it holds {count} samples, but finer tiers hold {found} in its interval (the tiers \
             disagree)"
        ),
    })
}

/// What converting a series of kind `from` (a gauge or a counter of running totals) to
/// `to` writes, given its buckets `tiers`; see the module doc for the rules.
pub(crate) fn plan(from: SeriesKind, to: SeriesKind, tiers: &[TierCells]) -> Plan {
    debug_assert!(from != to);
    let known = Known::gather(tiers);
    // The earliest bucket that is not exact in the finest tier that has one (a coarser
    // tier's bucket holding the same samples says less about where they are), and how many.
    let mut first: Option<(i64, Timestamp, usize, String)> = None;
    let mut inexact = 0usize;
    for (index, tier) in tiers.iter().enumerate() {
        for (_, start, bucket) in &tier.cells {
            if let Some(why) = not_exact(&known, tier, *start, bucket) {
                inexact += 1;
                let rank = (tier.resolution, *start);
                if first.as_ref().is_none_or(|(r, t, _, _)| rank < (*r, *t)) {
                    first = Some((tier.resolution, *start, index, why));
                }
            }
        }
    }
    if let Some((_, start, index, why)) = first {
        let total: usize = tiers.iter().map(|t| t.cells.len()).sum();
        let more = match inexact {
            1 => String::new(),
            n => format!(
                " ({n} of its {total} buckets are not exact; this is the finest tier's earliest)"
            ),
        };
        return Plan::Refuse(format!(
            "the {} bucket at {} cannot be converted exactly: {why}{more}",
            tiers[index].name,
            format_ts(start)
        ));
    }
    // Every sample since the earliest window, each with what the new kind folds in.
    let mut folded: BTreeMap<Timestamp, (Option<f64>, f64)> = BTreeMap::new();
    let mut previous: Option<f64> = None;
    for (&ts, &bits) in &known.samples {
        let value = f64::from_bits(bits);
        let stored = match to {
            SeriesKind::Counter => previous.map(|p| increase(p, value)),
            _ => Some(value),
        };
        folded.insert(ts, (stored, value));
        previous = Some(value);
    }
    let mut notes = Vec::new();
    if let Some((&first, _)) = known.samples.first_key_value() {
        notes.push(match (from, to) {
            (_, SeriesKind::Counter) => format!(
                "its first sample ({}) becomes the counter's baseline and stores no increase, \
                 as a counter's first sample does",
                format_ts(first)
            ),
            _ => "a counter stores nothing for its first sample (its baseline), so the gauge \
                  begins at the counter's second sample"
                .to_owned(),
        });
    }
    let mut cells = Vec::new();
    let mut per_tier = Vec::with_capacity(tiers.len());
    for tier in tiers {
        let before = cells.len();
        for (at, start, bucket) in &tier.cells {
            let mut new = Bucket::EMPTY;
            for (&ts, &(stored, value)) in
                folded.range(*start..start.saturating_add(tier.resolution))
            {
                if let Some(stored) = stored {
                    new.add_at(stored, Last::new(value, ts));
                }
            }
            if !same(&new, bucket) {
                cells.push((*at, new));
            }
        }
        per_tier.push(cells.len() - before);
    }
    let latest = (known.samples.last_key_value()).map(|(&ts, &bits)| (ts, f64::from_bits(bits)));
    Plan::Convert {
        cells,
        per_tier,
        latest,
        notes,
    }
}

/// True when `a` and `b` hold the same bits, latest sample included (an empty bucket's
/// fields are not compared).
fn same(a: &Bucket, b: &Bucket) -> bool {
    use crate::storage::cells::{same_bits, same_last};
    if a.count == 0 || b.count == 0 {
        return a.count == b.count;
    }
    same_bits(a, b) && same_last(a, b)
}

#[cfg(test)]
mod tests;
