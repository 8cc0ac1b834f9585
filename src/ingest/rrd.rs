//! RRD files (RRDtool's `.rrd`), read from their bytes: the data sources, the round-robin
//! archives and their rows, refusing anything else with a reason rather than a panic. Pure:
//! the caller reads the file and decides what the rows become (see
//! [`crate::ingest::archive`]).
//!
//! # Why the binary format, and which
//!
//! An `.rrd` file is RRDtool's C structs written as they lie in memory, so its layout depends
//! on the machine that wrote it: byte order, the size of `long` and `time_t`, and alignment.
//! The alternatives were librrd through a binding (a C library the binary would need at
//! run time, and a build dependency) or `rrdtool dump`'s XML (the `rrdtool` program at
//! import time, and a 20x larger text to parse). This reader takes the layout of every
//! 64-bit little-endian Linux (x86-64, arm64: LP64), which is where nearly all RRD files
//! live today, and checks it: the `RRD` cookie, a version of 0001 to 0004, and RRDtool's
//! float cookie (8.642135e130) at the offset this layout puts it. A file written elsewhere
//! (32-bit, big-endian) fails that check and is refused by name with the way across:
//! `rrdtool dump` on the old machine, `rrdtool restore` on this one.
//!
//! The layout (rrd_format.h), `unival` being an 8-byte union of `unsigned long` and double:
//!
//! ```text
//! stat_head   cookie[4] version[5] pad[7] float_cookie f64, ds_cnt u64, rra_cnt u64,
//!             pdp_step u64, par[10] unival                                      128 bytes
//! ds_def      x ds_cnt: ds_nam[20] dst[20] par[10] unival                        120 bytes
//! rra_def     x rra_cnt: cf_nam[20] pad[4] row_cnt u64 pdp_cnt u64
//!             par[10] unival (par[0]: xff as f64)                                120 bytes
//! live_head   last_up i64, and last_up_usec i64 from version 0003               8/16 bytes
//! pdp_prep    x ds_cnt: last_ds[30] pad[2] scratch[10] unival                    112 bytes
//! cdp_prep    x rra_cnt x ds_cnt: scratch[10] unival                              80 bytes
//! rra_ptr     x rra_cnt: cur_row u64                                                8 bytes
//! values      per RRA, row_cnt rows of ds_cnt f64 (NaN: unknown), a ring whose newest
//!             row is cur_row
//! ```
//!
//! A row's time is the **end** of its interval (what `rrdtool fetch` prints): the newest row
//! of an RRA of step `s` ends at `last_up - last_up % s`, each older one a step earlier.

#[cfg(test)]
mod tests;

use crate::bucket::{Bucket, Last};
use crate::ingest::archive::StepArchive;
use crate::time::Timestamp;

/// RRDtool's float cookie, written to tell a file's float layout.
pub const FLOAT_COOKIE: f64 = 8.642135e130;
const STAT_HEAD_LEN: usize = 128;
const DS_DEF_LEN: usize = 120;
const RRA_DEF_LEN: usize = 120;
const PDP_PREP_LEN: usize = 112;
const CDP_PREP_LEN: usize = 80;
/// More data sources or archives than this is no RRD file anyone wrote; the bound keeps a
/// foreign file's counts from being taken for sizes.
const MAX_COUNT: u64 = 100_000;
/// The longest row accepted, seconds (ten years), and the latest last update (the year
/// 36,812): with at most `u32::MAX` rows, every row's time then fits an `i64`.
const MAX_ROW_STEP: u64 = 10 * 365 * 86_400;
const MAX_TIME: u64 = 1 << 40;

/// What a data source measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DsType {
    /// A value as it is (GAUGE, and COMPUTE's computed values).
    Gauge,
    /// A rate per second RRDtool derived from a running total or amounts (COUNTER, DERIVE,
    /// ABSOLUTE, DCOUNTER, DDERIVE).
    Rate,
}

/// The consolidation function of an archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Consolidation {
    /// Mean of the primary points.
    Average,
    /// Smallest.
    Min,
    /// Largest.
    Max,
    /// The last.
    Last,
}

