//! One tenant's cluster: its store opened (or created) in its data directory, its API over it
//! with the tenant's admission, and, on a secured listener, its CA and service-account key; the
//! server that [`Clusters`](carrel_apiserver::http::Clusters) mounts under `/tenants/<name>`.
//! Opening touches the disk only, so it runs on a blocking thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use carrel_apiserver::access::Security;
use carrel_apiserver::admission::TenantAdmission;
use carrel_apiserver::auth::ca::TenantCa;
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::{Api, Server};
use carrel_store::{Options, Quota, SledStore};

use crate::identity::issuer;
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

/// Open tenant `dir`'s cluster, bounding its store by `quota`; `secured` when the listener
/// authenticates (then the tenant has its own CA and token key, made on first use).
pub fn open(dir: &TenantDir, quota: Quota, secured: bool) -> Result<Opened, ManagerError> {
    let name = dir.name.as_str();
    std::fs::create_dir_all(&dir.path).map_err(|source| ManagerError::Io {
        tenant: name.into(),
        path: dir.path.clone(),
        source,
    })?;
    let store = SledStore::open(dir.path.join("store"), Options::create())
        .map_err(|source| ManagerError::Store { tenant: name.into(), source })?;
    let api = Arc::new(Api::new(Arc::new(store))?);
    // Bounded before a request can reach it (its bootstrap objects are the server's own).
    api.store().set_quota(quota);
    carrel_apiserver::event_ttl::start(&api);
    let admission = Arc::new(TenantAdmission::default());
    api.set_admission(admission.clone());
    let base = format!("/tenants/{name}");
    let server = if secured {
        let pki = dir.pki();
        let ca = TenantCa::load_or_generate(&pki, name).map_err(dir.credentials())?;
        let signer = Signer::load_or_generate(&pki).map_err(dir.credentials())?;
        let security = Security::new(ca.cert_der().clone(), Some(signer), &issuer(name));
        Server::secured(api, &base, Arc::new(security))
    } else {
        Server::new(api, &base)
    };
    Ok(Opened { server: Arc::new(server), admission })
}
