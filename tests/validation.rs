//! What real kubectl shows when kube-apiserver's validation refuses an object: a 422 Invalid
//! whose causes name each field, in kube-apiserver's words, all of them at once.

use carrel_e2e::{fails, ok, TestServer};

const K31: &str = "kubectl.1.31";

fn create(server: &TestServer, manifest: &str) -> String {
    fails(server.kubectl_with_input(
        K31,
        &["create", "-f", "-", "--validate=false"],
        Some(manifest),
    ))
}

#[test]
fn a_selector_that_misses_the_template_is_refused() {
    let server = TestServer::start("");
    let err = create(
        &server,
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
        "spec":{"selector":{"matchLabels":{"app":"web"}},
        "template":{"metadata":{"labels":{"app":"api"}},
        "spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}}}"#,
    );
    assert!(
        err.contains(
            "The Deployment \"web\" is invalid: spec.template.metadata.labels: Invalid value: \
             map[string]string{\"app\":\"api\"}: `selector` does not match template `labels`"
        ),
        "{err}"
    );
    let err = fails(server.kubectl(K31, &["get", "deployment", "web"]));
    assert!(err.contains("not found"), "nothing was stored: {err}");
}

#[test]
fn every_mistake_of_a_pod_is_listed() {
    let server = TestServer::start("/tenants/a");
    let err = create(
        &server,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"bad key":"v"}},
        "spec":{"restartPolicy":"Sometimes","containers":[
          {"name":"Web","image":"nginx","ports":[{"containerPort":70000}],
           "resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}},
          {"name":"side","image":""}]}}"#,
    );
    for expected in [
        "The Pod \"p\" is invalid: ",
        "metadata.labels: Invalid value: \"bad key\": name part must consist of alphanumeric characters",
        "spec.containers[0].name: Invalid value: \"Web\": a lowercase RFC 1123 label",
        "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
        "spec.containers[1].image: Required value",
        "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
}

#[test]
fn jobs_services_and_configmaps_meet_their_rules() {
    let server = TestServer::start("");
    let err = create(
        &server,
        r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j"},
        "spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}"#,
    );
    assert!(
        err.contains(
            "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
        ),
        "{err}"
    );
    let err = create(
        &server,
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"},"spec":{}}"#,
    );
    assert!(err.contains("The Service \"svc\" is invalid: spec.ports: Required value"), "{err}");
    let err = create(
        &server,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a/b":"x"}}"#,
    );
    assert!(
        err.contains("data[a/b]: Invalid value: \"a/b\": a valid config key must consist of"),
        "{err}"
    );
    let err = create(
        &server,
        r#"{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"cj"},
        "spec":{"schedule":"every day","jobTemplate":{"spec":{"template":{"spec":{
        "restartPolicy":"Never","containers":[{"name":"c","image":"busybox"}]}}}}}}"#,
    );
    assert!(
        err.contains(
            "spec.schedule: Invalid value: \"every day\": expected exactly 5 fields, found 2: [every day]"
        ),
        "{err}"
    );
}

#[test]
fn immutable_fields_stay_as_created() {
    let server = TestServer::start("");
    ok(server.kubectl(K31, &["create", "rolebinding", "rb", "--clusterrole=view", "--user=alice"]));
    let err = fails(server.kubectl(
        K31,
        &["patch", "rolebinding", "rb", "--type=merge", "-p", r#"{"roleRef":{"name":"edit"}}"#],
    ));
    assert!(
        err.contains(
            "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", \
             Kind:\"ClusterRole\", Name:\"edit\"}: cannot change roleRef"
        ),
        "{err}"
    );

    let sts = r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db"},
        "spec":{"serviceName":"db","selector":{"matchLabels":{"app":"db"}},
        "template":{"metadata":{"labels":{"app":"db"}},
        "spec":{"containers":[{"name":"pg","image":"postgres:17"}]}}}}"#;
    ok(server.kubectl_with_input(K31, &["create", "-f", "-", "--validate=false"], Some(sts)));
    ok(server.kubectl(K31, &["scale", "statefulset", "db", "--replicas=3"]));
    let err = fails(server.kubectl(
        K31,
        &[
            "patch",
            "statefulset",
            "db",
            "--type=merge",
            "-p",
            r#"{"spec":{"serviceName":"other"}}"#,
        ],
    ));
    assert!(
        err.contains(
            "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', \
             'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and \
             'minReadySeconds' are forbidden"
        ),
        "{err}"
    );
}
