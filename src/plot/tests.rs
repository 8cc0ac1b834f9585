use std::path::Path;

use super::*;
use crate::time::Span;

/// 2025-11-14 00:00:00Z, a whole day.
const START: Timestamp = 1_763_078_400;

fn result(series: &str, display: Display, points: Vec<(Timestamp, Option<f64>)>) -> QueryResult {
    QueryResult {
        series: series.to_owned(),
        tier: "1m".to_owned(),
        display,
        step: Span::from_secs(60),
        points,
        before: None,
        after: None,
        not_retained: None,
        partial_from: None,
        note: None,
    }
}

/// Two series over six hours at 1m: `requests{host=a}` with no samples from minute 120 to
/// 179, `requests{host=b}` complete.
fn two_series_with_gap() -> Vec<QueryResult> {
    let minutes = 0..360i64;
    let a = minutes
        .clone()
        .map(|m| {
            let v = 120.0 + 40.0 * (m as f64 / 30.0).sin();
            (START + m * 60, (!(120..180).contains(&m)).then_some(v))
        })
        .collect();
    let b = minutes
        .map(|m| (START + m * 60, Some(60.0 + m as f64 / 6.0)))
        .collect();
    vec![
        result("requests{host=a}", Display::PerSec, a),
        result("requests{host=b}", Display::PerSec, b),
    ]
}

/// The width and height in a PNG's IHDR, after checking the signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk is IHDR");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// The decoded RGB pixels of a PNG.
fn decode_rgb(bytes: &[u8]) -> Vec<[u8; 3]> {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf[..info.buffer_size()]
        .chunks_exact(3)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

fn svg_hex(color: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", color.0, color.1, color.2)
}

/// The contents of the `<text>` elements of `svg`, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|element| {
            let content = &element[element.find('>').unwrap() + 1..];
            content[..content.find("</text>").unwrap()]
                .trim()
                .to_owned()
        })
        .collect()
}

/// The `<polyline` elements of `svg` stroked in `color`.
fn polylines_in(svg: &str, color: RGBColor) -> usize {
    let stroke = format!("stroke=\"{}\"", svg_hex(color));
    svg.split("<polyline")
        .skip(1)
        .filter(|element| element.split('>').next().unwrap().contains(&stroke))
        .count()
}

#[test]
fn png_of_two_series_with_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chart.png");
    render(&two_series_with_gap(), &out, "requests per second").unwrap();

    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(png_size(&bytes), (1200, 600));
    let pixels = decode_rgb(&bytes);
    assert_eq!(pixels.len(), 1200 * 600);
    assert!(pixels.iter().any(|p| *p != pixels[0]), "a single colour");
    for i in 0..2 {
        let c = series_color(i);
        let n = pixels.iter().filter(|p| **p == [c.0, c.1, c.2]).count();
        assert!(n > 500, "series {i}'s colour covers only {n} pixels");
    }
}

#[test]
fn svg_names_every_series_and_breaks_the_line_at_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chart.SVG");
    render(&two_series_with_gap(), &out, "requests per second").unwrap();

    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
    assert!(svg.contains("width=\"1200\"") && svg.contains("height=\"600\""));
    let texts = texts(&svg);
    for name in [
        "requests{host=a}",
        "requests{host=b}",
        "requests per second",
        "per_sec (/s)",
    ] {
        assert!(
            texts.iter().any(|t| t == name),
            "{name} missing from {texts:?}"
        );
    }
    // One polyline per run and one in the legend: the gap splits host a's line in two.
    assert_eq!(polylines_in(&svg, series_color(0)), 2 + 1);
    assert_eq!(polylines_in(&svg, series_color(1)), 1 + 1);
    // Six hours from midnight: HH:MM labels, and the full range in the axis description.
    for hour in ["00:00", "01:00", "05:00", "06:00"] {
        assert!(
            texts.iter().any(|t| t == hour),
            "{hour} missing from {texts:?}"
        );
    }
    assert!(
        texts.contains(&"UTC, 2025-11-14 00:00 to 2025-11-14 06:00, tier 1m, step 1m".to_owned())
    );
    assert!(!texts.iter().any(|t| t == "no data"));
}

