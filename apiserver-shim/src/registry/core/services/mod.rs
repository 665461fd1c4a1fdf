//! Services (`services` in `v1`): how the API server serves them.

pub mod network;

use carrel_store::ListOptions as StoreListOptions;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use parking_lot::MutexGuard;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

use crate::api::{decode, prefix_for, Api};
use crate::defaults::{object_at, set_default, set_default_status};
use crate::object::go_quote as quote;
use crate::object::label_pairs;
use crate::object::meta_str;
use crate::object_names::{self as names, NameRule};
use crate::registry::{served, Strategy, Validate, ALL, STATUS};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::status::{ApiError, ApiResult};
use crate::table::{age_cell, col, definitions, name_cell, or_none, str_at, wide, AGE, NAME};
use crate::validation::{go_strings, labels, protocol, Errors, PORT_RANGE};

/// The `services` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Service", "services", "service", true, &["svc"], ALL, STATUS, &Services);

/// The strategy for Services.
#[derive(Debug)]
pub struct Services;

impl Validate for Services {
    type Object = Service;

    fn validate(&self, object: &Service, e: &mut Errors) {
        service(object.spec.as_ref().unwrap_or(&ServiceSpec::default()), e);
    }

    fn validate_update(&self, old: &Service, new: &Service, e: &mut Errors) {
        let zero = ServiceSpec::default();
        service_update(old.spec.as_ref().unwrap_or(&zero), new.spec.as_ref().unwrap_or(&zero), e);
    }
}

impl Strategy for Services {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Service
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035Label
    }

    /// `SetDefaults_Service`.
    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "type", json!("ClusterIP"));
            set_default(spec, "sessionAffinity", json!("None"));
            let kind = spec.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
            if matches!(kind.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
                set_default(spec, "internalTrafficPolicy", json!("Cluster"));
            }
            if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
                set_default(spec, "externalTrafficPolicy", json!("Cluster"));
            }
            if kind == "LoadBalancer" {
                set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
            }
            if spec.get("sessionAffinity") == Some(&json!("ClientIP")) {
                let config = spec.entry("sessionAffinityConfig").or_insert_with(|| json!({}));
                if let Some(config) = config.as_object_mut() {
                    let client = config.entry("clientIP").or_insert_with(|| json!({}));
                    if let Some(client) = client.as_object_mut() {
                        set_default(client, "timeoutSeconds", json!(10800));
                    }
                }
            }
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                    set_default(port, "protocol", json!("TCP"));
                    let unset = match port.get("targetPort") {
                        None | Some(Value::Null) => true,
                        Some(Value::String(s)) => s.is_empty(),
                        Some(n) => n.as_i64() == Some(0),
                    };
                    if let Some(p) = port.get("port").cloned().filter(|_| unset) {
                        port.insert("targetPort".into(), p);
                    }
                }
            }
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn create_defaults(&self, object: &mut Value) {
        set_default_status(object, json!({"loadBalancer": {}}));
    }

    fn prepare_update(&self, old: &Value, new: &mut Value) {
        network::drop_type_dependent(old, new);
        keep_allocated(old, new);
    }

    /// Two Services written at once cannot both take one cluster IP or node port.
    fn write_lock<'a>(&self, api: &'a Api) -> Option<MutexGuard<'a, ()>> {
        Some(api.services_lock.lock())
    }

    /// A Service is given its cluster IPs and node ports, asked for or free, against those the
    /// other stored Services hold.
    fn before_store(
        &self,
        api: &Api,
        name: &str,
        old: Option<&Value>,
        new: &mut Value,
        status_only: bool,
    ) -> ApiResult<()> {
        if status_only {
            return Ok(());
        }
        // What others hold is read only when it is looked at: on a store of many Services
        // (`carrel up`'s host), a write that keeps its values does not list them all.
        let held = if api.service_network.needs_held(old, new) {
            held_except(api, meta_str(new, "namespace").unwrap_or_default(), name)?
        } else {
            network::Held::default()
        };
        api.service_network
            .assign(old, new, &held)
            .map_err(|e| ApiError::invalid("", "Service", name, e.0))
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col("Type", "string", "The type of the service"),
            col("Cluster-IP", "string", "The cluster IP of the service"),
            col("External-IP", "string", "The external IPs of the service"),
            col("Port(s)", "string", "The ports of the service"),
            AGE,
            wide(
                "Selector",
                "Route service traffic to pods with label keys and values matching this selector.",
            ),
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        let ports = o
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        format!(
                            "{}/{}",
                            p.get("port").map(|v| v.to_string()).unwrap_or_default(),
                            p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let selector = label_pairs(o.pointer("/spec/selector"));
        vec![
            name,
            json!(str_at(o, "/spec/type")),
            json!(or_none(str_at(o, "/spec/clusterIP").into())),
            json!("<none>"),
            json!(or_none(ports)),
            age,
            json!(or_none(selector)),
        ]
    }
}

