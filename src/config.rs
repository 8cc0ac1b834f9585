//! The tiers configuration: what `tiers.toml` holds ([`TiersConfig`]), the built-in default,
//! and the validation that refuses impossible tier sets with a sentence naming the file,
//! line and field.
//!
//! Parsing goes through private "raw" structs whose fields are [`toml::Spanned`], so every
//! refusal can point at the line of the offending key. Validation itself runs on the final
//! [`TiersConfig`], so a configuration built in code meets exactly the same rules.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::Error;
use crate::error::Result;
use crate::time::{Layout, PeriodChange, Span, Timestamp};

#[cfg(feature = "cli")]
pub(crate) mod carbon;
mod period_changes;
mod stored;
pub(crate) use period_changes::{boundary as period_change_boundary, record_period_changes};
#[cfg(feature = "cli")]
pub(crate) use stored::Difference;
pub(crate) use stored::{check_given, differences, rule_lists};

/// Default for [`EngineSettings::future_bound`]: one hour.
pub(crate) const DEFAULT_FUTURE_BOUND: Span = Span::from_secs(3_600);
/// Default for [`EngineSettings::series_per_chunk`].
pub(crate) const DEFAULT_SERIES_PER_CHUNK: u32 = 256;
/// Default for [`EngineSettings::max_points`].
pub(crate) const DEFAULT_MAX_POINTS: u32 = 1_500;
/// Default for [`TierSpec::create_ahead`] when `tiers.toml` leaves it out.
pub(crate) const DEFAULT_CREATE_AHEAD: u32 = 1;
/// The most future periods a tier may create ahead.
pub(crate) const MAX_CREATE_AHEAD: u32 = 64;

/// The longest resolution, period, retention or future bound accepted: about 1000 years.
/// Timestamps plus or minus such spans stay far from overflow, and period starts stay within
/// the years file names can spell.
pub(crate) const MAX_SPAN: Span = Span::from_secs(365_000 * 86_400);

/// The most buckets one period may hold; beyond this a single period file grows absurd
/// (10 million buckets are 305 MiB per series, 76 GiB per 256-series chunk).
pub(crate) const MAX_BUCKETS_PER_PERIOD: u32 = 10_000_000;
/// The smallest `series_per_chunk` allowed.
pub(crate) const MIN_SERIES_PER_CHUNK: u32 = 16;
/// The largest `series_per_chunk` allowed.
pub(crate) const MAX_SERIES_PER_CHUNK: u32 = 65_536;

/// The longest tier name: the period file header has room for this many bytes.
pub(crate) const TIER_NAME_MAX: usize = 32;

/// The label [`TiersConfig::validate`] gives as the "file" of a configuration built in code.
const IN_CODE_ORIGIN: &str = "<builder>";

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// One resolution at which samples are rolled up, and how its data is cut into files.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TierSpec {
    /// How queries and file names refer to the tier (for example "1m").
    pub name: String,
    /// Width of one bucket: every sample inside it is folded into the same rollup.
    pub resolution: Span,
    /// Span covered by one period file; files are created and dropped whole, so this is the
    /// unit of preallocation and of retention.
    pub period: Span,
    /// How far back the tier's data must stay queryable; a period file is dropped only once
    /// all of it is older than this.
    pub retention: Span,
    /// How many period files past the current one are created in advance, so the first
    /// sample of a new period does not wait for a file to be preallocated. 0 creates no
    /// future files: a new period's files come from the first write that needs them or the
    /// next maintenance pass, whichever is first.
    pub create_ahead: u32,
    /// The tier's periods before its period was changed, oldest first (`earlier_periods` in
    /// the data directory's stored tiers.toml): files cut before a change keep the period
    /// they were made with. Empty for a tier whose period never changed, and in a tiers file
    /// a person writes; an open that is given a new period records the old one here
    /// (docs/file-format.md, "Period changes").
    pub earlier_periods: Vec<PeriodChange>,
}

impl<'a> From<&'a TierSpec> for Layout<'a> {
    fn from(tier: &'a TierSpec) -> Layout<'a> {
        Layout {
            resolution: tier.resolution,
            period: tier.period,
            earlier: &tier.earlier_periods,
        }
    }
}

impl TierSpec {
    /// The first second the tier holds at `now`: the start of the period holding
    /// `now - retention`. Whole periods are dropped, so the window starts on a period boundary.
    pub fn window_start(&self, now: crate::time::Timestamp) -> crate::time::Timestamp {
        crate::time::window_start(now, self.retention, self)
    }

    /// Buckets in one period file of the current period: `period / resolution`. Meaningful
    /// for a validated tier; 0 when the resolution is zero and `u32::MAX` when the quotient
    /// does not fit. [`TierSpec::buckets_at`] gives a given file's.
    pub fn buckets_per_period(&self) -> u32 {
        buckets_of(self.period, self.resolution)
    }

    /// Buckets in the file that starts at `period_start`, whose period may be an earlier one.
    pub fn buckets_at(&self, period_start: Timestamp) -> u32 {
        buckets_of(self.period_at(period_start), self.resolution)
    }

    /// The start of the period holding `ts` (the name of its file).
    pub fn period_start(&self, ts: Timestamp) -> Timestamp {
        Layout::from(self).period_start(ts)
    }

    /// The period of the file that starts at `period_start`: the tier's, or an earlier one
    /// for a file cut before a period change.
    pub fn period_at(&self, period_start: Timestamp) -> Span {
        Layout::from(self).period_at(period_start)
    }

    /// The end of the file that starts at `period_start`: where the next one starts.
    pub fn period_end(&self, period_start: Timestamp) -> Timestamp {
        Layout::from(self).period_end(period_start)
    }

