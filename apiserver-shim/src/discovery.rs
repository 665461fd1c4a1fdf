//! The discovery documents kube-apiserver serves, built from a [`Registry`].
//!
//! Pure functions returning JSON values; the HTTP layer picks the document by path and, for
//! `/api` and `/apis`, by [`wants_aggregated`] on the request's `Accept` header.
//!
//! Ordering:
//! - resources (and subresources) are sorted by name in every list, as kube-apiserver does: it
//!   installs a group-version's paths in sorted order, so the legacy `APIResourceList` comes out
//!   sorted (`deployments`, `deployments/scale`, `deployments/status`, `replicasets`, …), and the
//!   aggregated document is converted from that list;
//! - groups keep the registry's first-seen order, and each group's versions the registry's order
//!   (the first is preferred). kube-apiserver orders groups by a priority table instead.
//!
//! `storageVersionHash` is not emitted (it is optional and only consumed by the storage version
//! migrator).

use serde_json::{json, Map, Value};

use crate::resource::{Registry, ResourceType, Subresource};

/// The exact Content-Type for aggregated discovery answers.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The verbs every served subresource supports.
const SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];

/// `GET /api`: the core group's versions.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    })
}

/// `GET /apis`: every non-core group with its versions.
pub fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, versions)| group_body(group, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`: one group with its versions, or `None` if the group is not served (the
/// core group is never served here).
pub fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    if group.is_empty() {
        return None;
    }
    let (group, versions) = registry.groups().into_iter().find(|(g, _)| *g == group)?;
    let mut body = group_body(group, &versions);
    let obj = body.as_object_mut().expect("group body is an object");
    let mut out = Map::new();
    out.insert("kind".into(), json!("APIGroup"));
    out.insert("apiVersion".into(), json!("v1"));
    out.append(obj);
    Some(Value::Object(out))
}

/// The `APIGroup` fields (no kind/apiVersion, as inside an `APIGroupList`).
fn group_body(group: &str, versions: &[&str]) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    let list: Vec<Value> = versions.iter().map(|v| gv(v)).collect();
    let preferred = versions.first().map(|v| gv(v)).unwrap_or(Value::Null);
    json!({"name": group, "versions": list, "preferredVersion": preferred})
}

/// The types of one group-version, sorted by plural name.
fn sorted_types<'a>(
    registry: &'a Registry,
    group: &'a str,
    version: &'a str,
) -> Vec<&'a ResourceType> {
    let mut types: Vec<&ResourceType> = registry.in_group_version(group, version).collect();
    types.sort_by(|a, b| a.plural.cmp(b.plural));
    types
}

/// One subresource as discovery lists it.
struct Sub {
    name: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
    /// Whether its kind is from another group-version than its resource's: only then does the
    /// legacy list name its group and version.
    foreign: bool,
}

/// A resource's subresources (views, then the strategy's actions), sorted by name.
fn sorted_subresources(t: &ResourceType) -> Vec<Sub> {
    let mut subs: Vec<Sub> = t
        .subresources
        .iter()
        .map(|&sub| {
            let (group, version, kind) = match sub {
                Subresource::Status | Subresource::EphemeralContainers => {
                    (t.group, t.version, t.kind)
                }
                Subresource::Scale => ("autoscaling", "v1", "Scale"),
            };
            Sub {
                name: sub.name(),
                group,
                version,
                kind,
                verbs: SUBRESOURCE_VERBS,
                foreign: sub == Subresource::Scale,
            }
        })
        .chain(t.strategy.actions().iter().map(|a| {
            let (group, version) = a.group_version.unwrap_or((t.group, t.version));
            Sub {
                name: a.name,
                group,
                version,
                kind: a.kind,
                verbs: a.verbs,
                foreign: a.group_version.is_some(),
            }
        }))
        .collect();
    subs.sort_by_key(|s| s.name);
    subs
}

/// Inserts `key: [..]` unless `values` is empty (`omitempty`).
fn insert_nonempty(obj: &mut Map<String, Value>, key: &str, values: &[&str]) {
    if !values.is_empty() {
        obj.insert(key.into(), json!(values));
    }
}

/// `GET /api/v1` and `GET /apis/<group>/<version>`: the resources of one group-version, or `None`
/// if it is not served.
pub fn api_resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = sorted_types(registry, group, version);
    let first = types.first()?;
    let mut resources = Vec::new();
    for t in &types {
        let mut r = Map::new();
        r.insert("name".into(), json!(t.plural));
        r.insert("singularName".into(), json!(t.singular));
        r.insert("namespaced".into(), json!(t.namespaced));
        r.insert("kind".into(), json!(t.kind));
        r.insert("verbs".into(), json!(t.verbs));
        insert_nonempty(&mut r, "shortNames", t.short_names);
        insert_nonempty(&mut r, "categories", t.categories);
        resources.push(Value::Object(r));
        for sub in sorted_subresources(t) {
            let mut s = Map::new();
            s.insert("name".into(), json!(format!("{}/{}", t.plural, sub.name)));
            s.insert("singularName".into(), json!(""));
            s.insert("namespaced".into(), json!(t.namespaced));
            if sub.foreign {
                // Only a kind from another group-version carries group and version.
                s.insert("group".into(), json!(sub.group));
                s.insert("version".into(), json!(sub.version));
            }
            s.insert("kind".into(), json!(sub.kind));
            s.insert("verbs".into(), json!(sub.verbs));
            resources.push(Value::Object(s));
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": first.group_version(),
        "resources": resources,
    }))
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`): for `/api` when
/// `core` (the core group only), for `/apis` otherwise (every other group).
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let items: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(group, _)| group.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    let resources: Vec<Value> = sorted_types(registry, group, version)
                        .into_iter()
                        .map(resource_discovery)
                        .collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": group}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// One `APIResourceDiscovery`.
