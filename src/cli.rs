//! The `tierdb` command line: the parser, the arguments several subcommands share, the
//! helpers they share, and the dispatch. Each subcommand's arguments (its `--help`) and what
//! it does live in its own module. `main.rs` only parses, sets up logging and maps errors to
//! an exit code.
//!
//! `serve` and `demo` own the data directory (they lock it). `query`, `aggregate`, `series`,
//! `info` and `plot` open it read-only, so they work beside a running server. `import` and
//! `delete` need the directory to itself: while a server holds it, send the file (or the
//! `DELETE /api/v1/series` request) to the server instead. `retype` needs it to itself too
//! (stop the server; its `--dry-run` reads beside one).

pub mod aggregate;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod delete;
pub mod demo;
pub mod import;
pub mod import_archives;
pub mod info;
pub mod lookup;
pub mod output;
mod percentile;
pub mod plot;
pub mod query;
pub mod retype;
pub mod series;
pub mod serve;
pub mod tiers;

use crate::read::tier_choice::TierChoice;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::TiersConfig;
use crate::engine::Engine;
use crate::engine::EngineBuilder;
use crate::read::query::{Display, Query};
use crate::registry::{Selector, SeriesKey, TagFilter};
use crate::time::{parse_time, Span};

/// tierdb: a multi-resolution rollup engine for metrics.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the data lives; every subcommand takes these.
#[derive(Args, Debug, Clone)]
pub struct Location {
    /// The data directory.
    #[arg(long, env = "TIERDB_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// The tiers file. Default: the tiers stored in the data directory (its tiers.toml,
    /// written when it was created); for a new directory, the tiers.toml beside it (in its
    /// parent), else ./tiers.toml when present, else the built-in default (the shipped
    /// tiers.toml). A file that changes a stored tier's resolution or period is refused.
    #[arg(long, env = "TIERDB_TIERS")]
    pub tiers: Option<PathBuf>,
}

/// The listening side of `serve` and `demo`.
#[derive(Args, Debug, Clone)]
pub struct Listen {
    /// HTTP listen address (API and dashboard); port 0 picks a free port.
    #[arg(long, env = "TIERDB_HTTP", default_value = "127.0.0.1:8080")]
    pub http: SocketAddr,
    /// Graphite plaintext listen address, TCP and UDP; port 0 picks a free port.
    #[arg(long, env = "TIERDB_GRAPHITE", default_value = "127.0.0.1:2003")]
    pub graphite: SocketAddr,
    /// StatsD listen address (UDP), off unless given; the conventional port is 8125, and
    /// port 0 picks a free port.
    #[arg(long, env = "TIERDB_STATSD", value_name = "ADDR")]
    pub statsd: Option<SocketAddr>,
    /// StatsD flush interval: counters, gauges and sets become one sample per series per
    /// interval, stamped with its start (choose one that divides a minute).
    #[arg(long, env = "TIERDB_STATSD_FLUSH", value_name = "SPAN", default_value = "10s", value_parser = serve::positive_span)]
    pub statsd_flush: std::time::Duration,
    /// A token granting every role: every API endpoint then requires `Authorization: Bearer
    /// <token>` (the dashboard takes it as `?token=`). On the command line it shows in `ps`:
    /// prefer TIERDB_TOKEN, --token-file, or the tokens by role below.
    #[arg(long, env = "TIERDB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Tokens by role, TLS and allowlists.
    #[command(flatten)]
    pub security: serve::SecurityArgs,
    /// Refuse new series beyond this many (existing series keep writing). Every 256 new
    /// series preallocate a chunk of files (8-16 MiB with the default tiers), and Graphite
    /// has no authentication, so the default keeps a stray or hostile sender from filling
    /// the disk; 0 means no limit.
    #[arg(long, env = "TIERDB_MAX_SERIES", default_value_t = 100_000)]
    pub max_series: usize,
    /// Bytes of series names all connections together may cache (one connection at most
    /// 8 MiB of them); past it, names are looked up in the registry uncached.
    #[arg(
        long = "name-cache",
        env = "TIERDB_NAME_CACHE",
        value_name = "BYTES",
        default_value_t = crate::server::DEFAULT_NAME_CACHE_BYTES
    )]
    pub name_cache_bytes: usize,
    /// Most values one read request (render, aggregate, find) may read in all: buckets of
    /// series, summarize windows, find nodes, registry keys scanned. A request past it is
    /// refused with a 400.
    #[arg(
        long,
        env = "TIERDB_MAX_READ_VALUES",
        value_name = "N",
        default_value_t = crate::read::budget::DEFAULT_READ_VALUES
    )]
    pub max_read_values: u64,
    /// Longest a PromQL query (`/prometheus/api/v1/query`, `query_range`) may evaluate; past
    /// it the query answers Prometheus' `timeout` error.
    #[arg(long, env = "TIERDB_QUERY_TIMEOUT", value_name = "SPAN", default_value = "2m", value_parser = serve::positive_span)]
    pub query_timeout: std::time::Duration,
    /// Series one PromQL query may select over all its selectors; past it the query answers
    /// an `execution` error.
    #[arg(long, env = "TIERDB_MAX_QUERY_SERIES", value_name = "N", default_value_t = crate::promql::DEFAULT_MAX_SERIES)]
    pub max_query_series: usize,
    /// Connection limits and timeouts.
    #[command(flatten)]
    pub connections: serve::ConnectionLimits,
}

