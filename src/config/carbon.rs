//! Carbon's `storage-schemas.conf` (and `storage-aggregation.conf`) read and turned into a
//! `tiers.toml`: `tierdb tiers --from-storage-schemas`. Carbon gives each metric the
//! archives of the first section whose pattern matches its name; tierdb gives each new
//! series the tiers of the first `[[set]]` whose rules pick it, so each section becomes a
//! set, in carbon's order, its pattern the name globs that pick the same names
//! ([`pattern`]), and the catch-all section the default set (see [`tiers_toml`]). A pattern
//! with no exact glob form is refused, never approximated.

mod pattern;

use crate::time::Span;
use pattern::Picks;

/// One section of storage-schemas.conf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Schema {
    /// The section's name (`[name]`).
    pub name: String,
    /// Its `pattern`, a regular expression over the metric name.
    pub pattern: String,
    /// Its archives as `(seconds per point, retention seconds)`, as `retentions` lists them.
    pub archives: Vec<(u64, u64)>,
}

/// One section of storage-aggregation.conf.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AggregationRule {
    /// The section's name.
    pub name: String,
    /// Its `pattern`.
    pub pattern: String,
    /// Its `aggregationMethod`, when given.
    pub method: Option<String>,
    /// Its `xFilesFactor`, when given.
    pub x_files_factor: Option<f64>,
}

/// A refusal, naming the line.
fn refuse(origin: &str, line: usize, why: impl std::fmt::Display) -> String {
    format!("{origin}:{line}: {why}")
}

/// The sections of an INI-style carbon file: `(name, line, [(key, value, line)])`.
type Sections = Vec<(String, usize, Vec<(String, String, usize)>)>;

fn sections(text: &str, origin: &str) -> Result<Sections, String> {
    let mut out: Sections = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let name = name
                .strip_suffix(']')
                .ok_or_else(|| refuse(origin, i + 1, "a section header without `]`"))?;
            out.push((name.trim().to_owned(), i + 1, Vec::new()));
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| refuse(origin, i + 1, format!("{line:?} is no `key = value`")))?;
        let section = out
            .last_mut()
            .ok_or_else(|| refuse(origin, i + 1, "a key before any [section]"))?;
        section
            .2
            .push((key.trim().to_owned(), value.trim().to_owned(), i + 1));
    }
    Ok(out)
}

/// Seconds of a whisper time unit, matched as whisper does (by prefix: `s`, `sec`,
/// `seconds`, `m`, `min`, `h`, `d`, `w`, `y`; `m` is minutes).
fn unit_seconds(unit: &str) -> Option<u64> {
    let units: [(&str, u64); 6] = [
        ("seconds", 1),
        ("minutes", 60),
        ("hours", 3_600),
        ("days", 86_400),
        ("weeks", 7 * 86_400),
        ("years", 365 * 86_400),
    ];
    (!unit.is_empty())
        .then(|| units.iter().find(|(name, _)| name.starts_with(unit)))
        .flatten()
        .map(|(_, secs)| *secs)
}

/// One `precision:retention` pair as whisper reads it: a precision without a unit is
/// seconds; a retention without a unit is a number of points.
pub(crate) fn parse_retention(def: &str) -> Result<(u64, u64), String> {
    let (precision, points) = def
        .split_once(':')
        .ok_or_else(|| format!("{def:?} is not `precision:retention`"))?;
    let number = |text: &str| -> Result<(u64, String), String> {
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        let n = digits
            .parse::<u64>()
            .map_err(|_| format!("{text:?} in {def:?} does not start with a number"))?;
        Ok((n, text[digits.len()..].to_ascii_lowercase()))
    };
    let (n, unit) = number(precision.trim())?;
    let step = if unit.is_empty() {
        n
    } else {
        n * unit_seconds(&unit).ok_or_else(|| format!("unknown unit {unit:?} in {def:?}"))?
    };
    let (m, unit) = number(points.trim())?;
    let retention = if unit.is_empty() {
        m * step
    } else {
        m * unit_seconds(&unit).ok_or_else(|| format!("unknown unit {unit:?} in {def:?}"))?
    };
    if step == 0 || retention < step {
        return Err(format!("{def:?} keeps no whole point"));
    }
    // Whisper keeps retention / step points: the retention is whole points.
    Ok((step, retention - retention % step))
}

