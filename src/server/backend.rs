//! What the handlers write into and read from: a [`Backend`]. The server knows only this
//! trait; a single node's engine ([`LocalBackend`], here) and a cluster node
//! (`crate::cluster::backend`, above the server) implement it, so no handler matches on
//! which one it has and the server never names the cluster.
//!
//! Reads return boxed futures: a single node runs them on the blocking pool, a cluster node
//! fans them out over the network.

use std::sync::Arc;

use axum::Router;
use futures_util::future::BoxFuture;

use super::delete_api::DeleteAnswer;
use super::error::{blocking, ApiError};
use super::read_report::ReadReport;
use super::stats::ServerStats;
use super::{Limits, State};
use crate::config::TiersConfig;
use crate::engine::{Engine, EngineStats};
use crate::error::Error;
use crate::error::Result;
use crate::ingest::local::LocalTarget;
use crate::ingest::sink::Sink;
use crate::promql;
use crate::read::aggregate::{AggregateQuery, AggregateResult};
use crate::read::budget::ReadBudget;
use crate::read::distribution::{DistributionQuery, DistributionResult};
use crate::read::query::{Query, QueryResult};
use crate::read::store::cache::{CachedStore, RenderCache};
use crate::registry::Selector;
use crate::render::tags::TagRead;
use crate::render::{self, FindNode, Finder, RenderRequest, RenderedSeries};
use crate::time::Timestamp;

/// An answer of a backend's read, as the handler returns it.
pub(crate) type Answer<'a, T> = BoxFuture<'a, std::result::Result<T, ApiError>>;

/// How a request asks to be read, beyond what it reads: only a cluster node heeds it.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// `consistency=strong`: read every partition from its leaseholder.
    pub strong: bool,
    /// The bearer token a cluster node sends the peers it asks (its admin token).
    pub token: Option<String>,
    /// Where a cluster node records that the read may lack acknowledged writes, and a
    /// render that its answer holds estimates.
    pub report: ReadReport,
}

/// Where writes go and reads come from: a single node's engine, or a cluster node.
pub trait Backend: Send + Sync {
    /// The tiers read and written.
    fn tiers(&self) -> &TiersConfig;

    /// The clock's now.
    fn now(&self) -> Timestamp;

    /// A sink for one request's or connection's samples, counting into `stats` within
    /// `limits`.
    fn sink(&self, stats: &Arc<ServerStats>, limits: &Limits) -> Sink;

    /// `/api/v1/query`: one series. An unknown series is a 404 naming the near names.
    fn query(&self, query: Query, read: ReadOptions) -> Answer<'_, QueryResult>;

