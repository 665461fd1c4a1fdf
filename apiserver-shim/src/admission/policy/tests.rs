use std::sync::Arc;

use serde_json::{json, Value};

use super::Requester;
use crate::api::{Api, DeleteParams, Target, Write};
use crate::status::ApiResult;

fn target<'a>(
    api: &'a Api,
    group: &str,
    version: &str,
    plural: &str,
    ns: Option<&str>,
) -> Target<'a> {
    // The registry lives as long as the API; built-in types are static.
    let rt = crate::resource::built_in(group, plural).expect("type");
    assert_eq!(rt.version, version);
    let _ = api;
    Target { rt, namespace: ns.map(str::to_owned) }
}

fn create_in(
    api: &Api,
    group: &str,
    plural: &str,
    ns: Option<&str>,
    object: Value,
    write: &Write,
) -> ApiResult<Value> {
    let rt = crate::resource::built_in(group, plural).expect("type");
    api.create(&Target { rt, namespace: ns.map(str::to_owned) }, object, write)
}

fn policy(api: &Api, name: &str, spec: Value) -> ApiResult<Value> {
    create_in(
        api,
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        None,
        json!({"metadata": {"name": name}, "spec": spec}),
        &Write::by("t", false),
    )
}

fn binding(api: &Api, name: &str, spec: Value) -> ApiResult<Value> {
    create_in(
        api,
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        None,
        json!({"metadata": {"name": name}, "spec": spec}),
        &Write::by("t", false),
    )
}

fn deployments_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"metadata": {"name": name}, "spec": {"replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

fn create_deployment(api: &Api, ns: &str, d: Value, write: &Write) -> ApiResult<Value> {
    create_in(api, "apps", "deployments", Some(ns), d, write)
}

#[test]
fn a_policy_is_defaulted_and_an_expression_that_does_not_compile_is_refused() {
    let (_dir, api) = crate::api::scratch();
    let created = policy(
        &api,
        "replicas",
        json!({"matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replicas <= 5"}]}),
    )
    .expect("created");
    assert_eq!(created["spec"]["failurePolicy"], "Fail");
    assert_eq!(created["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
    assert_eq!(created["spec"]["matchConstraints"]["namespaceSelector"], json!({}));
    assert_eq!(created["spec"]["matchConstraints"]["objectSelector"], json!({}));
    assert_eq!(created["spec"]["matchConstraints"]["resourceRules"][0]["scope"], "*");

    let e = policy(
        &api,
        "bad",
        json!({"matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replicas <="}]}),
    )
    .expect_err("refused");
    assert_eq!(e.code(), 422);
    assert!(
        e.message().starts_with("ValidatingAdmissionPolicy.admissionregistration.k8s.io \"bad\" is invalid: spec.validations[0].expression: Invalid value: \"object.spec.replicas <=\": compilation failed: "),
        "{}",
        e.message()
    );
    let e = policy(&api, "authz", json!({"matchConstraints": deployments_rule(),
        "validations": [{"expression": "authorizer.group('').resource('pods').check('get').allowed()"}]}))
    .expect_err("no authorizer");
    assert!(e.message().contains("undeclared reference to 'authorizer'"), "{}", e.message());
    let e = policy(&api, "empty", json!({"validations": [{"expression": "true"}]}))
        .expect_err("no constraints");
    assert!(e.message().contains("spec.matchConstraints: Required value"), "{}", e.message());
    let e = policy(
        &api,
        "norules",
        json!({"matchConstraints": {}, "validations": [{"expression": "true"}]}),
    )
    .expect_err("no rules");
    assert!(
        e.message().contains("spec.matchConstraints.resourceRules: Required value"),
        "{}",
        e.message()
    );

    let e = binding(
        &api,
        "b",
        json!({"policyName": "replicas", "validationActions": ["Deny", "Warn"]}),
    )
    .expect_err("deny and warn");
    assert!(e.message().contains("must not contain both Deny and Warn"), "{}", e.message());
    let e = binding(&api, "b", json!({"policyName": "replicas", "validationActions": []}))
        .expect_err("no actions");
    assert!(e.message().contains("spec.validationActions: Required value"), "{}", e.message());
    let e = binding(
        &api,
        "b",
        json!({"policyName": "replicas", "validationActions": ["Deny", "Deny"]}),
    )
    .expect_err("twice");
    assert!(
        e.message().contains("spec.validationActions[1]: Duplicate value: \"Deny\""),
        "{}",
        e.message()
    );
}

