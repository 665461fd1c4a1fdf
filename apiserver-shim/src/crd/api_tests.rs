//! Definitions through the API: their status, the types they serve, what survives a restart,
//! name conflicts, deletion held by finalizers, and what custom resources refuse.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::api::{Api, DeleteParams, Target, Write};
use crate::resource::built_in;
use crate::status::ApiError;

fn open(dir: &std::path::Path) -> Api {
    let store = carrel_store::SledStore::open(dir.join("s"), carrel_store::Options::create())
        .expect("store");
    Api::new(Arc::new(store)).expect("api")
}

fn definition(group: &str, plural: &str, kind: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}},
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}},
            ],
        },
    })
}

fn definitions() -> Target<'static> {
    Target {
        rt: built_in("apiextensions.k8s.io", "customresourcedefinitions").expect("served"),
        namespace: None,
    }
}

fn create_definition(api: &Api, object: Value) -> Result<Value, ApiError> {
    api.create(&definitions(), object, &Write::by("test", false))
}

fn object(api_version: &str, kind: &str, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": {"size": 1}})
}

/// The type served at `group/version/plural`, as of now.
fn served(api: &Api, group: &str, version: &str, plural: &str) -> Option<crate::ResourceType> {
    api.registry().get(group, version, plural).cloned()
}

#[test]
fn a_definition_is_accepted_established_and_served_in_version_order() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let created =
        create_definition(&api, definition("ml.carrel.dev", "jobs", "Job")).expect("created");
    let types: Vec<(&str, &str)> = created["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| (c["type"].as_str().unwrap_or_default(), c["status"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(types, [("NamesAccepted", "True"), ("Established", "True")]);
    assert_eq!(created["status"]["acceptedNames"]["listKind"], "JobList");
    assert_eq!(created["status"]["acceptedNames"]["singular"], "job");
    let registry = api.registry();
    let versions: Vec<&str> =
        registry.all().iter().filter(|t| t.group == "ml.carrel.dev").map(|t| t.version).collect();
    assert_eq!(versions, ["v1", "v1beta1"], "the preferred version first");
    // The built-in Job of batch/v1 is another type.
    assert!(served(&api, "batch", "v1", "jobs").is_some_and(|t| !t.is_custom()));
}

#[test]
fn definitions_and_objects_survive_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    {
        let api = open(dir.path());
        create_definition(&api, definition("ml.carrel.dev", "jobs", "Job")).expect("created");
        let rt = served(&api, "ml.carrel.dev", "v1beta1", "jobs").expect("served");
        let target = Target { rt: &rt, namespace: Some("default".into()) };
        api.create(&target, object("ml.carrel.dev/v1beta1", "Job", "a"), &Write::by("test", false))
            .expect("object");
    }
    let api = open(dir.path());
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served after a restart");
    let read = api.get(&Target { rt: &rt, namespace: Some("default".into()) }, "a").expect("read");
    // Stored in v1 (the storage version), read in v1.
    assert_eq!(read["apiVersion"], "ml.carrel.dev/v1");
    let stored = api.store().get("/ml.carrel.dev/jobs/default/a").expect("get").expect("stored");
    let stored: Value = serde_json::from_slice(&stored.value).expect("json");
    assert_eq!(stored["apiVersion"], "ml.carrel.dev/v1");
}

#[test]
fn a_conflicting_name_is_not_accepted_nor_served() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    create_definition(&api, definition("ml.carrel.dev", "jobs", "Job")).expect("first");
    let second =
        create_definition(&api, definition("ml.carrel.dev", "runs", "Job")).expect("stored");
    let condition = |type_: &str| {
        second["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(condition("NamesAccepted")["status"], "False");
    assert_eq!(condition("NamesAccepted")["message"], "\"Job\" is already in use");
    assert_eq!(condition("Established")["status"], "False");
    assert!(served(&api, "ml.carrel.dev", "v1", "runs").is_none());
}

#[test]
fn one_name_is_accepted_once_among_definitions_written_at_once() {
    let dir = tempfile::tempdir().expect("dir");
    let api = Arc::new(open(dir.path()));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let api = api.clone();
            std::thread::spawn(move || {
                create_definition(&api, definition("ml.carrel.dev", &format!("jobs{i}"), "Job"))
                    .expect("stored")
            })
        })
        .collect();
    let established = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .filter(|d| {
            d["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True")
            })
        })
        .count();
    assert_eq!(established, 1);
    let served_kinds = api
        .registry()
        .all()
        .iter()
        .filter(|t| t.group == "ml.carrel.dev" && t.version == "v1")
        .count();
    assert_eq!(served_kinds, 1);
}

