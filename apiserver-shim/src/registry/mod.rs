//! The served kinds, one module each, laid out as kube-apiserver's `pkg/registry/<group>/<kind>/`.
//!
//! Each kind module holds everything about its kind: its [`ResourceType`] (what discovery says of
//! it) and its [`Strategy`] (defaults, create and update validation, table columns, name rule,
//! what a write does beyond storing the object). The generic API code ([`crate::api`], the
//! handlers, defaulting, validation and tables) calls the strategy and never asks which kind it
//! holds. Adding a kind is one module and one line in [`BUILT_IN`].
//!
//! Custom resources have their strategy in [`crate::crd::strategy`]; Carrel's own `Tenant` is
//! [`carrel::tenants`].

use serde_json::Value;

use carrel_store::Revision;
use parking_lot::MutexGuard;

use crate::api::{Api, DeleteParams};
use crate::object::{metadata_mut, spec_part};
use crate::object_names::NameRule;
use crate::rbac::{Policy, UserInfo};
use crate::resource::{Action, ResourceType, Subresource, VERBS};
use crate::selector::FieldLabels;
use crate::status::ApiResult;
use crate::table::{self, AGE, NAME};

pub use form::{Decode, Validate};

pub mod admissionregistration;
pub mod apiextensions;
pub mod apiregistration;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod carrel;
pub mod coordination;
pub mod core;
pub mod discovery;
pub mod events;
pub mod form;
pub mod networking;
pub mod policy;
pub mod rbac;
pub mod scheduling;
pub mod storage;

#[cfg(test)]
mod tests;

/// What the generic API code asks of a kind. Every method has the behaviour most kinds share as
/// its default; a kind's strategy overrides what differs.
pub trait Strategy: Decode + Send + Sync + std::fmt::Debug {
    /// The fields a field selector may name on the kind, and their values.
    fn field_labels(&self, rt: &ResourceType) -> FieldLabels {
        FieldLabels::Default { cluster_scoped: !rt.namespaced }
    }

    /// Whether objects of the kind are pods: what pod admission (security level, GPU quota) and
    /// the pod intake window apply to.
    fn is_pod(&self) -> bool {
        false
    }

    /// The hosts an object of the kind serves to the outside (an Ingress's), which a tenant's
    /// admission checks against the hosts other tenants hold; `None` for kinds that serve none.
    fn served_hosts(&self, _object: &Value) -> Option<std::collections::BTreeSet<String>> {
        None
    }

