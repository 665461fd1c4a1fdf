use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReviewSpec, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use super::review::{
    local_subject_access_review, self_subject_access_review, self_subject_rules_review,
    subject_access_review,
};
use super::*;

// ---- builders ----------------------------------------------------------------------------------

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

fn named(mut rule: PolicyRule, names: &[&str]) -> PolicyRule {
    rule.resource_names = Some(strings(names));
    rule
}

fn url_rule(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        non_resource_urls: Some(strings(urls)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

fn role(namespace: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
    Role { metadata: meta(Some(namespace), name), rules: Some(rules) }
}

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole { metadata: meta(None, name), rules: Some(rules), aggregation_rule: None }
}

fn labelled(mut role: ClusterRole, labels: &[(&str, &str)]) -> ClusterRole {
    role.metadata.labels =
        Some(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
    role
}

fn aggregated(name: &str, selectors: Vec<LabelSelector>) -> ClusterRole {
    ClusterRole {
        metadata: meta(None, name),
        rules: None,
        aggregation_rule: Some(AggregationRule { cluster_role_selectors: Some(selectors) }),
    }
}

fn match_labels(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ),
        match_expressions: None,
    }
}

fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: if values.is_empty() { None } else { Some(strings(values)) },
    }
}

fn subject(kind: &str, name: &str, namespace: Option<&str>) -> Subject {
    Subject {
        api_group: None,
        kind: kind.to_owned(),
        name: name.to_owned(),
        namespace: namespace.map(str::to_owned),
    }
}

fn user_subject(name: &str) -> Subject {
    subject("User", name, None)
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef { api_group: RBAC_GROUP.to_owned(), kind: kind.to_owned(), name: name.to_owned() }
}

fn crb(name: &str, cluster_role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(None, name),
        role_ref: role_ref("ClusterRole", cluster_role),
        subjects: Some(subjects),
    }
}

fn rb(namespace: &str, name: &str, kind: &str, role: &str, subjects: Vec<Subject>) -> RoleBinding {
    RoleBinding {
        metadata: meta(Some(namespace), name),
        role_ref: role_ref(kind, role),
        subjects: Some(subjects),
    }
}

fn alice() -> UserInfo {
    UserInfo::new("alice", ["system:authenticated"])
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::new(name, groups.iter().copied())
}

fn req(user: &UserInfo, verb: &str, group: &str, resource: &str, ns: &str) -> Attributes {
    Attributes::resource(user.clone(), verb, group, resource).with_namespace(ns)
}

/// The bootstrap policy plus some objects.
fn with_bootstrap(
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
) -> Policy {
    let mut all_cluster_roles = bootstrap::cluster_roles();
    all_cluster_roles.extend(cluster_roles);
    let mut all_bindings = bootstrap::cluster_role_bindings();
    all_bindings.extend(cluster_role_bindings);
    Policy::new(roles, role_bindings, all_cluster_roles, all_bindings)
}

/// Bootstrap, and alice bound to `cluster_role` in namespace `a` by a RoleBinding.
fn alice_in_a(cluster_role: &str) -> Policy {
    with_bootstrap(
        vec![],
        vec![rb("a", "alice-binding", "ClusterRole", cluster_role, vec![user_subject("alice")])],
        vec![],
        vec![],
    )
}

/// A policy where alice holds exactly `rules` cluster-wide.
fn alice_holds(rules: Vec<PolicyRule>) -> Policy {
    Policy::new(
        [],
        [],
        [cluster_role("r", rules)],
        [crb("alice-r", "r", vec![user_subject("alice")])],
    )
}

fn allowed(policy: &Policy, attributes: &Attributes) -> bool {
    policy.authorize(attributes).allowed
}

// ---- rule matching -----------------------------------------------------------------------------

#[test]
fn rule_matches_verb_group_and_resource() {
    let r = rule(&["get", "list"], &[""], &["pods"]);
    let u = alice();
    assert!(rule_allows(&req(&u, "get", "", "pods", "a"), &r));
    assert!(rule_allows(&req(&u, "list", "", "pods", ""), &r));
    assert!(!rule_allows(&req(&u, "watch", "", "pods", "a"), &r));
    assert!(!rule_allows(&req(&u, "get", "apps", "pods", "a"), &r));
    assert!(!rule_allows(&req(&u, "get", "", "services", "a"), &r));
}

#[test]
fn wildcards_match_every_verb_group_and_resource() {
    let u = alice();
    let all = rule(&["*"], &["*"], &["*"]);
    assert!(rule_allows(&req(&u, "escalate", "rbac.authorization.k8s.io", "roles", "a"), &all));
    assert!(rule_allows(&req(&u, "get", "", "pods", "").with_subresource("log"), &all));
    assert!(!rule_allows(&Attributes::non_resource(u.clone(), "get", "/healthz"), &all));
    let any_verb = rule(&["*"], &["apps"], &["deployments"]);
    assert!(rule_allows(&req(&u, "deletecollection", "apps", "deployments", "a"), &any_verb));
    assert!(!rule_allows(&req(&u, "get", "batch", "deployments", "a"), &any_verb));
}

#[test]
fn subresources_match_only_their_own_form() {
    let u = alice();
    let log = rule(&["get"], &[""], &["pods/log"]);
    assert!(rule_allows(&req(&u, "get", "", "pods", "a").with_subresource("log"), &log));
    assert!(!rule_allows(&req(&u, "get", "", "pods", "a"), &log));
    assert!(!rule_allows(&req(&u, "get", "", "pods", "a").with_subresource("exec"), &log));
    let pods = rule(&["get"], &[""], &["pods"]);
    assert!(!rule_allows(&req(&u, "get", "", "pods", "a").with_subresource("log"), &pods));
}

#[test]
fn star_slash_subresource_matches_that_subresource_of_every_resource() {
    let u = alice();
    let scale = rule(&["update"], &["*"], &["*/scale"]);
    assert!(rule_allows(
        &req(&u, "update", "apps", "deployments", "a").with_subresource("scale"),
        &scale
    ));
    assert!(rule_allows(
        &req(&u, "update", "", "replicationcontrollers", "a").with_subresource("scale"),
        &scale
    ));
    assert!(!rule_allows(&req(&u, "update", "apps", "deployments", "a"), &scale));
    assert!(!rule_allows(
        &req(&u, "update", "apps", "deployments", "a").with_subresource("status"),
        &scale
    ));
}

#[test]
fn resource_slash_star_is_not_a_wildcard_in_kube() {
    // ResourceMatches knows `*` and `*/sub` only; `pods/*` matches nothing real.
    let u = alice();
    let r = rule(&["get"], &[""], &["pods/*"]);
    assert!(!rule_allows(&req(&u, "get", "", "pods", "a").with_subresource("log"), &r));
    assert!(!rule_allows(&req(&u, "get", "", "pods", "a"), &r));
}

