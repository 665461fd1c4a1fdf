//! Objects encoded with k8s-pb and prost, wrapped as kubectl wraps them, decoded and compared with
//! the JSON Kubernetes gives them.

use std::collections::BTreeMap;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::autoscaling::{v1 as autoscaling_v1, v2 as autoscaling_v2};
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::events::v1 as events;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message as _;
use serde_json::{json, Value};

use super::*;

/// `k8s\0` and a `runtime.Unknown` holding `object`, as client-go writes it.
fn body(api_version: &str, kind: &str, object: &impl prost::Message) -> Vec<u8> {
    envelope(api_version, kind, object.encode_to_vec(), true)
}

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>, all_fields: bool) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: all_fields.then(String::new),
        content_type: all_fields.then(String::new),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

fn decode(body: &[u8]) -> Value {
    decode_request(body).unwrap_or_else(|e| panic!("decoding failed: {e}"))
}

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

fn map<V: Clone>(entries: &[(&str, V)]) -> BTreeMap<String, V> {
    entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

fn meta(name: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta { name: s(name), ..Default::default() })
}

fn quantity(v: &str) -> Quantity {
    Quantity { string: s(v) }
}

fn index_of(name: &str) -> usize {
    schema::MESSAGES.iter().position(|m| m.name == name).expect(name)
}

/// 2024-01-02T03:04:05Z.
const T: i64 = 1_704_164_645;

#[test]
fn configmap_with_data_and_binary_data() {
    let cm = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: s("x"),
            namespace: s("default"),
            labels: map(&[("tier", "web".to_owned())]),
            creation_timestamp: Some(meta::Time { seconds: Some(T), nanos: Some(999) }),
            ..Default::default()
        }),
        data: map(&[("a", "b".to_owned()), ("empty", String::new())]),
        binary_data: map(&[("bin", vec![0u8, 1, 2, 255])]),
        immutable: Some(false),
    };
    assert_eq!(
        decode(&body("v1", "ConfigMap", &cm)),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "x",
                "namespace": "default",
                "labels": {"tier": "web"},
                "creationTimestamp": "2024-01-02T03:04:05Z",
            },
            "data": {"a": "b", "empty": ""},
            "binaryData": {"bin": "AAEC/w=="},
            "immutable": false,
        })
    );
}

#[test]
fn secret_data_is_base64() {
    let secret = core::Secret {
        metadata: meta("s"),
        data: map(&[("p", b"q".to_vec())]),
        string_data: map(&[("t", "u".to_owned())]),
        r#type: s("Opaque"),
        immutable: None,
    };
    assert_eq!(
        decode(&body("v1", "Secret", &secret)),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s"},
            "data": {"p": "cQ=="},
            "stringData": {"t": "u"},
            "type": "Opaque",
        })
    );
}

#[test]
fn deployment_keeps_zero_replicas_and_decodes_ports_quantities_and_int_or_strings() {
    let container = core::Container {
        name: s("nginx"),
        image: s("nginx"),
        // Go writes every string field; empty ones are left out, as Go's JSON would.
        image_pull_policy: s(""),
        termination_message_path: s(""),
        ports: vec![core::ContainerPort {
            name: s("http"),
            container_port: Some(80),
            protocol: s("TCP"),
            host_port: Some(0),
            host_ip: s(""),
        }],
        resources: Some(core::ResourceRequirements {
            limits: map(&[("cpu", quantity("500m")), ("memory", quantity("128Mi"))]),
            requests: map(&[("cpu", quantity("0.1"))]),
            claims: vec![],
        }),
        stdin: Some(false),
        ..Default::default()
    };
    let labels = map(&[("app", "d".to_owned())]);
    let deployment = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: s("d"),
            labels: labels.clone(),
            // Go's zero time, as client-go always sends it.
            creation_timestamp: Some(meta::Time { seconds: Some(GO_ZERO_TIME), nanos: Some(0) }),
            generate_name: s(""),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: labels.clone(),
                match_expressions: vec![],
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta { labels, ..Default::default() }),
                spec: Some(core::PodSpec { containers: vec![container], ..Default::default() }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(0),
                        str_val: s(""),
                    }),
                    max_surge: Some(IntOrString {
                        r#type: Some(1),
                        int_val: Some(0),
                        str_val: s("25%"),
                    }),
                }),
            }),
            min_ready_seconds: Some(0),
            paused: Some(false),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus::default()),
    };
    assert_eq!(
        decode(&body("apps/v1", "Deployment", &deployment)),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "d"}, "creationTimestamp": null},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{
                        "name": "nginx",
                        "image": "nginx",
                        "ports": [{
                            "name": "http",
                            "containerPort": 80,
                            "protocol": "TCP",
                            "hostPort": 0,
                        }],
                        "resources": {
                            "limits": {"cpu": "500m", "memory": "128Mi"},
                            "requests": {"cpu": "0.1"},
                        },
                        "stdin": false,
                    }]},
                },
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"},
                },
                "minReadySeconds": 0,
                "paused": false,
            },
            "status": {},
        })
    );
}

