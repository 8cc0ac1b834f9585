//! A carbon storage-schemas `pattern` turned into tierdb name globs that pick exactly the
//! names it picks, or refused with the reason. Carbon compiles the pattern as a Python
//! regular expression and tries it with `re.search`, anywhere in the metric name, so an
//! unanchored `carbon\.` picks `a.carbon.b` too: its glob is `*carbon.*`. A set's `names`
//! are globs matched byte by byte ([`crate::registry`]'s `*`, `?`, `[a-z]`), any of which
//! picks a series, so an alternation becomes one glob per alternative.
//!
//! Converted: `^` at the start and `$` at the end of a branch, literal characters and
//! escaped punctuation (`\.`), `.*` and `.+` (lazy or not), classes of ASCII characters
//! (`[0-9]`, `[a-z_]`), groups (`(a|b)`, `(?:a|b)`, `(?P<n>a)`) and alternations at any
//! level, and `?`, `{n}`, `{n,m}` after any of them. Everything else is refused: a single
//! `.` or a negated class matches one character where a glob's `?` matches one byte;
//! `\d`, `\w` and `\s` are Unicode classes in Python 3; `*`, `+` and `{n,}` after anything
//! but `.` repeat it without bound, which no glob can say; lookarounds, flags and
//! backreferences have no glob form; and tierdb's globs have no escape for a literal `*`,
//! `?`, `[`, `]` or brace.

/// The most globs one pattern may become (alternations and optional parts multiply).
const MAX_GLOBS: usize = 64;

/// The most times a bounded repetition (`{n,m}`) may repeat its part.
const MAX_REPEAT: usize = 16;

/// The names a pattern picks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Picks {
    /// Every name: a catch-all section such as `.*` or `^.*$`.
    Every,
    /// The names one of these globs matches.
    Names(Vec<String>),
}