/// The sections of storage-schemas.conf text.
///
/// # Errors
/// A sentence naming `origin` and the line: a malformed line, a section without `pattern`
/// or `retentions`, or a retention whisper would refuse.
pub(crate) fn parse_schemas(text: &str, origin: &str) -> Result<Vec<Schema>, String> {
    let mut out = Vec::new();
    for (name, line, keys) in sections(text, origin)? {
        let get = |key: &str| keys.iter().find(|(k, _, _)| k == key);
        // Carbon skips a section without a pattern, or with an empty one; tierdb says so.
        let pattern = get("pattern")
            .filter(|(_, pattern, _)| !pattern.is_empty())
            .ok_or_else(|| refuse(origin, line, format!("[{name}] has no pattern")))?;
        let (_, retentions, at) = get("retentions")
            .ok_or_else(|| refuse(origin, line, format!("[{name}] has no retentions")))?;
        let archives = retentions
            .split(',')
            .map(|def| parse_retention(def.trim()).map_err(|e| refuse(origin, *at, e)))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(Schema {
            name,
            pattern: pattern.1.clone(),
            archives,
        });
    }
    if out.is_empty() {
        return Err(format!(
            "{origin}: no [section] with a pattern and retentions"
        ));
    }
    Ok(out)
}

/// The sections of storage-aggregation.conf text.
///
/// # Errors
/// A sentence naming `origin` and the line.
pub(crate) fn parse_aggregation(text: &str, origin: &str) -> Result<Vec<AggregationRule>, String> {
    let mut out = Vec::new();
    for (name, line, keys) in sections(text, origin)? {
        let get = |key: &str| keys.iter().find(|(k, _, _)| k == key);
        let pattern = get("pattern")
            .ok_or_else(|| refuse(origin, line, format!("[{name}] has no pattern")))?;
        let x_files_factor =
            match get("xFilesFactor") {
                None => None,
                Some((_, v, at)) => Some(v.parse::<f64>().map_err(|_| {
                    refuse(origin, *at, format!("xFilesFactor {v:?} is not a number"))
                })?),
            };
        out.push(AggregationRule {
            name,
            pattern: pattern.1.clone(),
            method: get("aggregationMethod").map(|(_, v, _)| v.clone()),
            x_files_factor,
        });
    }
    Ok(out)
}

/// The period of a tier of `step` seconds kept `retention` seconds: a multiple of the step
/// that divides the retention, with as close to 1440 buckets as there is (a day of minutes:
/// files of a few MiB per 256 series), preferring at least 4 periods in the retention so
/// that dropping whole files keeps little beyond it, and whole days for periods over a day;
/// the retention itself when nothing divides.
pub(crate) fn period_for(step: u64, retention: u64) -> u64 {
    let score = |period: u64| {
        let buckets = (period / step) as f64;
        let distance = (buckets / 1440.0).ln().abs();
        let few = if retention / period < 4 { 1.0 } else { 0.0 };
        let odd_days = if period > 86_400 && !period.is_multiple_of(86_400) {
            0.5
        } else {
            0.0
        };
        distance + few + odd_days
    };
    let mut best = retention;
    let mut k = 1;
    while step * k <= retention {
        let period = step * k;
        if retention.is_multiple_of(period)
            && period / step <= u64::from(super::MAX_BUCKETS_PER_PERIOD)
            && score(period) < score(best)
        {
            best = period;
        }
        k += 1;
    }
    best
}

/// What `tierdb tiers --from-storage-schemas` prints: the tiers.toml, and the notes for
/// stderr on the sections carbon never uses, left out of it.
#[derive(Debug)]
pub(crate) struct Converted {
    /// The tiers.toml.
    pub toml: String,
    /// One sentence per section left out.
    pub notes: Vec<String>,
}

