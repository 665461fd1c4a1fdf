//! A feed's routing, relists and subscriptions, without an API server.

use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::host_names;

/// Pod `name` of tenant `tenant` in its host namespace `carrel-<tenant>`.
fn pod(tenant: &str, name: &str) -> Pod {
    pod_in(&format!("carrel-{tenant}"), tenant, name)
}

fn pod_in(namespace: &str, tenant: &str, name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": host_names::host_labels(tenant)},
    }))
    .expect("pod")
}

fn partition(tenant: &str) -> Partition {
    Partition { namespace: format!("carrel-{tenant}"), tenant: tenant.to_owned() }
}

fn feed() -> Arc<Feed<Pod>> {
    Arc::new(Feed::new(crate::host_watch::labelled, |_| true))
}

/// What a subscription has been sent so far, in words.
fn drain(s: &mut Subscription<Pod>) -> Vec<String> {
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let mut seen = Vec::new();
    while let Some(Some(event)) = s.next().now_or_never() {
        seen.push(match event {
            Event::Init => "Init".to_owned(),
            Event::InitApply(p) => format!("InitApply {}", name(&p)),
            Event::InitDone => "InitDone".to_owned(),
            Event::Apply(p) => format!("Apply {}", name(&p)),
            Event::Delete(p) => format!("Delete {}", name(&p)),
        });
    }
    seen
}

fn names(s: &Subscription<Pod>) -> Vec<String> {
    let mut names: Vec<String> =
        s.store().state().iter().filter_map(|p| p.metadata.name.clone()).collect();
    names.sort();
    names
}

#[test]
fn each_change_reaches_the_subscribers_of_its_partition_only() {
    let feed = feed();
    let mut a = feed.subscribe(partition("a"));
    let mut b = feed.subscribe(partition("b"));
    feed.apply(Event::Init);
    feed.apply(Event::InitApply(pod("a", "a1")));
    feed.apply(Event::InitApply(pod("b", "b1")));
    feed.apply(Event::InitDone);
    feed.apply(Event::Apply(pod("a", "a2")));
    feed.apply(Event::Delete(pod("a", "a1")));
    // Another tenant's pod in a's host namespace is not a's.
    feed.apply(Event::Apply(pod_in("carrel-a", "b", "stray")));
    assert_eq!(
        drain(&mut a),
        ["Init", "InitApply a1", "InitDone", "Apply a2", "Delete a1"],
        "a is shown its own pods as a watch of its own would show them"
    );
    assert_eq!(drain(&mut b), ["Init", "InitApply b1", "InitDone"]);
    assert_eq!(names(&a), ["a2"]);
    assert_eq!(names(&b), ["b1"]);
    assert!(a.store().wait_until_ready().now_or_never().is_some_and(|r| r.is_ok()));
}

#[test]
fn a_relist_reaches_every_subscriber_and_drops_what_it_did_not_show() {
    let feed = feed();
    let mut a = feed.subscribe(partition("a"));
    let mut b = feed.subscribe(partition("b"));
    feed.apply(Event::Init);
    feed.apply(Event::InitApply(pod("a", "a1")));
    feed.apply(Event::InitApply(pod("b", "b1")));
    feed.apply(Event::InitDone);
    drain(&mut a);
    drain(&mut b);
    // The watch was away; meanwhile a1 and b1 were deleted and a2 made.
    feed.apply(Event::Init);
    feed.apply(Event::InitApply(pod("a", "a2")));
    assert_eq!(names(&b), ["b1"], "a cache holds what it held until the relist is done");
    feed.apply(Event::InitDone);
    assert_eq!(drain(&mut a), ["Init", "InitApply a2", "InitDone"]);
    assert_eq!(
        drain(&mut b),
        ["Init", "InitDone"],
        "b is told of the relist that shows it nothing"
    );
    assert_eq!(names(&a), ["a2"]);
    assert!(names(&b).is_empty());
}