#[test]
fn resource_names_limit_requests_that_have_a_name() {
    let u = alice();
    let r = named(rule(&["get", "update", "list", "create"], &[""], &["configmaps"]), &["cfg"]);
    assert!(rule_allows(&req(&u, "get", "", "configmaps", "a").with_name("cfg"), &r));
    assert!(!rule_allows(&req(&u, "get", "", "configmaps", "a").with_name("other"), &r));
    // list and create carry no name, so a named rule never allows them.
    assert!(!rule_allows(&req(&u, "list", "", "configmaps", "a"), &r));
    assert!(!rule_allows(&req(&u, "create", "", "configmaps", "a"), &r));
    // A rule without names allows any name, and none.
    let any = rule(&["get"], &[""], &["configmaps"]);
    assert!(rule_allows(&req(&u, "get", "", "configmaps", "a").with_name("whatever"), &any));
}

#[test]
fn non_resource_urls_match_exactly_or_by_trailing_star() {
    let u = alice();
    let get = |path: &str| Attributes::non_resource(u.clone(), "get", path);
    let r = url_rule(&["get"], &["/healthz", "/apis/*"]);
    assert!(rule_allows(&get("/healthz"), &r));
    assert!(!rule_allows(&get("/healthz/etcd"), &r));
    assert!(rule_allows(&get("/apis/"), &r));
    assert!(rule_allows(&get("/apis/apps/v1"), &r));
    assert!(!rule_allows(&get("/apis"), &r));
    assert!(!rule_allows(&Attributes::non_resource(u.clone(), "post", "/healthz"), &r));
    let all = url_rule(&["*"], &["*"]);
    assert!(rule_allows(&Attributes::non_resource(u.clone(), "post", "/anything"), &all));
    // A non-resource rule grants no resource request.
    assert!(!rule_allows(&req(&u, "get", "", "pods", ""), &all));
    assert!(rules_allow(&get("/apis/x"), &[rule(&["get"], &[""], &["pods"]), r]));
}

// ---- bindings ----------------------------------------------------------------------------------

#[test]
fn cluster_role_binding_grants_everywhere_to_users_groups_and_service_accounts() {
    let policy = Policy::new(
        [],
        [],
        [cluster_role("pod-reader", vec![rule(&["get", "list"], &[""], &["pods"])])],
        [
            crb("by-user", "pod-reader", vec![user_subject("alice")]),
            crb("by-group", "pod-reader", vec![subject("Group", "readers", None)]),
            crb("by-sa", "pod-reader", vec![subject("ServiceAccount", "bot", Some("ci"))]),
        ],
    );
    let sa = user("system:serviceaccount:ci:bot", &["system:serviceaccounts"]);
    let bob = user("bob", &["readers"]);
    let carol = user("carol", &["writers"]);
    for u in [&alice(), &bob, &sa] {
        assert!(allowed(&policy, &req(u, "list", "", "pods", "")), "{}", u.name);
        assert!(allowed(&policy, &req(u, "get", "", "pods", "any").with_name("p")), "{}", u.name);
        assert!(!allowed(&policy, &req(u, "delete", "", "pods", "any")), "{}", u.name);
    }
    assert!(!allowed(&policy, &req(&carol, "list", "", "pods", "")));
    // Another service account of the same name elsewhere is someone else.
    let other_sa = user("system:serviceaccount:prod:bot", &[]);
    assert!(!allowed(&policy, &req(&other_sa, "list", "", "pods", "")));
    let reason = policy.authorize(&req(&sa, "list", "", "pods", "")).reason;
    assert_eq!(
        reason,
        r#"RBAC: allowed by ClusterRoleBinding "by-sa" of ClusterRole "pod-reader" to ServiceAccount "bot/ci""#
    );
}

#[test]
fn allowed_reason_reads_like_kube() {
    let policy = alice_in_a("view");
    let d = policy.authorize(&req(&alice(), "get", "", "pods", "a").with_name("p"));
    assert!(d.allowed);
    assert_eq!(
        d.reason,
        r#"RBAC: allowed by RoleBinding "alice-binding/a" of ClusterRole "view" to User "alice""#
    );
    let policy = Policy::bootstrap();
    let root = user("root", &["system:masters", "system:authenticated"]);
    assert_eq!(
        policy.authorize(&req(&root, "delete", "", "nodes", "")).reason,
        r#"RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole "cluster-admin" to Group "system:masters""#
    );
    let denied = policy.authorize(&req(&alice(), "delete", "", "nodes", ""));
    assert_eq!(denied, Decision { allowed: false, reason: String::new() });
}

#[test]
fn role_binding_grants_only_in_its_namespace() {
    let policy = with_bootstrap(
        vec![role("a", "cm-writer", vec![rule(&["create"], &[""], &["configmaps"])])],
        vec![
            rb("a", "w", "Role", "cm-writer", vec![user_subject("alice")]),
            rb("a", "e", "ClusterRole", "edit", vec![user_subject("alice")]),
        ],
        vec![],
        vec![],
    );
    let u = alice();
    assert!(allowed(&policy, &req(&u, "create", "", "configmaps", "a")));
    assert!(allowed(&policy, &req(&u, "create", "apps", "deployments", "a")));
    assert!(!allowed(&policy, &req(&u, "create", "", "configmaps", "b")));
    assert!(!allowed(&policy, &req(&u, "create", "apps", "deployments", "b")));
    // Nor at cluster scope (a cluster-wide list).
    assert!(!allowed(&policy, &req(&u, "list", "apps", "deployments", "")));
}

#[test]
fn role_binding_to_a_role_of_another_namespace_grants_nothing() {
    // The Role is looked up in the binding's namespace.
    let policy = Policy::new(
        [role("b", "r", vec![rule(&["get"], &[""], &["pods"])])],
        [rb("a", "x", "Role", "r", vec![user_subject("alice")])],
        [],
        [],
    );
    assert!(!allowed(&policy, &req(&alice(), "get", "", "pods", "a")));
    assert!(!allowed(&policy, &req(&alice(), "get", "", "pods", "b")));
    assert_eq!(
        policy.authorize(&req(&alice(), "get", "", "pods", "a")).reason,
        r#"RBAC: role.rbac.authorization.k8s.io "r" not found"#
    );
}

