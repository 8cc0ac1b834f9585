//! The target grammar: a path pattern, or `func(arg, ..., name=arg, ...)` whose arguments
//! are nested targets, numbers, quoted strings, `true`/`false`, `none` or `inf` (the last
//! three in any case, as graphite-web's grammar has them), positional ones first and then
//! keyword ones (graphite-web's `kwargs`). Errors name the column at fault.

#[cfg(test)]
mod tests;

use crate::error::Error;
use crate::error::Result;

/// Deepest nesting of calls accepted; the parser recurses once per level, so this bounds the
/// stack a hostile target can take.
const MAX_DEPTH: usize = 64;

/// One parsed target or argument.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    /// A path pattern, as written.
    Path(String),
    /// `name(args, keyword=arg)`; `text` is the call as written, for names such as
    /// `sumSeries(...)`.
    Call {
        name: String,
        args: Vec<Expr>,
        /// The keyword arguments (`func="max"`), in the order written.
        kwargs: Vec<(String, Expr)>,
        text: String,
    },
    /// A number written without a point or exponent, kept whole so names print it as
    /// graphite-web does (`movingAverage(a,5)`, not `5.0`).
    Int(i64),
    Number(f64),
    /// A quoted string with `\<quote>` unescaped and any other backslash kept (`\1`).
    Str(String),
    /// `true` or `false`, in any case (graphite-web's grammar).
    Bool(bool),
    /// Python's `None`: the bare word `none` in any case (graphite-web's grammar), which
    /// graphite-web hands to the function (not the parameter's default).
    None,
    /// A parameter left to its default while a later one is given by keyword
    /// (`summarize(x, "1h", alignToFrom=true)` leaves `func`): never written, only made when
    /// keyword arguments are put in their places.
    Absent,
    /// Series already evaluated, handed to a function as an argument by `reduceSeries`
    /// (graphite-web calls the reduce function on lists it holds); never parsed.
    Evaluated(Vec<super::series::Series>),
}

impl Expr {
    /// Calls `f` on every path in the expression, arguments of calls included, in order; a
    /// `seriesByTag(...)` call is a path (its text, which [`super::PathPattern`] parses).
    pub(crate) fn for_each_path(&self, f: &mut impl FnMut(&str) -> Result<()>) -> Result<()> {
        match self {
            Expr::Path(path) => f(path),
            // A tag query selects series as a path does, and is charged as one.
            Expr::Call { name, text, .. } if name == "seriesByTag" => f(text),
            Expr::Call { args, kwargs, .. } => {
                args.iter().try_for_each(|arg| arg.for_each_path(f))?;
                kwargs.iter().try_for_each(|(_, arg)| arg.for_each_path(f))
            }
            Expr::Int(_)
            | Expr::Number(_)
            | Expr::Str(_)
            | Expr::Bool(_)
            | Expr::None
            | Expr::Absent
            | Expr::Evaluated(_) => Ok(()),
        }
    }

    /// The expression as written (paths and calls), for naming combined series.
    pub(crate) fn text(&self) -> String {
        match self {
            Expr::Path(text) | Expr::Call { text, .. } => text.clone(),
            Expr::Int(n) => n.to_string(),
            Expr::Number(n) => n.to_string(),
            Expr::Str(s) => format!("{s:?}"),
            Expr::Bool(b) => b.to_string(),
            Expr::None | Expr::Absent => "None".to_owned(),
            Expr::Evaluated(list) => (list.iter().map(|s| s.name.as_str()))
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Parses one `target=` value.
///
/// # Errors
///
/// [`Error::InvalidQuery`] quoting the target and naming the column (1-based) of the first
/// problem: an unterminated string, a missing `,` or `)`, text after the end, a function name
/// that is not an identifier, or nesting deeper than 64 calls.
pub(crate) fn parse_target(text: &str) -> Result<Expr> {
    let mut parser = Parser { text, pos: 0 };
    let expr = parser.expr(0)?;
    parser.skip_blanks();
    match parser.peek() {
        None => Ok(expr),
        Some(c) => Err(parser.error(parser.pos, &format!("unexpected `{c}`"))),
    }
}

struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    pos: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, pos: usize, what: &str) -> Error {
        let column = self.text[..pos].chars().count() + 1;
        Error::InvalidQuery(format!(
            "invalid target {:?}: {what} at column {column}",
            self.text
        ))
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn skip_blanks(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn expr(&mut self, depth: usize) -> Result<Expr> {
        self.skip_blanks();
        let start = self.pos;
        let word = match self.peek() {
            None => return Err(self.error(start, "expected an expression, found the end")),
            Some(quote @ ('\'' | '"')) => return self.string(quote),
            Some(_) => self.word(),
        };
        if word.is_empty() {
            let c = self.peek().unwrap_or_default();
            return Err(self.error(start, &format!("expected an expression, found `{c}`")));
        }
        if self.peek() == Some('(') {
            return self.call(word, start, depth);
        }
        let numeric = word.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c))
            && word
                .chars()
                .all(|c| c.is_ascii_digit() || "+-.eE".contains(c));
        let whole = !word.contains(['.', 'e', 'E']);
        // A target is a path or a call in graphite-web's grammar, a number too (`5` is the
        // path `5`, which `applyByNode(x, 1, '5')` evaluates).
        let numeric = numeric && depth > 0;
        Ok(match (word, word.parse::<f64>()) {
            (_, Ok(_)) if numeric && whole && word.parse::<i64>().is_ok() => {
                Expr::Int(word.parse().unwrap_or_default())
            }
            (_, Ok(n)) if numeric => Expr::Number(n),
            // graphite-web's keywords, in any case: in an argument they come before paths in
            // its grammar; a target is a path or a call.
            (word, _) if depth > 0 && word.eq_ignore_ascii_case("true") => Expr::Bool(true),
            (word, _) if depth > 0 && word.eq_ignore_ascii_case("false") => Expr::Bool(false),
            (word, _) if depth > 0 && word.eq_ignore_ascii_case("none") => Expr::None,
            (word, _) if depth > 0 && word.eq_ignore_ascii_case("inf") => {
                Expr::Number(f64::INFINITY)
            }
            (path, _) => Expr::Path(path.to_owned()),
        })
    }

    /// A path, number, boolean or function name: up to a blank, quote, `,`, `(` or `)` that
    /// is not inside `{...}` or `[...]` (so `{a,b}` stays one path).
    fn word(&mut self) -> &'a str {
        let start = self.pos;
        let mut depth = 0usize;
        for (i, c) in self.text[start..].char_indices() {
            match c {
                '{' | '[' => depth += 1,
                '}' | ']' => depth = depth.saturating_sub(1),
                ',' | '(' | ')' | '\'' | '"' if depth == 0 => break,
                c if c.is_whitespace() && depth == 0 => break,
                _ => {}
            }
            self.pos = start + i + c.len_utf8();
        }
        &self.text[start..self.pos]
    }

