use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A task that panics is made again, and runs to its end; aborting the supervisor stops the
/// task it runs.
#[tokio::test(start_paused = true)]
async fn a_node_task_that_panics_is_started_again_and_aborting_stops_it() {
    let starts = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&starts);
    let ends_after_two_panics = supervised("test", move || {
        let start = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            assert!(start >= 2, "panics on its first two starts");
        }
    });
    ends_after_two_panics.await.unwrap();
    assert_eq!(starts.load(Ordering::SeqCst), 3);

    let (alive, mut dropped) = tokio::sync::mpsc::channel::<()>(1);
    let alive = Arc::new(Mutex::new(Some(alive)));
    let forever = supervised("forever", move || {
        let alive = alive.lock().unwrap().take();
        async move {
            let _alive = alive;
            std::future::pending::<()>().await;
        }
    });
    tokio::task::yield_now().await;
    forever.abort();
    let recv = tokio::time::timeout(Duration::from_secs(5), dropped.recv()).await;
    assert_eq!(
        recv,
        Ok(None),
        "the task's state is dropped with the supervisor"
    );
}
