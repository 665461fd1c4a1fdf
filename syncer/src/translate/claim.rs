//! A tenant's PersistentVolumeClaim as its host claim, and the host claim's binding and status
//! back as the tenant's.
//!
//! The host claim is the tenant's own: it is named as the copies are ([`host_names::host_name`])
//! in the tenant's host namespace, labelled and annotated with the tenant object it stands for.
//! Its spec keeps what asks for storage (access modes, resources, volume mode) and its class; what
//! would pick a host object by name or label is refused, since on the host it would find the
//! host's: a `volumeName` (a PersistentVolume), a `selector` (PersistentVolumes by label), a
//! `storageClassName: ""` (PersistentVolumes without a class), a class that provisions nothing
//! (`kubernetes.io/no-provisioner`: its PersistentVolumes are made by hand) or that the host does
//! not have, and a data source other than another claim of the tenant's namespace (which names that
//! claim's host claim). A `volumeAttributesClassName` names a host object too: it is dropped.
//!
//! The tenant has no PersistentVolumes: a bound tenant claim's `spec.volumeName` reads
//! `pvc-<the tenant claim's UID>`, the name an external provisioner gives the volume it makes for a
//! claim, so `kubectl get pvc` reads as on kind or k3s without naming the host's volume.

use super::*;

/// The annotation a claim could name its class with before `spec.storageClassName`.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The annotation that marks the default StorageClass.
pub const IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// Its beta key.
pub const BETA_IS_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The provisioner of classes whose volumes are made by hand.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// Why a tenant claim has no host claim: the message says what the tenant would have to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotCarried {
    /// `spec.volumeName` names a PersistentVolume.
    #[error(
        "spec.volumeName: PersistentVolume {0:?} is not carried to the host cluster, which would \
         bind the claim to its own volume of that name"
    )]
    VolumeName(String),
    /// `spec.selector` picks PersistentVolumes by label.
    #[error(
        "spec.selector picks PersistentVolumes by label, and on the host cluster they would be its \
         own: leave it out to have a volume provisioned"
    )]
    Selector,
    /// A data source names what the syncer does not carry.
    #[error("spec.{field}: {kind} {name:?} is not carried to the host cluster")]
    DataSource {
        /// `dataSource` or `dataSourceRef`.
        field: &'static str,
        /// What it names.
        kind: String,
        /// Its name.
        name: String,
    },
    /// `storageClassName: ""` binds only PersistentVolumes without a class.
    #[error(
        "storageClassName \"\" binds only PersistentVolumes that have no class, and on the host \
         cluster they would be its own: name a StorageClass or leave it out"
    )]
    NoClass,
    /// The claim names no class and the host has no default one.
    #[error("no storageClassName and the host cluster has no default StorageClass")]
    NoDefaultClass,
    /// The class is not one of the host's.
    #[error("storageclass.storage.k8s.io {0:?} not found")]
    UnknownClass(String),
    /// The class provisions nothing: its volumes are made by hand, for the host's own claims.
    #[error(
        "StorageClass {0:?} provisions no volumes (kubernetes.io/no-provisioner): its \
         PersistentVolumes are the host cluster's"
    )]
    StaticClass(String),
}

impl NotCarried {
    /// The reason of the tenant Event that says so: the PV controller's, for a class it cannot
    /// provision with, else Carrel's own.
    pub fn reason(&self) -> &'static str {
        match self {
            NotCarried::UnknownClass(_) | NotCarried::NoDefaultClass => "ProvisioningFailed",
            _ => "ClaimNotCarried",
        }
    }
}

