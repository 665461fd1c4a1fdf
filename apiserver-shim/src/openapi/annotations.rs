//! The list, map and patch annotations of Kubernetes' fields, which k8s-openapi's schemas do not
//! carry and kube-apiserver's OpenAPI documents do.
//!
//! One table, keyed by (schema name, property), holds every annotation: [`apply`] writes it into
//! the served schemas and [`list_annotations`] answers Rust code (a strategic merge patch needs
//! the merge keys and strategies; server-side apply needs the list types and keys).
//!
//! The table is generated (`annotation_table.rs`, `cargo run -p xtask -- gen-annotations`) from
//! the Go comment tags of the Kubernetes types that k8s-pb keeps (`+listType`, `+listMapKey`,
//! `+patchStrategy`, `+patchMergeKey`, `+mapType`, `+structType`); this module adds a small
//! hand-written supplement and leaves out the generated entries the server does not publish. An
//! entry whose property is [`SELF`] annotates the schema itself (a `+structType=atomic` struct).
//!
//! Architecture invariant, checked by a test: every entry names a field of a served schema, and
//! every list field of a served schema (other than a list kind's `items`) has an entry with its
//! list type. A kind added to the registry whose schemas bring new lists fails that test until
//! the table says how they merge.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use super::annotation_table::GENERATED;

/// How a list merges (`x-kubernetes-list-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The list is replaced whole.
    Atomic,
    /// The list's scalar items are unique; each is owned on its own.
    Set,
    /// Items are identified by the map keys; each is merged on its own.
    Map,
}

/// How a strategic merge patch treats a field (`x-kubernetes-patch-strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchStrategy {
    /// Lists merge by the merge key (or by value for scalars) instead of being replaced.
    Merge,
    /// Keys absent from the patch are cleared (a union of mutually exclusive fields).
    RetainKeys,
    /// Both of the above.
    MergeRetainKeys,
}

/// How a map or struct merges (`x-kubernetes-map-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// Replaced whole.
    Atomic,
    /// Each key is merged on its own (the default).
    Granular,
}

/// The annotations of one field: the fields left `None` (or empty) are absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListAnnotations {
    /// `x-kubernetes-list-type`.
    pub list_type: Option<ListType>,
    /// `x-kubernetes-list-map-keys`, for a [`ListType::Map`] list.
    pub list_map_keys: &'static [&'static str],
    /// `x-kubernetes-patch-merge-key`.
    pub patch_merge_key: Option<&'static str>,
    /// `x-kubernetes-patch-strategy`.
    pub patch_strategy: Option<PatchStrategy>,
    /// `x-kubernetes-map-type`.
    pub map_type: Option<MapType>,
}

impl ListAnnotations {
    const NONE: ListAnnotations = ListAnnotations {
        list_type: None,
        list_map_keys: &[],
        patch_merge_key: None,
        patch_strategy: None,
        map_type: None,
    };

    /// Patch strategy `merge` with this merge key.
    const fn merge(self, key: &'static str) -> ListAnnotations {
        ListAnnotations {
            patch_strategy: Some(PatchStrategy::Merge),
            patch_merge_key: Some(key),
            ..self
        }
    }

    /// The extensions as they appear in a schema.
    pub fn extensions(&self) -> Map<String, Value> {
        let mut out = Map::new();
        if let Some(list_type) = self.list_type {
            let name = match list_type {
                ListType::Atomic => "atomic",
                ListType::Set => "set",
                ListType::Map => "map",
            };
            out.insert("x-kubernetes-list-type".into(), json!(name));
        }
        if !self.list_map_keys.is_empty() {
            out.insert("x-kubernetes-list-map-keys".into(), json!(self.list_map_keys));
        }
        if let Some(key) = self.patch_merge_key {
            out.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
        if let Some(strategy) = self.patch_strategy {
            let name = match strategy {
                PatchStrategy::Merge => "merge",
                PatchStrategy::RetainKeys => "retainKeys",
                PatchStrategy::MergeRetainKeys => "merge,retainKeys",
            };
            out.insert("x-kubernetes-patch-strategy".into(), json!(name));
        }
        if let Some(map_type) = self.map_type {
            let name = match map_type {
                MapType::Atomic => "atomic",
                MapType::Granular => "granular",
            };
            out.insert("x-kubernetes-map-type".into(), json!(name));
        }
        out
    }
}

/// `+listType=atomic`.
const ATOMIC: ListAnnotations =
    ListAnnotations { list_type: Some(ListType::Atomic), ..ListAnnotations::NONE };

/// `+listType=map` with these `+listMapKey`s.
const fn map(keys: &'static [&'static str]) -> ListAnnotations {
    ListAnnotations { list_type: Some(ListType::Map), list_map_keys: keys, ..ListAnnotations::NONE }
}

/// The property naming the schema itself.
pub const SELF: &str = "";

/// What the generated table lacks: Carrel's own `Tenant`, which Kubernetes' types do not hold,
/// `APIResource.verbs` (a proto wrapper message whose field carries no tag) and the merge key of
/// `CustomResourceDefinitionStatus.conditions` (a `patchStrategy` struct tag, not a comment tag,
/// in Go). An entry here replaces the generated one for the same field.
#[rustfmt::skip]
static SUPPLEMENT: &[(&str, &str, ListAnnotations)] = &[
    ("dev.carrel.v1alpha1.TenantSpec", "allowedTolerations", ATOMIC),
    ("dev.carrel.v1alpha1.TenantStatus", "conditions", map(&["type"]).merge("type")),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.APIResource", "verbs", ATOMIC),
    ("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionStatus", "conditions", map(&["type"]).merge("type")),
];

