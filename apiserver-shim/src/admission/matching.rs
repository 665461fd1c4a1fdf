//! Which requests a policy's `matchConstraints`, a binding's `matchResources` and a webhook's
//! rules and selectors select, as kube-apiserver's `matching.Matcher` decides it: excluded rules
//! first, then the resource rules (an empty list matches everything, for a binding), then the
//! namespace and object selectors.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{MatchResources, NamedRuleWithOperations};
use serde_json::Value;

use crate::resource::ResourceType;
use crate::validation::Selector;

use super::request::Attributes;

/// Whether `rule` matches a request for `rt` (the request's own type, or an equivalent one).
fn rule_matches(rule: &NamedRuleWithOperations, rt: &ResourceType, a: &Attributes<'_>) -> bool {
    let any = |list: &Option<Vec<String>>, value: &str| {
        list.iter().flatten().any(|item| item == "*" || item == value)
    };
    let scope = match rule.scope.as_deref() {
        None | Some("*") => true,
        Some("Namespaced") => !a.rt.strategy.is_namespace() && !a.namespace.is_empty(),
        Some("Cluster") => a.rt.strategy.is_namespace() || a.namespace.is_empty(),
        Some(_) => false,
    };
    let resources = rule.resources.iter().flatten().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == rt.plural) && (sub == "*" || sub == a.subresource.unwrap_or(""))
    });
    let names = rule.resource_names.as_deref().unwrap_or_default();
    scope
        && any(&rule.operations, a.operation.name())
        && any(&rule.api_groups, rt.group)
        && any(&rule.api_versions, rt.version)
        && resources
        && (names.is_empty() || names.iter().any(|n| n == a.name))
}

/// The type a request matches `rules` as: its own, or, under `Equivalent`, another served
/// version of the same resource. `None` if none matches.
fn matched_type<'r>(
    rules: &[NamedRuleWithOperations],
    equivalent: bool,
    a: &Attributes<'r>,
    served: &'r [ResourceType],
) -> Option<&'r ResourceType> {
    if rules.iter().any(|r| rule_matches(r, a.rt, a)) {
        return Some(a.rt);
    }
    if !equivalent {
        return None;
    }
    served
        .iter()
        .filter(|t| t.group == a.rt.group && t.plural == a.rt.plural && t.version != a.rt.version)
        .find(|t| rules.iter().any(|r| rule_matches(r, t, a)))
}

/// The labels of an object.
fn labels(object: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let labels = object?.pointer("/metadata/labels")?.as_object()?;
    Some(labels.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
}

/// Whether `m` selects the request; the type it matched as. `rules_required`: a policy's
/// constraints, whose empty resource rules select nothing (they are required), where a binding's
/// select everything.
pub(crate) fn matches<'r>(
    m: &MatchResources,
    rules_required: bool,
    a: &Attributes<'r>,
    served: &'r [ResourceType],
) -> Option<&'r ResourceType> {
    let equivalent = m.match_policy.as_deref() != Some("Exact");
    let excluded = m.exclude_resource_rules.as_deref().unwrap_or_default();
    if matched_type(excluded, equivalent, a, served).is_some() {
        return None;
    }
    let rules = m.resource_rules.as_deref().unwrap_or_default();
    let rt = if rules.is_empty() && !rules_required {
        a.rt
    } else {
        matched_type(rules, equivalent, a, served)?
    };
    // A cluster-scoped object other than a namespace is never exempted by a namespace selector.
    let namespace_selected = if a.namespace.is_empty() && !a.rt.strategy.is_namespace() {
        true
    } else {
        m.namespace_selector.as_ref().is_none_or(|s| {
            let selector = Selector::of(Some(s));
            selector.is_empty() || selector.matches(labels(a.namespace_object).as_ref())
        })
    };
    let object_selected = m.object_selector.as_ref().is_none_or(|s| {
        let selector = Selector::of(Some(s));
        selector.is_empty()
            || a.object.is_some() && selector.matches(labels(a.object).as_ref())
            || a.old.is_some() && selector.matches(labels(a.old).as_ref())
    });
    (namespace_selected && object_selected).then_some(rt)
}
