//! Shell-style globs over series names: `*` any run, `?` one character, `[abc]`, `[a-z]`,
//! `[!a-c]` one of (or none of) a set. Used to list series by name. [`Glob`] adds Graphite's
//! braces (`{a,b}`), and [`segments_match`] its paths, whose globs match dot by dot.

/// True when `text` matches `pattern`.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    matches(pattern.as_bytes(), text.as_bytes())
}

fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => match class_match(&pattern[p..], text[t]) {
                    Some((true, len)) => {
                        p += len;
                        t += 1;
                        continue;
                    }
                    Some((false, _)) => {}
                    None if text[t] == b'[' => {
                        p += 1;
                        t += 1;
                        continue;
                    }
                    None => {}
                },
                c if c == text[t] => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class at the start of `pattern`; returns (matched, class length),
/// or `None` when the class is not closed (then `[` is literal).
fn class_match(pattern: &[u8], c: u8) -> Option<(bool, usize)> {
    let close = pattern.iter().skip(2).position(|&b| b == b']')? + 2;
    let set = &pattern[1..close];
    let (negate, set) = match set.first() {
        Some(b'!') | Some(b'^') => (true, &set[1..]),
        _ => (false, set),
    };
    let mut i = 0;
    let mut found = false;
    while i < set.len() {
        if i + 2 < set.len() && set[i + 1] == b'-' {
            found |= (set[i]..=set[i + 2]).contains(&c);
            i += 3;
        } else {
            found |= set[i] == c;
            i += 1;
        }
    }
    Some((found != negate, close + 1))
}

/// Most brace alternatives one glob may expand to; bounds the work of a pattern such as
/// `{a,b}{a,b}{a,b}...`, which doubles with each group.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
const MAX_ALTERNATIVES: usize = 1024;

/// Most `{` one glob may hold. Expansion recurses once per group and per nesting level, so
/// this bounds its depth and time: `{a}{a}{a}...` never grows past one alternative, and ten
/// thousand of them would otherwise overflow the thread's stack.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
const MAX_BRACES: usize = 32;

/// One glob over a whole segment or tag value, held as its brace-free alternatives
/// (`{a,b*}c` is `ac` or `b*c`), each matched by [`glob_match`]. That glob
/// works on bytes, so `?` and classes match one byte: exact for the ASCII names Graphite
/// clients send.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
#[derive(Clone, Debug)]
pub(crate) struct Glob {
    alternatives: Vec<String>,
    /// No wildcard at all: the one alternative is compared as text.
    literal: bool,
}

#[cfg_attr(not(feature = "server"), allow(dead_code))]
impl Glob {
    /// Refused, with the reason, when it holds more than [`MAX_BRACES`] `{` or its braces
    /// expand to more than [`MAX_ALTERNATIVES`].
    pub(crate) fn parse(text: &str) -> std::result::Result<Glob, String> {
        let braces = text.matches('{').count();
        if braces > MAX_BRACES {
            return Err(format!(
                "{braces} `{{` in one segment or tag value; at most {MAX_BRACES}"
            ));
        }
        let alternatives = expand(text)
            .ok_or_else(|| format!("braces expand to more than {MAX_ALTERNATIVES} alternatives"))?;
        Ok(Glob {
            alternatives,
            literal: !text.contains(['*', '?', '[', '{']),
        })
    }

    pub(crate) fn matches(&self, text: &str) -> bool {
        match self.literal {
            true => self.alternatives[0] == text,
            false => self.alternatives.iter().any(|a| glob_match(a, text)),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.literal && self.alternatives[0].is_empty()
    }

    /// The brace-free alternatives that hold no wildcard: the texts this glob names outright.
    pub(crate) fn literal_alternatives(&self) -> Vec<&str> {
        (self.alternatives.iter())
            .filter(|a| !a.contains(['*', '?', '[']))
            .map(String::as_str)
            .collect()
    }
}

/// The brace-free alternatives of `text`, outermost braces first, nested ones recursively.
/// A `{` without its `}` is a literal character.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
fn expand(text: &str) -> Option<Vec<String>> {
    let Some(open) = text.find('{') else {
        return Some(vec![text.to_owned()]);
    };
    let (mut depth, mut close, mut commas) = (0, None, vec![]);
    for (i, c) in text[open..].char_indices().skip(1) {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                close = Some(open + i);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => commas.push(open + i),
            _ => {}
        }
    }
    let Some(close) = close else {
        return Some(vec![text.to_owned()]);
    };
    let bounds = std::iter::once(open)
        .chain(commas)
        .chain([close])
        .collect::<Vec<_>>();
    let suffixes = expand(&text[close + 1..])?;
    let mut out = Vec::new();
    for pair in bounds.windows(2) {
        for choice in expand(&text[pair[0] + 1..pair[1]])? {
            for suffix in &suffixes {
                if out.len() == MAX_ALTERNATIVES {
                    return None;
                }
                out.push(format!("{}{choice}{suffix}", &text[..open]));
            }
        }
    }
    Some(out)
}

/// True when the Graphite path `name` has one segment (split at `.`) per glob of `segments`
/// and each matches its glob: a `*` never crosses a dot. Render's targets and PromQL's
/// `{__graphite__="..."}` select by this one rule.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) fn segments_match(segments: &[Glob], name: &str) -> bool {
    let mut parts = name.split('.');
    segments
        .iter()
        .all(|glob| parts.next().is_some_and(|s| glob.matches(s)))
        && parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_like_a_shell() {
        for (pattern, text, expected) in [
            ("*", "cpu.load", true),
            ("cpu.*", "cpu.load", true),
            ("cpu.*", "mem.used", false),
            ("*.load", "host1.cpu.load", true),
            ("host?.cpu", "host1.cpu", true),
            ("host?.cpu", "host12.cpu", false),
            ("host[12].cpu", "host2.cpu", true),
            ("host[a-c].cpu", "hostb.cpu", true),
            ("host[!a-c].cpu", "hostb.cpu", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("", "", true),
            ("[", "[", true),
        ] {
            assert_eq!(glob_match(pattern, text), expected, "{pattern} ~ {text}");
        }
    }
}