#[test]
fn unknown_or_missing_extension_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["chart.jpg", "chart"] {
        let out = dir.path().join(name);
        match render(&two_series_with_gap(), &out, "t") {
            Err(Error::InvalidQuery(message)) => {
                assert!(message.contains(&out.display().to_string()), "{message}");
                assert!(message.contains(".png or .svg"), "{message}");
                if name == "chart.jpg" {
                    assert!(message.contains("\".jpg\""), "{message}");
                }
            }
            other => panic!("{name}: expected InvalidQuery, got {other:?}"),
        }
        assert!(!out.exists());
    }
}

#[test]
fn a_write_failure_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("missing").join("chart.png");
    match render(&two_series_with_gap(), &out, "t") {
        Err(Error::Io { path, source }) => {
            assert_eq!(path, out);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn empty_results_render_axes_and_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let no_values = [result(
        "idle",
        Display::Max,
        (0..60).map(|m| (START + m * 60, None)).collect(),
    )];
    let no_points = [result("idle", Display::Count, Vec::new())];
    for (label, results) in [
        ("values", &no_values[..]),
        ("points", &no_points[..]),
        ("series", &[][..]),
    ] {
        let svg_out = dir.path().join(format!("{label}.svg"));
        render(results, &svg_out, "nothing").unwrap();
        let texts = texts(&std::fs::read_to_string(&svg_out).unwrap());
        assert!(texts.iter().any(|t| t == "no data"), "{label}: {texts:?}");
        assert!(texts.iter().any(|t| t == "nothing"), "{label}: {texts:?}");

        let png_out = dir.path().join(format!("{label}.png"));
        render(results, &png_out, "nothing").unwrap();
        let pixels = decode_rgb(&std::fs::read(&png_out).unwrap());
        assert!(
            pixels.iter().any(|p| *p != pixels[0]),
            "{label}: blank image"
        );
    }
    // With all-empty buckets the range is still the query's.
    let texts = texts(&std::fs::read_to_string(dir.path().join("values.svg")).unwrap());
    for text in [
        "UTC, 2025-11-14 00:00 to 2025-11-14 01:00, tier 1m, step 1m",
        "max",
        "00:30",
        "idle",
    ] {
        assert!(
            texts.iter().any(|t| t == text),
            "{text} missing from {texts:?}"
        );
    }
}

/// Issue #54 item 4 in `tierdb plot`: a bucket whose total overflowed (two samples of
/// `1e308`) was left out like a bucket without samples, and a series whose every value had
/// overflowed was drawn with the "no data" note. The chart counts such points instead.
#[test]
fn overflowed_values_are_counted_not_shown_as_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let svg_texts = |results: &[QueryResult], name: &str| {
        let out = dir.path().join(name);
        render(results, &out, "overflow").unwrap();
        texts(&std::fs::read_to_string(&out).unwrap())
    };
    let some = [result(
        "big",
        Display::Total,
        vec![
            (START, Some(1.0)),
            (START + 60, Some(f64::INFINITY)),
            (START + 120, None),
            (START + 180, Some(f64::NEG_INFINITY)),
            (START + 240, Some(2.0)),
        ],
    )];
    let texts = svg_texts(&some, "some.svg");
    assert!(
        texts.iter().any(|t| t
            == "UTC, 2025-11-14 00:00 to 2025-11-14 00:05, tier 1m, step 1m · 2 overflowed (±Inf, not drawn)"),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|t| t == "no data"), "{texts:?}");

    let all = [result(
        "big",
        Display::Total,
        vec![(START, Some(f64::INFINITY)), (START + 60, None)],
    )];
    let texts = svg_texts(&all, "all.svg");
    assert!(!texts.iter().any(|t| t == "no data"), "{texts:?}");
    assert!(
        texts.iter().any(|t| t == "1 overflowed (±Inf, not drawn)"),
        "{texts:?}"
    );
}

#[test]
fn a_lone_point_between_gaps_is_a_dot() {
    let points = vec![
        (START, Some(1.0)),
        (START + 60, None),
        (START + 120, Some(2.0)),
        (START + 180, None),
        (START + 240, Some(f64::INFINITY)),
        (START + 300, Some(3.0)),
        (START + 360, Some(4.0)),
    ];
    assert_eq!(
        runs(&points),
        vec![
            vec![(START, 1.0)],
            vec![(START + 120, 2.0)],
            vec![(START + 300, 3.0), (START + 360, 4.0)],
        ]
    );
}

