//! Owner references: which object controls which (`metadata.ownerReferences`), as
//! kube-controller-manager's controllers set and read them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

/// The owner reference a controller puts on what it makes from `owner`: `controller: true`, and
/// `blockOwnerDeletion: true` so that a foreground deletion of the owner waits for it.
pub fn controller_ref<K>(owner: &K) -> Option<OwnerReference>
where
    K: Resource<DynamicType = ()>,
{
    let meta = owner.meta();
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The owner reference of `meta` that says `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.as_deref()?.iter().find(|r| r.controller == Some(true))
}

/// Whether `meta` is controlled by the object with `uid`.
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|r| r.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;

    #[test]
    fn a_controller_ref_names_its_owner_and_blocks_its_foreground_deletion() {
        let mut rs = ReplicaSet::default();
        assert!(controller_ref(&rs).is_none(), "an owner without name and uid");
        rs.metadata.name = Some("web-1".into());
        rs.metadata.uid = Some("u1".into());
        let r = controller_ref(&rs).unwrap();
        assert_eq!((r.api_version.as_str(), r.kind.as_str()), ("apps/v1", "ReplicaSet"));
        assert_eq!((r.name.as_str(), r.uid.as_str()), ("web-1", "u1"));
        assert_eq!((r.controller, r.block_owner_deletion), (Some(true), Some(true)));

        let mut pod = ObjectMeta::default();
        assert!(!is_controlled_by(&pod, "u1"));
        let mut other = r.clone();
        other.controller = None;
        other.uid = "u2".into();
        pod.owner_references = Some(vec![other, r]);
        assert_eq!(controller_of(&pod).map(|r| r.uid.as_str()), Some("u1"));
        assert!(is_controlled_by(&pod, "u1"));
        assert!(!is_controlled_by(&pod, "u2"));
    }
}
