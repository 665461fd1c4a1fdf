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
//!
//! What kubectl decides from these documents: when a kind's PATCH operation lists the
//! `fieldValidation` query parameter, kubectl leaves validation to the server and skips its own.
//! This server checks unknown and duplicate fields itself (`crate::fields`,
//! `crate::strict_json`), so PATCH lists the parameter ([`SERVER_FIELD_VALIDATION`]) and kubectl
//! sends `fieldValidation=Strict` instead of validating against `/openapi/v2` first.

pub mod annotations;
mod v2;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher};
use std::sync::OnceLock;

use k8s_openapi::api::{
    apps::v1 as apps, autoscaling::v1 as autoscaling, batch::v1 as batch,
    coordination::v1 as coordination, core::v1 as core, events::v1 as events,
    networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
    scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::ListableResource;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use crate::http::KUBERNETES_VERSION;
use crate::resource::{Registry, ResourceType, Subresource};

pub use annotations::{list_annotations, ListAnnotations, ListType, MapType, PatchStrategy};

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

const WATCH: &str = "application/json;stream=watch";
const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

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

// ---------------------------------------------------------------------------------------------
// Schemas
// ---------------------------------------------------------------------------------------------

/// The schema names of a kind and of its list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindNames {
    /// The kind's schema (`io.k8s.api.core.v1.Pod`).
    pub kind: String,
    /// Its list's schema (`io.k8s.api.core.v1.PodList`).
    pub list: String,
}

/// A kind's Rust type, through what a document needs from it: its schema names, and a way to add
/// its schemas (and its list's) to a generator.
struct Kind {
    names: fn() -> KindNames,
    add: fn(&mut SchemaGenerator) -> Value,
    decode: fn(&Value) -> Result<(), String>,
}

fn kind_of<T>() -> Kind
where
    T: JsonSchema + ListableResource + serde::de::DeserializeOwned,
{
    Kind {
        decode: |value| {
            serde_path_to_error::deserialize::<_, T>(value).map(drop).map_err(|e| {
                match e.path().to_string().as_str() {
                    "." => e.inner().to_string(),
                    path => format!("{path}: {}", e.inner()),
                }
            })
        },
        names: || {
            let kind = T::schema_name().into_owned();
            KindNames { list: format!("{kind}List"), kind }
        },
        add: |generator| {
            generator.subschema_for::<T>();
            list_schema::<T>(generator)
        },
    }
}

