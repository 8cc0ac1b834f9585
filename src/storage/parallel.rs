//! File work spread over a few threads: creating or opening period files is mostly waiting
//! on the disk (an fsync, a header read, a mapping), so several at once overlap their waits
//! even on two cores. Used by the group creation of new files, by the open, and by a batch's
//! reservation of new pages (`engine::admission`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::Result;

/// `work` applied to every item on up to `threads` scoped threads; results in item order.
pub(crate) fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    work: impl Fn(&T) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    let threads = items.len().min(threads);
    if threads <= 1 {
        return items.iter().map(&work).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<R>>>> =
        Mutex::new(std::iter::repeat_with(|| None).take(items.len()).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let result = work(item);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every item was taken by a thread"))
        .collect()
}
