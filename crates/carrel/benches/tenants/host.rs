//! Carrel, as `carrel up` runs it: the host API, the tenant manager and the listener.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_apiserver::access::Security;
use carrel_apiserver::api::Target;
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::http::clusters_router;
use carrel_apiserver::http::Clusters;
use carrel_apiserver::kubeconfig;
use carrel_apiserver::registry::carrel::tenants::TENANTS;
use carrel_apiserver::tenant::types::{Tenant, TenantSpec};
use carrel_apiserver::tls::{self, Certificates};
use carrel_apiserver::{Api, Server};
use carrel_store::{Event, EventKind, Options, SledStore};
use carrel_tenants::{Manager, KUBECONFIG_SECRET};
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::{BenchResult, HOST_ISSUER};

/// A running host API with its tenant manager and listener.
pub(crate) struct Host {
    pub(crate) api: Arc<Api>,
    pub(crate) clusters: Arc<Clusters>,
    pub(crate) kubeconfig: String,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) seen: Arc<Mutex<Seen>>,
}

/// When this process's host watches saw each tenant become Ready and its kubeconfig Secret
/// appear.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) ready: HashMap<String, Instant>,
    pub(crate) secret: HashMap<String, Instant>,
}

/// Start Carrel in `data` as `carrel up` does, on `rt`.
pub(crate) fn start_host(rt: &Runtime, data: &Path) -> BenchResult<Host> {
    std::fs::create_dir_all(data)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let hosts = [addr.ip().to_string(), "127.0.0.1".to_owned(), "localhost".to_owned()];
        let certs = Certificates::load_or_generate(&data.join("pki"), &hosts)?;
        let store = SledStore::open(data.join("host"), Options::create())?;
        let api = Arc::new(Api::host(Arc::new(store)).map_err(|e| e.to_string())?);
        let tokens = Signer::load_or_generate(&data.join("pki"))?;
        let security = Security::new(certs.ca_der()?, Some(tokens), HOST_ISSUER);
        let host_server = Arc::new(Server::secured(api.clone(), "", Arc::new(security)));
        let clusters = Arc::new(Clusters::new(host_server.clone()));
        let endpoint = format!("https://{addr}");
        let manager_tokens = Signer::load_or_generate(&data.join("pki"))?;
        let manager_client =
            carrel_tenants::in_process_client(host_server, Some((manager_tokens, HOST_ISSUER)))?;
        let manager = Arc::new(Manager::new(
            manager_client,
            clusters.clone(),
            data,
            &endpoint,
            Some(certs.ca_pem.clone()),
        ));
        let kubeconfig = kubeconfig::admin(&endpoint, Some(&certs));
        let config = certs.server_config()?;
        let (stop, stopped) = watch::channel(false);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let after = api.current_revision();
        tokio::spawn(follow(api.clone(), Followed::Tenants, after, seen.clone(), stopped.clone()));
        tokio::spawn(follow(api.clone(), Followed::Secrets, after, seen.clone(), stopped.clone()));
        tokio::spawn(manager.run(Duration::from_secs(1), stopped.clone()));
        let mut until = stopped;
        tokio::spawn(tls::serve(listener, config, clusters_router(clusters.clone()), async move {
            let _ = until.wait_for(|s| *s).await;
        }));
        Ok(Host { api, clusters, kubeconfig, stop, seen })
    })
}

#[derive(Clone, Copy, Debug)]
enum Followed {
    Tenants,
    Secrets,
}

/// Note when each tenant becomes Ready, or gets its kubeconfig Secret, from a watch of the host
/// store (no polling: the events come as the manager's writes become durable).
async fn follow(
    api: Arc<Api>,
    what: Followed,
    mut after: carrel_store::Revision,
    seen: Arc<Mutex<Seen>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let watched = match what {
            Followed::Tenants => api.watch(&Target { rt: &TENANTS, namespace: None }, after),
            Followed::Secrets => match carrel_apiserver::resource::built_in("", "secrets") {
                Some(rt) => api.watch(&Target { rt, namespace: None }, after),
                None => return,
            },
        };
        let mut events = match watched {
            Ok(w) => w,
            Err(e) => {
                println!("  (watching {what:?} failed: {e}; the breakdown rows will be empty)");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                next = events.next() => match next {
                    Some(Ok(event)) => {
                        after = event.revision;
                        note(&seen, what, &event);
                    }
                    Some(Err(e)) => {
                        println!("  (the {what:?} watch ended: {e}; watching again)");
                        break;
                    }
                    None => return,
                },
            }
        }
    }
}

fn note(seen: &Mutex<Seen>, what: Followed, event: &Event) {
    if event.kind == EventKind::Deleted {
        return;
    }
    let now = Instant::now();
    let mut parts = event.key.rsplit('/');
    let (Some(name), namespace) = (parts.next(), parts.next()) else { return };
    let mut seen = seen.lock();
    match what {
        Followed::Tenants => {
            if seen.ready.contains_key(name) {
                return;
            }
            let object: Value = serde_json::from_slice(&event.value).unwrap_or_default();
            if object.pointer("/status/phase").and_then(Value::as_str) == Some("Ready") {
                seen.ready.insert(name.to_owned(), now);
            }
        }
        Followed::Secrets => {
            let tenant = namespace.and_then(|ns| ns.strip_prefix("carrel-"));
            if let (KUBECONFIG_SECRET, Some(tenant)) = (name, tenant) {
                seen.secret.entry(tenant.to_owned()).or_insert(now);
            }
        }
    }
}

/// A kube client from a kubeconfig's text, as kubectl would make one.
pub(crate) async fn client_from(kubeconfig: &str) -> BenchResult<kube::Client> {
    let parsed = Kubeconfig::from_yaml(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// POST a `Tenant` to the host API, as `carrel tenant create` does.
pub(crate) async fn create_tenant(client: &kube::Client, name: &str) -> BenchResult<()> {
    let tenant = Tenant {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        spec: Some(TenantSpec::default()),
        ..Default::default()
    };
    kube::Api::<Tenant>::all(client.clone()).create(&PostParams::default(), &tenant).await?;
    Ok(())
}
