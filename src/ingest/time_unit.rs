//! The unit timestamps seem to be written in when every sample of a write was refused for
//! its time: seconds read as nanoseconds are all `too_old`, milliseconds read as seconds all
//! `too_far_in_future`. `tierdb import` and the HTTP Influx write say the same thing from
//! this one guess.

use super::influx::Precision;
use super::report::IngestReport;
use crate::time::Timestamp;

/// Refusals that only the sample's time explains.
const TIME_REASONS: [&str; 2] = ["too_old", "too_far_in_future"];

/// A unit a timestamp may be written in: its precision, its name, and its spelling in
/// `precision=` / `--precision` (InfluxDB 1.x's, which the 2.x API also reads but for `u`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unit {
    /// The precision that reads it.
    pub(crate) precision: Precision,
    /// Its name, plural.
    pub(crate) name: &'static str,
    /// Its `precision` value.
    pub(crate) flag: &'static str,
}

/// Every unit, finest first.
const UNITS: [Unit; 4] = [
    Unit {
        precision: Precision::Nanoseconds,
        name: "nanoseconds",
        flag: "ns",
    },
    Unit {
        precision: Precision::Microseconds,
        name: "microseconds",
        flag: "u",
    },
    Unit {
        precision: Precision::Milliseconds,
        name: "milliseconds",
        flag: "ms",
    },
    Unit {
        precision: Precision::Seconds,
        name: "seconds",
        flag: "s",
    },
];

/// The name of the unit `precision` reads ("minutes or hours" for those).
pub(crate) fn name_of(precision: Precision) -> &'static str {
    (UNITS.iter())
        .find(|unit| unit.precision == precision)
        .map_or("minutes or hours", |unit| unit.name)
}

/// True when nothing of `report` landed and every refusal was for the sample's time.
pub(crate) fn refused_only_for_time(report: &IngestReport) -> bool {
    let timed: u64 = (TIME_REASONS.iter())
        .filter_map(|reason| report.rejected.get(reason))
        .sum();
    report.accepted == 0 && timed > 0 && timed == report.rejected_total()
}

/// The unit other than `read_as` in which the timestamp `raw` (as written) is a recent time
/// at `now`: within the ten years before it and the day after. `None` when there is none.
pub(crate) fn looks_like(raw: i64, read_as: Precision, now: Timestamp) -> Option<Unit> {
    let recent = |ts: Timestamp| ts > now - 10 * 365 * 86_400 && ts < now + 86_400;
    UNITS
        .into_iter()
        .filter(|unit| unit.precision != read_as)
        .find(|unit| unit.precision.to_seconds(raw).is_some_and(recent))
}

/// The timestamp as written on an Influx line: its last field, when a number.
pub(crate) fn written_ts(line: &str) -> Option<i64> {
    line.trim_end().rsplit(' ').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{looks_like, Precision};

    #[test]
    fn a_recent_time_in_another_unit_is_found() {
        let now = 1_795_000_000;
        let seconds = looks_like(now, Precision::Nanoseconds, now).unwrap();
        assert_eq!((seconds.name, seconds.flag), ("seconds", "s"));
        let millis = looks_like(now * 1000, Precision::Seconds, now).unwrap();
        assert_eq!(millis.flag, "ms");
        assert_eq!(looks_like(12_345, Precision::Nanoseconds, now), None);
        // The unit it was read in is never the guess.
        assert_eq!(looks_like(now, Precision::Seconds, now), None);
    }
}
