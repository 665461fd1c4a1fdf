//! Kubernetes resource quantities as `resource.ParseQuantity` reads them: a signed decimal
//! number and a suffix, binary (`Ki` … `Ei`), decimal SI (`n` … `E`) or a decimal exponent
//! (`e3`, `E-2`); and [`Quantity`], a value with the format it was written in, which prints in
//! its canonical form as `Quantity.String()` does (`1.5Gi` is `1536Mi`, `0.5` is `500m`).

use std::cmp::Ordering;
use std::fmt;

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

/// How a quantity was written, which decides how it prints (Go's `resource.Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `1e3`, `5E-2`.
    DecimalExponent,
    /// `Ki`, `Mi` … `Ei`.
    BinarySI,
    /// No suffix, or `n`, `u`, `m`, `k`, `M` … `E`.
    DecimalSI,
}

/// A resource quantity: its value in nano-units and the format it was written in. Values compare
/// and add as numbers; a sum keeps the format of its first non-zero term (Go's `Quantity.Add`).
/// It prints in Kubernetes' canonical form.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Zero, as `resource.Quantity{Format: DecimalSI}`.
    pub const ZERO: Quantity = Quantity { nanos: 0, format: Format::DecimalSI };

    /// A quantity as `resource.ParseQuantity` reads it; `None` if it does not parse.
    pub fn parse(text: &str) -> Option<Quantity> {
        let nanos = parse_nanos(text)?;
        let number = text.trim_start_matches(['+', '-']);
        let suffix = number.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        let format = match suffix_scale(suffix) {
            Some((_, 0)) => Format::DecimalSI,
            Some(_) => Format::BinarySI,
            None => Format::DecimalExponent,
        };
        Some(Quantity { nanos, format })
    }

    /// `n` whole units, as `resource.NewQuantity(n, DecimalSI)`.
    pub fn count(n: i64) -> Quantity {
        Quantity { nanos: i128::from(n) * NANO, format: Format::DecimalSI }
    }

    /// The value in nano-units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The format it prints in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Add `other`; zero takes on `other`'s format.
    pub fn add(&mut self, other: &Quantity) {
        if self.nanos == 0 {
            self.format = other.format;
        }
        self.nanos = self.nanos.saturating_add(other.nanos);
    }

    /// This quantity divided by `divisor` (at least 1), rounded down to a nano-unit, in its
    /// format.
    pub fn divided(&self, divisor: u32) -> Quantity {
        Quantity { nanos: self.nanos / i128::from(divisor.max(1)), format: self.format }
    }

    /// Rounded up to a whole number of units, in its format (`RoundUp(0)`).
    pub fn round_up(&self) -> Quantity {
        let remainder = self.nanos.rem_euclid(NANO);
        if remainder == 0 {
            return *self;
        }
        Quantity { nanos: self.nanos - remainder + NANO, format: self.format }
    }

    /// The value compared with `other`'s.
    pub fn cmp_value(&self, other: &Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    /// The canonical form (`Quantity.String()`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let binary = self.format == Format::BinarySI
            && self.nanos.unsigned_abs() >= 1024 * NANO.unsigned_abs()
            && self.nanos % NANO == 0;
        if binary {
            let mut amount = self.nanos / NANO;
            let mut exponent = 0;
            while exponent < BINARY.len() - 1 && amount % 1024 == 0 {
                amount /= 1024;
                exponent += 1;
            }
            return write!(f, "{amount}{}", BINARY[exponent]);
        }
        // A mantissa and a power of ten that is a multiple of three.
        let mut amount = self.nanos;
        let mut exponent: i32 = -9;
        while amount % 10 == 0 {
            amount /= 10;
            exponent += 1;
        }
        match exponent.rem_euclid(3) {
            1 => {
                amount *= 10;
                exponent -= 1;
            }
            2 => {
                amount *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        if self.format == Format::DecimalExponent {
            return match exponent {
                0 => write!(f, "{amount}"),
                e => write!(f, "{amount}e{e}"),
            };
        }
        while exponent > 18 {
            amount = amount.saturating_mul(1000);
            exponent -= 3;
        }
        let suffix = match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => "",
        };
        write!(f, "{amount}{suffix}")
    }
}

const BINARY: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

impl PartialEq for Quantity {
    /// Equal values (whatever their formats), as `Quantity.Cmp(…) == 0`.
    fn eq(&self, other: &Quantity) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

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

    #[test]
    fn canonical_forms_are_kubernetes() {
        let canonical = |s: &str| Quantity::parse(s).expect(s).to_string();
        let table = [
            ("0", "0"),
            ("0Gi", "0"),
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("2048", "2048"),
            ("512Ki", "512Ki"),
            ("1Ki", "1Ki"),
            ("0.5Ki", "512"),
            ("1000Ki", "1000Ki"),
            ("1k", "1k"),
            ("1000", "1k"),
            ("1200", "1200"),
            ("12000", "12k"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("1E", "1E"),
            ("100e-3", "100e-3"),
            ("0.1n", "1n"),
            ("1M", "1M"),
            ("-1500m", "-1500m"),
            ("-2Ki", "-2Ki"),
            ("1.5", "1500m"),
            ("0.001", "1m"),
            ("10u", "10u"),
        ];
        for (written, want) in table {
            assert_eq!(canonical(written), want, "{written}");
        }
    }

    #[test]
    fn sums_keep_the_first_non_zero_terms_format() {
        let mut sum = Quantity::ZERO;
        sum.add(&Quantity::parse("1Gi").unwrap());
        sum.add(&Quantity::parse("512Mi").unwrap());
        assert_eq!(sum.to_string(), "1536Mi");
        let mut sum = Quantity::parse("500M").unwrap();
        sum.add(&Quantity::parse("1Gi").unwrap());
        assert_eq!(sum.format(), Format::DecimalSI);
        assert_eq!(sum.to_string(), "1573741824");
        assert_eq!(Quantity::count(2).to_string(), "2");
        assert_eq!(Quantity::parse("1").unwrap(), Quantity::parse("1000m").unwrap());
        // A division keeps the format: half of 1Gi is 512Mi, half of 1 is 500m.
        assert_eq!(Quantity::parse("1Gi").unwrap().divided(2).to_string(), "512Mi");
        assert_eq!(Quantity::parse("1").unwrap().divided(2).to_string(), "500m");
        assert_eq!(Quantity::parse("3n").unwrap().divided(2).to_string(), "1n");
        assert_eq!(Quantity::parse("1").unwrap().divided(0).to_string(), "1");
        assert_eq!(
            Quantity::parse("1Ki").unwrap().cmp_value(&Quantity::parse("1k").unwrap()),
            Ordering::Greater
        );
    }
}
