//! Ingresses (`ingresses` in `networking.k8s.io/v1`): how the API server serves them.

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use serde_json::{json, Value};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::table::{self, age_cell, col, name_cell, str_at, Column, AGE, NAME};
use crate::validation::Errors;

/// kube-apiserver's columns for Ingresses.
const COLUMNS: [Column; 6] = [
    NAME,
    col("Class", "string", "The name of the IngressClass resource that should be used."),
    col("Hosts", "string", "Hosts that incoming requests are matched against before the rule."),
    col("Address", "string", "Address is a list containing ingress points for the load-balancer."),
    col("Ports", "string", "Ports of TLS configurations that open."),
    AGE,
];

/// The `ingresses` resource type.
pub const TYPE: ResourceType = served(
    "networking.k8s.io",
    "v1",
    "Ingress",
    "ingresses",
    "ingress",
    true,
    &["ing"],
    NONE,
    STATUS,
    &Ingresses,
);

/// The strategy for Ingresses.
#[derive(Debug)]
pub struct Ingresses;

impl Validate for Ingresses {
    type Object = Ingress;

    fn validate(&self, object: &Ingress, e: &mut Errors) {
        if let Some(spec) = &object.spec {
            ingress_spec(spec, e);
        }
    }
}

impl Strategy for Ingresses {
    fn served_hosts(&self, object: &Value) -> Option<std::collections::BTreeSet<String>> {
        Some(carrel_machinery::ingress::hosts(object))
    }

    fn mutate_create(&self, api: &crate::Api, object: &mut Value) -> crate::ApiResult<()> {
        crate::admission::default_ingress_class::admit_ingress(api, object)
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&COLUMNS)
    }

    /// `printIngress`.
    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let class = match str_at(o, "/spec/ingressClassName") {
            "" => "<none>",
            class => class,
        };
        let rules = o.pointer("/spec/rules").and_then(Value::as_array);
        let hosts: Vec<&str> = rules
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("host").and_then(Value::as_str))
            .filter(|h| !h.is_empty())
            .collect();
        let hosts = if hosts.is_empty() { "*".to_owned() } else { hosts.join(",") };
        let points = o.pointer("/status/loadBalancer/ingress").and_then(Value::as_array);
        let address: Vec<&str> = points
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("ip").or_else(|| p.get("hostname")).and_then(Value::as_str))
            .collect();
        let tls = o.pointer("/spec/tls").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
        vec![
            name_cell(o),
            json!(class),
            json!(hosts),
            json!(address.join(",")),
            json!(if tls { "80, 443" } else { "80" }),
            age_cell(o),
        ]
    }
}

