//! A cluster node as the server's [`Backend`]: writes go to the log through the one ingest
//! [`Sink`] over an [`EdgeTarget`], reads fan out to the partitions' owners ([`fanout`]),
//! and the node adds its own endpoints (`/api/v1/cluster`, the peers' partial reads and
//! snapshot copies) and its `/metrics` families. The server knows none of this: it sees the
//! trait.

use std::sync::Arc;

use axum::extract::Json;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::delete_entry;
use super::edge::{self, EdgeTarget, Publisher};
use super::fanout::{self, PartialRequest};
use super::node::Node;
use super::peer::{PARTIAL_PATH, SNAPSHOT_PATH};
use super::promql_source::ClusterStore;
use super::status::Status;
use crate::config::TiersConfig;
use crate::engine::EngineStats;
use crate::error::Result;
use crate::ingest::sink::Sink;
use crate::read::aggregate::{AggregatePlan, AggregateQuery, AggregateResult};
use crate::read::budget::ReadBudget;
use crate::read::distribution::{DistributionPlan, DistributionQuery, DistributionResult};
use crate::read::query::{Query, QueryResult};
use crate::registry::Selector;
use crate::render::tags::TagRead;
use crate::render::{self, FindNode, RenderRequest, RenderedSeries};
use crate::server::backend::{Answer, Backend, ReadOptions};
use crate::server::error::{blocking, ApiError};
use crate::server::metrics::{write_families, Family};
use crate::server::stats::ServerStats;
use crate::server::{DeleteAnswer, Limits, State};
use crate::time::Timestamp;

/// A cluster node behind the server's handlers.
pub(crate) struct NodeBackend {
    node: Arc<Node>,
    /// The publisher every write's sink hands its samples to, made with the first sink.
    publisher: std::sync::OnceLock<Arc<Publisher>>,
}

impl NodeBackend {
    /// The backend of `node`.
    pub(crate) fn new(node: Arc<Node>) -> NodeBackend {
        NodeBackend {
            node,
            publisher: std::sync::OnceLock::new(),
        }
    }
}

impl Backend for NodeBackend {
    fn tiers(&self) -> &TiersConfig {
        self.node.tiers()
    }

    fn now(&self) -> Timestamp {
        self.node.now()
    }

    fn sink(&self, stats: &Arc<ServerStats>, limits: &Limits) -> Sink {
        let shared = stats.sink_shared(limits);
        let publisher = self
            .publisher
            .get_or_init(|| Publisher::new(Arc::clone(&self.node), &shared));
        Sink::new(EdgeTarget::new(Arc::clone(publisher), &shared), &shared)
    }

