//! `gen-manifests`: the parts of `manifests/` that are derived from Rust code, so that they never
//! drift from what the code serves and does.
//!
//! - `manifests/base/generated/tenant-crd.yaml`: the `Tenant` CustomResourceDefinition, its
//!   schema generated from `carrel_apiserver::tenant::types::Tenant` (the type the embedded host
//!   serves the kind with), made structural (every `$ref` inlined, `metadata` left to the
//!   server, `null` dropped from optional fields), with the checks the embedded host makes that
//!   a schema can carry (name length and reserved names, TTL bounds, pod security levels,
//!   non-negative quotas) as kube-apiserver's CEL validations and OpenAPI keywords, and the
//!   host's table columns as printer columns.
//! - `manifests/base/generated/rbac.yaml`: the ClusterRoles of the API server's process (the
//!   tenant manager's rules with its syncers') and of the node agent, from the rule lists the
//!   components' own code keeps (`carrel_tenants::service_account::rules`,
//!   `carrel_syncer::rbac::process_rules`, `carrel_node_agent::rbac::rules`), which `carrel up` grants
//!   its in-process clients too.

use std::path::Path;

use anyhow::{bail, Context, Result};
use carrel_apiserver::tenant::types::{
    Tenant, GROUP, MAX_NAME_LEN, MAX_TTL, MIN_TTL, RESERVED_NAMES, VERSION,
};
use k8s_openapi::Resource as _;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{json, Map, Value};

use crate::output::Mode;

/// The command, as the generated files' first line names it.
const COMMAND: &str = "gen-manifests";

/// Where the CRD is written, from the workspace root.
pub const CRD_FILE: &str = "manifests/base/generated/tenant-crd.yaml";
/// Where the ClusterRoles are written, from the workspace root.
pub const RBAC_FILE: &str = "manifests/base/generated/rbac.yaml";

/// The ClusterRole of `carrel serve` (tenant manager and syncers).
pub const APISERVER_ROLE: &str = "carrel:apiserver";
/// The ClusterRole of the node agent.
pub const NODE_AGENT_ROLE: &str = "carrel:node-agent";

/// Write (or check) both files.
pub fn generate(mode: Mode) -> Result<()> {
    let root = crate::workspace_root();
    emit_yaml(&root, CRD_FILE, &[tenant_crd()?], mode)?;
    emit_yaml(&root, RBAC_FILE, &cluster_roles(), mode)
}

/// The `Tenant` CustomResourceDefinition.
pub fn tenant_crd() -> Result<Value> {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.meta_schema = None;
        s.inline_subschemas = true;
    });
    let generator = SchemaGenerator::new(settings);
    let schema = serde_json::to_value(generator.into_root_schema_for::<Tenant>())?;
    let mut schema = structural(schema)?;
    let root = schema.as_object_mut().context("the Tenant schema is an object")?;
    root.remove("title");
    root.insert("metadata".into(), json!({"type": "object"}));
    let properties = root.get_mut("properties").and_then(Value::as_object_mut);
    let properties = properties.context("the Tenant schema has properties")?;
    properties.insert("metadata".into(), json!({"type": "object"}));
    tighten(properties)?;
    root.remove("metadata");
    root.insert("x-kubernetes-validations".into(), json!(name_rules()));
    Ok(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("tenants.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": Tenant::KIND,
                "listKind": "TenantList",
                "plural": Tenant::URL_PATH_SEGMENT,
                "singular": "tenant",
                "shortNames": ["tn"],
            },
            "scope": "Cluster",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
                     "description": "Ready, Terminating or Failed; none while a new tenant is set up."},
                    {"name": "Expires", "type": "string", "jsonPath": ".status.expiresAt",
                     "description": "When the tenant's TTL deletes it."},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint",
                     "priority": 1, "description": "The URL of the tenant's API server."},
                ],
            }],
        },
    }))
}

/// The checks on a tenant's name that the host makes: room for the `carrel-` prefix of its host
/// namespace, and no reserved name.
fn name_rules() -> Vec<Value> {
    let reserved: Vec<String> = RESERVED_NAMES.iter().map(|n| format!("'{n}'")).collect();
    vec![
        json!({
            "rule": format!("size(self.metadata.name) <= {MAX_NAME_LEN}"),
            "message": format!(
                "metadata.name may not be more than {MAX_NAME_LEN} bytes (the host namespace is \
                 carrel-<name>)"
            ),
        }),
        json!({
            "rule": format!(
                "!(self.metadata.name in [{}]) && !self.metadata.name.startsWith('kube-')",
                reserved.join(", ")
            ),
            "message": "metadata.name is reserved for the host and Carrel",
        }),
    ]
}

