//! What a tenant's definitions may make the server hold, and which groups and types they may
//! not take: through the API, as a tenant writes them.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::limits;
use crate::api::{Api, DeleteParams, Target, Write};
use crate::resource::built_in;
use crate::status::ApiError;

fn store() -> (tempfile::TempDir, Arc<carrel_store::SledStore>) {
    let dir = tempfile::tempdir().expect("dir");
    let store =
        carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
            .expect("store");
    (dir, Arc::new(store))
}

fn tenant_api() -> (tempfile::TempDir, Api) {
    let (dir, store) = store();
    (dir, Api::new(store).expect("api"))
}

fn definitions() -> Target<'static> {
    Target {
        rt: built_in("apiextensions.k8s.io", "customresourcedefinitions").expect("served"),
        namespace: None,
    }
}

fn definition(group: &str, plural: &str, kind: &str, spec_schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": spec_schema}}}}],
        },
    })
}

fn create(api: &Api, object: Value) -> Result<Value, ApiError> {
    api.create(&definitions(), object, &Write::by("test", false))
}

/// The definition of the report: about 1 MiB, 20,000 properties each with its own `pattern`.
pub(crate) fn huge_definition(group: &str, plural: &str) -> Value {
    let mut properties = Map::new();
    for i in 0..20_000 {
        properties.insert(
            format!("field{i:05}"),
            json!({"type": "string", "pattern": format!("^[a-z]{{1,{}}}-v{i}$", 1 + i % 60)}),
        );
    }
    definition(group, plural, "Huge", json!({"type": "object", "properties": properties}))
}

fn causes(e: &ApiError) -> Vec<(String, String)> {
    e.causes().iter().map(|c| (c.field.clone(), c.message.clone())).collect()
}

#[test]
fn a_definition_with_twenty_thousand_patterns_is_refused_before_it_is_compiled() {
    let (_dir, api) = tenant_api();
    let huge = huge_definition("huge.example.com", "huges");
    let size = serde_json::to_vec(&huge).expect("json").len();
    assert!((900 * 1024..1536 * 1024).contains(&size), "about 1 MiB: {size}");
    let e = create(&api, huge).expect_err("refused");
    assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{}", e.message());
    let found = causes(&e);
    assert!(
        found.iter().any(|(f, m)| f == "spec.versions"
            && m.contains("20002 nodes, more than the limit of 20000")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|(f, m)| f == "spec.versions"
            && m.contains("20000 distinct patterns, more than the limit of 1000")),
        "{found:?}"
    );
    assert!(api.registry().all().iter().all(|t| t.group != "huge.example.com"));
}

