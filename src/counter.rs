//! Counters: series whose samples are running totals (bytes sent, requests served). The
//! engine stores the increase since the previous sample instead of the raw value, so every
//! tier's `total` is the increase within the bucket and `per_sec` a true rate.

/// How a series stores its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesKind {
    /// Samples are stored as they come.
    Gauge,
    /// Samples are running totals; the increase since the previous sample is stored.
    Counter,
}
