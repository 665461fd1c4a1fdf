//! Kubernetes Events about the objects a Carrel component acts on (core `v1` Events): the node
//! agent, the simulated kubelets and scheduler, and the syncer write theirs through one
//! [`Recorder`] each, aggregated as client-go's recorder aggregates them: a repeat of an event already written (same object, type,
//! reason and message) raises that Event's `count` and `lastTimestamp` instead of writing another.
//! Repeats are written at most once per [`REPEAT_INTERVAL`]; the ones in between are counted and
//! carried by the next write.
//!
//! An Event copied from another cluster (the syncer copies host events about host pods up to
//! their tenant pods) is written as it is given, through [`put`]: this crate is the one writer
//! of Events for every component.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use parking_lot::Mutex;

/// The least time between two writes of one repeated Event.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(30);
/// How long a written Event is remembered for aggregation.
const REMEMBER: Duration = Duration::from_secs(3600);
/// Above this many remembered Events, the ones older than [`REMEMBER`] are forgotten.
const PRUNE_ABOVE: usize = 1024;

/// The object an Event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventTarget {
    /// `apiVersion` of the object (`v1`, `coordination.k8s.io/v1`).
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace; the Event is written there.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID, when known.
    pub uid: Option<String>,
}

impl EventTarget {
    /// A Pod.
    pub fn pod(namespace: &str, name: &str, uid: Option<String>) -> EventTarget {
        EventTarget {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: namespace.into(),
            name: name.into(),
            uid,
        }
    }

    /// A PersistentVolumeClaim.
    pub fn persistent_volume_claim(
        namespace: &str,
        name: &str,
        uid: Option<String>,
    ) -> EventTarget {
        EventTarget {
            api_version: "v1".into(),
            kind: "PersistentVolumeClaim".into(),
            namespace: namespace.into(),
            name: name.into(),
            uid,
        }
    }

    /// A Lease.
    pub fn lease(namespace: &str, name: &str) -> EventTarget {
        EventTarget {
            api_version: "coordination.k8s.io/v1".into(),
            kind: "Lease".into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: None,
        }
    }
}

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Something went wrong.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    target: EventTarget,
    kind: EventType,
    reason: String,
    message: String,
}

#[derive(Clone, Debug)]
struct Written {
    name: String,
    /// Occurrences so far, written or not.
    count: i32,
    /// When the Event was last written.
    at: Instant,
}

/// Writes the Events of one component.
pub struct Recorder {
    client: Client,
    component: String,
    host: String,
    written: Mutex<HashMap<Key, Written>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("host", &self.host).finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder writing Events as `component` (e.g. `default-scheduler`) on `host` (may be
    /// empty).
    pub fn for_component(client: Client, component: &str, host: &str) -> Recorder {
        Recorder {
            client,
            component: component.to_owned(),
            host: host.to_owned(),
            written: Mutex::new(HashMap::new()),
        }
    }

    /// Write an Event about `target`, or count a repeat of one already written.
    pub async fn record(
        &self,
        target: &EventTarget,
        kind: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let key = Key {
            target: target.clone(),
            kind,
            reason: reason.to_owned(),
            message: message.to_owned(),
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &target.namespace);
        let previous = self.written.lock().get(&key).cloned();
        if let Some(previous) = previous {
            let count = previous.count.saturating_add(1);
            if previous.at.elapsed() < REPEAT_INTERVAL {
                self.written.lock().insert(key, Written { count, ..previous });
                return Ok(());
            }
            let patch = serde_json::json!({
                "count": count,
                "lastTimestamp": Timestamp::now().to_string(),
            });
            match api.patch(&previous.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    self.written
                        .lock()
                        .insert(key, Written { count, at: Instant::now(), ..previous });
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let now = Time(Timestamp::now());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let stem: String = target.name.chars().take(200).collect();
        let name = format!("{stem}.{nanos:x}");
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(target.namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(target.api_version.clone()),
                kind: Some(target.kind.clone()),
                namespace: Some(target.namespace.clone()),
                name: Some(target.name.clone()),
                uid: target.uid.clone(),
                ..ObjectReference::default()
            },
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            type_: Some(kind.as_str().to_owned()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: Some(self.host.clone()).filter(|h| !h.is_empty()),
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.host.clone()).filter(|h| !h.is_empty()),
            ..Event::default()
        };
        api.create(&PostParams::default(), &event).await?;
        let mut written = self.written.lock();
        if written.len() > PRUNE_ABOVE {
            written.retain(|_, w| w.at.elapsed() < REMEMBER);
        }
        written.insert(key, Written { name, count: 1, at: Instant::now() });
        Ok(())
    }
}

/// Write `event` as it is given (a copy of another cluster's Event, whose name says which one it
/// copies): created, or replacing the Event of its name, which is an older copy.
pub async fn put(client: &Client, event: &Event) -> Result<(), kube::Error> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or_default();
    let name = event.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), event).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let current = api.get(name).await?;
            let mut replacement = event.clone();
            replacement.metadata.resource_version = current.metadata.resource_version;
            api.replace(name, &PostParams::default(), &replacement).await?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}
