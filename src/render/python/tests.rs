//! Python's float formatting, checked against CPython 3's own answers (written down from
//! `str(x)` and `'%g' % x`).

use super::{format_g, str_float};

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
