//! A simulated storage provisioner for the embedded host of `carrel up`, doing what an external
//! provisioner (such as kind's or k3s's local-path one) and the PV controller do together on a
//! real cluster, without any disk behind it:
//!
//! - at start, the default StorageClass [`STANDARD`] (provisioner [`PROVISIONER`],
//!   `volumeBindingMode: Immediate`), unless the host has a class of that name already;
//! - for each Pending claim of a class of this provisioner (once a node is selected, for a
//!   `WaitForFirstConsumer` class), a PersistentVolume `pvc-<claim UID>` of the requested size,
//!   its `claimRef` naming the claim; the volume and the claim are then bound (`Bound`, the claim's
//!   `spec.volumeName`, capacity and access modes, the PV controller's annotations), and the claim
//!   is told `ProvisioningSucceeded`;
//! - a volume of this provisioner whose claim is gone is reclaimed as its policy says: deleted
//!   (`Delete`), or `Released` (`Retain`).
//!
//! Each round reads the classes, claims and volumes afresh; rounds follow the watches of claims
//! and volumes, and come every few seconds.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

/// The provisioner name of the simulated classes.
pub const PROVISIONER: &str = "sim.carrel.dev/local";
/// The default StorageClass written at start.
pub const STANDARD: &str = "standard";
/// The annotation that marks the default StorageClass.
pub const IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The annotation naming who provisioned a volume.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The annotation the scheduler writes on a claim of a `WaitForFirstConsumer` class.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Where the simulated volumes would live.
const VOLUME_ROOT: &str = "/var/lib/carrel-sim/volumes";
/// How often everything is looked at again when nothing changes.
const RETRY: Duration = Duration::from_secs(5);

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionerError {
    /// The host API refused or failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An object did not have the shape its kind promises.
    #[error("decoding a {kind}: {source}")]
    Decode {
        /// The kind.
        kind: &'static str,
        /// The decoder's complaint.
        #[source]
        source: serde_json::Error,
    },
}

fn failed(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ProvisionerError {
    let action = action.into();
    move |source| ProvisionerError::Kube { action, source }
}

/// The default StorageClass [`STANDARD`].
pub fn standard_class() -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STANDARD, "annotations": {IS_DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    })
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A claim's class: the beta annotation, else `spec.storageClassName`.
fn claim_class(claim: &Value) -> &str {
    claim
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(claim, "/spec/storageClassName"))
}

/// The class of this provisioner claim `claim` wants a volume of now, if it wants one:
/// Pending, naming no volume, not being deleted, of a class of [`PROVISIONER`] (and, for a
/// `WaitForFirstConsumer` class, with a node selected).
pub fn wants_volume<'a>(claim: &Value, classes: &'a [Value]) -> Option<&'a Value> {
    let phase = str_at(claim, "/status/phase");
    let deleting = claim.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
    if !(phase.is_empty() || phase == "Pending")
        || !str_at(claim, "/spec/volumeName").is_empty()
        || deleting
    {
        return None;
    }
    let name = claim_class(claim);
    let class = classes.iter().find(|c| !name.is_empty() && str_at(c, "/metadata/name") == name)?;
    if str_at(class, "/provisioner") != PROVISIONER {
        return None;
    }
    let waits = str_at(class, "/volumeBindingMode") == "WaitForFirstConsumer";
    let selected =
        !str_at(claim, &format!("/metadata/annotations/{}", SELECTED_NODE.replace('/', "~1")))
            .is_empty();
    (!waits || selected).then_some(class)
}

/// The volume name for claim `claim`: `pvc-<its UID>`, as external provisioners name theirs.
pub fn volume_name(claim: &Value) -> String {
    format!("pvc-{}", str_at(claim, "/metadata/uid"))
}

/// The PersistentVolume provisioned for `claim` of `class`, its `claimRef` naming the claim.
pub fn volume_for(claim: &Value, class: &Value) -> Value {
    let name = volume_name(claim);
    let storage = claim.pointer("/spec/resources/requests/storage").cloned().unwrap_or(json!("0"));
    let reclaim = match str_at(class, "/reclaimPolicy") {
        "" => "Delete",
        policy => policy,
    };
    let mode = match str_at(claim, "/spec/volumeMode") {
        "" => "Filesystem",
        mode => mode,
    };
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": claim.pointer("/spec/accessModes").cloned().unwrap_or(json!([])),
            "volumeMode": mode,
            "persistentVolumeReclaimPolicy": reclaim,
            "storageClassName": str_at(class, "/metadata/name"),
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": str_at(claim, "/metadata/namespace"),
                "name": str_at(claim, "/metadata/name"),
                "uid": str_at(claim, "/metadata/uid"),
            },
            "hostPath": {"path": format!("{VOLUME_ROOT}/{name}"), "type": "DirectoryOrCreate"},
        },
    })
}

