//! Python's float formatting, checked against CPython 3's own answers (written down from
//! `str(x)` and `'%g' % x`).

use super::{format_g, round_6, str_float};

#[test]
fn str_float_writes_what_python_writes() {
    for (x, python) in [
        (100.0, "100.0"),
        (0.5, "0.5"),
        (1e-5, "1e-05"),
        (1e16, "1e+16"),
        (1.5e16, "1.5e+16"),
        (123.456, "123.456"),
        (-2.0, "-2.0"),
        (0.0001, "0.0001"),
        (1e15, "1000000000000000.0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (-0.0, "-0.0"),
        (12345678901234567.0, "1.2345678901234568e+16"),
        (f64::INFINITY, "inf"),
        (f64::NAN, "nan"),
    ] {
        assert_eq!(str_float(x), python, "{x:?}");
    }
}

#[test]
fn format_g_writes_what_python_writes() {
    for (x, python) in [
        (2.0, "2"),
        (0.5, "0.5"),
        (1e-5, "1e-05"),
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (1234567.0, "1.23457e+06"),
        (1.23456789, "1.23457"),
        (0.0001, "0.0001"),
        (-3.5, "-3.5"),
        (0.0, "0"),
        (100.0, "100"),
        (999999.5, "1e+06"),
        (0.000123456789, "0.000123457"),
        (2.5e-5, "2.5e-05"),
    ] {
        assert_eq!(format_g(x), python, "{x:?}");
    }
}

#[test]
fn round_6_rounds_as_python_does() {
    for (x, python) in [
        (10.0 / 60.0, 0.166667),
        (1.0 / 3.0, 0.333333),
        (2.0 / 3.0, 0.666667),
        (150.0 / 180.0, 0.833333),
        (0.0000005, 0.0),
        (0.0000015, 0.000002),
        (-1.0 / 7.0, -0.142857),
        (1e300, 1e300),
        (20.0, 20.0),
    ] {
        assert_eq!(round_6(x), python, "{x:?}");
    }
    assert!(round_6(f64::NAN).is_nan());
}

#[test]
fn percent_format_writes_what_python_writes() {
    use super::percent_format;
    // From CPython 3.11: `template % value`.
    for (template, value, python) in [
        ("Channel %d MHz", 2.7, "Channel 2 MHz"),
        ("%s", 3.0, "3.0"),
        ("%.2f", 2.675, "2.67"),
        ("%5.1f|", -2.25, " -2.2|"),
        ("%-6d|", 42.9, "42    |"),
        ("%+d", 5.0, "+5"),
        ("%e", 150.0, "1.500000e+02"),
        ("%.3E", 0.000123, "1.230E-04"),
        ("%g", 1234567.0, "1.23457e+06"),
        ("%05.1f", -3.25, "-03.2"),
        ("100%% %s", 0.1, "100% 0.1"),
        ("% d", 7.0, " 7"),
        ("%.1s", 12.5, "1"),
        ("%i", -7.9, "-7"),
    ] {
        assert_eq!(
            percent_format(template, value).unwrap(),
            python,
            "{template}"
        );
    }
    for (template, error) in [
        ("no conversion", "not all arguments converted"),
        ("%d and %d", "not enough arguments"),
        ("%x", "unsupported format character 'x'"),
        ("%", "incomplete format"),
    ] {
        let got = percent_format(template, 1.0).unwrap_err();
        assert!(got.contains(error), "{template}: {got}");
    }
}