    fn query(&self, query: Query, read: ReadOptions) -> Answer<'_, QueryResult> {
        Box::pin(async move { Ok(fanout::query(&self.node, query, &read).await?) })
    }

    fn aggregate(
        &self,
        query: AggregateQuery,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, AggregateResult> {
        Box::pin(async move {
            let node = &self.node;
            if !node.tiers().sets.is_empty() {
                return Ok(fanout::aggregate_in_sets(node, query, &budget, &read).await?);
            }
            let plan = AggregatePlan::new(node.tiers(), node.now(), &query)?;
            Ok(fanout::aggregate(node, plan, &budget, &read).await?)
        })
    }

    /// Plans the read from this node's tiers and clock; the owners merge their series'
    /// histograms, and this node merges theirs before it takes the quantiles.
    fn distribution(
        &self,
        query: DistributionQuery,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, DistributionResult> {
        Box::pin(async move {
            let node = &self.node;
            if !node.tiers().sets.is_empty() {
                return Ok(fanout::distribution_in_sets(node, query, &budget, &read).await?);
            }
            let plan = DistributionPlan::new(node.tiers(), node.now(), &query)?;
            Ok(fanout::distribution(node, plan, &budget, &read).await?)
        })
    }

    fn series(&self, selector: Selector, read: ReadOptions) -> Answer<'_, Vec<String>> {
        Box::pin(async move { Ok(fanout::series(&self.node, selector, &read).await?) })
    }

    fn render(
        &self,
        request: RenderRequest,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, Vec<RenderedSeries>> {
        Box::pin(async move {
            let report = read.report.clone();
            let source = render::StoredSource::new(ClusterStore::new(
                Arc::clone(&self.node),
                tokio::runtime::Handle::current(),
                read,
            ));
            let _turn = self.node.render_slot().await;
            let rendered =
                blocking(move || render::render_stated(&source, &request, &budget)).await?;
            if let Some(e) = rendered.relative_error {
                report.estimated(e);
            }
            report.explicit_buckets(rendered.explicit_buckets);
            Ok(rendered.series)
        })
    }

    /// The node evaluates the query; its leaf reads fan out to the partitions' owners
    /// ([`ClusterStore`]), on the blocking pool after a render's turn (an evaluation, like a
    /// render, holds a blocking thread while it waits for the owners).
    fn prometheus(
        &self,
        request: crate::promql::Request,
        limits: crate::promql::QueryLimits,
        read: ReadOptions,
    ) -> BoxFuture<'_, std::result::Result<crate::promql::Reply, crate::promql::QueryError>> {
        Box::pin(async move {
            let source = crate::promql::StoredSource::new(ClusterStore::new(
                Arc::clone(&self.node),
                tokio::runtime::Handle::current(),
                read,
            ));
            let _turn = self.node.render_slot().await;
            tokio::task::spawn_blocking(move || crate::promql::answer(&source, &request, &limits))
                .await
                .map_err(|e| crate::promql::QueryError {
                    kind: crate::promql::ErrorKind::Internal,
                    message: format!("the evaluation task failed: {e}"),
                })?
        })
    }

    fn find(
        &self,
        query: String,
        budget: Arc<ReadBudget>,
        read: ReadOptions,
    ) -> Answer<'_, Vec<FindNode>> {
        Box::pin(async move { Ok(fanout::find(&self.node, query, &budget, &read).await?) })
    }

    fn tags(
        &self,
        read: TagRead,
        budget: Arc<ReadBudget>,
        options: ReadOptions,
    ) -> Answer<'_, serde_json::Value> {
        Box::pin(async move { Ok(fanout::tags(&self.node, read, &budget, &options).await?) })
    }

    /// Lists what `selector` selects across the partitions' owners; unless a dry run,
    /// publishes the deletion as one message holding every partition (retried with its id,
    /// which JetStream stores once) and answers once JetStream acknowledged it. The
    /// owners delete when they apply it, in the partition's order: a read right after the
    /// answer may still list the series, as it may miss a write just acknowledged.
    fn delete(
        &self,
        selector: Selector,
        dry_run: bool,
        read: ReadOptions,
    ) -> Answer<'_, DeleteAnswer> {
        Box::pin(async move {
            let series = fanout::series(&self.node, selector.clone(), &read).await?;
            if dry_run || series.is_empty() {
                return Ok(DeleteAnswer {
                    dry_run,
                    series,
                    ..DeleteAnswer::default()
                });
            }
            let payload = delete_entry::encode(&selector);
            let partitions: Vec<u32> = (0..self.node.partitions()).collect();
            let id = self.node.next_message_id();
            edge::publish(&self.node, &partitions, &id, payload)
                .await
                .map_err(|e| {
                    ApiError::Unavailable(format!(
                        "the deletion was not logged ({e}); send it again"
                    ))
                })?;
            Ok(DeleteAnswer {
                dry_run,
                series,
                ..DeleteAnswer::default()
            })
        })
    }

    fn stats(&self) -> Answer<'_, EngineStats> {
        let node = Arc::clone(&self.node);
        Box::pin(blocking(move || Ok(node.stats())))
    }

    /// The cluster's families, and the render cache of the partitions this node applies.
    fn metrics(&self) -> Answer<'_, String> {
        Box::pin(async move {
            let mut text = render_metrics(&Status::of(&self.node).await?);
            text.push_str(&crate::server::metrics::render_cache(
                &self.node.render_cache().stats(),
            ));
            Ok(text)
        })
    }

    fn routes(&self) -> Router<Arc<State>> {
        let (status, partial, snapshot) = (
            Arc::clone(&self.node),
            Arc::clone(&self.node),
            Arc::clone(&self.node),
        );
        Router::new()
            .route(
                "/api/v1/cluster",
                get(move || cluster_status(Arc::clone(&status))),
            )
            .route(
                PARTIAL_PATH,
                post(move |Json(request): Json<PartialRequest>| {
                    answer_partial(Arc::clone(&partial), request)
                }),
            )
            .route(
                &format!("{SNAPSHOT_PATH}/{{partition}}"),
                get(
                    move |axum::extract::Path(partition): axum::extract::Path<u32>| {
                        send_snapshot(Arc::clone(&snapshot), partition)
                    },
                ),
            )
    }

    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.node.leave())
    }
}