#[test]
fn time_labels_follow_the_span() {
    let ts = START + 13 * 3_600 + 5 * 60; // 2025-11-14 13:05
    assert_eq!(time_label(ts, 6 * 3_600), "13:05");
    assert_eq!(time_label(ts, 2 * DAY - 1), "13:05");
    assert_eq!(time_label(ts, 2 * DAY), "11-14 13:05");
    assert_eq!(time_label(ts, 14 * DAY - 1), "11-14 13:05");
    assert_eq!(time_label(ts, 14 * DAY), "2025-11-14");
    assert_eq!(time_label(ts, 365 * DAY), "2025-11-14");
}

#[test]
fn ticks_fall_on_round_utc_times() {
    // Six hours from 00:00 in at most 10 ticks: every hour.
    let six_hours = ticks(START, START + 6 * 3_600, 10);
    assert_eq!(
        six_hours,
        (0..=6).map(|h| START + h * 3_600).collect::<Vec<_>>()
    );
    // An unaligned hour in at most 6 ticks: every 10 minutes, none outside the range; in
    // at most 5, every quarter hour.
    assert_eq!(
        ticks(START + 100, START + 3_700, 6),
        (1..=6).map(|i| START + i * 600).collect::<Vec<_>>()
    );
    assert_eq!(
        ticks(START + 100, START + 3_700, 5),
        vec![START + 900, START + 1_800, START + 2_700, START + 3_600]
    );
    // Ninety days: 14-day steps in 10 ticks, 30-day steps in 4; five years: whole years.
    let step = |ticks: Vec<Timestamp>| ticks[1] - ticks[0];
    assert_eq!(step(ticks(START, START + 90 * DAY, 10)), 14 * DAY);
    assert_eq!(step(ticks(START, START + 90 * DAY, 4)), 30 * DAY);
    let years = ticks(START, START + 5 * 365 * DAY, 10);
    assert!(!years.is_empty() && years.len() <= 10);
    assert!(years.windows(2).all(|w| (w[1] - w[0]) % (365 * DAY) == 0));
    assert!(ticks(START, START + 60, 0).is_empty());
    // Extreme ranges end.
    assert!(ticks(i64::MIN / 2, i64::MAX / 2, 10).len() <= 10);
}

#[test]
fn y_values_are_short() {
    assert_eq!(format_value(0.0, &(0.0..10.0)), "0");
    assert_eq!(format_value(120.0, &(95.0..205.0)), "120");
    assert_eq!(format_value(2.5, &(1.0..3.0)), "2.5");
    assert_eq!(format_value(0.25, &(0.0..0.5)), "0.25");
    assert_eq!(format_value(-0.25, &(-0.5..0.0)), "-0.25");
    assert_eq!(format_value(15_400_000.0, &(14e6..16e6)), "15.4M");
    assert_eq!(format_value(5_000.0, &(0.0..80_000.0)), "5k");
    assert_eq!(format_value(2_000.0, &(0.0..8_000.0)), "2000");
    assert_eq!(format_value(0.000_2, &(0.0..0.000_5)), "2.0e-4");
}

#[test]
fn y_axis_fits_the_values() {
    assert_eq!(y_range(100.0, 200.0), 95.0..205.0);
    assert_eq!(y_range(1.0, 21.0), 0.0..22.0);
    assert_eq!(y_range(-10.0, 10.0), -11.0..11.0);
    assert_eq!(y_range(5.0, 5.0), 4.5..5.5);
    assert_eq!(y_range(0.0, 0.0), 0.0..1.0);
    assert_eq!(y_range(-4.0, -4.0), -4.4..-3.6);
}

#[test]
fn extensions_pick_the_format() {
    assert_eq!(format_of(Path::new("a/b.png")).unwrap(), Format::Png);
    assert_eq!(format_of(Path::new("b.PNG")).unwrap(), Format::Png);
    assert_eq!(format_of(Path::new("b.svg")).unwrap(), Format::Svg);
    assert!(format_of(Path::new("b.svg.gz")).is_err());
}