    /// The tier's first period: the one its oldest files have, which the layout fingerprint
    /// names (a period change only adds files after every existing one, so what the
    /// fingerprint guards, the meaning of a recorded tier, period start and bucket, holds).
    pub fn first_period(&self) -> Span {
        self.earlier_periods
            .first()
            .map_or(self.period, |c| c.period)
    }
}

/// `period / resolution` as a bucket count: 0 for a zero resolution, `u32::MAX` when it does
/// not fit.
fn buckets_of(period: Span, resolution: Span) -> u32 {
    let buckets = period.secs().checked_div(resolution.secs()).unwrap_or(0);
    u32::try_from(buckets).unwrap_or(u32::MAX)
}

/// The raw tier (`kind = "raw"`): the exact `(ts, value)` of each series' samples, kept in
/// 4 KiB segments of whole-period files beside the rollups (see `crate::storage::raw`).
/// It has no resolution; every sample still folds into every rollup tier.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RawTierSpec {
    /// How queries (`tier=raw`) and the directory name refer to it.
    pub name: String,
    /// Span covered by one group of segment files: the unit of preallocation and retention.
    pub period: Span,
    /// How far back points stay queryable; a period's files are dropped whole once all of it
    /// is older than this.
    pub retention: Span,
    /// Future periods whose segment files (a segment per series writing now) are created in
    /// advance, as for rollup tiers.
    pub create_ahead: u32,
    /// Skip a point whose value equals the series' last raw value (the seed's input filter:
    /// a follower count that did not change is not written again). Rollups still count it.
    pub dedupe_unchanged: bool,
}

impl RawTierSpec {
    /// The first second the raw tier holds at `now`, as [`TierSpec::window_start`].
    pub fn window_start(&self, now: crate::time::Timestamp) -> crate::time::Timestamp {
        crate::time::align_down(
            now.saturating_sub(self.retention.secs() as i64),
            self.period,
        )
    }
}

/// Settings that apply to the whole engine rather than to one tier (`[engine]`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EngineSettings {
    /// Samples more than this far past the clock's now are rejected (too_far_in_future), so
    /// a sender with a wrong clock cannot make the engine create far-future files.
    /// Default 1h.
    pub future_bound: Span,
    /// Series slots per chunk file; a power of two, 16..=65536. Default 256.
    pub series_per_chunk: u32,
    /// The point budget an `auto` tier choice stays within. Default 1500. Must be >= 1.
    pub max_points: u32,
}

impl Default for EngineSettings {
    /// `DEFAULT_FUTURE_BOUND`, `DEFAULT_SERIES_PER_CHUNK`, `DEFAULT_MAX_POINTS`.
    fn default() -> Self {
        EngineSettings {
            future_bound: DEFAULT_FUTURE_BOUND,
            series_per_chunk: DEFAULT_SERIES_PER_CHUNK,
            max_points: DEFAULT_MAX_POINTS,
        }
    }
}

/// Which series a rule picks: a series whose name matches one of `names` or that carries one
/// of `tags`. `[counters]` says which series are counters (unless a write declared its kind
/// explicitly; [`crate::counter`] applies the rules); a `[[set]]` which series keep its tiers.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SeriesRules {
    /// Globs over the series name (`*`, `?`, `[a-z]`), e.g. `*.if_octets.*`, `*_total`.
    pub names: Vec<String>,
    /// Tags as `(key, value)`, written `"k=v"` in the file, e.g. `type=counter`.
    pub tags: Vec<(String, String)>,
}

impl SeriesRules {
    /// True when no rule is set.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.tags.is_empty()
    }
}

/// Other tiers for the series that match (`[[set]]`), as a carbon storage-schemas section
/// gives its metrics their own retentions. A series' set is the first whose rules pick it
/// when the series is created, else the default set (the top-level `[[tier]]`s); the
/// registry records it, and it never changes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TierSet {
    /// How messages, statistics and the set's directory (`sets/<name>/`) name it.
    pub name: String,
    /// Which series the set takes.
    pub series: SeriesRules,
    /// Its rollup tiers, finest first by convention.
    pub tiers: Vec<TierSpec>,
}

/// The name the default set (the top-level `[[tier]]`s) goes by.
pub(crate) const DEFAULT_SET: &str = "default";

/// The most tier sets, the default one included: a series log record keeps a series' set
/// in one byte.
pub(crate) const MAX_SETS: usize = 256;

/// Everything `tiers.toml` configures: engine settings, counter rules and the tiers, finest
/// first by convention (the order is kept; placements are indexed by it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TiersConfig {
    /// Engine-wide settings (`[engine]`).
    pub engine: EngineSettings,
    /// Which series are counters (`[counters]`); none by default.
    pub counters: SeriesRules,
    /// The rollup tiers (`[[tier]]`), in file order: the default set's.
    pub tiers: Vec<TierSpec>,
    /// The raw tier (a `[[tier]]` with `kind = "raw"`), if configured; at most one.
    pub raw: Option<RawTierSpec>,
    /// Other tier sets (`[[set]]`), in file order; none by default. Set `i` here is set
    /// `i + 1` of [`TiersConfig::set_tiers`]; set 0 is the default one.
    pub sets: Vec<TierSet>,
}

impl Default for TiersConfig {
    /// The four shipped tiers, 1m/5m/1h/1d; the shipped `tiers.toml` says the same and a
    /// test keeps the two equal.
    fn default() -> Self {
        let tier = |name: &str, resolution: u64, period: u64, retention: u64| TierSpec {
            name: name.to_owned(),
            resolution: Span::from_secs(resolution),
            period: Span::from_secs(period),
            retention: Span::from_secs(retention),
            create_ahead: DEFAULT_CREATE_AHEAD,
            earlier_periods: Vec::new(),
        };
        TiersConfig {
            engine: EngineSettings::default(),
            counters: SeriesRules::default(),
            tiers: vec![
                tier("1m", MINUTE, 6 * HOUR, 48 * HOUR),
                tier("5m", 5 * MINUTE, DAY, 14 * DAY),
                tier("1h", HOUR, 10 * DAY, 90 * DAY),
                tier("1d", DAY, 73 * DAY, 1_825 * DAY),
            ],
            raw: None,
            sets: Vec::new(),
        }
    }
}

