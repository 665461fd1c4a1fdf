//! The list, map and patch annotations of Kubernetes' fields, which k8s-openapi's schemas do not
//! carry and kube-apiserver's OpenAPI documents do.
//!
//! One table, keyed by (schema name, property), holds every annotation: [`apply`] writes it into
//! the served schemas and [`list_annotations`] answers Rust code (a strategic merge patch needs
//! the merge keys and strategies; server-side apply needs the list types and keys).
//!
//! The facts are those of the k8s.io/api v1.33 Go types: `patchStrategy`/`patchMergeKey` struct
//! tags and `+listType`, `+listMapKey`, `+mapType` and `+structType` comments. An entry whose
//! property is [`SELF`] annotates the schema itself (a `+structType=atomic` struct).
//!
//! Architecture invariant, checked by a test: every entry names a field of a served schema, and
//! every list field of a served schema (other than a list kind's `items`) has an entry with its
//! list type. A kind added to the registry whose schemas bring new lists fails that test until
//! the table says how they merge.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

/// How a list merges (`x-kubernetes-list-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The list is replaced whole.
    Atomic,
    /// The list's scalar items are unique; each is owned on its own.
    Set,
    /// Items are identified by the map keys; each is merged on its own.
    Map,
}

/// How a strategic merge patch treats a field (`x-kubernetes-patch-strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchStrategy {
    /// Lists merge by the merge key (or by value for scalars) instead of being replaced.
    Merge,
    /// Keys absent from the patch are cleared (a union of mutually exclusive fields).
    RetainKeys,
    /// Both of the above.
    MergeRetainKeys,
}

/// How a map or struct merges (`x-kubernetes-map-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// Replaced whole.
    Atomic,
    /// Each key is merged on its own (the default).
    Granular,
}

/// The annotations of one field: the fields left `None` (or empty) are absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListAnnotations {
    /// `x-kubernetes-list-type`.
    pub list_type: Option<ListType>,
    /// `x-kubernetes-list-map-keys`, for a [`ListType::Map`] list.
    pub list_map_keys: &'static [&'static str],
    /// `x-kubernetes-patch-merge-key`.
    pub patch_merge_key: Option<&'static str>,
    /// `x-kubernetes-patch-strategy`.
    pub patch_strategy: Option<PatchStrategy>,
    /// `x-kubernetes-map-type`.
    pub map_type: Option<MapType>,
}

impl ListAnnotations {
    const NONE: ListAnnotations = ListAnnotations {
        list_type: None,
        list_map_keys: &[],
        patch_merge_key: None,
        patch_strategy: None,
        map_type: None,
    };

    /// Patch strategy `merge` with this merge key.
    const fn merge(self, key: &'static str) -> ListAnnotations {
        ListAnnotations {
            patch_strategy: Some(PatchStrategy::Merge),
            patch_merge_key: Some(key),
            ..self
        }
    }

    /// Patch strategy `merge,retainKeys` with this merge key.
    const fn merge_retain_keys(self, key: &'static str) -> ListAnnotations {
        ListAnnotations {
            patch_strategy: Some(PatchStrategy::MergeRetainKeys),
            patch_merge_key: Some(key),
            ..self
        }
    }

    /// Patch strategy `merge` without a key: a list of scalars merged by value.
    const fn merge_values(self) -> ListAnnotations {
        ListAnnotations { patch_strategy: Some(PatchStrategy::Merge), ..self }
    }

    /// The extensions as they appear in a schema.
    pub fn extensions(&self) -> Map<String, Value> {
        let mut out = Map::new();
        if let Some(list_type) = self.list_type {
            let name = match list_type {
                ListType::Atomic => "atomic",
                ListType::Set => "set",
                ListType::Map => "map",
            };
            out.insert("x-kubernetes-list-type".into(), json!(name));
        }
        if !self.list_map_keys.is_empty() {
            out.insert("x-kubernetes-list-map-keys".into(), json!(self.list_map_keys));
        }
        if let Some(key) = self.patch_merge_key {
            out.insert("x-kubernetes-patch-merge-key".into(), json!(key));
        }
        if let Some(strategy) = self.patch_strategy {
            let name = match strategy {
                PatchStrategy::Merge => "merge",
                PatchStrategy::RetainKeys => "retainKeys",
                PatchStrategy::MergeRetainKeys => "merge,retainKeys",
            };
            out.insert("x-kubernetes-patch-strategy".into(), json!(name));
        }
        if let Some(map_type) = self.map_type {
            let name = match map_type {
                MapType::Atomic => "atomic",
                MapType::Granular => "granular",
            };
            out.insert("x-kubernetes-map-type".into(), json!(name));
        }
        out
    }
}

