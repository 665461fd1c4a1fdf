//! IngressClasses (`ingressclasses` in `networking.k8s.io/v1`): how the API server serves them.

use k8s_openapi::api::networking::v1::{IngressClass, IngressClassParametersReference};
use serde_json::{json, Value};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::table::{self, age_cell, col, name_cell, str_at, Column, AGE, NAME};
use crate::validation::Errors;

/// kube-apiserver's columns for IngressClasses.
const COLUMNS: [Column; 4] = [
    NAME,
    col("Controller", "string", "Controller that is responsible for handling this class"),
    col("Parameters", "string", "A reference to a resource with additional parameters"),
    AGE,
];

/// The longest `spec.controller`.
const MAX_CONTROLLER: usize = 250;

/// The `ingressclasses` resource type.
pub const TYPE: ResourceType = served(
    "networking.k8s.io",
    "v1",
    "IngressClass",
    "ingressclasses",
    "ingressclass",
    false,
    &[],
    NONE,
    &[],
    &IngressClasses,
);

/// The strategy for IngressClasses.
#[derive(Debug)]
pub struct IngressClasses;

impl Validate for IngressClasses {
    type Object = IngressClass;

    fn validate(&self, object: &IngressClass, e: &mut Errors) {
        let spec = object.spec.clone().unwrap_or_default();
        let controller = spec.controller.unwrap_or_default();
        if controller.len() > MAX_CONTROLLER {
            e.too_long("spec.controller", MAX_CONTROLLER);
        }
        domain_prefixed_path(&controller, "spec.controller", e);
        if let Some(parameters) = &spec.parameters {
            parameters_reference(parameters, e);
        }
    }

    fn validate_update(&self, old: &IngressClass, new: &IngressClass, e: &mut Errors) {
        let controller = |c: &IngressClass| c.spec.as_ref().and_then(|s| s.controller.clone());
        if controller(old) != controller(new) {
            let shown = quote(&controller(new).unwrap_or_default());
            e.invalid("spec.controller", &shown, "field is immutable");
        }
    }
}

impl Strategy for IngressClasses {
    /// `SetDefaults_IngressClass`: parameters are cluster-scoped unless said otherwise.
    fn defaults(&self, object: &mut Value) {
        if let Some(parameters) =
            object.pointer_mut("/spec/parameters").and_then(Value::as_object_mut)
        {
            parameters.entry("scope").or_insert_with(|| json!("Cluster"));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&COLUMNS)
    }

    /// `printIngressClass`: parameters as `Kind.group/name`.
    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let parameters = match o.pointer("/spec/parameters") {
            Some(p) if p.is_object() => {
                let group = str_at(p, "/apiGroup");
                let kind = str_at(p, "/kind");
                let kind =
                    if group.is_empty() { kind.to_owned() } else { format!("{kind}.{group}") };
                format!("{kind}/{}", str_at(p, "/name"))
            }
            _ => "<none>".to_owned(),
        };
        vec![name_cell(o), json!(str_at(o, "/spec/controller")), json!(parameters), age_cell(o)]
    }
}

/// `IsDomainPrefixedPath`: `acme.io/foo`.
fn domain_prefixed_path(value: &str, at: &str, e: &mut Errors) {
    let Some((host, path)) = value.split_once('/').filter(|(h, p)| !h.is_empty() && !p.is_empty())
    else {
        e.invalid(at, &quote(value), "must be a domain-prefixed path (such as \"acme.io/foo\")");
        return;
    };
    e.invalid_each(at, host, names::dns1123_subdomain(host));
    let allowed = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !path.chars().all(allowed) {
        e.invalid(
            at,
            &quote(path),
            "Invalid path: must match the regex ^[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+$",
        );
    }
}

/// `validateIngressClassParametersReference`.
fn parameters_reference(p: &IngressClassParametersReference, e: &mut Errors) {
    let at = "spec.parameters";
    if p.kind.is_empty() {
        e.required(&format!("{at}.kind"), "");
    }
    if p.name.is_empty() {
        e.required(&format!("{at}.name"), "");
    }
    if let Some(group) = p.api_group.as_deref().filter(|g| !g.is_empty()) {
        e.invalid_each(&format!("{at}.apiGroup"), group, names::dns1123_subdomain(group));
    }
    match p.scope.as_deref().unwrap_or("") {
        "Namespace" => match &p.namespace {
            None => {
                e.required(&format!("{at}.namespace"), "`parameters.scope` is set to 'Namespace'")
            }
            Some(ns) => e.invalid_each(&format!("{at}.namespace"), ns, names::dns1123_label(ns)),
        },
        "Cluster" => {
            if p.namespace.is_some() {
                e.forbidden(&format!("{at}.namespace"), "`parameters.scope` is set to 'Cluster'");
            }
        }
        other => e.not_supported(&format!("{at}.scope"), &quote(other), &["Cluster", "Namespace"]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(spec: Value) -> Vec<String> {
        let mut object = json!({"metadata": {"name": "c"}, "spec": spec});
        IngressClasses.defaults(&mut object);
        let class: IngressClass = serde_json::from_value(object).expect("decodes");
        let mut e = Errors::default();
        IngressClasses.validate(&class, &mut e);
        e.0.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn a_class_names_a_domain_prefixed_controller_and_well_scoped_parameters() {
        let fine = json!({"controller": "k8s.io/ingress-nginx",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"}});
        assert_eq!(causes(fine), Vec::<String>::new());
        assert_eq!(
            causes(json!({"controller": "nginx"})),
            ["spec.controller: Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")"]
        );
        assert_eq!(
            causes(
                json!({"controller": "k8s.io/x", "parameters": {"kind": "P", "name": "p", "scope": "Namespace"}})
            ),
            ["spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"]
        );
        assert_eq!(
            causes(
                json!({"controller": "k8s.io/x", "parameters": {"kind": "P", "name": "p", "namespace": "n"}})
            ),
            ["spec.parameters.namespace: Forbidden: `parameters.scope` is set to 'Cluster'"]
        );
    }

    #[test]
    fn the_controller_cannot_change() {
        let class = |c: &str| -> IngressClass {
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {"controller": c}}))
                .unwrap()
        };
        let mut e = Errors::default();
        IngressClasses.validate_update(&class("k8s.io/a"), &class("k8s.io/b"), &mut e);
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.0[0].message, "Invalid value: \"k8s.io/b\": field is immutable");
    }

    #[test]
    fn parameters_show_as_kind_group_and_name() {
        let o = json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "P", "name": "p"}}});
        let cells = IngressClasses.cells(&TYPE, &o);
        assert_eq!(cells[1], json!("k8s.io/ingress-nginx"));
        assert_eq!(cells[2], json!("P.k8s.example.com/p"));
        let plain = json!({"metadata": {"name": "x"}, "spec": {"controller": "k8s.io/x"}});
        assert_eq!(IngressClasses.cells(&TYPE, &plain)[2], json!("<none>"));
    }
}