/// Carbon's tiers for a metric no section picks (`storage.py`'s `defaultArchive`): one point
/// a minute for 7 days.
const CARBON_DEFAULT_ARCHIVE: (u64, u64) = (60, 7 * 86_400);

/// A tiers.toml that gives every series the archives carbon gives the metric of that name:
/// each section of `schemas` a `[[set]]` in carbon's order, its pattern as the name globs
/// that pick the same names ([`pattern::name_globs`]), its archives as the set's tiers; the
/// first section whose pattern picks every name (`.*`) as the top-level `[[tier]]`s, the
/// default set, or carbon's own default (1m for 7 days) when none does. Sections carbon
/// never uses (after that one, or with retentions whisper refuses, which carbon skips) are
/// left out with a note. `aggregation`'s rules become comments.
///
/// # Errors
/// One sentence per section whose pattern has no exact glob form, naming the section,
/// saying why and what to do.
pub(crate) fn tiers_toml(
    schemas: &[Schema],
    aggregation: &[AggregationRule],
    origin: &str,
) -> Result<Converted, String> {
    let mut sets: Vec<(&Schema, Vec<String>)> = Vec::new();
    let mut default: Option<&Schema> = None;
    let mut notes = Vec::new();
    let mut refusals = Vec::new();
    for schema in schemas {
        if let Some(why) = whisper_refuses(&schema.archives) {
            notes.push(format!(
                "[{}] is left out, as carbon leaves it out: whisper refuses its retentions \
                 ({why})",
                schema.name
            ));
            continue;
        }
        if let Some(all) = default {
            notes.push(format!(
                "[{}] is left out: it comes after [{}], whose pattern picks every metric, so \
                 carbon never gives it one",
                schema.name, all.name
            ));
            continue;
        }
        match pattern::name_globs(&schema.pattern) {
            Ok(Picks::Every) => default = Some(schema),
            Ok(Picks::Names(globs)) => sets.push((schema, globs)),
            Err(why) => refusals.push(format!(
                "{origin}: [{}] pattern = {}: {why}. tierdb's sets pick series by name globs, \
                 and this pattern has none that picks exactly its metrics; rewrite the pattern \
                 as one that converts (docs/carbon-schemas.md, Patterns), or convert a copy of \
                 the file without the section and write its [[set]] by hand",
                schema.name, schema.pattern
            )),
        }
    }
    if !refusals.is_empty() {
        return Err(refusals.join("\n"));
    }

    let mut out =
        format!("# tiers.toml made by `tierdb tiers --from-storage-schemas {origin}`.\n#\n");
    if !sets.is_empty() {
        out.push_str(
            "# Each section of the schemas is a [[set]] below, in carbon's order: a new series\n\
             # keeps the tiers of the first set whose names match it, as a metric gets the\n\
             # archives of the first section whose pattern matches it. Each pattern is the\n\
             # globs that pick the same names (carbon finds a pattern anywhere in the name,\n\
             # so an unanchored one is `*...*`; a tagged metric it matches as `name;k=v`,\n\
             # tierdb by its name alone). Series that no set picks keep the top-level\n",
        );
        match default {
            Some(all) => out.push_str(&format!(
                "# tiers: section [{}], pattern = {}.\n",
                all.name, all.pattern
            )),
            None => out.push_str(
                "# tiers: no section picks every metric, so they are carbon's own default\n\
                 # for the rest, 1m for 7 days.\n",
            ),
        }
        out.push_str("#\n");
    } else if default.is_none() {
        out.push_str(
            "# No section of the schemas is used, so every metric keeps carbon's own default,\n\
             # 1m for 7 days.\n#\n",
        );
    }
    out.push_str(
        "# A tier per archive: same resolution, kept at least as long (whole periods are\n\
         # dropped, so up to one period more).\n",
    );
    for note in &notes {
        out.push_str(&format!("#\n# {note}.\n"));
    }
    if !aggregation.is_empty() {
        out.push_str(
            "#\n# storage-aggregation.conf: tierdb needs no aggregation method to roll up, since\n\
             # every bucket keeps count, total, min, max and its latest sample; choose what to\n\
             # read instead: average: display avg (the default); sum: display total, or\n\
             # render's consolidateBy('sum'); max, min: display max, min; last: render's\n\
             # consolidateBy('last'). Imported whisper files keep their own method and\n\
             # xFilesFactor. The rules:\n",
        );
        for rule in aggregation {
            out.push_str(&format!(
                "#   [{}] pattern = {}: {}, xFilesFactor {}\n",
                rule.name,
                rule.pattern,
                rule.method.as_deref().unwrap_or("average"),
                rule.x_files_factor
                    .map_or("0.5".to_owned(), |x| x.to_string())
            ));
        }
    }
    let default_archives = default.map_or(&[CARBON_DEFAULT_ARCHIVE][..], |s| &s.archives);
    out.push('\n');
    push_tiers(&mut out, "tier", default_archives);
    let mut names: Vec<String> = Vec::new();
    for (schema, globs) in sets {
        let name = set_name(&schema.name, &names);
        let rules = super::SeriesRules {
            names: globs,
            tags: Vec::new(),
        };
        let [(_, globs), _] = super::stored::rule_lists(&rules);
        out.push_str(&format!(
            "# [{}] pattern = {}\n[[set]]\nname = \"{name}\"\nnames = {globs}\n\n",
            schema.name, schema.pattern
        ));
        push_tiers(&mut out, "set.tier", &schema.archives);
        names.push(name);
    }
    Ok(Converted { toml: out, notes })
}

