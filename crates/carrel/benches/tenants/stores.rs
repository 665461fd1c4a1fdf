//! Stores: serving a tenant from a fresh and from a reopened store.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use carrel_apiserver::auth::ca::TenantCa;
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::Api;
use carrel_bench::{ms, ratio, Run, Table};
use carrel_store::{Options, SledStore};
use carrel_tenants::{ADMIN_GROUP, ADMIN_USER};

use crate::latency::{run_of, s};
use crate::{BenchResult, ADMIN_VALIDITY, STORE_SAMPLES};

#[derive(Debug)]
pub(crate) struct StoreTimes {
    /// `SledStore::open`.
    pub(crate) open: Run,
    /// `SledStore::open`, then `Api::new` over it (on a fresh store it writes the bootstrap
    /// objects), then the tenant's credentials (generated when fresh, read when reopened).
    pub(crate) total: Run,
    /// The credentials alone.
    credentials: Run,
    /// Writes by `Api::new` on a fresh store.
    pub(crate) writes: u64,
}

/// What the manager does to serve a tenant, `STORE_SAMPLES` times: open its store, bootstrap a
/// tenant cluster in it (`Api::new`) and make or load its credentials (`fresh` = in new
/// directories under `dir`, otherwise the latency section's tenants in `dir`, after Carrel
/// stopped, as a manager that had closed an idle tenant's store would reopen it).
pub(crate) fn tenant_stores(dir: &Path, fresh: bool) -> BenchResult<StoreTimes> {
    let (mut open, mut total, mut credentials, mut writes) =
        (Vec::new(), Vec::new(), Vec::new(), 0);
    for i in 0..STORE_SAMPLES {
        let name = format!("t-{i:03}");
        let (store_dir, pki) = if fresh {
            (dir.join(&name).join("store"), dir.join(&name).join("pki"))
        } else {
            (
                dir.join("tenants").join(&name).join("store"),
                dir.join("tenants").join(&name).join("pki"),
            )
        };
        let options = if fresh { Options::create() } else { Options::default() };
        let t = Instant::now();
        let store = Arc::new(SledStore::open(&store_dir, options)?);
        open.push(t.elapsed());
        let api = Api::new(store).map_err(|e| e.to_string())?;
        let c = Instant::now();
        let ca = TenantCa::load_or_generate(&pki, &name)?;
        Signer::load_or_generate(&pki)?;
        if fresh {
            ca.load_or_issue_client(&pki, "admin", ADMIN_USER, &[ADMIN_GROUP], ADMIN_VALIDITY)?;
        }
        credentials.push(c.elapsed());
        total.push(t.elapsed());
        writes = api.current_revision();
    }
    Ok(StoreTimes {
        open: run_of(open.into_iter()),
        total: run_of(total.into_iter()),
        credentials: run_of(credentials.into_iter()),
        writes,
    })
}

pub(crate) fn store_rows(table: &mut Table, fresh: &StoreTimes, reopen: Option<&StoreTimes>) {
    table.header(&format!(
        "Serving a tenant: its store, Api::new and credentials, {STORE_SAMPLES} one after another \
         (what creating a tenant does before it is served; what reopening a closed one would add)"
    ));
    table.row(
        &format!("fresh store + Api::new ({} writes) + credentials: p50", fresh.writes),
        ms(fresh.total.p50()),
        format!("bare SledStore::open {}", ms(fresh.open.p50())),
        ratio(s(fresh.total.p50()), s(fresh.open.p50())),
        String::new(),
    );
    table.row(
        "  of which new credentials (CA, token key, admin cert): p50",
        ms(fresh.credentials.p50()),
        String::new(),
        String::new(),
        String::new(),
    );
    let Some(reopen) = reopen else {
        table.row("reopen a closed tenant", "failed".into(), "".into(), "".into(), "".into());
        return;
    };
    for (what, p) in [("p50", 50.0), ("p99", 99.0)] {
        let ours = reopen.total.percentile(p);
        let fresh_total = fresh.total.percentile(p);
        table.row(
            &format!("reopen: store + Api::new + credentials: {what}"),
            ms(ours),
            format!("fresh {}", ms(fresh_total)),
            ratio(s(ours), s(fresh_total)),
            String::new(),
        );
    }
}
