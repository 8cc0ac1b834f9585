//! The distribution value: an exponential histogram, the layout of Prometheus native
//! histograms and of OpenTelemetry's exponential histograms, so that a distribution series'
//! buckets merge exactly (counts add) across series and tiers, and a quantile of any merge is
//! answered within a relative error that its scale states.
//!
//! At scale `s` the base is `2^(2^-s)`, and bucket `i` holds the values `v` with
//! `base^(i-1) < |v| <= base^i` (Prometheus' numbering; OpenTelemetry's index is one less).
//! Values whose magnitude is at most the zero threshold count in the zero bucket. Positive
//! and negative values keep separate, sparse lists of `(index, count)`, sorted by index.
//!
//! Storage keeps a histogram in a fixed-size cell ([`Histogram::encode_within`]); reads,
//! aggregates and PromQL merge and query it without depending on storage.

use std::cmp::Ordering;

/// The scale raw values (a StatsD timer's) are recorded at: base `2^(1/64)`, so a quantile
/// estimate is within 0.55% of the sample it stands for ([`relative_error`]). Scale 5 would
/// give 1.1%.
pub const DEFAULT_SCALE: i8 = 6;

/// The finest scale a histogram may have: Prometheus' and OpenTelemetry's limit.
pub const MAX_SCALE: i8 = 8;

/// The coarsest scale: base `2^16`. Past it a histogram cannot shrink further.
pub const MIN_SCALE: i8 = -4;

/// The most populated buckets a merged histogram keeps, as Prometheus bounds native
/// histograms: past it the scale is reduced until it fits (and the error bound grows).
pub const MAX_POPULATED: usize = 160;

/// An encoding's flag: a zero threshold follows the scale.
const THRESHOLD: u8 = 1;
/// An encoding's flag: its bucket lists are packed (see [`Histogram::encode`]).
const PACKED: u8 = 2;

/// The tag of a distribution series whose values were placed from explicit buckets (an
/// OTLP explicit-bucket histogram's), each bucket's count at one value inside it: a quantile
/// of its values is within the width of the explicit bucket holding it, which the scale's
/// [`relative_error`] does not bound. Reads name such series beside the scale's error.
pub const EXPLICIT_BUCKETS_TAG: (&str, &str) = ("otel_buckets", "explicit");

/// A sparse exponential histogram with integer counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    scale: i8,
    zero_threshold: f64,
    zero_count: u64,
    positive: Vec<(i32, u64)>,
    negative: Vec<(i32, u64)>,
}

/// Observations that arrive already bucketed (a Prometheus native histogram's or an OTLP
/// point's): the buckets, the sum, and the extremes when the source knows them.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The buckets; their count is the observations'.
    pub histogram: Histogram,
    /// The sum of the observations.
    pub sum: f64,
    /// `(min, max)` of the observations, when the source sends them (OTLP may; Prometheus
    /// does not).
    pub extremes: Option<(f64, f64)>,
}

impl Observed {
    /// One observation of `value`, as the ingest tests send it.
    #[cfg(all(test, feature = "server"))]
    pub(crate) fn one(value: f64) -> Observed {
        let mut histogram = Histogram::default();
        histogram.record(value);
        Observed {
            histogram,
            sum: value,
            extremes: None,
        }
    }

    /// The observations' `(min, max)`: as sent, or else the outer bounds of the lowest and
    /// highest populated buckets, which hold every observation (a bucket's min then reads
    /// at most one bucket width low, its max at most one high). `None` when empty.
    pub fn extremes(&self) -> Option<(f64, f64)> {
        if self.histogram.is_empty() {
            return None;
        }
        if let Some(extremes) = self.extremes {
            return Some(extremes);
        }
        let h = &self.histogram;
        let zero = (h.zero_count > 0).then_some(h.zero_threshold);
        let low = h
            .negative
            .last()
            .map(|&(index, _)| -upper_bound(index, h.scale))
            .or(zero.map(|t| -t))
            .or_else(|| h.positive.first().map(|&(i, _)| lower_bound(i, h.scale)));
        let high = h
            .positive
            .last()
            .map(|&(index, _)| upper_bound(index, h.scale))
            .or(zero)
            .or_else(|| h.negative.first().map(|&(i, _)| -lower_bound(i, h.scale)));
        low.zip(high)
    }

    /// Whether the sum and the extremes ([`Observed::extremes`]) are finite numbers: what a
    /// bucket's record can take. The ingest core (src/ingest/sink.rs), before a series is
    /// registered for them, and the engine refuse the rest as `not_finite`.
    pub fn is_finite(&self) -> bool {
        self.sum.is_finite()
            && self
                .extremes()
                .is_none_or(|(min, max)| min.is_finite() && max.is_finite())
    }
}

/// Why bytes did not decode as a histogram (a damaged cell or column).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes end inside a field.
    #[error("histogram truncated at byte {0}")]
    Truncated(usize),
    /// The scale byte is outside `MIN_SCALE..=MAX_SCALE`.
    #[error("histogram scale {0} outside -4..=8")]
    Scale(i8),
    /// An index or count overflows, or the indexes do not ascend.
    #[error("histogram bucket list malformed at byte {0}")]
    Malformed(usize),
    /// A flag bit this build does not know.
    #[error("histogram flags {0:#x} unknown")]
    Flags(u8),
}

