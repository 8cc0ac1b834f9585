//! Python's float arithmetic and formatting where graphite-web's answers show it: `str(float)`
//! (constantLine's name) and `%g` (scale's), which Grafana's legends show, and `round(x, 6)`
//! (perSecond's values).

#[cfg(test)]
mod tests;

/// Python's `str(x)` of a float: the shortest digits that read back to `x`, in positional
/// form with at least one decimal (`100.0`, `0.0001`) when the decimal exponent is from -4
/// to 15, else in scientific form with a signed two-digit exponent at least (`1e+16`,
/// `1.5e-05`); `inf`, `-inf`, `nan`.
pub(crate) fn str_float(x: f64) -> String {
    if !x.is_finite() {
        return match x {
            x if x.is_nan() => "nan".into(),
            x if x > 0.0 => "inf".into(),
            _ => "-inf".into(),
        };
    }
    let (negative, digits, exp) = shortest_digits(x);
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exp) {
        format!("{sign}{}", positional(&digits, exp, true))
    } else {
        format!("{sign}{}", scientific(&digits, exp))
    }
}

/// Python's `json.dumps` of a float: `repr` (as [`str_float`]) for a finite value, and
/// `Infinity`, `-Infinity` and `NaN`, which are not JSON but what Python writes.
pub(crate) fn json_float(x: f64) -> String {
    match x {
        x if x.is_nan() => "NaN".into(),
        x if x == f64::INFINITY => "Infinity".into(),
        x if x == f64::NEG_INFINITY => "-Infinity".into(),
        x => str_float(x),
    }
}