fn resource_discovery(t: &ResourceType) -> Value {
    let mut r = Map::new();
    r.insert("resource".into(), json!(t.plural));
    r.insert(
        "responseKind".into(),
        json!({"group": t.group, "version": t.version, "kind": t.kind}),
    );
    r.insert("scope".into(), json!(if t.namespaced { "Namespaced" } else { "Cluster" }));
    r.insert("singularResource".into(), json!(t.singular));
    r.insert("verbs".into(), json!(t.verbs));
    insert_nonempty(&mut r, "shortNames", t.short_names);
    insert_nonempty(&mut r, "categories", t.categories);
    let subs: Vec<Value> = sorted_subresources(t)
        .into_iter()
        .map(|sub| {
            json!({
                "subresource": sub.name,
                "responseKind": {"group": sub.group, "version": sub.version, "kind": sub.kind},
                "verbs": sub.verbs,
            })
        })
        .collect();
    if !subs.is_empty() {
        r.insert("subresources".into(), Value::Array(subs));
    }
    Value::Object(r)
}

/// Whether an `Accept` header asks for aggregated discovery v2: some media range is
/// `application/json` with `g=apidiscovery.k8s.io`, `v=v2` and `as=APIGroupDiscoveryList`
/// (parameters in any order, optionally quoted, spaces allowed; a `q=0` range is refused).
/// A client that lists only `v2beta1` gets the unaggregated documents.
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case("application/json") {
            return false;
        }
        let (mut g, mut v, mut as_, mut refused) = (false, false, false, false);
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let key = key.trim();
            let value = value.trim().trim_matches('"');
            if key.eq_ignore_ascii_case("g") {
                g = value == "apidiscovery.k8s.io";
            } else if key.eq_ignore_ascii_case("v") {
                v = value == "v2";
            } else if key.eq_ignore_ascii_case("as") {
                as_ = value == "APIGroupDiscoveryList";
            } else if key.eq_ignore_ascii_case("q") {
                refused = value.parse::<f32>().is_ok_and(|q| q <= 0.0);
            }
        }
        g && v && as_ && !refused
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        Registry::default()
    }

    fn find<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
        list.as_array()
            .expect("array")
            .iter()
            .find(|r| r[key] == name)
            .unwrap_or_else(|| panic!("{name} not found"))
    }

    fn names(list: &Value, key: &str) -> Vec<String> {
        list.as_array()
            .expect("array")
            .iter()
            .map(|r| r[key].as_str().expect("string").to_owned())
            .collect()
    }

    #[test]
    fn api_versions_shape() {
        assert_eq!(
            api_versions("10.0.0.1:6443"),
            json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}
                ]
            })
        );
    }

    #[test]
    fn group_list_has_every_non_core_group() {
        let list = api_group_list(&registry());
        assert_eq!(list["kind"], "APIGroupList");
        assert_eq!(list["apiVersion"], "v1");
        let groups = names(&list["groups"], "name");
        assert!(!groups.contains(&String::new()));
        assert_eq!(groups[0], "apps");
        assert!(groups.contains(&"rbac.authorization.k8s.io".to_owned()));
        let apps = find(&list["groups"], "name", "apps");
        assert_eq!(
            *apps,
            json!({
                "name": "apps",
                "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}
            })
        );
        assert!(apps.get("kind").is_none());
    }

    #[test]
    fn api_group_shape_and_unknown() {
        assert_eq!(
            api_group(&registry(), "batch"),
            Some(json!({
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": "batch",
                "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"}
            }))
        );
        assert_eq!(api_group(&registry(), "nope.example.com"), None);
        assert_eq!(api_group(&registry(), ""), None);
    }

    #[test]
    fn core_resource_list() {
        let list = api_resource_list(&registry(), "", "v1").expect("core served");
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["groupVersion"], "v1");
        let resources = &list["resources"];
        assert_eq!(
            *find(resources, "name", "pods"),
            json!({
                "name": "pods",
                "singularName": "pod",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                "shortNames": ["po"],
                "categories": ["all"]
            })
        );
        assert_eq!(
            *find(resources, "name", "pods/status"),
            json!({
                "name": "pods/status",
                "singularName": "",
                "namespaced": true,
                "kind": "Pod",
                "verbs": ["get", "patch", "update"]
            })
        );
        let ns = find(resources, "name", "namespaces");
        assert_eq!(ns["namespaced"], false);
        assert_eq!(ns["shortNames"], json!(["ns"]));
        assert!(ns.get("categories").is_none());
        assert_eq!(find(resources, "name", "namespaces/status")["namespaced"], false);
        let secrets = find(resources, "name", "secrets");
        assert!(secrets.get("shortNames").is_none());
        assert!(secrets.get("categories").is_none());
        // Sorted by name, subresources right after their resource.
        let all = names(resources, "name");
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
        let pods = all.iter().position(|n| n == "pods").expect("pods");
        assert_eq!(
            all[pods + 1..pods + 9],
            [
                "pods/attach",
                "pods/binding",
                "pods/ephemeralcontainers",
                "pods/eviction",
                "pods/exec",
                "pods/log",
                "pods/portforward",
                "pods/status"
            ]
        );
        // What `kubectl drain` looks for before it evicts rather than deletes.
        assert_eq!(
            *find(resources, "name", "pods/eviction"),
            json!({
                "name": "pods/eviction",
                "singularName": "",
                "namespaced": true,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"]
            })
        );
        let binding = find(resources, "name", "pods/binding");
        assert_eq!((&binding["kind"], &binding["verbs"]), (&json!("Binding"), &json!(["create"])));
        assert!(binding.get("group").is_none());
        assert_eq!(find(resources, "name", "pods/log")["verbs"], json!(["get"]));
    }

    #[test]
    fn apps_resource_list_with_scale() {
        let list = api_resource_list(&registry(), "apps", "v1").expect("apps served");
        assert_eq!(list["groupVersion"], "apps/v1");
        let resources = &list["resources"];
        assert_eq!(
            names(resources, "name"),
            [
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ]
        );
        assert_eq!(
            *find(resources, "name", "deployments/scale"),
            json!({
                "name": "deployments/scale",
                "singularName": "",
                "namespaced": true,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"]
            })
        );
        let status = find(resources, "name", "deployments/status");
        assert_eq!(status["kind"], "Deployment");
        assert!(status.get("group").is_none());
        let deploy = find(resources, "name", "deployments");
        assert_eq!(deploy["shortNames"], json!(["deploy"]));
        assert_eq!(deploy["singularName"], "deployment");
    }

    #[test]
    fn unknown_group_version_is_none() {
        assert_eq!(api_resource_list(&registry(), "apps", "v2"), None);
        assert_eq!(api_resource_list(&registry(), "nope.example.com", "v1"), None);
        assert_eq!(api_resource_list(&registry(), "", "v2"), None);
    }

    #[test]
    fn aggregated_core() {
        let doc = aggregated(&registry(), true);
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(doc["metadata"], json!({}));
        let items = doc["items"].as_array().expect("items");
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"], json!({"name": ""}));
        let versions = items[0]["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 1);
        assert_eq!(versions[0]["version"], "v1");
        assert_eq!(versions[0]["freshness"], "Current");
        let resources = &versions[0]["resources"];
        assert_eq!(
            *find(resources, "resource", "pods"),
            json!({
                "resource": "pods",
                "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                "scope": "Namespaced",
                "singularResource": "pod",
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                "shortNames": ["po"],
                "categories": ["all"],
                "subresources": [
                    {
                        "subresource": "attach",
                        "responseKind": {"group": "", "version": "v1", "kind": "PodAttachOptions"},
                        "verbs": ["create", "get"]
                    },
                    {
                        "subresource": "binding",
                        "responseKind": {"group": "", "version": "v1", "kind": "Binding"},
                        "verbs": ["create"]
                    },
                    {
                        "subresource": "ephemeralcontainers",
                        "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "verbs": ["get", "patch", "update"]
                    },
                    {
                        "subresource": "eviction",
                        "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                        "verbs": ["create"]
                    },
                    {
                        "subresource": "exec",
                        "responseKind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
                        "verbs": ["create", "get"]
                    },
                    {
                        "subresource": "log",
                        "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "verbs": ["get"]
                    },
                    {
                        "subresource": "portforward",
                        "responseKind": {"group": "", "version": "v1", "kind": "PodPortForwardOptions"},
                        "verbs": ["create", "get"]
                    },
                    {
                        "subresource": "status",
                        "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "verbs": ["get", "patch", "update"]
                    }
                ]
            })
        );
        let ns = find(resources, "resource", "namespaces");
        assert_eq!(ns["scope"], "Cluster");
        assert!(ns.get("categories").is_none());
        let cm = find(resources, "resource", "configmaps");
        assert!(cm.get("subresources").is_none());
        assert!(find(resources, "resource", "secrets").get("shortNames").is_none());
        let all = names(resources, "resource");
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
        assert!(!all.iter().any(|n| n.contains('/')));
    }

    #[test]
    fn aggregated_groups() {
        let doc = aggregated(&registry(), false);
        let items = &doc["items"];
        let groups: Vec<String> = items
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["metadata"]["name"].as_str().expect("name").to_owned())
            .collect();
        assert_eq!(groups.len(), api_group_list(&registry())["groups"].as_array().unwrap().len());
        assert!(!groups.contains(&String::new()));
        let apps = items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "apps")
            .expect("apps");
        let resources = &apps["versions"][0]["resources"];
        assert_eq!(
            names(resources, "resource"),
            ["controllerrevisions", "daemonsets", "deployments", "replicasets", "statefulsets"]
        );
        assert_eq!(
            *find(resources, "resource", "deployments"),
            json!({
                "resource": "deployments",
                "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "scope": "Namespaced",
                "singularResource": "deployment",
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                "shortNames": ["deploy"],
                "categories": ["all"],
                "subresources": [
                    {
                        "subresource": "scale",
                        "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                        "verbs": ["get", "patch", "update"]
                    },
                    {
                        "subresource": "status",
                        "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                        "verbs": ["get", "patch", "update"]
                    }
                ]
            })
        );
        let rbac = items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "rbac.authorization.k8s.io")
            .expect("rbac");
        let cr = find(&rbac["versions"][0]["resources"], "resource", "clusterroles");
        assert_eq!(cr["scope"], "Cluster");
        assert!(cr.get("shortNames").is_none());
    }

    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                       application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,\
                       application/json";
        assert!(wants_aggregated(kubectl));
        assert!(wants_aggregated(AGGREGATED_CONTENT_TYPE));
        assert!(!wants_aggregated("application/json"));
        assert!(!wants_aggregated("*/*"));
        assert!(!wants_aggregated(""));
        assert!(wants_aggregated(
            "application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io"
        ));
        assert!(wants_aggregated(
            "application/json ; v=v2 ; g=apidiscovery.k8s.io ; as=APIGroupDiscoveryList"
        ));
        assert!(wants_aggregated(
            "application/yaml, application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList"
        ));
        // v2beta1 only: not served.
        assert!(!wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
        ));
        // Missing or wrong parameters.
        assert!(!wants_aggregated("application/json;g=apidiscovery.k8s.io;v=v2"));
        assert!(!wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscovery"
        ));
        assert!(!wants_aggregated(
            "application/yaml;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ));
        assert!(!wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0"
        ));
    }
}
