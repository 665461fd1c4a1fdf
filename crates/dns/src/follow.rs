//! [`follow`]: a cluster's Services and EndpointSlices, watched through a kube client, made the
//! [`SharedZone`]'s snapshot each time they change.

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use tracing::{debug, warn};

use crate::error::Result;
use crate::resolver::SharedZone;
use crate::zone::Zone;

/// How many watch events that arrived together one rebuild of the zone covers.
const EVENTS_PER_REBUILD: usize = 256;

/// Keeps `zone` the zone of `domain` for the Services and EndpointSlices `client` sees, in every
/// namespace: the zone is rebuilt once both are listed and then after each change (changes that
/// arrive together make one rebuild). Runs until dropped; watch errors are retried with
/// backoff. Fails at once only when `domain` is not a valid DNS name.
pub async fn follow(client: kube::Client, domain: String, zone: SharedZone) -> Result<()> {
    Zone::empty(&domain)?;
    let (services, services_writer) = reflector::store::<Service>();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    let service_events = reflector::reflector(
        services_writer,
        watcher(Api::<Service>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .map(|e| e.map(|_| ()).map_err(|e| e.to_string()));
    let slice_events = reflector::reflector(
        slices_writer,
        watcher(Api::<EndpointSlice>::all(client), watcher::Config::default()),
    )
    .default_backoff()
    .map(|e| e.map(|_| ()).map_err(|e| e.to_string()));
    let mut events = futures::stream::select(service_events, slice_events)
        .ready_chunks(EVENTS_PER_REBUILD)
        .boxed();
    while let Some(batch) = events.next().await {
        for error in batch.iter().filter_map(|e| e.as_ref().err()) {
            warn!(%domain, %error, "watching Services and EndpointSlices for DNS");
        }
        if !listed(&services) || !listed(&slices) {
            continue;
        }
        let (services, slices) = (services.state(), slices.state());
        match Zone::build_from(&domain, &services, &slices) {
            Ok(built) => {
                zone.replace(built);
                debug!(%domain, services = services.len(), slices = slices.len(), "zone rebuilt");
            }
            Err(error) => warn!(%domain, %error, "rebuilding the zone"),
        }
    }
    Ok(())
}

/// Whether `store` holds a complete first list.
fn listed<K>(store: &Store<K>) -> bool
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}
