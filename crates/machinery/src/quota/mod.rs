//! ResourceQuota's rules, as Kubernetes' quota evaluators (`pkg/quota/v1/evaluator/core`,
//! `k8s.io/apiserver/pkg/quota/v1`) apply them, written once for the API server's admission and
//! the status controller: which resources a quota names each kind of object counts against
//! ([`Evaluator::matching_resources`]), whether a quota's scopes take in an object
//! ([`Evaluator::matches`]), what one object uses ([`Evaluator::usage`]), what a namespace's
//! objects use together ([`Evaluator::usage_stats`], [`calculate_usage`]) and whether a new
//! object fits ([`admit`]), with kube-apiserver's words when it does not ([`Refusal`]).
//!
//! Objects are read as the API stores them (JSON); quantities are [`Quantity`]s, so sums and
//! messages print as Kubernetes prints them.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use crate::names::qualified_name;
use crate::quantity::Quantity;

/// Quantities by resource name (`corev1.ResourceList`), sorted by name.
pub type ResourceList = BTreeMap<String, Quantity>;

/// The prefix of the resources a quota counts requests of (`requests.cpu`, `requests.nvidia.com/gpu`).
pub const REQUESTS_PREFIX: &str = "requests.";
/// The prefix of huge page resources.
pub const HUGE_PAGES_PREFIX: &str = "hugepages-";
/// The middle of a resource counted per storage class (`gold.storageclass.storage.k8s.io/requests.storage`).
pub const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";
/// The annotation that names a claim's storage class before `spec.storageClassName` existed.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// The scopes kube-apiserver accepts in `spec.scopes` and `spec.scopeSelector`.
pub const SCOPES: [&str; 6] = [
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

/// The resources a quota that counts cpu or memory makes every container specify (a rule
/// Kubernetes keeps for compatibility, for these six only).
const VALIDATION_SET: [&str; 6] =
    ["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

/// The resources of pods a quota counts (besides huge pages and extended resources).
const POD_RESOURCES: [&str; 11] = [
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

const SERVICE_RESOURCES: [&str; 4] =
    ["count/services", "services", "services.loadbalancers", "services.nodeports"];

const CLAIM_RESOURCES: [&str; 2] = ["persistentvolumeclaims", "requests.storage"];

/// The resources kube-apiserver's validation knows by their bare names (`standardResources`).
const STANDARD_RESOURCES: [&str; 20] = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];

/// Resources counted in whole numbers (`integerResources`).
const INTEGER_RESOURCES: [&str; 9] = [
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

/// Whether `name` is a native resource: unqualified, or in a `kubernetes.io/` domain.
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// `IsExtendedResourceName`: not native, not `requests.`-prefixed, and a qualified name once
/// prefixed with `requests.` (`nvidia.com/gpu`).
pub fn is_extended_resource(name: &str) -> bool {
    !is_native_resource(name)
        && !name.starts_with(REQUESTS_PREFIX)
        && qualified_name(&format!("{REQUESTS_PREFIX}{name}")).is_empty()
}

/// `IsQuotaHugePageResourceName`.
fn is_quota_huge_pages(name: &str) -> bool {
    name.starts_with(HUGE_PAGES_PREFIX) || name.starts_with("requests.hugepages-")
}

/// `IsStandardResourceName`: a bare name kube-apiserver knows.
pub fn is_standard_resource(name: &str) -> bool {
    STANDARD_RESOURCES.contains(&name) || is_quota_huge_pages(name)
}

/// `IsStandardQuotaResourceName`: a bare name a quota may count.
pub fn is_standard_quota_resource(name: &str) -> bool {
    (STANDARD_RESOURCES.contains(&name) && name != "storage") || is_quota_huge_pages(name)
}

/// `IsIntegerResourceName`: counted in whole numbers.
pub fn is_integer_resource(name: &str) -> bool {
    INTEGER_RESOURCES.contains(&name) || is_extended_resource(name)
}

/// `IsResourceQuotaScopeValidForResource`: whether a quota with `scope` may limit `resource`.
pub fn scope_allows(scope: &str, resource: &str) -> bool {
    const POD_COMPUTE: [&str; 6] =
        ["cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"];
    match scope {
        "Terminating"
        | "NotTerminating"
        | "NotBestEffort"
        | "PriorityClass"
        | "CrossNamespacePodAffinity" => resource == "pods" || POD_COMPUTE.contains(&resource),
        "BestEffort" => resource == "pods",
        _ => true,
    }
}

/// The quota resource that counts objects of a type: `count/pods`, `count/deployments.apps`.
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// The group and resource a `count/…` quota resource counts (`count/deployments.apps` is
/// `("apps", "deployments")`), as `schema.ParseGroupResource` reads it.
pub fn counted_type(name: &str) -> Option<(&str, &str)> {
    let counted = name.strip_prefix("count/")?;
    Some(match counted.split_once('.') {
        Some((resource, group)) => (group, resource),
        None => ("", counted),
    })
}

/// A quantity as the API holds it: a string, or a bare number.
pub fn quantity(value: &Value) -> Option<Quantity> {
    match value {
        Value::String(s) => Quantity::parse(s),
        Value::Number(n) => Quantity::parse(&n.to_string()),
        _ => None,
    }
}

/// A resource list as the API holds it (`{"cpu": "500m"}`); entries that do not parse are left
/// out (the API refuses them).
pub fn resource_list(value: Option<&Value>) -> ResourceList {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, q)| Some((name.clone(), quantity(q)?)))
        .collect()
}

/// A resource list as the API writes it: canonical quantities.
pub fn to_json(list: &ResourceList) -> Value {
    Value::Object(list.iter().map(|(k, v)| (k.clone(), Value::String(v.to_string()))).collect())
}

/// Whether two lists hold the same resources in equal amounts (`quota.Equals`).
pub fn equal(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

/// `name=value` for each entry, sorted by name, joined by commas (kube-apiserver's
/// `prettyPrint`).
pub fn pretty_print(list: &ResourceList) -> String {
    list.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn mask(list: &ResourceList, names: &BTreeSet<String>) -> ResourceList {
    list.iter().filter(|(k, _)| names.contains(*k)).map(|(k, v)| (k.clone(), *v)).collect()
}

/// `quota.Add` (and `addResourceList`): each resource of `b` added to `into`'s.
fn add(into: &mut ResourceList, b: &ResourceList) {
    for (name, q) in b {
        into.entry(name.clone()).and_modify(|have| have.add(q)).or_insert(*q);
    }
}

/// One requirement of a quota's scopes: a `spec.scopes` entry (`Exists`) or a
/// `spec.scopeSelector.matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeRequirement {
    /// `scopeName`.
    pub scope: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// `values`.
    pub values: Vec<String>,
}

/// A ResourceQuota as admission and the status controller read it.
#[derive(Clone, Debug)]
pub struct Quota {
    /// Its name.
    pub name: String,
    /// `spec.hard`.
    pub hard: ResourceList,
    /// Its scopes, then its scope selector's requirements.
    pub scopes: Vec<ScopeRequirement>,
}

impl Quota {
    /// A ResourceQuota object read.
    pub fn from_object(object: &Value) -> Quota {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let spec = &object["spec"];
        let mut scopes: Vec<ScopeRequirement> = strings(&spec["scopes"])
            .into_iter()
            .map(|scope| ScopeRequirement { scope, operator: "Exists".into(), values: Vec::new() })
            .collect();
        for requirement in
            spec["scopeSelector"]["matchExpressions"].as_array().into_iter().flatten()
        {
            scopes.push(ScopeRequirement {
                scope: requirement["scopeName"].as_str().unwrap_or_default().to_owned(),
                operator: requirement["operator"].as_str().unwrap_or_default().to_owned(),
                values: strings(&requirement["values"]),
            });
        }
        Quota {
            name: object["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
            hard: resource_list(spec.get("hard")),
            scopes,
        }
    }
}

/// What counts the objects of one type against quotas (an evaluator of Kubernetes' quota
/// registry).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Evaluator {
    /// Pods: `pods`, `count/pods` and their compute resources.
    Pods,
    /// Services: `services`, `count/services`, `services.loadbalancers`, `services.nodeports`.
    Services,
    /// PersistentVolumeClaims: `persistentvolumeclaims`, `requests.storage`, and both per
    /// storage class.
    Claims,
    /// Any other type: its `count/…` resource, and for a few core types a bare name too
    /// (`configmaps`, `secrets`, `replicationcontrollers`, `resourcequotas`).
    Objects {
        /// The API group.
        group: String,
        /// The resource (plural).
        resource: String,
    },
}

impl Evaluator {
    /// The evaluator of objects of `group`/`resource`; `None` for the types quota ignores
    /// (Events).
    pub fn of(group: &str, resource: &str) -> Option<Evaluator> {
        Some(match (group, resource) {
            ("", "events") => return None,
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::Claims,
            _ => Evaluator::Objects { group: group.to_owned(), resource: resource.to_owned() },
        })
    }

    /// The group and resource of the objects it counts.
    pub fn group_resource(&self) -> (&str, &str) {
        match self {
            Evaluator::Pods => ("", "pods"),
            Evaluator::Services => ("", "services"),
            Evaluator::Claims => ("", "persistentvolumeclaims"),
            Evaluator::Objects { group, resource } => (group, resource),
        }
    }

    /// The bare name an object count has besides `count/…`.
    fn legacy_name(&self) -> Option<&'static str> {
        match self.group_resource() {
            ("", "configmaps") => Some("configmaps"),
            ("", "secrets") => Some("secrets"),
            ("", "replicationcontrollers") => Some("replicationcontrollers"),
            ("", "resourcequotas") => Some("resourcequotas"),
            _ => None,
        }
    }

    /// Of the quota resources `names`, those this evaluator counts (`MatchingResources`).
    pub fn matching_resources<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let matching = |name: &str| match self {
            Evaluator::Pods => {
                POD_RESOURCES.contains(&name)
                    || is_quota_huge_pages(name)
                    || (!is_native_resource(name) && name.starts_with(REQUESTS_PREFIX))
            }
            Evaluator::Services => SERVICE_RESOURCES.contains(&name),
            Evaluator::Claims => {
                name == "count/persistentvolumeclaims"
                    || CLAIM_RESOURCES.contains(&name)
                    || CLAIM_RESOURCES
                        .iter()
                        .any(|r| name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{r}")))
            }
            Evaluator::Objects { group, resource } => {
                name == object_count_name(group, resource) || Some(name) == self.legacy_name()
            }
        };
        let mut found: Vec<String> =
            names.into_iter().filter(|n| matching(n)).map(str::to_owned).collect();
        found.sort();
        found.dedup();
        found
    }

    /// Whether `requirement` takes in `object`; only pods have scopes.
    pub fn matches_scope(&self, requirement: &ScopeRequirement, object: &Value) -> bool {
        if *self != Evaluator::Pods {
            return false;
        }
        let spec = &object["spec"];
        let terminating = spec["activeDeadlineSeconds"].as_i64().is_some_and(|s| s >= 0);
        match requirement.scope.as_str() {
            "Terminating" => terminating,
            "NotTerminating" => !terminating,
            "BestEffort" => best_effort(object),
            "NotBestEffort" => !best_effort(object),
            "PriorityClass" => {
                let class = spec["priorityClassName"].as_str().filter(|c| !c.is_empty());
                match requirement.operator.as_str() {
                    "Exists" => class.is_some(),
                    "DoesNotExist" => class.is_none(),
                    "In" => class.is_some_and(|c| requirement.values.iter().any(|v| v == c)),
                    "NotIn" => !class.is_some_and(|c| requirement.values.iter().any(|v| v == c)),
                    _ => false,
                }
            }
            "CrossNamespacePodAffinity" => cross_namespace_affinity(spec),
            _ => false,
        }
    }

    /// Whether `quota` counts `object`: it names a resource this evaluator counts, and every
    /// one of its scopes takes the object in (`Matches`).
    pub fn matches(&self, quota: &Quota, object: &Value) -> bool {
        !self.matching_resources(quota.hard.keys().map(String::as_str)).is_empty()
            && quota.scopes.iter().all(|s| self.matches_scope(s, object))
    }

    /// What `object` must specify for a quota limiting `required` (`Constraints`): for pods,
    /// each container's cpu and memory where the quota limits them; the reason when it does
    /// not.
    pub fn constraints(&self, required: &[String], object: &Value) -> Result<(), String> {
        if *self != Evaluator::Pods {
            return Ok(());
        }
        let required: BTreeSet<&str> =
            required.iter().map(String::as_str).filter(|r| VALIDATION_SET.contains(r)).collect();
        if required.is_empty() {
            return Ok(());
        }
        let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for container in all_containers(object) {
            let usage = compute_usage(
                &resource_list(container.pointer("/resources/requests")),
                &resource_list(container.pointer("/resources/limits")),
            );
            for resource in &required {
                if !usage.contains_key(*resource) {
                    let name = container["name"].as_str().unwrap_or_default().to_owned();
                    missing.entry(resource).or_default().insert(name);
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let each: Vec<String> = missing
            .iter()
            .map(|(r, names)| {
                format!("{r} for: {}", names.iter().cloned().collect::<Vec<_>>().join(","))
            })
            .collect();
        Err(format!("must specify {}", each.join("; ")))
    }

    /// What one object uses (`Usage`). `now` (Unix seconds) decides whether a pod being
    /// deleted is past its grace period.
    pub fn usage(&self, object: &Value, now: i64) -> ResourceList {
        match self {
            Evaluator::Pods => pod_usage(object, now),
            Evaluator::Services => service_usage(object),
            Evaluator::Claims => claim_usage(object),
            Evaluator::Objects { group, resource } => {
                let mut usage = ResourceList::new();
                usage.insert(object_count_name(group, resource), Quantity::count(1));
                if let Some(name) = self.legacy_name() {
                    usage.insert(name.to_owned(), Quantity::count(1));
                }
                usage
            }
        }
    }

    /// What `objects` (all of one namespace) use of `resources`, counting those `scopes` take
    /// in; each of `resources` is there, zero if nothing uses it (`CalculateUsageStats`).
    pub fn usage_stats(
        &self,
        resources: &[String],
        scopes: &[ScopeRequirement],
        objects: &[Value],
        now: i64,
    ) -> ResourceList {
        let mut used: ResourceList =
            resources.iter().map(|r| (r.clone(), Quantity::ZERO)).collect();
        for object in objects {
            if scopes.iter().all(|s| self.matches_scope(s, object)) {
                add(&mut used, &self.usage(object, now));
            }
        }
        let names: BTreeSet<String> = resources.iter().cloned().collect();
        mask(&used, &names)
    }
}

/// The evaluators of the resources `hard` names: the built-in ones that count any of them, and
/// one for each type a `count/…` resource names that none of those counts.
pub fn evaluators_for(hard: &ResourceList) -> Vec<Evaluator> {
    let names = || hard.keys().map(String::as_str);
    let mut evaluators: Vec<Evaluator> = [Evaluator::Pods, Evaluator::Services, Evaluator::Claims]
        .into_iter()
        .filter(|e| !e.matching_resources(names()).is_empty())
        .collect();
    for name in names() {
        let Some((group, resource)) = counted_type(name) else { continue };
        if let Some(evaluator) = Evaluator::of(group, resource) {
            if !evaluators.contains(&evaluator) {
                evaluators.push(evaluator);
            }
        }
    }
    for (group, resource) in [
        ("", "configmaps"),
        ("", "secrets"),
        ("", "replicationcontrollers"),
        ("", "resourcequotas"),
    ] {
        let evaluator = Evaluator::Objects { group: group.into(), resource: resource.into() };
        if !evaluators.contains(&evaluator) && !evaluator.matching_resources(names()).is_empty() {
            evaluators.push(evaluator);
        }
    }
    evaluators
}

/// What a quota's namespace uses of the resources it limits (`quota.CalculateUsage`), from the
/// objects each evaluator counts (`listed`); resources no evaluator counts are left out.
pub fn calculate_usage(
    quota: &Quota,
    listed: &[(Evaluator, Vec<Value>)],
    now: i64,
) -> ResourceList {
    let mut used = ResourceList::new();
    let mut matched = BTreeSet::new();
    for (evaluator, objects) in listed {
        let resources = evaluator.matching_resources(quota.hard.keys().map(String::as_str));
        if resources.is_empty() {
            continue;
        }
        add(&mut used, &evaluator.usage_stats(&resources, &quota.scopes, objects, now));
        matched.extend(resources);
    }
    mask(&used, &matched)
}

/// Why a create is refused, in kube-apiserver's words (the message after
/// `<plural> "<name>" is forbidden: `).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The object lacks what a quota makes it specify.
    Failed {
        /// The quota.
        quota: String,
        /// What is missing.
        why: String,
    },
    /// The object asks for a negative amount.
    Negative(Vec<String>),
    /// The object would take a quota over its limits.
    Exceeded {
        /// The quota.
        quota: String,
        /// What the object asks for, of the resources over the limit.
        requested: ResourceList,
        /// What the namespace uses of them.
        used: ResourceList,
        /// Their limits.
        limited: ResourceList,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Failed { quota, why } => write!(f, "failed quota: {quota}: {why}"),
            Refusal::Negative(names) => {
                write!(f, "quota usage is negative for resource(s): {}", names.join(","))
            }
            Refusal::Exceeded { quota, requested, used, limited } => write!(
                f,
                "exceeded quota: {quota}, requested: {}, used: {}, limited: {}",
                pretty_print(requested),
                pretty_print(used),
                pretty_print(limited)
            ),
        }
    }
}

/// Whether `object`, a new object `evaluator` counts, fits `quotas` (kube-apiserver's
/// `CheckRequest` for a create). `stored` lists the objects of its type in its namespace; it is
/// called only if some quota counts the object, and its error is passed on.
pub fn admit<E>(
    quotas: &[Quota],
    evaluator: &Evaluator,
    object: &Value,
    now: i64,
    stored: impl FnOnce() -> Result<Vec<Value>, E>,
) -> Result<Result<(), Refusal>, E> {
    let mut interesting = Vec::new();
    for quota in quotas {
        if !evaluator.matches(quota, object) {
            continue;
        }
        let restricted = evaluator.matching_resources(quota.hard.keys().map(String::as_str));
        if let Err(why) = evaluator.constraints(&restricted, object) {
            return Ok(Err(Refusal::Failed { quota: quota.name.clone(), why }));
        }
        interesting.push((quota, restricted));
    }
    if interesting.is_empty() {
        return Ok(Ok(()));
    }
    let usage = evaluator.usage(object, now);
    let negative: Vec<String> =
        usage.iter().filter(|(_, q)| q.nanos() < 0).map(|(k, _)| k.clone()).collect();
    if !negative.is_empty() {
        return Ok(Err(Refusal::Negative(negative)));
    }
    let delta: ResourceList = usage.into_iter().filter(|(_, q)| !q.is_zero()).collect();
    if delta.is_empty() {
        return Ok(Ok(()));
    }
    let objects = stored()?;
    for (quota, restricted) in interesting {
        let hard_names: BTreeSet<String> = quota.hard.keys().cloned().collect();
        let requested = mask(&delta, &hard_names);
        if requested.is_empty() {
            continue;
        }
        let used = evaluator.usage_stats(&restricted, &quota.scopes, &objects, now);
        let exceeded: BTreeSet<String> = requested
            .iter()
            .filter(|(name, wanted)| {
                let mut total = used.get(*name).copied().unwrap_or(Quantity::ZERO);
                total.add(wanted);
                quota.hard.get(*name).is_some_and(|hard| total.cmp_value(hard) == Ordering::Greater)
            })
            .map(|(name, _)| name.clone())
            .collect();
        if !exceeded.is_empty() {
            return Ok(Err(Refusal::Exceeded {
                quota: quota.name.clone(),
                requested: mask(&requested, &exceeded),
                used: mask(&used, &exceeded),
                limited: mask(&quota.hard, &exceeded),
            }));
        }
    }
    Ok(Ok(()))
}

/// A pod's containers and init containers.
fn all_containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["containers", "initContainers"]
        .into_iter()
        .flat_map(move |list| pod["spec"][list].as_array().into_iter().flatten())
}

/// `qos.GetPodQOS(pod) == BestEffort`: no container asks for or is limited in cpu or memory.
fn best_effort(pod: &Value) -> bool {
    if let Some(class) = pod["status"]["qosClass"].as_str().filter(|c| !c.is_empty()) {
        return class == "BestEffort";
    }
    !all_containers(pod).any(|c| {
        ["requests", "limits"].iter().any(|field| {
            let list = resource_list(c.pointer(&format!("/resources/{field}")));
            ["cpu", "memory"].iter().any(|r| list.get(*r).is_some_and(|q| q.nanos() > 0))
        })
    })
}

/// Whether a pod's affinity terms reach into other namespaces (`namespaces` or a
/// `namespaceSelector`).
fn cross_namespace_affinity(spec: &Value) -> bool {
    let crosses = |term: &Value| {
        term["namespaces"].as_array().is_some_and(|n| !n.is_empty())
            || !term["namespaceSelector"].is_null()
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let affinity = &spec["affinity"][kind];
        affinity["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .any(crosses)
            || affinity["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| crosses(&w["podAffinityTerm"]))
    })
}

/// `maxResourceList`: each of `other` where it is larger than `into`'s.
fn max_list(into: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        match into.get(name) {
            Some(have) if q.cmp_value(have) != Ordering::Greater => {}
            _ => {
                into.insert(name.clone(), *q);
            }
        }
    }
}

/// A pod's effective requests or limits (`field`): its containers and sidecars together, or
/// more where an init container (with the sidecars started before it) needs more
/// (`AggregateContainerRequests`).
fn aggregate(pod: &Value, field: &str) -> ResourceList {
    let of = |c: &Value| resource_list(c.pointer(&format!("/resources/{field}")));
    let mut result = ResourceList::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        add(&mut result, &of(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in pod["spec"]["initContainers"].as_array().into_iter().flatten() {
        let own = of(c);
        let running = if c["restartPolicy"] == "Always" {
            add(&mut result, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut running = own;
            add(&mut running, &sidecars);
            running
        };
        max_list(&mut init_peak, &running);
    }
    max_list(&mut result, &init_peak);
    result
}

/// `PodRequests`: the effective requests and the pod's overhead.
pub fn pod_requests(pod: &Value) -> ResourceList {
    let mut requests = aggregate(pod, "requests");
    add(&mut requests, &resource_list(pod["spec"].get("overhead")));
    requests
}

/// `PodLimits`: the effective limits, with the overhead added to those that are set.
pub fn pod_limits(pod: &Value) -> ResourceList {
    let mut limits = aggregate(pod, "limits");
    for (name, q) in resource_list(pod["spec"].get("overhead")) {
        if let Some(limit) = limits.get_mut(&name).filter(|l| !l.is_zero()) {
            limit.add(&q);
        }
    }
    limits
}

/// `podComputeUsageHelper`: the quota resources a pod's (or a container's) requests and limits
/// make.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut usage = ResourceList::new();
    usage.insert("pods".into(), Quantity::count(1));
    for resource in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(resource) {
            usage.insert(resource.into(), *q);
            usage.insert(format!("{REQUESTS_PREFIX}{resource}"), *q);
        }
        if let Some(q) = limits.get(resource) {
            usage.insert(format!("limits.{resource}"), *q);
        }
    }
    for (resource, q) in requests {
        if resource.starts_with(HUGE_PAGES_PREFIX) {
            usage.insert(resource.clone(), *q);
            usage.insert(format!("{REQUESTS_PREFIX}{resource}"), *q);
        }
        if is_extended_resource(resource) {
            usage.insert(format!("{REQUESTS_PREFIX}{resource}"), *q);
        }
    }
    usage
}

/// Whether a pod still holds its resources (`QuotaV1Pod`): not Succeeded or Failed, and not
/// deleted longer ago than its grace period.
pub fn pod_counts(pod: &Value, now: i64) -> bool {
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        return false;
    }
    let meta = &pod["metadata"];
    let deleted = meta["deletionTimestamp"].as_str().and_then(unix_seconds);
    match (deleted, meta["deletionGracePeriodSeconds"].as_i64()) {
        (Some(at), Some(grace)) => now <= at.saturating_add(grace),
        _ => true,
    }
}

fn pod_usage(pod: &Value, now: i64) -> ResourceList {
    let mut usage = ResourceList::new();
    usage.insert("count/pods".into(), Quantity::count(1));
    if pod_counts(pod, now) {
        add(&mut usage, &compute_usage(&pod_requests(pod), &pod_limits(pod)));
    }
    usage
}

fn service_usage(service: &Value) -> ResourceList {
    let spec = &service["spec"];
    let ports = spec["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
    let count = |n: usize| Quantity::count(i64::try_from(n).unwrap_or(i64::MAX));
    let mut usage = ResourceList::new();
    usage.insert("count/services".into(), Quantity::count(1));
    usage.insert("services".into(), Quantity::count(1));
    usage.insert("services.loadbalancers".into(), Quantity::ZERO);
    usage.insert("services.nodeports".into(), Quantity::ZERO);
    match spec["type"].as_str() {
        Some("NodePort") => {
            usage.insert("services.nodeports".into(), count(ports.len()));
        }
        Some("LoadBalancer") => {
            let node_ports = if spec["allocateLoadBalancerNodePorts"] == Value::Bool(false) {
                ports.iter().filter(|p| p["nodePort"].as_i64().is_some_and(|n| n != 0)).count()
            } else {
                ports.len()
            };
            usage.insert("services.nodeports".into(), count(node_ports));
            usage.insert("services.loadbalancers".into(), Quantity::count(1));
        }
        _ => {}
    }
    usage
}

fn claim_usage(claim: &Value) -> ResourceList {
    let mut usage = ResourceList::new();
    usage.insert("persistentvolumeclaims".into(), Quantity::count(1));
    usage.insert("count/persistentvolumeclaims".into(), Quantity::count(1));
    let class = match claim["metadata"]["annotations"][BETA_STORAGE_CLASS].as_str() {
        Some(class) => Some(class),
        None => claim["spec"]["storageClassName"].as_str(),
    }
    .filter(|c| !c.is_empty());
    if let Some(class) = class {
        usage.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            Quantity::count(1),
        );
    }
    let requested = claim.pointer("/spec/resources/requests/storage").and_then(quantity);
    let allocated = claim.pointer("/status/allocatedResources/storage").and_then(quantity);
    let storage = match (requested, allocated) {
        (Some(r), Some(a)) if a.cmp_value(&r) == Ordering::Greater => Some(a),
        (r, _) => r,
    };
    if let Some(storage) = storage.map(|s| s.round_up()) {
        usage.insert("requests.storage".into(), storage);
        if let Some(class) = class {
            usage.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), storage);
        }
    }
    usage
}

/// An RFC 3339 time (`2024-05-01T12:00:00Z`, fractions and offsets allowed) as Unix seconds.
pub fn unix_seconds(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, m) = rest[1..].split_once(':')?;
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    // Days since the epoch of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

#[cfg(test)]
mod tests;
