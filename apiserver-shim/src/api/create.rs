//! CREATE, and the checks and defaults of every write (`admit`).

use serde_json::Value;

use carrel_store::Store;

use crate::crd;
use crate::defaults;
use crate::managed::{self, Owner};
use crate::object::{self, is_deleting, meta_str, metadata_mut, now_rfc3339};
use crate::object_names as names;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

use super::{check_type, decode, encode_stored, internal, key_for, written, Api, Target, Write};

impl Api {
    pub(crate) fn check_namespace(&self, target: &Target<'_>, object: &Value) -> ApiResult<String> {
        let rt = target.rt;
        let url_ns = target.namespace.clone().unwrap_or_default();
        let body_ns = meta_str(object, "namespace").unwrap_or_default();
        if !rt.namespaced {
            return Ok(String::new());
        }
        if !body_ns.is_empty() && body_ns != url_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let namespaces = self.rt("", "namespaces");
        let ns = self
            .store
            .get(&key_for(namespaces, None, &url_ns))
            .map_err(internal)?
            .ok_or_else(|| ApiError::not_found("", "namespaces", &url_ns))?;
        if is_deleting(&decode(&ns)?) {
            return Err(ApiError::forbidden(
                rt.group,
                rt.plural,
                meta_str(object, "name").unwrap_or_default(),
                &format!(
                    "unable to create new content in namespace {url_ns} because it is being terminated"
                ),
            ));
        }
        Ok(url_ns)
    }

    /// CREATE.
    pub fn create(
        &self,
        target: &Target<'_>,
        mut object: Value,
        write: &Write,
    ) -> ApiResult<Value> {
        let rt = target.rt;
        check_type(rt, &object)?;
        if rt.custom.as_ref().is_some_and(|c| c.terminating) {
            return Err(ApiError::method_not_allowed(format!(
                "create not allowed while custom resource definition is terminating: {}.{}",
                rt.plural, rt.group
            )));
        }
        let namespace = self.check_namespace(target, &object)?;
        let rule = rt.strategy.name_rule();
        let name = match meta_str(&object, "name").filter(|n| !n.is_empty()) {
            Some(name) => name.to_owned(),
            None => match meta_str(&object, "generateName").filter(|n| !n.is_empty()) {
                Some(prefix) => names::generate(prefix, rule),
                None => {
                    return Err(ApiError::invalid(
                        rt.group,
                        rt.kind,
                        "",
                        vec![Cause::new(
                            "FieldValueRequired",
                            "metadata.name",
                            "Required value: name or generateName is required",
                        )],
                    ))
                }
            },
        };
        let problems = rule.check(&name);
        if !problems.is_empty() {
            let causes = problems
                .into_iter()
                .map(|p| {
                    Cause::new(
                        "FieldValueInvalid",
                        "metadata.name",
                        format!("Invalid value: \"{name}\": {p}"),
                    )
                })
                .collect();
            return Err(ApiError::invalid(rt.group, rt.kind, &name, causes));
        }

        {
            let root = object.as_object_mut().expect("checked by check_type");
            root.insert("apiVersion".into(), rt.group_version().into());
            root.insert("kind".into(), rt.kind.into());
        }
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), name.clone().into());
        if rt.namespaced {
            meta.insert("namespace".into(), namespace.clone().into());
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        meta.insert("creationTimestamp".into(), now_rfc3339().into());
        for field in
            ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"]
        {
            meta.remove(field);
        }
        if rt.strategy.has_generation(rt) {
            meta.insert("generation".into(), 1.into());
        } else {
            meta.remove("generation");
        }
        object::normalize_metadata(&mut object);
        self.admit(rt, None, &mut object)?;
        let _lock = rt.strategy.write_lock(self);
        rt.strategy.before_store(self, &name, None, &mut object, false)?;
        managed::record_update(rt, None, &mut object, &write.owner);

        let key =
            key_for(rt, Some(&namespace).filter(|_| rt.namespaced).map(|s| s.as_str()), &name);
        let admission = self.admission.get();
        let _serial = admission.filter(|a| a.serialized(rt)).map(|_| self.admission_lock.lock());
        if let Some(admission) = admission {
            admission.admit_create(self, rt, &object)?;
        }
        if write.dry_run {
            if self.store.get(&key).map_err(internal)?.is_some() {
                return Err(ApiError::already_exists(rt.group, rt.plural, &name));
            }
            // As kube-apiserver's quota admission, a dry run is refused what the create would be.
            let used = self.store.usage();
            let after = used.with_created(&key, &encode_stored(rt, &object)?);
            self.store
                .quota()
                .check(used, after, true)
                .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, &name))?;
            return Ok(object);
        }
        let stored = self
            .store
            .create(&key, encode_stored(rt, &object)?)
            .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, &name))?;
        self.wrote(rt, !matches!(write.owner, Owner::Server))?;
        rt.strategy.after_create(self, &name)?;
        Ok(written(object, &stored))
    }

    /// The checks and defaults of a write: a custom resource's schema, or a built-in kind's
    /// typed decoding, defaults and validation (and a definition's own rules).
    pub(crate) fn admit(
        &self,
        rt: &ResourceType,
        old: Option<&Value>,
        object: &mut Value,
    ) -> ApiResult<()> {
        if let Some(custom) = &rt.custom {
            return crd::admit(rt, custom, old, object);
        }
        match old {
            None => {
                defaults::on_create(rt, object);
                defaults::validate(rt, object, None)?;
            }
            Some(old) => {
                let old = defaults::on_update(rt, old, object);
                defaults::validate(rt, object, Some(&old))?;
            }
        }
        rt.strategy.admit(self, old, object)
    }
}
