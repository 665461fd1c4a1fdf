//! The OpenAPI documents kube-apiserver publishes, generated from the Rust types of the served
//! kinds.
//!
//! - `/openapi/v3`: a root naming one document per served group-version, each by a
//!   `serverRelativeURL` carrying the hash of its content (`/openapi/v3/api/v1?hash=…`).
//! - `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`: OpenAPI 3.0 documents with the
//!   group-version's paths and, under `components.schemas`, every schema those paths reach, so
//!   that each document stands alone. kubectl reads them for `explain`, for client-side `apply`
//!   (strategic merge patch needs the `x-kubernetes-patch-*` extensions) and to learn which
//!   query parameters a kind's PATCH takes.
//! - `/openapi/v2`: the same schemas as one Swagger 2.0 document, as JSON or as the gnostic
//!   protobuf kubectl asks for. kubectl's client-side validation (`--validate=strict`, the
//!   default, on `create -f` and `apply`) reads this document, not the v3 ones.
//!
//! Schemas come from [`k8s_openapi`]'s types through [`schemars`]; their names are Kubernetes'
//! own (`io.k8s.api.core.v1.Pod`). [`annotations`] adds what those schemas lack and
//! kube-apiserver's carry: `x-kubernetes-group-version-kind` on each kind and the list, map and
//! patch extensions. Documents are pure values; [`answer`] serves cached copies built once.
//! The schemas are built in `schemas`, the paths and their operations in `paths`, the Swagger 2.0
//! form in `v2`; this module assembles the documents and serves them.
//!
//! What kubectl decides from these documents: when a kind's PATCH operation lists the
//! `fieldValidation` query parameter, kubectl leaves validation to the server and skips its own.
//! This server checks unknown and duplicate fields itself (`crate::fields`,
//! `crate::strict_json`), so PATCH lists the parameter ([`SERVER_FIELD_VALIDATION`]) and kubectl
//! sends `fieldValidation=Strict` instead of validating against `/openapi/v2` first.

mod annotation_table;
pub mod annotations;
mod paths;
mod schemas;
mod v2;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher};
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use crate::resource::{Registry, ResourceType};
use crate::version::KUBERNETES_VERSION;

pub use annotations::{list_annotations, ListAnnotations, ListType, MapType, PatchStrategy};
pub(crate) use schemas::list_schema;
pub use schemas::{kind_names, schemas_for, KindNames};

use paths::{resource_paths, resources_path};
use schemas::names_of;

/// Where a document's schemas live; every `$ref` starts with this.
pub const SCHEMA_REF_PREFIX: &str = "#/components/schemas/";

/// The media type of the JSON documents.
pub const JSON: &str = "application/json";

/// The media type kubectl asks `/openapi/v2` for: gnostic's `openapi.v2.Document` protobuf.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The media type of the protobuf answer. As kube-apiserver's, it is not [`V2_PROTOBUF`]: Go's
/// media type parser, which client-go runs on every answer, rejects the `@` in that name.
pub const V2_PROTOBUF_ANSWER: &str = "application/octet-stream";

/// Whether PATCH operations advertise the `fieldValidation` query parameter. kubectl skips its
/// client-side validation for a kind whose PATCH does, trusting the server to reject unknown and
/// duplicate fields under `fieldValidation=Strict`, which this server does.
pub const SERVER_FIELD_VALIDATION: bool = true;

// ---------------------------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------------------------

/// One document as served: its bytes and the hash that names this content.
#[derive(Debug)]
pub struct Document {
    /// The serialized document.
    pub body: Vec<u8>,
    /// Upper-case hex digest of `body`, stable for the same content.
    pub hash: String,
}

impl Document {
    fn new(body: Vec<u8>) -> Document {
        let hash = hash(&body);
        Document { body, hash }
    }

    fn json(value: &Value) -> Document {
        Document::new(serde_json::to_vec(value).unwrap_or_default())
    }
}

/// The v3 documents: the root and one per group-version.
#[derive(Debug)]
pub struct V3 {
    /// `/openapi/v3`.
    pub root: Vec<u8>,
    /// Each group-version's document, keyed by its path under `/openapi/v3/` (`api/v1`,
    /// `apis/apps/v1`).
    pub documents: BTreeMap<String, Document>,
}