#[test]
fn service_account_subject_without_namespace_means_the_bindings() {
    let policy = Policy::new(
        [],
        [rb("a", "x", "ClusterRole", "reader", vec![subject("ServiceAccount", "bot", None)])],
        [cluster_role("reader", vec![rule(&["get"], &[""], &["pods"])])],
        [crb("y", "reader", vec![subject("ServiceAccount", "bot", None)])],
    );
    let bot_a = user("system:serviceaccount:a:bot", &[]);
    let bot_b = user("system:serviceaccount:b:bot", &[]);
    assert!(allowed(&policy, &req(&bot_a, "get", "", "pods", "a")));
    assert!(!allowed(&policy, &req(&bot_b, "get", "", "pods", "b")));
    // In a ClusterRoleBinding a service account without namespace matches nobody.
    assert!(!allowed(&policy, &req(&bot_a, "get", "", "pods", "")));
}

#[test]
fn group_subjects_match_the_service_account_groups_the_caller_adds() {
    let policy = Policy::new(
        [],
        [rb(
            "ci",
            "x",
            "ClusterRole",
            "reader",
            vec![subject("Group", "system:serviceaccounts:ci", None)],
        )],
        [cluster_role("reader", vec![rule(&["list"], &[""], &["pods"])])],
        [],
    );
    let bot = user(
        "system:serviceaccount:ci:bot",
        &["system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"],
    );
    assert!(allowed(&policy, &req(&bot, "list", "", "pods", "ci")));
    // Without the group (the caller's job), nothing.
    let bare = user("system:serviceaccount:ci:bot", &[]);
    assert!(!allowed(&policy, &req(&bare, "list", "", "pods", "ci")));
}

#[test]
fn missing_cluster_role_is_reported_when_nothing_else_allows() {
    let policy = Policy::new(
        [],
        [],
        [],
        [
            crb("a", "gone", vec![user_subject("alice")]),
            crb("b", "also-gone", vec![user_subject("alice")]),
            crb("c", "gone", vec![user_subject("bob")]),
        ],
    );
    let d = policy.authorize(&req(&alice(), "get", "", "pods", "x"));
    assert!(!d.allowed);
    assert_eq!(
        d.reason,
        r#"RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, clusterrole.rbac.authorization.k8s.io "also-gone" not found]"#
    );
}

#[test]
fn rules_for_includes_cluster_wide_rules_and_the_namespaces() {
    let policy = alice_in_a("view");
    let in_a = policy.rules_for(&alice(), "a");
    let in_b = policy.rules_for(&alice(), "b");
    let cluster = policy.rules_for(&alice(), "");
    // system:basic-user, system:discovery and system:public-info-viewer apply everywhere.
    assert_eq!(in_b.len(), cluster.len());
    assert!(in_a.len() > in_b.len());
    assert!(in_a.contains(&rule(&["get", "list", "watch"], &[""], &["namespaces"])));
    assert!(!in_b.contains(&rule(&["get", "list", "watch"], &[""], &["namespaces"])));
}

#[test]
fn role_ref_rules_resolve_roles_and_cluster_roles() {
    let policy = with_bootstrap(
        vec![role("a", "r", vec![rule(&["get"], &[""], &["pods"])])],
        vec![],
        vec![],
        vec![],
    );
    assert_eq!(
        policy.role_ref_rules(&role_ref("Role", "r"), "a"),
        Some(vec![rule(&["get"], &[""], &["pods"])])
    );
    assert_eq!(policy.role_ref_rules(&role_ref("Role", "r"), "b"), None);
    assert!(policy
        .role_ref_rules(&role_ref("ClusterRole", "edit"), "")
        .is_some_and(|r| !r.is_empty()));
    assert_eq!(policy.role_ref_rules(&role_ref("Other", "edit"), ""), None);
}

// ---- aggregation -------------------------------------------------------------------------------

#[test]
fn aggregation_unions_matching_roles_rules_once_each() {
    let roles = vec![
        aggregated("monitoring", vec![match_labels(&[("monitoring", "true")])]),
        labelled(
            cluster_role(
                "a",
                vec![rule(&["get"], &[""], &["pods"]), rule(&["list"], &[""], &["nodes"])],
            ),
            &[("monitoring", "true")],
        ),
        labelled(
            cluster_role("b", vec![rule(&["get"], &[""], &["pods"])]),
            &[("monitoring", "true")],
        ),
        labelled(cluster_role("c", vec![rule(&["*"], &["*"], &["*"])]), &[("monitoring", "false")]),
    ];
    let changed = aggregate(&roles);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].metadata.name.as_deref(), Some("monitoring"));
    assert_eq!(
        changed[0].rules,
        Some(vec![rule(&["get"], &[""], &["pods"]), rule(&["list"], &[""], &["nodes"])])
    );
    // Applying the result leaves nothing more to do.
    let mut updated = roles.clone();
    updated[0] = changed[0].clone();
    assert!(aggregate(&updated).is_empty());
}

#[test]
fn aggregation_label_expressions() {
    let labels: BTreeMap<String, String> =
        [("tier", "web"), ("env", "prod")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
    let sel = |exprs: Vec<LabelSelectorRequirement>| LabelSelector {
        match_labels: None,
        match_expressions: Some(exprs),
    };
    assert_eq!(
        selector_matches(&sel(vec![expression("tier", "In", &["web", "db"])]), &labels),
        Some(true)
    );
    assert_eq!(
        selector_matches(&sel(vec![expression("tier", "In", &["db"])]), &labels),
        Some(false)
    );
    assert_eq!(
        selector_matches(&sel(vec![expression("tier", "NotIn", &["db"])]), &labels),
        Some(true)
    );
    assert_eq!(
        selector_matches(&sel(vec![expression("tier", "NotIn", &["web"])]), &labels),
        Some(false)
    );
    assert_eq!(
        selector_matches(&sel(vec![expression("zone", "NotIn", &["x"])]), &labels),
        Some(true)
    );
    assert_eq!(selector_matches(&sel(vec![expression("env", "Exists", &[])]), &labels), Some(true));
    assert_eq!(
        selector_matches(&sel(vec![expression("zone", "Exists", &[])]), &labels),
        Some(false)
    );
    assert_eq!(
        selector_matches(&sel(vec![expression("zone", "DoesNotExist", &[])]), &labels),
        Some(true)
    );
    assert_eq!(
        selector_matches(&sel(vec![expression("env", "DoesNotExist", &[])]), &labels),
        Some(false)
    );
    assert_eq!(
        selector_matches(
            &LabelSelector {
                match_labels: Some(BTreeMap::from([("env".to_owned(), "prod".to_owned())])),
                match_expressions: Some(vec![expression("tier", "In", &["db"])]),
            },
            &labels
        ),
        Some(false)
    );
    // Empty selector: everything. Invalid ones: an error.
    assert_eq!(selector_matches(&LabelSelector::default(), &labels), Some(true));
    assert_eq!(selector_matches(&sel(vec![expression("tier", "In", &[])]), &labels), None);
    assert_eq!(selector_matches(&sel(vec![expression("tier", "Exists", &["x"])]), &labels), None);
    assert_eq!(selector_matches(&sel(vec![expression("tier", "Gt", &["1"])]), &labels), None);
}

#[test]
fn aggregation_with_expressions_and_an_invalid_selector() {
    let mut by_expr = aggregated(
        "by-expr",
        vec![LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![
                expression("team", "In", &["a", "b"]),
                expression("deprecated", "DoesNotExist", &[]),
            ]),
        }],
    );
    by_expr.rules = Some(vec![rule(&["stale"], &[""], &["x"])]);
    let invalid = aggregated(
        "invalid",
        vec![LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expression("team", "Bogus", &[])]),
        }],
    );
    let roles = vec![
        by_expr,
        invalid,
        labelled(cluster_role("team-a", vec![rule(&["get"], &[""], &["a"])]), &[("team", "a")]),
        labelled(
            cluster_role("team-b-old", vec![rule(&["get"], &[""], &["b"])]),
            &[("team", "b"), ("deprecated", "yes")],
        ),
        labelled(cluster_role("team-c", vec![rule(&["get"], &[""], &["c"])]), &[("team", "c")]),
    ];
    let changed = aggregate(&roles);
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].rules, Some(vec![rule(&["get"], &[""], &["a"])]));
}

