//! A DaemonSet's history, as kube-controller-manager keeps it in ControllerRevisions
//! (`pkg/controller/daemon/update.go`), with no I/O: one revision per template the DaemonSet has
//! had, named `<set>-<hash>`, whose `data` is the strategic-merge patch that brings the
//! template back (what `kubectl rollout undo` applies), numbered from 1 up; the newest
//! template's is the current one, and old ones beyond `revisionHistoryLimit` go, oldest first,
//! unless a pod still has their template.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{json, Value};

use super::decide::HASH_LABEL;
use crate::deployment::util::template_hash;
use crate::owners;

/// The patch that restores `ds`'s template (`getPatch`):
/// `{"spec": {"template": {…, "$patch": "replace"}}}`, the template as Go writes it (with its
/// null `metadata.creationTimestamp`).
pub fn patch(ds: &DaemonSet) -> Value {
    let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let mut template = serde_json::to_value(&template).unwrap_or_else(|_| json!({}));
    if let Some(t) = template.as_object_mut() {
        let meta = t.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.entry("creationTimestamp").or_insert(Value::Null);
        }
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// Whether `revision` holds `ds`'s current template (`Match`).
pub fn matches(ds: &DaemonSet, revision: &ControllerRevision) -> bool {
    revision.data.as_ref().is_some_and(|d| d.0 == patch(ds))
}

/// The hash of `ds`'s template, with its collision count (`ComputeHash`).
pub fn hash(ds: &DaemonSet) -> String {
    let template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    template_hash(&template, ds.status.as_ref().and_then(|s| s.collision_count))
}

/// The revision of `ds`'s current template, numbered `number` (`snapshot`): named
/// `<set>-<hash>`, labelled as its pods are plus the hash, with the DaemonSet's annotations,
/// controlled by it.
pub fn snapshot(ds: &DaemonSet, hash: &str, number: i64) -> ControllerRevision {
    let name = ds.metadata.name.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(HASH_LABEL.to_owned(), hash.to_owned());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}")),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: ds.metadata.annotations.clone(),
            owner_references: owners::controller_ref(ds).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(patch(ds))),
        revision: number,
    }
}

/// The hash a revision carries (its label, which every revision the controller keeps has).
pub fn hash_of(revision: &ControllerRevision) -> Option<&str> {
    revision.metadata.labels.as_ref()?.get(HASH_LABEL).map(String::as_str)
}

/// The highest revision number of `revisions` (0 for none).
pub fn max_revision(revisions: &[ControllerRevision]) -> i64 {
    revisions.iter().map(|r| r.revision).max().unwrap_or(0)
}

/// Of several revisions of the current template, the one to keep: the highest numbered, the
/// last of equals (`dedupCurHistories`).
pub fn keeper(current: &[ControllerRevision]) -> Option<&ControllerRevision> {
    current.iter().fold(None, |kept: Option<&ControllerRevision>, r| match kept {
        Some(k) if r.revision < k.revision => Some(k),
        _ => Some(r),
    })
}

/// The names of the old revisions to delete so that at most `limit` are kept
/// (`cleanupHistory`): lowest numbers first, never one whose hash a pod still carries.
pub fn to_prune(old: &[ControllerRevision], limit: i32, live: &HashSet<String>) -> Vec<String> {
    let excess = old.len().saturating_sub(usize::try_from(limit).unwrap_or(0));
    let mut sorted: Vec<&ControllerRevision> = old.iter().collect();
    sorted.sort_by_key(|r| r.revision);
    sorted
        .into_iter()
        .filter(|r| !hash_of(r).is_some_and(|h| live.contains(h)))
        .take(excess)
        .filter_map(|r| r.metadata.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(image: &str) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "ns", "uid": "u1",
                         "annotations": {"a": "b"}},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "c", "image": image}]},
                },
            },
        }))
        .unwrap()
    }

    fn revision(name: &str, number: i64, hash: &str) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(HASH_LABEL.to_owned(), hash.to_owned())].into()),
                ..ObjectMeta::default()
            },
            data: None,
            revision: number,
        }
    }

    #[test]
    fn a_snapshot_holds_the_patch_that_restores_the_template() {
        let set = ds("agent:1");
        let h = hash(&set);
        let r = snapshot(&set, &h, 3);
        assert_eq!(r.metadata.name.as_deref(), Some(format!("agent-{h}").as_str()));
        assert_eq!(r.revision, 3);
        let labels = r.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.get("app").map(String::as_str), Some("agent"));
        assert_eq!(labels.get(HASH_LABEL), Some(&h));
        assert_eq!(r.metadata.annotations, set.metadata.annotations);
        let owner = &r.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.controller), ("DaemonSet", Some(true)));
        assert_eq!(
            r.data.as_ref().unwrap().0,
            json!({"spec": {"template": {
                "$patch": "replace",
                "metadata": {"creationTimestamp": null, "labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "agent:1"}]},
            }}})
        );
        assert!(matches(&set, &r));
        let other = ds("agent:2");
        assert!(!matches(&other, &r));
        assert_ne!(hash(&other), h);
        let mut collided = set.clone();
        collided.status = Some(k8s_openapi::api::apps::v1::DaemonSetStatus {
            collision_count: Some(1),
            ..Default::default()
        });
        assert_ne!(hash(&collided), h, "a collision count moves the hash");
    }

    #[test]
    fn the_highest_numbered_duplicate_is_kept() {
        let revisions = [revision("a", 2, "h"), revision("b", 5, "h"), revision("c", 5, "h")];
        assert_eq!(keeper(&revisions).and_then(|r| r.metadata.name.as_deref()), Some("c"));
        assert_eq!(max_revision(&revisions), 5);
        assert!(keeper(&[]).is_none());
        assert_eq!(max_revision(&[]), 0);
    }

    #[test]
    fn old_revisions_beyond_the_limit_go_oldest_first_unless_a_pod_has_their_template() {
        let old = [revision("r3", 3, "h3"), revision("r1", 1, "h1"), revision("r2", 2, "h2")];
        let none = HashSet::new();
        assert_eq!(to_prune(&old, 1, &none), ["r1", "r2"]);
        assert_eq!(to_prune(&old, 3, &none), Vec::<String>::new());
        let live: HashSet<String> = ["h1".to_owned()].into();
        assert_eq!(to_prune(&old, 1, &live), ["r2", "r3"]);
        assert_eq!(to_prune(&old, 0, &live), ["r2", "r3"], "r1 is kept while a pod has it");
    }
}
