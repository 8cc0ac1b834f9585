//! `tierdb demo`: a server with a simulated agent writing into it. The agent sends a few
//! hosts' cpu, memory, load and request counts with daily shapes, and each host's request
//! latencies as a timer (a distribution series, so percentiles can be read), backfilled over
//! the last days and then written live every ten seconds, so a newcomer sees a full
//! dashboard at once.
//! Run again on the same `--data-dir`, it writes only what is new: its backfill resumes after
//! the last sample the directory holds ([`Agent::resume_at`]), so no bucket is counted twice.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::serve::until_shutdown;
use super::{engine_builder, Listen};
use crate::counter::SeriesKind;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::read::query::{Display, Query};
use crate::registry::SeriesId;
use crate::sample::Sample;
use crate::time::Timestamp;

/// Hosts the agent simulates.
pub const HOSTS: [&str; 4] = ["web-1", "web-2", "db-1", "cache-1"];
/// Metrics per host.
pub const METRICS: [&str; 5] = [
    "cpu.user",
    "cpu.system",
    "memory.used",
    "load.shortterm",
    "http.requests",
];
/// Timers per host: distribution series (as a StatsD `|ms` timer is), each interval
/// sending [`TIMER_VALUES`] latencies in milliseconds, so p50, p90 and p99 can be read.
pub const TIMERS: [&str; 1] = ["req.time"];
/// Latencies each timer sends per interval.
pub const TIMER_VALUES: usize = 6;
/// Seconds between samples, as a typical agent's interval.
pub const CADENCE: i64 = 10;
const DAY: i64 = 86_400;

/// A server plus a simulated agent (a few hosts' cpu, memory, load, requests and request
/// latencies) that backfills the last days and then writes live: open the printed address
/// for a full dashboard. Data goes to a temporary directory unless --data-dir is given.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  tierdb demo\n  tierdb demo --http 127.0.0.1:9000 --days 7\n\nThe \
                  server's tuning flags (series, read and connection limits, timeouts, the name \
                  cache, the StatsD interval) and its security flags (tokens by role, TLS, \
                  allowlists) are serve's (tierdb serve --help); the demo takes them too but \
                  does not list them."
)]
#[command(mut_arg("statsd_flush", |arg| arg.hide(true)))]
#[command(mut_arg("max_series", |arg| arg.hide(true)))]
#[command(mut_arg("name_cache_bytes", |arg| arg.hide(true)))]
#[command(mut_arg("max_read_values", |arg| arg.hide(true)))]
#[command(mut_arg("query_timeout", |arg| arg.hide(true)))]
#[command(mut_arg("max_query_series", |arg| arg.hide(true)))]
#[command(mut_arg("graphite_max_connections", |arg| arg.hide(true)))]
#[command(mut_arg("graphite_idle_timeout", |arg| arg.hide(true)))]
#[command(mut_arg("http_max_connections", |arg| arg.hide(true)))]
#[command(mut_arg("http_header_timeout", |arg| arg.hide(true)))]
#[command(mut_arg("http_body_timeout", |arg| arg.hide(true)))]
#[command(mut_arg("http_idle_timeout", |arg| arg.hide(true)))]
#[command(mut_arg("token_file", |arg| arg.hide(true)))]
#[command(mut_arg("read_token_file", |arg| arg.hide(true)))]
#[command(mut_arg("write_token_file", |arg| arg.hide(true)))]
#[command(mut_arg("admin_token_file", |arg| arg.hide(true)))]
#[command(mut_arg("tls_cert", |arg| arg.hide(true)))]
#[command(mut_arg("tls_key", |arg| arg.hide(true)))]
#[command(mut_arg("tls_client_ca", |arg| arg.hide(true)))]
#[command(mut_arg("peer_ca", |arg| arg.hide(true)))]
#[command(mut_arg("graphite_allow", |arg| arg.hide(true)))]
#[command(mut_arg("statsd_allow", |arg| arg.hide(true)))]
#[command(mut_arg("http_allow", |arg| arg.hide(true)))]
pub struct DemoArgs {
    /// The data directory (default: a temporary one, removed at exit).
    #[arg(long, env = "TIERDB_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The tiers file (default: the tiers stored in --data-dir; for a new directory, the
    /// tiers.toml beside it (in its parent), else ./tiers.toml when present, else the
    /// built-in default).
    #[arg(long, env = "TIERDB_TIERS")]
    tiers: Option<PathBuf>,
    /// Days of history to backfill before going live.
    #[arg(long, default_value_t = 3)]
    days: i64,
    #[command(flatten)]
    listen: Listen,
}

