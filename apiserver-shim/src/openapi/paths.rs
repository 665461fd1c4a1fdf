//! The paths of the documents: for each served kind, its collection and object paths and their
//! subresources, with the operations, parameters and media types kube-apiserver lists.

use k8s_openapi::api::{autoscaling::v1 as autoscaling, core::v1 as core};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use crate::resource::{ResourceType, Subresource};

use super::schemas::{gvk, schema_ref, KindNames};
use super::{JSON, SERVER_FIELD_VALIDATION};

const WATCH: &str = "application/json;stream=watch";
const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// `CoreV1`, `AppsV1`, `RbacAuthorizationV1`: how operation ids name a group-version.
pub(super) fn operation_prefix(group: &str, version: &str) -> String {
    let group = if group.is_empty() { "core" } else { group.trim_end_matches(".k8s.io") };
    group.split('.').chain([version]).map(upper_first).collect()
}

/// `core_v1`, `apps_v1`, `rbacAuthorization_v1`: the tag of a group-version's operations.
pub(super) fn tag(group: &str, version: &str) -> String {
    let group = if group.is_empty() { "core" } else { group.trim_end_matches(".k8s.io") };
    let mut parts = group.split('.');
    let first = parts.next().unwrap_or_default().to_owned();
    let camel: String = std::iter::once(first).chain(parts.map(upper_first)).collect();
    format!("{camel}_{version}")
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": {"type": "string"},
    })
}

fn query_param(name: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": ty}})
}

fn name_param(kind: &str) -> Value {
    path_param("name", &format!("name of the {kind}"))
}

fn namespace_param() -> Value {
    path_param("namespace", "object name and auth scope, such as for teams and projects")
}

fn pretty() -> Value {
    query_param("pretty", "string", "If 'true', then the output is pretty printed.")
}

fn dry_run() -> Value {
    query_param(
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. The only valid value is All.",
    )
}

fn field_manager() -> Value {
    query_param("fieldManager", "string", "The name of the actor or entity making these changes.")
}

/// The query parameters of a write (create, replace, patch).
fn write_params() -> Vec<Value> {
    let mut params = vec![dry_run(), field_manager()];
    if SERVER_FIELD_VALIDATION {
        params.push(query_param(
            "fieldValidation",
            "string",
            "How the server treats unknown and duplicate fields: Ignore, Warn or Strict.",
        ));
    }
    params
}

fn list_params() -> Vec<Value> {
    vec![
        query_param(
            "allowWatchBookmarks",
            "boolean",
            "Ask for BOOKMARK events in a watch; servers may ignore it.",
        ),
        query_param("continue", "string", "The continue token of a previous, paged list."),
        query_param("fieldSelector", "string", "Restrict the list to objects whose fields match."),
        query_param("labelSelector", "string", "Restrict the list to objects whose labels match."),
        query_param("limit", "integer", "The most objects to return in one page."),
        query_param("resourceVersion", "string", "The resource version to list or watch from."),
        query_param(
            "resourceVersionMatch",
            "string",
            "How resourceVersion applies to a list: NotOlderThan or Exact.",
        ),
        query_param(
            "sendInitialEvents",
            "boolean",
            "Start a watch with the current objects as ADDED events, then a BOOKMARK.",
        ),
        query_param("timeoutSeconds", "integer", "End the call after this many seconds."),
        query_param(
            "watch",
            "boolean",
            "Watch for changes to the described resources instead of listing them.",
        ),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        dry_run(),
        query_param(
            "gracePeriodSeconds",
            "integer",
            "The seconds before the object should be deleted; zero deletes immediately.",
        ),
        query_param(
            "propagationPolicy",
            "string",
            "Whether and how garbage collection is performed: Orphan, Background or Foreground.",
        ),
    ]
}

fn content(media_types: &[&str], schema: &str) -> Value {
    let schema = schema_ref(schema);
    Value::Object(
        media_types.iter().map(|m| (m.to_string(), json!({ "schema": schema.clone() }))).collect(),
    )
}

/// Responses: each code with `schema` as JSON, then 401.
fn responses(codes: &[&str], media_types: &[&str], schema: &str) -> Value {
    let mut responses = Map::new();
    for code in codes {
        let description = match *code {
            "200" => "OK",
            "201" => "Created",
            "202" => "Accepted",
            _ => "",
        };
        responses.insert(
            code.to_string(),
            json!({"description": description, "content": content(media_types, schema)}),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(responses)
}

/// One operation and its kube-apiserver extensions.
struct Operation<'a> {
    id: String,
    description: String,
    action: &'a str,
    gvk: &'a Value,
    tag: &'a str,
    params: Vec<Value>,
    body: Option<Value>,
    responses: Value,
}

impl Operation<'_> {
    fn into_value(self) -> Value {
        let mut op = json!({
            "tags": [self.tag],
            "description": self.description,
            "operationId": self.id,
            "responses": self.responses,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        });
        if !self.params.is_empty() {
            op["parameters"] = Value::Array(self.params);
        }
        if let Some(body) = self.body {
            op["requestBody"] = body;
        }
        op
    }
}

