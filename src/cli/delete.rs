//! `tierdb delete`: deletes the series a selector selects, or lists them with `--dry-run`.
//! The selector is `tierdb series`'s; what a deletion does on disk is `Engine::delete_series`.

use clap::Args;

use super::{engine_builder, open_reader, print, Location, TagFilters};
use crate::error::Error;
use crate::server::announce::Announced;

/// Deletes series: their names, and their data in every tier.
///
/// A later sample of a deleted name starts a new series, with none of the old data.
#[derive(Args, Debug)]
#[command(mut_arg("tags", |arg| arg.help(
    "Only series with this tag (k=v), or without it (k!=v); repeatable; the value may be a glob (host=web-*)"
)))]
#[command(
    after_help = "The selector is the one `tierdb series` takes: list what it selects first \
                  (or use --dry-run).\n\nExamples:\n  tierdb delete 'web.requests.cuont' --dry-run\n  \
                  tierdb delete 'cpu.*{host=old-*}'\n  tierdb delete '*' --tag host=retired-1\n\n\
                  While a server holds the data directory, delete through it:\n  \
                  curl -g -X DELETE 'http://127.0.0.1:8080/api/v1/series?match=cpu.*{host=old-*}'"
)]
pub struct DeleteArgs {
    /// Glob over the series name, optionally with tag filters: `cpu.*{host=old-*}`.
    selector: String,
    #[command(flatten)]
    filters: TagFilters,
    /// List the series that would be deleted, and delete nothing (works beside a running
    /// server).
    #[arg(long)]
    dry_run: bool,
    /// Let a selector that takes every name (`*`, without a tag filter) delete every series.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    location: Location,
}

/// Prints the keys deleted (or, on a dry run, that would be), one a line, and a summary on
/// stderr. Fails with "no series match" and the nearest names when the selector selects
/// nothing, and when the directory is held by a server (naming its HTTP endpoint).
pub(super) fn run(args: DeleteArgs) -> Result<(), Box<dyn std::error::Error>> {
    let selector = args.filters.selector(&args.selector)?;
    if selector.takes_every_name() && !args.all {
        return Err(format!(
            "'{selector}' selects every series; add --all to delete them all (or narrow it, \
             e.g. --tag host=old-1)"
        )
        .into());
    }
    let location = &args.location;
    let engine = if args.dry_run {
        open_reader(location)?
    } else {
        match engine_builder(&location.data_dir, location.tiers.as_deref())?.open() {
            Err(Error::Locked { holder, .. }) => {
                return Err(held_by_server(&location.data_dir, &holder, &selector).into())
            }
            other => other?,
        }
    };
    let picked = super::series::select_some(&engine, &selector)?;
    if args.dry_run {
        let keys: String = picked.iter().map(|(_, key)| format!("{key}\n")).collect();
        print(&keys)?;
        eprintln!(
            "tierdb: would delete {} series (dry run: nothing deleted)",
            picked.len()
        );
        return Ok(());
    }
    let ids: Vec<_> = picked.iter().map(|(id, _)| *id).collect();
    let deleted = engine.delete_series(&ids)?;
    engine.close()?;
    let keys: String = deleted
        .series
        .iter()
        .map(|key| format!("{key}\n"))
        .collect();
    print(&keys)?;
    eprintln!(
        "tierdb: deleted {} series ({} buckets and {} raw points cleared)",
        deleted.series.len(),
        deleted.cells_cleared,
        deleted.raw_points
    );
    Ok(())
}

/// The refusal when a server holds the directory: delete through its HTTP API.
fn held_by_server(
    dir: &std::path::Path,
    holder: &str,
    selector: &crate::registry::Selector,
) -> String {
    let http = (holder.strip_prefix("pid "))
        .and_then(|pid| pid.trim().parse().ok())
        .and_then(|pid| Announced::read(dir, pid))
        .map_or_else(|| "HOST:PORT".to_owned(), |at| at.http.to_string());
    format!(
        "{} is held by a running tierdb ({holder}); delete through it: curl -g -X DELETE \
         'http://{http}/api/v1/series?match={selector}' (with -H 'Authorization: Bearer TOKEN' \
         when it has a token)",
        dir.display()
    )
}
