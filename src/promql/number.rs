//! A sample value and a time as Prometheus' JSON writes them, appended to an answer's text
//! without a string of their own: a range query's answer holds a value per series and step
//! (144,000 for 100 series over a day at 60 s), and writing them through `format!("{v}")`
//! (the standard library's Grisu) was a third of the server's time on such a query.
//!
//! Prometheus 2.42 writes a value (`jsonutil.MarshalValue`) with Go's
//! `strconv.FormatFloat(v, 'f', -1, 64)`, or with `'e'` when `0 < |v| < 1e-6` or
//! `|v| >= 1e21` (`1e-07`, `1.234e+25`); `count_values` labels its series with `'f'` alone.
//! Both take the shortest digits that read back to the same f64 and, when two such digit
//! strings are equally close, the even one (`1394865425023536.25` is `...536.2`). The digits
//! here are the `zmij` crate's (Schubfach, the crate serde_json writes its numbers with),
//! which breaks ties the same way; Rust's `{}` writes the same digits except on those ties,
//! and neither the `'e'` form. The tests hold the text to a real Prometheus' on edge cases
//! and to `{}`'s digits on random values of every exponent.

/// Appends `v` as Prometheus' JSON writes a sample value (without the quotes): `NaN`,
/// `+Inf`, `-Inf`, or Go's shortest text, `'e'` form for `0 < |v| < 1e-6` or `|v| >= 1e21`.
pub(crate) fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let exponent_form = v != 0.0 && !(1e-6..1e21).contains(&v.abs());
        push_finite(out, v, exponent_form);
    }
}

/// Go's `strconv.FormatFloat(v, 'f', -1, 64)` with Prometheus' names of the non-finite
/// values: what `count_values` labels its series with.
pub(crate) fn fixed_text(v: f64) -> String {
    let mut out = String::new();
    if v.is_finite() {
        push_finite(&mut out, v, false);
    } else {
        push_value(&mut out, v);
    }
    out
}

/// Appends a time as Prometheus writes it: unix seconds, with the milliseconds only when
/// there are any (`1700000000`, `1700000000.5`).
pub(crate) fn push_time(out: &mut String, ms: i64) {
    if ms % 1000 == 0 {
        out.push_str(itoa::Buffer::new().format(ms / 1000));
    } else {
        push_finite(out, ms as f64 / 1000.0, false);
    }
}

/// `v` (finite) in Go's shortest `'e'` form when `exponent_form`, else its `'f'` form.
fn push_finite(out: &mut String, v: f64, exponent_form: bool) {
    let mut buffer = zmij::Buffer::new();
    let shortest = buffer.format_finite(v);
    // zmij writes `123.0` for an integer and `0.25` from 1e-5 to below 1e16, and `1.5e-7`
    // or `1.5e22` outside: the digits are the shortest either way. An exponent (`e`, a sign,
    // three digits at most) lies in the last five bytes.
    let tail = shortest.len().saturating_sub(5);
    let exponent_at = shortest.as_bytes()[tail..].iter().position(|&b| b == b'e');
    let Some((mantissa, exponent)) = exponent_at.map(|at| shortest.split_at(tail + at)) else {
        if !exponent_form {
            out.push_str(shortest.strip_suffix(".0").unwrap_or(shortest));
            return;
        }
        return push_laid_out(out, shortest, 0, true);
    };
    let exponent = &exponent[1..];
    let exponent = (exponent.strip_prefix('+').unwrap_or(exponent))
        .parse()
        .unwrap_or(0);
    push_laid_out(out, mantissa, exponent, exponent_form);
}