/// The volume name a bound tenant claim shows: `pvc-<its UID>`.
pub fn tenant_volume_name(uid: &str) -> String {
    format!("pvc-{uid}")
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Whether StorageClass `class` is marked as a default one.
pub fn is_default_class(class: &Value) -> bool {
    [IS_DEFAULT_CLASS, BETA_IS_DEFAULT_CLASS].iter().any(|key| {
        class.pointer("/metadata/annotations").and_then(|a| a.get(*key)).and_then(Value::as_str)
            == Some("true")
    })
}

/// The default class among `classes`, as kube-apiserver's `DefaultStorageClass` admission
/// picks it: of those marked default, the newest, then the first by name.
pub fn default_class(classes: &[Value]) -> Option<&str> {
    fn name(c: &Value) -> &str {
        str_at(c, "/metadata/name").unwrap_or("")
    }
    let created = |c: &Value| {
        str_at(c, "/metadata/creationTimestamp")
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    };
    classes
        .iter()
        .filter(|c| is_default_class(c) && !name(c).is_empty())
        .min_by(|a, b| created(b).cmp(&created(a)).then_with(|| name(a).cmp(name(b))))
        .map(name)
}

/// The class claim `claim` asks for (`GetPersistentVolumeClaimClass`, with `None` for a claim that
/// names none): the beta annotation, else `spec.storageClassName`.
pub fn claim_class(claim: &Value) -> Option<&str> {
    claim
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(BETA_STORAGE_CLASS))
        .and_then(Value::as_str)
        .or_else(|| str_at(claim, "/spec/storageClassName"))
}

/// The host class for tenant claim `claim`, of the host's `classes`.
fn host_class(claim: &Value, classes: &[Value]) -> Result<String, NotCarried> {
    let class = match claim_class(claim) {
        Some("") => return Err(NotCarried::NoClass),
        Some(class) => class.to_owned(),
        None => default_class(classes).ok_or(NotCarried::NoDefaultClass)?.to_owned(),
    };
    let found = classes.iter().find(|c| str_at(c, "/metadata/name") == Some(class.as_str()));
    match found.and_then(|c| str_at(c, "/provisioner")) {
        None => Err(NotCarried::UnknownClass(class)),
        Some(NO_PROVISIONER) => Err(NotCarried::StaticClass(class)),
        Some(_) => Ok(class),
    }
}

/// A data source (`dataSource` or `dataSourceRef`) of a claim in `namespace`, for the host: a
/// claim of the same namespace is named by its host claim's name; anything else is refused.
fn host_data_source(
    field: &'static str,
    source: &Value,
    namespace: &str,
) -> Result<Value, NotCarried> {
    let kind = str_at(source, "/kind").unwrap_or("").to_owned();
    let name = str_at(source, "/name").unwrap_or("").to_owned();
    let group = str_at(source, "/apiGroup").unwrap_or("");
    let other_namespace = str_at(source, "/namespace").is_some_and(|n| n != namespace);
    if kind != "PersistentVolumeClaim" || !group.is_empty() || other_namespace {
        return Err(NotCarried::DataSource { field, kind, name });
    }
    Ok(json!({"kind": "PersistentVolumeClaim", "name": host_names::host_name(namespace, &name)}))
}

/// The host claim of tenant claim `claim` of `tenant`, in `host_namespace`, given the host's
/// StorageClasses `classes`: see `claim.rs`'s module notes. The class is always written out (the host's
/// default for a claim that names none), so the host claim never depends on the host's admission.
pub fn host_claim(
    tenant: &str,
    host_namespace: &str,
    claim: &Value,
    classes: &[Value],
) -> Result<Value, NotCarried> {
    let namespace = str_at(claim, "/metadata/namespace").unwrap_or("");
    let name = str_at(claim, "/metadata/name").unwrap_or("");
    let uid = str_at(claim, "/metadata/uid").unwrap_or("");
    let spec = &claim["spec"];
    if let Some(volume) = str_at(spec, "/volumeName").filter(|v| !v.is_empty()) {
        // A name the syncer wrote itself, once the claim was bound, asks for nothing.
        if volume != tenant_volume_name(uid) {
            return Err(NotCarried::VolumeName(volume.to_owned()));
        }
    }
    let selects = spec.get("selector").and_then(Value::as_object).is_some_and(|s| {
        s.values().any(|v| match v {
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::Null => false,
            _ => true,
        })
    });
    if selects {
        return Err(NotCarried::Selector);
    }
    let class = host_class(claim, classes)?;
    let mut host_spec = Map::new();
    for field in ["accessModes", "resources", "volumeMode"] {
        if let Some(v) = spec.get(field).filter(|v| !v.is_null()) {
            host_spec.insert(field.to_owned(), v.clone());
        }
    }
    host_spec.insert("storageClassName".to_owned(), json!(class));
    for field in ["dataSource", "dataSourceRef"] {
        if let Some(source) = spec.get(field).filter(|v| !v.is_null()) {
            let field = if field == "dataSource" { "dataSource" } else { "dataSourceRef" };
            host_spec.insert(field.to_owned(), host_data_source(field, source, namespace)?);
        }
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": host_names::host_name(namespace, name),
            "namespace": host_namespace,
            "labels": host_names::host_labels(tenant),
            "annotations": host_names::host_annotations(namespace, name, uid),
        },
        "spec": host_spec,
    }))
}

