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

/// An object's stored JSON (compact) with `"resourceVersion":"<rv>"` in its top-level
/// `metadata` where kube-apiserver writes it, without decoding it; `None` when the bytes have no
/// top-level `metadata` object. Serving a read this way skips a parse and a re-encode.
///
/// Bytes of a typed object (stored as [`crate::go_json`] writes them, starting `{"kind":`) have
/// their metadata in `ObjectMeta`'s order: the version goes after `name`, `generateName`,
/// `namespace`, `selfLink` and `uid`. Any other bytes (a custom resource's) have sorted keys:
/// the version goes before the first key that sorts after it.
pub fn splice_resource_version(json: &[u8], rv: u64) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(json.len() + 40);
    splice_resource_version_into(&mut out, json, rv).then_some(out)
}

/// [`splice_resource_version`] appended to `out`, with no buffer of its own (a list is written
/// object after object into one); false, and `out` unchanged, for bytes without a top-level
/// `metadata` object.
pub fn splice_resource_version_into(out: &mut Vec<u8>, json: &[u8], rv: u64) -> bool {
    splice_into(out, json, 0, rv)
}

/// [`splice_resource_version_into`] for an item of a list: a typed object's bytes lose their
/// `kind` and `apiVersion`, as Go writes the items of a typed list.
pub fn splice_list_item_into(out: &mut Vec<u8>, json: &[u8], rv: u64) -> bool {
    match crate::go_json::type_meta_end(json) {
        Some(from) => {
            let len = out.len();
            out.push(b'{');
            let spliced = splice_into(out, json, from, rv);
            if !spliced {
                out.truncate(len);
            }
            spliced
        }
        None => splice_into(out, json, 0, rv),
    }
}

/// The splice of `json` from `from` on (what comes before is left out).
fn splice_into(out: &mut Vec<u8>, json: &[u8], from: usize, rv: u64) -> bool {
    let Some(start) = metadata_start(json) else { return false };
    let typed = json.starts_with(b"{\"kind\":");
    let goes_after = |key: &[u8]| {
        if typed {
            !matches!(key, b"name" | b"generateName" | b"namespace" | b"selfLink" | b"uid")
        } else {
            key > b"resourceVersion".as_slice()
        }
    };
    let Some(at) = member_position(json, start, goes_after) else { return false };
    out.extend_from_slice(&json[from..at]);
    let at_end = json[at] == b'}';
    if at_end && at != start {
        out.push(b',');
    }
    out.extend_from_slice(b"\"resourceVersion\":\"");
    // Writing to a `Vec` cannot fail.
    let _ = std::io::Write::write_fmt(out, format_args!("{rv}"));
    out.push(b'"');
    if !at_end {
        out.push(b',');
    }
    out.extend_from_slice(&json[at..]);
    true
}

/// In the object whose members begin at `start`, where the first member whose key `goes_after`
/// begins, or else the object's closing brace.
fn member_position(json: &[u8], start: usize, goes_after: impl Fn(&[u8]) -> bool) -> Option<usize> {
    let mut i = start;
    loop {
        match *json.get(i)? {
            b'}' => return Some(i),
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(json, i + 1)?;
        if goes_after(&json[i + 1..key_end]) {
            return Some(i);
        }
        if json.get(key_end + 1) != Some(&b':') {
            return None;
        }
        i = value_end(json, key_end + 2)?;
        if json.get(i) == Some(&b',') {
            i += 1;
        }
    }
}

/// Where the JSON value that begins at `from` ends (the index after it).
fn value_end(json: &[u8], from: usize) -> Option<usize> {
    match *json.get(from)? {
        b'"' => Some(string_end(json, from + 1)? + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = from;
            loop {
                match *json.get(i)? {
                    b'"' => i = string_end(json, i + 1)?,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let rest = json.get(from..)?;
            Some(from + rest.iter().position(|b| matches!(b, b',' | b'}' | b']'))?)
        }
    }
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
    fn the_resource_version_goes_where_kube_apiserver_writes_it() {
        let typed = crate::go_json::to_vec(&json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "labels": {"x": "{}"},
                "creationTimestamp": "2026-01-01T00:00:00Z"}, "data": {"k": "v"}}));
        let shown = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"5","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"x":"{}"}},"data":{"k":"v"}}"#;
        assert_eq!(String::from_utf8(splice_resource_version(&typed, 5).unwrap()).unwrap(), shown);
        // As an item of its list: without its kind and apiVersion.
        let mut item = Vec::new();
        assert!(splice_list_item_into(&mut item, &typed, 5));
        assert_eq!(
            String::from_utf8(item).unwrap(),
            format!("{{{}", &shown[shown.find("\"metadata\"").unwrap()..])
        );
        // Metadata with only a name, or nothing: the version last, or alone.
        let only = crate::go_json::to_vec(
            &json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "a"}}),
        );
        assert_eq!(
            splice_resource_version(&only, 1).unwrap(),
            br#"{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"1"}}"#
        );
        assert_eq!(
            splice_resource_version(br#"{"kind":"Namespace","apiVersion":"v1","metadata":{}}"#, 1)
                .unwrap(),
            br#"{"kind":"Namespace","apiVersion":"v1","metadata":{"resourceVersion":"1"}}"#
        );
        // Sorted keys (a custom resource): before the first key that sorts after it.
        let custom = br#"{"apiVersion":"x/v1","kind":"S","metadata":{"annotations":{"uid":"1"},"name":"a","uid":"u"}}"#;
        assert_eq!(
            splice_resource_version(custom, 2).unwrap(),
            br#"{"apiVersion":"x/v1","kind":"S","metadata":{"annotations":{"uid":"1"},"name":"a","resourceVersion":"2","uid":"u"}}"#
        );
        let mut item = Vec::new();
        assert!(splice_list_item_into(&mut item, custom, 2));
        assert!(item.starts_with(br#"{"apiVersion":"x/v1","kind":"S""#));
    }

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
        assert_eq!(splice_resource_version(br#"{"metadata":{"name":"a"#, 1), None);
        assert_eq!(splice_resource_version(b"}}", 1), None);
        // A string left open, or an escape at the very end: no metadata, no panic.
        assert_eq!(splice_resource_version(br#"{"data":"abc"#, 1), None);
        assert_eq!(splice_resource_version(br#"{"data":"abc\"#, 1), None);
    }
}