/// The Rust type of a served kind; `None` for a kind k8s-openapi does not know.
fn kind(group: &str, version: &str, kind: &str) -> Option<Kind> {
    Some(match (group, version, kind) {
        ("", "v1", "Namespace") => kind_of::<core::Namespace>(),
        ("", "v1", "Pod") => kind_of::<core::Pod>(),
        ("", "v1", "Service") => kind_of::<core::Service>(),
        ("", "v1", "Endpoints") => kind_of::<core::Endpoints>(),
        ("", "v1", "ConfigMap") => kind_of::<core::ConfigMap>(),
        ("", "v1", "Secret") => kind_of::<core::Secret>(),
        ("", "v1", "ServiceAccount") => kind_of::<core::ServiceAccount>(),
        ("", "v1", "Event") => kind_of::<core::Event>(),
        ("", "v1", "Node") => kind_of::<core::Node>(),
        ("", "v1", "PersistentVolumeClaim") => kind_of::<core::PersistentVolumeClaim>(),
        ("", "v1", "PersistentVolume") => kind_of::<core::PersistentVolume>(),
        ("", "v1", "ResourceQuota") => kind_of::<core::ResourceQuota>(),
        ("", "v1", "LimitRange") => kind_of::<core::LimitRange>(),
        ("", "v1", "ReplicationController") => kind_of::<core::ReplicationController>(),
        ("apps", "v1", "Deployment") => kind_of::<apps::Deployment>(),
        ("apps", "v1", "ReplicaSet") => kind_of::<apps::ReplicaSet>(),
        ("apps", "v1", "StatefulSet") => kind_of::<apps::StatefulSet>(),
        ("apps", "v1", "DaemonSet") => kind_of::<apps::DaemonSet>(),
        ("batch", "v1", "Job") => kind_of::<batch::Job>(),
        ("batch", "v1", "CronJob") => kind_of::<batch::CronJob>(),
        ("coordination.k8s.io", "v1", "Lease") => kind_of::<coordination::Lease>(),
        ("events.k8s.io", "v1", "Event") => kind_of::<events::Event>(),
        ("rbac.authorization.k8s.io", "v1", "Role") => kind_of::<rbac::Role>(),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => kind_of::<rbac::RoleBinding>(),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => kind_of::<rbac::ClusterRole>(),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            kind_of::<rbac::ClusterRoleBinding>()
        }
        ("networking.k8s.io", "v1", "NetworkPolicy") => kind_of::<networking::NetworkPolicy>(),
        ("networking.k8s.io", "v1", "Ingress") => kind_of::<networking::Ingress>(),
        ("policy", "v1", "PodDisruptionBudget") => kind_of::<policy::PodDisruptionBudget>(),
        ("scheduling.k8s.io", "v1", "PriorityClass") => kind_of::<scheduling::PriorityClass>(),
        ("storage.k8s.io", "v1", "StorageClass") => kind_of::<storage::StorageClass>(),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            kind_of::<apiextensions::CustomResourceDefinition>()
        }
        ("carrel.dev", "v1alpha1", "Tenant") => kind_of::<crate::tenant::types::Tenant>(),
        _ => return None,
    })
}

/// The schema names of a custom resource's kind, as kube-apiserver names them: the group
/// reversed, the version, the kind (`com.example.stable.v1.CronTab`).
fn custom_names(rt: &ResourceType) -> KindNames {
    let group: Vec<&str> = rt.group.split('.').rev().collect();
    let kind = format!("{}.{}.{}", group.join("."), rt.version, rt.kind);
    let list = match &rt.custom {
        Some(custom) => format!("{}.{}.{}", group.join("."), rt.version, custom.list_kind),
        None => format!("{kind}List"),
    };
    KindNames { kind, list }
}

/// The schema names of any served type: built-in or custom.
fn names_of(rt: &ResourceType) -> Option<KindNames> {
    match rt.custom {
        Some(_) => Some(custom_names(rt)),
        None => kind_names(rt.group, rt.version, rt.kind),
    }
}

/// A custom resource's schema as published: its definition's, with the fields every object has
/// and the group-version-kind marker.
fn custom_schema(rt: &ResourceType, custom: &crate::crd::Custom) -> Value {
    let mut schema = match custom.openapi.as_ref() {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let properties = schema.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(properties) = properties {
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values."}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. In CamelCase."}),
        );
        properties.insert(
            "metadata".into(),
            described_ref(&meta::ObjectMeta::schema_name(), "Standard object's metadata."),
        );
    }
    schema.insert("type".into(), json!("object"));
    schema.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([gvk(rt.group, rt.version, rt.kind)]),
    );
    Value::Object(schema)
}

/// A custom resource's list schema.
fn custom_list_schema(rt: &ResourceType, names: &KindNames, list_kind: &str) -> Value {
    json!({
        "description": format!("{list_kind} is a list of {}", rt.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {"type": "array", "items": schema_ref(&names.kind)},
            "metadata": described_ref(&meta::ListMeta::schema_name(), "Standard list metadata."),
        },
        "x-kubernetes-group-version-kind": [gvk(rt.group, rt.version, list_kind)],
    })
}

/// The schema names of a served kind, or `None` when k8s-openapi does not know it.
pub fn kind_names(group: &str, version: &str, kind_name: &str) -> Option<KindNames> {
    kind(group, version, kind_name).map(|k| (k.names)())
}

