//! Period rollover under load: 100k series ingest at a 10 s cadence across 2011-12-22T00:00Z,
//! where every default tier starts a new period, while the background maintenance task
//! creates the next periods' files for all 100k series (391 chunks x 4 tiers = 1,564 files)
//! and prefaults the bucket blocks ahead. Prints ingest throughput and the batch latency
//! distribution, with the batches across the boundary apart.
//!
//! Runs, each on a fresh data directory:
//! - `saturated`: batches back to back, as fast as the engine takes them (throughput).
//! - `rollover`: batches offered at 1 M samples/s (100 agents' flushes a second; `OFFERED=N`
//!   for another rate), simulated time 100x faster than the wall clock and maintenance every
//!   600 ms instead of every minute to match. The rollover must not stall ingest: the worst
//!   batch across the boundary (the simulated minute before it and the minute after) should
//!   stay within 2x of the median.
//! - `control`: the same load and clock with no rollover work at all: every file the run
//!   touches is created and every block it writes prefaulted before it starts, and
//!   maintenance is off. Whatever tail this run has is the machine's and the write path's,
//!   not the rollover's; set beside `rollover` it shows what the rollover adds.
//!
//! `NO_MAINT=1` turns background maintenance off in the `rollover` runs: nothing prefaults
//! the blocks ahead, which shows what prefaulting is for (the writers' page faults).
//!
//! `rollover` and `control` alternate, `TRIALS` times each (default 3), because on a shared
//! 2-core virtual machine a single run's worst batch is mostly a matter of when the host
//! takes a core away: each line reports the CPU time stolen by the host during the run.
//!
//! In the saturated run simulated time runs ~1000x faster than the wall clock and
//! maintenance runs every 20 ms, so its work takes a far larger share of the machine than
//! it would in a day of real time.
//!
//! `cargo bench --bench rollover`. Prints figures rather than criterion statistics, because
//! the figure that matters is the worst batch, not the mean. Needs ~10 GB of free disk (set
//! `TIERDB_BENCH_DIR` to choose where).

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;

use tierdb::{Engine, ManualClock, Sample, TiersConfig};

const SERIES: u32 = 100_000;
const CADENCE: i64 = 10;
const BATCH: usize = 10_000;
/// 2011-12-22T00:00:00Z: divisible by 6h, 1d, 10d and 73d (and 7d, 30d and 365d).
const BOUNDARY: i64 = 1_324_512_000;
/// Simulated minutes on each side of the boundary.
const MINUTES: i64 = 10;
/// The batches "across the boundary": the simulated minute before it and the minute after.
const ACROSS: std::ops::Range<i64> = BOUNDARY - 60..BOUNDARY + 60;
/// A window as long, well before the boundary, to set the writers' page faults against.
const BEFORE: std::ops::Range<i64> = BOUNDARY - 300..BOUNDARY - 180;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<f64>().ok());
    let offered = env("OFFERED").unwrap_or(1e6);
    let trials = env("TRIALS").map_or(3, |t| t as usize);
    run(Mode::Saturated).print("saturated");
    println!(
        "offered {:.2} M samples/s; batches across the boundary: simulated {}s..{}s around it",
        offered / 1e6,
        ACROSS.start - BOUNDARY,
        ACROSS.end - BOUNDARY
    );
    for trial in 1..=trials {
        run(Mode::Rollover(offered)).print(&format!("rollover #{trial}"));
        run(Mode::Control(offered)).print(&format!("control  #{trial}"));
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Saturated,
    /// Offered at this many samples a second, background maintenance on.
    Rollover(f64),
    /// Offered at this many samples a second, everything prepared before, maintenance off.
    Control(f64),
}

impl Mode {
    fn rate(self) -> Option<f64> {
        match self {
            Mode::Saturated => None,
            Mode::Rollover(rate) | Mode::Control(rate) => Some(rate),
        }
    }
}

struct Outcome {
    mode: Mode,
    rate: f64,
    /// (simulated time, latency) per batch.
    batches: Vec<(i64, Duration)>,
    created_during_run: u64,
    on_demand: u64,
    steal: f64,
    /// The writer threads' page faults in [`BEFORE`] and in [`ACROSS`].
    faults: (u64, u64),
}

impl Outcome {
    fn print(&self, name: &str) {
        let mut all: Vec<Duration> = self.batches.iter().map(|b| b.1).collect();
        all.sort();
        let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
        let median = pct(0.5);
        let ratio = |d: Duration| d.as_secs_f64() / median.as_secs_f64();
        let across: Vec<Duration> = (self.batches.iter())
            .filter(|(ts, _)| ACROSS.contains(ts))
            .map(|b| b.1)
            .collect();
        let worst_across = across.iter().max().copied().unwrap_or_default();
        let over = |d: &Duration| *d > median * 2;
        let share_across = across.iter().filter(|d| over(d)).count() as f64 / across.len() as f64;
        let share_all = all.iter().filter(|d| over(d)).count() as f64 / all.len() as f64;
        let worst = *all.last().unwrap();
        match self.mode {
            Mode::Saturated => println!(
                "{name}: {} batches of {BATCH} = {:.2} M samples/s ingested (4 tiers each); \
                 median batch {median:.2?}, p99 {:.2?}, worst {worst:.2?}; {} files of the next \
                 periods created during the run, {} on demand; {:.1}% CPU stolen by the host",
                all.len(),
                self.rate / 1e6,
                pct(0.99),
                self.created_during_run,
                self.on_demand,
                self.steal * 100.0
            ),
            _ => println!(
                "{name}: median {median:.2?}, p99 {:.2?} ({:.1}x), worst {worst:.2?} ({:.1}x); \
                 across the boundary worst {worst_across:.2?} ({:.2}x median), {:.1}% of its \
                 batches over 2x (whole run {:.1}%); {} files created during the run, {} on \
                 demand; {:.1}% CPU stolen; writer page faults across the boundary {} \
                 (in as long a window before it {})",
                pct(0.99),
                ratio(pct(0.99)),
                ratio(worst),
                ratio(worst_across),
                share_across * 100.0,
                share_all * 100.0,
                self.created_during_run,
                self.on_demand,
                self.steal * 100.0,
                self.faults.1,
                self.faults.0
            ),
        }
    }
}

