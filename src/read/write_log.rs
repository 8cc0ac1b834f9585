//! Which stored buckets may have changed since a moment: a generation that every completed
//! write advances, and, per recent write, the earliest time it wrote. A cache of answers
//! ([`crate::render::cache`]) keeps what it read before that time and reads the rest again,
//! so a late sample is never hidden. It lives on the read side because that is where it is
//! asked; the engine notes every write in it once the write is stored.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::time::Timestamp;

/// How many recent writes are remembered; a reader whose moment is older than all of them
/// is told that anything may have changed.
const REMEMBERED: usize = 65_536;

/// The writes since open, by generation.
#[derive(Debug, Default)]
pub(crate) struct WriteLog {
    inner: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    /// Generation of the last write noted; 0 before any.
    generation: u64,
    /// `(generation, earliest time written)` of the last [`REMEMBERED`] writes, oldest first.
    recent: VecDeque<(u64, Timestamp)>,
}

/// What changed after a generation.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Changed {
    /// Nothing was written.
    Nothing,
    /// Writes stored samples at this time and later only: buckets ending at or before it are
    /// as they were.
    From(Timestamp),
    /// Too long ago to tell: anything may have changed.
    Unknown,
}

impl WriteLog {
    /// Notes a completed write whose earliest sample (or bucket) is at `earliest`
    /// ([`Timestamp::MIN`] for a change of every bucket, such as a series' kind), after its
    /// buckets are stored.
    pub(crate) fn note(&self, earliest: Timestamp) {
        let mut log = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        log.generation += 1;
        let generation = log.generation;
        if log.recent.len() == REMEMBERED {
            log.recent.pop_front();
        }
        log.recent.push_back((generation, earliest));
    }

    /// The generation now: everything noted up to it is stored, so a read begun after this
    /// call sees it.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn generation(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generation
    }

    /// What was written after generation `since` (up to now).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn changed_since(&self, since: u64) -> Changed {
        let log = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if since >= log.generation {
            return Changed::Nothing;
        }
        // Every generation after `since` must still be remembered.
        match log.recent.front() {
            Some(&(oldest, _)) if oldest <= since + 1 => {}
            _ => return Changed::Unknown,
        }
        let earliest = (log.recent.iter().rev())
            .take_while(|&&(generation, _)| generation > since)
            .map(|&(_, at)| at)
            .min();
        earliest.map_or(Changed::Nothing, Changed::From)
    }
}

#[cfg(test)]
mod tests {
    use super::{Changed, WriteLog, REMEMBERED};

    #[test]
    fn earliest_write_after_a_generation() {
        let log = WriteLog::default();
        assert_eq!(log.changed_since(0), Changed::Nothing);
        log.note(500);
        let moment = log.generation();
        assert_eq!(log.changed_since(moment), Changed::Nothing);
        log.note(900);
        log.note(300);
        log.note(1_000);
        assert_eq!(log.changed_since(moment), Changed::From(300));
        assert_eq!(log.changed_since(moment + 2), Changed::From(1_000));
        assert_eq!(log.changed_since(0), Changed::From(300));
        for _ in 0..REMEMBERED {
            log.note(2_000);
        }
        assert_eq!(log.changed_since(moment), Changed::Unknown);
        assert_eq!(
            log.changed_since(log.generation() - 1),
            Changed::From(2_000)
        );
    }
}
