//! Tenants spread over several API replicas, each serving its own tenants from its own volume.
//!
//! - **Membership.** Each replica renews a Lease of its own in its namespace (labelled
//!   [`REPLICA_LABEL`], annotated with the address the others reach it at and how many tenants it
//!   has open). A replica whose Lease has run out is not live.
//! - **Assignment.** One replica at a time, the holder of the [`ASSIGNER`] Lease, gives each new
//!   tenant (one with no status yet) a replica: the live one with the fewest tenants, then the
//!   fewest open, then by name. It writes `status.replica` with the tenant's `resourceVersion` as
//!   a precondition, so a stale view writes nothing. A tenant served before replicas were used
//!   (a status, no replica) is claimed by the replica that holds its data.
//! - **Serving.** A replica's [`Manager`](crate::Manager) serves only the tenants whose
//!   `status.replica` names it; requests for the others are forwarded to theirs ([`Forward`]),
//!   with the client's own certificate, so that any replica (or the Service in front of them)
//!   is a front door.
//! - **Moving.** `carrel.dev/move-to: <replica>` on a tenant moves it: its replica stops serving
//!   it (requests for it are answered 503 with `Retry-After` meanwhile, which clients retry),
//!   sends its closed store and credentials to the other replica ([`Replicas::send`], received
//!   with [`receive`]), and only then writes the new replica in its status; the new replica
//!   serves it and takes the annotation off. Watches end when the old replica stops serving
//!   and resume on the new one from the same `resourceVersion`s (the store moved whole).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::reflector::{self, reflector, ObjectRef};
use kube::runtime::utils::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use parking_lot::Mutex;

use carrel_apiserver::access::PeerCertificates;
use carrel_apiserver::http::{Clusters, Forward, Forwarded};
use carrel_apiserver::peer::{FromReplica, PeerClient, PeerError};
use carrel_apiserver::status::ApiError;
use carrel_apiserver::tenant::types::Tenant;
use rustls::pki_types::CertificateDer;

/// The label of replicas' membership Leases; its value is the replica's name.
pub const REPLICA_LABEL: &str = "carrel.dev/replica";
/// The address (`HOST:PORT`) other replicas reach a replica at, on its membership Lease.
pub const ADDRESS_ANNOTATION: &str = "carrel.dev/replica-address";
/// How many tenants a replica has open, on its membership Lease: its load.
pub const LOAD_ANNOTATION: &str = "carrel.dev/open-tenants";
/// The Lease whose holder assigns new tenants to replicas.
pub const ASSIGNER: &str = "carrel-tenant-assigner";
/// The annotation that moves a tenant to the replica it names.
pub const MOVE_TO: &str = "carrel.dev/move-to";
/// The path a replica receives a moved tenant's data at: `<prefix><tenant>`.
pub const RECEIVE_PREFIX: &str = "/carrel/replicas/tenants/";
/// The path a replica answers relayed DNS queries of its tenants at: `<prefix><tenant>`, a DNS
/// message as body (`application/dns-message`, as DNS over HTTPS sends it).
pub const DNS_PREFIX: &str = "/carrel/replicas/dns/";
/// The media type of a DNS message.
const DNS_MESSAGE: &str = "application/dns-message";
/// Left in a tenant's directory once it was sent away: its data here is no longer the tenant's.
const MOVED_MARKER: &str = "moved-to";

/// How long a Lease holds without renewal.
const LEASE_SECONDS: i32 = 15;
/// How often Leases are renewed (and unassigned tenants looked for).
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// What a replica does on the host besides the manager's and the syncers' work, as RBAC rules:
/// its membership Lease and the assigner's (`hold`), the view of the others (`run`), and
/// `status.replica` of new tenants (`assign`).
pub fn rules() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                           "verbs": ["get", "list", "watch", "create", "update"]}),
        serde_json::json!({"apiGroups": ["carrel.dev"], "resources": ["tenants"],
                           "verbs": ["list", "watch"]}),
        serde_json::json!({"apiGroups": ["carrel.dev"], "resources": ["tenants/status"],
                           "verbs": ["update"]}),
    ]
}