/// The largest relative error of a quantile estimated at `scale`: the estimate is the
/// bucket's geometric middle, `sqrt(base)` from either end.
pub fn relative_error(scale: i8) -> f64 {
    (2f64.powf(2f64.powi(-i32::from(scale)) / 2.0)) - 1.0
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new(DEFAULT_SCALE)
    }
}

impl Histogram {
    /// An empty histogram at `scale` (clamped to `MIN_SCALE..=MAX_SCALE`), zero threshold 0:
    /// only an exact zero counts in the zero bucket.
    pub fn new(scale: i8) -> Histogram {
        Histogram {
            scale: scale.clamp(MIN_SCALE, MAX_SCALE),
            zero_threshold: 0.0,
            zero_count: 0,
            positive: Vec::new(),
            negative: Vec::new(),
        }
    }

    /// A histogram from bucket lists as a native histogram or an OTLP point carries them,
    /// already in this module's numbering; lists in any order, repeated indexes add, zero
    /// counts are dropped. `None` when the scale is outside `MIN_SCALE..=MAX_SCALE`, the
    /// threshold is negative or not finite, or a populated bucket holds no finite value
    /// above zero (its bounds underflow to 0 or overflow to infinity).
    pub fn from_parts(
        scale: i8,
        zero_threshold: f64,
        zero_count: u64,
        positive: impl IntoIterator<Item = (i32, u64)>,
        negative: impl IntoIterator<Item = (i32, u64)>,
    ) -> Option<Histogram> {
        if !(MIN_SCALE..=MAX_SCALE).contains(&scale)
            || !zero_threshold.is_finite()
            || zero_threshold < 0.0
        {
            return None;
        }
        let (positive, negative) = (normalized(positive), normalized(negative));
        // A bucket no finite value above zero fits in stands for nothing a source measured,
        // and would stretch every merge it meets across the whole index range.
        let holds_values = |&(index, _): &(i32, u64)| {
            upper_bound(index, scale) > 0.0 && lower_bound(index, scale).is_finite()
        };
        if !positive.iter().chain(&negative).all(holds_values) {
            return None;
        }
        Some(Histogram {
            scale,
            zero_threshold,
            zero_count,
            positive,
            negative,
        })
    }

    /// The scale: base `2^(2^-scale)`.
    pub fn scale(&self) -> i8 {
        self.scale
    }

    /// Values at most this far from zero count in the zero bucket.
    pub fn zero_threshold(&self) -> f64 {
        self.zero_threshold
    }

    /// Observations in the zero bucket.
    pub fn zero_count(&self) -> u64 {
        self.zero_count
    }

    /// The populated buckets of positive values, `(index, count)` by ascending index.
    pub fn positive(&self) -> &[(i32, u64)] {
        &self.positive
    }

    /// The populated buckets of negative values, by ascending index of the magnitude.
    pub fn negative(&self) -> &[(i32, u64)] {
        &self.negative
    }

    /// Observations in all buckets.
    pub fn count(&self) -> u64 {
        let sum = |list: &[(i32, u64)]| list.iter().fold(0u64, |a, &(_, c)| a.saturating_add(c));
        self.zero_count
            .saturating_add(sum(&self.positive))
            .saturating_add(sum(&self.negative))
    }

    /// True when no observation was recorded.
    pub fn is_empty(&self) -> bool {
        self.zero_count == 0 && self.positive.is_empty() && self.negative.is_empty()
    }

    /// Populated buckets, the zero bucket not counted.
    pub fn populated(&self) -> usize {
        self.positive.len() + self.negative.len()
    }

    /// Records one observation. A value that is not finite is not recorded (the write path
    /// refuses it before).
    pub fn record(&mut self, value: f64) {
        self.record_n(value, 1);
    }

    /// Records `n` observations of `value`.
    pub fn record_n(&mut self, value: f64, n: u64) {
        if !value.is_finite() || n == 0 {
            return;
        }
        let magnitude = value.abs();
        if magnitude <= self.zero_threshold {
            self.zero_count = self.zero_count.saturating_add(n);
            return;
        }
        let index = bucket_index(magnitude, self.scale);
        let list = if value > 0.0 {
            &mut self.positive
        } else {
            &mut self.negative
        };
        add_at(list, index, n);
    }

    /// Folds `other` in exactly: the result takes the coarser scale and the wider zero
    /// threshold, and counts add. A finer input is reduced first, as Prometheus does; a
    /// bucket of `other` that lies wholly within the wider threshold moves to the zero bucket.
    pub fn merge(&mut self, other: &Histogram) {
        if self.is_empty() && self.zero_threshold <= other.zero_threshold {
            self.clone_from(other);
            return;
        }
        if other.scale < self.scale {
            self.reduce_to(other.scale);
        }
        if other.zero_threshold > self.zero_threshold {
            self.widen_zero(other.zero_threshold);
        }
        let delta = (other.scale - self.scale) as u32;
        let (scale, threshold) = (self.scale, self.zero_threshold);
        self.zero_count = self.zero_count.saturating_add(other.zero_count);
        for (list, from) in [
            (&mut self.positive, &other.positive),
            (&mut self.negative, &other.negative),
        ] {
            let mut moved_to_zero = 0u64;
            let reduced = from.iter().filter_map(|&(index, count)| {
                let index = reduced_index(index, delta);
                if upper_bound(index, scale) <= threshold {
                    moved_to_zero = moved_to_zero.saturating_add(count);
                    None
                } else {
                    Some((index, count))
                }
            });
            *list = merged(list, reduced);
            self.zero_count = self.zero_count.saturating_add(moved_to_zero);
        }
    }