    fn call(&mut self, name: &str, start: usize, depth: usize) -> Result<Expr> {
        let identifier = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(self.error(start, &format!("`{name}` is not a function name")));
        }
        if depth >= MAX_DEPTH {
            return Err(self.error(start, "calls nested too deeply"));
        }
        let name = name.to_owned();
        self.pos += 1; // `(`
        let mut args = Vec::new();
        let mut kwargs: Vec<(String, Expr)> = Vec::new();
        self.skip_blanks();
        if self.peek() == Some(')') {
            self.pos += 1;
        } else {
            loop {
                self.skip_blanks();
                let at = self.pos;
                match self.keyword() {
                    Some(keyword) => {
                        if kwargs.iter().any(|(k, _)| *k == keyword) {
                            let what = format!("keyword argument `{keyword}` given twice");
                            return Err(self.error(at, &what));
                        }
                        kwargs.push((keyword, self.expr(depth + 1)?));
                    }
                    None if !kwargs.is_empty() => {
                        let what = "a positional argument after keyword arguments";
                        return Err(self.error(at, what));
                    }
                    None => args.push(self.expr(depth + 1)?),
                }
                self.skip_blanks();
                match self.peek() {
                    Some(',') => self.pos += 1,
                    Some(')') => {
                        self.pos += 1;
                        break;
                    }
                    Some(c) => {
                        return Err(
                            self.error(self.pos, &format!("expected `,` or `)`, found `{c}`"))
                        )
                    }
                    None => {
                        return Err(self.error(self.pos, &format!("missing `)` to close `{name}(`")))
                    }
                }
            }
        }
        let text = self.text[start..self.pos].to_owned();
        Ok(Expr::Call {
            name,
            args,
            kwargs,
            text,
        })
    }

    /// `name=` (blanks allowed around `=`) at the cursor, as graphite-web's grammar reads a
    /// keyword argument: consumed and its name answered; `None`, the cursor unmoved, when
    /// the argument is positional (a path such as `cpu;host=a` does not start with an
    /// identifier and `=`).
    fn keyword(&mut self) -> Option<String> {
        let rest = &self.text[self.pos..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..len];
        if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return None;
        }
        let after = rest[len..].trim_start();
        let value = after.strip_prefix('=')?;
        if value.starts_with(['=', '~']) {
            return None;
        }
        self.pos += rest.len() - value.len();
        Some(name.to_owned())
    }

    /// A string in `quote`s: `\` before the quote escapes it; any other backslash is kept
    /// with the character after it, so regex escapes and `\1` reach aliasSub unchanged.
    fn string(&mut self, quote: char) -> Result<Expr> {
        let start = self.pos;
        let mut out = String::new();
        let mut chars = self.text[start + 1..].char_indices();
        while let Some((i, c)) = chars.next() {
            if c == quote {
                self.pos = start + 1 + i + 1;
                return Ok(Expr::Str(out));
            }
            if c == '\\' {
                match chars.next() {
                    Some((_, next)) if next == quote => out.push(quote),
                    Some((_, next)) => {
                        out.push('\\');
                        out.push(next);
                    }
                    None => out.push('\\'),
                }
            } else {
                out.push(c);
            }
        }
        Err(self.error(start, "unterminated string"))
    }
}
