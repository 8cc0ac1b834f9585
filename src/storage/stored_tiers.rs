//! The tiers configuration stored in a data directory (`<data dir>/tiers.toml`): written
//! atomically at creation (and when a writable open accepts changed tiers), read by every
//! open that is given none. Its form and the comparison with given tiers are
//! [`crate::config`]'s (`TiersConfig::to_toml`, `config::differences`).

use std::path::{Path, PathBuf};

use crate::config::TiersConfig;
use crate::error::Error;
use crate::error::Result;

/// The stored configuration's file name in the data directory.
pub(crate) const STORED_TIERS_FILE: &str = "tiers.toml";

/// The path of the stored configuration in `dir`.
pub(crate) fn stored_path(dir: &Path) -> PathBuf {
    dir.join(STORED_TIERS_FILE)
}

/// Reads the configuration stored in `dir`; `None` when the directory has none (created
/// before tierdb stored it, or not created yet).
///
/// # Errors
/// [`Error::Io`] naming the file when it cannot be read, [`Error::CorruptFile`] naming it,
/// with the line and field, when its content is refused.
pub fn read_stored(dir: &Path) -> Result<Option<TiersConfig>> {
    let path = stored_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => TiersConfig::from_toml_str(&text, &path.display().to_string())
            .map(Some)
            .map_err(|e| {
                Error::corrupt(
                    &path,
                    format!(
                        "the data directory's stored tiers are refused ({e}); restore the \
                         file, or remove it and open once with --tiers naming the tiers the \
                         directory was created with"
                    ),
                )
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Writes `config` as the configuration stored in `dir`, atomically (a temporary file,
/// synced, renamed into place, the directory synced).
///
/// # Errors
/// [`Error::Io`] naming the file.
pub(crate) fn write_stored(dir: &Path, config: &TiersConfig) -> Result<()> {
    crate::storage::disk::write_atomic(&stored_path(dir), config.to_toml().as_bytes())
}