    /// The kind's subresources that are actions rather than views of the object (a pod's
    /// `binding`, `eviction` and `log`), each served by a handler of its own.
    fn actions(&self) -> &'static [Action] {
        &[]
    }

    /// Whether objects of the kind are namespaces: a request for one is in that namespace (as
    /// kube-apiserver's request info has it), and it serves `/finalize`.
    fn is_namespace(&self) -> bool {
        false
    }

    /// Refuse a write that would grant `user` more than they hold (RBAC objects, unless they may
    /// `escalate` or `bind`): `object` is what would be stored, `old` what was.
    fn check_escalation(
        &self,
        _policy: &Policy,
        _user: &UserInfo,
        _namespace: &str,
        _object: &Value,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// Whether the type's version is the one its objects are stored in. A kind served in more
    /// than one version is stored in one; each other version is a view of the same objects,
    /// converted by [`Strategy::convert_to_storage`] on every write and by
    /// [`Strategy::convert_from_storage`] on every read (as a custom resource's versions are by
    /// its definition).
    fn is_storage_version(&self) -> bool {
        true
    }

    /// An object of the type's version as its storage version holds it: converted, with the
    /// storage version's defaults. Nothing to do for the storage version itself.
    fn convert_to_storage(&self, _object: &mut Value) {}

    /// A stored object as the type's version shows it. Nothing to do for the storage version
    /// itself.
    fn convert_from_storage(&self, _object: &mut Value) {}

    /// The rule the kind's object names follow.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// The defaults kube-apiserver applies whenever it decodes an object of the kind (on create
    /// and on every update), as its `SetDefaults_*` functions do; the status is left alone.
    fn defaults(&self, _object: &mut Value) {}

    /// Whether [`Strategy::defaults`] fills anything in: an update then re-defaults the stored
    /// object before comparing it with the new one.
    fn has_defaults(&self) -> bool {
        false
    }

    /// What only a create sets, after the defaults (an initial status, server-chosen fields).
    fn create_defaults(&self, _object: &mut Value) {}

    /// Whether a create keeps the status it was sent, for a kind with a status subresource.
    /// kube-apiserver's strategies clear it (`PrepareForCreate`) but for Nodes, which kubelets
    /// register with their status.
    fn keeps_status_on_create(&self) -> bool {
        false
    }

    /// On update, before the comparison with the stored object: keep what the server allocated
    /// that the client left out.
    fn prepare_update(&self, _old: &Value, _new: &mut Value) {}

    /// A write through `/status`: what of `sent` it keeps on `old` (kube-apiserver's
    /// `PrepareForUpdate` of the status strategy). Only the status changes, and `managedFields` as
    /// sent (or as server-side apply set them).
    fn prepare_status_update(&self, old: &Value, sent: Value) -> Value {
        let mut merged = old.clone();
        merged["status"] = sent.get("status").cloned().unwrap_or(Value::Null);
        if merged["status"].is_null() {
            if let Some(root) = merged.as_object_mut() {
                root.remove("status");
            }
        }
        match sent.pointer("/metadata/managedFields") {
            Some(managed) => {
                metadata_mut(&mut merged).insert("managedFields".into(), managed.clone())
            }
            None => metadata_mut(&mut merged).remove("managedFields"),
        };
        merged
    }

    /// A write of the object itself (kube-apiserver's `PrepareForUpdate`): with a `/status`
    /// subresource, the status changes only through it, so the stored one is kept.
    fn prepare_main_update(&self, rt: &ResourceType, old: &Value, new: &mut Value) {
        if !rt.has(Subresource::Status) {
            return;
        }
        let Some(root) = new.as_object_mut() else { return };
        match old.get("status") {
            Some(status) => root.insert("status".into(), status.clone()),
            None => root.remove("status"),
        };
    }

    /// The pod spec an object of the kind carries (a pod's own, or its template's).
    fn pod_spec<'a>(&self, _object: &'a Value) -> Option<&'a Value> {
        None
    }

    /// Whether an update moves `metadata.generation` (for kinds that keep one): a change of the
    /// spec.
    fn bumps_generation(&self, _rt: &ResourceType, old: &Value, new: &Value) -> bool {
        spec_part(old) != spec_part(new)
    }

    /// Whether objects of `rt` keep a `metadata.generation`.
    fn has_generation(&self, rt: &ResourceType) -> bool {
        rt.has(Subresource::Status)
    }

    /// The warning every request for the kind is answered with, where its version is deprecated
    /// (kube-apiserver's `Warning: 299` header).
    fn deprecation_warning(&self) -> Option<&'static str> {
        None
    }

    /// The definitions of the columns `kubectl get` prints for objects of `rt`.
    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&[NAME, AGE])
    }

    /// One table row: the cells of [`Strategy::columns`] for an object of `rt`.
    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        vec![table::name_cell(object), table::age_cell(object)]
    }

    /// What a create changes or refuses from the other objects of the cluster, before the new
    /// object is validated (a pod's defaults and bounds from its namespace's LimitRanges).
    fn mutate_create(&self, _api: &Api, _object: &mut Value) -> ApiResult<()> {
        Ok(())
    }

    /// The checks of a write that need the API (a definition's names against the others').
    fn admit(&self, _api: &Api, _old: Option<&Value>, _object: &Value) -> ApiResult<()> {
        Ok(())
    }

    /// A lock held from before [`Strategy::before_store`] until the write is stored, for kinds
    /// whose objects are checked against each other.
    fn write_lock<'a>(&self, _api: &'a Api) -> Option<MutexGuard<'a, ()>> {
        None
    }

    /// Last changes before an object is stored, under [`Strategy::write_lock`]: what the server
    /// sets from the other objects stored (a definition's status). `status_only` for writes
    /// through `/status`.
    fn before_store(
        &self,
        _api: &Api,
        _name: &str,
        _old: Option<&Value>,
        _new: &mut Value,
        _status_only: bool,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// For a kind whose dependents a delete orphans unless it says otherwise (batch/v1 Jobs, as
    /// kube-apiserver keeps them): the warning a delete that leaves the propagation unset gets.
    /// `None`: dependents are deleted in the background by default.
    fn orphans_by_default(&self) -> Option<&'static str> {
        None
    }

    /// Refuse the deletion of an object (a system namespace).
    fn check_delete(&self, _rt: &ResourceType, _name: &str) -> ApiResult<()> {
        Ok(())
    }

    /// Whether a delete of an object of the kind is made in steps even without finalizers: it
    /// is marked first, and goes once what it holds has gone (a namespace's content).
    fn deleted_in_steps(&self) -> bool {
        false
    }

    /// What marking an object for deletion sets beyond `metadata.deletionTimestamp`.
    fn mark_deleting(&self, _object: &mut Value) {}

    /// After an object of the kind was marked for deletion.
    fn after_marked(&self, _api: &Api, _name: &str) -> ApiResult<()> {
        Ok(())
    }

    /// A delete (not a dry run) that the kind makes its own way, in place of the generic one.
    fn delete(
        &self,
        _api: &Api,
        _key: &str,
        _name: &str,
        _old: &Value,
        _params: &DeleteParams,
    ) -> Option<ApiResult<Value>> {
        None
    }

    /// Completing the deletion of an object whose last finalizer an update removed: it is
    /// removed from the store, answered with `last` at the deletion's revision.
    fn complete_deletion(
        &self,
        api: &Api,
        rt: &ResourceType,
        key: &str,
        name: &str,
        revision: Revision,
        last: Value,
    ) -> ApiResult<Value> {
        api.remove(rt, key, name, revision, last)
    }

    /// After a create has been stored (a namespace gets its `default` ServiceAccount).
    fn after_create(&self, _api: &Api, _name: &str) -> ApiResult<()> {
        Ok(())
    }

    /// After any write of an object of `rt` has been stored; `aggregate` is false for the
    /// server's own writes.
    fn after_write(&self, _api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        Ok(())
    }
}

