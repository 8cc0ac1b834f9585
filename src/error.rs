//! The crate's one error type. Every variant carries the context a person needs to act on it:
//! the path for file errors, the file, line and field for configuration errors.

use std::path::PathBuf;

/// Result alias used throughout tierdb.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tierdb.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call on `path` failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// A tiers configuration was refused. `line` is known when the configuration came from a file.
    #[error("{}", config_message(file, *line, field, message))]
    Config {
        /// Where the configuration came from (a path, or a label such as `<builder>`).
        file: String,
        /// 1-based line of the offending key, when known.
        line: Option<usize>,
        /// The field (for example `tier "1m" resolution`).
        field: String,
        /// What is wrong, in a sentence.
        message: String,
    },

    /// A data directory's stored tiers (`<dir>/tiers.toml`, written at its creation) and the
    /// configuration given to open it differ where the files depend on it.
    #[error(
        "{path} records the tiers this data directory was created with, and {given} differs \
         from them where the directory's files depend on them: {differences}. That cannot be \
         applied to the files the directory holds: keep the stored values in {given} (`tierdb \
         tiers --data-dir {dir}` prints them), or start a new --data-dir with the new tiers",
        dir = .path.parent().unwrap_or(std::path::Path::new(".")).display()
    )]
    TiersConflict {
        /// The stored configuration.
        path: PathBuf,
        /// What configured the refused tiers, as the message names it: a tiers file, or
        /// "the given configuration" for an embedder's builder.
        given: String,
        /// Each difference: field, stored value, given value.
        differences: String,
    },

    /// A data file is not a tierdb file of this format version, or is damaged. It is never
    /// mapped or changed.
    #[error("{path}: refused: {reason}")]
    CorruptFile {
        /// The refused file.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },

    /// Another process holds the data directory for writing.
    #[error("data directory {path} is in use by another tierdb process ({holder}); stop it or use another --data-dir")]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// What the lock file says about its holder (pid), or `unknown`.
        holder: String,
    },

    /// A series name or tag set is not acceptable.
    #[error("invalid series {input:?}: {reason}")]
    InvalidSeries {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A query named a series that was never written.
    #[error("unknown series {0:?}")]
    UnknownSeries(String),

    /// A cluster's default read named a series the owner it asked does not have, while it
    /// cannot tell that the series was never written: the partition's replicas were behind
    /// the log, or the log could not be asked (`why`). Answered 404 like
    /// [`Error::UnknownSeries`], saying so.
    #[error(
        "unknown series {series:?} as yet: {why}, so a write of it may not be applied yet; \
         consistency=strong waits for it"
    )]
    UnknownSeriesAsYet {
        /// The series as named.
        series: String,
        /// Why the answer may be behind.
        why: String,
    },

    /// A query named a tier that is not configured.
    #[error("unknown tier {0:?}")]
    UnknownTier(String),

    /// A query's parameters do not make sense (for example `from` after `to`).
    #[error("invalid query: {0}")]
    InvalidQuery(String),

    /// A write was attempted on something opened read-only (`Engine::builder(..).read_only()`).
    #[error("{0} is opened read-only")]
    ReadOnly(PathBuf),

    /// A single sample was refused; batches report refusals in their
    /// [`crate::BatchReport`] instead.
    #[error("sample rejected: {0}")]
    Rejected(RejectReason),

    /// Cluster mode could not join or keep its place in the cluster: the NATS JetStream
    /// server refused or failed a request, or the cluster's fixed settings differ from this
    /// node's. The message names the server or bucket and what was asked.
    #[error("cluster: {0}")]
    Cluster(String),

    /// A security setting was refused: a token, a certificate or key, a CA, an allowlist.
    /// The message names the file or flag and what is wrong with it.
    #[error("{0}")]
    Security(String),

    /// An earlier write, msync or fsync failed, or a writer thread died; the engine refuses
    /// further writes rather than carry on with data it cannot vouch for.
    #[error("engine is poisoned by an earlier failure ({0}); reopen the data directory")]
    Poisoned(String),
}

fn config_message(file: &str, line: Option<usize>, field: &str, message: &str) -> String {
    match line {
        Some(line) => format!("{file}:{line}: {field}: {message}"),
        None => format!("{file}: {field}: {message}"),
    }
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A refusal of the file at `path` for `reason`.
    pub fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::CorruptFile {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// Why a sample was refused. Every refusal is counted under its reason, never dropped silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RejectReason {
    /// The value is NaN or infinite.
    NotFinite,
    /// The timestamp is further past now than the configured `future_bound`.
    TooFarInFuture,
    /// The timestamp is older than every tier's retention window.
    TooOld,
    /// The series id was never handed out by this engine's registry.
    UnknownSeries,
    /// The series name or tags could not be parsed.
    InvalidSeries,
    /// A period file the sample needs could not be created (a full disk, say); the sample
    /// landed in no tier.
    StorageUnavailable,
    /// A counter sample not newer than the counter's last sample: its increase cannot be
    /// known without rewriting what was stored (see `crate::counter`).
    CounterOutOfOrder,
    /// The write declared a kind (gauge or counter) other than the one an earlier write
    /// fixed for the series.
    KindMismatch,
}

impl RejectReason {
    /// Every reason, in a fixed order (the index of a reason's counter).
    pub const ALL: [RejectReason; 8] = [
        RejectReason::NotFinite,
        RejectReason::TooFarInFuture,
        RejectReason::TooOld,
        RejectReason::UnknownSeries,
        RejectReason::InvalidSeries,
        RejectReason::StorageUnavailable,
        RejectReason::CounterOutOfOrder,
        RejectReason::KindMismatch,
    ];

    /// The reason's stable snake_case name, as reported in stats and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::NotFinite => "not_finite",
            RejectReason::TooFarInFuture => "too_far_in_future",
            RejectReason::TooOld => "too_old",
            RejectReason::UnknownSeries => "unknown_series",
            RejectReason::InvalidSeries => "invalid_series",
            RejectReason::StorageUnavailable => "storage_unavailable",
            RejectReason::CounterOutOfOrder => "counter_out_of_order",
            RejectReason::KindMismatch => "kind_mismatch",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
