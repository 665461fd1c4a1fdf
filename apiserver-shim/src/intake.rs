//! Flow control between tenants' pod creates and the syncers that carry pods to the host.
//!
//! In `carrel up` the tenant APIs, their syncers, the host API and the simulated kubelets share
//! the machine's cores. Tenants creating pods as fast as they can would otherwise have their
//! creates accepted faster than the syncers carry them down, and every accepted pod would then
//! wait behind that backlog before it reached the host. A [`PodIntake`] keeps the pods that are
//! stored but not yet taken up by their syncer within a window:
//!
//! - a pod create waits for room in the window before it is stored ([`PodIntake::enter`]);
//! - each tenant has one create at a time in that wait, and the window serves waiters first come
//!   first served, so tenants take turns: one creating many pods at once cannot starve another;
//! - the room is held by the stored pod ([`PodIntake::hold`]) and comes back when its syncer has
//!   taken it up ([`PodIntake::settled`]), or after a time limit if the syncer never says so
//!   (a syncer that is not running, a host that does not answer).
//!
//! A create that fails gives its room back at once. The wait shows in the create's latency, as
//! a request waits in kube-apiserver's priority-and-fairness queues when the server is busy; what
//! it buys is that a pod, once accepted, reaches the host without queueing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Early reports kept before old ones are looked for and forgotten.
const EARLY_KEPT: usize = 1024;

/// A pod: its tenant, namespace and name.
type PodKey = (String, String, String);

/// The window of pods stored and not yet taken up by their syncers, shared by the tenants of
/// one process.
#[derive(Debug)]
pub struct PodIntake {
    window: Arc<Semaphore>,
    /// Each tenant's turn to wait for the window.
    turns: Mutex<HashMap<String, Arc<Semaphore>>>,
    held: Mutex<Held>,
    limit: Duration,
}

#[derive(Debug, Default)]
struct Held {
    /// Room held by stored pods, and since when.
    rooms: HashMap<PodKey, (OwnedSemaphorePermit, Instant)>,
    /// Pods their syncer took up before their create had recorded its room (the syncer can see
    /// a pod as soon as it is stored), and when.
    early: HashMap<PodKey, Instant>,
}

/// Room for one pod in the window, from [`PodIntake::enter`]; dropping it gives it back.
#[derive(Debug)]
pub struct Room {
    permit: OwnedSemaphorePermit,
}

impl PodIntake {
    /// A window of `size` pods (at least one); room held longer than `limit` is given back.
    pub fn new(size: usize, limit: Duration) -> PodIntake {
        PodIntake {
            window: Arc::new(Semaphore::new(size.max(1))),
            turns: Mutex::default(),
            held: Mutex::default(),
            limit,
        }
    }

    /// The window's size for this machine: half a pod per core, at least one. What a pod waits
    /// for once stored is the pods ahead of it divided by the rate the machine syncs them, and
    /// that rate grows with the cores.
    pub fn size_for_this_machine() -> usize {
        let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
        (cores / 2).max(1)
    }