    /// `/api/v1/aggregate`: reads across series within `budget`.
    fn aggregate(
        &self,
        query: AggregateQuery,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, AggregateResult>;

    /// `/api/v1/query` and `/api/v1/aggregate` with a quantile or `hist` display: reads of
    /// distribution series within `budget`, their histograms merged before a quantile is
    /// taken (a cluster node merges its owners' parts first). An unknown series is a 404.
    fn distribution(
        &self,
        query: DistributionQuery,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, DistributionResult>;

    /// `/api/v1/series`: the names `selector` selects.
    fn series(&self, selector: Selector, read: ReadOptions) -> Answer<'_, Vec<String>>;

    /// `DELETE /api/v1/series`: deletes the series `selector` selects (lists them only on a
    /// `dry_run`); see `Engine::delete_series`. A cluster node publishes the deletion to
    /// every partition's log (`cluster/delete_entry.rs`) and answers once it is logged.
    fn delete(
        &self,
        selector: Selector,
        dry_run: bool,
        read: ReadOptions,
    ) -> Answer<'_, DeleteAnswer>;

    /// `/render`: Graphite targets within `budget`; the relative error of estimates in the
    /// answer (StatsD timer paths' percentiles) recorded in `read.report`.
    fn render(
        &self,
        request: RenderRequest,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, Vec<RenderedSeries>>;

    /// `/prometheus/api/v1/...`: a PromQL query or a listing of series, labels or metadata,
    /// within `limits`. A cluster node evaluates it over its owners' reads, recording a read
    /// from a replica behind the log in `read.report`.
    fn prometheus(
        &self,
        request: promql::Request,
        limits: promql::QueryLimits,
        read: ReadOptions,
    ) -> BoxFuture<'_, std::result::Result<promql::Reply, promql::QueryError>>;

    /// `/metrics/find`: the next level of nodes under a path pattern, within `budget`.
    fn find(
        &self,
        query: String,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, Vec<FindNode>>;

    /// graphite-web's tag API: `read` over every series, within `budget`.
    fn tags(
        &self,
        read: TagRead,
        budget: Arc<ReadBudget>,
        options: ReadOptions,
    ) -> Answer<'_, serde_json::Value>;

    /// The engine's stats (a cluster node: the partitions it applies, added up).
    fn stats(&self) -> Answer<'_, EngineStats>;

    /// `/metrics` lines of the backend's own, after the engine's and the server's.
    fn metrics(&self) -> Answer<'_, String>;

    /// Endpoints only this backend has (a cluster node's status and peer endpoints).
    fn routes(&self) -> Router<Arc<State>>;

    /// At shutdown, once every connection is drained: makes everything written durable (a
    /// cluster node also leaves the cluster).
    fn close(&self) -> BoxFuture<'_, Result<()>>;
}

/// A single node: every read and write goes to its own engine.
pub struct LocalBackend {
    engine: Arc<Engine>,
    /// What renders read, kept for the next refresh of the same panel.
    render_cache: Arc<RenderCache>,
}

impl LocalBackend {
    /// The backend of `engine`, with a render cache of
    /// [`DEFAULT_RENDER_CACHE_BYTES`](crate::read::store::cache::DEFAULT_RENDER_CACHE_BYTES).
    pub fn new(engine: Arc<Engine>) -> LocalBackend {
        Self::with_render_cache(
            engine,
            crate::read::store::cache::DEFAULT_RENDER_CACHE_BYTES,
        )
    }

    /// The backend of `engine` with a render cache of at most `bytes` (0: none).
    pub fn with_render_cache(engine: Arc<Engine>, bytes: usize) -> LocalBackend {
        LocalBackend {
            engine,
            render_cache: Arc::new(RenderCache::new(bytes)),
        }
    }
}

impl Backend for LocalBackend {
    fn tiers(&self) -> &TiersConfig {
        self.engine.config()
    }

    fn now(&self) -> Timestamp {
        self.engine.now()
    }

    fn sink(&self, stats: &Arc<ServerStats>, limits: &Limits) -> Sink {
        let shared = stats.sink_shared(limits);
        Sink::new(LocalTarget::new(Arc::clone(&self.engine), &shared), &shared)
    }

    fn query(&self, query: Query, _: ReadOptions) -> Answer<'_, QueryResult> {
        let engine = Arc::clone(&self.engine);
        Box::pin(async move {
            let answer = blocking(move || match engine.query(&query) {
                Err(Error::UnknownSeries(key)) => Ok(Err(unknown_series(&engine, key))),
                other => other.map(Ok),
            })
            .await?;
            answer.map_err(ApiError::NotFound)
        })
    }

    fn aggregate(
        &self,
        query: AggregateQuery,
        budget: Arc<ReadBudget>,
        _: ReadOptions,
    ) -> Answer<'_, AggregateResult> {
        let engine = Arc::clone(&self.engine);
        Box::pin(blocking(move || {
            engine.reader().aggregate_within(&query, &budget)
        }))
    }

    fn distribution(
        &self,
        query: DistributionQuery,
        budget: Arc<ReadBudget>,
        _: ReadOptions,
    ) -> Answer<'_, DistributionResult> {
        let engine = Arc::clone(&self.engine);
        Box::pin(async move {
            let answer =
                blocking(
                    move || match engine.reader().distribution_query(&query, &budget) {
                        Err(Error::UnknownSeries(key)) => Ok(Err(unknown_series(&engine, key))),
                        other => other.map(Ok),
                    },
                )
                .await?;
            answer.map_err(ApiError::NotFound)
        })
    }

    fn series(&self, selector: Selector, _: ReadOptions) -> Answer<'_, Vec<String>> {
        let engine = Arc::clone(&self.engine);
        Box::pin(blocking(move || Ok(engine.reader().series_keys(&selector))))
    }

