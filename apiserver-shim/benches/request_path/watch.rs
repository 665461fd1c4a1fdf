//! Watch delivery: many watches multiplexed over a few HTTP/2 connections, one writer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use carrel_bench::{ms, Run};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use tokio::sync::{Barrier, Notify};

use crate::clients::{configmap, connect, connect_all, exchange, expect, Endpoint};
use crate::{
    BenchResult, CM_PATH, REQUEST_TIMEOUT, WATCHERS, WATCH_CONNECTIONS, WATCH_EVENTS, WATCH_GAP,
    WATCH_TIMEOUT,
};

/// One or more watch measurements, pooled.
#[derive(Default)]
pub(crate) struct WatchRun {
    /// For every (watcher, event): from the CREATE's response at the writer (the write is
    /// durable then) to the event's arrival at the watcher; zero when the event came first.
    pub(crate) after_response: Run,
    /// For every (watcher, event): from sending the CREATE to the event's arrival.
    pub(crate) after_send: Run,
    /// For every event: from the CREATE's response until the last watcher has it.
    pub(crate) last: Run,
    /// For every run: how long opening every watch took (every response head received).
    pub(crate) open: Run,
}

impl WatchRun {
    pub(crate) fn describe(&self) -> String {
        format!(
            "opened in {}; after the response p50 {}, p99 {}; after sending p50 {}, p99 {}; \
             last watcher p50 {}, p99 {}",
            ms(self.open.p50()),
            ms(self.after_response.p50()),
            ms(self.after_response.p99()),
            ms(self.after_send.p50()),
            ms(self.after_send.p99()),
            ms(self.last.p50()),
            ms(self.last.p99())
        )
    }

    pub(crate) fn merge(&mut self, other: WatchRun) {
        self.after_response.merge(other.after_response);
        self.after_send.merge(other.after_send);
        self.last.merge(other.last);
        self.open.merge(other.open);
    }
}

/// Counts of the watchers that have each event, and a wake-up for the writer when one is
/// complete.
struct Arrivals {
    counts: Vec<AtomicUsize>,
    complete: Notify,
}

/// `WATCHERS` watches of the ConfigMaps from `rv`, spread over `WATCH_CONNECTIONS` HTTP/2
/// connections; then a writer on a connection of its own creating `WATCH_EVENTS` ConfigMaps
/// one at a time, each once every watcher has the one before and `WATCH_GAP` has passed.
pub(crate) async fn watch_run(ep: &Arc<Endpoint>, rv: &str, tag: &str) -> BenchResult<WatchRun> {
    let path = format!("{CM_PATH}?watch=true&resourceVersion={rv}");
    let connections = connect_all(ep, WATCH_CONNECTIONS).await?;
    let mut writer = connect(ep).await?;
    let arrivals = Arc::new(Arrivals {
        counts: (0..WATCH_EVENTS).map(|_| AtomicUsize::new(0)).collect(),
        complete: Notify::new(),
    });
    let opened = Arc::new(Barrier::new(WATCHERS + 1));
    let opening = Instant::now();
    let mut tasks = Vec::with_capacity(WATCHERS);
    for w in 0..WATCHERS {
        let mut sender = connections[w % WATCH_CONNECTIONS].clone();
        let request = ep.request(Method::GET, &path, None)?;
        let (opened, arrivals) = (opened.clone(), arrivals.clone());
        tasks.push(tokio::spawn(async move {
            let response = tokio::time::timeout(REQUEST_TIMEOUT, async {
                sender.ready().await?;
                sender.send_request(request).await
            })
            .await;
            // The response's head comes once the server has registered the watch.
            opened.wait().await;
            let response = response.map_err(|_| "opening a watch timed out")??;
            if response.status() != StatusCode::OK {
                return Err(format!("watch: got {}", response.status()).into());
            }
            watcher(response.into_body(), &arrivals).await
        }));
    }
    tokio::time::timeout(REQUEST_TIMEOUT, opened.wait())
        .await
        .map_err(|_| "the watches did not open")?;
    let open = opening.elapsed();

    let mut sent = Vec::with_capacity(WATCH_EVENTS);
    let mut acked = Vec::with_capacity(WATCH_EVENTS);
    for (event, count) in arrivals.counts.iter().enumerate() {
        let body = configmap(&format!("{tag}-{event:05}"), event);
        let request = ep.request(Method::POST, CM_PATH, Some(body))?;
        sent.push(Instant::now());
        let reply = exchange(&mut writer, request).await?;
        acked.push(Instant::now());
        expect(&reply, StatusCode::CREATED, "the watch writer's CREATE")?;
        let deadline = tokio::time::Instant::now() + WATCH_TIMEOUT;
        loop {
            let complete = arrivals.complete.notified();
            tokio::pin!(complete);
            complete.as_mut().enable();
            if count.load(Ordering::Acquire) >= WATCHERS {
                break;
            }
            tokio::time::timeout_at(deadline, complete)
                .await
                .map_err(|_| format!("event {event} did not reach every watcher"))?;
        }
        tokio::time::sleep(WATCH_GAP).await;
    }

    let mut run = WatchRun::default();
    let mut last = acked.clone();
    let (mut after_response, mut after_send) = (Vec::new(), Vec::new());
    for task in tasks {
        let times = tokio::time::timeout(WATCH_TIMEOUT, task)
            .await
            .map_err(|_| "a watcher did not finish")???;
        for (event, arrival) in times.iter().enumerate() {
            after_response.push(arrival.saturating_duration_since(acked[event]));
            after_send.push(arrival.saturating_duration_since(sent[event]));
            last[event] = last[event].max(*arrival);
        }
    }
    let total = acked.last().copied().unwrap_or(opening) - opening;
    run.after_response = Run::from_parts(after_response, total);
    run.after_send = Run::from_parts(after_send, total);
    let last = last.iter().zip(&acked).map(|(l, a)| l.saturating_duration_since(*a)).collect();
    run.last = Run::from_parts(last, total);
    run.open = Run::from_parts(vec![open], open);
    drop(connections);
    Ok(run)
}

/// Read one watch until it has `WATCH_EVENTS` events, each an `ADDED` line; the time each came.
async fn watcher(
    mut body: hyper::body::Incoming,
    arrivals: &Arrivals,
) -> BenchResult<Vec<Instant>> {
    let mut times = Vec::with_capacity(WATCH_EVENTS);
    let mut line = Vec::new();
    while times.len() < WATCH_EVENTS {
        let frame = tokio::time::timeout(WATCH_TIMEOUT, body.frame())
            .await
            .map_err(|_| "watch delivery timed out")?
            .ok_or("the watch ended early")??;
        let Ok(data) = frame.into_data() else { continue };
        let now = Instant::now();
        for chunk in data.split_inclusive(|&b| b == b'\n') {
            line.extend_from_slice(chunk);
            if line.last() != Some(&b'\n') {
                continue;
            }
            if !line.starts_with(b"{\"type\":\"ADDED\"") {
                let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
                return Err(format!("a watch event that is not ADDED: {shown}").into());
            }
            line.clear();
            let event = times.len();
            if event < WATCH_EVENTS {
                times.push(now);
                if arrivals.counts[event].fetch_add(1, Ordering::AcqRel) + 1 == WATCHERS {
                    arrivals.complete.notify_waiters();
                }
            }
        }
    }
    Ok(times)
}
