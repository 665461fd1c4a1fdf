//! String formats, as kube-openapi's `strfmt` registry checks them.
//!
//! kube-apiserver validates the formats it supported in Kubernetes 1.0 (`bsonobjectid`, `uri`,
//! `email`, `hostname`, `ipv4`, `ipv6`, `cidr`, `mac`, `uuid`, `uuid3`, `uuid4`, `uuid5`,
//! `isbn`, `isbn10`, `isbn13`, `creditcard`, `ssn`, `hexcolor`, `rgbcolor`, `byte`, `password`,
//! `date`, `duration`, `datetime`, `quantity`); names are compared without dashes
//! (`date-time`). Other formats are ignored.

use std::net::IpAddr;
use std::sync::OnceLock;

use base64::Engine;
use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Utc};
use regex::Regex;

const SUPPORTED: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "quantity",
];

fn normalize(format: &str) -> String {
    format.replace('-', "")
}

/// Whether kube-apiserver validates this string format.
pub(crate) fn is_supported(format: &str) -> bool {
    SUPPORTED.contains(&normalize(format).as_str())
}

fn regex(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

fn matches(cell: &'static OnceLock<Option<Regex>>, pattern: &str, s: &str) -> bool {
    regex(cell, pattern).is_some_and(|re| re.is_match(s))
}

/// Whether `s` is valid for the (supported) format.
pub(crate) fn validate(format: &str, s: &str) -> bool {
    static HOSTNAME: OnceLock<Option<Regex>> = OnceLock::new();
    static UUID: OnceLock<Option<Regex>> = OnceLock::new();
    static UUID3: OnceLock<Option<Regex>> = OnceLock::new();
    static UUID4: OnceLock<Option<Regex>> = OnceLock::new();
    static UUID5: OnceLock<Option<Regex>> = OnceLock::new();
    static BASE64: OnceLock<Option<Regex>> = OnceLock::new();
    static HEXCOLOR: OnceLock<Option<Regex>> = OnceLock::new();
    static RGBCOLOR: OnceLock<Option<Regex>> = OnceLock::new();
    static SSN: OnceLock<Option<Regex>> = OnceLock::new();
    static BSON: OnceLock<Option<Regex>> = OnceLock::new();
    static QUANTITY: OnceLock<Option<Regex>> = OnceLock::new();
    static URI_SCHEME: OnceLock<Option<Regex>> = OnceLock::new();
    match normalize(format).as_str() {
        "hostname" => {
            matches(
                &HOSTNAME,
                r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z0-9\p{S}\p{L}])(-?[a-zA-Z0-9\p{S}\p{L}]){1,62})$",
                s,
            ) && s.len() <= 255
                && s.split('.').all(|p| p.len() <= 63)
        }
        "uuid" => matches(
            &UUID,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid3" => matches(
            &UUID3,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid4" => matches(
            &UUID4,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid5" => matches(
            &UUID5,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            s,
        ),
        "byte" => matches(
            &BASE64,
            r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$",
            s,
        ),
        "hexcolor" => matches(&HEXCOLOR, r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", s),
        "rgbcolor" => matches(
            &RGBCOLOR,
            r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$",
            s,
        ),
        "ssn" => s.len() == 11 && matches(&SSN, r"^\d{3}[- ]?\d{2}[- ]?\d{4}$", s),
        "bsonobjectid" => matches(&BSON, r"^[0-9a-fA-F]{24}$", s),
        "quantity" => matches(
            &QUANTITY,
            r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?$",
            s,
        ),
        "ipv4" => s.parse::<IpAddr>().is_ok() && s.contains('.'),
        "ipv6" => s.parse::<IpAddr>().is_ok() && s.contains(':'),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "email" => is_email(s),
        "uri" => s.starts_with('/') || matches(&URI_SCHEME, r"^[a-zA-Z][a-zA-Z0-9+.-]*:\S*$", s),
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        "creditcard" => is_credit_card(s),
        "date" => parse_date(s).is_some(),
        "datetime" => parse_date_time(s).is_some(),
        "duration" => parse_duration(s).is_some(),
        _ => true,
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(ip) = ip.parse::<IpAddr>() else {
        return false;
    };
    if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) || bits.len() > 3 {
        return false;
    }
    let max = if ip.is_ipv4() { 32 } else { 128 };
    bits.parse::<u32>().is_ok_and(|b| b <= max)
}

