//! What a read learned about its own completeness, carried to the answer. A single node
//! reads what it has acknowledged, always whole. A cluster node's default read takes each
//! partition from its most caught-up live replica, and that replica may not yet have applied
//! every write the log acknowledged (it is catching up after a restart, or applying a burst):
//! the answer then says so, so that a short count never passes for a dip that did not
//! happen. JSON objects get a `behind` field; every read answer gets the
//! [`BEHIND_HEADER`] header (Graphite's `/render` included, whose JSON is an array).
//!
//! A read whose answer holds estimates (a `/render` of StatsD timer paths' percentiles,
//! taken from histograms) says so too: the [`RELATIVE_ERROR_HEADER`] header states their
//! bound, as a distribution query's `relative_error` field does.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Json, Response};
use serde::Serialize;

/// The response header of a read that may lack acknowledged writes: `partitions=3,7` (the
/// partitions read from a replica behind the log) or `unknown` (the log could not be asked).
pub const BEHIND_HEADER: &str = "x-tierdb-behind";

/// The response header of an answer holding estimates: the largest relative error of the
/// histograms they were taken from (`0.0054...`), each estimate within it of what it stands
/// for.
pub const RELATIVE_ERROR_HEADER: &str = "x-tierdb-relative-error";

/// The response header of an answer holding estimates taken from series whose values were
/// placed from explicit buckets (OTLP explicit-bucket histograms): how many such series,
/// each estimate of theirs within an explicit bucket's width rather than within
/// [`RELATIVE_ERROR_HEADER`]'s bound.
pub const EXPLICIT_BUCKETS_HEADER: &str = "x-tierdb-explicit-buckets";

/// One partition read from a replica that had not applied the log's last message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    /// The partition.
    pub partition: u32,
    /// The last log sequence the answering replica had applied.
    pub applied: u64,
    /// The partition's last log sequence when the read ran.
    pub log: u64,
}

impl PartitionLag {
    /// Log sequences past the applied one (other partitions' messages included: the log is
    /// one stream).
    fn gap(&self) -> u64 {
        self.log.saturating_sub(self.applied)
    }
}

/// How a read may fall short of every acknowledged write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Behind {
    /// The partitions read from a replica behind the log, in partition order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionLag>,
    /// Why completeness could not be checked (the log did not answer), if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

impl Behind {
    /// Nothing known to be missing.
    pub fn is_complete(&self) -> bool {
        self.partitions.is_empty() && self.unknown.is_none()
    }

    /// Adds what another fan-out of the same request found: a partition seen behind twice
    /// keeps the larger gap.
    fn merge(&mut self, other: Behind) {
        for lag in other.partitions {
            match self
                .partitions
                .iter_mut()
                .find(|l| l.partition == lag.partition)
            {
                Some(seen) if seen.gap() >= lag.gap() => {}
                Some(seen) => *seen = lag,
                None => self.partitions.push(lag),
            }
        }
        self.partitions.sort_by_key(|l| l.partition);
        if self.unknown.is_none() {
            self.unknown = other.unknown;
        }
    }

    /// The [`BEHIND_HEADER`] value.
    fn header_value(&self) -> String {
        if self.partitions.is_empty() {
            return "unknown".into();
        }
        let partitions: Vec<String> = self
            .partitions
            .iter()
            .map(|l| l.partition.to_string())
            .collect();
        format!("partitions={}", partitions.join(","))
    }
}

/// Shared by a request's handler and the backend that reads for it: the backend records
/// what it found ([`ReadReport::record`]); the handler puts it into the answer
/// (`ReadReport::json`, `ReadReport::mark`). Clones share one record.
#[derive(Clone, Debug, Default)]
pub struct ReadReport {
    behind: Arc<Mutex<Behind>>,
    /// The largest relative error of the estimates in the answer, if it holds any.
    relative_error: Arc<Mutex<Option<f64>>>,
    /// Series behind the estimates whose values were placed from explicit buckets.
    explicit_buckets: Arc<Mutex<usize>>,
}

impl ReadReport {
    /// Adds what one fan-out found.
    pub fn record(&self, behind: Behind) {
        if !behind.is_complete() {
            self.behind
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .merge(behind);
        }
    }

    /// What was recorded.
    pub fn behind(&self) -> Behind {
        (self.behind.lock().unwrap_or_else(|e| e.into_inner())).clone()
    }

