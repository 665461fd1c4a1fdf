//! `as=Table` answers: a Table of objects, its columns and cells the kind's strategy's
//! ([`crate::table`] holds the column helpers strategies use).

use serde_json::{json, Value};

use crate::resource::ResourceType;

/// Whether an Accept header asks for a `meta.k8s.io` Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|entry| {
        let params: Vec<&str> = entry.split(';').map(str::trim).collect();
        params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io")
    })
}

/// The Table version asked for (`v1`, or `v1beta1`).
pub fn table_version(accept: &str) -> &'static str {
    for entry in accept.split(',') {
        let params: Vec<&str> = entry.split(';').map(str::trim).collect();
        if params.contains(&"as=Table") {
            if params.contains(&"v=v1") {
                return "v1";
            }
            if params.contains(&"v=v1beta1") {
                return "v1beta1";
            }
        }
    }
    "v1"
}

/// Options for a Table answer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableOptions {
    /// `includeObject`: None, Metadata (the default) or Object.
    pub include_object: IncludeObject,
    /// Leave out the column definitions (for watch events after the first).
    pub no_headers: bool,
}

/// What each row carries of its object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// PartialObjectMetadata (kubectl's default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

fn row_object(object: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => object.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
        }),
    }
}

/// A Table of `objects`, with the list metadata (`resourceVersion`, `continue`) given.
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    list_metadata: Value,
    version: &str,
    options: TableOptions,
) -> Value {
    let definitions: Vec<Value> = match options.no_headers {
        true => Vec::new(),
        false => rt.strategy.columns(rt),
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells = rt.strategy.cells(rt, o);
            json!({"cells": cells, "object": row_object(o, options.include_object)})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": list_metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::BUILT_IN;

    #[test]
    fn kubectl_accept_header_asks_for_a_v1_table() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert!(wants_table(accept));
        assert_eq!(table_version(accept), "v1");
        assert!(!wants_table("application/json"));
    }

    #[test]
    fn pod_rows_have_kubectls_columns() {
        let pods = BUILT_IN.iter().find(|t| t.plural == "pods").unwrap();
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]},
        });
        let t = table(pods, &[pod], json!({}), "v1", TableOptions::default());
        let names: Vec<_> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(&names[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "3");
        assert_eq!(cells[6], "n1");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn node_rows_have_kubectls_columns() {
        let nodes = BUILT_IN.iter().find(|t| t.plural == "nodes").unwrap();
        let node = json!({
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/gpu": ""}},
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "sim"},
            },
        });
        let t = table(
            nodes,
            &[node, json!({"metadata": {"name": "n2"}})],
            json!({}),
            "v1",
            TableOptions::default(),
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "gpu");
        assert_eq!(cells[4], "v1.33.0");
        assert_eq!(cells[5], "10.0.0.1");
        assert_eq!(cells[6], "<none>");
        assert_eq!(t["rows"][1]["cells"][1], "NotReady");
        assert_eq!(t["rows"][1]["cells"][2], "<none>");
    }

    #[test]
    fn claim_and_storage_class_rows_have_kubectls_columns() {
        let claims = BUILT_IN.iter().find(|t| t.plural == "persistentvolumeclaims").unwrap();
        let bound = json!({
            "metadata": {"name": "data-db-0"},
            "spec": {"volumeName": "pvc-1", "storageClassName": "standard", "volumeMode": "Filesystem",
                "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"},
                "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"]},
        });
        let pending = json!({
            "metadata": {"name": "data-db-1", "deletionTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending", "accessModes": ["ReadWriteOnce"]},
        });
        let t = table(claims, &[bound, pending], json!({}), "v1", TableOptions::default());
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Status",
                "Volume",
                "Capacity",
                "Access Modes",
                "StorageClass",
                "VolumeAttributesClass",
                "Age",
                "VolumeMode"
            ]
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Bound");
        assert_eq!(cells[2], "pvc-1");
        assert_eq!(cells[3], "2Gi");
        assert_eq!(cells[4], "RWO,RWX");
        assert_eq!(cells[5], "standard");
        assert_eq!(cells[6], "<unset>");
        assert_eq!(cells[8], "Filesystem");
        // Unbound: no capacity or modes yet; being deleted: Terminating.
        let cells = &t["rows"][1]["cells"];
        assert_eq!(
            (&cells[1], &cells[3], &cells[4], &cells[5]),
            (&json!("Terminating"), &json!(""), &json!(""), &json!(""))
        );

        let classes = BUILT_IN.iter().find(|t| t.plural == "storageclasses").unwrap();
        let standard = json!({
            "metadata": {"name": "standard",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "sim.carrel.dev/local",
        });
        let t = table(classes, &[standard], json!({}), "v1", TableOptions::default());
        assert_eq!(
            t["rows"][0]["cells"].as_array().unwrap()[..5],
            [
                json!("standard (default)"),
                json!("sim.carrel.dev/local"),
                json!("Delete"),
                json!("Immediate"),
                json!(false)
            ]
        );
    }
}
