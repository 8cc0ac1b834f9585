//! Whisper files (Graphite's `.wsp`), read whole from their bytes: the header, the archives
//! and their points, refusing anything that is not a well-formed whisper file with a reason
//! rather than a panic. Pure: the caller reads the file (one at a time) and decides what the
//! points become (see [`crate::ingest::archive`]).
//!
//! The layout, as whisper.py (graphite-project/whisper) writes it, all big-endian:
//!
//! ```text
//! offset 0   metadata     aggregationType u32, maxRetention u32, xFilesFactor f32,
//!                         archiveCount u32                                     16 bytes
//! offset 16  archive info archiveCount x (offset u32, secondsPerPoint u32,
//!                         points u32)                                          12 bytes each
//! then       archives     each `points` x (timestamp u32, value f64)           12 bytes each,
//!                         at its offset, one after another to the end of the file
//! ```
//!
//! An archive is a ring: a slot holds the point of one `secondsPerPoint`-aligned interval,
//! stamped with its start, and a slot not written since the ring came round holds an older
//! stamp (or 0, never written). [`WhisperFile::points`] keeps only the points whose stamp
//! lies in the archive's retention before a given `now`, as whisper's fetch does.
//!
//! # Which archive an import takes
//!
//! A tier bucket is built from the finest archive that covers its whole time span, rolled up
//! as whisper itself rolls up ([`WhisperFold`]: the file's aggregationMethod and
//! xFilesFactor, through the steps of the archives between, 1m to 5m to 1h; see
//! [`crate::ingest::archive::propagate`]). On a file whisper wrote alone this is the value
//! of the coarser archive (graphite-web's render is kept), and an `average` bucket keeps the
//! true min and max of the finest points under it. Where the finer archive covers the bucket
//! but gives nothing there (no known point, or fewer than the xFilesFactor), the coarser
//! archive's own point fills it, if it has one: whisper leaves a coarser point as it is when
//! a propagation falls under the xFilesFactor, so such a point was written into that archive
//! directly (a fill tool, a clock ahead), and graphite-web shows it. Where the finer archive
//! gives a value and the coarser archive holds another, the finer wins: whisper's next
//! update of that interval would write the rollup over it. Nothing on either side leaves the
//! bucket empty.
//!
//! "Covers" counts what the finer archive still holds, not its nominal retention: a slot
//! stamped after `now` (a clock ahead; carbon's `update_many` takes such points) is left
//! out, and it was written over the interval a retention before it, which `now` still
//! counts inside the retention. Whisper rolled the coarser intervals over both up when it
//! held them, so those take the coarser archive's point, as graphite-web shows.

#[cfg(test)]
mod tests;

use crate::bucket::Bucket;
use crate::ingest::archive::StepArchive;
use crate::time::Timestamp;

/// Bytes of the metadata at the start of the file.
pub const METADATA_LEN: usize = 16;
/// Bytes of one archive's info record.
pub const ARCHIVE_INFO_LEN: usize = 12;
/// Bytes of one point.
pub const POINT_LEN: usize = 12;
/// More archives than this is no whisper file anyone wrote (carbon's schemas have a handful);
/// the bound keeps a foreign file's "count" from being taken for a header size.
pub const MAX_ARCHIVES: u32 = 64;

/// How whisper rolled a finer archive's points up into a coarser one (`aggregationMethod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Mean of the known points (type 1).
    Average,
    /// Sum of the known points (type 2).
    Sum,
    /// The last known point (type 3).
    Last,
    /// Largest known point (type 4).
    Max,
    /// Smallest known point (type 5).
    Min,
    /// Sum of the known points over all the points of the interval, unknown ones counting
    /// as zero (type 6).
    AvgZero,
    /// The known point of largest absolute value (type 7).
    AbsMax,
    /// The known point of smallest absolute value (type 8).
    AbsMin,
}

impl Aggregation {
    /// The method of whisper's `aggregationType` number; `None` for a number whisper does not
    /// define.
    pub fn from_type(n: u32) -> Option<Aggregation> {
        Some(match n {
            1 => Aggregation::Average,
            2 => Aggregation::Sum,
            3 => Aggregation::Last,
            4 => Aggregation::Max,
            5 => Aggregation::Min,
            6 => Aggregation::AvgZero,
            7 => Aggregation::AbsMax,
            8 => Aggregation::AbsMin,
            _ => return None,
        })
    }