/// Serves a data directory (by default a temporary one, removed at exit) with the agent
/// writing into it, until stopped.
pub(super) fn run(args: DemoArgs) -> std::result::Result<(), Box<dyn std::error::Error>> {
    // Made only when no directory is given (removed when `temp` drops at exit): a demo of a
    // given directory stopped by SIGKILL used to leave an empty one behind.
    let temp;
    let dir = match args.data_dir {
        Some(dir) => dir,
        None => {
            temp = tempfile::Builder::new().prefix("tierdb-demo").tempdir()?;
            // A directory inside it, so that the file beside the data directory is one of
            // the demo's own (none), never a stray tiers.toml in the system's temp directory.
            temp.path().join("data")
        }
    };
    let builder = engine_builder(&dir, args.tiers.as_deref())?;
    until_shutdown(
        &dir,
        || builder.open(),
        &args.listen,
        |engine| {
            let agent = start(engine, args.days)?;
            println!("tierdb: demo data in {}", dir.display());
            Ok(Some(agent))
        },
    )
}

/// The simulated fleet's series.
pub struct Agent {
    series: Vec<(SeriesId, &'static str, usize)>,
    /// The timers: (series, host number).
    timers: Vec<(SeriesId, usize)>,
}

impl Agent {
    /// Registers the series in `engine`, the timers as distributions.
    ///
    /// # Errors
    /// The engine's, when a series cannot be registered or a timer's kind fixed.
    pub fn new(engine: &Engine) -> Result<Agent> {
        let mut series = Vec::new();
        let mut timers = Vec::new();
        for (h, host) in HOSTS.iter().enumerate() {
            for metric in METRICS {
                series.push((
                    engine.series(&format!("{metric}{{host={host}}}"))?,
                    metric,
                    h,
                ));
            }
            for timer in TIMERS {
                let id = engine.series(&format!("{timer}{{host={host}}}"))?;
                engine.declare_kind(id, SeriesKind::Distribution)?;
                timers.push((id, h));
            }
        }
        Ok(Agent { series, timers })
    }

    /// Writes every interval of `[from, to)`, an hour per batch.
    ///
    /// # Errors
    /// The engine's.
    pub fn backfill(&self, engine: &Engine, from: Timestamp, to: Timestamp) -> Result<u64> {
        let mut written = 0;
        let mut batch = Vec::new();
        let mut hour = from - from.rem_euclid(CADENCE);
        while hour < to {
            batch.clear();
            let end = (hour + 3600).min(to);
            let mut ts = hour;
            while ts < end {
                self.samples_at(ts, &mut batch);
                ts += CADENCE;
            }
            written += engine.record_batch(&batch)?.accepted;
            hour = end;
        }
        Ok(written)
    }

    /// The fleet's samples at `ts`: a value per metric, [`TIMER_VALUES`] per timer.
    pub fn samples_at(&self, ts: Timestamp, out: &mut Vec<Sample>) {
        for &(id, metric, host) in &self.series {
            out.push(Sample::new(id, ts, value(metric, host, ts)));
        }
        for &(id, host) in &self.timers {
            out.extend((0..TIMER_VALUES).map(|i| Sample::new(id, ts, latency(host, ts, i))));
        }
    }

    /// The first instant of `[from, to)`, on the [`CADENCE`] grid, that the agent has not
    /// written into `engine`: `from` for a directory without its series, else the instant
    /// after the last sample an earlier run wrote (at or after `to` when that run wrote up to
    /// now or later).
    ///
    /// The last sample is found in the finest tier that holds any of the first series: its
    /// last bucket with samples, starting at `b` and holding `n` of them, was written from `b`
    /// on every [`CADENCE`] (every run writes a gapless run of instants on that grid), so the
    /// next instant is `b + n × CADENCE`, at most the bucket's end.
    ///
    /// # Errors
    /// The engine's, from reading the series.
    pub fn resume_at(&self, engine: &Engine, from: Timestamp, to: Timestamp) -> Result<Timestamp> {
        let name = format!("{}{{host={}}}", METRICS[0], HOSTS[0]);
        let mut tiers: Vec<_> = engine.config().tiers.iter().collect();
        tiers.sort_by_key(|t| t.resolution);
        for tier in tiers {
            let res = tier.resolution.secs() as i64;
            // Through the bucket holding `to`, and one past it, so a run that wrote past
            // `to` (a clock set back since) is seen.
            let end = to - to.rem_euclid(res) + 2 * res;
            // From the start of the bucket holding `from`, which may hold the last sample.
            let query = Query::new(name.as_str(), from - from.rem_euclid(res), end)
                .tier(&tier.name)
                .display(Display::Count);
            let points = match engine.query(&query) {
                Ok(result) => result.points,
                // More points than one answer holds (`--days` in the years): a coarser tier
                // answers.
                Err(Error::InvalidQuery(_)) => continue,
                Err(e) => return Err(e),
            };
            let last = points
                .iter()
                .rev()
                .find(|(_, n)| n.is_some_and(|n| n > 0.0));
            if let Some(&(start, Some(n))) = last {
                let next = (start + n as i64 * CADENCE).min(start + res);
                return Ok(next.max(from));
            }
        }
        Ok(from)
    }

