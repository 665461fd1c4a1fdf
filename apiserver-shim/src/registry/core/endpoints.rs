//! Endpoints (`endpoints` in `v1`): how the API server serves them.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, Endpoints as Object};
use serde_json::{json, Value};

use crate::defaults::set_default;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, definitions, name_cell, AGE, NAME};
use crate::validation::{protocol, Errors, PORT_RANGE};

/// The `endpoints` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Endpoints", "endpoints", "endpoints", true, &["ep"], NONE, &[], &Endpoints);

/// What kube-apiserver 1.33 tells every client of v1 Endpoints.
pub const DEPRECATED: &str =
    "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice";

/// The strategy for Endpoints.
#[derive(Debug)]
pub struct Endpoints;

impl Validate for Endpoints {
    type Object = Object;

    /// `ValidateEndpoints`: each subset has an address, each address a usable IP, each port a
    /// name (when there are several), a number and a protocol.
    fn validate(&self, object: &Object, e: &mut Errors) {
        for (i, subset) in object.subsets.iter().flatten().enumerate() {
            let path = format!("subsets[{i}]");
            let (ready, not_ready) = (
                subset.addresses.as_deref().unwrap_or_default(),
                subset.not_ready_addresses.as_deref().unwrap_or_default(),
            );
            if ready.is_empty() && not_ready.is_empty() {
                e.required(&path, "must specify `addresses` or `notReadyAddresses`");
            }
            for (j, address) in ready.iter().enumerate() {
                endpoint_address(address, &format!("{path}.addresses[{j}]"), e);
            }
            for (j, address) in not_ready.iter().enumerate() {
                endpoint_address(address, &format!("{path}.notReadyAddresses[{j}]"), e);
            }
            let ports = subset.ports.as_deref().unwrap_or_default();
            for (j, port) in ports.iter().enumerate() {
                endpoint_port(port, ports.len() > 1, &format!("{path}.ports[{j}]"), e);
            }
        }
    }
}

impl Strategy for Endpoints {
    fn defaults(&self, object: &mut Value) {
        let subsets = object.get_mut("subsets").and_then(Value::as_array_mut);
        for subset in subsets.into_iter().flatten() {
            let ports = subset.get_mut("ports").and_then(Value::as_array_mut);
            for port in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
                set_default(port, "protocol", json!("TCP"));
            }
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn deprecation_warning(&self) -> Option<&'static str> {
        Some(DEPRECATED)
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col("Endpoints", "string", "The addresses and ports of the endpoints."),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        vec![name_cell(o), json!(endpoints_cell(o)), age_cell(o)]
    }
}

/// How many entries a list cell shows before `+ N more...`, as kubectl prints them.
pub(crate) const SHOWN: usize = 3;

/// A list cell: the first [`SHOWN`] of `count` entries, then `+ N more...`.
pub(crate) fn shortened(list: &[String], count: usize) -> String {
    let shown = list.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(",");
    if count > SHOWN {
        format!("{shown} + {} more...", count - SHOWN)
    } else {
        shown
    }
}

/// kubectl's Endpoints cell: `ip:port` of the ready addresses for each port (the IP alone for a
/// subset without ports), `<none>` without subsets.
fn endpoints_cell(o: &Value) -> String {
    let Some(subsets) = o.get("subsets").and_then(Value::as_array).filter(|s| !s.is_empty()) else {
        return "<none>".into();
    };
    let mut list = Vec::new();
    let mut count = 0;
    for subset in subsets {
        let addresses: Vec<&str> = subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|a| a.get("ip").and_then(Value::as_str).unwrap_or_default())
            .collect();
        let ports: Vec<i64> = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| p.get("port").and_then(Value::as_i64).unwrap_or_default())
            .collect();
        if ports.is_empty() {
            count += addresses.len();
            list.extend(addresses.iter().map(|ip| (*ip).to_owned()));
            continue;
        }
        for port in ports {
            count += addresses.len();
            list.extend(addresses.iter().map(|ip| match ip.parse::<IpAddr>() {
                Ok(IpAddr::V6(_)) => format!("[{ip}]:{port}"),
                _ => format!("{ip}:{port}"),
            }));
        }
    }
    shortened(&list, count)
}

/// `validateEndpointAddress`.
fn endpoint_address(address: &EndpointAddress, path: &str, e: &mut Errors) {
    let ip_path = format!("{path}.ip");
    match address.ip.parse::<IpAddr>() {
        Ok(ip) => endpoint_ip(ip, &address.ip, &ip_path, e),
        Err(_) => e.invalid(
            &ip_path,
            &crate::object::go_quote(&address.ip),
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ),
    }
    if let Some(hostname) = address.hostname.as_deref().filter(|h| !h.is_empty()) {
        e.invalid_each(&format!("{path}.hostname"), hostname, names::dns1123_label(hostname));
    }
    if let Some(node) = address.node_name.as_deref() {
        e.invalid_each(&format!("{path}.nodeName"), node, names::dns1123_subdomain(node));
    }
}

