use serde_json::json;

use super::*;

const NOW: i64 = 1_700_000_000;

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).expect(v))).collect()
}

/// The usage printed as `name=value,…`, for compact expectations.
fn shown(usage: &ResourceList) -> String {
    pretty_print(usage)
}

fn container(name: &str, requests: Value, limits: Value) -> Value {
    json!({"name": name, "image": "x", "resources": {"requests": requests, "limits": limits}})
}

fn pod(name: &str, containers: Vec<Value>) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": containers}})
}

fn quota(name: &str, hard: &[(&str, &str)]) -> Quota {
    Quota { name: name.into(), hard: list(hard), scopes: Vec::new() }
}

#[test]
fn a_pods_usage_is_its_effective_requests_and_limits() {
    let p = json!({"metadata": {"name": "p"}, "spec": {
        "initContainers": [
            {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
            {"name": "side", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}},
        ],
        "containers": [
            container("a", json!({"cpu": "500m", "memory": "1Gi", "nvidia.com/mig-1g.18gb": "1",
                                  "hugepages-2Mi": "4Mi"}),
                      json!({"cpu": "1", "nvidia.com/mig-1g.18gb": "1"})),
            container("b", json!({"cpu": "250m", "memory": "512Mi"}), json!({"memory": "1Gi"})),
        ],
        "overhead": {"cpu": "10m"},
    }});
    assert_eq!(
        shown(&Evaluator::Pods.usage(&p, NOW)),
        // cpu: the init container's 2 is more than the containers' and the sidecar's 850m;
        // the overhead comes on top.
        "count/pods=1,cpu=2010m,hugepages-2Mi=4Mi,limits.cpu=1210m,limits.memory=1Gi,\
         memory=1536Mi,pods=1,requests.cpu=2010m,requests.hugepages-2Mi=4Mi,\
         requests.memory=1536Mi,requests.nvidia.com/mig-1g.18gb=1"
    );
}