impl TiersConfig {
    /// A fingerprint of what gives tier indexes and cell positions their meaning: each tier's
    /// name, resolution and first period ([`TierSpec::first_period`]), every set's too, and
    /// the series per chunk. Files that record tier indexes (the counter journal) are only
    /// read back under the same fingerprint. A period change leaves it as it was: it only
    /// adds files after every existing one, so a recorded placement still means the same.
    pub fn layout_fingerprint(&self) -> u64 {
        let mut text = format!("{}", self.engine.series_per_chunk);
        for (set, tier) in self.all_tiers() {
            if set > 0 {
                text.push_str(&format!(";{}/", self.set_name(set)));
            }
            text.push_str(&format!(
                ";{}:{}:{}",
                tier.name,
                tier.resolution,
                tier.first_period()
            ));
        }
        u64::from(crc32fast::hash(text.as_bytes()))
    }

    /// The `[[set]]`s as a cluster's nodes compare them (`config.tier_sets`): each set's
    /// name, rules and tiers' layout (name, resolution, period) in file order, e.g.
    /// `short (names tmp.*; tags env=dev; tiers 1m 60s/21600s)`, or `none`. Retentions are
    /// left out: they may change as the default set's may.
    pub fn tier_sets_text(&self) -> String {
        if self.sets.is_empty() {
            return "none".to_owned();
        }
        let list = |items: Vec<String>| match items.is_empty() {
            true => "-".to_owned(),
            false => items.join(", "),
        };
        (self.sets.iter())
            .map(|set| {
                let names = list(set.series.names.clone());
                let tags = list(
                    set.series
                        .tags
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect(),
                );
                let tiers = list(
                    (set.tiers.iter())
                        .map(|t| {
                            let (resolution, period) = (t.resolution.secs(), t.period.secs());
                            format!("{} {resolution}s/{period}s", t.name)
                        })
                        .collect(),
                );
                format!("{} (names {names}; tags {tags}; tiers {tiers})", set.name)
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// How many tier sets there are, the default one included.
    pub fn set_count(&self) -> usize {
        1 + self.sets.len()
    }

    /// The name of set `set` ([`DEFAULT_SET`] for 0).
    pub fn set_name(&self, set: usize) -> &str {
        match set {
            0 => DEFAULT_SET,
            _ => &self.sets[set - 1].name,
        }
    }

    /// The rollup tiers of set `set`: the top-level ones for 0.
    pub fn set_tiers(&self, set: usize) -> &[TierSpec] {
        match set {
            0 => &self.tiers,
            _ => &self.sets[set - 1].tiers,
        }
    }

    /// Set `set`'s view: this configuration with that set's tiers as its rollup tiers and
    /// no `[[set]]`s, as a read of the set's series sees it.
    pub fn set_view(&self, set: usize) -> TiersConfig {
        TiersConfig {
            tiers: self.set_tiers(set).to_vec(),
            sets: Vec::new(),
            ..self.clone()
        }
    }

    /// The storage index of set `set`'s first tier: every set's tiers are numbered one
    /// after another, the default set's first, as the files and the writers know them.
    pub fn first_tier_of(&self, set: usize) -> usize {
        (0..set).map(|s| self.set_tiers(s).len()).sum()
    }

    /// The storage indexes of set `set`'s tiers (see [`TiersConfig::first_tier_of`]).
    pub fn tier_range(&self, set: usize) -> std::ops::Range<usize> {
        let first = self.first_tier_of(set);
        first..first + self.set_tiers(set).len()
    }

    /// Set `set`'s tiers, each with its storage index: the tiers a series of the set is
    /// stored in.
    pub fn indexed_set_tiers(&self, set: usize) -> impl Iterator<Item = (usize, &TierSpec)> + '_ {
        self.tier_range(set).zip(self.set_tiers(set))
    }

    /// Every set's tiers in storage order, each with its set.
    pub fn all_tiers(&self) -> impl Iterator<Item = (usize, &TierSpec)> + '_ {
        (0..self.set_count()).flat_map(move |set| self.set_tiers(set).iter().map(move |t| (set, t)))
    }

    /// How many tiers all sets have together: the storage's tier count.
    pub fn tier_count(&self) -> usize {
        self.all_tiers().count()
    }

    /// The tier at storage index `index`, with its set.
    ///
    /// # Panics
    /// When `index` is not below [`TiersConfig::tier_count`].
    pub fn tier_at(&self, index: usize) -> (usize, &TierSpec) {
        self.all_tiers()
            .nth(index)
            .unwrap_or_else(|| panic!("tier index {index} out of range"))
    }

    /// How messages and statistics name tier `tier` of set `set`: its name in the default
    /// set, `set/tier` in a `[[set]]`.
    pub fn tier_label(&self, set: usize, tier: &str) -> String {
        match set {
            0 => tier.to_owned(),
            _ => format!("{}/{tier}", self.set_name(set)),
        }
    }

    /// The set named `name`, if there is one ([`DEFAULT_SET`] is 0).
    pub fn set_index(&self, name: &str) -> Option<usize> {
        (0..self.set_count()).find(|&set| self.set_name(set) == name)
    }

    /// The shipped `tiers.toml`, documented key by key.
    pub const SHIPPED_TOML: &'static str = include_str!("../tiers.toml");

    /// Reads and validates a `tiers.toml`.
    ///
    /// # Errors
    /// [`Error::Io`] naming `path` when it cannot be read; [`Error::Config`] naming the file,
    /// line and field when its content is refused.
    pub fn load(path: &Path) -> Result<TiersConfig> {
        let text = std::fs::read_to_string(path).map_err(|err| Error::io(path, err))?;
        TiersConfig::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text; `origin` names it in error messages (a path, or
    /// `"<string>"`).
    ///
    /// # Errors
    /// [`Error::Config`] with the line and field of the first problem: bad TOML, an unknown
    /// key, a value of the wrong type, or any rule of [`TiersConfig::validate`].
    pub fn from_toml_str(text: &str, origin: &str) -> Result<TiersConfig> {
        let raw: RawConfig = toml::from_str(text).map_err(|err| toml_error(text, origin, &err))?;
        let located = Located { text, origin };
        let (config, lines) = raw.convert(&located)?;
        check(&config, origin, &|key| {
            lines.get(&key).map(|&start| line_of(text, start))
        })?;
        Ok(config)
    }

    /// Checks a configuration built in code against the same rules as parsing: at least one
    /// tier; names non-empty, unique, at most 32 bytes and made of `[A-Za-z0-9_.-]`;
    /// non-zero spans that fit in a timestamp; a resolution that divides the period evenly;
    /// a retention of at least one period; at most `MAX_BUCKETS_PER_PERIOD` buckets per
    /// period; a power-of-two `series_per_chunk` in 16..=65536; `max_points` >= 1; a
    /// non-zero `future_bound`; a raw tier, if any, named like a tier and unlike every
    /// rollup tier, with non-zero spans and a retention of at least one period.
    ///
    /// # Errors
    /// [`Error::Config`] for the first rule broken, with file `<builder>` and no line.
    pub fn validate(&self) -> Result<()> {
        check(self, IN_CODE_ORIGIN, &|_| None)
    }

    /// True when `name` is the raw tier's name.
    pub fn is_raw(&self, name: &str) -> bool {
        self.raw.as_ref().is_some_and(|raw| raw.name == name)
    }

    /// Index of the tier named `name`, if there is one.
    pub fn tier_index(&self, name: &str) -> Option<usize> {
        self.tiers.iter().position(|tier| tier.name == name)
    }
}

/// A field a validation error can be about; the parser records the byte offset of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Tiers,
    FutureBound,
    SeriesPerChunk,
    MaxPoints,
    Set(usize),
    Name(usize),
    Resolution(usize),
    Period(usize),
    Retention(usize),
    RawName,
    RawPeriod,
    RawRetention,
}

/// Finds the line of a [`Key`], when the configuration came from text.
type LineOf<'a> = dyn Fn(Key) -> Option<usize> + 'a;

/// The validation rules, shared by parsed and in-code configurations.
fn check(config: &TiersConfig, origin: &str, line_of: &LineOf<'_>) -> Result<()> {
    let refuse = |key: Key, field: String, message: String| Error::Config {
        file: origin.to_owned(),
        line: line_of(key),
        field,
        message,
    };

    let engine = &config.engine;
    if engine.future_bound.secs() == 0 {
        return Err(refuse(
            Key::FutureBound,
            "engine.future_bound".to_owned(),
            "future_bound must be more than 0s, or every sample stamped after now is refused"
                .to_owned(),
        ));
    }
    check_fits(engine.future_bound, "future_bound")
        .map_err(|message| refuse(Key::FutureBound, "engine.future_bound".to_owned(), message))?;
    if !series_per_chunk_ok(i64::from(engine.series_per_chunk)) {
        return Err(refuse(
            Key::SeriesPerChunk,
            "engine.series_per_chunk".to_owned(),
            series_per_chunk_message(i64::from(engine.series_per_chunk)),
        ));
    }
    if engine.max_points == 0 {
        return Err(refuse(
            Key::MaxPoints,
            "engine.max_points".to_owned(),
            max_points_message(0),
        ));
    }

    if config.tiers.is_empty() {
        return Err(refuse(
            Key::Tiers,
            "tier".to_owned(),
            "at least one [[tier]] is needed, or samples have nowhere to go".to_owned(),
        ));
    }
    let first_index_of_name = check_tiers(&config.tiers, 0, "", &refuse)?;
    check_sets(config, &refuse)?;
    if let Some(raw) = &config.raw {
        check_raw(raw, &first_index_of_name, &refuse)?;
    }
    Ok(())
}

/// The rules a tier's recorded earlier periods meet: each a non-zero period the resolution
/// divides, of at most `MAX_BUCKETS_PER_PERIOD` buckets; each `until` after the previous one
/// and a whole number of its period after it (after the epoch for the first), so the files
/// of each range tile it.
fn check_earlier_periods(tier: &TierSpec) -> std::result::Result<(), String> {
    let mut anchor: Timestamp = 0;
    for (at, change) in tier.earlier_periods.iter().enumerate() {
        let period = change.period.secs();
        check_fits(change.period, "period")?;
        if period == 0 || !period.is_multiple_of(tier.resolution.secs()) {
            return Err(format!(
                "earlier period {} (the {at}th) is not a whole number of resolutions {}",
                change.period, tier.resolution
            ));
        }
        if period / tier.resolution.secs() > u64::from(MAX_BUCKETS_PER_PERIOD) {
            return Err(format!(
                "earlier period {} holds more than {MAX_BUCKETS_PER_PERIOD} buckets",
                change.period
            ));
        }
        let grid = i64::try_from(period).unwrap_or(i64::MAX);
        let after = change.until.checked_sub(anchor);
        if at > 0 && after.is_none_or(|d| d <= 0) || after.is_none_or(|d| d.rem_euclid(grid) != 0) {
            return Err(format!(
                "earlier period {} ends at {} ({}), which is not after the previous change or \
                 not on its grid (a whole number of {} after {})",
                change.period,
                change.until,
                crate::time::format_ts(change.until),
                change.period,
                crate::time::format_ts(anchor)
            ));
        }
        anchor = change.until;
    }
    Ok(())
}

/// The rules every rollup tier list meets (the default set's, each `[[set]]`'s): names
/// non-empty, unique within the list, at most 32 bytes of `[A-Za-z0-9_.-]`; spans non-zero
/// and fitting; a resolution dividing the period; a retention of at least one period; at
/// most `MAX_BUCKETS_PER_PERIOD` buckets per period. `first` is the storage index of the
/// list's first tier (the parser keys lines by it), `prefix` what field names start with.
/// Returns each name's place in the list.
fn check_tiers<'c>(
    tiers: &'c [TierSpec],
    first: usize,
    prefix: &str,
    refuse: &dyn Fn(Key, String, String) -> Error,
) -> Result<HashMap<&'c str, usize>> {
    let mut first_index_of_name: HashMap<&str, usize> = HashMap::new();
    for (at, tier) in tiers.iter().enumerate() {
        let index = first + at;
        let tier_field = |index: usize, name: &str, key: &str| {
            format!("{prefix}{}", tier_field(index - first, name, key))
        };
        // Always by index: the name is what is wrong, or what two tiers share.
        let name_field = format!("{prefix}tier[{at}] name");
        if tier.name.is_empty() {
            return Err(refuse(
                Key::Name(index),
                name_field,
                "a tier needs a non-empty name".to_owned(),
            ));
        }
        if !name_chars_ok(&tier.name) {
            return Err(refuse(
                Key::Name(index),
                name_field,
                format!(
                    "tier name {:?} may only contain letters, digits, '_', '.' and '-', and \
                     not only dots (it becomes a directory name)",
                    tier.name
                ),
            ));
        }
        if tier.name.len() > TIER_NAME_MAX {
            return Err(refuse(
                Key::Name(index),
                name_field,
                format!(
                    "tier name {:?} is longer than {} bytes (period file headers record it)",
                    tier.name, TIER_NAME_MAX
                ),
            ));
        }
        if let Some(&earlier) = first_index_of_name.get(tier.name.as_str()) {
            return Err(refuse(
                Key::Name(index),
                name_field,
                format!(
                    "tier name {:?} is already used by tier[{earlier}]; names must be unique",
                    tier.name
                ),
            ));
        }
        first_index_of_name.insert(&tier.name, at);
        if tier.create_ahead > MAX_CREATE_AHEAD {
            return Err(refuse(
                Key::Name(index),
                tier_field(index, &tier.name, "create_ahead"),
                format!(
                    "create_ahead {} is too large (at most {MAX_CREATE_AHEAD})",
                    tier.create_ahead
                ),
            ));
        }

        let spans = [
            (Key::Resolution(index), "resolution", tier.resolution),
            (Key::Period(index), "period", tier.period),
            (Key::Retention(index), "retention", tier.retention),
        ];
        for (key, what, span) in spans {
            let field = || tier_field(index, &tier.name, what);
            if span.secs() == 0 {
                return Err(refuse(key, field(), format!("{what} must be more than 0s")));
            }
            check_fits(span, what).map_err(|message| refuse(key, field(), message))?;
        }
        if !tier.period.secs().is_multiple_of(tier.resolution.secs()) {
            return Err(refuse(
                Key::Resolution(index),
                tier_field(index, &tier.name, "resolution"),
                format!(
                    "resolution {} does not divide the period {} evenly",
                    tier.resolution, tier.period
                ),
            ));
        }
        if tier.retention < tier.period {
            return Err(refuse(
                Key::Retention(index),
                tier_field(index, &tier.name, "retention"),
                format!(
                    "retention {} is shorter than one period ({}); period files are dropped \
                     whole, so retention must cover at least one",
                    tier.retention, tier.period
                ),
            ));
        }
        let buckets = tier.period.secs() / tier.resolution.secs();
        if buckets > u64::from(MAX_BUCKETS_PER_PERIOD) {
            return Err(refuse(
                Key::Period(index),
                tier_field(index, &tier.name, "period"),
                format!(
                    "period {} holds {buckets} buckets of {}; at most {MAX_BUCKETS_PER_PERIOD} \
                     are allowed per file, so use a shorter period",
                    tier.period, tier.resolution
                ),
            ));
        }
        check_earlier_periods(tier).map_err(|message| {
            refuse(
                Key::Period(index),
                tier_field(index, &tier.name, "earlier_periods"),
                message,
            )
        })?;
    }
    Ok(first_index_of_name)
}