#[test]
fn a_definition_waits_for_its_objects_finalizers() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    create_definition(&api, definition("ml.carrel.dev", "jobs", "Job")).expect("created");
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    let mut held = object("ml.carrel.dev/v1", "Job", "held");
    held["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    api.create(&target, held, &Write::by("test", false)).expect("held");
    api.create(&target, object("ml.carrel.dev/v1", "Job", "free"), &Write::by("test", false))
        .expect("free");

    let name = "jobs.ml.carrel.dev";
    let answer = api.delete(&definitions(), name, &DeleteParams::default()).expect("delete");
    assert!(answer["metadata"]["deletionTimestamp"].is_string(), "{answer}");
    let terminating = api.get(&definitions(), name).expect("still there");
    let conditions = terminating["status"]["conditions"].as_array().expect("conditions");
    assert!(conditions.iter().any(|c| c["type"] == "Terminating" && c["status"] == "True"));
    // The object without finalizers is gone; the held one is marked.
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served while terminating");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    assert_eq!(api.get(&target, "free").map_err(|e| e.code()), Err(404));
    let mut marked = api.get(&target, "held").expect("held");
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    // No new objects meanwhile.
    let refused =
        api.create(&target, object("ml.carrel.dev/v1", "Job", "new"), &Write::by("test", false));
    assert_eq!(refused.map_err(|e| e.code()).err(), Some(405));

    // The last finalizer removed: the object goes, and with it the definition.
    marked["metadata"]["finalizers"] = json!([]);
    api.update(&target, "held", marked, None, &Write::by("test", false)).expect("finalized");
    assert_eq!(api.get(&definitions(), name).map_err(|e| e.code()).err(), Some(404));
    assert!(served(&api, "ml.carrel.dev", "v1", "jobs").is_none());
}

#[test]
fn a_definition_outlives_its_own_finalizer_while_objects_remain() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let mut held = definition("ml.carrel.dev", "jobs", "Job");
    held["metadata"]["finalizers"] = json!(["example.com/keep"]);
    create_definition(&api, held).expect("created");
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    let mut object_a = object("ml.carrel.dev/v1", "Job", "a");
    object_a["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    api.create(&target, object_a, &Write::by("test", false)).expect("object");
    let name = "jobs.ml.carrel.dev";
    api.delete(&definitions(), name, &DeleteParams::default()).expect("delete");

    // The definition's own finalizer goes first: it stays while its object does.
    let mut definition = api.get(&definitions(), name).expect("still there");
    definition["metadata"]["finalizers"] = json!([]);
    api.update(&definitions(), name, definition, None, &Write::by("test", false)).expect("update");
    let waiting = api.get(&definitions(), name).expect("gone before its object");
    let conditions = waiting["status"]["conditions"].as_array().expect("conditions");
    assert!(conditions.iter().any(|c| c["type"] == "Terminating"), "{waiting}");
    // Then the object's: the object goes, and the definition with it.
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served while terminating");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    let mut marked = api.get(&target, "a").expect("marked");
    marked["metadata"]["finalizers"] = json!([]);
    api.update(&target, "a", marked, None, &Write::by("test", false)).expect("finalized");
    assert_eq!(api.get(&definitions(), name).map_err(|e| e.code()).err(), Some(404));
    assert!(api.store().get("/ml.carrel.dev/jobs/default/a").expect("read").is_none());
    assert!(served(&api, "ml.carrel.dev", "v1", "jobs").is_none());
}

#[test]
fn a_tightened_schema_holds_only_what_an_update_changes() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let with_limit = |max: i64| {
        let mut d = definition("ml.carrel.dev", "jobs", "Job");
        for v in d["spec"]["versions"].as_array_mut().expect("versions") {
            let spec = &mut v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
            spec["size"]["maximum"] = json!(max);
            spec["note"] = json!({"type": "string"});
        }
        d
    };
    create_definition(&api, with_limit(10)).expect("created");
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    let mut job = object("ml.carrel.dev/v1", "Job", "a");
    job["spec"]["size"] = json!(8);
    api.create(&target, job, &Write::by("test", false)).expect("object");

    // The schema tightens to a maximum of 4.
    let tightened = with_limit(4);
    api.update(&definitions(), "jobs.ml.carrel.dev", tightened, None, &Write::by("test", false))
        .expect("tightened");
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served");
    let target = Target { rt: &rt, namespace: Some("default".into()) };

    // An update that leaves size alone is accepted; one that changes it is held to the new rule.
    let mut noted = api.get(&target, "a").expect("read");
    noted["spec"]["note"] = json!("resumed");
    let noted =
        api.update(&target, "a", noted, None, &Write::by("test", false)).expect("ratcheted");
    let mut grown = noted.clone();
    grown["spec"]["size"] = json!(9);
    let refused =
        api.update(&target, "a", grown, None, &Write::by("test", false)).expect_err("refused");
    assert_eq!(refused.code(), 422);
    assert!(refused.message().contains("spec.size"), "{}", refused.message());
    // A new object is held to it at once.
    let mut fresh = object("ml.carrel.dev/v1", "Job", "b");
    fresh["spec"]["size"] = json!(8);
    let created = api.create(&target, fresh, &Write::by("test", false));
    assert_eq!(created.map_err(|e| e.code()).err(), Some(422));
}

