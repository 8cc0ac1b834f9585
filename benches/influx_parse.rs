//! Influx line protocol parsing, as the HTTP write handler does it: a 5,000-line body split
//! at `\n`, each line checked for UTF-8 and parsed into its points, the buffers kept across
//! lines. The lines are those of `benches/cluster.sh` (1,000 series: 100 hosts × 10 fields
//! of one measurement, one field a line, timestamps in seconds), plus a body of lines with
//! three tags and two fields, to cover the sorting and several fields a line, and a body of
//! 50,000 lines of as many series, more than a thread's memo of series parts holds (the
//! other bodies' series are met again at every iteration, as an agent's are at every
//! interval).
//!
//! `cargo bench --bench influx_parse`. The end-to-end figure over HTTP is
//! `scripts/influx-http-bench.py`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tierdb::ingest::influx::{self, Precision};

/// Lines per body, as `benches/cluster.sh` posts them.
const BODY_LINES: usize = 5_000;
const START: i64 = 1_795_000_000;

/// `benchhttp,host=h001 m003=12.5 1795000000`, the shape of the cluster bench.
fn simple_body() -> Vec<u8> {
    let mut body = String::new();
    for n in 0..BODY_LINES {
        let s = n % 1000;
        let i = (n / 1000) as i64;
        body.push_str(&format!(
            "benchhttp,host=h{:03} m{:03}={} {}\n",
            s % 100,
            s / 100,
            ((s as i64 * 7 + i) % 1000) as f64 / 10.0,
            START + i * 10
        ));
    }
    body.into_bytes()
}

/// Telegraf-like lines: three tags out of order and two fields, one of them an integer.
fn tagged_body() -> Vec<u8> {
    let mut body = String::new();
    for n in 0..BODY_LINES {
        let s = n % 1000;
        body.push_str(&format!(
            "cpu,region=eu-{},host=server{:03},cpu=cpu{} usage_user={}.25,usage_count={}i {}\n",
            s % 3,
            s / 10,
            s % 10,
            s % 100,
            n,
            START + (n / 1000) as i64 * 10
        ));
    }
    body.into_bytes()
}

/// Lines of [`many_series_body`]: each a series of its own.
const MANY_SERIES: usize = 50_000;

/// `MANY_SERIES` lines of the cluster bench's shape, each with a host of its own.
fn many_series_body() -> Vec<u8> {
    let mut body = String::new();
    for n in 0..MANY_SERIES {
        body.push_str(&format!("benchhttp,host=h{n:05} m000={n}.5 {START}\n"));
    }
    body.into_bytes()
}

/// Parses `body` line by line as `influx_write` does; returns the points, so nothing is
/// optimised away.
fn parse_body(body: &[u8]) -> usize {
    let mut parser = influx::LineParser::default();
    let mut total = 0;
    for line in body.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if parser.parse(line, Precision::Seconds).is_ok() {
            total += parser.points().count();
        }
    }
    total
}

fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("influx_parse");
    for (name, body, lines, points) in [
        ("simple_body", simple_body(), BODY_LINES, BODY_LINES),
        ("tagged_body", tagged_body(), BODY_LINES, 2 * BODY_LINES),
        ("many_series", many_series_body(), MANY_SERIES, MANY_SERIES),
    ] {
        group.throughput(Throughput::Elements(lines as u64));
        assert_eq!(parse_body(&body), points, "{name}: every line parses");
        group.bench_function(name, |b| b.iter(|| parse_body(std::hint::black_box(&body))));
    }
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