#[test]
fn finished_and_long_deleted_pods_count_only_as_objects() {
    let running = pod("p", vec![container("c", json!({"cpu": "1"}), json!({}))]);
    let mut done = running.clone();
    done["status"] = json!({"phase": "Succeeded"});
    let mut failed = running.clone();
    failed["status"] = json!({"phase": "Failed"});
    let mut gone = running.clone();
    gone["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:00Z"); // NOW - 20 s
    gone["metadata"]["deletionGracePeriodSeconds"] = json!(10);
    let mut leaving = gone.clone();
    leaving["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    assert_eq!(unix_seconds("2023-11-14T22:13:00Z"), Some(NOW - 20));
    for (what, p, full) in [
        ("running", running, true),
        ("done", done, false),
        ("failed", failed, false),
        ("gone", gone, false),
        ("leaving", leaving, true),
    ] {
        let usage = Evaluator::Pods.usage(&p, NOW);
        assert_eq!(usage.get("count/pods"), Some(&Quantity::count(1)), "{what}");
        assert_eq!(usage.contains_key("pods"), full, "{what}");
        assert_eq!(usage.contains_key("requests.cpu"), full, "{what}");
    }
}

#[test]
fn scopes_take_in_the_pods_kubernetes_takes_in() {
    let best_effort = pod("a", vec![container("c", json!({}), json!({}))]);
    let mut burstable = pod("b", vec![container("c", json!({"memory": "1Gi"}), json!({}))]);
    burstable["spec"]["activeDeadlineSeconds"] = json!(60);
    burstable["spec"]["priorityClassName"] = json!("high");
    let exists = |scope: &str| ScopeRequirement {
        scope: scope.into(),
        operator: "Exists".into(),
        values: vec![],
    };
    let class = |operator: &str, values: &[&str]| ScopeRequirement {
        scope: "PriorityClass".into(),
        operator: operator.into(),
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    };
    // (requirement, takes in the best-effort pod, takes in the burstable one)
    let table = [
        (exists("Terminating"), false, true),
        (exists("NotTerminating"), true, false),
        (exists("BestEffort"), true, false),
        (exists("NotBestEffort"), false, true),
        (exists("PriorityClass"), false, true),
        (class("In", &["high", "low"]), false, true),
        (class("In", &["low"]), false, false),
        (class("NotIn", &["high"]), true, false),
        (class("NotIn", &["low"]), true, true),
        (class("DoesNotExist", &[]), true, false),
        (exists("CrossNamespacePodAffinity"), false, false),
        (exists("NoSuchScope"), false, false),
    ];
    for (requirement, a, b) in table {
        let got = (
            Evaluator::Pods.matches_scope(&requirement, &best_effort),
            Evaluator::Pods.matches_scope(&requirement, &burstable),
        );
        assert_eq!(got, (a, b), "{requirement:?}");
    }
    // Other kinds have no scopes: a scoped quota never counts them.
    let config_map = json!({"metadata": {"name": "c"}});
    let objects = Evaluator::of("", "configmaps").unwrap();
    assert!(!objects.matches_scope(&exists("NotTerminating"), &config_map));
    let mut scoped = quota("q", &[("count/configmaps", "1")]);
    assert!(objects.matches(&scoped, &config_map));
    scoped.scopes.push(exists("NotTerminating"));
    assert!(!objects.matches(&scoped, &config_map));
}

#[test]
fn a_quota_on_cpu_or_memory_makes_every_container_say_so() {
    let p = json!({"metadata": {"name": "p"}, "spec": {
        "initContainers": [container("init", json!({"cpu": "1"}), json!({"cpu": "1"}))],
        "containers": [
            container("b", json!({"cpu": "1"}), json!({})),
            container("a", json!({}), json!({})),
        ],
    }});
    let required: Vec<String> =
        ["limits.cpu", "memory", "pods", "requests.nvidia.com/gpu"].map(String::from).to_vec();
    assert_eq!(
        Evaluator::Pods.constraints(&required, &p),
        Err("must specify limits.cpu for: a,b; memory for: a,b,init".into())
    );
    assert_eq!(Evaluator::Pods.constraints(&["pods".into()], &p), Ok(()));
    let q = Quota { name: "compute".into(), hard: list(&[("limits.cpu", "4")]), scopes: vec![] };
    let refusal =
        admit(&[q], &Evaluator::Pods, &p, NOW, || Ok::<_, ()>(vec![])).unwrap().unwrap_err();
    assert_eq!(refusal.to_string(), "failed quota: compute: must specify limits.cpu for: a,b");
}

#[test]
fn services_and_claims_count_what_kubernetes_counts() {
    let service = |kind: &str, allocate: Value| {
        json!({"metadata": {"name": "s"}, "spec": {"type": kind,
            "allocateLoadBalancerNodePorts": allocate,
            "ports": [{"port": 80, "nodePort": 30080}, {"port": 443}]}})
    };
    let table = [
        ("ClusterIP", Value::Null, "0", "0"),
        ("NodePort", Value::Null, "0", "2"),
        ("LoadBalancer", Value::Null, "1", "2"),
        ("LoadBalancer", Value::Bool(false), "1", "1"),
    ];
    for (kind, allocate, balancers, node_ports) in table {
        let usage = Evaluator::Services.usage(&service(kind, allocate), NOW);
        assert_eq!(usage["services"], Quantity::count(1), "{kind}");
        assert_eq!(usage["count/services"], Quantity::count(1), "{kind}");
        assert_eq!(usage["services.loadbalancers"].to_string(), balancers, "{kind}");
        assert_eq!(usage["services.nodeports"].to_string(), node_ports, "{kind}");
    }
    let claim = json!({"metadata": {"name": "c"}, "spec": {"storageClassName": "gold",
        "resources": {"requests": {"storage": "1.5Gi"}}},
        "status": {"allocatedResources": {"storage": "2Gi"}}});
    assert_eq!(
        shown(&Evaluator::Claims.usage(&claim, NOW)),
        "count/persistentvolumeclaims=1,gold.storageclass.storage.k8s.io/persistentvolumeclaims=1,\
         gold.storageclass.storage.k8s.io/requests.storage=2Gi,persistentvolumeclaims=1,\
         requests.storage=2Gi"
    );
    let fractional = json!({"metadata": {"annotations": {BETA_STORAGE_CLASS: "old"}},
        "spec": {"storageClassName": "ignored", "resources": {"requests": {"storage": "1500m"}}}});
    let usage = Evaluator::Claims.usage(&fractional, NOW);
    assert_eq!(usage["requests.storage"].to_string(), "2", "rounded up to whole bytes");
    assert!(usage.contains_key("old.storageclass.storage.k8s.io/requests.storage"));
}

#[test]
fn each_evaluator_matches_its_own_resources() {
    let hard = [
        "pods",
        "count/pods",
        "cpu",
        "limits.memory",
        "requests.nvidia.com/gpu",
        "limits.nvidia.com/gpu",
        "nvidia.com/gpu",
        "requests.hugepages-2Mi",
        "services",
        "services.nodeports",
        "configmaps",
        "count/configmaps",
        "count/deployments.apps",
        "persistentvolumeclaims",
        "gold.storageclass.storage.k8s.io/requests.storage",
        "requests.storage",
    ];
    let names = || hard.iter().copied();
    assert_eq!(
        Evaluator::Pods.matching_resources(names()),
        [
            "count/pods",
            "cpu",
            "limits.memory",
            "pods",
            "requests.hugepages-2Mi",
            "requests.nvidia.com/gpu"
        ]
    );
    assert_eq!(Evaluator::Services.matching_resources(names()), ["services", "services.nodeports"]);
    assert_eq!(
        Evaluator::Claims.matching_resources(names()),
        [
            "gold.storageclass.storage.k8s.io/requests.storage",
            "persistentvolumeclaims",
            "requests.storage"
        ]
    );
    let config_maps = Evaluator::of("", "configmaps").unwrap();
    assert_eq!(config_maps.matching_resources(names()), ["configmaps", "count/configmaps"]);
    let deployments = Evaluator::of("apps", "deployments").unwrap();
    assert_eq!(deployments.matching_resources(names()), ["count/deployments.apps"]);
    assert_eq!(Evaluator::of("", "events"), None, "events are never counted");
    assert_eq!(counted_type("count/deployments.apps"), Some(("apps", "deployments")));
    assert_eq!(counted_type("count/widgets.example.com"), Some(("example.com", "widgets")));
    assert_eq!(counted_type("count/secrets"), Some(("", "secrets")));
    let hard: ResourceList = hard.iter().map(|n| ((*n).to_owned(), Quantity::count(1))).collect();
    assert_eq!(
        evaluators_for(&hard),
        [Evaluator::Pods, Evaluator::Services, Evaluator::Claims, config_maps, deployments]
    );
}

#[test]
fn a_create_over_a_quota_is_refused_in_kube_apiservers_words() {
    let gpu_pod = |name: &str| {
        pod(
            name,
            vec![container(
                "c",
                json!({"nvidia.com/mig-1g.18gb": "1"}),
                json!({"nvidia.com/mig-1g.18gb": "1"}),
            )],
        )
    };
    let q = quota(
        "q",
        &[("pods", "2"), ("count/configmaps", "3"), ("requests.nvidia.com/mig-1g.18gb", "1")],
    );
    let quotas = [q];
    let stored = vec![gpu_pod("a")];
    let refusal =
        admit(&quotas, &Evaluator::Pods, &gpu_pod("b"), NOW, || Ok::<_, ()>(stored.clone()))
            .unwrap()
            .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "exceeded quota: q, requested: requests.nvidia.com/mig-1g.18gb=1, \
         used: requests.nvidia.com/mig-1g.18gb=1, limited: requests.nvidia.com/mig-1g.18gb=1"
    );
    let plain = pod("b", vec![container("c", json!({}), json!({}))]);
    assert_eq!(
        admit(&quotas, &Evaluator::Pods, &plain, NOW, || Ok::<_, ()>(stored.clone())),
        Ok(Ok(()))
    );
    let two = vec![gpu_pod("a"), plain.clone()];
    let refusal =
        admit(&quotas, &Evaluator::Pods, &pod("c", vec![]), NOW, || Ok::<_, ()>(two.clone()))
            .unwrap()
            .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
    );
    // A finished pod frees its place.
    let mut finished = two.clone();
    finished[0]["status"] = json!({"phase": "Succeeded"});
    assert_eq!(
        admit(&quotas, &Evaluator::Pods, &pod("c", vec![]), NOW, || Ok::<_, ()>(finished)),
        Ok(Ok(()))
    );
}