#[test]
fn a_definition_over_the_size_limit_is_too_large() {
    let (_dir, api) = tenant_api();
    let mut big = definition("big.example.com", "bigs", "Big", json!({"type": "object"}));
    big["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] =
        json!("x".repeat(limits::MAX_DEFINITION_BYTES));
    let e = create(&api, big).expect_err("refused");
    assert_eq!((e.code(), e.reason()), (413, "RequestEntityTooLarge"), "{}", e.message());
}

#[test]
fn a_tenant_may_hold_only_so_many_definitions() {
    let (_dir, api) = tenant_api();
    for i in 0..limits::MAX_DEFINITIONS {
        create(
            &api,
            definition(
                "many.example.com",
                &format!("r{i}s"),
                &format!("R{i}"),
                json!({"type": "object"}),
            ),
        )
        .unwrap_or_else(|e| panic!("definition {i}: {}", e.message()));
    }
    let e =
        create(&api, definition("many.example.com", "lasts", "Last", json!({"type": "object"})))
            .expect_err("over the count");
    assert_eq!((e.code(), e.reason()), (403, "Forbidden"), "{}", e.message());
    assert!(e.message().contains("exceeded quota"), "{}", e.message());
    // Another tenant is not affected.
    let (_other_dir, other) = tenant_api();
    create(&other, definition("many.example.com", "lasts", "Last", json!({"type": "object"})))
        .expect("created");
}

#[test]
fn a_tenant_creating_and_deleting_definitions_under_new_names_stops_at_its_names_budget() {
    let (_dir, api) = tenant_api();
    // Long names, so that the budget is reached in a few hundred definitions.
    let label = |i: usize, what: &str| format!("{what}{i:05}{}", "x".repeat(50));
    let mut refused = None;
    for i in 0..2_000 {
        let group = format!("{}.{}.example.com", label(i, "g"), label(i, "h"));
        let plural = label(i, "p");
        let kind = format!("K{}", label(i, "k"));
        match create(&api, definition(&group, &plural, &kind, json!({"type": "object"}))) {
            Ok(_) => {
                let name = format!("{plural}.{group}");
                api.delete(&definitions(), &name, &DeleteParams::default()).expect("deleted");
            }
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (at, e) = refused.expect("the loop is stopped");
    assert_eq!((e.code(), e.reason()), (403, "Forbidden"), "{}", e.message());
    assert!(e.message().contains("bytes of distinct names"), "{}", e.message());
    assert!(at > 100, "ordinary use is far from the budget: stopped at {at}");
    // Names interned before cost nothing again: the first definition can come back.
    let group = format!("{}.{}.example.com", label(0, "g"), label(0, "h"));
    create(
        &api,
        definition(
            &group,
            &label(0, "p"),
            &format!("K{}", label(0, "k")),
            json!({"type": "object"}),
        ),
    )
    .expect("names seen before");
}

#[test]
fn built_in_types_and_protected_groups_are_refused_as_kube_apiserver_refuses_them() {
    let (_dir, api) = tenant_api();
    // A Lease look-alike: its group needs approval and its type is served by the server itself.
    let e = create(
        &api,
        definition("coordination.k8s.io", "leases", "Lease", json!({"type": "object"})),
    )
    .expect_err("refused");
    assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{}", e.message());
    let found = causes(&e);
    assert!(
        found.contains(&(
            "metadata.annotations[api-approved.kubernetes.io]".into(),
            "Required value: protected groups must have approval annotation \
         \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"
                .into()
        )),
        "{found:?}"
    );
    assert!(
        found.iter().any(|(f, m)| f == "spec.names.plural"
            && m.starts_with("Forbidden: \"leases\" in group \"coordination.k8s.io\"")),
        "{found:?}"
    );
    // Approved, it still may not redefine a built-in type.
    let mut approved =
        definition("coordination.k8s.io", "leases", "Lease", json!({"type": "object"}));
    approved["metadata"]["annotations"] =
        json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"});
    let e = create(&api, approved).expect_err("shadows a built-in");
    assert_eq!(causes(&e).len(), 1, "{:?}", causes(&e));
    // A wrong annotation is invalid.
    let mut wrong = definition("x.k8s.io", "things", "Thing", json!({"type": "object"}));
    wrong["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "yes"});
    let e = create(&api, wrong).expect_err("invalid approval");
    assert!(causes(&e)[0].1.starts_with("Invalid value: \"yes\": protected groups must have"));
    // A new type in a protected group, approved or knowingly unapproved, is accepted.
    let mut bypassed = definition("x.k8s.io", "things", "Thing", json!({"type": "object"}));
    bypassed["metadata"]["annotations"] =
        json!({"api-approved.kubernetes.io": "unapproved, experimental"});
    create(&api, bypassed).expect("accepted");
    // Carrel's own group is reserved.
    let e = create(&api, definition("carrel.dev", "tenants", "Tenant", json!({"type": "object"})))
        .expect_err("reserved");
    assert!(causes(&e).iter().any(|(f, _)| f == "spec.group"), "{:?}", causes(&e));
    // The lease type served is still the built-in one.
    assert!(api
        .registry()
        .get("coordination.k8s.io", "v1", "leases")
        .expect("served")
        .custom
        .is_none());
}

#[test]
fn a_host_definition_may_not_take_the_tenant_type() {
    let (_dir, store) = store();
    let host = Api::host(store).expect("host");
    let mut tenants = definition("carrel.dev", "tenants", "Tenant", json!({"type": "object"}));
    tenants["spec"]["scope"] = json!("Cluster");
    let e = create(&host, tenants).expect_err("refused");
    let found = causes(&e);
    assert!(found.iter().any(|(f, _)| f == "spec.group"), "{found:?}");
    assert!(found.iter().any(|(f, _)| f == "spec.names.plural"), "{found:?}");
}

#[test]
fn expensive_rules_are_refused_with_kube_apiserver_words() {
    let (_dir, api) = tenant_api();
    let schema = json!({"type": "object", "properties": {"names": {
        "type": "array", "items": {"type": "string"},
        "x-kubernetes-validations": [{"rule": "self.all(x, x.matches('^[a-z]+$'))"}]}}});
    let e = create(&api, definition("cost.example.com", "costs", "Cost", schema))
        .expect_err("too expensive");
    assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{}", e.message());
    let found = causes(&e);
    assert_eq!(
        found[0].0,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[names].x-kubernetes-validations[0].rule"
    );
    assert_eq!(
        found[0].1,
        "Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try \
         simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, \
         maps, and strings are declared)"
    );
    // Bounded, the same rule is cheap.
    let schema = json!({"type": "object", "properties": {"names": {
        "type": "array", "maxItems": 16, "items": {"type": "string", "maxLength": 63},
        "x-kubernetes-validations": [{"rule": "self.all(x, x.matches('^[a-z]+$'))"}]}}});
    create(&api, definition("cost.example.com", "costs", "Cost", schema)).expect("bounded");
}

#[test]
fn an_unchanged_definition_is_not_compiled_again() {
    let (_dir, api) = tenant_api();
    create(&api, definition("once.example.com", "ones", "One", json!({"type": "object"})))
        .expect("one");
    let before = api.registry().get("once.example.com", "v1", "ones").cloned().expect("served");
    create(&api, definition("once.example.com", "twos", "Two", json!({"type": "object"})))
        .expect("two");
    let after = api.registry().get("once.example.com", "v1", "ones").cloned().expect("served");
    // The same compiled definition (types compare their definitions by identity).
    assert_eq!(before, after);
    let name = "ones.once.example.com";
    api.delete(&definitions(), name, &DeleteParams::default()).expect("deleted");
    assert!(api.registry().get("once.example.com", "v1", "ones").is_none());
    let weak = std::sync::Arc::downgrade(&before.custom.as_ref().expect("custom").0);
    drop((before, after));
    assert!(weak.upgrade().is_none(), "a deleted definition's compiled schema is freed");
}

#[test]
fn an_unchanged_schema_is_not_held_to_the_cost_estimates_again() {
    // A definition stored before the estimates (or under other ones), with a rule they refuse.
    let expensive = json!({"type": "object", "properties": {"names": {
        "type": "array", "items": {"type": "string"},
        "x-kubernetes-validations": [{"rule": "self.all(x, x.matches('^[a-z]+$'))"}]}}});
    let stored = definition("old.example.com", "olds", "Old", expensive);
    let registry = crate::resource::Registry::default();
    assert_eq!(super::validate(&stored, None, &registry).expect_err("new").code(), 422);
    // An update that leaves the schema as it was passes; one that changes it is checked.
    let mut relabelled = stored.clone();
    relabelled["metadata"]["labels"] = json!({"team": "a"});
    super::validate(&relabelled, Some(&stored), &registry).expect("unchanged schema");
    let mut changed = stored.clone();
    changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["extra"] = json!({"type": "string"});
    assert_eq!(
        super::validate(&changed, Some(&stored), &registry).expect_err("changed").code(),
        422
    );
    // Stored, it is still served.
    let mut established = stored.clone();
    established["status"] = super::status_of(&stored, None, &[]).expect("status");
    assert_eq!(super::types_of(&established).len(), 1);
}
