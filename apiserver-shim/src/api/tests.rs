//! The API over a real store: lists, namespaces, RBAC bootstrap.

use carrel_store::{Options, SledStore};
use serde_json::json;

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
        // Byte for byte: the spliced stored bytes are what encoding the decoded list writes.
        let value = api.list(&target, &params).unwrap();
        let bytes = api.list_json(&target, &params).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            String::from_utf8(crate::go_json::to_vec(&value)).unwrap(),
            "{params:?}"
        );
    }
    let one = api.get_json(&target, "c3").unwrap();
    assert_eq!(one, crate::go_json::to_vec(&api.get(&target, "c3").unwrap()));
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

/// Every object of `store`, by key, as stored.
fn stored(store: &dyn Store) -> Vec<(String, Value)> {
    let page = store.list("", &carrel_store::ListOptions::default()).unwrap();
    page.items.iter().map(|o| (o.key.clone(), serde_json::from_slice(&o.value).unwrap())).collect()
}

#[test]
fn a_new_cluster_is_bootstrapped_in_one_durable_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Api::new(Arc::new(store)).unwrap();
    let objects = stored(api.store().as_ref());
    let stats = api.store().commit_stats();
    assert_eq!(stats.commits, 1, "{stats:?}");
    assert_eq!(stats.revisions, objects.len() as u64, "every object written once");
    assert_eq!(api.store().current_revision(), objects.len() as u64);

    let keys: Vec<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
    for ns in SYSTEM_NAMESPACES {
        assert!(keys.contains(&format!("/core/namespaces/{ns}").as_str()), "{ns}");
        assert!(keys.contains(&format!("/core/serviceaccounts/{ns}/default").as_str()), "{ns}");
    }
    let roles = crate::rbac::bootstrap::cluster_roles().len();
    let bindings = crate::rbac::bootstrap::cluster_role_bindings().len();
    assert_eq!(objects.len(), 2 * SYSTEM_NAMESPACES.len() + roles + bindings + 2);
    // The `kubernetes` Service, on the Service network's first address, in the same commit.
    let (_, kubernetes) =
        objects.iter().find(|(k, _)| k == "/core/services/default/kubernetes").unwrap();
    assert_eq!(kubernetes["spec"]["clusterIPs"], json!(["10.96.0.1"]));
    assert_eq!(kubernetes["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(kubernetes["spec"]["ports"][0]["targetPort"], 6443);
    // And the cluster DNS Service, on the tenth, as kubeadm places it.
    let (_, dns) =
        objects.iter().find(|(k, _)| k == "/core/services/kube-system/kube-dns").unwrap();
    assert_eq!(dns["spec"]["clusterIPs"], json!(["10.96.0.10"]));
    assert_eq!(dns["metadata"]["labels"]["k8s-app"], "kube-dns");
    let protocols: Vec<&Value> =
        dns["spec"]["ports"].as_array().unwrap().iter().map(|p| &p["protocol"]).collect();
    assert_eq!(protocols, [&json!("UDP"), &json!("TCP")]);
    // Prepared as their creates: defaulted, with uid and creationTimestamp.
    let (_, default) = objects.iter().find(|(k, _)| k == "/core/namespaces/default").unwrap();
    assert_eq!(default["status"]["phase"], "Active");
    assert_eq!(default["metadata"]["labels"]["kubernetes.io/metadata.name"], "default");
    assert!(objects
        .iter()
        .all(|(_, o)| o["metadata"]["uid"].is_string()
            && o["metadata"]["creationTimestamp"].is_string()));
    // The aggregated roles were stored with their parts' rules: nothing left to aggregate.
    let typed: Vec<k8s_openapi::api::rbac::v1::ClusterRole> = objects
        .iter()
        .filter(|(k, _)| k.starts_with("/rbac.authorization.k8s.io/clusterroles/"))
        .map(|(_, o)| serde_json::from_value(o.clone()).unwrap())
        .collect();
    assert_eq!(typed.len(), roles);
    assert!(crate::rbac::aggregate(&typed).is_empty());
}

#[test]
fn a_restart_writes_only_what_is_missing_and_keeps_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let discovery = "/rbac.authorization.k8s.io/clusterrolebindings/system:discovery";
    let before = {
        let api = Api::new(Arc::new(SledStore::open(&path, Options::create()).unwrap())).unwrap();
        stored(api.store().as_ref())
    };
    {
        // Nothing missing: nothing written.
        let api = Api::new(Arc::new(SledStore::open(&path, Options::create()).unwrap())).unwrap();
        assert_eq!(api.store().commit_stats().commits, 0);
        assert_eq!(stored(api.store().as_ref()), before);
        // An administrator's change, and objects gone.
        let target = Target {
            rt: api.rt("rbac.authorization.k8s.io", "clusterrolebindings"),
            namespace: None,
        };
        let mut binding = api.get(&target, "system:discovery").unwrap();
        binding["subjects"] = json!([{"kind": "Group", "name": "admins",
            "apiGroup": "rbac.authorization.k8s.io"}]);
        api.update(&target, "system:discovery", binding, None, &Write::by("admin", false)).unwrap();
        let store = api.store();
        store
            .delete("/rbac.authorization.k8s.io/clusterroles/system:aggregate-to-view", None)
            .unwrap();
        store.delete("/rbac.authorization.k8s.io/clusterrolebindings/cluster-admin", None).unwrap();
        store.delete("/core/serviceaccounts/kube-public/default", None).unwrap();
    }
    let api = Api::new(Arc::new(SledStore::open(&path, Options::create()).unwrap())).unwrap();
    let after = stored(api.store().as_ref());
    let stats = api.store().commit_stats();
    assert_eq!((stats.commits, stats.revisions), (1, 2), "the missing role and binding, together");
    let keys =
        |objects: &[(String, Value)]| objects.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let mut expected = keys(&before);
    expected.retain(|k| k != "/core/serviceaccounts/kube-public/default");
    assert_eq!(keys(&after), expected, "an existing namespace's account is not made again");
    let subjects = |objects: &[(String, Value)]| {
        objects.iter().find(|(k, _)| k == discovery).unwrap().1["subjects"].clone()
    };
    assert_eq!(subjects(&after)[0]["name"], "admins", "the change is kept");
    let rules = |objects: &[(String, Value)], name: &str| {
        let key = format!("/rbac.authorization.k8s.io/clusterroles/{name}");
        objects.iter().find(|(k, _)| *k == key).unwrap().1["rules"].clone()
    };
    for name in ["view", "edit", "admin", "system:aggregate-to-view"] {
        assert_eq!(rules(&after, name), rules(&before, name), "{name}");
    }
}