    /// The name whisper and storage-aggregation.conf give it.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Average => "average",
            Aggregation::Sum => "sum",
            Aggregation::Last => "last",
            Aggregation::Max => "max",
            Aggregation::Min => "min",
            Aggregation::AvgZero => "avg_zero",
            Aggregation::AbsMax => "absmax",
            Aggregation::AbsMin => "absmin",
        }
    }

    /// The method named `name` in storage-aggregation.conf (`average`, `avg` too).
    pub fn from_name(name: &str) -> Option<Aggregation> {
        Some(match name {
            "average" | "avg" => Aggregation::Average,
            "sum" => Aggregation::Sum,
            "last" => Aggregation::Last,
            "max" => Aggregation::Max,
            "min" => Aggregation::Min,
            "avg_zero" => Aggregation::AvgZero,
            "absmax" => Aggregation::AbsMax,
            "absmin" => Aggregation::AbsMin,
            _ => return None,
        })
    }

    /// What whisper writes for an interval of `expected` points of which `known` are known
    /// (in time order), as whisper.py's `aggregate` and its xFilesFactor test: `None` when
    /// `known.len() / expected < xff` or nothing is known.
    pub fn aggregate(self, known: &[f64], expected: usize, xff: f64) -> Option<f64> {
        if known.is_empty() || expected == 0 || (known.len() as f64 / expected as f64) < xff {
            return None;
        }
        let sum = || known.iter().fold(0.0, |acc, v| acc + v);
        Some(match self {
            Aggregation::Average => sum() / known.len() as f64,
            Aggregation::Sum => sum(),
            Aggregation::Last => known[known.len() - 1],
            Aggregation::Max => known.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Aggregation::Min => known.iter().copied().fold(f64::INFINITY, f64::min),
            Aggregation::AvgZero => sum() / expected as f64,
            // Python's max(key=abs) keeps the first of equal magnitudes.
            Aggregation::AbsMax => {
                known.iter().copied().fold(
                    known[0],
                    |best, v| {
                        if v.abs() > best.abs() {
                            v
                        } else {
                            best
                        }
                    },
                )
            }
            Aggregation::AbsMin => {
                known.iter().copied().fold(
                    known[0],
                    |best, v| {
                        if v.abs() < best.abs() {
                            v
                        } else {
                            best
                        }
                    },
                )
            }
        })
    }
}

/// One archive's info record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// Byte offset of its first point in the file.
    pub offset: u64,
    /// Seconds per point: the archive's step.
    pub seconds_per_point: u32,
    /// Number of points (slots) in the ring.
    pub points: u32,
}

impl ArchiveInfo {
    /// Seconds the archive covers: step x points.
    pub fn retention(&self) -> u64 {
        u64::from(self.seconds_per_point) * u64::from(self.points)
    }

    /// Bytes of its points.
    pub fn len(&self) -> u64 {
        u64::from(self.points) * POINT_LEN as u64
    }

    /// True for an archive without points (never in a valid file).
    pub fn is_empty(&self) -> bool {
        self.points == 0
    }
}

/// A whisper file's header: its aggregation, xFilesFactor and archives, finest first.
#[derive(Clone, Debug, PartialEq)]
pub struct WhisperHeader {
    /// How coarser archives were rolled up from finer ones.
    pub aggregation: Aggregation,
    /// The longest archive's retention, seconds.
    pub max_retention: u32,
    /// Fraction of an interval's finer points that had to be known for whisper to write the
    /// coarser point.
    pub x_files_factor: f32,
    /// The archives, finest first, as the file lists them.
    pub archives: Vec<ArchiveInfo>,
}

/// Why bytes are not a whisper file this reader takes. The message says what was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WhisperError {
    /// Shorter than its own header says (a copy cut short, a write that did not finish).
    #[error("truncated: {0}")]
    Truncated(String),
    /// The header's numbers do not describe a whisper file (another kind of file, or one
    /// damaged in its header).
    #[error("not a whisper file: {0}")]
    NotWhisper(String),
}

impl WhisperError {
    /// A stable snake_case name, for the import summary's counts.
    pub fn as_str(&self) -> &'static str {
        match self {
            WhisperError::Truncated(_) => "truncated",
            WhisperError::NotWhisper(_) => "not_whisper",
        }
    }
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_be_bytes(word)
}

fn be_f64(bytes: &[u8], at: usize) -> f64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    f64::from_be_bytes(word)
}

impl WhisperHeader {
    /// Bytes of the header of a file with `archives` archives.
    pub fn len_for(archives: u32) -> usize {
        METADATA_LEN + archives as usize * ARCHIVE_INFO_LEN
    }

