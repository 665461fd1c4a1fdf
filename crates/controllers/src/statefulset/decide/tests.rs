use serde_json::{json, Value};

use super::*;

const CURRENT: &str = "web-old";
const UPDATE: &str = "web-new";
const SAME: Revisions<'static> = Revisions { current: UPDATE, update: UPDATE };
const ROLLING: Revisions<'static> = Revisions { current: CURRENT, update: UPDATE };

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// A StatefulSet `web` of `replicas` pods, with one claim template `data`; `extra` merged in.
fn set(replicas: i32, extra: Value) -> StatefulSet {
    let mut v = json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "set-uid", "generation": 4},
        "spec": {
            "replicas": replicas,
            "serviceName": "web-svc",
            "selector": {"matchLabels": {"app": "web"}},
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                      "spec": {"accessModes": ["ReadWriteOnce"]}}],
        },
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn parallel() -> Value {
    json!({"spec": {"podManagementPolicy": "Parallel"}})
}

/// Pod `name` of revision `revision` in `phase`, ready or not.
fn pod(name: &str, phase: &str, ready: bool, revision: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": {"app": "web", POD_NAME_LABEL: name, REVISION_LABEL: revision}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": phase, "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" },
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }))
    .unwrap()
}

fn healthy(name: &str) -> Pod {
    pod(name, "Running", true, UPDATE)
}

fn deleting(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp = serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
    p
}

/// A pod whose identity and storage already match `set`.
fn complete(set: &StatefulSet, mut p: Pod) -> Pod {
    let o = ordinal(&p).unwrap();
    update_storage(set, p.spec.as_mut().unwrap(), o);
    update_identity(set, &mut p, o);
    p
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z").unwrap().with_timezone(&Utc)
}

fn no_claims() -> BTreeMap<String, PersistentVolumeClaim> {
    BTreeMap::new()
}

/// The claims of the pods of `ordinals`, as made for `set`.
fn claims_of(
    set: &StatefulSet,
    ordinals: impl IntoIterator<Item = i32>,
) -> BTreeMap<String, PersistentVolumeClaim> {
    ordinals.into_iter().flat_map(|o| claims(set, o)).map(|(_, c)| (c.name_any(), c)).collect()
}

/// The steps of a plan for `pods`, complete and with their claims.
fn steps(set: &StatefulSet, revisions: Revisions<'_>, pods: &[Pod]) -> Vec<Step> {
    let pods: Vec<Pod> = pods.iter().cloned().map(|p| complete(set, p)).collect();
    let claims = claims_of(set, pods.iter().filter_map(ordinal));
    plan(set, revisions, &pods, &claims, now()).steps
}

fn create(ordinal: i32) -> Step {
    Step::Create { ordinal, at_update: true }
}

#[test]
fn names_are_read_as_kubernetes_reads_them() {
    assert_eq!(parent_and_ordinal("web-0"), Some(("web", Some(0))));
    assert_eq!(parent_and_ordinal("web-0-12"), Some(("web-0", Some(12))));
    assert_eq!(parent_and_ordinal("web-007"), Some(("web", Some(7))));
    assert_eq!(parent_and_ordinal("web--3"), Some(("web-", Some(3))));
    assert_eq!(parent_and_ordinal("web-99999999999"), Some(("web", None)));
    assert_eq!(parent_and_ordinal("web"), None);
    assert_eq!(parent_and_ordinal("web3"), None);
    assert_eq!(parent_and_ordinal("web-"), None);
    assert!(is_member("web", &healthy("web-2")));
    assert!(!is_member("web", &healthy("web-0-2")));
    assert!(!is_member("we", &healthy("web-2")));
}

