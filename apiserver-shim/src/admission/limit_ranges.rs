//! LimitRanges at admission, as kube-apiserver's `LimitRanger` plugin applies them to a new pod
//! or PersistentVolumeClaim: the namespace's `Container` defaults fill in the requests and limits
//! a container leaves out (the pod is annotated `kubernetes.io/limit-ranger` with what was set),
//! then every item's `min`, `max` and `maxLimitRequestRatio` are checked, per `Container`, per
//! `Pod` (summed over its containers) and per `PersistentVolumeClaim` (its storage request). A
//! violation is a 403 with kube-apiserver's words, every one at once.

use std::collections::BTreeMap;

use carrel_machinery::quantity::parse_nanos;
use serde_json::{json, Map, Value};

use crate::api::{Api, ListParams, Target};
use crate::object::meta_str;
use crate::status::{ApiError, ApiResult};

/// The annotation that says what a LimitRange set on a pod.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// One item of a LimitRange (`spec.limits[]`), with the defaults the LimitRange API gives it.
#[derive(Debug, Default)]
struct Item {
    kind: String,
    min: BTreeMap<String, String>,
    max: BTreeMap<String, String>,
    default: BTreeMap<String, String>,
    default_request: BTreeMap<String, String>,
    ratio: BTreeMap<String, String>,
}

fn quantities(item: &Value, field: &str) -> BTreeMap<String, String> {
    item.get(field)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter().filter_map(|(name, q)| Some((name.clone(), q.as_str()?.to_owned()))).collect()
        })
        .unwrap_or_default()
}

impl Item {
    /// `SetDefaults_LimitRangeItem`: a `Container` item's `default` falls back on its `max`,
    /// and its `defaultRequest` on its `default`, then its `min`.
    fn of(item: &Value) -> Item {
        let mut read = Item {
            kind: item.get("type").and_then(Value::as_str).unwrap_or_default().to_owned(),
            min: quantities(item, "min"),
            max: quantities(item, "max"),
            default: quantities(item, "default"),
            default_request: quantities(item, "defaultRequest"),
            ratio: quantities(item, "maxLimitRequestRatio"),
        };
        if read.kind == "Container" {
            for (name, max) in &read.max {
                read.default.entry(name.clone()).or_insert_with(|| max.clone());
            }
            for (name, default) in &read.default {
                read.default_request.entry(name.clone()).or_insert_with(|| default.clone());
            }
            for (name, min) in &read.min {
                read.default_request.entry(name.clone()).or_insert_with(|| min.clone());
            }
        }
        read
    }
}

/// The items of the LimitRanges of `namespace`.
fn items(api: &Api, namespace: &str) -> ApiResult<Vec<Item>> {
    let Some(rt) = crate::resource::built_in("", "limitranges") else { return Ok(Vec::new()) };
    let target = Target { rt, namespace: Some(namespace.to_owned()) };
    let list = api.list(&target, &ListParams::default())?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|range| range.pointer("/spec/limits").and_then(Value::as_array).cloned())
        .flatten()
        .map(|item| Item::of(&item))
        .collect())
}

/// A new pod: its containers' defaults from the namespace's LimitRanges, then their bounds.
pub fn admit_pod(api: &Api, pod: &mut Value) -> ApiResult<()> {
    let Some(namespace) = meta_str(pod, "namespace").map(str::to_owned) else { return Ok(()) };
    let items = items(api, &namespace)?;
    if items.is_empty() {
        return Ok(());
    }
    set_defaults(&items, pod);
    let mut errors = Vec::new();
    for item in &items {
        match item.kind.as_str() {
            "Container" => {
                for container in containers(pod) {
                    check(item, "Container", &requests(container), &limits(container), &mut errors);
                }
            }
            "Pod" => {
                let (requests, limits) = pod_totals(pod);
                check(item, "Pod", &requests, &limits, &mut errors);
            }
            _ => {}
        }
    }
    refuse(pod, "pods", errors)
}

/// A new PersistentVolumeClaim: its storage request within the namespace's bounds.
pub fn admit_claim(api: &Api, claim: &Value) -> ApiResult<()> {
    let Some(namespace) = meta_str(claim, "namespace") else { return Ok(()) };
    let requested = claim.pointer("/spec/resources/requests");
    let requests = as_nanos(requested);
    let limits = as_nanos(claim.pointer("/spec/resources/limits"));
    let mut errors = Vec::new();
    for item in items(api, namespace)?.iter().filter(|i| i.kind == "PersistentVolumeClaim") {
        check(item, "PersistentVolumeClaim", &requests, &limits, &mut errors);
    }
    refuse(claim, "persistentvolumeclaims", errors)
}

fn refuse(object: &Value, plural: &str, errors: Vec<String>) -> ApiResult<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let name = meta_str(object, "name").unwrap_or_default();
    // Kubernetes' aggregate of errors: one as it is, several in brackets.
    let what = if errors.len() == 1 { errors.concat() } else { format!("[{}]", errors.join(", ")) };
    Err(ApiError::forbidden("", plural, name, &what))
}

