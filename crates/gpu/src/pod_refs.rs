//! Every place a core v1 pod's volumes name another object, and what Carrel does with each.
//! Pure code: the tenant API's admission refuses what the syncer cannot carry, and the syncer
//! translates the rest to the host names of the tenant's copies; both read this one table.
//!
//! A reference either names a ConfigMap, Secret or PersistentVolumeClaim of the pod's namespace
//! (the syncer carries the object into the tenant's host namespace under a name of its own and
//! renames the reference to it, so no tenant reference can name an object Carrel or the host
//! keeps there), or it names something the syncer does not carry (Endpoints, a PersistentVolume,
//! a data source, a cluster trust bundle, a certificate signer): on the host it would name the
//! host's object of that name, so the tenant API refuses it. Generic ephemeral volumes are refused
//! whole ([`UNSYNCED_VOLUME_SOURCES`]).

use serde_json::Value;

/// What a reference names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Referent {
    /// A ConfigMap of the pod's namespace.
    ConfigMap,
    /// A Secret of the pod's namespace.
    Secret,
    /// A PersistentVolumeClaim of the pod's namespace.
    PersistentVolumeClaim,
    /// Something the syncer does not carry to the host, by kind.
    Unsynced(&'static str),
}

/// One field of a volume source (or a projected volume's source) that names an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The source type, as the field of `Volume` (or `VolumeProjection`) is named: `iscsi`.
    pub source: &'static str,
    /// The JSON pointer of the name inside the source: `/secretRef/name`.
    pub pointer: &'static str,
    /// What it names.
    pub referent: Referent,
}

const fn r(source: &'static str, pointer: &'static str, referent: Referent) -> Reference {
    Reference { source, pointer, referent }
}

/// The references inside `spec.volumes[*]`, by source type.
pub const VOLUME_REFERENCES: &[Reference] = &[
    r("azureFile", "/secretName", Referent::Secret),
    r("cephfs", "/secretRef/name", Referent::Secret),
    r("cinder", "/secretRef/name", Referent::Secret),
    r("configMap", "/name", Referent::ConfigMap),
    r("csi", "/nodePublishSecretRef/name", Referent::Secret),
    r("ephemeral", "/volumeClaimTemplate/spec/dataSource/name", Referent::Unsynced("data source")),
    r(
        "ephemeral",
        "/volumeClaimTemplate/spec/dataSourceRef/name",
        Referent::Unsynced("data source"),
    ),
    r("ephemeral", "/volumeClaimTemplate/spec/volumeName", Referent::Unsynced("PersistentVolume")),
    r("flexVolume", "/secretRef/name", Referent::Secret),
    r("glusterfs", "/endpoints", Referent::Unsynced("Endpoints")),
    r("iscsi", "/secretRef/name", Referent::Secret),
    r("persistentVolumeClaim", "/claimName", Referent::PersistentVolumeClaim),
    r("rbd", "/secretRef/name", Referent::Secret),
    r("scaleIO", "/secretRef/name", Referent::Secret),
    r("secret", "/secretName", Referent::Secret),
    r("storageos", "/secretRef/name", Referent::Secret),
];

/// Volume source types the syncer does not carry at all, whatever they name, with what they are
/// called: a generic ephemeral volume's claim would be made on the host, by the host's
/// ephemeral-volume controller, straight from its template (whose selector or class could bind
/// the host's own volumes), and no tenant claim would stand for it.
pub const UNSYNCED_VOLUME_SOURCES: &[(&str, &str)] = &[("ephemeral", "generic ephemeral volume")];

/// Volume source types that name no object of the cluster (they may name storage outside it,
/// such as a cloud disk or an NFS server: the Pod Security Standard `restricted` refuses those).
pub const VOLUME_SOURCES_WITHOUT_REFERENCES: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "downwardAPI",
    "emptyDir",
    "fc",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "hostPath",
    "image",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "projected",
    "quobyte",
    "vsphereVolume",
];

/// The references inside `spec.volumes[*].projected.sources[*]`, by source type.
pub const PROJECTED_REFERENCES: &[Reference] = &[
    r("clusterTrustBundle", "/name", Referent::Unsynced("ClusterTrustBundle")),
    r("clusterTrustBundle", "/signerName", Referent::Unsynced("ClusterTrustBundle")),
    r("configMap", "/name", Referent::ConfigMap),
    r("podCertificate", "/signerName", Referent::Unsynced("certificate signer")),
    r("secret", "/name", Referent::Secret),
];