/// The v2 document in both encodings.
#[derive(Debug)]
pub struct V2 {
    /// As JSON.
    pub json: Document,
    /// As gnostic protobuf.
    pub protobuf: Document,
}

/// What to answer a GET under `/openapi`.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// 200 with a body.
    Body {
        /// The document.
        body: &'a [u8],
        /// Its media type.
        content_type: &'static str,
        /// Its hash, sent as the ETag.
        etag: Option<&'a str>,
        /// The request named the current hash: the answer may be cached for good.
        immutable: bool,
    },
    /// 301 to this path and query (relative to the server's base path): the request named a hash
    /// that is not the current one.
    Redirect(String),
    /// 304: the client's copy (`If-None-Match`) is current.
    NotModified,
    /// 404: no such document.
    NotFound,
}

/// The v3 documents of a tenant's cluster (`host` false) or of the host API, built on first use.
pub fn v3(host: bool) -> &'static V3 {
    static TENANT: OnceLock<V3> = OnceLock::new();
    static HOST: OnceLock<V3> = OnceLock::new();
    match host {
        false => TENANT.get_or_init(|| build_v3(&Registry::default())),
        true => HOST.get_or_init(|| build_v3(&Registry::host())),
    }
}

/// The v2 document of a tenant's cluster (`host` false) or of the host API, built on first use.
pub fn v2(host: bool) -> &'static V2 {
    static TENANT: OnceLock<V2> = OnceLock::new();
    static HOST: OnceLock<V2> = OnceLock::new();
    match host {
        false => TENANT.get_or_init(|| build_v2(&Registry::default())),
        true => HOST.get_or_init(|| build_v2(&Registry::host())),
    }
}

/// Answer `GET /openapi/<segments…>` with the query's `hash`, the request's Accept and
/// If-None-Match headers.
pub fn answer(
    host: bool,
    segments: &[&str],
    hash: Option<&str>,
    accept: &str,
    if_none_match: Option<&str>,
) -> Answer<'static> {
    answer_with(host, None, segments, hash, accept, if_none_match)
}

/// [`answer`], for a cluster that also serves custom resources: `custom` holds the v3 root
/// naming their documents too, and their group-versions' documents ([`build_custom_v3`]).
pub fn answer_with<'a>(
    host: bool,
    custom: Option<&'a V3>,
    segments: &[&str],
    hash: Option<&str>,
    accept: &str,
    if_none_match: Option<&str>,
) -> Answer<'a> {
    match segments {
        ["v3"] => {
            let root = custom.map_or(&v3(host).root, |c| &c.root);
            Answer::Body { body: root, content_type: JSON, etag: None, immutable: false }
        }
        ["v3", rest @ ..] => {
            let key = rest.join("/");
            let found = custom.and_then(|c| c.documents.get(&key));
            let Some(document) = found.or_else(|| v3(host).documents.get(&key)) else {
                return Answer::NotFound;
            };
            match hash {
                Some(h) if !h.is_empty() && h != document.hash => {
                    Answer::Redirect(format!("/openapi/v3/{key}?hash={}", document.hash))
                }
                _ if etag_matches(if_none_match, &document.hash) => Answer::NotModified,
                _ => Answer::Body {
                    body: &document.body,
                    content_type: JSON,
                    etag: Some(&document.hash),
                    immutable: hash.is_some_and(|h| !h.is_empty()),
                },
            }
        }
        ["v2"] => {
            let v2 = v2(host);
            let (document, content_type) = if accept.contains("protobuf") {
                (&v2.protobuf, V2_PROTOBUF_ANSWER)
            } else {
                (&v2.json, JSON)
            };
            if etag_matches(if_none_match, &document.hash) {
                return Answer::NotModified;
            }
            Answer::Body {
                body: &document.body,
                content_type,
                etag: Some(&document.hash),
                immutable: false,
            }
        }
        _ => Answer::NotFound,
    }
}

fn etag_matches(if_none_match: Option<&str>, hash: &str) -> bool {
    if_none_match.is_some_and(|tags| {
        tags.split(',').any(|t| t.trim().trim_start_matches("W/").trim_matches('"') == hash)
    })
}

