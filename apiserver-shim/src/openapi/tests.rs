use super::*;

use super::paths::{operation_prefix, tag};
use crate::resource::BUILT_IN;

fn core_v1() -> Value {
    document(&Registry::default(), "", "v1")
}

fn apps_v1() -> Value {
    document(&Registry::default(), "apps", "v1")
}

fn schema<'a>(doc: &'a Value, name: &str) -> &'a Value {
    let schema = &doc["components"]["schemas"][name];
    assert!(schema.is_object(), "{name} missing");
    schema
}

/// Every `$ref` in `value`.
fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn a_document_is_openapi_3_with_paths_and_schemas() {
    let doc = core_v1();
    assert_eq!(doc["openapi"], "3.0.0");
    assert_eq!(doc["info"], json!({"title": "Kubernetes", "version": "v1.33.0"}));
    for path in [
        "/api/v1/",
        "/api/v1/namespaces/{namespace}/pods",
        "/api/v1/namespaces/{namespace}/pods/{name}",
        "/api/v1/namespaces/{namespace}/pods/{name}/status",
        "/api/v1/pods",
        "/api/v1/watch/namespaces/{namespace}/pods",
        "/api/v1/watch/namespaces/{namespace}/pods/{name}",
        "/api/v1/watch/pods",
        "/api/v1/nodes",
        "/api/v1/nodes/{name}",
        "/api/v1/namespaces/{name}/finalize",
        "/api/v1/namespaces/{namespace}/replicationcontrollers/{name}/scale",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    for name in [
        "io.k8s.api.core.v1.Pod",
        "io.k8s.api.core.v1.PodList",
        "io.k8s.api.core.v1.PodSpec",
        "io.k8s.api.autoscaling.v1.Scale",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
        "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
        "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
    ] {
        schema(&doc, name);
    }
    // A group-version's document holds its own kinds, not another's.
    assert!(doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_null());
}

#[test]
fn operations_carry_their_action_and_kind() {
    let doc = apps_v1();
    let item = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    let deployment = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    for (method, action) in
        [("get", "get"), ("put", "put"), ("patch", "patch"), ("delete", "delete")]
    {
        assert_eq!(item[method]["x-kubernetes-action"], action, "{method}");
        assert_eq!(item[method]["x-kubernetes-group-version-kind"], deployment, "{method}");
    }
    assert_eq!(item["get"]["operationId"], "readAppsV1NamespacedDeployment");
    let names: Vec<&str> = item["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["name", "namespace", "pretty"]);
    assert_eq!(
        item["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.Deployment"
    );
    assert_eq!(
        item["patch"]["requestBody"]["content"]["application/strategic-merge-patch+json"]["schema"]
            ["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    // kubectl validates client-side only while PATCH does not take fieldValidation.
    let patch_params: Vec<&str> = item["patch"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(patch_params.contains(&"dryRun"));
    assert_eq!(patch_params.contains(&"fieldValidation"), SERVER_FIELD_VALIDATION);

    let collection = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"];
    assert_eq!(collection["get"]["x-kubernetes-action"], "list");
    assert_eq!(collection["post"]["x-kubernetes-action"], "post");
    assert_eq!(collection["delete"]["x-kubernetes-action"], "deletecollection");
    assert_eq!(collection["get"]["operationId"], "listAppsV1NamespacedDeployment");
    // kubectl explain finds a kind through the list across namespaces.
    let all = &doc["paths"]["/apis/apps/v1/deployments"]["get"];
    assert_eq!(all["x-kubernetes-group-version-kind"], deployment);
    let scale = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
    assert_eq!(
        scale["put"]["x-kubernetes-group-version-kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(
        doc["paths"]["/apis/apps/v1/watch/namespaces/{namespace}/deployments"]["get"]
            ["x-kubernetes-action"],
        "watchlist"
    );
}

#[test]
fn kinds_and_lists_carry_their_group_version_kind() {
    let doc = apps_v1();
    assert_eq!(
        schema(&doc, "io.k8s.api.apps.v1.Deployment")["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    assert_eq!(
        schema(&doc, "io.k8s.api.apps.v1.DeploymentList")["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "DeploymentList", "version": "v1"}])
    );
    let doc = core_v1();
    assert_eq!(
        schema(&doc, "io.k8s.api.core.v1.Pod")["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    let delete_options = &schema(&doc, "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions")
        ["x-kubernetes-group-version-kind"];
    assert!(delete_options
        .as_array()
        .unwrap()
        .contains(&json!({"group": "apps", "kind": "DeleteOptions", "version": "v1"})));
    // Nested types are not kinds.
    assert!(schema(&doc, "io.k8s.api.core.v1.PodSpec")
        .get("x-kubernetes-group-version-kind")
        .is_none());
    // kube-apiserver requires no top-level field of a kind.
    assert!(schema(&doc, "io.k8s.api.core.v1.Pod").get("required").is_none());
}

#[test]
fn a_kind_is_marked_in_every_document_it_appears_in() {
    let registry = Registry::default();
    let doc = apps_v1();
    let claim = schema(&doc, "io.k8s.api.core.v1.PersistentVolumeClaim");
    assert_eq!(
        claim["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "PersistentVolumeClaim", "version": "v1"}])
    );
    for (group, versions) in registry.groups() {
        for version in versions {
            let doc = document(&registry, group, version);
            for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
                if schema.get("x-kubernetes-group-version-kind").is_some() {
                    let required = schema["required"].as_array().cloned().unwrap_or_default();
                    assert!(!required.contains(&json!("metadata")), "{name} requires metadata");
                }
            }
        }
    }
}

#[test]
fn every_served_kind_has_a_schema_of_its_own_group_version_kind() {
    for rt in BUILT_IN {
        let names = kind_names(rt)
            .unwrap_or_else(|| panic!("no type for {}/{} {}", rt.group, rt.version, rt.kind));
        let doc = document(&Registry::default(), rt.group, rt.version);
        assert_eq!(
            schema(&doc, &names.kind)["x-kubernetes-group-version-kind"],
            json!([{"group": rt.group, "kind": rt.kind, "version": rt.version}]),
            "{}",
            names.kind
        );
        schema(&doc, &names.list);
    }
}

#[test]
fn pod_spec_containers_merge_by_name() {
    let doc = core_v1();
    let containers = &schema(&doc, "io.k8s.api.core.v1.PodSpec")["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    let volumes = &schema(&doc, "io.k8s.api.core.v1.PodSpec")["properties"]["volumes"];
    assert_eq!(volumes["x-kubernetes-patch-strategy"], "merge,retainKeys");
    let ports = &schema(&doc, "io.k8s.api.core.v1.Container")["properties"]["ports"];
    assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
    assert_eq!(ports["x-kubernetes-list-map-keys"], json!(["containerPort", "protocol"]));
    let selector = &schema(&doc, "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector");
    assert_eq!(selector["x-kubernetes-map-type"], "atomic");

    let found = list_annotations("io.k8s.api.core.v1.PodSpec", "containers").unwrap();
    assert_eq!(found.patch_merge_key, Some("name"));
    assert_eq!(found.patch_strategy, Some(PatchStrategy::Merge));
    assert_eq!(found.list_type, Some(ListType::Map));
    assert_eq!(found.list_map_keys, ["name"]);
    let tolerations = list_annotations("io.k8s.api.core.v1.PodSpec", "tolerations").unwrap();
    assert_eq!(tolerations.list_type, Some(ListType::Atomic));
    assert_eq!(tolerations.patch_merge_key, None);
    assert!(list_annotations("io.k8s.api.core.v1.PodSpec", "hostname").is_none());
}

#[test]
fn every_ref_resolves_inside_its_document() {
    let registry = Registry::default();
    for (group, versions) in registry.groups() {
        for version in versions {
            let doc = document(&registry, group, version);
            let mut all = Vec::new();
            refs(&doc, &mut all);
            assert!(!all.is_empty());
            for r in all {
                let name = r.strip_prefix(SCHEMA_REF_PREFIX).unwrap_or_else(|| panic!("{r}"));
                assert!(
                    doc["components"]["schemas"][name].is_object(),
                    "{group}/{version}: {r} does not resolve"
                );
            }
        }
    }
}

/// The table names only fields that exist, and every list field of a served schema is in it.
#[test]
fn the_annotation_table_matches_the_schemas() {
    let registry = Registry::host();
    let mut schemas = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            schemas.extend(schemas_for(&registry, group, version));
        }
    }
    for (name, property, _) in annotations::all() {
        let schema = &schemas.get(&name).unwrap_or_else(|| panic!("no schema {name}"));
        if property != annotations::SELF {
            assert!(schema["properties"][property].is_object(), "{name} has no {property}");
        }
    }
    for (name, schema) in &schemas {
        for (property, field) in schema["properties"].as_object().into_iter().flatten() {
            let is_list = field["type"] == "array";
            if is_list && !(name.ends_with("List") && property == "items") {
                let found = list_annotations(name, property);
                assert!(
                    found.is_some_and(|a| a.list_type.is_some()),
                    "{name}.{property} has no list type"
                );
            }
        }
    }
}

#[test]
fn the_hash_is_stable_and_names_the_content() {
    let registry = Registry::default();
    let (a, b) = (build_v3(&registry), build_v3(&registry));
    assert_eq!(a.root, b.root);
    for (key, document) in &a.documents {
        assert_eq!(document.hash, b.documents[key].hash);
        assert_eq!(document.hash, hash(&document.body));
        assert!(document.hash.chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
    }
    assert_ne!(a.documents["api/v1"].hash, a.documents["apis/apps/v1"].hash);
    let root: Value = serde_json::from_slice(&a.root).unwrap();
    let paths = root["paths"].as_object().unwrap();
    assert_eq!(paths.len(), a.documents.len());
    assert_eq!(
        root["paths"]["apis/apps/v1"]["serverRelativeURL"],
        format!("/openapi/v3/apis/apps/v1?hash={}", a.documents["apis/apps/v1"].hash)
    );
}

#[test]
fn answers_follow_the_hash() {
    let current = &v3(false).documents["apis/batch/v1"].hash;
    match answer(false, &["v3", "apis", "batch", "v1"], Some(current), "", None) {
        Answer::Body { immutable, content_type, etag, .. } => {
            assert!(immutable);
            assert_eq!(content_type, JSON);
            assert_eq!(etag, Some(current.as_str()));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        answer(false, &["v3", "apis", "batch", "v1"], None, "", None),
        Answer::Body { immutable: false, .. }
    ));
    assert_eq!(
        answer(false, &["v3", "apis", "batch", "v1"], Some("0BAD"), "", None),
        Answer::Redirect(format!("/openapi/v3/apis/batch/v1?hash={current}"))
    );
    assert_eq!(
        answer(false, &["v3", "apis", "batch", "v1"], None, "", Some(&format!("\"{current}\""))),
        Answer::NotModified
    );
    assert_eq!(answer(false, &["v3", "apis", "nope", "v1"], None, "", None), Answer::NotFound);
    assert_eq!(answer(false, &["v4"], None, "", None), Answer::NotFound);
    assert!(matches!(
        answer(false, &["v3"], None, "", None),
        Answer::Body { content_type: JSON, .. }
    ));
    match answer(false, &["v2"], None, V2_PROTOBUF, None) {
        Answer::Body { content_type, body, .. } => {
            assert_eq!(content_type, V2_PROTOBUF_ANSWER);
            // Document.swagger (field 1) comes first.
            assert_eq!(&body[..5], b"\x0a\x032.0");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_v2_document_holds_every_kind_in_swagger_form() {
    let v2: Value = serde_json::from_slice(&v2(false).json.body).unwrap();
    assert_eq!(v2["swagger"], "2.0");
    let deployment = &v2["definitions"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    assert_eq!(
        deployment["properties"]["spec"]["$ref"],
        "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
    );
    let mut all = Vec::new();
    refs(&v2, &mut all);
    for r in all {
        let name = r.strip_prefix("#/definitions/").unwrap_or_else(|| panic!("{r}"));
        assert!(v2["definitions"][name].is_object(), "{r} does not resolve");
    }
}

#[test]
fn operation_ids_and_tags_name_the_group_version() {
    assert_eq!(operation_prefix("", "v1"), "CoreV1");
    assert_eq!(operation_prefix("rbac.authorization.k8s.io", "v1"), "RbacAuthorizationV1");
    assert_eq!(operation_prefix("networking.k8s.io", "v1"), "NetworkingV1");
    assert_eq!(tag("", "v1"), "core_v1");
    assert_eq!(tag("rbac.authorization.k8s.io", "v1"), "rbacAuthorization_v1");
    assert_eq!(document_key("", "v1"), "api/v1");
    assert_eq!(document_key("apps", "v1"), "apis/apps/v1");
}

#[test]
fn values_of_the_wrong_type_are_named_by_their_field() {
    let rt = |group: &str, plural: &str| {
        BUILT_IN.iter().find(|t| t.group == group && t.plural == plural).expect("served")
    };
    let deployment = |replicas: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": replicas, "selector": {}, "template": {"spec": {"containers": [
                   {"name": "c", "image": "x", "resources": {"limits": {"cpu": 1}}}]}}}})
    };
    assert!(rt("apps", "deployments").strategy.check_types(&deployment(json!(2))).is_ok());
    let err = rt("apps", "deployments")
        .strategy
        .check_types(&deployment(json!("two")))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("spec.replicas: invalid type: string \"two\""), "{err}");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": ["a"]}});
    let err = rt("", "pods").strategy.check_types(&pod).unwrap_err().to_string();
    assert!(err.starts_with("metadata.labels: "), "{err}");
}

#[test]
fn the_host_documents_serve_tenants_and_tenant_documents_do_not() {
    let host = &v3(true).documents;
    let tenants: Value = serde_json::from_slice(&host["apis/carrel.dev/v1alpha1"].body).unwrap();
    let schema = &tenants["components"]["schemas"]["dev.carrel.v1alpha1.Tenant"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "carrel.dev", "kind": "Tenant", "version": "v1alpha1"}])
    );
    assert!(schema["properties"]["spec"].is_object(), "{schema}");
    assert!(!v3(false).documents.contains_key("apis/carrel.dev/v1alpha1"));
    let v2: Value = serde_json::from_slice(&v2(true).json.body).unwrap();
    assert!(v2["definitions"]["dev.carrel.v1alpha1.TenantSpec"].is_object());
}
