//! Compiling a schema's CEL rules and estimating their cost, with the per-rule and per-schema
//! limits kube-apiserver applies when a definition is written.

use crate::cel;
use crate::error::{child, index, key, FieldError};
use crate::node::{Additional, Node};

/// The estimated costs of a schema's rules, summed as kube-apiserver sums them.
#[derive(Default)]
struct Costs {
    total: u64,
    /// Whether rules over the limits are refused.
    limit: bool,
    /// Each rule's path and estimated cost (times how often it runs).
    rules: Vec<(String, u64)>,
}

impl Costs {
    /// Count the expression at `at` (a rule or a message expression; `what` names its cost in
    /// kube-apiserver's words), refusing it when it alone is over the per-expression limit.
    fn charge(&mut self, at: String, what: &str, cost: u64, errs: &mut Vec<FieldError>) {
        if self.limit && cost > cel::STATIC_ESTIMATED_COST_LIMIT {
            let message = cel::cost_error_message(what, cost, cel::STATIC_ESTIMATED_COST_LIMIT);
            errs.push(FieldError::forbidden(&at, message));
        }
        self.total = self.total.saturating_add(cost);
        self.rules.push((at, cost));
    }
}

/// Compiles every node's rules and estimates their cost, as kube-apiserver does when a
/// definition is written: a rule whose estimated cost (one evaluation's, times how many times it
/// runs in the largest object: the product of the sizes of the lists and maps above it) exceeds
/// `StaticEstimatedCostLimit` is refused at its `rule`, and so is a schema whose rules together
/// exceed `StaticEstimatedCRDCostLimit`.
pub(super) fn compile_all_rules(
    root: &mut Node,
    path: &str,
    limit_costs: bool,
    errs: &mut Vec<FieldError>,
) {
    let mut costs = Costs { limit: limit_costs, ..Costs::default() };
    compile_rules(root, path, None, 1, &mut costs, errs);
    if limit_costs && costs.total > cel::STATIC_ESTIMATED_CRD_COST_LIMIT {
        // The most expensive rules first, as kube-apiserver names them.
        costs.rules.sort_by_key(|rule| std::cmp::Reverse(rule.1));
        for (rule, _) in costs.rules.iter().take(4) {
            errs.push(FieldError::forbidden(
                rule,
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errs.push(FieldError::forbidden(
            path,
            cel::cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                costs.total,
                cel::STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
}

/// Compiles the rules of `s` and below. `uncorrelatable` is the path of the highest list (not of
/// type map) above the node: transition rules cannot compare old and new values under it.
/// `cardinality` is how many values of `s` the largest object can hold.
fn compile_rules(
    s: &mut Node,
    path: &str,
    uncorrelatable: Option<&str>,
    cardinality: u64,
    costs: &mut Costs,
    errs: &mut Vec<FieldError>,
) {
    let raw = std::mem::take(&mut s.raw_rules);
    for (i, r) in raw.iter().enumerate() {
        let rp = index(&child(path, "x-kubernetes-validations"), i);
        match cel::compile_rule(r, s, &rp, uncorrelatable) {
            Ok(Some(compiled)) => {
                let cost = cel::estimated_cost(&r.rule, s).saturating_mul(cardinality);
                costs.charge(child(&rp, "rule"), "estimated rule cost", cost, errs);
                // A message expression runs once per failure, so its cost is not multiplied.
                if !r.message_expression.trim().is_empty() {
                    let cost = cel::estimated_cost(&r.message_expression, s);
                    let what = "estimated messageExpression cost";
                    costs.charge(child(&rp, "messageExpression"), what, cost, errs);
                }
                s.rules.push(compiled);
            }
            Ok(None) => {}
            Err(mut e) => errs.append(&mut e),
        }
    }
    s.raw_rules = raw;
    let items_uncorrelatable = if s.list_type.as_deref() == Some("map") {
        uncorrelatable.map(str::to_string)
    } else {
        Some(uncorrelatable.map(str::to_string).unwrap_or_else(|| path.to_string()))
    };
    let elements = cardinality.saturating_mul(cel::max_elements(s));
    if let Some(items) = s.items.as_deref_mut() {
        let p = child(path, "items");
        compile_rules(items, &p, items_uncorrelatable.as_deref(), elements, costs, errs);
    }
    for (k, p) in s.properties.iter_mut() {
        let at = key(&child(path, "properties"), k);
        compile_rules(p, &at, uncorrelatable, cardinality, costs, errs);
    }
    if let Some(Additional::Schema(a)) = s.additional.as_mut() {
        let p = child(path, "additionalProperties");
        compile_rules(a, &p, uncorrelatable, elements, costs, errs);
    }
}

pub(super) fn mark_rules(s: &mut Node) -> bool {
    let mut has = !s.rules.is_empty();
    if let Some(items) = s.items.as_deref_mut() {
        has |= mark_rules(items);
    }
    for p in s.properties.values_mut() {
        has |= mark_rules(p);
    }
    if let Some(Additional::Schema(a)) = s.additional.as_mut() {
        has |= mark_rules(a);
    }
    s.has_rules = has;
    has
}
