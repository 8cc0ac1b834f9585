//! Graphite's time syntax: `from`/`until` ([`parse_time`]) and the intervals of functions
//! such as `summarize` ([`parse_interval`]), all in UTC.

#[cfg(test)]
mod tests;

use chrono::{Datelike, NaiveDate, NaiveTime};

use crate::{Error, Result};

/// Parses a `from`/`until` value into unix seconds.
///
/// Accepted: `now`; unix seconds (`1700000000`); offsets from now such as `-6h`, `now-7d`,
/// `+30min` or `-1d-6h`; `HH:MM_YYYYMMDD` and `YYYYMMDD` (UTC midnight). As in graphite-web,
/// eight digits that read as a date after 1900 are a date, not seconds. Units are those of
/// graphite-web: s/sec/second(s), m/min/minute(s) (Grafana sends `min`), h/hour(s),
/// d/day(s), w/week(s), mon/month(s) (30 days), y/year(s) (365 days).
///
/// # Errors
///
/// [`Error::InvalidQuery`] naming the text when it is none of those forms.
pub fn parse_time(text: &str, now: i64) -> Result<i64> {
    let invalid = || {
        Error::InvalidQuery(format!(
            "invalid time {text:?}: expected now, unix seconds, an offset such as -6h or \
             now-7d, HH:MM_YYYYMMDD or YYYYMMDD"
        ))
    };
    let t = text.trim();
    if t == "now" {
        return Ok(now);
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        if let Some(day) = date(t).filter(|d| d.year() > 1900) {
            return Ok(day.and_time(NaiveTime::MIN).and_utc().timestamp());
        }
        return t.parse().map_err(|_| invalid());
    }
    let relative = t.strip_prefix("now").unwrap_or(t);
    if relative.starts_with(['+', '-']) {
        return offset(relative)
            .and_then(|o| now.checked_add(o))
            .ok_or_else(invalid);
    }
    let (clock, day) = t.split_once('_').ok_or_else(invalid)?;
    let clock = NaiveTime::parse_from_str(clock, "%H:%M").map_err(|_| invalid())?;
    let day = date(day).ok_or_else(invalid)?;
    Ok(day.and_time(clock).and_utc().timestamp())
}

/// Parses a positive interval such as `1h`, `5min`, `30s` or `1d` into seconds.
///
/// # Errors
///
/// [`Error::InvalidQuery`] when the text is not a whole number with a unit of
/// [`parse_time`], or is not positive.
pub fn parse_interval(text: &str) -> Result<i64> {
    offset(text).filter(|&s| s > 0).ok_or_else(|| {
        Error::InvalidQuery(format!(
            "invalid interval {text:?}: expected a positive number with a unit, such as 1h"
        ))
    })
}

/// `YYYYMMDD`, digits only.
fn date(text: &str) -> Option<NaiveDate> {
    if text.len() != 8 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |range: std::ops::Range<usize>| text[range].parse().ok();
    NaiveDate::from_ymd_opt(field(0..4)? as i32, field(4..6)?, field(6..8)?)
}

/// The sum of terms `[+-]<digits><unit>` in seconds (the first term's sign is optional);
/// `None` when malformed or out of range.
fn offset(text: &str) -> Option<i64> {
    let (mut rest, mut total, mut first) = (text, 0i64, true);
    while !rest.is_empty() {
        let (sign, body) = match rest.as_bytes()[0] {
            b'+' => (1, &rest[1..]),
            b'-' => (-1, &rest[1..]),
            _ if first => (1, rest),
            _ => return None,
        };
        let digits = body.bytes().take_while(u8::is_ascii_digit).count();
        let letters = body[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let count: i64 = body[..digits].parse().ok()?;
        let unit = unit_seconds(&body[digits..digits + letters])?;
        total = total.checked_add(sign * count.checked_mul(unit)?)?;
        rest = &body[digits + letters..];
        first = false;
    }
    (!first).then_some(total)
}

fn unit_seconds(unit: &str) -> Option<i64> {
    Some(match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        "mon" | "month" | "months" => 30 * 86_400,
        "y" | "year" | "years" => 365 * 86_400,
        _ => return None,
    })
}
