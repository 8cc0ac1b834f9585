//! Which stored buckets may have changed since a moment: a generation that every completed
//! write advances, and, per recent write, the earliest time it wrote. A cache of answers
//! ([`crate::read::store::cache`]) keeps what it read before that time and reads the rest again,
//! so a late sample is never hidden. It lives on the read side because that is where it is
//! asked; the engine notes every write in it once the write is stored.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::time::Timestamp;

/// How many distinct steps of the earliest-time history are kept; beyond it, older
/// neighbours are merged, which can only make an answer earlier (more read again), never
/// later. The newest half is always exact.
const REMEMBERED: usize = 4_096;

/// The writes since open, by generation.
#[derive(Debug)]
pub(crate) struct WriteLog {
    /// Unique among the write logs of this process: generations count from 0 in each, so a
    /// cache that reads several engines, or an engine reopened in its place (a cluster
    /// partition rebuilt from a peer's copy), tells their generations apart by it.
    id: u64,
    inner: Mutex<Log>,
}

impl Default for WriteLog {
    fn default() -> WriteLog {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        WriteLog {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            inner: Mutex::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Log {
    /// Generation of the last write noted; 0 before any.
    generation: u64,
    /// `(generation, time)`: the earliest time written by the writes after the previous
    /// entry's generation up to this one's, for the writes of that generation and those
    /// before it down to the previous entry. Times strictly increase from front to back, so
    /// the earliest time written after a generation is the time of the first entry past it:
    /// a write whose time is at or before an older entry's makes that entry redundant, and it
    /// is dropped.
    steps: VecDeque<(u64, Timestamp)>,
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
}

impl WriteLog {
    /// Notes a completed write whose earliest sample (or bucket) is at `earliest`
    /// ([`Timestamp::MIN`] for a change of every bucket, such as a series' kind), after its
    /// buckets are stored.
    pub(crate) fn note(&self, earliest: Timestamp) {
        let mut log = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        log.generation += 1;
        let generation = log.generation;
        // Older steps at or after this time tell nothing this one does not.
        while log.steps.back().is_some_and(|&(_, at)| at >= earliest) {
            log.steps.pop_back();
        }
        log.steps.push_back((generation, earliest));
        if log.steps.len() > REMEMBERED {
            // Merge neighbours in the older half, keeping the later generation and the
            // earlier time: a read after a generation inside a merged pair is told the
            // earlier time. The newer half stays exact.
            let half = log.steps.len() / 2;
            let newer = log.steps.split_off(half);
            let older: Vec<(u64, Timestamp)> = log.steps.drain(..).collect();
            log.steps = (older.chunks(2))
                .map(|pair| (pair[pair.len() - 1].0, pair[0].1))
                .chain(newer)
                .collect();
        }
    }

    /// This log's id, unique in the process.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn id(&self) -> u64 {
        self.id
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

    /// What was written after generation `since` (up to now): the earliest time, exact
    /// within the newest half of [`REMEMBERED`] steps, earlier (never later) before them.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn changed_since(&self, since: u64) -> Changed {
        let log = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if since >= log.generation {
            return Changed::Nothing;
        }
        let first_after = log
            .steps
            .partition_point(|&(generation, _)| generation <= since);
        match log.steps.get(first_after) {
            Some(&(_, at)) => Changed::From(at),
            // Unreachable while the last write is kept; said safely all the same.
            None => Changed::From(Timestamp::MIN),
        }
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
        assert_eq!(log.changed_since(moment + 1), Changed::From(300));
        assert_eq!(log.changed_since(moment + 2), Changed::From(1_000));
        assert_eq!(log.changed_since(0), Changed::From(300));
    }

    /// Against the plain minimum over every write, for a long history with late writes:
    /// exact over the recent steps, never later than the truth before them.
    #[test]
    fn a_long_history_is_never_told_later_than_it_was() {
        let log = WriteLog::default();
        let mut written = Vec::new();
        for i in 0..(3 * REMEMBERED as i64) {
            // Mostly the clock's time; every seventh write a late one.
            let at = if i % 7 == 3 { i - 500 } else { i };
            log.note(at);
            written.push(at);
        }
        let len = written.len() as u64;
        for since in (0..len).step_by(97).chain([len - 1, len - 2]) {
            let truth = *written[since as usize..].iter().min().unwrap();
            let Changed::From(told) = log.changed_since(since) else {
                panic!("{since}: nothing");
            };
            assert!(told <= truth, "{since}: told {told}, truth {truth}");
            if since + 1_000 > len {
                assert_eq!(told, truth, "{since}");
            }
        }
        assert!(log.inner.lock().unwrap().steps.len() <= REMEMBERED);
    }
}
