//! The process's own figures under the names Prometheus client libraries give them
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), read from Linux's
//! `/proc`, so a dashboard's process panel built for any exporter works unchanged. Where
//! `/proc` cannot be read (another OS), the figures are left out rather than made up.

use super::Family;

/// What `/proc/self/stat` says, in its own units.
#[derive(Debug, PartialEq)]
struct Stat {
    /// User and system CPU time, clock ticks.
    cpu_ticks: u64,
    /// When the process started, clock ticks after boot.
    start_ticks: u64,
    /// Virtual memory size, bytes.
    virtual_bytes: u64,
    /// Resident set size, pages.
    resident_pages: u64,
}

/// Reads a `/proc/<pid>/stat` line. Its second field (the command name, in parentheses) may
/// hold spaces and parentheses itself, so the fields are counted from the last `)`.
fn parse_stat(line: &str) -> Option<Stat> {
    let (_, rest) = line.rsplit_once(')')?;
    // `rest` starts at field 3 (state): field n is rest's (n - 3)th word.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The boot time (Unix seconds) from `/proc/stat`'s `btime` line.
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The `process_*` families, or none when `/proc` cannot be read.
pub(super) fn families() -> Vec<Family> {
    let Some(stat) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|line| parse_stat(&line))
    else {
        return Vec::new();
    };
    let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
    let page = rustix::param::page_size() as u64;
    let mut families = vec![
        Family::new(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, seconds.",
        )
        .sample("", stat.cpu_ticks as f64 / ticks),
        Family::new(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size, bytes.",
        )
        .sample("", stat.resident_pages * page),
        Family::new(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size, bytes.",
        )
        .sample("", stat.virtual_bytes),
    ];
    if let Some(boot) = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| boot_time(&text))
    {
        families.push(
            Family::new(
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since the Unix epoch, seconds.",
            )
            .sample("", boot as f64 + stat.start_ticks as f64 / ticks),
        );
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        families.push(
            Family::new("process_open_fds", "gauge", "Open file descriptors.")
                .sample("", entries.count()),
        );
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    families.push(
        Family::new(
            "process_max_fds",
            "gauge",
            "The limit on open file descriptors (the soft limit).",
        )
        .sample(
            "",
            limit.map_or_else(|| "+Inf".to_owned(), |n| n.to_string()),
        ),
    );
    families
}

#[cfg(test)]
mod tests {
    use super::{boot_time, parse_stat, Stat};

    #[test]
    fn a_stat_line_is_read_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis of its own.
        let line = "4242 (tier db) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 \
                    9 0 123456 987654321 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 \
                    17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 123456,
                virtual_bytes: 987654321,
                resident_pages: 2048,
            })
        );
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1764979200\nprocesses 9\n"),
            Some(1764979200)
        );
    }

    #[test]
    fn this_process_has_figures() {
        let text = super::super::write_families(super::families());
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(name), "no {name}in\n{text}");
        }
    }
}
