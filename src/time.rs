//! Time for tierdb: the [`Span`] duration type and the pure lookup from a timestamp to the
//! period file and bucket it lands in for each tier ([`locate`], [`place`]).
//!
//! Everything is UTC and aligned to whole multiples of a step since the Unix epoch, so the
//! lookup needs no calendar and no time zone: a 1d period starts at 00:00:00Z, a 7d period
//! on a Thursday (1970-01-01 was one), and 30d/365d periods are not calendar months or years.

use std::fmt;
use std::str::FromStr;

/// Unix seconds, UTC.
pub type Timestamp = i64;

/// A whole number of seconds, written humanely ("10s", "1m", "5m", "1h", "1d", "14d",
/// "1825d", "48h", "2w").
///
/// Seconds are the only precision tierdb stores, so a span is a plain count of them; the
/// humane text form exists for `tiers.toml` and for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span(u64);

/// Units [`Span`]'s `Display` chooses from, largest first. Weeks are left out on purpose:
/// "14d" reads better next to "1825d" than "2w" does.
const DISPLAY_UNITS: [(&str, u64); 4] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];

impl Span {
    /// A span of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Span {
        Span(secs)
    }

    /// The span in seconds.
    pub const fn secs(self) -> u64 {
        self.0
    }

    /// Parses "10s", "1m", "1h", "1d", "2w", "1mo": one whole number followed by one unit,
    /// with no spaces or sign. The units are those of every time in tierdb (the command
    /// line's `--range`, the HTTP API's offsets, the dashboard's ranges): s, m or min, h, d,
    /// w, mo or mon (30 days), y (365 days), and their words (`minutes`, `weeks`, ...). "0s"
    /// parses to zero; whether zero is acceptable is for the caller to decide
    /// (configuration validation refuses it).
    ///
    /// # Errors
    /// A message a person can act on when the text is not of that form, or when the span
    /// does not fit in an `i64` of seconds (it could not be added to a [`Timestamp`]).
    pub fn parse(text: &str) -> Result<Span, String> {
        if text.is_empty() {
            return Err("a duration is needed, for example \"5m\", \"1h\" or \"7d\"".to_owned());
        }
        let split = text.len()
            - text
                .bytes()
                .rev()
                .take_while(u8::is_ascii_alphabetic)
                .count();
        let (digits, unit) = text.split_at(split);
        let Some(unit_secs) = parse::unit_seconds(unit) else {
            return Err(format!(
                "{text:?} is not a duration: it must end in a unit, one of s, m (min), h, d, w, \
                 mo (mon), y (for example \"5m\", \"1h\" or \"7d\")"
            ));
        };
        let unit_secs = unit_secs as u64;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "{text:?} is not a duration: it must be a whole number followed by a unit, \
                 for example \"5m\", \"1h\" or \"7d\""
            ));
        }
        let too_large = || format!("{text:?} is too large a duration");
        let count: u64 = digits.parse().map_err(|_| too_large())?;
        let secs = count.checked_mul(unit_secs).ok_or_else(too_large)?;
        if i64::try_from(secs).is_err() {
            return Err(too_large());
        }
        Ok(Span(secs))
    }
}

impl fmt::Display for Span {
    /// Writes the span in the largest of d, h, m, s that divides it evenly: 86400 is "1d",
    /// 172800 "2d", 3600 "1h", 90 "90s", 0 "0s".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, unit_secs) = DISPLAY_UNITS
            .iter()
            .copied()
            .find(|&(_, unit_secs)| self.0 != 0 && self.0.is_multiple_of(unit_secs))
            .unwrap_or(("s", 1));
        write!(f, "{}{unit}", self.0 / unit_secs)
    }
}

impl FromStr for Span {
    type Err = String;

    fn from_str(text: &str) -> Result<Span, String> {
        Span::parse(text)
    }
}

impl serde::Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Span, D::Error> {
        let text = String::deserialize(deserializer)?;
        Span::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Start of the `step`-aligned interval holding `ts`: the largest multiple of `step` seconds
/// since the epoch that is not after `ts`. Rounds towards the past for negative `ts` too
/// (`align_down(-1, 1m)` is `-60`).
///
/// # Panics
/// If `step` is zero, if it exceeds `i64::MAX` seconds (validated configurations never do),
/// or, with overflow checks on, if the result would be before `i64::MIN`.
pub fn align_down(ts: Timestamp, step: Span) -> Timestamp {
    let step = step_secs(step);
    ts - ts.rem_euclid(step)
}

/// [`align_down`], or `None` when the result would be before the earliest timestamp.
pub fn checked_align_down(ts: Timestamp, step: Span) -> Option<Timestamp> {
    ts.checked_sub(ts.rem_euclid(step_secs(step)))
}

/// `step` as the signed type timestamps use.
fn step_secs(step: Span) -> i64 {
    match i64::try_from(step.secs()) {
        Ok(step) => step,
        Err(_) => panic!("time step {step} does not fit in an i64 of seconds"),
    }
}

/// Where one sample lands in one tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// Index of the tier in the tier slice the placement was computed for.
    pub tier: usize,
    /// Start of the period (and so the name of the period file) holding the sample.
    pub period_start: Timestamp,
    /// Index of the bucket inside that period: `(ts - period_start) / resolution`.
    pub bucket: u32,
}

