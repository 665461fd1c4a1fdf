use serde_json::json;

use super::*;

fn text(value: &Value) -> String {
    String::from_utf8(to_vec(value)).unwrap()
}

#[test]
fn a_typed_object_is_written_in_its_go_structs_order() {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": {"b": "2", "a": "1"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web"},
            "name": "web",
            "namespace": "default",
            "resourceVersion": "7",
            "uid": "u1",
        },
        "spec": {
            "containers": [{
                "image": "nginx",
                "imagePullPolicy": "Always",
                "name": "c",
                "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }],
            "restartPolicy": "Always",
            "volumes": [{"emptyDir": {}, "name": "v"}],
        },
        "status": {"phase": "Pending"},
    });
    assert_eq!(
        text(&pod),
        concat!(
            r#"{"kind":"Pod","apiVersion":"v1","#,
            r#""metadata":{"name":"web","namespace":"default","uid":"u1","resourceVersion":"7","#,
            r#""creationTimestamp":"2026-01-01T00:00:00Z","labels":{"app":"web"},"#,
            r#""annotations":{"a":"1","b":"2"}},"#,
            r#""spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","#,
            r#""image":"nginx","ports":[{"name":"http","containerPort":80,"protocol":"TCP"}],"#,
            r#""resources":{"limits":{"nvidia.com/gpu":"1"}},"imagePullPolicy":"Always"}],"#,
            r#""restartPolicy":"Always"},"status":{"phase":"Pending"}}"#,
        )
    );
}

#[test]
fn fields_newer_than_the_table_follow_by_name_and_nothing_is_lost() {
    let map = json!({"apiVersion": "v1", "kind": "ConfigMap", "zeta": 1, "alpha": {"b": 1, "a": 2},
        "data": {"k": "v"}, "immutable": true, "metadata": {"name": "a", "zz": "x"}});
    assert_eq!(
        text(&map),
        concat!(
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","zz":"x"},"#,
            r#""immutable":true,"data":{"k":"v"},"alpha":{"a":2,"b":1},"zeta":1}"#,
        )
    );
    let back: Value = serde_json::from_slice(&to_vec(&map)).unwrap();
    assert_eq!(back, map);
}

#[test]
fn custom_resources_and_maps_keep_sorted_keys() {
    let shirt = json!({"kind": "Shirt", "apiVersion": "stable.example.com/v1", "spec": {"size": "M", "color": "red"}, "metadata": {"name": "a", "uid": "u"}});
    assert_eq!(
        text(&shirt),
        concat!(
            r#"{"apiVersion":"stable.example.com/v1","kind":"Shirt","#,
            r#""metadata":{"name":"a","uid":"u"},"spec":{"color":"red","size":"M"}}"#,
        )
    );
}

#[test]
fn a_typed_list_drops_its_items_type_meta_and_orders_its_own() {
    let list = json!({"kind": "ConfigMapList", "apiVersion": "v1",
        "metadata": {"resourceVersion": "9", "continue": "c"},
        "items": [{"kind": "ConfigMap", "apiVersion": "v1", "data": {"a": "b"}, "metadata": {"name": "a"}}]});
    assert_eq!(
        text(&list),
        concat!(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9","#,
            r#""continue":"c"},"items":[{"metadata":{"name":"a"},"data":{"a":"b"}}]}"#,
        )
    );
    let head = list_head("v1", "ConfigMapList", true, &list["metadata"]);
    let mut out = head.head.clone();
    write_item(&mut out, &list["items"][0]);
    out.extend_from_slice(&head.tail);
    assert_eq!(out, to_vec(&list));
}

