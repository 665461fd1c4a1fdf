//! The Pod Security Standards checks against pods that break each rule, and the messages they give.

use super::*;
use serde_json::json;

fn pod(spec: Value) -> Value {
    json!({"metadata": {"name": "p"}, "spec": spec})
}

fn checks(level: Level, p: &Value) -> Vec<&'static str> {
    check(level, p).into_iter().map(|v| v.check).collect()
}

fn restricted_container(name: &str) -> Value {
    json!({
        "name": name, "image": "busybox",
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"},
            "capabilities": {"drop": ["ALL"]},
        }
    })
}

#[test]
fn a_plain_pod_passes_baseline_but_not_restricted() {
    let p = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
    assert!(check(Level::Baseline, &p).is_empty());
    assert_eq!(
        checks(Level::Restricted, &p),
        [
            "allowPrivilegeEscalation != false",
            "runAsNonRoot != true",
            "seccompProfile",
            "unrestricted capabilities"
        ]
    );
    let hardened = pod(json!({"containers": [restricted_container("c")]}));
    assert!(
        check(Level::Restricted, &hardened).is_empty(),
        "{:?}",
        check(Level::Restricted, &hardened)
    );
}

#[test]
fn baseline_refuses_what_kube_refuses_in_its_words() {
    let p = pod(json!({
        "hostNetwork": true, "hostPID": true,
        "containers": [
            {"name": "a", "image": "x", "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN", "CHOWN"]}}, "ports": [{"containerPort": 80, "hostPort": 8080}]},
            {"name": "b", "image": "x", "securityContext": {"privileged": true}},
        ],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    }));
    let v = check(Level::Baseline, &p);
    let message = forbidden_message(Level::Baseline, &v);
    assert_eq!(
        message,
        "violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true, hostPID=true), \
         privileged (containers \"a\", \"b\" must not set securityContext.privileged=true), \
         non-default capabilities (container \"a\" must not include \"NET_ADMIN\" in securityContext.capabilities.add), \
         hostPath volumes (volume \"root\"), hostPort (container \"a\" uses hostPort 8080)"
    );
}

#[test]
fn gpu_runtime_variables_are_refused_at_every_level() {
    let mut c = restricted_container("train");
    c["env"] = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "LD_PRELOAD", "value": "/x.so"}, {"name": "HOME", "value": "/"}]);
    let p = pod(json!({"containers": [c]}));
    for level in [Level::Baseline, Level::Restricted] {
        let v = check(level, &p);
        assert_eq!(v.len(), 1, "{v:?}");
        let message = forbidden_message(level, &v);
        assert!(message.contains("container \"train\" sets NVIDIA_VISIBLE_DEVICES, container \"train\" sets LD_PRELOAD"), "{message}");
        assert!(!message.contains("violates PodSecurity"), "{message}");
    }
}

