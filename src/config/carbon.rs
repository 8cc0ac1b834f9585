//! Carbon's `storage-schemas.conf` (and `storage-aggregation.conf`) read and turned into a
//! `tiers.toml`: `tierdb tiers --from-storage-schemas`. Carbon gives each metric the
//! archives of the first section whose pattern matches its name; tierdb has one set of
//! tiers for every series. When all sections agree, the tiers are exactly their archives;
//! when they differ, the tiers are every resolution any section has, each kept as long as
//! the longest section keeps it, and the file says so at its top (see
//! [`tiers_toml`]).

use crate::time::Span;

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
        let pattern = get("pattern")
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

/// A tiers.toml for `schemas` (with `aggregation`'s rules as notes), and whether one file
/// could express them exactly (every section the same archives). The tiers are every
/// resolution of any section, finest first, each with the longest retention any section
/// gives it.
pub(crate) fn tiers_toml(
    schemas: &[Schema],
    aggregation: &[AggregationRule],
    origin: &str,
) -> (String, bool) {
    let mut tiers: std::collections::BTreeMap<u64, u64> = Default::default();
    for schema in schemas {
        for &(step, retention) in &schema.archives {
            let kept = tiers.entry(step).or_insert(0);
            *kept = (*kept).max(retention);
        }
    }
    let exact = schemas.windows(2).all(|w| w[0].archives == w[1].archives);
    let mut out =
        format!("# tiers.toml made by `tierdb tiers --from-storage-schemas {origin}`.\n#\n");
    if exact {
        out.push_str(
            "# Every section of the schemas keeps the same archives, so these tiers are exactly\n\
             # them: a tier per archive, same resolution, kept at least as long (whole periods\n\
             # are dropped, so up to one period more).\n",
        );
    } else {
        out.push_str(
            "# NOT EXACT: carbon gives each metric the archives of the first section whose\n\
             # pattern matches it, and these sections differ; tierdb keeps one set of tiers for\n\
             # every series. These tiers are every resolution any section has, each kept as\n\
             # long as the longest section keeps it, so no series loses history, but series of\n\
             # the shorter sections use more disk, and a range read from a tier their section\n\
             # did not have shows no points for them. To keep carbon's split, run one tierdb\n\
             # (one data directory, one tiers.toml) per section and point carbon-relay's rules\n\
             # at each. The sections:\n",
        );
        for schema in schemas {
            let archives: Vec<String> = (schema.archives.iter())
                .map(|&(s, r)| format!("{}:{}", Span::from_secs(s), Span::from_secs(r)))
                .collect();
            out.push_str(&format!(
                "#   [{}] pattern = {}: {}\n",
                schema.name,
                schema.pattern,
                archives.join(",")
            ));
        }
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
    out.push('\n');
    for (&step, &retention) in &tiers {
        let period = period_for(step, retention);
        out.push_str(&format!(
            "[[tier]]\nname = \"{}\"\nresolution = \"{}\"\nperiod = \"{}\"\nretention = \"{}\"\ncreate_ahead = 1\n\n",
            Span::from_secs(step),
            Span::from_secs(step),
            Span::from_secs(period),
            Span::from_secs(retention)
        ));
    }
    (out, exact)
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

    #[test]
    fn one_schema_gives_its_archives_as_tiers_and_several_say_they_are_not_exact() {
        let text = "[carbon]\npattern = ^carbon\\.\nretentions = 60:90d\n\n\
                    [default]\npattern = .*\nretentions = 1m:7d,5m:30d,1h:1y\n";
        let schemas = parse_schemas(text, "s.conf").unwrap();
        let (toml, exact) = tiers_toml(&schemas[1..], &[], "s.conf");
        assert!(exact);
        let config = TiersConfig::from_toml_str(&toml, "out").unwrap();
        let tiers: Vec<(String, u64)> = (config.tiers.iter())
            .map(|t| (t.name.clone(), t.retention.secs()))
            .collect();
        assert_eq!(
            tiers,
            [
                ("1m".into(), 7 * 86_400),
                ("5m".into(), 30 * 86_400),
                ("1h".into(), 365 * 86_400)
            ]
        );
        let (toml, exact) = tiers_toml(&schemas, &[], "s.conf");
        assert!(!exact && toml.contains("NOT EXACT"));
        let config = TiersConfig::from_toml_str(&toml, "out").unwrap();
        assert_eq!(config.tiers[0].retention.secs(), 90 * 86_400);
        assert!(parse_schemas("[x]\nretentions = 1m:1d\n", "s.conf")
            .unwrap_err()
            .contains("s.conf:1"));
    }
}