    /// Lowers the scale to `scale` (a no-op when it is not coarser): each bucket's count
    /// moves to the coarser bucket that contains it.
    pub fn reduce_to(&mut self, scale: i8) {
        let scale = scale.max(MIN_SCALE);
        if scale >= self.scale {
            return;
        }
        let delta = (self.scale - scale) as u32;
        for list in [&mut self.positive, &mut self.negative] {
            let mut out: Vec<(i32, u64)> = Vec::with_capacity(list.len());
            for &(index, count) in list.iter() {
                let index = reduced_index(index, delta);
                match out.last_mut() {
                    Some((last, c)) if *last == index => *c = c.saturating_add(count),
                    _ => out.push((index, count)),
                }
            }
            *list = out;
        }
        self.scale = scale;
    }

    /// Reduces the scale until at most `max` buckets are populated, or the scale is
    /// `MIN_SCALE`.
    pub fn limit(&mut self, max: usize) {
        while self.populated() > max && self.scale > MIN_SCALE {
            self.reduce_to(self.scale - 1);
        }
    }

    /// The `q` quantile (0 ≤ q ≤ 1) by the nearest-rank rule: the estimate of the
    /// observation of rank `max(1, ceil(q × count))` in ascending order, the geometric middle
    /// of its bucket (so within [`relative_error`] of it), clamped to `[min, max]` when the
    /// exact extremes are known. The zero bucket's estimate is 0. `None` for an empty
    /// histogram or a `q` outside `[0, 1]`.
    pub fn quantile(&self, q: f64, extremes: Option<(f64, f64)>) -> Option<f64> {
        let count = self.count();
        if count == 0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        Some(clamped(self.value_of_rank(rank), extremes))
    }

    /// The estimate of the observation of `rank` (1-based) in ascending order: its bucket's
    /// geometric middle (so within [`relative_error`] of it), clamped to `[min, max]` when
    /// the exact extremes are known. `None` for rank 0 or a rank past the count.
    pub fn value_at_rank(&self, rank: u64, extremes: Option<(f64, f64)>) -> Option<f64> {
        if rank == 0 || rank > self.count() {
            return None;
        }
        Some(clamped(self.value_of_rank(rank), extremes))
    }

    /// The estimate of the observation of `rank` (1-based, at most the count), walking from
    /// the most negative bucket up; only the bucket found is estimated.
    fn value_of_rank(&self, rank: u64) -> f64 {
        let mut seen = 0u64;
        let mut last = Place::Zero;
        for (place, count) in self.ascending_places() {
            seen = seen.saturating_add(count);
            last = place;
            if seen >= rank {
                break;
            }
        }
        self.estimate(last)
    }

    /// The estimated sum of the observations of ranks `first..=last` (1-based, ascending),
    /// each taken as its bucket's geometric middle clamped to `[min, max]` when the exact
    /// extremes are known: within [`relative_error`] × the sum of their magnitudes of the
    /// true sum. `None` when the ranks are empty or past the count.
    pub fn sum_of_ranks(
        &self,
        (first, last): (u64, u64),
        extremes: Option<(f64, f64)>,
    ) -> Option<f64> {
        if first == 0 || first > last || last > self.count() {
            return None;
        }
        let (mut seen, mut sum) = (0u64, 0.0);
        for (estimate, count) in self.ascending() {
            // This bucket holds ranks seen+1 ..= seen+count.
            let from = first.max(seen + 1);
            let to = last.min(seen.saturating_add(count));
            if from <= to {
                sum += (to - from + 1) as f64 * clamped(estimate, extremes);
            }
            seen = seen.saturating_add(count);
            if seen >= last {
                break;
            }
        }
        Some(sum)
    }

    /// Every populated bucket in ascending order of value, the zero bucket in its place:
    /// `(estimate, count)`, the estimate being the bucket's geometric middle (0 for zero).
    fn ascending(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        (self.ascending_places()).map(|(place, count)| (self.estimate(place), count))
    }

