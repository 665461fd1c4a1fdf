//! Decoding request bodies in YAML with bounded work.
//!
//! libyaml (under `serde_yaml`) re-examines every open flow collection for each token it reads,
//! so a document of nested `[` or `{` costs time quadratic in its depth before `serde_yaml`'s own
//! recursion limit of 128 is ever reached (a 100 KB document of `[` took seconds of CPU), and
//! aliases let a small document expand into a huge value ("billion laughs"). [`yaml`] therefore
//!
//! 1. refuses a document nested deeper than [`MAX_DEPTH`] after a linear scan of its text
//!    ([`nesting_depth`]), before libyaml parses it;
//! 2. builds the value with a budget: at most [`MAX_NODES_PER_BYTE`] values and as many string
//!    bytes per byte of input (plus a small allowance), so aliases cannot expand a document far
//!    beyond its own size.
//!
//! With the body limit of the server (3 MiB) this bounds a decode to a linear amount of work and
//! memory, so a decode cannot run on long after its client has gone. JSON needs no pre-scan:
//! `serde_json` stops at a depth of 128 as it reads (see `strict_json`).

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::status::{ApiError, ApiResult};

/// The deepest nesting of collections a YAML body may have (kube-apiserver's JSON and YAML
/// decoders refuse deeper documents too; `serde_yaml` itself stops at 128).
pub const MAX_DEPTH: usize = 128;

/// Values (and string bytes) a decoded YAML document may hold per byte of its text.
pub const MAX_NODES_PER_BYTE: usize = 2;

/// Values and string bytes every document may hold whatever its size.
const ALLOWANCE: usize = 64 * 1024;

/// Decode a YAML (or JSON, a subset of YAML) document; 400 BadRequest when it is not valid YAML,
/// nests deeper than [`MAX_DEPTH`] or expands through aliases far beyond its own size. `what`
/// names the document in errors ("the request body").
pub fn yaml(body: &[u8], what: &str) -> ApiResult<Value> {
    let depth = nesting_depth(body, MAX_DEPTH);
    if depth > MAX_DEPTH {
        return Err(ApiError::bad_request(format!(
            "{what} is not valid YAML: the document nests deeper than the limit of {MAX_DEPTH}"
        )));
    }
    let budget = Budget {
        nodes: Cell::new(body.len().saturating_mul(MAX_NODES_PER_BYTE) + ALLOWANCE),
        bytes: Cell::new(body.len().saturating_mul(MAX_NODES_PER_BYTE) + ALLOWANCE),
    };
    let de = serde_yaml::Deserializer::from_slice(body);
    Seed { budget: &budget }
        .deserialize(de)
        .map_err(|e| ApiError::bad_request(format!("{what} is not valid YAML: {e}")))
}

/// What a decode may still build.
struct Budget {
    nodes: Cell<usize>,
    bytes: Cell<usize>,
}

const EXPANDED: &str = "the document expands (through aliases) far beyond its own size";

impl Budget {
    fn node<E: serde::de::Error>(&self) -> Result<(), E> {
        let left = self.nodes.get().checked_sub(1).ok_or_else(|| E::custom(EXPANDED))?;
        self.nodes.set(left);
        Ok(())
    }
    fn bytes<E: serde::de::Error>(&self, n: usize) -> Result<(), E> {
        let left = self.bytes.get().checked_sub(n).ok_or_else(|| E::custom(EXPANDED))?;
        self.bytes.set(left);
        Ok(())
    }
}

struct Seed<'a> {
    budget: &'a Budget,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.node()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.node()?;
        Ok(v.into())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.node()?;
        Ok(v.into())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.node()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.node()?;
        self.budget.bytes(v.len())?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.node()?;
        self.budget.bytes(v.len())?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.budget.node()?;
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.budget.node()?;
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.node()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Seed { budget: self.budget })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.node()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.budget.node()?;
            self.budget.bytes(key.len())?;
            let value = map.next_value_seed(Seed { budget: self.budget })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// An upper bound on how deeply the collections of a YAML text nest, found in one pass: flow
