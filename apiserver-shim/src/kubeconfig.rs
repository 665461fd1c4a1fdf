//! Kubeconfig files for clients of a Carrel API server.

use base64::Engine;

use crate::tls::Certificates;

fn b64(pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem)
}

/// A kubeconfig for the server at `url` (with its base path), with `default` as the namespace.
/// Given the server's certificates, it trusts their CA and presents the admin client
/// certificate; without them (plain HTTP) it carries no credentials.
pub fn admin(url: &str, certs: Option<&Certificates>) -> String {
    match certs {
        Some(c) => {
            with_client_certificate(url, None, &c.ca_pem, &c.admin_cert_pem, &c.admin_key_pem)
        }
        None => format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: carrel\n  cluster:\n    server: {url}\n\
             contexts:\n- name: carrel\n  context:\n    cluster: carrel\n    user: carrel\n    \
             namespace: default\ncurrent-context: carrel\nusers:\n- name: carrel\n  user: {{}}\n"
        ),
    }
}

/// A kubeconfig for the server at `url` that trusts `server_ca_pem` and presents the client
/// certificate `cert_pem` with its key, with `default` as the namespace; with `server_name`, the
/// TLS server name clients ask for (`tls-server-name`), whatever `url`'s host.
pub fn with_client_certificate(
    url: &str,
    server_name: Option<&str>,
    server_ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    let named = server_name.map(|n| format!("    tls-server-name: {n}\n")).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: carrel\n  cluster:\n    server: {url}\n    \
         certificate-authority-data: {}\n{named}contexts:\n- name: carrel\n  context:\n    cluster: carrel\n    \
         user: carrel\n    namespace: default\ncurrent-context: carrel\nusers:\n- name: carrel\n  user:\n    \
         client-certificate-data: {}\n    client-key-data: {}\n",
        b64(server_ca_pem),
        b64(cert_pem),
        b64(key_pem)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carries_the_server_its_ca_and_the_admin_certificate() {
        let certs = Certificates::generate(&["127.0.0.1".into()]).unwrap();
        let config = admin("https://127.0.0.1:1/tenants/a", Some(&certs));
        assert!(config.contains("server: https://127.0.0.1:1/tenants/a\n"));
        assert!(config.contains(&format!("certificate-authority-data: {}\n", b64(&certs.ca_pem))));
        assert!(config.contains("client-certificate-data: "));
        assert!(!config.contains("tls-server-name"));
        let named =
            with_client_certificate("https://127.0.0.1:1/tenants/a", Some("a.t"), "ca", "c", "k");
        assert!(named.contains(&format!(
            "certificate-authority-data: {}\n    tls-server-name: a.t\ncontexts:",
            b64("ca")
        )));
        let plain = admin("http://x", None);
        assert!(!plain.contains("certificate-authority") && plain.ends_with("user: {}\n"));
    }
}
