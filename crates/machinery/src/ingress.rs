//! The hosts an Ingress serves, as Carrel holds them for one tenant at a time: the API server
//! refuses an Ingress for a host another tenant holds, and the syncer claims the hosts of those
//! it carries, by the same reading.

use std::collections::BTreeSet;

use serde_json::Value;

/// The host of a rule without one, or of a default backend: every host no other rule of the
/// controller names.
pub const CATCH_ALL: &str = "*";

/// The hosts Ingress `ingress` serves: its rules' hosts, its TLS entries' hosts (lower case),
/// and [`CATCH_ALL`] where a rule has no host or the Ingress has a default backend.
pub fn hosts(ingress: &Value) -> BTreeSet<String> {
    let Some(spec) = ingress.get("spec") else { return BTreeSet::new() };
    let list = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    let mut hosts = BTreeSet::new();
    for rule in list(spec.get("rules")) {
        match rule.get("host").and_then(Value::as_str) {
            Some(host) if !host.is_empty() => hosts.insert(host.to_ascii_lowercase()),
            _ => hosts.insert(CATCH_ALL.to_owned()),
        };
    }
    for tls in list(spec.get("tls")) {
        let named = list(tls.get("hosts"));
        hosts.extend(named.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase));
    }
    if spec.get("defaultBackend").is_some_and(|b| !b.is_null()) {
        hosts.insert(CATCH_ALL.to_owned());
    }
    hosts
}

/// The wildcard host that would cover `host` (`*.example.com` for `app.example.com`), if any.
pub fn covering_wildcard(host: &str) -> Option<String> {
    if host == CATCH_ALL || host.starts_with("*.") {
        return None;
    }
    let (_, parent) = host.split_once('.')?;
    parent.contains('.').then(|| format!("*.{parent}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_hosts_an_ingress_serves() {
        let backend = json!({"service": {"name": "web", "port": {"number": 80}}});
        let cases = [
            (json!({"rules": [{"host": "A.example.com"}]}), vec!["a.example.com"]),
            (
                json!({"rules": [{"host": "a.example.com"}], "tls": [{"hosts": ["b.example.com"]}]}),
                vec!["a.example.com", "b.example.com"],
            ),
            (json!({"rules": [{"http": {"paths": []}}]}), vec![CATCH_ALL]),
            (json!({"defaultBackend": backend}), vec![CATCH_ALL]),
            (json!({"rules": [{"host": "*.apps.example.com"}]}), vec!["*.apps.example.com"]),
        ];
        for (spec, want) in cases {
            let got: Vec<String> = hosts(&json!({"spec": spec.clone()})).into_iter().collect();
            assert_eq!(got, want, "{spec}");
        }
        assert!(hosts(&json!({})).is_empty());
    }

    #[test]
    fn a_host_is_covered_by_the_wildcard_of_its_parent_domain() {
        assert_eq!(covering_wildcard("app.example.com").as_deref(), Some("*.example.com"));
        assert_eq!(covering_wildcard("a.b.example.com").as_deref(), Some("*.b.example.com"));
        // `*.com` is no wildcard an Ingress may hold.
        assert_eq!(covering_wildcard("example.com"), None);
        assert_eq!(covering_wildcard("*.example.com"), None);
        assert_eq!(covering_wildcard(CATCH_ALL), None);
    }
}