#[test]
fn every_resource_over_the_limit_is_named_in_canonical_form() {
    let q =
        quota("compute", &[("requests.memory", "1.5Gi"), ("limits.cpu", "1000m"), ("pods", "10")]);
    let stored =
        vec![pod("a", vec![container("c", json!({"memory": "1Gi"}), json!({"cpu": "800m"}))])];
    let new = pod("b", vec![container("c", json!({"memory": "768Mi"}), json!({"cpu": "0.3"}))]);
    let refusal =
        admit(&[q], &Evaluator::Pods, &new, NOW, || Ok::<_, ()>(stored)).unwrap().unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "exceeded quota: compute, requested: limits.cpu=300m,requests.memory=768Mi, \
         used: limits.cpu=800m,requests.memory=1Gi, limited: limits.cpu=1,requests.memory=1536Mi"
    );
}

#[test]
fn only_quotas_that_count_an_object_are_consulted() {
    let listed = std::cell::Cell::new(false);
    let stored = || {
        listed.set(true);
        Ok::<_, ()>(vec![])
    };
    // A quota on services says nothing of pods, and the pods are not even listed.
    let services = quota("s", &[("services", "0")]);
    let p = pod("p", vec![]);
    assert_eq!(
        admit(std::slice::from_ref(&services), &Evaluator::Pods, &p, NOW, stored),
        Ok(Ok(()))
    );
    assert!(!listed.get());
    let svc = json!({"metadata": {"name": "x"}, "spec": {"ports": []}});
    let refusal = admit(&[services], &Evaluator::Services, &svc, NOW, || Ok::<_, ()>(vec![]))
        .unwrap()
        .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "exceeded quota: s, requested: services=1, used: services=0, limited: services=0"
    );
    // A scoped quota counts only the pods its scopes take in.
    let mut terminating = quota("t", &[("pods", "0")]);
    terminating.scopes.push(ScopeRequirement {
        scope: "Terminating".into(),
        operator: "Exists".into(),
        values: vec![],
    });
    assert_eq!(
        admit(&[terminating.clone()], &Evaluator::Pods, &p, NOW, || Ok::<_, ()>(vec![])),
        Ok(Ok(()))
    );
    let mut job_pod = p.clone();
    job_pod["spec"]["activeDeadlineSeconds"] = json!(30);
    assert!(admit(&[terminating], &Evaluator::Pods, &job_pod, NOW, || Ok::<_, ()>(vec![]))
        .unwrap()
        .is_err());
    // The second quota refuses what the first allows.
    let roomy = quota("a-roomy", &[("pods", "5")]);
    let tight = quota("b-tight", &[("pods", "1")]);
    let refusal =
        admit(&[roomy, tight], &Evaluator::Pods, &p, NOW, || Ok::<_, ()>(vec![pod("o", vec![])]))
            .unwrap()
            .unwrap_err();
    assert!(refusal.to_string().starts_with("exceeded quota: b-tight,"), "{refusal}");
}

