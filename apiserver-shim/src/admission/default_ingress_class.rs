//! The default IngressClass at admission, as kube-apiserver's `DefaultIngressClass` plugin sets
//! it: a new Ingress that names no class (no `spec.ingressClassName` and no legacy
//! `kubernetes.io/ingress.class` annotation) gets the IngressClass annotated
//! `ingressclass.kubernetes.io/is-default-class: "true"`; with several, the newest, ties broken
//! by name; with none, the Ingress is left as it is.

use serde_json::Value;

use crate::admission::default_storage_class::DefaultClass;
use crate::api::Api;
use crate::status::ApiResult;

/// The annotation that marks the default IngressClass.
pub const IS_DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";
/// The annotation an Ingress named its class with before `spec.ingressClassName`.
pub const LEGACY_CLASS: &str = "kubernetes.io/ingress.class";

/// Whether IngressClass `class` is marked as the default.
pub fn is_default(class: &Value) -> bool {
    class
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(IS_DEFAULT_CLASS))
        .and_then(Value::as_str)
        == Some("true")
}

/// Whether Ingress `ingress` names its class, by field or by the legacy annotation.
pub fn names_class(ingress: &Value) -> bool {
    let annotated = ingress
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(LEGACY_CLASS));
    annotated || ingress.pointer("/spec/ingressClassName").is_some_and(|c| !c.is_null())
}

/// A new Ingress without a class gets the cluster's default one, if there is one.
pub fn admit_ingress(api: &Api, ingress: &mut Value) -> ApiResult<()> {
    if names_class(ingress) {
        return Ok(());
    }
    let classes = DefaultClass {
        classes: ("networking.k8s.io", "ingressclasses"),
        marked: is_default,
        object: ("networking.k8s.io", "ingresses"),
        field: "ingressClassName",
    };
    classes.give(api, ingress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_ingress_naming_no_class_is_defaulted() {
        assert!(!names_class(&json!({"spec": {}})));
        assert!(names_class(&json!({"spec": {"ingressClassName": "nginx"}})));
        assert!(names_class(
            &json!({"metadata": {"annotations": {LEGACY_CLASS: "nginx"}}, "spec": {}})
        ));
        assert!(is_default(&json!({"metadata": {"annotations": {IS_DEFAULT_CLASS: "true"}}})));
        assert!(!is_default(&json!({"metadata": {"annotations": {IS_DEFAULT_CLASS: "True"}}})));
    }
}
