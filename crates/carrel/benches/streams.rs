//! Pod streams benchmark: exec and port forwarding through a tenant's API against the same
//! through the host's API directly, in `carrel up` as users run it.
//!
//! Run with `cargo bench -p carrel --bench streams`. A plain program (no harness), bounded in
//! count and time, with a watchdog. It starts the `carrel` binary (`carrel up --sim-nodes 2`) on
//! 127.0.0.1:0, makes one tenant with `carrel tenant create` and one pod in it that declares port
//! 8888, and then, with kube-rs clients over TLS (WebSocket, as kubectl 1.30 on and kube-rs
//! speak it), measures in alternating rounds:
//!
//! | measurement | ours | baseline (same run) | target (issue 20) |
//! |---|---|---|---|
//! | exec round trip | `echo` exec'd in the tenant pod through the tenant's API: the call to the end of its output and its exit status; p50 and p99 of [`EXECS`] | the same exec in its host pod through the host's API, with the host admin's credentials | p50 ≤ 1.5x |
//! | port-forward throughput | [`UPLOADS`] uploads of [`UPLOAD`] bytes each (an HTTP POST to the pod's simulated server, which reads it all before it answers) through a port forward of the tenant's API: bytes per second | the same through a port forward of the host pod through the host's API | ≥ 0.5x |
//!
//! The tenant's path is the host's path and one more hop: the tenant's API server carries each
//! stream to the host's API over its own WebSocket (in the same process), so the ratio is what
//! that hop costs.

#![allow(clippy::print_stdout)]

mod up;

use std::time::{Duration, Instant};

use carrel_bench::{ms, ratio, runtime, section, verdict, watchdog, Run, Table};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use up::{client_from, create_tenant, start, BenchResult};

const EXECS: usize = 200;
const UPLOADS: usize = 6;
const UPLOAD: usize = 32 << 20;
const TARGET_EXEC: f64 = 1.5;
const TARGET_FORWARD: f64 = 0.5;
const WATCHDOG: Duration = Duration::from_secs(600);
const WAIT: Duration = Duration::from_secs(120);
const POD: &str = "streams";

/// One exec of `echo`, to the end of its output and status.
async fn exec_once(pods: &Api<Pod>, name: &str) -> BenchResult<Duration> {
    let start = Instant::now();
    let params = AttachParams::default().stderr(false);
    let mut process = pods.exec(name, ["echo", "round trip"], &params).await?;
    let mut out = String::new();
    process.stdout().ok_or("no stdout")?.read_to_string(&mut out).await?;
    let status = process.take_status().ok_or("no status")?.await.ok_or("no status sent")?;
    if out != "round trip\n" || status.status.as_deref() != Some("Success") {
        return Err(format!("exec answered {out:?}, {status:?}").into());
    }
    Ok(start.elapsed())
}

/// One upload of [`UPLOAD`] bytes through a new port forward, to the server's answer.
async fn upload_once(pods: &Api<Pod>, name: &str, body: &[u8]) -> BenchResult<Duration> {
    let mut forwarder = pods.portforward(name, &[8888]).await?;
    let mut stream = forwarder.take_stream(8888).ok_or("no stream")?;
    let start = Instant::now();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: pod\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let elapsed = start.elapsed();
    if !answer.starts_with("HTTP/1.1 200") {
        return Err(format!("the upload was answered {answer:?}").into());
    }
    drop(stream);
    forwarder.abort();
    Ok(elapsed)
}

async fn wait_running(pods: &Api<Pod>, name: &str) -> BenchResult<()> {
    let running = kube::runtime::wait::await_condition(pods.clone(), name, |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some("Running")
    });
    tokio::time::timeout(WAIT, running).await??;
    Ok(())
}

fn main() -> BenchResult<()> {
    watchdog(WATCHDOG, "streams benchmark");
    let tmp = tempfile::tempdir()?;
    let up = start(&tmp.path().join("data"), &[])?;
    let kubeconfig = tmp.path().join("bench.kubeconfig");
    create_tenant(&up, "bench", &kubeconfig)?;
    let rt = runtime("streams-bench")?;
    let (execs, forwards) = rt.block_on(async {
        let tenant: Api<Pod> = Api::default_namespaced(client_from(&kubeconfig).await?);
        let host: Api<Pod> = Api::namespaced(client_from(&up.kubeconfig).await?, "carrel-bench");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": POD},
            "spec": {"containers": [{"name": "main", "image": "x", "ports": [{"containerPort": 8888}]}]},
        }))?;
        tenant.create(&PostParams::default(), &pod).await?;
        wait_running(&tenant, POD).await?;
        let host_pod = format!("{POD}-x-default");
        // Warm both paths (connections, the host's watch caches).
        for _ in 0..5 {
            exec_once(&tenant, POD).await?;
            exec_once(&host, &host_pod).await?;
        }
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        let start = Instant::now();
        for _ in 0..EXECS {
            ours.push(exec_once(&tenant, POD).await?);
            base.push(exec_once(&host, &host_pod).await?);
        }
        let elapsed = start.elapsed();
        let execs = (Run::from_parts(ours, elapsed), Run::from_parts(base, elapsed));
        let body = vec![b'x'; UPLOAD];
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        let start = Instant::now();
        for _ in 0..UPLOADS {
            ours.push(upload_once(&tenant, POD, &body).await?);
            base.push(upload_once(&host, &host_pod, &body).await?);
        }
        let elapsed = start.elapsed();
        BenchResult::Ok((execs, (Run::from_parts(ours, elapsed), Run::from_parts(base, elapsed))))
    })?;
    let (exec, exec_base) = execs;
    let (forward, forward_base) = forwards;
    println!("exec through the tenant: {}", exec.describe());
    println!("exec through the host: {}", exec_base.describe());

    section("exec round trip and port-forward throughput");
    let mut table = Table::default();
    table.header(
        "One tenant of `carrel up --sim-nodes 2`, kube-rs over TLS and WebSocket; baseline: the \
         same through the host's API to the host pod",
    );
    let p50 = ratio(exec.p50().as_secs_f64(), exec_base.p50().as_secs_f64());
    let p50_ratio = exec.p50().as_secs_f64() / exec_base.p50().as_secs_f64();
    table.row(
        &format!("exec `echo`, p50 of {EXECS}"),
        ms(exec.p50()),
        ms(exec_base.p50()),
        p50,
        verdict(p50_ratio <= TARGET_EXEC, format!("≤ {TARGET_EXEC}x")),
    );
    table.row(
        &format!("exec `echo`, p99 of {EXECS}"),
        ms(exec.p99()),
        ms(exec_base.p99()),
        ratio(exec.p99().as_secs_f64(), exec_base.p99().as_secs_f64()),
        "(none)".into(),
    );
    let mib_per_s = |run: &Run| {
        let seconds = run.p50().as_secs_f64();
        UPLOAD as f64 / seconds / f64::from(1 << 20)
    };
    let (ours, base) = (mib_per_s(&forward), mib_per_s(&forward_base));
    table.row(
        &format!("port-forward upload of {} MiB, median of {UPLOADS}", UPLOAD >> 20),
        format!("{ours:.1} MiB/s"),
        format!("{base:.1} MiB/s"),
        ratio(ours, base),
        verdict(ours / base >= TARGET_FORWARD, format!("≥ {TARGET_FORWARD}x")),
    );
    table.print();
    Ok(())
}