#[test]
fn a_new_pod_has_its_identity_its_claims_and_its_revision() {
    let s = set(
        3,
        json!({"spec": {"template": {"spec": {"volumes": [
        {"name": "data", "emptyDir": {}}, {"name": "scratch", "emptyDir": {}}]}}}}),
    );
    let template = s.spec.as_ref().unwrap().template.clone();
    let p = new_pod(&s, &template, 2, "web-abc");
    assert_eq!(p.metadata.name.as_deref(), Some("web-2"));
    assert_eq!(p.metadata.generate_name.as_deref(), Some("web-"));
    assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
    let labels = p.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app"], "web");
    assert_eq!(labels[POD_NAME_LABEL], "web-2");
    assert_eq!(labels[POD_INDEX_LABEL], "2");
    assert_eq!(labels[REVISION_LABEL], "web-abc");
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("web-2"));
    assert_eq!(spec.subdomain.as_deref(), Some("web-svc"));
    let volumes: Vec<(String, Option<String>)> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.clone(), v.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone())))
        .collect();
    // The template's volume of the claim's name is replaced by the claim.
    assert_eq!(volumes, [("data".into(), Some("data-web-2".into())), ("scratch".into(), None)]);
    let owner = owners::controller_of(&p.metadata).unwrap();
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("StatefulSet", "set-uid"));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert!(identity_matches(&s, &p) && storage_matches(&s, &p));

    let mut renamed = p.clone();
    renamed.metadata.labels.as_mut().unwrap().remove(POD_NAME_LABEL);
    assert!(!identity_matches(&s, &renamed));
    let mut unmounted = p;
    unmounted.spec.as_mut().unwrap().volumes = None;
    assert!(!storage_matches(&s, &unmounted));

    let claims = claims(&s, 2);
    assert_eq!(claims.len(), 1);
    let (template_name, claim) = &claims[0];
    assert_eq!(template_name, "data");
    assert_eq!(claim.metadata.name.as_deref(), Some("data-web-2"));
    assert_eq!(claim.metadata.labels.as_ref().unwrap()["app"], "web");
}

#[test]
fn ordered_ready_creates_one_pod_at_a_time_once_the_previous_is_running_and_ready() {
    let s = set(3, json!({}));
    assert_eq!(steps(&s, SAME, &[]), [create(0)]);
    let pending = pod("web-0", "Pending", false, UPDATE);
    assert_eq!(steps(&s, SAME, &[pending]), []);
    let running_unready = pod("web-0", "Running", false, UPDATE);
    assert_eq!(steps(&s, SAME, &[running_unready]), []);
    assert_eq!(steps(&s, SAME, &[healthy("web-0")]), [create(1)]);
    assert_eq!(steps(&s, SAME, &[healthy("web-0"), healthy("web-1")]), [create(2)]);
    // A gap is filled first.
    assert_eq!(steps(&s, SAME, &[healthy("web-0"), healthy("web-2")]), [create(1)]);
    assert_eq!(steps(&s, SAME, &[healthy("web-0"), healthy("web-1"), healthy("web-2")]), []);
}

#[test]
fn min_ready_seconds_hold_the_next_pod_until_the_previous_is_available() {
    // Ready since 00:00; now is 00:10.
    let s = set(2, json!({"spec": {"minReadySeconds": 900}}));
    assert_eq!(steps(&s, SAME, &[healthy("web-0")]), []);
    let s = set(2, json!({"spec": {"minReadySeconds": 300}}));
    assert_eq!(steps(&s, SAME, &[healthy("web-0")]), [create(1)]);
}

#[test]
fn parallel_creates_and_deletes_all_at_once() {
    let s = set(3, parallel());
    assert_eq!(steps(&s, SAME, &[]), [create(0), create(1), create(2)]);
    let pending = pod("web-0", "Pending", false, UPDATE);
    assert_eq!(steps(&s, SAME, &[pending]), [create(1), create(2)]);
    let s = set(1, parallel());
    let all = [healthy("web-0"), pod("web-1", "Pending", false, UPDATE), healthy("web-2")];
    assert_eq!(
        steps(&s, SAME, &all),
        [Step::ScaleDown("web-2".into()), Step::ScaleDown("web-1".into())]
    );
}

#[test]
fn ordinals_start_where_spec_ordinals_says() {
    let s = set(2, json!({"spec": {"ordinals": {"start": 5}}}));
    assert_eq!(steps(&s, SAME, &[]), [create(5)]);
    assert_eq!(steps(&s, SAME, &[healthy("web-5")]), [create(6)]);
    // web-0 is outside 5..=6: it goes once 5 and 6 are up.
    let all = [healthy("web-0"), healthy("web-5"), healthy("web-6")];
    assert_eq!(steps(&s, SAME, &all), [Step::ScaleDown("web-0".into())]);
}