#[test]
fn service_target_ports_are_numbers_or_names() {
    let port = |name: &str, target: IntOrString| core::ServicePort {
        name: s(name),
        port: Some(80),
        target_port: Some(target),
        ..Default::default()
    };
    let service = core::Service {
        metadata: meta("web"),
        spec: Some(core::ServiceSpec {
            ports: vec![
                port("a", IntOrString { r#type: Some(0), int_val: Some(8080), str_val: None }),
                port("b", IntOrString { r#type: Some(1), int_val: None, str_val: s("http") }),
            ],
            cluster_ips: vec!["10.0.0.1".into()],
            r#type: s("ClusterIP"),
            ip_families: vec!["IPv4".into()],
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decode(&body("v1", "Service", &service)),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {
                "ports": [
                    {"name": "a", "port": 80, "targetPort": 8080},
                    {"name": "b", "port": 80, "targetPort": "http"},
                ],
                "clusterIPs": ["10.0.0.1"],
                "type": "ClusterIP",
                "ipFamilies": ["IPv4"],
            },
        })
    );
}

#[test]
fn pod_with_embedded_structs_volume_sources_probes_and_selectors() {
    let pod = core::Pod {
        metadata: meta("p"),
        spec: Some(core::PodSpec {
            volumes: vec![core::Volume {
                name: s("config"),
                volume_source: Some(core::VolumeSource {
                    config_map: Some(core::ConfigMapVolumeSource {
                        local_object_reference: Some(core::LocalObjectReference { name: s("cm") }),
                        default_mode: Some(0o644),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }],
            containers: vec![core::Container {
                name: s("c"),
                env: vec![core::EnvVar {
                    name: s("K"),
                    value_from: Some(core::EnvVarSource {
                        secret_key_ref: Some(core::SecretKeySelector {
                            local_object_reference: Some(core::LocalObjectReference {
                                name: s("sec"),
                            }),
                            key: s("k"),
                            optional: Some(false),
                        }),
                        ..Default::default()
                    }),
                    value: None,
                }],
                readiness_probe: Some(core::Probe {
                    handler: Some(core::ProbeHandler {
                        http_get: Some(core::HttpGetAction {
                            path: s("/healthz"),
                            port: Some(IntOrString {
                                r#type: Some(0),
                                int_val: Some(8080),
                                str_val: None,
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    period_seconds: Some(5),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            security_context: Some(core::PodSecurityContext {
                supplemental_groups: vec![1, 2],
                run_as_non_root: Some(true),
                ..Default::default()
            }),
            node_selector: map(&[("disk", "ssd".to_owned())]),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decode(&body("v1", "Pod", &pod)),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "volumes": [{"name": "config", "configMap": {"name": "cm", "defaultMode": 420}}],
                "containers": [{
                    "name": "c",
                    "env": [{
                        "name": "K",
                        "valueFrom": {
                            "secretKeyRef": {"name": "sec", "key": "k", "optional": false},
                        },
                    }],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080},
                        "periodSeconds": 5,
                    },
                }],
                "securityContext": {"supplementalGroups": [1, 2], "runAsNonRoot": true},
                "nodeSelector": {"disk": "ssd"},
            },
        })
    );
}

#[test]
fn self_subject_access_review() {
    let review = authz::SelfSubjectAccessReview {
        metadata: Some(meta::ObjectMeta::default()),
        spec: Some(authz::SelfSubjectAccessReviewSpec {
            resource_attributes: Some(authz::ResourceAttributes {
                namespace: s("default"),
                verb: s("create"),
                group: s(""),
                resource: s("pods"),
                ..Default::default()
            }),
            non_resource_attributes: None,
        }),
        status: Some(authz::SubjectAccessReviewStatus::default()),
    };
    assert_eq!(
        decode(&body("authorization.k8s.io/v1", "SelfSubjectAccessReview", &review)),
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {},
            "spec": {"resourceAttributes": {
                "namespace": "default",
                "verb": "create",
                "resource": "pods",
            }},
            "status": {},
        })
    );
}

#[test]
fn subject_access_review_extra_values_are_lists() {
    let review = authz::SubjectAccessReview {
        metadata: None,
        spec: Some(authz::SubjectAccessReviewSpec {
            user: s("alice"),
            groups: vec!["dev".into()],
            extra: map(&[("scopes", authz::ExtraValue { items: vec!["a".into(), "b".into()] })]),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decode(&body("authorization.k8s.io/v1", "SubjectAccessReview", &review)),
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": "alice", "groups": ["dev"], "extra": {"scopes": ["a", "b"]}},
        })
    );
}

#[test]
fn token_request() {
    let request = authn::TokenRequest {
        metadata: meta("sa"),
        spec: Some(authn::TokenRequestSpec {
            audiences: vec!["https://kubernetes.default.svc".into()],
            expiration_seconds: Some(3600),
            bound_object_ref: Some(authn::BoundObjectReference {
                kind: s("Pod"),
                api_version: s("v1"),
                name: s("p"),
                u_id: s("1234"),
            }),
        }),
        status: None,
    };
    assert_eq!(
        decode(&body("authentication.k8s.io/v1", "TokenRequest", &request)),
        json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": "sa"},
            "spec": {
                "audiences": ["https://kubernetes.default.svc"],
                "expirationSeconds": 3600,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "1234"},
            },
        })
    );
}

#[test]
fn micro_times_and_zero_times() {
    let event = events::Event {
        metadata: meta("e"),
        event_time: Some(meta::MicroTime { seconds: Some(T), nanos: Some(123_456_789) }),
        deprecated_first_timestamp: Some(meta::Time {
            seconds: Some(GO_ZERO_TIME),
            nanos: Some(0),
        }),
        deprecated_last_timestamp: Some(meta::Time::default()),
        note: s("hello"),
        ..Default::default()
    };
    assert_eq!(
        decode(&body("events.k8s.io/v1", "Event", &event)),
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "e"},
            "eventTime": "2024-01-02T03:04:05.123456Z",
            "deprecatedFirstTimestamp": null,
            "deprecatedLastTimestamp": null,
            "note": "hello",
        })
    );
}

#[test]
fn raw_extensions_and_managed_fields_hold_json() {
    let inner = core::ConfigMap { metadata: meta("inner"), ..Default::default() };
    let revision = apps::ControllerRevision {
        metadata: Some(meta::ObjectMeta {
            name: s("r"),
            managed_fields: vec![meta::ManagedFieldsEntry {
                manager: s("kubectl"),
                operation: s("Update"),
                fields_type: s("FieldsV1"),
                fields_v1: Some(meta::FieldsV1 { raw: Some(br#"{"f:data":{}}"#.to_vec()) }),
                time: Some(meta::Time { seconds: Some(T), nanos: None }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        data: Some(RawExtension { raw: Some(br#"{"spec":{"a":[1,2]}}"#.to_vec()) }),
        revision: Some(3),
    };
    assert_eq!(
        decode(&body("apps/v1", "ControllerRevision", &revision)),
        json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {"name": "r", "managedFields": [{
                "manager": "kubectl",
                "operation": "Update",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {}},
                "time": "2024-01-02T03:04:05Z",
            }]},
            "data": {"spec": {"a": [1, 2]}},
            "revision": 3,
        })
    );
    // A raw extension may hold a protobuf object of its own.
    let revision = apps::ControllerRevision {
        data: Some(RawExtension { raw: Some(body("v1", "ConfigMap", &inner)) }),
        ..Default::default()
    };
    assert_eq!(
        decode(&body("apps/v1", "ControllerRevision", &revision))["data"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inner"}})
    );
}

#[test]
fn unknown_fields_and_groups_are_skipped_and_repeated_messages_merge() {
    let cm = core::ConfigMap { metadata: meta("x"), ..Default::default() };
    let mut raw = cm.encode_to_vec();
    encode_key(99, WireType::Varint, &mut raw);
    encode_varint(150, &mut raw);
    encode_key(100, WireType::LengthDelimited, &mut raw);
    raw.extend([3, b'a', b'b', b'c']);
    encode_key(101, WireType::ThirtyTwoBit, &mut raw);
    raw.extend([1, 2, 3, 4]);
    encode_key(102, WireType::SixtyFourBit, &mut raw);
    raw.extend([1, 2, 3, 4, 5, 6, 7, 8]);
    encode_key(103, WireType::StartGroup, &mut raw);
    encode_key(1, WireType::Varint, &mut raw);
    encode_varint(1, &mut raw);
    encode_key(104, WireType::StartGroup, &mut raw);
    encode_key(104, WireType::EndGroup, &mut raw);
    encode_key(103, WireType::EndGroup, &mut raw);
    // A second metadata: merged with the first.
    raw.extend(
        core::ConfigMap {
            metadata: Some(meta::ObjectMeta { namespace: s("ns"), ..Default::default() }),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    assert_eq!(
        decode(&envelope("v1", "ConfigMap", raw, true)),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns"}})
    );
}

#[test]
fn repeated_numbers_packed_or_not() {
    let context = index_of("k8s.io.api.core.v1.PodSecurityContext");
    let unpacked =
        core::PodSecurityContext { supplemental_groups: vec![1, 300], ..Default::default() }
            .encode_to_vec();
    let packed = [4 << 3 | 2, 3, 1, 0xac, 0x02];
    for bytes in [&unpacked[..], &packed[..]] {
        assert_eq!(
            decode_message(bytes, context, 0).unwrap(),
            json!({"supplementalGroups": [1, 300]})
        );
    }
}

#[test]
fn negative_numbers() {
    let context = index_of("k8s.io.api.core.v1.PodSecurityContext");
    let bytes =
        core::PodSecurityContext { run_as_user: Some(-2), ..Default::default() }.encode_to_vec();
    assert_eq!(decode_message(&bytes, context, 0).unwrap(), json!({"runAsUser": -2}));
    let probe = index_of("k8s.io.api.core.v1.Probe");
    let bytes = core::Probe { period_seconds: Some(-1), ..Default::default() }.encode_to_vec();
    assert_eq!(decode_message(&bytes, probe, 0).unwrap(), json!({"periodSeconds": -1}));
}

#[test]
fn autoscalers_in_both_versions_as_kubectl_autoscale_sends_them() {
    let target = |kind: &str| (s(kind), s("web"), s("apps/v1"));
    let (kind, name, api_version) = target("Deployment");
    let v2 = autoscaling_v2::HorizontalPodAutoscaler {
        metadata: meta("web"),
        spec: Some(autoscaling_v2::HorizontalPodAutoscalerSpec {
            scale_target_ref: Some(autoscaling_v2::CrossVersionObjectReference {
                kind: kind.clone(),
                name: name.clone(),
                api_version: api_version.clone(),
            }),
            min_replicas: Some(1),
            max_replicas: Some(3),
            metrics: vec![autoscaling_v2::MetricSpec {
                r#type: s("Resource"),
                resource: Some(autoscaling_v2::ResourceMetricSource {
                    name: s("cpu"),
                    target: Some(autoscaling_v2::MetricTarget {
                        r#type: s("Utilization"),
                        average_utilization: Some(50),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }],
            behavior: None,
        }),
        status: Some(autoscaling_v2::HorizontalPodAutoscalerStatus {
            desired_replicas: Some(0),
            ..Default::default()
        }),
    };
    assert_eq!(
        decode(&body("autoscaling/v2", "HorizontalPodAutoscaler", &v2)),
        json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                "minReplicas": 1,
                "maxReplicas": 3,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}}],
            },
            "status": {"desiredReplicas": 0},
        })
    );
    let v1 = autoscaling_v1::HorizontalPodAutoscaler {
        metadata: meta("web"),
        spec: Some(autoscaling_v1::HorizontalPodAutoscalerSpec {
            scale_target_ref: Some(autoscaling_v1::CrossVersionObjectReference {
                kind,
                name,
                api_version,
            }),
            min_replicas: Some(1),
            max_replicas: Some(3),
            target_cpu_utilization_percentage: Some(50),
        }),
        status: None,
    };
    let decoded = decode(&body("autoscaling/v1", "HorizontalPodAutoscaler", &v1));
    assert_eq!(decoded["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(decoded["spec"]["scaleTargetRef"]["kind"], "Deployment");
}

#[test]
fn kinds_map_to_messages() {
    for (api_version, kind, message) in [
        ("v1", "ConfigMap", "k8s.io.api.core.v1.ConfigMap"),
        ("v1", "Namespace", "k8s.io.api.core.v1.Namespace"),
        ("apps/v1", "Deployment", "k8s.io.api.apps.v1.Deployment"),
        ("batch/v1", "Job", "k8s.io.api.batch.v1.Job"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", "k8s.io.api.rbac.v1.RoleBinding"),
        (
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            "k8s.io.api.authorization.v1.SelfSubjectAccessReview",
        ),
        (
            "authentication.k8s.io/v1",
            "SelfSubjectReview",
            "k8s.io.api.authentication.v1.SelfSubjectReview",
        ),
        ("authentication.k8s.io/v1", "TokenRequest", "k8s.io.api.authentication.v1.TokenRequest"),
        ("autoscaling/v1", "Scale", "k8s.io.api.autoscaling.v1.Scale"),
        ("policy/v1", "Eviction", "k8s.io.api.policy.v1.Eviction"),
        ("storage.k8s.io/v1", "CSIDriver", "k8s.io.api.storage.v1.CSIDriver"),
        ("apps/v1", "DeleteOptions", "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"),
    ] {
        assert_eq!(message_name(api_version, kind), Some(message), "{api_version} {kind}");
    }
    assert_eq!(message_name("v1", "Deployment"), None);
    assert_eq!(message_name("apps/v1beta1", "Deployment"), None);
}

#[test]
fn unknown_kinds_are_unsupported() {
    let err =
        decode_request(&body("example.com/v1", "Widget", &core::ConfigMap::default())).unwrap_err();
    assert_eq!((err.code(), err.reason()), (415, "UnsupportedMediaType"));
    assert!(err.message().contains("Widget"), "{}", err.message());
}

#[test]
fn gzip_envelopes_are_unsupported_and_json_envelopes_decode() {
    let mut unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: s("v1"), kind: s("ConfigMap") }),
        raw: Some(br#"{"metadata":{"name":"j"}}"#.to_vec()),
        content_encoding: s(""),
        content_type: s("application/json"),
    };
    let with_magic = |u: &Unknown| [MAGIC, &u.encode_to_vec()].concat();
    assert_eq!(
        decode(&with_magic(&unknown)),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}})
    );
    unknown.content_encoding = s("gzip");
    assert_eq!(decode_request(&with_magic(&unknown)).unwrap_err().code(), 415);
}

#[test]
fn bodies_that_are_not_protobuf_are_bad_requests() {
    for bad in [&b""[..], b"k8s", b"{\"kind\":\"ConfigMap\"}", b"k8s\x01\x0a\x00"] {
        let err = decode_request(bad).unwrap_err();
        assert_eq!((err.code(), err.reason()), (400, "BadRequest"));
        assert!(err.message().starts_with("not a Kubernetes protobuf body"), "{}", err.message());
    }
}

#[test]
fn every_truncation_is_an_error() {
    let deployment = apps::Deployment {
        metadata: meta("d"),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(3),
            template: Some(core::PodTemplateSpec {
                metadata: None,
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("c"),
                        image: s("nginx"),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    let full = envelope("apps/v1", "Deployment", deployment.encode_to_vec(), false);
    assert!(decode_request(&full).is_ok());
    for len in 0..full.len() {
        let err = decode_request(&full[..len])
            .expect_err(&format!("a body cut to {len} of {} bytes decoded", full.len()));
        assert_eq!(err.code(), 400, "{len}: {err}");
    }
}

#[test]
fn malformed_fields_are_bad_requests() {
    let check = |raw: Vec<u8>, expect: &str| {
        let err = decode_request(&envelope("v1", "ConfigMap", raw, true)).unwrap_err();
        assert_eq!(err.code(), 400, "{err}");
        assert!(err.message().contains(expect), "{:?} lacks {expect:?}", err.message());
    };
    // data (a map, field 2) sent as a varint.
    check(vec![2 << 3, 1], "at data: wire type 0");
    // metadata.name (field 1 of field 1) that is not UTF-8.
    check(vec![0x0a, 3, 0x0a, 1, 0xff], "at metadata.name: a string is not UTF-8");
    // A varint of eleven bytes.
    check([vec![4 << 3], vec![0xff; 10], vec![1]].concat(), "varint");
    // Field number 0; wire types 6 and 7; an end-group never begun.
    check(vec![0x00, 0x00], "invalid field number 0");
    check(vec![0x0e], "invalid wire type 6");
    check(vec![0x0c], "ends a group never begun");
    // A length past the end, inside the metadata.
    check(vec![0x0a, 2, 0x0a, 9], "runs past the end");
    // A quantity with no string.
    let limits = core::LimitRange {
        spec: Some(core::LimitRangeSpec {
            limits: vec![core::LimitRangeItem {
                max: map(&[("cpu", Quantity { string: None })]),
                ..Default::default()
            }],
        }),
        ..Default::default()
    };
    let err = decode_request(&body("v1", "LimitRange", &limits)).unwrap_err();
    assert_eq!(err.code(), 400);
    assert!(err.message().contains("spec.limits[0].max[\"cpu\"]"), "{}", err.message());
    // Raw bytes that are not JSON.
    let revision = apps::ControllerRevision {
        data: Some(RawExtension { raw: Some(b"{".to_vec()) }),
        ..Default::default()
    };
    assert_eq!(
        decode_request(&body("apps/v1", "ControllerRevision", &revision)).unwrap_err().code(),
        400
    );
}

#[test]
fn nesting_is_bounded() {
    let mut raw = body("v1", "ConfigMap", &core::ConfigMap::default());
    for _ in 0..200 {
        let revision = apps::ControllerRevision {
            data: Some(RawExtension { raw: Some(raw) }),
            ..Default::default()
        };
        raw = body("apps/v1", "ControllerRevision", &revision);
    }
    let err = decode_request(&raw).unwrap_err();
    assert!(err.message().contains("nest deeper"), "{}", err.message());
}

#[test]
fn mangled_bodies_never_panic() {
    let deployment = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: s("d"),
            labels: map(&[("a", "b".to_owned())]),
            creation_timestamp: Some(meta::Time { seconds: Some(T), nanos: None }),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(3),
            template: Some(core::PodTemplateSpec {
                metadata: None,
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("c"),
                        ports: vec![core::ContainerPort {
                            container_port: Some(80),
                            ..Default::default()
                        }],
                        resources: Some(core::ResourceRequirements {
                            limits: map(&[("cpu", quantity("1"))]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    let full = body("apps/v1", "Deployment", &deployment);
    // A small deterministic generator: flip, replace, insert and delete bytes.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..5000 {
        let mut mangled = full.clone();
        for _ in 0..(next() % 4 + 1) {
            let at = 4 + (next() as usize) % (mangled.len() - 4);
            match next() % 4 {
                0 => mangled[at] ^= 1 << (next() % 8),
                1 => mangled[at] = next() as u8,
                2 => mangled.insert(at, next() as u8),
                _ => {
                    mangled.remove(at);
                }
            }
        }
        let _ = decode_request(&mangled);
    }
}

#[test]
fn go_durations() {
    for (nanos, text) in [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (2_000_000, "2ms"),
        (1_500_000_000, "1.5s"),
        (61_000_000_000, "1m1s"),
        (3_600_000_000_000, "1h0m0s"),
        (5_400_000_000_000, "1h30m0s"),
        (-5_000_000_000, "-5s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ] {
        assert_eq!(go_duration(nanos), text);
    }
}

#[test]
fn the_schema_is_consistent() {
    let names: Vec<&str> = schema::MESSAGES.iter().map(|m| m.name).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "messages are sorted and unique");
    assert!(schema::KINDS.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
    for (_, _, i) in schema::KINDS {
        assert!(*i < schema::MESSAGES.len());
    }
    for message in schema::MESSAGES {
        let mut tags: Vec<u32> = message.fields.iter().map(|f| f.tag).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), message.fields.len(), "{}: duplicate tags", message.name);
        for field in message.fields {
            if let Ty::Msg(i) = field.ty {
                assert!(i < schema::MESSAGES.len(), "{}.{}", message.name, field.json);
            }
            if field.card == Card::OmitEmpty {
                assert!(matches!(field.ty, Ty::String | Ty::Bytes), "{}", message.name);
            }
        }
    }
}

#[test]
fn delete_options_in_any_group_version() {
    let options = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(meta::Preconditions { uid: s("u-1"), resource_version: None }),
        propagation_policy: s("Foreground"),
        dry_run: vec!["All".into()],
        ..Default::default()
    };
    assert_eq!(
        decode(&body("apps/v1", "DeleteOptions", &options)),
        json!({
            "apiVersion": "apps/v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": "u-1"},
            "propagationPolicy": "Foreground",
            "dryRun": ["All"],
        })
    );
}
