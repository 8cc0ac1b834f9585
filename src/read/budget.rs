//! A read's budget: the most values one request may read, charged by every part of it. A
//! render charges each path it fetches (series matched times points) and each `summarize`
//! window; an aggregate the cells it folds (series times buckets); a `/metrics/find` each
//! node it answers. The budget is per request, so many `target`s, or one target naming the
//! same pattern many times, share it instead of multiplying it.

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::Error;
use crate::error::Result;

/// The default budget: 10 million values, ten times the most points one query may return
/// ([`crate::read::query::MAX_QUERY_POINTS`]); 10 M buckets are 320 MB.
pub(crate) const DEFAULT_READ_VALUES: u64 = 10_000_000;

/// What one request may still read. Shared by reference between the parts of a request (and
/// the threads reading for it), so its counters are atomic.
#[derive(Debug)]
pub struct ReadBudget {
    limit: u64,
    used: AtomicU64,
    exceeded: AtomicBool,
}

impl ReadBudget {
    /// A budget of `limit` values.
    pub fn new(limit: u64) -> ReadBudget {
        ReadBudget {
            limit,
            used: AtomicU64::new(0),
            exceeded: AtomicBool::new(false),
        }
    }

    /// A budget that never refuses, for reads whose caller bounds them another way.
    pub fn unlimited() -> ReadBudget {
        ReadBudget::new(u64::MAX)
    }

    /// Takes `values` from the budget before they are read. `what` describes them for the
    /// refusal ("\"a.*\" matches 20 series x 2016 points").
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] starting `read budget:` when `values` would take the request
    /// past its limit; nothing is taken then, and [`ReadBudget::exceeded`] is set.
    pub fn charge(&self, values: u128, what: impl FnOnce() -> String) -> Result<()> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let total = u128::from(used).saturating_add(values);
            if total > u128::from(self.limit) {
                self.exceeded.store(true, Ordering::Relaxed);
                let before = if used > 0 {
                    format!(" on top of the {used} this request already read")
                } else {
                    String::new()
                };
                return Err(Error::InvalidQuery(format!(
                    "read budget: {} = {values} values{before}; a request may read at most {} \
                     (narrow the patterns, use fewer targets, fewer points or a coarser tier)",
                    what(),
                    self.limit
                )));
            }
            match self.used.compare_exchange_weak(
                used,
                total as u64,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// Takes a registry scan over `keys` keys (a value each) from the budget, before the
    /// scan runs: many paths on a large registry cost their scans even when they match
    /// nothing.
    ///
    /// # Errors
    /// As [`ReadBudget::charge`].
    pub fn charge_scan(&self, keys: usize) -> Result<()> {
        self.charge(keys as u128, || format!("a scan of the {keys} series"))
    }

    /// Values taken so far.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit this budget was made with.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Records that a part of this request read elsewhere (a cluster owner reading within
    /// what this budget had left) was refused by its budget, so [`ReadBudget::exceeded`]
    /// tells the server the request failed because of its budget.
    pub fn note_exceeded(&self) {
        self.exceeded.store(true, Ordering::Relaxed);
    }

    /// Whether a charge was refused: the request failed because of its budget.
    pub fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }
}

impl Default for ReadBudget {
    /// `DEFAULT_READ_VALUES`.
    fn default() -> Self {
        ReadBudget::new(DEFAULT_READ_VALUES)
    }
}