#[test]
fn scale_down_goes_from_the_highest_ordinal_one_at_a_time() {
    let s = set(1, json!({}));
    let all = [healthy("web-0"), healthy("web-1"), healthy("web-2")];
    assert_eq!(steps(&s, SAME, &all), [Step::ScaleDown("web-2".into())]);
    // Terminating: wait for it to go.
    let all = [healthy("web-0"), healthy("web-1"), deleting(healthy("web-2"))];
    assert_eq!(steps(&s, SAME, &all), []);
    // An unhealthy replica holds the scale down.
    let all = [pod("web-0", "Pending", false, UPDATE), healthy("web-1")];
    assert_eq!(steps(&s, SAME, &all), []);
    // An unhealthy pod to delete goes when it is the first unhealthy one.
    let all = [healthy("web-0"), healthy("web-1"), pod("web-2", "Running", false, UPDATE)];
    assert_eq!(steps(&s, SAME, &all), [Step::ScaleDown("web-2".into())]);
    let all = [healthy("web-0"), pod("web-1", "Running", false, UPDATE), healthy("web-2")];
    assert_eq!(steps(&s, SAME, &all), [Step::ScaleDown("web-2".into())]);
    let all = [
        healthy("web-0"),
        pod("web-1", "Running", false, UPDATE),
        pod("web-2", "Pending", false, UPDATE),
    ];
    assert_eq!(steps(&s, SAME, &all), [], "web-2 is not the first unhealthy pod");
}

#[test]
fn finished_pods_are_deleted_and_terminating_ones_waited_for() {
    let s = set(2, json!({}));
    let all = [pod("web-0", "Failed", false, UPDATE), healthy("web-1")];
    assert_eq!(steps(&s, SAME, &all), [Step::DeleteFinished("web-0".into())]);
    let all = [healthy("web-0"), pod("web-1", "Succeeded", false, UPDATE)];
    assert_eq!(steps(&s, SAME, &all), [Step::DeleteFinished("web-1".into())]);
    let all = [deleting(pod("web-0", "Failed", false, UPDATE)), healthy("web-1")];
    assert_eq!(steps(&s, SAME, &all), []);
    let all = [deleting(healthy("web-0"))];
    assert_eq!(steps(&s, SAME, &all), []);
}

#[test]
fn a_pod_without_its_identity_or_a_pending_one_without_its_claims_is_fixed() {
    let s = set(1, json!({}));
    let mut stray = complete(&s, healthy("web-0"));
    stray.metadata.labels.as_mut().unwrap().remove(POD_NAME_LABEL);
    assert_eq!(plan(&s, SAME, &[stray], &no_claims(), now()).steps, [Step::Update("web-0".into())]);
    let pending = complete(&s, pod("web-0", "Pending", false, UPDATE));
    assert_eq!(
        plan(&s, SAME, std::slice::from_ref(&pending), &no_claims(), now()).steps,
        [Step::EnsureClaims("web-0".into())]
    );
    assert_eq!(plan(&s, SAME, &[pending], &claims_of(&s, [0]), now()).steps, []);
}

#[test]
fn a_rolling_update_replaces_old_pods_from_the_highest_ordinal_down_to_the_partition() {
    let old = |name: &str| pod(name, "Running", true, CURRENT);
    let s = set(3, json!({}));
    let all = [old("web-0"), old("web-1"), old("web-2")];
    let p = plan(
        &s,
        ROLLING,
        &all.iter().cloned().map(|p| complete(&s, p)).collect::<Vec<_>>(),
        &no_claims(),
        now(),
    );
    assert_eq!(p.steps, [Step::Roll("web-2".into())]);
    assert_eq!((p.counts.current, p.counts.updated), (2, 0), "the pod rolled is no longer current");
    // The updated one is not ready yet: wait.
    let all = [old("web-0"), old("web-1"), pod("web-2", "Running", false, UPDATE)];
    assert_eq!(steps(&s, ROLLING, &all), []);
    let all = [old("web-0"), old("web-1"), healthy("web-2")];
    assert_eq!(steps(&s, ROLLING, &all), [Step::Roll("web-1".into())]);
    // A terminating old pod is waited for.
    let all = [old("web-0"), deleting(old("web-1")), healthy("web-2")];
    assert_eq!(steps(&s, ROLLING, &all), []);

    // With a partition of 2, only web-2 is replaced; a missing web-0 is made at the old
    // revision, web-2 at the new.
    let s = set(3, json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 2}}}}));
    let all = [old("web-0"), old("web-1"), old("web-2")];
    assert_eq!(steps(&s, ROLLING, &all), [Step::Roll("web-2".into())]);
    let all = [old("web-0"), old("web-1"), healthy("web-2")];
    assert_eq!(steps(&s, ROLLING, &all), []);
    assert_eq!(steps(&s, ROLLING, &[]), [Step::Create { ordinal: 0, at_update: false }]);
    let all = [old("web-0"), old("web-1")];
    assert_eq!(steps(&s, ROLLING, &all), [create(2)]);
}

