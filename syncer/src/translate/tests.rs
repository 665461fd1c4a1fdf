//! The translations, tested on sample objects.

use super::*;
use carrel_gpu::{GpuModel, Holder, Placement, Shape};

fn tenant_pod() -> Value {
    json!({
        "metadata": {
            "name": "train", "namespace": "ml", "uid": "u-1", "labels": {"app": "x"},
            "annotations": {
                "sim.carrel.dev/run-seconds": "2",
                "cdi.k8s.io/steal": "nvidia.com/gpu=all",
                "carrel.dev/tenant-uid": "forged",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
        },
        "spec": {
            "serviceAccountName": "trainer",
            "nodeName": "somewhere",
            "priorityClassName": "high",
            "containers": [{
                "name": "main", "image": "cuda",
                "resources": {"limits": {"nvidia.com/mig-1g.18gb": "1", "cpu": "2"}},
                "env": [
                    {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "envFrom": [{"secretRef": {"name": "creds"}}],
            }],
            "volumes": [
                {"name": "data", "configMap": {"name": "data"}},
                {"name": "p", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "t"}},
                    {"secret": {"name": "tls"}},
                ]}},
            ],
            "imagePullSecrets": [{"name": "pull"}],
        }
    })
}

fn claim() -> Claim {
    Claim {
        node: "gpu-node-1".into(),
        gpu_uuid: "GPU-1".into(),
        model: GpuModel::H200_141GB,
        shape: Shape::G1,
        placement: Placement { start: 3, size: 1 },
        instance_uuid: "MIG-abc".into(),
        holder: Holder { tenant: "t".into(), namespace: "ml".into(), pod: "train".into() },
        host_namespace: "carrel-t".into(),
        host_pod: "train-x-ml".into(),
    }
}