/// The strategy of kinds with nothing of their own (the access reviews, which are never stored):
/// every default, no typed form of their own.
#[derive(Debug)]
pub struct Plain;

impl Validate for Plain {
    type Object = form::Untyped;
}

impl Strategy for Plain {}

/// No short names or categories.
pub const NONE: &[&str] = &[];
/// The `all` category.
pub const ALL: &[&str] = &["all"];
/// Only `/status`.
pub const STATUS: &[Subresource] = &[Subresource::Status];
/// `/status` and `/scale`.
pub const STATUS_SCALE: &[Subresource] = &[Subresource::Status, Subresource::Scale];

/// A built-in resource type, served with every verb of [`VERBS`].
#[allow(clippy::too_many_arguments)]
pub const fn served(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Subresource],
    strategy: &'static dyn Strategy,
) -> ResourceType {
    ResourceType {
        group,
        version,
        kind,
        plural,
        singular,
        namespaced,
        short_names,
        categories,
        subresources,
        verbs: VERBS,
        custom: None,
        strategy,
    }
}

/// Every built-in resource type, in the order discovery lists them: one line per kind, and one
/// more per other version a kind is served in, after its storage version (a group's first version
/// is its preferred one).
pub static BUILT_IN: &[ResourceType] = &[
    core::namespaces::TYPE,
    core::pods::TYPE,
    core::services::TYPE,
    core::endpoints::TYPE,
    core::configmaps::TYPE,
    core::secrets::TYPE,
    core::serviceaccounts::TYPE,
    core::events::TYPE,
    core::nodes::TYPE,
    core::persistentvolumeclaims::TYPE,
    core::persistentvolumes::TYPE,
    core::resourcequotas::TYPE,
    core::limitranges::TYPE,
    core::replicationcontrollers::TYPE,
    apps::deployments::TYPE,
    apps::replicasets::TYPE,
    apps::statefulsets::TYPE,
    apps::daemonsets::TYPE,
    apps::controllerrevisions::TYPE,
    autoscaling::horizontalpodautoscalers::TYPE,
    autoscaling::horizontalpodautoscalers::V1,
    batch::jobs::TYPE,
    batch::cronjobs::TYPE,
    coordination::leases::TYPE,
    discovery::endpointslices::TYPE,
    events::events::TYPE,
    rbac::roles::TYPE,
    rbac::rolebindings::TYPE,
    rbac::clusterroles::TYPE,
    rbac::clusterrolebindings::TYPE,
    networking::networkpolicies::TYPE,
    networking::ingresses::TYPE,
    networking::ingressclasses::TYPE,
    policy::poddisruptionbudgets::TYPE,
    scheduling::priorityclasses::TYPE,
    storage::storageclasses::TYPE,
    admissionregistration::validatingadmissionpolicies::TYPE,
    admissionregistration::validatingadmissionpolicybindings::TYPE,
    admissionregistration::validatingwebhookconfigurations::TYPE,
    admissionregistration::mutatingwebhookconfigurations::TYPE,
    apiregistration::apiservices::TYPE,
    apiextensions::customresourcedefinitions::TYPE,
];
