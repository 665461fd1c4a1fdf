//! The ResourceQuota controller (kube-controller-manager's `resourcequota-controller`,
//! `pkg/controller/resourcequota`): keeps each quota's `status.hard` equal to its `spec.hard`
//! and its `status.used` equal to what the objects of its namespace use of those resources, as
//! Kubernetes' quota evaluators count them ([`carrel_machinery::quota`], the same rules the API
//! server's admission applies).
//!
//! A quota is reconciled when it changes, when an object its namespace's quotas may count
//! changes there (pods, services, claims, ConfigMaps, Secrets, ReplicationControllers and
//! ResourceQuotas are watched, each event mapped to the quotas of the object's namespace), and
//! every 5 minutes (Kubernetes' `--resource-quota-sync-period`). A type named by a
//! `count/<resource>.<group>` limit is watched (metadata only) from the first reconcile that
//! meets it; its events reconcile every quota. A reconcile reads the quota and the objects it
//! counts from the API, not from caches.
//!
//! Where it differs: kube-apiserver's quota admission writes `status.used` itself after each
//! create it admits, so the status is current the moment the create returns; this API server's
//! admission counts from the stored objects and leaves the status to this controller, which
//! catches up a moment after the create (on the new object's watch event).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota,
    ResourceQuotaStatus, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::discovery::{verbs, ApiResource, Scope};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use carrel_machinery::quota::{self, Quota, ResourceList};

use crate::{Context, Error};

/// How often every quota is recounted, changes or not (Kubernetes' default sync period).
pub const RESYNC: Duration = Duration::from_secs(5 * 60);

/// The types watched from the start, each event reconciling the quotas of its namespace.
fn built_in(group: &str, resource: &str) -> Option<ApiResource> {
    Some(match (group, resource) {
        ("", "pods") => ApiResource::erase::<Pod>(&()),
        ("", "services") => ApiResource::erase::<Service>(&()),
        ("", "persistentvolumeclaims") => ApiResource::erase::<PersistentVolumeClaim>(&()),
        ("", "configmaps") => ApiResource::erase::<ConfigMap>(&()),
        ("", "secrets") => ApiResource::erase::<Secret>(&()),
        ("", "replicationcontrollers") => ApiResource::erase::<ReplicationController>(&()),
        ("", "resourcequotas") => ApiResource::erase::<ResourceQuota>(&()),
        _ => return None,
    })
}

/// A spawned task, ended when dropped.
struct Spawned(tokio::task::JoinHandle<()>);

impl Drop for Spawned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the reconciles share.
struct Shared {
    client: kube::Client,
    /// The other types quotas count, by (group, resource), as discovery found them.
    resources: Mutex<HashMap<(String, String), ApiResource>>,
    /// The watches of those types.
    watches: Mutex<HashMap<(String, String), Spawned>>,
    /// Reconciles every quota.
    everything: mpsc::UnboundedSender<()>,
}

/// Run the ResourceQuota controller until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let (everything, all_again) = mpsc::unbounded_channel();
    let all_again =
        futures::stream::unfold(
            all_again,
            |mut rx| async move { rx.recv().await.map(|()| ((), rx)) },
        );
    let shared = Arc::new(Shared {
        client: client.clone(),
        resources: Mutex::new(HashMap::new()),
        watches: Mutex::new(HashMap::new()),
        everything,
    });
    let controller =
        Controller::new(Api::<ResourceQuota>::all(client.clone()), watcher::Config::default());
    let quotas = controller.store();
    let config = watcher::Config::default;
    controller
        .watches(Api::<Pod>::all(client.clone()), config(), in_namespace(&quotas))
        .watches(Api::<Service>::all(client.clone()), config(), in_namespace(&quotas))
        .watches(Api::<PersistentVolumeClaim>::all(client.clone()), config(), in_namespace(&quotas))
        .watches(Api::<ConfigMap>::all(client.clone()), config(), in_namespace(&quotas))
        .watches(Api::<Secret>::all(client.clone()), config(), in_namespace(&quotas))
        .watches(Api::<ReplicationController>::all(client.clone()), config(), in_namespace(&quotas))
        .watches(Api::<ResourceQuota>::all(client), config(), in_namespace(&quotas))
        .reconcile_all_on(all_again)
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
}

