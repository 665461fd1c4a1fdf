//! ClusterRole aggregation (`pkg/controller/clusterroleaggregation`): a ClusterRole with
//! `aggregationRule.clusterRoleSelectors` gets as `rules` the union of the rules of every other
//! ClusterRole whose labels match any of the selectors.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` match a `metav1.LabelSelector` (`LabelSelectorAsSelector`): every
/// `matchLabels` pair and every `matchExpressions` requirement (`In`, `NotIn`, `Exists`,
/// `DoesNotExist`). An empty selector matches everything. `None` when the selector is invalid (an
/// unknown operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist` with values).
pub fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let mut matches =
        selector.match_labels.iter().flatten().all(|(key, value)| labels.get(key) == Some(value));
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.as_deref().unwrap_or(&[]);
        let label = labels.get(&requirement.key);
        let ok = match requirement.operator.as_str() {
            "In" if !values.is_empty() => label.is_some_and(|l| values.contains(l)),
            "NotIn" if !values.is_empty() => label.is_none_or(|l| !values.contains(l)),
            "Exists" if values.is_empty() => label.is_some(),
            "DoesNotExist" if values.is_empty() => label.is_none(),
            _ => return None,
        };
        matches &= ok;
    }
    Some(matches)
}

fn selectors(role: &ClusterRole) -> Option<&[LabelSelector]> {
    role.aggregation_rule.as_ref().map(|a| a.cluster_role_selectors.as_deref().unwrap_or(&[]))
}

/// A rule with empty lists as absent ones, for `equality.Semantic` comparisons.
fn normalized(rule: &PolicyRule) -> PolicyRule {
    let norm = |v: &Option<Vec<String>>| v.clone().filter(|v| !v.is_empty());
    PolicyRule {
        api_groups: norm(&rule.api_groups),
        non_resource_urls: norm(&rule.non_resource_urls),
        resource_names: norm(&rule.resource_names),
        resources: norm(&rule.resources),
        verbs: rule.verbs.clone(),
    }
}

fn same_rules(a: &[PolicyRule], b: &[PolicyRule]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| normalized(x) == normalized(y))
}

/// The rules the aggregated role at `index` should have now, or `None` if one of its selectors is
/// invalid (the controller then leaves the role alone).
fn aggregated_rules(roles: &[ClusterRole], index: usize) -> Option<Vec<PolicyRule>> {
    let role = &roles[index];
    let mut by_name: Vec<&ClusterRole> = roles.iter().collect();
    by_name.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    let mut seen: Vec<PolicyRule> = Vec::new();
    for selector in selectors(role)? {
        for other in &by_name {
            if other.metadata.name == role.metadata.name {
                continue;
            }
            let empty = BTreeMap::new();
            let labels = other.metadata.labels.as_ref().unwrap_or(&empty);
            if !selector_matches(selector, labels)? {
                continue;
            }
            for rule in other.rules.iter().flatten() {
                let key = normalized(rule);
                if !seen.contains(&key) {
                    seen.push(key);
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(rules)
}

/// Brings the rules of every aggregated role up to date, in place, until nothing changes (an
/// aggregated role may select another one, as `admin` selects `edit`). Returns the indexes of the
/// roles changed.
pub(super) fn aggregate_in_place(roles: &mut [ClusterRole]) -> Vec<usize> {
    let mut order: Vec<usize> =
        (0..roles.len()).filter(|&i| selectors(&roles[i]).is_some()).collect();
    order.sort_by(|&a, &b| roles[a].metadata.name.cmp(&roles[b].metadata.name));
    let before: Vec<Vec<PolicyRule>> =
        order.iter().map(|&i| roles[i].rules.clone().unwrap_or_default()).collect();
    // Each pass settles at least one more level of nesting; a cycle of selectors settles too,
    // but bound the passes anyway.
    for _ in 0..=order.len() {
        let mut any = false;
        for &i in &order {
            let Some(rules) = aggregated_rules(roles, i) else { continue };
            if !same_rules(&rules, roles[i].rules.as_deref().unwrap_or(&[])) {
                roles[i].rules = Some(rules);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    let mut changed: Vec<usize> = order
        .iter()
        .zip(&before)
        .filter(|(&i, old)| !same_rules(roles[i].rules.as_deref().unwrap_or(&[]), old))
        .map(|(&i, _)| i)
        .collect();
    changed.sort_unstable();
    changed
}

/// The aggregated ClusterRoles (those with an `aggregationRule`) whose `rules` are not the union
/// of the rules of the ClusterRoles their selectors match, with their `rules` brought up to date,
/// for the server to write back after a ClusterRole write (what kube's aggregation controller
/// does). Roles whose rules are already right are not returned.
pub fn aggregate(cluster_roles: &[ClusterRole]) -> Vec<ClusterRole> {
    let mut roles = cluster_roles.to_vec();
    let changed = aggregate_in_place(&mut roles);
    changed.into_iter().filter_map(|i| roles.get(i).cloned()).collect()
}