/// What the lookup needs to know of a tier: its bucket width and the time one file covers,
/// with the periods its files had before a period change. A configured tier
/// ([`crate::config::TierSpec`]) converts into one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout<'a> {
    /// Width of one bucket.
    pub resolution: Span,
    /// Time one period file covers from the last change on (from the epoch when there was
    /// none); a whole multiple of `resolution`.
    pub period: Span,
    /// The tier's earlier periods, oldest first: each covers the time before its `until`
    /// (and from the previous one's `until`, or without bound for the first). Empty for a
    /// tier whose period never changed.
    pub earlier: &'a [PeriodChange],
}

/// One earlier period of a tier whose period was changed (docs/file-format.md, "Period
/// changes"): the files that start before `until` were cut with `period`, on the grid that
/// starts at the previous change's `until` (at the epoch for the first). From `until` on, the
/// next change's period, or the tier's period, cuts files on the grid that starts at `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct PeriodChange {
    /// The first second the period no longer covers: the end of the newest file cut with it.
    pub until: Timestamp,
    /// The period the files before `until` have.
    pub period: Span,
}

impl Layout<'_> {
    /// The range of periods holding `ts`: the instant its grid starts at and its period. One
    /// compare for a tier whose period never changed.
    #[inline]
    fn range_of(&self, ts: Timestamp) -> (Timestamp, Span) {
        let Some(last) = self.earlier.last() else {
            return (0, self.period);
        };
        if ts >= last.until {
            return (last.until, self.period);
        }
        let after = self.earlier.partition_point(|c| c.until <= ts);
        let anchor = match after {
            0 => 0,
            _ => self.earlier[after - 1].until,
        };
        (anchor, self.earlier[after].period)
    }

    /// The start of the period holding `ts`, or `None` when it does not fit in a timestamp.
    #[inline]
    pub fn checked_period_start(&self, ts: Timestamp) -> Option<Timestamp> {
        let (anchor, period) = self.range_of(ts);
        anchor.checked_add(checked_align_down(ts.checked_sub(anchor)?, period)?)
    }

    /// The start of the period holding `ts`.
    ///
    /// # Panics
    /// As [`place`].
    pub fn period_start(&self, ts: Timestamp) -> Timestamp {
        self.checked_period_start(ts)
            .unwrap_or_else(|| panic!("the period start of {ts} does not fit in a timestamp"))
    }

    /// The period of the file that starts at `period_start` (a period start of this layout).
    pub fn period_at(&self, period_start: Timestamp) -> Span {
        self.range_of(period_start).1
    }

    /// The end of the file that starts at `period_start`, which is where the next one starts.
    pub fn period_end(&self, period_start: Timestamp) -> Timestamp {
        period_start.saturating_add(self.period_at(period_start).secs() as i64)
    }
}

/// The placement of a sample at `ts` in one tier, without allocating: the write hot path
/// calls this once per tier.
///
/// # Panics
/// On a layout that [`TiersConfig::validate`](crate::config::TiersConfig::validate) would
/// refuse (zero resolution or period), as [`align_down`] does.
#[inline]
pub fn place<'a>(tier_index: usize, layout: impl Into<Layout<'a>>, ts: Timestamp) -> Placement {
    checked_place(tier_index, layout, ts)
        .unwrap_or_else(|| panic!("the period start of {ts} does not fit in a timestamp"))
}

/// [`place`], or `None` for a `ts` so near the earliest timestamp that its period start
/// does not fit in one (a sample every tier's window refuses: a cluster owner meets such
/// samples in a logged message before it checks them).
#[inline]
pub fn checked_place<'a>(
    tier_index: usize,
    layout: impl Into<Layout<'a>>,
    ts: Timestamp,
) -> Option<Placement> {
    let layout = layout.into();
    let period_start = layout.checked_period_start(ts)?;
    let bucket = (ts - period_start) / step_secs(layout.resolution);
    Some(Placement {
        tier: tier_index,
        period_start,
        // A validated tier has at most 10 million buckets per period, so this fits.
        bucket: bucket as u32,
    })
}

/// THE lookup: for each tier, which period file and which bucket inside it a sample at `ts`
/// goes to. Pure; one [`Placement`] per tier, in tier order.
///
/// # Panics
/// As [`place`], on tiers that validation would refuse.
pub fn locate<'a, L: Into<Layout<'a>>>(
    tiers: impl IntoIterator<Item = L>,
    ts: Timestamp,
) -> Vec<Placement> {
    tiers
        .into_iter()
        .enumerate()
        .map(|(index, tier)| place(index, tier, ts))
        .collect()
}

/// First second a tier still holds at `now`: the start of the period that holds
/// `now - retention`, so the files of earlier periods are outside the retention window.
/// Files cut before a period change expire by their own period.
pub fn window_start<'a>(
    now: Timestamp,
    retention: Span,
    layout: impl Into<Layout<'a>>,
) -> Timestamp {
    layout
        .into()
        .period_start(now.saturating_sub(retention.secs() as i64))
}

/// RFC 3339 rendering of a timestamp, for example "2026-11-21T00:00:00Z". Meant for display
/// and tests; a timestamp beyond chrono's range (about 262,000 years either side) is written
/// as its plain number of seconds.
pub fn format_ts(ts: Timestamp) -> String {
    match chrono::DateTime::from_timestamp(ts, 0) {
        Some(time) => time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        None => ts.to_string(),
    }
}

mod parse;
/// Greatest common divisor of two widths (of the same unit); never negative.
pub(crate) fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.abs()
}

/// Least common multiple of two positive widths (of the same unit): the narrowest width
/// both divide; `None` when it overflows.
pub(crate) fn lcm(a: i64, b: i64) -> Option<i64> {
    (a / gcd(a, b)).checked_mul(b)
}

#[cfg(test)]
mod tests;

pub use parse::{parse_interval, parse_offset, parse_time};