#[test]
fn the_legend_flows_into_rows_and_counts_what_does_not_fit() {
    let item = LEGEND_SWATCH + LEGEND_GAP + 100;
    // Two entries side by side.
    let two = legend_layout(&[100, 100], 60);
    assert_eq!(
        two.items,
        vec![(PLOT_LEFT, 0), (PLOT_LEFT + item + LEGEND_SPACING, 0)]
    );
    assert_eq!((two.more, two.rows), (None, 1));
    // Entries 100 px wide: 7 to a row; 100 of them do not fit in 5 rows.
    let per_row = ((LEGEND_RIGHT - PLOT_LEFT + LEGEND_SPACING) / (item + LEGEND_SPACING)) as usize;
    assert_eq!(per_row, 7);
    let many = legend_layout(&[100; 100], 60);
    assert_eq!(many.rows, LEGEND_MAX_ROWS);
    assert_eq!(many.items.len(), 4 * per_row + per_row - 1);
    assert_eq!(many.items.last().unwrap().1, LEGEND_MAX_ROWS - 1);
    let (note_x, note_row) = many.more.unwrap();
    assert_eq!(note_row, LEGEND_MAX_ROWS - 1);
    assert!(note_x + 60 <= LEGEND_RIGHT);
    // An entry wider than a row gets a row of its own.
    let wide = legend_layout(&[100, 5_000, 100], 60);
    assert_eq!(
        wide.items,
        vec![(PLOT_LEFT, 0), (PLOT_LEFT, 1), (PLOT_LEFT, 2)]
    );
    assert_eq!(legend_layout(&[], 60).rows, 0);
}

#[test]
fn many_series_get_distinct_colours() {
    let colors: Vec<_> = (0..40).map(series_color).collect();
    for (i, a) in colors.iter().enumerate() {
        for b in &colors[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

/// Writes `target/plot-sample-*.png` and `.svg` for a look by eye
/// (`cargo test --lib plot::tests::samples_for_eyes -- --ignored`).
#[test]
#[ignore]
fn samples_for_eyes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let out = |name: &str| dir.join(format!("plot-sample-{name}"));
    let gap = two_series_with_gap();
    render(&gap, &out("gap.png"), "requests per second").unwrap();
    render(&gap, &out("gap.svg"), "requests per second").unwrap();

    // Ten days at 1h of a dozen hosts with long names, some sparse: MM-DD HH:MM labels,
    // legend rows, lone points as dots.
    let hosts: Vec<QueryResult> = (0..12)
        .map(|h| {
            let points = (0..240)
                .map(|i| {
                    let v =
                        1_000.0 * h as f64 + 20_000.0 + 5_000.0 * ((i + 7 * h) as f64 / 20.0).cos();
                    let present = h % 4 != 3 || i % 3 == 0;
                    (START + i * 3_600, present.then_some(v))
                })
                .collect();
            QueryResult {
                series: format!("disk.bytes_written{{dc=eu-west,host=storage-node-{h:02}}}"),
                tier: "1h".to_owned(),
                display: Display::Total,
                step: Span::from_secs(3_600),
                points,
                before: None,
                after: None,
                not_retained: None,
                partial_from: None,
                note: None,
            }
        })
        .collect();
    render(&hosts, &out("days.png"), "bytes written per hour").unwrap();

    // Ninety days at 1d, small signed values: YYYY-MM-DD labels.
    let days = vec![QueryResult {
        series: "temperature.delta".to_owned(),
        tier: "1d".to_owned(),
        display: Display::Avg,
        step: Span::from_secs(86_400),
        points: (0..90)
            .map(|d| (START + d * 86_400, Some(0.03 * (d as f64 / 9.0).sin())))
            .collect(),
        before: None,
        after: None,
        not_retained: None,
        partial_from: None,
        note: None,
    }];
    render(&days, &out("months.png"), "temperature change").unwrap();

    let empty = vec![result(
        "idle",
        Display::Count,
        (0..60).map(|m| (START + m * 60, None)).collect(),
    )];
    render(&empty, &out("empty.png"), "nothing").unwrap();
}
