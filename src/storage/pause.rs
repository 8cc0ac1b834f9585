//! A place in a storage operation where a test holds it, to land another thread's work in a
//! window that is otherwise microseconds wide.

use std::sync::{Arc, Barrier, Mutex};

/// Unset, [`PausePoint::pass`] does nothing. Once [`PausePoint::arm`]ed, the operation that
/// passes waits for the test twice: once to say it got there, once to be let go.
#[derive(Default)]
pub(crate) struct PausePoint(Mutex<Option<Arc<Barrier>>>);

impl PausePoint {
    /// Arms the point; the test waits on the barrier returned, twice, as the operation does.
    pub(crate) fn arm(&self) -> Arc<Barrier> {
        let barrier = Arc::new(Barrier::new(2));
        *self.0.lock().unwrap() = Some(Arc::clone(&barrier));
        barrier
    }

    /// Where the operation passes.
    pub(crate) fn pass(&self) {
        let armed = self.0.lock().unwrap().clone();
        if let Some(barrier) = armed {
            barrier.wait();
            barrier.wait();
        }
    }
}
