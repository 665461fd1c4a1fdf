//! EndpointSlices (`endpointslices` in `discovery.k8s.io/v1`): how the API server serves them.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use serde_json::{json, Value};

use crate::defaults::set_default;
use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::core::endpoints::{endpoint_ip, shortened};
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, definitions, name_cell, str_at, AGE, NAME};
use crate::validation::{labels, Errors};

/// The `endpointslices` resource type.
pub const TYPE: ResourceType = served(
    "discovery.k8s.io",
    "v1",
    "EndpointSlice",
    "endpointslices",
    "endpointslice",
    true,
    NONE,
    NONE,
    &[],
    &EndpointSlices,
);

/// The address types a slice may hold, as kube-apiserver lists them.
pub const ADDRESS_TYPES: &[&str] = &["FQDN", "IPv4", "IPv6"];
/// The most endpoints a slice holds.
pub const MAX_ENDPOINTS: usize = 1000;
/// The most ports a slice holds.
pub const MAX_PORTS: usize = 100;
/// The most addresses an endpoint holds.
pub const MAX_ADDRESSES: usize = 100;
/// The most `deprecatedTopology` labels an endpoint holds.
const MAX_TOPOLOGY_LABELS: usize = 16;
/// The most zones an endpoint's hints name.
const MAX_HINTS: usize = 8;

/// The strategy for EndpointSlices.
#[derive(Debug)]
pub struct EndpointSlices;

impl Validate for EndpointSlices {
    type Object = EndpointSlice;

    /// `ValidateEndpointSlice`.
    fn validate(&self, slice: &EndpointSlice, e: &mut Errors) {
        let kind = slice.address_type.as_str();
        match kind {
            "" => e.required("addressType", ""),
            k if !ADDRESS_TYPES.contains(&k) => {
                e.not_supported("addressType", &quote(k), ADDRESS_TYPES)
            }
            _ => {}
        }
        endpoints(&slice.endpoints, kind, e);
        ports(slice.ports.as_deref().unwrap_or_default(), e);
    }

    /// `ValidateEndpointSliceUpdate`: the address type is immutable.
    fn validate_update(&self, old: &EndpointSlice, new: &EndpointSlice, e: &mut Errors) {
        if old.address_type != new.address_type {
            e.invalid("addressType", &quote(&new.address_type), "field is immutable");
        }
    }
}

impl Strategy for EndpointSlices {
    fn defaults(&self, object: &mut Value) {
        let ports = object.get_mut("ports").and_then(Value::as_array_mut);
        for port in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
            set_default(port, "name", json!(""));
            set_default(port, "protocol", json!("TCP"));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn has_generation(&self, _rt: &ResourceType) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col("AddressType", "string", "The type of address the slice holds."),
            col("Ports", "string", "The network ports each endpoint of the slice exposes."),
            col("Endpoints", "string", "The addresses of the slice's endpoints."),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        vec![
            name_cell(o),
            json!(str_at(o, "/addressType")),
            json!(ports_cell(o)),
            json!(endpoints_cell(o)),
            age_cell(o),
        ]
    }
}

/// kubectl's list cell: the first three entries, `+ N more...`, `<unset>` for none.
fn unset_or(list: &[String]) -> String {
    match shortened(list, list.len()) {
        s if s.is_empty() => "<unset>".into(),
        s => s,
    }
}

/// The Ports cell: each port's number, else its name, else `*` (all ports).
fn ports_cell(o: &Value) -> String {
    let ports = o.get("ports").and_then(Value::as_array).into_iter().flatten();
    let list: Vec<String> = ports
        .map(|p| {
            match (p.get("port").and_then(Value::as_i64), p.get("name").and_then(Value::as_str)) {
                (Some(n), _) => n.to_string(),
                (None, Some(name)) => name.to_owned(),
                (None, None) => "*".into(),
            }
        })
        .collect();
    unset_or(&list)
}

/// The Endpoints cell: every address of every endpoint.
fn endpoints_cell(o: &Value) -> String {
    let endpoints = o.get("endpoints").and_then(Value::as_array).into_iter().flatten();
    let list: Vec<String> = endpoints
        .flat_map(|ep| ep.get("addresses").and_then(Value::as_array).into_iter().flatten())
        .map(|a| a.as_str().unwrap_or_default().to_owned())
        .collect();
    unset_or(&list)
}

