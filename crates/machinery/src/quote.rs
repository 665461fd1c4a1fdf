//! Go's quoting of strings, as Kubernetes' messages show values.

/// Go's `strconv.Quote` (`%q` of a string): how Kubernetes quotes a value in its messages.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `time` package's own `quote`, which its duration errors use instead of `strconv.Quote`:
/// `"` and `\` escaped, and every byte of a control or non-ASCII character written `\xNN`
/// (`"1µs"` reads `"1\xc2\xb5s"`).
pub fn time_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c < ' ' || !c.is_ascii() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strconv_quote() {
        for (text, quoted) in [
            ("", r#""""#),
            ("abc", r#""abc""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("\n\t\r\u{7}\u{8}\u{c}\u{b}", r#""\n\t\r\a\b\f\v""#),
            ("\u{1}\u{7f}", r#""\x01\x7f""#),
            ("\u{85}", r#""\u0085""#),
            ("µs ☺", "\"µs ☺\""),
        ] {
            assert_eq!(go_quote(text), quoted, "{text:?}");
        }
    }

    #[test]
    fn time_package_quote() {
        for (text, quoted) in [
            ("1x", r#""1x""#),
            ("a\"b\\", r#""a\"b\\""#),
            ("1µs", r#""1\xc2\xb5s""#),
            ("\n", r#""\x0a""#),
            ("\u{7f}", "\"\u{7f}\""),
        ] {
            assert_eq!(time_quote(text), quoted, "{text:?}");
        }
    }
}