/// What the host checks in a spec, as schema keywords and CEL rules.
fn tighten(properties: &mut Map<String, Value>) -> Result<()> {
    let spec = properties
        .get_mut("spec")
        .and_then(|s| s.get_mut("properties"))
        .and_then(Value::as_object_mut)
        .context("the Tenant schema has spec.properties")?;
    let ttl = spec.get_mut("ttl").context("spec.ttl")?;
    ttl["x-kubernetes-validations"] = json!([{
        "rule": format!(
            "self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$') && \
             duration(self) >= duration('{}s') && duration(self) <= duration('{}h')",
            MIN_TTL.as_secs(),
            MAX_TTL.as_secs() / 3600
        ),
        "message": "must be a Go duration between 1s and 8760h (365 days)",
    }]);
    let pod_security = spec.get_mut("podSecurity").context("spec.podSecurity")?;
    pod_security["enum"] = json!(["baseline", "restricted"]);
    pod_security["default"] = json!("baseline");
    let quota = spec.get_mut("gpuQuota").context("spec.gpuQuota")?;
    quota["additionalProperties"]["minimum"] = json!(0);
    let limits = spec
        .get_mut("limits")
        .and_then(|l| l.get_mut("properties"))
        .context("spec.limits.properties")?;
    limits["objects"]["minimum"] = json!(0);
    let allowed = spec.get_mut("allowedTolerations").context("spec.allowedTolerations")?;
    allowed["x-kubernetes-list-type"] = json!("atomic");
    let conditions = properties
        .get_mut("status")
        .and_then(|s| s.pointer_mut("/properties/conditions"))
        .context("status.conditions")?;
    conditions["x-kubernetes-list-type"] = json!("map");
    conditions["x-kubernetes-list-map-keys"] = json!(["type"]);
    Ok(())
}

/// `schema` as a structural schema: no `$ref`, no `null` types, no `nullable` or `format`s
/// kube-apiserver does not know, every node typed.
fn structural(schema: Value) -> Result<Value> {
    let Value::Object(mut node) = schema else { return Ok(schema) };
    if node.contains_key("$ref") {
        bail!("a $ref was left in the generated schema: {}", Value::Object(node));
    }
    node.remove("$schema");
    node.remove("title");
    node.remove("nullable");
    if let Some(Value::Array(types)) = node.get("type") {
        let types: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        match types.as_slice() {
            [one] => {
                node.insert("type".into(), one.clone());
            }
            _ => bail!("a node has several types: {types:?}"),
        }
    }
    // An optional field written as `anyOf: [T, null]`.
    if let Some(Value::Array(alternatives)) = node.remove("anyOf") {
        let mut rest: Vec<Value> =
            alternatives.into_iter().filter(|a| a.get("type") != Some(&json!("null"))).collect();
        match rest.len() {
            1 => {
                if let Value::Object(inner) = rest.remove(0) {
                    for (key, value) in inner {
                        node.entry(key).or_insert(value);
                    }
                }
            }
            _ => {
                node.insert("anyOf".into(), Value::Array(rest));
            }
        }
    }
    let mut out = Map::new();
    for (key, value) in node {
        let value = match key.as_str() {
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| Ok((k.clone(), structural(v.clone())?)))
                    .collect::<Result<_>>()?,
            ),
            "items" | "additionalProperties" if value.is_object() => structural(value)?,
            _ => value,
        };
        out.insert(key, value);
    }
    Ok(Value::Object(out))
}

/// The ClusterRoles the manifests bind to the components' service accounts.
pub fn cluster_roles() -> Vec<Value> {
    let mut apiserver = carrel_tenants::service_account::rules();
    apiserver.extend(carrel_tenants::replicas::rules());
    apiserver.extend(carrel_syncer::rbac::process_rules());
    vec![
        cluster_role(
            APISERVER_ROLE,
            "carrel serve: the tenant manager and every tenant's syncer, with the pod logs, \
             streams and metrics tenants read through the host, and the replicas' Leases",
            merge(apiserver),
        ),
        cluster_role(
            NODE_AGENT_ROLE,
            "carrel-node-agent: a GPU node's inventory, claims and enforcement",
            merge(carrel_node_agent::rbac::rules()),
        ),
    ]
}

fn cluster_role(name: &str, what: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "annotations": {"carrel.dev/description": what},
            "labels": {"app.kubernetes.io/part-of": "carrel"},
        },
        "rules": rules,
    })
}

/// `rules` with the verbs of rules on the same groups and resources joined, sorted, each verb
/// once: one rule per (groups, resources).
fn merge(rules: Vec<Value>) -> Vec<Value> {
    let mut merged: Vec<(Value, Value, Vec<String>)> = Vec::new();
    for rule in rules {
        let groups = sorted(&rule["apiGroups"]);
        let resources = sorted(&rule["resources"]);
        let verbs = rule["verbs"].as_array().into_iter().flatten().filter_map(Value::as_str);
        let verbs: Vec<String> = verbs.map(str::to_owned).collect();
        match merged.iter_mut().find(|(g, r, _)| *g == groups && *r == resources) {
            Some((_, _, known)) => known.extend(verbs),
            None => merged.push((groups, resources, verbs)),
        }
    }
    merged
        .into_iter()
        .map(|(groups, resources, mut verbs)| {
            verbs.sort();
            verbs.dedup();
            json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
        })
        .collect()
}

fn sorted(list: &Value) -> Value {
    let mut items: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    items.sort();
    items.dedup();
    json!(items)
}

/// Write `documents` as one YAML stream to `relative` under `root`, or check the file holds it.
fn emit_yaml(root: &Path, relative: &str, documents: &[Value], mode: Mode) -> Result<()> {
    let mut text = format!("# @generated by `cargo run -p xtask -- {COMMAND}`; do not edit.\n");
    for document in documents {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(document)?);
    }
    crate::output::emit_text(root, relative, &text, mode)
}