/// Generated entries the server does not publish: Kubernetes sets them (mostly on kinds that are
/// only posted, and `+structType=atomic` on a few references), but the table this one replaced
/// did not have them, and adding them changes how server-side apply merges those fields. Taking
/// them in is a change of behaviour of its own.
#[rustfmt::skip]
static NOT_PUBLISHED: &[(&str, &str)] = &[
    ("io.k8s.api.authentication.v1.TokenRequestSpec", "audiences"),
    ("io.k8s.api.authentication.v1.TokenReviewSpec", "audiences"),
    ("io.k8s.api.authentication.v1.TokenReviewStatus", "audiences"),
    ("io.k8s.api.authentication.v1.UserInfo", "groups"),
    ("io.k8s.api.authorization.v1.FieldSelectorAttributes", "requirements"),
    ("io.k8s.api.authorization.v1.LabelSelectorAttributes", "requirements"),
    ("io.k8s.api.authorization.v1.NonResourceRule", "nonResourceURLs"),
    ("io.k8s.api.authorization.v1.NonResourceRule", "verbs"),
    ("io.k8s.api.authorization.v1.ResourceRule", "apiGroups"),
    ("io.k8s.api.authorization.v1.ResourceRule", "resourceNames"),
    ("io.k8s.api.authorization.v1.ResourceRule", "resources"),
    ("io.k8s.api.authorization.v1.ResourceRule", "verbs"),
    ("io.k8s.api.authorization.v1.SubjectAccessReviewSpec", "groups"),
    ("io.k8s.api.authorization.v1.SubjectRulesReviewStatus", "nonResourceRules"),
    ("io.k8s.api.authorization.v1.SubjectRulesReviewStatus", "resourceRules"),
    ("io.k8s.api.core.v1.ComponentStatus", "conditions"),
    ("io.k8s.api.core.v1.EndpointAddress", ""),
    ("io.k8s.api.core.v1.EndpointPort", ""),
    ("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "allocatedResourceStatuses"),
    ("io.k8s.api.core.v1.PersistentVolumeSpec", "claimRef"),
    ("io.k8s.api.core.v1.ScopeSelector", ""),
    ("io.k8s.api.networking.v1.ServiceBackendPort", ""),
    ("io.k8s.api.networking.v1.ServiceCIDRSpec", "cidrs"),
    ("io.k8s.api.networking.v1.ServiceCIDRStatus", "conditions"),
    ("io.k8s.api.rbac.v1.Subject", ""),
    ("io.k8s.api.storage.v1.CSIDriverSpec", "tokenRequests"),
    ("io.k8s.api.storage.v1.CSIDriverSpec", "volumeLifecycleModes"),
    ("io.k8s.api.storage.v1.CSINodeDriver", "topologyKeys"),
    ("io.k8s.api.storage.v1.CSINodeSpec", "drivers"),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.FieldSelectorRequirement", "values"),
    ("io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference", ""),
];

/// Every entry: the generated table less [`NOT_PUBLISHED`] and the fields [`SUPPLEMENT`] sets,
/// then the supplement.
fn table() -> impl Iterator<Item = (&'static str, &'static str, &'static ListAnnotations)> {
    let kept = |(schema, property, _): &&(&str, &str, ListAnnotations)| {
        !NOT_PUBLISHED.contains(&(*schema, *property))
            && !SUPPLEMENT.iter().any(|(s, p, _)| s == schema && p == property)
    };
    GENERATED.iter().filter(kept).chain(SUPPLEMENT).map(|(s, p, a)| (*s, *p, a))
}

/// The annotations of `schema`'s `property` (`io.k8s.api.core.v1.PodSpec`, `containers`), or of
/// the schema itself for the property [`SELF`]; `None` when Kubernetes sets none.
pub fn list_annotations(schema: &str, property: &str) -> Option<&'static ListAnnotations> {
    type Index = HashMap<String, HashMap<&'static str, &'static ListAnnotations>>;
    static INDEX: OnceLock<Index> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        let mut index = Index::new();
        for (schema, property, annotations) in table() {
            index.entry(schema.to_owned()).or_default().insert(property, annotations);
        }
        index
    });
    index.get(schema)?.get(property).copied()
}

/// Every entry of the table, with its full schema name.
pub fn all() -> impl Iterator<Item = (String, &'static str, &'static ListAnnotations)> {
    table().map(|(schema, property, a)| (schema.to_owned(), property, a))
}

/// Write the table's annotations into the schemas it names that are present.
pub fn apply(schemas: &mut Map<String, Value>) {
    for (schema, property, annotations) in all() {
        let Some(Value::Object(target)) = schemas.get_mut(&schema) else { continue };
        let target = if property == SELF {
            target
        } else {
            match target.get_mut("properties").and_then(|p| p.get_mut(property)) {
                Some(Value::Object(field)) => field,
                _ => continue,
            }
        };
        target.extend(annotations.extensions());
    }
}