/// An upper-case hex digest of `bytes`: 64 bits of std's SipHash, which is all an ETag needs.
pub fn hash(bytes: &[u8]) -> String {
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    format!("{:016X}", hasher.finish())
}

// ---------------------------------------------------------------------------------------------
// Documents
// ---------------------------------------------------------------------------------------------

/// The path of a group-version's document under `/openapi/v3/`.
pub fn document_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Build every v3 document and the root that names them.
pub fn build_v3(registry: &Registry) -> V3 {
    build_v3_of(registry, Map::new(), |_, _| true)
}

/// The v3 documents of the group-versions that serve custom resources, and a root naming them
/// beside the built-in documents; `None` when there are none.
pub fn build_custom_v3(host: bool, registry: &Registry) -> Option<V3> {
    let built_in: Value = serde_json::from_slice(&v3(host).root).unwrap_or_default();
    let root = built_in.get("paths").and_then(Value::as_object).cloned().unwrap_or_default();
    let custom = build_v3_of(registry, root, |group, version| {
        registry.in_group_version(group, version).any(ResourceType::is_custom)
    });
    (!custom.documents.is_empty()).then_some(custom)
}

/// The documents of the group-versions `wanted` picks, and a root naming them beside the entries
/// `root` already has.
fn build_v3_of(
    registry: &Registry,
    mut root: Map<String, Value>,
    wanted: impl Fn(&str, &str) -> bool,
) -> V3 {
    let mut documents = BTreeMap::new();
    for (group, versions) in registry.groups() {
        for version in versions.into_iter().filter(|v| wanted(group, v)) {
            let key = document_key(group, version);
            let document = Document::json(&document(registry, group, version));
            root.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", document.hash)}),
            );
            documents.insert(key, document);
        }
    }
    let root = serde_json::to_vec(&json!({ "paths": root })).unwrap_or_default();
    V3 { root, documents }
}

/// Build the v2 document: every served schema, in Swagger 2.0 form.
pub fn build_v2(registry: &Registry) -> V2 {
    let mut schemas = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            schemas.extend(schemas_for(registry, group, version));
        }
    }
    let document = v2::document(&schemas, KUBERNETES_VERSION.2);
    V2 { json: Document::json(&document), protobuf: Document::new(v2::encode(&document)) }
}

/// The OpenAPI 3.0 document of one group-version: its paths and every schema they reach.
pub fn document(registry: &Registry, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    if group.is_empty() {
        paths.insert(format!("/api/{version}/"), resources_path(group, version));
    } else {
        paths.insert(format!("/apis/{group}/{version}/"), resources_path(group, version));
    }
    for rt in registry.in_group_version(group, version) {
        if let Some(names) = names_of(rt) {
            resource_paths(rt, &names, &mut paths);
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION.2},
        "paths": paths,
        "components": {"schemas": schemas_for(registry, group, version)},
    })
}

#[cfg(test)]
mod tests;

/// The schemas of one group-version, as [`schemas_for`] builds them, kept after the first use.
pub type Schemas = std::sync::Arc<Map<String, Value>>;

/// The schemas of one group-version of the built-in registry, built once per process.
pub fn cached_schemas(group: &str, version: &str) -> Schemas {
    use std::collections::HashMap;
    use std::sync::OnceLock;

    use parking_lot::Mutex;

    static CACHE: OnceLock<Mutex<HashMap<String, Schemas>>> = OnceLock::new();
    let key = format!("{group}/{version}");
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = cache.lock().get(&key) {
        return found.clone();
    }
    let built = std::sync::Arc::new(schemas_for(&Registry::host(), group, version));
    cache.lock().insert(key, built.clone());
    built
}

/// The schema name a property's schema refers to, through `$ref`, `allOf` or array `items`.
pub fn referenced(schema: &Value) -> Option<&str> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return r.strip_prefix(SCHEMA_REF_PREFIX);
    }
    if let Some(first) = schema.get("allOf").and_then(Value::as_array).and_then(|a| a.first()) {
        return referenced(first);
    }
    if let Some(items) = schema.get("items") {
        return referenced(items);
    }
    None
}
