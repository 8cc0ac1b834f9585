//! The read side: everything that turns stored buckets into answers, and nothing of the
//! write path. [`Reader`](reader::Reader) is the one door: a borrowed view of an open data
//! directory (tiers, clock, registry, series kinds, period files) whose methods are every
//! read there is. Its files import one way, lowest first (`tests/it/layers.rs` checks it):
//! - [`value_text`]: how answers write a value that overflowed (`+Inf`, `-Inf`);
//!   [`budget`]: what one read request may read in all; [`tier_choice`]: which tier a
//!   read of a range uses (`auto` or a name), from the tiers and a clock alone, so a
//!   cluster node without an engine chooses as an engine would; [`write_log`]: which
//!   buckets may have changed since a moment, for caches of answers;
//! - [`reader`]: the [`Reader`](reader::Reader) and what a read sees through it;
//! - [`query`]: one series at a zoom level ([`query::Query`], [`query::PointGrid`]) and the
//!   one-series reads;
//! - [`aggregate`]: reads across series, grouped by tag, mergeable across nodes; and
//!   [`distribution`]: quantiles and histograms of distribution series;
//! - [`store`]: the one read interface the query languages stand on ([`store::Store`]),
//!   which the reader implements and a cluster node's fan-out too, and the render cache,
//!   a decorator of the reader's store ([`store::cache`]).
//!
//! The reads are methods of [`Reader`](reader::Reader) written in the file that does their
//! work, so the reader imports none of the files above it.
//!
//! The read side sits above storage, the registry and counters, and below the engine, which
//! hands out a [`Reader`](reader::Reader) ([`crate::Engine::reader`]) and offers its reads as
//! shortcuts.

pub(crate) mod aggregate;
pub(crate) mod budget;
pub(crate) mod distribution;
pub(crate) mod query;
pub(crate) mod reader;
pub(crate) mod store;
pub(crate) mod tier_choice;
pub(crate) mod value_text;
pub(crate) mod write_log;