    /// Wait for room for one more pod of `tenant`.
    pub async fn enter(&self, tenant: &str) -> Room {
        let turn = {
            let mut turns = self.turns.lock();
            turns.entry(tenant.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(1))).clone()
        };
        // The semaphores are never closed, so acquiring fails only if they were.
        let _turn = turn.acquire_owned().await.ok();
        let acquire = self.window.clone().acquire_owned();
        tokio::pin!(acquire);
        loop {
            tokio::select! {
                permit = &mut acquire => {
                    let permit = permit.unwrap_or_else(|_| unreachable_closed());
                    return Room { permit };
                }
                () = tokio::time::sleep((self.limit / 4).max(Duration::from_millis(10))) => {
                    self.expire();
                }
            }
        }
    }

    /// Keep `room` until the syncer has taken up the stored pod `namespace/name` of `tenant`.
    pub fn hold(&self, tenant: &str, namespace: &str, name: &str, room: Room) {
        let key = (tenant.to_owned(), namespace.to_owned(), name.to_owned());
        let mut held = self.held.lock();
        if held.early.remove(&key).is_some() {
            return; // Taken up already: the room goes back now.
        }
        held.rooms.insert(key, (room.permit, Instant::now()));
    }

    /// The syncer of `tenant` has taken up pod `namespace/name` (made its host pod, or decided
    /// it will not): its room goes back.
    pub fn settled(&self, tenant: &str, namespace: &str, name: &str) {
        let key = (tenant.to_owned(), namespace.to_owned(), name.to_owned());
        let mut held = self.held.lock();
        if held.rooms.remove(&key).is_none() {
            // Deleted pods are reported too, and nobody holds room for them: forget old reports
            // as they pile up, even when no create ever waits long enough to expire them.
            if held.early.len() >= EARLY_KEPT {
                let (now, limit) = (Instant::now(), self.limit);
                held.early.retain(|_, since| now.duration_since(*since) < limit);
            }
            held.early.insert(key, Instant::now());
        }
    }

    /// A tenant is gone: forget its turn.
    pub fn forget(&self, tenant: &str) {
        self.turns.lock().remove(tenant);
        let mut held = self.held.lock();
        held.rooms.retain(|(t, _, _), _| t != tenant);
        held.early.retain(|(t, _, _), _| t != tenant);
    }

    /// Give back room held past the limit, and forget old early settlements.
    fn expire(&self) {
        let now = Instant::now();
        let limit = self.limit;
        let mut held = self.held.lock();
        let before = held.rooms.len();
        held.rooms.retain(|_, (_, since)| now.duration_since(*since) < limit);
        let expired = before - held.rooms.len();
        if expired > 0 {
            tracing::debug!(expired, "pod intake: room held past its limit given back");
        }
        held.early.retain(|_, since| now.duration_since(*since) < limit);
    }
}

