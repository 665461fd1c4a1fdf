//! Kubernetes resource quantities as `resource.ParseQuantity` reads them: a signed decimal
//! number and a suffix, binary (`Ki` … `Ei`), decimal SI (`n` … `E`) or a decimal exponent
//! (`e3`, `E-2`).

/// The scale a suffix stands for, as powers of ten and of two: `k` is `(3, 0)`, `Mi` `(0, 20)`,
/// `m` `(-3, 0)`, and no suffix `(0, 0)`. Exponents (`e3`) are not suffixes here; `None` for
/// anything else.
pub fn suffix_scale(suffix: &str) -> Option<(i32, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => return None,
    })
}

/// A quantity in nano-units (`1` is 10^9, `500m` is 5 × 10^8), rounded up, and saturating far
/// beyond anything a cluster counts; `None` if it does not parse.
pub fn parse_nanos(s: &str) -> Option<i128> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut mantissa: i128 = 0;
    let mut digits = 0;
    let mut scale: i32 = 0;
    let mut point = false;
    let mut end = 0;
    for (i, c) in body.bytes().enumerate() {
        match c {
            b'0'..=b'9' => {
                digits += 1;
                mantissa = mantissa.saturating_mul(10).saturating_add(i128::from(c - b'0'));
                if point {
                    scale += 1;
                }
            }
            b'.' if !point => point = true,
            _ => break,
        }
        end = i + 1;
    }
    if digits == 0 {
        return None;
    }
    let (exp10, exp2) = match suffix_scale(&body[end..]) {
        Some(scale) => scale,
        None => {
            let exponent = body[end..].strip_prefix(['e', 'E'])?;
            let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if unsigned.is_empty() || !unsigned.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            (exponent.parse::<i32>().unwrap_or(if exponent.starts_with('-') { -99 } else { 99 }), 0)
        }
    };
    let mut value = mantissa.saturating_mul(1i128 << exp2);
    let shift = exp10 - scale + 9;
    if shift >= 0 {
        for _ in 0..shift.min(40) {
            value = value.saturating_mul(10);
        }
    } else {
        let divisor = 10i128.checked_pow(shift.unsigned_abs()).unwrap_or(i128::MAX);
        value = if value == 0 { 0 } else { (value - 1) / divisor + 1 };
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        assert_eq!(suffix_scale("Ki"), Some((0, 10)));
        assert_eq!(suffix_scale("m"), Some((-3, 0)));
        assert_eq!(suffix_scale("KB"), None);
        assert_eq!(suffix_scale("e3"), None);
    }

    #[test]
    fn nano_units() {
        assert_eq!(parse_nanos("1"), Some(1_000_000_000));
        assert_eq!(parse_nanos("1.5Gi"), Some(3 << 29).map(|b: i128| b * 1_000_000_000));
        assert_eq!(parse_nanos("1e3"), parse_nanos("1k"));
        assert_eq!(parse_nanos("0.1n"), Some(1), "rounded up");
        assert_eq!(parse_nanos("+1m"), Some(1_000_000));
        assert_eq!(parse_nanos("1e99999999999"), Some(i128::MAX), "saturates");
        for bad in ["", "1 GB", "1e", "e3", "1.5.3", "1KB", "--1", "."] {
            assert_eq!(parse_nanos(bad), None, "{bad}");
        }
    }
}
