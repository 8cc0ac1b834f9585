//! The `SERVER` file a running server leaves in its data directory: its pid and the
//! addresses it listens on, so a command refused the directory (`tierdb import` while a
//! server holds it) can say where to send the data instead. Written once the sockets are
//! bound, removed at a clean shutdown; one left by a crash is told apart by its pid, which
//! is not the lock holder's.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::error::Result;

/// The file's name in the data directory.
pub(crate) const SERVER_FILE: &str = "SERVER";

/// What a server announces of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Announced {
    /// The server's process id.
    pub pid: u32,
    /// The HTTP API's address.
    pub http: SocketAddr,
    /// The Graphite listener's address (TCP and UDP).
    pub graphite: SocketAddr,
    /// The StatsD listener's address, when on.
    pub statsd: Option<SocketAddr>,
}

impl Announced {
    /// The file's text: one `key value` line each for `pid`, `http`, `graphite` and, when
    /// on, `statsd`.
    pub(crate) fn to_text(&self) -> String {
        let mut text = format!(
            "pid {}\nhttp {}\ngraphite {}\n",
            self.pid, self.http, self.graphite
        );
        if let Some(statsd) = self.statsd {
            let _ = writeln!(text, "statsd {statsd}");
        }
        text
    }

    /// Reads the file's text; `None` when a line is missing or malformed.
    pub(crate) fn parse(text: &str) -> Option<Announced> {
        let field = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
                .map(str::trim)
        };
        Some(Announced {
            pid: field("pid")?.parse().ok()?,
            http: field("http")?.parse().ok()?,
            graphite: field("graphite")?.parse().ok()?,
            statsd: match field("statsd") {
                Some(addr) => Some(addr.parse().ok()?),
                None => None,
            },
        })
    }

    /// Writes the file into `dir`, atomically.
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming the file.
    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
        crate::storage::disk::write_atomic(&path(dir), self.to_text().as_bytes())
    }

    /// The announcement in `dir` by the process `holder` (the pid the directory's lock names);
    /// `None` when there is none, or it is a crashed server's.
    pub(crate) fn read(dir: &Path, holder: u32) -> Option<Announced> {
        let text = std::fs::read_to_string(path(dir)).ok()?;
        Announced::parse(&text).filter(|found| found.pid == holder)
    }
}

/// The file's path in `dir`.
pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(SERVER_FILE)
}

/// Removes the file from `dir` (at a clean shutdown); a missing file is fine.
pub(crate) fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_file(path(dir)) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path(dir).display(), error = %e, "cannot remove the server's address file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Announced;

    #[test]
    fn the_text_reads_back_and_a_crashed_servers_file_is_ignored() {
        let announced = Announced {
            pid: 42,
            http: "127.0.0.1:8080".parse().unwrap(),
            graphite: "[::1]:2003".parse().unwrap(),
            statsd: Some("127.0.0.1:8125".parse().unwrap()),
        };
        assert_eq!(
            Announced::parse(&announced.to_text()),
            Some(announced.clone())
        );
        let without = Announced {
            statsd: None,
            ..announced.clone()
        };
        assert_eq!(Announced::parse(&without.to_text()), Some(without));
        assert_eq!(
            Announced::parse("pid x\nhttp 1.2.3.4:5\ngraphite 1.2.3.4:6\n"),
            None
        );
        let dir = tempfile::tempdir().unwrap();
        announced.write(dir.path()).unwrap();
        assert_eq!(Announced::read(dir.path(), 42), Some(announced));
        assert_eq!(
            Announced::read(dir.path(), 43),
            None,
            "another pid holds the lock"
        );
        super::remove(dir.path());
        assert_eq!(Announced::read(dir.path(), 42), None);
    }
}