#[test]
fn every_path_of_a_variable_into_a_container_is_checked() {
    let with_env = |name: &str| {
        let mut c = restricted_container("c");
        c["env"] = json!([{"name": name, "value": "x"}]);
        c
    };
    let with_prefix = |prefix: &str| {
        let mut c = restricted_container("c");
        c["envFrom"] = json!([{"prefix": prefix, "configMapRef": {"name": "cfg"}}]);
        c
    };
    let mut sidecar = with_env("LD_AUDIT");
    sidecar["restartPolicy"] = json!("Always");
    // (where the container sits, the container, what the message names)
    let table = [
        ("containers", with_env("LD_LIBRARY_PATH"), "container \"c\" sets LD_LIBRARY_PATH"),
        ("containers", with_env(" LD_PRELOAD"), "container \"c\" sets LD_PRELOAD"),
        ("containers", with_env("NVIDIA_DRIVER_CAPABILITIES "), "sets NVIDIA_DRIVER_CAPABILITIES"),
        ("initContainers", with_env("LD_PRELOAD"), "container \"c\" sets LD_PRELOAD"),
        ("initContainers", sidecar, "container \"c\" sets LD_AUDIT"),
        ("ephemeralContainers", with_env("NVIDIA_VISIBLE_DEVICES"), "sets NVIDIA_VISIBLE_DEVICES"),
        ("containers", with_prefix("NVIDIA_"), "container \"c\" sets envFrom prefix \"NVIDIA_\""),
        ("containers", with_prefix("LD_"), "sets envFrom prefix \"LD_\""),
        ("containers", with_prefix("L"), "sets envFrom prefix \"L\""),
        ("initContainers", with_prefix("NV"), "sets envFrom prefix \"NV\""),
    ];
    for (list, c, want) in table {
        let mut spec = json!({"containers": [restricted_container("main")]});
        if list == "containers" {
            spec["containers"] = json!([c]);
        } else {
            spec[list] = json!([c]);
        }
        let p = pod(spec);
        for level in [Level::Baseline, Level::Restricted] {
            let v = check(level, &p);
            assert_eq!(checks(level, &p), ["GPU runtime environment"], "{list}: {v:?}");
            let message = forbidden_message(level, &v);
            assert!(message.contains(want), "{message}");
            assert!(message.contains("(NVIDIA_*, LD_*)"), "{message}");
        }
    }
    // Allowed prefixes and names pass.
    let mut c = with_prefix("APP_");
    c["env"] =
        json!([{"name": "LDAP_URI", "value": "x"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]);
    assert!(check(Level::Restricted, &pod(json!({"containers": [c]}))).is_empty());
}

#[test]
fn env_from_sources_are_checked_key_by_key() {
    let p = pod(json!({"containers": [{"name": "c", "image": "x", "envFrom": [
        {"configMapRef": {"name": "cfg"}},
        {"prefix": "APP_", "secretRef": {"name": "creds"}},
        {"secretRef": {"name": "env", "optional": true}},
        {"configMapRef": {"name": "missing"}},
    ]}]}));
    let keys = |(kind, name): EnvSource<'_>| -> Option<Vec<String>> {
        let keys: &[&str] = match (kind, name) {
            ("ConfigMap", "cfg") => &["HOME", "LD_PRELOAD", "NVIDIA_VISIBLE_DEVICES"],
            ("Secret", "creds") => &["LD_PRELOAD"],
            ("Secret", "env") => &["LD_AUDIT"],
            _ => return None,
        };
        Some(keys.iter().map(|k| (*k).to_owned()).collect())
    };
    let v = env_source_violations(&p, &keys);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0].detail,
        "container \"c\" gets LD_PRELOAD from key \"LD_PRELOAD\" of ConfigMap \"cfg\" (envFrom), \
         container \"c\" gets NVIDIA_VISIBLE_DEVICES from key \"NVIDIA_VISIBLE_DEVICES\" of ConfigMap \"cfg\" (envFrom), \
         container \"c\" gets LD_AUDIT from key \"LD_AUDIT\" of Secret \"env\" (envFrom)"
    );
    assert!(forbidden_message(Level::Baseline, &v).starts_with("Carrel refuses environment"));
    let clean = |_: EnvSource<'_>| Some(vec!["HOME".to_owned()]);
    assert!(env_source_violations(&p, &clean).is_empty());
}

#[test]
fn references_the_syncer_cannot_carry_are_refused() {
    let p = pod(json!({
        "containers": [{"name": "c", "image": "x"}],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "chap", "iscsi": {"targetPortal": "t", "iqn": "i", "lun": 0, "secretRef": {"name": "admin-kubeconfig"}}},
            {"name": "g", "glusterfs": {"endpoints": "gl", "path": "p"}},
        ],
    }));
    let v = check(Level::Baseline, &p);
    assert_eq!(checks(Level::Baseline, &p), ["unsynced references"]);
    // The claim is carried (the syncer makes the tenant's own host claim); the Endpoints are not.
    assert_eq!(
        forbidden_message(Level::Baseline, &v),
        "Carrel refuses references to objects it does not carry to the host cluster (the host \
         would resolve them in its own namespace): \
         spec.volumes[2].glusterfs.endpoints: Endpoints \"gl\""
    );
}