#[test]
fn deny_refuses_in_kubernetes_words_warn_warns_and_dry_runs_are_checked() {
    let (_dir, api) = crate::api::scratch();
    policy(
        &api,
        "replicas",
        json!({"matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replicas <= 5"}]}),
    )
    .expect("policy");
    // No binding: nothing enforced.
    create_deployment(&api, "default", deployment("free", 9), &Write::by("t", true))
        .expect("unbound");
    binding(&api, "deny", json!({"policyName": "replicas", "validationActions": ["Deny"]}))
        .expect("binding");
    let e = create_deployment(&api, "default", deployment("big", 6), &Write::by("t", false))
        .expect_err("denied");
    assert_eq!((e.code(), e.reason()), (422, "Invalid"));
    assert_eq!(
        e.message(),
        "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'replicas' with binding 'deny' denied request: failed expression: object.spec.replicas <= 5"
    );
    create_deployment(&api, "default", deployment("big", 6), &Write::by("t", true))
        .expect_err("dry run too");
    create_deployment(&api, "default", deployment("small", 3), &Write::by("t", false))
        .expect("admitted");
    // An update is checked too.
    let t = target(&api, "apps", "v1", "deployments", Some("default"));
    let mut grown = api.get(&t, "small").expect("get");
    grown["spec"]["replicas"] = json!(7);
    api.update(&t, "small", grown, None, &Write::by("t", false)).expect_err("update denied");

    // The request is shown: who asks, and what.
    policy(
        &api,
        "who",
        json!({"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "request.userInfo.username != 'mallory' || request.operation != 'CREATE' || !('team' in request.userInfo.groups)",
                "messageExpression": "request.userInfo.username + ' may not create ' + request.resource.resource + ' in ' + request.namespace + (request.dryRun ? ' (dry run)' : '')"}]}),
    )
    .expect("policy");
    binding(&api, "who", json!({"policyName": "who", "validationActions": ["Deny"]}))
        .expect("binding");
    let mallory = crate::auth::UserInfo {
        name: "mallory".into(),
        groups: vec!["team".into()],
        ..Default::default()
    };
    let write = Write { requester: Requester::new(Some(mallory)), ..Write::by("t", true) };
    let e = create_in(
        &api,
        "",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c"}}),
        &write,
    )
    .expect_err("mallory");
    assert!(
        e.message()
            .ends_with("denied request: mallory may not create configmaps in default (dry run)"),
        "{}",
        e.message()
    );
    create_in(
        &api,
        "",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c"}}),
        &Write::by("t", false),
    )
    .expect("anyone else");

    // Warn instead: admitted, with kube-apiserver's warning.
    let rt = crate::resource::built_in(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
    )
    .expect("type");
    api.delete(&Target { rt, namespace: None }, "deny", &DeleteParams::default()).expect("unbound");
    binding(
        &api,
        "warn",
        json!({"policyName": "replicas", "validationActions": ["Warn", "Audit"]}),
    )
    .expect("binding");
    let write = Write { requester: Requester::default(), ..Write::by("t", false) };
    create_deployment(&api, "default", deployment("warned", 8), &write).expect("admitted");
    assert_eq!(
        write.requester.warnings(),
        vec!["Validation failed for ValidatingAdmissionPolicy 'replicas' with binding 'warn': failed expression: object.spec.replicas <= 5".to_owned()]
    );
}