/// collections (`[`, `{`) outside quotes, comments and block scalars, plus the block levels opened
/// by indentation and by `- ` / `? ` indicators. Stops counting once past `limit`.
pub fn nesting_depth(text: &[u8], limit: usize) -> usize {
    let mut deepest = 0;
    // Indentation columns of the open block levels.
    let mut blocks: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    // Inside a quoted scalar that spans lines: its quote character.
    let mut quote: Option<u8> = None;
    // Inside a block scalar: the indentation of the line that opened it.
    let mut block_scalar: Option<usize> = None;
    for line in text.split(|&b| b == b'\n') {
        let indent = line.iter().take_while(|&&b| b == b' ').count();
        let rest = &line[indent..];
        let blank = rest.iter().all(|b| b.is_ascii_whitespace());
        if let Some(parent) = block_scalar {
            if blank || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        let mut i = indent;
        if quote.is_none() && flow == 0 && !blank && rest.first() != Some(&b'#') {
            if rest.starts_with(b"---") || rest.starts_with(b"...") {
                blocks.clear();
            }
            while blocks.last().is_some_and(|&open| open >= indent) {
                blocks.pop();
            }
            blocks.push(indent);
            // Compact nested sequences and complex keys on one line: `- - - a`.
            while i + 1 < line.len() && matches!(line[i], b'-' | b'?') && line[i + 1] == b' ' {
                i += 2;
                while i < line.len() && line[i] == b' ' {
                    i += 1;
                }
                blocks.push(i);
            }
        }
        // The last significant byte outside quotes and comments, for block scalar indicators.
        let mut last = None;
        while i < line.len() {
            let b = line[i];
            if let Some(q) = quote {
                if q == b'"' && b == b'\\' {
                    i += 2;
                    continue;
                }
                if b == q {
                    if q == b'\'' && line.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    quote = None;
                    last = Some(i);
                }
                i += 1;
                continue;
            }
            let at_token_start =
                i == 0 || matches!(line[i - 1], b' ' | b'\t' | b'[' | b'{' | b',' | b':' | b'-');
            match b {
                b'#' if i == 0 || matches!(line[i - 1], b' ' | b'\t') => break,
                b'"' | b'\'' if at_token_start => quote = Some(b),
                b'[' | b'{' => {
                    flow += 1;
                    deepest = deepest.max(blocks.len() + flow);
                    if deepest > limit {
                        return deepest;
                    }
                }
                b']' | b'}' => flow = flow.saturating_sub(1),
                _ => {}
            }
            if !b.is_ascii_whitespace() {
                last = Some(i);
            }
            i += 1;
        }
        deepest = deepest.max(blocks.len() + flow);
        if deepest > limit {
            return deepest;
        }
        if quote.is_none() && flow == 0 {
            if let Some(end) = last {
                // `key: |`, `- >-`, `key: |2+`: the lines indented further are its content.
                let mut j = end;
                while j > indent && matches!(line[j], b'+' | b'-' | b'0'..=b'9') {
                    j -= 1;
                }
                let indicator = matches!(line[j], b'|' | b'>')
                    && (j == indent || matches!(line[j - 1], b' ' | b'\t'));
                if indicator {
                    block_scalar = Some(indent);
                }
            }
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_documents_decode_as_serde_yaml_decodes_them() {
        let text = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {x: \"1\"}\ndata:\n  script: |\n    if [[ -n \"$A\" ]]; then [ [ [\n    fi\n  list: [1, 2.5, true, null, 'it''s']\n  n: 3\n";
        let value = yaml(text, "the request body").expect("valid");
        assert_eq!(value, serde_yaml::from_slice::<Value>(text).expect("serde_yaml"));
        assert_eq!(value["data"]["script"], "if [[ -n \"$A\" ]]; then [ [ [\nfi\n");
        let json = br#"{"a": [1, {"b": "[[[["}], "c": "x"}"#;
        assert_eq!(yaml(json, "x").expect("valid"), serde_json::from_slice::<Value>(json).unwrap());
    }

    #[test]
    fn depth_counts_flow_and_block_levels() {
        assert_eq!(nesting_depth(b"a: 1\n", 100), 1);
        assert_eq!(nesting_depth(b"a:\n  b:\n    c: [1, {d: 2}]\n", 100), 5);
        assert_eq!(nesting_depth(b"- - - a\n", 100), 4);
        assert_eq!(nesting_depth(b"a: '[[[['\nb: \"{{\\\"{{\"\nc: x # [[[[\n", 100), 1);
        assert_eq!(nesting_depth(b"a: |\n  [[[[\n  {{{{\nb: 1\n", 100), 1);
        // A deep document stops the scan as soon as it passes the limit.
        assert_eq!(nesting_depth(&[b'['; 1000], 10), 11);
    }

    #[test]
    fn deeply_nested_documents_are_refused_quickly() {
        // 100 KB of `[`, of `{a: `, of nested block mappings and of compact sequences: each is
        // refused as a 400 after a linear scan (the test finishing shows the bounded work).
        let flow = vec![b'['; 100_000];
        let mapping = "{a: ".repeat(25_000).into_bytes();
        let mut block = String::new();
        for depth in 0..400 {
            block.push_str(&" ".repeat(depth));
            block.push_str("a:\n");
        }
        let compact = "- ".repeat(50_000).into_bytes();
        for doc in [flow, mapping, block.into_bytes(), compact] {
            let err = yaml(&doc, "the request body").expect_err("too deep");
            assert_eq!((err.code(), err.reason()), (400, "BadRequest"), "{}", err.message());
            assert!(
                err.message().contains("nests deeper than the limit of 128"),
                "{}",
                err.message()
            );
        }
        // Just under the limit decodes.
        let ok = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(yaml(ok.as_bytes(), "x").is_ok());
    }

    #[test]
    fn alias_expansion_is_bounded() {
        // Nine levels of ten aliases each: 10^9 values if expanded.
        let mut doc = String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for pair in names.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            let refs = vec![format!("*{prev}"); 10].join(",");
            doc.push_str(&format!("{next}: &{next} [{refs}]\n"));
        }
        let err = yaml(doc.as_bytes(), "the request body").expect_err("expands");
        assert_eq!(err.code(), 400);
        assert!(err.message().contains("expands"), "{}", err.message());
        // A long string repeated through aliases counts its bytes each time.
        let long = "x".repeat(100_000);
        let refs = vec!["*s"; 5_000].join(",");
        let doc = format!("s: &s \"{long}\"\nl: [{refs}]\n");
        assert!(yaml(doc.as_bytes(), "x").is_err());
        // A few aliases, as manifests use them, are fine.
        let doc = b"base: &b {x: 1}\none: *b\ntwo: *b\n";
        assert_eq!(yaml(doc, "x").expect("valid")["two"]["x"], 1);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn pathological_yaml_bodies_are_answered_with_a_bad_request_status() {
        use std::sync::Arc;

        use axum::body::Body;
        use axum::http::Request;
        use tower::ServiceExt;

        let dir = tempfile::tempdir().expect("dir");
        let store =
            carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
                .expect("store");
        let api = Arc::new(crate::Api::new(Arc::new(store)).expect("api"));
        let router = crate::http::router(Arc::new(crate::Server::new(api, "")));
        let send = |method: &str, path: &str, content_type: &str, body: Vec<u8>| {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", content_type)
                .body(Body::from(body))
                .expect("request");
            router.clone().oneshot(request)
        };
        let collection = "/api/v1/namespaces/default/configmaps";
        let mut nested = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: ".to_vec();
        nested.extend(std::iter::repeat_n(b'[', 100_000));
        for (method, path, content_type) in [
            ("POST", collection.to_string(), "application/yaml"),
            ("PATCH", format!("{collection}/a?fieldManager=t"), "application/apply-patch+yaml"),
        ] {
            let answer = send(method, &path, content_type, nested.clone()).await.expect("answer");
            assert_eq!(answer.status().as_u16(), 400, "{method}");
            let body = axum::body::to_bytes(answer.into_body(), usize::MAX).await.expect("body");
            let status: Value = serde_json::from_slice(&body).expect("a Status");
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["reason"], "BadRequest");
            assert!(
                status["message"].as_str().unwrap_or_default().contains("nests deeper"),
                "{status}"
            );
        }
        let plain = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: '1'}\n";
        let created =
            send("POST", collection, "application/yaml", plain.to_vec()).await.expect("answer");
        assert_eq!(created.status().as_u16(), 201);
    }
}
