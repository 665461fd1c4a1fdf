//! The resource types this server serves, and what discovery says about each.
//!
//! Built-in types are static. A tenant's custom resources come and go with its
//! CustomResourceDefinitions: their names are interned ([`intern`]) so that every type has the
//! same shape, and [`ResourceType::custom`] carries what the definition says of the version.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// A subresource of a resource type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// `/status`: the object's status, written separately from its spec.
    Status,
    /// `/scale`: an `autoscaling/v1` Scale view of `spec.replicas`.
    Scale,
}

impl Subresource {
    /// The path segment.
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
        }
    }
}

/// One served resource type (a group, version and plural name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// The API group; empty for the core group.
    pub group: &'static str,
    /// The served version.
    pub version: &'static str,
    /// The object kind.
    pub kind: &'static str,
    /// The plural, lower-case resource name used in paths.
    pub plural: &'static str,
    /// The singular name kubectl accepts.
    pub singular: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`po`, `cm`, …).
    pub short_names: &'static [&'static str],
    /// Categories (`all`).
    pub categories: &'static [&'static str],
    /// Subresources served.
    pub subresources: &'static [Subresource],
    /// The verbs it supports ([`VERBS`] for stored objects).
    pub verbs: &'static [&'static str],
    /// For a custom resource, what its definition says of this version.
    pub custom: Option<CustomRef>,
}

/// A custom resource version's definition, compared by identity: a type is the same type only
/// while its definition is unchanged.
#[derive(Clone, Debug)]
pub struct CustomRef(pub Arc<crate::crd::Custom>);

impl PartialEq for CustomRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CustomRef {}

impl std::ops::Deref for CustomRef {
    type Target = crate::crd::Custom;
    fn deref(&self) -> &crate::crd::Custom {
        &self.0
    }
}

/// A name with the lifetime of the process. Custom resources' names are interned once each (a
/// set that grows with the distinct names ever defined, not with definitions' updates), so that
/// they sit in [`ResourceType`] beside the built-in types' static names. What a cluster may add
/// to the set is bounded by [`crate::crd::limits::MAX_INTERNED_BYTES`] (see [`intern_cost`]).
pub fn intern(name: &str) -> &'static str {
    intern_new(name).0
}

/// [`intern`], and whether the name was new: it takes [`interned_size`] more bytes for good.
pub fn intern_new(name: &str) -> (&'static str, bool) {
    let mut names = names().lock();
    if let Some(found) = names.get(name) {
        return (found, false);
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    (leaked, true)
}

fn names() -> &'static Mutex<HashSet<&'static str>> {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    NAMES.get_or_init(Default::default)
}

fn lists() -> &'static Mutex<HashSet<&'static [&'static str]>> {
    static LISTS: OnceLock<Mutex<HashSet<&'static [&'static str]>>> = OnceLock::new();
    LISTS.get_or_init(Default::default)
}

/// What interning a name or a list of names keeps for good: its bytes and the set's entry.
pub fn interned_size(len: usize) -> usize {
    len + 2 * std::mem::size_of::<&str>()
}

/// The bytes interning `names` and `lists` would add to the process for good: the names and
/// lists not interned yet.
pub fn intern_cost(names_: &[&str], lists_: &[&[String]]) -> usize {
    let known = names().lock();
    let mut cost = 0;
    let mut counted = HashSet::new();
    for name in
        names_.iter().copied().chain(lists_.iter().flat_map(|l| l.iter().map(String::as_str)))
    {
        if !known.contains(name) && counted.insert(name) {
            cost += interned_size(name.len());
        }
    }
    drop(known);
    let known = lists().lock();
    for list in lists_ {
        let found =
            known.iter().any(|l| l.len() == list.len() && l.iter().zip(*list).all(|(a, b)| a == b));
        if !found {
            cost += interned_size(list.len() * std::mem::size_of::<&str>());
        }
    }
    cost
}

/// A list of names with the lifetime of the process, interned as [`intern`] does.
pub fn intern_list(names: &[String]) -> &'static [&'static str] {
    let interned: Vec<&'static str> = names.iter().map(|n| intern(n)).collect();
    let mut lists = lists().lock();
    if let Some(found) = lists.get(interned.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(interned.into_boxed_slice());
    lists.insert(leaked);
    leaked
}

/// The verbs every served resource type supports.
pub const VERBS: &[&str] =
    &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

impl ResourceType {
    /// `group/version`, or just `version` for the core group.
    pub fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether a subresource is served.
    pub fn has(&self, sub: Subresource) -> bool {
        self.subresources.contains(&sub)
    }

    /// Whether a CustomResourceDefinition defines this type.
    pub fn is_custom(&self) -> bool {
        self.custom.is_some()
    }
}

const NONE: &[&str] = &[];
const ALL: &[&str] = &["all"];
/// Only `/status`.
pub const STATUS: &[Subresource] = &[Subresource::Status];
/// Only `/scale`.
pub const SCALE: &[Subresource] = &[Subresource::Scale];
/// `/status` and `/scale`.
pub const STATUS_SCALE: &[Subresource] = &[Subresource::Status, Subresource::Scale];

#[allow(clippy::too_many_arguments)]
const fn rt(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Subresource],
) -> ResourceType {
    ResourceType {
        group,
        version,
        kind,
        plural,
        singular,
        namespaced,
        short_names,
        categories,
        subresources,
        verbs: VERBS,
        custom: None,
    }
}