/// The rules of `[[set]]`s: a name like a tier's, unique, not [`DEFAULT_SET`]; at least
/// one rule (a set no series can match keeps nothing); at least one tier, each meeting
/// [`check_tiers`]; at most [`MAX_SETS`] sets in all.
fn check_sets(config: &TiersConfig, refuse: &dyn Fn(Key, String, String) -> Error) -> Result<()> {
    if config.set_count() > MAX_SETS {
        return Err(refuse(
            Key::Set(MAX_SETS - 1),
            "set".to_owned(),
            format!(
                "{} tier sets are configured; at most {} are allowed beside the default one",
                config.sets.len(),
                MAX_SETS - 1
            ),
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (at, set) in config.sets.iter().enumerate() {
        let field = format!("set[{at}] name");
        if set.name.is_empty() || !name_chars_ok(&set.name) || set.name.len() > TIER_NAME_MAX {
            return Err(refuse(
                Key::Set(at),
                field,
                format!(
                    "set name {:?} must be 1 to {TIER_NAME_MAX} bytes of letters, digits, '_', \
                     '.' and '-', not only dots (it becomes a directory name)",
                    set.name
                ),
            ));
        }
        if set.name == DEFAULT_SET {
            return Err(refuse(
                Key::Set(at),
                field,
                format!("{DEFAULT_SET:?} names the top-level [[tier]]s; give the set another name"),
            ));
        }
        if let Some(&earlier) = seen.get(set.name.as_str()) {
            return Err(refuse(
                Key::Set(at),
                field,
                format!(
                    "set name {:?} is already used by set[{earlier}]; names must be unique",
                    set.name
                ),
            ));
        }
        seen.insert(&set.name, at);
        let prefix = format!("set {:?} ", set.name);
        if set.series.is_empty() {
            return Err(refuse(
                Key::Set(at),
                format!("{prefix}names"),
                "a set needs names or tags, or no series ever keeps its tiers".to_owned(),
            ));
        }
        if set.tiers.is_empty() {
            return Err(refuse(
                Key::Set(at),
                format!("{prefix}tier"),
                "a set needs at least one [[set.tier]], or its samples have nowhere to go"
                    .to_owned(),
            ));
        }
        check_tiers(&set.tiers, config.first_tier_of(at + 1), &prefix, refuse)?;
    }
    Ok(())
}

/// The raw tier's rules: a name like a rollup tier's and unused by any of them, non-zero
/// spans that fit, a retention of at least one period.
fn check_raw(
    raw: &RawTierSpec,
    rollup_names: &HashMap<&str, usize>,
    refuse: &dyn Fn(Key, String, String) -> Error,
) -> Result<()> {
    let field = |key: &str| format!("raw tier {:?} {key}", raw.name);
    if raw.name.is_empty() || !name_chars_ok(&raw.name) || raw.name.len() > TIER_NAME_MAX {
        return Err(refuse(
            Key::RawName,
            "raw tier name".to_owned(),
            format!(
                "raw tier name {:?} must be 1 to {TIER_NAME_MAX} bytes of letters, digits, '_', \
                 '.' and '-', not only dots (it becomes a directory name)",
                raw.name
            ),
        ));
    }
    if let Some(&index) = rollup_names.get(raw.name.as_str()) {
        return Err(refuse(
            Key::RawName,
            field("name"),
            format!(
                "tier name {:?} is already used by tier[{index}]; names must be unique",
                raw.name
            ),
        ));
    }
    if raw.create_ahead > MAX_CREATE_AHEAD {
        return Err(refuse(
            Key::RawName,
            field("create_ahead"),
            format!(
                "create_ahead {} is too large (at most {MAX_CREATE_AHEAD})",
                raw.create_ahead
            ),
        ));
    }
    for (key, what, span) in [
        (Key::RawPeriod, "period", raw.period),
        (Key::RawRetention, "retention", raw.retention),
    ] {
        if span.secs() == 0 {
            return Err(refuse(
                key,
                field(what),
                format!("{what} must be more than 0s"),
            ));
        }
        check_fits(span, what).map_err(|message| refuse(key, field(what), message))?;
    }
    if raw.retention < raw.period {
        return Err(refuse(
            Key::RawRetention,
            field("retention"),
            format!(
                "retention {} is shorter than one period ({}); period files are dropped \
                 whole, so retention must cover at least one",
                raw.retention, raw.period
            ),
        ));
    }
    Ok(())
}

/// Refuses spans that cannot be added to a timestamp.
fn check_fits(span: Span, what: &str) -> std::result::Result<(), String> {
    if span > MAX_SPAN {
        return Err(format!(
            "{what} {span} is longer than the longest span tierdb accepts ({MAX_SPAN}, about 1000 years)"
        ));
    }
    Ok(())
}

/// Letters, digits, `_`, `.` and `-`, and not only dots: tier and set names become
/// directory names, and `.` and `..` name other directories.
fn name_chars_ok(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && !name.bytes().all(|b| b == b'.')
}

fn series_per_chunk_ok(value: i64) -> bool {
    (i64::from(MIN_SERIES_PER_CHUNK)..=i64::from(MAX_SERIES_PER_CHUNK)).contains(&value)
        && value.count_ones() == 1
}

fn series_per_chunk_message(value: i64) -> String {
    format!(
        "series_per_chunk {value} is not a power of two between {MIN_SERIES_PER_CHUNK} and \
         {MAX_SERIES_PER_CHUNK}"
    )
}

fn max_points_message(value: i64) -> String {
    if value < 1 {
        format!("max_points {value} must be at least 1")
    } else {
        format!("max_points {value} is too large (at most {})", u32::MAX)
    }
}

/// The field name of a tier's key: `tier "1m" resolution` once the tier has a usable name,
/// `tier[2] resolution` (0-based, file order) before that.
fn tier_field(index: usize, name: &str, key: &str) -> String {
    if !name.is_empty() && name_chars_ok(name) {
        format!("tier {name:?} {key}")
    } else {
        format!("tier[{index}] {key}")
    }
}

/// 1-based line of the byte at `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Text being parsed, with its name for messages.
struct Located<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Located<'_> {
    fn refuse(&self, offset: usize, field: String, message: String) -> Error {
        Error::Config {
            file: self.origin.to_owned(),
            line: Some(line_of(self.text, offset)),
            field,
            message,
        }
    }
}

/// A TOML syntax, type or unknown-key error, turned into [`Error::Config`] with the line from
/// the error's span and a field name worked out from the text around it.
fn toml_error(text: &str, origin: &str, err: &toml::de::Error) -> Error {
    let (line, field) = match err.span() {
        Some(span) => (Some(line_of(text, span.start)), field_at(text, span.start)),
        None => (None, "tiers".to_owned()),
    };
    Error::Config {
        file: origin.to_owned(),
        line,
        field,
        message: err.message().trim_end().to_owned(),
    }
}

/// Names the key at byte `offset` the way validation errors do (`engine.max_points`,
/// `tier[1] resolution`), from the line's key and the last table header before it. A
/// best-effort reading of the text, used only for errors TOML itself reports.
fn field_at(text: &str, offset: usize) -> String {
    let end = offset.min(text.len());
    let line_start = text[..end].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
    let line = text[line_start..line_end].trim();

    let mut table: Option<String> = None;
    let mut tiers_seen = 0usize;
    for header in text[..line_end].lines().map(str::trim) {
        if !header.starts_with('[') {
            continue;
        }
        let inner: String = header
            .split('#')
            .next()
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        table = Some(if inner == "[[tier]]" {
            tiers_seen += 1;
            format!("tier[{}]", tiers_seen - 1)
        } else {
            inner.trim_matches(['[', ']']).to_owned()
        });
    }

    let key = if line.starts_with('[') {
        None
    } else {
        let key = line.split('=').next().unwrap_or_default().trim();
        (!key.is_empty()).then_some(key)
    };
    match (table, key) {
        (Some(table), Some(key)) if table.starts_with("tier[") => format!("{table} {key}"),
        (Some(table), Some(key)) => format!("{table}.{key}"),
        (Some(table), None) => table,
        (None, Some(key)) => key.to_owned(),
        (None, None) => "tiers".to_owned(),
    }
}

/// `tiers.toml` as written, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    engine: Option<RawEngine>,
    counters: Option<RawRules>,
    tier: Option<Spanned<Vec<RawTier>>>,
    set: Option<Vec<RawSet>>,
}

/// `[engine]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    future_bound: Option<Spanned<String>>,
    series_per_chunk: Option<Spanned<i64>>,
    max_points: Option<Spanned<i64>>,
}

