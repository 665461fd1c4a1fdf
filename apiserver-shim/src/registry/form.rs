//! A kind's typed form: the Rust type its objects decode into (k8s-openapi's, Carrel's own
//! `Tenant`, or [`Untyped`] for custom resources), and the checks made on that form.
//!
//! An object is decoded once per write, after its defaults, by [`Decode::check`]: a value of the
//! wrong type is a 400 as kube-apiserver's decoder answers it, a quantity that does not parse too,
//! and what the kind's [`Validate`] finds on the typed object (with the metadata checks every
//! kind has) is the list of causes of a 422.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::{ListableResource, Metadata};
use schemars::generate::SchemaGenerator;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::openapi::KindNames;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};
use crate::validation::{self, Errors, QUANTITY_FORMAT};

/// What the server needs of a kind's Rust type.
pub trait Form: Sized + 'static {
    /// Decode an object (the request's, with its defaults) into the type.
    fn decode(value: &Value) -> Result<Self, DecodeError>;

    /// The object's metadata.
    fn meta(&self) -> &ObjectMeta;

    /// The names of the type's schema and its list's; `None` for a type without schemas of its
    /// own (a custom resource's come from its definition).
    fn names() -> Option<KindNames>;

    /// Add the type's schemas to `generator`; the list's schema, which k8s-openapi lacks, is
    /// returned.
    fn add_schemas(generator: &mut SchemaGenerator) -> Option<Value>;
}

impl<T> Form for T
where
    T: JsonSchema + ListableResource + Metadata<Ty = ObjectMeta> + DeserializeOwned + 'static,
{
    fn decode(value: &Value) -> Result<T, DecodeError> {
        decode(value)
    }

    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }

    fn names() -> Option<KindNames> {
        let kind = T::schema_name().into_owned();
        Some(KindNames { list: format!("{kind}List"), kind })
    }

    fn add_schemas(generator: &mut SchemaGenerator) -> Option<Value> {
        generator.subschema_for::<T>();
        Some(crate::openapi::list_schema::<T>(generator))
    }
}

/// A custom resource as the generic checks see it: its metadata (the rest is its definition's
/// schema's to check).
#[derive(Debug, Default, Deserialize)]
pub struct Untyped {
    /// The object's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
}

impl Form for Untyped {
    fn decode(value: &Value) -> Result<Untyped, DecodeError> {
        decode(value)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn names() -> Option<KindNames> {
        None
    }

    fn add_schemas(_generator: &mut SchemaGenerator) -> Option<Value> {
        None
    }
}

/// A workload (Deployment, ReplicaSet, StatefulSet, DaemonSet) in its typed form, with what
/// k8s-openapi's type does not keep: whether `spec.selector` was given. Go's
/// `*metav1.LabelSelector` is nil when it was not, and kube-apiserver answers a missing selector
/// (`Required value`) and an empty one (`empty selector is invalid`) differently; k8s-openapi's
/// required field reads both as an empty selector. Derefs to the object.
#[derive(Debug)]
pub struct Workload<T> {
    /// The object.
    pub object: T,
    /// Whether its `spec.selector` was given (not missing, not null).
    pub selector_given: bool,
}

impl<T> std::ops::Deref for Workload<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.object
    }
}

impl<T: WorkloadSpec> Workload<T> {
    /// The object's `spec.selector`, where it was given.
    pub fn selector(&self) -> Option<&LabelSelector> {
        self.object.spec_selector().filter(|_| self.selector_given)
    }
}

/// The kinds k8s-openapi gives a required `spec.selector`.
pub trait WorkloadSpec {
    /// `spec.selector`, when the object has a spec.
    fn spec_selector(&self) -> Option<&LabelSelector>;
}

macro_rules! workload_spec {
    ($($kind:ty),*) => {$(
        impl WorkloadSpec for $kind {
            fn spec_selector(&self) -> Option<&LabelSelector> {
                self.spec.as_ref().map(|spec| &spec.selector)
            }
        }
    )*};
}

workload_spec!(DaemonSet, Deployment, ReplicaSet, StatefulSet);

impl<T: Form> Form for Workload<T> {
    fn decode(value: &Value) -> Result<Workload<T>, DecodeError> {
        let selector_given = value.pointer("/spec/selector").is_some_and(|s| !s.is_null());
        Ok(Workload { object: T::decode(value)?, selector_given })
    }

