//! A StatefulSet's revisions (kube-controller-manager's `pkg/controller/history` and the
//! revision half of `stateful_set_utils.go`): each template the set has had is kept in a
//! ControllerRevision named `<set>-<hash>`, whose `data` is the strategic merge patch that puts
//! the template back (`{"spec":{"template":{…,"$patch":"replace"}}}`), the patch
//! `kubectl rollout undo` sends. Pure code.
//!
//! Where it differs: kube-controller-manager hashes the bytes Go's encoder writes for the patch;
//! here the patch's JSON with sorted keys is hashed (the same FNV-1 hash, collision count and
//! encoding), so a name is stable for one template but not byte-equal to Kubernetes' name for
//! it. Revisions are equal when their data is equal as Kubernetes' semantic equality sees it
//! (Kubernetes compares the bytes).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use serde_json::{json, Map, Value};

use crate::deployment::util::go_semantic;
use crate::owners;

/// The label of a ControllerRevision holding the hash of its data.
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// The longest prefix of a revision's name (`ControllerRevisionName`).
const MAX_PREFIX: usize = 223;

/// The patch that puts `template` back into a StatefulSet (`getPatch`).
pub fn patch(template: &PodTemplateSpec) -> Value {
    let mut template = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    if let Some(map) = template.as_object_mut() {
        map.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// `value` as JSON with every object's keys sorted, as Go's encoder writes a map.
fn sorted_bytes(value: &Value) -> Vec<u8> {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let keys: BTreeMap<&String, &Value> = map.iter().collect();
                let mut out = Map::new();
                for (k, v) in keys {
                    out.insert(k.clone(), sorted(v));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_vec(&sorted(value)).unwrap_or_default()
}

/// `rand.SafeEncodeString`: each byte of `s` as a letter or digit that spells no word.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes().map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()])).collect()
}

/// The hash of a revision's `data` (`HashControllerRevision`): FNV-1 (32 bits) of the data,
/// then of the collision count in decimal, the sum's decimal safely encoded.
pub fn hash(data: &Value, collision_count: i32) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    let bytes = sorted_bytes(data);
    for b in bytes.iter().chain(collision_count.to_string().as_bytes()) {
        hash = hash.wrapping_mul(0x0100_0193);
        hash ^= u32::from(*b);
    }
    safe_encode(&hash.to_string())
}

/// The name of a revision of `set` with `hash` (`ControllerRevisionName`).
pub fn name(set: &str, hash: &str) -> String {
    let mut prefix = set;
    if prefix.len() > MAX_PREFIX {
        let mut end = MAX_PREFIX;
        while !prefix.is_char_boundary(end) {
            end -= 1;
        }
        prefix = &prefix[..end];
    }
    format!("{prefix}-{hash}")
}

/// The revision `number` of `set`'s template as it is now (`newRevision`): labelled with the
/// template's labels and the hash, annotated with the set's annotations, controlled by the set.
pub fn new(set: &StatefulSet, number: i64, collision_count: i32) -> ControllerRevision {
    let template = set.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let data = patch(&template);
    let hash = hash(&data, collision_count);
    let mut labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.clone());
    let annotations = set.metadata.annotations.clone().filter(|a| !a.is_empty());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name(&set.name_any(), &hash)),
            namespace: set.namespace(),
            labels: Some(labels),
            annotations,
            owner_references: owners::controller_ref(set).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    }
}

fn normal(revision: &ControllerRevision) -> Value {
    go_semantic(revision.data.as_ref().map(|d| d.0.clone()).unwrap_or(Value::Null))
}

/// Whether two revisions hold the same state (`EqualRevision`).
pub fn equal(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    normal(a) == normal(b)
}

/// The revisions of `revisions` equal to `wanted`, in order (`FindEqualRevisions`).
pub fn find_equal<'a>(
    revisions: &'a [ControllerRevision],
    wanted: &ControllerRevision,
) -> Vec<&'a ControllerRevision> {
    revisions.iter().filter(|r| equal(r, wanted)).collect()
}

/// The number after the highest of `revisions`, sorted (`nextRevision`).
pub fn next_number(revisions: &[ControllerRevision]) -> i64 {
    revisions.last().map_or(1, |r| r.revision.saturating_add(1))
}

/// Sort revisions by number, keeping the order of equal numbers (`SortControllerRevisions`).
pub fn sort(revisions: &mut [ControllerRevision]) {
    revisions.sort_by_key(|r| r.revision);
}