/// One data source.
#[derive(Clone, Debug, PartialEq)]
pub struct DataSource {
    /// Its name (`DS:name:...`).
    pub name: String,
    /// RRDtool's type name, as written (`GAUGE`, `COUNTER`, ...).
    pub type_name: String,
    /// Gauge or rate.
    pub kind: DsType,
}

/// One round-robin archive, its rows read.
#[derive(Clone, Debug, PartialEq)]
pub struct Rra {
    /// Its consolidation function; `None` for the ones that hold no history of the data
    /// (HWPREDICT, SEASONAL, FAILURES and kin).
    pub consolidation: Option<Consolidation>,
    /// The function's name as written.
    pub cf_name: String,
    /// Seconds per row: pdp_cnt x the file's step.
    pub step: i64,
    /// The xFilesFactor: the fraction of primary points that had to be known.
    pub xff: f64,
    /// Row values, oldest first: `values[row * ds_count + ds]`, NaN for unknown.
    pub values: Vec<f64>,
    /// End of the newest row's interval.
    pub newest_end: Timestamp,
}

impl Rra {
    /// Rows in the archive.
    pub fn rows(&self, ds_count: usize) -> usize {
        self.values.len().checked_div(ds_count).unwrap_or(0)
    }

    /// `(interval start, value)` of data source `ds`, oldest first, unknown rows left out.
    pub fn points(&self, ds: usize, ds_count: usize) -> Vec<(Timestamp, f64)> {
        let rows = self.rows(ds_count) as i64;
        (0..rows)
            .filter_map(|row| {
                let v = self.values[row as usize * ds_count + ds];
                let end = self.newest_end - (rows - 1 - row) * self.step;
                (!v.is_nan()).then_some((end - self.step, v))
            })
            .collect()
    }

    /// The start of the oldest interval the archive holds.
    pub fn covers_from(&self, ds_count: usize) -> Timestamp {
        self.newest_end - self.rows(ds_count) as i64 * self.step
    }
}

/// An RRD file read whole.
#[derive(Clone, Debug, PartialEq)]
pub struct RrdFile {
    /// The file's base step, seconds.
    pub step: i64,
    /// Time of the last update.
    pub last_update: Timestamp,
    /// Its data sources, in file order.
    pub data_sources: Vec<DataSource>,
    /// Its archives, in file order.
    pub rras: Vec<Rra>,
}

/// Why bytes are not an RRD file this reader takes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RrdError {
    /// Shorter than its header says.
    #[error("truncated: {0}")]
    Truncated(String),
    /// No RRD cookie, or numbers no RRD file has.
    #[error("not an RRD file: {0}")]
    NotRrd(String),
    /// An RRD file written on another kind of machine (32-bit or big-endian).
    #[error(
        "an RRD file from another kind of machine ({0}); convert it with `rrdtool dump FILE > \
         FILE.xml` there and `rrdtool restore FILE.xml FILE` here"
    )]
    OtherPlatform(String),
}

impl RrdError {
    /// A stable snake_case name, for the import summary's counts.
    pub fn as_str(&self) -> &'static str {
        match self {
            RrdError::Truncated(_) => "truncated",
            RrdError::NotRrd(_) => "not_rrd",
            RrdError::OtherPlatform(_) => "other_platform",
        }
    }
}

/// A cursor over the file's bytes that refuses reads past the end as truncation.
struct Bytes<'a> {
    bytes: &'a [u8],
}

impl Bytes<'_> {
    fn take(&self, at: usize, len: usize, what: &str) -> Result<&[u8], RrdError> {
        at.checked_add(len)
            .and_then(|end| self.bytes.get(at..end))
            .ok_or_else(|| {
                RrdError::Truncated(format!(
                    "{} bytes, and its {what} would end at byte {}",
                    self.bytes.len(),
                    at.saturating_add(len)
                ))
            })
    }

    fn u64(&self, at: usize, what: &str) -> Result<u64, RrdError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(at, 8, what)?);
        Ok(u64::from_le_bytes(word))
    }

    fn f64(&self, at: usize, what: &str) -> Result<f64, RrdError> {
        Ok(f64::from_bits(self.u64(at, what)?))
    }

    fn text(&self, at: usize, len: usize, what: &str) -> Result<String, RrdError> {
        let raw = self.take(at, len, what)?;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(len);
        Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
    }
}

