//! One tenant's cluster: its store opened (or created) in its data directory, its API over it
//! with the tenant's admission, and, on a secured listener, its CA and service-account key; the
//! server that [`Clusters`](carrel_apiserver::http::Clusters) mounts under `/tenants/<name>`.
//! Opening touches the disk and makes keys, so it runs on the blocking pool: the store (with its
//! bootstrap) and the credentials at the same time ([`open`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use carrel_apiserver::access::Security;
use carrel_apiserver::admission::TenantAdmission;
use carrel_apiserver::auth::ca::TenantCa;
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::ServiceNetwork;
use carrel_apiserver::{Api, Server};
use carrel_store::{Options, Quota, SledStore};

use crate::identity::{self, issuer};
use crate::manager::ManagerError;

/// Where a tenant's data lives: `<tenants dir>/<name>`, holding `store/` and `pki/`.
#[derive(Clone, Debug)]
pub struct TenantDir {
    /// The tenant.
    pub name: String,
    /// Its directory.
    pub path: PathBuf,
}

impl TenantDir {
    /// Tenant `name`'s directory under `tenants`.
    pub fn new(tenants: &Path, name: &str) -> TenantDir {
        TenantDir { name: name.to_owned(), path: tenants.join(name) }
    }

    /// Its credentials' directory.
    pub fn pki(&self) -> PathBuf {
        self.path.join("pki")
    }

    /// Whether the tenant's store was made (by an earlier opening; whatever of its bootstrap
    /// or credentials is missing is made when it is opened again).
    pub fn is_made(&self) -> bool {
        self.path.join("store").is_dir()
    }

    /// Create the directory if it is missing.
    fn create(&self) -> Result<(), ManagerError> {
        std::fs::create_dir_all(&self.path).map_err(|source| ManagerError::Io {
            tenant: self.name.clone(),
            path: self.path.clone(),
            source,
        })
    }

    fn credentials(&self) -> impl Fn(carrel_apiserver::auth::CredentialError) -> ManagerError + '_ {
        move |source| ManagerError::Credentials { tenant: self.name.clone(), source }
    }
}

/// A tenant's cluster, ready to be mounted.
#[derive(Debug)]
pub struct Opened {
    /// Its API server, under `/tenants/<name>`.
    pub server: Arc<Server>,
    /// Its admission, whose policy follows the `Tenant` object.
    pub admission: Arc<TenantAdmission>,
}

/// A tenant's API over its store, not yet mounted.
#[derive(Debug)]
pub struct TenantApi {
    /// The API.
    pub api: Arc<Api>,
    /// Its admission.
    pub admission: Arc<TenantAdmission>,
}

/// What a tenant's secured API authenticates with: its CA and its service-account token key.
#[derive(Debug)]
pub struct Credentials {
    ca: TenantCa,
    signer: Signer,
}

/// How long a tenant's last store may take to let go of its directory before it is opened again.
const CLOSING_WAIT: Duration = Duration::from_secs(5);

/// Open (or create) tenant `dir`'s store and its API over it, bounded by `quota` once its
/// bootstrap objects (the server's own, written in one commit when the store is new) are in;
/// its Services get addresses of `network`. Blocks on the disk.
pub fn open_api(
    dir: &TenantDir,
    quota: Quota,
    network: ServiceNetwork,
) -> Result<TenantApi, ManagerError> {
    let name = dir.name.as_str();
    dir.create()?;
    // An idle tenant opened again may find its last store still closing, held by a request.
    let options = Options { lock_wait: CLOSING_WAIT, ..Options::create() };
    let store = SledStore::open(dir.path.join("store"), options)
        .map_err(|source| ManagerError::Store { tenant: name.into(), source })?;
    let api = Arc::new(Api::new_in(Arc::new(store), network)?);
    // Bounded before a request can reach it (its bootstrap objects are the server's own).
    api.store().set_quota(quota);
    carrel_apiserver::event_ttl::start(&api);
    let admission = Arc::new(TenantAdmission::default());
    api.set_admission(admission.clone());
    Ok(TenantApi { api, admission })
}

/// Wait until nothing in this process holds tenant `dir`'s store any more (the requests and
/// controllers of a cluster just unmounted let it go), and leave it closed. Blocks.
pub fn close_store(dir: &TenantDir) -> Result<(), ManagerError> {
    let options = Options { lock_wait: CLOSING_WAIT, ..Options::default() };
    let store = SledStore::open(dir.path.join("store"), options)
        .map_err(|source| ManagerError::Store { tenant: dir.name.clone(), source })?;
    drop(store);
    Ok(())
}

/// Tenant `dir`'s credentials, made on first use and kept in its `pki/`: its CA, its
/// service-account token key, and the admin client certificate its kubeconfig carries (see
/// [`identity::admin_credential`]). Key generation and file writes: blocks.
pub fn credentials(dir: &TenantDir) -> Result<Credentials, ManagerError> {
    dir.create()?;
    let pki = dir.pki();
    let ca = TenantCa::load_or_generate(&pki, &dir.name).map_err(dir.credentials())?;
    let signer = Signer::load_or_generate(&pki).map_err(dir.credentials())?;
    identity::admin_credential(&ca, &pki).map_err(dir.credentials())?;
    Ok(Credentials { ca, signer })
}

/// The server of a tenant's API under `/tenants/<name>`: authenticating with `credentials`
/// when given, open otherwise.
pub fn mount(dir: &TenantDir, opened: TenantApi, credentials: Option<Credentials>) -> Opened {
    let TenantApi { api, admission } = opened;
    let base = format!("/tenants/{}", dir.name);
    let server = match credentials {
        Some(Credentials { ca, signer }) => {
            let security = Security::new(ca.cert_der().clone(), Some(signer), &issuer(&dir.name));
            Server::secured(api, &base, Arc::new(security))
        }
        None => Server::new(api, &base),
    };
    Opened { server: Arc::new(server), admission }
}

/// Open tenant `dir`'s cluster, bounding its store by `quota`; `secured` when the listener
/// authenticates (then the tenant has its own CA and token key, made on first use). The store
/// with its bootstrap ([`open_api`]) and the credentials ([`credentials`]) are made at the same
/// time, each on the blocking pool, so neither waits for the other and no async worker waits
/// for either; the cluster is ready as soon as both are.
pub async fn open(
    dir: TenantDir,
    quota: Quota,
    secured: bool,
    network: ServiceNetwork,
) -> Result<Opened, ManagerError> {
    let api = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || open_api(&dir, quota, network))
    };
    let credentials = secured.then(|| {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || credentials(&dir))
    });
    let api = api.await??;
    let credentials = match credentials {
        Some(task) => Some(task.await??),
        None => None,
    };
    Ok(mount(&dir, api, credentials))
}
