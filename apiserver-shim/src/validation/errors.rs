//! Causes as kube-apiserver's `field.ErrorList` collects them.

use crate::object::go_quote as quote;
use crate::status::Cause;

/// kube-apiserver's `IsNegativeErrorMsg`.
pub(crate) const NEGATIVE: &str = "must be greater than or equal to 0";

/// The causes found, in order, each once (kube-apiserver's aggregate drops repeats).
#[derive(Debug, Default)]
pub struct Errors(pub Vec<Cause>);

pub(crate) fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

impl Errors {
    pub fn push(&mut self, reason: &'static str, field: &str, message: String) {
        let cause = Cause::new(reason, field, message);
        if !self.0.contains(&cause) {
            self.0.push(cause);
        }
    }

    /// `field.Required`: `Required value[: detail]`.
    pub fn required(&mut self, field: &str, detail: &str) {
        self.push("FieldValueRequired", field, with_detail("Required value".into(), detail));
    }

    /// `field.Invalid`: `Invalid value: <value>[: detail]`; `value` is already printed.
    pub fn invalid(&mut self, field: &str, value: &str, detail: &str) {
        self.push(
            "FieldValueInvalid",
            field,
            with_detail(format!("Invalid value: {value}"), detail),
        );
    }

    /// `field.NotSupported`: `Unsupported value: <value>: supported values: "A", "B"`.
    pub fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let list = supported.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", ");
        let detail =
            if supported.is_empty() { String::new() } else { format!("supported values: {list}") };
        self.push(
            "FieldValueNotSupported",
            field,
            with_detail(format!("Unsupported value: {value}"), &detail),
        );
    }

    /// `field.Forbidden`: `Forbidden: detail`.
    pub fn forbidden(&mut self, field: &str, detail: &str) {
        self.push("FieldValueForbidden", field, with_detail("Forbidden".into(), detail));
    }

    /// `field.TooLong`: `Too long: may not be more than N bytes`.
    pub fn too_long(&mut self, field: &str, max: usize) {
        let unit = if max == 1 { "byte" } else { "bytes" };
        self.push(
            "FieldValueTooLong",
            field,
            format!("Too long: may not be more than {max} {unit}"),
        );
    }

    /// `field.Duplicate`: `Duplicate value: <value>`.
    pub fn duplicate(&mut self, field: &str, value: &str) {
        self.push("FieldValueDuplicate", field, format!("Duplicate value: {value}"));
    }

    /// `field.NotFound`: `Not found: <value>`.
    pub fn not_found(&mut self, field: &str, value: &str) {
        self.push("FieldValueNotFound", field, format!("Not found: {value}"));
    }

    /// `ValidateNonnegativeField` of an integer field, if set.
    pub fn nonnegative<N: Into<i64>>(&mut self, value: Option<N>, field: &str) {
        if let Some(n) = value.map(Into::into).filter(|n| *n < 0) {
            self.invalid(field, &n.to_string(), NEGATIVE);
        }
    }

    /// One `Invalid` per message of a name check.
    pub fn invalid_each(&mut self, field: &str, value: &str, messages: Vec<String>) {
        for message in messages {
            self.invalid(field, &quote(value), &message);
        }
    }
}