/// Whether `object` decodes as its kind's type: every field of the type that the object sets
/// holds a value of the field's type (a number where Kubernetes has an int32, …). The error
/// names the field, as kube-apiserver's decoder does. Kinds without a type pass.
pub fn check_types(
    group: &str,
    version: &str,
    kind_name: &str,
    object: &Value,
) -> Result<(), String> {
    match kind(group, version, kind_name) {
        Some(k) => (k.decode)(object),
        None => Ok(()),
    }
}

/// `{group, version, kind}`, as the `x-kubernetes-group-version-kind` extension spells it.
fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{SCHEMA_REF_PREFIX}{name}") })
}

/// A `$ref` with a description beside it, in OpenAPI 3.0's form (a `$ref` takes no siblings).
fn described_ref(name: &str, description: &str) -> Value {
    json!({"allOf": [schema_ref(name)], "description": description})
}

/// The schema of `T`'s list type; k8s-openapi's generic `List<T>` has none.
fn list_schema<T: JsonSchema + ListableResource>(generator: &mut SchemaGenerator) -> Value {
    generator.subschema_for::<meta::ListMeta>();
    let schema = T::schema_name();
    let kind = T::KIND;
    json!({
        "description": format!("{} is a list of {kind} objects.", T::LIST_KIND),
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.",
                "type": "string",
            },
            "items": {
                "description": format!("The {kind} objects in the list."),
                "type": "array",
                "items": schema_ref(&schema),
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents. In CamelCase.",
                "type": "string",
            },
            "metadata": described_ref(
                &meta::ListMeta::schema_name(),
                "Standard list metadata: the list's resourceVersion and continue token.",
            ),
        },
        "required": ["items"],
    })
}

/// Every schema reachable from one group-version's paths, with kube-apiserver's extensions.
pub fn schemas_for(registry: &Registry, group: &str, version: &str) -> Map<String, Value> {
    let settings = SchemaSettings::openapi3().with(|s| s.meta_schema = None);
    let mut generator = SchemaGenerator::new(settings);
    let mut lists = Vec::new();
    let mut scale = false;
    let mut customs = Vec::new();
    for rt in registry.in_group_version(group, version) {
        scale |= rt.has(Subresource::Scale);
        if let Some(custom) = &rt.custom {
            let names = custom_names(rt);
            customs.push((names.kind.clone(), custom_schema(rt, custom)));
            customs.push((names.list.clone(), custom_list_schema(rt, &names, custom.list_kind)));
            continue;
        }
        let Some(k) = kind(rt.group, rt.version, rt.kind) else { continue };
        lists.push(((k.names)().list, (k.add)(&mut generator)));
    }
    if !customs.is_empty() {
        generator.subschema_for::<meta::ObjectMeta>();
        generator.subschema_for::<meta::ListMeta>();
    }
    // What every group-version's operations use besides its kinds.
    generator.subschema_for::<meta::APIResourceList>();
    generator.subschema_for::<meta::DeleteOptions>();
    generator.subschema_for::<meta::Patch>();
    generator.subschema_for::<meta::Status>();
    // A watch event's schema does not depend on the object type it carries.
    generator.subschema_for::<meta::WatchEvent<core::Pod>>();
    if scale {
        generator.subschema_for::<autoscaling::Scale>();
    }
    let mut schemas = generator.take_definitions(true);
    schemas.extend(lists);

    // A kind is marked in every document it appears in, as kube-apiserver marks it (apps/v1's
    // document holds core/v1's PersistentVolumeClaim, through StatefulSet's claim templates).
    for (name, gvks) in group_version_kinds(registry) {
        let Some(Value::Object(schema)) = schemas.get_mut(&name) else { continue };
        // kube-apiserver requires no top-level field of a kind; k8s-openapi marks `metadata`
        // required only because its Rust field is not optional.
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|r| r != "metadata");
            if required.is_empty() {
                schema.remove("required");
            }
        }
        schema.insert("x-kubernetes-group-version-kind".into(), gvks);
    }
    annotations::apply(&mut schemas);
    // Custom schemas are published as their definitions give them.
    schemas.extend(customs);
    schemas
}

