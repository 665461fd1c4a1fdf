//! Claims and StorageClasses, translated: tables of (tenant claim, host classes) → host claim or
//! refusal, and of (tenant claim, host claim) → what the tenant is given.

use super::*;

fn class(name: &str, provisioner: &str, created: &str, default: bool) -> Value {
    let mut c = json!({
        "metadata": {"name": name, "creationTimestamp": created},
        "provisioner": provisioner,
    });
    if default {
        c["metadata"]["annotations"] = json!({IS_DEFAULT_CLASS: "true"});
    }
    c
}

fn classes() -> Vec<Value> {
    vec![
        class("standard", "sim.carrel.dev/local", "2025-01-01T00:00:00Z", true),
        class("fast", "ebs.csi.aws.com", "2025-01-01T00:00:00Z", false),
        class("manual", NO_PROVISIONER, "2025-01-01T00:00:00Z", false),
    ]
}

/// Tenant claim `data` in `ml` with UID `u-1`, its spec `spec`.
fn claim(spec: Value) -> Value {
    json!({
        "metadata": {"name": "data", "namespace": "ml", "uid": "u-1",
            "labels": {"app": "db"}, "annotations": {"note": "tenant's"}},
        "spec": spec,
    })
}

fn asks() -> Value {
    json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "volumeMode": "Filesystem"})
}

fn with(extra: Value) -> Value {
    let mut spec = asks();
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    spec
}

#[test]
fn a_claim_becomes_the_tenants_own_host_claim() {
    let h =
        host_claim("t", "carrel-t", &claim(with(json!({"storageClassName": "fast"}))), &classes())
            .expect("carried");
    assert_eq!(
        h,
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "data-x-ml",
                "namespace": "carrel-t",
                "labels": host_names::host_labels("t"),
                "annotations": host_names::host_annotations("ml", "data", "u-1"),
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeMode": "Filesystem",
                "storageClassName": "fast",
            },
        })
    );
}

#[test]
fn each_claim_spec_is_carried_or_refused_with_its_reason() {
    type Row = (&'static str, Value, Result<Value, NotCarried>);
    let rows: Vec<Row> = vec![
        ("no class: the host's default", asks(), Ok(json!("standard"))),
        ("a class of the host's", with(json!({"storageClassName": "fast"})), Ok(json!("fast"))),
        ("the beta annotation's class wins, as Kubernetes reads it", asks(), Ok(json!("fast"))),
        (
            "a class the host does not have",
            with(json!({"storageClassName": "gold"})),
            Err(NotCarried::UnknownClass("gold".into())),
        ),
        (
            "no class at all: the host's classless volumes",
            with(json!({"storageClassName": ""})),
            Err(NotCarried::NoClass),
        ),
        (
            "a class of volumes made by hand",
            with(json!({"storageClassName": "manual"})),
            Err(NotCarried::StaticClass("manual".into())),
        ),
        (
            "a volume by name",
            with(json!({"volumeName": "pv-admin"})),
            Err(NotCarried::VolumeName("pv-admin".into())),
        ),
        (
            "the volume name the syncer wrote itself",
            with(json!({"volumeName": "pvc-u-1"})),
            Ok(json!("standard")),
        ),
        (
            "volumes by label",
            with(json!({"selector": {"matchLabels": {"disk": "ssd"}}})),
            Err(NotCarried::Selector),
        ),
        ("an empty selector selects nothing", with(json!({"selector": {}})), Ok(json!("standard"))),
        (
            "a snapshot",
            with(json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io",
                "kind": "VolumeSnapshot", "name": "snap"}})),
            Err(NotCarried::DataSource {
                field: "dataSource",
                kind: "VolumeSnapshot".into(),
                name: "snap".into(),
            }),
        ),
        (
            "another namespace's claim",
            with(json!({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "src",
                "namespace": "other"}})),
            Err(NotCarried::DataSource {
                field: "dataSourceRef",
                kind: "PersistentVolumeClaim".into(),
                name: "src".into(),
            }),
        ),
    ];
    for (what, spec, want) in rows {
        let mut c = claim(spec);
        if what.starts_with("the beta annotation") {
            c["metadata"]["annotations"][BETA_STORAGE_CLASS] = json!("fast");
        }
        let got = host_claim("t", "carrel-t", &c, &classes())
            .map(|h| h["spec"]["storageClassName"].clone());
        assert_eq!(got, want, "{what}");
    }
    // Without a default class on the host, a claim naming none cannot be provisioned.
    assert_eq!(
        host_claim("t", "carrel-t", &claim(asks()), &classes()[1..]),
        Err(NotCarried::NoDefaultClass)
    );
    assert_eq!(
        NotCarried::UnknownClass("gold".into()).to_string(),
        "storageclass.storage.k8s.io \"gold\" not found"
    );
    assert_eq!(NotCarried::UnknownClass("gold".into()).reason(), "ProvisioningFailed");
    assert_eq!(NotCarried::Selector.reason(), "ClaimNotCarried");
}

