//! Operators installed from their release manifests, unchanged, in tenants: the manifests are
//! test data (`tests/operators/`, with their source and version), applied with real kubectl as
//! their documentation says, and their custom resources created from the released samples.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use carrel_e2e::ok;
use common::{create, eventually, kubectls, Up};

/// A file of `tests/operators/`, written into the test's home (gunzipped where it is `.gz`).
fn manifest(up: &Up, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/operators").join(name);
    let bytes = std::fs::read(&source).expect("test data");
    let (name, text) = match name.strip_suffix(".gz") {
        Some(plain) => {
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut text).expect("gzip");
            (plain, text)
        }
        None => (name, bytes),
    };
    let path = up.home.path().join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn kuberay_installs_from_its_release_manifests_and_its_samples_are_created() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &[]);
    let operator = manifest(&up, "kuberay-v1.6.2.yaml.gz");
    let operator = operator.to_string_lossy().into_owned();
    // KubeRay's documentation installs with `kubectl create` (its definitions are too large for
    // a client-side apply's annotation) or `kubectl apply --server-side`: both, in two tenants.
    let installs: [&[&str]; 2] = [&["create", "-f"], &["apply", "--server-side", "-f"]];
    for (tenant, install) in ["ray-a", "ray-b"].into_iter().zip(installs) {
        let kubeconfig = create(&up, tenant, &[]);
        let mut args = install.to_vec();
        args.push(&operator);
        let out = ok(up.kubectl(&kubeconfig, &args));
        for kind in ["rayclusters", "rayjobs", "rayservices", "raycronjobs"] {
            assert!(
                out.contains(&format!(
                    "customresourcedefinition.apiextensions.k8s.io/{kind}.ray.io"
                )),
                "{out}"
            );
        }
        assert!(out.contains("deployment.apps/kuberay-operator"), "{out}");
        for crd in ["rayclusters.ray.io", "rayjobs.ray.io"] {
            ok(up.kubectl(
                &kubeconfig,
                &["wait", "--for=condition=Established", &format!("crd/{crd}"), "--timeout=30s"],
            ));
        }
        for sample in ["ray-cluster.sample.yaml", "ray-job.sample.yaml"] {
            let path = manifest(&up, sample);
            ok(up.kubectl(&kubeconfig, &["create", "-f", &path.to_string_lossy()]));
        }
        for (version, kubectl) in kubectls() {
            let out = ok(up.kubectl_at(
                &kubectl,
                &kubeconfig,
                &["get", "rayclusters,rayjobs", "-o", "name"],
            ));
            assert_eq!(
                out, "raycluster.ray.io/raycluster-kuberay\nrayjob.ray.io/rayjob-sample\n",
                "kubectl {version}"
            );
        }
        // What the schema keeps of a sample: its pod templates, as released.
        let image = ok(up.kubectl(
            &kubeconfig,
            &[
                "get",
                "raycluster",
                "raycluster-kuberay",
                "-o",
                "jsonpath={.spec.headGroupSpec.template.spec.containers[0].image}",
            ],
        ));
        assert!(image.starts_with("rayproject/ray:"), "{image}");
        // The operator's Deployment runs, as any other.
        eventually("the operator available", Duration::from_secs(30), || {
            let out = up.kubectl(
                &kubeconfig,
                &[
                    "get",
                    "deployment",
                    "kuberay-operator",
                    "-o",
                    "jsonpath={.status.availableReplicas}",
                ],
            );
            let available = String::from_utf8_lossy(&out.stdout).into_owned();
            (available == "1", available)
        });
    }
    up.stop();
}