    /// [`Histogram::ascending`] without the estimates: `(bucket, count)`.
    fn ascending_places(&self) -> impl Iterator<Item = (Place, u64)> + '_ {
        let negative = (self.negative.iter().rev()).map(|&(i, c)| (Place::Negative(i), c));
        let zero = (self.zero_count > 0).then_some((Place::Zero, self.zero_count));
        let positive = (self.positive.iter()).map(|&(i, c)| (Place::Positive(i), c));
        negative.chain(zero).chain(positive)
    }

    /// The estimate of a bucket's values: its geometric middle, 0 for the zero bucket.
    fn estimate(&self, place: Place) -> f64 {
        match place {
            Place::Negative(index) => -middle(index, self.scale),
            Place::Zero => 0.0,
            Place::Positive(index) => middle(index, self.scale),
        }
    }

    /// The largest relative error of this histogram's quantile estimates.
    pub fn relative_error(&self) -> f64 {
        relative_error(self.scale)
    }

    /// Encodes the histogram: a flags byte (bit 0: a zero threshold follows; bit 1, always
    /// set now: the bucket lists are packed), the scale (i8), the zero threshold as f64 bits
    /// when flagged, the zero count (varint), then the positive and the negative list, each
    /// a varint length and then per bucket one varint `step << 1 | more` (`step` is the
    /// first index zigzagged, then the gap from the previous index minus one), followed by
    /// the count as a varint only when `more` is set (a count of 1 otherwise). At scale 6 a
    /// bucket of one sample, most of a sparse minute's, takes one byte where the unpacked
    /// form (bit 1 clear: step and count each a varint, which builds before this one wrote
    /// and every build still reads) takes two.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let flags = u8::from(self.zero_threshold != 0.0) | PACKED;
        out.push(flags);
        out.push(self.scale as u8);
        if flags & THRESHOLD != 0 {
            out.extend_from_slice(&self.zero_threshold.to_bits().to_le_bytes());
        }
        put_varint(out, self.zero_count);
        for list in [&self.positive, &self.negative] {
            put_varint(out, list.len() as u64);
            let mut previous: Option<i32> = None;
            for &(index, count) in list {
                let step = match previous {
                    None => zigzag(i64::from(index)),
                    Some(p) => (i64::from(index) - i64::from(p) - 1) as u64,
                };
                put_varint(out, step << 1 | u64::from(count != 1));
                if count != 1 {
                    put_varint(out, count);
                }
                previous = Some(index);
            }
        }
    }

    /// The encoding's length in bytes.
    pub fn encoded_len(&self) -> usize {
        let mut out = Vec::with_capacity(64);
        self.encode(&mut out);
        out.len()
    }

    /// Encodes into at most `limit` bytes, reducing the scale (of `self`, which keeps the
    /// reduction) until it fits; `None`, with `self` at `MIN_SCALE`, when it cannot.
    pub fn encode_within(&mut self, limit: usize, out: &mut Vec<u8>) -> Option<()> {
        loop {
            let start = out.len();
            self.encode(out);
            if out.len() - start <= limit {
                return Some(());
            }
            out.truncate(start);
            if self.scale == MIN_SCALE {
                return None;
            }
            self.reduce_to(self.scale - 1);
        }
    }

    /// Decodes one histogram from the start of `bytes`, returning it and the bytes it took.
    ///
    /// # Errors
    /// A [`DecodeError`] naming what is wrong and where; nothing panics on any input.
    pub fn decode(bytes: &[u8]) -> Result<(Histogram, usize), DecodeError> {
        let mut histogram = Histogram::new(DEFAULT_SCALE);
        let used = visit(bytes, |event| match event {
            Event::Head(head) => {
                histogram.scale = head.scale;
                histogram.zero_threshold = head.zero_threshold;
                histogram.zero_count = head.zero_count;
            }
            Event::Bucket(true, index, count) => histogram.negative.push((index, count)),
            Event::Bucket(false, index, count) => histogram.positive.push((index, count)),
        })?;
        Ok((histogram, used))
    }

    /// Moves every bucket that lies wholly within `threshold` to the zero bucket and takes
    /// `threshold` as the zero threshold.
    fn widen_zero(&mut self, threshold: f64) {
        for list in [&mut self.positive, &mut self.negative] {
            let inside =
                list.partition_point(|&(index, _)| upper_bound(index, self.scale) <= threshold);
            for &(_, count) in &list[..inside] {
                self.zero_count = self.zero_count.saturating_add(count);
            }
            list.drain(..inside);
        }
        self.zero_threshold = threshold;
    }
}

/// A bucket of a histogram, in value order: a negative one by the index of its magnitude,
/// the zero bucket, or a positive one.
#[derive(Clone, Copy, Debug)]
enum Place {
    Negative(i32),
    Zero,
    Positive(i32),
}

/// What an encoding says before its buckets.
#[derive(Clone, Copy, Debug)]
struct Head {
    scale: i8,
    zero_threshold: f64,
    zero_count: u64,
}

/// What [`visit`] reads, in order: the head, then each bucket.
enum Event {
    Head(Head),
    /// (negative, index, count): the positive buckets first, each list by ascending index.
    Bucket(bool, i32, u64),
}

/// Reads one encoding (see [`Histogram::encode`]) from the start of `bytes`, handing `on` its
/// head, then each bucket; returns the bytes it took. The one general decoder: a
/// [`Histogram`] and an [`Accumulator`] are both built through it (an accumulator reads the
/// one shape [`OneBucket`] knows by itself, and what it reads is checked against this).
fn visit(bytes: &[u8], mut on: impl FnMut(Event)) -> Result<usize, DecodeError> {
    let mut at = 0usize;
    let flags = *bytes.get(at).ok_or(DecodeError::Truncated(at))?;
    if flags & !(THRESHOLD | PACKED) != 0 {
        return Err(DecodeError::Flags(flags));
    }
    let packed = flags & PACKED != 0;
    at += 1;
    let scale = *bytes.get(at).ok_or(DecodeError::Truncated(at))? as i8;
    if !(MIN_SCALE..=MAX_SCALE).contains(&scale) {
        return Err(DecodeError::Scale(scale));
    }
    at += 1;
    let mut zero_threshold = 0.0;
    if flags & THRESHOLD != 0 {
        let word = bytes.get(at..at + 8).ok_or(DecodeError::Truncated(at))?;
        zero_threshold = f64::from_bits(u64::from_le_bytes(word.try_into().expect("8")));
        if !zero_threshold.is_finite() || zero_threshold <= 0.0 {
            return Err(DecodeError::Malformed(at));
        }
        at += 8;
    }
    let zero_count = get_varint(bytes, &mut at)?;
    on(Event::Head(Head {
        scale,
        zero_threshold,
        zero_count,
    }));
    // Each bucket takes at least one byte packed, two unpacked: a length past that is damage.
    let least = if packed { 1 } else { 2 };
    for negative in [false, true] {
        let len = get_varint(bytes, &mut at)?;
        if len > (bytes.len().saturating_sub(at) / least) as u64 {
            return Err(DecodeError::Malformed(at));
        }
        let mut previous: Option<i64> = None;
        for _ in 0..len {
            let field = at;
            let raw = get_varint(bytes, &mut at)?;
            let (step, count) = match packed {
                true if raw & 1 != 0 => (raw >> 1, get_varint(bytes, &mut at)?),
                true => (raw >> 1, 1),
                false => (raw, get_varint(bytes, &mut at)?),
            };
            let index = match previous {
                None => unzigzag(step),
                Some(p) => p
                    .checked_add(1)
                    .and_then(|n| n.checked_add(i64::try_from(step).ok()?))
                    .ok_or(DecodeError::Malformed(field))?,
            };
            let index = i32::try_from(index).map_err(|_| DecodeError::Malformed(field))?;
            if count == 0 {
                return Err(DecodeError::Malformed(field));
            }
            on(Event::Bucket(negative, index, count));
            previous = Some(i64::from(index));
        }
    }
    Ok(at)
}

