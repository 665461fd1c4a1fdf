//! Rule matching (`pkg/apis/rbac/v1/evaluation_helpers.go`, `RuleAllows`) and rule coverage
//! (`component-helpers/auth/rbac/validation/policy_comparator.go`, `policy_compact.go`).

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::{go_quote_list, Attributes};

/// `*`: every verb, group, resource or non-resource URL.
const ALL: &str = "*";

fn list(field: &Option<Vec<String>>) -> &[String] {
    field.as_deref().unwrap_or(&[])
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == ALL || v == verb)
}

fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    list(&rule.api_groups).iter().any(|g| g == ALL || g == group)
}

/// `pods/log` matches `*`, `pods/log` and `*/log`; `pods` matches `*` and `pods`. (`pods/*` is
/// not a wildcard: kube matches it only literally.)
fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    list(&rule.resources).iter().any(|r| {
        r == ALL
            || r == combined
            || (!subresource.is_empty()
                && r.strip_prefix("*/").is_some_and(|sub| sub == subresource))
    })
}

/// A rule without resourceNames matches every name (and none); one with names only those.
fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = list(&rule.resource_names);
    names.is_empty() || has(names, name)
}

/// Exact, `*`, or a prefix ending in `*` (`/apis/*` matches `/apis/` and below, not `/apis`).
fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    list(&rule.non_resource_urls).iter().any(|u| url_covers(u, path))
}

/// `NonResourceURLMatches` and `nonResourceURLCovers` alike: exact, or the prefix before a
/// trailing `*` (so `*` alone is everything).
fn url_covers(owner: &str, path: &str) -> bool {
    owner == path || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// Whether one rule allows the request (`RuleAllows`).
pub fn rule_allows(attributes: &Attributes, rule: &PolicyRule) -> bool {
    if attributes.resource_request {
        verb_matches(rule, &attributes.verb)
            && api_group_matches(rule, &attributes.api_group)
            && resource_matches(rule, &attributes.combined_resource(), &attributes.subresource)
            && resource_name_matches(rule, &attributes.name)
    } else {
        verb_matches(rule, &attributes.verb) && non_resource_url_matches(rule, &attributes.path)
    }
}

/// Whether any of the rules allows the request (`RulesAllow`).
pub fn rules_allow(attributes: &Attributes, rules: &[PolicyRule]) -> bool {
    rules.iter().any(|rule| rule_allows(attributes, rule))
}

fn one(s: &str) -> Option<Vec<String>> {
    Some(vec![s.to_owned()])
}

/// A rule broken into rules of one group, resource, verb and (if any) name each, plus one per
/// non-resource URL and verb (`BreakdownRule`).
pub fn breakdown_rule(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: vec![verb.clone()],
                    ..PolicyRule::default()
                };
                let names = list(&rule.resource_names);
                if names.is_empty() {
                    out.push(base);
                } else {
                    out.extend(
                        names.iter().map(|n| PolicyRule { resource_names: one(n), ..base.clone() }),
                    );
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: vec![verb.clone()],
                ..PolicyRule::default()
            });
        }
    }
    out
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

fn resources_cover(owner: &[String], requested: &[String]) -> bool {
    if has(owner, ALL) || has_all(owner, requested) {
        return true;
    }
    requested.iter().all(|path| {
        has(owner, path)
            || path.split_once('/').is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

/// Whether `owner` (any rule) covers `sub` (a rule of [`breakdown_rule`]) (`ruleCovers`).
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(list(&owner.api_groups), ALL)
        || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let resources = resources_cover(list(&owner.resources), list(&sub.resources));
    let urls = list(&sub.non_resource_urls)
        .iter()
        .all(|path| list(&owner.non_resource_urls).iter().any(|o| url_covers(o, path)));
    let owner_names = list(&owner.resource_names);
    let names = owner_names.is_empty() || {
        let sub_names = list(&sub.resource_names);
        !sub_names.is_empty() && has_all(owner_names, sub_names)
    };
    verbs && groups && resources && names && urls
}

/// Whether `owner` rules cover every permission of `requested`, and the broken-down requested
/// rules they do not cover (`validation.Covers`).
pub fn covers(owner: &[PolicyRule], requested: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let uncovered: Vec<PolicyRule> = requested
        .iter()
        .flat_map(breakdown_rule)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect();
    (uncovered.is_empty(), uncovered)
}

/// Rules of one group and one resource and nothing but verbs, merged per group/resource
/// (`CompactRules`); other rules are kept as they are.
pub fn compact_rules(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut compacted: Vec<PolicyRule> = Vec::with_capacity(rules.len());
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = list(&rule.resource_names).is_empty()
            && list(&rule.non_resource_urls).is_empty()
            && list(&rule.api_groups).len() == 1
            && list(&rule.resources).len() == 1;
        if !is_simple {
            compacted.push(rule.clone());
            continue;
        }
        match simple
            .iter_mut()
            .find(|s| s.api_groups == rule.api_groups && s.resources == rule.resources)
        {
            Some(existing) => existing.verbs.extend(rule.verbs.iter().cloned()),
            None => simple.push(PolicyRule {
                api_groups: rule.api_groups.clone(),
                resources: rule.resources.clone(),
                verbs: rule.verbs.clone(),
                ..PolicyRule::default()
            }),
        }
    }
    compacted.extend(simple);
    compacted
}

/// `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`: a rule as kube's escalation errors
/// write it (`CompactString`).
pub fn compact_string(rule: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (label, values) in [
        ("APIGroups", list(&rule.api_groups)),
        ("Resources", list(&rule.resources)),
        ("NonResourceURLs", list(&rule.non_resource_urls)),
        ("ResourceNames", list(&rule.resource_names)),
        ("Verbs", rule.verbs.as_slice()),
    ] {
        if !values.is_empty() {
            parts.push(format!("{label}:{}", go_quote_list(values)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}
