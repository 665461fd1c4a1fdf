//! The resource types this server serves, and what discovery says about each.
//!
//! Built-in types are static. A tenant's custom resources come and go with its
//! CustomResourceDefinitions: their names are interned ([`intern`]) so that every type has the
//! same shape, and [`ResourceType::custom`] carries what the definition says of the version.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::registry::Strategy;

/// A subresource of a resource type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// `/status`: the object's status, written separately from its spec.
    Status,
    /// `/scale`: an `autoscaling/v1` Scale view of `spec.replicas`.
    Scale,
    /// `/ephemeralcontainers`: a pod whose only writable part is `spec.ephemeralContainers`
    /// (`kubectl debug` adds one there).
    EphemeralContainers,
}

impl Subresource {
    /// The path segment.
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::EphemeralContainers => "ephemeralcontainers",
        }
    }
}

/// A subresource that acts on an object rather than showing a view of it (a pod's `binding`,
/// `eviction` and `log`), served by a handler of its own: what discovery says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    /// The path segment.
    pub name: &'static str,
    /// The group and version of the kind it takes, when they are not the resource's own
    /// (`policy/v1` for an eviction).
    pub group_version: Option<(&'static str, &'static str)>,
    /// The kind it takes or answers with.
    pub kind: &'static str,
    /// Its verbs.
    pub verbs: &'static [&'static str],
}

/// One served resource type (a group, version and plural name).
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// The API group; empty for the core group.
    pub group: &'static str,
    /// The served version.
    pub version: &'static str,
    /// The object kind.
    pub kind: &'static str,
    /// The plural, lower-case resource name used in paths.
    pub plural: &'static str,
    /// The singular name kubectl accepts.
    pub singular: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`po`, `cm`, …).
    pub short_names: &'static [&'static str],
    /// Categories (`all`).
    pub categories: &'static [&'static str],
    /// Subresources served.
    pub subresources: &'static [Subresource],
    /// The verbs it supports ([`VERBS`] for stored objects).
    pub verbs: &'static [&'static str],
    /// For a custom resource, what its definition says of this version.
    pub custom: Option<CustomRef>,
    /// What the generic API code asks of the kind (see [`crate::registry`]). Not compared: a
    /// type's strategy follows from the rest.
    pub strategy: &'static dyn Strategy,
}

impl PartialEq for ResourceType {
    fn eq(&self, other: &Self) -> bool {
        self.group == other.group
            && self.version == other.version
            && self.kind == other.kind
            && self.plural == other.plural
            && self.singular == other.singular
            && self.namespaced == other.namespaced
            && self.short_names == other.short_names
            && self.categories == other.categories
            && self.subresources == other.subresources
            && self.verbs == other.verbs
            && self.custom == other.custom
    }
}

impl Eq for ResourceType {}

/// A custom resource version's definition, compared by identity: a type is the same type only
/// while its definition is unchanged.
#[derive(Clone, Debug)]
pub struct CustomRef(pub Arc<crate::crd::Custom>);

impl PartialEq for CustomRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CustomRef {}

impl std::ops::Deref for CustomRef {
    type Target = crate::crd::Custom;
    fn deref(&self) -> &crate::crd::Custom {
        &self.0
    }
}

/// A name with the lifetime of the process. Custom resources' names are interned once each (a
/// set that grows with the distinct names ever defined, not with definitions' updates), so that
/// they sit in [`ResourceType`] beside the built-in types' static names. What a cluster may add
/// to the set is bounded by [`crate::crd::limits::MAX_INTERNED_BYTES`] (see [`intern_cost`]).
pub fn intern(name: &str) -> &'static str {
    intern_new(name).0
}

/// [`intern`], and whether the name was new: it takes [`interned_size`] more bytes for good.
pub fn intern_new(name: &str) -> (&'static str, bool) {
    let mut names = names().lock();
    if let Some(found) = names.get(name) {
        return (found, false);
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    (leaked, true)
}

fn names() -> &'static Mutex<HashSet<&'static str>> {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    NAMES.get_or_init(Default::default)
}

fn lists() -> &'static Mutex<HashSet<&'static [&'static str]>> {
    static LISTS: OnceLock<Mutex<HashSet<&'static [&'static str]>>> = OnceLock::new();
    LISTS.get_or_init(Default::default)
}

/// What interning a name or a list of names keeps for good: its bytes and the set's entry.
pub fn interned_size(len: usize) -> usize {
    len + 2 * std::mem::size_of::<&str>()
}

