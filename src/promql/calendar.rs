//! PromQL's date functions (`year`, `month`, `day_of_month`, `day_of_week`, `day_of_year`,
//! `days_in_month`, `hour`, `minute`): each value read as unix seconds, its UTC calendar
//! field. They read no stored data but their argument, so they are exact over rollups as
//! anywhere; without an argument they answer the evaluation time's field, as Prometheus'
//! `vector(time())` default.

use chrono::{DateTime, Datelike, Timelike, Utc};

/// The calendar field the date function `name` takes of a time, `None` for a name that is
/// not a date function.
pub(crate) fn date_field(name: &str) -> Option<fn(DateTime<Utc>) -> f64> {
    Some(match name {
        "year" => |t| f64::from(t.year()),
        "month" => |t| f64::from(t.month()),
        "day_of_month" => |t| f64::from(t.day()),
        // Sunday is 0, as Go's time.Weekday.
        "day_of_week" => |t| f64::from(t.weekday().num_days_from_sunday()),
        "day_of_year" => |t| f64::from(t.ordinal()),
        "days_in_month" => |t| f64::from(days_in_month(t.year(), t.month())),
        "hour" => |t| f64::from(t.hour()),
        "minute" => |t| f64::from(t.minute()),
        _ => return None,
    })
}

/// `field` of the time `secs` unix seconds (its fraction dropped toward zero, as Prometheus
/// converts it); NaN for a value that is no time (NaN, an infinity, out of chrono's range).
pub(crate) fn of_secs(field: fn(DateTime<Utc>) -> f64, secs: f64) -> f64 {
    if !secs.is_finite() || secs.abs() >= 1e15 {
        return f64::NAN;
    }
    DateTime::from_timestamp(secs.trunc() as i64, 0).map_or(f64::NAN, field)
}

fn days_in_month(year: i32, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let first = chrono::NaiveDate::from_ymd_opt(year, month, 1);
    let next = chrono::NaiveDate::from_ymd_opt(next_year, next_month, 1);
    match (first, next) {
        (Some(first), Some(next)) => (next - first).num_days() as u32,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_known_times() {
        // 2024-02-29T23:59:59Z, a Thursday, the 60th day of a leap year.
        let t = 1_709_251_199.9;
        let field = |name| of_secs(date_field(name).unwrap(), t);
        assert_eq!(field("year"), 2024.0);
        assert_eq!(field("month"), 2.0);
        assert_eq!(field("day_of_month"), 29.0);
        assert_eq!(field("day_of_week"), 4.0);
        assert_eq!(field("day_of_year"), 60.0);
        assert_eq!(field("days_in_month"), 29.0);
        assert_eq!(field("hour"), 23.0);
        assert_eq!(field("minute"), 59.0);
        // Before the epoch the fraction goes toward zero too: -0.5 is 1970-01-01T00:00:00.
        assert_eq!(of_secs(date_field("year").unwrap(), -0.5), 1970.0);
        assert_eq!(of_secs(date_field("days_in_month").unwrap(), 0.0), 31.0);
        assert!(of_secs(date_field("hour").unwrap(), f64::NAN).is_nan());
        assert!(date_field("week").is_none());
    }
}
