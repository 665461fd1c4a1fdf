//! Go durations: `time.ParseDuration` and `time.Duration.String`, exactly, in signed 64-bit
//! nanoseconds.
//!
//! Kubernetes reads durations with Go's parser (CronJob `@every`, the `duration` format of CRD
//! schemas, CEL's `duration()`), so Carrel does too, with Go's arithmetic: whole numbers in
//! integers, a fraction scaled through `float64` as Go scales it, and a value beyond the range of
//! an `int64` refused as `time: invalid duration "…"`.
//!
//! `kube_core::Duration` parses the same syntax but is not for untrusted input: it computes in
//! `std::time::Duration` and panics when a value overflows it (`Duration::mul_f64`), where Go
//! returns an error. This parser never panics.

use crate::quote::time_quote;

/// Why `time.ParseDuration` refuses a text, in Go's words (Display). Each variant holds the
/// whole text as it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not a duration's syntax: empty, a sign alone, a number with no digits, text before a
    /// number.
    #[error("time: invalid duration {}", time_quote(.0))]
    Invalid(String),
    /// The syntax of a duration, but beyond what an `int64` of nanoseconds holds (about 292
    /// years either way). Go's message is that of [`Error::Invalid`].
    #[error("time: invalid duration {}", time_quote(.0))]
    OutOfRange(String),
    /// A number with no unit after it (`"1"`, `"1h5"`).
    #[error("time: missing unit in duration {}", time_quote(.0))]
    MissingUnit(String),
    /// A unit other than `ns`, `us` (`µs`, `μs`), `ms`, `s`, `m` and `h`.
    #[error("time: unknown unit {} in duration {}", time_quote(unit), time_quote(duration))]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole text.
        duration: String,
    },
}

/// Nanoseconds in each unit Go knows.
fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        // U+00B5 (micro sign) and U+03BC (Greek small letter mu), as Go accepts both.
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

const LIMIT: u64 = 1 << 63;

/// Go's `leadingInt`: the leading digits of `s` and what follows them; `None` on overflow.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let end = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    for c in s[..end].bytes() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(c - b'0');
        if x > LIMIT {
            return None;
        }
    }
    Some((x, &s[end..]))
}

/// Go's `leadingFraction`: the leading digits of `s` as a numerator, its scale (a power of ten)
/// and what follows; digits beyond what a `uint64` holds are dropped, not an error.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let end = s.bytes().take_while(u8::is_ascii_digit).count();
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    for c in s[..end].bytes() {
        if overflow {
            continue;
        }
        if x > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[end..])
}

