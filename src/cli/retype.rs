//! `tierdb retype`: makes the series a selector selects gauges or counters, converting their
//! stored buckets where that is exact, or says with `--dry-run` what it would do. What is
//! exact, and what a crash leaves, is `Engine::retype`'s.

use clap::{Args, ValueEnum};

use super::{engine_builder, open_reader, print, Location, TagFilters};
use crate::counter::SeriesKind;
use crate::engine::{RetypeOutcome, Retyped};
use crate::error::Error;

/// Makes series gauges or counters, converting their stored buckets where that is exact.
///
/// A bucket keeps count, total, min, max and its latest sample; the other kind needs each
/// sample (a counter each one's increase since the one before). A bucket converts exactly
/// when its samples are known one by one: it holds one sample and keeps it, or a finer tier
/// holds each of them so. A series converts whole or not at all: where any bucket in any
/// tier is not exact, it is refused, naming the finest tier's earliest such bucket and why.
#[derive(Args, Debug)]
#[command(mut_arg("tags", |arg| arg.help(
    "Only series with this tag (k=v), or without it (k!=v); repeatable; the value may be a glob (host=web-*)"
)))]
#[command(
    after_help = "Run it on a stopped data directory (it rewrites stored buckets); --dry-run \
                  works beside a running server. Not in cluster mode.\n\n\
                  A counter stores no increase for its first sample (its baseline): a gauge made \
                  a counter stores none for its first, and a counter made a gauge begins at \
                  its second.\n\nExamples:\n  tierdb retype 'servers.*.nginx.requests' --kind \
                  counter --dry-run\n  tierdb retype 'servers.*.nginx.requests' --kind counter"
)]
pub struct RetypeArgs {
    /// Glob over the series name, optionally with tag filters: `cpu.*{host=old-*}`.
    selector: String,
    /// The kind the series are to have.
    #[arg(long, value_enum)]
    kind: Kind,
    #[command(flatten)]
    filters: TagFilters,
    /// Say what would be converted and what refused, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Let a selector that takes every name (`*`, without a tag filter) retype every series.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    location: Location,
}

/// The kinds a series can be retyped as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// Samples are running totals, stored as increases.
    Counter,
    /// Samples are stored as they come.
    Gauge,
}

/// Prints one line a series (converted, already of the kind, or refused and why) and a
/// summary on stderr. Fails when a series was refused, when the selector selects nothing,
/// and when the directory is held by a server or is a cluster node's.
pub(super) fn run(args: RetypeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let selector = args.filters.selector(&args.selector)?;
    if selector.takes_every_name() && !args.all {
        return Err(format!(
            "'{selector}' selects every series; add --all to retype them all (or narrow it, \
             e.g. --tag job=nginx)"
        )
        .into());
    }
    let location = &args.location;
    let dir = &location.data_dir;
    if dir.join("partitions").is_dir() {
        return Err(format!(
            "{} is a cluster node's data directory: retype is not supported in cluster mode \
             (a partition's replicas apply one log, and retyping one would part them)",
            dir.display()
        )
        .into());
    }
    let engine = if args.dry_run {
        open_reader(location)?
    } else {
        match engine_builder(dir, location.tiers.as_deref())?.open() {
            Err(Error::Locked { holder, .. }) => {
                return Err(format!(
                    "{} is held by a running tierdb ({holder}): stop it first, since retype \
                     rewrites stored buckets (--dry-run works beside it)",
                    dir.display()
                )
                .into())
            }
            other => other?,
        }
    };
    let picked = super::series::select_some(&engine, &selector)?;
    let kind = match args.kind {
        Kind::Counter => SeriesKind::Counter,
        Kind::Gauge => SeriesKind::Gauge,
    };
    let ids: Vec<_> = picked.iter().map(|(id, _)| *id).collect();
    let report = engine.retype(&ids, kind, args.dry_run)?;
    if !args.dry_run {
        engine.close()?;
    }
    let text: String = (report.iter())
        .map(|r| describe(r, kind, args.dry_run) + "\n")
        .collect();
    print(&text)?;
    let count = |f: fn(&RetypeOutcome) -> bool| report.iter().filter(|r| f(&r.outcome)).count();
    let converted = count(|o| matches!(o, RetypeOutcome::Converted { .. }));
    let refused = count(|o| matches!(o, RetypeOutcome::Refused(_)));
    let already = count(|o| *o == RetypeOutcome::Already);
    let (verb, tail) = match args.dry_run {
        true => ("would convert", " (dry run: nothing changed)"),
        false => ("converted", ""),
    };
    eprintln!(
        "tierdb: {verb} {converted} series to {}s, refused {refused}, {already} already \
         {}s{tail}",
        kind.as_str(),
        kind.as_str()
    );
    if refused > 0 {
        return Err(format!(
            "{refused} series refused: their buckets do not convert exactly (see each line)"
        )
        .into());
    }
    Ok(())
}

/// One series' line: `KEY: gauge -> counter: 12 buckets rewritten (1m 10, 5m 2); NOTE`,
/// `KEY: already a counter`, or `KEY: refused: WHY`.
fn describe(retyped: &Retyped, kind: SeriesKind, dry_run: bool) -> String {
    let key = &retyped.series;
    let from = retyped.from.as_str();
    match &retyped.outcome {
        RetypeOutcome::Already => format!("{key}: already a {}", kind.as_str()),
        RetypeOutcome::Refused(why) => {
            format!(
                "{key}: refused ({from}, not made a {}): {why}",
                kind.as_str()
            )
        }
        RetypeOutcome::Converted { buckets, notes } => {
            let total: usize = buckets.iter().map(|(_, n)| n).sum();
            let tiers: Vec<String> = (buckets.iter())
                .filter(|(_, n)| *n > 0)
                .map(|(tier, n)| format!("{tier} {n}"))
                .collect();
            let verb = if dry_run {
                "would be rewritten"
            } else {
                "rewritten"
            };
            let mut line = format!("{key}: {from} -> {}: {total} buckets {verb}", kind.as_str());
            if !tiers.is_empty() {
                line.push_str(&format!(" ({})", tiers.join(", ")));
            }
            for note in notes {
                line.push_str(&format!("; {note}"));
            }
            line
        }
    }
}