/// The merge patch that binds claim `claim` to volume `volume` (`spec.volumeName` and the PV
/// controller's annotations), and the status a bound claim shows.
pub fn bound_claim(claim: &Value, volume: &Value) -> (Value, Value) {
    let spec = json!({
        "metadata": {"annotations": {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
            "volume.kubernetes.io/storage-provisioner": PROVISIONER,
            "volume.beta.kubernetes.io/storage-provisioner": PROVISIONER,
        }},
        "spec": {"volumeName": str_at(volume, "/metadata/name")},
    });
    let status = json!({"status": {
        "phase": "Bound",
        "capacity": volume.pointer("/spec/capacity").cloned().unwrap_or(json!({})),
        "accessModes": volume.pointer("/spec/accessModes").cloned()
            .or_else(|| claim.pointer("/spec/accessModes").cloned())
            .unwrap_or(json!([])),
    }});
    (spec, status)
}

/// What becomes of a volume of this provisioner whose claim is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// Its claim is there: nothing.
    Keep,
    /// Deleted (`Delete`).
    Delete,
    /// Shown `Released` (`Retain`), if it is not already.
    Release,
}

/// What becomes of volume `volume` given the claims there are (`(namespace, name)` → UID).
pub fn reclaim(volume: &Value, claims: &HashMap<(String, String), String>) -> Reclaim {
    if str_at(volume, &format!("/metadata/annotations/{}", PROVISIONED_BY.replace('/', "~1")))
        != PROVISIONER
    {
        return Reclaim::Keep;
    }
    let key = (
        str_at(volume, "/spec/claimRef/namespace").to_owned(),
        str_at(volume, "/spec/claimRef/name").to_owned(),
    );
    if claims.get(&key).map(String::as_str) == Some(str_at(volume, "/spec/claimRef/uid")) {
        return Reclaim::Keep;
    }
    match str_at(volume, "/spec/persistentVolumeReclaimPolicy") {
        "Retain" if str_at(volume, "/status/phase") == "Released" => Reclaim::Keep,
        "Retain" => Reclaim::Release,
        _ => Reclaim::Delete,
    }
}

/// Write the default class [`STANDARD`], unless the host has a class of that name.
pub async fn ensure_standard_class(client: &Client) -> Result<(), ProvisionerError> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let class: StorageClass = serde_json::from_value(standard_class())
        .map_err(|source| ProvisionerError::Decode { kind: "StorageClass", source })?;
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(failed("writing the standard StorageClass")(e)),
    }
}

fn values<K: serde::Serialize>(items: Vec<K>) -> Vec<Value> {
    items.iter().filter_map(|i| serde_json::to_value(i).ok()).collect()
}