/// What the tenant claim is to be given of its host claim: merge patches of its spec and of its
/// status, each `None` when nothing differs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimUp {
    /// `{"spec": …}`: the volume name once the host claim is bound (`pvc-<tenant UID>`), and the
    /// class the host claim was given when the tenant claim named none (as the PV controller
    /// writes the default class into a claim made before there was one).
    pub spec: Option<Value>,
    /// `{"status": …}`: the host claim's phase, capacity, access modes and conditions.
    pub status: Option<Value>,
}

/// What tenant claim `tenant` is to be given of its host claim `host` ([`ClaimUp`]).
pub fn claim_up(tenant: &Value, host: &Value) -> ClaimUp {
    let mut spec = Map::new();
    let bound = str_at(host, "/spec/volumeName").is_some_and(|v| !v.is_empty());
    let shown = str_at(tenant, "/spec/volumeName").unwrap_or("");
    if bound && shown.is_empty() {
        let uid = str_at(tenant, "/metadata/uid").unwrap_or("");
        spec.insert("volumeName".into(), json!(tenant_volume_name(uid)));
    }
    let unclassed = tenant.pointer("/spec/storageClassName").is_none_or(Value::is_null)
        && claim_class(tenant).is_none();
    if let (true, Some(class)) = (unclassed, str_at(host, "/spec/storageClassName")) {
        spec.insert("storageClassName".into(), json!(class));
    }
    let mut wanted = Map::new();
    for field in ["phase", "capacity", "accessModes", "conditions"] {
        let value = host.pointer(&format!("/status/{field}")).cloned().unwrap_or(Value::Null);
        let current = tenant.pointer(&format!("/status/{field}")).cloned().unwrap_or(Value::Null);
        if value != current {
            wanted.insert(field.to_owned(), value);
        }
    }
    ClaimUp {
        spec: (!spec.is_empty()).then(|| json!({"spec": spec})),
        status: (!wanted.is_empty()).then(|| json!({"status": wanted})),
    }
}

/// Whether tenant claim `claim` was bound by the syncer to a host claim (it shows the volume
/// name the syncer writes): once its host claim is gone, its volume is lost.
pub fn bound_by_syncer(claim: &Value) -> bool {
    let uid = str_at(claim, "/metadata/uid").unwrap_or("");
    !uid.is_empty() && str_at(claim, "/spec/volumeName") == Some(tenant_volume_name(uid).as_str())
}

/// The message of the PV controller's `ClaimLost` event.
pub const CLAIM_LOST: &str =
    "Bound claim has lost its PersistentVolume. Data on the volume is lost!";

/// The claim names of pod `pod`'s `persistentVolumeClaim` volumes.
pub fn pod_claims(pod: &Value) -> BTreeSet<String> {
    pod_refs::volume_references(&pod["spec"])
        .into_iter()
        .filter(|f| f.reference.referent == Referent::PersistentVolumeClaim)
        .map(|f| f.name.to_owned())
        .collect()
}