/// The globs that pick exactly the names `re.search(pattern, name)` picks.
///
/// # Errors
/// A sentence saying which part of the pattern has no exact glob form and why.
pub(crate) fn name_globs(pattern: &str) -> Result<Picks, String> {
    let mut parser = Parser {
        chars: pattern.chars().collect(),
        at: 0,
    };
    let globs = parser.alternation(true)?;
    if parser.at < parser.chars.len() {
        return Err("an unbalanced `)` (Python refuses the pattern too)".to_owned());
    }
    let mut out: Vec<String> = Vec::new();
    for glob in globs {
        if !out.contains(&glob) {
            out.push(glob);
        }
    }
    if out.iter().any(|g| g == "*") {
        return Ok(Picks::Every);
    }
    Ok(Picks::Names(out))
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

/// Every concatenation of one of `left` with one of `right`.
fn product(left: &[String], right: &[String]) -> Result<Vec<String>, String> {
    if left.len() * right.len() > MAX_GLOBS {
        return Err(format!(
            "its alternatives multiply to more than {MAX_GLOBS} globs"
        ));
    }
    Ok((left.iter())
        .flat_map(|l| right.iter().map(move |r| format!("{l}{r}")))
        .collect())
}

/// `glob` with each run of `*` made one.
fn collapse_stars(glob: &str) -> String {
    let mut out = String::with_capacity(glob.len());
    for c in glob.chars() {
        if !(c == '*' && out.ends_with('*')) {
            out.push(c);
        }
    }
    out
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.at += 1;
        }
        found
    }

    /// The text from `from` to here, for messages.
    fn since(&self, from: usize) -> String {
        self.chars[from..self.at].iter().collect()
    }

    /// Branches separated by `|`, up to a `)` or the end; `top` for the whole pattern,
    /// whose branches may be anchored and are searched anywhere in the name.
    fn alternation(&mut self, top: bool) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        loop {
            out.extend(self.branch(top)?);
            if out.len() > MAX_GLOBS {
                return Err(format!(
                    "its alternatives multiply to more than {MAX_GLOBS} globs"
                ));
            }
            if !self.eat('|') {
                return Ok(out);
            }
        }
    }

    fn branch(&mut self, top: bool) -> Result<Vec<String>, String> {
        let start = top && self.eat('^');
        let mut end = false;
        let mut acc = vec![String::new()];
        loop {
            match self.peek() {
                None | Some('|') | Some(')') => break,
                Some('$') if top => {
                    self.at += 1;
                    if !matches!(self.peek(), None | Some('|')) {
                        return Err(
                            "a `$` before the end of the pattern (it matches only at the end \
                             of the name)"
                                .to_owned(),
                        );
                    }
                    end = true;
                    break;
                }
                Some(anchor @ ('^' | '$')) => {
                    return Err(format!(
                        "a `{anchor}` {}; a glob is anchored only as a whole: write `^` at the \
                         start of the pattern or of a top-level `|` branch, `$` at the end",
                        if top {
                            "past the start of the pattern"
                        } else {
                            "inside a group"
                        }
                    ));
                }
                _ => {}
            }
            let piece = self.piece()?;
            acc = product(&acc, &piece)?;
        }
        if top {
            for glob in &mut acc {
                let wrapped = format!(
                    "{}{glob}{}",
                    if start { "" } else { "*" },
                    if end { "" } else { "*" }
                );
                *glob = collapse_stars(&wrapped);
            }
        }
        Ok(acc)
    }

    /// One atom and its repetition: the glob fragments it may stand for.
    fn piece(&mut self) -> Result<Vec<String>, String> {
        let from = self.at;
        let c = self.chars[self.at];
        self.at += 1;
        let atom = match c {
            '.' => return self.any_run(),
            '\\' => self.escape()?,
            '[' => self.class()?,
            '(' => self.group()?,
            '*' | '+' | '?' => {
                return Err(format!(
                    "a `{c}` with nothing before it to repeat (Python refuses the pattern too)"
                ))
            }
            c => vec![literal(c)?],
        };
        let Some((low, high)) = self.repetition(from)? else {
            return Ok(atom);
        };
        let mut out = Vec::new();
        let mut power = vec![String::new()];
        for times in 0..=high {
            if times >= low {
                out.extend(power.iter().cloned());
                if out.len() > MAX_GLOBS {
                    return Err(format!(
                        "its alternatives multiply to more than {MAX_GLOBS} globs"
                    ));
                }
            }
            if times < high {
                power = product(&power, &atom)?;
            }
        }
        Ok(out)
    }

    /// After a `.`: `.*` is any run (`*`), `.+` a run of at least one (`?*`); a lone `.`
    /// is refused.
    fn any_run(&mut self) -> Result<Vec<String>, String> {
        let glob = match self.peek() {
            Some('*') => "*",
            Some('+') => "?*",
            _ => {
                return Err(
                    "a `.` that is not `.*` or `.+`: it matches any one character, and a \
                     glob's `?` one byte, which differs on a name with non-ASCII characters; \
                     if you meant a dot, write `\\.`; for one of some characters, `[...]`"
                        .to_owned(),
                )
            }
        };
        self.at += 1;
        // Lazy (`.*?`) or possessive (`.*+`) runs pick the same names.
        let _ = self.eat('?') || self.eat('+');
        Ok(vec![glob.to_owned()])
    }

    /// After a `\`: escaped punctuation is itself; classes and anchors are refused.
    fn escape(&mut self) -> Result<Vec<String>, String> {
        let Some(e) = self.peek() else {
            return Err("a `\\` at the end (Python refuses the pattern too)".to_owned());
        };
        self.at += 1;
        if e.is_ascii_punctuation() || e == ' ' {
            return Ok(vec![literal(e)?]);
        }
        Err(match e {
            'd' => "`\\d`: Python 3 reads it as any Unicode digit, which no glob says; write \
                    `[0-9]`, which is the same for ASCII digits"
                .to_owned(),
            'w' | 's' | 'W' | 'S' | 'D' => format!(
                "`\\{e}`: a Unicode class of Python's, which no glob says; write the ASCII \
                 characters you mean as a class, such as `[a-zA-Z0-9_]`"
            ),
            'b' | 'B' | 'A' | 'Z' => {
                format!("`\\{e}`: an anchor with no glob form (use `^` and `$`)")
            }
            '1'..='9' => format!("`\\{e}`: a backreference, which no glob says"),
            _ => format!("`\\{e}`, which has no glob form"),
        })
    }

    /// After a `[`: a class of ASCII characters, as a glob class (or the one character).
    fn class(&mut self) -> Result<Vec<String>, String> {
        let from = self.at - 1;
        if self.eat('^') {
            return Err(
                "a negated class `[^...]`: it matches one character, and a glob's `[!...]` one \
                 byte, which differs on a name with non-ASCII characters"
                    .to_owned(),
            );
        }
        let unclosed = || "a `[` without its `]` (Python refuses the pattern too)".to_owned();
        let mut members: Vec<char> = Vec::new();
        let mut ranges: Vec<(char, char)> = Vec::new();
        loop {
            let c = self.peek().ok_or_else(unclosed)?;
            self.at += 1;
            let c = match c {
                ']' if !(members.is_empty() && ranges.is_empty()) => break,
                '\\' => {
                    let e = self.peek().ok_or_else(unclosed)?;
                    self.at += 1;
                    if !e.is_ascii_punctuation() {
                        return Err(format!(
                            "`\\{e}` inside a class, which has no glob form; write the ASCII \
                             characters you mean"
                        ));
                    }
                    e
                }
                c => c,
            };
            if !c.is_ascii() || c.is_ascii_control() {
                return Err(format!(
                    "{c:?} in a class: a glob's class matches one byte, so it takes ASCII \
                     characters only"
                ));
            }
            // A range `a-z`: the `-` is neither first nor last.
            if self.peek() == Some('-') && !matches!(self.chars.get(self.at + 1), None | Some(']'))
            {
                self.at += 1;
                let mut high = self.chars[self.at];
                self.at += 1;
                if high == '\\' {
                    high = self.peek().ok_or_else(unclosed)?;
                    self.at += 1;
                }
                if !high.is_ascii() || high < c {
                    return Err(format!(
                        "the class range `{c}-{high}` is not a range of ASCII characters"
                    ));
                }
                ranges.push((c, high));
            } else {
                members.push(c);
            }
        }
        let text = self.since(from);
        if members.iter().any(|c| matches!(c, '[' | ']')) {
            return Err(format!(
                "`{text}` holds a bracket, which a glob's class cannot hold"
            ));
        }
        if ranges.is_empty() && members.len() == 1 {
            return Ok(vec![literal(members[0])?]);
        }
        // A glob reads `!` or `^` first as "none of" and `-` between two members as a range:
        // ranges and plain members first, then `!` and `^`, then `-` last.
        let mut glob = String::from("[");
        for (low, high) in &ranges {
            glob.push_str(&format!("{low}-{high}"));
        }
        let plain = |c: &&char| !matches!(c, '!' | '^' | '-');
        for c in members.iter().filter(plain) {
            glob.push(*c);
        }
        let special: Vec<char> = (members.iter().copied())
            .filter(|c| matches!(c, '!' | '^'))
            .collect();
        if glob.len() == 1 && !special.is_empty() {
            if !members.contains(&'-') {
                return Err(format!(
                    "`{text}` cannot be written as a glob class (a glob reads `!` or `^` first \
                     as \"none of\")"
                ));
            }
            glob.push('-');
            glob.extend(special);
        } else {
            glob.extend(special);
            if members.contains(&'-') {
                glob.push('-');
            }
        }
        glob.push(']');
        Ok(vec![glob])
    }

    /// After a `(`: a group (capturing, `(?:`, or `(?P<name>`), its alternatives.
    fn group(&mut self) -> Result<Vec<String>, String> {
        let from = self.at - 1;
        if self.eat('?') {
            if self.eat(':') {
            } else if self.eat('P') && self.eat('<') {
                while !self.eat('>') {
                    if self.peek().is_none() {
                        return Err("an unclosed group name `(?P<`".to_owned());
                    }
                    self.at += 1;
                }
            } else {
                let end = (self.at + 1).min(self.chars.len());
                let text: String = self.chars[from..end].iter().collect();
                return Err(format!(
                    "`{text}...`: a lookaround, inline flag or conditional, which no glob says"
                ));
            }
        }
        let inner = self.alternation(false)?;
        if !self.eat(')') {
            return Err("a `(` without its `)` (Python refuses the pattern too)".to_owned());
        }
        Ok(inner)
    }

    /// A repetition after an atom (`?`, `{n}`, `{n,m}`, `{,m}`) as `(low, high)`; `None`
    /// when there is none. `*`, `+` and `{n,}` are refused: unbounded.
    fn repetition(&mut self, atom: usize) -> Result<Option<(usize, usize)>, String> {
        let bounds = match self.peek() {
            Some('?') => {
                self.at += 1;
                (0, 1)
            }
            Some(q @ ('*' | '+')) => {
                self.at += 1;
                return Err(unbounded(&self.since(atom), q));
            }
            Some('{') => {
                let Some((bounds, len)) = braces(&self.chars[self.at..]) else {
                    // Python reads a `{` that starts no repetition as itself.
                    return Ok(None);
                };
                self.at += len;
                match bounds {
                    (low, Some(high)) if low <= high && high <= MAX_REPEAT => (low, high),
                    (_, Some(high)) if high > MAX_REPEAT => {
                        return Err(format!(
                            "`{}` repeats more than {MAX_REPEAT} times",
                            self.since(atom)
                        ))
                    }
                    (_, Some(_)) => {
                        return Err(format!(
                            "`{}` has its bounds the wrong way round (Python refuses it too)",
                            self.since(atom)
                        ))
                    }
                    (_, None) => return Err(unbounded(&self.since(atom), '{')),
                }
            }
            _ => return Ok(None),
        };
        // Lazy (`??`, `{n,m}?`) picks the same names.
        self.eat('?');
        Ok(Some(bounds))
    }
}