#[test]
fn references_the_host_cannot_have_are_named() {
    let p = json!({"spec": {"volumes": [
        {"name": "cfg", "configMap": {"name": "c"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
        {"name": "g", "glusterfs": {"endpoints": "gl", "path": "p"}},
        {"name": "scratch", "emptyDir": {}},
    ]}});
    assert_eq!(unsynced_references(&p), ["spec.volumes[2].glusterfs.endpoints: Endpoints \"gl\""]);
    assert_eq!(pod_claims(&p), BTreeSet::from(["d".to_owned()]));
}

/// Every ConfigMap and Secret reference of every volume source type names the tenant's host
/// copy, and the object is copied: `admin-kubeconfig` in a tenant pod is the tenant's own.
#[test]
fn every_volume_reference_names_the_tenants_copy() {
    for (table, projected) in
        [(pod_refs::VOLUME_REFERENCES, false), (pod_refs::PROJECTED_REFERENCES, true)]
    {
        for r in table.iter().filter(|r| !matches!(r.referent, Referent::Unsynced(_))) {
            let segments: Vec<&str> = r.pointer.trim_start_matches('/').split('/').collect();
            let mut source = json!({});
            let mut at = &mut source;
            for s in &segments[..segments.len() - 1] {
                at = &mut at[*s];
            }
            at[segments[segments.len() - 1]] = json!("admin-kubeconfig");
            let volume = if projected {
                json!({"name": "v", "projected": {"sources": [{r.source: source}]}})
            } else {
                json!({"name": "v", r.source: source})
            };
            let p = json!({"metadata": {"name": "p", "namespace": "ml"}, "spec": {
                "containers": [{"name": "c", "image": "x"}], "volumes": [volume]}});
            let refs = references(&p);
            let claims = pod_claims(&p);
            let copied = match r.referent {
                Referent::ConfigMap => &refs.config_maps,
                Referent::PersistentVolumeClaim => &claims,
                _ => &refs.secrets,
            };
            assert_eq!(copied, &BTreeSet::from(["admin-kubeconfig".to_owned()]), "{r:?}");
            let h = host_pod("t", "carrel-t", &p, &[], None, &EnvSources::default(), &[]);
            let v = &h["spec"]["volumes"][0];
            let at = if projected { &v["projected"]["sources"][0] } else { v };
            let pointer = format!("/{}{}", r.source, r.pointer);
            assert_eq!(
                at.pointer(&pointer),
                Some(&json!(host_names::host_name("ml", "admin-kubeconfig"))),
                "{r:?}: {h}"
            );
        }
    }
}

#[test]
fn env_from_becomes_explicit_allowed_entries() {
    let p = json!({"metadata": {"name": "p", "namespace": "ml"}, "spec": {
        "initContainers": [{"name": "side", "image": "x", "restartPolicy": "Always",
            "envFrom": [{"configMapRef": {"name": "cfg"}}]}],
        "containers": [{"name": "c", "image": "x",
            "envFrom": [
                {"configMapRef": {"name": "cfg"}},
                {"prefix": "S_", "secretRef": {"name": "sec", "optional": true}},
                {"configMapRef": {"name": "gone", "optional": true}},
            ],
            "env": [{"name": "A", "value": "own"}]}],
        "ephemeralContainers": [{"name": "debug", "image": "x", "env": [{"name": "LD_PRELOAD", "value": "x"}]}],
    }});
    let mut sources = EnvSources::default();
    sources.insert(&json!({"kind": "ConfigMap", "metadata": {"name": "cfg"},
        "data": {"A": "1", "LD_PRELOAD": "/x.so", "LD_AUDIT": "/a.so", "NVIDIA_VISIBLE_DEVICES": "all", "B": "2"}}));
    sources.insert(&json!({"kind": "Secret", "metadata": {"name": "sec"}, "data": {"K": "eA=="}}));
    assert!(missing_env_sources(&p, &sources).is_empty());
    let h = host_pod("t", "carrel-t", &p, &[], None, &sources, &[]);
    let cfg = host_names::host_name("ml", "cfg");
    let sec = host_names::host_name("ml", "sec");
    let c = &h["spec"]["containers"][0];
    assert!(c.get("envFrom").is_none(), "{c}");
    assert_eq!(
        c["env"],
        json!([
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": cfg, "key": "A"}}},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": cfg, "key": "B"}}},
            {"name": "S_K", "valueFrom": {"secretKeyRef": {"name": sec, "key": "K", "optional": true}}},
            {"name": "A", "value": "own"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        ])
    );
    let side = &h["spec"]["initContainers"][0];
    assert!(side.get("envFrom").is_none(), "{side}");
    assert_eq!(side["env"].as_array().map(Vec::len), Some(3), "{side}");
    assert_eq!(side["env"][2], json!({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}));
    // Ephemeral containers never reach the host.
    assert!(h["spec"].get("ephemeralContainers").is_none());
    let text = h.to_string();
    assert!(!text.contains("LD_") && !text.contains("\"all\""), "{text}");
    // A source that must exist and does not holds the host pod back.
    let mut q = p.clone();
    q["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "later"}}, {"secretRef": {"name": "sec"}}]);
    assert_eq!(missing_env_sources(&q, &sources), ["ConfigMap \"later\""]);
}

#[test]
fn only_allowed_annotations_reach_the_host() {
    for key in [
        "io.kubernetes.cri-o.Devices",
        "io.kubernetes.cri-o.userns-mode",
        "io.containerd.cri.runtime-handler",
        "cdi.k8s.io/steal",
        "container.apparmor.security.beta.kubernetes.io/c",
        "seccomp.security.alpha.kubernetes.io/pod",
        "nvidia.com/gpu.present",
        "sidecar.istio.io/inject",
        "carrel.dev/tenant-uid",
        "kubectl.kubernetes.io/last-applied-configuration",
    ] {
        assert!(!host_annotation_allowed(key), "{key}");
    }
    for key in
        ["description", "sim.carrel.dev/run-seconds", "kubectl.kubernetes.io/default-container"]
    {
        assert!(host_annotation_allowed(key), "{key}");
    }
    let mut p = tenant_pod();
    p["metadata"]["annotations"]["io.kubernetes.cri-o.Devices"] = json!("/dev/nvidia0");
    p["metadata"]["annotations"]["note"] = json!("kept");
    let h = host_pod("t", "carrel-t", &p, &[claim()], None, &EnvSources::default(), &[]);
    let a = h["metadata"]["annotations"].as_object().expect("annotations");
    assert!(a.get("io.kubernetes.cri-o.Devices").is_none());
    assert_eq!(a["note"], "kept");
    assert_eq!(a["cdi.k8s.io/carrel-gpu"], "nvidia.com/gpu=MIG-abc");
}

#[test]
fn hostnames_are_dns_labels() {
    assert_eq!(hostname_of("train"), "train");
    assert_eq!(hostname_of("web.v2"), "web");
    let long = format!("{}-{}", "a".repeat(62), "b");
    assert_eq!(hostname_of(&long), "a".repeat(62));
}

#[test]
fn fields_only_the_tenant_has_are_named() {
    let p = json!({"spec": {
        "priorityClassName": "high", "schedulerName": "default-scheduler", "priority": 0,
        "runtimeClassName": "gvisor", "readinessGates": [], "dnsPolicy": "ClusterFirst",
    }});
    assert_eq!(tenant_only_fields(&p), ["priorityClassName", "runtimeClassName"]);
    let h = host_pod(
        "t",
        "carrel-t",
        &json!({"metadata": {"name": "p", "namespace": "d"}, "spec": p["spec"]}),
        &[],
        None,
        &EnvSources::default(),
        &[],
    );
    assert!(
        h["spec"].get("priorityClassName").is_none() && h["spec"].get("runtimeClassName").is_none()
    );
    assert_eq!(h["spec"]["dnsPolicy"], "ClusterFirst");
}

#[test]
fn references_are_found_everywhere() {
    let r = references(&tenant_pod());
    assert_eq!(r.config_maps, BTreeSet::from(["cfg".into(), "data".into()]));
    assert_eq!(r.secrets, BTreeSet::from(["creds".into(), "pull".into(), "tls".into()]));
}

#[test]
fn the_host_pod_is_pinned_renamed_and_carries_no_host_token() {
    let h = host_pod(
        "t",
        "carrel-t",
        &tenant_pod(),
        &[claim()],
        Some("train-x-ml-token"),
        &EnvSources::default(),
        &[],
    );
    assert_eq!(h["metadata"]["name"], "train-x-ml");
    assert_eq!(h["metadata"]["namespace"], "carrel-t");
    assert_eq!(h["metadata"]["labels"]["carrel.dev/tenant"], "t");
    // The tenant pod's labels come along under Carrel's domain, with its namespace.
    assert_eq!(h["metadata"]["labels"]["label.carrel.dev/app"], "x");
    assert_eq!(h["metadata"]["labels"]["carrel.dev/tenant-namespace"], "ml");
    assert!(h["metadata"]["labels"].get("app").is_none());
    assert_eq!(h["metadata"]["annotations"]["carrel.dev/tenant-uid"], "u-1");
    assert_eq!(h["metadata"]["annotations"]["cdi.k8s.io/carrel-gpu"], "nvidia.com/gpu=MIG-abc");
    // The tenant's own annotations come along, but none that injects devices or forges ours.
    assert_eq!(h["metadata"]["annotations"]["sim.carrel.dev/run-seconds"], "2");
    assert!(h["metadata"]["annotations"].get("cdi.k8s.io/steal").is_none());
    assert!(h["metadata"]["annotations"]
        .get("kubectl.kubernetes.io/last-applied-configuration")
        .is_none());
    let spec = &h["spec"];
    assert_eq!(spec["nodeName"], "gpu-node-1");
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert!(spec.get("serviceAccountName").is_none());
    assert!(spec.get("priorityClassName").is_none());
    let c = &spec["containers"][0];
    assert_eq!(c["resources"]["limits"], json!({"cpu": "2"}));
    assert_eq!(c["env"][0]["valueFrom"]["configMapKeyRef"]["name"], "cfg-x-ml");
    assert_eq!(c["env"][1], json!({"name": "POD", "value": "train"}));
    assert_eq!(c["env"][2]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    // envFrom never reaches the host (its expansion: `env_from_becomes_explicit_allowed_entries`).
    assert!(c.get("envFrom").is_none(), "{c}");
    assert_eq!(c["volumeMounts"][0]["mountPath"], TOKEN_MOUNT);
    assert_eq!(spec["volumes"][0]["configMap"]["name"], "data-x-ml");
    assert_eq!(
        spec["volumes"][1]["projected"]["sources"],
        json!([{"secret": {"name": "tls-x-ml"}}])
    );
    assert_eq!(spec["volumes"][2]["secret"]["secretName"], "train-x-ml-token");
    assert_eq!(spec["imagePullSecrets"][0]["name"], "pull-x-ml");
    let text = h.to_string();
    assert!(!text.contains("serviceAccountToken"), "{text}");
}

#[test]
fn downward_api_files_show_the_tenant_pod() {
    let mut pod = tenant_pod();
    let items = json!([
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
        {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}},
    ]);
    pod["spec"]["containers"][0]["env"] = json!([
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
    ]);
    pod["spec"]["volumes"] = json!([
        {"name": "info", "downwardAPI": {"items": items}},
        {"name": "p", "projected": {"sources": [{"downwardAPI": {"items": items}}]}},
    ]);
    let h = host_pod("t", "carrel-t", &pod, &[], None, &EnvSources::default(), &[]);
    let want = json!([
        {"path": "name", "fieldRef": {"fieldPath": "metadata.annotations['carrel.dev/tenant-name']"}},
        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.annotations['carrel.dev/tenant-namespace']"}},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.annotations['carrel.dev/tenant-uid']"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        // One label is read from where the host pod carries it.
        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['label.carrel.dev/app']"}},
        {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}},
    ]);
    let env = h["spec"]["containers"][0]["env"].as_array().cloned().unwrap_or_default();
    let app = env.iter().find(|e| e["name"] == "APP").expect("APP");
    assert_eq!(
        app["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.labels['label.carrel.dev/app']"
    );
    assert_eq!(h["spec"]["volumes"][0]["downwardAPI"]["items"], want);
    assert_eq!(h["spec"]["volumes"][1]["projected"]["sources"][0]["downwardAPI"]["items"], want);
    // And those annotations hold the tenant pod's values.
    let annotations = &h["metadata"]["annotations"];
    assert_eq!(annotations["carrel.dev/tenant-name"], "train");
    assert_eq!(annotations["carrel.dev/tenant-namespace"], "ml");
    assert_eq!(annotations["carrel.dev/tenant-uid"], "u-1");
}

#[test]
fn without_claims_the_host_schedules_and_opting_out_of_the_token_is_kept() {
    let mut p = tenant_pod();
    p["spec"]["automountServiceAccountToken"] = json!(false);
    let h = host_pod("t", "carrel-t", &p, &[], Some("s"), &EnvSources::default(), &[]);
    assert!(h["spec"].get("nodeName").is_none());
    assert!(h["spec"].as_object().expect("spec").values().all(|v| !v.is_null()), "{h}");
    assert!(h["metadata"]["annotations"].get("cdi.k8s.io/carrel-gpu").is_none());
    assert!(h["spec"]["containers"][0].get("volumeMounts").is_none());
    let bare = json!({"metadata": {"name": "b", "namespace": "d"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let h = host_pod("t", "carrel-t", &bare, &[], Some("b-x-d-token"), &EnvSources::default(), &[]);
    assert_eq!(h["spec"]["volumes"][0]["secret"]["secretName"], "b-x-d-token", "{h}");
    assert!(h["spec"].get("initContainers").is_none(), "{h}");
}

#[test]
fn status_goes_back_and_virtual_nodes_show_only_the_quota() {
    let host =
        json!({"status": {"phase": "Running", "podIP": "10.0.0.5", "nominatedNodeName": "x"}});
    assert_eq!(tenant_status(&host), json!({"phase": "Running", "podIP": "10.0.0.5"}));
    let node = json!({
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "secret-host-label": "x"}},
        "status": {"allocatable": {"cpu": "64", "nvidia.com/mig-1g.18gb": "56"}, "conditions": [{"type": "Ready", "status": "True"}]}
    });
    let quota = BTreeMap::from([("1g.18gb".to_owned(), 2)]);
    let v = virtual_node(&node, &quota, false);
    assert_eq!(v["status"]["allocatable"]["nvidia.com/mig-1g.18gb"], "2");
    assert_eq!(v["status"]["allocatable"]["cpu"], "64");
    assert!(v["metadata"]["labels"].get("secret-host-label").is_none());
    assert_eq!(v["status"]["conditions"][0]["status"], "True");
}

#[test]
fn virtual_nodes_show_cordon_taints_and_addresses() {
    let node = json!({
        "metadata": {"name": "n1"},
        "spec": {"unschedulable": true, "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.1.1"}],
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}],
        },
    });
    let v = virtual_node(&node, &BTreeMap::new(), false);
    assert_eq!(v["spec"]["unschedulable"], true);
    assert_eq!(v["spec"]["taints"][0]["key"], "nvidia.com/gpu");
    assert_eq!(
        v["spec"]["taints"][1],
        json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    );
    // The host's cordon, not the tenant's.
    assert_eq!(v["metadata"]["annotations"]["carrel.dev/host-unschedulable"], "true");
    assert!(!tenant_cordoned(&v));
    assert_eq!(v["status"]["addresses"][0]["address"], "10.0.1.1");
    // A heartbeat alone changes nothing a tenant is shown.
    let mut later = node.clone();
    later["status"]["conditions"][0]["lastHeartbeatTime"] = json!("t2");
    let w = virtual_node(&later, &BTreeMap::new(), false);
    assert_ne!(v, w);
    assert_eq!(virtual_node_shown(&v), virtual_node_shown(&w));
    let bare = virtual_node(&json!({"metadata": {"name": "n2"}}), &BTreeMap::new(), false);
    assert_eq!(bare["spec"], json!({}));
}