#[test]
fn aggregation_nests_and_ignores_itself() {
    // top selects mid (and itself); mid selects leaf: top ends up with leaf's rules.
    let roles = vec![
        labelled(
            aggregated("top", vec![match_labels(&[("to-top", "true")])]),
            &[("to-top", "true")],
        ),
        labelled(
            aggregated("mid", vec![match_labels(&[("to-mid", "true")])]),
            &[("to-top", "true")],
        ),
        labelled(
            cluster_role("leaf", vec![rule(&["get"], &[""], &["pods"])]),
            &[("to-mid", "true")],
        ),
    ];
    let changed = aggregate(&roles);
    let names: Vec<_> =
        changed.iter().map(|r| r.metadata.name.clone().unwrap_or_default()).collect();
    assert_eq!(names, ["top", "mid"]);
    for role in &changed {
        assert_eq!(role.rules, Some(vec![rule(&["get"], &[""], &["pods"])]));
    }
}

#[test]
fn policy_evaluates_aggregated_rules_even_when_stored_rules_are_stale() {
    let policy = Policy::new(
        [],
        [],
        [
            aggregated("agg", vec![match_labels(&[("x", "y")])]),
            labelled(
                cluster_role("part", vec![rule(&["get"], &[""], &["secrets"])]),
                &[("x", "y")],
            ),
        ],
        [crb("b", "agg", vec![user_subject("alice")])],
    );
    assert!(allowed(&policy, &req(&alice(), "get", "", "secrets", "n")));
}

#[test]
fn bootstrap_aggregates_admin_edit_view() {
    let roles = bootstrap::cluster_roles();
    let changed = aggregate(&roles);
    let mut names: Vec<_> =
        changed.iter().map(|r| r.metadata.name.clone().unwrap_or_default()).collect();
    names.sort();
    assert_eq!(names, ["admin", "edit", "view"]);
    let policy = Policy::bootstrap();
    let rules =
        |name: &str| policy.cluster_role(name).and_then(|r| r.rules.clone()).unwrap_or_default();
    let (admin, edit, view) = (rules("admin"), rules("edit"), rules("view"));
    assert!(covers(&admin, &edit).0 && covers(&edit, &view).0);
    assert!(!covers(&view, &edit).0 && !covers(&edit, &admin).0);
    // admin = edit's rules + system:aggregate-to-admin's (sorted by name: edit first).
    assert_eq!(admin.len(), edit.len() + 2);
}

// ---- bootstrap ---------------------------------------------------------------------------------

#[test]
fn view_reads_but_does_not_write_and_cannot_read_secrets() {
    let policy = alice_in_a("view");
    let u = alice();
    assert!(allowed(&policy, &req(&u, "list", "", "pods", "a")));
    assert!(allowed(&policy, &req(&u, "watch", "apps", "deployments", "a")));
    assert!(allowed(
        &policy,
        &req(&u, "get", "", "pods", "a").with_subresource("log").with_name("p")
    ));
    assert!(allowed(&policy, &req(&u, "get", "", "namespaces", "a").with_name("a")));
    assert!(!allowed(&policy, &req(&u, "create", "", "pods", "a")));
    assert!(!allowed(&policy, &req(&u, "create", "", "pods", "a").with_subresource("eviction")));
    assert!(allowed(&policy, &req(&u, "get", "policy", "poddisruptionbudgets", "a")));
    assert!(!allowed(&policy, &req(&u, "get", "", "secrets", "a").with_name("s")));
    assert!(!allowed(&policy, &req(&u, "list", "", "secrets", "a")));
    assert!(!allowed(&policy, &req(&u, "get", "rbac.authorization.k8s.io", "roles", "a")));
}

#[test]
fn edit_writes_workloads_and_reads_secrets_but_not_rbac() {
    let policy = alice_in_a("edit");
    let u = alice();
    assert!(allowed(&policy, &req(&u, "create", "apps", "deployments", "a")));
    assert!(allowed(
        &policy,
        &req(&u, "update", "apps", "deployments", "a").with_subresource("scale")
    ));
    assert!(allowed(&policy, &req(&u, "create", "", "pods", "a").with_subresource("exec")));
    assert!(allowed(&policy, &req(&u, "delete", "batch", "jobs", "a")));
    assert!(allowed(&policy, &req(&u, "create", "coordination.k8s.io", "leases", "a")));
    assert!(allowed(&policy, &req(&u, "patch", "networking.k8s.io", "ingresses", "a")));
    assert!(allowed(&policy, &req(&u, "create", "policy", "poddisruptionbudgets", "a")));
    // `kubectl drain` evicts.
    assert!(allowed(&policy, &req(&u, "create", "", "pods", "a").with_subresource("eviction")));
    assert!(!allowed(&policy, &req(&u, "get", "", "pods", "a").with_subresource("eviction")));
    // In Kubernetes edit CAN read secrets.
    assert!(allowed(&policy, &req(&u, "get", "", "secrets", "a").with_name("s")));
    assert!(allowed(&policy, &req(&u, "create", "", "secrets", "a")));
    assert!(allowed(&policy, &req(&u, "impersonate", "", "serviceaccounts", "a")));
    assert!(!allowed(
        &policy,
        &req(&u, "create", "rbac.authorization.k8s.io", "rolebindings", "a")
    ));
    assert!(!allowed(&policy, &req(&u, "update", "", "resourcequotas", "a")));
    assert!(!allowed(&policy, &req(&u, "update", "", "pods", "a").with_subresource("status")));
    assert!(!allowed(
        &policy,
        &req(&u, "create", "authorization.k8s.io", "localsubjectaccessreviews", "a")
    ));
}

