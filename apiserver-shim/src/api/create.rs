//! CREATE, and the checks and defaults of every write (`admit`).

use std::collections::HashSet;

use serde_json::Value;

use carrel_store::Store;

use crate::admission::policy::{self, Attributes, Operation};
use crate::admission::resource_quota;
use crate::admission::webhook;
use crate::crd;
use crate::defaults;
use crate::managed::{self, Owner};
use crate::object::{self, is_deleting, meta_str, metadata_mut, now_rfc3339};
use crate::object_names as names;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

use super::{check_type, decode, internal, key_for, written, Api, Target, Write};

/// The cluster's mutating webhooks as a write runs them: given the object and the defaults to
/// apply again after each change.
pub(crate) type MutatingWebhooks<'a> = &'a dyn Fn(&mut Value, &dyn Fn(&mut Value)) -> ApiResult<()>;

/// A new object prepared by [`Api::create_all_as_server`], not yet stored.
struct NewObject<'a> {
    rt: &'a ResourceType,
    name: String,
    key: String,
    object: Value,
}

/// A create's checks of the request before anything is read: the body is an object of the
/// type, and the type is not going away (a terminating definition's).
fn check_creatable(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    check_type(rt, object)?;
    if rt.custom.as_ref().is_some_and(|c| c.terminating) {
        return Err(ApiError::method_not_allowed(format!(
            "create not allowed while custom resource definition is terminating: {}.{}",
            rt.plural, rt.group
        )));
    }
    Ok(())
}

/// The namespace a create of a namespaced type is for: the URL's, which the body may repeat but
/// not contradict; empty for a cluster-scoped type.
fn requested_namespace(target: &Target<'_>, object: &Value) -> ApiResult<String> {
    if !target.rt.namespaced {
        return Ok(String::new());
    }
    let url_ns = target.namespace.clone().unwrap_or_default();
    let body_ns = meta_str(object, "namespace").unwrap_or_default();
    if !body_ns.is_empty() && body_ns != url_ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(url_ns)
}

impl Api {
    pub(crate) fn check_namespace(&self, target: &Target<'_>, object: &Value) -> ApiResult<String> {
        let namespace = requested_namespace(target, object)?;
        if !target.rt.namespaced {
            return Ok(namespace);
        }
        let namespaces = self.rt("", "namespaces");
        let ns = self
            .store
            .get(&key_for(namespaces, None, &namespace))
            .map_err(internal)?
            .ok_or_else(|| ApiError::not_found("", "namespaces", &namespace))?;
        if is_deleting(&decode(&ns)?) {
            let rt = target.rt;
            return Err(ApiError::forbidden(
                rt.group,
                rt.plural,
                meta_str(object, "name").unwrap_or_default(),
                &format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            ));
        }
        Ok(namespace)
    }

