//! Go (RE2) regular expressions on the `regex` crate.
//!
//! kube-apiserver compiles `pattern` and CEL's `matches()` with Go's `regexp`, whose syntax is the
//! `regex` crate's but whose Perl classes are ASCII-only (`\d` is `[0-9]`, `\w` is
//! `[0-9A-Za-z_]`, `\s` is `[\t\n\f\r ]`, `\b` an ASCII word boundary) and whose character
//! classes do not nest. [`compile`] rewrites those before compiling.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use regex::{Regex, RegexBuilder};

/// The most a compiled pattern's program may take (the `regex` crate's default is 10 MiB). Go's
/// RE2 refuses repetitions above 1000; this bounds what one `pattern` can make the server hold.
pub(crate) const SIZE_LIMIT: usize = 1 << 20;

/// The most a pattern's lazy DFA cache may grow to, per thread using it (default 2 MiB).
pub(crate) const DFA_SIZE_LIMIT: usize = 256 << 10;

/// A regular expression that does not compile, worded as Go's `regexp.Compile` words it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("error parsing regexp: {reason}: `{pattern}`")]
pub(crate) struct PatternError {
    /// What is wrong, as the `regex` crate says it.
    reason: String,
    /// The pattern as written.
    pattern: String,
}

/// Compiles a Go regular expression. The error is worded as Go's `regexp.Compile` words it
/// (`error parsing regexp: …`).
///
/// Compiled patterns are shared: a pattern compiled while another copy of it is alive (in
/// another version, definition or tenant) is the same `Regex`, and it is freed with its last
/// user.
pub(crate) fn compile(pattern: &str) -> Result<Arc<Regex>, PatternError> {
    let shared = shared();
    if let Some(found) = shared.lock().get(pattern).and_then(Weak::upgrade) {
        return Ok(found);
    }
    let compiled = Arc::new(compile_new(pattern)?);
    let mut map = shared.lock();
    // Forget the patterns no longer used, so the map stays as large as what is alive.
    if map.len() >= 1024 && map.len().is_power_of_two() {
        map.retain(|_, weak| weak.strong_count() > 0);
    }
    map.insert(pattern.to_owned(), Arc::downgrade(&compiled));
    Ok(compiled)
}

fn shared() -> &'static Mutex<HashMap<String, Weak<Regex>>> {
    static SHARED: OnceLock<Mutex<HashMap<String, Weak<Regex>>>> = OnceLock::new();
    SHARED.get_or_init(Default::default)
}

/// Whether the shared patterns have an entry for `pattern`.
#[cfg(test)]
pub(crate) fn is_shared(pattern: &str) -> bool {
    shared().lock().contains_key(pattern)
}

/// Compiles a Go regular expression for one use (CEL's `matches()`, whose pattern may come from
/// the object): not shared, so that patterns from data leave nothing behind.
pub(crate) fn compile_new(pattern: &str) -> Result<Regex, PatternError> {
    let translated = translate(pattern);
    RegexBuilder::new(&translated)
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(DFA_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            let text = e.to_string();
            let reason = text
                .lines()
                .rev()
                .find_map(|l| l.trim().strip_prefix("error: "))
                .unwrap_or(text.as_str())
                .trim()
                .to_string();
            PatternError { reason, pattern: pattern.to_owned() }
        })
}

fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let chars: Vec<char> = pattern.chars().collect();
    let mut in_class = false;
    let mut class_start = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && i + 1 < chars.len() {
            let e = chars[i + 1];
            i += 2;
            let replacement = if in_class {
                match e {
                    'd' => Some("0-9"),
                    'w' => Some("0-9A-Za-z_"),
                    's' => Some("\\t\\n\\x0C\\r "),
                    'D' => Some("[^0-9]"),
                    'W' => Some("[^0-9A-Za-z_]"),
                    'S' => Some("[^\\t\\n\\x0C\\r ]"),
                    _ => None,
                }
            } else {
                match e {
                    'd' => Some("[0-9]"),
                    'w' => Some("[0-9A-Za-z_]"),
                    's' => Some("[\\t\\n\\x0C\\r ]"),
                    'D' => Some("[^0-9]"),
                    'W' => Some("[^0-9A-Za-z_]"),
                    'S' => Some("[^\\t\\n\\x0C\\r ]"),
                    'b' => Some("(?-u:\\b)"),
                    'B' => Some("(?-u:\\B)"),
                    _ => None,
                }
            };
            match replacement {
                Some(r) => out.push_str(r),
                None => {
                    out.push('\\');
                    out.push(e);
                }
            }
            class_start = false;
            continue;
        }
        if in_class {
            match c {
                ']' if !class_start => {
                    in_class = false;
                    out.push(']');
                }
                '[' if chars.get(i + 1) == Some(&':') => {
                    // An ASCII class such as [:alpha:]: copy it whole.
                    let rest: String = chars[i..].iter().collect();
                    match rest.find(":]") {
                        Some(end) => {
                            out.push_str(&rest[..end + 2]);
                            i += rest[..end + 2].chars().count();
                            class_start = false;
                            continue;
                        }
                        None => out.push_str("\\["),
                    }
                }
                '[' => out.push_str("\\["),
                '&' | '~' => {
                    out.push('\\');
                    out.push(c);
                }
                '-' if chars.get(i + 1) == Some(&'-') => out.push_str("\\-"),
                '^' if class_start => {
                    out.push('^');
                    i += 1;
                    continue;
                }
                c => out.push(c),
            }
            class_start = false;
        } else {
            if c == '[' {
                in_class = true;
                class_start = true;
            }
            out.push(c);
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_classes_are_ascii() {
        let re = compile(r"^\d+$").unwrap_or_else(|e| panic!("{e}"));
        assert!(re.is_match("123"));
        assert!(!re.is_match("١٢٣"));
        let re = compile(r"^[\w-]+$").unwrap_or_else(|e| panic!("{e}"));
        assert!(re.is_match("a_b-c"));
        assert!(!re.is_match("é"));
        let re = compile(r"^[^\d]+$").unwrap_or_else(|e| panic!("{e}"));
        assert!(re.is_match("abc"));
        assert!(!re.is_match("a1"));
    }

    #[test]
    fn classes_do_not_nest() {
        let re = compile(r"^[a[]+$").unwrap_or_else(|e| panic!("{e}"));
        assert!(re.is_match("a[a"));
        let re = compile(r"^[]a]+$").unwrap_or_else(|e| panic!("{e}"));
        assert!(re.is_match("]a"));
        let re = compile(r"^[[:alpha:]]+$").unwrap_or_else(|e| panic!("{e}"));
        assert!(re.is_match("abc"));
    }

    #[test]
    fn copies_of_a_pattern_share_one_regex_until_the_last_goes() {
        let a = compile("^shared-[a-z]+$").unwrap_or_else(|e| panic!("{e}"));
        let b = compile("^shared-[a-z]+$").unwrap_or_else(|e| panic!("{e}"));
        assert!(Arc::ptr_eq(&a, &b));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none(), "the last user frees it");
    }

    #[test]
    fn huge_programs_are_refused() {
        // Unicode classes repeated a thousand times, three deep: far past the size limit.
        let err = compile(r"^((\pL{1000}){1000}){1000}$")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("error parsing regexp: "), "{err}");
        assert!(err.contains("size limit"), "{err}");
    }

    #[test]
    fn errors_name_the_pattern() {
        let err = compile("(").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.starts_with("error parsing regexp: "), "{err}");
        assert!(err.ends_with(": `(`"), "{err}");
    }
}
