//! Label selectors as the workload controllers match them (`metav1.LabelSelectorAsSelector` and
//! `labels.SelectorFromSet`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector. An empty one matches every set of labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector of a `LabelSelector`; an unknown operator is an error, as in Kubernetes.
    pub fn from_label_selector(selector: &LabelSelector) -> Result<Selector, String> {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
            .collect();
        for e in selector.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            requirements.push(match e.operator.as_str() {
                "In" => Requirement::In(e.key.clone(), values),
                "NotIn" => Requirement::NotIn(e.key.clone(), values),
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            });
        }
        Ok(Selector { requirements })
    }

    /// The selector matching exactly the labels of `set` (a ReplicationController's selector).
    pub fn from_map(set: &BTreeMap<String, String>) -> Selector {
        Selector {
            requirements: set
                .iter()
                .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
                .collect(),
        }
    }

    /// Whether the selector selects nothing in particular (and so everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.requirements.iter().all(|r| match r {
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn match_labels_and_expressions_must_all_hold() {
        let s: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
            ],
        }))
        .unwrap();
        let s = Selector::from_label_selector(&s).unwrap();
        assert!(s.matches(Some(&labels(&[("app", "web"), ("tier", "a")]))));
        assert!(s.matches(Some(&labels(&[("app", "web"), ("tier", "b"), ("env", "dev")]))));
        assert!(!s.matches(Some(&labels(&[("app", "web"), ("tier", "c")]))));
        assert!(!s.matches(Some(&labels(&[("app", "web"), ("tier", "a"), ("canary", "")]))));
        assert!(!s.matches(Some(&labels(&[("app", "web"), ("tier", "a"), ("env", "prod")]))));
        assert!(!s.matches(None));
        assert!(Selector::default().matches(None));
        let bad: LabelSelector =
            serde_json::from_value(json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}))
                .unwrap();
        assert!(Selector::from_label_selector(&bad).is_err());
    }

    #[test]
    fn a_map_selector_needs_every_pair() {
        let s = Selector::from_map(&labels(&[("app", "web"), ("v", "1")]));
        assert!(s.matches(Some(&labels(&[("app", "web"), ("v", "1"), ("x", "y")]))));
        assert!(!s.matches(Some(&labels(&[("app", "web")]))));
    }
}
