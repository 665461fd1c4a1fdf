//! Host events about host pods, copied up to the tenant as events about its pods, each version
//! once.

use crate::*;

/// The version of each host event last copied up, by the event's uid. An event leaves it when
/// the host deletes it (events expire), or when a relist of the watch no longer shows it (it
/// was deleted while the watch was away), so that it holds no more than the host does.
#[derive(Debug, Default)]
pub(crate) struct SeenEvents {
    versions: HashMap<String, String>,
    relist: Relist<String>,
}

impl SeenEvents {
    /// Whether `version` of event `uid` is new here; it is remembered.
    pub(crate) fn first(&mut self, uid: &str, version: String) -> bool {
        if self.versions.get(uid) == Some(&version) {
            return false;
        }
        self.versions.insert(uid.to_owned(), version);
        true
    }

    pub(crate) fn forget(&mut self, uid: &str) {
        self.versions.remove(uid);
    }

    /// The watch lists every event again.
    pub(crate) fn relisting(&mut self) {
        self.relist.begin();
    }

    /// The watch shows event `uid`.
    pub(crate) fn listed(&mut self, uid: &str) {
        self.relist.saw(uid);
    }

    /// The relist is complete: what it did not show is gone.
    pub(crate) fn relisted(&mut self) {
        if let Some(shown) = self.relist.end() {
            self.versions.retain(|uid, _| shown.contains(uid));
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.versions.len()
    }
}

impl Syncer {
    /// The host events of the tenant's host namespace, as the shared host side shows them.
    pub(crate) async fn watch_host_events(self, mut events: Subscription<Event>) {
        while let Some(event) = events.next().await {
            let seen = || self.inner.events_seen.lock();
            match event {
                watcher::Event::Apply(e) | watcher::Event::InitApply(e) => {
                    if let Some(uid) = e.metadata.uid.as_deref() {
                        seen().listed(uid);
                    }
                    if let Err(err) = self.event_up(&e).await {
                        tracing::debug!(tenant = %self.inner.tenant, error = %err, "copying a host event");
                    }
                }
                watcher::Event::Delete(e) => {
                    if let Some(uid) = e.metadata.uid.as_deref() {
                        seen().forget(uid);
                    }
                }
                watcher::Event::Init => seen().relisting(),
                watcher::Event::InitDone => seen().relisted(),
            }
        }
    }

    /// A host event about one of our host pods, as an event about the tenant pod.
    pub(crate) async fn event_up(&self, event: &Event) -> Result<(), SyncError> {
        let involved = &event.involved_object;
        if involved.kind.as_deref() != Some("Pod") {
            return Ok(());
        }
        let Some(host_name) = involved.name.as_deref() else { return Ok(()) };
        let Some(host) = self.cached_host_pod(host_name) else { return Ok(()) };
        let Some((namespace, name)) = tenant_key(&host) else { return Ok(()) };
        let uid = host
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(host_names::ANNOTATION_UID))
            .cloned()
            .unwrap_or_default();
        let host_uid = event.metadata.uid.clone().unwrap_or_default();
        let version = event.metadata.resource_version.clone().unwrap_or_default();
        if !self.inner.events_seen.lock().first(&host_uid, version) {
            return Ok(());
        }
        let suffix: String =
            host_uid.chars().filter(char::is_ascii_alphanumeric).take(16).collect();
        let event_name = format!("{name}.{suffix}");
        let mut copy = to_value(event)?;
        let host_pod_uid = host.metadata.uid.clone().unwrap_or_default();
        if let Some(message) = copy.get_mut("message") {
            translate::in_tenant_words(
                message,
                (&self.inner.host_namespace, host_name, &host_pod_uid),
                (&namespace, &name, &uid),
            );
        }
        copy["metadata"] = json!({"name": event_name, "namespace": namespace});
        copy["involvedObject"] = json!({"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid});
        let typed: Event = serde_json::from_value(copy)
            .map_err(|source| SyncError::Decode { kind: "Event", source })?;
        carrel_events::put(&self.inner.tenant_client, &typed).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_events_hold_what_the_host_still_has() {
        let mut seen = SeenEvents::default();
        assert!(seen.first("a", "1".into()));
        assert!(!seen.first("a", "1".into()));
        assert!(seen.first("a", "2".into()), "a new version is copied again");
        assert!(seen.first("b", "1".into()));
        seen.forget("b");
        assert_eq!(seen.len(), 1);
        // A relist that shows only "c": "a" was deleted while the watch was away.
        seen.relisting();
        seen.listed("c");
        assert!(seen.first("c", "1".into()));
        assert_eq!(seen.len(), 2, "nothing is dropped before the relist is complete");
        seen.relisted();
        assert_eq!(seen.len(), 1);
        assert!(!seen.first("c", "1".into()));
        // Outside a relist, a listed event is just remembered by `first`.
        seen.listed("d");
        seen.relisted();
        assert_eq!(seen.len(), 1);
    }
}
