//! `/metrics` in the Prometheus text exposition format: the engine's counters and per-tier
//! disk use, the server's refusals, connections and batch latency, and the process's own
//! figures and build ([`process`]).

mod process;

use std::collections::BTreeMap;
use std::fmt::Write;

use super::stats::{Protocol, ServerStats, LATENCY_BUCKETS};
use crate::engine::EngineStats;

/// One metric family: its header and sample lines (`suffix{labels} value`).
pub(crate) struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, String)>,
}

impl Family {
    pub(crate) fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    pub(crate) fn sample(
        mut self,
        suffix_and_labels: impl Into<String>,
        value: impl ToString,
    ) -> Family {
        self.samples
            .push((suffix_and_labels.into(), value.to_string()));
        self
    }

    fn per_tier(
        mut self,
        engine: &EngineStats,
        value: impl Fn(&crate::engine::TierStats) -> u64,
    ) -> Family {
        for tier in &engine.tiers {
            self.samples.push((
                format!("{{tier=\"{}\"}}", tier.name),
                value(tier).to_string(),
            ));
        }
        self
    }
}

/// What the raw tier did with accepted samples: stored, or not stored and why (each also
/// landed in the rollups).
fn raw_points(engine: &EngineStats) -> Family {
    let raw = &engine.raw;
    let mut family = Family::new(
        "tierdb_raw_points_total",
        "counter",
        "Accepted samples the raw tier stored (outcome=\"stored\") or did not store, by reason; \
         every one of them landed in the rollup tiers.",
    )
    .sample("{outcome=\"stored\"}", raw.stored);
    for (reason, n) in raw.not_stored() {
        family = family.sample(format!("{{outcome=\"{reason}\"}}"), n);
    }
    family
}

/// Connections open, refused at the limit, closed at the limit to make room and closed by a
/// timeout, per protocol.
fn connections(server: &ServerStats) -> [Family; 4] {
    let mut open = Family::new(
        "tierdb_connections_open",
        "gauge",
        "Connections open now, per protocol.",
    );
    let mut refused = Family::new(
        "tierdb_connections_refused_total",
        "counter",
        "Connections refused because the protocol's connection limit was reached.",
    );
    let mut evicted = Family::new(
        "tierdb_connections_evicted_total",
        "counter",
        "Connections closed at the protocol's connection limit to make room for a new one: \
         the one idle longest.",
    );
    let mut timed_out = Family::new(
        "tierdb_connections_timed_out_total",
        "counter",
        "Connections the server closed on a timeout (idle, header or body), per protocol.",
    );
    for protocol in Protocol::ALL {
        let label = format!("protocol=\"{}\"", protocol.as_str());
        open = open.sample(format!("{{{label}}}"), server.open(protocol));
        refused = refused.sample(format!("{{{label}}}"), server.refused(protocol));
        evicted = evicted.sample(format!("{{{label}}}"), server.evicted(protocol));
        for &timeout in protocol.timeouts() {
            timed_out = timed_out.sample(
                format!("{{{label},timeout=\"{}\"}}", timeout.as_str()),
                server.timed_out(protocol, timeout),
            );
        }
    }
    [open, refused, evicted, timed_out]
}

/// HTTP requests refused for their credential, by the role the endpoint needs and the
/// reason ([`crate::server::auth`]).
fn auth_refusals(server: &ServerStats) -> Family {
    use crate::server::auth::{Refusal, Role};
    let mut family = Family::new(
        "tierdb_http_auth_refused_total",
        "counter",
        "HTTP requests refused: no credential or an unknown one (401), or a token without the \
         endpoint's role (403), by the role needed.",
    );
    for role in Role::ALL {
        for reason in Refusal::ALL {
            family = family.sample(
                format!(
                    "{{role=\"{}\",reason=\"{}\"}}",
                    role.as_str(),
                    reason.as_str()
                ),
                server.auth.refused(role, reason),
            );
        }
    }
    family
}