#[test]
fn max_unavailable_replaces_that_many_at_once() {
    let old = |name: &str| pod(name, "Running", true, CURRENT);
    let s = set(4, json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}}));
    let all = [old("web-0"), old("web-1"), old("web-2"), old("web-3")];
    assert_eq!(steps(&s, ROLLING, &all), [Step::Roll("web-3".into()), Step::Roll("web-2".into())]);
    // An unavailable pod takes room (under OrderedReady it holds everything).
    let all = [old("web-0"), old("web-1"), old("web-2"), pod("web-3", "Pending", false, UPDATE)];
    assert_eq!(steps(&s, ROLLING, &all), []);
    let mut burst = s.clone();
    burst.spec.as_mut().unwrap().pod_management_policy = Some("Parallel".into());
    assert_eq!(steps(&burst, ROLLING, &all), [Step::Roll("web-2".into())]);
    let s =
        set(4, json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "50%"}}}}));
    let all = [old("web-0"), old("web-1"), healthy("web-2"), healthy("web-3")];
    assert_eq!(steps(&s, ROLLING, &all), [Step::Roll("web-1".into()), Step::Roll("web-0".into())]);
}

#[test]
fn on_delete_never_replaces_a_pod_but_makes_new_ones_at_the_new_revision() {
    let s =
        set(2, json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}));
    let all = [pod("web-0", "Running", true, CURRENT), pod("web-1", "Running", true, CURRENT)];
    assert_eq!(steps(&s, ROLLING, &all), []);
    let all = [pod("web-0", "Running", true, CURRENT)];
    assert_eq!(steps(&s, ROLLING, &all), [create(1)]);
}

#[test]
fn status_counts_and_a_finished_rolling_update_makes_the_new_revision_current() {
    let s = set(3, json!({}));
    let all = [
        pod("web-0", "Running", true, CURRENT),
        pod("web-1", "Running", false, UPDATE),
        deleting(pod("web-2", "Running", true, UPDATE)),
    ];
    let p = plan(&s, ROLLING, &all, &no_claims(), now());
    assert_eq!(p.counts, Counts { replicas: 3, ready: 2, available: 2, current: 1, updated: 1 });
    let st = status(&s, p.counts, ROLLING, 0);
    assert_eq!(st.observed_generation, Some(4));
    assert_eq!(st.current_revision.as_deref(), Some(CURRENT));
    assert_eq!(st.update_revision.as_deref(), Some(UPDATE));
    assert_eq!(st.collision_count, Some(0));
    assert!(status_differs(&s, &st));

    let done = Counts { replicas: 3, ready: 3, available: 3, current: 0, updated: 3 };
    let st = status(&s, done, ROLLING, 0);
    assert_eq!(st.current_revision.as_deref(), Some(UPDATE));
    assert_eq!(st.current_replicas, Some(3));
    let mut seen = s.clone();
    seen.status = Some(st.clone());
    assert!(!status_differs(&seen, &st));
    // Under OnDelete the current revision stays until the pods are replaced by hand.
    let s =
        set(3, json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}));
    assert_eq!(status(&s, done, ROLLING, 0).current_revision.as_deref(), Some(CURRENT));
}

#[test]
fn a_deleted_set_only_counts() {
    let mut s = set(3, json!({}));
    s.metadata.deletion_timestamp = serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
    let p = plan(&s, SAME, &[healthy("web-0")], &no_claims(), now());
    assert_eq!((p.steps.len(), p.counts.replicas), (0, 1));
}

fn policy(when_deleted: &str, when_scaled: &str) -> Value {
    json!({"spec": {"persistentVolumeClaimRetentionPolicy":
        {"whenDeleted": when_deleted, "whenScaled": when_scaled}}})
}

fn claim(owners: Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({"metadata": {"name": "data-web-1", "ownerReferences": owners}}))
        .unwrap()
}

fn set_ref() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "set-uid",
           "controller": true, "blockOwnerDeletion": true})
}

fn pod_ref() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": "web-1", "uid": "uid-web-1",
           "controller": true, "blockOwnerDeletion": true})
}