/// One round: every claim that wants a volume gets one and is bound to it; every volume whose
/// claim is gone is reclaimed. The volumes provisioned.
pub async fn provision_once(
    client: &Client,
    recorder: &Recorder,
) -> Result<Vec<String>, ProvisionerError> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    let classes = values(
        classes.list(&ListParams::default()).await.map_err(failed("listing StorageClasses"))?.items,
    );
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let claims =
        values(claims.list(&ListParams::default()).await.map_err(failed("listing claims"))?.items);
    let volumes_api: Api<PersistentVolume> = Api::all(client.clone());
    let volumes = values(
        volumes_api.list(&ListParams::default()).await.map_err(failed("listing volumes"))?.items,
    );
    let by_name: BTreeMap<&str, &Value> =
        volumes.iter().map(|v| (str_at(v, "/metadata/name"), v)).collect();
    let mut provisioned = Vec::new();
    for claim in &claims {
        let Some(class) = wants_volume(claim, &classes) else { continue };
        let wanted = volume_for(claim, class);
        let name = str_at(&wanted, "/metadata/name").to_owned();
        let volume = match by_name.get(name.as_str()) {
            Some(v) => (*v).clone(),
            None => {
                let typed: PersistentVolume = match serde_json::from_value(wanted.clone()) {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!(volume = %name, error = %e, "a volume that does not decode");
                        continue;
                    }
                };
                match volumes_api.create(&PostParams::default(), &typed).await {
                    Ok(made) => serde_json::to_value(made).unwrap_or(wanted),
                    Err(kube::Error::Api(e)) if e.code == 409 => wanted,
                    Err(e) => return Err(failed(format!("creating volume {name}"))(e)),
                }
            }
        };
        bind(client, claim, &volume).await?;
        let target = EventTarget::persistent_volume_claim(
            str_at(claim, "/metadata/namespace"),
            str_at(claim, "/metadata/name"),
            Some(str_at(claim, "/metadata/uid").to_owned()),
        );
        let message = format!("Successfully provisioned volume {name}");
        if let Err(e) =
            recorder.record(&target, EventType::Normal, "ProvisioningSucceeded", &message).await
        {
            tracing::debug!(volume = %name, error = %e, "could not write the ProvisioningSucceeded event");
        }
        tracing::debug!(volume = %name, claim = %format!("{}/{}", target.namespace, target.name), "provisioned a volume");
        provisioned.push(name);
    }
    let present: HashMap<(String, String), String> = claims
        .iter()
        .map(|c| {
            (
                (
                    str_at(c, "/metadata/namespace").to_owned(),
                    str_at(c, "/metadata/name").to_owned(),
                ),
                str_at(c, "/metadata/uid").to_owned(),
            )
        })
        .collect();
    for volume in &volumes {
        let name = str_at(volume, "/metadata/name");
        match reclaim(volume, &present) {
            Reclaim::Keep => {}
            Reclaim::Delete => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: volume
                            .pointer("/metadata/uid")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match volumes_api.delete(name, &params).await {
                    Ok(_) => tracing::debug!(volume = %name, "deleted a released volume"),
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(e) => return Err(failed(format!("deleting volume {name}"))(e)),
                }
            }
            Reclaim::Release => {
                let patch = json!({"status": {"phase": "Released"}});
                volumes_api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(failed(format!("releasing volume {name}")))?;
            }
        }
    }
    Ok(provisioned)
}

/// Bind `claim` and `volume` to each other: the volume `Bound`, then the claim's volume name,
/// then its status.
async fn bind(client: &Client, claim: &Value, volume: &Value) -> Result<(), ProvisionerError> {
    let volume_name = str_at(volume, "/metadata/name");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let params = PatchParams::default();
    if str_at(volume, "/status/phase") != "Bound" {
        let patch = json!({"status": {"phase": "Bound"}});
        volumes
            .patch_status(volume_name, &params, &Patch::Merge(&patch))
            .await
            .map_err(failed(format!("binding volume {volume_name}")))?;
    }
    let (namespace, name) = (str_at(claim, "/metadata/namespace"), str_at(claim, "/metadata/name"));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let (spec, status) = bound_claim(claim, volume);
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    match claims.patch(name, &params, &Patch::Merge(&spec)).await {
        Err(e) if gone(&e) => return Ok(()),
        other => {
            other.map_err(failed(format!("binding claim {namespace}/{name}")))?;
        }
    }
    match claims.patch_status(name, &params, &Patch::Merge(&status)).await {
        Err(e) if gone(&e) => Ok(()),
        other => other.map(|_| ()).map_err(failed(format!("binding claim {namespace}/{name}"))),
    }
}

