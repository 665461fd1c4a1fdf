//! `/openapi/v2`: the served schemas as one Swagger 2.0 document, and that document encoded as
//! gnostic's `openapi.v2.Document` protobuf (`openapiv2/OpenAPIv2.proto` in gnostic-models),
//! the encoding kubectl asks for and validates manifests against.
//!
//! The document holds definitions only: kubectl reads v2 for schemas, and takes paths from v3.

use serde_json::{json, Map, Value};

use super::SCHEMA_REF_PREFIX;

const DEFINITIONS_PREFIX: &str = "#/definitions/";

/// The Swagger 2.0 document holding `schemas` (OpenAPI 3.0 schemas) as definitions.
pub(super) fn document(schemas: &Map<String, Value>, version: &str) -> Value {
    let definitions: Map<String, Value> =
        schemas.iter().map(|(name, schema)| (name.clone(), schema_to_v2(schema))).collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": {},
        "definitions": definitions,
    })
}

/// A schema in Swagger 2.0's form: references point into `#/definitions/`, a description beside
/// a reference sits beside the `$ref` again (OpenAPI 3.0 wraps the reference in a one-element
/// `allOf` instead), and `nullable`, which 2.0 lacks, is dropped.
fn schema_to_v2(schema: &Value) -> Value {
    let Value::Object(object) = schema else { return schema.clone() };
    let mut out = Map::new();
    for (key, value) in object {
        match (key.as_str(), value) {
            ("$ref", Value::String(r)) => {
                out.insert(
                    key.clone(),
                    Value::String(r.replacen(SCHEMA_REF_PREFIX, DEFINITIONS_PREFIX, 1)),
                );
            }
            ("allOf", Value::Array(all)) if all.len() == 1 && is_bare_ref(&all[0]) => {
                out.insert("$ref".into(), schema_to_v2(&all[0])["$ref"].clone());
            }
            ("allOf" | "anyOf" | "oneOf", Value::Array(all)) => {
                out.insert(key.clone(), Value::Array(all.iter().map(schema_to_v2).collect()));
            }
            ("items" | "additionalProperties" | "not", Value::Object(_)) => {
                out.insert(key.clone(), schema_to_v2(value));
            }
            ("properties", Value::Object(properties)) => {
                let properties =
                    properties.iter().map(|(k, v)| (k.clone(), schema_to_v2(v))).collect();
                out.insert(key.clone(), Value::Object(properties));
            }
            ("nullable", _) => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

fn is_bare_ref(schema: &Value) -> bool {
    schema.as_object().is_some_and(|o| o.len() == 1 && o.contains_key("$ref"))
}

/// A protobuf message being written: fields are appended as they come.
#[derive(Debug, Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire_type));
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, value: &str) {
        self.bytes(field, value.as_bytes());
    }

    fn message(&mut self, field: u32, message: Message) {
        self.bytes(field, &message.0);
    }

    fn bool(&mut self, field: u32, value: bool) {
        self.key(field, 0);
        self.varint(u64::from(value));
    }
}

/// Encode a Swagger 2.0 document (as [`document`] builds it) as `openapi.v2.Document`.
pub(super) fn encode(document: &Value) -> Vec<u8> {
    let mut out = Message::default();
    out.string(1, document["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Message::default();
    info.string(1, document["info"]["title"].as_str().unwrap_or_default());
    info.string(2, document["info"]["version"].as_str().unwrap_or_default());
    out.message(2, info);
    // Paths: none (see the module's documentation).
    out.message(8, Message::default());
    let mut definitions = Message::default();
    if let Some(schemas) = document["definitions"].as_object() {
        for (name, schema) in schemas {
            definitions.message(1, named_schema(name, schema));
        }
    }
    out.message(9, definitions);
    out.0
}

/// `NamedSchema { name = 1; value = 2 }`.
fn named_schema(name: &str, schema: &Value) -> Message {
    let mut named = Message::default();
    named.string(1, name);
    named.message(2, encode_schema(schema));
    named
}

/// `Any { yaml = 2 }`: a value as YAML text, which JSON is.
fn any(value: &Value) -> Message {
    let mut any = Message::default();
    any.string(2, &serde_json::to_string(value).unwrap_or_default());
    any
}

/// `Schema`, with the fields Kubernetes' schemas use.
fn encode_schema(schema: &Value) -> Message {
    let mut out = Message::default();
    let Some(object) = schema.as_object() else { return out };
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    if let Some(r) = text("$ref") {
        out.string(1, r);
    }
    if let Some(format) = text("format") {
        out.string(2, format);
    }
    if let Some(title) = text("title") {
        out.string(3, title);
    }
    if let Some(description) = text("description") {
        out.string(4, description);
    }
    if let Some(default) = object.get("default") {
        out.message(5, any(default));
    }
    for required in object.get("required").and_then(Value::as_array).into_iter().flatten() {
        out.string(19, required.as_str().unwrap_or_default());
    }
    for value in object.get("enum").and_then(Value::as_array).into_iter().flatten() {
        out.message(20, any(value));
    }
    match object.get("additionalProperties") {
        Some(Value::Bool(allowed)) => {
            let mut item = Message::default();
            item.bool(2, *allowed);
            out.message(21, item);
        }
        Some(sub @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(1, encode_schema(sub));
            out.message(21, item);
        }
        _ => {}
    }
    match object.get("type") {
        Some(Value::String(ty)) => {
            let mut item = Message::default();
            item.string(1, ty);
            out.message(22, item);
        }
        Some(Value::Array(types)) => {
            let mut item = Message::default();
            for ty in types.iter().filter_map(Value::as_str) {
                item.string(1, ty);
            }
            out.message(22, item);
        }
        _ => {}
    }
    match object.get("items") {
        Some(sub @ Value::Object(_)) => {
            let mut items = Message::default();
            items.message(1, encode_schema(sub));
            out.message(23, items);
        }
        Some(Value::Array(subs)) => {
            let mut items = Message::default();
            for sub in subs {
                items.message(1, encode_schema(sub));
            }
            out.message(23, items);
        }
        _ => {}
    }
    for sub in object.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        out.message(24, encode_schema(sub));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        let mut all = Message::default();
        for (name, sub) in properties {
            all.message(1, named_schema(name, sub));
        }
        out.message(25, all);
    }
    if object.get("readOnly") == Some(&Value::Bool(true)) {
        out.bool(27, true);
    }
    for (key, value) in object.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Message::default();
        named.string(1, key);
        named.message(2, any(value));
        out.message(31, named);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_strings_encode_as_protobuf_does() {
        let mut m = Message::default();
        m.varint(300);
        assert_eq!(m.0, [0xAC, 0x02]);
        let mut m = Message::default();
        m.string(2, "hi");
        assert_eq!(m.0, [0x12, 2, b'h', b'i']);
    }

    #[test]
    fn references_and_nullable_take_the_v2_form() {
        let v3 = json!({
            "properties": {
                "metadata": {"allOf": [{"$ref": "#/components/schemas/a.B"}], "description": "d"},
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/a.C"}},
                "n": {"type": "string", "nullable": true},
            }
        });
        let v2 = schema_to_v2(&v3);
        assert_eq!(
            v2["properties"]["metadata"],
            json!({"$ref": "#/definitions/a.B", "description": "d"})
        );
        assert_eq!(v2["properties"]["items"]["items"]["$ref"], "#/definitions/a.C");
        assert_eq!(v2["properties"]["n"], json!({"type": "string"}));
    }

    #[test]
    fn a_schema_encodes_its_fields_in_order() {
        let encoded = encode_schema(&json!({"type": "string", "x-a": "b"}));
        // type = 22 (TypeItem{value = 1: "string"}), then vendor_extension = 31.
        assert_eq!(&encoded.0[..4], &[0xB2, 0x01, 8, 0x0A]);
        assert!(encoded.0.ends_with(b"\"b\""), "{:?}", encoded.0);
    }
}
