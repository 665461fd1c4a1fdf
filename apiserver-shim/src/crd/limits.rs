//! What one cluster's (one tenant's) CustomResourceDefinitions may make the server hold.
//!
//! Each served version of a definition is compiled into a structural schema (a node per
//! JSONSchemaProps, a regular expression per distinct `pattern`, a program per CEL rule) and
//! kept while the definition exists. kube-apiserver bounds a definition only by its request and
//! etcd size limits; a server shared by tenants bounds what each tenant can make it hold:
//!
//! | limit | value | answer |
//! |---|---|---|
//! | one definition, as stored | [`MAX_DEFINITION_BYTES`] (1.5 MiB, etcd's default request limit) | 413 RequestEntityTooLarge |
//! | schema nodes of one definition (all versions) | [`MAX_SCHEMA_NODES`] | 422 Invalid |
//! | distinct `pattern`s of one definition | [`MAX_PATTERNS`] | 422 Invalid |
//! | definitions per cluster | [`MAX_DEFINITIONS`] | 403 Forbidden |
//! | all definitions of a cluster, as stored | [`MAX_TOTAL_BYTES`] | 403 Forbidden |
//! | schema nodes of all definitions of a cluster | [`MAX_TOTAL_SCHEMA_NODES`] | 403 Forbidden |
//! | distinct `pattern`s of all definitions of a cluster | [`MAX_TOTAL_PATTERNS`] | 403 Forbidden |
//! | names (group, kinds, plurals, …) a cluster adds to the process for good | [`MAX_INTERNED_BYTES`] | 403 Forbidden |
//!
//! Each compiled pattern is further bounded by the schema crate (1 MiB program, 256 KiB lazy
//! DFA cache per thread), identical patterns share one compiled expression, and CEL rules are
//! refused when their estimated cost exceeds kube-apiserver's static limits.

use serde_json::Value;

use carrel_schema::Footprint;

use super::GROUP;
use crate::status::{ApiError, ApiResult, Cause};

/// The largest definition stored (its JSON), as etcd's default `--max-request-bytes`.
pub const MAX_DEFINITION_BYTES: usize = 1536 * 1024;

/// The most schema nodes one definition's versions may have together.
pub const MAX_SCHEMA_NODES: usize = 20_000;

/// The most distinct `pattern`s one definition's versions may have together.
pub const MAX_PATTERNS: usize = 1_000;

/// The most definitions one cluster may have.
pub const MAX_DEFINITIONS: usize = 256;

/// The most bytes all definitions of one cluster may take, as stored.
pub const MAX_TOTAL_BYTES: usize = 16 * 1024 * 1024;

/// The most schema nodes all definitions of one cluster may have together.
pub const MAX_TOTAL_SCHEMA_NODES: usize = 100_000;

/// The most distinct `pattern`s all definitions of one cluster may have together (counted per
/// definition).
pub const MAX_TOTAL_PATTERNS: usize = 4_000;

/// The most bytes of distinct names (groups, versions, kinds, plurals, short names, …) one
/// cluster's definitions may add to the names the process interns for good
/// (`resource::intern`): a cluster creating and deleting definitions under new names in a loop
/// stops there, instead of growing the process without bound. Re-creating a definition under
/// names seen before costs nothing.
pub const MAX_INTERNED_BYTES: usize = 256 * 1024;

/// The footprint of a definition: its versions' schemas together.
pub fn footprint(definition: &Value) -> Footprint {
    let mut footprint = Footprint::default();
    let versions = definition.pointer("/spec/versions").and_then(Value::as_array);
    for version in versions.into_iter().flatten() {
        if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
            footprint.add(schema);
        }
    }
    footprint
}

/// The causes a definition's own schemas are refused for, before they are compiled: more nodes
/// or patterns than one definition may have.
pub(super) fn check_schemas(footprint: &Footprint) -> Vec<Cause> {
    let mut causes = Vec::new();
    if footprint.nodes > MAX_SCHEMA_NODES {
        causes.push(Cause::new(
            "FieldValueForbidden",
            "spec.versions",
            format!(
                "Forbidden: the schemas have {} nodes, more than the limit of {MAX_SCHEMA_NODES} \
                 per CustomResourceDefinition",
                footprint.nodes
            ),
        ));
    }
    if footprint.patterns.len() > MAX_PATTERNS {
        causes.push(Cause::new(
            "FieldValueForbidden",
            "spec.versions",
            format!(
                "Forbidden: the schemas have {} distinct patterns, more than the limit of \
                 {MAX_PATTERNS} per CustomResourceDefinition",
                footprint.patterns.len()
            ),
        ));
    }
    causes
}

/// Whether a cluster has room for `definition` beside `others` (its other definitions): 413 when
/// the definition alone is too large, 403 when the cluster's definitions together would pass a
/// limit.
pub fn check_room(definition: &Value, others: &[Value]) -> ApiResult<()> {
    let name = definition.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let size = |v: &Value| serde_json::to_vec(v).map_or(0, |b| b.len());
    let own = size(definition);
    if own > MAX_DEFINITION_BYTES {
        return Err(ApiError::too_large(format!(
            "Request entity too large: the CustomResourceDefinition is {own} bytes, more than \
             the limit of {MAX_DEFINITION_BYTES}"
        )));
    }
    let exceeded = |what: String| {
        Err(ApiError::forbidden(
            GROUP,
            "customresourcedefinitions",
            name,
            &format!("exceeded quota: {what}"),
        ))
    };
    if others.len() + 1 > MAX_DEFINITIONS {
        return exceeded(format!(
            "the cluster has {} CustomResourceDefinitions, the limit is {MAX_DEFINITIONS}",
            others.len()
        ));
    }
    let total: usize = own + others.iter().map(size).sum::<usize>();
    if total > MAX_TOTAL_BYTES {
        return exceeded(format!(
            "the CustomResourceDefinitions would take {total} bytes, the limit is \
             {MAX_TOTAL_BYTES}"
        ));
    }
    let mine = footprint(definition);
    let (mut nodes, mut patterns) = (mine.nodes, mine.patterns.len());
    for other in others {
        let theirs = footprint(other);
        nodes += theirs.nodes;
        patterns += theirs.patterns.len();
    }
    if nodes > MAX_TOTAL_SCHEMA_NODES {
        return exceeded(format!(
            "the CustomResourceDefinitions' schemas would have {nodes} nodes, the limit is \
             {MAX_TOTAL_SCHEMA_NODES}"
        ));
    }
    if patterns > MAX_TOTAL_PATTERNS {
        return exceeded(format!(
            "the CustomResourceDefinitions' schemas would have {patterns} patterns, the limit \
             is {MAX_TOTAL_PATTERNS}"
        ));
    }
    Ok(())
}