/// The build (`tierdb_build_info{version="..."} 1`, the convention that lets a query join
/// the version onto any other figure) and the process's CPU, memory, files and start time.
pub(crate) fn render_process() -> String {
    let build = Family::new(
        "tierdb_build_info",
        "gauge",
        "Always 1; the labels say which build of tierdb this is.",
    )
    .sample(format!("{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")), 1);
    write_families(std::iter::once(build).chain(process::families()))
}

/// The HTTP listener's TLS handshakes refused and certificate reloads.
pub(crate) fn render_tls(tls: &crate::server::tls::TlsCounters) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    write_families([
        Family::new(
            "tierdb_tls_handshakes_refused_total",
            "counter",
            "TLS connections closed before a request: plain HTTP on the TLS port, or a failed \
             or timed-out handshake (a client certificate refused, say).",
        )
        .sample("{reason=\"plain_http\"}", tls.plain_http.load(Relaxed))
        .sample("{reason=\"handshake\"}", tls.handshake_failed.load(Relaxed)),
        Family::new(
            "tierdb_tls_reloads_total",
            "counter",
            "Certificate reloads (SIGHUP or a changed file), by result; a failed one keeps the \
             certificate in force.",
        )
        .sample("{result=\"ok\"}", tls.reloads.load(Relaxed))
        .sample("{result=\"failed\"}", tls.reload_failures.load(Relaxed)),
    ])
}

/// Peers refused by each listener's allowlist; nothing when no listener has one.
pub(crate) fn render_allowlists(allowlists: &crate::server::allowlist::Allowlists) -> String {
    use crate::server::allowlist::Listener;
    if !allowlists.any() {
        return String::new();
    }
    let mut family = Family::new(
        "tierdb_peers_refused_total",
        "counter",
        "TCP connections closed and UDP datagrams dropped because the peer's address is not in \
         the listener's allowlist.",
    );
    for listener in Listener::ALL {
        family = family.sample(
            format!("{{listener=\"{}\"}}", listener.as_str()),
            allowlists.refused(listener),
        );
    }
    write_families([family])
}