/// `validateEndpoints`.
fn endpoints(list: &[Endpoint], kind: &str, e: &mut Errors) {
    if list.len() > MAX_ENDPOINTS {
        too_many(e, "endpoints", list.len(), MAX_ENDPOINTS);
    }
    for (i, endpoint) in list.iter().enumerate() {
        let path = format!("endpoints[{i}]");
        let addresses_path = format!("{path}.addresses");
        if endpoint.addresses.is_empty() {
            e.required(&addresses_path, "must contain at least 1 address");
        } else if endpoint.addresses.len() > MAX_ADDRESSES {
            too_many(e, &addresses_path, endpoint.addresses.len(), MAX_ADDRESSES);
        }
        for (j, address) in endpoint.addresses.iter().enumerate() {
            address_of(kind, address, &format!("{addresses_path}[{j}]"), e);
        }
        if let Some(node) = endpoint.node_name.as_deref() {
            e.invalid_each(&format!("{path}.nodeName"), node, names::dns1123_subdomain(node));
        }
        let topology = endpoint.deprecated_topology.as_ref();
        let topology_path = format!("{path}.deprecatedTopology");
        if let Some(n) = topology.map(|t| t.len()).filter(|n| *n > MAX_TOPOLOGY_LABELS) {
            too_many(e, &topology_path, n, MAX_TOPOLOGY_LABELS);
        }
        labels(topology, &topology_path, e);
        if topology.is_some_and(|t| t.contains_key("topology.kubernetes.io/zone")) {
            e.invalid(
                &format!("{topology_path}[topology.kubernetes.io/zone]"),
                "\"zone\"",
                "use the zone field instead",
            );
        }
        if let Some(hostname) = endpoint.hostname.as_deref() {
            e.invalid_each(&format!("{path}.hostname"), hostname, names::dns1123_label(hostname));
        }
        let zones = endpoint.hints.as_ref().and_then(|h| h.for_zones.as_deref());
        if let Some(zones) = zones {
            let zones_path = format!("{path}.hints.forZones");
            if zones.len() > MAX_HINTS {
                too_many(e, &zones_path, zones.len(), MAX_HINTS);
            }
            let mut seen = HashSet::new();
            for (j, zone) in zones.iter().enumerate() {
                let zone_path = format!("{zones_path}[{j}].name");
                if !seen.insert(zone.name.as_str()) {
                    e.duplicate(&zone_path, &quote(&zone.name));
                }
                e.invalid_each(&zone_path, &zone.name, names::label_value(&zone.name));
            }
        }
    }
}

/// One address, checked by the slice's address type (any other type is not checked).
fn address_of(kind: &str, address: &str, path: &str, e: &mut Errors) {
    match kind {
        "IPv4" | "IPv6" => {
            let ip = address.parse::<IpAddr>().ok();
            match ip.filter(|ip| ip.is_ipv4() == (kind == "IPv4")) {
                Some(ip) => endpoint_ip(ip, address, path, e),
                None => {
                    e.invalid(path, &quote(address), &format!("must be a valid {kind} address"))
                }
            }
        }
        "FQDN" => fqdn(address, path, e),
        _ => {}
    }
}