/// A `[[table]]` per archive, finest first: named and sized by its resolution, kept as long
/// as the archive, in files of [`period_for`].
fn push_tiers(out: &mut String, table: &str, archives: &[(u64, u64)]) {
    let mut archives = archives.to_vec();
    archives.sort_unstable();
    for (step, retention) in archives {
        let period = period_for(step, retention);
        out.push_str(&format!(
            "[[{table}]]\nname = \"{}\"\nresolution = \"{}\"\nperiod = \"{}\"\nretention = \"{}\"\ncreate_ahead = 1\n\n",
            Span::from_secs(step),
            Span::from_secs(step),
            Span::from_secs(period),
            Span::from_secs(retention)
        ));
    }
}

/// Why whisper's `validateArchiveList` refuses `archives` (carbon then skips the section),
/// or `None`: sorted by resolution, no two alike, each a multiple of the finer one, each
/// kept longer than the finer one, and the finer one holding enough points for one of its.
fn whisper_refuses(archives: &[(u64, u64)]) -> Option<String> {
    let mut sorted = archives.to_vec();
    sorted.sort_unstable();
    let span = |secs: u64| Span::from_secs(secs).to_string();
    sorted.windows(2).find_map(|pair| {
        let ((fine, fine_kept), (coarse, coarse_kept)) = (pair[0], pair[1]);
        if fine == coarse {
            Some(format!("two archives of {}", span(fine)))
        } else if !coarse.is_multiple_of(fine) {
            Some(format!("{} is no multiple of {}", span(coarse), span(fine)))
        } else if coarse_kept <= fine_kept {
            Some(format!(
                "the {} archive keeps no longer than the {} one",
                span(coarse),
                span(fine)
            ))
        } else if fine_kept / fine < coarse / fine {
            Some(format!(
                "the {} archive holds fewer points than one {} point rolls up",
                span(fine),
                span(coarse)
            ))
        } else {
            None
        }
    })
}