/// The refusal of an unbounded repetition (`x+`, `x*`, `x{2,}`).
fn unbounded(text: &str, q: char) -> String {
    let what = match q {
        '*' => "any number of times",
        '+' => "one or more times",
        _ => "without bound",
    };
    format!(
        "`{text}` repeats its part {what}, which no glob says (a glob's `*` is any run of \
         characters, `.*` in the pattern); `.*`, `.+` and a bounded repetition such as \
         `{{1,3}}` (one glob per count) convert"
    )
}

/// A repetition in braces at the start of `chars` (`{3}`, `{1,3}`, `{,3}`, `{2,}`) as
/// `((low, high), its length)`, `high` `None` when unbounded; `None` when the braces are
/// no repetition (then Python reads `{` as itself).
fn braces(chars: &[char]) -> Option<((usize, Option<usize>), usize)> {
    let close = chars.iter().position(|&c| c == '}')?;
    let body: String = chars[1..close].iter().collect();
    let number = |text: &str| -> Option<Option<usize>> {
        match text {
            "" => Some(None),
            t if t.bytes().all(|b| b.is_ascii_digit()) => t.parse().ok().map(Some),
            _ => None,
        }
    };
    let bounds = match body.split_once(',') {
        None => {
            let n = number(&body)??;
            (n, Some(n))
        }
        Some((low, high)) => (number(low)?.unwrap_or(0), number(high)?),
    };
    Some((bounds, close + 1))
}

