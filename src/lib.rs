//! tierdb: a multi-resolution rollup engine for metrics.
//!
//! A sample `(series, timestamp, value)` fans out, through one lookup function
//! ([`time::locate`]), to every tier (by default 1m, 5m, 1h, 1d). Each tier keeps per bucket
//! `count`, `total`, `min` and `max`, so averages, avg/sec, totals and extremes at any zoom
//! level come without raw data. Each tier lives in whole-period files, preallocated and
//! memory-mapped, updated in place, dropped whole when they leave the tier's retention.
//!
//! ```
//! use tierdb::{Display, Engine, Query};
//!
//! # fn main() -> tierdb::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let engine = Engine::open(dir.path())?;
//! let now = chrono::Utc::now().timestamp();
//! let start = now - now % 3600 - 3600; // the last whole hour
//! for minute in 0..60 {
//!     engine.record("requests{host=a}", start + minute * 60, 120.0)?;
//! }
//! engine.sync()?; // single records are in the mapped files once sync returns
//!
//! let hour = engine.query(
//!     &Query::new("requests{host=a}", start, start + 3600).tier("1h").display(Display::PerSec),
//! )?;
//! assert_eq!(hour.points, vec![(start, Some(2.0))]); // 60 * 120 over 3600 s
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`config`] (tiers.toml), [`time`] (durations, the lookup, the time grammar),
//! [`bucket`] (the rollup value), [`registry`] (series keys and ids), [`storage`] (period
//! files, the mapping), [`read`] (the [`Reader`] and every read: one-series queries,
//! aggregates across series, tier choice, the read budget), [`engine`] (the write path and
//! the rolling window), [`counter`] (counters stored as increases), [`clock`], [`sample`],
//! [`ingest`] (Graphite, Influx and StatsD line parsers; Prometheus remote write with
//! `server`). Behind default-on Cargo features: `render` (the Graphite render API) and
//! `server` (`tierdb serve`) with `server`, `cli` (the command line) with `cli`, and `plot`
//! (charts) with `plot`; `default-features = false` builds the engine alone.
#![warn(missing_docs)]

pub mod bucket;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clock;
#[cfg(feature = "server")]
pub mod cluster;
pub mod config;
pub mod counter;
pub mod engine;
pub mod error;
pub mod ingest;
#[cfg(feature = "plot")]
pub mod plot;
pub mod read;
pub mod registry;
#[cfg(feature = "server")]
pub mod render;
pub mod sample;
#[cfg(feature = "server")]
pub mod server;
pub mod storage;
pub mod time;

pub use bucket::Bucket;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{EngineSettings, RawTierSpec, TierSpec, TiersConfig};
pub use counter::SeriesKind;
pub use engine::{Engine, EngineBuilder, EngineStats, Rewind, TierStats};
pub use error::{Error, RejectReason, Result};
pub use read::aggregate::{
    AggregatePlan, AggregateQuery, AggregateResult, Aggregation, Group, PartialAggregate,
};
pub use read::budget::ReadBudget;
pub use read::query::{Display, Query, QueryResult};
pub use read::reader::Reader;
pub use read::tier_choice::TierChoice;
pub use registry::{KeyView, Selector, SeriesId, SeriesKey, TagFilter};
pub use sample::{BatchReport, RawCounts, Sample};
pub use time::{locate, Placement, Span, Timestamp};