/// The `x-kubernetes-group-version-kind` of every schema that is a served kind, keyed by schema
/// name: the kinds and their lists, `Scale`, `Status`, and the options and events that every
/// served group-version registers, as kube-apiserver's do.
fn group_version_kinds(registry: &Registry) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for rt in registry.all() {
        if let Some(names) = kind_names(rt.group, rt.version, rt.kind) {
            let list_kind = format!("{}List", rt.kind);
            all.insert(names.kind, json!([gvk(rt.group, rt.version, rt.kind)]));
            all.insert(names.list, json!([gvk(rt.group, rt.version, &list_kind)]));
        }
    }
    let every_version = |kind: &str| -> Value {
        let mut gvks = vec![gvk("", "v1", kind)];
        for (g, versions) in registry.groups() {
            gvks.extend(versions.iter().filter(|_| !g.is_empty()).map(|v| gvk(g, v, kind)));
        }
        Value::Array(gvks)
    };
    all.insert(meta::DeleteOptions::schema_name().into(), every_version("DeleteOptions"));
    all.insert(meta::WatchEvent::<core::Pod>::schema_name().into(), every_version("WatchEvent"));
    all.insert(meta::Status::schema_name().into(), json!([gvk("", "v1", "Status")]));
    all.insert(
        autoscaling::Scale::schema_name().into(),
        json!([gvk("autoscaling", "v1", "Scale")]),
    );
    all
}

// ---------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------

/// `CoreV1`, `AppsV1`, `RbacAuthorizationV1`: how operation ids name a group-version.
fn operation_prefix(group: &str, version: &str) -> String {
    let group = if group.is_empty() { "core" } else { group.trim_end_matches(".k8s.io") };
    group.split('.').chain([version]).map(upper_first).collect()
}

/// `core_v1`, `apps_v1`, `rbacAuthorization_v1`: the tag of a group-version's operations.
fn tag(group: &str, version: &str) -> String {
    let group = if group.is_empty() { "core" } else { group.trim_end_matches(".k8s.io") };
    let mut parts = group.split('.');
    let first = parts.next().unwrap_or_default().to_owned();
    let camel: String = std::iter::once(first).chain(parts.map(upper_first)).collect();
    format!("{camel}_{version}")
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": {"type": "string"},
    })
}

fn query_param(name: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": ty}})
}

fn name_param(kind: &str) -> Value {
    path_param("name", &format!("name of the {kind}"))
}

fn namespace_param() -> Value {
    path_param("namespace", "object name and auth scope, such as for teams and projects")
}

fn pretty() -> Value {
    query_param("pretty", "string", "If 'true', then the output is pretty printed.")
}

fn dry_run() -> Value {
    query_param(
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. The only valid value is All.",
    )
}

fn field_manager() -> Value {
    query_param("fieldManager", "string", "The name of the actor or entity making these changes.")
}

/// The query parameters of a write (create, replace, patch).
fn write_params() -> Vec<Value> {
    let mut params = vec![dry_run(), field_manager()];
    if SERVER_FIELD_VALIDATION {
        params.push(query_param(
            "fieldValidation",
            "string",
            "How the server treats unknown and duplicate fields: Ignore, Warn or Strict.",
        ));
    }
    params
}