#[test]
fn reasons_messages_params_variables_and_failure_policies() {
    let (_dir, api) = crate::api::scratch();
    create_in(
        &api,
        "",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "limits", "labels": {"kind": "limit"}}, "data": {"max": "2"}}),
        &Write::by("t", false),
    )
    .expect("param");
    policy(
        &api,
        "from-params",
        json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": deployments_rule(),
        "variables": [{"name": "max", "expression": "int(params.data.max)"},
                      {"name": "broken", "expression": "object.nope.nope"}],
        "validations": [{"expression": "object.spec.replicas <= variables.max",
            "messageExpression": "'at most ' + string(variables.max) + ' replicas'",
            "reason": "Forbidden"}]}),
    )
    .expect("policy");
    binding(
        &api,
        "by-name",
        json!({"policyName": "from-params", "validationActions": ["Deny"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
    )
    .expect("binding");
    let e = create_deployment(&api, "default", deployment("three", 3), &Write::by("t", false))
        .expect_err("over");
    assert_eq!((e.code(), e.reason()), (403, "Forbidden"));
    assert!(e.message().ends_with("denied request: at most 2 replicas"), "{}", e.message());
    create_deployment(&api, "default", deployment("two", 2), &Write::by("t", false))
        .expect("a broken variable nobody reads is never evaluated");
    // In another namespace the param is not found: Deny.
    create_in(
        &api,
        "",
        "namespaces",
        None,
        json!({"metadata": {"name": "other", "labels": {"env": "test"}}}),
        &Write::by("t", false),
    )
    .expect("ns");
    let e = create_deployment(&api, "other", deployment("x", 1), &Write::by("t", false))
        .expect_err("no params");
    assert!(e.message().ends_with("denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"), "{}", e.message());

    // A namespace selector on a binding: only labelled namespaces.
    policy(&api, "labelled", json!({"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE"], "resources": ["configmaps"]}]},
        "validations": [{"expression": "has(object.data) && 'owner' in object.data", "message": "an owner is required"}]})).expect("policy");
    binding(
        &api,
        "test-only",
        json!({"policyName": "labelled", "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"env": "test"}}}}),
    )
    .expect("binding");
    create_in(
        &api,
        "",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "a"}}),
        &Write::by("t", false),
    )
    .expect("unlabelled namespace");
    let e = create_in(
        &api,
        "",
        "configmaps",
        Some("other"),
        json!({"metadata": {"name": "a"}}),
        &Write::by("t", false),
    )
    .expect_err("labelled");
    assert!(e.message().ends_with("denied request: an owner is required"), "{}", e.message());

    // An evaluation error: Fail refuses, Ignore admits.
    for (name, failure, admitted) in [("ignores", "Ignore", true), ("fails", "Fail", false)] {
        policy(&api, name, json!({"failurePolicy": failure, "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["DELETE"], "resources": ["secrets"]}]},
            "validations": [{"expression": "oldObject.data.missing == 'x'"}]})).expect("policy");
        binding(&api, name, json!({"policyName": name, "validationActions": ["Deny"]}))
            .expect("binding");
        create_in(
            &api,
            "",
            "secrets",
            Some("default"),
            json!({"metadata": {"name": name}}),
            &Write::by("t", false),
        )
        .expect("secret");
        let rt = crate::resource::built_in("", "secrets").expect("type");
        let deleted = api.delete(
            &Target { rt, namespace: Some("default".into()) },
            name,
            &DeleteParams::default(),
        );
        if admitted {
            deleted.expect("ignored");
        } else {
            // Both policies match this delete; the failing one refuses it.
            let e = deleted.expect_err("refused");
            assert!(e.message().contains("ValidatingAdmissionPolicy 'fails' with binding 'fails' denied request: expression 'oldObject.data.missing == 'x'' resulted in error: "), "{}", e.message());
        }
    }
}

