//! Wire protocols parsed into samples: pure functions from one line of bytes or text to a
//! result, with no sockets, buffers or engine in sight (the server owns those).
//!
//! - [`graphite`]: Graphite plaintext, `path value timestamp`, with Graphite 1.1 tags
//!   (`name;k=v`).
//! - [`influx`]: InfluxDB line protocol, as sent to the v1 `/write` and v2 `/api/v2/write`
//!   endpoints; every numeric field becomes one series `measurement.field`.
//! - [`prom_remote`]: Prometheus remote write, a snappy-compressed protobuf body (with the
//!   `server` feature, which brings prost and snap).
//! - [`otlp`]: OpenTelemetry's OTLP/HTTP metrics, protobuf or JSON (with the `server`
//!   feature).
//! - [`whisper`] and [`rrd`]: whole files of another tool's rollups (Graphite's `.wsp`,
//!   RRDtool's `.rrd`), read from their bytes; [`archive`] decides which of their archives
//!   fills which tier and what a point becomes in a bucket.
//! - [`statsd`]: StatsD and DogStatsD lines (`name:1|c|@0.1|#k:v`), one datagram line at a
//!   time; aggregating them per flush interval is the server's.
//!
//! Beside the parsers, with the `server` feature, what every ingest path (a server connection
//! or request, a cluster node's edge, an import) shares:
//! - `report`: what an ingest did, refusals by reason and the first ones by line;
//! - `bounds`: the time bounds a sample is checked against before its name is resolved,
//!   taken afresh at every flush;
//! - `name_cache`: series name to id (or partition), once per connection;
//! - `batch`: samples with their input lines, written into an engine whole;
//! - [`cumulative`]: cumulative histograms (Prometheus counter histograms) into the
//!   increases a distribution stores, with each series' last histogram;
//! - `local`: the one way samples reach this process's engine: resolved and queued
//!   beside the parser, registered and written where waiting is allowed;
//! - `sink`: the one ingest pipeline a server's protocols write through, a [`Sink`] per
//!   connection or request over a write target: this process's engine (`local`), or a
//!   cluster node's log (`crate::cluster::edge`); the sink keeps the report.
//!
//! Each parser gives a series as its canonical text (see [`crate::SeriesKey`]), a value as `f64` and a
//! timestamp in unix seconds, `None` meaning "now". Each refusal carries a stable snake_case
//! reason (`as_str()`) that the server counts by.

pub mod archive;
#[cfg(feature = "server")]
pub(crate) mod batch;
#[cfg(feature = "server")]
pub(crate) mod bounds;
#[cfg(feature = "server")]
pub mod cumulative;
pub mod graphite;
pub mod influx;
#[cfg(feature = "server")]
pub(crate) mod local;
#[cfg(feature = "server")]
pub(crate) mod name_cache;
#[cfg(feature = "server")]
pub mod otlp;
#[cfg(feature = "server")]
pub mod prom_remote;
#[cfg(feature = "server")]
pub(crate) mod report;
pub mod rrd;
#[cfg(feature = "server")]
pub(crate) mod sink;
pub mod statsd;
#[cfg(feature = "server")]
pub(crate) mod time_unit;
pub mod whisper;

#[cfg(feature = "server")]
pub use sink::Sink;