#[test]
fn objects_created_together_are_one_write_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Api::new(Arc::new(store)).unwrap();
    let namespaces = api.rt("", "namespaces");
    let configmaps = api.rt("", "configmaps");
    let in_team = || Target { rt: configmaps, namespace: Some("team".into()) };
    let commits = api.store().commit_stats().commits;
    let written = api
        .create_all_as_server(vec![
            (Target { rt: namespaces, namespace: None }, json!({"metadata": {"name": "team"}})),
            (in_team(), json!({"metadata": {"name": "settings"}, "data": {"a": "1"}})),
        ])
        .unwrap();
    assert_eq!(written[1]["metadata"]["namespace"], "team");
    let first: Revision =
        written[0]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert_eq!(written[1]["metadata"]["resourceVersion"], (first + 1).to_string());
    assert_eq!(api.get(&in_team(), "settings").unwrap()["data"]["a"], "1");
    // The namespace's create effects ran after: its account, a write of its own.
    let accounts = Target { rt: api.rt("", "serviceaccounts"), namespace: Some("team".into()) };
    assert!(api.get(&accounts, "default").is_ok());
    assert_eq!(api.store().commit_stats().commits, commits + 2);

    let revision = api.store().current_revision();
    let err = api
        .create_all_as_server(vec![
            (in_team(), json!({"metadata": {"name": "new"}})),
            (in_team(), json!({"metadata": {"name": "settings"}})),
        ])
        .unwrap_err();
    assert_eq!((err.code(), err.reason()), (409, "AlreadyExists"));
    assert_eq!(api.get(&in_team(), "new").unwrap_err().code(), 404);
    let missing = Target { rt: configmaps, namespace: Some("nowhere".into()) };
    let err = api
        .create_all_as_server(vec![
            (in_team(), json!({"metadata": {"name": "new"}})),
            (missing, json!({"metadata": {"name": "c"}})),
        ])
        .unwrap_err();
    assert_eq!(err.code(), 404);
    assert_eq!(api.store().current_revision(), revision);
}