/// An encoding of one positive bucket and no zero threshold, whose every field takes one
/// byte but the index (one or two): what a bucket holding one sample, or samples of one
/// bucket, leaves, and so most cells a read over many series adds. [`OneBucket::of`] reads
/// it by its fixed shape, packed or not, where [`visit`] walks the general form field by
/// field (about half of a p99 read's decoding); it reads what [`visit`] reads of the same
/// bytes, and is `None` for every other encoding, which then takes [`visit`].
struct OneBucket {
    scale: i8,
    zero_count: u64,
    index: i32,
    count: u64,
}

impl OneBucket {
    #[inline]
    fn of(bytes: &[u8]) -> Option<OneBucket> {
        // Flags without a threshold, the scale, the zero count, a positive list of length 1.
        let ([flags, scale, zero_count, 1], rest) = bytes.split_first_chunk::<4>()? else {
            return None;
        };
        let scale = *scale as i8;
        if *flags & !PACKED != 0 || *zero_count >= 0x80 || !(MIN_SCALE..=MAX_SCALE).contains(&scale)
        {
            return None;
        }
        // The first index zigzagged (a one- or two-byte varint), then its count (packed: in
        // the step's low bit when it is 1), then an empty negative list.
        let (raw, rest) = match *rest {
            [b0, ref rest @ ..] if b0 < 0x80 => (u64::from(b0), rest),
            [b0, b1, ref rest @ ..] if b1 < 0x80 => {
                (u64::from(b0 & 0x7f) | u64::from(b1) << 7, rest)
            }
            _ => return None,
        };
        let (raw, count) = match (*flags == PACKED, rest) {
            (true, &[0]) if raw & 1 == 0 => (raw >> 1, 1),
            (true, &[count, 0]) if raw & 1 != 0 => (raw >> 1, count),
            (false, &[count, 0]) => (raw, count),
            _ => return None,
        };
        if count == 0 || count >= 0x80 {
            return None;
        }
        Some(OneBucket {
            scale,
            zero_count: u64::from(*zero_count),
            // A two-byte varint is below 2^14: its unzigzagged value fits an i32.
            index: unzigzag(raw) as i32,
            count: u64::from(count),
        })
    }
}

/// Merges many histograms fast, into dense counts: what a read across series and buckets
/// folds into, one per point, instead of a sparse [`Histogram`] per merge. Encoded
/// histograms are added straight from their bytes, without building one.
#[derive(Clone, Debug, Default)]
pub struct Accumulator {
    /// `None` until the first histogram: its scale and threshold are taken as they come.
    head: Option<(i8, f64)>,
    zero_count: u64,
    positive: Dense,
    negative: Dense,
}

/// Counts by index from `offset`, growing either way. The vector keeps room past the
/// populated range (zeros), so a merge of many inputs grows it a few times, not once per
/// new index: `low` and `high` say what is populated. [`Dense::clear`] keeps the vector,
/// so a read that sums point after point into the same lists allocates them once.
#[derive(Clone, Debug, Default)]
struct Dense {
    offset: i32,
    counts: Vec<u64>,
    /// The lowest and highest index added (meaningless while `counts` is empty; `low` above
    /// `high` once cleared).
    low: i32,
    high: i32,
}

/// The widest a dense list may grow before the accumulator coarsens its scale: 4,096
/// buckets (32 KiB) span 64 octaves at scale 6.
const MAX_DENSE: usize = 4096;

/// The room a dense list starts with: eight octaves at scale 6, so a merge of latencies
/// grows it once or not at all.
const DENSE_ROOM: i64 = 512;

impl Dense {
    #[inline]
    fn add(&mut self, index: i32, count: u64) {
        let at = i64::from(index) - i64::from(self.offset);
        if self.counts.is_empty() || at < 0 || at >= self.counts.len() as i64 {
            self.grow_to(index);
        }
        let at = (i64::from(index) - i64::from(self.offset)) as usize;
        self.counts[at] = self.counts[at].saturating_add(count);
        self.low = self.low.min(index);
        self.high = self.high.max(index);
    }

    /// True when no count is held (never added to, or cleared).
    #[inline]
    fn is_unpopulated(&self) -> bool {
        self.counts.is_empty() || self.low > self.high
    }

