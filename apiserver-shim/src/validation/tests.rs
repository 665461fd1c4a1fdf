//! The validation of every kind, through the entry points as the API calls them.

use serde_json::json;

use super::*;
use crate::defaults::{on_create, on_update};
use crate::registry::batch::cronjobs::parse_cron;
use crate::registry::core::configmaps::MAX_DATA_SIZE;
use crate::resource::BUILT_IN;

fn rt(group: &str, plural: &str) -> &'static ResourceType {
    BUILT_IN.iter().find(|t| t.group == group && t.plural == plural).expect("served")
}

/// Create as the API does: defaults, then validation.
fn create(group: &str, plural: &str, mut object: Value) -> ApiResult<Value> {
    let rt = rt(group, plural);
    on_create(rt, &mut object);
    validate(rt, &object, None)?;
    Ok(object)
}

/// Update as the API does: update defaults and checks, then validation.
fn update(group: &str, plural: &str, old: &Value, mut new: Value) -> ApiResult<Value> {
    let rt = rt(group, plural);
    let old = on_update(rt, old, &mut new);
    validate(rt, &new, Some(&old))?;
    Ok(new)
}

/// The causes of a refused write, as (field, reason, message).
fn causes_of(result: ApiResult<Value>) -> Vec<(String, &'static str, String)> {
    let e = result.expect_err("refused");
    assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{e:?}");
    e.into_causes().into_iter().map(|c| (c.field, c.reason, c.message)).collect()
}

