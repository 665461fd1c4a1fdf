//! The garbage collector, as kube-controller-manager's (`pkg/controller/garbagecollector`): it
//! keeps a graph of every object's owner references, from a metadata-only watch of each
//! resource the cluster serves (found by discovery, again whenever a CRD changes), and
//!
//! - deletes an object once none of its owners exists (an owner deleted in the background, or
//!   one that never existed): its dependents are "collected";
//! - where some owners remain, removes the references to those that are gone;
//! - for an owner deleted with `propagationPolicy: Orphan` (the API server put the `orphan`
//!   finalizer on it), removes every dependent's reference to it, then the finalizer;
//! - for an owner deleted with `propagationPolicy: Foreground` (`foregroundDeletion`), deletes
//!   its dependents (in the foreground themselves when they have dependents of their own), and
//!   removes the finalizer once no dependent with `blockOwnerDeletion` is left.
//!
//! An owner missing from the graph is looked up in the API before anything is deleted, so a
//! graph still filling never deletes a dependent whose owner exists. Events are not watched (as
//! kube-controller-manager ignores them).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::discovery::{verbs, ApiCapabilities, ApiResource, Discovery, Scope};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::{Context, Error};

/// The finalizer of an orphaning delete.
pub const ORPHAN: &str = "orphan";
/// The finalizer of a foreground delete.
pub const FOREGROUND: &str = "foregroundDeletion";

/// How soon an object whose check failed is looked at again.
const RETRY: Duration = Duration::from_secs(1);

/// Resources the collector does not watch: Events own nothing and nothing owns them, and there
/// are many of them.
fn ignored(resource: &ApiResource) -> bool {
    resource.plural == "events" && matches!(resource.group.as_str(), "" | "events.k8s.io")
}

/// A served resource, as the collector reaches it.
#[derive(Debug)]
struct Resource {
    api: ApiResource,
    namespaced: bool,
}

/// One object of the graph.
#[derive(Debug, Clone)]
struct Node {
    resource: Arc<Resource>,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    finalizers: Vec<String>,
}

impl Node {
    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    fn api(&self, context: &Context) -> Api<DynamicObject> {
        api(context, &self.resource, self.namespace.as_deref())
    }
}

fn api(context: &Context, resource: &Resource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace.filter(|_| resource.namespaced) {
        Some(ns) => Api::namespaced_with(context.client.clone(), ns, &resource.api),
        None => Api::all_with(context.client.clone(), &resource.api),
    }
}

/// What the watches tell the collector.
enum Change {
    /// An object of `resource` as it now is.
    Seen(Arc<Resource>, Box<PartialObjectMeta<DynamicObject>>),
    /// An object is gone.
    Gone(String),
    /// A relist of `resource` began.
    Relisting(Arc<Resource>),
    /// The relist of `resource` ended.
    Relisted(Arc<Resource>),
    /// A CRD changed: the served resources may have.
    Rediscover,
}

/// The graph: every object watched, by uid, and each owner's dependents.
#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
    /// Per resource, the uids seen since its relist began.
    relisting: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// Put `uid` in as `node`; the uids whose check it calls for.
    fn upsert(&mut self, uid: &str, node: Node) -> Vec<String> {
        let old = self.nodes.insert(uid.to_owned(), node.clone());
        if let Some(old) = &old {
            for owner in &old.owners {
                if let Some(set) = self.dependents.get_mut(&owner.uid) {
                    set.remove(uid);
                }
            }
        }
        for owner in &node.owners {
            self.dependents.entry(owner.uid.clone()).or_default().insert(uid.to_owned());
        }
        let changed = old.as_ref().is_none_or(|old| {
            old.owners != node.owners
                || old.deleting != node.deleting
                || old.finalizers != node.finalizers
        });
        let mut check = Vec::new();
        if changed && (!node.owners.is_empty() || node.deleting) {
            check.push(uid.to_owned());
        }
        if changed && node.deleting {
            // Its dependents may be waiting for it to be deleted in the foreground.
            check.extend(self.dependents_of(uid));
        }
        check
    }

    /// Take `uid` out; the uids whose check it calls for.
    fn remove(&mut self, uid: &str) -> Vec<String> {
        let Some(node) = self.nodes.remove(uid) else { return Vec::new() };
        let mut check = self.dependents_of(uid);
        for owner in &node.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(uid);
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
            // An owner deleted in the foreground may have been waiting for this one.
            if self.nodes.get(&owner.uid).is_some_and(|o| o.has_finalizer(FOREGROUND)) {
                check.push(owner.uid.clone());
            }
        }
        check
    }

    fn dependents_of(&self, uid: &str) -> Vec<String> {
        self.dependents.get(uid).map(|set| set.iter().cloned().collect()).unwrap_or_default()
    }
}