/// Go's `time.ParseDuration`: a possibly signed sequence of decimal numbers, each with an
/// optional fraction and a unit (`300ms`, `-1.5h`, `2h45m`), or `0`; in nanoseconds.
pub fn parse(text: &str) -> Result<i64, Error> {
    let invalid = || Error::Invalid(text.to_owned());
    let out_of_range = || Error::OutOfRange(text.to_owned());
    let (neg, mut s) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u64 = 0;
    while !s.is_empty() {
        if !(s.starts_with('.') || s.as_bytes()[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(out_of_range)?;
        s = rest;
        let pre = before != s.len();
        let (mut f, mut scale, mut post) = (0, 1.0, false);
        if let Some(rest) = s.strip_prefix('.') {
            let before = rest.len();
            (f, scale, s) = leading_fraction(rest);
            post = before != s.len();
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_len = s.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(s.len());
        if unit_len == 0 {
            return Err(Error::MissingUnit(text.to_owned()));
        }
        let (unit, rest) = s.split_at(unit_len);
        s = rest;
        let Some(unit) = unit_nanos(unit) else {
            return Err(Error::UnknownUnit { unit: unit.to_owned(), duration: text.to_owned() });
        };
        if v > LIMIT / unit {
            return Err(out_of_range());
        }
        v *= unit;
        if f > 0 {
            // As Go: float64 keeps a fraction of an hour accurate to the nanosecond, and the
            // product is at most 3.6e12.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(out_of_range());
            }
        }
        // Go adds in a uint64 that can wrap past 2^64 when two terms are both 2^63
        // (`9223372036854775808ns9223372036854775808ns` reads as 0); that is refused here.
        d = d.checked_add(v).filter(|d| *d <= LIMIT).ok_or_else(out_of_range)?;
    }
    if neg {
        // -2^63 is the one value whose magnitude does not fit an i64.
        return Ok((d as i64).wrapping_neg());
    }
    i64::try_from(d).map_err(|_| out_of_range())
}

/// Go's `time.Duration.String`: `0s`, `1ns`, `1.5µs`, `2ms`, `1.5s`, `1m1s`, `1h0m0s`, with the
/// fraction's trailing zeros dropped. [`parse`] reads it back.
pub fn format(nanos: i64) -> String {
    /// `v / 10^prec` with its fraction, trailing zeros dropped: (`1`, `.5`).
    fn split(v: u64, prec: u32) -> (u64, String) {
        let p = 10u64.pow(prec);
        let (int, frac) = (v / p, v % p);
        if frac == 0 {
            return (int, String::new());
        }
        let digits = format!("{frac:0width$}", width = prec as usize);
        (int, format!(".{}", digits.trim_end_matches('0')))
    }
    let u = nanos.unsigned_abs();
    let sign = if nanos < 0 { "-" } else { "" };
    if u == 0 {
        return "0s".into();
    }
    if u < 1_000_000_000 {
        let (prec, unit) = if u < 1_000 {
            (0, "ns")
        } else if u < 1_000_000 {
            (3, "µs")
        } else {
            (6, "ms")
        };
        let (int, frac) = split(u, prec);
        return format!("{sign}{int}{frac}{unit}");
    }
    let (secs, frac) = split(u, 9);
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (hours, secs / 60) {
        (0, 0) => format!("{sign}{seconds}{frac}s"),
        (0, _) => format!("{sign}{minutes}m{seconds}{frac}s"),
        _ => format!("{sign}{hours}h{minutes}m{seconds}{frac}s"),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const NS: i64 = 1;
    const US: i64 = 1_000;
    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;

    /// Go's own examples (`time.ParseDuration`'s documentation and its test table).
    #[test]
    fn parses_as_go() {
        for (text, nanos) in [
            ("0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600 * MS),
            ("5.s", 5 * S),
            (".5s", 500 * MS),
            ("1.s", S),
            ("1.0s", S),
            ("1.00s", S),
            ("1.004s", S + 4 * MS),
            ("1.0040s", S + 4 * MS),
            ("100.00100s", 100 * S + MS),
            ("10ns", 10 * NS),
            ("11us", 11 * US),
            ("12µs", 12 * US),
            ("12μs", 12 * US),
            ("1µs", US),
            ("1μs", US),
            ("13ms", 13 * MS),
            ("14s", 14 * S),
            ("15m", 15 * M),
            ("16h", 16 * H),
            ("300ms", 300 * MS),
            ("-1.5h", -(H + 30 * M)),
            ("2h45m", 2 * H + 45 * M),
            ("3h30m", 3 * H + 30 * M),
            ("10.5s4m", 4 * M + 10 * S + 500 * MS),
            ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
            ("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS),
            ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
            ("52763797000ns", 52763797000 * NS),
            ("0.3333333333333333333h", 20 * M),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("-9223372036s854ms775us808ns", i64::MIN),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * M),
            ("0.830103483285477580700h", 49 * M + 48 * S + 372539827 * NS),
        ] {
            assert_eq!(parse(text), Ok(nanos), "{text}");
        }
    }

    #[test]
    fn refuses_as_go() {
        for (text, message) in [
            ("", r#"time: invalid duration """#),
            ("3", r#"time: missing unit in duration "3""#),
            ("1", r#"time: missing unit in duration "1""#),
            ("1h5", r#"time: missing unit in duration "1h5""#),
            ("-", r#"time: invalid duration "-""#),
            ("s", r#"time: invalid duration "s""#),
            (".", r#"time: invalid duration ".""#),
            ("-.", r#"time: invalid duration "-.""#),
            (".s", r#"time: invalid duration ".s""#),
            ("+.s", r#"time: invalid duration "+.s""#),
            ("1x", r#"time: unknown unit "x" in duration "1x""#),
            ("1d", r#"time: unknown unit "d" in duration "1d""#),
            ("1h x", r#"time: unknown unit "h x" in duration "1h x""#),
            ("1µ", r#"time: unknown unit "\xc2\xb5" in duration "1\xc2\xb5""#),
            ("\"1s", r#"time: invalid duration "\"1s""#),
            ("9223372036854775808ns", r#"time: invalid duration "9223372036854775808ns""#),
            ("9223372036854775.808us", r#"time: invalid duration "9223372036854775.808us""#),
            ("9223372036854ms775us808ns", r#"time: invalid duration "9223372036854ms775us808ns""#),
            ("-9223372036854775809ns", r#"time: invalid duration "-9223372036854775809ns""#),
            ("99999999999999999999h", r#"time: invalid duration "99999999999999999999h""#),
            ("2562048h", r#"time: invalid duration "2562048h""#),
            (
                "9223372036854775808ns9223372036854775808ns",
                r#"time: invalid duration "9223372036854775808ns9223372036854775808ns""#,
            ),
        ] {
            let error = parse(text).expect_err(text);
            assert_eq!(error.to_string(), message, "{text}");
        }
        assert_eq!(parse("2562048h"), Err(Error::OutOfRange("2562048h".into())));
        assert_eq!(
            parse("1x"),
            Err(Error::UnknownUnit { unit: "x".into(), duration: "1x".into() })
        );
    }

    #[test]
    fn formats_as_go() {
        for (nanos, text) in [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (4 * M + 5 * S, "4m5s"),
            (4 * M + 5001 * MS, "4m5.001s"),
            (5 * H + 6 * M + 7001 * MS, "5h6m7.001s"),
            (8 * M + 1, "8m0.000000001s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(format(nanos), text, "{nanos}");
        }
    }

    proptest! {
        #[test]
        fn no_text_panics(text in "\\PC{0,40}") {
            let _ = parse(&text);
        }

        #[test]
        fn no_near_duration_panics(
            text in "[-+]?([0-9]{0,22}(\\.[0-9]{0,22})?(ns|us|µs|μs|ms|s|m|h|x|µ)?){1,4}",
        ) {
            if let Err(e) = parse(&text) {
                prop_assert!(e.to_string().starts_with("time: "), "{e}");
            }
        }

        #[test]
        fn formatted_durations_read_back(nanos in any::<i64>()) {
            prop_assert_eq!(parse(&format(nanos)), Ok(nanos));
        }
    }
}