impl RrdFile {
    /// The RRD file whose bytes are `bytes`.
    ///
    /// # Errors
    /// [`RrdError::NotRrd`] without the cookie or with impossible counts;
    /// [`RrdError::OtherPlatform`] for another machine's layout; [`RrdError::Truncated`]
    /// when the file ends before its values do, and [`RrdError::NotRrd`] when it goes on
    /// after them.
    pub fn parse(bytes: &[u8]) -> Result<RrdFile, RrdError> {
        let b = Bytes { bytes };
        if bytes.len() < 4 || &bytes[..4] != b"RRD\0" {
            return Err(RrdError::NotRrd("no `RRD` cookie at its start".into()));
        }
        let version = b.text(4, 5, "version")?;
        let version_number = match version.as_str() {
            "0001" => 1,
            "0002" => 2,
            "0003" => 3,
            "0004" => 4,
            other => return Err(RrdError::NotRrd(format!("version {other:?}"))),
        };
        let cookie = b.f64(16, "float cookie")?;
        if cookie != FLOAT_COOKIE {
            return Err(RrdError::OtherPlatform(
                "its float cookie is not where a 64-bit little-endian build writes it".into(),
            ));
        }
        let ds_count = b.u64(24, "data source count")?;
        let rra_count = b.u64(32, "archive count")?;
        let pdp_step = b.u64(40, "step")?;
        if ds_count == 0 || ds_count > MAX_COUNT || rra_count == 0 || rra_count > MAX_COUNT {
            return Err(RrdError::NotRrd(format!(
                "{ds_count} data sources and {rra_count} archives"
            )));
        }
        if pdp_step == 0 || pdp_step > i64::MAX as u64 / 2 {
            return Err(RrdError::NotRrd(format!("a step of {pdp_step} s")));
        }
        let (ds_count, rra_count) = (ds_count as usize, rra_count as usize);
        let mut at = STAT_HEAD_LEN;
        let mut data_sources = Vec::with_capacity(ds_count);
        for _ in 0..ds_count {
            let name = b.text(at, 20, "data source definition")?;
            let type_name = b.text(at + 20, 20, "data source definition")?;
            let kind = match type_name.as_str() {
                "GAUGE" | "COMPUTE" => DsType::Gauge,
                "COUNTER" | "DERIVE" | "ABSOLUTE" | "DCOUNTER" | "DDERIVE" => DsType::Rate,
                other => {
                    return Err(RrdError::NotRrd(format!(
                        "data source {name:?} of unknown type {other:?}"
                    )))
                }
            };
            data_sources.push(DataSource {
                name,
                type_name,
                kind,
            });
            at += DS_DEF_LEN;
        }
        let mut defs = Vec::with_capacity(rra_count);
        for _ in 0..rra_count {
            let cf_name = b.text(at, 20, "archive definition")?;
            let rows = b.u64(at + 24, "archive definition")?;
            let pdp_count = b.u64(at + 32, "archive definition")?;
            let xff = b.f64(at + 40, "archive definition")?;
            if rows == 0
                || rows > u64::from(u32::MAX)
                || pdp_count == 0
                || pdp_count > u64::from(u32::MAX)
            {
                return Err(RrdError::NotRrd(format!(
                    "archive {cf_name} of {rows} rows of {pdp_count} steps"
                )));
            }
            defs.push((cf_name, rows as usize, pdp_count, xff));
            at += RRA_DEF_LEN;
        }
        let last_update = b.u64(at, "last update")?;
        if last_update > MAX_TIME {
            return Err(RrdError::NotRrd(format!(
                "a last update at {last_update} s"
            )));
        }
        let last_update = last_update as i64;
        at += if version_number >= 3 { 16 } else { 8 };
        at += ds_count * PDP_PREP_LEN + rra_count * ds_count * CDP_PREP_LEN;
        let mut current_rows = Vec::with_capacity(rra_count);
        for _ in 0..rra_count {
            current_rows.push(b.u64(at, "archive pointers")?);
            at += 8;
        }
        let mut rras = Vec::with_capacity(rra_count);
        for ((cf_name, rows, pdp_count, xff), current) in defs.into_iter().zip(current_rows) {
            if current >= rows as u64 {
                return Err(RrdError::NotRrd(format!(
                    "archive {cf_name}'s current row {current} of {rows}"
                )));
            }
            let len = rows
                .checked_mul(ds_count * 8)
                .ok_or_else(|| RrdError::NotRrd(format!("archive {cf_name} of {rows} rows")))?;
            let raw = b.take(at, len, "values")?;
            at += len;
            // The ring's oldest row follows the current one.
            let mut values = Vec::with_capacity(rows * ds_count);
            for i in 0..rows {
                let row = (current as usize + 1 + i) % rows;
                for ds in 0..ds_count {
                    let o = (row * ds_count + ds) * 8;
                    let mut word = [0u8; 8];
                    word.copy_from_slice(&raw[o..o + 8]);
                    values.push(f64::from_le_bytes(word));
                }
            }
            let step = match pdp_step.checked_mul(pdp_count) {
                Some(step) if step <= MAX_ROW_STEP => step as i64,
                _ => {
                    return Err(RrdError::NotRrd(format!(
                        "archive {cf_name} of {pdp_count} steps of {pdp_step} s"
                    )))
                }
            };
            let consolidation = match cf_name.as_str() {
                "AVERAGE" => Some(Consolidation::Average),
                "MIN" => Some(Consolidation::Min),
                "MAX" => Some(Consolidation::Max),
                "LAST" => Some(Consolidation::Last),
                _ => None,
            };
            rras.push(Rra {
                consolidation,
                cf_name,
                step,
                xff,
                values,
                newest_end: last_update - last_update.rem_euclid(step),
            });
        }
        if at != bytes.len() {
            return Err(RrdError::NotRrd(format!(
                "{} bytes, more than the {at} its archives take",
                bytes.len()
            )));
        }
        Ok(RrdFile {
            step: pdp_step as i64,
            last_update,
            data_sources,
            rras,
        })
    }
}