#[test]
fn admin_manages_roles_and_bindings_in_its_namespace() {
    let policy = alice_in_a("admin");
    let u = alice();
    assert!(allowed(&policy, &req(&u, "create", "rbac.authorization.k8s.io", "rolebindings", "a")));
    assert!(allowed(&policy, &req(&u, "delete", "rbac.authorization.k8s.io", "roles", "a")));
    assert!(allowed(
        &policy,
        &req(&u, "create", "authorization.k8s.io", "localsubjectaccessreviews", "a")
    ));
    assert!(allowed(&policy, &req(&u, "create", "apps", "deployments", "a")));
    assert!(allowed(&policy, &req(&u, "create", "", "pods", "a").with_subresource("eviction")));
    assert!(!allowed(
        &policy,
        &req(&u, "create", "rbac.authorization.k8s.io", "rolebindings", "b")
    ));
    assert!(!allowed(&policy, &req(&u, "create", "rbac.authorization.k8s.io", "clusterroles", "")));
    assert!(!allowed(&policy, &req(&u, "delete", "", "namespaces", "a").with_name("a")));
}

#[test]
fn cluster_admin_can_do_everything() {
    let policy = Policy::bootstrap();
    let root = user("root", &["system:masters"]);
    assert!(allowed(&policy, &req(&root, "delete", "", "nodes", "")));
    assert!(allowed(&policy, &req(&root, "escalate", RBAC_GROUP, "clusterroles", "")));
    assert!(allowed(&policy, &req(&root, "get", "", "secrets", "kube-system")));
    assert!(allowed(&policy, &Attributes::non_resource(root.clone(), "get", "/metrics")));
    assert!(allowed(&policy, &Attributes::non_resource(root, "post", "/anything/at/all")));
}

#[test]
fn basic_user_discovery_and_public_info() {
    let policy = Policy::bootstrap();
    let u = alice();
    assert!(allowed(
        &policy,
        &req(&u, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "")
    ));
    assert!(allowed(
        &policy,
        &req(&u, "create", "authorization.k8s.io", "selfsubjectrulesreviews", "")
    ));
    assert!(allowed(
        &policy,
        &req(&u, "create", "authentication.k8s.io", "selfsubjectreviews", "")
    ));
    assert!(!allowed(
        &policy,
        &req(&u, "create", "authorization.k8s.io", "subjectaccessreviews", "")
    ));
    for path in ["/api", "/api/v1", "/apis", "/apis/apps/v1", "/openapi/v3", "/version", "/healthz"]
    {
        assert!(allowed(&policy, &Attributes::non_resource(u.clone(), "get", path)), "{path}");
    }
    assert!(!allowed(&policy, &Attributes::non_resource(u.clone(), "get", "/metrics")));
    assert!(!allowed(&policy, &req(&u, "list", "", "pods", "default")));

    let anonymous = user("system:anonymous", &["system:unauthenticated"]);
    for path in ["/healthz", "/livez", "/readyz", "/version", "/version/"] {
        assert!(
            allowed(&policy, &Attributes::non_resource(anonymous.clone(), "get", path)),
            "{path}"
        );
    }
    assert!(!allowed(&policy, &Attributes::non_resource(anonymous.clone(), "get", "/api")));
    assert!(!allowed(
        &policy,
        &Attributes::non_resource(anonymous.clone(), "get", "/healthz/etcd")
    ));
    assert!(!allowed(
        &policy,
        &req(&anonymous, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "")
    ));
}

#[test]
fn bootstrap_objects_are_labelled_annotated_and_bound() {
    let roles = bootstrap::cluster_roles();
    let bindings = bootstrap::cluster_role_bindings();
    for meta in roles.iter().map(|r| &r.metadata).chain(bindings.iter().map(|b| &b.metadata)) {
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("kubernetes.io/bootstrapping").map(String::as_str),
            Some("rbac-defaults")
        );
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get("rbac.authorization.kubernetes.io/autoupdate").map(String::as_str),
            Some("true")
        );
    }
    let names: Vec<_> = roles.iter().filter_map(|r| r.metadata.name.clone()).collect();
    for name in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:aggregate-to-admin",
        "system:aggregate-to-edit",
        "system:aggregate-to-view",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
    ] {
        assert!(names.iter().any(|n| n == name), "{name}");
    }
    let edit = roles.iter().find(|r| r.metadata.name.as_deref() == Some("edit"));
    assert_eq!(
        edit.and_then(|r| r.metadata.labels.clone())
            .unwrap_or_default()
            .get(bootstrap::AGGREGATE_TO_ADMIN),
        Some(&"true".to_owned())
    );
    let groups_of = |name: &str| -> Vec<String> {
        bindings
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some(name))
            .and_then(|b| b.subjects.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|s| format!("{}:{}", s.kind, s.name))
            .collect()
    };
    assert_eq!(groups_of("cluster-admin"), ["Group:system:masters"]);
    assert_eq!(groups_of("system:discovery"), ["Group:system:authenticated"]);
    assert_eq!(groups_of("system:basic-user"), ["Group:system:authenticated"]);
    assert_eq!(
        groups_of("system:public-info-viewer"),
        ["Group:system:authenticated", "Group:system:unauthenticated"]
    );
}

// ---- covers ------------------------------------------------------------------------------------

#[test]
fn breakdown_splits_per_group_resource_verb_and_name() {
    let r = named(rule(&["get", "update"], &["", "apps"], &["a", "b"]), &["x", "y", "z"]);
    assert_eq!(breakdown_rule(&r).len(), 2 * 2 * 2 * 3);
    let u = url_rule(&["get", "post"], &["/a", "/b/*"]);
    assert_eq!(
        breakdown_rule(&u),
        vec![
            url_rule(&["get"], &["/a"]),
            url_rule(&["post"], &["/a"]),
            url_rule(&["get"], &["/b/*"]),
            url_rule(&["post"], &["/b/*"]),
        ]
    );
}