/// `GET /api/v1/cluster`: the nodes, every partition's owners and which one this node reads
/// it from, and the log's last sequence and each owner's lag per partition
/// ([`crate::cluster::status`]).
async fn cluster_status(node: Arc<Node>) -> std::result::Result<Response, ApiError> {
    Ok(Json(Status::of(&node).await?).into_response())
}

/// `POST /internal/v1/partial`: a peer's fan-out read over partitions this node applies.
async fn answer_partial(
    node: Arc<Node>,
    request: PartialRequest,
) -> std::result::Result<Response, ApiError> {
    Ok(Json(fanout::answer_locally(&node, request).await?).into_response())
}

/// `GET /internal/v1/snapshot/<partition>`: a copy of the files of a partition this node
/// applies, for a peer that rebuilds its own ([`crate::cluster::snapshot`]), read from a
/// local copy as the peer takes it.
async fn send_snapshot(node: Arc<Node>, partition: u32) -> std::result::Result<Response, ApiError> {
    use tokio::io::AsyncReadExt;
    let (file, info) = node.snapshot(partition).await?;
    let len = file
        .metadata()
        .map_err(|e| crate::error::Error::io(format!("the copy of partition {partition}"), e))?
        .len();
    tracing::info!(
        partition,
        applied = info.applied,
        bytes = len,
        "sending a copy of a partition"
    );
    let file = tokio::fs::File::from_std(file);
    // Ends at the end of the file, or after the first read error (the peer then sees a body
    // shorter than its length, and refuses it).
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut chunk = vec![0u8; 1 << 16];
        match file.read(&mut chunk).await {
            Ok(0) => None,
            Ok(n) => {
                chunk.truncate(n);
                Some((Ok(Bytes::from(chunk)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, len.to_string()),
        ],
        axum::body::Body::from_stream(chunks),
    )
        .into_response())
}

/// A cluster node's view of the cluster, after the server's families (`crate::server::metrics`) (which on a cluster
/// node add up the partitions it applies): nodes alive, and per partition the log's last
/// sequence and each holder's applied sequence and lag.
fn render_metrics(status: &Status) -> String {
    let alive = status.nodes.iter().filter(|n| n.alive).count();
    let mut last = Family::new(
        "tierdb_cluster_log_last_sequence",
        "gauge",
        "Sequence of each partition's last message in the log.",
    );
    let mut applied = Family::new(
        "tierdb_cluster_applied_sequence",
        "gauge",
        "Last log sequence each lease holder applied, per partition.",
    );
    let mut lag = Family::new(
        "tierdb_cluster_lag_sequences",
        "gauge",
        "The log's last sequence minus what each lease holder applied, per partition (0 when \
         caught up).",
    );
    let mut served = 0;
    for p in &status.partitions {
        served += usize::from(p.serving.is_some());
        last = last.sample(
            format!("{{partition=\"{}\"}}", p.partition),
            p.last_sequence,
        );
        for r in &p.replicas {
            let labels = format!("{{partition=\"{}\",node=\"{}\"}}", p.partition, r.node);
            applied = applied.sample(labels.clone(), r.applied);
            lag = lag.sample(labels, r.lag);
        }
    }
    write_families([
        Family::new(
            "tierdb_cluster_nodes",
            "gauge",
            "Nodes with a heartbeat, by liveness.",
        )
        .sample("{state=\"alive\"}", alive)
        .sample("{state=\"dead\"}", status.nodes.len() - alive),
        Family::new(
            "tierdb_cluster_partitions_served",
            "gauge",
            "Partitions this node can read from a live owner.",
        )
        .sample("", served),
        Family::new(
            "tierdb_cluster_partitions",
            "gauge",
            "Partitions of the cluster.",
        )
        .sample("", status.partitions.len()),
        Family::new(
            "tierdb_cluster_rebuilds_total",
            "counter",
            "Partitions this node rebuilt from a live replica's files since it started.",
        )
        .sample("", status.rebuilds.len()),
        Family::new(
            "tierdb_cluster_partitions_ahead_of_log",
            "gauge",
            "Partitions this node applied past the log's last sequence: the log went back, and \
             messages at sequences it holds as applied would be skipped.",
        )
        .sample("", status.ahead_of_log.len()),
        last,
        applied,
        lag,
    ])
}