#[test]
fn a_namespaces_usage_names_every_resource_the_quota_limits() {
    let q = Quota::from_object(&json!({
        "metadata": {"name": "q"},
        "spec": {"hard": {"pods": "5", "requests.cpu": "2", "count/configmaps": "3",
                          "count/deployments.apps": "1", "count/widgets.example.com": "1",
                          "services.loadbalancers": "1"}},
    }));
    let pods = vec![
        pod("a", vec![container("c", json!({"cpu": "500m"}), json!({}))]),
        pod("b", vec![container("c", json!({}), json!({}))]),
    ];
    let listed = vec![
        (Evaluator::Pods, pods),
        (Evaluator::Services, vec![]),
        (Evaluator::of("", "configmaps").unwrap(), vec![json!({}), json!({})]),
        (Evaluator::of("apps", "deployments").unwrap(), vec![json!({})]),
    ];
    assert_eq!(
        shown(&calculate_usage(&q, &listed, NOW)),
        "count/configmaps=2,count/deployments.apps=1,pods=2,requests.cpu=500m,services.loadbalancers=0"
    );
}

#[test]
fn quotas_read_their_scopes_and_selector() {
    let q = Quota::from_object(&json!({
        "metadata": {"name": "q"},
        "spec": {"hard": {"pods": 3}, "scopes": ["BestEffort"],
                 "scopeSelector": {"matchExpressions": [
                     {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}},
    }));
    assert_eq!(q.name, "q");
    assert_eq!(q.hard["pods"], Quantity::count(3));
    assert_eq!(q.scopes.len(), 2);
    assert_eq!(q.scopes[0].operator, "Exists");
    assert_eq!(q.scopes[1].values, ["high"]);
    assert_eq!(to_json(&list(&[("memory", "1.5Gi")])), json!({"memory": "1536Mi"}));
}

#[test]
fn times_read_as_unix_seconds() {
    assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(unix_seconds("2000-03-01T00:00:00Z"), Some(951_868_800));
    assert_eq!(unix_seconds("2000-03-01T01:00:00.123+01:00"), Some(951_868_800));
    assert_eq!(unix_seconds("not a time"), None);
}
