//! `as=Table` answers: the columns `kubectl get` prints.

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

/// A column of a built-in kind's table.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// The header.
    pub name: &'static str,
    /// The OpenAPI type of the cells.
    pub kind: &'static str,
    /// The OpenAPI format of the cells (`name` for the name column).
    pub format: &'static str,
    /// What the column shows.
    pub description: &'static str,
    /// 0 for columns always shown, 1 for those `-o wide` adds.
    pub priority: u8,
}

/// A column shown always.
pub const fn col(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column { name, kind, format: "", description, priority: 0 }
}

/// A string column only `-o wide` shows.
pub const fn wide(name: &'static str, description: &'static str) -> Column {
    Column { name, kind: "string", format: "", description, priority: 1 }
}

/// The name column every table starts with.
pub const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};
/// The age column.
pub const AGE: Column = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);

/// A Kubernetes-style age: `5s`, `3m20s`, `4h`, `2d3h`.
pub fn human_age(created: Option<&str>) -> String {
    let Some(created) = created.and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok()) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - created.with_timezone(&chrono::Utc)).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 8 * 86400 => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A string at a JSON pointer; empty if unset.
pub fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The number of entries of a map field.
pub fn count(object: &Value, field: &str) -> usize {
    object.get(field).and_then(Value::as_object).map_or(0, |m| m.len())
}

/// `<none>` for an empty cell.
pub fn or_none(s: String) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s
    }
}

/// The name cell of an object's row.
pub fn name_cell(o: &Value) -> Value {
    json!(str_at(o, "/metadata/name"))
}

/// The age cell of an object's row.
pub fn age_cell(o: &Value) -> Value {
    json!(human_age(o.pointer("/metadata/creationTimestamp").and_then(Value::as_str)))
}

/// The definitions of `columns`.
pub fn definitions(columns: &[Column]) -> Vec<Value> {
    columns
        .iter()
        .map(|c| definition(c.name, c.kind, c.format, c.description, c.priority.into()))
        .collect()
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

/// A column's definition in a Table.
pub fn definition(name: &str, kind: &str, format: &str, description: &str, priority: i32) -> Value {
    json!({
        "name": name,
        "type": kind,
        "format": format,
        "description": description,
        "priority": priority,
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
    fn ages_read_like_kubectl() {
        assert_eq!(human_age(None), "<unknown>");
        let ten_days = (chrono::Utc::now() - chrono::Duration::days(10)).to_rfc3339();
        assert_eq!(human_age(Some(&ten_days)), "10d");
    }
}
