//! The chunk creator: a thread that creates the files a new chunk of series needs now (every
//! tier's current period, and a next one starting within two minutes) as soon as series
//! registration calls for them, so the thread registering series (an import's parser, a
//! connection) never waits for files to be preallocated and synced. The next periods' files
//! come from the next maintenance pass, paced.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;

use super::maintenance::Horizon;
use super::Shared;
use crate::error::Error;
use crate::error::Result;

/// The chunk creator's thread; stops (and is joined) when dropped.
pub(crate) struct ChunkCreator {
    wake: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl ChunkCreator {
    /// Starts the thread; it sleeps until [`ChunkCreator::wake`].
    pub(crate) fn start(shared: &Arc<Shared>) -> Result<ChunkCreator> {
        // One wake-up waiting is enough: a pass creates for every series registered by the
        // time it starts, and a series registered after that wakes it again.
        let (wake, woken) = crossbeam_channel::bounded::<()>(1);
        let shared_for_thread = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name("tierdb-creator".into())
            .spawn(move || {
                for () in woken.iter() {
                    let shared = &shared_for_thread;
                    if let Err(e) = shared.prepare_ahead_at(shared.clock.now(), Horizon::Soon) {
                        tracing::error!(error = %e, "cannot create files ahead for new series; maintenance retries");
                    }
                }
            })
            .map_err(|e| Error::io(&shared.dir, e))?;
        Ok(ChunkCreator {
            wake: Some(wake),
            handle: Some(handle),
        })
    }

    /// Asks for a pass; returns at once.
    pub(crate) fn wake(&self) {
        if let Some(wake) = &self.wake {
            let _ = wake.try_send(());
        }
    }
}

impl Drop for ChunkCreator {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