    /// Records that the answer holds estimates within `relative_error` of what they stand
    /// for (the largest recorded is stated).
    pub fn estimated(&self, relative_error: f64) {
        let mut stated = self
            .relative_error
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *stated = Some(stated.map_or(relative_error, |r| r.max(relative_error)));
    }

    /// Records that `series` of the series behind the answer's estimates hold values placed
    /// from explicit buckets, whose error `relative_error` does not bound.
    pub fn explicit_buckets(&self, series: usize) {
        *self
            .explicit_buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += series;
    }

    /// The relative error recorded, if the answer holds estimates.
    pub fn relative_error(&self) -> Option<f64> {
        *self
            .relative_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `body` as JSON with a `behind` field when the read may lack acknowledged writes (a
    /// body that is not an object gets the header only), and the header.
    pub(crate) fn json(&self, body: impl Serialize) -> Response {
        let behind = self.behind();
        if behind.is_complete() {
            return Json(body).into_response();
        }
        let mut value = serde_json::to_value(body).unwrap_or(serde_json::Value::Null);
        if let (Some(object), Ok(field)) = (value.as_object_mut(), serde_json::to_value(&behind)) {
            object.insert("behind".into(), field);
        }
        self.mark(Json(value).into_response())
    }

    /// `response` with the [`BEHIND_HEADER`] when the read may lack acknowledged writes, the
    /// [`RELATIVE_ERROR_HEADER`] when it holds estimates, and the [`EXPLICIT_BUCKETS_HEADER`]
    /// when some of them come from explicit buckets.
    pub(crate) fn mark(&self, mut response: Response) -> Response {
        if let Some(e) = self.relative_error() {
            if let Ok(value) = HeaderValue::from_str(&e.to_string()) {
                response
                    .headers_mut()
                    .insert(HeaderName::from_static(RELATIVE_ERROR_HEADER), value);
            }
        }
        let explicit = *self
            .explicit_buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if explicit > 0 {
            response.headers_mut().insert(
                HeaderName::from_static(EXPLICIT_BUCKETS_HEADER),
                HeaderValue::from(explicit),
            );
        }
        let behind = self.behind();
        if !behind.is_complete() {
            if let Ok(value) = HeaderValue::from_str(&behind.header_value()) {
                response
                    .headers_mut()
                    .insert(HeaderName::from_static(BEHIND_HEADER), value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lag(partition: u32, applied: u64, log: u64) -> PartitionLag {
        PartitionLag {
            partition,
            applied,
            log,
        }
    }

    #[test]
    fn fan_outs_of_one_request_add_up_and_keep_the_larger_gap() {
        let report = ReadReport::default();
        report.record(Behind::default());
        assert!(report.behind().is_complete());
        report.record(Behind {
            partitions: vec![lag(7, 10, 12), lag(3, 5, 9)],
            unknown: None,
        });
        report.clone().record(Behind {
            partitions: vec![lag(3, 8, 9), lag(7, 10, 20)],
            unknown: None,
        });
        let behind = report.behind();
        assert_eq!(behind.partitions, vec![lag(3, 5, 9), lag(7, 10, 20)]);
        assert_eq!(behind.header_value(), "partitions=3,7");
    }

    #[test]
    fn estimates_state_the_largest_error_recorded() {
        let report = ReadReport::default();
        let exact = report.mark(Json(serde_json::json!([])).into_response());
        assert!(exact.headers().get(RELATIVE_ERROR_HEADER).is_none());
        report.estimated(0.0054);
        report.clone().estimated(0.011);
        report.estimated(0.002);
        assert_eq!(report.relative_error(), Some(0.011));
        let marked = report.mark(Json(serde_json::json!([])).into_response());
        assert_eq!(marked.headers()[RELATIVE_ERROR_HEADER], "0.011");
        assert!(marked.headers().get(BEHIND_HEADER).is_none());
    }

    #[test]
    fn an_unanswered_log_is_said_and_a_complete_answer_is_left_alone() {
        let report = ReadReport::default();
        let plain = report.json(serde_json::json!({"series": ["a"]}));
        assert!(plain.headers().get(BEHIND_HEADER).is_none());
        report.record(Behind {
            partitions: Vec::new(),
            unknown: Some("the log did not answer".into()),
        });
        let marked = report.json(serde_json::json!({"series": ["a"]}));
        assert_eq!(marked.headers()[BEHIND_HEADER], "unknown");
    }
}