/// A literal character as a glob fragment; refused when globs would read it as syntax.
fn literal(c: char) -> Result<String, String> {
    if matches!(c, '*' | '?' | '[' | ']' | '{' | '}') {
        return Err(format!(
            "a literal `{c}`: tierdb's name globs have no escape for it"
        ));
    }
    Ok(c.to_string())
}

#[cfg(test)]
mod tests {
    use super::{name_globs, Picks};

    fn globs(pattern: &str) -> Vec<String> {
        match name_globs(pattern) {
            Ok(Picks::Names(globs)) => globs,
            other => panic!("{pattern}: {other:?}"),
        }
    }

    fn refused(pattern: &str) -> String {
        name_globs(pattern).expect_err(pattern)
    }

    #[test]
    fn anchors_decide_where_the_glob_may_match() {
        assert_eq!(globs(r"^carbon\."), ["carbon.*"]);
        assert_eq!(globs(r"carbon\."), ["*carbon.*"]);
        assert_eq!(globs(r"\.count$"), ["*.count"]);
        assert_eq!(globs(r"^servers\.web01\.load$"), ["servers.web01.load"]);
        assert_eq!(globs(r"^stats\..*\.upper_90$"), ["stats.*.upper_90"]);
        assert_eq!(globs(r"^stats\..+\.mean"), ["stats.?*.mean*"]);
        assert_eq!(globs(r"^a.*?b$"), ["a*b"]);
        assert_eq!(globs(r"^$"), [""]);
    }

    #[test]
    fn catch_alls_pick_every_name() {
        for pattern in [".*", "^.*$", "^.*", ".*$", "", "(.*)", "a|", "^(.*)?$"] {
            assert_eq!(name_globs(pattern), Ok(Picks::Every), "{pattern:?}");
        }
    }

    #[test]
    fn alternations_become_one_glob_each() {
        assert_eq!(globs(r"^(carbon|stats)\."), ["carbon.*", "stats.*"]);
        assert_eq!(globs(r"^(?:a|b)\.(c|d)$"), ["a.c", "a.d", "b.c", "b.d"]);
        assert_eq!(globs(r"^a\.|\.b$"), ["a.*", "*.b"]);
        assert_eq!(globs(r"^(?P<env>prod|dev)\."), ["prod.*", "dev.*"]);
        assert_eq!(globs(r"^web(s)?\."), ["web.*", "webs.*"]);
        assert_eq!(globs(r"^a[0-9]{2}\."), ["a[0-9][0-9].*"]);
        assert_eq!(globs(r"^ab{1,2}c"), ["abc*", "abbc*"]);
        assert_eq!(globs(r"^x{,1}y$"), ["y", "xy"]);
    }