#[test]
fn a_tenant_cordon_is_the_tenants_whatever_the_host_does() {
    let host = json!({"metadata": {"name": "n1"}, "spec": {}});
    let v = virtual_node(&host, &BTreeMap::new(), true);
    assert_eq!(v["spec"]["unschedulable"], true);
    assert_eq!(
        v["spec"]["taints"],
        json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
    );
    assert_eq!(v["metadata"]["annotations"], json!({}));
    assert!(tenant_cordoned(&v), "read back as the tenant's own");
    // Cordoned on the host too: one taint, and the cordon reads as the host's.
    let cordoned = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true,
        "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}});
    let both = virtual_node(&cordoned, &BTreeMap::new(), true);
    assert_eq!(both["spec"]["taints"].as_array().map(Vec::len), Some(1));
    assert!(!tenant_cordoned(&both));
    // As kubectl leaves a node it cordoned, and uncordoned.
    assert!(tenant_cordoned(&json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}})));
    assert!(!tenant_cordoned(
        &json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": false}})
    ));
    assert!(!tenant_cordoned(&json!({"metadata": {"name": "n1"}, "spec": {}})));
}

#[test]
fn pods_are_kept_off_the_tenants_cordoned_nodes_unless_they_tolerate_it() {
    let off = BTreeSet::from(["n1".to_owned(), "n2".to_owned()]);
    let not_in = json!({"key": "metadata.name", "operator": "NotIn", "values": ["n1", "n2"]});
    // No affinity: a term of its own.
    let mut bare = json!({"spec": {"containers": []}});
    keep_off_nodes(&mut bare, &off);
    assert_eq!(
        bare["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!({"nodeSelectorTerms": [{"matchFields": [not_in]}]})
    );
    // Terms are ORed: each one excludes them, and keeps what it asked.
    let mut ors = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n3"]}]},
    ]}}}}});
    keep_off_nodes(&mut ors, &off);
    let terms = &ors["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert_eq!(terms[0]["matchExpressions"][0]["key"], "zone");
    assert_eq!(terms[0]["matchFields"], json!([not_in]));
    assert_eq!(terms[1]["matchFields"][1], not_in);
    // Bound already, or nothing cordoned: untouched.
    let mut bound = json!({"spec": {"nodeName": "n1"}});
    keep_off_nodes(&mut bound, &off);
    assert_eq!(bound, json!({"spec": {"nodeName": "n1"}}));
    let mut free = json!({"spec": {}});
    keep_off_nodes(&mut free, &BTreeSet::new());
    assert_eq!(free, json!({"spec": {}}));
    // DaemonSet pods tolerate the cordon; a toleration of another taint does not.
    let ds = json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}});
    assert!(tolerates_cordon(&ds));
    assert!(tolerates_cordon(&json!({"spec": {"tolerations": [{"operator": "Exists"}]}})));
    let other = json!({"spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}});
    assert!(!tolerates_cordon(&other));
    assert!(!tolerates_cordon(&json!({"spec": {}})));
}

#[test]
fn a_merge_patch_changes_what_changed_and_removes_what_went() {
    let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2], "f": "x"});
    let new = json!({"a": 1, "b": {"c": 2, "d": 4}, "e": [1], "g": true});
    let patch = merge_patch(&old, &new);
    assert_eq!(patch, json!({"b": {"d": 4}, "e": [1], "f": null, "g": true}));
    assert_eq!(merge_patch(&new, &new), json!({}));
    // Applying it to the old value gives the new one.
    let mut applied = old.clone();
    json_patch::merge(&mut applied, &patch);
    assert_eq!(applied, new);
}