#[test]
fn a_clone_of_a_claim_names_that_claims_host_claim() {
    let source = json!({"kind": "PersistentVolumeClaim", "name": "src"});
    let c = claim(with(json!({"dataSource": source, "dataSourceRef": source})));
    let h = host_claim("t", "carrel-t", &c, &classes()).expect("carried");
    let wanted =
        json!({"kind": "PersistentVolumeClaim", "name": host_names::host_name("ml", "src")});
    assert_eq!(h["spec"]["dataSource"], wanted);
    assert_eq!(h["spec"]["dataSourceRef"], wanted);
    // What names host objects is never carried: attributes classes are dropped.
    let c = claim(with(json!({"volumeAttributesClassName": "gold"})));
    let h = host_claim("t", "carrel-t", &c, &classes()).expect("carried");
    assert!(h["spec"].get("volumeAttributesClassName").is_none(), "{h}");
    // Tenant labels and annotations are recorded nowhere on the host.
    assert!(h["metadata"]["labels"].get("app").is_none());
    assert!(h["metadata"]["annotations"].get("note").is_none());
}

/// A tenant claim named like a host claim (`data` in the host namespace, or a Carrel host name)
/// gets its own host claim, under a name no other tenant object, tenant or host object has.
#[test]
fn a_claim_named_like_a_host_claim_gets_its_own() {
    let named = |namespace: &str, name: &str| {
        let mut c = claim(asks());
        c["metadata"]["namespace"] = json!(namespace);
        c["metadata"]["name"] = json!(name);
        host_claim("t", "carrel-t", &c, &classes()).expect("carried")
    };
    let plain = named("ml", "data");
    assert_eq!(plain["metadata"]["name"], "data-x-ml");
    assert_eq!(plain["metadata"]["namespace"], "carrel-t");
    // Named as another object's host claim would be: hashed, not that name.
    let mimic = named("x-ml", "data");
    assert_ne!(mimic["metadata"]["name"], plain["metadata"]["name"]);
    let mimic = named("ml", "data-x-ml");
    assert_ne!(mimic["metadata"]["name"], "data-x-ml");
    // The host pod of a pod mounting `data` mounts the tenant's host claim.
    let pod = json!({"metadata": {"name": "db-0", "namespace": "ml"}, "spec": {
        "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}}],
    }});
    let h = host_pod("t", "carrel-t", &pod, &[], None, &EnvSources::default(), &[]);
    assert_eq!(
        h["spec"]["volumes"][0]["persistentVolumeClaim"],
        json!({"claimName": "data-x-ml", "readOnly": true})
    );
}