    /// The header of a file whose first bytes are `head` and whose size is `file_len`: at
    /// least [`METADATA_LEN`] bytes, and the whole header once its archive count is known
    /// ([`WhisperHeader::len_for`]). Checks what whisper's own validation promises: a known
    /// aggregation, an xFilesFactor in 0..=1, archives laid out one after another from the
    /// end of the header to the end of the file, steps growing finest first with each
    /// dividing the next, retentions growing, and maxRetention equal to the last one's.
    ///
    /// # Errors
    /// [`WhisperError::Truncated`] when `head` or the file is shorter than the header says;
    /// [`WhisperError::NotWhisper`] for any other inconsistency.
    pub fn parse(head: &[u8], file_len: u64) -> Result<WhisperHeader, WhisperError> {
        let not = |why: String| Err(WhisperError::NotWhisper(why));
        if head.len() < METADATA_LEN || file_len < METADATA_LEN as u64 {
            return Err(WhisperError::Truncated(format!(
                "{file_len} bytes, less than whisper's {METADATA_LEN}-byte metadata"
            )));
        }
        let aggregation_type = be_u32(head, 0);
        let max_retention = be_u32(head, 4);
        let x_files_factor = f32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        let count = be_u32(head, 12);
        let Some(aggregation) = Aggregation::from_type(aggregation_type) else {
            return not(format!(
                "aggregation type {aggregation_type} (whisper's are 1 to 8)"
            ));
        };
        if !(0.0..=1.0).contains(&x_files_factor) {
            return not(format!("xFilesFactor {x_files_factor} (must lie in 0..=1)"));
        }
        if count == 0 || count > MAX_ARCHIVES {
            return not(format!(
                "{count} archives (whisper files have 1 to {MAX_ARCHIVES})"
            ));
        }
        let header_len = WhisperHeader::len_for(count);
        if (file_len as usize) < header_len || head.len() < header_len {
            return Err(WhisperError::Truncated(format!(
                "{} bytes, less than the header of {count} archives ({header_len} bytes)",
                file_len.min(head.len() as u64)
            )));
        }
        let mut archives = Vec::with_capacity(count as usize);
        let mut expected_offset = header_len as u64;
        for i in 0..count as usize {
            let at = METADATA_LEN + i * ARCHIVE_INFO_LEN;
            let archive = ArchiveInfo {
                offset: u64::from(be_u32(head, at)),
                seconds_per_point: be_u32(head, at + 4),
                points: be_u32(head, at + 8),
            };
            if archive.seconds_per_point == 0 || archive.points == 0 {
                return not(format!(
                    "archive {i} has {} s per point and {} points",
                    archive.seconds_per_point, archive.points
                ));
            }
            if archive.offset != expected_offset {
                return not(format!(
                    "archive {i} starts at byte {}, not at {expected_offset} after the one before",
                    archive.offset
                ));
            }
            if let Some(finer) = archives.last() {
                let finer: &ArchiveInfo = finer;
                if archive.seconds_per_point <= finer.seconds_per_point
                    || !archive
                        .seconds_per_point
                        .is_multiple_of(finer.seconds_per_point)
                    || archive.retention() <= finer.retention()
                {
                    return not(format!(
                        "archive {i} ({} s x {}) is not coarser and longer than archive {} \
                         ({} s x {}) by a whole step",
                        archive.seconds_per_point,
                        archive.points,
                        i - 1,
                        finer.seconds_per_point,
                        finer.points
                    ));
                }
            }
            expected_offset += archive.len();
            archives.push(archive);
        }
        let last = archives[archives.len() - 1];
        if u64::from(max_retention) != last.retention() {
            return not(format!(
                "maxRetention {max_retention} s differs from its longest archive's {} s",
                last.retention()
            ));
        }
        if file_len < expected_offset {
            return Err(WhisperError::Truncated(format!(
                "{file_len} bytes, less than the {expected_offset} its archives take"
            )));
        }
        if file_len > expected_offset {
            return not(format!(
                "{file_len} bytes, more than the {expected_offset} its archives take"
            ));
        }
        Ok(WhisperHeader {
            aggregation,
            max_retention,
            x_files_factor,
            archives,
        })
    }
}

/// A whisper file read whole: its header and its bytes.
#[derive(Clone, Debug)]
pub struct WhisperFile {
    /// The parsed header.
    pub header: WhisperHeader,
    bytes: Vec<u8>,
}

