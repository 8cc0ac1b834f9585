//! What a series text that names no series may have meant: the series with its name and at
//! least its tags, else series with a near name. Bounded, so an unknown name costs one pass
//! over the keys for the first and at most [`NEAR_SCAN`] keys for the second.

use super::{Registry, SeriesId, SeriesKey, TagFilter};
use crate::error::Result;

/// Keys the near-name search looks at, at most.
pub(crate) const NEAR_SCAN: usize = 200_000;
/// How many candidates an unknown series' message lists (the CLI's and the HTTP API's).
#[cfg(feature = "server")]
pub(crate) const SUGGESTIONS: usize = 5;
/// Largest edit distance a near name may have.
const NEAR_DISTANCE: usize = 3;
/// Names longer than this are compared by prefix and suffix only.
const NEAR_MAX_LEN: usize = 256;

/// The series a text may have meant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Candidates {
    /// Series with the text's name whose tags include the text's tags and pass the extra
    /// filters, in id order: at most the `limit` asked for.
    pub same_name: Vec<(SeriesId, SeriesKey)>,
    /// How many series have the name and tags, `same_name` being the first of them.
    pub same_name_total: usize,
    /// When `same_name` is empty: one series for each of the nearest names (an edit
    /// distance of at most 3, or the text's name as a dotted prefix or suffix), nearest
    /// first, at most `limit`.
    pub near: Vec<SeriesKey>,
}

impl Candidates {
    /// What to tell a person who named no series: the series with the name (`2 series have
    /// that name and those tags: 'a{x=1}', 'a{x=2}'`), else the near names (`series with a
    /// near name: 'b'`); `None` when there are neither.
    pub fn hint(&self) -> Option<String> {
        let list = |keys: Vec<&SeriesKey>| {
            let quoted: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
            quoted.join(", ")
        };
        if !self.same_name.is_empty() {
            let more = if self.same_name_total > self.same_name.len() {
                ", ..."
            } else {
                ""
            };
            let have = if self.same_name_total == 1 {
                "has"
            } else {
                "have"
            };
            return Some(format!(
                "{} series {have} that name and those tags: {}{more}",
                self.same_name_total,
                list(self.same_name.iter().map(|(_, k)| k).collect())
            ));
        }
        (!self.near.is_empty()).then(|| {
            format!(
                "series with a near name: {}",
                list(self.near.iter().collect())
            )
        })
    }
}

impl Registry {
    /// The series `text` (a key in canonical or Graphite form) with `filters` may have meant;
    /// see [`Candidates`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidSeries`] when `text` is not a series key.
    pub fn candidates(
        &self,
        text: &str,
        filters: &[TagFilter],
        limit: usize,
    ) -> Result<Candidates> {
        let wanted = SeriesKey::parse(text)?;
        let name = wanted.name().into_owned();
        let tags: Vec<(String, String)> = wanted
            .tags()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let mut ids = self.select(|id, key| {
            let fits = key.name() == name
                && tags
                    .iter()
                    .all(|(k, v)| key.tag(k).as_deref() == Some(v.as_str()))
                && filters.iter().all(|f| f.accepts(key));
            fits.then_some(id)
        });
        let same_name_total = ids.len();
        ids.truncate(limit);
        let same_name = ids
            .into_iter()
            .filter_map(|id| self.key(id).map(|key| (id, key)))
            .collect::<Vec<_>>();
        let near = if same_name.is_empty() {
            self.near_names(&name, limit)
        } else {
            Vec::new()
        };
        Ok(Candidates {
            same_name,
            same_name_total,
            near,
        })
    }

    /// One key for each of the names nearest `name` among the first [`NEAR_SCAN`] keys.
    fn near_names(&self, name: &str, limit: usize) -> Vec<SeriesKey> {
        let mut best: Vec<(usize, String, SeriesId)> = Vec::new();
        self.for_each_in(0..NEAR_SCAN, |id, key| {
            let other = key.name();
            if other == name || best.iter().any(|(_, n, _)| n.as_str() == other) {
                return;
            }
            if let Some(distance) = nearness(name, &other) {
                best.push((distance, other.into_owned(), id));
                best.sort_by_key(|(d, _, _)| *d);
                best.truncate(limit.max(1));
            }
        });
        best.into_iter()
            .filter_map(|(_, _, id)| self.key(id))
            .take(limit)
            .collect()
    }
}

/// How near `other` is to the typed `name`: 1 when one is the other with dotted segments
/// added in front or behind (`requests` and `app.requests`), else the edit distance when at
/// most [`NEAR_DISTANCE`]; `None` when not near.
fn nearness(name: &str, other: &str) -> Option<usize> {
    let dotted = |long: &str, short: &str| {
        long.len() > short.len()
            && ((long.ends_with(short) && long[..long.len() - short.len()].ends_with('.'))
                || (long.starts_with(short) && long[short.len()..].starts_with('.')))
    };
    if !name.is_empty() && (dotted(other, name) || dotted(name, other)) {
        return Some(1);
    }
    if name.len().abs_diff(other.len()) > NEAR_DISTANCE
        || name.len() > NEAR_MAX_LEN
        || other.len() > NEAR_MAX_LEN
    {
        return None;
    }
    edit_distance(name.as_bytes(), other.as_bytes(), NEAR_DISTANCE)
}

/// Levenshtein distance over bytes when at most `max`, else `None`; only the band of width
/// `2 * max + 1` around the diagonal is computed.
fn edit_distance(a: &[u8], b: &[u8], max: usize) -> Option<usize> {
    let far = max + 1;
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![far; b.len() + 1];
    for i in 1..=a.len() {
        current.fill(far);
        current[0] = i;
        let low = i.saturating_sub(max).max(1);
        let high = (i + max).min(b.len());
        for j in low..=high {
            let substitute = previous[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            current[j] = substitute
                .min(previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(far);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    let distance = previous[b.len()];
    (distance <= max).then_some(distance)
}

#[cfg(test)]
mod tests {
    use super::{edit_distance, nearness};

    #[test]
    fn near_names_are_close_edits_or_dotted_parts() {
        assert_eq!(edit_distance(b"kitten", b"sitting", 3), Some(3));
        assert_eq!(edit_distance(b"cpu.load", b"cpu.laod", 3), Some(2));
        assert_eq!(edit_distance(b"abc", b"abc", 3), Some(0));
        assert_eq!(edit_distance(b"abcdefgh", b"zyxwvuts", 3), None);
        assert_eq!(edit_distance(b"", b"ab", 3), Some(2));
        assert_eq!(nearness("requests", "app.requests"), Some(1));
        assert_eq!(nearness("app", "app.requests"), Some(1));
        assert_eq!(nearness("pp.requests", "app.requests"), Some(1));
        assert_eq!(nearness("requests", "disk.used"), None);
        assert_eq!(nearness("web1.cpu.laod", "web1.cpu.load"), Some(2));
    }
}