/// The default tiers' maintenance interval (one minute), scaled by how much faster than the
/// wall clock simulated time runs at the offered rate; every 20 ms when saturated.
fn maintenance_every(rate: Option<f64>) -> Duration {
    let samples_per_real_second = f64::from(SERIES) / CADENCE as f64;
    rate.map_or(Duration::from_millis(20), |rate| {
        Duration::from_secs_f64(60.0 * samples_per_real_second / rate)
    })
}

/// Ingests from ten simulated minutes before the boundary to ten after.
fn run(mode: Mode) -> Outcome {
    let dir = support::bench_dir();
    let start = BOUNDARY - MINUTES * 60;
    let end = BOUNDARY + MINUTES * 60;
    let clock = Arc::new(ManualClock::new(start));
    let engine = Engine::builder(dir.path())
        .tiers(TiersConfig::default())
        .clock(clock.clone())
        .maintenance_every(maintenance_every(mode.rate()))
        .background_maintenance(
            !matches!(mode, Mode::Control(_)) && std::env::var_os("NO_MAINT").is_none(),
        )
        .open()
        .expect("open");
    // The current and next periods exist before the run; the run crosses into "next" and
    // maintenance creates the one after it.
    let ids = support::register_fleet(&engine, SERIES);
    if let Mode::Control(_) = mode {
        // Everything the rollover run's maintenance would do during the run, done before it:
        // passes every simulated 30 s create every file (paced passes repeat until none is
        // pending) and prefault every block written.
        for t in (start..end).step_by(30) {
            clock.set(t);
            while engine.maintain().expect("maintenance").pending > 0 {}
        }
        // Prefault again, so pages the kernel wrote back (and write-protected) while the
        // sweep above created files are writable when the run starts.
        for t in (start..end).step_by(30) {
            clock.set(t);
            engine.maintain().expect("maintenance");
        }
        clock.set(start);
    }
    let ahead_files = |engine: &Engine| -> u64 {
        (engine.stats().tiers.iter())
            .map(|t| t.disk.created_ahead)
            .sum()
    };
    let ahead_before = ahead_files(&engine);

    let mut batches = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    let cpu_before = cpu_times();
    let began = Instant::now();
    let mut busy = Duration::ZERO;
    let mut sent = 0usize;
    let mut ts = start;
    let mut fault_marks = Vec::new();
    while ts < end {
        clock.set(ts);
        if [BEFORE.start, BEFORE.end, ACROSS.start, ACROSS.end].contains(&ts) {
            fault_marks.push(writer_faults());
        }
        for chunk in ids.chunks(BATCH) {
            if let Some(rate) = mode.rate() {
                let due = began + Duration::from_secs_f64(sent as f64 / rate);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            batch.clear();
            batch.extend(
                chunk
                    .iter()
                    .map(|&id| Sample::new(id, ts, (ts % 600) as f64)),
            );
            let t = Instant::now();
            let report = engine.record_batch(&batch).expect("batch");
            let took = t.elapsed();
            busy += took;
            sent += batch.len();
            assert_eq!(report.accepted as usize, batch.len());
            batches.push((ts, took));
        }
        ts += CADENCE;
    }
    assert_eq!(
        fault_marks.len(),
        4,
        "the windows' bounds are instants of the run"
    );
    let elapsed = began.elapsed();
    let cpu_after = cpu_times();
    let stats = engine.stats();
    Outcome {
        mode,
        rate: sent as f64 / if mode.rate().is_some() { elapsed } else { busy }.as_secs_f64(),
        batches,
        created_during_run: ahead_files(&engine) - ahead_before,
        on_demand: stats.on_demand_creations,
        steal: steal_share(&cpu_before, &cpu_after),
        faults: (
            fault_marks[1] - fault_marks[0],
            fault_marks[3] - fault_marks[2],
        ),
    }
}

/// Page faults (minor and major) the writer threads have taken so far: a store into a page
/// that is not mapped writable yet, which prefaulting is there to prevent. Read from
/// `/proc/self/task/*/stat` (fields 10 and 12); 0 elsewhere.
fn writer_faults() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| stat.contains("(tierdb-writer-"))
        .map(|stat| {
            // Fields after the parenthesised name, which may hold spaces: state is field 3.
            let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
                .split_whitespace()
                .collect();
            let field = |n: usize| fields[n - 3].parse::<u64>().unwrap_or(0);
            field(10) + field(12)
        })
        .sum()
}

/// The machine's CPU time counters (`/proc/stat`'s `cpu` line, in ticks); empty elsewhere.
fn cpu_times() -> Vec<u64> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or_default();
    line.split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// Share of the CPU time between two readings that the hypervisor gave to someone else
/// (`steal`, the eighth counter).
fn steal_share(before: &[u64], after: &[u64]) -> f64 {
    let delta: Vec<u64> = (after.iter().zip(before))
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total: u64 = delta.iter().take(8).sum();
    match delta.get(7) {
        Some(&steal) if total > 0 => steal as f64 / total as f64,
        _ => 0.0,
    }
}
