//! The read side: everything that turns stored buckets into answers, and nothing of the
//! write path. [`Reader`] is the one door: a borrowed view of an open data directory (tiers,
//! clock, registry, series kinds, period files) whose methods are every read there is. The
//! files below it do the work those methods name:
//! - [`reader`]: the [`Reader`] and all its methods;
//! - [`tier_choice`]: which tier a read of a range uses (`auto` or a name), from the tiers
//!   and a clock alone, so a cluster node without an engine chooses as an engine would;
//! - [`query`]: one series at a zoom level ([`query::Query`], [`query::PointGrid`]);
//! - [`aggregate`]: reads across series, grouped by tag, mergeable across nodes;
//! - [`budget`]: what one read request may read in all;
//! - [`write_log`]: which buckets may have changed since a moment, for caches of answers;
//! - [`value_text`]: how answers write a value that overflowed (`+Inf`, `-Inf`).
//!
//! The read side sits above storage, the registry and counters, and below the engine, which
//! hands out a [`Reader`] ([`crate::Engine::reader`]) and offers its reads as shortcuts.

pub(crate) mod aggregate;
pub(crate) mod budget;
pub(crate) mod distribution;
pub(crate) mod query;
pub(crate) mod reader;
pub(crate) mod tier_choice;
pub(crate) mod value_text;
pub(crate) mod write_log;