/// What can go wrong between replicas.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The replica a tenant is to move to is not live.
    #[error("replica {0} is not live")]
    NotLive(String),
    /// The tenant's data could not be packed or unpacked.
    #[error("tenant {tenant}: {source}")]
    Io {
        /// The tenant.
        tenant: String,
        /// Why.
        source: std::io::Error,
    },
    /// The other replica could not be reached, or refused.
    #[error("{0}")]
    Peer(#[from] PeerError),
    /// A blocking step did not finish.
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// This replica, and what it knows of the others.
pub struct Replicas {
    me: String,
    namespace: String,
    address: String,
    host: kube::Client,
    peers: Arc<PeerClient>,
    clusters: Arc<Clusters>,
    members: reflector::Store<Lease>,
    tenants: reflector::Store<Tenant>,
    writers: Mutex<Option<(reflector::store::Writer<Lease>, reflector::store::Writer<Tenant>)>>,
    leader: AtomicBool,
    /// Tenants this replica assigned that its view of the tenants does not show yet.
    pending: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("me", &self.me)
            .field("namespace", &self.namespace)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// A live replica.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// Where the others reach it.
    pub address: String,
    /// How many tenants it has open.
    pub load: u64,
}

impl Replicas {
    /// Replica `me`, reached by the others at `address`, keeping its Leases in `namespace` of
    /// the host; `peers` is its client of the others, `clusters` what it serves.
    pub fn new(
        me: &str,
        namespace: &str,
        address: &str,
        host: kube::Client,
        peers: PeerClient,
        clusters: Arc<Clusters>,
    ) -> Arc<Replicas> {
        let (members, members_writer) = reflector::store();
        let (tenants, tenants_writer) = reflector::store();
        Arc::new(Replicas {
            me: me.to_owned(),
            namespace: namespace.to_owned(),
            address: address.to_owned(),
            host,
            peers: Arc::new(peers),
            clusters,
            members,
            tenants,
            writers: Mutex::new(Some((members_writer, tenants_writer))),
            leader: AtomicBool::new(false),
            pending: Mutex::default(),
        })
    }

    /// This replica's name.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The live replicas, by name.
    pub fn live(&self) -> Vec<Member> {
        let now = Timestamp::now();
        let mut live: Vec<Member> = self
            .members
            .state()
            .iter()
            .filter(|lease| lease_is_held(lease, now))
            .filter_map(|lease| {
                let meta = &lease.metadata;
                let name = meta.labels.as_ref()?.get(REPLICA_LABEL)?.clone();
                let annotations = meta.annotations.as_ref()?;
                let address = annotations.get(ADDRESS_ANNOTATION)?.clone();
                let load = annotations.get(LOAD_ANNOTATION).and_then(|l| l.parse().ok());
                Some(Member { name, address, load: load.unwrap_or(0) })
            })
            .collect();
        live.sort_by(|a, b| a.name.cmp(&b.name));
        live
    }

    /// Where live replica `name` is reached.
    fn address_of(&self, name: &str) -> Option<String> {
        self.live().into_iter().find(|m| m.name == name).map(|m| m.address)
    }

    /// Run membership, the views of the replicas and tenants, and assignment while this
    /// replica holds the assigner Lease, until `stop`. Only the first call runs.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Some((members_writer, tenants_writer)) = self.writers.lock().take() else { return };
        let leases: kube::Api<Lease> = kube::Api::namespaced(self.host.clone(), &self.namespace);
        let members = reflector(
            members_writer,
            watcher(leases, watcher::Config::default().labels(REPLICA_LABEL)),
        )
        .default_backoff()
        .for_each(|_| async {});
        let tenants: kube::Api<Tenant> = kube::Api::all(self.host.clone());
        let this = self.clone();
        let tenants = reflector(tenants_writer, watcher(tenants, watcher::Config::default()))
            .default_backoff()
            .applied_objects()
            .for_each(move |tenant| {
                let this = this.clone();
                async move {
                    if let Ok(tenant) = tenant {
                        if this.leader.load(Ordering::Relaxed) {
                            this.assign(&tenant).await;
                        }
                    }
                }
            });
        let renew = async {
            let mut ticker = tokio::time::interval(RENEW_EVERY);
            loop {
                ticker.tick().await;
                if let Err(e) = self.renew_membership().await {
                    tracing::warn!(error = %e, "renewing this replica's Lease failed");
                }
                let leader = match self.hold_assigner().await {
                    Ok(leader) => leader,
                    Err(e) => {
                        tracing::warn!(error = %e, "the assigner Lease");
                        false
                    }
                };
                if leader != self.leader.swap(leader, Ordering::Relaxed) {
                    tracing::info!(replica = %self.me, leader, "assigning tenants to replicas");
                }
                if leader {
                    for tenant in self.tenants.state() {
                        self.assign(&tenant).await;
                    }
                }
            }
        };
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => {}
            () = members => {}
            () = tenants => {}
            () = renew => {}
        }
        // Stopping: another replica may assign at once, and this one is not live.
        if self.leader.swap(false, Ordering::Relaxed) {
            self.release(ASSIGNER).await;
        }
        self.release(&format!("carrel-replica-{}", self.me)).await;
    }

    /// Give up Lease `name` if this replica holds it (its holder emptied and its time run out,
    /// as client-go's leader election releases one).
    async fn release(&self, name: &str) {
        let leases: kube::Api<Lease> = kube::Api::namespaced(self.host.clone(), &self.namespace);
        let Ok(Some(mut lease)) = leases.get_opt(name).await else { return };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.me.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now() - SignedDuration::from_secs(1)));
        if let Err(e) = leases.replace(name, &PostParams::default(), &lease).await {
            tracing::debug!(lease = %name, error = %e, "releasing a Lease");
        }
    }

    /// Renew this replica's membership Lease, with its address and load.
    async fn renew_membership(&self) -> Result<(), kube::Error> {
        let annotations = [
            (ADDRESS_ANNOTATION.to_owned(), self.address.clone()),
            (LOAD_ANNOTATION.to_owned(), self.clusters.open_count().to_string()),
        ];
        let name = format!("carrel-replica-{}", self.me);
        let labels = [(REPLICA_LABEL.to_owned(), self.me.clone())];
        let metadata = ObjectMeta {
            labels: Some(labels.into_iter().collect()),
            annotations: Some(annotations.into_iter().collect()),
            ..ObjectMeta::default()
        };
        self.hold(&name, metadata, true).await.map(|_| ())
    }

    /// Take or keep the assigner Lease: whether this replica holds it.
    async fn hold_assigner(&self) -> Result<bool, kube::Error> {
        self.hold(ASSIGNER, ObjectMeta::default(), false).await
    }

    /// Hold Lease `name` for this replica (taking it from a holder whose time has run out, or
    /// from anyone when `own` says the Lease is this replica's alone), with `metadata`'s labels
    /// and annotations: whether it is held.
    async fn hold(&self, name: &str, metadata: ObjectMeta, own: bool) -> Result<bool, kube::Error> {
        let leases: kube::Api<Lease> = kube::Api::namespaced(self.host.clone(), &self.namespace);
        let now = Timestamp::now();
        let held = |mut lease: Lease, acquired: bool| {
            lease.metadata.labels = metadata.labels.clone().or(lease.metadata.labels);
            lease.metadata.annotations =
                metadata.annotations.clone().or(lease.metadata.annotations);
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if acquired {
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.holder_identity = Some(self.me.clone());
            spec.lease_duration_seconds = Some(LEASE_SECONDS);
            spec.renew_time = Some(MicroTime(now));
            lease
        };
        match leases.get_opt(name).await? {
            None => {
                let mut lease = held(Lease::default(), true);
                lease.metadata.name = Some(name.to_owned());
                match leases.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(lease) => {
                let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
                let mine = holder == Some(self.me.as_str());
                if !mine && !own && lease_is_held(&lease, now) {
                    return Ok(false);
                }
                let lease = held(lease, !mine);
                match leases.replace(name, &PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Give `tenant` a replica if it is new (no status yet) and has none.
    async fn assign(&self, tenant: &Tenant) {
        let Some(name) = tenant.metadata.name.as_deref() else { return };
        if tenant.status.is_some() || tenant.metadata.deletion_timestamp.is_some() {
            self.pending.lock().remove(name);
            return;
        }
        if self.pending.lock().contains_key(name) {
            return;
        }
        let Some(replica) = self.least_loaded() else {
            tracing::warn!(tenant = %name, "no live replica to serve the tenant");
            return;
        };
        let mut assigned = tenant.clone();
        assigned.status = Some(carrel_apiserver::tenant::types::TenantStatus {
            replica: Some(replica.clone()),
            ..Default::default()
        });
        let tenants: kube::Api<Tenant> = kube::Api::all(self.host.clone());
        match tenants.replace_status(name, &PostParams::default(), &assigned).await {
            Ok(_) => {
                tracing::info!(tenant = %name, %replica, "tenant assigned");
                self.pending.lock().insert(name.to_owned(), replica);
            }
            // A newer tenant than this view's (assigned already, or changed): its own event
            // comes.
            Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409) => {}
            Err(e) => tracing::warn!(tenant = %name, error = %e, "assigning the tenant failed"),
        }
    }

    /// The live replica to give a new tenant ([`least_loaded`]), counting the assignments this
    /// replica made that its view does not show yet.
    fn least_loaded(&self) -> Option<String> {
        let tenants = self.tenants.state();
        let mut pending = self.pending.lock();
        let mut assigned: Vec<&str> = Vec::with_capacity(tenants.len() + pending.len());
        for tenant in &tenants {
            let Some(name) = tenant.metadata.name.as_deref() else { continue };
            let replica = tenant.status.as_ref().and_then(|s| s.replica.as_deref());
            if let Some(replica) = replica {
                pending.remove(name);
                assigned.push(replica);
            }
        }
        assigned.extend(pending.values().map(String::as_str));
        least_loaded(&self.live(), assigned)
    }

    /// Send tenant `name`'s data (its directory `dir`, its store closed) to replica `to`.
    pub async fn send(&self, name: &str, dir: &Path, to: &str) -> Result<(), ReplicaError> {
        let address = self.address_of(to).ok_or_else(|| ReplicaError::NotLive(to.to_owned()))?;
        let io = |source| ReplicaError::Io { tenant: name.into(), source };
        // Packed into a file beside the tenant's directory, then streamed from it: a tenant's
        // store is never held in memory whole.
        let archive = dir.with_file_name(format!(".outgoing-{name}.tar"));
        let packed = {
            let (dir, archive) = (dir.to_owned(), archive.clone());
            tokio::task::spawn_blocking(move || pack(&dir, &archive)).await?
        };
        let sent = async {
            let bytes = packed.map_err(io)?;
            let file = tokio::fs::File::open(&archive).await.map_err(io)?;
            let path = format!("{RECEIVE_PREFIX}{name}");
            let body = Body::from_stream(chunks(file));
            self.peers.call(Method::PUT, &address, &path, "application/x-tar", body).await?;
            Ok::<_, ReplicaError>(bytes)
        }
        .await;
        let _ = tokio::fs::remove_file(&archive).await;
        let bytes = sent?;
        tracing::info!(tenant = %name, to, bytes, "tenant data sent");
        Ok(())
    }

    /// The answer of the replica serving `tenant` to its DNS `query` (which came over TCP
    /// when `tcp`), where another live replica serves it; `None` where none does, or it did not
    /// answer.
    pub async fn relay_dns(&self, tenant: &str, query: Vec<u8>, tcp: bool) -> Option<Vec<u8>> {
        let replica =
            self.tenants.get(&ObjectRef::new(tenant))?.status.as_ref()?.replica.clone()?;
        if replica == self.me {
            return None;
        }
        let address = self.address_of(&replica)?;
        let protocol = if tcp { "tcp" } else { "udp" };
        let path = format!("{DNS_PREFIX}{tenant}?protocol={protocol}");
        match self.peers.call(Method::POST, &address, &path, DNS_MESSAGE, Body::from(query)).await {
            Ok(answer) => Some(answer.to_vec()),
            Err(e) => {
                tracing::debug!(%tenant, %replica, error = %e, "relaying a DNS query");
                None
            }
        }
    }

    /// Whether replica `name` is live.
    pub fn is_live(&self, name: &str) -> bool {
        self.address_of(name).is_some()
    }
}

/// Of the `live` replicas, the one to give a new tenant, given the replica of each tenant
/// `assigned`: the fewest tenants, then the fewest open (its load), then the first by name.
fn least_loaded<'a>(
    live: &[Member],
    assigned: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let mut counts: HashMap<&str, usize> = live.iter().map(|m| (m.name.as_str(), 0)).collect();
    for replica in assigned {
        if let Some(count) = counts.get_mut(replica) {
            *count += 1;
        }
    }
    live.iter()
        .min_by_key(|m| (counts.get(m.name.as_str()).copied().unwrap_or(0), m.load, &m.name))
        .map(|m| m.name.clone())
}

/// Whether `lease`'s holder still holds it at `now`.
fn lease_is_held(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else { return false };
    let (Some(MicroTime(renewed)), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds)
    else {
        return false;
    };
    renewed
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .is_ok_and(|until| until > now)
}

/// A 503 that clients retry after a second.
fn retry_soon(message: String) -> Response {
    ApiError::ServiceUnavailable { message, retry_after: Some(1) }.into_response()
}

impl Forward for Replicas {
    fn forward(&self, name: &str, request: Request) -> Forwarded {
        let Some(tenant) = self.tenants.get(&ObjectRef::new(name)) else {
            return Forwarded::NotServed(Box::new(request));
        };
        // A stranger learns nothing of a tenant: answered as for one that does not exist.
        let credentials = request.headers().contains_key(header::AUTHORIZATION)
            || request.extensions().get::<PeerCertificates>().is_some_and(|p| !p.is_empty());
        if !credentials || tenant.metadata.deletion_timestamp.is_some() {
            return Forwarded::NotServed(Box::new(request));
        }
        let replica = tenant.status.as_ref().and_then(|s| s.replica.clone());
        let forwarded = request.extensions().get::<FromReplica>().is_some();
        let address = match replica {
            None => {
                return Forwarded::Answered(Box::pin(async move {
                    retry_soon("the tenant is not served by any replica yet".to_owned())
                }))
            }
            Some(replica) if replica == self.me || forwarded => {
                // Being taken up here, or moved away, or the sender's view is older than ours.
                return Forwarded::Answered(Box::pin(async move {
                    retry_soon(format!("the tenant is being taken up by replica {replica}"))
                }));
            }
            Some(replica) => match self.address_of(&replica) {
                Some(address) => address,
                None => {
                    return Forwarded::Answered(Box::pin(async move {
                        retry_soon(format!(
                            "replica {replica}, which serves the tenant, is not live"
                        ))
                    }))
                }
            },
        };
        let peers = self.peers.clone();
        Forwarded::Answered(Box::pin(async move { peers.forward(&address, request).await }))
    }
}

/// Answers the DNS queries of this replica's tenants that other replicas relay.
pub trait DnsAnswers: Send + Sync + std::fmt::Debug {
    /// Tenant `tenant`'s encoded answer to the encoded `query` (which came over TCP when `tcp`);
    /// `None` where this replica does not serve its DNS.
    fn answer(
        &self,
        tenant: &str,
        query: Vec<u8>,
        tcp: bool,
    ) -> BoxFuture<'static, Option<Vec<u8>>>;
}

/// The routes other replicas reach this one on, for replicas of CA `ca` only: moved tenants'
/// data received ([`RECEIVE_PREFIX`], kept under `data/tenants`, never for a tenant `clusters`
/// serves here), and relayed DNS queries answered by `dns` ([`DNS_PREFIX`]).
pub fn receiving(
    ca: CertificateDer<'static>,
    clusters: Arc<Clusters>,
    data: &Path,
    dns: Option<Arc<dyn DnsAnswers>>,
) -> axum::Router {
    let state = Arc::new(Receiving { ca, clusters, tenants: data.join("tenants"), dns });
    axum::Router::new()
        .route(&format!("{RECEIVE_PREFIX}{{name}}"), axum::routing::put(receive_tenant))
        .route(&format!("{DNS_PREFIX}{{name}}"), axum::routing::post(answer_dns))
        .with_state(state)
}

/// Answer a DNS query of one of this replica's tenants that another replica relayed.
async fn answer_dns(
    axum::extract::State(state): axum::extract::State<Arc<Receiving>>,
    axum::extract::Path(name): axum::extract::Path<String>,
    mut request: Request,
) -> Response {
    carrel_apiserver::peer::admit(&mut request, Some(&state.ca));
    if request.extensions().get::<FromReplica>().is_none() {
        return ApiError::unauthorized().into_response();
    }
    let tcp = request.uri().query().is_some_and(|q| q.contains("protocol=tcp"));
    let Some(dns) = state.dns.clone() else {
        return ApiError::not_found("", "dns", &name).into_response();
    };
    let query = match axum::body::to_bytes(request.into_body(), 64 * 1024).await {
        Ok(query) => query.to_vec(),
        Err(e) => return ApiError::bad_request(format!("reading the query: {e}")).into_response(),
    };
    match dns.answer(&name, query, tcp).await {
        Some(answer) => ([(header::CONTENT_TYPE, DNS_MESSAGE)], answer).into_response(),
        None => ApiError::not_found("", "dns", &name).into_response(),
    }
}

/// Receive a moved tenant's data from the replica that served it (`PUT
/// /carrel/replicas/tenants/<name>`, from a replica's certificate only).
async fn receive_tenant(
    axum::extract::State(state): axum::extract::State<Arc<Receiving>>,
    axum::extract::Path(name): axum::extract::Path<String>,
    mut request: Request,
) -> Response {
    use carrel_apiserver::tenant::types::GROUP;
    carrel_apiserver::peer::admit(&mut request, Some(&state.ca));
    let Some(FromReplica(from)) = request.extensions().get::<FromReplica>().cloned() else {
        return ApiError::unauthorized().into_response();
    };
    if state.clusters.contains(&name) {
        let message = format!("tenant {name} is served here: it is not received again");
        return ApiError::conflict(GROUP, "tenants", &name, &message).into_response();
    }
    if !valid_name(&name) {
        return ApiError::bad_request(format!("{name:?} is not a tenant name")).into_response();
    }
    // Written to a file as it comes, then unpacked from it: never held in memory whole.
    let archive = state.tenants.join(format!(".incoming-{name}.tar"));
    if let Err(e) = save(request.into_body(), &state.tenants, &archive).await {
        let _ = tokio::fs::remove_file(&archive).await;
        return ApiError::bad_request(format!("reading tenant {name}: {e}")).into_response();
    }
    let tenants = state.tenants.clone();
    let stored = {
        let (name, archive) = (name.clone(), archive.clone());
        tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&archive)?;
            receive(&tenants, &name, std::io::BufReader::new(file))
        })
        .await
    };
    let _ = tokio::fs::remove_file(&archive).await;
    match stored {
        Ok(Ok(())) => {
            tracing::info!(tenant = %name, %from, "received a moved tenant's data");
            axum::http::StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => ApiError::internal(format!("storing tenant {name}: {e}")).into_response(),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// What [`receive_tenant`] needs.
#[derive(Debug)]
struct Receiving {
    ca: CertificateDer<'static>,
    clusters: Arc<Clusters>,
    tenants: PathBuf,
    dns: Option<Arc<dyn DnsAnswers>>,
}

/// `body`, written to `path` (in directory `dir`, made if missing) as it arrives.
async fn save(body: Body, dir: &Path, path: &Path) -> std::io::Result<()> {
    use http_body_util::BodyExt as _;
    use tokio::io::AsyncWriteExt as _;
    tokio::fs::create_dir_all(dir).await?;
    let mut file = tokio::fs::File::create(path).await?;
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(std::io::Error::other)?;
        if let Ok(data) = frame.into_data() {
            file.write_all(&data).await?;
        }
    }
    file.flush().await
}

/// `file`'s bytes, a chunk at a time.
fn chunks(
    file: tokio::fs::File,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    use tokio::io::AsyncReadExt as _;
    futures::stream::unfold(file, |mut file| async move {
        let mut chunk = vec![0u8; 256 * 1024];
        match file.read(&mut chunk).await {
            Ok(0) => None,
            Ok(read) => {
                chunk.truncate(read);
                Some((Ok(bytes::Bytes::from(chunk)), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    })
}

/// Tenant `dir`'s files as a tar archive written to `archive`: its size.
fn pack(dir: &Path, archive: &Path) -> std::io::Result<u64> {
    let mut builder = tar::Builder::new(std::io::BufWriter::new(std::fs::File::create(archive)?));
    builder.follow_symlinks(false);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == MOVED_MARKER {
            continue;
        }
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            builder.append_dir_all(&name, &path)?;
        } else {
            builder.append_path_with_name(&path, &name)?;
        }
    }
    let file = builder.into_inner()?.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(file.metadata()?.len())
}

/// Receive tenant `name`'s data, sent by its replica ([`Replicas::send`]), into `tenants/<name>`:
/// unpacked beside it, synced, then renamed into place (replacing what an earlier, unfinished
/// move left).
pub fn receive(tenants: &Path, name: &str, archive: impl std::io::Read) -> std::io::Result<()> {
    if !valid_name(name) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name:?} is not a tenant name"),
        ));
    }
    std::fs::create_dir_all(tenants)?;
    let incoming = tenants.join(format!(".incoming-{name}"));
    if incoming.exists() {
        std::fs::remove_dir_all(&incoming)?;
    }
    std::fs::create_dir_all(&incoming)?;
    tar::Archive::new(archive).unpack(&incoming)?;
    sync_tree(&incoming)?;
    let target = tenants.join(name);
    if target.exists() {
        std::fs::remove_dir_all(&target)?;
    }
    std::fs::rename(&incoming, &target)?;
    std::fs::File::open(tenants)?.sync_all()
}