/// Renders every metric.
pub fn render(engine: &EngineStats, server: &ServerStats) -> String {
    let mut reasons: BTreeMap<&str, u64> = server.rejected();
    for (reason, n) in &engine.rejected {
        *reasons.entry(reason).or_default() += n;
    }
    let mut rejected = Family::new(
        "tierdb_samples_rejected_total",
        "counter",
        "Samples, lines or fields refused, by reason.",
    );
    for (reason, n) in reasons {
        rejected = rejected.sample(format!("{{reason=\"{reason}\"}}"), n);
    }
    let histogram = server.latency();
    let mut latency = Family::new(
        "tierdb_write_batch_seconds",
        "histogram",
        "Time to write one batch into the mapped files.",
    );
    for (bound, count) in LATENCY_BUCKETS.iter().zip(&histogram.cumulative) {
        latency = latency.sample(format!("_bucket{{le=\"{bound}\"}}"), count);
    }
    latency = latency
        .sample("_bucket{le=\"+Inf\"}", histogram.count)
        .sample("_sum", histogram.sum)
        .sample("_count", histogram.count);

    let families = [
        Family::new(
            "tierdb_samples_accepted_total",
            "counter",
            "Samples written into the tiers.",
        )
        .sample("", engine.accepted),
        rejected,
        raw_points(engine),
        Family::new(
            "tierdb_requests_over_budget_total",
            "counter",
            "Reads refused (400) for reading more than a request's read budget.",
        )
        .sample("", server.over_budget()),
        Family::new("tierdb_series", "gauge", "Series registered.").sample("", engine.series),
        Family::new(
            "tierdb_counter_series",
            "gauge",
            "Registered series that are counters (stored as increases).",
        )
        .sample("", engine.counters),
        Family::new(
            "tierdb_tier_files",
            "gauge",
            "Period files on disk per tier.",
        )
        .per_tier(engine, |t| t.disk.files as u64),
        Family::new(
            "tierdb_tier_bytes",
            "gauge",
            "Bytes of period files allocated on disk per tier (hot files are sparse: the \
             pages written and their headers).",
        )
        .per_tier(engine, |t| t.disk.bytes),
        Family::new(
            "tierdb_tier_compacted_files",
            "gauge",
            "Period files held compacted (closed periods, immutable, read with pread) per tier.",
        )
        .per_tier(engine, |t| t.disk.compacted_files as u64),
        Family::new(
            "tierdb_compactions_total",
            "counter",
            "Hot period files replaced by their compacted form, per tier.",
        )
        .per_tier(engine, |t| t.disk.compactions),
        Family::new(
            "tierdb_rehydrations_total",
            "counter",
            "Compacted periods made hot again because a late sample arrived, per tier.",
        )
        .per_tier(engine, |t| t.disk.rehydrations),
        Family::new(
            "tierdb_tier_periods_ahead",
            "gauge",
            "Periods held that start after the current one, per tier.",
        )
        .per_tier(engine, |t| t.disk.periods_ahead as u64),
        Family::new(
            "tierdb_on_demand_creations_total",
            "counter",
            "Period files created because a sample needed one that did not exist, per tier.",
        )
        .per_tier(engine, |t| t.disk.on_demand_creations),
        Family::new(
            "tierdb_dropped_files_total",
            "counter",
            "Period files dropped on leaving retention, per tier.",
        )
        .per_tier(engine, |t| t.disk.dropped),
        Family::new(
            "tierdb_maintenance_failures_total",
            "counter",
            "Rolling-window passes (creating files ahead, dropping expired ones, compacting closed \
             ones) that failed.",
        )
        .sample("", engine.maintenance_failures),
        Family::new(
            "tierdb_maintenance_failing",
            "gauge",
            "1 while the last rolling-window pass failed (writes needing new files are refused).",
        )
        .sample("", u8::from(engine.maintenance_error.is_some())),
        latency,
        auth_refusals(server),
        Family::new(
            "tierdb_name_cache_bytes",
            "gauge",
            "Bytes of series names all connections' caches hold, within the name cache budget.",
        )
        .sample("", server.name_cache_bytes()),
        Family::new(
            "tierdb_name_cache_clears_total",
            "counter",
            "Connections' name caches emptied because the cache or the shared budget was full.",
        )
        .sample("", server.name_cache_clears()),
    ];
    write_families(families.into_iter().chain(connections(server)))
}

/// The render cache's lines: its memory, its bound, and how its reads were answered.
pub(crate) fn render_cache(stats: &crate::read::store::cache::RenderCacheStats) -> String {
    write_families([
        Family::new(
            "tierdb_render_cache_bytes",
            "gauge",
            "Bytes the render cache holds, within tierdb_render_cache_capacity_bytes.",
        )
        .sample("", stats.bytes),
        Family::new(
            "tierdb_render_cache_capacity_bytes",
            "gauge",
            "The bound on the render cache's memory (0: no cache).",
        )
        .sample("", stats.capacity),
        Family::new(
            "tierdb_render_cache_entries",
            "gauge",
            "Paths and one-pass aggregates the render cache holds, one per tier.",
        )
        .sample("", stats.entries),
        Family::new(
            "tierdb_render_cache_reads_total",
            "counter",
            "Render reads through the cache: answered from it alone (hit), partly from it with \
             the buckets that may have changed read from storage (partial), or whole from \
             storage (miss).",
        )
        .sample("{answer=\"hit\"}", stats.hits)
        .sample("{answer=\"partial\"}", stats.partial_hits)
        .sample("{answer=\"miss\"}", stats.misses),
        Family::new(
            "tierdb_render_cache_evictions_total",
            "counter",
            "Entries the render cache dropped to stay within its bound.",
        )
        .sample("", stats.evictions),
    ])
}

/// The exposition text of `families`.
pub(crate) fn write_families(families: impl IntoIterator<Item = Family>) -> String {
    let mut out = String::new();
    for family in families {
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for (suffix, value) in family.samples {
            let _ = writeln!(out, "{}{suffix} {value}", family.name);
        }
    }
    out
}