/// Whether a cause is at `field` with `reason` and a message starting with `message`.
#[track_caller]
fn assert_cause(
    causes: &[(String, &'static str, String)],
    field: &str,
    reason: &str,
    message: &str,
) {
    assert!(
        causes.iter().any(|(f, r, m)| f == field && *r == reason && m.starts_with(message)),
        "no {reason} at {field} starting {message:?} in {causes:#?}"
    );
}

fn pod(spec: Value) -> Value {
    json!({"metadata": {"name": "p", "namespace": "d"}, "spec": spec})
}

fn deployment(selector: Value, labels: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {
        "selector": selector,
        "template": {"metadata": {"labels": labels},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

#[test]
fn go_values_print_as_kube_apiserver_prints_them() {
    assert_eq!(crate::object::go_quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
    let map = [("b", "2"), ("a", "1")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
    assert_eq!(go_string_map(Some(&map)), r#"map[string]string{"a":"1", "b":"2"}"#);
    assert_eq!(go_string_map(None), "map[string]string(nil)");
    assert_eq!(
        go_label_selector(Some(&Default::default())),
        "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
    );
    assert_eq!(go_strings("string", Some(&["a", "b"][..])), r#"[]string{"a", "b"}"#);
}

#[test]
fn object_metadata_is_checked_for_every_kind() {
    let ok = json!({"metadata": {"name": "c", "namespace": "d",
        "labels": {"app.kubernetes.io/name": "web", "tier": "", "A_b.c": "x-Y_z.1"},
        "annotations": {"Example.com/Note": "anything at all"},
        "finalizers": ["example.com/hold", "kubernetes"],
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]}});
    create("", "configmaps", ok).expect("valid metadata");

    let bad = json!({"metadata": {"name": "c", "namespace": "d", "generateName": "Bad_",
        "labels": {"bad key!": "ok", "k": "-bad", "x/y/z": "v"},
        "annotations": {"/empty-prefix": "v"},
        "finalizers": ["hold", "a/b/c"],
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "controller": true},
            {"apiVersion": "", "kind": "", "name": "", "uid": "u2", "controller": true}]}});
    let causes = causes_of(create("", "configmaps", bad));
    assert_cause(
        &causes,
        "metadata.generateName",
        "FieldValueInvalid",
        "Invalid value: \"Bad_\": a lowercase RFC 1123 subdomain",
    );
    assert_cause(
        &causes,
        "metadata.labels",
        "FieldValueInvalid",
        "Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    );
    assert_cause(
        &causes,
        "metadata.labels",
        "FieldValueInvalid",
        "Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters",
    );
    assert_cause(
        &causes,
        "metadata.labels",
        "FieldValueInvalid",
        "Invalid value: \"x/y/z\": a qualified name must consist of",
    );
    assert_cause(
        &causes,
        "metadata.annotations",
        "FieldValueInvalid",
        "Invalid value: \"/empty-prefix\": prefix part must be non-empty",
    );
    assert_cause(
        &causes,
        "metadata.finalizers",
        "FieldValueInvalid",
        "Invalid value: \"a/b/c\": a qualified name",
    );
    assert_cause(
        &causes,
        "metadata.finalizers[0]",
        "FieldValueInvalid",
        "Invalid value: \"hold\": name is neither a standard finalizer name nor is it fully qualified",
    );
    assert_cause(
        &causes,
        "metadata.ownerReferences.uid",
        "FieldValueInvalid",
        "Invalid value: \"\": uid must not be empty",
    );
    assert_cause(
        &causes,
        "metadata.ownerReferences.apiVersion",
        "FieldValueInvalid",
        "Invalid value: \"\": version must not be empty",
    );
    assert_cause(
        &causes,
        "metadata.ownerReferences.kind",
        "FieldValueInvalid",
        "Invalid value: \"\": kind must not be empty",
    );
    assert_cause(
        &causes,
        "metadata.ownerReferences.name",
        "FieldValueInvalid",
        "Invalid value: \"\": name must not be empty",
    );
    assert!(causes.iter().any(|(f, _, m)| f == "metadata.ownerReferences" && m.ends_with(
        "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and /")));
}

#[test]
fn annotations_over_256_kib_are_too_long() {
    let big = "x".repeat(256 * 1024);
    let object = json!({"metadata": {"name": "c", "namespace": "d", "annotations": {"a": big}}});
    let causes = causes_of(create("", "configmaps", object));
    assert_eq!(
        causes,
        vec![(
            "metadata.annotations".into(),
            "FieldValueTooLong",
            "Too long: may not be more than 262144 bytes".into()
        )]
    );
}

#[test]
fn env_from_prefixes_are_environment_variable_names() {
    let p = pod(json!({"containers": [{"name": "web", "image": "nginx", "envFrom": [
        {"prefix": "A=B", "configMapRef": {"name": "c"}},
        {"prefix": "OK_", "configMapRef": {"name": "c"}},
    ]}]}));
    let causes = causes_of(create("", "pods", p));
    assert_cause(
        &causes,
        "spec.containers[0].envFrom[0].prefix",
        "FieldValueInvalid",
        "Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
    );
    assert_eq!(causes.len(), 1, "{causes:?}");
}

#[test]
fn managed_fields_are_validated_as_kube_apiserver_does() {
    let entry = |manager: &str, operation: &str| {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1",
               "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}})
    };
    let cm = |entries: Value| json!({"metadata": {"name": "c", "namespace": "default", "managedFields": entries}, "data": {"a": "b"}});
    let huge = "m".repeat(1 << 20);
    let causes = causes_of(create("", "configmaps", cm(json!([entry(&huge, "Update")]))));
    assert_eq!(
        causes,
        vec![(
            "metadata.managedFields[0].manager".into(),
            "FieldValueTooLong",
            "Too long: may not be more than 128 bytes".into()
        )]
    );
    let mut odd = entry("kubectl", "Delete");
    odd["fieldsType"] = json!("FieldsV2");
    odd["subresource"] = json!("s".repeat(257));
    let causes = causes_of(create(
        "",
        "configmaps",
        cm(json!([entry("ok", "Apply"), odd, entry("bell\u{7}", "Update")])),
    ));
    assert_eq!(
        causes,
        vec![
            (
                "metadata.managedFields[1].operation".into(),
                "FieldValueInvalid",
                "Invalid value: \"Delete\": must be `Apply` or `Update`".into()
            ),
            (
                "metadata.managedFields[1].fieldsType".into(),
                "FieldValueInvalid",
                "Invalid value: \"FieldsV2\": must be `FieldsV1`".into()
            ),
            (
                "metadata.managedFields[1].subresource".into(),
                "FieldValueTooLong",
                "Too long: may not be more than 256 bytes".into()
            ),
            (
                "metadata.managedFields[2].manager".into(),
                "FieldValueInvalid",
                "Invalid value: \"bell\\a\": invalid character U+0007".into()
            ),
        ]
    );
    let limit = "m".repeat(128);
    create("", "configmaps", cm(json!([entry(&limit, "Update")]))).expect("128 bytes is fine");
}

#[test]
fn valid_pods_pass_with_their_defaults() {
    let p = pod(json!({
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [{"name": "web", "image": "nginx:1.27",
            "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
            "env": [{"name": "MY.VAR-1", "value": "x"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                          "limits": {"cpu": 1, "memory": "1Gi", "nvidia.com/gpu": 2}}}]}));
    let stored = create("", "pods", p).expect("valid");
    // Requests default to limits (SetDefaults_Pod).
    assert_eq!(stored["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"], 2);
}

#[test]
fn container_mistakes_are_each_reported() {
    let p = pod(json!({
        "restartPolicy": "Sometimes", "dnsPolicy": "Google",
        "initContainers": [{"name": "web", "image": "busybox"}],
        "containers": [
            {"name": "web", "image": "nginx", "imagePullPolicy": "Maybe",
             "ports": [{"containerPort": 70000, "protocol": "HTTP"}, {"containerPort": 0}],
             "volumeMounts": [{"name": "missing", "mountPath": "/m"}]},
            {"name": "Web_2", "image": ""},
            {"name": "web", "image": "nginx"}]}));
    let causes = causes_of(create("", "pods", p));
    assert_cause(
        &causes,
        "spec.containers[0].imagePullPolicy",
        "FieldValueNotSupported",
        "Unsupported value: \"Maybe\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
    );
    assert_cause(
        &causes,
        "spec.containers[0].ports[0].containerPort",
        "FieldValueInvalid",
        "Invalid value: 70000: must be between 1 and 65535, inclusive",
    );
    assert_cause(
        &causes,
        "spec.containers[0].ports[0].protocol",
        "FieldValueNotSupported",
        "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
    );
    assert_cause(
        &causes,
        "spec.containers[0].ports[1].containerPort",
        "FieldValueRequired",
        "Required value",
    );
    assert_cause(
        &causes,
        "spec.containers[0].volumeMounts[0].name",
        "FieldValueNotFound",
        "Not found: \"missing\"",
    );
    assert_cause(&causes, "spec.containers[1].name", "FieldValueInvalid",
        "Invalid value: \"Web_2\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'");
    assert_cause(&causes, "spec.containers[1].image", "FieldValueRequired", "Required value");
    assert_cause(
        &causes,
        "spec.containers[2].name",
        "FieldValueDuplicate",
        "Duplicate value: \"web\"",
    );
    assert_cause(
        &causes,
        "spec.initContainers[0].name",
        "FieldValueDuplicate",
        "Duplicate value: \"web\"",
    );
    assert_cause(
        &causes,
        "spec.restartPolicy",
        "FieldValueNotSupported",
        "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
    );
    assert_cause(&causes, "spec.dnsPolicy", "FieldValueNotSupported",
        "Unsupported value: \"Google\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"");
    let e = create("", "pods", pod(json!({}))).unwrap_err();
    assert_eq!(e.causes()[0].field, "spec.containers");
    assert_eq!(e.message(), "Pod \"p\" is invalid: spec.containers: Required value");
}

#[test]
fn resources_parse_and_requests_stay_within_limits() {
    let with = |resources: Value| {
        pod(json!({"containers": [{"name": "c", "image": "i", "resources": resources}]}))
    };
    let causes = causes_of(create(
        "",
        "pods",
        with(json!({
        "requests": {"cpu": "2", "memory": "-1", "nvidia.com/gpu": "500m", "cpus": "1"},
        "limits": {"cpu": "1", "nvidia.com/gpu": "1"}})),
    ));
    assert_cause(
        &causes,
        "spec.containers[0].resources.requests",
        "FieldValueInvalid",
        "Invalid value: \"2\": must be less than or equal to cpu limit of 1",
    );
    assert_cause(
        &causes,
        "spec.containers[0].resources.requests",
        "FieldValueInvalid",
        "Invalid value: \"500m\": must be equal to nvidia.com/gpu limit of 1",
    );
    assert_cause(
        &causes,
        "spec.containers[0].resources.requests[memory]",
        "FieldValueInvalid",
        "Invalid value: \"-1\": must be greater than or equal to 0",
    );
    assert_cause(
        &causes,
        "spec.containers[0].resources.requests[nvidia.com/gpu]",
        "FieldValueInvalid",
        "Invalid value: 500m: must be an integer",
    );
    assert_cause(
        &causes,
        "spec.containers[0].resources.requests[cpus]",
        "FieldValueInvalid",
        "Invalid value: \"cpus\": must be a standard resource for containers",
    );
    let causes =
        causes_of(create("", "pods", with(json!({"requests": {"example.com/dongle": "1"}}))));
    assert_cause(
        &causes,
        "spec.containers[0].resources.limits",
        "FieldValueRequired",
        "Required value: Limit must be set for non overcommitable resources",
    );
    create("", "pods", with(json!({"requests": {"cpu": "0.5"}, "limits": {"cpu": "500m"}})))
        .expect("equal");

    // A quantity that does not parse is refused while decoding, as a 400.
    let e = create("", "pods", with(json!({"limits": {"memory": "1 GB"}}))).unwrap_err();
    assert_eq!(e.code(), 400);
    assert_eq!(
        e.message(),
        "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
}

#[test]
fn workload_quantities_are_decoded_too() {
    let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
    d["spec"]["template"]["spec"]["initContainers"] =
        json!([{"name": "init", "image": "i", "resources": {"requests": {"cpu": "lots"}}}]);
    let e = create("apps", "deployments", d).unwrap_err();
    assert_eq!(e.code(), 400);
    assert!(e.message().starts_with("Deployment in version \"v1\" cannot be handled"), "{e:?}");

    // A StatefulSet's claim templates' quantities, as well as its pods'.
    let mut sts = deployment(json!({"matchLabels": {"app": "db"}}), json!({"app": "db"}));
    sts["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"},
        "spec": {"resources": {"requests": {"storage": "1 GB"}}}}]);
    let e = create("apps", "statefulsets", sts.clone()).unwrap_err();
    assert_eq!(e.code(), 400);
    sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] =
        json!("1Gi");
    create("apps", "statefulsets", sts).expect("a claim template with a quantity");

    let cron = json!({"metadata": {"name": "cj", "namespace": "d"}, "spec": {
        "schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
                "resources": {"limits": {"memory": "1 GB"}}}]}}}}}});
    assert_eq!(create("batch", "cronjobs", cron).unwrap_err().code(), 400);
}

