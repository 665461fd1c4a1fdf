//! The bootstrap policy: the default ClusterRoles and ClusterRoleBindings of kube-apiserver v1.33
//! (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`, as its
//! `testdata/cluster-roles.yaml` lists them), for the resources this server serves.
//!
//! `admin`, `edit` and `view` are aggregated roles, as in Kubernetes: their rules come from the
//! ClusterRoles labelled `rbac.authorization.k8s.io/aggregate-to-admin|edit|view: "true"` —
//! `system:aggregate-to-admin|edit|view`, which hold the actual rules, and `edit` (aggregated into
//! `admin`) and `view` (into `edit`). Their `rules` are empty here; [`super::aggregate`] fills them.
//!
//! Left out of kube's rule sets: the legacy `extensions` group, which this server does not serve.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, RBAC_GROUP, SYSTEM_MASTERS};

/// The label every bootstrap object carries.
pub const BOOTSTRAPPING_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// The annotation that lets the server reconcile bootstrap objects on start.
pub const AUTOUPDATE_ANNOTATION: (&str, &str) =
    ("rbac.authorization.kubernetes.io/autoupdate", "true");
/// Labels that put a ClusterRole into `admin`, `edit`, `view`.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
/// See [`AGGREGATE_TO_ADMIN`].
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
/// See [`AGGREGATE_TO_ADMIN`].
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

const READ: &[&str] = &["get", "list", "watch"];
/// The resource metrics API's group (`crate::metrics::GROUP`, named here so that the roles
/// need nothing of what serves it).
const METRICS: &str = "metrics.k8s.io";
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] =
    &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

const CORE: &str = "";
const APPS: &str = "apps";
const AUTOSCALING: &str = "autoscaling";
const BATCH: &str = "batch";
const POLICY: &str = "policy";
const NETWORKING: &str = "networking.k8s.io";
const COORDINATION: &str = "coordination.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// A resource rule: `verbs` on `resources` of one group.
fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

/// A non-resource rule: `verbs` on `urls`.
fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        non_resource_urls: Some(strings(urls)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

fn meta(name: &str, extra_labels: &[&str]) -> ObjectMeta {
    let mut labels =
        BTreeMap::from([(BOOTSTRAPPING_LABEL.0.to_owned(), BOOTSTRAPPING_LABEL.1.to_owned())]);
    labels.extend(extra_labels.iter().map(|l| ((*l).to_owned(), "true".to_owned())));
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(
            AUTOUPDATE_ANNOTATION.0.to_owned(),
            AUTOUPDATE_ANNOTATION.1.to_owned(),
        )])),
        ..ObjectMeta::default()
    }
}

fn role(name: &str, labels: &[&str], rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole { metadata: meta(name, labels), rules: Some(rules), aggregation_rule: None }
}

/// An aggregated role selecting `selects: "true"`.
fn aggregated(name: &str, labels: &[&str], selects: &str) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, labels),
        rules: None,
        aggregation_rule: Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some(BTreeMap::from([(selects.to_owned(), "true".to_owned())])),
                match_expressions: None,
            }]),
        }),
    }
}

/// The bootstrap ClusterRoles.
pub fn cluster_roles() -> Vec<ClusterRole> {
    vec![
        // A "root" role which can do absolutely anything.
        role("cluster-admin", &[], vec![rule(&["*"], "*", &["*"]), urls(&["*"], &["*"])]),
        // Just enough to discover API versions for negotiation.
        role(
            "system:discovery",
            &[],
            vec![urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        // Minimal access for a user to learn about themselves.
        role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    &["create"],
                    AUTHORIZATION,
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(&["create"], AUTHENTICATION, &["selfsubjectreviews"]),
            ],
        ),
        // What anyone, even unauthenticated, may see.
        role(
            "system:public-info-viewer",
            &[],
            vec![urls(&["get"], &["/healthz", "/livez", "/readyz", "/version", "/version/"])],
        ),
        aggregated("admin", &[], AGGREGATE_TO_ADMIN),
        role(
            "system:aggregate-to-admin",
            &[AGGREGATE_TO_ADMIN],
            vec![
                rule(&["create"], AUTHORIZATION, &["localsubjectaccessreviews"]),
                rule(READ_WRITE, RBAC_GROUP, &["rolebindings", "roles"]),
            ],
        ),
        aggregated("edit", &[AGGREGATE_TO_ADMIN], AGGREGATE_TO_EDIT),
        role("system:aggregate-to-edit", &[AGGREGATE_TO_EDIT], aggregate_to_edit()),
        aggregated("view", &[AGGREGATE_TO_EDIT], AGGREGATE_TO_VIEW),
        role("system:aggregate-to-view", &[AGGREGATE_TO_VIEW], aggregate_to_view()),
        // What metrics-server's installation adds: reading resource metrics (`kubectl top`),
        // for whoever may view.
        role(
            "system:aggregated-metrics-reader",
            &[AGGREGATE_TO_VIEW, AGGREGATE_TO_EDIT, AGGREGATE_TO_ADMIN],
            vec![rule(READ, METRICS, &["pods", "nodes"])],
        ),
    ]
}

fn aggregate_to_edit() -> Vec<PolicyRule> {
    vec![
        // Read on the resources that can escalate.
        rule(
            READ,
            CORE,
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
        ),
        rule(&["impersonate"], CORE, &["serviceaccounts"]),
        rule(WRITE, CORE, &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        rule(&["create"], CORE, &["pods/eviction"]),
        rule(
            WRITE,
            CORE,
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        rule(&["create"], CORE, &["serviceaccounts/token"]),
        rule(
            WRITE,
            APPS,
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        rule(WRITE, AUTOSCALING, &["horizontalpodautoscalers"]),
        rule(WRITE, BATCH, &["cronjobs", "jobs"]),
        rule(WRITE, POLICY, &["poddisruptionbudgets"]),
        rule(WRITE, NETWORKING, &["ingresses", "networkpolicies"]),
        rule(READ_WRITE, COORDINATION, &["leases"]),
    ]
}

fn aggregate_to_view() -> Vec<PolicyRule> {
    vec![
        rule(
            READ,
            CORE,
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        rule(
            READ,
            CORE,
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        // Read access to namespaces at the namespace scope means reading *this* namespace.
        rule(READ, CORE, &["namespaces"]),
        rule(
            READ,
            APPS,
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        rule(READ, AUTOSCALING, &["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        rule(READ, BATCH, &["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        rule(READ, POLICY, &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        rule(READ, NETWORKING, &["ingresses", "ingresses/status", "networkpolicies"]),
        rule(READ, DISCOVERY, &["endpointslices"]),
    ]
}

fn binding(name: &str, groups: &[&str]) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(name, &[]),
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_owned(),
            kind: "ClusterRole".to_owned(),
            name: name.to_owned(),
        },
        subjects: Some(
            groups
                .iter()
                .map(|g| Subject {
                    api_group: Some(RBAC_GROUP.to_owned()),
                    kind: "Group".to_owned(),
                    name: (*g).to_owned(),
                    namespace: None,
                })
                .collect(),
        ),
    }
}

/// The bootstrap ClusterRoleBindings, each named after the ClusterRole it binds.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        binding("cluster-admin", &[SYSTEM_MASTERS]),
        binding("system:discovery", &[ALL_AUTHENTICATED]),
        binding("system:basic-user", &[ALL_AUTHENTICATED]),
        binding("system:public-info-viewer", &[ALL_AUTHENTICATED, ALL_UNAUTHENTICATED]),
    ]
}
