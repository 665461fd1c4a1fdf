//! Each tenant owns its CustomResourceDefinitions: two tenants of one `carrel up` install the
//! same group with different versions and schemas at once, each works as if alone, and both
//! survive `kill -9` of the process.

mod common;

use std::path::Path;

use carrel_e2e::{fails, ok};
use common::{create, Up};

/// Tenant A's definition: `ml.carrel.dev/v1`, where `workers` is an integer.
const DEFINITION_A: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: trainingjobs.ml.carrel.dev}
spec:
  group: ml.carrel.dev
  scope: Namespaced
  names: {plural: trainingjobs, singular: trainingjob, kind: TrainingJob, shortNames: [tj]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              workers: {type: integer}
"#;

/// Tenant B's definition of the same group: `v1alpha1` and `v2`, where `workers` is a list of
/// names and there is no `v1`.
const DEFINITION_B: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: trainingjobs.ml.carrel.dev}
spec:
  group: ml.carrel.dev
  scope: Cluster
  names: {plural: trainingjobs, singular: trainingjob, kind: TrainingJob}
  versions:
  - name: v1alpha1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              workers: {type: array, items: {type: string}}
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              workers: {type: array, items: {type: string}}
"#;

fn write(dir: &Path, name: &str, content: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write manifest");
    path.to_string_lossy().into_owned()
}

#[test]
fn tenants_install_conflicting_versions_of_one_definition() {
    let data = tempfile::tempdir().expect("data");
    let files = tempfile::tempdir().expect("files");
    let up = Up::start(data.path());
    let a = create(&up, "team-a", &[]);
    let b = create(&up, "team-b", &[]);
    ok(up.kubectl(&a, &["apply", "-f", &write(files.path(), "a.yaml", DEFINITION_A)]));
    ok(up.kubectl(&b, &["apply", "-f", &write(files.path(), "b.yaml", DEFINITION_B)]));

    let job_a = "apiVersion: ml.carrel.dev/v1\nkind: TrainingJob\nmetadata: {name: job}\n\
                 spec: {workers: 4}\n";
    let job_b = "apiVersion: ml.carrel.dev/v2\nkind: TrainingJob\nmetadata: {name: job}\n\
                 spec: {workers: [w0, w1]}\n";
    ok(up.kubectl(&a, &["apply", "-f", &write(files.path(), "job-a.yaml", job_a)]));
    ok(up.kubectl(&b, &["apply", "-f", &write(files.path(), "job-b.yaml", job_b)]));
    // Each schema holds in its own tenant only.
    let refused = fails(up.kubectl(
        &b,
        &["apply", "-f", &write(files.path(), "a-in-b.yaml", &job_a.replace("v1", "v2"))],
    ));
    assert!(refused.contains("spec.workers: Invalid value: \"integer\""), "{refused}");
    let no_v1 = fails(up.kubectl(&b, &["get", "trainingjobs.v1.ml.carrel.dev"]));
    assert!(
        no_v1.contains("doesn't have a resource type") || no_v1.contains("not found"),
        "{no_v1}"
    );

    let check = |up: &Up, a: &Path, b: &Path| {
        let workers_a = ok(
            up.kubectl(a, &["get", "tj", "job", "-n", "default", "-o", "jsonpath={.spec.workers}"])
        );
        assert_eq!(workers_a, "4");
        let workers_b =
            ok(up.kubectl(b, &["get", "trainingjobs", "job", "-o", "jsonpath={.spec.workers}"]));
        assert_eq!(workers_b, r#"["w0","w1"]"#);
        let versions_b = ok(up.kubectl(
            b,
            &["get", "trainingjobs.v1alpha1.ml.carrel.dev", "job", "-o", "jsonpath={.apiVersion}"],
        ));
        assert_eq!(versions_b, "ml.carrel.dev/v1alpha1");
        let resources_a =
            ok(up.kubectl(a, &["api-resources", "--api-group=ml.carrel.dev", "-o", "wide"]));
        assert!(
            resources_a.contains("ml.carrel.dev/v1 ") && resources_a.contains("true"),
            "{resources_a}"
        );
        let resources_b =
            ok(up.kubectl(b, &["api-resources", "--api-group=ml.carrel.dev", "-o", "wide"]));
        assert!(
            resources_b.contains("ml.carrel.dev/v2") && resources_b.contains("false"),
            "{resources_b}"
        );
    };
    check(&up, &a, &b);
    // The host has no such type.
    let host = up.host_kubeconfig();
    let host_types = ok(up.kubectl(&host, &["api-resources", "--api-group=ml.carrel.dev"]));
    assert!(!host_types.contains("trainingjobs"), "{host_types}");

    // Acknowledged definitions and objects survive kill -9.
    up.kill9();
    // The restarted server listens on another port: the kubeconfigs are fetched again.
    let up = Up::start(data.path());
    let a = files.path().join("team-a-again.kubeconfig");
    std::fs::write(&a, ok(up.carrel(&["tenant", "kubeconfig", "team-a"]))).expect("kubeconfig");
    let b = files.path().join("team-b-again.kubeconfig");
    std::fs::write(&b, ok(up.carrel(&["tenant", "kubeconfig", "team-b"]))).expect("kubeconfig");
    check(&up, &a, &b);
}