#[test]
fn a_pod_mounting_a_claim_is_admitted() {
    let p = pod(json!({
        "containers": [{"name": "c", "image": "x"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    }));
    assert!(checks(Level::Baseline, &p).is_empty());
    assert!(checks(Level::Restricted, &p).iter().all(|c| *c != "unsynced references"));
    // A generic ephemeral volume's claim would be made by the host from its template: refused.
    let p = pod(json!({
        "containers": [{"name": "c", "image": "x"}],
        "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}],
    }));
    let v = check(Level::Baseline, &p);
    assert!(
        forbidden_message(Level::Baseline, &v)
            .ends_with("spec.volumes[0].ephemeral: generic ephemeral volume \"scratch\""),
        "{v:?}"
    );
}

/// Every volume source and projected source of the Kubernetes schema is classified: either
/// its references are listed or it has none.
#[test]
fn every_volume_source_of_the_schema_is_classified() {
    use carrel_gpu::pod_refs::{
        PROJECTED_REFERENCES, PROJECTED_SOURCES_WITHOUT_REFERENCES, VOLUME_REFERENCES,
        VOLUME_SOURCES_WITHOUT_REFERENCES,
    };
    use k8s_openapi::api::core::v1::{Volume, VolumeProjection};
    fn properties<T: schemars::JsonSchema>() -> Vec<String> {
        let schema = serde_json::to_value(schemars::schema_for!(T)).expect("schema");
        schema["properties"].as_object().expect("properties").keys().cloned().collect()
    }
    let classified = |refs: &[carrel_gpu::pod_refs::Reference], none: &[&str], field: &str| {
        refs.iter().any(|r| r.source == field) || none.contains(&field)
    };
    let volume_sources: Vec<String> =
        properties::<Volume>().into_iter().filter(|p| p != "name").collect();
    assert!(volume_sources.len() > 25, "{volume_sources:?}");
    for source in &volume_sources {
        assert!(
            classified(VOLUME_REFERENCES, VOLUME_SOURCES_WITHOUT_REFERENCES, source),
            "volume source {source} is not in carrel_gpu::pod_refs"
        );
    }
    for source in properties::<VolumeProjection>() {
        assert!(
            classified(PROJECTED_REFERENCES, PROJECTED_SOURCES_WITHOUT_REFERENCES, &source),
            "projected source {source} is not in carrel_gpu::pod_refs"
        );
    }
    // And each row names a real field: a pod using every one refers to its name.
    for r in VOLUME_REFERENCES {
        assert!(volume_sources.contains(&r.source.to_owned()), "{}", r.source);
        let mut source = json!({});
        let segments: Vec<&str> = r.pointer.trim_start_matches('/').split('/').collect();
        let mut at = &mut source;
        for s in &segments[..segments.len() - 1] {
            at = &mut at[*s];
        }
        at[segments[segments.len() - 1]] = json!("named");
        let p = pod(json!({"volumes": [{"name": "v", r.source: source}]}));
        let found = carrel_gpu::pod_refs::volume_references(&p["spec"]);
        assert_eq!(found.len(), 1, "{}{}", r.source, r.pointer);
        assert_eq!(found[0].name, "named");
        let refused = checks(Level::Baseline, &p).contains(&"unsynced references");
        assert_eq!(
            refused,
            matches!(r.referent, carrel_gpu::pod_refs::Referent::Unsynced(_)),
            "{}{}",
            r.source,
            r.pointer
        );
    }
}

#[test]
fn restricted_details() {
    let mut c = restricted_container("c");
    c["securityContext"]["runAsUser"] = json!(0);
    c["securityContext"]["capabilities"]["add"] = json!(["SYS_ADMIN"]);
    let p = pod(
        json!({"containers": [c], "volumes": [{"name": "d", "gcePersistentDisk": {"pdName": "x"}}]}),
    );
    let v = check(Level::Restricted, &p);
    let names: Vec<&str> = v.iter().map(|v| v.check).collect();
    assert_eq!(
        names,
        [
            "non-default capabilities",
            "restricted volume types",
            "runAsUser=0",
            "unrestricted capabilities"
        ]
    );
    assert_eq!(v[1].detail, "volume \"d\" uses restricted volume type \"gcePersistentDisk\"");
    // Pod-level settings cover every container.
    let mut bare = json!({"name": "c", "image": "x", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}});
    bare["securityContext"]["capabilities"]["add"] = json!(["NET_BIND_SERVICE"]);
    let p = pod(
        json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}, "containers": [bare]}),
    );
    assert!(check(Level::Restricted, &p).is_empty(), "{:?}", check(Level::Restricted, &p));
}

#[test]
fn unsafe_sysctls_apparmor_seccomp_and_selinux() {
    let p = json!({
        "metadata": {"name": "p", "annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}},
        "spec": {
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_syncookies", "value": "1"}], "seccompProfile": {"type": "Unconfined"}},
            "containers": [{"name": "c", "image": "x", "securityContext": {"seLinuxOptions": {"type": "spc_t"}, "procMount": "Unmasked"}}],
        }
    });
    assert_eq!(
        checks(Level::Baseline, &p),
        ["appArmorProfile", "seLinuxOptions", "procMount", "seccompProfile", "forbidden sysctls"]
    );
    let v = check(Level::Baseline, &p);
    assert_eq!(v[4].detail, "\"kernel.msgmax\"");
}