/// Whether `name` can be a tenant's (a DNS label): nothing else names a directory here.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `fsync` every file and directory under `dir`.
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            std::fs::File::open(entry.path())?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Mark tenant `dir` as sent to replica `to`: once the tenant's status names `to`, the
/// directory is removed (now, or when this replica next looks at the tenant).
pub fn mark_moved(dir: &Path, to: &str) -> std::io::Result<()> {
    let marker = dir.join(MOVED_MARKER);
    std::fs::write(&marker, to)?;
    std::fs::File::open(&marker)?.sync_all()
}

/// Whether tenant `dir` was sent to another replica.
pub fn was_moved(dir: &Path) -> bool {
    dir.join(MOVED_MARKER).exists()
}

/// Forget that tenant `dir` was sent away (it is this replica's again).
pub fn unmark_moved(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(MOVED_MARKER)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_data_arrives_whole_and_replaces_an_unfinished_copy() {
        let from = tempfile::tempdir().unwrap();
        let dir = from.path().join("team-a");
        std::fs::create_dir_all(dir.join("store/db")).unwrap();
        std::fs::create_dir_all(dir.join("pki")).unwrap();
        std::fs::write(dir.join("store/db/conf"), b"sled").unwrap();
        std::fs::write(dir.join("pki/ca.crt"), b"ca").unwrap();
        mark_moved(&dir, "r1").unwrap();
        let archive = from.path().join("team-a.tar");
        let size = pack(&dir, &archive).unwrap();
        assert_eq!(size, std::fs::metadata(&archive).unwrap().len());

        let to = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(to.path().join("team-a/stale")).unwrap();
        receive(to.path(), "team-a", std::fs::File::open(&archive).unwrap()).unwrap();
        let got = to.path().join("team-a");
        assert_eq!(std::fs::read(got.join("store/db/conf")).unwrap(), b"sled");
        assert_eq!(std::fs::read(got.join("pki/ca.crt")).unwrap(), b"ca");
        assert!(!got.join("stale").exists(), "an earlier copy is replaced");
        assert!(!was_moved(&got), "the marker stays with the sender");
        assert!(!to.path().join(".incoming-team-a").exists());
    }

    #[test]
    fn only_a_tenant_name_is_received() {
        let to = tempfile::tempdir().unwrap();
        for bad in ["", "../etc", "a/b", "A", ".incoming-x"] {
            assert!(receive(to.path(), bad, &[][..]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_new_tenant_goes_to_the_live_replica_with_the_fewest_then_the_least_load() {
        let member = |name: &str, load: u64| Member {
            name: name.to_owned(),
            address: format!("{name}:6443"),
            load,
        };
        let live = [member("r0", 5), member("r1", 0), member("r2", 0)];
        // By count first, whatever the load.
        assert_eq!(least_loaded(&live, ["r1", "r2", "r2"]).as_deref(), Some("r0"));
        // Equal counts: the least load, then the name.
        assert_eq!(least_loaded(&live, ["r0", "r1", "r2"]).as_deref(), Some("r1"));
        assert_eq!(least_loaded(&live, []).as_deref(), Some("r1"));
        // Tenants of a replica that is not live count for none.
        assert_eq!(least_loaded(&live[..2], ["r1", "gone", "gone"]).as_deref(), Some("r0"));
        assert_eq!(least_loaded(&[], ["r0"]), None);
    }

    #[test]
    fn a_lease_is_held_until_its_duration_has_passed() {
        let now = Timestamp::now();
        let lease = |renewed: Timestamp| Lease {
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(LEASE_SECONDS),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        };
        assert!(lease_is_held(&lease(now), now));
        assert!(!lease_is_held(&lease(now - SignedDuration::from_secs(16)), now));
        assert!(!lease_is_held(&Lease::default(), now));
    }
}