fn request_body(media_types: &[&str], schema: &str, required: bool) -> Value {
    json!({"content": content(media_types, schema), "required": required})
}

/// `/api/v1/` or `/apis/<group>/<version>/`: the group-version's resource list.
pub(super) fn resources_path(group: &str, version: &str) -> Value {
    let gv_tag = tag(group, version);
    json!({
        "get": {
            "tags": [gv_tag],
            "description": "get available resources",
            "operationId": format!("get{}APIResources", operation_prefix(group, version)),
            "responses": responses(&["200"], &[JSON], &meta::APIResourceList::schema_name()),
        }
    })
}

/// The collection, item, subresource and watch paths of one resource type.
pub(super) fn resource_paths(rt: &ResourceType, names: &KindNames, paths: &mut Map<String, Value>) {
    let prefix = if rt.group.is_empty() {
        format!("/api/{}", rt.version)
    } else {
        format!("/apis/{}/{}", rt.group, rt.version)
    };
    let gv = operation_prefix(rt.group, rt.version);
    let tag = tag(rt.group, rt.version);
    let gvk = gvk(rt.group, rt.version, rt.kind);
    let kind = rt.kind;
    let (scope, scoped) = if rt.namespaced {
        (format!("/namespaces/{{namespace}}/{}", rt.plural), format!("Namespaced{kind}"))
    } else {
        (format!("/{}", rt.plural), kind.to_owned())
    };
    let scope_params = |name: bool| -> Vec<Value> {
        let mut params = Vec::new();
        if name {
            params.push(name_param(kind));
        }
        if rt.namespaced {
            params.push(namespace_param());
        }
        params.push(pretty());
        params
    };
    let delete_options = meta::DeleteOptions::schema_name();
    let status = meta::Status::schema_name();
    let watch_event = meta::WatchEvent::<core::Pod>::schema_name();
    let op = |id: String, description: String, action: &'static str| Operation {
        id,
        description,
        action,
        gvk: &gvk,
        tag: &tag,
        params: Vec::new(),
        body: None,
        responses: Value::Null,
    };

    // The collection: list, create, delete a collection.
    let list = Operation {
        params: list_params(),
        responses: responses(&["200"], &[JSON, WATCH], &names.list),
        ..op(format!("list{gv}{scoped}"), format!("list or watch objects of kind {kind}"), "list")
    };
    let create = Operation {
        params: write_params(),
        body: Some(request_body(&[JSON], &names.kind, true)),
        responses: responses(&["200", "201", "202"], &[JSON], &names.kind),
        ..op(format!("create{gv}{scoped}"), format!("create a {kind}"), "post")
    };
    let mut delete_collection_params = list_params();
    delete_collection_params.retain(|p| p["name"] != "watch" && p["name"] != "allowWatchBookmarks");
    delete_collection_params.extend(delete_params());
    let delete_collection = Operation {
        params: delete_collection_params,
        body: Some(request_body(&[JSON], &delete_options, false)),
        responses: responses(&["200"], &[JSON], &status),
        ..op(
            format!("delete{gv}Collection{scoped}"),
            format!("delete collection of {kind}"),
            "deletecollection",
        )
    };
    paths.insert(
        format!("{prefix}{scope}"),
        json!({
            "get": list.into_value(),
            "post": create.into_value(),
            "delete": delete_collection.into_value(),
            "parameters": scope_params(false),
        }),
    );

    // The item: read, replace, patch, delete.
    let read = Operation {
        responses: responses(&["200"], &[JSON], &names.kind),
        ..op(format!("read{gv}{scoped}"), format!("read the specified {kind}"), "get")
    };
    let replace = Operation {
        params: write_params(),
        body: Some(request_body(&[JSON], &names.kind, true)),
        responses: responses(&["200", "201"], &[JSON], &names.kind),
        ..op(format!("replace{gv}{scoped}"), format!("replace the specified {kind}"), "put")
    };
    let patch = patch_operation(
        op(format!("patch{gv}{scoped}"), format!("partially update the specified {kind}"), "patch"),
        patch_types(rt),
        &names.kind,
    );
    let delete = Operation {
        params: delete_params(),
        body: Some(request_body(&[JSON], &delete_options, false)),
        responses: responses(&["200", "202"], &[JSON], &names.kind),
        ..op(format!("delete{gv}{scoped}"), format!("delete a {kind}"), "delete")
    };
    paths.insert(
        format!("{prefix}{scope}/{{name}}"),
        json!({
            "get": read.into_value(),
            "put": replace.into_value(),
            "patch": patch.into_value(),
            "delete": delete.into_value(),
            "parameters": scope_params(true),
        }),
    );

    // Subresources.
    for sub in rt.subresources {
        let (schema, sub_gvk, word) = match sub {
            Subresource::Status => (names.kind.clone(), gvk.clone(), "Status"),
            Subresource::EphemeralContainers => {
                (names.kind.clone(), gvk.clone(), "Ephemeralcontainers")
            }
            Subresource::Scale => (
                autoscaling::Scale::schema_name().into_owned(),
                super::schemas::gvk("autoscaling", "v1", "Scale"),
                "Scale",
            ),
        };
        let sub_name = sub.name();
        let sub_op = |id: String, description: String, action: &'static str| Operation {
            gvk: &sub_gvk,
            ..op(id, description, action)
        };
        let read = Operation {
            responses: responses(&["200"], &[JSON], &schema),
            ..sub_op(
                format!("read{gv}{scoped}{word}"),
                format!("read {sub_name} of the specified {kind}"),
                "get",
            )
        };
        let replace = Operation {
            params: write_params(),
            body: Some(request_body(&[JSON], &schema, true)),
            responses: responses(&["200", "201"], &[JSON], &schema),
            ..sub_op(
                format!("replace{gv}{scoped}{word}"),
                format!("replace {sub_name} of the specified {kind}"),
                "put",
            )
        };
        let patch = patch_operation(
            sub_op(
                format!("patch{gv}{scoped}{word}"),
                format!("partially update {sub_name} of the specified {kind}"),
                "patch",
            ),
            if sub_name == "scale" { PATCH_TYPES } else { patch_types(rt) },
            &schema,
        );
        paths.insert(
            format!("{prefix}{scope}/{{name}}/{sub_name}"),
            json!({
                "get": read.into_value(),
                "put": replace.into_value(),
                "patch": patch.into_value(),
                "parameters": scope_params(true),
            }),
        );
    }
    if rt.strategy.is_namespace() {
        let finalize = Operation {
            params: write_params(),
            body: Some(request_body(&[JSON], &names.kind, true)),
            responses: responses(&["200", "201"], &[JSON], &names.kind),
            ..op(
                format!("replace{gv}NamespaceFinalize"),
                "replace finalize of the specified Namespace".into(),
                "put",
            )
        };
        paths.insert(
            format!("{prefix}/namespaces/{{name}}/finalize"),
            json!({"put": finalize.into_value(), "parameters": scope_params(true)}),
        );
    }

    // Across namespaces, for a namespaced type.
    if rt.namespaced {
        let list_all = Operation {
            params: list_params(),
            responses: responses(&["200"], &[JSON, WATCH], &names.list),
            ..op(
                format!("list{gv}{kind}ForAllNamespaces"),
                format!("list or watch objects of kind {kind}"),
                "list",
            )
        };
        paths.insert(
            format!("{prefix}/{}", rt.plural),
            json!({"get": list_all.into_value(), "parameters": [pretty()]}),
        );
    }

    // The legacy watch paths.
    let watch_list = Operation {
        params: list_params(),
        responses: responses(&["200"], &[JSON, WATCH], &watch_event),
        ..op(
            format!("watch{gv}{scoped}List"),
            format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
            "watchlist",
        )
    };
    paths.insert(
        format!("{prefix}/watch{scope}"),
        json!({"get": watch_list.into_value(), "parameters": scope_params(false)}),
    );
    let watch_one = Operation {
        params: list_params(),
        responses: responses(&["200"], &[JSON, WATCH], &watch_event),
        ..op(
            format!("watch{gv}{scoped}"),
            format!("watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."),
            "watch",
        )
    };
    paths.insert(
        format!("{prefix}/watch{scope}/{{name}}"),
        json!({"get": watch_one.into_value(), "parameters": scope_params(true)}),
    );
    if rt.namespaced {
        let watch_all = Operation {
            params: list_params(),
            responses: responses(&["200"], &[JSON, WATCH], &watch_event),
            ..op(
                format!("watch{gv}{kind}ListForAllNamespaces"),
                format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
                "watchlist",
            )
        };
        paths.insert(
            format!("{prefix}/watch/{}", rt.plural),
            json!({"get": watch_all.into_value(), "parameters": [pretty()]}),
        );
    }
}

/// The patch types `rt` takes. Custom resources have no patch strategies: kube-apiserver takes
/// no strategic merge patch for them, and says so here (kubectl's apply reads it).
fn patch_types(rt: &ResourceType) -> &'static [&'static str] {
    if rt.is_custom() {
        &PATCH_TYPES[..3]
    } else {
        PATCH_TYPES
    }
}

fn patch_operation<'a>(op: Operation<'a>, types: &[&str], schema: &str) -> Operation<'a> {
    let mut params = write_params();
    params.push(query_param(
        "force",
        "boolean",
        "Force an apply patch to take fields that other managers own.",
    ));
    Operation {
        params,
        body: Some(request_body(types, &meta::Patch::schema_name(), true)),
        responses: responses(&["200", "201"], &[JSON], schema),
        ..op
    }
}
