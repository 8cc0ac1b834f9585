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
//! # The API
//! - Open and write: [`Engine`] ([`Engine::open`], [`Engine::builder`] with a
//!   [`TiersConfig`] of [`TierSpec`]s and a [`Clock`]), [`Engine::record`] and
//!   [`Engine::record_batch`] of [`Sample`]s (answered by a [`BatchReport`]), [`Engine::flush`].
//! - Read: [`Engine::query`] of one series ([`Query`], [`QueryResult`], [`Display`],
//!   [`TierChoice`]), [`Engine::aggregate`] across series ([`AggregateQuery`] with a
//!   [`Selector`], [`Aggregation`], [`AggregateResult`]), or any read through
//!   [`Engine::reader`] ([`Reader`], within a [`ReadBudget`]).
//! - Series: [`SeriesKey`] (a name and tags), [`SeriesId`], [`SeriesKind`] (gauge or counter).
//! - Time: [`Timestamp`], [`Span`], [`locate`] (the timestamp-to-buckets lookup) and the
//!   [`time`] module's grammar.
//! - Errors: [`Error`], [`RejectReason`].
//! - [`ingest`]: the Graphite, Influx, StatsD (and with `server`, Prometheus remote write)
//!   parsers, pure functions from bytes to samples.
//!
//! Behind default-on Cargo features: [`render`] (the Graphite render API), [`promql`] and
//! [`server`] (`tierdb serve`, [`server::run`]) with `server`, cluster mode (NATS JetStream)
//! with `cluster`, [`cli`] (the command line and [`cli::import::import`]) with `cli`, and
//! charts with `plot`; `default-features = false` builds the engine alone. Everything else is private to the crate; ARCHITECTURE.md maps it.
#![warn(missing_docs)]
// The links above to the default features' items resolve only with those features; the
// default build (and CI's `cargo doc`) checks every link.
#![cfg_attr(
    not(all(feature = "server", feature = "cli")),
    allow(rustdoc::broken_intra_doc_links)
)]

mod bucket;
#[cfg(feature = "cli")]
pub mod cli;
mod clock;
#[cfg(feature = "cluster")]
mod cluster;
mod config;
mod counter;
mod engine;
mod error;
mod fault;
pub mod histogram;
pub mod ingest;
#[cfg(feature = "plot")]
mod plot;
#[cfg(feature = "server")]
pub mod promql;
mod read;
mod registry;
#[cfg(feature = "server")]
pub mod render;
mod sample;
#[cfg(feature = "server")]
pub mod server;
mod storage;
#[doc(hidden)]
pub mod testing;
pub mod time;

pub use bucket::{Bucket, Last};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{EngineSettings, RawTierSpec, SeriesRules, TierSet, TierSpec, TiersConfig};
pub use counter::SeriesKind;
pub use engine::{
    ApplyReport, BatchObserved, BatchSample, BatchSeries, Checkpoints, Deleted, Engine,
    EngineBuilder, EngineStats, KeyIndex, MaintenanceReport, RetypeOutcome, Retyped, SampleBatch,
    TierStats,
};
pub use error::{Error, RejectReason, Result};
pub use read::aggregate::{
    AggregatePlan, AggregateQuery, AggregateResult, Aggregation, Fold, Group, PartialAggregate,
};
pub use read::budget::ReadBudget;
pub use read::distribution::{
    DistributionGroup, DistributionPlan, DistributionPoint, DistributionQuery, DistributionResult,
    DistributionTarget, HistogramShown, PartialDistribution, SeriesDistribution, Shown,
};
pub use read::query::{Display, Query, QueryResult};
pub use read::reader::Reader;
pub use read::store::cache::{
    CachedStore, RenderCache, RenderCacheStats, DEFAULT_RENDER_CACHE_BYTES,
};
pub use read::store::{
    bucket_span, BucketHistogram, BucketReduce, Found, HistogramVisit, LabelMatcher, RawPoints,
    Selection, SeriesFilter, SeriesRef, Store,
};
pub use read::tier_choice::TierChoice;
pub use registry::{KeyView, Selector, SeriesId, SeriesKey, SetPlace, TagFilter};
pub use sample::{BatchReport, ObservedSample, RawCounts, Sample};
pub use time::{locate, Placement, Span, Timestamp};