#[test]
fn covers_follows_kube_validation_covers() {
    let owner = vec![
        rule(&["get", "list"], &[""], &["pods", "configmaps"]),
        rule(&["update"], &["*"], &["*/scale"]),
        named(rule(&["get"], &[""], &["secrets"]), &["a", "b"]),
        url_rule(&["get"], &["/healthz", "/apis/*"]),
    ];
    assert!(covers(&owner, &[rule(&["get"], &[""], &["pods"])]).0);
    assert!(covers(&owner, &[rule(&["update"], &["apps"], &["deployments/scale"])]).0);
    assert!(!covers(&owner, &[rule(&["update"], &["apps"], &["deployments"])]).0);
    assert!(covers(&owner, &[named(rule(&["get"], &[""], &["secrets"]), &["a"])]).0);
    assert!(!covers(&owner, &[named(rule(&["get"], &[""], &["secrets"]), &["c"])]).0);
    // Named ownership never covers an unnamed grant.
    assert!(!covers(&owner, &[rule(&["get"], &[""], &["secrets"])]).0);
    assert!(covers(&owner, &[url_rule(&["get"], &["/apis/apps", "/healthz"])]).0);
    assert!(!covers(&owner, &[url_rule(&["get"], &["/api"])]).0);
    let (ok, missing) = covers(&owner, &[rule(&["get", "delete"], &[""], &["pods", "services"])]);
    assert!(!ok);
    assert_eq!(
        missing,
        vec![
            rule(&["delete"], &[""], &["pods"]),
            rule(&["get"], &[""], &["services"]),
            rule(&["delete"], &[""], &["services"]),
        ]
    );
    // Wildcard owners cover everything.
    let all = [rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])];
    assert!(
        covers(
            &all,
            &[named(rule(&["bind"], &["x"], &["y/z"]), &["n"]), url_rule(&["put"], &["/q"])]
        )
        .0
    );
}

#[test]
fn compact_string_and_compaction_read_like_kube() {
    assert_eq!(
        compact_string(&rule(&["get", "list"], &[""], &["secrets"])),
        r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}"#
    );
    assert_eq!(
        compact_string(&named(rule(&["get"], &["apps"], &["deployments"]), &["web"])),
        r#"{APIGroups:["apps"], Resources:["deployments"], ResourceNames:["web"], Verbs:["get"]}"#
    );
    assert_eq!(
        compact_string(&url_rule(&["get"], &["/metrics"])),
        r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#
    );
    let compacted = compact_rules(&[
        rule(&["get"], &[""], &["secrets"]),
        named(rule(&["get"], &[""], &["pods"]), &["x"]),
        rule(&["list"], &[""], &["secrets"]),
    ]);
    assert_eq!(
        compacted,
        vec![
            named(rule(&["get"], &[""], &["pods"]), &["x"]),
            rule(&["get", "list"], &[""], &["secrets"])
        ]
    );
}

// ---- escalation --------------------------------------------------------------------------------

#[test]
fn role_write_needs_the_rules_held() {
    let policy = alice_in_a("edit");
    let u = alice();
    // edit holds secrets read in a: a Role granting it is no escalation.
    assert_eq!(
        check_role_write(&policy, &u, "a", "r", &[rule(&["get", "list"], &[""], &["secrets"])]),
        Ok(())
    );
    // ... but not in b, where alice holds nothing.
    let err = check_role_write(&policy, &u, "b", "r", &[rule(&["get"], &[""], &["secrets"])])
        .expect_err("escalation");
    assert_eq!(err.code(), 403);
    assert_eq!(err.reason(), "Forbidden");
    assert_eq!(
        err.message(),
        "roles.rbac.authorization.k8s.io \"r\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
    );
    let status = err.to_status();
    assert_eq!(status["details"]["group"], "rbac.authorization.k8s.io");
    assert_eq!(status["details"]["kind"], "roles");
    assert_eq!(status["details"]["name"], "r");
    // Granting what edit lacks (rbac writes, the escalate verb) is refused in a too.
    let err = check_role_write(
        &policy,
        &u,
        "a",
        "r",
        &[
            rule(&["create", "update"], &[RBAC_GROUP], &["roles"]),
            rule(&["escalate"], &[RBAC_GROUP], &["roles"]),
            rule(&["get"], &[""], &["pods"]),
        ],
    )
    .expect_err("escalation");
    assert!(err.message().ends_with(
        ":\n{APIGroups:[\"rbac.authorization.k8s.io\"], Resources:[\"roles\"], Verbs:[\"create\" \"update\" \"escalate\"]}"
    ), "{}", err.message());
}

#[test]
fn escalation_message_lists_missing_rules_sorted_and_compacted() {
    let policy = alice_in_a("view");
    let err = check_role_write(
        &policy,
        &user("alice", &["a", "b"]),
        "a",
        "x",
        &[
            rule(&["get", "list", "watch"], &[""], &["secrets", "pods"]),
            url_rule(&["get"], &["/metrics"]),
        ],
    )
    .expect_err("escalation");
    assert_eq!(
        err.message(),
        "roles.rbac.authorization.k8s.io \"x\" is forbidden: user \"alice\" (groups=[\"a\" \"b\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"watch\"]}\n{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"
    );
}

#[test]
fn escalate_verb_or_system_masters_allows_any_role_write() {
    let everything = [rule(&["*"], &["*"], &["*"])];
    let policy = Policy::new(
        [],
        [rb("a", "e", "ClusterRole", "escalator", vec![user_subject("alice")])],
        [cluster_role("escalator", vec![rule(&["escalate"], &[RBAC_GROUP], &["roles"])])],
        [],
    );
    assert_eq!(check_role_write(&policy, &alice(), "a", "r", &everything), Ok(()));
    assert!(check_role_write(&policy, &alice(), "b", "r", &everything).is_err());
    // Role escalation does not extend to ClusterRoles.
    assert!(check_role_write(&policy, &alice(), "", "cr", &everything).is_err());
    let root = user("root", &["system:masters"]);
    assert_eq!(check_role_write(&Policy::default(), &root, "", "cr", &everything), Ok(()));
    // escalate limited by resourceNames.
    let policy =
        alice_holds(vec![named(rule(&["escalate"], &[RBAC_GROUP], &["clusterroles"]), &["ok"])]);
    assert_eq!(check_role_write(&policy, &alice(), "", "ok", &everything), Ok(()));
    let err =
        check_role_write(&policy, &alice(), "", "other", &everything).expect_err("escalation");
    assert!(err
        .message()
        .starts_with("clusterroles.rbac.authorization.k8s.io \"other\" is forbidden: "));
}

