//! Whether a tenant exists is not told to those without credentials: a request for a tenant that
//! does not exist is answered as one for a tenant that does.

mod common;

use std::path::Path;
use std::process::Command;

use common::{create, Up};

/// `curl` of `url` with extra arguments: (status, body).
fn curl(url: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sk", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("a status line");
    (code.parse().unwrap(), body.to_owned())
}

fn host_url(up: &Up) -> String {
    let text = std::fs::read_to_string(up.host_kubeconfig()).unwrap();
    let server = text.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap();
    server.trim_end_matches('/').to_owned()
}

#[test]
fn an_unknown_tenant_is_answered_as_a_known_one_to_those_without_credentials() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    create(&up, "team-a", &[]);
    let host = host_url(&up);
    let known = format!("{host}/tenants/team-a");
    let unknown = format!("{host}/tenants/no-such-team");

    // No credentials, and a garbage token: the same 401, word for word.
    for extra in [&[][..], &["-H", "Authorization: Bearer garbage"][..]] {
        for path in ["/api/v1/namespaces", "/api", "/apis/apps/v1/namespaces/x/deployments/y", ""] {
            let (known_code, known_body) = curl(&format!("{known}{path}"), extra);
            let (unknown_code, unknown_body) = curl(&format!("{unknown}{path}"), extra);
            assert_eq!(known_code, 401, "{path}: {known_body}");
            assert_eq!((unknown_code, &unknown_body), (known_code, &known_body), "{path}");
        }
    }
    // Public paths answer alike too.
    for path in ["/version", "/healthz", "/livez"] {
        let (known_code, known_body) = curl(&format!("{known}{path}"), &[]);
        let (unknown_code, unknown_body) = curl(&format!("{unknown}{path}"), &[]);
        assert_eq!(known_code, 200, "{path}");
        assert_eq!((unknown_code, unknown_body), (known_code, known_body), "{path}");
    }

    // The host's admin, who may read tenants, learns that it is not there.
    let pki = data.path().join("pki");
    let file = |name: &str| pki.join(name).to_string_lossy().into_owned();
    let admin = ["--cert", &file("admin.crt"), "--key", &file("admin.key")];
    let (code, body) = curl(&format!("{unknown}/api/v1/namespaces"), &admin);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains(r#"tenants.carrel.dev \"no-such-team\" not found"#), "{body}");
    assert!(Path::new(&file("admin.crt")).exists());
    up.stop();
}
