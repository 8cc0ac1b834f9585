//! Compacted period files (src/storage/compact.rs): bytes per bucket row for each kind of
//! column, and the warm read of one series' day (1440 buckets of a 1m/1d period) and of a
//! quarter of it (360 buckets) from a 256-slot file of 2-decimal gauges, through a reader
//! opened once, as the engine keeps recently read files open (`storage/readers.rs`). The
//! issue's target for a day at 1m: 50 µs warm.
//!
//! `cargo bench --bench compact`. The sizes are printed first: the file's length less its
//! header and index, over the rows (buckets) of the slot, for a period of 1440 and of 168
//! buckets (the 1h tier's week), each bucket folding 6 samples at a 10 s cadence.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use tierdb::testing::storage::compact::{CompactFile, CompactReader, ENTRY_LEN, HEADER_LEN};
use tierdb::testing::storage::format::PeriodMeta;
use tierdb::{Bucket, Span};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;
use support::{thread_cpu_secs, Rng};

/// 2025-11-21T00:00:00Z.
const DAY_START: i64 = 1_763_683_200;

type Walk = fn(&mut Rng, f64) -> f64;

/// The kinds of gauge measured: each sample from the one before.
const KINDS: [(&str, Walk); 6] = [
    ("constant", |_, _| 42.0),
    ("integer walk", |r, v| v + (r.next() % 7) as f64 - 3.0),
    ("2-decimal walk", |r, v| {
        ((v * 100.0).round() + (r.next() % 201) as f64 - 100.0) / 100.0
    }),
    ("random floats", |r, _| r.unit() * 1e6),
    ("2-decimal, 1/3 gaps", |r, v| {
        ((v * 100.0).round() + (r.next() % 201) as f64 - 100.0) / 100.0
    }),
    ("2-decimal, 1 sample", |r, v| {
        ((v * 100.0).round() + (r.next() % 201) as f64 - 100.0) / 100.0
    }),
];

/// `n` buckets of 6 samples each (1 for the last kind, a 60 s cadence); every third run of 50
/// buckets left empty for the gaps kind.
fn slot(seed: u64, n: u32, kind: usize) -> Vec<Bucket> {
    let mut rng = Rng(seed | 1);
    let mut v = 100.0;
    (0..n as usize)
        .map(|i| {
            let mut b = Bucket::EMPTY;
            for _ in 0..if kind == 5 { 1 } else { 6 } {
                v = KINDS[kind].1(&mut rng, v);
                b.add(v);
            }
            if kind == 4 && (i / 50) % 3 == 1 {
                Bucket::EMPTY
            } else {
                b
            }
        })
        .collect()
}

fn meta(resolution: u64, period: u64, slots: u32) -> PeriodMeta {
    PeriodMeta {
        tier: "1m".into(),
        resolution: Span::from_secs(resolution),
        period: Span::from_secs(period),
        period_start: DAY_START - DAY_START % period as i64,
        slots,
        chunk: 0,
        histogram_cells: tierdb::testing::storage::format::CellLayout::new_file(Span::from_secs(
            resolution,
        )),
    }
}

fn create(dir: &Path, meta: &PeriodMeta, slots: &[Vec<Bucket>]) -> CompactFile {
    CompactFile::create(dir, meta, &|b, s| (slots[s as usize][b as usize], None)).expect("create")
}

/// Prints bytes per row of each kind, for 1440- and 168-bucket periods, 64 series each.
fn sizes() {
    let dir = tempfile::tempdir().unwrap();
    for (resolution, period) in [(60, 86_400), (3_600, 7 * 86_400)] {
        for (kind, (name, _)) in KINDS.iter().enumerate() {
            let m = meta(resolution, period, 64);
            let slots: Vec<Vec<Bucket>> = (0..64)
                .map(|s| slot(s * 7919 + kind as u64, m.buckets(), kind))
                .collect();
            let file = create(dir.path(), &m, &slots);
            let len = std::fs::metadata(file.path()).unwrap().len();
            let data = len - (HEADER_LEN + 64 * ENTRY_LEN) as u64;
            let rows = 64 * u64::from(m.buckets());
            println!(
                "compact size: {name:>16}, {} buckets: {:.2} bytes/row ({:.2} with the index)",
                m.buckets(),
                data as f64 / rows as f64,
                len as f64 / rows as f64
            );
        }
    }
}

/// Prints the CPU time per read of `range`, over 3 s of CPU, through a reader opened once
/// (as the engine keeps recently read files open).
fn cpu_per_read(file: &CompactReader, range: std::ops::Range<u32>) {
    let mut out = vec![Bucket::EMPTY; range.len()];
    let start = thread_cpu_secs();
    let mut reads = 0u64;
    while thread_cpu_secs() - start < 3.0 {
        for slot in 0..256 {
            file.read_slot(slot, range.clone(), &mut out).unwrap();
            black_box(&out);
        }
        reads += 256;
    }
    let cpu = thread_cpu_secs() - start;
    println!(
        "compact read_slot {range:?}: {:.1} µs of CPU per read (user + system, {reads} reads)",
        cpu * 1e6 / reads as f64
    );
}

fn reads(c: &mut Criterion) {
    sizes();
    let dir = tempfile::tempdir().unwrap();
    let m = meta(60, 86_400, 256);
    let slots: Vec<Vec<Bucket>> = (0..256).map(|s| slot(s + 1, 1440, 2)).collect();
    let created = create(dir.path(), &m, &slots);
    let file = created.open_reader().unwrap();
    cpu_per_read(&file, 0..1440);
    cpu_per_read(&file, 1080..1440);
    let mut out = vec![Bucket::EMPTY; 1440];
    let mut slot = 0;
    c.bench_function("compact read_slot 1440 buckets (warm)", |b| {
        b.iter(|| {
            slot = (slot + 37) % 256;
            file.read_slot(slot, 0..1440, &mut out).unwrap();
            black_box(&out);
        })
    });
    let mut quarter = vec![Bucket::EMPTY; 360];
    c.bench_function("compact read_slot 360 buckets (warm)", |b| {
        b.iter(|| {
            slot = (slot + 37) % 256;
            file.read_slot(slot, 1080..1440, &mut quarter).unwrap();
            black_box(&quarter);
        })
    });
    c.bench_function("compact create 256 x 1440 (2-decimal walk)", |b| {
        b.iter(|| create(dir.path(), &m, &slots))
    });
}

criterion_group!(benches, reads);
criterion_main!(benches);
