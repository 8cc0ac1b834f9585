//! `tierdb series`: the series keys a name glob and tag filters select, one a line.

use clap::Args;

use super::{open_reader, print, Location, TagFilters};
use crate::registry::{is_glob, Registry, Selector, SUGGESTIONS};

/// Lists series whose name matches a glob (`*`, `?`, `[a-z]`).
#[derive(Args, Debug)]
#[command(mut_arg("tags", |arg| arg.help(
    "Only series with this tag (k=v), or without it (k!=v); repeatable; the value may be a glob (host=web-*)"
)))]
#[command(
    after_help = "Examples:\n  tierdb series\n  tierdb series 'cpu.*'\n  tierdb series 'cpu.*' --tag host=web-1"
)]
pub struct SeriesArgs {
    /// Glob over the series name, optionally with tag filters: `cpu.*{host!=b}`.
    #[arg(default_value = "*")]
    pattern: String,
    #[command(flatten)]
    filters: TagFilters,
    #[command(flatten)]
    location: Location,
}

/// Prints every matching series key. When none matches, fails with "no series match" and
/// what the selector may have meant: series whose name matches but whose tags do not, else
/// series with a near name.
pub(super) fn run(args: SeriesArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engine = open_reader(&args.location)?;
    let selector = args.filters.selector(&args.pattern)?;
    let mut out = String::new();
    // Matched where the keys are stored; only the answer's text is copied.
    engine.registry().for_each_from(0, |_, key| {
        if selector.matches(key) {
            out.push_str(key.as_str());
            out.push('\n');
        }
    });
    if out.is_empty() {
        return Err(none_match(engine.registry(), &selector)?.into());
    }
    print(&out)?;
    Ok(())
}

/// The ids and keys of the series `selector` selects in `engine` (what `delete` and `retype`
/// act on), refused when it selects none: "no series match", with [`nearest`]'s hint.
pub(super) fn select_some(
    engine: &crate::engine::Engine,
    selector: &Selector,
) -> Result<Vec<(crate::registry::SeriesId, String)>, Box<dyn std::error::Error>> {
    let picked = engine.select_series(selector);
    if picked.is_empty() {
        return Err(none_match(engine.registry(), selector)?.into());
    }
    Ok(picked)
}

/// "no series match 'SELECTOR'", with what it may have meant.
fn none_match(registry: &Registry, selector: &Selector) -> crate::error::Result<String> {
    let message = format!("no series match '{selector}'");
    Ok(match nearest(registry, selector)? {
        Some(hint) => format!("{message}; {hint}"),
        None => message,
    })
}

/// What a selector that matched nothing may have meant: series whose name matches (when it
/// has tag filters), else for a plain name the series with a near name.
fn nearest(registry: &Registry, selector: &Selector) -> crate::error::Result<Option<String>> {
    let by_name = Selector::new(selector.pattern.clone());
    let mut named = Vec::new();
    let mut total = 0;
    registry.for_each_from(0, |_, key| {
        if by_name.matches(key) {
            total += 1;
            if named.len() < SUGGESTIONS {
                named.push(format!("'{}'", key.as_str()));
            }
        }
    });
    if total > 0 {
        let more = if total > named.len() { ", ..." } else { "" };
        let have = if total == 1 { "has" } else { "have" };
        return Ok(Some(format!(
            "{total} series {have} a matching name but other tags: {}{more}",
            named.join(", ")
        )));
    }
    if is_glob(&selector.pattern) {
        return Ok(None);
    }
    Ok(registry
        .candidates(&selector.pattern, &[], SUGGESTIONS)
        .ok()
        .and_then(|found| found.hint()))
}
