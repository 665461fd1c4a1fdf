//! A connection's requests in flight and when it last had one, for the idle close.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a connection is doing: how many requests are in flight, and since when it has had none.
#[derive(Debug)]
pub(super) struct Activity {
    pub(super) start: Instant,
    /// The connection's limit on a request head, for the 431 answer's message.
    pub(super) max_header_bytes: usize,
    pub(super) in_flight: AtomicUsize,
    /// When the last request ended, in milliseconds since `start`.
    pub(super) last_ms: AtomicU64,
}

impl Activity {
    pub(super) fn new(max_header_bytes: usize) -> Activity {
        Activity {
            start: Instant::now(),
            max_header_bytes,
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    pub(super) fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// How long the connection has had no request in flight; `None` while one is.
    pub(super) fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::SeqCst));
        Some(self.start.elapsed().saturating_sub(last))
    }

    /// Resolves once the connection has had no request in flight for `timeout`.
    pub(super) async fn idle(&self, timeout: Duration) {
        loop {
            match self.idle_for() {
                Some(idle) if idle >= timeout => return,
                Some(idle) => tokio::time::sleep(timeout - idle).await,
                None => tokio::time::sleep(timeout).await,
            }
        }
    }
}

/// A request in flight; it ends when its response has been sent in full, or dropped.
#[derive(Debug)]
pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = u64::try_from(self.0.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_ms.store(now, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
