//! Label and field selectors, parsed and evaluated the way kube-apiserver (v1.33) does.
//!
//! * [`LabelSelector`] is a port of `k8s.io/apimachinery/pkg/labels/selector.go`: the same lexer
//!   and recursive-descent parser, the same validation of keys (qualified names) and values, and
//!   the same error texts (`unable to parse requirement: <nil>: Invalid value: …`).
//! * [`FieldSelector`] is a port of `k8s.io/apimachinery/pkg/fields/selector.go`
//!   (`fields.ParseSelector`: `a=b`, `a==b`, `a!=b`, comma-separated, `\,` `\=` `\\` escapes).
//!   Which fields each resource accepts, and what they read from an object, follow the field label
//!   conversion funcs and `ToSelectableFields`/`GetAttrs` of kube-apiserver; see [`field_value`].
//!
//! Pure code: no IO.

mod field;
mod label;

pub use field::*;
pub use label::*;

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value};

    use super::*;
    use crate::object::go_quote;
    use serde_json::json;

    const NAME_PART_ERR: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    /// The field labels of the host's type at `group` and `plural` (its strategy's); those of a
    /// custom resource for any other.
    fn field_labels(group: &str, plural: &str) -> FieldLabels {
        crate::resource::Registry::host()
            .all()
            .iter()
            .find(|t| t.group == group && t.plural == plural)
            .map_or(FieldLabels::Default { cluster_scoped: false }, |t| t.strategy.field_labels(t))
    }

    #[test]
    fn label_selectors_parse() {
        // (input, the selector as Go's String() writes it)
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("   \t", ""),
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("x!=a", "x!=a"),
            ("x=", "x="),
            ("x=,z= ", "x=,z="),
            (" x = a , y != b ", "x=a,y!=b"),
            ("b=1,a=2", "a=2,b=1"),
            ("x", "x"),
            ("!x", "!x"),
            ("! x", "!x"),
            ("x,!y", "x,!y"),
            ("x in (a,b)", "x in (a,b)"),
            ("x in (b, a, b)", "x in (a,b)"),
            ("x notin (a)", "x notin (a)"),
            ("x in ()", "x in ()"),
            ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
            ("x in (,a)", "x in (,a)"),
            ("x in (a,)", "x in (,a)"),
            ("x>1", "x>1"),
            ("x<1", "x<1"),
            ("x > 10", "x>10"),
            ("in in (in, notin)", "in in (in,notin)"),
            ("notin=in", "notin=in"),
            ("example.com/app=web", "example.com/app=web"),
            ("a.b-c_d=E.f-G_h", "a.b-c_d=E.f-G_h"),
        ];
        for (input, want) in cases {
            let got = LabelSelector::parse(input)
                .unwrap_or_else(|e| panic!("{input:?} should parse, got {e}"));
            assert_eq!(got.to_string(), *want, "{input:?}");
            assert_eq!(got.is_everything(), want.is_empty(), "{input:?}");
        }
    }

    #[test]
    fn label_selectors_refused_with_kube_apiserver_messages() {
        let long_value = "v".repeat(64);
        let long_name = "n".repeat(64);
        let cases: Vec<(&str, String)> = vec![
            (",", "found ',', expected: !, identifier, or 'end of string'".into()),
            ("x,", "found '', expected: identifier after ','".into()),
            ("x,,y", "found ',', expected: identifier after ','".into()),
            ("x=a b", "found 'b', expected: ',' or 'end of string'".into()),
            ("x=a)", "found ')', expected: ',' or 'end of string'".into()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            ("x!", "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("x y", "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("x in a", "unable to parse requirement: found 'a' expected: '('".into()),
            ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
            ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'".into()),
            ("x in (a,", "unable to parse requirement: found '', expected: ',', or identifier".into()),
            ("x in (", "unable to parse requirement: found '', expected: ',', ')' or identifier".into()),
            ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier".into()),
            ("x==(", "unable to parse requirement: found '(', expected: identifier".into()),
            ("!", "unable to parse requirement: found '', expected: identifier".into()),
            ("!=a", "found '!=', expected: !, identifier, or 'end of string'".into()),
            (
                "x<-1",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"-1\": {VALUE_ERR}"),
            ),
            (
                "app:web",
                format!("unable to parse requirement: <nil>: Invalid value: \"app:web\": {NAME_PART_ERR}"),
            ),
            (
                "-x=a",
                format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {NAME_PART_ERR}"),
            ),
            (
                "a/b/c=d",
                "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
            ),
            (
                "/a",
                "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty".into(),
            ),
            (
                "Example.com/a",
                "unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into(),
            ),
            (
                "example.com/",
                format!("unable to parse requirement: <nil>: Invalid value: \"example.com/\": name part must be non-empty; {NAME_PART_ERR}"),
            ),
            (
                &long_name,
                format!("unable to parse requirement: <nil>: Invalid value: \"{long_name}\": name part must be no more than 63 characters"),
            ),
            (
                "x=a_",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"a_\": {VALUE_ERR}"),
            ),
            (
                "x in (ok, b/c)",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"b/c\": {VALUE_ERR}"),
            ),
            (
                "x in (_a, b_)",
                format!("unable to parse requirement: [values[0][x]: Invalid value: \"_a\": {VALUE_ERR}, values[1][x]: Invalid value: \"b_\": {VALUE_ERR}]"),
            ),
            (
                "x=\u{e9}",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"\u{e9}\": {VALUE_ERR}"),
            ),
            (
                "x=\"",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"\\\"\": {VALUE_ERR}"),
            ),
            (
                "x>abc",
                "unable to parse requirement: values[0]: Invalid value: \"abc\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            (
                "x<",
                "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            (
                "x>1/0",
                format!("unable to parse requirement: [values[0]: Invalid value: \"1/0\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"1/0\": {VALUE_ERR}]"),
            ),
            (
                "x>1_0",
                "unable to parse requirement: values[0]: Invalid value: \"1_0\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
        ];
        let long_value_case = format!("x={long_value}");
        let mut cases = cases;
        cases.push((
            &long_value_case,
            format!("unable to parse requirement: values[0][x]: Invalid value: \"{long_value}\": must be no more than 63 characters"),
        ));
        for (input, want) in &cases {
            let err = LabelSelector::parse(input).expect_err(input);
            assert_eq!(err.code(), 400, "{input:?}");
            assert_eq!(err.reason(), "BadRequest", "{input:?}");
            assert_eq!(&err.message(), want, "{input:?}");
        }
    }

    #[test]
    fn label_selectors_match() {
        let set = json!({"app": "web", "tier": "front", "empty": "", "n": "5", "junk": "x1"});
        // (selector, matches `set`)
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("missing=web", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=web", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("missing in (web)", false),
            ("missing in ()", false),
            ("empty in ()", true),
            ("empty=", true),
            ("missing=", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("app", true),
            ("empty", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("n<5", false),
            ("n>0", true),
            ("missing>1", false),
            ("missing<1", false),
            ("junk>1", false),
            ("junk<1", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("app=web,!tier", false),
        ];
        let set = labels(set);
        for (selector, want) in cases {
            let s = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(s.matches(&set), *want, "{selector:?}");
        }
    }

    #[test]
    fn label_selectors_read_metadata_labels() {
        let cases: &[(&str, Value, bool)] = &[
            ("app=web", json!({"metadata": {"labels": {"app": "web"}}}), true),
            ("app=web", json!({"metadata": {}}), false),
            ("!app", json!({"metadata": {}}), true),
            ("app!=web", json!({}), true),
            ("app", json!({"metadata": {"labels": null}}), false),
            ("", json!(null), true),
            // A non-string label value counts as absent.
            ("app", json!({"metadata": {"labels": {"app": 1}}}), false),
        ];
        for (selector, object, want) in cases {
            let s = LabelSelector::parse(selector).unwrap();
            assert_eq!(s.matches_object(object), *want, "{selector:?} on {object}");
        }
    }

    #[test]
    fn field_selectors_parse() {
        // (input, terms as (field, op, value), in ParseSelector's sorted order)
        type Terms = &'static [(&'static str, FieldOp, &'static str)];
        let cases: &[(&str, Terms)] = &[
            ("", &[]),
            (",", &[]),
            ("a=b,,", &[("a", FieldOp::Equals, "b")]),
            ("metadata.name=x", &[("metadata.name", FieldOp::Equals, "x")]),
            ("metadata.name==x", &[("metadata.name", FieldOp::DoubleEquals, "x")]),
            ("metadata.name!=x", &[("metadata.name", FieldOp::NotEquals, "x")]),
            ("spec.nodeName=", &[("spec.nodeName", FieldOp::Equals, "")]),
            ("z=1,a!=2", &[("a", FieldOp::NotEquals, "2"), ("z", FieldOp::Equals, "1")]),
            (r"a=x\,y", &[("a", FieldOp::Equals, "x,y")]),
            (r"a=x\=y", &[("a", FieldOp::Equals, "x=y")]),
            (r"a=x\\y", &[("a", FieldOp::Equals, r"x\y")]),
            (r"a=x\\,b=y", &[("a", FieldOp::Equals, r"x\"), ("b", FieldOp::Equals, "y")]),
            ("a==", &[("a", FieldOp::DoubleEquals, "")]),
            ("=", &[]),
            ("!=,a=b", &[("a", FieldOp::Equals, "b")]),
            ("=x", &[("", FieldOp::Equals, "x")]),
            (" a = b ", &[(" a ", FieldOp::Equals, " b ")]),
            ("a=\u{e9}t\u{e9}", &[("a", FieldOp::Equals, "\u{e9}t\u{e9}")]),
        ];
        for (input, want) in cases {
            let got = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            let got: Vec<(&str, FieldOp, &str)> = got
                .requirements()
                .iter()
                .map(|r| (r.field.as_str(), r.op, r.value.as_str()))
                .collect();
            assert_eq!(got, *want, "{input:?}");
        }
    }

    #[test]
    fn field_selectors_refused() {
        let cases: &[(&str, &str)] = &[
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            (" ", "invalid selector: ' '; can't understand ' '"),
            ("a=b=c", "invalid field selector: unescaped character in value: 61"),
            ("a==b=c", "invalid field selector: unescaped character in value: 61"),
            (r"a=b\,c,d=\x", r"invalid field selector: invalid escape sequence: \x"),
            (r"a=b\", r"invalid field selector: invalid escape sequence: \"),
        ];
        for (input, want) in cases {
            let err = FieldSelector::parse(input).expect_err(input);
            assert_eq!(err.code(), 400, "{input:?}");
            assert_eq!(err.message(), *want, "{input:?}");
        }
    }

    #[test]
    fn field_selectors_checked_per_resource() {
        // (group, plural, selector, None if supported else the message)
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            ("", "pods", "spec.nodeName=n,status.phase=Running", None),
            ("", "pods", "spec.host=n,status.podIPs=x,spec.hostNetwork=true", None),
            ("", "pods", "metadata.namespace=d,metadata.name=p", None),
            ("", "pods", "spec.foo=x", Some("field label not supported: spec.foo")),
            ("", "pods", "a=1,spec.bar=1", Some("field label not supported: a")),
            ("", "pods", "=x", Some("field label not supported: ")),
            ("", "nodes", "spec.unschedulable=false,metadata.name=n", None),
            ("", "nodes", "metadata.namespace=", Some("field label not supported: metadata.namespace")),
            ("", "namespaces", "status.phase=Active", None),
            ("", "namespaces", "metadata.namespace=x", Some("field label not supported: metadata.namespace")),
            ("", "secrets", "type=Opaque", None),
            ("", "secrets", "data=x", Some("field label not supported: data")),
            ("", "services", "spec.type=ClusterIP,spec.clusterIP=None", None),
            ("", "replicationcontrollers", "status.replicas=0", None),
            ("", "events", "involvedObject.kind=Pod,involvedObject.uid=u,reason=R,source=s,type=Normal,reportingComponent=c", None),
            ("", "events", "regarding.kind=Pod", Some("field label not supported: regarding.kind")),
            ("events.k8s.io", "events", "regarding.kind=Pod,regarding.name=p,reportingController=c,reason=R,type=Normal,source=s", None),
            ("events.k8s.io", "events", "involvedObject.kind=Pod", Some("field label not supported: involvedObject.kind")),
            ("events.k8s.io", "events", "reportingComponent=c", Some("field label not supported: reportingComponent")),
            ("batch", "jobs", "status.successful=1", None),
            ("batch", "jobs", "status.failed=1", Some("field label \"status.failed\" not supported for batchv1.Job")),
            ("", "configmaps", "metadata.name=a,metadata.namespace=b", None),
            ("", "configmaps", "data.x=1", Some("\"data.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("apps", "replicasets", "status.replicas=0", Some("\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("apps", "deployments", "spec.replicas=1", Some("\"spec.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("batch", "cronjobs", "status.successful=1", Some("\"status.successful\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("", "persistentvolumeclaims", "spec.volumeName=v", Some("\"spec.volumeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")),
            ("rbac.authorization.k8s.io", "clusterroles", "metadata.namespace=", None),
            ("example.com", "widgets", "metadata.name=w", None),
            ("", "pods", "", None),
        ];
        for (group, plural, selector, want) in cases {
            let s = FieldSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            match (s.check_supported(field_labels(group, plural)), want) {
                (Ok(()), None) => {}
                (Err(e), Some(msg)) => {
                    assert_eq!(e.code(), 400);
                    assert_eq!(e.reason(), "BadRequest");
                    assert_eq!(e.message(), *msg, "{group}/{plural} {selector:?}");
                }
                (got, _) => panic!("{group}/{plural} {selector:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn field_selectors_match_objects() {
        let scheduled = json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "node-a", "hostNetwork": true, "serviceAccountName": "sa"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}]},
        });
        let pending = json!({
            "metadata": {"name": "web-2", "namespace": "default"},
            "spec": {"restartPolicy": "Never"},
            "status": {"phase": "Pending"},
        });
        let core_event = json!({
            "metadata": {"name": "web-1.17a", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1", "uid": "u-1", "apiVersion": "v1", "fieldPath": "spec.containers{app}"},
            "reason": "Scheduled", "type": "Normal", "reportingComponent": "default-scheduler",
        });
        let v1_event = json!({
            "metadata": {"name": "web-1.17a", "namespace": "default"},
            "regarding": {"kind": "Pod", "name": "web-1", "uid": "u-1"},
            "reason": "Pulled", "type": "Normal", "reportingController": "kubelet",
            "deprecatedSource": {"component": "kubelet-old"},
        });
        let node = json!({"metadata": {"name": "node-a"}, "spec": {"unschedulable": true}});
        let namespace = json!({"metadata": {"name": "kube-system"}, "status": {}});
        let secret = json!({"metadata": {"name": "s", "namespace": "d"}});
        let token = json!({"metadata": {"name": "t", "namespace": "d"}, "type": "kubernetes.io/service-account-token"});
        let rc = json!({"metadata": {"name": "rc", "namespace": "d"}, "status": {"replicas": 3}});
        let job = json!({"metadata": {"name": "j", "namespace": "d"}, "status": {"succeeded": 1}});
        let service =
            json!({"metadata": {"name": "svc", "namespace": "d"}, "spec": {"clusterIP": "None"}});
        let cluster_role = json!({"metadata": {"name": "admin"}});
        let configmap = json!({"metadata": {"name": "cm", "namespace": "d"}});

        // (group, plural, selector, object, matches)
        let cases: &[(&str, &str, &str, &Value, bool)] = &[
            ("", "pods", "", &pending, true),
            ("", "pods", "spec.nodeName=", &pending, true),
            ("", "pods", "spec.nodeName=", &scheduled, false),
            ("", "pods", "spec.nodeName!=", &scheduled, true),
            ("", "pods", "spec.nodeName=node-a", &scheduled, true),
            ("", "pods", "spec.host=node-a", &scheduled, true),
            ("", "pods", "spec.nodeName==node-b", &scheduled, false),
            ("", "pods", "status.phase=Running", &scheduled, true),
            ("", "pods", "status.phase!=Running", &pending, true),
            ("", "pods", "status.phase!=Succeeded,status.phase!=Failed", &pending, true),
            ("", "pods", "spec.hostNetwork=true", &scheduled, true),
            ("", "pods", "spec.hostNetwork=false", &pending, true),
            ("", "pods", "spec.restartPolicy=Always", &scheduled, true),
            ("", "pods", "spec.restartPolicy=Never", &pending, true),
            ("", "pods", "spec.schedulerName=default-scheduler", &pending, true),
            ("", "pods", "spec.serviceAccountName=sa", &scheduled, true),
            ("", "pods", "status.podIP=10.0.0.7", &scheduled, true),
            ("", "pods", "status.podIP=", &pending, true),
            ("", "pods", "status.podIPs=10.0.0.7", &scheduled, false),
            ("", "pods", "status.podIPs=", &scheduled, true),
            ("", "pods", "status.nominatedNodeName=", &scheduled, true),
            ("", "pods", "metadata.name=web-1", &scheduled, true),
            ("", "pods", "metadata.name=web-1", &pending, false),
            ("", "pods", "metadata.name=web-1,metadata.namespace=default", &scheduled, true),
            ("", "pods", "metadata.namespace=other", &scheduled, false),
            ("", "events", "involvedObject.kind=Pod,involvedObject.name=web-1", &core_event, true),
            ("", "events", "involvedObject.name=web-2", &core_event, false),
            (
                "",
                "events",
                "involvedObject.uid=u-1,involvedObject.apiVersion=v1",
                &core_event,
                true,
            ),
            ("", "events", r"involvedObject.fieldPath=spec.containers{app}", &core_event, true),
            ("", "events", "involvedObject.resourceVersion=", &core_event, true),
            ("", "events", "involvedObject.namespace=default", &core_event, true),
            ("", "events", "reason=Scheduled,type=Normal", &core_event, true),
            ("", "events", "type!=Warning", &core_event, true),
            ("", "events", "reportingComponent=default-scheduler", &core_event, true),
            ("", "events", "source=default-scheduler", &core_event, true),
            ("events.k8s.io", "events", "regarding.kind=Pod,regarding.name=web-1", &v1_event, true),
            ("events.k8s.io", "events", "regarding.uid=u-2", &v1_event, false),
            ("events.k8s.io", "events", "reportingController=kubelet", &v1_event, true),
            ("events.k8s.io", "events", "source=kubelet-old", &v1_event, true),
            ("events.k8s.io", "events", "reason=Pulled,type=Normal", &v1_event, true),
            ("", "nodes", "spec.unschedulable=true", &node, true),
            ("", "nodes", "spec.unschedulable=false", &node, false),
            ("", "nodes", "metadata.name=node-a", &node, true),
            ("", "namespaces", "status.phase=Active", &namespace, true),
            ("", "secrets", "type=Opaque", &secret, true),
            ("", "secrets", "type=Opaque", &token, false),
            ("", "secrets", r"type!=kubernetes.io/service-account-token", &token, false),
            ("", "replicationcontrollers", "status.replicas=3", &rc, true),
            ("", "replicationcontrollers", "status.replicas=0", &rc, false),
            ("batch", "jobs", "status.successful=1", &job, true),
            ("batch", "jobs", "status.successful=0", &configmap, true),
            ("", "services", "spec.clusterIP=None,spec.type=ClusterIP", &service, true),
            (
                "rbac.authorization.k8s.io",
                "clusterroles",
                "metadata.namespace=",
                &cluster_role,
                true,
            ),
            (
                "rbac.authorization.k8s.io",
                "clusterroles",
                "metadata.namespace=x",
                &cluster_role,
                false,
            ),
            ("", "configmaps", "metadata.name=cm,metadata.namespace=d", &configmap, true),
            // Unsupported fields read as "" (callers refuse them first with check_supported).
            ("", "configmaps", "data.x=1", &configmap, false),
            ("", "configmaps", "data.x!=1", &configmap, true),
        ];
        for (group, plural, selector, object, want) in cases {
            let s = FieldSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(
                s.matches(field_labels(group, plural), object),
                *want,
                "{group}/{plural} {selector:?}"
            );
        }
    }

    #[test]
    fn field_values() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "d"},
            "spec": {"hostNetwork": false},
            "status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}]},
        });
        let cases: &[(&str, &str, &Value, &str, Option<&str>)] = &[
            ("", "pods", &pod, "metadata.name", Some("p")),
            ("", "pods", &pod, "spec.nodeName", Some("")),
            ("", "pods", &pod, "spec.hostNetwork", Some("false")),
            ("", "pods", &pod, "status.podIP", Some("10.0.0.1")),
            ("", "pods", &pod, "status.podIPs", Some("")),
            ("", "pods", &pod, "spec.containers", None),
            ("", "nodes", &pod, "metadata.namespace", None),
            ("", "nodes", &pod, "spec.unschedulable", Some("false")),
            ("", "replicationcontrollers", &pod, "status.replicas", Some("0")),
            ("apps", "replicasets", &pod, "status.replicas", None),
            ("", "namespaces", &pod, "metadata.name", Some("p")),
            ("", "persistentvolumes", &pod, "metadata.namespace", Some("")),
            ("", "configmaps", &pod, "metadata.namespace", Some("d")),
        ];
        for (group, plural, object, field, want) in cases {
            assert_eq!(
                field_value(field_labels(group, plural), object, field).as_deref(),
                *want,
                "{group}/{plural} {field}"
            );
        }
    }

    #[test]
    fn exact_names() {
        let cases: &[(&str, Option<&str>)] = &[
            ("", None),
            ("metadata.name=web", Some("web")),
            ("metadata.name==web", Some("web")),
            ("metadata.name=", Some("")),
            ("metadata.name!=web", None),
            ("metadata.namespace=d,metadata.name=web", Some("web")),
            (r"metadata.name=a\,b", Some("a,b")),
            ("spec.nodeName=web", None),
        ];
        for (selector, want) in cases {
            let s = FieldSelector::parse(selector).unwrap();
            assert_eq!(s.exact_name(), *want, "{selector:?}");
        }
    }

    #[test]
    fn field_selectors_display_like_go() {
        let s = FieldSelector::parse(r"b!=2,a==x\,y").unwrap();
        assert_eq!(s.to_string(), r"a=x\,y,b!=2");
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}\u{e9}"), "\"a\\\"b\\\\c\\n\\x01\u{e9}\"");
    }
}