#[test]
fn cluster_role_write_with_aggregation_rule_needs_cluster_admin() {
    let agg = aggregated("agg", vec![match_labels(&[("a", "b")])]);
    // Everything but escalate (which would skip every check, as in kube).
    let policy = alice_holds(vec![rule(&["get", "list", "create", "bind"], &["*"], &["*"])]);
    let err = check_cluster_role_write(&policy, &alice(), &agg, None).expect_err("aggregation");
    assert_eq!(
        err.message(),
        "clusterroles.rbac.authorization.k8s.io \"agg\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
    );
    // Removing an aggregation rule is checked too.
    let plain = cluster_role("agg", vec![]);
    assert!(check_cluster_role_write(&policy, &alice(), &plain, Some(&agg)).is_err());
    assert_eq!(check_cluster_role_write(&policy, &alice(), &plain, None), Ok(()));
    let admin = alice_holds(vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])]);
    assert_eq!(check_cluster_role_write(&admin, &alice(), &agg, None), Ok(()));
    // Rules are checked cluster-wide: a namespaced grant does not count.
    let ns_only = alice_in_a("admin");
    let pods = cluster_role("pods", vec![rule(&["get"], &[""], &["pods"])]);
    assert!(check_cluster_role_write(&ns_only, &alice(), &pods, None).is_err());
}

#[test]
fn binding_write_needs_the_roles_rules_or_bind() {
    let policy = alice_in_a("edit");
    let u = alice();
    let edit = policy.role_ref_rules(&role_ref("ClusterRole", "edit"), "a").unwrap_or_default();
    let admin = policy.role_ref_rules(&role_ref("ClusterRole", "admin"), "a").unwrap_or_default();
    // alice holds edit in a, so may bind edit there...
    assert_eq!(
        check_binding_write(&policy, &u, "a", "b", &role_ref("ClusterRole", "edit"), &edit),
        Ok(())
    );
    // ... but not admin (it has rbac writes she lacks), nor edit in b, nor cluster-wide.
    let err = check_binding_write(&policy, &u, "a", "b", &role_ref("ClusterRole", "admin"), &admin)
        .expect_err("escalation");
    assert!(err.message().starts_with(
        "rolebindings.rbac.authorization.k8s.io \"b\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n"
    ), "{}", err.message());
    assert!(err.message().contains("{APIGroups:[\"rbac.authorization.k8s.io\"], Resources:[\"rolebindings\"], Verbs:[\"create\" \"delete\" \"deletecollection\" \"get\" \"list\" \"patch\" \"update\" \"watch\"]}"), "{}", err.message());
    assert!(check_binding_write(&policy, &u, "b", "b", &role_ref("ClusterRole", "edit"), &edit)
        .is_err());
    let err = check_binding_write(&policy, &u, "", "crb", &role_ref("ClusterRole", "edit"), &edit)
        .expect_err("escalation");
    assert!(err
        .message()
        .starts_with("clusterrolebindings.rbac.authorization.k8s.io \"crb\" is forbidden: "));
}

#[test]
fn bind_verb_allows_binding_what_you_do_not_hold() {
    let everything = [rule(&["*"], &["*"], &["*"])];
    let policy = Policy::new(
        [],
        [rb("a", "binder", "ClusterRole", "binder", vec![user_subject("alice")])],
        [cluster_role(
            "binder",
            vec![named(rule(&["bind"], &[RBAC_GROUP], &["clusterroles"]), &["admin"])],
        )],
        [],
    );
    let u = alice();
    assert_eq!(
        check_binding_write(&policy, &u, "a", "x", &role_ref("ClusterRole", "admin"), &everything),
        Ok(())
    );
    // Another role name, another namespace, or cluster-wide: no.
    assert!(check_binding_write(
        &policy,
        &u,
        "a",
        "x",
        &role_ref("ClusterRole", "cluster-admin"),
        &everything
    )
    .is_err());
    assert!(check_binding_write(
        &policy,
        &u,
        "b",
        "x",
        &role_ref("ClusterRole", "admin"),
        &everything
    )
    .is_err());
    assert!(check_binding_write(
        &policy,
        &u,
        "",
        "x",
        &role_ref("ClusterRole", "admin"),
        &everything
    )
    .is_err());
    // bind on roles is a different resource.
    assert!(check_binding_write(&policy, &u, "a", "x", &role_ref("Role", "admin"), &everything)
        .is_err());
    // system:masters binds anything.
    let root = user("root", &["system:masters"]);
    assert_eq!(
        check_binding_write(
            &Policy::default(),
            &root,
            "",
            "x",
            &role_ref("ClusterRole", "cluster-admin"),
            &everything
        ),
        Ok(())
    );
}

// ---- reviews -----------------------------------------------------------------------------------

fn resource_attrs(verb: &str, group: &str, resource: &str, ns: &str) -> ResourceAttributes {
    ResourceAttributes {
        verb: Some(verb.to_owned()),
        group: Some(group.to_owned()),
        resource: Some(resource.to_owned()),
        namespace: Some(ns.to_owned()),
        ..ResourceAttributes::default()
    }
}

#[test]
fn subject_access_review_answers_for_the_spec_user() {
    let policy = alice_in_a("view");
    let spec = SubjectAccessReviewSpec {
        user: Some("alice".to_owned()),
        resource_attributes: Some(resource_attrs("list", "", "pods", "a")),
        ..SubjectAccessReviewSpec::default()
    };
    let status = subject_access_review(&policy, &spec).expect("valid");
    assert!(status.allowed);
    assert_eq!(status.denied, None);
    assert_eq!(
        status.reason.as_deref(),
        Some(
            r#"RBAC: allowed by RoleBinding "alice-binding/a" of ClusterRole "view" to User "alice""#
        )
    );
    let spec = SubjectAccessReviewSpec {
        resource_attributes: Some(resource_attrs("delete", "", "pods", "a")),
        ..spec
    };
    let status = subject_access_review(&policy, &spec).expect("valid");
    assert!(!status.allowed);
    assert_eq!(status.reason, None);
    // Groups alone are a subject too.
    let spec = SubjectAccessReviewSpec {
        groups: Some(vec!["system:authenticated".to_owned()]),
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some("/version".to_owned()),
            verb: Some("get".to_owned()),
        }),
        ..SubjectAccessReviewSpec::default()
    };
    assert!(subject_access_review(&policy, &spec).expect("valid").allowed);
}