#[test]
fn a_default_added_later_shows_on_objects_stored_before_it() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    create_definition(&api, definition("ml.carrel.dev", "jobs", "Job")).expect("created");
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    api.create(&target, object("ml.carrel.dev/v1", "Job", "a"), &Write::by("test", false))
        .expect("object");

    let mut with_default = definition("ml.carrel.dev", "jobs", "Job");
    for v in with_default["spec"]["versions"].as_array_mut().expect("versions") {
        v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tier"] =
            json!({"type": "string", "default": "standard"});
    }
    api.update(&definitions(), "jobs.ml.carrel.dev", with_default, None, &Write::by("test", false))
        .expect("updated");
    let rt = served(&api, "ml.carrel.dev", "v1", "jobs").expect("served");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    let read = api.get(&target, "a").expect("read");
    assert_eq!(read["spec"]["tier"], "standard");
    let bytes = api.get_json(&target, "a").expect("read as JSON");
    let read: Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(read["spec"]["tier"], "standard");
    let listed = api.list(&target, &crate::api::ListParams::default()).expect("list");
    assert_eq!(listed["items"][0]["spec"]["tier"], "standard");
    // Defaulted when read, not rewritten in the store.
    let stored = api.store().get("/ml.carrel.dev/jobs/default/a").expect("get").expect("stored");
    let stored: Value = serde_json::from_slice(&stored.value).expect("json");
    assert!(stored["spec"].get("tier").is_none(), "{stored}");
}

#[test]
fn webhook_conversion_needs_a_client_config() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let mut webhook = definition("ml.carrel.dev", "jobs", "Job");
    webhook["spec"]["conversion"] =
        json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}});
    let refused = create_definition(&api, webhook).expect_err("refused");
    assert_eq!(refused.code(), 422);
    assert!(
        refused.message().contains(
            "spec.conversion.webhook.clientConfig: Required value: required when strategy is set to Webhook"
        ),
        "{}",
        refused.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_resources_take_no_protobuf_and_no_strategic_merge() {
    let dir = tempfile::tempdir().expect("dir");
    let api = Arc::new(open(dir.path()));
    create_definition(&api, definition("ml.carrel.dev", "jobs", "Job")).expect("created");
    let router = crate::http::router(Arc::new(crate::Server::new(api, "")));
    let collection = "/apis/ml.carrel.dev/v1/namespaces/default/jobs";
    let send = |method: &str, path: &str, content_type: &str, body: Vec<u8>| {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(Body::from(body))
            .expect("request");
        router.clone().oneshot(request)
    };
    let protobuf =
        send("POST", collection, "application/vnd.kubernetes.protobuf", b"k8s\0".to_vec())
            .await
            .expect("answer");
    assert_eq!(protobuf.status().as_u16(), 415);
    let body = serde_json::to_vec(&object("ml.carrel.dev/v1", "Job", "a")).expect("json");
    let created = send("POST", collection, "application/json", body).await.expect("answer");
    assert_eq!(created.status().as_u16(), 201);
    let patched = send(
        "PATCH",
        &format!("{collection}/a"),
        "application/strategic-merge-patch+json",
        br#"{"spec":{"size":2}}"#.to_vec(),
    )
    .await
    .expect("answer");
    assert_eq!(patched.status().as_u16(), 415);
    let merged = send(
        "PATCH",
        &format!("{collection}/a"),
        "application/merge-patch+json",
        br#"{"spec":{"size":2}}"#.to_vec(),
    )
    .await
    .expect("answer");
    assert_eq!(merged.status().as_u16(), 200);
}

/// A definition of `shirts` with `selectableFields` in its one version.
fn shirts(fields: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "shirts.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "shirts", "kind": "Shirt"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "selectableFields": fields,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "color": {"type": "string"},
                        "size": {"type": "string", "enum": ["S", "M", "L"]},
                        "quantity": {"type": "integer"},
                        "branded": {"type": "boolean"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    }}}}}}],
        },
    })
}

