//! Tenants are private: each tenant's credentials work only on it, anonymous requests are refused
//! beyond the public paths, and RBAC decides what each user may do, with real kubectl.

mod common;

use std::path::{Path, PathBuf};

use carrel_apiserver::auth::ca::TenantCa;
use carrel_e2e::{fails, kubectl_path, ok};
use common::{create, Up};

/// A kubeconfig for `user` in `groups`, with a certificate from the tenant's own CA.
fn user_kubeconfig(up: &Up, tenant: &str, admin: &Path, user: &str, groups: &[&str]) -> PathBuf {
    let pki = up.data.join("tenants").join(tenant).join("pki");
    let ca = TenantCa::load(&pki).expect("the tenant's CA");
    let (cert, key) =
        ca.issue_client(user, groups, std::time::Duration::from_secs(3600)).expect("a certificate");
    let admin = std::fs::read_to_string(admin).unwrap();
    let b64 = |s: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let mut lines: Vec<String> = Vec::new();
    for line in admin.lines() {
        if let Some(indent) = line.find("client-certificate-data: ") {
            lines.push(format!("{}client-certificate-data: {}", &line[..indent], b64(&cert)));
        } else if let Some(indent) = line.find("client-key-data: ") {
            lines.push(format!("{}client-key-data: {}", &line[..indent], b64(&key)));
        } else {
            lines.push(line.to_owned());
        }
    }
    let path = up.home.path().join(format!("{tenant}-{user}.kubeconfig"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// `kubeconfig` with its server moved to another tenant's path.
fn pointed_at(up: &Up, kubeconfig: &Path, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let path = up.home.path().join(format!("{from}-on-{to}.kubeconfig"));
    std::fs::write(&path, text.replace(&format!("/tenants/{from}\n"), &format!("/tenants/{to}\n")))
        .unwrap();
    path
}

fn curl(url: &str, token: Option<&str>) -> (u16, String) {
    let mut command = std::process::Command::new("curl");
    command.args(["-sk", "-w", "\n%{http_code}"]);
    if let Some(token) = token {
        command.arg("-H").arg(format!("Authorization: Bearer {token}"));
    }
    let out = command.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("a status line");
    (code.parse().unwrap(), body.to_owned())
}

fn endpoint(up: &Up, tenant: &str) -> String {
    let json: serde_json::Value =
        serde_json::from_str(&ok(up.carrel(&["tenant", "get", tenant, "-o", "json"]))).unwrap();
    json["status"]["endpoint"].as_str().unwrap().to_owned()
}

#[test]
fn a_tenant_is_reached_by_its_tls_server_name_whatever_path_a_client_sends() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let a = create(&up, "team-a", &[]);
    let b = create(&up, "team-b", &[]);
    let text = std::fs::read_to_string(&a).unwrap();
    assert!(text.contains("\n    tls-server-name: team-a.tenants.carrel.local\n"), "{text}");
    ok(up.kubectl(&a, &["create", "configmap", "only-in-a"]));
    let mut clients = vec![("1.27", kubectl_path("kubectl.1.27"))];
    clients.extend(common::kubectls());
    let raw = ["get", "--raw", "/api/v1/namespaces/default/configmaps"];
    for (version, kubectl) in clients {
        // Before 1.34, `--raw` drops the kubeconfig's path: the server name still finds the
        // tenant, and only it.
        let list = ok(up.kubectl_at(&kubectl, &a, &raw));
        assert!(list.contains("\"name\":\"only-in-a\""), "kubectl {version}: {list}");
        let list = ok(up.kubectl_at(&kubectl, &b, &raw));
        assert!(list.contains("ConfigMapList") && !list.contains("only-in-a"), "kubectl {version}");
    }
    // Bodies as kube-apiserver writes them: an object in its Go struct's order, a typed list's
    // items without their kind.
    let path = "/api/v1/namespaces/default/configmaps/only-in-a";
    let got = ok(up.kubectl(&a, &["get", "--raw", path]));
    let v: serde_json::Value = serde_json::from_str(&got).unwrap();
    let m = &v["metadata"];
    let field = |v: &serde_json::Value| v.as_str().unwrap_or_else(|| panic!("{got}")).to_owned();
    let expected = format!(
        concat!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"only-in-a","#,
            r#""namespace":"default","uid":"{}","resourceVersion":"{}","creationTimestamp":"{}"}}}}"#
        ),
        field(&m["uid"]),
        field(&m["resourceVersion"]),
        field(&m["creationTimestamp"]),
    );
    assert_eq!(got.trim_end(), expected);
    let list = ok(up.kubectl(&a, &raw));
    assert!(
        list.starts_with(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":""#
        ),
        "{list}"
    );
    assert!(
        list.contains(
            r#""items":[{"metadata":{"name":"kube-root-ca.crt","namespace":"default","uid":""#
        ),
        "{list}"
    );
    // A server name selects a tenant, never credentials: team-a's certificate asking for
    // team-b's name is refused, and a name no tenant has tells nothing more.
    for (name, what) in [("team-b", "another tenant"), ("nobody", "no tenant")] {
        let renamed = up.home.path().join(format!("a-named-{name}.kubeconfig"));
        let config = text.replace("tls-server-name: team-a.", &format!("tls-server-name: {name}."));
        std::fs::write(&renamed, config).unwrap();
        let err = fails(up.kubectl(&renamed, &["get", "--raw", "/api/v1/namespaces"]));
        assert!(
            err.contains("Unauthorized") || err.contains("provide credentials"),
            "{what}: {err}"
        );
    }
    up.stop();
}

#[test]
fn credentials_work_only_on_their_own_tenant() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let a = create(&up, "team-a", &[]);
    create(&up, "team-b", &[]);
    ok(up.kubectl(&a, &["get", "namespaces"]));
    // team-a's admin certificate on team-b: 401.
    let a_on_b = pointed_at(&up, &a, "team-a", "team-b");
    let err = fails(up.kubectl(&a_on_b, &["get", "namespaces"]));
    assert!(err.contains("provide credentials") || err.contains("Unauthorized"), "{err}");
    // team-a's service account token on team-b: 401; on team-a it names its service account.
    let token = ok(up.kubectl(&a, &["create", "token", "default"])).trim().to_owned();
    let (url_a, url_b) = (endpoint(&up, "team-a"), endpoint(&up, "team-b"));
    let (code, _) = curl(&format!("{url_b}/api/v1/namespaces"), Some(&token));
    assert_eq!(code, 401);
    let (code, body) = curl(&format!("{url_a}/api/v1/namespaces/default/pods"), Some(&token));
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User \"system:serviceaccount:default:default\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""#),
        "{body}"
    );
    // TokenReview says whose a token is, and that garbage is no one's.
    for (token, authenticated) in [(token.as_str(), "true"), ("garbage", "false")] {
        let review = format!(
            r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{{"token":"{token}"}}}}"#
        );
        let file = up.home.path().join("review.json");
        std::fs::write(&file, review).unwrap();
        let path = file.to_string_lossy();
        let jsonpath = "jsonpath={.status.authenticated} {.status.user.username}";
        let out = ok(up.kubectl(&a, &["create", "-f", &path, "-o", jsonpath]));
        assert!(out.starts_with(authenticated), "{out}");
        if authenticated == "true" {
            assert!(out.ends_with("system:serviceaccount:default:default"), "{out}");
        }
    }
    // A garbage token and no credentials at all: 401; the public paths answer anyone.
    assert_eq!(curl(&format!("{url_a}/api/v1/namespaces"), Some("garbage")).0, 401);
    assert_eq!(curl(&format!("{url_a}/api/v1/namespaces"), None).0, 401);
    for public in ["/version", "/healthz", "/livez", "/readyz"] {
        assert_eq!(curl(&format!("{url_a}{public}"), None).0, 200, "{public}");
    }
    // Who am I, and what may I do.
    let whoami = ok(up.kubectl(&a, &["auth", "whoami"]));
    assert!(whoami.contains("carrel-admin") && whoami.contains("system:masters"), "{whoami}");
    up.stop();
}

