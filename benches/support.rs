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
