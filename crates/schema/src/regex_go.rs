//! Go (RE2) regular expressions on the `regex` crate.
//!
//! kube-apiserver compiles `pattern` and CEL's `matches()` with Go's `regexp`, whose syntax is the
//! `regex` crate's but whose Perl classes are ASCII-only (`\d` is `[0-9]`, `\w` is
//! `[0-9A-Za-z_]`, `\s` is `[\t\n\f\r ]`, `\b` an ASCII word boundary) and whose character
//! classes do not nest. [`compile`] rewrites those before compiling.

use regex::Regex;

/// Compiles a Go regular expression. The error is worded as Go's `regexp.Compile` words it
/// (`error parsing regexp: …`).
pub(crate) fn compile(pattern: &str) -> Result<Regex, String> {
    let translated = translate(pattern);
    Regex::new(&translated).map_err(|e| {
        let text = e.to_string();
        let reason = text
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_prefix("error: "))
            .unwrap_or(text.as_str())
            .trim()
            .to_string();
        format!("error parsing regexp: {reason}: `{pattern}`")
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
    fn errors_name_the_pattern() {
        let err = compile("(").err().unwrap_or_default();
        assert!(err.starts_with("error parsing regexp: "), "{err}");
        assert!(err.ends_with(": `(`"), "{err}");
    }
}
