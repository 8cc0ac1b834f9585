//! The map of the house, in code: tierdb's top-level modules in layers, lowest first, and a
//! check that every `crate::` path in `src/` names a module of a lower layer (or its own
//! module). ARCHITECTURE.md's table says the same in words; when a change needs an import
//! that runs up, the fix is a trait in the lower layer (as `server::Backend`), not an arrow
//! back up.
//!
//! Inside a module, its files are in layers too where a circle threatened (`read/`: the
//! reader, then the reads written on it), checked the same way on `crate::read::` and
//! `super::` paths.
//!
//! Inside `src/`, items are named through the module that defines them
//! (`crate::error::Result`), not through `lib.rs`'s re-exports (`crate::Result`), which are
//! for users: a use line then shows the layer it reaches. Test files (`tests.rs`, `tests/` folders, inline
//! `#[cfg(test)] mod tests`) may reach anywhere and are not read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The layers, lowest first: a module may import modules of lower layers only.
const LAYERS: &[(&str, &[&str])] = &[
    ("errors and the crash tests' hooks", &["error", "fault"]),
    ("time", &["time"]),
    (
        "clock, bucket value and distribution value",
        &["clock", "bucket", "histogram"],
    ),
    ("configuration", &["config"]),
    ("storage", &["storage"]),
    ("registry", &["registry"]),
    ("samples", &["sample"]),
    ("counters", &["counter"]),
    ("read side", &["read"]),
    ("engine", &["engine"]),
    (
        "ingest, Graphite render, PromQL, charts",
        &["ingest", "render", "promql", "plot"],
    ),
    ("server", &["server"]),
    ("cluster", &["cluster"]),
    ("command line", &["cli"]),
    ("the tests' door to internals", &["testing"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// A layer: what it holds, and its modules (or a module's files).
type Layer = (&'static str, &'static [&'static str]);

/// The layers inside a module, lowest first: a file of the module may import its sibling
/// files of lower layers only. `read/`: `Reader` and what a read sees
/// sit below the reads, which are its methods written beside their work, so the reader
/// never imports a read.
const INNER_LAYERS: &[(&str, &[Layer])] = &[(
    "read",
    &[
        (
            "values, budgets, tier choice and the write log",
            &["value_text", "budget", "tier_choice", "write_log"],
        ),
        ("the reader and what a read sees", &["reader"]),
        ("one-series reads and the point grid", &["query"]),
        (
            "reads across series and of distributions",
            &["aggregate", "distribution"],
        ),
        (
            "the one read interface the query languages stand on",
            &["store"],
        ),
    ],
)];

fn inner_layer_of(layers: &[Layer], file: &str) -> Option<usize> {
    layers.iter().position(|(_, files)| files.contains(&file))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every source file of the library that is not a test, with its top-level module.
fn library_files() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    dirs.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            let relative = path.strip_prefix(src()).unwrap();
            let top = relative.components().next().unwrap();
            let module = top
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            if module == "lib" || module == "main" {
                continue;
            }
            files.push((path, module));
        }
    }
    files.sort();
    files
}

/// What `lib.rs` re-exports: name → the top-level module that defines it.
fn reexports() -> HashMap<String, String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut names = HashMap::new();
    for item in lib.split("pub use ").skip(1) {
        let item = &item[..item.find(';').unwrap()];
        let module = item.split("::").next().unwrap().trim().to_owned();
        let listed = item.rsplit("::").next().unwrap();
        for name in listed.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names
}

/// The code of `text` without comments, and without a trailing inline test module.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let end = text.find("#[cfg(test)]\nmod tests {").unwrap_or(text.len());
    text[..end]
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let code = match line.find("//") {
                Some(at) => &line[..at],
                None => line,
            };
            (i + 1, code.to_owned())
        })
        .collect()
}

/// The first path segment of every item `crate::` names in `lines`, with its line: a
/// module, or a name `lib.rs` re-exports. A group (`crate::{a::b, C}`) may span lines.
fn crate_paths(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    paths_after(lines, "crate::")
}

