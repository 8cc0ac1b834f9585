//! The one grammar for points in time and intervals that people and tools type: the command
//! line's `--from`/`--to`, the HTTP API's `from`/`to`, JSON writes' string `ts`, and the
//! Graphite render API's `from`/`until` and function intervals (`summarize(x, "1h")`).
//! All times are UTC.

#[cfg(test)]
mod tests;

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime};

use super::Timestamp;

/// Parses a point in time into unix seconds. Accepted:
/// - `now`;
/// - unix seconds (`1700000000`), except that eight digits reading as a date after 1900
///   are that date (`20251121`, as in graphite-web);
/// - an offset from now: `-6h`, `now-7d`, `+30min`, `-1d-6h`, `-1d6h`, in the units of
///   [`parse_interval`]; blanks and case as graphite-web ignores them (`now - 6H`);
/// - RFC 3339 (`2025-11-21T12:00:00Z`, `2025-11-21T13:00:00+01:00`);
/// - a date and time without a zone, read as UTC: `2025-11-21T12:00:00`,
///   `2025-11-21 12:00`, `2025-11-21` (midnight), Graphite's `12:00_20251121`;
/// - graphite-web's words (its `attime` grammar, in UTC): a day (`today`, `yesterday`,
///   `tomorrow`, `monday`, `jan1`, `01/31/2025`), a time of day (`midnight`, `noon`,
///   `teatime`, `6pm`, `14:30`), or both (`noon yesterday`), each followed by an offset if
///   wanted (`yesterday-6h`); see `graphite_words`.
///
/// A bare negative number (`-6`) is refused rather than read as a second before 1970: it is
/// almost always an offset missing its unit.
///
/// # Errors
/// A message that quotes the text and lists the forms.
pub fn parse_time(text: &str, now: Timestamp) -> Result<Timestamp, String> {
    let invalid = || {
        format!(
            "{text:?} is not a time: use now, unix seconds, an offset such as -6h, now-7d or \
             -1d-6h, RFC 3339 (2025-11-21T12:00:00Z), a UTC date such as 2025-11-21, \
             '2025-11-21 12:00', 20251121 or 12:00_20251121, or graphite-web's words such \
             as yesterday, midnight, noon today, monday or jan1"
        )
    };
    let t = text.trim();
    if t == "now" {
        return Ok(now);
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        if let Some(day) = compact_date(t).filter(|d| d.year() > 1900) {
            return Ok(day.and_time(NaiveTime::MIN).and_utc().timestamp());
        }
        return t.parse().map_err(|_| invalid());
    }
    let relative = t.strip_prefix("now").unwrap_or(t);
    if relative.starts_with(['+', '-']) {
        // Otherwise read as graphite-web reads it, blanks dropped and case ignored (`-1D`,
        // `now - 6h`), by `graphite_words`.
        if let Some(time) = offset(relative).and_then(|o| now.checked_add(o)) {
            return Ok(time);
        }
    }
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(time.timestamp());
    }
    zoneless(t)
        .map(|time| time.and_utc().timestamp())
        .or_else(|| graphite_words(t, now))
        .ok_or_else(invalid)
}

/// Months and weekdays as graphite-web's `attime` knows them: by their first three letters.
const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// graphite-web's `parseATTime` (1.1.8) for the forms the other rules leave, in UTC: blanks,
/// `_` and `,` dropped and case ignored; the text split at its first `+` (else its first
/// `-`) into a reference and an offset ([`offset`]). The reference is `now`, or a time of
/// day (`HH:MM` with `am`/`pm` if wanted, `6am`, `6pm`, `noon`, `midnight`, `teatime`;
/// midnight when absent) then a day (`today`, `yesterday`, `tomorrow`, `MM/DD/YY[YY]`,
/// `YYYYMMDD`, a month's name and a day such as `jan1`, or the last such weekday, today
/// included, as `monday`; today when absent). graphite-web's quirks are kept, so that a
/// dashboard's time means the same on both: `12am` is noon, and a two-digit year before 70 is
/// in the 2000s.
fn graphite_words(text: &str, now: Timestamp) -> Option<Timestamp> {
    let s: String = (text.chars())
        .filter(|c| !matches!(c, ' ' | '_' | ','))
        .collect::<String>()
        .to_lowercase();
    if s.is_empty() {
        return None;
    }
    let (reference, shift) = match s.find('+').or_else(|| s.find('-')) {
        Some(at) => (&s[..at], offset(&s[at..])?),
        None => (s.as_str(), 0),
    };
    reference_time(reference, now)?.checked_add(shift)
}