/// `+listType=atomic`.
const ATOMIC: ListAnnotations =
    ListAnnotations { list_type: Some(ListType::Atomic), ..ListAnnotations::NONE };

/// `+listType=set`.
const SET: ListAnnotations =
    ListAnnotations { list_type: Some(ListType::Set), ..ListAnnotations::NONE };

/// `+mapType=atomic` on a map field, or `+structType=atomic` on a struct.
const MAP_ATOMIC: ListAnnotations =
    ListAnnotations { map_type: Some(MapType::Atomic), ..ListAnnotations::NONE };

/// `+patchStrategy=retainKeys` alone.
const RETAIN_KEYS: ListAnnotations =
    ListAnnotations { patch_strategy: Some(PatchStrategy::RetainKeys), ..ListAnnotations::NONE };

/// `+listType=map` with these `+listMapKey`s.
const fn map(keys: &'static [&'static str]) -> ListAnnotations {
    ListAnnotations { list_type: Some(ListType::Map), list_map_keys: keys, ..ListAnnotations::NONE }
}

/// The property naming the schema itself.
pub const SELF: &str = "";

const CORE: &str = "io.k8s.api.core.v1.";
const APPS: &str = "io.k8s.api.apps.v1.";
const BATCH: &str = "io.k8s.api.batch.v1.";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";
const RBAC: &str = "io.k8s.api.rbac.v1.";
const NETWORKING: &str = "io.k8s.api.networking.v1.";
const POLICY: &str = "io.k8s.api.policy.v1.";
const STORAGE: &str = "io.k8s.api.storage.v1.";
const CARREL: &str = "dev.carrel.v1alpha1.";
const APIEXTENSIONS: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.";

