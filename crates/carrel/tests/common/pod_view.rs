//! What a tenant pod's process sees of its cluster, read from its host pod: the API address of
//! its environment and its mounted service-account files.

use std::path::PathBuf;

use base64::Engine;
use carrel_e2e::ok;
use serde_json::Value;

use super::Up;

/// What a pod's process sees of its cluster: its environment's API address and its mounted
/// service-account files, copied into `dir`.
pub struct PodView {
    pub host: String,
    pub port: String,
    pub dir: PathBuf,
}

impl PodView {
    /// The view of tenant pod `pod` of `tenant` (in `default`), from its host pod.
    pub fn of(up: &Up, tenant: &str, pod: &str) -> PodView {
        let host = up.host_kubeconfig();
        let namespace = format!("carrel-{tenant}");
        let host_pod: Value = serde_json::from_str(&ok(up.kubectl(
            &host,
            &["get", "pod", &format!("{pod}-x-default"), "-n", &namespace, "-o", "json"],
        )))
        .expect("the host pod");
        let env = &host_pod["spec"]["containers"][0]["env"];
        let var = |name: &str| env_value(env, name).unwrap_or_else(|| panic!("{name} in {env}"));
        let volumes = host_pod["spec"]["volumes"].as_array().expect("volumes");
        let secret = volumes
            .iter()
            .find(|v| v["name"] == "carrel-tenant-token")
            .and_then(|v| v["secret"]["secretName"].as_str())
            .expect("the token volume");
        let dir = up.home.path().join(format!("{tenant}-{pod}"));
        std::fs::create_dir_all(&dir).unwrap();
        for key in ["token", "ca.crt", "namespace"] {
            let jsonpath = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
            let b64 =
                ok(up
                    .kubectl(&host, &["get", "secret", secret, "-n", &namespace, "-o", &jsonpath]));
            let value = base64::engine::general_purpose::STANDARD.decode(b64.trim()).unwrap();
            std::fs::write(dir.join(key), value).unwrap();
        }
        PodView { host: var("KUBERNETES_SERVICE_HOST"), port: var("KUBERNETES_SERVICE_PORT"), dir }
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("token")).unwrap()
    }

    /// A kubeconfig as client-go's in-cluster config is built: the environment's address, no
    /// path, no server name, the mounted CA, and `token`.
    pub fn kubeconfig(&self, name: &str, server: &str, token: &str) -> PathBuf {
        let ca = std::fs::read(self.dir.join("ca.crt")).unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    \
             certificate-authority-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    \
             namespace: default\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: {token}\n",
            base64::engine::general_purpose::STANDARD.encode(ca)
        );
        let path = self.dir.join(name);
        std::fs::write(&path, config).unwrap();
        path
    }

    pub fn server(&self) -> String {
        format!("https://{}:{}", self.host, self.port)
    }
}

/// A value of `env` (a container's, as JSON) by name: the last one, as the container sees it.
pub fn env_value(env: &Value, name: &str) -> Option<String> {
    let found = env.as_array()?.iter().rev().find(|e| e["name"] == name)?;
    found["value"].as_str().map(str::to_owned)
}