#[test]
fn the_tenant_claim_follows_its_host_claim() {
    let tenant = json!({
        "metadata": {"name": "data", "namespace": "ml", "uid": "u-1"},
        "spec": asks(),
        "status": {"phase": "Pending"},
    });
    let pending = json!({"spec": {"storageClassName": "standard"}, "status": {"phase": "Pending"}});
    let up = claim_up(&tenant, &pending);
    // The class the host claim was given goes up; nothing else changed.
    assert_eq!(up.spec, Some(json!({"spec": {"storageClassName": "standard"}})));
    assert_eq!(up.status, None);

    let bound = json!({
        "spec": {"storageClassName": "standard", "volumeName": "pvc-host-uid"},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "conditions": [{"type": "Resizing", "status": "True"}]},
    });
    let mut classed = tenant.clone();
    classed["spec"]["storageClassName"] = json!("standard");
    let up = claim_up(&classed, &bound);
    // The tenant is shown its own volume name, not the host's.
    assert_eq!(up.spec, Some(json!({"spec": {"volumeName": "pvc-u-1"}})));
    assert_eq!(
        up.status,
        Some(json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "conditions": [{"type": "Resizing", "status": "True"}]}}))
    );
    // Once shown, nothing more to write.
    let mut shown = classed.clone();
    shown["spec"]["volumeName"] = json!("pvc-u-1");
    shown["status"] = bound["status"].clone();
    assert_eq!(claim_up(&shown, &bound), ClaimUp::default());
    assert!(bound_by_syncer(&shown));
    assert!(!bound_by_syncer(&classed));
    // A condition that went goes from the tenant claim too.
    let mut settled = bound.clone();
    settled["status"].as_object_mut().unwrap().remove("conditions");
    assert_eq!(claim_up(&shown, &settled).status, Some(json!({"status": {"conditions": null}})));
    // A class the tenant named stays as it is.
    let mut named = shown.clone();
    named["spec"]["storageClassName"] = json!("fast");
    assert_eq!(claim_up(&named, &bound).spec, None);
}

#[test]
fn the_tenant_sees_the_hosts_classes_without_their_parameters() {
    let host = json!({
        "metadata": {"name": "standard", "uid": "h", "resourceVersion": "9",
            "labels": {"host-only": "x"},
            "annotations": {BETA_IS_DEFAULT_CLASS: "true", "host-note": "x"}},
        "provisioner": "sim.carrel.dev/local",
        "parameters": {"csi.storage.k8s.io/provisioner-secret-name": "cloud-creds"},
        "mountOptions": ["debug"],
        "allowVolumeExpansion": true,
    });
    let mirror = tenant_storage_class(&host);
    assert_eq!(
        mirror,
        json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": "standard",
                "labels": {host_names::LABEL_HOST_STORAGE_CLASS: "true"},
                "annotations": {IS_DEFAULT_CLASS: "true"},
            },
            "provisioner": "sim.carrel.dev/local",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": true,
        })
    );
    // As the tenant API stores it, it shows the same; a change of default does not.
    let mut stored = mirror.clone();
    stored["metadata"]["uid"] = json!("t");
    assert_eq!(storage_class_shown(&stored), storage_class_shown(&mirror));
    let mut undefaulted = host.clone();
    undefaulted["metadata"]["annotations"] = json!({});
    let plain = tenant_storage_class(&undefaulted);
    assert_ne!(storage_class_shown(&plain), storage_class_shown(&mirror));
    assert_eq!(storage_class_immutable(&plain), storage_class_immutable(&mirror));
    let mut moved = host.clone();
    moved["volumeBindingMode"] = json!("WaitForFirstConsumer");
    assert_ne!(
        storage_class_immutable(&tenant_storage_class(&moved)),
        storage_class_immutable(&mirror)
    );
}

#[test]
fn the_default_class_is_the_newest_then_the_first_by_name() {
    let classes = vec![
        class("old", "p", "2024-01-01T00:00:00Z", true),
        class("b", "p", "2025-01-01T00:00:00Z", true),
        class("a", "p", "2025-01-01T00:00:00Z", true),
        class("newest-plain", "p", "2026-01-01T00:00:00Z", false),
    ];
    assert_eq!(default_class(&classes), Some("a"));
    assert_eq!(default_class(&classes[..1]), Some("old"));
    assert_eq!(default_class(&classes[3..]), None);
}