#[test]
fn new_workloads_carry_the_status_kube_apiserver_writes_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Api::new(Arc::new(store)).unwrap();
    let write = Write::by("test", false);
    let template = json!({"metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let selector = json!({"matchLabels": {"app": "a"}});
    let mut job_template = template.clone();
    job_template["spec"]["restartPolicy"] = json!("Never");
    let cases = [
        ("apps", "deployments", json!({"selector": selector, "template": template}), json!({})),
        (
            "apps",
            "replicasets",
            json!({"selector": selector, "template": template}),
            json!({"replicas": 0}),
        ),
        ("batch", "jobs", json!({"template": job_template}), json!({})),
        (
            "policy",
            "poddisruptionbudgets",
            json!({"selector": selector, "minAvailable": 1}),
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                   "expectedPods": 0}),
        ),
    ];
    for (group, plural, spec, status) in cases {
        let target = Target { rt: api.rt(group, plural), namespace: Some("default".into()) };
        // A status sent with the create is not taken: the server's own is written.
        let sent = json!({"metadata": {"name": "w"}, "spec": spec, "status": {"replicas": 7}});
        let created = api.create(&target, sent, &write).unwrap();
        assert_eq!(created["status"], status, "{plural}");
    }
}

#[test]
fn a_delete_without_a_resource_version_is_not_lost_to_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Arc::new(Api::new(Arc::new(store)).unwrap());
    let names: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    let with_finalizer = |name: &str| name.ends_with('5');
    {
        let target = Target { rt: api.rt("", "configmaps"), namespace: Some("default".into()) };
        for name in &names {
            let mut body = json!({"metadata": {"name": name}});
            if with_finalizer(name) {
                body["metadata"]["finalizers"] = json!(["example.com/hold"]);
            }
            api.create(&target, body, &Write::by("test", false)).unwrap();
        }
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let (api, stop, names) = (api.clone(), stop.clone(), names.clone());
            std::thread::spawn(move || {
                let target =
                    Target { rt: api.rt("", "configmaps"), namespace: Some("default".into()) };
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for name in &names {
                        let Ok(mut object) = api.get(&target, name) else { continue };
                        n += 1;
                        object["data"] = json!({"beat": n.to_string()});
                        let _ = api.update(&target, name, object, None, &Write::by("w", false));
                    }
                }
            })
        })
        .collect();
    let target = Target { rt: api.rt("", "configmaps"), namespace: Some("default".into()) };
    // A stale resourceVersion precondition is still refused.
    let stale = DeleteParams { resource_version: Some("1".into()), ..Default::default() };
    assert_eq!(api.delete(&target, "c0", &stale).unwrap_err().code(), 409);
    let deleted: Vec<_> =
        names.iter().map(|n| (n, api.delete(&target, n, &DeleteParams::default()))).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writers.into_iter().for_each(|w| w.join().unwrap());
    for (name, answer) in deleted {
        assert!(answer.is_ok(), "{name}: {answer:?}");
        match api.get(&target, name) {
            Ok(held) => {
                assert!(with_finalizer(name) && crate::object::is_deleting(&held), "{name} held")
            }
            Err(e) => assert_eq!(e.code(), 404, "{name}"),
        }
    }
}