fn list_params() -> Vec<Value> {
    vec![
        query_param(
            "allowWatchBookmarks",
            "boolean",
            "Ask for BOOKMARK events in a watch; servers may ignore it.",
        ),
        query_param("continue", "string", "The continue token of a previous, paged list."),
        query_param("fieldSelector", "string", "Restrict the list to objects whose fields match."),
        query_param("labelSelector", "string", "Restrict the list to objects whose labels match."),
        query_param("limit", "integer", "The most objects to return in one page."),
        query_param("resourceVersion", "string", "The resource version to list or watch from."),
        query_param(
            "resourceVersionMatch",
            "string",
            "How resourceVersion applies to a list: NotOlderThan or Exact.",
        ),
        query_param(
            "sendInitialEvents",
            "boolean",
            "Start a watch with the current objects as ADDED events, then a BOOKMARK.",
        ),
        query_param("timeoutSeconds", "integer", "End the call after this many seconds."),
        query_param(
            "watch",
            "boolean",
            "Watch for changes to the described resources instead of listing them.",
        ),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        dry_run(),
        query_param(
            "gracePeriodSeconds",
            "integer",
            "The seconds before the object should be deleted; zero deletes immediately.",
        ),
        query_param(
            "propagationPolicy",
            "string",
            "Whether and how garbage collection is performed: Orphan, Background or Foreground.",
        ),
    ]
}

fn content(media_types: &[&str], schema: &str) -> Value {
    let schema = schema_ref(schema);
    Value::Object(
        media_types.iter().map(|m| (m.to_string(), json!({ "schema": schema.clone() }))).collect(),
    )
}

/// Responses: each code with `schema` as JSON, then 401.
fn responses(codes: &[&str], media_types: &[&str], schema: &str) -> Value {
    let mut responses = Map::new();
    for code in codes {
        let description = match *code {
            "200" => "OK",
            "201" => "Created",
            "202" => "Accepted",
            _ => "",
        };
        responses.insert(
            code.to_string(),
            json!({"description": description, "content": content(media_types, schema)}),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(responses)
}

/// One operation and its kube-apiserver extensions.
struct Operation<'a> {
    id: String,
    description: String,
    action: &'a str,
    gvk: &'a Value,
    tag: &'a str,
    params: Vec<Value>,
    body: Option<Value>,
    responses: Value,
}

impl Operation<'_> {
    fn into_value(self) -> Value {
        let mut op = json!({
            "tags": [self.tag],
            "description": self.description,
            "operationId": self.id,
            "responses": self.responses,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        });
        if !self.params.is_empty() {
            op["parameters"] = Value::Array(self.params);
        }
        if let Some(body) = self.body {
            op["requestBody"] = body;
        }
        op
    }
}

fn request_body(media_types: &[&str], schema: &str, required: bool) -> Value {
    json!({"content": content(media_types, schema), "required": required})
}

/// `/api/v1/` or `/apis/<group>/<version>/`: the group-version's resource list.
fn resources_path(group: &str, version: &str) -> Value {
    let gv_tag = tag(group, version);
    json!({
        "get": {
            "tags": [gv_tag],
            "description": "get available resources",
            "operationId": format!("get{}APIResources", operation_prefix(group, version)),
            "responses": responses(&["200"], &[JSON], &meta::APIResourceList::schema_name()),
        }
    })
}