#[test]
fn a_late_subscriber_is_shown_its_cache_as_a_relist() {
    let feed = feed();
    feed.apply(Event::Init);
    feed.apply(Event::InitApply(pod("a", "a1")));
    // One that subscribes during a list is shown its partition once the list is done.
    let mut during = feed.subscribe(partition("a"));
    feed.apply(Event::InitApply(pod("a", "a2")));
    assert!(drain(&mut during).is_empty());
    feed.apply(Event::InitDone);
    assert_eq!(drain(&mut during).len(), 4, "Init, the two pods, InitDone");
    // One that subscribes once the watch has listed is shown its partition at once.
    let mut after = feed.subscribe(partition("a"));
    let mut shown = drain(&mut after);
    shown.sort();
    assert_eq!(shown, ["Init", "InitApply a1", "InitApply a2", "InitDone"]);
    // And a tenant with nothing on the host gets a complete, empty cache.
    let mut empty = feed.subscribe(partition("c"));
    assert_eq!(drain(&mut empty), ["Init", "InitDone"]);
    assert!(empty.store().wait_until_ready().now_or_never().is_some_and(|r| r.is_ok()));
}

#[test]
fn an_unsubscribed_partition_is_cached_only_while_it_holds_objects() {
    let feed = feed();
    feed.apply(Event::Init);
    feed.apply(Event::InitDone);
    let a = feed.subscribe(partition("a"));
    let b = feed.subscribe(partition("b"));
    // Changes for a tenant with no subscriber are dropped, but its cache follows them.
    feed.apply(Event::Apply(pod("c", "c1")));
    assert_eq!(feed.subscribed(), [partition("a"), partition("b")].into());
    feed.apply(Event::Apply(pod("a", "a1")));
    drop(a);
    drop(b);
    assert!(feed.subscribed().is_empty(), "nothing is left subscribed");
    assert_eq!(feed.cached(), [partition("a"), partition("c")].into(), "b had nothing");
    feed.apply(Event::Delete(pod("a", "a1")));
    feed.apply(Event::Delete(pod("c", "c1")));
    assert!(feed.cached().is_empty());
    // A subscriber that comes later is shown what the cache kept for it.
    feed.apply(Event::Apply(pod("c", "c2")));
    let mut c = feed.subscribe(partition("c"));
    assert_eq!(drain(&mut c), ["Init", "InitApply c2", "InitDone"]);
}

#[test]
fn an_object_whose_tenant_label_changes_leaves_its_partition() {
    let feed = feed();
    feed.apply(Event::Init);
    feed.apply(Event::InitDone);
    let mut a = feed.subscribe(partition("a"));
    let mut b = feed.subscribe(Partition { namespace: "carrel-a".into(), tenant: "b".into() });
    drain(&mut a);
    drain(&mut b);
    feed.apply(Event::Apply(pod("a", "p")));
    feed.apply(Event::Apply(pod_in("carrel-a", "b", "p")));
    assert_eq!(drain(&mut a), ["Apply p", "Delete p"]);
    assert_eq!(drain(&mut b), ["Apply p"]);
    assert!(names(&a).is_empty());
    assert_eq!(names(&b), ["p"]);
    // Without Carrel's labels it is no one's.
    let mut unlabelled = pod_in("carrel-a", "b", "p");
    unlabelled.metadata.labels = None;
    feed.apply(Event::Apply(unlabelled));
    assert_eq!(drain(&mut b), ["Delete p"]);
    assert!(names(&b).is_empty());
}

#[test]
fn unkept_partitions_are_cached_only_when_subscribed() {
    let feed: Arc<Feed<Pod>> = Arc::new(Feed::new(crate::host_watch::labelled, |p: &Partition| {
        p.namespace.starts_with("carrel-")
    }));
    feed.apply(Event::Init);
    feed.apply(Event::InitApply(pod_in("kube-system", "a", "x")));
    feed.apply(Event::InitApply(pod_in("mine", "m", "y")));
    let mut mine = feed.subscribe(Partition { namespace: "mine".into(), tenant: "m".into() });
    feed.apply(Event::InitApply(pod_in("mine", "m", "z")));
    feed.apply(Event::InitDone);
    assert_eq!(drain(&mut mine), ["Init", "InitApply z", "InitDone"], "y came before it");
    assert_eq!(feed.cached().len(), 1);
}