/// Every built-in resource type, in the order discovery lists them.
pub static BUILT_IN: &[ResourceType] = &[
    rt("", "v1", "Namespace", "namespaces", "namespace", false, &["ns"], NONE, STATUS),
    rt("", "v1", "Pod", "pods", "pod", true, &["po"], ALL, STATUS),
    rt("", "v1", "Service", "services", "service", true, &["svc"], ALL, STATUS),
    rt("", "v1", "Endpoints", "endpoints", "endpoints", true, &["ep"], NONE, &[]),
    rt("", "v1", "ConfigMap", "configmaps", "configmap", true, &["cm"], NONE, &[]),
    rt("", "v1", "Secret", "secrets", "secret", true, NONE, NONE, &[]),
    rt("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", true, &["sa"], NONE, &[]),
    rt("", "v1", "Event", "events", "event", true, &["ev"], NONE, &[]),
    rt("", "v1", "Node", "nodes", "node", false, &["no"], NONE, STATUS),
    rt(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        true,
        &["pvc"],
        NONE,
        STATUS,
    ),
    rt(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        "persistentvolume",
        false,
        &["pv"],
        NONE,
        STATUS,
    ),
    rt(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        "resourcequota",
        true,
        &["quota"],
        NONE,
        STATUS,
    ),
    rt("", "v1", "LimitRange", "limitranges", "limitrange", true, &["limits"], NONE, &[]),
    rt(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        "replicationcontroller",
        true,
        &["rc"],
        ALL,
        STATUS_SCALE,
    ),
    rt(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        "deployment",
        true,
        &["deploy"],
        ALL,
        STATUS_SCALE,
    ),
    rt("apps", "v1", "ReplicaSet", "replicasets", "replicaset", true, &["rs"], ALL, STATUS_SCALE),
    rt(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        "statefulset",
        true,
        &["sts"],
        ALL,
        STATUS_SCALE,
    ),
    rt("apps", "v1", "DaemonSet", "daemonsets", "daemonset", true, &["ds"], ALL, STATUS),
    rt("batch", "v1", "Job", "jobs", "job", true, NONE, ALL, STATUS),
    rt("batch", "v1", "CronJob", "cronjobs", "cronjob", true, &["cj"], ALL, STATUS),
    rt("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, NONE, NONE, &[]),
    rt("events.k8s.io", "v1", "Event", "events", "event", true, &["ev"], NONE, &[]),
    rt("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", true, NONE, NONE, &[]),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        "rolebinding",
        true,
        NONE,
        NONE,
        &[],
    ),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        "clusterrole",
        false,
        NONE,
        NONE,
        &[],
    ),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebinding",
        false,
        NONE,
        NONE,
        &[],
    ),
    rt(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        "networkpolicy",
        true,
        &["netpol"],
        NONE,
        &[],
    ),
    rt("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", true, &["ing"], NONE, STATUS),
    rt(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        true,
        &["pdb"],
        NONE,
        STATUS,
    ),
    rt(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        "priorityclass",
        false,
        &["pc"],
        NONE,
        &[],
    ),
    rt(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        "storageclass",
        false,
        &["sc"],
        NONE,
        &[],
    ),
    rt(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "customresourcedefinition",
        false,
        &["crd", "crds"],
        &["api-extensions"],
        STATUS,
    ),
];

/// A built-in type by group and plural.
pub fn built_in(group: &str, plural: &str) -> Option<&'static ResourceType> {
    BUILT_IN.iter().find(|t| t.group == group && t.plural == plural)
}

/// The served resource types, looked up by group, version and plural.
#[derive(Clone, Debug)]
pub struct Registry {
    types: Vec<ResourceType>,
    host: bool,
}

/// A tenant's cluster: the built-in types.
impl Default for Registry {
    fn default() -> Self {
        Registry { types: BUILT_IN.to_vec(), host: false }
    }
}

impl Registry {
    /// This registry with `extra` types added (for discovery).
    pub fn with_extra(&self, extra: &[ResourceType]) -> Registry {
        let mut types = self.types.clone();
        types.extend_from_slice(extra);
        Registry { types, host: self.host }
    }

    /// The host API's types: the built-in ones and Carrel's `Tenant`.
    pub fn host() -> Registry {
        let mut types = BUILT_IN.to_vec();
        types.push(crate::tenant::types::TENANTS.clone());
        Registry { types, host: true }
    }

    /// Whether this is the host API's registry.
    pub fn is_host(&self) -> bool {
        self.host
    }

    /// The type served at `group/version/plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types.iter().find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// Every served type.
    pub fn all(&self) -> &[ResourceType] {
        &self.types
    }

    /// The served groups, in first-seen order, each with its versions (the first is preferred).
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut groups: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for t in &self.types {
            match groups.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) if !versions.contains(&t.version) => versions.push(t.version),
                Some(_) => {}
                None => groups.push((t.group, vec![t.version])),
            }
        }
        groups
    }

    /// The types served in one group-version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types.iter().filter(move |t| t.group == group && t.version == version)
    }
}