#[test]
fn pod_and_job_templates_change_only_where_allowed() {
    let p = pod(json!({"containers": [{"name": "web", "image": "nginx:1.27"}]}));
    let old = create("", "pods", p).unwrap();
    let mut newer = old.clone();
    newer["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    update("", "pods", &old, newer).expect("images may change");
    let mut renamed = old.clone();
    renamed["spec"]["containers"][0]["name"] = json!("api");
    let causes = causes_of(update("", "pods", &old, renamed));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_cause(&causes, "spec", "FieldValueForbidden", "Forbidden: pod updates may not change");

    // A suspended Job that never started may change its template's scheduling directives.
    let job = json!({"metadata": {"name": "j", "namespace": "d"}, "spec": {"suspend": true,
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
    let old = create("batch", "jobs", job).unwrap();
    let mut placed = old.clone();
    placed["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"});
    placed["spec"]["template"]["metadata"]["labels"] = json!({"a": "c"});
    update("batch", "jobs", &old, placed.clone()).expect("scheduling directives");
    placed["spec"]["suspend"] = json!(false);
    let causes = causes_of(update("batch", "jobs", &old, placed));
    assert_cause(&causes, "spec.template", "FieldValueInvalid", "Invalid value: {\"metadata\":");
    assert!(causes[0].2.ends_with("field is immutable"), "{causes:?}");
}

#[test]
fn quantities_parse_as_kubernetes_reads_them() {
    assert_eq!(parse_quantity("1"), Some(1_000_000_000));
    assert_eq!(parse_quantity("500m"), Some(500_000_000));
    assert_eq!(parse_quantity("0.5"), parse_quantity("500m"));
    assert_eq!(parse_quantity("1Ki"), Some(1024 * 1_000_000_000));
    assert_eq!(parse_quantity("1Gi"), parse_quantity("1073741824"));
    assert_eq!(parse_quantity("1e3"), parse_quantity("1k"));
    assert_eq!(parse_quantity("1E"), Some(1_000_000_000_000_000_000 * 1_000_000_000));
    assert_eq!(parse_quantity("-2"), Some(-2_000_000_000));
    assert_eq!(parse_quantity(".5"), parse_quantity("500m"));
    assert_eq!(parse_quantity("1n"), Some(1));
    for bad in ["", "1 GB", "1e", "one", "1.5.3", "1KB", "--1", "1Kii", "."] {
        assert_eq!(parse_quantity(bad), None, "{bad}");
    }
}

#[test]
fn deployments_need_a_selector_that_matches_the_template() {
    create(
        "apps",
        "deployments",
        deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web", "v": "1"})),
    )
    .expect("valid");
    let e = create(
        "apps",
        "deployments",
        deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "api"})),
    )
    .unwrap_err();
    assert_eq!(
        e.message(),
        "Deployment.apps \"web\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"api\"}: `selector` does not match template `labels`"
    );
    let causes =
        causes_of(create("apps", "deployments", deployment(json!({}), json!({"app": "web"}))));
    assert_eq!(
        causes,
        vec![(
            "spec.selector".to_string(),
            "FieldValueInvalid",
            "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment".to_string()
        )]
    );
    let mut missing = deployment(json!(null), json!({"app": "web"}));
    missing["spec"]["replicas"] = json!(-1);
    missing["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    let causes = causes_of(create("apps", "deployments", missing));
    assert_cause(
        &causes,
        "spec.replicas",
        "FieldValueInvalid",
        "Invalid value: -1: must be greater than or equal to 0",
    );
    assert_cause(&causes, "spec.selector", "FieldValueRequired", "Required value");
    assert_cause(
        &causes,
        "spec.template.metadata.labels",
        "FieldValueInvalid",
        "Invalid value: map[string]string{\"app\":\"web\"}",
    );
    assert_cause(
        &causes,
        "spec.template.spec.restartPolicy",
        "FieldValueNotSupported",
        "Unsupported value: \"Never\": supported values: \"Always\"",
    );
    let expressions = json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]},
                                                    {"key": "canary", "operator": "DoesNotExist"}]});
    create("apps", "deployments", deployment(expressions, json!({"app": "api"})))
        .expect("expressions match");
    let bad = json!({"matchExpressions": [{"key": "app", "operator": "Is", "values": ["web"]}]});
    let causes = causes_of(create("apps", "deployments", deployment(bad, json!({"app": "web"}))));
    assert_cause(
        &causes,
        "spec.selector.matchExpressions[0].operator",
        "FieldValueInvalid",
        "Invalid value: \"Is\": not a valid selector operator",
    );
    assert_cause(&causes, "spec.selector", "FieldValueInvalid", "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Is\", Values:[]string{\"web\"}}}}: invalid label selector");
}

