//! The decision for one pod, table-tested: every pairing of tenant pod and host pod the syncer
//! meets, without any API server.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::decide::{decide, devices_ready, Facts, Step, HOST_POD_DELETED};
use crate::host_names;

const TENANT: &str = "acme";

/// A tenant pod `ml/train` with UID `uid`, `status` and `spec` merged in.
fn tenant_pod(uid: &str, status: Value, spec: Value) -> Pod {
    let mut pod = json!({
        "metadata": {"name": "train", "namespace": "ml", "uid": uid},
        "spec": {"containers": [{"name": "main", "image": "cuda"}]},
        "status": status,
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        pod["spec"][k] = v.clone();
    }
    serde_json::from_value(pod).expect("a pod")
}

/// A host pod written for tenant `tenant`'s pod `namespace/name` with UID `uid` (none when
/// empty), in phase `phase`; `managed` says whether it carries the syncer's label.
fn host_pod(tenant: &str, (namespace, name): (&str, &str), uid: &str, phase: &str) -> Pod {
    let mut annotations = host_names::host_annotations(namespace, name, uid);
    if uid.is_empty() {
        annotations.remove(host_names::ANNOTATION_UID);
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": host_names::host_pod("ml", "train"),
            "namespace": "carrel-acme",
            "uid": "host-uid",
            "labels": host_names::host_pod_labels(tenant, namespace, &Default::default()),
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "main", "image": "cuda"}]},
        "status": {"phase": phase},
    }))
    .expect("a host pod")
}

fn unmanaged() -> Pod {
    let mut pod = host_pod(TENANT, ("ml", "train"), "u1", "Running");
    if let Some(labels) = pod.metadata.labels.as_mut() {
        labels.remove(host_names::LABEL_MANAGED_BY);
    }
    pod
}

fn ours(uid: &str, phase: &str) -> Pod {
    host_pod(TENANT, ("ml", "train"), uid, phase)
}

fn scheduled(status: &str) -> Value {
    json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": status}]})
}