/// `IsFullyQualifiedDomainName`.
fn fqdn(name: &str, path: &str, e: &mut Errors) {
    if name.is_empty() {
        return e.required(path, "");
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let errors = names::dns1123_subdomain(name);
    if !errors.is_empty() {
        return e.invalid(path, &quote(name), &errors.join(","));
    }
    if !name.contains('.') {
        return e.invalid(
            path,
            &quote(name),
            "should be a domain with at least two segments separated by dots",
        );
    }
    for label in name.split('.') {
        let errors = names::dns1123_label(label);
        if !errors.is_empty() {
            e.invalid(path, &quote(label), &errors.join(","));
        }
    }
}

/// `validatePorts`: at most [`MAX_PORTS`], unique DNS-label names, a supported protocol.
fn ports(list: &[EndpointPort], e: &mut Errors) {
    if list.len() > MAX_PORTS {
        too_many(e, "ports", list.len(), MAX_PORTS);
    }
    let mut taken = HashSet::new();
    for (i, port) in list.iter().enumerate() {
        let path = format!("ports[{i}]");
        let name = port.name.as_deref().unwrap_or_default();
        if !name.is_empty() {
            e.invalid_each(&format!("{path}.name"), name, names::dns1123_label(name));
        }
        if !taken.insert(name) {
            e.duplicate(&format!("{path}.name"), &quote(name));
        }
        match port.protocol.as_deref() {
            None => e.required(&format!("{path}.protocol"), ""),
            Some("TCP" | "UDP" | "SCTP") => {}
            Some(other) => {
                e.not_supported(&format!("{path}.protocol"), &quote(other), &["SCTP", "TCP", "UDP"])
            }
        }
        if let Some(app) = port.app_protocol.as_deref() {
            e.invalid_each(&format!("{path}.appProtocol"), app, names::qualified_name(app));
        }
    }
}

/// `field.TooMany`: `Too many: <n>: must have at most <max> items`.
fn too_many(e: &mut Errors, field: &str, n: usize, max: usize) {
    e.push("FieldValueTooMany", field, format!("Too many: {n}: must have at most {max} items"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(value: Value) -> EndpointSlice {
        let mut value = value;
        value["metadata"] = json!({"name": "web-abcde"});
        serde_json::from_value(value).unwrap()
    }

    fn causes(value: Value) -> Vec<(String, String)> {
        let mut e = Errors::default();
        EndpointSlices.validate(&slice(value), &mut e);
        e.0.into_iter().map(|c| (c.field, c.message)).collect()
    }

    fn fields(value: Value) -> Vec<String> {
        causes(value).into_iter().map(|(f, _)| f).collect()
    }

    #[test]
    fn a_slice_as_the_controller_writes_it_is_valid() {
        let found = causes(json!({
            "addressType": "IPv4",
            "endpoints": [{
                "addresses": ["10.0.0.1"],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "node-1", "zone": "a", "hostname": "web-0",
                "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "default"},
            }],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "", "protocol": "UDP"}],
        }));
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn addresses_are_checked_by_the_address_type() {
        assert_eq!(fields(json!({"addressType": "", "endpoints": []})), ["addressType"]);
        let found = causes(json!({"addressType": "IP", "endpoints": []}));
        assert_eq!(
            found[0].1,
            "Unsupported value: \"IP\": supported values: \"FQDN\", \"IPv4\", \"IPv6\""
        );
        let v4 = causes(json!({"addressType": "IPv4", "endpoints": [
            {"addresses": ["fd00::1"]}, {"addresses": ["127.0.0.1"]}, {"addresses": []},
        ]}));
        assert_eq!(v4[0].0, "endpoints[0].addresses[0]");
        assert_eq!(v4[0].1, "Invalid value: \"fd00::1\": must be a valid IPv4 address");
        assert!(v4[1].1.contains("loopback"), "{v4:?}");
        assert_eq!(v4[2].0, "endpoints[2].addresses");
        assert_eq!(v4[2].1, "Required value: must contain at least 1 address");
        assert_eq!(
            fields(json!({"addressType": "IPv6", "endpoints": [{"addresses": ["10.0.0.1"]}]})),
            ["endpoints[0].addresses[0]"]
        );
        assert!(fields(
            json!({"addressType": "FQDN", "endpoints": [{"addresses": ["db.example.com"]}]})
        )
        .is_empty());
        assert_eq!(
            fields(json!({"addressType": "FQDN", "endpoints": [{"addresses": ["localhost"]}]})),
            ["endpoints[0].addresses[0]"]
        );
    }

    #[test]
    fn endpoints_ports_and_topology_are_bounded() {
        let many: Vec<Value> = (0..1001)
            .map(|i| json!({"addresses": [format!("10.0.{}.{}", i / 200, i % 200 + 1)]}))
            .collect();
        let found = causes(json!({"addressType": "IPv4", "endpoints": many}));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "endpoints");
        assert_eq!(found[0].1, "Too many: 1001: must have at most 1000 items");
        let ports: Vec<Value> = (0..101)
            .map(|i| json!({"name": format!("p{i}"), "port": 1000 + i, "protocol": "TCP"}))
            .collect();
        assert_eq!(
            fields(json!({"addressType": "IPv4", "endpoints": [], "ports": ports})),
            ["ports"]
        );
        let found = fields(json!({"addressType": "IPv4", "endpoints": [{
            "addresses": ["10.0.0.1"], "nodeName": "Node_1", "hostname": "a.b",
            "deprecatedTopology": {"topology.kubernetes.io/zone": "a"},
        }]}));
        assert_eq!(
            found,
            [
                "endpoints[0].nodeName",
                "endpoints[0].deprecatedTopology[topology.kubernetes.io/zone]",
                "endpoints[0].hostname"
            ]
        );
    }

    #[test]
    fn port_names_are_unique_labels_with_a_protocol() {
        let found = causes(json!({"addressType": "IPv4", "endpoints": [], "ports": [
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "http", "port": 81, "protocol": "TCP"},
            {"name": "Bad_Name", "port": 82, "protocol": "ICMP"},
            {"name": "x", "port": 83},
        ]}));
        let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["ports[1].name", "ports[2].name", "ports[2].protocol", "ports[3].protocol"]
        );
        assert_eq!(found[0].1, "Duplicate value: \"http\"");
    }

    #[test]
    fn the_address_type_is_immutable() {
        let (old, new) = (
            slice(json!({"addressType": "IPv4", "endpoints": []})),
            slice(json!({"addressType": "IPv6", "endpoints": []})),
        );
        let mut e = Errors::default();
        EndpointSlices.validate_update(&old, &new, &mut e);
        assert_eq!(e.0[0].message, "Invalid value: \"IPv6\": field is immutable");
        let mut e = Errors::default();
        EndpointSlices.validate_update(&old, &old, &mut e);
        assert!(e.0.is_empty());
    }

    #[test]
    fn cells_shorten_as_kubectl_does() {
        let o = json!({"addressType": "IPv4", "endpoints": [
            {"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]},
            {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]},
        ], "ports": [{"name": "http", "port": 80}, {"name": "dns"}, {}]});
        assert_eq!(ports_cell(&o), "80,dns,*");
        assert_eq!(endpoints_cell(&o), "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...");
        let empty = json!({"addressType": "IPv4", "endpoints": []});
        assert_eq!(ports_cell(&empty), "<unset>");
        assert_eq!(endpoints_cell(&empty), "<unset>");
    }
}
