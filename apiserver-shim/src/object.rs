//! Helpers over objects as JSON values: metadata access, timestamps, spec/status comparison.

use serde_json::{Map, Value};

/// The current time as Kubernetes writes timestamps (`2024-05-01T12:00:00Z`).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `object.metadata`, created if missing.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    let root = object.as_object_mut().expect("objects are JSON objects");
    let meta = root.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// A string field of `object.metadata`.
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// The object's finalizers.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Whether the object is being deleted.
pub fn is_deleting(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// Everything of an object but `metadata` and `status`: what bumps `generation` when it changes.
pub fn spec_part(object: &Value) -> Map<String, Value> {
    object
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// A label map as `k1=v1,k2=v2`, as kubectl prints selectors (empty for none).
pub fn label_pairs(map: Option<&Value>) -> String {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Drop what Go's `omitempty` drops from metadata: empty label and annotation maps, empty
/// finalizer and owner lists, and nulls, so that a patch setting `annotations: {}` stores what
/// kube-apiserver stores.
pub fn normalize_metadata(object: &mut Value) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    meta.retain(|_, v| match v {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::String(s) => !s.is_empty(),
        _ => true,
    });
}

/// An object's stored JSON (compact, as `serde_json` writes it) with `"resourceVersion":"<rv>"`
/// put first in its top-level `metadata`, without decoding it; `None` when the bytes have no
/// top-level `metadata` object. Serving a read this way skips a parse and a re-encode.
pub fn splice_resource_version(json: &[u8], rv: u64) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(json.len() + 40);
    splice_resource_version_into(&mut out, json, rv).then_some(out)
}

/// [`splice_resource_version`] appended to `out`, with no buffer of its own (a list is written
/// object after object into one); false, and `out` unchanged, for bytes without a top-level
/// `metadata` object.
pub fn splice_resource_version_into(out: &mut Vec<u8>, json: &[u8], rv: u64) -> bool {
    let Some(at) = metadata_start(json) else { return false };
    out.extend_from_slice(&json[..at]);
    out.extend_from_slice(b"\"resourceVersion\":\"");
    // Writing to a `Vec` cannot fail.
    let _ = std::io::Write::write_fmt(out, format_args!("{rv}"));
    out.push(b'"');
    if json.get(at) != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(&json[at..]);
    true
}

/// Where the members of the top-level `metadata` object of `json` begin.
fn metadata_start(json: &[u8]) -> Option<usize> {
    const KEY: &[u8] = b"\"metadata\":{";
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' if depth == 1 && json[i..].starts_with(KEY) => return Some(i + KEY.len()),
            // A string: jump to its closing quote (sorted keys put `data` or `spec`, long
            // strings and all, before `metadata`).
            b'"' => i = string_end(json, i + 1)?,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote that closes the string whose contents begin at `from`.
fn string_end(json: &[u8], mut from: usize) -> Option<usize> {
    loop {
        let at = from + memchr::memchr2(b'"', b'\\', json.get(from..)?)?;
        if json[at] == b'"' {
            return Some(at);
        }
        // An escape: skip the escaped byte (a `\uXXXX` has no quote or backslash after it).
        from = at + 2;
    }
}

/// Go's `%q` of a string (`strconv.Quote`), as the schema crate words CRD errors too.
pub use carrel_machinery::quote::go_quote;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_resource_version_goes_into_the_top_level_metadata_only() {
        for object in [
            json!({"apiVersion": "v1", "data": {"metadata": "{\"x\":1}", "\"metadata\":{": "y"}, "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"aggregationRule": {"x": [{"metadata": {}}]}, "metadata": {}, "spec": {"template": {"metadata": {"labels": {}}}}}),
            // Escapes: quotes, backslashes and control characters before `metadata`.
            json!({"data": {"a\\": "\\\"metadata\":{\\", "b": "\u{1}\n\t\"}", "\\\\": "\\"}, "metadata": {"name": "b"}}),
        ] {
            let bytes = serde_json::to_vec(&object).unwrap();
            let spliced = splice_resource_version(&bytes, 42).unwrap();
            let parsed: Value = serde_json::from_slice(&spliced).unwrap();
            let mut expected = object.clone();
            expected["metadata"]["resourceVersion"] = json!("42");
            assert_eq!(parsed, expected);
        }
        assert_eq!(splice_resource_version(br#"{"kind":"metadata"}"#, 1), None);
        assert_eq!(splice_resource_version(b"}}", 1), None);
        // A string left open, or an escape at the very end: no metadata, no panic.
        assert_eq!(splice_resource_version(br#"{"data":"abc"#, 1), None);
        assert_eq!(splice_resource_version(br#"{"data":"abc\"#, 1), None);
    }
}
