//! Buckets set whole by an import of another tool's rollups (`tierdb import --format
//! whisper|rrd`): absolute values rather than samples folded in, so importing the same data
//! again changes nothing.

use super::Engine;
use crate::bucket::Bucket;
use crate::error::Result;
use crate::storage::cells::CellAt;

impl Engine {
    /// Sets `cells` to absolute buckets, creating the period files they need (see
    /// [`Storage::import_cells`](crate::storage::Storage::import_cells)). Durable with the
    /// next [`Engine::flush`] or [`Engine::close`]. Returns how many cells changed. Only valid
    /// while no batch and no read of these cells runs: an import holding the directory alone.
    ///
    /// # Errors
    /// [`Error::ReadOnly`](crate::Error::ReadOnly), [`Error::Poisoned`](crate::Error::Poisoned),
    /// and as [`Storage::import_cells`](crate::storage::Storage::import_cells).
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) fn import_cells(&self, cells: &[(CellAt, Bucket)]) -> Result<usize> {
        self.check_writable()?;
        self.shared.check_poison()?;
        let changed = self.shared.storage.import_cells(cells);
        self.shared.write_log.note(crate::time::Timestamp::MIN);
        changed
    }
}
