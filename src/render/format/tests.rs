//! The formats' bytes, on a series with a name that needs quoting in CSV, a null and values
//! whose Python `repr` has an exponent (what graphite-web 1.1.8 writes for the same series).

use super::{Format, RenderedSeries};

fn series() -> Vec<RenderedSeries> {
    vec![RenderedSeries {
        target: "sumSeries(a.b,\"c\")".into(),
        datapoints: vec![
            (Some(1.5), 60),
            (None, 120),
            (Some(1e-5), 180),
            (Some(2.0), 240),
        ],
        start: 60,
        end: 300,
        step: 60,
        path_expression: "sumSeries(a.b,\"c\")".into(),
        consolidation: "average".into(),
        x_files_factor: 0.0,
    }]
}

#[test]
fn csv_is_excels_dialect_in_utc() {
    let csv = String::from_utf8(Format::Csv.write(&series())).unwrap();
    assert_eq!(
        csv,
        "\"sumSeries(a.b,\"\"c\"\")\",1970-01-01 00:01:00,1.5\r\n\
         \"sumSeries(a.b,\"\"c\"\")\",1970-01-01 00:02:00,\r\n\
         \"sumSeries(a.b,\"\"c\"\")\",1970-01-01 00:03:00,1e-05\r\n\
         \"sumSeries(a.b,\"\"c\"\")\",1970-01-01 00:04:00,2.0\r\n"
    );
}

#[test]
fn raw_is_one_line_per_series() {
    let raw = String::from_utf8(Format::Raw.write(&series())).unwrap();
    assert_eq!(raw, "sumSeries(a.b,\"c\"),60,300,60|1.5,None,1e-05,2.0\n");
}

#[test]
fn pickle_opcodes() {
    let bytes = Format::Pickle.write(&series());
    assert_eq!(&bytes[..4], &[0x80, 2, b']', b'}']);
    assert_eq!(bytes.last(), Some(&b'.'));
    // The 4 values: BINFLOAT 1.5, NONE, BINFLOAT 1e-05, BINFLOAT 2.0, then APPENDS.
    let mut values = vec![b'('];
    for v in [Some(1.5f64), None, Some(1e-5), Some(2.0)] {
        match v {
            Some(v) => {
                values.push(b'G');
                values.extend_from_slice(&v.to_be_bytes());
            }
            None => values.push(b'N'),
        }
    }
    values.push(b'e');
    assert!(bytes.windows(values.len()).any(|w| w == values));
    assert_eq!(Format::parse("png"), None);
    assert!(!Format::Csv.consolidates());
}

#[test]
fn the_bound_is_at_least_what_each_format_writes() {
    let mut many = series();
    many[0].datapoints = (0..1000)
        .map(|i| {
            (
                Some(-1.234_567_890_123_456_7e-300 * f64::from(i)),
                60 * i64::from(i),
            )
        })
        .collect();
    many[0].target = "\"".repeat(50);
    for format in [Format::Csv, Format::Raw, Format::Pickle] {
        for data in [series(), many.clone()] {
            let written = format.write(&data).len();
            let bound = format.upper_bound_bytes(&data);
            assert!(
                bound >= written,
                "{format:?}: bound {bound} under {written} written"
            );
            assert!(
                bound <= 4 * written + 1024,
                "{format:?}: bound {bound} far over {written}"
            );
        }
    }
    assert_eq!(Format::Json.upper_bound_bytes(&series()), 0);
}
