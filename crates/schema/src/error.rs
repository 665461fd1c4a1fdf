//! Field errors as kube-apiserver prints them (`k8s.io/apimachinery/pkg/util/validation/field`),
//! and the Go value formatting their messages use.

use serde_json::Value;

/// Why a field is wrong: the `field.ErrorType` of kube-apiserver. [`Reason::as_cause`] gives the
/// `StatusCause.reason` string of a 422 response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A required value is missing (`FieldValueRequired`).
    Required,
    /// A value is malformed (`FieldValueInvalid`).
    Invalid,
    /// A value is not one of the enumerated values (`FieldValueNotSupported`).
    NotSupported,
    /// A string is too long (`FieldValueTooLong`).
    TooLong,
    /// A list or map has too many items (`FieldValueTooMany`).
    TooMany,
    /// A value does not have the schema's type or format (`FieldValueTypeInvalid`).
    TypeInvalid,
    /// A value repeats one that must be unique (`FieldValueDuplicate`).
    Duplicate,
    /// A value is not permitted here (`FieldValueForbidden`).
    Forbidden,
}

impl Reason {
    /// The `StatusCause.reason` kube-apiserver reports, e.g. `"FieldValueInvalid"`.
    pub fn as_cause(&self) -> &'static str {
        match self {
            Reason::Required => "FieldValueRequired",
            Reason::Invalid => "FieldValueInvalid",
            Reason::NotSupported => "FieldValueNotSupported",
            Reason::TooLong => "FieldValueTooLong",
            Reason::TooMany => "FieldValueTooMany",
            Reason::TypeInvalid => "FieldValueTypeInvalid",
            Reason::Duplicate => "FieldValueDuplicate",
            Reason::Forbidden => "FieldValueForbidden",
        }
    }

    /// The words kube-apiserver prints for the reason, e.g. `"Invalid value"`.
    pub fn label(&self) -> &'static str {
        match self {
            Reason::Required => "Required value",
            Reason::Invalid | Reason::TypeInvalid => "Invalid value",
            Reason::NotSupported => "Unsupported value",
            Reason::TooLong => "Too long",
            Reason::TooMany => "Too many",
            Reason::Duplicate => "Duplicate value",
            Reason::Forbidden => "Forbidden",
        }
    }
}

/// One failure of a schema check or of an object's validation.
///
/// `field` is the path kube-apiserver reports (`"spec.replicas"`, `"spec.ports[0].name"`,
/// `"spec.versions[0].schema.openAPIV3Schema.properties[spec].type"`); a failure of the object's
/// root is reported at `"<nil>"`, as kube-apiserver prints a nil `field.Path`. `message` is the
/// whole line (`field: Reason label: value: detail`) and `detail` its last part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    /// The field path, or `"<nil>"` for the object's root.
    pub field: String,
    /// Why the field is wrong.
    pub reason: Reason,
    /// The message as kube-apiserver prints it.
    pub message: String,
    /// The detail part of the message (may be empty).
    pub detail: String,
}

/// The bad value of a field error, rendered as Go's `field.Error` renders `BadValue`.
#[derive(Debug, Clone)]
pub(crate) enum Bad {
    /// Not printed.
    Omit,
    /// A Go string, printed quoted.
    Str(String),
    /// A JSON value: scalars printed plainly (strings quoted), maps and lists with `%#v`.
    Json(Value),
    /// A Go integer.
    Int(i64),
    /// Printed as given.
    Raw(String),
}

impl FieldError {
    pub(crate) fn new(
        field: impl Into<String>,
        reason: Reason,
        bad: Bad,
        detail: impl Into<String>,
    ) -> FieldError {
        let field = field.into();
        let detail = detail.into();
        let mut body = reason.label().to_string();
        let prints_value =
            !matches!(reason, Reason::Required | Reason::Forbidden | Reason::TooLong);
        if prints_value {
            let value = match bad {
                Bad::Omit => None,
                Bad::Str(s) => Some(go_quote(&s)),
                Bad::Json(v) => Some(go_value(&v)),
                Bad::Int(i) => Some(i.to_string()),
                Bad::Raw(s) => Some(s),
            };
            if let Some(value) = value {
                body.push_str(": ");
                body.push_str(&value);
            }
        }
        if !detail.is_empty() {
            body.push_str(": ");
            body.push_str(&detail);
        }
        FieldError { message: format!("{field}: {body}"), field, reason, detail }
    }

    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError::new(field, Reason::Required, Bad::Omit, detail)
    }

    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError::new(field, Reason::Forbidden, Bad::Omit, detail)
    }

    pub(crate) fn invalid(
        field: impl Into<String>,
        bad: Bad,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError::new(field, Reason::Invalid, bad, detail)
    }

    pub(crate) fn type_invalid(
        field: impl Into<String>,
        bad: Bad,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError::new(field, Reason::TypeInvalid, bad, detail)
    }

    pub(crate) fn duplicate(field: impl Into<String>, bad: Bad) -> FieldError {
        FieldError::new(field, Reason::Duplicate, bad, "")
    }

    pub(crate) fn not_supported(
        field: impl Into<String>,
        bad: Bad,
        valid: &[String],
    ) -> FieldError {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError::new(field, Reason::NotSupported, bad, detail)
    }

    /// `field.TooLong`: "may not be more than N bytes".
    pub(crate) fn too_long(field: impl Into<String>, max: i64) -> FieldError {
        let detail = if max >= 0 {
            let unit = if max == 1 { "byte" } else { "bytes" };
            format!("may not be more than {max} {unit}")
        } else {
            "value is too long".to_string()
        };
        FieldError::new(field, Reason::TooLong, Bad::Omit, detail)
    }

    /// `field.TooMany`: "Too many: N: must have at most M items".
    pub(crate) fn too_many(field: impl Into<String>, actual: i64, max: i64) -> FieldError {
        let detail = if max >= 0 {
            let unit = if max == 1 { "item" } else { "items" };
            format!("must have at most {max} {unit}")
        } else {
            "has too many items".to_string()
        };
        let bad = if actual >= 0 { Bad::Int(actual) } else { Bad::Omit };
        FieldError::new(field, Reason::TooMany, bad, detail)
    }
}

