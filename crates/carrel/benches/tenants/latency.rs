//! Latency: a tenant's creation to its first successful list of namespaces, and the baseline.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use carrel_bench::{ms, ratio, verdict, Run, Table};
use carrel_tenants::{host_namespace, KUBECONFIG_SECRET};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};

use crate::host::{client_from, create_tenant, Host};
use crate::{BenchResult, POLL, TARGET_P50, TARGET_P99, TENANT_TIMEOUT};

/// One tenant, from its creation to its first successful list of namespaces.
#[derive(Debug)]
pub(crate) struct Sample {
    /// The POST of the `Tenant` answered.
    posted: Duration,
    /// The tenant's API served (`Clusters::tenant`, checked in-process before each poll).
    served: Option<Duration>,
    /// The poll found the kubeconfig Secret.
    secret_polled: Duration,
    /// The host's watch saw the Secret created.
    secret_event: Option<Duration>,
    /// The host's watch saw the tenant's status become Ready.
    ready: Option<Duration>,
    /// The first successful list of namespaces with a client made from the kubeconfig.
    pub(crate) total: Duration,
    /// Host GETs of the Secret.
    pub(crate) polls: usize,
    /// Lists of namespaces that failed before one succeeded.
    list_retries: usize,
}

pub(crate) async fn tenant_latency(
    host: &Host,
    client: &kube::Client,
    name: &str,
) -> BenchResult<Sample> {
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &host_namespace(name));
    let t0 = Instant::now();
    let deadline = t0 + TENANT_TIMEOUT;
    create_tenant(client, name).await?;
    let posted = t0.elapsed();
    let mut served = None;
    let mut polls = 0;
    let config = loop {
        if served.is_none() && host.clusters.tenant(name).is_some() {
            served = Some(t0.elapsed());
        }
        polls += 1;
        let secret = secrets.get_opt(KUBECONFIG_SECRET).await?;
        if let Some(bytes) = secret.and_then(|s| s.data?.remove("kubeconfig")) {
            break String::from_utf8(bytes.0)?;
        }
        if Instant::now() > deadline {
            return Err(format!("tenant {name}: no kubeconfig Secret after {polls} polls").into());
        }
        tokio::time::sleep(POLL).await;
    };
    let secret_polled = t0.elapsed();
    let namespaces: kube::Api<Namespace> = kube::Api::all(client_from(&config).await?);
    let mut list_retries = 0;
    loop {
        match namespaces.list(&ListParams::default()).await {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => {
                return Err(format!("tenant {name}: listing namespaces: {e}").into());
            }
            Err(_) => {
                list_retries += 1;
                tokio::time::sleep(POLL).await;
            }
        }
    }
    let total = t0.elapsed();
    // When the host saw Ready and the Secret (after the clock stopped; these are timestamps).
    let (ready, secret_event) = loop {
        let noted = {
            let seen = host.seen.lock();
            let at = |m: &HashMap<String, Instant>| m.get(name).map(|t| t.duration_since(t0));
            (at(&seen.ready), at(&seen.secret))
        };
        if noted.0.is_some() || Instant::now() > deadline {
            break noted;
        }
        tokio::time::sleep(POLL).await;
    };
    Ok(Sample { posted, served, secret_polled, secret_event, ready, total, polls, list_retries })
}

/// The host API's own create-then-read through the same client path.
#[derive(Debug)]
pub(crate) struct BaseSample {
    posted: Duration,
    pub(crate) total: Duration,
}

pub(crate) async fn baseline_latency(
    client: &kube::Client,
    kubeconfig: &str,
    name: &str,
) -> BenchResult<BaseSample> {
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "default");
    let object = ConfigMap {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        data: Some(BTreeMap::from([("key".to_owned(), "value".to_owned())])),
        ..Default::default()
    };
    let t0 = Instant::now();
    configmaps.create(&PostParams::default(), &object).await?;
    let posted = t0.elapsed();
    let fresh: kube::Api<ConfigMap> =
        kube::Api::namespaced(client_from(kubeconfig).await?, "default");
    fresh.get(name).await?;
    Ok(BaseSample { posted, total: t0.elapsed() })
}

