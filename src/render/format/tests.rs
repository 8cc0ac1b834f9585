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
    (many[0].start, many[0].end) = (0, 60_000);
    for format in [
        Format::Csv,
        Format::Raw,
        Format::Pickle,
        Format::Msgpack,
        Format::Dygraph,
        Format::Rickshaw,
    ] {
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

#[test]
fn dygraph_and_rickshaw_are_pythons_json() {
    let mut two = series();
    two.push(RenderedSeries {
        target: "caf\u{e9}\n".into(),
        datapoints: vec![
            (Some(f64::INFINITY), 60),
            (Some(-0.5), 120),
            (None, 180),
            (Some(3.0), 240),
        ],
        ..series().remove(0)
    });
    let dygraph = String::from_utf8(Format::Dygraph.write(&two)).unwrap();
    assert_eq!(
        dygraph,
        "{\"labels\" : [\"Time\", \"sumSeries(a.b,\\\"c\\\")\", \"caf\\u00e9\\n\"], \"data\" : \
         [[60000, 1.5, Infinity], [120000, null, -0.5], [180000, 1e-05, null], \
         [240000, 2.0, 3.0]]}"
    );
    assert_eq!(Format::Dygraph.write(&[]), b"{}");
    let rickshaw = String::from_utf8(Format::Rickshaw.write(&two[1..])).unwrap();
    assert_eq!(
        rickshaw,
        "[{\"target\": \"caf\\u00e9\\n\", \"datapoints\": [{\"x\": 60, \"y\": Infinity}, \
         {\"x\": 120, \"y\": -0.5}, {\"x\": 180, \"y\": null}, {\"x\": 240, \"y\": 3.0}]}]"
    );
    assert_eq!(Format::Rickshaw.write(&[]), b"[]");
}

/// graphite-web's dygraph rows are the first series' times: a series of another length
/// cannot be written (graphite-web fails on it).
#[test]
fn dygraph_refuses_series_of_another_length() {
    let mut two = series();
    two.push(RenderedSeries {
        target: "short".into(),
        datapoints: vec![(Some(1.0), 60)],
        ..series().remove(0)
    });
    assert_eq!(Format::Dygraph.unwritable(&two[..1]), None);
    let refusal = Format::Dygraph.unwritable(&two).unwrap();
    assert!(refusal.contains("short (1 points"), "{refusal}");
    assert_eq!(Format::Json.unwritable(&two), None);
}

/// MessagePack's smallest forms, as u-msgpack-python packs them.
#[test]
fn msgpack_packs_each_value_in_its_smallest_form() {
    let bytes = Format::Msgpack.write(&series());
    // A list of one map of 9 entries, whose first is the name (a fixstr).
    assert_eq!(&bytes[..3], &[0x91, 0x89, 0xa4]);
    let mut values = vec![0x94, 0xcb];
    values.extend_from_slice(&1.5f64.to_be_bytes());
    values.push(0xc0);
    assert!(bytes.windows(values.len()).any(|w| w == values));
    let mut m = super::MsgPack(Vec::new());
    for n in [
        0,
        127,
        128,
        255,
        256,
        65_536,
        1 << 32,
        -1,
        -32,
        -33,
        -129,
        -40_000,
        -(1 << 40),
    ] {
        m.int(n);
    }
    assert_eq!(
        m.0,
        [
            &[0x00, 0x7f, 0xcc, 0x80, 0xcc, 0xff, 0xcd, 0x01, 0x00][..],
            &[0xce, 0, 1, 0, 0],
            &[0xcf, 0, 0, 0, 1, 0, 0, 0, 0],
            &[0xff, 0xe0, 0xd0, 0xdf, 0xd1, 0xff, 0x7f],
            &[0xd2, 0xff, 0xff, 0x63, 0xc0],
            &[0xd3, 0xff, 0xff, 0xff, 0x00, 0, 0, 0, 0],
        ]
        .concat()
    );
    let mut m = super::MsgPack(Vec::new());
    m.text(&"x".repeat(32));
    assert_eq!(&m.0[..2], &[0xd9, 32]);
    m.0.clear();
    m.head(16, 0x90, 0xdc);
    m.head(70_000, 0x90, 0xdc);
    assert_eq!(m.0, [0xdc, 0, 16, 0xdd, 0, 1, 0x11, 0x70]);
}