/// Run the collector against `context`'s cluster until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let (changes, mut received) = mpsc::channel::<Change>(1024);
    let (retry, mut retried) = mpsc::unbounded_channel::<String>();
    let mut collector = Collector {
        context: context.clone(),
        graph: Graph::default(),
        kinds: HashMap::new(),
        watched: HashMap::new(),
        changes: changes.clone(),
        retry,
    };
    // CRDs come and go: each change is a reason to look at what is served again.
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let crd_changes = {
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::all_with(context.client.clone(), &crds);
        let changes = changes.clone();
        watcher(api, watcher::Config::default()).default_backoff().for_each(move |_| {
            let changes = changes.clone();
            async move {
                let _ = changes.send(Change::Rediscover).await;
            }
        })
    };
    let _crd_watch = Spawned(tokio::spawn(crd_changes));
    let stopped = crate::stopped(&stop);
    tokio::pin!(stopped);
    let stopped_early = tokio::select! {
        () = &mut stopped => true,
        () = collector.discover() => false,
    };
    if !stopped_early {
        loop {
            tokio::select! {
                () = &mut stopped => break,
                Some(change) = received.recv() => collector.apply(change).await,
                Some(uid) = retried.recv() => collector.check(&uid).await,
            }
        }
    }
}

/// A task that ends with its owner (the collector's watches, whether `run` ends or is dropped).
struct Spawned(tokio::task::JoinHandle<()>);

impl Drop for Spawned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Collector {
    context: Arc<Context>,
    graph: Graph,
    /// Served resources by (apiVersion, kind).
    kinds: HashMap<(String, String), Arc<Resource>>,
    /// The watch of each resource, by apiVersion and plural.
    watched: HashMap<String, Spawned>,
    changes: mpsc::Sender<Change>,
    retry: mpsc::UnboundedSender<String>,
}

impl Collector {
    /// Find the served resources and watch those not watched yet.
    async fn discover(&mut self) {
        let discovery = match Discovery::new(self.context.client.clone()).run().await {
            Ok(discovery) => discovery,
            Err(e) => {
                tracing::warn!(error = %e, "garbage collector: discovery failed");
                return;
            }
        };
        let watchable = |api: &ApiResource, caps: &ApiCapabilities| {
            [verbs::LIST, verbs::WATCH, verbs::DELETE].iter().all(|v| caps.supports_operation(v))
                && !ignored(api)
        };
        for group in discovery.groups() {
            // An owner reference may name a kind in any version its group serves (an
            // autoscaling/v1 HorizontalPodAutoscaler is an autoscaling/v2 one): each is known.
            for version in group.versions() {
                for (api, caps) in group.versioned_resources(version) {
                    if watchable(&api, &caps) {
                        let kind = (api.api_version.clone(), api.kind.clone());
                        let namespaced = caps.scope == Scope::Namespaced;
                        self.kinds.insert(kind, Arc::new(Resource { api, namespaced }));
                    }
                }
            }
            // The objects of a kind are watched once, in the group's preferred version.
            for (api, caps) in group.recommended_resources() {
                if !watchable(&api, &caps) {
                    continue;
                }
                let key = format!("{}/{}", api.api_version, api.plural);
                let kind = (api.api_version.clone(), api.kind.clone());
                let resource =
                    Arc::new(Resource { api, namespaced: caps.scope == Scope::Namespaced });
                self.kinds.insert(kind, resource.clone());
                if !self.watched.contains_key(&key) {
                    let watch = tokio::spawn(watch_resource(
                        self.context.clone(),
                        resource,
                        self.changes.clone(),
                    ));
                    self.watched.insert(key, Spawned(watch));
                }
            }
        }
    }