/// `ValidateEndpointIP`: an endpoint's IP may not be one no other host can reach, unless the
/// server writes it (the API server's own address, [`crate::validation::server_write`]).
pub(crate) fn endpoint_ip(ip: IpAddr, shown: &str, path: &str, e: &mut Errors) {
    if crate::validation::server_write() {
        return;
    }
    let why = match ip {
        ip if ip.is_unspecified() => Some(format!("may not be unspecified ({ip})")),
        ip if ip.is_loopback() => {
            Some("may not be in the loopback range (127.0.0.0/8, ::1/128)".into())
        }
        IpAddr::V4(v4) if v4.is_link_local() => {
            Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)".into())
        }
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => {
            Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)".into())
        }
        IpAddr::V4(v4) if v4.octets()[..3] == [224, 0, 0] => {
            Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into())
        }
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xff00 && v6.segments()[0] & 0xf == 2 => {
            Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into())
        }
        _ => None,
    };
    if let Some(why) = why {
        e.invalid(path, &crate::object::go_quote(shown), &why);
    }
}

/// `validateEndpointPort`: a name (required when the subset has several ports), a port number
/// and a protocol.
fn endpoint_port(port: &EndpointPort, name_required: bool, path: &str, e: &mut Errors) {
    let name = port.name.as_deref().unwrap_or_default();
    if name_required && name.is_empty() {
        e.required(&format!("{path}.name"), "");
    } else if !name.is_empty() {
        e.invalid_each(&format!("{path}.name"), name, names::dns1123_label(name));
    }
    if !(1..=65535).contains(&port.port) {
        e.invalid(&format!("{path}.port"), &port.port.to_string(), PORT_RANGE);
    }
    protocol(port.protocol.as_deref(), path, e);
    if let Some(app) = port.app_protocol.as_deref() {
        e.invalid_each(&format!("{path}.appProtocol"), app, names::qualified_name(app));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes(object: Value) -> Vec<(String, String)> {
        let object: Object = serde_json::from_value(object).unwrap();
        let mut e = Errors::default();
        Endpoints.validate(&object, &mut e);
        e.0.into_iter().map(|c| (c.field.clone(), c.message.clone())).collect()
    }

    #[test]
    fn subsets_need_an_address_usable_ips_and_named_ports() {
        assert!(causes(json!({"metadata": {"name": "web"}, "subsets": [{
            "addresses": [{"ip": "10.0.0.1", "nodeName": "n1"}],
            "notReadyAddresses": [{"ip": "fd00::1"}],
            "ports": [{"port": 80, "protocol": "TCP"}],
        }]}))
        .is_empty());
        let found = causes(json!({"metadata": {"name": "web"}, "subsets": [
            {"ports": [{"port": 80, "protocol": "TCP"}]},
            {"addresses": [{"ip": "127.0.0.1"}, {"ip": "nope"}, {"ip": "169.254.1.1"}],
             "ports": [{"port": 0, "protocol": "TCP"}, {"name": "b", "port": 81, "protocol": "ICMP"}]},
        ]}));
        let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "subsets[0]",
                "subsets[1].addresses[0].ip",
                "subsets[1].addresses[1].ip",
                "subsets[1].addresses[2].ip",
                "subsets[1].ports[0].name",
                "subsets[1].ports[0].port",
                "subsets[1].ports[1].protocol",
            ],
            "{found:?}"
        );
        assert!(found[1].1.contains("loopback"), "{found:?}");
        assert!(found[3].1.contains("link-local range"), "{found:?}");
    }

    #[test]
    fn the_endpoints_cell_lists_ready_addresses_by_port_as_kubectl_does() {
        assert_eq!(endpoints_cell(&json!({"metadata": {"name": "web"}})), "<none>");
        let two = json!({"subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
            "notReadyAddresses": [{"ip": "10.0.0.3"}],
            "ports": [{"port": 8080}],
        }]});
        assert_eq!(endpoints_cell(&two), "10.0.0.1:8080,10.0.0.2:8080");
        let many = json!({"subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}],
            "ports": [{"port": 80}, {"port": 443}],
        }]});
        assert_eq!(endpoints_cell(&many), "10.0.0.1:80,10.0.0.2:80,[fd00::3]:80 + 3 more...");
        let headless = json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}]}]});
        assert_eq!(endpoints_cell(&headless), "10.0.0.1");
    }
}