#[test]
fn rbac_decides_what_each_user_may_do() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let admin = create(&up, "team-a", &[]);
    for ns in ["dev", "prod"] {
        ok(up.kubectl(&admin, &["create", "namespace", ns]));
        ok(up.kubectl(
            &admin,
            &["create", "secret", "generic", "s", "-n", ns, "--from-literal=k=v"],
        ));
    }
    ok(up.kubectl(
        &admin,
        &["create", "clusterrolebinding", "viewers", "--clusterrole=view", "--user=victor"],
    ));
    ok(up.kubectl(
        &admin,
        &["create", "rolebinding", "editors", "-n", "dev", "--clusterrole=edit", "--user=edith"],
    ));
    ok(up.kubectl(
        &admin,
        &["create", "rolebinding", "admins", "-n", "dev", "--clusterrole=admin", "--user=ada"],
    ));

    // A user with a certificate from the tenant's CA, bound to view: lists, cannot create.
    let victor = user_kubeconfig(&up, "team-a", &admin, "victor", &["devs"]);
    ok(up.kubectl(&victor, &["get", "pods", "-n", "dev"]));
    let err = fails(up.kubectl(&victor, &["create", "configmap", "c", "-n", "dev"]));
    assert!(
        err.contains(r#"configmaps is forbidden: User "victor" cannot create resource "configmaps" in API group "" in the namespace "dev""#),
        "{err}"
    );
    let err = fails(up.kubectl(&victor, &["get", "secret", "s", "-n", "dev"]));
    assert!(err.contains("forbidden"), "view does not read secrets: {err}");
    assert_eq!(
        ok(up.kubectl(&victor, &["auth", "can-i", "list", "pods", "-n", "prod"])).trim(),
        "yes"
    );
    let can = up.kubectl(&victor, &["auth", "can-i", "create", "pods", "-n", "prod"]);
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "no");
    let list = ok(up.kubectl(&victor, &["auth", "can-i", "--list", "-n", "dev"]));
    assert!(
        list.lines().any(|l| l.starts_with("pods ") && l.contains("[get list watch]")),
        "{list}"
    );
    let whoami = ok(up.kubectl(&victor, &["auth", "whoami"]));
    assert!(whoami.contains("victor") && whoami.contains("devs"), "{whoami}");

    // The reviews are discoverable, so kubectl can create them from a file.
    let names =
        ok(up
            .kubectl(&admin, &["api-resources", "--api-group=authorization.k8s.io", "-o", "name"]));
    assert!(names.lines().any(|l| l == "subjectaccessreviews.authorization.k8s.io"), "{names}");
    for (verb, resource, allowed) in [("list", "pods", "true"), ("create", "configmaps", "false")] {
        let review = format!(
            r#"{{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview",
               "spec":{{"user":"victor","resourceAttributes":{{"namespace":"dev","verb":"{verb}","resource":"{resource}"}}}}}}"#
        );
        let file = up.home.path().join(format!("sar-{verb}.json"));
        std::fs::write(&file, review).unwrap();
        let out = ok(up.kubectl(
            &admin,
            &["create", "-f", &file.to_string_lossy(), "-o", "jsonpath={.status.allowed}"],
        ));
        assert_eq!(out, allowed, "victor {verb} {resource}");
    }

    // edit in dev: reads the secret there, not in prod (impersonated by the admin, as --as does).
    ok(up.kubectl(&admin, &["get", "secret", "s", "-n", "dev", "--as=edith"]));
    let err = fails(up.kubectl(&admin, &["get", "secret", "s", "-n", "prod", "--as=edith"]));
    assert!(
        err.contains(r#"secrets "s" is forbidden: User "edith" cannot get resource "secrets" in API group "" in the namespace "prod""#),
        "{err}"
    );
    // Groups can be impersonated too: view is bound to the group devs.
    ok(up.kubectl(
        &admin,
        &["create", "clusterrolebinding", "devs-view", "--clusterrole=view", "--group=devs"],
    ));
    ok(up.kubectl(&admin, &["get", "pods", "-n", "prod", "--as=zed", "--as-group=devs"]));
    let err = fails(up.kubectl(&admin, &["get", "pods", "-n", "prod", "--as=zed"]));
    assert!(err.contains(r#"User "zed" cannot list resource "pods""#), "{err}");
    // Only who may impersonate does.
    let err = fails(up.kubectl(&victor, &["get", "pods", "--as=edith"]));
    assert!(err.contains("cannot impersonate resource \"users\""), "{err}");

    // Escalation: admin in dev may write Roles, but not grant what it does not hold.
    let role = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"quota-writer","namespace":"dev"},
        "rules":[{"apiGroups":[""],"resources":["resourcequotas"],"verbs":["create"]}]}"#;
    let out = std::process::Command::new(carrel_e2e::kubectl_path("kubectl.1.33"))
        .arg("--kubeconfig")
        .arg(&admin)
        .args(["create", "-f", "-", "--as=ada"])
        .env("HOME", up.home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(role.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let err = fails(out);
    assert!(err.contains("is attempting to grant RBAC permissions not currently held"), "{err}");
    ok(up.kubectl(
        &admin,
        &["create", "role", "reader", "-n", "dev", "--verb=get", "--resource=pods", "--as=ada"],
    ));
    let err = fails(up.kubectl(
        &admin,
        &[
            "create",
            "rolebinding",
            "root",
            "-n",
            "dev",
            "--clusterrole=cluster-admin",
            "--user=ada",
            "--as=ada",
        ],
    ));
    assert!(err.contains("forbidden"), "binding cluster-admin escalates: {err}");
    up.stop();
}