/// The reference part of [`graphite_words`]: the time it names, to the minute.
fn reference_time(reference: &str, now: Timestamp) -> Option<Timestamp> {
    if reference.is_empty() || reference == "now" {
        return Some(now);
    }
    let today = chrono::DateTime::from_timestamp(now, 0)?.date_naive();
    let mut rest = reference;
    let (mut hour, mut minute) = (0u32, 0u32);
    // A number before the marker at byte 1 or 2 (graphite-web's `0 < i < 3`).
    let before = |rest: &str, marker: &str| rest.find(marker).filter(|&i| 0 < i && i < 3);
    if let Some(i) = before(rest, ":") {
        hour = rest[..i].parse().ok()?;
        let end = (i + 3).min(rest.len());
        minute = rest.get(i + 1..end)?.parse().ok()?;
        rest = &rest[end..];
        if let Some(after) = rest.strip_prefix("am") {
            rest = after;
        } else if let Some(after) = rest.strip_prefix("pm") {
            hour = (hour + 12) % 24;
            rest = after;
        }
    }
    if let Some(i) = before(rest, "am") {
        hour = rest[..i].parse().ok()?;
        rest = &rest[i + 2..];
    }
    if let Some(i) = before(rest, "pm") {
        hour = (rest[..i].parse::<u32>().ok()? + 12) % 24;
        rest = &rest[i + 2..];
    }
    for (word, at) in [("noon", 12), ("midnight", 0), ("teatime", 16)] {
        if let Some(after) = rest.strip_prefix(word) {
            (hour, minute, rest) = (at, 0, after);
            break;
        }
    }
    let prefix = rest.get(..3).unwrap_or(rest);
    let day = match rest {
        "" | "today" => today,
        "yesterday" => today.pred_opt()?,
        "tomorrow" => today.succ_opt()?,
        _ if rest.matches('/').count() == 2 => {
            let mut parts = rest.split('/').map(|p| p.parse::<i32>().ok());
            let (month, day, mut year) = (parts.next()??, parts.next()??, parts.next()??);
            if year < 1900 {
                year += 1900;
            }
            if year < 1970 {
                year += 100;
            }
            NaiveDate::from_ymd_opt(year, u32::try_from(month).ok()?, u32::try_from(day).ok()?)?
        }
        _ if rest.len() == 8 && rest.bytes().all(|b| b.is_ascii_digit()) => compact_date(rest)?,
        _ if MONTHS.contains(&prefix) => {
            let digits = rest
                .bytes()
                .rev()
                .take_while(u8::is_ascii_digit)
                .count()
                .min(2);
            let day = rest[rest.len() - digits..].parse().ok()?;
            let month = MONTHS.iter().position(|m| *m == prefix)? as u32 + 1;
            NaiveDate::from_ymd_opt(today.year(), month, day)?
        }
        _ if WEEKDAYS.contains(&prefix) => {
            let wanted = WEEKDAYS.iter().position(|d| *d == prefix)? as i64;
            let back = (i64::from(today.weekday().num_days_from_sunday()) - wanted).rem_euclid(7);
            today.checked_sub_days(chrono::Days::new(back as u64))?
        }
        _ => return None,
    };
    Some(day.and_hms_opt(hour, minute, 0)?.and_utc().timestamp())
}

/// Parses a positive interval, whole numbers with units, into seconds: `30s`, `5min`,
/// `1h`, `1d`, `1h30min`. Units, as graphite-web has them: s/sec/second(s), m/min/minute(s)
/// (Grafana sends `min`), h/hour(s), d/day(s), w/week(s), mo/mon/month(s) (30 days),
/// y/year(s) (365 days), and any other word graphite-web reads by its start (`hr`, `wk`,
/// `yr`; see `offset_unit_seconds`).
///
/// # Errors
/// A message quoting the text when it is not of that form, or not positive.
pub fn parse_interval(text: &str) -> Result<i64, String> {
    offset(text).filter(|&s| s > 0).ok_or_else(|| {
        format!("invalid interval {text:?}: expected a positive number with a unit, such as 1h")
    })
}