/// The path sequences and suffixes an `Exact` or `Prefix` path may not hold.
const INVALID_PATH_SEQUENCES: [&str; 5] = ["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: [&str; 2] = ["/..", "/."];

/// `ValidateIngressSpec`.
fn ingress_spec(spec: &k8s_openapi::api::networking::v1::IngressSpec, e: &mut Errors) {
    let rules = spec.rules.as_deref().unwrap_or_default();
    if rules.is_empty() && spec.default_backend.is_none() {
        e.invalid(
            "spec",
            "[]networking.IngressRule(nil)",
            "either `defaultBackend` or `rules` must be specified",
        );
    }
    if let Some(backend) = &spec.default_backend {
        backend_of(backend, "spec.defaultBackend", e);
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if let Some(host) = rule.host.as_deref().filter(|h| !h.is_empty()) {
            host_name(host, &format!("{at}.host"), true, e);
        }
        let Some(http) = &rule.http else { continue };
        if http.paths.is_empty() {
            e.required(&format!("{at}.http.paths"), "");
        }
        for (j, path) in http.paths.iter().enumerate() {
            let at = format!("{at}.http.paths[{j}]");
            let value = path.path.as_deref().unwrap_or("");
            match path.path_type.as_str() {
                "" => e.required(&format!("{at}.pathType"), "pathType must be specified"),
                "Exact" | "Prefix" => {
                    if !value.starts_with('/') {
                        e.invalid(&format!("{at}.path"), &quote(value), "must be an absolute path");
                    }
                    for bad in INVALID_PATH_SEQUENCES.iter().filter(|s| value.contains(**s)) {
                        e.invalid(
                            &format!("{at}.path"),
                            &quote(value),
                            &format!("must not contain '{bad}'"),
                        );
                    }
                    for bad in INVALID_PATH_SUFFIXES.iter().filter(|s| value.ends_with(**s)) {
                        e.invalid(
                            &format!("{at}.path"),
                            &quote(value),
                            &format!("cannot end with '{bad}'"),
                        );
                    }
                }
                "ImplementationSpecific" => {
                    if !value.is_empty() && !value.starts_with('/') {
                        e.invalid(&format!("{at}.path"), &quote(value), "must be an absolute path");
                    }
                }
                other => e.not_supported(
                    &format!("{at}.pathType"),
                    &quote(other),
                    &["Exact", "ImplementationSpecific", "Prefix"],
                ),
            }
            backend_of(&path.backend, &format!("{at}.backend"), e);
        }
    }
    for (i, tls) in spec.tls.iter().flatten().enumerate() {
        for (j, host) in tls.hosts.iter().flatten().enumerate() {
            host_name(host, &format!("spec.tls[{i}].hosts[{j}]"), false, e);
        }
    }
    if let Some(class) = &spec.ingress_class_name {
        e.invalid_each("spec.ingressClassName", class, names::dns1123_subdomain(class));
    }
}

/// A rule's or TLS entry's host: a DNS subdomain, or a wildcard one (`*.example.com`); a rule's
/// host may not be an IP address.
fn host_name(host: &str, at: &str, rule: bool, e: &mut Errors) {
    if rule && host.parse::<std::net::IpAddr>().is_ok() {
        e.invalid(at, &quote(host), "must be a DNS name, not an IP address");
    }
    if host.contains('*') {
        let wildcard = host.strip_prefix("*.").is_some_and(names::is_dns1123_subdomain);
        if !wildcard {
            let message = names::regex_error(
                "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS \
                 subdomain, which must consist of lower case alphanumeric characters, '-' or '.' \
                 and end with an alphanumeric character",
                r"\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
                &["*.example.com"],
            );
            e.invalid(at, &quote(host), &message);
        }
    } else {
        e.invalid_each(at, host, names::dns1123_subdomain(host));
    }
}

/// `validateIngressBackend`: a Service (by name, and port by name or number) or a resource,
/// not both.
fn backend_of(backend: &IngressBackend, at: &str, e: &mut Errors) {
    match (&backend.service, &backend.resource) {
        (Some(_), Some(_)) => {
            e.invalid(at, "\"\"", "cannot set both resource and service backends")
        }
        (None, Some(resource)) => {
            if resource.kind.is_empty() {
                e.required(&format!("{at}.resource.kind"), "");
            }
            if resource.name.is_empty() {
                e.required(&format!("{at}.resource.name"), "");
            }
            if let Some(group) = resource.api_group.as_deref().filter(|g| !g.is_empty()) {
                e.invalid_each(
                    &format!("{at}.resource.apiGroup"),
                    group,
                    names::dns1123_subdomain(group),
                );
            }
        }
        (Some(service), None) => {
            if service.name.is_empty() {
                e.required(&format!("{at}.service.name"), "");
            } else {
                e.invalid_each(
                    &format!("{at}.service.name"),
                    &service.name,
                    names::dns1035_label(&service.name),
                );
            }
            let port = service.port.as_ref();
            let name = port.and_then(|p| p.name.as_deref()).filter(|n| !n.is_empty());
            let number = port.and_then(|p| p.number).filter(|n| *n != 0);
            match (name, number) {
                (Some(_), Some(_)) => {
                    e.invalid(at, "\"\"", "cannot set both port name & port number")
                }
                (Some(name), None) => {
                    e.invalid_each(&format!("{at}.service.port.name"), name, names::port_name(name))
                }
                (None, Some(n)) if !(1..=65535).contains(&n) => e.invalid(
                    &format!("{at}.service.port.number"),
                    &n.to_string(),
                    "must be between 1 and 65535, inclusive",
                ),
                (None, Some(_)) => {}
                (None, None) => e.required(at, "port name or number is required"),
            }
        }
        (None, None) => e.invalid(at, "\"\"", "resource or service backend is required"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(spec: Value) -> Vec<String> {
        let ingress: Ingress = serde_json::from_value(json!({"spec": spec})).expect("decodes");
        let mut e = Errors::default();
        Ingresses.validate(&ingress, &mut e);
        e.0.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    fn web() -> Value {
        json!({"service": {"name": "web", "port": {"number": 80}}})
    }

    #[test]
    fn valid_ingresses_pass() {
        let spec = json!({
            "ingressClassName": "nginx",
            "rules": [
                {"host": "app.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": web()},
                    {"pathType": "ImplementationSpecific", "backend":
                        {"service": {"name": "web", "port": {"name": "http"}}}},
                ]}},
                {"host": "*.apps.example.com", "http": {"paths": [
                    {"path": "/x", "pathType": "Exact", "backend": web()}]}},
            ],
            "tls": [{"hosts": ["app.example.com", "*.apps.example.com"], "secretName": "tls"}],
        });
        assert_eq!(causes(spec), Vec::<String>::new());
        assert_eq!(causes(json!({"defaultBackend": web()})), Vec::<String>::new());
    }

    #[test]
    fn each_mistake_is_a_cause_in_kube_apiservers_words() {
        assert_eq!(
            causes(json!({})),
            ["spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"]
        );
        let spec = json!({"rules": [
            {"host": "10.0.0.1", "http": {"paths": []}},
            {"host": "a.*.com", "http": {"paths": [
                {"path": "x", "pathType": "Prefix", "backend": web()},
                {"path": "/a//b", "pathType": "Exact", "backend": {}},
                {"path": "/", "backend": {"service": {"name": "web", "port": {}}}},
                {"path": "/", "pathType": "Regex", "backend":
                    {"service": {"name": "web", "port": {"name": "http", "number": 80}}}},
            ]}},
        ]});
        let got = causes(spec);
        for expected in [
            "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
            "spec.rules[0].http.paths: Required value",
            "spec.rules[1].http.paths[0].path: Invalid value: \"x\": must be an absolute path",
            "spec.rules[1].http.paths[1].path: Invalid value: \"/a//b\": must not contain '//'",
            "spec.rules[1].http.paths[1].backend: Invalid value: \"\": resource or service backend is required",
            "spec.rules[1].http.paths[2].pathType: Required value: pathType must be specified",
            "spec.rules[1].http.paths[2].backend: Required value: port name or number is required",
            "spec.rules[1].http.paths[3].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            "spec.rules[1].http.paths[3].backend: Invalid value: \"\": cannot set both port name & port number",
        ] {
            assert!(got.iter().any(|c| c == expected), "missing {expected:?} in {got:#?}");
        }
        assert!(got
            .iter()
            .any(|c| c.starts_with("spec.rules[1].host: Invalid value: \"a.*.com\": a wildcard")));
    }

    #[test]
    fn the_table_shows_class_hosts_address_and_ports() {
        let o = json!({
            "metadata": {"name": "web"},
            "spec": {"rules": [{"host": "a.example.com"}, {"host": "b.example.com"}],
                "tls": [{"hosts": ["a.example.com"]}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}]}},
        });
        let cells = Ingresses.cells(&TYPE, &o);
        assert_eq!(cells[1], json!("<none>"));
        assert_eq!(cells[2], json!("a.example.com,b.example.com"));
        assert_eq!(cells[3], json!("203.0.113.7,lb.example.com"));
        assert_eq!(cells[4], json!("80, 443"));
        let bare = json!({"metadata": {"name": "x"}, "spec": {"ingressClassName": "nginx", "defaultBackend": {}}});
        let cells = Ingresses.cells(&TYPE, &bare);
        assert_eq!((&cells[1], &cells[2], &cells[4]), (&json!("nginx"), &json!("*"), &json!("80")));
    }
}
