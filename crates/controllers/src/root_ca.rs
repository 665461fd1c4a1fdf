//! The root CA publisher (kube-controller-manager's `root-ca-cert-publisher`,
//! `pkg/controller/certificates/rootcacertpublisher`): every namespace that is not being deleted
//! holds the ConfigMap `kube-root-ca.crt`, its `ca.crt` the CA that verifies the cluster's API
//! server, with Kubernetes' description; deleted, it is made again, changed, it is put back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::{Context, Error};

/// The ConfigMap's name.
pub const CONFIG_MAP: &str = "kube-root-ca.crt";
/// Its one key.
pub const KEY: &str = "ca.crt";
/// The annotation that describes it, and what it says (Kubernetes' words).
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver \
     when using internal endpoints such as the internal service IP or kubernetes.default.svc. No \
     other usage is guaranteed across distributions of Kubernetes clusters.";

struct Shared {
    client: kube::Client,
    ca: String,
}

/// Run the publisher of `ca` (PEM) until `stop` is true.
pub async fn run(context: Arc<Context>, ca: String, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let namespaces = Api::<Namespace>::all(client.clone());
    let maps = Api::<ConfigMap>::all(client.clone());
    let only_ours = watcher::Config::default().fields(&format!("metadata.name={CONFIG_MAP}"));
    Controller::new(namespaces, watcher::Config::default())
        .watches(maps, only_ours, |map: ConfigMap| {
            map.namespace().map(|ns| ObjectRef::<Namespace>::new(&ns))
        })
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, Arc::new(Shared { client, ca }))
        .for_each(|_| async {})
        .await;
}

fn error_policy(_namespace: Arc<Namespace>, error: &Error, _shared: Arc<Shared>) -> Action {
    tracing::debug!(%error, "root CA publisher sync failed");
    Action::requeue(Duration::from_secs(1))
}

/// The ConfigMap's data and annotations as they must be.
fn wanted(ca: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    (
        BTreeMap::from([(KEY.to_owned(), ca.to_owned())]),
        BTreeMap::from([(DESCRIPTION_ANNOTATION.to_owned(), DESCRIPTION.to_owned())]),
    )
}

async fn reconcile(namespace: Arc<Namespace>, shared: Arc<Shared>) -> Result<Action, Error> {
    let terminating =
        namespace.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    if namespace.metadata.deletion_timestamp.is_some() || terminating {
        return Ok(Action::await_change());
    }
    let ns = namespace.name_any();
    let api = Api::<ConfigMap>::namespaced(shared.client.clone(), &ns);
    let (data, annotations) = wanted(&shared.ca);
    let written = match api.get_opt(CONFIG_MAP).await? {
        None => {
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CONFIG_MAP.to_owned()),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &map).await.map(drop)
        }
        Some(mut map) => {
            let described =
                map.annotations().get(DESCRIPTION_ANNOTATION).is_some_and(|d| !d.is_empty());
            if map.data.as_ref() == Some(&data) && described {
                return Ok(Action::await_change());
            }
            map.data = Some(data);
            map.binary_data = None;
            map.annotations_mut().extend(annotations);
            api.replace(CONFIG_MAP, &PostParams::default(), &map).await.map(drop)
        }
    };
    match written {
        Ok(()) => Ok(Action::await_change()),
        // A namespace being deleted refuses new objects: nothing to publish there.
        Err(kube::Error::Api(e)) if e.code == 403 && e.reason == "Forbidden" => {
            Ok(Action::await_change())
        }
        // Someone else wrote it in between: read again.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Action::requeue(Duration::ZERO)),
        Err(e) => Err(e.into()),
    }
}