    /// Drops every count and keeps the vector, all zeros again.
    fn clear(&mut self) {
        if let Some(range) = self.populated_range() {
            self.counts[range].fill(0);
        }
        (self.low, self.high) = (i32::MAX, i32::MIN);
    }

    /// The positions in `counts` of the populated range; `None` when unpopulated.
    fn populated_range(&self) -> Option<std::ops::Range<usize>> {
        (!self.is_unpopulated())
            .then(|| (self.low - self.offset) as usize..(self.high - self.offset) as usize + 1)
    }

    /// Reallocates so that `index` fits, with as much room again as the populated width on
    /// the side it grows (at least [`DENSE_ROOM`]); a cleared list's vector is only moved
    /// to centre on `index`.
    #[cold]
    fn grow_to(&mut self, index: i32) {
        if !self.counts.is_empty() && self.is_unpopulated() {
            let len = self.counts.len() as i64;
            let offset = i64::from(index) - len / 2;
            self.offset = offset.clamp(i64::from(i32::MIN), i64::from(i32::MAX) - len + 1) as i32;
            (self.low, self.high) = (index, index);
            return;
        }
        let (low, high) = if self.counts.is_empty() {
            (i64::from(index), i64::from(index))
        } else {
            (
                i64::from(self.low.min(index)),
                i64::from(self.high.max(index)),
            )
        };
        let width = high - low + 1;
        let len = (2 * width).max(DENSE_ROOM);
        let room = len - width;
        let offset = if self.counts.is_empty() {
            low - room / 2
        } else if index < self.offset {
            low - room
        } else {
            low
        };
        // Keep every index of the list inside i32.
        let offset = offset.clamp(i64::from(i32::MIN), i64::from(i32::MAX) - len + 1) as i32;
        let mut counts = vec![0u64; len as usize];
        if !self.counts.is_empty() {
            let from = (self.low - self.offset) as usize..=(self.high - self.offset) as usize;
            let to = (i64::from(self.low) - i64::from(offset)) as usize;
            let populated = &self.counts[from];
            counts[to..to + populated.len()].copy_from_slice(populated);
        } else {
            self.low = index;
            self.high = index;
        }
        self.offset = offset;
        self.counts = counts;
    }

    /// Whether `index` is inside the populated range.
    #[inline]
    fn holds(&self, index: i32) -> bool {
        !self.counts.is_empty() && self.low <= index && index <= self.high
    }

    /// The width the list would have with `index` in it.
    #[inline]
    fn width_with(&self, index: i32) -> usize {
        if self.is_unpopulated() {
            return 1;
        }
        let low = self.low.min(index);
        let high = self.high.max(index);
        (i64::from(high) - i64::from(low) + 1) as usize
    }

    fn reduce(&mut self, delta: u32) {
        if self.is_unpopulated() || delta == 0 {
            return;
        }
        let mut out = Dense::default();
        for (index, count) in self.populated() {
            out.add(reduced_index(index, delta), count);
        }
        *self = out;
    }

    /// The populated buckets as a sparse list, allocated once at its length (a collect of
    /// the filtered walk grew it a doubling at a time: reallocations a read's points showed
    /// in `perf`).
    fn to_sparse(&self) -> Vec<(i32, u64)> {
        let mut sparse = Vec::with_capacity(self.populated().count());
        sparse.extend(self.populated());
        sparse
    }

    fn populated(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        let range = self.populated_range().unwrap_or(0..0);
        self.counts[range.clone()]
            .iter()
            .zip(range)
            .filter(|(&c, _)| c > 0)
            .map(|(&c, i)| (self.offset + i as i32, c))
    }
}

impl Accumulator {
    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Back to empty, keeping the dense lists' room for the next sum.
    pub fn clear(&mut self) {
        self.head = None;
        self.zero_count = 0;
        self.positive.clear();
        self.negative.clear();
    }

    /// Adds an encoded histogram (see [`Histogram::encode`]).
    ///
    /// # Errors
    /// As [`Histogram::decode`]; what was added before the damage stays added, so a caller
    /// that goes on must treat the accumulator as incomplete.
    pub fn add_encoded(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        if let Some(one) = OneBucket::of(bytes) {
            self.take_head(Head {
                scale: one.scale,
                zero_threshold: 0.0,
                zero_count: one.zero_count,
            });
            self.add_bucket(false, one.index, one.count, one.scale);
            return Ok(());
        }
        let mut scale = DEFAULT_SCALE;
        visit(bytes, |event| match event {
            Event::Head(head) => {
                scale = head.scale;
                self.take_head(head);
            }
            Event::Bucket(negative, index, count) => self.add_bucket(negative, index, count, scale),
        })
        .map(|_| ())
    }

    /// Adds another accumulator's sum, as [`Accumulator::add`] adds its histogram.
    pub fn merge(&mut self, other: &Accumulator) {
        let Some((scale, zero_threshold)) = other.head else {
            return;
        };
        self.take_head(Head {
            scale,
            zero_threshold,
            zero_count: other.zero_count,
        });
        for (negative, list) in [(false, &other.positive), (true, &other.negative)] {
            for (index, count) in list.populated() {
                self.add_bucket(negative, index, count, scale);
            }
        }
    }