#[test]
fn subresources_match_only_rules_naming_them() {
    let (_dir, api) = crate::api::scratch();
    policy(
        &api,
        "status-only",
        json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
        "operations": ["UPDATE"], "resources": ["deployments/status"]}]},
        "validations": [{"expression": "false", "message": "no status writes"}]}),
    )
    .expect("policy");
    binding(&api, "b", json!({"policyName": "status-only", "validationActions": ["Deny"]}))
        .expect("binding");
    create_deployment(&api, "default", deployment("d", 1), &Write::by("t", false)).expect("create");
    let t = target(&api, "apps", "v1", "deployments", Some("default"));
    let mut d = api.get(&t, "d").expect("get");
    d["metadata"]["labels"] = json!({"a": "b"});
    let d = api
        .update(&t, "d", d, None, &Write::by("t", false))
        .expect("the main resource is not matched");
    let mut s = d.clone();
    s["status"] = json!({"replicas": 1});
    let e = api
        .update(&t, "d", s, Some(crate::resource::Subresource::Status), &Write::by("t", false))
        .expect_err("status");
    assert!(e.message().ends_with("denied request: no status writes"), "{}", e.message());
}

#[test]
fn policies_run_before_the_tenants_own_admission_and_cannot_switch_it_off() {
    let (_dir, api) = crate::api::scratch();
    api.set_admission(Arc::new(crate::admission::TenantAdmission::default()));
    let pods = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE"], "resources": ["pods"]}]});
    policy(&api, "labelled", json!({"matchConstraints": pods,
        "validations": [{"expression": "has(object.metadata.labels)", "message": "labels please"}]}))
    .expect("policy");
    binding(&api, "b", json!({"policyName": "labelled", "validationActions": ["Deny"]}))
        .expect("binding");
    let pod = |labels: Value| {
        json!({"metadata": {"name": "p", "labels": labels}, "spec": {"containers": [{"name": "c",
            "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}})
    };
    let w = Write::by("t", false);
    let e = create_in(&api, "", "pods", Some("default"), pod(Value::Null), &w).expect_err("policy");
    assert!(e.message().ends_with("denied request: labels please"), "{}", e.message());
    let e = create_in(&api, "", "pods", Some("default"), pod(json!({"a": "b"})), &w)
        .expect_err("pod security still refuses what the policy admits");
    assert_eq!(e.code(), 403);
    assert!(e.message().contains("NVIDIA_*"), "{}", e.message());
}

#[test]
fn the_servers_own_records_are_not_the_policies_to_refuse() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("s");
    let open = |address: &str| {
        let network = crate::ServiceNetwork::default().with_api_endpoint(address.parse().unwrap());
        let store = carrel_store::SledStore::open(&path, carrel_store::Options::create()).unwrap();
        Api::new_in(Arc::new(store), network)
    };
    let api = open("10.0.0.1:6443").expect("api");
    let everything = json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
        "resources": ["*", "*/*"], "operations": ["*"]}]});
    policy(
        &api,
        "no",
        json!({"matchConstraints": everything, "validations": [{"expression": "false"}]}),
    )
    .unwrap();
    binding(&api, "no", json!({"policyName": "no", "validationActions": ["Deny"]})).unwrap();
    let users = create_in(
        &api,
        "",
        "configmaps",
        Some("default"),
        json!({"metadata": {"name": "c"}}),
        &Write::by("t", false),
    );
    assert_eq!(users.unwrap_err().code(), 422, "the policy holds for users");
    drop(api);

    // Opened where the API now answers elsewhere: its own endpoints are brought up to date.
    let api = open("10.0.0.2:6443").expect("the cluster opens");
    let slices = target(&api, "discovery.k8s.io", "v1", "endpointslices", Some("default"));
    let slice = api.get(&slices, "kubernetes").unwrap();
    assert_eq!(slice["endpoints"][0]["addresses"][0], "10.0.0.2");
}