#[test]
fn a_custom_resource_list_is_written_as_go_writes_a_map() {
    let head = list_head("x.io/v1", "ShirtList", false, &json!({"resourceVersion": "3"}));
    let mut out = head.head;
    out.extend_from_slice(b"{}");
    out.extend_from_slice(&head.tail);
    let expected = json!({"apiVersion": "x.io/v1", "kind": "ShirtList",
        "metadata": {"resourceVersion": "3"}, "items": [{}]});
    assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(to_vec(&expected)).unwrap());
    assert!(String::from_utf8(to_vec(&expected))
        .unwrap()
        .starts_with(r#"{"apiVersion":"x.io/v1","items":[{}],"kind""#));
}

#[test]
fn strings_are_escaped_as_go_escapes_them() {
    let map = json!({"kind": "ConfigMap", "apiVersion": "v1",
        "data": {"html": "<a href=\"x\">&amp;</a>", "lines": "a\u{2028}b\u{2029}c\u{e9}", "ctl": "\u{1b}\n\t\u{8}\u{c}"}});
    assert_eq!(
        text(&map),
        concat!(
            r#"{"kind":"ConfigMap","apiVersion":"v1","data":{"ctl":"\u001b\n\t\b\f","#,
            r#""html":"\u003ca href=\"x\"\u003e\u0026amp;\u003c/a\u003e","#,
            "\"lines\":\"a\\u2028b\\u2029c\u{e9}\"}}",
        )
    );
}

#[test]
fn meta_types_follow_their_go_order() {
    let event = json!({"object": {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "s"}}, "type": "ADDED", "kind": "WatchEvent", "apiVersion": "v1"});
    // A watch event's object inside is ordered by its own kind.
    let object = text(&event["object"]);
    assert_eq!(
        object,
        r#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"type":"Opaque"}"#
    );
    let table = json!({"apiVersion": "meta.k8s.io/v1", "kind": "Table", "metadata": {"resourceVersion": "1"},
        "columnDefinitions": [{"description": "d", "format": "name", "name": "Name", "priority": 0, "type": "string"}],
        "rows": [{"object": {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"uid": "u", "name": "a"}}, "cells": ["a"]}]});
    assert_eq!(
        text(&table),
        concat!(
            r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"#,
            r#""columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"d","priority":0}],"#,
            r#""rows":[{"cells":["a"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","#,
            r#""metadata":{"name":"a","uid":"u"}}}]}"#,
        )
    );
    let resources = json!({"apiVersion": "v1", "kind": "APIResourceList", "groupVersion": "v1",
        "resources": [{"kind": "Pod", "name": "pods", "namespaced": true, "singularName": "pod", "verbs": ["get"]}]});
    assert_eq!(
        text(&resources),
        concat!(
            r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":[{"name":"pods","#,
            r#""singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get"]}]}"#,
        )
    );
}

#[test]
fn a_typed_objects_type_meta_ends_where_its_members_go_on() {
    let bytes =
        to_vec(&json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a"}}));
    let from = type_meta_end(&bytes).unwrap();
    assert_eq!(&bytes[from..], br#""metadata":{"name":"a"}}"#);
    let bare = to_vec(&json!({"kind": "ConfigMap", "apiVersion": "v1"}));
    assert_eq!(&bare[type_meta_end(&bare).unwrap()..], b"}");
    assert_eq!(type_meta_end(br#"{"apiVersion":"v1","kind":"ConfigMap"}"#), None);
    assert_eq!(type_meta_end(br#"{"kind":"ConfigMap"#), None);
}

#[test]
fn every_built_in_kind_but_three_is_written_in_its_go_order() {
    // Definitions (their schemas' `…OrBool`/`…OrArray` unions marshal by hand in Go), APIServices
    // and Tenants are not in the protobuf table: their keys stay sorted.
    let mut sorted: Vec<String> = crate::resource::Registry::host()
        .all()
        .iter()
        .filter(|rt| !is_typed(&rt.group_version(), rt.kind))
        .map(|rt| format!("{}/{}", rt.group_version(), rt.kind))
        .collect();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "apiextensions.k8s.io/v1/CustomResourceDefinition",
            "apiregistration.k8s.io/v1/APIService",
            "carrel.dev/v1alpha1/Tenant",
        ]
    );
}