/// The containers and init containers of a pod.
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["containers", "initContainers"]
        .into_iter()
        .filter_map(|list| pod.pointer(&format!("/spec/{list}")).and_then(Value::as_array))
        .flatten()
}

type Amounts = BTreeMap<String, (String, i128)>;

fn as_nanos(map: Option<&Value>) -> Amounts {
    map.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, q)| {
            let text = q.as_str()?;
            Some((name.clone(), (text.to_owned(), parse_nanos(text)?)))
        })
        .collect()
}

fn requests(container: &Value) -> Amounts {
    as_nanos(container.pointer("/resources/requests"))
}

fn limits(container: &Value) -> Amounts {
    as_nanos(container.pointer("/resources/limits"))
}

/// A pod's requests and limits as the `Pod` item bounds them: the containers' sum, or the
/// largest init container's amount where that is larger.
fn pod_totals(pod: &Value) -> (Amounts, Amounts) {
    let mut totals = (Amounts::new(), Amounts::new());
    let sum = |into: &mut Amounts, amounts: Amounts| {
        for (name, (_, n)) in amounts {
            let entry = into.entry(name).or_insert((String::new(), 0));
            entry.1 += n;
        }
    };
    let list = |field: &str| pod.pointer(&format!("/spec/{field}")).and_then(Value::as_array);
    for container in list("containers").into_iter().flatten() {
        sum(&mut totals.0, requests(container));
        sum(&mut totals.1, limits(container));
    }
    for init in list("initContainers").into_iter().flatten() {
        for (into, amounts) in [(&mut totals.0, requests(init)), (&mut totals.1, limits(init))] {
            for (name, (_, n)) in amounts {
                let entry = into.entry(name).or_insert((String::new(), 0));
                entry.1 = entry.1.max(n);
            }
        }
    }
    for (_, (text, n)) in totals.0.iter_mut().chain(totals.1.iter_mut()) {
        *text = show_nanos(*n);
    }
    totals
}

/// A nano-unit amount shown as a quantity (`1500m`, `3`, `2Gi` shown in bytes).
fn show_nanos(n: i128) -> String {
    if n % 1_000_000_000 == 0 {
        (n / 1_000_000_000).to_string()
    } else if n % 1_000_000 == 0 {
        format!("{}m", n / 1_000_000)
    } else {
        format!("{}n", n)
    }
}

/// `item`'s bounds on one set of requests and limits (`minConstraint`, `maxConstraint`,
/// `limitRequestRatioConstraint`).
fn check(item: &Item, kind: &str, requests: &Amounts, limits: &Amounts, errors: &mut Vec<String>) {
    for (name, min) in &item.min {
        let Some(bound) = parse_nanos(min) else { continue };
        match requests.get(name) {
            None => errors.push(format!(
                "minimum {name} usage per {kind} is {min}.  No request is specified"
            )),
            Some((text, n)) if *n < bound => errors
                .push(format!("minimum {name} usage per {kind} is {min}, but request is {text}")),
            Some(_) => {}
        }
    }
    for (name, max) in &item.max {
        let Some(bound) = parse_nanos(max) else { continue };
        match limits.get(name) {
            None => errors
                .push(format!("maximum {name} usage per {kind} is {max}.  No limit is specified")),
            Some((text, n)) if *n > bound => errors
                .push(format!("maximum {name} usage per {kind} is {max}, but limit is {text}")),
            Some(_) => {}
        }
    }
    for (name, ratio) in &item.ratio {
        let Some(bound) = parse_nanos(ratio) else { continue };
        let (Some((_, limit)), Some((_, request))) = (limits.get(name), requests.get(name)) else {
            errors.push(format!(
                "{name} max limit to request ratio per {kind} is {ratio}, but no request is specified or request is 0"
            ));
            continue;
        };
        if *request == 0 {
            errors.push(format!(
                "{name} max limit to request ratio per {kind} is {ratio}, but no request is specified or request is 0"
            ));
        } else if limit * 1_000_000_000 > bound * request {
            // The ratio as Go's %f prints it.
            let provided = *limit as f64 / *request as f64;
            errors.push(format!(
                "{name} max limit to request ratio per {kind} is {ratio}, but provided ratio is {provided:.6}"
            ));
        }
    }
}

