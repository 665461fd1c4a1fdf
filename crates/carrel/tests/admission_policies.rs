//! ValidatingAdmissionPolicies in tenants, end to end: `carrel up` with two tenants, policies
//! and bindings applied with real kubectl, and the requests they deny, warn of or leave alone
//! answered as kube-apiserver answers them. One tenant's policies never touch another's.

mod common;

use carrel_e2e::{fails, ok};
use common::{apply, create, kubectls, Up};

/// At most five replicas for a Deployment.
const REPLICAS: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replicas
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= 5
";

const DENY: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replicas-deny
spec:
  policyName: replicas
  validationActions: [Deny]
";

const WARN: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replicas-warn
spec:
  policyName: replicas
  validationActions: [Warn]
";

/// A policy whose expression does not compile.
const BROKEN: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: broken
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <=
";

/// ConfigMaps need the keys a ConfigMap param lists, in namespaces labelled `env: test` only.
const REQUIRED_KEYS: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: required-keys
spec:
  paramKind:
    apiVersion: v1
    kind: ConfigMap
  matchConstraints:
    resourceRules:
    - apiGroups: [\"\"]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
    objectSelector:
      matchExpressions:
      - {key: role, operator: NotIn, values: [param]}
  variables:
  - name: required
    expression: params.data.keys.split(',')
  validations:
  - expression: variables.required.all(k, has(object.data) && k in object.data)
    messageExpression: \"'missing one of ' + params.data.keys\"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: required-keys
spec:
  policyName: required-keys
  validationActions: [Deny]
  paramRef:
    name: keys
    namespace: default
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        env: test
";

const PARAM: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: keys
  namespace: default
  labels:
    role: param
data:
  keys: owner,team
";

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn deny_and_warn_bindings_refuse_and_warn_in_kubernetes_words_and_only_in_their_tenant() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &[]);
    let a = create(&up, "team-a", &[]);
    let b = create(&up, "team-b", &[]);
    apply(&up, &a, "replicas", REPLICAS);
    apply(&up, &a, "deny", DENY);

    for (i, (version, kubectl)) in kubectls().iter().enumerate() {
        let big = format!("big-{i}");
        let out = up.kubectl_at(
            kubectl,
            &a,
            &["create", "deployment", &big, "--image=nginx", "--replicas=6"],
        );
        assert_eq!(out.status.code(), Some(1), "kubectl {version}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).trim(),
            format!(
                "error: failed to create deployment: deployments.apps \"{big}\" is forbidden: \
                 ValidatingAdmissionPolicy 'replicas' with binding 'replicas-deny' denied \
                 request: failed expression: object.spec.replicas <= 5"
            ),
            "kubectl {version}"
        );
        let small = format!("small-{i}");
        ok(up.kubectl_at(
            kubectl,
            &a,
            &["create", "deployment", &small, "--image=nginx", "--replicas=3"],
        ));
        // A dry run is checked too, and stores nothing.
        let dry = format!("dry-{i}");
        fails(up.kubectl_at(
            kubectl,
            &a,
            &["create", "deployment", &dry, "--image=nginx", "--replicas=9", "--dry-run=server"],
        ));
    }
    // Growing it past the limit is an update: denied too. Through `/scale` it is a request for
    // `deployments/scale`, which the rule does not name: admitted, as by kube-apiserver.
    let out = fails(
        up.kubectl(&a, &["patch", "deployment", "small-0", "-p", r#"{"spec":{"replicas":8}}"#]),
    );
    assert!(
        out.contains(
            "is invalid: : deployments.apps \"small-0\" is forbidden: ValidatingAdmissionPolicy \
             'replicas' with binding 'replicas-deny' denied request: failed expression"
        ),
        "{out}"
    );
    ok(up.kubectl(&a, &["scale", "deployment", "small-0", "--replicas=8"]));

    // The other tenant has no policy: admitted.
    ok(up.kubectl(&b, &["create", "deployment", "big", "--image=nginx", "--replicas=6"]));

    // Warn in place of Deny: admitted, with the warning on stderr.
    ok(up.kubectl(&a, &["delete", "validatingadmissionpolicybinding", "replicas-deny"]));
    apply(&up, &a, "warn", WARN);
    let out = up.kubectl(&a, &["create", "deployment", "warned", "--image=nginx", "--replicas=7"]);
    ok(out.clone());
    assert!(
        stderr(&out).contains(
            "Warning: Validation failed for ValidatingAdmissionPolicy 'replicas' with binding \
             'replicas-warn': failed expression: object.spec.replicas <= 5"
        ),
        "{}",
        stderr(&out)
    );

    // An expression that does not compile is refused when the policy is written.
    let file = data.path().join("broken.yaml");
    std::fs::write(&file, BROKEN).unwrap();
    let out = fails(up.kubectl(&a, &["create", "-f", &file.to_string_lossy()]));
    assert!(
        out.contains(
            "The ValidatingAdmissionPolicy \"broken\" is invalid: spec.validations[0].expression: \
             Invalid value: \"object.spec.replicas <=\": compilation failed: ERROR: <input>:1:24: \
             Syntax error: mismatched input '<EOF>'"
        ),
        "{out}"
    );
    let listed = ok(up.kubectl(&a, &["get", "validatingadmissionpolicies"]));
    assert!(listed.contains("replicas") && !listed.contains("broken"), "{listed}");
    up.stop();
}

#[test]
fn a_configmap_param_and_a_namespace_selector_decide_what_a_binding_checks() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &[]);
    let a = create(&up, "team-a", &[]);
    apply(&up, &a, "param", PARAM);
    apply(&up, &a, "required-keys", REQUIRED_KEYS);
    ok(up.kubectl(&a, &["create", "namespace", "checked"]));
    ok(up.kubectl(&a, &["label", "namespace", "checked", "env=test"]));
    ok(up.kubectl(&a, &["create", "namespace", "unchecked"]));

    // In the labelled namespace, the param's keys are required.
    let out =
        up.kubectl(&a, &["create", "configmap", "x", "-n", "checked", "--from-literal=owner=me"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'required-keys' with \
             binding 'required-keys' denied request: missing one of owner,team"
        ),
        "{}",
        stderr(&out)
    );
    ok(up.kubectl(
        &a,
        &[
            "create",
            "configmap",
            "y",
            "-n",
            "checked",
            "--from-literal=owner=me",
            "--from-literal=team=a",
        ],
    ));
    // Elsewhere, nothing is checked.
    ok(up.kubectl(&a, &["create", "configmap", "x", "-n", "unchecked"]));
    // Without its param, the binding denies.
    ok(up.kubectl(&a, &["delete", "configmap", "keys"]));
    let out = fails(up.kubectl(&a, &["create", "configmap", "z", "-n", "checked"]));
    assert!(
        out.contains("failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{out}"
    );
    up.stop();
}