/// `[counters]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRules {
    names: Option<Vec<String>>,
    tags: Option<Vec<Spanned<String>>>,
}

/// One `[[set]]` as written: its rules beside its name, its tiers as `[[set.tier]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSet {
    name: Spanned<String>,
    names: Option<Vec<String>>,
    tags: Option<Vec<Spanned<String>>>,
    tier: Option<Vec<RawTier>>,
}

impl RawRules {
    /// The rules, each tag split at its `=`; `table` names the table in a refusal.
    fn convert(self, at: &Located<'_>, table: &str) -> Result<SeriesRules> {
        let mut rules = SeriesRules {
            names: self.names.unwrap_or_default(),
            tags: Vec::new(),
        };
        for tag in self.tags.unwrap_or_default() {
            let pair = tag
                .get_ref()
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| {
                    at.refuse(
                        tag.span().start,
                        format!("{table}.tags"),
                        format!("tag {:?} is not k=v", tag.get_ref()),
                    )
                })?;
            rules.tags.push((pair.0.to_owned(), pair.1.to_owned()));
        }
        Ok(rules)
    }
}

/// One `[[tier]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    name: Spanned<String>,
    /// `"rollup"` (the default) or `"raw"`.
    kind: Option<Spanned<String>>,
    resolution: Option<Spanned<String>>,
    period: Spanned<String>,
    retention: Spanned<String>,
    create_ahead: Option<Spanned<i64>>,
    dedupe_unchanged: Option<Spanned<bool>>,
    /// A rollup tier's periods before a period change, as a data directory records them.
    earlier_periods: Option<Spanned<Vec<RawPeriodChange>>>,
}