pub(crate) fn run_of(times: impl Iterator<Item = Duration>) -> Run {
    Run::from_parts(times.collect(), Duration::ZERO)
}

pub(crate) fn latency_rows(
    table: &mut Table,
    ours: &[Sample],
    base: &[BaseSample],
    warm: &Sample,
    warm_base: &BaseSample,
    elapsed: Duration,
) {
    let total = run_of(ours.iter().map(|s| s.total));
    let base_total = run_of(base.iter().map(|s| s.total));
    table.header(&format!(
        "Tenant create -> first successful list of namespaces: {} tenants one after another \
         ({:.1} s in all); baseline: host ConfigMap create -> a fresh client's first GET of it",
        ours.len(),
        elapsed.as_secs_f64()
    ));
    let row = |table: &mut Table, what: &str, ours: Duration, base: Duration, target: String| {
        table.row(what, ms(ours), format!("baseline {}", ms(base)), ratio(s(ours), s(base)), target)
    };
    row(
        table,
        "create -> first list OK: p50",
        total.p50(),
        base_total.p50(),
        verdict(total.p50() <= TARGET_P50, format!("<= {}", ms(TARGET_P50))),
    );
    row(
        table,
        "create -> first list OK: p99",
        total.p99(),
        base_total.p99(),
        verdict(total.p99() <= TARGET_P99, format!("<= {}", ms(TARGET_P99))),
    );
    row(
        table,
        "create -> first list OK: max",
        total.percentile(100.0),
        base_total.percentile(100.0),
        String::new(),
    );
    row(
        table,
        "first after start (warm-up, not above)",
        warm.total,
        warm_base.total,
        String::new(),
    );
    let posted = run_of(ours.iter().map(|s| s.posted));
    let base_posted = run_of(base.iter().map(|s| s.posted));
    row(table, "  POST answered: p50", posted.p50(), base_posted.p50(), String::new());
    let served: Vec<Duration> = ours.iter().filter_map(|s| s.served).collect();
    let secret_event: Vec<Duration> = ours.iter().filter_map(|s| s.secret_event).collect();
    let ready: Vec<Duration> = ours.iter().filter_map(|s| s.ready).collect();
    for (what, times) in [
        ("  -> tenant API served (polled): p50", served),
        ("  -> Secret written (host watch): p50", secret_event),
        ("  -> status Ready (host watch): p50", ready),
    ] {
        let n = times.len();
        let run = run_of(times.into_iter());
        let what = if n == ours.len() { what.to_owned() } else { format!("{what} ({n} seen)") };
        table.row(&what, ms(run.p50()), String::new(), String::new(), String::new());
    }
    let polled = run_of(ours.iter().map(|s| s.secret_polled));
    table.row(
        "  -> Secret found by the poll: p50",
        ms(polled.p50()),
        String::new(),
        String::new(),
        String::new(),
    );
    let client_list = run_of(ours.iter().map(|s| s.total - s.secret_polled));
    let client_get = run_of(base.iter().map(|s| s.total - s.posted));
    row(
        table,
        "  new client + first list / GET: p50",
        client_list.p50(),
        client_get.p50(),
        String::new(),
    );
    row(
        table,
        "  new client + first list / GET: p99",
        client_list.p99(),
        client_get.p99(),
        String::new(),
    );
    let polls: usize = ours.iter().map(|s| s.polls).sum();
    let retries: usize = ours.iter().map(|s| s.list_retries).sum();
    table.row(
        "  Secret polls per tenant / failed lists",
        format!("{:.1} / {retries}", polls as f64 / ours.len().max(1) as f64),
        String::new(),
        String::new(),
        String::new(),
    );
}

pub(crate) fn s(d: Duration) -> f64 {
    d.as_secs_f64()
}