/// Python's `json.dumps` of a string, with its default `ensure_ascii=True`: quoted, `"` and
/// `\\` escaped, `\n`, `\r`, `\t`, `\b` and `\f` by name, every other character outside
/// printable ASCII as `\u` and four lowercase hex digits (a surrogate pair above U+FFFF).
pub(crate) fn json_str(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// Python's `"%g" % x`: six significant digits, trailing zeros dropped, in scientific form
/// (`1e+06`, `1e-05`) when the rounded decimal exponent is below -4 or at least 6.
pub(crate) fn format_g(x: f64) -> String {
    if !x.is_finite() {
        return str_float(x);
    }
    // Rust rounds to six significant digits exactly as C's printf does (round half to even
    // on the binary value), and tells the exponent after rounding.
    let rounded = format!("{x:.5e}");
    let (mantissa, exp) = rounded.split_once('e').expect("`{:e}` writes an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` writes a whole exponent");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let sign = if negative { "-" } else { "" };
    if x == 0.0 {
        return format!("{sign}0");
    }
    if (-4..6).contains(&exp) {
        format!("{sign}{}", positional(digits, exp, false))
    } else {
        format!("{sign}{}", scientific(digits, exp))
    }
}

/// Python's `round(x, 6)`: the float nearest to `x` rounded to six decimals. Rust writes the
/// exact binary value rounded (a tie cannot occur: no float is halfway between two
/// six-decimal numbers) and reads back the nearest float, as CPython does.
pub(crate) fn round_6(x: f64) -> f64 {
    round_to(x, 6)
}

/// Python's `round(x, digits)`: for digits of zero or more, the float nearest to `x`
/// rounded to that many decimals (half to even on the exact binary value, as CPython
/// does); for fewer, to tens, hundreds and so on.
pub(crate) fn round_to(x: f64, digits: i64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if digits < 0 {
        let unit = 10f64.powi(digits.unsigned_abs().min(308) as i32);
        return (x / unit).round_ties_even() * unit;
    }
    let digits = digits.min(340) as usize;
    format!("{x:.digits$}").parse().unwrap_or(x)
}

/// The sign, the shortest round-trip digits (no leading or trailing zeros, "0" for zero)
/// and the decimal exponent of the first digit.
fn shortest_digits(x: f64) -> (bool, String, i32) {
    let text = format!("{:e}", x.abs());
    let (mantissa, exp) = text.split_once('e').expect("`{:e}` writes an exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp = exp.parse().expect("`{:e}` writes a whole exponent");
    (x.is_sign_negative(), digits, exp)
}

/// `digits` (first digit at decimal exponent `exp`) written out with a point; `.0` added to
/// a whole number when `point_zero`.
fn positional(digits: &str, exp: i32, point_zero: bool) -> String {
    let (whole, fraction) = if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        ("0".to_owned(), format!("{zeros}{digits}"))
    } else {
        let point = exp as usize + 1;
        if digits.len() > point {
            (digits[..point].to_owned(), digits[point..].to_owned())
        } else {
            (format!("{digits:0<point$}"), String::new())
        }
    };
    match (fraction.is_empty(), point_zero) {
        (false, _) => format!("{whole}.{fraction}"),
        (true, true) => format!("{whole}.0"),
        (true, false) => whole,
    }
}

/// `d.ddde+XX`: the digits with a point after the first (none for one digit) and the
/// exponent signed, two digits at least.
fn scientific(digits: &str, exp: i32) -> String {
    let (first, rest) = digits.split_at(1);
    let point = if rest.is_empty() { "" } else { "." };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{first}{point}{rest}e{sign}{:02}", exp.unsigned_abs())
}

/// Python's `template % value` for one float, as aliasQuery names a series: conversions
/// `%d`/`%i`/`%u` (the whole part), `%f`/`%F`, `%e`/`%E`, `%g`/`%G`, `%s`/`%r` (`str`), with
/// the flags `-`, `+`, ` `, `0`, a width and a precision; `%%` is a percent sign.
///
/// # Errors
///
/// Python's complaint when the template does not take exactly one value, or names a
/// conversion a float cannot take (`%x`, `%c`, `%(name)s`).
pub(crate) fn percent_format(template: &str, value: f64) -> Result<String, String> {
    let mut out = String::new();
    let mut used = false;
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flags = String::new();
        while let Some(f) = chars.next_if(|c| "-+ 0#".contains(*c)) {
            flags.push(f);
        }
        let mut width = String::new();
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            width.push(d);
        }
        let precision = match chars.next_if_eq(&'.') {
            Some(_) => {
                let mut digits = String::new();
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    digits.push(d);
                }
                Some(digits.parse::<usize>().unwrap_or(0))
            }
            None => None,
        };
        let Some(kind) = chars.next() else {
            return Err("incomplete format".into());
        };
        if kind == '%' {
            out.push('%');
            continue;
        }
        if used {
            return Err("not enough arguments for format string".into());
        }
        used = true;
        let body = match kind {
            'd' | 'i' | 'u' if value.is_finite() => format!("{}", value.trunc() as i128),
            'd' | 'i' | 'u' => return Err(format!("cannot convert float {value} to integer")),
            'f' | 'F' => fixed(value, precision.unwrap_or(6)),
            'e' | 'E' => exponent(value, precision.unwrap_or(6)),
            'g' | 'G' if precision.is_none_or(|p| p == 6) => format_g(value),
            'g' | 'G' => return Err("%g takes only its default precision here".into()),
            's' | 'r' => {
                let text = str_float(value);
                match precision {
                    Some(p) => text.chars().take(p).collect(),
                    None => text,
                }
            }
            other => {
                return Err(format!(
                    "unsupported format character '{other}' for a float (use %d, %f, %e, %g or %s)"
                ))
            }
        };
        let body = if kind.is_ascii_uppercase() {
            body.to_uppercase()
        } else {
            body
        };
        let numeric = kind != 's' && kind != 'r';
        let body = match (numeric && !body.starts_with('-'), &flags) {
            (true, f) if f.contains('+') => format!("+{body}"),
            (true, f) if f.contains(' ') => format!(" {body}"),
            _ => body,
        };
        let width: usize = width.parse().unwrap_or(0);
        let pad = width.saturating_sub(body.chars().count());
        if flags.contains('-') {
            out.push_str(&body);
            out.push_str(&" ".repeat(pad));
        } else if flags.contains('0') && numeric && value.is_finite() {
            let (sign, digits) = match body.chars().next() {
                Some(s @ ('-' | '+' | ' ')) => (s.to_string(), &body[1..]),
                _ => (String::new(), body.as_str()),
            };
            out.push_str(&format!("{sign}{}{digits}", "0".repeat(pad)));
        } else {
            out.push_str(&" ".repeat(pad));
            out.push_str(&body);
        }
    }
    if !used {
        return Err("not all arguments converted during string formatting".into());
    }
    Ok(out)
}

/// `%.<precision>f` of `x`, `inf` and `nan` as Python writes them.
fn fixed(x: f64, precision: usize) -> String {
    if x.is_finite() {
        format!("{x:.precision$}")
    } else {
        str_float(x)
    }
}

/// `%.<precision>e` of `x`: a signed exponent of at least two digits (`1.500000e+02`).
fn exponent(x: f64, precision: usize) -> String {
    if !x.is_finite() {
        return str_float(x);
    }
    let rust = format!("{x:.precision$e}");
    let (mantissa, exp) = rust.split_once('e').unwrap_or((&rust, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}