/// One of `earlier_periods`, as written: `{ until = 1765152000, period = "6h" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeriodChange {
    until: i64,
    period: String,
}

/// A `[[tier]]` after its kind is known.
enum AnyTier {
    Rollup(TierSpec),
    Raw(RawTierSpec),
}

impl RawConfig {
    /// Turns the text's values into typed ones, refusing what cannot be represented (bad
    /// durations, negative counts), and records where each key was.
    fn convert(self, at: &Located<'_>) -> Result<(TiersConfig, HashMap<Key, usize>)> {
        let mut lines = HashMap::new();
        let mut engine = EngineSettings::default();
        if let Some(raw) = self.engine {
            if let Some(value) = raw.future_bound {
                lines.insert(Key::FutureBound, value.span().start);
                engine.future_bound = parse_span(at, &value, "engine.future_bound".to_owned())?;
            }
            if let Some(value) = raw.series_per_chunk {
                lines.insert(Key::SeriesPerChunk, value.span().start);
                let number = *value.get_ref();
                engine.series_per_chunk = u32::try_from(number).map_err(|_| {
                    at.refuse(
                        value.span().start,
                        "engine.series_per_chunk".to_owned(),
                        series_per_chunk_message(number),
                    )
                })?;
            }
            if let Some(value) = raw.max_points {
                lines.insert(Key::MaxPoints, value.span().start);
                let number = *value.get_ref();
                engine.max_points = u32::try_from(number).map_err(|_| {
                    at.refuse(
                        value.span().start,
                        "engine.max_points".to_owned(),
                        max_points_message(number),
                    )
                })?;
            }
        }

        let counters = match self.counters {
            Some(raw) => raw.convert(at, "counters")?,
            None => SeriesRules::default(),
        };

        let mut tiers = Vec::new();
        let mut raw_tier = None;
        if let Some(raw_tiers) = self.tier {
            lines.insert(Key::Tiers, raw_tiers.span().start);
            for written in raw_tiers.into_inner() {
                let name_at = written.name.span().start;
                match written.convert(tiers.len(), (tiers.len(), ""), at, &mut lines)? {
                    AnyTier::Rollup(tier) => tiers.push(tier),
                    AnyTier::Raw(_) if raw_tier.is_some() => {
                        return Err(at.refuse(
                            name_at,
                            "tier kind".to_owned(),
                            "only one [[tier]] may have kind = \"raw\"".to_owned(),
                        ));
                    }
                    AnyTier::Raw(raw) => raw_tier = Some(raw),
                }
            }
        }
        let mut sets = Vec::new();
        let mut first = tiers.len();
        for (index, written) in self.set.unwrap_or_default().into_iter().enumerate() {
            lines.insert(Key::Set(index), written.name.span().start);
            let name = written.name.get_ref().clone();
            let series = RawRules {
                names: written.names,
                tags: written.tags,
            }
            .convert(at, &format!("set {name:?}"))?;
            let mut set_tiers = Vec::new();
            let prefix = format!("set {name:?} ");
            for tier in written.tier.unwrap_or_default() {
                let name_at = tier.name.span().start;
                let local = (set_tiers.len(), prefix.as_str());
                match tier.convert(first + set_tiers.len(), local, at, &mut lines)? {
                    AnyTier::Rollup(tier) => set_tiers.push(tier),
                    AnyTier::Raw(_) => {
                        return Err(at.refuse(
                            name_at,
                            format!("set {name:?} tier kind"),
                            "a set keeps rollup tiers only; the raw tier, a top-level [[tier]], \
                             keeps the default set's points"
                                .to_owned(),
                        ));
                    }
                }
            }
            first += set_tiers.len();
            sets.push(TierSet {
                name,
                series,
                tiers: set_tiers,
            });
        }
        Ok((
            TiersConfig {
                engine,
                counters,
                tiers,
                raw: raw_tier,
                sets,
            },
            lines,
        ))
    }
}