/// Projected source types that name no object (the service-account token is the syncer's to
/// provide: it never asks the host for one).
pub const PROJECTED_SOURCES_WITHOUT_REFERENCES: &[&str] = &["downwardAPI", "serviceAccountToken"];

/// One reference a pod makes from a volume: the volume's name, the field path
/// (`spec.volumes[0].iscsi.secretRef.name`), the table row and the name it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<'a> {
    /// The volume's name.
    pub volume: &'a str,
    /// Where the name sits, as kube-apiserver writes field paths.
    pub path: String,
    /// The row of [`VOLUME_REFERENCES`] or [`PROJECTED_REFERENCES`].
    pub reference: Reference,
    /// The name referred to.
    pub name: &'a str,
}

fn field_path(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

/// Every reference the volumes of pod spec `spec` make (empty names left out).
pub fn volume_references(spec: &Value) -> Vec<Found<'_>> {
    let mut out = Vec::new();
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let volume = v["name"].as_str().unwrap_or("");
        for reference in VOLUME_REFERENCES {
            let pointer = format!("/{}{}", reference.source, reference.pointer);
            if let Some(name) =
                v.pointer(&pointer).and_then(Value::as_str).filter(|n| !n.is_empty())
            {
                out.push(Found {
                    volume,
                    path: format!("spec.volumes[{i}].{}", field_path(&pointer)),
                    reference: *reference,
                    name,
                });
            }
        }
        let sources = v.pointer("/projected/sources").and_then(Value::as_array);
        for (j, s) in sources.into_iter().flatten().enumerate() {
            for reference in PROJECTED_REFERENCES {
                let pointer = format!("/{}{}", reference.source, reference.pointer);
                if let Some(name) =
                    s.pointer(&pointer).and_then(Value::as_str).filter(|n| !n.is_empty())
                {
                    out.push(Found {
                        volume,
                        path: format!(
                            "spec.volumes[{i}].projected.sources[{j}].{}",
                            field_path(&pointer)
                        ),
                        reference: *reference,
                        name,
                    });
                }
            }
        }
    }
    out
}

/// The references of pod spec `spec` the syncer cannot carry to the host, as
/// `spec.volumes[0].glusterfs.endpoints: Endpoints "gl"`, then its volumes of a source the
/// syncer does not carry ([`UNSYNCED_VOLUME_SOURCES`]), as
/// `spec.volumes[1].ephemeral: generic ephemeral volume "scratch"`.
pub fn unsynced_references(spec: &Value) -> Vec<String> {
    let mut out: Vec<String> = volume_references(spec)
        .into_iter()
        .filter_map(|f| match f.reference.referent {
            Referent::Unsynced(kind) => Some(format!("{}: {kind} {:?}", f.path, f.name)),
            _ => None,
        })
        .collect();
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        for (source, what) in UNSYNCED_VOLUME_SOURCES {
            if v.get(*source).is_some_and(|s| !s.is_null()) {
                let name = v["name"].as_str().unwrap_or("");
                out.push(format!("spec.volumes[{i}].{source}: {what} {name:?}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_found_with_their_paths() {
        let spec = json!({"volumes": [
            {"name": "a", "iscsi": {"secretRef": {"name": "chap"}}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "c", "projected": {"sources": [{"secret": {"name": "s"}}, {"podCertificate": {"signerName": "x/y"}}]}},
            {"name": "d", "csi": {"driver": "d", "nodePublishSecretRef": {"name": ""}}},
        ]});
        let found: Vec<(String, &str)> =
            volume_references(&spec).into_iter().map(|f| (f.path, f.name)).collect();
        assert_eq!(
            found,
            [
                ("spec.volumes[0].iscsi.secretRef.name".to_owned(), "chap"),
                ("spec.volumes[1].persistentVolumeClaim.claimName".to_owned(), "data"),
                ("spec.volumes[2].projected.sources[0].secret.name".to_owned(), "s"),
                (
                    "spec.volumes[2].projected.sources[1].podCertificate.signerName".to_owned(),
                    "x/y"
                ),
            ]
        );
        assert_eq!(
            unsynced_references(&spec),
            ["spec.volumes[2].projected.sources[1].podCertificate.signerName: certificate signer \"x/y\""]
        );
        let claim = volume_references(&spec).into_iter().find(|f| f.volume == "b").unwrap();
        assert_eq!(claim.reference.referent, Referent::PersistentVolumeClaim);
        let ephemeral = json!({"volumes": [
            {"name": "cfg", "configMap": {"name": "c"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": ""}}}},
        ]});
        assert_eq!(
            unsynced_references(&ephemeral),
            ["spec.volumes[1].ephemeral: generic ephemeral volume \"scratch\""]
        );
    }
}