/// The bytes interning `names` and `lists` would add to the process for good: the names and
/// lists not interned yet.
pub fn intern_cost(names_: &[&str], lists_: &[&[String]]) -> usize {
    let known = names().lock();
    let mut cost = 0;
    let mut counted = HashSet::new();
    for name in
        names_.iter().copied().chain(lists_.iter().flat_map(|l| l.iter().map(String::as_str)))
    {
        if !known.contains(name) && counted.insert(name) {
            cost += interned_size(name.len());
        }
    }
    drop(known);
    let known = lists().lock();
    for list in lists_ {
        let found =
            known.iter().any(|l| l.len() == list.len() && l.iter().zip(*list).all(|(a, b)| a == b));
        if !found {
            cost += interned_size(list.len() * std::mem::size_of::<&str>());
        }
    }
    cost
}

/// A list of names with the lifetime of the process, interned as [`intern`] does.
pub fn intern_list(names: &[String]) -> &'static [&'static str] {
    let interned: Vec<&'static str> = names.iter().map(|n| intern(n)).collect();
    let mut lists = lists().lock();
    if let Some(found) = lists.get(interned.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(interned.into_boxed_slice());
    lists.insert(leaked);
    leaked
}

/// A type served by a handler of its own rather than from the store (the access reviews,
/// resource metrics), as discovery lists it: no singular name, short names, categories or
/// subresources.
pub const fn handled(
    (group, version): (&'static str, &'static str),
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    verbs: &'static [&'static str],
    strategy: &'static dyn Strategy,
) -> ResourceType {
    ResourceType {
        group,
        version,
        kind,
        plural,
        singular: "",
        namespaced,
        short_names: &[],
        categories: &[],
        subresources: &[],
        verbs,
        custom: None,
        strategy,
    }
}

/// The verbs every served resource type supports.
pub const VERBS: &[&str] =
    &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

impl ResourceType {
    /// `group/version`, or just `version` for the core group.
    pub fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether a subresource is served.
    pub fn has(&self, sub: Subresource) -> bool {
        self.subresources.contains(&sub)
    }

    /// Whether a CustomResourceDefinition defines this type.
    pub fn is_custom(&self) -> bool {
        self.custom.is_some()
    }

    /// Whether this type's version is the one its objects are stored in: the definition's
    /// storage version for a custom resource, the strategy's word for a built-in kind (one
    /// version of each kind is; the others are views of the same objects).
    pub fn is_storage_version(&self) -> bool {
        match &self.custom {
            Some(custom) => custom.storage_version == self.version,
            None => self.strategy.is_storage_version(),
        }
    }
}

pub use crate::registry::{BUILT_IN, STATUS, STATUS_SCALE};

/// Only `/scale`.
pub const SCALE: &[Subresource] = &[Subresource::Scale];

/// A built-in type by group and plural, in the version its objects are stored in.
pub fn built_in(group: &str, plural: &str) -> Option<&'static ResourceType> {
    BUILT_IN
        .iter()
        .find(|t| t.group == group && t.plural == plural && t.strategy.is_storage_version())
}

/// The served resource types, looked up by group, version and plural.
#[derive(Clone, Debug)]
pub struct Registry {
    types: Vec<ResourceType>,
    host: bool,
}

/// A tenant's cluster: the built-in types.
impl Default for Registry {
    fn default() -> Self {
        Registry { types: BUILT_IN.to_vec(), host: false }
    }
}

impl Registry {
    /// This registry with `extra` types added (for discovery).
    pub fn with_extra(&self, extra: &[ResourceType]) -> Registry {
        let mut types = self.types.clone();
        types.extend_from_slice(extra);
        Registry { types, host: self.host }
    }

    /// The host API's types: the built-in ones and Carrel's `Tenant`.
    pub fn host() -> Registry {
        let mut types = BUILT_IN.to_vec();
        types.push(crate::registry::carrel::tenants::TENANTS.clone());
        Registry { types, host: true }
    }

    /// Whether this is the host API's registry.
    pub fn is_host(&self) -> bool {
        self.host
    }

    /// The type served at `group/version/plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types.iter().find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// Every served type.
    pub fn all(&self) -> &[ResourceType] {
        &self.types
    }

    /// The served groups, in first-seen order, each with its versions (the first is preferred).
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut groups: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for t in &self.types {
            match groups.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) if !versions.contains(&t.version) => versions.push(t.version),
                Some(_) => {}
                None => groups.push((t.group, vec![t.version])),
            }
        }
        groups
    }

    /// The types served in one group-version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceType> + 'a {
        self.types.iter().filter(move |t| t.group == group && t.version == version)
    }
}