/// Appends `mantissa` x 10^`exponent` (`mantissa` as zmij writes it: a sign, digits, a
/// point) in Go's `'e'` form (`d.ddde+XX`, two exponent digits at least) or `'f'` form.
fn push_laid_out(out: &mut String, mantissa: &str, exponent: i32, exponent_form: bool) {
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // The significant digits, as 0.d1d2...dn x 10^point.
    let all = || whole.bytes().chain(fraction.bytes());
    let leading = all().take_while(|&b| b == b'0').count();
    let mut digits: Vec<u8> = all().skip(leading).collect();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    let point = whole.len() as i32 - leading as i32 + exponent;
    let digits = std::str::from_utf8(&digits).unwrap_or("0");
    out.push_str(sign);
    if exponent_form {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = point - 1;
        out.push_str(if e < 0 { "e-" } else { "e+" });
        if e.abs() < 10 {
            out.push('0');
        }
        out.push_str(itoa::Buffer::new().format(e.abs()));
    } else if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
        out.push_str(digits);
    } else if point as usize >= digits.len() {
        out.push_str(digits);
        out.extend(std::iter::repeat_n('0', point as usize - digits.len()));
    } else {
        out.push_str(&digits[..point as usize]);
        out.push('.');
        out.push_str(&digits[point as usize..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(v: f64) -> String {
        let mut out = String::new();
        push_value(&mut out, v);
        out
    }

    /// Prometheus' layout of Rust's shortest digits: `{}`, or `{:e}` with Go's exponent.
    fn with_std_digits(v: f64) -> String {
        if v != 0.0 && !(1e-6..1e21).contains(&v.abs()) {
            let text = format!("{v:e}");
            let (mantissa, exponent) = text.split_once('e').unwrap();
            let exponent: i32 = exponent.parse().unwrap();
            let sign = if exponent < 0 { '-' } else { '+' };
            format!("{mantissa}e{sign}{:02}", exponent.abs())
        } else {
            format!("{v}")
        }
    }

    /// The text Prometheus writes has `{}`'s digits, except where two shortest digit
    /// strings are equally close to `v`: then both read back to `v`, have as many digits,
    /// and Prometheus' ends in the even one.
    fn check(v: f64) {
        let ours = written(v);
        let std = with_std_digits(v);
        if ours == std {
            return;
        }
        let what = format!("{ours} beside {std}, bits {:#018x}", v.to_bits());
        assert_eq!(ours.parse::<f64>().ok(), Some(v), "{what}");
        assert_eq!(std.parse::<f64>().ok(), Some(v), "{what}");
        let significant = |text: &str| -> Vec<u8> {
            let mantissa = text.split('e').next().unwrap();
            let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
            let start = digits.iter().position(|&d| d != b'0').unwrap_or(0);
            let end = digits.iter().rposition(|&d| d != b'0').map_or(0, |e| e + 1);
            digits[start..end.max(start)].to_vec()
        };
        let (a, b) = (significant(&ours), significant(&std));
        assert_eq!(a.len(), b.len(), "{what}");
        assert_eq!(a.last().map(|d| d % 2), Some(0), "{what}: not the even one");
    }

    #[test]
    fn values_are_written_as_prometheus_writes_them() {
        // Each text as Prometheus 2.42 answered the value, scraped as this decimal text and
        // queried (the first five are ties between two shortest digit strings).
        for (value, text) in [
            ("1394865425023536.25", "1394865425023536.2"),
            ("643371375338642.25", "643371375338642.2"),
            ("1125899906842627.75", "1125899906842627.8"),
            ("562949953421312.125", "562949953421312.1"),
            ("1125899906842624.25", "1125899906842624.2"),
            ("4503599627370495.5", "4503599627370495.5"),
            ("0.3", "0.3"),
            ("1e23", "1e+23"),
            ("1e-7", "1e-07"),
            ("1.5e-7", "1.5e-07"),
            ("1e-6", "0.000001"),
            ("9.99e-7", "9.99e-07"),
            ("0.00000123", "0.00000123"),
            ("1e21", "1e+21"),
            ("9.99e20", "999000000000000000000"),
            ("1.2345678901234568e20", "123456789012345680000"),
            ("1.234e25", "1.234e+25"),
            ("5e-324", "5e-324"),
            ("-0", "-0"),
            ("-1e-7", "-1e-07"),
            ("-2.5e30", "-2.5e+30"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("1e16", "10000000000000000"),
            ("123456789.125", "123456789.125"),
        ] {
            let v: f64 = value.parse().unwrap();
            assert_eq!(written(v), text, "{value}");
        }
        for (v, text) in [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (0.2833333333333334, "0.2833333333333334"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(written(v), text);
        }
    }

    #[test]
    fn count_values_labels_are_go_fixed_text() {
        for (value, text) in [
            ("1e23", "100000000000000000000000"),
            ("1e-7", "0.0000001"),
            ("1394865425023536.25", "1394865425023536.2"),
            ("-0", "-0"),
            ("2", "2"),
            ("NaN", "NaN"),
            ("-inf", "-Inf"),
        ] {
            assert_eq!(fixed_text(value.parse().unwrap()), text, "{value}");
        }
    }

    #[test]
    fn every_power_of_two_and_ten_and_neighbours_match() {
        let neighbours = |v: f64| {
            let bits = v.to_bits();
            [
                bits.saturating_sub(1),
                bits,
                (bits + 1).min(f64::MAX.to_bits()),
            ]
            .map(f64::from_bits)
        };
        for e in -1074..=1023 {
            for v in neighbours(2f64.powi(e)) {
                check(v);
                check(-v);
            }
        }
        for e in -323..=308 {
            for v in neighbours(format!("1e{e}").parse().unwrap()) {
                check(v);
                check(-v);
            }
        }
        for v in [f64::MIN_POSITIVE, f64::EPSILON, f64::MIN_POSITIVE - 5e-324] {
            check(v);
        }
    }

    #[test]
    fn integers_and_decimals_match() {
        for i in (-100_000i64..=100_000).chain((0..64).map(|s| 1i64 << s)) {
            check(i as f64);
            check(i as f64 / 100.0);
            check(i as f64 / 7.0);
            check(i as f64 * 0.25 / 60.0);
            if i.unsigned_abs() <= 1 << 53 {
                assert_eq!(fixed_text(i as f64), i.to_string());
            }
        }
    }

    #[test]
    fn random_values_of_every_exponent_match() {
        // xorshift64*, seeded: every bit pattern is as likely, so every exponent is.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300_000 {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let v = f64::from_bits(state.wrapping_mul(0x2545_f491_4f6c_dd1d));
            if v.is_finite() {
                check(v);
                assert_eq!(fixed_text(v).parse::<f64>().ok(), Some(v));
            }
        }
    }

    #[test]
    fn times_are_whole_seconds_or_fractions() {
        for (ms, text) in [
            (1_700_000_000_000, "1700000000"),
            (1_700_000_000_500, "1700000000.5"),
            (1_700_000_000_001, "1700000000.001"),
            (-1_500, "-1.5"),
            (0, "0"),
        ] {
            let mut out = String::new();
            push_time(&mut out, ms);
            assert_eq!(out, text);
        }
    }
}