#[test]
fn services_are_given_cluster_ips_and_node_ports_held_until_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
    let api = Api::new(Arc::new(store)).unwrap();
    let write = Write::by("test", false);
    let services = Target { rt: api.rt("", "services"), namespace: Some("default".into()) };
    let web = api
        .create(
            &services,
            json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort",
            "selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            &write,
        )
        .unwrap();
    let ip = web["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert!(ip.starts_with("10.") && ip != "10.96.0.1", "{ip}");
    assert_eq!(web["spec"]["clusterIPs"], json!([ip]));
    let node_port = web["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&node_port));
    assert_eq!(web["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(web["spec"]["internalTrafficPolicy"], "Cluster");

    // Taken: by `web`, and by the `kubernetes` Service.
    for (asked, port) in [(ip.as_str(), node_port), ("10.96.0.1", 0)] {
        let body = json!({"metadata": {"name": "copy"}, "spec": {"type": "NodePort",
            "clusterIP": asked, "ports": [{"port": 80, "nodePort": port}]}});
        let err = api.create(&services, body, &write).unwrap_err();
        assert_eq!(err.code(), 422);
        assert!(
            err.message().contains(&format!(
                "spec.clusterIPs: Invalid value: []string{{\"{asked}\"}}: failed to allocate IP \
                 {asked}: provided IP is already allocated"
            )),
            "{}",
            err.message()
        );
    }
    // An update that leaves the cluster IP out keeps it; turning NodePort into ClusterIP drops
    // the node port.
    let mut update = json!({"metadata": {"name": "web", "resourceVersion": web["metadata"]["resourceVersion"]},
        "spec": {"type": "ClusterIP", "selector": {"app": "web"}, "ports": [{"port": 80, "nodePort": node_port}]}});
    update["spec"]["externalTrafficPolicy"] = json!("Cluster");
    let updated = api.update(&services, "web", update, None, &write).unwrap();
    assert_eq!(updated["spec"]["clusterIP"], json!(ip));
    assert!(updated["spec"]["ports"][0].get("nodePort").is_none(), "{updated}");
    assert!(updated["spec"].get("externalTrafficPolicy").is_none(), "{updated}");

    // Deleted, its address is free again.
    api.delete(&services, "web", &DeleteParams::default()).unwrap();
    let again = api
        .create(
            &services,
            json!({"metadata": {"name": "again"}, "spec": {"clusterIP": ip,
            "ports": [{"port": 80}]}}),
            &write,
        )
        .unwrap();
    assert_eq!(again["spec"]["clusterIPs"], json!([ip]));
    let bad = json!({"metadata": {"name": "bad"}, "spec": {"clusterIP": "not-an-ip", "ports": [{"port": 80}]}});
    let err = api.create(&services, bad, &write).unwrap_err();
    assert!(
        err.message().contains(
            "spec.clusterIPs[0]: Invalid value: \"not-an-ip\": must be a valid IP address"
        ),
        "{}",
        err.message()
    );
}

#[test]
fn the_kubernetes_endpoints_name_where_the_api_answers_and_follow_it_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let open = |address: &str| {
        let network = ServiceNetwork::default().with_api_endpoint(address.parse().unwrap());
        Api::new_in(Arc::new(SledStore::open(&path, Options::create()).unwrap()), network).unwrap()
    };
    let in_default = |api: &Api, group: &'static str, plural: &'static str| {
        let target = Target { rt: api.rt(group, plural), namespace: Some("default".into()) };
        api.get(&target, "kubernetes").unwrap()
    };
    let api = open("127.0.0.1:7443");
    let service = in_default(&api, "", "services");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 7443);
    assert_eq!(service["spec"]["clusterIP"], "10.96.0.1");
    let endpoints = in_default(&api, "", "endpoints");
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(endpoints["subsets"][0]["ports"][0]["port"], 7443);
    assert_eq!(endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"], "true");
    let slice = in_default(&api, "discovery.k8s.io", "endpointslices");
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(slice["endpoints"][0]["addresses"][0], "127.0.0.1");
    assert_eq!(slice["ports"][0], json!({"name": "https", "port": 7443, "protocol": "TCP"}));
    assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], "kubernetes");

    // The loopback address is the server's own record: a user may not write one.
    let mut edited = endpoints.clone();
    edited["metadata"]["labels"]["edited"] = json!("yes");
    let target = Target { rt: api.rt("", "endpoints"), namespace: Some("default".into()) };
    let err =
        api.update(&target, "kubernetes", edited, None, &Write::by("ada", false)).unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    assert!(err.to_string().contains("loopback"), "{err}");
    let revision = api.store().current_revision();
    drop(api);

    // Opened again where it answered: nothing is written.
    let api = open("127.0.0.1:7443");
    assert_eq!(api.store().current_revision(), revision);
    drop(api);
    // Opened on another address: the three follow it, and keep what else they hold.
    let api = open("10.1.2.3:9443");
    assert!(api.store().current_revision() > revision);
    assert_eq!(in_default(&api, "", "services")["spec"]["ports"][0]["targetPort"], 9443);
    let endpoints = in_default(&api, "", "endpoints");
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "10.1.2.3");
    let slice = in_default(&api, "discovery.k8s.io", "endpointslices");
    assert_eq!(slice["endpoints"][0]["addresses"][0], "10.1.2.3");
    assert_eq!(slice["ports"][0]["port"], 9443);
    assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], "kubernetes");
}