#[cold]
fn unreachable_closed() -> OwnedSemaphorePermit {
    // `PodIntake` never closes its semaphore.
    panic!("the pod intake's window was closed")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(60);

    /// Whether `enter` finishes within a moment (it has room) or keeps waiting.
    async fn enters(intake: &Arc<PodIntake>, tenant: &str) -> Option<Room> {
        tokio::time::timeout(Duration::from_millis(50), intake.enter(tenant)).await.ok()
    }

    #[tokio::test]
    async fn a_full_window_waits_until_the_syncer_takes_a_pod_up() {
        let intake = Arc::new(PodIntake::new(1, LIMIT));
        let room = enters(&intake, "a").await.expect("room in an empty window");
        intake.hold("a", "default", "p1", room);
        assert!(enters(&intake, "b").await.is_none(), "a full window must make the next wait");
        intake.settled("a", "default", "p1");
        assert!(enters(&intake, "b").await.is_some(), "the settled pod's room must come back");
    }

    #[tokio::test]
    async fn a_failed_create_gives_its_room_back() {
        let intake = Arc::new(PodIntake::new(1, LIMIT));
        drop(enters(&intake, "a").await.expect("room"));
        assert!(enters(&intake, "a").await.is_some());
    }

    #[tokio::test]
    async fn a_pod_settled_before_its_hold_does_not_keep_its_room() {
        let intake = Arc::new(PodIntake::new(1, LIMIT));
        let room = enters(&intake, "a").await.expect("room");
        intake.settled("a", "default", "p1");
        intake.hold("a", "default", "p1", room);
        assert!(enters(&intake, "a").await.is_some(), "the room must not stay held");
    }

    #[tokio::test]
    async fn room_held_past_the_limit_comes_back() {
        let limit = Duration::from_millis(200);
        let intake = Arc::new(PodIntake::new(1, limit));
        let room = intake.enter("a").await;
        intake.hold("a", "default", "never-settled", room);
        let started = Instant::now();
        let entered = tokio::time::timeout(Duration::from_secs(10), intake.enter("b")).await;
        assert!(entered.is_ok(), "room held past the limit must come back");
        assert!(started.elapsed() >= limit, "room came back before the limit");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn pod_creates_wait_for_room_and_dry_runs_and_updates_do_not() {
        use axum::body::Body;
        use axum::http::Request;
        use tower::ServiceExt;

        let dir = tempfile::tempdir().expect("dir");
        let store = carrel_store::SledStore::open(dir.path(), carrel_store::Options::create())
            .expect("store");
        let api = Arc::new(crate::Api::new(Arc::new(store)).expect("api"));
        let server = Arc::new(crate::Server::new(api, ""));
        let intake = Arc::new(PodIntake::new(1, LIMIT));
        server.set_pod_intake(intake.clone(), "t");
        let router = crate::http::router(server);
        let send = |method: &str, name: &str, query: &str| {
            let pod = serde_json::json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": [{"name": "main", "image": "x"}]},
            });
            let collection = "/api/v1/namespaces/default/pods";
            let (uri, content_type) = match method {
                "POST" => (format!("{collection}{query}"), "application/json"),
                _ => (
                    format!("{collection}/{name}?fieldManager=test{query}"),
                    "application/apply-patch+yaml",
                ),
            };
            let request = Request::builder()
                .method(method)
                .uri(uri)
                .header("content-type", content_type)
                .body(Body::from(serde_json::to_vec(&pod).expect("json")))
                .expect("request");
            let router = router.clone();
            tokio::spawn(async move { router.oneshot(request).await.expect("answer").status() })
        };
        let post = |name: &str, query: &str| send("POST", name, query);
        let apply = |name: &str| send("PATCH", name, "");
        assert_eq!(post("a", "").await.expect("task").as_u16(), 201);
        let mut second = post("b", "");
        let waited = tokio::time::timeout(Duration::from_millis(200), &mut second).await;
        assert!(waited.is_err(), "the second pod must wait while the first holds the window");
        let dry = post("c", "?dryRun=All").await.expect("task");
        assert_eq!(dry.as_u16(), 201, "a dry run stores nothing and takes no room");
        intake.settled("t", "default", "a");
        let second = tokio::time::timeout(Duration::from_secs(5), second).await;
        assert_eq!(second.expect("in time").expect("task").as_u16(), 201);
        // Server-side apply: a new pod waits as a POSTed one does; an existing one does not.
        let mut created = apply("d");
        let waited = tokio::time::timeout(Duration::from_millis(200), &mut created).await;
        assert!(waited.is_err(), "an applied new pod must wait while the window is full");
        assert_eq!(apply("a").await.expect("task").as_u16(), 200, "an update takes no room");
        intake.settled("t", "default", "b");
        let created = tokio::time::timeout(Duration::from_secs(5), created).await;
        assert_eq!(created.expect("in time").expect("task").as_u16(), 201);
    }

    #[test]
    fn reports_of_pods_nobody_holds_room_for_do_not_pile_up() {
        let intake = PodIntake::new(1, Duration::ZERO);
        for i in 0..(3 * EARLY_KEPT) {
            intake.settled("a", "default", &format!("deleted-{i}"));
        }
        assert!(intake.held.lock().early.len() <= EARLY_KEPT);
    }

    #[tokio::test]
    async fn tenants_take_turns() {
        // Tenant a queues three creates, then b queues one: b goes second, not fourth.
        let intake = Arc::new(PodIntake::new(1, LIMIT));
        let first = enters(&intake, "a").await.expect("room");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, tenant) in ["a", "a", "a", "b"].into_iter().enumerate() {
            let intake = intake.clone();
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let room = intake.enter(tenant).await;
                order.lock().push(tenant);
                intake.hold(tenant, "default", &format!("p{i}"), room);
                intake.settled(tenant, "default", &format!("p{i}"));
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(first);
        for t in tasks {
            t.await.expect("task");
        }
        let order = order.lock().clone();
        assert_eq!(order, ["a", "b", "a", "a"]);
    }
}