/// Field paths as `field.Path` builds them: `a.b`, `a[key]`, `a[0]`.
pub(crate) fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

pub(crate) fn key(path: &str, key: &str) -> String {
    format!("{path}[{key}]")
}

pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

pub use carrel_machinery::quote::go_quote;

/// A JSON number as Go holds it after decoding an object: `int64` when it fits, else `float64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub(crate) fn of(n: &serde_json::Number) -> Num {
        match n.as_i64() {
            Some(i) => Num::Int(i),
            None => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
        }
    }

    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// Go's `%v`.
    pub(crate) fn go(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => go_float(f),
        }
    }
}

/// Go's `%v` of a `float64` (`strconv.FormatFloat(f, 'g', -1, 64)`).
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".to_string() } else { "-Inf".to_string() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".to_string() } else { "0".to_string() };
    }
    let sci = format!("{:e}", f);
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let mut out = format!("{sign}{first}");
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let esign = if exp < 0 { '-' } else { '+' };
        out.push_str(&format!("e{esign}{:02}", exp.abs()));
        out
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            format!("{sign}{digits}{}", "0".repeat(int_len - digits.len()))
        } else {
            format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
        }
    } else {
        format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
    }
}

/// A JSON value as Go's `field.Error` prints a bad value: `%v` for scalars (strings quoted, null
/// as `"null"`), `%#v` for maps and lists.
pub(crate) fn go_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => Num::of(n).go(),
        Value::String(s) => go_quote(s),
        Value::Array(_) | Value::Object(_) => go_sharp(v),
    }
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}`, `[]interface {}`).
pub(crate) fn go_sharp(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => Num::of(n).go(),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_sharp).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!("{}:{}", go_quote(k), map.get(k).map(go_sharp).unwrap_or_default())
                })
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

/// Go's `json.Marshal` of a decoded JSON value (keys sorted, floats without a needless `.0`).
pub(crate) fn go_json(v: &Value) -> String {
    match v {
        Value::Number(n) => match Num::of(n) {
            Num::Int(i) => i.to_string(),
            Num::Float(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{}", f as i128),
            Num::Float(f) => format!("{f}"),
        },
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_json).collect();
            format!("[{}]", inner.join(","))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        Value::String(k.clone()),
                        map.get(k).map(go_json).unwrap_or_default()
                    )
                })
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_as_go_does() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(-0.25), "-0.25");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1_000_000.0), "1e+06");
        assert_eq!(go_float(123456789.0), "1.23456789e+08");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
    }

    #[test]
    fn values_print_as_go_does() {
        assert_eq!(go_value(&json!("a\"b")), "\"a\\\"b\"");
        assert_eq!(go_value(&json!(null)), "\"null\"");
        assert_eq!(
            go_sharp(&json!({"protocol": "TCP", "name": "http", "port": 80})),
            r#"map[string]interface {}{"name":"http", "port":80, "protocol":"TCP"}"#
        );
        assert_eq!(
            go_sharp(&json!([1, "a", null])),
            r#"[]interface {}{1, "a", interface {}(nil)}"#
        );
    }

    #[test]
    fn messages_follow_field_error() {
        let e = FieldError::type_invalid("spec.replicas", Bad::Str("string".into()), "d");
        assert_eq!(e.message, r#"spec.replicas: Invalid value: "string": d"#);
        assert_eq!(e.reason.as_cause(), "FieldValueTypeInvalid");
        assert_eq!(FieldError::required("spec.image", "").message, "spec.image: Required value");
        assert_eq!(
            FieldError::too_many("spec.ports", 4, 3).message,
            "spec.ports: Too many: 4: must have at most 3 items"
        );
        assert_eq!(
            FieldError::too_long("spec.name", 5).message,
            "spec.name: Too long: may not be more than 5 bytes"
        );
    }
}
