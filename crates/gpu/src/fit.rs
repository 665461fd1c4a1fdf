//! Which nodes a pod may run on, read as kube-scheduler's filters read it: the node's cordon
//! (`NodeUnschedulable`), its taints against the pod's tolerations (`TaintToleration`), and the
//! pod's `nodeSelector` and required node affinity (`NodeAffinity`), in that order. A node that
//! fails gets the first reason, and the reasons of all nodes make kube-scheduler's
//! `0/N nodes are available: …` message.
//!
//! Preferred affinity is a score, not a filter: it is read and not used. A node whose `Ready`
//! condition is not `True` counts as carrying the `node.kubernetes.io/not-ready:NoSchedule` taint
//! that Kubernetes' node lifecycle controller gives it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A field that may be absent or `null`, as clients send either: both read as the default.
fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The taint a cordoned node counts as carrying.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// The taint a node that is not Ready counts as carrying.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";

/// A node's taint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value (may be empty).
    #[serde(default, deserialize_with = "or_default")]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    fn keeps_pods_off(&self) -> bool {
        self.effect == "NoSchedule" || self.effect == "NoExecute"
    }
}

/// A pod's toleration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The key; empty with `Exists` tolerates every taint.
    #[serde(default, deserialize_with = "or_default")]
    pub key: String,
    /// `Equal` (the default) or `Exists`.
    #[serde(default, deserialize_with = "or_default")]
    pub operator: String,
    /// The value `Equal` compares.
    #[serde(default, deserialize_with = "or_default")]
    pub value: String,
    /// The effect tolerated; empty tolerates every effect.
    #[serde(default, deserialize_with = "or_default")]
    pub effect: String,
}

impl Toleration {
    /// A toleration of every taint with `key` and `effect`, whatever its value.
    pub fn exists(key: &str, effect: &str) -> Toleration {
        Toleration {
            key: key.to_owned(),
            operator: "Exists".to_owned(),
            value: String::new(),
            effect: effect.to_owned(),
        }
    }

    /// Whether this toleration, as a pattern an admin allows, covers toleration `other`: every
    /// taint `other` tolerates, this one tolerates too. A key-less `Exists` (tolerate
    /// everything) is covered only by a key-less `Exists` of the same or every effect.
    pub fn covers(&self, other: &Toleration) -> bool {
        let exists = |t: &Toleration| t.operator == "Exists";
        if !self.effect.is_empty() && self.effect != other.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != other.key {
            return false;
        }
        if other.key.is_empty() && !(self.key.is_empty() && exists(self)) {
            return false;
        }
        match self.operator.as_str() {
            "Exists" => matches!(other.operator.as_str(), "Exists" | "Equal" | ""),
            "" | "Equal" => !exists(other) && other.value == self.value,
            _ => false,
        }
    }

    /// Whether this toleration tolerates `taint`, as Kubernetes' `ToleratesTaint` decides.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator.as_str() {
            "Exists" => true,
            "" | "Equal" => self.value == taint.value,
            _ => false,
        }
    }
}

/// One requirement of a node selector term.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
struct Requirement {
    key: String,
    operator: String,
    #[serde(default, deserialize_with = "or_default")]
    values: Vec<String>,
}