async fn get(router: &axum::Router, uri: &str) -> (u16, Value) {
    let request = Request::builder().uri(uri).body(Body::empty()).expect("request");
    let answer = router.clone().oneshot(request).await.expect("answer");
    let code = answer.status().as_u16();
    let bytes = axum::body::to_bytes(answer.into_body(), 1 << 24).await.expect("body");
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn selectable_fields_filter_lists_and_are_published() {
    let dir = tempfile::tempdir().expect("dir");
    let api = Arc::new(open(dir.path()));
    let fields = json!([{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.size"},
        {"jsonPath": ".spec.quantity"}, {"jsonPath": ".spec.branded"}]);
    create_definition(&api, shirts(fields)).expect("definition");
    let rt = served(&api, "stable.example.com", "v1", "shirts").expect("served");
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    for (name, color, size, quantity, branded) in
        [("a", "blue", "S", 1, true), ("b", "blue", "L", 2, false), ("c", "red", "S", 2, true)]
    {
        let shirt = json!({"apiVersion": "stable.example.com/v1", "kind": "Shirt",
            "metadata": {"name": name},
            "spec": {"color": color, "size": size, "quantity": quantity, "branded": branded}});
        api.create(&target, shirt, &Write::by("test", false)).expect("shirt");
    }
    let router = crate::http::router(Arc::new(crate::Server::new(api.clone(), "")));
    let names = |list: &Value| -> Vec<String> {
        let items = list["items"].as_array().cloned().unwrap_or_default();
        items.iter().map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_owned()).collect()
    };
    let base = "/apis/stable.example.com/v1/namespaces/default/shirts";
    for (selector, wanted) in [
        ("spec.color=blue", vec!["a", "b"]),
        ("spec.color!=blue", vec!["c"]),
        ("spec.color=blue,spec.size=S", vec!["a"]),
        ("spec.quantity=2", vec!["b", "c"]),
        ("spec.branded=false", vec!["b"]),
        ("metadata.name=c", vec!["c"]),
    ] {
        let (code, list) = get(&router, &format!("{base}?fieldSelector={selector}")).await;
        assert_eq!(code, 200, "{selector}: {list}");
        assert_eq!(names(&list), wanted, "{selector}");
    }
    // A field the version does not declare is refused as apiextensions-apiserver refuses it.
    let (code, status) = get(&router, &format!("{base}?fieldSelector=spec.tags=x")).await;
    assert_eq!(code, 400);
    assert_eq!(status["message"], "field label not supported: spec.tags");

    // The OpenAPI v3 document names them on the kind.
    let (code, doc) = get(&router, "/openapi/v3/apis/stable.example.com/v1").await;
    assert_eq!(code, 200);
    let schema = &doc["components"]["schemas"]["com.example.stable.v1.Shirt"];
    assert_eq!(
        schema["x-kubernetes-selectable-fields"],
        json!([{"fieldPath": "spec.color"}, {"fieldPath": "spec.size"},
               {"fieldPath": "spec.quantity"}, {"fieldPath": "spec.branded"}])
    );
}

#[test]
fn selectable_fields_are_checked_as_apiextensions_apiserver_checks_them() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let fields = json!([
        {"jsonPath": ""},
        {"jsonPath": "spec.color"},
        {"jsonPath": ".spec.tags[0]"},
        {"jsonPath": ".metadata.name"},
        {"jsonPath": ".spec.color"},
        {"jsonPath": ".spec.color"},
        {"jsonPath": ".spec.nothing"},
        {"jsonPath": ".spec.tags"},
        {"jsonPath": ".spec.size"},
    ]);
    let refused = create_definition(&api, shirts(fields)).expect_err("refused");
    assert_eq!(refused.code(), 422);
    let message = refused.message();
    let at = "spec.versions[0].selectableFields";
    for wanted in [
        format!("{at}[0].jsonPath: Required value"),
        format!("{at}[1].jsonPath: Invalid value: \"spec.color\": must be a simple json path starting with ."),
        format!("{at}[2].jsonPath: Invalid value: \".spec.tags[0]\": must be a simple JSON path without array notation"),
        format!("{at}[3].jsonPath: Invalid value: \".metadata.name\": must not point to fields in metadata"),
        format!("{at}[5].jsonPath: Duplicate value: \".spec.color\""),
        format!("{at}[6].jsonPath: Invalid value: \".spec.nothing\": is an invalid path"),
        format!("{at}[7].jsonPath: Invalid value: \".spec.tags\": must point to a field of type string, boolean or integer"),
        format!("{at}: Too many: 9: must have at most 8 items"),
    ] {
        assert!(message.contains(&wanted), "{wanted}\nnot in\n{message}");
    }
    assert!(!message.contains(&format!("{at}[4]")), "{message}");
    assert!(!message.contains(&format!("{at}[8]")), "{message}");
}