#[test]
fn host_names_in_messages_read_as_the_tenant_pods() {
    let host = ("carrel-team-a", "train-x-ml", "h-uid");
    let tenant = ("ml", "train", "t-uid");
    assert_eq!(
        tenant_words("Successfully assigned carrel-team-a/train-x-ml to n1", host, tenant),
        "Successfully assigned ml/train to n1"
    );
    assert_eq!(
        tenant_words(
            "Back-off restarting failed container main in pod train-x-ml_carrel-team-a(h-uid)",
            host,
            tenant
        ),
        "Back-off restarting failed container main in pod train_ml(t-uid)"
    );
    assert_eq!(tenant_words("Started container main", host, tenant), "Started container main");
    let mut status = json!({"containerStatuses": [{"state": {"waiting": {
        "message": "back-off 10s restarting failed container=main pod=train-x-ml_carrel-team-a(h-uid)"}}}],
        "phase": "Running", "restartCount": 2});
    in_tenant_words(&mut status, host, tenant);
    assert_eq!(
        status["containerStatuses"][0]["state"]["waiting"]["message"],
        "back-off 10s restarting failed container=main pod=train_ml(t-uid)"
    );
    assert_eq!(status["restartCount"], 2);
}

#[test]
fn only_tolerations_the_admin_allows_reach_the_host() {
    let mut p = tenant_pod();
    p["spec"]["tolerations"] = json!([
        {"operator": "Exists"},
        {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"},
        {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule", "tolerationSeconds": 5},
    ]);
    let allowed = [Toleration {
        key: "team".into(),
        operator: "Equal".into(),
        value: "a".into(),
        effect: "NoSchedule".into(),
    }];
    assert_eq!(tenant_tolerations(&p, &allowed), [p["spec"]["tolerations"][2].clone()]);
    assert!(tenant_tolerations(&p, &[]).is_empty());
    let h = host_pod("t", "carrel-t", &p, &[claim()], None, &EnvSources::default(), &allowed);
    assert_eq!(h["spec"]["tolerations"], json!([p["spec"]["tolerations"][2]]));
    // None of the tenant's that the admin did not allow.
    let h = host_pod("t", "carrel-t", &p, &[], None, &EnvSources::default(), &[]);
    assert!(h["spec"].get("tolerations").is_none(), "{h}");
}

#[test]
fn host_pods_resolve_through_their_tenants_dns_and_never_the_hosts() {
    let pod = |spec: Value| json!({"metadata": {"name": "p", "namespace": "ml"}, "spec": spec});
    let dns = |spec: Value, nameserver: Option<&str>| {
        let mut host = pod(spec);
        point_dns_at(&mut host, "ml", "cluster.local", nameserver);
        host["spec"].clone()
    };
    let search = json!(["ml.svc.cluster.local", "svc.cluster.local", "cluster.local"]);
    // The default policy, and ClusterFirstWithHostNet, go to the tenant's resolver.
    for spec in [json!({}), json!({"dnsPolicy": "ClusterFirstWithHostNet"})] {
        let got = dns(spec, Some("10.96.0.10"));
        assert_eq!(got["dnsPolicy"], "None");
        assert_eq!(got["dnsConfig"]["nameservers"], json!(["10.96.0.10"]));
        assert_eq!(got["dnsConfig"]["searches"], search);
        assert_eq!(got["dnsConfig"]["options"], json!([{"name": "ndots", "value": "5"}]));
    }
    // The pod's own dnsConfig is merged in as the kubelet merges it.
    let own = json!({"dnsConfig": {
        "nameservers": ["1.1.1.1", "10.96.0.10"],
        "searches": ["corp.example", "svc.cluster.local"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
    }});
    let got = dns(own, Some("10.96.0.10"));
    assert_eq!(got["dnsConfig"]["nameservers"], json!(["10.96.0.10", "1.1.1.1"]));
    assert_eq!(
        got["dnsConfig"]["searches"],
        json!(["ml.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"])
    );
    assert_eq!(
        got["dnsConfig"]["options"],
        json!([{"name": "ndots", "value": "2"}, {"name": "edns0"}])
    );
    // Without the tenant's DNS Service, the node's resolver: never the host cluster's DNS.
    let got = dns(json!({"dnsConfig": {"searches": ["corp.example"]}}), None);
    assert_eq!(got["dnsPolicy"], "Default");
    assert_eq!(got["dnsConfig"]["searches"], json!(["corp.example"]));
    // Policies that do not use the cluster's DNS are the pod's own.
    for policy in ["Default", "None"] {
        let spec = json!({"dnsPolicy": policy, "dnsConfig": {"nameservers": ["9.9.9.9"]}});
        assert_eq!(dns(spec.clone(), Some("10.96.0.10")), spec, "{policy}");
    }
}

#[test]
fn an_ephemeral_container_reaches_the_host_as_its_pods_containers_do() {
    let mut pod = tenant_pod();
    let host =
        host_pod("t", "carrel-t", &pod, &[claim()], Some("tok"), &EnvSources::default(), &[]);
    pod["spec"]["ephemeralContainers"] = json!([{
        "name": "debugger", "image": "busybox", "targetContainerName": "main",
        "env": [
            {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
    }]);
    let added = new_host_ephemeral_containers(&pod, &host, &EnvSources::default());
    assert_eq!(added.len(), 1);
    let c = &added[0];
    assert_eq!(c["targetContainerName"], "main");
    assert_eq!(c["env"][0]["valueFrom"]["configMapKeyRef"]["name"], "cfg-x-ml");
    assert_eq!(c["env"][1], json!({"name": "POD", "value": "train"}));
    // Whatever it sets, the last word on the GPU runtime's devices is Carrel's.
    let env = c["env"].as_array().expect("env");
    assert_eq!(env.last(), Some(&json!({"name": VISIBLE_DEVICES.0, "value": VISIBLE_DEVICES.1})));
    // The host pod mounts the tenant's token in its containers: the debugger gets it too.
    assert_eq!(c["volumeMounts"][0]["mountPath"], TOKEN_MOUNT);

    // One the host pod has already is not added again.
    let mut debugged = host.clone();
    debugged["spec"]["ephemeralContainers"] = json!(added);
    assert!(new_host_ephemeral_containers(&pod, &debugged, &EnvSources::default()).is_empty());
    // Without the token on the host pod, none is mounted.
    let untokened = host_pod("t", "carrel-t", &pod, &[], None, &EnvSources::default(), &[]);
    let added = new_host_ephemeral_containers(&pod, &untokened, &EnvSources::default());
    assert!(added[0].get("volumeMounts").is_none(), "{}", added[0]);
}

#[test]
fn workloads_are_pointed_at_their_tenant_api() {
    let mut host = host_pod("t", "carrel-t", &tenant_pod(), &[], None, &EnvSources::default(), &[]);
    let own = json!({"name": "KUBERNETES_SERVICE_HOST", "value": "mine"});
    host["spec"]["initContainers"] = json!([{"name": "init", "image": "x", "env": [own]}]);
    point_api_at(&mut host, Some(("10.0.0.7", 6443)));
    let env = |c: &Value| -> Vec<(String, String)> {
        c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
            .collect()
    };
    let main = env(&host["spec"]["containers"][0]);
    for (name, value) in [
        ("KUBERNETES_SERVICE_HOST", "10.0.0.7"),
        ("KUBERNETES_SERVICE_PORT", "6443"),
        ("KUBERNETES_PORT", "tcp://10.0.0.7:6443"),
        ("KUBERNETES_PORT_443_TCP", "tcp://10.0.0.7:6443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.7"),
        ("KUBERNETES_PORT_443_TCP_PORT", "6443"),
    ] {
        assert!(main.contains(&(name.to_owned(), value.to_owned())), "{name}: {main:?}");
    }
    // Ahead of the container's own variables (the pod's env, then Carrel's last word).
    assert_eq!(main[0].0, "KUBERNETES_SERVICE_HOST");
    assert_eq!(main.last().map(|e| e.0.as_str()), Some(VISIBLE_DEVICES.0));
    // A container's own value comes later, and wins, as it wins over the kubelet's.
    let init = env(&host["spec"]["initContainers"][0]);
    let hosts: Vec<&str> =
        init.iter().filter(|e| e.0 == "KUBERNETES_SERVICE_HOST").map(|e| e.1.as_str()).collect();
    assert_eq!(hosts, ["10.0.0.7", "mine"]);
    // Without an address, nothing is added.
    let mut untouched =
        host_pod("t", "carrel-t", &tenant_pod(), &[], None, &EnvSources::default(), &[]);
    let before = untouched.clone();
    point_api_at(&mut untouched, None);
    assert_eq!(untouched, before);
}