impl Requirement {
    /// Whether a node whose value for the key is `value` (or none) meets it. An operator it does
    /// not know, or a `Gt`/`Lt` whose numbers do not parse, meets nothing.
    fn met_by(&self, value: Option<&str>) -> bool {
        let number = |s: &str| s.parse::<i64>().ok();
        let bound = || match self.values.as_slice() {
            [v] => number(v),
            _ => None,
        };
        match self.operator.as_str() {
            "In" => value.is_some_and(|v| self.values.iter().any(|w| w == v)),
            "NotIn" => !value.is_some_and(|v| self.values.iter().any(|w| w == v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "Gt" => matches!((value.and_then(number), bound()), (Some(v), Some(b)) if v > b),
            "Lt" => matches!((value.and_then(number), bound()), (Some(v), Some(b)) if v < b),
            _ => false,
        }
    }
}

/// A node selector term: its requirements all hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Term {
    #[serde(default, deserialize_with = "or_default")]
    match_expressions: Vec<Requirement>,
    #[serde(default, deserialize_with = "or_default")]
    match_fields: Vec<Requirement>,
}

impl Term {
    /// An empty term matches no node; `matchFields` knows only `metadata.name`.
    fn matches(&self, node: &NodeFacts) -> bool {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions.iter().all(|r| r.met_by(node.labels.get(&r.key).map(String::as_str)))
            && self.match_fields.iter().all(|r| {
                r.key == "metadata.name"
                    && matches!(r.operator.as_str(), "In" | "NotIn")
                    && r.met_by(Some(&node.name))
            })
    }
}

/// The pod-spec fields this module reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecFields {
    #[serde(default, deserialize_with = "or_default")]
    node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "or_default")]
    affinity: Option<AffinityFields>,
    #[serde(default, deserialize_with = "or_default")]
    tolerations: Option<Vec<Toleration>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffinityFields {
    #[serde(default, deserialize_with = "or_default")]
    node_affinity: Option<NodeAffinityFields>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeAffinityFields {
    #[serde(default, deserialize_with = "or_default")]
    required_during_scheduling_ignored_during_execution: Option<SelectorFields>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SelectorFields {
    #[serde(default, deserialize_with = "or_default")]
    node_selector_terms: Vec<Term>,
}

/// What a pod asks of the node it runs on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodNeeds {
    selector: BTreeMap<String, String>,
    /// Required node affinity: one of these terms must match. `None`: no requirement.
    terms: Option<Vec<Term>>,
    tolerations: Vec<Toleration>,
}

/// Why a pod spec's placement fields could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the pod's nodeSelector, affinity or tolerations do not parse: {0}")]
pub struct NeedsError(#[from] serde_json::Error);

impl PodNeeds {
    /// The needs of a pod with spec `spec` (a Pod's `spec`, as JSON).
    pub fn of_spec(spec: &Value) -> Result<PodNeeds, NeedsError> {
        let fields = SpecFields::deserialize(spec)?;
        Ok(PodNeeds {
            selector: fields.node_selector.unwrap_or_default(),
            terms: fields
                .affinity
                .and_then(|a| a.node_affinity)
                .and_then(|n| n.required_during_scheduling_ignored_during_execution)
                .map(|s| s.node_selector_terms),
            tolerations: fields.tolerations.unwrap_or_default(),
        })
    }

    /// These needs, also tolerating `toleration`.
    #[must_use]
    pub fn tolerating(mut self, toleration: Toleration) -> PodNeeds {
        self.tolerations.push(toleration);
        self
    }

    fn tolerated(&self, taint: &Taint) -> bool {
        self.tolerations.iter().any(|t| t.tolerates(taint))
    }

    /// Whether the pod may run on `node`, and if not the first reason.
    pub fn check(&self, node: &NodeFacts) -> Result<(), Misfit> {
        if node.unschedulable {
            let cordon = Taint {
                key: TAINT_UNSCHEDULABLE.to_owned(),
                value: String::new(),
                effect: "NoSchedule".to_owned(),
            };
            if !self.tolerated(&cordon) {
                return Err(Misfit::Unschedulable);
            }
        }
        let not_ready = (!node.ready).then(|| Taint {
            key: TAINT_NOT_READY.to_owned(),
            value: String::new(),
            effect: "NoSchedule".to_owned(),
        });
        let untolerated = node
            .taints
            .iter()
            .chain(not_ready.iter())
            .find(|t| t.keeps_pods_off() && !self.tolerated(t));
        if let Some(taint) = untolerated {
            return Err(Misfit::Taint { key: taint.key.clone(), value: taint.value.clone() });
        }
        let selected = self.selector.iter().all(|(k, v)| node.labels.get(k) == Some(v));
        let affine = self.terms.as_ref().is_none_or(|terms| terms.iter().any(|t| t.matches(node)));
        if !(selected && affine) {
            return Err(Misfit::Affinity);
        }
        Ok(())
    }
}

/// What this module needs to know of a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its taints.
    pub taints: Vec<Taint>,
    /// Whether `spec.unschedulable` is set (cordoned).
    pub unschedulable: bool,
    /// Whether its `Ready` condition is `True`.
    pub ready: bool,
    /// How many pods it runs at most (`status.allocatable.pods`), if it says.
    pub allocatable_pods: Option<usize>,
}

impl NodeFacts {
    /// Whether the node has room for one more pod when it runs `running` pods already
    /// (kube-scheduler's `NodeResourcesFit` for the `pods` resource).
    pub fn room_for_one(&self, running: usize) -> Result<(), Misfit> {
        match self.allocatable_pods {
            Some(max) if running >= max => Err(Misfit::TooManyPods),
            _ => Ok(()),
        }
    }

    /// The facts of a Node, as JSON.
    pub fn of_node(node: &Value) -> NodeFacts {
        let labels = node
            .pointer("/metadata/labels")
            .and_then(|l| BTreeMap::<String, String>::deserialize(l).ok())
            .unwrap_or_default();
        let taints = node
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| Taint::deserialize(t).ok())
            .collect();
        let ready = node
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        NodeFacts {
            name: node
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            labels,
            taints,
            unschedulable: node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)),
            ready,
            allocatable_pods: node
                .pointer("/status/allocatable/pods")
                .and_then(Value::as_str)
                .and_then(|p| p.parse().ok()),
        }
    }
}