/// Fill in the containers' requests and limits from the `Container` items' defaults, and
/// annotate the pod with what was set (`mergePodResourceRequirements`).
fn set_defaults(items: &[Item], pod: &mut Value) {
    let mut default = BTreeMap::new();
    let mut default_request = BTreeMap::new();
    for item in items.iter().filter(|i| i.kind == "Container") {
        for (name, q) in &item.default {
            default.entry(name.clone()).or_insert_with(|| q.clone());
        }
        for (name, q) in &item.default_request {
            default_request.entry(name.clone()).or_insert_with(|| q.clone());
        }
    }
    if default.is_empty() && default_request.is_empty() {
        return;
    }
    let mut said = Vec::new();
    for (list, what) in [("containers", "container"), ("initContainers", "init container")] {
        let Some(containers) =
            pod.pointer_mut(&format!("/spec/{list}")).and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let name = container.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let Some(c) = container.as_object_mut() else { continue };
            let resources = c.entry("resources").or_insert_with(|| json!({}));
            let Some(resources) = resources.as_object_mut() else { continue };
            let set_requests = fill(resources, "requests", &default_request);
            let set_limits = fill(resources, "limits", &default);
            if !set_requests.is_empty() {
                said.push(format!("{} request for {what} {name}", set_requests.join(", ")));
            }
            if !set_limits.is_empty() {
                said.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if said.is_empty() {
        return;
    }
    if let Some(meta) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            let text = format!("LimitRanger plugin set: {}", said.join("; "));
            annotations.insert(ANNOTATION.into(), text.into());
        }
    }
}

/// Put each of `defaults` missing from `resources[field]` in; the names put in, sorted.
fn fill(
    resources: &mut Map<String, Value>,
    field: &str,
    defaults: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut set = Vec::new();
    if defaults.is_empty() {
        return set;
    }
    let map = resources.entry(field).or_insert_with(|| json!({}));
    if let Some(map) = map.as_object_mut() {
        for (name, q) in defaults {
            if !map.contains_key(name) {
                map.insert(name.clone(), q.clone().into());
                set.push(name.clone());
            }
        }
    }
    if resources.get(field).and_then(Value::as_object).is_some_and(Map::is_empty) {
        resources.remove(field);
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::api::Write;

    fn limit_range(api: &Api, limits: Value) {
        let rt = crate::resource::built_in("", "limitranges").unwrap();
        let target = Target { rt, namespace: Some("default".into()) };
        let range = json!({"metadata": {"name": "bounds"}, "spec": {"limits": limits}});
        api.create(&target, range, &Write::by("test", false)).unwrap();
    }

    fn create_pod(api: &Api, resources: Value) -> ApiResult<Value> {
        let rt = crate::resource::built_in("", "pods").unwrap();
        let target = Target { rt, namespace: Some("default".into()) };
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "resources": resources}]}});
        api.create(&target, pod, &Write::by("test", false))
    }

    #[test]
    fn container_defaults_fill_in_what_a_container_leaves_out_and_say_so() {
        let (_dir, api) = crate::api::scratch();
        limit_range(
            &api,
            json!([{"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                    "defaultRequest": {"cpu": "100m"}}]),
        );
        let pod = create_pod(&api, json!({"limits": {"memory": "1Gi"}})).unwrap();
        let resources = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(resources["limits"], json!({"cpu": "500m", "memory": "1Gi"}));
        // memory's request came from its limit (pod defaulting); cpu's from defaultRequest.
        assert_eq!(resources["requests"], json!({"cpu": "100m", "memory": "1Gi"}));
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu request for container c; cpu limit for container c"
        );
    }

    #[test]
    fn bounds_are_refused_in_kube_apiservers_words_all_at_once() {
        let (_dir, api) = crate::api::scratch();
        limit_range(
            &api,
            json!([{"type": "Container", "min": {"cpu": "100m"}, "max": {"memory": "1Gi"},
                    "maxLimitRequestRatio": {"cpu": "2"}}]),
        );
        let err = create_pod(
            &api,
            json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "200m", "memory": "2Gi"}}),
        )
        .unwrap_err();
        assert_eq!(err.code(), 403);
        assert_eq!(
            err.to_status()["message"],
            "pods \"p\" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, \
             maximum memory usage per Container is 1Gi, but limit is 2Gi, \
             cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000]"
        );
        // Within bounds (max fills in the missing limit as the default), it is created.
        let pod = create_pod(&api, json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}))
            .unwrap();
        assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"]["memory"], "1Gi");
    }

    #[test]
    fn a_pod_item_bounds_the_sum_of_its_containers() {
        let (_dir, api) = crate::api::scratch();
        limit_range(&api, json!([{"type": "Pod", "max": {"cpu": "1"}}]));
        let rt = crate::resource::built_in("", "pods").unwrap();
        let target = Target { rt, namespace: Some("default".into()) };
        let two = |cpu: &str| {
            json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "a", "image": "x", "resources": {"limits": {"cpu": cpu}}},
                {"name": "b", "image": "x", "resources": {"limits": {"cpu": cpu}}}]}})
        };
        let err = api.create(&target, two("600m"), &Write::by("t", false)).unwrap_err();
        assert_eq!(
            err.to_status()["message"],
            "pods \"p\" is forbidden: maximum cpu usage per Pod is 1, but limit is 1200m"
        );
        api.create(&target, two("500m"), &Write::by("t", false)).unwrap();
    }
}