    async fn apply(&mut self, change: Change) {
        let check = match change {
            Change::Seen(resource, object) => {
                let meta = object.metadata;
                let (Some(uid), Some(name)) = (meta.uid, meta.name) else { return };
                let key = resource_key(&resource);
                if let Some(seen) = self.graph.relisting.get_mut(&key) {
                    seen.insert(uid.clone());
                }
                let node = Node {
                    resource,
                    namespace: meta.namespace,
                    name,
                    owners: meta.owner_references.unwrap_or_default(),
                    deleting: meta.deletion_timestamp.is_some(),
                    finalizers: meta.finalizers.unwrap_or_default(),
                };
                self.graph.upsert(&uid, node)
            }
            Change::Gone(uid) => self.graph.remove(&uid),
            Change::Relisting(resource) => {
                self.graph.relisting.insert(resource_key(&resource), HashSet::new());
                Vec::new()
            }
            Change::Relisted(resource) => {
                let key = resource_key(&resource);
                let seen = self.graph.relisting.remove(&key).unwrap_or_default();
                // Objects of the resource that the relist no longer has were deleted meanwhile.
                let gone: Vec<String> = self
                    .graph
                    .nodes
                    .iter()
                    .filter(|(uid, node)| {
                        resource_key(&node.resource) == key && !seen.contains(*uid)
                    })
                    .map(|(uid, _)| uid.clone())
                    .collect();
                gone.iter().flat_map(|uid| self.graph.remove(uid)).collect()
            }
            Change::Rediscover => {
                self.discover().await;
                Vec::new()
            }
        };
        for uid in check {
            self.check(&uid).await;
        }
    }

    /// Bring object `uid` in line with its owners; on a failure, look again after [`RETRY`].
    async fn check(&mut self, uid: &str) {
        if let Err(e) = self.try_check(uid).await {
            tracing::debug!(uid, error = %e, "garbage collector: retrying");
            let retry = self.retry.clone();
            let uid = uid.to_owned();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                let _ = retry.send(uid);
            });
        }
    }

    async fn try_check(&mut self, uid: &str) -> Result<(), Error> {
        let Some(node) = self.graph.nodes.get(uid).cloned() else { return Ok(()) };
        if node.deleting {
            if node.has_finalizer(ORPHAN) {
                self.orphan_dependents(uid, &node).await?;
            } else if node.has_finalizer(FOREGROUND) {
                self.delete_dependents(uid, &node).await?;
            }
            return Ok(());
        }
        if node.owners.is_empty() {
            return Ok(());
        }
        let mut solid = false;
        let mut gone = Vec::new();
        let mut waiting = false;
        for owner in &node.owners {
            match self.owner_state(&node, owner).await? {
                OwnerState::Solid => solid = true,
                OwnerState::Gone => gone.push(owner.uid.clone()),
                OwnerState::WaitingForDependents => {
                    waiting = true;
                    gone.push(owner.uid.clone());
                }
                OwnerState::Unknown => return Ok(()),
            }
        }
        if solid {
            if !gone.is_empty() {
                self.remove_owner_refs(&node, uid, &gone).await?;
            }
            return Ok(());
        }
        // Every owner is gone, or being deleted in the foreground.
        let has_dependents = !self.graph.dependents_of(uid).is_empty();
        let policy = if waiting && has_dependents {
            kube::api::PropagationPolicy::Foreground
        } else {
            kube::api::PropagationPolicy::Background
        };
        tracing::debug!(uid, name = %node.name, ?policy, "garbage collector: deleting a dependent");
        delete(&node.api(&self.context), &node.name, uid, policy).await
    }

    /// Whether `owner` of `node` exists: from the graph, else from the API.
    async fn owner_state(&self, node: &Node, owner: &OwnerReference) -> Result<OwnerState, Error> {
        if let Some(found) = self.graph.nodes.get(&owner.uid) {
            return Ok(if found.deleting && found.has_finalizer(FOREGROUND) {
                OwnerState::WaitingForDependents
            } else {
                OwnerState::Solid
            });
        }
        let Some(resource) = self.kinds.get(&(owner.api_version.clone(), owner.kind.clone()))
        else {
            // A kind this cluster does not serve (yet): nothing is decided about it.
            tracing::debug!(kind = %owner.kind, "garbage collector: an owner of an unknown kind");
            return Ok(OwnerState::Unknown);
        };
        let namespace = node.namespace.as_deref();
        let found = api(&self.context, resource, namespace).get_metadata_opt(&owner.name).await?;
        Ok(match found {
            Some(found) if found.metadata.uid.as_deref() == Some(owner.uid.as_str()) => {
                let meta = &found.metadata;
                let foreground = meta.finalizers.iter().flatten().any(|f| f == FOREGROUND);
                if meta.deletion_timestamp.is_some() && foreground {
                    OwnerState::WaitingForDependents
                } else {
                    OwnerState::Solid
                }
            }
            _ => OwnerState::Gone,
        })
    }

    /// An owner deleted with `Orphan`: its dependents lose their reference to it, then it
    /// loses its finalizer.
    async fn orphan_dependents(&self, uid: &str, node: &Node) -> Result<(), Error> {
        for dependent in self.graph.dependents_of(uid) {
            if let Some(d) = self.graph.nodes.get(&dependent) {
                self.remove_owner_refs(d, &dependent, &[uid.to_owned()]).await?;
            }
        }
        remove_finalizer(&node.api(&self.context), &node.name, ORPHAN).await
    }

    /// An owner deleted in the foreground: its dependents are deleted; once none that blocks it
    /// is left, it loses its finalizer.
    async fn delete_dependents(&self, uid: &str, node: &Node) -> Result<(), Error> {
        let mut blocking = false;
        for dependent in self.graph.dependents_of(uid) {
            let Some(d) = self.graph.nodes.get(&dependent) else { continue };
            let blocks =
                d.owners.iter().any(|o| o.uid == uid && o.block_owner_deletion == Some(true));
            blocking |= blocks;
            if d.deleting {
                continue;
            }
            let policy = if self.graph.dependents_of(&dependent).is_empty() {
                kube::api::PropagationPolicy::Background
            } else {
                kube::api::PropagationPolicy::Foreground
            };
            delete(&d.api(&self.context), &d.name, &dependent, policy).await?;
        }
        if !blocking {
            remove_finalizer(&node.api(&self.context), &node.name, FOREGROUND).await?;
        }
        Ok(())
    }

    /// Take the references to `owners` out of `node`'s owner references.
    async fn remove_owner_refs(
        &self,
        node: &Node,
        uid: &str,
        owners: &[String],
    ) -> Result<(), Error> {
        let api = node.api(&self.context);
        let Some(live) = api.get_metadata_opt(&node.name).await? else { return Ok(()) };
        if live.metadata.uid.as_deref() != Some(uid) {
            return Ok(());
        }
        let refs = live.metadata.owner_references.unwrap_or_default();
        let kept: Vec<&OwnerReference> = refs.iter().filter(|r| !owners.contains(&r.uid)).collect();
        if kept.len() == refs.len() {
            return Ok(());
        }
        let patch = json!({"metadata": {
            "ownerReferences": kept,
            "resourceVersion": live.metadata.resource_version,
        }});
        api.patch_metadata(&node.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }
}