/// What a data source's archives give, for [`crate::ingest::archive::fill_tier`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DsArchives {
    /// One per step that has an AVERAGE archive (else a LAST one): its rows as buckets.
    pub archives: Vec<StepArchive>,
    /// Known rows read (of the AVERAGE or LAST archive of each step).
    pub points: u64,
    /// Archives left out: a MIN or MAX of a step without an AVERAGE or LAST archive, whose
    /// rows alone give no mean; and the functions that hold no history (HWPREDICT, ...).
    pub unused_archives: Vec<String>,
    /// The oldest and newest row's interval start, when any.
    pub span: Option<(Timestamp, Timestamp)>,
}

impl RrdFile {
    /// Data source `ds`'s rows as buckets, one [`StepArchive`] per step. A row becomes one
    /// sample: `{count 1, total AVERAGE, min MIN, max MAX}`, with the MIN and MAX archives of
    /// the same step where they have the row, else the mean; without an AVERAGE archive of
    /// that step the LAST one stands for it. A gauge's row of the LAST archive of that step
    /// is the bucket's latest sample (RRDtool's LAST: the last known primary data point of
    /// the row's interval), taken at the row's end, the time RRDtool gives the row and that
    /// point, as the bucket's last second (a bucket's latest sample lies inside it): so a
    /// PromQL instant query at a row's end answers that row, as `rrdtool fetch` shows it. If
    /// the row's last primary steps were unknown, the point was earlier, which the row does
    /// not say. A rate data source (COUNTER, DERIVE, ABSOLUTE)
    /// is stored as a tierdb counter holds increases: each value is multiplied by the step
    /// (the rate per second times the seconds of the row), so `per_sec` shows the rate again.
    ///
    /// # Panics
    /// If `ds` is not a data source of the file.
    pub fn archives(&self, ds: usize) -> DsArchives {
        let ds_count = self.data_sources.len();
        let scale = |step: i64| match self.data_sources[ds].kind {
            DsType::Gauge => 1.0,
            DsType::Rate => step as f64,
        };
        let mut out = DsArchives::default();
        let mut steps: Vec<i64> = self.rras.iter().map(|r| r.step).collect();
        steps.sort_unstable();
        steps.dedup();
        for step in steps {
            let of = |cf: Consolidation| {
                (self.rras.iter()).find(|r| r.step == step && r.consolidation == Some(cf))
            };
            let Some(main) = of(Consolidation::Average).or_else(|| of(Consolidation::Last)) else {
                for r in self.rras.iter().filter(|r| r.step == step) {
                    out.unused_archives
                        .push(format!("{}:{}s", r.cf_name, r.step));
                }
                continue;
            };
            let extreme = |cf: Consolidation| -> rustc_hash::FxHashMap<Timestamp, f64> {
                of(cf).map_or_else(Default::default, |r| {
                    r.points(ds, ds_count).into_iter().collect()
                })
            };
            let (mins, maxs) = (extreme(Consolidation::Min), extreme(Consolidation::Max));
            // A gauge's latest value: the LAST archive's row, the last known primary point
            // of the interval; a rate's rows hold no raw counter value to keep.
            let lasts = match self.data_sources[ds].kind {
                DsType::Gauge => extreme(Consolidation::Last),
                DsType::Rate => Default::default(),
            };
            let k = scale(step);
            let points: Vec<(Timestamp, Bucket)> = (main.points(ds, ds_count).into_iter())
                .filter(|(_, v)| v.is_finite())
                .map(|(ts, v)| {
                    let total = v * k;
                    let min = mins.get(&ts).map_or(total, |m| m * k);
                    let max = maxs.get(&ts).map_or(total, |m| m * k);
                    // Taken at the row's end, RRDtool's time of the row and of its last
                    // primary point, as the last second of the bucket.
                    let last = (lasts.get(&ts)).map(|&value| Last::new(value, ts + step - 1));
                    (
                        ts,
                        Bucket {
                            count: 1,
                            total,
                            min: min.min(total),
                            max: max.max(total),
                            last,
                        },
                    )
                })
                .collect();
            out.points += points.len() as u64;
            if let (Some(first), Some(last)) = (points.first(), points.last()) {
                out.span = Some(match out.span {
                    None => (first.0, last.0),
                    Some((a, b)) => (a.min(first.0), b.max(last.0)),
                });
            }
            out.archives.push(StepArchive {
                step,
                covers_from: main.covers_from(ds_count),
                points,
                xff: main.xff,
                left_empty: Vec::new(),
                // Rows carry no stamps: each is the interval its place in the ring says.
                not_held: Vec::new(),
            });
        }
        for r in self.rras.iter().filter(|r| r.consolidation.is_none()) {
            out.unused_archives
                .push(format!("{}:{}s", r.cf_name, r.step));
        }
        out
    }
}

/// RRDtool's rollup of a coarser interval from finer rows: the rows merged (counts and
/// totals add, min and max fold: the mean of the means, the sum of a counter's increases),
/// nothing when fewer than the archive's xFilesFactor of them are known.
#[derive(Clone, Copy, Debug)]
pub struct RrdFold;

impl crate::ingest::archive::Fold for RrdFold {
    fn fold(&self, known: &[Bucket], expected: usize, xff: f64) -> Option<Bucket> {
        if known.is_empty() || (known.len() as f64) < xff * expected as f64 {
            return None;
        }
        let mut merged = Bucket::EMPTY;
        known.iter().for_each(|b| merged.merge(b));
        Some(merged)
    }
}