impl RawTier {
    /// The tier, typed. `index` is its storage index (lines are keyed by it), `local` its
    /// place in its own list and `prefix` what its field names start with (`set "x" `).
    fn convert(
        self,
        index: usize,
        (local, prefix): (usize, &str),
        at: &Located<'_>,
        lines: &mut HashMap<Key, usize>,
    ) -> Result<AnyTier> {
        let name = self.name.get_ref().clone();
        let field = |key: &str| format!("{prefix}{}", tier_field(local, &name, key));
        let raw = match &self.kind {
            None => false,
            Some(kind) => match kind.get_ref().as_str() {
                "rollup" => false,
                "raw" => true,
                other => {
                    return Err(at.refuse(
                        kind.span().start,
                        field("kind"),
                        format!("kind {other:?} is not \"rollup\" or \"raw\""),
                    ))
                }
            },
        };
        let create_ahead = match self.create_ahead {
            None => DEFAULT_CREATE_AHEAD,
            Some(value) => {
                let number = *value.get_ref();
                match u32::try_from(number) {
                    Ok(n) if n <= MAX_CREATE_AHEAD => n,
                    _ => {
                        let message = if number < 0 {
                            format!("create_ahead {number} must be 0 or more")
                        } else {
                            format!(
                                "create_ahead {number} is too large (at most {MAX_CREATE_AHEAD})"
                            )
                        };
                        return Err(at.refuse(value.span().start, field("create_ahead"), message));
                    }
                }
            }
        };
        if let (true, Some(list)) = (raw, &self.earlier_periods) {
            return Err(at.refuse(
                list.span().start,
                field("earlier_periods"),
                "a raw tier's period cannot be changed, so it has no earlier periods".to_owned(),
            ));
        }
        if raw {
            if let Some(resolution) = &self.resolution {
                return Err(at.refuse(
                    resolution.span().start,
                    field("resolution"),
                    "a raw tier keeps exact points and has no resolution".to_owned(),
                ));
            }
            lines.insert(Key::RawName, self.name.span().start);
            lines.insert(Key::RawPeriod, self.period.span().start);
            lines.insert(Key::RawRetention, self.retention.span().start);
            return Ok(AnyTier::Raw(RawTierSpec {
                period: parse_span(at, &self.period, field("period"))?,
                retention: parse_span(at, &self.retention, field("retention"))?,
                create_ahead,
                dedupe_unchanged: self.dedupe_unchanged.is_some_and(|d| *d.get_ref()),
                name,
            }));
        }
        let earlier_periods = match &self.earlier_periods {
            None => Vec::new(),
            Some(list) => (list.get_ref().iter())
                .map(|change| {
                    let period = Span::parse(&change.period).map_err(|message| {
                        at.refuse(list.span().start, field("earlier_periods"), message)
                    })?;
                    Ok(PeriodChange {
                        until: change.until,
                        period,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        if let Some(dedupe) = &self.dedupe_unchanged {
            return Err(at.refuse(
                dedupe.span().start,
                field("dedupe_unchanged"),
                "dedupe_unchanged applies only to a tier with kind = \"raw\"".to_owned(),
            ));
        }
        let Some(resolution) = &self.resolution else {
            return Err(at.refuse(
                self.name.span().start,
                field("resolution"),
                "a rollup tier needs a resolution".to_owned(),
            ));
        };
        lines.insert(Key::Name(index), self.name.span().start);
        lines.insert(Key::Resolution(index), resolution.span().start);
        lines.insert(Key::Period(index), self.period.span().start);
        lines.insert(Key::Retention(index), self.retention.span().start);
        Ok(AnyTier::Rollup(TierSpec {
            resolution: parse_span(at, resolution, field("resolution"))?,
            period: parse_span(at, &self.period, field("period"))?,
            retention: parse_span(at, &self.retention, field("retention"))?,
            create_ahead,
            earlier_periods,
            name,
        }))
    }
}

fn parse_span(at: &Located<'_>, value: &Spanned<String>, field: String) -> Result<Span> {
    Span::parse(value.get_ref()).map_err(|message| at.refuse(value.span().start, field, message))
}

#[cfg(test)]
mod tests;