    /// Adds a histogram.
    pub fn add(&mut self, histogram: &Histogram) {
        self.take_head(Head {
            scale: histogram.scale,
            zero_threshold: histogram.zero_threshold,
            zero_count: histogram.zero_count,
        });
        for &(index, count) in &histogram.positive {
            self.add_bucket(false, index, count, histogram.scale);
        }
        for &(index, count) in &histogram.negative {
            self.add_bucket(true, index, count, histogram.scale);
        }
    }

    /// Takes an input's head: the coarser scale and the wider threshold win.
    #[inline]
    fn take_head(&mut self, head: Head) {
        // The common case, many inputs of one source: nothing but the zero count changes.
        if let Some((scale, threshold)) = self.head {
            if head.scale >= scale && head.zero_threshold <= threshold {
                self.zero_count = self.zero_count.saturating_add(head.zero_count);
                return;
            }
        }
        self.take_new_head(head);
    }

    /// [`Accumulator::take_head`] for the first input, or one of a coarser scale or a wider
    /// threshold.
    #[inline(never)]
    fn take_new_head(&mut self, head: Head) {
        let (scale, threshold) = match self.head {
            None => (head.scale, head.zero_threshold),
            Some((scale, threshold)) => {
                if head.scale < scale {
                    let delta = (scale - head.scale) as u32;
                    self.positive.reduce(delta);
                    self.negative.reduce(delta);
                }
                (scale.min(head.scale), threshold)
            }
        };
        self.head = Some((scale, threshold));
        if head.zero_threshold > threshold {
            // Rare (thresholds differ only between sources): go through the sparse form.
            let mut merged = self.to_histogram();
            merged.widen_zero(head.zero_threshold);
            *self = Accumulator::default();
            self.add(&merged);
        }
        self.zero_count = self.zero_count.saturating_add(head.zero_count);
    }

    /// Adds bucket `index` of an input at `input_scale`, reduced to the accumulator's scale
    /// as it stands (it may coarsen between two buckets of one input).
    #[inline]
    fn add_bucket(&mut self, negative: bool, input_index: i32, count: u64, input_scale: i8) {
        let Some((scale, _)) = self.head else {
            return;
        };
        let list = if negative {
            &mut self.negative
        } else {
            &mut self.positive
        };
        // The common case: an index of the same scale inside the populated range, which
        // neither grows the list nor falls in the zero bucket (the range holds none such).
        if input_scale == scale && list.holds(input_index) {
            list.add(input_index, count);
            return;
        }
        self.add_bucket_placed(negative, input_index, count, input_scale);
    }

    /// [`Accumulator::add_bucket`] past its common case: a reduction, the zero bucket, a
    /// list that grows or a scale that coarsens.
    #[inline(never)]
    fn add_bucket_placed(&mut self, negative: bool, input_index: i32, count: u64, input_scale: i8) {
        let Some((scale, threshold)) = self.head else {
            return;
        };
        let index = reduced_index(input_index, (input_scale - scale).max(0) as u32);
        if threshold > 0.0 && upper_bound(index, scale) <= threshold {
            self.zero_count = self.zero_count.saturating_add(count);
            return;
        }
        let list = if negative {
            &mut self.negative
        } else {
            &mut self.positive
        };
        if list.width_with(index) > MAX_DENSE && scale > MIN_SCALE {
            self.positive.reduce(1);
            self.negative.reduce(1);
            self.head = Some((scale - 1, threshold));
            return self.add_bucket_placed(negative, input_index, count, input_scale);
        }
        list.add(index, count);
    }

    /// The sum as a [`Histogram`].
    pub fn to_histogram(&self) -> Histogram {
        let (scale, zero_threshold) = self.head.unwrap_or((DEFAULT_SCALE, 0.0));
        Histogram {
            scale,
            zero_threshold,
            zero_count: self.zero_count,
            positive: self.positive.to_sparse(),
            negative: self.negative.to_sparse(),
        }
    }
}

/// The bucket of magnitude `v` (finite, above zero) at `scale`: the `i` with
/// `base^(i-1) < v <= base^i`. Exact at every bucket boundary for scales at or below 0 and
/// at powers of two for every scale; elsewhere it follows [`upper_bound`]'s rounding, so a
/// value and the bound computed for it agree.
pub fn bucket_index(v: f64, scale: i8) -> i32 {
    let (frac, exp) = frexp(v);
    if scale > 0 {
        // v = frac × 2^exp with frac in [0.5, 1): the index within the octave is the first
        // j whose bound 2^(j/2^s - 1) is at or above frac.
        let per_octave = 1i32 << scale;
        let within = octave_bounds(scale)
            .partition_point(|&bound| bound < frac)
            .min(per_octave as usize) as i32;
        within + (exp - 1) * per_octave
    } else {
        let key = if frac == 0.5 { exp - 1 } else { exp };
        let offset = (1i32 << -scale) - 1;
        (key + offset) >> -scale
    }
}

/// `estimate` clamped to the exact extremes, when they are known (and ordered).
fn clamped(estimate: f64, extremes: Option<(f64, f64)>) -> f64 {
    match extremes {
        Some((min, max)) if min <= max => estimate.clamp(min, max),
        _ => estimate,
    }
}

/// The upper bound of bucket `index` at `scale`: `base^index`.
pub fn upper_bound(index: i32, scale: i8) -> f64 {
    if scale > 0 {
        let per_octave = 1i32 << scale;
        let octave = index.div_euclid(per_octave);
        let within = index.rem_euclid(per_octave) as usize;
        // 2^(within/2^s) = 2 × the bound of `within` in [0.5, 1).
        ldexp(2.0 * octave_bounds(scale)[within], octave)
    } else {
        ldexp(1.0, index.saturating_mul(1 << -scale))
    }
}