/// What the collector knows of one owner of an object.
enum OwnerState {
    /// It exists, and is not being deleted in the foreground.
    Solid,
    /// It does not exist (or another object has its name now).
    Gone,
    /// It is being deleted in the foreground: its dependents go first.
    WaitingForDependents,
    /// Its kind is not served: nothing can be said.
    Unknown,
}

fn resource_key(resource: &Resource) -> String {
    format!("{}/{}", resource.api.api_version, resource.api.plural)
}

/// Delete `name` (uid `uid`) with `policy`; already gone is done.
async fn delete(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    policy: kube::api::PropagationPolicy,
) -> Result<(), Error> {
    let params = DeleteParams {
        propagation_policy: Some(policy),
        preconditions: Some(Preconditions { uid: Some(uid.to_owned()), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        // Gone, or another object by that name now (the uid precondition).
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Take `finalizer` off `name`.
async fn remove_finalizer(
    api: &Api<DynamicObject>,
    name: &str,
    finalizer: &str,
) -> Result<(), Error> {
    let Some(live) = api.get_metadata_opt(name).await? else { return Ok(()) };
    let finalizers = live.metadata.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let kept: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {
        "finalizers": kept,
        "resourceVersion": live.metadata.resource_version,
    }});
    api.patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Watch the metadata of every object of `resource`, telling the collector.
async fn watch_resource(
    context: Arc<Context>,
    resource: Arc<Resource>,
    changes: mpsc::Sender<Change>,
) {
    // Metadata only: the collector reads nothing else.
    let api: Api<PartialObjectMeta<DynamicObject>> =
        Api::all_with(context.client.clone(), &resource.api);
    let events = watcher(api, watcher::Config::default()).default_backoff();
    forward(events, resource, changes).await;
}

async fn forward(
    events: impl Stream<Item = Result<Event<PartialObjectMeta<DynamicObject>>, watcher::Error>>,
    resource: Arc<Resource>,
    changes: mpsc::Sender<Change>,
) {
    tokio::pin!(events);
    while let Some(event) = events.next().await {
        let change = match event {
            Ok(Event::Apply(object) | Event::InitApply(object)) => {
                Change::Seen(resource.clone(), Box::new(object))
            }
            Ok(Event::Delete(object)) => match object.metadata.uid {
                Some(uid) => Change::Gone(uid),
                None => continue,
            },
            Ok(Event::Init) => Change::Relisting(resource.clone()),
            Ok(Event::InitDone) => Change::Relisted(resource.clone()),
            Err(e) => {
                tracing::debug!(resource = %resource.api.plural, error = %e, "garbage collector watch");
                continue;
            }
        };
        if changes.send(change).await.is_err() {
            return;
        }
    }
}