/// The cluster IPs and node ports the stored Services hold, but for `namespace/name`'s.
fn held_except(api: &Api, namespace: &str, name: &str) -> ApiResult<network::Held> {
    let page = api
        .store()
        .list(&prefix_for(&TYPE, None), &StoreListOptions::default())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut held = network::Held::default();
    for object in &page.items {
        let service = decode(object)?;
        let this = meta_str(&service, "namespace") == Some(namespace)
            && meta_str(&service, "name") == Some(name);
        if !this {
            held.add(&service);
        }
    }
    Ok(held)
}

/// A Service's cluster IPs: `clusterIPs`, else `clusterIP` alone.
pub(crate) fn cluster_ips(spec: &ServiceSpec) -> Vec<&str> {
    let list: Vec<&str> = spec.cluster_ips.iter().flatten().map(String::as_str).collect();
    match spec.cluster_ip.as_deref().unwrap_or_default() {
        one if list.is_empty() && !one.is_empty() => vec![one],
        _ => list,
    }
}

pub(crate) fn headless(spec: &ServiceSpec) -> bool {
    spec.type_.as_deref() == Some("ClusterIP") && cluster_ips(spec).first() == Some(&"None")
}

/// `ValidateService`, in part.
pub(crate) fn service(spec: &ServiceSpec, e: &mut Errors) {
    let kind = spec.type_.as_deref().unwrap_or_default();
    let ports = spec.ports.as_deref().unwrap_or_default();
    if ports.is_empty() && !headless(spec) && kind != "ExternalName" {
        e.required("spec.ports", "");
    }
    if kind == "ExternalName" {
        if cluster_ips(spec).iter().any(|ip| !ip.is_empty()) {
            e.forbidden("spec.clusterIPs", "may not be set for ExternalName services");
        }
        let name = spec.external_name.as_deref().unwrap_or_default();
        let cname = name.strip_suffix('.').unwrap_or(name);
        if cname.is_empty() {
            e.required("spec.externalName", "");
        } else {
            e.invalid_each("spec.externalName", cname, names::dns1123_subdomain(cname));
        }
    }
    let mut taken = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = port.name.as_deref().unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            e.required(&format!("{path}.name"), "");
        } else if !name.is_empty() {
            e.invalid_each(&format!("{path}.name"), name, names::dns1123_label(name));
            if !taken.insert(name) {
                e.duplicate(&format!("{path}.name"), &quote(name));
            }
        }
        if !(1..=65535).contains(&port.port) {
            e.invalid(&format!("{path}.port"), &port.port.to_string(), PORT_RANGE);
        }
        protocol(port.protocol.as_deref(), &path, e);
        match &port.target_port {
            Some(IntOrString::String(target)) => {
                e.invalid_each(&format!("{path}.targetPort"), target, names::port_name(target))
            }
            Some(IntOrString::Int(n)) if !(1..=65535).contains(n) => {
                e.invalid(&format!("{path}.targetPort"), &n.to_string(), PORT_RANGE)
            }
            _ => {}
        }
        if let Some(app) = port.app_protocol.as_deref() {
            e.invalid_each(&format!("{path}.appProtocol"), app, names::qualified_name(app));
        }
    }
    labels(spec.selector.as_ref(), "spec.selector", e);
    match spec.session_affinity.as_deref().unwrap_or_default() {
        "ClientIP" | "None" => {}
        "" => e.required("spec.sessionAffinity", ""),
        other => e.not_supported("spec.sessionAffinity", &quote(other), &["ClientIP", "None"]),
    }
    match kind {
        "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName" => {}
        "" => e.required("spec.type", ""),
        other => e.not_supported(
            "spec.type",
            &quote(other),
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ),
    }
    if kind == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if port.node_port.unwrap_or(0) != 0 {
                e.forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                );
            }
        }
    }
    cluster_ip_values(spec, e);
    let mut seen = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let key = (port.protocol.as_deref().unwrap_or_default(), port.port);
        if !seen.insert(key) {
            e.duplicate(
                &format!("spec.ports[{i}]"),
                &format!(
                    "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), \
                     Port:{}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, \
                     NodePort:0}}",
                    quote(key.0),
                    key.1
                ),
            );
        }
    }
}