/// The lower bound of bucket `index` at `scale`: `base^(index-1)`.
pub fn lower_bound(index: i32, scale: i8) -> f64 {
    upper_bound(index.saturating_sub(1), scale)
}

/// The geometric middle of bucket `index`: the estimate with the smallest worst relative
/// error over the bucket.
fn middle(index: i32, scale: i8) -> f64 {
    (lower_bound(index, scale) * upper_bound(index, scale)).sqrt()
}

/// The index a bucket takes when the scale drops by `delta`: buckets `2j-1` and `2j` become
/// `j`, once per step.
pub fn reduced_index(index: i32, delta: u32) -> i32 {
    if delta == 0 {
        return index;
    }
    ((index - 1) >> delta) + 1
}

/// The bounds `2^(j/2^s - 1)`, `j` in `0..2^s`, of one octave at `scale` (1..=8): values in
/// `[0.5, 1)`, computed once per scale.
fn octave_bounds(scale: i8) -> &'static [f64] {
    use std::sync::OnceLock;
    static TABLES: [OnceLock<Vec<f64>>; MAX_SCALE as usize] = [const { OnceLock::new() }; 8];
    TABLES[(scale - 1) as usize].get_or_init(|| {
        let n = 1u32 << scale;
        (0..n)
            .map(|j| 2f64.powf(f64::from(j) / f64::from(n) - 1.0))
            .collect()
    })
}

/// `v = frac × 2^exp` with `frac` in `[0.5, 1)`, for finite `v > 0` (C's `frexp`).
fn frexp(v: f64) -> (f64, i32) {
    let bits = v.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    if exponent == 0 {
        // Subnormal: scale into the normal range first.
        let (frac, exp) = frexp(v * 2f64.powi(64));
        return (frac, exp - 64);
    }
    let frac = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (frac, exponent - 1022)
}

/// `x × 2^exp`, saturating to 0 or infinity past f64's range.
fn ldexp(x: f64, exp: i32) -> f64 {
    let mut x = x;
    let mut exp = exp;
    // powi of 2 is exact while the power stays normal; step through the range in parts.
    while exp > 1000 {
        x *= 2f64.powi(1000);
        exp -= 1000;
    }
    while exp < -1000 {
        x *= 2f64.powi(-1000);
        exp += 1000;
    }
    x * 2f64.powi(exp)
}

/// Sorted, merged, without zero counts.
fn normalized(list: impl IntoIterator<Item = (i32, u64)>) -> Vec<(i32, u64)> {
    let mut list: Vec<(i32, u64)> = list.into_iter().filter(|&(_, c)| c > 0).collect();
    list.sort_unstable_by_key(|&(index, _)| index);
    let mut out: Vec<(i32, u64)> = Vec::with_capacity(list.len());
    for (index, count) in list {
        match out.last_mut() {
            Some((last, c)) if *last == index => *c = c.saturating_add(count),
            _ => out.push((index, count)),
        }
    }
    out
}

/// Adds `n` at `index` in a sorted list.
fn add_at(list: &mut Vec<(i32, u64)>, index: i32, n: u64) {
    match list.binary_search_by_key(&index, |&(i, _)| i) {
        Ok(at) => list[at].1 = list[at].1.saturating_add(n),
        Err(at) => list.insert(at, (index, n)),
    }
}

/// The sum of a sorted list and an ascending (index, count) sequence (which may repeat an
/// index), sorted.
fn merged(list: &[(i32, u64)], other: impl Iterator<Item = (i32, u64)>) -> Vec<(i32, u64)> {
    let mut out: Vec<(i32, u64)> = Vec::with_capacity(list.len());
    let mut mine = list.iter().copied().peekable();
    let push = |out: &mut Vec<(i32, u64)>, (index, count): (i32, u64)| match out.last_mut() {
        Some((last, c)) if *last == index => *c = c.saturating_add(count),
        _ => out.push((index, count)),
    };
    for theirs in other {
        while let Some(&m) = mine.peek() {
            if m.0.cmp(&theirs.0) == Ordering::Greater {
                break;
            }
            push(&mut out, m);
            mine.next();
        }
        push(&mut out, theirs);
    }
    for m in mine {
        push(&mut out, m);
    }
    out
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline(always)]
pub(crate) fn get_varint(bytes: &[u8], at: &mut usize) -> Result<u64, DecodeError> {
    // Most fields take one byte (lengths, counts, gaps) or two (a list's first index, at
    // scale 6 for magnitudes within 2^±128): read without the loop.
    match bytes.get(*at..) {
        Some(&[b0, ..]) if b0 & 0x80 == 0 => {
            *at += 1;
            Ok(u64::from(b0))
        }
        Some(&[b0, b1, ..]) if b1 & 0x80 == 0 => {
            *at += 2;
            Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7)
        }
        _ => get_long_varint(bytes, at),
    }
}

/// [`get_varint`] past its one- and two-byte cases.
#[inline(never)]
fn get_long_varint(bytes: &[u8], at: &mut usize) -> Result<u64, DecodeError> {
    let start = *at;
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *bytes.get(*at).ok_or(DecodeError::Truncated(*at))?;
        *at += 1;
        if shift == 63 && byte > 1 {
            return Err(DecodeError::Malformed(start));
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeError::Malformed(start))
}

#[cfg(test)]
mod tests;