/// A mapper from an object to the quotas of its namespace.
fn in_namespace<K: Resource>(
    quotas: &Store<ResourceQuota>,
) -> impl Fn(K) -> Vec<ObjectRef<ResourceQuota>> + Send + Sync + 'static {
    let quotas = quotas.clone();
    move |object: K| {
        let namespace = object.meta().namespace.clone();
        quotas
            .state()
            .iter()
            .filter(|q| q.namespace() == namespace)
            .map(|q| ObjectRef::from_obj(q.as_ref()))
            .collect()
    }
}

fn error_policy(quota: Arc<ResourceQuota>, error: &Error, _: Arc<Shared>) -> Action {
    tracing::debug!(quota = %quota.name_any(), %error, "resource quota sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(quota: Arc<ResourceQuota>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = quota.namespace().unwrap_or_default();
    let api: Api<ResourceQuota> = Api::namespaced(shared.client.clone(), &namespace);
    // The newest version: the one that triggered this reconcile may be older than our last write.
    let Some(quota) = api.get_opt(&quota.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let object = serde_json::to_value(&quota).map_err(|e| Error::Invalid(e.to_string()))?;
    let rules = Quota::from_object(&object);
    let mut listed = Vec::new();
    for evaluator in quota::evaluators_for(&rules.hard) {
        let (group, resource) = evaluator.group_resource();
        let Some(found) = shared.resource(group, resource).await? else { continue };
        let api: Api<DynamicObject> =
            Api::namespaced_with(shared.client.clone(), &namespace, &found);
        let items = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                // No longer served (its definition went): looked up again next time.
                shared.forget(group, resource);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let objects = items
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<Value>, _>>()
            .map_err(|e| Error::Invalid(e.to_string()))?;
        listed.push((evaluator, objects));
    }
    let used = quota::calculate_usage(&rules, &listed, chrono::Utc::now().timestamp());
    let current = quota.status.as_ref();
    let wanted = status(
        &rules.hard,
        current.map(|s| quota::resource_list(to_value(s.hard.as_ref()).as_ref())),
        current.map(|s| quota::resource_list(to_value(s.used.as_ref()).as_ref())),
        used,
    );
    if let Some((hard, used)) = wanted {
        let mut updated = quota.clone();
        updated.status =
            Some(ResourceQuotaStatus { hard: Some(api_list(&hard)), used: Some(api_list(&used)) });
        match api.replace_status(&quota.name_any(), &PostParams::default(), &updated).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::requeue(RESYNC))
}

fn to_value<T: serde::Serialize>(value: Option<&T>) -> Option<Value> {
    value.and_then(|v| serde_json::to_value(v).ok())
}

fn api_list(list: &ResourceList) -> std::collections::BTreeMap<String, ApiQuantity> {
    list.iter().map(|(k, v)| (k.clone(), ApiQuantity(v.to_string()))).collect()
}

/// The status a quota limiting `hard` should have, given what it has (`current_hard`,
/// `current_used`) and what its namespace uses (`counted`, from [`quota::calculate_usage`]):
/// `None` when it has it already (`syncResourceQuota`). A resource no evaluator counts keeps the
/// usage it had; resources no longer limited are dropped.
pub fn status(
    hard: &ResourceList,
    current_hard: Option<ResourceList>,
    current_used: Option<ResourceList>,
    counted: ResourceList,
) -> Option<(ResourceList, ResourceList)> {
    let mut dirty = match (&current_hard, &current_used) {
        (Some(current), Some(_)) => !quota::equal(hard, current),
        _ => true,
    };
    let mut used = current_used.clone().unwrap_or_default();
    used.extend(counted);
    used.retain(|name, _| hard.contains_key(name));
    dirty = dirty || !current_used.is_some_and(|current| quota::equal(&used, &current));
    dirty.then(|| (hard.clone(), used))
}

impl Shared {
    /// The served type `group`/`resource`, if it is served and namespaced; a type outside the
    /// built-in watches is watched from now on.
    async fn resource(&self, group: &str, resource: &str) -> Result<Option<ApiResource>, Error> {
        if let Some(found) = built_in(group, resource) {
            return Ok(Some(found));
        }
        let key = (group.to_owned(), resource.to_owned());
        let known = self.resources.lock().get(&key).cloned();
        let found = match known {
            Some(found) => found,
            None => {
                let Some(found) = self.discover(group, resource).await? else { return Ok(None) };
                self.resources.lock().insert(key.clone(), found.clone());
                found
            }
        };
        self.watches.lock().entry(key).or_insert_with(|| {
            let watch = watch_type(self.client.clone(), found.clone(), self.everything.clone());
            Spawned(tokio::spawn(watch))
        });
        Ok(Some(found))
    }

    /// Forget a type that is no longer served, and stop watching it.
    fn forget(&self, group: &str, resource: &str) {
        let key = (group.to_owned(), resource.to_owned());
        self.resources.lock().remove(&key);
        self.watches.lock().remove(&key);
    }

    /// `group`/`resource` as discovery finds it, if it is served, namespaced and listable.
    async fn discover(&self, group: &str, resource: &str) -> Result<Option<ApiResource>, Error> {
        let served = match kube::discovery::group(&self.client, group).await {
            Ok(served) => served,
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(served.recommended_resources().into_iter().find_map(|(found, caps)| {
            let fits = found.plural == resource
                && caps.scope == Scope::Namespaced
                && caps.supports_operation(verbs::LIST)
                && caps.supports_operation(verbs::WATCH);
            fits.then_some(found)
        }))
    }
}

/// Watch the objects of `resource` (metadata only): each change reconciles every quota.
async fn watch_type(
    client: kube::Client,
    resource: ApiResource,
    everything: mpsc::UnboundedSender<()>,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &resource);
    let events = watcher(api, watcher::Config::default()).default_backoff();
    tokio::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {
                if everything.send(()).is_err() {
                    return;
                }
            }
            Ok(Event::Init | Event::InitApply(_)) => {}
            Err(e) => tracing::debug!(resource = %resource.plural, error = %e, "quota watch"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carrel_machinery::quantity::Quantity;

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).expect(v))).collect()
    }

    #[test]
    fn the_status_follows_the_spec_and_the_count() {
        let hard = list(&[("pods", "2"), ("count/widgets.example.com", "1")]);
        // First sync: hard copied, what was counted written.
        let (h, used) = status(&hard, None, None, list(&[("pods", "0")])).expect("first");
        assert!(quota::equal(&h, &hard));
        assert!(quota::equal(&used, &list(&[("pods", "0")])));
        // Nothing changed: nothing written.
        assert_eq!(
            status(&hard, Some(hard.clone()), Some(used.clone()), list(&[("pods", "0")])),
            None
        );
        // Equal amounts written differently are the same.
        let same = list(&[("pods", "2000m"), ("count/widgets.example.com", "1")]);
        assert_eq!(status(&hard, Some(same), Some(used.clone()), list(&[("pods", "0")])), None);
        // A new count is written; a resource no evaluator counts keeps what it had.
        let had = list(&[("pods", "0"), ("count/widgets.example.com", "1")]);
        let (_, used) =
            status(&hard, Some(hard.clone()), Some(had), list(&[("pods", "1")])).expect("counted");
        assert_eq!(quota::pretty_print(&used), "count/widgets.example.com=1,pods=1");
        // A limit removed from the spec goes from the status.
        let fewer = list(&[("pods", "2")]);
        let (h, used) =
            status(&fewer, Some(hard.clone()), Some(used), list(&[("pods", "1")])).expect("fewer");
        assert_eq!(
            (quota::pretty_print(&h), quota::pretty_print(&used)),
            ("pods=2".into(), "pods=1".into())
        );
    }
}