/// `validateClusterIPs`, the values: at most two, `None` alone, each an IP, the first as
/// `clusterIP` says.
fn cluster_ip_values(spec: &ServiceSpec, e: &mut Errors) {
    if spec.type_.as_deref() == Some("ExternalName") {
        return;
    }
    let list: Vec<&str> = spec.cluster_ips.iter().flatten().map(String::as_str).collect();
    let one = spec.cluster_ip.as_deref().unwrap_or_default();
    let shown = go_strings("string", Some(&list[..]));
    if one.is_empty() && !list.is_empty() {
        e.invalid("spec.clusterIPs", &shown, "must be empty when clusterIP is empty");
    } else if !one.is_empty() && list.first().is_some_and(|first| *first != one) {
        e.invalid("spec.clusterIPs[0]", &quote(list[0]), "must be same as clusterIP");
    }
    if list.len() > 2 {
        e.invalid("spec.clusterIPs", &shown, "may only hold up to 2 values");
    }
    for (i, ip) in cluster_ips(spec).iter().enumerate() {
        let path = format!("spec.clusterIPs[{i}]");
        if *ip == "None" {
            if i > 0 {
                e.invalid(&path, &quote(ip), "may only be set to 'None' for the primary IP");
            }
            continue;
        }
        if ip.parse::<std::net::IpAddr>().is_err() {
            e.invalid(
                &path,
                &quote(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            );
        }
    }
}

/// `validateUpgradeDowngradeClusterIPs` and `validateUpgradeDowngradeIPFamilies`.
fn service_update(old: &ServiceSpec, new: &ServiceSpec, e: &mut Errors) {
    let external = |spec: &ServiceSpec| spec.type_.as_deref() == Some("ExternalName");
    if external(old) || external(new) {
        return;
    }
    let (before, after) = (cluster_ips(old), cluster_ips(new));
    let shown_ips = go_strings("string", Some(&after[..]).filter(|_| !after.is_empty()));
    let single_stack = new.ip_family_policy.as_deref() == Some("SingleStack");
    if !(headless(old) && headless(new)) {
        if before.len() == after.len() {
            for (i, (a, b)) in before.iter().zip(&after).enumerate() {
                if a != b {
                    e.invalid(
                        &format!("spec.clusterIPs[{i}]"),
                        &shown_ips,
                        "may not change once set",
                    );
                }
            }
        } else if before.len() > after.len() {
            if after.is_empty() {
                e.invalid("spec.clusterIPs[0]", &shown_ips, "primary clusterIP can not be unset");
            } else if after[0] != before[0] {
                e.invalid("spec.clusterIPs[0]", &shown_ips, "may not change once set");
            }
            if after.len() == 1 && !single_stack {
                e.invalid(
                    "spec.clusterIPs[0]",
                    &shown_ips,
                    "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP",
                );
            }
        } else if !before.is_empty() && after[0] != before[0] {
            e.invalid("spec.clusterIPs[0]", &shown_ips, "may not change once set");
        }
    }
    if headless(old) || headless(new) {
        return;
    }
    let (before, after) = (
        old.ip_families.as_deref().unwrap_or_default(),
        new.ip_families.as_deref().unwrap_or_default(),
    );
    let shown_families = go_strings("core.IPFamily", new.ip_families.as_deref());
    let path = "spec.ipFamilies[0]";
    if before.len() == after.len() {
        if before != after {
            e.invalid(path, &shown_families, "may not change once set");
        }
    } else if before.len() > after.len() {
        if after.is_empty() {
            e.invalid(path, &shown_families, "primary ipFamily can not be unset");
        } else if after[0] != before[0] {
            e.invalid(path, &shown_ips, "may not change once set");
        }
        if after.len() == 1 && !single_stack {
            e.invalid(
                path,
                &shown_ips,
                "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary ipFamily",
            );
        }
    } else if !before.is_empty() && after[0] != before[0] {
        e.invalid(path, &shown_ips, "may not change once set");
    }
}

/// A Service update that leaves out its cluster IPs or IP families keeps the old ones, as
/// kube-apiserver's registry does (`patchAllocatedValues`).
fn keep_allocated(old: &Value, new: &mut Value) {
    let external =
        |v: &Value| v.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    if external(old) || external(new) {
        return;
    }
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let unset = |spec: &Map<String, Value>, key: &str| match spec.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    let cluster_ip_unset = unset(spec, "clusterIP");
    for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        let carries = match key {
            "clusterIPs" => {
                cluster_ip_unset || spec.get("clusterIP") == old.pointer("/spec/clusterIP")
            }
            _ => true,
        };
        if unset(spec, key) && carries {
            if let Some(value) = old.pointer(&format!("/spec/{key}")).filter(|v| !v.is_null()) {
                spec.insert(key.into(), value.clone());
            }
        }
    }
}
