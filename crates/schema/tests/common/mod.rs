//! Helpers shared by the integration tests.
#![allow(dead_code)]

use carrel_schema::{FieldError, Schema};
use serde_json::Value;

pub const ROOT: &str = "spec.versions[0].schema.openAPIV3Schema";

/// Parses a schema that must be valid.
pub fn schema(v: Value) -> Schema {
    match Schema::parse(&v, ROOT) {
        Ok(s) => s,
        Err(errs) => panic!("schema refused: {:#?}", messages(&errs)),
    }
}

/// The errors of a schema that must be refused.
pub fn refused(v: Value) -> Vec<String> {
    match Schema::parse(&v, ROOT) {
        Ok(_) => panic!("schema accepted: {v}"),
        Err(errs) => messages(&errs),
    }
}

pub fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.message.clone()).collect()
}

/// A root schema with the given `spec` properties.
pub fn with_spec(props: Value) -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": props}
        }
    })
}

/// Validates `spec` against a schema built by [`with_spec`].
pub fn check_spec(props: Value, spec: Value) -> Vec<FieldError> {
    let s = schema(with_spec(props));
    s.validate(&serde_json::json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": spec}), None)
}