    /// CREATE.
    pub fn create(&self, target: &Target<'_>, object: Value, write: &Write) -> ApiResult<Value> {
        let rt = target.rt;
        check_creatable(rt, &object)?;
        let namespace = self.check_namespace(target, &object)?;
        // The server's own records (bootstrap objects, a namespace's `default` ServiceAccount)
        // are not the policies' or the webhooks' to refuse, as kube-apiserver's own are not.
        let by_server = matches!(write.owner, Owner::Server);
        let validating = |name: &'_ str, object: Option<&'_ Value>| -> ApiResult<()> {
            let a = Attributes::new(
                rt,
                None,
                Operation::Create,
                name,
                if rt.strategy.is_namespace() { name } else { &namespace },
                object,
                None,
                write.dry_run,
                &write.requester,
            );
            policy::admit(self, &a)?;
            webhook::validate(self, &a)
        };
        let mutating = |object: &mut Value, defaults: &dyn Fn(&mut Value)| {
            let name = meta_str(object, "name").unwrap_or_default().to_owned();
            let namespace = if rt.strategy.is_namespace() { &name } else { &namespace };
            let a = Attributes::new(
                rt,
                None,
                Operation::Create,
                &name,
                namespace,
                None,
                None,
                write.dry_run,
                &write.requester,
            );
            webhook::mutate(self, &a, object, defaults)
        };
        let webhooks: Option<MutatingWebhooks<'_>> = (!by_server).then_some(&mutating);
        let (name, mut object) = self.prepare_new(rt, &namespace, object, webhooks)?;
        let _lock = rt.strategy.write_lock(self);
        let key = self.seal_new(rt, &name, &namespace, &mut object, write)?;
        if !by_server {
            validating(&name, Some(&object))?;
        }
        let admission = self.admission.get();
        // The ResourceQuotas that count the new object; read before the lock, their usage
        // counted under it.
        let quotas = resource_quota::counting(self, rt, &namespace)?;
        let serial = !quotas.is_empty() || admission.is_some_and(|a| a.serialized(rt));
        let _serial = serial.then(|| self.admission_lock.lock());
        if let Some(admission) = admission {
            admission.admit_create(self, rt, &object)?;
        }
        resource_quota::admit_create(self, rt, &object, &quotas)?;
        if write.dry_run {
            if self.store.get(&key).map_err(internal)?.is_some() {
                return Err(ApiError::already_exists(rt.group, rt.plural, &name));
            }
            // As kube-apiserver's quota admission, a dry run is refused what the create would be.
            let used = self.store.usage();
            let after = used.with_created(&key, &self.encode_stored(rt, &object)?);
            self.store
                .quota()
                .check(used, after, true)
                .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, &name))?;
            return Ok(object);
        }
        let stored = self
            .store
            .create(&key, self.encode_stored(rt, &object)?)
            .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, &name))?;
        self.wrote(rt, !matches!(write.owner, Owner::Server))?;
        rt.strategy.after_create(self, &name)?;
        Ok(written(object, &stored))
    }

    /// Create objects of the server's own (a new cluster's bootstrap objects) together, in one
    /// atomic store write ([`carrel_store::Store::create_all`]): each is prepared exactly as
    /// [`Api::create`] prepares it (defaults, validation, name, uid, creationTimestamp, the
    /// kind's last changes, the cluster's admission; not ResourceQuotas, which do not bound the
    /// server's own objects), then all are stored at once, or none is
    /// (409 AlreadyExists if any exists). A namespaced object may be in a namespace created
    /// earlier in the same list. After the write, each kind's effects of a write run once and
    /// each object's effects of a create run as [`Api::create`]'s do (a namespace's `default`
    /// ServiceAccount, created then unless it is in the list too).
    ///
    /// Kinds whose objects are checked against each other under a lock (definitions, Services)
    /// have their lock held from their first object to the write, taken in the order the kinds
    /// come; objects of one such kind in one list are checked against those stored, not
    /// against each other. Kinds whose creates the admission serializes (pods, counted against
    /// a quota) are created one at a time with [`Api::create`]: a 500 here.
    pub(crate) fn create_all_as_server(
        &self,
        items: Vec<(Target<'_>, Value)>,
    ) -> ApiResult<Vec<Value>> {
        let write = Write::server();
        let admission = self.admission.get();
        let mut new_namespaces = HashSet::new();
        let mut prepared = Vec::with_capacity(items.len());
        let mut locks = Vec::new();
        let mut locked: Vec<&ResourceType> = Vec::new();
        for (target, object) in items {
            let rt = target.rt;
            check_creatable(rt, &object)?;
            if admission.is_some_and(|a| a.serialized(rt)) {
                return Err(ApiError::internal(format!(
                    "{} are created one at a time, not together",
                    rt.plural
                )));
            }
            if !locked.iter().any(|k| std::ptr::eq(*k, rt)) {
                locked.push(rt);
                locks.extend(rt.strategy.write_lock(self));
            }
            let namespace = match requested_namespace(&target, &object)? {
                ns if rt.namespaced && new_namespaces.contains(&ns) => ns,
                _ => self.check_namespace(&target, &object)?,
            };
            let (name, mut object) =
                crate::validation::as_server(|| self.prepare_new(rt, &namespace, object, None))?;
            let key = self.seal_new(rt, &name, &namespace, &mut object, &write)?;
            if let Some(admission) = admission {
                admission.admit_create(self, rt, &object)?;
            }
            if rt.strategy.is_namespace() {
                new_namespaces.insert(name.clone());
            }
            prepared.push(NewObject { rt, name, key, object });
        }
        let encoded = prepared
            .iter()
            .map(|p| Ok((p.key.clone(), self.encode_stored(p.rt, &p.object)?)))
            .collect::<ApiResult<Vec<_>>>()?;
        let stored = self.store.create_all(encoded).map_err(|e| {
            let key = match &e {
                carrel_store::Error::AlreadyExists { key } => Some(key.as_str()),
                _ => None,
            };
            let about = prepared.iter().find(|p| Some(p.key.as_str()) == key).or(prepared.first());
            match about {
                Some(p) => ApiError::from_store(e, p.rt.group, p.rt.plural, &p.name),
                None => internal(e),
            }
        })?;
        let mut kinds: Vec<&ResourceType> = Vec::new();
        for p in &prepared {
            if !kinds.iter().any(|k| std::ptr::eq(*k, p.rt)) {
                kinds.push(p.rt);
                self.wrote(p.rt, false)?;
            }
        }
        for p in &prepared {
            p.rt.strategy.after_create(self, &p.name)?;
        }
        Ok(prepared.into_iter().zip(&stored).map(|(p, s)| written(p.object, s)).collect())
    }

    /// The first steps of a create, after the namespace check: the name (or one generated),
    /// `apiVersion` and `kind`, the metadata the server sets (uid, creationTimestamp,
    /// generation), then the kind's defaults and validation ([`Api::admit`]). The name and the
    /// object.
    fn prepare_new(
        &self,
        rt: &ResourceType,
        namespace: &str,
        mut object: Value,
        webhooks: Option<MutatingWebhooks<'_>>,
    ) -> ApiResult<(String, Value)> {
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
            meta.insert("namespace".into(), namespace.into());
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
        self.admit_mutated(rt, None, &mut object, webhooks)?;
        // What a mutating webhook may not move: the object to another namespace (refused in
        // kube-apiserver's words, as its `BeforeCreate` refuses it) or another name.
        if rt.namespaced && meta_str(&object, "namespace") != Some(namespace) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if meta_str(&object, "name") != Some(name.as_str()) {
            return Err(ApiError::bad_request(
                "admission webhooks may not change the name of the object being created",
            ));
        }
        Ok((name, object))
    }

    /// The last steps of a create before the cluster's admission, under the kind's write lock
    /// when it has one: the kind's last changes ([`crate::registry::Strategy::before_store`]) and
    /// `managedFields`. The object's store key.
    fn seal_new(
        &self,
        rt: &ResourceType,
        name: &str,
        namespace: &str,
        object: &mut Value,
        write: &Write,
    ) -> ApiResult<String> {
        rt.strategy.before_store(self, name, None, object, false)?;
        managed::record_update(rt, None, object, &write.owner);
        Ok(key_for(rt, Some(namespace).filter(|_| rt.namespaced), name))
    }

    /// The checks and defaults of a write: a custom resource's schema, or a built-in kind's
    /// typed decoding, defaults and validation (and a definition's own rules).
    pub(crate) fn admit(
        &self,
        rt: &ResourceType,
        old: Option<&Value>,
        object: &mut Value,
    ) -> ApiResult<()> {
        self.admit_mutated(rt, old, object, None)
    }

    /// [`Api::admit`], with `webhooks` (the cluster's mutating webhooks, given the object and
    /// the defaults to apply again after each change) run where kube-apiserver runs its
    /// mutating admission: after the defaults and the built-in mutating admission (LimitRanges,
    /// the default classes), before validation.
    pub(crate) fn admit_mutated(
        &self,
        rt: &ResourceType,
        old: Option<&Value>,
        object: &mut Value,
        webhooks: Option<MutatingWebhooks<'_>>,
    ) -> ApiResult<()> {
        if let Some(custom) = &rt.custom {
            if let Some(webhooks) = webhooks {
                custom.schema.apply_defaults(object);
                webhooks(object, &|o| custom.schema.apply_defaults(o))?;
            }
            return crd::admit(rt, custom, old, object);
        }
        match old {
            None => {
                defaults::on_create(rt, object);
                rt.strategy.mutate_create(self, object)?;
                if let Some(webhooks) = webhooks {
                    webhooks(object, &|o| defaults::on_create(rt, o))?;
                }
                defaults::validate(rt, object, None)?;
            }
            Some(old) => {
                let old = defaults::on_update(rt, old, object);
                if let Some(webhooks) = webhooks {
                    webhooks(object, &|o| defaults::apply_defaults(rt, o))?;
                }
                defaults::validate(rt, object, Some(&old))?;
            }
        }
        rt.strategy.admit(self, old, object)?;
        if !rt.is_storage_version() {
            // What will be stored, as this version shows it: what a write answers, and what
            // the next read gives.
            rt.strategy.convert_to_storage(object);
            rt.strategy.convert_from_storage(object);
        }
        Ok(())
    }
}
