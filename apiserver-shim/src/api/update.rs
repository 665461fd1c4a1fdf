//! UPDATE of an object, of its status, or of both at once.

use serde_json::Value;

use carrel_store::Store;

use crate::admission::policy::{self, Attributes, Operation};
use crate::admission::webhook;
use crate::managed::{self, Owner};
use crate::object::{self, finalizers, is_deleting, meta_str, metadata_mut};
use crate::resource::Subresource;
use crate::status::{ApiError, ApiResult};

use super::{check_type, parse_resource_version, written, Api, Part, Target, Write};

impl Api {
    /// UPDATE (PUT), of the object or of its status.
    pub fn update(
        &self,
        target: &Target<'_>,
        name: &str,
        object: Value,
        subresource: Option<Subresource>,
        write: &Write,
    ) -> ApiResult<Value> {
        let part = match subresource {
            Some(Subresource::Status) => Part::Status,
            Some(Subresource::EphemeralContainers) => Part::EphemeralContainers,
            _ => Part::Spec,
        };
        self.update_part(target, name, object, part, write)
    }

    /// UPDATE of the object and its status in one write, for the server's own writes that
    /// Kubernetes makes atomically (a binding sets the node and the PodScheduled condition).
    pub fn update_with_status(
        &self,
        target: &Target<'_>,
        name: &str,
        object: Value,
        write: &Write,
    ) -> ApiResult<Value> {
        self.update_part(target, name, object, Part::Whole, write)
    }

