//! Shell-style globs over series names: `*` any run, `?` one character, `[abc]`, `[a-z]`,
//! `[!a-c]` one of (or none of) a set. Used to list series by name.

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