/// The template a revision puts back (`ApplyRevision`, for the patches StatefulSets write:
/// they replace the template whole).
pub fn template(revision: &ControllerRevision) -> Result<PodTemplateSpec, String> {
    let data = revision.data.as_ref().map(|d| &d.0);
    let Some(mut template) = data.and_then(|d| d.pointer("/spec/template")).cloned() else {
        return Err(format!("revision {} holds no template", revision.name_any()));
    };
    if let Some(map) = template.as_object_mut() {
        map.remove("$patch");
    }
    serde_json::from_value(template)
        .map_err(|e| format!("revision {} holds no valid template: {e}", revision.name_any()))
}

/// The revisions to delete to keep `limit` of those no pod and neither status revision uses
/// (`truncateHistory`): the oldest first. `revisions` are sorted; `live` are names in use.
pub fn to_truncate<'a>(
    revisions: &'a [ControllerRevision],
    live: &[&str],
    limit: i32,
) -> Vec<&'a ControllerRevision> {
    let history: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| !live.contains(&r.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let keep = usize::try_from(limit).unwrap_or(0);
    let surplus = history.len().saturating_sub(keep);
    history.into_iter().take(surplus).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(image: &str) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1",
                         "annotations": {"team": "a"}},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "serviceName": "web",
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": image}]}},
            },
        }))
        .unwrap()
    }

    #[test]
    fn fnv1_and_the_safe_encoding_are_kubernetes() {
        // FNV-1 of "" is its offset basis, 2166136261; of "a", 84696446 (not FNV-1a's).
        let mut h: u32 = 0x811c_9dc5;
        for b in b"a" {
            h = h.wrapping_mul(0x0100_0193);
            h ^= u32::from(*b);
        }
        assert_eq!(h, 84_696_446);
        assert_eq!(safe_encode("0123"), "4567");
        assert_eq!(safe_encode("2166136261"), "65bb57b6b5");
    }

    #[test]
    fn a_revision_is_the_patch_that_puts_the_template_back() {
        let s = set("nginx:1");
        let r = new(&s, 3, 0);
        let data = &r.data.as_ref().unwrap().0;
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(data["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1");
        assert_eq!(data.as_object().unwrap().len(), 1, "only the template: {data}");
        assert_eq!(r.revision, 3);
        let hash = r.metadata.labels.as_ref().unwrap()[HASH_LABEL].clone();
        assert_eq!(r.metadata.name.as_deref(), Some(format!("web-{hash}").as_str()));
        assert_eq!(r.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(r.metadata.annotations.as_ref().unwrap()["team"], "a");
        let owner = owners::controller_of(&r.metadata).unwrap();
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("StatefulSet", "u1"));
        assert_eq!(template(&r).unwrap(), s.spec.as_ref().unwrap().template);

        // The name depends on the template and the collision count, not on the number.
        assert_eq!(new(&s, 9, 0).metadata.name, r.metadata.name);
        assert_ne!(new(&s, 3, 1).metadata.name, r.metadata.name);
        assert_ne!(new(&set("nginx:2"), 3, 0).metadata.name, r.metadata.name);
        assert!(equal(&new(&s, 9, 1), &r));
        assert!(!equal(&new(&set("nginx:2"), 3, 0), &r));
    }

    #[test]
    fn keys_are_hashed_sorted_so_the_order_they_arrive_in_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": 2, "x": 3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"x": 3, "y": 2}, "b": 1}"#).unwrap();
        assert_eq!(hash(&a, 0), hash(&b, 0));
        assert_eq!(sorted_bytes(&a), br#"{"a":{"x":3,"y":2},"b":1}"#);
    }

    #[test]
    fn long_names_are_cut_to_223_bytes_before_the_hash() {
        let long = "a".repeat(300);
        assert_eq!(name(&long, "h").len(), 225);
    }

    #[test]
    fn history_keeps_the_live_revisions_and_the_newest_others() {
        let revision = |name: &str, n: i64| ControllerRevision {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            data: None,
            revision: n,
        };
        let mut all =
            vec![revision("r3", 3), revision("r1", 1), revision("r2", 2), revision("r4", 4)];
        sort(&mut all);
        assert_eq!(next_number(&all), 5);
        assert_eq!(next_number(&[]), 1);
        let gone: Vec<&str> = to_truncate(&all, &["r4", "r1"], 1)
            .iter()
            .map(|r| r.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(gone, ["r2"]);
        assert!(to_truncate(&all, &["r4"], 10).is_empty());
    }
}
