//! The API over a real store: lists, namespaces, RBAC bootstrap.

use carrel_store::{Options, SledStore};

use super::*;

#[test]
fn lists_from_stored_bytes_equal_decoded_lists() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Api::new(Arc::new(store)).unwrap();
    let rt = api.rt("", "configmaps");
    let target = Target { rt, namespace: Some("default".into()) };
    for i in 0..7 {
        let tier = if i % 2 == 0 { "web" } else { "db" };
        let body = json!({"metadata": {"name": format!("c{i}"), "labels": {"tier": tier}},
                          "data": {"metadata": "{\"x\":1}"}});
        api.create(&target, body, &Write::by("test", false)).unwrap();
    }
    let cases = [
        ListParams::default(),
        ListParams { limit: Some(3), ..Default::default() },
        ListParams {
            labels: Some(LabelSelector::parse("tier=web").unwrap()),
            ..Default::default()
        },
        ListParams {
            labels: Some(LabelSelector::parse("tier=db").unwrap()),
            limit: Some(2),
            ..Default::default()
        },
    ];
    for params in cases {
        let value = api.list(&target, &params).unwrap();
        let bytes = api.list_json(&target, &params).unwrap();
        let parsed: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed, value, "{params:?}");
    }
    let one = api.get_json(&target, "c3").unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&one).unwrap(), api.get(&target, "c3").unwrap());
}

#[test]
fn a_store_at_its_quota_refuses_creates_but_still_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Api::new(Arc::new(store)).unwrap();
    let write = Write::by("test", false);
    let namespaces = Target { rt: api.rt("", "namespaces"), namespace: None };
    api.create(&namespaces, json!({"metadata": {"name": "work"}}), &write).unwrap();
    let configmaps = Target { rt: api.rt("", "configmaps"), namespace: Some("work".into()) };
    let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    api.create(&configmaps, held, &write).unwrap();
    // Full to the byte.
    let usage = api.store().usage();
    api.store().set_quota(carrel_store::Quota { objects: usage.objects, bytes: usage.bytes });

    let err = api.create(&configmaps, json!({"metadata": {"name": "c"}}), &write).unwrap_err();
    assert_eq!((err.code(), err.reason()), (403, "Forbidden"));
    let dry_run = Write::by("test", true);
    let dry = api.create(&configmaps, json!({"metadata": {"name": "c"}}), &dry_run);
    assert_eq!(dry.unwrap_err(), err, "a dry run answers as the create would");
    assert_eq!(
        err.to_status()["message"],
        format!(
            "configmaps \"c\" is forbidden: exceeded quota: tenant-objects, requested: count=1, used: count={0}, limited: count={0}",
            usage.objects
        )
    );
    // Deleting an object with finalizers, or a namespace, first marks it, which grows it: a
    // step of a delete, so never refused.
    let marked = api.delete(&configmaps, "held", &DeleteParams::default()).unwrap();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert!(api.store().usage().bytes > usage.bytes, "the mark grew the store past its bound");
    let terminating = api.delete(&namespaces, "work", &DeleteParams::default()).unwrap();
    assert_eq!(terminating["status"]["phase"], "Terminating");
    // Dropping the finalizer shrinks the object and lets it go; then creates work again.
    let mut held = api.get(&configmaps, "held").unwrap();
    held["metadata"]["finalizers"] = json!([]);
    api.update(&configmaps, "held", held, None, &write).unwrap();
    assert_eq!(api.get(&configmaps, "held").unwrap_err().code(), 404);
    let defaults = Target { rt: api.rt("", "configmaps"), namespace: Some("default".into()) };
    api.create(&defaults, json!({"metadata": {"name": "c"}}), &write).unwrap();
}

#[test]
fn aggregated_cluster_roles_carry_their_parts_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Api::new(Arc::new(store)).unwrap();
    let rt = api.rt("rbac.authorization.k8s.io", "clusterroles");
    let target = Target { rt, namespace: None };
    let view = api.get(&target, "view").unwrap();
    let rules = view["rules"].as_array().expect("view has its aggregated rules");
    assert!(rules.iter().any(|r| r["resources"].as_array().unwrap().contains(&json!("pods"))));
    let part = json!({"metadata": {"name": "widgets-view",
        "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]});
    api.create(&target, part, &Write::by("test", false)).unwrap();
    let view = api.get(&target, "view").unwrap();
    assert!(view["rules"].as_array().unwrap().iter().any(|r| r["resources"] == json!(["widgets"])));
    let edit = api.get(&target, "edit").unwrap();
    assert!(
        edit["rules"].as_array().unwrap().iter().any(|r| r["resources"] == json!(["widgets"])),
        "edit aggregates view"
    );
}