#[test]
fn subject_access_review_validates_the_spec() {
    let policy = Policy::bootstrap();
    let err = subject_access_review(
        &policy,
        &SubjectAccessReviewSpec {
            resource_attributes: Some(resource_attrs("get", "", "pods", "a")),
            ..SubjectAccessReviewSpec::default()
        },
    )
    .expect_err("no subject");
    assert_eq!(err.code(), 422);
    assert_eq!(
        err.message(),
        r#"SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one of user or group must be specified"#
    );
    let err = subject_access_review(
        &policy,
        &SubjectAccessReviewSpec { user: Some("x".into()), ..SubjectAccessReviewSpec::default() },
    )
    .expect_err("no attributes");
    assert!(err
        .message()
        .contains("exactly one of nonResourceAttributes or resourceAttributes must be specified"));
    let err = self_subject_access_review(
        &policy,
        &alice(),
        &SelfSubjectAccessReviewSpec {
            resource_attributes: Some(resource_attrs("get", "", "pods", "a")),
            non_resource_attributes: Some(NonResourceAttributes::default()),
        },
    )
    .expect_err("both");
    assert!(err.message().contains("cannot be specified in combination with resourceAttributes"));
}

#[test]
fn self_and_local_subject_access_reviews() {
    let policy = alice_in_a("edit");
    let spec = SelfSubjectAccessReviewSpec {
        resource_attributes: Some(ResourceAttributes {
            subresource: Some("exec".to_owned()),
            ..resource_attrs("create", "", "pods", "a")
        }),
        non_resource_attributes: None,
    };
    assert!(self_subject_access_review(&policy, &alice(), &spec).expect("valid").allowed);
    let bob = user("bob", &["system:authenticated"]);
    assert!(!self_subject_access_review(&policy, &bob, &spec).expect("valid").allowed);

    let local = SubjectAccessReviewSpec {
        user: Some("alice".to_owned()),
        resource_attributes: Some(resource_attrs("get", "", "secrets", "a")),
        ..SubjectAccessReviewSpec::default()
    };
    assert!(local_subject_access_review(&policy, "a", &local).expect("valid").allowed);
    let err = local_subject_access_review(&policy, "b", &local).expect_err("other namespace");
    assert_eq!(
        err.message(),
        r#"LocalSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes.namespace: Invalid value: "a": must match metadata.namespace"#
    );
}

#[test]
fn self_subject_rules_review_lists_resource_and_non_resource_rules() {
    let policy = alice_in_a("view");
    let status = self_subject_rules_review(&policy, &alice(), "a").expect("namespace");
    assert!(!status.incomplete);
    assert_eq!(status.evaluation_error, None);
    let has_resource = |verb: &str, resource: &str| {
        status.resource_rules.iter().any(|r| {
            r.verbs.iter().any(|v| v == verb) && r.resources.iter().flatten().any(|x| x == resource)
        })
    };
    assert!(has_resource("create", "selfsubjectaccessreviews"));
    assert!(has_resource("list", "pods"));
    assert!(has_resource("watch", "deployments"));
    assert!(!has_resource("get", "secrets"));
    assert!(status.non_resource_rules.iter().any(|r| r
        .non_resource_urls
        .iter()
        .flatten()
        .any(|u| u == "/apis/*")));
    // Rules are split: no resource rule carries URLs and vice versa.
    assert!(status.resource_rules.iter().all(|r| r.api_groups.is_some()));
    let elsewhere = self_subject_rules_review(&policy, &alice(), "b").expect("namespace");
    assert!(elsewhere.resource_rules.len() < status.resource_rules.len());
    let err = self_subject_rules_review(&policy, &alice(), "").expect_err("no namespace");
    assert_eq!((err.code(), err.message()), (400, "no namespace on request"));
    // A binding to a missing role shows up as an evaluation error.
    let broken =
        Policy::new([], [rb("a", "x", "Role", "gone", vec![user_subject("alice")])], [], []);
    let status = self_subject_rules_review(&broken, &alice(), "a").expect("namespace");
    assert_eq!(
        status.evaluation_error.as_deref(),
        Some(r#"role.rbac.authorization.k8s.io "gone" not found"#)
    );
}

// ---- forbidden ---------------------------------------------------------------------------------

#[test]
fn forbidden_messages_read_like_kube_apiserver() {
    let u = alice();
    let list = forbidden(&req(&u, "list", "", "pods", "default"), "");
    assert_eq!(list.code(), 403);
    assert_eq!(list.reason(), "Forbidden");
    assert_eq!(
        list.message(),
        r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
    );
    let get = forbidden(&req(&u, "get", "", "pods", "default").with_name("x"), "");
    assert_eq!(
        get.message(),
        r#"pods "x" is forbidden: User "alice" cannot get resource "pods" in API group "" in the namespace "default""#
    );
    let status = get.to_status();
    assert_eq!(status["details"]["name"], "x");
    assert_eq!(status["details"]["kind"], "pods");
    let exec = forbidden(
        &req(&u, "create", "", "pods", "default").with_name("x").with_subresource("exec"),
        "",
    );
    assert_eq!(
        exec.message(),
        r#"pods "x" is forbidden: User "alice" cannot create resource "pods/exec" in API group "" in the namespace "default""#
    );
    assert_eq!(exec.to_status()["details"]["kind"], "pods");
    let nodes = forbidden(&req(&u, "list", "", "nodes", ""), "");
    assert_eq!(
        nodes.message(),
        r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#
    );
    let deploy = forbidden(&req(&u, "get", "apps", "deployments", "default").with_name("web"), "");
    assert_eq!(
        deploy.message(),
        r#"deployments.apps "web" is forbidden: User "alice" cannot get resource "deployments" in API group "apps" in the namespace "default""#
    );
    assert_eq!(deploy.to_status()["details"]["group"], "apps");
    let metrics = forbidden(&Attributes::non_resource(u.clone(), "get", "/metrics"), "");
    assert_eq!(metrics.message(), r#"forbidden: User "alice" cannot get path "/metrics""#);
    assert!(metrics.to_status().get("details").is_none());
    let with_reason = forbidden(
        &req(&u, "list", "", "pods", "a"),
        "RBAC: role.rbac.authorization.k8s.io \"r\" not found",
    );
    assert!(with_reason
        .message()
        .ends_with(r#"in the namespace "a": RBAC: role.rbac.authorization.k8s.io "r" not found"#));
    let odd = forbidden(&Attributes::non_resource(user("<b>\"&", &[]), "get", "/x"), "");
    assert_eq!(odd.message(), r#"forbidden: User "&lt;b&gt;\"&amp;" cannot get path "/x""#);
}

#[test]
fn go_quoting() {
    assert_eq!(go_quote("a\"b\\c\nd\te\u{1}"), r#""a\"b\\c\nd\te\x01""#);
    assert_eq!(go_quote("héllo"), "\"héllo\"");
    assert_eq!(go_quote_list(&[]), "[]");
    assert_eq!(go_quote_list(&strings(&["a", "b"])), r#"["a" "b"]"#);
}