impl Listen {
    /// The server's limits these flags set.
    pub fn limits(&self) -> crate::server::Limits {
        crate::server::Limits {
            max_series: (self.max_series > 0).then_some(self.max_series),
            max_read_values: self.max_read_values,
            query_timeout: self.query_timeout,
            max_query_series: self.max_query_series,
            name_cache_bytes: self.name_cache_bytes,
            ..self.connections.limits()
        }
    }
}

/// Which tier, range and display a read uses (`query`, `aggregate`, `plot`).
#[derive(Args, Debug, Clone)]
pub struct Window {
    /// A tier name or auto (the finest whose window covers the range within max_points).
    #[arg(long, default_value = "auto")]
    pub tier: String,
    /// How far back from --to (or now): 1h, 6h, 7d, 30min, 1mo, -6h (the sign is
    /// optional).
    #[arg(long, conflicts_with = "from", allow_hyphen_values = true, value_parser = range_span)]
    pub range: Option<Span>,
    /// Start: now, unix seconds, an offset (-6h, now-7d, -1d-6h), RFC 3339, or a date and
    /// time without a zone, read as UTC (2026-11-22, '2026-11-22 17:00',
    /// 2026-11-22T17:00:00): the HTTP API's and Graphite's forms.
    #[arg(long, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// End (exclusive), same forms; default now.
    #[arg(long, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// avg, per_sec, total, max, min or count; query and aggregate take pNN (any quantile:
    /// p50, p99, p99.9) and hist (with --format json) of distributions (timers, histograms).
    #[arg(long, default_value = "avg")]
    pub display: String,
}

/// The `--tag` filters of `aggregate` and `series`, added to the selector they narrow, and
/// of `query` and `plot`, added to the series they name.
#[derive(Args, Debug, Clone)]
pub struct TagFilters {
    /// Only series with this tag (k=v), or without it (k!=v); repeatable. For query and plot,
    /// added to the series named: `cpu.user --tag host=web-1` is 'cpu.user{host=web-1}'.
    #[arg(long = "tag")]
    pub tags: Vec<String>,
}

impl TagFilters {
    /// The selector `text` names (a name glob, optionally with `{k=v,...}`), narrowed by
    /// these filters.
    fn selector(&self, text: &str) -> crate::error::Result<Selector> {
        Selector::parse(text)?.with_tags(self.tags.iter().map(String::as_str))
    }
}

/// The points `query` and `aggregate` print, and how: the window, the width of a point,
/// the output format.
#[derive(Args, Debug, Clone)]
pub struct Points {
    /// The tier, range and display read.
    #[command(flatten)]
    pub window: Window,
    /// Merge buckets into points this wide (a multiple of the tier's resolution).
    #[arg(long)]
    pub step: Option<Span>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}

/// Output formats of `query` and `aggregate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// An aligned table with human times; empty buckets blank.
    Table,
    /// `ts,value` rows.
    Csv,
    /// The HTTP API's JSON.
    Json,
}

/// The subcommands. Each one's help text is the doc comment of its arguments' type, in its
/// module; the variants carry no doc comment because one would replace that text.
#[derive(Subcommand, Debug)]
#[allow(missing_docs)]
pub enum Command {
    Serve(Box<serve::ServeArgs>),
    Demo(Box<demo::DemoArgs>),
    Import(import::ImportArgs),
    Query(query::QueryArgs),
    Aggregate(aggregate::AggregateArgs),
    Series(series::SeriesArgs),
    Delete(delete::DeleteArgs),
    Retype(retype::RetypeArgs),
    Plot(plot::PlotArgs),
    Info(info::InfoArgs),
    Tiers(tiers::TiersArgs),
    Lookup(lookup::LookupArgs),
    #[cfg(feature = "cluster")]
    Cluster(cluster::ClusterArgs),
}