/// Provision and reclaim until `stop` turns true: [`ensure_standard_class`] first, then a round
/// after every burst of changes to claims or volumes, and every few seconds.
pub async fn run_provisioner(client: Client, mut stop: watch::Receiver<bool>) {
    if let Err(e) = ensure_standard_class(&client).await {
        tracing::warn!(error = %e, "the simulated provisioner's StorageClass");
    }
    let recorder = Recorder::for_component(client.clone(), PROVISIONER, "");
    let claims =
        watcher(Api::<PersistentVolumeClaim>::all(client.clone()), watcher::Config::default())
            .default_backoff();
    let volumes = watcher(Api::<PersistentVolume>::all(client.clone()), watcher::Config::default())
        .default_backoff();
    let mut claims = std::pin::pin!(claims);
    let mut volumes = std::pin::pin!(volumes);
    let mut retry = tokio::time::interval(RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = crate::stopped(&mut stop) => break,
            event = claims.next() => if event.is_none() { break },
            event = volumes.next() => if event.is_none() { break },
            _ = retry.tick() => {}
        }
        // A burst of changes makes one round.
        while let Some(Some(_)) = futures::FutureExt::now_or_never(claims.next()) {}
        while let Some(Some(_)) = futures::FutureExt::now_or_never(volumes.next()) {}
        if let Err(e) = provision_once(&client, &recorder).await {
            tracing::warn!(error = %e, "simulated provisioner");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(phase: &str, class: &str) -> Value {
        json!({
            "metadata": {"name": "data-x-ml", "namespace": "carrel-t", "uid": "c-1"},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": phase},
        })
    }

    fn classes() -> Vec<Value> {
        let mut waiting = standard_class();
        waiting["metadata"] = json!({"name": "later"});
        waiting["volumeBindingMode"] = json!("WaitForFirstConsumer");
        let mut other = standard_class();
        other["metadata"] = json!({"name": "ebs"});
        other["provisioner"] = json!("ebs.csi.aws.com");
        vec![standard_class(), waiting, other]
    }

    #[test]
    fn only_pending_claims_of_its_classes_get_a_volume() {
        let classes = classes();
        assert!(wants_volume(&claim("Pending", STANDARD), &classes).is_some());
        assert!(wants_volume(&claim("", STANDARD), &classes).is_some());
        assert!(wants_volume(&claim("Bound", STANDARD), &classes).is_none());
        assert!(
            wants_volume(&claim("Pending", "ebs"), &classes).is_none(),
            "another provisioner's"
        );
        assert!(wants_volume(&claim("Pending", "gold"), &classes).is_none(), "no such class");
        assert!(wants_volume(&claim("Pending", ""), &classes).is_none(), "no class");
        let mut named = claim("Pending", STANDARD);
        named["spec"]["volumeName"] = json!("pv-1");
        assert!(wants_volume(&named, &classes).is_none(), "bound by name");
        let mut later = claim("Pending", "later");
        assert!(wants_volume(&later, &classes).is_none(), "waits for its first consumer");
        later["metadata"]["annotations"] = json!({SELECTED_NODE: "n1"});
        assert!(wants_volume(&later, &classes).is_some());
    }

    #[test]
    fn the_volume_is_bound_to_its_claim_with_the_requested_size() {
        let claim = claim("Pending", STANDARD);
        let volume = volume_for(&claim, &standard_class());
        assert_eq!(volume["metadata"]["name"], "pvc-c-1");
        assert_eq!(volume["spec"]["capacity"]["storage"], "1Gi");
        assert_eq!(volume["spec"]["storageClassName"], STANDARD);
        assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(volume["spec"]["volumeMode"], "Filesystem");
        assert_eq!(
            volume["spec"]["claimRef"],
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": "carrel-t", "name": "data-x-ml", "uid": "c-1"})
        );
        let (spec, status) = bound_claim(&claim, &volume);
        assert_eq!(spec["spec"]["volumeName"], "pvc-c-1");
        assert_eq!(spec["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"], "yes");
        assert_eq!(
            status,
            json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"]}})
        );
    }

    #[test]
    fn a_volume_whose_claim_went_is_reclaimed_as_its_policy_says() {
        let claim = claim("Bound", STANDARD);
        let volume = volume_for(&claim, &standard_class());
        let key = ("carrel-t".to_owned(), "data-x-ml".to_owned());
        let present = HashMap::from([(key.clone(), "c-1".to_owned())]);
        assert_eq!(reclaim(&volume, &present), Reclaim::Keep);
        assert_eq!(reclaim(&volume, &HashMap::new()), Reclaim::Delete);
        // A claim of the same name made again is another claim.
        let again = HashMap::from([(key, "c-2".to_owned())]);
        assert_eq!(reclaim(&volume, &again), Reclaim::Delete);
        let mut retained = volume.clone();
        retained["spec"]["persistentVolumeReclaimPolicy"] = json!("Retain");
        assert_eq!(reclaim(&retained, &HashMap::new()), Reclaim::Release);
        retained["status"] = json!({"phase": "Released"});
        assert_eq!(reclaim(&retained, &HashMap::new()), Reclaim::Keep);
        // Volumes made by others are never touched.
        let mut theirs = volume;
        theirs["metadata"]["annotations"] = json!({});
        assert_eq!(reclaim(&theirs, &HashMap::new()), Reclaim::Keep);
    }
}