impl WhisperFile {
    /// The file whose bytes are `bytes`.
    ///
    /// # Errors
    /// As [`WhisperHeader::parse`].
    pub fn parse(bytes: Vec<u8>) -> Result<WhisperFile, WhisperError> {
        let header = WhisperHeader::parse(&bytes, bytes.len() as u64)?;
        Ok(WhisperFile { header, bytes })
    }

    /// The points of archive `index` that whisper's fetch at `now` would return, as
    /// `(interval start, value)` in time order: those stamped at a multiple of the step
    /// within the archive's retention before `now` (`now - retention < ts <= now`), each in
    /// the ring slot its stamp belongs to (a slot written in an earlier round of the ring,
    /// or never, is left out). A NaN value is kept: whisper stores what it was given.
    ///
    /// # Panics
    /// If `index` is not an archive of the header.
    pub fn points(&self, index: usize, now: Timestamp) -> Vec<(Timestamp, f64)> {
        self.ring(index, now).0
    }

    /// [`WhisperFile::points`], and the intervals the ring no longer holds for an import at
    /// `now`, in time order: a slot stamped after `now` (a clock ahead) holds a point left
    /// out, and was written over the interval a whole number of retentions before it that
    /// lies inside the retention (whisper rolled that interval up when it still held it).
    fn ring(&self, index: usize, now: Timestamp) -> (Vec<(Timestamp, f64)>, Vec<Timestamp>) {
        let archive = self.header.archives[index];
        let step = i64::from(archive.seconds_per_point);
        let slots = i64::from(archive.points);
        let retention = archive.retention() as i64;
        let oldest = now - retention;
        let start = archive.offset as usize;
        let stamp = |slot: usize| i64::from(be_u32(&self.bytes, start + slot * POINT_LEN));
        // Whisper places a point at slot (ts - base) / step mod slots, where base is the
        // stamp in slot 0 when the first point was written: every current point agrees.
        let base = stamp(0);
        let mut not_held = Vec::new();
        let mut points: Vec<(Timestamp, f64)> = (0..archive.points as usize)
            .filter_map(|slot| {
                let ts = stamp(slot);
                let placed = ts != 0
                    && ts % step == 0
                    && (base == 0 || ((ts - base) / step).rem_euclid(slots) == slot as i64);
                if placed && ts > now {
                    let rounds = (ts - now - 1).div_euclid(retention) + 1;
                    not_held.extend([ts - rounds * retention, ts]);
                }
                let current = placed && ts > oldest && ts <= now;
                current.then(|| (ts, be_f64(&self.bytes, start + slot * POINT_LEN + 4)))
            })
            .collect();
        points.sort_unstable_by_key(|p| p.0);
        points.dedup_by_key(|p| p.0);
        not_held.sort_unstable();
        not_held.dedup();
        (points, not_held)
    }
}

/// Whisper's own rollup of a coarser interval from the known buckets of a finer level (an
/// archive's points, or a level already rolled up by [`crate::ingest::archive::propagate`]).
/// Each finer bucket stands for whisper's value there, its mean (`total / count`): one sample
/// of `v` is `v`, and a rolled-up bucket's mean is the value whisper wrote into that archive.
/// Nothing when fewer than xFilesFactor of the interval's points are known. Else, for
/// `average`, each known finer bucket is one sample of its mean, keeping its min and max:
/// count k, the sum of the means, the smallest min and the largest max (the mean is whisper's
/// average, and the min and max are those of the finest points under it, which whisper's
/// averaged point lost); for `avg_zero`, the same with the unknown points as zeros (count =
/// the interval's points); for the other methods one sample of whisper's aggregate (a `sum`
/// shown as a mean would not be the sum).
///
/// The latest sample of an `average`, `avg_zero` or `last` rollup is that of its latest known
/// finer bucket (unknown when that one's is: a coarser archive's own averaged point); the
/// other methods' one sample is their aggregate, not a sample, and keeps none.
#[derive(Clone, Copy, Debug)]
pub struct WhisperFold {
    /// The file's aggregation method.
    pub aggregation: Aggregation,
}