    fn delete(
        &self,
        selector: Selector,
        dry_run: bool,
        _: ReadOptions,
    ) -> Answer<'_, DeleteAnswer> {
        let engine = Arc::clone(&self.engine);
        Box::pin(blocking(move || {
            let picked = engine.select_series(&selector);
            if dry_run || picked.is_empty() {
                let series = picked.into_iter().map(|(_, key)| key).collect();
                return Ok(DeleteAnswer {
                    dry_run,
                    series,
                    ..DeleteAnswer::default()
                });
            }
            let ids: Vec<_> = picked.iter().map(|(id, _)| *id).collect();
            let deleted = engine.delete_series(&ids)?;
            Ok(DeleteAnswer {
                dry_run,
                series: deleted.series.iter().map(ToString::to_string).collect(),
                cells_cleared: Some(deleted.cells_cleared),
                raw_points: Some(deleted.raw_points),
            })
        }))
    }

    fn render(
        &self,
        request: RenderRequest,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, Vec<RenderedSeries>> {
        let engine = Arc::clone(&self.engine);
        let cache = Arc::clone(&self.render_cache);
        Box::pin(blocking(move || {
            let source = render::StoredSource::new(CachedStore::new(engine.reader(), &cache));
            let rendered = render::render_stated(&source, &request, &budget)?;
            if let Some(e) = rendered.relative_error {
                read.report.estimated(e);
            }
            read.report.explicit_buckets(rendered.explicit_buckets);
            Ok(rendered.series)
        }))
    }

    fn prometheus(
        &self,
        request: promql::Request,
        limits: promql::QueryLimits,
        _: ReadOptions,
    ) -> BoxFuture<'_, std::result::Result<promql::Reply, promql::QueryError>> {
        let engine = Arc::clone(&self.engine);
        Box::pin(async move {
            let task = tokio::task::spawn_blocking(move || {
                let source = promql::StoredSource::new(engine.reader());
                promql::answer(&source, &request, &limits)
            });
            task.await.unwrap_or_else(|e| {
                Err(promql::QueryError {
                    kind: promql::ErrorKind::Internal,
                    message: format!("query task failed: {e}"),
                })
            })
        })
    }

    fn find(
        &self,
        query: String,
        budget: Arc<ReadBudget>,
        _: ReadOptions,
    ) -> Answer<'_, Vec<FindNode>> {
        let engine = Arc::clone(&self.engine);
        Box::pin(blocking(move || {
            let mut finder = Finder::new(&query)?;
            finder.add_registry(engine.registry(), &budget)?;
            render::add_timer_paths(&engine.reader(), &mut finder, &budget)?;
            Ok(finder.nodes())
        }))
    }

    fn tags(
        &self,
        read: TagRead,
        budget: Arc<ReadBudget>,
        _: ReadOptions,
    ) -> Answer<'_, serde_json::Value> {
        let engine = Arc::clone(&self.engine);
        Box::pin(blocking(move || {
            let timer_paths = read.timer_paths(&engine.reader())?;
            let part = read.part_with(engine.registry(), &timer_paths, &budget)?;
            Ok(read.answer([part]))
        }))
    }

    /// Taken on the blocking pool: the stats wait for the counter table's lock, which a
    /// batch of counter samples holds while it is stored.
    fn stats(&self) -> Answer<'_, EngineStats> {
        let engine = Arc::clone(&self.engine);
        Box::pin(blocking(move || Ok(engine.stats())))
    }

    fn metrics(&self) -> Answer<'_, String> {
        let stats = self.render_cache.stats();
        Box::pin(async move { Ok(super::metrics::render_cache(&stats)) })
    }

    fn routes(&self) -> Router<Arc<State>> {
        Router::new().route(
            "/api/v1/cluster",
            axum::routing::get(|| async {
                ApiError::NotFound(
                    "this server is a single node (start it with --cluster for cluster mode)"
                        .into(),
                )
            }),
        )
    }

    fn close(&self) -> BoxFuture<'_, Result<()>> {
        let engine = Arc::clone(&self.engine);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || engine.flush())
                .await
                .map_err(|e| Error::Poisoned(format!("flush task failed: {e}")))?
        })
    }
}

/// The 404 message for an unknown series: the error, and the series of that name or near
/// names when there are any (the hint the command line gives).
fn unknown_series(engine: &Engine, key: String) -> String {
    let hint = (engine.registry())
        .candidates(&key, &[], crate::registry::SUGGESTIONS)
        .ok()
        .and_then(|found| found.hint());
    let error = Error::UnknownSeries(key);
    match hint {
        Some(hint) => format!("{error}; {hint}"),
        None => error.to_string(),
    }
}
