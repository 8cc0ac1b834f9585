//! The series registry at a million series: what it holds in RAM per series, how long
//! opening its log takes, and the cost of the per-sample lookup `Registry::get`.
//!
//! `cargo bench --bench registry --no-default-features`. `TIERDB_BENCH_SERIES=100000` runs
//! a smaller registry. Bytes per series are the live heap the registry holds, counted by
//! the counting global allocator below (not RSS), once after creating every series one by
//! one (growth slack included) and once after opening the log they were written to.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use tierdb::registry::Registry;

/// Series unless `TIERDB_BENCH_SERIES` says otherwise.
const SERIES: u32 = 1_000_000;

/// The system allocator, counting the bytes live at any moment. A global allocator is
/// `unsafe` to implement: the one place outside src/storage/mmap.rs that allows it.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Metric names of one host; each comes in ten instances.
const METRICS: [&str; 10] = [
    "cpu.user",
    "cpu.system",
    "cpu.iowait",
    "mem.used",
    "mem.free",
    "disk.read",
    "disk.write",
    "net.rx",
    "net.tx",
    "load.1m",
];
const DCS: [&str; 3] = ["eu", "us", "ap"];

/// Key `i` of a fleet of hosts with 100 series each: three hosts in four send tagged keys
/// (`host00042.cpu.user{dc=eu,host=host00042,i=3}`), the fourth plain Graphite paths
/// (`servers.host00043.cpu.user.3`), about 40 bytes on average.
fn key_text(i: u32) -> String {
    let host = i / 100;
    let metric = METRICS[(i % 10) as usize];
    let instance = (i / 10) % 10;
    if host % 4 == 3 {
        format!("servers.host{host:05}.{metric}.{instance}")
    } else {
        let dc = DCS[(host % 3) as usize];
        format!("host{host:05}.{metric}{{dc={dc},host=host{host:05},i={instance}}}")
    }
}

fn series_count() -> u32 {
    std::env::var("TIERDB_BENCH_SERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SERIES)
}

fn registry(c: &mut Criterion) {
    let n = series_count();
    let dir = support::bench_dir();
    let texts: Vec<String> = (0..n).map(key_text).collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    println!(
        "registry: {n} series, keys {:.1} bytes on average",
        bytes as f64 / f64::from(n)
    );

    let before = live();
    let started = Instant::now();
    let reg = Registry::open(dir.path()).expect("open");
    for text in &texts {
        reg.resolve(text).expect("create");
    }
    let created = started.elapsed();
    let held = live() - before;
    println!(
        "registry: created {n} series in {created:.2?}; holds {held} bytes, {:.1} bytes/series",
        held as f64 / f64::from(n)
    );
    reg.sync().expect("sync");
    drop(reg);

    let before = live();
    let started = Instant::now();
    let reg = Registry::open(dir.path()).expect("reopen");
    let opened = started.elapsed();
    let held = live() - before;
    assert_eq!(reg.len(), n as usize);
    println!(
        "registry: opened {n} series in {opened:.2?}; holds {held} bytes, {:.1} bytes/series",
        held as f64 / f64::from(n)
    );

    // Keys in a scattered order, so lookups touch the whole table as live traffic does.
    let order: Vec<&str> = (0..u64::from(n))
        .map(|i| texts[((i * 611_953) % u64::from(n)) as usize].as_str())
        .collect();
    let mut group = c.benchmark_group("registry");
    group.bench_function(format!("get_hit_{n}"), |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % order.len();
            black_box(reg.get(black_box(order[i])))
        })
    });
    // Tags out of canonical order: the fast path misses, as it does for a new series.
    group.bench_function(format!("get_miss_{n}"), |b| {
        b.iter(|| black_box(reg.get(black_box("host00042.cpu.user{i=3,dc=eu,host=host00042}"))))
    });
    drop(reg);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function(format!("open_{n}"), |b| {
        b.iter(|| black_box(Registry::open(dir.path()).expect("open").len()))
    });
    group.finish();
}

criterion_group!(benches, registry);
criterion_main!(benches);