#[test]
fn other_workloads_follow_their_own_rules() {
    // ReplicaSets speak of deployments, as kube-apiserver does.
    let causes = causes_of(create("apps", "replicasets", deployment(json!({}), json!({"a": "b"}))));
    assert_cause(&causes, "spec.selector", "FieldValueInvalid", "Invalid value: v1.LabelSelector{");
    assert!(causes[0].2.ends_with("empty selector is invalid for deployment"));
    // A DaemonSet without a selector matches nothing.
    let mut ds = deployment(json!(null), json!({"app": "agent"}));
    ds["metadata"]["name"] = json!("agent");
    let causes = causes_of(create("apps", "daemonsets", ds));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_cause(&causes, "spec.template.metadata.labels", "FieldValueInvalid", "Invalid value: map[string]string{\"app\":\"agent\"}: `selector` does not match template `labels`");
    // StatefulSets: their pod spec is not validated, their policies are.
    let mut sts = deployment(json!({"matchLabels": {"app": "db"}}), json!({"app": "db"}));
    sts["spec"]["template"]["spec"]["containers"] = json!([]);
    create("apps", "statefulsets", sts.clone()).expect("kube-apiserver leaves the pod spec alone");
    sts["spec"]["podManagementPolicy"] = json!("Sometimes");
    sts["spec"]["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": "Keep", "whenScaled": "Retain"});
    let causes = causes_of(create("apps", "statefulsets", sts));
    assert_cause(
        &causes,
        "spec.podManagementPolicy",
        "FieldValueInvalid",
        "Invalid value: \"Sometimes\": must be 'OrderedReady' or 'Parallel'",
    );
    assert_cause(
        &causes,
        "spec.persistentVolumeClaimRetentionPolicy.whenDeleted",
        "FieldValueNotSupported",
        "Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\"",
    );
    // ReplicationControllers default their selector to the template's labels.
    let rc = json!({"metadata": {"name": "rc", "namespace": "d"}, "spec": {"replicas": 2,
        "template": {"metadata": {"labels": {"app": "rc"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let stored = create("", "replicationcontrollers", rc).expect("defaulted selector");
    assert_eq!(stored["spec"]["selector"], json!({"app": "rc"}));
    let causes = causes_of(create(
        "",
        "replicationcontrollers",
        json!({"metadata": {"name": "rc"}, "spec": {}}),
    ));
    assert_cause(&causes, "spec.selector", "FieldValueRequired", "Required value");
    assert_cause(&causes, "spec.template", "FieldValueRequired", "Required value");
}

#[test]
fn rollout_strategies() {
    let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}});
    d["spec"]["minReadySeconds"] = json!(700);
    d["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(10);
    let causes = causes_of(create("apps", "deployments", d));
    assert_cause(
        &causes,
        "spec.strategy.rollingUpdate.maxUnavailable",
        "FieldValueInvalid",
        "Invalid value: 0: may not be 0 when `maxSurge` is 0",
    );
    assert_cause(
        &causes,
        "spec.progressDeadlineSeconds",
        "FieldValueInvalid",
        "Invalid value: 600: must be greater than minReadySeconds",
    );
    assert_cause(
        &causes,
        "spec.template.spec.activeDeadlineSeconds",
        "FieldValueForbidden",
        "Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
    );
    let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "half"}});
    let causes = causes_of(create("apps", "deployments", d));
    assert_cause(&causes, "spec.strategy.rollingUpdate.maxUnavailable", "FieldValueInvalid",
        "Invalid value: half: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')");
    let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    let stored = create("apps", "deployments", d).expect("Recreate");
    assert!(stored["spec"]["strategy"].get("rollingUpdate").is_none());

    let mut ds = deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
    let stored = create("apps", "daemonsets", ds.clone()).expect("defaults");
    assert_eq!(
        stored["spec"]["updateStrategy"]["rollingUpdate"],
        json!({"maxUnavailable": 1, "maxSurge": 0})
    );
    ds["spec"]["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}});
    let causes = causes_of(create("apps", "daemonsets", ds));
    assert_eq!(
        causes,
        vec![(
            "spec.updateStrategy.rollingUpdate.maxSurge".into(),
            "FieldValueInvalid",
            "Invalid value: 1: may not be set when maxUnavailable is non-zero".into()
        )]
    );
}

#[test]
fn jobs_must_not_restart_forever() {
    let job = |restart: Value| {
        json!({"metadata": {"name": "j", "namespace": "d"}, "spec": {"template": {"spec": {
        "restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}}}})
    };
    let stored = create("batch", "jobs", job(json!("Never"))).expect("valid");
    assert_eq!(
        (&stored["spec"]["completions"], &stored["spec"]["parallelism"]),
        (&json!(1), &json!(1))
    );
    let e = create("batch", "jobs", job(json!(null))).unwrap_err();
    assert_eq!(
        e.message(),
        "Job.batch \"j\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
    );
    let mut bad = job(json!("OnFailure"));
    bad["spec"]["completionMode"] = json!("Sometimes");
    bad["spec"]["backoffLimit"] = json!(-1);
    let causes = causes_of(create("batch", "jobs", bad));
    assert_cause(
        &causes,
        "spec.backoffLimit",
        "FieldValueInvalid",
        "Invalid value: -1: must be greater than or equal to 0",
    );
    assert_cause(
        &causes,
        "spec.completionMode",
        "FieldValueNotSupported",
        "Unsupported value: \"Sometimes\": supported values: \"NonIndexed\", \"Indexed\"",
    );
    // Parallelism alone leaves completions unset (a work queue).
    let mut queue = job(json!("Never"));
    queue["spec"]["parallelism"] = json!(3);
    assert!(create("batch", "jobs", queue).expect("valid")["spec"].get("completions").is_none());
}

#[test]
fn cron_jobs_need_a_schedule_cron_understands() {
    let cron = |schedule: &str, restart: &str| {
        json!({"metadata": {"name": "cj", "namespace": "d"}, "spec": {
        "schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}}}}}})
    };
    for ok in [
        "*/5 * * * *",
        "0 3 * * 1-5",
        "@hourly",
        "@every 1h30m",
        "0 0 1 jan,jul sun",
        "15,45 */2 ? * *",
    ] {
        create("batch", "cronjobs", cron(ok, "OnFailure")).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    let causes = causes_of(create("batch", "cronjobs", cron("* * *", "Always")));
    assert_cause(
        &causes,
        "spec.schedule",
        "FieldValueInvalid",
        "Invalid value: \"* * *\": expected exactly 5 fields, found 3: [* * *]",
    );
    assert_cause(
        &causes,
        "spec.jobTemplate.spec.template.spec.restartPolicy",
        "FieldValueRequired",
        "Required value: valid values: \"OnFailure\", \"Never\"",
    );
    let causes = causes_of(create("batch", "cronjobs", cron("", "Never")));
    assert_cause(&causes, "spec.schedule", "FieldValueRequired", "Required value");
    let causes = causes_of(create("batch", "cronjobs", cron("TZ=UTC 0 * * * *", "Never")));
    assert_cause(&causes, "spec.schedule", "FieldValueInvalid",
        "Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead");
    assert_eq!(
        parse_cron("60 * * * *").unwrap_err().to_string(),
        "end of range (60) above maximum (59): 60"
    );
    assert_eq!(
        parse_cron("* * 0 * *").unwrap_err().to_string(),
        "beginning of range (0) below minimum (1): 0"
    );
    assert_eq!(
        parse_cron("5-1 * * * *").unwrap_err().to_string(),
        "beginning of range (5) beyond end of range (1): 5-1"
    );
    assert_eq!(
        parse_cron("*/0 * * * *").unwrap_err().to_string(),
        "step of range should be a positive number: */0"
    );
    assert_eq!(
        parse_cron("x * * * *").unwrap_err().to_string(),
        "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax"
    );
    assert_eq!(
        parse_cron("@fortnightly").unwrap_err().to_string(),
        "unrecognized descriptor: @fortnightly"
    );
    assert_eq!(
        parse_cron("@every 1d").unwrap_err().to_string(),
        "failed to parse duration @every 1d: time: unknown unit \"d\" in duration \"1d\""
    );
    assert_eq!(
        parse_cron("* * * 13 *").unwrap_err().to_string(),
        "end of range (13) above maximum (12): 13"
    );
}

/// `@every` reads its duration with Go's parser: one beyond an int64 of nanoseconds is
/// refused, as robfig/cron refuses it, where only the syntax was checked before.
#[test]
fn cron_every_durations_must_fit_go() {
    for too_long in ["99999999999999999999h", "2562048h", "9223372036854775808ns"] {
        assert_eq!(
            parse_cron(&format!("@every {too_long}")).unwrap_err().to_string(),
            format!(
                "failed to parse duration @every {too_long}: time: invalid duration \"{too_long}\""
            )
        );
    }
    assert!(parse_cron("@every 2562047h").is_ok());
    assert!(parse_cron("@every 1.5μs").is_ok());
}

#[test]
fn services_ports_types_and_names() {
    let svc = |spec: Value| json!({"metadata": {"name": "web", "namespace": "d"}, "spec": spec});
    create(
        "",
        "services",
        svc(json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]})),
    )
    .expect("valid");
    create("", "services", svc(json!({"clusterIP": "None"}))).expect("headless needs no ports");
    create("", "services", svc(json!({"type": "ExternalName", "externalName": "db.example.com."})))
        .expect("external");
    let causes = causes_of(create("", "services", svc(json!({}))));
    assert_eq!(causes, vec![("spec.ports".into(), "FieldValueRequired", "Required value".into())]);
    let causes = causes_of(create(
        "",
        "services",
        svc(json!({"type": "Cluster", "sessionAffinity": "Sticky", "ports": [
        {"name": "http", "port": 70000, "targetPort": "HTTP_PORT"},
        {"port": 443, "targetPort": 0, "protocol": "TCP", "nodePort": 30000},
        {"name": "http", "port": 70000}]})),
    ));
    assert_cause(
        &causes,
        "spec.ports[0].port",
        "FieldValueInvalid",
        "Invalid value: 70000: must be between 1 and 65535, inclusive",
    );
    assert_cause(
        &causes,
        "spec.ports[0].targetPort",
        "FieldValueInvalid",
        "Invalid value: \"HTTP_PORT\": must contain at least one letter (a-z)",
    );
    assert_cause(&causes, "spec.ports[0].targetPort", "FieldValueInvalid",
        "Invalid value: \"HTTP_PORT\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    assert_cause(&causes, "spec.ports[1].name", "FieldValueRequired", "Required value");
    assert_cause(&causes, "spec.ports[2].name", "FieldValueDuplicate", "Duplicate value: \"http\"");
    assert_cause(
        &causes,
        "spec.ports[2]",
        "FieldValueDuplicate",
        "Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\"",
    );
    assert_cause(&causes, "spec.type", "FieldValueNotSupported",
        "Unsupported value: \"Cluster\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"");
    assert_cause(
        &causes,
        "spec.sessionAffinity",
        "FieldValueNotSupported",
        "Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
    );
    let causes = causes_of(create("", "services", svc(json!({"type": "ExternalName"}))));
    assert_cause(&causes, "spec.externalName", "FieldValueRequired", "Required value");
}

#[test]
fn configmap_and_secret_keys_and_sizes() {
    let cm = |data: Value| json!({"metadata": {"name": "c", "namespace": "d"}, "data": data});
    create("", "configmaps", cm(json!({"app.properties": "x", "KEY_1": "y", "-a.b_c": "z"})))
        .expect("valid keys");
    let causes = causes_of(create("", "configmaps", cm(json!({"a/b": "x", "..": "y"}))));
    assert_cause(&causes, "data[a/b]", "FieldValueInvalid",
        "Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')");
    assert_cause(
        &causes,
        "data[..]",
        "FieldValueInvalid",
        "Invalid value: \"..\": must not be '..'",
    );
    let big = "x".repeat(MAX_DATA_SIZE);
    let causes = causes_of(create("", "configmaps", cm(json!({"a": big, "b": "y"}))));
    assert_eq!(
        causes,
        vec![(
            "[]".into(),
            "FieldValueTooLong",
            "Too long: may not be more than 1048576 bytes".into()
        )]
    );

    let secret = |kind: &str, data: Value| json!({"metadata": {"name": "s", "namespace": "d"}, "type": kind, "data": data});
    create(
        "",
        "secrets",
        secret("kubernetes.io/tls", json!({"tls.crt": "YQ==", "tls.key": "Yg=="})),
    )
    .expect("tls");
    let causes =
        causes_of(create("", "secrets", secret("kubernetes.io/tls", json!({"tls.crt": "YQ=="}))));
    assert_eq!(
        causes,
        vec![("data[tls.key]".into(), "FieldValueRequired", "Required value".into())]
    );
    let mut with_strings = secret("kubernetes.io/basic-auth", json!({}));
    with_strings["stringData"] = json!({"username": "u"});
    create("", "secrets", with_strings).expect("stringData counts as data");
    // stringData is merged into data, base64-encoded and winning, and not kept.
    let mut mixed = secret("Opaque", json!({"a": "eA==", "b": "eQ=="}));
    mixed["stringData"] = json!({"a": "hi", "c": "héllo"});
    let stored = create("", "secrets", mixed).expect("stringData");
    assert_eq!(stored["data"], json!({"a": "aGk=", "b": "eQ==", "c": "aMOpbGxv"}));
    assert!(stored.get("stringData").is_none(), "{stored}");
    let mut only_strings = secret("Opaque", Value::Null);
    only_strings["stringData"] = json!({"token": "t"});
    let stored = create("", "secrets", only_strings).expect("stringData alone");
    assert_eq!(stored["data"], json!({"token": "dA=="}));
    // An update through stringData changes data, and an immutable Secret refuses it.
    let mut frozen = secret("Opaque", json!({"a": "eA=="}));
    frozen["immutable"] = json!(true);
    let old = create("", "secrets", frozen.clone()).expect("immutable");
    let mut same = frozen.clone();
    same["stringData"] = json!({"a": "x"});
    update("", "secrets", &old, same).expect("the same data, written as a string");
    let mut changed = frozen;
    changed["stringData"] = json!({"a": "y"});
    let causes = causes_of(update("", "secrets", &old, changed));
    assert_eq!(causes[0].1, "FieldValueForbidden", "{causes:?}");
    let big = "QUFB".repeat(MAX_DATA_SIZE / 3 + 1);
    let causes = causes_of(create("", "secrets", secret("Opaque", json!({"big": big}))));
    assert_eq!(
        causes,
        vec![(
            "data".into(),
            "FieldValueTooLong",
            "Too long: may not be more than 1048576 bytes".into()
        )]
    );
}

#[test]
fn namespaces_leases_events_and_claims() {
    let ns = json!({"metadata": {"name": "team"}, "spec": {"finalizers": ["kubernetes", "custom", "example.com/x"]}});
    let causes = causes_of(create("", "namespaces", ns));
    assert_eq!(causes, vec![("spec.finalizers".into(), "FieldValueInvalid",
        "Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified".into())]);

    let lease = json!({"metadata": {"name": "l", "namespace": "d"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}});
    let causes = causes_of(create("coordination.k8s.io", "leases", lease));
    assert_cause(
        &causes,
        "spec.leaseDurationSeconds",
        "FieldValueInvalid",
        "Invalid value: 0: must be greater than 0",
    );
    assert_cause(
        &causes,
        "spec.leaseTransitions",
        "FieldValueInvalid",
        "Invalid value: -1: must be greater than or equal to 0",
    );

    let event = |ns: &str, involved: &str| {
        json!({"metadata": {"name": "e", "namespace": ns},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": involved}, "reason": "Started"})
    };
    create("", "events", event("d", "d")).expect("matching namespaces");
    create("", "events", event("default", "")).expect("cluster-scoped object");
    let causes = causes_of(create("", "events", event("d", "other")));
    assert_eq!(
        causes,
        vec![(
            "involvedObject.namespace".into(),
            "FieldValueInvalid",
            "Invalid value: \"other\": does not match event.namespace".into()
        )]
    );
    let new_style = json!({"metadata": {"name": "e", "namespace": "d"}, "regarding": {"namespace": "d"},
        "eventTime": "2024-01-01T00:00:00.000000Z", "type": "Loud"});
    let causes = causes_of(create("events.k8s.io", "events", new_style));
    assert_cause(&causes, "reportingController", "FieldValueRequired", "Required value");
    assert_cause(&causes, "action", "FieldValueRequired", "Required value");
    assert_cause(
        &causes,
        "type",
        "FieldValueInvalid",
        "Invalid value: \"\": has invalid value: Loud",
    );

    let claim = |spec: Value| json!({"metadata": {"name": "c", "namespace": "d"}, "spec": spec});
    create(
        "",
        "persistentvolumeclaims",
        claim(json!({"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}})),
    )
    .expect("valid claim");
    let causes = causes_of(create(
        "",
        "persistentvolumeclaims",
        claim(json!({"accessModes": ["ReadWriteSometimes"]})),
    ));
    assert_cause(&causes, "spec.accessModes", "FieldValueNotSupported",
        "Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"");
    assert_cause(&causes, "spec.resources[storage]", "FieldValueRequired", "Required value");
    let causes = causes_of(create("", "persistentvolumeclaims", claim(json!({}))));
    assert_cause(
        &causes,
        "spec.accessModes",
        "FieldValueRequired",
        "Required value: at least 1 access mode is required",
    );
}

#[test]
fn rbac_rules_bindings_and_classes() {
    let role = json!({"metadata": {"name": "r", "namespace": "d"}, "rules": [
        {"resources": ["pods"], "verbs": ["get"]}, {"apiGroups": [""], "resources": ["pods"]},
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]});
    let causes = causes_of(create("rbac.authorization.k8s.io", "roles", role));
    assert_cause(
        &causes,
        "rules[0].apiGroups",
        "FieldValueRequired",
        "Required value: resource rules must supply at least one api group",
    );
    assert_cause(
        &causes,
        "rules[1].verbs",
        "FieldValueRequired",
        "Required value: verbs must contain at least one value",
    );
    assert_cause(
        &causes,
        "rules[2].nonResourceURLs",
        "FieldValueInvalid",
        "Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
    );

    let binding = json!({"metadata": {"name": "b", "namespace": "d"}, "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "d"}]});
    let stored = create("rbac.authorization.k8s.io", "rolebindings", binding.clone())
        .expect("defaulted groups");
    assert_eq!(stored["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    let mut cluster = binding.clone();
    cluster["subjects"] =
        json!([{"kind": "ServiceAccount", "name": "sa"}, {"kind": "Robot", "name": "r2"}]);
    let causes = causes_of(create("rbac.authorization.k8s.io", "clusterrolebindings", cluster));
    assert_cause(
        &causes,
        "roleRef.kind",
        "FieldValueNotSupported",
        "Unsupported value: \"Role\": supported values: \"ClusterRole\"",
    );
    assert_cause(&causes, "subjects[0].namespace", "FieldValueRequired", "Required value");
    assert_cause(
        &causes,
        "subjects[1].kind",
        "FieldValueNotSupported",
        "Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
    );

    let causes = causes_of(create(
        "storage.k8s.io",
        "storageclasses",
        json!({"metadata": {"name": "s"},
        "reclaimPolicy": "Recycle", "volumeBindingMode": "Later"}),
    ));
    assert_cause(&causes, "provisioner", "FieldValueRequired", "Required value");
    assert_cause(
        &causes,
        "reclaimPolicy",
        "FieldValueNotSupported",
        "Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\"",
    );
    assert_cause(
        &causes,
        "volumeBindingMode",
        "FieldValueNotSupported",
        "Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\"",
    );
    let causes = causes_of(create(
        "scheduling.k8s.io",
        "priorityclasses",
        json!({"metadata": {"name": "huge"}, "value": 2_000_000_000}),
    ));
    assert_cause(
        &causes,
        "value",
        "FieldValueForbidden",
        "Forbidden: maximum allowed value of a user defined priority is 1000000000",
    );
}

#[test]
fn immutable_fields_are_refused_on_update_with_every_other_cause() {
    // Deployment selector.
    let old = create(
        "apps",
        "deployments",
        deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"})),
    )
    .unwrap();
    let mut new = deployment(json!({"matchLabels": {"app": "api"}}), json!({"app": "api"}));
    new["spec"]["replicas"] = json!(-2);
    let causes = causes_of(update("apps", "deployments", &old, new));
    assert_cause(&causes, "spec.replicas", "FieldValueInvalid", "Invalid value: -2");
    assert_eq!(causes.last().unwrap(), &(
        "spec.selector".to_string(),
        "FieldValueInvalid",
        "Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"api\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable".to_string()
    ));
    // A PUT without the defaults is defaulted again, so it changes nothing it may not.
    let resent = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
    update("apps", "deployments", &old, resent).expect("defaults re-applied");

    // StatefulSet: only some fields change.
    let sts = deployment(json!({"matchLabels": {"app": "db"}}), json!({"app": "db"}));
    let old = create("apps", "statefulsets", sts.clone()).unwrap();
    let mut scaled = sts.clone();
    scaled["spec"]["replicas"] = json!(5);
    scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("postgres:17");
    update("apps", "statefulsets", &old, scaled).expect("replicas and template change");
    let mut renamed = sts.clone();
    renamed["spec"]["serviceName"] = json!("other");
    let causes = causes_of(update("apps", "statefulsets", &old, renamed));
    assert_eq!(causes, vec![("spec".into(), "FieldValueForbidden",
        "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into())]);

    // RoleBinding roleRef.
    let binding = json!({"metadata": {"name": "b", "namespace": "d"}, "roleRef": {"kind": "ClusterRole", "name": "view"}});
    let old = create("rbac.authorization.k8s.io", "rolebindings", binding.clone()).unwrap();
    update("rbac.authorization.k8s.io", "rolebindings", &old, binding.clone())
        .expect("same roleRef");
    let mut changed = binding;
    changed["roleRef"]["name"] = json!("edit");
    let causes = causes_of(update("rbac.authorization.k8s.io", "rolebindings", &old, changed));
    assert_eq!(causes, vec![("roleRef".into(), "FieldValueInvalid",
        "Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"edit\"}: cannot change roleRef".into())]);
}

#[test]
fn no_new_finalizers_while_deleting() {
    let mut old = create(
        "",
        "configmaps",
        json!({"metadata": {"name": "c", "namespace": "d",
        "finalizers": ["example.com/a"]}}),
    )
    .unwrap();
    old["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!(["example.com/a", "example.com/c", "example.com/b"]);
    assert_eq!(causes_of(update("", "configmaps", &old, new)), vec![("metadata.finalizers".into(), "FieldValueForbidden",
        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\", \"example.com/c\"}".into())]);
    let mut fewer = old.clone();
    fewer["metadata"]["finalizers"] = json!([]);
    update("", "configmaps", &old, fewer).expect("finalizers may go");
}

#[test]
fn more_immutable_fields() {
    // PersistentVolumeClaims: only a bound claim's storage request grows.
    let claim = json!({"metadata": {"name": "c", "namespace": "d"}, "spec": {"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}}});
    let mut old = create("", "persistentvolumeclaims", claim.clone()).unwrap();
    let mut bigger = claim.clone();
    bigger["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    let causes = causes_of(update("", "persistentvolumeclaims", &old, bigger.clone()));
    assert_cause(
        &causes,
        "spec",
        "FieldValueForbidden",
        "Forbidden: spec is immutable after creation except resources.requests",
    );
    old["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
    bigger["status"] = old["status"].clone();
    update("", "persistentvolumeclaims", &old, bigger).expect("a bound claim grows");
    let mut named = claim.clone();
    named["spec"]["volumeName"] = json!("pv-1");
    named["status"] = old["status"].clone();
    let old = update("", "persistentvolumeclaims", &old, named.clone()).expect("volumeName once");
    let mut renamed = named;
    renamed["spec"]["volumeName"] = json!("pv-2");
    assert_cause(
        &causes_of(update("", "persistentvolumeclaims", &old, renamed)),
        "spec",
        "FieldValueForbidden",
        "Forbidden: spec is immutable",
    );
    // A claim made without a class is given one once (the default written in later); a class,
    // once set, stays.
    let old = create("", "persistentvolumeclaims", claim.clone()).unwrap();
    let mut classed = claim.clone();
    classed["spec"]["storageClassName"] = json!("standard");
    let old = update("", "persistentvolumeclaims", &old, classed.clone()).expect("class from nil");
    let mut reclassed = classed;
    reclassed["spec"]["storageClassName"] = json!("fast");
    assert_cause(
        &causes_of(update("", "persistentvolumeclaims", &old, reclassed)),
        "spec",
        "FieldValueForbidden",
        "Forbidden: spec is immutable",
    );

    // PriorityClass value, StorageClass parameters.
    let pc = json!({"metadata": {"name": "high"}, "value": 1000});
    let old = create("scheduling.k8s.io", "priorityclasses", pc.clone()).unwrap();
    let mut changed = pc;
    changed["value"] = json!(2000);
    assert_eq!(
        causes_of(update("scheduling.k8s.io", "priorityclasses", &old, changed)),
        vec![(
            "value".into(),
            "FieldValueForbidden",
            "Forbidden: may not be changed in an update.".into()
        )]
    );
    let sc = json!({"metadata": {"name": "fast"}, "provisioner": "csi.example.com", "parameters": {"type": "ssd"}});
    let old = create("storage.k8s.io", "storageclasses", sc.clone()).unwrap();
    let mut changed = sc;
    changed["parameters"]["type"] = json!("hdd");
    changed["volumeBindingMode"] = json!("WaitForFirstConsumer");
    let causes = causes_of(update("storage.k8s.io", "storageclasses", &old, changed));
    assert_eq!(
        causes,
        vec![
            (
                "parameters".into(),
                "FieldValueForbidden",
                "Forbidden: updates to parameters are forbidden.".into()
            ),
            (
                "volumeBindingMode".into(),
                "FieldValueInvalid",
                "Invalid value: \"WaitForFirstConsumer\": field is immutable".into()
            ),
        ]
    );

    // Job completions.
    let job = json!({"metadata": {"name": "j", "namespace": "d"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
    let old = create("batch", "jobs", job.clone()).unwrap();
    let mut more = old.clone();
    more["spec"]["completions"] = json!(3);
    assert_cause(
        &causes_of(update("batch", "jobs", &old, more)),
        "spec.completions",
        "FieldValueInvalid",
        "Invalid value: 3: field is immutable",
    );
    update("batch", "jobs", &old, job).expect("a PUT of the same Job");

    // Node pod CIDRs, once set.
    let node = json!({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.1.0/24"}});
    let unset = create("", "nodes", json!({"metadata": {"name": "n"}})).unwrap();
    let old = update("", "nodes", &unset, node).expect("set once");
    let moved = json!({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.2.0/24", "podCIDRs": ["10.0.2.0/24"]}});
    assert_eq!(
        causes_of(update("", "nodes", &old, moved)),
        vec![(
            "spec.podCIDRs".into(),
            "FieldValueForbidden",
            "Forbidden: node updates may not change podCIDR except from \"\" to valid".into()
        )]
    );

    // Service cluster IPs: kept when left out, refused when changed.
    let svc = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}});
    let old = create("", "services", svc).unwrap();
    let resent =
        json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"ports": [{"port": 80}]}});
    assert_eq!(update("", "services", &old, resent).unwrap()["spec"]["clusterIP"], "10.96.0.10");
    let moved = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "10.96.0.11", "ports": [{"port": 80}]}});
    assert_eq!(
        causes_of(update("", "services", &old, moved)),
        vec![(
            "spec.clusterIPs[0]".into(),
            "FieldValueInvalid",
            "Invalid value: []string{\"10.96.0.11\"}: may not change once set".into()
        )]
    );

    // Secret type and immutable ConfigMaps.
    let secret = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": "YQ==", "tls.key": "Yg=="}});
    let old = create("", "secrets", secret.clone()).unwrap();
    let mut opaque = secret;
    opaque.as_object_mut().unwrap().remove("type");
    assert_cause(
        &causes_of(update("", "secrets", &old, opaque)),
        "type",
        "FieldValueInvalid",
        "Invalid value: \"Opaque\": field is immutable",
    );
    let cm =
        json!({"metadata": {"name": "c", "namespace": "d"}, "immutable": true, "data": {"a": "1"}});
    let old = create("", "configmaps", cm).unwrap();
    let thawed = json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"a": "2"}});
    assert_eq!(
        causes_of(update("", "configmaps", &old, thawed)),
        vec![
            (
                "immutable".into(),
                "FieldValueForbidden",
                "Forbidden: field is immutable when `immutable` is set".into()
            ),
            (
                "data".into(),
                "FieldValueForbidden",
                "Forbidden: field is immutable when `immutable` is set".into()
            ),
        ]
    );
}

#[test]
fn controller_revisions_need_data_a_nonnegative_revision_and_keep_their_data() {
    let revision = |data: Value, number: i64| {
        json!({"metadata": {"name": "web-6b7d5f8c9f", "namespace": "d"}, "revision": number,
               "data": data})
    };
    let patch = json!({"spec": {"template": {"$patch": "replace", "spec": {}}}});
    let old = create("apps", "controllerrevisions", revision(patch.clone(), 1)).expect("valid");

    let mut missing = revision(Value::Null, -1);
    missing.as_object_mut().unwrap().remove("data");
    let causes = causes_of(create("apps", "controllerrevisions", missing));
    assert_cause(&causes, "data", "FieldValueRequired", "Required value: data is mandatory");
    assert_cause(
        &causes,
        "revision",
        "FieldValueInvalid",
        "Invalid value: -1: must be greater than or equal to 0",
    );

    // Only the revision number (and metadata) may change: a rollback renumbers a revision.
    update("apps", "controllerrevisions", &old, revision(patch, 3)).expect("renumbered");
    let causes = causes_of(update("apps", "controllerrevisions", &old, revision(json!({}), 1)));
    assert_cause(&causes, "data", "FieldValueInvalid", "Invalid value: {}");
    assert!(causes[0].2.ends_with("field is immutable"), "{causes:?}");
}

fn quota(spec: Value) -> Value {
    json!({"metadata": {"name": "q", "namespace": "d"}, "spec": spec})
}

#[test]
fn resource_quotas_are_validated_as_kube_apiserver_validates_them() {
    for hard in [
        json!({"pods": "2", "count/configmaps": "3", "requests.nvidia.com/mig-1g.18gb": "1",
               "requests.cpu": "1500m", "limits.memory": "1Gi", "requests.hugepages-2Mi": "2Mi",
               "gold.storageclass.storage.k8s.io/requests.storage": "10Gi",
               "count/deployments.apps": "1", "services.loadbalancers": "0"}),
        // Kubernetes accepts these, though only `requests.` extended resources are counted.
        json!({"nvidia.com/gpu": "1", "limits.nvidia.com/gpu": "1"}),
    ] {
        create("", "resourcequotas", quota(json!({"hard": hard}))).expect("valid");
    }
    let causes = causes_of(create(
        "",
        "resourcequotas",
        quota(json!({"hard": {"foo": "1", "storage": "1Gi", "pods": "1500m", "cpu": "-1",
                              "nvidia.com/gpu": "0.5", "requests.nvidia.com/gpu": "0.5"}})),
    ));
    assert_eq!(
        causes,
        vec![
            (
                "spec.hard[cpu]".into(),
                "FieldValueInvalid",
                "Invalid value: \"-1\": must be greater than or equal to 0".into()
            ),
            (
                "spec.hard[foo]".into(),
                "FieldValueInvalid",
                "Invalid value: \"foo\": must be a standard resource type or fully qualified"
                    .into()
            ),
            (
                "spec.hard[foo]".into(),
                "FieldValueInvalid",
                "Invalid value: \"foo\": must be a standard resource for quota".into()
            ),
            (
                "spec.hard[nvidia.com/gpu]".into(),
                "FieldValueInvalid",
                "Invalid value: 0.5: must be an integer".into()
            ),
            (
                "spec.hard[pods]".into(),
                "FieldValueInvalid",
                "Invalid value: 1500m: must be an integer".into()
            ),
            (
                "spec.hard[storage]".into(),
                "FieldValueInvalid",
                "Invalid value: \"storage\": must be a standard resource for quota".into()
            ),
        ]
    );
}

#[test]
fn resource_quota_scopes_fit_their_resources_and_do_not_change() {
    let scoped = |scopes: Value, hard: Value| quota(json!({"hard": hard, "scopes": scopes}));
    create(
        "",
        "resourcequotas",
        scoped(json!(["NotTerminating"]), json!({"pods": "1", "cpu": "1"})),
    )
    .expect("valid");
    let causes = causes_of(create(
        "",
        "resourcequotas",
        scoped(json!(["BestEffort", "NotBestEffort", "Nightly"]), json!({"cpu": "1"})),
    ));
    let shown = r#"[]core.ResourceQuotaScope{"BestEffort", "NotBestEffort", "Nightly"}"#;
    assert_eq!(
        causes,
        vec![
            (
                "spec.scopes".into(),
                "FieldValueInvalid",
                format!("Invalid value: {shown}: unsupported scope applied to resource")
            ),
            (
                "spec.scopes".into(),
                "FieldValueInvalid",
                format!("Invalid value: {shown}: unsupported scope")
            ),
            (
                "spec.scopes".into(),
                "FieldValueInvalid",
                format!("Invalid value: {shown}: conflicting scopes")
            ),
        ]
    );
    let selector = |expressions: Value| {
        quota(json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": expressions}}))
    };
    create(
        "",
        "resourcequotas",
        selector(json!([{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}])),
    )
    .expect("valid");
    let causes = causes_of(create(
        "",
        "resourcequotas",
        selector(json!([
            {"scopeName": "PriorityClass", "operator": "In"},
            {"scopeName": "Terminating", "operator": "NotIn", "values": ["x"]},
            {"scopeName": "BestEffort", "operator": "Exists", "values": ["x"]},
            {"scopeName": "PriorityClass", "operator": "Gt", "values": ["1"]},
        ])),
    ));
    let path = "spec.scopeSelector.matchExpressions";
    assert_cause(
        &causes,
        &format!("{path}.values"),
        "FieldValueRequired",
        "Required value: must be at least one value",
    );
    assert_cause(
        &causes,
        &format!("{path}.operator"),
        "FieldValueInvalid",
        "Invalid value: \"NotIn\": must be 'Exists' when scope is any of",
    );
    assert_cause(
        &causes,
        &format!("{path}.values"),
        "FieldValueInvalid",
        "Invalid value: []string{\"x\"}: must be no value",
    );
    assert_cause(
        &causes,
        &format!("{path}.operator"),
        "FieldValueInvalid",
        "Invalid value: \"Gt\": not a valid selector operator",
    );
    assert_eq!(causes.len(), 4, "{causes:#?}");
    // BestEffort limits nothing but pods.
    let causes = causes_of(create(
        "",
        "resourcequotas",
        quota(json!({"hard": {"memory": "1Gi"},
                     "scopeSelector": {"matchExpressions": [{"scopeName": "BestEffort", "operator": "Exists"}]}})),
    ));
    assert_eq!(
        causes,
        vec![(
            path.into(),
            "FieldValueInvalid",
            "Invalid value: core.ScopeSelector{MatchExpressions:[]core.ScopedResourceSelectorRequirement{\
             core.ScopedResourceSelectorRequirement{ScopeName:\"BestEffort\", Operator:\"Exists\", \
             Values:[]string(nil)}}}: unsupported scope applied to resource"
                .into()
        )]
    );

    let old = create("", "resourcequotas", scoped(json!(["NotTerminating"]), json!({"pods": "1"})))
        .unwrap();
    let changed = scoped(json!(["Terminating"]), json!({"pods": "1"}));
    assert_eq!(
        causes_of(update("", "resourcequotas", &old, changed)),
        vec![(
            "spec.scopes".into(),
            "FieldValueInvalid",
            r#"Invalid value: []core.ResourceQuotaScope{"Terminating"}: field is immutable"#.into()
        )]
    );
    update("", "resourcequotas", &old, scoped(json!(["NotTerminating"]), json!({"pods": "5"})))
        .expect("limits may change");
}