    /// Writes the fleet's samples every [`CADENCE`] seconds of wall time, from `first` on,
    /// until `stop` is set.
    pub fn run_live(&self, engine: &Engine, first: Timestamp, stop: &AtomicBool) {
        let mut batch = Vec::new();
        let mut next = first - first.rem_euclid(CADENCE);
        while !stop.load(Ordering::Relaxed) {
            let now = engine.now();
            if now >= next {
                batch.clear();
                while next <= now {
                    self.samples_at(next, &mut batch);
                    next += CADENCE;
                }
                if let Err(e) = engine.record_batch(&batch) {
                    tracing::error!(error = %e, "demo agent write failed");
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Starts the agent: backfills what `engine` lacks of the last `days` ([`Agent::resume_at`])
/// and then writes live on a thread until the returned flag is set.
///
/// # Errors
/// The engine's, from registration, the read of what is there and the backfill.
pub fn start(
    engine: &Arc<Engine>,
    days: i64,
) -> Result<(Arc<AtomicBool>, std::thread::JoinHandle<()>)> {
    let agent = Agent::new(engine)?;
    let now = engine.now();
    let to = now - now.rem_euclid(CADENCE);
    let from = agent.resume_at(engine, now - days * DAY, to)?;
    if from < to {
        agent.backfill(engine, from, to)?;
    }
    let first = from.max(to);
    let stop = Arc::new(AtomicBool::new(false));
    let (engine, flag) = (Arc::clone(engine), Arc::clone(&stop));
    let handle = std::thread::Builder::new()
        .name("tierdb-demo-agent".into())
        .spawn(move || agent.run_live(&engine, first, &flag))
        .map_err(|e| crate::error::Error::io("demo agent thread", e))?;
    Ok((stop, handle))
}

/// A plausible value for `metric` on host number `host` at `ts`: busy in the (UTC)
/// afternoon, quiet at night, with some jitter; requests are counts per interval.
pub fn value(metric: &str, host: usize, ts: Timestamp) -> f64 {
    let hour = ts.rem_euclid(DAY) as f64 / 3600.0;
    let daily = 0.5 - 0.5 * ((hour - 3.0) / 24.0 * std::f64::consts::TAU).cos();
    let h = host as f64;
    let jitter = ((ts as f64 * 0.37 + h * 11.0).sin() + (ts as f64 * 0.071 + h).sin()) / 4.0 + 0.5;
    match metric {
        "cpu.user" => 4.0 + 55.0 * daily + 12.0 * jitter + h * 3.0,
        "cpu.system" => 1.0 + 9.0 * daily + 4.0 * jitter,
        "memory.used" => (1.5 + h * 0.5 + daily + 0.2 * jitter) * 1024.0 * 1024.0 * 1024.0,
        "load.shortterm" => (0.1 + 3.0 * daily + 0.8 * jitter) * (1.0 + h * 0.3),
        _ => (150.0 + 1700.0 * daily * (1.0 + h * 0.2) + 120.0 * jitter).round(),
    }
}

/// The `index`th request latency, in milliseconds, that host number `host` times at `ts`:
/// log-normal around a median that follows the daily load, with one request in fifty
/// about eight times slower, so p99 stands well above p50.
pub fn latency(host: usize, ts: Timestamp, index: usize) -> f64 {
    let hour = ts.rem_euclid(DAY) as f64 / 3600.0;
    let daily = 0.5 - 0.5 * ((hour - 3.0) / 24.0 * std::f64::consts::TAU).cos();
    let median = 20.0 + 60.0 * daily + host as f64 * 5.0;
    // Three draws per latency, seeds apart from every other latency's.
    let seed = (ts as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((host as u64) << 32 | (index as u64) << 2);
    let draw = |k: u64| uniform(seed.wrapping_add(k));
    let (u1, u2, u3) = (draw(0), draw(1), draw(2));
    // Box-Muller: a standard normal from two uniforms (u1 > 0).
    let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    let slow = if u3 < 0.02 { 8.0 } else { 1.0 };
    (median * (0.5 * normal).exp() * slow * 100.0).round() / 100.0
}

/// A number in (0, 1) from `seed` (splitmix64's mix): the demo's noise, the same every run.
fn uniform(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}