/// Why a pod may not run on a node, in kube-scheduler's words.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misfit {
    /// The node is cordoned and the pod does not tolerate it.
    Unschedulable,
    /// The node has a `NoSchedule` or `NoExecute` taint the pod does not tolerate.
    Taint {
        /// The taint's key.
        key: String,
        /// The taint's value.
        value: String,
    },
    /// The pod's `nodeSelector` or required node affinity does not match the node.
    Affinity,
    /// The node holds as many pods as it allows.
    TooManyPods,
    /// Another reason, in the caller's words (`node(s) …`).
    Other(String),
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::Unschedulable => f.write_str("node(s) were unschedulable"),
            Misfit::Taint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Misfit::Affinity => f.write_str("node(s) didn't match Pod's node affinity/selector"),
            Misfit::TooManyPods => f.write_str("Too many pods"),
            Misfit::Other(why) => f.write_str(why),
        }
    }
}

/// kube-scheduler's message for a pod no node takes: `0/3 nodes are available: 1 node(s) were
/// unschedulable, 2 node(s) didn't match Pod's node affinity/selector.`: each reason with its
/// count, sorted as text. `nodes` is how many nodes were considered.
pub fn unavailable(nodes: usize, misfits: &[Misfit]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for m in misfits {
        *counts.entry(m.to_string()).or_default() += 1;
    }
    let mut reasons: Vec<String> = counts.iter().map(|(why, n)| format!("{n} {why}")).collect();
    reasons.sort();
    if reasons.is_empty() {
        format!("0/{nodes} nodes are available.")
    } else {
        format!("0/{nodes} nodes are available: {}.", reasons.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: &[(&str, &str)]) -> NodeFacts {
        NodeFacts {
            name: name.to_owned(),
            labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            taints: Vec::new(),
            unschedulable: false,
            ready: true,
            allocatable_pods: None,
        }
    }

    fn needs(spec: Value) -> PodNeeds {
        PodNeeds::of_spec(&spec).expect("parses")
    }

    fn affinity(terms: Value) -> PodNeeds {
        needs(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}))
    }

    #[test]
    fn a_pod_without_needs_runs_on_any_ready_node() {
        let n = node("a", &[]);
        assert_eq!(needs(json!({"containers": []})).check(&n), Ok(()));
        assert_eq!(needs(json!({"nodeSelector": null, "affinity": {}})).check(&n), Ok(()));
    }

    #[test]
    fn node_selector_needs_every_label() {
        let n = node("a", &[("gpu", "h200"), ("zone", "z1")]);
        assert_eq!(needs(json!({"nodeSelector": {"gpu": "h200"}})).check(&n), Ok(()));
        let both = needs(json!({"nodeSelector": {"gpu": "h200", "zone": "z2"}}));
        assert_eq!(both.check(&n), Err(Misfit::Affinity));
    }

    #[test]
    fn affinity_operators_read_as_kubernetes_reads_them() {
        let n = node("a", &[("gpu", "h200"), ("count", "8")]);
        let one = |key: &str, op: &str, values: Value| {
            affinity(
                json!([{"matchExpressions": [{"key": key, "operator": op, "values": values}]}]),
            )
            .check(&n)
            .is_ok()
        };
        assert!(one("gpu", "In", json!(["a100", "h200"])));
        assert!(!one("gpu", "In", json!(["a100"])));
        assert!(!one("missing", "In", json!(["h200"])));
        assert!(one("gpu", "NotIn", json!(["a100"])));
        assert!(one("missing", "NotIn", json!(["a100"])), "an absent label is not in any set");
        assert!(!one("gpu", "NotIn", json!(["h200"])));
        assert!(one("gpu", "Exists", json!(null)));
        assert!(!one("missing", "Exists", json!(null)));
        assert!(one("missing", "DoesNotExist", json!(null)));
        assert!(!one("gpu", "DoesNotExist", json!(null)));
        assert!(one("count", "Gt", json!(["4"])));
        assert!(!one("count", "Gt", json!(["8"])));
        assert!(one("count", "Lt", json!(["9"])));
        assert!(!one("gpu", "Gt", json!(["1"])), "a value that is not a number");
        assert!(!one("count", "Gt", json!(["1", "2"])), "Gt takes one value");
        assert!(!one("gpu", "Matches", json!(["h200"])), "an unknown operator");
    }

    #[test]
    fn terms_are_ored_and_requirements_anded() {
        let n = node("gpu-1", &[("gpu", "h200"), ("zone", "z1")]);
        let expr = |k: &str, v: &str| json!({"key": k, "operator": "In", "values": [v]});
        let and =
            affinity(json!([{"matchExpressions": [expr("gpu", "h200"), expr("zone", "z2")]}]));
        assert_eq!(and.check(&n), Err(Misfit::Affinity));
        let or = affinity(json!([
            {"matchExpressions": [expr("zone", "z2")]},
            {"matchExpressions": [expr("gpu", "h200")]},
        ]));
        assert_eq!(or.check(&n), Ok(()));
        // An empty term matches nothing, and no terms at all match nothing.
        assert_eq!(affinity(json!([{}])).check(&n), Err(Misfit::Affinity));
        assert_eq!(affinity(json!([])).check(&n), Err(Misfit::Affinity));
        // matchFields knows metadata.name, with In and NotIn.
        let field = |op: &str, key: &str| {
            affinity(json!([{"matchFields": [{"key": key, "operator": op, "values": ["gpu-1"]}]}]))
                .check(&n)
                .is_ok()
        };
        assert!(field("In", "metadata.name"));
        assert!(!field("NotIn", "metadata.name"));
        assert!(!field("In", "metadata.uid"));
        assert!(!field("Exists", "metadata.name"));
        // nodeSelector and affinity must both hold.
        let mut both = affinity(json!([{"matchExpressions": [expr("gpu", "h200")]}]));
        both.selector.insert("zone".into(), "z2".into());
        assert_eq!(both.check(&n), Err(Misfit::Affinity));
    }

    #[test]
    fn taints_keep_off_pods_that_do_not_tolerate_them() {
        let mut n = node("a", &[]);
        n.taints = vec![Taint {
            key: "nvidia.com/gpu".into(),
            value: "present".into(),
            effect: "NoSchedule".into(),
        }];
        let plain = needs(json!({}));
        assert_eq!(
            plain.check(&n),
            Err(Misfit::Taint { key: "nvidia.com/gpu".into(), value: "present".into() })
        );
        let tolerate = |t: Value| needs(json!({"tolerations": [t]})).check(&n).is_ok();
        assert!(tolerate(json!({"key": "nvidia.com/gpu", "operator": "Exists"})));
        assert!(tolerate(json!({"key": "nvidia.com/gpu", "value": "present"})));
        assert!(tolerate(
            json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"})
        ));
        assert!(tolerate(json!({"operator": "Exists"})), "an empty key with Exists tolerates all");
        assert!(!tolerate(json!({"key": "nvidia.com/gpu", "value": "absent"})));
        assert!(!tolerate(
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"})
        ));
        assert!(!tolerate(json!({"key": "other", "operator": "Exists"})));
        assert!(plain
            .clone()
            .tolerating(Toleration::exists("nvidia.com/gpu", "NoSchedule"))
            .check(&n)
            .is_ok());
        // PreferNoSchedule is a preference, not a filter.
        n.taints[0].effect = "PreferNoSchedule".into();
        assert_eq!(plain.check(&n), Ok(()));
    }

    #[test]
    fn cordoned_and_unready_nodes_take_only_pods_that_tolerate_it() {
        let mut n = node("a", &[]);
        n.unschedulable = true;
        assert_eq!(needs(json!({})).check(&n), Err(Misfit::Unschedulable));
        let tolerant = needs(json!({"tolerations": [
            {"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}]}));
        assert_eq!(tolerant.check(&n), Ok(()));
        let mut n = node("b", &[]);
        n.ready = false;
        assert_eq!(
            needs(json!({})).check(&n),
            Err(Misfit::Taint { key: TAINT_NOT_READY.into(), value: String::new() })
        );
        // The first reason wins: a cordoned node that also does not match says so first.
        let mut n = node("c", &[]);
        n.unschedulable = true;
        assert_eq!(
            needs(json!({"nodeSelector": {"x": "y"}})).check(&n),
            Err(Misfit::Unschedulable)
        );
    }

    #[test]
    fn node_facts_are_read_from_a_node() {
        let n = NodeFacts::of_node(&json!({
            "metadata": {"name": "n1", "labels": {"gpu": "h200"}},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"pods": "110"}},
        }));
        assert_eq!(n.name, "n1");
        assert_eq!(n.allocatable_pods, Some(110));
        assert_eq!(n.room_for_one(109), Ok(()));
        assert_eq!(n.room_for_one(110), Err(Misfit::TooManyPods));
        assert_eq!(n.labels.get("gpu").map(String::as_str), Some("h200"));
        assert_eq!(
            n.taints,
            vec![Taint { key: "k".into(), value: String::new(), effect: "NoExecute".into() }]
        );
        assert!(n.unschedulable && n.ready);
        let bare = NodeFacts::of_node(&json!({"metadata": {"name": "n2"}}));
        assert!(!bare.ready && !bare.unschedulable && bare.taints.is_empty());
        assert_eq!(bare.room_for_one(usize::MAX), Ok(()), "no limit said, none applied");
    }

    #[test]
    fn the_message_counts_reasons_as_kube_scheduler_does() {
        let misfits = [
            Misfit::Affinity,
            Misfit::Unschedulable,
            Misfit::Affinity,
            Misfit::Taint { key: "k".into(), value: String::new() },
        ];
        assert_eq!(
            unavailable(4, &misfits),
            "0/4 nodes are available: 1 node(s) had untolerated taint {k: }, 1 node(s) were \
             unschedulable, 2 node(s) didn't match Pod's node affinity/selector."
        );
        assert_eq!(unavailable(0, &[]), "0/0 nodes are available.");
    }

    #[test]
    fn a_spec_of_the_wrong_shape_is_an_error() {
        assert!(PodNeeds::of_spec(&json!({"nodeSelector": ["a"]})).is_err());
        assert!(PodNeeds::of_spec(&json!({"tolerations": {"key": "a"}})).is_err());
    }

    #[test]
    fn an_allowed_pattern_covers_only_what_tolerates_no_more() {
        let t = |key: &str, operator: &str, value: &str, effect: &str| Toleration {
            key: key.into(),
            operator: operator.into(),
            value: value.into(),
            effect: effect.into(),
        };
        let team = t("team", "Equal", "a", "NoSchedule");
        assert!(team.covers(&t("team", "Equal", "a", "NoSchedule")));
        assert!(team.covers(&t("team", "", "a", "NoSchedule")));
        assert!(!team.covers(&t("team", "Equal", "b", "NoSchedule")));
        assert!(!team.covers(&t("team", "Exists", "", "NoSchedule")), "every value");
        assert!(!team.covers(&t("team", "Equal", "a", "")), "every effect");
        assert!(!team.covers(&t("", "Exists", "", "")), "everything");
        let any_team = t("team", "Exists", "", "");
        assert!(any_team.covers(&t("team", "Equal", "b", "NoExecute")));
        assert!(any_team.covers(&t("team", "Exists", "", "")));
        assert!(!any_team.covers(&t("other", "Exists", "", "")));
        assert!(!any_team.covers(&t("", "Exists", "", "NoSchedule")));
        let everything = t("", "Exists", "", "");
        assert!(everything.covers(&t("", "Exists", "", "")));
        assert!(everything.covers(&t("x", "Equal", "y", "NoSchedule")));
    }
}
