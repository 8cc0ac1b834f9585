//! Warnings about refused Graphite input, at most one line per reason a minute, naming the
//! peer and an example line. Graphite has no answer to send back, so without them a
//! collector sending milliseconds or NaN was only visible as a counter in `/metrics`; with
//! a warning per refused line, one bad collector could fill the log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The least time between two warnings of one reason.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(60);

/// When each reason was last warned about, and how many refusals of it went unmentioned
/// since; shared by every connection.
#[derive(Default)]
pub(crate) struct RefusalLog {
    reasons: Mutex<HashMap<&'static str, Warned>>,
}

/// One reason's state.
struct Warned {
    at: Instant,
    /// Refusals since `at` that were not warned about.
    quiet: u64,
}

impl RefusalLog {
    /// Logs a warning for `n` refusals of `reason` from `peer`, with `example` (a refused
    /// line, or what was wrong with it), unless one was logged for `reason` within
    /// [`WARN_EVERY`]; then they are only counted, and the next warning says how many.
    pub(crate) fn refused(&self, reason: &'static str, n: u64, peer: SocketAddr, example: &str) {
        let now = Instant::now();
        let quiet = {
            let mut reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
            match reasons.get_mut(reason) {
                Some(warned) if now.duration_since(warned.at) < WARN_EVERY => {
                    warned.quiet += n;
                    return;
                }
                Some(warned) => {
                    let quiet = warned.quiet;
                    *warned = Warned { at: now, quiet: 0 };
                    quiet
                }
                None => {
                    reasons.insert(reason, Warned { at: now, quiet: 0 });
                    0
                }
            }
        };
        tracing::warn!(
            reason,
            %peer,
            example,
            refused = n,
            unlogged_since_last_warning = quiet,
            "refused graphite input (at most one warning per reason a minute; every refusal is counted in tierdb_samples_rejected_total)"
        );
    }
}