fn owner_uids(refs: &[OwnerReference]) -> Vec<&str> {
    refs.iter().map(|r| r.uid.as_str()).collect()
}

#[test]
fn claims_are_owned_as_the_retention_policy_says() {
    // (whenDeleted, whenScaled, replicas: 2 keeps web-1, 1 scales it away) → owners wanted.
    let rows: [(&str, &str, i32, &[&str]); 8] = [
        ("Retain", "Retain", 2, &[]),
        ("Retain", "Retain", 1, &[]),
        ("Delete", "Retain", 2, &["set-uid"]),
        ("Delete", "Retain", 1, &["set-uid"]),
        ("Retain", "Delete", 2, &[]),
        ("Retain", "Delete", 1, &["uid-web-1"]),
        ("Delete", "Delete", 2, &["set-uid"]),
        ("Delete", "Delete", 1, &["uid-web-1"]),
    ];
    let p = healthy("web-1");
    for (when_deleted, when_scaled, replicas, wanted) in rows {
        let s = set(replicas, policy(when_deleted, when_scaled));
        let row = format!("{when_deleted}/{when_scaled} with {replicas} replicas");
        for start in
            [json!([]), json!([set_ref()]), json!([pod_ref()]), json!([set_ref(), pod_ref()])]
        {
            let c = claim(start.clone());
            let fixed_refs = claim_owner_refs(&c, &s, &p);
            assert_eq!(owner_uids(&fixed_refs), wanted, "{row} from {start}");
            let up_to_date = owner_uids(refs(&c)) == wanted;
            assert_eq!(claim_owner_up_to_date(&c, &s, &p), up_to_date, "{row} from {start}");
            let mut fixed = c.clone();
            fixed.metadata.owner_references = Some(fixed_refs.clone());
            assert!(claim_owner_up_to_date(&fixed, &s, &p), "{row} fixed");
            assert!(fixed_refs.iter().all(|r| r.controller == Some(true)));
        }
    }
}

#[test]
fn claims_of_an_earlier_owner_or_another_controller_are_left_alone() {
    let s = set(1, policy("Delete", "Delete"));
    let p = healthy("web-1");
    // An earlier pod of the name: stale, not touched, and a new pod waits for it to go.
    let mut earlier = pod_ref();
    earlier["uid"] = json!("uid-earlier");
    let stale = claim(json!([earlier]));
    assert!(claim_owner_up_to_date(&stale, &s, &p));
    let claims: BTreeMap<String, PersistentVolumeClaim> = [("data-web-1".to_owned(), stale)].into();
    let mut unborn = Pod::default();
    unborn.metadata.name = Some("web-1".into());
    assert!(claim_is_stale(&s, &unborn, &claims));
    assert!(!claim_is_stale(&set(1, policy("Delete", "Retain")), &unborn, &claims));
    let grown = set(2, json!({}));
    assert!(!claim_is_stale(&grown, &unborn, &no_claims()));

    // Another controller: our references go, none is added.
    let other = json!({"apiVersion": "example.com/v1", "kind": "Keeper", "name": "k", "uid": "k-uid",
                       "controller": true});
    let held = claim(json!([other, pod_ref()]));
    assert!(!claim_owner_up_to_date(&held, &s, &p));
    assert_eq!(owner_uids(&claim_owner_refs(&held, &s, &p)), ["k-uid"]);
    let held = claim(json!([other]));
    assert!(claim_owner_up_to_date(&held, &s, &p));

    // An owner reference of ours that is not a controller one is redone.
    let mut plain = pod_ref();
    plain["controller"] = Value::Null;
    let c = claim(json!([plain]));
    assert!(!claim_owner_up_to_date(&c, &s, &p));
    let refs = claim_owner_refs(&c, &s, &p);
    assert_eq!((owner_uids(&refs), refs[0].controller), (vec!["uid-web-1"], Some(true)));
}

#[test]
fn a_plan_fixes_the_claims_of_pods_it_scales_away_before_deleting_them() {
    let s = set(1, policy("Retain", "Delete"));
    let pods = [complete(&s, healthy("web-0")), complete(&s, healthy("web-1"))];
    let p = plan(&s, SAME, &pods, &claims_of(&s, [0, 1]), now());
    assert_eq!(p.steps, [Step::FixClaims("web-1".into()), Step::ScaleDown("web-1".into())]);
}