/// The first path segment after every `prefix` (`crate::`, `crate::read::`, `super::`) in
/// `lines`, with its line, groups included.
fn paths_after(lines: &[(usize, String)], prefix: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let line_at = |offset: usize| 1 + text[..offset].matches('\n').count();
    let mut rest = 0;
    while let Some(at) = text[rest..].find(prefix) {
        let start = rest + at + prefix.len();
        rest = start;
        let before = text[..start - prefix.len()].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `tierdb_crate::`, `$crate::`
        }
        if text[start..].starts_with('{') {
            let mut depth = 0;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in text[start..].chars() {
                match c {
                    '{' => {
                        depth += 1;
                        if depth == 1 {
                            continue;
                        }
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            items.push(std::mem::take(&mut item));
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                if depth == 1 {
                    item.push(c);
                }
            }
            for item in items {
                let first = item
                    .trim()
                    .split("::")
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_owned();
                if !first.is_empty() {
                    found.push((line_at(start), first));
                }
            }
        } else {
            let first: String = text[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push((line_at(start), first));
        }
    }
    found
}

#[test]
fn every_import_runs_down_the_layers() {
    let reexported = reexports();
    let mut wrong = Vec::new();
    let files = library_files();
    assert!(
        files.len() > 50,
        "src/ was not found whole: {} files",
        files.len()
    );
    for (path, module) in &files {
        let Some(own) = layer_of(module) else {
            wrong.push(format!(
                "{}: module `{module}` is in no layer of tests/it/layers.rs",
                path.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap();
        for (line, name) in crate_paths(&code_lines(&text)) {
            if let Some(module) = reexported.get(&name) {
                wrong.push(format!(
                    "{}:{line}: `crate::{name}` is lib.rs's re-export; name it through `crate::{module}`",
                    path.strip_prefix(src().parent().unwrap()).unwrap().display(),
                ));
                continue;
            }
            let target = name.clone();
            if target == *module || target == "self" {
                continue;
            }
            let Some(layer) = layer_of(&target) else {
                continue; // a macro or a name no module defines
            };
            if layer >= own {
                wrong.push(format!(
                    "{}:{line}: `{module}` ({}) imports `crate::{name}` of `{target}` ({}), \
                     which is not below it",
                    path.strip_prefix(src().parent().unwrap())
                        .unwrap()
                        .display(),
                    LAYERS[own].0,
                    LAYERS[layer].0,
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// What the cluster may name of the storage below the engine: its file helpers (a
/// directory's fsync, atomic writes), nothing of how a store keeps its data. Exactly-once
/// apply, its undo chain and the copy of a partition's files are the engine's
/// (`Engine::apply`, `Engine::with_files_still`).
const CLUSTER_MAY_NAME_OF_STORAGE: &[&str] = &["disk"];

/// The files of `module` that are not tests, each with its code lines and its path as shown.
fn module_files(module: &str) -> Vec<(String, Vec<(usize, String)>)> {
    library_files()
        .into_iter()
        .filter(|(_, of)| of == module)
        .map(|(path, _)| {
            let lines = code_lines(&std::fs::read_to_string(&path).unwrap());
            let shown = path.strip_prefix(src().parent().unwrap()).unwrap();
            (shown.display().to_string(), lines)
        })
        .collect()
}

/// The cluster stands on the engine's surface: of the storage it names only
/// [`CLUSTER_MAY_NAME_OF_STORAGE`], and of the engine only what `engine.rs` itself holds
/// or re-exports (`crate::engine::Engine`, `crate::engine::SampleBatch`), never one of the
/// engine's own modules (`crate::engine::apply::...`).
#[test]
fn the_cluster_reaches_no_storage_internals() {
    let engine_modules: Vec<String> = std::fs::read_dir(src().join("engine"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(engine_modules.len() > 5, "{engine_modules:?}");
    let mut wrong = Vec::new();
    for (shown, lines) in module_files("cluster") {
        for (line, named) in paths_after(&lines, "crate::storage::") {
            if !CLUSTER_MAY_NAME_OF_STORAGE.contains(&named.as_str()) {
                wrong.push(format!("{shown}:{line}: names `crate::storage::{named}`"));
            }
        }
        for (line, named) in paths_after(&lines, "crate::engine::") {
            if engine_modules.contains(&named) {
                wrong.push(format!(
                    "{shown}:{line}: names the engine's module `crate::engine::{named}`"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the cluster reaches into the storage or the engine (go through the engine's \
         surface):\n{}",
        wrong.join("\n")
    );
}

/// What the query languages may name of the read side: the budget, the tier choice and the
/// one read interface, [`READ_OF_LANGUAGES`]; never the reader or its reads, which a
/// storage side implements the store with (an engine's reader, a cluster's fan-out).
const READ_OF_LANGUAGES: &[&str] = &["budget", "store", "tier_choice", "value_text"];

/// Where the files of `module` (but those of `exempt`) name of the read side anything but
/// `allowed`, or name the engine at all.
fn reaches_past_the_store(module: &str, allowed: &[&str], exempt: &[&str]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (shown, lines) in module_files(module) {
        if exempt.contains(&shown.as_str()) {
            continue;
        }
        for (line, named) in paths_after(&lines, "crate::read::") {
            if !allowed.contains(&named.as_str()) {
                wrong.push(format!("{shown}:{line}: names `crate::read::{named}`"));
            }
        }
        for (line, _) in paths_after(&lines, "crate::engine") {
            wrong.push(format!("{shown}:{line}: names `crate::engine`"));
        }
    }
    wrong
}

/// PromQL reads storage through `read::store::Store` only, so a single node and a cluster
/// node answer through one source: it names no reader, no read of the reader's, no engine.
#[test]
fn promql_reads_through_the_store() {
    let wrong = reaches_past_the_store("promql", READ_OF_LANGUAGES, &[]);
    assert!(
        wrong.is_empty(),
        "PromQL reaches past the store (read through `read::store::Store`):\n{}",
        wrong.join("\n")
    );
}

/// What render may name of the read side: the budget and the one read interface, and the
/// values that interface carries or render makes of them (`aggregate`'s `Aggregation` and
/// `query`'s `Display` of `Store::fold`, `query`'s points limit, `distribution`'s points
/// that StatsD timer paths are taken from); never the reader or its reads.
const READ_OF_RENDER: &[&str] = &["aggregate", "budget", "distribution", "query", "store"];

/// Render's files that still list from an engine's registry: the tag API and the timer
/// paths find and the tag API list, which a cluster node answers by fanning the whole
/// question out (`cluster::partial::tags_over`, `find_over`) until they read through the
/// store too.
const RENDER_LISTING_AN_ENGINE: &[&str] =
    &["src/render/tags.rs", "src/render/timer_paths/listed.rs"];

/// Render reads storage through `read::store::Store` only, so a single node and a cluster
/// node render through one source (`render::StoredSource`): it names no reader, no read of
/// the reader's, no engine, but in [`RENDER_LISTING_AN_ENGINE`].
#[test]
fn render_reads_through_the_store() {
    let wrong = reaches_past_the_store("render", READ_OF_RENDER, RENDER_LISTING_AN_ENGINE);
    assert!(
        wrong.is_empty(),
        "render reaches past the store (read through `read::store::Store`):\n{}",
        wrong.join("\n")
    );
}

/// The seams of the one ingest pipeline: the server holds sockets and HTTP and names no
/// cluster (a cluster node reaches it as a `server::Backend`, wired in `cli/serve`), and
/// the cluster's write target (`cluster/edge.rs`) stands on the ingest core
/// (`ingest::sink`: the sink, its name cache and report), not on the server.
#[test]
fn the_server_names_no_cluster_and_the_edge_no_server() {
    let mut wrong = Vec::new();
    for (shown, lines) in module_files("server") {
        for (line, _) in paths_after(&lines, "crate::cluster") {
            wrong.push(format!("{shown}:{line}: the server names `crate::cluster`"));
        }
    }
    let edge: Vec<_> = module_files("cluster")
        .into_iter()
        .filter(|(shown, _)| shown.ends_with("cluster/edge.rs"))
        .collect();
    assert_eq!(edge.len(), 1, "src/cluster/edge.rs was not found");
    for (shown, lines) in edge {
        for (line, _) in paths_after(&lines, "crate::server") {
            wrong.push(format!(
                "{shown}:{line}: the cluster's write target names `crate::server`"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Where a sample's value and time are checked before its name is resolved, above the
/// engine that owns the rule: the ingest core's bounds (`ingest/bounds.rs`), held by the
/// sink every protocol writes through and by `tierdb import`. A write target (the local
/// engine's queue, the cluster's edge) receives samples already checked and holds no bounds
/// of its own, so the bounds and when they are taken afresh are one rule for every target.
const BOUNDS_KEPT_BY: &[&str] = &["ingest/bounds.rs", "ingest/sink.rs", "cli/import.rs"];

/// What names the time bounds' rule or keeps bounds: the engine's functions, and a keeper
/// of bounds under the name it has or had.
const BOUNDS_NAMES: &[&str] = &[
    "accepted_times",
    "check_value_and_time",
    "TimeBounds",
    "SinkBounds",
];

#[test]
fn the_time_bounds_are_kept_by_the_ingest_core_not_by_a_write_target() {
    let mut wrong = Vec::new();
    for (path, module) in library_files() {
        let shown = path.strip_prefix(src()).unwrap().display().to_string();
        if module == "engine" || BOUNDS_KEPT_BY.contains(&shown.as_str()) {
            continue;
        }
        let lines = code_lines(&std::fs::read_to_string(&path).unwrap());
        for (line, text) in &lines {
            if let Some(name) = BOUNDS_NAMES.iter().find(|name| text.contains(*name)) {
                wrong.push(format!("src/{shown}:{line}: names `{name}`"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "time bounds checked outside the ingest core ({}):\n{}",
        BOUNDS_KEPT_BY.join(", "),
        wrong.join("\n")
    );
}

#[test]
fn every_import_inside_a_module_runs_down_its_layers() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (path, module) in library_files() {
        let Some((_, layers)) = INNER_LAYERS.iter().find(|(name, _)| *name == module) else {
            continue;
        };
        // The module's own file (`read.rs`) declares its files and stands above them.
        let Ok(relative) = path.strip_prefix(src().join(&module)) else {
            continue;
        };
        let file = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        let shown = path
            .strip_prefix(src().parent().unwrap())
            .unwrap()
            .display();
        let Some(own) = inner_layer_of(layers, &file) else {
            wrong.push(format!(
                "{shown}: `{module}/{file}` is in no layer of INNER_LAYERS in tests/it/layers.rs"
            ));
            continue;
        };
        checked += 1;
        let lines = code_lines(&std::fs::read_to_string(&path).unwrap());
        let mut named = paths_after(&lines, &format!("crate::{module}::"));
        if relative.components().count() == 1 {
            named.extend(paths_after(&lines, "super::"));
        }
        for (line, target) in named {
            let Some(layer) = inner_layer_of(layers, &target) else {
                continue; // an item of the module, or of the file itself
            };
            if target != file && layer >= own {
                wrong.push(format!(
                    "{shown}:{line}: `{module}/{file}` ({}) imports `{target}` ({}), which is not below it",
                    layers[own].0, layers[layer].0,
                ));
            }
        }
    }
    assert!(
        checked > 5,
        "the files of INNER_LAYERS were not found: {checked}"
    );
    assert!(
        wrong.is_empty(),
        "imports against the layers inside a module:\n{}",
        wrong.join("\n")
    );
}

/// The check itself finds an upward import, in a group across lines and through a
/// re-export, and names its line.
#[test]
fn an_upward_import_is_found_with_its_line() {
    let code = "use std::fmt;\n// crate::cli in a comment\nuse crate::{\n    time::Span,\n    Engine,\n};\nfn f() { crate::server::run(); }\n";
    let found = crate_paths(&code_lines(code));
    assert_eq!(
        found,
        [
            (3, "time".to_owned()),
            (3, "Engine".to_owned()),
            (7, "server".to_owned())
        ]
    );
    assert_eq!(
        reexports().get("Engine").map(String::as_str),
        Some("engine")
    );
    assert!(layer_of("engine") > layer_of("storage"));
    let inner =
        "use super::{query::PointGrid, reader::Reader};\nuse crate::read::aggregate::Fold;\n";
    let lines = code_lines(inner);
    assert_eq!(
        paths_after(&lines, "super::"),
        [(1, "query".to_owned()), (1, "reader".to_owned())]
    );
    assert_eq!(
        paths_after(&lines, "crate::read::"),
        [(2, "aggregate".to_owned())]
    );
    let read = INNER_LAYERS[0].1;
    assert!(inner_layer_of(read, "aggregate") > inner_layer_of(read, "reader"));
}

/// The features say what they bring: the HTTP server alone (`--no-default-features
/// --features server`) depends on no NATS client, which only `cluster` brings.
#[test]
fn the_server_feature_brings_no_nats_client() {
    let dependencies = |features: &[&str]| {
        let out = std::process::Command::new(env!("CARGO"))
            .args(["tree", "--offline", "--edges", "normal", "--prefix", "none"])
            .args(features)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let has_nats = |tree: &str| tree.lines().any(|line| line.starts_with("async-nats "));
    let server = dependencies(&["--no-default-features", "--features", "server"]);
    assert!(
        server.lines().any(|line| line.starts_with("axum ")),
        "{server}"
    );
    assert!(
        !has_nats(&server),
        "the server feature brings async-nats:\n{server}"
    );
    let cluster = dependencies(&["--no-default-features", "--features", "cluster"]);
    assert!(has_nats(&cluster), "{cluster}");
}