/// Runs a parsed command line.
///
/// # Errors
/// Whatever went wrong, as a one-line message.
pub fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Demo(args) => demo::run(*args),
        Command::Import(args) => import::run(args),
        Command::Query(args) => query::run(args),
        Command::Aggregate(args) => aggregate::run(args),
        Command::Series(args) => series::run(args),
        Command::Delete(args) => delete::run(args),
        Command::Retype(args) => retype::run(args),
        Command::Plot(args) => plot::run(args),
        Command::Info(args) => info::run(args),
        Command::Tiers(args) => tiers::run(args),
        Command::Lookup(args) => lookup::run(args),
        #[cfg(feature = "cluster")]
        Command::Cluster(args) => cluster::run(args),
    }
}

/// A query from the command line's words: the series (see [`resolve_series`]), the range
/// from --from/--to or --range (default the last hour), the tier and display by name.
fn build_query(
    engine: &Engine,
    series: &str,
    filters: &TagFilters,
    window: &Window,
) -> Result<Query, Box<dyn std::error::Error>> {
    let series = resolve_series(engine, series, filters)?;
    let (from, to) = window_range(engine, window)?;
    let mut query = Query::new(series, from, to);
    query.tier =
        TierChoice::parse(engine.config(), &window.tier).map_err(|e| format!("--tier: {e}"))?;
    query.display = window.display.parse::<Display>()?;
    Ok(query)
}

/// A `--range`: a positive interval in the units of [`crate::time::parse_interval`], with
/// an optional leading `-` (`--range -6h` reads as "six hours back", like `--from -6h`).
fn range_span(text: &str) -> Result<Span, String> {
    let secs = crate::time::parse_interval(text.strip_prefix('-').unwrap_or(text))?;
    Ok(Span::from_secs(secs.unsigned_abs()))
}

/// The series `text` (canonical or Graphite form) and the `--tag` filters name: the key
/// itself when it exists (the `k=v` filters added to its tags); else the one series with
/// that name and at least those tags, said on stderr; else an error listing the series
/// with that name, or series with a near name.
fn resolve_series(
    engine: &Engine,
    text: &str,
    filters: &TagFilters,
) -> Result<String, Box<dyn std::error::Error>> {
    let filters = (filters.tags.iter())
        .map(|tag| TagFilter::parse(tag))
        .collect::<crate::error::Result<Vec<_>>>()?;
    let key = SeriesKey::parse(text)?;
    let mut tags: Vec<(String, String)> = (key.tags())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut exact = true;
    for filter in &filters {
        match filter {
            TagFilter::Eq(k, v) => tags.push((k.clone(), v.clone())),
            TagFilter::NotEq(..) => exact = false,
        }
    }
    let wanted = SeriesKey::new(key.name(), tags)?;
    let registry = engine.registry();
    if exact && registry.get(wanted.as_str()).is_some() {
        return Ok(wanted.to_string());
    }
    let found = registry.candidates(wanted.as_str(), &filters, crate::registry::SUGGESTIONS)?;
    let shown = if exact {
        wanted.to_string()
    } else {
        let flags: Vec<String> = filters.iter().map(|f| format!("--tag {f}")).collect();
        format!("{wanted} with {}", flags.join(" "))
    };
    if let ([(_, only)], 1) = (found.same_name.as_slice(), found.same_name_total) {
        eprintln!("tierdb: no series {shown}; reading {only}, the only series with that name and those tags");
        return Ok(only.to_string());
    }
    let hint = found.hint();
    let error = crate::error::Error::UnknownSeries(shown);
    Err(match hint {
        None => error.into(),
        Some(hint) if found.same_name.is_empty() => format!("{error}; {hint}").into(),
        Some(hint) => {
            format!("{error}; {hint}; name one with all its tags, or narrow with --tag k=v").into()
        }
    })
}

/// The `[from, to)` a window names: `--from`/`--to`, or `--range` back from `--to`; the
/// last hour by default.
fn window_range(engine: &Engine, window: &Window) -> Result<(i64, i64), String> {
    let now = engine.now();
    let to = match &window.to {
        Some(text) => parse_time(text, now).map_err(|e| format!("--to: {e}"))?,
        None => now,
    };
    let from = match (&window.from, window.range) {
        (Some(text), _) => parse_time(text, now).map_err(|e| format!("--from: {e}"))?,
        (None, Some(range)) => to.saturating_sub(range.secs() as i64),
        (None, None) => to.saturating_sub(3600),
    };
    Ok((from, to))
}