/// Every annotated field: (package, schema name, property, annotations); the package prefix
/// and the name make the schema's full name.
#[rustfmt::skip]
static TABLE: &[(&str, &str, &str, ListAnnotations)] = &[
    // core/v1: pods and their templates.
    (CORE, "PodSpec", "containers", map(&["name"]).merge("name")),
    (CORE, "PodSpec", "initContainers", map(&["name"]).merge("name")),
    (CORE, "PodSpec", "ephemeralContainers", map(&["name"]).merge("name")),
    (CORE, "PodSpec", "volumes", map(&["name"]).merge_retain_keys("name")),
    (CORE, "PodSpec", "imagePullSecrets", map(&["name"]).merge("name")),
    (CORE, "PodSpec", "hostAliases", map(&["ip"]).merge("ip")),
    (CORE, "PodSpec", "topologySpreadConstraints", map(&["topologyKey", "whenUnsatisfiable"]).merge("topologyKey")),
    (CORE, "PodSpec", "resourceClaims", map(&["name"]).merge_retain_keys("name")),
    (CORE, "PodSpec", "schedulingGates", map(&["name"]).merge("name")),
    (CORE, "PodSpec", "tolerations", ATOMIC),
    (CORE, "PodSpec", "readinessGates", ATOMIC),
    (CORE, "PodSpec", "nodeSelector", MAP_ATOMIC),
    (CORE, "Container", "ports", map(&["containerPort", "protocol"]).merge("containerPort")),
    (CORE, "Container", "env", map(&["name"]).merge("name")),
    (CORE, "Container", "volumeMounts", map(&["mountPath"]).merge("mountPath")),
    (CORE, "Container", "volumeDevices", map(&["devicePath"]).merge("devicePath")),
    (CORE, "Container", "command", ATOMIC),
    (CORE, "Container", "args", ATOMIC),
    (CORE, "Container", "envFrom", ATOMIC),
    (CORE, "Container", "resizePolicy", ATOMIC),
    (CORE, "EphemeralContainer", "ports", map(&["containerPort", "protocol"]).merge("containerPort")),
    (CORE, "EphemeralContainer", "env", map(&["name"]).merge("name")),
    (CORE, "EphemeralContainer", "volumeMounts", map(&["mountPath"]).merge("mountPath")),
    (CORE, "EphemeralContainer", "volumeDevices", map(&["devicePath"]).merge("devicePath")),
    (CORE, "EphemeralContainer", "command", ATOMIC),
    (CORE, "EphemeralContainer", "args", ATOMIC),
    (CORE, "EphemeralContainer", "envFrom", ATOMIC),
    (CORE, "EphemeralContainer", "resizePolicy", ATOMIC),
    (CORE, "ResourceRequirements", "claims", map(&["name"])),
    (CORE, "PodSecurityContext", "supplementalGroups", ATOMIC),
    (CORE, "PodSecurityContext", "sysctls", ATOMIC),
    (CORE, "Capabilities", "add", ATOMIC),
    (CORE, "Capabilities", "drop", ATOMIC),
    (CORE, "PodDNSConfig", "nameservers", ATOMIC),
    (CORE, "PodDNSConfig", "searches", ATOMIC),
    (CORE, "PodDNSConfig", "options", ATOMIC),
    (CORE, "HostAlias", "hostnames", ATOMIC),
    (CORE, "ExecAction", "command", ATOMIC),
    (CORE, "HTTPGetAction", "httpHeaders", ATOMIC),
    (CORE, "NodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution", ATOMIC),
    (CORE, "NodeSelector", "nodeSelectorTerms", ATOMIC),
    (CORE, "NodeSelectorTerm", "matchExpressions", ATOMIC),
    (CORE, "NodeSelectorTerm", "matchFields", ATOMIC),
    (CORE, "NodeSelectorRequirement", "values", ATOMIC),
    (CORE, "PodAffinity", "requiredDuringSchedulingIgnoredDuringExecution", ATOMIC),
    (CORE, "PodAffinity", "preferredDuringSchedulingIgnoredDuringExecution", ATOMIC),
    (CORE, "PodAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", ATOMIC),
    (CORE, "PodAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", ATOMIC),
    (CORE, "PodAffinityTerm", "namespaces", ATOMIC),
    (CORE, "PodAffinityTerm", "matchLabelKeys", ATOMIC),
    (CORE, "PodAffinityTerm", "mismatchLabelKeys", ATOMIC),
    (CORE, "TopologySpreadConstraint", "matchLabelKeys", ATOMIC),
    (CORE, "PodStatus", "conditions", map(&["type"]).merge("type")),
    (CARREL, "TenantSpec", "allowedTolerations", ATOMIC),
    (CARREL, "TenantStatus", "conditions", map(&["type"]).merge("type")),
    (CORE, "PodStatus", "podIPs", map(&["ip"]).merge("ip")),
    (CORE, "PodStatus", "hostIPs", ATOMIC.merge("ip")),
    (CORE, "PodStatus", "initContainerStatuses", ATOMIC),
    (CORE, "PodStatus", "containerStatuses", ATOMIC),
    (CORE, "PodStatus", "ephemeralContainerStatuses", ATOMIC),
    (CORE, "PodStatus", "resourceClaimStatuses", map(&["name"]).merge_retain_keys("name")),
    (CORE, "ContainerStatus", "volumeMounts", map(&["mountPath"]).merge("mountPath")),
    (CORE, "ContainerStatus", "allocatedResourcesStatus", map(&["name"]).merge("name")),
    (CORE, "ResourceStatus", "resources", map(&["resourceID"])),
    (CORE, "LinuxContainerUser", "supplementalGroups", ATOMIC),
    // core/v1: volumes, ConfigMap and Secret projections.
    (CORE, "ConfigMapVolumeSource", "items", ATOMIC),
    (CORE, "SecretVolumeSource", "items", ATOMIC),
    (CORE, "ConfigMapProjection", "items", ATOMIC),
    (CORE, "SecretProjection", "items", ATOMIC),
    (CORE, "DownwardAPIVolumeSource", "items", ATOMIC),
    (CORE, "DownwardAPIProjection", "items", ATOMIC),
    (CORE, "ProjectedVolumeSource", "sources", ATOMIC),
    (CORE, "CephFSVolumeSource", "monitors", ATOMIC),
    (CORE, "CephFSPersistentVolumeSource", "monitors", ATOMIC),
    (CORE, "RBDVolumeSource", "monitors", ATOMIC),
    (CORE, "RBDPersistentVolumeSource", "monitors", ATOMIC),
    (CORE, "ISCSIVolumeSource", "portals", ATOMIC),
    (CORE, "ISCSIPersistentVolumeSource", "portals", ATOMIC),
    (CORE, "FCVolumeSource", "targetWWNs", ATOMIC),
    (CORE, "FCVolumeSource", "wwids", ATOMIC),
    (CORE, "PersistentVolumeSpec", "accessModes", ATOMIC),
    (CORE, "PersistentVolumeSpec", "mountOptions", ATOMIC),
    (CORE, "PersistentVolumeClaimSpec", "accessModes", ATOMIC),
    (CORE, "PersistentVolumeClaimStatus", "accessModes", ATOMIC),
    (CORE, "PersistentVolumeClaimStatus", "conditions", map(&["type"]).merge("type")),
    // core/v1: services, endpoints, service accounts.
    (CORE, "ServiceSpec", "ports", map(&["port", "protocol"]).merge("port")),
    (CORE, "ServiceSpec", "selector", MAP_ATOMIC),
    (CORE, "ServiceSpec", "clusterIPs", ATOMIC),
    (CORE, "ServiceSpec", "externalIPs", ATOMIC),
    (CORE, "ServiceSpec", "ipFamilies", ATOMIC),
    (CORE, "ServiceSpec", "loadBalancerSourceRanges", ATOMIC),
    (CORE, "ServiceStatus", "conditions", map(&["type"]).merge("type")),
    (CORE, "LoadBalancerStatus", "ingress", ATOMIC),
    (CORE, "LoadBalancerIngress", "ports", ATOMIC),
    (CORE, "Endpoints", "subsets", ATOMIC),
    (CORE, "EndpointSubset", "addresses", ATOMIC),
    (CORE, "EndpointSubset", "notReadyAddresses", ATOMIC),
    (CORE, "EndpointSubset", "ports", ATOMIC),
    (CORE, "ServiceAccount", "secrets", map(&["name"]).merge("name")),
    (CORE, "ServiceAccount", "imagePullSecrets", ATOMIC),
    // core/v1: namespaces, nodes, quotas, replication controllers.
    (CORE, "NamespaceSpec", "finalizers", ATOMIC),
    (CORE, "NamespaceStatus", "conditions", map(&["type"]).merge("type")),
    (CORE, "NodeSpec", "podCIDRs", SET.merge_values()),
    (CORE, "NodeSpec", "taints", ATOMIC),
    (CORE, "NodeStatus", "conditions", map(&["type"]).merge("type")),
    (CORE, "NodeStatus", "addresses", map(&["type"]).merge("type")),
    (CORE, "NodeStatus", "images", ATOMIC),
    (CORE, "NodeStatus", "volumesInUse", ATOMIC),
    (CORE, "NodeStatus", "volumesAttached", ATOMIC),
    (CORE, "NodeStatus", "runtimeHandlers", ATOMIC),
    (CORE, "ContainerImage", "names", ATOMIC),
    (CORE, "LimitRangeSpec", "limits", ATOMIC),
    (CORE, "ResourceQuotaSpec", "scopes", ATOMIC),
    (CORE, "ScopeSelector", "matchExpressions", ATOMIC),
    (CORE, "ScopedResourceSelectorRequirement", "values", ATOMIC),
    (CORE, "TopologySelectorTerm", "matchLabelExpressions", ATOMIC),
    (CORE, "TopologySelectorLabelRequirement", "values", ATOMIC),
    (CORE, "ReplicationControllerSpec", "selector", MAP_ATOMIC),
    (CORE, "ReplicationControllerStatus", "conditions", map(&["type"]).merge("type")),
    // core/v1: structs replaced whole (+structType=atomic).
    (CORE, "LocalObjectReference", SELF, MAP_ATOMIC),
    (CORE, "ObjectReference", SELF, MAP_ATOMIC),
    (CORE, "TypedLocalObjectReference", SELF, MAP_ATOMIC),
    (CORE, "SecretReference", SELF, MAP_ATOMIC),
    (CORE, "ConfigMapKeySelector", SELF, MAP_ATOMIC),
    (CORE, "SecretKeySelector", SELF, MAP_ATOMIC),
    (CORE, "ObjectFieldSelector", SELF, MAP_ATOMIC),
    (CORE, "ResourceFieldSelector", SELF, MAP_ATOMIC),
    (CORE, "NodeSelector", SELF, MAP_ATOMIC),
    (CORE, "NodeSelectorTerm", SELF, MAP_ATOMIC),
    (CORE, "TopologySelectorTerm", SELF, MAP_ATOMIC),
    // apps/v1.
    (APPS, "DeploymentSpec", "strategy", RETAIN_KEYS),
    (APPS, "DeploymentStatus", "conditions", map(&["type"]).merge("type")),
    (APPS, "ReplicaSetStatus", "conditions", map(&["type"]).merge("type")),
    (APPS, "StatefulSetSpec", "volumeClaimTemplates", ATOMIC),
    (APPS, "StatefulSetStatus", "conditions", map(&["type"]).merge("type")),
    (APPS, "DaemonSetStatus", "conditions", map(&["type"]).merge("type")),
    // batch/v1.
    (BATCH, "JobStatus", "conditions", ATOMIC.merge("type")),
    (BATCH, "CronJobStatus", "active", ATOMIC),
    (BATCH, "PodFailurePolicy", "rules", ATOMIC),
    (BATCH, "PodFailurePolicyRule", "onPodConditions", ATOMIC),
    (BATCH, "PodFailurePolicyOnExitCodesRequirement", "values", SET),
    (BATCH, "SuccessPolicy", "rules", ATOMIC),
    (BATCH, "UncountedTerminatedPods", "succeeded", SET),
    (BATCH, "UncountedTerminatedPods", "failed", SET),
    // rbac.authorization.k8s.io/v1.
    (RBAC, "Role", "rules", ATOMIC),
    (RBAC, "ClusterRole", "rules", ATOMIC),
    (RBAC, "RoleBinding", "subjects", ATOMIC),
    (RBAC, "ClusterRoleBinding", "subjects", ATOMIC),
    (RBAC, "PolicyRule", "verbs", ATOMIC),
    (RBAC, "PolicyRule", "apiGroups", ATOMIC),
    (RBAC, "PolicyRule", "resources", ATOMIC),
    (RBAC, "PolicyRule", "resourceNames", ATOMIC),
    (RBAC, "PolicyRule", "nonResourceURLs", ATOMIC),
    (RBAC, "AggregationRule", "clusterRoleSelectors", ATOMIC),
    (RBAC, "RoleRef", SELF, MAP_ATOMIC),
    // networking.k8s.io/v1.
    (NETWORKING, "NetworkPolicySpec", "ingress", ATOMIC),
    (NETWORKING, "NetworkPolicySpec", "egress", ATOMIC),
    (NETWORKING, "NetworkPolicySpec", "policyTypes", ATOMIC),
    (NETWORKING, "NetworkPolicyIngressRule", "ports", ATOMIC),
    (NETWORKING, "NetworkPolicyIngressRule", "from", ATOMIC),
    (NETWORKING, "NetworkPolicyEgressRule", "ports", ATOMIC),
    (NETWORKING, "NetworkPolicyEgressRule", "to", ATOMIC),
    (NETWORKING, "IPBlock", "except", ATOMIC),
    (NETWORKING, "IngressSpec", "tls", ATOMIC),
    (NETWORKING, "IngressSpec", "rules", ATOMIC),
    (NETWORKING, "IngressTLS", "hosts", ATOMIC),
    (NETWORKING, "HTTPIngressRuleValue", "paths", ATOMIC),
    (NETWORKING, "IngressLoadBalancerStatus", "ingress", ATOMIC),
    (NETWORKING, "IngressLoadBalancerIngress", "ports", ATOMIC),
    // policy/v1, storage.k8s.io/v1.
    (POLICY, "PodDisruptionBudgetStatus", "conditions", map(&["type"]).merge("type")),
    (STORAGE, "StorageClass", "mountOptions", ATOMIC),
    (STORAGE, "StorageClass", "allowedTopologies", ATOMIC),
    // apiextensions.k8s.io/v1.
    (APIEXTENSIONS, "CustomResourceDefinitionNames", "shortNames", ATOMIC),
    (APIEXTENSIONS, "CustomResourceDefinitionNames", "categories", ATOMIC),
    (APIEXTENSIONS, "CustomResourceDefinitionSpec", "versions", ATOMIC),
    (APIEXTENSIONS, "CustomResourceDefinitionVersion", "additionalPrinterColumns", ATOMIC),
    (APIEXTENSIONS, "CustomResourceDefinitionVersion", "selectableFields", ATOMIC),
    (APIEXTENSIONS, "CustomResourceDefinitionStatus", "conditions", map(&["type"]).merge("type")),
    (APIEXTENSIONS, "CustomResourceDefinitionStatus", "storedVersions", ATOMIC),
    (APIEXTENSIONS, "WebhookConversion", "conversionReviewVersions", ATOMIC),
    (APIEXTENSIONS, "JSONSchemaProps", "required", ATOMIC),
    (APIEXTENSIONS, "JSONSchemaProps", "enum", ATOMIC),
    (APIEXTENSIONS, "JSONSchemaProps", "allOf", ATOMIC),
    (APIEXTENSIONS, "JSONSchemaProps", "anyOf", ATOMIC),
    (APIEXTENSIONS, "JSONSchemaProps", "oneOf", ATOMIC),
    (APIEXTENSIONS, "JSONSchemaProps", "x-kubernetes-list-map-keys", ATOMIC),
    (APIEXTENSIONS, "JSONSchemaProps", "x-kubernetes-validations", map(&["rule"]).merge("rule")),
    // meta/v1.
    (META, "ObjectMeta", "ownerReferences", map(&["uid"]).merge("uid")),
    (META, "ObjectMeta", "finalizers", SET.merge_values()),
    (META, "ObjectMeta", "managedFields", ATOMIC),
    (META, "LabelSelector", "matchExpressions", ATOMIC),
    (META, "LabelSelector", SELF, MAP_ATOMIC),
    (META, "LabelSelectorRequirement", "values", ATOMIC),
    (META, "DeleteOptions", "dryRun", ATOMIC),
    (META, "StatusDetails", "causes", ATOMIC),
    (META, "APIResourceList", "resources", ATOMIC),
    (META, "APIResource", "verbs", ATOMIC),
    (META, "APIResource", "shortNames", ATOMIC),
    (META, "APIResource", "categories", ATOMIC),
];

