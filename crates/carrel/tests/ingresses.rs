//! Ingresses in tenants of `carrel up`, through each kubectl users run (1.31, 1.33 and the
//! current one): a tenant sees the host's IngressClasses and its Ingresses get the default one;
//! `kubectl create ingress` gives a host Ingress in the tenant's host namespace; another tenant
//! asking for the same host is refused (at create, and changing an Ingress to it) and served
//! once the first tenant is deleted;
//! an invalid Ingress gets kube-apiserver's error.

mod common;

use std::time::Duration;

use carrel_e2e::ok;
use common::{create, eventually, kubectls, Up};
use serde_json::Value;

const CLASS: &str = "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  \
    name: nginx\n  annotations:\n    ingressclass.kubernetes.io/is-default-class: \"true\"\n\
    spec:\n  controller: k8s.io/ingress-nginx\n";

/// Host Ingress `name` in `namespace` as JSON, if it exists.
fn host_ingress(up: &Up, namespace: &str, name: &str) -> Option<Value> {
    let out =
        up.kubectl(&up.host_kubeconfig(), &["get", "ingress", name, "-n", namespace, "-o", "json"]);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("json"))
}

#[test]
fn a_tenants_ingress_reaches_the_host_and_a_host_has_one_tenant() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let file = up.home.path().join("class.yaml");
    std::fs::write(&file, CLASS).expect("write manifest");
    ok(up.kubectl(&up.host_kubeconfig(), &["apply", "-f", &file.to_string_lossy()]));
    let within = Duration::from_secs(30);

    for (i, (version, binary)) in kubectls().into_iter().enumerate() {
        let tenant = format!("team-{i}");
        let kubeconfig = create(&up, &tenant, &[]);
        let kubectl = |args: &[&str]| {
            let output = up.kubectl_at(&binary, &kubeconfig, args);
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            assert!(output.status.success(), "kubectl {version} {args:?}: {stderr}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        // The host's class, shown to the tenant as the default.
        let classes = eventually("the host's IngressClass in the tenant", within, || {
            let table = kubectl(&["get", "ingressclass"]);
            (table.contains("nginx") && table.contains("k8s.io/ingress-nginx"), table)
        });
        assert!(classes.contains("CONTROLLER"), "kubectl {version}: {classes}");

        let host = format!("app{i}.example.com");
        kubectl(&["create", "ingress", "web", &format!("--rule={host}/=web:80")]);
        let class = kubectl(&["get", "ingress", "web", "-o", "jsonpath={.spec.ingressClassName}"]);
        assert_eq!(class, "nginx", "kubectl {version}: the default class is given");
        let table = kubectl(&["get", "ingress"]);
        let row = table.lines().find(|l| l.starts_with("web ")).unwrap_or_default();
        assert!(row.contains("nginx") && row.contains(&host) && row.contains("80"), "{table}");

        let carried = eventually("the tenant's Ingress on the host", within, || {
            let i = host_ingress(&up, &format!("carrel-{tenant}"), "web-x-default");
            (i.is_some(), i)
        })
        .expect("a host Ingress");
        let rule = &carried["spec"]["rules"][0];
        assert_eq!(rule["host"], host.as_str());
        assert_eq!(rule["http"]["paths"][0]["backend"]["service"]["name"], "web-x-default");

        // kube-apiserver's words for an Ingress that is not valid.
        let refused = up.kubectl_at(
            &binary,
            &kubeconfig,
            &["create", "ingress", "bad", "--rule=10.0.0.1/=web:80"],
        );
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "kubectl {version}: an IP host is refused");
        assert!(stderr.contains("must be a DNS name, not an IP address"), "{stderr}");
    }

    // Another tenant asks for team-0's host: refused at once, in kube-apiserver's words for a
    // refusal, nothing on the host; served once team-0 is gone.
    let other = create(&up, "team-x", &[]);
    let create_web =
        || up.kubectl(&other, &["create", "ingress", "web", "--rule=app0.example.com/=web:80"]);
    let refused = create_web();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "another tenant's host is refused");
    assert!(
        stderr.contains("ingresses.networking.k8s.io \"web\" is forbidden: host \"app0.example.com\" is served for another tenant"),
        "{stderr}"
    );
    assert!(host_ingress(&up, "carrel-team-x", "web-x-default").is_none());
    // Changing an Ingress to another tenant's host is refused the same way.
    ok(up.kubectl(&other, &["create", "ingress", "web", "--rule=free.example.com/=web:80"]));
    let patch = r#"{"spec":{"rules":[{"host":"app0.example.com","http":{"paths":[{"path":"/","pathType":"Exact","backend":{"service":{"name":"web","port":{"number":80}}}}]}}]}}"#;
    let refused = up.kubectl(&other, &["patch", "ingress", "web", "--type=merge", "-p", patch]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a patch to another tenant's host is refused");
    assert!(stderr.contains("is served for another tenant"), "{stderr}");
    let free = eventually("team-x's own host carried", within, || {
        let i = host_ingress(&up, "carrel-team-x", "web-x-default");
        (i.is_some(), i)
    })
    .expect("a host Ingress");
    assert_eq!(free["spec"]["rules"][0]["host"], "free.example.com");
    ok(up.kubectl(&other, &["delete", "ingress", "web"]));
    eventually("team-x's Ingress gone from the host", within, || {
        let i = host_ingress(&up, "carrel-team-x", "web-x-default");
        (i.is_none(), i)
    });

    ok(up.carrel(&["tenant", "delete", "team-0", "--wait"]));
    let admitted = eventually("team-x admitted once team-0 is gone", within, || {
        let out = create_web();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    });
    assert!(admitted.is_empty() || !admitted.contains("forbidden"), "{admitted}");
    let carried = eventually("team-x's Ingress carried", within, || {
        let i = host_ingress(&up, "carrel-team-x", "web-x-default");
        (i.is_some(), i)
    })
    .expect("a host Ingress");
    assert_eq!(carried["spec"]["rules"][0]["host"], "app0.example.com");
    up.stop();
}