/// The tiers from `path`, else `./tiers.toml` when present, else the built-in default.
///
/// # Errors
/// The file's refusal, naming file, line and field.
pub fn load_tiers(path: Option<&Path>) -> crate::error::Result<TiersConfig> {
    match path {
        Some(path) => TiersConfig::load(path),
        None if Path::new("tiers.toml").exists() => TiersConfig::load(Path::new("tiers.toml")),
        None => Ok(TiersConfig::default()),
    }
}

/// The engine builder for `data_dir` and a `--tiers` flag: the tiers file when given; else
/// none, so the open uses the tiers stored in the directory; for a directory without them,
/// the `tiers.toml` beside it ([`edited_tiers`] compares that same file on every later open,
/// so it is taken at creation too), else [`load_tiers`]'s choice.
///
/// A directory that stores its tiers, opened without `--tiers` beside a `tiers.toml` that
/// differs from them ([`edited_tiers`]), is opened with that file: an edit is applied where
/// the files allow it and refused with each difference where not, never ignored.
///
/// # Errors
/// The tiers file's refusal, naming file, line and field; [`crate::Error::TiersConflict`]
/// naming the file (`--tiers`, or the one beside the directory) when it changes what the
/// directory's files depend on.
pub fn engine_builder(
    data_dir: &Path,
    tiers: Option<&Path>,
) -> crate::error::Result<EngineBuilder> {
    let builder = Engine::builder(data_dir);
    let stored = crate::storage::stored_tiers::stored_path(data_dir);
    if let (Some(path), true) = (tiers, stored.exists()) {
        if let Some(stored) = crate::storage::stored_tiers::read_stored(data_dir)? {
            if let Some(edited) = EditedTiers::compare(path, &stored)? {
                edited.refuse_layout(data_dir)?;
                return Ok(builder.tiers(edited.config));
            }
        }
    }
    if tiers.is_none() && stored.exists() {
        return Ok(match edited_tiers(data_dir)? {
            Some(edited) => {
                edited.refuse_layout(data_dir)?;
                eprintln!(
                    "tierdb: note: {} differs from the tiers stored in {} ({}): applying it \
                     where the files allow",
                    edited.path.display(),
                    data_dir.display(),
                    edited.listed()
                );
                builder.tiers(edited.config)
            }
            None => builder,
        });
    }
    let beside = beside(data_dir);
    let tiers = tiers.or_else(|| beside.is_file().then_some(beside.as_path()));
    Ok(builder.tiers(load_tiers(tiers)?))
}

/// The data directory opened read-only (works beside a running server). A read-only open
/// stores nothing, so an edited `tiers.toml` beside the directory ([`edited_tiers`]) is not
/// applied: the stored tiers are read, and stderr says what differs and what applies it.
///
/// # Errors
/// A missing directory or a refused file, named.
pub fn open_reader(location: &Location) -> crate::error::Result<Engine> {
    let dir = &location.data_dir;
    if location.tiers.is_none() && crate::storage::stored_tiers::stored_path(dir).exists() {
        if let Some(edited) = edited_tiers(dir)? {
            eprintln!("tierdb: note: {}", edited.not_applied(dir));
        }
        return Engine::builder(dir).read_only().open();
    }
    engine_builder(dir, location.tiers.as_deref())?
        .read_only()
        .open()
}

/// A `tiers.toml` beside a data directory that differs from the tiers the directory stores.
pub(crate) struct EditedTiers {
    /// The file.
    pub(crate) path: PathBuf,
    /// What it configures.
    pub(crate) config: TiersConfig,
    /// Each field in which it differs from the stored tiers.
    pub(crate) differences: Vec<crate::config::Difference>,
}

impl EditedTiers {
    /// Why these tiers are not in force for a command that stores nothing, each difference,
    /// and the command that applies them (or why none can).
    pub(crate) fn not_applied(&self, dir: &Path) -> String {
        let layout = self.differences.iter().any(|d| d.layout);
        let what = if layout {
            format!(
                "it changes how the directory's files are laid out, which cannot be applied to \
                 them: keep the stored values in {} (`tierdb tiers --data-dir {}` prints \
                 them), or start a new --data-dir with it",
                self.path.display(),
                dir.display()
            )
        } else {
            format!(
                "this command reads the stored tiers; a command that writes applies them \
                 (`tierdb serve --data-dir {} --tiers {}`)",
                dir.display(),
                self.path.display()
            )
        };
        format!(
            "{} differs from the tiers stored in {}: {}; {what}",
            self.path.display(),
            dir.display(),
            self.listed()
        )
    }