/// The annotations of `schema`'s `property` (`io.k8s.api.core.v1.PodSpec`, `containers`), or of
/// the schema itself for the property [`SELF`]; `None` when Kubernetes sets none.
pub fn list_annotations(schema: &str, property: &str) -> Option<&'static ListAnnotations> {
    type Index = HashMap<String, HashMap<&'static str, &'static ListAnnotations>>;
    static INDEX: OnceLock<Index> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        let mut index = Index::new();
        for (package, name, property, annotations) in TABLE {
            index.entry(format!("{package}{name}")).or_default().insert(*property, annotations);
        }
        index
    });
    index.get(schema)?.get(property).copied()
}

/// Every entry of the table, with its full schema name.
pub fn all() -> impl Iterator<Item = (String, &'static str, &'static ListAnnotations)> {
    TABLE.iter().map(|(package, name, property, a)| (format!("{package}{name}"), *property, a))
}

/// Write the table's annotations into the schemas it names that are present.
pub fn apply(schemas: &mut Map<String, Value>) {
    for (schema, property, annotations) in all() {
        let Some(Value::Object(target)) = schemas.get_mut(&schema) else { continue };
        let target = if property == SELF {
            target
        } else {
            match target.get_mut("properties").and_then(|p| p.get_mut(property)) {
                Some(Value::Object(field)) => field,
                _ => continue,
            }
        };
        target.extend(annotations.extensions());
    }
}