/// A set name for carbon section `section`: its characters outside `[A-Za-z0-9_.-]` as
/// `_`, at most 28 bytes, a `_` before it when it is empty or starts with `.` (the name is
/// a directory), and a `-2`, `-3`... after it when it is [`super::DEFAULT_SET`] or one of
/// `taken`.
fn set_name(section: &str, taken: &[String]) -> String {
    let mut base: String = (section.chars())
        .map(|c| match c {
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' => c,
            _ => '_',
        })
        .take(28)
        .collect();
    if base.is_empty() || base.starts_with('.') {
        base.insert(0, '_');
        base.truncate(28);
    }
    let free = |name: &str| name != super::DEFAULT_SET && !taken.iter().any(|t| t == name);
    let mut name = base.clone();
    let mut n = 2;
    while !free(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

#[cfg(test)]
mod tests {
    use super::{parse_retention, parse_schemas, period_for, tiers_toml};
    use crate::config::TiersConfig;

    #[test]
    fn retentions_read_as_whisper_reads_them() {
        assert_eq!(parse_retention("60:1440"), Ok((60, 86_400)));
        assert_eq!(parse_retention("1m:7d"), Ok((60, 7 * 86_400)));
        assert_eq!(parse_retention("10s:6h"), Ok((10, 21_600)));
        assert_eq!(parse_retention("1h:1y"), Ok((3_600, 365 * 86_400)));
        assert_eq!(parse_retention("5min:30days"), Ok((300, 30 * 86_400)));
        assert!(parse_retention("1x:1d").is_err());
        assert!(parse_retention("60").is_err());
    }

    #[test]
    fn periods_divide_the_retention_into_files_of_about_a_day_of_minutes() {
        assert_eq!(period_for(60, 7 * 86_400), 86_400);
        assert_eq!(period_for(300, 30 * 86_400), 5 * 86_400);
        assert_eq!(period_for(3_600, 365 * 86_400), 73 * 86_400);
    }

    /// A set's name, its name globs and its tiers `(name, seconds kept)`.
    type Set = (String, Vec<String>, Vec<(String, u64)>);

    /// Every set, the default one first (named "default", no globs).
    fn sets(config: &TiersConfig) -> Vec<Set> {
        (0..config.set_count())
            .map(|set| {
                let globs = match set {
                    0 => Vec::new(),
                    _ => config.sets[set - 1].series.names.clone(),
                };
                let tiers = (config.set_tiers(set).iter())
                    .map(|t| (t.name.clone(), t.retention.secs()))
                    .collect();
                (config.set_name(set).to_owned(), globs, tiers)
            })
            .collect()
    }

    fn convert(text: &str) -> Result<(TiersConfig, super::Converted), String> {
        let schemas = parse_schemas(text, "s.conf")?;
        let converted = tiers_toml(&schemas, &[], "s.conf")?;
        let config = TiersConfig::from_toml_str(&converted.toml, "out").unwrap();
        Ok((config, converted))
    }

    #[test]
    fn each_section_is_a_set_in_carbons_order_and_the_catch_all_the_default() {
        let text = "[carbon]\npattern = ^carbon\\.\nretentions = 60:90d\n\n\
                    [web]\npattern = ^servers\\.(web|api)[0-9]\\.\nretentions = 10s:6h,1m:7d\n\n\
                    [counts]\npattern = \\.count$\nretentions = 1m:30d\n\n\
                    [default]\npattern = .*\nretentions = 1m:7d,5m:30d,1h:1y\n";
        let (config, converted) = convert(text).unwrap();
        let day = 86_400;
        assert_eq!(
            sets(&config),
            [
                (
                    "default".into(),
                    vec![],
                    vec![
                        ("1m".into(), 7 * day),
                        ("5m".into(), 30 * day),
                        ("1h".into(), 365 * day)
                    ]
                ),
                (
                    "carbon".into(),
                    vec!["carbon.*".into()],
                    vec![("1m".into(), 90 * day)]
                ),
                (
                    "web".into(),
                    vec!["servers.web[0-9].*".into(), "servers.api[0-9].*".into()],
                    vec![("10s".into(), 6 * 3_600), ("1m".into(), 7 * day)]
                ),
                (
                    "counts".into(),
                    vec!["*.count".into()],
                    vec![("1m".into(), 30 * day)]
                ),
            ]
        );
        assert!(converted.notes.is_empty());
        assert!(!converted.toml.contains("NOT EXACT"));
        assert!(
            converted
                .toml
                .contains("# [web] pattern = ^servers\\.(web|api)[0-9]\\.\n[[set]]"),
            "{}",
            converted.toml
        );
    }

    #[test]
    fn one_catch_all_section_gives_its_archives_as_the_tiers() {
        let (config, converted) =
            convert("[default]\npattern = ^.*$\nretentions = 1m:7d,5m:30d\n").unwrap();
        assert!(config.sets.is_empty());
        let tiers = &sets(&config)[0].2;
        assert_eq!(
            tiers,
            &[("1m".into(), 7 * 86_400), ("5m".into(), 30 * 86_400)]
        );
        assert!(!converted.toml.contains("[[set]]"));
    }

    #[test]
    fn without_a_catch_all_the_rest_keep_carbons_own_default() {
        let (config, converted) =
            convert("[tmp]\npattern = ^tmp\\.\nretentions = 10s:6h\n").unwrap();
        assert_eq!(sets(&config)[0].2, [("1m".into(), 7 * 86_400)]);
        assert_eq!(sets(&config)[1].1, ["tmp.*"]);
        assert!(converted.toml.contains("carbon's own default"));
    }

    #[test]
    fn sections_carbon_never_uses_are_left_out_with_a_note() {
        let text = "[bad]\npattern = ^bad\\.\nretentions = 60:1d,90:30d\n\n\
                    [all]\npattern = .*\nretentions = 1m:1d\n\n\
                    [late]\npattern = ^late\\.\nretentions = 10s:1h\n";
        let (config, converted) = convert(text).unwrap();
        assert!(config.sets.is_empty());
        assert_eq!(converted.notes.len(), 2, "{:?}", converted.notes);
        assert!(converted.notes[0].contains("[bad] is left out, as carbon leaves it out"));
        assert!(converted.notes[0].contains("90s is no multiple of 1m"));
        assert!(converted.notes[1].contains("[late] is left out: it comes after [all]"));
        assert!(converted.toml.contains("# [late] is left out"));

        // Nothing used: carbon's own default for every metric, and the file says so.
        let (config, converted) =
            convert("[bad]\npattern = .*\nretentions = 60:1d,60:2d\n").unwrap();
        assert_eq!(
            sets(&config),
            [("default".into(), vec![], vec![("1m".into(), 7 * 86_400)])]
        );
        assert!(converted.notes[0].contains("two archives of 1m"));
        assert!(converted
            .toml
            .contains("every metric keeps carbon's own default"));
    }

    #[test]
    fn set_names_are_directory_names_and_never_the_defaults() {
        let text = "[default]\npattern = ^a\\.\nretentions = 1m:1d\n\n\
                    [my schema/x]\npattern = ^b\\.\nretentions = 1m:1d\n\n\
                    [my schema x]\npattern = ^c\\.\nretentions = 1m:1d\n\n\
                    [..]\npattern = ^d\\.\nretentions = 1m:1d\n";
        let (config, _) = convert(text).unwrap();
        let names: Vec<&str> = config.sets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["default-2", "my_schema_x", "my_schema_x-2", "_.."]);
    }

    #[test]
    fn a_pattern_with_no_exact_glob_is_refused_naming_the_section_and_what_to_do() {
        let text = "[web]\npattern = ^servers\\.web\\d+\\.\nretentions = 1m:1d\n\n\
                    [dots]\npattern = ^carbon.agents\nretentions = 1m:1d\n\n\
                    [ok]\npattern = ^ok\\.\nretentions = 1m:1d\n";
        let err = convert(text).unwrap_err();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].starts_with("s.conf: [web] pattern = ^servers\\.web\\d+\\.: `\\d`"));
        assert!(lines[1].starts_with("s.conf: [dots] pattern = ^carbon.agents: a `.`"));
        for line in lines {
            assert!(line.contains("rewrite the pattern"), "{line}");
        }
        // An empty pattern is no catch-all: carbon skips the section.
        assert!(
            parse_schemas("[x]\npattern =\nretentions = 1m:1d\n", "s.conf")
                .unwrap_err()
                .contains("[x] has no pattern")
        );
        assert!(parse_schemas("[x]\nretentions = 1m:1d\n", "s.conf")
            .unwrap_err()
            .contains("s.conf:1"));
    }
}