    pub(super) fn update_part(
        &self,
        target: &Target<'_>,
        name: &str,
        mut object: Value,
        part: Part,
        write: &Write,
    ) -> ApiResult<Value> {
        let dry_run = write.dry_run;
        let rt = target.rt;
        check_type(rt, &object)?;
        let body_name = meta_str(&object, "name").unwrap_or_default();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if rt.namespaced {
            let body_ns = meta_str(&object, "namespace").unwrap_or_default();
            if !body_ns.is_empty() && Some(body_ns) != target.namespace.as_deref() {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let expected = match meta_str(&object, "resourceVersion").filter(|rv| !rv.is_empty()) {
            Some(rv) => Some(parse_resource_version(rv)?),
            None => None,
        };
        let (key, current) = self.stored(target, name)?;
        if let Some(expected) = expected {
            if expected != current.mod_revision {
                return Err(ApiError::from_store(
                    carrel_store::Error::Conflict { key, expected, actual: current.mod_revision },
                    rt.group,
                    rt.plural,
                    name,
                ));
            }
        }
        let old = self.shown(rt, &current)?;
        let mut new = match part {
            Part::Whole => object,
            Part::Status => rt.strategy.prepare_status_update(&old, object),
            Part::EphemeralContainers => ephemeral_containers_view(&old, object),
            Part::Spec => {
                rt.strategy.prepare_main_update(rt, &old, &mut object);
                object
            }
        };
        {
            let root = new.as_object_mut().expect("checked");
            root.insert("apiVersion".into(), rt.group_version().into());
            root.insert("kind".into(), rt.kind.into());
        }
        preserve_system_metadata(&old, &mut new);
        object::normalize_metadata(&mut new);
        let subresource = match (part, &write.owner) {
            (Part::Status, _) => Some("status"),
            (Part::EphemeralContainers, _) => Some("ephemeralcontainers"),
            (_, Owner::Update { subresource, .. }) => *subresource,
            _ => None,
        };
        let namespace = match (rt.strategy.is_namespace(), target.namespace.as_deref()) {
            (true, _) => name,
            (false, ns) => ns.unwrap_or_default(),
        };
        let attributes = Attributes::new(
            rt,
            subresource,
            Operation::Update,
            name,
            namespace,
            None,
            Some(&old),
            dry_run,
            &write.requester,
        );
        let mutating = |object: &mut Value, defaults: &dyn Fn(&mut Value)| {
            webhook::mutate(self, &attributes, object, defaults)
        };
        match write.owner {
            // The server's own records are not the policies' or the webhooks' to refuse (see
            // `Api::create`).
            Owner::Server => crate::validation::as_server(|| self.admit(rt, Some(&old), &mut new)),
            _ => self.admit_mutated(rt, Some(&old), &mut new, Some(&mutating)),
        }?;
        // What a mutating webhook may not change, as what the request names.
        preserve_system_metadata(&old, &mut new);
        if rt.has(Subresource::EphemeralContainers) {
            let list = |pod: &Value| -> Vec<k8s_openapi::api::core::v1::EphemeralContainer> {
                let found = pod.pointer("/spec/ephemeralContainers").cloned();
                // Both are valid pods by now: their lists decode.
                found.and_then(|l| serde_json::from_value(l).ok()).unwrap_or_default()
            };
            let mut e = crate::validation::Errors::default();
            let through_subresource = part == Part::EphemeralContainers;
            crate::validation::ephemeral_containers_update(
                &list(&old),
                &list(&new),
                through_subresource,
                &mut e,
            );
            if !e.0.is_empty() {
                return Err(ApiError::invalid(rt.group, rt.kind, name, e.0));
            }
        }
        if !matches!(write.owner, Owner::Server) {
            let a = Attributes { object: Some(&new), ..attributes };
            policy::admit(self, &a)?;
            webhook::validate(self, &a)?;
        }
        if let Some(admission) = self.admission.get() {
            admission.admit_update(self, rt, &old, &new)?;
        }
        if rt.strategy.has_generation(rt) {
            let old_generation =
                old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
            let generation = if rt.strategy.bumps_generation(rt, &old, &new) {
                old_generation + 1
            } else {
                old_generation
            };
            metadata_mut(&mut new).insert("generation".into(), generation.into());
        }
        let _lock = rt.strategy.write_lock(self);
        rt.strategy.before_store(self, name, Some(&old), &mut new, part == Part::Status)?;
        managed::record_update(rt, Some(&old), &mut new, &write.owner);

        // Removing the last finalizer of an object being deleted completes its deletion; a
        // definition's, once its objects are gone too.
        if is_deleting(&new) && finalizers(&new).is_empty() {
            if dry_run {
                return Ok(new);
            }
            return rt.strategy.complete_deletion(self, rt, &key, name, current.mod_revision, new);
        }
        let mut unchanged = old.clone();
        metadata_mut(&mut unchanged).remove("resourceVersion");
        if new == unchanged {
            // Kubernetes writes nothing for a no-op update and answers with the stored object.
            return Ok(old);
        }
        if dry_run {
            // What the update would store, at the revision it would have replaced.
            metadata_mut(&mut new)
                .insert("resourceVersion".into(), current.mod_revision.to_string().into());
            return Ok(new);
        }
        let stored = self
            .store
            .update(&key, self.encode_stored(rt, &new)?, Some(current.mod_revision))
            .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
        self.wrote(rt, !matches!(write.owner, Owner::Server))?;
        Ok(written(new, &stored))
    }
}

/// An update through `/ephemeralcontainers`: the stored pod with the ephemeral containers sent,
/// and the managed fields sent (as kube-apiserver's `dropNonEphemeralContainerUpdates`).
fn ephemeral_containers_view(old: &Value, sent: Value) -> Value {
    let mut merged = old.clone();
    let containers = sent.pointer("/spec/ephemeralContainers").filter(|v| !v.is_null()).cloned();
    if let Some(spec) = merged.get_mut("spec").and_then(Value::as_object_mut) {
        match containers {
            Some(list) => spec.insert("ephemeralContainers".into(), list),
            None => spec.remove("ephemeralContainers"),
        };
    }
    match sent.pointer("/metadata/managedFields") {
        Some(managed) => metadata_mut(&mut merged).insert("managedFields".into(), managed.clone()),
        None => metadata_mut(&mut merged).remove("managedFields"),
    };
    merged
}

/// Keep what clients may not change: uid, creation time, deletion marks, generation.
fn preserve_system_metadata(old: &Value, new: &mut Value) {
    let old_meta = old.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    let meta = metadata_mut(new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    meta.remove("resourceVersion");
    meta.remove("selfLink");
}