/// Parses a signed offset, one or more terms such as `-1d`, `+6h`, `2w`, `-1d6h` or `-1d-6h`
/// (a term's sign optional, the one before it then applying, as graphite-web's
/// parseTimeOffset takes it), into seconds.
///
/// # Errors
/// A message quoting the text when it is not of that form.
pub fn parse_offset(text: &str) -> Result<i64, String> {
    offset(text).ok_or_else(|| {
        format!("invalid time offset {text:?}: expected a number with a unit, such as -1d or 6h")
    })
}

/// A date and time without a zone: `YYYY-MM-DD`, `YYYY-MM-DD[T ]HH:MM[:SS]`, or Graphite's
/// `HH:MM_YYYYMMDD`.
fn zoneless(text: &str) -> Option<NaiveDateTime> {
    if let Some((clock, day)) = text.split_once('_') {
        let clock = NaiveTime::parse_from_str(clock, "%H:%M").ok()?;
        return Some(compact_date(day)?.and_time(clock));
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Some(day.and_time(NaiveTime::MIN));
    }
    [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
}

/// `YYYYMMDD`, digits only.
fn compact_date(text: &str) -> Option<NaiveDate> {
    if text.len() != 8 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |range: std::ops::Range<usize>| text[range].parse().ok();
    NaiveDate::from_ymd_opt(field(0..4)? as i32, field(4..6)?, field(6..8)?)
}

/// The sum of terms `[+-]<digits><unit>` in seconds; `None` when malformed or out of range.
/// A term without a sign takes the sign before it (the first term's is `+`), as
/// graphite-web's parseTimeOffset applies its one sign to every term (`-1d6h` is 30 hours
/// back, `1h30min` 90 minutes); a sign between terms (`-1d+6h`) is tierdb's own. Units as
/// [`offset_unit_seconds`] reads them.
fn offset(text: &str) -> Option<i64> {
    let (mut rest, mut total, mut sign, mut first) = (text, 0i64, 1, true);
    while !rest.is_empty() {
        let body = match rest.as_bytes()[0] {
            b'+' => {
                sign = 1;
                &rest[1..]
            }
            b'-' => {
                sign = -1;
                &rest[1..]
            }
            _ => rest,
        };
        let digits = body.bytes().take_while(u8::is_ascii_digit).count();
        let letters = body[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let count: i64 = body[..digits].parse().ok()?;
        let unit = offset_unit_seconds(&body[digits..digits + letters])?;
        total = total.checked_add(sign * count.checked_mul(unit)?)?;
        rest = &body[digits + letters..];
        first = false;
    }
    (!first).then_some(total)
}

/// Seconds in one unit of an offset or interval: [`unit_seconds`]'s units, else any word
/// graphite-web's `getUnitString` takes by its start (`s...` seconds, `min...`, `h...` as in
/// `hr` and `hrs`, `d...`, `w...` as in `wk`, `mon...` 30 days, `y...` as in `yr` 365 days).
fn offset_unit_seconds(unit: &str) -> Option<i64> {
    unit_seconds(unit).or_else(|| {
        let starts = |prefix: &str| unit.starts_with(prefix);
        Some(match () {
            _ if starts("s") => 1,
            _ if starts("min") => 60,
            _ if starts("h") => 3_600,
            _ if starts("d") => 86_400,
            _ if starts("w") => 7 * 86_400,
            _ if starts("mon") => 30 * 86_400,
            _ if starts("y") => 365 * 86_400,
            _ => return None,
        })
    })
}

/// Seconds in one `unit`, for every time and span tierdb reads: graphite-web's units, and
/// `mo` (the dashboard's month) beside `mon`.
pub(super) fn unit_seconds(unit: &str) -> Option<i64> {
    Some(match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        "mo" | "mon" | "month" | "months" => 30 * 86_400,
        "y" | "year" | "years" => 365 * 86_400,
        _ => return None,
    })
}