/// What a row expects: a step, or a failure whose message holds a fragment.
#[derive(Debug)]
enum Want {
    Step(Step),
    Fail { says: &'static str, release: bool },
}

#[test]
fn each_pairing_of_tenant_pod_and_host_pod_has_its_step() {
    let new = tenant_pod("u1", json!({"phase": "Pending"}), json!({}));
    let running = tenant_pod("u1", json!({"phase": "Running"}), json!({}));
    let mut labelled = running.clone();
    labelled.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    let pvc = json!({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
    let debugger = json!({"ephemeralContainers": [{"name": "debugger", "image": "busybox"}]});
    let debugged = tenant_pod("u1", json!({"phase": "Running"}), debugger.clone());
    let mut debugged_host = ours("u1", "Running");
    if let Some(spec) = debugged_host.spec.as_mut() {
        spec.ephemeral_containers = serde_json::from_value(debugger["ephemeralContainers"].clone())
            .expect("ephemeral containers");
    }
    let endpoints =
        json!({"volumes": [{"name": "g", "glusterfs": {"endpoints": "gl", "path": "p"}}]});
    let rows: Vec<(&str, Option<Pod>, Option<Pod>, Want)> = vec![
        ("nothing on either side", None, None, Want::Step(Step::Release)),
        (
            "tenant pod gone, host pod left",
            None,
            Some(ours("u1", "Running")),
            Want::Step(Step::DeleteHostPod),
        ),
        (
            "tenant pod gone, finished host pod left",
            None,
            Some(ours("u1", "Succeeded")),
            Want::Step(Step::DeleteHostPod),
        ),
        (
            "tenant pod gone, someone else's host object",
            None,
            Some(host_pod("other", ("ml", "train"), "u1", "Running")),
            Want::Step(Step::HostNameTaken),
        ),
        ("new pod", Some(new.clone()), None, Want::Step(Step::CreateHostPod)),
        (
            "new pod without status",
            Some(tenant_pod("u1", Value::Null, json!({}))),
            None,
            Want::Step(Step::CreateHostPod),
        ),
        (
            "unschedulable so far",
            Some(tenant_pod("u1", scheduled("False"), json!({}))),
            None,
            Want::Step(Step::CreateHostPod),
        ),
        (
            "succeeded, host pod gone",
            Some(tenant_pod("u1", json!({"phase": "Succeeded"}), json!({}))),
            None,
            Want::Step(Step::Release),
        ),
        (
            "failed, host pod gone",
            Some(tenant_pod("u1", json!({"phase": "Failed"}), json!({}))),
            None,
            Want::Step(Step::Release),
        ),
        (
            "scheduled, host pod deleted under it",
            Some(tenant_pod("u1", scheduled("True"), json!({}))),
            None,
            Want::Fail { says: HOST_POD_DELETED, release: true },
        ),
        (
            "references the host cannot have",
            Some(tenant_pod("u1", json!({}), endpoints)),
            None,
            Want::Fail { says: "Endpoints \"gl\"", release: false },
        ),
        (
            "a generic ephemeral volume",
            Some(tenant_pod(
                "u1",
                json!({}),
                json!({"volumes": [{"name": "s", "ephemeral": {"volumeClaimTemplate": {}}}]}),
            )),
            None,
            Want::Fail { says: "generic ephemeral volume \"s\"", release: false },
        ),
        (
            "a claim, which is carried",
            Some(tenant_pod("u1", json!({}), pvc)),
            None,
            Want::Step(Step::CreateHostPod),
        ),
        (
            "running on the host",
            Some(running.clone()),
            Some(ours("u1", "Running")),
            Want::Step(Step::CopyStatusUp { release: false, relabel: false, debug: false }),
        ),
        (
            "pending on the host",
            Some(new.clone()),
            Some(ours("u1", "Pending")),
            Want::Step(Step::CopyStatusUp { release: false, relabel: false, debug: false }),
        ),
        (
            "succeeded on the host",
            Some(running.clone()),
            Some(ours("u1", "Succeeded")),
            Want::Step(Step::CopyStatusUp { release: true, relabel: false, debug: false }),
        ),
        (
            "failed on the host",
            Some(running.clone()),
            Some(ours("u1", "Failed")),
            Want::Step(Step::CopyStatusUp { release: true, relabel: false, debug: false }),
        ),
        (
            "tenant pod finished first, host pod still running",
            Some(tenant_pod("u1", json!({"phase": "Failed"}), json!({}))),
            Some(ours("u1", "Running")),
            Want::Step(Step::CopyStatusUp { release: false, relabel: false, debug: false }),
        ),
        (
            "labels changed in the tenant",
            Some(labelled.clone()),
            Some(ours("u1", "Running")),
            Want::Step(Step::CopyStatusUp { release: false, relabel: true, debug: false }),
        ),
        (
            "an ephemeral container added in the tenant",
            Some(debugged.clone()),
            Some(ours("u1", "Running")),
            Want::Step(Step::CopyStatusUp { release: false, relabel: false, debug: true }),
        ),
        (
            "an ephemeral container the host pod has already",
            Some(debugged.clone()),
            Some(debugged_host.clone()),
            Want::Step(Step::CopyStatusUp { release: false, relabel: false, debug: false }),
        ),
        (
            "host pod of an earlier pod of the same name",
            Some(running.clone()),
            Some(ours("u0", "Running")),
            Want::Step(Step::ReplaceHostPod),
        ),
        (
            "host pod recording no tenant UID",
            Some(new.clone()),
            Some(ours("", "Running")),
            Want::Step(Step::ReplaceHostPod),
        ),
        (
            "host object of another tenant",
            Some(new.clone()),
            Some(host_pod("other", ("ml", "train"), "u1", "Running")),
            Want::Step(Step::HostNameTaken),
        ),
        (
            "host object of another pod of the tenant",
            Some(new.clone()),
            Some(host_pod(TENANT, ("ml", "eval"), "u1", "Running")),
            Want::Step(Step::HostNameTaken),
        ),
        (
            "host object the syncer did not write",
            Some(running.clone()),
            Some(unmanaged()),
            Want::Step(Step::HostNameTaken),
        ),
        (
            "no tenant pod, host object the syncer did not write",
            None,
            Some(unmanaged()),
            Want::Step(Step::HostNameTaken),
        ),
    ];
    assert!(rows.len() >= 15);
    for (what, tenant_pod, host_pod, want) in rows {
        let facts = Facts {
            tenant: TENANT,
            namespace: "ml",
            name: "train",
            tenant_pod: tenant_pod.as_ref(),
            host_pod: host_pod.as_ref(),
        };
        let step = decide(&facts);
        match (&want, &step) {
            (Want::Step(wanted), step) => assert_eq!(step, wanted, "{what}"),
            (Want::Fail { says, release }, Step::Fail { why, release: r }) => {
                assert!(why.contains(says), "{what}: {why}");
                assert_eq!(r, release, "{what}");
            }
            (want, step) => panic!("{what}: wanted {want:?}, got {step:?}"),
        }
    }
}

#[test]
fn a_host_pod_waits_for_every_claimed_device() {
    use carrel_gpu::{Claim, GpuModel, Holder, Placement, Shape};
    let claim = |instance: &str| Claim {
        node: "n1".into(),
        gpu_uuid: "GPU-A".into(),
        model: GpuModel::H200_141GB,
        shape: Shape::G1,
        placement: Placement { start: 0, size: 1 },
        instance_uuid: instance.into(),
        holder: Holder { tenant: TENANT.into(), namespace: "ml".into(), pod: "train".into() },
        host_namespace: "carrel-acme".into(),
        host_pod: "train-x-ml".into(),
    };
    let rows: [(&str, Vec<Claim>, bool); 4] = [
        ("no GPUs", vec![], true),
        ("one device made", vec![claim("MIG-1")], true),
        ("one device still being made", vec![claim("")], false),
        ("one of two made", vec![claim("MIG-1"), claim("")], false),
    ];
    for (what, held, ready) in rows {
        assert_eq!(devices_ready(&held), ready, "{what}");
    }
}
