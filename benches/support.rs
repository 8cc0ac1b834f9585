//! Pieces the benchmarks share: where their data goes, a fleet of 100k series, the thread
//! CPU time some of them measure by, and a deterministic generator.

use tierdb::{Engine, SeriesId};

/// A fresh data directory under `TIERDB_BENCH_DIR`, or the system temp dir.
pub(crate) fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("TIERDB_BENCH_DIR") {
        Some(parent) => tempfile::tempdir_in(parent),
        None => tempfile::tempdir(),
    }
    .expect("temp dir")
}

/// Registers `count` series named like a fleet (`host042.metric317`), then runs maintenance
/// until every file of the current and ahead periods exists (it paces future files), as
/// they would after a day of uptime.
pub(crate) fn register_fleet(engine: &Engine, count: u32) -> Vec<SeriesId> {
    let ids = (0..count)
        .map(|i| {
            engine
                .series(&format!("host{:03}.metric{:03}", i / 1000, i % 1000))
                .expect("register series")
        })
        .collect();
    while engine.maintain().expect("maintenance").pending > 0 {}
    ids
}

/// This thread's CPU time (user + system), from `/proc/thread-self/stat`, in clock ticks of
/// 10 ms: with a shared machine's load the wall clock says more about the neighbours.
pub(crate) fn thread_cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields after the command: state is 0, utime 11, stime 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// A small deterministic generator (xorshift64*).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// Times `a` and `b` in turn `pairs` times (after one warm-up each), each first in every
/// other pair, and prints the median of each and the median, lowest and highest ratio a / b
/// of the pairs: each ratio of two runs a moment apart, so a change of the machine's load
/// moves both. Criterion times one function's samples after the other's, where such a
/// change moves the ratio.
pub(crate) fn alternate(
    what: &str,
    pairs: usize,
    (a_name, a): (&str, &mut dyn FnMut()),
    (b_name, b): (&str, &mut dyn FnMut()),
) {
    let time = |f: &mut dyn FnMut()| {
        let started = std::time::Instant::now();
        f();
        started.elapsed().as_secs_f64() * 1000.0
    };
    time(a);
    time(b);
    // Each goes first in every other pair: what one leaves behind (freed memory, a cold
    // cache) must not always fall on the other.
    let runs: Vec<(f64, f64)> = (0..pairs.max(1))
        .map(|pair| {
            if pair % 2 == 0 {
                let first = time(a);
                (first, time(b))
            } else {
                let second = time(b);
                (time(a), second)
            }
        })
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratios: Vec<f64> = runs.iter().map(|(a, b)| a / b).collect();
    let (lowest, highest) = ratios
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    println!(
        "{what}, {} alternating pairs: {a_name} median {:.1} ms, {b_name} median {:.1} ms, \
         ratio median {:.2}x (lowest {lowest:.2}x, highest {highest:.2}x)",
        runs.len(),
        median(runs.iter().map(|r| r.0).collect()),
        median(runs.iter().map(|r| r.1).collect()),
        median(ratios.clone()),
    );
}

/// The count environment variable `name` gives, or `default`.
pub(crate) fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}