    /// [`crate::Error::TiersConflict`] naming this file when it changes what the files of
    /// `dir` depend on (a tier's resolution or period, the raw tier's period,
    /// `series_per_chunk`): such a file is refused before anything is applied.
    fn refuse_layout(&self, dir: &Path) -> crate::error::Result<()> {
        let layout: Vec<String> = (self.differences.iter())
            .filter(|d| d.layout)
            .map(|d| d.to_string())
            .collect();
        if layout.is_empty() {
            return Ok(());
        }
        Err(crate::error::Error::TiersConflict {
            path: crate::storage::stored_tiers::stored_path(dir),
            given: self.path.display().to_string(),
            differences: layout.join("; "),
        })
    }

    /// Every difference, `; ` between them.
    fn listed(&self) -> String {
        let all: Vec<String> = self.differences.iter().map(|d| d.to_string()).collect();
        all.join("; ")
    }

    /// The tiers file at `path` compared with `stored`; `None` when they agree.
    ///
    /// # Errors
    /// The file's refusal, naming file, line and field.
    pub(crate) fn compare(path: &Path, stored: &TiersConfig) -> crate::error::Result<Option<Self>> {
        let config = TiersConfig::load(path)?;
        let differences = crate::config::differences(stored, &config);
        Ok((!differences.is_empty()).then(|| EditedTiers {
            path: path.to_path_buf(),
            config,
            differences,
        }))
    }
}

/// The `tiers.toml` beside `data_dir` (in its parent: `./tiers.toml` for the default
/// `./data`) when it differs from the tiers `data_dir` stores; `None` when there is no such
/// file, the directory stores no tiers, or the two agree.
///
/// # Errors
/// The file's refusal, naming file, line and field; a damaged stored file.
pub(crate) fn edited_tiers(data_dir: &Path) -> crate::error::Result<Option<EditedTiers>> {
    let path = beside(data_dir);
    if !path.is_file() {
        return Ok(None);
    }
    let Some(stored) = crate::storage::stored_tiers::read_stored(data_dir)? else {
        return Ok(None);
    };
    EditedTiers::compare(&path, &stored)
}

/// The tiers `dir` stores, for the commands that read them without opening it (`tiers` and
/// `lookup` with `--data-dir`).
///
/// # Errors
/// A directory that stores none, said so; a damaged stored file.
fn stored_tiers(dir: &Path) -> Result<TiersConfig, Box<dyn std::error::Error>> {
    crate::storage::stored_tiers::read_stored(dir)?.ok_or_else(|| {
        format!(
            "{} stores no tiers (no tiers.toml in it): not a data directory, or one that no \
             writing command of this version has opened yet",
            dir.display()
        )
        .into()
    })
}

/// The path of the `tiers.toml` beside `data_dir`.
fn beside(data_dir: &Path) -> PathBuf {
    let parent = data_dir.parent().unwrap_or(Path::new(""));
    parent.join("tiers.toml")
}

/// Says on stderr which part of a query's range its tier no longer holds (the JSON
/// answer's `not_retained`), so empty rows there are not taken for missing data.
fn note_not_retained(engine: &Engine, result: &crate::read::query::QueryResult) {
    let Some(gone) = result.not_retained else {
        return;
    };
    let reader = engine.reader();
    let set = (reader.registry().lookup(&result.series).ok().flatten())
        .map_or(0, |id| reader.registry().placement(id).set());
    let retention = (engine.config().set_tiers(set).iter())
        .find(|t| t.name == result.tier)
        .map(|t| t.retention)
        .or_else(|| engine.config().raw.as_ref().map(|r| r.retention));
    let retention = retention.map_or(String::new(), |r| format!(", retention {r}"));
    eprintln!(
        "tierdb: note: tier {}{retention} no longer holds {} .. {}: that part of the range \
         shows no data (a coarser tier keeps it longer: --tier auto picks one)",
        result.tier,
        crate::time::format_ts(gone.from),
        crate::time::format_ts(gone.to)
    );
}

/// Writes to stdout; a closed pipe (`tierdb series | head`) is not an error.
fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