/// The collection, item, subresource and watch paths of one resource type.
fn resource_paths(rt: &ResourceType, names: &KindNames, paths: &mut Map<String, Value>) {
    let prefix = if rt.group.is_empty() {
        format!("/api/{}", rt.version)
    } else {
        format!("/apis/{}/{}", rt.group, rt.version)
    };
    let gv = operation_prefix(rt.group, rt.version);
    let tag = tag(rt.group, rt.version);
    let gvk = gvk(rt.group, rt.version, rt.kind);
    let kind = rt.kind;
    let (scope, scoped) = if rt.namespaced {
        (format!("/namespaces/{{namespace}}/{}", rt.plural), format!("Namespaced{kind}"))
    } else {
        (format!("/{}", rt.plural), kind.to_owned())
    };
    let scope_params = |name: bool| -> Vec<Value> {
        let mut params = Vec::new();
        if name {
            params.push(name_param(kind));
        }
        if rt.namespaced {
            params.push(namespace_param());
        }
        params.push(pretty());
        params
    };
    let delete_options = meta::DeleteOptions::schema_name();
    let status = meta::Status::schema_name();
    let watch_event = meta::WatchEvent::<core::Pod>::schema_name();
    let op = |id: String, description: String, action: &'static str| Operation {
        id,
        description,
        action,
        gvk: &gvk,
        tag: &tag,
        params: Vec::new(),
        body: None,
        responses: Value::Null,
    };

    // The collection: list, create, delete a collection.
    let list = Operation {
        params: list_params(),
        responses: responses(&["200"], &[JSON, WATCH], &names.list),
        ..op(format!("list{gv}{scoped}"), format!("list or watch objects of kind {kind}"), "list")
    };
    let create = Operation {
        params: write_params(),
        body: Some(request_body(&[JSON], &names.kind, true)),
        responses: responses(&["200", "201", "202"], &[JSON], &names.kind),
        ..op(format!("create{gv}{scoped}"), format!("create a {kind}"), "post")
    };
    let mut delete_collection_params = list_params();
    delete_collection_params.retain(|p| p["name"] != "watch" && p["name"] != "allowWatchBookmarks");
    delete_collection_params.extend(delete_params());
    let delete_collection = Operation {
        params: delete_collection_params,
        body: Some(request_body(&[JSON], &delete_options, false)),
        responses: responses(&["200"], &[JSON], &status),
        ..op(
            format!("delete{gv}Collection{scoped}"),
            format!("delete collection of {kind}"),
            "deletecollection",
        )
    };
    paths.insert(
        format!("{prefix}{scope}"),
        json!({
            "get": list.into_value(),
            "post": create.into_value(),
            "delete": delete_collection.into_value(),
            "parameters": scope_params(false),
        }),
    );

    // The item: read, replace, patch, delete.
    let read = Operation {
        responses: responses(&["200"], &[JSON], &names.kind),
        ..op(format!("read{gv}{scoped}"), format!("read the specified {kind}"), "get")
    };
    let replace = Operation {
        params: write_params(),
        body: Some(request_body(&[JSON], &names.kind, true)),
        responses: responses(&["200", "201"], &[JSON], &names.kind),
        ..op(format!("replace{gv}{scoped}"), format!("replace the specified {kind}"), "put")
    };
    let patch = patch_operation(
        op(format!("patch{gv}{scoped}"), format!("partially update the specified {kind}"), "patch"),
        patch_types(rt),
        &names.kind,
    );
    let delete = Operation {
        params: delete_params(),
        body: Some(request_body(&[JSON], &delete_options, false)),
        responses: responses(&["200", "202"], &[JSON], &names.kind),
        ..op(format!("delete{gv}{scoped}"), format!("delete a {kind}"), "delete")
    };
    paths.insert(
        format!("{prefix}{scope}/{{name}}"),
        json!({
            "get": read.into_value(),
            "put": replace.into_value(),
            "patch": patch.into_value(),
            "delete": delete.into_value(),
            "parameters": scope_params(true),
        }),
    );

    // Subresources.
    for sub in rt.subresources {
        let (schema, sub_gvk, word) = match sub {
            Subresource::Status => (names.kind.clone(), gvk.clone(), "Status"),
            Subresource::Scale => (
                autoscaling::Scale::schema_name().into_owned(),
                self::gvk("autoscaling", "v1", "Scale"),
                "Scale",
            ),
        };
        let sub_name = sub.name();
        let sub_op = |id: String, description: String, action: &'static str| Operation {
            gvk: &sub_gvk,
            ..op(id, description, action)
        };
        let read = Operation {
            responses: responses(&["200"], &[JSON], &schema),
            ..sub_op(
                format!("read{gv}{scoped}{word}"),
                format!("read {sub_name} of the specified {kind}"),
                "get",
            )
        };
        let replace = Operation {
            params: write_params(),
            body: Some(request_body(&[JSON], &schema, true)),
            responses: responses(&["200", "201"], &[JSON], &schema),
            ..sub_op(
                format!("replace{gv}{scoped}{word}"),
                format!("replace {sub_name} of the specified {kind}"),
                "put",
            )
        };
        let patch = patch_operation(
            sub_op(
                format!("patch{gv}{scoped}{word}"),
                format!("partially update {sub_name} of the specified {kind}"),
                "patch",
            ),
            if sub_name == "scale" { PATCH_TYPES } else { patch_types(rt) },
            &schema,
        );
        paths.insert(
            format!("{prefix}{scope}/{{name}}/{sub_name}"),
            json!({
                "get": read.into_value(),
                "put": replace.into_value(),
                "patch": patch.into_value(),
                "parameters": scope_params(true),
            }),
        );
    }
    if rt.group.is_empty() && rt.plural == "namespaces" {
        let finalize = Operation {
            params: write_params(),
            body: Some(request_body(&[JSON], &names.kind, true)),
            responses: responses(&["200", "201"], &[JSON], &names.kind),
            ..op(
                format!("replace{gv}NamespaceFinalize"),
                "replace finalize of the specified Namespace".into(),
                "put",
            )
        };
        paths.insert(
            format!("{prefix}/namespaces/{{name}}/finalize"),
            json!({"put": finalize.into_value(), "parameters": scope_params(true)}),
        );
    }

    // Across namespaces, for a namespaced type.
    if rt.namespaced {
        let list_all = Operation {
            params: list_params(),
            responses: responses(&["200"], &[JSON, WATCH], &names.list),
            ..op(
                format!("list{gv}{kind}ForAllNamespaces"),
                format!("list or watch objects of kind {kind}"),
                "list",
            )
        };
        paths.insert(
            format!("{prefix}/{}", rt.plural),
            json!({"get": list_all.into_value(), "parameters": [pretty()]}),
        );
    }

    // The legacy watch paths.
    let watch_list = Operation {
        params: list_params(),
        responses: responses(&["200"], &[JSON, WATCH], &watch_event),
        ..op(
            format!("watch{gv}{scoped}List"),
            format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
            "watchlist",
        )
    };
    paths.insert(
        format!("{prefix}/watch{scope}"),
        json!({"get": watch_list.into_value(), "parameters": scope_params(false)}),
    );
    let watch_one = Operation {
        params: list_params(),
        responses: responses(&["200"], &[JSON, WATCH], &watch_event),
        ..op(
            format!("watch{gv}{scoped}"),
            format!("watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."),
            "watch",
        )
    };
    paths.insert(
        format!("{prefix}/watch{scope}/{{name}}"),
        json!({"get": watch_one.into_value(), "parameters": scope_params(true)}),
    );
    if rt.namespaced {
        let watch_all = Operation {
            params: list_params(),
            responses: responses(&["200"], &[JSON, WATCH], &watch_event),
            ..op(
                format!("watch{gv}{kind}ListForAllNamespaces"),
                format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
                "watchlist",
            )
        };
        paths.insert(
            format!("{prefix}/watch/{}", rt.plural),
            json!({"get": watch_all.into_value(), "parameters": [pretty()]}),
        );
    }
}

/// The patch types `rt` takes. Custom resources have no patch strategies: kube-apiserver takes
/// no strategic merge patch for them, and says so here (kubectl's apply reads it).
fn patch_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.is_custom() {
        &PATCH_TYPES[..3]
    } else {
        PATCH_TYPES
    }
}

fn patch_operation<'a>(op: Operation<'a>, types: &[&str], schema: &str) -> Operation<'a> {
    let mut params = write_params();
    params.push(query_param(
        "force",
        "boolean",
        "Force an apply patch to take fields that other managers own.",
    ));
    Operation {
        params,
        body: Some(request_body(types, &meta::Patch::schema_name(), true)),
        responses: responses(&["200", "201"], &[JSON], schema),
        ..op
    }
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