    #[test]
    fn classes_of_ascii_characters_are_glob_classes() {
        assert_eq!(globs(r"^web[0-9]\."), ["web[0-9].*"]);
        assert_eq!(globs(r"^a[._-]b"), ["a[._-]b*"]);
        assert_eq!(globs(r"^a[-!x]b"), ["a[x!-]b*"]);
        assert_eq!(globs(r"^a[.]b"), ["a.b*"]);
        assert_eq!(globs(r"^a[\-z]"), ["a[z-]*"]);
    }

    #[test]
    fn what_has_no_exact_glob_is_refused_with_the_reason() {
        for (pattern, why) in [
            (r"^servers\.web\d+\.", r"`\d`"),
            (r"^servers\.web[0-9]+\.", "one or more times"),
            (r"^carbon.agents", "if you meant a dot"),
            (r"^a[^b]", "negated class"),
            (r"^a\w", "Unicode class"),
            (r"^a(?=b)", "lookaround"),
            (r"(?i)^carbon", "inline flag"),
            (r"^a\*", "no escape"),
            (r"^a(b|^c)", "inside a group"),
            (r"^a$b", "before the end"),
            (r"^a{2,}", "without bound"),
            (
                r"^(a|b)(c|d)(e|f)(g|h)(i|j)(k|l)(m|n)",
                "more than 64 globs",
            ),
            (r"^a)", "unbalanced"),
            (r"^a[é]", "ASCII characters only"),
        ] {
            let err = refused(pattern);
            assert!(err.contains(why), "{pattern}: {err}");
        }
    }

    const NAMES: [&str; 38] = [
        "carbon.agents.a",
        "x.carbon.y",
        "carbon",
        "carbonXagents",
        "a.count",
        "a.count.b",
        "count",
        "servers.web1.load",
        "servers.api2.x",
        "servers.web12.x",
        "servers.db1.x",
        "stats.x.mean",
        "stats..mean",
        "stats.a.b.mean.x",
        "ab",
        "axxb",
        "axxbc",
        "a.x",
        "x.b",
        "x.a.y",
        "web.x",
        "webs.x",
        "websx.x",
        "a12.x",
        "a1.x",
        "y",
        "xy",
        "xxy",
        "a-b",
        "a!b",
        "axb",
        "ayb",
        "prod.cpu",
        "dev.mem",
        "prod.cpu.x",
        "test.dev.mem",
        "é.count",
        "servers.web٣.x",
    ];
    /// Each pattern with `re.search(pattern, name)` for each of [`NAMES`], as Python 3.11's
    /// `re` answers (1 for a match).
    const PYTHON: [(&str, &str); 12] = [
        (r"^carbon\.", "10000000000000000000000000000000000000"),
        (r"carbon\.", "11000000000000000000000000000000000000"),
        (r"\.count$", "00001000000000000000000000000000000010"),
        (
            r"^servers\.(web|api)[0-9]\.",
            "00000001100000000000000000000000000000",
        ),
        (
            r"^stats\..+\.mean",
            "00000000000101000000000000000000000000",
        ),
        (r"^a.*?b$", "00000100000000110000000000001111000000"),
        (r"^a\.|\.b$", "00001100000000000110000000000000000000"),
        (r"^web(s)?\.", "00000000000000000000110000000000000000"),
        (r"^a[0-9]{2}\.", "00000000000000000000000100000000000000"),
        (r"^x{,1}y$", "00000000000000000000000001100000000000"),
        (r"^a[-!x]b", "00000000000000000000000000001110000000"),
        (
            r"^(?:prod|dev)\.(cpu|mem)$",
            "00000000000000000000000000000000110000",
        ),
    ];

    #[test]
    fn the_globs_pick_the_names_pythons_re_search_picks() {
        use crate::registry::glob::glob_match;
        for (pattern, expected) in PYTHON {
            let globs = globs(pattern);
            for (name, want) in NAMES.iter().zip(expected.chars()) {
                let picked = globs.iter().any(|g| glob_match(g, name));
                assert_eq!(picked, want == '1', "{pattern} on {name}: {globs:?}");
            }
        }
    }
}