impl crate::ingest::archive::Fold for WhisperFold {
    fn fold(&self, known: &[Bucket], expected: usize, xff: f64) -> Option<Bucket> {
        // Whisper's value of each finer bucket, on the stack for the usual ratios of steps
        // (5, 12, 24): a fold runs for every interval of every file.
        let (mut stack, mut heap) = ([0.0; 64], Vec::new());
        let values: &mut [f64] = if known.len() <= stack.len() {
            &mut stack[..known.len()]
        } else {
            heap.resize(known.len(), 0.0);
            &mut heap
        };
        for (value, bucket) in values.iter_mut().zip(known) {
            *value = bucket.total / bucket.count as f64;
        }
        let values: &[f64] = values;
        let value = self.aggregation.aggregate(values, expected, xff)?;
        // Known buckets are of disjoint intervals in time order: the last one's latest
        // sample is the interval's.
        let latest = known.last().and_then(|b| b.last);
        let spread = || {
            let total = values.iter().fold(0.0, |acc, v| acc + v);
            let min = known.iter().map(|b| b.min).fold(f64::INFINITY, f64::min);
            let max = known
                .iter()
                .map(|b| b.max)
                .fold(f64::NEG_INFINITY, f64::max);
            Bucket {
                count: known.len() as u64,
                total,
                min,
                max,
                last: latest,
            }
        };
        Some(match self.aggregation {
            Aggregation::Average => spread(),
            Aggregation::AvgZero => {
                let mut bucket = spread();
                if known.len() < expected {
                    bucket.min = bucket.min.min(0.0);
                    bucket.max = bucket.max.max(0.0);
                }
                bucket.count = expected as u64;
                bucket
            }
            // The last known point's value, so its latest sample too.
            Aggregation::Last => Bucket {
                last: latest,
                ..one_sample(value)
            },
            _ => one_sample(value),
        })
    }
}

/// A whisper point of value `v` as a bucket: one sample of `v`, its latest sample unknown
/// (a coarser archive's aggregate).
pub fn one_sample(v: f64) -> Bucket {
    Bucket {
        count: 1,
        total: v,
        min: v,
        max: v,
        last: None,
    }
}

/// A whisper point of value `v` stamped `ts` that is the last sample of its interval (a
/// point of the finest archive, whatever the method: whisper writes each sample over its
/// slot; or any archive's point of a `last` file) as a bucket: one sample of `v`, and that
/// sample its latest, taken at the point's stamp (whisper keeps no finer time).
pub fn sample_at(v: f64, ts: Timestamp) -> Bucket {
    Bucket {
        last: Some(crate::bucket::Last::new(v, ts)),
        ..one_sample(v)
    }
}

/// What [`WhisperFile::archives`] read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadArchives {
    /// Every archive, finest first, with its known points as one-sample buckets.
    pub archives: Vec<StepArchive>,
    /// Points read (current, known values).
    pub points: u64,
    /// Current points whose value is not finite (NaN or infinite), left out.
    pub not_finite: u64,
    /// The oldest and newest point's stamp, when any.
    pub span: Option<(Timestamp, Timestamp)>,
}

impl WhisperFile {
    /// Every archive's current points at `now` ([`WhisperFile::points`]) as one-sample
    /// buckets, with the first second each covers. A point that is the last sample of its
    /// interval keeps it as its latest ([`sample_at`]): every point of the finest archive,
    /// and of every archive when the file's aggregationMethod is `last`.
    pub fn archives(&self, now: Timestamp) -> ReadArchives {
        let mut read = ReadArchives::default();
        for (index, info) in self.header.archives.iter().enumerate() {
            let samples = index == 0 || self.header.aggregation == Aggregation::Last;
            let step = i64::from(info.seconds_per_point);
            let oldest = now - info.retention() as i64;
            // The first step-aligned second after `now - retention`: whisper's fromInterval.
            let covers_from = oldest - oldest.rem_euclid(step) + step;
            let mut points = Vec::new();
            let (current, not_held) = self.ring(index, now);
            for (ts, v) in current {
                if !v.is_finite() {
                    read.not_finite += 1;
                    continue;
                }
                read.points += 1;
                read.span = Some(match read.span {
                    None => (ts, ts),
                    Some((a, b)) => (a.min(ts), b.max(ts)),
                });
                points.push((
                    ts,
                    if samples {
                        sample_at(v, ts)
                    } else {
                        one_sample(v)
                    },
                ));
            }
            read.archives.push(StepArchive {
                step,
                covers_from,
                points,
                xff: f64::from(self.header.x_files_factor),
                left_empty: Vec::new(),
                not_held,
            });
        }
        read
    }

    /// How a tier coarser than an archive is rolled up from it, by this file's rules.
    pub fn fold(&self) -> WhisperFold {
        WhisperFold {
            aggregation: self.header.aggregation,
        }
    }
}