fn is_mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    for sep in [':', '-'] {
        let parts: Vec<&str> = s.split(sep).collect();
        if matches!(parts.len(), 6 | 8 | 20) && parts.iter().all(|p| hex(p, 2)) {
            return true;
        }
    }
    let parts: Vec<&str> = s.split('.').collect();
    matches!(parts.len(), 3 | 4 | 10) && parts.iter().all(|p| hex(p, 4))
}

fn is_email(s: &str) -> bool {
    static ADDR: OnceLock<Option<Regex>> = OnceLock::new();
    static NAMED: OnceLock<Option<Regex>> = OnceLock::new();
    let addr = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*|\[[^\[\]\\]*\])";
    matches(&ADDR, &format!("^{addr}$"), s)
        || matches(&NAMED, &format!(r#"^[^<>]*<{addr}>$"#), s.trim())
}

fn isbn_digits(s: &str) -> String {
    s.chars().filter(|c| *c != ' ' && *c != '-').collect()
}

fn is_isbn10(s: &str) -> bool {
    let d = isbn_digits(s);
    let b = d.as_bytes();
    if b.len() != 10
        || !b[..9].iter().all(u8::is_ascii_digit)
        || !(b[9].is_ascii_digit() || b[9] == b'X')
    {
        return false;
    }
    let mut sum = 0u32;
    for (i, c) in b.iter().enumerate() {
        let v = if *c == b'X' { 10 } else { u32::from(c - b'0') };
        sum += (i as u32 + 1) * v;
    }
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let d = isbn_digits(s);
    let b = d.as_bytes();
    if b.len() != 13 || !b.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = b[..12]
        .iter()
        .enumerate()
        .map(|(i, c)| u32::from(c - b'0') * if i % 2 == 0 { 1 } else { 3 })
        .sum();
    (10 - sum % 10) % 10 == u32::from(b[12] - b'0')
}

fn is_credit_card(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(12..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                *d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// A `date` (`2006-01-02`), at midnight UTC.
pub(crate) fn parse_date(s: &str) -> Option<DateTime<FixedOffset>> {
    static DATE: OnceLock<Option<Regex>> = OnceLock::new();
    if !matches(&DATE, r"^\d{4}-\d{2}-\d{2}$", s) {
        return None;
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let dt = d.and_hms_opt(0, 0, 0)?;
    Some(Utc.from_utc_datetime(&dt).fixed_offset())
}

/// A `date-time`, in one of the layouts strfmt accepts (RFC 3339 with or without a colon in the
/// offset, local times, minutes precision, a space separator).
pub(crate) fn parse_date_time(s: &str) -> Option<DateTime<FixedOffset>> {
    static SHAPE: OnceLock<Option<Regex>> = OnceLock::new();
    if !matches(&SHAPE, r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", s) {
        return None;
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Some(dt);
    }
    for layout in ["%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%dT%H:%MZ"] {
        if let Ok(dt) = DateTime::parse_from_str(s, layout) {
            return Some(dt);
        }
    }
    if let Some(rest) = s.strip_suffix('Z') {
        if let Ok(dt) = NaiveDateTime::parse_from_str(rest, "%Y-%m-%dT%H:%M") {
            return Some(Utc.from_utc_datetime(&dt).fixed_offset());
        }
    }
    for layout in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, layout) {
            return Some(Utc.from_utc_datetime(&dt).fixed_offset());
        }
    }
    None
}

/// A `duration` in nanoseconds: Go's `time.ParseDuration` (`1h30m`, `1.5s`, `300ms`), else the
/// strfmt long form (`3 days`, `1 hour 5 min`).
pub(crate) fn parse_duration(s: &str) -> Option<i64> {
    carrel_machinery::duration::parse(s).ok().or_else(|| long_duration(s))
}

fn long_duration(s: &str) -> Option<i64> {
    static VALID: OnceLock<Option<Regex>> = OnceLock::new();
    static PART: OnceLock<Option<Regex>> = OnceLock::new();
    if !matches(&VALID, r"^\s*(?:\d+\s*[A-Za-zµ]+\s*)+$", s) {
        return None;
    }
    let part = regex(&PART, r"(\d+)\s*([A-Za-zµ]+)")?;
    let units: [(&[&str], i64); 8] = [
        (&["ns", "nano"], 1),
        (&["us", "µs", "micro"], 1_000),
        (&["ms", "milli"], 1_000_000),
        (&["s", "sec"], 1_000_000_000),
        (&["m", "min"], 60_000_000_000),
        (&["h", "hr", "hour"], 3_600_000_000_000),
        (&["d", "day"], 86_400_000_000_000),
        (&["w", "wk", "week"], 604_800_000_000_000),
    ];
    let mut total: i64 = 0;
    let mut ok = false;
    for cap in part.captures_iter(s) {
        let factor: i64 = cap.get(1)?.as_str().parse().ok()?;
        let unit = cap.get(2)?.as_str().trim().to_lowercase();
        for (variants, mult) in units {
            let last = variants.len() - 1;
            for (i, v) in variants.iter().enumerate() {
                if (i == last && unit.starts_with(v)) || unit.eq_ignore_ascii_case(v) {
                    ok = true;
                    total = total.checked_add(factor.checked_mul(mult)?)?;
                }
            }
        }
    }
    ok.then_some(total)
}

/// The bytes of a `byte` string (standard base64).
pub(crate) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_accept_and_refuse() {
        let cases: &[(&str, &str, bool)] = &[
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("date", "2024-2-1", false),
            ("date-time", "2024-01-02T03:04:05Z", true),
            ("date-time", "2024-01-02T03:04:05.123+02:00", true),
            ("date-time", "2024-01-02T03:04:05", true),
            ("date-time", "yesterday", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "not base64!", false),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid", "123e4567", false),
            ("hostname", "node-1.example.com", true),
            ("hostname", "-bad-.com", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "10.0.0", false),
            ("ipv4", "::1", false),
            ("ipv6", "fe80::1", true),
            ("ipv6", "10.0.0.1", false),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "10.0.0.0/33", false),
            ("email", "ops@example.com", true),
            ("email", "Ops <ops@example.com>", true),
            ("email", "not-an-email", false),
            ("mac", "00:00:5e:00:53:01", true),
            ("mac", "00:00:5e", false),
            ("duration", "1h30m", true),
            ("duration", "3 days", true),
            ("duration", "soon", false),
            ("password", "anything", true),
        ];
        for (format, value, ok) in cases {
            assert!(is_supported(format), "{format}");
            assert_eq!(validate(format, value), *ok, "{format} {value}");
        }
        assert!(!is_supported("int32"));
        assert!(!is_supported("k8s-short-name"));
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("1h30m"), Some(5_400_000_000_000));
        assert_eq!(parse_duration("1.5s"), Some(1_500_000_000));
        assert_eq!(parse_duration("-2ms"), Some(-2_000_000));
        assert_eq!(parse_duration("2 weeks"), Some(2 * 604_800_000_000_000));
    }

    /// Go durations are read in integers, as Go reads them: to the nanosecond, and refused past
    /// an int64 (a float64 sum rounded the first and let the second through, saturated).
    #[test]
    fn go_durations_are_exact_and_bounded() {
        assert_eq!(parse_duration("9007199254740993ns"), Some(9_007_199_254_740_993));
        assert_eq!(parse_duration("2562047h47m16.854775807s"), Some(i64::MAX));
        assert_eq!(parse_duration("-2562047h47m16.854775808s"), Some(i64::MIN));
        assert_eq!(parse_duration("2562047h47m16.854775808s"), None);
        assert!(!validate("duration", "9223372036854775808ns"));
        assert!(validate("duration", "1µs") && validate("duration", "1μs"));
    }
}