    fn meta(&self) -> &ObjectMeta {
        self.object.meta()
    }

    fn names() -> Option<KindNames> {
        T::names()
    }

    fn add_schemas(generator: &mut SchemaGenerator) -> Option<Value> {
        T::add_schemas(generator)
    }
}

/// A kind's checks on its typed form, as kube-apiserver's `Validate`, `ValidateUpdate` and its
/// decoder's quantity parsing.
pub trait Validate {
    /// The kind's Rust type.
    type Object: Form;

    /// The kind's own create checks (object metadata is checked for every kind).
    fn validate(&self, _object: &Self::Object, _e: &mut Errors) {}

    /// The kind's checks of a new object only, beyond [`Validate::validate`].
    fn validate_create(&self, _object: &Self::Object, _e: &mut Errors) {}

    /// The kind's own update checks: fields an update may not change. `old` and `new` both carry
    /// their defaults.
    fn validate_update(&self, _old: &Self::Object, _new: &Self::Object, _e: &mut Errors) {}

    /// The resource quantities an object holds, which must parse or it cannot be decoded.
    fn quantities<'a>(&self, _object: &'a Self::Object, _found: &mut Vec<&'a Quantity>) {}
}

/// Why an object does not decode as its kind's type, as kube-apiserver's decoder words it: the
/// field's path (when the problem is below the object's root), then serde's complaint.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The object itself is not of the kind's shape.
    #[error(transparent)]
    Object(serde_json::Error),
    /// A field holds a value not of its type (`spec.replicas: invalid type: …`).
    #[error("{path}: {source}")]
    Field {
        /// The field, dotted (`spec.replicas`).
        path: String,
        /// serde's complaint.
        source: serde_json::Error,
    },
}

/// Decode `value` as `T`, naming the field whose value is not of its type.
pub fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let source = e.into_inner();
        match path.as_str() {
            "." => DecodeError::Object(source),
            _ => DecodeError::Field { path, source },
        }
    })
}

/// The 400 of an object kube-apiserver's decoder refuses.
pub fn not_decodable(rt: &ResourceType, why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {why}",
        kind = rt.kind,
        version = rt.version,
    ))
}

/// What the generic code asks of a kind's typed form; every [`Validate`] has it.
pub trait Decode {
    /// Decode `object` (and on an update the stored `old`, with its defaults) into the kind's
    /// typed form, once each, and return every validation cause: 400 when `object` does not
    /// decode or holds a quantity that does not parse.
    fn check(
        &self,
        rt: &ResourceType,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<Cause>>;

    /// Whether `object` decodes as the kind's type.
    fn check_types(&self, object: &Value) -> Result<(), DecodeError>;

    /// The names of the kind's schema and its list's.
    fn schema_names(&self) -> Option<KindNames>;

    /// Add the kind's schemas to `generator`; the list's schema is returned.
    fn add_schemas(&self, generator: &mut SchemaGenerator) -> Option<Value>;
}

impl<S: Validate> Decode for S {
    fn check(
        &self,
        rt: &ResourceType,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<Cause>> {
        let new = S::Object::decode(object).map_err(|e| not_decodable(rt, e))?;
        let mut quantities = Vec::new();
        self.quantities(&new, &mut quantities);
        if quantities.iter().any(|q| validation::parse_quantity(&q.0).is_none()) {
            return Err(not_decodable(rt, QUANTITY_FORMAT));
        }
        let mut e = Errors::default();
        validation::object_meta(rt, new.meta(), &mut e);
        self.validate(&new, &mut e);
        if let Some(old) = old {
            let old = S::Object::decode(old).map_err(|e| {
                ApiError::internal(format!("the stored {} does not decode: {e}", rt.kind))
            })?;
            validation::object_meta_update(old.meta(), new.meta(), &mut e);
            self.validate_update(&old, &new, &mut e);
        } else {
            self.validate_create(&new, &mut e);
        }
        Ok(e.0)
    }

    fn check_types(&self, object: &Value) -> Result<(), DecodeError> {
        S::Object::decode(object).map(drop)
    }

    fn schema_names(&self) -> Option<KindNames> {
        S::Object::names()
    }

    fn add_schemas(&self, generator: &mut SchemaGenerator) -> Option<Value> {
        S::Object::add_schemas(generator)
    }
}
