//! Int-or-percent values (`maxUnavailable`, `maxSurge`).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::object_names as names;
use crate::validation::{Errors, NEGATIVE};

/// An `IntOrString` as kube-apiserver prints one (its `String()`: unquoted).
pub(crate) fn int_or_string(v: Option<&IntOrString>) -> String {
    match v {
        Some(IntOrString::String(s)) => s.clone(),
        Some(IntOrString::Int(n)) => n.to_string(),
        None => "0".into(),
    }
}

/// `N%`, as `IsValidPercent` accepts it; its number.
pub(crate) fn percent(s: &str) -> Option<i64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(i64::MAX))
}

/// `getIntOrPercentValue`.
pub(crate) fn int_or_percent_value(v: Option<&IntOrString>) -> i64 {
    match v {
        Some(IntOrString::String(s)) => percent(s).unwrap_or_else(|| s.parse().unwrap_or(0)),
        Some(IntOrString::Int(n)) => i64::from(*n),
        None => 0,
    }
}

/// `ValidatePositiveIntOrPercent`.
pub(crate) fn int_or_percent(v: Option<&IntOrString>, path: &str, e: &mut Errors) {
    match v {
        Some(IntOrString::String(s)) if percent(s).is_none() => e.invalid(
            path,
            s,
            &names::regex_error(
                "a valid percent string must be a numeric string followed by an ending '%'",
                "[0-9]+%",
                &["1%", "93%"],
            ),
        ),
        Some(IntOrString::Int(n)) if *n < 0 => e.invalid(path, &n.to_string(), NEGATIVE),
        _ => {}
    }
}

/// `IsNotMoreThan100Percent`.
pub(crate) fn at_most_100_percent(v: Option<&IntOrString>, path: &str, e: &mut Errors) {
    if let Some(IntOrString::String(s)) = v {
        if percent(s).is_some_and(|p| p > 100) {
            e.invalid(path, s, "must not be greater than 100%");
        }
    }
}
